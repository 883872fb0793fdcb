"""Incremental measured tuning on PoCL: the first calls each run another of the search's best
distinct candidates, timed by OpenCL profiling events; later calls run the fastest measured;
the times go into the tuning cache, and a new process starts from the measured winner."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import treduda
from treduda import api
from treduda.errors import ArgumentError, CompileError, TredudaError
from treduda.kernel import Kernel
from treduda.run import cuda
from treduda.run.timing import TimedRun
from treduda.tuning import incremental
from treduda.tuning.cache import CacheKey, CacheWarning, TuningCache
from treduda.tuning.incremental import FIELD, IncrementalKernel, Trial
from treduda.tuning.search_result import identity

EXPR = "ik,kj->ij"
SHAPES = ((37, 13), (13, 45))  # not multiples of any tile
TRIED = 3  # candidates the tests try: few, each is generated and built on its first call

# What a new process reports after its first call (the cache named by $TREDUDA_CACHE).
NEW_PROCESS = f"""
import json, numpy as np, treduda, treduda.api, treduda.generation, treduda.tuning.incremental
treduda.tuning.incremental.SAMPLES = 1  # as the test that wrote the cache
def unplanned(*args, **kwargs):
    raise AssertionError("planned with isl: the trials and the winner's kernel are stored")
treduda.api.plan = treduda.generation.plan = unplanned
rng = np.random.default_rng(1)
a, b = (rng.standard_normal(s).astype(np.float32) for s in {SHAPES!r})
planned = treduda.contract_expression({EXPR!r}, a.shape, b.shape, tune="incremental")
result = planned(a, b)
print(json.dumps({{"params": dict(planned.kernel.last.params), "found": planned.kernel.found,
                   "timed": planned.kernel.timed_calls,
                   "right": bool(np.allclose(result, np.einsum({EXPR!r}, a, b), rtol=1e-4,
                                             atol=1e-5))}}))
"""


@pytest.fixture(autouse=True)
def one_sample(monkeypatch):
    """One timed call per candidate, so that the order of the calls is easy to follow; the
    samples are tested on their own (test_candidates_take_turns_and_keep_their_fastest)."""
    monkeypatch.setattr(incremental, "SAMPLES", 1)


@pytest.fixture
def cache_file(tmp_path, monkeypatch):
    """A fresh tuning cache for the test (and its subprocesses), and few candidates."""
    path = tmp_path / "tuning.sqlite3"
    monkeypatch.setenv("TREDUDA_CACHE", str(path))
    monkeypatch.setattr(incremental, "CANDIDATES", TRIED)
    return path


def operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(np.float32) for shape in SHAPES)


def test_first_calls_try_distinct_candidates_then_the_fastest_runs(cache_file):
    planned = treduda.contract_expression(EXPR, *SHAPES, tune="incremental")
    tuner = planned.kernel
    assert isinstance(tuner, IncrementalKernel) and tuner.found.startswith("searched")
    ran = []
    for call in range(TRIED + 2):
        a, b = operands(call)
        # contract() with the same shapes goes on with the same kernel, kept for the process
        result = (planned(a, b) if call % 2 == 0
                  else treduda.contract(EXPR, a, b, tune="incremental"))
        np.testing.assert_allclose(result, np.einsum(EXPR, a, b), rtol=1e-4, atol=1e-5)
        ran.append(tuner.last)
    tried = [identity(t.params) for t in ran[:TRIED]]
    assert len(set(tried)) == TRIED  # distinct candidates, the model's pick first
    assert tried == [identity(t.params) for t in tuner.trials]
    assert tuner.trials[0].predicted == min(t.predicted for t in tuner.trials)
    winner = tuner.winner
    assert winner.measured == min(t.measured for t in tuner.trials)
    assert all(identity(t.params) == identity(winner.params) for t in ran[TRIED:])
    assert tuner.timed_calls == TRIED  # the later calls are not timed

    [entry] = TuningCache(cache_file).entries()
    trials = entry.value[FIELD]["trials"]
    assert "OpenCL profiling events" in entry.value[FIELD]["device"]
    assert [t["measured"] for t in trials] == [t.measured for t in tuner.trials]
    assert all(t["measured"] > 0 for t in trials)
    # the entry's winner is the measured one; its prediction is kept apart from its time
    assert entry.value["params"] == dict(winner.params)
    assert entry.value["measured"]["seconds"] == winner.measured
    assert entry.value["seconds"] == winner.predicted
    kernel = treduda.compile(EXPR, {"i": 37, "j": 45, "k": 13})
    assert dict(kernel.params) == dict(winner.params)  # compile() starts from it too

    new = subprocess.run([sys.executable, "-c", NEW_PROCESS], capture_output=True, text=True,
                         env={**os.environ, "TREDUDA_CACHE": str(cache_file)}, check=True)
    started = json.loads(new.stdout.splitlines()[-1])
    assert started["right"] and started["timed"] == 0
    assert started["params"] == dict(winner.params)
    assert started["found"].startswith("from the tuning cache (3 of 3")


def test_a_new_process_goes_on_with_the_trials_left(cache_file):
    a, b = operands()
    first = treduda.contract_expression(EXPR, *SHAPES, tune="incremental")
    first(a, b)
    api._kept_incremental.cache_clear()  # what a new process sees: only the cache
    again = treduda.contract_expression(EXPR, *SHAPES, tune="incremental")
    assert again.kernel is not first.kernel
    assert again.kernel.found.startswith("from the tuning cache (1 of 3")
    np.testing.assert_allclose(again(a, b), np.einsum(EXPR, a, b), rtol=1e-4, atol=1e-5)
    assert identity(again.kernel.last.params) == identity(first.kernel.trials[1].params)


def test_trials_timed_on_another_device_are_run_again(cache_file):
    planned = treduda.contract_expression(EXPR, *SHAPES, tune="incremental")
    planned(*operands())
    store = TuningCache(cache_file)
    [entry] = store.entries()
    store.put(entry.key, {**entry.value, FIELD: {**entry.value[FIELD], "device": "another"}})
    api._kept_incremental.cache_clear()
    again = treduda.contract_expression(EXPR, *SHAPES, tune="incremental")
    assert again.kernel.found.startswith("searched")
    assert not any(t.done for t in again.kernel.trials)


def test_tune_is_checked_and_defaults_to_the_model_off_the_gpu(cache_file):
    assert isinstance(treduda.contract_expression(EXPR, *SHAPES).kernel, Kernel)
    with pytest.raises(ArgumentError, match="tune must be one of incremental, model"):
        treduda.contract_expression(EXPR, *SHAPES, tune="fastest")
    with pytest.raises(ArgumentError, match="backend='emulator'"):
        treduda.contract_expression(EXPR, *SHAPES, tune="incremental", backend="emulator")
    with pytest.raises(ArgumentError, match="leave strategy and params out"):
        treduda.contract_expression(EXPR, *SHAPES, tune="incremental",
                                    strategy="thread_per_element")
    with pytest.raises(ArgumentError, match="did you mean 'tune'"):
        treduda.contract(EXPR, *operands(), tuen="model")


class _Fake:
    """A kernel that returns its name and takes ``seconds``, or does not compile."""

    def __init__(self, name: str, seconds: float | None):
        self.name, self.seconds = name, seconds

    def run(self, *, backend, **values):
        return self.name

    def run_timed(self, *, backend, **values):
        if self.seconds is None:
            raise CompileError("the OpenCL compiler rejected a generated kernel", "log")
        return TimedRun(self.name, self.seconds, "fake")


def test_a_candidate_that_does_not_compile_gives_way_to_the_next():
    times = {1: None, 2: 3e-3, 3: 1e-3}
    trials = [Trial("s", {"n": n}, n * 1e-3, "fma") for n in times]
    tuner = IncrementalKernel(trials, lambda strategy, p: _Fake(f"k{p['n']}", times[p["n"]]),
                              "opencl", "fake", None, CacheKey.make(EXPR, None, "float32", "C",
                                                                    "H100"), "given")
    assert [tuner.run() for _ in range(4)] == ["k2", "k3", "k3", "k3"]
    assert tuner.trials[0].failed.startswith("the OpenCL compiler rejected")
    assert tuner.winner.params == {"n": 3} and tuner.timed_calls == 2


class _Loading(_Fake):
    """A kernel whose first launch also loads its module, as CUDA's lazy loading does."""

    def __init__(self, name: str, first: float, loaded: float):
        super().__init__(name, first)
        self.loaded = loaded

    def run_timed(self, *, backend, **values):
        timed = super().run_timed(backend=backend, **values)
        self.seconds = self.loaded
        return timed


def test_candidates_take_turns_and_keep_their_fastest(monkeypatch):
    """k1 is the faster once loaded, but its first launch is the slower: one sample each
    would pick k2."""
    monkeypatch.setattr(incremental, "SAMPLES", 2)
    kernels = {1: _Loading("k1", 5e-3, 1e-3), 2: _Loading("k2", 4e-3, 2e-3)}
    trials = [Trial("s", {"n": n}, n * 1e-3, "fma") for n in kernels]
    tuner = IncrementalKernel(trials, lambda strategy, p: kernels[p["n"]], "opencl", "fake",
                              None, CacheKey.make(EXPR, None, "float32", "C", "H100"), "given")
    assert [tuner.run() for _ in range(6)] == ["k1", "k2", "k1", "k2", "k1", "k1"]
    assert [(t.runs, t.measured) for t in tuner.trials] == [(2, 1e-3), (2, 2e-3)]
    assert tuner.timed_calls == 4 and "fastest of 2" in str(tuner.winner)


class _ReadOnly(TuningCache):
    def put(self, key, value):
        raise TredudaError(f"cannot use the tuning cache {self.path}: attempt to write a "
                           "readonly database")


def test_a_cache_that_cannot_be_written_leaves_the_results_alone(tmp_path):
    trials = [Trial("s", {"n": n}, n * 1e-3, "fma") for n in (1, 2)]
    tuner = IncrementalKernel(trials, lambda strategy, p: _Fake(f"k{p['n']}", 1e-3 / p["n"]),
                              "opencl", "fake", _ReadOnly(tmp_path / "tuning.sqlite3"),
                              CacheKey.make(EXPR, None, "float32", "C", "H100"), "given")
    with pytest.warns(CacheWarning, match="could not keep its times"):
        assert [tuner.run() for _ in range(3)] == ["k1", "k2", "k2"]


class _FakeCuda:
    """A CUDA runtime without a GPU: launches do nothing, and the events say 2 ms."""

    device = "Fake GPU (CuPy, CUDA events)"

    class _Event:
        def record(self):
            pass

        def synchronize(self):
            pass

    def active(self):
        return contextlib.nullcontext()

    def function(self, source, name, cubins=None):
        assert f"{name}(" in source
        return name

    def upload(self, launch):
        return [np.array(v, copy=True) if isinstance(v, np.ndarray) else v
                for v in launch.values]

    def call(self, function, launch, arguments):
        pass

    def download(self, array):
        return array

    def event(self):
        return self._Event()

    def elapsed(self, start, end):
        return 2e-3


def test_on_a_gpu_calls_are_tuned_by_default_and_timed_by_cuda_events(cache_file,
                                                                         monkeypatch):
    monkeypatch.setattr(cuda, "cuda_runtime", _FakeCuda)
    planned = treduda.contract_expression(EXPR, *SHAPES, backend="cuda")
    assert isinstance(planned.kernel, IncrementalKernel)
    assert planned(*operands()).shape == (37, 45)  # nothing computed: the launch is a fake
    assert planned.kernel.last.measured == 2e-3
    [entry] = TuningCache(cache_file).entries()
    assert entry.value[FIELD]["device"] == _FakeCuda.device
