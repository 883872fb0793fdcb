"""Kernel IR as JSON data and back, so a generated kernel can be stored and rebuilt without isl.

The IR is frozen dataclasses of numbers, strings, enums, tuples and other such dataclasses, so
one generic codec covers it: a dataclass becomes ``{"@": "Binary", "op": ..., ...}``, an enum
``{"#": "Op", "v": "+"}``, a tuple a list. :func:`decode` builds only the classes it is given
by name (the IR's, :class:`~treduda.codegen.parts.PartsSum`, and what the caller adds), never
an arbitrary one, and raises :class:`StoredDataError` for anything it does not recognise.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any

from ..errors import StoredDataError
from . import ir, parts

IR_CLASSES: tuple[type, ...] = (
    ir.Int, ir.Float, ir.Var, ir.Index, ir.Binary, ir.Neg, ir.Select, ir.Element, ir.Load,
    ir.Lane, ir.Call, ir.Assign, ir.For, ir.If, ir.Block, ir.Barrier, ir.VectorLoad,
    ir.VectorStore, ir.FillFragment, ir.LoadFragment, ir.MultiplyAccumulate, ir.AddFragment,
    ir.StoreFragment, ir.AsyncCopy, ir.CommitCopies, ir.WaitCopies, ir.WarpgroupMultiply,
    ir.WarpgroupFence, ir.WarpgroupCommit, ir.WarpgroupWait, ir.ProxyFence, ir.CoreMatrices,
    ir.Fragment, ir.Param, ir.Local, ir.KernelIR, parts.PartsSum, ir.TensorMap,
    ir.MbarrierInit, ir.MbarrierArrive, ir.MbarrierWait, ir.TensorCopy, ir.SetMaxRegisters)
IR_ENUMS: tuple[type[enum.Enum], ...] = (ir.Op, ir.Builtin, ir.Function, ir.Unroll,
                                         ir.ParamKind, ir.Space, ir.Use)


def encode(value: Any) -> Any:
    """``value`` (IR dataclasses, enums, tuples, numbers, strings, None) as JSON data."""
    if isinstance(value, enum.Enum):
        return {"#": type(value).__name__, "v": value.value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {"@": type(value).__name__}
        for field in dataclasses.fields(value):
            data[field.name] = encode(getattr(value, field.name))
        return data
    if isinstance(value, (tuple, list)):
        return [encode(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise StoredDataError(f"cannot store a {type(value).__name__} in a kernel record")


class Decoder:
    """Turns :func:`encode`'s data back into objects of the classes it knows by name."""

    def __init__(self, classes: Iterable[type] = (), enums: Iterable[type[enum.Enum]] = ()):
        self.classes = {c.__name__: c for c in (*IR_CLASSES, *classes)}
        self.enums = {e.__name__: e for e in (*IR_ENUMS, *enums)}

    def __call__(self, data: Any) -> Any:
        if isinstance(data, list):
            return tuple(self(item) for item in data)
        if isinstance(data, dict):
            return self._object(data)
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        raise StoredDataError(f"unexpected {type(data).__name__} in a kernel record")

    def _object(self, data: dict) -> Any:
        if "#" in data:
            kind = self.enums.get(data["#"])
            if kind is None:
                raise StoredDataError(f"unknown enum {data['#']!r} in a kernel record")
            try:
                return kind(data.get("v"))
            except ValueError:
                raise StoredDataError(f"{data.get('v')!r} is not a {kind.__name__}") from None
        kind = self.classes.get(data.get("@"))
        if kind is None:
            raise StoredDataError(f"unknown class {data.get('@')!r} in a kernel record")
        fields = {name: self(value) for name, value in data.items() if name != "@"}
        try:
            return kind(**fields)
        except TypeError as e:
            raise StoredDataError(f"a stored {kind.__name__} does not fit ({e})") from None
