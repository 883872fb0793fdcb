"""Writing a strategy: a new thread mapping in under 50 lines, by subclassing.

This file is the tutorial: it defines a strategy that gives each block one value of the first
output index and lets the block's threads stride along the last one, registers it, describes
it to the model in the geometry's quantities, and checks that treduda compiles, verifies,
searches and models contractions with it, alone and chained with shared-memory staging.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import numpy as np
import pytest
from conftest import bound_paths_hold

import treduda
from treduda.authoring import (
    Constraint,
    Parameter,
    ParamSpace,
    Prediction,
    Priority,
    Role,
    Searcher,
    Strategy,
    plan,
    reduction_schedule,
    register,
    schedule_space,
    transform_schedule,
)
from treduda.tuning import policy
from treduda.tuning.search_result import SearchStats


@register
class RowPerBlock(Strategy):
    """Block x takes one value of the first output index, threads x the last one."""

    name = "row_per_block"
    description = "one block per value of the first output index; threads along the last"

    def space(self, program, before=()):
        rank, summed = len(program.output_indices), any(s.summed for s in program.statements)
        threads = Parameter("threads", (32, 64, 128), "threads per block")
        step = Parameter("step", (8, 16, 0) if summed else (0,), "summed values per step")
        needs_rank = Constraint("the output needs two or more indices", ("threads",),
                                lambda p: rank >= 2)
        return ParamSpace((threads, step), (needs_rank,))

    def describe(self, program, choices):  # the same mapping, in the model's quantities
        first, *others = program.output_indices or ("",)
        return {"order": (others[-1] if others else first,), "block_x": choices["threads"],
                "walk": (",".join(others),), "step": choices["step"]}

    def transform(self, scheduled, params):
        program = scheduled.program
        names = schedule_space(program)  # [o0, .., o(n-1), phase, r0, ..]
        n = len(program.output_indices)
        first, middle, last = names[0], names[1:n - 1], names[n - 1]
        t = params["threads"]
        reduction, reduction_roles = reduction_schedule(program, params["step"])
        target = [first, "0", "0", f"{last} mod {t}", "0", "0",  # block x, thread x
                  *middle, f"floor({last}/{t})", *reduction]  # loops, then the reduction
        roles = ((Role.BLOCK,) * 3 + (Role.THREAD,) * 3 + (Role.LOOP,) * (n - 1)
                 + reduction_roles)
        return replace(scheduled, schedule=transform_schedule(program, target), roles=roles,
                       block=(t, 1, 1))


def test_the_strategy_is_short_and_registered():
    assert len(inspect.getsource(RowPerBlock).splitlines()) < 50
    assert "row_per_block" in treduda.strategies.available()


def test_the_new_strategy_computes_correct_results():
    for expression, sizes in [("C[i,j] = A[i,k]*B[k,j]", {"i": 7, "j": 70, "k": 9}),
                              ("C[a,b,c] = A[b,d,a]*B[d,c]", {"a": 5, "b": 6, "c": 33, "d": 4})]:
        kernel = treduda.compile(expression, sizes, strategy="row_per_block",
                                 params={"threads": 32, "step": 8})
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


GEMM, SIZES = "C[i,j] = A[i,k]*B[k,j]", {"i": 24, "j": 300, "k": 100}


def test_the_new_strategy_is_searched_and_modelled_alone_and_staged():
    for strategy in ("row_per_block", "row_per_block+staged"):
        result = treduda.search(GEMM, SIZES, strategy=strategy)
        best = result.best
        assert best.strategy == strategy and best.prediction.because.startswith(
            best.prediction.binding)
        # the search finds what enumerating the strategy's whole space finds
        assert best.params == Searcher(plan(GEMM, SIZES), "H100", strategy).exhaustive().best.params
        kernel = treduda.compile(GEMM, SIZES, strategy=strategy, params=best.params)
        assert kernel.grid[0] == SIZES["i"] and kernel.verify().ok
    staged = treduda.compile(GEMM, SIZES, strategy="row_per_block+staged",
                             params={"threads": 64, "step": 16, "stage": "A,B",
                                     "double_buffer": True})
    assert "__shared__" in staged.cuda_source and staged.verify().ok
    assert staged.hazards() == [] and staged.verify(backend="emulator").ok


def test_the_model_bounds_the_new_strategy_on_every_path():
    for strategy in ("row_per_block", "row_per_block+staged"):
        searcher = Searcher(plan(GEMM, SIZES), "H100", strategy)
        assert bound_paths_hold(searcher) >= 3


def test_the_model_sees_what_the_new_mapping_does():
    model = Searcher(plan(GEMM, {"i": 4, "j": 4096, "k": 512}), "H100", "row_per_block").model
    narrow = model.estimate({"threads": 32, "step": 16})
    wide = model.estimate({"threads": 128, "step": 16})
    # Four blocks walk 4096 / threads strips each, one after the other: wider blocks walk
    # fewer of them, and latency (few warps, long chains) binds either way.
    assert narrow.binding == wide.binding == "latency" and wide.seconds < narrow.seconds


class OwnModel:
    """A cost model of the strategy's own: what the search asks of one
    (:class:`treduda.model.interface.CostModel`; it declares none of the capabilities, whose
    defaults hold). This one is made up: 64 threads and steps of 16 values are best, each step
    away a millisecond dearer."""

    def __init__(self, program, strategy, values):
        self.space, self.evaluations = strategy.space(program), 0
        self.values = values or {p.name: p.values for p in self.space.parameters}
        self.flops = 2.0 * np.prod(list(program.sizes.values()))

    def _prediction(self, params):
        seconds = 1e-3 * (1 + abs(params["threads"] - 64) / 32 + (params["step"] != 16))
        return Prediction(seconds, "own", {"own": seconds}, "the strategy's own model",
                          self.flops, floor=seconds)

    def bound(self, params):
        completions = [self._prediction(p) for p in self.space.points(params)
                       if all(p[name] in self.values[name] for name in p)]
        self.evaluations += len(completions)
        return min(completions, key=lambda p: p.seconds)

    def least(self):
        return self.bound({}).seconds

    def estimate(self, params, compiled=None):
        self.evaluations += 1
        return self._prediction(params)

    def refine(self, kernel, use_nvcc=True):
        return self.estimate(kernel.params)

    def registers(self, params):
        return 32, 0

    def register_pressure(self, params):
        return 0.25


@register
class ModelledRows(RowPerBlock):
    name = "row_per_block_modelled"
    description = "row_per_block, with a cost model of its own"

    def model(self, program, gpu, values=None):
        return OwnModel(program, self, values)


class EstimatingModel:
    """A model that estimates a kernel but cannot bound a partial one, nor say its registers:
    what the search and ptxas's check ask of it besides."""

    evaluations = 0

    def estimate(self, params, compiled=None):
        return Prediction(1e-3, "own", {"own": 1e-3}, "made up", 1.0)


@register
class EstimatedRows(RowPerBlock):
    name = "row_per_block_estimated"
    description = "row_per_block, with a cost model that lacks what a search asks"

    def model(self, program, gpu, values=None):
        return EstimatingModel()


def test_a_strategy_supplies_its_own_model_and_the_search_uses_it():
    result = treduda.search(GEMM, SIZES, strategy="row_per_block_modelled")
    best = result.best
    # the analytic model of the same mapping picks otherwise: the search asked the own model
    assert best.params == {"threads": 64, "step": 16}
    assert treduda.search(GEMM, SIZES, strategy="row_per_block").best.params != best.params
    assert best.prediction.because == "the strategy's own model"
    assert best.prediction.seconds == 1e-3
    kernel = treduda.compile(GEMM, SIZES, strategy="row_per_block_modelled",
                             params=best.params)
    assert kernel.estimate().seconds == best.prediction.seconds  # one estimator answers


def test_a_model_that_lacks_what_the_search_asks_is_named_with_what_it_lacks():
    lacks = "'row_per_block_estimated'.* lacks bound, least, refine, registers, register_pressure"
    with pytest.raises(treduda.errors.StrategyError, match=lacks):
        treduda.search(GEMM, SIZES, strategy="row_per_block_estimated")



# What a strategy declares for the search, which names none of its parameters: the roles of
# its tile's parameters (threads and a thread's values along an axis, Parameter.role) and its
# twins (Strategy.twins), candidates that compute the same tile otherwise.
class TileModel(OwnModel):
    """Made up: a tile of 128 values is best, as 128 threads of one value each; each other
    count of threads per tile a millisecond dearer, and steps as OwnModel's."""

    def _prediction(self, params):
        tile = params["threads"] * params["per_thread"]
        seconds = 1e-3 * (1 + (tile != 128) + (params["threads"] != 128)
                          + (params["step"] != 16))
        return Prediction(seconds, "own", {"own": seconds}, "the strategy's own model",
                          self.flops, floor=seconds)


@register
class TiledRows(ModelledRows):
    name = "row_per_block_tiled"
    description = "row_per_block with a register tile, its roles and twins declared"
    twinned = True  # its twins move its first decision: two-change steps keep it

    def space(self, program, before=()):
        threads, step = super().space(program, before).parameters
        return ParamSpace((replace(threads, role=Role.THREAD, axis="x"),
                           Parameter("per_thread", (1, 2, 4), "values per thread",
                                     priority=Priority.TILES, role=Role.REGISTER, axis="x"),
                           replace(step, priority=Priority.STEP)))

    def model(self, program, gpu, values=None):
        return TileModel(program, self, values)

    def twins(self, params, space):  # the same tile with every other count of threads
        tile = params["threads"] * params["per_thread"]
        for threads in space.parameter("threads").values:
            if threads != params["threads"] and tile % threads == 0:
                yield {"threads": threads, "per_thread": tile // threads}


@register
class UntwinnedRows(TiledRows):
    name = "row_per_block_untwinned"
    description = "row_per_block_tiled without its twins"
    twinned = False

    def twins(self, params, space):
        return Strategy.twins(self, params, space)


def test_the_search_reads_what_a_strategy_declares():
    searcher = Searcher(plan(GEMM, SIZES), "H100", "row_per_block_tiled")
    untwinned = Searcher(plan(GEMM, SIZES), "H100", "row_per_block_untwinned")
    stuck = searcher.candidate({"threads": 32, "per_thread": 4, "step": 16})
    climbed = searcher._transposed(stuck, [], set(), SearchStats(1, False), 100, None)
    assert dict(climbed.params) == {"threads": 128, "per_thread": 1, "step": 16}  # its twin's
    assert untwinned._transposed(stuck, [], set(), SearchStats(1, False), 100, None) is None
    pairs = list(searcher._neighbours(stuck.params, 2))
    assert pairs and all(p["threads"] == 32 for p in pairs)  # twinned: the mapping is kept
    assert any(p["threads"] != 32 for p in untwinned._neighbours(stuck.params, 2))
    # threads for values per thread, the tile kept, by the roles alone
    assert [dict(t) for t in searcher._trades({"threads": 64, "per_thread": 2, "step": 16})] \
        == [{"threads": 32, "per_thread": 4}, {"threads": 128, "per_thread": 1}]
    # ptxas's check keeps the best of each register tile: its parameter's role says which
    parameters = {p.name: p for p in searcher.strategy.space(searcher.program).parameters}
    a, b, c = (searcher.candidate(p) for p in ({"threads": 64, "per_thread": 2, "step": 16},
                                               {"threads": 64, "per_thread": 4, "step": 16},
                                               {"threads": 64, "per_thread": 2, "step": 8}))
    assert policy.family(a, parameters) != policy.family(b, parameters)
    assert policy.family(a, parameters) == policy.family(c, parameters)
