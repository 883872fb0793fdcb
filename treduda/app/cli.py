"""The ``treduda`` command: compile an expression to CUDA, list strategies, run the demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import strategies
from ..api import MEASURED, compile, search
from ..errors import TredudaError
from ..frontend.dtypes import DTYPES
from ..polyhedral.lower import plan
from ..tuning.cache import TuningCache
from ..tuning.gpus import table
from .bench_cli import bench_arguments, bench_command
from .demo import demo
from .tune_cli import tune_arguments, tune_command


def _size(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected INDEX=EXTENT such as i=1024, got {text!r}")
    return name.strip(), int(value)


def _param(text: str) -> tuple[str, object]:
    """NAME=VALUE; the value becomes an int or a bool where it reads as one."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE such as block_x=32, got {text!r}")
    value = value.strip()
    if value.lstrip("-").isdigit():
        return name.strip(), int(value)
    booleans = {"true": True, "false": False}
    return name.strip(), booleans.get(value.lower(), value)


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="treduda", description="CUDA kernels for tensor "
                                   "contractions written in Einstein notation.")
    commands = main.add_subparsers(dest="command", required=True)

    c = commands.add_parser("compile", help="print or write the CUDA kernel of an expression")
    _problem_arguments(c)
    c.add_argument("--strategy", default=None, metavar="NAME",
                   help="a strategy, or several chained with '+' (see `treduda strategies`)")
    c.add_argument("--param", "-p", action="append", type=_param, default=[], metavar="K=V",
                   help="a strategy parameter (repeat for each)")
    c.add_argument("--opencl", action="store_true", help="print the OpenCL text instead")
    c.add_argument("--out", "-o", help="write to this file instead of printing")

    commands.add_parser("strategies", help="list the registered strategies")

    s = commands.add_parser("space", help="list a strategy's parameters for an expression")
    _problem_arguments(s)
    s.add_argument("--strategy", default="tiled+staged", metavar="NAME")
    d = commands.add_parser("demo", help="generate, verify on PoCL and explain two kernels")
    d.add_argument("--out", "-o", metavar="DIR",
                   help="write the .cu files here (default: a new temporary folder)")
    d.add_argument("--source", action="store_true", help="print each CUDA kernel as well")

    f = commands.add_parser("search", help="find the fastest predicted kernel on a GPU")
    _problem_arguments(f)
    f.add_argument("--gpu", default="H100", help="a GPU name (see `treduda gpus`)")
    f.add_argument("--top", type=int, default=10, help="how many candidates to list")
    f.add_argument("--measure", action="store_true",
                   help="also time the best candidates (on the GPU if there is one, else on "
                        "PoCL) and pick the fastest measured")
    f.add_argument("--refine", type=int, default=0, metavar="K",
                   help="generate the K best candidates and re-rank them by walking their IR")
    f.add_argument("--ptxas", action="store_true",
                   help="re-estimate the winner with ptxas's registers and spills (needs nvcc), "
                        "and its rivals too where that makes it slower than the runner-up")
    f.add_argument("--json", help="write the result (replayable) to this file")

    commands.add_parser("gpus", help="list the GPU descriptions the model knows")

    k = commands.add_parser("cache", help="list or clear the tuning cache")
    k.add_argument("action", choices=("list", "clear"))
    k.add_argument("--path", help="the cache file (default: $TREDUDA_CACHE or the user's "
                                  "cache directory)")

    b = commands.add_parser("bench", help="search, generate and verify every contraction of a "
                            "benchmark suite")
    bench_arguments(b)

    t = commands.add_parser("tune", help="search a suite's contractions in parallel on a Dask "
                            "cluster and keep the results in the tuning cache")
    tune_arguments(t)
    return main


def _problem_arguments(command: argparse.ArgumentParser) -> None:
    """The arguments that say what to compute: expression, sizes, dtype, layout."""
    command.add_argument("expression", help='e.g. "C[i,j] = A[i,k] * B[k,j]"')
    command.add_argument("--size", "-s", action="append", type=_size, default=[], metavar="I=N",
                         help="extent of an index (repeat for each index)")
    command.add_argument("--symbolic", action="store_true",
                         help="make the sizes kernel arguments: one kernel for every size")
    command.add_argument("--dtype", choices=DTYPES, default="float32")
    command.add_argument("--layout", choices=("C", "F"), default="C",
                         help="C: row-major (last index fastest); F: column-major (first fastest)")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit where it cannot be caught
        return status
    except TredudaError as error:
        print(f"treduda: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (`treduda cache list | head`): end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left


def _run(args: argparse.Namespace) -> int:
    """Carry out the parsed command; returns the exit status."""
    if args.command == "compile":
        return _compile(args)
    if args.command == "strategies":
        for name, description in strategies.available().items():
            print(f"{name:20} {description}")
        print("\nChain a tiling with staging as tiled+staged; `treduda space EXPR -s ... "
              "--strategy NAME` lists a strategy's parameters.")
        return 0
    if args.command == "space":
        return _space(args)
    if args.command == "search":
        return _search(args)
    if args.command == "gpus":
        print(table())
        return 0
    if args.command == "bench":
        return bench_command(args)
    if args.command == "cache":
        return _cache(args)
    if args.command == "tune":
        return tune_command(args)
    return demo(args.out, args.source)


def _compile(args: argparse.Namespace) -> int:
    kernel = compile(args.expression, dict(args.size) or None, dtype=args.dtype,
                     layout=args.layout, strategy=args.strategy, params=dict(args.param) or None,
                     symbolic=args.symbolic)
    text = kernel.opencl_source if args.opencl else kernel.cuda_source
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)
        print(f"wrote {args.out}: {kernel!r}")
    else:
        print(text, end="")
    return 0


def _search(args: argparse.Namespace) -> int:
    bar = ProgressBar(sys.stderr)
    result = search(args.expression, dict(args.size), args.gpu, dtype=args.dtype,
                    layout=args.layout, measure=args.measure, progress=bar.update,
                    refine=args.refine, check=args.ptxas)
    bar.close()
    print(result.table(args.top))
    print(result.summary())
    if result.best.walked is not None:
        print(f"walking the IR of the {args.refine} best: {result.best.walked}")
    if args.measure:
        print(f"measured {result.best.measured * 1e3:.4f} ms on {result.best.measured_on} "
              f"(the fastest of the best {MEASURED}, each checked against numpy.einsum)")
    if args.json:
        with open(args.json, "w") as out:
            out.write(result.to_json())
    return 0


class ProgressBar:
    """One line on stderr, redrawn in place: nodes visited, candidates scored, best so far."""

    def __init__(self, stream):
        self.stream = stream
        self.shown = False

    def update(self, visited: int, scored: int, best: float) -> None:
        if not self.stream.isatty() and self.shown and visited % 5000:
            return
        spinner = "|/-\\"[visited // 50 % 4]
        self.stream.write(f"\r{spinner} searching: {visited} nodes visited, {scored} scored, "
                          f"best {best * 1e3:.4f} ms ")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")


def _cache(args: argparse.Namespace) -> int:
    cache = TuningCache(args.path)
    if args.action == "clear":
        print(f"removed {cache.clear()} entries from {cache.path}")
        return 0
    entries = cache.entries()
    print(f"{len(entries)} entries in {cache.path}")
    for entry in entries:
        value = entry.value
        params = " ".join(f"{k}={v}" for k, v in value.get("params", {}).items())
        measured = value.get("measured") or {}
        timed = (f"; measured {measured['seconds'] * 1e3:.4f} ms on {measured.get('device')}"
                 if isinstance(measured.get("seconds"), (int, float)) else "")
        print(f"  {entry.key}\n    {value.get('strategy')} {params}  "
              f"predicted {value.get('seconds', float('nan')) * 1e3:.4f} ms{timed}")
    return 0


def _space(args: argparse.Namespace) -> int:
    program = plan(args.expression, dict(args.size), args.layout, args.dtype,
                   symbolic=args.symbolic)
    strategy = strategies.get(args.strategy)
    space = strategy.space(program)
    defaults = strategy.defaults(program)
    print(f"{strategy.name}: {strategy.description}")
    width = max((len(p.name) for p in space.parameters), default=0)
    for p in space.parameters:
        values = ", ".join(map(str, p.values))
        searched = ("all" if p.searched is None
                    else ", ".join(str(v) for v in p.values if v in p.searched))
        print(f"  {p.name:{width}} default {defaults[p.name]!s:8} of {values}\n"
              f"  {'':{width}} {p.doc}\n"
              f"  {'':{width}} the search tries {searched}, with the {p.priority.name.lower()}")
    print("rules:\n" + "\n".join(f"  - {c.description}" for c in space.constraints))
    print(f"{space.size()} combinations before the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
