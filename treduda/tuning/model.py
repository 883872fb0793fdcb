"""The performance model: a lower bound for partially specified candidates and an estimate for
complete ones, both in seconds on a described GPU, both naming what limits the kernel.

A candidate is the ``tiled+staged`` parameter assignment (any strategy chain built from those
two). Time is bounded per resource, as Telamon does (Beaugnon et al., CC 2017, eqs. 3-9):

* ``fma``      FMA instructions (padding of partial tiles included; four real FMAs per complex
               multiply-add) / the SMs' FMA lanes
* ``issue``    all warp instructions (FMAs, operand loads, copies) / the warp schedulers
* ``memory``   load wavefronts (uncoalesced global loads, shared bank conflicts) / the LSUs
* ``l2``       bytes each block pulls from L2 (its footprint, re-read per unmapped loop) / L2 BW
* ``dram``     compulsory bytes (every tensor once) / DRAM bandwidth
* ``latency``  waves of blocks x the per-thread chain of dependent FMAs and exposed loads

``bound`` evaluates every resource at the most optimistic value of each open decision,
separately per factor, so it is below the resource's value for every completion. ``estimate``
evaluates the same resources exactly (quantised into waves of blocks). Both combine them as the
binding resource plus a tenth of the others, for imperfect overlap, in the spirit of SAAKE's
latency/gap emulation (Beaugnon et al., PLDI 2018); that combination grows with every resource,
so ``bound <= estimate`` on every path, which ``tests/test_model.py`` checks by enumeration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..frontend import dtypes
from ..polyhedral.lower import Kind, Program
from ..polyhedral.strategy import AXES
from .gpus import Gpu
from .occupancy import blocks_per_sm

LAUNCH_SECONDS = 3e-6  # kernel launch overhead, included in both bound and estimate
OVERLAP = 0.1  # share of the non-binding resources an estimate adds
OPERAND_REGISTERS = 12  # registers beyond accumulators and operands: indices, pointers
STEP_OVERHEAD = 4  # instructions per thread and step for the loop itself


@dataclass(frozen=True)
class Prediction:
    """Seconds, the binding resource, every resource's seconds, and why in one sentence."""

    seconds: float
    binding: str
    resources: dict[str, float]
    because: str
    flops: float

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    def __str__(self) -> str:
        return f"{self.seconds * 1e3:.3f} ms ({self.gflops:.0f} GFLOP/s), {self.because}"


@dataclass(frozen=True)
class _Read:
    """One tensor read inside a reduction: its indices and its memory strides."""

    tensor: str
    indices: tuple[str, ...]
    strides: dict[str, int]  # index -> elements between neighbours in global memory


class Model:
    """The model of one program on one GPU; ``values`` are the search's allowed values."""

    def __init__(self, program: Program, gpu: Gpu, values: Mapping[str, tuple]):
        if program.sizes is None:
            raise ValueError("the model needs fixed sizes")
        self.program, self.gpu, self.values = program, gpu, values
        c = program.contraction
        self.sizes = program.sizes
        self.bytes = dtypes.itemsize(program.dtype)
        self.lanes = gpu.fma_lanes(program.dtype)
        self.fmas = dtypes.fmas(program.dtype)  # real FMAs per multiply-add
        self.outputs = c.output_indices
        self.elements = math.prod(self.sizes[i] for i in self.outputs)
        reductions = [s for s in program.statements if s.kind == Kind.REDUCE]
        self.summed = [[self.sizes[i] for i in s.summed] for s in reductions]  # extents
        self.iterations = sum(math.prod(extents) for extents in self.summed)
        summed_reads = dict.fromkeys(r for term in c.terms if term.summed(self.outputs)
                                     for r in term.reads)
        self.reads = [_Read(r.tensor, r.indices, self._strides(r.indices)) for r in summed_reads]
        self.groups = max(1, len(program.accumulators))
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

    # -- the public face ---------------------------------------------------------------------

    def bound(self, params: Mapping[str, Any]) -> Prediction:
        """A lower bound on the time of every completion of the partial ``params``."""
        if "order" not in params:
            return min((self.bound({**params, "order": o}) for o in self.values["order"]),
                       key=lambda p: p.seconds)
        return self._predict(_Optimist(self, params), exact=False)

    def estimate(self, params: Mapping[str, Any]) -> Prediction:
        """The predicted time of a complete candidate."""
        return self._predict(_Optimist(self, params), exact=True)

    # -- the resources -------------------------------------------------------------------------

    def _predict(self, o: _Optimist, exact: bool) -> Prediction:
        g = self.gpu
        clock = g.clock_ghz * 1e9
        per_output = self.iterations / 32  # warp multiply-adds per output element
        padded = o.padded_elements()
        blocks = o.blocks()
        threads = o.threads()
        occupancy = blocks_per_sm(g, threads, o.registers(), o.shared_bytes())
        if occupancy == 0:
            return Prediction(math.inf, "occupancy", {}, "the block does not fit on an SM",
                              self.flops)
        waves = math.ceil(blocks / (g.sm_count * occupancy)) if exact else blocks / (
            g.sm_count * occupancy)
        # The busiest SM runs ceil(blocks / SMs) blocks: throughput is lost to that imbalance
        # once the number of blocks is known.
        known = exact or all(f"{k}_{a}" in o.p for k in ("block", "reg") for a in AXES)
        quantise = math.ceil(blocks / g.sm_count) * g.sm_count / blocks if known else 1.0
        warp_round = math.ceil(threads / 32) * 32 / threads if known else 1.0
        loads = sum(1 / o.reuse(r) for r in self.reads)  # loads per multiply-add
        seconds = {
            "fma": padded * per_output * self.fmas * warp_round * quantise
            / (g.sm_count * self.lanes / 32) / clock,
            "issue": padded * per_output * (self.fmas + loads + o.copy_instructions()) * warp_round
            * quantise / (g.sm_count * g.schedulers_per_sm) / clock,
            "memory": padded * per_output * sum(o.wavefronts(r) / o.reuse(r) for r in self.reads)
            * warp_round * quantise / g.sm_count / clock,
            "l2": (sum(o.traffic(r) for r in self.reads) + self.elements) * self.bytes
            / g.l2_bandwidth,
            "dram": self.compulsory / g.dram_bandwidth,
            "latency": (math.ceil(waves) if exact else waves) * o.chain() / clock,
        }
        binding = max(seconds, key=seconds.get)
        # (1 - OVERLAP) * max + OVERLAP * sum grows with every resource, so the bound, built
        # from lower bounds of each resource, stays below the estimate.
        total = seconds[binding] + OVERLAP * (sum(seconds.values()) - seconds[binding])
        return Prediction(total + LAUNCH_SECONDS, binding, seconds,
                          self._because(binding, seconds, o), self.flops)

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

    def __init__(self, model: Model, params: Mapping[str, Any]):
        self.m, self.p = model, params
        self.order = tuple(i for i in params["order"].split(",") if i)

    def options(self, name: str) -> tuple:
        return (self.p[name],) if name in self.p else tuple(self.m.values[name])

    def tiles(self, n: int) -> list[int]:
        a = AXES[n]
        return [b * r for b in self.options(f"block_{a}") for r in self.options(f"reg_{a}")]

    def padded_elements(self) -> float:
        total = math.prod(self.m.sizes[i] for i in self.m.outputs if i not in self.order)
        for n, index in enumerate(self.order):
            extent = self.m.sizes[index]
            total *= min(math.ceil(extent / t) * t for t in self.tiles(n))
        return total

    def blocks(self) -> float:
        """Blocks launched: tiles along x, y, z, times every value of the output indices not
        on an axis (each gets blocks of its own, folded into the grid's x axis)."""
        tiles = math.prod(min(math.ceil(self.m.sizes[i] / t) for t in self.tiles(n))
                          for n, i in enumerate(self.order))
        return tiles * math.prod(self.m.sizes[i] for i in self.m.outputs if i not in self.order)

    def threads(self) -> int:
        return math.prod(min(self.options(f"block_{a}")) for a in AXES)

    def registers_tile(self) -> int:
        return math.prod(min(self.options(f"reg_{a}")) for a in AXES)

    def reuse(self, read: _Read) -> int:
        """How many FMAs of a thread use each loaded element of ``read``: the register tile
        along the axes ``read`` does not depend on."""
        return math.prod(max(self.options(f"reg_{AXES[n]}"))
                         for n, index in enumerate(self.order) if index not in read.indices)

    def staged(self, read: _Read) -> bool | None:
        """True or False once decided, None while open."""
        if "stage" not in self.p:
            return None
        return read.tensor in self.p["stage"].split(",")

    def decided(self, *names: str) -> bool:
        return all(n in self.p for n in names)

    def tiles_decided(self) -> bool:
        return self.decided("step", *(f"{k}_{a}" for k in ("block", "reg") for a in AXES))

    def wavefronts(self, read: _Read) -> float:
        """LSU wavefronts per warp load of ``read``: 1 unless what decides it is set (for an
        open padding, the better of its values)."""
        staged = self.staged(read)
        if staged is None or not self.order or not self.decided("block_x", "reg_x", "assign_x"):
            return 1.0
        x = self.order[0]
        spread = 1 if self.p["assign_x"] == "cyclic" else self.p["reg_x"]
        if staged:
            if not self.tiles_decided():
                return 1.0
            fronts = []
            for pad in self.options("pad"):
                stride = self._tile_stride(read, x, pad) * spread
                fronts.append(math.gcd(stride * self.m.bytes // 4, 32) if stride else 1)
            return float(min(fronts))
        stride = read.strides.get(x, 0) * spread * self.m.bytes
        lanes = min(32, self.p["block_x"])
        sectors = min(lanes, math.ceil(lanes * stride / 32)) if stride else 1
        rows = math.ceil(32 / lanes)
        if len(self.order) > 1 and self.order[1] not in read.indices:
            rows = 1  # the rows of a warp read the same addresses
        return max(1.0, sectors * rows / 4)

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
            stride *= extents[i] + (pad if n == 0 else 0)
        return stride

    def footprint(self, read: _Read) -> dict[str, int]:
        """Per block and step, how many values of each of its indices ``read`` touches."""
        extents = {}
        for i in read.indices:
            if i in self.order:
                n = self.order.index(i)
                extents[i] = min(self.m.sizes[i], self.p[f"block_{AXES[n]}"]
                                 * self.p[f"reg_{AXES[n]}"])
            elif i in self.m.outputs:
                extents[i] = 1
            else:
                extents[i] = min(self.m.sizes[i], self.p["step"] or self.m.sizes[i])
        return extents

    def traffic(self, read: _Read) -> float:
        """Elements of ``read`` all blocks pull from L2 over the kernel."""
        total = 1.0
        for n, index in enumerate(self.order):
            extent = self.m.sizes[index]
            if index in read.indices:
                total *= min(math.ceil(extent / t) * t for t in self.tiles(n))
            else:
                total *= min(math.ceil(extent / t) for t in self.tiles(n))
        for index in self.m.sizes:
            if index not in self.order and (index in read.indices or index in self.m.outputs):
                total *= self.m.sizes[index]
        return total

    def copy_instructions(self) -> float:
        """Per FMA: copy instructions (a load and a store per staged element) and the step's
        overhead (the loop and its barriers), 0 while undecided."""
        if not self.tiles_decided() or "stage" not in self.p:
            return 0.0
        staged = [r for r in self.m.reads if self.staged(r)]
        per_block_step = sum(2 * math.prod(self.footprint(r).values()) for r in staged)
        threads = math.prod(self.p[f"block_{a}"] for a in AXES)
        barriers = min(self.barriers_per_step(double) for double in self.options("double_buffer"))
        per_block_step += threads * (STEP_OVERHEAD + (barriers if staged else 0))
        fmas_per_block_step = (math.prod(self.p[f"block_{a}"] * self.p[f"reg_{a}"] for a in AXES)
                               * (self.p["step"] or 1))
        return per_block_step / fmas_per_block_step

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
        total = 0
        for r in self.m.reads:
            if self.staged(r):
                extents = self.footprint(r)
                fastest = r.indices[-1] if self.m.program.layout == "C" else r.indices[0]
                extents[fastest] += min(self.options("pad"))
                total += math.prod(extents.values())
        buffers = min(2 if double else 1 for double in self.options("double_buffer"))
        return total * buffers * self.m.bytes

    def registers(self) -> int:
        """A conservative register count: accumulators, one operand per read and the preloaded
        next step (each element as many registers as its dtype needs), and bookkeeping."""
        elements = self.m.groups * self.registers_tile() + len(self.m.reads)
        if self.tiles_decided() and self.decided("stage") and self.p.get("preload"):
            threads = math.prod(self.p[f"block_{a}"] for a in AXES)
            elements += sum(math.ceil(math.prod(self.footprint(r).values()) / threads)
                            for r in self.m.reads if self.staged(r))
        return elements * dtypes.registers(self.m.program.dtype) + OPERAND_REGISTERS

    def chain(self) -> float:
        """Cycles of one thread's dependent work: its FMA chains, and one exposed L2 latency
        per step unless the next step is preloaded."""
        g = self.m.gpu
        fmas = self.m.iterations * dtypes.chain(self.m.program.dtype) * g.fma_latency_cycles
        exposed = 0.0
        if self.decided("step", "preload") and not self.p["preload"]:
            steps = math.ceil(self.m.iterations / (self.p["step"] or 1))
            exposed = steps * g.l2_latency_cycles
        return fmas + exposed
