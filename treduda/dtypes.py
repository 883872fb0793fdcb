"""The dtypes kernels compute in, in one place: the ``dtype=`` option, the arrays a kernel
accepts, and the dtype :func:`treduda.contract` picks for its arrays."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import DtypeError

DTYPES = ("float32", "float64")
ARRAY_KINDS = "biuf"  # numpy dtype kinds an array may have: bool, integers, floats


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
                         f"{' or '.join(DTYPES)}, so pass real numbers")


def compute_dtype(dtypes: Mapping[str, np.dtype]) -> str:
    """What arrays of ``dtypes`` (by name) are contracted in: float64 if any is, else float32;
    :class:`DtypeError` for an array no kernel takes."""
    for name, dtype in dtypes.items():
        check_array(name, dtype)
    return "float64" if any(np.dtype(d) == np.float64 for d in dtypes.values()) else "float32"
