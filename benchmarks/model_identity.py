"""Whether a change to the model or the search changed any number: run the same deterministic
searches (a node budget, no time budget) on this checkout and another, compare exactly.

    python benchmarks/model_identity.py --other DIR [--nodes 1500]
    python benchmarks/model_identity.py --dump out.json   # this checkout's numbers only

For GEMM 4096^3, TCCG rows 1, 3, 15, 28 and 33, a float64 row, a float16 and a 3xTF32 GEMM,
a deterministic split and a small GEMM: every candidate a search of ``--nodes`` nodes scores
(its estimate's seconds, resources, binding, reasons, wavefronts and warps, its bound), the
winner, the winner's registers and its estimate with a ptxas report; for the small GEMM also
every candidate of its space and the bound of every partial node. Floats are compared by their
exact text (``repr``), so a change of the last bit counts. ``--other`` is a checkout with its
own environment in ``DIR/.venv`` (``git worktree add DIR main --detach``, then ``pip install
-e DIR``): its numbers come from a run of this script with that environment's Python.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GEMM = "C[i,j] = A[i,k]*B[k,j]"
BIG = {"i": 4096, "j": 4096, "k": 4096}
# name: expression or TCCG row, sizes (None: the row's), layout, plan()'s options
CASES: dict[str, tuple[str, dict[str, int] | None, str, dict[str, Any]]] = {
    "gemm": (GEMM, BIG, "C", {}),
    **{row: (row, None, "F", {}) for row in
       ("tccg_01", "tccg_03", "tccg_15", "tccg_28", "tccg_33")},
    "tccg_15_fp64": ("tccg_15", None, "F", {"dtype": "float64"}),
    "gemm_fp16": (GEMM, BIG, "C", {"dtype": "float16"}),
    "gemm_3xtf32": (GEMM, BIG, "C", {"precision": "3xtf32"}),
    "split_deterministic": (GEMM, {"i": 64, "j": 64, "k": 65536}, "C",
                            {"deterministic": True}),
    "small": (GEMM, {"i": 40, "j": 24, "k": 56}, "F", {}),
}


def prediction(p) -> dict[str, Any]:
    """Every field of a prediction, floats as their exact text."""
    return {"seconds": repr(p.seconds), "binding": p.binding, "because": p.because,
            "resources": {k: repr(v) for k, v in p.resources.items()},
            "wavefronts": repr(p.wavefronts), "warps": p.warps, "floor": repr(p.floor)}


def dump(nodes: int, names: list[str]) -> dict[str, Any]:
    """This checkout's numbers for every case, and the CPU seconds each search took."""
    from treduda.model.prediction import Compiled
    from treduda.polyhedral.lower import plan
    from treduda.suites import load
    from treduda.tuning.search import Searcher, search_program
    from treduda.tuning.search_result import identity

    rows = {r.id: r for r in load("tccg_fp32")}
    out: dict[str, Any] = {}
    for name in names:
        expr, sizes, layout, options = CASES[name]
        if expr in rows:
            expr, sizes = rows[expr].expression, dict(rows[expr].sizes)
        program = plan(expr, sizes, layout, **options)
        started = time.thread_time()
        result = search_program(program, "H100", max_nodes=nodes)
        cpu = time.thread_time() - started
        # the winner's own model: the tensor-core one's where a tensor-core kernel won
        model = Searcher(program, "H100", result.best.strategy, restrict=False).model
        best = dict(result.best.params)
        case = {
            "cpu": cpu, "nodes": result.stats.nodes_visited,
            "scored": result.stats.candidates_scored,
            "winner": identity(best),
            "candidates": [[identity(c.params), prediction(c.prediction), repr(c.bound)]
                           for c in result.candidates],
            "registers": list(model.registers(best)),
            "pressure": repr(model.register_pressure(best)),
            "compiled": prediction(model.estimate(best, Compiled(96, 64))),
            "bound": prediction(model.bound(best)),
        }
        if name == "small":
            searcher = Searcher(program, "H100")
            case["exhaustive"] = [[identity(c.params), prediction(c.prediction)]
                                  for c in searcher.exhaustive().candidates]
            case["partial"] = [[identity(p), prediction(searcher.model.bound(p))]
                               for p in partials(searcher.space)]
        out[name] = case
    return out


def partials(space) -> list[dict[str, Any]]:
    """Every partial assignment of ``space`` on the way to its points, depth first."""
    found, stack = [], [{}]
    while stack:
        fixed = stack.pop()
        found.append(fixed)
        step = space.choices(fixed)
        if step is not None:
            parameter, values = step
            stack.extend({**fixed, parameter.name: v} for v in reversed(values))
    return found


def differences(mine: Any, other: Any, where: str = "") -> list[str]:
    """Where two dumps differ, ignoring CPU seconds."""
    if isinstance(mine, dict) and isinstance(other, dict):
        keys = sorted(set(mine) | set(other))
        return [d for k in keys if k != "cpu"
                for d in differences(mine.get(k), other.get(k), f"{where}/{k}")]
    if isinstance(mine, list) and isinstance(other, list) and len(mine) == len(other):
        return [d for n, (a, b) in enumerate(zip(mine, other, strict=True))
                for d in differences(a, b, f"{where}[{n}]")]
    return [] if mine == other else [f"{where}: {str(mine)[:200]} != {str(other)[:200]}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1500)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--other", help="a checkout to compare with")
    parser.add_argument("--dump", help="write this checkout's numbers to this file")
    args = parser.parse_args()
    names = args.cases.split(",")
    mine = dump(args.nodes, names)
    if args.dump:
        Path(args.dump).write_text(json.dumps(mine))
    if not args.other:
        return
    with tempfile.TemporaryDirectory() as folder:
        theirs = Path(folder) / "other.json"
        subprocess.run([str(Path(args.other) / ".venv" / "bin" / "python"), __file__,
                        "--nodes", str(args.nodes), "--cases", args.cases, "--dump",
                        str(theirs)],
                       cwd=args.other, check=True)
        other = json.loads(theirs.read_text())
    print(f"{'case':20} {'nodes':>6} {'scored':>6} {'cpu s':>7} {'other cpu s':>11} "
          f"{'numbers':>8}")
    for name in names:
        found = differences(mine[name], other[name])
        print(f"{name:20} {mine[name]['nodes']:6} {mine[name]['scored']:6} "
              f"{mine[name]['cpu']:7.2f} {other[name]['cpu']:11.2f} "
              f"{'same' if not found else f'{len(found)} differ':>8}")
        for line in found[:5]:
            print("   ", line)
    total = sum(len(differences(mine[n], other[n])) for n in names)
    print("identical" if not total else f"{total} differences")
    sys.exit(1 if total else 0)


if __name__ == "__main__":
    main()
