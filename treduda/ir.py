"""The kernel IR: the small language between isl's AST and the C printers.

The isl AST is converted into these frozen dataclasses once (:mod:`treduda.ast_build`); the
CUDA and OpenCL printers (:mod:`treduda.printer`) walk them and differ only in a dialect table.
Expressions are integers for index arithmetic and scalars of the kernel's dtype for values.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import TredudaError


class Op(enum.Enum):
    """Binary operators; the value is the C spelling where one exists."""

    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # exact or truncating integer division on non-negative operands, or a float division
    MOD = "%"  # remainder of non-negative operands
    FLOOR_DIV = "floord"  # rounds towards minus infinity (isl's fdiv_q)
    MIN = "min"
    MAX = "max"
    LT = "<"
    LE = "<="
    EQ = "=="
    GE = ">="
    GT = ">"
    AND = "&&"
    OR = "||"


class Builtin(enum.Enum):
    """Index builtins a dialect spells its own way (``blockIdx.x`` / ``get_group_id(0)``)."""

    BLOCK_ID = "block_id"
    THREAD_ID = "thread_id"


@dataclass(frozen=True)
class Int:
    value: int


@dataclass(frozen=True)
class Float:
    """A floating-point literal of the kernel's dtype."""

    value: float


@dataclass(frozen=True)
class Var:
    """A named value: a loop iterator, a size, a scalar argument or a register."""

    name: str


@dataclass(frozen=True)
class Index:
    """The block or thread coordinate along ``axis`` (0 = x, 1 = y, 2 = z)."""

    builtin: Builtin
    axis: int


@dataclass(frozen=True)
class Binary:
    op: Op
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Neg:
    operand: Expr


@dataclass(frozen=True)
class Select:
    """``condition ? if_true : if_false``."""

    condition: Expr
    if_true: Expr
    if_false: Expr


@dataclass(frozen=True)
class Element:
    """Element ``array[indices]`` of a multi-dimensional tensor, before linearisation."""

    array: str
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Load:
    """Element ``array[offset]`` of a flat array (global, shared or register)."""

    array: str
    offset: Expr


Expr = Int | Float | Var | Index | Binary | Neg | Select | Element | Load


@dataclass(frozen=True)
class Assign:
    """``target op value`` with op one of ``=``, ``+=``, ``-=``."""

    target: Expr
    op: str
    value: Expr


@dataclass(frozen=True)
class For:
    """``for (iterator = start; condition; iterator += step) body``."""

    iterator: str
    start: Expr
    condition: Expr
    step: Expr
    body: Stmt
    unroll: bool = False  # ask the C compiler to unroll it (#pragma unroll)


@dataclass(frozen=True)
class If:
    condition: Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True)
class Block:
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Barrier:
    """All threads of a block wait here until every one has arrived (shared memory is stable)."""


Stmt = Assign | For | If | Block | Barrier


class ParamKind(enum.Enum):
    OUTPUT = "output"  # the written tensor
    INPUT = "input"  # a read-only tensor
    SCALAR = "scalar"  # a named scalar of the kernel's dtype
    SIZE = "size"  # the extent of an index, for kernels with symbolic sizes


@dataclass(frozen=True)
class Param:
    name: str
    kind: ParamKind


class Space(enum.Enum):
    REGISTER = "register"
    SHARED = "shared"


@dataclass(frozen=True)
class Local:
    """An array of the kernel's dtype declared at the top of the kernel; ``shape == ()`` is a
    scalar register. ``layout`` says how ``Element`` indices are linearised, as for tensors."""

    name: str
    space: Space
    shape: tuple[int, ...] = ()
    layout: str = "C"

    @property
    def size(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count


@dataclass(frozen=True)
class KernelIR:
    """One kernel: its signature, its locals and its body, ready to print in any dialect."""

    name: str
    dtype: str  # "float32" or "float64"
    index_bits: int  # 32 or 64: the integer type of iterators, sizes and offsets
    params: tuple[Param, ...]
    locals: tuple[Local, ...]
    body: Stmt


def elements(node: Assign | Barrier | Expr) -> list[Element]:
    """Every tensor, register or shared element a statement touches: the target first, then
    the value's, left to right. Access relations are listed in this order."""
    if isinstance(node, Assign):
        return elements(node.target) + elements(node.value)
    if isinstance(node, Element):
        return [node]
    if isinstance(node, Binary):
        return elements(node.left) + elements(node.right)
    if isinstance(node, Neg):
        return elements(node.operand)
    if isinstance(node, Select):
        return [e for part in (node.condition, node.if_true, node.if_false)
                for e in elements(part)]
    return []


def replace_elements(node, replacements):
    """``node`` with its elements replaced, in :func:`elements` order, by ``replacements``
    (an iterator of expressions)."""
    if isinstance(node, Assign):
        target = replace_elements(node.target, replacements)
        return Assign(target, node.op, replace_elements(node.value, replacements))
    if isinstance(node, Element):
        return next(replacements)
    if isinstance(node, Binary):
        left = replace_elements(node.left, replacements)
        return Binary(node.op, left, replace_elements(node.right, replacements))
    if isinstance(node, Neg):
        return Neg(replace_elements(node.operand, replacements))
    if isinstance(node, Select):
        return Select(*(replace_elements(part, replacements)
                        for part in (node.condition, node.if_true, node.if_false)))
    return node


_EVALUATE = {
    Op.ADD: lambda a, b: a + b,
    Op.SUB: lambda a, b: a - b,
    Op.MUL: lambda a, b: a * b,
    Op.DIV: lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
    Op.MOD: lambda a, b: a % b,
    Op.FLOOR_DIV: lambda a, b: a // b,
    Op.MIN: min,
    Op.MAX: max,
    Op.LT: lambda a, b: int(a < b),
    Op.LE: lambda a, b: int(a <= b),
    Op.EQ: lambda a, b: int(a == b),
    Op.GE: lambda a, b: int(a >= b),
    Op.GT: lambda a, b: int(a > b),
    Op.AND: lambda a, b: int(bool(a) and bool(b)),
    Op.OR: lambda a, b: int(bool(a) or bool(b)),
}


def evaluate(expr: Expr, env: Mapping[str, int]) -> int:
    """Value of an integer expression (a launch-geometry formula) for given sizes."""
    if isinstance(expr, Int):
        return expr.value
    if isinstance(expr, Var):
        if expr.name not in env:
            raise TredudaError(f"no value for '{expr.name}' when evaluating a launch formula")
        return env[expr.name]
    if isinstance(expr, Binary):
        return _EVALUATE[expr.op](evaluate(expr.left, env), evaluate(expr.right, env))
    if isinstance(expr, Neg):
        return -evaluate(expr.operand, env)
    if isinstance(expr, Select):
        chosen = expr.if_true if evaluate(expr.condition, env) else expr.if_false
        return evaluate(chosen, env)
    raise TredudaError(f"cannot evaluate {expr!r} on the host")
