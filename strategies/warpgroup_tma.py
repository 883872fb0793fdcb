"""The warpgroup mapping's operand tiles moved by the tensor memory accelerator (``tma``):
which operands a bulk tensor copy can fill, the box each step copies and its tensor map
(:class:`ir.TensorMap`, encoded on the host by :mod:`treduda.run.tensor_maps`).

A box lands in shared memory its fastest dimension first, each line of it one swizzled
line of the tile (:mod:`.warpgroup_kernel`'s layouts): so the operand's fastest index must
be the one the tile's lines run along, K (a K-major tile) or its free index M or N (an
MN-major one), and a box spans one line's ``w`` values of it (the swizzle's span, 128 bytes
at most) by the tile's extent of the other (``BM``, ``BN`` or ``BK`` values), one value of
every other index. A step then copies the tile's extent along the lines in ``boxes`` boxes,
``w`` apart. MN-major tiles hold the boxes one after another (``X[row / w][k / 8][k % 8][row
% w]``, blocks along the rows outermost, the descriptor's stride-dimension offset a box's
bytes) where the cp.async path keeps blocks along K outermost.

So a tensor map describes an operand where its M or N group is one index (a tile's rows
then one run of it), a step spans ``BK`` values of K's fastest index and one of the others
(:func:`.tensorcore_tiles.stepped_k`), and the driver takes its strides
(:func:`treduda.run.tensor_maps.unmappable`); elsewhere cp.async copies stand in. Elements
outside the tensor, the partial tiles' and the rounded-up K's, read as zeros.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
    ``line`` values of the tile's line index (``k_major``: K) apart."""

    tensor: str
    map: ir.TensorMap
    boxes: int
    line: int
    k_major: bool
    roles: tuple[str, ...]  # per dimension (fastest first): "k0", "k", "free" or "batch"
    indices: tuple[str, ...]


def tma_reason(program: Program) -> str | None:
    """Why no bulk tensor copy fills ``program``'s warpgroup tiles, or None where one does
    (for some steps and tiles: :func:`operand_box` decides for the parameters)."""
    found = gemm_groups(program)
    if program.dtype not in TMA_DTYPES or found is None:
        return f"bulk copies feed 16-bit warpgroup tiles, not {program.dtype}"
    (a,), (b,), m, n, k, _ = found
    if k_box(program):
        return "A and B lead with different summed indices (a K box)"
    for tensor, free in ((a, m), (b, n)):
        if len(free) != 1:
            return f"{tensor}'s {'M' if tensor == a else 'N'} group holds several indices"
        order = fastest_first(program.contraction.inputs[tensor], program.layout)
        if order[0] not in (k[0], free[0]):
            return f"{tensor}'s fastest index {order[0]} is no line of its tile"
        extents = [program.sizes[i] for i in order]
        strides = [math.prod(extents[:d]) for d in range(len(extents))]
        reason = unmappable(extents, strides, program.dtype)
        if reason is not None:
            return f"{tensor}: {reason}"
    return None


def operand_box(program: Program, tensor: str, tile: Mapping[str, int], line: int,
                k_sizes: Mapping[str, int]) -> OperandBox | None:
    """The box of ``tensor``'s step tile (``tile``: BM, BN, BK; ``line``: values of a
    swizzled line of its shared tile), or None where a step does not span one box (K's
    fastest index not a multiple of the step: :func:`.tensorcore_tiles.stepped_k`)."""
    (a,), (b,), m, n, k, batch = gemm_groups(program)
    free = m if tensor == a else n
    rows = tile["m"] if tensor == a else tile["n"]
    if len(k) > 1 and k_sizes[k[0]] % tile["k"]:
        return None
    order = fastest_first(program.contraction.inputs[tensor], program.layout)
    k_major = order[0] == k[0]
    roles = tuple("k0" if i == k[0] else "k" if i in k else "free" if i in free else "batch"
                  for i in order)
    along = tile["k"] if k_major else rows
    extent = {"k0": tile["k"], "free": rows, "k": 1, "batch": 1}
    box = (line, *(extent[role] for role in roles[1:]))
    extents = tuple(program.sizes[i] for i in order)
    strides = tuple(math.prod(extents[:d]) for d in range(len(extents)))
    swizzle = line * dtypes.itemsize(program.dtype)
    tensor_map = ir.TensorMap(f"{MAP_PREFIX}{tensor}", tensor, extents, strides, box, swizzle)
    return OperandBox(tensor, tensor_map, along // line, line, k_major, roles, order)


def box_bytes(boxes: tuple[OperandBox, ...], itemsize: int) -> int:
    """The bytes a step's copies complete on its mbarrier: every box whole, zeros too."""
    return sum(o.boxes * o.map.box_elements * itemsize for o in boxes)
