"""One options value (issue 42): :class:`treduda.Options` is checked once, derived with
``replace``, hashable, and the same call whether given as ``options=`` or as keywords; tensors
named like options are passed by position or in a mapping (or refused before any work); and
the path planner costs a product's steps with the options' precision and determinism."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import treduda
from treduda.errors import ArgumentError, DtypeError
from treduda.frontend.contraction import analyse
from treduda.tuning import paths

RNG = np.random.default_rng(42)
A, B = RNG.uniform(-1, 1, (5, 7)).astype(np.float32), RNG.uniform(-1, 1, (7, 3)).astype(np.float32)
NAMES = ("dtype", "gpu", "out", "precision", "strategy", "budget")  # issue 42's Done-when
CHAIN = "D[i,l] = A[i,j]*B[j,k]*C[k,l]"


def test_options_are_frozen_hashable_and_derived_with_replace():
    options = treduda.Options(dtype=np.float64, params={"block_x": 4}, optimize=[(0, 1)])
    assert options.dtype == "float64" and options.params == (("block_x", 4),)
    assert options.optimize == ((0, 1),)  # numpy's list path, as a hashable tuple
    assert options == treduda.Options(dtype="float64", params={"block_x": 4},
                                      optimize=((0, 1),))
    assert len({options, treduda.Options(dtype="float64", params={"block_x": 4},
                                         optimize=[(0, 1)])}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.dtype = "float32"  # type: ignore[misc]
    tf32 = options.replace(dtype="float32", precision="tf32")
    assert (tf32.precision, options.precision, tf32.params) == ("tf32", "highest",
                                                                options.params)


@pytest.mark.parametrize(("fields", "error", "message"), [
    ({"precision": "fp8"}, DtypeError, "precision 'fp8' is not supported"),
    ({"dtype": "float64", "precision": "tf32"}, DtypeError, "rounds float32 inputs"),
    ({"dtype": "float128"}, DtypeError, "dtype 'float128' is not supported"),
    ({"casting": "lossy"}, DtypeError, "casting='lossy' is not one of numpy's"),
    ({"backend": "cdua"}, ArgumentError, "did you mean 'cuda'"),
    ({"tune": "fastest"}, ArgumentError, "tune must be one of incremental, model"),
    ({"budget": -1}, ArgumentError, "budget must be a number of seconds > 0"),
    ({"budget": "1"}, ArgumentError, "budget must be a number of seconds > 0"),
    ({"deterministic": "yes"}, ArgumentError, "deterministic must be True, False or None"),
    ({"layout": "K"}, ArgumentError, "layout must be 'C'"),
    ({"optimize": "fastest"}, ArgumentError, "optimize must be False, True"),
])
def test_each_field_is_checked_when_the_value_is_made(fields, error, message):
    with pytest.raises(error, match=message):
        treduda.Options(**fields)
    with pytest.raises(error, match=message):  # and when one is derived
        treduda.Options().replace(**fields)


def test_a_misspelt_field_and_an_option_an_entry_point_does_not_take_are_named():
    with pytest.raises(ArgumentError, match="no option 'precison'; did you mean 'precision'"):
        treduda.Options().replace(precison="tf32")
    with pytest.raises(ArgumentError, match=r"compile\(\) does not take the option casting="):
        treduda.compile("C[i] = A[i]", {"i": 4}, casting="unsafe")
    with pytest.raises(ArgumentError, match="options must be a treduda.Options, got dict"):
        treduda.contract("ik,kj->ij", A, B, options={"precision": "tf32"})


def test_keywords_are_sugar_for_options_and_override_its_fields():
    expected = np.einsum("ik,kj->ij", A, B)
    by_keyword = treduda.contract("ik,kj->ij", A, B, precision="tf32", strategy="tiled")
    by_value = treduda.contract("ik,kj->ij", A, B,
                                options=treduda.Options(precision="tf32", strategy="tiled"))
    np.testing.assert_array_equal(by_keyword, by_value)
    np.testing.assert_allclose(by_value, expected, rtol=1e-2, atol=1e-2)
    wider = treduda.contract("ik,kj->ij", A, B, options=treduda.Options(dtype="float32"),
                             dtype="float64")
    assert wider.dtype == np.float64
    np.testing.assert_allclose(wider, np.einsum("ik,kj->ij", A, B, dtype="float64"),
                               rtol=1e-12)
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 5, "j": 3, "k": 7},
                             options=treduda.Options(strategy="tiled"), params={"block_x": 4})
    assert (kernel.strategy, kernel.params["block_x"]) == ("tiled", 4)
    np.testing.assert_allclose(kernel.run(A=A, B=B), expected, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_a_tensor_named_like_an_option_is_computed_by_position_or_in_the_mapping(name):
    expr = f"C[i,j] = {name}[i,k]*B[k,j]"
    expected = np.einsum("ik,kj->ij", A, B)
    np.testing.assert_allclose(treduda.contract(expr, A, B), expected, rtol=1e-5)
    np.testing.assert_allclose(treduda.contract(expr, arrays={name: A, "B": B}), expected,
                               rtol=1e-5)
    planned = treduda.contract_expression(expr, named_shapes={name: A.shape}, B=B.shape)
    np.testing.assert_allclose(planned(arrays={name: A}, B=B), expected, rtol=1e-5)


def test_the_option_and_the_tensor_of_its_name_are_both_honoured():
    """``dtype=`` stays the option (float64) while the tensor ``dtype`` comes in arrays=."""
    result = treduda.contract("C[i,j] = dtype[i,k]*gpu[k,j]", arrays={"dtype": A, "gpu": B},
                              dtype="float64", gpu="A100")
    assert result.dtype == np.float64
    np.testing.assert_allclose(result, np.einsum("ik,kj->ij", A.astype(np.float64), B),
                               rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_a_tensor_named_like_an_option_passed_by_keyword_is_refused_before_any_work(
        name, nothing_planned):
    message = f"pass it by position or in arrays={{'{name}': ...}}"
    with pytest.raises(ArgumentError, match=message.replace("{", "\\{").replace("}", "\\}")):
        treduda.contract(f"C[i,j] = {name}[i,k]*B[k,j]", B=B, **{name: A})
    with pytest.raises(ArgumentError, match=f"the tensor {name} has the name of"):
        treduda.contract(f"C[i,j] = alpha*A[i,k]*{name}[k,j]", A, alpha=2.0)  # not given


@pytest.mark.parametrize("name", ["precision", "budget"])
def test_a_scalar_named_like_an_option_goes_in_the_mapping(name, nothing_planned):
    with pytest.raises(ArgumentError, match=f"in arrays={{'{name}'"):
        treduda.contract(f"C[i] = {name}*A[i,k]*x[k]", A, np.ones(7, np.float32))


@pytest.mark.parametrize("name", ["precision", "budget"])
def test_a_scalar_named_like_an_option_is_computed_from_the_mapping(name):
    x = RNG.uniform(-1, 1, 7).astype(np.float32)
    result = treduda.contract(f"C[i] = {name}*A[i,k]*x[k]", A, x, arrays={name: 0.5})
    np.testing.assert_allclose(result, 0.5 * A @ x, rtol=1e-5)


def test_a_programs_tensors_named_like_options_come_in_shapes_and_arrays(nothing_planned):
    text = "T[i,k] = precision[i,j]*B[j,k]; D[i,l] = T[i,k]*keep[k,l]"
    with pytest.raises(ArgumentError, match=r"in shapes=\{'precision': ...\}"):
        treduda.program(text, precision=(5, 7), B=(7, 3), keep=(3, 4))
    plan = treduda.program(text)  # planned at its first call: nothing made yet
    c = np.ones((3, 4), np.float32)
    with pytest.raises(ArgumentError, match=r"in arrays=\{'keep': ...\}"):
        plan(precision=A, B=B, keep=c)


def test_a_programs_tensors_named_like_options_are_computed():
    text = "T[i,k] = precision[i,j]*B[j,k]; D[i,l] = T[i,k]*keep[k,l]"
    c = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    plan = treduda.program(text, shapes={"precision": A.shape, "keep": c.shape}, B=B.shape,
                           strategy="thread_per_element")
    result = plan(arrays={"precision": A, "keep": c}, B=B)
    np.testing.assert_allclose(result["D"], A @ B @ c, rtol=1e-5)


def _spied_planning(monkeypatch) -> list[dict]:
    """What the path planner plans each step with (precision, deterministic), recorded."""
    seen: list[dict] = []
    real = paths.plan

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    paths._first.cache_clear()  # steps costed before in this process are costed again
    monkeypatch.setattr(paths, "plan", spy)
    return seen


def test_a_tf32_programs_path_is_costed_at_tf32(monkeypatch):
    sizes = dict.fromkeys("ijkl", 300)
    seen = _spied_planning(monkeypatch)
    plan = treduda.program(CHAIN, sizes, precision="tf32", strategy="thread_per_element")
    assert seen and all(kwargs["precision"] == "tf32" for kwargs in seen)
    highest = paths.choose(analyse(CHAIN), sizes, treduda.Options())
    # costed at tf32: its steps may take tensor cores (faster) or round on the FP32 path
    assert plan.paths[0].chosen.seconds != highest.chosen.seconds


def test_a_deterministic_path_is_costed_without_atomic_additions(monkeypatch):
    sizes = dict.fromkeys("ijkl", 300)
    seen = _spied_planning(monkeypatch)
    ordered = paths.choose(analyse(CHAIN), sizes, treduda.Options(deterministic=True))
    assert seen and all(kwargs["deterministic"] is True for kwargs in seen)
    with treduda.use_deterministic(True):  # the process's default reaches it too
        assert paths.choose(analyse(CHAIN), sizes).chosen.seconds == ordered.chosen.seconds
    atomic = paths.choose(analyse(CHAIN), sizes, treduda.Options(deterministic=False))
    assert ordered.chosen.seconds > atomic.chosen.seconds


def test_a_tf32_programs_small_steps_match_numpy_einsum():
    """The tf32 plan of a chain, run on PoCL, against numpy.einsum (tf32's tolerance)."""
    c = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    result = treduda.contract("ij,jk,kl->il", A, B, c, precision="tf32")
    np.testing.assert_allclose(result, np.einsum("ij,jk,kl->il", A, B, c), rtol=2e-2,
                               atol=2e-2)


def test_a_kernel_runs_tensors_named_like_its_keywords_from_the_mapping():
    kernel = treduda.compile("C[i,j] = backend[i,k]*casting[k,j]", {"i": 5, "j": 3, "k": 7},
                             strategy="tiled")
    np.testing.assert_allclose(kernel.run(arrays={"backend": A, "casting": B}), A @ B,
                               rtol=1e-5)
    with pytest.raises(ArgumentError, match=r"in arrays=\{'casting': ...\}"):
        kernel.run(arrays={"backend": A}, casting=B)
    planned = treduda.contract_expression("C[i,j] = backend[i,k]*casting[k,j]", A.shape,
                                          B.shape, strategy="tiled")
    np.testing.assert_allclose(planned(A, B), A @ B, rtol=1e-5)  # positional on every layer
