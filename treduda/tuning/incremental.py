"""Incremental measured tuning: the model ranks, the device decides, during real use.

The model cannot separate the few best candidates of a space (the GEMM 4096³ pick measured
1.03x the fastest on an H100, its runner-up 1.5x), so with ``tune="incremental"`` the first
calls of a kernel run the search's best *distinct* candidates (the winner, then its rivals at
distinct predicted times: :func:`candidates`), generated when first needed and timed by the
device's own events around the real launch (CUDA events, or the kernels' OpenCL profiling
events on PoCL, which is a CPU's time). The candidates take turns, :data:`SAMPLES` timed calls
each, and each keeps its fastest: a module's first launch pays for loading it (CUDA loads
modules lazily), which on an H200 made the first launch of each GEMM 256³ candidate take
41-48 us against 12 us once loaded, more than the candidates differ by. Once every candidate
has its samples, every later call runs the fastest measured (cuTENSOR's incremental
autotuning). Every candidate computes the same contraction, so each call's result is right
whichever ran.

The tuning cache's entry for the contraction (:class:`~treduda.tuning.cache.CacheKey`) keeps
the trials in its ``incremental`` field, apart from the model's prediction, after every timed
call: ``{"device": ..., "trials": [{"strategy", "params", "predicted", "binding", "measured",
"failed"}, ...]}``. Once every trial has run, the entry's winner (``strategy``, ``params``,
``seconds``, ``binding``) becomes the fastest measured, with its time in ``measured``, as
``compile(measure=True)`` writes it; so a new process, and :func:`treduda.compile`, start from
the measured winner, and one that stopped midway goes on with the trials left. Trials measured
on another device are not reused: they are run again there.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..errors import ArgumentError, CompileError, StrategyError, TredudaError
from ..options import INCREMENTAL, MODEL, merged_mapping
from ..run.timing import TimedRun
from ..strategies import get as get_strategy
from .cache import CacheKey, CacheWarning, TuningCache
from .policy import Generator
from .search_result import Candidate, SearchResult, identity

CANDIDATES = 4  # distinct candidates the first calls try
SAMPLES = 3  # timed calls of each candidate, taking turns; its fastest counts
FIELD = "incremental"  # the tuning-cache entry's field that holds the trials
TIMED_BACKENDS = ("cuda", "opencl")  # backends whose launches the device's events time


def resolve_tune(tune: str | None, backend: str) -> str:
    """``tune`` as given, or its default for ``backend``: incremental on a GPU ("cuda"), the
    model's pick elsewhere (PoCL times a CPU; the emulator has no clock); ArgumentError for
    incremental tuning on a backend that cannot time its launches (:class:`~treduda.Options`
    checked the value itself)."""
    if tune is None:
        return INCREMENTAL if backend == "cuda" else MODEL
    if tune == INCREMENTAL and backend not in TIMED_BACKENDS:
        raise ArgumentError(f"tune='incremental' times launches with the device's events, "
                            f"which backend={backend!r} has not; use backend='cuda' or "
                            f"'opencl', or tune='model'")
    return tune


@dataclass(frozen=True)
class Trial:
    """One candidate of incremental tuning: its parameters, the model's prediction, and once
    it has run, the seconds its timed call took (or why it could not run)."""

    strategy: str
    params: Mapping[str, Any]
    predicted: float  # the model's estimate, in seconds
    binding: str  # the resource the model says binds it
    measured: float | None = None  # seconds of its fastest timed call, on the trials' device
    failed: str | None = None  # why it did not compile; never tried again
    runs: int = 0  # timed calls so far

    @property
    def done(self) -> bool:
        return self.failed is not None or self.runs >= SAMPLES

    @classmethod
    def of(cls, candidate: Candidate) -> Trial:
        return cls(candidate.strategy, dict(candidate.params), candidate.prediction.seconds,
                   candidate.prediction.binding)

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "params": dict(self.params),
                "predicted": self.predicted, "binding": self.binding,
                "measured": self.measured, "failed": self.failed, "runs": self.runs}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trial:
        """The trial :meth:`to_json` stored; KeyError or TypeError where it is malformed."""
        measured, failed = data["measured"], data["failed"]
        if not isinstance(data["strategy"], str) or not isinstance(data["params"], dict):
            raise TypeError("a trial's strategy is not text or its params not an object")
        if measured is not None and not isinstance(measured, (int, float)):
            raise TypeError(f"a trial's measured time {measured!r} is not a number")
        runs = data.get("runs", 0 if measured is None else SAMPLES)  # one sample: older
        if not isinstance(runs, int):
            raise TypeError(f"a trial's number of runs {runs!r} is not an integer")
        return cls(data["strategy"], dict(data["params"]), float(data["predicted"]),
                   str(data["binding"]), None if measured is None else float(measured),
                   None if failed is None else str(failed), runs)

    def __str__(self) -> str:
        params = " ".join(f"{k}={v}" for k, v in self.params.items())
        outcome = (f"measured {self.measured * 1e3:.4f} ms (fastest of {self.runs})"
                   if self.measured is not None
                   else f"failed ({self.failed})" if self.failed else "not run yet")
        return f"{self.strategy} {params}: predicted {self.predicted * 1e3:.4f} ms, {outcome}"


def candidates(result: SearchResult, n: int = CANDIDATES) -> list[Trial]:
    """The trials for ``result``: its winner, then its rivals at predicted times distinct
    from each other's (:meth:`SearchResult.rivals`: kernels that differ, not look-alikes of
    the winner), then, where there are fewer than ``n``, the next best distinct parameters."""
    chosen = [result.best, *result.rivals(n - 1)]
    seen = {c.text for c in chosen}
    for candidate in result.top(len(result.candidates)):
        if len(chosen) >= n:
            break
        if candidate.text not in seen:
            chosen.append(candidate)
            seen.add(candidate.text)
    return [Trial.of(c) for c in chosen[:n]]


class Runnable(Protocol):
    """What incremental tuning runs: a :class:`~treduda.kernel.Kernel`."""

    def run(self, *, backend: str, casting: str, arrays: Mapping[str, Any]) -> Any: ...

    def run_timed(self, *, backend: str, casting: str, arrays: Mapping[str, Any]
                  ) -> TimedRun: ...


Generate = Callable[[str, Mapping[str, Any]], Runnable]  # strategy, params -> kernel
Search = Callable[[], tuple[SearchResult, dict]]  # the search, and its tuning-cache value


def device_of(backend: str) -> str:
    """What times launches on ``backend``, as :class:`~treduda.run.timing.Timing` names it."""
    if backend == "cuda":
        from ..run.cuda import cuda_runtime

        return cuda_runtime().device
    from ..run.opencl import opencl_device

    return opencl_device()


class IncrementalKernel:
    """A contraction's kernel that tunes itself on its first calls (see the module's
    docstring): :meth:`run` takes what :meth:`Kernel.run <treduda.kernel.Kernel.run>` takes.

    ``trials`` are the candidates in the order they run; ``last`` is the trial the latest
    call ran; ``winner`` the fastest measured once every trial has run (None before).

    Safe to call from many threads at once: the trials' state is changed under a lock, and
    while it tunes, its timed calls run one at a time, so that no trial is timed against
    another (calls of the winner, once known, run side by side)."""

    def __init__(self, trials: list[Trial], generate: Generate, backend: str, device: str,
                 store: TuningCache | None, key: CacheKey, found: str):
        if not trials:
            raise StrategyError("incremental tuning needs at least one candidate")
        self._trials = list(trials)
        self._generate = generate
        self.backend = backend
        self.device = device
        self._store = store
        self._key = key
        self.found = found  # where the trials came from: a search, or the tuning cache
        self._kernels: dict[str, Runnable] = {}
        self._lock = threading.Lock()  # guards the trials and their kernels
        self._timing = threading.Lock()  # held by the one timed call at a time
        self.last: Trial | None = None
        self.timed_calls = 0  # calls of this process that ran a trial (timed)

    @classmethod
    def start(cls, problem: Generator, key: CacheKey, store: TuningCache | None, backend: str,
              search: Search, generate: Generate, n: int | None = None) -> IncrementalKernel:
        """The incremental kernel of ``problem`` on ``backend``: its trials from the tuning
        cache's entry under ``key`` where they were measured on this device (and still fit
        the program's parameter space), else from ``search`` (whose value the cache keeps,
        as compile() would, with the trials not yet run). ``problem`` plans the program only
        where a stored trial's kernel is not in the kernel store, so a new process that
        finds the trials and the winner's kernel stored starts without isl."""
        device = device_of(backend)
        entry = store.get(key) if store is not None else None
        trials = _stored(problem, key, entry, device)
        if trials is not None:
            done = sum(t.done for t in trials)
            return cls(trials, generate, backend, device, store, key,
                       f"from the tuning cache ({done} of {len(trials)} trials run)")
        result, value = search()
        trials = candidates(result, CANDIDATES if n is None else n)
        kernel = cls(trials, generate, backend, device, store, key,
                     f"searched ({result.stats.nodes_visited} nodes)")
        if store is not None:
            store.put(key, {**value, FIELD: kernel._field()})
        return kernel

    @property
    def trials(self) -> tuple[Trial, ...]:
        return tuple(self._trials)

    @property
    def winner(self) -> Trial | None:
        """The fastest measured trial once every trial has run; None before."""
        if not all(t.done for t in self._trials):
            return None
        measured = [t for t in self._trials if t.measured is not None]
        return min(measured, key=lambda t: t.measured) if measured else None

    @property
    def choice(self) -> Trial:
        """The trial the next call runs: the first not yet run, else the winner."""
        with self._lock:
            return self._choice()

    def kernel(self) -> Runnable:
        """The kernel the next call runs (generated if it is not yet)."""
        return self._kernel(self.choice)

    def run(self, *, backend: str | None = None, casting: str | None = None,
            arrays: Mapping[str, Any] | None = None, **values: Any) -> Any:
        """Run the next trial timed (recording its time here and in the tuning cache), or,
        once every trial has run, the fastest measured; returns the output, as
        :meth:`Kernel.run <treduda.kernel.Kernel.run>` does. A trial that does not compile is
        recorded as failed and the next one runs in its place."""
        if backend is not None and backend != self.backend:
            raise ArgumentError(f"this kernel tunes itself on backend {self.backend!r}; it "
                                f"cannot run on {backend!r}")
        options = {} if casting is None else {"casting": casting}
        arrays = merged_mapping(arrays, values, "arrays")
        while True:
            trial = self.choice
            if trial.done:
                self.last = trial
                return self._kernel(trial).run(backend=self.backend, **options, arrays=arrays)
            with self._timing:
                trial = self.choice  # what is left to time once the call before is timed
                if trial.done:
                    continue
                try:
                    timed = self._kernel(trial).run_timed(backend=self.backend, **options,
                                                          arrays=arrays)
                except CompileError as error:
                    self._record(trial, failed=str(error).splitlines()[0])
                    continue
                self.timed_calls += 1
                self.last = self._record(trial, seconds=timed.seconds)
                return timed.result

    def _choice(self) -> Trial:
        pending = [t for t in self._trials if not t.done]
        if pending:  # the candidates take turns: the first of those timed least often
            return min(pending, key=lambda t: t.runs)
        winner = self.winner
        if winner is None:
            raise CompileError("no candidate of incremental tuning compiled",
                               "\n".join(str(t) for t in self._trials))
        return winner

    def _kernel(self, trial: Trial) -> Runnable:
        """``trial``'s kernel, generated once; the others are let go once the winner is
        known."""
        name = identity(trial.params)
        with self._lock:
            kernel = self._kernels.get(name)
        if kernel is None:  # generated outside the lock: the generator makes each once
            kernel = self._generate(trial.strategy, trial.params)
            with self._lock:
                self._kernels.setdefault(name, kernel)
        return kernel

    def _record(self, trial: Trial, seconds: float | None = None,
                failed: str | None = None) -> Trial:
        """``trial`` after a timed call of ``seconds`` (its fastest kept) or a ``failed``
        compilation, kept here and in the tuning cache."""
        with self._lock:
            position = next(n for n, t in enumerate(self._trials)
                            if identity(t.params) == identity(trial.params))
            before = self._trials[position]
            outcome = replace(before, failed=failed) if failed is not None else replace(
                before, runs=before.runs + 1,
                measured=seconds if before.measured is None else min(before.measured, seconds))
            self._trials[position] = outcome
            winner = self.winner
            if winner is not None:
                keep = identity(winner.params)
                self._kernels = {k: v for k, v in self._kernels.items() if k == keep}
            field = self._field()
        self._store_trials(field, winner)
        return outcome

    def _field(self) -> dict[str, Any]:
        return {"device": self.device, "trials": [t.to_json() for t in self._trials]}

    def _store_trials(self, field: dict[str, Any], winner: Trial | None) -> None:
        """The trials into the tuning cache's entry, and the measured winner in place of the
        model's once every trial has run. A cache that cannot be written is reported: the
        call's result stands, and the times are kept in this process only."""
        if self._store is None:
            return
        try:
            self._store.put(self._key, self._entry(self._store.get(self._key) or {}, field,
                                                   winner))
        except TredudaError as error:
            warnings.warn(f"incremental tuning could not keep its times for {self._key}: "
                          f"{error}", CacheWarning, stacklevel=4)

    def _entry(self, stored: dict[str, Any], field: dict[str, Any],
               winner: Trial | None) -> dict[str, Any]:
        """The cache's entry ``stored`` with the trials' ``field`` and, once known, the
        measured ``winner`` as the entry's winner (its prediction kept apart from its time)."""
        value = {**stored, FIELD: field}
        if winner is not None:
            found = str(value.get("found", "by contract()")).split("; then measured")[0]
            value.update(strategy=winner.strategy, params=dict(winner.params),
                         seconds=winner.predicted, binding=winner.binding,
                         measured={"seconds": winner.measured, "device": self.device},
                         found=f"{found}; then measured incrementally, the fastest of "
                               f"{len(field['trials'])} candidates timed on their first calls")
        elif "strategy" not in value:  # the entry went away: the first trial stands in
            first = self._trials[0]
            value.update(strategy=first.strategy, params=dict(first.params),
                         seconds=first.predicted, binding=first.binding, measured=None,
                         found="by contract(tune='incremental')")
        return value

    def __repr__(self) -> str:
        winner = self.winner
        state = (f"running the fastest measured: {winner}" if winner is not None else
                 f"{sum(t.done for t in self._trials)} of {len(self._trials)} candidates "
                 f"timed")
        return f"IncrementalKernel({str(self._key)!r} on {self.device}, {state})"


def _stored(problem: Generator, key: CacheKey, entry: dict | None,
            device: str) -> list[Trial] | None:
    """The trials of the cache's ``entry`` if they were measured on ``device`` and each has
    its kernel in the kernel store or still fits the program's parameter space; None
    otherwise (a malformed or stale field is reported)."""
    field = (entry or {}).get(FIELD)
    if not isinstance(field, dict) or field.get("device") != device:
        return None
    try:
        trials = [Trial.from_json(t) for t in field["trials"]]
        for trial in trials:
            if not problem.known(trial.strategy, trial.params):
                program = problem.program
                chosen = get_strategy(trial.strategy)
                chosen.space(program).check({**chosen.defaults(program), **trial.params})
    except (KeyError, TypeError, ValueError, StrategyError) as error:
        warnings.warn(f"ignoring the incremental tuning cached for {key}: {error!r}",
                      CacheWarning, stacklevel=3)
        return None
    return trials or None
