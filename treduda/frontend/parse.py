"""Turn the text of a contraction into a statement tree (:mod:`treduda.frontend.tree`).

Two spellings are accepted: Einstein notation ``C[i,j] = A[i,k]*B[k,j]`` and numpy's
``"ik,kj->ij"``. The grammar is small, so a hand-written tokenizer and recursive-descent
parser keep every error message precise: each one says what was found, what was expected,
and carries the position of the offending character for the caret.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from typing import NoReturn

from treduda.errors import IndexUsageError, InvalidName, ParseError
from treduda.frontend.names import check_identifier
from treduda.frontend.tree import Add, Literal, Mul, Neg, Node, Operation, Read, Scalar, Sub, Write

_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"\w+")  # wider than C identifiers so bad names reach check_identifier
_WORD_TAIL = re.compile(r"[\w.]*")
_PUNCTUATION = ("+=", "-=", "[", "]", ",", "(", ")", "+", "-", "*", "=")
_MAX_NESTING = 100  # parentheses and unary signs; keeps recursion far from Python's limit
_NUMPY_OPERANDS = 26


@dataclass(frozen=True)
class _Token:
    kind: str  # "name", "number", "end", or the punctuation itself
    text: str
    position: int


def parse(text: str) -> Operation:
    """Parse ``C[i,j] = A[i,k]*B[k,j]`` (or numpy's ``"ik,kj->ij"``) into an :class:`Operation`.

    Raises :class:`ParseError` for malformed text, :class:`InvalidName` for unusable names
    and :class:`IndexUsageError` for an index repeated in the output.
    """
    if "[" not in text and ("->" in text or "=" not in text and text.strip()):
        return _parse_numpy(text)
    return _Parser(text).operation()


def _tokenize(text: str) -> list[_Token]:
    tokens = []
    position = 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        number = _NUMBER.match(text, position)
        word = _WORD.match(text, position)
        if number:
            end = _WORD_TAIL.match(text, number.end()).end()
            lexeme = text[position:end]
            if end == number.end():
                kind = "number"
            elif _WORD.fullmatch(lexeme):
                kind = "name"  # like "1i": rejected later as a name, with its role
            else:
                raise ParseError(f"malformed number '{lexeme}'", text, position, len(lexeme))
        elif word:
            kind, end = "name", word.end()
        else:
            kind = next((p for p in _PUNCTUATION if text.startswith(p, position)), "")
            if not kind:
                raise ParseError(f"unexpected character {text[position]!r}", text, position)
            end = position + len(kind)
        tokens.append(_Token(kind, text[position:end], position))
        position = end
    tokens.append(_Token("end", "", len(text)))
    return tokens


class _Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.next = 0
        self.nesting = 0

    def peek(self) -> _Token:
        return self.tokens[self.next]

    def advance(self) -> _Token:
        token = self.tokens[self.next]
        self.next = min(self.next + 1, len(self.tokens) - 1)
        return token

    def fail(self, expected: str) -> NoReturn:
        token = self.peek()
        if token.kind == "end":
            raise ParseError(f"unexpected end of expression, expected {expected}", self.text,
                             token.position)
        raise ParseError(f"expected {expected}, found '{token.text}'", self.text,
                         token.position, len(token.text))

    @contextmanager
    def nested(self, token: _Token) -> Iterator[None]:
        if self.nesting == _MAX_NESTING:
            raise ParseError(f"expression nested more than {_MAX_NESTING} levels deep",
                             self.text, token.position)
        self.nesting += 1
        try:
            yield
        finally:
            self.nesting -= 1

    def operation(self) -> Operation:
        """``Out[i,j,...] (=|+=|-=) expr``"""
        name = self.peek()
        if name.kind == "end":
            raise ParseError("empty expression; write e.g. C[i,j] = A[i,k]*B[k,j]", self.text, 0)
        if name.kind != "name":
            self.fail("the output tensor, e.g. C[i,j]")
        check_identifier(name.text, self.text, name.position, "tensor")
        self.advance()
        if self.peek().kind != "[":
            self.fail(f"'[' after the output tensor '{name.text}' (a scalar output is "
                      f"written {name.text}[])")
        indices, positions = self.index_list()
        _check_distinct(self.text, indices, positions, name.text)
        op = self.peek()
        if op.kind not in ("=", "+=", "-="):
            self.fail(f"'=', '+=' or '-=' after the output {name.text}[{','.join(indices)}]")
        self.advance()
        expr = self.expression()
        if self.peek().kind == ")":
            raise ParseError("unmatched ')'", self.text, self.peek().position)
        if self.peek().kind != "end":
            self.fail("an operator ('+', '-' or '*') or the end of the expression")
        write = Write(name.text, indices, op.kind, name.position, positions)
        return Operation(write, expr, self.text)

    def expression(self) -> Node:
        """``term (('+'|'-') term)*``, left-nested."""
        start = self.peek().position
        node = self.term()
        while self.peek().kind in ("+", "-"):
            kind = self.advance().kind
            node = (Add if kind == "+" else Sub)(node, self.term(), start)
        return node

    def term(self) -> Node:
        """``unary ('*' unary)*``, left-nested."""
        start = self.peek().position
        node = self.unary()
        while self.peek().kind == "*":
            self.advance()
            node = Mul(node, self.unary(), start)
        return node

    def unary(self) -> Node:
        """``'-' unary | '+' unary | primary``; a unary plus leaves no node."""
        sign = self.peek()
        if sign.kind not in ("+", "-"):
            return self.primary()
        self.advance()
        with self.nested(sign):
            operand = self.unary()
        return Neg(operand, sign.position) if sign.kind == "-" else operand

    def primary(self) -> Node:
        """``NAME '[' indices ']' | NAME | NUMBER | '(' expr ')'``"""
        token = self.peek()
        if token.kind == "name":
            self.advance()
            if self.peek().kind != "[":
                check_identifier(token.text, self.text, token.position, "scalar")
                return Scalar(token.text, token.position)
            check_identifier(token.text, self.text, token.position, "tensor")
            indices, positions = self.index_list()
            return Read(token.text, indices, token.position, positions)
        if token.kind == "number":
            self.advance()
            value = float(token.text)
            if not math.isfinite(value):
                raise ParseError(f"number '{token.text}' is too large for a double", self.text,
                                 token.position, len(token.text))
            return Literal(value, token.text, token.position)
        if token.kind == "(":
            self.advance()
            with self.nested(token):
                node = self.expression()
            if self.peek().kind != ")":
                self.fail(f"')' to close the '(' at character {token.position + 1}")
            self.advance()
            return node
        self.fail("a tensor, scalar, number or '('")

    def index_list(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """``'[' [NAME (',' NAME)*] ']'`` -> index names and their positions."""
        self.advance()  # '['
        names: list[str] = []
        positions: list[int] = []
        if self.peek().kind == "]":
            self.advance()
            return (), ()
        expected = "an index name or ']' after '['"
        while True:
            index = self.peek()
            if index.kind != "name":
                self.fail(expected)
            check_identifier(index.text, self.text, index.position, "index")
            names.append(index.text)
            positions.append(index.position)
            self.advance()
            if self.peek().kind == "]":
                self.advance()
                return tuple(names), tuple(positions)
            if self.peek().kind != ",":
                self.fail(f"']' or ',' after index '{index.text}'")
            self.advance()
            expected = "an index name after ','"


def _check_distinct(text: str, indices: tuple[str, ...], positions: tuple[int, ...],
                    tensor: str) -> None:
    """An output index written twice (``C[i,i]``) would make two threads race on one element."""
    seen: set[str] = set()
    for index, position in zip(indices, positions, strict=True):
        if index in seen:
            raise IndexUsageError(
                f"index '{index}' appears twice in the output {tensor}[{','.join(indices)}]; "
                "output indices must be distinct",
                text, position, len(index),
            )
        seen.add(index)


def _parse_numpy(text: str) -> Operation:
    """``"ik,kj->ij"`` -> ``out[i,j] = A[i,k]*B[k,j]``, operands named A, B, C, ... in order.

    Without ``->`` the output is implicit, as in numpy: the indices used exactly once, in
    alphabetical order (``"ik,kj"`` is ``"ik,kj->ij"``)."""
    arrow = text.find("->")
    second = text.find("->", arrow + 2) if arrow != -1 else -1
    if second != -1:
        raise ParseError("numpy-style subscripts have exactly one '->'", text, second, 2)
    reads = []
    start = 0
    for number, operand in enumerate((text if arrow == -1 else text[:arrow]).split(",")):
        if number == _NUMPY_OPERANDS:
            raise ParseError(
                f"numpy-style subscripts allow at most {_NUMPY_OPERANDS} operands (named A to Z)",
                text, start, len(operand),
            )
        indices, positions, first = _letters(text, start, operand, f"operand {number + 1}")
        reads.append(Read(chr(ord("A") + number), indices, first, positions))
        start += len(operand) + 1
    if arrow == -1:
        uses = Counter(index for read in reads for index in read.indices)
        indices = tuple(sorted(index for index, count in uses.items() if count == 1))
        positions, first = (len(text),) * len(indices), len(text)
    else:
        indices, positions, first = _letters(text, arrow + 2, text[arrow + 2:], "the output")
    _check_not_operand_names(text, reads, indices, positions)
    _check_distinct(text, indices, positions, "out")
    expr = reduce(lambda left, right: Mul(left, right, left.position), reads)
    return Operation(Write("out", indices, "=", first, positions), expr, text)


def _check_not_operand_names(text: str, reads: list[Read], indices: tuple[str, ...],
                             positions: tuple[int, ...]) -> None:
    """Operands are named A, B, ...; an index with the same letter would clash in the C code."""
    operands = {read.tensor for read in reads}
    uses = [use for read in reads for use in zip(read.indices, read.index_positions, strict=True)]
    for index, position in uses + list(zip(indices, positions, strict=True)):
        if index in operands:
            raise InvalidName(
                f"index '{index}' clashes with the name of operand {index} (numpy-style operands "
                "are named A, B, C, ...); use another letter",
                text, position,
            )


def _letters(text: str, start: int, chunk: str, what: str
             ) -> tuple[tuple[str, ...], tuple[int, ...], int]:
    """The single-letter indices of one numpy operand (spaces allowed only around them)."""
    first = start + len(chunk) - len(chunk.lstrip())
    letters = chunk.strip()
    for offset, letter in enumerate(letters):
        position = first + offset
        if letter == ".":
            raise ParseError("numpy's '...' is not supported; name every index", text, position)
        if not (letter.isascii() and letter.isalpha()):
            raise ParseError(f"{what} may only contain index letters, found {letter!r}",
                             text, position)
        check_identifier(letter, text, position, "index")
    return tuple(letters), tuple(range(first, first + len(letters))), first
