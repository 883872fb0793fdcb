"""Contraction paths: a product of three or more tensors as a sequence of smaller contractions
whose intermediates treduda allocates, in the order that costs least by the model.

opt_einsum searches the paths. Its FLOP-costed path (``optimize``: ``"greedy"``,
``"optimal"``, ``"dp"``, opt_einsum's ``"auto"``, or ``"cotengra"`` for large networks) is one
candidate. Its dynamic programming over connected subsets, with each pairwise step costed by
this model's prediction of the kernel treduda would generate for it (the search's first
incumbent, :func:`~treduda.tuning.search.first_candidate`: milliseconds, not a search), is the
other, for products of up to :data:`MODEL_SEARCHED` factors. Then fusion is a decision: a step
whose result feeds one later step is merged into it (one kernel over the factors of both)
where the merged kernel's estimate beats the two steps', which happens for short summed
extents and intermediates larger than their inputs (``ia,ja,ka->ijk``), and one fused kernel
of all factors is a candidate too. The candidate with the lowest total estimate is used; every
candidate is reported (:meth:`PathChoice.report`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import opt_einsum

from ..determinism import resolve
from ..errors import BackendUnavailable
from ..frontend import dtypes
from ..frontend.contraction import Contraction
from ..frontend.optimize import AUTO, check_optimize
from ..model.prediction import LAUNCH_SECONDS, Prediction
from ..options import Options
from ..polyhedral.lower import plan
from .budgets import small
from .search import Searcher, first_candidate

MODEL_SEARCHED = 6  # products of up to this many factors get a path search costed by the model
DIVE_NODES = 300  # nodes of the dive that costs one step
FLOP_SEARCH = "auto"  # opt_einsum's optimizer for the FLOP-costed candidate by default


@dataclass(frozen=True)
class Factor:
    """A tensor read by a step: an input of the expression or an intermediate."""

    tensor: str
    indices: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.tensor}[{','.join(self.indices)}]"


@dataclass(frozen=True)
class Step:
    """One statement of a path: ``output[indices] op prefix*factor*factor...``, with the
    model's estimate of its kernel and its FLOPs."""

    output: str
    indices: tuple[str, ...]
    factors: tuple[Factor, ...]
    op: str = "="
    prefix: str = ""  # the coefficient and scalars of the expression, on its last step
    seconds: float = math.nan
    flops: float = 0.0

    @property
    def text(self) -> str:
        product = "*".join(str(f) for f in self.factors)
        return f"{self.output}[{','.join(self.indices)}] {self.op} {self.prefix}{product}"

    @property
    def all_indices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(itertools.chain(self.indices,
                                                   *(f.indices for f in self.factors))))


@dataclass(frozen=True)
class Path:
    """Steps in the order they run, and how they were found."""

    label: str
    steps: tuple[Step, ...]

    @property
    def seconds(self) -> float:
        """The steps' estimates, with one launch exposed (:func:`overlapped`)."""
        return overlapped([s.seconds for s in self.steps])

    @property
    def flops(self) -> float:
        return sum(s.flops for s in self.steps)

    def __str__(self) -> str:
        return (f"{self.label}: {len(self.steps)} kernel(s), {self.seconds * 1e3:.4f} ms "
                f"predicted, {self.flops / 1e6:.3f} MFLOP")


@dataclass(frozen=True)
class PathChoice:
    """The path used and every path considered, with the fusion decisions taken."""

    chosen: Path
    considered: tuple[Path, ...]
    decisions: tuple[str, ...] = ()

    def report(self) -> str:
        lines = [f"  {'*' if p is self.chosen else ' '} {p}" for p in self.considered]
        return "\n".join(["paths considered (* used):", *lines,
                          *(f"  fusion: {d}" for d in self.decisions)])


@dataclass(frozen=True)
class Costing:
    """What a step's cost depends on besides its text: the sizes, and the options that shape
    its kernel (dtype, layout, precision, determinism) and the GPU it is costed on."""

    sizes: Mapping[str, int]
    options: Options

    @property
    def dtype(self) -> str:
        return self.options.dtype or "float32"

    def seconds(self, step: Step) -> float:
        """The model's estimate of ``step``'s kernel (inf where no candidate was found)."""
        text, sizes = _canonical(step, self.sizes)
        found = _first(text, sizes, *_shaping(self.options))
        return math.inf if found is None else found.seconds

    def costed(self, step: Step) -> Step:
        flops = 2.0 * dtypes.fmas(self.dtype) * math.prod(self.sizes[i] for i in step.all_indices)
        return replace(step, seconds=self.seconds(step), flops=flops)


def overlapped(seconds: Sequence[float]) -> float:
    """Kernels' estimates, run in sequence, with one launch exposed: a kernel launched on a
    stream while the one before runs waits for it, so its launch overlaps that run."""
    return sum(seconds) - LAUNCH_SECONDS * (len(seconds) - 1)


def estimate(text: str, sizes: Mapping[str, int], options: Options) -> tuple[float, float]:
    """Seconds and FLOPs the model predicts for any statement's kernel with ``options`` (the
    search's first incumbent; inf seconds where none was found)."""
    found = _first(text, tuple(sizes.items()), *_shaping(options))
    return (math.inf, 0.0) if found is None else (found.seconds, found.flops)


def many_factors(c: Contraction) -> bool:
    """Whether ``c`` is one product of three or more tensors, which a path splits (a sum of
    products, or a product reading its own output, stays one kernel)."""
    return len(c.terms) == 1 and len(c.terms[0].reads) >= 3 and not c.reads_output


def choose(c: Contraction, sizes: Mapping[str, int], options: Options | None = None, *,
           taken: Sequence[str] = ()) -> PathChoice:
    """The path for the product ``c`` (see :func:`many_factors`) at ``sizes``, each step
    costed as the kernel ``options`` make (dtype, layout, precision, determinism, on their
    GPU: a tf32 step is costed at tf32).

    ``options.optimize``: ``"auto"`` (the default) chooses by the model among opt_einsum's
    FLOP path,
    the model-costed path and fusions of either; ``False`` keeps one fused kernel; ``True``
    (``"greedy"``, as numpy.einsum), ``"optimal"``, ``"dp"``, ``"cotengra"``, a path as a list
    of tuples, or an opt_einsum ``PathOptimizer`` follow opt_einsum's path as it is. Names of
    intermediates avoid ``c``'s names and ``taken``. ``optimize`` is checked as the API
    checks it (:func:`~treduda.frontend.optimize.check_optimize`)."""
    options = options or Options()
    optimize = check_optimize(options.optimize, c)
    costing = Costing(dict(sizes), options)
    fused = Path("one fused kernel", (costing.costed(_fused(c)),))
    if optimize is False:
        return PathChoice(fused, (fused,))
    names = _names(c, taken)
    if optimize != AUTO:
        given = _steps(c, _opt_einsum_path(c, sizes, _optimizer(optimize)), names, costing)
        path = Path(f"opt_einsum ({_describe(optimize)})", given)
        return PathChoice(path, (path,))
    flop = Path(f"opt_einsum ({FLOP_SEARCH}, FLOPs)",
                _steps(c, _opt_einsum_path(c, sizes, FLOP_SEARCH), names, costing))
    considered = [fused, flop]
    # A small product's steps differ by less than a launch: FLOPs choose its path, and the
    # model's path search (a ring of four small factors: a second of costing) is left out.
    if len(c.terms[0].reads) <= MODEL_SEARCHED and not small(sizes):
        index = {symbol: i for i, symbol in _symbols(c).items()}
        factors = _fused(c).factors

        def operand(subset: int, legs: frozenset, name: str) -> Factor:
            """A factor as it is, or the intermediate of several, its indices ordered as
            :func:`_steps` orders them: a step's cost depends on its operands' layouts."""
            members = [f for j, f in enumerate(factors) if subset >> j & 1]
            if len(members) == 1:
                return members[0]
            return Factor(name, _ordered({index[s] for s in legs}, members, c))

        def cost(left: int, right: int, legs: tuple[frozenset, frozenset, frozenset]) -> float:
            joined = [f for j, f in enumerate(factors) if (left | right) >> j & 1]
            kept = _ordered({index[s] for s in legs[2]}, joined, c)
            step = Step("T", kept, (operand(left, legs[0], "L"), operand(right, legs[1], "R")))
            return costing.seconds(step) - LAUNCH_SECONDS  # as Path.seconds counts it

        optimizer = ModelCosted(cost)
        modelled = _steps(c, _opt_einsum_path(c, sizes, optimizer), names, costing)
        considered.append(Path("opt_einsum (dp, model)", modelled))
    decisions: list[str] = []
    for path in considered[1:]:
        merged, why = _fuse(path.steps, costing)
        if why:
            considered.append(Path(f"{path.label} + fusion", merged))
            decisions += why
    best = min(considered, key=lambda p: p.seconds)
    return PathChoice(best, tuple(considered), tuple(decisions))


class ModelCosted(opt_einsum.paths.PathOptimizer):
    """opt_einsum's dynamic programming over connected subsets of the factors, each pairwise
    step costed by ``cost(left, right, legs)`` instead of its FLOPs: ``left`` and ``right``
    are the two operands' subsets of the factors (bit j for factor j), ``legs`` the symbols of
    the left operand, the right one and the result. Sets, not orders: opt_einsum numbers the
    symbols in the iteration order of Python sets (it varies with the hash seed), so the
    caller orders them."""

    def __init__(self, cost: Callable[[int, int, tuple[frozenset, frozenset, frozenset]],
                                      float]):
        self.cost = cost

    def __call__(self, inputs, output, size_dict, memory_limit=None):
        # DynamicProgramming numbers the indices in this order (opt_einsum 3.3, 3.4).
        symbols = tuple(Counter(itertools.chain(*inputs, output)))
        out = frozenset(symbols.index(s) for s in output)

        def legs(subset: int, group: int, operands) -> frozenset:
            """Indices of the subset's result: those the output or the rest of the group use."""
            inside = _union(operands, subset)
            return inside & (out | _union(operands, group & ~subset))

        def named(indices: frozenset) -> frozenset:
            return frozenset(symbols[i] for i in indices)

        def compare(cost1, cost2, union, sizes, cap, s1, s2, xn, group, every, operands,
                    shared, limit, contract1, contract2):
            joined = s1 | s2
            kept = legs(joined, group, operands)
            cost = cost1 + cost2 + self.cost(s1, s2, (named(legs(s1, group, operands)),
                                                      named(legs(s2, group, operands)),
                                                      named(kept)))
            if joined not in xn or cost < xn[joined][1]:
                xn[joined] = (kept, cost, (contract1, contract2))

        search = opt_einsum.DynamicProgramming(minimize=compare, cost_cap=False)
        return search(inputs, output, size_dict, memory_limit)


def _union(operands, subset: int) -> frozenset:
    return frozenset().union(*(o for j, o in enumerate(operands) if subset >> j & 1))


def _fused(c: Contraction) -> Step:
    term = c.terms[0]
    return Step(c.output, c.output_indices, tuple(Factor(r.tensor, r.indices) for r in term.reads),
                c.op, _prefix(term.coefficient, term.scalars))


def _prefix(coefficient: float, scalars: tuple[str, ...]) -> str:
    parts = ([] if coefficient == 1 else [repr(float(coefficient))]) + list(scalars)
    return "".join(f"{p}*" for p in parts)


def _names(c: Contraction, taken: Sequence[str]) -> Callable[[], str]:
    """A source of intermediate names (T0, T1, ...) none of ``c``'s names or ``taken`` use."""
    used = {c.output, *c.inputs, *c.scalars, *c.indices, *taken}
    fresh = (f"T{n}" for n in itertools.count())
    return lambda: next(name for name in fresh if name not in used)


def _steps(c: Contraction, path: list[tuple[int, ...]], name: Callable[[], str],
           costing: Costing) -> tuple[Step, ...]:
    """The steps of an opt_einsum path (a list of operand positions per step; the result goes
    last) over ``c``'s factors; the last step writes ``c``'s output."""
    operands = list(_fused(c).factors)
    final = _fused(c)
    steps = []
    for n, positions in enumerate(path):
        taken = [operands[p] for p in sorted(positions)]
        operands = [o for p, o in enumerate(operands) if p not in positions]
        if n == len(path) - 1:
            step = replace(final, factors=tuple(taken))
        else:
            step = Step(name(), _kept(taken, operands, c), tuple(taken))
            operands.append(Factor(step.output, step.indices))
        steps.append(costing.costed(step))
    return tuple(steps)


def _kept(taken: list[Factor], rest: list[Factor], c: Contraction) -> tuple[str, ...]:
    """An intermediate's indices: those the output or the remaining factors use."""
    return _ordered(set(c.output_indices).union(*(f.indices for f in rest)), taken, c)


def _ordered(needed: set[str], taken: Sequence[Factor], c: Contraction) -> tuple[str, ...]:
    """The indices of ``taken`` that are ``needed``, the output's first (in its order), then
    in order of first appearance: the layout of an intermediate."""
    seen = list(dict.fromkeys(itertools.chain(*(f.indices for f in taken))))
    return tuple(sorted((i for i in seen if i in needed),
                        key=lambda i: (c.output_indices.index(i) if i in c.output_indices
                                       else len(c.output_indices) + seen.index(i))))


def _fuse(steps: tuple[Step, ...], costing: Costing) -> tuple[tuple[Step, ...], list[str]]:
    """``steps`` with producers merged into their consumer while the merged kernel's estimate
    beats the two kernels' (the largest gain first; one launch of the two overlaps the other's
    run, see :attr:`Path.seconds`), and why each merge was made."""
    steps, why = list(steps), []
    while True:
        best = None
        for p, producer in enumerate(steps):
            for q in range(p + 1, len(steps)):
                consumer = steps[q]
                if not any(f.tensor == producer.output for f in consumer.factors):
                    continue
                factors = tuple(itertools.chain.from_iterable(
                    producer.factors if f.tensor == producer.output else (f,)
                    for f in consumer.factors))
                merged = costing.costed(replace(consumer, factors=factors))
                gain = producer.seconds + consumer.seconds - LAUNCH_SECONDS - merged.seconds
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, p, q, merged)
        if best is None:
            return tuple(steps), why
        gain, p, q, merged = best
        why.append(f"{steps[p].text} ; {steps[q].text} -> {merged.text} "
                   f"({(merged.seconds + gain) * 1e3:.4f} -> {merged.seconds * 1e3:.4f} ms "
                   f"predicted)")
        steps[q] = merged
        del steps[p]


def _opt_einsum_path(c: Contraction, sizes: Mapping[str, int], optimize: Any
                     ) -> list[tuple[int, ...]]:
    """opt_einsum's path for ``c``'s factors (indices as opt_einsum's one-letter symbols)."""
    symbol = _symbols(c)
    factors = _fused(c).factors
    equation = ",".join("".join(symbol[i] for i in f.indices) for f in factors)
    equation += "->" + "".join(symbol[i] for i in c.output_indices)
    shapes = [tuple(sizes[i] for i in f.indices) for f in factors]
    path, _ = opt_einsum.contract_path(equation, *shapes, shapes=True, optimize=optimize)
    return [tuple(step) for step in path]


def _symbols(c: Contraction) -> dict[str, str]:
    """opt_einsum's one-letter symbol of each of ``c``'s indices."""
    return {index: opt_einsum.get_symbol(n) for n, index in enumerate(c.indices)}


def _optimizer(optimize: Any) -> Any:
    """opt_einsum's ``optimize`` for ours: True is numpy.einsum's greedy; "cotengra" is its
    hyper-optimiser, an optional dependency."""
    if optimize is True:
        return "greedy"
    if optimize == "cotengra":
        try:
            import cotengra
        except ImportError as missing:
            raise BackendUnavailable("optimize='cotengra' needs cotengra: pip install "
                                     "'treduda[cotengra]'") from missing
        return cotengra.HyperOptimizer(max_repeats=32, progbar=False)
    return optimize


def _describe(optimize: Any) -> str:
    return repr(optimize) if isinstance(optimize, (str, bool, list, tuple)) else type(
        optimize).__name__


def _canonical(step: Step, sizes: Mapping[str, int]) -> tuple[str, tuple[tuple[str, int], ...]]:
    """``step`` with indices and tensors renamed by first appearance, and its sizes: equal for
    steps that differ only in names, so their estimates are shared."""
    index = {i: f"i{n}" for n, i in enumerate(step.all_indices)}
    tensor: dict[str, str] = {}
    for f in step.factors:
        tensor.setdefault(f.tensor, f"X{len(tensor)}")
    renamed = Step("Y", tuple(index[i] for i in step.indices),
                   tuple(Factor(tensor[f.tensor], tuple(index[i] for i in f.indices))
                         for f in step.factors))
    return renamed.text, tuple((index[i], sizes[i]) for i in step.all_indices)


def _shaping(options: Options) -> tuple[str, str, Any, str, bool]:
    """What of ``options`` a step's cost depends on, as :func:`_first` takes it: dtype,
    layout, GPU, precision and determinism (the process's default where None)."""
    return (options.dtype or "float32", options.layout, options.gpu, options.precision,
            resolve(options.deterministic))


@functools.lru_cache(maxsize=4096)
def _first(text: str, sizes: tuple[tuple[str, int], ...], dtype: str, layout: str,
           gpu: Any, precision: str, deterministic: bool) -> Prediction | None:
    """The cost of a step: the search's first incumbent, or for a small step (whose first
    incumbent lies within a fraction of a launch of it: :func:`~treduda.tuning.search.at_once`)
    the least estimate of its whole space, one bound where a dive takes hundreds (a ring of four
    small factors: 24 steps costed, 6.7 s of dives)."""
    program = plan(text, dict(sizes), layout, dtype, deterministic=deterministic,
                   precision=precision)
    if small(program.sizes):
        model = Searcher(program, gpu, restrict=False).model
        return replace(model.bound({}), seconds=model.least())
    found = first_candidate(program, gpu, max_nodes=DIVE_NODES)
    return None if found is None else found.prediction
