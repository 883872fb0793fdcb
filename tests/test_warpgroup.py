"""The warpgroup mapping (Hopper's wgmma): its OpenCL twin checked against numpy.einsum on
PoCL (partial tiles, both layouts, alpha/beta, +=, a TCCG row), the emulator's run of its
asynchrony (no hazard, and each of the hazards a removed guard leaves), nvcc's sm_90a build
with HGMMA in the main loop, and no offer of it where the GPU has no wgmma."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from conftest import MMA_CASES, bound_paths_hold, formulas_name_their_relations, in_layout
from treduda.strategies.tensorcore_kernel import B_TILE
from treduda.strategies.tensorcore_tiles import BOX_FRAGMENTS, k_box
from treduda.strategies.warpgroup_kernel import B_STAGED, WarpgroupBuilder, shared_bytes

import treduda
from treduda.bundle import load as load_bundle
from treduda.codegen import ir, serial
from treduda.codegen.targets import cuda_target
from treduda.errors import CompileError, StrategyError
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import get
from treduda.run.counters import ASYNC_COPY
from treduda.run.nvcc import compile_cuda, compile_cuda_batch, nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load, scaled
from treduda.tuning.budgets import DEFAULT_BUDGET
from treduda.tuning.search import Searcher, offered, search_program

GEMM = "C[i,j] = A[i,k] * B[k,j]"
PARTIAL = {"i": 70, "j": 50, "k": 90}  # no multiple of 64, 16 or 32
SMALL = {"warpgroups": 1, "frags_m": 1, "tile_n": 32, "frags_k": 1, "stages": 2,
         "async_copy": True}
TWO_GROUPS = {"warpgroups": 2, "frags_m": 1, "tile_n": 64, "frags_k": 2, "stages": 3,
              "async_copy": True}


def _compile(expression: str, sizes: dict, dtype: str = "float16", layout: str = "C",
             params: dict | None = SMALL) -> treduda.Kernel:
    """The warpgroup kernel with ``params`` (None: the strategy's defaults)."""
    precision = "tf32" if dtype == "float32" else "highest"
    return treduda.compile(expression, sizes, dtype=dtype, layout=layout, precision=precision,
                           strategy="warpgroup", params=params)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_gemm_matches_einsum(dtype, layout):
    assert _compile(GEMM, PARTIAL, dtype, layout).verify().ok


MATRIX = {"i": 33, "j": 40, "k": 41}


@pytest.mark.parametrize(("expression", "sizes"), [
    ("C[i,j] += alpha*A[i,k]*B[k,j]", MATRIX),
    ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", MATRIX),
    ("C[i,j] = A[k,i]*B[j,k]", MATRIX),  # both operands transposed: A M-major, B K-major
    # tccg_01, scaled down: M a group of two indices
    ("C[a,b,c]=A[b,d,a]*B[d,c]", {"a": 9, "b": 8, "c": 36, "d": 30}),
])
def test_updates_layouts_and_groups_match_einsum(expression, sizes):
    assert _compile(expression, sizes).verify().ok


CASES = {name: MMA_CASES[name]
         for name in ("tccg_03", "tccg_05", "tccg_09", "tccg_10", "tccg_20", "batched")}


def test_grouped_indices_match_einsum():
    expression, sizes = CASES["tccg_20"]
    assert _compile(expression, sizes).verify().ok


@pytest.mark.matrix
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("case", CASES)
def test_contractions_match_einsum(case, layout):
    expression, sizes = CASES[case]
    assert _compile(expression, sizes, layout=layout).verify().ok


def test_two_warpgroups_in_three_stages_match_einsum_and_have_no_hazard():
    kernel = _compile(GEMM, {"i": 150, "j": 70, "k": 100}, params=TWO_GROUPS)
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


@pytest.mark.parametrize(("sizes", "layout", "dtype", "stored"), [
    ({"i": 70, "j": 24, "k": 40}, "C", "float16", "uint4"),  # 8 halves, M and N partial
    ({"i": 72, "j": 21, "k": 40}, "F", "float16", "uint4"),  # column-major: along M
    ({"i": 70, "j": 20, "k": 40}, "C", "float32", "float4"),
    ({"i": 68, "j": 21, "k": 40}, "F", "float32", "float4"),
    ({"i": 70, "j": 21, "k": 40}, "C", "float16", None),  # odd: a value at a time
])
def test_the_write_stores_vectors_and_matches_einsum(sizes, layout, dtype, stored):
    """The write takes a vector of the output's fastest index a thread, as the mma.sync
    write does (:func:`.tensorcore_tiles.write_vector`): one 16-byte store (halves packed
    in pairs) from one or two 16-byte loads of the C tile, whose rows wgmma's accumulator
    pairs filled; sizes not multiples of the vector or of the tile, on PoCL and on the
    emulator (every access checked, hazards included)."""
    kernel = _compile(GEMM, sizes, dtype, layout)
    source = kernel.cuda_source
    write = source[source.rindex("__syncthreads();"):]
    stores = set(re.findall(r"\*\((\w+) \*\)&C\[", write))
    assert stores == ({stored} if stored else set())
    assert ("const float4" in write) == bool(stored)  # the C tile's loads, merged
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


def test_the_model_and_the_estimate_count_the_vector_write():
    """GEMM fp16's 256 x 192 tile (the H100 pick's): the write's count per element
    (:meth:`Builder.write_instructions`) falls with the vector of 8, and the model the
    search reads gives the kernel's estimate."""

    class Scalar(WarpgroupBuilder):
        vector_write = False

    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, "C", "float16")
    params = {"warpgroups": 2, "frags_m": 2, "tile_n": 192, "frags_k": 4, "stages": 2,
              "async_copy": True, "split": 1, "staged_b": False, "tma": True,
              "producer": True, "free_layout": "group"}
    vector = WarpgroupBuilder(program, params)
    assert vector.write_statement().vector == 8
    assert vector.write_instructions() < Scalar(program, params).write_instructions() / 2
    kernel = _compile(GEMM, program.sizes, params=params)
    model = model_of(kernel.program, gpu("H100"), "warpgroup")
    # 16 x 22 tiles of 256 x 192, a warp's request 32 vectors of 8
    assert model.write_sectors(params)[0] == 16 * 22 * 256 * 192 // (32 * 8)
    assert kernel.estimate(use_nvcc=False).seconds == model.estimate(params).seconds


@pytest.mark.matrix
@pytest.mark.parametrize("tile_n", [128, 256])
def test_wide_tiles_match_einsum(tile_n):
    params = {**TWO_GROUPS, "tile_n": tile_n, "frags_m": 256 // tile_n}
    assert _compile(GEMM, {"i": 200, "j": 300, "k": 72}, params=params).verify().ok


@pytest.mark.parametrize(("expression", "dtype", "layout", "params"), [
    # TF32 into a float32 output: each part adds its tile atomically; three stages keep a
    # step's MMAs in flight
    ("C[i,j] += alpha*A[i,k]*B[k,j]", "float32", "F", {"stages": 3}),
    # bfloat16, both operands transposed: a deterministic split's parts stored in a float32
    # workspace, added in order by a second kernel
    ("C[i,j] = alpha*A[k,i]*B[j,k]", "bfloat16", "C", {"tile_n": 64}),
    pytest.param("C[i,j] -= A[i,k]*B[k,j]", "float16", "C", {}, marks=pytest.mark.matrix),
], ids=["tf32_update", "bf16_deterministic", "fp16_deterministic"])
def test_split_reductions_match_einsum_without_hazards(expression, dtype, layout, params):
    """A reduction split over blocks as the tensor-core mapping splits it: each block sums a
    part of the steps (partial tiles and a short last part) and adds its tile into the
    output (zeroed first for ``=``), or, into 16-bit outputs, which have no atomic addition
    in OpenCL, stores it into the workspace of a deterministic program."""
    deterministic = dtype != "float32"
    kernel = treduda.compile(expression, {"i": 70, "j": 50, "k": 130}, dtype=dtype,
                             layout=layout, strategy="warpgroup", deterministic=deterministic,
                             precision="tf32" if dtype == "float32" else "highest",
                             params={**SMALL, **params, "split": 4})
    # 130 values of k: 17 steps of 8 (TF32) in parts of 5, 5, 5 and 2; 9 steps of 16
    # (16-bit) in 3 parts of 3, where 4 were asked for
    tiles = 2 * -(-50 // kernel.params["tile_n"])
    assert math.prod(kernel.grid) == tiles * (4 if dtype == "float32" else 3)
    assert ("td_parts" in kernel.cuda_source) == deterministic
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


@pytest.mark.parametrize(("dtype", "precision", "deterministic"), [
    ("float32", "tf32", False), ("float16", "highest", False)])
def test_the_h100_search_splits_a_small_output_with_a_long_reduction(dtype, precision,
                                                                    deterministic):
    """GEMM 256 x 256 x 65536: 16 tiles of 64 x 64 leave most of 132 SMs idle, so the
    warpgroup search splits the reduction, rated well under the best unsplit kernel; the
    split is priced as the tensor-core model prices it (the output zeroed for the atomic
    additions, or each part's float32 workspace written back); branch and bound finds the
    exhaustive enumeration's best. GEMM 4096^3 fills the GPU and is never split."""
    program = plan(GEMM, {"i": 256, "j": 256, "k": 65536}, "F", dtype, precision=precision,
                   deterministic=deterministic)
    searcher = Searcher(program, "H100", "warpgroup")
    best = searcher.branch_and_bound().best
    assert best.params["split"] > 1
    assert best.prediction.seconds == searcher.exhaustive().best.prediction.seconds
    unsplit = Searcher(program, "H100", "warpgroup", values={"split": (1,)})
    assert best.prediction.seconds < 0.5 * unsplit.branch_and_bound().best.prediction.seconds
    model, h100 = searcher.model, gpu("H100")
    # float32 outputs and workspaces (float16's, deterministic or not): zeroed once, or
    # written back once per part
    added = 4 * 256 * 256 * (best.params["split"] if program.split_workspace else 1)
    assert best.prediction.resources["dram"] * h100.dram_bandwidth == pytest.approx(
        model.compulsory + added)
    large = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype=dtype, precision=precision,
                 deterministic=deterministic)
    assert {p["split"] for p in Searcher(large, "H100", "warpgroup").space.points()} == {1}


def test_the_default_budget_buys_the_h100_search_of_a_split_16_bit_output_to_its_best():
    """tccg_19 in float16, whose split widens the warpgroup space to 1530 candidates: the
    model predicts each once (its root's bound), and a node's bound or a candidate's estimate
    that lists remembered ones predicts nothing more, so the default budget reaches the
    complete search's best (split 2, 0.05163 ms), where charging every listing spent 2.3
    budgets on the first dive and kept its split-4 kernel (0.05262 ms)."""
    row = next(r for r in load("tccg_fp16") if r.id == "tccg_19")
    program = plan(row.expression, row.sizes, row.layout, "float16")
    searcher = Searcher(program, "H100", "warpgroup", restrict=False)
    model = searcher.model
    model.bound({})
    predicted = model.evaluations
    assert predicted == sum(1 for _ in searcher.space.points())
    node = {"free_layout": "group", "warpgroups": 1, "frags_m": 2, "tile_n": 128}
    model.bound(node)
    model.estimate(next(searcher.space.points(node)))
    assert model.evaluations == predicted
    best = searcher.branch_and_bound(budget=DEFAULT_BUDGET).best
    complete = Searcher(program, "H100", "warpgroup", restrict=False).branch_and_bound().best
    assert best.prediction.seconds == complete.prediction.seconds
    assert best.params["split"] == 2


def _rewritten(kernel: treduda.Kernel, kind: type, change) -> treduda.Kernel:
    """``kernel`` with each statement of type ``kind`` replaced by ``change(statement)``
    (None: dropped)."""
    def rewrite(s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Block):
            changed = (change(c) if isinstance(c, kind) else c for c in s.body)
            s = ir.Block(tuple(c for c in changed if c is not None))
        return ir.map_children(s, rewrite)

    first = kernel.signature.kernel
    assert any(isinstance(s, kind) for s in ir.nested(first.body))
    return dataclasses.replace(kernel, signature=dataclasses.replace(
        kernel.signature, kernel=dataclasses.replace(first, body=rewrite(first.body))))


@pytest.mark.parametrize(("drop", "hazard"), [
    (ir.WaitCopies, "unfinished async copy"),  # a tile read before its copies landed
    (ir.WarpgroupWait, "unfinished wgmma"),  # a buffer overwritten while an MMA reads it
    (ir.ProxyFence, "missing proxy fence"),
])
@pytest.mark.parametrize("dtype", ["float16", "float32"])  # TF32 tiles rounded in place
def test_emulator_reports_the_hazard_a_removed_guard_leaves(drop, hazard, dtype):
    kernel = _compile(GEMM, {"i": 40, "j": 30, "k": 80}, dtype)
    assert kernel.hazards() == []
    assert hazard in {h.kind for h in _rewritten(kernel, drop, lambda s: None).hazards()}


def test_mmas_left_in_flight_one_group_too_many_are_a_hazard():
    """In three stages a step's MMAs stay in flight (wgmma.wait_group 1) while the copies
    fill the buffer two steps back; leaving two groups in flight overwrites what they read."""
    kernel = _compile(GEMM, {"i": 40, "j": 30, "k": 80}, params={**SMALL, "stages": 3})
    source = kernel.cuda_source
    assert '"n"(1)' in source and "td_copy_wait<0>" in source
    too_many = _rewritten(kernel, ir.WarpgroupWait,
                          lambda s: ir.WarpgroupWait(2) if s.pending else s)
    assert "unfinished wgmma" in {h.kind for h in too_many.hazards()}


TCCG_14 = "C[a,b]=A[c,a,d]*B[d,c,b]"
BOX_SIZES = {"a": 40, "b": 36, "c": 40, "d": 40}  # c and d rounded up to 48, partial tiles
BOX = {**SMALL, "tile_n": 64, "frags_k": BOX_FRAGMENTS}


@pytest.mark.parametrize("layout", ["F", "C"])
def test_box_kernels_match_einsum_without_hazards_or_bank_conflicts(layout):
    """A K box (tccg_14's c and d, 256 values a step: four 128-byte swizzled lines of K a
    row): A by 16-byte cp.async, B by 8-byte vector loads whose four values land a line of
    K (64 rows of 64 values) apart; partial tiles and boxes, in column-major layout and
    mirrored in row-major."""
    expression = in_layout(TCCG_14, layout)
    kernel = _compile(expression, BOX_SIZES, layout=layout, params=BOX)
    copies = {(s.width, s.stride) for s in ir.nested(kernel.built.kernel.body)
              if isinstance(s, ir.AsyncCopy)}
    assert copies == {(8, 1), (4, 64 * 64)}
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)
    assert kernel.counters(steps=2).worst_ways() == 1


def test_box_tiles_stored_through_registers_need_the_proxy_fence():
    """B's tile, stored by generic-proxy stores from registers, is read by the MMAs only
    after the async-proxy fence: without it the emulator reports B's elements."""
    kernel = _compile(TCCG_14, BOX_SIZES, layout="F", params=BOX)
    unfenced = _rewritten(kernel, ir.ProxyFence, lambda s: None).hazards()
    assert B_TILE in {h.array for h in unfenced if h.kind == "missing proxy fence"}


STAGED = {**BOX, "staged_b": True}
# (one stage and N of 32: the smallest staged kernel, the cheapest to build on PoCL)
STAGED_SMALL = {**STAGED, "tile_n": 32, "stages": 1}


@pytest.mark.parametrize("layout", ["F", pytest.param("C", marks=pytest.mark.matrix)])
def test_staged_box_kernels_match_einsum_without_hazards_or_bank_conflicts(layout):
    """A staged K box: B by 16-byte cp.async in its own order into the staging tile, then
    transposed in shared memory (two 8-byte loads of neighbouring c, four 32-bit stores of
    pairs a line of K apart), no copy of an operand through registers; partial tiles and
    boxes, both layouts; every shared access 1 way, and B's tile stored in as many 128-byte
    wavefronts as the transposes load (16-bit stores took twice as many)."""
    expression = in_layout(TCCG_14, layout)
    kernel = _compile(expression, BOX_SIZES, layout=layout, params=STAGED_SMALL)
    copies = {(s.source.array, s.width, s.stride) for s in ir.nested(kernel.built.kernel.body)
              if isinstance(s, ir.AsyncCopy)}
    assert copies == {("A", 8, 1), ("B", 8, 1), (B_STAGED, 4, 32 * 64)}
    body = kernel.built.kernel  # the transposes' paired runs survive storage
    assert serial.Decoder()(serial.encode(body)) == body
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)
    counted = kernel.counters(steps=2)
    assert counted.worst_ways() == 1
    assert counted.of(B_TILE, "st").transactions == counted.of(B_STAGED, "ld").transactions
    assert ir.dynamic_shared_bytes(kernel.built.kernel) >= shared_bytes(
        plan(expression, BOX_SIZES, layout, "float16"), STAGED_SMALL)


@pytest.mark.matrix
def test_the_staged_copies_formulas_are_their_access_relations():
    """The staging copy's and the transpose's index expressions name, at every point of
    their domains, the elements their access relations name (a box's ends zero-filled)."""
    program = plan(TCCG_14, {**BOX_SIZES, "a": 20, "b": 18}, "F", "float16")
    scheduled = get("warpgroup").apply(program, {**STAGED, "tile_n": 32, "stages": 2,
                                                 "free_layout": "group"})
    named = {s.name for s in scheduled.statements}
    assert {"copy_B", "transpose"} <= named
    assert formulas_name_their_relations(
        s for s in scheduled.statements if s.name in ("copy_B", "transpose")) > 1000


def _unbarriered(kernel: treduda.Kernel, after: type) -> treduda.Kernel:
    """``kernel`` without the barriers that follow a statement of type ``after`` (the last
    of a block before them, maybe)."""
    def last(s: ir.Stmt) -> ir.Stmt:
        return last(s.body[-1]) if isinstance(s, ir.Block) and s.body else s

    def rewrite(s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Block):
            kept = [c for n, c in enumerate(s.body) if not (
                isinstance(c, ir.Barrier) and n and isinstance(last(s.body[n - 1]), after))]
            s = ir.Block(tuple(kept))
        return ir.map_children(s, rewrite)

    built = kernel.built
    body = rewrite(built.kernel.body)
    barriers = (sum(isinstance(s, ir.Barrier) for s in ir.nested(b)) for b in (built.kernel.body,
                                                                               body))
    assert next(barriers) > next(barriers)
    return dataclasses.replace(kernel, signature=dataclasses.replace(
        built, kernel=dataclasses.replace(built.kernel, body=body)))


@pytest.mark.parametrize(("after", "array"), [
    # the MMAs read what other threads' transposes wrote
    pytest.param(ir.ProxyFence, B_TILE, marks=pytest.mark.matrix),
    (ir.WaitCopies, B_STAGED),  # the transposes read what other threads' copies landed
])
def test_the_emulator_reports_a_staged_box_without_its_barriers(after, array):
    kernel = _compile(TCCG_14, BOX_SIZES, layout="F", params=STAGED_SMALL)
    assert kernel.hazards() == []
    found = {(h.kind, h.array) for h in _unbarriered(kernel, after).hazards()}
    assert ("race", array) in found


@pytest.mark.matrix
@pytest.mark.parametrize("staged_b", [False, True])
def test_a_split_k_box_matches_einsum_without_hazards(staged_b):
    """tccg_14's K box split as the H100 search splits the row in a deterministic program:
    c and d of 40 rounded up to 48 are 9 box steps, 3 parts of 3; B through registers or
    staged and transposed; partial tiles."""
    kernel = treduda.compile(TCCG_14, {"a": 70, "b": 40, "c": 40, "d": 40}, dtype="float16",
                             layout="F", strategy="warpgroup", deterministic=True,
                             params={**SMALL, "tile_n": 32, "frags_k": BOX_FRAGMENTS,
                                     "staged_b": staged_b, "split": 4})
    assert math.prod(kernel.grid) == 2 * 2 * 3
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


def test_the_h100_model_sees_a_staged_boxs_copies_and_memory():
    """The staging tile's bytes (B's twice), and the transposes' issue and wavefronts."""
    program = plan(TCCG_14, {"a": 384, "b": 376, "c": 384, "d": 384}, "F", "float16")
    params = {**BOX, "tile_n": 32, "stages": 3, "free_layout": "group", "tma": False,
              "producer": False, "split": 1}
    registers, staged = ({**params, "staged_b": flag} for flag in (False, True))
    assert shared_bytes(program, staged) == 3 * (64 + 2 * 32) * 256 * 2
    model = model_of(program, gpu("H100"), "warpgroup")
    seconds = [model.estimate(p).resources for p in (registers, staged)]
    assert seconds[1]["memory"] > seconds[0]["memory"]


def test_the_h100_models_tensor_cores_are_shared_by_the_blocks_a_wave_holds():
    """A 128 x 64 x 64 step in four stages (two blocks an SM): its MMAs' 2 x 128 x 64 x 64
    flops at the SM's 989 TFLOP/s / 132 / 1.98 GHz = 3784 a cycle take 277 cycles alone,
    554 beside a second block; L2's 291 cycles spread over 2 steps in flight, a barrier's 20,
    64 steps. 64 blocks leave SMs short (one each); 272 are a full wave and 8 blocks."""
    params = {"warpgroups": 1, "frags_m": 2, "tile_n": 64, "frags_k": 4, "stages": 4,
              "async_copy": True, "tma": True, "producer": False, "split": 1,
              "staged_b": False, "free_layout": "group"}
    h100 = gpu("H100")

    def latency_cycles(i: int, j: int) -> float:
        program = plan(GEMM, {"i": i, "j": j, "k": 4096}, "C", "float16")
        model = model_of(program, h100, "warpgroup")
        known = {p.name for p in model.space.parameters}
        seconds = model.estimate({k: v for k, v in params.items() if k in known}).resources
        return seconds["latency"] * h100.clock_ghz * 1e9

    def wave(blocks_resident: int) -> float:
        mma = 2 * 128 * 64 * 64 * blocks_resident / (989e12 / 132 / 1.98e9)
        return 291 + 64 * (20 + max(291 / 2, mma))

    assert latency_cycles(1024, 512) == pytest.approx(wave(1))  # 8 x 8 tiles
    assert latency_cycles(2048, 1056) == pytest.approx(wave(2) + wave(1))  # 16 x 17


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "sizes", "params"), [
    # (N of 32: three stages of a staged B fit)
    ("C[a,b] = alpha*A[c,a,d]*B[d,c,b] + beta*C[a,b]", BOX_SIZES, {"stages": 3, "tile_n": 32}),
    ("C[a,b] += A[c,a,d]*B[d,c,b]", BOX_SIZES, {"stages": 1}),
    (TCCG_14, BOX_SIZES, {"async_copy": False}),  # both through registers
    (TCCG_14, {"a": 150, "b": 70, "c": 16, "d": 30},
     {"warpgroups": 2, "frags_m": 1, "tile_n": 128, "stages": 1}),
    ("C[a,b,c,d]=A[e,a,f,b]*B[f,d,e,c]", {"a": 5, "b": 4, "c": 4, "d": 6, "e": 16, "f": 40},
     {"tile_n": 32}),
], ids=["alpha_beta", "update", "registers", "two_groups", "tccg_28"])
@pytest.mark.parametrize("staged_b", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["F", "C"])
def test_every_box_form_matches_einsum_without_hazards(expression, sizes, params, staged_b,
                                                       dtype, layout):
    if staged_b and not params.get("async_copy", True):
        pytest.skip("a staged B is copied by cp.async")
    kernel = _compile(in_layout(expression, layout), sizes, dtype, layout,
                      {**BOX, **params, "staged_b": staged_b})
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


def test_the_h100_search_takes_a_box_where_steps_along_one_index_read_sectors_per_value():
    """tccg_28's B leads with f, A with e: steps along e copy B a value per 32-byte sector
    through registers, and the model's L2 charge for them makes the box the pick; branch and
    bound finds the best the exhaustive enumeration does in the space with boxes."""
    searcher = Searcher(plan("C[a,b,c,d]=A[e,a,f,b]*B[f,d,e,c]",
                             {"a": 24, "b": 20, "c": 20, "d": 24, "e": 48, "f": 48}, "F",
                             "float16"), "H100", "warpgroup")
    assert bound_paths_hold(searcher) > 50
    best = searcher.branch_and_bound().best
    assert best.prediction.seconds == searcher.exhaustive().best.prediction.seconds
    assert best.params["frags_k"] == BOX_FRAGMENTS


@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
def test_box_kernels_build_hgmma_fed_by_cp_async_and_the_boxs_vector_loads():
    """tccg_14 at its size: the main loop's global reads are A's LDGSTS and B's 8-byte
    LDG (the box's transposing copy through registers: cp.async cannot scatter), no
    other LDG; NVRTC builds it for sm_90a too."""
    kernel = _compile(TCCG_14, {"a": 384, "b": 376, "c": 384, "d": 384}, layout="F",
                      params={**BOX, "warpgroups": 2, "tile_n": 128, "stages": 1})
    report, = sass_report(kernel.cuda_source, "sm_90a")
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HGMMA": 16}
    assert "LDGSTS" in kinds["async copy"]
    assert report.main_loop_opcodes["LDG"] > 0 and set(report.global_load_widths) == {64}
    if nvrtc_available():
        assert "wgmma.mma_async" in compile_nvrtc(kernel.cuda_source, "compute_90")


@pytest.mark.matrix
@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
def test_staged_box_kernels_build_hgmma_fed_by_cp_async_alone():
    """tccg_14 at its size, B staged: LDGSTS for both operands and no LDG in the kernel,
    the transposes' shared loads and 32-bit stores beside the HGMMAs; NVRTC builds it for
    sm_90a."""
    kernel = _compile(TCCG_14, {"a": 384, "b": 376, "c": 384, "d": 384}, layout="F",
                      params={**STAGED, "tile_n": 32, "stages": 3})
    report, = sass_report(kernel.cuda_source, "sm_90a")
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HGMMA": 16}
    assert "LDGSTS" in kinds["async copy"] and "global memory" not in kinds
    assert not report.global_load_widths  # no LDG anywhere in the kernel
    # the transposes: a thread's 8 pairs, two LDS.64 and four 32-bit STS each
    assert kinds["shared memory"]["LDS"] >= 16 and kinds["shared memory"]["STS"] == 32
    if nvrtc_available():
        assert "wgmma.mma_async" in compile_nvrtc(kernel.cuda_source, "compute_90")


STAGED_ROWS = ("tccg_14", "tccg_28", "tccg_30")  # the K box rows, B transposed in shared memory


@pytest.fixture(scope="module")
def held_staged() -> dict[str, tuple]:
    """Each K box row's H100 search held to a staged B (`treduda bench --hold staged_b=True`):
    its row, its best kernel at the row's size and that kernel's sm_90a SASS report, the
    three kernels' SASS from one nvcc call (one translation unit)."""
    picks = {}
    for row in (r for r in load("tccg_fp16") if r.id in STAGED_ROWS):
        best = treduda.search(row.expression, row.sizes, "H100", dtype="float16",
                              layout=row.layout, values={"staged_b": (True,)}).best
        picks[row.id] = (row, best, _compile(row.expression, row.sizes, layout=row.layout,
                                             params=best.params))
    reports = {r.kernel: r for r in sass_report(
        "\n".join(kernel.cuda_source for *_, kernel in picks.values()), "sm_90a")}
    return {name: (row, best, kernel, reports[kernel.name])
            for name, (row, best, kernel) in picks.items()}


@pytest.mark.matrix
@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("name", STAGED_ROWS)
def test_the_h100_search_held_to_a_staged_b_builds_hgmma_fed_by_cp_async_alone(held_staged,
                                                                               name):
    """Issue 39's kernel for the K box rows: the H100 search's best with B staged (the
    unheld search may keep B's copy through registers, which the model rates faster) has
    HGMMA in its SASS main loop, LDGSTS for both operands and no LDG anywhere; NVRTC builds
    it; at reduced sizes the same parameters keep the staged form and match numpy.einsum."""
    row, best, kernel, report = held_staged[name]
    assert best.strategy == "warpgroup" and best.params["staged_b"] is True
    assert best.params["frags_k"] == BOX_FRAGMENTS
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"].get("HGMMA", 0) > 0
    assert "LDGSTS" in kinds["async copy"] and "global memory" not in kinds
    assert not report.global_load_widths  # no LDG anywhere in the kernel
    if nvrtc_available():
        assert "wgmma.mma_async" in compile_nvrtc(kernel.cuda_source, "compute_90")
    # the row scaled down, its K box's indices 40 (rounded up to 48) and 16: partial tiles
    box = dict(zip(k_box(plan(row.expression, row.sizes, row.layout, "float16")), (40, 16),
                   strict=True))
    # the pick's form on the smallest tile, unsplit (its tiles and split may not fit there)
    small = _compile(row.expression, {**scaled(row.sizes), **box}, layout=row.layout,
                     params={**best.params, "warpgroups": 1, "frags_m": 1, "tile_n": 32,
                             "split": 1})
    assert any(isinstance(s, ir.AsyncCopy) and s.source.array == B_STAGED
               for s in ir.nested(small.built.kernel.body))
    assert small.verify().ok


@pytest.mark.parametrize(("frags_k", "tile_n", "modes"), [
    (4, 64, {"C": (1, 1), "F": (1, 1)}),  # lines of 128 bytes along K and M or N
    (2, 32, {"C": (2, 2), "F": (1, 2)}),  # 64: K-major lines of 32 values, 32 rows of N
    (1, 64, {"C": (3, 1), "F": (1, 3)})])  # 32 bytes: K-major lines of 16 values
@pytest.mark.parametrize("layout", ["C", "F"])
def test_swizzled_tiles_take_copies_without_bank_conflicts(layout, frags_k, tile_n, modes):
    """Each tile takes the widest swizzle its lines fill (the descriptors' layout types 1,
    2 and 3 for 128, 64 and 32 bytes; A K-major and B MN-major in layout C, the other way
    round in F; M's tile 128 rows), the pool aligned to 1024-byte atoms; the copies'
    16-byte stores take 1 way (unswizzled core matrices of 16-byte lines took as many as a
    line has runs: steps of 32 values 4); the OpenCL twin reads the swizzled tiles, the
    emulator finds no hazard."""
    kernel = _compile(GEMM, PARTIAL, layout=layout,
                      params={**TWO_GROUPS, "frags_k": frags_k, "tile_n": tile_n})
    assert kernel.verify().ok and kernel.hazards() == []
    assert "__align__(1024) unsigned char td_shared[" in kernel.cuda_source
    mma = next(s for s in ir.nested(kernel.built.kernel.body)
               if isinstance(s, ir.WarpgroupMultiply))
    assert (mma.a_layout.descriptor()[2], mma.b_layout.descriptor()[2]) == modes[layout]
    counters = kernel.counters()
    assert [counters.of(tile, ASYNC_COPY).ways for tile in ("td_sa", "td_sb")] == [1, 1]


@pytest.mark.parametrize("bits", [3, 2, 1])
def test_the_swizzle_is_cutlass_swizzle_of_byte_addresses(bits):
    """``ir.swizzled`` of 16-bit and 32-bit elements (shift 6 and 5) moves each element's
    byte address as ``Swizzle<bits,4,3>`` does: bits 7 on, ``bits`` of them, XOR'd into
    bits 4 on (cute/swizzle.hpp; the wgmma descriptor's 128-, 64- and 32-byte modes)."""
    def cute(address: int) -> int:
        return address ^ ((address & (((1 << bits) - 1) << 7)) >> 3)

    offsets = np.arange(4096)
    for size, shift in ((2, 6), (4, 5)):
        moved = ir.swizzled(offsets, shift, size, bits) * size
        assert list(moved) == [cute(o * size) for o in offsets]


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("layout", ["C", "F"])
def test_tf32_tiles_copied_by_cp_async_are_rounded_in_place(layout):
    """C = A*B with B's single row all ones: each element is A's rounded as cvt.rna.tf32.f32
    rounds it (ties away from zero; Inf and NaN kept), on PoCL and in the emulator, where
    wgmma itself would drop the low 13 bits. A is copied by cp.async in runs along K in
    layout C and a word at a time along M in layout F, both into K-major tiles."""
    ulp = 2.0**-10  # of TF32 at 1.0
    values = np.array([1 + ulp / 2, -(1 + ulp / 2), 1 + ulp / 4, 1 + 3 * ulp / 4, 1 + ulp * 1.5,
                       1 + ulp * 0.9, np.inf, -np.inf, np.nan], np.float32)
    expected = np.array([1 + ulp, -(1 + ulp), 1.0, 1 + ulp, 1 + 2 * ulp, 1 + ulp, np.inf,
                         -np.inf, np.nan], np.float32)
    kernel = _compile(GEMM, {"i": values.size, "j": 3, "k": 1}, "float32", layout)
    assert "td_copy_async" in kernel.cuda_source and "td_tf32(td_sa[" in kernel.cuda_source
    a = np.asfortranarray(values[:, None]) if layout == "F" else values[:, None]
    ones = np.ones((1, 3), np.float32, order=layout)
    for backend in ("opencl", "emulator"):
        # The emulated wgmma multiplies A's infinities by B's zero padding too: NaN, as the
        # tensor cores compute it, in the tile's columns past j = 3, which the kernel drops.
        with np.errstate(invalid="ignore"):
            got = kernel.run(A=a, B=ones, backend=backend)
        np.testing.assert_array_equal(got, np.repeat(expected[:, None], 3, axis=1))


@pytest.mark.parametrize("layout", ["C", "F"])
def test_swizzled_tf32_tiles_take_copies_and_roundings_without_bank_conflicts(layout):
    """Steps of 32 TF32 values: K-major tiles in the 128-byte swizzle; runs copied along K,
    words copied along M or N (B in layout C, A in F: a warp's 32 take 8 rows at 4 K, where
    32 rows at one K took 4 ways) and their rounding in place take 1 way, and the word
    copies' loads fill whole sectors. The twin reads the swizzled tiles (PoCL verifies),
    the emulator finds no hazard. (Sizes that are multiples of 8 but of no tile: runs along
    K 16 bytes wide, of 90 they would be 8, two wavefronts a warp; rows of M or N starting
    on sector boundaries, where a warp's 4 rows of 32 bytes would straddle 8 sectors.)"""
    kernel = _compile(GEMM, {"i": 72, "j": 56, "k": 92}, "float32", layout,
                      params={**TWO_GROUPS, "frags_k": 4})
    assert kernel.verify().ok and kernel.hazards() == []
    assert "__align__(1024) unsigned char td_shared[]" in kernel.cuda_source
    counters = kernel.counters()
    assert {t.ways for t in counters.traffic if t.array in ("td_sa", "td_sb")} == {1}
    words = counters.of("B" if layout == "C" else "A", ASYNC_COPY)
    assert words.per_request == words.ideal_per_request


@pytest.mark.parametrize("layout", ["C", "F"])
def test_the_tiles_stores_take_the_one_way_the_model_counts(layout):
    """The model's ways (1 for the copies' stores into swizzled tiles and for the
    accumulators' stores into the C tile) are those ``Kernel.counters()`` counts, for lines
    of 32, 64 and 128 bytes, 16-bit and TF32. Along N (layout C) a thread's accumulator
    pairs are one 8-byte store, as nvcc pairs them (STS.64): as two 4-byte stores the
    emulator counted 2 ways where the hardware has 1."""
    for dtype, frags_k in (("float16", 1), ("float16", 2), ("float16", 4), ("float32", 2)):
        kernel = _compile(GEMM, {"i": 128, "j": 64, "k": 128}, dtype, layout,
                          params={**SMALL, "frags_k": frags_k})
        traffic = kernel.counters(steps=2).traffic
        counted = {(t.array, t.operation): t.ways for t in traffic}
        assert (counted["td_sa", ASYNC_COPY], counted["td_sb", ASYNC_COPY]) == (1, 1), (
            dtype, frags_k)
        assert counted["td_sc", "st"] == 1
        stores = next(t for t in traffic if (t.array, t.operation) == ("td_sc", "st"))
        assert stores.width == (8 if layout == "C" else 4)
        assert stores.transactions == stores.ideal


def test_kernel_ir_survives_storage():
    body = _compile(GEMM, PARTIAL).built.kernel
    assert serial.Decoder()(serial.encode(body)) == body
    assert any(isinstance(s, ir.WarpgroupMultiply) for s in ir.nested(body.body))


@pytest.mark.parametrize(("dtype", "precision"), [
    ("float16", "highest"),
    pytest.param("bfloat16", "highest", marks=pytest.mark.matrix),
    pytest.param("float32", "tf32", marks=pytest.mark.matrix)])
def test_default_search_on_h100_picks_warpgroups_and_says_why(dtype, precision):
    """GEMM 4096^3 on the H100 model: the default search ranks the warpgroup mapping beside
    the others and picks it over the tensor-core (WMMA, mma.sync) mapping's best, which
    reaches only part of the tensor cores' peak; the summary names that rival's estimate;
    the winner's bound stays below its estimate."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype=dtype, precision=precision)
    result = search_program(program, "H100", max_nodes=300)
    best, rival = result.best, result.strategy_bests()["tensorcore"]
    assert best.strategy == "warpgroup"
    assert best.prediction.seconds < rival.prediction.seconds
    assert f"against tensorcore's best: {rival.prediction.seconds * 1e3:.4f} ms" in (
        result.summary())
    assert best.bound <= best.prediction.seconds


def test_a100_never_offers_the_mapping():
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype="float16")
    assert "warpgroup" not in offered(program, gpu("A100"))
    with pytest.raises(StrategyError, match="9.0"):
        Searcher(program, "A100", strategy="warpgroup")


def test_other_dtypes_and_precisions_are_refused():
    with pytest.raises(StrategyError, match="tf32"):
        treduda.compile(GEMM, PARTIAL, dtype="float32", strategy="warpgroup", params=SMALL)
    with pytest.raises(StrategyError, match="float16"):
        _compile(GEMM, PARTIAL, "float64")


@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_nvcc_builds_hgmma_into_the_main_loop(dtype):
    kernel = _compile(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype,
                      params={**TWO_GROUPS, "tile_n": 128, "frags_k": 4})
    report, = sass_report(kernel.cuda_source, "sm_90")  # built for sm_90a, as its guard asks
    assert report.arch == "sm_90a"
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HGMMA": 4}
    # operands of either major move by cp.async only (TF32's then rounded in place)
    assert "LDG" not in kinds.get("global memory", {}) and "LDGSTS" in kinds["async copy"]


@pytest.mark.matrix
@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
def test_a_split_reduction_builds_hgmma_and_adds_its_parts_atomically():
    """GEMM 256 x 256 x 65536 in TF32, split in 8 as the H100 search splits it: HGMMA in the
    main loop, operands by cp.async, the output zeroed before the launch and each part's
    tile added by atomic reductions after it; NVRTC builds it for sm_90a."""
    kernel = _compile(GEMM, {"i": 256, "j": 256, "k": 65536}, "float32", "F",
                      params={**SMALL, "tile_n": 64, "frags_k": 4, "stages": 4, "split": 8})
    assert f"cudaMemsetAsync(C, 0, {256 * 256 * 4}, stream)" in kernel.cuda_source
    report, = sass_report(kernel.cuda_source, "sm_90a")
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HGMMA": 4}
    assert "LDG" not in kinds.get("global memory", {}) and "LDGSTS" in kinds["async copy"]
    if nvrtc_available():
        ptx = compile_nvrtc(kernel.cuda_source, "compute_90")
        assert "wgmma.mma_async" in ptx and "atom.global.add.f32" in ptx


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (CUDA toolkit) not installed")
def test_nvrtc_compiles_wgmma_for_sm_90a_asked_for_the_h100s_architecture():
    """The GPU's architecture (compute_90) becomes sm_90a for a warpgroup kernel alone."""
    ptx = compile_nvrtc(_compile(GEMM, PARTIAL, "bfloat16").cuda_source, "compute_90")
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16" in ptx
    other = treduda.compile(GEMM, PARTIAL, dtype="bfloat16", strategy="tensorcore")
    assert ".target sm_90\n" in compile_nvrtc(other.cuda_source, "compute_90")


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
def test_only_warpgroup_kernels_are_built_for_sm_90a():
    """Asked for the H100's sm_90, as the search's ptxas check asks: a warpgroup kernel is
    built for sm_90a, the tensor-core kernel beside it in the same batch for sm_90; asked
    for the A100's sm_80, the warpgroup kernel's guard names the target it needs."""
    wgmma = _compile(GEMM, PARTIAL)
    mma = treduda.compile(GEMM, PARTIAL, dtype="float16", strategy="tensorcore")
    reports = compile_cuda_batch([wgmma.cuda_source, mma.cuda_source], "sm_90")
    assert [report.arch for report, in reports] == ["sm_90a", "sm_90"]
    assert cuda_target(mma.cuda_source, "sm_90") == "sm_90"
    with pytest.raises(CompileError, match="needs sm_90a"):
        compile_cuda(wgmma.cuda_source, "sm_80")


@pytest.mark.matrix
@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("row", load("tccg_fp16"), ids=lambda row: row.id)
def test_every_tccg_row_in_fp16_verifies_and_builds_hgmma(row):
    """At the row's own sizes with the default tiles, HGMMA in the SASS main body: its
    main loop, or where nvcc unrolled a reduction of few steps whole (rows of K 24 or 96),
    the straight run holding them, which is then the kernel's body (SassReport.looped);
    verified at scaled-down sizes."""
    kernel = _compile(row.expression, row.sizes, layout=row.layout, params=None)
    report, = sass_report(kernel.cuda_source, "sm_90a")
    assert report.main_loop_mma > 0
    assert _compile(row.expression, scaled(row.sizes), layout=row.layout,
                    params=None).verify().ok


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
def test_a_bundle_holds_an_sm_90a_cubin_for_the_h100_and_runs_on_pocl(tmp_path):
    """Exported for sm_90, a warpgroup kernel's cubin is built for sm_90a (named so), kept
    under sm_90, the architecture an H100's runtime looks up; its OpenCL twin runs from the
    bundle."""
    kernel = _compile(GEMM, PARTIAL)
    path = tmp_path / "wgmma.zip"
    manifest = treduda.export([kernel], path, targets=("sm_90",))
    assert manifest["kernels"][kernel.name]["cubins"] == {
        "sm_90": f"kernels/{kernel.name}.sm_90a.cubin"}
    bundled = load_bundle(path)[kernel.name]
    assert bundled.cubins["sm_90"][:4] == b"\x7fELF"
    a, b = (np.random.default_rng(0).standard_normal(shape).astype(np.float16)
            for shape in ((70, 90), (90, 50)))
    expected = np.einsum("ik,kj->ij", a.astype(np.float32), b.astype(np.float32))
    assert np.allclose(bundled(A=a, B=b).astype(np.float32), expected, rtol=2e-2, atol=2e-1)
