"""Writing a strategy: a new thread mapping in under 50 lines, by subclassing.

This file is the tutorial: it defines a strategy that gives each block one value of the first
output index and lets the block's threads stride along the last one, registers it, and checks
that treduda compiles, runs and verifies contractions with it.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np

import treduda
from treduda.polyhedral.strategy import (
    Constraint,
    Parameter,
    ParamSpace,
    Role,
    Strategy,
    register,
    schedule_space,
    transform_schedule,
)


@register
class RowPerBlock(Strategy):
    """Block x takes one value of the first output index, threads x the last one."""

    name = "row_per_block"
    description = "one block per value of the first output index; threads along the last"

    def space(self, program, before=()):
        rank = len(program.output_indices)
        threads = Parameter("threads", (32, 64, 128), "threads per block")
        needs_rank = Constraint("the output needs two or more indices", ("threads",),
                                lambda p: rank >= 2)
        return ParamSpace((threads,), (needs_rank,))

    def transform(self, scheduled, params):
        program = scheduled.program
        names = schedule_space(program)  # [o0, .., o(n-1), phase, r0, ..]
        n = len(program.output_indices)
        first, middle, last = names[0], names[1:n - 1], names[n - 1]
        t = params["threads"]
        target = [first, "0", "0", f"{last} mod {t}", "0", "0",  # block x, thread x
                  *middle, f"floor({last}/{t})", *names[n:]]  # the rest are loops
        roles = ((Role.BLOCK,) * 3 + (Role.THREAD,) * 3 + (Role.LOOP,) * (n - 1)
                 + (Role.PHASE,) + (Role.INNER,) * program.reduction_depth)
        return replace(scheduled, schedule=transform_schedule(program, target), roles=roles,
                       block=(t, 1, 1))


def test_the_strategy_is_short_and_registered():
    assert len(inspect.getsource(RowPerBlock).splitlines()) < 50
    assert "row_per_block" in treduda.strategies.available()


def test_the_new_strategy_computes_correct_results():
    for expression, sizes in [("C[i,j] = A[i,k]*B[k,j]", {"i": 7, "j": 70, "k": 9}),
                              ("C[a,b,c] = A[b,d,a]*B[d,c]", {"a": 5, "b": 6, "c": 33, "d": 4})]:
        kernel = treduda.compile(expression, sizes, strategy="row_per_block",
                                 params={"threads": 32})
        assert kernel.block == (32, 1, 1) and kernel.grid[0] == sizes[expression[2]]
        assert kernel.verify().ok


def test_the_new_strategy_runs_from_contract_and_checks_its_rule():
    a, b = np.ones((3, 4)), np.ones((4, 40))
    c = treduda.contract("C[i,j] = A[i,k]*B[k,j]", A=a, B=b, strategy="row_per_block")
    np.testing.assert_allclose(c, a @ b)
    try:
        treduda.compile("s[i] = x[i]", {"i": 4}, strategy="row_per_block")
    except treduda.errors.StrategyError as error:
        assert "two or more indices" in str(error)
    else:
        raise AssertionError("a rank-1 output must be refused")
