"""The model's issue count beside the SASS: per FMA, the warp instructions the ``issue``
resource charges (:meth:`treduda.model.model.Model.issue_instructions`) and the instructions
of the compiled kernel's main loop (``Kernel.sass_report``). Needs nvcc; no GPU.

    python benchmarks/issue_counts.py [--only gemm,tccg_12] [--json out.json] [--jobs 2]

Candidates: a spread of SIMT parameters around each strategy's default on GEMM 4096^3 (register
tiles 2x2..8x8, cyclic and adjacent assignment, pads, steps, unrolling, staged operands,
preload, double buffering, float64), a few of them on TCCG rows 1, 3, 12, 15, 19, 20 in both
layouts, and the kernels measured on the H200 (``benchmarks/data/h200_measured_2026-11-26.json``:
the search's picks of TCCG rows 1-24 and their rivals).

The SASS is that of the sizes rounded up to whole tiles (:func:`whole`): what a block of full
tiles runs. Where its main loop is a whole step (its FMAs are a thread's share of the step), it is
compared with every term of the model; where it is one reduction point of a step that is not
unrolled, with the terms of a point (FMAs, loads, conversions) alone. The last columns give the
main loop's median instructions from a shared or global load to the first use of its value
(``SassReport.main_loop_load_use``; issue 40's question of stalls on issue-bound rows).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "h200_measured_2026-11-26.json"
GEMM = "C[i,j] = A[i,k]*B[k,j]"
BIG = {"i": 4096, "j": 4096, "k": 4096}
ROWS = ("tccg_01", "tccg_03", "tccg_12", "tccg_15", "tccg_19", "tccg_20")
# Variations of a strategy's default, as parameter overrides: the GEMM gets them all, the TCCG
# rows the first few.
SHORT = 6
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("default", {}),
    ("8x8 cyclic", {"block_x": 16, "block_y": 16, "reg_x": 8, "reg_y": 8}),
    ("8x8 adjacent", {"block_x": 16, "block_y": 16, "reg_x": 8, "reg_y": 8,
                      "assign_x": "adjacent", "assign_y": "adjacent"}),
    ("4x4 adjacent", {"assign_x": "adjacent", "assign_y": "adjacent"}),
    ("stage A", {"stage": "A"}),
    ("tiled", {"strategy": "tiled"}),
    ("2x2", {"reg_x": 2, "reg_y": 2}),
    ("4x8 mixed", {"reg_x": 4, "reg_y": 8, "assign_x": "adjacent"}),
    ("8x4 mixed", {"reg_x": 8, "reg_y": 4, "assign_y": "adjacent"}),
    ("8x8 adj x", {"block_x": 16, "block_y": 16, "reg_x": 8, "reg_y": 8,
                   "assign_x": "adjacent"}),
    ("pad 0", {"pad": 0}),
    ("pad 4", {"pad": 4}),
    ("step 8", {"step": 8}),
    ("step 32", {"step": 32}),
    ("no unroll", {"unroll": False}),
    ("stage B", {"stage": "B"}),
    ("stage none", {"stage": ""}),
    ("preload", {"preload": True}),
    ("double buffer", {"double_buffer": True}),
    ("8x8 adj pad 0 db", {"block_x": 16, "block_y": 16, "reg_x": 8, "reg_y": 8,
                          "assign_x": "adjacent", "assign_y": "adjacent", "pad": 0,
                          "double_buffer": True}),
    ("tiled 4x4 adjacent", {"strategy": "tiled", "assign_x": "adjacent",
                            "assign_y": "adjacent"}),
    ("tiled no unroll", {"strategy": "tiled", "unroll": False}),
]


def problems() -> list[tuple[str, str, dict[str, int], str, str]]:
    """(name, expression, sizes, layout, dtype) of every problem varied."""
    from treduda.suites import load

    found = [("gemm", GEMM, BIG, "C", "float32"), ("gemm F", GEMM, BIG, "F", "float32"),
             ("gemm fp64", GEMM, BIG, "C", "float64")]
    rows = {r.id: r for r in load("tccg_fp32")}
    for name in ROWS:
        row = rows[name]
        for layout in (row.layout, "C" if row.layout == "F" else "F"):
            found.append((f"{name} {layout}", row.expression, dict(row.sizes), layout,
                          "float32"))
    return found


def cases(only: set[str] | None) -> list[dict[str, Any]]:
    """Every candidate: its problem, strategy and overrides (or complete parameters)."""
    found = []
    for name, expr, sizes, layout, dtype in problems():
        if only and name.split()[0] not in only:
            continue
        variants = VARIANTS if name.startswith("gemm") and name != "gemm fp64" else (
            VARIANTS[:SHORT])
        for label, over in variants:
            found.append({"problem": name, "variant": label, "expr": expr, "sizes": sizes,
                          "layout": layout, "dtype": dtype, "over": over})
    with open(DATA) as f:
        measured = json.load(f)["rows"]
    for row in measured:
        for timed in (row, *(row.get("rivals") or ())):
            if timed.get("status") != "ok" or (only and row["id"] not in only):
                continue
            found.append({"problem": timed["id"], "variant": "H200 measured",
                          "expr": timed["expression"], "sizes": timed["sizes"],
                          "layout": timed["layout"], "dtype": timed["dtype"],
                          "params": timed["params"], "strategy": timed["strategy"],
                          "measured_ms": timed["treduda_ms"]})
    return found


def measure(case: dict[str, Any]) -> dict[str, Any]:
    """The model's issue instructions per FMA and the SASS main loop's, for one candidate."""
    import treduda
    from treduda.errors import TredudaError
    from treduda.model.gpus import gpu
    from treduda.model.model import Model
    from treduda.polyhedral.lower import plan

    out = {k: case[k] for k in ("problem", "variant", "layout", "dtype")}
    try:
        if "params" in case:
            strategy, params = case["strategy"], dict(case["params"])
        else:
            over = dict(case["over"])
            strategy = over.pop("strategy", "tiled+staged")
            base = treduda.compile(case["expr"], case["sizes"], layout=case["layout"],
                                   dtype=case["dtype"], strategy=strategy, cache=False)
            params = {**base.params, **over}
        kernel = treduda.compile(case["expr"], case["sizes"], layout=case["layout"],
                                 dtype=case["dtype"], strategy=strategy, params=params,
                                 cache=False)
        params = dict(kernel.params)
        program = plan(case["expr"], case["sizes"], case["layout"], case["dtype"])
        full = treduda.compile(case["expr"], whole(program, params), layout=case["layout"],
                               dtype=case["dtype"], strategy=strategy, params=params,
                               cache=False)
        sass = full.sass_report()
    except TredudaError as error:
        out["error"] = str(error).splitlines()[0][:120]
        return out
    model = Model(program, gpu("H100"), strategy)
    issue = model.issue_instructions(params)
    per_point = math.prod(params[r] for r in ("reg_x", "reg_y", "reg_z"))
    summed = [program.sizes[i] for i in program.contraction.indices
              if i not in program.output_indices]
    step = params.get("step") or 0
    per_step = per_point * (math.prod(min(step, e) for e in summed) if step else 1)
    loop = sass.main_loop_ffma
    kind = ("step" if math.isclose(loop, per_step) else
            "point" if loop == per_point else f"{loop}/{per_step:g}")
    terms = issue if kind == "step" else {k: v for k, v in issue.items() if k != "copies"}
    out.update({
        "strategy": strategy, "params": params, "loop": kind,
        "model": sum(terms.values()), "terms": issue,
        "sass": sass.main_loop_instructions / loop if loop else math.nan,
        "ffma_share": sass.ffma_share, "main_loop_ffma": loop,
        "opcodes": sass.main_loop_opcodes,
        "never": sum(sass.main_loop_never_executed.values()),
        "shared_loads": sass.shared_load_widths, "measured_ms": case.get("measured_ms"),
        "load_use": sass.main_loop_load_use,
    })
    return out


def whole(program, params: dict[str, Any]) -> dict[str, int]:
    """The expression's sizes rounded up so that every tile is whole: the slowest index of an
    axis's group so that the group's extent is a multiple of the axis's tile, the slowest index
    of a summed one to whole steps (of every part of a split). Their kernel has no guards: its
    main loop is what a block of full tiles runs in the kernel of the real sizes (where partial
    tiles' guarded code sits beside it in the loop, or the loop is unswitched). A merged index
    (tccg_09-11) stands for the expression's indices it merges, fastest first."""
    from treduda.polyhedral import geometry
    from treduda.polyhedral.geometry import AXES

    merged = program.merging.groups  # slowest first in C order: fastest first in F order
    parts = {name: parts[::-1] if program.layout == "C" else parts
             for name, parts in merged.items()}
    sizes = dict(program.expression_sizes)

    def rounded(indices: list[str], multiple: int) -> None:
        faster = math.prod(sizes[i] for i in indices[:-1])
        multiple //= math.gcd(multiple, faster)
        sizes[indices[-1]] = -(-sizes[indices[-1]] // multiple) * multiple

    for n, group in enumerate(geometry.groups(params["order"])):
        rounded([i for name in group for i in parts[name]],
                params[f"block_{AXES[n]}"] * params[f"reg_{AXES[n]}"])
    for index in program.contraction.indices:
        if index not in program.output_indices:
            rounded(list(parts[index]), max(1, params.get("step") or 1) * params.get("split", 1))
    return sizes


GROUPS = {"LDS": ("LDS",), "LDG": ("LDG",), "STS": ("STS",), "BAR": ("BAR",),
          "int": ("IMAD", "IADD3", "LEA", "SHF", "LOP3", "IABS", "I2F", "F2I", "SEL", "MOV",
                  "IMNMX", "ULDC", "UIADD3", "UMOV", "ULEA", "USHF", "UIMAD", "S2R", "S2UR",
                  "CS2R", "PRMT", "VIMNMX"),
          "pred": ("ISETP", "PLOP3", "FSETP", "DSETP", "P2R", "R2P"),
          "branch": ("BRA", "BSSY", "BSYNC", "EXIT", "WARPSYNC")}


def grouped(opcodes: dict[str, int], ffma: int) -> dict[str, float]:
    """The main loop's instructions per FFMA, by group (others: the rest besides the FMAs)."""
    found = {g: sum(opcodes.get(o, 0) for o in members) / ffma for g, members in GROUPS.items()}
    named = {o for members in GROUPS.values() for o in members} | {"FFMA", "DFMA"}
    found["other"] = sum(n for o, n in opcodes.items() if o not in named) / ffma
    return found


def table(results: list[dict[str, Any]]) -> str:
    lines = [f"{'problem':16} {'variant':18} {'loop':6} {'model':>6} {'sass':>6} {'err':>6} "
             f"{'FMA%':>5} | {'LDS':>5} {'LDG':>5} {'STS':>5} {'int':>5} {'pred':>5} "
             f"{'br':>5} {'oth':>5} {'nev':>5} | m.loads m.copies | load>use LDS LDG"]
    for r in results:
        if "error" in r:
            lines.append(f"{r['problem']:16} {r['variant']:18} refused: {r['error']}")
            continue
        g = grouped(r["opcodes"], r["main_loop_ffma"])
        err = r["model"] / r["sass"] - 1
        lines.append(
            f"{r['problem']:16} {r['variant'][:18]:18} {r['loop'][:6]:6} {r['model']:6.3f} "
            f"{r['sass']:6.3f} {err:+6.0%} {r['ffma_share']:5.0%} | {g['LDS']:5.3f} "
            f"{g['LDG']:5.3f} {g['STS']:5.3f} {g['int']:5.3f} {g['pred']:5.3f} "
            f"{g['branch']:5.3f} {g['other']:5.3f} "
            f"{r.get('never', 0) / r['main_loop_ffma']:5.3f} | {r['terms']['loads']:.3f} "
            f"{r['terms']['copies']:.3f}    | {_distance(r, 'LDS')} {_distance(r, 'LDG')}")
    errors = [abs(r["model"] / r["sass"] - 1) for r in results if "error" not in r]
    signed = [r["model"] / r["sass"] - 1 for r in results if "error" not in r]
    if errors:
        lines.append(f"\n{len(errors)} candidates: |error| median {statistics.median(errors):.1%},"
                     f" mean {statistics.fmean(errors):.1%}, worst {max(errors):.1%}; signed "
                     f"median {statistics.median(signed):+.1%}")
    return "\n".join(lines)


def _distance(result: dict[str, Any], load: str) -> str:
    """The main loop's median instructions from a ``load`` to its value's first use (where
    the loop reads one): a short one stalls a warp unless others issue meanwhile."""
    found = result.get("load_use", {}).get(load)
    return f"{found:5g}" if found is not None else f"{'-':>5}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="problems (gemm, tccg_12, ...) to measure, by comma")
    parser.add_argument("--json", help="write every candidate's numbers to this file")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    from treduda.run.nvcc import nvcc_available

    if not nvcc_available():
        print("nvcc is not installed: no SASS to compare with", file=sys.stderr)
        return 1
    only = set(args.only.split(",")) if args.only else None
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(measure, cases(only)))
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
