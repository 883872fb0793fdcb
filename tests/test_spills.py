"""Register tiles stay in registers: GEMM 4096^3 in float32 with an 8x8 register tile per thread
and both inputs staged in shared memory compiles with no spills (issue #3), and so does the pick
of compile()'s budgeted search (issue 38: its climb stopped at a single-buffered kernel that
ptxas spills)."""

from __future__ import annotations

from conftest import needs_nvcc

import treduda


@needs_nvcc
def test_gemm_with_register_tile_and_staging_does_not_spill():
    kernel = treduda.compile(
        "C[i,j] = A[i,k]*B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, strategy="tiled+staged",
        params={"block_x": 16, "block_y": 16, "reg_x": 8, "reg_y": 8, "step": 16,
                "stage": "A,B", "pad": 1})
    report = kernel.compile_cuda("sm_90")
    assert report.spill_stores == 0 and report.spill_loads == 0
    assert report.shared_bytes == 4 * (128 * 17 + 16 * 129)  # A and B tiles, padded
    assert 64 < report.registers <= 255  # 64 accumulators live in registers


@needs_nvcc
def test_the_budgeted_pick_for_gemm_4096_does_not_spill():
    sizes = {"i": 4096, "j": 4096, "k": 4096}
    best = treduda.search("C[i,j] = A[i,k]*B[k,j]", sizes, "H100").best
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", sizes, strategy=best.strategy,
                             params=best.params)
    report = kernel.compile_cuda("sm_90")
    assert report.spill_stores == 0 and report.spill_loads == 0
