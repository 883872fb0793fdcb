"""The model's counts as formulas a person can read: sympy expressions of the sizes and a
candidate's tile parameters (the design card names sympy for this).

The search keeps counting with numbers (:mod:`.counts`, :mod:`.tiles`), so it is no slower;
these formulas say the same counts in symbols, each equal to the number the model uses
(``tests/test_cost_model.py`` checks it), and :func:`lambdified` turns one into a function
of its symbols once, for whoever evaluates it over many sizes. Sympy is imported only here,
when a formula is asked for.

Symbols: ``N_i`` the extent of index ``i``; ``block_x`` and ``reg_x`` (and y, z) a block's
threads and a thread's registers along an axis, as the geometry names them
(:mod:`treduda.polyhedral.geometry`); ``split`` the blocks that share an output tile.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import sympy

from ..errors import StrategyError
from ..polyhedral import geometry
from ..polyhedral.geometry import AXES
from .counts import Counts, _Read

SPLIT = sympy.Symbol("split", positive=True, integer=True)


def size(index: str) -> sympy.Symbol:
    """The extent of ``index``."""
    return sympy.Symbol(f"N_{index}", positive=True, integer=True)


def tile(axis: str) -> sympy.Expr:
    """A block's tile along ``axis``: its threads times each thread's registers there."""
    return (sympy.Symbol(f"block_{axis}", positive=True, integer=True)
            * sympy.Symbol(f"reg_{axis}", positive=True, integer=True))


def _volume(indices: tuple[str, ...]) -> sympy.Expr:
    return sympy.Mul(*(size(i) for i in dict.fromkeys(indices)))


def dram_bytes(counts: Counts) -> sympy.Expr:
    """Bytes that must cross DRAM (the model's ``dram`` resource times the bandwidth): every
    input once, the output written (and read, where it is added into), and a split's zeroed
    output or deterministic workspace (:meth:`.model.Model._split_dram`)."""
    c = counts.program.contraction
    touched = sympy.Add(*(_volume(idx) for idx in c.inputs.values()))
    elements = _volume(counts.outputs)
    written = elements * (2 if c.reads_output or c.op != "=" else 1)
    parts = elements * (SPLIT if counts.program.split_workspace else 1)
    split = sympy.Piecewise((0, sympy.Eq(SPLIT, 1)), (parts, True))
    return (touched + written + split) * counts.bytes


def traffic(counts: Counts, read: _Read, order: str) -> sympy.Expr:
    """Elements of ``read`` all blocks pull from L2 over the kernel, for the axes of
    ``order`` (:meth:`.tiles._Tiles.traffic`): per axis, its tiles times the values of
    ``read``'s index each tile covers, and every value of an index no axis maps that ``read``
    or the output has."""
    groups = geometry.groups(order)
    total: sympy.Expr = sympy.Integer(1)
    for axis, group in zip(AXES, groups, strict=False):
        if len(group) > 1:
            raise StrategyError(f"the traffic of a grouped axis ({'*'.join(group)}) has no "
                                "formula yet: the model counts it (Model.estimate)")
        index, t = group[0], tile(axis)
        total *= sympy.ceiling(size(index) / t) * (t if index in read.indices else 1)
    mapped = set(geometry.on_axes(order))
    for index in counts.sizes:
        if index not in mapped and (index in read.indices or index in counts.outputs):
            total *= size(index)
    return total


def formulas(counts: Counts, order: str) -> dict[str, sympy.Expr]:
    """The formulas of a program's candidates with ``order``: ``dram`` (bytes) and, per
    tensor read, ``traffic <tensor>`` (elements)."""
    found = {"dram": dram_bytes(counts)}
    for read in counts.reads:
        found[f"traffic {read.tensor}"] = traffic(counts, read, order)
    return found


def values(counts: Counts, described: Mapping[str, Any]) -> dict[sympy.Symbol, int]:
    """Every symbol's value for a decided description (:func:`geometry.decided`) of one of
    ``counts``' candidates."""
    found = {size(i): extent for i, extent in counts.sizes.items()}
    for axis in AXES:
        for quantity in (f"block_{axis}", f"reg_{axis}"):
            found[sympy.Symbol(quantity, positive=True, integer=True)] = described[quantity]
    found[SPLIT] = described.get("split", 1)
    return found


def lambdified(expression: sympy.Expr) -> tuple[tuple[sympy.Symbol, ...],
                                                  Callable[..., float]]:
    """``expression``'s symbols (by name) and a function of them that evaluates it with
    Python's numbers: made once, called as often as needed."""
    symbols = tuple(sorted(expression.free_symbols, key=lambda s: s.name))
    return symbols, sympy.lambdify(symbols, expression,
                                   modules=[{"ceiling": math.ceil}, "math"])
