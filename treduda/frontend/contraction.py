"""The validated, normalised contraction that later stages lower to isl.

:func:`analyse` checks what the grammar cannot (ranks, index usage, name roles) and expands the
right-hand side into a sum of monomials, because every monomial becomes its own loop nest: an
index missing from the output is summed within the monomial that reads it (Einstein convention
per product term). :func:`resolve_sizes` and :func:`infer_sizes` then give every index an extent.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from treduda.errors import (
    ArgumentError,
    IndexUsageError,
    InvalidName,
    MissingArray,
    MissingSize,
    RankMismatch,
    ShapeMismatch,
    SizeLimit,
    caret,
    did_you_mean,
)
from treduda.frontend.parse import parse
from treduda.frontend.tree import Add, Literal, Mul, Neg, Node, Operation, Read, Scalar, Sub, Write

# The largest element offset a kernel's index holds: 64-bit ``long long`` (``long`` in OpenCL)
# where a tensor passes 2^31 - 1 elements (treduda.polyhedral.ast_build._index_bits), and no
# kernel uses wider ones; a larger constant is beyond what nvcc's C++ accepts.
INDEX_LIMIT = 2**63 - 1


def _unique(names: Iterator[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Term:
    """One monomial of the expanded right-hand side: ``coefficient * scalars * reads``."""

    coefficient: float
    scalars: tuple[str, ...]
    reads: tuple[Read, ...]

    def summed(self, output: tuple[str, ...]) -> tuple[str, ...]:
        """Indices of this term's reads absent from ``output``, in order of first appearance."""
        return _unique(i for read in self.reads for i in read.indices if i not in output)


@dataclass(frozen=True)
class Contraction:
    """A checked expression: who is read and written, with which indices, as a sum of terms."""

    source: str = field(compare=False)
    tree: Operation
    output: str
    output_indices: tuple[str, ...]
    op: str
    terms: tuple[Term, ...]
    inputs: dict[str, tuple[str, ...]] = field(hash=False)
    scalars: tuple[str, ...]
    indices: tuple[str, ...]
    reads_output: bool

    @property
    def summed(self) -> tuple[str, ...]:
        """Indices absent from the output, in order of first appearance."""
        return self.indices[len(self.output_indices):]

    @property
    def read_names(self) -> tuple[str, ...]:
        """The names whose values a call needs: the inputs, the scalars, and the output where
        its old values are used (``+=``, ``-=``, or read on the right)."""
        old = (self.output,) if self.reads_output or self.op != "=" else ()
        return (*self.inputs, *self.scalars, *old)

    def rank(self, tensor: str) -> int:
        """Number of indices of ``tensor`` (the output or an input)."""
        if tensor == self.output:
            return len(self.output_indices)
        if tensor not in self.inputs:
            known = ", ".join([self.output, *self.inputs])
            raise KeyError(f"{tensor!r} is not a tensor of {self.tree!r}; its tensors are {known}")
        return len(self.inputs[tensor])

    def __repr__(self) -> str:
        summed = f"; summed: {', '.join(self.summed)}" if self.summed else ""
        return f"Contraction({self.tree!r}{summed})"


def analyse(tree_or_text: Operation | str) -> Contraction:
    """Check an expression (parsing it first if given text) and normalise it to a sum of terms.

    Raises :class:`RankMismatch`, :class:`IndexUsageError` or :class:`InvalidName` with a caret
    at the offending token, on top of whatever :func:`~treduda.frontend.parse.parse` raises.
    """
    tree = parse(tree_or_text) if isinstance(tree_or_text, str) else tree_or_text
    found = list(leaves(tree.expr))
    reads = [leaf for leaf in found if isinstance(leaf, Read)]
    _check_roles(tree, found)
    _check_ranks(tree, reads)
    _check_output_reads(tree, reads)
    _check_output_indices(tree, reads)
    output = tree.write.indices
    inputs: dict[str, tuple[str, ...]] = {}
    for read in reads:
        if read.tensor != tree.write.tensor:
            inputs.setdefault(read.tensor, read.indices)
    return Contraction(
        source=tree.source,
        tree=tree,
        output=tree.write.tensor,
        output_indices=output,
        op=tree.write.op,
        terms=tuple(_expand(tree.expr)),
        inputs=inputs,
        scalars=_unique(leaf.name for leaf in found if isinstance(leaf, Scalar)),
        indices=output + _unique(i for r in reads for i in r.indices if i not in output),
        reads_output=any(read.tensor == tree.write.tensor for read in reads),
    )


def leaves(node: Node) -> Iterator[Read | Scalar | Literal]:
    """The leaves of ``node`` from left to right, which is their order in the text."""
    if isinstance(node, Neg):
        yield from leaves(node.operand)
    elif isinstance(node, (Add, Sub, Mul)):
        yield from leaves(node.left)
        yield from leaves(node.right)
    else:
        yield node


def _expand(node: Node) -> list[Term]:
    """Distribute products over sums; signs and literals fold into the coefficient."""
    if isinstance(node, Read):
        return [Term(1.0, (), (node,))]
    if isinstance(node, Scalar):
        return [Term(1.0, (node.name,), ())]
    if isinstance(node, Literal):
        return [Term(node.value, (), ())]
    if isinstance(node, Neg):
        return [_negate(term) for term in _expand(node.operand)]
    if isinstance(node, Add):
        return _expand(node.left) + _expand(node.right)
    if isinstance(node, Sub):
        return _expand(node.left) + [_negate(term) for term in _expand(node.right)]
    if isinstance(node, Mul):
        right = _expand(node.right)
        return [
            Term(a.coefficient * b.coefficient, a.scalars + b.scalars, a.reads + b.reads)
            for a in _expand(node.left)
            for b in right
        ]
    raise TypeError(f"not an expression node: {node!r}")


def _negate(term: Term) -> Term:
    return Term(-term.coefficient, term.scalars, term.reads)


def _index_uses(indices: tuple[str, ...], positions: tuple[int, ...], fallback: int
                ) -> Iterator[tuple[str, int]]:
    """Pair indices with their positions; hand-built trees may lack positions."""
    return zip(indices, positions or (fallback,) * len(indices), strict=True)


_ROLES = {"tensor": "a tensor", "index": "an index", "scalar": "a scalar"}


def _check_roles(tree: Operation, found: list[Read | Scalar | Literal]) -> None:
    """One name, one role: tensors, scalars and indices all become C identifiers in one scope."""
    write = tree.write
    uses = [("tensor", write.tensor, write.position)]
    uses += [("index", i, p) for i, p in _index_uses(write.indices, write.index_positions,
                                                     write.position)]
    for leaf in found:
        if isinstance(leaf, Read):
            uses.append(("tensor", leaf.tensor, leaf.position))
            uses += [("index", i, p) for i, p in _index_uses(leaf.indices, leaf.index_positions,
                                                             leaf.position)]
        elif isinstance(leaf, Scalar):
            uses.append(("scalar", leaf.name, leaf.position))
    first: dict[str, tuple[str, int]] = {}
    for role, name, position in uses:
        first_role, first_position = first.setdefault(name, (role, position))
        if role != first_role:
            raise InvalidName(
                f"'{name}' is used as {_ROLES[role]} here but as {_ROLES[first_role]} at character "
                f"{first_position + 1}; a name can only be one of tensor, index or scalar",
                tree.source, position, len(name),
            )


def _check_ranks(tree: Operation, reads: list[Read]) -> None:
    first: dict[str, Read] = {tree.write.tensor: Read(tree.write.tensor, tree.write.indices,
                                                      tree.write.position)}
    for read in reads:
        seen = first.setdefault(read.tensor, read)
        if len(read.indices) != len(seen.indices):
            raise RankMismatch(
                f"{read.tensor} is used with {_count(len(read.indices), 'index', 'indices')} "
                f"here but with {_count(len(seen.indices), 'index', 'indices')} at character "
                f"{seen.position + 1} ({seen!r}); a tensor has one rank",
                tree.source, read.position, len(read.tensor),
            )


def _check_output_reads(tree: Operation, reads: list[Read]) -> None:
    """Each thread may read only the output element it writes; anything else is a data race."""
    write = tree.write
    for read in reads:
        if read.tensor == write.tensor and read.indices != write.indices:
            own = Read(write.tensor, write.indices)
            raise IndexUsageError(
                f"the output {write.tensor} may only be read as {own!r} (elementwise); "
                f"reading {read!r} would race with the writes",
                tree.source, read.position, len(read.tensor),
            )


def _check_output_indices(tree: Operation, reads: list[Read]) -> None:
    """An output index no read uses has no extent and would write one value many times."""
    provided = {i for read in reads for i in read.indices}
    write = tree.write
    for index, position in _index_uses(write.indices, write.index_positions, write.position):
        if index not in provided:
            raise IndexUsageError(
                f"output index '{index}' is not used by any tensor on the right-hand side; "
                "every output index must appear in at least one read",
                tree.source, position, len(index),
            )


def _count(n: int, singular: str, plural: str) -> str:
    return f"{n} {singular if n == 1 else plural}"


def check_arguments(c: Contraction, names: Iterable[str], options: Iterable[str] = ()) -> None:
    """Raise :class:`ArgumentError` for a name that is none of ``c``'s tensors and scalars
    (nor one of ``options``, a call's keyword arguments), with the closest name."""
    known = [c.output, *c.inputs, *c.scalars]
    for name in names:
        if name not in known:
            raise ArgumentError(
                f"no argument {name!r}{did_you_mean(name, [*known, *options])} (unknown argument: "
                f"{c.tree!r} takes {', '.join(sorted(known))})")


def resolve_sizes(c: Contraction, sizes: Mapping[str, int], empty: bool = False
                  ) -> dict[str, int]:
    """Check ``sizes`` against the expression and return every index's extent, in c.indices order.

    Raises :class:`ArgumentError` for an unknown index, :class:`ShapeMismatch` for a size that
    is not a positive int (or 0 too, with ``empty``: an empty axis, which no kernel runs) and
    :class:`MissingSize` for an index without a size.
    """
    checked = _checked_sizes(c, sizes, empty)
    missing = [index for index in c.indices if index not in checked]
    if missing:
        noun = "index" if len(missing) == 1 else "indices"
        raise MissingSize(
            f"no size for {noun} {', '.join(missing)}; pass them, "
            f"e.g. sizes={{\"{missing[0]}\": 64}}\n{_caret_at_index(c, missing[0])}"
        )
    resolved = {index: checked[index] for index in c.indices}
    _check_tensor_shapes(c, resolved)
    _check_addressable(c, resolved)
    return resolved


def _check_addressable(c: Contraction, sizes: Mapping[str, int]) -> None:
    """Every tensor must be indexable with 64-bit offsets (:data:`INDEX_LIMIT`)."""
    for tensor, indices in ((c.output, c.output_indices), *c.inputs.items()):
        elements = math.prod(sizes[i] for i in indices)
        if elements > INDEX_LIMIT:
            extents = " x ".join(f"{i}={sizes[i]}" for i in indices)
            raise SizeLimit(
                f"{Read(tensor, indices)!r} would hold {elements:.3g} elements ({extents}), "
                f"more than 64-bit indices address (2^63 - 1, about {INDEX_LIMIT:.2g}); no "
                "kernel can index it, so nothing was searched or compiled: give smaller sizes")


def _caret_at_index(c: Contraction, index: str) -> str:
    """The expression with a caret under the first use of ``index``."""
    for node in (c.tree.write, *leaves(c.tree.expr)):
        if isinstance(node, (Read, Write)) and index in node.indices:
            where = node.index_positions[node.indices.index(index)]
            return caret(c.source, where, len(index))
    return caret(c.source, 0)


def _check_tensor_shapes(c: Contraction, sizes: Mapping[str, int]) -> None:
    """A tensor read with different index lists must get one shape from all of them."""
    first: dict[str, Read] = {}
    for read in leaves(c.tree.expr):
        if not isinstance(read, Read):
            continue
        seen = first.setdefault(read.tensor, read)
        for axis, (a, b) in enumerate(zip(seen.indices, read.indices, strict=True)):
            if sizes[a] != sizes[b]:
                where = read.index_positions[axis] if read.index_positions else read.position
                raise ShapeMismatch(
                    f"{read.tensor} is read as {seen!r} and as {read!r}, so axis {axis} would "
                    f"have extent {a}={sizes[a]} in one and {b}={sizes[b]} in the other; give "
                    f"{a} and {b} the same size\n{caret(c.source, where, len(b))}")


def _checked_sizes(c: Contraction, sizes: Mapping[str, int], empty: bool = False
                   ) -> dict[str, int]:
    for index, size in sizes.items():
        if index not in c.indices:
            raise ArgumentError(
                f"sizes names {index!r}, which is not an index of {c.tree!r}; its indices are "
                f"{', '.join(c.indices) or 'none'}{did_you_mean(index, c.indices)}"
            )
        smallest, what = (0, "an int >= 0") if empty else (1, "a positive int")
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < smallest:
            raise ShapeMismatch(f"the size of index '{index}' must be {what}, got {size!r}")
    return {index: int(size) for index, size in sizes.items()}


@dataclass(frozen=True)
class Shaped:
    """What :func:`infer_sizes` reads of an array, where only its shape is known (planning
    for shapes): no memory is asked for, so a shape past 64-bit indices reaches the size
    checks (numpy's ``broadcast_to`` refuses it first: "iterator is too large")."""

    shape: tuple[int, ...]


def infer_sizes(c: Contraction, arrays: Mapping[str, Any],
                sizes: Mapping[str, int] | None = None, *, empty: bool = False,
                old_output: bool = True) -> dict[str, int]:
    """Read every index's extent off the arrays' shapes, checking that they agree.

    ``sizes`` supplies indices no array provides and must agree with the arrays. The output
    array is optional unless its old values are used (read on the right-hand side, or ``+=``)
    and ``old_output`` asks for them (not when only shapes are planned for). ``empty`` allows
    axes of extent 0.
    """
    explicit = _checked_sizes(c, sizes or {}, empty)
    found: dict[str, tuple[int, str, int]] = {}  # index -> (extent, tensor, axis)
    for tensor, index_lists in _tensor_uses(c, arrays, old_output):
        shape = _shape(tensor, arrays[tensor], index_lists[0])
        for indices in index_lists:
            for axis, (index, extent) in enumerate(zip(indices, shape, strict=True)):
                known, where, known_axis = found.setdefault(index, (extent, tensor, axis))
                if extent != known:
                    raise ShapeMismatch(f"index '{index}': {known} in {where} (axis {known_axis}) "
                                        f"but {extent} in {tensor} (axis {axis})")
    for index, size in explicit.items():
        if index in found and found[index][0] != size:
            extent, tensor, axis = found[index]
            raise ShapeMismatch(f"index '{index}': sizes says {size} but it is {extent} in "
                                f"{tensor} (axis {axis})")
    return resolve_sizes(c, {index: extent for index, (extent, _, _) in found.items()} | explicit,
                         empty)


def _tensor_uses(c: Contraction, arrays: Mapping[str, Any], old_output: bool
                 ) -> Iterator[tuple[str, list[tuple[str, ...]]]]:
    """Each tensor whose array must be checked, with every index list it is used with."""
    uses: dict[str, list[tuple[str, ...]]] = {tensor: [] for tensor in c.inputs}
    for read in leaves(c.tree.expr):
        if isinstance(read, Read) and read.tensor in uses and read.indices not in uses[read.tensor]:
            uses[read.tensor].append(read.indices)
    for tensor, index_lists in uses.items():
        if tensor not in arrays:
            raise MissingArray(f"no array for the input {tensor} (read as "
                              f"{Read(tensor, index_lists[0])!r}); pass it in arrays")
        yield tensor, index_lists
    if c.output in arrays:
        yield c.output, [c.output_indices]
    elif old_output and (c.reads_output or c.op != "="):
        written = Read(c.output, c.output_indices)
        raise MissingArray(f"no array for the output {c.output}: {c.tree!r} uses its old values, "
                          f"so pass {written!r} in arrays")


def _shape(tensor: str, array: Any, indices: tuple[str, ...]) -> tuple[int, ...]:
    shape = getattr(array, "shape", None)
    if shape is None:
        raise ShapeMismatch(f"{tensor} must be an array with a .shape, got {type(array).__name__}")
    if len(shape) != len(indices):
        raise ShapeMismatch(f"{tensor} has {_count(len(shape), 'axis', 'axes')} but the "
                            f"expression indexes it with {len(indices)}: "
                            f"{Read(tensor, indices)!r}")
    return tuple(int(extent) for extent in shape)
