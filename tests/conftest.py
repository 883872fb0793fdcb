"""Shared test helpers: the example expressions, cached kernel generation, nvcc skipping, and
spies that prove a refused call does no work."""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import re
import tempfile
import zlib

import islpy as isl
import numpy as np
import pytest

import treduda
from treduda.codegen import ir
from treduda.frontend.identity import Identity
from treduda.polyhedral.ast_build import offset
from treduda.run.nvcc import nvcc_available
from treduda.tuning.cache import CacheKey, TuningCache
from treduda.tuning.policy import finish_background

# The expressions issue #2 names, with sizes that are not multiples of the block (5..40).
EXAMPLES = {
    "gemm": ("C[i,j] = A[i,k] * B[k,j]", {"i": 37, "j": 45, "k": 13}),
    "gemm_scaled_transposed": ("C[i,j] = alpha*A[k,i]*B[j,k] + beta*C[i,j]",
                               {"i": 33, "j": 8, "k": 19}),
    "batched": ("C[b,i,j] = A[b,i,k]*B[b,k,j]", {"b": 5, "i": 17, "j": 32, "k": 9}),
    "dot": ("s[] = x[i]*y[i]", {"i": 37}),
    "outer": ("C[i,j] = x[i]*y[j]", {"i": 29, "j": 40}),
    "tccg_3": ("C[a,b,c,d] = A[d,b,e,a]*B[e,c]", {"a": 12, "b": 7, "c": 16, "d": 9, "e": 11}),
    "gemm_minus": ("D[i,j] = A[i,k]*B[k,j] - C[i,j]", {"i": 21, "j": 34, "k": 8}),
    "gemm_accumulate": ("C[i,j] += A[i,k]*B[k,j]", {"i": 16, "j": 23, "k": 31}),
    "curvature": ("C[i,j,k,l] = A[i,j,k,l] - A[i,l,k,j] + B[m,j,k]*B[i,m,l] - B[m,l,k]*B[i,m,j]",
                  dict.fromkeys("ijklm", 9)),
    "six_index": ("T[a,b,c,d,e,f] = X[g,d,e,c]*Y[a,b,f,g]",
                  {"a": 6, "b": 5, "c": 8, "d": 7, "e": 6, "f": 9, "g": 5}),
    "numpy_style": ("ik,kj->ij", {"i": 19, "j": 24, "k": 7}),
}

# Every (layout, dtype, symbolic) combination, and a sample covering each value of each axis
# twice that CI runs; the full product runs with `pytest -m matrix`.
COMBINATIONS = [(layout, dtype, symbolic) for layout in "CF" for dtype in ("float32", "float64")
                for symbolic in (False, True)]
SAMPLE = [("C", "float32", False), ("F", "float64", True), ("F", "float32", False),
          ("C", "float64", True)]

# Tests tune into a cache of their own, never the user's, even when $TREDUDA_CACHE names one.
os.environ["TREDUDA_CACHE"] = os.path.join(tempfile.mkdtemp(prefix="treduda-test-"),
                                           "tuning.sqlite3")

needs_nvcc = pytest.mark.skipif(not nvcc_available(), reason="nvcc is not installed here")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first, in their order: pytest-xdist hands tests out in
    collection order, so a minute-long test collected last keeps one worker busy while the
    other has nothing left to do. A module whose tests share a module-scoped fixture marks
    all of them or none, so that the fixture is still made once."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _unkept_when_patched(request):
    """A test that patches code (monkeypatch) must get kernels generated with the patch, and
    leave none behind: compile() keeps kernels for the process (treduda.api._kept). No test
    leaves a background check (of ptxas) running into the next."""
    if "monkeypatch" not in request.fixturenames:
        yield
        finish_background()
        return
    treduda.api._forget()
    yield
    treduda.api._forget()


@functools.cache
def generated(expression: str, sizes: tuple, layout: str, dtype: str,
              symbolic: bool) -> treduda.Kernel:
    """One kernel per configuration, shared by the PoCL and the nvcc tests."""
    return treduda.compile(expression, None if symbolic else dict(sizes), layout=layout,
                           dtype=dtype, symbolic=symbolic, strategy="thread_per_element")


def combinations_marked():
    """pytest params: the CI sample plain, the other combinations under the matrix marker."""
    return [pytest.param(*combo, id="-".join(map(str, combo)),
                         marks=() if combo in SAMPLE else pytest.mark.matrix)
            for combo in COMBINATIONS]


# Helpers of the strategy matrix, the property tests and the guard tests.

# Scaled-down TCCG rows (treduda/suites/tccg_fp32.tsv) and a batched GEMM, GEMM-shaped once
# their indices are grouped: the cases of the tensor-core mappings' tests.
MMA_CASES = {
    "tccg_01": ("C[a,b,c]=A[b,d,a]*B[d,c]", {"a": 20, "b": 12, "c": 24, "d": 18}),
    "tccg_03": ("C[a,b,c,d]=A[d,b,e,a]*B[e,c]", {"a": 6, "b": 5, "c": 24, "d": 7, "e": 20}),
    "tccg_05": ("C[a,b,c,d]=A[e,b,a,d]*B[c,e]", {"a": 4, "b": 6, "c": 20, "d": 5, "e": 19}),
    "tccg_09": ("C[a,b,c,d]=A[e,a]*B[e,b,c,d]", {"a": 18, "b": 5, "c": 4, "d": 3, "e": 22}),
    "tccg_10": ("C[a,b,c,d]=A[e,b]*B[a,e,c,d]", {"a": 3, "b": 17, "c": 4, "d": 5, "e": 20}),
    # M, N and K each a group of two indices
    "tccg_20": ("C[a,b,c,d]=A[a,e,b,f]*B[d,f,c,e]",
                {"a": 7, "b": 5, "c": 6, "d": 4, "e": 5, "f": 3}),
    "batched": ("C[b,i,j] = A[b,i,k]*B[b,k,j]", {"b": 3, "i": 20, "j": 18, "k": 24}),
}

COMPOSITIONS = ("tiled+staged",)  # chains worth testing besides the registered strategies


@functools.cache
def strategy_names() -> tuple[str, ...]:
    """Every built-in strategy that maps work by itself, then :data:`COMPOSITIONS`.

    A refinement such as ``staged`` has no parameter space without a mapping before it (its
    ``space`` raises StrategyError), so it is only tested inside a composition. Strategies that
    test modules register (the tutorial's, one that keeps its description to itself) are left
    out, so the list does not depend on which modules were imported first.
    """
    expression, sizes = EXAMPLES["gemm"]
    program = generated(expression, tuple(sizes.items()), "C", "float32", False).program
    standalone = []
    for name in treduda.strategies.available():
        if not type(treduda.strategies.get(name)).__module__.startswith("treduda.strategies."):
            continue
        try:
            treduda.strategies.get(name).space(program)
        except treduda.errors.StrategyError:
            continue
        standalone.append(name)
    return (*standalone, *COMPOSITIONS)


def seed_of(text: str) -> int:
    """A seed that depends only on ``text`` (a test id), unlike ``hash()``."""
    return zlib.crc32(text.encode())


def sampled_params(program, strategy: str, seed: int) -> dict:
    """A random valid point of ``strategy``'s parameter space for ``program``, from ``seed``."""
    return treduda.strategies.get(strategy).space(program).sample(random.Random(seed))


def bound_paths_hold(searcher) -> int:
    """Enumerate ``searcher``'s space and check the model's promise on every path: each node's
    bound is below the estimate of every candidate under it, and deciding one more parameter
    never lowers the bound. Returns how many candidates there were."""
    names = [p.name for p in searcher.space.parameters]
    bounds: dict[tuple, float] = {}
    floors: dict[tuple, float] = {}  # the least estimate of a completion: what the search cuts by
    leaves = 0
    for point in searcher.space.points():
        leaves += 1
        estimate = searcher.model.estimate(point).seconds
        previous = 0.0
        for depth in range(len(names) + 1):
            prefix = tuple((n, point[n]) for n in names[:depth])
            if prefix not in bounds:
                bound = searcher.model.bound(dict(prefix))
                bounds[prefix], floors[prefix] = bound.seconds, bound.floor
            assert bounds[prefix] <= estimate * (1 + 1e-12), (prefix, point)
            assert bounds[prefix] <= floors[prefix] <= estimate * (1 + 1e-12), (
                "the floor is above an estimate", prefix, point)
            assert bounds[prefix] >= previous * (1 - 1e-12), ("refining lowered the bound", prefix)
            previous = bounds[prefix]
    return leaves


def plus(*terms: ir.Expr) -> ir.Expr:
    """``terms[0] + terms[1] + ..`` in the kernel IR."""
    result = terms[0]
    for term in terms[1:]:
        result = ir.Binary(ir.Op.ADD, result, term)
    return result


def times(k: int, e: ir.Expr) -> ir.Expr:
    """``k * e`` in the kernel IR."""
    return ir.Binary(ir.Op.MUL, ir.Int(k), e)


def formulas_name_their_relations(statements, program=None) -> int:
    """Check that the AST builder may take each statement's index expressions from its
    formulas: at every point of each access relation they name the element the relation
    names (with ``program``, the element of a tensor at the same offset in its memory, as
    the carried copies of a tensor-core kernel name it: Builder.carried_k). Returns how
    many points were checked."""
    checked = 0
    for s in (s for s in statements if s.formulas is not None):
        for access, formulas in zip(s.accesses, s.formulas, strict=True):
            points: list[isl.Point] = []
            access.wrap().foreach_point(points.append)
            if not points:
                continue
            values = np.array([[p.get_coordinate_val(isl.dim_type.set, d).to_python()
                                for d in range(len(s.indices) + len(formulas))]
                               for p in points]).reshape(len(points), -1)
            coordinates = dict(zip(s.indices, values.T, strict=False))
            found = [np.broadcast_to(ir.evaluate(f, coordinates), len(points))
                     for f in formulas]
            named = list(values[:, len(s.indices):].T)
            tensor = access.get_tuple_name(isl.dim_type.out)
            if program is not None and tensor in program.contraction.inputs:
                shape = program.shape(tensor)
                found, named = ([ir.evaluate(offset(tuple(ir.Var(f"x{n}") for n in range(
                    len(shape))), shape, program.layout), {f"x{n}": v for n, v in enumerate(
                        indices)})] for indices in (found, named))
            for n, (f, v) in enumerate(zip(found, named, strict=True)):
                assert np.array_equal(np.broadcast_to(f, len(points)), v), (s.name, n)
            checked += len(points)
    return checked


def in_layout(expression: str, layout: str) -> str:
    """``expression`` as written for column-major ``"F"``; for row-major ``"C"`` every tensor's
    indices reversed, which keeps each tensor's memory order (the box tests' mirrored cases)."""
    if layout == "F":
        return expression
    return re.sub(r"\[([a-z,]+)\]", lambda m: "[" + ",".join(reversed(m[1].split(","))) + "]",
                  expression)


def without(kernel: treduda.Kernel, kind: type) -> treduda.Kernel:
    """``kernel`` with every statement of ``kind`` (a wait of asynchronous copies, a barrier)
    left out of its blocks: what the emulator must then find wrong."""
    first = kernel.signature.kernel
    return dataclasses.replace(kernel, signature=dataclasses.replace(
        kernel.signature, kernel=dataclasses.replace(first, body=_left_out(kind, first.body))))


def _left_out(kind: type, s: ir.Stmt) -> ir.Stmt:
    if isinstance(s, ir.Block):
        s = ir.Block(tuple(c for c in s.body if not isinstance(c, kind)))
    return ir.map_children(s, lambda c: _left_out(kind, c))


def filled_key(n: int) -> CacheKey:
    """The key of :func:`filled`'s ``n``-th entry."""
    return CacheKey("E", (("i", n + 1),), "float32", "C", "gpu", "test")


def filled(path) -> TuningCache:
    """A sound tuning cache of many pages at ``path``: 40 entries and 40 stored kernels (each
    record over a page), to damage."""
    cache = TuningCache(path)
    problem = Identity.make("C[i,j]=A[i,k]*B[k,j]", {"i": 8, "j": 8, "k": 8}, "float32", "C")
    for n in range(40):
        cache.put(filled_key(n), {"n": n, "padding": "x" * 300})
        cache.put_kernel(problem.generated("tiled", {"n": n}), "gen", {"n": n, "ir": "y" * 6000})
    return cache


@pytest.fixture
def nothing_planned(monkeypatch, tmp_path):
    """Spies on every step of the work a refused call must not reach: planning a path or a
    kernel (with isl), the search, and the one place kernels are generated; a fresh tuning
    cache and no kernels kept, so nothing is found made before either."""
    monkeypatch.setenv("TREDUDA_CACHE", str(tmp_path / "tuning.sqlite3"))

    def spy(what):
        def reached(*args, **kwargs):
            raise AssertionError(f"{what} was reached by a call that should have been refused")
        return reached
    for name, what in (("_kept", "planning a kernel"), ("_kept_plan", "planning a path"),
                       ("_kept_incremental", "incremental tuning"), ("plan", "isl planning"),
                       ("search_program", "the search")):
        monkeypatch.setattr(treduda.api, name, spy(what))
    monkeypatch.setattr(treduda.generation, "generated", spy("kernel generation"))
    monkeypatch.setattr(treduda.generation, "plan", spy("isl planning"))
    monkeypatch.setattr(treduda.tuning.policy, "search_program", spy("the search"))
    monkeypatch.setattr(treduda.tuning.paths, "plan", spy("costing a path's step"))
