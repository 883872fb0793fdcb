"""Incremental tuning, call by call: which candidate each call of a contraction ran, the time
its launch took by the device's events, and the call's wall time; then what the measured winner
gains over the model's pick, and what the first call of a new process costs.

    python benchmarks/incremental.py [--backend opencl|cuda] [--case NAME ...] [--json out.json]

Each case starts from a fresh tuning cache. ``candidate`` is the trial's rank by the model's
estimate (for an H100, the default ``gpu``); ``measured`` the events' time of a timed call. On
PoCL (the default) every time is a CPU's time: it ranks candidates by what runs here, not on a
GPU. ``gain`` is the model's pick's median of 20 timed launches (:meth:`treduda.Kernel.time`)
over the measured winner's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CASES = {  # name: (numpy-style subscripts, shapes)
    "gemm_64x48x80": ("ik,kj->ij", [(64, 48), (48, 80)]),
    "gemm_256": ("ik,kj->ij", [(256, 256), (256, 256)]),
    "tccg3": ("dbea,ec->abcd", [(24, 21, 19, 24), (19, 13)]),
}
LATER = 3  # calls after the trials, which run the winner

NEW_PROCESS = """
import sys, time, numpy as np, treduda
spec, shapes, backend = sys.argv[1], eval(sys.argv[2]), sys.argv[3]
arrays = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in shapes]
started = time.perf_counter()
planned = treduda.contract_expression(spec, *shapes, backend=backend, tune="incremental")
planned(*arrays)
print((time.perf_counter() - started) * 1e3, planned.kernel.timed_calls)
"""


def measure(name: str, backend: str) -> dict:
    import treduda
    from treduda.tuning import incremental
    from treduda.tuning.search_result import identity

    spec, shapes = CASES[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    planned = treduda.contract_expression(spec, *shapes, backend=backend, tune="incremental")
    tuner = planned.kernel
    rank = {identity(t.params): n for n, t in enumerate(tuner.trials)}
    calls = []
    for _ in range(incremental.CANDIDATES * incremental.SAMPLES + LATER):
        timed_before = tuner.timed_calls
        started = time.perf_counter()
        result = planned(*arrays)
        wall = time.perf_counter() - started
        np.testing.assert_allclose(result, np.einsum(spec, *arrays), rtol=1e-3, atol=1e-3)
        trial = tuner.last
        calls.append({"candidate": rank[identity(trial.params)],
                      "predicted_ms": trial.predicted * 1e3,
                      "measured_ms": (trial.measured * 1e3
                                      if tuner.timed_calls > timed_before else None),
                      "wall_ms": wall * 1e3})
    named = dict(zip(planned.contraction.inputs, arrays, strict=True))
    model_ms, winner_ms = (treduda.compile(spec, planned.sizes, strategy=t.strategy,
                                           params=t.params).time(backend, **named).seconds * 1e3
                           for t in (tuner.trials[0], tuner.winner))
    new = subprocess.run([sys.executable, "-c", NEW_PROCESS, spec, repr(shapes), backend],
                         capture_output=True, text=True, check=True, env=os.environ)
    new_ms, new_timed = new.stdout.split()
    return {"case": name, "expression": spec, "shapes": shapes, "device": tuner.device,
            "calls": calls, "winner": rank[identity(tuner.winner.params)],
            "model_pick_ms": model_ms, "winner_ms": winner_ms, "gain": model_ms / winner_ms,
            "new_process_first_call_ms": float(new_ms), "new_process_timed": int(new_timed)}


def print_row(row: dict) -> None:
    print(f"\n{row['case']}: {row['expression']} {row['shapes']} on {row['device']}")
    print(f"{'call':>4} {'candidate':>9} {'H100 est ms':>12} {'measured ms':>11} "
          f"{'call ms':>9}")
    for n, call in enumerate(row["calls"], 1):
        measured = f"{call['measured_ms']:11.4f}" if call["measured_ms"] is not None else (
            f"{'-':>11}")
        print(f"{n:>4} {call['candidate']:>9} {call['predicted_ms']:12.4f} {measured} "
              f"{call['wall_ms']:9.1f}")
    print(f"winner: candidate {row['winner']}; 20 launches each: model's pick "
          f"{row['model_pick_ms']:.4f} ms, winner {row['winner_ms']:.4f} ms "
          f"(gain {row['gain']:.2f}x); a new process's first call "
          f"{row['new_process_first_call_ms']:.0f} ms, {row['new_process_timed']} timed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="opencl", choices=("opencl", "cuda"))
    parser.add_argument("--case", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    rows = []
    for name in args.case:
        with tempfile.TemporaryDirectory() as folder:
            os.environ["TREDUDA_CACHE"] = os.path.join(folder, "tuning.sqlite3")
            rows.append(measure(name, args.backend))
        print_row(rows[-1])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
