"""What a newcomer tries first, as numpy.einsum and opt_einsum users expect it: rank-0 outputs on
every path, out=, kernels kept for repeated calls, implicit output, empty axes, errors that name
the mistake."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
from conftest import needs_nvcc, strategy_names

import treduda
from treduda import api, generation
from treduda.errors import (
    ArgumentError,
    DtypeError,
    MissingArray,
    MissingSize,
    ShapeMismatch,
    StrategyError,
    TredudaError,
)
from treduda.frontend import parse
from treduda.polyhedral import lower
from treduda.polyhedral.lower import plan
from treduda.run import opencl
from treduda.tuning import policy
from treduda.tuning.search import Searcher, quick

RANK0 = [("s[] = A[i]*B[i]", {"i": 37}), ("s[] = alpha*A[i,j]*B[j,i] + beta*s[]",
                                          {"i": 13, "j": 29})]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_contract_to_a_rank0_output_matches_einsum(dtype):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(37).astype(dtype), rng.standard_normal(37).astype(dtype)
    s = treduda.contract("s[]=A[i]*B[i]", A=a, B=b)
    assert s.shape == () and s.dtype == dtype
    np.testing.assert_allclose(s, np.einsum("i,i->", a, b), rtol=1e-5)


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("expr", "sizes"), RANK0, ids=["dot", "trace-scaled"])
def test_a_searched_rank0_kernel_verifies_on_pocl_and_the_emulator(expr, sizes, layout):
    kernel = treduda.compile(expr, sizes, layout=layout, cache=False)  # no strategy: searched
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


@pytest.mark.parametrize("strategy", strategy_names())
def test_every_strategy_computes_a_rank0_output(strategy):
    expr, sizes = RANK0[1]
    assert treduda.compile(expr, sizes, strategy=strategy).verify().ok


@needs_nvcc
def test_a_searched_rank0_kernel_compiles_as_cuda():
    expr, sizes = RANK0[1]
    assert treduda.compile(expr, sizes, cache=False).compile_cuda().spill_stores == 0


@pytest.mark.parametrize(("expr", "sizes"), RANK0, ids=["dot", "trace-scaled"])
def test_the_rank0_bound_is_below_the_estimate_of_every_candidate(expr, sizes):
    searcher = Searcher(plan(expr, sizes), restrict=False)
    points = list(searcher.space.points())
    assert len(points) > 50
    for point in points:
        assert searcher.model.bound(point).seconds <= searcher.model.estimate(point).seconds
    assert searcher.model.bound({}).seconds <= min(searcher.model.estimate(p).seconds
                                                   for p in points)


def test_out_is_filled_and_returned_like_numpy_einsum():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 9))
    out = np.full((7, 9), np.nan)
    result = treduda.contract("ik,kj->ij", a, b, out=out)
    assert result is out
    np.testing.assert_allclose(out, np.einsum("ik,kj->ij", a, b), rtol=1e-12)
    wide = np.zeros((7, 9), np.float64)  # float32 casts safely into float64
    treduda.contract("ik,kj->ij", a.astype(np.float32), b.astype(np.float32), out=wide)
    np.testing.assert_allclose(wide, a @ b, atol=1e-5)


def test_out_holds_the_old_values_of_an_accumulation():
    a, b = np.ones((3, 4)), np.ones((4, 5))
    out = np.full((3, 5), 10.0)
    assert treduda.contract("C[i,j] += A[i,k]*B[k,j]", A=a, B=b, out=out) is out
    np.testing.assert_allclose(out, 14.0)


@pytest.mark.parametrize(("out", "error", "message"), [
    (np.zeros((7, 8)), ShapeMismatch, r"out has shape \(7, 8\) but the output has shape \(7, 9\)"),
    (np.zeros((7, 9), np.float32), DtypeError, "float64 does not cast under casting='safe'"),
    ([[0.0] * 9] * 7, ArgumentError, "out must be an array"),
])
def test_a_wrong_out_is_refused_before_anything_runs(out, error, message):
    with pytest.raises(error, match=message):
        treduda.contract("ik,kj->ij", np.ones((7, 5)), np.ones((5, 9)), out=out)


def test_out_and_the_output_name_together_are_refused():
    c = np.zeros((3, 5))
    with pytest.raises(ArgumentError, match="as C= or as out=, not both"):
        treduda.contract("C[i,j] += A[i,k]*B[k,j]", A=np.ones((3, 4)), B=np.ones((4, 5)), C=c,
                         out=c)


def test_a_repeated_contract_generates_and_builds_its_kernel_once(monkeypatch):
    build, builds = generation.build, []
    monkeypatch.setattr(generation, "build", lambda *args: builds.append(args) or build(*args))
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((23, 17)), rng.standard_normal((17, 29))  # sizes no test shares
    programs = opencl._program.cache_info().misses
    for _ in range(3):
        c = treduda.contract("C[i,j] = A[i,k]*B[k,j]", A=a, B=b, strategy="tiled")
        np.testing.assert_allclose(c, a @ b, rtol=1e-12)
    assert len(builds) == 1
    assert opencl._program.cache_info().misses == programs + 1
    treduda.contract("C[i,j] = A[i,k]*B[k,j]", A=a, B=b, strategy="tiled", dtype="float32",
                     casting="same_kind")  # float64 arrays: numpy refuses them by default
    assert len(builds) == 2  # another dtype is another kernel


def test_compile_keeps_its_kernel_and_contract_after_it_reuses_it(monkeypatch):
    """compile() keeps its kernels under contract's key: the same call (sizes in any order)
    returns the same Kernel without generating, searching or asking the tuning cache."""
    sizes = {"i": 19, "j": 26, "k": 11}  # sizes no other test shares
    chosen = treduda.compile("C[i,j] = A[i,k]*B[k,j]", sizes, strategy="tiled",
                             params={"block_x": 8, "reg_x": 2})
    searched = treduda.compile("C[i,j] = A[i,k]*B[k,j]", sizes)
    for owner, name in ((generation, "build"), (policy, "search_program"),
                        (api.TuningCache, "get")):
        monkeypatch.setattr(owner, name, lambda *args, name=name, **kwargs: pytest.fail(name))
    again = treduda.compile("C[i,j] = A[i,k]*B[k,j]", dict(reversed(sizes.items())),
                            strategy="tiled", params={"reg_x": 2, "block_x": 8})
    assert again is chosen and dict(again.params)["reg_x"] == 2
    assert treduda.compile("C[i,j] = A[i,k]*B[k,j]", sizes) is searched
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((19, 11), (11, 26)))
    for params in ({"block_x": 8, "reg_x": 2}, None):
        c = treduda.contract("C[i,j] = A[i,k]*B[k,j]", A=a, B=b, strategy=params and "tiled",
                             params=params)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _counted(monkeypatch, function) -> list:
    """Every call of ``function``, from whichever treduda module imported it."""
    calls: list = []

    def counting(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)

    for module in [m for name, m in sys.modules.items() if name.startswith("treduda")]:
        if getattr(module, function.__name__, None) is function:
            monkeypatch.setattr(module, function.__name__, counting)
    return calls


def test_an_uncached_searched_compile_parses_once_and_lowers_once(monkeypatch):
    parses, lowers = _counted(monkeypatch, parse.parse), _counted(monkeypatch, lower.lower)
    kernel = treduda.compile("C[a,b] = A[a,k]*B[k,b]", {"a": 40, "b": 24, "k": 16}, cache=False)
    assert kernel.strategy == quick()  # searched (small: its first good candidate)
    assert (len(parses), len(lowers)) == (1, 1)


def test_contract_expression_is_planned_once_and_called_many_times():
    rng = np.random.default_rng(4)
    planned = treduda.contract_expression("ik,kj", (31, 12), (12, 45), dtype="float64")
    assert planned.kernel is not None and planned.sizes == {"i": 31, "j": 45, "k": 12}
    for _ in range(2):
        a, b = rng.standard_normal((31, 12)), rng.standard_normal((12, 45))
        np.testing.assert_allclose(planned(a, b), np.einsum("ik,kj", a, b), rtol=1e-12)
    with pytest.raises(ShapeMismatch, match="compiled for"):
        planned(np.ones((31, 13)), np.ones((13, 45)))
    scaled = treduda.contract_expression("C[i] = alpha*A[i,k]*x[k] + C[i]", A=(9, 14), x=(14,))
    # planned in float32, its default: float64 arrays would be refused (casting="safe")
    x, m, c = np.ones(14, np.float32), np.ones((9, 14), np.float32), np.arange(9.0, dtype="f4")
    np.testing.assert_allclose(scaled(A=m, x=x, C=c, alpha=0.5), c + 7.0, rtol=1e-6)


@pytest.mark.parametrize(("implicit", "explicit"), [
    ("ik,kj", "ik,kj->ij"), ("ji", "ji->ij"), ("ba,cb,ad", "ba,cb,ad->cd"), ("i,i", "i,i->")])
def test_implicit_output_matches_numpy_einsum(implicit, explicit):
    rng = np.random.default_rng(5)
    extents = {"a": 5, "b": 7, "c": 3, "d": 6, "i": 11, "j": 9, "k": 4}
    arrays = [rng.standard_normal([extents[i] for i in spec])
              for spec in implicit.split(",")]
    expected = np.einsum(implicit, *arrays)
    assert expected.shape == np.einsum(explicit, *arrays).shape
    np.testing.assert_allclose(treduda.contract(implicit, *arrays), expected, rtol=1e-10)


@pytest.mark.parametrize(("spec", "shapes"), [
    ("ik,kj->ij", [(3, 0), (0, 4)]),  # an empty sum: zeros
    ("ik,kj->ij", [(0, 5), (5, 4)]),  # an empty output
    ("i,i->", [(0,), (0,)]),  # rank 0: 0.0
])
def test_empty_axes_give_what_numpy_einsum_gives_without_a_launch(spec, shapes, monkeypatch):
    monkeypatch.setattr(opencl, "run_opencl", _no_launch)
    arrays = [np.ones(shape) for shape in shapes]
    result = treduda.contract(spec, *arrays)
    expected = np.einsum(spec, *arrays)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    np.testing.assert_array_equal(result, expected)


def test_an_empty_sum_keeps_the_other_terms():
    c = np.arange(6.0).reshape(2, 3)
    result = treduda.contract("C[i,j] = A[i,k]*B[k,j] + beta*C[i,j]", A=np.ones((2, 0)),
                              B=np.ones((0, 3)), C=c, beta=2.0)
    np.testing.assert_array_equal(result, 2 * c)


def _no_launch(*args, **kwargs):
    raise AssertionError("a kernel was launched for an empty axis")


@pytest.mark.parametrize(("values", "error", "old", "message"), [
    ({"A": np.ones((3, 4)), "b": np.ones((4, 2))}, ArgumentError, ShapeMismatch,
     "no argument 'b'; did you mean 'B'?"),
    ({"A": np.ones((3, 4)), "B": np.ones((4, 2)), "alpah": 1.0}, ArgumentError, ShapeMismatch,
     "no argument 'alpah'; did you mean 'alpha'?"),
    ({"A": np.ones((3, 4)), "B": np.ones((4, 2)), "alpha": 1.0, "dtyp": "float64"},
     ArgumentError, ShapeMismatch, "no argument 'dtyp'; did you mean 'dtype'?"),
    ({"A": np.ones((3, 4)), "alpha": 1.0}, MissingArray, MissingSize, "no array for the input B"),
    ({"A": np.ones((3, 4)), "B": np.ones((4, 2))}, MissingArray, MissingSize,
     "no value for scalar"),
    ({"A": np.ones((3, 4)), "B": np.ones((4, 2), bool).astype("U1"), "alpha": 1.0}, DtypeError,
     ShapeMismatch, "B has dtype <U1"),
])
def test_errors_name_the_mistake_and_old_except_clauses_still_catch_them(values, error, old,
                                                                         message):
    with pytest.raises(error, match=re.escape(message)) as raised:
        treduda.contract("C[i,j] = alpha*A[i,k]*B[k,j]", **values)
    assert isinstance(raised.value, old) and isinstance(raised.value, TredudaError)


def test_option_errors_keep_their_old_classes():
    with pytest.raises(DtypeError) as raised:
        treduda.compile("C[i] = A[i]", {"i": 4}, dtype="float128")
    assert isinstance(raised.value, StrategyError)
    with pytest.raises(ArgumentError, match="3 arrays given") as raised:
        treduda.contract("ik,kj->ij", np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)))
    assert isinstance(raised.value, StrategyError)
    with pytest.raises(ArgumentError, match="did you mean 'k'"):
        treduda.compile("C[i] = A[i,k]", {"i": 4, "K": 3})
    with pytest.raises(ArgumentError, match="did you mean 'x'"):
        treduda.compile("C[i] = x[i]", {"i": 4}, strategy="tiled").run(X=np.ones(4))


def test_a_kernel_and_its_schedule_hand_out_read_only_parameters():
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 20, "j": 12, "k": 8},
                             strategy="tiled", params={"block_x": 4})
    scheduled = treduda.strategies.get("tiled").apply(kernel.program, {"block_x": 4})
    for params in (kernel.params, scheduled.params):
        with pytest.raises(TypeError):
            params["block_x"] = 8  # type: ignore[index]
        assert params["block_x"] == 4
    copy = dict(kernel.params)  # a copy is an ordinary dict: JSON, the cache and edits take it
    copy["block_x"] = 8
    assert json.loads(json.dumps(copy))["block_x"] == 8 and kernel.params["block_x"] == 4
    assert dict(scheduled.params) == dict(kernel.params)
    assert treduda.compile(kernel.expression, kernel.sizes, strategy=kernel.strategy,
                           params=kernel.params).name == kernel.name  # replayed as given
