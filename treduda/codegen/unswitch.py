"""Guards that do not change inside a loop, taken out of it: the loop runs unguarded where
they all hold, as written everywhere else ("loop unswitching").

isl guards every register of a thread's tile whose output point may lie past a tensor's end
(a size no tile divides), inside the reduction loop, where nvcc turns each guard into a branch
around its FMAs and loads. tccg_12's measured pick (7248 x 7240, a 128 x 128 tile, B read from
global memory) ran 3.05 SASS instructions per FFMA in its main loop, a branch every four
instructions, and took 2.8 times the model's time on an H100; the same kernel without its
guards runs 1.39 per FFMA (CUDA 13, sm_90). The guards depend only on the block, the thread
and outer loops, so one test before the loop decides them all: every thread of an inner block
runs the unguarded copy, threads of the edge blocks the guarded one. A step loop bounded by
``min(step - 1, what is left of the summed extent)`` is unswitched on that bound too: every
step but the last runs a loop of constant length, which nvcc unrolls fully.

Only innermost loops without barriers are unswitched: threads of one block may take different
copies, which is safe only where no barrier waits for all of them, and the code grows by one
copy of the loop.
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

from . import ir


def unswitch(kernel: ir.KernelIR) -> ir.KernelIR:
    """``kernel`` with each innermost loop's invariant guards decided before the loop."""
    return replace(kernel, body=_stmt(kernel.body))


def _stmt(s: ir.Stmt) -> ir.Stmt:
    if isinstance(s, ir.For) and not any(isinstance(c, ir.For) for c in ir.nested(s.body)):
        return _unswitched(s)
    return ir.map_children(s, _stmt)


def _unswitched(loop: ir.For) -> ir.Stmt:
    """``if (all guards) loop-without-them else loop`` for an innermost ``loop``, or the loop
    itself where it has no invariant guard (or a barrier)."""
    if ir.has_barrier(loop.body):
        return loop
    varying = {loop.iterator} | {c.target.name for c in ir.nested(loop.body)
                                 if isinstance(c, ir.Assign) and isinstance(c.target, ir.Var)}
    guards = list(dict.fromkeys(
        c.condition for c in ir.nested(loop.body)
        if isinstance(c, ir.If) and c.otherwise is None and _invariant(c.condition, varying)))
    fast = replace(loop, body=_without(loop.body, set(guards)))
    if bound := _constant_bound(loop, varying):
        condition, guard = bound
        fast = replace(fast, condition=condition)
        guards.append(guard)
    if not guards:
        return loop
    every = reduce(lambda a, b: ir.Binary(ir.Op.AND, a, b), guards)
    return ir.If(every, fast, loop)


def _constant_bound(loop: ir.For, varying: set[str]) -> tuple[ir.Expr, ir.Expr] | None:
    """For a loop ``i <= min(n, e)`` (a step, short where the summed extent ends) with ``e``
    invariant: ``i <= n``, which nvcc can unroll fully, and the guard ``e >= n`` under which
    it is the same loop; None for any other loop."""
    c = loop.condition
    if not (isinstance(c, ir.Binary) and c.op in (ir.Op.LE, ir.Op.LT)
            and c.left == ir.Var(loop.iterator)
            and isinstance(c.right, ir.Binary) and c.right.op is ir.Op.MIN):
        return None
    for constant, other in ((c.right.left, c.right.right), (c.right.right, c.right.left)):
        if isinstance(constant, ir.Int) and _invariant(other, varying):
            return (ir.Binary(c.op, c.left, constant),
                    ir.Binary(ir.Op.GE, other, constant))
    return None


def _invariant(e: ir.Expr, varying: set[str]) -> bool:
    """Whether ``e`` has the same value at every iteration: it reads no memory and no
    variable the loop changes."""
    if isinstance(e, ir.Element | ir.Load | ir.Lane):
        return False
    if isinstance(e, ir.Var):
        return e.name not in varying
    return all(_invariant(c, varying) for c in ir.children(e))


def _without(s: ir.Stmt, guards: set[ir.Expr]) -> ir.Stmt:
    """``s`` with every ``if`` on one of ``guards`` replaced by its body."""
    if isinstance(s, ir.If) and s.otherwise is None and s.condition in guards:
        return _without(s.then, guards)
    s = ir.map_children(s, lambda child: _without(child, guards))
    return _flat(s.body) if isinstance(s, ir.Block) else s


def _flat(body: tuple[ir.Stmt, ...]) -> ir.Block:
    """A block of ``body`` with the blocks in it spliced in, so that the assignments a guard
    separated form one straight run (:mod:`treduda.codegen.vectorize` merges within runs)."""
    return ir.Block(tuple(c for s in body for c in (s.body if isinstance(s, ir.Block) else (s,))))
