"""Index merging: indices that always travel together become one index before lowering.

If ``a`` is directly followed by ``b`` in every tensor that has either of them, then in every
tensor, in either layout, the pair addresses memory exactly like one index of extent
``N_a * N_b``: merging them is a reshape of each tensor and needs no arithmetic at all, not even
to unmerge. Later stages see fewer, longer indices, which tile better and fill more blocks; this
is the first step of TCCG's GETT, which treats a contraction as a GEMM over such groups
(Springer and Bientinesi, "Design of a high-performance GEMM-like Tensor-Tensor
Multiplication", ACM TOMS 2018, section 3).

Example: in ``C[a,b,c] = A[a,b,k]*B[k,c]`` the indices a and b merge into ``a_b``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from .contraction import Contraction, analyse, leaves
from .tree import Add, Mul, Neg, Node, Operation, Read, Sub

SEPARATOR = "_"


@dataclass(frozen=True)
class Merging:
    """An expression before and after merging; ``groups`` maps each merged index of
    ``merged`` to the expression's indices it stands for, slowest-varying first in C order
    (every index of ``merged`` has an entry, most of them one index long)."""

    original: Contraction
    merged: Contraction
    groups: dict[str, tuple[str, ...]]

    @property
    def merges(self) -> dict[str, tuple[str, ...]]:
        """Only the indices that stand for more than one."""
        return {name: parts for name, parts in self.groups.items() if len(parts) > 1}

    def sizes(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """Extents of the merged indices from the expression's: products of their parts."""
        return {name: math.prod(sizes[i] for i in parts) for name, parts in self.groups.items()}

    def describe(self) -> str:
        """``a,b -> a_b; d,e -> d_e``, or an empty string when nothing merged."""
        return "; ".join(f"{','.join(parts)} -> {name}" for name, parts in self.merges.items())


def merge(contraction: Contraction) -> Merging:
    """Merge every run of indices that appear together, in the same order, in every tensor."""
    lists = _index_lists(contraction)
    chains = _chains(contraction.indices, lists)
    if all(len(chain) == 1 for chain in chains):
        groups = {i: (i,) for i in contraction.indices}
        return Merging(contraction, contraction, groups)
    taken = {contraction.output, *contraction.inputs, *contraction.scalars, *contraction.indices}
    renamed: dict[str, str] = {}
    for chain in chains:
        name = _fresh(SEPARATOR.join(chain), taken) if len(chain) > 1 else chain[0]
        taken.add(name)
        for index in chain:
            renamed[index] = name
    renamed = {chain[0]: renamed[chain[0]] for chain in chains}  # the others disappear
    tree = contraction.tree
    merged_tree = Operation(
        replace(tree.write, indices=_renamed(tree.write.indices, renamed), index_positions=()),
        _merged_node(tree.expr, renamed))
    merged = analyse(replace(merged_tree, source=repr(merged_tree)))
    groups = {renamed[chain[0]]: chain for chain in chains}
    return Merging(contraction, merged, {i: groups[i] for i in merged.indices})


def _index_lists(c: Contraction) -> list[tuple[str, ...]]:
    """Every index list a tensor is used with: the output's and each distinct read's."""
    reads = [leaf.indices for leaf in leaves(c.tree.expr) if isinstance(leaf, Read)]
    return list(dict.fromkeys([c.output_indices, *reads]))


def _chains(indices: tuple[str, ...], lists: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Maximal runs ``a, b, ..`` where each index is followed by the next in every list that
    holds either; an index repeated within a list (a diagonal) merges with nothing."""
    repeated = {i for indices_ in lists for i in indices_ if indices_.count(i) > 1}

    def follower(index: str) -> str | None:
        after = {lst[lst.index(index) + 1] if lst.index(index) + 1 < len(lst) else None
                 for lst in lists if index in lst}
        return after.pop() if len(after) == 1 else None

    def leader(index: str) -> str | None:
        before = {lst[lst.index(index) - 1] if lst.index(index) > 0 else None
                  for lst in lists if index in lst}
        return before.pop() if len(before) == 1 else None

    joined = {a: b for a in indices if a not in repeated
              for b in [follower(a)] if b is not None and b not in repeated and leader(b) == a}
    starts = [i for i in indices if i not in joined.values()]
    chains = []
    for start in starts:
        chain = [start]
        while chain[-1] in joined:
            chain.append(joined[chain[-1]])
        chains.append(tuple(chain))
    return chains


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, or ``name_2``, ``name_3``.. if an index, tensor or scalar has it."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{SEPARATOR}{n}"
    return candidate


def _renamed(indices: tuple[str, ...], renamed: dict[str, str]) -> tuple[str, ...]:
    """The first index of each run stands for the run; the rest of it is dropped."""
    return tuple(renamed[i] for i in indices if i in renamed)


def _merged_node(node: Node, renamed: dict[str, str]) -> Node:
    if isinstance(node, Read):
        return Read(node.tensor, _renamed(node.indices, renamed))
    if isinstance(node, Neg):
        return Neg(_merged_node(node.operand, renamed))
    if isinstance(node, (Add, Sub, Mul)):
        return type(node)(_merged_node(node.left, renamed), _merged_node(node.right, renamed))
    return node
