"""The exceptions treduda raises: one root, one class per kind of mistake.

Every message says what was wrong and what to do; errors about an expression show the
expression with a caret under the offending character (see :func:`caret`).
"""

from __future__ import annotations


class TredudaError(Exception):
    """Root of every error treduda raises on purpose."""


def caret(source: str, position: int, width: int = 1) -> str:
    """``source`` with, on the line below, carets under ``source[position:position+width]``."""
    position = max(0, min(position, len(source)))
    return f"  {source}\n  {' ' * position}{'^' * max(1, width)}"


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


class MissingSize(TredudaError):
    """An index has no extent: neither in ``sizes`` nor inferable from an array."""


class StrategyError(TredudaError):
    """A strategy cannot be applied with these parameters (unknown name, invalid value, limit)."""


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
