"""First calls of small contractions and programs in a new process with an empty cache (issue 44).

    python benchmarks/first_call.py [--cases ring,aomo16,chain40,gemm,opt_einsum]
                                    [--repeat 1] [--before DIR] [--json out.json]
    python benchmarks/first_call.py --stored

Each case runs ``treduda.contract`` once, in a process of its own with a fresh tuning cache, on
numpy arrays: the ring ``iab,jbc,kcd,lda`` (extents 2-5), the AO->MO transformation
``pqrs,pi,qj,rk,sl->ijkl`` at n=16, a chain of three matrices at n=40, GEMM 64x48x80, and every
expression of opt_einsum's own test list (its ``tests/test_contract.py``, extents 2-7, as its
``build_views`` makes them). It prints the first call's seconds, ``import treduda`` included
(it loads the rest on first use, where it loaded everything before), beside the same call on
another checkout: ``--before DIR`` times it there (e.g. ``git archive 389b482 | tar -x
-C DIR``, the commit before issue 44, with ``DIR/treduda/strategies`` a link to
``DIR/strategies``), else the times come from ``benchmarks/data/first_call_before.json``,
measured on the development machine (2 shared cores: compare the least of several runs).
Beside them stand the times after issue 44 (``benchmarks/data/first_call_after.json``, which
``--json`` writes) and each run's counts, which do not depend on the machine's load: kernels
generated, steps searched, and its CPU seconds. ``--stored`` prints the stored times alone.

PoCL keeps the kernels it built in a cache of its own (``POCL_CACHE_DIR``, by default under
``~/.cache``), keyed by the source: a one-kernel case costs 0.37 CPU s where PoCL has its
kernel and 0.88-0.93 where it builds it (its build about 0.46 CPU s; GEMM 64x48x80 at
fab553e). ``--pocl-cache kept`` (the default, as the stored runs had it) leaves that cache
as it is, so a case whose source changed since the machine last built it (any change to
code generation) pays the build: the 0.65 s one-kernel cases the last session measured;
``--pocl-cache empty`` gives each case an empty one, a user's very first call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BEFORE = Path(__file__).parent / "data" / "first_call_before.json"
AFTER = Path(__file__).parent / "data" / "first_call_after.json"
NAMED = {
    "ring": ("iab,jbc,kcd,lda", None),
    "aomo16": ("pqrs,pi,qj,rk,sl->ijkl", 16),
    "chain40": ("ij,jk,kl->il", 40),
    "gemm": ("ik,kj->ij", {"i": 64, "k": 48, "j": 80}),
}

# Run in a new process: one first call, printed as JSON (import and call seconds, and whether
# the result is numpy.einsum's).
FIRST = r"""
import json, sys, time
import numpy as np
from opt_einsum.testing import build_views
expr, extents = sys.argv[1], json.loads(sys.argv[2])
letters = set(expr) - set(",->")
dims = (None if extents is None else extents if isinstance(extents, dict)
        else dict.fromkeys(letters, extents))
arrays = build_views(expr, dims)
started, cpu = time.perf_counter(), time.process_time()
import treduda
imported = time.perf_counter() - started
from treduda import api
from treduda.tuning import policy
work = {"kernels": 0, "searches": 0}
def counted(name, function):
    def call(*args, **kwargs):
        work[name] += 1
        return function(*args, **kwargs)
    return call
generation = getattr(treduda, "generation", api)  # an older checkout made kernels in api
for module, name, key in ((api, "_generated", "kernels"),  # each kernel made (isl, codegen)
                          (generation, "generated", "kernels"),
                          (policy, "search_program", "searches")):  # each search of a step
    if hasattr(module, name):  # (an older checkout may lack them: no count then)
        setattr(module, name, counted(key, getattr(module, name)))
result = treduda.contract(expr, *arrays)
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
print(json.dumps({"import": imported, "first": seconds, "cpu": cpu, **work,
                  "ok": bool(np.allclose(result, np.einsum(expr, *arrays, optimize=True)))}))
"""


def cases(names: str) -> dict[str, tuple[str, object]]:
    """The cases to time: named ones, and ``opt_einsum`` for its whole test list."""
    chosen = {}
    for name in names.split(","):
        if name == "opt_einsum":
            from opt_einsum.tests.test_contract import tests

            chosen.update((expr, (expr, None)) for expr in dict.fromkeys(tests))
        else:
            chosen[name] = NAMED[name]
    return chosen


def first(expr: str, extents: object, tree: str | None = None, pocl_cache: str = "kept"
          ) -> dict:
    """One first call of ``expr`` in a new process with an empty tuning cache (on the
    checkout ``tree`` when given), PoCL's kernel cache ``kept`` as it is or ``empty``."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "TREDUDA_CACHE": str(Path(folder) / "tuning.sqlite3")}
        if pocl_cache == "empty":
            env["POCL_CACHE_DIR"] = str(Path(folder) / "pocl")
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's installation runs
        if tree:
            env["PYTHONPATH"] = tree
        done = subprocess.run([sys.executable, "-c", FIRST, expr, json.dumps(extents)],
                              env=env, cwd=folder, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _seconds(value: float | None) -> str:
    return f"{'-' if value is None else f'{value:.2f}':>8}"


def header(timing: bool) -> None:
    print(f"{'case':40} {'before s':>8} {'after s':>8}" + (f" {'now s':>8}" if timing else "")
          + f" {'cpu s':>6} {'kernels':>7} {'searches':>8}  ok")


def line(name: str, before: dict, after: dict, now: dict | None = None) -> None:
    """A case's first call before issue 44, after it (as stored), and now (as just timed,
    where given), with the counts of the run shown last (now's, else after's): kernels
    generated and steps searched, which do not depend on the machine's load, and its CPU
    seconds."""
    stored = after.get(name)
    row = (now if now is not None else stored) or {}
    cells = [_seconds(before.get(name)), _seconds(stored["first"] if stored else None)]
    if now is not None:
        cells.append(_seconds(now["first"]))
    counts = (f"{row['cpu']:>6.2f} {row['kernels']:>7} {row['searches']:>8}  {row['ok']}"
              if "cpu" in row else "")
    print(f"{name:40} {' '.join(cells)} {counts}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="ring,aomo16,chain40,gemm,opt_einsum")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the least counts")
    parser.add_argument("--before", help="a checkout to time the same first calls on")
    parser.add_argument("--only-before", action="store_true",
                        help="time only the --before checkout (--json then writes its times, "
                             "as benchmarks/data/first_call_before.json holds them)")
    parser.add_argument("--pocl-cache", choices=("kept", "empty"), default="kept",
                        help="PoCL's kernel cache as it is (the stored runs'), or empty for "
                             "each case (a user's very first call)")
    parser.add_argument("--stored", action="store_true",
                        help="time nothing: print the stored times before and after issue 44")
    parser.add_argument("--json", help="also write the rows to this file (as "
                                       "benchmarks/data/first_call_after.json holds them)")
    args = parser.parse_args()

    before = json.loads(BEFORE.read_text()) if BEFORE.exists() and not args.before else {}
    after = json.loads(AFTER.read_text()) if AFTER.exists() else {}
    header(timing=not args.stored)
    if args.stored:
        for name in after:
            if name != "note":
                line(name, before, after)
        return
    now: dict = {}
    for name, (expr, extents) in cases(args.cases).items():
        if args.before:
            before[name] = min(first(expr, extents, args.before, args.pocl_cache)["first"]
                               for _ in range(args.repeat))
        if not args.only_before:
            now[name] = min((first(expr, extents, pocl_cache=args.pocl_cache)
                             for _ in range(args.repeat)),
                            key=lambda r: r["first"])
        line(name, before, after, now.get(name, {"first": None}))
    if args.json:
        rows = ({name: before[name] for name in now or before} if args.only_before else now)
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
