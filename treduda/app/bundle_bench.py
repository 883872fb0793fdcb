"""`treduda bench --bundle FILE --gpu-time`: time a bundle's kernels and programs on this
machine's GPU beside torch.einsum and cupy.einsum, without the compiler (no isl, no search:
the GPU session's machine has neither).

First every kernel is loaded: the bundle's cubin for this GPU's architecture where it holds
one (``--nvrtc``: never), else its CUDA source compiled by NVRTC through CuPy, in parallel
threads; the time is logged and written as the first JSON line. Then, entry by entry in the
bundle's order (the order of value it was prepared in), the kernel runs on random operands, is
checked against the libraries' einsum in a wide type, and is timed with CUDA events:
treduda's kernel and each library in turn, :data:`ROUNDS` times interleaved, each timing the
median of ``repeats`` launches; a line gives the median of the rounds and their spread
((slowest - fastest) / median), since one library's time alone moved up to 4x between two
sessions. Rivals (``role: rival`` in their metadata) are timed alone. One JSON line is appended per
entry the moment it is measured, so a run cut short keeps every finished entry, and
``--stop-after`` ends the run cleanly before an entry that might not finish. An entry whose
first call (the check) has not finished after :data:`HANG_SECONDS` is a kernel that never ends
(an mbarrier phase no copy completes): its line says so and the process exits with
:data:`HUNG` (the GPU is held by the kernel until the process ends), so the session goes on
with the next bundle instead of waiting out its time.

With ``--pocl`` everything runs on PoCL instead (the session's dry run on a machine without
a GPU): numpy.einsum checks, OpenCL profiling events time, and no library is timed; an entry
of more than :data:`POCL_FLOPS` is built and its arguments bound there, not run (its line
says ``launched: false``): the dry run proves the bundle's plumbing in minutes.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..bundle import BundledKernel, BundledProgram, load
from ..errors import BackendUnavailable, TredudaError
from ..frontend.contraction import analyse
from ..frontend.dtypes import TF32, fmas
from ..run.nvcc import code_digest
from ..run.timing import REPEATS, Timing
from .gpu_checks import check_result, einsum_spec, gpu_libraries, random_operands

ROUNDS = 3  # timings of each kernel and library, interleaved
# An entry of more floating-point operations is built and bound on PoCL, not run: the dry run
# of full-size bundles launched GEMM 4096^3 (137 GFLOP) there and spent 210 s on it
POCL_FLOPS = 2e9
HANG_SECONDS = 60.0  # a first call this long is a kernel that never ends (seconds at most)
HUNG = 4  # the exit status after one
TIMED = ("treduda", "torch", "cupy")


def run(path: str, *, jsonl: str, repeats: int = REPEATS, pocl: bool = False,
        nvrtc: bool = False, limit: int | None = None, stop_after: float | None = None,
        out: TextIO | None = None, log: TextIO | None = None) -> int:
    """Measure the bundle ``path`` entry by entry, appending a JSON line each to ``jsonl``
    (compiling every source with NVRTC where ``nvrtc``, else loading the cubins the bundle
    holds for this GPU); 0 without a GPU (nothing timed, unless ``pocl``), 1 if an entry
    failed, 3 if the kernels could not be compiled or loaded; the process exits with
    :data:`HUNG` where a kernel never ends."""
    out = sys.stdout if out is None else out
    log = sys.stderr if log is None else log
    started = time.perf_counter()
    bundle = load(path, backend="opencl" if pocl else "cuda", cubins=not nvrtc)
    try:
        xp, torch = (np, None) if pocl else gpu_libraries()
    except BackendUnavailable as error:
        print(f"cannot time on a GPU here: {error}. Nothing was timed.", file=out)
        return 0
    in_programs = {k.name for p in bundle.programs.values() for k in p.steps}
    entries = [*(k for name, k in bundle.kernels.items() if name not in in_programs),
               *bundle.programs.values()][:limit]
    try:
        device = _compile(bundle, pocl, jsonl, path, log)
    except TredudaError as error:  # e.g. a cubin this driver refuses: rerun with --nvrtc
        print(f"{path}: the kernels could not be compiled or loaded: {error}", file=out)
        return 3
    failed = 0
    for number, entry in enumerate(entries, 1):
        if stop_after is not None and time.perf_counter() - started > stop_after:
            print(f"stopped before {entry.name} ({len(entries) - number + 1} left): "
                  f"--stop-after {stop_after:.0f} s reached", file=log, flush=True)
            break
        print(f"[{number}/{len(entries)}] {entry.name} ...", end="", file=log, flush=True)
        begun = time.perf_counter()
        where = {"bundle": Path(path).name, "device": device}
        hung = functools.partial(_give_up, jsonl, where, begun, log)
        line = measure(entry, xp, torch, repeats, pocl, None if pocl else hung)
        line.update(**where, seconds=time.perf_counter() - begun)
        _append(jsonl, line)
        failed += line["status"] != "ok"
        verdict = (f"FAILED at {line['stage']}" if line["status"] != "ok"
                   else "built and bound, not run (too large for PoCL)"
                   if line.get("launched") is False
                   else f"{_ms(line['treduda_ms'])} ms, torch {_ms(line.get('torch_ms'))} ms")
        print(f" {verdict} ({line['seconds']:.1f} s)", file=log, flush=True)
    print(f"{len(entries)} entries of {path} in {time.perf_counter() - started:.0f} s, "
          f"{failed} FAILED; lines appended to {jsonl}", file=out)
    return 1 if failed else 0


def _give_up(jsonl: str, where: dict[str, Any], begun: float, log: TextIO,
             line: dict[str, Any]) -> None:
    """Append the line of an entry whose kernel never ends and end the process: the kernel
    holds the GPU until it does."""
    _append(jsonl, {**line, **where, "seconds": time.perf_counter() - begun})
    print(f" FAILED: {line['error']}", file=log, flush=True)
    os._exit(HUNG)


def _compile(bundle, pocl: bool, jsonl: str, path: str, log: TextIO) -> str:
    """Load every kernel's cubin for this GPU where the bundle holds one, compile the other
    sources with NVRTC, in parallel, and write how long it took as a JSON line; returns what
    times the kernels. On PoCL each builds at its first run."""
    if pocl:
        from ..run.opencl import opencl_device

        return opencl_device()
    from ..run.cuda import cuda_runtime

    started = time.perf_counter()
    kernels = list(bundle.kernels.values())
    load_kernels(kernels)
    seconds = time.perf_counter() - started
    runtime = cuda_runtime()
    loaded = sum(runtime.arch in k.cubins for k in kernels)
    _append(jsonl, {"kind": "compile", "bundle": Path(path).name, "kernels": len(kernels),
                    "cubins": loaded, "nvrtc": len(kernels) - loaded, "seconds": seconds})
    print(f"{loaded} cubins loaded for {runtime.arch}, {len(kernels) - loaded} sources "
          f"compiled with NVRTC, in {seconds:.1f} s", file=log, flush=True)
    return runtime.device


def load_kernels(kernels: list[BundledKernel]) -> None:
    """Load each kernel's cubin for this GPU where it has one, else compile its source with
    NVRTC, in parallel threads: CuPy calls nvrtcCompileProgram without holding the GIL
    (cupy_backends/cuda/libs/nvrtc.pyx, compileProgram's "with nogil")."""
    from ..run.cuda import registers_cuda

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(lambda k: registers_cuda(k.cuda_source, k.entry["function"], k.cubins),
                      kernels))


def measure(entry: BundledKernel | BundledProgram, xp, torch, repeats: int, pocl: bool,
            hung: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """One entry's JSON line: what it is, whether it agrees with einsum, and its times.
    ``hung`` is called (from another thread) with the line of a first call that has not
    finished after :data:`HANG_SECONDS`."""
    kernel = entry if isinstance(entry, BundledKernel) else _Statement(entry)
    line: dict[str, Any] = {"kind": "kernel" if entry is kernel else "program",
                            "name": entry.name, **entry.metadata,
                            "expression": kernel.expression, "dtype": kernel.dtype,
                            "precision": kernel.precision, "layout": kernel.layout,
                            "sizes": kernel.sizes, "backend": "opencl" if pocl else "cuda",
                            "status": "ok", "stage": None, "error": None,
                            "verified": False, "max_error": None, "registers": None}
    if entry is kernel:
        line.update(strategy=entry.entry["strategy"], params=entry.entry["params"],
                    grid=entry.entry["grid"], block=entry.entry["block"],
                    code_digest=code_digest(entry.cuda_source),  # for the fidelity tool
                    flops=2 * fmas(entry.dtype) * math.prod(entry.sizes.values()))
    else:
        line.update(steps=[k.name for k in entry.steps], flops=entry.entry.get("flops"))
    stage = "verify"
    try:
        if pocl and not runs_on_pocl(entry):
            stage = "bind"
            bind_on_pocl(entry)
            line.update(launched=False, **summarised({}, line["flops"]))
            return line
        operands = random_operands(kernel, xp, torch)
        never_ends = {**line, "status": "FAILED", "stage": stage,
                      "error": f"its first call did not end in {HANG_SECONDS:.0f} s: a kernel "
                               "that never ends (a wait for an mbarrier phase that no copy "
                               "completes?); this bundle's run stops here"}
        with _deadline(HANG_SECONDS, None if hung is None else lambda: hung(never_ends)):
            result = entry(**operands)
            if entry is not kernel:
                result = result[entry.results[0]]
            steps = len(entry.steps) if isinstance(entry, BundledProgram) else 1
            line["max_error"] = check_result(kernel, operands, result, xp, torch, steps)
        line["verified"] = True
        stage = "time"
        if not pocl and entry is kernel:
            from ..run.cuda import registers_cuda

            line["registers"] = registers_cuda(entry.cuda_source, entry.entry["function"],
                                               entry.cubins)
        timed = {"treduda": _ours(entry, operands, xp, repeats, pocl)}
        if not pocl and line.get("role") != "rival":
            timed.update(_baselines(kernel, operands, torch, repeats))
        line.update(summarised(_interleaved(timed), line["flops"]))
    except Exception as error:  # a failing entry is reported in its line; the others go on
        line.update(status="FAILED", stage=stage, error=f"{type(error).__name__}: {error}")
    return line


def kernels_of(entry: BundledKernel | BundledProgram) -> tuple[BundledKernel, ...]:
    """The kernels an entry runs: a kernel itself, a program's steps."""
    return entry.steps if isinstance(entry, BundledProgram) else (entry,)


def runs_on_pocl(entry: BundledKernel | BundledProgram) -> bool:
    """Whether ``entry`` is small enough to run on PoCL in a dry run (:data:`POCL_FLOPS`)."""
    return sum(2 * fmas(k.dtype) * math.prod(k.sizes.values())
               for k in kernels_of(entry)) <= POCL_FLOPS


def bind_on_pocl(entry: BundledKernel | BundledProgram) -> None:
    """Build each of ``entry``'s kernels on PoCL and bind its arguments (random operands of
    the shapes it holds, its sizes and scalars) without running it: the plumbing a dry run
    proves of an entry too large to run on the CPU (the source, the launch signature, the
    arguments' order and shapes); what it computes is checked on the GPU."""
    from ..run.opencl import bind_opencl

    for kernel in kernels_of(entry):
        bind_opencl(kernel.opencl_source, kernel.launch(random_operands(kernel, np)))


@contextmanager
def _deadline(seconds: float, expired: Callable[[], None] | None) -> Iterator[None]:
    """Call ``expired`` from a timer thread if the block has not ended after ``seconds``
    (CuPy waits for the GPU without the GIL, so the timer runs while a kernel hangs)."""
    if expired is None:
        yield
        return
    timer = threading.Timer(seconds, expired)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def summarised(measured: dict[str, list[float]], flops: float | None) -> dict[str, Any]:
    """A line's times from each timer's rounds (seconds): the median in ms, the rounds, the
    spread ((slowest - fastest) / median), the libraries' ratios (theirs over treduda's) and
    treduda's GFLOP/s; every field of every timer of :data:`TIMED`, None where not timed."""
    fields: dict[str, Any] = {}
    for name in TIMED:
        runs = measured.get(name, [])
        median = statistics.median(runs) if runs else None
        fields[f"{name}_ms"] = None if median is None else median * 1e3
        fields[f"{name}_runs_ms"] = [r * 1e3 for r in runs]
        fields[f"{name}_spread"] = None if not median else (max(runs) - min(runs)) / median
    ours = fields["treduda_ms"]
    for library in ("torch", "cupy"):
        theirs = fields[f"{library}_ms"]
        fields[f"ratio_{library}"] = theirs / ours if theirs and ours else None
    fields["gflops"] = flops / ours / 1e6 if flops and ours else None
    return fields


class _Statement:
    """A program of one statement (the AO->MO transform) seen as that statement, for the
    operands, the einsum and the check (its kernels are the program's)."""

    def __init__(self, program: BundledProgram):
        self.name, self.program = program.name, program
        self.contraction = analyse(program.source)
        shapes = program.shapes
        self.sizes = {i: n for t, idx in self.contraction.inputs.items()
                      for i, n in zip(idx, shapes[t], strict=True)}
        self.dtype, self.layout = program.dtype, program.entry["layout"]
        self.precision, self.expression = "highest", program.source


def _ours(entry: BundledKernel | BundledProgram, operands: dict[str, Any], xp, repeats: int,
          pocl: bool) -> Callable[[], Timing | None]:
    """Times ``entry`` when called: a kernel's launches alone (arguments placed once); a
    program's whole calls, with its intermediates (on a GPU only)."""
    if isinstance(entry, BundledProgram):
        if pocl:
            return lambda: None
        from ..run.cuda import time_calls

        return lambda: time_calls(lambda: entry(**operands), repeats)
    launch = entry.launch(operands, xp=xp)
    if pocl:
        from ..run.opencl import time_opencl

        return lambda: time_opencl(entry.opencl_source, launch, repeats)
    from ..run.cuda import time_cuda

    return lambda: time_cuda(entry.cuda_source, launch, repeats, cubins=entry.cubins)


def _baselines(kernel, operands: dict[str, Any], torch, repeats: int
               ) -> dict[str, Callable[[], Timing | None]]:
    """torch.einsum (TF32 exactly where the row allows it) and cupy.einsum (not for bfloat16:
    CuPy's einsum has no bfloat16 products) on the same operands."""
    from ..run.cuda import time_calls
    from ..run.device_arrays import cupy_module, to_framework

    cupy = cupy_module()
    spec = einsum_spec(kernel)
    inputs = [operands[r.tensor] for r in kernel.contraction.terms[0].reads]
    timed: dict[str, Callable[[], Timing | None]] = {}
    if torch is not None:
        tensors = [to_framework(torch, a) for a in inputs]

        def torch_einsum() -> Timing:
            torch.backends.cuda.matmul.allow_tf32 = kernel.precision == TF32
            try:
                return time_calls(lambda: torch.einsum(spec, *tensors), repeats)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False

        timed["torch"] = torch_einsum
    if kernel.dtype != "bfloat16":
        timed["cupy"] = lambda: time_calls(lambda: cupy.einsum(spec, *inputs), repeats)
    return timed


def _interleaved(timed: dict[str, Callable[[], Timing | None]]) -> dict[str, list[float]]:
    """Each timer's medians over :data:`ROUNDS` rounds, the timers taking turns in each."""
    runs: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(ROUNDS):
        for name, timer in timed.items():
            timing = timer()
            if timing is not None:
                runs[name].append(timing.seconds)
    return runs


def _append(path: str, line: dict[str, Any]) -> None:
    """Add ``line`` to the JSON-lines file ``path`` and flush it to disk at once."""
    with open(path, "a") as stream:
        stream.write(json.dumps(line) + "\n")
        stream.flush()
        os.fsync(stream.fileno())


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
