"""Parsing: trees, positions, the numpy form, error carets, and random expressions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from treduda.errors import IndexUsageError, InvalidName, ParseError, TredudaError
from treduda.frontend.names import RESERVED, check_identifier, is_identifier
from treduda.frontend.parse import parse
from treduda.frontend.tree import Add, Literal, Mul, Neg, Node, Operation, Read, Scalar, Sub, Write

EXPRESSIONS = [
    "C[i,j] = A[i,k] * B[k,j]",
    "C[i,j] = alpha*A[k,i]*B[j,k] + beta*C[i,j]",
    "C[b,i,j] = A[b,i,k]*B[b,k,j]",
    "s[] = x[i]*y[i]",
    "C[i,j] = x[i]*y[j]",
    "C[a,b,c,d] = A[d,b,e,a]*B[e,c]",
    "D[i,j] = A[i,k]*B[k,j] - C[i,j]",
    "C[i,j] += A[i,k]*B[k,j]",
    "C[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]",
    "T[a,b,c,d,e,f] = X[g,d,e,c]*Y[a,b,f,g]",
    "ik,kj->ij",
    "C[i,j] = 2*(A[i,j] + -B[i,j])",
    "C[h7,p4] = A[h7,p4]",
]


def caret_column(error: Exception) -> int:
    """Column of the caret under the echoed source (which the message indents by two)."""
    return str(error).splitlines()[-1].index("^") - 2


def nodes(node: Node) -> Iterator[Node]:
    """Every node, parents before children, left before right."""
    yield node
    if isinstance(node, Neg):
        yield from nodes(node.operand)
    elif isinstance(node, (Add, Sub, Mul)):
        yield from nodes(node.left)
        yield from nodes(node.right)


def leaves(node: Node) -> list[Read | Scalar | Literal]:
    return [n for n in nodes(node) if isinstance(n, (Read, Scalar, Literal))]


def _usable(name: str) -> bool:
    try:
        check_identifier(name, name, 0, "tensor")
    except InvalidName:
        return False
    return True


# Disjoint pools, so random expressions never use one name in two roles.
_TENSORS = st.from_regex(r"[A-Z][A-Za-z0-9_]{0,4}", fullmatch=True).filter(_usable)
_INDICES = st.from_regex(r"[a-z][0-9]?", fullmatch=True)
_SCALARS = st.from_regex(r"[a-z][a-z0-9_]{2,6}", fullmatch=True).filter(_usable)
_NUMBERS = st.one_of(
    st.integers(0, 10**6).map(str),
    st.floats(0, 1e300).map(repr),
    st.sampled_from([".5", "7.", "1e-3", "2.5E+2"]),
)
_SPACE = st.sampled_from(["", "", " ", "  ", "\t", "\n "])


@st.composite
def _read(draw, ranks: dict[str, int], indices: list[str]) -> tuple[str, Node]:
    tensor, rank = draw(st.sampled_from(sorted(ranks.items())))
    chosen = draw(st.lists(st.sampled_from(indices), min_size=rank, max_size=rank))
    return f"{tensor}{draw(_SPACE)}[{_index_text(draw, chosen)}]", Read(tensor, tuple(chosen))


def _index_text(draw, indices: list[str]) -> str:
    return ",".join(f"{draw(_SPACE)}{index}{draw(_SPACE)}" for index in indices) or draw(_SPACE)


def _wrap(text: str, node: Node, kinds: tuple[type, ...]) -> str:
    return f"({text})" if isinstance(node, kinds) else text


@st.composite
def _combined(draw, children) -> tuple[str, Node]:
    """A random operator over random children, parenthesised where precedence needs it."""
    kind = draw(st.sampled_from(["+", "-", "*", "neg", "plus", "paren"]))
    text, node = draw(children)
    space = draw(_SPACE)
    if kind == "neg":
        return f"-{space}{_wrap(text, node, (Add, Sub, Mul))}", Neg(node)
    if kind == "plus":
        return f"+{space}{text}", node
    if kind == "paren":
        return f"({space}{text}{draw(_SPACE)})", node
    right_text, right = draw(children)
    if kind == "*":
        left_text = _wrap(text, node, (Add, Sub))
        return f"{left_text}{space}*{space}{_wrap(right_text, right, (Add, Sub, Mul))}", Mul(
            node, right
        )
    combined = (Add if kind == "+" else Sub)(node, right)
    return f"{text}{space}{kind}{draw(_SPACE)}{_wrap(right_text, right, (Add, Sub))}", combined


@st.composite
def expressions(draw) -> tuple[str, Operation]:
    """Random well-formed Einstein expressions that analyse accepts, with the tree they mean."""
    ranks = draw(st.dictionaries(_TENSORS, st.integers(0, 3), min_size=1, max_size=4))
    indices = draw(st.lists(_INDICES, min_size=1, max_size=5, unique=True))
    scalars = draw(st.lists(_SCALARS, max_size=3, unique=True))
    leaf = [_read(ranks, indices), _NUMBERS.map(lambda t: (t, Literal(float(t), t)))]
    if scalars:
        leaf.append(st.sampled_from(scalars).map(lambda s: (s, Scalar(s))))
    text, expr = draw(st.recursive(st.one_of(leaf), _combined, max_leaves=8))
    used = list(dict.fromkeys(i for read in leaves(expr) if isinstance(read, Read)
                              for i in read.indices))
    output = draw(st.lists(st.sampled_from(used), unique=True)) if used else []
    name = draw(_TENSORS.filter(lambda n: n not in ranks))
    op = draw(st.sampled_from(["=", "+=", "-="]))
    spaces = [draw(_SPACE) for _ in range(4)]
    text = (f"{spaces[0]}{name}{spaces[1]}[{_index_text(draw, output)}]{spaces[2]}{op}"
            f"{spaces[3]}{text}{draw(_SPACE)}")
    return text, Operation(Write(name, tuple(output), op), expr)


def test_matrix_product_tree():
    tree = parse("C[i,j] = A[i,k] * B[k,j]")
    assert tree == Operation(
        Write("C", ("i", "j"), "="), Mul(Read("A", ("i", "k")), Read("B", ("k", "j")))
    )
    assert tree.source == "C[i,j] = A[i,k] * B[k,j]"
    assert tree.write.index_positions == (2, 4)
    assert tree.expr.right.position == 18
    assert tree.expr.right.index_positions == (20, 22)


def test_products_nest_to_the_left_and_sums_too():
    tree = parse("C[i] = a*b*x[i] - y[i] + 2")
    a, b, x, y = Scalar("a"), Scalar("b"), Read("x", ("i",)), Read("y", ("i",))
    assert tree.expr == Add(Sub(Mul(Mul(a, b), x), y), Literal(2.0, "2"))


def test_unary_minus_gives_neg_and_unary_plus_vanishes():
    tree = parse("C[i,j] = 2*(A[i,j] + -B[i,j]) - +x[i]*-(y[j])")
    assert tree.expr == Sub(
        Mul(Literal(2.0, "2"), Add(Read("A", ("i", "j")), Neg(Read("B", ("i", "j"))))),
        Mul(Read("x", ("i",)), Neg(Read("y", ("j",)))),
    )
    assert tree.expr.left.right.right.position == 21  # the '-' before B


@pytest.mark.parametrize("text,value", [("2", 2.0), ("0.5", 0.5), ("1e-3", 1e-3), (".5", 0.5),
                                        ("2.5E+2", 250.0), ("7.", 7.0)])
def test_number_literals_keep_their_text(text, value):
    literal = parse(f"s[] = {text}*x[i]").expr.left
    assert literal == Literal(value, text)
    assert repr(literal) == text


def test_rank_zero_tensors_and_compound_assignment():
    tree = parse("s[]+=x[]*y[ ]")
    assert tree.write == Write("s", (), "+=")
    assert tree.expr == Mul(Read("x", ()), Read("y", ()))
    assert parse("C[i] -= A[i]").write.op == "-="


def test_whitespace_is_free():
    assert parse(" \tC [ i , j ]\n=A[i,k ]*  B[ k,j]  ") == parse("C[i,j]=A[i,k]*B[k,j]")


def test_numpy_form():
    tree = parse(" ik , kj -> ij ")
    assert tree == parse("out[i,j] = A[i,k]*B[k,j]")
    assert tree.expr.left.index_positions == (1, 2)
    assert tree.write.index_positions == (12, 13)
    assert parse("i->i") == parse("out[i] = A[i]")
    assert parse("i,j,k->ijk").expr == Mul(Mul(Read("A", ("i",)), Read("B", ("j",))),
                                            Read("C", ("k",)))
    assert parse(",i->") == parse("out[] = A[]*B[i]")


def test_numpy_form_takes_any_letters_and_names_operands_apart_from_them():
    assert parse("ik,kj->ij").expr == Mul(Read("A", ("i", "k")), Read("B", ("k", "j")))
    # operand names that one of the letters would clash with give way to op1, op2, ...
    assert parse("aB,Bc->ac") == parse("out[a,c] = op1[a,B]*op2[B,c]")
    assert parse("ijAB,ABkl->ijkl") == parse("out[i,j,k,l] = op1[i,j,A,B]*op2[A,B,k,l]")
    assert parse("iC,Cj,jk->ik").expr.left.right == Read("op2", ("C", "j"))
    assert parse("iD,Dj->ij").expr == Mul(Read("A", ("i", "D")), Read("B", ("D", "j")))
    many = parse(",".join("i" * 27) + "->i")  # more operands than capitals
    assert many.expr.right == Read("op27", ("i",))


def test_numpy_form_ignores_spaces_as_numpy_does():
    assert parse("ij,j k->i k") == parse("ij,jk->ik")
    assert parse(" i j ").expr.index_positions == (1, 3)


def test_numpy_form_with_implicit_output_keeps_the_indices_used_once_in_alphabetical_order():
    assert parse("ik,kj") == parse("ik,kj->ij")
    assert parse("ji") == parse("ji->ij")  # a transposition, as numpy.einsum("ji", x) is
    assert parse("ba,cb,ad") == parse("ba,cb,ad->cd")
    assert parse("i,i") == parse("i,i->")
    assert parse("bA,a") == parse("bA,a->Aab")  # capitals first, as in numpy


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_listed_expressions_round_trip_through_repr(text):
    tree = parse(text)
    assert parse(repr(tree)) == tree


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_positions_point_at_their_tokens(text):
    _check_positions(parse(text))


def _check_positions(tree: Operation) -> None:
    text = tree.source
    assert text.startswith(tree.write.tensor, tree.write.position) or "->" in text
    for leaf in leaves(tree.expr):
        name = leaf.tensor if isinstance(leaf, Read) else repr(leaf)
        assert text.startswith(name, leaf.position) or "->" in text
        for index, position in zip(getattr(leaf, "indices", ()),
                                   getattr(leaf, "index_positions", ()), strict=True):
            assert text.startswith(index, position)
    for node in nodes(tree.expr):
        if isinstance(node, Neg):
            assert text[node.position] == "-"


@pytest.mark.parametrize(
    "text,error,column,reason",
    [
        ("C[i,j] = A[i,k] * ", ParseError, 18, "unexpected end of expression, expected a tensor"),
        ("C[i,j] = A[i,k) * B[k,j]", ParseError, 14, "expected ']' or ',' after index 'k', found"),
        ("C[i,j] = A[i,k * B[k,j]", ParseError, 15, "expected ']' or ',' after index 'k', "
         "found '*'"),
        ("C[i,i] = A[i,i]", IndexUsageError, 4, "index 'i' appears twice in the output"),
        ("C[i] = int[i]", InvalidName, 7, "tensor name 'int' is a C keyword; rename it"),
        ("C[i] = A[i] * for", InvalidName, 14, "scalar name 'for' is a C keyword"),
        ("C[1i] = A[i]", InvalidName, 2, "index name '1i' is not a C identifier"),
        ("C[i] = A[i] $ B[i]", ParseError, 12, "unexpected character '$'"),
        ("C[td_x] = A[td_x]", InvalidName, 2, "index name 'td_x' starts with 'td_'"),
        ("C[i] = A[i] * (B[i] + x", ParseError, 23, "expected ')' to close the '(' at character"),
        ("C[i] = A[i])", ParseError, 11, "unmatched ')'"),
        ("C[i] = A[i] B[i]", ParseError, 12, "expected an operator"),
        ("C = A[i]", ParseError, 2, "expected '[' after the output tensor 'C'"),
        ("C[i] A[i]", ParseError, 5, "expected '=', '+=' or '-=' after the output C[i]"),
        ("C[i,] = A[i]", ParseError, 4, "expected an index name after ','"),
        ("C[,i] = A[i]", ParseError, 2, "expected an index name or ']' after '['"),
        ("C[i] = A[i] * 1.5x", ParseError, 14, "malformed number '1.5x'"),
        ("C[i] = A[i] * 1e999", ParseError, 14, "too large"),
        ("", ParseError, 0, "empty expression"),
        ("= A[i]", ParseError, 0, "expected the output tensor"),
        ("C[i] = __x*A[i]", InvalidName, 7, "starts with '__'"),
        ("C[i] = float4[i]", InvalidName, 7, "vector or fixed-width type"),
        ("C[i] = A[i]*threadIdx", InvalidName, 12, "CUDA/OpenCL"),
        ("C[exists] = A[exists]", InvalidName, 2, "isl reserved word"),
        ("ij,j1", ParseError, 4, "operand 2 may only contain index letters, found '1'"),
        ("i1,j->ij", ParseError, 1, "operand 1 may only contain index letters, found '1'"),
        ("ij->i,j", ParseError, 5, "the output may only contain index letters, found ','"),
        ("ij->i->j", ParseError, 5, "exactly one '->'"),
        ("i...->i", ParseError, 1, "'...' stands for the axes an array has beyond its letters"),
        ("ij->...ij", ParseError, 4, "only its shape tells"),
        ("...ij,jk->...ik", ParseError, 0, "only its shape tells"),
        ("..i", ParseError, 0, "'..' is not an ellipsis"),
        ("i. ..", ParseError, 1, "'.' is not an ellipsis"),
        ("i....", ParseError, 1, "'....' is not an ellipsis"),
        ("i...j...", ParseError, 5, "operand 1 has a second '...'"),
        ("ij->...i...", ParseError, 8, "the output has a second '...'"),
        ("ij->ii", IndexUsageError, 5, "index 'i' appears twice in the output out[i,i]"),
        ("ij->ik", IndexUsageError, 5, "output index 'k' is used by no operand"),
    ],
)
def test_errors_point_at_the_offending_character(text, error, column, reason):
    with pytest.raises(error) as raised:
        parse(text)
    assert type(raised.value) is error
    assert reason in raised.value.reason
    assert raised.value.position == column
    assert caret_column(raised.value) == column


def test_deep_nesting_is_a_parse_error_not_a_recursion_error():
    with pytest.raises(ParseError, match="nested more than"):
        parse("C[i] = " + "(" * 500 + "A[i]" + ")" * 500)
    with pytest.raises(ParseError, match="nested more than"):
        parse("C[i] = " + "-" * 500 + "A[i]")


def test_names():
    assert is_identifier("_x9") and not is_identifier("9x") and not is_identifier("x\n")
    assert {"int", "min", "exists", "threadIdx", "NaN", "private"} <= RESERVED
    for name in ["alpha", "A", "h7", "td", "x_t", "float5", "ind"]:
        check_identifier(name, name, 0, "tensor")
    for name in ["int", "double2", "uchar16", "int32_t", "__x", "td_", "main", "domain", ""]:
        with pytest.raises(InvalidName):
            check_identifier(name, name, 0, "tensor")


@given(expressions())
def test_random_expressions_parse_to_the_tree_they_were_built_from(case):
    text, expected = case
    tree = parse(text)
    assert tree == expected
    _check_positions(tree)


@given(expressions())
def test_random_expressions_round_trip_through_repr(case):
    tree = parse(case[0])
    assert parse(repr(tree)) == tree


@pytest.mark.parametrize("text", ["C[i] = a*(b*A[i])", "C[i] = a + (b + A[i])",
                                  "C[i] = a + (b - A[i])", "C[i] = -(a*A[i])"])
def test_repr_keeps_parentheses_that_change_the_tree(text):
    tree = parse(text)
    assert parse(repr(tree)) == tree


_TEXTISH = st.text(alphabet="AaBxij_1.e[],()+-*= >\t", max_size=40)


@given(st.one_of(st.text(max_size=60), _TEXTISH))
def test_any_text_parses_or_raises_a_treduda_error(text):
    try:
        parse(text)
    except TredudaError:
        pass


@given(expressions(), st.integers(0, 200), st.sampled_from(list("[](),+-*=.1 x>")),
       st.booleans())
def test_damaged_expressions_parse_or_raise_a_treduda_error(case, where, char, delete):
    text = case[0]
    where %= len(text) + 1
    damaged = text[:where] + ("" if delete else char) + text[where + (1 if delete else 0):]
    try:
        parse(damaged)
    except TredudaError:
        pass
