"""The exceptions treduda raises: one root, one class per kind of mistake.

Every message says what was wrong and what to do; errors about an expression show the
expression with a caret under the offending character (see :func:`caret`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TredudaError(Exception):
    """Root of every error treduda raises on purpose."""


def caret(source: str, position: int, width: int = 1) -> str:
    """``source`` with, on the line below, carets under ``source[position:position+width]``."""
    position = max(0, min(position, len(source)))
    return f"  {source}\n  {' ' * position}{'^' * max(1, width)}"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'B'?"`` for the choice closest to ``name`` (case first), else ``""``."""
    choices = list(choices)
    same_letters = [c for c in choices if c.lower() == name.lower()]
    close = same_letters or difflib.get_close_matches(name.lower(), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class ExpressionError(TredudaError):
    """Something is wrong with the text of an expression at a known position."""

    def __init__(self, message: str, source: str, position: int, width: int = 1):
        self.reason = message
        self.source = source
        self.position = position
        self.width = width
        where = caret(source, position, width)
        super().__init__(f"{message} (at character {position + 1})\n{where}")


class ParseError(ExpressionError):
    """The expression is not well formed: what was found and what was expected."""


class IndexUsageError(ExpressionError):
    """An index is used wrongly: repeated in the output, or an output index no term provides."""


class RankMismatch(ExpressionError):
    """One tensor is used with two different numbers of indices."""


class InvalidName(ExpressionError):
    """A name is not a C identifier, or collides with a C/CUDA/OpenCL keyword or a reserved name."""


class ShapeMismatch(TredudaError):
    """Array shapes disagree with each other or with the expression."""


class SizeLimit(ShapeMismatch):
    """Sizes past what any kernel can do: a tensor more than 64-bit indices address, or an
    output more than a GPU's grid can cover. Raised before anything is searched or compiled.
    (Its base is the class raised for sizes that are not positive ints.)"""


class MissingSize(TredudaError):
    """An index has no extent: neither in ``sizes`` nor inferable from an array."""


class StrategyError(TredudaError):
    """A strategy cannot be applied with these parameters (unknown name, invalid value, limit)."""


class DtypeError(ShapeMismatch, StrategyError):
    """A dtype treduda does not compute in, asked for or held by an array. (Its bases are the
    classes raised for it before, so their ``except`` clauses still catch it.)"""


class ArgumentError(ShapeMismatch, StrategyError):
    """An argument the call does not take: a misspelt tensor, scalar or option name, more
    arrays than the expression has inputs, or a value of the wrong kind (sizes that are not a
    mapping, an unknown GPU). (Its bases are the classes raised for it before.)"""


class MissingArray(MissingSize):
    """An array or scalar value the expression needs was not passed. (Its base is the class
    raised for it before.)"""


class BackendUnavailable(TredudaError):
    """A runtime or compiler (PoCL, pycuda, nvcc) is not installed or finds no device."""


class CompileError(TredudaError):
    """A generated kernel failed to compile (nvcc or the OpenCL compiler); carries its log."""

    def __init__(self, message: str, log: str = ""):
        self.log = log
        super().__init__(f"{message}\n{log}" if log else message)


class VerificationError(TredudaError):
    """A kernel's result differs from numpy.einsum beyond the tolerance."""


class HazardError(VerificationError):
    """The emulator found a race, an out-of-bounds access, an uninitialised read or a barrier
    that not every thread reaches: the kernel's result cannot be trusted on any device."""


class StoredDataError(TredudaError):
    """A stored kernel that does not decode (damaged, or written in another format); the
    kernel store reports it and generates the kernel again."""
