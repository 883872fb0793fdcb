"""The tensor-core strategy: its OpenCL twin checked against numpy.einsum on PoCL for every
dtype and precision it takes, on GEMM-shaped contractions whose sizes are no multiples of the
fragment shape; 3xTF32 as accurate as FP32 SIMT and TF32 not; WMMA compiled by nvcc with
HMMA/DMMA in the main loop."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from conftest import MMA_CASES, bound_paths_hold, formulas_name_their_relations
from treduda.strategies.tensorcore_tiles import gemm_groups, mma_shape

import treduda
from treduda.codegen import ir, serial
from treduda.errors import StrategyError
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import get
from treduda.run.nvcc import compile_cuda_batch, nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available, toolkit_headers
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load
from treduda.tuning.search import Searcher, offered, search_program

KINDS = [("float16", "highest"), ("bfloat16", "highest"), ("float32", "tf32"),
         ("float32", "3xtf32"), ("float64", "highest")]
GEMM = "C[i,j] = A[i,k] * B[k,j]"
PARTIAL = {"i": 40, "j": 50, "k": 70}  # no multiple of any fragment shape
ONE_WARP = {"warps_m": 1, "warps_n": 1, "frags_m": 1, "frags_n": 1, "frags_k": 1}
# The shared GEMM-shaped cases (conftest.MMA_CASES) and two updates
CASES = {
    **MMA_CASES,
    "update": ("C[i,j] += alpha*A[i,k]*B[k,j]", {"i": 33, "j": 17, "k": 41}),
    "scaled": ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", {"i": 33, "j": 17, "k": 41}),
    # B's N group holds no fastest index of B, whose K comes first: N in B's memory order
    "short_rows": ("C[a,b,c,d,e,f]=A[d,e,g,a]*B[g,f,b,c]",
                   {"a": 3, "b": 2, "c": 3, "d": 4, "e": 3, "f": 5, "g": 12}),
}


def _compile(expression: str, sizes: dict, dtype: str, precision: str, layout: str = "C",
             params: dict | None = None) -> treduda.Kernel:
    return treduda.compile(expression, sizes, dtype=dtype, precision=precision, layout=layout,
                           strategy="tensorcore", params=params)


@pytest.mark.parametrize(("dtype", "precision"), KINDS)
@pytest.mark.parametrize("params", [ONE_WARP, None], ids=["one_warp", "default"])
def test_gemm_matches_einsum(dtype, precision, params):
    kernel = _compile(GEMM, PARTIAL, dtype, precision, params=params)
    assert kernel.verify().ok


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("case", CASES)
def test_contractions_match_einsum(case, layout):
    expression, sizes = CASES[case]
    assert _compile(expression, sizes, "float16", "highest", layout).verify().ok


@pytest.mark.parametrize(("dtype", "precision"), [("bfloat16", "highest"), ("float32", "tf32"),
                                                  ("float64", "highest")])
@pytest.mark.parametrize("case", ["tccg_03", "batched", "scaled"])
def test_other_kinds_on_contractions(case, dtype, precision):
    expression, sizes = CASES[case]
    assert _compile(expression, sizes, dtype, precision, "F").verify().ok


@pytest.mark.parametrize(("dtype", "precision"), [("float32", "tf32"), ("float64", "highest")])
@pytest.mark.parametrize("expression", [GEMM, "C[i,j] += alpha*A[i,k]*B[k,j]",
                                        "C[b,i,j] = A[b,i,k]*B[b,k,j]"])
def test_split_reduction_adds_its_parts(expression, dtype, precision):
    sizes = {"b": 2, "i": 40, "j": 50, "k": 150} if "b" in expression else {
        "i": 40, "j": 50, "k": 150}
    kernel = _compile(expression, sizes, dtype, precision, params={**ONE_WARP, "split": 4})
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


def test_a_splits_short_last_part_runs_a_whole_part_of_zeros():
    """k = 150 is 38 steps of 4 (float64): 8 parts of 5 steps, the last of 3 and two whose
    copies zero-fill past K's end, so that every part's loop runs 5 steps, its count no
    minimum with the reduction's end (tccg_13 fp16's 2256 steps in 14 parts: nvcc's SASS
    main loop 301 instructions with it, 281 without, sm_90); the sums are still einsum's."""
    kernel = _compile(GEMM, {"i": 10, "j": 12, "k": 150}, "float64", "highest",
                      params={**ONE_WARP, "split": 8, "stages": 2})
    assert "td_min(37," not in kernel.cuda_source  # no bound at the last step, 37
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


def test_a_split_into_half_precision_keeps_its_parts_in_a_workspace():
    """OpenCL has no 16-bit atomic addition: a float16 split stores each part's float32 sum,
    which a second kernel adds, deterministic or not."""
    kernel = _compile(GEMM, PARTIAL, "float16", "highest", params={**ONE_WARP, "split": 2})
    assert kernel.signature.parts_sum is not None and kernel.signature.parts_sum.count == 2
    assert kernel.verify().ok


def test_a_split_that_fills_the_sms_is_searched_for_a_gpu_and_given_without_one():
    """9 tiles of 128 x 128 on an H100's 132 SMs: the search tries 14 parts beside SPLITS
    (126 blocks, one wave), for that tile alone; with no GPU the space keeps SPLITS, and a
    kernel given a split beyond them (a pick's, generated again) is checked by a rule."""
    program = plan(GEMM, {"i": 384, "j": 384, "k": 4096}, dtype="float16")
    space = Searcher(program, "H100", "tensorcore").space
    tile = {"warps_m": 2, "warps_n": 2, "frags_m": 4, "frags_n": 4, "frags_k": 2}
    assert [split for split in (8, 14, 16) if not space.violated({**tile, "split": split})] \
        == [8, 14]
    assert get("tensorcore").space(program).parameter("split").values == (1, 2, 4, 8)
    kernel = _compile(GEMM, PARTIAL, "float16", "highest", params={**ONE_WARP, "split": 3})
    assert kernel.signature.parts_sum.count == 3 and kernel.verify().ok
    with pytest.raises(StrategyError, match="a whole split from 1 to 16"):
        _compile(GEMM, PARTIAL, "float16", "highest", params={**ONE_WARP, "split": 17})


@pytest.mark.parametrize(("dtype", "precision"), [("float16", "highest"),
                                                  ("bfloat16", "highest"), ("float32", "tf32")])
@pytest.mark.parametrize("expression", [GEMM, "C[i,j] += alpha*A[i,k]*B[k,j]"])
def test_a_deterministic_split_stores_its_parts_and_adds_them_in_order(expression, dtype,
                                                                       precision):
    """Half-precision outputs take a split reduction where it is deterministic: each part's
    sum goes to a float32 workspace, and a second pass adds the parts in a fixed order and
    rounds once; the same inputs give the same bits on every run."""
    kernel = treduda.compile(expression, {"i": 40, "j": 50, "k": 150}, dtype=dtype,
                             precision=precision, strategy="tensorcore", deterministic=True,
                             params={**ONE_WARP, "split": 4})
    assert kernel.signature.parts_sum is not None and kernel.signature.parts_sum.count == 4
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    rng = np.random.default_rng(3)
    values = {"A": rng.uniform(-1, 1, (40, 150)), "B": rng.uniform(-1, 1, (150, 50)),
              **({"C": np.ones((40, 50)), "alpha": 0.5} if "+=" in expression else {})}
    first, again = (kernel.run(casting="unsafe", **{name: np.copy(value) for name, value
                                                    in values.items()}) for _ in range(2))
    assert np.asarray(first).tobytes() == np.asarray(again).tobytes()


@pytest.mark.parametrize(("expression", "sizes", "layout", "dtype", "precision",
                          "deterministic", "params"), [
    (*CASES["tccg_20"], "F", "float16", "highest", False, None),
    (*CASES["tccg_03"], "C", "float32", "3xtf32", False, {"stages": 2, "split": 2}),
    (CASES["update"][0], {"i": 33, "j": 17, "k": 150}, "F", "bfloat16", "highest", True,
     {**ONE_WARP, "split": 4}),
    (CASES["tccg_20"][0], {"a": 20, "b": 5, "c": 6, "d": 24, "e": 28, "f": 3}, "F", "float16",
     "highest", False, {"warps_m": 1, "warps_n": 2, "frags_m": 2, "frags_n": 1, "frags_k": 2,
                        "async_copy": True, "stages": 2})],
    ids=["tccg_20", "tccg_03_3xtf32", "workspace", "k_rounded_up"])
def test_the_statements_formulas_name_their_relations(expression, sizes, layout, dtype,
                                                      precision, deterministic, params):
    """Every statement of a tensor-core kernel gives its index expressions in closed form,
    which the AST builder takes instead of composing its accesses with the schedule (isl
    took minutes for tccg_20's groups of indices): at every point of every access relation
    they name the same element (copies and zero-fills of grouped operands, two buffers, the
    write of a grouped output, into the output or a split's workspace, cp.async runs of a K
    rounded up to whole steps, whose sources past the tensor are named, never read)."""
    program = plan(expression, sizes, layout, dtype, deterministic=deterministic,
                   precision=precision)
    statements = get("tensorcore").apply(program, params).statements
    assert all(s.formulas is not None for s in statements)
    assert formulas_name_their_relations(statements) > 5000


@pytest.mark.parametrize(("expression", "sizes"), [  # treduda/suites/tapp_ccsd_bottlenecks.tsv
    ("C[a,b,i,j]=A[a,b,c,d]*B[c,d,i,j]", {"a": 6, "b": 5, "i": 3, "j": 7, "c": 5, "d": 6}),
    ("C[a,b,i,j]=A[k,b,c,j]*B[a,c,i,k]", {"a": 5, "b": 6, "i": 4, "j": 3, "k": 7, "c": 5})],
    ids=["ccsd_PPL", "ccsd_PHL"])
def test_fp64_dmma_matches_on_ccsd_rows(expression, sizes):
    assert _compile(expression, sizes, "float64", "highest").verify().ok


def test_more_warps_and_fragments_than_the_tile_needs_are_refused():
    with pytest.raises(StrategyError, match="M tile"):
        _compile(GEMM, {"i": 16, "j": 64, "k": 64}, "float16", "highest",
                 params={"warps_m": 2})


def _max_relative_error(kernel: treduda.Kernel, a: np.ndarray, b: np.ndarray,
                        expression: str) -> float:
    result = kernel.run(A=a, B=b).astype(np.float64)
    expected = np.einsum(_subscripts(expression), a.astype(np.float64), b.astype(np.float64))
    return float(np.max(np.abs(result - expected)) / np.max(np.abs(expected)))


def _subscripts(expression: str) -> str:
    """``"C[i,j] = A[i,k]*B[k,j]"`` as numpy's ``"ik,kj->ij"``."""
    left, right = expression.replace(" ", "").split("=")
    a, b = (part.split("[")[1].rstrip("]").replace(",", "") for part in right.split("*"))
    return f"{a},{b}->{left.split('[')[1].rstrip(']').replace(',', '')}"


@pytest.mark.parametrize("case", ["gemm", "tccg_03", "tccg_09"])
def test_3xtf32_is_as_accurate_as_fp32_and_tf32_is_not(case):
    expression, sizes = (GEMM, {"i": 48, "j": 40, "k": 256}) if case == "gemm" else CASES[case]
    rng = np.random.default_rng(1)
    c = treduda.compile(expression, sizes).contraction
    a, b = (rng.uniform(-1, 1, tuple(sizes[i] for i in c.inputs[t])).astype(np.float32)
            for t in ("A", "B"))
    errors = {}
    for precision in ("highest", "tf32", "3xtf32"):
        strategy = "tiled+staged" if precision == "highest" else "tensorcore"
        kernel = treduda.compile(expression, sizes, precision=precision, strategy=strategy)
        errors[precision] = _max_relative_error(kernel, a, b, expression)
    assert errors["3xtf32"] <= 2 * errors["highest"]
    assert errors["tf32"] > 20 * errors["highest"]


@pytest.mark.parametrize(("dtype", "precision"), KINDS)
def test_emulator_runs_tensor_core_kernels_without_hazards(dtype, precision):
    kernel = _compile("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", PARTIAL, dtype, precision,
                      params={**ONE_WARP, "warps_m": 2, "frags_n": 2, "frags_k": 2})
    assert kernel.verify(backend="emulator").ok  # every block: a hazard raises


@pytest.mark.parametrize(("dtype", "precision", "split", "stages"), [
    ("float16", "highest", 1, 2), ("float32", "3xtf32", 1, 2), ("float32", "3xtf32", 2, 2),
    ("float16", "highest", 1, 3), ("bfloat16", "highest", 1, 4), ("float32", "tf32", 2, 4),
    ("float64", "highest", 1, 3), ("float64", "highest", 8, 4)])
def test_multistage_kernels_match_without_hazards(dtype, precision, split, stages):
    """In S stages each step's copies are issued S - 1 steps ahead and waited for with
    S - 2 groups left in flight; the emulator finds no read of a buffer before its copies
    land nor a copy into a buffer still read. k = 150 is 38 steps of 4 (fp64): a split into
    8 parts leaves parts of five steps and a last of three, as many as the copies in
    flight."""
    params = {**ONE_WARP, "warps_m": 2, "frags_n": 2, "stages": stages}
    kernel = _compile("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]" if split == 1 else GEMM,
                      {"i": 40, "j": 50, "k": 150}, dtype, precision,
                      params={**params, "split": split})
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)
    assert kernel.cuda_source.count("__syncthreads") == 3  # one per step, two for the write
    assert f"td_copy_wait<{stages - 2}>" in kernel.cuda_source


@pytest.mark.parametrize("stages", [2, 3])
def test_a_wait_that_leaves_too_many_groups_in_flight_is_a_hazard(stages):
    """The emulator checks the pipeline, not only the result: waiting with one group more
    left in flight than the stages allow reads a buffer whose copies have not landed."""
    kernel = _compile(GEMM, {"i": 40, "j": 50, "k": 150}, "float16", "highest",
                      params={**ONE_WARP, "warps_m": 2, "frags_n": 2, "stages": stages})
    first = kernel.signature.kernel
    broken = dataclasses.replace(kernel, signature=dataclasses.replace(
        kernel.signature, kernel=dataclasses.replace(first, body=_waiting(first.body,
                                                                          stages - 1))))
    assert "unfinished async copy" in {h.kind for h in broken.hazards()}


def _waiting(s: ir.Stmt, pending: int) -> ir.Stmt:
    """``s`` with every wait for asynchronous copies leaving ``pending`` groups in flight."""
    if isinstance(s, ir.WaitCopies):
        return ir.WaitCopies(pending)
    return ir.map_children(s, lambda child: _waiting(child, pending))


def _without_barriers(s: ir.Stmt) -> ir.Stmt:
    if isinstance(s, ir.Block):
        s = ir.Block(tuple(c for c in s.body if not isinstance(c, ir.Barrier)))
    return ir.map_children(s, _without_barriers)


def test_emulator_reports_the_race_a_missing_barrier_leaves():
    kernel = _compile(GEMM, PARTIAL, "float16", "highest", params=ONE_WARP)
    first = kernel.signature.kernel
    broken = dataclasses.replace(kernel, signature=dataclasses.replace(
        kernel.signature, kernel=dataclasses.replace(first, body=_without_barriers(first.body))))
    assert "race" in {h.kind for h in broken.hazards()}


def test_unsupported_precision_and_shape_are_refused():
    with pytest.raises(StrategyError, match="tf32"):
        _compile(GEMM, PARTIAL, "float32", "highest")
    with pytest.raises(StrategyError, match="two"):
        _compile("C[i] = A[i,k]*B[k]*D[k]", {"i": 16, "k": 16}, "float16", "highest")


def test_kernel_ir_survives_storage():
    kernel = _compile(GEMM, PARTIAL, "float32", "3xtf32")
    body = kernel.built.kernel
    assert serial.Decoder()(serial.encode(body)) == body
    assert any(isinstance(s, ir.MultiplyAccumulate) for s in ir.nested(body.body))


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_every_kind(arch):
    sources = [_compile(GEMM, PARTIAL, dtype, precision).cuda_source
               for dtype, precision in KINDS]
    sources.append(_compile(*CASES["tccg_03"], "float16", "highest", "F").cuda_source)
    reports = compile_cuda_batch(sources, arch)
    assert all(len(r) == 1 and r[0].spill_bytes == 0 for r in reports)


@pytest.mark.skipif(not (nvrtc_available() and toolkit_headers()),
                    reason="NVRTC or a CUDA toolkit's headers (mma.h) not installed")
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_nvrtc_compiles_every_kind(arch):
    for dtype, precision in KINDS:
        ptx = compile_nvrtc(_compile(GEMM, PARTIAL, dtype, precision).cuda_source, arch)
        assert "mma.sync" in ptx


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize(("dtype", "precision"), [("float16", "highest"), ("bfloat16", "highest"),
                                                  ("float32", "tf32"), ("float64", "highest")])
def test_sass_has_tensor_core_instructions_in_the_main_loop(dtype, precision):
    """HMMA or DMMA and no FFMA in the main loop, and fragments read from shared memory:
    ldmatrix (LDSM) for 16-bit types, shared loads for the others, never a generic load (LD),
    which WMMA's own loads of bfloat16, TF32 and float64 fragments were."""
    kernel = _compile(GEMM, {"i": 256, "j": 256, "k": 256}, dtype, precision)
    report = sass_report(kernel.cuda_source, "sm_90")[0]
    assert report.main_loop_mma > 0 and report.main_loop_ffma == 0
    opcodes = report.main_loop_opcodes
    assert "LD" not in opcodes, opcodes
    assert opcodes.get("LDSM" if dtype in ("float16", "bfloat16") else "LDS", 0) > 0, opcodes


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("async_copy", [False, True], ids=["plain", "async"])
@pytest.mark.parametrize("warps", [(1, 1), (2, 1), (2, 2)], ids=["1x1", "2x1", "2x2"])
def test_the_models_step_is_what_a_warp_issues(warps, async_copy):
    """The instructions the model has a warp issue per step are its SASS main loop's within
    20% (TF32 GEMM, whose copies nvcc does not widen): a block's copies are dealt to all its
    warps, so more warps copy less each (the model charged each warp the whole block's copies
    once, 2.5x the SASS with 2x2 warps)."""
    program = plan(GEMM, {"i": 512, "j": 512, "k": 512}, dtype="float32", precision="tf32")
    params = {"warps_m": warps[0], "warps_n": warps[1], "frags_m": 2, "frags_n": 2,
              "frags_k": 2, "async_copy": async_copy, "stages": 1, "split": 1}
    kernel = treduda.compile(GEMM, dict(program.sizes), precision="tf32", strategy="tensorcore",
                             params=params, cache=False)
    found = sass_report(kernel.cuda_source, "sm_90")[0].main_loop_instructions
    predicted = model_of(program, gpu("H100"), "tensorcore").step_instructions(kernel.params)
    assert abs(predicted / found - 1) < 0.2, (predicted, found)


@pytest.mark.parametrize(("dtype", "precision", "sizes"), [
    ("float16", "highest", {"i": 200, "j": 96, "k": 300}),
    ("float32", "3xtf32", {"i": 64, "j": 640, "k": 100}),
    ("float64", "highest", {"i": 300, "j": 300, "k": 64}),
    ("bfloat16", "deterministic", {"i": 64, "j": 64, "k": 4000})])
def test_bound_is_below_every_estimate_of_a_tensor_core_space(dtype, precision, sizes):
    deterministic = precision == "deterministic"  # a split into a workspace, then added
    searcher = Searcher(plan(GEMM, sizes, dtype=dtype, deterministic=deterministic,
                             precision="highest" if deterministic else precision), "H100",
                        "tensorcore")
    assert bound_paths_hold(searcher) > 100
    assert (searcher.branch_and_bound().best.prediction.seconds
            == searcher.exhaustive().best.prediction.seconds)


def test_the_h100_models_mma_issue_is_shared_by_the_blocks_a_wave_holds():
    """A 128 x 128 tile of 4 warps, two blocks an SM at most: 32 and 128 blocks leave one
    block an SM (one block's warps, its steps as fast), 136 two on the busiest."""
    params = {"warps_m": 2, "warps_n": 2, "frags_m": 4, "frags_n": 4, "frags_k": 2,
              "stages": 3, "split": 1, "mapping": "mma", "shared_layout": "pad",
              "free_layout": "group", "async_copy": True}

    def estimate(j: int):
        program = plan(GEMM, {"i": 1024, "j": j, "k": 4096}, "C", "float16")
        return model_of(program, gpu("H100"), "tensorcore").estimate(params)

    short, filled, doubled = (estimate(j) for j in (512, 2048, 2112))
    assert short.warps == filled.warps == 4 and doubled.warps == 8
    latency = [e.resources["latency"] for e in (short, filled, doubled)]
    assert latency[0] == latency[1] and latency[2] > 1.8 * latency[1]


@pytest.mark.parametrize(("dtype", "precision", "expected"), [
    ("float16", "highest", "tensorcore"), ("float32", "tf32", "tensorcore"),
    ("float32", "highest", "tiled+staged")])
def test_search_picks_tensor_cores_where_they_are_faster(dtype, precision, expected):
    """On the A100 (sm_80), where no warpgroup MMA is offered (the H100's picks:
    tests/test_warpgroup.py)."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype=dtype, precision=precision)
    result = search_program(program, "A100", max_nodes=300)
    assert result.best.strategy == expected
    assert "tensorcore" in {c.strategy for c in result.candidates} or precision == "highest"


def test_tensor_cores_are_offered_only_where_the_gpu_has_them():
    half = plan(GEMM, PARTIAL, dtype="bfloat16")
    assert "tensorcore" in offered(half, gpu("A100"))
    assert offered(half, gpu("V100")) == ("tiled+staged",)  # Volta: float16 only
    assert offered(plan(GEMM, PARTIAL, dtype="float64"), gpu("RTX3070")) == ("tiled+staged",)


def _suite_kernels(names: tuple[str, ...]) -> tuple[list[treduda.Kernel], int]:
    """Every row of the tensor-core suites ``names`` at full size, by the strategy's default
    tiles, and how many rows it refuses (not GEMM-shaped)."""
    from treduda.suites import SUITES, load

    kernels, refused = [], 0
    for name in names:
        suite = SUITES[name]
        for row in load(name):
            try:
                kernels.append(treduda.compile(row.expression, row.sizes, dtype=suite.dtype,
                                               precision=suite.precision, layout=row.layout,
                                               strategy="tensorcore", cache=False))
            except StrategyError:
                refused += 1
    return kernels, refused


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
@pytest.mark.parametrize("suites", [
    ("gemm_fp16", "gemm_bf16", "gemm_tf32"),
    pytest.param(("tccg_fp16", "tccg_bf16", "tccg_tf32"), marks=pytest.mark.matrix)],
    ids=["gemm", "tccg"])
def test_nvcc_and_nvrtc_compile_every_tensor_core_suite_kernel(suites):
    kernels, refused = _suite_kernels(suites)
    sources = [kernel.cuda_source for kernel in kernels]
    assert sources and refused < len(sources)
    for arch in ("sm_80", "sm_90"):
        reports = compile_cuda_batch(sources, arch)
        assert all(len(r) == 1 and r[0].registers > 0 for r in reports)
    if nvrtc_available() and toolkit_headers():  # as CuPy compiles them on a GPU
        for arch in ("compute_80", "compute_90"):
            assert all("mma.sync" in compile_nvrtc(source, arch) for source in sources)


@pytest.mark.matrix
@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_every_tccg_tensor_core_kernel_multiplies_on_tensor_cores():
    """HMMA in every TCCG kernel's SASS and no FFMA, and HMMA in the main loop wherever the
    reduction is a loop nvcc keeps (tccg_31-48 sum 24 values, one step; tccg_10 and 11 three
    steps, which nvcc unrolls)."""
    kernels, _ = _suite_kernels(("tccg_fp16", "tccg_tf32"))
    looped = 0
    for kernel in kernels:
        report = kernel.sass_report("sm_90")
        assert report.mma > 0 and report.ffma == 0, kernel.expression
        _, _, _, _, k, _ = gemm_groups(kernel.program)
        step = mma_shape(kernel.program)[2] * kernel.params["frags_k"]
        if math.prod(kernel.program.sizes[i] for i in k) >= 8 * step:
            assert report.main_loop_mma > 0, kernel.expression
            looped += 1
    assert looped >= 40


def test_the_index_groups_are_worked_out_once_per_program():
    """A search asks the program's index groups for each candidate: they are derived once
    (Program.derived), and again for a program replaced by another."""
    program = plan("C[a,b,c]=A[b,d,a]*B[d,c]", {"a": 24, "b": 40, "c": 16, "d": 32},
                   dtype="float16")
    assert gemm_groups(program) is gemm_groups(program)
    calls = []
    assert program.derived("probe", lambda p: calls.append(p) or len(calls)) == 1
    assert program.derived("probe", lambda p: calls.append(p) or len(calls)) == 1
    replaced = dataclasses.replace(program, layout="F")
    assert replaced.derived("probe", lambda p: calls.append(p) or len(calls)) == 2
    assert calls == [program, replaced]


def test_short_rows_side_by_side_in_memory_are_copied_in_whole_sectors():
    """tccg_31's B[g,f,b,c] (K = g, 24 values, 48 bytes) in B's memory order along N: the
    tile's rows lie side by side in B, so a request of eight rows reads the 12 sectors that
    hold them (16 when N followed the output's order and each row started a sector)."""
    row = next(r for r in load("tccg_fp16") if r.id == "tccg_31")
    kernel = _compile(row.expression, row.sizes, "float16", "highest", row.layout,
                      params={"warps_m": 2, "warps_n": 4, "frags_m": 4, "frags_n": 4,
                              "frags_k": 2, "split": 1, "stages": 2, "shared_layout": "pad",
                              "async_copy": True, "mapping": "mma"})
    assert gemm_groups(kernel.program)[3] == ("f", "b_c")
    loads = kernel.counters(steps=2).of("B", "ldgsts")
    assert loads.per_request == loads.ideal_per_request == 12


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_free_group_in_its_operands_order_runs_without_hazards_on_tensor_cores(arch):
    """The short rows' case, N in B's memory order (f before b_c, against the output's):
    the emulator computes einsum's result without a hazard and nvcc multiplies on HMMA."""
    expression, sizes = CASES["short_rows"]
    kernel = _compile(expression, sizes, "float16", "highest", "F",
                      params={"stages": 2, "async_copy": True, "mapping": "mma"})
    assert gemm_groups(kernel.program)[3] == ("f", "b_c")
    assert kernel.verify(backend="emulator").ok and kernel.hazards() == []
    assert sass_report(kernel.cuda_source, arch)[0].mma > 0
