"""The optimist: every quantity of a (partial) candidate the model reads, at its best.

:class:`_Optimist` is what :class:`~treduda.model.model.Model` asks, for its bound (open
decisions at their most optimistic values, factor by factor, so every result is a valid
lower bound) and for its estimate (a complete candidate, counted exactly). It stacks three
layers, each in a module of its own: tiles, blocks, steps and traffic
(:mod:`treduda.model.tiles`); the wavefronts of warp 0's accesses
(:mod:`treduda.model.accesses`); and, here, what a thread holds and waits for: its
registers, what ptxas spills, and the chain of dependent work with its exposed loads.
"""

from __future__ import annotations

import itertools
import math

from ..frontend import dtypes
from ..polyhedral import geometry
from .accesses import _Accesses
from .counts import _Read
from .tiles import ASSIGN, BLOCK, REG

# Registers the main loop holds beside its values: per tensor it reads, the address of its
# next load (a 64-bit pointer, the index it advances by, a shared or global offset), and for
# the kernel, loop counters, thread and block indices. Calibrated against ptxas (CUDA 13,
# sm_90) on one half of 201 kernels (benchmarks/simt_registers.py: the H200 file's picks and
# rivals, the SIMT economy table's picks, random candidates of ten search spaces) and judged
# on the other: median |estimate - ptxas| 18.5 -> 5.5 registers there (the fit on the other half
# gives 8 and 8, judged 8).
ADDRESS_REGISTERS = 8
BOOKKEEPING_REGISTERS = 6
# ptxas (CUDA 13, sm_90) keeps a kernel whose operands all come from shared memory (short
# latency: it can load each just before its use) at 128 registers where the least its loop
# holds fits: the 5 such kernels of benchmarks/simt_registers.py counted 131-139 by
# live_registers got 123-128 (tccg_07~1; the economy picks of tccg_35/42/44/48); with an
# operand read from global memory, which ptxas loads ahead, 6 of 8 got 142-168.
SHARED_OPERANDS_TARGET = 128
REGISTER_BYTES = 4  # what a register spill stores or loads (registers are 32-bit)
HOISTED_REGISTERS = 2  # registers per global operand value loaded ahead: the value, its address
# Instructions by which ptxas issues a direct operand's load ahead of its first use: in the
# SASS (nvcc 13, sm_90) of 14 kernels reading an operand straight from global memory (the
# H200 rows tccg_01/02/04/11/13/16/18/19 and the H100 GEMM rows rand3/rand8/top1), the median
# distances from each load to its use run 12-159 instructions, their median 62; the registers
# left free do not set it (tccg_16's pick holds 116 of 255 and loads one point, 74
# instructions, ahead; gemm4096-rand8 17 points of 4 FMAs).
LOAD_WINDOW = 64
# The quantities live_registers reads (the tile, staging, padding, unrolling, preloading).
LIVE_QUANTITIES = ("order", "step", *BLOCK, *REG, "stage", "pad", "unroll", "preload")


class _Optimist(_Accesses):
    """Derived quantities of a (partial) candidate; open decisions take, factor by factor, the
    allowed value most favourable to the quantity, so every result is a valid lower bound."""

    def spill_bytes(self, exact: bool = True) -> float:
        """Bytes of spilled registers all threads move, stored and reloaded once per step (the
        main loop holds the live accumulators): ptxas's report where given, else a complete
        candidate's predicted spills (:meth:`spilled_registers`); never for the bound, which
        must not rest on a prediction. Local memory is cached in L1 and L2 (CUDA C++
        Programming Guide, "Local Memory"); a block's spills exceed what L1 keeps beside
        shared memory, so they are charged to L2."""
        if self.compiled:
            per_thread = self.compiled.spill_bytes
        else:
            per_thread = 2 * REGISTER_BYTES * self.spilled_registers() if exact else 0
        if not per_thread:
            return 0.0
        return per_thread * self.blocks() * self.threads() * self.steps() * self.walks()

    def least_spill_bytes(self) -> float:
        """The fewest bytes of spills (:meth:`spill_bytes`) the estimate of any completion
        predicts: what the main loop holds at the least (:meth:`live_registers` ``least``,
        every open decision at its fewest) beyond the cap of the launch bounds of the fewest
        threads, each factor of :meth:`spill_bytes` at its least (an 8 x 8 register tile in
        blocks of 1024 threads spills whatever is decided after)."""
        if self.compiled:
            return 0.0
        threads = self.threads()
        beyond = self.live_registers(least=True) - self.m.gpu.register_cap(threads)
        if beyond <= 0:
            return 0.0
        steps = min(self.steps(step) for step in self.options("step"))
        return 2 * REGISTER_BYTES * beyond * self.blocks() * threads * steps * self.walks()

    def spilled_registers(self) -> int:
        """Registers ptxas spills, predicted for a complete candidate without its report: none
        while the least the main loop can hold at once (:meth:`live_registers` ``least``)
        fits the cap of the launch bounds; beyond it,
        ptxas spills from the schedule it made before allocating, which loads each global
        operand of an unrolled step at the step's start (:meth:`live_registers` hoisted), so
        all of that above the cap. From ptxas (CUDA 13, sm_90) on GEMM 4096^3 with 1024
        threads and a 4 x 8 register tile (cap 64): A staged with 16-byte rows (pad 0) is read
        by LDS.128, the loop holds 81 values, and the SASS spills B's 128 loads of a 32-step
        (1624 bytes; predicted 1152); with pad 1 it holds 50 and ptxas does not spill; A and B
        staged, nothing is hoisted (240 bytes; predicted 200). Of 1260 candidates sampled from
        six spaces (GEMM in both layouts and in float64, TCCG rows 1 and 13), 45 are predicted
        to spill and all do; 6 more spill at most 104 bytes. Amounts are good to about 2x,
        worse for 8-steps (360 bytes predicted for ptxas's 40) and tiny blocks. On the 201
        kernels of benchmarks/simt_registers.py, ptxas spills in 12: 8 are foreseen (6 before
        :data:`ADDRESS_REGISTERS`), none that ptxas does not spill (against what the loop
        holds unconstrained: 10, and 8 it does not spill)."""
        cap = self.m.gpu.register_cap(self.threads())
        if self.live_registers(least=True) <= cap:
            return 0
        return self.live_registers(hoisted=True) - cap

    def registers(self) -> int:
        """ptxas's count where given; else what the main loop holds at once
        (:meth:`live_registers`), no more than the launch bounds let ptxas give a thread (it
        spills the rest, :meth:`spill_bytes`); where every operand comes from shared memory,
        no more than :data:`SHARED_OPERANDS_TARGET` once the least the loop holds fits it.
        While open, the fewest of any completion: the least the loop holds, capped for the
        largest block still possible."""
        if self.compiled:
            return self.compiled.registers
        largest = math.prod(max(self.options(b)) for b in BLOCK)
        held = self.live_registers()
        if not any(self.staged(r) is False for r in self.m.reads):
            held = min(held, max(self.live_registers(least=True), SHARED_OPERANDS_TARGET))
        return min(held, self.m.gpu.register_cap(largest))

    def live_registers(self, hoisted: bool = False, least: bool = False) -> int:
        """Registers the main loop holds at once, as ptxas allocates them where the launch
        bounds leave room: accumulators, operands (:meth:`operands`), the preloaded next step
        (each element as many registers as its dtype needs), each read's address
        (:data:`ADDRESS_REGISTERS`) and bookkeeping; ``hoisted``, with each global operand of
        an unrolled step loaded ahead; ``least``, with operands consumed one by one, as ptxas
        schedules them before it spills. Remembered per model for the values still open of
        the quantities it reads."""
        return self.once(("live", hoisted, least), lambda: self.memo(
            ("live", hoisted, least, *(self.options(q) for q in LIVE_QUANTITIES)),
            lambda: self._live_registers(hoisted, least)))

    def _live_registers(self, hoisted: bool, least: bool) -> int:
        elements = self.m.groups * self.registers_tile()
        elements += sum(self.operands(r, hoisted, least) for r in self.m.reads)
        if self.tiles_decided() and self.decided("stage") and self.p.get("preload"):
            threads = math.prod(self.p[b] for b in BLOCK)
            elements += sum(math.ceil(math.prod(self.copy_extents(r)) / threads)
                            for r in self.m.reads if self.staged(r))
        return (elements * dtypes.registers(self.m.program.dtype)
                + ADDRESS_REGISTERS * len(self.m.reads) + BOOKKEEPING_REGISTERS)

    def operands(self, read: _Read, hoisted: bool = False, least: bool = False) -> int:
        """Values of ``read`` the main loop holds at once: those of one reduction point for
        every register of the thread's tile it feeds (:meth:`tile_values`; ptxas loads them
        all before the point's outer product of FMAs), times a vector load's values along the
        reduction (:meth:`vector_values`: one LDS.128 per row); ``hoisted`` and read from
        global memory in an unrolled step, every value the unrolled loop loads; ``least``,
        one value a load (FMAs can consume operands one by one). Counted as one value, the
        estimate was a median 18 registers below ptxas's on 201 kernels
        (benchmarks/simt_registers.py), 6 counted so with :data:`ADDRESS_REGISTERS`."""
        vector = self.vector_values(read)
        if vector > 1:
            return self.tile_values(read) * vector
        if hoisted and self.staged(read) is False and self.p.get("unroll") and self.p["step"]:
            unrolled = (e for i, e in self.footprint(read).items() if i in self.m.unrolled)
            return self.tile_values(read) * math.prod(unrolled)
        return 1 if least else self.tile_values(read)

    def tile_values(self, read: _Read) -> int:
        """Values of ``read`` a thread's register tile uses per reduction point: its
        registers along the axes ``read`` depends on (the fewest while open)."""
        return math.prod(min(self.options(REG[n]))
                         for n, group in enumerate(self.order)
                         if any(i in read.indices for i in group))

    def vector_values(self, read: _Read) -> int:
        """Values of ``read`` one load brings along the reduction: up to 16 bytes from a
        staged tile with 16-byte aligned rows when :meth:`vectorisable` (as in
        :meth:`_wavefronts`), else 1, also while any of that is open."""
        if not (self.tiles_decided() and self.decided("pad", "unroll") and self.staged(read)
                and self.vectorisable(read) and self._aligned(read, self.p["pad"])):
            return 1
        fastest = geometry.fastest(self.m.program, read.indices)
        return max(1, min(self.m.per_access(True), self.footprint(read)[fastest]))

    def load_share(self, read: _Read) -> float:
        """Load instructions per value of ``read`` a thread loads: one per run of its values
        that sit side by side in an aligned vector (:mod:`~treduda.codegen.vectorize` merges
        each such run of an unrolled tile into one ``LDS.128`` or ``LDG.128``), else one per
        value. The runs lie along ``read``'s fastest index: x's index where x deals a thread
        whole vectors (:meth:`x_runs`), or the summed index an unrolled step walks, a step's
        values at a time (:meth:`reduction_runs`); staged, where the tile's rows are 16-byte
        aligned, else where the tensor's strides are. Counted one per value, tccg_25's pick
        read a staged tile four values at a time where the model saw one, and a direct read
        of A four where it saw one, and it staged A at step 4 (70.9% FFMA in the SASS, 136
        integer instructions) instead of its 91.6% kernel. While that is open, the least it
        can be: a vector's share wherever the decisions made allow it."""
        run = self.m.vector_run
        if not read.indices:  # a scalar read inside a reduction: one load per value
            return 1.0
        fastest = geometry.fastest(self.m.program, read.indices)
        along_x = bool(self.order) and fastest == self.order[0][0]
        if run == 1 or not (along_x or fastest in self.m.unrolled):
            return 1.0
        if not (self.tiles_decided() and self.decided("stage", "pad", "assign_x", "unroll")):
            return 1 / run
        staged = self.staged(read)
        aligned = (self._aligned(read, self.p["pad"]) if staged else
                   all(s % run == 0 for i, s in read.strides.items() if i != fastest))
        if not aligned:
            return 1.0
        values = self.x_runs(run) if along_x else self.reduction_runs(read, run)
        return 1 / values

    def x_runs(self, run: int) -> int:
        """Values a thread holds side by side along x: a vector's under the ``vector``
        assignment, and under ``adjacent`` where its registers along x are whole vectors (the
        same code then); one, cyclic."""
        assignment, registers = self.p["assign_x"], self.p["reg_x"]
        whole = assignment == "vector" or assignment == "adjacent" and registers % run == 0
        return run if whole else 1

    def reduction_runs(self, read: _Read, run: int) -> int:
        """Values of ``read`` a thread loads side by side along its fastest index, a summed
        one: as many of a vector as an unrolled step holds (all of them where it holds whole
        vectors), else one."""
        if not self.p["unroll"] or not self.p["step"]:
            return 1
        extent = self.footprint(read)[geometry.fastest(self.m.program, read.indices)]
        return run if extent % run == 0 else 1

    def chain(self, exact: bool = True, guarded: bool = False) -> float:
        """Cycles of one thread's dependent work: its FMA chains, one exposed L2 latency per
        step unless the next step is preloaded (or copied asynchronously into the other
        buffer, a step ahead), and the waits on operands read from global memory
        (:meth:`global_wait`; ``guarded``, in a block that loads them under guards of its
        own, :meth:`guarded_share`); not for the bound: nvcc may pipeline the loads of later
        iterations."""
        g = self.m.gpu
        fmas = self.m.iterations * dtypes.chain(self.m.program.dtype) * g.fma_latency_cycles
        exposed = 0.0
        if exact and self.decided("step", "preload") and not self.copies_ahead():
            exposed = self.steps() * g.l2_latency_cycles
        if exact and self.p.get("step"):
            exposed += self.m.iterations * self.global_wait(guarded)
        return (fmas + exposed) * self.walks()

    def copies_ahead(self) -> bool:
        """Whether the next step's operands are on their way while a step computes: preloaded
        into registers, or copied asynchronously into the other buffer."""
        return bool(self.p.get("preload")
                    or self.p.get("async_copy") and self.p.get("double_buffer"))

    def step_stall(self, resident: int, issue_per_fma: float) -> float:
        """Cycles an SM idles per step of its blocks, a complete candidate's: a block whose
        staged step is not copied ahead (:meth:`copies_ahead`) waits for it at the barrier,
        every warp at once, for an L2 latency; the ``resident - 1`` other blocks of the SM
        issue meanwhile, each a step's instructions (``issue_per_fma`` warp instructions per
        multiply-add over the SM's schedulers). Unlike the chain (:meth:`chain`), which other
        blocks' work overlaps, this idles the SM itself: with GEMM 4096^3's block of 512
        threads and 128 registers alone on its SM, its single-buffered twin idles 291 cycles
        in each step's 4400."""
        staged = any(self.staged(r) for r in self.m.reads)
        if not (self.p.get("step") and staged) or self.copies_ahead():
            return 0.0
        g = self.m.gpu
        step_cycles = (self.fmas_per_block_step() * issue_per_fma
                       / g.warp_size / g.schedulers_per_sm)
        return max(0.0, g.l2_latency_cycles - (resident - 1) * step_cycles)

    def global_wait(self, guarded: bool = False) -> float:
        """Cycles per reduction point a thread waits on the operands it reads from global
        memory (those not staged), in a strip-mined loop.

        An operand whose innermost summed index is not its fastest in memory touches a new
        line at every reduction point: the load misses L1 and waits for L2, or for DRAM where
        the tensor is larger than L2 (no earlier block can have left its lines there). ptxas
        issues the loads of later points early, a window of instructions ahead of their use and
        no further than registers allow, and one wait covers the points whose loads are in
        flight at once (:meth:`hoisted_points`); ``guarded``, loads
        in branches of their own, none ahead (:meth:`guarded_share`).
        The H100 measurements of tccg_15-18 (a 4 x 8 x 2 register tile reading A, or A and B,
        along a slow index; 1.0 ms predicted without this, 2.7-2.9 ms measured; their SASS
        loads one point ahead) fit this to within 32%; an operand read along its fastest index
        waits once per line."""
        g, m = self.m.gpu, self.m
        wait = 0.0
        for read in (r for r in m.reads if self.staged(r) is False):
            for index in m.innermost & set(read.indices):
                lines = min(1.0, read.strides[index] * m.bytes / g.cache_line_bytes)
                tensor = math.prod(m.sizes[i] for i in dict.fromkeys(read.indices)) * m.bytes
                latency = g.dram_latency_cycles if tensor > g.l2_bytes else g.l2_latency_cycles
                wait = max(wait, lines * latency)
        if not wait or guarded:
            return wait
        return wait / self.hoisted_points()

    def guarded_share(self) -> float:
        """The share of a complete candidate's blocks, at the output's edge, that load its
        direct operands at every reduction point under a guard of its own, which ptxas does
        not load ahead of its branch: their threads wait for each point's operands
        (:meth:`global_wait`), and the kernel for them (the estimate's latency).

        Where a tile is partial (an axis's extent is no multiple of its threads times
        registers), the code generator separates the edge blocks' code from the full tiles',
        and in it guards each register position by where it may lie: a position along a
        partial axis that is not valid for every thread of the last tile runs only in blocks
        before it (a guard on the block index) or for the threads it is valid for. One guard
        shared by every position is hoisted out of the loops; several stay inside the unrolled
        step, around each load of a direct operand. They cost a wait in the edge blocks where
        one holds: a position guarded along one partial axis, in the blocks at the end of
        another (not last along it), or valid for some threads of its own last tile.
        tccg_19's pick on the H200 (c 84 on 8 of z and b 84 on 32 of y both partial; A read
        directly) ran 2.35 ms, its rival with z full 0.57 ms; the pick's edge path in the SASS
        (nvcc 13, sm_90) issues each guarded LDG.64 inside its branch, 16 FFMAs after it."""
        if (not self.tiles_decided() or not self.decided(*ASSIGN[:len(self.extents)])
                or all(self.staged(r) is not False for r in self.m.reads)):
            return 0.0
        key = ("guarded", self.p["order"], *(self.p[k] for k in (*BLOCK, *REG)),
               *(self.p[k] for k in ASSIGN[:len(self.extents)]))
        return self.memo(key, self._guarded_share)

    def _guarded_share(self) -> float:
        # per partial axis: each register's threads valid in the last tile (None: all), and
        # its tiles
        partial = []
        for n, extent in enumerate(self.extents):
            threads, registers = self.p[BLOCK[n]], self.p[REG[n]]
            rest = extent % (threads * registers)
            if not rest:
                continue
            valid = []
            for r in range(registers):
                found = frozenset(t for t in range(threads) if geometry.dealt(
                    self.p[ASSIGN[n]], t, r, threads, registers, self.m.vector_run) < rest)
                valid.append(None if len(found) == threads else found)
            partial.append((valid, math.ceil(extent / (threads * registers))))
        # every position's guard, but those that hold nowhere (the code leaves them out):
        # invalid for every thread of the last tile of an axis that has no blocks before it
        guards = {g for g in itertools.product(*(valid for valid, _ in partial))
                  if all(v is None or v or tiles > 1
                         for v, (_, tiles) in zip(g, partial, strict=True))}
        if len(guards) < 2:  # none, or one shared by every position: outside the loops
            return 0.0
        share = 0.0
        # edge blocks, by the partial axes they are last along (one at least); each such
        # kind is a share of the blocks, and waits where one of the guards holds for a thread
        for edge in itertools.product((False, True), repeat=len(partial)):
            if not any(edge):
                continue
            if any(any(v is not None for v in g) and all(
                    (v is None or bool(v)) if last else tiles > 1
                    for v, last, (_, tiles) in zip(g, edge, partial, strict=True))
                   for g in guards):
                share += math.prod(1 / tiles if last else (tiles - 1) / tiles
                                   for last, (_, tiles) in zip(edge, partial, strict=True))
        return share

    def hoisted_points(self) -> float:
        """Reduction points whose global operand loads ptxas has in flight at once: one, and
        as many more of an unrolled step as both its scheduling window
        (:data:`LOAD_WINDOW` instructions before the first use, :meth:`point_instructions`
        each) and the registers the launch bounds leave beside what the loop holds
        (:meth:`live_registers`, two per value loaded) allow."""
        loads = sum(self.tile_values(r) for r in self.m.reads if self.staged(r) is False)
        if not loads or not self.p.get("unroll"):
            return 1
        spare = self.m.gpu.register_cap(self.threads()) - self.live_registers()
        window = 1 + LOAD_WINDOW / self.point_instructions()
        return max(1, min(self.p["step"], spare // (HOISTED_REGISTERS * loads), window))

    def point_instructions(self) -> float:
        """Instructions a thread issues per reduction point in its main loop: an FMA per
        register of its tile and its operands' loads (:meth:`load_share`)."""
        return self.registers_tile() + sum(self.tile_values(r) * self.load_share(r)
                                           for r in self.m.reads)
