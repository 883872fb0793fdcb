"""The pycuda backend as far as a machine without a GPU allows, and the PoCL backend's
handling of arguments."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import treduda
from treduda.errors import BackendUnavailable
from treduda.kernel import BACKENDS
from treduda.run.cuda import driver_arguments

GEMM = "C[i,j] = alpha*A[i,k]*B[k,j]"


def _has_gpu() -> bool:
    try:
        from treduda.run.cuda import cuda_device

        cuda_device()
    except BackendUnavailable:
        return False
    return True


@pytest.mark.skipif(_has_gpu(), reason="a GPU is present; see test_cuda_backend_on_a_gpu")
def test_cuda_backend_explains_why_it_cannot_run():
    kernel = treduda.compile(GEMM, {"i": 4, "j": 5, "k": 6})
    with pytest.raises(BackendUnavailable) as error:
        kernel.run(backend="cuda", A=np.ones((4, 6)), B=np.ones((6, 5)), alpha=1.0)
    if importlib.util.find_spec("pycuda") is None:
        assert "pip install 'treduda[cuda]'" in str(error.value)
    else:
        assert "backend='opencl'" in str(error.value)


@pytest.mark.skipif(not _has_gpu(), reason="no CUDA GPU on this machine")
def test_cuda_backend_on_a_gpu():
    kernel = treduda.compile(GEMM, {"i": 37, "j": 45, "k": 13})
    assert kernel.verify(backend="cuda").ok


class _Recording:
    """Stands in for pycuda.driver's argument wrappers: records which way each array moves."""

    @staticmethod
    def In(array):  # noqa: N802 - pycuda's name
        return ("in", array)

    @staticmethod
    def InOut(array):  # noqa: N802 - pycuda's name
        return ("inout", array)


def test_cuda_arguments_copy_inputs_in_and_the_output_both_ways():
    kernel = treduda.compile(GEMM, {"i": 2, "j": 3, "k": 4}, symbolic=True)
    a, b = np.ones((2, 4)), np.ones((4, 3))
    launch = kernel._prepare({"i": 2, "j": 3, "k": 4}, {"A": a, "B": b}, {"alpha": 2.0})
    args = driver_arguments(launch, _Recording)
    assert [arg[0] for arg in args[:3]] == ["inout", "in", "in"]
    assert args[0][1].shape == (6,) and args[1][1].dtype == np.float32
    assert args[3] == np.float32(2.0) and args[3].dtype == np.float32
    assert [int(x) for x in args[4:]] == [2, 3, 4] and args[4].dtype == np.int64
    assert launch.grid == kernel.grid_for({"i": 2, "j": 3, "k": 4})


def test_unknown_backend_is_explained():
    kernel = treduda.compile("C[i] = A[i]", {"i": 3})
    with pytest.raises(BackendUnavailable, match="unknown backend 'metal'"):
        kernel.run(backend="metal", A=np.ones(3))
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
        # in OpenCL: one closing the step loop, one the loop around it
        assert len(closing) == (0 if barrier.startswith("__") else 2)
