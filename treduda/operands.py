"""A call's operands, named, checked and converted as numpy.einsum takes them, before any
work: positional and named tensors, scalars, ``out`` and its casting. :mod:`treduda.api`'s
entry points refuse a wrong call here, so nothing is searched or compiled for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import ArgumentError, DtypeError, ShapeMismatch
from .frontend.arguments import check_scalars
from .frontend.contraction import Contraction, check_arguments
from .frontend.dtypes import CASTINGS, check_cast
from .options import check_tensor_names
from .run.launch import checked_operand, require_scalars


def check_names(c: Contraction, operands: tuple, named: Mapping[str, Any],
                 reserved: tuple[str, ...], where: str, mapping: str,
                 shapes: bool = False) -> None:
    """Refuse, before any work, a tensor ``c`` needs (its inputs' ``shapes``; else its
    values, scalars and old output too) that is named like one of the call's keywords
    (``reserved``: an option, or ``out``...) unless it is among the ``operands`` given by
    position or those ``named`` (in the ``mapping`` argument: a keyword that names an option
    never reaches ``named``); see :func:`~treduda.options.check_tensor_names`."""
    needed = c.inputs if shapes else c.read_names
    given = [*list(c.inputs)[: len(operands)], *named]
    check_tensor_names(needed, given, reserved, where, mapping, positional=True)


def named_operands(contraction: Contraction, operands: tuple, values: dict[str, Any],
           options: tuple[str, ...]) -> dict[str, Any]:
    """Positional ``operands`` by their tensor's name, with ``values``, every name checked."""
    names = list(contraction.inputs)
    if len(operands) > len(names):
        raise ArgumentError(f"{len(operands)} arrays given but the expression has "
                            f"{len(names)} input tensor(s): {', '.join(names)}")
    named = dict(zip(names[: len(operands)], operands, strict=True))
    doubled = sorted(set(named) & set(values))
    if doubled:
        raise ArgumentError(f"{', '.join(doubled)} given both by position and by name")
    check_arguments(contraction, values, options)
    check_scalars(contraction.scalars, values)
    return {**named, **values}


def call_values(c: Contraction, values: dict[str, Any], out: Any, dtype: str, casting: str,
                 sizes: Mapping[str, int]) -> dict[str, Any]:
    """A call's ``values`` by name, each checked and converted as numpy.einsum takes it
    (:func:`~treduda.run.launch.checked_operand`: lists and numbers as ``numpy.asarray``
    converts them, refused where ``casting`` does not convert them to ``dtype``), with ``out``
    where ``c`` uses the old values of its output; ``out`` checked by numpy's rules
    (:func:`check_out`); MissingArray for a scalar not given. contract() calls it before it
    plans, so that nothing is searched or compiled for a call that is refused."""
    require_scalars(c, values)
    if out is not None:
        if c.output in values:
            raise ArgumentError(f"pass the output {c.output} as {c.output}= or as out=, "
                                "not both")
        check_out(out, tuple(sizes[i] for i in c.output_indices), dtype, casting)
        if c.reads_output or c.op != "=":
            values = {**values, c.output: out}  # its old values are used
    return {name: checked_operand(name, value, dtype, casting, scalar=name in c.scalars)
            for name, value in values.items()}


def out_array(out: Any) -> Any:
    """``out`` if it is an array (numpy's, or one with a shape and a dtype)."""
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise ArgumentError(f"out must be an array, got {type(out).__name__}")
    return out


def check_out(out: Any, shape: tuple[int, ...], dtype: str, casting: str) -> None:
    """numpy.einsum's rules for ``out``: an array of the output's shape whose dtype and the
    result's ``dtype`` cast to each other under ``casting`` (numpy reads ``out`` in the
    result's dtype and writes it back: with ``dtype=float32``, a float64 ``out`` needs
    ``casting="same_kind"``)."""
    if tuple(out_array(out).shape) != shape:
        raise ShapeMismatch(f"out has shape {tuple(out.shape)} but the output has shape {shape}")
    if not np.can_cast(dtype, out.dtype, casting):
        needed = next(c for c in CASTINGS if np.can_cast(dtype, out.dtype, c))
        raise DtypeError(f"out has dtype {out.dtype}, to which the result's {dtype} does not "
                         f"cast under casting={casting!r}; pass an out of dtype {dtype} or "
                         f"wider, or casting={needed!r} to convert it as numpy does")
    check_cast("out", out, dtype, casting)  # numpy reads it in the result's dtype
