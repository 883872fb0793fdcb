"""The strategy matrix: every strategy (and composition) x every contraction (the examples and
the benchmark rows, scaled down) x four parameter points (the strategy's defaults, two random
valid points of its space, and the defaults for symbolic sizes) runs on PoCL with guard zones
and matches numpy.einsum, and its CUDA text compiles with nvcc.

CI runs a deterministic share: every strategy on every example with its defaults, every
benchmark row with its defaults under one strategy (rotating), and every example once at a
random point (strategy and point rotating); `pytest -m matrix` runs the rest.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
from conftest import EXAMPLES, generated, needs_nvcc, sampled_params, seed_of, strategy_names

import treduda
from treduda.errors import StrategyError
from treduda.run.nvcc import compile_cuda_batch
from treduda.suites import load, scaled

STRATEGIES = strategy_names()
POINTS = ("defaults", "sample1", "sample2", "symbolic")
SAMPLES = ("sample1", "sample2")
# The examples have no layout of their own: they rotate through layouts and dtypes.
EXAMPLE_FORMATS = [("C", "float32"), ("F", "float64"), ("F", "float32"), ("C", "float64")]


@dataclass(frozen=True)
class Contraction:
    """One expression at fixed sizes, in one layout and dtype."""

    name: str
    expression: str
    sizes: tuple[tuple[str, int], ...]
    layout: str
    dtype: str


def _contractions() -> list[Contraction]:
    """The examples, then every benchmark row in its source's layout, dtypes alternating."""
    found = [Contraction(name, expression, tuple(sizes.items()),
                         *EXAMPLE_FORMATS[n % len(EXAMPLE_FORMATS)])
             for n, (name, (expression, sizes)) in enumerate(EXAMPLES.items())]
    rows = [row for suite in ("tccg_fp32", "tc", "tapp") for row in load(suite)]
    found += [Contraction(row.id, row.expression, tuple(scaled(row.sizes).items()), row.layout,
                          ("float32", "float64")[n % 2]) for n, row in enumerate(rows)]
    return found


CONTRACTIONS = _contractions()


@dataclass(frozen=True)
class Case:
    """A contraction compiled by one strategy at one parameter point."""

    contraction: Contraction
    strategy: str
    point: str  # "defaults", "sample<n>" (a random point seeded by the case's id), "symbolic"
    in_ci: bool

    @property
    def symbolic(self) -> bool:
        return self.point == "symbolic"

    @property
    def id(self) -> str:
        return f"{self.strategy}-{self.contraction.name}-{self.point}"

    def params(self) -> dict | None:
        """None for the defaults, else a point of the space drawn with a seed from the id."""
        if not self.point.startswith("sample"):
            return None
        c = self.contraction
        program = generated(c.expression, c.sizes, c.layout, c.dtype, False).program
        return sampled_params(program, self.strategy, seed_of(self.id))

    def reproduction(self, params: dict | None) -> str:
        """Python that regenerates this kernel, for bug reports."""
        c = self.contraction
        sizes = "symbolic=True" if self.symbolic else dict(c.sizes)
        return (f"treduda.compile({c.expression!r}, {sizes}, layout={c.layout!r}, "
                f"dtype={c.dtype!r}, strategy={self.strategy!r}, params={params!r})"
                f".verify({dict(c.sizes)})")


def _cases() -> list[Case]:
    """The whole product; ``in_ci`` marks the share CI runs (see the module's docstring)."""
    cases = []
    for n, contraction in enumerate(CONTRACTIONS):
        example = contraction.name in EXAMPLES
        strategy_now = STRATEGIES[n % len(STRATEGIES)]
        sample_now = SAMPLES[(n // len(STRATEGIES)) % len(SAMPLES)]
        for strategy in STRATEGIES:
            for point in POINTS:
                in_ci = ((point == "defaults" and (example or strategy == strategy_now))
                         or (example and (strategy, point) == (strategy_now, sample_now)))
                cases.append(Case(contraction, strategy, point, in_ci))
    return cases


CASES = _cases()

# Known bugs, by case id: the reproduction goes to the strategies' owner; the case is marked
# xfail(strict=True), so it reports once the bug is fixed and the entry can be removed.
KNOWN_BUGS: dict[str, str] = {}


def _params(cases: list[Case]) -> list:
    """pytest params: CI's share plain, the rest under the matrix marker, known bugs xfail."""
    return [pytest.param(case, id=case.id, marks=[
        *(() if case.in_ci else (pytest.mark.matrix,)),
        *((pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[case.id]),)
          if case.id in KNOWN_BUGS else ())]) for case in cases]


@functools.cache
def kernel(case: Case) -> treduda.Kernel:
    c = case.contraction
    return treduda.compile(c.expression, None if case.symbolic else dict(c.sizes),
                           layout=c.layout, dtype=c.dtype, symbolic=case.symbolic,
                           strategy=case.strategy, params=case.params())


@pytest.mark.parametrize("case", _params(CASES))
def test_strategy_matches_einsum(case):
    print("reproduce with:", case.reproduction(case.params()))  # pytest shows it on failure
    assert kernel(case).verify(dict(case.contraction.sizes)).ok  # with guard zones


def test_ci_share_is_what_the_docstring_says():
    ci = [case for case in CASES if case.in_ci]
    assert {case.contraction.name for case in ci} == {c.name for c in CONTRACTIONS}
    assert {(case.strategy, case.contraction.name) for case in ci
            if case.point == "defaults"} >= {(s, e) for s in STRATEGIES for e in EXAMPLES}
    sampled = [case for case in ci if case.point in SAMPLES]
    assert sorted(case.contraction.name for case in sampled) == sorted(EXAMPLES)
    assert {case.strategy for case in sampled} == set(STRATEGIES)
    assert {case.point for case in sampled} == set(SAMPLES)


@needs_nvcc
@pytest.mark.parametrize("share", [pytest.param(True, id="ci"),
                                   pytest.param(False, id="all", marks=pytest.mark.matrix)])
def test_strategy_cuda_compiles_in_one_batch(share):
    """Every kernel the share generates, in one nvcc call; each source reports its kernel."""
    kernels = []
    for case in CASES:
        if case.in_ci or not share:
            try:
                kernels.append(kernel(case))
            except StrategyError:
                if case.id not in KNOWN_BUGS:
                    raise
    reports = compile_cuda_batch([k.cuda_source for k in kernels])
    for k, report in zip(kernels, reports, strict=True):
        assert [r.kernel for r in report] == [k.name], k.name
