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
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import EXAMPLES, generated, needs_nvcc, sampled_params, seed_of, strategy_names

import treduda
from treduda.errors import StrategyError
from treduda.run.nvcc import compile_cuda_batch, kernel_names
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


@pytest.fixture(scope="session")
def cuda_folder(tmp_path_factory) -> Path:
    """A folder every xdist worker of the session shares: each kernel generated here leaves its
    CUDA text in it, so the nvcc test need not generate them all again."""
    root = tmp_path_factory.getbasetemp()
    folder = (root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "strategy-cuda"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.mark.parametrize("case", _params(CASES))
def test_strategy_matches_einsum(case, cuda_folder):
    print("reproduce with:", case.reproduction(case.params()))  # pytest shows it on failure
    generated_kernel = kernel(case)
    partial = cuda_folder / f".{case.id}.{os.getpid()}"
    partial.write_text(generated_kernel.cuda_source)
    partial.replace(cuda_folder / f"{case.id}.cu")  # atomic: readers see all of it or nothing
    assert generated_kernel.verify(dict(case.contraction.sizes)).ok  # with guard zones


def test_ci_share_is_what_the_docstring_says():
    ci = [case for case in CASES if case.in_ci]
    assert {case.contraction.name for case in ci} == {c.name for c in CONTRACTIONS}
    assert {(case.strategy, case.contraction.name) for case in ci
            if case.point == "defaults"} >= {(s, e) for s in STRATEGIES for e in EXAMPLES}
    sampled = [case for case in ci if case.point in SAMPLES]
    assert sorted(case.contraction.name for case in sampled) == sorted(EXAMPLES)
    assert {case.strategy for case in sampled} == set(STRATEGIES)
    assert {case.point for case in sampled} == set(SAMPLES)


# CI's kernels in one batch; the matrix's in batches of MATRIX_BATCH per strategy and point,
# since nvcc takes minutes for a few dozen large kernels in one translation unit.
MATRIX_BATCH = 16


def _batch_cases(strategy: str, point: str) -> list[Case]:
    return [case for case in CASES if (case.strategy, case.point) == (strategy, point)]


BATCHES = [pytest.param("ci", id="ci")] + [
    pytest.param(f"{strategy}-{point}-{start}", marks=pytest.mark.matrix)
    for strategy in STRATEGIES for point in POINTS
    for start in range(0, len(_batch_cases(strategy, point)), MATRIX_BATCH)]


@needs_nvcc
@pytest.mark.parametrize("batch", BATCHES)
def test_strategy_cuda_compiles_in_one_batch(batch, cuda_folder):
    """Every kernel of the batch in one nvcc call (the texts the PoCL tests left, the others
    generated here); each source reports its own kernel."""
    if batch == "ci":
        cases = [case for case in CASES if case.in_ci]
    else:
        strategy, point, start = batch.rsplit("-", 2)
        cases = _batch_cases(strategy, point)[int(start):int(start) + MATRIX_BATCH]
    sources = [source for case in cases if (source := cuda_source(case, cuda_folder)) is not None]
    reports = compile_cuda_batch(sources)
    for source, report in zip(sources, reports, strict=True):
        assert [r.kernel for r in report] == kernel_names(source)


def cuda_source(case: Case, folder: Path) -> str | None:
    """The case's CUDA text; None for a kernel that a known bug keeps from being generated."""
    saved = folder / f"{case.id}.cu"
    if saved.exists():
        return saved.read_text()
    try:
        return kernel(case).cuda_source
    except StrategyError:
        if case.id in KNOWN_BUGS:
            return None
        raise
