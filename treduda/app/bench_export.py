"""`treduda bench --export FILE`: a suite's picks and their rivals, searched here (as `treduda
bench` searches them, in parallel with ``--workers``), written as one bundle whose entries
carry their rows' metadata, for `treduda bench --bundle FILE --gpu-time` to time on a GPU
machine without the compiler (:mod:`treduda.app.bundle_bench`).

Each row's pick is named ``suite/id`` and its rivals ``suite/id~1``, ``suite/id~2``, ... in
the order the search ranked them; a row whose search or check failed is left out and said.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..api import compile
from ..exporting import export
from ..kernel import Kernel
from ..tuning.budgets import BENCH_MAX_NODES
from ..tuning.gpus import gpu as find_gpu
from .bench import Case, Outcome, bench


def export_suite(cases: Sequence[Case], path: str | Path, *, gpu: str = "H100",
                 max_nodes: int = BENCH_MAX_NODES, rivals: int = 2,
                 workers: int | None = None, scheduler: str | None = None,
                 log: TextIO | None = None) -> dict[str, Any]:
    """Search ``cases`` (with ``rivals`` rivals each), generate every pick and rival at the
    rows' full sizes, and write them into the bundle ``path``; returns its manifest."""
    log = sys.stderr if log is None else log
    target = find_gpu(gpu)
    started = time.perf_counter()
    outcomes = bench(cases, gpu=target, max_nodes=max_nodes, nvcc=False, log=log,
                     rivals=rivals, workers=workers, scheduler=scheduler)
    kernels: dict[str, Kernel] = {}
    metadata: dict[str, dict[str, Any]] = {}
    for case, outcome in zip(cases, outcomes, strict=True):
        if outcome.error:
            print(f"{outcome.suite}/{outcome.id}: left out, FAILED at {outcome.stage}: "
                  f"{outcome.error}", file=log)
            continue
        row = case.row
        choices = [(outcome.strategy, outcome.params, outcome.predicted_seconds),
                   *((r["strategy"], r["params"], r["predicted_seconds"])
                     for r in outcome.rivals or ())]
        for rank, (strategy, params, seconds) in enumerate(choices):
            name = f"{case.suite}/{row.id}" + (f"~{rank}" if rank else "")
            kernels[name] = compile(row.expression, row.sizes, dtype=case.dtype,
                                    layout=row.layout, strategy=strategy, params=params,
                                    precision=case.precision)
            metadata[name] = _row(outcome, rank, seconds, target.name)
    manifest = export(kernels, path, gpu=None, metadata=metadata)
    print(f"wrote {path}: {len(kernels)} kernel(s) of {len(cases)} row(s) in "
          f"{time.perf_counter() - started:.0f} s, {Path(path).stat().st_size / 2**20:.2f} MiB",
          file=log)
    return manifest


def _row(outcome: Outcome, rank: int, seconds: float | None, gpu: str) -> dict[str, Any]:
    """What a GPU run reports beside a kernel's time: its row, and the model's prediction."""
    return {"suite": outcome.suite, "id": outcome.id, "rank": rank,
            "role": "rival" if rank else "pick", "expression": outcome.expression,
            "sizes": outcome.sizes, "dtype": outcome.dtype, "precision": outcome.precision,
            "layout": outcome.layout, "predicted_seconds": seconds, "model_gpu": gpu,
            "search_seconds": outcome.search_seconds, "binding": outcome.binding,
            "verified_scaled_on_pocl": outcome.verified}
