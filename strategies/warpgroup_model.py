"""The performance model of the warpgroup strategy (``strategies/warpgroup.py``): the
tensor-core model's resources (:mod:`treduda.strategies.tensorcore_model`) for Hopper's asynchronous
MMAs, from a candidate's parameters.

* ``mma``      the tiles' multiply-adds (partial tiles and steps padded) / the GPU's dense
               tensor-core peak for the dtype (``Gpu.tensor_*_flops``: H100 SXM 989 TFLOP/s
               fp16/bf16, 495 tf32, [H100-DS-TC]), which wgmma reaches and mma.sync does not
               ([HOPPER-MMA]: the WMMA model takes ``mma_share`` of it)
* ``issue``    warp instructions: the copies (with ``tma`` a few of one thread per box and
               step, and a producer warpgroup's wait for the stage to empty; else an
               address and a cp.async per run, or an
               address, a load and a store per element; TF32's cp.async runs then rounded
               in place, a shared load, the rounding and a store per element; a K box's
               B a vector load and four 16-bit stores per copy, or staged, a cp.async per
               run and the transpose's two shared loads, four PRMT and four stores), a wgmma per
               64 x BN x k, and the write through shared memory / the warp schedulers
* ``memory``   LSU wavefronts: the copies' shared stores, 1 way into the swizzled tiles
               (:func:`.warpgroup_kernel.swizzles`; and TF32's rounding in place; a
               staged B's stores into its staging tile and the transpose's loads), the
               write's round trip (the accumulators' stores and the write's loads, 1 way:
               along N a thread's pairs of accumulators in one 8-byte store, as nvcc pairs
               them, :attr:`~treduda.codegen.ir.Local.vector_stores`, a free box's rows
               crossed: :func:`~.warpgroup_kernel.crossed`, whose swapped pairs' moves
               ``issue`` counts) and
               the output's lines as the tensor-core model counts them; the
               MMAs read their operands from shared memory through descriptors, not through
               the LSU, as a warp's fragment loads do
* ``l2``       the operand tiles' bytes each step, a 32-byte sector per element where a
               16-bit operand is copied element by element across its fastest index, and
               the output's sectors as the write's addresses take them (a split's atomic
               additions or workspace as the tensor-core model's);
* ``dram``     as the tensor-core model's
* ``latency``  waves of blocks (a split's parts each a block) x the steps of a part, per
               step: in stages with cp.async, a barrier and the larger
               of the copy latency spread over the steps in flight and the step's MMAs at
               the SM's rate, shared by the blocks the wave holds per SM
               (:func:`~treduda.model.occupancy.waves_by_residency`: a grid short of the SMs
               holds fewer than its limits allow); else two barriers, the copy's latency
               and the MMAs in turn; a staged B adds a barrier and its thread's
               transposes' shared latencies per step; with a producer warpgroup no
               barrier, its copies ``S - 1`` steps ahead (one stage: the copy and the
               MMAs in turn)

Registers per thread: the accumulators (``frags_m BN / 2`` floats) and the tensor-core
model's overhead, under the launch bounds' cap or a producer's consumers' setmaxnreg count
(a kernel with setmaxnreg runs one block per SM). A bound is exact per resource over a
partial candidate's completions, as the tensor-core model's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from treduda.codegen import ir
from treduda.model.gpus import Gpu
from treduda.model.occupancy import blocks_per_sm, waves_by_residency
from treduda.polyhedral.lower import Program
from treduda.polyhedral.strategy import Strategy

from .tensorcore_model import (
    BOXED_COPY_INSTRUCTIONS,
    OVERHEAD_REGISTERS,
    SECTOR_BYTES,
    EnumeratingModel,
)
from .tensorcore_tiles import (
    BOXED_WIDTH,
    boxed,
    digits_run,
    free_boxed,
    free_boxes,
    group_digits,
    index_digits,
    k_box,
    operand_rows_major,
    split_parts,
    stepped_k,
)
from .warpgroup_kernel import (
    WarpgroupBuilder,
    crossed_words,
    operand_widths,
    shared_bytes,
    staged,
    staged_width,
    step_boxes,
    warpgroup_tile,
)
from .warpgroup_roles import consumer_registers

WARPGROUP = 128
COPY_INSTRUCTIONS = 4  # per element copied through registers: address, load, store, loop
ASYNC_COPY_INSTRUCTIONS = 3  # per cp.async: address, LDGSTS, loop share
# per TF32 element a cp.async copied, rounded in place: a shared load and store, td_tf32's
# four (add, mask, compare, select) and an address (the SASS of GEMM 4096^3's tf32 pick)
ROUND_INSTRUCTIONS = 7
# per transpose of a staged B (4 values of d at two neighbouring c, TRANSPOSED values): two
# 8-byte shared loads, four PRMT pairing their halves and four 32-bit STS, addresses in
# immediates (the SASS of tccg_28's 128 x 128 tile, sm_90a)
TRANSPOSE_INSTRUCTIONS = 10
TRANSPOSED = 2 * BOXED_WIDTH
# per bulk tensor copy (tma), the issuing warp's: its election, coordinates, the map's and
# the tile's addresses, UTMALDG; and per step the expecting arrival (SYNCS) and the branch
# around them. [EST: no published issue rate] Read from sm_90a SASS, the issuing warp's
# main loop beyond the other warps', per step: GEMM 4096^3 128x256x4 (5 boxes of 2-D maps)
# 67, 64x64x2 (2 boxes) 34; tccg_20 64x64x2 (4 boxes of 4-D maps) 57; tccg_01 and tccg_15
# (3 boxes, two of 3-D maps) 44 and 43: 11 a box and 12 a step, whatever a map's rank
TMA_INSTRUCTIONS = 11
TMA_STEP_INSTRUCTIONS = 12
# per step, a producer warpgroup's (``producer``) wait for the stage's empty phase: the
# try_wait, its predicate and branch, the parity (its loop in GEMM's sm_90a SASS: 73
# instructions a step for 5 copies, against 67 in the issue block of the kernel without it)
PRODUCER_STEP_INSTRUCTIONS = 6
# per output element of a C tile crossed with an odd skew (warpgroup_kernel.crossed): every
# other block of 32 columns holds its pairs swapped, both registers moved into order before
# the 8-byte store (tccg_42's pick, sm_90a: 64 moves a thread of 128 accumulators)
CROSSED_MOVES = 0.5
STEP_INSTRUCTIONS = 12  # per warp and step: waits, fences, barrier, descriptors, loop
WAVEFRONT_BYTES = 128
ACCUMULATOR_BYTES = 4  # a float accumulator in the C tile (wgmma accumulates in float32)
SYNC_CYCLES = 20  # [EST] a barrier of a few warps, as the tensor-core model's


class WarpgroupModel(EnumeratingModel):
    """The model of one program on one GPU for the warpgroup strategy; ``values`` are the
    values its open parameters may take."""

    builder = WarpgroupBuilder

    def __init__(self, program: Program, gpu: Gpu, strategy: Strategy,
                 values: Mapping[str, tuple] | None = None):
        super().__init__(program, gpu, strategy, values)
        a, b = self.operands
        self.rate = {"float16": gpu.tensor_fp16_flops, "bfloat16": gpu.tensor_fp16_flops,
                     "float32": gpu.tensor_tf32_flops}[program.dtype]
        # per K box and free box (or none)
        free = list(free_boxes(program).values())
        self.widths = {(box, f): tuple(operand_widths(program, self.groups, True, box, f)[t]
                                       for t in (a, b))
                       for box in (False, True) if not box or k_box(program) for f in free}
        self.tf32 = program.dtype == "float32"  # tiles copied by cp.async are rounded in place
        # 16-bit operands whose tile rows do not run along their fastest index: a warp's
        # element copies through registers read a 32-byte sector each (tccg_28's B on steps
        # along e, where f leads it: no cp.async width either); TF32's are dealt 8 rows at 4 K
        row_a, row_b = operand_rows_major(program, self.groups)
        k = index_digits(self.groups[4], program.sizes)
        self.scattered = {f: tuple(
            not self.tf32 and digits_run(program, tensor, along) == 1
            for tensor, along in ((a, k if row_a else group_digits(program, "m", f)),
                                  (b, group_digits(program, "n", f) if row_b else k)))
            for f in free}

    def registers(self, params: Mapping[str, Any]) -> tuple[int, int]:
        """Registers per (consumer) thread, and those beyond its cap."""
        registers = self._registers(params)
        return registers, max(0, registers - self._cap(params))

    def register_pressure(self, params: Mapping[str, Any]) -> float:
        return self._registers(params) / self._cap(params)

    def _cap(self, p: Mapping[str, Any]) -> int:
        """The registers a thread of the tile's warpgroups may take: the launch bounds' cap,
        or where a producer warpgroup gives its own up, what its consumers' setmaxnreg asks
        for (:func:`.warpgroup_roles.consumer_registers`)."""
        rebalanced = consumer_registers(p["warpgroups"]) if p.get("producer") else None
        return rebalanced or self.gpu.register_cap(WARPGROUP * p["warpgroups"])

    def read_sectors(self, params: Mapping[str, Any]) -> dict[str, float]:
        """Per operand, the global sectors its copies take per sector the elements' bytes
        fill, as the ``l2`` term prices them (:meth:`_element_bytes`; 1 at best, a sector
        each of scattered elements): what a near-tie must not read worse than the best to be
        broken by its SASS."""
        return {tensor: read / self.bytes
                for tensor, read in zip(self.operands, self._element_bytes(params),
                                        strict=True)}

    def _copy_widths(self, p: Mapping[str, Any]) -> tuple:
        """Each operand's copy width (None: element copies through registers); a staged B's
        its cp.async's into the staging tile."""
        widths = self.widths[boxed(self.program, p), free_boxed(self.program, p)]
        return (widths[0], staged_width(self.program)) if staged(self.program, p) else widths

    def _element_bytes(self, p: Mapping[str, Any]) -> tuple[float, ...]:
        """Per operand, the bytes an element its copies read moves from L2: a 32-byte sector
        where its copies through registers are scattered (:attr:`scattered`), its own bytes
        otherwise."""
        return tuple(SECTOR_BYTES if scattered and not (width and p["async_copy"])
                     else self.bytes
                     for width, scattered in zip(self._copy_widths(p),
                                                 self.scattered[free_boxed(self.program, p)],
                                                 strict=True))

    def write_sectors(self, params: Mapping[str, Any]) -> tuple[int, int, int, int]:
        """Requests, sectors, ideal sectors and lines of a candidate's output writes over the
        grid (:meth:`~.tensorcore_model.EnumeratingModel.output_sectors`; a deterministic
        split's into its workspace)."""
        tile = warpgroup_tile(params, self.program)
        parts = self.steps(params, tile)[2]
        return self.output_sectors(tile, self._written_bytes(parts),
                                   free_boxed(self.program, params),
                                   self._write_vector(params, tile, parts))

    def steps(self, p: Mapping[str, Any], tile: Mapping[str, int]) -> tuple[int, int, int]:
        """The reduction's steps of ``tile``, and, split in ``p["split"]`` parts at most, the
        steps each part (a block) sums and the parts (:func:`split_parts`)."""
        box = boxed(self.program, p)
        steps = (math.prod(stepped_k(self.program, self.groups, tile["k"], box).values())
                 // tile["k"] if box else -(-self.extent["k"] // tile["k"]))
        return steps, *split_parts(steps, p.get("split", 1))

    def _registers(self, p: Mapping[str, Any]) -> int:
        return OVERHEAD_REGISTERS + p["frags_m"] * p["tile_n"] // 2

    def _compute(self, p: dict[str, Any], registers: int | None
                 ) -> tuple[dict[str, float], int, float] | None:
        g = self.gpu
        clock = g.clock_ghz * 1e9
        tile = warpgroup_tile(p, self.program)
        producer = bool(p.get("producer"))
        threads = WARPGROUP * (p["warpgroups"] + producer)
        warps = WARPGROUP * p["warpgroups"] // 32
        # setmaxnreg's kernels start every thread at the cap of one block per SM
        entry = (g.register_cap(threads) if producer and consumer_registers(p["warpgroups"])
                 else registers or self._registers(p))
        occupancy = blocks_per_sm(g, threads, entry, shared_bytes(self.program, p))
        if occupancy == 0 or self.rate == 0:
            return None
        tiles = self.tiles(tile, p)
        box = boxed(self.program, p)  # B's copies a vector load and four 16-bit stores
        free = free_boxed(self.program, p)
        # a split reduction's parts are blocks of their own, each summing `chunk` steps
        steps, chunk, parts = self.steps(p, tile)
        blocks = tiles * parts
        shares = waves_by_residency(g, blocks, occupancy)
        quantise = math.ceil(blocks / g.sm_count) * g.sm_count / blocks
        padded = 2.0 * tiles * tile["m"] * tile["n"] * steps * tile["k"]
        copied = {"a": tile["m"] * tile["k"], "b": tile["n"] * tile["k"]}
        asynchronous = p["async_copy"] and any(self.widths[box, free])
        # B staged: by cp.async into its staging tile, then transposed where the register
        # copy stores it (two 8-byte shared loads' values paired in 32-bit stores a line of
        # K apart)
        transposed = staged(self.program, p)
        widths = self._copy_widths(p)
        strided = box and p["async_copy"] and widths[1] is not None
        copies = sum(elements / width * (BOXED_COPY_INSTRUCTIONS
                                         if operand == "b" and strided and not transposed
                                         else ASYNC_COPY_INSTRUCTIONS)
                     if width and p["async_copy"] else elements * COPY_INSTRUCTIONS
                     for (operand, elements), width in zip(copied.items(), widths, strict=True))
        if transposed:
            copies += copied["b"] / TRANSPOSED * TRANSPOSE_INSTRUCTIONS
        if p.get("tma"):  # one thread's warp instructions, no address per thread
            boxes = sum(box.boxes for box in step_boxes(self.program, p))
            copies = ir.WARP * (boxes * TMA_INSTRUCTIONS + TMA_STEP_INSTRUCTIONS
                                + producer * PRODUCER_STEP_INSTRUCTIONS)
        rounded = sum(copied.values()) if self.tf32 and asynchronous else 0
        copies += rounded * ROUND_INSTRUCTIONS
        mmas = p["warpgroups"] * p["frags_m"] * p["frags_k"]  # per block and step
        output = tile["m"] * tile["n"]
        # a crossed C tile's swapped pairs' moves (CROSSED_MOVES)
        moves = CROSSED_MOVES if crossed_words(self.program, free, tile) % 2 else 0
        written = self.write_instructions(p, tile, WARPGROUP * p["warpgroups"], parts)
        instructions = blocks * (chunk * (copies / 32 + mmas * 4 + warps * STEP_INSTRUCTIONS)
                                 + output * (written + moves) / 32)
        # a warp's 16-bit stores of a box's B copied through registers take a wavefront
        # each, 64 bytes of its 128; every other copy's stores (a staged B's transposes'
        # 32-bit ones) take 1 way in the swizzled tiles; a staged B's cp.async stores and
        # the transpose's loads a wavefront per 128 bytes besides
        stored = (copied["a"] + copied["b"] * (
            WAVEFRONT_BYTES // (32 * self.bytes) if strided and not transposed else 1)
            + 2 * copied["b"] * transposed)
        # the output's sectors and lines as the write's addresses take them (read too where
        # the output is, without a split; a deterministic split's workspace instead)
        _, written, _, written_lines = self.output_sectors(
            tile, self._written_bytes(parts), free, self._write_vector(p, tile, parts))
        # the accumulators' stores into the C tile and the write's loads, 1 way each:
        # along N a thread's pairs in one 8-byte store (nvcc's STS.64), a free box's rows
        # crossed so that they stay pairs (:func:`.warpgroup_kernel.crossed`; skewed,
        # tccg_42's whole box took 64 STS beside 32 STS.64, 1.5 times the ideal
        # wavefronts, 2 ways at worst)
        wavefronts = (blocks * (chunk * (stored + 2 * rounded) * self.bytes / WAVEFRONT_BYTES
                                + output * 2 * ACCUMULATOR_BYTES
                                / WAVEFRONT_BYTES)
                      + parts * written_lines * (self.output_accesses if parts == 1 else 1))
        # a staged B's barrier and transposes every step: each thread's in turn, two shared
        # loads its stores read at once (nvcc keeps them in order: the stores may alias the
        # staging tile; the SASS of tccg_28's 128 x 128 tile pairs them straight away)
        staging = transposed * (SYNC_CYCLES + g.shared_latency_cycles
                                * copied["b"] / TRANSPOSED / threads)
        in_flight = p["stages"] - 1 - (p["stages"] >= 3) or 1  # cp.async's S - 2 from 3

        def wave(resident: int) -> float:
            """A wave's cycles where ``resident`` blocks share each SM's tensor cores."""
            mma = 2.0 * output * tile["k"] * resident / (self.rate / g.sm_count / clock)
            if producer and p["stages"] > 1:  # no block barrier a step: the producer
                # refills every stage but the one the MMAs read (the step before's retire
                # as this step's start: wgmma.wait_group 1)
                return g.l2_latency_cycles + chunk * max(
                    g.l2_latency_cycles / (p["stages"] - 1), mma)
            if producer:  # one stage: the copy waits for the MMAs that read it, they for it
                return chunk * (g.l2_latency_cycles + mma)
            if p["stages"] > 1 and asynchronous:  # copies ahead: a barrier a step
                return g.l2_latency_cycles + chunk * (
                    SYNC_CYCLES + staging + max(g.l2_latency_cycles / in_flight, mma))
            # each step copies, waits and multiplies in turn
            return chunk * (2 * SYNC_CYCLES + staging + g.l2_latency_cycles + mma)

        seconds = {
            "mma": padded / self.rate * quantise,
            "issue": instructions * quantise / (g.sm_count * g.schedulers_per_sm) / clock,
            "memory": wavefronts * quantise / g.sm_count / clock,
            "l2": (tiles * steps * sum(
                elements * read for elements, read in zip(copied.values(),
                                                          self._element_bytes(p), strict=True))
                   + self._split_l2(parts * written * SECTOR_BYTES, parts)) / g.l2_bandwidth,
            "dram": (self.compulsory + self._split_dram(parts)) / g.dram_bandwidth,
            "latency": sum(waves * wave(resident) for resident, waves in shares) / clock,
        }
        # the producer's issuing warp beside the consumers' (its other three exit), on the
        # busiest SM; the tensor cores read the operands, not the LSUs
        return seconds, shares[0][0] * (warps + producer), 0.0

    def _because(self, binding: str, seconds: dict[str, float]) -> str:
        g = self.gpu
        reasons = {
            "mma": f"tensor-core throughput binds: {self.flops / 1e9:.3g} GFLOP at "
                   f"{self.rate / 1e12:.0f} TFLOP/s (wgmma's dense peak on {g.name})",
            "issue": "instruction issue binds: the copies beside the MMAs",
            "memory": "load/store units bind: the copies and the write through shared memory",
            "l2": "L2 bandwidth binds: blocks re-read their operand tiles (larger tiles "
                  "reuse more)",
            "dram": f"DRAM bandwidth binds: {self.compulsory / 1e6:.3g} MB at "
                    f"{g.dram_bandwidth / 1e9:.0f} GB/s",
            "latency": "latency binds: each step waits for its copy, a barrier and its MMAs",
        }
        return f"{binding} {seconds[binding] * 1e3:.3g} ms: {reasons[binding]}"
