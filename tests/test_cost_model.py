"""The cost model as a stage of its own (issue 40): one estimator answers for a kernel wherever
it is asked, and the model's counts read as formulas of the sizes and tile parameters."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

import treduda
from treduda.model.formulas import lambdified
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.model.optimist import _Optimist
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import marked
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
    """With nvcc, both read ptxas's registers and spills: the search's check of its winner
    and the kernel's refinement by its model."""
    result = treduda.search(GEMM, SIZES, check=True)
    best = result.best
    assert best.compiled is not None
    kernel = treduda.compile(GEMM, SIZES, strategy=best.strategy, params=best.params)
    assert kernel.estimate(result.gpu).seconds == best.prediction.seconds


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
