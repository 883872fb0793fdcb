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

import math
from collections.abc import Mapping
from typing import Any

from ..errors import StrategyError
from ..frontend import dtypes
from ..frontend.tree import Read
from .lower import Program

AXES = "xyz"

QUANTITIES: dict[str, str] = {
    "order": "output indices on the x, y, z axes, comma separated (x is the coalescing one)",
    **{f"block_{a}": f"threads per block along {a}" for a in AXES},
    **{f"reg_{a}": f"output values per thread along {a}, held in registers" for a in AXES},
    **{f"assign_{a}": f"how a thread's values along {a} are dealt: 'cyclic' (thread t holds t, "
                      f"t + block_{a}, ..) or 'adjacent' (t * reg_{a}, t * reg_{a} + 1, ..)"
       for a in AXES},
    "walk": "output indices every thread walks in a loop, comma separated: for an index on an "
            "axis, all its tiles; for another, all its values (an output index neither on an "
            "axis nor walked has a block per value)",
    "step": "summed values per reduction step (0: the whole reduction at once)",
    "unroll": "whether the compiler unrolls the loop within a step",
    "stage": "inputs staged in shared memory, comma separated",
    "pad": "elements added to a staged tile's fastest dimension",
    "preload": "whether the next step is loaded into registers while this one computes",
    "double_buffer": "two shared-memory buffers per tile, alternating by step",
}

# What a quantity is in a kernel none of whose strategies sets it.
NEUTRAL: dict[str, tuple] = {
    "order": ("",), **{f"{k}_{a}": (1,) for k in ("block", "reg") for a in AXES},
    **{f"assign_{a}": ("cyclic",) for a in AXES}, "walk": ("",), "step": (0,),
    "unroll": (False,), "stage": ("",), "pad": (0,), "preload": (False,),
    "double_buffer": (False,),
}

Description = dict[str, tuple]  # quantity -> the values it can still take


def complete(described: Mapping[str, tuple], strategy: str) -> Description:
    """A strategy's description with the quantities it leaves out at their neutral values;
    a name outside the vocabulary is an error of the strategy's, not silently ignored."""
    unknown = sorted(set(described) - set(QUANTITIES))
    if unknown:
        raise StrategyError(f"strategy '{strategy}' describes {unknown}, which the model does "
                            f"not know; the quantities are: {', '.join(QUANTITIES)}")
    empty = sorted(q for q, values in described.items() if not values)
    if empty:
        raise StrategyError(f"strategy '{strategy}' leaves no value for {empty}")
    return {**NEUTRAL, **{q: tuple(v) for q, v in described.items()}}


def decided(description: Mapping[str, tuple]) -> dict[str, Any]:
    """The quantities that have one value left, with that value."""
    return {q: values[0] for q, values in description.items() if len(values) == 1}


def indices(text: str) -> tuple[str, ...]:
    """The index names of a comma-separated quantity (``order``, ``walk``)."""
    return tuple(i for i in text.split(",") if i)


def tile_extents(program: Program, geometry: Mapping[str, Any]) -> dict[str, int | None]:
    """How many values of each index one block touches per step, for a decided ``geometry``
    (None: all of them, for a symbolic size): the tile along an axis, one value of any other
    output index, the step of a summed one."""
    order = indices(geometry["order"])
    sizes = program.sizes or {}
    extents: dict[str, int | None] = {}
    for index in program.contraction.indices:
        if index in order:
            axis = AXES[order.index(index)]
            extent = geometry[f"block_{axis}"] * geometry[f"reg_{axis}"]
        elif index in program.output_indices:
            extent = 1
        else:
            extent = geometry["step"] or sizes.get(index)
        extents[index] = min(extent, sizes[index]) if extent and index in sizes else extent
    return extents


def summed_reads(program: Program) -> tuple[Read, ...]:
    """The distinct reads inside reductions: the operands a staging strategy may stage, one
    tile each."""
    return tuple(dict.fromkeys(r for t in program.contraction.terms
                               if t.summed(program.output_indices) for r in t.reads))


def shared_bytes(program: Program, geometry: Mapping[str, Any]) -> float:
    """Shared memory of the staged tiles per block (inf where a symbolic extent is staged):
    every staged read's tile, padded along its fastest index, times the buffers."""
    staged = set(indices(geometry["stage"]))
    extents = tile_extents(program, geometry)
    total = 0.0
    for read in summed_reads(program):
        if read.tensor in staged and read.indices:
            tile = [extents[i] if extents[i] is not None else math.inf for i in read.indices]
            tile[-1 if program.layout == "C" else 0] += geometry["pad"]
            total += math.prod(tile)
    buffers = 2 if geometry["double_buffer"] else 1
    return total * buffers * dtypes.itemsize(program.dtype)
