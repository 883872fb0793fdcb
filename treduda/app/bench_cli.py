"""The `treduda bench` command (and benchmarks/bench.py, benchmarks/gpu.py): its options, and
which benchmark they run, the model and PoCL one (:mod:`.bench`) or the GPU one
(:mod:`.gpu_bench`, which builds on the first)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import TredudaError
from ..frontend.dtype_names import PRECISIONS
from ..run.timing import REPEATS
from ..suites import SUITE_CHOICES
from ..tuning.budgets import BENCH_MAX_NODES
from .files import writable

# The element types `treduda bench --dtype` offers: those the suites' baselines (cuBLAS through
# cupy.einsum and torch.einsum) compute in.
BENCH_DTYPES = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")


def _ids(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def count(text: str) -> int:
    """An option's count (an int >= 0), for argparse's ``type=``."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a count such as 5, got {text!r}")
    return int(text)


def param(text: str) -> tuple[str, object]:
    """NAME=VALUE, for argparse's ``type=``; the value becomes an int or a bool where it reads
    as one."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE such as block_x=32, got {text!r}")
    value = value.strip()
    if value.lstrip("-").isdigit():
        return name.strip(), int(value)
    booleans = {"true": True, "false": False}
    return name.strip(), booleans.get(value.lower(), value)


def bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `treduda bench` (and of benchmarks/bench.py)."""
    parser.add_argument("--suite", choices=SUITE_CHOICES, default="tccg_fp32",
                        help="the suite to run; all: every suite (rows named suite/id)")
    parser.add_argument("--gpu", default="H100", help="the GPU the model predicts for")
    parser.add_argument("--dtype", choices=BENCH_DTYPES,
                        help="run every row in this element type instead of its suite's")
    parser.add_argument("--precision", choices=PRECISIONS,
                        help="float32 rows only: round the products' inputs to TF32 (tf32, as "
                             "torch's allow_tf32) or split them (3xtf32), instead of the suite's "
                             "precision; the GPU benchmark's torch.einsum uses TF32 exactly "
                             "when this is tf32")
    parser.add_argument("--json", metavar="FILE", help="write every row to this file")
    parser.add_argument("--plot", metavar="FILE", help="write a PNG bar plot (needs matplotlib)")
    parser.add_argument("--limit", type=count, metavar="N", help="run only the first N rows")
    parser.add_argument("--ids", type=_ids, metavar="ID,ID", help="run only these rows")
    parser.add_argument("--max-nodes", type=count, default=BENCH_MAX_NODES, metavar="N",
                        help="the search's node budget per row (default %(default)s)")
    parser.add_argument("--gpu-time", action="store_true",
                        help="time each searched kernel on this machine's GPU beside "
                             "cupy.einsum and torch.einsum (needs CuPy and a GPU; without one "
                             "it says so and times nothing)")
    parser.add_argument("--repeats", type=count, default=REPEATS, metavar="N",
                        help="timed launches per kernel with --gpu-time (default %(default)s)")
    parser.add_argument("--picks", metavar="FILE",
                        help="with --gpu-time: time the kernels an earlier run chose (its --json "
                             "file) instead of searching again, and the rivals it recorded")
    parallel_arguments(parser, "rows", None)
    parser.add_argument("--export", metavar="FILE",
                        help="write the rows' picks and --rivals (default 2 here) into this "
                             "bundle, with the rows' metadata, for --bundle on a GPU machine")
    parser.add_argument("--plan", metavar="FILE",
                        help="with --export FOLDER: write one bundle per line of FILE (a name, "
                             "then `treduda bench` options; '-': stdin) into FOLDER as "
                             "name.zip, every bundle's rows searched together")
    parser.add_argument("--no-verify", dest="verify", action="store_false",
                        help="with --export: do not check each pick on PoCL here (the GPU run "
                             "checks every entry at full size)")
    parser.add_argument("--cubins", action="store_true",
                        help="with --export: add sm_90 cubins (nvcc, here) instead of leaving "
                             "the sources to NVRTC on the GPU's machine")
    parser.add_argument("--bundle", metavar="FILE",
                        help="with --gpu-time: time this bundle's kernels and programs (no "
                             "search, no isl needed) beside torch.einsum and cupy.einsum, "
                             "appending a JSON line per entry to --jsonl")
    parser.add_argument("--jsonl", metavar="FILE", help="with --bundle: the JSON-lines file")
    parser.add_argument("--pocl", action="store_true",
                        help="with --bundle: run on PoCL instead of a GPU (a dry run)")
    parser.add_argument("--nvrtc", action="store_true",
                        help="with --bundle: compile every source with NVRTC, even where the "
                             "bundle holds a cubin for this GPU")
    parser.add_argument("--stop-after", type=float, metavar="SECONDS",
                        help="with --bundle: start no entry after this many seconds")
    parser.add_argument("--hold", action="append", type=param, default=[], metavar="K=V",
                        help="hold every row's search to this value of a parameter, or to "
                             "strategy=NAME (repeatable; e.g. strategy=tensorcore "
                             "free_layout=padded): the best candidate of a form the search does "
                             "not pick, kept out of the tuning cache; without strategy=, only "
                             "the strategies with every held parameter are searched (staged_b="
                             "True: warpgroup); a row whose strategy lacks the parameter or "
                             "value fails, saying what it offers")
    parser.add_argument("--rivals", type=count, default=None, metavar="N",
                        help="without --gpu-time: record each pick's N best rivals predicted "
                             "at distinct times in --json, for --gpu-time --picks to time as "
                             "calibration data (benchmarks/model_fidelity.py --data reads it)")


def parallel_arguments(parser: argparse.ArgumentParser, what: str, workers: int | None) -> None:
    """--workers and --scheduler: run the ``what`` in parallel on Dask distributed (as
    `treduda tune` does; needs treduda[tune])."""
    default = "(default %(default)s)" if workers else "(default: one at a time, in this process)"
    parser.add_argument("--workers", type=count, default=workers, metavar="N",
                        help=f"run the {what} on a local Dask cluster of N worker processes "
                             f"{default}")
    parser.add_argument("--scheduler", metavar="tcp://HOST:8786",
                        help=f"run the {what} on this existing Dask cluster instead")


def bench_command(args: argparse.Namespace) -> int:
    """Run `treduda bench` from parsed arguments."""
    if args.bundle:
        return _bundle_command(args)
    from . import bench, gpu_bench  # the library's compiling parts: on use (cli.py)

    cases = bench.select(args.suite, args.ids, args.limit, args.dtype, args.precision,
                         args.hold)
    writable(args.json)
    writable(args.plot)
    if args.picks and not args.gpu_time:
        raise TredudaError("--picks times an earlier run's kernels on a GPU: add --gpu-time")
    if args.rivals and args.gpu_time:
        raise TredudaError("--rivals records rivals for a later GPU run: run without "
                           "--gpu-time and --json FILE, then --gpu-time --picks FILE")
    if args.gpu_time and (args.workers or args.scheduler):
        raise TredudaError("--gpu-time times on this machine's GPU, one kernel at a time: "
                           "leave out --workers and --scheduler")
    if args.export:
        from .bench_export import Planned, export_suites

        if args.plan:
            folder = Path(args.export)
            folder.mkdir(parents=True, exist_ok=True)
            bundles = planned(_plan_lines(args.plan), folder)
        else:
            writable(args.export)
            bundles = [Planned(Path(args.export), tuple(cases), _rivals(args))]
        export_suites(bundles, gpu=args.gpu, max_nodes=args.max_nodes, workers=args.workers,
                      scheduler=args.scheduler, verify=args.verify, cubins=args.cubins)
        return 0
    if args.gpu_time:
        picks = gpu_bench.load_picks(args.picks, cases) if args.picks else None
        return gpu_bench.run(cases, gpu=args.gpu, max_nodes=args.max_nodes,
                             repeats=max(1, args.repeats), json_path=args.json,
                             plot_path=args.plot, title=args.suite, picks=picks)
    return bench.run(cases, gpu=args.gpu, max_nodes=args.max_nodes, json_path=args.json,
                     plot_path=args.plot, title=args.suite, rivals=args.rivals or 0,
                     workers=args.workers, scheduler=args.scheduler)


def _rivals(args: argparse.Namespace) -> int:
    return 2 if args.rivals is None else args.rivals


def _plan_lines(path: str) -> list[str]:
    if path == "-":
        return sys.stdin.read().splitlines()
    return Path(path).read_text().splitlines()


def planned(lines: Sequence[str], folder: Path) -> list[Any]:
    """The bundles (:class:`~treduda.app.bench_export.Planned`) of a plan's ``lines``: a
    name, then `treduda bench` options (blank lines and ``#`` comments skipped), each the file
    ``folder/name.zip``."""
    from .bench import select
    from .bench_export import Planned

    parser = argparse.ArgumentParser(prog="plan line", exit_on_error=False)
    bench_arguments(parser)
    bundles = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, *options = shlex.split(line)
        try:
            args = parser.parse_args(options)
        except argparse.ArgumentError as error:
            raise TredudaError(f"plan line {line.strip()!r}: {error}") from None
        cases = select(args.suite, args.ids, args.limit, args.dtype, args.precision,
                       args.hold)
        bundles.append(Planned(folder / f"{name}.zip", tuple(cases), _rivals(args)))
    return bundles


def _bundle_command(args: argparse.Namespace) -> int:
    """`treduda bench --bundle FILE --gpu-time`: without the compiler (the GPU machine's)."""
    from . import bundle_bench

    if not args.gpu_time or not args.jsonl:
        raise TredudaError("--bundle times a bundle: add --gpu-time and --jsonl FILE (add "
                           "--pocl to run it on PoCL without a GPU)")
    writable(args.jsonl)
    return bundle_bench.run(args.bundle, jsonl=args.jsonl, repeats=max(1, args.repeats),
                            pocl=args.pocl, nvrtc=args.nvrtc, limit=args.limit,
                            stop_after=args.stop_after)


def main(argv: Sequence[str] | None = None) -> int:
    from . import bench

    parser = argparse.ArgumentParser(prog="bench", description=bench.__doc__.splitlines()[0])
    bench_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return bench_command(args)
    except (TredudaError, OSError) as error:  # one line, as `treduda bench` says them
        print(f"bench: error: {error}", file=sys.stderr)
        return 2
