"""The tensor-core model's registers per thread beside ptxas's: GEMM 1024^3 in float16,
bfloat16, TF32, 3xTF32 and float64 over warp tilings, fragment depths, stages and
asynchronous copies, and TCCG rows 3, 9 and 19 at their default tiles. Needs nvcc, no GPU.

    python benchmarks/tensorcore_registers.py [--arch sm_90] [--gpu H100]

Prints each candidate's estimate, ptxas's registers (and spills) and the relative error, then
the median and mean |error| and the signed mean per precision. Takes a few minutes: every
candidate is generated, then compiled in one batch per core.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import treduda
from treduda.errors import StrategyError
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.run.nvcc import compile_cuda_batch
from treduda.suites import load

GEMM, SIZES = "C[i,j] = A[i,k] * B[k,j]", {"i": 1024, "j": 1024, "k": 1024}
KINDS = (("float16", "highest"), ("bfloat16", "highest"), ("float32", "tf32"),
         ("float32", "3xtf32"), ("float64", "highest"))
# warps_m, warps_n, frags_m, frags_n; the first two with every buffering, the others with two
TILINGS = ((2, 2, 2, 2), (1, 1, 4, 2), (1, 1, 1, 1), (2, 2, 2, 4), (4, 2, 2, 2), (2, 4, 1, 1))
BUFFERING = ((1, False), (1, True), (2, False), (2, True))  # stages, async_copy
TCCG = ("tccg_03", "tccg_09", "tccg_19")


def candidates() -> list[tuple[str, str, dict, str, str, str, dict | None]]:
    """(name, expression, sizes, layout, dtype, precision, parameters or None: defaults)."""
    found = []
    for dtype, precision in KINDS:
        for n, (wm, wn, fm, fn) in enumerate(TILINGS):
            for stages, copies in BUFFERING if n < 2 else BUFFERING[1:3]:
                found.append(("gemm", GEMM, SIZES, "C", dtype, precision, {
                    "warps_m": wm, "warps_n": wn, "frags_m": fm, "frags_n": fn, "frags_k": 2,
                    "stages": stages, "split": 1, "async_copy": copies}))
        for depth in (1, 4):  # 2 x 2 warps of 2 x 2 fragments, single-buffered, cp.async
            found.append(("gemm", GEMM, SIZES, "C", dtype, precision, {
                "warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 2, "frags_k": depth,
                "stages": 1, "split": 1, "async_copy": True}))
    rows = {r.id: r for r in load("tccg_fp32")}
    for name in TCCG:
        row = rows[name]
        found += [(name, row.expression, row.sizes, row.layout, dtype, precision, None)
                  for dtype, precision in KINDS]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--gpu", default="H100", help="the GPU whose model estimates")
    args = parser.parse_args(argv)
    kernels = []
    for name, expression, sizes, layout, dtype, precision, params in candidates():
        try:
            kernels.append((name, treduda.compile(
                expression, sizes, dtype=dtype, precision=precision, layout=layout,
                strategy="tensorcore", params=params, cache=False)))
        except StrategyError:  # e.g. shared tiles beyond a block's budget
            continue
    reports = compile_cuda_batch([k.cuda_source for _, k in kernels], args.arch)
    errors: dict[str, list[float]] = {}
    print(f"{'case':8} {'precision':9} {'tiling':18} {'buffers':9} {'estimate':>8} "
          f"{'ptxas':>5} {'error':>6}")
    for (name, k), report in zip(kernels, reports, strict=True):
        compiled = next(r for r in report if r.kernel == k.name)
        estimate = model_of(k.program, gpu(args.gpu), "tensorcore").registers(k.params)[0]
        p, kind = k.params, k.dtype if k.precision == "highest" else k.precision
        error = estimate / compiled.registers - 1
        errors.setdefault(kind, []).append(error)
        tiling = (f"{p['warps_m']}x{p['warps_n']} w {p['frags_m']}x{p['frags_n']} f "
                  f"k{p['frags_k']}")
        buffers = f"{p['stages']} st" + (
            " cp" if p["async_copy"] else "")
        spills = f"  ({compiled.spill_bytes} B spilled)" if compiled.spill_bytes else ""
        print(f"{name:8} {kind:9} {tiling:18} {buffers:9} {estimate:8d} "
              f"{compiled.registers:5d} {error:+6.0%}{spills}")
    every = [e for kind in errors.values() for e in kind]
    print(f"\n{len(every)} candidates: |error| median {statistics.median(map(abs, every)):.1%}, "
          f"mean {statistics.fmean(map(abs, every)):.1%}, worst {max(map(abs, every)):.1%}")
    for kind, found in errors.items():
        print(f"  {kind:9} |error| mean {statistics.fmean(map(abs, found)):.1%}, "
              f"signed mean {statistics.fmean(found):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
