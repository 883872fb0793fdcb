"""Turn the text of a contraction into a statement tree (:mod:`treduda.frontend.tree`).

Two spellings are accepted: Einstein notation ``C[i,j] = A[i,k]*B[k,j]`` and numpy's
``"ik,kj->ij"``. The grammar is small, so a hand-written tokenizer and recursive-descent
parser keep every error message precise: each one says what was found, what was expected,
and carries the position of the offending character for the caret.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from typing import NoReturn

from treduda.errors import IndexUsageError, ParseError
from treduda.frontend.names import check_identifier
from treduda.frontend.tree import Add, Literal, Mul, Neg, Node, Operation, Read, Scalar, Sub, Write

_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"\w+")  # wider than C identifiers so bad names reach check_identifier
_WORD_TAIL = re.compile(r"[\w.]*")
_PUNCTUATION = ("+=", "-=", "[", "]", ",", "(", ")", "+", "-", "*", "=")
_MAX_NESTING = 100  # parentheses and unary signs; keeps recursion far from Python's limit


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
    if is_numpy_style(text):
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


ELLIPSIS = "..."


@dataclass(frozen=True)
class Labels:
    """One operand's numpy-style subscripts, or the output's: letters, and :data:`ELLIPSIS`
    where ``...`` stands, each with its position in the text; ``start`` is where they begin
    (or would begin, for none)."""

    labels: tuple[str, ...]
    positions: tuple[int, ...]
    start: int

    @property
    def letters(self) -> tuple[str, ...]:
        return tuple(label for label in self.labels if label != ELLIPSIS)

    @property
    def letter_positions(self) -> tuple[int, ...]:
        return tuple(p for label, p in zip(self.labels, self.positions, strict=True)
                     if label != ELLIPSIS)

    @property
    def ellipsis(self) -> int | None:
        """Where ``...`` stands in the text, or None without one."""
        return self.positions[self.labels.index(ELLIPSIS)] if ELLIPSIS in self.labels else None


@dataclass(frozen=True)
class Subscripts:
    """numpy-style subscripts taken apart; ``output`` is None where it is implicit (no ``->``)."""

    text: str
    operands: tuple[Labels, ...]
    output: Labels | None

    @property
    def labels(self) -> tuple[Labels, ...]:
        """The operands' labels, then the output's where it is explicit."""
        return self.operands if self.output is None else (*self.operands, self.output)

    @property
    def ellipsis(self) -> bool:
        """Whether ``...`` stands anywhere."""
        return any(labels.ellipsis is not None for labels in self.labels)

    @property
    def names(self) -> tuple[str, ...]:
        """The operands' tensor names: A, B, C, ... in order, unless one of those letters is an
        index here (numpy takes any letter, as in ``"iA,Aj"``) or there are more than 26; then
        op1, op2, ..., which no single letter can clash with."""
        count = len(self.operands)
        letters = {letter for labels in self.operands for letter in labels.letters}
        plain = tuple(string.ascii_uppercase[:count])
        if count <= len(string.ascii_uppercase) and letters.isdisjoint(plain):
            return plain
        return tuple(f"op{number + 1}" for number in range(count))

    def implicit_output(self) -> tuple[str, ...]:
        """numpy's output without ``->``: the letters used exactly once, in alphabetical order
        (capitals first), after the axes of ``...`` (which the caller places)."""
        uses = Counter(letter for labels in self.operands for letter in labels.letters)
        return tuple(sorted(letter for letter, count in uses.items() if count == 1))


def is_numpy_style(text: str) -> bool:
    """Whether ``text`` is numpy's ``"ik,kj->ij"`` (or ``"ik,kj"``) rather than Einstein
    notation."""
    return "[" not in text and ("->" in text or "=" not in text and bool(text.strip()))


def numpy_subscripts(text: str) -> Subscripts:
    """Take ``"...ij,...jk->...ik"`` apart, as numpy.einsum reads it: letters (any of a-z and
    A-Z), at most one ``...`` per operand and in the output, spaces ignored.

    Raises :class:`ParseError` for malformed text and :class:`IndexUsageError` for an output
    letter repeated or used by no operand."""
    arrow = text.find("->")
    second = text.find("->", arrow + 2) if arrow != -1 else -1
    if second != -1:
        raise ParseError("numpy-style subscripts have exactly one '->'", text, second, 2)
    operands = []
    start = 0
    for number, chunk in enumerate((text if arrow == -1 else text[:arrow]).split(",")):
        operands.append(_labels(text, start, chunk, f"operand {number + 1}"))
        start += len(chunk) + 1
    if arrow == -1:
        return Subscripts(text, tuple(operands), None)
    output = _labels(text, arrow + 2, text[arrow + 2:], "the output")
    _check_distinct(text, output.letters, output.letter_positions, "out")
    used = {letter for labels in operands for letter in labels.letters}
    for letter, position in zip(output.letters, output.letter_positions, strict=True):
        if letter not in used:
            raise IndexUsageError(f"output index '{letter}' is used by no operand; every output "
                                  "index must appear in at least one operand", text, position)
    return Subscripts(text, tuple(operands), output)


def _labels(text: str, start: int, chunk: str, what: str) -> Labels:
    """The labels of one operand (or the output) in ``chunk``, which starts at ``start``."""
    labels: list[str] = []
    positions: list[int] = []
    offset = 0
    while offset < len(chunk):
        position, char = start + offset, chunk[offset]
        if char == ".":
            dots = len(chunk) - offset - len(chunk[offset:].lstrip("."))
            if dots != len(ELLIPSIS):
                raise ParseError(f"'{'.' * dots}' is not an ellipsis; numpy's is three dots, "
                                 "'...'", text, position, dots)
            if ELLIPSIS in labels:
                raise ParseError(f"{what} has a second '...'; each operand and the output take "
                                 "at most one", text, position, dots)
            labels.append(ELLIPSIS)
            positions.append(position)
            offset += dots
            continue
        if not char.isspace():
            if not (char.isascii() and char.isalpha()):
                raise ParseError(f"{what} may only contain index letters, found {char!r}",
                                 text, position)
            labels.append(char)
            positions.append(position)
        offset += 1
    first = positions[0] if positions else start + len(chunk)
    return Labels(tuple(labels), tuple(positions), first)


def _parse_numpy(text: str) -> Operation:
    """``"ik,kj->ij"`` -> ``out[i,j] = A[i,k]*B[k,j]``, operands named as
    :attr:`Subscripts.names` says.

    Without ``->`` the output is implicit, as in numpy: the indices used exactly once, in
    alphabetical order (``"ik,kj"`` is ``"ik,kj->ij"``). ``...`` needs the arrays' shapes,
    which :mod:`treduda.frontend.broadcast` resolves it with; here it is refused."""
    subscripts = numpy_subscripts(text)
    if subscripts.ellipsis:
        raise ParseError(
            "'...' stands for the axes an array has beyond its letters, which only its shape "
            "tells: pass the arrays to treduda.contract (or their shapes to "
            "contract_expression), or write a letter for every axis",
            text, next(labels.ellipsis for labels in subscripts.labels
                       if labels.ellipsis is not None), len(ELLIPSIS))
    reads = [Read(name, labels.labels, labels.start, labels.positions)
             for name, labels in zip(subscripts.names, subscripts.operands, strict=True)]
    if subscripts.output is None:
        indices = subscripts.implicit_output()
        positions, first = (len(text),) * len(indices), len(text)
    else:
        output = subscripts.output
        indices, positions, first = output.labels, output.positions, output.start
    expr = reduce(lambda left, right: Mul(left, right, left.position), reads)
    return Operation(Write("out", indices, "=", first, positions), expr, text)
