"""Checks of what the public functions are given, made before anything is parsed, planned or
searched: a value of the wrong type is an :class:`ArgumentError` that names the argument and
says what it takes, instead of an ``AttributeError`` from deep inside the pipeline.

The values themselves (an index's extent, a dtype's name, a strategy's parameters) are checked
where they are understood: :mod:`.contraction`, :mod:`.dtypes` and the strategies.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from treduda.errors import ArgumentError, did_you_mean


def _what(value: Any) -> str:
    """``value`` as a message shows it: its type, then its repr, shortened."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _optional(accepts: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or accepts(value)


def _is_int(value: Any, smallest: int) -> bool:
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and value >= smallest)


def _is_params(value: Any) -> bool:
    """Parameter names to values a parameter takes (str, int or bool: all hashable)."""
    return isinstance(value, Mapping) and all(
        isinstance(name, str) and isinstance(v, Hashable) for name, v in value.items())


def _is_sizes(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(index, str) for index in value)


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


# Each argument's test and, for the message, what it takes.
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "expr": (lambda v: isinstance(v, str),
             "a string such as 'C[i,j] = A[i,k] * B[k,j]' or 'ik,kj->ij'"),
    "sizes": (_optional(_is_sizes), "a mapping from each index's name to its extent, such as "
                                    "{'i': 64, 'j': 64, 'k': 32}"),
    "layout": (lambda v: isinstance(v, str) and v in ("C", "F"),
               "'C' (row-major: last index fastest) or 'F' (column-major: first fastest)"),
    "strategy": (_optional(lambda v: isinstance(v, str)),
                 "a strategy's name such as 'tiled+staged' (treduda.strategies.available() "
                 "lists them), or None to search"),
    "params": (_optional(_is_params), "a mapping from parameter names to values, such as "
                                      "{'block_x': 32, 'preload': True}, or None"),
    "values": (_optional(lambda v: isinstance(v, Mapping)),
               "a mapping from parameter names to tuples of values to try, or None"),
    "symbolic": (_is_bool, "True or False"),
    "measure": (_is_bool, "True or False"),
    "check": (_is_bool, "True or False"),
    "max_nodes": (_optional(lambda v: _is_int(v, 1)), "a positive int, or None for a "
                                                      "complete search"),
    "refine": (lambda v: _is_int(v, 0), "an int >= 0 (how many candidates to re-rank)"),
    "progress": (_optional(callable), "a function of (nodes visited, candidates scored, best "
                                      "seconds), or None"),
    "deterministic": (_optional(_is_bool), "True, False or None (the process's default: "
                                           "treduda.use_deterministic)"),
    "budget": (_optional(lambda v: isinstance(v, numbers.Real) and not _is_bool(v) and v > 0),
               "a number of seconds > 0, or None for the complete search"),
}


def check_types(**arguments: Any) -> None:
    """Raise :class:`ArgumentError` for the first argument whose value is of the wrong kind;
    each keyword names an argument of :data:`_RULES`."""
    for name, value in arguments.items():
        accepts, wanted = _RULES[name]
        if not accepts(value):
            what = "the expression" if name == "expr" else name
            raise ArgumentError(f"{what} must be {wanted}, got {_what(value)}")


def check_choice(name: str, value: Any, choices: Iterable[str]) -> None:
    """Raise :class:`ArgumentError` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise ArgumentError(f"{name} must be one of {', '.join(choices)}, got "
                            f"{_what(value)}{hint}")


def check_shapes(shapes: Mapping[str, Any]) -> None:
    """Raise :class:`ArgumentError` for a shape that is not a sequence of ints >= 0."""
    for tensor, shape in shapes.items():
        if not (isinstance(shape, (tuple, list)) and all(_is_int(n, 0) for n in shape)):
            raise ArgumentError(f"the shape of {tensor} must be a tuple of ints >= 0 such as "
                                f"(5, 7), got {_what(shape)}")


def check_scalars(scalars: Iterable[str], values: Mapping[str, Any]) -> None:
    """Raise :class:`ArgumentError` for a scalar given as more than one number."""
    for name in scalars:
        if name in values and np.ndim(values[name]) != 0:
            raise ArgumentError(f"the scalar {name} must be one number such as 0.5, got "
                                f"{_what(values[name])} of shape {np.shape(values[name])}")
