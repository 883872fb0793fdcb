"""A budgeted search started from the winner of similar sizes, against one started cold.

    python benchmarks/search_seeds.py [--budget 0.5] [--factor 0.85] [--rows gemm,tccg_01,...]

For GEMM 4096^3 and five TCCG rows: the winner of a search at the extents scaled by
``--factor`` (what the tuning cache holds after a user ran a similar shape) seeds a search of
the real extents within ``--budget`` CPU seconds; both picks' estimates are printed as ratios to
the best a complete search found (``benchmarks/data/search_budget_complete.json``). Budgets
count CPU seconds of the searching thread, yet which nodes a budget reaches varies from run to
run on shared cores: compare several runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from treduda.polyhedral.lower import plan
from treduda.suites import load
from treduda.tuning.search import search_program

COMPLETE = Path(__file__).parent / "data" / "search_budget_complete.json"
GEMM = ("C[i,j] = A[i,k] * B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, "C")


def problem(name: str) -> tuple[str, dict[str, int], str]:
    if name == "gemm":
        return GEMM
    row = {r.id: r for r in load("tccg_fp32")}[name]
    return row.expression, dict(row.sizes), row.layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="gemm,tccg_01,tccg_03,tccg_15,tccg_28,tccg_33")
    parser.add_argument("--budget", type=float, default=0.5)
    parser.add_argument("--factor", type=float, default=0.85)
    args = parser.parse_args()
    complete = json.loads(COMPLETE.read_text())
    print(f"budget {args.budget} s; seeds searched at {args.factor}x the extents for 1.5 s")
    print(f"{'row':<10} {'cold':>7} {'seeded':>7}   (estimate / complete search's best)")
    for name in args.rows.split(","):
        expr, sizes, layout = problem(name)
        near = {k: max(1, round(v * args.factor)) for k, v in sizes.items()}
        seed = search_program(plan(expr, near, layout), budget=1.5).best.params
        program = plan(expr, sizes, layout)
        cold = search_program(program, budget=args.budget).best.prediction.seconds
        seeded = search_program(program, budget=args.budget, seeds=[seed]).best.prediction.seconds
        best = complete[name]["complete"]
        print(f"{name:<10} {cold / best:>7.3f} {seeded / best:>7.3f}")


if __name__ == "__main__":
    main()
