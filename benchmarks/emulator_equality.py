"""Does a change to the emulator keep everything it reports? Records, for a set of kernels
(SIMT, staged, padded, vectorised, split, mma.sync, WMMA, TF32, warpgroup; some with guards
removed so that they have hazards), what the emulator computes on random inputs, the hazards
it finds and the counters it tallies, with their CPU time; then, run again after the change,
compares all of it exactly with the record.

    python benchmarks/emulator_equality.py record /tmp/before.pickle
    python benchmarks/emulator_equality.py compare /tmp/before.pickle [REPEATS [CASE,...]]

CPU times on a loaded machine vary by a fifth from run to run: the comparison takes each
case's fastest of REPEATS runs (1 by default).

The kernels' IR and launches are pickled with the record, so the comparison runs the same
kernels whatever the code generation does meanwhile.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
import time

import numpy as np

import treduda
from treduda.codegen import ir
from treduda.run.counters import count
from treduda.run.emulator import corners, emulate

GEMM = "C[i,j] = A[i,k] * B[k,j]"
TCCG28 = "C[a,b,c,d]=A[e,a,f,b]*B[f,d,e,c]"
PAD = {"order": "a,c,d", "block_x": 16, "reg_x": 2, "assign_x": "adjacent", "block_y": 4,
       "reg_y": 4, "block_z": 2, "reg_z": 2, "step": 8, "stage": "A,B", "pad": 4}
PAD_SIZES = {"a": 19, "b": 3, "c": 10, "d": 5, "e": 11, "f": 13}
SMALL = {"warps_m": 2, "warps_n": 1, "frags_m": 1, "frags_n": 2, "frags_k": 2,
         "mapping": "mma"}
SWIZZLED = {**SMALL, "shared_layout": "swizzle", "warps_n": 2}
WARPGROUP = {"warpgroups": 1, "frags_m": 1, "tile_n": 32, "frags_k": 1, "stages": 2,
             "async_copy": True}
TILES = {"block_x": 8, "block_y": 4, "reg_x": 2, "reg_y": 2, "step": 4}
ALPHA_BETA = "C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]"

# name: (expression, sizes, compile options, statement type to drop or None)
CASES = {
    "simt": (GEMM, {"i": 19, "j": 17, "k": 21}, {"strategy": "thread_per_element"}, None),
    "simt-transposed": ("C[i,j] = A[j,k] * B[k,i]", {"i": 33, "j": 35, "k": 9},
                        {"strategy": "thread_per_element"}, None),
    "tiled": (GEMM, {"i": 19, "j": 17, "k": 21},
              {"strategy": "tiled", "params": TILES}, None),
    "staged": (GEMM, {"i": 37, "j": 35, "k": 30},
               {"strategy": "tiled+staged", "params": {**TILES, "stage": "A,B"}}, None),
    "staged-no-barrier": (GEMM, {"i": 37, "j": 35, "k": 30},
                          {"strategy": "tiled+staged", "params": {**TILES, "stage": "A,B"}},
                          ir.Barrier),
    "padded-F": (TCCG28, PAD_SIZES, {"layout": "F", "strategy": "tiled+staged",
                                     "params": PAD}, None),
    "padded-F-preload": (TCCG28, PAD_SIZES, {"layout": "F", "strategy": "tiled+staged",
                                             "params": {**PAD, "preload": True,
                                                        "double_buffer": True}}, None),
    "padded-C": ("C[a,b,c,d]=A[b,a,e,f]*B[c,e,d,f]", PAD_SIZES,
                 {"layout": "C", "strategy": "tiled+staged", "params": PAD}, None),
    "split-atomic": (GEMM, {"i": 9, "j": 30, "k": 70},
                     {"layout": "F", "strategy": "tiled+staged",
                      "params": {**TILES, "split": 4}}, None),
    "split-deterministic": (GEMM, {"i": 20, "j": 24, "k": 300},
                            {"dtype": "float16", "strategy": "tensorcore",
                             "deterministic": True, "params": {**SMALL, "split": 2}}, None),
    "int32": (GEMM, {"i": 19, "j": 17, "k": 21},
              {"dtype": "int32", "strategy": "tiled+staged",
               "params": {**TILES, "stage": "A,B"}}, None),
    "mma-f16": (ALPHA_BETA, {"i": 40, "j": 48, "k": 72},
                {"dtype": "float16", "strategy": "tensorcore",
                 "params": {**SMALL, "stages": 3}}, None),
    "mma-swizzle": ("C[a,b,c] = A[b,d,a]*B[d,c]", {"a": 20, "b": 12, "c": 72, "d": 70},
                    {"dtype": "float16", "layout": "F", "strategy": "tensorcore",
                     "params": SWIZZLED}, None),
    "mma-tf32": (ALPHA_BETA, {"i": 40, "j": 50, "k": 70},
                 {"dtype": "float32", "precision": "3xtf32", "strategy": "tensorcore",
                  "params": {**SMALL, "frags_k": 1, "stages": 2}}, None),
    "wmma-f16": (GEMM, {"i": 40, "j": 50, "k": 70},
                 {"dtype": "float16", "strategy": "tensorcore",
                  "params": {**SMALL, "mapping": "wmma"}}, None),
    "mma-no-wait": (GEMM, {"i": 40, "j": 50, "k": 70},
                    {"dtype": "float16", "strategy": "tensorcore",
                     "params": {**SMALL, "stages": 2}}, ir.WaitCopies),
    "warpgroup": (GEMM, {"i": 40, "j": 30, "k": 80},
                  {"dtype": "float16", "strategy": "warpgroup", "params": WARPGROUP}, None),
    "warpgroup-tf32": (GEMM, {"i": 40, "j": 30, "k": 80},
                       {"dtype": "float32", "precision": "tf32", "strategy": "warpgroup",
                        "params": WARPGROUP}, None),
    "warpgroup-no-wait": (GEMM, {"i": 40, "j": 30, "k": 80},
                          {"dtype": "float16", "strategy": "warpgroup",
                           "params": WARPGROUP}, ir.WarpgroupWait),
    "warpgroup-no-fence": (GEMM, {"i": 40, "j": 30, "k": 80},
                           {"dtype": "float16", "strategy": "warpgroup",
                            "params": WARPGROUP}, ir.ProxyFence),
}


def _dropped(body: ir.Stmt, kind: type) -> ir.Stmt:
    """``body`` without its statements of type ``kind``."""
    if isinstance(body, ir.Block):
        body = ir.Block(tuple(c for c in body.body if not isinstance(c, kind)))
    return ir.map_children(body, lambda s: _dropped(s, kind))


def _case(name: str) -> dict:
    expression, sizes, options, drop = CASES[name]
    kernel = treduda.compile(expression, sizes, **options)
    first = kernel.built.kernel
    if drop is not None:
        first = dataclasses.replace(first, body=_dropped(first.body, drop))
    then = kernel._later()
    rng = np.random.default_rng(len(name))
    c = kernel.contraction
    dtype = np.dtype(kernel.dtype)

    def operand(idx):
        shape = [sizes[i] for i in idx]
        if np.issubdtype(dtype, np.integer):
            return rng.integers(-4, 5, shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)

    randoms = {t: operand(idx) for t, idx in c.inputs.items()}
    scalars = {s: 1.5 for s in c.scalars}
    sizes_ = kernel._sizes(None)
    return {"kernel": first, "then": then,
            "random": kernel._prepare(sizes_, randoms, scalars),
            "zeros": kernel._prepare(sizes_, {t: np.zeros_like(a) for t, a in randoms.items()},
                                     dict.fromkeys(c.scalars, 0.0))}


def _run(case: dict) -> tuple[dict, float]:
    """Everything the emulator reports of ``case``, and the CPU seconds it took."""
    kernel, then, random, zeros = case["kernel"], case["then"], case["random"], case["zeros"]
    start = time.process_time()
    everything = emulate(kernel, random, then=then)
    at_corners = emulate(kernel, zeros, corners(zeros.grid), then)
    counted = count(kernel, zeros)
    two_steps = count(kernel, zeros, corners(zeros.grid), steps=2)
    seconds = time.process_time() - start
    return {"result": everything[0], "hazards": everything[1],
            "corner hazards": at_corners[1], "counters": counted,
            "two steps": two_steps}, seconds


def _same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    return a == b


def main(argv: list[str]) -> int:
    mode, path, *more = argv
    if mode == "record":
        cases = {name: _case(name) for name in CASES}
        record = {}
        for name, case in cases.items():
            record[name] = (case, *_run(case))
            print(f"{name:22} {record[name][2]:7.2f} s  "
                  f"{len(record[name][1]['hazards'])} hazard(s)")
        with open(path, "wb") as f:
            pickle.dump(record, f)
        return 0
    with open(path, "rb") as f:
        record = pickle.load(f)
    repeats = int(more[0]) if more else 1
    chosen = more[1].split(",") if len(more) > 1 else list(record)
    failed = 0
    before_total = after_total = 0.0
    for name in chosen:
        case, before, before_seconds = record[name]
        runs = [_run(case) for _ in range(repeats)]
        after, seconds = runs[0][0], min(s for _, s in runs)
        differ = [key for key in before if not _same(before[key], after[key])]
        failed += bool(differ)
        before_total, after_total = before_total + before_seconds, after_total + seconds
        print(f"{name:22} {before_seconds:7.2f} -> {seconds:7.2f} s  "
              f"{'DIFFERS in ' + ', '.join(differ) if differ else 'same'}")
    print(f"{'total':22} {before_total:7.2f} -> {after_total:7.2f} s CPU")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
