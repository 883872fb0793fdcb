"""Threads whose whole register tile lies past a tensor's end compute a working thread's
values instead of branching around their FMAs ("clamped idle threads").

Where a thread tile is wider than an index (tccg_04: b = 24 on 4 threads x 8 registers), isl
guards every statement of the idle threads with a test of the thread id alone
(``threadIdx.x <= 2``), in every block: the full-block scan (:mod:`..polyhedral.ast_build`)
and loop unswitching (:mod:`.unswitch`) cannot take it out of a step loop that holds barriers,
since every thread must reach them. nvcc turns the test into a branch around the unrolled
FMAs (BSSY, BRA, BSYNC) and recomputes the shared tiles' addresses after it: 18 of the 330
instructions of tccg_04's main loop (77.6% FFMA, 82.1% without them; CUDA 13, sm_90).

Such a guard is dropped where all that its body does is compute registers from registers
and shared memory, and those registers are read or written elsewhere only under the same
guard (the stores of the output keep it): the idle threads then run the body with their thread
id clamped into the guard's range (``min(threadIdx.x, 2)``), reading what a working thread
reads (inside every tile, no new global load) into registers nobody stores; the guards of
the same registers' zeroing and of the step after the loop go too. The clamp is
loop-invariant (nvcc computes it once); the printer writes it with the dialects' integer
``min``, through which nvcc still sees the alignment of the loads it offsets.
"""

from __future__ import annotations

from dataclasses import replace

from . import ir

# Thread-id bounds a clamp keeps: ``tid <= k``, ``tid < k``, ``tid >= k``, ``tid > k``.
_BOUNDS = (ir.Op.LE, ir.Op.LT, ir.Op.GE, ir.Op.GT)


def clamp_idle(kernel: ir.KernelIR) -> ir.KernelIR:
    """``kernel`` with the thread-id guards of register-only bodies inside loops with
    barriers replaced by a clamp of the thread ids, where nothing else observes the
    registers they guard (module docstring)."""
    registers = {local.name for local in kernel.locals if local.space is ir.Space.REGISTER}
    readable = registers | {local.name for local in kernel.locals
                            if local.space is ir.Space.SHARED}
    conditions = list(dict.fromkeys(
        s.condition for loop in ir.nested(kernel.body)
        if isinstance(loop, ir.For) and ir.has_barrier(loop.body)
        for s in ir.nested(loop.body) if _clampable(s, registers, readable)))
    for condition in conditions:
        if _private(kernel.body, condition, registers, readable):
            kernel = replace(kernel, body=_clamped(kernel.body, condition, registers, readable))
    return kernel


def _clampable(s: ir.Stmt, registers: set[str], readable: set[str]) -> bool:
    """Whether ``s`` is an ``if`` on thread-id bounds alone whose body only assigns
    registers from registers, shared tiles and constants."""
    return (isinstance(s, ir.If) and s.otherwise is None and _bounds(s.condition) is not None
            and _register_only(s.then, registers, readable))


def _bounds(condition: ir.Expr) -> list[tuple[ir.Index, ir.Op, int]] | None:
    """The ``(thread id, comparison, constant)`` conjuncts of ``condition``, or None where it
    tests anything else."""
    if isinstance(condition, ir.Binary) and condition.op is ir.Op.AND:
        left, right = _bounds(condition.left), _bounds(condition.right)
        return None if left is None or right is None else left + right
    if (isinstance(condition, ir.Binary) and condition.op in _BOUNDS
            and isinstance(condition.left, ir.Index)
            and condition.left.builtin is ir.Builtin.THREAD_ID
            and isinstance(condition.right, ir.Int)):
        return [(condition.left, condition.op, condition.right.value)]
    return None


def _register_only(s: ir.Stmt, registers: set[str], readable: set[str]) -> bool:
    """Whether ``s`` holds only loops, tests and non-atomic assignments to registers that
    read only ``readable`` arrays (no barrier, no global load or store: nothing whose
    repetition by an idle thread anyone sees, nothing a clamped thread could wait for)."""
    for child in ir.nested(s):
        if isinstance(child, ir.Assign):
            if (child.atomic or not isinstance(child.target, ir.Load)
                    or child.target.array not in registers
                    or not _arrays(child.value) <= readable):
                return False
        elif not isinstance(child, (ir.Block, ir.For, ir.If)):
            return False
    return True


def _arrays(e: ir.Expr) -> set[str]:
    """Every array ``e`` reads (flat or by element), its offsets' and indices' included."""
    found = set()
    if isinstance(e, ir.Load):
        found = {e.array} | _arrays(e.offset)
    elif isinstance(e, ir.Element):
        found = {e.array}.union(*(_arrays(i) for i in e.indices))
    return found.union(*(_arrays(child) for child in ir.children(e)))


def _touched(s: ir.Stmt) -> set[str]:
    """The arrays ``s`` reads or writes in its own expressions (not its nested statements'):
    an operand statement's (a copy, a vector or warp access) included."""
    if isinstance(s, ir.Assign):
        expressions = [s.target, s.value]
    elif isinstance(s, ir.If):
        expressions = [s.condition]
    elif isinstance(s, ir.For):
        expressions = [s.start, s.condition, s.step]
    elif isinstance(s, ir.OPERAND_STATEMENTS):
        return set().union(*(_arrays(operand) for operand in ir.operands(s)))
    else:
        expressions = []
    return set().union(*(_arrays(e) for e in expressions))


def _private(body: ir.Stmt, condition: ir.Expr, registers: set[str],
             readable: set[str]) -> bool:
    """Whether the registers that the clampable ``if``s on ``condition`` write are read or
    written anywhere else only under an ``if`` on ``condition`` (so an idle thread's values
    are never seen), and are no statement of another kind's (a vector access, a copy)."""
    clamped = [s for s in ir.nested(body) if isinstance(s, ir.If) and s.condition == condition
               and _clampable(s, registers, readable)]
    written = {c.target.array for s in clamped for c in ir.nested(s.then)
               if isinstance(c, ir.Assign)}

    def seen(s: ir.Stmt) -> bool:
        if isinstance(s, ir.If) and s.otherwise is None and s.condition == condition:
            return False
        return bool(written & _touched(s)) or any(seen(c) for c in _direct(s))

    return not seen(body)


def _direct(s: ir.Stmt) -> list[ir.Stmt]:
    """The statements directly inside ``s``."""
    found: list[ir.Stmt] = []
    ir.map_children(s, lambda child: found.append(child) or child)
    return found


def _clamped(s: ir.Stmt, condition: ir.Expr, registers: set[str],
             readable: set[str]) -> ir.Stmt:
    """``s`` with each clampable ``if`` on ``condition`` replaced by its body, its thread ids
    clamped into the condition's range."""
    if (isinstance(s, ir.If) and s.condition == condition
            and _clampable(s, registers, readable)):
        into = {}
        for index, op, k in _bounds(condition) or []:
            bound = ir.Binary(ir.Op.MIN if op in (ir.Op.LE, ir.Op.LT) else ir.Op.MAX,
                              into.get(index, index),
                              ir.Int(k - 1 if op is ir.Op.LT else k + 1 if op is ir.Op.GT else k))
            into[index] = bound
        return _in_range(s.then, into)
    return ir.map_children(s, lambda child: _clamped(child, condition, registers, readable))


def _in_range(s: ir.Stmt, into: dict[ir.Index, ir.Expr]) -> ir.Stmt:
    """``s`` with the thread ids in ``into`` replaced by their clamps."""
    if isinstance(s, ir.Assign):
        return replace(s, target=_replaced(s.target, into), value=_replaced(s.value, into))
    if isinstance(s, ir.If):
        s = replace(s, condition=_replaced(s.condition, into))
    elif isinstance(s, ir.For):
        s = replace(s, start=_replaced(s.start, into), condition=_replaced(s.condition, into),
                    step=_replaced(s.step, into))
    return ir.map_children(s, lambda child: _in_range(child, into))


def _replaced(e: ir.Expr, into: dict[ir.Index, ir.Expr]) -> ir.Expr:
    """``e`` with the thread ids in ``into`` replaced by their clamps."""
    if isinstance(e, ir.Index):
        return into.get(e, e)
    if isinstance(e, ir.Load):
        return replace(e, offset=_replaced(e.offset, into))
    if isinstance(e, ir.Element):
        return replace(e, indices=tuple(_replaced(i, into) for i in e.indices))
    if isinstance(e, ir.Binary):
        return ir.Binary(e.op, _replaced(e.left, into), _replaced(e.right, into))
    if isinstance(e, ir.Neg):
        return ir.Neg(_replaced(e.operand, into))
    if isinstance(e, ir.Select):
        return ir.Select(*(_replaced(part, into) for part in ir.children(e)))
    if isinstance(e, ir.Call):
        return replace(e, args=tuple(_replaced(a, into) for a in e.args))
    return e
