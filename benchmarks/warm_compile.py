"""What ``treduda.compile`` costs in a new process: cold (a fresh tuning cache: search, generate,
store) and warm (the same call in another new process: the tuning cache's entry and the
kernel store's kernel, nothing generated).

    python benchmarks/warm_compile.py [--ids gemm_4096,tccg_01,tccg_33] [--cache PATH]

Each timing is of ``compile`` alone, in a process of its own, once ``import treduda`` and the
modules its first call loads (``treduda.api``: ``import treduda`` alone loads them on first
use) are imported: that import is timed apart and printed as a column of its own, in wall and
CPU seconds, so that nothing is hidden. The first call's CPU seconds are the process's (its
background thread's too, ptxas's check running beside it) while ``compile`` ran: on a shared
machine they move less than wall time. With ``--cache`` an existing tuning cache is used, so
rows it holds are warm from the start; by default a new one is made in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

GEMM = ("C[i,j] = A[i,k] * B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, "C")

TIMED = r"""
import json, sys, time
started, cpu = time.perf_counter(), time.process_time()
import treduda, treduda.api  # what compile's first call loads (import treduda alone: nothing)
imported, imported_cpu = time.perf_counter() - started, time.process_time() - cpu
from treduda.suites import load

name = sys.argv[1]
if name == "gemm_4096":
    expr, sizes, layout = json.loads(sys.argv[2])
else:
    row = {r.id: r for r in load("tccg_fp32")}[name]
    expr, sizes, layout = row.expression, row.sizes, row.layout
started, cpu = time.perf_counter(), time.process_time()
kernel = treduda.compile(expr, sizes, layout=layout)
seconds, used = time.perf_counter() - started, time.process_time() - cpu
print(json.dumps({"import": imported, "import_cpu": imported_cpu, "seconds": seconds,
                  "cpu": used, "stored": kernel.stored is not None,
                  "strategy": kernel.strategy, "name": kernel.name}))
"""


def timed(name: str, cache: str) -> dict:
    env = {**os.environ, "TREDUDA_CACHE": cache}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's installation runs
    done = subprocess.run([sys.executable, "-c", TIMED, name, json.dumps(GEMM)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", default="gemm_4096,tccg_01,tccg_33")
    parser.add_argument("--cache", help="tuning cache to use (default: a new one)")
    args = parser.parse_args()
    cache = args.cache or os.path.join(tempfile.mkdtemp(prefix="treduda-warm-"),
                                       "tuning.sqlite3")
    print(f"tuning cache: {cache}")
    print(f"{'row':<12} {'import':>7} {'cpu':>6} {'first call':>11} {'cpu':>6} "
          f"{'new process':>12} {'cpu':>6}  {'loaded':<6}  kernel")
    for name in args.ids.split(","):
        first, warm = timed(name, cache), timed(name, cache)
        print(f"{name:<12} {first['import']:>6.3f}s {first['import_cpu']:>5.3f}s "
              f"{first['seconds']:>10.3f}s {first['cpu']:>5.3f}s {warm['seconds']:>11.3f}s "
              f"{warm['cpu']:>5.3f}s  {'yes' if warm['stored'] else 'no':<6}  "
              f"{warm['name']} ({warm['strategy']})")


if __name__ == "__main__":
    main()
