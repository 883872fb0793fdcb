"""What a call to treduda.contract costs beyond its kernel, first and repeated, beside
numpy.einsum and opt_einsum.

    python benchmarks/overhead.py [--repeats 30] [--json out.json]

The first call plans: it searches (in a fresh tuning cache, so no earlier run helps),
generates the kernel and builds its OpenCL program. A repeated identical call finds the kernel
and the built program kept in the process, so it costs the run: copies to and from PoCL and
the launch. ``overhead`` is the repeated call's median minus the kernel's own time (OpenCL
profiling events). PoCL's start-up is paid once before the rows and printed apart. opt_einsum
is one of treduda's dependencies (it searches contraction paths).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

CASES = {  # name: (numpy-style subscripts, shapes, dtype)
    "gemm_64x48x80_fp32": ("ik,kj->ij", [(64, 48), (48, 80)], "float32"),
    "gemm_64x48x80_fp64": ("ik,kj->ij", [(64, 48), (48, 80)], "float64"),
    "tccg3_fp32": ("dbea,ec->abcd", [(24, 21, 19, 24), (19, 13)], "float32"),
    "dot_4096_fp64": ("i,i->", [(4096,), (4096,)], "float64"),
}


def seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def median(call: Callable[[], object], repeats: int) -> float:
    return statistics.median(seconds(call) for _ in range(repeats))


def measure(name: str, repeats: int) -> dict:
    import opt_einsum

    import treduda

    spec, shapes, dtype = CASES[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(dtype) for shape in shapes]
    row: dict = {"case": name, "expression": spec, "shapes": shapes, "dtype": dtype}
    row["treduda_first_ms"] = seconds(lambda: treduda.contract(spec, *arrays)) * 1e3
    row["treduda_repeat_ms"] = median(lambda: treduda.contract(spec, *arrays), repeats) * 1e3
    planned = treduda.contract_expression(spec, *shapes, dtype=dtype)
    row["expression_call_ms"] = median(lambda: planned(*arrays), repeats) * 1e3
    row["kernel_ms"] = planned.kernel.time("opencl", **dict(
        zip(planned.contraction.inputs, arrays, strict=True))).seconds * 1e3
    row["overhead_ms"] = row["treduda_repeat_ms"] - row["kernel_ms"]
    row["numpy_first_ms"] = seconds(lambda: np.einsum(spec, *arrays)) * 1e3
    row["numpy_repeat_ms"] = median(lambda: np.einsum(spec, *arrays), repeats) * 1e3
    row["opt_einsum_first_ms"] = seconds(lambda: opt_einsum.contract(spec, *arrays)) * 1e3
    row["opt_einsum_repeat_ms"] = median(lambda: opt_einsum.contract(spec, *arrays),
                                         repeats) * 1e3
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="calls per median")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    os.environ["TREDUDA_CACHE"] = os.path.join(tempfile.mkdtemp(prefix="treduda-overhead-"),
                                               "tuning.sqlite3")
    from treduda.run.opencl import _queue

    print(f"PoCL start-up (once per process): {seconds(_queue) * 1e3:.0f} ms")
    rows = [measure(name, args.repeats) for name in CASES]
    print(f"{'case':20} {'first':>9} {'repeat':>8} {'expr()':>8} {'kernel':>8} {'overhead':>8}"
          f"  {'numpy 1st':>9} {'repeat':>8}  {'opt_einsum 1st':>14} {'repeat':>8}   (ms)")
    for r in rows:
        print(f"{r['case']:20} {r['treduda_first_ms']:9.1f} {r['treduda_repeat_ms']:8.3f} "
              f"{r['expression_call_ms']:8.3f} {r['kernel_ms']:8.3f} {r['overhead_ms']:8.3f}  "
              f"{r['numpy_first_ms']:9.3f} {r['numpy_repeat_ms']:8.3f}  "
              f"{r['opt_einsum_first_ms']:14.3f} {r['opt_einsum_repeat_ms']:8.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
