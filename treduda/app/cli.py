"""The ``treduda`` command: compile an expression to CUDA, list strategies, run the demo."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..errors import ArgumentError, MissingSize, TredudaError
from ..frontend.dtype_names import DTYPES, HIGHEST, PRECISIONS
from ..options import DEFAULT_BUDGET, Options
from .bench_cli import bench_arguments, bench_command, count, param
from .export_cli import export_arguments, export_command
from .files import writable, write_text
from .profile import profile_arguments, profile_command
from .tune_cli import tune_arguments, tune_command

if TYPE_CHECKING:
    from ..tuning.cache import TuningCache

# The library's compiling parts (isl, the model, the strategies), and numpy, are imported by
# the commands that use them, so that `treduda --help` and `treduda cache list` start at once.


def _size(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected INDEX=EXTENT such as i=1024, got {text!r}")
    if not value.strip().isdigit() or int(value) == 0:
        raise argparse.ArgumentTypeError(f"the extent of index {name.strip()} must be a "
                                         f"positive integer such as {name.strip()}=1024, got "
                                         f"{value.strip()!r}")
    return name.strip(), int(value)


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), but a wrong argument is one line, as every
    error of the command is: what is wrong, and where the help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"treduda: error: {message}; see `{self.prog} --help`\n")


def parser() -> argparse.ArgumentParser:
    main = _Parser(prog="treduda", description="CUDA kernels for tensor contractions written "
                   "in Einstein notation.")
    commands = main.add_subparsers(dest="command", required=True)

    c = commands.add_parser(
        "compile", help="print or write the CUDA kernel of an expression",
        description="Print or write the CUDA kernel of an expression. Without --strategy and "
                    "-p it searches for the fastest kernel on --gpu (as `treduda search` does, "
                    "within a budget), or takes the tuning cache's answer from an earlier "
                    "search; with --symbolic it takes the default strategy.")
    _problem_arguments(c)
    c.add_argument("--strategy", default=None, metavar="NAME",
                   help="a strategy, or several chained with '+' (see `treduda strategies`); "
                        "without it and -p, the kernel is searched for")
    c.add_argument("--param", "-p", action="append", type=param, default=[], metavar="K=V",
                   help="a strategy parameter (repeat for each; see `treduda space`)")
    c.add_argument("--gpu", default="H100",
                   help="the GPU a search tunes for (see `treduda gpus`; default %(default)s)")
    c.add_argument("--opencl", action="store_true", help="print the OpenCL text instead")
    _deterministic_argument(c)
    c.add_argument("--out", "-o", help="write to this file instead of printing")
    c.add_argument("--optimize", default="auto", metavar="PATH",
                   help="how a product of three or more tensors is split: auto (the model "
                        "chooses), false (one kernel), true or greedy, optimal, dp, cotengra")
    c.add_argument("--explain", action="store_true",
                   help="for several statements or a split product: print the plan's paths, "
                        "kernels, estimates and intermediates instead of the CUDA file")

    commands.add_parser("strategies", help="list the registered strategies")

    s = commands.add_parser("space", help="list a strategy's parameters for an expression")
    _problem_arguments(s)
    s.add_argument("--strategy", default="tiled+staged", metavar="NAME")
    d = commands.add_parser("demo", help="generate, verify on PoCL and explain two kernels")
    d.add_argument("--out", "-o", metavar="DIR",
                   help="write the .cu files here (default: a new temporary folder)")
    d.add_argument("--source", action="store_true", help="print each CUDA kernel as well")

    f = commands.add_parser(
        "search", help="find the fastest predicted kernel on a GPU",
        description="Find the fastest predicted kernel for fixed sizes on a GPU and keep it in "
                    "the tuning cache ($TREDUDA_CACHE, else the user's cache directory), where "
                    "`treduda compile` and a rerun of the same search find it.")
    _problem_arguments(f, symbolic=False)
    f.add_argument("--gpu", default="H100", help="a GPU name (see `treduda gpus`)")
    f.add_argument("--top", type=count, default=10, help="how many candidates to list")
    f.add_argument("--measure", action="store_true",
                   help="also time the best candidates (on the GPU if there is one, else on "
                        "PoCL) and pick the fastest measured")
    f.add_argument("--refine", type=count, default=0, metavar="K",
                   help="generate the K best candidates and re-rank them by walking their IR")
    f.add_argument("--ptxas", action="store_true",
                   help="re-estimate the winner with ptxas's registers and spills (needs nvcc), "
                        "and its rivals too where that makes it slower than the runner-up")
    f.add_argument("--json", help="write the result (replayable) to this file; searches even "
                                  "where the tuning cache has an answer")
    f.add_argument("--fresh", action="store_true",
                   help="search again even where the tuning cache has an answer (and replace it)")
    f.add_argument("--budget", type=float, default=DEFAULT_BUDGET, metavar="SECONDS",
                   help=f"seconds of search on the development machine, as a fixed amount of work "
                        f"(default {DEFAULT_BUDGET}): the same pick anywhere; the summary says "
                        "how far from the best of the space the winner can be")
    f.add_argument("--complete", action="store_true",
                   help="search the whole space, however long it takes (minutes for a TCCG row)")
    _deterministic_argument(f)

    commands.add_parser("gpus", help="list the GPU descriptions the model knows")

    k = commands.add_parser(
        "cache", help="list, clear, check or repair the tuning cache",
        description="list: its entries (and, with --kernels, its stored kernels); clear: "
                    "remove them all; check: whether the file is sound (exit status 1 where it "
                    "is damaged), and what it still holds; repair: rebuild a damaged file from "
                    "what it still holds, keeping the old one as FILE.damaged.")
    k.add_argument("action", choices=("list", "clear", "check", "repair"))
    k.add_argument("--path", help="the cache file (default: $TREDUDA_CACHE or the user's "
                                  "cache directory)")
    k.add_argument("--kernels", action="store_true",
                   help="list: also each generated kernel the kernel store keeps")

    b = commands.add_parser("bench", help="search, generate and verify every contraction of a "
                            "benchmark suite")
    bench_arguments(b)

    r = commands.add_parser("profile", help="count a kernel's memory transactions and SASS "
                            "instructions as Nsight Compute would, on the CPU")
    _problem_arguments(r, symbolic=False)
    r.add_argument("--strategy", default=None, metavar="NAME",
                   help="as for compile; without it and -p, the kernel is searched for")
    r.add_argument("--param", "-p", action="append", type=param, default=[], metavar="K=V")
    r.add_argument("--gpu", default="H100", help="the GPU a search tunes for")
    profile_arguments(r)

    x = commands.add_parser(
        "export", help="write kernels and programs into a bundle that runs without treduda's "
                       "compiler (treduda.bundle)",
        description="Search (or take from the tuning cache) each expression's kernel, or "
                    "plan its program, and write them all into one zip file: CUDA sources, "
                    "OpenCL twins, cubins where nvcc is installed, launch geometry. "
                    "treduda.bundle.load(FILE) runs it with numpy and CuPy, pycuda or PoCL.")
    export_arguments(x, _size)

    t = commands.add_parser("tune", help="search a suite's contractions in parallel on a Dask "
                            "cluster and keep the results in the tuning cache")
    tune_arguments(t)
    return main


def _problem_arguments(command: argparse.ArgumentParser, symbolic: bool = True) -> None:
    """The arguments that say what to compute: expression, sizes, dtype, layout (and, where a
    command takes it, --symbolic; a search needs fixed sizes)."""
    command.add_argument("expression", help='e.g. "C[i,j] = A[i,k] * B[k,j]"')
    command.add_argument("--size", "-s", action="append", type=_size, default=[], metavar="I=N",
                         help="extent of an index (repeat for each index)")
    if symbolic:
        command.add_argument("--symbolic", action="store_true",
                             help="make the sizes kernel arguments: one kernel for every size")
    command.add_argument("--dtype", choices=DTYPES, default="float32")
    command.add_argument("--layout", choices=("C", "F"), default="C",
                         help="C: row-major (last index fastest); F: column-major (first fastest)")
    command.add_argument("--precision", choices=PRECISIONS, default=HIGHEST,
                         help="float32 only: round the sums' inputs to TF32 (tf32), or split "
                              "each into two TF32 pieces (3xtf32: FP32 accuracy)")


def _deterministic_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument("--deterministic", action="store_true",
                         help="the same result bit for bit on every run: no atomic additions "
                              "(a split reduction adds its parts in a fixed order, in a second "
                              "kernel)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` says; every error treduda raises on purpose, and every file
    that cannot be read or written, is one line ``treduda: error: ...`` and exit status 2."""
    args = parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warn
            status = _run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit where it cannot be caught
        return status
    except BrokenPipeError:  # the reader left (`treduda cache list | head`): end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
        return 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left
    except (TredudaError, OSError) as error:
        print(f"treduda: error: {_message(error)}", file=sys.stderr)
        return 2


def _warn(message: Warning | str, category: type[Warning], *where: object) -> None:
    """A warning as one line, as errors are: the user needs its reason, not its source line."""
    print(f"treduda: warning: {message}", file=sys.stderr)


def _message(error: Exception) -> str:
    """What went wrong, in the command line's words: a file's name and the system's reason."""
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or error}"
    return str(error)


def _run(args: argparse.Namespace) -> int:
    """Carry out the parsed command; returns the exit status."""
    if args.command == "compile":
        return _compile(args)
    if args.command == "strategies":
        from .. import strategies

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
        from ..model.gpus import table

        print(table())
        return 0
    if args.command == "bench":
        return bench_command(args)
    if args.command == "cache":
        return _cache(args)
    if args.command == "tune":
        return tune_command(args)
    if args.command == "export":
        return export_command(args)
    if args.command == "profile":
        from ..api import compile

        return profile_command(args, compile(args.expression, _sizes(args),
                                             options=_options(args)))
    from .demo import demo

    return demo(args.out, args.source)


def _sizes(args: argparse.Namespace) -> dict[str, int]:
    """The -s sizes, each index of the expression's statements given one unless --symbolic
    makes them all kernel arguments (a missing one is said in the command line's words)."""
    from ..programs import statements

    sizes = dict(args.size)
    parts = statements(args.expression)
    indices = list(dict.fromkeys(index for part in parts for index in part.indices))
    text = "; ".join(repr(part.tree) for part in parts)
    unknown = [index for index in sizes if index not in indices]
    if unknown:
        raise ArgumentError(f"-s {unknown[0]}={sizes[unknown[0]]}: {unknown[0]} is not an index "
                            f"of {text}; its indices are {', '.join(indices) or 'none'}")
    symbolic = getattr(args, "symbolic", False)
    if symbolic and not sizes:
        return sizes
    missing = [index for index in indices if index not in sizes]
    if missing:
        noun = "index" if len(missing) == 1 else "indices"
        example = " ".join(f"-s {index}=64" for index in missing)
        alternative = (", or leave out -s: --symbolic makes every size a kernel argument"
                       if symbolic else ", or --symbolic for one kernel for every size"
                       if hasattr(args, "symbolic") else "")
        raise MissingSize(f"no size for {noun} {', '.join(missing)} of {text}; give each one, "
                          f"e.g. {example}{alternative}")
    return sizes


def _compile(args: argparse.Namespace) -> int:
    from ..api import compile
    from ..programs import statements
    from ..tuning.paths import many_factors

    writable(args.out)
    optimize = {"false": False, "true": True}.get(args.optimize.lower(), args.optimize)
    parts = statements(args.expression)
    if len(parts) > 1 or (many_factors(parts[0]) and optimize is not False):
        return _compile_program(args, optimize)
    kernel = compile(args.expression, _sizes(args) or None, options=_options(args),
                     symbolic=args.symbolic)
    return _emit(kernel.opencl_source if args.opencl else kernel.cuda_source, args.out, kernel)


def _options(args: argparse.Namespace) -> Options:
    """The command's options as one value: those of its arguments that are options (its
    parser's; --param as params, --complete as budget None)."""
    fields = {name: getattr(args, name) for name in ("dtype", "layout", "precision", "gpu",
                                                     "strategy", "deterministic", "measure",
                                                     "budget") if hasattr(args, name)}
    if getattr(args, "param", None):
        fields["params"] = dict(args.param)
    if getattr(args, "complete", False):
        fields["budget"] = None
    return Options(**fields)


def _emit(text: str, path: str | None, made: object) -> int:
    """Write ``text`` to ``path`` and say what was ``made``, or print it."""
    if path:
        write_text(path, text)
        print(f"wrote {path}: {made!r}")
    else:
        print(text, end="")
    return 0


def _compile_program(args: argparse.Namespace, optimize: object) -> int:
    """Several statements, or a product split along a path: one .cu file for all kernels."""
    from ..api import program

    if args.symbolic or args.opencl:
        raise ArgumentError("a program (several statements, or a product of three or more "
                            "tensors) is planned for fixed sizes and printed as CUDA; drop "
                            "--symbolic/--opencl, or pass --optimize false for one kernel")
    planned = program(args.expression, _sizes(args),
                      options=_options(args).replace(optimize=optimize))
    return _emit(planned.explain() + "\n" if args.explain else planned.cuda_source, args.out,
                 planned)


def _search(args: argparse.Namespace) -> int:
    from ..api import search, tuning_entry
    from ..tuning.cache import TuningCache, default_path
    from ..tuning.policy import MEASURED

    sizes = _sizes(args)
    writable(args.json)
    if not (args.fresh or args.json):
        entry = tuning_entry(args.expression, sizes, options=_options(args))
        if entry is not None:
            print(_remembered(entry, args.gpu))
            return 0
    bar = ProgressBar(sys.stderr)
    result = search(args.expression, sizes, options=_options(args), progress=bar.update,
                    refine=args.refine, check=args.ptxas, cache=True)
    bar.close()
    print(result.table(args.top))
    print(result.summary())
    if result.best.walked is not None:
        print(f"walking the IR of the {args.refine} best: {result.best.walked}")
    if args.measure:
        print(f"measured {result.best.measured * 1e3:.4f} ms on {result.best.measured_on} "
              f"(the fastest of the best {MEASURED}, each checked against numpy.einsum)")
    if args.json:
        write_text(args.json, result.to_json())
    unusable = TuningCache().degraded  # the warning said why and what to do
    print(f"kept in the tuning cache {default_path()}: `treduda compile` at these sizes and "
          "this search again answer from it (--fresh searches again)" if unusable is None else
          f"NOT KEPT: the tuning cache {default_path()} cannot be used ({unusable})")
    return 0


def _remembered(entry: dict, gpu: str) -> str:
    """A search's answer from the tuning cache: its winner alone, and where it came from."""
    from ..model.gpus import gpu as find_gpu
    from ..tuning.cache import default_path

    params = " ".join(f"{k}={v}" for k, v in entry["params"].items())
    measured = entry.get("measured") or {}
    timed = (f"; measured {measured['seconds'] * 1e3:.4f} ms on {measured.get('device')}"
             if isinstance(measured.get("seconds"), (int, float)) else "")
    return (f"from the tuning cache {default_path()}: searched 0 nodes now; the winner was "
            f"found earlier {entry.get('found', 'by a search')}\n"
            f"  {entry['strategy']} {params}\n"
            f"best on {find_gpu(gpu).name}: {entry['seconds'] * 1e3:.4f} ms predicted, "
            f"{entry.get('binding')} binds{timed}\n"
            "only the winner is kept: --fresh searches again and lists the candidates")


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
    from ..tuning.cache import TuningCache, default_path

    if args.path is not None and not Path(args.path).is_file():
        raise TredudaError(f"no tuning cache at {args.path}: the file does not exist (leave "
                           f"--path out for the default one, {default_path()})")
    if args.path is None and not default_path().exists():
        print(f"0 entries: nothing is cached yet ({default_path()} does not exist)")
        return 0
    cache = TuningCache(args.path)
    if args.action in ("check", "repair"):
        return _check(cache, args.action == "repair")
    if args.action == "clear":
        health = cache.check()
        if not health.sound:
            raise TredudaError(f"{cache.path} is not a sound tuning cache "
                               f"({'; '.join(health.problems)}), so clear leaves it alone; "
                               f"{health.advice(cache.path)}")
        kernels = cache.kernels()
        print(f"removed {cache.clear()} entries and {kernels} stored kernels from {cache.path}")
        return 0
    kernels = cache.stored_kernels()
    entries = cache.entries()
    print(f"{len(entries)} entries in {cache.path}")
    for entry in entries:
        value = entry.value
        params = " ".join(f"{k}={v}" for k, v in value.get("params", {}).items())
        measured = value.get("measured") or {}
        timed = (f"; measured {measured['seconds'] * 1e3:.4f} ms on {measured.get('device')}"
                 if isinstance(measured.get("seconds"), (int, float)) else "")
        found = f"; found {value['found']}" if value.get("found") else ""
        print(f"  {entry.key}\n    {value.get('strategy')} {params}  "
              f"predicted {value.get('seconds', float('nan')) * 1e3:.4f} ms{timed}{found}")
    stored = sum(k.bytes for k in kernels)
    print(f"{len(kernels)} generated kernels in the kernel store ({stored / 1e6:.1f} MB of at "
          f"most {cache.kernel_store_bytes / 1e6:g} MB; the oldest go first; "
          f"$TREDUDA_KERNEL_STORE_MB sets the size)")
    if args.kernels:
        for kernel in kernels:
            print(f"  {kernel}")
    return 1 if cache.degraded else 0  # the warning said why and what to do


def _check(cache: TuningCache, repair: bool) -> int:
    """`treduda cache check` (exit status 1 for a damaged file) or `repair`."""
    health = cache.repair() if repair else cache.check()
    held = f"{health.entries} entries and {health.kernels} stored kernels"
    if health.sound:
        print(f"{cache.path} is sound: {held}" + ("; nothing to repair" if repair else ""))
        return 0
    problems = "; ".join(health.problems)
    if repair:
        print(f"rebuilt {cache.path} with the {held} it still held ({problems}); the damaged "
              f"file is kept as {cache.path}.damaged")
        return 0
    print(f"{cache.path} is not a sound tuning cache: {problems}\n{held} can still be read; "
          f"{health.advice(cache.path)}")
    return 1


def _space(args: argparse.Namespace) -> int:
    from .. import strategies
    from ..polyhedral.lower import plan

    program = plan(args.expression, _sizes(args), args.layout, args.dtype,
                   symbolic=args.symbolic, precision=args.precision)
    strategy = strategies.get(args.strategy)
    space = strategy.space(program)
    defaults = strategy.defaults(program)
    print(f"{strategy.name}: {strategy.description}")
    width = max((len(p.name) for p in space.parameters), default=0)
    for p in space.parameters:
        values = ", ".join(map(str, p.values)) + (f" (or {p.accepts.description})"
                                                  if p.accepts else "")
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
