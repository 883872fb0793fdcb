"""The public entry points: plan a kernel (:func:`compile`) or plan and run (:func:`contract`)."""

from __future__ import annotations

import functools
import hashlib
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from . import strategies
from .codegen.printer import check_identifiers
from .errors import ArgumentError, DtypeError, ShapeMismatch, StrategyError
from .frontend.contraction import Contraction, analyse, check_arguments, infer_sizes
from .frontend.dtypes import check_dtype, compute_dtype
from .kernel import Kernel
from .polyhedral.ast_build import build
from .polyhedral.lower import Program, plan
from .polyhedral.strategy import DEFAULT_STRATEGY
from .run import reference
from .run.cuda import gpu_present
from .run.launch import bind
from .run.nvcc import compile_cuda_batch, nvcc_supports
from .tuning.cache import CacheKey, CacheWarning, TuningCache, default_path
from .tuning.gpus import Gpu
from .tuning.gpus import gpu as find_gpu
from .tuning.model import Compiled, Model
from .tuning.search import (
    Candidate,
    Progress,
    SearchResult,
    identity,
    search_program,
)

# Node budgets of the search compile() runs: enough for full-size problems to finish; small
# ones (whose candidates differ by microseconds) stop early with the best found so far.
SEARCH_NODE_BUDGET = 5000
SMALL_PROBLEM = 10_000_000  # points in the iteration space
SMALL_PROBLEM_BUDGET = 200
MEASURED = 5  # candidates search(measure=True) generates, checks and times
CHECKED = 4  # candidates ptxas reports on at a time when the winner's report upsets it
CHECKED_MOST = 16  # ... and at most in all
# A batch after the first is compiled only for a candidate predicted this much faster than the
# best checked one: each report costs seconds of generation and nvcc for a full-size kernel.
CHECK_GAIN = 0.05
KERNELS_KEPT = 256  # kernels contract() and contract_expression() keep for repeated calls
PLAN_OPTIONS = ("dtype", "layout", "backend", "strategy", "params", "gpu")  # for did-you-mean
CONTRACT_OPTIONS = ("out", *PLAN_OPTIONS)


def compile(expr: str, sizes: Mapping[str, int] | None = None, *, dtype: str = "float32",
            layout: str = "C", strategy: str | None = None,
            params: Mapping[str, Any] | None = None, symbolic: bool = False,
            gpu: str = "H100", cache: TuningCache | bool = True,
            measure: bool = False) -> Kernel:
    """Generate a kernel for ``expr`` (Einstein notation or ``"ik,kj->ij"``).

    ``sizes`` maps each index to its extent. With ``symbolic=True`` the extents become kernel
    arguments, so one kernel serves every size (``sizes`` may then be omitted). ``layout`` is
    ``"C"`` (row-major) or ``"F"`` (column-major); ``strategy`` and ``params`` choose how the
    work is mapped onto the GPU (``treduda.strategies.available()`` lists them). Without either,
    fixed sizes are tuned for ``gpu`` by :func:`treduda.search` and the result kept in the
    tuning cache (``cache=False`` skips it); symbolic kernels take the default strategy.
    ``measure=True`` has the search time its best candidates (on the GPU when one is here,
    else on PoCL) and keep the fastest; the cache keeps that time apart from the prediction.
    """
    program = plan(expr, sizes, layout, dtype, symbolic=symbolic)
    generate = _Generator(program)
    if strategy is None and params is None and not program.symbolic:
        strategy, params = _tuned(program, gpu, cache, measure, generate)
    return generate(strategy or DEFAULT_STRATEGY, params)


def search(expr: str, sizes: Mapping[str, int], gpu: str | Gpu = "H100", *,
           dtype: str = "float32", layout: str = "C", strategy: str = DEFAULT_STRATEGY,
           values: Mapping[str, tuple] | None = None, measure: bool = False,
           progress: Progress | None = None, max_nodes: int | None = None,
           refine: int = 0, check: bool = False) -> SearchResult:
    """Find the fastest predicted kernel for ``expr`` at ``sizes`` on ``gpu``.

    With ``refine=k`` the k best candidates are generated and re-ranked by the estimate that
    walks their kernel IR (:func:`treduda.tuning.walk.estimate_kernel`), which sees what the
    parameters alone do not (guards, index arithmetic, ptxas's registers); it is never below
    the bound, so the re-ranking only ever picks among candidates the search could not cut.
    With ``measure=True`` the best candidates (up to :data:`MEASURED`) are also generated,
    each checked against numpy.einsum and then timed, and the fastest measured one wins: on
    the GPU when one is present (CUDA events), else on PoCL, which ranks them by a CPU's time.
    The winner's ``measured_on`` says which. With ``check=True`` and nvcc present, ptxas
    reports on the winner's registers and spills (:func:`_checked`). Compile the winner with
    ``compile(expr, sizes, strategy=result.best.strategy, params=result.best.params)``.
    """
    program = plan(expr, sizes, layout, dtype)
    result = search_program(program, gpu, strategy=strategy, values=values, progress=progress,
                            max_nodes=max_nodes)
    return _reranked(program, result, refine, measure, check)


def _generated(program: Program, strategy: str, params: Mapping[str, Any] | None) -> Kernel:
    """``program`` scheduled by ``strategy`` with ``params``, built and checked: the one place
    a kernel is made, for compile() and for the candidates the search re-ranks."""
    scheduled = strategies.get(strategy).apply(program, params)
    built = build(scheduled, _kernel_name(program, scheduled.strategy, scheduled.params))
    check_identifiers(built.kernel)
    return Kernel(program.original, program, built, scheduled.strategy, scheduled.params)


class _Generator:
    """The kernels of one program for one call of compile() or search(), each generated once:
    ptxas's check of a winner, its walk, its measurement and compile()'s kernel ask for the
    same one (a full-size kernel takes seconds to build)."""

    def __init__(self, program: Program):
        self.program = program
        self._made: dict[str, Kernel] = {}

    def __call__(self, strategy: str, params: Mapping[str, Any] | None) -> Kernel:
        key = _shaping(self.program, strategy, params or {})
        if key not in self._made:
            self._made[key] = _generated(self.program, strategy, params)
        return self._made[key]


def _reranked(program: Program, result: SearchResult, refine: int, measure: bool,
              check: bool = False, generate: _Generator | None = None) -> SearchResult:
    """``result`` with a new winner: with ``check``, as ptxas's reports re-estimate it
    (:func:`_checked`); among its ``refine`` best by the walk over their kernels; then with
    ``measure`` among its :data:`MEASURED` best by their checked, timed runs."""
    generate = generate or _Generator(program)
    if check and nvcc_supports(result.gpu.arch):
        result = _checked(result, generate)
    if refine:
        walked = [_walked(result, c, generate) for c in result.top(refine)]
        result = replace(result, best=min(walked, key=lambda c: (c.walked.seconds, c.key())))
    if measure:
        backend = "cuda" if gpu_present() else "opencl"
        measured = [_measured(c, backend, generate) for c in result.top(MEASURED)]
        result = replace(result, best=min(measured, key=lambda c: c.measured))
    return result


def _checked(result: SearchResult, generate: _Generator) -> SearchResult:
    """``result`` whose winner ptxas has reported on: re-estimated with the registers and
    spills of its compiled kernel; while the best so re-estimated is slower than the prediction
    of the best candidate not yet compiled (after the first batch, by :data:`CHECK_GAIN`), the
    next :data:`CHECKED` are compiled and re-estimated too (up to :data:`CHECKED_MOST`), and the
    fastest wins.

    The model predicts registers and spills from the main loop alone; ptxas's allocation of a
    large unrolled loop can differ, e.g. tccg_28's 3000-node winner (512 threads, a 4 x 8 x 2
    register tile, B read from global memory over an 8 x 8 step) was predicted to fit 128
    registers, and ptxas spilled 2.3 KB per thread while both summed indices of a step were
    unrolled; tccg_15's winners fit 113 by the model and ptxas spills 16 bytes. tccg_28's
    winner now preloads an 8 x 8 step: 126 registers by the model, 168 by ptxas (59.5 ms
    instead of 44.9); the four best are all such, alike but for symmetry, and the fifth, the
    same without preloading, takes 122 (44.9 ms)."""
    model = Model(generate.program, result.gpu, result.best.strategy)

    def with_reports(candidates: list[Candidate]) -> list[Candidate]:
        kernels = [generate(c.strategy, c.params) for c in candidates]
        reports = compile_cuda_batch([k.cuda_source for k in kernels], result.gpu.arch)
        checked = []
        for candidate, kernel, report in zip(candidates, kernels, reports, strict=True):
            compiled = Compiled.of(next(r for r in report if r.name == kernel.name))
            checked.append(replace(candidate, compiled=compiled,
                                   prediction=model.estimate(candidate.params, compiled)))
        return checked

    top = result.top(CHECKED_MOST)
    checked = with_reports(top[:1])
    gain = 0.0  # the first rivals are checked on any upset, later ones for a real gain only
    while len(checked) < len(top) and (min(c.prediction.seconds for c in checked)
                                       > top[len(checked)].prediction.seconds * (1 + gain)):
        checked += with_reports(top[len(checked):len(checked) + CHECKED])
        gain = CHECK_GAIN
    by_params = {identity(c.params): c for c in checked}
    return replace(result, best=min(checked, key=Candidate.key), candidates=tuple(
        by_params.get(identity(c.params), c) for c in result.candidates))


def _walked(result: SearchResult, candidate: Candidate, generate: _Generator) -> Candidate:
    """``candidate`` with the estimate of a walk over its generated kernel."""
    kernel = generate(candidate.strategy, candidate.params)
    return replace(candidate, walked=kernel.estimate(result.gpu))


def _measured(candidate: Candidate, backend: str, generate: _Generator) -> Candidate:
    """``candidate`` with its median time per launch on ``backend``, after checking its
    result against numpy.einsum there."""
    kernel = generate(candidate.strategy, candidate.params)
    kernel.verify(backend=backend)
    timing = kernel.time(backend)
    return replace(candidate, measured=timing.seconds, measured_on=timing.device)


def contract(expr: str, *operands: Any, out: Any = None, dtype: str | None = None,
             layout: str = "C", backend: str = "opencl", strategy: str | None = None,
             params: Mapping[str, Any] | None = None, gpu: str = "H100",
             **values: Any) -> np.ndarray:
    """Compute ``expr`` on numpy arrays passed by tensor name (or positionally, in order of
    appearance, for ``"ik,kj->ij"``) and scalars by name; returns the output array, which is
    ``out`` when given (as numpy.einsum's ``out=``; it also holds the old values for ``+=``).

    Sizes come from the arrays; the dtype is double precision if any array is, complex if
    any array or scalar is (``alpha=0.5j``), else float32. Without ``strategy`` or ``params``
    the kernel is searched for ``gpu``. It is kept for the process, so a repeated call costs
    the run, not its generation (see
    :func:`contract_expression`). An axis of extent 0 launches nothing: the result is what
    numpy.einsum gives (zeros, or an empty array).
    """
    contraction = analyse(expr)
    values = _named(contraction, operands, values, CONTRACT_OPTIONS)
    arrays = {k: np.asarray(v) for k, v in values.items() if k not in contraction.scalars}
    computed = compute_dtype({name: array.dtype for name, array in arrays.items()},
                             [v for k, v in values.items() if k in contraction.scalars])
    shapes = {name: array.shape for name, array in arrays.items()}
    planned = contract_expression(expr, dtype=dtype or computed, layout=layout,
                                  backend=backend, strategy=strategy, params=params, gpu=gpu,
                                  **shapes)
    return planned(out=out, **values)


@dataclass(frozen=True)
class ContractExpression:
    """A contraction planned for fixed shapes: call it with arrays as :func:`contract` takes
    them, as often as needed; each call only runs the kernel."""

    contraction: Contraction
    sizes: dict[str, int]
    dtype: str
    backend: str
    kernel: Kernel | None  # None when an axis is empty: there is nothing to launch

    def __call__(self, *operands: Any, out: Any = None, **values: Any) -> Any:
        c = self.contraction
        values = _named(c, operands, values, ("out",))
        if out is not None:
            if c.output in values:
                raise ArgumentError(f"pass the output {c.output} as {c.output}= or as out=, "
                                    "not both")
            _check_out(out, tuple(self.sizes[i] for i in c.output_indices), self.dtype)
            if c.reads_output or c.op != "=":
                values[c.output] = out  # its old values are used
        if self.kernel is not None:
            result = self.kernel.run(backend=self.backend, **values)
        else:
            sizes, arrays, scalars = bind(c, self.dtype, self.sizes, values, empty=True)
            result = reference.evaluate(c, arrays, scalars, sizes).astype(self.dtype)
        if out is None:
            return result
        out[...] = result
        return out

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return (f"ContractExpression({self.contraction.source!r}, {sizes}, {self.dtype}, "
                f"{self.kernel if self.kernel is not None else 'empty: no kernel'})")


def contract_expression(expr: str, *shapes: tuple[int, ...], dtype: str = "float32",
                        layout: str = "C", backend: str = "opencl", strategy: str | None = None,
                        params: Mapping[str, Any] | None = None, gpu: str = "H100",
                        **named_shapes: tuple[int, ...]) -> ContractExpression:
    """Plan ``expr`` once for arrays of ``shapes`` (positional in order of appearance, or by
    tensor name) and return a callable that contracts such arrays, as opt_einsum's
    ``contract_expression`` does.

    The kernel (searched for ``gpu`` unless ``strategy`` or ``params`` say otherwise) is kept
    for the process, keyed by everything that shapes it, and its OpenCL program is built once.
    """
    contraction = analyse(expr)
    named = _named(contraction, shapes, named_shapes, PLAN_OPTIONS)
    check_dtype(dtype)
    stand_ins = {name: np.broadcast_to(False, shape) for name, shape in named.items()}
    sizes = infer_sizes(contraction, stand_ins, empty=True, old_output=False)
    tuned = strategy is None and params is None  # compile() searches, or asks the cache
    kernel = None if 0 in sizes.values() else _kept_kernel(
        expr, tuple(sizes.items()), dtype, layout, strategy,
        None if params is None else tuple(sorted(params.items())), gpu,
        str(default_path()) if tuned else None)
    return ContractExpression(contraction, sizes, dtype, backend, kernel)


@functools.lru_cache(maxsize=KERNELS_KEPT)
def _kept_kernel(expr: str, sizes: tuple, dtype: str, layout: str, strategy: str | None,
                 params: tuple | None, gpu: str, cache: str | None) -> Kernel:
    """:func:`compile`'s kernel, kept: every argument shapes it (``cache``, the path of the
    tuning cache a searched kernel comes from), so equal arguments mean an equal kernel."""
    return compile(expr, dict(sizes), dtype=dtype, layout=layout, strategy=strategy,
                   params=None if params is None else dict(params), gpu=gpu,
                   cache=TuningCache(cache) if cache else False)


def _named(contraction: Contraction, operands: tuple, values: dict[str, Any],
           options: tuple[str, ...]) -> dict[str, Any]:
    """Positional ``operands`` by their tensor's name, with ``values``, every name checked."""
    names = list(contraction.inputs)
    if len(operands) > len(names):
        raise ArgumentError(f"{len(operands)} arrays given but the expression has "
                            f"{len(names)} input tensor(s): {', '.join(names)}")
    named = dict(zip(names[: len(operands)], operands, strict=True))
    doubled = sorted(set(named) & set(values))
    if doubled:
        raise ArgumentError(f"{', '.join(doubled)} given both by position and by name")
    check_arguments(contraction, values, options)
    return {**named, **values}


def _check_out(out: Any, shape: tuple[int, ...], dtype: str) -> None:
    """numpy.einsum's rules for ``out``: an array of the output's shape, to which the result's
    dtype casts safely."""
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise ArgumentError(f"out must be an array, got {type(out).__name__}")
    if tuple(out.shape) != shape:
        raise ShapeMismatch(f"out has shape {tuple(out.shape)} but the output has shape {shape}")
    if not np.can_cast(dtype, out.dtype, "safe"):
        raise DtypeError(f"out has dtype {out.dtype}, to which the result's {dtype} does not "
                         f"cast safely; pass an out of dtype {dtype} or wider")


def _tuned(program: Program, gpu: str, cache: TuningCache | bool, measure: bool,
           generate: _Generator) -> tuple[str, dict[str, Any]]:
    """The searched strategy and parameters, from the tuning cache when it has them.

    A cached entry is re-checked against this program's parameter space before it is used;
    one that no longer fits is reported and searched for again. An entry holds the model's
    prediction (``seconds``, ``binding``) and, apart from it, a measurement (``measured``:
    seconds and the device) when the search timed its candidates; ``measure=True`` searches
    again where the entry has none."""
    store = cache if isinstance(cache, TuningCache) else (TuningCache() if cache else None)
    key = CacheKey.of(program, find_gpu(gpu).name)
    hit = store.get(key) if store is not None else None
    if hit is not None and (hit.get("measured") or not measure):
        try:
            chosen = strategies.get(hit["strategy"])
            chosen.space(program).check({**chosen.defaults(program), **hit["params"]})
            return hit["strategy"], dict(hit["params"])
        except (StrategyError, KeyError, TypeError) as error:
            warnings.warn(f"ignoring the cached tuning for {key}: {error}", CacheWarning,
                          stacklevel=3)
    result = tuning_search(program, gpu, measure, generate)
    if store is not None:
        store.put(key, cache_value(result))
    return result.best.strategy, dict(result.best.params)


def tuning_search(program: Program, gpu: str | Gpu, measure: bool = False,
                  generate: _Generator | None = None,
                  max_nodes: int | None = None) -> SearchResult:
    """The search compile() runs for ``program`` when neither strategy nor params are given
    (``treduda tune`` runs the same one on a cluster): within :data:`SEARCH_NODE_BUDGET` nodes,
    :data:`SMALL_PROBLEM_BUDGET` for a small problem, or ``max_nodes`` when given; ptxas checks
    the winner of a problem that is not small."""
    small = math.prod(program.sizes.values()) < SMALL_PROBLEM
    budget = max_nodes or (SMALL_PROBLEM_BUDGET if small else SEARCH_NODE_BUDGET)
    return _reranked(program, search_program(program, gpu, max_nodes=budget), 0, measure,
                     check=not small, generate=generate)


def cache_value(result: SearchResult) -> dict[str, Any]:
    """What the tuning cache keeps of a search: its winner's strategy and parameters, the
    model's prediction, and apart from it the winner's measured time when it was timed."""
    best = result.best
    measured = None if best.measured is None else {"seconds": best.measured,
                                                   "device": best.measured_on}
    return {"strategy": best.strategy, "params": dict(best.params),
            "seconds": best.prediction.seconds, "binding": best.prediction.binding,
            "measured": measured}


def _kernel_name(program: Program, strategy: str, params: Mapping[str, Any]) -> str:
    """A C name unique to everything that shapes the kernel text (so sources can be batched)."""
    key = _shaping(program, strategy, params)
    return f"td_{program.original.output}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def _shaping(program: Program, strategy: str, params: Mapping[str, Any]) -> str:
    """Everything that shapes a kernel, as text."""
    return repr((repr(program.original.tree), sorted((program.expression_sizes or {}).items()),
                 program.dtype, program.layout, strategy, sorted(params.items())))
