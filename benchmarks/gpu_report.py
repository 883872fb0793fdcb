"""The GPU session's JSON lines (`treduda bench --bundle FILE --gpu-time --jsonl`, written by
benchmarks/gpu_session.sh) as Markdown tables, and as the input of the model's fidelity tool.

    python benchmarks/gpu_report.py results.jsonl [more.jsonl] [--markdown report.md]
                                    [--fidelity fidelity.json]
    python benchmarks/gpu_report.py benchmarks/data/h200_measured_2026-11-26.json

One table per group of picks (suite, dtype, precision): treduda's time and its spread over the
interleaved rounds, torch.einsum's and cupy.einsum's likewise, the ratios (the library's time
over treduda's: above 1, treduda is faster) and GFLOP/s; then the rivals beside their picks
(predicted and measured: the model's ranking), the programs, the NVRTC compile times and the
failed entries. ``--fidelity`` writes the rows as ``benchmarks/model_fidelity.py --data``
reads them. Needs only the standard library, so it runs on the GPU machine too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

PICK_COLUMNS = ("id", "expression", "ms", "spread", "torch ms", "spread", "cupy ms", "spread",
                "x torch", "x cupy", "GFLOP/s")


def read(paths: Iterable[str]) -> list[dict[str, Any]]:
    """Every line of the files, in order; a line cut off by a timeout is skipped. A file of
    the earlier GPU benchmark (`treduda bench --gpu-time --json`, as benchmarks/data/ keeps
    them) is read as the lines its rows would have been."""
    lines = []
    for path in paths:
        with open(path) as stream:
            text = stream.read()
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict) and "rows" in whole:
            lines += earlier(whole)
            continue
        for line in text.splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                print(f"{path}: skipped a line cut short", file=sys.stderr)
    return lines


def earlier(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a `treduda bench --gpu-time --json` file (one timing per kernel, no
    rounds) as JSON lines: each pick, then its rivals (``id~n``)."""
    lines = []
    for row in data["rows"]:
        for rank, timed in enumerate((row, *(row.get("rivals") or ()))):
            lines.append({**timed, "kind": "kernel", "name": row["id"],
                          "id": row["id"].partition("~")[0], "rank": rank,
                          "role": "rival" if rank else "pick",
                          "device": data.get("device", "?"), "bundle": data.get("suite", "?"),
                          "precision": timed.get("precision", "highest"),
                          "treduda_spread": timed.get("spread"),
                          "predicted_seconds": _seconds(timed.get("predicted_ms"))})
    return lines


def _seconds(milliseconds: float | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1e3


def number(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def geometric_mean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, positive)) / len(positive)) if positive else None


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _pick_cells(line: dict[str, Any]) -> list[str]:
    return [line.get("id") or line["name"], f"`{line['expression']}`",
            number(line.get("treduda_ms"), ".4f"), number(line.get("treduda_spread"), ".1%"),
            number(line.get("torch_ms"), ".4f"), number(line.get("torch_spread"), ".1%"),
            number(line.get("cupy_ms"), ".4f"), number(line.get("cupy_spread"), ".1%"),
            number(line.get("ratio_torch"), ".2f"), number(line.get("ratio_cupy"), ".2f"),
            number(line.get("gflops"), ".0f")]


def markdown(lines: Sequence[dict[str, Any]]) -> str:
    """The report: per group of picks a table and its geometric means, then rivals, programs,
    compile times and failures."""
    measured = [x for x in lines if x.get("kind") in ("kernel", "program")]
    ok = [x for x in measured if x["status"] == "ok"]
    devices = sorted({x["device"] for x in measured})
    method = ("median of 3 interleaved rounds; spread = (slowest - fastest) / median of the "
              "rounds" if any("treduda_runs_ms" in x for x in measured) else
              "one timing per kernel and library; spread = (slowest - fastest) / median of "
              "treduda's launches")
    out = [f"Measured on {', '.join(devices) or 'nothing'}: {len(ok)} of {len(measured)} "
           f"entries verified and timed ({method})."]
    picks = [x for x in ok if x["kind"] == "kernel" and x.get("role", "pick") == "pick"]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for line in picks:
        key = (line.get("suite") or line["bundle"], line["dtype"], line["precision"])
        groups.setdefault(key, []).append(line)
    for (suite, dtype, precision), members in groups.items():
        out += ["", f"### {suite} ({dtype}{'' if precision == 'highest' else ', ' + precision})",
                ""]
        out += table(PICK_COLUMNS, [_pick_cells(x) for x in members])
        means = []
        for library in ("torch", "cupy"):
            ratios = [x[f"ratio_{library}"] for x in members if x.get(f"ratio_{library}")]
            if ratios:
                means.append(f"{library}.einsum {number(geometric_mean(ratios), '.3f')}x "
                             f"over {len(ratios)} rows")
        out += ["", f"Geometric mean: {'; '.join(means) or 'no library timed'}."]
    rivals = [x for x in ok if x.get("role") == "rival"]
    if rivals:
        by_pick = {(x.get("suite"), x.get("id")): x for x in picks}
        rows = []
        for rival in rivals:
            pick = by_pick.get((rival.get("suite"), rival.get("id")))
            rows.append([f"{rival.get('suite')}/{rival.get('id')}~{rival.get('rank')}",
                         number(_ms(pick, "predicted_seconds"), ".4f"),
                         number(pick and pick.get("treduda_ms"), ".4f"),
                         number(_ms(rival, "predicted_seconds"), ".4f"),
                         number(rival.get("treduda_ms"), ".4f")])
        out += ["", "### Rivals beside their picks", ""]
        out += table(("rival", "pick predicted ms", "pick ms", "rival predicted ms",
                      "rival ms"), rows)
    programs = [x for x in ok if x["kind"] == "program"]
    if programs:
        out += ["", "### Programs", ""]
        out += table(("program", "steps", "ms", "spread", "torch ms", "cupy ms", "x torch",
                      "x cupy"),
                     [[f"`{x['expression']}`", str(len(x.get("steps", []))),
                       number(x.get("treduda_ms"), ".4f"), number(x.get("treduda_spread"), ".1%"),
                       number(x.get("torch_ms"), ".4f"), number(x.get("cupy_ms"), ".4f"),
                       number(x.get("ratio_torch"), ".2f"), number(x.get("ratio_cupy"), ".2f")]
                      for x in programs])
    compiled = [x for x in lines if x.get("kind") == "compile"]
    if compiled:
        out += ["", "NVRTC compile (in parallel, inside the session's time): " + "; ".join(
            f"{x['bundle']} {x['kernels']} kernels in {x['seconds']:.1f} s" for x in compiled)
            + "."]
    failed = [x for x in measured if x["status"] != "ok"]
    if failed:
        out += ["", "### Failed", ""]
        out += [f"- {x['name']} at {x['stage']}: {x['error']}" for x in failed]
    return "\n".join(out) + "\n"


def _ms(line: dict[str, Any] | None, field: str) -> float | None:
    seconds = None if line is None else line.get(field)
    return None if seconds is None else seconds * 1e3


def fidelity(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The timed kernels as ``benchmarks/model_fidelity.py --data`` reads them (rivals as rows
    ``id~n``)."""
    rows = []
    for x in lines:
        if x.get("kind") != "kernel":
            continue
        name = x.get("id") or x["name"]
        rows.append({"id": name + (f"~{x['rank']}" if x.get("rank") else ""),
                     "status": x["status"], "treduda_ms": x.get("treduda_ms"),
                     "predicted_ms": _ms(x, "predicted_seconds"),
                     **{k: x.get(k) for k in ("suite", "expression", "sizes", "dtype", "layout",
                                              "precision", "strategy", "params", "grid",
                                              "block", "registers")}})
    devices = sorted({x["device"] for x in lines if "device" in x})
    return {"suite": "gpu_session (bundles)", "device": ", ".join(devices), "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl", nargs="+", help="JSON-lines files of the GPU session")
    parser.add_argument("--markdown", metavar="FILE", help="write the tables here (else print)")
    parser.add_argument("--fidelity", metavar="FILE",
                        help="write the input of benchmarks/model_fidelity.py --data here")
    args = parser.parse_args(argv)
    lines = read(args.jsonl)
    text = markdown(lines)
    if args.markdown:
        with open(args.markdown, "w") as stream:
            stream.write(text)
    else:
        print(text, end="")
    if args.fidelity:
        with open(args.fidelity, "w") as stream:
            json.dump(fidelity(lines), stream, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
