"""`treduda tune` (issue 28): a suite searched on a Dask LocalCluster, a worker killed mid-run
without losing a row, a rerun that searches nothing, and a compile() that finds every result
under its own key. One tuning run of four small rows on two workers serves every test."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections import Counter
from contextlib import suppress

import numpy as np
import pytest

import treduda
from treduda.app import bench, cli
from treduda.app.bench import Case
from treduda.app.tune import tune
from treduda.errors import BackendUnavailable
from treduda.model.gpus import gpu as find_gpu
from treduda.polyhedral.lower import plan
from treduda.suites import Row, rows
from treduda.tuning.cache import CacheKey, TuningCache
from treduda.tuning.parallel import run_parallel

distributed = pytest.importorskip("distributed", reason="pip install 'treduda[tune]'")

# Sizes past a small problem's (whose first good candidate is taken at once, in a blink), so
# that each row is searched and a worker is still busy with its second row when the first
# result reaches the cache, where the fixture kills it
SUITE = """id\texpression\tsizes\tsource
gemm\tC[i,j]=A[i,k]*B[k,j]\ti=400,j=360,k=200\ttest
tccg\tC[a,b,c]=A[b,d,a]*B[d,c]\ta=96,b=80,c=48,d=64\ttest, col-major
batched\tC[b,i,j]=A[b,i,k]*B[b,k,j]\tb=16,i=170,j=128,k=90\ttest
outer\tC[i,j]=x[i]*y[j]\ti=2900,j=4000\ttest
"""
CASES = [Case(row, "float32", "test") for row in rows(SUITE)]
WORKERS = 2
BUDGET = 100  # nodes of the bench's search


def _key(case: Case) -> CacheKey:
    row = case.row
    return CacheKey.of(plan(row.expression, row.sizes, row.layout, case.dtype),
                       find_gpu("H100").name)


def _finished(dask_scheduler) -> int:
    """Jobs the scheduler holds finished: none once the client has taken their results."""
    return sum(task.state == "memory" for task in dask_scheduler.tasks.values())


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The four rows tuned on a cluster of two workers, one of which is killed (os._exit)
    while it runs a job, after it finished one whose result reached the cache; and how many
    times each job finished on a worker, from the scheduler's log."""
    path = tmp_path_factory.mktemp("tune") / "tuning.sqlite3"
    cluster = distributed.LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    killer = distributed.Client(cluster)
    killed: list[str] = []

    def kill_a_busy_worker_that_finished_a_job() -> None:
        watched = TuningCache(path)
        while not len(watched):
            time.sleep(0.1)
        deadline = time.monotonic() + 3  # a result the client keeps stays on its worker
        while killer.run_on_scheduler(_finished) and time.monotonic() < deadline:
            time.sleep(0.05)
        ran = killer.run(lambda dask_worker: dask_worker.state.executed_count)
        busy = [worker for worker, keys in killer.processing().items() if keys and ran[worker]]
        killed.extend(busy[:1])
        with suppress(distributed.comm.CommClosedError):  # the worker drops it as it dies
            killer.run(os._exit, 1, workers=busy[:1])

    thread = threading.Thread(target=kill_a_busy_worker_that_finished_a_job, daemon=True)
    thread.start()
    log = io.StringIO()
    try:
        report = tune(CASES, scheduler=cluster.scheduler_address, cache=TuningCache(path),
                      log=log)
        thread.join(timeout=10)
        workers = list(killer.scheduler_info()["workers"])  # the killed one was replaced
        finished = Counter(t.key for t in cluster.scheduler.transition_log
                           if str(t.key).startswith("tune_case") and t.finish == "memory")
    finally:
        killer.close()
        cluster.close()
    return path, report, log.getvalue(), [w for w in killed if w not in workers], finished


def test_a_killed_worker_loses_no_row(tuned):
    path, report, bar, killed = tuned[:4]
    assert len(killed) == 1, "a worker running a job was killed (and replaced)"
    assert not report.failed, [o.error for o in report.failed]
    assert [o.id for o in report.outcomes] == [c.name for c in CASES]
    assert all(o.verified and o.verified_params for o in report.outcomes)
    assert all(o.max_error is not None and o.max_error < 1e-3 for o in report.outcomes)
    cache = TuningCache(path)
    assert len(cache) == len(CASES)
    for case, outcome in zip(CASES, report.outcomes, strict=True):
        value = cache.get(_key(case))
        assert value["strategy"] == outcome.strategy and value["params"] == outcome.params
        assert value["seconds"] == outcome.predicted_seconds
        assert value["binding"] == outcome.binding and value["measured"] is None
    assert f"{len(CASES)}/{len(CASES)}" in bar and "failed 0" in bar, bar


def test_a_killed_worker_recomputes_no_finished_row(tuned):
    """The killed worker had finished a row before: the client took that result as it
    finished and the cluster let it go, so only the row it was running runs again."""
    finished = tuned[4]
    assert len(finished) == len(CASES) and set(finished.values()) == {1}, finished


def test_a_rerun_searches_nothing(tuned, capsys):
    path = tuned[0]
    suite = path.parent / "suite.tsv"
    suite.write_text(SUITE)
    assert cli.main(["tune", "--file", str(suite), "--cache", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"0 tuned and verified into {path}, {len(CASES)} skipped" in out, out


def test_compile_uses_the_tuned_entries_without_searching(tuned, monkeypatch):
    path, report = tuned[:2]

    def no_search(*args, **kwargs):
        raise AssertionError("compile() searched a problem that was tuned")

    monkeypatch.setattr(treduda.tuning.policy, "search_program", no_search)
    for case, outcome in zip(CASES, report.outcomes, strict=True):
        row = case.row
        kernel = treduda.compile(row.expression, row.sizes, layout=row.layout,
                                 cache=TuningCache(path))
        assert (kernel.strategy, kernel.params) == (outcome.strategy, outcome.params)
    assert np.isfinite(kernel.verify().max_error)  # the last one, run on PoCL


def test_compile_writes_what_tune_writes(tuned, tmp_path):
    """compile()'s own search of a row leaves the entry tune left: same key, same value, but
    for who ``found`` it."""
    path = tuned[0]
    case = CASES[0]
    row = case.row
    own = TuningCache(tmp_path / "own.sqlite3")
    treduda.compile(row.expression, row.sizes, layout=row.layout, cache=own)
    mine, theirs = own.get(_key(case)), TuningCache(path).get(_key(case))
    assert mine.pop("found").startswith("by compile(), ")
    assert theirs.pop("found").startswith("by treduda tune, ")
    assert mine == theirs


@pytest.mark.parametrize("arguments, message", [
    (["--ids", "tccg_01,nope"], "no row nope in suite tccg_fp32"),
    (["--limit", "0"], "no rows to tune"),
    (["--workers", "0"], "at least 1 worker"),
    (["--file", "{tmp}/missing.tsv"], "cannot read"),
    (["--file", "{tmp}/bad.tsv"], "expected the tab-separated columns id, expression, sizes"),
    (["--file", "{tmp}/bad.tsv", "--suite", "tc"], "not allowed with argument"),
    (["--limit", "1", "--cache", "{tmp}/garbage.sqlite3"], "garbage.sqlite3 is not sound"),
])
def test_cli_tune_reports_bad_arguments(arguments, message, tmp_path, capsys):
    (tmp_path / "bad.tsv").write_text("id\texpression\tsizes\nx\tC[i]=A[i]\ti:4\n")
    (tmp_path / "garbage.sqlite3").write_bytes(b"x" * 5000)
    arguments = [a.format(tmp=tmp_path) for a in arguments]
    with suppress(SystemExit):  # argparse's own errors exit
        assert cli.main(["tune", *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_row_that_does_not_parse_fails_alone(tuned):
    path = tuned[0]
    bad = Case(Row("bad", "C[i,j] = A[i,k) * B[k,j]", {"i": 4, "j": 4, "k": 4}, "C", "test"))
    report = tune([bad, CASES[0]], cache=TuningCache(path))  # the good row is cached: no cluster
    assert report.skipped == [CASES[0].name]
    assert [(o.id, o.stage) for o in report.failed] == [("bad", "plan")]
    assert "ParseError" in report.failed[0].error


# The bench's rows at about a tenth of the tuning rows' sizes: those are sized for the
# fixture's kill (a search still running), which the bench on workers does not need
SMALL = """id\texpression\tsizes\tsource
gemm\tC[i,j]=A[i,k]*B[k,j]\ti=40,j=36,k=20\ttest
tccg\tC[a,b,c]=A[b,d,a]*B[d,c]\ta=12,b=10,c=8,d=6\ttest, col-major
"""


@pytest.mark.slow
def test_bench_runs_its_rows_on_workers():
    out, log = io.StringIO(), io.StringIO()
    cases = [Case(row, "float32", "test") for row in rows(SMALL)]
    code = bench.run(cases, max_nodes=BUDGET, nvcc=False, out=out, log=log, workers=WORKERS)
    assert code == 0, out.getvalue()
    assert out.getvalue().startswith("id ") and "2/2 verified" in out.getvalue()
    assert "bench: 100%" in log.getvalue() and "failed 0" in log.getvalue()


def test_a_job_that_raises_is_reported_not_fatal():
    log = io.StringIO()
    results = run_parallel(int, ["7", "not a number"], workers=1, log=log)
    assert results[0] == 7
    assert "ValueError" in results[1].error and "not a number" in results[1].error
    assert "failed 1" in log.getvalue()


def test_without_distributed_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed now fails
    with pytest.raises(BackendUnavailable, match=r"treduda\[tune\]"):
        run_parallel(int, ["1"])
