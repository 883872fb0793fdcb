"""What every model of the kernel's time returns, and how it adds resources up.

The analytic model (:mod:`treduda.model.model`), the tensor cores'
(:mod:`treduda.strategies.tensorcore_model`) and the walk over a generated kernel
(:mod:`treduda.tuning.walk`) each time a kernel per resource; they share the
:class:`Prediction` they return, the one rule that combines the resources' seconds into a
time (:func:`combined`: the bound's and the estimate's), and ptxas's report that refines them
(:class:`Compiled`, :func:`ptxas_report`). The search and the path planner rank candidates by
these predictions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import CompileError
from ..run.nvcc import CudaReport, nvcc_available
from ..run.sass import compile_with_sass

if TYPE_CHECKING:
    from ..run.sass import SassReport

LAUNCH_SECONDS = 3e-6  # kernel launch overhead, included in both bound and estimate
OVERLAP = 0.1  # share of the non-binding resources an estimate adds


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
    return Prediction(math.inf, "occupancy", {}, "the block does not fit on an SM", flops,
                      floor=math.inf)


@dataclass(frozen=True)
class Compiled:
    """What ptxas says a generated kernel costs (nvcc -Xptxas -v): registers per thread and
    bytes of spill stores plus spill loads per thread; and, where its SASS was read, the
    instructions its main loop issues per FFMA/DFMA there (issue 40: the issue resource
    of the few candidates the search compiles is taken from what the GPU will execute)."""

    registers: int
    spill_bytes: int = 0
    instructions_per_fma: float | None = None
    # where the SASS was read, the bytes a thread's main loop moves to and from local memory
    # (spills) per FFMA/DFMA there: what the spills cost, where ptxas's ``spill_bytes`` also
    # count those stored once outside the loop (at the launch bounds' cap of 128, tccg_18's
    # 116 bytes are 2 LDL in a loop of 1024 FFMA, nvcc 13, sm_90)
    local_bytes_per_fma: float | None = None
    # where the SASS was read and its main loop holds MMAs of known shapes, what that loop
    # spends beside them (:func:`mma_economy`): what breaks a near-tie of tensor-core kernels
    mma_economy: MmaEconomy | None = None

    @classmethod
    def of(cls, report: CudaReport, sass: SassReport | None = None) -> Compiled:
        """``report``'s registers and spills, with ``sass``'s main loop where it holds FMAs
        and is the full tiles' (:func:`full_tiles_loop`), or its MMAs' economy."""
        economy = mma_economy(sass)
        if sass is None or not sass.main_loop_ffma or not full_tiles_loop(sass):
            return cls(report.registers, report.spill_bytes, mma_economy=economy)
        return cls(report.registers, report.spill_bytes,
                   sass.main_loop_instructions / sass.main_loop_ffma,
                   sass.main_loop_local_bytes / sass.main_loop_ffma, economy)


@dataclass(frozen=True, order=True)
class MmaEconomy:
    """What a tensor-core kernel's SASS main loop issues beside its MMAs, per multiply-add a
    warp's MMAs do (so that kernels of different MMA shapes compare: an m16n8k8 does half an
    m16n8k16's work): its other instructions, then the bytes it moves through shared memory.
    Ordered so: fewer instructions first, then fewer bytes (the benchmarks' non-MMA
    instructions and shared bytes per MMA, for one shape)."""

    instructions_per_mac: float
    shared_bytes_per_mac: float


def mma_economy(sass: SassReport | None) -> MmaEconomy | None:
    """``sass``'s main loop's :class:`MmaEconomy`; None where no SASS was read, the loop
    holds no MMA or one of a shape the reader does not know."""
    if sass is None or not sass.main_loop_mma or not sass.main_loop_mma_macs:
        return None
    macs = sass.main_loop_mma_macs
    return MmaEconomy((sass.main_loop_instructions - sass.main_loop_mma) / macs,
                      sass.main_loop_shared_bytes / macs)


# Integer compares (ISETP) a main loop of full tiles holds: its counter's, a step copy's
# guard, a rolled inner loop's. More is a loop that tests tile bounds.
FULL_TILES_TESTS = 4


def full_tiles_loop(sass: SassReport) -> bool:
    """Whether the main loop ``sass`` found is the full tiles' path, whose instructions stand
    for the kernel's: not a path testing partial tiles' bounds, which nvcc may lay out as the
    loop with the most FMAs. tccg_20~1's (H200 data, 2026-11-26) holds 640 FFMA beside 199
    ISETP and 100 BRA, 2.55 instructions per FFMA where the model counts 1.54; tccg_13~1's
    80 ISETP, 1.81 per FFMA against 1.19. The H200 rows' loops of full tiles hold 0 to 3;
    read so, the held-out fidelity kept its picks (12 of 15, 10 with those loops read)."""
    return sass.main_loop_opcodes.get("ISETP", 0) <= FULL_TILES_TESTS


def ptxas_report(kernel, gpu, use_nvcc: bool = True, sass: bool = False) -> Compiled | None:
    """What ptxas (and, with ``sass``, the SASS where a disassembler is found: for a model that
    reads it) says of a generated ``kernel`` (a :class:`treduda.kernel.Kernel`) on ``gpu``'s
    architecture, as the search's check of its finalists reads it
    (:func:`treduda.tuning.policy.checked`): what a model's ``refine`` adds to its estimate.
    None without nvcc, or where this nvcc no longer knows the architecture."""
    if not (use_nvcc and nvcc_available()):
        return None
    try:
        [report] = compile_with_sass([kernel.cuda_source], gpu.arch,
                                     [kernel.cuda_source] if sass else ())
    except CompileError:
        return None
    compiled = next(c for c in report if c.ptxas.kernel == kernel.name)
    return Compiled.of(compiled.ptxas, compiled.sass)
