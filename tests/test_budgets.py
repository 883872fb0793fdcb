"""A search's budget is work, not time (treduda/tuning/budgets.py): the same inputs give the
same pick in any process and at any load. Issue 44: under a budget of CPU seconds, three idle
processes picked GEMM 4096^3's double_buffer differently, and loaded ones picked others."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from treduda.polyhedral.lower import plan
from treduda.suites import load
from treduda.tuning.budgets import DEFAULT_BUDGET
from treduda.tuning.search import search_program

GEMM_4096 = ("C[i,j] = A[i,k]*B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, "C")
TCCG = ("tccg_01", "tccg_03", "tccg_28")  # tccg_28 searches the suggested values apart
HOG_SECONDS = 300  # a CPU-bound process ends by itself after this, if the test cannot end it


def picks() -> list[dict]:
    """The default-budget picks of GEMM 4096^3 and the :data:`TCCG` rows."""
    rows = {row.id: row for row in load("tccg_fp32")}
    problems = [GEMM_4096, *((rows[r].expression, rows[r].sizes, rows[r].layout) for r in TCCG)]
    return [dict(search_program(plan(*problem), "H100", budget=DEFAULT_BUDGET).best.params)
            for problem in problems]


def test_the_pick_is_the_same_in_another_process_beside_two_cpu_bound_ones():
    idle = picks()
    hog = f"import time\nend = time.monotonic() + {HOG_SECONDS}\nwhile time.monotonic() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]
    try:
        child = subprocess.run(
            [sys.executable, "-c", "import json, sys; sys.path.insert(0, sys.argv[1]); "
             "from test_budgets import picks; print(json.dumps(picks()))",
             str(Path(__file__).parent)], capture_output=True, text=True, check=True)
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    assert json.loads(child.stdout.splitlines()[-1]) == idle
