"""Shared-memory staging (thesis strategies 7-9): each step's footprint of chosen inputs is
copied into shared memory by the whole block, between two barriers, and read from there.

The statements and the schedule that do it (copies, barriers, preloading, double buffering,
asynchronous copies) are built by :mod:`.staging_kernel`, which says how.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from treduda.codegen import ir
from treduda.errors import StrategyError
from treduda.polyhedral import geometry
from treduda.polyhedral.lower import Kind, Program
from treduda.polyhedral.strategy import (
    Composite,
    Constraint,
    Parameter,
    ParamSpace,
    Priority,
    Role,
    Scheduled,
    Strategy,
    register,
)

from .staging_kernel import Stager
from .tiling import fastest_first


def stageable(program: Program) -> tuple[str, ...]:
    """Inputs read inside a reduction: the ones whose footprints are reused across threads."""
    names = [e.array for s in program.statements if s.kind == Kind.REDUCE
             for e in ir.elements(s.body)[1:]]
    return tuple(dict.fromkeys(n for n in names if n in program.contraction.inputs))


def staging_choices(program: Program) -> tuple[str, ...]:
    """The values of ``stage``: every subset of the :func:`stageable` inputs, largest first,
    each named in the program's order of its inputs. Subsets of one size come in an order of
    their inputs that neither their names nor their place in the product decide: the input
    holding the output's fastest index first (the positions of its output indices in memory
    order, fastest first, compared). A budgeted search climbs through the first faster
    neighbour it scores, so this order steers its path: written ``A[g,e,b,c]*B[d,f,g,a]``
    (tccg_45), staging A alone was tried before B alone and the search picked 0.1528 ms
    predicted; written ``B*A``, the same product, 0.1481 ms."""
    tensors = stageable(program)
    place = {index: n for n, index in enumerate(fastest_first(program))}
    ranked = sorted(tensors, key=lambda t: sorted(place[i] for i in program.contraction.inputs[t]
                                                  if i in place))
    return (*(",".join(sorted(c, key=tensors.index)) for n in range(len(ranked), 0, -1)
              for c in itertools.combinations(ranked, n)), "")


@register
class Staged(Strategy):
    name = "staged"
    description = ("copy each step's footprint of chosen inputs into shared memory, between "
                   "barriers, optionally preloaded and double-buffered (thesis strategies 7-9); "
                   "chain after a tiling: tiled+staged")

    quantities = ("stage", "pad", "preload", "double_buffer", "async_copy")  # its parameters

    def space(self, program: Program, before: Sequence[Strategy] = ()) -> ParamSpace:
        if not before:
            raise StrategyError("staging needs a mapping before it: use e.g. 'tiled+staged'")
        inputs = program.contraction.inputs  # tensor -> its indices
        parameters = (Parameter("stage", staging_choices(program),
                                "inputs staged in shared memory (comma separated)",
                                priority=Priority.STAGING, role=Role.STAGE),
                      Parameter("preload", (False, True), "load the next step into registers "
                                "while computing this one", priority=Priority.BUFFERS),
                      Parameter("double_buffer", (False, True),
                                "two buffers per tile, alternating by step: one barrier per "
                                "step instead of two", priority=Priority.BUFFERS),
                      Parameter("pad", tuple(dict.fromkeys((0, 1, geometry.vector_pad(program)))),
                                "elements added to a tile's fastest dimension so threads hit "
                                "different banks: 0, 1, or a 16-byte vector's on tiles read in "
                                "vectors along it (1 on the others, or an aligned padding of "
                                "rows read in whole vectors: geometry.padded)",
                                priority=Priority.BUFFERS),
                      Parameter("async_copy", (False, True) if program.dtype
                                in geometry.ASYNC_DTYPES else (False,),
                                "staged tiles copied by cp.async (sm_80+) in runs of up to 16 "
                                "bytes, not through registers; double-buffered, a step's copies "
                                "are issued a step ahead, before the previous step's compute",
                                priority=Priority.BUFFERS))
        # What a mapping offers a stager: its geometry (the tile once its tile parameters are
        # decided; the step and whether it is unrolled once all of them are).
        mapping = Composite(before, self.limits)
        values = {p.name: p.values for p in mapping.space(program).parameters}
        _refuse_own_staging(program, mapping, values)
        tile_names, every_name = mapping.tile_parameters(program), tuple(values)
        budget = self.limits.shared_per_block

        # What the rules ask for, remembered (the search checks them at every node): the
        # mapping's geometry per its decisions, whether the tiles fit per tile and staging.
        geometries: dict[tuple, dict[str, Any]] = {}
        known: dict[tuple, bool] = {}

        def described(p: Mapping[str, Any]) -> dict[str, Any]:
            key = tuple((n, p[n]) for n in every_name if n in p)
            if key not in geometries:
                geometries[key] = geometry.decided(mapping.geometry(program, p, values))
            return geometries[key]

        def fits(p: Mapping[str, Any], pad: int, double_buffer: bool) -> bool:
            key = (*(p[n] for n in tile_names), p["stage"], pad, double_buffer)
            found = known.get(key)
            if found is None:
                staging = {"stage": p["stage"], "pad": pad, "double_buffer": double_buffer}
                found = known[key] = geometry.shared_bytes(
                    program, {**described(p), **staging}) <= budget
            return found

        rules = (() if self.limits.async_copies else (
            Constraint("asynchronous copies need compute capability 8.0 (cp.async)",
                       ("async_copy",), lambda p: not p["async_copy"]),)) + (
            # Checked as soon as the tiles and the staged inputs are known, so that the search
            # meets no dead end at the last decisions: padding and a second buffer only add.
            Constraint(f"staged tiles fit in {budget} bytes of shared memory per block "
                       "(unpadded, one buffer)", (*tile_names, "stage"),
                       lambda p: fits(p, 0, False)),
            Constraint(f"staged tiles fit in {budget} bytes of shared memory per block",
                       (*tile_names, "stage", "pad", "double_buffer"),
                       lambda p: fits(p, p["pad"], p["double_buffer"])),
            Constraint("padding is 0 when nothing is staged", ("stage", "pad"),
                       lambda p: bool(p["stage"]) or p["pad"] == 0),
            Constraint("a vector's padding needs a staged tile it pads otherwise than by one "
                       "(read in vectors along an unrolled summed index, or along free rows: "
                       "geometry.padded)", (*tile_names, "stage", "pad"),
                       lambda p: p["pad"] <= 1 or any(
                           vector_padded(program, inputs[t], described(p), p["pad"])
                           for t in p["stage"].split(",") if t)),
            Constraint("preloading needs staged inputs, reduction steps and an unrolled step "
                       "(its registers are indexed by the unrolled copy loop)",
                       (*every_name, "stage", "preload"),
                       lambda p: not p["preload"] or bool(p["stage"] and described(p)["step"]
                                                          and described(p)["unroll"])),
            Constraint("double buffering needs staged inputs and reduction steps",
                       (*tile_names, "stage", "double_buffer"),
                       lambda p: not p["double_buffer"] or bool(p["stage"]
                                                                and described(p)["step"])),
            Constraint("asynchronous copies need staged inputs", ("stage", "async_copy"),
                       lambda p: not p["async_copy"] or bool(p["stage"])),
            Constraint("asynchronous copies replace preloading (their data skip the "
                       "registers; double-buffered, they run a step ahead)",
                       ("preload", "async_copy"),
                       lambda p: not (p["preload"] and p["async_copy"])),
        )
        return ParamSpace(parameters, rules)

    def describe(self, program: Program, choices: Mapping[str, tuple]) -> dict[str, tuple]:
        return {q: choices[q] for q in self.quantities}

    def tile_parameters(self, program: Program) -> tuple[str, ...]:
        return ()  # staging changes where a tile lives, not its extents

    def defaults(self, program: Program, before: Sequence[Strategy] = ()) -> dict[str, Any]:
        return {"stage": ",".join(stageable(program)), "pad": 1, "preload": False,
                "double_buffer": False, "async_copy": False}

    def transform(self, scheduled: Scheduled, params: Mapping[str, Any]) -> Scheduled:
        staged = [t for t in params["stage"].split(",") if t]
        if not staged:
            return scheduled
        if Role.STAGE not in scheduled.roles:
            raise StrategyError("staging needs a schedule with a stage dimension: chain it after "
                                "a tiling strategy, e.g. 'tiled+staged'")
        return Stager(scheduled, staged, params["pad"], params["preload"],
                      params["double_buffer"], params["async_copy"]).run()


def vector_padded(program: Program, indices: Sequence[str], described: Mapping[str, Any],
                  pad: int) -> bool:
    """Whether a vector's ``pad`` lays out the staged tile of a read with ``indices``
    otherwise than a pad of one, given the mapping's ``described`` geometry."""
    extents = geometry.tile_extents(program, described)
    tile = [extents[i] for i in indices]
    if None in tile:  # a symbolic extent: the rows' padding alone tells
        return geometry.padding(program, indices, pad) > 1
    return (geometry.padded(program, indices, tile, pad, described)
            != geometry.padded(program, indices, tile, 1, described))


def _refuse_own_staging(program: Program, mapping: Strategy, values: Mapping[str, tuple]
                        ) -> None:
    """Raise where ``mapping`` stages its inputs itself (it describes ``stage``): its tiles are
    laid out as it needs them (the tensor-core mapping's fragment loads read 2-D tiles of its
    linearised index groups, zero-filled outside the tensors), which this strategy's tiles,
    the boxes of each step's footprint, are not."""
    described = mapping.describe(program, values)
    if "stage" not in described:
        return
    own = [name for name in values if name in Staged.quantities]
    tuned = f" (its {' and '.join(own)} parameters tune that staging)" if own else ""
    raise StrategyError(f"'{mapping.name}' stages {described['stage'][0]} in shared memory "
                        "itself, in tiles of its own layout, so 'staged' cannot chain after it: "
                        f"use '{mapping.name}' alone{tuned}")
