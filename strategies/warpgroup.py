"""Hopper's warpgroup tensor cores: a block of one or two warpgroups computes a GEMM-shaped
tile of the output with ``wgmma.mma_async`` (sm_90a), its operands read from shared memory
through matrix descriptors.

The contraction is grouped into a batched GEMM as the tensor-core strategy groups it
(:mod:`.tensorcore`); a block of ``warpgroups`` warpgroups (128 threads each) holds a
``BM x BN`` tile of C, ``BM = 64 warpgroups frags_m`` and ``BN = tile_n``, each warpgroup
``frags_m`` accumulators of 64 x BN in registers. The kernel is built by
:mod:`.warpgroup_kernel`. float16 and bfloat16 inputs (m64nNk16) and float32 with precision
TF32 (m64nNk8, its operands copied by cp.async and rounded in place in shared memory, or
rounded as they are copied through registers), accumulated in float32.

Operand tiles are held in the widest of wgmma's 128-, 64- and 32-byte swizzles that their
lines fill (see :mod:`.warpgroup_kernel`): ``Kernel.counters()`` counts 1 way on their
shared stores, where unswizzled core matrices took up to 8. A K box's B, which no
cp.async can store transposed, goes through registers or (``staged_b``) by cp.async into a
staging tile and on by a transpose in shared memory. With ``tma`` the tensor memory
accelerator moves the tiles instead, one thread's bulk tensor copies per step completing
on an mbarrier per stage (:mod:`.warpgroup_tma`). A reduction splits over blocks
(``split``) as the tensor-core mapping's does, where the output's tiles are too few to
fill the GPU. With ``producer`` (beside ``tma``) a warpgroup of its own issues the bulk
copies on full and empty mbarriers while the tile's warpgroups only multiply
(:mod:`.warpgroup_roles`). A search
of the default strategy ranks it wherever the target has wgmma (``gpu="H100"`` or ``"H200"``,
never ``"A100"``) and the dtype and precision allow; its kernels alone are built for sm_90a
(:mod:`treduda.codegen.targets`), every other kernel for sm_90. Its model is
:mod:`treduda.strategies.warpgroup_model`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from treduda.errors import StrategyError
from treduda.frontend import dtypes
from treduda.polyhedral.lower import Program
from treduda.polyhedral.strategy import (
    Constraint,
    Parameter,
    ParamSpace,
    Priority,
    Scheduled,
    Strategy,
    register,
)

from .tensorcore import split_parameter, split_rules
from .tensorcore_model import OVERHEAD_REGISTERS
from .tensorcore_tiles import (
    BOX_FRAGMENTS,
    FREE_LAYOUT_HELP,
    LANES_M,
    LANES_N,
    described_gemm,
    each,
    free_boxed,
    free_layouts,
    gemm_groups,
    holds_boxes,
    k_box,
)
from .warpgroup_kernel import (
    WARPGROUP_M,
    WarpgroupBuilder,
    shared_bytes,
    staged_width,
    tma_fits,
    warpgroup_tile,
    wgmma_k,
)
from .warpgroup_model import WarpgroupModel
from .warpgroup_roles import ProducerBuilder, consumer_registers
from .warpgroup_tma import tma_reason

DTYPES = ("float16", "bfloat16")
WARPGROUPS = (1, 2)  # per block along M
WARPGROUP_FRAGMENTS = (1, 2)  # 64-row accumulators per warpgroup
TILE_N = (32, 64, 128, 192, 256)  # wgmma's n: a multiple of 8 up to 256 ("wgmma.mma_async")
WIDE_N = 192  # two 64 x 192 accumulators a warpgroup: only in a producer's consumers
STAGES = (1, 2, 3, 4)
# Accumulator registers of a thread: frags_m BN / 2 floats. 128 (a 64 x 256 or two 64 x 128
# tiles, as CUTLASS's Hopper GEMMs take per warpgroup) leave the rest of 255 for addresses.
REGISTER_BUDGET = 128
WARPS_PER_WARPGROUP = 4


def accumulator_budget(params: Mapping[str, Any]) -> int:
    """A thread's accumulator registers: :data:`REGISTER_BUDGET`, or with a producer
    warpgroup whose consumers take more by setmaxnreg, those less the tensor-core model's
    other registers (232 - 32 for two consumer warpgroups)."""
    rebalanced = consumer_registers(params["warpgroups"]) if params["producer"] else None
    return rebalanced - OVERHEAD_REGISTERS if rebalanced else REGISTER_BUDGET


@register
class Warpgroup(Strategy):
    name = "warpgroup"
    description = ("GEMM-shaped tiles on Hopper's warpgroup tensor cores (wgmma, sm_90a): "
                   "operands in shared memory read through matrix descriptors, accumulators "
                   "in registers written through shared memory (float16, bfloat16, float32 "
                   "with precision tf32)")

    offered = True  # ranked beside the default strategy; its space is a few hundred points

    def applies(self, program: Program, gpu: Any) -> bool:
        """Whether ``gpu`` has wgmma and it computes ``program``'s dtype and precision as
        one (batched) GEMM of fixed sizes."""
        return (gpu.warpgroup_mma and program.sizes is not None
                and (program.dtype in DTYPES or program.dtype == "float32"
                     and program.precision == dtypes.TF32)
                and gemm_groups(program) is not None)

    def model(self, program: Program, gpu: Any, values: Mapping[str, tuple] | None = None
              ) -> WarpgroupModel:
        """Its own model (:mod:`.warpgroup_model`): the tensor cores fed by descriptors."""
        return WarpgroupModel(program, gpu, self, values)

    def space(self, program: Program, before: Sequence[Strategy] = ()) -> ParamSpace:
        if not self.limits.warpgroup_mma:
            raise StrategyError("warpgroup MMAs (wgmma) need a compute capability 9.0 GPU "
                                "(H100, H200) built for sm_90a; use 'tensorcore'")
        if program.dtype not in DTYPES and not (program.dtype == "float32"
                                                and program.precision == dtypes.TF32):
            raise StrategyError(f"the warpgroup mapping computes {', '.join(DTYPES)} and "
                                f"float32 with precision='tf32', not {program.dtype} with "
                                f"precision={program.precision!r}; use 'tensorcore'")
        found = gemm_groups(program)
        if found is None:
            raise StrategyError(f"{program.contraction.source!r} is not one product of two "
                                "tensors with fixed sizes, which warpgroup MMAs compute as a "
                                "(batched) GEMM; use 'tiled+staged'")
        parameters = (
            Parameter("warpgroups", WARPGROUPS, "warpgroups per block along M",
                      priority=Priority.TILES),
            Parameter("frags_m", WARPGROUP_FRAGMENTS, "64-row accumulators per warpgroup",
                      priority=Priority.TILES),
            Parameter("tile_n", TILE_N, "N of the block's tile, one wgmma's n",
                      priority=Priority.TILES),
            Parameter("frags_k", (1, 2, 4) + ((BOX_FRAGMENTS,) if k_box(program) else ()),
                      f"wgmma k-extents per reduction step; {BOX_FRAGMENTS} (where A and B "
                      "lead with different summed indices) a K box, as the tensor-core "
                      "mapping's", priority=Priority.STEP),
            Parameter("stages", STAGES, "buffers per operand tile, taken in turn by the "
                      "steps (as the tensor-core mapping's)", priority=Priority.BUFFERS),
            Parameter("free_layout", free_layouts(program), FREE_LAYOUT_HELP,
                      priority=Priority.MAPPING),
            Parameter("async_copy", (True, False),
                      "operand tiles copied by cp.async where their layout allows (TF32's "
                      "then rounded in place)", priority=Priority.BUFFERS),
            split_parameter(
                program, self.limits.sm_count,
                lambda p: warpgroup_tile({**p, "frags_k": 1}, program),
                {"warpgroups": WARPGROUPS, "frags_m": WARPGROUP_FRAGMENTS, "tile_n": TILE_N},
                "blocks sharing each output tile, each summing a part of the steps (added into "
                "the output atomically; stored in a float32 workspace and added in order in a "
                "deterministic program or into float16/bfloat16), as the tensor-core mapping's"),
            Parameter("staged_b", (False, True) if k_box(program) and staged_width(program)
                      else (False,),
                      "a K box's B copied by cp.async in its memory order into a staging "
                      "tile, then transposed into the MMA's tile in shared memory (else "
                      "through registers)", priority=Priority.BUFFERS),
            Parameter("tma", (False, True) if tma_reason(program) is None else (False,),
                      "operand tiles moved by the tensor memory accelerator (bulk tensor "
                      "copies of one thread, on an mbarrier per stage) instead of cp.async",
                      priority=Priority.BUFFERS),
            Parameter("producer", (False, True) if tma_reason(program) is None else (False,),
                      "warp specialisation: a producer warpgroup issues the bulk copies on "
                      "full and empty mbarriers per stage while the warpgroups of the tile "
                      "only multiply (:mod:`.warpgroup_roles`)", priority=Priority.BUFFERS))
        return ParamSpace(parameters, tuple(self._rules(program, found)))

    def _rules(self, program: Program, found: tuple[tuple[str, ...], ...]
               ) -> list[Constraint]:
        sizes = program.sizes
        _, _, m, n, _, _ = found
        extent = {"m": math.prod(sizes[i] for i in m), "n": math.prod(sizes[i] for i in n)}
        budget = self.limits.dynamic_shared_per_block
        return [
            *split_rules(program, self.limits.sm_count,
                         lambda p: warpgroup_tile({**p, "frags_k": 1}, program),
                         ("warpgroups", "frags_m", "tile_n"),
                         lambda p: warpgroup_tile({"warpgroups": 1, "frags_m": 1, "tile_n": 1,
                                                   **p}, program)["k"]),
            Constraint("more than two stages need asynchronous copies", ("stages", "async_copy"),
                       lambda p: p["stages"] <= 2 or p["async_copy"]),
            Constraint(f"at most {REGISTER_BUDGET} accumulator registers per thread (or what "
                       "a producer's consumers take by setmaxnreg, less the other registers)",
                       ("frags_m", "tile_n", "producer", "warpgroups"),
                       lambda p: p["frags_m"] * p["tile_n"] // 2 <= accumulator_budget(p)),
            Constraint(f"a tile of {WIDE_N} columns takes the registers a producer's consumers "
                       "gain", ("tile_n", "producer"),
                       lambda p: p["tile_n"] != WIDE_N or p["producer"]),
            Constraint("the M tile is no larger than M needs", ("warpgroups", "frags_m"),
                       lambda p: p["warpgroups"] * p["frags_m"] == 1
                       or 64 * (p["warpgroups"] * p["frags_m"] - 1) < extent["m"]),
            Constraint("the N tile is no larger than N needs", ("tile_n",),
                       lambda p: p["tile_n"] == TILE_N[0] or p["tile_n"] // 2 < extent["n"]),
            Constraint("a free box's tiles hold whole boxes",
                       ("warpgroups", "frags_m", "tile_n", "free_layout"),
                       lambda p: holds_boxes(free_boxed(program, p),
                                             warpgroup_tile({**p, "frags_k": 1}, program))),
            Constraint("a staged B is a K box's, copied by cp.async",
                       ("staged_b", "frags_k", "async_copy"),
                       lambda p: not p["staged_b"] or (p["async_copy"]
                                                       and p["frags_k"] == BOX_FRAGMENTS)),
            Constraint("bulk tensor copies replace cp.async, in the tiles of group layouts "
                       "whose steps span one box",
                       ("tma", "async_copy", "staged_b", "free_layout", "frags_k",
                        "warpgroups", "frags_m", "tile_n"),
                       lambda p: not p["tma"] or (p["async_copy"] and not p["staged_b"]
                                                  and p["free_layout"] == "group"
                                                  and tma_fits(program, p))),
            Constraint("a producer warpgroup issues bulk copies", ("producer", "tma"),
                       lambda p: not p["producer"] or p["tma"]),
            Constraint(f"shared tiles fit in {budget} bytes per block",
                       ("warpgroups", "frags_m", "tile_n", "frags_k", "stages", "free_layout",
                        "staged_b", "tma"),
                       lambda p: shared_bytes(program, p) <= budget),
        ]

    def describe(self, program: Program, choices: Mapping[str, tuple]) -> dict[str, tuple]:
        """The kernel in the geometry's quantities, for the consumers that read a mapping so
        (the benchmark's verification sizes); its own model reads the parameters themselves.
        As the tensor-core mapping describes itself (N's group on x, M's on y): a warpgroup's
        128 threads split as wgmma's accumulator layout does (each warp 16 rows of the 64, a
        warp's lanes 8 along M and 4 along N: "wgmma.mma_async" register fragments), so
        ``block_y`` is 32 per warpgroup and ``block_x`` 4, and ``reg_*`` fill the tile; the
        step is ``frags_k`` wgmma k-extents, ``split`` as the tensor-core mapping's."""
        k = wgmma_k(program)
        lanes_m = LANES_M * WARPS_PER_WARPGROUP  # a warpgroup's threads along M
        along = {"n": ((LANES_N,), each(choices, lambda t: t // LANES_N, "tile_n")),
                 "m": (each(choices, lambda w: lanes_m * w, "warpgroups"),
                       each(choices, lambda f: WARPGROUP_M * f // lanes_m, "frags_m"))}
        return described_gemm(program, choices, along, each(choices, lambda f: f * k, "frags_k"),
                              choices["split"], ("warpgroups", "frags_m", "tile_n", "frags_k",
                                                 "stages", "free_layout", "staged_b"),
                              shared_bytes)

    def defaults(self, program: Program, before: Sequence[Strategy] = ()) -> dict[str, Any]:
        space = self.space(program, before)
        # two warpgroups of 64 x 128 and three stages, as CUTLASS's Hopper GEMMs tile
        # (128 x 128 x 64 for 16-bit inputs); smaller where the extents are
        preferred = {"warpgroups": 2, "frags_m": 1, "tile_n": 128, "frags_k": 4, "stages": 3,
                     "async_copy": True, "free_layout": "group", "staged_b": False,
                     "tma": False, "producer": False, "split": 1}
        chosen = space.complete({}, preferred)
        if chosen is None:
            raise StrategyError(f"no warpgroup tile fits {program.contraction.source!r}")
        return chosen

    def transform(self, scheduled: Scheduled, params: Mapping[str, Any]) -> Scheduled:
        builder = ProducerBuilder if params.get("producer") else WarpgroupBuilder
        return builder(scheduled.program, params).run()
