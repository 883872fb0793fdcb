"""A parameter space's rules, remembered by the values they read, decide as they did."""

from __future__ import annotations

import itertools

from treduda.polyhedral.strategy import Constraint, Parameter, ParamSpace


def counted_space() -> tuple[ParamSpace, list[tuple[int, int]]]:
    """A space of three parameters whose rule reads two of them, and the rule's calls."""
    calls: list[tuple[int, int]] = []

    def holds(p):
        calls.append((p["a"], p["b"]))
        return p["a"] * p["b"] <= 8

    space = ParamSpace((Parameter("a", (1, 2, 4, 8)), Parameter("b", (1, 2, 4)),
                        Parameter("c", (0, 1))),
                       (Constraint("a * b <= 8", ("a", "b"), holds),))
    return space, calls


def test_rules_decide_as_they_hold_and_are_asked_once_per_values():
    space, calls = counted_space()
    points = list(space.points())
    expected = [{"a": a, "b": b, "c": c} for a, b, c in itertools.product(
        (1, 2, 4, 8), (1, 2, 4), (0, 1)) if a * b <= 8]
    assert points == expected
    # the neighbours of every point, by one change each: broken exactly where a * b > 8
    for point, name in itertools.product(points, ("a", "b", "c")):
        for value in space.parameter(name).values:
            changed = {**point, name: value}
            assert space.breaks(point, {name: value}) == (changed["a"] * changed["b"] > 8)
    # the rule read (a, b) only: each pair was asked once, whatever c and the caller were
    assert sorted(calls) == sorted(set(calls))
    assert len(calls) == 12
