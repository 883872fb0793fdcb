"""A first answer within a budget against the complete search (issue 28).

    python benchmarks/search_budget.py [--rows gemm,tccg_01,...] [--repeat 3]
                                       [--budget SECONDS] [--before DIR|COMMIT] [--json out]

For GEMM 4096^3 and five TCCG rows, each in a new process with an empty tuning cache: the time
of a cold ``treduda.compile`` (search and generation of the kernel; the median of ``--repeat``
runs; importing treduda and the modules its first call loads is timed apart, the ``import s``
column), how long ptxas's check (where nvcc is installed) goes on after it returned (wall and
CPU seconds: the interpreter waits for it at exit), the model's estimate of its pick, the best
estimate a complete search over the parameters' *declared* ranges finds (``budget=None``), and
their ratio. ``--before DIR`` times the same cold compile on another checkout for the "before"
columns, ``--before COMMIT`` on a commit of this repository (e.g. 389b482, the commit before
issue 40), which ``git archive`` exports to a temporary folder (either runs its own treduda,
strategies and templates, whatever this checkout's editable install maps); without it they come
from ``benchmarks/data/search_budget_before.json`` (e1c3e70, before issue 28's budgets),
measured on the development machine (2 shared cores). Timings are noisy there: compare
medians, and CPU seconds. A complete search of a TCCG row takes five to ten CPU
minutes: its best comes from ``benchmarks/data/search_budget_complete.json`` unless
``--complete`` runs them again (and stores them there; a row it lacks has no ratio then).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROWS = "gemm,tccg_01,tccg_03,tccg_15,tccg_28,tccg_33"
DATA = Path(__file__).parent / "data"
BEFORE = DATA / "search_budget_before.json"
COMPLETE = DATA / "search_budget_complete.json"  # the complete searches' best, see --complete

# Run in a new process: one cold compile, printed as JSON (its time, its pick, the estimate).
COLD = r"""
import json, os, resource, sys, time
started = time.perf_counter()
import treduda, treduda.api  # what compile's first call loads (import treduda alone: nothing)
from treduda.polyhedral.lower import plan
from treduda.suites import load
try:
    from treduda.model.gpus import gpu
    from treduda.model.model import Model
except ImportError:  # a --before checkout from before treduda/model/ (issue 40: 389b482)
    from treduda.tuning.gpus import gpu
    from treduda.tuning.model import Model
from treduda.tuning.policy import finish_background
imported = time.perf_counter() - started
name = sys.argv[1]
if name == "gemm":
    expr, sizes, layout = "C[i,j] = A[i,k]*B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, "C"
else:
    row = {r.id: r for r in load("tccg_fp32")}[name]
    expr, sizes, layout = row.expression, row.sizes, row.layout
options = {} if sys.argv[2] == "default" else {"budget": float(sys.argv[2])}
def cpu():
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
started, used = time.perf_counter(), cpu()
kernel = treduda.compile(expr, sizes, layout=layout, **options)
seconds, used = time.perf_counter() - started, cpu() - used
started, spent = time.perf_counter(), cpu()
finish_background()  # ptxas's check, in the background after compile() returned
checking, check_cpu = time.perf_counter() - started, cpu() - spent
model = Model(plan(expr, sizes, layout), gpu("H100"), kernel.strategy)
print(json.dumps({"compile": seconds, "cpu": used, "import": imported, "check": checking,
                  "check_cpu": check_cpu,
                  "params": dict(kernel.params),
                  "estimate": model.estimate(dict(kernel.params)).seconds}))
"""


def case(name: str) -> tuple[str, dict[str, int], str]:
    from treduda.suites import load

    if name == "gemm":
        return "C[i,j] = A[i,k]*B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, "C"
    row = {r.id: r for r in load("tccg_fp32")}[name]
    return row.expression, row.sizes, row.layout


def checkout(before: str, folder: Path) -> str:
    """The checkout ``--before`` names: a folder as it is, else a commit of this repository,
    which ``git archive`` exports into ``folder``."""
    if Path(before).is_dir():
        return before
    archive = subprocess.run(["git", "archive", "--format=tar", before],
                             cwd=Path(__file__).parent.parent, capture_output=True, check=False)
    if archive.returncode:
        sys.exit(f"--before {before}: no such folder, nor a commit git knows here "
                 f"({archive.stderr.decode().strip()})")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return str(folder)


def overlay(tree: str, folder: Path) -> str:
    """A folder to put on ``PYTHONPATH`` that imports treduda from the checkout ``tree``: its
    ``treduda/`` with ``strategies/`` and ``templates/`` inside, as an installation maps them
    (this checkout's editable install would map ``treduda.strategies`` to its own)."""
    package = folder / "checkout" / "treduda"
    package.mkdir(parents=True)
    for entry in Path(tree, "treduda").iterdir():
        (package / entry.name).symlink_to(entry.resolve())
    for name in ("strategies", "templates"):
        (package / name).symlink_to(Path(tree, name).resolve())
    return str(package.parent)


def cold(name: str, budget: str, tree: str | None = None) -> dict:
    """One cold compile of row ``name`` in a new process with an empty tuning cache (on the
    checkout ``tree`` when given)."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "TREDUDA_CACHE": str(Path(folder) / "tuning.sqlite3")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's installation runs
        if tree:
            env["PYTHONPATH"] = overlay(tree, Path(folder))
        done = subprocess.run([sys.executable, "-c", COLD, name, budget], env=env, cwd=folder,
                              capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def complete(name: str) -> dict:
    """The complete search over the declared ranges: its best estimate, its CPU seconds and
    its best parameters (an entry of ``search_budget_complete.json``)."""
    from treduda.polyhedral.lower import plan
    from treduda.tuning.search import search_program

    expr, sizes, layout = case(name)
    started = time.process_time()
    result = search_program(plan(expr, sizes, layout), "H100", budget=None)
    return {"complete": result.best.prediction.seconds,
            "cpu": round(time.process_time() - started, 2), "params": dict(result.best.params)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=ROWS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget", default="default",
                        help="compile()'s budget= in seconds (default: compile's own)")
    parser.add_argument("--before", help="a checkout, or a commit of this repository, to time "
                                         "the cold compile on, for 'before'")
    parser.add_argument("--only-before", action="store_true",
                        help="time only the --before checkout (and write --json)")
    parser.add_argument("--complete", action="store_true",
                        help="run the complete searches (minutes per row) instead of reading "
                             "their results from benchmarks/data, and store them there")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as exported:
        if args.before:
            args.before = checkout(args.before, Path(exported))
        report(args)


def report(args: argparse.Namespace) -> None:
    """Time, print and store the rows ``args`` ask for (``args.before``: a folder)."""
    before = json.loads(BEFORE.read_text()) if BEFORE.exists() and not args.before else {}
    known = json.loads(COMPLETE.read_text()) if COMPLETE.exists() and not args.complete else {}
    rows = []
    print(f"{'row':8} {'import s':>8} {'cold s':>6} {'check s':>7} {'cpu s':>6} "
          f"{'check cpu s':>11} {'pick ms':>8} "
          f"{'complete ms':>11} {'ratio':>6} {'complete cpu s':>14} {'before s':>8} {'cpu s':>6} "
          f"{'before pick ms':>14}")
    for name in args.rows.split(","):
        row: dict = {"row": name}
        if args.before:
            runs = [cold(name, "default", args.before) for _ in range(args.repeat)]
            before[name] = {"compile": statistics.median(r["compile"] for r in runs),
                            "cpu": statistics.median(r["cpu"] for r in runs),
                            "check": statistics.median(r["check"] for r in runs),
                            "check_cpu": statistics.median(r["check_cpu"] for r in runs),
                            "estimate": runs[0]["estimate"], "params": runs[0]["params"]}
        if args.only_before:
            row.update(before=before[name])
            rows.append(row)
            print(f"{name:8} before: {before[name]['compile']:.2f} s, {before[name]['cpu']:.2f} "
                  f"CPU s, check {before[name]['check']:.2f} s, "
                  f"{before[name]['check_cpu']:.2f} CPU s, pick "
                  f"{before[name]['estimate'] * 1e3:.4f} ms", flush=True)
            continue
        runs = [cold(name, args.budget) for _ in range(args.repeat)]
        seconds = statistics.median(r["compile"] for r in runs)
        checking = statistics.median(r["check"] for r in runs)
        check_cpu = statistics.median(r["check_cpu"] for r in runs)
        used = statistics.median(r["cpu"] for r in runs)
        imported = statistics.median(r["import"] for r in runs)
        pick = max(r["estimate"] for r in runs)  # the worst pick of the runs
        if args.complete:
            known[name] = complete(name)
        best, searched = ((known[name]["complete"], known[name]["cpu"]) if name in known
                          else (None, None))
        old = before.get(name, {})
        row.update(imported=imported, cold=seconds, check=checking, check_cpu=check_cpu, cpu=used,
                   runs=[r["compile"] for r in runs], pick=pick,
                   complete=best, ratio=pick / best if best else None, complete_cpu=searched,
                   before=old,
                   params=runs[0]["params"])
        rows.append(row)
        olds = (f"{old['compile']:8.2f} {old['cpu']:6.2f} {old['estimate'] * 1e3:14.4f}" if old
                else f"{'-':>8} {'-':>6} {'-':>14}")
        versus = (f"{best * 1e3:11.4f} {pick / best:6.3f} {searched:14.1f}" if best else
                  f"{'-':>11} {'-':>6} {'-':>14}")
        print(f"{name:8} {imported:8.2f} {seconds:6.2f} {checking:7.2f} {used:6.2f} "
              f"{check_cpu:11.2f} {pick * 1e3:8.4f} {versus} {olds}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.complete:  # the rows searched again replace theirs in the stored file
        stored = json.loads(COMPLETE.read_text()) if COMPLETE.exists() else {}
        COMPLETE.write_text(json.dumps({**stored, **known}, indent=1) + "\n")


if __name__ == "__main__":
    main()
