"""Index arithmetic simplified with its variables' ranges (treduda.codegen.simplify): equal to
the expression it came from at every point of the ranges, and as short as isl writes it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import plus, times
from hypothesis import given, settings
from hypothesis import strategies as st

from treduda.codegen import ir
from treduda.codegen.simplify import simplify, uniform_over_threads, value_range

c, t, bm = ir.Var("c"), ir.Var("t"), ir.Var("bm")
RANGES = {c: (0, 15), t: (0, 127), bm: (0, 11)}


def _div(e: ir.Expr, d: int) -> ir.Expr:
    return ir.Binary(ir.Op.DIV, e, ir.Int(d))


def _mod(e: ir.Expr, d: int) -> ir.Expr:
    return ir.Binary(ir.Op.MOD, e, ir.Int(d))


def _grid(ranges: dict[ir.Var, tuple[int, int]]) -> dict[str, np.ndarray]:
    """Every point of ``ranges``, by variable name."""
    axes = np.meshgrid(*(np.arange(lo, hi + 1) for lo, hi in ranges.values()), indexing="ij")
    return {v.name: axis.ravel() for v, axis in zip(ranges, axes, strict=True)}


def _equal_everywhere(e: ir.Expr, simplified: ir.Expr, ranges) -> bool:
    points = _grid(ranges)
    size = len(next(iter(points.values())))
    return np.array_equal(np.broadcast_to(ir.evaluate(e, points), size),
                          np.broadcast_to(ir.evaluate(simplified, points), size))


def _operations(e: ir.Expr) -> int:
    return (isinstance(e, ir.Binary)) + sum(_operations(p) for p in ir.children(e))


E = plus(times(128, c), t)  # the element thread t copies in iteration c


def test_a_row_of_the_element_a_thread_copies_splits_into_its_loop_and_thread_parts():
    assert simplify(_div(E, 64), RANGES) == plus(times(2, c), _div(t, 64))
    assert simplify(_mod(E, 64), RANGES) == _mod(t, 64)
    assert simplify(_div(E, 256), RANGES) == _div(c, 2)  # t / 256 is 0


def test_a_tile_origin_inside_a_group_of_indices_divides_the_block_index():
    """The index ``floor(v / 384)`` and ``v mod 384`` of a group's value ``v = 64 bm + r``
    (tccg_01's A): 64 divides 384, so ``bm / 6`` and ``64 (bm mod 6) + r`` (as isl writes)."""
    value = plus(times(64, bm), _mod(E, 64))
    assert simplify(_div(value, 384), RANGES) == _div(bm, 6)
    assert simplify(_mod(value, 384), RANGES) == plus(times(64, _mod(bm, 6)), _mod(t, 64))


def test_divisions_of_divisions_and_remainders_of_remainders_fold():
    assert simplify(_div(_div(t, 4), 8), RANGES) == _div(t, 32)
    assert simplify(_mod(_mod(t, 64), 16), RANGES) == _mod(t, 16)


def test_what_it_cannot_prove_non_negative_it_leaves():
    """Without a range for ``x`` the part left after the multiples may be negative, where
    C's division rounds towards zero and the rules would be wrong."""
    x = ir.Var("x")
    e = _div(plus(times(64, c), x), 32)
    assert simplify(e, RANGES) == e
    assert simplify(_div(plus(times(64, c), x), 32), {**RANGES, x: (0, 99)}) == plus(
        times(2, c), _div(ir.Var("x"), 32))
    assert value_range(_mod(x, 8), {}) is None


def _expressions(depth: int) -> st.SearchStrategy:
    leaves = st.sampled_from([c, t, bm]) | st.integers(0, 50).map(ir.Int)
    if depth == 0:
        return leaves
    inner = _expressions(depth - 1)
    divisors = st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 96, 384])
    return st.one_of(
        leaves,
        st.tuples(inner, inner).map(lambda p: plus(*p)),
        st.tuples(st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 128]), inner).map(
            lambda p: times(*p)),
        st.tuples(inner, divisors).map(lambda p: _div(*p)),
        st.tuples(inner, divisors).map(lambda p: _mod(*p)))


@settings(max_examples=300, deadline=None)
@given(_expressions(3))
def test_simplified_expressions_equal_their_originals_at_every_point(e):
    simplified = simplify(e, RANGES)
    assert _equal_everywhere(e, simplified, RANGES)
    assert _operations(simplified) <= _operations(e) + 2  # never much longer


def test_value_ranges_hold_at_every_point():
    expressions = [E, _div(E, 64), _mod(E, 96), plus(times(3, bm), _div(t, 5)),
                   _mod(_div(E, 4), 384)]
    for e in expressions:
        low, high = value_range(e, RANGES)
        values = ir.evaluate(e, _grid(RANGES))
        assert low <= values.min() and values.max() <= high, e



@pytest.mark.parametrize(("coefficient", "bound"), [(256, -193), (256, -257), (16, -13), (64, 5),
                                                    (-64, 70), (0, 40), (0, -1), (8, 3)])
@pytest.mark.parametrize("op", [ir.Op.LE, ir.Op.LT, ir.Op.GE, ir.Op.GT])
def test_a_comparison_no_thread_can_change_loses_the_thread_ids(coefficient, bound, op):
    """``k c + u <= b`` over 64 threads (``u``: ``t`` or ``t / 4``) equals what it becomes at
    every point, and reads no thread id exactly where, at each ``c``, it holds for all
    threads or for none (tccg_06's A copy of K = 36 in steps of 16: ``256 c + t <= -193``
    becomes ``c <= -1``)."""
    thread = ir.Index(ir.Builtin.THREAD_ID, 0)
    steps, threads = np.repeat(np.arange(-4, 5), 64), np.tile(np.arange(64), 9)
    for term in (thread, _div(thread, 4)):
        condition = ir.Binary(op, plus(times(coefficient, c), term), ir.Int(bound))
        uniform = uniform_over_threads(condition, {thread: (0, 63)})
        before, after = (np.broadcast_to(ir.evaluate(e, {"c": steps}, (threads, 0, 0)), 576)
                         for e in (condition, uniform))
        assert np.array_equal(before, after)
        same_for_all = all(len(set(before[steps == s])) == 1 for s in range(-4, 5))
        assert ir.reads_thread_id(uniform) != same_for_all


def test_a_comparison_that_reads_a_block_id_keeps_its_thread_ids():
    """``256 b + t <= 447`` holds for every thread or none at each block ``b``, but its test
    is made at run time either way: it stays as it is (its thread term shared with the
    copy's address)."""
    thread, block = ir.Index(ir.Builtin.THREAD_ID, 0), ir.Index(ir.Builtin.BLOCK_ID, 0)
    condition = ir.Binary(ir.Op.LE, plus(times(256, block), thread), ir.Int(447))
    assert uniform_over_threads(condition, {thread: (0, 63), block: (0, 9)}) == condition
