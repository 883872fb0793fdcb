"""The GPU session's JSON lines (`treduda bench --bundle FILE --gpu-time --jsonl`, written by
benchmarks/gpu_session.sh) as Markdown tables, and as the input of the model's fidelity tool;
the one writer of the README's measured table.

    python benchmarks/gpu_report.py results.jsonl [more.jsonl] [--markdown report.md]
                                    [--fidelity fidelity.json]
    python benchmarks/gpu_report.py --readme benchmarks/data/h200_measured_2026-11-26.json

One table per group of picks (suite, dtype, precision): treduda's time and its spread over the
interleaved rounds, torch.einsum's and cupy.einsum's likewise, the ratios (the library's time
over treduda's: above 1, treduda is faster) and GFLOP/s; then the rivals beside their picks
(predicted and measured: the model's ranking), the programs, the NVRTC compile times and the
failed entries. ``--fidelity`` writes the rows as ``benchmarks/model_fidelity.py --data``
reads them, each kernel's code digest with them. ``--readme`` prints the short table
README.md holds between its ``gpu-table`` markers (tests/test_readme.py checks that the two
are the same). Needs only the standard library, so it runs on the GPU machine too.
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
    rounds) as JSON lines: the GEMM 4096³ kernels (``gemm4096``: the search's pick, then
    variants), each row's pick, then its rivals (``id~n``), and the rows a run's log kept
    (``rows_from_log``: the ratio to torch.einsum and the rivals' times), where it has them."""
    common = {"kind": "kernel", "status": "ok", "device": data.get("device", "?"),
              "date": data.get("date"), "bundle": data.get("suite", "?")}
    lines = []
    for rank, timed in enumerate(data.get("gemm4096", ())):
        lines.append({**common, **timed, "suite": "gemm", "id": "gemm_4096",
                      "name": f"gemm_4096 ({timed['label']})", "rank": rank,
                      "role": "variant" if rank else "pick",
                      "precision": timed.get("precision") or "highest",
                      "treduda_spread": timed.get("spread"),
                      "predicted_seconds": _seconds(timed.get("predicted_ms"))})
    for row in data["rows"]:
        for rank, timed in enumerate((row, *(row.get("rivals") or ()))):
            lines.append({**common, **_oldest(timed), "name": row["id"], "rank": rank,
                          "id": row["id"].partition("~")[0],
                          "role": "rival" if rank else "pick",
                          "precision": timed.get("precision", "highest"),
                          "treduda_spread": timed.get("spread"),
                          "predicted_seconds": _seconds(timed.get("predicted_ms"))})
    first = data["rows"][0] if data["rows"] else {}  # the log's rows are the same suite's
    for row in data.get("rows_from_log", ()):
        known = {"suite": first.get("suite", "?"), "id": row["id"],
                 "dtype": first.get("dtype", "?"),
                 "precision": first.get("precision") or "highest", "from_log": True}
        lines.append({**common, **known, "name": row["id"], "rank": 0, "role": "pick",
                      "ratio_torch": row["ratio_torch"]})
        lines += [{**common, **known, "name": f"{row['id']}~{rank}", "rank": rank,
                   "role": "rival", "treduda_ms": ms}
                  for rank, ms in enumerate(row.get("rival_ms") or (), 1)]
    return lines


def _oldest(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the oldest such files (benchmarks/data/h100_measured.json: ``measured_ms``,
    ``torch_einsum_ms``, no status) in the later fields."""
    if "measured_ms" not in row:
        return row
    treduda, torch = row["measured_ms"], row.get("torch_einsum_ms")
    return {"status": "ok" if row.get("verified") else "failed", "stage": "verify",
            "error": "not verified", **row, "treduda_ms": treduda, "torch_ms": torch,
            "ratio_torch": torch / treduda if torch and treduda else None}


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
    return [line.get("id") or line["name"], _code(line.get("expression")),
            number(line.get("treduda_ms"), ".4f"), number(line.get("treduda_spread"), ".1%"),
            number(line.get("torch_ms"), ".4f"), number(line.get("torch_spread"), ".1%"),
            number(line.get("cupy_ms"), ".4f"), number(line.get("cupy_spread"), ".1%"),
            number(line.get("ratio_torch"), ".2f"), number(line.get("ratio_cupy"), ".2f"),
            number(line.get("gflops"), ".0f")]


def _code(expression: str | None) -> str:
    return "-" if expression is None else f"`{expression}`"


def timing(lines: Sequence[dict[str, Any]]) -> str:
    """How the kernels were timed: the session's interleaved rounds or one timing each."""
    return ("median of 3 interleaved rounds; spread = (slowest - fastest) / median of the "
            "rounds" if any("treduda_runs_ms" in x for x in lines) else
            "one timing per kernel and library; spread = (slowest - fastest) / median of "
            "treduda's launches")


def groups(lines: Sequence[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The verified and timed picks by (suite, dtype, precision, held parameters), in the
    order they came: a search held to a form (`treduda bench --hold`) is a group of its own."""
    found: dict[tuple, list[dict[str, Any]]] = {}
    for line in lines:
        if (line.get("kind"), line.get("status"), line.get("role", "pick")) == (
                "kernel", "ok", "pick"):
            key = (line.get("suite") or line["bundle"], line["dtype"], line["precision"],
                   _held(line))
            found.setdefault(key, []).append(line)
    return found


def _held(line: dict[str, Any]) -> str:
    """The parameters a line's search was held to, as `--hold` takes them ("" for none)."""
    return " ".join(f"{k}={v}" for k, v in sorted((line.get("hold") or {}).items()))


def _title(suite: str, dtype: str, precision: str, held: str = "") -> str:
    return (f"{suite} ({dtype}{'' if precision == 'highest' else ', ' + precision})"
            + (f", held to {held}" if held else ""))


def _beside_picks(picks: Sequence[dict[str, Any]]) -> list[str]:
    """Each held search's best candidate beside its row's pick (same suite, id, dtype and
    precision): which of the two forms the GPU ran faster."""
    by_pick = {(x.get("suite"), x.get("id"), x["dtype"], x["precision"]): x
               for x in picks if not _held(x)}
    rows = []
    for held in (x for x in picks if _held(x)):
        pick = by_pick.get((held.get("suite"), held.get("id"), held["dtype"], held["precision"]))
        if pick is None:
            continue
        faster = (pick["treduda_ms"] / held["treduda_ms"]
                  if pick.get("treduda_ms") and held.get("treduda_ms") else None)
        rows.append([f"{held.get('suite')}/{held.get('id')}", _held(held),
                     number(_ms(pick, "predicted_seconds"), ".4f"),
                     number(pick.get("treduda_ms"), ".4f"),
                     number(_ms(held, "predicted_seconds"), ".4f"),
                     number(held.get("treduda_ms"), ".4f"), number(faster, ".3f"),
                     number(pick.get("ratio_torch"), ".2f"),
                     number(held.get("ratio_torch"), ".2f")])
    if not rows:
        return []
    return ["", "### Held searches beside their picks", ""] + table(
        ("row", "held to", "pick predicted ms", "pick ms", "held predicted ms", "held ms",
         "pick ms / held ms", "pick x torch", "held x torch"), rows)


def readme(lines: Sequence[dict[str, Any]], sources: Sequence[str]) -> str:
    """The README's table: per group of picks beside torch.einsum (a ratio is torch.einsum's
    time over treduda's: above 1, treduda is faster), its one row, or its best row and the
    geometric means over the rows timed in full and over every row with a ratio."""
    rows = [["contraction", "treduda ms", "torch.einsum ms", "torch / treduda"],
            ["---", "---:", "---:", "---:"]]
    for key, members in groups(lines).items():
        title = _title(*key)
        rated = [x for x in members if x.get("ratio_torch")]
        timed = [x for x in rated if x.get("treduda_ms") is not None]
        if len(members) == 1 and timed:
            rows.append([f"{title} {members[0]['id']}", *_times(timed[0])])
            continue
        if not timed:
            continue
        best = max(timed, key=lambda x: x["ratio_torch"])
        rows.append([f"{title} {best['id']} {_code(best.get('expression'))}, the best row",
                     *_times(best)])
        for label, chosen in (("timed in full", timed), ("with a ratio", rated)):
            if chosen is timed or len(rated) > len(timed):
                ratio = geometric_mean([x["ratio_torch"] for x in chosen])
                rows.append([f"{title}: geometric mean of the {len(chosen)} rows {label}", "",
                             "", f"{number(ratio, '.2f')}x"])
    devices = sorted({x["device"].split(" (")[0] for x in lines if "device" in x})
    dates = sorted({x["date"] for x in lines if x.get("date")})
    return "\n".join(["| " + " | ".join(row) + " |" for row in rows] + [
        "", f"{', '.join(devices)}, {', '.join(dates) or 'undated'}: {timing(lines)}; "
        + ", ".join(f"`{source}`" for source in sources) + "."]) + "\n"


def _times(line: dict[str, Any]) -> list[str]:
    return [number(line.get("treduda_ms"), ".3f"), number(line.get("torch_ms"), ".3f"),
            f"{number(line.get('ratio_torch'), '.2f')}x"]


def markdown(lines: Sequence[dict[str, Any]]) -> str:
    """The report: per group of picks a table and its geometric means, then rivals, programs,
    compile times and failures."""
    measured = [x for x in lines if x.get("kind") in ("kernel", "program")]
    ok = [x for x in measured if x["status"] == "ok"]
    devices = sorted({x["device"] for x in measured})
    out = [f"Measured on {', '.join(devices) or 'nothing'}: {len(ok)} of {len(measured)} "
           f"entries verified and timed ({timing(measured)})."]
    picks = [x for x in ok if x["kind"] == "kernel" and x.get("role", "pick") == "pick"]
    for key, members in groups(ok).items():
        out += ["", f"### {_title(*key)}", ""]
        out += table(PICK_COLUMNS, [_pick_cells(x) for x in members])
        means = []
        for library in ("torch", "cupy"):
            ratios = [x[f"ratio_{library}"] for x in members if x.get(f"ratio_{library}")]
            if ratios:
                means.append(f"{library}.einsum {number(geometric_mean(ratios), '.3f')}x "
                             f"over {len(ratios)} rows")
        out += ["", f"Geometric mean: {'; '.join(means) or 'no library timed'}."]
    out += _beside_picks(picks)
    rivals = [x for x in ok if x.get("role") == "rival"]
    if rivals:
        by_pick = {(x.get("suite"), x.get("id"), _held(x)): x for x in picks}
        rows = []
        for rival in rivals:
            pick = by_pick.get((rival.get("suite"), rival.get("id"), _held(rival)))
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
                                              "block", "registers", "code_digest")}})
    devices = sorted({x["device"] for x in lines if "device" in x})
    return {"suite": "gpu_session (bundles)", "device": ", ".join(devices), "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("jsonl", nargs="+", help="JSON-lines files of the GPU session, or "
                        "`treduda bench --gpu-time --json` files as benchmarks/data/ keeps them")
    parser.add_argument("--markdown", metavar="FILE", help="write the tables here (else print)")
    parser.add_argument("--fidelity", metavar="FILE",
                        help="write the input of benchmarks/model_fidelity.py --data here")
    parser.add_argument("--readme", action="store_true",
                        help="print only the README's table (between its gpu-table markers)")
    args = parser.parse_args(argv)
    lines = read(args.jsonl)
    if args.readme:
        print(readme(lines, args.jsonl), end="")
        return 0
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
