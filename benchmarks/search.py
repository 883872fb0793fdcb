"""Branch and bound against exhaustive enumeration of the same space (issue #4).

    python benchmarks/search.py [--gpu H100] [--cases gemm,tccg_01,tccg_13,tccg_15]
                                [--budget 3000] [--json out]

For GEMM 4096^3 fp32 and three TCCG contractions at their full sizes, prints the space size,
nodes visited, candidates scored (and their share of the space), search and exhaustive times,
whether both found the same best candidate, and the winner's prediction; then what a search
stopped after ``--budget`` nodes (as compile() and the bench stop theirs) and polished by local
search predicts, as a multiple of the optimum. Exhaustive enumeration scores every candidate,
so this takes minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from treduda.polyhedral.lower import plan
from treduda.suites import load
from treduda.tuning.search import Searcher

GEMM = ("gemm_4096", "C[i,j] = A[i,k]*B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, "C")


def cases(names: list[str]) -> list[tuple[str, str, dict[str, int], str]]:
    rows = {row.id: row for row in load("tccg_fp32")}
    chosen = []
    for name in names:
        if name == "gemm":
            chosen.append(GEMM)
        else:
            row = rows[name]
            chosen.append((row.id, row.expression, row.sizes, row.layout))
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H100")
    parser.add_argument("--cases", default="gemm,tccg_01,tccg_13,tccg_15")
    parser.add_argument("--budget", type=int, default=3000,
                        help="the node budget of the budgeted search (default 3000)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()

    rows = []
    header = (f"{'case':10} {'space':>8} {'visited':>8} {'scored':>7} {'share':>7} "
              f"{'search s':>8} {'exhaust s':>9} {'same':>5} {'budget':>6}  winner")
    print(header)
    for name, expression, sizes, layout in cases(args.cases.split(",")):
        print(f"  {name}: searching...", file=sys.stderr)
        searcher = Searcher(plan(expression, sizes, layout), args.gpu)
        started = time.perf_counter()
        found = searcher.branch_and_bound()
        searched = time.perf_counter() - started
        print(f"  {name}: enumerating the space...", file=sys.stderr)
        started = time.perf_counter()
        reference = searcher.exhaustive()
        enumerated = time.perf_counter() - started
        budgeted = searcher.branch_and_bound(max_nodes=args.budget)
        size = reference.stats.space_size
        row = {"case": name, "expression": expression, "space": size,
               "visited": found.stats.nodes_visited, "scored": found.stats.candidates_scored,
               "share": found.stats.candidates_scored / size, "search_seconds": searched,
               "exhaustive_seconds": enumerated,
               "same_best": found.best.params == reference.best.params,
               "budgeted_over_optimum": (budgeted.best.prediction.seconds
                                         / reference.best.prediction.seconds),
               "predicted_seconds": found.best.prediction.seconds,
               "gflops": found.best.prediction.gflops, "binding": found.best.prediction.binding,
               "params": found.best.params}
        rows.append(row)
        print(f"{name:10} {size:8} {row['visited']:8} {row['scored']:7} {row['share']:7.3%} "
              f"{searched:8.2f} {enumerated:9.1f} {str(row['same_best']):>5} "
              f"{row['budgeted_over_optimum']:5.2f}x  "
              f"{found.best.prediction}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
