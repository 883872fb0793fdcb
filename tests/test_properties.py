"""Property tests: random contractions, compiled by a random strategy with random valid
parameters (among them groups of indices on one axis), match numpy.einsum on PoCL (verify()
runs with guard zones); small kernels with shared memory are also free of races and other
hazards on the emulator.

A contraction has an output of rank 0-6 and 0-3 summed indices (at most 7 in all), read by one
to three input tensors whose index lists are random orders of random subsets, every index read
by at least one input. Grouped problems keep random runs of indices together in every tensor,
so that index merging (:mod:`treduda.frontend.merge`) has something to merge. Extents are 1-37,
at most 200k points in all so PoCL stays fast; layout,
dtype, operator and fixed or symbolic sizes are drawn too. CI runs a fixed (derandomized) set;
`pytest -m matrix` runs more.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest
from conftest import generated, sampled_params, strategy_names
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import treduda
from treduda.codegen import ir
from treduda.frontend.dtypes import DTYPES
from treduda.polyhedral.geometry import GROUP

INDICES = "abcdefg"  # at most seven distinct indices
INPUTS = ("A", "B", "D")
MAX_POINTS = 200_000
MAX_EMULATED = 20_000  # staged kernels this small are also checked for races on the emulator


@dataclass(frozen=True)
class Problem:
    """A contraction and how to compile it; ``seed`` draws the strategy's parameters."""

    expression: str
    sizes: dict[str, int]
    layout: str
    dtype: str
    symbolic: bool
    strategy: str
    seed: int

    def reproduction(self, params: dict) -> str:
        """Python that rebuilds and checks the kernel, for a bug report."""
        sizes = "None" if self.symbolic else repr(self.sizes)
        return (f"treduda.compile({self.expression!r}, {sizes}, layout={self.layout!r}, "
                f"dtype={self.dtype!r}, symbolic={self.symbolic}, strategy={self.strategy!r}, "
                f"params={params!r}).verify({self.sizes!r})")


@st.composite
def problems(draw, grouped: bool = False) -> Problem:
    names = draw(st.permutations(INDICES))
    n_out = draw(st.integers(0, 6))
    n_sum = draw(st.integers(0, min(3, len(INDICES) - n_out)))
    output, summed = names[:n_out], names[n_out:n_out + n_sum]
    n_inputs = draw(st.sampled_from((1, 2, 2, 2, 3)))  # mostly two
    units = [[index] for index in output + summed]
    if grouped:  # join each unit to the one before it with probability one half
        for n in reversed(range(1, len(units))):
            if draw(st.booleans()):
                units[n - 1] += units.pop(n)
    read_by = [[] for _ in range(n_inputs)]
    for unit in units:  # each index (or run of them) in a non-empty set of inputs
        for tensor in sorted(draw(st.sets(st.integers(0, n_inputs - 1), min_size=1))):
            read_by[tensor].append(unit)
    reads = [f"{name}[{','.join(i for unit in draw(st.permutations(read)) for i in unit)}]"
             for name, read in zip(INPUTS, read_by, strict=False)]
    op = draw(st.sampled_from(("=", "=", "+=", "-=")))
    sizes = {index: draw(st.integers(1, 37)) for index in output + summed}
    while math.prod(sizes.values()) > MAX_POINTS:
        largest = max(sizes, key=sizes.get)
        sizes[largest] = (sizes[largest] + 1) // 2
    return Problem(f"C[{','.join(output)}] {op} {' * '.join(reads)}", sizes,
                   draw(st.sampled_from("CF")), draw(st.sampled_from(DTYPES)),
                   draw(st.sampled_from((False, False, True))),
                   draw(st.sampled_from(strategy_names())), draw(st.integers(0, 2**32 - 1)))


def parameters(problem: Problem) -> dict:
    """``space.sample`` for the problem's strategy and program, seeded by the problem."""
    program = generated(problem.expression, tuple(problem.sizes.items()), problem.layout,
                        problem.dtype, problem.symbolic).program
    return sampled_params(program, problem.strategy, problem.seed)


def grouped_parameters(problem: Problem) -> dict | None:
    """Parameters with a group of indices on an axis (a random one of the space's grouped
    orders), or None where the problem's strategy and sizes offer none."""
    program = generated(problem.expression, tuple(problem.sizes.items()), problem.layout,
                        problem.dtype, problem.symbolic).program
    space = treduda.strategies.get(problem.strategy).space(program)
    names = {p.name for p in space.parameters}
    orders = [o for o in space.parameter("order").values if GROUP in o] if "order" in names else []
    rng = random.Random(problem.seed)
    for order in rng.sample(orders, len(orders)):
        try:
            return space.sample(rng, {"order": order})
        except treduda.errors.StrategyError:
            continue
    return None


def check(problem: Problem, params: dict | None = None) -> None:
    note(f"problem: {problem}")
    params = params or parameters(problem)
    note(f"reproduce with: {problem.reproduction(params)}")
    kernel = treduda.compile(problem.expression, None if problem.symbolic else problem.sizes,
                             layout=problem.layout, dtype=problem.dtype,
                             symbolic=problem.symbolic, strategy=problem.strategy, params=params)
    assert kernel.verify(problem.sizes).ok
    staged = any(local.space is ir.Space.SHARED for local in kernel.built.kernel.locals)
    if staged and math.prod(problem.sizes.values()) <= MAX_EMULATED:
        assert kernel.hazards(problem.sizes) == []


SETTINGS = {"deadline": None, "derandomize": True, "database": None, "print_blob": False,
            "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


@settings(max_examples=12, **SETTINGS)
@given(problem=problems())
def test_random_contraction_matches_einsum(problem):
    check(problem)


@pytest.mark.slow
@settings(max_examples=12, **SETTINGS)
@given(problem=problems(grouped=True))
def test_random_grouped_contraction_matches_einsum(problem):
    check(problem)


@settings(max_examples=16, **SETTINGS)
@given(problem=problems(grouped=True))
def test_random_contraction_with_a_group_on_an_axis_matches_einsum(problem):
    params = grouped_parameters(problem)
    if params is not None:  # symbolic sizes, or one output index: no group to choose
        check(problem, params)


@pytest.mark.matrix
@settings(max_examples=300, **SETTINGS)
@given(problem=problems())
def test_many_random_contractions_match_einsum(problem):
    check(problem)
