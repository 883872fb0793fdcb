"""Analysis: expansion into terms, semantic errors with carets, and index sizes."""

from __future__ import annotations

import math
import re
import zlib

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_parse import EXPRESSIONS, caret_column, expressions, leaves

from treduda.errors import (
    IndexUsageError,
    InvalidName,
    MissingSize,
    ParseError,
    RankMismatch,
    ShapeMismatch,
    TredudaError,
)
from treduda.frontend.contraction import Contraction, Term, analyse, infer_sizes, resolve_sizes
from treduda.frontend.parse import parse
from treduda.frontend.tree import Add, Literal, Mul, Neg, Node, Read, Scalar, Sub


def _terms(c: Contraction) -> list[tuple]:
    """Terms as (coefficient, scalars, reads as text, summed) for readable expectations."""
    return [(t.coefficient, t.scalars, tuple(map(repr, t.reads)), t.summed(c.output_indices))
            for t in c.terms]


MATMUL = [(1.0, (), ("A[i,k]", "B[k,j]"), ("k",))]

# text -> (terms, inputs, scalars, indices (a string when single letters), reads_output)
EXPECTED = {
    "C[i,j] = A[i,k] * B[k,j]": (MATMUL, {"A": ("i", "k"), "B": ("k", "j")}, (), "ijk", False),
    "C[i,j] = alpha*A[k,i]*B[j,k] + beta*C[i,j]": (
        [(1.0, ("alpha",), ("A[k,i]", "B[j,k]"), ("k",)), (1.0, ("beta",), ("C[i,j]",), ())],
        {"A": ("k", "i"), "B": ("j", "k")}, ("alpha", "beta"), "ijk", True,
    ),
    "C[b,i,j] = A[b,i,k]*B[b,k,j]": (
        [(1.0, (), ("A[b,i,k]", "B[b,k,j]"), ("k",))],
        {"A": ("b", "i", "k"), "B": ("b", "k", "j")}, (), "bijk", False,
    ),
    "s[] = x[i]*y[i]": (
        [(1.0, (), ("x[i]", "y[i]"), ("i",))], {"x": ("i",), "y": ("i",)}, (), "i", False,
    ),
    "C[i,j] = x[i]*y[j]": (
        [(1.0, (), ("x[i]", "y[j]"), ())], {"x": ("i",), "y": ("j",)}, (), "ij", False,
    ),
    "C[a,b,c,d] = A[d,b,e,a]*B[e,c]": (
        [(1.0, (), ("A[d,b,e,a]", "B[e,c]"), ("e",))],
        {"A": ("d", "b", "e", "a"), "B": ("e", "c")}, (), "abcde", False,
    ),
    "D[i,j] = A[i,k]*B[k,j] - C[i,j]": (
        MATMUL + [(-1.0, (), ("C[i,j]",), ())],
        {"A": ("i", "k"), "B": ("k", "j"), "C": ("i", "j")}, (), "ijk", False,
    ),
    "C[i,j] += A[i,k]*B[k,j]": (MATMUL, {"A": ("i", "k"), "B": ("k", "j")}, (), "ijk", False),
    "C[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]": (
        [
            (1.0, (), ("A[i,j,k,l]",), ()),
            (-1.0, (), ("A[i,l,k,j]",), ()),
            (1.0, (), ("B[m,j,k]", "B[i,m,l]"), ("m",)),
            (-1.0, (), ("B[m,l,k]", "B[i,m,j]"), ("m",)),
        ],
        {"A": ("i", "j", "k", "l"), "B": ("m", "j", "k")}, (), "ijklm", False,
    ),
    "T[a,b,c,d,e,f] = X[g,d,e,c]*Y[a,b,f,g]": (
        [(1.0, (), ("X[g,d,e,c]", "Y[a,b,f,g]"), ("g",))],
        {"X": ("g", "d", "e", "c"), "Y": ("a", "b", "f", "g")}, (), "abcdefg", False,
    ),
    "ik,kj->ij": (MATMUL, {"A": ("i", "k"), "B": ("k", "j")}, (), "ijk", False),
    "C[i,j] = 2*(A[i,j] + -B[i,j])": (
        [(2.0, (), ("A[i,j]",), ()), (-2.0, (), ("B[i,j]",), ())],
        {"A": ("i", "j"), "B": ("i", "j")}, (), "ij", False,
    ),
    "C[h7,p4] = A[h7,p4]": ([(1.0, (), ("A[h7,p4]",), ())], {"A": ("h7", "p4")}, (), ("h7", "p4"),
                            False),
}


def test_every_listed_expression_has_expectations():
    assert sorted(EXPECTED) == sorted(EXPRESSIONS)


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_listed_expressions(text):
    terms, inputs, scalars, indices, reads_output = EXPECTED[text]
    c = analyse(text)
    tree = parse(text)
    assert c.tree == tree and c.source == text
    assert (c.output, c.output_indices, c.op) == (tree.write.tensor, tree.write.indices,
                                                   tree.write.op)
    assert _terms(c) == terms
    assert c.inputs == inputs and list(c.inputs) == list(inputs)
    assert c.scalars == scalars
    assert c.indices == tuple(indices)
    assert c.reads_output is reads_output
    assert analyse(tree) == c


def test_repr_and_rank():
    c = analyse("C[i,j] = A[i,k]*B[k,j]")
    assert repr(c) == "Contraction(C[i,j] = A[i,k]*B[k,j]; summed: k)"
    assert repr(analyse("C[i,j] = x[i]*y[j]")) == "Contraction(C[i,j] = x[i]*y[j])"
    assert repr(analyse("s[] = A[i,j]*B[j,i]")) == "Contraction(s[] = A[i,j]*B[j,i]; summed: i, j)"
    assert (c.rank("A"), c.rank("C"), analyse("s[] = x[]").rank("s")) == (2, 2, 0)
    with pytest.raises(KeyError, match="its tensors are C, A, B"):
        c.rank("Z")


def test_contractions_compare_and_hash_by_meaning_not_spacing():
    a, b = analyse("C[i,j]=A[i,k]*B[k,j]"), analyse("C[i, j] = A[i, k] * B[k, j]")
    assert a == b and hash(a) == hash(b)
    assert a != analyse("C[i,j] += A[i,k]*B[k,j]")


def test_expansion_distributes_and_folds_signs_and_literals():
    c = analyse("C[i] = -(a - 2*x[i])*(y[i] + 0.5*b*b*z[i])")
    assert [(t.coefficient, t.scalars, tuple(map(repr, t.reads))) for t in c.terms] == [
        (-1.0, ("a",), ("y[i]",)),
        (-0.5, ("a", "b", "b"), ("z[i]",)),
        (2.0, (), ("x[i]", "y[i]")),
        (1.0, ("b", "b"), ("x[i]", "z[i]")),
    ]
    assert c.scalars == ("a", "b")


def test_each_term_sums_its_own_indices():
    c = analyse("C[i] = A[i,k]*x[k] + B[i,m]*y[m] - A[i,n]")
    assert [t.summed(c.output_indices) for t in c.terms] == [("k",), ("m",), ("n",)]
    assert c.indices == ("i", "k", "m", "n")
    assert Term(1.0, (), (Read("A", ("k", "i", "k")),)).summed(("i",)) == ("k",)


@pytest.mark.parametrize(
    "text,error,column,reason",
    [
        ("C[i,j] = A[i]", IndexUsageError, 4, "output index 'j' is not used by any tensor"),
        ("C[i,j] = alpha", IndexUsageError, 2, "output index 'i' is not used"),
        ("C[i] = A[i,k] + A[i]", RankMismatch,
         16, "A is used with 1 index here but with 2 indices at character 8 (A[i,k])"),
        ("C[i] = C[i,j]*A[j]", RankMismatch, 7, "C is used with 2 indices here but with 1 index"),
        ("C[i,j] = C[j,i]", IndexUsageError, 9, "the output C may only be read as C[i,j] "
         "(elementwise); reading C[j,i] would race with the writes"),
        ("C[i] = A[i]*A", InvalidName, 12, "'A' is used as a scalar here but as a tensor"),
        ("C[i] = A[i]*i", InvalidName, 12, "'i' is used as a scalar here but as an index"),
        ("C[i] = i[i]", InvalidName, 7, "'i' is used as a tensor here but as an index"),
        ("C[i] = A[i] * ", ParseError, 14, "unexpected end of expression"),
    ],
)
def test_semantic_errors_point_at_the_offending_token(text, error, column, reason):
    with pytest.raises(error) as raised:
        analyse(text)
    assert type(raised.value) is error
    assert reason in raised.value.reason
    assert caret_column(raised.value) == column


def test_elementwise_reads_of_the_output_and_scalar_outputs_are_fine():
    assert analyse("C[i,j] = 2*C[i,j] - C[i,j]*A[i,j]").reads_output
    assert analyse("s[] = 2*alpha").indices == ()


def test_resolve_sizes():
    c = analyse("C[i,j] = A[i,k]*B[k,j]")
    assert list(resolve_sizes(c, {"k": 4, "j": np.int64(3), "i": 2}).items()) == [
        ("i", 2), ("j", 3), ("k", 4)]
    with pytest.raises(MissingSize, match=r'no size for indices j, k.*sizes=\{"j": 64\}'):
        resolve_sizes(c, {"i": 2})
    with pytest.raises(ShapeMismatch, match="'x', which is not an index .* are i, j, k"):
        resolve_sizes(c, {"i": 2, "j": 2, "k": 2, "x": 2})
    for bad in (0, -3, 2.0, True, "4", None):
        with pytest.raises(ShapeMismatch, match="must be a positive int"):
            resolve_sizes(c, {"i": 2, "j": 2, "k": bad})


def test_infer_sizes():
    c = analyse("C[i,j] = A[i,k]*B[k,j]")
    a, b = np.zeros((2, 64)), np.zeros((64, 3))
    assert infer_sizes(c, {"A": a, "B": b}) == {"i": 2, "j": 3, "k": 64}
    assert infer_sizes(c, {"A": a, "B": b, "C": np.zeros((2, 3))}, {"k": 64})["k"] == 64
    cases = [
        ({"A": a, "B": np.zeros((32, 3))}, None, ShapeMismatch,
         "index 'k': 64 in A (axis 1) but 32 in B (axis 0)"),
        ({"A": np.zeros((2, 64, 1)), "B": b}, None, ShapeMismatch,
         "A has 3 axes but the expression indexes it with 2: A[i,k]"),
        ({"A": a}, None, MissingSize, "no array for the input B"),
        ({"A": a, "B": b, "C": np.zeros((3, 2))}, None, ShapeMismatch, "index 'i': 2 in A"),
        ({"A": a, "B": b}, {"k": 32}, ShapeMismatch, "index 'k': sizes says 32 but it is 64"),
        ({"A": a, "B": b}, {"k": 0}, ShapeMismatch, "must be a positive int"),
        ({"A": [[1.0]], "B": b}, None, ShapeMismatch, "A must be an array with a .shape"),
        ({"A": np.zeros((0, 64)), "B": b}, None, ShapeMismatch, "'i' must be a positive int"),
    ]
    for arrays, sizes, error, message in cases:
        with pytest.raises(error, match=re.escape(message)):
            infer_sizes(c, arrays, sizes)


def test_infer_sizes_needs_the_output_only_when_its_old_values_are_used():
    arrays = {"A": np.zeros((2, 3)), "B": np.zeros((3, 4))}
    for text in ["C[i,j] += A[i,k]*B[k,j]", "C[i,j] = A[i,k]*B[k,j] + C[i,j]"]:
        with pytest.raises(MissingSize, match="no array for the output C"):
            infer_sizes(analyse(text), arrays)
        assert infer_sizes(analyse(text), arrays | {"C": np.zeros((2, 4))})["j"] == 4


def test_infer_sizes_checks_every_read_of_a_tensor_and_rank_zero_arrays():
    c = analyse("C[i] = A[i,k]*A[k,i]*x[]")
    arrays = {"A": np.zeros((3, 4)), "x": np.float64(2.0)}
    with pytest.raises(ShapeMismatch, match=re.escape("index 'k': 4 in A (axis 1) but 3 in A")):
        infer_sizes(c, arrays)
    assert infer_sizes(c, arrays | {"A": np.zeros((3, 3))}) == {"i": 3, "k": 3}


def _evaluate(node: Node, values: dict[str, float]) -> float:
    if isinstance(node, (Read, Scalar)):
        return values[repr(node)]
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Neg):
        return -_evaluate(node.operand, values)
    left, right = _evaluate(node.left, values), _evaluate(node.right, values)
    return {Add: left + right, Sub: left - right, Mul: left * right}[type(node)]


@given(expressions())
def test_random_expressions_analyse_to_an_equivalent_sum_of_terms(case):
    text, tree = case
    c = analyse(text)
    assert c.indices[: len(c.output_indices)] == c.output_indices
    summed = {i for term in c.terms for i in term.summed(c.output_indices)}
    assert set(c.indices[len(c.output_indices):]) == summed
    assert set(c.inputs) == {r.tensor for r in leaves(tree.expr) if isinstance(r, Read)}
    values = {repr(leaf): float(zlib.crc32(repr(leaf).encode()) % 7 - 3)
              for leaf in leaves(tree.expr)}
    products = [t.coefficient * math.prod(values[s] for s in t.scalars)
                * math.prod(values[repr(r)] for r in t.reads) for t in c.terms]
    direct, scale = _evaluate(tree.expr, values), sum(map(abs, products))
    assume(math.isfinite(direct) and math.isfinite(scale))
    assert abs(direct - sum(products)) <= 1e-9 * scale


@given(expressions(), st.data())
def test_analyse_raises_only_treduda_errors_when_names_collide(case, data):
    pool = st.sampled_from(["A", "B", "C", "i", "k", "x"])
    text = re.sub(r"(?<![\w.])[A-Za-z_]\w*", lambda _: data.draw(pool), case[0])
    try:
        analyse(text)
    except TredudaError:
        pass


@given(st.text(alphabet="ABCik,[]()+-*=. 2", max_size=30))
def test_analyse_of_any_text_raises_only_treduda_errors(text):
    try:
        analyse(text)
    except TredudaError:
        pass


def test_missing_size_points_at_the_index():
    with pytest.raises(MissingSize) as error:
        resolve_sizes(analyse("C[i,j] = A[i,k]*B[k,j]"), {"i": 2, "j": 3})
    lines = str(error.value).splitlines()
    assert "no size for index k" in lines[0]
    assert lines[-1].index("^") == lines[-2].index("A[i,k]") + len("A[i,")


def test_tensor_read_twice_needs_one_shape():
    c = analyse("C[i,j] = A[i,j] + A[j,i]")
    assert resolve_sizes(c, {"i": 4, "j": 4}) == {"i": 4, "j": 4}
    with pytest.raises(ShapeMismatch, match="A is read as A\\[i,j\\] and as A\\[j,i\\]") as error:
        resolve_sizes(c, {"i": 4, "j": 5})
    lines = str(error.value).splitlines()
    assert lines[-1].index("^") == lines[-2].index("A[j,i]") + len("A[")
