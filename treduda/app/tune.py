"""``treduda tune``: fill the tuning cache for many contractions at once, on a Dask cluster.

Each contraction not yet in the cache is one job (:func:`tune_case`): a worker runs the search
:func:`treduda.compile` runs (:func:`treduda.api.tuning_search`) and checks the winner on PoCL
at scaled-down sizes as ``treduda bench`` does (:func:`~treduda.app.bench.verify_scaled`). The
client alone writes the cache, as each verified result arrives (streamed by
:func:`~treduda.tuning.parallel.run_parallel`, which lets the cluster forget it then, so a
worker killed later costs only its running row), under the key and with the value compile()
uses, so a later compile() of the same problem searches nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ..api import cache_value, tuning_search
from ..errors import TredudaError
from ..model.gpus import gpu as find_gpu
from ..polyhedral.lower import plan
from ..tuning.cache import CacheKey, TuningCache
from ..tuning.parallel import Failed, run_parallel
from .bench import Case, Outcome, lost, record_search, table, verify_scaled


@dataclass(frozen=True)
class Job:
    """What a worker needs to tune one contraction (sent by pickle: plain data only)."""

    case: Case
    gpu: str
    max_nodes: int | None = None  # None: compile()'s own budget


@dataclass
class Tuned:
    """A worker's answer: the row as the bench reports it, and the cache value (None when the
    search or the verification failed, which the cache must not keep)."""

    outcome: Outcome
    value: dict[str, Any] | None


@dataclass
class Report:
    """What a tuning run did: the rows it searched, and those the cache already held."""

    outcomes: list[Outcome] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error]

    def summary(self, cache: TuningCache) -> str:
        tuned = len(self.outcomes) - len(self.failed)
        lost = (f" (NOT KEPT: the file could not be written, {cache.degraded})"
                if cache.degraded else "")
        return (f"{tuned} tuned and verified into {cache.path}{lost}, {len(self.skipped)} "
                f"skipped (already in the cache), {len(self.failed)} FAILED")


def tune_case(job: Job) -> Tuned:
    """Search one contraction as compile() does, then verify the winner scaled down; runs on a
    worker. Any exception fails this row only, recorded with its stage."""
    case = job.case
    row = case.row
    outcome = Outcome.of(case)
    stage = "search"
    try:
        started = time.perf_counter()
        program = plan(row.expression, row.sizes, row.layout, case.dtype)
        result = tuning_search(program, job.gpu, max_nodes=job.max_nodes)
        record_search(outcome, result, time.perf_counter() - started)
        stage = "verify"
        verify_scaled(outcome, result, row)
    except Exception as error:  # a failing row is reported in its row; the others go on
        outcome.fail(stage, error)
        return Tuned(outcome, None)
    return Tuned(outcome, cache_value(result, "treduda tune"))


def tune(cases: Sequence[Case], *, gpu: str = "H100", workers: int = 2,
         scheduler: str | None = None, cache: TuningCache | None = None,
         max_nodes: int | None = None, log: TextIO | None = None) -> Report:
    """Tune every case the cache does not hold yet on a cluster (see
    :func:`~treduda.tuning.parallel.run_parallel`), writing each verified result into
    ``cache`` (default: compile()'s own) as it arrives."""
    store = cache if cache is not None else TuningCache()
    target = find_gpu(gpu).name
    report = Report()
    jobs, keys, unplanned = [], [], {}
    for case in cases:
        row = case.row
        try:
            key = CacheKey.of(plan(row.expression, row.sizes, row.layout, case.dtype), target)
        except TredudaError as error:  # a row that cannot be a key cannot be a job either
            unplanned[case.name] = Outcome.of(case)
            unplanned[case.name].fail("plan", error)
            continue
        if store.get(key) is not None:
            report.skipped.append(case.name)
        else:
            jobs.append(Job(case, target, max_nodes))
            keys.append(key)

    def arrived(index: int, tuned: Tuned | Failed) -> None:
        if isinstance(tuned, Tuned) and tuned.value is not None:
            store.put(keys[index], tuned.value)

    results = run_parallel(tune_case, jobs, workers=workers, scheduler=scheduler,
                           label="tuning", done=arrived, log=log)
    searched = {job.case.name: tuned.outcome if isinstance(tuned, Tuned) else lost(job.case,
                                                                                   tuned)
                for job, tuned in zip(jobs, results, strict=True)}
    report.outcomes = [searched.get(c.name) or unplanned[c.name] for c in cases
                       if c.name not in report.skipped]
    return report


def run(cases: Sequence[Case], *, cache: TuningCache | None = None, out: TextIO | None = None,
        **options: Any) -> int:
    """Tune ``cases`` into ``cache`` (other options as :func:`tune` takes them), print the
    table of the rows searched and a summary; 1 if a row failed or the cache file could not be
    written. A damaged cache file is refused before any work: tuning is for keeping."""
    if not cases:
        raise TredudaError("no rows to tune (check --ids and --limit)")
    store = TuningCache() if cache is None else cache
    health = store.check()
    if not health.sound:
        raise TredudaError(f"the tuning cache {store.path} is not sound "
                           f"({'; '.join(health.problems)}); {health.advice(store.path)}")
    out = sys.stdout if out is None else out
    report = tune(cases, cache=store, **options)
    if report.outcomes:
        print(table(report.outcomes), file=out)
    print(report.summary(store), file=out)
    return 1 if report.failed or store.degraded else 0
