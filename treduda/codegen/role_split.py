"""Warp-specialised roles as one if/else: isl scans a schedule whose roles (a producer
warpgroup, consumer warpgroups) are threads of their own into one thread test per role,
one after the other; the GPU runs them at once either way, but the emulator and the OpenCL
twin recognise roles that wait for each other only as the two branches of one test
(:func:`ir.is_role_split`). :func:`joined_roles` makes them so.
"""

from __future__ import annotations

import numpy as np

from ..errors import TredudaError
from . import ir


def joined_roles(s: ir.Stmt, threads: int) -> ir.Stmt:
    """``s`` with each pair of neighbouring tests ``if (a) X; if (b) Y;`` joined into ``if
    (a) X else Y`` where ``a`` and ``b`` read thread ids alone, exactly one of them holds for
    each of the block's ``threads`` (x ids), and the result is a role split."""
    if not isinstance(s, ir.Block):
        return ir.map_children(s, lambda c: joined_roles(c, threads))
    body: list[ir.Stmt] = []
    for child in (joined_roles(c, threads) for c in s.body):
        last = body[-1] if body else None
        if (isinstance(last, ir.If) and isinstance(child, ir.If) and last.otherwise is None
                and child.otherwise is None
                and _complementary(last.condition, child.condition, threads)):
            joined = ir.If(last.condition, last.then, child.then)
            if ir.is_role_split(joined):
                body[-1] = joined
                continue
        body.append(child)
    return ir.Block(tuple(body))


def _complementary(a: ir.Expr, b: ir.Expr, threads: int) -> bool:
    """Whether exactly one of ``a`` and ``b`` holds for each thread (tests of x ids only)."""
    if not (ir.reads_thread_id(a) and ir.reads_thread_id(b)):
        return False
    ids = (np.arange(threads), np.zeros(threads, int), np.zeros(threads, int))
    try:
        first, second = (np.broadcast_to(np.asarray(ir.evaluate(e, {}, ids), bool), threads)
                         for e in (a, b))
    except TredudaError:  # it reads a loop iterator or a size: no role test
        return False
    return bool((first ^ second).all())
