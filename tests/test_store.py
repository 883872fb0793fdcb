"""The kernel store and the one kernel identity.

A kernel compiled before, in any process, is loaded from the tuning cache's kernel store: no
isl call, no search, no AST building; and it runs, verifies and prints as the generated one
did. Damaged or stale stored kernels are reported and generated again. Every cache keys on
:class:`~treduda.frontend.identity.Identity`, and the tuning cache's digests and the kernels'
C names are what they were before it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_nvcc

import treduda
from treduda import api, generation
from treduda.frontend.identity import Identity
from treduda.polyhedral.lower import plan
from treduda.tuning.cache import CacheKey, CacheWarning, TuningCache
from treduda.tuning.policy import finish_background

GEMM = "C[i,j] = A[i,k]*B[k,j]"
SIZES = {"i": 40, "j": 24, "k": 17}

# What a new process compiles: searched (GEMM, a TCCG row's shape in column-major order),
# asked by strategy and some parameters, symbolic, and a deterministic split (two kernels).
CASES = [
    {"expr": GEMM, "sizes": SIZES, "options": {}},
    {"expr": "C[a,b,c]=A[b,d,a]*B[d,c]", "sizes": {"a": 19, "b": 13, "c": 6, "d": 21},
     "options": {"layout": "F"}},
    {"expr": GEMM, "sizes": SIZES, "options": {"strategy": "tiled",
                                               "params": {"block_x": 8, "reg_x": 2}}},
    {"expr": GEMM, "sizes": None, "options": {"symbolic": True, "dtype": "float64"}},
    {"expr": GEMM, "sizes": SIZES, "options": {"strategy": "tiled+staged", "deterministic": True,
                                               "params": {"split": 2}}},
]

# Runs CASES in a process of its own; with "refuse", every isl constructor, the lowering, the
# AST builder and the search raise, so a kernel that is generated rather than loaded fails.
SCRIPT = r"""
import json, sys
import islpy, numpy as np
import treduda
from treduda import api, generation
from treduda.polyhedral import lower

def refuse(name):
    def refused(*args, **kwargs):
        raise AssertionError(f"{name} was called: the kernel was generated, not loaded")
    return refused

if sys.argv[2] == "refuse":
    for name in ("Set", "Map", "UnionSet", "UnionMap", "BasicSet", "BasicMap", "AstBuild"):
        setattr(islpy, name, refuse("islpy." + name))
    lower.lower = refuse("the lowering")
    generation.build = refuse("the AST build")
    api.policy.search_program = refuse("the search")
seen = []
for case in json.loads(sys.argv[1]):
    k = treduda.compile(case["expr"], case["sizes"], **case["options"])
    sizes = case["sizes"] or {"i": 23, "j": 18, "k": 9}
    rng = np.random.default_rng(0)
    inputs = k.contraction.inputs
    a, b = (rng.standard_normal([sizes[i] for i in inputs[t]]).astype(k.dtype) for t in "AB")
    subscripts = f"{''.join(inputs['A'])},{''.join(inputs['B'])}->"
    expected = np.einsum(subscripts + "".join(k.contraction.output_indices), a, b)
    np.testing.assert_allclose(k.run(A=a, B=b), expected, rtol=1e-4, atol=1e-4)
    k.verify(None if case["sizes"] else sizes)
    seen.append({"name": k.name, "cuda": k.cuda_source, "opencl": k.opencl_source,
                 "grid": k.grid, "block": k.block, "strategy": k.strategy,
                 "params": dict(k.params), "stored": k.stored is not None})
print(json.dumps(seen))
"""


def _run(path: Path, mode: str) -> list[dict]:
    env = {**os.environ, "TREDUDA_CACHE": str(path)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES), mode], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_new_process_loads_every_kernel_it_compiled_before_and_generates_none(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    cold = _run(path, "generate")
    assert not any(kernel["stored"] for kernel in cold)
    assert TuningCache(path).kernels() >= len(CASES)
    warm = _run(path, "refuse")  # no isl, lowering, AST building or search: or it fails
    assert all(kernel["stored"] for kernel in warm)
    for before, after in zip(cold, warm, strict=True):
        assert {**before, "stored": True} == after  # same names, sources, geometry, params


def _fresh(tmp_path: Path, expr: str = GEMM, **options) -> tuple[treduda.Kernel, TuningCache]:
    """The kernel generated into a new cache, then as a new process gets it: from the store."""
    cache = TuningCache(tmp_path / "tuning.sqlite3")
    generated = treduda.compile(expr, SIZES, cache=cache, **options)
    assert generated.stored is None
    api._forget()  # as a new process: this one keeps its kernel
    return generated, cache


def _gemm_operands(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((40, 17)).astype(np.float32),
            rng.standard_normal((17, 24)).astype(np.float32))


def test_a_stored_kernel_runs_everywhere_and_plans_only_when_asked(tmp_path):
    generated, cache = _fresh(tmp_path)
    stored = treduda.compile(GEMM, SIZES, cache=cache)
    assert stored.stored is not None and "program" not in stored.__dict__  # nothing planned
    a, b = _gemm_operands()
    for backend in ("opencl", "emulator"):
        np.testing.assert_allclose(stored.run(A=a, B=b, backend=backend), a @ b, rtol=1e-4,
                                   atol=1e-4)
    assert stored.verify().ok and stored.hazards() == []
    assert stored.time("opencl", repeats=2, warmup=1).seconds > 0
    assert stored.built == generated.built  # the IR, decoded
    assert (stored.cuda_source, stored.opencl_source) == (generated.cuda_source,
                                                          generated.opencl_source)
    assert (stored.grid, stored.block, stored.merged) == (generated.grid, generated.block,
                                                          generated.merged)
    assert stored.program.identity == stored.identity.problem  # planned now, when asked
    assert stored.estimate("H100").seconds == pytest.approx(generated.estimate("H100").seconds)


def test_another_spelling_loads_the_same_kernel_and_quotes_its_own_text(tmp_path):
    generated, cache = _fresh(tmp_path)
    spelt = "C[i, j] = A[i, k] * B[k, j]"
    stored = treduda.compile(spelt, SIZES, cache=cache)
    assert stored.stored is not None and stored.name == generated.name
    assert stored.expression == spelt and spelt in stored.cuda_source
    assert spelt not in generated.cuda_source
    a, b = _gemm_operands(2)
    np.testing.assert_allclose(stored.run(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_damaged_stored_kernel_is_reported_and_generated_again(tmp_path):
    generated, cache = _fresh(tmp_path)
    with sqlite3.connect(cache.path) as conn:
        conn.execute("UPDATE kernels SET value = replace(value, 'td_C_', 'td_X_')")
    with pytest.warns(CacheWarning, match="checksum does not match"):
        again = treduda.compile(GEMM, SIZES, cache=cache)
    assert again.stored is None and again.name == generated.name  # generated
    a, b = _gemm_operands(3)
    np.testing.assert_allclose(again.run(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)
    api._forget()
    assert treduda.compile(GEMM, SIZES, cache=cache).stored is not None  # stored again


def test_a_record_that_does_not_decode_is_reported_and_generated_again(tmp_path):
    generated, cache = _fresh(tmp_path)
    record = generated.record()
    record["signature"]["@"] = "Subprocess"  # a class the decoder does not build
    cache.put_kernel(generated.identity, generation.generator_version(), record)
    with pytest.warns(CacheWarning, match="unknown class 'Subprocess'"):
        again = treduda.compile(GEMM, SIZES, cache=cache)
    assert again.stored is None and again.verify().ok


def test_a_kernel_of_another_code_generator_is_replaced(tmp_path, monkeypatch):
    _, cache = _fresh(tmp_path)
    kept = cache.kernels()
    builds = []
    build = generation.build
    monkeypatch.setattr(generation, "build", lambda *args: builds.append(args) or build(*args))
    monkeypatch.setattr(generation, "generator_version", lambda: "another generator")
    again = treduda.compile(GEMM, SIZES, cache=cache)
    finish_background()
    assert again.stored is None and len(builds) == 1 and cache.kernels() == kept  # replaced


def test_nothing_is_stored_without_a_cache_or_for_a_strategy_defined_elsewhere(tmp_path):
    cache = TuningCache(tmp_path / "tuning.sqlite3")

    @treduda.strategies.register
    class Elsewhere(treduda.strategies.Tiled):
        name = "elsewhere_store_test"
        description = "tiled, registered by a test: its source is not the generator's"

    kernel = treduda.compile(GEMM, SIZES, strategy=Elsewhere.name, cache=cache)
    assert kernel.verify().ok and cache.kernels() == 0
    default = TuningCache()
    before = default.kernels()
    treduda.compile(GEMM, {"i": 11, "j": 7, "k": 5}, strategy="tiled", cache=False)
    assert default.kernels() == before


def test_one_identity_whatever_the_spelling_and_the_keys_and_names_of_before():
    """The tuning cache's digests and the kernels' C names, as treduda computed them before
    the Identity (commit e1c3e70), so stored entries are still found."""
    key = CacheKey.make(GEMM, SIZES, "float32", "C", "sm_90 H100", "9.9")
    assert key.digest() == "1d7680e762569475ebfb21f20c25ab4ac252cd02cf48df87893bf6e256fe5199"
    symbolic = CacheKey.make("C[a,b] = A[b,k]*B[k,a]", None, "float64", "F", "sm_80 A100", "9.9")
    assert symbolic.digest() == ("209cb58e67c0a07799d63930de6659c4b00e157eba3694ddcd4a6566fc"
                                 "951ed1")
    optional = CacheKey.make(GEMM, SIZES, "float32", "C", "sm_90 H100", "9.9",
                             precision="tf32", deterministic=True)
    assert optional.digest() == ("59ecf3ecd0982156add00a19be07c220378965859b59343db46dc61a53c"
                                 "3858d")
    assert CacheKey.of_identity(key.identity, "9.9") == key
    program = plan(GEMM, SIZES)
    assert CacheKey.of(program, "sm_90 H100") == CacheKey.make(GEMM, SIZES, "float32", "C",
                                                               "sm_90 H100")
    spelt = Identity.make("C[i, j] = A[i,k] * B[k,j]", dict(reversed(SIZES.items())),
                          "float32", "C")
    assert spelt == program.identity == Identity.make(GEMM, SIZES, "float32", "C")
    names = {"td_C_597391f91c": ({"strategy": "tiled", "params": {"block_x": 8, "reg_x": 2}},
                                 SIZES),
             "td_C_36b792d95f": ({"symbolic": True}, None),
             "td_C_28002eb27c": ({"strategy": "tiled+staged", "deterministic": True,
                                  "params": {"split": 2}}, SIZES)}
    for name, (options, sizes) in names.items():
        assert treduda.compile(GEMM, sizes, cache=False, **options).name == name


def test_the_kernel_store_keeps_its_size_by_removing_the_oldest_kernels(tmp_path, monkeypatch):
    path = tmp_path / "tuning.sqlite3"
    shapes = [{"i": 40, "j": 24, "k": n} for n in (17, 18, 19)]
    first = [treduda.compile(GEMM, s, strategy="tiled", cache=TuningCache(path)) for s in shapes]
    finish_background()  # the store is written on the background thread
    stored = TuningCache(path).stored_kernels()
    assert {dict(k.identity.sizes)["k"] for k in stored} == {17, 18, 19}
    # Room for two kernels (each is kept under its full parameters and under those asked
    # for): a fourth pushes the first one kept (the oldest) out.
    sizes = [k.bytes for k in stored]
    monkeypatch.setenv("TREDUDA_KERNEL_STORE_MB", str((max(sizes) * 4 + 100) / 1e6))
    small = TuningCache(path)
    treduda.compile(GEMM, {"i": 40, "j": 24, "k": 20}, strategy="tiled", cache=small)
    finish_background()
    kept = {dict(k.identity.sizes)["k"] for k in small.stored_kernels()}
    assert kept == {19, 20}
    api._forget()  # as a new process: the first kernel is generated again
    again = treduda.compile(GEMM, shapes[0], strategy="tiled", cache=small)
    assert again.stored is None and again.cuda_source == first[0].cuda_source
    assert again.verify().ok


def test_a_kernel_store_size_that_is_not_a_number_is_refused(monkeypatch):
    monkeypatch.setenv("TREDUDA_KERNEL_STORE_MB", "lots")
    with pytest.raises(treduda.errors.TredudaError, match="TREDUDA_KERNEL_STORE_MB"):
        TuningCache()


@needs_nvcc
def test_a_checked_search_keeps_its_winner_for_compile_to_load(tmp_path):
    """search(check=True) generates its winner for ptxas; with a cache, compile() of that
    winner (treduda bench's next step) loads it instead of generating it again."""
    cache = TuningCache(tmp_path / "tuning.sqlite3")
    result = treduda.search(GEMM, SIZES, "H100", check=True, cache=cache)
    assert result.best.compiled is not None  # ptxas reported on it: it was generated
    assert cache.kernels() >= 1
    kernel = treduda.compile(GEMM, SIZES, strategy=result.best.strategy,
                             params=result.best.params, cache=cache)
    assert kernel.stored is not None
    a, b = _gemm_operands(4)
    np.testing.assert_allclose(kernel.run(A=a, B=b), a @ b, rtol=1e-4, atol=1e-4)


@needs_nvcc
def test_a_checked_search_without_a_cache_stores_nothing(tmp_path):
    cache = TuningCache(tmp_path / "tuning.sqlite3")
    result = treduda.search(GEMM, SIZES, "H100", check=True)
    kernel = treduda.compile(GEMM, SIZES, strategy=result.best.strategy,
                             params=result.best.params, cache=cache)
    assert kernel.stored is None
