"""The CUDA backend (CuPy or pycuda) as far as a machine without a GPU allows, device arrays,
timing, and the PoCL backend's handling of arguments."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import treduda
from treduda.app.gpu_checks import widened
from treduda.codegen import ir
from treduda.errors import BackendUnavailable
from treduda.kernel import BACKENDS
from treduda.run.cuda import gpu_present
from treduda.run.device_arrays import first_device_array, is_device_array, like, to_framework
from treduda.run.launch import address

GEMM = "C[i,j] = alpha*A[i,k]*B[k,j]"
no_gpu = pytest.mark.skipif(gpu_present(), reason="a GPU is present; see the tests on a GPU")
on_gpu = pytest.mark.skipif(not gpu_present(), reason="no CUDA GPU on this machine")


class _DeviceMemory:
    """An array that says it lives on a CUDA device, as torch and numba arrays do."""

    shape, dtype = (2, 3), np.dtype("float32")

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0


class _HostMemory:
    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


@no_gpu
def test_cuda_backend_explains_why_it_cannot_run():
    kernel = treduda.compile(GEMM, {"i": 4, "j": 5, "k": 6})
    with pytest.raises(BackendUnavailable) as error:
        kernel.run(backend="cuda", A=np.ones((4, 6), "f4"), B=np.ones((6, 5), "f4"), alpha=1.0)
    assert "treduda[cupy]" in str(error.value) or "backend='opencl'" in str(error.value)


@no_gpu
def test_timing_on_cuda_explains_why_it_cannot_run():
    kernel = treduda.compile(GEMM, {"i": 4, "j": 5, "k": 6})
    with pytest.raises(BackendUnavailable) as error:
        kernel.time(backend="cuda", repeats=3)
    assert "treduda[cupy]" in str(error.value) or "backend='opencl'" in str(error.value)


def test_device_arrays_are_told_apart_from_host_arrays():
    assert is_device_array(_DeviceMemory())
    assert not is_device_array(_HostMemory()) and not is_device_array(np.ones(3))
    values = {"A": np.ones(3), "B": _DeviceMemory(), "C": np.ones(3)}
    assert first_device_array(values, "C") is values["B"]
    assert first_device_array({"A": np.ones(3)}, "C") is None


def test_a_result_returns_as_the_kind_of_array_it_came_as():
    """like() hands the result to the template's framework through DLPack (numpy stands in
    for torch here: both have a top-level from_dlpack)."""
    result = np.arange(6.0)
    back = like(np.zeros(1), result)
    assert isinstance(back, np.ndarray) and np.shares_memory(back, result)


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None,
                    reason="CuPy is installed")
def test_device_arrays_without_cupy_name_the_extra():
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 2, "j": 3, "k": 4})
    with pytest.raises(BackendUnavailable, match=r"pip install 'treduda\[cupy\]'"):
        kernel.run(backend="cuda", A=_DeviceMemory(), B=np.ones((4, 3)))


def test_pocl_times_a_kernel_with_profiling_events():
    kernel = treduda.compile(GEMM, {"i": 37, "j": 45, "k": 13}, strategy="tiled")
    timing = kernel.time(backend="opencl", repeats=4, warmup=1)
    assert timing.repeats == 4 and 0 < timing.fastest <= timing.seconds <= timing.slowest
    assert "OpenCL profiling events" in timing.device
    given = kernel.time(backend="opencl", repeats=2, A=np.ones((37, 13), "f4"),
                        B=np.ones((13, 45), "f4"), alpha=2.0)
    assert given.repeats == 2
    with pytest.raises(BackendUnavailable, match="not 'emulator'"):
        kernel.time(backend="emulator")


@on_gpu
def test_cuda_backend_on_a_gpu():
    kernel = treduda.compile(GEMM, {"i": 37, "j": 45, "k": 13})
    assert kernel.verify(backend="cuda").ok
    timing = kernel.time(backend="cuda", repeats=5)
    assert timing.repeats == 5 and timing.seconds > 0


@on_gpu
def test_a_device_view_off_the_alignment_runs_right():
    """A CuPy view that starts one element in is copied before a kernel that reads B and
    writes C in 128-bit accesses sees it (run as it is, the launch would fault)."""
    cupy = pytest.importorskip("cupy")
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 64, "j": 64, "k": 64},
                             strategy="tiled", params={"order": "j,i", "block_x": 16,
                                                       "reg_x": 4, "assign_x": "adjacent"})
    a = cupy.random.rand(64 * 64 + 1, dtype=cupy.float32)[1:].reshape(64, 64)
    b = cupy.random.rand(64 * 64 + 1, dtype=cupy.float32)[1:].reshape(64, 64)
    assert a.data.ptr % ir.VECTOR_BYTES and b.data.ptr % ir.VECTOR_BYTES
    c = kernel.run(backend="cuda", A=a, B=b)
    assert cupy.allclose(c, a @ b, rtol=1e-4)


@on_gpu
def test_device_arrays_stay_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 37, "j": 45, "k": 13},
                             layout="F")
    a, b = cupy.random.rand(37, 13), cupy.random.rand(13, 45)
    c = kernel.run(backend="cuda", A=a, B=b)
    assert isinstance(c, cupy.ndarray)
    assert cupy.allclose(c, cupy.einsum("ik,kj->ij", a, b), rtol=1e-4)


def test_unknown_backend_is_explained():
    kernel = treduda.compile("C[i] = A[i]", {"i": 3})
    with pytest.raises(BackendUnavailable, match="unknown backend 'metal'"):
        kernel.run(backend="metal", A=np.ones(3, "f4"))
    assert "emulator" in BACKENDS


# A preloaded staging kernel PoCL 3.0 used to miscompute (the matrix found it; the emulator
# found it correct): a barrier closing each loop with barriers in the OpenCL text fixes it.
PRELOADED = ("C[a,b,c,d] = A[d,b,e,a]*B[e,c]", {"a": 12, "b": 7, "c": 16, "d": 9, "e": 11},
             {"order": "d,b,a", "block_x": 1, "block_y": 8, "block_z": 1, "reg_x": 8,
              "reg_y": 1, "reg_z": 2, "step": 8, "pad": 1, "stage": "B", "preload": True,
              "unroll": True})


@pytest.mark.parametrize("double_buffer", [False, True])
def test_pocl_runs_the_preloaded_kernel_it_used_to_get_wrong(double_buffer):
    expression, sizes, params = PRELOADED
    kernel = treduda.compile(expression, sizes, layout="F", dtype="float64",
                             strategy="tiled+staged", params={**params,
                                                              "double_buffer": double_buffer})
    assert kernel.verify().ok
    assert kernel.verify(backend="emulator").ok


def test_only_the_opencl_text_closes_loops_with_a_barrier():
    expression, sizes, params = PRELOADED
    kernel = treduda.compile(expression, sizes, layout="F", strategy="tiled+staged",
                             params={**params, "double_buffer": True})
    for source, barrier in ((kernel.cuda_source, "__syncthreads();"),
                            (kernel.opencl_source, "barrier(CLK_LOCAL_MEM_FENCE);")):
        lines = [line.strip() for line in source.splitlines()]
        closing = [n for n, line in enumerate(lines) if line == barrier and lines[n + 1] == "}"
                   and lines[n - 1] == "}"]
        # in OpenCL: one closing each scan's step loop, the full blocks' and the edge blocks'
        # (c, the output index on no axis, is no loop around it: it has blocks of its own)
        assert len(closing) == (0 if barrier.startswith("__") else 2)


def test_tensors_reach_a_kernel_aligned_for_vector_accesses():
    """Kernels read and write a thread's neighbouring elements in vector accesses, which in
    CUDA need every tensor to start on a 16-byte boundary: a view that starts one element in
    is copied, and the result is still right."""
    kernel = treduda.compile(GEMM, {"i": 5, "j": 3, "k": 7})
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, 36).astype(np.float32)[1:].reshape(5, 7)
    b = rng.uniform(-1, 1, 22).astype(np.float32)[1:].reshape(7, 3)
    assert a.ctypes.data % ir.VECTOR_BYTES and b.ctypes.data % ir.VECTOR_BYTES
    launch = kernel._prepare(kernel.sizes, {"A": a, "B": b}, {"alpha": 2.0})
    arrays = [v for v in launch.values if isinstance(v, np.ndarray)]
    assert len(arrays) == 3 and all(address(v) % ir.VECTOR_BYTES == 0 for v in arrays)
    np.testing.assert_allclose(kernel.run(A=a, B=b, alpha=2.0), 2 * a @ b, rtol=1e-5)


def test_bfloat16_widens_exactly_through_its_bits():
    """The GPU benchmark widens bfloat16 through its bits, which any CuPy can do (numpy stands
    in for CuPy: the same calls)."""
    values = np.array([0.0, -0.0, 1.0, -3.140625, 2.0**-133, 3.0e38, np.inf, -0.4921875],
                      dtype="bfloat16")
    wide = widened(values, "float64", np)
    assert wide.dtype == np.float64
    assert np.array_equal(wide, values.astype(np.float64))
    assert np.signbit(wide[1])


def test_bfloat16_reaches_torch_as_bfloat16_sharing_memory():
    """A bfloat16 result goes to torch as its bits and is viewed back there (numpy stands in
    for CuPy as the array handed over; both export DLPack)."""
    torch = pytest.importorskip("torch")
    values = np.array([1.5, -2.0, 0.0078125, 65280.0], dtype="bfloat16")
    tensor = to_framework(torch, values)
    assert tensor.dtype == torch.bfloat16
    assert tensor.float().tolist() == values.astype(np.float32).tolist()
    assert tensor.data_ptr() == values.ctypes.data


@on_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_half_tensors_run_on_the_gpu_and_come_back_as_torch(dtype):
    """torch float16 and bfloat16 tensors on the GPU run as they are (bfloat16 reaches CuPy
    as its bits) and the result is a torch tensor of the same dtype, on the GPU."""
    torch = pytest.importorskip("torch")
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 37, "j": 45, "k": 29},
                             dtype=dtype)
    kind = getattr(torch, dtype)
    a = torch.rand(37, 29, device="cuda").sub(0.5).to(kind)
    b = torch.rand(29, 45, device="cuda").sub(0.5).to(kind)
    c = kernel.run(backend="cuda", A=a, B=b)
    assert isinstance(c, torch.Tensor) and c.dtype == kind and c.is_cuda
    expected = a.double() @ b.double()
    rounding = 2.0**-8 if dtype == "bfloat16" else 2.0**-11
    assert torch.allclose(c.double(), expected, rtol=4 * rounding, atol=29 * 2.0**-20)


def test_torch_bfloat16_tensors_on_the_host_run_as_their_values():
    """numpy refuses torch's bfloat16 (``np.asarray`` raises); treduda takes it through its
    bits, in contract() and Kernel.run, and answers in numpy's bfloat16 (ml_dtypes)."""
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    a = torch.rand(13, 7, generator=generator).sub(0.5).to(torch.bfloat16)
    b = torch.rand(7, 10, generator=generator).sub(0.5).to(torch.bfloat16)
    expected = (a.double() @ b.double()).numpy()
    result = treduda.contract("ik,kj", a, b)
    assert result.dtype == np.dtype("bfloat16")
    assert np.allclose(result.astype(np.float64), expected, rtol=2.0**-7, atol=2.0**-20)
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 13, "j": 10, "k": 7},
                             dtype="bfloat16", strategy="tiled")
    assert np.array_equal(kernel.run(A=a, B=b), treduda.contract("ik,kj", a, b,
                                                                 strategy="tiled"))
