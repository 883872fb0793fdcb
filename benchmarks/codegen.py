"""How long code generation takes, and what nvcc makes of the result, for a benchmark suite.

    python benchmarks/codegen.py [--suite tccg_fp32] [--symbolic] [--json out.json]

Prints one row per contraction: generation time (parse, lower, schedule, AST, print), the
launch geometry, and registers/spills from ptxas when nvcc is installed (one batched call).
"""

from __future__ import annotations

import argparse
import json
import time

import treduda
from treduda.run.nvcc import compile_cuda_batch, nvcc_available
from treduda.suites import SUITES, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="tccg_fp32")
    parser.add_argument("--symbolic", action="store_true", help="sizes as kernel arguments")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()

    rows, kernels = [], []
    for row in load(args.suite):
        started = time.perf_counter()
        kernel = treduda.compile(row.expression, row.sizes, layout=row.layout,
                                 dtype=SUITES[args.suite].dtype, symbolic=args.symbolic)
        _ = kernel.cuda_source
        seconds = time.perf_counter() - started
        kernels.append(kernel)
        rows.append({"id": row.id, "expression": row.expression, "generate_ms": seconds * 1e3,
                     "grid": kernel.grid_for(row.sizes), "block": kernel.block})
    if nvcc_available():
        for record, reports in zip(rows, compile_cuda_batch([k.cuda_source for k in kernels]),
                                   strict=True):
            record.update(registers=reports[0].registers, spill_bytes=reports[0].spill_stores)

    print(f"{'id':28} {'generate':>9} {'regs':>5} {'spill':>6}  grid x block")
    for r in rows:
        print(f"{r['id']:28} {r['generate_ms']:7.0f}ms {r.get('registers', '-'):>5} "
              f"{r.get('spill_bytes', '-'):>6}  {r['grid']} x {r['block']}")
    total = sum(r["generate_ms"] for r in rows)
    print(f"{len(rows)} kernels generated in {total / 1e3:.1f} s "
          f"(mean {total / len(rows):.0f} ms)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
