"""Small problems, small searches (issue 44): a small problem's kernel is the model's first
good candidate, taken without a search where no candidate can beat it by a launch's overhead;
a program of small steps is planned without diving into each step."""

from __future__ import annotations

import random

import numpy as np
import pytest

import treduda
from treduda.model.prediction import LAUNCH_SECONDS
from treduda.polyhedral.lower import plan
from treduda.tuning import paths, policy
from treduda.tuning.search import Searcher, at_once, first_candidate, quick

GEMM = "C[i,j] = A[i,k]*B[k,j]"


def refused(what: str):
    def spy(*args, **kwargs):
        raise AssertionError(f"{what} ran for a small problem")
    return spy


def test_a_small_problem_takes_its_first_good_candidate_without_a_search(monkeypatch):
    monkeypatch.setattr(policy, "search_program", refused("the search"))
    sizes = {"i": 64, "j": 80, "k": 48}
    kernel = treduda.compile(GEMM, sizes, cache=False)
    assert kernel.verify().ok
    # No candidate beats it by a launch: none of 200 sampled from the default strategy's
    # whole space, whose floor it is checked against.
    program = plan(GEMM, sizes)
    searcher = Searcher(program, "H100", restrict=False)
    rng = random.Random(44)
    sampled = min(searcher.model.estimate(searcher.space.sample(rng)).seconds
                  for _ in range(200))
    pick = Searcher(program, "H100", kernel.strategy, restrict=False).model.estimate(
        dict(kernel.params)).seconds
    assert pick <= sampled + LAUNCH_SECONDS


def test_a_small_step_whose_first_candidate_is_strided_takes_a_quick_search(monkeypatch):
    """AO->MO's middle step at n=16: its first incumbent reads across strides (12 us against a
    floor of 3.3 us), and a search of the quick strategy within QUICK_SEARCH finds one within a
    launch of the floor, where the search of every strategy took ten times as long."""
    monkeypatch.setattr(policy, "search_program", refused("the search"))
    expr, sizes = "T3[k,p,q,s] = A[p,q,r,s]*D[r,k]", dict.fromkeys("kpqrs", 16)
    program = plan(expr, sizes, dtype="float64")
    assert first_candidate(program).prediction.seconds > (
        Searcher(program, "H100", restrict=False).model.least() + LAUNCH_SECONDS)
    kernel = treduda.compile(expr, sizes, dtype="float64", cache=False)
    assert kernel.strategy == quick() and kernel.verify().ok
    found = at_once(program)
    assert found.best.prediction.seconds <= found.stats.lower + LAUNCH_SECONDS


def test_a_first_candidate_far_from_the_floor_is_not_taken():
    """GEMM 1024^3's first incumbent is 11 us above the floor of its space: searched."""
    assert at_once(plan(GEMM, {"i": 1024, "j": 1024, "k": 1024})) is None


@pytest.mark.parametrize("expr", ["iab,jbc,kcd,lda", "cd,bdhe,aidb,hgca,gc,hgibcd,hgac"])
def test_a_program_of_small_steps_is_planned_without_dives_or_searches(monkeypatch, expr):
    monkeypatch.setattr(policy, "search_program", refused("the search"))
    monkeypatch.setattr(paths, "first_candidate", refused("a step's dive"))
    sizes = dict(zip("abcdeghijkl", [2, 3, 4, 5, 4, 3, 2, 6, 5, 4, 3], strict=True))
    rng = np.random.default_rng(44)
    arrays = [rng.random([sizes[i] for i in term]) for term in expr.split(",")]
    assert np.allclose(treduda.contract(expr, *arrays, dtype="float64"),
                       np.einsum(expr, *arrays))


@pytest.mark.parametrize("expr", ["ab,ab,c->", "ab,ab,cd,cd->"])
def test_a_step_that_sums_a_scalar_read_is_modelled_and_computes_einsum(expr):
    # opt_einsum's 'ab,ab,c->': a step multiplies by c's sum, a read without indices inside
    # a reduction, whose load share the model took along a fastest index it does not have;
    # 'ab,ab,cd,cd->' multiplies two such sums, whose reads the model asked for their
    # fastest index (an IndexError) before it could tell they have none.
    rng = np.random.default_rng(4)
    sizes = {"a": 3, "b": 5, "c": 4, "d": 2}
    arrays = [rng.random([sizes[i] for i in term]) for term in expr.split("->")[0].split(",")]
    result = treduda.contract(expr, *arrays)
    np.testing.assert_allclose(result, np.einsum(expr, *arrays), rtol=1e-5)
