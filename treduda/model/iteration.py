"""The integer instructions one iteration of a loop issues for its index expressions: the
parts that change with the loop's variable. What does not change nvcc computes once, before
the loop; what does, it computes in every iteration (a division by a constant that is no
power of two as a multiply-high sequence), each distinct subexpression once.

Read from the SASS of the tensor-core write loops (sm_80 and sm_90a, nvcc 13): a signed
division by a constant is ``IMAD.HI``, ``SHF.R.U32.HI`` and ``LEA.HI.SX32`` (3), its remainder
one ``IMAD`` more; by a power of two a shift or a mask (1); each sum of terms an ``IADD3``,
``IMAD`` or ``LEA``, which takes a multiple of a constant with it (1 per term added); a guard
that the loop's bounds cannot take (the variable under a division) a compare, a branch and
the reconvergence around it (``ISETP``, ``BRA``, ``BSSY``, ``BSYNC``). Where a power of two
divides an unrolled variable, nvcc folds it into constants: counted as a shift all the same.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..codegen import ir

DIVISION = 3  # IMAD.HI, SHF.R.U32.HI, LEA.HI.SX32
REMAINDER = 1  # beside its division: IMAD of the quotient times the divisor, subtracted
SHIFT = 1  # a division or remainder by a power of two: SHF or LOP3
TERM = 1  # each term a sum adds: IADD3, IMAD, LEA
GUARD = 4  # ISETP, BRA, BSSY, BSYNC
TEST = 2  # a guard of an unrolled store: ISETP, and the predicate combined (PLOP3)


def varies(e: ir.Expr, variable: ir.Var) -> bool:
    """Whether ``e`` depends on ``variable``."""
    if e == variable:
        return True
    if isinstance(e, ir.Binary):
        return varies(e.left, variable) or varies(e.right, variable)
    if isinstance(e, ir.Neg):
        return varies(e.operand, variable)
    return False


def _divided(e: ir.Expr) -> int | None:
    """The constant ``e`` divides by or takes the remainder of (None: neither)."""
    if isinstance(e, ir.Binary) and e.op in (ir.Op.DIV, ir.Op.MOD) \
            and isinstance(e.right, ir.Int):
        return e.right.value
    return None


def _changing(e: ir.Expr, variable: ir.Var, found: set[ir.Expr]) -> None:
    """Collect into ``found`` the distinct subexpressions of ``e`` that change with
    ``variable`` and cost an instruction (sums, divisions, remainders)."""
    if not isinstance(e, ir.Binary) or not varies(e, variable):
        return
    _changing(e.left, variable, found)
    _changing(e.right, variable, found)
    if e.op is not ir.Op.MUL:  # a multiple of a constant goes with the sum that takes it
        found.add(e)


def _cost(e: ir.Binary, found: set[ir.Expr]) -> int:
    d = _divided(e)
    if d is None:
        return TERM
    if d & (d - 1) == 0:
        return SHIFT
    if e.op is ir.Op.DIV:
        return DIVISION
    # a remainder beside its own quotient takes one instruction more, alone both
    return REMAINDER + (0 if ir.Binary(ir.Op.DIV, e.left, e.right) in found else DIVISION)


def iteration_instructions(expressions: Iterable[ir.Expr], variable: ir.Var) -> int:
    """Integer instructions an iteration of a loop over ``variable`` issues to compute
    ``expressions`` (the accesses' indices of its statement, simplified), beyond what is
    computed once before it (see the module's doc)."""
    found: set[ir.Expr] = set()
    for e in expressions:
        _changing(e, variable, found)
    return sum(_cost(e, found) for e in found)  # type: ignore[arg-type]


def divisions(expressions: Iterable[ir.Expr]) -> int:
    """Integer instructions of a body unrolled whole for ``expressions``, its copies'
    indices with their loops' values in them: each distinct division or remainder by a
    constant once (with the sum it divides), where the rest folds into constants."""
    found: set[ir.Expr] = set()
    for e in expressions:
        _divisions(e, found)
    return sum(_cost(e, found) + TERM for e in found)


def _divisions(e: ir.Expr, found: set[ir.Expr]) -> None:
    if isinstance(e, ir.Binary):
        _divisions(e.left, found)
        _divisions(e.right, found)
        if _divided(e) is not None:
            found.add(e)


def divided(e: ir.Expr, variables: Iterable[ir.Var]) -> list[ir.Expr]:
    """The outermost divisions and remainders by constants in ``e`` that read any of
    ``variables``: what an unrolled copy of ``e`` may still compute."""
    variables = tuple(variables)
    if not isinstance(e, ir.Binary) or not any(varies(e, v) for v in variables):
        return []
    if _divided(e) is not None:
        return [e]
    return divided(e.left, variables) + divided(e.right, variables)


def guarded(condition: ir.Expr, variable: ir.Var) -> bool:
    """Whether ``condition`` (an index expression below a limit) needs a test in each
    iteration of a loop over ``variable``: where the variable appears under a division or
    remainder, no loop bound takes it (isl's scan bounds an affine one by the loop's)."""
    terms, _ = ir.affine(condition)
    return any(t != variable and varies(t, variable) for t in terms)


def arithmetic(e: ir.Expr) -> int:
    """Operations of a statement's value ``e`` beside its accesses (alpha's multiply, beta's
    multiply-add): one instruction each."""
    if isinstance(e, ir.Binary):
        return 1 + arithmetic(e.left) + arithmetic(e.right)
    if isinstance(e, ir.Neg):
        return 1 + arithmetic(e.operand)
    return 0
