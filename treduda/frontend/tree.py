"""The statement tree of an expression (Treduda thesis, fig. 9).

The root is an :class:`Operation` whose first child is the :class:`Write` of the output and
whose second is the right-hand side: :class:`Add`, :class:`Sub`, :class:`Mul`, :class:`Neg`
over :class:`Read`, :class:`Scalar` and :class:`Literal` leaves. Only leaves name their
iterators; an inner node's iterators are the union of its children's, in order of first
appearance. Every node remembers where it starts in the source text so errors can point at it.

``repr`` of any node reads like the input (``A[i,k]*B[k,j]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def _unique(names) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Read:
    """A read of tensor element ``tensor[indices]``; ``index_positions`` locate each index."""

    tensor: str
    indices: tuple[str, ...]
    position: int = field(default=0, compare=False)
    index_positions: tuple[int, ...] = field(default=(), compare=False)

    @property
    def iterators(self) -> tuple[str, ...]:
        return _unique(self.indices)

    def __repr__(self) -> str:
        return f"{self.tensor}[{','.join(self.indices)}]"


@dataclass(frozen=True)
class Scalar:
    """A named scalar such as ``alpha``: a kernel argument, not indexed."""

    name: str
    position: int = field(default=0, compare=False)

    iterators = ()

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Literal:
    """A numeric literal; ``text`` is kept so the printed tree reads like the input."""

    value: float
    text: str
    position: int = field(default=0, compare=False)

    iterators = ()

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Neg:
    operand: Node
    position: int = field(default=0, compare=False)

    @property
    def iterators(self) -> tuple[str, ...]:
        return self.operand.iterators

    def __repr__(self) -> str:
        return f"-{_wrap(self.operand, (Add, Sub, Mul))}"


@dataclass(frozen=True)
class _Binary:
    left: Node
    right: Node
    position: int = field(default=0, compare=False)

    @property
    def iterators(self) -> tuple[str, ...]:
        return _unique(self.left.iterators + self.right.iterators)


class Add(_Binary):
    def __repr__(self) -> str:
        return f"{self.left!r} + {_wrap(self.right, (Add, Sub))}"


class Sub(_Binary):
    def __repr__(self) -> str:
        return f"{self.left!r} - {_wrap(self.right, (Add, Sub))}"


class Mul(_Binary):
    def __repr__(self) -> str:
        return f"{_wrap(self.left, (Add, Sub))}*{_wrap(self.right, (Add, Sub, Mul))}"


Node = Read | Scalar | Literal | Neg | Add | Sub | Mul


def _wrap(node: Node, kinds: tuple[type, ...]) -> str:
    """Parenthesise ``node`` if it is one of ``kinds``: operations are left-nested and unary
    minus binds tightest, so this is what makes repr re-parse to the same tree."""
    return f"({node!r})" if isinstance(node, kinds) else repr(node)


@dataclass(frozen=True)
class Write:
    """The output ``tensor[indices]`` and how the result is stored: ``=``, ``+=`` or ``-=``."""

    tensor: str
    indices: tuple[str, ...]
    op: str = "="
    position: int = field(default=0, compare=False)
    index_positions: tuple[int, ...] = field(default=(), compare=False)

    @property
    def iterators(self) -> tuple[str, ...]:
        return self.indices

    def __repr__(self) -> str:
        return f"{self.tensor}[{','.join(self.indices)}] {self.op}"


@dataclass(frozen=True)
class Operation:
    """The root: ``write`` receives ``expr``; ``source`` is the text the user typed."""

    write: Write
    expr: Node
    source: str = field(default="", compare=False)

    @property
    def iterators(self) -> tuple[str, ...]:
        return _unique(self.write.iterators + self.expr.iterators)

    def __repr__(self) -> str:
        return f"{self.write!r} {self.expr!r}"
