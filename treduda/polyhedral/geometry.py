"""The geometry of a kernel: the one vocabulary in which strategies describe themselves.

A strategy names its parameters as it likes (``threads``, ``block_x``, ``stage``). What the
performance model, the search's lower bound and a staging strategy need from it are the same few
quantities, whatever the strategy: which output indices lie on the x, y and z axes, how many
threads and registers each axis has and how the registers' values are dealt, which output
indices every thread walks in a loop, the reduction's step, and what is staged in shared memory
(:data:`QUANTITIES`). A strategy states them in :meth:`~treduda.polyhedral.strategy.Strategy.
describe`: given the values each of its parameters can still take, the values each quantity can
still take (one once decided). The bound takes the most favourable of each; the estimate, for a
complete choice, the one value each has. A quantity no strategy of a chain sets keeps its
:data:`NEUTRAL` value: a kernel without staging stages nothing.

This module also holds the arithmetic of the block's tile that the model and the staging
strategy both need (its extents and its shared memory), so that it is written once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..codegen.ir import VECTOR_BYTES
from ..errors import StrategyError
from ..frontend import dtypes
from ..frontend.tree import Read
from .lower import Program

AXES = "xyz"
GROUP = "*"  # joins the indices of one axis in an order, fastest first

QUANTITIES: dict[str, str] = {
    "order": "output indices on the x, y, z axes, comma separated (x is the coalescing one); "
             "an axis may hold a group of indices joined by '*', fastest first ('c*a': the "
             "axis runs over X = c + size(c) * a); where the tensor-core mappings box a group "
             "(free_layout 'box', 'padded' or 'whole'), its entry lists the indices the operand "
             "holds before the output's fastest first ('d*a': P values of d by Q of a, then the "
             "rest of each)",
    **{f"block_{a}": f"threads per block along {a}" for a in AXES},
    **{f"reg_{a}": f"output values per thread along {a}, held in registers" for a in AXES},
    **{f"assign_{a}": f"how a thread's values along {a} are dealt: 'cyclic' (thread t holds t, "
                      f"t + block_{a}, ..), 'adjacent' (t * reg_{a}, t * reg_{a} + 1, ..) or "
                      f"'vector' (runs of a 16-byte vector's v values dealt cyclically: v t .. "
                      f"v t + v - 1, v (t + block_{a}) .., read from shared memory in vector "
                      f"loads)" for a in AXES},
    "walk": "output indices every thread walks in a loop, comma separated: for an index on an "
            "axis, all its tiles; for another, all its values (an output index neither on an "
            "axis nor walked has a block per value)",
    "step": "summed values per reduction step (0: the whole reduction at once)",
    "split": "blocks sharing each output tile, each summing an equal part of the steps of the "
             "first summed index and adding it into the output atomically",
    "unroll": "whether the compiler unrolls the loop within a step",
    "stage": "inputs staged in shared memory, comma separated",
    "pad": "elements added to a staged tile's fastest dimension (a vector's only on tiles read in "
           "vectors, see padding())",
    "preload": "whether the next step is loaded into registers while this one computes",
    "double_buffer": "two shared-memory buffers per tile, alternating by step",
    "async_copy": "whether staged tiles are copied by cp.async (global to shared memory, not "
                  "through registers)",
    "shared": "bytes of shared memory per block of the tiles a mapping lays out itself (the "
              "tensor-core one's operand and output tiles; 0: none, the staged tiles are sized "
              "from the block's tile by shared_bytes())",
}

# What a quantity is in a kernel none of whose strategies sets it.
NEUTRAL: dict[str, tuple] = {
    "order": ("",), **{f"{k}_{a}": (1,) for k in ("block", "reg") for a in AXES},
    **{f"assign_{a}": ("cyclic",) for a in AXES}, "walk": ("",), "step": (0,), "split": (1,),
    "unroll": (False,), "stage": ("",), "pad": (0,), "preload": (False,),
    "double_buffer": (False,), "async_copy": (False,), "shared": (0,),
}

Description = dict[str, tuple]  # quantity -> the values it can still take


def complete(described: Mapping[str, tuple], strategy: str) -> Description:
    """A strategy's description with the quantities it leaves out at their neutral values;
    a name outside the vocabulary is an error of the strategy's, not silently ignored."""
    if not described.keys() <= QUANTITIES.keys():  # checked at every node of a search
        unknown = sorted(set(described) - set(QUANTITIES))
        raise StrategyError(f"strategy '{strategy}' describes {unknown}, which the model does "
                            f"not know; the quantities are: {', '.join(QUANTITIES)}")
    if not all(described.values()):
        empty = sorted(q for q, values in described.items() if not values)
        raise StrategyError(f"strategy '{strategy}' leaves no value for {empty}")
    return {**NEUTRAL, **{q: tuple(v) for q, v in described.items()}}


def decided(description: Mapping[str, tuple]) -> dict[str, Any]:
    """The quantities that have one value left, with that value."""
    return {q: values[0] for q, values in description.items() if len(values) == 1}


@functools.cache  # few distinct texts, read at every node of a search
def indices(text: str) -> tuple[str, ...]:
    """The index names of a comma-separated quantity (``order``, ``walk``)."""
    return tuple(i for i in text.split(",") if i)


@functools.cache
def groups(order: str) -> tuple[tuple[str, ...], ...]:
    """The index groups on x, y, z of an ``order``: ``"c*a,b"`` puts (c, a) on x, c fastest,
    and b alone on y."""
    return tuple(tuple(entry.split(GROUP)) for entry in indices(order))


@functools.cache
def on_axes(order: str) -> tuple[str, ...]:
    """Every output index an ``order`` puts on an axis."""
    return tuple(i for group in groups(order) for i in group)


def group_extent(group: Sequence[str], sizes: Mapping[str, int]) -> int:
    """Values of an axis that holds ``group``: the product of its indices' extents."""
    return math.prod(sizes[i] for i in group)


def touched(group: Sequence[str], sizes: Mapping[str, int] | None,
            tile: int) -> dict[str, int]:
    """How many values of each index of ``group`` a block's tile of ``tile`` consecutive
    values of X = c + S_c * (a + S_a * ..) touches at most: the box isl's footprint of it
    spans, which shared memory must hold. Tiles start at multiples of ``tile``; each is taken
    whole (the last, clipped one touches no more). For an index with faster ones of product
    P, a tile spans ``floor((P - gcd(tile, P) + tile - 1) / P) + 1`` values of X div P; where
    some tile crosses a multiple of P * S (``tile`` does not divide it) those values wrap
    around and the box is all S of them. A lone index: the tile, no more than its extent."""
    if len(group) == 1:
        index = group[0]
        return {index: min(tile, sizes[index]) if sizes and index in sizes else tile}
    if sizes is None:
        raise StrategyError(f"a group of indices ({GROUP.join(group)}) needs fixed sizes")
    boxes, inner = {}, 1
    for n, index in enumerate(group):
        extent = sizes[index]
        spanned = (inner - math.gcd(tile, inner) + tile - 1) // inner + 1
        wraps = n < len(group) - 1 and (inner * extent) % tile != 0
        boxes[index] = extent if wraps else min(extent, spanned)
        inner *= extent
    return boxes


def tile_extents(program: Program, geometry: Mapping[str, Any]) -> dict[str, int | None]:
    """How many values of each index one block touches per step, for a decided ``geometry``
    (None: all of them, for a symbolic size): the box of the tile along an axis
    (:func:`touched`), one value of any other output index, the step of a summed one."""
    sizes = program.sizes or {}
    extents: dict[str, int | None] = {}
    for n, group in enumerate(groups(geometry["order"])):
        tile = geometry[f"block_{AXES[n]}"] * geometry[f"reg_{AXES[n]}"]
        extents.update(touched(group, program.sizes, tile))
    for index in program.contraction.indices:
        if index in extents:
            continue
        if index in program.output_indices:
            extent = 1
        else:
            extent = geometry["step"] or sizes.get(index)
        extents[index] = min(extent, sizes[index]) if extent and index in sizes else extent
    return {i: extents[i] for i in program.contraction.indices}


def split_index(program: Program) -> str:
    """The summed index whose steps a split reduction deals out to its parts: the first of the
    (one) reduction."""
    return next(s for s in program.statements if s.summed).summed[0]


def split_parts(steps: int, split: int) -> tuple[int, int]:
    """Steps each part of a split reduction sums, and how many parts that makes: ``split`` at
    most, fewer where ``split`` parts of whole steps cover the steps already (6 steps split 4
    ways: parts of 2 steps, 3 of them). What every strategy's kernel launches, and so what
    its model counts."""
    chunk = -(-steps // split)
    return chunk, -(-steps // chunk)


def rolled_depth(program: Program) -> int:
    """How many outer summed dimensions an unrolled step keeps as loops: all but the innermost
    summed index of each reduction (of the one that sums fewest, where they differ). Unrolled
    too, a step over two summed indices of 8 is 64 copies of the register tile's FMAs, and
    ptxas spends every register the launch bounds allow on loads it hoists: tccg_14's split
    kernel used 254 registers, 96 with its outer index kept a loop (CUDA 13, sm_90)."""
    depths = [len(s.summed) for s in program.statements if s.summed]
    return max(min(depths, default=1) - 1, 0)


def unrolled_indices(program: Program) -> frozenset[str]:
    """The summed indices an unrolled step unrolls (those :func:`rolled_depth` leaves)."""
    rolled = rolled_depth(program)
    return frozenset(i for s in program.statements for i in s.summed[rolled:])


def fastest(program: Program, indices: Sequence[str]) -> str:
    """The index of ``indices`` (a tensor's) that is fastest in memory."""
    return indices[-1] if program.layout == "C" else indices[0]


def padding(program: Program, indices: Sequence[str], pad: int) -> int:
    """Elements added to the fastest dimension of the staged tile of a tensor read with
    ``indices``, for the staging's ``pad``: 0 or 1 as it says; a 16-byte vector's elements
    (:func:`vector_pad`) where that dimension is the summed index an unrolled step unrolls, so
    that rows stay aligned for vector loads along it, and 1 elsewhere (padded by one,
    tccg_28's B tile was read value by value, four times the wavefronts). A tile whose rows a
    thread reads in whole vectors may be padded elsewhere instead (:func:`padded`)."""
    if not indices:
        return 0
    if pad > 1 and fastest(program, indices) not in unrolled_indices(program):
        return 1
    return pad


# Shared memory's 32 banks of 4 bytes: addresses 128 bytes apart share a bank [CUDA-CC].
BANK_LINE_BYTES = 128


def padded(program: Program, indices: Sequence[str], extents: Sequence[int],
           pad: int, geometry: Mapping[str, Any]) -> list[int]:
    """The extents of the staged tile of a read with ``indices`` (``extents`` in that order),
    padded for the staging's ``pad``: :func:`padding` elements on its fastest dimension, except
    for a vector's ``pad`` on a tile whose fastest index is free and read in whole vectors
    (:func:`vector_held`), whose rows are whole vectors, and which has a slower dimension of
    slabs of rows: there the rows stay 16-byte aligned (16-byte copies and loads, where
    padding by one made 4-byte ones) and the padding makes the slabs' stride an odd multiple
    of 64 bytes, half the 128 bytes of a bank line, so that a quarter warp's 16-byte loads of
    two neighbouring slabs at one offset fall in the two halves of the banks (one way, as
    their copies' stores). The first that does it of: a vector on the rows (rows of 32
    floats, slabs of 4 rows: (32 + 4) * 4 = 144 floats, 576 bytes = 4.5 lines), one row
    more per slab (tccg_07's A, rows of 16 floats, slabs of 16: 16 * 17 = 272 floats,
    1088 bytes = 8.5 lines; a vector on its rows gives (16 + 4) * 16 = 320 floats, whole lines,
    2 ways, and none 256, whole lines too). Else one element on the rows, as before."""
    padded_extents = list(extents)
    if not indices:
        return padded_extents
    order = list(range(len(indices)))
    if program.layout == "C":
        order.reverse()  # memory order, the fastest first
    row = order[0]
    if pad > 1 and indices[row] not in unrolled_indices(program):
        slab = _slab_padding(program, indices, padded_extents, order, pad, geometry)
        if slab is not None:
            return slab
    padded_extents[row] += padding(program, indices, pad)
    return padded_extents


def _slab_padding(program: Program, indices: Sequence[str], extents: list[int],
                  order: list[int], pad: int, geometry: Mapping[str, Any]) -> list[int] | None:
    """:func:`padded`'s aligned padding of a tile read in whole vectors along free rows, or
    None where it has none."""
    row = order[0]
    if (indices[row] not in vector_held(program, geometry)
            or not all(isinstance(e, int) for e in extents) or extents[row] % pad):
        return None
    slabs = [d for d in order if extents[d] > 1]
    if len(slabs) < 3 or slabs[0] != row:
        return None
    size = dtypes.itemsize(dtypes.compute(program.dtype))
    for dimension, added in ((row, pad), (slabs[-2], 1)):
        trial = list(extents)
        trial[dimension] += added
        stride = math.prod(trial[d] for d in order[:order.index(slabs[-1])])
        if stride * size % BANK_LINE_BYTES == BANK_LINE_BYTES // 2:
            return trial
    return None


def vector_held(program: Program, geometry: Mapping[str, Any]) -> frozenset[str]:
    """The index of x (the fastest of its group) where a thread's registers along x are whole
    16-byte vectors (``reg_x`` a multiple of :func:`vector_run`): loaded as such from an
    aligned tile where they are dealt ``vector`` or ``adjacent``, as the model prices them
    (its wavefronts and loads merge a thread's registers along x alone: held along y or z,
    tccg_48's B tile was priced at 4-way scalar reads and its pick fell from 85.3% to 72.7%
    FFMA). Decided with the tile's extents, whatever the assignment, so that a tile's padding
    is known as soon as its extents are (the bound prices it then)."""
    run = vector_run(program)
    order = groups(geometry["order"])
    if run == 1 or not order or geometry["reg_x"] % run:
        return frozenset()
    return frozenset(order[0][:1])


def vector_pad(program: Program) -> int:
    """The elements of one 16-byte vector: the padding that keeps a tile's rows aligned."""
    return max(1, VECTOR_BYTES // dtypes.itemsize(dtypes.compute(program.dtype)))


def vector_run(program: Program) -> int:
    """The values of a 16-byte vector a thread holds side by side under the ``vector``
    assignment: 4 in float32, 2 in float64; 1 (no such assignment) where the kernel's elements
    are not loaded in vectors (complex elements, float16 and bfloat16 converted one by one)."""
    if dtypes.is_complex(program.dtype) or program.dtype in dtypes.STORED:
        return 1
    return max(1, VECTOR_BYTES // dtypes.itemsize(program.dtype))


def dealt(assignment: str, thread: int, register: int, threads: int, registers: int,
          run: int) -> int:
    """Where in its axis's tile a thread's register lies (see ``assign_*`` in QUANTITIES; ``run``
    the values of a vector, :func:`vector_run`)."""
    if assignment == "adjacent":
        return thread * registers + register
    if assignment == "vector":
        return (register // run * threads + thread) * run + register % run
    return thread + register * threads


# What one cp.async moves: 16, 8 or 4 bytes, widest first, both addresses aligned to the size
# (PTX ISA, "Data Movement and Conversion Instructions: cp.async").
ASYNC_COPY_BYTES = (16, 8, 4)
# dtypes whose staged tiles hold the tensor's own elements (a stored type's tile holds float32,
# converted on the way, and a complex one pairs): what a staging's cp.async may copy
ASYNC_DTYPES = ("float32", "float64")


def copy_width(size: int, extents: Sequence[int]) -> int | None:
    """Elements of ``size`` bytes one asynchronous copy moves: the widest of
    :data:`ASYNC_COPY_BYTES` whose elements divide every one of ``extents`` (so that a run
    starting at a multiple of its width stays aligned, and inside a row, wherever they apply);
    one element where ``size`` is one of those sizes and nothing larger divides; None where
    none fits (2-byte elements that no extent lets pair)."""
    for nbytes in ASYNC_COPY_BYTES:
        width = nbytes // size
        if nbytes >= size and nbytes % size == 0 and all(e % width == 0 for e in extents):
            return width
    return None


def async_width(program: Program, indices: Sequence[str], extents: Mapping[str, int],
                pad: int, geometry: Mapping[str, Any]) -> int:
    """Elements one asynchronous copy of the staged tile of a read with ``indices`` moves,
    given the tile's ``extents`` (per index, :func:`tile_extents`) and the staging's ``pad``:
    a run along the tensor's fastest index, which must divide that index's extent (every other
    stride then is a multiple: a run is all inside or all outside the tensor), the tile's
    extent along it (where its origin lies: a multiple of it, or 0 where the tile spans the
    index) and the padded tile's strides (:func:`padded`, for the ``geometry``: so every row
    of the tile, and a second buffer, starts aligned).
    One element where the read repeats an index or its sizes are symbolic. Of dtypes in
    :data:`ASYNC_DTYPES` (4 or 8 bytes), so at least one."""
    size = dtypes.itemsize(program.dtype)
    index = fastest(program, indices)
    if program.sizes is None or len(set(indices)) < len(indices):
        return 1
    tile = padded(program, indices, [extents[i] for i in indices], pad, geometry)
    order = tile if program.layout == "F" else tile[::-1]
    strides = [math.prod(order[:n]) for n in range(1, len(order))]
    return copy_width(size, (program.sizes[index], extents[index], *strides)) or 1


def copy_runs(box: Sequence[int], width: int) -> list[int]:
    """``box`` (fastest first) in runs of ``width`` along its fastest dimension: what an
    asynchronous copy numbers (a copy of one element each: the box)."""
    return [box[0] // width, *box[1:]] if box else []


def summed_reads(program: Program) -> tuple[Read, ...]:
    """The distinct reads inside reductions: the operands a staging strategy may stage, one
    tile each (remembered per program: a search's rules ask at most of its nodes)."""
    return program.derived("summed_reads", lambda p: tuple(dict.fromkeys(
        r for t in p.contraction.terms if t.summed(p.output_indices) for r in t.reads)))


def copy_extents(box: Sequence[int], threads: int) -> list[int]:
    """The extents by which a block's copy into shared memory numbers a tile's elements,
    fastest first: ``box``'s (fastest first), each padded to a power of two while fewer than
    ``threads`` elements precede it, the slowest never.

    Thread ``t`` copies elements ``t``, ``t + threads``, ..; with a power-of-two block every
    coordinate of its elements is then ``floor(t / stride)`` plus a multiple of the copy loop's
    counter, modulo a power of two: shifts and masks. Numbered by the box itself,
    ``floor(e/8) mod 24`` cost a division in every unrolled copy (tccg_31's pick: 100 of them
    per thread); a multiple of ``threads / stride`` that is no power of two would still cost
    one, nvcc not knowing ``floor(t / stride)``'s range. The padding's elements are skipped;
    a thread's copies, and the registers a preloading kernel holds for them, number
    ``ceil(prod(copy_extents) / threads)``."""
    if threads & (threads - 1):  # not a power of two: no padding makes the copies cheaper
        return list(box)
    padded, stride = [], 1
    for n, extent in enumerate(box):
        if n < len(box) - 1 and stride < threads:
            extent = 1 << (extent - 1).bit_length()
        padded.append(extent)
        stride *= extent
    return padded


def shared_bytes(program: Program, geometry: Mapping[str, Any]) -> float:
    """Shared memory of the staged tiles per block (inf where a symbolic extent is staged):
    every staged read's tile, padded (:func:`padded`), times the buffers; or, where the
    mapping lays out its tiles itself (``shared``), the bytes it says (no box of the tile
    gives them: its tiles are 2-D over linearised index groups)."""
    if geometry.get("shared"):
        return float(geometry["shared"])
    staged = set(indices(geometry["stage"]))
    extents = tile_extents(program, geometry)
    total = 0.0
    for read in summed_reads(program):
        if read.tensor in staged and read.indices:
            tile = [extents[i] if extents[i] is not None else math.inf for i in read.indices]
            total += math.prod(padded(program, read.indices, tile, geometry["pad"], geometry))
    buffers = 2 if geometry["double_buffer"] else 1
    # Tiles hold what the kernel computes in: a float16 or bfloat16 element is converted once,
    # when it is copied in, rather than at every read of the main loop, for twice the space.
    return total * buffers * dtypes.itemsize(dtypes.compute(program.dtype))
