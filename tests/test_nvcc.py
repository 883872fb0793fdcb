"""nvcc wrapper: ptxas log parsing (always runs) and real compiles (only where nvcc is)."""

from __future__ import annotations

import time

import pytest

import treduda
from treduda.errors import BackendUnavailable, CompileError
from treduda.model.gpus import gpu
from treduda.run import nvcc
from treduda.run.nvcc import (
    CudaReport,
    code_of,
    compile_cuda,
    compile_cuda_batch,
    nvcc_available,
    parse_ptxas,
)

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")

CUDA13_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z2k2Pfi' for 'sm_90'
ptxas info    : Function properties for _Z2k2Pfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 2.921 ms
ptxas info    : Compiling entry function 'k1' for 'sm_90'
ptxas info    : Function properties for k1
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 12 registers, used 1 barriers, 4224 bytes smem
ptxas info    : Compile time = 2.585 ms
ptxas info    : Function properties for _Z6helperPfi
    64 bytes stack frame, 32 bytes spill stores, 32 bytes spill loads
"""

OLD_LOG = """\
ptxas info    : Compiling entry function '_ZN2ns4gemmEPKfPf' for 'sm_70'
ptxas info    : Function properties for _ZN2ns4gemmEPKfPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 26 registers, 8192 bytes smem, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z6legacyPf' for 'sm_13'
ptxas info    : Used 4 registers, 8+16 bytes smem, 4 bytes cmem[1]
"""

TILED = """\
__global__ void tiled(float* out) {
    __shared__ float tile[32][33];
    tile[threadIdx.y][threadIdx.x] = out[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
"""

TWO_KERNELS = """\
__global__ void scale(float* out, int n) { if (threadIdx.x < n) out[threadIdx.x] *= 2.0f; }
extern "C" __global__ void __launch_bounds__(128) shift(float* out) { out[threadIdx.x] += 1.0f; }
"""


def test_parse_cuda13_log_skips_non_entry_functions() -> None:
    assert parse_ptxas(CUDA13_LOG) == [
        CudaReport("k2", "sm_90", 8, 0, 0, 0, 0),
        CudaReport("k1", "sm_90", 12, 8, 4, 4224, 16),
    ]


def test_parse_older_formats() -> None:
    assert parse_ptxas(OLD_LOG) == [
        CudaReport("ns::gemm", "sm_70", 26, 0, 0, 8192, 0),
        CudaReport("legacy", "sm_13", 4, 0, 0, 8, 0),
    ]


def test_report_reads_as_one_line() -> None:
    report = CudaReport("gemm_ab12", "sm_90", 32, 4, 8, 4096, 0)
    assert str(report) == "gemm_ab12: 32 registers, 12 B spills, 4096 B shared (sm_90)"


def test_missing_nvcc_is_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: None)
    with pytest.raises(BackendUnavailable, match=r"nvcc was not found on PATH \(nor in"):
        compile_cuda(TILED)


def test_bad_arch_is_compile_error() -> None:
    with pytest.raises(CompileError, match="invalid CUDA architecture 'compute_90'"):
        compile_cuda(TILED, arch="compute_90")


@needs_nvcc
def test_shared_tile_is_reported() -> None:
    [report] = compile_cuda(TILED)
    assert (report.kernel, report.arch, report.shared_bytes) == ("tiled", "sm_90", 4224)
    assert report.registers > 0


@needs_nvcc
def test_two_kernels_give_two_reports() -> None:
    assert sorted(report.kernel for report in compile_cuda(TWO_KERNELS, "sm_80")) == [
        "scale",
        "shift",
    ]


@needs_nvcc
def test_batch_splits_reports_per_source() -> None:
    third = "__global__ void third(double* x) { x[threadIdx.x] = 0.0; }\n"
    tiled, pair, single = compile_cuda_batch([TILED, TWO_KERNELS, third])
    assert [r.kernel for r in tiled] == ["tiled"] and tiled[0].shared_bytes == 4224
    assert sorted(r.kernel for r in pair) == ["scale", "shift"]
    assert [r.kernel for r in single] == ["third"]


@needs_nvcc
def test_device_warning_fails_the_compile() -> None:
    source = "__global__ void unused_var(float* out) { int unused = 3; out[0] = 1.0f; }\n"
    with pytest.raises(CompileError, match="unused_var") as caught:
        compile_cuda(source)
    assert 'variable "unused" was declared but never referenced' in caught.value.log


@needs_nvcc
def test_syntax_error_names_the_kernel() -> None:
    with pytest.raises(CompileError, match="kernel broken for sm_90") as caught:
        compile_cuda("__global__ void broken(float* out) { out[0] = ; }\n")
    assert "error" in caught.value.log


@needs_nvcc
def test_failing_batch_names_the_offending_source() -> None:
    broken = "__global__ void broken(float* out) { out[0] = ; }\n"
    with pytest.raises(CompileError, match="kernel broken for") as caught:
        compile_cuda_batch([TILED, broken, TWO_KERNELS])
    assert "tiled" not in str(caught.value)


def test_a_timed_out_tool_takes_its_children_with_it(monkeypatch, tmp_path):
    """nvcc runs cicc and ptxas as children; when nvcc times out they must stop too."""
    marker = tmp_path / "child-still-running"
    monkeypatch.setattr(nvcc, "TIMEOUT_SECONDS", 1)
    child = f"sleep 3 && touch {marker}"  # a grandchild that would outlive a killed parent
    with pytest.raises(CompileError, match="timed out after 1 s"):
        nvcc.run_tool(["sh", "-c", f"({child}) & wait"], "sleeping")
    time.sleep(3.5)
    assert not marker.exists()


@needs_nvcc
def test_nvcc_says_which_gpus_it_compiles_for() -> None:
    # Hopper and Ampere are in every current CUDA; Fermi (sm_21) left with CUDA 9.
    assert [nvcc.nvcc_supports(gpu(name).arch) for name in ("H100", "A100", "GTX560Ti")] == [
        True, True, False]


def test_kernels_that_differ_only_in_their_names_and_comments_have_one_code() -> None:
    """The thread-register assignments along an axis of one thread make one kernel, which
    ptxas's check compiles once (``policy.checked``); along an axis of two threads, two.
    Both one-thread kernels compute the product."""
    def kernel(threads: int, assignment: str):
        return treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 64, "j": 48, "k": 80},
                               strategy="tiled", cache=False,
                               params={"block_y": threads, "reg_y": 2, "assign_y": assignment})

    adjacent, cyclic = kernel(1, "adjacent"), kernel(1, "cyclic")
    assert adjacent.name != cyclic.name and adjacent.cuda_source != cyclic.cuda_source
    assert code_of(adjacent.cuda_source) == code_of(cyclic.cuda_source)
    assert code_of(kernel(2, "adjacent").cuda_source) != code_of(kernel(2, "cyclic").cuda_source)
    assert adjacent.verify().ok and cyclic.verify().ok
