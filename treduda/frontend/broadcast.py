"""numpy's subscripts resolved for the operands' shapes: ``...`` and extents of 1 broadcast.

numpy.einsum lets ``...`` stand for the axes an operand has beyond its letters (aligned from
the right across operands, as numpy broadcasts), and broadcasts an axis of extent 1 against
the extent of the same index in another operand. The text alone says neither, so once the
shapes are known :func:`resolve` rewrites the subscripts into plain ones that compile like any
other: each axis of ``...`` becomes a letter the text does not use, and an axis of extent 1
that numpy broadcasts is dropped from its operand, whose array is reshaped (a view: nothing is
copied), so the kernel reads that operand's one value along the index, as numpy's zero stride
does.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from treduda.errors import ArgumentError, ShapeMismatch, caret
from treduda.frontend.arguments import check_shapes
from treduda.frontend.parse import ELLIPSIS, Labels, Subscripts, is_numpy_style, numpy_subscripts

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Broadcast:
    """numpy-style subscripts ``source``, resolved for operands of shapes ``given``, as the
    plain subscripts ``expr`` (explicit output, no ``...``) whose operand ``names[n]`` has shape
    ``shapes[n]``."""

    source: str
    expr: str
    names: tuple[str, ...]
    given: tuple[Shape, ...]
    shapes: tuple[Shape, ...]

    @property
    def planned(self) -> dict[str, Shape]:
        """Each operand's shape in ``expr``, by name."""
        return dict(zip(self.names, self.shapes, strict=True))

    def reshape(self, operands: Sequence[Any], values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` with every operand in it (from ``operands`` by position, or by name), as
        ``expr`` takes it: the axes broadcast from extent 1 dropped, by a reshaped view.

        Raises :class:`ShapeMismatch` for an array of another shape than it was resolved for."""
        arrays = _gathered(self.names, operands, values)
        if arrays is None:
            raise _miscounted(self.source, self.names, operands)
        for number, (name, given) in enumerate(zip(self.names, self.given, strict=True)):
            if np.shape(arrays[name]) != given:
                raise ShapeMismatch(
                    f"operand {number + 1} has shape {np.shape(arrays[name])}, but "
                    f"{self.source!r} was planned for {given}; plan it again for these shapes")
        return {**values, **{name: _reshaped(arrays[name], shape)
                             for name, shape in self.planned.items()}}


def resolve(expr: str, operands: Sequence[Any], values: Mapping[str, Any],
            shape_of: Callable[[Any], Shape] = np.shape) -> Broadcast | None:
    """numpy-style ``expr`` resolved for its operands (by position in ``operands``, or by name
    in ``values``; ``shape_of`` gives their shapes), or None where nothing needs resolving:
    Einstein notation, or subscripts without ``...`` whose extents all agree. Other names in
    ``values`` are left alone, and so are operands given other than once each where the
    subscripts have no ``...`` (the usual argument checks report it).

    Raises :class:`ShapeMismatch` where numpy.einsum raises for the shapes: an operand with
    more or fewer axes than its subscripts, an index with two extents neither of which is 1;
    :class:`ArgumentError` for a shape that is not a tuple of ints."""
    if not is_numpy_style(expr):
        return None
    subscripts = numpy_subscripts(expr)
    arrays = _gathered(subscripts.names, operands, values)
    if arrays is None:
        if not subscripts.ellipsis:
            return None
        raise _miscounted(expr, subscripts.names, operands)
    shapes = {name: shape_of(arrays[name]) for name in subscripts.names}
    check_shapes(shapes)
    return _resolved(subscripts, tuple(tuple(int(extent) for extent in shape)
                                       for shape in shapes.values()))


@functools.lru_cache(maxsize=256)
def _resolved(subscripts: Subscripts, given: tuple[Shape, ...]) -> Broadcast | None:
    """:func:`resolve` once the operands' shapes are known; kept, as repeated calls of
    contract() with the same shapes ask for the same."""
    axes, output, fresh = _expanded(subscripts, given)
    extents = _extents(subscripts, axes, given, fresh)
    kept = [[(letter, extent) for (letter, _), extent in zip(operand, shape, strict=True)
             if extent != 1 or extents[letter] == 1]
            for operand, shape in zip(axes, given, strict=True)]
    if not subscripts.ellipsis and all(len(k) == len(shape)
                                       for k, shape in zip(kept, given, strict=True)):
        return None
    text = ",".join("".join(letter for letter, _ in k) for k in kept) + "->" + "".join(output)
    return Broadcast(subscripts.text, text, subscripts.names, given,
                     tuple(tuple(extent for _, extent in k) for k in kept))


def _gathered(names: tuple[str, ...], operands: Sequence[Any], values: Mapping[str, Any]
              ) -> dict[str, Any] | None:
    """The operands by name (positional ones first, then named ones), or None unless each is
    given exactly once."""
    if len(operands) > len(names) or any(name in values for name in names[:len(operands)]):
        return None
    gathered = dict(zip(names, operands, strict=False))
    gathered.update((name, values[name]) for name in names[len(operands):] if name in values)
    return gathered if len(gathered) == len(names) else None


def _miscounted(expr: str, names: tuple[str, ...], operands: Sequence[Any]) -> ArgumentError:
    return ArgumentError(
        f"{expr!r} takes one array per operand ({len(names)}: in order, or by name as "
        f"{', '.join(names)}), and '...' needs all of their shapes; {len(operands)} given by "
        "position")


def _reshaped(array: Any, shape: Shape) -> Any:
    """``array`` with ``shape`` (the same elements: only axes of extent 1 differ), as a view."""
    if np.shape(array) == shape:
        return array
    return array.reshape(shape) if hasattr(array, "reshape") else np.reshape(array, shape)


def _expanded(subscripts: Subscripts, shapes: tuple[Shape, ...]
              ) -> tuple[list[list[tuple[str, int]]], list[str], set[str]]:
    """Each operand's letters, one per axis, with the position each stands at in the text;
    the output's letters; the letters that stand for the axes of ``...``.

    ``...`` stands for the axes an operand has beyond its letters; they broadcast from the
    right, so an operand with fewer takes the last of the letters (numpy's rule). Without
    ``->`` the output is those letters, then the letters used once, in alphabetical order."""
    text = subscripts.text
    ranks = []
    for number, (labels, shape) in enumerate(zip(subscripts.operands, shapes, strict=True)):
        named = len(labels.letters)
        if len(shape) != named and (labels.ellipsis is None or len(shape) < named):
            advice = ("; write '...' for the axes they leave out" if labels.ellipsis is None
                      else "")
            raise ShapeMismatch(
                f"operand {number + 1} has {_axes(len(shape))} but its subscripts name "
                f"{named}{' besides ...' if labels.ellipsis is not None else ''}{advice}\n"
                f"{_caret(text, labels)}")
        ranks.append(len(shape) - named)
    letters = _unused(subscripts, max(ranks, default=0))
    axes = []
    for labels, rank in zip(subscripts.operands, ranks, strict=True):
        operand = []
        for label, position in zip(labels.labels, labels.positions, strict=True):
            stands_for = letters[len(letters) - rank:] if label == ELLIPSIS else label
            operand += [(letter, position) for letter in stands_for]
        axes.append(operand)
    output = subscripts.output
    if output is None:
        return axes, [*letters, *subscripts.implicit_output()], set(letters)
    if output.ellipsis is None and letters:
        raise ShapeMismatch(
            f"'...' stands for {_axes(len(letters))} of the operands, but the output has no "
            f"'...' to put them in (numpy does not sum them); add it to the output\n"
            f"{_caret(text, output)}")
    return axes, [letter for label in output.labels
                  for letter in (letters if label == ELLIPSIS else label)], set(letters)


def _unused(subscripts: Subscripts, count: int) -> str:
    """``count`` letters neither the subscripts nor the operands' names use."""
    used = {letter for labels in subscripts.labels for letter in labels.letters}
    used |= set(subscripts.names)
    free = "".join(letter for letter in string.ascii_letters if letter not in used)
    if len(free) < count:
        raise ShapeMismatch(
            f"'...' stands for {_axes(count)} here, each of which needs a letter the "
            f"subscripts do not use, and only {len(free)} are left; name some axes with "
            f"letters instead\n{caret(subscripts.text, 0, len(subscripts.text))}")
    return free[:count]


def _extents(subscripts: Subscripts, axes: list[list[tuple[str, int]]],
             shapes: tuple[Shape, ...], fresh: set[str]) -> dict[str, int]:
    """Each letter's extent, broadcast as numpy does: an extent of 1 takes the other extent.

    An index repeated within one operand takes its diagonal, so its extents there must be
    equal (numpy does not broadcast them)."""
    def mismatch(letter: str, position: int, why: str) -> ShapeMismatch:
        what, width = ("an axis of '...'", len(ELLIPSIS)) if letter in fresh else (
            f"index '{letter}'", 1)
        return ShapeMismatch(f"{what}{why}\n{caret(subscripts.text, position, width)}")

    found: dict[str, tuple[int, int, int]] = {}  # letter -> (extent, operand, axis)
    for number, (operand, shape) in enumerate(zip(axes, shapes, strict=True)):
        own: dict[str, tuple[int, int]] = {}
        for axis, ((letter, position), extent) in enumerate(zip(operand, shape, strict=True)):
            first_extent, first_axis = own.setdefault(letter, (extent, axis))
            if extent != first_extent:
                raise mismatch(letter, position, f" of operand {number + 1} has extent "
                               f"{first_extent} on axis {first_axis} but {extent} on axis "
                               f"{axis}; an index repeated in one operand takes its diagonal, "
                               "so they must be equal")
            known, known_number, known_axis = found.setdefault(letter, (extent, number, axis))
            if known == 1:
                found[letter] = (extent, number, axis)
            elif extent not in (1, known):
                raise mismatch(letter, position, f": {known} in operand {known_number + 1} "
                               f"(axis {known_axis}) but {extent} in operand {number + 1} "
                               f"(axis {axis}); numpy broadcasts an extent only against the "
                               "same extent or 1")
    return {letter: extent for letter, (extent, _, _) in found.items()}


def _caret(text: str, labels: Labels) -> str:
    """``text`` with carets under one operand's (or the output's) subscripts."""
    if not labels.labels:
        return caret(text, labels.start)
    end = labels.positions[-1] + len(labels.labels[-1])
    return caret(text, labels.start, end - labels.start)


def _axes(count: int) -> str:
    return f"{count} axis" if count == 1 else f"{count} axes"
