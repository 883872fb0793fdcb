"""`treduda bench --export FILE`: a suite's picks and their rivals, searched here (as `treduda
bench` searches them, in parallel with ``--workers``), written as one bundle whose entries
carry their rows' metadata, for `treduda bench --bundle FILE --gpu-time` to time on a GPU
machine without the compiler (:mod:`treduda.app.bundle_bench`).

Each row's pick is named ``suite/id`` and its rivals ``suite/id~1``, ``suite/id~2``, ... in
the order the search ranked them; a row whose search or check failed is left out and said.
A rerun takes the rows the bundle already holds from it instead of searching them again.

Several bundles are searched together, on one cluster (benchmarks/gpu_session.sh's
``prepare``: `treduda bench --export FOLDER --plan FILE`, :func:`export_suites`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..api import compile
from ..bundle import load
from ..errors import TredudaError
from ..exporting import DEFAULT_TARGETS, export
from ..kernel import Kernel, generator_version
from ..model.gpus import gpu as find_gpu
from ..tuning.budgets import BENCH_MAX_NODES
from .bench import Case, Outcome, bench


@dataclass(frozen=True)
class Planned:
    """One bundle to write: its file, its rows and how many rivals each row's pick brings."""

    path: Path
    cases: tuple[Case, ...]
    rivals: int = 2


def export_suite(cases: Sequence[Case], path: str | Path, *, rivals: int = 2,
                 **options: Any) -> dict[str, Any]:
    """Search ``cases`` (with ``rivals`` rivals each), generate every pick and rival at the
    rows' full sizes, and write them into the bundle ``path``; returns its manifest
    (``options``: :func:`export_suites`')."""
    return export_suites([Planned(Path(path), tuple(cases), rivals)], **options)[0]


def export_suites(bundles: Sequence[Planned], *, gpu: str = "H100",
                  max_nodes: int = BENCH_MAX_NODES, workers: int | None = None,
                  scheduler: str | None = None, verify: bool = True, cubins: bool = False,
                  log: TextIO | None = None) -> list[dict[str, Any]]:
    """Write each of ``bundles``; returns their manifests.

    Every row of every bundle is searched in one go (on one cluster with ``workers``: no
    worker waits for a bundle's last row), its pick verified on PoCL at scaled sizes where
    ``verify`` (the GPU run checks every entry at full size again). A row that the bundle
    already at its path holds, searched by this code generator with the same budget and
    rivals for the same GPU, is not searched again: its picks and rivals are generated again
    (the kernel store has them) from what that bundle recorded. Cubins for sm_90 are added
    only where ``cubins``: otherwise the GPU's machine compiles the sources with NVRTC, in
    parallel, when it loads the bundle."""
    log = sys.stderr if log is None else log
    target = find_gpu(gpu)
    started = time.perf_counter()
    chosen: list[dict[tuple, list[dict[str, Any]]]] = []
    fresh: list[tuple[Case, int, int]] = []  # (case, rivals, the bundle's number)
    for number, bundle in enumerate(bundles):
        chosen.append(_earlier(bundle.path, target.name, max_nodes, bundle.rivals))
        missing = [case for case in bundle.cases if _key(case) not in chosen[number]]
        fresh += [(case, bundle.rivals, number) for case in missing]
        print(f"{len(bundle.cases) - len(missing)} of {len(bundle.cases)} row(s) taken from "
              f"{bundle.path}, searched before", file=log)
    outcomes = bench([case for case, _, _ in fresh], gpu=target, max_nodes=max_nodes,
                     nvcc=False, log=log, rivals=[rivals for _, rivals, _ in fresh],
                     workers=workers, scheduler=scheduler, verify=verify) if fresh else []
    worked = [0.0] * len(bundles)  # each bundle's rows' seconds on the workers
    for (case, rivals, number), outcome in zip(fresh, outcomes, strict=True):
        worked[number] += outcome.seconds
        if outcome.error:
            print(f"{outcome.suite}/{outcome.id}: left out, FAILED at {outcome.stage}: "
                  f"{outcome.error}", file=log)
            continue
        found = [(outcome.strategy, outcome.params, outcome.predicted_seconds),
                 *((r["strategy"], r["params"], r["predicted_seconds"])
                   for r in outcome.rivals or ())]
        chosen[number][_key(case)] = [
            _row(outcome, rank, strategy, params, seconds, target.name, max_nodes, rivals)
            for rank, (strategy, params, seconds) in enumerate(found)]
    searched = time.perf_counter() - started
    print(f"searched {len(fresh)} row(s) in {searched:.0f} s", file=log)
    manifests = []
    for bundle, rows, seconds in zip(bundles, chosen, worked, strict=True):
        begun = time.perf_counter()
        manifests.append(_written(bundle, rows, cubins))
        print(f"wrote {bundle.path}: {len(manifests[-1]['kernels'])} kernel(s) of "
              f"{len(bundle.cases)} row(s), {bundle.path.stat().st_size / 2**20:.2f} MiB; its "
              f"rows took {seconds:.0f} s of the workers' time, writing it "
              f"{time.perf_counter() - begun:.0f} s", file=log)
    print(f"{len(bundles)} bundle(s) in {time.perf_counter() - started:.0f} s", file=log)
    return manifests


def _written(bundle: Planned, chosen: dict[tuple, list[dict[str, Any]]], cubins: bool
             ) -> dict[str, Any]:
    """Generate (from the kernel store, mostly) the picks and rivals ``chosen`` for
    ``bundle``'s rows and write them into its file; returns its manifest."""
    kernels: dict[str, Kernel] = {}
    metadata: dict[str, dict[str, Any]] = {}
    for case in bundle.cases:
        row = case.row
        for entry in chosen.get(_key(case), ()):
            name = f"{case.suite}/{row.id}" + (f"~{entry['rank']}" if entry["rank"] else "")
            kernels[name] = compile(row.expression, row.sizes, dtype=case.dtype,
                                    layout=row.layout, strategy=entry["strategy"],
                                    params=entry["params"], precision=case.precision)
            metadata[name] = entry
    return export(kernels, bundle.path, gpu=None, metadata=metadata,
                  targets=DEFAULT_TARGETS if cubins else ())


def _key(case: Case) -> tuple:
    """What makes two rows the same problem: suite and id, expression, sizes, dtype,
    precision, layout, and the parameters its search is held to."""
    row = case.row
    return (case.suite, row.id, row.expression, tuple(sorted(row.sizes.items())), case.dtype,
            case.precision, row.layout, tuple(sorted(case.hold)))


def _earlier(path: str | Path, gpu: str, max_nodes: int, rivals: int
             ) -> dict[tuple, list[dict[str, Any]]]:
    """The picks and rivals per row (as :func:`_key` names it) of the bundle at ``path``, where
    there is one written by this code generator, searched on the same terms; else none."""
    try:
        manifest = load(path).manifest
    except TredudaError:  # no bundle there yet, or one this treduda cannot read
        return {}
    if manifest.get("generator") != generator_version():
        return {}
    found: dict[tuple, list[dict[str, Any]]] = {}
    for entry in manifest["kernels"].values():
        meta = entry.get("metadata") or {}
        if (meta.get("model_gpu"), meta.get("max_nodes"), meta.get("rivals")) != (
                gpu, max_nodes, rivals):
            continue
        key = (meta["suite"], meta["id"], meta["expression"],
               tuple(sorted(meta["sizes"].items())), meta["dtype"], meta["precision"],
               meta["layout"], tuple(sorted((meta.get("hold") or {}).items())))
        found.setdefault(key, []).append(meta)
    return {key: sorted(metas, key=lambda m: m["rank"]) for key, metas in found.items()}


def _row(outcome: Outcome, rank: int, strategy: str, params: dict[str, Any],
         seconds: float | None, gpu: str, max_nodes: int, rivals: int) -> dict[str, Any]:
    """What a GPU run reports beside a kernel's time: its row, the kernel the search chose
    (``rank`` 0) or ranked behind it, the model's prediction, and the search's terms."""
    return {"suite": outcome.suite, "id": outcome.id, "rank": rank,
            "role": "rival" if rank else "pick", "expression": outcome.expression,
            "sizes": outcome.sizes, "dtype": outcome.dtype, "precision": outcome.precision,
            "layout": outcome.layout, "strategy": strategy, "params": params,
            "predicted_seconds": seconds, "model_gpu": gpu, "max_nodes": max_nodes,
            "rivals": rivals, "hold": outcome.hold,
            "search_seconds": outcome.search_seconds, "binding": outcome.binding,
            "verified_scaled_on_pocl": outcome.verified}

