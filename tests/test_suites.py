"""Every row of the public benchmark lists, scaled down to extents 5..40, runs on PoCL and
matches numpy.einsum; CI runs each row once in its own layout, `pytest -m matrix` runs every
row in both layouts, both dtypes, with fixed and with symbolic sizes."""

from __future__ import annotations

import pytest
from conftest import COMBINATIONS, generated, needs_nvcc

from treduda.errors import CompileError
from treduda.run.nvcc import compile_cuda, compile_cuda_batch, nvrtc_view
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.suites import SUITES, load, scaled

ROWS = [row for suite in ("tccg_fp32", "tc", "tapp", "gemm") for row in load(suite)]


def _kernel(row, layout, dtype, symbolic):
    return generated(row.expression, tuple(scaled(row.sizes).items()), layout, dtype, symbolic)


def test_suites_have_every_row():
    assert {s: len(load(s)) for s in SUITES} == {
        "tccg_fp32": 48, "tccg_fp64": 48, "tc": 14, "tapp": 2, "gemm": 3,
        **{f"{rows}_{kind}": 48 if rows == "tccg" else 3
           for rows in ("gemm", "tccg") for kind in ("fp16", "bf16", "tf32")}}


@pytest.mark.parametrize("sizes", [row.sizes for row in ROWS[:20]] + [{"a": 8, "b": 16}])
def test_scaled_sizes_stay_small_and_mix_tile_multiples(sizes):
    small = scaled(sizes)
    assert set(small) == set(sizes) and all(5 <= v <= 40 for v in small.values())
    assert any(v % 8 for v in small.values()) and any(v % 8 == 0 for v in small.values())


@pytest.mark.parametrize(("number", "row"), list(enumerate(ROWS)), ids=[r.id for r in ROWS])
def test_row_matches_einsum(number, row):
    """Each row in its source's layout; dtypes alternate so both are covered."""
    kernel = _kernel(row, row.layout, ("float32", "float64")[number % 2], False)
    assert kernel.verify(scaled(row.sizes)).ok


@pytest.mark.matrix
@pytest.mark.parametrize("combo", COMBINATIONS, ids=["-".join(map(str, c)) for c in COMBINATIONS])
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_row_matches_einsum_everywhere(row, combo):
    assert _kernel(row, *combo).verify(scaled(row.sizes)).ok


@needs_nvcc
@pytest.mark.parametrize("combos", [
    pytest.param([("F", "float32", False)], id="sample"),
    pytest.param(COMBINATIONS, id="all", marks=pytest.mark.matrix)])
def test_rows_cuda_compiles_without_warnings(combos):
    kernels = [_kernel(row, *combo) for row in ROWS for combo in combos]
    reports = compile_cuda_batch([k.cuda_source for k in kernels])
    assert [[r.kernel for r in rs] for rs in reports] == [[k.name] for k in kernels]
    assert all(rs[0].registers > 0 for rs in reports)


@needs_nvcc
def test_rows_device_part_compiles_as_nvrtc_sees_it():
    """What CuPy's RawModule hands NVRTC: the host glue is invisible once __CUDACC_RTC__ is
    defined, and the rest compiles on its own as a whole program (-rdc=false -cubin)."""
    kernels = [_kernel(row, row.layout, "float32", False) for row in ROWS]
    assert all("<<<" in k.cuda_source and "cudaStream_t" in k.cuda_source for k in kernels)
    sources = dict.fromkeys(k.cuda_source for k in kernels)  # some rows give the same kernel
    device = nvrtc_view("\n".join(sources))
    for absent in ("<<<", "cudaStream_t", "dim3", "_launch("):
        assert absent not in device
    reports = compile_cuda(device)
    assert sorted(r.kernel for r in reports) == sorted({k.name for k in kernels})


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (pip install nvidia-cuda-nvrtc) absent")
def test_rows_compile_with_nvrtc_itself():
    """The compiler CuPy's RawModule uses takes every suite kernel as printed; without the
    guard around the host glue it would reject them."""
    kernels = [_kernel(row, row.layout, "float64", False) for row in ROWS]
    sources = "\n".join(dict.fromkeys(k.cuda_source for k in kernels))
    ptx = compile_nvrtc(sources)
    assert all(f".entry {k.name}(" in ptx for k in kernels)
    with pytest.raises(CompileError, match="host functions are not allowed"):
        compile_nvrtc(kernels[0].cuda_source.replace("#ifndef __CUDACC_RTC__", "#if 1"))
