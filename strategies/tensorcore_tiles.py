"""The tile quantities of the tensor-core strategy (:mod:`.tensorcore`) that its kernel builder
(:mod:`.tensorcore_kernel`) and the tensor-core model (:mod:`.tensorcore_model`) share:
the multiply-accumulate shape, the GEMM grouping of a contraction, the block's tile, the
operand tiles' layouts and padding, asynchronous copy widths and shared bytes."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from treduda.codegen import ir
from treduda.codegen.fragments import MMA_COLUMNS
from treduda.frontend import dtypes
from treduda.polyhedral.geometry import AXES, GROUP, copy_width, split_parts
from treduda.polyhedral.lower import Kind, Program

WARP = ir.WARP
PAD_BYTES = 16  # what a fragment load's leading dimension must be a multiple of (CUDA C++
# Programming Guide, "Warp Matrix Functions": ldm a multiple of 8 for __half, 4 for float)
WAVEFRONT_BYTES = 128  # shared memory serves a request 128 bytes a cycle (32 banks of 4)
MATRIX_ROW_BYTES = 16  # ldmatrix reads an 8x8 matrix of 16-bit values as 8 rows of 16 bytes
# Lanes of a warp along K in mma.sync's operand fragments of 32- and 64-bit values (PTX ISA,
# "Matrix Fragments for mma.m16n8k8" and "for mma.m8n8k4 with .f64": lane l holds the value
# at l / 4 of M or N and l mod 4 of K)
LANES_K = 4
SHAPES = {"float16": (16, 16, 16), "bfloat16": (16, 16, 16), "float32": (16, 16, 8),
          "float64": (8, 8, 4)}
# Lanes of a warp along M and along N in the accumulator layout of mma.sync, which WMMA compiles
# to (PTX ISA, "Matrix Fragments for mma.m16n8k*" and "for mma.m8n8k4 with .f64": lane l holds
# rows of groupID = l/4 and columns of threadID_in_group = l mod 4).
LANES_M, LANES_N = 8, 4
# At most this multiple of K's fastest extent its steps scan rounded up (see stepped_k)
ROUNDED_K = 1.25
# The largest M or N tile of a block: 4 warps of 4 fragments of 16 (strategies/tensorcore.py)
LARGEST_TILE = 256
# At most this many copies per thread and operand are unrolled (straight-line code in the main
# loop, their guards decided per copy, their rows' addresses computed once); more stay a loop,
# as the write's do
UNROLLED_COPIES = 16


# A K box: where A and B lead in memory with different summed indices (tccg_14's A[c,a,d] and
# B[d,c,b]), a step of one index's values reads one operand a value per row, 32 sectors a warp
# request where 2 would do. A step of BOX x BOX values, BOX of each of the two, reads both in
# runs of BOX (32 bytes of 16-bit values: whole sectors): BOX_FRAGMENTS fragment k-extents of
# 16. Its B copies read BOXED_WIDTH of B's fastest index at once and store them into B's tile
# BOXED_STRIDE apart (:func:`box_indices`)
BOX = 16
BOX_FRAGMENTS = BOX * BOX // 16
BOXED_WIDTH = 4
BOXED_STRIDE = BOX * BOX // BOXED_WIDTH


def mma_shape(program: Program) -> tuple[int, int, int] | None:
    """The multiply-accumulate shape (m, n, k) tensor cores compute ``program`` with, or None
    where its dtype and precision have none that gives the result ``precision`` promises:
    float16 and bfloat16 (products exact in float32), float32 with TF32 or 3xTF32, float64
    (DMMA is IEEE FP64)."""
    if program.dtype == "float32":
        return SHAPES["float32"] if program.precision != dtypes.HIGHEST else None
    return SHAPES.get(program.dtype)


# The shortest row a swizzled tile takes, in elements (64 bytes): a fragment's 16 rows then
# start at offsets whose bits swizzle_shift(row) to + 2 are zero, so the XOR of a lane's
# element depends on the lane alone (MmaSync's loads hoist it out of the main loop)
SWIZZLED_ROW = 32


def swizzle_shift(row: int) -> int:
    """The :attr:`ir.Local.swizzle` of an unpadded tile of 16-bit values whose rows hold
    ``row`` elements (a power of two, 16 or more): the bit of the element offset where the
    row number starts, or for rows shorter than a 128-byte wavefront (64 values) where the
    wavefront's number does. Eight consecutive rows read at one column (an ldmatrix phase)
    then fall on eight distinct 16-byte chunks of the 128 bytes of banks, and so do eight
    16-byte copies along a row."""
    return max(row.bit_length() - 1, (WAVEFRONT_BYTES // 2).bit_length() - 1)


def mappings(program: Program, ampere: bool) -> tuple[str, ...]:
    """The forms CUDA may compute ``program``'s fragments in (:data:`ir.MAPPINGS`): WMMA, and
    for float16, bfloat16 and TF32 on compute capability 8.0 or later (``ampere``:
    mma.sync's m16n8k16 with bfloat16 and m16n8k8 with TF32 need it) mma.sync."""
    return ir.MAPPINGS if ampere and program.dtype in ("float16", "bfloat16", "float32") else (
        "wmma",)


def gemm_groups(program: Program) -> tuple[tuple[str, ...], ...] | None:
    """``(A, B, M, N, K, batch)``: the two inputs and the index groups, each fastest first, or
    None where ``program`` is not one product of two distinct tensors summed into an output
    indexed by them.

    A group is linearised in the memory order of its operand (M: A's, N: B's; K: A's, or
    B's where it holds B's fastest index and not A's), so that consecutive elements of the
    group are as close as the operand holds them and its tile's copies read them side by side
    (tccg_20's ``B[d,f,c,e]`` read along the output's ``c`` was 8064 elements apart per
    thread); a free group whose output's writes outnumber its operand's reads keeps the
    output's order (:func:`_read_order`). Worked out once per program
    (:meth:`~treduda.polyhedral.lower.Program.derived`)."""
    return program.derived("gemm_groups", _gemm_groups)


def _gemm_groups(program: Program) -> tuple[tuple[str, ...], ...] | None:
    reduces = [s for s in program.statements if s.kind == Kind.REDUCE]
    if program.sizes is None or len(reduces) != 1:
        return None
    reads = ir.elements(reduces[0].body)[1:]
    if len(reads) != 2 or reads[0].array == reads[1].array:
        return None
    a, b = reads[0].array, reads[1].array
    inputs = program.contraction.inputs
    first, second = set(inputs[a]), set(inputs[b])
    if len(inputs[a]) != len(first) or len(inputs[b]) != len(second):
        return None  # a diagonal: no 2-D tile
    output = fastest_first(program.output_indices, program.layout)
    summed = set(reduces[0].summed)
    order_a, order_b = (fastest_first(inputs[t], program.layout) for t in (a, b))
    m = tuple(i for i in output if i in first and i not in second)
    n = tuple(i for i in output if i in second and i not in first)
    batch = tuple(i for i in program.output_indices if i in first and i in second)
    k = tuple(i for i in order_a if i in summed)
    if order_a[0] not in summed:
        k = _in_order(k, order_b)
    if len(m) + len(n) + len(batch) != len(output) or set(k) != summed or not summed <= second:
        return None
    reduced = math.prod(program.sizes[i] for i in k)
    return ((a,), (b,), _read_order(m, order_a, output, reduced, _extent(program, n)),
            _read_order(n, order_b, output, reduced, _extent(program, m)), k, batch)


def k_box(program: Program) -> tuple[str, str] | None:
    """The summed indices a K box spans (A's fastest, B's fastest) where the operands are
    16-bit, lead with two different summed indices, and each of those rounded up to a
    multiple of :data:`BOX` adds at most :data:`ROUNDED_K` of it; else None. Worked out once
    per program."""
    return program.derived("k_box", _k_box)


def _k_box(program: Program) -> tuple[str, str] | None:
    found = gemm_groups(program)
    if found is None or dtypes.itemsize(program.dtype) != 2:
        return None
    (a,), (b,), _, _, k, _ = found
    inputs = program.contraction.inputs
    first, second = (fastest_first(inputs[t], program.layout)[0] for t in (a, b))
    if first == second or first not in k or second not in k:
        return None
    if any(-(-program.sizes[i] // BOX) * BOX > ROUNDED_K * program.sizes[i]
           for i in (first, second)):
        return None
    return first, second


def boxed(program: Program, p: Mapping[str, Any]) -> bool:
    """Whether the tensor-core parameters ``p`` take a K box (``frags_k`` of
    :data:`BOX_FRAGMENTS`, offered where :func:`k_box` finds one)."""
    return p.get("frags_k") == BOX_FRAGMENTS and k_box(program) is not None


# A free box (issue 37): where the output's fastest index ``o`` lies in a free group whose
# operand holds one other index of the group, ``c``, before ``o`` in memory (tccg_31's
# ``A[d,e,g,a]`` with ``d_e`` before ``a``, output ``C[a,...]``), the group linearised in the
# output's order reads the operand a value of ``a`` per element (24 sectors a request where 2
# do) and in the operand's order scatters the output's writes. A box of P values of ``c`` by Q
# of ``o``, then the rest of each, serves both: the operand in runs of P, the output in runs
# of Q (benchmarks/free_group_layouts.py counted it on tccg_31-48). P at most a sector of the
# operand's values, Q at most a warp's; both exact divisors of their index's size. A padded
# box (``free_layout`` "padded") takes Q of a warp's 32 where no exact Q is that long, ``o``
# rounded up to a multiple of it: its extra slots are zeros in the copies, left out of the
# write, and MMA work spent, at most PADDED_BOX of the group (tccg_32's ``a``, 24 -> 32: 75%
# useful, where the exact 4 x 8 box writes the output in runs of 16 bytes, twice the lines).
FREE_BOX_P = (16, 8, 4, 2)
FREE_BOX_Q = (32, 16, 8, 4)
PADDED_BOX = 4 / 3
# A padded box's tile holds Q' = tile / P values of ``o`` (:func:`box_q`): with P of a sector's
# 16 halves, a 256-wide warpgroup tile holds 16 of tccg_42's ``a`` (24 -> 32), so the output
# is written in 32-byte runs where the whole of ``a`` (then ``b``, next in the output) runs on.
# The "whole" box takes P = WHOLE_TILE / Q (8 there), so the warpgroup's widest tile (a
# wgmma's n of 256, or 4 x 64 rows) holds a whole Q of ``o`` (all of tccg_42's ``a``; half of
# tccg_07's 48 -> 64); its operand's copies take runs of P (16 bytes, one cp.async, each in a
# sector of its own: twice the padded box's sectors, on operands far smaller than the
# output). Both mappings offer it (the same builder's copies and write): mma.sync's widest
# tiles (4 warps x 4 fragments of 16) hold a whole Q likewise.
WHOLE_TILE = 256
# A "full" box takes Q of all of ``o``'s values where they are no power of two and a warp's
# write holds them (tccg_32's ``a`` of 24: the exact box's Q of 8 splits the output's runs,
# writing it at twice the sectors; the padded box's 32 spends a third more blocks on zeros):
# nothing padded, the output written in whole runs of ``o`` as the group layout writes it,
# the operand read in P rows side by side (tccg_32's B at 12 sectors a request where the
# group layout's rows of 48 bytes, a value of ``f`` apart, took 16). Its tiles hold whole
# boxes, P x Q elements (96 there: :func:`holds_boxes`), which FULL_WARPS warps of fragments
# of 16 along the box's group do; the model then rates tccg_32's 2 x 3 warps of 4 x 4
# fragments 0.8% below the group layout's pick. Its tiles take ``o`` fastest (:func:`o_first`),
# its copies dealing each warp's rows ``c`` fastest (:func:`interleaved_row`). Where the
# operand's own fastest index leads ``c`` (tccg_31's ``A[d,e,g,a]``: its copies run along the
# group), a full box keeps ``c`` fastest instead, P a sector's 16 halves, and a tile takes
# 16 values of ``o`` at a time (:func:`box_q`, a power of two, so the write's skew keeps one
# way): a box of 16 x 24 needs no tile of 384 rows, nothing is padded (the whole box spends a
# third more blocks on 24 -> 32) and the operand is read in whole sectors.
FULL_WARPS = 3
SECTOR_BYTES = 32
# The C tile of a free box is read Q values of ``o`` at once, P apart in the tile's row: words
# of skew after every SKEWED accumulators of the row spread them over the banks (:func:`skewed`)
SKEWED = 32
# The lanes of a warp one wavefront of 16-byte shared loads serves: a quarter-warp (CUDA C++
# Programming Guide, "Shared Memory", compute capability 5.x on)
QUARTER = WAVEFRONT_BYTES // ir.VECTOR_BYTES

# One digit of a linearised group: its indices (several where they are fused: side by side in
# the operand, fastest first, one linear value) and how many of their values it takes
Digit = tuple[tuple[str, ...], int]


def index_digits(indices: Sequence[str], sizes: Mapping[str, int]) -> tuple[Digit, ...]:
    """A digit per index of ``indices`` (fastest first), each taking all its ``sizes``."""
    return tuple(((i,), sizes[i]) for i in indices)


@dataclass(frozen=True)
class FreeBox:
    """A free box (see :data:`FREE_BOX_P`): the group's ``axis`` ("m" or "n"), the operand's
    indices before the output's fastest (``contiguous``, side by side in the operand, fastest
    first: fused), the output's fastest (``output``), the box's sides ``p`` and ``q``, and
    the slots the group gives ``output`` (``slots``: its size, or in a padded box that
    rounded up to a multiple of ``q``; 0 for its size), and whether its tiles take ``o``
    fastest (``o_fastest``, :func:`o_first`)."""

    axis: str
    contiguous: tuple[str, ...]
    output: str
    p: int
    q: int
    slots: int = 0
    o_fastest: bool = False


def free_box(program: Program) -> FreeBox | None:
    """The free box ``program``'s output's fastest group takes, or None where none is exact:
    the group's other indices that its operand holds before the output's fastest index lie
    side by side in it (tccg_34's ``A[d,f,g,a]``: ``d`` and ``f``, fused), and sides
    dividing their extent and the output's fastest index's size exist. Worked out once per
    program."""
    return free_boxes(program).get("box")


def free_boxes(program: Program) -> dict[str, FreeBox | None]:
    """The ``free_layout`` values a mapping offers, each with its box: "group" (None), "box"
    where :func:`free_box` finds one, "padded" where a box of a warp's Q fits once ``o`` is
    rounded up by at most :data:`PADDED_BOX` (see :data:`FREE_BOX_P`), "whole" where a
    :data:`WHOLE_TILE` holds a padded box's whole Q, "full" where 16-bit operands take a Q
    of all of ``o`` (see :data:`FULL_WARPS`). Worked out once per program."""
    return program.derived("free_boxes", _free_boxes)


def _free_boxes(program: Program) -> dict[str, FreeBox | None]:
    found: dict[str, FreeBox | None] = {"group": None}
    exact = _free_box(program)
    if exact is not None:
        found["box"] = exact
    sides = _box_sides(program)
    if sides is not None:
        axis, before, o, p = sides
        size, q = program.sizes[o], FREE_BOX_Q[0]
        slots = -(-size // q) * q
        if size < slots <= PADDED_BOX * size:
            found["padded"] = FreeBox(axis, before, o, p, q, slots)
            if WHOLE_TILE // q < p:  # P and WHOLE_TILE / Q powers of two: it divides the span
                found["whole"] = FreeBox(axis, before, o, WHOLE_TILE // q, q, slots)
        leads = _copied_along(program, axis, before)
        if (dtypes.itemsize(program.dtype) == 2 and size not in FREE_BOX_Q and size <= WARP
                and p * size % WARP == 0 and (leads or p * size <= LARGEST_TILE)):
            found["full"] = FreeBox(axis, before, o, p, size, o_fastest=not leads)
    return found


def _box_sides(program: Program) -> tuple[str, tuple[str, ...], str, int] | None:
    """A free box's axis, contiguous indices, output's fastest index and P (see
    :func:`free_box`), or None where the group has no run of contiguous indices before the
    output's fastest or no P divides it."""
    found = gemm_groups(program)
    output = fastest_first(program.output_indices, program.layout) if found else ()
    if not output:
        return None
    (a,), (b,), m, n, _, _ = found
    o = output[0]
    axis, tensor, group = ("m", a, m) if o in m else ("n", b, n)
    if o not in group:
        return None  # a batch index leads the output
    order = fastest_first(program.contraction.inputs[tensor], program.layout)
    mine = [i for i in order if i in group]
    before = tuple(mine[:mine.index(o)])
    if not before or before != order[order.index(before[0]):][:len(before)]:
        return None
    most = SECTOR_BYTES // dtypes.itemsize(program.dtype)
    span = math.prod(program.sizes[i] for i in before)
    p = next((p for p in FREE_BOX_P if p <= most and span % p == 0), None)
    return None if p is None else (axis, before, o, p)


def _copied_along(program: Program, axis: str, before: tuple[str, ...]) -> bool:
    """Whether the operand of free group ``axis`` is copied along the group: its fastest
    index leads the box's contiguous indices ``before`` (tccg_31's ``A[d,e,g,a]``; tccg_32's
    ``B[g,f,a,c]`` is copied along K)."""
    (a,), (b,), *_ = gemm_groups(program)
    tensor = a if axis == "m" else b
    return fastest_first(program.contraction.inputs[tensor], program.layout)[0] == before[0]


def _free_box(program: Program) -> FreeBox | None:
    sides = _box_sides(program)
    if sides is None:
        return None
    axis, before, o, p = sides
    q = next((q for q in FREE_BOX_Q if program.sizes[o] % q == 0), None)
    return None if q is None else FreeBox(axis, before, o, p, q)


FREE_LAYOUT_HELP = ("the output's fastest group linearised in its order, or (where its "
                    "operand holds another of its indices before it, and the sizes allow) as a "
                    "box of P of that index by Q of the output's fastest, so that both the "
                    "operand's copies and the output's writes take whole runs; 'padded': Q of "
                    "32, the output's fastest index rounded up to a multiple of it (zeros, "
                    "MMA work spent); 'whole': that padded box narrowed so a "
                    "256-wide tile holds its whole Q; 'full': Q of all of the output's "
                    "fastest index where that is no power of two (24), in tiles of whole "
                    "boxes, or of a power of two of it where the operand is copied along "
                    "the group")


def free_layouts(program: Program) -> tuple[str, ...]:
    """The ``free_layout`` values both tensor-core mappings offer (:func:`free_boxes`)."""
    return tuple(free_boxes(program))


def free_boxed(program: Program, p: Mapping[str, Any]) -> FreeBox | None:
    """The free box the parameters ``p`` take (``free_layout`` "box", "padded", "whole" or
    "full"), or None."""
    return free_boxes(program).get(p.get("free_layout", "group"))


def group_slots(program: Program, box: FreeBox | None = None) -> dict[str, int]:
    """Each index's slots in its group's linear values: its size, or a padded ``box``'s
    rounded-up ``o``'s."""
    sizes = dict(program.sizes)
    return sizes | {box.output: box.slots} if box is not None and box.slots else sizes


def group_extents(program: Program, box: FreeBox | None = None) -> dict[str, int]:
    """The extents of the linear M and N (:func:`gemm_groups`), a padded ``box``'s group
    with its extra slots: what the blocks' tiles cover."""
    _, _, m, n, _, _ = gemm_groups(program)
    slots = group_slots(program, box)
    return {axis: math.prod(slots[i] for i in group) for axis, group in (("m", m), ("n", n))}


def group_digits(program: Program, axis: str, box: FreeBox | None = None
                 ) -> tuple[Digit, ...]:
    """The digits of free group ``axis`` ("m" or "n"), fastest first: its indices in the
    order :func:`gemm_groups` gives, or, where ``box`` is on the axis, ``(c, P), (o, Q),
    (c, S_c / P), (o, S_o / Q)`` (``c`` the box's fused contiguous indices; its first two
    swapped where :func:`o_first`) and the group's other indices (digits of one value left
    out)."""
    _, _, m, n, _, _ = gemm_groups(program)
    group, sizes = (m if axis == "m" else n), program.sizes
    if box is None or box.axis != axis:
        return index_digits(group, sizes)
    c, o = box.contiguous, (box.output,)
    span = math.prod(sizes[i] for i in c)
    sides = ((o, box.q), (c, box.p)) if o_first(box) else ((c, box.p), (o, box.q))
    digits = (*sides, (c, span // box.p),
              (o, group_slots(program, box)[box.output] // box.q),
              *index_digits([i for i in group if i not in (*c, *o)], sizes))
    return tuple(d for d in digits if d[1] > 1)


def free_digits(program: Program, p: Mapping[str, Any], axis: str) -> tuple[Digit, ...]:
    """The digits of free group ``axis`` under the parameters ``p`` (:func:`group_digits`)."""
    return group_digits(program, axis, free_boxed(program, p))


def digit_values(digits: Sequence[Digit], value: Any, sizes: Mapping[str, int],
                 ops: Operators) -> dict[str, Any]:
    """Each index's value at the linear ``value`` of a group of ``digits`` (fastest first;
    ``value`` below the group's extent, so the slowest digit takes no remainder): digit
    ``j`` is ``value / (s_0 ... s_j-1) mod s_j``; indices of several digits sum them, each
    times the slots of its faster ones, and fused indices split that sum by their
    ``sizes``, as a group of their own."""
    quotient, remainder, plus, times = ops
    terms: dict[tuple[str, ...], list[Any]] = {}
    radix: dict[tuple[str, ...], int] = {}
    below = 1
    for n, (indices, slots) in enumerate(digits):
        digit = quotient(value, below)
        if n < len(digits) - 1:
            digit = remainder(digit, slots)
        step = radix.get(indices, 1)
        terms.setdefault(indices, []).append(digit if step == 1 else times(step, digit))
        radix[indices] = step * slots
        below *= slots
    values = {}
    for indices, parts in terms.items():
        total = parts[0] if len(parts) == 1 else plus(*parts)
        if len(indices) == 1:
            values[indices[0]] = total
        else:
            values |= digit_values(index_digits(indices, sizes), total, sizes, ops)
    return values


def o_first(box: FreeBox | None) -> bool:
    """Whether ``box`` takes ``o`` fastest in its tiles (a "full" box, whose Q is no power of
    two, on an operand copied along K): the write then reads a C tile row's consecutive
    words, and the accumulators' pairs stay aligned (64-bit stores); ``c`` fastest, its reads
    would be P apart, which no skew of an even number of words spreads over 32 banks
    (tccg_32's 24 reads of ``c`` = 0 on the 16 even ones), and an odd one splits the pairs
    (96 stores where 64 did). A full box on an operand copied along its group keeps ``c``
    fastest (its copies' runs), its tiles holding a power of two of ``o``
    (:func:`holds_boxes`)."""
    return box is not None and box.o_fastest


def box_q(box: FreeBox, tile: Mapping[str, int]) -> int:
    """Values of ``o`` a C tile's box takes side by side: the box's Q, or as many as the
    tile's group holds boxes of P (a power of two, so they divide it)."""
    return min(box.q, tile[box.axis] // box.p)


def holds_boxes(box: FreeBox | None, tile: Mapping[str, int]) -> bool:
    """Whether a block's ``tile`` holds whole boxes of ``box`` (P x Q' elements,
    :func:`box_q`), as the write's numbering takes them (:func:`output_local`): always where
    P and Q are powers of two; a "full" box's Q of 24 by P of 4 needs a tile of a multiple
    of 96 (:data:`FULL_WARPS`). A box that keeps ``c`` fastest takes a power of two of ``o``
    (:func:`skew_words` spreads the write's reads, P apart, over the banks for those only:
    Q' of 12 or 24 read two ways)."""
    if box is None:
        return True
    q = box_q(box, tile)
    return tile[box.axis] % (box.p * q) == 0 and (o_first(box) or q & (q - 1) == 0)


def write_span(tile: Mapping[str, int], along_n: bool, box: FreeBox | None) -> tuple[int, int]:
    """The C tile's extents as the output's write numbers it: the positions of a row along
    the output's fastest group (a free ``box``'s axis, N ``along_n``, else M), and the rows."""
    axis = box.axis if box is not None else "n" if along_n else "m"
    return tile[axis], tile["n" if axis == "m" else "m"]


def write_lanes(threads: int, tile: Mapping[str, int], along_n: bool, box: FreeBox | None,
                vector: int = 1) -> int | None:
    """The threads ``G`` that share a row of the output's write, each taking every ``G``-th
    position of it (:func:`output_local`), where that deals a warp's 32 stores as the
    element numbering ``e = T c + t`` does (32 consecutive positions of a row): ``G`` the
    largest number dividing both the threads and the row's positions, a multiple of 32, or
    the whole row. None where neither holds (the write then numbers ``e``, its row and
    position ``e / F`` and ``e mod F``). A thread's position is then ``t mod G + G j`` and
    its row ``t / G + (T / G) c``: no division by the row's extent in any iteration (GEMM
    fp16's 256 x 192 warpgroup tile, 256 threads: ``e / 192`` and ``e mod 192`` and a guard
    in each of 192 stores a thread, 28.75 SASS instructions an element). Positions count
    ``vector`` values of a row (:func:`write_vector`)."""
    span = write_span(tile, along_n, box)[0] // vector
    lanes = math.gcd(threads, span)
    return lanes if lanes % WARP == 0 or lanes == span else None


# The output types a write stores in vectors (:func:`write_vector`): 16-bit values packed in
# pairs by the printers; bfloat16's conversion has no packed form there
VECTOR_OUTPUTS = ("float16", "float32", "float64")


def write_vector(program: Program, p: Mapping[str, Any], tile: Mapping[str, int]) -> int:
    """The consecutive values of the output's fastest index ``o`` a thread of the write
    takes at once, in one vector store (1: one at a time): the largest power of two ``V``,
    at most :data:`ir.VECTOR_BYTES` of the output, dividing ``o``'s size and the tile's
    span of the write's rows; in a free box its side of ``o`` in the tile (``Q``, or
    ``Q'``: :func:`box_q`) and its slots, where the group is linearised ``o`` fastest.
    Every other output index's stride is then a multiple of ``V`` and tensors start on a
    :data:`ir.VECTOR_BYTES` boundary, so a vector whose first position is a multiple of
    ``V`` is aligned, its lanes differ only in ``o`` and lie inside the output where its
    first does (sizes not multiples of the tile included). A plain store only (``=`` of
    the accumulator, scaled: no read of the output) of a type the printers store in vectors
    (:data:`VECTOR_OUTPUTS`). One STG of 8 halves where tccg_32's write stored each (two
    thirds of a one-step kernel's instructions: docs/tensorcore-economy.md). Not in a free
    box that takes ``c`` first (:func:`o_first`): a thread's values then lie P apart in the
    C tile, and a warp's lanes at values of ``o`` 8 apart read the same banks (3 ways on
    tccg_31's whole box, 2 on tccg_03's box, where a value at a time reads each bank once)."""
    write = next(s for s in program.statements if s.kind == Kind.WRITE)
    output = fastest_first(program.output_indices, program.layout)
    if (program.dtype not in VECTOR_OUTPUTS or program.contraction.op != "="
            or len(ir.elements(write.body)) != 2 or not output):
        return 1
    box = free_boxed(program, p)
    if box is not None and not o_first(box):
        return 1
    o = output[0]
    _, _, m, n, _, _ = gemm_groups(program)
    axis = box.axis if box is not None else "m" if o in m else "n"
    group = m if axis == "m" else n
    if box is None and (not group or group[0] != o) or box is not None and box.output != o:
        return 1
    sides = [program.sizes[o], tile[axis]]
    if box is not None:
        sides += [box.q, box_q(box, tile), group_slots(program, box)[o]]
    width = ir.VECTOR_BYTES // dtypes.itemsize(program.dtype)
    while width > 1 and any(side % width for side in sides):
        width //= 2
    return width


def output_local(position: Any, row: Any, tile: Mapping[str, int], along_n: bool,
                 box: FreeBox | None, ops: Operators) -> tuple[Any, Any]:
    """The C tile's (M, N) element at ``position`` of ``row`` of the output's write
    (:func:`write_span`): along the tile's rows of N (``along_n``) or its columns of M, or,
    in a free ``box``, Q' values of ``o`` (:func:`box_q`), then the P of ``c``, then the rest
    of the box's group in the tile, the other group's tile a row, so that consecutive
    threads write consecutive values of the output's fastest index (along the tile's group
    they wrote runs of P values 16 times apart: 16 sectors a request on tccg_31), and a warp
    reads one row of the C tile (:func:`skew_words`). The box's group is numbered before the
    other, as the group layout numbers the write's: where the block's threads cover its
    tile, a thread's place in the box's group is the same in every iteration of the write,
    so its part of the output's address and its guard for a partial tile are worked out
    once (tccg_33's warpgroup box: the other group first took 39.5 SASS instructions an
    element, a guard and the box's divisions in each)."""
    quotient, remainder, plus, times = ops
    if box is None:
        return (row, position) if along_n else (position, row)
    q = box_q(box, tile)
    runs = q * box.p  # elements of a box; the row's extent is a multiple (holds_boxes)
    inside = (remainder(position, runs) if o_first(box)
              else plus(remainder(quotient(position, q), box.p),
                        times(box.p, remainder(position, q))))
    local = plus(inside, times(runs, quotient(position, runs)))
    return (local, row) if box.axis == "m" else (row, local)


def skew_words(box: FreeBox | None, tile: Mapping[str, int]) -> int:
    """Words of skew after every :data:`SKEWED` accumulators of a C tile's row (0 without a
    free ``box``). A warp's reads of the write (:func:`output_local`) take ``Q'`` values of
    ``o``, P apart, at ``32 / Q'`` values of ``c``: positions ``c + P o`` of one row, 2 to 4
    ways on the banks unskewed (P a power of two); skewed by ``32 / Q'`` words per 32, each
    bank once (tccg_31's 16 x 8: ``16 o + 4 (o / 2) + c``; tccg_33's 4 x 32: ``4 o + o / 8``).
    A box that takes ``o`` fastest (:func:`o_first`) reads consecutive words: no skew. A
    fragment's 16 (or 8) elements stay side by side."""
    if box is None or o_first(box):
        return 0
    return max(1, WARP // min(box_q(box, tile), WARP))


def skewed(position: Any, words: int, ops: Operators, alternate: bool = False) -> Any:
    """Where a C tile's row holds its element ``position``, ``words`` of skew after every
    :data:`SKEWED` (:func:`skew_words`), or after every other (``alternate``: the 32nd of
    every 64, :func:`accumulator_skew`)."""
    quotient, _, plus, times = ops
    if not words:
        return position
    skew = times(words, quotient(position, SKEWED))
    return plus(position, skew, times(-words, quotient(position, 2 * SKEWED))) if alternate \
        else plus(position, skew)


# The integer operators a formula is written with: quotient, remainder, sum, multiple (numpy's
# or the kernel IR's, so that the model's addresses and the kernel's come from one formula)
Operators = tuple[Callable[[Any, int], Any], Callable[[Any, int], Any], Callable[..., Any],
                  Callable[[int, Any], Any]]
NUMPY = (operator.floordiv, operator.mod, lambda *terms: sum(terms), operator.mul)


def box_indices(program: Program, ks: Any, column: Any, ops: Operators) -> dict[str, Any]:
    """Each summed index's value at column ``column`` of a K box step ``ks``'s tiles
    (:func:`k_box`): the step takes the next box of A's leading index ``c`` (fastest) and
    B's ``d``, then the next value of the other summed indices. The tile's 16-column block
    ``s`` holds one value of ``d``, ``4 (s mod 4) + s / 4``, and its columns 16 of ``c``: a
    fragment's k-extent, 16 values of ``c``, is one block, and B's copies' four values of
    ``d`` at once (``4 q .. 4 q + 3``) land in blocks ``q, q + 4, q + 8, q + 12``,
    :data:`BOXED_STRIDE` columns apart, so a warp's stores of eight values of ``c`` at four of
    ``q`` fill 32 banks once (with the blocks in the order of ``d`` they took 8: four ways)."""
    quotient, remainder, plus, times = ops
    block = quotient(column, BOX)
    return box_values(program, ks, remainder(column, BOX),
                      plus(times(4, remainder(block, 4)), quotient(block, 4)), ops)


def box_values(program: Program, ks: Any, first: Any, second: Any, ops: Operators
               ) -> dict[str, Any]:
    """Each summed index's value at the ``first`` value of a K box step ``ks``'s box of A's
    leading index (0 to 15) and its ``second`` of B's (:func:`box_indices`, which places them
    in its columns; a staged copy of B takes them in B's memory order)."""
    quotient, remainder, plus, times = ops
    c, d = k_box(program)
    boxes = {i: -(-program.sizes[i] // BOX) for i in (c, d)}
    values = {c: plus(times(BOX, remainder(ks, boxes[c])), first),
              d: plus(times(BOX, remainder(quotient(ks, boxes[c]), boxes[d])), second)}
    others = [i for i in gemm_groups(program)[4] if i not in values]
    rest, below = quotient(ks, boxes[c] * boxes[d]), 1
    for n, index in enumerate(others):
        digit = quotient(rest, below)
        values[index] = digit if n == len(others) - 1 else remainder(digit,
                                                                     program.sizes[index])
        below *= program.sizes[index]
    return values


def _in_order(group: tuple[str, ...], order: tuple[str, ...]) -> tuple[str, ...]:
    """``group`` in the memory ``order`` of an operand (its indices fastest first) where it
    holds the operand's fastest index; else as it is."""
    return tuple(i for i in order if i in group) if order[0] in group else group


def _read_order(group: tuple[str, ...], order: tuple[str, ...], output: tuple[str, ...],
                reduced: int, other: int) -> tuple[str, ...]:
    """A free ``group`` (in the output's order) in its operand's memory ``order``, whether or
    not it holds the operand's fastest index: where K's indices come first in memory, the
    tile's rows (one value of the group each) then lie side by side in the tensor and a warp's
    copies of short rows read whole sectors (tccg_31's ``B[g,f,b_c]``, rows of 24 values of
    ``g``, read along ``b_c`` took 16 sectors a request where 12 hold them); unless that moves
    the output's fastest index from its lead while the output's writes outnumber the
    operand's reads: each output element is written once, the operand read ``reduced / BN``
    times per output element (BN the other group's tile, at most ``other`` and
    :data:`LARGEST_TILE`). tccg_31's ``A[d,e,g,a]`` read along ``d_e`` (K = 24) made its
    output, written along ``d_e`` too, 9600 elements apart per thread."""
    ordered = tuple(i for i in order if i in group)
    if (output and group and group[0] == output[0] and ordered[0] != group[0]
            and reduced < min(other, LARGEST_TILE)):
        return group
    return ordered


def _extent(program: Program, group: Sequence[str]) -> int:
    return math.prod(program.sizes[i] for i in group)


def fastest_first(indices: Sequence[str], layout: str) -> tuple[str, ...]:
    """``indices`` (a tensor's, in its written order) from the fastest in memory."""
    return tuple(reversed(indices)) if layout == "C" else tuple(indices)


def described_axes(m: Sequence[str], n: Sequence[str]) -> tuple[str, str]:
    """The groups x and y hold in a description: N and M, as the grid's axes, or M first where
    N is empty (an axis of ``order`` needs indices)."""
    return ("n", "m") if n or not m else ("m", "n")


def each(choices: Mapping[str, tuple], quantity: Callable[..., Any], *names: str) -> tuple:
    """Every value ``quantity`` takes over the parameters ``names`` may still take, sorted."""
    return tuple(sorted({quantity(*values)
                         for values in itertools.product(*(choices[n] for n in names))}))


def described_gemm(program: Program, choices: Mapping[str, tuple],
                   along: Mapping[str, tuple[tuple, tuple]], step: tuple, split: tuple,
                   tiles: tuple[str, ...], shared: Callable[[Program, dict], int]
                   ) -> dict[str, tuple]:
    """A GEMM-shaped mapping in the geometry's quantities (the tensor-core and warpgroup
    mappings' ``describe``): N's group on x and M's on y, as the grid's axes are (an empty
    group goes last), each with the ``block_*`` and ``reg_*`` values ``along`` gives for
    ``"m"`` and ``"n"``; the step and split as given; both operands staged, the fragment loops
    unrolled, a double buffer where there is more than one stage, and ``shared`` bytes of the
    ``tiles`` parameters' values. Where ``free_layout`` may be "box", ``order`` says so: the
    boxed group's entry lists the box's contiguous indices first, then the output's fastest,
    as the operand holds them (tccg_31's M ``d_e*a``, not ``a*d_e``)."""
    (a,), (b,), m, n, _, _ = gemm_groups(program)
    axes = described_axes(m, n)

    def order(layout: str) -> str:
        groups = {"m": m, "n": n}
        box = free_boxed(program, {"free_layout": layout})
        if box is not None:
            led = (*box.contiguous, box.output)
            groups[box.axis] = (*led, *(i for i in groups[box.axis] if i not in led))
        return ",".join(GROUP.join(groups[axis]) for axis in axes if groups[axis])

    described = {"order": each(choices, order, "free_layout")}
    for name, axis in zip(AXES, axes, strict=False):
        described[f"block_{name}"], described[f"reg_{name}"] = along[axis]
    return {
        **described,
        "step": step,
        "split": split,
        "unroll": (True,),  # the fragment loops within a step are unrolled in the IR
        "stage": (f"{a},{b}",),
        "double_buffer": each(choices, lambda stages: stages > 1, "stages"),
        "shared": each(choices, lambda *p: shared(program, dict(zip(tiles, p, strict=True))),
                       *tiles),
    }


def described_tile(program: Program, described: Mapping[str, Any]) -> dict[str, int]:
    """The block of a decided description (:meth:`.tensorcore.TensorCore.describe`), as the
    tensor-core model reads it: the tile ``m`` x ``n`` and its step ``k`` in elements, and per
    group the warps (``warps_m``, ``warps_n``) and each warp's fragments (``frags_m``,
    ``frags_n``)."""
    _, _, m, n, _, _ = gemm_groups(program)
    fm, fn, _ = mma_shape(program)
    lanes, extent = {"m": LANES_M, "n": LANES_N}, {"m": fm, "n": fn}
    tile = {"k": described["step"]}
    for name, axis in zip(AXES, described_axes(m, n), strict=False):
        threads, values = described[f"block_{name}"], described[f"reg_{name}"]
        tile[axis] = threads * values
        tile[f"warps_{axis}"] = threads // lanes[axis]
        tile[f"frags_{axis}"] = values * lanes[axis] // extent[axis]
    return tile


def stepped_k(program: Program, found: tuple[tuple[str, ...], ...], step: int,
              box: bool = False) -> dict[str, int]:
    """The extents of K's indices as reduction steps of ``step`` values scan them: their
    sizes, the fastest rounded up to a multiple of ``step`` where K holds more indices and
    that adds at most :data:`ROUNDED_K` of it. A step then spans one value of every other
    index, so its copies' indices are the step's (``32 (ks mod 3) + r`` and ``ks / 3``,
    computed once per step) plus the thread's, not a division per element; the rounded-up
    values are zeros, tensor-core work spent (84 -> 96: 14%) to save the divisions
    (tccg_20). In a K ``box`` (:func:`k_box`) the two indices it spans are rounded up to
    multiples of :data:`BOX`."""
    k = found[4]
    extents = {i: program.sizes[i] for i in k}
    if box:
        return extents | {i: -(-extents[i] // BOX) * BOX for i in k_box(program)}
    rounded = -(-extents[k[0]] // step) * step
    if len(k) > 1 and rounded <= ROUNDED_K * extents[k[0]]:
        extents[k[0]] = rounded
    return extents


def tile_extents(p: Mapping[str, Any], shape: tuple[int, int, int]) -> dict[str, int]:
    """The block's tile: BM, BN and the step BK, in elements."""
    fm, fn, fk = shape
    return {"m": p["warps_m"] * p["frags_m"] * fm, "n": p["warps_n"] * p["frags_n"] * fn,
            "k": p["frags_k"] * fk}


def last_columns(program: Program, p: Mapping[str, Any]) -> int | None:
    """The columns of N that the MMAs of each warp's last fragment along N compute, where
    its last :data:`~treduda.codegen.fragments.MMA_COLUMNS` lie wholly outside N in every
    block: one block and one warp along N (so every warp drops the same products: no
    branch), the "mma" mapping (an mma.sync per 8 columns of a 16-column fragment). None
    elsewhere (all columns computed). tccg_06's N = 24 in a tile of 32 multiplied zeros in
    4 of its 16 mma.sync a k-slice; the tile's columns past N are then neither loaded
    (ldmatrix.x2) nor multiplied, only zero-filled by the copies."""
    n = mma_shape(program)[1]
    tile = p["frags_n"] * n
    extent = group_extents(program, free_boxed(program, p))["n"]
    if (p["mapping"] != "mma" or n != 2 * MMA_COLUMNS or p["warps_n"] != 1
            or not tile - n < extent <= tile - MMA_COLUMNS):
        return None
    return MMA_COLUMNS


def operand_rows_major(program: Program, found: tuple[tuple[str, ...], ...]) -> tuple[bool, bool]:
    """Whether A's tile is row-major (M x K, K adjacent) and B's (K x N, N adjacent): each
    tile's rows run along its tensor's fastest index, so that the copies coalesce."""
    (a,), (b,), m, n, k, _ = found
    inputs = program.contraction.inputs
    fastest_a = fastest_first(inputs[a], program.layout)[0]
    fastest_b = fastest_first(inputs[b], program.layout)[0]
    return fastest_a not in m, fastest_b in n


def copy_widths(program: Program, found: tuple[tuple[str, ...], ...], box: bool = False,
                free: FreeBox | None = None) -> dict[str, int | None]:
    """Elements of each operand one asynchronous copy moves, or None where the operand has no
    such width (it is then copied through registers): cp.async moves 4, 8 or 16 bytes,
    aligned to their size (PTX ISA, "cp.async"). The widest of those whose elements lie side
    by side in the tensor and in the tile's row: one element where it is 4 or 8 bytes; more
    where the row's group starts with the tensor's fastest indices, in its memory order
    (:func:`gemm_groups`), and the extent of those (:func:`digits_run`) is a multiple of
    the width: a run starts at a multiple of the width there (tiles span multiples of 32
    bytes), every other stride is a multiple of it, and a run is all inside or all outside
    the tensor. In a K ``box`` B's copies read :data:`BOXED_WIDTH` values of its leading
    index where its extent is a multiple of that, and store them apart (no cp.async). A
    ``free`` box's group runs along its digits (:func:`group_digits`)."""
    (a,), (b,), m, n, k, _ = found
    row_a, row_b = operand_rows_major(program, found)
    size = dtypes.itemsize(program.dtype)
    sizes = program.sizes
    along = {a: index_digits(k, sizes) if row_a else group_digits(program, "m", free),
             b: group_digits(program, "n", free) if row_b else index_digits(k, sizes)}
    widths = {tensor: copy_width(size, (digits_run(program, tensor, digits),))
              for tensor, digits in along.items()}
    if box:
        widths[b] = BOXED_WIDTH if program.sizes[k_box(program)[1]] % BOXED_WIDTH == 0 else None
    return widths


def digits_run(program: Program, tensor: str, digits: Sequence[Digit]) -> int:
    """Values of a group of ``digits`` (fastest first) that lie side by side in ``tensor``:
    the slots of its first digits that are the tensor's fastest indices in order, up to and
    including the first that takes only part of its indices (a free box's P); of a padded
    box's ``o``, whose slots pass its size, as many as divide both (a run all inside the
    tensor or all outside it)."""
    order = fastest_first(program.contraction.inputs[tensor], program.layout)
    run, at = 1, 0
    for indices, slots in digits:
        if indices != order[at:at + len(indices)]:
            break
        extent = math.prod(program.sizes[i] for i in indices)
        run *= math.gcd(slots, extent)
        if slots != extent:
            break
        at += len(indices)
    return run


def conflict_free_pad(row_bytes: int, line_bytes: int) -> int:
    """Bytes to add to a shared tile's rows of ``row_bytes`` so that a warp's phase that
    reads ``line_bytes`` from each of ``128 / line_bytes`` consecutive rows, at one column,
    finds every row on banks of its own: the fewest (a multiple of :data:`PAD_BYTES`, as
    fragment loads and stores need) that make the rows' pitch an odd multiple of
    ``line_bytes`` modulo a 128-byte wavefront. Row ``i`` then starts at ``i * odd`` lines
    into the wavefront, distinct for the ``128 / line_bytes`` rows, a power of two."""
    pad = 0
    while ((row_bytes + pad) % line_bytes
           or (row_bytes + pad) % WAVEFRONT_BYTES // line_bytes % 2 == 0):
        pad += PAD_BYTES
    return pad


def _fragment_line_bytes(size: int, along_k: bool) -> int:
    """Bytes one phase of a fragment load reads along a tile's row (memory-contiguous line):
    ldmatrix's 16 of 16-bit values; for 32- and 64-bit values, loaded a value per lane in
    phases of ``128 / size`` lanes, :data:`LANES_K` values of K or the rest of the phase's
    lanes' values of M or N."""
    if size == 2:
        return MATRIX_ROW_BYTES
    lanes = WAVEFRONT_BYTES // size
    return size * (LANES_K if along_k else lanes // LANES_K)


def operand_pads(program: Program, p: Mapping[str, Any]) -> tuple[int, int]:
    """Elements added to the rows of A's and B's tiles so that their fragment loads are
    free of bank conflicts (:func:`conflict_free_pad`): one padding for both put B's rows
    of 32-bit values, read four rows of 32 bytes a phase, two ways into the same banks
    (what ``Kernel.counters()`` counted on GEMM's TF32 and FP64 picks). Swizzled tiles
    (``shared_layout`` "swizzle", :func:`swizzle_shift`) take none."""
    if p.get("shared_layout", "pad") == "swizzle":
        return 0, 0
    size = dtypes.itemsize(program.dtype)
    row_a, row_b = operand_rows_major(program, gemm_groups(program))
    pads = []
    for along_k, row in zip((row_a, not row_b), operand_rows(program, p), strict=True):
        pads.append(conflict_free_pad(row * size, _fragment_line_bytes(size, along_k)) // size)
    return pads[0], pads[1]


def operand_rows(program: Program, p: Mapping[str, Any]) -> tuple[int, int]:
    """The elements of a row of A's tile and of B's, unpadded: K's step where the tile's
    rows run along K, else the free group's tile."""
    tile = tile_extents(p, mma_shape(program))
    row_a, row_b = operand_rows_major(program, gemm_groups(program))
    return tile["k"] if row_a else tile["m"], tile["n"] if row_b else tile["k"]


def accumulator_dtype(program: Program) -> str:
    return "float64" if program.dtype == "float64" else "float32"


def output_along_n(program: Program) -> bool:
    """Whether the output's write reads the C tile along its rows (N), the output's fastest
    index being N's or a batch index; else along its columns (M)."""
    _, _, m, _, _, _ = gemm_groups(program)
    fastest = fastest_first(program.output_indices, program.layout)
    return not fastest or fastest[0] not in m


def accumulator_pad(program: Program, p: Mapping[str, Any]) -> int:
    """Elements added to the rows of the C tile, which the output's write reads along them:
    rows of N, or of M where the output's fastest index is M's (:func:`output_along_n`; the
    tile is then stored column-major: read down its columns, a warp's 32 reads a row apart
    took 4 ways). The accumulators are stored into it as mma.sync holds them, eight values
    of each of four rows a phase (:func:`conflict_free_pad`): column-major, the MMA computes
    C^T, whose pairs lie along M (:meth:`.tensorcore_kernel.Builder.fragment_uses`; the
    accumulators of C were stored one at a time, eight values along M of four columns two
    apart, as they still are where the product is not transposed: :func:`transposed_product`).
    A free box's rows are skewed (:func:`skewed`), the write reading a row at a time."""
    _, columns = accumulator_extents(program, p)
    return accumulator_row_pad(program, columns,
                               pairs=output_along_n(program) or transposed_product(program, p))


def transposed_product(program: Program, p: Mapping[str, Any]) -> bool:
    """Whether the MMA computes C^T = B^T A^T (:meth:`.tensorcore_kernel.Builder.
    fragment_uses`): where the output's fastest index is M's, so that the accumulators'
    pairs lie along the C tile's rows; except where each warp's last fragment along N is
    narrowed (:func:`last_columns`), which needs N to be the MMA's N (8 columns an
    instruction): tccg_01-08's N = 24 saves a quarter of their MMAs so, more than pairs
    save in stores."""
    return not output_along_n(program) and last_columns(program, p) is None


def accumulator_row_pad(program: Program, columns: int, pairs: bool) -> int:
    """Elements added to a C tile's row of ``columns`` accumulators (skewed or not) so
    that its pitch is :func:`conflict_free_pad`'s for the stores along it
    (:func:`accumulator_pad`): of pairs along the row (``pairs``), or of single values
    down a column-major tile's rows (the warpgroup kernel's, where the output's fastest
    index is M's: :func:`output_along_n`), a skewed row's words rounded up to
    :data:`PAD_BYTES` first."""
    size = dtypes.itemsize(accumulator_dtype(program))
    aligned = -(-columns * size // PAD_BYTES) * PAD_BYTES
    line = 2 * LANES_K * size if pairs else PAD_BYTES
    return (aligned + conflict_free_pad(aligned, line)) // size - columns


def accumulator_extents(program: Program, p: Mapping[str, Any]) -> tuple[int, int]:
    """The C tile's rows and the elements of a row, unpadded: M x N, or N x M where the
    write reads it along M (:func:`output_along_n`), a free box's rows skewed."""
    tile = tile_extents(p, mma_shape(program))
    rows, columns = ("m", "n") if output_along_n(program) else ("n", "m")
    return tile[rows], skewed_extent(tile[columns], *accumulator_skew(program, p, tile))


def accumulator_skew(program: Program, p: Mapping[str, Any], tile: Mapping[str, int]
                     ) -> tuple[int, bool]:
    """The skew of the mma.sync C tile's rows as :func:`skewed` takes it (words, and
    whether after every other :data:`SKEWED`): a free box's (:func:`skew_words`), or 16
    bytes where the write reads a thread's vector (:func:`write_vector`) in two 16-byte
    loads. GEMM fp16's 8 floats a thread are two LDS.128 32 bytes apart a lane; an LDS.128
    is served a quarter-warp a wavefront (CUDA C++ Programming Guide, "Shared Memory" of
    compute capability 5.x on, 128-bit accesses), whose 8 lanes span 256 bytes of a row:
    lanes ``i`` and ``i + 4`` 128 bytes apart, on the same banks (2 ways). Where a row
    holds a multiple of 8 vectors, a quarter-warp's run starts every 64 accumulators: 4
    words after the 32nd of every 64 move lanes 4-7 16 bytes round the banks (pitches
    with the stores' pad: GEMM's 256 264 -> 280, tccg_32's 192 200 -> 216, tccg_13's 128
    136 -> 136); else (a row of 12 vectors) 4 words after every 32, which any 8 vectors
    side by side take once each. A row of
    fewer than 8 vectors leaves its quarter-warps to the rows' pitch, which the
    accumulators' stores set (:func:`accumulator_pad`): no skew. A fragment's 8 columns
    stay side by side (32 is a multiple of 8), so the stores keep their ways. A split's
    write (a value at a time, 32 side by side) is skewed alike, so that the search's
    bound on the shared bytes needs no split."""
    box = free_boxed(program, p)
    if box is not None and not o_first(box):
        return skew_words(box, tile), False
    size = dtypes.itemsize(accumulator_dtype(program))
    vector = write_vector(program, p, tile)
    slots = write_span(tile, output_along_n(program), box)[0] // vector
    words = ir.VECTOR_BYTES // size
    if vector * size <= ir.VECTOR_BYTES or slots < QUARTER:
        return 0, False
    return words, slots % QUARTER == 0


def skewed_extent(columns: int, words: int, alternate: bool = False) -> int:
    """Elements a C tile's row of ``columns`` spans once skewed by ``words``
    (:func:`skewed`)."""
    skews = (columns + SKEWED) // (2 * SKEWED) if alternate else columns // SKEWED
    return columns + words * skews


def shared_bytes(program: Program, p: Mapping[str, Any]) -> int:
    """Bytes of the A, B and C tiles (operands in their stored type, C in the accumulator's):
    the operand tiles' or the C tile's, which reuses their memory once the main loop is done
    (:attr:`ir.Local.reuses`; it was 130 of GEMM fp16's pick's 183 KB)."""
    tile = tile_extents(p, mma_shape(program))
    operand = dtypes.itemsize(program.dtype)
    accumulator = dtypes.itemsize(accumulator_dtype(program))
    row_a, row_b = operand_rows_major(program, gemm_groups(program))
    pad_a, pad_b = operand_pads(program, p)
    a = tile["m"] * (tile["k"] + pad_a) if row_a else tile["k"] * (tile["m"] + pad_a)
    b = tile["k"] * (tile["n"] + pad_b) if row_b else tile["n"] * (tile["k"] + pad_b)
    buffers = p["stages"]
    rows, columns = accumulator_extents(program, p)
    c = rows * (columns + accumulator_pad(program, p)) * accumulator
    return max((a + b) * operand * buffers, c)



def interleaving(rows: int, runs: int, run_bytes: int, pitch: int, whole: bool = False
                 ) -> tuple[int, int] | None:
    """How a tile's copies reorder its rows so that the rows one phase of a request writes
    fall on distinct banks (:func:`interleaved_row`): ``(R, S)``, ``R`` rows a phase, ``S``
    apart, the least such ``S``, or (``whole``) only ``S = rows / R``, one block of all
    ``rows``; None where rows keep their order (rows as long as a wavefront, or a tile whose
    rows no stride parts)."""
    per_phase = min(WARP, WAVEFRONT_BYTES // run_bytes) // runs
    if per_phase <= 1:
        return None
    row_bytes = runs * run_bytes
    for stride in [rows // per_phase] if whole else range(2, rows // per_phase + 1):
        block = per_phase * stride
        banks = [(i * stride * pitch + b) // 4 % 32 for i in range(per_phase)
                 for b in range(0, row_bytes, 4)]
        if rows % block == 0 and len(set(banks)) == len(banks):
            return per_phase, stride
    return None


def interleaved_row(q: Any, order: tuple[int, ...] | None, ops: Operators) -> Any:
    """The tile row that a copy of row ``q`` in the copies' order writes (:func:`copy_shape`'s
    ``order``). Shared memory serves a request 128 bytes (a wavefront) at a time, so a phase
    of eight 16-byte runs writes several short rows at once, which a padded pitch can place
    on the same banks (rows of 64 bytes at a pitch of 80: banks 0-3, two ways, on every GEMM
    pick's A tile before). ``(R, S)``: rows interleaved in blocks of ``R S``, ``R S (q / (R
    S)) + S (q % R) + (q / R) % S``, the ``R`` rows of a phase ``S`` apart
    (:func:`interleaving`); ``(R, S, P, Q)``, ``R S = Q``: a box that takes ``o`` fastest
    (:func:`o_first`: row ``o + Q c``) copied with ``c`` fastest, a phase's ``R`` rows ``S``
    values of ``o`` apart, so that a warp reads P rows side by side in the operand (tccg_32's
    B: 12 sectors a request; rows 0, 12, 24, 36, ... 1, 13, ... of a box of 4 x 24), and a
    copy instruction's rows lie a constant apart from the last one's (a value of ``o`` a
    step, where the least ``S`` of 4 took divisions by 4 of each); None: ``q``."""
    if order is None:
        return q
    quotient, remainder, plus, times = ops
    per_phase, stride, *box = order
    if not box:
        block = per_phase * stride
        return plus(times(block, quotient(q, block)), times(stride, remainder(q, per_phase)),
                    remainder(quotient(q, per_phase), stride))
    p, span = box  # R S = Q: one block a box
    r = remainder(q, p * span)
    return plus(times(p * span, quotient(q, p * span)), times(stride, remainder(r, per_phase)),
                quotient(r, per_phase * p), times(span, remainder(quotient(r, per_phase), p)))


def copy_shape(program: Program, p: Mapping[str, Any], tensor: str,
               tile: Mapping[str, int] | None = None, pad: int | None = None,
               widths: Mapping[str, int | None] | None = None) -> dict[str, Any]:
    """How the block's copies of ``tensor``'s tile are dealt: the tile's ``rows`` and
    ``columns``, whether its rows run along the free group (``row_is_free``: M for A, N
    for B) or along K, the elements one copy moves (``width``: the cp.async width, else 1),
    the ``runs`` of a row, the row ``pitch`` in bytes (padding included) and the ``order``
    of the rows a phase writes (:func:`interleaving`'s, or None: in turn, as in a swizzled
    tile, which places a phase's runs on distinct banks itself). A builder whose block is not
    the parameters' own (the warpgroup one's) gives its ``tile`` extents, the operand
    tile's ``pad`` and its copy ``widths`` (:func:`copy_widths`'s by default). B's copies in
    a K box (``boxed``) are dealt by :func:`box_dealt`, each storing its elements ``stride``
    columns apart (1 elsewhere)."""
    found = gemm_groups(program)
    a = found[0][0]
    box = boxed(program, p)
    tile = tile_extents(p, mma_shape(program)) if tile is None else tile
    free = "m" if tensor == a else "n"
    row_a, row_b = operand_rows_major(program, found)
    row_is_free = (row_a if tensor == a else row_b) == (tensor == a)
    rows, columns = ((tile[free], tile["k"]) if row_is_free else (tile["k"], tile[free]))
    if widths is None:
        widths = (copy_widths(program, found, box, free_boxed(program, p)) if p["async_copy"]
                  else {})
    width = widths.get(tensor) or 1
    dealt = box and tensor != a
    pad = operand_pads(program, p)[0 if tensor == a else 1] if pad is None else pad
    size = dtypes.itemsize(program.dtype)
    runs, pitch = columns // width, (columns + pad) * size
    order = (None if p.get("shared_layout", "pad") == "swizzle" or dealt
             else interleaving(rows, runs, width * size, pitch))
    held = free_boxed(program, p)
    if order is not None and o_first(held) and held.axis == free and row_is_free:
        order = (*(interleaving(held.q, runs, width * size, pitch, whole=True) or (1, held.q)),
                 held.p, held.q)
    return {"free": free, "rows": rows, "columns": columns, "row_is_free": row_is_free,
            "width": width, "runs": runs, "pitch": pitch, "order": order, "boxed": box,
            "dealt": dealt, "stride": BOXED_STRIDE if dealt and width > 1 else 1}


def box_dealt(e: Any, width: int, ops: Operators) -> tuple[Any, Any]:
    """The row of B's tile and the first column that B's copy ``e`` of a K box step writes
    (:func:`box_indices`'s columns): ``width`` consecutive values of B's leading index ``d``
    fastest, then the 16 of A's ``c``, then the rows, so that a warp reads whole sectors
    (four copies of 8 bytes a sector) and stores into 32 banks once."""
    quotient, remainder, plus, times = ops
    runs = BOX // width
    d = times(width, remainder(e, runs))
    return (quotient(e, BOX * runs),
            plus(times(4 * BOX, remainder(d, 4)), times(BOX, quotient(d, 4)),
                 remainder(quotient(e, runs), BOX)))


def copy_reads(program: Program, p: Mapping[str, Any], tensor: str, steps: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The global reads of ``tensor``'s tile by the copies of the first block (every group's
    first tile, the first part of a split) in its first ``steps`` steps (None: all), as the
    kernel builder deals them (:mod:`.tensorcore_kernel`: element ``e = T c + t`` of the tile
    to thread ``t`` in iteration ``c``, the rows interleaved): per read the copy instruction
    (a step's iteration), the thread and the element offset of the first element it moves
    (:func:`copy_shape`'s ``width`` of them). Runs outside the tensor, which are zero-filled,
    read nothing and are left out. What the tensor-core model counts sectors of."""
    found = gemm_groups(program)
    _, _, m, n, k, _ = found
    sizes = program.sizes
    shape = copy_shape(program, p, tensor)
    tile = tile_extents(p, mma_shape(program))
    threads = WARP * p["warps_m"] * p["warps_n"]
    k_sizes = stepped_k(program, found, tile["k"], shape["boxed"])
    total = -(-math.prod(k_sizes.values()) // tile["k"])
    chunk, _ = split_parts(total, p["split"])
    counted = chunk if steps is None else min(steps, chunk)
    rows, runs, width = shape["rows"], shape["runs"], shape["width"]
    e = np.arange(rows * runs)
    if shape["dealt"]:
        q, column = box_dealt(e, width, NUMPY)
    else:
        q = interleaved_row(e // runs, shape["order"], NUMPY)
        column = width * (e % runs)
    local_free, local_k = (q, column) if shape["row_is_free"] else (column, q)
    ks = np.arange(counted)[:, None]
    values = {shape["free"]: np.broadcast_to(local_free, (counted, e.size)),
              "k": tile["k"] * ks + local_k}
    groups = {"m": m, "n": n, "k": k}
    free = free_boxed(program, p)
    extents = {shape["free"]: group_extents(program, free)[shape["free"]],
               "k": math.prod(k_sizes.values())}
    inside = (values[shape["free"]] < extents[shape["free"]]) & (values["k"] < extents["k"])
    digits = (box_indices(program, ks, np.broadcast_to(local_k, (counted, e.size)), NUMPY)
              if shape["boxed"] else {})
    digits |= digit_values(free_digits(program, p, shape["free"]), values[shape["free"]], sizes,
                           NUMPY)
    offset, fits = _offsets(program, program.contraction.inputs[tensor], values,
                            {axis: groups[axis] for axis in values},
                            {shape["free"]: group_slots(program, free), "k": k_sizes}, digits)
    inside &= fits
    instruction = ks * -(-e.size // threads) + e // threads
    thread = np.broadcast_to(e % threads, (counted, e.size))
    return (np.broadcast_to(instruction, inside.shape)[inside], thread[inside], offset[inside])


def output_writes(program: Program, tile: Mapping[str, int], box: FreeBox | None = None,
                  period: int = 1, vector: int = 1
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The output's writes by every block of the grid (each tile of M and N, each batch
    value; one part of a split), as the kernel builder deals them
    (:meth:`.tensorcore_kernel.Builder.output`, the warpgroup kernel's too: element
    ``e = T c + t`` of the ``tile["m"] x tile["n"]`` C tile, numbered along the output's
    fastest group, to thread ``t`` of ``T`` in iteration ``c``, at the block's tile origin
    plus its local M and N), by classes of blocks whose writes differ by a move alone:
    one block of each class's requests (per write its warp's, ``e / 32`` whatever ``T``, a
    multiple of 32, numbered on from the previous class's) and output element offsets,
    and per request how many blocks make it moved by ``s`` elements, for each ``s`` below
    ``period`` (a 128-byte line's elements, or a multiple: a move by ``period`` takes the
    same sectors and lines). Edge tiles, and interior tiles that start elsewhere in a line,
    differ from the first (tccg_42's first block takes 2.0 lines a request, its grid 2.83).
    In a free ``box`` the tile numbered and its group linearised as the box's
    (:func:`output_local`, :func:`group_digits`). Elements outside the output write nothing
    and are left out. A thread storing ``vector`` consecutive elements at once
    (:func:`write_vector`), a warp's request holds ``32 vector`` of them. What the MMA
    models count the write's sectors and lines of
    (:func:`~treduda.run.counters.moved_requests`), as :func:`copy_reads` the copies'."""
    _, _, m, n, _, batch = gemm_groups(program)
    extents = group_extents(program, box)
    classes = {axis: _block_classes(program, axis, group, tile[axis], extents[axis], box,
                                    period)
               for axis, group in (("m", m), ("n", n))}
    sizes = program.sizes
    batch_offsets, _ = _offsets(program, program.output_indices,
                                {"b": np.arange(math.prod(sizes[i] for i in batch))},
                                {"b": batch}, {"b": sizes})
    batches = np.bincount(batch_offsets % period, minlength=period)
    e = np.arange(tile["m"] * tile["n"])
    span, _ = write_span(tile, output_along_n(program), box)
    local_m, local_n = output_local(e % span, e // span, tile, output_along_n(program), box,
                                    NUMPY)
    requests, offsets, moves = [], [], []
    warps = -(-e.size // (WARP * vector))
    for number, ((offset_m, inside_m, moves_m), (offset_n, inside_n, moves_n)) in enumerate(
            itertools.product(classes["m"], classes["n"])):
        inside = inside_m[local_m] & inside_n[local_n]
        requests.append(number * warps + (e // (WARP * vector))[inside])
        offsets.append((offset_m[local_m] + offset_n[local_n])[inside])
        made = np.unique(requests[-1]).size
        moves.append(np.broadcast_to(_moved(_moved(moves_m, moves_n), batches), (made, period)))
    return np.concatenate(requests), np.concatenate(offsets), np.concatenate(moves)


def _moved(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """How many of two independent moves' sums fall on each ``s`` of a period, from how many
    of each fall on each (the length of both)."""
    period = first.size
    shifts = np.add.outer(np.arange(period), np.arange(period)) % period
    return np.bincount(shifts.ravel(), np.outer(first, second).ravel(),
                       minlength=period).astype(np.int64)


def _block_classes(program: Program, axis: str, group: Sequence[str], tile: int, extent: int,
                   box: FreeBox | None, period: int
                   ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The tiles of ``axis`` (its ``group`` of ``extent`` values, ``tile`` a block) by
    the output offsets their values take: per class, the offsets from a tile's first
    (elements), which of them lie inside the output, and how many of its tiles start
    ``s`` elements into a ``period``, for each ``s``."""
    tiles = -(-extent // tile)
    values = np.arange(tiles * tile)
    digits = {}
    if box is not None and box.axis == axis:
        digits = digit_values(group_digits(program, axis, box), values, program.sizes, NUMPY)
    offset, inside = _offsets(program, program.output_indices, {axis: values}, {axis: group},
                              {axis: group_slots(program, box)}, digits)
    offset, inside = offset.reshape(tiles, tile), (inside & (values < extent)).reshape(tiles, tile)
    relative = np.where(inside, offset - offset[:, :1], 0)
    _, index, shape = np.unique(np.column_stack([relative, inside]), axis=0,
                                return_index=True, return_inverse=True)
    first = offset[:, 0] % period
    return [(relative[i], inside[i],
             np.bincount(first[shape.ravel() == c], minlength=period))
            for c, i in enumerate(index.tolist())]


def _offsets(program: Program, indices: Sequence[str], values: Mapping[str, np.ndarray],
             groups: Mapping[str, Sequence[str]], extents: Mapping[str, Mapping[str, int]],
             digits: Mapping[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The element offsets in a tensor of ``indices`` (its written order) of the groups'
    linear ``values`` (per axis, each group fastest first, its indices' digits taken at the
    axis's ``extents``: K's fastest may be rounded up, :func:`stepped_k`), other indices at
    0 (a batch index in the first block); and whether each value's digits lie inside the
    tensor's sizes (a rounded-up digit's extra values do not: they are zeros). ``digits``
    gives some indices' digits outright (a K box's, :func:`box_indices`)."""
    sizes = program.sizes
    shape = np.broadcast_shapes(*(np.shape(v) for v in values.values()))
    offset = np.zeros(shape, dtype=np.int64)
    inside = np.ones(shape, dtype=bool)
    stride = 1
    for index in fastest_first(indices, program.layout):
        axis = next((a for a, group in groups.items() if index in group), None)
        if axis is not None:
            group, extent = groups[axis], extents[axis]
            if digits and index in digits:
                digit = digits[index]
            else:
                digit = values[axis] // math.prod(extent[i] for i in group[:group.index(index)])
                if index != group[-1]:
                    digit = digit % extent[index]
            if extent[index] > sizes[index]:
                inside &= digit < sizes[index]
            offset += digit * stride
        stride *= sizes[index]
    return offset, inside
