"""The element types treduda computes in, and every fact the pipeline derives from one.

A complex element is stored as numpy stores it, real part then imaginary part, which is the
layout of CUDA's and OpenCL's ``float2`` / ``double2``: arrays go to a device unchanged. Neither
language has complex operators, so the printers spell complex arithmetic out in real FMAs
(:mod:`treduda.codegen.printer`), and the model counts :data:`COMPLEX_FMAS` of them per complex
multiply-add. Everything else asks this module rather than comparing dtype names.

float16 and bfloat16 are storage types (:data:`STORED`): tensors hold them, registers hold
float32, loads convert and the final store rounds back (to nearest even), as cuBLAS and
cuTENSOR compute them by default. numpy has no bfloat16; ``ml_dtypes`` (imported here, which
registers the name) supplies it.

``precision`` says how float32 products are rounded (:data:`PRECISIONS`): ``"highest"`` is
plain FP32; ``"tf32"`` rounds each input to TF32 (10 mantissa bits, to nearest with ties away
from zero, as ``cvt.rna.tf32.f32``) before multiplying; ``"3xtf32"`` splits each input into a
TF32 high part and a TF32 residual and adds the three larger products, small ones first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import ml_dtypes  # noqa: F401  registers numpy's "bfloat16"
import numpy as np

from ..errors import DtypeError

DTYPES = ("float32", "float64", "complex64", "complex128", "float16", "bfloat16")
ARRAY_KINDS = "biufc"  # numpy dtype kinds an array may have: bool, integers, floats, complex
# Real FMAs per complex multiply-add c += a*b, two per part:
#   c.re += a.re*b.re - a.im*b.im,  c.im += a.re*b.im + a.im*b.re
COMPLEX_FMAS = 4
# Of those, the dependent FMAs in a row: each part's two FMAs chain, the parts run side by side.
COMPLEX_CHAIN = 2


@dataclass(frozen=True)
class Stored:
    """A type tensors are stored in but kernels do not compute in."""

    compute: str  # what registers hold and arithmetic runs in
    unit_roundoff: float  # of rounding a value to this type: 2^-(mantissa bits + 1)
    subnormal: float  # the spacing of its smallest values: what rounding near zero may lose


STORED = {"float16": Stored("float32", 2.0**-11, 2.0**-24),
          "bfloat16": Stored("float32", 2.0**-8, 2.0**-133)}

HIGHEST, TF32, TF32X3 = "highest", "tf32", "3xtf32"
PRECISIONS = (HIGHEST, TF32, TF32X3)
TF32_ROUNDOFF = 2.0**-11  # TF32 keeps 10 mantissa bits, as float16 does
# Relative error of each input as a product sees it: TF32 rounds it; 3xTF32's two pieces hold
# it but for the residual's own rounding (2^-11 of a residual at most 2^-11 of the value).
PRECISION_ROUNDOFF = {HIGHEST: 0.0, TF32: TF32_ROUNDOFF, TF32X3: TF32_ROUNDOFF**2}
# The instructions of one TF32 rounding in the printed helper (td_tf32): test for Inf/NaN
# (and, compare), add half a unit, mask, select.
ROUNDING_OPERATIONS = 5
# Extra instructions per operand a thread loads into a register (the compiler rounds a value
# once for all its uses): one rounding for TF32; 3xTF32 rounds the high part, subtracts it and
# rounds the residual.
OPERAND_OPERATIONS = {HIGHEST: 0, TF32: ROUNDING_OPERATIONS, TF32X3: 2 * ROUNDING_OPERATIONS + 1}
# FP32 instructions per multiply-add: 3xTF32 multiplies lo*hi, adds hi*lo and hi*hi to it
# (FMAs) and adds the result into the accumulator.
PRODUCT_OPERATIONS = {HIGHEST: 1, TF32: 1, TF32X3: 4}
# One conversion instruction per element loaded from or stored to a stored type's tensor.
CONVERSION_OPERATIONS = 1


def compute(dtype: str) -> str:
    """The dtype a kernel of ``dtype`` computes in: float32 for the stored half types."""
    return STORED[dtype].compute if dtype in STORED else dtype


def storage_roundoff(dtype: str) -> tuple[float, float]:
    """The relative error (unit roundoff) and the absolute error near zero (the subnormals'
    spacing) of storing a computed value in ``dtype``; zeros where it is computed in."""
    stored = STORED.get(dtype)
    return (stored.unit_roundoff, stored.subnormal) if stored else (0.0, 0.0)


def check_precision(precision: str, dtype: str) -> str:
    """``precision`` if it applies to ``dtype``, else :class:`DtypeError`."""
    if precision not in PRECISIONS:
        raise DtypeError(f"precision {precision!r} is not supported; choose one of "
                         f"{', '.join(PRECISIONS)}")
    if precision != HIGHEST and dtype != "float32":
        raise DtypeError(f"precision={precision!r} rounds float32 inputs; {dtype} kernels "
                         "take precision='highest'")
    return precision


def is_complex(dtype: str) -> bool:
    return np.dtype(dtype).kind == "c"


def real(dtype: str) -> str:
    """The type of each part: ``float32`` for ``complex64``; a real dtype is its own."""
    return dtype if dtype in STORED else np.finfo(dtype).dtype.name


def complex_of(dtype: str) -> str:
    """The complex type whose parts are ``dtype``'s: ``complex64`` for ``float32``."""
    return np.result_type(dtype, np.complex64).name


def itemsize(dtype: str) -> int:
    """Bytes per element, both parts of a complex one."""
    return np.dtype(dtype).itemsize


def registers(dtype: str) -> int:
    """32-bit registers one element occupies (computed in: float32 for the stored types)."""
    return itemsize(compute(dtype)) // 4


def fmas(dtype: str) -> int:
    """Real FMA instructions per multiply-add of two elements."""
    return COMPLEX_FMAS if is_complex(dtype) else 1


def chain(dtype: str) -> int:
    """Dependent FMAs per multiply-add into one accumulator."""
    return COMPLEX_CHAIN if is_complex(dtype) else 1


def wide(dtype: str) -> str:
    """The double-precision type of the same kind, which the reference computes in."""
    return "complex128" if is_complex(dtype) else "float64"


def infer(arrays: Iterable[np.dtype], scalars: Iterable[object] = ()) -> str:
    """The dtype :func:`treduda.contract` computes in: double precision if any array is,
    complex if any array or scalar is (integers and booleans count as float32); float16 or
    bfloat16 where every array is (numpy.einsum's float16 in, float16 out)."""
    arrays, scalars = [np.dtype(a) for a in arrays], list(scalars)
    for half in STORED:
        if arrays and all(a == np.dtype(half) for a in arrays) and not any(
                np.iscomplexobj(s) for s in scalars):
            return half
    double = any(a in (np.float64, np.complex128) for a in arrays)
    if any(a.kind == "c" for a in arrays) or any(np.iscomplexobj(s) for s in scalars):
        return "complex128" if double else "complex64"
    return "float64" if double else "float32"


def check_dtype(dtype: str) -> str:
    """``dtype`` if kernels compute in it, else :class:`DtypeError`."""
    if dtype not in DTYPES:
        raise DtypeError(f"dtype {dtype!r} is not supported; choose one of "
                         f"{', '.join(DTYPES)}")
    return dtype


def check_array(name: str, dtype: np.dtype) -> None:
    """Raise :class:`DtypeError` unless an array of ``dtype`` can be converted to a kernel's."""
    if np.dtype(dtype).kind not in ARRAY_KINDS and np.dtype(dtype).name not in STORED:
        raise DtypeError(f"{name} has dtype {dtype}; treduda computes in "
                         f"{', '.join(DTYPES)}, so pass numbers")


def compute_dtype(dtypes: Mapping[str, np.dtype], scalars: Iterable[object] = ()) -> str:
    """What arrays of ``dtypes`` (by name) and ``scalars`` are contracted in (:func:`infer`);
    :class:`DtypeError` for an array no kernel takes."""
    for name, dtype in dtypes.items():
        check_array(name, dtype)
    return infer(dtypes.values(), scalars)


def uniform(source, low: float, high: float, shape: tuple[int, ...], dtype: str):
    """Random values of ``dtype`` from ``source`` (a numpy Generator or a CuPy RandomState):
    each part uniform in [low, high)."""
    values = source.uniform(low, high, shape)
    if is_complex(dtype):
        values = values + 1j * source.uniform(low, high, shape)
    return values.astype(dtype)
