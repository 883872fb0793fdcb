"""The ground truth: a contraction evaluated with ``numpy.einsum``, and how far a kernel may
differ from it.

The tolerance is the classical bound on rounding in a sum of products: every output element may
be off by a few units of ``eps`` per summand, times the sum of the magnitudes of its summands
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., section 3.1).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .contraction import Contraction
from .errors import TredudaError

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
             sizes: Mapping[str, int], absolute: bool = False) -> np.ndarray:
    """The contraction in float64: the value the output should hold afterwards.

    With ``absolute``, every array, scalar and coefficient is replaced by its magnitude and
    every difference by a sum: the scale that rounding errors are proportional to.
    """
    if absolute:
        arrays = {k: np.abs(np.asarray(v, dtype=np.float64)) for k, v in arrays.items()}
        scalars = {k: abs(v) for k, v in scalars.items()}
    rhs = sum((_term(c, t, arrays, scalars, sizes, absolute) for t in c.terms),
              np.zeros(tuple(sizes[i] for i in c.output_indices)))
    if c.op == "=":
        return rhs
    before = np.asarray(arrays[c.output], dtype=np.float64)
    return before + rhs if c.op == "+=" or absolute else before - rhs


def tolerance(c: Contraction, arrays: Mapping[str, np.ndarray], scalars: Mapping[str, float],
              sizes: Mapping[str, int], dtype: str) -> np.ndarray:
    """Largest error allowed per output element for a kernel computing in ``dtype``."""
    magnitude = evaluate(c, arrays, scalars, sizes, absolute=True)
    steps = len(c.terms) + 2 + max((int(np.prod([sizes[i] for i in t.summed(c.output_indices)]))
                                    for t in c.terms), default=1)
    eps = np.finfo(np.dtype(dtype)).eps
    return SAFETY * eps * steps * magnitude + np.finfo(np.dtype(dtype)).tiny


def _term(c: Contraction, term, arrays, scalars, sizes, absolute: bool) -> np.ndarray:
    """One product term, summed over its own indices, broadcast to the output's shape."""
    indices = list(dict.fromkeys(i for r in term.reads for i in r.indices))
    if len(indices) > len(LETTERS):
        raise TredudaError(f"a term uses {len(indices)} indices; numpy.einsum handles at most 52")
    letter = {i: LETTERS[n] for n, i in enumerate(indices)}
    present = [i for i in c.output_indices if i in letter]
    spec = ",".join("".join(letter[i] for i in r.indices) for r in term.reads)
    operands = [np.asarray(arrays[r.tensor], dtype=np.float64) for r in term.reads]
    value = (np.einsum(f"{spec}->{''.join(letter[i] for i in present)}", *operands)
             if operands else np.float64(1.0))
    coefficient = abs(term.coefficient) if absolute else term.coefficient
    factor = coefficient * float(np.prod([scalars[s] for s in term.scalars]))
    shape = tuple(sizes[i] if i in letter else 1 for i in c.output_indices)
    full = tuple(sizes[i] for i in c.output_indices)
    return np.broadcast_to(np.reshape(factor * value, shape), full)
