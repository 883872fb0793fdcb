"""The cost model as a stage of its own (issue 40): one estimator answers for a kernel wherever
it is asked, and the model's counts read as formulas of the sizes and tile parameters."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import needs_nvcc
from test_sass import LISTING

import treduda
from treduda.model.formulas import lambdified
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.model.optimist import _Optimist
from treduda.model.prediction import FULL_TILES_TESTS, Compiled, full_tiles_loop
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import marked
from treduda.run.nvcc import CudaReport
from treduda.run.sass import find_disassembler, parse_sass
from treduda.tuning.search import offered, quick, search_program

GEMM = "C[i,j] = A[i,k]*B[k,j]"
SIZES = {"i": 300, "j": 200, "k": 260}  # no multiple of any tile


def test_the_search_reads_the_strategies_marks_not_their_names():
    """The quick strategy and those offered beside the default come from marks that
    registered strategies set on their own class (a subclass does not inherit them)."""
    assert quick() == "tiled" and "thread_per_element" not in marked("quick")
    h100 = gpu("H100")
    assert offered(plan(GEMM, SIZES, dtype="float16"), h100) == ("tiled+staged", "tensorcore",
                                                                  "warpgroup")
    assert offered(plan(GEMM, SIZES), h100) == ("tiled+staged",)  # no tensor cores for FP32
    assert offered(plan(GEMM, SIZES, dtype="float16"), h100, "tiled") == ("tiled",)


def test_held_parameters_narrow_the_search_to_the_strategies_that_have_them():
    """`treduda bench --hold staged_b=True` searches the warpgroup mapping alone; a parameter
    no strategy has leaves the default, whose search then names the parameters it has."""
    half, h100 = plan(GEMM, SIZES, dtype="float16"), gpu("H100")
    assert offered(half, h100, values={"staged_b": (True,)}) == ("warpgroup",)
    assert offered(half, h100, values={"pad": (0,)}) == ("tiled+staged",)
    assert offered(half, h100, values={"nothing": (1,)}) == ("tiled+staged",)
    assert offered(half, gpu("A100"), values={"staged_b": (True,)}) == ("tiled+staged",)


@pytest.mark.parametrize(("dtype", "strategy"), [("float32", "tiled+staged"),
                                                 ("float16", "tensorcore")])
def test_kernel_estimate_is_the_searchs_estimate(dtype, strategy):
    result = treduda.search(GEMM, SIZES, dtype=dtype, strategy=strategy)
    best = result.best
    kernel = treduda.compile(GEMM, SIZES, dtype=dtype, strategy=best.strategy,
                             params=best.params)
    assert kernel.estimate(result.gpu, use_nvcc=False).seconds == best.prediction.seconds


@needs_nvcc
def test_kernel_estimate_is_the_checked_searchs_estimate():
    """With nvcc, both read ptxas's registers and spills, and where a disassembler is found
    the instructions per FFMA of the SASS main loop if it is the full tiles': the search's
    check of its winner and the kernel's refinement by its model."""
    result = treduda.search(GEMM, SIZES, check=True)
    best = result.best
    assert best.compiled is not None
    kernel = treduda.compile(GEMM, SIZES, strategy=best.strategy, params=best.params)
    assert kernel.estimate(result.gpu).seconds == best.prediction.seconds
    sass = kernel.sass_report() if find_disassembler() else None
    read = sass is not None and full_tiles_loop(sass)
    assert best.compiled.instructions_per_fma == (
        sass.main_loop_instructions / sass.main_loop_ffma if read else None)


def test_a_gemm_candidates_traffic_is_a_formula_equal_to_the_count():
    program = plan(GEMM, SIZES)
    h100 = gpu("H100")
    params = search_program(program, h100, strategy="tiled+staged", max_nodes=300).best.params
    model = Model(program, h100, "tiled+staged")
    formulas, values = model.formulas(params)
    for name, formula in formulas.items():
        print(f"{name} = {formula}")
    dram = model.estimate(params).resources["dram"] * h100.dram_bandwidth
    assert float(formulas["dram"].subs(values)) == pytest.approx(dram, rel=1e-12)
    names = {str(s) for s in formulas["traffic A"].free_symbols}  # sizes and tiles
    assert {"N_i", "N_k"} <= names and any(n.startswith("block_") for n in names)
    optimist = _Optimist(model, model.describe(params))
    for read in model.reads:
        formula = formulas[f"traffic {read.tensor}"]
        assert int(formula.subs(values)) == optimist.traffic(read)
        symbols, function = lambdified(formula)  # made once, evaluated with numbers
        assert function(*(values[s] for s in symbols)) == optimist.traffic(read)


def test_a_compiled_candidates_issue_is_its_sass_main_loops():
    """Issue 40, by hand: the listing's main loop issues 8 instructions for 3 FFMAs, so a
    float32 candidate compiled so is estimated at 8/3 warp instructions per multiply-add (one
    FFMA each) in place of the model's count, ptxas's registers alike; where no SASS was read
    the count stands, and so it does for 3xTF32, whose multiply-adds are not FFMAs alone."""
    ptxas = CudaReport("gemm", "sm_90", 64, 0, 0, 0, 0)
    listed = parse_sass(LISTING, "sm_90")[0]
    compiled = Compiled.of(ptxas, listed)
    assert compiled == Compiled(64, 0, 8 / 3, 0.0)  # and no local memory in its loop
    # a loop testing more than a full tiles' loop does is a bounds-testing path: not read
    tests = {**listed.main_loop_opcodes, "ISETP": FULL_TILES_TESTS}
    assert Compiled.of(ptxas, replace(listed, main_loop_opcodes=tests)) == compiled
    tests["ISETP"] += 1
    assert Compiled.of(ptxas, replace(listed, main_loop_opcodes=tests)) == Compiled(64)
    h100 = gpu("H100")
    for precision, issued in (("highest", 8 / 3), ("3xtf32", None)):
        program = plan(GEMM, SIZES, precision=precision)
        # preloaded: no step stalls for the SM, which an issue count would also change
        values = {"preload": (True,)}
        params = search_program(program, h100, strategy="tiled+staged", values=values,
                                max_nodes=300).best.params
        model = Model(program, h100, "tiled+staged")
        counted = model.estimate(params, Compiled(64)).resources
        sass = model.estimate(params, compiled).resources
        count = sum(model.issue_instructions(params).values())
        assert sass["issue"] == pytest.approx(counted["issue"] * (issued or count) / count,
                                              rel=1e-12)
        assert {k: v for k, v in sass.items() if k != "issue"} == {
            k: v for k, v in counted.items() if k != "issue"}
