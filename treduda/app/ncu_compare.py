"""The GPU session's Nsight Compute file (`benchmarks/gpu_session.sh`'s ncu step,
:mod:`treduda.app.ncu_profile`) beside what treduda counts here without a GPU.

    python benchmarks/ncu_compare.py ncu.json [--steps 2]

First the shared-memory rule's cases (:mod:`treduda.app.shared_cases`): per case, ncu's
shared wavefronts per shared load instruction beside the figures the bundle recorded, by the
rule of :func:`treduda.run.counters.shared_wavefronts`, by the rule without its pair merge,
and by the model (one phase of the warp); then which cases disagree with the rule. Then, per
kernel, ncu's global sectors per request and shared wavefronts and bank conflicts
per request beside :meth:`treduda.Kernel.counters` of the same kernel, generated again here from
the parameters the file records (issues 37/40: they should be equal). ncu counts every block of
the whole kernel; the counters emulate the first block, ``--steps`` iterations of its main loop
and the code around it, so it is the figures per request that compare (edge blocks, guarded,
can differ). A shared access's requests are its warp instructions
(``smsp__inst_executed_op_shared_ld`` and the like); conflicts are the wavefronts beyond the
ideal. Then the kernels of one row (a pick and its rivals, as the pairs the model orders
against the measurement) side by side: their measured time, ncu's duration, occupancy, issue
use, hit rates and the warp stall reasons that matter (warps stalled per issued instruction).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from ..errors import TredudaError
from . import ncu_profile as ncu
from . import shared_cases
from .bench import aligned, number

STEPS = 2
MEMORY_COLUMNS = ("kernel", "access", "ncu requests", "ncu per req", "counted per req",
                  "ideal per req", "ncu conflicts/req", "counted conflicts/req", "equal")
AGREE = 0.02  # per-request figures this close (relative, or absolute below 1) are equal
# The figures a case's metadata records (shared_cases.Case.expected), as its columns name them
CASE_FIGURES = (("rule", "rule"), ("unmerged", "rule without merge"),
                ("model", "model (one phase)"))
CASE_COLUMNS = ("case", "bytes", "ncu requests", "ncu wavefronts/req", "ncu conflicts/req",
                *(label for _, label in CASE_FIGURES), "ncu equals")
STALL_SHOWN = 0.05  # a stall reason is listed where some kernel has this many warps per issue
PAIR_ROWS = (("ncu duration ms", ncu.DURATION, 1e3, ".4f"),
             ("registers", ncu.REGISTERS, 1, ".0f"),
             ("theoretical occupancy %", ncu.THEORETICAL, 1, ".1f"),
             ("achieved occupancy %", ncu.ACHIEVED, 1, ".1f"),
             ("issue slots busy %", ncu.ISSUE, 1, ".1f"),
             ("eligible warps per cycle", ncu.ELIGIBLE, 1, ".2f"),
             ("warp cycles per issue", ncu.CYCLES_PER_ISSUE, 1, ".2f"),
             ("L1 hit %", ncu.L1_HIT, 1, ".1f"),
             ("L2 hit %", ncu.L2_HIT, 1, ".1f"),
             ("DRAM read MB", ncu.DRAM_READ, 1e-6, ".1f"),
             ("local load sectors", ncu.LOCAL_LOADS, 1, ".0f"),
             ("instructions (warp)", ncu.INSTRUCTIONS, 1, ".3g"))


def read(path: str) -> dict[str, Any]:
    """The ncu step's JSON file."""
    try:
        with open(path) as stream:
            record = json.load(stream)
    except (OSError, ValueError) as error:
        raise TredudaError(f"cannot read the ncu step's file {path}: {error}") from None
    if "entries" not in record or "status" not in record:
        raise TredudaError(f"{path} is not the ncu step's file (no entries or status)")
    return record


def report(record: dict[str, Any], *, steps: int = STEPS, out: TextIO | None = None) -> int:
    """Print the file's status, the memory counters beside ours, and the rows' kernels side by
    side; 0 whatever ncu found (nothing to compare is said, not an error)."""
    out = sys.stdout if out is None else out
    profiled = ncu.parse_csv(record.get("csv") or "")
    entries = record["entries"]
    version = f" ({record['ncu']})" if record.get("ncu") else ""
    print(f"ncu step: {record['status']}{version}; "
          f"{sum(e['function'] in profiled for e in entries)} of {len(entries)} kernels "
          f"profiled" + (f"; not in the bundles: {', '.join(record['missing'])}"
                         if record.get("missing") else ""), file=out)
    if not profiled:
        if record.get("log"):
            print("ncu's last messages:\n" + record["log"], file=out)
        return 0
    if left_out := [m for m in ncu.METRICS if m not in (record.get("metrics") or ncu.METRICS)]:
        print(f"(not asked, after this ncu refused a metric: {', '.join(left_out)})", file=out)
    if cases := case_rows(entries, profiled):
        print("\nThe shared-memory rule's cases: ncu's wavefronts per shared load beside the "
              "recorded figures", file=out)
        print("\n".join(aligned(CASE_COLUMNS, cases, {"case", "ncu equals"})), file=out)
        print(verdict(cases), file=out)
    print("\nMemory: ncu (whole kernel) beside Kernel.counters() (first block, "
          f"{steps} main-loop steps)", file=out)
    rows = [row for entry in entries if entry["function"] in profiled
            for row in memory_rows(entry, profiled[entry["function"]], steps)]
    print("\n".join(aligned(MEMORY_COLUMNS, rows, {"kernel", "access"})), file=out)
    for title, members in rows_of_kernels(entries, profiled).items():
        print(f"\n{title}", file=out)
        print("\n".join(side_by_side(members, profiled)), file=out)
    return 0


def memory_rows(entry: dict[str, Any], metrics: dict[str, float], steps: int) -> list[list[str]]:
    """One line per access (space and operation) that ncu or the counters saw: requests,
    sectors (global) or wavefronts (shared) per request, the counters' ideal, and for shared
    accesses the bank conflicts per request."""
    try:
        counted, regenerated = _counted(entry, steps)
    except Exception as error:  # a kernel not counted here still shows ncu's figures
        counted, regenerated = {}, True
        print(f"{entry['entry']}: not counted here ({type(error).__name__}: {error})",
              file=sys.stderr)
    name = entry["entry"] + ("" if regenerated else " (generated differently here)")
    lines = []
    for space, operations in (("global", ncu.GLOBAL_OPS), ("shared", ncu.SHARED_OPS)):
        for operation in operations:
            if space == "global":
                requests = metrics.get(ncu.global_metric("requests", operation))
                moved = metrics.get(ncu.global_metric("sectors", operation))
                conflicts = None
            else:
                requests = metrics.get(ncu.SHARED_REQUESTS[operation])
                moved = metrics.get(ncu.shared_metric("wavefronts", operation))
                conflicts = metrics.get(ncu.shared_metric("bank_conflicts", operation))
            ours = counted.get((space, operation))
            if not requests and ours is None:
                continue
            theirs = [_per(moved, requests), _per(conflicts, requests)]
            mine = [None, None] if ours is None else [ours[1] / ours[0],
                                                      (ours[1] - ours[2]) / ours[0]]
            if space == "global":
                theirs[1] = mine[1] = None
            lines.append([name, f"{space} {operation}", number(requests, ".0f"),
                          number(theirs[0], ".2f"), number(mine[0], ".2f"),
                          number(ours and ours[2] / ours[0], ".2f"),
                          "" if space == "global" else number(theirs[1], ".2f"),
                          "" if space == "global" else number(mine[1], ".2f"),
                          _equal(theirs, mine)])
    return lines


def case_rows(entries: Sequence[dict[str, Any]], profiled: dict[str, dict[str, float]]
              ) -> list[list[str]]:
    """One line per profiled case of :mod:`~treduda.app.shared_cases`: its access width,
    ncu's shared load instructions (the hardware's count, else the patched SASS's), its
    wavefronts and bank conflicts per instruction, the recorded figures and which of them
    ncu's equals (within :data:`AGREE`; "none" where it equals none, "-" where ncu has no
    wavefronts)."""
    lines = []
    for entry in entries:
        meta = entry.get("metadata") or {}
        if meta.get("suite") != shared_cases.SUITE or entry["function"] not in profiled:
            continue
        metrics = profiled[entry["function"]]
        requests = (metrics.get(ncu.SHARED_REQUESTS["ld"])
                    or metrics.get(ncu.SASS_SHARED_LOADS))
        per = _per(metrics.get(ncu.shared_metric("wavefronts", "ld")), requests)
        conflicts = _per(metrics.get(ncu.shared_metric("bank_conflicts", "ld")), requests)
        figures = meta["wavefronts"]
        equal = [label for key, label in CASE_FIGURES if per is not None
                 and _equal([per], [figures[key]]) == "yes"]
        lines.append([meta["case"], str(meta["width_bytes"]), number(requests, ".0f"),
                      number(per, ".2f"), number(conflicts, ".2f"),
                      *(str(figures[key]) for key, _ in CASE_FIGURES),
                      ", ".join(equal) or ("-" if per is None else "none")])
    return lines


def verdict(cases: Sequence[list[str]]) -> str:
    """Which cases of :func:`case_rows` ncu measured at another figure than the rule's, and
    which it has no wavefronts of."""
    column = CASE_COLUMNS.index("ncu equals")
    measured = [line for line in cases if line[column] != "-"]
    differ = [line[0] for line in measured
              if CASE_FIGURES[0][1] not in line[column].split(", ")]
    said = (f"{len(differ)} of {len(measured)} cases measured disagree with the rule: "
            f"{', '.join(differ)} (see what ncu equals instead)." if differ else
            f"All {len(measured)} cases measured agree with the rule.")
    if unmeasured := [line[0] for line in cases if line[column] == "-"]:
        said += f" No wavefronts for {', '.join(unmeasured)}."
    return said


def _equal(theirs: Sequence[float | None], mine: Sequence[float | None]) -> str:
    """"yes" where every figure both sides have agrees within :data:`AGREE`, "no" where one
    does not, "-" where there is nothing to set side by side."""
    both = [(a, b) for a, b in zip(theirs, mine, strict=True) if a is not None and b is not None]
    if not both:
        return "-"
    return "yes" if all(abs(a - b) <= AGREE * max(1.0, abs(a), abs(b)) for a, b in both) else "no"


def _per(amount: float | None, requests: float | None) -> float | None:
    return amount / requests if amount is not None and requests else None


def _counted(entry: dict[str, Any], steps: int
             ) -> tuple[dict[tuple[str, str], tuple[int, int, int]], bool]:
    """The counters of the entry's kernel generated again here: per space and operation, the
    requests, transactions and ideal summed over the regions; and whether it is the kernel
    the GPU ran (the same function name)."""
    from ..api import compile

    if entry["strategy"] == shared_cases.SUITE:  # a case of the rule, written for it
        case = next(c for c in shared_cases.CASES if c.name == entry["params"]["case"])
        kernel = shared_cases.kernel(case)
    else:
        kernel = compile(entry["expression"], entry["sizes"], dtype=entry["dtype"],
                         layout=entry["layout"], precision=entry["precision"],
                         strategy=entry["strategy"], params=entry["params"], cache=False)
    sums: dict[tuple[str, str], tuple[int, int, int]] = {}
    for t in kernel.counters(steps=steps).traffic:
        was = sums.get((t.space, t.operation), (0, 0, 0))
        sums[(t.space, t.operation)] = (was[0] + t.requests, was[1] + t.transactions,
                                        was[2] + t.ideal)
    return sums, kernel.name == entry["function"]


def rows_of_kernels(entries: Sequence[dict[str, Any]], profiled: dict[str, dict[str, float]]
                    ) -> dict[str, list[dict[str, Any]]]:
    """The profiled kernels of one row of a suite (its pick and rivals), where there are two
    or more, by a title naming the row."""
    found: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        meta = entry.get("metadata") or {}
        if entry["function"] in profiled and meta.get("id"):
            found.setdefault(f"{meta.get('suite')}/{meta['id']}", []).append(entry)
    return {f"{title}: side by side": members for title, members in found.items()
            if len(members) > 1}


def side_by_side(members: Sequence[dict[str, Any]], profiled: dict[str, dict[str, float]]
                 ) -> list[str]:
    """A row's kernels in columns: measured ms, ncu's figures, then the stall reasons (warps
    stalled per issued instruction) where any kernel has :data:`STALL_SHOWN` or more."""
    metrics = [profiled[m["function"]] for m in members]
    lines = [["measured ms", *(number((m.get("metadata") or {}).get("measured_ms"), ".4f")
                               for m in members)]]
    lines += [[label, *(number(None if (v := x.get(name)) is None else v * scale, form)
                        for x in metrics)]
              for label, name, scale, form in PAIR_ROWS if any(name in x for x in metrics)]
    for space, operation in (("global", "ld"), ("shared", "ld")):
        requests = (ncu.global_metric("requests", operation) if space == "global" else
                    ncu.SHARED_REQUESTS[operation])
        moved = (ncu.global_metric("sectors", operation) if space == "global" else
                 ncu.shared_metric("wavefronts", operation))
        lines.append([f"{space} {operation} per request",
                      *(number(_per(x.get(moved), x.get(requests)), ".2f") for x in metrics)])
    stalls = [(max(x.get(ncu.stall_metric(r), 0.0) for x in metrics), r)
              for r in (*ncu.STALLS, "gmma")]
    lines += [[f"stall {reason}", *(number(x.get(ncu.stall_metric(reason)), ".2f")
                                    for x in metrics)]
              for most, reason in sorted(stalls, reverse=True) if most >= STALL_SHOWN]
    columns = ("", *(m["entry"].rpartition("/")[2] for m in members))
    return aligned(columns, lines, {""})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", help="the ncu step's JSON file ($OUT/ncu.json)")
    parser.add_argument("--steps", type=int, default=STEPS,
                        help="main-loop iterations the counters emulate (default 2)")
    args = parser.parse_args(argv)
    try:
        return report(read(args.file), steps=args.steps)
    except TredudaError as error:
        print(f"ncu_compare: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
