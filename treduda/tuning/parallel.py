"""Independent jobs run in parallel on Dask distributed, with a progress bar.

``treduda tune`` and ``treduda bench --workers`` search many contractions at once: each job is
sent to a worker process (an embedded ``LocalCluster`` by default, or the scheduler of an
existing cluster), so one search cannot slow or crash the others. Each result is taken from its
worker as it finishes and the cluster forgets it then, so a worker that dies loses only the job
it was running, which the scheduler starts again on another worker (a result left on the
worker would be computed again too); a job that raises is retried :data:`RETRIES` times.
Jobs and results travel by pickle: plain data, and a function importable by the workers. Dask
distributed is heavy, so it is an extra (``treduda[tune]``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from treduda.errors import BackendUnavailable

RETRIES = 2  # further attempts of a job that raised
REFRESH = 0.5  # seconds between redraws of the progress bar while nothing finishes
INSTALL = "pip install 'treduda[tune]'"

Job = TypeVar("Job")


@dataclass(frozen=True)
class Failed:
    """A job that raised on every attempt, or whose workers kept dying: what it raised."""

    error: str


def _imported() -> tuple[Any, Any]:
    """The ``distributed`` package and tqdm's bar, or an error that says how to install them."""
    try:
        import distributed
        from tqdm import tqdm
    except ImportError as error:
        raise BackendUnavailable(f"running searches in parallel needs Dask distributed and tqdm, "
                                 f"which are not installed ({error}): {INSTALL}") from error
    return distributed, tqdm


@contextmanager
def connected(workers: int, scheduler: str | None = None) -> Iterator[Any]:
    """A ``distributed.Client`` of the cluster at ``scheduler`` (``tcp://HOST:8786``), or of a
    ``LocalCluster`` of ``workers`` processes with one thread each, closed on leaving."""
    distributed, _ = _imported()
    cluster = None
    try:
        if scheduler is None:
            cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                               processes=True, dashboard_address=None)
        client = distributed.Client(scheduler or cluster)
    except (OSError, ValueError) as error:  # ValueError: not an address
        if cluster is not None:
            cluster.close()
        where = (f"the Dask scheduler {scheduler}: {error}; give its address as "
                 "tcp://HOST:8786" if scheduler
                 else f"a local cluster of {workers} workers: {error}")
        raise BackendUnavailable(f"cannot connect to {where}") from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def run_parallel(function: Callable[[Job], Any], jobs: Sequence[Job], *, workers: int = 2,
                 scheduler: str | None = None, label: str = "jobs",
                 done: Callable[[int, Any], None] | None = None,
                 log: TextIO | None = None) -> list[Any]:
    """``function`` applied to each of ``jobs`` on a cluster (see :func:`connected`): the
    results in the order of ``jobs``, a :class:`Failed` for each job that failed. ``done`` is
    called with a job's index and result as each one finishes, in the order they finish; a bar
    on ``log`` (stderr by default) shows how many are done, running and failed."""
    distributed, tqdm = _imported()
    results: list[Any] = [None] * len(jobs)
    if not jobs:
        return results
    with connected(workers, scheduler) as client:
        finished, index = distributed.as_completed(), {}
        for n, job in enumerate(jobs):  # no list of the futures: each is let go once done
            future = client.submit(function, job, retries=RETRIES, pure=False)
            index[future.key] = n
            finished.add(future)
        del future
        failed = 0
        stream = log or sys.stderr
        # a line every half minute into a file or a pipe (a log of updates, not of frames)
        calm = not (hasattr(stream, "isatty") and stream.isatty())
        with tqdm(total=len(jobs), desc=label, unit="job", file=stream, dynamic_ncols=True,
                  mininterval=30 if calm else 0.1) as bar:
            while not finished.is_empty():
                batch = finished.next_batch(block=False)
                for future in batch:
                    n = index[future.key]
                    if future.status == "finished":
                        results[n] = future.result()
                    else:
                        results[n] = Failed(f"{type(future.exception()).__name__}: "
                                            f"{future.exception()}")
                        failed += 1
                    future.release()  # the cluster forgets it: a dying worker cannot lose it
                    if done is not None:
                        done(n, results[n])
                    bar.update(1)
                threads = sum(client.nthreads().values())  # the workers' threads, each busy
                bar.set_postfix_str(f"running {min(len(jobs) - bar.n, threads)}, "  # with a job
                                    f"failed {failed}", refresh=False)
                if not batch:
                    time.sleep(REFRESH)
    return results
