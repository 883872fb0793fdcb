"""Asynchronous copies (cp.async) in the SIMT staging strategy (``tiled+staged``): its kernels
against numpy.einsum on PoCL, single- and double-buffered, in runs as wide as the tensors and
tiles allow; the emulator's hazards where the kernel waits and where it does not; LDGSTS in the
main loop on sm_80 and sm_90; the parameter offered only where the GPU has cp.async and where
the tiles hold the tensors' own elements; the model's counts (a cp.async per run instead of a
load and a store per element, no staging registers) and its bound below its estimate."""

from __future__ import annotations

import pytest
from conftest import bound_paths_hold, without
from treduda.strategies import get as get_strategy

import treduda
from treduda.codegen import ir
from treduda.errors import StrategyError
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import Limits
from treduda.run.nvcc import nvcc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.tuning.search import Searcher

GEMM = "C[i,j] = A[i,k]*B[k,j]"
# sizes no tile divides; each case's tiles small enough for PoCL and the emulator
CASES = {
    "gemm": (GEMM, {"i": 37, "j": 50, "k": 70},
             {"block_x": 8, "block_y": 4, "reg_x": 2, "reg_y": 2, "step": 8}),
    "tccg_03": ("C[a,b,c,d]=A[d,b,e,a]*B[e,c]", {"a": 10, "b": 6, "c": 12, "d": 9, "e": 20},
                {"order": "a,c,b", "block_x": 8, "block_y": 4, "reg_y": 2, "step": 8}),
    "tccg_13": ("C[a,b]=A[a,c,d]*B[d,b,c]", {"a": 20, "b": 18, "c": 6, "d": 12},
                {"order": "a,b", "block_x": 8, "block_y": 4, "reg_x": 2, "step": 4}),
}


def _compile(case: str, layout: str = "C", dtype: str = "float32", **params) -> treduda.Kernel:
    expression, sizes, tiles = CASES[case]
    return treduda.compile(expression, sizes, layout=layout, dtype=dtype,
                           strategy="tiled+staged",
                           params={**tiles, "stage": "A,B", "pad": 0, "async_copy": True,
                                   **params})


def _statements(kernel: treduda.Kernel, kind: type) -> list:
    return [s for s in ir.nested(kernel.built.kernel.body) if isinstance(s, kind)]


# GEMM in every layout, dtype and buffering; each TCCG row in both layouts and dtypes, single-
# and double-buffered (a test costs PoCL's compile: 2-5 s)
VERIFIED = [("gemm", layout, dtype, double) for layout in "CF" for dtype in ("float32", "float64")
            for double in (False, True)] + [
    (case, layout, dtype, (layout == "F") ^ (dtype == "float64") ^ (case == "tccg_13"))
    for case in ("tccg_03", "tccg_13") for layout in "CF" for dtype in ("float32", "float64")]


@pytest.mark.parametrize(("case", "layout", "dtype", "double_buffer"), VERIFIED,
                         ids=["-".join((c, lay, d, "double" if b else "single"))
                              for c, lay, d, b in VERIFIED])
def test_async_staged_copies_match_einsum(case, layout, dtype, double_buffer):
    kernel = _compile(case, layout, dtype, double_buffer=double_buffer)
    copies = _statements(kernel, ir.AsyncCopy)
    assert {c.target.array for c in copies} == {"A_sh", "B_sh"}
    assert any(c.zero for c in copies)  # partial tiles: runs outside the tensors zero-filled
    assert not any(isinstance(s.target, ir.Load) and s.target.array in ("A_sh", "B_sh")
                   for s in _statements(kernel, ir.Assign))  # nothing through registers
    assert _statements(kernel, ir.CommitCopies) and _statements(kernel, ir.WaitCopies)
    assert kernel.verify().ok


def test_runs_are_as_wide_as_tensor_tile_and_row_allow():
    """A[i,k] (C layout) has rows of k = 72 (16 bytes divide) and B[k,j] of j = 50 (8 bytes);
    a tile's row padded by one element leaves 4 bytes; float64 pairs where float32 takes 4."""
    def widths(sizes, dtype="float32", pad=0):
        kernel = treduda.compile(GEMM, sizes, dtype=dtype, strategy="tiled+staged",
                                 params={**CASES["gemm"][2], "stage": "A,B", "pad": pad,
                                         "async_copy": True})
        return {c.source.array: c.width for c in _statements(kernel, ir.AsyncCopy)}

    assert widths({"i": 37, "j": 50, "k": 72}) == {"A": 4, "B": 2}
    assert widths({"i": 37, "j": 50, "k": 72}, pad=1) == {"A": 1, "B": 1}
    assert widths({"i": 37, "j": 52, "k": 72}, "float64") == {"A": 2, "B": 2}


def test_double_buffered_copies_run_a_step_ahead():
    """Double-buffered, the first step's copies run before the loop over steps (its first
    iteration, peeled off: codegen.unroll.peel); in the loop the wait and the barrier come
    before the copies of the next step, which come before the step's FMAs."""
    kernel = _compile("gemm", double_buffer=True)
    source = kernel.cuda_source
    loop = source.index("for (int c7 = 0;")
    assert source.index("td_copy_async") < source.index("td_copy_commit") < loop
    wait, copy = source.index("td_copy_wait<0>", loop), source.index("td_copy_async", loop)
    commit, fma = source.index("td_copy_commit", loop), source.index("acc0[0] +=", loop)
    assert wait < copy < commit < fma


@pytest.mark.parametrize(("case", "double_buffer"),
                         [("gemm", False), ("gemm", True), ("tccg_13", True)])
def test_emulator_finds_no_hazard_where_the_copies_are_waited_for(case, double_buffer):
    kernel = _compile(case, double_buffer=double_buffer)
    assert kernel.hazards() == []


@pytest.mark.parametrize("double_buffer", [False, True], ids=["single", "double"])
def test_emulator_reports_reads_before_the_wait_or_the_barrier(double_buffer):
    kernel = _compile("gemm", double_buffer=double_buffer)
    # PoCL copies at once, so only the emulator can tell that the data arrive at the wait
    unwaited = without(kernel, ir.WaitCopies).hazards()
    assert "unfinished async copy" in {h.kind for h in unwaited}
    # waited for, but read by other threads before the barrier after the wait
    assert "race" in {h.kind for h in without(kernel, ir.Barrier).hazards()}


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(("dtype", "double_buffer"), [("float32", True), ("float64", False)])
def test_sass_copies_with_ldgsts_in_the_main_loop(arch, dtype, double_buffer):
    kernel = treduda.compile(GEMM, {"i": 256, "j": 256, "k": 256}, dtype=dtype,
                             strategy="tiled+staged",
                             params={"async_copy": True, "double_buffer": double_buffer,
                                     "pad": 0})
    report = sass_report(kernel.cuda_source, arch)[0]
    assert report.main_loop_async_copies > 0 and report.main_loop_ffma > 0
    assert not report.global_load_widths  # every operand goes global -> shared directly
    assert "__align__(16)" in kernel.cuda_source  # the tiles' rows take 16-byte copies


def test_offered_only_where_the_gpu_and_the_dtype_allow():
    program = plan(GEMM, CASES["gemm"][1])
    staged = get_strategy("tiled+staged")
    assert staged.space(program).parameter("async_copy").values == (False, True)
    older = get_strategy("tiled+staged", Limits(async_copies=False)).space(program)
    assert [c.description for c in older.violated({**staged.defaults(program),
                                                    "async_copy": True})] == [
        "asynchronous copies need compute capability 8.0 (cp.async)"]
    for dtype in ("float16", "complex64"):  # tiles of float32, or of pairs
        half = staged.space(plan(GEMM, CASES["gemm"][1], dtype=dtype))
        assert half.parameter("async_copy").values == (False,)
    with pytest.raises(StrategyError, match="preload"):
        _compile("gemm", preload=True)
    assert Searcher(plan(GEMM, CASES["gemm"][1]), "V100").space.parameter(
        "async_copy").values == (False, True)  # declared, but every point says False
    assert not any(p["async_copy"] for p in Searcher(
        plan(GEMM, {"i": 64, "j": 64, "k": 16}), "V100",
        values={"block_x": (16,), "block_y": (8,), "reg_x": (2,), "reg_y": (2,),
                "step": (8,)}).space.points())


def test_model_counts_a_cp_async_per_run_and_no_registers():
    """GEMM 4096^3's double-buffered pick: the issue slots of a load and a store per element
    become one cp.async per 16-byte run, the step's L2 latency is no longer exposed, and the
    registers are those of the copies through registers without preloading."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096})
    model = Model(program, gpu("H100"))
    pick = {"order": "j,i", "stage": "A,B", "block_x": 16, "reg_x": 8, "assign_x": "cyclic",
            "block_y": 32, "reg_y": 8, "assign_y": "cyclic", "block_z": 1, "reg_z": 1,
            "assign_z": "cyclic", "step": 16, "split": 1, "preload": False,
            "double_buffer": True, "pad": 0, "unroll": True}
    plain, copied = (model.estimate({**pick, "async_copy": a}) for a in (False, True))
    assert copied.resources["issue"] < plain.resources["issue"]
    assert copied.resources["latency"] < plain.resources["latency"]
    assert model.registers({**pick, "async_copy": True}) == model.registers(
        {**pick, "async_copy": False})
    preloaded = model.registers({**pick, "preload": True, "async_copy": False})
    assert model.registers({**pick, "async_copy": True})[0] < preloaded[0]


def test_bound_is_below_estimate_with_async_copies_in_float64():
    """An enumerated float64 space on a GPU with cp.async, both values of async_copy."""
    searcher = Searcher(plan(GEMM, {"i": 72, "j": 40, "k": 36}, dtype="float64"), "A100",
                        values={"block_x": (8, 16), "block_y": (4,), "reg_x": (1, 2),
                                "reg_y": (2,), "block_z": (1,), "reg_z": (1,),
                                "step": (4, 8), "order": ("j,i",)})
    assert {p["async_copy"] for p in searcher.space.points()} == {False, True}
    assert bound_paths_hold(searcher) > 100


def test_the_search_picks_async_copies_for_gemm_4096_on_h100_and_its_kernel_verifies():
    """Asynchronous copies take the preloaded pick's place (a cp.async per 16-byte run issues
    fewer instructions than a load and a store per element); its parameters compute GEMM right
    at sizes PoCL runs quickly. (Single-buffered since the model counts the double buffer's
    index arithmetic, 2.96 ms against 3.03: a hypothesis no GPU has timed yet.)"""
    result = treduda.search(GEMM, {"i": 4096, "j": 4096, "k": 4096}, "H100")
    best = result.best
    assert best.params["async_copy"] and not best.params["preload"]
    kernel = treduda.compile(GEMM, {"i": 264, "j": 136, "k": 40}, strategy=best.strategy,
                             params=best.params)
    assert _statements(kernel, ir.AsyncCopy) and kernel.verify().ok
