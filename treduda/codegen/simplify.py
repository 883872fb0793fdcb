"""Index arithmetic: built without needless terms, and simplified with its variables' ranges.

A strategy that writes an access's index expressions itself (``Statement.formulas``) writes
them plainly: the tile element ``e = T c + t`` a thread copies, its row ``e / 64``, the tensor
index ``((64 bm + e mod 64) / 384) mod 12`` of a group of indices. Given each variable's range
(all non-negative), :func:`simplify` rewrites divisions and remainders by constants into what
isl's AST generator writes when it knows the loops (``2 c + t / 64``, ``bm / 6``), which saves
the kernel integer instructions in its main loop. For a sum ``S = d q + k x + r`` (``q`` the
terms whose coefficients ``d`` divides, ``d = k m``, ``0 <= r < k``, a constant's multiple
of ``k`` taken into ``x``):

* ``S / d = q + (k x + r) / d`` and ``S mod d = (k x + r) mod d`` (``k x + r >= 0``);
* ``(k x + r) / d = x / m`` and ``(k x + r) mod d = k (x mod m) + r``;
* ``S / d = 0`` and ``S mod d = S`` where ``0 <= S < d``;
* ``(x / a) / b = x / (a b)`` and ``(x mod a b) mod b = x mod b``.

:func:`plus`, :func:`times`, :func:`quotient` and :func:`remainder` build such expressions,
leaving out what adds nothing (``+ 0``, ``1 *``, ``/ 1``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from . import ir

Range = tuple[int, int]  # the smallest and the largest value


def simplify(e: ir.Expr, known: Mapping[ir.Expr, Range]) -> ir.Expr:
    """``e`` (integer arithmetic on non-negative values, C's ``/`` and ``%``) with its
    divisions and remainders by constants simplified, the expressions ``known`` (variables)
    taking only values in their range."""
    if isinstance(e, ir.Binary):
        left, right = simplify(e.left, known), simplify(e.right, known)
        if e.op in (ir.Op.DIV, ir.Op.MOD) and isinstance(right, ir.Int) and right.value > 0:
            return _divided(left, right.value, e.op, known)
        return ir.Binary(e.op, left, right)
    if isinstance(e, ir.Neg):
        return ir.Neg(simplify(e.operand, known))
    return e


def value_range(e: ir.Expr, known: Mapping[ir.Expr, Range]) -> Range | None:
    """The smallest and largest value of integer expression ``e``, from the ranges of the
    expressions ``known`` (None where it depends on something unknown)."""
    if isinstance(e, ir.Int):
        return e.value, e.value
    if e in known:
        return known[e]
    if isinstance(e, ir.Neg):
        inner = value_range(e.operand, known)
        return None if inner is None else (-inner[1], -inner[0])
    if not isinstance(e, ir.Binary):
        return None
    a, b = value_range(e.left, known), value_range(e.right, known)
    if a is None or b is None:
        return None
    if e.op is ir.Op.ADD:
        return a[0] + b[0], a[1] + b[1]
    if e.op is ir.Op.SUB:
        return a[0] - b[1], a[1] - b[0]
    if e.op in (ir.Op.MUL, ir.Op.MIN, ir.Op.MAX):
        values = [ir.apply(e.op, x, y) for x in a for y in b]
        return int(min(values)), int(max(values))
    if b[0] != b[1] or b[0] <= 0:
        return None  # division and remainder by a positive constant only
    m = b[0]
    if e.op is ir.Op.FLOOR_DIV or (e.op is ir.Op.DIV and a[0] >= 0):
        return a[0] // m, a[1] // m
    if e.op is ir.Op.MOD and a[0] >= 0:
        same = a[0] // m == a[1] // m
        return (a[0] % m, a[1] % m) if same else (0, m - 1)
    return None


# A comparison ``left op right`` as ``sign (left - right) + strict <= 0``.
_AS_AT_MOST = {ir.Op.LE: (1, 0), ir.Op.LT: (1, 1), ir.Op.GE: (-1, 0), ir.Op.GT: (-1, 1)}


def uniform_over_threads(condition: ir.Expr, known: Mapping[ir.Expr, Range]) -> ir.Expr:
    """``condition`` with each comparison whose outcome no thread id can change rewritten
    without them (``1`` or ``0`` where nothing else decides it), the thread ids' ranges
    being in ``known``; the others as they are.

    A comparison ``R + u <= 0`` splits into ``u``, the terms that read thread ids (range
    ``[lo, hi]``), and ``R``, the others: a constant plus multiples of ``g``, the gcd of their
    coefficients. Where no value of ``R`` lies in ``(-hi, -lo]``, every value either holds
    for all ``u`` or for none, so the comparison is ``R + hi <= 0``. A copy of a step's row
    ``16 s + t / 16 + 4 j < 36`` (K = 36 in steps of 16, 64 threads) holds for every thread
    or none at each step ``s``: without the thread ids nvcc decides it in each step it
    unrolls, where the thread's test took an ISETP and a predicate per copy (tccg_06). Not
    where ``R`` reads a block id: that test is made at run time either way, and the thread's
    shared its arithmetic with the copy's address (tccg_14's B copies rewritten: 22 more
    instructions in its main loop)."""
    if isinstance(condition, ir.Binary) and condition.op in (ir.Op.AND, ir.Op.OR):
        decisive = ir.Int(int(condition.op is ir.Op.OR))  # what decides it alone
        sides = [uniform_over_threads(side, known) for side in (condition.left, condition.right)]
        if decisive in sides:
            return decisive
        left, right = sides
        neutral = ir.Int(1 - decisive.value)
        return right if left == neutral else left if right == neutral else ir.Binary(
            condition.op, left, right)
    if not (isinstance(condition, ir.Binary) and condition.op in _AS_AT_MOST
            and ir.reads_thread_id(condition)):
        return condition
    sign, strict = _AS_AT_MOST[condition.op]
    terms, constant = ir.affine(ir.Binary(ir.Op.SUB, condition.left, condition.right))
    constant = sign * constant + strict
    thread = {t: sign * c for t, c in terms.items() if ir.reads_thread_id(t)}
    rest = {t: sign * c for t, c in terms.items() if not ir.reads_thread_id(t)}
    span = value_range(_sum(thread, 0), known)
    if span is None or any(_reads_block_id(t) for t in rest):
        return condition
    lo, hi = span
    step = math.gcd(*rest.values()) if rest else 0
    if not step:  # R is the constant
        return condition if -hi < constant <= -lo else ir.Int(int(constant + hi <= 0))
    first = -hi + 1 + (constant + hi - 1) % step  # the least value of R above -hi
    if first <= -lo:
        return condition
    bound = (-constant - hi) // step  # R + hi <= 0, R = constant + step * (rest / step)
    return ir.Binary(ir.Op.LE, _sum({t: c // step for t, c in rest.items()}, 0), ir.Int(bound))


def _reads_block_id(e: ir.Expr) -> bool:
    return (isinstance(e, ir.Index) and e.builtin is ir.Builtin.BLOCK_ID
            or any(_reads_block_id(c) for c in ir.children(e)))


def _divided(value: ir.Expr, d: int, op: ir.Op, known: Mapping[ir.Expr, Range]) -> ir.Expr:
    """``value / d`` or ``value % d``, simplified by the rules of the module's doc."""
    if d == 1:
        return value if op is ir.Op.DIV else ir.Int(0)
    if isinstance(value, ir.Binary) and isinstance(value.right, ir.Int) and _non_negative(
            value.left, known):
        inner = value.right.value
        if op is ir.Op.DIV and value.op is ir.Op.DIV:
            return _divided(value.left, inner * d, op, known)
        if op is ir.Op.MOD and value.op is ir.Op.MOD and inner % d == 0:
            return _divided(value.left, d, op, known)
    terms, constant = ir.affine(value)
    multiples = {t: c // d for t, c in terms.items() if c % d == 0}
    rest = {t: c for t, c in terms.items() if c % d != 0}
    quotient, constant = divmod(constant, d)
    rest_sum = _sum(rest, constant)
    if not _non_negative(rest_sum, known):
        return ir.Binary(op, value, ir.Int(d))
    head = _sum(multiples, quotient) if op is ir.Op.DIV else ir.Int(0)
    span = value_range(rest_sum, known)
    if span is not None and span[1] < d:  # the rest is its own remainder
        return head if op is ir.Op.DIV else rest_sum
    for k in sorted({math.gcd(c, d) for c in rest.values()}, reverse=True):
        if k == 1:
            break
        # the constant's multiple of k goes with the large part: (64 b + 33) / 480 is
        # (2 b + 1) / 15, as (64 b + 1) / 480 is (2 b) / 15
        small = _sum({t: c for t, c in rest.items() if c % k != 0}, constant % k)
        span = value_range(small, known)
        if span is None or span[0] < 0 or span[1] >= k:
            continue
        large = _sum({t: c // k for t, c in rest.items() if c % k == 0}, constant // k)
        if op is ir.Op.DIV:
            return plus(head, _divided(large, d // k, op, known))
        return plus(times(k, _divided(large, d // k, op, known)), small)
    return plus(head, ir.Binary(op, rest_sum, ir.Int(d)))


def _non_negative(e: ir.Expr, known: Mapping[ir.Expr, Range]) -> bool:
    span = value_range(e, known)
    return span is not None and span[0] >= 0


def _sum(terms: Mapping[ir.Expr, int], constant: int) -> ir.Expr:
    """``sum(coefficient * term) + constant``."""
    return plus(*(times(c, t) for t, c in terms.items()), ir.Int(constant))


def plus(*terms: ir.Expr) -> ir.Expr:
    """The sum of ``terms`` (0 for none), zeros left out, a negative constant subtracted."""
    result: ir.Expr = ir.Int(0)
    for term in terms:
        if term == ir.Int(0):
            continue
        if result == ir.Int(0):
            result = term
        elif isinstance(term, ir.Int) and term.value < 0:
            result = ir.Binary(ir.Op.SUB, result, ir.Int(-term.value))
        else:
            result = ir.Binary(ir.Op.ADD, result, term)
    return result


def times(k: int, e: ir.Expr) -> ir.Expr:
    """``k * e``."""
    if k == 0 or e == ir.Int(0):
        return ir.Int(0)
    if isinstance(e, ir.Int):
        return ir.Int(k * e.value)
    return e if k == 1 else ir.Binary(ir.Op.MUL, ir.Int(k), e)


def quotient(e: ir.Expr, divisor: int) -> ir.Expr:
    """``floor(e / divisor)`` of a non-negative ``e``."""
    return e if divisor == 1 else ir.Binary(ir.Op.DIV, e, ir.Int(divisor))


def remainder(e: ir.Expr, modulus: int) -> ir.Expr:
    """``e mod modulus`` of a non-negative ``e``."""
    return ir.Int(0) if modulus == 1 else ir.Binary(ir.Op.MOD, e, ir.Int(modulus))
