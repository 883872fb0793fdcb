"""Arrays that already live on a GPU: CuPy arrays, and anything exposing
``__cuda_array_interface__`` or DLPack on a CUDA device (torch tensors, for instance).

``Kernel.run(backend="cuda")`` takes them without a round trip through the host, through CuPy
(zero-copy views), and answers in the kind of array it was given.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ..errors import BackendUnavailable

# DLDeviceType values of memory a CUDA kernel can address (dlpack.h): kDLCUDA, kDLCUDAManaged.
DLPACK_CUDA_DEVICES = (2, 13)

CUPY_MISSING = ("arrays on a GPU are passed to kernels through CuPy, which is not installed: "
                "pip install 'treduda[cupy]' (see the README for cupy-cuda12x or cupy-cuda13x)")


def is_device_array(value: Any) -> bool:
    """Whether ``value`` is an array in CUDA device memory (not a host or numpy array)."""
    try:
        if hasattr(value, "__cuda_array_interface__"):
            return True
        device = getattr(value, "__dlpack_device__", None)
        return device is not None and int(device()[0]) in DLPACK_CUDA_DEVICES
    except (RuntimeError, TypeError, ValueError):  # e.g. a torch tensor that requires grad
        return False


def cupy_module():
    """CuPy, or BackendUnavailable saying how to install it."""
    try:
        import cupy
    except ImportError as error:
        raise BackendUnavailable(CUPY_MISSING) from error
    return cupy


def to_cupy(name: str, value: Any):
    """A CuPy view of the device array ``value`` (no copy), for the tensor ``name``."""
    cupy = cupy_module()
    try:
        if hasattr(value, "__cuda_array_interface__"):
            return cupy.asarray(value)
        return cupy.from_dlpack(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise BackendUnavailable(f"{name}: CuPy cannot use this {type(value).__name__} as a "
                                 f"device array ({error})") from error


def first_device_array(values: Mapping[str, Any], output: str) -> Any | None:
    """The device array whose kind a result takes: the output's if it was passed, else the
    first input's; None when every array is on the host."""
    ordered = [values[output]] if output in values else []
    ordered += [v for name, v in values.items() if name != output]
    return next((v for v in ordered if is_device_array(v)), None)


def like(template: Any, result: Any) -> Any:
    """``result`` (a CuPy array) as the kind of array ``template`` is: CuPy stays CuPy; a
    framework with a top-level ``from_dlpack`` (torch) gets its own kind back, sharing the
    memory; anything else gets the CuPy array."""
    framework = sys.modules.get(type(template).__module__.partition(".")[0])
    if framework is None or framework.__name__ == "cupy":
        return result
    from_dlpack = getattr(framework, "from_dlpack", None)
    return result if from_dlpack is None else from_dlpack(result)
