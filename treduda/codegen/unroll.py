"""Loops unrolled in the kernel IR: each iteration is the loop's body with the iterator replaced
by its value and the expressions that read it folded, so that register indices become constants.

isl can unroll too (the ``unroll`` AST option), but it builds every iteration from sets and
simplifies its guards against them: for an 8 x 8 register tile that took 1-2.5 s of a kernel's
generation (GEMM 4096³, tccg_33's picks), against 0.2-0.4 s for scanning the same schedule with
the register loops kept as loops. Substituting is linear in the code it makes. The guards isl
put into the loop's bounds (``c <= min(7, E)`` where a tile crosses a tensor's end) become one
guard per iteration (``6 <= E``), decided here where the ranges of the block and thread ids
decide it, so an iteration that no thread can skip has no guard, as isl would print it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from ..errors import TredudaError
from . import ir
from .simplify import simplify, uniform_over_threads, value_range

_TRUE, _FALSE = ir.Int(1), ir.Int(0)
_COMPARISONS = (ir.Op.LT, ir.Op.LE, ir.Op.EQ, ir.Op.GE, ir.Op.GT)


def unroll(kernel: ir.KernelIR, loops: Mapping[str, tuple[int, int]],
           known: Mapping[ir.Expr, tuple[int, int]], divisions: bool = False) -> ir.KernelIR:
    """``kernel`` with the loops over the iterators in ``loops`` unrolled; ``loops`` gives the
    first and last value each iterator can take, ``known`` the ranges of the block and thread
    ids (and any other expression) that decide the guards of the iterations. With
    ``divisions``, each copy's divisions and remainders by constants are simplified with its
    value in them (:func:`~treduda.codegen.simplify.simplify`): the tensor-core kernels'
    write, a division of the block's and thread's values a thread instead of one a copy."""
    unroller = _Unroller(loops, known, _Reads(), divisions)
    return replace(kernel, body=unroller.stmt(kernel.body))


def peel(kernel: ir.KernelIR, known: Mapping[ir.Expr, tuple[int, int]]) -> ir.KernelIR:
    """``kernel`` with the first or last iteration of each step loop (a loop holding barriers,
    between constants) taken out where that decides guards of its body in the others.

    A step that does not divide its summed extent leaves a short last step, and isl guards it
    inside the step loop (``if (7247 - 32 * c7 >= 31) step else short step``, the copies'
    zero-fills of the last step): nvcc keeps the short step's copy, its branches and scalar
    loads in the main loop (tccg_12's 32-step over c = 7248: 59% FFMA, 398 BRA). Peeled, the
    loop runs the full steps without a test, and the short step runs once after it, as
    hand-written kernels do. ``known`` holds the ranges of the block and thread ids."""
    return replace(kernel, body=_peeled(kernel.body, known, _Reads()))


def unroll_uneven(kernel: ir.KernelIR, known: Mapping[ir.Expr, tuple[int, int]]
                  ) -> ir.KernelIR:
    """``kernel`` with each loop that the C compiler is asked to unroll but whose trip count
    differs between threads (bounds of thread ids that ``known`` ranges) unrolled here, each
    iteration that some thread skips under its own guard.

    A tile whose elements no multiple of the threads covers is copied in ``ceil`` rounds by
    some threads and ``floor`` by others (``c <= 5 - (t_y + 2) / 4``): nvcc unrolls such a
    loop by four with a remainder loop, so the main loop of a pipeline that copies the next
    step holds their branches (tccg_38's pick: 7 ``BRA``). Unrolled up to the most rounds any
    thread runs, only the last round is guarded, and nvcc predicates its copy."""
    return replace(kernel, body=_uneven(kernel.body, known, _Reads()))


def copy_guards_over_steps(kernel: ir.KernelIR, known: Mapping[ir.Expr, tuple[int, int]]
                           ) -> ir.KernelIR:
    """``kernel`` with each copy's read condition (:attr:`ir.AsyncCopy.reads`) freed of the
    thread ids where they cannot change it (:func:`~.simplify.uniform_over_threads`; ``known``
    holds their ranges): a copy that holds for all threads of a step or for none.

    A tensor-core pipeline keeps its step loop (it is not peeled), and nvcc unrolls a short
    one whole: a condition on the step alone is then decided in each unrolled step, where one
    on the thread ids as well took a compare per copy (tccg_06's A copies of K = 36 in steps
    of 16)."""
    return replace(kernel, body=_copy_guards(kernel.body, known))


def _copy_guards(s: ir.Stmt, known: Mapping[ir.Expr, tuple[int, int]]) -> ir.Stmt:
    if isinstance(s, ir.AsyncCopy) and s.reads is not None:
        reads = uniform_over_threads(s.reads, known)
        return replace(s, zero=reads == _FALSE,
                       reads=None if reads in (_TRUE, _FALSE) else reads)
    return ir.map_children(s, lambda child: _copy_guards(child, known))


def _uneven(s: ir.Stmt, known: Mapping[ir.Expr, tuple[int, int]], reads: _Reads) -> ir.Stmt:
    if isinstance(s, ir.For) and (span := _span(s, known)) is not None:
        known = {**known, ir.Var(s.iterator): span}  # what its body's bounds may read
    s = ir.map_children(s, lambda child: _uneven(child, known, reads))
    if (isinstance(s, ir.For) and s.unroll is ir.Unroll.FULL
            and (_reads_thread(s.start) or _reads_thread(s.condition))
            and (span := _span(s, known)) is not None):
        return _Unroller({s.iterator: span}, known, reads).unrolled(s)
    return s


def _reads_thread(e: ir.Expr) -> bool:
    return (isinstance(e, ir.Index) and e.builtin is ir.Builtin.THREAD_ID
            or any(_reads_thread(c) for c in ir.children(e)))


def _span(loop: ir.For, known: Mapping[ir.Expr, tuple[int, int]]) -> tuple[int, int] | None:
    """The first value of ``loop``'s iterator in any thread and the last, where the known
    ranges bound them (the last from a term ``c <= e`` or ``c < e`` of its condition, the
    others being guards of the iterations); None where they do not."""
    if not isinstance(loop.step, ir.Int) or (start := value_range(loop.start, known)) is None:
        return None
    terms, lasts = [loop.condition], []
    while terms:
        c = terms.pop()
        if isinstance(c, ir.Binary) and c.op is ir.Op.AND:
            terms += [c.left, c.right]
        elif (isinstance(c, ir.Binary) and c.op in (ir.Op.LE, ir.Op.LT)
              and c.left == ir.Var(loop.iterator)
              and (end := value_range(c.right, known)) is not None):
            lasts.append(end[1] - (c.op is ir.Op.LT))
    return (start[0], min(lasts)) if lasts else None


# Iterations peeled off each end of a step loop at most: a pipeline that copies a step ahead
# guards the copy of the short step in the step before it, and the short step itself.
PEELED = 2


def _peeled(s: ir.Stmt, known: Mapping[ir.Expr, tuple[int, int]], reads: _Reads) -> ir.Stmt:
    s = ir.map_children(s, lambda child: _peeled(child, known, reads))
    if isinstance(s, ir.For) and ir.has_barrier(s.body):
        return _peel_loop(s, known, PEELED, reads) or s
    return s


def _peel_loop(loop: ir.For, known: Mapping[ir.Expr, tuple[int, int]], rounds: int,
               reads: _Reads) -> ir.Stmt | None:
    """``loop`` with up to ``rounds`` iterations peeled off each end, each where that decides
    a guard in the iterations left; None where none does."""
    bounds = constant_bounds(loop)
    if bounds is None or bounds[0] == bounds[1] or not rounds:
        return None
    first, last = bounds
    name = loop.iterator

    def over(low: int, high: int) -> ir.Stmt:  # the body where the iterator lies in [low, high]
        ranges = {**known, ir.Var(name): (low, high)}
        return _Unroller({}, ranges, reads).substituted_stmt(loop.body, name, ir.Var(name))

    whole = over(first, last)
    low = first + (over(first + 1, last) != whole)
    high = last - (over(first, last - 1) != whole)
    if (low, high) == (first, last):
        return None
    once = _Unroller({}, known, reads)
    parts = [once.substituted_stmt(loop.body, name, ir.Int(first))] if low > first else []
    if low <= high:
        middle = replace(loop, start=ir.Int(low),
                         condition=ir.Binary(ir.Op.LE, ir.Var(name), ir.Int(high)))
        parts.append(_peel_loop(middle, known, rounds - 1, reads)
                     or replace(middle, body=over(low, high)))
    if high < last:
        parts.append(once.substituted_stmt(loop.body, name, ir.Int(last)))
    return _flat(tuple(parts))


def constant_bounds(loop: ir.For) -> tuple[int, int] | None:
    """The first and last value of ``loop``'s iterator where they are numbers and it counts
    up by one, else None."""
    c = loop.condition
    if not (isinstance(loop.start, ir.Int) and loop.step == ir.Int(1)
            and isinstance(c, ir.Binary) and c.op in (ir.Op.LE, ir.Op.LT)
            and c.left == ir.Var(loop.iterator) and isinstance(c.right, ir.Int)):
        return None
    return loop.start.value, c.right.value - (c.op is ir.Op.LT)


class _Reads:
    """The variables each expression reads, found once per expression object of one pass.

    Substituting an iterator walked every expression of a loop's body, though most read
    other iterators only: peeling substitutes a step loop's body three times a round and
    unrolling once per iteration, and the walks took a third of a kernel's generation
    (tccg_12's unrolled 8 x 8 tile). Knowing what a subtree reads, :meth:`_Unroller.substituted`
    returns one that does not read the name at once. Expressions are kept by identity (the
    dict holds each one, so no id is reused while it lives); a pass makes its own, so nothing
    is shared between threads."""

    def __init__(self) -> None:
        self._found: dict[int, tuple[ir.Expr, frozenset[str]]] = {}

    def __call__(self, e: ir.Expr) -> frozenset[str]:
        found = self._found.get(id(e))
        if found is not None:
            return found[1]
        if isinstance(e, ir.Var):
            names = frozenset((e.name,))
        elif isinstance(e, ir.Load):
            names = self(e.offset)
        else:
            parts = e.indices if isinstance(e, ir.Element) else ir.children(e)
            names = frozenset().union(*map(self, parts))
        self._found[id(e)] = (e, names)
        return names


class _Unroller:
    def __init__(self, loops: Mapping[str, tuple[int, int]],
                 known: Mapping[ir.Expr, tuple[int, int]], reads: _Reads,
                 divisions: bool = False):
        self.loops = loops
        self.known = dict(known)
        self.reads = reads
        self.divisions = divisions  # simplify a copy's divisions (see unroll)

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.For) and s.iterator in self.loops:
            return self.unrolled(s)
        if not any(isinstance(c, ir.For) and c.iterator in self.loops for c in ir.nested(s)):
            return s
        s = ir.map_children(s, self.stmt)
        return _flat(s.body) if isinstance(s, ir.Block) else s

    def unrolled(self, loop: ir.For) -> ir.Stmt:
        """One copy of the body per value of the iterator, each under the guard (its bounds
        at that value, and for a step ``k > 1`` that ``k`` divides its distance from the
        start) where the guard may fail."""
        first, last = self.loops[loop.iterator]
        if not isinstance(loop.step, ir.Int):
            raise TredudaError(f"isl produced a loop whose step is no number: {loop.step}")
        copies: list[ir.Stmt] = []
        name = loop.iterator
        for value in range(first, last + 1):
            guard = self.fold(ir.Binary(ir.Op.LE, loop.start, ir.Int(value)))
            if loop.step.value > 1:
                distance = self.fold(ir.Binary(ir.Op.SUB, ir.Int(value), loop.start))
                remainder = self.fold(ir.Binary(ir.Op.MOD, distance, loop.step))
                guard = self.fold(ir.Binary(ir.Op.AND, guard, self.fold(
                    ir.Binary(ir.Op.EQ, remainder, ir.Int(0)))))
            guard = self.fold(ir.Binary(ir.Op.AND, guard,
                                        self.substituted(loop.condition, name, ir.Int(value))))
            if guard == _FALSE:
                continue
            body = self.stmt(self.substituted_stmt(loop.body, name, ir.Int(value)))
            copies.append(body if guard == _TRUE else ir.If(guard, body))
        return _flat(tuple(copies))

    def substituted_stmt(self, s: ir.Stmt, name: str, value: ir.Expr) -> ir.Stmt:
        """``s`` with ``name`` replaced by ``value``; a guard that becomes constant is
        decided (:meth:`substituted`)."""
        def e(x: ir.Expr) -> ir.Expr:
            return self.substituted(x, name, value)

        if isinstance(s, ir.Assign):
            return ir.Assign(e(s.target), s.op, e(s.value), s.atomic)
        if isinstance(s, ir.If):
            condition = e(s.condition)
            then = self.substituted_stmt(s.then, name, value)
            otherwise = None if s.otherwise is None else self.substituted_stmt(s.otherwise, name,
                                                                               value)
            if condition == _TRUE:
                return then
            if condition == _FALSE:
                return otherwise if otherwise is not None else ir.Block(())
            return ir.If(condition, then, otherwise)
        if isinstance(s, ir.For):
            return ir.For(s.iterator, e(s.start), e(s.condition), e(s.step),
                          self.substituted_stmt(s.body, name, value), s.unroll)
        if isinstance(s, ir.Block):
            return _flat(tuple(self.substituted_stmt(c, name, value) for c in s.body))
        if isinstance(s, ir.VectorLoad):
            return ir.VectorLoad(s.vector, e(s.first), s.width)
        if isinstance(s, ir.VectorStore):
            return ir.VectorStore(e(s.first), tuple(e(v) for v in s.values))
        if isinstance(s, ir.AsyncCopy) and s.reads is not None:  # and the condition it reads on
            reads = e(s.reads)
            return replace(ir.map_operands(s, e), zero=reads == _FALSE,
                           reads=None if reads in (_TRUE, _FALSE) else reads)
        if isinstance(s, ir.OPERAND_STATEMENTS):  # its fragment, tile and tensor operands
            return ir.map_operands(ir.map_indices(s, e), e)
        return s  # a barrier, a commit or a wait of asynchronous copies

    def substituted(self, e: ir.Expr, name: str, value: ir.Expr) -> ir.Expr:
        """``e`` with ``name`` replaced by ``value``, folded where it changed (an expression
        that does not read ``name`` is returned as it is). A new ``ir.Var(name)`` as ``value``
        keeps the variable and folds what reads it against its range in the known ones."""
        if name not in self.reads(e):
            return e
        if isinstance(e, ir.Var):
            return value
        parts = ir.children(e)
        if isinstance(e, ir.Load):
            offset = self.substituted(e.offset, name, value)
            return e if offset is e.offset else ir.Load(e.array, offset)
        if isinstance(e, ir.Element):
            indices = tuple(self.substituted(i, name, value) for i in e.indices)
            return ir.Element(e.array, indices)
        if not parts:
            return e
        new = tuple(self.substituted(p, name, value) for p in parts)
        if all(n is p for n, p in zip(new, parts, strict=True)):
            return e
        if isinstance(e, ir.Binary):
            if (self.divisions and e.op in (ir.Op.DIV, ir.Op.MOD)
                    and isinstance(new[1], ir.Int)):
                # with the iteration's value in it, the known ranges may decide a division:
                # tccg_33's write unrolled, (64 bm + 5) / 480 is bm / 7.5 rounded down,
                # (2 bm) / 15 for each copy up to 31, a division a thread, not a copy
                return simplify(ir.Binary(e.op, *new), self.known)
            return self.fold(ir.Binary(e.op, *new))
        if isinstance(e, ir.Neg):
            return ir.Int(-new[0].value) if isinstance(new[0], ir.Int) else ir.Neg(new[0])
        if isinstance(e, ir.Select):
            return new[1] if new[0] == _TRUE else new[2] if new[0] == _FALSE else ir.Select(*new)
        return ir.Call(e.function, new)

    def fold(self, e: ir.Binary) -> ir.Expr:
        """``e`` simplified one level, its operands being folded already: constants
        computed, ``x + 0`` and ``x * 1`` dropped, a comparison with ``min``/``max`` split
        into two, a comparison that the known ranges decide replaced by its value."""
        op, left, right = e.op, e.left, e.right
        if isinstance(left, ir.Int) and isinstance(right, ir.Int):
            return ir.Int(int(ir.apply(op, left.value, right.value)))
        if op is ir.Op.AND:
            return (right if left == _TRUE else left if right == _TRUE
                    else _FALSE if _FALSE in (left, right) else e)
        if op is ir.Op.OR:
            return (right if left == _FALSE else left if right == _FALSE
                    else _TRUE if _TRUE in (left, right) else e)
        if op in (ir.Op.ADD, ir.Op.SUB) and right == ir.Int(0):
            return left
        if op is ir.Op.ADD and left == ir.Int(0):
            return right
        if op is ir.Op.MUL and ir.Int(1) in (left, right):
            return right if left == ir.Int(1) else left
        if op in _COMPARISONS:
            return self.compared(e)
        return e

    def compared(self, e: ir.Binary) -> ir.Expr:
        """A comparison of integers, ``min`` and ``max`` split off, as :meth:`bounded` says."""
        op, left, right = e.op, e.left, e.right
        if op in (ir.Op.GE, ir.Op.GT):  # as <= and <, the smaller side first
            op, left, right = (ir.Op.LE if op is ir.Op.GE else ir.Op.LT), right, left
        # x <= min(a, b) is x <= a and x <= b; max(a, b) <= x is a <= x and b <= x
        for side, bound in ((right, ir.Op.MIN), (left, ir.Op.MAX)):
            if op is not ir.Op.EQ and isinstance(side, ir.Binary) and side.op is bound:
                pair = [ir.Binary(op, left, part) if side is right else ir.Binary(op, part, right)
                        for part in (side.left, side.right)]
                return self.fold(ir.Binary(ir.Op.AND, self.fold(pair[0]), self.fold(pair[1])))
        if op is ir.Op.EQ:
            a, b = value_range(left, self.known), value_range(right, self.known)
            if a is None or b is None:
                return e
            return (_TRUE if a[0] == a[1] == b[0] == b[1]
                    else _FALSE if a[1] < b[0] or b[1] < a[0] else e)
        terms, constant = ir.affine(ir.Binary(ir.Op.SUB, right, left))
        return self.bounded(terms, constant - 1 if op is ir.Op.LT else constant)

    def bounded(self, terms: dict[ir.Expr, int], constant: int) -> ir.Expr:
        """``sum(terms) + constant >= 0`` in isl's normal form, or its value where the known
        ranges decide it: a term ``floor(b / m)`` with coefficient -1 or 1 multiplied out (the
        iteration's value is an integer, so ``v <= floor(b / m)`` is ``m * v <= b``), the
        coefficients divided by their greatest common divisor and the constant rounded down
        (``8 * t <= 13`` is ``t <= 1``): so the guards of iterations that the same threads
        run are equal, and those of a loop ``c <= min(7, floor((375 - 128 * b - t) / 16))``
        are ``128 * b + t <= 375 - 16 * c`` as isl would guard each iteration."""
        divisions = [t for t, c in terms.items() if abs(c) == 1 and _division(t)]
        if len(divisions) == 1:
            (t,) = divisions
            # floor(b / m) <= r is b <= m * r + m - 1; floor(b / m) >= -r is b + m * r >= 0
            sign, m = terms.pop(t), t.right.value
            scaled = {u: c * m for u, c in terms.items()}
            inner, inner_constant = ir.affine(t.left)
            for u, c in inner.items():
                scaled[u] = scaled.get(u, 0) + sign * c
            terms = {u: c for u, c in scaled.items() if c}
            constant = constant * m + sign * inner_constant + (m - 1 if sign < 0 else 0)
        if not terms:
            return _TRUE if constant >= 0 else _FALSE
        divisor = math.gcd(*terms.values())
        terms, constant = {t: c // divisor for t, c in terms.items()}, constant // divisor
        ranges = {t: value_range(ir.Binary(ir.Op.MUL, ir.Int(c), t), self.known)
                  for t, c in terms.items()}
        if None not in ranges.values():
            low = sum(r[0] for r in ranges.values()) + constant
            high = sum(r[1] for r in ranges.values()) + constant
            if low >= 0:
                return _TRUE
            if high < 0:
                return _FALSE
            if len(terms) == 1 and high == 0:  # holds only where the term is at its extreme
                ((t, c),) = terms.items()
                return ir.Binary(ir.Op.EQ, t, ir.Int(-constant // c))
            for t, c in terms.items():
                # c * t + rest >= 0 is t <= floor(rest / -c) (c < 0) or t >= -floor(rest / c)
                # (c > 0): one bound on t alone where every value of the rest gives the same
                rest = (low - ranges[t][0], high - ranges[t][1])
                if len(terms) > 1 and rest[0] // abs(c) == rest[1] // abs(c):
                    return self.bounded({t: 1 if c > 0 else -1}, rest[0] // abs(c))
        smaller = _sum([(t, -c) for t, c in terms.items() if c < 0])
        larger = _sum([(t, c) for t, c in terms.items() if c > 0])
        if smaller is None:
            return ir.Binary(ir.Op.GE, larger, ir.Int(-constant))
        if larger is None:
            return ir.Binary(ir.Op.LE, smaller, ir.Int(constant))
        return ir.Binary(ir.Op.LE, smaller, ir.Binary(ir.Op.ADD, larger, ir.Int(constant))
                         if constant else larger)

def _division(e: ir.Expr) -> bool:
    """Whether ``e`` is ``floor(b / m)`` for a positive constant ``m``: isl's ``fdiv_q``, or
    a C division, which isl uses only where ``b`` is not negative."""
    return (isinstance(e, ir.Binary) and e.op in (ir.Op.DIV, ir.Op.FLOOR_DIV)
            and isinstance(e.right, ir.Int) and e.right.value > 0)


def _sum(terms: list[tuple[ir.Expr, int]]) -> ir.Expr | None:
    """``c0 * t0 + c1 * t1 + ..`` for positive coefficients (None for no term)."""
    result = None
    for term, c in terms:
        product = term if c == 1 else ir.Binary(ir.Op.MUL, ir.Int(c), term)
        result = product if result is None else ir.Binary(ir.Op.ADD, result, product)
    return result


def _flat(body: tuple[ir.Stmt, ...]) -> ir.Block:
    """A block of ``body`` with the blocks in it spliced in and consecutive ``if``s on the
    same guard made one, so that the assignments of consecutive iterations form one straight
    run (:mod:`treduda.codegen.vectorize` merges within runs)."""
    merged: list[ir.Stmt] = []
    for s in (c for b in body for c in (b.body if isinstance(b, ir.Block) else (b,))):
        last = merged[-1] if merged else None
        if (isinstance(s, ir.If) and isinstance(last, ir.If) and s.otherwise is None
                and last.otherwise is None and s.condition == last.condition):
            merged[-1] = ir.If(s.condition, _flat((last.then, s.then)))
        else:
            merged.append(s)
    return ir.Block(tuple(merged))
