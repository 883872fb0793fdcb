"""The GPU benchmark: each searched kernel of a suite beside what a user would run instead.

    treduda bench --gpu-time [--suite tccg_fp32] [--repeats 20] [--json F] [--plot F] ...

For every row, the model's search picks a kernel at the row's full sizes (or, with
``--picks FILE``, the kernel an earlier run chose, read from its ``--json`` file: the GPU then
times exactly what that run predicted, without searching again, and the rivals that run
recorded with ``--rivals N``, each as a row ``id~n`` whose time tests the model's ranking:
``benchmarks/model_fidelity.py --data`` reads the ``--json`` file); the kernel is run on
the GPU on random operands in the row's layout and checked there against ``cupy.einsum`` (and
``torch.einsum`` when torch is installed) computed in float64 (complex128 for complex rows) on
the same operands; then the kernel, ``cupy.einsum`` and ``torch.einsum`` (TF32 off: the cuBLAS
FP32 path) are each timed with CUDA events on those operands (bfloat16 rows beside torch only:
CuPy's einsum has no bfloat16 products, and torch makes their operands). The table gives times,
GFLOP/s, ratios (the library's time over treduda's: above 1 means treduda is faster), registers and
blocks; the summary gives geometric means; ``--json`` also records each timed kernel's code
digest (:func:`treduda.run.nvcc.code_digest`), by which the fidelity tool tells whether today's
kernel is the one timed. Without a GPU it says so and exits 0, having timed nothing.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, TextIO

from ..api import compile, search
from ..errors import BackendUnavailable, TredudaError
from ..frontend.dtypes import HIGHEST, TF32, fmas
from ..model.gpus import Gpu
from ..model.gpus import gpu as find_gpu
from ..run.cuda import cuda_runtime, registers_cuda, time_calls
from ..run.device_arrays import to_framework
from ..run.nvcc import code_digest
from ..run.timing import REPEATS
from .bench import Case, RowRecord, aligned, clip, geometric_mean, number
from .files import write_text
from .gpu_checks import check_result, einsum_spec, gpu_libraries, random_operands

EXPRESSION_WIDTH = 36


@dataclass
class GpuOutcome(RowRecord):
    """One row timed on the GPU; ``error`` set means the row FAILED (at ``stage``)."""

    predicted_ms: float | None = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    registers: int | None = None
    # code_digest of the kernel timed: a later fidelity run tells by it whether today's kernel
    # for these parameters is the one timed
    code_digest: str | None = None
    verified: bool = False
    max_error: float | None = None  # the larger of the errors against cupy and torch
    treduda_ms: float | None = None
    spread: float | None = None  # (slowest - fastest) / median of treduda's launches
    cupy_ms: float | None = None
    torch_ms: float | None = None
    flops: int | None = None
    stage: str | None = None
    error: str | None = None
    rivals: list[GpuOutcome] | None = None  # the pick's rivals timed (rows ``id~n``)

    @property
    def blocks(self) -> int | None:
        return None if self.grid is None else math.prod(self.grid)

    def ratio(self, library: str) -> float | None:
        """The library's time over treduda's: above 1, treduda is faster."""
        theirs = getattr(self, f"{library}_ms")
        return None if theirs is None or not self.treduda_ms else theirs / self.treduda_ms

    def gflops(self, milliseconds: float | None) -> float | None:
        return None if not milliseconds or not self.flops else self.flops / milliseconds / 1e6

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        if self.rivals is not None:
            record["rivals"] = [r.to_dict() for r in self.rivals]
        return {"status": "FAILED" if self.error else "ok", **record,
                "blocks": self.blocks, "ratio_cupy": self.ratio("cupy"),
                "ratio_torch": self.ratio("torch"), "gflops": self.gflops(self.treduda_ms)}


@dataclass(frozen=True)
class Pick:
    """The kernel an earlier run chose for a row, which ``--picks`` times instead of searching."""

    strategy: str
    params: dict[str, Any]
    predicted_ms: float | None
    rivals: tuple[Pick, ...] = ()  # what that run recorded with --rivals, timed too


def load_picks(path: str, cases: Sequence[Case]) -> dict[str, Pick]:
    """Each case's pick from a file ``treduda bench --json`` (with or without ``--gpu-time``)
    wrote; an error names the row that is missing there or differs from the suite's."""
    try:
        with open(path) as stream:
            rows = json.load(stream)["rows"]
        chosen = {r["id"]: r for r in rows if r.get("strategy") and r.get("params")}
    except OSError as error:
        raise TredudaError(f"--picks {path}: cannot read it ({error.strerror})") from None
    except (ValueError, KeyError, TypeError) as error:
        raise TredudaError(f"--picks {path}: not a file of treduda bench --json ({error})"
                           ) from None
    picks = {}
    for case in cases:
        if case.name not in chosen:
            raise TredudaError(f"--picks {path} holds no kernel for {case.name} (it has "
                               f"{', '.join(chosen) or 'none'}); leave --picks out to search")
        r, row = chosen[case.name], case.row
        here = {"expression": row.expression, "sizes": dict(row.sizes), "layout": row.layout,
                "dtype": case.dtype, "precision": case.precision}
        there = {k: r.get(k, HIGHEST if k == "precision" else None) for k in here}  # (older
        # files say no precision)
        if differing := [k for k, v in here.items() if there[k] != v]:
            raise TredudaError(f"--picks {path}: {case.name} has another {differing[0]} there "
                               f"({there[differing[0]]}) than here ({here[differing[0]]})")
        rivals = tuple(_pick(rival) for rival in r.get("rivals") or ())
        picks[case.name] = replace(_pick(r), rivals=rivals)
    return picks


def _pick(record: Mapping[str, Any]) -> Pick:
    seconds = record.get("predicted_seconds")
    return Pick(record["strategy"], record["params"], record.get("predicted_ms") or (
        seconds * 1e3 if seconds else None))


def run(cases: Sequence[Case], *, gpu: str | Gpu = "H100", max_nodes: int,
        repeats: int = REPEATS, json_path: str | None = None, plot_path: str | None = None,
        title: str = "", out: TextIO | None = None, log: TextIO | None = None,
        picks: Mapping[str, Pick] | None = None) -> int:
    """Time ``cases`` on this machine's GPU (each row's kernel from ``picks`` where given, else
    searched); 0 without a GPU (nothing timed), 1 if a row failed."""
    out = sys.stdout if out is None else out
    log = sys.stderr if log is None else log
    target = find_gpu(gpu)
    try:
        device = cuda_runtime().device
        cupy, torch = gpu_libraries()
    except BackendUnavailable as error:
        print(f"cannot time on a GPU here: {error}. Nothing was timed.", file=out)
        return 0
    started = time.perf_counter()
    outcomes = []
    for n, case in enumerate(cases, 1):
        print(f"[{n}/{len(cases)}] {case.name} ...", end="", file=log, flush=True)
        begun = time.perf_counter()
        pick = picks[case.name] if picks is not None else None
        outcome = run_row(case, target, max_nodes, repeats, cupy, torch, pick)
        verdict = f"FAILED at {outcome.stage}" if outcome.error else (
            f"{number(outcome.ratio('torch') or outcome.ratio('cupy'), '.2f')}x")
        if outcome.rivals:
            verdict += "; rivals " + ", ".join(
                f"FAILED at {r.stage}" if r.error else f"{number(r.treduda_ms, '.4f')} ms"
                for r in outcome.rivals)
        print(f" {verdict} ({time.perf_counter() - begun:.1f} s)", file=log, flush=True)
        outcomes.append(outcome)
    if picks is not None:
        print("kernels: the picks of an earlier run (--picks), not searched again", file=out)
    print(table(outcomes), file=out)
    line = summary(outcomes, device)
    print(line, file=out)
    print(f"time: {time.perf_counter() - started:.0f} s in all", file=out)
    if json_path:
        import json

        write_text(json_path, json.dumps({"suite": title, "device": device,
                                          "model_gpu": target.name, "repeats": repeats,
                                          "summary": line,
                                          "rows": [o.to_dict() for o in outcomes]}, indent=1))
        print(f"wrote {json_path}", file=log)
    if plot_path:
        plot(outcomes, plot_path, f"{title} on {device}", log)
    return 1 if any(o.error for o in _with_rivals(outcomes)) else 0


def run_row(case: Case, gpu: Gpu, max_nodes: int, repeats: int, cupy, torch,
            pick: Pick | None = None) -> GpuOutcome:
    """Search (unless ``pick`` says what to run), generate, verify on the GPU, time beside the
    libraries; then the pick's rivals, each as a row ``id~n`` without the libraries. A failure
    fails only its row, recorded with the stage it happened in."""
    row = case.row
    outcome = _untimed(case, case.name)
    try:
        if pick is None:
            best = search(row.expression, row.sizes, gpu, dtype=case.dtype, layout=row.layout,
                          max_nodes=max_nodes, precision=case.precision).best
            pick = Pick(best.strategy, dict(best.params), best.prediction.seconds * 1e3)
    except Exception as error:  # a failing row is reported in its row; the others go on
        outcome.stage, outcome.error = "search", f"{type(error).__name__}: {error}"
        return outcome
    measure(outcome, case, pick, repeats, cupy, torch)
    if pick.rivals:
        outcome.rivals = []
        for n, rival in enumerate(pick.rivals, 1):
            outcome.rivals.append(measure(_untimed(case, f"{case.name}~{n}"), case, rival,
                                          repeats, cupy, None, False))
    return outcome


def _untimed(case: Case, name: str) -> GpuOutcome:
    row = case.row
    return GpuOutcome(case.suite, name, row.expression, row.layout, case.dtype, dict(row.sizes),
                      precision=case.precision)


def measure(outcome: GpuOutcome, case: Case, pick: Pick, repeats: int, cupy, torch,
            libraries: bool = True) -> GpuOutcome:
    """Generate ``pick``'s kernel, verify it on the GPU and time it (and, with ``libraries``,
    cupy.einsum and torch.einsum on the same operands) into ``outcome``; a failure is
    recorded there with its stage."""
    row = case.row
    outcome.strategy, outcome.params = pick.strategy, dict(pick.params)
    outcome.predicted_ms = pick.predicted_ms
    stage = "generate"
    try:
        kernel = compile(row.expression, row.sizes, dtype=case.dtype, layout=row.layout,
                         strategy=pick.strategy, params=pick.params, precision=case.precision)
        outcome.grid, outcome.block = kernel.grid, kernel.block
        outcome.code_digest = code_digest(kernel.cuda_source)
        outcome.flops = 2 * fmas(case.dtype) * math.prod(row.sizes.values())
        stage = "verify"
        operands = random_operands(kernel, cupy, torch)
        spec = einsum_spec(kernel)
        outcome.max_error = check_result(kernel, operands, kernel.run(backend="cuda", **operands),
                                         cupy, torch)
        outcome.verified = True
        stage = "time"
        outcome.registers = registers_cuda(kernel.cuda_source, kernel.name)
        timing = kernel.time("cuda", repeats=repeats, **operands)
        outcome.treduda_ms, outcome.spread = timing.seconds * 1e3, timing.spread
        if libraries:
            inputs = [operands[r.tensor] for r in kernel.contraction.terms[0].reads]
            if kernel.dtype != "bfloat16":  # CuPy's einsum has no bfloat16 products
                outcome.cupy_ms = time_calls(lambda: cupy.einsum(spec, *inputs),
                                             repeats).seconds * 1e3
            if torch is not None:  # TF32 tensor cores exactly where the row allows them
                torch.backends.cuda.matmul.allow_tf32 = case.precision == TF32
                tensors = [to_framework(torch, a) for a in inputs]
                outcome.torch_ms = time_calls(lambda: torch.einsum(spec, *tensors),
                                              repeats).seconds * 1e3
                torch.backends.cuda.matmul.allow_tf32 = False
    except Exception as error:  # a failing row is reported in its row; the others go on
        outcome.stage, outcome.error = stage, f"{type(error).__name__}: {error}"
    return outcome



COLUMNS = ("id", "expression", "strategy", "ms", "GFLOP/s", "cupy ms", "torch ms", "x cupy",
           "x torch", "regs", "blocks", "verified")
LEFT = {"id", "expression", "strategy", "verified"}


def _cells(o: GpuOutcome) -> list[str]:
    return [o.id, clip(o.expression, EXPRESSION_WIDTH), o.strategy or "-",
            number(o.treduda_ms, ".4f"), number(o.gflops(o.treduda_ms), ".0f"),
            number(o.cupy_ms, ".4f"), number(o.torch_ms, ".4f"), number(o.ratio("cupy"), ".3f"),
            number(o.ratio("torch"), ".3f"), number(o.registers, "d"), number(o.blocks, "d"),
            "FAILED" if o.error else "yes" if o.verified else "-"]


def table(outcomes: Sequence[GpuOutcome]) -> str:
    """One aligned line per row, then the reason of each failed row."""
    lines = aligned(COLUMNS, [_cells(o) for o in outcomes], LEFT)
    lines += [f"{o.id} FAILED at {o.stage}: {o.error}" for o in _with_rivals(outcomes)
              if o.error]
    return "\n".join(lines)


def _with_rivals(outcomes: Sequence[GpuOutcome]) -> list[GpuOutcome]:
    return [x for o in outcomes for x in (o, *(o.rivals or ()))]


def summary(outcomes: Sequence[GpuOutcome], device: str) -> str:
    """The line to quote: rows verified, geometric-mean and lowest ratio per library."""
    verified = sum(o.verified and not o.error for o in outcomes)
    parts = [f"{verified}/{len(outcomes)} verified on {device}"]
    for library in ("torch", "cupy"):
        ratios = [(r, o.id) for o in outcomes if (r := o.ratio(library)) is not None]
        if ratios:
            mean = geometric_mean([r for r, _ in ratios])
            low, where = min(ratios)
            parts.append(f"geometric-mean {mean:.3f}x {library}.einsum over {len(ratios)} rows "
                         f"(lowest {low:.3f}x, {where})")
    return "; ".join(parts)


def plot(outcomes: Sequence[GpuOutcome], path: str, title: str, log: TextIO) -> bool:
    """Bars of treduda's speed relative to each library per row (log scale; 1 = as fast)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        print(f"matplotlib is not installed: skipping the plot {path} (pip install matplotlib)",
              file=log)
        return False
    figure = Figure(figsize=(max(8.0, 0.28 * len(outcomes) + 4), 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    width = 0.4
    for shift, library, colour in ((-width / 2, "torch", "tab:orange"),
                                   (width / 2, "cupy", "tab:green")):
        ratios = [o.ratio(library) or 0.0 for o in outcomes]
        if any(ratios):
            axes.bar([n + shift for n in range(len(outcomes))], ratios, width, color=colour,
                     label=f"{library}.einsum time / treduda time")
    axes.axhline(1.0, color="black", linewidth=1)
    axes.set_yscale("log")
    axes.set_xticks(range(len(outcomes)), [o.id for o in outcomes], rotation=90, fontsize=7)
    axes.set_ylabel("speed-up of treduda (above 1: faster)")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=7)
    figure.savefig(path, dpi=120)
    print(f"wrote {path}", file=log)
    return True
