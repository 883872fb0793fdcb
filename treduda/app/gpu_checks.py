"""What the GPU benchmarks share, for a generated kernel (:class:`treduda.Kernel`) and a bundled
one (:class:`treduda.bundle.BundledKernel`) alike: the libraries they are timed beside, the
operands a row runs on, the einsum a user would write instead, and the check of a result
against the libraries' einsum in a wide type. Without the compiler (no isl): the bundle's GPU
session imports it on the device.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..errors import TredudaError, VerificationError
from ..frontend.contraction import Contraction
from ..frontend.dtypes import BFLOAT16, uniform, wide
from ..run import reference
from ..run.device_arrays import cupy_module, to_cupy


class Runnable(Protocol):
    """What the checks read of a kernel, generated or bundled."""

    name: str
    contraction: Contraction
    sizes: dict[str, int]
    dtype: str
    layout: str
    precision: str
    expression: str


def gpu_libraries():
    """CuPy (needed: its einsum is the reference and a baseline), and torch if installed, with
    TF32 off so that float32 contractions take cuBLAS's FP32 path, as treduda's kernels do
    (rows with precision="tf32" allow it while torch is timed). BackendUnavailable where
    there is no GPU."""
    from ..run.cuda import cuda_runtime

    cuda_runtime()
    cupy = cupy_module()
    try:
        import torch
    except ImportError:
        return cupy, None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return cupy, torch


def random_operands(kernel: Runnable, xp, torch=None) -> dict[str, Any]:
    """Every input uniform in [-0.5, 0.5) (each part, if complex), as arrays of ``xp`` (CuPy:
    on the GPU; numpy: on the host), stored in the kernel's layout. On the GPU, bfloat16
    operands are rounded by torch (CuPy's bfloat16 is young: its arrays come from torch's
    through their bits, :mod:`treduda.run.device_arrays`)."""
    c = kernel.contraction
    through_torch = kernel.dtype == "bfloat16" and xp is not np
    if through_torch and torch is None:
        raise TredudaError("the GPU benchmark makes bfloat16 operands with torch, which is "
                           "not installed: pip install torch, or run the row in float16")
    state = xp.random.RandomState(seed=0)
    arrays = {}
    for tensor, indices in c.inputs.items():
        shape = tuple(kernel.sizes[i] for i in indices)
        values = uniform(state, -0.5, 0.5, shape, "float32" if through_torch else kernel.dtype)
        if through_torch:
            values = to_cupy(tensor, torch.from_dlpack(values).to(torch.bfloat16))
        arrays[tensor] = xp.asfortranarray(values) if kernel.layout == "F" else values
    return arrays


def widened(array, dtype: str, xp):
    """``array`` (of the array module ``xp``: CuPy, or numpy) converted to ``dtype`` (float64 or
    complex128); bfloat16 through its bits, the upper half of a float32's, so exactly and
    whether or not this CuPy knows the type."""
    if array.dtype == BFLOAT16:
        bits = array.view(xp.uint16).astype(xp.uint32) << 16
        array = bits.view(xp.float32)
    return array.astype(dtype)


def check_result(kernel: Runnable, operands: dict[str, Any], result, xp, torch=None,
                 steps: int = 1) -> float:
    """Compare ``result`` with ``xp.einsum`` (and torch.einsum where ``torch`` is given: on the
    GPU) computed in float64 (complex128 for a complex kernel) on the same ``operands``, within
    the rounding bound of :mod:`treduda.run.reference` (``steps`` times it for a program of as
    many kernels, each rounding its output); returns the larger error."""
    c = kernel.contraction
    precise = wide(kernel.dtype)
    result = widened(result, precise, xp)
    wide_operands = {name: widened(array, precise, xp) for name, array in operands.items()}
    allowed = steps * reference.tolerance(c, wide_operands, {}, kernel.sizes, kernel.dtype,
                                          xp=xp, precision=kernel.precision)
    spec = einsum_spec(kernel)
    inputs = [wide_operands[r.tensor] for r in c.terms[0].reads]
    library = "cupy" if xp is not np else "numpy"
    options = {"optimize": True} if xp is np else {}  # as reference.evaluate: BLAS, pairs
    expected = {f"{library}.einsum": xp.einsum(spec, *inputs, **options)}
    if torch is not None:
        tensors = [torch.from_dlpack(a) for a in inputs]
        expected["torch.einsum"] = xp.from_dlpack(torch.einsum(spec, *tensors))
    worst = 0.0
    for name, value in expected.items():
        error = xp.abs(result - value)
        if not bool(xp.all(error <= allowed)) or not bool(xp.all(xp.isfinite(result))):
            raise VerificationError(f"{kernel.name} ({kernel.expression}) differs from "
                                    f"{name} in {precise}: largest error "
                                    f"{float(error.max()):.3g}, allowed "
                                    f"{float(allowed.max()):.3g}")
        worst = max(worst, float(error.max()))
    return worst


def einsum_spec(kernel: Runnable) -> str:
    """The einsum a user would write for this kernel: its one product term."""
    spec = reference.product_spec(kernel.contraction)
    if spec is None:
        raise TredudaError(f"{kernel.expression}: the GPU benchmark times plain products "
                           "(C = A*B) against einsum")
    return spec
