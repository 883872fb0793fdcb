"""The performance model: a lower bound for partially specified candidates and an estimate for
complete ones, both in seconds on a described GPU, both naming what limits the kernel.

A candidate is a strategy's (partial) parameter assignment, read only through the strategy's
description of itself in the geometry's quantities (:mod:`treduda.polyhedral.geometry`): the
axes and their tiles, the indices threads walk, the step, the staging. Time is bounded per
resource, as Telamon does (Beaugnon et al., CC 2017, eqs. 3-9):

* ``fma``      FMA instructions (padding of partial tiles included; four real FMAs per complex
               multiply-add) / the SMs' FMA lanes
* ``issue``    all warp instructions (FMAs, operand loads, copies) / the warp schedulers
* ``memory``   LSU wavefronts / one per cycle and SM: operand loads, copies and stores, each
               from the addresses warp 0 touches (global: distinct 128-byte lines, so
               coalescing in either layout; shared: the busiest bank, so padding and conflicts)
* ``l2``       bytes each block pulls from L2 (its footprint, re-read per unmapped loop) and the
               traffic of register spills (ptxas's, or predicted beyond the launch bounds'
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
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..codegen.ir import VECTOR_BYTES
from ..errors import StrategyError
from ..frontend import dtypes
from ..polyhedral import geometry
from ..polyhedral.geometry import AXES, Description
from ..polyhedral.lower import Kind, Program
from ..polyhedral.strategy import DEFAULT_STRATEGY, Strategy
from ..run.nvcc import CudaReport
from ..strategies import get as get_strategy
from ..strategies.tensorcore import TensorCore
from .gpus import Gpu
from .occupancy import blocks_per_sm

LAUNCH_SECONDS = 3e-6  # kernel launch overhead, included in both bound and estimate
OVERLAP = 0.1  # share of the non-binding resources an estimate adds
OPERAND_REGISTERS = 12  # registers beyond accumulators and operands: indices, pointers
STEP_OVERHEAD = 4  # instructions per thread and step for the loop itself
REGISTER_BYTES = 4  # what a register spill stores or loads (registers are 32-bit)
HOISTED_REGISTERS = 2  # registers per global operand value loaded ahead: the value, its address
ASYNC_SYNC_INSTRUCTIONS = 2  # per thread and step of asynchronous copies: a commit and a wait
# Per axis (x, y, z): the names of its threads, registers and their assignment.
BLOCK, REG, ASSIGN = (tuple(f"{k}_{a}" for a in AXES) for k in ("block", "reg", "assign"))
# The decisions of a block's tile per step (geometry.tile_extents).
TILE_DECISIONS = ("order", "step", *BLOCK, *REG)


@dataclass(frozen=True)
class Prediction:
    """Seconds, the binding resource, every resource's seconds, and why in one sentence."""

    seconds: float
    binding: str
    resources: dict[str, float]
    because: str
    flops: float
    # What ranks equal times (see Candidate.order): LSU wavefronts per FMA (bank conflicts,
    # uncoalesced loads) and resident warps per SM (latency hiding).
    wavefronts: float = 0.0
    warps: int = 0
    # Of a bound only: the least *estimate* any completion can have, the estimate's
    # combination (:func:`combined`) of the resources' bounds. The estimate grows with every
    # resource, each of its resources is at least the bound's, so this stays below the
    # estimate of every completion, and above the bound: what the search prunes with.
    floor: float | None = None

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    def __str__(self) -> str:
        return f"{self.seconds * 1e3:.3f} ms ({self.gflops:.0f} GFLOP/s), {self.because}"


def combined(seconds: Mapping[str, float], estimate: bool = True) -> tuple[str, float]:
    """The binding resource and the kernel's time from every resource's seconds. The estimate:
    (1 - OVERLAP) * max + OVERLAP * sum, as resources overlap imperfectly (SAAKE); the bound:
    the binding resource alone, which every completion and the real GPU pay at least (Telamon,
    eqs. 3-9). Each resource of the estimate is at least the bound's, so the bound stays
    below. Both include the launch."""
    binding = max(seconds, key=seconds.get)
    total = seconds[binding]
    if estimate:
        total += OVERLAP * (sum(seconds.values()) - seconds[binding])
    return binding, total + LAUNCH_SECONDS


def unfit(flops: float) -> Prediction:
    """The prediction of a kernel whose block does not fit on an SM."""
    return Prediction(math.inf, "occupancy", {}, "the block does not fit on an SM", flops)


@dataclass(frozen=True)
class Compiled:
    """What ptxas says a generated kernel costs (nvcc -Xptxas -v): registers per thread and
    bytes of spill stores plus spill loads per thread."""

    registers: int
    spill_bytes: int = 0

    @classmethod
    def of(cls, report: CudaReport) -> Compiled:
        return cls(report.registers, report.spill_bytes)


@dataclass(frozen=True, eq=False)
class _Read:
    """One tensor read inside a reduction: its indices and its memory strides (compared by
    identity: each is one read of one model, a key of the terms remembered for it)."""

    tensor: str
    indices: tuple[str, ...]
    strides: dict[str, int]  # index -> elements between neighbours in global memory

    @functools.cached_property
    def distinct(self) -> tuple[str, ...]:
        """Its indices, each once (a diagonal read repeats one)."""
        return tuple(dict.fromkeys(self.indices))


class Model:
    """The model of one program on one GPU for one strategy; ``values`` are the values its
    open parameters may take (by default all of the strategy's)."""

    def __init__(self, program: Program, gpu: Gpu, strategy: Strategy | str = DEFAULT_STRATEGY,
                 values: Mapping[str, tuple] | None = None):
        if program.sizes is None:
            raise ValueError("the model needs fixed sizes")
        self.strategy = get_strategy(strategy) if isinstance(strategy, str) else strategy
        if isinstance(self.strategy, TensorCore):  # it describes itself, but in warps of MMAs
            raise StrategyError("the tensor-core strategy has a model of its own: use "
                                "treduda.tuning.mma_model.model_of")
        if values is None:
            values = {p.name: p.values for p in self.strategy.space(program).parameters}
        self.program, self.gpu, self.values = program, gpu, values
        self.strategy.geometry(program, {}, values)  # one that does not describe itself fails
        c = program.contraction
        self.sizes = program.sizes
        self.bytes = dtypes.itemsize(program.dtype)  # of a tensor's element, as stored
        self.shared_value = dtypes.itemsize(dtypes.compute(program.dtype))  # in a staged tile
        self.lanes = gpu.fma_lanes(dtypes.compute(program.dtype))
        self.fmas = dtypes.fmas(program.dtype)  # real FMAs per multiply-add
        # FP32 instructions per multiply-add (3xTF32: four), instructions per operand a thread
        # loads (TF32 rounding), and per element loaded from or stored to a stored type's
        # tensor (its conversion)
        self.fp_ops = self.fmas * dtypes.PRODUCT_OPERATIONS[program.precision]
        self.operand_ops = dtypes.OPERAND_OPERATIONS[program.precision]
        self.conversions = dtypes.CONVERSION_OPERATIONS if program.dtype in dtypes.STORED else 0
        # float16 and bfloat16 elements are converted one by one: no vector accesses
        # (treduda.codegen.vectorize)
        self.vectorised = program.dtype not in dtypes.STORED
        self.outputs = c.output_indices
        self.elements = math.prod(self.sizes[i] for i in self.outputs)
        reductions = [s for s in program.statements if s.kind == Kind.REDUCE]
        self.summed = [[self.sizes[i] for i in s.summed] for s in reductions]  # extents
        self.unrolled = geometry.unrolled_indices(program)  # what an unrolled step unrolls
        self.innermost = {s.summed[-1] for s in reductions if s.summed}  # per reduction point
        self.iterations = sum(math.prod(extents) for extents in self.summed)
        self.reads = [_Read(r.tensor, r.indices, self._strides(r.indices))
                      for r in geometry.summed_reads(program)]
        self.output = _Read(c.output, self.outputs, self._strides(self.outputs))
        # Terms the search asks for at many nodes, each remembered under the decisions it
        # depends on (see _Optimist.memo).
        self._known: dict[tuple, Any] = {}
        self.groups = max(1, len(program.accumulators))
        # the least LSU wavefronts a value loaded can cost: a 16-byte vector's share of one
        self.least_wavefronts = 1 / max(self.per_access(s) for s in (False, True))
        self.flops = 2.0 * self.fmas * self.elements * max(self.iterations, 1)
        touched = sum(math.prod(self.sizes[i] for i in idx) for idx in c.inputs.values())
        written = self.elements * (2 if c.reads_output or c.op != "=" else 1)
        self.compulsory = (touched + written) * self.bytes

    def _strides(self, indices: tuple[str, ...]) -> dict[str, int]:
        order = list(indices) if self.program.layout == "F" else list(reversed(indices))
        strides, stride = {}, 1
        for index in order:
            strides.setdefault(index, stride)
            stride *= self.sizes[index]
        return strides

    def per_access(self, staged: bool) -> int:
        """Values one access of a thread moves at most: a 16-byte vector's (of a staged
        tile's float32 values, or of a tensor's elements), or one where nothing is vectorised."""
        size = self.shared_value if staged else self.bytes
        return max(1, VECTOR_BYTES // size) if self.vectorised else 1

    def lines(self, accesses: list[list[int]]) -> int:
        """Distinct cache lines one warp access touches, given each lane's element offsets:
        global loads are served per 128-byte line (CUDA C++ Best Practices Guide, "Coalesced
        Access to Global Memory"), one LSU wavefront each."""
        line = self.gpu.cache_line_bytes
        return max(1, len({offset * self.bytes // line for lane in accesses for offset in lane}))

    def bank_conflicts(self, accesses: list[list[int]]) -> int:
        """Wavefronts of one warp's shared-memory access, given each lane's element offsets:
        the most distinct 32-bit words any bank holds (CUDA C++ Programming Guide, "Shared
        Memory" of compute capability 5.x and later: a word read by several lanes is broadcast,
        distinct words in one bank are serialised)."""
        g = self.gpu
        words_per_value = max(1, self.shared_value // g.shared_bank_bytes)
        banks: dict[int, set[int]] = {}
        for lane in accesses:
            for offset in lane:
                for w in range(offset * words_per_value, (offset + 1) * words_per_value):
                    banks.setdefault(w % g.shared_banks, set()).add(w)
        return max((len(words) for words in banks.values()), default=1)

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

    def registers(self, params: Mapping[str, Any]) -> tuple[int, int]:
        """A complete candidate's registers per thread and registers ptxas will spill beyond
        them, as the estimate predicts them without ptxas's report."""
        o = _Optimist(self, self.describe(params))
        return o.registers(), o.spilled_registers()

    def register_pressure(self, params: Mapping[str, Any]) -> float:
        """What the main loop of a complete candidate holds at once (:meth:`_Optimist.
        live_registers`), as a share of the registers its launch bounds let ptxas give a
        thread: above 1, ptxas spills."""
        o = _Optimist(self, self.describe(params))
        return o.live_registers() / self.gpu.register_cap(o.threads())

    # -- the resources -------------------------------------------------------------------------

    def _predict(self, o: _Optimist, exact: bool) -> Prediction:
        g = self.gpu
        clock = g.clock_ghz * 1e9
        per_output = self.iterations / 32  # warp multiply-adds per output element
        padded = o.padded_elements()
        # A split reduction launches `split` blocks per output tile, each summing a part: more
        # blocks to fill the SMs, shorter chains, and the output added into `split` times.
        most, least = max(o.options("split")), min(o.options("split"))
        blocks = o.blocks() * most
        threads = o.threads()
        occupancy = blocks_per_sm(g, threads, o.registers(), o.shared_bytes())
        if occupancy == 0:
            return unfit(self.flops)
        waves = math.ceil(blocks / (g.sm_count * occupancy)) if exact else blocks / (
            g.sm_count * occupancy)
        # The busiest SM runs ceil(blocks / SMs) blocks: throughput is lost to that imbalance
        # (the last wave's tail, SMs left idle when there are fewer blocks than SMs) once the
        # number of blocks is known.
        known = exact or all(k in o.p for k in (*BLOCK, *REG)) and most == least
        quantise = math.ceil(blocks / g.sm_count) * g.sm_count / blocks if known else 1.0
        warp_round = math.ceil(threads / 32) * 32 / threads if known else 1.0
        loads = sum(1 / o.reuse(r) for r in self.reads)  # loads per multiply-add
        # each operand rounded once per load (precision); one read from global memory
        # converted (a staged one is converted by the copy); undecided staging counts as staged
        direct = sum(1 / o.reuse(r) for r in self.reads if o.staged(r) is False)
        converted = loads * self.operand_ops + direct * self.conversions
        # LSU wavefronts per multiply-add: operand loads (per warp of 32 lanes: a partial warp
        # costs a whole one), and copies (counted per warp already)
        wavefronts = (sum(o.wavefronts(r) / o.reuse(r) for r in self.reads) / 32
                      * warp_round + o.copy_wavefronts(exact))
        stores = padded / 32 * o.store_wavefronts(exact) * warp_round * least
        seconds = {
            "fma": padded * per_output * self.fp_ops * warp_round * quantise
            / (g.sm_count * self.lanes / 32) / clock,
            "issue": padded * per_output * (self.fp_ops + loads + converted
                                            + o.copy_instructions()) * warp_round
            * quantise / (g.sm_count * g.schedulers_per_sm) / clock,
            # one LSU wavefront per cycle and SM: 128 B of shared memory or one L1 line
            # (H100 whitepaper: 256 KB L1/shared per SM; CUDA C++ Programming Guide, "Shared
            # Memory": 32 banks of 4 bytes serve one wavefront per cycle)
            "memory": (padded * self.iterations * wavefronts + stores) * quantise
            / g.sm_count / clock,
            "l2": ((sum(o.traffic(r) for r in self.reads) + self._output_traffic(least))
                   * self.bytes + o.spill_bytes(exact)) / g.l2_bandwidth,
            "dram": (self.compulsory + self._split_dram(least) * self.bytes) / g.dram_bandwidth,
            "latency": (math.ceil(waves) if exact else waves) * o.chain(exact) / most / clock,
        }
        warps = occupancy * math.ceil(threads / 32)
        # Throughput needs enough resident warps to cover latencies (Little's law, Volkov,
        # "Understanding Latency Hiding on GPUs", UC Berkeley 2016): below
        # latency_hiding_warps per scheduler the SM issues proportionally less. Until the
        # block is known the bound assumes them hidden (its occupancy is optimistic after).
        if known:
            hidden = min(1.0, warps / g.schedulers_per_sm / g.latency_hiding_warps)
            for name in ("fma", "issue", "memory"):
                seconds[name] /= hidden
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

    def _output_traffic(self, split: int) -> int:
        """Elements the output's writes move through L2: each once; split, an atomic addition
        reads and writes its element per part (the output zeroed first); deterministic, each
        part stores its values into the workspace (the second kernel's traffic is its own,
        :meth:`parts_seconds`)."""
        if split == 1:
            return self.elements
        return self.elements * (split if self.program.deterministic else 2 * split)

    def _split_dram(self, split: int) -> int:
        """Elements a split adds to DRAM's traffic: the zeroed output, or the workspace
        (written back once; the second kernel reads it from L2)."""
        if split == 1:
            return 0
        return self.elements * (split if self.program.deterministic else 1)

    def parts_seconds(self, split: int) -> float:
        """The second kernel of a deterministic split (:mod:`treduda.codegen.parts`), which runs
        after the first: its launch, and its reads of every part and write of the output in
        L2. None without one; increasing in ``split``, so the bound's least split keeps it
        below every completion's."""
        if split == 1 or not self.program.deterministic:
            return 0.0
        return LAUNCH_SECONDS + (split + 1) * self.elements * self.bytes / self.gpu.l2_bandwidth

    def _because(self, binding: str, seconds: dict[str, float], o: _Optimist) -> str:
        g = self.gpu
        loads = sum(1 / o.reuse(r) for r in self.reads)
        fronts = sum(o.wavefronts(r) / o.reuse(r) for r in self.reads) / loads if loads else 1
        reasons = {
            "fma": f"FMA throughput binds: {self.flops / 1e9:.3g} GFLOP on {g.sm_count} SMs x "
                   f"{self.lanes} lanes",
            "issue": "instruction issue binds: operand loads and copies cost issue slots next to "
                     "the FMAs (a larger register tile reuses operands more)",
            "memory": f"load/store units bind: {loads:.2f} operand loads per FMA at "
                      f"{fronts:.1f} wavefronts each (the register tile sets the loads, "
                      "coalescing and bank conflicts the wavefronts)",
            "l2": "L2 bandwidth binds: blocks re-read their footprints (larger tiles reuse more)",
            "dram": f"DRAM bandwidth binds: {self.compulsory / 1e6:.3g} MB must move at "
                    f"{g.dram_bandwidth / 1e9:.0f} GB/s",
            "latency": "latency binds: too few warps or too long dependent chains per thread "
                       "(exposed load latency per step, waves of blocks)",
        }
        return f"{binding} {seconds[binding] * 1e3:.3g} ms: {reasons[binding]}"


class _Optimist:
    """Derived quantities of a (partial) candidate; open decisions take, factor by factor, the
    allowed value most favourable to the quantity, so every result is a valid lower bound."""

    def __init__(self, model: Model, described: Description, compiled: Compiled | None = None):
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
        known = self.m._known
        if key not in known:
            known[key] = compute()
        return known[key]

    def options(self, name: str) -> tuple:
        """The values quantity ``name`` can still take."""
        return self.described[name]

    def tiles(self, n: int) -> tuple[int, ...]:
        """The tiles axis ``n`` can still have (threads times registers), each once."""
        return self._tiles[n]

    @functools.cached_property
    def _tiles(self) -> list[tuple[int, ...]]:
        found = []
        for block, reg in zip(BLOCK, REG, strict=True):
            blocks, regs = self.options(block), self.options(reg)
            found.append(self.memo(("tiles", blocks, regs), lambda b=blocks, r=regs: tuple(
                sorted({x * y for x, y in itertools.product(b, r)}))))
        return found

    @functools.cached_property
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

    def threads(self) -> int:
        return self._threads

    @functools.cached_property
    def _threads(self) -> int:
        return math.prod(min(self.options(b)) for b in BLOCK)

    def registers_tile(self) -> int:
        return math.prod(min(self.options(r)) for r in REG)

    def once(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered for this candidate (several terms ask for it)."""
        known = self._once
        if key not in known:
            known[key] = compute()
        return known[key]

    def reuse(self, read: _Read) -> int:
        """How many FMAs of a thread use each loaded element of ``read``: the register tile
        along the axes ``read`` does not depend on (on none of a group's indices)."""
        return self._reuse[read]

    @functools.cached_property
    def _reuse(self) -> dict[_Read, int]:
        return {read: math.prod(max(self.options(REG[n])) for n, group in enumerate(self.order)
                                if not any(i in read.indices for i in group))
                for read in self.m.reads}

    def staged(self, read: _Read) -> bool | None:
        """True or False once decided, None while open."""
        return None if self._stage is None else read.tensor in self._stage

    @functools.cached_property
    def _stage(self) -> tuple[str, ...] | None:
        """The staged tensors, None while open."""
        return geometry.indices(self.p["stage"]) if "stage" in self.p else None

    def decided(self, *names: str) -> bool:
        return all(n in self.p for n in names)

    def tiles_decided(self) -> bool:
        return self._tiles_decided

    @functools.cached_property
    def _tiles_decided(self) -> bool:
        return self.decided("step", *BLOCK, *REG)

    @functools.cached_property
    def tile_decisions(self) -> tuple:
        """The decided values of :data:`TILE_DECISIONS` (once :meth:`tiles_decided`): what the
        block's tile per step (:attr:`tile`) depends on."""
        return tuple(self.p.get(k) for k in TILE_DECISIONS)

    @functools.cached_property
    def warp_shape(self) -> tuple:
        """The decisions warp 0's lanes (:attr:`lanes`) depend on: the order, and the threads,
        registers and assignment of each axis the warp spans (x, then y and z while fewer
        lanes than a warp's precede them), up to the first that is open (None)."""
        shape: tuple = (self.p["order"],)
        lanes = 1
        for names in zip(BLOCK, REG, ASSIGN, strict=True):
            if lanes >= self.m.gpu.warp_size:
                break
            axis = tuple(self.p.get(name) for name in names)
            shape += axis
            if None in axis:
                break
            lanes *= axis[0]
        return shape

    @functools.cached_property
    def lanes(self) -> list[list[tuple[int, ...]]] | None:
        """Warp 0's lanes, each as its registers along x, each register as its values along
        the axes the warp spans (x first, relative to the tile's origin); None while a
        decision the warp's shape depends on is open.

        Lanes are threads in x-fastest order; a thread's coordinate along an axis is ``t``
        (cyclic, register ``r`` at ``t + r * block``) or ``t * reg`` (adjacent, ``+ r``); along
        a group it is decoded into the group's indices (:meth:`offsets`): block 0's tile starts
        at 0, so warp 0 sees where its values wrap from one index to the next. Remembered per
        model for the decisions they depend on (the search asks at many nodes)."""
        return self.memo(("lanes", self.warp_shape), self._lanes)

    def _lanes(self) -> list[list[tuple[int, ...]]] | None:
        warp = self.m.gpu.warp_size
        spanned, lanes = [], 1
        for n, a in enumerate(AXES):
            if lanes >= warp:
                break
            if not self.decided(f"block_{a}", f"reg_{a}", f"assign_{a}"):
                return None
            spanned.append(n)
            lanes *= self.p[f"block_{a}"]
        result = []
        for lane in range(min(lanes, warp)):
            values, below = [], 1
            for n in spanned:
                a = AXES[n]
                t = lane // below % self.p[f"block_{a}"]
                below *= self.p[f"block_{a}"]
                values.append(t * (self.p[f"reg_{a}"] if self.p[f"assign_{a}"] == "adjacent"
                                   else 1))
            registers = []
            for r in range(self.p["reg_x"]):
                step = 1 if self.p["assign_x"] == "adjacent" else self.p["block_x"]
                along = (values[0] + r * step, *values[1:]) if self.order else tuple(values)
                registers.append(along)
            result.append(registers)
        return result

    def offsets(self, strides: Mapping[str, int], group: int) -> list[list[int]]:
        """The element offsets, at ``strides`` (a read's, indexed by its indices), of the first
        ``group`` registers of each lane of warp 0 (:attr:`lanes`): a group's value X along
        its axis is c + S_c * (a + S_a * ..), its indices found by div and mod as the kernel
        does; an index the strides lack, or on an axis the warp does not span, adds nothing."""
        # per axis: the extent and stride of each index but the slowest, the slowest's stride
        axes = [([(self.m.sizes[i], strides.get(i, 0)) for i in g[:-1]], strides.get(g[-1], 0))
                for g in self.order]

        def along(n: int, value: int) -> int:  # what axis n's value adds to the offset
            faster, slowest = axes[n]
            offset = 0
            for size, stride in faster:
                offset += value % size * stride
                value //= size
            return offset + value * slowest

        if not axes:
            return [[0] * len(lane[:group]) for lane in self.lanes]
        found = []
        for lane in self.lanes:  # a lane's registers differ along x alone
            others = sum(along(n, v) for n, v in enumerate(lane[0][1:len(axes)], 1))
            found.append([along(0, values[0]) + others for values in lane[:group]])
        return found

    def wavefronts(self, read: _Read) -> float:
        """LSU wavefronts per value a thread loads of ``read`` in the compute statement, from
        the addresses warp 0 loads: distinct cache lines (global) or the busiest bank's
        distinct words (shared). A thread's registers along x count as one access of up to 16
        bytes (the kernel IR merges neighbours into vector loads where it proves them aligned,
        :mod:`treduda.codegen.vectorize`; the measured H100 times, of kernels from before it,
        show no more conflicts where nothing merged them), and in a staged tile whose rows are
        16-byte aligned,
        so do neighbours along the reduction (see :meth:`vectorisable`). An access's
        wavefronts are shared by its values, no fewer than a 16-byte vector's.
        While what decides it is open, the least any access costs: a wavefront shared by a
        16-byte vector (for an open padding, the better of its values)."""
        staged = self.staged(read)
        if staged is None or self.lanes is None or (staged and not self.tiles_decided()):
            return self.m.least_wavefronts
        key = ("read", read, self.warp_shape, staged)
        if staged:  # its tile, its padding, its vector loads along the reduction
            key += (self.tile_decisions, self.options("pad"), self.vectorisable(read))
        return self.memo(key, lambda: self._wavefronts(read, staged))

    def _wavefronts(self, read: _Read, staged: bool) -> float:
        least = self.m.least_wavefronts
        warp = self.lanes
        values = self.m.per_access(staged)
        grouped = bool(self.order) and self.order[0][0] in read.indices

        def cost(strides: Mapping[str, int], reduction_vector: bool) -> float:
            group = warp[0][:values] if grouped else warp[0][:1]
            return max(least, self._fronts(read, strides, staged, len(group)) / len(group)
                       * (least if reduction_vector else 1.0))

        if not staged:
            return cost(read.strides, False)
        vector = self.vectorisable(read)
        return min(cost(self.tile_strides(read, pad), vector and self._aligned(read, pad))
                   for pad in self.options("pad"))

    def _fronts(self, read: _Read, strides: Mapping[str, int], staged: bool, group: int) -> int:
        """LSU wavefronts of warp 0's access to ``read`` at ``strides`` (the first ``group``
        registers of each lane's along x): distinct lines (global) or the busiest bank's
        words (shared); remembered per model for the warp's shape and the strides."""
        key = ("fronts", self.warp_shape, read, tuple(strides.items()), staged, group)

        def fronts() -> int:
            offsets = self.offsets(strides, group)
            return self.m.lines(offsets) if not staged else self.m.bank_conflicts(offsets)

        return self.memo(key, fronts)

    def _aligned(self, read: _Read, pad: int) -> bool:
        """Whether the rows of ``read``'s staged tile start on 16-byte boundaries."""
        row = self.tile_strides(read, pad)
        slowest = max(row.values())
        return slowest == 1 or all(v * self.m.shared_value % VECTOR_BYTES == 0
                                   for v in row.values() if v > 1)

    def vectorisable(self, read: _Read) -> bool:
        """Whether a thread may read neighbours of ``read`` in one vector access: its fastest
        index in memory (and in its tile) is a summed index the step's loop unrolls (or the
        unrolling is still open)."""
        fastest = geometry.fastest(self.m.program, read.indices)
        return fastest in self.m.unrolled and self.p.get("unroll", True) is not False

    @staticmethod
    def _offset(read: _Read, point: Mapping[str, int], strides: Mapping[str, int]) -> int:
        offset = 0
        for i in read.distinct:
            offset += point.get(i, 0) * strides.get(i, 0)
        return offset

    def tile_strides(self, read: _Read, pad: int) -> dict[str, int]:
        """Elements between neighbours along each index in the staged (padded) tile;
        remembered per model for the tile's extents and the padding."""
        key = ("strides", read, tuple(self.footprint(read).values()), pad)
        return self.memo(key, lambda: {i: self._tile_stride(read, i, pad) for i in read.indices})

    def _tile_stride(self, read: _Read, index: str, pad: int) -> int:
        """Elements between neighbours along ``index`` in the staged (padded) tile."""
        if index not in read.indices:
            return 0
        extents = self.footprint(read)
        order = read.indices if self.m.program.layout == "F" else tuple(reversed(read.indices))
        stride = 1
        for n, i in enumerate(order):
            if i == index:
                return stride
            stride *= extents[i] + (geometry.padding(self.m.program, read.indices, pad)
                                    if n == 0 else 0)
        return stride

    def footprint(self, read: _Read) -> dict[str, int]:
        """Per block and step, how many values of each of its indices ``read`` touches."""
        return self.once(("footprint", read), lambda: {i: self.tile[i] for i in read.indices})

    @functools.cached_property
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
        and a commit and a wait per thread) and the step's overhead (the loop and its
        barriers), 0 while undecided; while ``async_copy`` is open, the fewer."""
        if not self.tiles_decided() or "stage" not in self.p:
            return 0.0
        staged = [r for r in self.m.reads if self.staged(r)]
        threads = math.prod(self.p[b] for b in BLOCK)
        per_block_step = min(self._copies(staged, threads) if copied else
                             sum((2 + self.m.conversions) * math.prod(self.copy_extents(r))
                                 for r in staged)  # load, (convert,) store
                             for copied in self.options("async_copy"))
        barriers = min(self.barriers_per_step(double) for double in self.options("double_buffer"))
        per_block_step += threads * (STEP_OVERHEAD + (barriers if staged else 0))
        return per_block_step / self.fmas_per_block_step()

    def _copies(self, staged: list[_Read], threads: int) -> float:
        """Instructions of a block's asynchronous copies per step: one cp.async (LDGSTS) per
        run the copy numbers (:func:`~treduda.polyhedral.geometry.async_width`; the fewest
        while the padding is open), as the tensor-core model counts them, and a commit and a
        wait per thread."""
        runs = sum(min(math.prod(self.copy_extents(r, geometry.async_width(
            self.m.program, r.indices, self.footprint(r), pad))) for pad in self.options("pad"))
            for r in staged)
        return runs + ASYNC_SYNC_INSTRUCTIONS * threads if staged else 0.0

    def copy_wavefronts(self, exact: bool = True) -> float:
        """Per FMA: LSU wavefronts of the copies into shared memory (a warp copies consecutive
        elements of the tile: the global lines they read, the bank conflicts of their stores),
        0 while undecided; not ``exact`` (for the bound), the least a load and a store cost:
        a wavefront shared by the values of a 16-byte vector access."""
        if not self.tiles_decided() or "stage" not in self.p:
            return 0.0
        threads = self.threads()
        pads = self.options("pad") if exact else None
        total = 0.0
        for r in self.m.reads:
            if self.staged(r):  # remembered for what the copy of its tile depends on
                key = ("copy", r, exact, threads, tuple(self.footprint(r).values()), pads)
                total += self.memo(key, lambda r=r: self._copy_wavefronts(r, exact))
        return total / self.fmas_per_block_step()

    def _copy_wavefronts(self, r: _Read, exact: bool) -> float:
        """The copy wavefronts of ``r``'s tile per block and step."""
        threads = self.threads()
        lanes = min(self.m.gpu.warp_size, threads)
        if not exact:  # the least a load and a store cost, whatever the elements
            volume = math.prod(self.copy_extents(r))
            return math.ceil(volume / threads) * math.ceil(threads / lanes) * (
                1 / self.m.per_access(False) + 1 / self.m.per_access(True))
        extents = self.footprint(r)
        padded = dict(zip(self.fastest_first(r), self.copy_extents(r), strict=True))
        volume = math.prod(padded.values())
        elements = []
        for e in range(min(lanes, volume)):
            point = {}
            for i, extent in padded.items():
                point[i], e = e % extent, e // extent
            if all(point[i] < extents[i] for i in point):  # not the padding's
                elements.append(point)
        read = self.m.lines([[self._offset(r, p, r.strides)] for p in elements])
        write = min(self.m.bank_conflicts([[self._offset(r, p, strides)] for p in elements])
                    for strides in (self.tile_strides(r, pad) for pad in self.options("pad")))
        return math.ceil(volume / threads) * math.ceil(threads / lanes) * (read + write)

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

    def store_wavefronts(self, exact: bool = True) -> float:
        """LSU wavefronts per output value a thread stores; while the warp is open, and for
        the bound, the least a warp's store can cost per value: one, or where a warp's values
        fill less than a line (float16: 32 x 2 bytes of 128), that share of one (a thread's
        registers along x share lines: an estimate of 0.5 for a float16 GEMM's 4 registers,
        below the 1 the bound used to take)."""
        if self.lanes is None or not exact:
            g = self.m.gpu
            return min(1.0, g.warp_size * self.m.bytes / g.cache_line_bytes)
        return self.memo(("store", self.warp_shape), self._store_wavefronts)

    def _store_wavefronts(self) -> float:
        warp = self.lanes
        out = self.m.output
        group = warp[0] if self.order else warp[0][:1]
        return self.m.lines(self.offsets(out.strides, len(group))) / len(group)

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
        predicts: what the main loop holds at the least (:meth:`live_registers`, every open
        decision at its fewest) beyond the cap of the launch bounds of the fewest threads, each
        factor of :meth:`spill_bytes` at its least (an 8 x 8 register tile in blocks of 1024
        threads spills whatever is decided after)."""
        if self.compiled:
            return 0.0
        threads = self.threads()
        beyond = self.live_registers() - self.m.gpu.register_cap(threads)
        if beyond <= 0:
            return 0.0
        steps = min(self.steps(step) for step in self.options("step"))
        return 2 * REGISTER_BYTES * beyond * self.blocks() * threads * steps * self.walks()

    def spilled_registers(self) -> int:
        """Registers ptxas spills, predicted for a complete candidate without its report: none
        while what the main loop holds at once fits the cap of the launch bounds; beyond it,
        ptxas spills from the schedule it made before allocating, which loads each global
        operand of an unrolled step at the step's start (:meth:`live_registers` hoisted), so
        all of that above the cap. From ptxas (CUDA 13, sm_90) on GEMM 4096^3 with 1024
        threads and a 4 x 8 register tile (cap 64): A staged with 16-byte rows (pad 0) is read
        by LDS.128, the loop holds 81 values, and the SASS spills B's 128 loads of a 32-step
        (1624 bytes; predicted 1152); with pad 1 it holds 50 and ptxas does not spill; A and B
        staged, nothing is hoisted (240 bytes; predicted 200). Of 1260 candidates sampled from
        six spaces (GEMM in both layouts and in float64, TCCG rows 1 and 13), 45 are predicted
        to spill and all do; 6 more spill at most 104 bytes. Amounts are good to about 2x,
        worse for 8-steps (360 bytes predicted for ptxas's 40) and tiny blocks."""
        cap = self.m.gpu.register_cap(self.threads())
        if self.live_registers() <= cap:
            return 0
        return self.live_registers(hoisted=True) - cap

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

    def registers(self) -> int:
        """ptxas's count where given; else what the main loop holds at once
        (:meth:`live_registers`), no more than the launch bounds let ptxas give a thread (it
        spills the rest, :meth:`spill_bytes`). While open, the fewest of any completion: the
        least the loop holds, capped for the largest block still possible."""
        if self.compiled:
            return self.compiled.registers
        largest = math.prod(max(self.options(b)) for b in BLOCK)
        return min(self.live_registers(), self.m.gpu.register_cap(largest))

    def live_registers(self, hoisted: bool = False) -> int:
        """Registers the main loop holds at once: accumulators, operands (:meth:`operands`),
        the preloaded next step (each element as many registers as its dtype needs), and
        bookkeeping; ``hoisted``, with each global operand of an unrolled step loaded ahead."""
        return self.once(("live", hoisted), lambda: self._live_registers(hoisted))

    def _live_registers(self, hoisted: bool) -> int:
        elements = self.m.groups * self.registers_tile()
        elements += sum(self.operands(r, hoisted) for r in self.m.reads)
        if self.tiles_decided() and self.decided("stage") and self.p.get("preload"):
            threads = math.prod(self.p[b] for b in BLOCK)
            elements += sum(math.ceil(math.prod(self.copy_extents(r)) / threads)
                            for r in self.m.reads if self.staged(r))
        return elements * dtypes.registers(self.m.program.dtype) + OPERAND_REGISTERS

    def operands(self, read: _Read, hoisted: bool = False) -> int:
        """Values of ``read`` the main loop holds at once: one, as FMAs can consume operands
        one by one; a vector load along the reduction (:meth:`vector_values`) holds its
        values for every register of the thread's tile it feeds (ptxas issues one LDS.128 per
        row, before the FMAs that use it); ``hoisted`` and read from global memory in an
        unrolled step, every value the unrolled loop loads."""
        vector = self.vector_values(read)
        if vector > 1:
            return self.tile_values(read) * vector
        if hoisted and self.staged(read) is False and self.p.get("unroll") and self.p["step"]:
            unrolled = (e for i, e in self.footprint(read).items() if i in self.m.unrolled)
            return self.tile_values(read) * math.prod(unrolled)
        return 1

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

    def chain(self, exact: bool = True) -> float:
        """Cycles of one thread's dependent work: its FMA chains, one exposed L2 latency per
        step unless the next step is preloaded (or copied asynchronously into the other
        buffer, a step ahead), and the waits on operands read from global memory
        (:meth:`global_wait`); not for the bound: nvcc may pipeline the loads of later
        iterations."""
        g = self.m.gpu
        fmas = self.m.iterations * dtypes.chain(self.m.program.dtype) * g.fma_latency_cycles
        exposed = 0.0
        ahead = self.p.get("preload") or self.p.get("async_copy") and self.p.get("double_buffer")
        if exact and self.decided("step", "preload") and not ahead:
            exposed = self.steps() * g.l2_latency_cycles
        if exact and self.p.get("step"):
            exposed += self.m.iterations * self.global_wait()
        return (fmas + exposed) * self.walks()

    def global_wait(self) -> float:
        """Cycles per reduction point a thread waits on the operands it reads from global
        memory (those not staged), in a strip-mined loop.

        An operand whose innermost summed index is not its fastest in memory touches a new
        line at every reduction point: the load misses L1 and waits for L2, or for DRAM where
        the tensor is larger than L2 (no earlier block can have left its lines there). ptxas
        issues the loads of later points early only as far as registers allow: each value held
        ahead costs about two (its address arithmetic stays live too), and one wait covers the
        points whose loads are in flight at once (:meth:`hoisted_points`).
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
        return wait / self.hoisted_points() if wait else 0.0

    def hoisted_points(self) -> int:
        """Reduction points whose global operand loads ptxas has in flight at once: one, and
        as many more of an unrolled step as the registers the launch bounds leave beside
        what the loop holds (:meth:`live_registers`) take, two per value loaded."""
        loads = sum(self.tile_values(r) for r in self.m.reads if self.staged(r) is False)
        if not loads or not self.p.get("unroll"):
            return 1
        spare = self.m.gpu.register_cap(self.threads()) - self.live_registers()
        return max(1, min(self.p["step"], spare // (HOISTED_REGISTERS * loads)))
