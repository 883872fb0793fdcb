"""The ``optimize=`` argument, checked: how a product of three or more tensors is split into
kernels along a contraction path (:mod:`treduda.tuning.paths`).

numpy.einsum and opt_einsum take ``optimize=``: False, True, a name (``"greedy"``,
``"optimal"``, ``"dp"``, ...) or a contraction path, numpy's ``["einsum_path", (0, 1), ...]``
or opt_einsum's ``[(0, 1), ...]``: each step contracts the operands at those positions among
those left, and appends the result. treduda takes all of them, an opt_einsum
``PathOptimizer``, ``"cotengra"`` (its hyper-optimiser, an extra), and ``"auto"``, the
default, where the model chooses the path and which steps to fuse. ``False`` keeps one fused
kernel. A contraction of one or two operands is one kernel, whatever it says.
"""

from __future__ import annotations

import functools
from typing import Any

from treduda.errors import ArgumentError
from treduda.frontend.contraction import Contraction

AUTO = "auto"  # the model chooses; every other name is opt_einsum's (its own "auto" is not)


@functools.cache
def names() -> tuple[str, ...]:
    """Every name ``optimize`` may be: :data:`AUTO`, opt_einsum's and ``"cotengra"``
    (opt_einsum is imported here, on first use: every Options checks its default, ``"auto"``,
    and compile() needs no path planner)."""
    import opt_einsum

    return (AUTO, *(name for name in opt_einsum.paths._PATH_OPTIONS if name != AUTO),
            "cotengra")


def check_optimize(optimize: Any, contraction: Contraction | None = None) -> Any:
    """``optimize`` as the path planner takes it (a path as a tuple of tuples, numpy's
    ``"einsum_path"`` dropped), or :class:`ArgumentError` unless it is a value numpy.einsum,
    opt_einsum or :func:`names` take. A path must contract the operands of ``contraction``'s
    product into one (where it is a single product), each step naming distinct operands
    among those left by the steps before."""
    if isinstance(optimize, bool) or isinstance(optimize, str) and optimize == AUTO:
        return optimize
    import opt_einsum

    if (isinstance(optimize, str) and optimize in names()
            or isinstance(optimize, opt_einsum.paths.PathOptimizer)):
        return optimize
    if not isinstance(optimize, (list, tuple)):
        raise ArgumentError(f"optimize must be False, True, 'auto' (the model chooses), one of "
                            f"{', '.join(map(repr, names()[1:]))}, an opt_einsum PathOptimizer "
                            f"or a contraction path such as [(0, 1)]; got {optimize!r}")
    steps = optimize[1:] if optimize and optimize[0] == "einsum_path" else optimize
    left = None  # operands not yet contracted, where ``contraction`` is one product
    if contraction is not None and len(contraction.terms) == 1:
        left = len(contraction.terms[0].reads)
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
    return tuple(tuple(step) for step in steps)
