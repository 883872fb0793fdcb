"""How right the model is on a real GPU: its predictions beside measured times (issue #12).

    python benchmarks/model_fidelity.py [--data benchmarks/data/h100_measured.json] [--json F]
                                        [--no-ptxas]

A calibration file holds measured kernels, each with its expression, sizes, dtype, precision
(``"highest"`` where a row says none), strategy and parameters, and the grid, block and
registers it ran with, and (rows the GPU benchmark timed since it records it) the digest of
the code it ran (:func:`treduda.run.nvcc.code_digest`). Each row's kernel is generated again
from those; where code generation has changed it since (a different grid or block, a different
digest, or, for a row without one and with nvcc present, ptxas's registers beyond what two
CUDA toolchains disagree by), the row's time no longer applies and the row is left out, and
the report says which and why; a row with no digest, where nvcc is absent, is kept unchecked
and the report counts it. A file ``NAME.codes.json`` beside the data file ``NAME.json``
(``benchmarks/code_digests.py``) gives digests to rows that record none. On what remains: the
estimate beside the measured time per row, Spearman's rank correlation over the candidates of
one search space (beside it, the same with pairs closer than their run-to-run spread tied,
where the file records a spread) and over the suite rows (one kernel per problem), the median
and worst
relative error, the rows where the lower bound exceeds the measured time, and for each search
space the measured rank of the candidate the search would pick among its measured ones.
``--no-ptxas`` leaves registers and spills to the model, as the search itself does; ptxas's
registers still tell a changed kernel where nvcc is present.
Then the same figures on problems held out of whatever is fitted (:mod:`treduda.app.held_out`:
leave one problem out, and halves), with the pick's ratio to the fastest on ``--watch``'s
problems. ``--terms`` sets each search space's kernels side by side, resource by resource;
``--pairs`` lists the pairs of kernels the model orders against the measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..api import compile
from ..errors import StrategyError, TredudaError
from ..frontend.dtypes import HIGHEST
from ..generation import launch
from ..model.gpus import Gpu
from ..model.gpus import gpu as find_gpu
from ..model.interface import CostModel
from ..model.model import model_of
from ..model.prediction import Compiled, Prediction
from ..polyhedral.lower import plan
from ..run.nvcc import code_digest, compile_cuda_batch, nvcc_available
from ..run.sass import compile_with_sass
from .held_out import HALVES, LEAVE_ONE_OUT, judge
from .held_out import report as held_out_report
from .ranking import Pick, pick, spearman, spearman_within_spread, within_spread

# the problems whose picks ran 3.6-4.1x slower than a rival on the H200 (2026-11-26)
WATCHED = ("tccg_19", "tccg_28", "tccg_30")
DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "h100_measured.json"
# The registers the measuring machine's driver JIT gave b05b8ed's kernels differ from what
# CUDA 13's ptxas gives the very same sources here by up to 10% (gemm4096-rand14: 44 vs 40,
# tccg_31: 59 vs 64), so only a larger difference says the kernel itself changed.
REGISTER_TOLERANCE = 0.10
MIN_RANKED = 6  # fewer rows than this make a rank correlation meaningless
# the values of Gpu.global_request_wavefronts each held-out fold chooses among
GLOBAL_REQUEST_WAVEFRONTS = (0.0, 1.0, 2.0, 3.0, 4.0)


@dataclass(frozen=True)
class Row:
    """One measured kernel of the calibration file."""

    id: str
    expression: str
    sizes: dict[str, int]
    dtype: str
    layout: str
    strategy: str
    params: dict[str, Any]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    measured: float  # seconds
    # compile()'s precision= (float32: "tf32", "3xtf32"): tensor-core rows of one dtype differ
    precision: str = HIGHEST
    # (slowest - fastest) / median of its timed launches, where the file records it
    spread: float | None = None
    code: str | None = None  # the code_digest of the kernel timed, where the file records it

    @property
    def problem(self) -> tuple:
        return (self.expression, tuple(sorted(self.sizes.items())), self.dtype, self.precision,
                self.layout)


@dataclass(frozen=True)
class Regenerated:
    """What the current code generator makes of a row: launch geometry and, with nvcc, what
    ptxas says it costs."""

    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    compiled: Compiled | None
    refused: str | None = None  # why the row's parameters no longer apply, if they do not
    # the row's parameters completed with the defaults of those added since it was measured
    params: Mapping[str, Any] | None = None
    code: str | None = None  # the code_digest of the kernel generated (None: not built)
    # ptxas's registers for it, with or without ``compiled`` (None: nvcc absent, or not built)
    registers: int | None = None


@dataclass(frozen=True)
class Outcome:
    """One row's verdict: left out (and why), or predicted beside measured."""

    row: Row
    left_out: str | None = None
    prediction: Prediction | None = None  # the estimate
    bound: float | None = None  # seconds
    # kept with neither a digest nor ptxas's registers to tell whether its kernel changed
    unchecked: bool = False

    @property
    def estimate(self) -> float:
        return self.prediction.seconds

    @property
    def error(self) -> float:
        """Relative error of the estimate: (estimate - measured) / measured."""
        return self.estimate / self.row.measured - 1


def load(path: str | Path = DATA) -> list[Row]:
    """The rows of a calibration file: the format of ``benchmarks/data/h100_measured.json``,
    or what ``treduda bench --gpu-time --json`` writes (every kernel it timed, the rivals of
    ``--picks`` included, as rows ``id~n``; rows that failed are left out). A row's code
    digest is its own ``code_digest`` or, where it records none, :func:`codes_beside`'s."""
    with open(path) as f:
        data = json.load(f)
    codes = codes_beside(path)
    try:
        return [Row(r["id"], r["expression"], r["sizes"], r["dtype"], r["layout"],
                    r["strategy"], r["params"], tuple(r["grid"]), tuple(r["block"]),
                    r["registers"], r["measured_ms"] / 1e3, r.get("precision", HIGHEST),
                    r.get("spread"), r.get("code_digest") or codes.get(r["id"]))
                for r in _timed(data["rows"])]
    except KeyError as missing:
        raise TredudaError(f"{path}: a row lacks the field {missing}; each row needs id, "
                           "expression, sizes, dtype, layout, strategy, params, grid, block, "
                           "registers and measured_ms (or treduda_ms, as the GPU benchmark "
                           "writes it), and may say its precision") from None


def codes_beside(path: str | Path) -> dict[str, str]:
    """Row id -> code digest from the file ``NAME.codes.json`` beside ``NAME.json``, where it
    exists: the digests of a file measured before the GPU benchmark recorded them, as
    ``benchmarks/code_digests.py`` regenerates them at the file's ``treduda_commit``."""
    beside = Path(path).with_suffix(".codes.json")
    if not beside.exists():
        return {}
    with open(beside) as f:
        return json.load(f)["codes"]


def _timed(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Calibration rows as they are, and the GPU benchmark's timed kernels (each row and its
    rivals) with their time as ``measured_ms``."""
    found = []
    for row in rows:
        if "treduda_ms" not in row:
            found.append(row)
            continue
        found += [{**timed, "measured_ms": timed["treduda_ms"]}
                  for timed in (row, *(row.get("rivals") or ()))
                  if timed.get("status") == "ok" and timed.get("treduda_ms")]
    return found


def regenerate(rows: Sequence[Row], ptxas: bool = True) -> list[Regenerated]:
    """Each row's kernel generated again, with its code digest; with nvcc, the kernels of the
    rows that record no digest are compiled in one batch for ptxas's registers, which tell
    whether the kernel changed, and with ``ptxas`` every kernel kept is compiled for its
    ptxas report and its SASS main loop's instructions per FMA, as the search's check reads
    them (without, the model predicts registers and spills itself). A row
    whose parameters the current strategies refuse (e.g. an ``order`` naming indices that
    are merged now) is regenerated as refused."""
    kernels: dict[int, Any] = {}
    again = []
    for n, r in enumerate(rows):
        try:
            # a row whose launch moved is left out whatever its kernel is: not built
            grid, block, params = launch(plan(r.expression, r.sizes, r.layout, r.dtype,
                                              precision=r.precision), r.strategy, r.params)
            code = None
            if (grid, block) == (r.grid, r.block):
                kernels[n] = compile(r.expression, r.sizes, dtype=r.dtype, layout=r.layout,
                                     strategy=r.strategy, params=r.params,
                                     precision=r.precision)
                code = code_digest(kernels[n].cuda_source)
            again.append(Regenerated(tuple(grid), tuple(block), None, params=params, code=code))
        except StrategyError as error:
            reason = str(error).splitlines()[0].split("; choose one of")[0]
            again.append(Regenerated(None, None, None, f"its parameters no longer apply: "
                                                       f"{reason}"))
    if not nvcc_available():
        return again
    # ptxas's reports on the rows still kept: all of them for the model, or those whose
    # registers are the only sign of a changed kernel
    kept = [n for n, (r, a) in enumerate(zip(rows, again, strict=True))
            if changed(r, a) is None and (ptxas or r.code is None)]
    if ptxas and kept:
        batch = compile_with_sass([kernels[n].cuda_source for n in kept])
        for n, (found, *_) in zip(kept, batch, strict=True):
            again[n] = replace(again[n], compiled=Compiled.of(found.ptxas, found.sass),
                               registers=found.ptxas.registers)
    elif kept:
        for n, (found, *_) in zip(kept, compile_cuda_batch([kernels[n].cuda_source
                                                            for n in kept]), strict=True):
            again[n] = replace(again[n], registers=found.registers)
    return again


def changed(row: Row, again: Regenerated) -> str | None:
    """Why the row's measurement no longer describes the regenerated kernel, or None."""
    if again.refused:
        return again.refused
    if again.grid != row.grid or again.block != row.block:
        return f"grid x block now {again.grid} x {again.block}, was {row.grid} x {row.block}"
    if row.code is not None and again.code is not None:  # the digest settles it
        return None if again.code == row.code else (
            f"its code differs from the code timed (digest {again.code}, was {row.code})")
    if again.registers is not None and abs(again.registers - row.registers) > (
            REGISTER_TOLERANCE * row.registers):
        return f"registers now {again.registers}, was {row.registers}"
    return None


def evaluate(rows: Sequence[Row], regenerated: Sequence[Regenerated],
             gpu: str | Gpu = "H100") -> list[Outcome]:
    """Each row left out or predicted by the model of ``gpu``."""
    target = find_gpu(gpu)
    models: dict[tuple, CostModel] = {}
    outcomes = []
    for row, again in zip(rows, regenerated, strict=True):
        reason = changed(row, again)
        if reason:
            outcomes.append(Outcome(row, left_out=reason))
            continue
        key = (row.problem, row.strategy)
        if key not in models:  # the row's own strategy describes its parameters to the model
            models[key] = model_of(plan(row.expression, row.sizes, row.layout, row.dtype,
                                        precision=row.precision), target, row.strategy)
        model = models[key]
        estimate = model.estimate(again.params, again.compiled)
        outcomes.append(Outcome(row, prediction=estimate, bound=model.bound(again.params).seconds,
                                unchecked=row.code is None and again.registers is None))
    return outcomes


def variants(rows: Sequence[Row], regenerated: Sequence[Regenerated], gpu: Gpu
             ) -> dict[float, list[Outcome]]:
    """The rows predicted under each value the held-out folds may fit of the GPU's
    ``global_request_wavefronts`` (:func:`treduda.app.held_out.judge`): its own and the others
    of :data:`GLOBAL_REQUEST_WAVEFRONTS`."""
    values = sorted({gpu.global_request_wavefronts, *GLOBAL_REQUEST_WAVEFRONTS})
    return {v: evaluate(rows, regenerated, replace(gpu, global_request_wavefronts=v))
            for v in values}


@dataclass(frozen=True)
class Summary:
    spaces: dict[str, float]  # problem -> Spearman rho over its candidates
    # the same, pairs closer than their run-to-run spread tied (spearman_within_spread)
    spaces_tied: dict[str, float]
    tied_pairs: dict[str, int]  # problem -> such pairs
    suite: float | None  # rho over the suite rows (None: too few remain)
    suite_rows: int
    median_error: float
    worst_error: float
    worst_id: str
    violations: list[str]  # rows whose bound exceeds the measured time
    left_out: int
    kept: int
    picks: dict[str, Pick]
    unchecked: int = 0  # kept rows whose kernel could not be told changed or not


def spaces(outcomes: Sequence[Outcome]) -> dict[str, list[Outcome]]:
    """The kept rows that are candidates of one search space: several tiled+staged rows of one
    problem. Named by their expression."""
    groups: dict[tuple, list[Outcome]] = {}
    for o in outcomes:
        if o.left_out is None and o.row.strategy == "tiled+staged":
            groups.setdefault(o.row.problem, []).append(o)
    return {_space_name(members[0].row): members for members in groups.values()
            if len(members) > 1}


def _space_name(row: Row) -> str:
    """A problem's expression and sizes, and its dtype and precision where not float32's
    default (spaces of one expression in two precisions are two spaces)."""
    kind = [] if row.dtype == "float32" else [row.dtype]
    kind += [] if row.precision == HIGHEST else [row.precision]
    return " ".join([row.expression, "x".join(map(str, row.sizes.values())), *kind])


def suite_rows(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """The kept rows that are the only measured kernel of their problem."""
    count: dict[tuple, int] = {}
    for o in outcomes:
        count[o.row.problem] = count.get(o.row.problem, 0) + 1
    return [o for o in outcomes if o.left_out is None and count[o.row.problem] == 1]


def summarise(outcomes: Sequence[Outcome]) -> Summary:
    kept = [o for o in outcomes if o.left_out is None]
    if not kept:
        raise TredudaError("every calibration row was left out: code generation changed every "
                           "measured kernel; measure again (benchmarks/gpu.py)")
    errors = [abs(o.error) for o in kept]
    worst = max(kept, key=lambda o: abs(o.error))
    suite = suite_rows(outcomes)
    groups = spaces(outcomes)
    tied = {name: spearman_within_spread([o.estimate for o in m], [o.row.measured for o in m],
                                         [o.row.spread for o in m])
            for name, m in groups.items()}
    return Summary(
        spaces={name: spearman([o.estimate for o in m], [o.row.measured for o in m])
                for name, m in groups.items()},
        spaces_tied={name: rho for name, (rho, _) in tied.items()},
        tied_pairs={name: pairs for name, (_, pairs) in tied.items()},
        suite=(spearman([o.estimate for o in suite], [o.row.measured for o in suite])
               if len(suite) >= MIN_RANKED else None),
        suite_rows=len(suite),
        median_error=statistics.median(errors), worst_error=abs(worst.error), worst_id=worst.row.id,
        violations=[o.row.id for o in kept if o.bound > o.row.measured],
        left_out=len(outcomes) - len(kept), kept=len(kept),
        picks={name: pick(m) for name, m in groups.items()},
        unchecked=sum(o.unchecked for o in kept))


def report(outcomes: Sequence[Outcome], summary: Summary, ptxas: bool = True) -> str:
    lines = [f"{'id':28} {'measured ms':>11} {'estimate ms':>11} {'error':>7} {'bound ms':>9}"
             "  binding"]
    for o in outcomes:
        if o.left_out:
            lines.append(f"{o.row.id:28} {o.row.measured * 1e3:11.3f}  left out: {o.left_out}")
        else:
            flag = "  BOUND > MEASURED" if o.bound > o.row.measured else ""
            lines.append(f"{o.row.id:28} {o.row.measured * 1e3:11.3f} {o.estimate * 1e3:11.3f} "
                         f"{o.error:+7.0%} {o.bound * 1e3:9.3f}  {o.prediction.binding}{flag}")
    s = summary
    lines.append(f"\n{s.kept} rows kept, {s.left_out} left out (code generation changed them "
                 "since they were measured)")
    if s.unchecked:
        lines.append(f"{s.unchecked} of the rows kept could not be checked for a changed kernel "
                     "(nvcc is not installed and they record no code digest): their time may "
                     "be another kernel's")
    for name, rho in s.spaces.items():
        p = s.picks[name]
        lines.append(f"search space {name}: Spearman rho {rho:.3f} over {p.candidates} "
                     f"candidates (within spread tied: {s.spaces_tied[name]:.3f}, "
                     f"{s.tied_pairs[name]} pairs); the search picks {p.id}, measured rank "
                     f"{p.rank} of {p.candidates}, {p.ratio:.2f}x the fastest")
    if s.spaces and not any(o.row.spread is not None for o in outcomes):
        lines.append("search spaces: no run-to-run spread recorded, so no pair counts as tied")
    elif s.spaces:
        pairs = sum(n * (n - 1) // 2 for n in (s.picks[name].candidates for name in s.spaces))
        lines.append(f"search spaces: Spearman rho {statistics.fmean(s.spaces.values()):.3f} "
                     f"mean over {len(s.spaces)}; beside it, counting pairs whose measured "
                     "times differ by less than their run-to-run spread as ties: "
                     f"{statistics.fmean(s.spaces_tied.values()):.3f} "
                     f"({sum(s.tied_pairs.values())} of {pairs} pairs tied)")
    suite = (f"{s.suite:.3f}" if s.suite is not None
             else f"not computed (fewer than {MIN_RANKED} rows)")
    lines.append(f"suite rows: Spearman rho {suite} over {s.suite_rows} rows")
    lines.append(f"|error|: median {s.median_error:.0%}, worst {s.worst_error:.0%} "
                 f"({s.worst_id})")
    lines.append(f"bound > measured: {len(s.violations)} rows"
                 + (f" ({', '.join(s.violations)})" if s.violations else ""))
    if not (ptxas and nvcc_available()):
        why = "without ptxas (--no-ptxas)" if nvcc_available() else "nvcc is not installed"
        lines.append(f"{why}: registers and spills are the model's estimates")
    return "\n".join(lines)


def terms(outcomes: Sequence[Outcome]) -> str:
    """Each search space's kernels side by side, fastest measured first: the estimate, each
    resource's seconds, the resident warps per SM and LSU wavefronts per multiply-add the
    model gives it, beside the registers the measured kernel had, so a pair the model orders
    otherwise than the GPU shows which term separates (or fails to separate) them. A row
    marked ``<`` is estimated faster than the row above it, which ran faster."""
    lines = []
    for name, members in spaces(outcomes).items():
        members = sorted(members, key=lambda o: o.row.measured)
        names = list(members[0].prediction.resources)
        lines.append(f"\n{name}: ms, fastest measured first")
        lines.append(f"  {'id':12} {'measured':>8} {'estimate':>8}   {'binding':8}"
                     + "".join(f" {n:>8}" for n in names)
                     + f" {'warps':>5} {'wavefr.':>7} {'regs':>4}")
        for above, o in zip([None, *members[:-1]], members, strict=True):
            p = o.prediction
            flag = "<" if above and o.estimate < above.estimate else " "
            lines.append(f"  {o.row.id:12} {o.row.measured * 1e3:8.3f} {o.estimate * 1e3:8.3f} "
                         f"{flag} {p.binding:8}"
                         + "".join(f" {p.resources.get(n, 0.0) * 1e3:8.3f}" for n in names)
                         + f" {p.warps:5d} {p.wavefronts:7.3f} {o.row.registers:4d}")
    return "\n".join(lines)


def misordered(outcomes: Sequence[Outcome]) -> str:
    """Every pair of one search space's kernels that the model orders against the
    measurement, the faster measured first: how much longer the other ran (and whether within
    their run-to-run spread, where the GPU itself does not order them), how much longer the
    model rates the faster one, what binds each, and the parameters in which they differ: the
    list a hypothesis about the within-problem ranking (issue 40) has to explain."""
    lines, total, tied = [], 0, 0
    for members in spaces(outcomes).values():
        members = sorted(members, key=lambda o: o.row.measured)
        for n, faster in enumerate(members):
            for slower in members[n + 1:]:
                total += 1
                if faster.estimate <= slower.estimate:
                    continue
                close = within_spread(faster.row.measured, faster.row.spread,
                                      slower.row.measured, slower.row.spread)
                tied += close
                a, b = faster.row.params, slower.row.params
                differ = ", ".join(f"{k} {a.get(k)}/{b.get(k)}" for k in {**a, **b}
                                   if a.get(k) != b.get(k))
                lines.append(f"  {faster.row.id} < {slower.row.id}: measured "
                             f"{slower.row.measured / faster.row.measured:.3f}x"
                             + (" (within spread)" if close else "")
                             + f", estimated {slower.estimate / faster.estimate:.3f}x "
                             f"({faster.prediction.binding}/{slower.prediction.binding}); "
                             f"differ: {differ or 'nothing'}")
    head = (f"\npairs the model orders against the measurement: {len(lines)} of {total}, "
            f"{tied} of them within their run-to-run spread")
    return "\n".join([head, *lines])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA), help="the calibration file")
    parser.add_argument("--gpu", default="H100", help="the GPU the rows were measured on")
    parser.add_argument("--json", help="also write rows and summary to this file")
    parser.add_argument("--no-ptxas", dest="ptxas", action="store_false",
                        help="let the model estimate registers and spills even where nvcc is "
                             "installed, as the search does")
    parser.add_argument("--watch", default=",".join(WATCHED),
                        help="problems (first row ids) whose pick's ratio to the fastest to print")
    parser.add_argument("--terms", action="store_true",
                        help="also print each search space's kernels side by side, resource "
                             "by resource")
    parser.add_argument("--pairs", action="store_true",
                        help="also print each pair of kernels the model orders against the "
                             "measurement, with the parameters that differ")
    args = parser.parse_args(argv)
    rows = load(args.data)
    again = regenerate(rows, args.ptxas)
    outcomes = evaluate(rows, again, args.gpu)
    summary = summarise(outcomes)
    fitted = variants(rows, again, find_gpu(args.gpu))
    held_out = {scheme: judge(outcomes, scheme, fitted) for scheme in (LEAVE_ONE_OUT, HALVES)}
    print(report(outcomes, summary, args.ptxas))
    if args.terms:
        print(terms(outcomes))
    if args.pairs:
        print(misordered(outcomes))
    for judged in held_out.values():
        print(held_out_report(judged, [w for w in args.watch.split(",") if w]))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"summary": asdict(summary),
                       "held_out": {scheme: {**asdict(judged),
                                             "rho_within_mean": judged.rho_within_mean}
                                    for scheme, judged in held_out.items()},
                       "rows": [{"id": o.row.id, "dtype": o.row.dtype,
                                 "precision": o.row.precision, "measured": o.row.measured,
                                 "estimate": o.prediction and o.estimate, "bound": o.bound,
                                 "binding": o.prediction and o.prediction.binding,
                                 "left_out": o.left_out}
                                for o in outcomes]}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
