"""The process-wide default of ``deterministic=`` (as torch's
``torch.use_deterministic_algorithms``): whether kernels must give the same result, bit for
bit, on every run.

A split reduction adds its parts into the output with atomic additions, which land in any
order, so the rounding of the sum differs from run to run. Deterministic kernels have no atomic
additions: a split writes its parts into a workspace that a second kernel adds up in a fixed
order (:mod:`treduda.codegen.parts`). :func:`treduda.compile`, :func:`treduda.contract`,
:func:`treduda.contract_expression` and :func:`treduda.search` take ``deterministic=``; left
out (None), it is this setting.
"""

from __future__ import annotations

_enabled = False


class use_deterministic:  # noqa: N801 - called as a function, as torch's switches are
    """Make ``deterministic=True`` the default of every later call (``False``: back to
    atomic splits where they pay). Used in a ``with`` statement it applies to the block
    only, and the setting before it is restored on leaving. It is the process's, as torch's
    is: a block in one thread sets it for calls in every thread (pass ``deterministic=`` to
    a call to fix it for that call alone)::

        treduda.use_deterministic(True)           # from now on
        with treduda.use_deterministic(True):     # in this block only
            C = treduda.contract(...)
    """

    def __init__(self, enabled: bool = True):
        global _enabled
        self.before = _enabled
        _enabled = bool(enabled)

    def __enter__(self) -> use_deterministic:
        return self

    def __exit__(self, *exc: object) -> None:
        global _enabled
        _enabled = self.before


def is_deterministic() -> bool:
    """The process-wide default of ``deterministic=`` (:class:`use_deterministic`)."""
    return _enabled


def resolve(deterministic: bool | None) -> bool:
    """A call's ``deterministic=``: as given, or the process-wide default where None."""
    return is_deterministic() if deterministic is None else bool(deterministic)
