"""The benchmark suite of issue #5: search every contraction of a suite, generate, verify.

    treduda bench [--suite tccg_fp32|tccg_fp64|tc|tapp|all] [--gpu H100] [--json out.json]
                  [--plot out.png] [--limit N] [--ids tccg_01,tccg_12] [--max-nodes 3000]
                  [--gpu-time [--repeats 20]] [--workers N | --scheduler tcp://HOST:8786]

With ``--gpu-time`` each searched kernel is instead verified and timed on this machine's GPU
beside cupy.einsum and torch.einsum (see :mod:`treduda.app.gpu_bench`).

For each row, the model's search chooses a strategy and parameters at the row's full sizes,
with a node budget so one row cannot run away (the search honours it only once it has scored a
candidate, so the nodes column can exceed it). The winner is then generated at full size
(timed, and nvcc reports registers and spills when it is installed). PoCL on a CPU cannot run
full-size problems in reasonable time, so the winner is checked against numpy.einsum at
scaled-down sizes. With ``--workers`` or ``--scheduler`` the rows run in parallel on Dask
distributed, as ``treduda tune`` runs its searches (:mod:`treduda.tuning.parallel`). A row
that fails is reported in its row and the run goes on; the exit status is 1 if any row failed.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from .. import strategies
from ..api import compile, search
from ..errors import CompileError, StrategyError, TredudaError
from ..frontend.dtypes import HIGHEST, check_dtype, check_precision
from ..model.gpus import Gpu
from ..model.gpus import gpu as find_gpu
from ..polyhedral.geometry import AXES, decided, groups, split_index
from ..polyhedral.lower import plan
from ..run.nvcc import compile_cuda, compile_cuda_batch, nvcc_available, nvcc_supports
from ..suites import SUITES, Row, load, scaled
from ..tuning.budgets import BENCH_MAX_NODES
from ..tuning.parallel import Failed, run_parallel
from ..tuning.search_result import SearchResult
from ..tuning.walk import launch
from .files import write_text

# Kernels per nvcc call: each call costs about a second of start-up, while one call for a whole
# suite of large unrolled kernels could reach nvcc's time-out.
NVCC_BATCH = 12
PARAMS_WIDTH = 72
EXPRESSION_WIDTH = 40
# Shorter names for the table (the JSON keeps the full parameters).
SHORT_NAMES = {"order": "ord", "stage": "stg", "block": "blk", "assign": "asg", "preload": "pre",
               "double_buffer": "dbl", "unroll": "unr", "async_copy": "async"}


@dataclass(frozen=True)
class Case:
    """One row to run, with the dtype its suite asks for and the name it is shown under."""

    row: Row
    dtype: str = "float32"
    suite: str = ""
    label: str = ""  # the row's id unless several suites run together
    precision: str = HIGHEST  # compile()'s precision= (tf32, 3xtf32: float32 only)
    # parameters held to one value each (`treduda bench --hold`): the best candidate of a form
    # the search does not pick, for a GPU run to time beside the pick
    hold: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        return self.label or self.row.id


@dataclass
class RowRecord:
    """Which row a benchmark ran and the candidate its search chose."""

    suite: str
    id: str
    expression: str
    layout: str
    dtype: str
    sizes: dict[str, int]
    strategy: str | None = None
    params: dict[str, Any] | None = None
    precision: str = HIGHEST


@dataclass
class Outcome(RowRecord):
    """What one row measured; ``error`` set means the row FAILED (at ``stage``)."""

    predicted_seconds: float | None = None
    gflops: float | None = None
    fraction_of_peak: float | None = None
    binding: str | None = None
    search_seconds: float | None = None
    nodes_visited: int | None = None
    search_complete: bool | None = None
    generate_seconds: float | None = None
    rivals_seconds: float | None = None  # generating the rivals at full size
    kernel: str | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    blocks: int | None = None  # launched at full size
    waves: float | None = None  # of blocks on the GPU (registers estimated)
    points_per_thread: float | None = None  # output points each thread stores
    scaled_sizes: dict[str, int] | None = None
    verified: bool = False
    verified_params: str | None = None  # "searched", or "defaults" when those do not fit
    verify_note: str | None = None
    verify_seconds: float | None = None
    max_error: float | None = None
    stage: str | None = None
    error: str | None = None
    # the search's rivals of the pick (--rivals), for a GPU run to time as calibration data
    rivals: list[dict[str, Any]] | None = None
    hold: dict[str, Any] | None = None  # the case's held parameters, if any
    cuda_source: str | None = field(default=None, repr=False)  # kept for nvcc, not in JSON

    @property
    def status(self) -> str:
        return "FAILED" if self.error else "ok"

    @classmethod
    def of(cls, case: Case, **recorded: Any) -> Outcome:
        """The record of ``case``, with what is ``recorded`` of it so far."""
        row = case.row
        return cls(case.suite, case.name, row.expression, row.layout, case.dtype,
                   dict(row.sizes), precision=case.precision, hold=dict(case.hold) or None,
                   **recorded)

    def fail(self, stage: str, error: BaseException) -> None:
        self.stage, self.error = stage, f"{type(error).__name__}: {error}"

    @property
    def seconds(self) -> float:
        """The row's time: search, generation of the pick and rivals, verification."""
        return sum(t or 0.0 for t in (self.search_seconds, self.generate_seconds,
                                      self.rivals_seconds, self.verify_seconds))

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        del record["cuda_source"]
        return {"status": self.status, **record}


def select(suite: str, ids: Sequence[str] | None = None, limit: int | None = None,
           dtype: str | None = None, precision: str | None = None,
           hold: Sequence[tuple[str, Any]] = ()) -> list[Case]:
    """The rows of ``suite`` ("all": every suite, rows named suite/id), filtered by ``ids``
    (plain or suite/id) and cut to the first ``limit``; unknown ids are an error, not a skip.
    Each row runs in its suite's dtype and precision unless ``dtype`` or ``precision`` say
    otherwise (a precision other than "highest" needs float32: checked here, before any
    work), its search held to the (name, value) pairs of ``hold``."""
    names = list(SUITES) if suite == "all" else [suite]
    cases = [Case(row, dtype or SUITES[s].dtype, s, f"{s}/{row.id}" if suite == "all" else "",
                  precision or SUITES[s].precision, tuple(hold))
             for s in names for row in load(s)]
    for case in {(c.dtype, c.precision): c for c in cases}.values():
        check_dtype(case.dtype)
        check_precision(case.precision, case.dtype)
    return chosen(cases, f"suite {suite}", ids, limit)


def chosen(cases: list[Case], where: str, ids: Sequence[str] | None = None,
           limit: int | None = None) -> list[Case]:
    """``cases`` filtered by ``ids`` (names or row ids) and cut to the first ``limit``; an
    unknown id is an error that names ``where`` the rows came from."""
    if ids:
        wanted = set(ids)
        known = {c.name for c in cases} | {c.row.id for c in cases}
        if unknown := sorted(wanted - known):
            raise TredudaError(f"no row {', '.join(unknown)} in {where}; its rows are "
                               f"{', '.join(c.name for c in cases)}")
        cases = [c for c in cases if c.name in wanted or c.row.id in wanted]
    return cases if limit is None else cases[:limit]


def bench(cases: Sequence[Case], *, gpu: str | Gpu = "H100",
          max_nodes: int = BENCH_MAX_NODES, nvcc: bool | None = None,
          log: TextIO | None = None, rivals: int | Sequence[int] = 0,
          workers: int | None = None, scheduler: str | None = None,
          verify: bool = True) -> list[Outcome]:
    """Run every case (progress on ``log``), then ask nvcc about the full-size kernels.

    ``rivals`` is one count for every case or a count per case. With ``workers`` or
    ``scheduler`` the cases run in parallel on a Dask cluster, as ``treduda tune`` runs them
    (:func:`~treduda.tuning.parallel.run_parallel`)."""
    log = sys.stderr if log is None else log
    target = find_gpu(gpu)
    counts = [rivals] * len(cases) if isinstance(rivals, int) else list(rivals)
    if workers or scheduler:
        job = functools.partial(_run_job, gpu=target, max_nodes=max_nodes, verify=verify)
        results = run_parallel(job, list(zip(cases, counts, strict=True)), workers=workers or 1,
                               scheduler=scheduler, label="bench", log=log)
        outcomes = [o if isinstance(o, Outcome) else lost(c, o)
                    for c, o in zip(cases, results, strict=True)]
    else:
        outcomes = [_run_logged(number, case, cases, target, max_nodes, count, log, verify)
                    for number, (case, count) in enumerate(zip(cases, counts, strict=True), 1)]
    if nvcc_available() if nvcc is None else nvcc:
        add_nvcc_reports(outcomes, target, log)
    elif nvcc is None:  # not asked for (nvcc=False) is no news
        print("nvcc is not installed: no registers or spills", file=log)
    return outcomes


def _run_job(job: tuple[Case, int], gpu: Gpu, max_nodes: int, verify: bool) -> Outcome:
    """:func:`run_case` of a (case, rivals) job on a cluster's worker."""
    case, rivals = job
    return run_case(case, gpu, max_nodes, rivals, verify)


def _run_logged(number: int, case: Case, cases: Sequence[Case], target: Gpu, max_nodes: int,
                rivals: int, log: TextIO, verify: bool) -> Outcome:
    """:func:`run_case`, with a line on ``log`` that says which row it is and how it went."""
    print(f"[{number}/{len(cases)}] {case.name} ...", end="", file=log, flush=True)
    started = time.perf_counter()
    outcome = run_case(case, target, max_nodes, rivals, verify)
    verdict = "FAILED" if outcome.error else "verified" if verify else "done"
    print(f" {verdict} ({time.perf_counter() - started:.1f} s)", file=log, flush=True)
    return outcome


def lost(case: Case, failed: Failed) -> Outcome:
    """The row of a parallel job that never answered: its workers kept dying."""
    return Outcome.of(case, stage="worker", error=failed.error)


def run_case(case: Case, gpu: Gpu, max_nodes: int, rivals: int = 0,
             verify: bool = True) -> Outcome:
    """Search at full size, generate the winner at full size, verify it scaled down (unless
    not ``verify``); record the winner's ``rivals`` best rivals
    (:meth:`~treduda.tuning.search_result.SearchResult.rivals`) and generate them at full size
    too, here: the kernel store keeps them for whoever times or exports them next (another
    process than this cluster worker, often). The search keeps its winner in the tuning cache
    and the kernels ptxas's check generated (the winner's among them) in the kernel store,
    from which the winner is loaded instead of generated again.

    Any exception fails this row only, recorded with the stage it happened in."""
    row = case.row
    outcome = Outcome.of(case)
    stage = "search"
    options = {"dtype": case.dtype, "layout": row.layout, "precision": case.precision}
    try:
        started = time.perf_counter()
        # a held search's winner is not the row's: kept out of the tuning cache; "strategy"
        # holds the strategy searched (a held parameter narrows the search to one strategy)
        held = {name: (value,) for name, value in case.hold}
        result = search(row.expression, row.sizes, gpu, max_nodes=max_nodes, check=True,
                        cache=not held, strategy=held.pop("strategy", (None,))[0],
                        values=held or None, **options)
        record_search(outcome, result, time.perf_counter() - started)
        best = result.best
        if rivals:
            outcome.rivals = [{"strategy": c.strategy, "params": dict(c.params),
                               "predicted_seconds": c.prediction.seconds}
                              for c in result.rivals(rivals)]

        stage = "generate"
        started = time.perf_counter()
        kernel = compile(row.expression, row.sizes, strategy=best.strategy, params=best.params,
                         **options)
        outcome.cuda_source = kernel.cuda_source
        outcome.kernel = kernel.name
        outcome.generate_seconds = time.perf_counter() - started
        launched = launch(kernel, gpu)
        outcome.blocks, outcome.waves = launched.blocks, launched.waves
        outcome.points_per_thread = launched.output_points_per_thread
        stage = "generate rivals"
        started = time.perf_counter()
        for rival in outcome.rivals or ():
            compile(row.expression, row.sizes, strategy=rival["strategy"],
                    params=rival["params"], **options)
        outcome.rivals_seconds = time.perf_counter() - started if rivals else None

        if verify:
            stage = "verify"
            verify_scaled(outcome, result, row)
    except Exception as error:  # a failing row is reported in its row; the others go on
        outcome.fail(stage, error)
    return outcome


def record_search(outcome: Outcome, result: SearchResult, seconds: float) -> None:
    """Fill ``outcome`` with what the search that took ``seconds`` chose and predicted."""
    best = result.best
    outcome.search_seconds = seconds
    outcome.strategy, outcome.params = best.strategy, dict(best.params)
    outcome.predicted_seconds = best.prediction.seconds
    outcome.gflops = best.prediction.gflops
    outcome.fraction_of_peak = result.fraction_of_peak()
    outcome.binding = best.prediction.binding
    outcome.nodes_visited = result.stats.nodes_visited
    outcome.search_complete = result.stats.complete
    if best.compiled is not None:  # ptxas's check compiled the winner: not compiled again
        outcome.registers, outcome.spill_bytes = best.compiled.registers, best.compiled.spill_bytes


# Scaled sizes are rounded up to multiples of this where the searched parameters need it: 16
# bytes of a 2-byte type, the widest asynchronous copy (strategies/tensorcore_tiles.copy_widths).
ALIGNED = 8


def fitted(expression: str, sizes: dict[str, int], strategy: str,
           params: Mapping[str, Any], dtype: str = "float32",
           precision: str = HIGHEST, layout: str = "C") -> dict[str, int]:
    """Scaled sizes grown just enough for the searched tiles and step to be valid: each index
    on an axis gets more than half a tile (so its last block is partial; of a group, its
    slowest index grows), each summed index more than half a step (the first of them more than
    a step per part of a split reduction), as the strategy describes
    its tiles and step (:mod:`~treduda.polyhedral.geometry`). Where the strategy's rules
    refuse that much of a tile left empty (the tensor-core mapping's: no whole fragment outside
    the tensors) and accept a tile or a step less one, each grows to that. Where the parameters
    need aligned extents (asynchronous copies of 16 bytes: 8 half-precision elements), the
    sizes are rounded up to multiples of :data:`ALIGNED`, from a tile or step less
    :data:`ALIGNED` where half of one is refused. An index that merges several
    (:mod:`~treduda.frontend.merge`) grows by its first one."""
    chosen = strategies.get(strategy)
    program = plan(expression, sizes, layout, dtype=dtype, precision=precision)
    merging = program.merging
    described = decided(chosen.geometry(program, params))

    def grown(least: Callable[[int], int]) -> dict[str, int]:
        """``sizes`` with each index at least ``least(extent)`` values of what it covers."""
        grown = dict(sizes)

        def grow(index: str, extent: int) -> None:
            first, *rest = merging.groups[index]
            others = math.prod(grown[i] for i in rest)
            grown[first] = max(grown[first], -(-least(extent) // others))

        for axis, (*faster, slowest) in zip(AXES, groups(described["order"]), strict=False):
            inner = math.prod(grown[i] for index in faster for i in merging.groups[index])
            grow(slowest, -(-described[f"block_{axis}"] * described[f"reg_{axis}"] // inner))
        for index in merging.merged.summed:
            grow(index, described["step"])
        if described["split"] > 1:  # each part more than a step of the index it divides
            grow(split_index(program), 2 * described["step"] * described["split"])
        return grown

    def valid(sizes: dict[str, int]) -> bool:
        try:
            chosen.space(plan(expression, sizes, layout, dtype=dtype, precision=precision)
                         ).check(params)
        except StrategyError:
            return False
        return True

    def aligned(tried: dict[str, int]) -> dict[str, int]:
        return {index: -(-extent // ALIGNED) * ALIGNED for index, extent in tried.items()}

    half = grown(lambda extent: extent // 2 + 1)
    # a tile less one, or aligned a tile less an aligned run (a tile less one, rounded up, is
    # the whole tile: the last one would not be partial)
    for candidate in (half, aligned(half), grown(lambda extent: extent - 1),
                      aligned(grown(lambda extent: extent - ALIGNED))):
        if valid(candidate):
            return candidate
    return half


def verify_scaled(outcome: Outcome, result: SearchResult, row: Row) -> None:
    """Check the winner on PoCL at sizes scaled down from the row's, in the row's own layout.

    The sizes are ``scaled(row.sizes)`` grown just enough for the searched parameters
    (:func:`fitted`); if those still do not fit, the same strategy's defaults are verified
    instead, and the row says so. The time it took goes into ``verify_seconds``."""
    started = time.perf_counter()
    sizes = fitted(row.expression, scaled(row.sizes), result.best.strategy, result.best.params,
                   outcome.dtype, outcome.precision, row.layout)
    outcome.scaled_sizes = sizes
    options = {"dtype": outcome.dtype, "layout": row.layout, "strategy": result.best.strategy,
               "precision": outcome.precision}
    try:
        kernel = compile(row.expression, sizes, params=result.best.params, **options)
        outcome.verified_params = "searched"
    except StrategyError as error:
        kernel = compile(row.expression, sizes, **options)
        reason = str(error).partition(" (parameters:")[0]
        outcome.verified_params = "defaults"
        outcome.verify_note = (f"the searched parameters do not fit the scaled sizes ({reason});"
                               f" verified {kernel.strategy}'s defaults {kernel.params}")
    check = kernel.verify()  # raises VerificationError when it differs from numpy.einsum
    outcome.verified, outcome.max_error = True, check.max_error
    outcome.verify_seconds = time.perf_counter() - started


def add_nvcc_reports(outcomes: Sequence[Outcome], gpu: Gpu, log: TextIO) -> None:
    """Registers and spills of each full-size kernel the search's ptxas check did not report
    on, compiled in batches for ``gpu``.

    A kernel nvcc rejects fails its row; an architecture this nvcc does not know (an old GPU)
    only leaves the columns empty."""
    arch = gpu.arch
    if not nvcc_supports(arch):
        print(f"this nvcc cannot compile for {arch} ({gpu.name}): no registers or spills",
              file=log)
        return
    pending = [o for o in outcomes if o.cuda_source and not o.error and o.registers is None]
    for start in range(0, len(pending), NVCC_BATCH):
        batch = pending[start:start + NVCC_BATCH]
        print(f"nvcc ({arch}): kernels {start + 1}-{start + len(batch)} of {len(pending)}",
              file=log, flush=True)
        try:
            reports = compile_cuda_batch([o.cuda_source for o in batch], arch)
        except CompileError:
            reports = [_compile_alone(o, arch) for o in batch]
        for outcome, found in zip(batch, reports, strict=True):
            mine = [r for r in found if r.name == outcome.kernel]
            if mine:
                outcome.registers = mine[0].registers
                outcome.spill_bytes = mine[0].spill_bytes
    for outcome in outcomes:
        outcome.cuda_source = None  # the sources are large and no longer needed


def _compile_alone(outcome: Outcome, arch: str) -> list:
    """One kernel's reports, or none with its row failed: the batch broke, find who broke it."""
    try:
        return compile_cuda(outcome.cuda_source or "", arch)
    except CompileError as error:
        outcome.fail("nvcc", error)
        return []


def short_params(params: dict[str, Any] | None, width: int = PARAMS_WIDTH) -> str:
    """Parameters in a table cell: per-axis values joined (block_x/y/z 16,1,4 -> blk=16x1x4),
    words by their initials (cyclic,adjacent -> ca), flags as +name or -name, an empty choice
    as none, cut to ``width``."""
    if not params:
        return "-"
    groups: dict[str, list[Any]] = {}
    for name, value in params.items():
        stem, _, axis = name.rpartition("_")
        key = stem if axis in ("x", "y", "z") and stem else name
        groups.setdefault(key, []).append(value)
    parts = []
    for name, values in groups.items():
        short = SHORT_NAMES.get(name, name)
        if len(values) == 1 and isinstance(values[0], bool):
            parts.append(f"+{short}" if values[0] else f"-{short}")
        elif values == [""]:
            parts.append(f"{short}=none")
        elif len(values) > 1 and all(isinstance(v, str) for v in values):
            parts.append(f"{short}={''.join(v[:1] for v in values)}")
        else:
            parts.append(f"{short}={'x'.join(str(v) for v in values)}")
    return clip(" ".join(parts), width)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


COLUMNS = ("id", "expression", "strategy", "pred ms", "GFLOP/s", "peak", "binding", "regs",
           "spill", "blocks", "waves", "pts/thr", "gen s", "search s", "nodes", "done",
           "verified", "params")
LEFT = {"id", "expression", "strategy", "binding", "done", "verified", "params"}


def number(value: float | int | None, form: str) -> str:
    """A table cell: ``value`` formatted, or "-" where there is none."""
    return "-" if value is None else format(value, form)


def _cells(o: Outcome) -> list[str]:
    verdict = "FAILED" if o.error else (
        "yes" if o.verified_params == "searched" else f"yes ({o.verified_params}*)")
    done = "-" if o.search_complete is None else ("yes" if o.search_complete else "budget")
    predicted_ms = None if o.predicted_seconds is None else o.predicted_seconds * 1e3
    return [o.id, clip(o.expression, EXPRESSION_WIDTH), o.strategy or "-",
            number(predicted_ms, ".4f"), number(o.gflops, ".0f"),
            number(o.fraction_of_peak, ".1%"), o.binding or "-", number(o.registers, "d"),
            number(o.spill_bytes, "d"), number(o.blocks, "d"), number(o.waves, ".2f"),
            number(o.points_per_thread, ".0f"), number(o.generate_seconds, ".2f"),
            number(o.search_seconds, ".2f"), number(o.nodes_visited, "d"), done, verdict,
            short_params(o.params)]


def aligned(columns: Sequence[str], cells: Sequence[Sequence[str]], left: set[str]) -> list[str]:
    """A header, a rule and one line per row, each column as wide as its widest cell; the
    columns named in ``left`` flush left, the others (numbers) flush right."""
    rows = [list(columns), *map(list, cells)]
    widths = [max(len(r[c]) for r in rows) for c in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) if name in left else cell.rjust(w)
                       for name, cell, w in zip(columns, r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def table(outcomes: Sequence[Outcome]) -> str:
    """One aligned line per row, then a note per failed or fallen-back row."""
    lines = aligned(COLUMNS, [_cells(o) for o in outcomes], LEFT)
    if any(o.verified_params == "defaults" and not o.error for o in outcomes):
        lines.append("* the searched parameters do not fit the scaled sizes (tiles larger than "
                     "the extents): the strategy's defaults were verified instead (--json: "
                     "verify_note)")
    for o in outcomes:
        if o.error:
            message = o.error.replace("\n", "\n    ")
            lines.append(f"{o.id} FAILED at {o.stage}: {message}")
    return "\n".join(lines)


def geometric_mean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, positive)) / len(positive)) if positive else None


def summary(outcomes: Sequence[Outcome], gpu: str | Gpu, max_nodes: int) -> str:
    """The one line to quote: verified count, failures, mean fraction of peak, searches."""
    target = find_gpu(gpu)
    verified = [o for o in outcomes if o.verified and not o.error]
    defaults = sum(o.verified_params == "defaults" for o in verified)
    failed = sum(bool(o.error) for o in outcomes)
    fractions = [o.fraction_of_peak for o in outcomes if o.fraction_of_peak is not None]
    mean = geometric_mean(fractions)
    searched = [o for o in outcomes if o.search_complete is not None]
    complete = sum(bool(o.search_complete) for o in searched)
    peak = "-" if mean is None else f"{mean:.1%}"
    return (f"{len(verified)}/{len(outcomes)} verified ({defaults} with the strategy's defaults "
            f"at the scaled size), {failed} FAILED; geometric-mean predicted fraction of peak on "
            f"{target.name}: {peak} over {len(fractions)} rows; {complete}/{len(searched)} "
            f"searches complete within {max_nodes} nodes")


def timing(outcomes: Sequence[Outcome], wall: float) -> str:
    """Where the run's time went, so the cost of each stage is measured, not guessed."""
    def total(name: str) -> float:
        return sum(getattr(o, name) or 0.0 for o in outcomes)

    generated = [o.generate_seconds for o in outcomes if o.generate_seconds is not None]
    slowest = f" (slowest {max(generated):.1f} s)" if generated else ""
    stages = {"search": total("search_seconds"), "generation": total("generate_seconds"),
              "verification": total("verify_seconds")}
    return (f"time: {wall:.0f} s in all; search {stages['search']:.0f} s, full-size generation "
            f"{stages['generation']:.0f} s{slowest}, scaled verification "
            f"{stages['verification']:.0f} s, nvcc and the rest "
            f"{wall - sum(stages.values()):.0f} s")


def plot(outcomes: Sequence[Outcome], path: str, title: str, log: TextIO | None = None) -> bool:
    """A bar per row: predicted fraction of peak, coloured by the verification outcome.

    matplotlib is optional; without it the plot is skipped with a message (returns False)."""
    log = sys.stderr if log is None else log
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        print(f"matplotlib is not installed: skipping the plot {path} (pip install matplotlib)",
              file=log)
        return False
    colours = {"verified (searched parameters)": "tab:blue",
               "verified (defaults at the scaled size)": "tab:cyan", "FAILED": "tab:red"}
    figure = Figure(figsize=(max(8.0, 0.28 * len(outcomes) + 4), 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    heights = [o.fraction_of_peak or 0.0 for o in outcomes]
    kinds = ["FAILED" if o.error else "verified (searched parameters)"
             if o.verified_params == "searched" else "verified (defaults at the scaled size)"
             for o in outcomes]
    bars = axes.bar(range(len(outcomes)), heights, color=[colours[k] for k in kinds])
    for bar, kind in zip(bars, kinds, strict=True):
        if kind == "FAILED":
            bar.set_hatch("xx")
    axes.set_xticks(range(len(outcomes)), [o.id for o in outcomes], rotation=90, fontsize=7)
    axes.set_ylim(0, max(1.0, *heights))
    axes.set_ylabel("predicted fraction of peak")
    axes.yaxis.set_major_formatter(lambda value, _: f"{value:.0%}")
    handles = [Patch(color=colours[k], label=k) for k in colours if k in kinds]
    mean = geometric_mean(heights)
    if mean is not None:
        handles.append(axes.axhline(mean, color="black", linestyle="--", linewidth=1,
                                    label=f"geometric mean {mean:.1%}"))
    figure.legend(handles=handles, loc="outside right upper", fontsize=7)
    axes.set_title(title, fontsize=9)
    figure.savefig(path, dpi=120)
    print(f"wrote {path}", file=log)
    return True


def run(cases: Sequence[Case], *, gpu: str | Gpu = "H100", max_nodes: int = BENCH_MAX_NODES,
        json_path: str | None = None, plot_path: str | None = None, title: str = "",
        nvcc: bool | None = None, out: TextIO | None = None, log: TextIO | None = None,
        rivals: int = 0, workers: int | None = None, scheduler: str | None = None) -> int:
    """Bench ``cases`` (in parallel with ``workers`` or on ``scheduler``'s cluster, see
    :func:`bench`), print the table and summary, write JSON and plot; 1 if a row failed."""
    out = sys.stdout if out is None else out
    log = sys.stderr if log is None else log
    target = find_gpu(gpu)  # an unknown GPU is reported before any row runs
    if not cases:
        raise TredudaError("no rows to run (check --ids and --limit)")
    started = time.perf_counter()
    outcomes = bench(cases, gpu=target, max_nodes=max_nodes, nvcc=nvcc, log=log, rivals=rivals,
                     workers=workers, scheduler=scheduler)
    wall = time.perf_counter() - started
    line = summary(outcomes, target, max_nodes)
    print(table(outcomes), file=out)
    print(line, file=out)
    print(timing(outcomes, wall), file=out)
    if json_path:
        write_text(json_path, json.dumps({"suite": title, "gpu": target.name,
                                          "max_nodes": max_nodes, "summary": line,
                                          "seconds": wall,
                                          "rows": [o.to_dict() for o in outcomes]}, indent=1))
        print(f"wrote {json_path}", file=log)
    if plot_path:
        plot(outcomes, plot_path, f"{title}: predicted fraction of peak on {target.name} "
             f"(search budget {max_nodes} nodes)", log)
    return 1 if any(o.error for o in outcomes) else 0
