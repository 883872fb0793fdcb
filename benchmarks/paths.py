"""Products of many tensors and programs of many statements: treduda's plan on PoCL beside
numpy.einsum(optimize=True) and opt_einsum.contract, and on a GPU beside torch and CuPy.

    python benchmarks/paths.py [--repeats 10] [--json out.json] [--only chain3_96,...]

Each row plans once (the path, then each step's kernel searched in a fresh tuning cache: the
``plan s`` column), then times repeated calls: the median wall time of a call (copies to and
from PoCL included, as a user sees it) and the sum of the steps' kernel times (OpenCL
profiling events). ``other`` is the variant the model did not pick, in kernel time: one
fused kernel (``optimize=False``) where the plan splits the product (if affordable on PoCL),
opt_einsum's greedy pairwise path where the plan keeps it fused. ``gemm_96`` is one pairwise
GEMM of the chain's size, for the chain's ratio. Programs (``ccsd_like``) are compared
statement by statement with numpy and opt_einsum. Every result is checked against
numpy.einsum before it is timed. With a GPU (CuPy), each row also runs on it, beside
cupy.einsum and torch.einsum (TF32 off).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

# name: (a program, or numpy-style subscripts; the shapes of its inputs by name; dtype)
CASES: dict[str, tuple[str, dict[str, tuple[int, ...]], str]] = {
    "gemm_96": ("ij,jk->ik", {"A": (96, 96), "B": (96, 96)}, "float32"),
    "chain3_96": ("ij,jk,kl->il", {"A": (96, 96), "B": (96, 96), "C": (96, 96)}, "float32"),
    "chain4_64": ("ij,jk,kl,lm->im", {n: (64, 64) for n in "ABCD"}, "float32"),
    "ao_to_mo_16": ("pi,qj,rk,sl,ijkl->pqrs", {**{n: (16, 16) for n in "ABCD"},
                                               "E": (16, 16, 16, 16)}, "float64"),
    "triangle_48": ("ij,jk,ki->ijk", {n: (48, 48) for n in "ABC"}, "float32"),
    # <psi|psi> of a four-site matrix product state: bond 24, physical 4 (8 tensors)
    "mps_overlap_8": ("pa,aqb,brc,cs,pe,eqf,frg,gs->",
                      {"A": (4, 24), "B": (24, 4, 24), "C": (24, 4, 24), "D": (24, 4),
                       "E": (4, 24), "F": (24, 4, 24), "G": (24, 4, 24), "H": (24, 4)},
                      "float64"),
    # a CCSD-like sequence: o = 8 occupied, v = 16 virtual orbitals; W is read twice
    "ccsd_like": ("""X[m,i] = F[m,e]*T1[e,i]
                     W[m,n,i,j] = V[m,n,e,f]*T2[e,f,i,j]
                     R[a,b,i,j] = T2[a,b,m,n]*W[m,n,i,j]
                     R[a,b,i,j] += T2[a,b,i,m]*X[m,j]
                     S[i,j] = W[m,n,i,j]*U[m,n]""",
                  {"F": (8, 16), "T1": (16, 8), "V": (8, 8, 16, 16), "T2": (16, 16, 8, 8),
                   "U": (8, 8)}, "float64"),
}
FUSED_AFFORDABLE = 2e8  # multiply-adds of one fused kernel timed on PoCL


def seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def median(call: Callable[[], object], repeats: int) -> float:
    call()  # warm: PoCL builds, page faults
    return statistics.median(seconds(call) for _ in range(repeats))


def program_text(spec: str, names: list[str]) -> str:
    """A numpy-style product as one statement over the given tensor names."""
    inputs, output = spec.split("->")
    reads = "*".join(f"{n}[{','.join(s)}]" for n, s in zip(names, inputs.split(","),
                                                             strict=True))
    return f"out[{','.join(output)}] = {reads}"


def einsum_program(text: str, arrays: dict[str, np.ndarray], einsum) -> dict[str, np.ndarray]:
    """Run a program statement by statement with an einsum (numpy's or opt_einsum's)."""
    from treduda.programs import statements
    from treduda.run.reference import einsum_spec

    values = dict(arrays)
    for c in statements(text):
        term = c.terms[-1]  # the programs here have one product per statement
        result = einsum(einsum_spec(term, c.output_indices), *(values[r.tensor]
                                                                for r in term.reads))
        values[c.output] = values[c.output] + result if c.op == "+=" else result
    return values


def measure(name: str, repeats: int) -> dict:
    import opt_einsum

    import treduda

    spec, shapes, dtype = CASES[name]
    rng = np.random.default_rng(0)
    arrays = {n: rng.uniform(-1, 1, s).astype(dtype) for n, s in shapes.items()}
    text = spec if "[" in spec else program_text(spec, list(shapes))
    row: dict = {"case": name, "expression": spec, "dtype": dtype}
    started = time.perf_counter()
    plan = treduda.program(text, dtype=dtype, **shapes)
    row["plan_s"] = time.perf_counter() - started
    row["kernels"] = len(plan.steps)
    row["mflop"] = plan.flops / 1e6
    row["predicted_ms"] = plan.seconds * 1e3
    got = plan(**arrays, keep=[s.contraction.output for s in plan.steps
                               if s.contraction.output in plan.intermediates])
    numpy_einsum = (lambda s, *a: np.einsum(s, *a, optimize=True))  # noqa: E731
    expected = einsum_program(text, arrays, numpy_einsum)
    for result in plan.results:
        np.testing.assert_allclose(got[result], expected[result], rtol=1e-3, atol=1e-3)
    row["call_ms"] = median(lambda: plan(**arrays), repeats) * 1e3
    row["kernels_ms"] = sum(step.kernel.time("opencl", repeats=repeats).seconds
                            for step in plan.steps) * 1e3
    row["numpy_ms"] = median(lambda: einsum_program(text, arrays, numpy_einsum), repeats) * 1e3
    row["opt_einsum_ms"] = median(lambda: einsum_program(text, arrays, opt_einsum.contract),
                                  repeats) * 1e3
    row["other_ms"], row["other"] = None, None
    product = len(plan.statements) == 1 and len(plan.statements[0].inputs) > 2
    split = len(plan.steps) > 1
    if product and (not split or math.prod(_sizes(text, shapes).values()) <= FUSED_AFFORDABLE):
        row["other"] = "fused" if split else "greedy"
        other = treduda.program(text, dtype=dtype, optimize=not split and "greedy", **shapes)
        row["other_ms"] = sum(step.kernel.time("opencl", repeats=3).seconds
                              for step in other.steps) * 1e3
    row["path"] = " ; ".join(s.contraction.source for s in plan.steps)
    return row


def _sizes(text: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    from treduda.frontend.contraction import analyse, infer_sizes

    c = analyse(text)
    return infer_sizes(c, {n: np.broadcast_to(0, s) for n, s in shapes.items()},
                       old_output=False)


def measure_gpu(name: str, repeats: int) -> dict:
    """The plan on the GPU (CuPy arrays in, out) beside cupy.einsum and torch.einsum."""
    import cupy

    import treduda

    spec, shapes, dtype = CASES[name]
    rng = np.random.default_rng(0)
    host = {n: rng.uniform(-1, 1, s).astype(dtype) for n, s in shapes.items()}
    arrays = {n: cupy.asarray(a) for n, a in host.items()}
    text = spec if "[" in spec else program_text(spec, list(shapes))
    plan = treduda.program(text, dtype=dtype, backend="cuda", **shapes)

    def synced(call: Callable[[], object]) -> Callable[[], object]:
        return lambda: (call(), cupy.cuda.Device().synchronize())

    row = {"case": name, "gpu_ms": median(synced(lambda: plan(**arrays)), repeats) * 1e3}
    row["cupy_ms"] = median(synced(lambda: einsum_program(text, arrays, cupy.einsum)),
                            repeats) * 1e3
    try:
        import torch
    except ImportError:
        row["torch_ms"] = None
        return row
    torch.backends.cuda.matmul.allow_tf32 = False
    tensors = {n: torch.as_tensor(a, device="cuda") for n, a in host.items()}
    row["torch_ms"] = median(lambda: (einsum_program(text, tensors, torch.einsum),
                                      torch.cuda.synchronize()), repeats) * 1e3
    return row


def number(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="calls per median")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--only", help="comma-separated case names")
    args = parser.parse_args()
    os.environ["TREDUDA_CACHE"] = os.path.join(tempfile.mkdtemp(prefix="treduda-paths-"),
                                               "tuning.sqlite3")
    from treduda.run.cuda import gpu_present

    names = args.only.split(",") if args.only else list(CASES)
    rows = []
    print(f"{'case':14} {'kernels':>7} {'MFLOP':>8} {'plan s':>7} {'call ms':>8} "
          f"{'kernels ms':>10} {'other ms':>16} {'numpy ms':>9} {'opt_einsum':>10}")
    for name in names:
        row = measure(name, args.repeats)
        rows.append(row)
        print(f"{name:14} {row['kernels']:>7} {row['mflop']:>8.2f} {row['plan_s']:>7.1f} "
              f"{row['call_ms']:>8.2f} {row['kernels_ms']:>10.2f} "
              f"{number(row['other_ms'], '.2f'):>9} {row['other'] or '':6} "
              f"{row['numpy_ms']:>9.2f} "
              f"{row['opt_einsum_ms']:>10.2f}", flush=True)
    by_name = {row["case"]: row for row in rows}
    if {"gemm_96", "chain3_96"} <= set(by_name):
        ratio = by_name["chain3_96"]["kernels_ms"] / by_name["gemm_96"]["kernels_ms"]
        print(f"chain3_96 / gemm_96 (kernel times): {ratio:.2f}")
    if gpu_present():
        print(f"\n{'case':14} {'treduda ms':>10} {'cupy ms':>8} {'torch ms':>8}   (GPU)")
        for name in names:
            gpu = measure_gpu(name, args.repeats)
            by_name[name].update(gpu)
            print(f"{name:14} {gpu['gpu_ms']:>10.3f} {gpu['cupy_ms']:>8.3f} "
                  f"{number(gpu['torch_ms'], '.3f'):>8}", flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
