"""The element types treduda computes in, and every fact the pipeline derives from one.

A complex element is stored as numpy stores it, real part then imaginary part, which is the
layout of CUDA's and OpenCL's ``float2`` / ``double2``: arrays go to a device unchanged. Neither
language has complex operators, so the printers spell complex arithmetic out in real FMAs
(:mod:`treduda.codegen.printer`), and the model counts :data:`COMPLEX_FMAS` of them per complex
multiply-add. Everything else asks this module rather than comparing dtype names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..errors import DtypeError

DTYPES = ("float32", "float64", "complex64", "complex128")
ARRAY_KINDS = "biufc"  # numpy dtype kinds an array may have: bool, integers, floats, complex
# Real FMAs per complex multiply-add c += a*b, two per part:
#   c.re += a.re*b.re - a.im*b.im,  c.im += a.re*b.im + a.im*b.re
COMPLEX_FMAS = 4
# Of those, the dependent FMAs in a row: each part's two FMAs chain, the parts run side by side.
COMPLEX_CHAIN = 2


def is_complex(dtype: str) -> bool:
    return np.dtype(dtype).kind == "c"


def real(dtype: str) -> str:
    """The type of each part: ``float32`` for ``complex64``; a real dtype is its own."""
    return np.finfo(dtype).dtype.name


def complex_of(dtype: str) -> str:
    """The complex type whose parts are ``dtype``'s: ``complex64`` for ``float32``."""
    return np.result_type(dtype, np.complex64).name


def itemsize(dtype: str) -> int:
    """Bytes per element, both parts of a complex one."""
    return np.dtype(dtype).itemsize


def registers(dtype: str) -> int:
    """32-bit registers one element occupies."""
    return itemsize(dtype) // 4


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
    complex if any array or scalar is (integers and booleans count as float32)."""
    arrays = [np.dtype(a) for a in arrays]
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
    if np.dtype(dtype).kind not in ARRAY_KINDS:
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
