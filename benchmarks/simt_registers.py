"""The SIMT model's registers per thread beside ptxas's (issue 40): the picks and rivals of the
H200 calibration file, the SIMT economy table's picks (GEMM 4096^3 and the TCCG fp32 rows), and
random candidates of the tiled+staged search spaces of GEMM and TCCG rows. Needs nvcc, no GPU.

    python benchmarks/simt_registers.py [--random 8] [--seed 0] [--arch sm_90] [--gpu H200]
                                        [--json FILE]

Prints each kernel's estimate, ptxas's registers (and spills) and the difference, then the
median |difference| over all kernels and over each half (kernels alternate between halves in
a fixed order, so a constant calibrated on one is judged on the other). ptxas's count is
compared where it spills nothing: a spilling kernel holds exactly the cap, which says nothing
of what its loop would hold. Takes several minutes: every kernel is generated, then compiled in
one batch per core.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

import treduda
from treduda.errors import StrategyError
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.strategy import get as get_strategy
from treduda.run.nvcc import compile_cuda_batch
from treduda.suites import load

DATA = Path(__file__).parent / "data"
STRATEGY = "tiled+staged"
# search spaces sampled at random: GEMM 4096^3 and TCCG rows of different shapes
SAMPLED = ("gemm_4096", "tccg_01", "tccg_04", "tccg_09", "tccg_13", "tccg_19", "tccg_25",
           "tccg_33", "tccg_41", "tccg_46")


def _suite_rows() -> dict:
    return {r.id: r for suite in ("gemm", "tccg_fp32") for r in load(suite)}


def candidates(sampled: int, seed: int) -> list[tuple[str, str, dict, str, str, dict]]:
    """(name, expression, sizes, layout, dtype, parameters) of every kernel compared."""
    found = []
    h200 = json.loads((DATA / "h200_measured_2026-11-26.json").read_text())
    for row in h200["rows"]:
        for timed in (row, *(row.get("rivals") or ())):
            if timed["strategy"] == STRATEGY:
                found.append((timed["id"], timed["expression"], timed["sizes"],
                              timed["layout"], timed["dtype"], timed["params"]))
    suite = _suite_rows()
    economy = json.loads((DATA / "simt_economy_after.json").read_text())
    for name, figures in economy.items():
        row = suite[name]
        if figures.get("pick") == STRATEGY:
            found.append((f"economy:{name}", row.expression, row.sizes, row.layout,
                          "float32", figures["params"]))
    rng = random.Random(seed)
    for name in SAMPLED:
        row = suite[name]
        kernel = treduda.compile(row.expression, row.sizes, layout=row.layout,
                                 strategy=STRATEGY, cache=False)
        space = get_strategy(STRATEGY).space(kernel.program)
        found += [(f"random:{name}:{n}", row.expression, row.sizes, row.layout, "float32",
                   space.sample(rng)) for n in range(sampled)]
    return found


def measure(sampled: int, seed: int, arch: str, target: str) -> list[dict]:
    """Each kernel's estimate beside ptxas's registers and spills."""
    kernels = []
    for name, expression, sizes, layout, dtype, params in candidates(sampled, seed):
        try:
            kernels.append((name, treduda.compile(expression, sizes, dtype=dtype,
                                                  layout=layout, strategy=STRATEGY,
                                                  params=params, cache=False)))
        except StrategyError:  # parameters the current strategy refuses
            continue
    reports = compile_cuda_batch([k.cuda_source for _, k in kernels], arch)
    models: dict[tuple, object] = {}
    rows = []
    for (name, k), report in zip(kernels, reports, strict=True):
        compiled = next(r for r in report if r.kernel == k.name)
        key = (k.expression, tuple(sorted(k.sizes.items())), k.layout, k.dtype)
        if key not in models:
            models[key] = model_of(k.program, gpu(target), STRATEGY)
        estimate, spilled = models[key].registers(k.params)
        rows.append({"name": name, "params": dict(k.params), "estimate": estimate,
                     "spilled": spilled, "ptxas": compiled.registers,
                     "spill_bytes": compiled.spill_bytes})
    return rows


def summary(rows: list[dict]) -> str:
    """The median |estimate - ptxas| over the kernels ptxas does not spill, and per half."""
    clean = [r for r in rows if not r["spill_bytes"]]
    lines = []
    for label, part in (("all", clean), ("half 1", clean[0::2]), ("half 2", clean[1::2])):
        if not part:
            continue
        diffs = [r["estimate"] - r["ptxas"] for r in part]
        relative = [abs(r["estimate"] / r["ptxas"] - 1) for r in part]
        lines.append(f"{label:7} {len(part):4d} kernels: median |diff| "
                     f"{statistics.median(map(abs, diffs)):5.1f} registers, signed median "
                     f"{statistics.median(diffs):+6.1f}, median |error| "
                     f"{statistics.median(relative):6.1%}")
    spills = [r for r in rows if r["spill_bytes"]]
    foreseen = sum(1 for r in spills if r["spilled"])
    false = sum(1 for r in rows if r["spilled"] and not r["spill_bytes"])
    lines.append(f"ptxas spills {len(spills)} of {len(rows)}; the model foresees {foreseen} of "
                 f"those and {false} more")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=8, help="candidates sampled per space")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--gpu", default="H200", help="the GPU whose model estimates")
    parser.add_argument("--json", help="write every kernel's figures there")
    args = parser.parse_args(argv)
    rows = measure(args.random, args.seed, args.arch, args.gpu)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"{'kernel':24} {'estimate':>8} {'ptxas':>5} {'diff':>5}")
    for r in rows:
        spills = f"  ({r['spill_bytes']} B spilled)" if r["spill_bytes"] else ""
        print(f"{r['name']:24} {r['estimate']:8d} {r['ptxas']:5d} "
              f"{r['estimate'] - r['ptxas']:+5d}{spills}")
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
