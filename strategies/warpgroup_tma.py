"""The warpgroup mapping's operand tiles moved by the tensor memory accelerator (``tma``):
which operands a bulk tensor copy can fill, the box each step copies and its tensor map
(:class:`ir.TensorMap`, encoded on the host by :mod:`treduda.run.tensor_maps`).

A box lands in shared memory its fastest dimension first (:class:`ir.TensorCopy`), each line
of it one swizzled line of the tile (:mod:`.warpgroup_kernel`'s layouts): so the operand's
fastest index must be the one the tile's lines run along, K (a K-major tile) or the first
index of its free group M or N (an MN-major one), and a box's first dimension spans one
line's ``w`` values of it, the swizzle's whole span. (A narrower first dimension would leave
the rest of each line to the hardware's rules for a box narrower than its swizzle, which the
driver's documentation does not spell out: not offered.) A step copies the tile's extent
along the lines in ``boxes`` boxes, ``w`` apart. MN-major tiles hold the boxes one after
another (``X[row / w][k / 8][k % 8][row % w]``, blocks along the rows outermost, the
descriptor's stride-dimension offset a box's bytes) where the cp.async path keeps blocks
along K outermost.

A tile's rows are consecutive values of its free group, linearised fastest first
(:func:`.tensorcore_tiles.gemm_groups`), from a multiple of the rows. ``r`` such values from
a multiple of ``r`` are one box of the group's indices where the group's first ``j`` indices
fit in ``r`` whole and ``r`` values stay inside one value of the indices after the
``j + 1``-th (:func:`run_box`: all of ``a`` and ``r / S_a`` values of ``b`` for ``M =
(a, b)``); so a K-major box spans the tile's rows over several indices of the group (a map of
3 to 5 dimensions), where the operand holds those indices in the group's order, and an
MN-major box spans ``w`` rows, which the first index's extent must hold whole (with ``tma``
the tile takes the widest swizzle whose line divides it: :func:`line_fits`). Every step spans
``BK`` values of K's fastest index and one of the others
(:func:`.tensorcore_tiles.stepped_k`), and the driver takes the operand's strides
(:func:`treduda.run.tensor_maps.unmappable`); elsewhere cp.async copies stand in
(:func:`box_reason` says why). Elements outside the tensor, the partial tiles' and the
rounded-up K's, read as zeros.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from treduda.codegen import ir
from treduda.frontend import dtypes
from treduda.polyhedral.lower import Program
from treduda.run.tensor_maps import unmappable

from .tensorcore_tiles import fastest_first, gemm_groups, k_box

MAP_PREFIX = "td_map_"  # a tensor map's kernel parameter: the prefix and the tensor's name
BARRIERS = "td_full"  # the mbarriers, one per stage: the step's boxes have landed
TMA_DTYPES = ("float16", "bfloat16")  # TF32 tiles are K-major only: a row-major B needs cp.async


@dataclass(frozen=True)
class OperandBox:
    """How a step's tile of ``tensor`` is copied: its map, ``boxes`` boxes a step, each
    ``line`` values of the tile's line index (``k_major``: K, else its free group's first)
    apart; ``indices`` the map's dimensions (the operand's, fastest first), ``free`` its
    free group's indices (fastest first) and ``rows`` the tile's values of that group."""

    tensor: str
    map: ir.TensorMap
    boxes: int
    line: int
    k_major: bool
    indices: tuple[str, ...]
    free: tuple[str, ...]
    rows: int


def tma_reason(program: Program) -> str | None:
    """Why no bulk tensor copy fills ``program``'s warpgroup tiles, or None where one does
    (for some steps and tiles: :func:`box_reason` decides for the parameters)."""
    found = gemm_groups(program)
    if program.dtype not in TMA_DTYPES or found is None:
        return f"bulk copies feed 16-bit warpgroup tiles, not {program.dtype}"
    (a,), (b,), m, n, k, _ = found
    if k_box(program):
        return "A and B lead with different summed indices (a K box)"
    size = dtypes.itemsize(program.dtype)
    for tensor, free in ((a, m), (b, n)):
        order = fastest_first(program.contraction.inputs[tensor], program.layout)
        if order[0] not in (k[0], free[0]):
            return (f"{tensor}'s fastest index {order[0]} is no line of its tile (its "
                    f"{'M' if tensor == a else 'N'} group's first index is {free[0]})")
        narrowest = min(line for line in ir.SWIZZLE_MODES if line) // size
        if order[0] == free[0] and not line_fits(program, free, narrowest):
            return (f"{tensor}'s fastest index {free[0]} ({program.sizes[free[0]]} values) "
                    "fills no swizzled line whole")
        extents = [program.sizes[i] for i in order]
        strides = [math.prod(extents[:d]) for d in range(len(extents))]
        reason = unmappable(extents, strides, program.dtype)
        if reason is not None:
            return f"{tensor}: {reason}"
    return None


def line_fits(program: Program, free: tuple[str, ...], line: int) -> bool:
    """Whether boxes of ``line`` values of a free group's first index (an MN-major tile's
    lines) stay inside one value of its others: the group is that index, or its extent is a
    multiple of ``line``."""
    return len(free) == 1 or program.sizes[free[0]] % line == 0


def run_box(sizes: Sequence[int], run: int) -> tuple[int, ...] | None:
    """The box, per index of a group of ``sizes`` (fastest first), that ``run`` consecutive
    values of the group from a multiple of ``run`` span: all of the first ``j`` indices and
    ``run / (S_0 ... S_j-1)`` values of the next, where that product divides ``run`` and
    ``run`` divides it times ``S_j`` (or index ``j`` is the last: values past its extent
    read as zeros); None where no ``j`` does (such runs cross into the next value of a later
    index partway)."""
    below = 1
    for j, size in enumerate(sizes):
        if run % below == 0 and (j == len(sizes) - 1 or below * size % run == 0):
            return (*sizes[:j], run // below, *(1,) * (len(sizes) - j - 1))
        below *= size
    return None


def box_reason(program: Program, tensor: str, tile: Mapping[str, int], line: int,
               k_sizes: Mapping[str, int]) -> str | None:
    """Why no box of ``tensor`` is a step's tile (``tile``: BM, BN, BK; ``line``: values of
    a swizzled line of its shared tile), or None where one is (see the module's doc)."""
    (a,), (b,), m, n, k, _ = gemm_groups(program)
    free, rows, name = (m, tile["m"], "M") if tensor == a else (n, tile["n"], "N")
    order = fastest_first(program.contraction.inputs[tensor], program.layout)
    k_major = order[0] == k[0]
    run = rows if k_major else line
    extents = run_box([program.sizes[i] for i in free], run)
    group = " x ".join(f"{i} {program.sizes[i]}" for i in free)
    if extents is None:
        return f"{run} values of {name} ({group}) from a multiple of {run} are no box"
    if not k_major and extents[0] != line:
        return f"{free[0]}'s {program.sizes[free[0]]} values fill no line of {line}"
    spanned = [order.index(i) for i, extent in zip(free, extents, strict=True) if extent > 1]
    if spanned != sorted(spanned):
        return f"{tensor} holds {name}'s indices ({group}) in another order"
    if len(k) > 1 and k_sizes[k[0]] % tile["k"]:
        return f"a step of {tile['k']} values of {k[0]} spans two of K's next index"
    return None


def operand_box(program: Program, tensor: str, tile: Mapping[str, int], line: int,
                k_sizes: Mapping[str, int]) -> OperandBox | None:
    """The box of ``tensor``'s step tile (``tile``: BM, BN, BK; ``line``: values of a
    swizzled line of its shared tile), or None where a step's tile is no whole number of
    boxes (:func:`box_reason`)."""
    if box_reason(program, tensor, tile, line, k_sizes) is not None:
        return None
    (a,), (b,), m, n, k, _ = gemm_groups(program)
    free, rows = (m, tile["m"]) if tensor == a else (n, tile["n"])
    order = fastest_first(program.contraction.inputs[tensor], program.layout)
    k_major = order[0] == k[0]
    spans = dict(zip(free, run_box([program.sizes[i] for i in free], rows if k_major else line),
                     strict=True))
    box = tuple(spans.get(i, line if k_major and i == k[0] else tile["k"] if i == k[0] else 1)
                for i in order)
    extents = tuple(program.sizes[i] for i in order)
    strides = tuple(math.prod(extents[:d]) for d in range(len(extents)))
    swizzle = line * dtypes.itemsize(program.dtype)
    tensor_map = ir.TensorMap(f"{MAP_PREFIX}{tensor}", tensor, extents, strides, box, swizzle)
    along = tile["k"] if k_major else rows
    return OperandBox(tensor, tensor_map, along // line, line, k_major, order, free, rows)


def box_bytes(boxes: tuple[OperandBox, ...], itemsize: int) -> int:
    """The bytes a step's copies complete on its mbarrier: every box whole, zeros too."""
    return sum(o.boxes * o.map.box_elements * itemsize for o in boxes)
