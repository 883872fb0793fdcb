"""The ground truth: a contraction evaluated with ``numpy.einsum``, and how far a kernel may
differ from it.

The tolerance is the classical bound on rounding in a sum of products: every output element may
be off by a few units of ``eps`` per summand, times the sum of the magnitudes of its summands
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., section 3.1). A complex
multiply-add rounds twice per part (two real FMAs), so complex kernels take twice the steps.
Complex contractions are evaluated in complex128, real ones in float64, from the arrays as the
kernel holds them: float16 and bfloat16 inputs are stored rounded, so the reference sees the
same rounded values and only the kernel's own roundings count (:func:`tolerance`). Integer ones
(every array an integer or boolean one, every scalar an integer) are evaluated in the integer
kernel's own type, wrapping as it does: arithmetic modulo 2**bits gives one result in any order,
so the kernel must match it exactly (tolerance 0).
"""

from __future__ import annotations

import math
import string
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import TredudaError
from ..frontend.contraction import Contraction
from ..frontend.dtypes import (
    HIGHEST,
    PRECISION_ROUNDOFF,
    chain,
    compute,
    is_integer,
    kernel_dtype,
    storage_roundoff,
)

LETTERS = string.ascii_letters
SAFETY = 4.0  # units of eps per rounding step; generous for fused multiply-adds and reordering


@dataclass(frozen=True)
class Verification:
    """The outcome of comparing a kernel with numpy.einsum."""

    ok: bool
    max_error: float
    max_allowed: float
    sizes: dict[str, int]

    def __str__(self) -> str:
        verdict = "matches" if self.ok else "DIFFERS FROM"
        return (f"{verdict} numpy.einsum: largest error {self.max_error:.3g} "
                f"(allowed {self.max_allowed:.3g})")


def evaluate(c: Contraction, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, float],
             sizes: Mapping[str, int], absolute: bool = False, xp=np) -> np.ndarray:
    """The contraction in float64 (complex128 if any array or scalar is complex; int32 or
    int64, wrapping, if all are integers): the value the output should hold afterwards.

    With ``absolute``, every array, scalar and coefficient is replaced by its magnitude and
    every difference by a sum: the scale that rounding errors are proportional to. ``xp`` is
    the array module to compute with: numpy, or CuPy for arrays on a GPU.
    """
    if absolute:
        arrays = {k: xp.abs(xp.asarray(v)) for k, v in arrays.items()}
        scalars = {k: abs(v) for k, v in scalars.items()}
    complex_ = any(np.iscomplexobj(v) for v in [*arrays.values(), *scalars.values()])
    dtype = _exact(arrays, scalars) or ("complex128" if complex_ else "float64")
    rhs = sum((_term(c, t, arrays, scalars, sizes, absolute, dtype, xp) for t in c.terms),
              xp.zeros(tuple(sizes[i] for i in c.output_indices), dtype=dtype))
    if c.op == "=":
        return rhs
    before = xp.asarray(arrays[c.output], dtype=dtype)
    return before + rhs if c.op == "+=" or absolute else before - rhs


def tolerance(c: Contraction, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, float],
              sizes: Mapping[str, int], dtype: str, xp=np,
              precision: str = HIGHEST) -> np.ndarray:
    """Largest error allowed per output element for a kernel of ``dtype`` at ``precision``
    (none for an integer kernel)::

        SAFETY * (eps * steps + reads * u_in + u_out) * magnitude + tiny + subnormal

    ``eps`` is the machine epsilon of what the kernel computes in (float32 for float16 and
    bfloat16) and ``steps`` the roundings of the longest sum (its length, the terms and the
    write, doubled for complex); ``u_in`` is the unit roundoff with which each of a product's
    ``reads`` factors enters it (2^-11 for TF32, 2^-22 for 3xTF32's residual, 0 where inputs
    are used as stored); ``u_out`` is that of storing the result (2^-11 for float16, 2^-8 for
    bfloat16, else 0) and ``subnormal`` the spacing of its smallest values, which rounding a
    result near zero may lose whatever its magnitude (2^-24 for float16); ``magnitude`` is the
    contraction of the inputs' magnitudes."""
    if is_integer(dtype):
        return xp.zeros(tuple(sizes[i] for i in c.output_indices))
    magnitude = evaluate(c, arrays, scalars, sizes, absolute=True, xp=xp)
    steps = len(c.terms) + 2 + max((int(np.prod([sizes[i] for i in t.summed(c.output_indices)]))
                                    for t in c.terms), default=1)
    steps *= chain(dtype)
    finfo = np.finfo(np.dtype(compute(dtype)))
    reads = max((len(t.reads) for t in c.terms), default=0)
    stored, subnormal = storage_roundoff(dtype)
    relative = finfo.eps * steps + reads * PRECISION_ROUNDOFF[precision] + stored
    return SAFETY * relative * magnitude + finfo.tiny + subnormal


def error(result: np.ndarray, expected: np.ndarray, xp=np) -> np.ndarray:
    """``|result - expected|`` per element, in float64; exact for integers, where it is at
    least 1 wherever the two differ (a difference may be too large for float64 to keep)."""
    difference = xp.abs(result - expected)
    if not is_integer(result.dtype.name):
        return difference
    return xp.where(result == expected, 0.0, xp.maximum(difference.astype(np.float64), 1.0))


def _exact(arrays: Mapping[str, np.ndarray], scalars: Mapping[str, object]) -> str | None:
    """The integer kernel type a contraction of ``arrays`` and ``scalars`` is exact in, or
    None where one of them is not an integer (or boolean)."""
    if not arrays or not all(is_integer(a.dtype.name) for a in arrays.values()) or not all(
            isinstance(s, (int, np.integer)) for s in scalars.values()):
        return None
    return kernel_dtype(np.result_type(*[a.dtype for a in arrays.values()]).name)


def product_spec(c: Contraction) -> str | None:
    """The einsum a user would write for ``c`` where it is one plain product (``C = A*B``: no
    scalar, coefficient, sum or update), e.g. ``"ab,bc->ac"``; None where it is more."""
    if len(c.terms) != 1 or c.terms[0].scalars or c.terms[0].coefficient != 1 or c.op != "=":
        return None
    return einsum_spec(c.terms[0], c.output_indices)


def einsum_spec(term, output_indices) -> str:
    """``term``'s reads as an einsum specification, e.g. ``"ab,bc->ac"``: its indices as
    letters, the output keeping those of ``output_indices`` the term has."""
    indices = list(dict.fromkeys(i for r in term.reads for i in r.indices))
    if len(indices) > len(LETTERS):
        raise TredudaError(f"a term uses {len(indices)} indices; numpy.einsum handles at most 52")
    letter = {i: LETTERS[n] for n, i in enumerate(indices)}
    present = "".join(letter[i] for i in output_indices if i in letter)
    return ",".join("".join(letter[i] for i in r.indices) for r in term.reads) + "->" + present


def _term(c: Contraction, term, arrays, scalars, sizes, absolute: bool, dtype: str,
          xp) -> np.ndarray:
    """One product term in ``dtype``, summed over its own indices, broadcast to the output's
    shape."""
    operands = [xp.asarray(arrays[r.tensor], dtype=dtype) for r in term.reads]
    # numpy needs optimize=True to contract two operands with BLAS instead of its own loop
    options = {"optimize": True} if xp is np else {}
    value = xp.einsum(einsum_spec(term, c.output_indices), *operands, **options) if operands \
        else xp.asarray(1, dtype=dtype)
    coefficient = abs(term.coefficient) if absolute else term.coefficient
    if is_integer(dtype):  # the factor modulo 2**bits, as the kernel's unsigned arithmetic has it
        bits = 8 * np.dtype(dtype).itemsize
        factor = math.prod([int(coefficient), *(int(scalars[s]) for s in term.scalars)])
        factor = np.asarray(factor % 2 ** bits, dtype=f"uint{bits}").astype(dtype)
    else:
        factor = coefficient * np.prod([scalars[s] for s in term.scalars]).item()
    present = {i for r in term.reads for i in r.indices}
    shape = tuple(sizes[i] if i in present else 1 for i in c.output_indices)
    full = tuple(sizes[i] for i in c.output_indices)
    return xp.broadcast_to(xp.reshape(factor * value, shape), full)
