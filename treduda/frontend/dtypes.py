"""The element types treduda computes in, and every fact the pipeline derives from one.

A complex element is stored as numpy stores it, real part then imaginary part, which is the
layout of CUDA's and OpenCL's ``float2`` / ``double2``: arrays go to a device unchanged. Neither
language has complex operators, so the printers spell complex arithmetic out in real FMAs
(:mod:`treduda.codegen.printer`), and the model counts :data:`COMPLEX_FMAS` of them per complex
multiply-add. Everything else asks this module rather than comparing dtype names.

Integer kernels (``int32``, ``int64``) compute exactly and wrap as numpy's integers do: the
printers declare their values in the unsigned type of the same width, whose arithmetic C defines
modulo 2**bits (signed overflow is undefined), and the bits are the signed result's. Narrower
integers and unsigned ones compute in the kernel of their width class and are cast back (modulo
2**8 of a result modulo 2**32 is the result modulo 2**8); booleans compute in ``int32`` as counts
of true products, and the result is ``count != 0``, numpy's OR of ANDs. :func:`result_dtype`
gives numpy's result type for a call, :func:`kernel_dtype` what a kernel computes it in.

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
from .dtype_names import CASTINGS, DEFAULT_CASTING, DTYPES, HIGHEST, PRECISIONS, TF32, TF32X3

BFLOAT16 = np.dtype("bfloat16")  # ml_dtypes' type: numpy's arrays of it, and CuPy's (14 on)
INTEGER_DTYPES = ("int32", "int64")  # exact kernels; other integers and bool compute in these
ARRAY_KINDS = "biufc"  # numpy dtype kinds an array may have: bool, integers, floats, complex
# Real FMAs per complex multiply-add c += a*b, two per part:
#   c.re += a.re*b.re - a.im*b.im,  c.im += a.re*b.im + a.im*b.re
COMPLEX_FMAS = 4
# Of those, the dependent FMAs in a row: each part's two FMAs chain, the parts run side by side.
COMPLEX_CHAIN = 2
# Integer multiply-adds c += a*b in 32-bit IMAD instructions, and how many of them depend on
# each other. int32: one IMAD. int64: sm_70 and later have no 64-bit multiplier; the CUDA C++
# Programming Guide's throughput table lists 64-bit integer multiplication as "multiple
# instructions", which ptxas emits as IMAD.WIDE.U32 (low halves, adding the 64-bit c) and two
# IMADs adding the cross products into the high half, each after the one before.
INTEGER_IMADS = {"int32": 1, "int64": 3}


@dataclass(frozen=True)
class Stored:
    """A type tensors are stored in but kernels do not compute in."""

    compute: str  # what registers hold and arithmetic runs in
    unit_roundoff: float  # of rounding a value to this type: 2^-(mantissa bits + 1)
    subnormal: float  # the spacing of its smallest values: what rounding near zero may lose


STORED = {"float16": Stored("float32", 2.0**-11, 2.0**-24),
          "bfloat16": Stored("float32", 2.0**-8, 2.0**-133)}

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


def is_integer(dtype: str) -> bool:
    """Whether ``dtype`` holds integers (or booleans): computed exactly, compared exactly."""
    return np.dtype(dtype).kind in "biu"


def real(dtype: str) -> str:
    """The type of each part: ``float32`` for ``complex64``; a real, stored or integer dtype
    is its own."""
    if dtype in STORED:
        return dtype
    return np.dtype(dtype).name if is_integer(dtype) else np.finfo(dtype).dtype.name


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
    """FMA instructions per multiply-add of two elements: real FMAs for a float or complex
    type, IMADs for an integer one (:data:`INTEGER_IMADS`)."""
    if is_integer(dtype):
        return INTEGER_IMADS[dtype]
    return COMPLEX_FMAS if is_complex(dtype) else 1


def chain(dtype: str) -> int:
    """Dependent FMAs (IMADs) per multiply-add into one accumulator."""
    if is_integer(dtype):
        return INTEGER_IMADS[dtype]
    return COMPLEX_CHAIN if is_complex(dtype) else 1


def wide(dtype: str) -> str:
    """The type the reference computes in: double precision of the same kind, or an integer
    kernel's own type (exact, wrapping as the kernel does)."""
    if is_integer(dtype):
        return dtype
    return "complex128" if is_complex(dtype) else "float64"


def weak(scalar: object) -> object:
    """``scalar`` as a Python number: numpy's rules treat those as "weak" (they take the
    arrays' precision), as treduda treats every scalar argument and literal."""
    return scalar.item() if hasattr(scalar, "item") else scalar


def result_dtype(arrays: Iterable[np.dtype], scalars: Iterable[object] = ()) -> str:
    """numpy's result type for arrays of ``arrays`` and the (weak) ``scalars``: what
    numpy.einsum and numpy's operators return, e.g. ``float64`` for int32 and float32 arrays;
    :class:`DtypeError` where no kernel computes it (:func:`kernel_dtype`)."""
    arrays, scalars = [np.dtype(a) for a in arrays], [weak(s) for s in scalars]
    try:
        dtype = np.result_type(*arrays, *scalars).name
        stored = np.result_type(*arrays).name if arrays else None
    except (TypeError, ValueError):
        # numpy has no common type for bfloat16 and float16 (or int32): each is computed in
        # float32, so they meet there, as they would in a kernel
        computed = [np.dtype(compute(a.name)) for a in arrays]
        dtype, stored = np.result_type(*computed, *scalars).name, None
    if stored in STORED and not any(np.iscomplexobj(s) for s in scalars):
        dtype = stored  # real scalars are weak for bfloat16 too (ml_dtypes widens to float64)
    kernel_dtype(dtype)
    return dtype


def compute_dtype(dtypes: Mapping[str, np.dtype], scalars: Iterable[object] = ()) -> str:
    """numpy's result type (:func:`result_dtype`) for arrays of ``dtypes`` (by name) and
    ``scalars``; :class:`DtypeError` for an array no kernel takes."""
    for name, dtype in dtypes.items():
        check_array(name, dtype)
    return result_dtype(dtypes.values(), scalars)


def kernel_dtype(dtype: str) -> str:
    """The dtype a kernel computes a result of ``dtype`` in: itself for :data:`DTYPES`, the
    integer kernel of the same width class for other integers (wrapping arithmetic modulo
    2**64 is exact modulo 2**8 too), ``int32`` for booleans (counts of true products);
    :class:`DtypeError` for any other."""
    np_dtype = _numpy_dtype(dtype)
    name = np_dtype.name
    if name in DTYPES:
        return name
    if np_dtype.kind == "b":
        return "int32"
    if np_dtype.kind in "iu":
        return "int32" if np_dtype.itemsize <= 4 else "int64"
    raise DtypeError(f"dtype {name!r} is not supported; treduda computes in "
                     f"{', '.join(DTYPES)}, and in int32/int64 for other integers and bool")


def finish(result, dtype: str):
    """A kernel's result as an array of ``dtype`` (:func:`kernel_dtype`'s inverse): booleans
    are ``count != 0``, narrower integers are cast back, wrapping as numpy's casts do."""
    if np.dtype(dtype).kind == "b":
        nonzero = result != 0
        return np.asarray(nonzero) if np.isscalar(nonzero) else nonzero  # 0-d stays an array
    return result if result.dtype == np.dtype(dtype) else result.astype(dtype)


def check_dtype(dtype: str) -> str:
    """``dtype`` if kernels compute in it, else :class:`DtypeError`."""
    if dtype not in DTYPES:
        kernel_dtype(dtype)  # the reason for a dtype numpy has
        raise DtypeError(f"dtype {dtype!r} is not a kernel's; choose one of "
                         f"{', '.join(DTYPES)} (contract() takes other integers and bool)")
    return dtype


def check_literals(coefficients: Iterable[float], dtype: str) -> None:
    """Raise :class:`DtypeError` where an integer kernel would have to hold a fraction: a
    literal such as ``0.5*A[i]`` makes numpy's result a float (compute in float64)."""
    if is_integer(dtype):
        fractions = [c for c in coefficients if c != int(c)]
        if fractions:
            raise DtypeError(f"the literal {fractions[0]} is not an integer, so a {dtype} "
                             "kernel cannot compute it; numpy's result is a float: use "
                             "dtype='float64'")


def literal_scalars(coefficients: Iterable[float]) -> list[object]:
    """The literals of an expression's terms that take part in numpy's result type, as the
    Python numbers they are (weak): integers other than 1 (``2*A[i]``; ``-`` folds into
    them), and fractions (``0.5*A[i]``, float64 for integer arrays)."""
    return [int(c) if c == int(c) else c for c in coefficients if c != 1]


def check_update(op: str, dtype: str) -> None:
    """Raise :class:`DtypeError` for ``-=`` into a boolean output, which numpy refuses too
    (it does not subtract booleans)."""
    if op == "-=" and np.dtype(dtype).kind == "b":
        raise DtypeError("numpy does not subtract booleans, so '-=' into a bool output is "
                         "refused; convert the arrays to an integer type first")


def check_casting(casting: str) -> str:
    """``casting`` if numpy knows the level, else :class:`DtypeError`."""
    if casting not in CASTINGS:
        raise DtypeError(f"casting={casting!r} is not one of numpy's: {', '.join(CASTINGS)}")
    return casting


def check_array(name: str, dtype: np.dtype) -> None:
    """Raise :class:`DtypeError` unless an array of ``dtype`` can be converted to a kernel's."""
    if np.dtype(dtype).kind not in ARRAY_KINDS and np.dtype(dtype).name not in STORED:
        raise DtypeError(f"{name} has dtype {dtype}; treduda computes in "
                         f"{', '.join(DTYPES)}, so pass numbers")


def check_cast(name: str, value: object, dtype: str, casting: str = DEFAULT_CASTING) -> None:
    """Raise :class:`DtypeError` unless numpy's ``casting`` rule converts ``value`` (an
    array, or a scalar: weak, so ``2`` fits int32 and ``0.5`` float32 but not int32) to
    ``dtype``; the message names the weakest ``casting=`` that would allow it."""
    check_casting(casting)
    source = getattr(value, "dtype", None)
    scalar = not isinstance(value, np.ndarray) and getattr(value, "shape", ()) == ()
    if scalar:  # a Python or numpy number (numpy 0-d arrays are arrays)
        allowed = _scalar_casts(weak(value), dtype)
        detail = f"({weak(value)!r})"
    else:
        check_array(name, source)
        allowed = {c for c in CASTINGS if np.can_cast(source, dtype, c)}
        detail = f"(dtype {np.dtype(source).name})"
    if casting in allowed:
        return
    needed = next(c for c in CASTINGS if c in allowed)
    hint = (f"pass casting={needed!r} to convert it as numpy does" if needed != "unsafe" else
            "pass casting='unsafe' to convert it anyway (numpy's rule, which drops what "
            f"{dtype} cannot hold)")
    kind = np.asarray(weak(value)).dtype.kind if scalar else np.dtype(source).kind
    if kind == "c" and np.dtype(dtype).kind == "f":
        raise DtypeError(f"{name} is complex {detail} but the kernel computes in {dtype}; "
                         f"compile with dtype='{complex_of(dtype)}', or {hint}")
    raise DtypeError(f"{name} {detail} does not cast to the kernel's {dtype} under casting="
                     f"{casting!r}; {hint}")


def _scalar_casts(scalar: object, dtype: str) -> set[str]:
    """The casting levels that take a weak scalar to ``dtype``: all where numpy's promotion
    of the two is ``dtype`` itself, else those that allow its kind to be dropped."""
    if result_dtype([np.dtype(dtype)], [scalar]) == np.dtype(dtype).name:
        return set(CASTINGS)
    kind = np.asarray(scalar).dtype
    return {c for c in CASTINGS if np.can_cast(kind, dtype, c)}


def _numpy_dtype(dtype: object) -> np.dtype:
    """``np.dtype(dtype)``, or :class:`DtypeError` for a name numpy does not know."""
    try:
        return np.dtype(dtype)
    except TypeError as error:
        raise DtypeError(f"dtype {dtype!r} is not a dtype numpy knows; choose one of "
                         f"{', '.join(DTYPES)}") from error


def poison(dtype: str) -> object:
    """A value for memory a correct kernel never reads: NaN, or for an integer type its most
    negative value, which spoils an exact result as visibly."""
    return np.iinfo(dtype).min if is_integer(dtype) else np.nan


def uniform(source, low: float, high: float, shape: tuple[int, ...], dtype: str):
    """Random values of ``dtype`` from ``source`` (a numpy Generator or a CuPy RandomState):
    each part uniform in [low, high); for an integer type, scaled to a quarter of its range,
    so that products wrap and the wrapping is checked too."""
    values = source.uniform(low, high, shape)
    if is_integer(dtype):
        return (values * 2.0 ** (8 * itemsize(dtype) - 2)).astype(dtype)
    if is_complex(dtype):
        values = values + 1j * source.uniform(low, high, shape)
    return values.astype(dtype)
