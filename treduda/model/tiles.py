"""A candidate's tiles, each quantity at its most optimistic completion: the base of the optimist.

:class:`_Tiles` reads a (partial) candidate through the strategy's description of itself
(:mod:`treduda.polyhedral.geometry`): which decisions are taken and which values the open ones
may still take. From them it counts what the tiles set: blocks launched and the output they
pad, threads, steps and multiply-adds per block and step, each read's footprint and L2
traffic, shared memory and the copies' instructions. Each term the search asks for at many
nodes is remembered per model under the decisions it depends on (:meth:`_Tiles.memo`). The
warps' accesses (:mod:`treduda.model.accesses`) and the registers and latency
(:mod:`treduda.model.optimist`) are counted on top of these.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ..polyhedral import geometry
from ..polyhedral.geometry import AXES, Description
from .counts import Counts, _Read
from .prediction import Compiled

STEP_OVERHEAD = 4  # instructions per thread and step for the loop itself
ASYNC_SYNC_INSTRUCTIONS = 2  # per thread and step of asynchronous copies: a commit and a wait
# Integer instructions beside each cp.async (LDGSTS) of a step: its global address (64-bit, two)
# and its shared one, which move with the step and the buffer. In the SASS of tccg_25's
# pick (nvcc 13, sm_90; A and B staged at step 4) a step issues 10 LDGSTS beside about 45
# integer instructions, 8 of them the loops'.
ASYNC_ADDRESS_INSTRUCTIONS = 3
# Integer instructions per thread and step that a double buffer adds: the shared addresses of
# the buffer a step reads and the one it fills alternate, and the pipeline's first and last
# steps are tested inside the loop. In the SASS of tccg_31's step-8 candidates (nvcc 13, sm_90)
# double buffering added 51 instructions a step to the cp.async copies and 17 to the copies
# through registers; counting none, the model picked the double-buffered cp.async kernel (76.5%
# FFMA) over its single-buffered twin (82.8%) and a single step of 32 (87.0%).
DOUBLE_BUFFER_INSTRUCTIONS = 24
# Instructions per multiply-add that an unrolled step's guarded copy issues beyond its unguarded
# one: a step shorter than the others (the last, where the step does not divide a summed extent)
# runs the copy with each register position under a guard and its operands loaded one value at a
# time. In the SASS of tccg_12's step-32 candidate (c = 7248, nvcc 13, sm_90) the step loop holds
# both copies: 6914 instructions for 4096 FFMA, where the step-16 twin (no partial step) issues
# 1114 for 1024; the guarded copy, 2.3 per FFMA, issues 1.2 more than the unguarded one.
GUARDED_STEP_INSTRUCTIONS = 1.2
# Per axis (x, y, z): the names of its threads, registers and their assignment.
BLOCK, REG, ASSIGN = (tuple(f"{k}_{a}" for a in AXES) for k in ("block", "reg", "assign"))
# The decisions of a block's tile per step (geometry.tile_extents).
TILE_DECISIONS = ("order", "step", *BLOCK, *REG)
T = TypeVar("T")
_MISSING = object()  # what memo and once find for a term not computed yet


class candidate_property(Generic[T]):
    """``functools.cached_property`` without its lock: before Python 3.12 the first read of
    each instance's value takes a lock shared by every instance (a few percent of GEMM
    4096^3's search, whose thousands of candidates read a dozen quantities once each). A
    candidate is read only by the thread that made it (one prediction), so no value is
    computed twice."""

    def __init__(self, compute: Callable[[Any], T]):
        self.compute, self.__doc__ = compute, compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]
        value = instance.__dict__[self.name] = self.compute(instance)
        return value


class _Tiles:
    """A (partial) candidate's decisions, tiles, blocks, steps and traffic; open decisions take,
    factor by factor, the allowed value most favourable to the quantity."""

    def __init__(self, model: Counts, described: Description, compiled: Compiled | None = None):
        self.m, self.described, self.compiled = model, described, compiled
        self.p = geometry.decided(described)  # the quantities with one value left
        # per axis, its indices (fastest first), its name ("c*a" for a group) and its extent;
        # every index on an axis
        self.order, self.axes, self.extents, self.mapped = self.memo(
            ("axes", self.p["order"]), lambda: self._axes(self.p["order"]))
        self.walked = geometry.indices(self.p.get("walk", ""))
        self._once: dict[tuple, Any] = {}  # see once

    def _axes(self, order: str) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...],
                                         list[int], frozenset[str]]:
        return (geometry.groups(order), geometry.indices(order),
                [geometry.group_extent(g, self.m.sizes) for g in geometry.groups(order)],
                frozenset(geometry.on_axes(order)))

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered per model under ``key``: the term's name and every
        decision (or option) it depends on, no more, so that the many nodes of a search that
        agree on those compute it once."""
        found = self.m._known.get(key, _MISSING)  # one lookup: the keys are long tuples
        if found is _MISSING:
            found = self.m._known[key] = compute()
        return found

    def options(self, name: str) -> tuple:
        """The values quantity ``name`` can still take."""
        return self.described[name]

    def tiles(self, n: int) -> tuple[int, ...]:
        """The tiles axis ``n`` can still have (threads times registers), each once."""
        return self._tiles[n]

    @candidate_property
    def _tiles(self) -> list[tuple[int, ...]]:
        found = []
        for block, reg in zip(BLOCK, REG, strict=True):
            blocks, regs = self.options(block), self.options(reg)
            found.append(self.memo(("tiles", blocks, regs), lambda b=blocks, r=regs: tuple(
                sorted({x * y for x, y in itertools.product(b, r)}))))
        return found

    @candidate_property
    def axis_tiles(self) -> tuple:
        """The order and the tiles each of its axes can still have: what the blocks, the
        padded output and the traffic depend on (their keys, :meth:`memo`)."""
        return (self.p["order"], *self._tiles[:len(self.extents)])

    def padded_elements(self) -> float:
        return self.memo(("padded", self.axis_tiles), self._padded_elements)

    def _padded_elements(self) -> float:
        total = math.prod(self.m.sizes[i] for i in self.m.outputs if i not in self.mapped)
        for n, extent in enumerate(self.extents):
            total *= min(math.ceil(extent / t) * t for t in self.tiles(n))
        return total

    def blocks(self) -> float:
        """Blocks launched: tiles along x, y, z (over a group's product extent), times every
        value of the output indices not on an axis (each gets blocks of its own, folded into
        the grid's x axis), except where the threads walk them (:meth:`walks`)."""
        return self.memo(("blocks", self.axis_tiles, self.walked), self._blocks)

    def _blocks(self) -> float:
        tiles = math.prod(min(math.ceil(extent / t) for t in self.tiles(n))
                          for n, extent in enumerate(self.extents)
                          if self.axes[n] not in self.walked)
        return tiles * math.prod(self.m.sizes[i] for i in self.m.outputs
                                 if i not in self.mapped and i not in self.walked)

    def walks(self) -> float:
        """Tiles (of an index on an axis) and values (of another) every thread walks one after
        the other: its reductions and their latencies follow each other as often."""
        total = 1.0
        for index in self.walked:
            if index in self.axes:
                n = self.axes.index(index)
                total *= min(math.ceil(self.extents[n] / t) for t in self.tiles(n))
            else:
                total *= self.m.sizes[index]
        return total

    def parts(self) -> tuple[int, int, float]:
        """A split reduction's parts, the blocks sharing each output tile: the most and the
        fewest any completion launches, and the share of the whole reduction's chain a block
        walks. ``split`` parts at most, fewer where parts of whole steps cover the split
        index's steps already (:func:`~treduda.polyhedral.geometry.split_parts`): the H200's
        tccg_13 pick (c's 376 values at step 16, 24 steps, split 16) launches 12 parts of 2
        steps, 864 blocks, not 1152. The share is the longest part's steps over the index's;
        while open, the least of any completion's parts times that share, over the most parts
        (what keeps the bound's blocks times chain below each completion's)."""
        splits, steps = self.options("split"), self.options("step")
        return self.memo(("parts", splits, steps), lambda: self._parts(splits, steps))

    def _parts(self, splits: tuple, steps: tuple) -> tuple[int, int, float]:
        extent = self.m.sizes[geometry.split_index(self.m.program)] if max(splits) > 1 else 0
        found = []  # (parts, the longest part's share of the steps) of each completion
        for split, step in itertools.product(splits, steps):
            if split == 1:
                found.append((1, 1.0))
            elif step:  # a split needs steps (the strategy's rule)
                stepped = -(-extent // step)
                chunk, parts = geometry.split_parts(stepped, split)
                found.append((parts, chunk / stepped))
        if not found:  # a split without steps, which no strategy's rule lets through
            return max(splits), min(splits), 1 / max(splits)
        most = max(n for n, _ in found)
        return most, min(n for n, _ in found), min(n * share for n, share in found) / most

    def threads(self) -> int:
        return self._threads

    @candidate_property
    def _threads(self) -> int:
        return math.prod(min(self.options(b)) for b in BLOCK)

    def registers_tile(self) -> int:
        return math.prod(min(self.options(r)) for r in REG)

    def once(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered for this candidate (several terms ask for it)."""
        found = self._once.get(key, _MISSING)
        if found is _MISSING:
            found = self._once[key] = compute()
        return found

    def reuse(self, read: _Read) -> int:
        """How many FMAs of a thread use each loaded element of ``read``: the register tile
        along the axes ``read`` does not depend on (on none of a group's indices)."""
        return self._reuse[read]

    @candidate_property
    def _reuse(self) -> dict[_Read, int]:
        return {read: math.prod(max(self.options(REG[n])) for n, group in enumerate(self.order)
                                if not any(i in read.indices for i in group))
                for read in self.m.reads}

    def staged(self, read: _Read) -> bool | None:
        """True or False once decided, None while open."""
        return None if self._stage is None else read.tensor in self._stage

    @candidate_property
    def _stage(self) -> tuple[str, ...] | None:
        """The staged tensors, None while open."""
        return geometry.indices(self.p["stage"]) if "stage" in self.p else None

    def decided(self, *names: str) -> bool:
        return all(n in self.p for n in names)

    def tiles_decided(self) -> bool:
        return self._tiles_decided

    @candidate_property
    def _tiles_decided(self) -> bool:
        return self.decided("step", *BLOCK, *REG)

    @candidate_property
    def tile_decisions(self) -> tuple:
        """The decided values of :data:`TILE_DECISIONS` (once :meth:`tiles_decided`): what the
        block's tile per step (:attr:`tile`) depends on."""
        return tuple(self.p.get(k) for k in TILE_DECISIONS)

    @candidate_property
    def vector_held(self) -> frozenset[str]:
        """The indices threads hold in whole vectors (:func:`~treduda.polyhedral.geometry.
        vector_held`): a staged tile's padding depends on them, so a term remembered for a
        padding by less than :attr:`tile_decisions` does."""
        return geometry.vector_held(self.m.program, self.p)

    def footprint(self, read: _Read) -> dict[str, int]:
        """Per block and step, how many values of each of its indices ``read`` touches."""
        return self.once(("footprint", read), lambda: {i: self.tile[i] for i in read.indices})

    @candidate_property
    def tile(self) -> dict[str, int | None]:
        return self.memo(("tile", self.tile_decisions),
                         lambda: geometry.tile_extents(self.m.program, self.p))

    def traffic(self, read: _Read) -> float:
        """Elements of ``read`` all blocks pull from L2 over the kernel: per axis, its tiles
        times the values of ``read``'s indices each tile covers (:meth:`covered`); remembered
        per model for the order and the tiles still possible."""
        return self.memo(("traffic", read, self.axis_tiles), lambda: self._traffic(read))

    def _traffic(self, read: _Read) -> float:
        total = 1.0
        for n, extent in enumerate(self.extents):
            total *= min(math.ceil(extent / t) * self.covered(read, n, t) for t in self.tiles(n))
        for index in self.m.sizes:
            if index not in self.mapped and (index in read.indices or index in self.m.outputs):
                total *= self.m.sizes[index]
        return total

    def covered(self, read: _Read, n: int, tile: int) -> int:
        """Values of ``read`` a block's ``tile`` along axis ``n`` covers: the tile for an index
        ``read`` has, 1 for one it has not; for a group, the box of its indices' values the
        tile touches (:func:`~treduda.polyhedral.geometry.touched`), restricted to those
        ``read`` has (a staged copy moves that box)."""
        group = self.order[n]
        if len(group) == 1:
            return tile if group[0] in read.indices else 1
        box = geometry.touched(group, self.m.sizes, tile)
        return math.prod(box[i] for i in group if i in read.indices)

    def copy_instructions(self) -> float:
        """Per FMA: copy instructions (a load and a store per element the copy numbers, the
        padding's included: :meth:`copy_extents`; asynchronous, one cp.async per run instead,
        and a commit and a wait per thread) and the step's overhead (the loop, its barriers, a
        double buffer's bookkeeping), 0 while undecided; while ``async_copy`` is open, the fewer."""
        if not self.tiles_decided() or "stage" not in self.p:
            return 0.0
        key = ("copy instructions", self.tile_decisions, self.p["stage"],
               *(self.options(q) for q in ("async_copy", "double_buffer", "pad")))
        return self.memo(key, self._copy_instructions)

    def _copy_instructions(self) -> float:
        staged = [r for r in self.m.reads if self.staged(r)]
        threads = math.prod(self.p[b] for b in BLOCK)
        per_block_step = min(self._async_copies(staged, threads) if copied
                             else self._copies(staged) for copied in self.options("async_copy"))
        pipeline = min(self.pipeline_per_step(double) for double in self.options("double_buffer"))
        per_block_step += threads * (STEP_OVERHEAD + (pipeline if staged else 0))
        return per_block_step / self.fmas_per_block_step()

    def loop_instructions(self, loads: float) -> float:
        """Per FMA, what a rolled step loop (``unroll`` False) issues in every iteration, one
        reduction point each: the loop's own :data:`STEP_OVERHEAD`, and an address update
        per operand load (``loads`` per FMA), which an unrolled step folds into the loads'
        constant offsets. 0 unrolled, or while that is open. tccg_16's pick, rolled, spent
        98 integer instructions and 15 branches on 128 FFMA in the SASS (45.6% FFMA), where
        the model counted nothing; unrolled it issues 82.3% FFMA."""
        if self.p.get("unroll", True) is not False or not self.p.get("step"):
            return 0.0
        registers = [self.p.get(r) for r in REG]  # while one is open, the overhead's least: 0
        return (0.0 if None in registers else STEP_OVERHEAD / math.prod(registers)) + loads

    def partial_step_instructions(self) -> float:
        """Per multiply-add, what the guarded copy of an unrolled step loop adds
        (:data:`GUARDED_STEP_INSTRUCTIONS`) to the share of reduction points that lie in a
        step shorter than the others: where the step does not divide a summed extent, the last
        step of that index runs the guarded copy in every block (96 values in steps of 64:
        a third of the points); a step longer than its extent is one full step. 0 rolled,
        without steps, or while the step or unrolling is open."""
        step = self.p.get("step")
        if not step or not self.m.iterations or self.p.get("unroll") is not True:
            return 0.0
        # a step no shorter than its extent is one step, of constant length (tccg_35's 32-step
        # over g = 24: 80.1% FFMA, no branch in its main loop)
        full = sum(math.prod(e // min(step, e) * min(step, e) for e in extents)
                   for extents in self.m.summed)
        return GUARDED_STEP_INSTRUCTIONS * (1 - full / self.m.iterations)

    def _copies(self, staged: list[_Read]) -> float:
        """Instructions of a block's copies per step through registers: a load, (a
        conversion,) and a store per element, with the arithmetic of their addresses as for
        an asynchronous copy (:data:`ASYNC_ADDRESS_INSTRUCTIONS`): counted for cp.async
        alone, seven TCCG rows moved to preloaded copies through registers at steps of 8
        (tccg_31: 50.0% FFMA, 10 LDG and 48 integer instructions per 128 FFMA)."""
        per_element = 2 + self.m.conversions + ASYNC_ADDRESS_INSTRUCTIONS
        return sum(per_element * math.prod(self.copy_extents(r)) for r in staged)

    def _async_copies(self, staged: list[_Read], threads: int) -> float:
        """Instructions of a block's asynchronous copies per step: one cp.async (LDGSTS) per
        run the copy numbers (:func:`~treduda.polyhedral.geometry.async_width`; the fewest
        while the padding is open), as the tensor-core model counts them, each with the
        arithmetic of its addresses (:data:`ASYNC_ADDRESS_INSTRUCTIONS`), and a commit and a
        wait per thread."""
        runs = sum(min(math.prod(self.copy_extents(r, geometry.async_width(
            self.m.program, r.indices, self.footprint(r), pad, self.p)))
            for pad in self.options("pad")) for r in staged)
        return (runs * (1 + ASYNC_ADDRESS_INSTRUCTIONS) + ASYNC_SYNC_INSTRUCTIONS * threads
                if staged else 0.0)

    def fastest_first(self, read: _Read) -> list[str]:
        """``read``'s distinct indices in memory order, the fastest first."""
        indices = list(dict.fromkeys(read.indices))
        return indices if self.m.program.layout == "F" else indices[::-1]

    def copy_extents(self, read: _Read, width: int = 1) -> list[int]:
        """The extents by which the copy of ``read``'s tile numbers its elements (or its
        runs of ``width`` elements, :func:`~treduda.polyhedral.geometry.copy_runs`), fastest
        first (:func:`~treduda.polyhedral.geometry.copy_extents`)."""
        extents = self.footprint(read)
        box = [extents[i] for i in self.fastest_first(read)]
        return geometry.copy_extents(geometry.copy_runs(box, width), self.threads())

    def steps(self, step: int | None = None) -> int:
        """Reduction steps per output point: every summed index in steps of ``step`` values
        (by default the decided one), summed over the reduction groups; without steps the
        loop is not strip-mined, and each summed value counts as a step of its own."""
        step = self.p["step"] if step is None else step
        if not step:
            return max(self.m.iterations, 1)
        return sum(math.prod(math.ceil(e / step) for e in extents)
                   for extents in self.m.summed) or 1

    def fmas_per_block_step(self) -> float:
        """Multiply-adds a block does per step: its tile times the summed values of a step,
        which are ``step`` values of *each* summed index (a step of two summed indices holds
        up to ``step**2`` values; counting ``step`` overcharged the copies and barriers of
        tccg_13-30 by up to a factor of ``step``)."""
        tile = math.prod(self.p[b] * self.p[r] for b, r in zip(BLOCK, REG, strict=True))
        return tile * max(self.m.iterations, 1) / self.steps()

    def pipeline_per_step(self, double_buffer: bool) -> float:
        """Instructions per thread and step of the staging's pipeline: its barriers and, double
        buffered, the alternating buffers' bookkeeping (:data:`DOUBLE_BUFFER_INSTRUCTIONS`)."""
        extra = DOUBLE_BUFFER_INSTRUCTIONS if double_buffer and self.p["step"] else 0
        return self.barriers_per_step(double_buffer) + extra

    def barriers_per_step(self, double_buffer: bool) -> float:
        """Two barriers per step; double-buffered, one, and one more wherever the innermost
        step loop starts again (with a single step that is two again)."""
        step = self.p["step"]
        if not double_buffer or not step:  # double buffering needs steps
            return 2.0
        steps = restarts = 0
        for extents in self.m.summed:
            counts = [math.ceil(e / step) for e in extents]
            steps += math.prod(counts)
            restarts += math.prod(counts[:-1])
        return 1 + restarts / steps if steps else 2.0

    def shared_bytes(self) -> int:
        """Shared memory per block (the smallest padding and one buffer while they are open;
        0 while the tiles or the staging are)."""
        if not self.tiles_decided() or "stage" not in self.p:
            return 0
        least = {"pad": min(self.options("pad")),
                 "double_buffer": min(self.options("double_buffer"))}
        key = ("shared", self.tile_decisions, self.p["stage"], *least.values())
        return self.memo(key, lambda: int(geometry.shared_bytes(self.m.program,
                                                                {**self.p, **least})))
