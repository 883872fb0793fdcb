"""Tensor cores: a block of warps computes a GEMM-shaped tile of the output with fragments.

A contraction ``C[o] = sum_r A[..] * B[..]`` with two input tensors is a batched GEMM once its
indices are grouped, as GETT does: M holds the output indices of the first input, N those of
the second, K the summed indices, and the output indices of both inputs are batch indices with
a block per value (role ``GRID``, as the tiled strategy's unmapped indices). Each group is
linearised, fastest first (``m = a + S_a * b``), so a group of any length is one dimension.

A block of ``warps_m x warps_n`` warps holds a ``BM x BN`` tile of C, each warp
``frags_m x frags_n`` accumulator fragments of the multiply-accumulate shape (16x16x16 for
float16 and bfloat16, 16x16x8 for TF32, 8x8x4 for float64); a step spans ``frags_k`` fragment
k-extents of K, or, where A and B lead with different summed indices, 16 fragments' worth
of a K box (16 values of each of those two: :func:`.tensorcore_tiles.k_box`). The kernel's
statements and schedule (the shared tiles, the write through shared memory, double
buffering, asynchronous copies, split reductions) are built by :mod:`.tensorcore_kernel`;
the tile quantities both use, as the tensor-core model does, are in
:mod:`.tensorcore_tiles`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
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

from .tensorcore_kernel import Builder
from .tensorcore_model import TensorCoreModel
from .tensorcore_tiles import (
    BOX_FRAGMENTS,
    FREE_LAYOUT_HELP,
    FULL_WARPS,
    LANES_M,
    LANES_N,
    SWIZZLED_ROW,
    WARP,
    copy_widths,
    described_gemm,
    each,
    free_boxed,
    free_boxes,
    free_layouts,
    gemm_groups,
    holds_boxes,
    k_box,
    mappings,
    mma_shape,
    operand_rows,
    shared_bytes,
    tile_extents,
)
from .tiling import splittable

WARPS = (1, 2, 4)
FRAGMENTS = (1, 2, 4)
STEPS = (1, 2, 4)  # fragment k-extents per reduction step
SPLITS = (1, 2, 4, 8)
STAGES = (1, 2, 3, 4)  # buffers per operand tile (CUTLASS 2.x's sm_80 GEMMs take 3 to 5)
# Accumulator fragments per warp: each 16x16 float fragment takes 8 registers of each thread,
# so 16 (a 64x64 warp tile, as CUTLASS's GEMMs take) hold 128 of them; the model's register
# count rules out what spills. 3xTF32 holds two per fragment product (its small products sum
# apart): its 4x4 fragments took ptxas's 255 registers and 581 spill loads and stores a step
# (GEMM 4096^3, 2x2 warps, sm_90), its 4x2 174 registers and none.
FRAGMENT_BUDGET = 16


# The most parts a split that fills the SMs may take (filling_splits): twice SPLITS' most.
FILLING_MOST = 16
# What a split given to a kernel may be beyond the searched ones (Parameter.accepts): one
# filling_splits chose for some GPU.
WHOLE_SPLIT = Constraint(f"a whole split from 1 to {FILLING_MOST}", ("split",),
                         lambda p: isinstance(p["split"], int) and 1 <= p["split"] <= FILLING_MOST)


def output_tiles(program: Program, tile: Mapping[str, int]) -> int:
    """The output's tiles of ``tile`` (M and N), times the batch: the blocks of no split."""
    _, _, m, n, _, batch = gemm_groups(program)
    sizes = program.sizes
    return math.prod(-(-math.prod(sizes[i] for i in group) // tile[axis])
                     for axis, group in (("m", m), ("n", n))) * math.prod(sizes[i] for i in batch)


def filling_splits(program: Program, sms: int | None,
                   tile: Callable[[Mapping[str, Any]], Mapping[str, int]],
                   tiled: Mapping[str, Sequence[Any]]) -> tuple[int, ...]:
    """:data:`SPLITS`, and for each output tile the ``tiled`` parameters' values make (their
    ``tile``) whose blocks are fewer than the ``sms``, the most parts that keep its blocks in
    one wave (up to :data:`FILLING_MOST`): powers of two alone left tccg_13 fp16's 9 tiles of
    128 x 128 on 72 of an H100's 132 SMs (split 8), where 14 parts fill 126 (the model:
    0.108 -> 0.0893 ms). Without ``sms`` (no GPU targeted) SPLITS alone: a kernel searched
    for a GPU is generated again from its parameters by :data:`WHOLE_SPLIT`'s rule."""
    if not sms:
        return SPLITS
    tiles = (output_tiles(program, tile(dict(zip(tiled, values, strict=True))))
             for values in itertools.product(*tiled.values()))
    return tuple(sorted({*SPLITS, *(filling_split(n, sms) for n in tiles if n < sms)}))


def split_parameter(program: Program, sms: int | None,
                    tile: Callable[[Mapping[str, Any]], Mapping[str, int]],
                    tiled: Mapping[str, Sequence[Any]], doc: str) -> Parameter:
    """The ``split`` of a GEMM-shaped mapping (this one's and the warpgroup one's): 1 where
    the program cannot split; else :func:`filling_splits`, and any whole split a kernel is
    given (:data:`WHOLE_SPLIT`)."""
    if not splittable(program):
        return Parameter("split", (1,), doc, priority=Priority.STEP)
    return Parameter("split", filling_splits(program, sms, tile, tiled), doc,
                     priority=Priority.STEP, accepts=WHOLE_SPLIT)


def filling_split(tiles: int, sms: int) -> int:
    """The most parts (up to :data:`FILLING_MOST`) that keep ``tiles`` blocks each in one
    wave of ``sms`` blocks."""
    return min(sms // tiles, FILLING_MOST)


def split_rules(program: Program, sms: int | None,
                tile: Callable[[Mapping[str, Any]], Mapping[str, int]], tiled: Sequence[str],
                step: Callable[[Mapping[str, Any]], int]) -> list[Constraint]:
    """The constraints of a split reduction in a GEMM-shaped mapping (this one's and the
    warpgroup one's): as the tiled strategy's split, only where the output's ``tile`` (M and
    N, from the ``tiled`` parameters) gives fewer than two blocks per SM (else it only adds
    the parts' traffic), one of :data:`SPLITS` or the tile's :func:`filling_split` (so
    that a tile's space grows by one split alone), and at least one ``step`` of K (from
    ``frags_k``) per part."""
    summed = math.prod(program.sizes[i] for i in gemm_groups(program)[4])
    rules = []
    if sms:

        def few_tiles(p: Mapping[str, Any]) -> bool:
            if p["split"] == 1:
                return True
            tiles = output_tiles(program, tile(p))
            return tiles < 2 * sms and (p["split"] in SPLITS
                                        or tiles < sms and p["split"] == filling_split(tiles, sms))

        rules.append(Constraint(f"a split only where the tiles give fewer than {2 * sms} "
                                f"blocks, one of {SPLITS} or the one that fills the {sms} SMs",
                                (*tiled, "split"), few_tiles))
    rules.append(Constraint("at least one step per part of a split reduction",
                            ("frags_k", "split"),
                            lambda p: p["split"] <= -(-summed // step(p))))
    return rules


@register
class TensorCore(Strategy):
    name = "tensorcore"
    description = ("GEMM-shaped tiles on tensor cores: warps of MMA fragments (WMMA, or "
                   "mma.sync fed by ldmatrix), operands staged in padded or swizzled 2-D "
                   "shared tiles, accumulators written through shared memory (float16, "
                   "bfloat16, float64, float32 with precision tf32/3xtf32)")
    offered = True  # ranked beside the default strategy; its space is a few hundred points

    def applies(self, program: Program, gpu: Any) -> bool:
        """Whether it computes ``program`` and ``gpu`` has tensor cores for its dtype and
        precision."""
        return (program.sizes is not None and mma_shape(program) is not None
                and gemm_groups(program) is not None
                and gpu.mma_flops(program.dtype, program.precision) > 0)

    def model(self, program: Program, gpu: Any, values: Mapping[str, tuple] | None = None
              ) -> TensorCoreModel:
        """Its own model (:mod:`.tensorcore_model`): the resources seen from warps of MMAs."""
        return TensorCoreModel(program, gpu, self, values)

    def space(self, program: Program, before: Sequence[Strategy] = ()) -> ParamSpace:
        shape, found = mma_shape(program), gemm_groups(program)
        if shape is None:
            raise StrategyError(f"tensor cores do not compute {program.dtype} with precision="
                                f"{program.precision!r}: use float16, bfloat16, float64, or "
                                "float32 with precision='tf32' or '3xtf32'")
        if found is None:
            raise StrategyError(f"{program.contraction.source!r} is not one product of two "
                                "tensors with fixed sizes, which tensor cores compute as a "
                                "(batched) GEMM; use 'tiled+staged'")
        full = free_boxes(program).get("full")  # its group's tiles take FULL_WARPS warps too
        warps = {axis: tuple(sorted((*WARPS, FULL_WARPS))) if full and full.axis == axis
                 else WARPS for axis in "mn"}
        parameters = (
            Parameter("warps_m", warps["m"], "warps per block along M", priority=Priority.TILES),
            Parameter("warps_n", warps["n"], "warps per block along N", priority=Priority.TILES),
            Parameter("frags_m", FRAGMENTS, "fragments per warp along M",
                      priority=Priority.TILES),
            Parameter("frags_n", FRAGMENTS, "fragments per warp along N",
                      priority=Priority.TILES),
            Parameter("frags_k", STEPS + ((BOX_FRAGMENTS,) if k_box(program) else ()),
                      f"fragment k-extents per reduction step; {BOX_FRAGMENTS} (where A and B "
                      "lead with different summed indices) a K box: 16 values of each of "
                      "those two a step, so that both are read in whole sectors",
                      priority=Priority.STEP),
            Parameter("stages", STAGES, "buffers per operand tile, taken in turn by the "
                      "steps: from two, one barrier per step, and asynchronous copies issued "
                      "stages - 1 steps ahead (cp.async.wait_group stages - 2)",
                      priority=Priority.BUFFERS),
            split_parameter(
                program, self.limits.sm_count, lambda p: tile_extents({**p, "frags_k": 1}, shape),
                {"warps_m": warps["m"], "warps_n": warps["n"], "frags_m": FRAGMENTS,
                 "frags_n": FRAGMENTS},
                "blocks sharing each output tile, each summing a part of the steps (added into "
                "the output atomically; stored in a float32 workspace and added in order in a "
                "deterministic program or into float16/bfloat16)"),
            Parameter("mapping", mappings(program, self.limits.async_copies),
                      "how CUDA computes the fragments: nvcuda::wmma, or inline PTX "
                      "mma.sync (sm_80+): m16n8k16 fed by ldmatrix.x4 for float16 and bfloat16, "
                      "m16n8k8 fed by shared loads rounded by cvt.rna for TF32",
                      priority=Priority.CODE),
            Parameter("shared_layout", ("pad", "swizzle") if "mma" in mappings(
                program, self.limits.async_copies) and program.dtype != "float32" else ("pad",),
                      "the operand tiles' rows padded, or unpadded with their 16-byte chunks "
                      "XOR'd by the row (mma mapping only: WMMA's loads take a pitch), each "
                      "free of bank conflicts", priority=Priority.BUFFERS),
            Parameter("free_layout", free_layouts(program), FREE_LAYOUT_HELP,
                      priority=Priority.MAPPING),
            Parameter("async_copy", (True, False) if any(
                any(copy_widths(program, found, free=free).values())
                for free in map(free_boxes(program).get, free_layouts(program))) else (False,),
                      "operand tiles copied by cp.async (sm_80+), each where its layout allows, "
                      "not through registers; "
                      "in two or more stages, a step's copies are issued before earlier "
                      "steps' MMAs", priority=Priority.BUFFERS))
        return ParamSpace(parameters, tuple(self._rules(program, shape, found)))

    def _rules(self, program: Program, shape: tuple[int, int, int],
               found: tuple[tuple[str, ...], ...]) -> list[Constraint]:
        sizes = program.sizes
        _, _, m, n, k, _ = found
        extent = {axis: math.prod(sizes[i] for i in group)
                  for axis, group in zip("mnk", (m, n, k), strict=True)}
        budget = self.limits.dynamic_shared_per_block  # the printer goes dynamic past 48 KB
        pieces = 2 if program.precision == dtypes.TF32X3 else 1  # accumulators per product

        def covers(axis: str, p: Mapping[str, Any]) -> bool:
            """No more tile than the extent needs: one fragment, or the tile without its
            last fragment still short of it."""
            tile = tile_extents(p, shape)[axis]
            step = shape["mnk".index(axis)]
            return tile <= step or tile - step < extent[axis]

        rules = [Constraint("swizzled tiles need the mma mapping (ldmatrix takes an address "
                            "per lane, WMMA a pitch)", ("shared_layout", "mapping"),
                            lambda p: p["shared_layout"] == "pad" or p["mapping"] == "mma"),
                 Constraint(f"swizzled tiles have rows of {SWIZZLED_ROW} elements or more, "
                            "a power of two", ("shared_layout", "warps_m", "warps_n", "frags_m",
                                               "frags_n", "frags_k"),
                            lambda p: p["shared_layout"] == "pad"
                            or all(r >= SWIZZLED_ROW and r & (r - 1) == 0
                                   for r in operand_rows(program, p))),
                 Constraint(f"{FULL_WARPS} warps along a group only for a 'full' free box",
                            ("warps_m", "warps_n", "free_layout"),
                            lambda p: p["free_layout"] == "full"
                            or FULL_WARPS not in (p["warps_m"], p["warps_n"])),
                 Constraint("a free box's tiles hold whole boxes",
                            ("warps_m", "warps_n", "frags_m", "frags_n", "free_layout"),
                            lambda p: holds_boxes(free_boxed(program, p),
                                                  tile_extents({**p, "frags_k": 1}, shape))),
                 Constraint("more than two stages need asynchronous copies (a copy through "
                            "registers is not in flight beside the MMAs)",
                            ("stages", "async_copy"),
                            lambda p: p["stages"] <= 2 or p["async_copy"])]
        if not self.limits.async_copies:
            rules.append(Constraint("asynchronous copies need compute capability 8.0 "
                                    "(cp.async)", ("async_copy",), lambda p: not p["async_copy"]))
        rules += split_rules(program, self.limits.sm_count,
                             lambda p: tile_extents({**p, "frags_k": 1}, shape),
                             ("warps_m", "warps_n", "frags_m", "frags_n"),
                             lambda p: tile_extents({"warps_m": 1, "warps_n": 1, "frags_m": 1,
                                                     "frags_n": 1, **p}, shape)["k"])
        return rules + [
            Constraint(f"at most {self.limits.threads_per_block} threads per block",
                       ("warps_m", "warps_n"),
                       lambda p: WARP * p["warps_m"] * p["warps_n"]
                       <= self.limits.threads_per_block),
            Constraint(f"at most {FRAGMENT_BUDGET} accumulator fragments per warp",
                       ("frags_m", "frags_n"),
                       lambda p: pieces * p["frags_m"] * p["frags_n"] <= FRAGMENT_BUDGET),
            Constraint("the M tile is no larger than M needs", ("warps_m", "frags_m"),
                       lambda p: covers("m", {**p, "warps_n": 1, "frags_n": 1, "frags_k": 1})),
            Constraint("the N tile is no larger than N needs", ("warps_n", "frags_n"),
                       lambda p: covers("n", {**p, "warps_m": 1, "frags_m": 1, "frags_k": 1})),
            Constraint("the step is no longer than K needs", ("frags_k",),
                       lambda p: covers("k", {"warps_m": 1, "warps_n": 1, "frags_m": 1,
                                              "frags_n": 1, **p})),
            Constraint(f"shared tiles fit in {budget} bytes per block",
                       ("warps_m", "warps_n", "frags_m", "frags_n", "frags_k", "stages",
                        "shared_layout", "free_layout", "mapping"),
                       lambda p: shared_bytes(program, p) <= budget),
        ]

    def describe(self, program: Program, choices: Mapping[str, tuple]) -> dict[str, tuple]:
        """The kernel in the geometry's quantities, as every consumer of a mapping reads it
        (the benchmark's verification sizes, the tensor-core model, the tests of the launch).

        N's group is on x and M's on y, as the grid's axes are (an empty group goes last);
        batch indices have a block per value. A warp has no thread tile of its own (WMMA
        leaves which lane holds which accumulator unspecified), so ``block_*`` and ``reg_*``
        split each warp's 32 lanes as mma.sync's accumulator layout does (8 lanes along M,
        4 along N): what consumers need holds exactly, ``block_x * reg_x`` is the N tile,
        ``block_y * reg_y`` the M tile, the threads are ``32 * warps`` (the launch puts them
        all on x) and ``reg_x * reg_y`` the accumulator values each holds. ``assign_*`` has
        no meaning for fragments and stays cyclic, as the write through the shared C tile
        stores (consecutive threads, consecutive elements). ``step`` is BK values of the
        linearised K, ``split`` as the tiled strategy's (:func:`split_parts` of the steps
        sharing a tile), ``stage`` both operands, ``double_buffer`` whether the tiles have
        more than one stage, and ``shared`` the bytes of the A, B and C tiles; ``pad`` stays
        neutral: each tile's rows are padded by their own amount
        (:func:`.tensorcore_tiles.operand_pads`), which one quantity cannot say; the model
        reads ``stages`` from the parameters, as it reads ``async_copy``."""
        fm, fn, fk = mma_shape(program)
        along = {"n": (each(choices, lambda w: LANES_N * w, "warps_n"),
                       each(choices, lambda f: f * fn // LANES_N, "frags_n")),
                 "m": (each(choices, lambda w: LANES_M * w, "warps_m"),
                       each(choices, lambda f: f * fm // LANES_M, "frags_m"))}
        tiles = ("warps_m", "warps_n", "frags_m", "frags_n", "frags_k", "stages",
                 "shared_layout", "free_layout", "mapping")
        return described_gemm(program, choices, along,
                              each(choices, lambda f: f * fk, "frags_k"), choices["split"],
                              tiles, shared_bytes)

    def defaults(self, program: Program, before: Sequence[Strategy] = ()) -> dict[str, Any]:
        space = self.space(program, before)
        preferred = {"warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 2, "frags_k": 2,
                     "split": 1, "stages": 1, "async_copy": True, "mapping": "wmma",
                     "shared_layout": "pad", "free_layout": "group"}
        chosen = space.complete({}, preferred)
        if chosen is None:
            raise StrategyError(f"no tensor-core tile fits {program.contraction.source!r}")
        return chosen

    def transform(self, scheduled: Scheduled, params: Mapping[str, Any]) -> Scheduled:
        return Builder(scheduled.program, params).run()

