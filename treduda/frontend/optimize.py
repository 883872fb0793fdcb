"""The ``optimize=`` argument numpy users pass to einsum by habit, checked.

numpy.einsum and opt_einsum take ``optimize=``: False, True, a name (``"greedy"``,
``"optimal"``) or a contraction path, numpy's ``["einsum_path", (0, 1), ...]`` or opt_einsum's
``[(0, 1), ...]``: each step contracts the operands at those positions among those left, and
appends the result. In numpy it orders the pairwise contractions of three or more operands;
here it is checked and changes nothing yet: every contraction is one kernel today, and one of
one or two operands always is, whatever it says.
"""

from __future__ import annotations

from typing import Any

from treduda.errors import ArgumentError
from treduda.frontend.contraction import Contraction

NAMES = ("greedy", "optimal")


def check_optimize(optimize: Any, contraction: Contraction) -> None:
    """Raise :class:`ArgumentError` unless ``optimize`` is a value numpy.einsum takes; a path
    must contract the operands of ``contraction``'s product into one (where it is a single
    product), each step naming distinct operands among those left by the steps before."""
    if isinstance(optimize, bool) or isinstance(optimize, str) and optimize in NAMES:
        return
    if not isinstance(optimize, (list, tuple)):
        raise ArgumentError(f"optimize must be False, True, {', '.join(map(repr, NAMES))} or a "
                            f"contraction path such as [(0, 1)]; got {optimize!r}")
    steps = optimize[1:] if optimize and optimize[0] == "einsum_path" else optimize
    terms = contraction.terms
    left = len(terms[0].reads) if len(terms) == 1 else None  # operands not yet contracted
    for number, step in enumerate(steps):
        if (not isinstance(step, (list, tuple)) or not step or len(set(step)) != len(step)
                or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                           for p in step)):
            raise ArgumentError(f"optimize's path step {number + 1}, {step!r}, must be a tuple "
                                "of distinct operand positions, such as (0, 1)")
        if left is not None and max(step) >= left:
            raise ArgumentError(f"optimize's path step {number + 1}, {step!r}, names operand "
                                f"{max(step)}, but {left} are left by then (0 to {left - 1})")
        left = None if left is None else left - len(step) + 1
    if left is not None and left > 1:
        raise ArgumentError(f"optimize's path leaves {left} operands uncontracted; end it with "
                            f"a step such as {tuple(range(left))}")
