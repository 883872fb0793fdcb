"""The performance model of the tensor-core strategy (``strategies/tensorcore.py``).

The same resources as :mod:`treduda.model.model`, seen from warps of fragments rather than
threads of FMAs, for a complete candidate (BM x BN tiles of ``warps x frags`` fragments, a
step of BK summed values):

* ``mma``      the multiply-accumulates the tiles execute (partial tiles padded to whole
               fragments, but for a warp's last fragment along N whose last 8 columns
               are not multiplied: :func:`~treduda.strategies.tensorcore_tiles.last_columns`;
               a grouped K's fastest index to whole steps:
               :func:`~treduda.strategies.tensorcore_tiles.stepped_k`, a split's parts
               to whole chunks where copies run ahead; 3xTF32's three products) / what
               WMMA reaches of the GPU's tensor cores for the dtype
               (:meth:`~treduda.model.gpus.Gpu.mma_flops`)
* ``issue``    warp instructions: copies (address, load, store per element, 16-bit values
               copied as they are; or an address and one cp.async per run of the operand's
               copy width, each operand on its own; where a copy's K value is a group's
               that the steps do not scan in whole values, its division, the digits folded
               into the address and a compare with K's end), fragment loads (a 32-bit shared
               load per word a thread receives, TF32 roundings), MMA instructions, and
               the write through shared memory / the warp schedulers
* ``memory``   LSU wavefronts: the copies' global lines (counted from the addresses the
               kernel deals to its warps, :meth:`TensorCoreModel.copy_sectors`, by the
               emulator's rule) and shared stores, the fragment loads
               (the tile's bytes per 128-byte wavefront: the tiles are padded so that they
               have no bank conflicts), the accumulators' round trip through shared memory
               and the output's lines (counted over the grid from the addresses the write
               deals to its warps, :meth:`EnumeratingModel.output_sectors`; twice where the
               output is read too) / one per cycle and SM
* ``l2``       the sectors of each block's copies of A and B over its steps (as counted for
               ``memory``: a warp that reads a strided operand moves whole sectors of it;
               cp.async bypasses L1, and copies through registers are taken to find no
               sector there either, an upper bound where later steps re-read them),
               and the output's sectors as its write's addresses take them (read and
               written by each part of a split reduction's atomic additions) / L2 BW
* ``dram``     every tensor once (and the output zeroed before a split) / DRAM bandwidth
* ``latency``  waves of blocks x per step: a copy from L2, two barriers, the step's chain of
               fragment loads and MMAs (in S >= 2 stages: one barrier, and the MMAs overlap
               the copies of S - 1 steps in flight, each step waiting for at least 1 / (S - 1)
               of a copy's latency, after the first copy's whole); the MMAs' issue shared
               by the blocks a wave holds per SM, and the warps that hide latencies those
               of the fullest wave (a grid short of the SMs holds fewer than the limits allow)

A candidate is read only through the strategy's description of itself
(:meth:`~treduda.strategies.tensorcore.TensorCore.describe`, in the geometry's quantities, which
tests check against the generated kernels): its threads, tile, step, split, buffers and
shared bytes, and the warps and fragments the tile's axes imply
(:func:`~treduda.strategies.tensorcore_tiles.described_tile`); and, from its parameters,
whether its copies are asynchronous, which no quantity of the geometry says, and the
addresses its copies read (:meth:`TensorCoreModel.copy_sectors`: the parameters as the kernel
builder deals them, which a test checks against the emulator's counts).

Registers per thread are the fragments' (a thread holds ``elements / 32`` of each: the
accumulators, and the operands of one k-slice of a step, as ptxas's counts show) and a fixed
overhead, asynchronous copies or not: their values skip the registers, but ptxas gave GEMM
1024³'s default tiles on sm_90 as many registers or more with them (float16 64 -> 72, TF32
72 -> 80, float64 64 -> 72 single-buffered; 80 -> 78, 88 -> 90, 48 -> 48 double-buffered),
their 64-bit addresses taking the place of the values. Registers, the threads and the shared
tiles set the blocks per SM. The space of a contraction has at most a few hundred points, so
the bound of a partial candidate is exact per resource: each resource at its least over the
completions, the binding one alone (Telamon's per-factor bound, without relaxation).
``bound <= estimate`` holds on every path, and refining a candidate never lowers its bound (a
least over fewer completions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from treduda.frontend import dtypes
from treduda.model.gpus import Gpu
from treduda.model.occupancy import blocks_per_sm, waves_by_residency
from treduda.model.prediction import (
    LAUNCH_SECONDS,
    Compiled,
    Prediction,
    combined,
    ptxas_report,
    unfit,
)
from treduda.polyhedral.geometry import AXES, decided
from treduda.polyhedral.lower import Program
from treduda.polyhedral.strategy import Strategy
from treduda.run.counters import LINE_BYTES, SECTOR_BYTES, global_requests, moved_requests

from . import tensorcore_tiles
from .tensorcore_kernel import Builder

RESOURCES = ("mma", "issue", "memory", "l2", "dram", "latency")
OVERHEAD_REGISTERS = 32  # indices, addresses and loop counters beside the fragments
# A thread holds the operand fragments of one k-slice of a step at a time, whatever the
# precision, as ptxas's register counts (CUDA 13, sm_90) show for GEMM 1024^3 with 2x2 warps
# of 2x2 fragments and asynchronous copies: TF32 64, 72, 80 registers at frags_k 1, 2, 4 (its
# fragments read by shared loads, templates/fragment_loads.cu.j2; by WMMA's generic loads
# they took 80, 80, 122, every slice held); bfloat16 63, 63, 80; float64 56, 54, 62; 3xTF32
# 114, 126, 128. benchmarks/tensorcore_registers.py prints the whole table.
COPY_INSTRUCTIONS = 4  # per element copied: address, load, store, loop share
ASYNC_COPY_INSTRUCTIONS = 3  # per cp.async: address, the copy (LDGSTS), loop share
# Per copy of a K box's B (tensorcore_tiles.box_indices): the address and its guard (the
# zeros, CS2R, where it reads none), an LDG.64, a shift for each word's high half and four
# STS.U16: 12 in the SASS of tccg_14's pick (sm_90)
BOXED_COPY_INSTRUCTIONS = 12
# A signed int's quotient and remainder by a constant, as nvcc 13 compiles them for sm_90:
# IMAD.HI, SHF.R.U32.HI, LEA.HI.SX32 (the quotient) and IMAD (the remainder)
DIVISION_INSTRUCTIONS = 4
# The parameters that decide which addresses a block's copies read in a step
COPY_PARAMETERS = ("warps_m", "warps_n", "frags_m", "frags_n", "frags_k", "async_copy",
                   "shared_layout", "free_layout")
WAVEFRONT_BYTES = 128  # one LSU wavefront: 32 banks x 4 bytes, or one L1 line
# Tensor-core instructions per WMMA multiply-accumulate, by its k: 16x16x16 (float16, bfloat16)
# is two HMMA.16816, 16x16x8 TF32 four HMMA.1684 (m16n8k4, not two m16n8k8), 8x8x4 one DMMA.884,
# as nvcc 13 compiles them for sm_80 and sm_90 (read from the SASS).
MMA_INSTRUCTIONS = {16: 2, 8: 4, 4: 1}
# mma.sync instructions per 16x16xk fragment product of the "mma" mapping: two m16n8k16
# (16-bit) or m16n8k8 (TF32), PTX ISA "Warp-level matrix multiply-accumulate: mma".
MMA_SYNC_PER_FRAGMENT = 2
# Instructions of one TF32 rounding of a fragment element, wmma::__float_to_tf32
# (cvt.rna.tf32.f32): ptxas issues FSETP (Inf or NaN?) and an integer add of half a unit, the
# low bits left for the MMA to ignore (SASS, sm_90). The OpenCL helper's is longer
# (dtypes.ROUNDING_OPERATIONS).
WMMA_ROUNDING_INSTRUCTIONS = 2
# Instructions per fragment load of the "mma" mapping (templates/mma_sync.cu.j2): the
# ldmatrix.x4 and its share of the step's integer instructions (the loads share address
# registers, their offsets immediates). GEMM 4096^3 fp16 and bf16, 2x4 warps of 4x4
# fragments, 4 per step, 2 stages: the SASS main loop (sm_90) issues 259 instructions a step,
# 32 LDSM and 128 HMMA among them, and the model 260; WMMA's 318 (fp16) and 262 (bf16)
MMA_SYNC_LOAD_INSTRUCTIONS = 3
# Instructions per word of a TF32 fragment the "mma" mapping reads by shared loads (B's where
# its tile's rows run along N: ldmatrix cannot transpose 32-bit values): the LDS and its
# share of the addresses; and per word its rounding, one cvt.rna.tf32.f32 (3xTF32's residual
# piece: :data:`MMA_SYNC_RESIDUAL_INSTRUCTIONS` more). GEMM 4096^3 TF32, the tiles above:
# SASS 567 a step (67 LDS, 16 LDSM, 128 HMMA.1688, 128 roundings), the model 564; WMMA 902
# (256 HMMA.1684)
MMA_SYNC_WORD_INSTRUCTIONS = 3.5
MMA_SYNC_ROUNDING_INSTRUCTIONS = 1
# Instructions per word of 3xTF32's residual piece on the "mma" mapping, which rounds the
# values its high piece loaded (ptxas loads them once): td_tf32_lo (templates/precision.j2)
# subtracts the value's TF32 rounding, done again in software as cvt.rna's is not shared, and
# rounds the difference (two LOP3, VIADD, ISETP and SEL or FSEL each, and an FADD). GEMM
# 4096^3 3xTF32, 2x2 warps of 4x4 fragments, 4 per step: its SASS main loop (sm_90) issues
# 1408 more instructions a step than TF32's for its 128 words, and the same LDS and LDSM
MMA_SYNC_RESIDUAL_INSTRUCTIONS = 11
# Instructions a swizzled tile (shared_layout "swizzle") adds to each copy into it and each
# fragment load from it: the same GEMM, swizzled, issues 27 more a step (101 integer
# instructions, 74 padded) for its 32 ldmatrix and 12 cp.async
SWIZZLE_INSTRUCTIONS = 0.6
MMA_LATENCY_CYCLES = 33  # [EST] an HMMA.16816 result on Ampere (Abdelkhalik et al. 2022)
SYNC_CYCLES = 20  # [EST] a barrier of a few warps


class EnumeratingModel:
    """What the models of the MMA strategies share (the tensor-core one, the warpgroup one in
    :mod:`.warpgroup_model`): a space small enough to enumerate, so a bound is each resource at
    its least over the completions, and a kernel's estimate is the candidate's with ptxas's
    registers. It holds what both read of the GEMM-shaped program (its groups, the extents of
    M, N and K, the batch, the FLOPs and the compulsory bytes); a subclass sets its own
    ``rate`` and gives ``_compute(params, registers)``: a
    complete candidate's seconds of each of :data:`RESOURCES`, its resident warps per SM and
    its LSU wavefronts per MMA, or None where a block does not fit an SM; and
    ``_because(binding, seconds)``."""

    walkable = False  # a warp's MMA statements have no per-thread counts to walk
    remembers = True  # each completion's resources, predicted once (_resources)
    reads_sass = False  # ptxas's registers alone refine it ...
    # ... and its near-ties the SASS main loop's economy breaks: where DRAM binds, kernels whose
    # loops issue different instructions per MMA are priced alike (tccg_01 fp16: 2x1 warps of
    # 4x2 fragments 0.23% faster by the model than 4x1, whose loop issues 1.95 non-MMA
    # instructions and 336 shared bytes per MMA against 2.00 and 352)
    ties_by_sass = True
    builder: type[Builder]  # the mapping's kernel builder, whose write the model counts

    def __init__(self, program: Program, gpu: Gpu, strategy: Strategy,
                 values: Mapping[str, tuple] | None = None):
        self.program, self.gpu, self.strategy = program, gpu, strategy
        self.space = strategy.space(program)
        self.values = values or {p.name: p.values for p in self.space.parameters}
        self.groups = tensorcore_tiles.gemm_groups(program)
        (a,), (b,), m, n, k, batch = self.groups
        self.operands = (a, b)
        sizes = program.sizes
        self.extent = {axis: math.prod(sizes[i] for i in group)
                       for axis, group in zip("mnk", (m, n, k), strict=True)}
        self.batch = math.prod(sizes[i] for i in batch)
        self.bytes = dtypes.itemsize(program.dtype)
        c = program.contraction
        self.flops = 2.0 * self.batch * math.prod(self.extent.values())
        touched = sum(math.prod(sizes[i] for i in idx) for idx in c.inputs.values())
        self.outputs = self.batch * self.extent["m"] * self.extent["n"]
        # the output's accesses per element: its write, and its read where beta or an
        # update (+=) reads it (at the same addresses)
        self.output_accesses = 2 if c.reads_output or c.op != "=" else 1
        self.compulsory = (touched + self.outputs * self.output_accesses) * self.bytes
        self.accumulator_bytes = dtypes.itemsize(tensorcore_tiles.accumulator_dtype(program))
        self._writes: dict[tuple, tuple[int, int, int, int]] = {}
        self._write_instructions: dict[tuple, int] = {}
        self._found: dict[tuple, tuple[dict[str, float], int, float] | None] = {}
        # Completions predicted, each once: a bound lists every completion of its node, and
        # one listed before is remembered, not predicted again. Counting every listing
        # charged tccg_19 fp16's first dive 4644 work, 2.3 default budgets (split widens its
        # warpgroup space to 1530 candidates, each listed by the bound of every node above
        # it; the whole search took 0.4 s of CPU), so its search stopped at that dive's
        # kernel (0.05262 ms, split 4; the complete search's is 0.05163, split 2).
        self.evaluations = 0

    def bound(self, params: Mapping[str, Any]) -> Prediction:
        """A lower bound on every completion of the partial ``params``: each resource at its
        least over the completions; ``floor`` the least estimate any completion can have."""
        completions = [self._resources(tuple(sorted(p.items())))
                       for p in self.space.points(params)
                       if all(p[name] in self.values[name] for name in p)]
        fitting = [r for r in completions if r is not None]
        if not fitting:
            return unfit(self.flops)
        least = {name: min(r[0][name] for r in fitting) for name in RESOURCES}
        binding, seconds = combined(least, estimate=False)
        floor = combined(least, estimate=True)[1]
        return Prediction(seconds, binding, least,
                          f"{binding} {least[binding] * 1e3:.3g} ms at least (a lower bound)",
                          self.flops, floor=floor)

    def least(self) -> float:
        """A lower bound on every candidate's estimate, without enumerating them (the root's
        bound does, in seconds): the launch and the compulsory DRAM traffic."""
        return LAUNCH_SECONDS + self.compulsory / self.gpu.dram_bandwidth

    def estimate(self, params: Mapping[str, Any], compiled: Compiled | None = None
                 ) -> Prediction:
        """The predicted time of a complete candidate; ``compiled`` (ptxas's report) replaces
        the register estimate."""
        self.space.check(params)
        found = self._resources(tuple(sorted(params.items())),
                                compiled.registers if compiled else None)
        if found is None:
            return unfit(self.flops)
        seconds, warps, wavefronts = found
        binding, total = combined(seconds, estimate=True)
        return Prediction(total, binding, seconds, self._because(binding, seconds), self.flops,
                          wavefronts=wavefronts, warps=warps)

    def refine(self, kernel: Any, use_nvcc: bool = True) -> Prediction:
        """The estimate of a generated kernel of this program with ptxas's registers."""
        return self.estimate(kernel.params, ptxas_report(kernel, self.gpu, use_nvcc))

    def output_sectors(self, tile: Mapping[str, int], size: int | None = None,
                       box: tensorcore_tiles.FreeBox | None = None, vector: int = 1
                       ) -> tuple[int, int, int, int]:
        """The global requests, 32-byte sectors, ideal sectors and 128-byte lines of every
        block's writes of its ``tile["m"] x tile["n"]`` output tile over the grid (one part
        of a split), of ``size`` bytes each (the program's; a deterministic split's workspace
        holds the accumulator's), from the addresses the kernel builder deals
        (:func:`tensorcore_tiles.output_writes`) counted by the emulator's rule: what
        ``Kernel.counters()`` counts of the write over every block, in a free ``box``'s
        order, ``vector`` elements a thread's store (:func:`tensorcore_tiles.write_vector`).
        The first block's alone were optimistic where the other tiles start elsewhere
        in a line (tccg_42's 2.0 lines a request, 2.83 over the grid). Remembered per tile:
        the bound reads every completion."""
        size = size or self.bytes
        key = (tile["m"], tile["n"], size, box, vector)
        if key not in self._writes:
            period = LINE_BYTES // math.gcd(LINE_BYTES, size)  # a line's elements
            request, offset, moves = tensorcore_tiles.output_writes(self.program, tile, box,
                                                                    period, vector)
            self._writes[key] = moved_requests(offset, request, size, moves)
        return self._writes[key]

    def _write_vector(self, p: Mapping[str, Any], tile: Mapping[str, int], parts: int) -> int:
        """The output elements a thread's write stores at once (:meth:`Builder.vector`)."""
        vector = tensorcore_tiles.write_vector(self.program, p, tile)
        return vector if parts == 1 and self.builder.vector_write else 1

    def write_instructions(self, params: Mapping[str, Any], tile: Mapping[str, int],
                           threads: int, parts: int) -> int:
        """A thread's instructions per output element of a complete candidate's write,
        counted from the write statement its kernel builder makes
        (:meth:`.tensorcore_kernel.Builder.write_instructions`: a free box's or a group's
        index arithmetic, guards, the loop nvcc unrolls or keeps). Remembered per tile,
        threads, layout and split: what the write depends on."""
        key = (tile["m"], tile["n"], threads, params.get("free_layout", "group"), parts > 1)
        if key not in self._write_instructions:
            builder = self.builder(self.program, params)
            self._write_instructions[key] = builder.write_instructions()
        return self._write_instructions[key]

    def tiles(self, tile: Mapping[str, int], params: Mapping[str, Any]) -> int:
        """The output tiles of ``tile["m"] x tile["n"]`` a grid covers, over the batch: a
        padded free box's group with its extra slots, whose MMA work, copies and blocks
        the resources count as any tile's."""
        extent = tensorcore_tiles.group_extents(
            self.program, tensorcore_tiles.free_boxed(self.program, params))
        return -(-extent["m"] // tile["m"]) * -(-extent["n"] // tile["n"]) * self.batch

    def _written_bytes(self, parts: int) -> int:
        """Bytes of an element the write stores: the output's, or, in a deterministic split,
        the workspace's accumulator."""
        return self.accumulator_bytes if parts > 1 and self.program.split_workspace else self.bytes

    def _split_l2(self, written: int, parts: int) -> float:
        """Bytes the sectors of every block's output writes (``written`` bytes) move
        through L2: each once, and again where the output is read (beta, ``+=``); split, an
        atomic addition reads and writes its sector; deterministic, each part stores its
        sum into the workspace, which the second kernel reads with the output it writes
        (counted here, overlapped, though it runs after: the estimate is low by at most that
        kernel's time)."""
        if parts == 1:
            return written * self.output_accesses
        if not self.program.split_workspace:
            return 2 * written
        return written + (parts + 1) * self.outputs * self.accumulator_bytes

    def _split_dram(self, parts: int) -> float:
        """Bytes a split adds to DRAM's traffic: the output zeroed first, or the workspace of
        a deterministic split written back."""
        if parts == 1:
            return 0.0
        if self.program.split_workspace:
            return parts * self.outputs * self.accumulator_bytes
        return self.outputs * self.bytes

    def _resources(self, items: tuple, registers: int | None = None
                   ) -> tuple[dict[str, float], int, float] | None:
        """:meth:`_compute` of a complete candidate (its items), remembered: a bound reads
        every completion of its node. Only a computed one counts as a prediction."""
        key = (items, registers)
        if key not in self._found:
            self.evaluations += 1
            self._found[key] = self._compute(dict(items), registers)
        return self._found[key]


class TensorCoreModel(EnumeratingModel):
    """The model of one program on one GPU for the tensor-core strategy; ``values`` are the
    values its open parameters may take."""

    builder = Builder

    def __init__(self, program: Program, gpu: Gpu, strategy: Strategy,
                 values: Mapping[str, tuple] | None = None):
        super().__init__(program, gpu, strategy, values)
        self.shape = tensorcore_tiles.mma_shape(program)
        self.pieces = 2 if program.precision == dtypes.TF32X3 else 1
        self.products = 3 if program.precision == dtypes.TF32X3 else 1
        self.rate = gpu.mma_flops(program.dtype, program.precision)
        self.row_a, self.row_b = tensorcore_tiles.operand_rows_major(program, self.groups)
        self._traffic: dict[tuple, tuple[int, int]] = {}

    # -- the public face (as treduda.model.model.Model's) --------------------------------

    def registers(self, params: Mapping[str, Any]) -> tuple[int, int]:
        """Registers per thread, and those beyond the launch bounds' cap."""
        described = self._described(params)
        registers = self._registers(self._tile(described))
        cap = self.gpu.register_cap(_threads(described))
        return registers, max(0, registers - cap)

    def register_pressure(self, params: Mapping[str, Any]) -> float:
        described = self._described(params)
        return (self._registers(self._tile(described))
                / self.gpu.register_cap(_threads(described)))

    # -- the resources ------------------------------------------------------------------

    def _described(self, p: Mapping[str, Any]) -> dict[str, Any]:
        """The strategy's description of a complete candidate, all the model reads of it."""
        return decided(self.strategy.geometry(self.program, p, self.values))

    def _tile(self, described: Mapping[str, Any]) -> dict[str, int]:
        """The block's tile, warps and fragments per warp
        (:func:`tensorcore_tiles.described_tile`), with ``frags_k`` the fragment depths per
        step."""
        tile = tensorcore_tiles.described_tile(self.program, described)
        return {**tile, "frags_k": tile["k"] // self.shape[2]}

    def _registers(self, tile: Mapping[str, int]) -> int:
        """The fragments a thread holds (its share: a 32nd of each), at 4-byte registers,
        and the overhead: the accumulators, and the operand fragments of one k-slice of the
        step."""
        m, n, k = self.shape
        accumulators = self.pieces * tile["frags_m"] * tile["frags_n"] * m * n // 32
        operands = self.pieces * (tile["frags_m"] * m * k + tile["frags_n"] * k * n) // 32
        words = accumulators * self.accumulator_bytes + operands * self.bytes
        return OVERHEAD_REGISTERS + math.ceil(words / 4)

    def step_instructions(self, params: Mapping[str, Any]) -> float:
        """The instructions a warp issues per step of a complete candidate, which the
        ``issue`` resource counts: what its SASS main loop holds, where nvcc keeps the step a
        loop."""
        described = self._described(params)
        return self._warp_step(self._tile(described), _threads(described),
                               params)

    def step_mmas(self, params: Mapping[str, Any]) -> int:
        """The tensor-core instructions a warp issues per step: a SASS loop that holds
        ``n`` times as many holds ``n`` steps (nvcc unrolled them)."""
        tile = self._tile(self._described(params))
        return round(self.products * tile["frags_m"] * self._frags_n(params, tile)
                     * tile["frags_k"] * self._mma_instructions(params))

    def _frags_n(self, p: Mapping[str, Any], tile: Mapping[str, int]) -> float:
        """The fragments along N a warp multiplies and loads B's of: ``frags_n``, its last
        one counted by the share of its columns the MMAs compute where the others lie
        wholly outside N (:func:`~.tensorcore_tiles.last_columns`: one mma.sync of two)."""
        last = tensorcore_tiles.last_columns(self.program, p)
        return tile["frags_n"] - (0 if last is None else 1 - last / self.shape[1])

    def _mma_instructions(self, p: Mapping[str, Any]) -> int:
        """Tensor-core instructions per fragment product: two mma.sync (m16n8k16 or m16n8k8)
        on the "mma" mapping, else what WMMA's 16x16xk compiles to (:data:`MMA_INSTRUCTIONS`)."""
        return MMA_SYNC_PER_FRAGMENT if p["mapping"] == "mma" else MMA_INSTRUCTIONS[self.shape[2]]

    def block_steps(self, params: Mapping[str, Any]) -> int:
        """The steps one block sums (its part's, in a split reduction)."""
        described = self._described(params)
        return self._steps(self._tile(described), described["split"])[1]

    def _steps(self, tile: Mapping[str, int], split: int) -> tuple[int, int, int]:
        """The reduction's steps of the tile's ``k`` values, and, split in ``split``
        parts at most, the steps each part sums and the parts."""
        steps = -(-math.prod(tensorcore_tiles.stepped_k(
            self.program, self.groups, tile["k"], tensorcore_tiles.boxed(self.program, tile)
        ).values()) // tile["k"])
        return steps, *tensorcore_tiles.split_parts(steps, split)

    def copy_sectors(self, params: Mapping[str, Any], steps: int | None = None
                     ) -> dict[str, tuple[int, int, int, int]]:
        """Per operand, the global requests, 32-byte sectors, ideal sectors and lines of the first
        block's tile copies over its first ``steps`` steps (None: all), from the addresses
        the kernel builder deals to the threads (:func:`tensorcore_tiles.copy_reads`)
        counted by the emulator's rule (:func:`~treduda.run.counters.global_requests`): what
        ``Kernel.counters()`` counts of the copies, not an assumption that they coalesce
        (equal where the first block's tiles are whole; at a partial step isl's scan may
        split a warp's copy into guarded pieces, each a request of its own)."""
        warps = params["warps_m"] * params["warps_n"]  # a copy instruction's requests
        found = {}
        for tensor in self.operands:
            instruction, thread, offset = tensorcore_tiles.copy_reads(
                self.program, params, tensor, steps)
            width = tensorcore_tiles.copy_shape(self.program, params, tensor)["width"]
            found[tensor] = global_requests(
                offset * self.bytes, instruction * warps + thread // tensorcore_tiles.WARP,
                width * self.bytes)
        return found

    def read_sectors(self, params: Mapping[str, Any]) -> dict[str, float]:
        """Per operand, the global sectors its first step's copies take per sector a fully
        coalesced copy of their width would (:meth:`copy_sectors`: sectors per request over
        the ideal; 1 at best): what a near-tie must not read worse than the best to be broken
        by its SASS (tccg_32 fp16's group layout, 0.2% slower by the model than the full
        one, whose B copies take 12 sectors a request, the ideal, takes 16)."""
        return {tensor: sectors / ideal
                for tensor, (_, sectors, ideal, _) in self.copy_sectors(params, 1).items()}

    def write_sectors(self, params: Mapping[str, Any]) -> tuple[int, int, int, int]:
        """Requests, sectors, ideal sectors and lines of a complete candidate's output writes
        over the grid (:meth:`output_sectors`)."""
        described = self._described(params)
        tile = self._tile(described)
        parts = self._steps(tile, described["split"])[2]
        return self.output_sectors(tile, self._written_bytes(parts),
                                   tensorcore_tiles.free_boxed(self.program, params),
                                   self._write_vector(params, tile, parts))

    def _copy_traffic(self, p: Mapping[str, Any]) -> tuple[int, int]:
        """The 32-byte sectors and 128-byte lines a block's copies of one step take, both
        operands, as :meth:`copy_sectors` counts its first step (remembered per tile: the
        bound reads every completion)."""
        key = tuple(p.get(name) for name in COPY_PARAMETERS)
        if key not in self._traffic:
            counted = self.copy_sectors(p, steps=1).values()
            self._traffic[key] = (sum(c[1] for c in counted), sum(c[3] for c in counted))
        return self._traffic[key]

    def _warp_step(self, tile: Mapping[str, int], threads: int, p: Mapping[str, Any]
                   ) -> float:
        """A warp's instructions per step: its fragment loads (and roundings) and MMAs, and
        its share of the block's copies, which are dealt to all the block's threads (counted
        once per warp, they made blocks of more warps look as many times dearer to copy).
        The "mma" mapping loads a fragment by one ldmatrix.x4 and its address's share
        (:data:`MMA_SYNC_LOAD_INSTRUCTIONS`), or a TF32 fragment that ldmatrix would have
        to transpose by a shared load per word (:data:`MMA_SYNC_WORD_INSTRUCTIONS`), rounds
        TF32 by cvt.rna (3xTF32's residual, from the same loaded values, by
        :data:`MMA_SYNC_RESIDUAL_INSTRUCTIONS` more) and multiplies 16x16 fragments in two
        mma.sync; swizzled tiles add
        :data:`SWIZZLE_INSTRUCTIONS` to each copy and fragment load. Copies that stay a loop
        (more than :data:`~.tensorcore_tiles.UNROLLED_COPIES` a thread) decompose their row's
        free group each, where it holds several indices: nvcc computes it once only for
        unrolled ones (tccg_28's K box pick: 2220 instructions a step executed, 42 IMAD in
        its copy loop of 4 copies)."""
        m, n, k = self.shape
        copies = runs = 0.0
        box = tensorcore_tiles.boxed(self.program, p)
        # a box's K values are the step's, divided once a step, plus the thread's column's
        divided, tail = (DIVISION_INSTRUCTIONS, 0) if box else self._k_addresses(tile["k"])
        widths = tensorcore_tiles.copy_widths(self.program, self.groups, box,
                                              tensorcore_tiles.free_boxed(self.program, p))
        for operand, free, k_rows in zip(self.operands, (tile["m"], tile["n"]),
                                         (not self.row_a, self.row_b), strict=True):
            width = widths[operand]
            if p["async_copy"] and width is not None:  # a cp.async per run of the width
                copy_runs = tile["k"] * free / width
                strided = box and operand == self.operands[1]
                copies += (BOXED_COPY_INSTRUCTIONS if strided
                           else ASYNC_COPY_INSTRUCTIONS) * copy_runs
            else:
                copy_runs = tile["k"] * free
                copies += COPY_INSTRUCTIONS * copy_runs
            runs += copy_runs
            if k_rows:  # each copy's own row of K: decomposed, compared with K's end
                copies += copy_runs * (divided + tail)
            else:  # the thread's column of K, once per step
                copies += threads * (divided + tail)
                group = self.groups[2 if operand == self.operands[0] else 3]
                if copy_runs > tensorcore_tiles.UNROLLED_COPIES * threads and len(group) > 1:
                    copies += copy_runs * (DIVISION_INSTRUCTIONS + len(group))  # in a loop
        frags_a, frags_b = self.pieces * tile["frags_m"], self.pieces * tile["frags_n"]
        rounds = 1 if self.program.precision == dtypes.TF32 else 2 if self.pieces == 2 else 0
        if p["mapping"] == "mma":
            words_a, words_b = (
                MMA_SYNC_LOAD_INSTRUCTIONS if self.bytes == 2 or direct
                else MMA_SYNC_WORD_INSTRUCTIONS * m * k // 32
                for direct in (self.row_a, not self.row_b))  # ldmatrix, not transposed
            frags_a, frags_b = tile["frags_m"], tile["frags_n"]  # the pieces share the loads
            rounding = (MMA_SYNC_ROUNDING_INSTRUCTIONS
                        + (self.pieces - 1) * MMA_SYNC_RESIDUAL_INSTRUCTIONS) if rounds else 0
        else:
            words_a, words_b = self._load_instructions(m * k), self._load_instructions(k * n)
            rounding = WMMA_ROUNDING_INSTRUCTIONS * rounds
        if p["shared_layout"] == "swizzle":
            words_a, words_b = words_a + SWIZZLE_INSTRUCTIONS, words_b + SWIZZLE_INSTRUCTIONS
            copies += SWIZZLE_INSTRUCTIONS * runs
        # a narrowed last B fragment (_frags_n) rounds, and reads by words, its share only;
        # ldmatrix.x2 is one instruction, as x4 is
        narrowed = tile["frags_n"] - self._frags_n(p, tile)
        by_words = p["mapping"] == "mma" and not (self.bytes == 2 or not self.row_b)
        loads = (frags_a * (words_a + rounding * m * k // 32)
                 + frags_b * (words_b + rounding * k * n // 32)
                 - narrowed * ((words_b if by_words else 0) + rounding * k * n // 32))
        mmas = self.products * tile["frags_m"] * self._frags_n(p, tile)
        return (tile["frags_k"] * (loads + mmas * self._mma_instructions(p))
                + copies / threads)

    def _k_addresses(self, step: int) -> tuple[int, int]:
        """Instructions a copy spends on its value of K beyond a linear address: where K is
        a group that a step of ``step`` values does not scan in whole values of its slower
        indices (:func:`tensorcore_tiles.stepped_k` rounds the fastest up where it may), its
        value is divided by the fastest extent (quotient and remainder, and the value
        itself) and the digits folded into the address; where the steps do not divide K,
        it is compared with K's end. tccg_20's SASS main loop: 12 copies, 8 more
        instructions each than GEMM's (IMAD.HI, SHF, LEA.HI, IMAD, IADD3, two IMADs, ISETP).
        Where a step spans at most one pass of the fastest extent, a copy carries from the
        step's digits instead (:meth:`.tensorcore_kernel.Builder.carried_k`): 5.3 more than
        GEMM's (sm_80, tccg_20's pick: 323 a step against GEMM's 259), which this count
        still puts at 8."""
        extents = tensorcore_tiles.stepped_k(self.program, self.groups, step)
        k = self.groups[4]
        divided = (DIVISION_INSTRUCTIONS + 1 + len(k)
                   if len(k) > 1 and extents[k[0]] % step else 0)
        return divided, int(math.prod(extents.values()) % step != 0)

    def _load_instructions(self, elements: int) -> float:
        """A thread's instructions to load its share of a fragment of ``elements``: a word
        each for 16-bit types (ldmatrix moves them four 32-bit registers at a time, but its
        addresses come beside it); for 32- and 64-bit types, which ptxas loads element by
        element from shared memory, each element's load and its address (LDS and LEA, SASS
        of sm_90)."""
        if self.bytes < 4:
            return math.ceil(elements * self.bytes / 4 / 32)
        return 2 * elements / 32

    def _compute(self, p: dict[str, Any], registers: int | None
                 ) -> tuple[dict[str, float], int, float] | None:
        g = self.gpu
        clock = g.clock_ghz * 1e9
        m, n, k = self.shape
        described = self._described(p)
        tile = self._tile(described)
        threads = _threads(described)
        warps = threads // tensorcore_tiles.WARP
        registers = registers or self._registers(tile)
        occupancy = blocks_per_sm(g, threads, registers, described["shared"])
        if occupancy == 0 or self.rate == 0:
            return None
        tiles = self.tiles(tile, p)
        steps, chunk, parts = self._steps(tile, described["split"])
        blocks = tiles * parts
        shares = waves_by_residency(g, blocks, occupancy)
        quantise = math.ceil(blocks / g.sm_count) * g.sm_count / blocks
        # where the copies run ahead, every part runs ``chunk`` steps: a short last part
        # multiplies zeros past K's end (tensorcore_kernel.Builder.step_bounds); columns
        # wholly outside N a warp's last fragment leaves out (_frags_n) are not multiplied
        executed = parts * chunk if self._ahead(p) else steps
        frags_n = self._frags_n(p, tile)
        padded = (2.0 * tiles * tile["m"] * tile["n"] * frags_n / tile["frags_n"]
                  * executed * tile["k"])
        # per block and step
        copied = (tile["m"] + tile["n"]) * tile["k"]
        warp_step = self._warp_step(tile, threads, p)
        mmas = self.products * tile["frags_m"] * frags_n  # per warp and k-slice
        frags_a, frags_b = self.pieces * tile["frags_m"], self.pieces * frags_n
        output = tile["m"] * tile["n"]
        written = self.write_instructions(p, tile, threads, parts)
        instructions = blocks * (chunk * warps * warp_step + output * written / 32)
        # the tiles' rows are padded so that fragment loads are free of bank conflicts
        # (tensorcore_tiles.operand_pads): their bytes in 128-byte wavefronts
        fragment_fronts = tile["frags_k"] * warps * self.bytes * (
            frags_a * m * k + frags_b * k * n) / WAVEFRONT_BYTES
        sectors, lines = self._copy_traffic(p)  # what the copies' addresses take
        copy_fronts = lines + copied * self.bytes / WAVEFRONT_BYTES  # and the shared stores
        # the accumulators' round trip through the C tile, and the lines the output's
        # addresses take (read too where the output is, without a split)
        _, written, _, written_lines = self.output_sectors(
            tile, self._written_bytes(parts), tensorcore_tiles.free_boxed(self.program, p),
            self._write_vector(p, tile, parts))
        wavefronts = (blocks * (chunk * (fragment_fronts + copy_fronts)
                                + output * 2 * self.accumulator_bytes / WAVEFRONT_BYTES)
                      + parts * written_lines * (self.output_accesses if parts == 1 else 1))
        # the warps the busiest SM holds at once (in its fullest wave) hide its latencies
        resident = shares[0][0] * warps
        hidden = self._hidden(resident, mmas, clock)
        in_flight = self._in_flight(p)

        def wave(blocks_resident: int) -> float:
            """A wave's cycles where ``blocks_resident`` blocks share each SM's MMAs."""
            # a step's MMAs take the block at least its chain's latency, and at least their
            # issue at the SM's rate shared with the blocks resident beside it: a block
            # cannot multiply while it waits for its copy unless it has a second buffer
            mma = max(tile["frags_k"] * self.products * MMA_LATENCY_CYCLES,
                      warps * tile["frags_k"] * mmas * MMA_INSTRUCTIONS[k] * blocks_resident
                      / self._mma_rate(clock) / g.schedulers_per_sm)
            if p["stages"] > 1:  # one barrier; the copies' loads wait beside the MMAs
                return g.l2_latency_cycles + chunk * (
                    SYNC_CYCLES + g.shared_latency_cycles
                    + max(g.l2_latency_cycles / in_flight, mma))
            return chunk * (2 * SYNC_CYCLES + g.shared_latency_cycles + g.l2_latency_cycles
                            + mma)

        seconds = {
            "mma": padded / self.rate * quantise / hidden,
            "issue": instructions * quantise / (g.sm_count * g.schedulers_per_sm) / clock
            / hidden,
            "memory": wavefronts * quantise / g.sm_count / clock / hidden,
            "l2": (tiles * steps * sectors * SECTOR_BYTES
                   + self._split_l2(parts * written * SECTOR_BYTES, parts))
            / g.l2_bandwidth,
            "dram": (self.compulsory + self._split_dram(parts)) / g.dram_bandwidth,
            "latency": sum(waves * wave(blocks_resident)
                           for blocks_resident, waves in shares) / clock,
        }
        per_mma = wavefronts / max(1.0, tiles * steps * mmas * tile["frags_k"] * warps)
        return seconds, resident, per_mma

    def _in_flight(self, p: Mapping[str, Any]) -> int:
        """Steps whose copies are in flight while a step multiplies, in two or more stages:
        asynchronous copies run ``stages - 1`` steps ahead, so a copy's latency is spread
        over that many steps' MMAs; copies through registers wait within their step."""
        return p["stages"] - 1 if self._ahead(p) else 1

    def _ahead(self, p: Mapping[str, Any]) -> bool:
        """Whether the copies run ahead of their step: asynchronous, in two or more stages."""
        widths = tensorcore_tiles.copy_widths(self.program, self.groups,
                                              free=tensorcore_tiles.free_boxed(self.program, p))
        return p["stages"] > 1 and p["async_copy"] and any(widths.values())

    def _hidden(self, resident: int, mmas: float, clock: float) -> float:
        """The share of the SM's throughput its resident warps keep busy. The SIMT model's
        rule, ``latency_hiding_warps`` per scheduler, is met here too by a few warps with many
        fragments: a warp's ``mmas`` fragment products of a k-slice (a narrowed one by its
        share, :meth:`_frags_n`) are independent chains of MMAs, so a scheduler is
        busy while the MMAs its warps can have in flight cover the MMA latency at the
        tensor cores' rate (CUTLASS's fp16 GEMM runs 64x64-fragment warps at two per
        scheduler; the SIMT rule alone rated them at half speed)."""
        g = self.gpu
        k = self.shape[2]
        per_scheduler = resident / g.schedulers_per_sm
        independent = per_scheduler * mmas * MMA_INSTRUCTIONS[k]
        return min(1.0, max(per_scheduler / g.latency_hiding_warps,
                            independent / (MMA_LATENCY_CYCLES * self._mma_rate(clock))))

    def _mma_rate(self, clock: float) -> float:
        """Tensor-core instructions one scheduler issues per cycle at the model's rate."""
        g = self.gpu
        m, n, k = self.shape
        instruction_flops = 2 * m * n * k / MMA_INSTRUCTIONS[k]
        return self.rate / (g.sm_count * g.schedulers_per_sm * clock * instruction_flops)

    def _because(self, binding: str, seconds: dict[str, float]) -> str:
        g = self.gpu
        reasons = {
            "mma": f"tensor-core throughput binds: {self.flops / 1e9:.3g} GFLOP at "
                   f"{self.rate / 1e12:.0f} TFLOP/s (what WMMA reaches on {g.name})",
            "issue": "instruction issue binds: copies and fragment loads beside the MMAs "
                     "(more fragments per warp reuse each load more)",
            "memory": "load/store units bind: copies and fragment loads through shared memory",
            "l2": "L2 bandwidth binds: blocks re-read their operand tiles (larger tiles reuse "
                  "more)",
            "dram": f"DRAM bandwidth binds: {self.compulsory / 1e6:.3g} MB at "
                    f"{g.dram_bandwidth / 1e9:.0f} GB/s",
            "latency": "latency binds: each step waits for its copy, barriers and MMA chain",
        }
        return f"{binding} {seconds[binding] * 1e3:.3g} ms: {reasons[binding]}"


def _threads(described: Mapping[str, Any]) -> int:
    return math.prod(described[f"block_{axis}"] for axis in AXES)
