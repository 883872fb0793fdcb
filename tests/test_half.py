"""float16 and bfloat16 kernels (stored narrow, computed in float32) and ``precision=`` on float32
ones, run on PoCL against numpy.einsum in float64, at sizes that are not multiples of the tiles."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import bound_paths_hold, needs_nvcc

import treduda
from treduda.app.cli import main
from treduda.errors import DtypeError
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import compile_cuda_batch
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.tuning.cache import TuningCache
from treduda.tuning.search import Searcher

GEMM = ("C[i,j] = A[i,k]*B[k,j]", {"i": 37, "j": 29, "k": 23})
BATCHED = ("C[b,i,j] = A[b,i,k]*B[b,k,j]", {"b": 3, "i": 19, "j": 21, "k": 13})
TCCG_03 = ("C[a,b,c,d] = A[d,b,e,a]*B[e,c]", {"a": 12, "b": 7, "c": 16, "d": 9, "e": 11})
TCCG_13 = ("C[a,b] = A[a,c,d]*B[d,b,c]", {"a": 21, "b": 18, "c": 9, "d": 11})
STAGED = {"strategy": "tiled+staged", "params": {"stage": "A,B", "block_x": 16, "block_y": 8}}
DIRECT = {"strategy": "tiled", "params": {"block_x": 16, "block_y": 4, "reg_x": 2}}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("case", "mapping"), [(GEMM, STAGED), (BATCHED, DIRECT),
                                               (TCCG_03, DIRECT), (TCCG_13, STAGED)],
                         ids=["gemm", "batched", "tccg_03", "tccg_13"])
def test_half_kernels_match_numpy(case, mapping, layout, dtype):
    kernel = treduda.compile(*case, dtype=dtype, layout=layout, **mapping)
    assert kernel.verify().ok


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_update_with_alpha_and_beta_keeps_the_dtype(dtype):
    """``+=`` reads the old output from half storage and rounds the new one back into it;
    the result has numpy.einsum's dtype (float16 for float16; bfloat16, which numpy.einsum
    does not take, likewise)."""
    rng = np.random.default_rng(1)
    a, b, d = (rng.uniform(-1, 1, s).astype(dtype) for s in ((19, 23), (23, 17), (19, 17)))
    before = rng.uniform(-1, 1, (19, 17)).astype(dtype)
    out = before.copy()
    result = treduda.contract("C[i,j] += alpha*A[i,k]*B[k,j] + beta*D[i,j]", A=a, B=b, D=d,
                              alpha=0.75, beta=-1.5, out=out, **STAGED)
    assert result is out and result.dtype == np.dtype(dtype)
    wide = [x.astype(np.float64) for x in (a, b, d, before)]
    expected = wide[3] + 0.75 * wide[0] @ wide[1] - 1.5 * wide[2]
    unit = 2.0**-11 if dtype is np.float16 else 2.0**-8
    assert np.abs(result.astype(np.float64) - expected).max() <= 2 * unit * np.abs(expected).max()
    if dtype is np.float16:
        assert treduda.contract("ik,kj", a, b, **DIRECT).dtype == np.einsum("ik,kj", a, b).dtype


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_split_into_half_precision_keeps_its_parts_in_a_workspace(dtype):
    """No atomic addition into 16-bit values in OpenCL, and a part rounded to half precision
    would lose bits: a split reduction into a half-precision output keeps its parts in a
    float32 workspace and adds them in a second pass, deterministic or not."""
    expression, sizes = "C[i,j] += alpha*A[i,k]*B[k,j]", {"i": 37, "j": 29, "k": 300}
    split = {"strategy": "tiled", "params": {"split": 4, "step": 8, "block_x": 8}}
    kernel = treduda.compile(expression, sizes, dtype=dtype, cache=False, **split)
    assert kernel.signature.parts_sum is not None and kernel.verify().ok


def test_mixed_or_wider_arrays_compute_as_before():
    half, single = np.ones((20, 9), np.float16), np.ones((9, 18), np.float32)
    assert treduda.contract("ik,kj", half, single, **DIRECT).dtype == np.float32
    assert treduda.contract("ik,kj", half, single.astype(ml_dtypes.bfloat16),
                            **DIRECT).dtype == np.float32


def test_half_kernels_convert_in_both_dialects():
    """Tensors are declared in the stored type (CUDA: their bits, as unsigned short, so that
    NVRTC needs no CUDA headers), registers and tiles in float32; nothing is read as a vector
    (the conversions are per element)."""
    for dtype, cuda, opencl in (("float16", "cvt.f32.f16", "vload_half"),
                                ("bfloat16", "td_bf16_load", "td_bf16_load")):
        kernel = treduda.compile(*GEMM, dtype=dtype, **STAGED)
        assert cuda in kernel.cuda_source and opencl in kernel.opencl_source
        assert "const unsigned short *__restrict__ A" in kernel.cuda_source
        assert "float A_sh[" in kernel.cuda_source and "float4" not in kernel.cuda_source
        assert kernel.verify(backend="emulator").ok


def relative_error(expression: str, sizes: dict, precision: str, mapping: dict,
                   layout: str = "C") -> float:
    """Largest error of the kernel's result on random float32 inputs, relative to the largest
    value of the float64 reference."""
    kernel = treduda.compile(expression, sizes, precision=precision, layout=layout, **mapping)
    rng = np.random.default_rng(7)
    c = kernel.contraction
    arrays = {t: rng.uniform(-1, 1, [sizes[i] for i in idx]).astype(np.float32)
              for t, idx in c.inputs.items()}
    got = kernel.run(**arrays).astype(np.float64)
    spec = ",".join("".join(idx) for idx in c.inputs.values()) + "->" + "".join(c.output_indices)
    expected = np.einsum(spec, *(a.astype(np.float64) for a in arrays.values()))
    return float(np.abs(got - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("case", [
    ("C[i,j] = A[i,k]*B[k,j]", {"i": 33, "j": 29, "k": 301}),
    ("C[a,b,c,d] = A[d,b,e,a]*B[e,c]", {"a": 12, "b": 7, "c": 16, "d": 9, "e": 131}),
    ("C[a,b] = A[a,c,d]*B[d,b,c]", {"a": 21, "b": 18, "c": 13, "d": 23}),
], ids=["gemm", "tccg_03", "tccg_13"])
def test_3xtf32_is_as_accurate_as_fp32_and_tf32_is_not(case):
    errors = {p: relative_error(*case, p, STAGED, layout="F" if "a" in case[1] else "C")
              for p in ("highest", "tf32", "3xtf32")}
    assert errors["3xtf32"] <= 2 * errors["highest"], errors
    assert errors["tf32"] > 50 * errors["highest"], errors  # never silently plain FP32


def test_tf32_rounds_to_nearest_with_ties_away_from_zero():
    """C = A*1 summed over one value: each element is A rounded as cvt.rna.tf32.f32 rounds
    it (a tie goes away from zero, where round-to-even would keep 1.0); Inf and NaN stay."""
    ulp = 2.0**-10  # of TF32 at 1.0
    values = np.array([1 + ulp / 2, -(1 + ulp / 2), 1 + ulp / 4, 1 + 3 * ulp / 4, 1 + ulp * 1.5,
                       np.inf, -np.inf, np.nan, 3.0e38], np.float32)
    expected = np.array([1 + ulp, -(1 + ulp), 1.0, 1 + ulp, 1 + 2 * ulp, np.inf, -np.inf,
                         np.nan, 3.0e38], np.float32)
    expected[-1] = np.frombuffer(((np.float32(3.0e38).view(np.uint32) + 0x1000) & 0xFFFFE000)
                                 .tobytes(), np.float32)[0]
    kernel = treduda.compile("C[i] = A[i,k]*B[k]", {"i": values.size, "k": 1}, precision="tf32",
                             strategy="tiled")
    for backend in ("opencl", "emulator"):
        got = kernel.run(A=values[:, None], B=np.ones(1, np.float32), backend=backend)
        np.testing.assert_array_equal(got, expected)


def test_precision_is_part_of_the_cache_key_and_the_kernel(tmp_path):
    cache = TuningCache(tmp_path / "tuning.sqlite3")
    expression, sizes = GEMM
    for precision in ("highest", "3xtf32"):
        treduda.compile(expression, sizes, precision=precision, cache=cache)
    assert sorted(e.key.precision for e in cache.entries()) == ["3xtf32", "highest"]
    names = {treduda.compile(expression, sizes, precision=p, **DIRECT).name
             for p in ("highest", "tf32", "3xtf32")}
    assert len(names) == 3


def test_precision_is_refused_where_it_does_not_apply():
    with pytest.raises(DtypeError, match="float64 kernels take precision='highest'"):
        treduda.compile(*GEMM, dtype="float64", precision="tf32", **DIRECT)
    with pytest.raises(DtypeError, match="precision 'tf16' is not supported"):
        treduda.compile(*GEMM, precision="tf16", **DIRECT)
    with pytest.raises(DtypeError, match="float16 kernels take"):
        treduda.contract("ik,kj", np.ones((2, 3), np.float16), np.ones((3, 2), np.float16),
                         precision="3xtf32")


def test_cli_compiles_at_a_precision(capsys):
    assert main(["compile", GEMM[0], "-s", "i=8", "-s", "j=8", "-s", "k=8", "--strategy",
                 "tiled", "--precision", "3xtf32"]) == 0
    assert "td_tf32x3(" in capsys.readouterr().out


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed here")
def test_nvrtc_compiles_half_and_tf32_kernels_without_headers():
    """CuPy compiles with NVRTC, which finds no CUDA headers without a toolkit."""
    for options in ({"dtype": "float16"}, {"dtype": "bfloat16"}, {"precision": "3xtf32"}):
        ptx = compile_nvrtc(treduda.compile(*GEMM, **options, **DIRECT).cuda_source)
        assert ".entry" in ptx


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_half_and_tf32_kernels(arch):
    kernels = [treduda.compile(*GEMM, **options, **STAGED)
               for options in ({"dtype": "float16"}, {"dtype": "bfloat16"},
                               {"precision": "tf32"}, {"precision": "3xtf32"})]
    reports = compile_cuda_batch([k.cuda_source for k in kernels], arch)
    for kernel, report in zip(kernels, reports, strict=True):
        found = next(r for r in report if r.name == kernel.name)
        assert found.registers > 0 and found.spill_stores == 0


SPACE = ("C[i,j] = A[i,k]*B[k,j]", {"i": 200, "j": 120, "k": 72})
VALUES = {"block_x": (16, 32), "block_y": (4, 8), "block_z": (1,), "reg_x": (1, 4),
          "reg_y": (1, 4), "reg_z": (1,), "step": (8,), "order": ("j,i",)}


@pytest.mark.parametrize(("dtype", "precision"), [("float16", "highest"), ("float32", "3xtf32")])
def test_bound_is_below_estimate_for_half_and_3xtf32(dtype, precision):
    searcher = Searcher(plan(*SPACE, "C", dtype, precision=precision), "H100", values=VALUES)
    assert bound_paths_hold(searcher) > 50


def test_the_model_counts_storage_and_rounding():
    """Half storage halves the compulsory traffic; 3xTF32's four FP32 instructions per
    multiply-add and the rounding of each operand make it slower than TF32, slower than FP32."""
    sizes = {"i": 2048, "j": 2048, "k": 2048}
    params = {"order": "j,i", "stage": "A,B", "block_x": 32, "reg_x": 4, "assign_x": "adjacent",
              "block_y": 8, "reg_y": 8, "step": 16, "preload": True, "double_buffer": True}

    def estimate(dtype="float32", precision="highest"):
        program = plan(SPACE[0], sizes, "C", dtype, precision=precision)
        model = Model(program, gpu("H100"), "tiled+staged")
        full = {**treduda.strategies.get("tiled+staged").defaults(program), **params}
        return model.estimate(full)

    fp32, half = estimate(), estimate("float16")
    assert half.resources["dram"] == pytest.approx(fp32.resources["dram"] / 2)
    assert half.flops == fp32.flops
    seconds = [estimate(precision=p).resources["issue"] for p in ("highest", "tf32", "3xtf32")]
    assert seconds[0] < seconds[1] < seconds[2]
