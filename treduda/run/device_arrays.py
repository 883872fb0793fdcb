"""Arrays that already live on a GPU: CuPy arrays, and anything exposing
``__cuda_array_interface__`` or DLPack on a CUDA device (torch tensors, for instance).

``Kernel.run(backend="cuda")`` takes them without a round trip through the host, through CuPy
(zero-copy views), and answers in the kind of array it was given.

bfloat16 crosses from torch to CuPy or numpy as its 16-bit patterns (an int16 view on each side):
CuPy knows the type only from version 14 with ml_dtypes (cupy/cupy#9494), and older versions
crash rather than refuse a bfloat16 tensor in ``cupy.from_dlpack`` (cupy/cupy#8801).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import BackendUnavailable
from ..frontend.dtypes import BFLOAT16

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
        if _is_torch_bfloat16(value):
            return bfloat16_view(cupy, cupy.from_dlpack(_bits(value)))
        if hasattr(value, "__cuda_array_interface__"):
            return cupy.asarray(value)
        return cupy.from_dlpack(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise BackendUnavailable(f"{name}: CuPy cannot use this {type(value).__name__} as a "
                                 f"device array ({error})") from error


def to_numpy(value: Any) -> np.ndarray:
    """A host array ``value`` as numpy's (a view where numpy can make one); a torch bfloat16
    tensor through its bits, since numpy's ``asarray`` refuses the type."""
    if _is_torch_bfloat16(value):
        return np.from_dlpack(_bits(value)).view(BFLOAT16)
    return np.asarray(value)


def bfloat16_view(cupy, bits):
    """The CuPy array of 16-bit patterns ``bits`` seen as bfloat16, or BackendUnavailable
    where this CuPy has no such type."""
    try:
        return bits.view(BFLOAT16)
    except (TypeError, ValueError) as error:
        raise BackendUnavailable(
            f"CuPy {cupy.__version__} has no bfloat16 arrays ({error}); CuPy 14 or later has "
            "them when ml_dtypes is installed: pip install -U 'cupy-cuda12x>=14' (or "
            "cupy-cuda13x), or pass the tensors as numpy arrays of ml_dtypes.bfloat16") from error


def _bits(tensor: Any) -> Any:
    """A torch bfloat16 tensor's 16-bit patterns, as an int16 view of it (DLPack and numpy
    take those)."""
    return tensor.view(sys.modules["torch"].int16)


def _is_torch_bfloat16(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16


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
    return to_framework(framework, result)


def to_framework(framework, array: Any) -> Any:
    """``array`` (CuPy) as ``framework``'s kind of array (through its top-level
    ``from_dlpack``, sharing the memory), or ``array`` itself where it has none; bfloat16 goes
    as its bits and is viewed back there."""
    from_dlpack = getattr(framework, "from_dlpack", None)
    if from_dlpack is None:
        return array
    if array.dtype == BFLOAT16 and hasattr(framework, "bfloat16"):
        return from_dlpack(array.view(np.int16)).view(framework.bfloat16)
    return from_dlpack(array)
