"""The tensor-core model's registers per thread beside ptxas's (CUDA 13, sm_90), which set its
occupancy: within a quarter on GEMMs of each precision, TF32 included, whose operand fragments
a thread held for every k-slice of a step while WMMA loaded them through generic addresses
(122 registers at frags_k 4) and holds for one since they are shared loads (80).
benchmarks/tensorcore_registers.py prints a wider table."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

import treduda
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.run.nvcc import compile_cuda_batch

GEMM = "C[i,j] = A[i,k] * B[k,j]"
SIZES = {"i": 256, "j": 256, "k": 256}
TOLERANCE = 0.25  # ptxas's own choices differ by more between float16 and bfloat16 tiles
TILES = {"warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 2, "frags_k": 2,
         "stages": 1, "split": 1, "async_copy": True}
# dtype, precision, parameters
CASES = [("float16", "highest", TILES),
         ("float32", "tf32", {**TILES, "frags_n": 4}),
         ("float32", "tf32", {**TILES, "frags_k": 4}),
         ("float32", "3xtf32", TILES),
         ("float64", "highest", TILES)]


@needs_nvcc
def test_the_register_estimate_follows_ptxas():
    kernels = [treduda.compile(GEMM, SIZES, dtype=dtype, precision=precision,
                               strategy="tensorcore", params=params, cache=False)
               for dtype, precision, params in CASES]
    for kernel, reports in zip(kernels, compile_cuda_batch([k.cuda_source for k in kernels]),
                               strict=True):
        ptxas = next(r for r in reports if r.kernel == kernel.name).registers
        estimate = model_of(kernel.program, gpu("H100"), "tensorcore").registers(kernel.params)[0]
        assert estimate == pytest.approx(ptxas, rel=TOLERANCE), (
            kernel.dtype, kernel.precision, dict(kernel.params), estimate, ptxas)
