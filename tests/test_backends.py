"""The pycuda backend as far as a machine without a GPU allows, and the PoCL backend's
handling of arguments."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import treduda
from treduda.errors import BackendUnavailable
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
