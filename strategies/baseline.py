"""Thesis strategy 3: one output element per thread, its partial sums kept in registers.

Up to three output dimensions are mapped onto the grid and the block (``order`` names them for
x, y, z); a mapped dimension ``d`` with block extent ``B`` becomes block coordinate
``floor(d/B)`` and thread coordinate ``d mod B``. The remaining output dimensions stay loops of
each thread, and the summed dimensions loop inside them::

    { S[o, r] -> [floor(o_x/Bx), floor(o_y/By), floor(o_z/Bz), o_x mod Bx, o_y mod By, o_z mod Bz,
                  unmapped o.., phase, r..] }

isl's own guards make extents that are not multiples of the block correct.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from treduda.lower import Program
from treduda.strategy import (
    MAX_BLOCK_EXTENT,
    MAX_THREADS_PER_BLOCK,
    Constraint,
    Parameter,
    ParamSpace,
    Scheduled,
    Strategy,
    register,
    schedule_space,
    transform_schedule,
)

BLOCK_EXTENTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
AXES = "xyz"


def fastest_first(program: Program) -> tuple[str, ...]:
    """Output indices from the fastest-varying in memory to the slowest, for coalesced stores."""
    indices = program.output_indices
    return tuple(reversed(indices)) if program.layout == "C" else tuple(indices)


def mapping_orders(program: Program) -> tuple[str, ...]:
    """Every way to put up to three output indices on x, y, z, the coalescing one first."""
    indices = fastest_first(program)
    count = min(3, len(indices))
    orders = [",".join(p) for p in itertools.permutations(indices, count)]
    return tuple(orders) if orders else ("",)


@register
class ThreadPerElement(Strategy):
    name = "thread_per_element"
    description = ("one output element per thread, sums in registers; up to three output "
                   "dimensions on the grid (thesis strategy 3)")

    def space(self, program: Program) -> ParamSpace:
        blocks = [Parameter(f"block_{a}", BLOCK_EXTENTS, f"threads per block along {a}")
                  for a in AXES]
        rules = [
            Constraint(f"block_x*block_y*block_z <= {MAX_THREADS_PER_BLOCK} threads per block",
                       ("block_x", "block_y", "block_z"),
                       lambda p: p["block_x"] * p["block_y"] * p["block_z"]
                       <= MAX_THREADS_PER_BLOCK),
            Constraint("an axis without a mapped dimension has block extent 1",
                       ("order", "block_x", "block_y", "block_z"),
                       lambda p: all(p[f"block_{a}"] == 1
                                     for a in AXES[len(_mapped(p["order"])):])),
        ]
        rules += [Constraint(f"block_{a} <= {limit}", (f"block_{a}",),
                             lambda p, a=a, limit=limit: p[f"block_{a}"] <= limit)
                  for a, limit in zip(AXES, MAX_BLOCK_EXTENT, strict=True)]
        order = Parameter("order", mapping_orders(program),
                          "output indices mapped to x, y, z (comma separated)")
        return ParamSpace((order, *blocks), tuple(rules))

    def defaults(self, program: Program) -> dict[str, Any]:
        order = mapping_orders(program)[0]
        mapped = _mapped(order)
        wanted = (32, 4, 2)  # 32 consecutive threads along the coalescing dimension: one warp
        blocks = {f"block_{a}": 1 for a in AXES}
        for axis, index in enumerate(mapped):
            blocks[f"block_{AXES[axis]}"] = _fit(wanted[axis], program, index)
        return {"order": order, **blocks}

    def transform(self, program: Program, params: Mapping[str, Any]) -> Scheduled:
        mapped = _mapped(params["order"])
        names = schedule_space(program)
        position = {index: names[d] for d, index in enumerate(program.output_indices)}
        block = tuple(params[f"block_{a}"] for a in AXES)
        block_dims, thread_dims = ["0"] * 3, ["0"] * 3
        for axis, index in enumerate(mapped):
            block_dims[axis] = f"floor({position[index]}/{block[axis]})"
            thread_dims[axis] = f"{position[index]} mod {block[axis]}"
        loops = [position[i] for i in program.output_indices if i not in mapped]
        rest = names[len(program.output_indices):]
        schedule = transform_schedule(program, block_dims + thread_dims + loops + rest)
        return Scheduled(program, schedule, block, self.name, dict(params))


def _mapped(order: str) -> tuple[str, ...]:
    return tuple(i for i in order.split(",") if i)


def _fit(wanted: int, program: Program, index: str) -> int:
    """The block extent: ``wanted``, or the smallest power of two covering a smaller extent."""
    if program.sizes is None:
        return wanted
    extent = program.sizes[index]
    return min(wanted, next(b for b in BLOCK_EXTENTS if b >= min(extent, BLOCK_EXTENTS[-1])))
