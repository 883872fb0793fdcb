"""Exact dtypes: integer kernels compute exactly and wrap as numpy's integers do, booleans give
numpy's logical result, the result's dtype is numpy.einsum's, and no conversion numpy's
``casting`` rule refuses happens silently. Every kernel runs on PoCL against numpy.einsum."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bound_paths_hold, needs_nvcc

import treduda
from treduda.errors import DtypeError
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import compile_cuda
from treduda.tuning.search import Searcher

GEMM = "ik,kj->ij"
TILED = {"strategy": "tiled", "params": {"block_x": 4, "reg_x": 2, "block_y": 4, "reg_y": 2,
                                         "step": 4}}
TILED_DEFAULTS = {"strategy": "tiled"}  # its defaults: for outputs of fewer than two indices
SHORT_AND_DEEP = "C[a,b] = A[c,a,d]*B[d,c,b]"
SPLIT_SIZES = {"a": 37, "b": 21, "c": 45, "d": 19}  # not multiples of the tiles or the step
SPLIT = {"order": "a,b", "block_x": 16, "reg_x": 2, "block_y": 4, "reg_y": 2, "step": 8,
         "split": 4}


def full_range(rng, shape, dtype):
    """Integers over the whole range of ``dtype``: products and sums wrap."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def test_int32_sums_exactly_where_float32_rounds():
    x = np.array([16777217, 3, -2], np.int32)  # 2**24 + 1: float32 has no such value
    total = treduda.contract("i->", x, **TILED_DEFAULTS)
    assert total.dtype == np.int32 and total == 16777218 == np.einsum("i->", x)


def test_int64_dot_product_is_exact_beyond_float64():
    x = (19_100_001 + np.arange(37)).astype(np.int64)
    exact = sum(int(v) * int(v) for v in x)  # about 1.35e16, odd: no float64 holds it
    assert exact % 2 == 1 and exact > 2**53
    got = treduda.contract("i,i->", x, x, **TILED_DEFAULTS)
    assert got.dtype == np.int64 and int(got) == exact == int(np.einsum("i,i->", x, x))


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_products_wrap_as_numpy_does(dtype, layout):
    rng = np.random.default_rng(1)
    a, b = full_range(rng, (13, 9), dtype), full_range(rng, (9, 17), dtype)
    got = treduda.contract(GEMM, a, b, layout=layout, **TILED)
    expected = np.einsum(GEMM, a, b)
    assert got.dtype == expected.dtype == np.dtype(dtype)
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint32", "uint64"])
def test_other_integers_compute_wide_and_wrap_back(dtype):
    rng = np.random.default_rng(2)
    a, b = full_range(rng, (7, 5), dtype), full_range(rng, (5, 11), dtype)
    got = treduda.contract(GEMM, a, b, **TILED)
    expected = np.einsum(GEMM, a, b)
    assert got.dtype == expected.dtype == np.dtype(dtype)
    assert np.array_equal(got, expected)


def test_unsigned_output_adds_into_out_and_wraps():
    rng = np.random.default_rng(8)
    a, b, c = (full_range(rng, shape, "uint32") for shape in ((7, 5), (5, 9), (7, 9)))
    out = c.copy()
    got = treduda.contract("C[i,j] += A[i,k]*B[k,j]", A=a, B=b, out=out, **TILED)
    assert got is out and got.dtype == np.uint32
    assert np.array_equal(got, c + np.einsum(GEMM, a, b))


@pytest.mark.parametrize(("expr", "shapes"), [
    (GEMM, [(7, 5), (5, 11)]), ("i,i->", [(23,), (23,)]), ("ij,j->i", [(9, 6), (6,)])])
def test_booleans_give_numpy_logical_result(expr, shapes):
    rng = np.random.default_rng(3)
    arrays = [rng.random(shape) < 0.3 for shape in shapes]
    got = treduda.contract(expr, *arrays, **(TILED if expr == GEMM else TILED_DEFAULTS))
    expected = np.einsum(expr, *arrays)
    assert got.dtype == expected.dtype == np.bool_
    assert np.array_equal(got, expected)


def test_booleans_add_into_an_output_as_logical_or_and_refuse_subtraction():
    rng = np.random.default_rng(4)
    a, b, c = rng.random((6, 5)) < 0.2, rng.random((5, 7)) < 0.2, rng.random((6, 7)) < 0.5
    got = treduda.contract("C[i,j] += A[i,k]*B[k,j]", A=a, B=b, C=c.copy(), **TILED)
    assert got.dtype == np.bool_ and np.array_equal(got, c + np.einsum(GEMM, a, b))
    with pytest.raises(DtypeError, match="does not subtract booleans"):
        treduda.contract("C[i,j] -= A[i,k]*B[k,j]", A=a, B=b, C=c.copy(), **TILED)


def test_mixed_dtypes_follow_numpy_result_type():
    rng = np.random.default_rng(5)
    a = rng.integers(-9, 9, (7, 5), dtype=np.int32)
    b = rng.standard_normal((5, 11)).astype(np.float32)
    got = treduda.contract(GEMM, a, b, **TILED)
    expected = np.einsum(GEMM, a, b)
    assert got.dtype == expected.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize(("dtype", "alpha", "expected"), [
    ("int32", 3, "int32"), ("int32", 0.5, "float64"), ("float32", 0.5, "float32"),
    ("int8", 3, "int8")])
def test_scalars_and_literals_are_weak_as_numpy_python_numbers(dtype, alpha, expected):
    rng = np.random.default_rng(6)
    a, b = rng.integers(-9, 9, (7, 5)).astype(dtype), rng.integers(-9, 9, (5, 6)).astype(dtype)
    got = treduda.contract("C[i,j] = alpha*A[i,k]*B[k,j]", A=a, B=b, alpha=alpha, **TILED)
    numpy = alpha * np.einsum(GEMM, a, b)  # numpy's arithmetic with a Python number
    assert got.dtype == numpy.dtype == np.dtype(expected)
    np.testing.assert_allclose(got, numpy, rtol=1e-6)
    halved = treduda.contract("C[i,j] = 0.5*A[i,k]*B[k,j]", A=a, B=b, **TILED)
    assert halved.dtype == (0.5 * a).dtype


def test_a_fraction_is_refused_by_an_integer_kernel():
    with pytest.raises(DtypeError, match="0.5 is not an integer"):
        treduda.compile("C[i,j] = 0.5*A[i,k]*B[k,j]", {"i": 3, "j": 4, "k": 5}, dtype="int32",
                        **TILED)


def test_lossy_casts_raise_until_casting_allows_them():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((7, 5)), rng.standard_normal((5, 9))
    expected = np.einsum(GEMM, a, b)
    message = r"A \(dtype float64\) does not cast to the kernel's float32.*casting='same_kind'"
    with pytest.raises(DtypeError, match=message):
        treduda.contract(GEMM, a, b, dtype="float32", **TILED)
    got = treduda.contract(GEMM, a, b, dtype="float32", casting="same_kind", **TILED)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 7, "j": 9, "k": 5}, **TILED)
    with pytest.raises(DtypeError, match=message):
        kernel.run(A=a, B=b)
    np.testing.assert_allclose(kernel.run(A=a, B=b, casting="same_kind"), expected, rtol=1e-4,
                               atol=1e-5)

    planned = treduda.contract_expression(GEMM, (7, 5), (5, 9), **TILED)  # float32 by default
    with pytest.raises(DtypeError, match=message):
        planned(a, b)
    np.testing.assert_allclose(planned(a, b, casting="same_kind"), expected, rtol=1e-4,
                               atol=1e-5)
    lenient = treduda.contract_expression(GEMM, (7, 5), (5, 9), casting="same_kind", **TILED)
    assert lenient(a, b).dtype == np.float32


def test_casting_levels_are_numpy_s():
    a, b = np.ones((7, 5)), np.ones((5, 9))
    with pytest.raises(DtypeError, match="casting='unsafe'"):
        treduda.contract(GEMM, a, b, dtype="int32", casting="same_kind", **TILED)
    got = treduda.contract(GEMM, a + 0.75, b, dtype="int32", casting="unsafe", **TILED)
    assert got.dtype == np.int32 and (got == 5).all()  # 1.75 truncates to 1, as astype does
    ints = np.ones((7, 5), np.int64)
    with pytest.raises(DtypeError, match="casting='same_kind'"):
        treduda.contract(GEMM, ints, np.ones((5, 9), np.int64), dtype="int32", **TILED)
    with pytest.raises(DtypeError, match="not one of numpy's"):
        treduda.contract(GEMM, a, b, casting="lenient", **TILED)
    with pytest.raises(DtypeError, match=r"scalar|alpha \(0.5\)"):
        kernel = treduda.compile("C[i] = alpha*A[i]", {"i": 5}, dtype="int32", **TILED_DEFAULTS)
        kernel.run(A=np.ones(5, np.int32), alpha=0.5)


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_split_reductions_add_exactly(dtype, layout):
    kernel = treduda.compile(SHORT_AND_DEEP, SPLIT_SIZES, layout=layout, dtype=dtype,
                             strategy="tiled+staged", params=SPLIT)
    assert kernel.built.kernel.zeroed_output  # the parts are added atomically
    assert kernel.verify().max_error == 0.0  # values over a quarter of the range: they wrap


def test_the_emulator_runs_integer_kernels_exactly():
    kernel = treduda.compile("C[i,j] = 3*alpha*A[i,k]*B[k,j] - A[i,k]*D[k,j]",
                             {"i": 13, "j": 17, "k": 9}, dtype="int64", **TILED)
    assert kernel.hazards() == []
    assert kernel.verify(backend="emulator").max_error == 0.0


def test_the_model_counts_integer_multiply_adds_at_the_imad_rate():
    # a grid that fills the SMs (6144 blocks): on one short of them each step's stall is
    # exposed, the same seconds in every type, beside the multiply-adds' term
    sizes = {"i": 2048, "j": 1536, "k": 128}
    params = {"order": "j,i", "block_x": 16, "block_y": 8, "block_z": 1, "reg_x": 2,
              "reg_y": 2, "reg_z": 1, "assign_x": "cyclic", "assign_y": "cyclic",
              "assign_z": "cyclic", "step": 16, "unroll": True, "stage": "A,B", "pad": 1,
              "preload": False, "double_buffer": False, "split": 1, "async_copy": False}
    fma = {}
    for target in ("H100", "A100"):
        for dtype in ("float32", "int32", "int64"):
            model = Model(plan("C[i,j] = A[i,k]*B[k,j]", sizes, "C", dtype), gpu(target))
            fma[target, dtype] = model.estimate(params).resources["fma"]
            assert model.bound(params).seconds <= model.estimate(params).seconds
    assert fma["H100", "int32"] == pytest.approx(2 * fma["H100", "float32"])  # half rate
    assert fma["A100", "int32"] == pytest.approx(fma["A100", "float32"])  # the same rate
    assert fma["H100", "int64"] == pytest.approx(3 * fma["H100", "int32"])  # three IMADs


def test_integer_bound_is_below_estimate_on_every_path():
    values = {"block_x": (16, 32), "block_y": (1, 4), "block_z": (1,), "reg_x": (1, 2),
              "reg_y": (1, 4), "reg_z": (1,), "step": (8,)}
    searcher = Searcher(plan("C[i,j] = A[i,k]*B[k,j]", {"i": 200, "j": 120, "k": 72}, "C",
                             "int64"), "H100", values=values)
    assert bound_paths_hold(searcher) > 20


@needs_nvcc
@pytest.mark.parametrize(("dtype", "vector", "atomic_type"), [
    ("int32", "uint4", "unsigned int"), ("int64", "ulonglong2", "unsigned long long")])
def test_nvcc_compiles_integer_kernels(dtype, vector, atomic_type):
    """A vectorised GEMM (neighbours read as one vector) and a split one (atomicAdd's
    unsigned int and unsigned long long overloads)."""
    vectorised = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 37, "j": 40, "k": 19},
                                 dtype=dtype, strategy="tiled",
                                 params={"order": "j,i", "block_x": 8, "reg_x": 4,
                                         "assign_x": "adjacent", "block_y": 4, "reg_y": 2,
                                         "step": 8})
    split = treduda.compile(SHORT_AND_DEEP, SPLIT_SIZES, dtype=dtype, strategy="tiled+staged",
                            params=SPLIT)
    assert f"*(const {vector} *)&B[" in vectorised.cuda_source
    assert f"{atomic_type} *__restrict__ C" in split.cuda_source
    assert "atomicAdd(&C[" in split.cuda_source
    for kernel in (vectorised, split):
        assert compile_cuda(kernel.cuda_source)
        assert kernel.verify().max_error == 0.0
