"""Complex numbers end to end: complex64 and complex128 contractions on PoCL and in the emulator
against numpy.einsum, the printed float2/double2 arithmetic (four real FMAs per multiply-add, as
nvcc compiles it and the model counts it), and the CCSD suite in complex128."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from conftest import needs_nvcc

import treduda
from treduda import strategies
from treduda.app.bench import run, select
from treduda.errors import ShapeMismatch
from treduda.frontend import dtypes
from treduda.frontend.contraction import analyse
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.polyhedral.lower import lower
from treduda.run import reference
from treduda.run.nvcc import compile_cuda, compile_cuda_batch, nvcc_available, nvrtc_view
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.sass import find_disassembler
from treduda.suites import SUITES, load
from treduda.tuning import policy

GEMM = "C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]"
CCSD = load("tapp")
# CCSD-shaped extents: small, a few of them not multiples of any tile
CCSD_SIZES = {"a": 9, "b": 6, "c": 7, "d": 5, "i": 4, "j": 3, "k": 5}
# tiled+staged choices that put complex elements through shared memory in each way it copies
STAGED = [
    {"stage": "A,B"},
    {"stage": "A,B", "preload": True, "pad": 1},
    {"stage": "B", "double_buffer": True, "step": 4},
]


def _sizes(row):
    return {i: CCSD_SIZES[i] for i in row.sizes}


def random(shape, dtype, seed=0):
    return dtypes.uniform(np.random.default_rng(seed), -1, 1, shape, dtype)


def operands(row, dtype, layout):
    """The row's inputs at :data:`CCSD_SIZES`, stored in ``layout``."""
    c = analyse(row.expression)
    return {t: np.asarray(random([CCSD_SIZES[i] for i in idx], dtype, n), order=layout)
            for n, (t, idx) in enumerate(c.inputs.items())}


def einsum(row, arrays):
    c = analyse(row.expression)
    spec = reference.einsum_spec(c.terms[0], c.output_indices)
    return np.einsum(spec, *(arrays[r.tensor] for r in c.terms[0].reads))


@pytest.mark.parametrize("layout", "CF")
@pytest.mark.parametrize("row", CCSD, ids=[r.id for r in CCSD])
def test_ccsd_rows_in_complex128_match_einsum(row, layout):
    """What a quantum-chemistry user runs: searched, generated and run on PoCL."""
    arrays = operands(row, "complex128", layout)
    result = treduda.contract(row.expression, layout=layout, **arrays)
    assert result.dtype == np.complex128
    expected = einsum(row, arrays)
    assert np.abs(expected.imag).max() > 0.1  # the imaginary parts take part
    np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)


def test_complex64_gemm_with_complex_alpha_and_beta():
    a, b, c = (random(shape, "complex64", n) for n, shape in
               enumerate([(19, 11), (11, 26), (19, 26)]))
    alpha, beta = 0.75 - 1.25j, -0.5 + 2j
    result = treduda.contract(GEMM, A=a, B=b, C=c, alpha=alpha, beta=beta)
    assert result.dtype == np.complex64
    wide = [x.astype(np.complex128) for x in (a, b, c)]
    expected = alpha * wide[0] @ wide[1] + beta * wide[2]
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    # a complex scalar alone makes the computation complex
    real = treduda.contract("C[i] = alpha*A[i]", A=np.ones(3, np.float32), alpha=2j)
    assert real.dtype == np.complex64 and np.array_equal(real, [2j, 2j, 2j])


@pytest.mark.parametrize("params", STAGED, ids=lambda p: ",".join(f"{k}={v}" for k, v in
                                                                   p.items()))
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_staged_complex_kernels_match_einsum_on_pocl_and_in_the_emulator(dtype, params):
    sizes = {"i": 21, "j": 34, "k": 13}
    kernel = treduda.compile(GEMM, sizes, dtype=dtype, strategy="tiled+staged",
                             params={"reg_x": 2, "step": 8, **params})
    assert kernel.params["stage"] == params["stage"]
    assert f"__shared__ {'float2' if dtype == 'complex64' else 'double2'}" in kernel.cuda_source
    assert kernel.verify().ok
    assert kernel.verify(backend="emulator").ok  # every block: a hazard raises


@pytest.mark.parametrize("layout", "CF")
def test_symbolic_complex_kernel_serves_every_size(layout):
    kernel = treduda.compile("D[a,b,i,j] -= A[k,b,c,j]*B[a,c,i,k]", dtype="complex128",
                             layout=layout, symbolic=True, strategy="tiled+staged")
    assert kernel.symbolic
    for sizes in ({"a": 7, "b": 5, "c": 6, "i": 3, "j": 4, "k": 5},
                  {"a": 10, "b": 3, "c": 9, "i": 5, "j": 2, "k": 4}):
        assert kernel.verify(sizes).ok
    a, b = random((5, 3, 6, 4), "complex128", 1), random((7, 6, 3, 5), "complex128", 2)
    d = random((7, 3, 3, 4), "complex128", 3)
    result = kernel.run(A=a, B=b, D=d)
    np.testing.assert_allclose(result, d - np.einsum("kbcj,acik->abij", a, b), rtol=1e-12)


def test_printed_arithmetic_is_written_out_in_both_dialects():
    kernel = treduda.compile(GEMM, {"i": 9, "j": 7, "k": 5}, dtype="complex128",
                             strategy="thread_per_element")
    for source in (kernel.cuda_source, kernel.opencl_source):
        assert "acc0 = td_double2(0.0, 0.0);" in source
        assert "acc0 = td_double2_fma(A[" in source  # the reduction: c + a*b in one call
        assert "td_double2_fma(alpha, acc0, td_double2_mul(beta, C[" in source
        assert "const double2 *" in source and "const double2 alpha" in source
    assert "return make_double2(re, im);" in kernel.cuda_source
    assert "return (double2)(re, im);" in kernel.opencl_source
    assert "cl_khr_fp64" in kernel.opencl_source
    real = treduda.compile(GEMM, {"i": 9, "j": 7, "k": 5}, strategy="thread_per_element")
    assert "td_float2" not in real.cuda_source and "acc0 += " in real.cuda_source


def test_complex_values_are_refused_by_real_kernels():
    kernel = treduda.compile(GEMM, {"i": 3, "j": 2, "k": 4}, dtype="float64")
    arrays = {"A": np.ones((3, 4)), "B": np.ones((4, 2)), "C": np.ones((3, 2)), "beta": 1.0}
    with pytest.raises(ShapeMismatch, match="alpha is complex .*dtype='complex128'"):
        kernel.run(alpha=1j, **arrays)
    with pytest.raises(ShapeMismatch, match="A is complex"):
        kernel.run(**{**arrays, "A": np.ones((3, 4), np.complex64)}, alpha=1.0)


def test_dtype_facts():
    computed = ("float32", "float64", "complex64", "complex128")
    assert [dtypes.itemsize(d) for d in computed] == [4, 8, 8, 16]
    assert [dtypes.real(d) for d in computed] == ["float32", "float64"] * 2
    assert [dtypes.fmas(d) for d in computed] == [1, 1, 4, 4]
    assert dtypes.result_dtype([np.float32, np.complex64]) == "complex64"
    assert dtypes.result_dtype([np.complex64, np.float64]) == "complex128"
    assert dtypes.result_dtype([np.int64], [np.complex64(1j)]) == "complex128"  # numpy's rule
    assert dtypes.result_dtype([np.float32], [2.0]) == "float32"
    h100 = gpu("H100")
    assert h100.peak_flops("complex128") == h100.peak_flops("float64")
    assert h100.peak_flops(np.complex64) == h100.peak_flops("float32")


def test_complex_tolerance_allows_two_roundings_per_part():
    c = analyse("C[i] = A[i,k]*B[k]")
    sizes = {"i": 3, "k": 50}
    arrays = {"A": random((3, 50), "complex64"), "B": random((50,), "complex64")}
    real = {k: np.abs(v).astype(np.float32) for k, v in arrays.items()}
    complex_ = reference.tolerance(c, arrays, {}, sizes, "complex64")
    assert np.allclose(complex_, 2 * reference.tolerance(c, real, {}, sizes, "float32"))


def test_model_counts_four_real_fmas_and_twice_the_bytes():
    # a grid that fills the SMs (6144 blocks): on one short of them each step's stall is
    # exposed, the same seconds in every type, beside the multiply-adds' term
    expr, sizes = "C[i,j] = A[i,k]*B[k,j]", {"i": 2048, "j": 1536, "k": 128}
    models = {d: Model(lower(analyse(expr), sizes, "C", d), gpu("H100"))
              for d in ("float64", "complex128")}
    real, complex_ = models["float64"], models["complex128"]
    assert complex_.flops == 4 * real.flops and complex_.bytes == 2 * real.bytes == 16
    assert complex_.compulsory == 2 * real.compulsory
    params = {"order": "j,i", "block_x": 16, "block_y": 8, "block_z": 1, "reg_x": 2,
              "reg_y": 2, "reg_z": 1, "assign_x": "cyclic", "assign_y": "cyclic",
              "assign_z": "cyclic", "step": 16, "unroll": True, "stage": "A,B", "pad": 1,
              "preload": False, "double_buffer": False, "split": 1, "async_copy": False}
    fma = {d: m.estimate(params).resources["fma"] for d, m in models.items()}
    assert fma["complex128"] == pytest.approx(4 * fma["float64"])
    assert complex_.bound(params).seconds <= complex_.estimate(params).seconds


def test_complex128_register_tiles_stay_within_a_thread():
    program = lower(analyse("C[i,j] = A[i,k]*B[k,j]"),
                                  {"i": 64, "j": 64, "k": 64}, "C", "complex128")
    space = strategies.get("tiled").space(program)
    assert space.violated({"reg_x": 8, "reg_y": 8, "reg_z": 1})  # 64 x 4 registers
    assert not space.violated({"reg_x": 8, "reg_y": 4, "reg_z": 1})


def test_ccsd_suite_runs_in_complex128_in_bench(tmp_path, monkeypatch):
    # ptxas checks the winner alone: re-ranking by up to CHECKED_MOST reports (sixteen
    # full-size complex128 kernels through nvcc, most of this test's minute) is
    # tests/test_search.py's subject, not the suite's dtype
    monkeypatch.setattr(policy, "CHECKED_MOST", 1)
    assert SUITES["tapp"].dtype == "complex128"
    cases = select("tapp")
    assert [c.dtype for c in cases] == ["complex128"] * len(CCSD)
    path = tmp_path / "tapp.json"
    code = run(cases[:1], max_nodes=100, json_path=str(path), title="test", out=io.StringIO(),
               log=io.StringIO())
    (row,) = json.loads(path.read_text())["rows"]
    assert code == 0 and row["dtype"] == "complex128" and row["verified"], row


def _complex_kernels():
    """Complex kernels of each kind: real-sized and symbolic, plain and staged."""
    return [treduda.compile(GEMM, {"i": 21, "j": 34, "k": 13}, dtype="complex64",
                            strategy="tiled+staged", params={"stage": "A,B", "preload": True}),
            treduda.compile(CCSD[1].expression, _sizes(CCSD[1]), dtype="complex128",
                            layout="F", strategy="tiled+staged"),
            treduda.compile(GEMM, dtype="complex128", symbolic=True)]


@needs_nvcc
def test_nvcc_compiles_complex_kernels_and_their_nvrtc_part():
    kernels = _complex_kernels()
    reports = compile_cuda_batch([k.cuda_source for k in kernels])
    assert [[r.kernel for r in rs] for rs in reports] == [[k.name] for k in kernels]
    assert all(rs[0].registers > 0 and rs[0].spill_stores == 0 for rs in reports)
    # both complex types in one file: the helpers are guarded per type
    device = nvrtc_view("\n".join(k.cuda_source for k in kernels))
    assert "<<<" not in device and "td_float2_fma" in device and "td_double2_fma" in device
    assert sorted(r.kernel for r in compile_cuda(device)) == sorted(k.name for k in kernels)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (pip install nvidia-cuda-nvrtc) absent")
def test_nvrtc_compiles_complex_kernels():
    kernels = _complex_kernels()
    ptx = compile_nvrtc("\n".join(k.cuda_source for k in kernels))
    assert all(f".entry {k.name}(" in ptx for k in kernels)


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("real", ["float32", "float64"])
def test_a_complex_multiply_add_compiles_to_four_real_fmas(real):
    params = {"order": "j,i", "block_x": 16, "block_y": 8, "reg_x": 2, "reg_y": 2, "step": 8,
              "unroll": True, "stage": "A,B"}
    counts = {}
    for dtype in (real, dtypes.complex_of(real)):
        kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 128, "j": 128, "k": 64},
                                 dtype=dtype, strategy="tiled+staged", params=params)
        counts[dtype] = kernel.sass_report().main_loop_ffma
    assert counts[dtypes.complex_of(real)] == 4 * counts[real] > 0
