"""The public entry points: plan a kernel (:func:`compile`) or plan and run (:func:`contract`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from .determinism import resolve
from .errors import ArgumentError
from .frontend.arguments import check_shapes, check_types
from .frontend.broadcast import Broadcast
from .frontend.broadcast import resolve as broadcast_of
from .frontend.contraction import (
    Contraction,
    Shaped,
    analyse,
    infer_sizes,
    resolve_sizes,
)
from .frontend.dtypes import (
    DEFAULT_CASTING,
    check_casting,
    check_dtype,
    check_update,
    compute_dtype,
    finish,
    kernel_dtype,
    literal_scalars,
)
from .frontend.identity import Identity
from .generation import Generator
from .kernel import Kernel
from .model.gpus import Gpu
from .model.gpus import gpu as find_gpu
from .once import once_per_key
from .operands import call_values, check_names, named_operands, out_array
from .options import DEFAULT_BUDGET, Options, check_tensor_names, merged_mapping, split_keywords
from .polyhedral.ast_build import check_grid
from .polyhedral.lower import Program, plan
from .polyhedral.strategy import DEFAULT_STRATEGY
from .run import reference
from .run.device_arrays import to_numpy
from .run.launch import bind
from .tuning import policy
from .tuning.cache import CacheKey, TuningCache, default_path
from .tuning.policy import cache_value as cache_value  # public: what the tuning cache keeps
from .tuning.search import Progress, search_program
from .tuning.search_result import SearchResult

if TYPE_CHECKING:
    from .programs import CompileStep, Plan
    from .tuning.incremental import IncrementalKernel

# Loaded where they are used: the path planner (opt_einsum), programs and incremental tuning,
# which compile()'s first call in a process does not need (0.02 s of it).

KERNELS_KEPT = 256  # kernels (and plans) compile(), contract() and contract_expression() keep
# The options (treduda.Options fields) each entry point takes as keywords.
COMPILE_OPTIONS = ("dtype", "layout", "strategy", "params", "gpu", "measure", "deterministic",
                   "precision", "budget")
SEARCH_OPTIONS = ("dtype", "layout", "strategy", "gpu", "measure", "deterministic", "precision",
                  "budget")
ENTRY_OPTIONS = ("dtype", "layout", "gpu", "measure", "deterministic", "precision")
CONTRACT_OPTIONS = ("dtype", "layout", "backend", "strategy", "params", "gpu", "deterministic",
                    "optimize", "casting", "precision", "tune", "budget")
PROGRAM_OPTIONS = ("dtype", "layout", "backend", "strategy", "params", "gpu", "deterministic",
                   "optimize", "precision", "budget")
# Every keyword of an entry point that takes tensors: a tensor of one of these names is passed
# by position or in the entry point's mapping.
CONTRACT_KEYWORDS = ("out", "arrays", "options", *CONTRACT_OPTIONS)
EXPRESSION_KEYWORDS = ("named_shapes", "options", *CONTRACT_OPTIONS)
CALL_KEYWORDS = ("out", "casting", "arrays")  # a ContractExpression's call


def compile(expr: str, /, sizes: Mapping[str, int] | None = None, *,
            options: Options | None = None, symbolic: bool = False,
            cache: TuningCache | bool = True, **keywords: Any) -> Kernel:
    """Generate a kernel for ``expr`` (Einstein notation or ``"ik,kj->ij"``).

    ``sizes`` maps each index to its extent. With ``symbolic=True`` the extents become kernel
    arguments, so one kernel serves every size (``sizes`` may then be omitted). The
    :class:`~treduda.options.Options` (``options=``, with the keywords of
    :data:`COMPILE_OPTIONS` on top) say how: ``dtype`` (float32 by default), ``layout``
    (``"C"`` row-major or ``"F"`` column-major), ``strategy`` and ``params`` (how the work is
    mapped onto the GPU: ``treduda.strategies.available()`` lists them). Without either,
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
    ``budget`` is the search's budget in seconds, counted as work at a fixed rate
    (:mod:`treduda.tuning.budgets`: the same pick on any machine and at any load; None: the
    complete search, which can take minutes; :func:`search` says how far a budgeted winner can
    be from the optimum).
    The kernel is kept for the process (:func:`_kept`): the same call again returns it at once,
    and so does :func:`contract` on arrays of these sizes. It is also kept in the tuning
    cache's kernel store (unless ``cache=False``): in a new process the same call loads it
    from there and generates nothing.
    """
    options = Options.of(options, keywords, COMPILE_OPTIONS, "compile()")
    check_types(expr=expr, sizes=sizes, symbolic=symbolic)
    if not isinstance(cache, (bool, TuningCache)):
        raise ArgumentError(f"cache must be True, False or a treduda.tuning.cache.TuningCache, "
                            f"got {type(cache).__name__} {cache!r}")
    planned = _fixed(options, check_dtype(options.dtype or "float32"))
    return _kept(_Request.make(analyse(expr), sizes, planned, cache=cache, symbolic=symbolic))


def _fixed(options: Options, dtype: str) -> Options:
    """``options`` as the kernels are planned with them: the kernel's ``dtype``, the GPU
    found (an unknown name refused), the process's ``deterministic=`` default taken now."""
    return options.replace(dtype=dtype, gpu=find_gpu(options.gpu),
                           deterministic=resolve(options.deterministic))


def search(expr: str, /, sizes: Mapping[str, int], gpu: str | Gpu | None = None, *,
           options: Options | None = None, values: Mapping[str, tuple] | None = None,
           progress: Progress | None = None, max_nodes: int | None = None,
           refine: int = 0, check: bool = False,
           cache: TuningCache | bool = False, **keywords: Any) -> SearchResult:
    """Find the fastest predicted kernel for ``expr`` at ``sizes`` on ``gpu`` (an option
    too, as are the others of :data:`SEARCH_OPTIONS`, given in ``options=`` or as keywords).

    With ``refine=k`` the k best candidates are generated and re-ranked by the estimate that
    walks their kernel IR (:func:`treduda.tuning.walk.estimate_kernel`), which sees what the
    parameters alone do not (guards, index arithmetic, ptxas's registers); it is never below
    the bound, so the re-ranking only ever picks among candidates the search could not cut.
    With ``measure=True`` the best candidates (up to :data:`MEASURED`) are also generated,
    each checked against numpy.einsum and then timed, and the fastest measured one wins: on
    the GPU when one is present (CUDA events), else on PoCL, which ranks them by a CPU's time.
    The winner's ``measured_on`` says which. With ``check=True`` and nvcc present, ptxas
    reports on the winner's registers and spills (:func:`~treduda.tuning.policy.checked`).
    Compile the winner with ``compile(expr, sizes, strategy=result.best.strategy,
    params=result.best.params)``.
    With ``cache`` (True: the default file, or a :class:`TuningCache`) the winner is also kept
    in the tuning cache, where :func:`compile` and :func:`tuning_entry` find it.
    ``deterministic`` is :func:`compile`'s: the model prices a split's second kernel then;
    ``precision`` as for :func:`compile`; ``strategy`` the one searched (the default one when
    None). ``budget`` seconds (as work, as for :func:`compile`) bound the search (None: the
    complete search); ``result.stats.lower`` and ``summary()`` say how far the winner can be
    from the best estimate of the whole space.
    """
    options = Options.of(options, _with_gpu(keywords, gpu), SEARCH_OPTIONS, "search()")
    check_types(expr=expr, sizes=sizes, values=values, progress=progress, max_nodes=max_nodes,
                refine=refine, check=check)
    options = _fixed(options, options.dtype or "float32")
    program = _planned(expr, sizes, options)
    gpu = options.gpu
    check_grid(program, gpu.max_threads_per_block, gpu.max_registers_per_thread)
    result = search_program(program, gpu, strategy=options.strategy or DEFAULT_STRATEGY,
                            values=values, progress=progress, max_nodes=max_nodes,
                            budget=options.budget)
    store = policy.store_of(cache)
    generate = Generator.of(program, gpu, store)
    result = policy.reranked(result, refine, options.measure, generate, check)
    policy.remember(store, program, result, "treduda.search()")
    generate.keep_made()
    return result


def tuning_entry(expr: str, /, sizes: Mapping[str, int], gpu: str | Gpu | None = None, *,
                 options: Options | None = None, cache: TuningCache | bool = True,
                 **keywords: Any) -> dict | None:
    """The tuning cache's entry for ``expr`` at ``sizes`` on ``gpu``, as :func:`compile`
    would use it with these options (:data:`ENTRY_OPTIONS`; re-checked against the parameter
    space; with ``measure``, only a measured one), or None: ``strategy``, ``params``, the
    predicted ``seconds`` and ``binding``, ``measured`` and how it was ``found``."""
    options = Options.of(options, _with_gpu(keywords, gpu), ENTRY_OPTIONS, "tuning_entry()")
    check_types(expr=expr, sizes=sizes)
    store = policy.store_of(cache)
    if store is None:
        return None
    options = _fixed(options, options.dtype or "float32")
    program = _planned(expr, sizes, options)
    return policy.cached(program, store, CacheKey.of(program, options.gpu.name), options.measure)


def _with_gpu(keywords: Mapping[str, Any], gpu: str | Gpu | None) -> dict[str, Any]:
    """An entry point's option keywords with its positional ``gpu`` where one was given."""
    return dict(keywords) if gpu is None else {**keywords, "gpu": gpu}


def _planned(expr: str, sizes: Mapping[str, int], options: Options) -> Program:
    """``expr`` planned (with isl) at ``sizes`` as ``options`` (:func:`_fixed`) shape its
    kernels."""
    return plan(expr, sizes, options.layout, options.dtype,
                deterministic=options.deterministic, precision=options.precision)


def contract(expr: str, /, *operands: Any, out: Any = None,
             arrays: Mapping[str, Any] | None = None, options: Options | None = None,
             **keywords: Any) -> np.ndarray:
    """Compute ``expr`` on numpy arrays passed positionally (in order of appearance, as
    numpy.einsum takes them), in one mapping (``arrays={"A": a, ...}``, scalars too) or by
    tensor name (``A=a``: only for names no option has); returns the output array, which is
    ``out`` when given (as numpy.einsum's ``out=``; it also holds the old values for ``+=``).
    Operands are taken as ``numpy.asarray`` takes them: lists and numbers too.

    The options (:class:`~treduda.options.Options`) come in ``options=``, with the keywords
    of :data:`CONTRACT_OPTIONS` on top (a keyword overrides the field it names). A tensor
    named like an option or like ``out``, ``arrays`` or ``options`` goes by position or in
    ``arrays=``: passed by keyword it would be the option, so the call is refused first.

    Sizes come from the arrays; the result's dtype is numpy.einsum's, ``np.result_type`` of
    the arrays (and of ``out``, as numpy computes in it: int8 arrays into an int16 ``out``
    are summed in int16) with scalars and fractional literals taken as Python numbers
    ("weak": an int32 array with ``alpha=0.5`` gives float64, a float32 one float32; float16
    or bfloat16 arrays give float16 or bfloat16, computed in float32), unless ``dtype`` says
    otherwise; arrays are converted to it, and it to ``out``'s dtype, as numpy's ``casting``
    rule allows (a refused conversion, such as float64 arrays with ``dtype="float32"``, raises
    DtypeError unless ``casting="same_kind"``). Every argument is checked before anything is
    planned, searched or compiled.
    ``precision`` as for :func:`compile`. Without ``strategy`` or ``params``
    the kernel is searched for ``gpu``. It is kept for the process, so a repeated call costs
    the run, not its generation (see :func:`contract_expression`, which also says what
    ``tune`` does). An axis of extent 0 launches nothing: the result is what numpy.einsum
    gives (zeros, or an empty array). ``deterministic`` is :func:`compile`'s.

    numpy-style subscripts are numpy's in full: ``...`` and axes of extent 1 broadcast as
    numpy.einsum broadcasts them (:mod:`treduda.frontend.broadcast`). A product of three or
    more tensors runs as a sequence of kernels along a path; ``optimize`` takes what
    numpy.einsum's and opt_einsum's do, and ``"auto"``, the default, where the model chooses
    (see :func:`contract_expression`). A contraction of one or two operands is one kernel,
    whatever ``optimize`` says.
    """
    check_types(expr=expr)
    chosen, named = split_keywords(keywords, CONTRACT_OPTIONS)
    values = merged_mapping(arrays, named, "arrays")
    broadcast = broadcast_of(expr, operands, values)
    if broadcast is not None:  # '...' expanded, broadcast axes of extent 1 dropped
        expr, operands, values = broadcast.expr, (), broadcast.reshape(operands, values)
    contraction = analyse(expr)
    check_names(contraction, operands, values, CONTRACT_KEYWORDS, "contract()", "arrays")
    options = Options.of(options, chosen, CONTRACT_OPTIONS, "contract()")
    values = {k: v if k in contraction.scalars else to_numpy(v)  # lists, numbers: as numpy's
              for k, v in named_operands(contraction, operands, values,
                                         ("out", *CONTRACT_OPTIONS)).items()}
    arrays = {k: v for k, v in values.items() if k not in contraction.scalars}
    dtypes = {name: array.dtype for name, array in arrays.items()}
    if out is not None:  # numpy computes in the result type of the operands and out
        dtypes["out"] = out_array(out).dtype
    computed = compute_dtype(dtypes, [v for k, v in values.items() if k in contraction.scalars]
                             + literal_scalars(t.coefficient for t in contraction.terms))
    dtype = options.dtype or computed
    sizes = infer_sizes(contraction, arrays, empty=True, old_output=out is None)
    call_values(contraction, values, out, dtype, options.casting, sizes)  # refused now
    planned = contract_expression(expr, named_shapes={name: array.shape for name, array
                                                      in arrays.items()},
                                  options=options.replace(dtype=dtype))
    return planned(out=out, arrays=values)


@dataclass(frozen=True)
class ContractExpression:
    """A contraction planned for fixed shapes: call it with arrays as :func:`contract` takes
    them, as often as needed; each call only runs the kernel.

    ``dtype`` is the result's; the kernel computes in :func:`~treduda.frontend.dtypes.
    kernel_dtype` of it (int32 for int8 or bool, cast back). Arrays are converted to ``dtype``
    as numpy's ``casting`` rule allows (a call's ``casting=`` overrides the planned one), and
    the result to ``out``'s dtype.

    Safe to call from many threads at once: each call has its own arrays, on the device too;
    only a self-tuning kernel's trials are shared, under its lock
    (:class:`~treduda.tuning.incremental.IncrementalKernel`)."""

    contraction: Contraction
    sizes: dict[str, int]
    dtype: str
    backend: str
    # A Plan for a product of three or more tensors split along a path (treduda.programs);
    # an IncrementalKernel where the first calls time the best candidates (tune=);
    # None when an axis is empty: there is nothing to launch.
    kernel: Kernel | IncrementalKernel | Plan | None
    broadcast: Broadcast | None = None  # how numpy-style operands are reshaped for the kernel
    casting: str = DEFAULT_CASTING

    def __call__(self, *operands: Any, out: Any = None, casting: str | None = None,
                 arrays: Mapping[str, Any] | None = None, **values: Any) -> Any:
        """The contraction of ``operands`` (positional), ``arrays`` (a mapping) and ``values``
        (by name: names other than ``out``, ``casting`` and ``arrays``)."""
        c = self.contraction
        casting = check_casting(casting or self.casting)
        values = merged_mapping(arrays, values, "arrays")
        if self.broadcast is not None:
            operands, values = (), self.broadcast.reshape(operands, values)
        check_names(c, operands, values, CALL_KEYWORDS, "a ContractExpression's call", "arrays")
        values = call_values(c, named_operands(c, operands, values, CALL_KEYWORDS), out,
                             self.dtype, casting, self.sizes)
        values = {name: self._converted(name, value) for name, value in values.items()}
        if self.kernel is not None:
            result = self.kernel.run(backend=self.backend, casting=casting, arrays=values)
        else:
            sizes, arrays, scalars = bind(c, kernel_dtype(self.dtype), self.sizes, values,
                                          empty=True, casting=casting)
            result = reference.evaluate(c, arrays, scalars, sizes)
        result = finish(result, self.dtype)
        if out is None:
            return result
        out[...] = result
        return out

    def _converted(self, name: str, value: Any) -> Any:
        """A checked numpy array (:func:`~treduda.operands.call_values`) converted to
        :attr:`dtype` (an int16 array for int8 wraps first, as numpy's conversion does), then
        to the kernel's dtype, which holds every value of it (uint32's bits as int32's);
        scalars and arrays on a GPU as they are."""
        if name not in self.contraction.scalars and isinstance(value, np.ndarray):
            return value.astype(self.dtype, copy=False).astype(kernel_dtype(self.dtype),
                                                               copy=False)
        return value

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        return (f"ContractExpression({self.contraction.source!r}, {sizes}, {self.dtype}, "
                f"{self.kernel if self.kernel is not None else 'empty: no kernel'})")


def contract_expression(expr: str, /, *shapes: tuple[int, ...],
                        named_shapes: Mapping[str, tuple[int, ...]] | None = None,
                        options: Options | None = None, **keywords: Any) -> ContractExpression:
    """Plan ``expr`` once for arrays of ``shapes`` (positional in order of appearance, in the
    mapping ``named_shapes``, or by tensor name where no option has that name) and return a
    callable that contracts such arrays, as opt_einsum's ``contract_expression`` does. The
    options are :func:`contract`'s (``options=`` and the keywords of :data:`CONTRACT_OPTIONS`).

    The kernel (searched for ``gpu`` unless ``strategy`` or ``params`` say otherwise) is kept
    for the process, keyed by everything that shapes it, and its OpenCL program is built once.
    ``deterministic`` is :func:`compile`'s, the process-wide default taken now, when planning.
    ``...`` and broadcasting are as :func:`contract` takes them. ``dtype`` is the result's
    (float32 by default; any integer type and bool too: see :class:`ContractExpression`);
    ``casting`` how the callable converts arrays to it.

    A product of three or more tensors is split into smaller contractions along a path
    (:mod:`treduda.tuning.paths`), each a kernel of its own, run by a :class:`Plan`, the path
    costed with these options (a tf32 product's steps at tf32).
    ``optimize`` (checked by :func:`~treduda.frontend.optimize.check_optimize`): ``"auto"``
    (the default) chooses by the model among opt_einsum's FLOP path, a path costed by the
    model and fused groups; ``False`` keeps one fused kernel; ``True`` (greedy, as
    numpy.einsum), ``"greedy"``, ``"optimal"``, ``"dp"``, another of opt_einsum's names,
    ``"cotengra"``, a path (opt_einsum's ``[(0, 1), ...]`` or numpy's ``["einsum_path",
    (0, 1), ...]``) or an opt_einsum ``PathOptimizer`` take that path as it is. ``strategy``
    and ``params`` then apply to every step.

    ``tune="incremental"`` (the default on ``backend="cuda"``; ``None`` picks it there and
    ``"model"`` elsewhere) has the first calls each run another of the search's best distinct
    candidates, timed by the device's events around the real launch, and every later call the
    fastest measured; the times go into the tuning cache, so a new process starts from the
    measured winner (:mod:`treduda.tuning.incremental`). ``"model"`` runs the model's pick
    only. It applies to a contraction searched as one kernel (no ``strategy`` or ``params``);
    the steps of a path run their model's picks.
    """
    check_types(expr=expr)
    chosen, by_keyword = split_keywords(keywords, CONTRACT_OPTIONS)
    named_shapes = merged_mapping(named_shapes, by_keyword, "named_shapes")
    broadcast = broadcast_of(expr, shapes, named_shapes, shape_of=lambda shape: shape)
    if broadcast is not None:
        expr, shapes, named_shapes = broadcast.expr, (), {**named_shapes, **broadcast.planned}
    contraction = analyse(expr)
    check_names(contraction, shapes, named_shapes, EXPRESSION_KEYWORDS,
                "contract_expression()", "named_shapes", shapes=True)
    from .frontend.optimize import check_optimize
    from .tuning.incremental import INCREMENTAL, resolve_tune
    from .tuning.paths import many_factors

    options = Options.of(options, chosen, CONTRACT_OPTIONS, "contract_expression()")
    incremental = resolve_tune(options.tune, options.backend) == INCREMENTAL
    if options.tune == INCREMENTAL and (options.strategy is not None
                                        or options.params is not None):
        raise ArgumentError("tune='incremental' times the search's candidates; leave "
                            "strategy and params out, or pass tune='model'")
    check_optimize(options.optimize, contraction)
    named = named_operands(contraction, shapes, named_shapes, CONTRACT_OPTIONS)
    check_shapes(named)
    dtype = options.dtype or "float32"
    computed = kernel_dtype(dtype)
    check_update(contraction.op, dtype)
    sizes = infer_sizes(contraction, {name: Shaped(tuple(shape)) for name, shape in
                                      named.items()}, empty=True, old_output=False)
    planned = _fixed(options, computed)
    if 0 in sizes.values():
        kernel = None
    else:
        request = _Request.make(contraction, sizes, planned, cache=True)
        if many_factors(contraction) and options.optimize is not False:
            kernel = _kept_plan(request, planned)
        elif incremental and request.tuned:
            kernel = _kept_incremental(request, options.backend)
        else:
            kernel = _kept(request)
    return ContractExpression(contraction, sizes, dtype, options.backend, kernel,
                              broadcast=broadcast, casting=options.casting)


@dataclass(frozen=True)
class _Request:
    """A call of compile() as the process keeps its kernel, and contract()'s plans and
    self-tuning kernels too (with their backend and path options beside it): the kernel's
    :class:`Identity` as asked (the problem on the GPU it is tuned for, or with the strategy
    and parameters asked for), the GPU whose limits it is checked against, and the tuning
    cache (by its file) where it is searched and stored. The contraction as spelt and the
    sizes in any order are the same request."""

    identity: Identity
    gpu: Gpu
    cache: str | None
    measure: bool
    budget: float | None  # the search's seconds, where it is searched (None: complete)
    contraction: Contraction = field(compare=False)
    sizes: dict[str, int] | None = field(compare=False)  # None: symbolic

    @classmethod
    def make(cls, contraction: Contraction, sizes: Mapping[str, int] | None, options: Options,
             *, cache: TuningCache | bool | str | None, symbolic: bool = False) -> _Request:
        """The request of checked arguments and ``options`` as :func:`_fixed` makes them:
        searched on their GPU (within their budget, in the tuning cache ``cache``) unless a
        ``strategy``, ``params`` or ``symbolic`` say how the kernel is made; ``cache`` False
        or None for none, True for the default file."""
        checked = None if sizes is None else resolve_sizes(contraction, sizes)
        problem = Identity.make(contraction, None if symbolic else checked, options.dtype,
                                options.layout, precision=options.precision,
                                deterministic=options.deterministic)
        tuned = options.strategy is None and options.params is None and not symbolic
        identity = (problem.on(options.gpu.name) if tuned else
                    problem.generated(options.strategy or DEFAULT_STRATEGY,
                                      options.params_mapping or {}))
        path = None if cache is None or cache is False else str(
            cache.path if isinstance(cache, TuningCache) else
            default_path() if cache is True else cache)
        return cls(identity, options.gpu, path, options.measure and tuned,
                   options.budget if tuned else None, contraction,
                   None if symbolic else checked)

    @property
    def tuned(self) -> bool:
        """Whether the kernel is searched (no strategy or parameters were asked for)."""
        return self.identity.gpu is not None


def _kept(request: _Request) -> Kernel:
    """The kernel of ``request``, kept for the process (made once however many threads ask
    for it at the same time: :func:`~treduda.once.once_per_key`, as are the plans and
    self-tuning kernels kept): the one place that says which calls
    of :func:`compile` and :func:`contract` get the same kernel (:class:`_Request`), or the
    one ptxas's check chose since (:data:`_corrected`); one kept for another spelling of the
    same tree is given the request's spelling."""
    kernel = _kept_kernel(request)
    kernel = _corrected.get(request, kernel)
    if kernel.contraction.source != request.contraction.source:
        kernel = replace(kernel, contraction=request.contraction)
    return kernel


# The kernels ptxas's background check chose instead of those compile() returned first
# (treduda.tuning.policy.check_later), by request: later calls get these.
_corrected: dict[_Request, Kernel] = {}


def _forget() -> None:
    """Forget the kernels compile() kept, as a new process would start (tests use it); the
    background checks finish first."""
    policy.finish_background()
    _kept_kernel.cache_clear()
    _corrected.clear()


@once_per_key(KERNELS_KEPT)
def _kept_kernel(request: _Request) -> Kernel:
    """:func:`compile`'s work, once its arguments are checked, kept: ask the tuning policy
    for a strategy and parameters where none are given, then make the kernel (from the kernel
    store when it holds it)."""
    identity = request.identity
    store = TuningCache(request.cache) if request.cache else None
    generate = Generator(request.contraction, identity.problem, request.sizes, request.gpu,
                          store)
    if request.tuned:
        def corrected(strategy: str, params: dict[str, Any]) -> None:
            _corrected[request] = generate.keep(generate(strategy, params), strategy, params)

        strategy, params = policy.tuned(identity.problem, request.gpu, store, request.measure,
                                        generate, request.budget, corrected)
    else:
        strategy, params = identity.strategy, dict(identity.params)
    return generate.keep(generate(strategy, params), strategy, params)


@once_per_key(KERNELS_KEPT)
def _kept_incremental(request: _Request, backend: str) -> IncrementalKernel:
    """The kernel of the searched ``request`` that tunes itself on its first calls on
    ``backend`` (:mod:`treduda.tuning.incremental`), kept for the process as
    :func:`_kept_kernel` keeps kernels, so that each call of :func:`contract` goes on where
    the last one stopped; its trials come from the tuning cache or from :func:`tuning_search`
    (within the request's budget), and their kernels from the kernel store where it holds
    them (each is kept there once generated)."""
    from .tuning.incremental import IncrementalKernel

    problem, gpu = request.identity.problem, request.gpu
    store = TuningCache(request.cache)
    generate = Generator(request.contraction, problem, request.sizes, gpu, store)

    def searched() -> tuple[SearchResult, dict[str, Any]]:
        result = tuning_search(generate.program, gpu, generate=generate, budget=request.budget,
                               rivals=True)
        return result, cache_value(result, "contract(tune='incremental')")

    def kept(strategy: str, params: Mapping[str, Any]) -> Kernel:
        return generate.keep(generate(strategy, params), strategy, params)

    return IncrementalKernel.start(generate, CacheKey.of_identity(request.identity), store,
                                   backend, searched, kept)


def program(text: str, /, sizes: Mapping[str, int] | None = None, *,
            shapes: Mapping[str, tuple[int, ...]] | None = None,
            options: Options | None = None, **keywords: Any) -> Plan:
    """Statements run in order (one per line or per ``;``), each compiled and tuned on its
    own; calling the :class:`Plan` with its inputs by name (or in ``arrays=``) returns a dict
    of its results.

    It is planned for ``sizes`` and the inputs' ``shapes`` (a mapping by tensor name; or
    keywords named for tensors where no option has the name) when given, else at its first
    call. The options are ``options=`` with the keywords of :data:`PROGRAM_OPTIONS` on top.
    Products of three or more tensors are split along a path (``optimize``, as in
    :func:`contract_expression`, costed with these options); ``strategy``, ``params``,
    ``deterministic``, ``precision`` and ``budget`` apply to every kernel."""
    from .programs import Plan, statements

    check_types(expr=text, sizes=sizes)
    chosen, by_keyword = split_keywords(keywords, PROGRAM_OPTIONS)
    shapes = merged_mapping(shapes, by_keyword, "shapes")
    read = {name for c in statements(text) for name in (*c.inputs, *c.scalars)}
    check_tensor_names(read & set(chosen), shapes, PROGRAM_OPTIONS, "program()", "shapes",
                       positional=False)
    options = Options.of(options, chosen, PROGRAM_OPTIONS, "program()")
    planned = _fixed(options, options.dtype or "float32")
    return Plan(text, _step_compiler(planned), options=planned, sizes=sizes,
                shapes=shapes or None)


def _step_compiler(options: Options) -> CompileStep:
    """How a plan compiles each step: as contract() does, the kernels kept for the process
    (:func:`_kept`), with the plan's ``options`` (:func:`_fixed`)."""

    def compile_step(expr: str, sizes: Mapping[str, int]) -> Kernel:
        return _kept(_Request.make(analyse(expr), sizes, options, cache=True))

    return compile_step


@once_per_key(KERNELS_KEPT)
def _kept_plan(request: _Request, options: Options) -> Plan:
    """The plan of a product of many tensors, kept as :func:`_kept_kernel` keeps kernels,
    with ``options`` as :func:`_fixed` makes them (hashable; their strategy and parameters,
    where asked for, apply to every step, and their tuning cache is where the steps are
    searched otherwise)."""
    from .programs import Plan

    return Plan(request.contraction.source, _step_compiler(options), options=options,
                sizes=request.sizes)


def tuning_search(program: Program, gpu: str | Gpu, measure: bool = False,
                  generate: Generator | None = None,
                  max_nodes: int | None = None,
                  budget: float | None = DEFAULT_BUDGET, rivals: bool = False) -> SearchResult:
    """The search compile() runs for ``program`` when neither strategy nor params are given
    (``treduda tune`` runs the same one on a cluster): :func:`treduda.tuning.policy.
    tuning_search` within ``budget`` seconds (None: the complete search), its candidates'
    kernels made here; ``rivals`` searches a small problem too."""
    gpu = find_gpu(gpu)
    return policy.tuning_search(program, gpu, measure, generate or Generator.of(program, gpu),
                                max_nodes, budget, rivals=rivals)
