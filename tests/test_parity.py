"""numpy.einsum parity: the calls a numpy user makes, each compared with numpy.einsum itself on
PoCL, values and result dtypes alike. Integer and boolean results must be exact."""

from __future__ import annotations

import numpy as np
import pytest

import treduda
from treduda.errors import ArgumentError, DtypeError, ShapeMismatch, SizeLimit

RNG = np.random.default_rng(29)


def _random(shape, dtype="float64", low=-3, high=4):
    """Values of ``dtype``: small integers for integer kinds, so exactness is testable."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return RNG.integers(0 if dtype.kind == "u" else low, high, shape).astype(dtype)
    values = RNG.uniform(-1, 1, shape)
    if dtype.kind == "c":
        values = values + 1j * RNG.uniform(-1, 1, shape)
    return values.astype(dtype)


RTOL = {"e": 2e-2, "f": 2e-5, "d": 1e-12, "F": 2e-5, "D": 1e-12}


def _same_as_numpy(spec, *operands, **options):
    """treduda.contract's result equals numpy.einsum's: shape, dtype and values."""
    expected = np.einsum(spec, *operands, **options)
    result = treduda.contract(spec, *operands, **options)
    assert isinstance(result, np.ndarray)
    assert result.dtype == expected.dtype, (spec, result.dtype, expected.dtype)
    assert result.shape == expected.shape, (spec, result.shape, expected.shape)
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(result, expected)
    else:
        scale = np.einsum(spec, *(np.abs(o) for o in operands)) if operands else 1.0
        atol = RTOL[expected.dtype.char] * (np.max(np.abs(scale), initial=0) + 1e-30)
        np.testing.assert_allclose(result, expected, rtol=RTOL[expected.dtype.char], atol=atol)
    return result


SHAPES = {  # numpy's everyday subscripts, with operand shapes not multiples of any tile
    "matmul": ("ij,jk->ik", [(7, 5), (5, 9)]),
    "matmul_implicit": ("ij,jk", [(7, 5), (5, 9)]),
    "matvec": ("ij,j->i", [(11, 6), (6,)]),
    "dot": ("i,i->", [(37,), (37,)]),
    "dot_implicit": ("i,i", [(37,), (37,)]),
    "outer": ("i,j->ij", [(3,), (4,)]),
    "hadamard": ("ij,ij->ij", [(5, 6), (5, 6)]),
    "transpose": ("ij->ji", [(4, 5)]),
    "transpose_implicit": ("ba", [(4, 5)]),
    "trace": ("ii->", [(6, 6)]),
    "diagonal": ("ii->i", [(6, 6)]),
    "iij": ("iij,jk->ik", [(4, 4, 3), (3, 5)]),
    "sum_all": ("ij->", [(5, 7)]),
    "row_sums": ("ij->i", [(5, 7)]),
    "batched": ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    "chain": ("ij,jk,kl->il", [(6, 5), (5, 4), (4, 7)]),
    "tccg": ("dbea,ec->abcd", [(5, 3, 4, 6), (4, 7)]),
    "bilinear": ("i,ij,j->", [(5,), (5, 6), (6,)]),
    "scaled_by_0d": (",ij->ij", [(), (4, 3)]),
    "0d_product": (",->", [(), ()]),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("case", ["matmul", "dot", "trace", "batched", "tccg"])
def test_float_and_complex_results_match_numpy(case, dtype):
    spec, shapes = SHAPES[case]
    _same_as_numpy(spec, *(_random(s, dtype) for s in shapes))


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_everyday_subscripts_match_numpy(case):
    spec, shapes = SHAPES[case]
    _same_as_numpy(spec, *(_random(s, "float32") for s in shapes))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "int8", "uint8", "int16"])
@pytest.mark.parametrize("case", ["matmul", "dot", "hadamard", "diagonal"])
def test_integer_and_bool_results_are_exact_and_typed_as_numpy(case, dtype):
    spec, shapes = SHAPES[case]
    _same_as_numpy(spec, *(_random(s, dtype) for s in shapes))


def test_int32_sums_past_float32s_integers_exactly():
    x = np.array([16777217, 0, 1], dtype=np.int32)
    result = _same_as_numpy("i->", x)
    assert result == 16777218


def test_an_int64_dot_product_near_1e16_is_exact():
    a = np.array([116189500, 3, 7], dtype=np.int64)
    b = np.array([116189501, 5, 11], dtype=np.int64)
    assert _same_as_numpy("i,i->", a, b) == 116189500 * 116189501 + 15 + 77


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_overflow_wraps_as_numpy_does(dtype):
    big = np.iinfo(dtype).max // 3
    a = np.full(7, big, dtype=dtype)
    b = np.full(7, 5, dtype=dtype)
    _same_as_numpy("i,i->", a, b)


@pytest.mark.parametrize(("left", "right"), [("int32", "float32"), ("int64", "float32"),
                                             ("float32", "float64"), ("int32", "complex64"),
                                             ("bool", "int32"), ("uint8", "int8")])
def test_mixed_inputs_take_numpys_result_type(left, right):
    _same_as_numpy("ij,jk->ik", _random((4, 3), left), _random((3, 5), right))


def test_float16_stays_float16():
    _same_as_numpy("ij,jk->ik", _random((7, 5), "float16"), _random((5, 9), "float16"))


@pytest.mark.parametrize(("spec", "shapes"), [
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (5, 6)]),
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (3, 5, 6)]),
    ("...ij,...jk", [(3, 4, 5), (3, 5, 2)]),
    ("i...->...", [(4, 3, 2)]),
    ("...i,...i->...", [(3, 7), (3, 7)]),
], ids=["batch", "batch-broadcast-rank", "batch-broadcast-1", "implicit", "sum-first",
        "rowwise-dot"])
def test_ellipsis_broadcasts_like_numpy(spec, shapes):
    _same_as_numpy(spec, *(_random(s, "float64") for s in shapes))


@pytest.mark.parametrize(("spec", "shapes"), [
    ("ij,ij->ij", [(3, 1), (1, 4)]),
    ("ij,jk->ik", [(3, 1), (4, 5)]),
    ("ij,ij->i", [(3, 4), (1, 4)]),
])
def test_size_one_axes_broadcast_like_numpy(spec, shapes):
    _same_as_numpy(spec, *(_random(s, "float64") for s in shapes))


@pytest.mark.parametrize(("spec", "shapes"), [
    ("ijAB,ABkl->ijkl", [(2, 3, 4, 2), (4, 2, 3, 2)]),
    ("iC,Cj,jk->ik", [(3, 4), (4, 5), (5, 2)]),
    ("Ab,bA->", [(3, 4), (4, 3)]),
])
def test_any_letters_are_indices(spec, shapes):
    _same_as_numpy(spec, *(_random(s, "float64") for s in shapes))


@pytest.mark.parametrize("optimize", [False, True, "greedy", "optimal"])
def test_optimize_is_accepted(optimize):
    _same_as_numpy("ij,jk,kl->il", _random((6, 5)), _random((5, 4)), _random((4, 7)),
                   optimize=optimize)


def test_views_f_order_and_negative_strides():
    base = _random((9, 12))
    b = _random((12, 5))
    _same_as_numpy("ij,jk->ik", base[::2, 1::2], b[::2])
    _same_as_numpy("ij,jk->ik", np.asfortranarray(base), b)
    _same_as_numpy("ij,jk->ik", base[::-1, ::-1], b)


@pytest.mark.parametrize(("spec", "shapes"), [("ij,jk->ik", [(0, 3), (3, 4)]),
                                              ("ij,jk->ik", [(2, 0), (0, 4)])])
def test_empty_axes(spec, shapes):
    _same_as_numpy(spec, *(_random(s) for s in shapes))


def test_out_is_filled_like_numpys():
    a, b = _random((4, 3)), _random((3, 5))
    out = np.empty((4, 5))
    result = treduda.contract("ij,jk->ik", a, b, out=out)
    assert result is out
    np.testing.assert_allclose(out, np.einsum("ij,jk->ik", a, b), rtol=1e-12)


# The held-out corpus's 11 calls that numpy.einsum answered and treduda did not (issue 43):
# where numpy refuses, treduda refuses with its own error before it plans, searches or
# compiles anything; where numpy computes, treduda computes the same.
F64_A, F64_B = np.ones((7, 5)), np.ones((5, 9))
F32_A, F32_B = F64_A.astype(np.float32), F64_B.astype(np.float32)
REFUSED = {  # name: (numpy's call, treduda's call, treduda's error, what its message says)
    "out of the wrong shape": (
        lambda: np.einsum("ik,kj->ij", F64_A, F64_B, out=np.zeros((7, 8))),
        lambda: treduda.contract("ik,kj->ij", F64_A, F64_B, out=np.zeros((7, 8))),
        ShapeMismatch, r"out has shape \(7, 8\) but the output has shape \(7, 9\)"),
    "out of an integer dtype for a float result": (
        lambda: np.einsum("ik,kj->ij", F64_A, F64_B, out=np.zeros((7, 9), np.int64)),
        lambda: treduda.contract("ik,kj->ij", F64_A, F64_B, out=np.zeros((7, 9), np.int64)),
        DtypeError, "out has dtype int64, to which the result's float64 does not cast under "
                    "casting='safe'; .* casting='unsafe'"),
    "out narrower than the result": (
        lambda: np.einsum("ik,kj->ij", F64_A, F64_B, out=np.zeros((7, 9), np.float32)),
        lambda: treduda.contract("ik,kj->ij", F64_A, F64_B,
                                 out=np.zeros((7, 9), np.float32)),
        DtypeError, "pass an out of dtype float64 or wider, or casting='same_kind'"),
    "out wider than dtype=": (  # numpy reads out in dtype too
        lambda: np.einsum("ik,kj->ij", F32_A, F32_B, dtype="float32", out=np.zeros((7, 9))),
        lambda: treduda.contract("ik,kj->ij", F32_A, F32_B, dtype="float32",
                                 out=np.zeros((7, 9))),
        DtypeError, r"out \(dtype float64\) does not cast to the kernel's float32 under "
                    "casting='safe'; pass casting='same_kind'"),
    "out that is a list": (
        lambda: np.einsum("ik,kj->ij", F64_A, F64_B, out=[[0.0] * 9] * 7),
        lambda: treduda.contract("ik,kj->ij", F64_A, F64_B, out=[[0.0] * 9] * 7),
        ArgumentError, "out must be an array, got list"),
    "casting='no' across float32 and float64": (
        lambda: np.einsum("ik,kj->ij", F32_A, F64_B, casting="no"),
        lambda: treduda.contract("ik,kj->ij", F32_A, F64_B, casting="no"),
        DtypeError, "A \\(dtype float32\\) does not cast to the kernel's float64 under "
                    "casting='no'"),
    "casting='equiv' across int32 and int64": (
        lambda: np.einsum("ik,kj->ij", F64_A.astype(np.int32), F64_B.astype(np.int64),
                          casting="equiv"),
        lambda: treduda.contract("ik,kj->ij", F64_A.astype(np.int32), F64_B.astype(np.int64),
                                 casting="equiv"),
        DtypeError, "casting='equiv'; pass casting='safe'"),
    "a lossy dtype= (float64 arrays, float32 result)": (
        lambda: np.einsum("ik,kj->ij", F64_A, F64_B, dtype="float32"),
        lambda: treduda.contract("ik,kj->ij", F64_A, F64_B, dtype="float32"),
        DtypeError, "A \\(dtype float64\\) does not cast to the kernel's float32 under "
                    "casting='safe'; pass casting='same_kind'"),
    "a lossy cast across kinds under same_kind": (
        lambda: np.einsum("ik,kj->ij", F64_A, F64_B, dtype="int32", casting="same_kind"),
        lambda: treduda.contract("ik,kj->ij", F64_A, F64_B, dtype="int32",
                                 casting="same_kind"),
        DtypeError, "pass casting='unsafe' to convert it anyway"),
    "a 10^12 extent past 64-bit indices": (
        lambda: np.empty((10**12, 10**12)),  # numpy has no array of that shape
        lambda: treduda.contract_expression("ij,jk->ik", (10**12, 10**12), (10**12, 4)),
        SizeLimit, r"A\[i,j\] would hold 1e\+24 elements"),
}
COMPUTED = {  # name: the subscripts and operands numpy.einsum computes with
    "Python lists": ("i,i->", [1, 2], [3, 4]),
    "nested Python lists": ("ij,jk->ik", [[1, 2], [3, 4]], [[0.5, 0], [0, 2]]),
    "Python numbers": (",->", 2, 3),
    "a Python number and a list": ("i,->i", [1.5, 2.0], 3),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_numpy_refuses_is_refused_before_anything_is_planned(case, nothing_planned):
    numpys, ours, error, message = REFUSED[case]
    with pytest.raises((TypeError, ValueError)):
        numpys()
    with pytest.raises(error, match=message):
        ours()


@pytest.mark.parametrize("case", COMPUTED)
def test_lists_and_numbers_are_operands_as_numpy_takes_them(case):
    spec, *operands = COMPUTED[case]
    _same_as_numpy(spec, *operands)


def test_a_lossy_cast_into_a_program_is_refused_before_its_first_call_plans(nothing_planned):
    plan = treduda.program("T[i,k] = A[i,j]*B[j,k]; D[i,l] = T[i,k]*C[k,l]")
    with pytest.raises(DtypeError, match="A \\(dtype float64\\) does not cast to the kernel's "
                                         "float32"):
        plan(A=np.ones((3, 4)), B=np.ones((4, 5), np.float32),
                         C=np.ones((5, 2), np.float32))


@pytest.mark.parametrize(("inputs", "out"), [("int8", "int16"), ("float16", "float32"),
                                             ("float32", "float64")])
def test_out_of_a_wider_dtype_computes_in_it_as_numpy_does(inputs, out):
    """numpy computes in the result type of the operands and out: int8 sums wrap in int16
    (bit for bit), float16 and float32 inputs are summed in float32 and float64."""
    rng = np.random.default_rng(43)
    if inputs == "int8":
        a, b = (rng.integers(-128, 128, shape).astype(np.int8) for shape in ((6, 40), (40, 5)))
    else:
        a, b = (rng.uniform(-1, 1, shape).astype(inputs) for shape in ((6, 40), (40, 5)))
    expected = np.einsum("ik,kj->ij", a, b, out=np.zeros((6, 5), out))
    result = np.full((6, 5), 7, out)
    assert treduda.contract("ik,kj->ij", a, b, out=result) is result
    if inputs == "int8":
        np.testing.assert_array_equal(result, expected)
    else:  # within the wider type's rounding, far below the narrower one's
        exact = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
        unit = np.finfo(out).eps
        assert np.all(np.abs(result - exact) <= 64 * unit * scale)
        assert np.all(np.abs(expected - exact) <= 64 * unit * scale)


def test_the_issues_int8_example_gives_numpys_minus_5536():
    a, b = np.full((2, 6), 100, np.int8), np.full((6, 2), 100, np.int8)
    result = treduda.contract("ik,kj->ij", a, b, out=np.zeros((2, 2), np.int16))
    np.testing.assert_array_equal(result, np.full((2, 2), -5536, np.int16))
