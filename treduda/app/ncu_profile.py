"""The GPU session's Nsight Compute step (issues 37 and 40): a small, fixed set of the bundles'
kernels, each launched once under ``ncu`` with its metrics named (not ``--set full``), into one
JSON file that ``benchmarks/ncu_compare.py`` reads here, beside :meth:`treduda.Kernel.counters`.

    python -m treduda.app.ncu_profile pairs --data FILE -o .bundles/ncu/pairs.zip   # here
    python -m treduda.app.ncu_profile cases -o .bundles/ncu/shared.zip              # here
    python -m treduda.app.ncu_profile profile .bundles --out $OUT/ncu.json          # there
    python -m treduda.app.ncu_profile launch .bundles                   # what ncu runs

The kernels (:data:`SELECTION`): first the shared-memory rule's cases
(:mod:`treduda.app.shared_cases`, bundle ``shared``: nine one-warp kernels of a thousand reads
each, microseconds a launch, first so that a step cut short still has them), which say whether
Hopper serves wide accesses in the phases that :func:`treduda.run.counters.shared_wavefronts`
counts; then five whose memory counters test the emulator's (issues 37/40: ncu's sectors per
request and bank conflicts equal ``Kernel.counters()``): GEMM 4096³'s fp32 and fp16 picks,
tccg_20 and tccg_32 (its pick takes the full box) in fp16, and tccg_03~1 in fp32 (8-way bank
conflicts by the counters, yet as fast as tccg_03, which has none); then the pairs the model
orders against the H200's times or whose shared accesses the rule of
:func:`treduda.run.counters.shared_wavefronts` is to be checked on (tccg_03/03~1, 09/09~1,
04/04~1, 19/19~2, 20/20~2, 05/05~1, 13~1/13~2, 18/18~2, 15/15~1), for their stall reasons, hit
rates, occupancy and issue-slot use. The pairs are generated here from the parameters the file
of their measurement records, into a bundle of their own (``pairs``), whatever a search picks
today: today's kernels for those parameters (the fidelity tool says which are no longer the
kernels timed then; their ncu durations compare where the file's times do not).

``profile`` runs ``ncu`` on ``launch`` (every kernel once, on random operands: nothing checked
or timed) with ``--kernel-name`` matching the kernels' functions and ``--launch-count`` their
number, ``--clock-control none`` (the clocks as the card has them) and CSV in base units.
Where ncu is not installed, or cannot read the counters (a sandboxed runtime), the file says
so and the session goes on; where a run returns nothing and ncu refused a metric (names
differ between its versions), the next run leaves out the metrics its errors name, or asks
only :data:`CORE` where they name none. Needs no compiler (no isl): it runs on the GPU's
machine.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..errors import TredudaError
from .files import write_text
from .shared_cases import ENTRIES as SHARED_CASES
from .shared_cases import export_cases

# Bundle (its file name without the plan's number) and entry: the kernels profiled, in order.
SELECTION = (*SHARED_CASES, "gemm:gemm/gemm_4096", "gemm_fp16:gemm_fp16/gemm_4096",
             "tccg_fp16:tccg_fp16/tccg_20", "tccg_fp16:tccg_fp16/tccg_32",
             "pairs:pairs/tccg_03~1", "pairs:pairs/tccg_03", "pairs:pairs/tccg_09",
             "pairs:pairs/tccg_09~1", "pairs:pairs/tccg_04",
             "pairs:pairs/tccg_04~1", "pairs:pairs/tccg_19", "pairs:pairs/tccg_19~2",
             "pairs:pairs/tccg_20", "pairs:pairs/tccg_20~2", "pairs:pairs/tccg_05",
             "pairs:pairs/tccg_05~1", "pairs:pairs/tccg_13~1", "pairs:pairs/tccg_13~2",
             "pairs:pairs/tccg_18", "pairs:pairs/tccg_18~2", "pairs:pairs/tccg_15",
             "pairs:pairs/tccg_15~1")
# The H200 pairs the model mis-orders with no mechanism found on the CPU
# (docs/model-fidelity.md): block size at equal warps (04, 20), rated equal 2.3x apart (05),
# slow with many loads in flight (13~1), one block per SM (18 against 18~2, 15 against 15~1);
# 09/09~1 read by LDS.128 along the reduction, 4 and 2 ways a quarter-warp by the counters'
# rule (docs/model-fidelity.md, "Wide shared accesses"), which the model does not price.
PAIRS = ("tccg_03", "tccg_03~1", "tccg_09", "tccg_09~1", "tccg_04", "tccg_04~1", "tccg_19",
         "tccg_19~2", "tccg_20", "tccg_20~2", "tccg_05", "tccg_05~1", "tccg_13~1", "tccg_13~2",
         "tccg_18", "tccg_18~2", "tccg_15", "tccg_15~1")
PAIRS_SUITE = "pairs"
SECONDS = 180
ATTEMPTS = 3  # runs of ncu: a refused metric is left out of the next (or all but CORE)
REFUSED = "refused a metric"  # the status of a run that ncu ended on a metric it does not know

# Nsight Compute's names (its Profiling Guide, "Metrics Reference" and the memory tables): the
# sectors and requests of global accesses, the wavefronts and bank conflicts of shared ones and
# the warp instructions that make them (a shared access's requests), per operation.
GLOBAL_OPS = ("ld", "st", "red", "ldgsts")
SHARED_OPS = ("ld", "st", "ldsm", "ldgsts")
SHARED_REQUESTS = {"ld": "smsp__inst_executed_op_shared_ld.sum",
                   "st": "smsp__inst_executed_op_shared_st.sum",
                   "ldsm": "smsp__inst_executed_op_ldsm.sum",
                   "ldgsts": "smsp__inst_executed_op_ldgsts.sum"}
# The same count of shared loads from patched SASS (Nsight Compute's "sass" metrics count
# instructions by instrumenting the kernel, NVIDIA's developer forum, "definition of sass inst
# executed"): where the hardware counter above is refused or differs, the cases still compare.
SASS_SHARED_LOADS = "smsp__sass_inst_executed_op_shared_ld.sum"
# The warp states of Nsight Compute's WarpStateStats section (its CPIStall rule's list), each
# as warps stalled for it per issued instruction (together: the cycles between two issues).
STALLS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
          "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc",
          "no_instruction", "not_selected", "short_scoreboard", "sleeping", "tex_throttle",
          "wait")
DURATION = "gpu__time_duration.sum"
REGISTERS = "launch__registers_per_thread"
THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"
ISSUE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
ELIGIBLE = "smsp__warps_eligible.avg.per_cycle_active"
CYCLES_PER_ISSUE = "smsp__average_warp_latency_per_inst_issued.ratio"
L1_HIT = "l1tex__t_sector_hit_rate.pct"
L2_HIT = "lts__t_sector_hit_rate.pct"
DRAM_READ = "dram__bytes_read.sum"
INSTRUCTIONS = "smsp__inst_executed.sum"
LOCAL_LOADS = "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"


def global_metric(quantity: str, operation: str) -> str:
    """``quantity`` "sectors" or "requests" of global accesses of ``operation``."""
    return f"l1tex__t_{quantity}_pipe_lsu_mem_global_op_{operation}.sum"


def shared_metric(quantity: str, operation: str) -> str:
    """``quantity`` "wavefronts" or "bank_conflicts" of shared accesses of ``operation``."""
    pipe = ("data_pipe_lsu_wavefronts" if quantity == "wavefronts" else
            "data_bank_conflicts_pipe_lsu")
    return f"l1tex__{pipe}_mem_shared_op_{operation}.sum"


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


# What a first run asks; CORE, the names in most common use, what a next one asks where ncu
# refused a metric without naming it.
CORE = (*(global_metric(q, op) for op in ("ld", "st") for q in ("sectors", "requests")),
        *(shared_metric(q, op) for op in ("ld", "st") for q in ("wavefronts", "bank_conflicts")),
        SHARED_REQUESTS["ld"], SHARED_REQUESTS["st"], *map(stall_metric, STALLS),
        CYCLES_PER_ISSUE, DURATION, ACHIEVED, ISSUE, L1_HIT, L2_HIT)
METRICS = (*CORE,
           *(global_metric(q, op) for op in GLOBAL_OPS[2:] for q in ("sectors", "requests")),
           *(shared_metric(q, op) for op in SHARED_OPS[2:] for q in ("wavefronts",
                                                                      "bank_conflicts")),
           SHARED_REQUESTS["ldsm"], SHARED_REQUESTS["ldgsts"], SASS_SHARED_LOADS,
           stall_metric("gmma"), REGISTERS,
           THEORETICAL, ELIGIBLE, DRAM_READ, INSTRUCTIONS, LOCAL_LOADS)
# Units Nsight Compute may print a time or an amount of bytes in: read as seconds and bytes.
UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
         "second": 1.0, "s": 1.0, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


@dataclass(frozen=True)
class Chosen:
    """One kernel to profile: as named (``bundle:entry``), the bundle that holds it, its
    entry's name and manifest entry."""

    key: str
    bundle: Path
    name: str
    entry: dict[str, Any]

    def record(self) -> dict[str, Any]:
        """What the comparer needs to generate it again here and to name it."""
        return {"bundle": self.bundle.name, "entry": self.name,
                **{k: self.entry.get(k) for k in ("function", "expression", "sizes", "dtype",
                                                  "layout", "precision", "strategy", "params",
                                                  "grid", "block")},
                "metadata": self.entry.get("metadata") or {}}


def bundles_in(folder: str | Path) -> dict[str, Path]:
    """The bundles of a session's folder and its ``ncu/`` folder, by file name without the
    plan's number (``07b_tccg_fp16_group.zip``: ``tccg_fp16_group``)."""
    folder = Path(folder)
    paths = sorted([*folder.glob("*.zip"), *folder.glob("ncu/*.zip")])
    return {re.sub(r"^\d+[a-z]?_", "", p.stem): p for p in paths}


def select(folder: str | Path, wanted: Sequence[str] = SELECTION
           ) -> tuple[list[Chosen], list[str]]:
    """The entries ``wanted`` (``bundle:entry``) that the folder's bundles hold, each kernel
    once, and the ones missing (a kernel two entries share is profiled for the first)."""
    import zipfile

    found, manifests = bundles_in(folder), {}
    chosen, missing, functions = [], [], set()
    for item in wanted:
        short, _, name = item.partition(":")
        path = found.get(short)
        if path is not None and path not in manifests:
            try:
                with zipfile.ZipFile(path) as archive:
                    manifests[path] = json.loads(archive.read("manifest.json"))["kernels"]
            except (OSError, KeyError, ValueError, zipfile.BadZipFile):
                manifests[path] = {}  # not a bundle: its entries are missing
        entry = None if path is None else manifests[path].get(name)
        if entry is None or entry["function"] in functions:
            missing.append(item if entry is None else f"{item} (the kernel of another entry)")
            continue
        functions.add(entry["function"])
        chosen.append(Chosen(item, path, name, entry))
    return chosen, missing


def launch(chosen: Sequence[Chosen], *, pocl: bool = False, out: TextIO | None = None) -> int:
    """Run each kernel once on random operands (on PoCL where ``pocl``, those too large
    for the CPU built and bound only): what ncu profiles.
    Every kernel is loaded (or compiled by NVRTC, in parallel) before the first runs; one that
    fails is said and the others run. Returns 1 if one failed."""
    import numpy as np

    from ..bundle import load
    from .bundle_bench import bind_on_pocl, load_kernels, runs_on_pocl
    from .gpu_checks import gpu_libraries, random_operands

    out = sys.stdout if out is None else out
    bundles = {c.bundle: load(c.bundle, backend="opencl" if pocl else "cuda")
               for c in chosen}
    kernels = [bundles[c.bundle].kernels[c.name] for c in chosen]
    xp, torch = (np, None) if pocl else gpu_libraries()
    failed = 0
    try:
        if not pocl:
            load_kernels(kernels)
    except Exception as error:  # then each compiles at its launch, and fails alone
        print(f"loading the kernels at once failed ({type(error).__name__}: {error})", file=out)
    for kernel in kernels:
        try:
            if pocl and not runs_on_pocl(kernel):
                bind_on_pocl(kernel)
                print(f"bound {kernel.name} ({kernel.entry['function']}) on PoCL, not run: "
                      "too large for the CPU", file=out, flush=True)
                continue
            kernel(**random_operands(kernel, xp, torch))
            if not pocl:  # ncu's kernel replay saves device memory and restores it between
                # its passes (Profiling Guide, "Kernel Replay"): keep no freed blocks in CuPy's
                xp.cuda.runtime.deviceSynchronize()  # pool for it to copy
                xp.get_default_memory_pool().free_all_blocks()
        except Exception as error:  # a kernel that fails is said; the others are profiled
            failed += 1
            print(f"{kernel.name} FAILED: {type(error).__name__}: {error}", file=out, flush=True)
            continue
        print(f"launched {kernel.name} ({kernel.entry['function']})", file=out, flush=True)
    return 1 if failed else 0


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    """Each kernel's metrics from Nsight Compute's CSV (``--csv``, its details page: one line
    per kernel launch and metric under a header naming "Kernel Name", "Metric Name", "Metric
    Unit" and "Metric Value"), by the kernel's function name. Lines outside the CSV (ncu's
    ``==PROF==`` messages, the program's output) are skipped; thousands separators are read
    through, times are read as seconds and bytes as bytes whatever their prefix, a value that
    is no number ("n/a") is left out; a kernel's first launch is kept."""
    rows = csv.reader(line for line in text.splitlines() if line.startswith('"'))
    found: dict[str, dict[str, float]] = {}
    first: dict[str, str] = {}
    columns: dict[str, int] | None = None
    for row in rows:
        if "Kernel Name" in row and "Metric Value" in row:
            columns = {name: n for n, name in enumerate(row)}
            continue
        if columns is None or len(row) < len(columns):
            continue
        kernel = row[columns["Kernel Name"]].partition("(")[0].strip()
        launched = row[columns["ID"]] if "ID" in columns else "0"
        if first.setdefault(kernel, launched) != launched:
            continue
        try:
            value = float(row[columns["Metric Value"]].replace(",", ""))
        except ValueError:
            continue
        unit = row[columns["Metric Unit"]] if "Metric Unit" in columns else ""
        found.setdefault(kernel, {})[row[columns["Metric Name"]]] = value * UNITS.get(unit, 1.0)
    return found


def find_ncu() -> str | None:
    """``ncu`` on the PATH, else in the usual folders of Nsight Compute and of CUDA."""
    places = [*sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True),
              "/usr/local/cuda/bin/ncu"]
    return shutil.which("ncu") or next((p for p in places if os.access(p, os.X_OK)), None)


def profile(folder: str | Path, path: str | Path, *, seconds: float = SECONDS,
            wanted: Sequence[str] = SELECTION, ncu: str | None = None, pocl: bool = False,
            log: TextIO | None = None) -> int:
    """Profile the kernels ``wanted`` of ``folder``'s bundles with ``ncu`` (found where None;
    "" for none) within ``seconds``, writing the JSON file ``path`` first when it starts (a run
    cut short leaves it), then with ncu's CSV; without ncu, says so there. With ``pocl`` (the
    session's dry run) launches the kernels on PoCL instead, without ncu. Returns 0: the
    session goes on."""
    log = sys.stdout if log is None else log
    started = time.perf_counter()
    chosen, missing = select(folder, wanted)
    record: dict[str, Any] = {"format": 1, "status": "started", "ncu": None,
                              "entries": [c.record() for c in chosen], "missing": missing,
                              "metrics": [], "command": None, "csv": "", "log": "",
                              "seconds": None}
    write_text(str(path), json.dumps(record, indent=1))
    for item in missing:
        print(f"ncu step: no kernel {item} in {folder}", file=log)
    ncu = None if pocl else find_ncu() if ncu is None else ncu or None
    if ncu is None or not chosen:
        record["status"] = ("dry run" if pocl else "no ncu") if chosen else "no kernels"
        print(f"ncu step: {record['status']}: nothing profiled", file=log, flush=True)
        if pocl:
            launch(chosen, pocl=True, out=log)
    else:
        record["ncu"] = _version(ncu)
        metrics = list(METRICS)
        for _ in range(ATTEMPTS):
            left = seconds - (time.perf_counter() - started)
            if left < 10:
                break
            record.update(_run_ncu(ncu, folder, chosen, metrics, left))
            print(f"ncu step: {record['status']}, {len(parse_csv(record['csv']))} of "
                  f"{len(chosen)} kernels with {len(metrics)} metrics asked", file=log,
                  flush=True)
            if record["status"] != REFUSED:
                break
            named = refused(record["csv"], metrics)
            metrics = [m for m in metrics if m not in named] if named else list(CORE)
    record["seconds"] = time.perf_counter() - started
    write_text(str(path), json.dumps(record, indent=1))
    print(f"ncu step: {record['status']} in {record['seconds']:.0f} s; wrote {path}", file=log)
    return 0


def _version(ncu: str) -> str:
    try:
        done = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    return (done.stdout.strip().splitlines() or ["unknown"])[-1]


def _run_ncu(ncu: str, folder: str | Path, chosen: Sequence[Chosen], metrics: Sequence[str],
             seconds: float) -> dict[str, Any]:
    """One run of ncu on the launcher: its command, CSV, status and the end of its messages."""
    functions = "|".join(re.escape(c.entry["function"]) for c in chosen)
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "ncu.csv"
        command = [ncu, "--csv", "--print-units", "base", "--clock-control", "none",
                   "--kernel-name", f"regex:^({functions})$", "--launch-count", str(len(chosen)),
                   "--metrics", ",".join(metrics), "--log-file", str(results),
                   sys.executable, "-m", "treduda.app.ncu_profile", "launch", str(folder),
                   "--entries", ",".join(c.key for c in chosen)]
        # Its own process group: a run past its time is ended with the launcher it started.
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        try:
            output, status = process.communicate(timeout=max(seconds, 1))[0], None
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, status = process.communicate()[0], "timed out"
        text = results.read_text() if results.exists() else ""
    text = "\n".join([text, output])  # the CSV goes to the log file, or else to the output
    if status is None:
        asked = any("metric" in line.lower() for line in _errors(text))
        status = "ok" if parse_csv(text) else REFUSED if asked else "failed"
    messages = [line for line in text.splitlines() if not line.startswith('"')]
    return {"status": status, "metrics": list(metrics), "command": command, "csv": text,
            "log": "\n".join(messages[-40:])}


def _errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("==ERROR==")]


def refused(messages: str, metrics: Sequence[str]) -> list[str]:
    """The ``metrics`` that ncu's error ``messages`` name (in full, or by the name before
    their suffix): the ones to leave out of the next run."""
    errors = "\n".join(_errors(messages))
    return [m for m in metrics if re.search(rf"\b{re.escape(m.partition('.')[0])}\b", errors)]


def export_pairs(data: str | Path, path: str | Path, ids: Sequence[str] = PAIRS
                 ) -> dict[str, Any]:
    """Generate again the kernels ``ids`` (rows and rivals ``id~n``) of a measured file
    (``treduda bench --gpu-time --json``) and write them into the bundle ``path`` as
    ``pairs/ID``, each with its row's metadata and its measured time (needs the compiler)."""
    from ..api import compile
    from ..exporting import export

    try:
        measured = json.loads(Path(data).read_text())
    except (OSError, ValueError) as error:
        raise TredudaError(f"cannot read the measured file {data}: {error}") from None
    timed = {}
    for row in measured.get("rows", ()):
        for rank, kernel in enumerate((row, *(row.get("rivals") or ()))):
            timed[kernel["id"]] = (rank, kernel)
    if unknown := [i for i in ids if i not in timed]:
        raise TredudaError(f"{data} holds no kernel {', '.join(unknown)}")
    kernels, metadata = {}, {}
    for name in ids:
        rank, row = timed[name]
        name_of = f"{PAIRS_SUITE}/{name}"
        kernels[name_of] = compile(row["expression"], row["sizes"], dtype=row["dtype"],
                                   layout=row["layout"], precision=row.get("precision",
                                                                           "highest"),
                                   strategy=row["strategy"], params=row["params"], cache=False)
        metadata[name_of] = {"suite": PAIRS_SUITE, "id": name.partition("~")[0], "rank": rank,
                             "role": "rival" if rank else "pick",
                             **{k: row.get(k) for k in ("expression", "sizes", "dtype",
                                                        "layout", "strategy", "params")},
                             "precision": row.get("precision", "highest"),
                             "measured_ms": row.get("treduda_ms"),
                             "measured_spread": row.get("spread"),
                             "measured_registers": row.get("registers"),
                             "measured_on": f"{measured.get('device')} {measured.get('date')}"}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return export(kernels, path, targets=(), gpu=None, metadata=metadata)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    pairs = verbs.add_parser("pairs", help="export the measured pairs into a bundle (here)")
    pairs.add_argument("--data", required=True, help="the measured file (--gpu-time --json)")
    pairs.add_argument("-o", "--output", required=True, help="the bundle to write")
    cases = verbs.add_parser("cases", help="export the shared-memory rule's cases (here)")
    cases.add_argument("-o", "--output", required=True, help="the bundle to write")
    for verb in ("profile", "launch"):
        command = verbs.add_parser(verb, help="profile the kernels under ncu (on the GPU)"
                                   if verb == "profile" else "run each kernel once")
        command.add_argument("folder", help="the session's bundles (and their ncu/ folder)")
        command.add_argument("--entries", type=lambda text: text.split(","),
                             default=list(SELECTION), help="BUNDLE:ENTRY,... (default: "
                             "the fixed selection)")
        command.add_argument("--pocl", action="store_true",
                             help="launch on PoCL (the session's dry run)")
    run = verbs.choices["profile"]
    run.add_argument("--out", required=True, help="the JSON file to write")
    run.add_argument("--seconds", type=float, default=SECONDS, help="ncu's time in all")
    run.add_argument("--ncu", help="the ncu to run (default: found; empty: none)")
    args = parser.parse_args(argv)
    try:
        if args.verb == "pairs":
            manifest = export_pairs(args.data, args.output)
            print(f"wrote {args.output}: {len(manifest['kernels'])} kernels")
            return 0
        if args.verb == "cases":
            manifest = export_cases(args.output)
            print(f"wrote {args.output}: {len(manifest['kernels'])} kernels")
            return 0
        if args.verb == "launch":
            return launch(select(args.folder, args.entries)[0], pocl=args.pocl)
        return profile(args.folder, args.out, seconds=args.seconds, wanted=args.entries,
                       ncu=args.ncu, pocl=args.pocl)
    except TredudaError as error:
        print(f"ncu step: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
