"""numpy's subscripts in full: '...', extents of 1 broadcast, any letters, optimize=; every
result run on PoCL and compared with numpy.einsum, every refusal checked against numpy's."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_parse import caret_column

import treduda
from treduda.errors import ArgumentError, ParseError, ShapeMismatch, TredudaError
from treduda.frontend.broadcast import resolve
from treduda.frontend.parse import numpy_subscripts

STRATEGY = "thread_per_element"  # the cheapest to generate: these tests are about the front end


def operands(shapes: list[tuple[int, ...]], dtype: str = "float64") -> list[np.ndarray]:
    rng = np.random.default_rng(len(shapes))
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


def check(spec: str, shapes: list[tuple[int, ...]], dtype: str = "float64") -> np.ndarray:
    """contract(spec) on PoCL against numpy.einsum: values, shape and dtype."""
    arrays = operands(shapes, dtype)
    expected = np.einsum(spec, *arrays)
    result = treduda.contract(spec, *arrays, strategy=STRATEGY)
    assert result.shape == expected.shape and result.dtype == expected.dtype
    np.testing.assert_allclose(result, expected, rtol=1e-5 if dtype == "float32" else 1e-12)
    return result


@pytest.mark.parametrize(("spec", "shapes", "dtype"), [
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)], "float64"),  # equal batch ranks
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)], "float32"),  # broadcast batch ranks
    ("...ij,...jk->...ik", [(2, 1, 4, 5), (3, 5, 6)], "float64"),  # ... and a batch extent 1
    ("...ij,...jk", [(2, 3, 4, 5), (3, 5, 6)], "float32"),  # implicit: '...' first
    ("...ij,jk", [(2, 3, 4, 5), (5, 6)], "float64"),  # '...' in one operand only
    ("i...j,jk->k...i", [(3, 2, 4), (4, 5)], "float64"),  # '...' amid letters, output reordered
    ("...,...->...", [(3, 4), (4,)], "float32"),  # nothing but '...'
    ("ij...,ij...->...", [(3, 4, 5), (3, 4, 1)], "float64"),
    ("...ii->...i", [(3, 2, 2)], "float64"),  # a diagonal per batch
    ("...ij,...jk->...ik", [(4, 5), (5, 6)], "float64"),  # '...' of no axes
    ("ij,jk->...ik", [(4, 5), (5, 6)], "float64"),  # numpy takes an output '...' of no axes
], ids=lambda value: value if isinstance(value, str) else None)
def test_ellipsis_gives_what_numpy_einsum_gives(spec, shapes, dtype):
    check(spec, shapes, dtype)


@pytest.mark.parametrize(("spec", "shapes"), [
    ("ij,ij->ij", [(3, 1), (1, 4)]),  # the case: (3, 4)
    ("ij,jk->ik", [(3, 1), (5, 4)]),  # a summed index broadcast: j is 5
    ("ij,ij", [(3, 1), (1, 4)]),  # implicit output: i and j used twice, so summed
    ("i,i->i", [(1,), (4,)]),  # the operand left with no axes
    ("ii,i->i", [(1, 1), (5,)]),  # a diagonal of extent 1 broadcast
    ("i,i->i", [(1,), (1,)]),  # 1 against 1 is 1
], ids=lambda value: value if isinstance(value, str) else None)
def test_an_extent_of_1_broadcasts_as_in_numpy_einsum(spec, shapes):
    check(spec, shapes)


def test_a_broadcast_axis_is_dropped_from_its_operand_not_copied():
    broadcast = resolve("ij,jk->ik", [(3, 1), (5, 4)], {}, shape_of=tuple)
    assert broadcast.expr == "i,jk->ik" and broadcast.shapes == ((3,), (5, 4))
    a, b = np.ones((3, 1)), np.ones((5, 4))
    reshaped = broadcast.reshape((a, b), {})
    assert np.shares_memory(reshaped["A"], a) and reshaped["B"] is b
    assert resolve("...ij,...jk", [(2, 3, 4, 5), (3, 5, 6)], {}, shape_of=tuple).expr == (
        "abij,bjk->abik")
    assert resolve("ij,jk", [(3, 4), (4, 5)], {}, shape_of=tuple) is None  # nothing to do


@pytest.mark.parametrize(("spec", "shapes"), [
    ("ijAB,ABkl->ijkl", [(2, 3, 4, 5), (4, 5, 3, 2)]),
    ("iC,Cj,jk->ik", [(2, 3), (3, 4), (4, 5)]),
    ("Ab...,b", [(2, 3, 4), (3,)]),  # implicit: '...', then capitals before small letters
])
def test_any_letters_are_indices(spec, shapes):
    check(spec, shapes)


def test_operands_by_name_and_a_planned_expression():
    a, b = operands([(2, 1, 4, 5), (3, 5, 6)])
    expected = np.einsum("...ij,...jk", a, b)
    np.testing.assert_allclose(treduda.contract("...ij,...jk", B=b, A=a, strategy=STRATEGY),
                               expected, rtol=1e-12)
    planned = treduda.contract_expression("...ij,...jk", (2, 1, 4, 5), B=(3, 5, 6),
                                          dtype="float64", strategy=STRATEGY)
    for _ in range(2):
        np.testing.assert_allclose(planned(a, b), expected, rtol=1e-12)
    out = np.zeros(expected.shape)
    assert planned(a, B=b, out=out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    with pytest.raises(ShapeMismatch, match=re.escape("operand 2 has shape (1, 5, 6), but "
                                                      "'...ij,...jk' was planned for (3, 5, 6)")):
        planned(a, np.ones((1, 5, 6)))
    with pytest.raises(ArgumentError, match="takes one array per operand"):
        planned(a)


@pytest.mark.parametrize("optimize", [False, True, "greedy", "optimal", [(0, 1)],
                                      ["einsum_path", (0, 1)], ("einsum_path", [1, 0])])
def test_optimize_takes_what_numpy_einsum_takes(optimize):
    a, b = operands([(3, 4), (4, 5)])
    np.testing.assert_allclose(
        treduda.contract("ij,jk", a, b, optimize=optimize, strategy=STRATEGY),
        np.einsum("ij,jk", a, b), rtol=1e-12)


@pytest.mark.parametrize(("optimize", "message"), [
    ("fastest", "optimize must be False, True, 'auto' (the model chooses), one of 'auto-hq'"),
    (1, "got 1"),
    (None, "got None"),
    ([(0, 2)], "step 1, (0, 2), names operand 2, but 2 are left by then (0 to 1)"),
    (["einsum_path"], "leaves 2 operands uncontracted; end it with a step such as (0, 1)"),
    ([(0,)], "leaves 2 operands"),
    ([(0, 1), (0, 1)], "step 2, (0, 1), names operand 1, but 1 are left"),
    ([(0, 0)], "must be a tuple of distinct operand positions"),
    ([(True, 1)], "must be a tuple of distinct operand positions"),
    ([0, 1], "step 1, 0, must be a tuple"),
])
def test_a_bad_optimize_is_refused_before_any_kernel_is_made(optimize, message):
    with pytest.raises(ArgumentError, match=re.escape(message)):
        treduda.contract("ij,jk", np.ones((3, 4)), np.ones((4, 5)), optimize=optimize)


def test_a_misspelt_optimize_is_named():
    with pytest.raises(ArgumentError, match="did you mean 'optimize'"):
        treduda.contract("ij,jk", np.ones((3, 4)), np.ones((4, 5)), optimise=True)


@pytest.mark.parametrize(("spec", "shapes", "message", "column"), [
    ("ij,jk->ik", [(3, 2), (5, 4)],
     "index 'j': 2 in operand 1 (axis 1) but 5 in operand 2 (axis 0)", 3),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (4, 5, 6)],  # batches (2, 3) and (4,)
     "an axis of '...': 3 in operand 1 (axis 1) but 4 in operand 2 (axis 0)", 6),
    ("i,i->i", [(2,), (0,)], "index 'i': 2 in operand 1 (axis 0) but 0 in operand 2", 2),
    ("ii->i", [(1, 5)], "index 'i' of operand 1 has extent 1 on axis 0 but 5 on axis 1", 1),
    ("...ij", [(3,)], "operand 1 has 1 axis but its subscripts name 2 besides ...", 0),
    ("ij,jk", [(3, 4), (4, 5, 6)],
     "operand 2 has 3 axes but its subscripts name 2; write '...' for the axes", 3),
    ("...ij->ij", [(2, 3, 4)], "'...' stands for 1 axis of the operands, but the output has "
     "no '...'", 7),
], ids=lambda value: value if isinstance(value, str) else None)
def test_shapes_numpy_refuses_are_refused_with_a_caret(spec, shapes, message, column):
    arrays = [np.ones(shape) for shape in shapes]
    with pytest.raises(ValueError):
        np.einsum(spec, *arrays)
    with pytest.raises(ShapeMismatch, match=re.escape(message)) as raised:
        treduda.contract(spec, *arrays)
    assert caret_column(raised.value) == column
    with pytest.raises(ShapeMismatch, match=re.escape(message)):
        treduda.contract_expression(spec, *shapes)


@pytest.mark.parametrize(("spec", "message", "column"), [
    ("i...j...,j", "operand 1 has a second '...'", 5),
    ("..ij,j", "'..' is not an ellipsis", 0),
    ("ij,j->...i...", "the output has a second '...'", 10),
])
def test_malformed_ellipses_are_refused_with_a_caret(spec, message, column):
    arrays = [np.ones((2, 3, 4)), np.ones(4)]
    with pytest.raises(ValueError):
        np.einsum(spec, *arrays)
    with pytest.raises(ParseError, match=re.escape(message)) as raised:
        treduda.contract(spec, *arrays)
    assert raised.value.position == column and caret_column(raised.value) == column


def test_compile_refuses_an_ellipsis_it_has_no_shapes_for():
    with pytest.raises(ParseError, match="only its shape tells") as raised:
        treduda.compile("ab...,b->a...", {"a": 3, "b": 4})
    assert raised.value.position == 2 and raised.value.width == 3
    with pytest.raises(ArgumentError, match="'...' needs all of their shapes"):
        treduda.contract("...i,i", np.ones((2, 3)))


# Random subscripts and shapes: resolving them must give numpy.einsum's answer, or refuse
# exactly where numpy refuses. No kernels: numpy.einsum evaluates the resolved subscripts.
_LETTERS = "ijkAB"


@st.composite
def _cases(draw) -> tuple[str, list[tuple[int, ...]]]:
    extents = {letter: draw(st.sampled_from([2, 3])) for letter in _LETTERS}
    batch = draw(st.lists(st.sampled_from([1, 2, 3]), max_size=3))
    specs, shapes = [], []
    for _ in range(draw(st.integers(1, 3))):
        letters = draw(st.lists(st.sampled_from(_LETTERS), max_size=3))
        ellipsis = draw(st.booleans())
        rank = draw(st.integers(0, len(batch))) if ellipsis else 0
        cut = draw(st.integers(0, len(letters)))
        spec = "".join(letters[:cut]) + ("..." if ellipsis else "") + "".join(letters[cut:])
        shape = [draw(st.sampled_from([extents[letter], 1, 1, 4])) for letter in letters]
        shapes.append(tuple(shape[:cut] + batch[len(batch) - rank:] + shape[cut:]))
        specs.append(spec)
    text = ",".join(specs)
    if draw(st.booleans()):
        used = sorted({letter for spec in specs for letter in spec if letter != "."})
        output = draw(st.permutations(used))[:draw(st.integers(0, len(used)))]
        cut = draw(st.integers(0, len(output)))
        dots = "..." if draw(st.booleans()) else ""
        text += "->" + "".join(output[:cut]) + dots + "".join(output[cut:])
    return text, shapes


@given(_cases())
def test_resolved_subscripts_agree_with_numpy_einsum(case):
    text, shapes = case
    arrays = [np.arange(1, 1 + int(np.prod(shape))).reshape(shape) for shape in shapes]
    try:
        expected = np.einsum(text, *arrays)
    except ValueError:
        expected = None
    try:
        broadcast = resolve(text, arrays, {})
        if broadcast is None:
            result = np.einsum(text, *arrays)
        else:
            reshaped = broadcast.reshape(arrays, {})
            result = np.einsum(broadcast.expr, *(reshaped[name] for name in broadcast.names))
    except TredudaError:
        result = None
    assert (result is None) == (expected is None), text
    if expected is not None:
        np.testing.assert_array_equal(result, expected)


@st.composite
def _texts(draw) -> tuple[str, list[list[str]]]:
    labels = st.lists(st.sampled_from(["i", "j", "A", "Z", "..."]), max_size=4)
    operands = draw(st.lists(labels.filter(lambda ls: ls.count("...") <= 1), min_size=1,
                             max_size=3))
    space = st.sampled_from(["", "", " "])
    text = ",".join("".join(draw(space) + label for label in operand) + draw(space)
                    for operand in operands)
    return text, operands


@given(_texts())
def test_numpy_subscripts_find_every_label_where_it_stands(case):
    text, operands = case
    subscripts = numpy_subscripts(text)
    assert [list(labels.labels) for labels in subscripts.operands] == operands
    for labels in subscripts.operands:
        for label, position in zip(labels.labels, labels.positions, strict=True):
            assert text.startswith(label, position)
