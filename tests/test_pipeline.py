"""End to end: every example expression runs on PoCL and matches numpy.einsum, in both layouts,
both dtypes, with fixed and with symbolic sizes; its CUDA text compiles with nvcc."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import COMBINATIONS, EXAMPLES, SAMPLE, combinations_marked, generated, needs_nvcc

import treduda
from treduda.run.nvcc import compile_cuda_batch


@pytest.mark.parametrize("example", sorted(EXAMPLES))
@pytest.mark.parametrize(("layout", "dtype", "symbolic"), combinations_marked())
def test_example_matches_einsum(example, layout, dtype, symbolic):
    expression, sizes = EXAMPLES[example]
    kernel = generated(expression, tuple(sizes.items()), layout, dtype, symbolic)
    outcome = kernel.verify(sizes)
    assert outcome.ok and outcome.max_error <= outcome.max_allowed


@needs_nvcc
@pytest.mark.parametrize("combos", [pytest.param(SAMPLE, id="sample"),
                                    pytest.param(COMBINATIONS, id="all", marks=pytest.mark.matrix)])
def test_example_cuda_compiles_without_warnings(combos):
    kernels = [generated(e, tuple(s.items()), *combo) for e, s in EXAMPLES.values()
               for combo in combos]
    reports = compile_cuda_batch([k.cuda_source for k in kernels])
    for kernel, report in zip(kernels, reports, strict=True):
        assert [r.kernel for r in report] == [kernel.name]
        assert report[0].registers > 0


def test_symbolic_kernel_serves_every_size():
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", symbolic=True,
                             strategy="thread_per_element")
    assert kernel.grid is None and "N_k" in kernel.cuda_source
    rng = np.random.default_rng(1)
    for i, j, k in [(1, 1, 1), (7, 33, 2), (40, 5, 17)]:
        a = rng.standard_normal((i, k), dtype=np.float32)  # the kernel's dtype: float32
        b = rng.standard_normal((k, j), dtype=np.float32)
        np.testing.assert_allclose(kernel.run(A=a, B=b), a @ b, rtol=1e-4, atol=1e-5)
        # y's block count is unknown until launch and may pass the 65535 limit: folded into x
        assert kernel.grid_for({"i": i, "j": j, "k": k}) == (-(-j // 32) * -(-i // 4), 1, 1)


def test_fixed_kernel_rejects_other_sizes():
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 4, "j": 4, "k": 4})
    with pytest.raises(treduda.errors.ShapeMismatch, match="compiled for"):
        kernel.run(A=np.ones((4, 5), np.float32), B=np.ones((5, 4), np.float32))


def test_column_major_kernel_reads_fortran_memory():
    """layout='F' addresses memory first-index-fastest; results come back as logical arrays."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((9, 14)), rng.standard_normal((14, 11))
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 9, "j": 11, "k": 14}, layout="F",
                             dtype="float64")
    assert "A[(c" in kernel.cuda_source or "* 9 +" in kernel.cuda_source
    np.testing.assert_allclose(kernel.run(A=np.asfortranarray(a), B=b), a @ b, rtol=1e-12)


def test_contract_infers_sizes_dtype_and_accepts_views():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((13, 21))
    b = rng.standard_normal((13, 6)).astype(np.float32)
    c = treduda.contract("C[i,j] = A[k,i]*B[k,j]", A=a.T.T, B=b)  # float64 wins
    assert c.dtype == np.float64 and c.shape == (21, 6)
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-6)
    transposed = treduda.contract("ik,kj->ij", a.T, b)  # a non-contiguous view
    np.testing.assert_allclose(transposed, a.T @ b, rtol=1e-6)


def test_contract_accumulates_into_given_output():
    a, b = np.ones((3, 4)), np.ones((4, 5))
    c = np.full((3, 5), 10.0)
    out = treduda.contract("C[i,j] -= A[i,k]*B[k,j]", A=a, B=b, C=c)
    np.testing.assert_allclose(out, np.full((3, 5), 6.0))
    np.testing.assert_allclose(c, 10.0)  # the caller's array is not modified


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"dtype": "uint8"}, treduda.errors.StrategyError, "dtype"),
    ({"layout": "K"}, treduda.errors.StrategyError, "layout"),
    ({"strategy": "magic"}, treduda.errors.StrategyError, "unknown strategy 'magic'"),
    ({"params": {"block_x": 3}}, treduda.errors.StrategyError, "block_x=3 is not allowed"),
    ({"params": {"block_x": 256, "block_y": 8}}, treduda.errors.StrategyError,
     "at most 1024 threads"),
    ({"params": {"tile": 3}}, treduda.errors.StrategyError, "unknown parameter 'tile'"),
])
def test_bad_options_are_explained(kwargs, error, message):
    with pytest.raises(error, match=message):
        treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 8, "j": 8, "k": 8}, **kwargs)


@pytest.mark.parametrize(("values", "message"), [
    ({"A": np.ones((3, 4))}, "B"),
    ({"A": np.ones((3, 4)), "B": np.ones((5, 2))}, "index 'k'"),
    ({"A": np.ones((3, 4)), "B": np.ones((4, 2)), "Z": 1.0}, "unknown argument"),
    ({"A": np.ones((3, 4)), "B": np.ones((4, 2), dtype=complex), "dtype": "float64"},
     "B is complex .* dtype='complex128'"),
    ({"A": np.ones((3, 4)), "B": np.full((4, 2), "x")}, "B has dtype <U1"),
])
def test_bad_arrays_are_explained(values, message):
    with pytest.raises(treduda.errors.TredudaError, match=message):
        treduda.contract("C[i,j] = A[i,k]*B[k,j]", **values)


def test_missing_scalar_and_missing_output_are_explained():
    with pytest.raises(treduda.errors.MissingSize, match="alpha"):
        treduda.contract("C[i] = alpha*A[i]", A=np.ones(3))
    with pytest.raises(treduda.errors.MissingSize, match="output C"):
        treduda.contract("C[i] += A[i]", A=np.ones(3))
