"""What the economy benchmarks (simt_economy.py, tensorcore_economy.py) share: measuring rows
one by one (a row's failure is its row's; the JSON kept row by row, so an interrupted run keeps
what it measured) and printing their figures as a table, and beside an earlier run's."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

from treduda.errors import TredudaError

Cells = Callable[[str, dict], list[str]]  # a row's figures as the table's cells


def arguments(doc: str, examples: str) -> argparse.ArgumentParser:
    """The options both benchmarks take: --rows (``examples`` names some), --json, --gpu,
    --before."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", help=f"comma-separated row names ({examples}); default all")
    parser.add_argument("--json", metavar="FILE", help="write every row's figures here")
    parser.add_argument("--gpu", default="H100", help="the GPU the search tunes for")
    parser.add_argument("--before", metavar="FILE",
                        help="an earlier --json, printed beside this run's figures")
    return parser


def wanted_rows(parser: argparse.ArgumentParser, rows: str | None,
                known: Sequence[str]) -> list[str]:
    """The rows ``--rows`` names (all of ``known`` without it); an unknown one ends the run."""
    wanted = [r.strip() for r in rows.split(",")] if rows else list(known)
    if unknown := [r for r in wanted if r not in known]:
        parser.error(f"no row {', '.join(unknown)}; rows are {', '.join(known)}")
    return wanted


def measure_rows(wanted: Sequence[str], measure: Callable[[str], dict], cells: Cells,
                 columns: Sequence[str], json_path: str | None) -> list[list[str]]:
    """The table line of each of ``wanted``, measured (its figures into ``json_path``), the
    time of each on stderr."""
    figures: dict[str, dict] = {}
    lines: list[list[str]] = []
    for name in wanted:
        started = time.perf_counter()
        try:
            figures[name] = measure(name)
            lines.append(cells(name, figures[name]))
        except TredudaError as error:
            figures[name] = {"error": f"{type(error).__name__}: {error}"}
            lines.append([name, "FAILED", str(error)[:60], *["-"] * (len(columns) - 3)])
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        if json_path:
            with open(json_path, "w") as out:
                json.dump(figures, out, indent=1)
    return lines


def table(columns: Sequence[str], lines: list[list[str]], left: int = 3) -> str:
    """``lines`` under ``columns``, the first ``left`` columns left-aligned, the rest right."""
    rows = [list(columns), *lines]
    widths = [max(len(r[n]) for r in rows) for n in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) if n < left else c.rjust(w)
                               for n, (c, w) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)


def beside(columns: Sequence[str], shown: Sequence[str], cells: Cells,
           lines: list[list[str]], earlier: dict) -> str:
    """The ``shown`` columns (the row's name first) of each line, as 'then -> now' against
    ``earlier`` (a --json of an earlier run)."""
    picked = [columns.index(c) for c in shown[1:]]
    rows = []
    for line in lines:
        f = earlier.get(line[0])
        then = (cells(line[0], f) if f and "error" not in f
                else [line[0], *["-"] * (len(columns) - 1)])
        rows.append([line[0], *(f"{then[n]} -> {line[n]}" for n in picked)])
    return table(shown, rows, left=1)


def print_tables(columns: Sequence[str], cells: Cells, shown: Sequence[str],
                 lines: list[list[str]], before: str | None) -> None:
    """The table of ``lines``, then (with ``before``, an earlier --json) the ``shown`` columns
    beside that run's."""
    print(table(columns, lines))
    if before:
        with open(before) as earlier:
            print(f"\nbefore ({before}) -> now")
            print(beside(columns, shown, cells, lines, json.load(earlier)))
