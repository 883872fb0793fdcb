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
from .determinism import resolve
from .errors import ArgumentError, DtypeError, ShapeMismatch, StrategyError
from .frontend.arguments import check_choice, check_scalars, check_shapes, check_types
from .frontend.broadcast import Broadcast
from .frontend.broadcast import resolve as broadcast_of
from .frontend.contraction import Contraction, analyse, check_arguments, infer_sizes
from .frontend.dtypes import (
    DEFAULT_CASTING,
    HIGHEST,
    check_cast,
    check_casting,
    check_dtype,
    check_precision,
    check_update,
    compute_dtype,
    finish,
    kernel_dtype,
    literal_scalars,
)
from .frontend.optimize import AUTO, check_optimize
from .kernel import BACKENDS, Kernel
from .polyhedral.ast_build import build, check_grid
from .polyhedral.lower import Program, plan
from .polyhedral.strategy import DEFAULT_STRATEGY
from .programs import CompileStep, Plan
from .run import reference
from .run.cuda import gpu_present
from .run.launch import bind
from .run.nvcc import compile_cuda_batch, nvcc_supports
from .tuning.cache import CacheKey, CacheWarning, TuningCache, default_path
from .tuning.gpus import Gpu
from .tuning.gpus import gpu as find_gpu
from .tuning.model import Compiled, Model
from .tuning.paths import many_factors
from .tuning.search import (
    DEFAULT_BUDGET,
    Candidate,
    Progress,
    SearchResult,
    identity,
    search_program,
    worth_checking,
)

# The node budget of the search compile() runs for small problems (whose candidates differ by
# microseconds): they stop early with the best found so far; others search within a time
# budget (DEFAULT_BUDGET seconds, tuning/search.py).
SEARCH_NODE_BUDGET = 5000  # compile()'s node budget before its time budget (tests replay it)
SMALL_PROBLEM = 10_000_000  # points in the iteration space
SMALL_PROBLEM_BUDGET = 200
MEASURED = 5  # candidates search(measure=True) generates, checks and times
CHECKED = 4  # candidates ptxas reports on at a time when the winner's report upsets it
CHECKED_MOST = 16  # ... and at most in all
# A batch after the first is compiled only for a candidate predicted this much faster than the
# best checked one: each report costs seconds of generation and nvcc for a full-size kernel.
CHECK_GAIN = 0.05
KERNELS_KEPT = 256  # kernels (and plans) compile(), contract() and contract_expression() keep
PLAN_OPTIONS = ("dtype", "layout", "backend", "strategy", "params", "gpu",
                "deterministic", "optimize", "casting", "precision")
CONTRACT_OPTIONS = ("out", *PLAN_OPTIONS)  # for did-you-mean
CALL_OPTIONS = ("out", "casting")


def compile(expr: str, sizes: Mapping[str, int] | None = None, *, dtype: str = "float32",
            layout: str = "C", strategy: str | None = None,
            params: Mapping[str, Any] | None = None, symbolic: bool = False,
            gpu: str = "H100", cache: TuningCache | bool = True,
            measure: bool = False, deterministic: bool | None = None,
            precision: str = HIGHEST, budget: float | None = DEFAULT_BUDGET) -> Kernel:
    """Generate a kernel for ``expr`` (Einstein notation or ``"ik,kj->ij"``).

    ``sizes`` maps each index to its extent. With ``symbolic=True`` the extents become kernel
    arguments, so one kernel serves every size (``sizes`` may then be omitted). ``layout`` is
    ``"C"`` (row-major) or ``"F"`` (column-major); ``strategy`` and ``params`` choose how the
    work is mapped onto the GPU (``treduda.strategies.available()`` lists them). Without either,
    fixed sizes are tuned for ``gpu`` by :func:`treduda.search` and the result kept in the
    tuning cache (``cache=False`` skips it); symbolic kernels take the default strategy.
    ``measure=True`` has the search time its best candidates (on the GPU when one is here,
    else on PoCL) and keep the fastest; the cache keeps that time apart from the prediction.
    ``deterministic=True`` allows no atomic additions, so the kernel gives the same result bit
    for bit on every run (a split reduction adds its parts in a fixed order, in a second
    kernel); None takes the process-wide default (:class:`treduda.use_deterministic`).
    ``precision`` (float32 only) rounds the sums' inputs: ``"tf32"`` to TF32, ``"3xtf32"``
    into two TF32 pieces each (FP32 accuracy from TF32 products); ``"highest"`` is plain FP32.
    It fixes the numerics, not the unit: these kernels compute on FMA units.
    ``budget`` is the search's time in seconds (None: the complete search, which can take
    minutes; :func:`search` says how far a budgeted winner can be from the optimum).
    The kernel is kept for the process (:func:`_kept`): the same call again returns it at once,
    and so does :func:`contract` on arrays of these sizes.
    """
    check_types(expr=expr, sizes=sizes, layout=layout, strategy=strategy, params=params,
                symbolic=symbolic, measure=measure)
    check_dtype(dtype)
    check_precision(precision, dtype)
    if not isinstance(cache, (bool, TuningCache)):
        raise ArgumentError(f"cache must be True, False or a treduda.tuning.cache.TuningCache, "
                            f"got {type(cache).__name__} {cache!r}")
    return _kept(expr, sizes, dtype=dtype, layout=layout, strategy=strategy, params=params,
                 gpu=find_gpu(gpu), cache=cache, symbolic=symbolic, measure=measure,
                 deterministic=resolve(deterministic), precision=precision, budget=budget)


def _compiled(expr: str, sizes: Mapping[str, int] | None, dtype: str, layout: str,
              strategy: str | None, params: Mapping[str, Any] | None, symbolic: bool, gpu: Gpu,
              cache: TuningCache | bool, measure: bool, deterministic: bool,
              precision: str, budget: float | None = DEFAULT_BUDGET) -> Kernel:
    """:func:`compile`'s work, once its arguments are checked: plan, tune, generate."""
    program = plan(expr, sizes, layout, dtype, symbolic=symbolic, deterministic=deterministic,
                   precision=precision)
    check_grid(program, gpu.max_threads_per_block, gpu.max_registers_per_thread)
    generate = _Generator(program)
    if strategy is None and params is None and not program.symbolic:
        strategy, params = _tuned(program, gpu, cache, measure, generate, budget)
    return generate(strategy or DEFAULT_STRATEGY, params)


def search(expr: str, sizes: Mapping[str, int], gpu: str | Gpu = "H100", *,
           dtype: str = "float32", layout: str = "C", strategy: str = DEFAULT_STRATEGY,
           values: Mapping[str, tuple] | None = None, measure: bool = False,
           progress: Progress | None = None, max_nodes: int | None = None,
           refine: int = 0, check: bool = False,
           cache: TuningCache | bool = False,
           deterministic: bool | None = None, precision: str = HIGHEST,
           budget: float | None = DEFAULT_BUDGET) -> SearchResult:
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
    With ``cache`` (True: the default file, or a :class:`TuningCache`) the winner is also kept
    in the tuning cache, where :func:`compile` and :func:`tuning_entry` find it.
    ``deterministic`` is :func:`compile`'s: the model prices a split's second kernel then;
    ``precision`` as for :func:`compile`. ``budget`` seconds bound the search (None: the
    complete search); ``result.stats.lower`` and ``summary()`` say how far the winner can be
    from the best estimate of the whole space.
    """
    check_types(expr=expr, sizes=sizes, layout=layout, strategy=strategy, values=values,
                measure=measure, progress=progress, max_nodes=max_nodes, refine=refine,
                check=check)
    gpu = find_gpu(gpu)
    program = plan(expr, sizes, layout, dtype, deterministic=resolve(deterministic),
                   precision=precision)
    check_grid(program, gpu.max_threads_per_block, gpu.max_registers_per_thread)
    result = search_program(program, gpu, strategy=strategy or DEFAULT_STRATEGY, values=values,
                            progress=progress, max_nodes=max_nodes, budget=budget)
    result = _reranked(program, result, refine, measure, check)
    store = _store(cache)
    if store is not None:
        store.put(CacheKey.of(program, result.gpu.name), cache_value(result, "treduda.search()"))
    return result


def tuning_entry(expr: str, sizes: Mapping[str, int], gpu: str | Gpu = "H100", *,
                 dtype: str = "float32", layout: str = "C", measure: bool = False,
                 cache: TuningCache | bool = True, deterministic: bool | None = None,
                 precision: str = HIGHEST) -> dict | None:
    """The tuning cache's entry for ``expr`` at ``sizes`` on ``gpu``, as :func:`compile`
    would use it (re-checked against the parameter space; with ``measure``, only a measured
    one), or None: ``strategy``, ``params``, the predicted ``seconds`` and ``binding``,
    ``measured`` and how it was ``found``."""
    check_types(expr=expr, sizes=sizes, layout=layout, measure=measure)
    store = _store(cache)
    if store is None:
        return None
    program = plan(expr, sizes, layout, dtype, deterministic=resolve(deterministic),
                   precision=precision)
    return _cached(program, store, CacheKey.of(program, find_gpu(gpu).name), measure)


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
             deterministic: bool | None = None, optimize: Any = AUTO,
             casting: str = DEFAULT_CASTING, precision: str = HIGHEST,
             budget: float | None = DEFAULT_BUDGET, **values: Any) -> np.ndarray:
    """Compute ``expr`` on numpy arrays passed by tensor name (or positionally, in order of
    appearance, for ``"ik,kj->ij"``) and scalars by name; returns the output array, which is
    ``out`` when given (as numpy.einsum's ``out=``; it also holds the old values for ``+=``).

    Sizes come from the arrays; the result's dtype is numpy.einsum's, ``np.result_type`` of
    the arrays with scalars and fractional literals taken as Python numbers ("weak": an int32
    array with ``alpha=0.5`` gives float64, a float32 one float32; float16 or bfloat16 arrays
    give float16 or bfloat16, computed in float32), unless ``dtype`` says otherwise; arrays are
    converted to it as numpy's ``casting`` rule allows (a refused conversion, such as float64
    arrays with ``dtype="float32"``, raises DtypeError unless ``casting="same_kind"``).
    ``precision`` as for :func:`compile`. Without ``strategy`` or ``params``
    the kernel is searched for ``gpu``. It is kept for the process, so a repeated call costs
    the run, not its generation (see
    :func:`contract_expression`). An axis of extent 0 launches nothing: the result is what
    numpy.einsum gives (zeros, or an empty array). ``deterministic`` is :func:`compile`'s.

    numpy-style subscripts are numpy's in full: ``...`` and axes of extent 1 broadcast as
    numpy.einsum broadcasts them (:mod:`treduda.frontend.broadcast`). A product of three or
    more tensors runs as a sequence of kernels along a path; ``optimize`` takes what
    numpy.einsum's and opt_einsum's do, and ``"auto"``, the default, where the model chooses
    (see :func:`contract_expression`). A contraction of one or two operands is one kernel,
    whatever ``optimize`` says.
    """
    check_types(expr=expr)
    broadcast = broadcast_of(expr, operands, values)
    if broadcast is not None:  # '...' expanded, broadcast axes of extent 1 dropped
        expr, operands, values = broadcast.expr, (), broadcast.reshape(operands, values)
    contraction = analyse(expr)
    values = _named(contraction, operands, values, CONTRACT_OPTIONS)
    arrays = {k: np.asarray(v) for k, v in values.items() if k not in contraction.scalars}
    computed = compute_dtype({name: array.dtype for name, array in arrays.items()},
                             [v for k, v in values.items() if k in contraction.scalars]
                             + literal_scalars(t.coefficient for t in contraction.terms))
    shapes = {name: array.shape for name, array in arrays.items()}
    planned = contract_expression(expr, dtype=dtype or computed, layout=layout,
                                  backend=backend, strategy=strategy, params=params, gpu=gpu,
                                  deterministic=deterministic, optimize=optimize,
                                  casting=casting, precision=precision, budget=budget,
                                  **shapes)
    return planned(out=out, **values)


@dataclass(frozen=True)
class ContractExpression:
    """A contraction planned for fixed shapes: call it with arrays as :func:`contract` takes
    them, as often as needed; each call only runs the kernel.

    ``dtype`` is the result's; the kernel computes in :func:`~treduda.frontend.dtypes.
    kernel_dtype` of it (int32 for int8 or bool, cast back). Arrays are converted to ``dtype``
    as numpy's ``casting`` rule allows (a call's ``casting=`` overrides the planned one)."""

    contraction: Contraction
    sizes: dict[str, int]
    dtype: str
    backend: str
    # A Plan for a product of three or more tensors split along a path (treduda.programs);
    # None when an axis is empty: there is nothing to launch.
    kernel: Kernel | Plan | None
    broadcast: Broadcast | None = None  # how numpy-style operands are reshaped for the kernel
    casting: str = DEFAULT_CASTING

    def __call__(self, *operands: Any, out: Any = None, casting: str | None = None,
                 **values: Any) -> Any:
        c = self.contraction
        casting = check_casting(casting or self.casting)
        if self.broadcast is not None:
            operands, values = (), self.broadcast.reshape(operands, values)
        values = _named(c, operands, values, CALL_OPTIONS)
        if out is not None:
            if c.output in values:
                raise ArgumentError(f"pass the output {c.output} as {c.output}= or as out=, "
                                    "not both")
            _check_out(out, tuple(self.sizes[i] for i in c.output_indices), self.dtype)
            if c.reads_output or c.op != "=":
                values[c.output] = out  # its old values are used
        values = {name: self._converted(name, value, casting) for name, value in values.items()}
        if self.kernel is not None:
            result = self.kernel.run(backend=self.backend, casting=casting, **values)
        else:
            sizes, arrays, scalars = bind(c, kernel_dtype(self.dtype), self.sizes, values,
                                          empty=True, casting=casting)
            result = reference.evaluate(c, arrays, scalars, sizes)
        result = finish(result, self.dtype)
        if out is None:
            return result
        out[...] = result
        return out

    def _converted(self, name: str, value: Any, casting: str) -> Any:
        """A numpy array converted to :attr:`dtype` as ``casting`` allows (an int16 array
        for int8 wraps first, as numpy's conversion does), then to the kernel's dtype, which
        holds every value of it (uint32's bits as int32's); scalars checked; arrays on a GPU
        are left to the kernel's own check."""
        if name in self.contraction.scalars or isinstance(value, (np.ndarray, list, tuple)):
            check_cast(name, value, self.dtype, casting)
        if isinstance(value, (np.ndarray, list, tuple)):
            converted = np.asarray(value).astype(self.dtype, copy=False)
            return converted.astype(kernel_dtype(self.dtype), copy=False)
        return value

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return (f"ContractExpression({self.contraction.source!r}, {sizes}, {self.dtype}, "
                f"{self.kernel if self.kernel is not None else 'empty: no kernel'})")


def contract_expression(expr: str, *shapes: tuple[int, ...], dtype: str = "float32",
                        layout: str = "C", backend: str = "opencl", strategy: str | None = None,
                        params: Mapping[str, Any] | None = None, gpu: str = "H100",
                        deterministic: bool | None = None, optimize: Any = AUTO,
                        casting: str = DEFAULT_CASTING, precision: str = HIGHEST,
                        budget: float | None = DEFAULT_BUDGET,
                        **named_shapes: tuple[int, ...]) -> ContractExpression:
    """Plan ``expr`` once for arrays of ``shapes`` (positional in order of appearance, or by
    tensor name) and return a callable that contracts such arrays, as opt_einsum's
    ``contract_expression`` does.

    The kernel (searched for ``gpu`` unless ``strategy`` or ``params`` say otherwise) is kept
    for the process, keyed by everything that shapes it, and its OpenCL program is built once.
    ``deterministic`` is :func:`compile`'s, the process-wide default taken now, when planning.
    ``...`` and broadcasting are as :func:`contract` takes them. ``dtype`` is the result's
    (any integer type and bool too: see :class:`ContractExpression`); ``casting`` how the
    callable converts arrays to it.

    A product of three or more tensors is split into smaller contractions along a path
    (:mod:`treduda.tuning.paths`), each a kernel of its own, run by a :class:`Plan`.
    ``optimize`` (checked by :func:`~treduda.frontend.optimize.check_optimize`): ``"auto"``
    (the default) chooses by the model among opt_einsum's FLOP path, a path costed by the
    model and fused groups; ``False`` keeps one fused kernel; ``True`` (greedy, as
    numpy.einsum), ``"greedy"``, ``"optimal"``, ``"dp"``, another of opt_einsum's names,
    ``"cotengra"``, a path (opt_einsum's ``[(0, 1), ...]`` or numpy's ``["einsum_path",
    (0, 1), ...]``) or an opt_einsum ``PathOptimizer`` take that path as it is. ``strategy``
    and ``params`` then apply to every step.
    """
    check_types(expr=expr, layout=layout, strategy=strategy, params=params)
    check_choice("backend", backend, BACKENDS)
    broadcast = broadcast_of(expr, shapes, named_shapes, shape_of=lambda shape: shape)
    if broadcast is not None:
        expr, shapes, named_shapes = broadcast.expr, (), {**named_shapes, **broadcast.planned}
    contraction = analyse(expr)
    optimize = check_optimize(optimize, contraction)
    named = _named(contraction, shapes, named_shapes, PLAN_OPTIONS)
    check_shapes(named)
    computed = kernel_dtype(dtype)  # DtypeError for a dtype no kernel computes
    dtype = np.dtype(dtype).name
    check_casting(casting)
    check_update(contraction.op, dtype)
    check_precision(precision, computed)
    stand_ins = {name: np.broadcast_to(False, shape) for name, shape in named.items()}
    sizes = infer_sizes(contraction, stand_ins, empty=True, old_output=False)
    gpu, deterministic = find_gpu(gpu), resolve(deterministic)
    if 0 in sizes.values():
        kernel = None
    elif many_factors(contraction) and optimize is not False:
        tuned = strategy is None and params is None  # the steps are searched: the cache counts
        kernel = _kept_plan(expr, tuple(sorted(sizes.items())), computed, layout, backend,
                            strategy, None if params is None else tuple(sorted(params.items())),
                            gpu, optimize, deterministic, str(default_path()) if tuned else None,
                            precision)
    else:
        kernel = _kept(expr, sizes, dtype=computed, layout=layout, strategy=strategy,
                       params=params, gpu=gpu, cache=True, deterministic=deterministic,
                       precision=precision, budget=budget)
    return ContractExpression(contraction, sizes, dtype, backend, kernel, broadcast=broadcast,
                              casting=casting)


def _kept(expr: str, sizes: Mapping[str, int] | None, *, dtype: str, layout: str,
          strategy: str | None, params: Mapping[str, Any] | None, gpu: Gpu,
          cache: TuningCache | bool, symbolic: bool = False, measure: bool = False,
          deterministic: bool = False, precision: str = HIGHEST,
          budget: float | None = DEFAULT_BUDGET) -> Kernel:
    """The kernel of these (checked) arguments, kept for the process: the one place that says
    which calls of :func:`compile` and :func:`contract` get the same kernel. Sizes and
    parameters in any order are the same; the tuning cache counts (by its file) only where
    the kernel is searched."""
    tuned = strategy is None and params is None and not symbolic
    path = None
    if tuned and cache is not False:
        path = str(cache.path if isinstance(cache, TuningCache) else default_path())
    return _kept_kernel(expr, None if sizes is None else tuple(sorted(sizes.items())), dtype,
                        layout, strategy, None if params is None else tuple(sorted(params.items())),
                        gpu, path, symbolic, measure, deterministic, precision, budget)


@functools.lru_cache(maxsize=KERNELS_KEPT)
def _kept_kernel(expr: str, sizes: tuple | None, dtype: str, layout: str, strategy: str | None,
                 params: tuple | None, gpu: Gpu, cache: str | None, symbolic: bool,
                 measure: bool, deterministic: bool, precision: str,
                 budget: float | None = DEFAULT_BUDGET) -> Kernel:
    """:func:`_compiled`'s kernel, kept: called only by :func:`_kept`, whose arguments it is."""
    return _compiled(expr, None if sizes is None else dict(sizes), dtype, layout, strategy,
                     None if params is None else dict(params), symbolic, gpu,
                     TuningCache(cache) if cache else False, measure, deterministic, precision,
                     budget)


def program(text: str, sizes: Mapping[str, int] | None = None, *, dtype: str = "float32",
            layout: str = "C", backend: str = "opencl", strategy: str | None = None,
            params: Mapping[str, Any] | None = None, gpu: str = "H100",
            deterministic: bool | None = None, optimize: Any = AUTO,
            precision: str = HIGHEST, **shapes: tuple[int, ...]) -> Plan:
    """Statements run in order (one per line or per ``;``), each compiled and tuned on its
    own; calling the :class:`Plan` with its inputs by name returns a dict of its results.

    It is planned for ``sizes`` and the inputs' ``shapes`` (by tensor name) when given, else
    at its first call. Products of three or more tensors are split along a path
    (``optimize``, as in :func:`contract_expression`); ``strategy``, ``params``,
    ``deterministic`` and ``precision`` apply to every kernel."""
    check_types(expr=text, sizes=sizes, layout=layout, strategy=strategy, params=params)
    check_choice("backend", backend, BACKENDS)
    check_precision(precision, kernel_dtype(dtype))
    gpu = find_gpu(gpu)
    return Plan(text, _step_compiler(strategy, params, gpu, resolve(deterministic), precision),
                dtype=dtype, layout=layout, backend=backend, gpu=gpu.name, optimize=optimize,
                sizes=sizes, shapes=shapes or None)


def _step_compiler(strategy: str | None, params: Mapping[str, Any] | None, gpu: Gpu,
                   deterministic: bool, precision: str = HIGHEST) -> CompileStep:
    """How a plan compiles each step: as contract() does, the kernels kept for the process
    (:func:`_kept`)."""

    def compile_step(expr: str, sizes: Mapping[str, int], dtype: str, layout: str) -> Kernel:
        return _kept(expr, sizes, dtype=dtype, layout=layout, strategy=strategy, params=params,
                     gpu=gpu, cache=True, deterministic=deterministic, precision=precision)

    return compile_step


@functools.lru_cache(maxsize=KERNELS_KEPT)
def _kept_plan(expr: str, sizes: tuple, dtype: str, layout: str, backend: str,
               strategy: str | None, params: tuple | None, gpu: Gpu, optimize: Any,
               deterministic: bool, cache: str | None, precision: str) -> Plan:
    """The plan of a product of many tensors, kept as :func:`_kept_kernel` keeps kernels
    (``optimize`` as :func:`~treduda.frontend.optimize.check_optimize` returns it, hashable;
    ``cache``, the tuning cache's file where the steps are searched, is part of the key)."""
    compile_step = _step_compiler(strategy, None if params is None else dict(params), gpu,
                                  deterministic, precision)
    return Plan(expr, compile_step, dtype=dtype, layout=layout, backend=backend, gpu=gpu.name,
                optimize=optimize, sizes=dict(sizes))


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
    check_scalars(contraction.scalars, values)
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


def _tuned(program: Program, gpu: str | Gpu, cache: TuningCache | bool, measure: bool,
           generate: _Generator, budget: float | None = DEFAULT_BUDGET
           ) -> tuple[str, dict[str, Any]]:
    """The searched strategy and parameters, from the tuning cache when it has them.

    A cached entry is re-checked against this program's parameter space before it is used;
    one that no longer fits is reported and searched for again. An entry holds the model's
    prediction (``seconds``, ``binding``) and, apart from it, a measurement (``measured``:
    seconds and the device) when the search timed its candidates; ``measure=True`` searches
    again where the entry has none."""
    store = _store(cache)
    key = CacheKey.of(program, find_gpu(gpu).name)
    hit = _cached(program, store, key, measure) if store is not None else None
    if hit is not None:
        return hit["strategy"], dict(hit["params"])
    result = tuning_search(program, gpu, measure, generate, budget=budget)
    if store is not None:
        store.put(key, cache_value(result, "compile()"))
    return result.best.strategy, dict(result.best.params)


def tuning_search(program: Program, gpu: str | Gpu, measure: bool = False,
                  generate: _Generator | None = None,
                  max_nodes: int | None = None,
                  budget: float | None = DEFAULT_BUDGET) -> SearchResult:
    """The search compile() runs for ``program`` when neither strategy nor params are given
    (``treduda tune`` runs the same one on a cluster): within ``budget`` seconds (None: the
    complete search) and ``max_nodes`` nodes, :data:`SMALL_PROBLEM_BUDGET` for a small
    problem; ptxas checks the winner of a problem that is not small where its registers are
    near the cap (:func:`~treduda.tuning.search.worth_checking`)."""
    small = math.prod(program.sizes.values()) < SMALL_PROBLEM
    nodes = max_nodes or (SMALL_PROBLEM_BUDGET if small else None)
    result = search_program(program, gpu, max_nodes=nodes, budget=budget)
    return _reranked(program, result, 0, measure,
                     check=not small and worth_checking(program, result), generate=generate)


def _store(cache: TuningCache | bool) -> TuningCache | None:
    """The tuning cache ``cache`` names: itself, the default file (True), or none (False)."""
    return cache if isinstance(cache, TuningCache) else (TuningCache() if cache else None)


def _cached(program: Program, store: TuningCache, key: CacheKey, measure: bool) -> dict | None:
    """``store``'s entry under ``key`` if it still fits ``program``'s parameter space (one that
    no longer fits is reported and ignored) and, with ``measure``, holds a measured time."""
    hit = store.get(key)
    if hit is None or (measure and not hit.get("measured")):
        return None
    try:
        chosen = strategies.get(hit["strategy"])
        chosen.space(program).check({**chosen.defaults(program), **hit["params"]})
        return hit
    except (StrategyError, KeyError, TypeError) as error:
        warnings.warn(f"ignoring the cached tuning for {key}: {error}", CacheWarning,
                      stacklevel=4)
        return None


def cache_value(result: SearchResult, by: str) -> dict[str, Any]:
    """What the tuning cache keeps of a search: its winner's strategy and parameters, the
    model's prediction (``seconds``, ``binding``), apart from it a measurement (``measured``:
    seconds and the device) where the search timed its candidates, and how it was ``found``
    (``by`` whom: compile(), treduda.search(), treduda tune)."""
    best, stats = result.best, result.stats
    measured = None if best.measured is None else {"seconds": best.measured,
                                                   "device": best.measured_on}
    found = (f"by {by}, a {'complete search' if stats.complete else 'search within a budget'} "
             f"of {stats.nodes_visited} nodes"
             + (", re-ranked by walking the kernels" if best.walked is not None else "")
             + (", re-estimated with ptxas's registers" if best.compiled is not None else ""))
    return {"strategy": best.strategy, "params": dict(best.params),
            "seconds": best.prediction.seconds, "binding": best.prediction.binding,
            "measured": measured, "found": found}


def _kernel_name(program: Program, strategy: str, params: Mapping[str, Any]) -> str:
    """A C name unique to everything that shapes the kernel text (so sources can be batched)."""
    key = _shaping(program, strategy, params)
    return f"td_{program.original.output}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def _shaping(program: Program, strategy: str, params: Mapping[str, Any]) -> str:
    """Everything that shapes a kernel, as text (``deterministic`` and ``precision`` only where
    not the default, so other kernels keep their names)."""
    return repr((repr(program.original.tree), sorted((program.expression_sizes or {}).items()),
                 program.dtype, program.layout, strategy, sorted(params.items()),
                 *(("deterministic",) if program.deterministic else ()),
                 *((program.precision,) if program.precision != HIGHEST else ())))
