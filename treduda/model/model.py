"""The performance model: a lower bound for partially specified candidates and an estimate for
complete ones, both in seconds on a described GPU, both naming what limits the kernel.

A candidate is a strategy's (partial) parameter assignment, read only through the strategy's
description of itself in the geometry's quantities (:mod:`treduda.polyhedral.geometry`): the
axes and their tiles, the indices threads walk, the step, the staging. Time is bounded per
resource, as Telamon does (Beaugnon et al., CC 2017, eqs. 3-9):

* ``fma``      FMA instructions (padding of partial tiles included; four real FMAs per complex
               multiply-add) / the SMs' FMA lanes
* ``issue``    all warp instructions (FMAs, operand loads, copies; for a compiled kernel, its
               SASS main loop's, spills' local loads and stores among them) / the warp
               schedulers
* ``memory``   LSU wavefronts / one per cycle and SM: operand loads, copies, spills (read
               from the SASS) and stores, each from the addresses warp 0 touches (global:
               distinct 128-byte lines, so coalescing in either layout, and for the estimate
               no fewer than the GPU's ``global_request_wavefronts`` per request; shared: the
               busiest bank, so padding and conflicts)
* ``l2``       bytes each block pulls from L2 in whole 32-byte sectors (its footprint, re-read
               per unmapped loop; an operand read without staging, what its warps' requests
               touch) and the output's writes, and the traffic of register spills (what the
               SASS main loop moves, ptxas's report, or predicted beyond the launch bounds'
               register cap) / L2 BW
* ``dram``     compulsory bytes (every tensor once) / DRAM bandwidth
* ``latency``  waves of blocks x the per-thread chain of dependent FMAs and exposed loads (a
               step's copy unless preloaded or copied asynchronously a step ahead; operands
               read from global memory along a slow index, as far as registers let ptxas load
               them ahead)

Blocks per SM come from threads, shared memory and registers (ptxas's count where given, else
the values the main loop holds at once, capped by the launch bounds);
the busiest SM's blocks set the throughput terms (the last wave's tail, idle SMs), and fewer
resident warps than ``latency_hiding_warps`` per scheduler slow them down. ``bound`` evaluates
every resource at the most optimistic value of each open decision, separately per factor, so
it is below the resource's value for every completion, and takes the binding one alone.
``estimate`` evaluates the same resources exactly and adds a tenth of the others, for
imperfect overlap, in the spirit of SAAKE's latency/gap emulation (Beaugnon et al., PLDI
2018); so ``bound <= estimate`` on every path, which ``tests/test_model.py`` checks by
enumeration, and ``tests/test_fidelity.py`` checks both against H100 measurements.

This module times the resources and combines them (:class:`Model`). The rest lives beside
it: the program's counts in :mod:`treduda.model.counts`, each candidate's quantities in
:mod:`treduda.model.optimist` (built on :mod:`treduda.model.tiles` and
:mod:`treduda.model.accesses`), the prediction every model returns in
:mod:`treduda.model.prediction`, and what the search asks of a model in
:mod:`treduda.model.interface`. This is the model of every strategy that describes itself in
the geometry's quantities and supplies none of its own (:func:`model_of`); the counts read as
formulas of the sizes and tile parameters in :mod:`treduda.model.formulas`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import StrategyError
from ..polyhedral.geometry import Description, decided
from ..polyhedral.lower import Program
from ..polyhedral.strategy import DEFAULT_STRATEGY, Strategy
from ..polyhedral.strategy import get as get_strategy
from .counts import Counts
from .gpus import Gpu
from .interface import CostModel, conforming
from .occupancy import blocks_per_sm, waves_by_residency
from .optimist import REGISTER_BYTES, _Optimist
from .prediction import (
    LAUNCH_SECONDS,
    Compiled,
    Prediction,
    combined,
    ptxas_report,
    unfit,
)
from .tiles import BLOCK, REG


class Model(Counts):
    """The model of one program on one GPU for one strategy; ``values`` are the values its
    open parameters may take (by default all of the strategy's)."""

    walkable = True  # its kernels' per-thread statements are what the walk counts
    remembers = False  # a bound asked again predicts its orders again

    def __init__(self, program: Program, gpu: Gpu, strategy: Strategy | str = DEFAULT_STRATEGY,
                 values: Mapping[str, tuple] | None = None):
        if program.sizes is None:
            raise ValueError("the model needs fixed sizes")
        self.strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
        if type(self.strategy).model is not Strategy.model:  # it may describe itself otherwise
            raise StrategyError(f"strategy '{self.strategy.name}' supplies a model of its own "
                                "(Strategy.model): use treduda.model.model.model_of")
        if values is None:
            values = {p.name: p.values for p in self.strategy.space(program).parameters}
        self.values = values
        self.strategy.geometry(program, {}, values)  # one that does not describe itself fails
        super().__init__(program, gpu)
        # Predictions made (one per order a bound considers): the work a search's budget
        # counts (treduda.tuning.budgets), the same in any process whatever is remembered.
        self.evaluations = 0

    # -- the public face ---------------------------------------------------------------------

    def describe(self, params: Mapping[str, Any]) -> Description:
        """The strategy's geometry for the (partial) ``params``: each quantity's values."""
        return self.strategy.geometry(self.program, params, self.values)

    def bound(self, params: Mapping[str, Any]) -> Prediction:
        """A lower bound on the time of every completion of the partial ``params``."""
        described = self.describe(params)
        bounds = [self._predict(_Optimist(self, {**described, "order": (order,)}), exact=False)
                  for order in described["order"]]
        least = min(bounds, key=lambda p: p.seconds)
        if len(bounds) == 1:
            return least
        return replace(least, floor=min(p.floor for p in bounds))

    def least(self) -> float:
        """The least estimate any candidate can have: the root's floor."""
        bound = self.bound({})
        return bound.seconds if bound.floor is None else bound.floor

    def estimate(self, params: Mapping[str, Any], compiled: Compiled | None = None
                 ) -> Prediction:
        """The predicted time of a complete candidate; ``compiled`` (ptxas's report, where nvcc
        is present) replaces the register estimate and adds the traffic of spills."""
        described = self.describe(params)
        open_ = sorted(q for q, values in described.items() if len(values) > 1)
        if open_:
            raise StrategyError(f"an estimate needs a complete candidate of "
                                f"'{self.strategy.name}'; still open: {', '.join(open_)}")
        return self._predict(_Optimist(self, described, compiled), exact=True)

    def refine(self, kernel: Any, use_nvcc: bool = True) -> Prediction:
        """The estimate of a generated kernel of this program (its parameters), with ptxas's
        registers and spills where nvcc is present: what the search's check of its finalists
        computes (:func:`treduda.tuning.policy.checked`), so the two agree."""
        return self.estimate(kernel.params,
                             ptxas_report(kernel, self.gpu, use_nvcc, sass=self.reads_sass))

    def formulas(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[Any, int]]:
        """A complete candidate's DRAM bytes and each read's L2 traffic as sympy formulas of
        the sizes and tile parameters (:mod:`treduda.model.formulas`), and every symbol's
        value for ``params``."""
        from . import formulas

        described = decided(self.describe(params))
        return (formulas.formulas(self, described["order"]),
                formulas.values(self, described))

    def registers(self, params: Mapping[str, Any]) -> tuple[int, int]:
        """A complete candidate's registers per thread and registers ptxas will spill beyond
        them, as the estimate predicts them without ptxas's report."""
        o = _Optimist(self, self.describe(params))
        return o.registers(), o.spilled_registers()

    def request_sectors(self, params: Mapping[str, Any]) -> dict[str, int]:
        """Per tensor a complete candidate reads from global memory in its main loop (the
        unstaged ones) and for its output's store: the 32-byte sectors of warp 0's first
        request, as Nsight Compute (and :meth:`treduda.kernel.Kernel.counters`) counts them."""
        o = _Optimist(self, self.describe(params))
        return {t.tensor: o.request_sectors(t)
                for t in (*(r for r in self.reads if o.staged(r) is False), self.output)}

    def register_pressure(self, params: Mapping[str, Any]) -> float:
        """The least the main loop of a complete candidate can hold at once (:meth:`_Optimist.
        live_registers` ``least``), as a share of the registers its launch bounds let ptxas
        give a thread: above 1, ptxas spills."""
        o = _Optimist(self, self.describe(params))
        return o.live_registers(least=True) / self.gpu.register_cap(o.threads())

    # -- the resources -------------------------------------------------------------------------

    def _predict(self, o: _Optimist, exact: bool) -> Prediction:
        self.evaluations += 1
        g = self.gpu
        clock = g.clock_ghz * 1e9
        per_output = self.iterations / 32  # warp multiply-adds per output element
        padded = o.padded_elements()
        # A split reduction launches a block per part of each output tile (`split` parts, or
        # fewer where fewer cover the steps: o.parts()), each summing a part: more blocks to
        # fill the SMs, shorter chains, and the output added into once per part.
        most, least, share = o.parts()
        blocks = o.blocks() * most
        threads = o.threads()
        occupancy = blocks_per_sm(g, threads, o.registers(), o.shared_bytes())
        if occupancy == 0:
            return unfit(self.flops)
        waves = math.ceil(blocks / (g.sm_count * occupancy)) if exact else blocks / (
            g.sm_count * occupancy)
        # The busiest SM runs ceil(blocks / SMs) blocks: throughput is lost to that imbalance
        # (the last wave's tail, SMs left idle when there are fewer blocks than SMs) once the
        # number of blocks is known: the tiles and the split decided, and every step left
        # splitting into as many parts.
        known = exact or all(k in o.p for k in (*BLOCK, *REG, "split")) and most == least
        quantise = math.ceil(blocks / g.sm_count) * g.sm_count / blocks if known else 1.0
        warp_round = math.ceil(threads / 32) * 32 / threads if known else 1.0
        # The main loop's spills where its SASS was read: 32-bit local loads and stores per
        # multiply-add, each an instruction and, for a warp, one wavefront (consecutive
        # threads' words of local memory lie side by side: CUDA C++ Programming Guide, "Local
        # Memory"); predicted ones move L2 bytes alone (priced in issue and wavefronts too,
        # they moved the budgeted searches of tccg_15/18 to picks 3-5% slower on the H100).
        spilled = o.spill_bytes(exact)
        local = (spilled / REGISTER_BYTES / (padded * self.iterations)
                 if o.compiled and o.compiled.local_bytes_per_fma is not None else 0.0)
        # LSU wavefronts per multiply-add: operand loads (per warp of 32 lanes: a partial warp
        # costs a whole one) with, in the estimate, each global request's own
        # (:meth:`_request_wavefronts`), copies (counted per warp already) and spills
        wavefronts = (sum(max(o.wavefronts(r, exact), self._request_wavefronts(o, r, exact))
                          / o.reuse(r) for r in self.reads) / 32 * warp_round
                      + o.copy_wavefronts(exact) + local / 32 * warp_round)
        stores = padded / 32 * o.store_wavefronts(exact) * warp_round * least
        seconds = {
            "fma": padded * per_output * self.fp_ops * warp_round * quantise
            / (g.sm_count * self.lanes / 32) / clock,
            "issue": padded * per_output * (self._issued(o) + self._spill_issue(o, local))
            * warp_round * quantise / (g.sm_count * g.schedulers_per_sm) / clock,
            # one LSU wavefront per cycle and SM: 128 B of shared memory or one L1 line
            # (H100 whitepaper: 256 KB L1/shared per SM; CUDA C++ Programming Guide, "Shared
            # Memory": 32 banks of 4 bytes serve one wavefront per cycle)
            "memory": (padded * self.iterations * wavefronts + stores) * quantise
            / g.sm_count / clock,
            "l2": (self._sector_bytes(o, least, padded * warp_round, exact) + spilled)
            / g.l2_bandwidth,
            "dram": (self.compulsory + self._split_dram(least) * self.bytes) / g.dram_bandwidth,
            "latency": self._latency(o, waves, exact) * share / clock,
        }
        warps = occupancy * math.ceil(threads / 32)
        # Throughput needs enough resident warps to cover latencies (Little's law, Volkov,
        # "Understanding Latency Hiding on GPUs", UC Berkeley 2016): below
        # latency_hiding_warps per scheduler the SM issues proportionally less. Until the
        # block is known the bound assumes them hidden (its occupancy is optimistic after).
        # The limits' occupancy, not the blocks a grid short of the SMs leaves resident: the
        # constant was fitted so, and such grids ran as it says (H100 tccg_19, 378 blocks of
        # 2 warps, 3 a SM: 1.26 ms measured, 1.23 predicted so, 1.47 at 6 warps; H200
        # tccg_14~2 at 12 warps: 2.43 measured, 2.27 / 3.01).
        if known:
            hidden = min(1.0, warps / g.schedulers_per_sm / g.latency_hiding_warps)
            for name in ("fma", "issue", "memory"):
                seconds[name] /= hidden
        if exact:  # the steps' copies the SM waits for with nothing to issue
            # beside a stalled block, the others the busiest SM holds in its fullest wave
            # (waves_by_residency, as the tensor-core models count them): fewer than the
            # limits allow where the grid leaves SMs short (tccg_19's pick unsplit, 99
            # blocks on 132 SMs: none)
            resident = waves_by_residency(g, round(blocks), occupancy)[0][0]
            stalls = waves * o.steps() * o.walks() * share * o.step_stall(
                resident, self._issued(o))
            for name in ("fma", "issue", "memory"):
                seconds[name] += stalls / clock
        binding, total = combined(seconds, exact)
        parts = self.parts_seconds(least)
        total += parts
        floor = None
        if not exact:  # the estimate's spills are a prediction: the floor's, not the bound's
            spills = {**seconds, "l2": seconds["l2"] + o.least_spill_bytes() / g.l2_bandwidth}
            floor = combined(spills, True)[1] + parts
        # The search asks for hundreds of thousands of bounds: only estimates explain at length.
        because = (self._because(binding, seconds, o) if exact else
                   f"{binding} {seconds[binding] * 1e3:.3g} ms at least (a lower bound)")
        if parts and exact:
            because += (f"; then {parts * 1e3:.3g} ms for the second kernel, which adds the "
                        f"{least} parts in a fixed order (deterministic)")
        return Prediction(total, binding, seconds, because, self.flops, wavefronts=wavefronts,
                          warps=warps, floor=floor)

    def _latency(self, o: _Optimist, waves: float, exact: bool) -> float:
        """Cycles of the chains of dependent work one after the other on the busiest SM: a
        thread's chain (:meth:`_Optimist.chain`) per wave of blocks; where some blocks at the
        output's edge wait longer (:meth:`_Optimist.guarded_share`), no less than one of
        theirs, nor than every block's chain shared among the SMs' slots for blocks."""
        chain = o.chain(exact)
        if not exact:
            return waves * chain
        latency = math.ceil(waves) * chain
        share = o.guarded_share()
        if share:
            edge = o.chain(exact, guarded=True)
            latency = max(latency, edge, waves * (share * edge + (1 - share) * chain))
        return latency

    def _request_wavefronts(self, o: _Optimist, read: Any, exact: bool) -> float:
        """Per value of ``read`` a thread loads, the fewest LSU cycles its warp's global load
        requests cost, whatever lines they touch: ``gpu.global_request_wavefronts`` per load
        instruction (:meth:`_Optimist.load_share`) of an operand read from global memory (not
        staged), in an estimate only (the bound counts lines, which the L1's data stage costs
        at least). The H200 data (issue 40) measured kernels that read an operand directly,
        a line or less per request, 1.3-4x slower than rivals that stage it, where the lines
        alone rated them equal; the H100 GEMM rows whose direct reads touch many lines per
        request were right with the lines alone (a per-line charge tripled their error), so
        a request costs its lines or this, whichever is more."""
        if not exact or o.staged(read) is not False:
            return 0.0
        return self.gpu.global_request_wavefronts * o.load_share(read)

    def _sector_bytes(self, o: _Optimist, split: int, multiply_adds: float, exact: bool
                      ) -> float:
        """Bytes moved between L2 and the SMs, in whole 32-byte sectors: each read's block
        footprint (:meth:`_Tiles.traffic`) and the output's writes, at the sectors their boxes
        cover (:meth:`_Accesses.sector_overhead`); for the estimate, the output and each
        unstaged read at least what their warps' requests move
        (:meth:`_Accesses.request_overhead`, ``multiply_adds`` of a thread each), as no tile
        makes their reuse certain, and a thread's stores to one sector are requests apart."""
        written = self._output_traffic(split) * self.bytes
        total = written * o.sector_overhead(self.output)
        if exact:
            total = max(total, written * o.request_overhead(self.output))
        for r in self.reads:
            footprint = o.traffic(r) * self.bytes * o.sector_overhead(r)
            if exact and o.staged(r) is False:
                loaded = multiply_adds * self.iterations / o.reuse(r) * self.bytes
                footprint = max(footprint, loaded * o.request_overhead(r))
            total += footprint
        return total

    def _output_traffic(self, split: int) -> int:
        """Elements the output's writes move through L2: each once; split, an atomic addition
        reads and writes its element per part (the output zeroed first); deterministic, each
        part stores its values into the workspace (the second kernel's traffic is its own,
        :meth:`parts_seconds`)."""
        if split == 1:
            return self.elements
        return self.elements * (split if self.program.split_workspace else 2 * split)

    def _split_dram(self, split: int) -> int:
        """Elements a split adds to DRAM's traffic: the zeroed output, or the workspace
        (written back once; the second kernel reads it from L2)."""
        if split == 1:
            return 0
        return self.elements * (split if self.program.split_workspace else 1)

    def parts_seconds(self, split: int) -> float:
        """The second kernel of a deterministic split (:mod:`treduda.codegen.parts`), which runs
        after the first: its launch, and its reads of every part and write of the output in
        L2. None without one; increasing in ``split``, so the bound's least split keeps it
        below every completion's."""
        if split == 1 or not self.program.split_workspace:
            return 0.0
        return LAUNCH_SECONDS + (split + 1) * self.elements * self.bytes / self.gpu.l2_bandwidth

    def issue_instructions(self, params: Mapping[str, Any]) -> dict[str, float]:
        """Per multiply-add, the warp instructions the estimate's ``issue`` resource counts for
        a complete candidate, by kind (:meth:`_issue`): what ``benchmarks/issue_counts.py``
        sets beside the SASS of its main loop."""
        return self._issue(_Optimist(self, self.describe(params)))

    def _issued(self, o: _Optimist) -> float:
        """Warp instructions per multiply-add: those of the compiled main loop where ptxas's
        check read its SASS (per FFMA/DFMA there, times the FMAs of a multiply-add), else the
        model's count (:meth:`_issue`). Only where every FP instruction of a multiply-add is
        an FMA (not 3xTF32's, whose FMUL and FADD the SASS counts apart) can the two be set
        side by side. tccg_04's pick (nvcc 13, sm_90) issues 1.22 instructions per FFMA in its
        main loop where the count says 1.45: per 256 FFMAs, 22 shared loads where it counts
        64, and 20 of a step's copy (LDG, STS, BAR) where it counts 51."""
        sass = o.compiled.instructions_per_fma if o.compiled else None
        if sass is not None and self.reads_sass:
            return sass * self.fmas
        return sum(self._issue(o).values())

    def _spill_issue(self, o: _Optimist, local: float) -> float:
        """Warp instructions per multiply-add of the main loop's ``local`` loads and stores
        (per multiply-add, :meth:`_predict`): none where the SASS count stands
        (:meth:`_issued`), which holds them."""
        read = o.compiled is not None and o.compiled.instructions_per_fma is not None
        return 0.0 if read and self.reads_sass else local

    @property
    def reads_sass(self) -> bool:
        """Whether an estimate takes a compiled kernel's SASS count (:meth:`_issued`): where
        it does not, ptxas's check need not disassemble the cubin (nvdisasm spends about half
        a CPU second on any cubin)."""
        return self.fp_ops == self.fmas

    def _issue(self, o: _Optimist) -> dict[str, float]:
        """Warp instructions per multiply-add, by kind: its FP instructions, operand loads,
        their conversions, the copies and loop of a step, a rolled step loop's own, and the
        guarded copy of a step shorter than the others."""
        # load instructions per multiply-add: one per value, or per vector of a tile row
        loads = sum(o.load_share(r) / o.reuse(r) for r in self.reads)
        # each operand rounded once per load (precision); one read from global memory
        # converted (a staged one is converted by the copy); undecided staging counts as staged
        direct = sum(1 / o.reuse(r) for r in self.reads if o.staged(r) is False)
        converted = loads * self.operand_ops + direct * self.conversions
        return {"fp": self.fp_ops, "loads": loads, "converted": converted,
                "copies": o.copy_instructions(), "loop": o.loop_instructions(loads),
                "partial step": o.partial_step_instructions()}

    def _because(self, binding: str, seconds: dict[str, float], o: _Optimist) -> str:
        """Why ``binding`` binds, in words: only its reason is written (an estimate is made
        for every candidate scored, and formatting the six took a few percent of a search)."""
        g = self.gpu
        if binding == "fma":
            reason = (f"FMA throughput binds: {self.flops / 1e9:.3g} GFLOP on {g.sm_count} SMs "
                      f"x {self.lanes} lanes")
        elif binding == "issue":
            reason = ("instruction issue binds: operand loads and copies cost issue slots next "
                      "to the FMAs (a larger register tile reuses operands more)")
        elif binding == "memory":
            loads = sum(1 / o.reuse(r) for r in self.reads)
            fronts = (sum(o.wavefronts(r, True) / o.reuse(r) for r in self.reads) / loads if loads
                      else 1)
            reason = (f"load/store units bind: {loads:.2f} operand loads per FMA at "
                      f"{fronts:.1f} wavefronts each (the register tile sets the loads, "
                      "coalescing and bank conflicts the wavefronts)")
        elif binding == "l2":
            reason = ("L2 bandwidth binds: blocks re-read their footprints in whole sectors, "
                      "and unstaged operands move what their warps' requests touch (larger "
                      "tiles reuse more, coalesced reads waste less)")
        elif binding == "dram":
            reason = (f"DRAM bandwidth binds: {self.compulsory / 1e6:.3g} MB must move at "
                      f"{g.dram_bandwidth / 1e9:.0f} GB/s")
        else:
            reason = ("latency binds: too few warps or too long dependent chains per thread "
                      "(exposed load latency per step, waves of blocks)")
            if share := o.guarded_share():
                reason += (f"; {share:.0%} of the blocks, at the output's edge, load a direct "
                           "operand under guards of their own and wait for it at every "
                           "reduction point (tiles that divide the extents, or staging it, "
                           "avoid that)")
        return f"{binding} {seconds[binding] * 1e3:.3g} ms: {reason}"


def model_of(program: Program, gpu: Gpu, strategy: Strategy | str,
             values: Mapping[str, tuple] | None = None) -> CostModel:
    """The cost model of ``strategy``: the one it supplies (:meth:`Strategy.model`), else the
    analytic model, which reads the strategy's description of itself."""
    chosen = get_strategy(strategy) if isinstance(strategy, str) else strategy
    own = chosen.model(program, gpu, values)
    return Model(program, gpu, chosen, values) if own is None else conforming(own, chosen.name)
