"""Branch and bound over a strategy's parameters, pruned by the model's lower bound.

Decisions are taken one at a time in the order the strategies declare (their parameters'
priorities: the mapping of dimensions first, then staging, tiles, step, buffers). Best-first:
the open node with the lowest bound is expanded; complete candidates are scored by the model's
estimate; a node whose bound exceeds the best score cannot hold anything better and is cut
(Telamon, "pruning without regrets"). Only the values each parameter declares as searched are
tried, so the space stays enumerable and the search can be checked against exhaustive
enumeration of the very same space. The model reads any strategy that describes itself
(:meth:`~treduda.polyhedral.strategy.Strategy.describe`).

Under a node budget the search is no longer exact, and it makes the most of its time: it dives
from its best open nodes to reach leaves, and once the budget ends, it improves the best
candidate of every mapping by local search (changing one parameter, then two, while the
estimate improves), always climbing on from the fastest seed that can still improve.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import StrategyError
from ..frontend.identity import params_text
from ..polyhedral.geometry import AXES
from ..polyhedral.lower import Program
from ..polyhedral.strategy import DEFAULT_STRATEGY, Limits, Parameter, ParamSpace, read_only
from ..strategies import get as get_strategy
from ..strategies.tensorcore import TensorCore
from . import mma_model
from .gpus import Gpu
from .gpus import gpu as find_gpu
from .mma_model import model_of
from .prediction import Compiled, Prediction

# CPU seconds of search compile(), contract() and search() spend by default (budget=None: the
# complete search). From 0.8 s to 1.0 s the picks on GEMM 4096^3 and tccg_01/03/15/28/33 are
# within 1.5% of the best that minutes of search find (at 0.9 s: 1.000, 1.010, 1.010, 1.007,
# 1.007, 1.015); at 0.7 s tccg_28's is 17% off, its tree over the suggested values cut short
# (benchmarks/search_budget.py). 0.9 s keeps GEMM 4096^3's first call under a second here
# (its search ends at 0.70 s of 0.9, 0.76 of 1.0; generating its kernel takes 0.22 s).
DEFAULT_BUDGET = 0.9
# ptxas re-estimates a winner (treduda.api._checked) whose predicted registers reach this share
# of what the launch bounds allow: below it, ptxas's allocation changes neither spills nor,
# in the cases measured, the estimate (nvcc costs a second per batch, generation more).
CHECK_REGISTERS = 0.75

# What a budget counts: the CPU seconds of the thread that searches, so that a search finds the
# same winner whatever else shares the cores (on two shared cores its wall time can be several
# times more). time.process_time() took 64 us a call there, thread_time() under 1 us.
clock = time.thread_time

# The clock is read every this many nodes (reading it can yield the core to another process).
CLOCK_EVERY = 8


def expired(deadline: float | None, count: int) -> bool:
    """Whether ``deadline`` (of :data:`clock`) has passed, read every :data:`CLOCK_EVERY`th
    ``count``."""
    return deadline is not None and count % CLOCK_EVERY == 0 and clock() >= deadline


# Rivals (SearchResult.rivals) differ from each other in predicted time by at least this share.
DISTINCT = 0.01


def identity(params: Mapping[str, Any]) -> str:
    """Parameters as text: equal for equal parameters, in any order (a candidate's
    :class:`~treduda.frontend.identity.Identity` within its problem)."""
    return params_text(params)


@dataclass(frozen=True)
class Decision:
    """One choice, as the search records it: small, frozen, JSON-serialisable."""

    name: str
    value: Any


@dataclass(frozen=True)
class Candidate:
    """A complete choice of parameters and its predicted (and maybe measured) time."""

    strategy: str
    params: Mapping[str, Any]  # read-only once made
    prediction: Prediction
    bound: float | None = None  # the model's lower bound for these parameters, in seconds
    measured: float | None = None  # seconds per launch on the device that measured it
    measured_on: str | None = None  # that device, e.g. "NVIDIA H100 ... (CuPy, CUDA events)"
    walked: Prediction | None = None  # the estimate from a walk over the generated kernel IR
    compiled: Compiled | None = None  # ptxas's report, where it re-estimated this candidate

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", read_only(self.params))

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return tuple(Decision(k, v) for k, v in self.params.items())

    def key(self) -> tuple:
        """The search's order of candidates (see :meth:`order`)."""
        return self.order(self.prediction, self.params)

    @staticmethod
    def order(prediction: Prediction, params: Mapping[str, Any]) -> tuple:
        """Order by predicted time; equal times by fewer LSU wavefronts per FMA (bank
        conflicts, uncoalesced loads: the cost a model is least sure of), then by more
        resident warps (more latency hidden); the parameters' text only makes the order
        deterministic where even those agree."""
        return (prediction.seconds, prediction.wavefronts, -prediction.warps, identity(params))


@dataclass
class SearchStats:
    space_size: int  # complete candidates in the search space
    space_size_exact: bool  # counted (exhaustive), or the product of the decisions' values
    complete: bool = True  # False when a node budget stopped the search early
    nodes_visited: int = 0
    candidates_scored: int = 0
    polished: int = 0  # candidates scored by the local search after a budget stopped it
    improvements: int = 0  # how often the local search found a faster candidate
    seeded: int = 0  # winners of similar problems (Searcher.seeds) scored as incumbents
    cuts_per_depth: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    # The least estimate any candidate of the space can have, as the search proved it: the
    # winner's where the search is complete, else the lowest floor of the nodes left open.
    lower: float | None = None

    def __str__(self) -> str:
        cuts = ", ".join(f"{k} {v}" for k, v in self.cuts_per_depth.items() if v)
        size = f"{self.space_size}" if self.space_size_exact else f"<= {self.space_size}"
        budget = "" if self.complete else (
            f" (stopped by its budget; then {self.polished} candidates near the best of "
            f"each mapping scored, {self.improvements} of them better: not proven optimal)")
        seeded = (f"; started from {self.seeded} winner(s) of similar sizes"
                  if self.seeded else "")
        return (f"space {size} candidates; visited {self.nodes_visited} nodes, scored "
                f"{self.candidates_scored} candidates in {self.seconds:.2f} s{budget}; "
                f"cuts: {cuts or 'none'}{seeded}")


@dataclass(frozen=True)
class SearchResult:
    """The winner, the candidates scored on the way, and how the search went; re-ranking
    (walked or measured winners) returns a new result."""

    expression: str
    sizes: dict[str, int]
    dtype: str
    layout: str
    gpu: Gpu
    best: Candidate
    candidates: tuple[Candidate, ...]
    stats: SearchStats
    precision: str = "highest"  # as compile() takes it: part of what the winner computes

    def top(self, n: int = 10) -> list[Candidate]:
        """The ``n`` best distinct candidates (a dive and the search may score one twice)."""
        distinct = {identity(c.params): c
                    for c in sorted(self.candidates, key=Candidate.key, reverse=True)}
        return sorted(distinct.values(), key=Candidate.key)[:n]

    def rivals(self, n: int) -> list[Candidate]:
        """The ``n`` best candidates after the winner whose predicted times differ, by more
        than :data:`DISTINCT` of the larger, from each other's and the winner's (which ptxas's
        re-estimate may have made slower than theirs): timed beside the winner on
        a GPU, they test the model's ranking (look-alikes, which differ by a symmetry or an
        assignment the model sees as equal, would not)."""
        chosen: list[Candidate] = []
        seen = [self.best.prediction.seconds]
        for candidate in self.top(len(self.candidates)):
            if len(chosen) == n:
                break
            seconds = candidate.prediction.seconds
            if all(abs(seconds - s) > DISTINCT * max(s, seconds) for s in seen):
                chosen.append(candidate)
                seen.append(seconds)
        return chosen

    @property
    def gap(self) -> float | None:
        """How much slower the winner's estimate can be, at most, than the best estimate of
        any candidate of the space (0.0 for a complete search): the winner over the lowest
        floor of the nodes the search left open (:attr:`SearchStats.lower`)."""
        lower = self.stats.lower
        return None if not lower else self.best.prediction.seconds / lower - 1

    def fraction_of_peak(self) -> float:
        """The winner's predicted FLOP/s as a share of its units' peak: the tensor cores'
        (dense, as the datasheet gives it) for a tensor-core kernel, else the FMA units'."""
        g = self.gpu
        peak = (g.mma_flops(self.dtype, self.precision) / g.mma_share
                if self.best.strategy == TENSOR_CORES else g.peak_flops(self.dtype))
        return self.best.prediction.gflops * 1e9 / peak

    def table(self, n: int = 10) -> str:
        lines = [f"{'#':>3} {'bound ms':>9} {'estimate ms':>11} {'GFLOP/s':>8}  {'binding':8} "
                 "parameters"]
        for rank, c in enumerate(self.top(n), 1):
            params = " ".join(f"{k}={v}" for k, v in c.params.items())
            bound = f"{c.bound * 1e3:9.4f}" if c.bound is not None else f"{'-':>9}"
            lines.append(f"{rank:>3} {bound} {c.prediction.seconds * 1e3:11.4f} "
                         f"{c.prediction.gflops:8.0f}  {c.prediction.binding:8} {params}")
        return "\n".join(lines)

    def summary(self) -> str:
        p = self.best.prediction
        gap = self.gap
        proven = ("" if gap is None else "\nthe best of the whole space (a complete search)"
                  if self.stats.complete else
                  f"\nat most {gap:.1%} slower than the best of the whole space: no candidate "
                  f"is estimated below {self.stats.lower * 1e3:.4g} ms (the bound's floor)")
        return (f"best on {self.gpu.name}: {p.seconds * 1e3:.4f} ms, {p.gflops:.0f} GFLOP/s "
                f"({self.fraction_of_peak():.0%} of peak); {p.because}\n{self.stats}{proven}")

    def to_json(self) -> str:
        """The winner and statistics, replayable: compile(strategy=..., params=...,
        precision=...)."""
        return json.dumps({"expression": self.expression, "sizes": self.sizes,
                           "dtype": self.dtype, "layout": self.layout, "gpu": self.gpu.name,
                           "precision": self.precision,
                           "strategy": self.best.strategy, "params": dict(self.best.params),
                           "seconds": self.best.prediction.seconds,
                           "binding": self.best.prediction.binding,
                           "measured_seconds": self.best.measured,
                           "measured_on": self.best.measured_on,
                           "nodes_visited": self.stats.nodes_visited,
                           "complete": self.stats.complete, "gap": self.gap,
                           "candidates_scored": self.stats.candidates_scored}, indent=1)


TENSOR_CORES = TensorCore.name  # offered beside the default strategy (see offered())
# Under a node budget, every this many nodes the search dives from the open node with the lowest
# bound to a complete candidate: best-first alone, with a loose bound, may spend a whole budget
# above the leaves and return only its first incumbent.
DIVE_INTERVAL = 250
# Under a time budget, the share of it the tree search takes; local search takes the rest. At 0.6
# of a 0.8 s budget tccg_03 ended 2.8% above the best (the seeds' dives alone take 0.23 s), at 0.4
# of it tccg_28 19% (its tree over the suggested values needs about 0.3 s).
SEARCH_SHARE = 0.5
# Under a time budget over every declared value, the share of the tree's time spent on the
# values the strategies suggest (Searcher._two_spaces).
SUGGESTED_SHARE = 0.7
# A dive takes the values a strategy suggests first among children whose floors are within
# this share of the lowest: early floors barely separate tiles, and the suggestions are sound.
NEAR = 0.01
# A dive scores every completion of a node with at most this many below it (the buffers and
# code decisions, which the floor cannot tell apart, as the estimate can).
FINISH = 128

Progress = Callable[[int, int, float], None]  # nodes visited, candidates scored, best seconds


class Searcher:
    """The search space of one planned, fixed-size program on one GPU, searchable and
    enumerable: with ``restrict`` (the default here, for spaces small enough to enumerate) the
    values each strategy suggests (:attr:`Parameter.searched`), else every declared value
    (what :func:`search_program`, so compile(), searches); ``values`` narrows parameters."""

    def __init__(self, program: Program, gpu: str | Gpu = "H100",
                 strategy: str = DEFAULT_STRATEGY, values: Mapping[str, tuple] | None = None,
                 restrict: bool = True, seeds: Sequence[Mapping[str, Any]] = ()):
        if program.symbolic:
            raise StrategyError("the search ranks kernels for fixed sizes; plan the program "
                                "with sizes, not symbolic=True")
        self.gpu = find_gpu(gpu)
        self.program = program
        limits = Limits(threads_per_block=self.gpu.max_threads_per_block,
                        sm_count=self.gpu.sm_count,
                        shared_per_block=self.gpu.shared_per_block,
                        registers_per_thread=self.gpu.max_registers_per_thread,
                        async_copies=self.gpu.async_copies)
        self.strategy = get_strategy(strategy, limits)
        full = self.strategy.space(self.program)
        unknown = sorted(set(values or {}) - {p.name for p in full.parameters})
        if unknown:
            raise StrategyError(f"'{strategy}' has no parameter(s) {unknown}; it has: "
                                f"{', '.join(p.name for p in full.parameters)}")
        wanted = {p.name: p.searched for p in full.parameters if restrict and p.searched}
        # The values each strategy suggests trying first, among the declared ones.
        self._suggested = {p.name: frozenset(p.searched) for p in full.parameters if p.searched}
        wanted.update(values or {})
        ordered = sorted(full.parameters, key=lambda p: p.priority)  # stable: the space's order
        self.space = ParamSpace(tuple(
            Parameter(p.name, tuple(v for v in p.values if v in wanted.get(p.name, p.values)),
                      p.doc, priority=p.priority) for p in ordered), full.constraints)
        self.model = model_of(self.program, self.gpu, self.strategy,
                              {p.name: p.values for p in self.space.parameters})
        # Wider than the values the strategies suggest: a budgeted search looks at those first
        # (see branch_and_bound).
        self._arguments = (program, self.gpu, strategy, values)
        self._wider = not restrict and any(
            set(p.values) - self._suggested.get(p.name, set(p.values))
            for p in self.space.parameters)
        names = {p.name for p in self.space.parameters}  # a search may rank several strategies
        self.seeds = tuple(dict(seed) for seed in seeds if set(seed) <= names)

    def seeded(self, stats: SearchStats) -> list[Candidate]:
        """The candidates of :attr:`seeds` (the winners of similar problems), scored: first
        incumbents a budgeted search climbs from (:meth:`_polish`). A seed this space does
        not hold as it is (a staged tile too large at these sizes) becomes its nearest valid
        candidate: its values where they fit, decided in the space's order."""
        found = []
        for seed in self.seeds:
            nearest = self.space.complete({}, seed)  # the seed itself where the space holds it
            if nearest is not None:
                found.append(self.candidate(nearest))
        stats.seeded += len(found)
        return found

    def candidate(self, params: Mapping[str, Any], with_bound: bool = True) -> Candidate:
        bound = self.model.bound(params).seconds if with_bound else None
        return Candidate(self.strategy.name, dict(params), self.model.estimate(params), bound)

    def _floor(self, params: Mapping[str, Any]) -> float:
        """The least estimate of any completion of ``params`` (:attr:`Prediction.floor`)."""
        bound = self.model.bound(params)
        return bound.seconds if bound.floor is None else bound.floor

    def exhaustive(self) -> SearchResult:
        """Score every candidate of the space: the reference the search must agree with."""
        started = time.perf_counter()
        scored = [self.candidate(p, with_bound=False) for p in self.space.points()]
        if not scored:
            raise StrategyError(f"no valid candidate for {self.program.original.source!r}")
        stats = SearchStats(space_size=len(scored), space_size_exact=True,
                            nodes_visited=len(scored), candidates_scored=len(scored),
                            seconds=time.perf_counter() - started)
        return self._result(min(scored, key=Candidate.key), scored, stats)

    def branch_and_bound(self, progress: Progress | None = None,
                         max_nodes: int | None = None,
                         budget: float | None = None) -> SearchResult:
        """Best-first branch and bound; ``max_nodes`` nodes or ``budget`` CPU seconds
        (:data:`clock`) stop it early
        (the stats say so, and how far from the space's optimum its winner can be at most).

        Under a budget, :data:`SEARCH_SHARE` of it goes to the tree (over every declared value
        and the suggested ones apart: :meth:`_two_spaces`) and the rest to the local search
        around the best candidates found (:meth:`_polish`). Without either, the search is
        complete; it starts from the winner of a search within :data:`DEFAULT_BUDGET`, whose
        estimate cuts most of the tree at once."""
        started = clock()
        if budget is not None and self._wider:
            return self._two_spaces(progress, max_nodes, budget)
        deadline = None if budget is None else started + max(budget, 0.0) * SEARCH_SHARE
        best, scored, stats, floors = self._tree(progress, max_nodes, deadline)
        if not stats.complete:
            best = self._polish(best, scored, stats, self._limit(max_nodes),
                                None if budget is None else started + budget)
        return self._finish(best, scored, stats, floors, started, progress)

    def _tree(self, progress: Progress | None, max_nodes: int | None,
              deadline: float | None) -> tuple[Candidate, list[Candidate], SearchStats,
                                               list[float]]:
        """The branch and bound itself, until ``max_nodes`` nodes or ``deadline``: its best
        candidate, every candidate it scored, its statistics, and the floors of the nodes it
        left open."""
        limited = max_nodes is not None or deadline is not None
        names = [p.name for p in self.space.parameters]
        stats = SearchStats(self.space.size(), False, cuts_per_depth=dict.fromkeys(names, 0))
        cuts: Counter = Counter()
        scored: list[Candidate] = []
        if limited:
            scored = self.seeded(stats)
            best = self._dive(stats)  # a first incumbent, so pruning and the budget start early
            best = min([c for c in (best, *scored) if c is not None], key=Candidate.key,
                       default=None)
        else:
            first = self.branch_and_bound(budget=DEFAULT_BUDGET)
            if first.stats.complete:
                return first.best, list(first.candidates), first.stats, []
            best, scored = first.best, list(first.candidates)
            stats.nodes_visited, stats.polished = first.stats.nodes_visited, first.stats.polished
        if best is not None and not scored:
            scored.append(best)
        tie = itertools.count()
        root = self._floor({})
        heap = [(root, next(tie), {}, root)]  # (order, tie, node, its floor)
        while heap:
            key, tied, partial, floor = heapq.heappop(heap)
            if best is not None and floor > best.prediction.seconds:
                cuts["(open nodes left)"] += 1 + len(heap)
                heap.clear()
                break
            if limited and best is not None and (
                    max_nodes is not None and stats.nodes_visited >= max_nodes
                    or expired(deadline, stats.nodes_visited)):
                stats.complete = False
                heapq.heappush(heap, (key, tied, partial, floor))
                break
            stats.nodes_visited += 1
            if limited and stats.nodes_visited % DIVE_INTERVAL == 0:
                found = self._dive(stats, partial, deadline=deadline)  # reach some leaves
                if found is not None:
                    scored.append(found)
                    best = found if best is None or found.key() < best.key() else best
            step = self.space.choices(partial)
            if step is None:
                candidate = self.candidate(partial)
                scored.append(candidate)
                if best is None or candidate.key() < best.key():
                    best = candidate
                if progress and len(scored) % 50 == 1:
                    progress(stats.nodes_visited, len(scored), best.prediction.seconds)
                continue
            parameter, values = step
            for value in values:
                child = {**partial, parameter.name: value}
                child_floor = self._floor(child)
                if best is not None and child_floor > best.prediction.seconds:
                    cuts[parameter.name] += 1
                    continue
                heapq.heappush(heap, (child_floor + self._later(parameter.name, value),
                                      next(tie), child, child_floor))
        if best is None:
            raise StrategyError(f"no valid candidate for {self.program.original.source!r}")
        stats.cuts_per_depth = {**stats.cuts_per_depth, **cuts}
        return best, scored, stats, [node[3] for node in heap]

    @staticmethod
    def _limit(max_nodes: int | None, trees: int = 1) -> int:
        """The candidates the local search may score after ``trees`` trees stopped by
        ``max_nodes`` nodes each (as many as they visited), or by the clock alone (no count:
        its deadline stops it)."""
        return sys.maxsize if max_nodes is None else max(max_nodes * trees, 2)

    def _finish(self, best: Candidate, scored: list[Candidate], stats: SearchStats,
                floors: Sequence[float], started: float,
                progress: Progress | None) -> SearchResult:
        """The result of a search that began at ``started`` and left nodes of ``floors``
        open."""
        stats.lower = min([best.prediction.seconds, *floors])
        stats.candidates_scored = len(scored)
        stats.seconds = clock() - started
        if progress:
            progress(stats.nodes_visited, len(scored), best.prediction.seconds)
        return self._result(best, scored, stats)

    def _below(self, partial: Mapping[str, Any]) -> int:
        """How many assignments of the open parameters lie below ``partial`` at most."""
        return math.prod(len(p.values) for p in self.space.parameters if p.name not in partial)

    def _two_spaces(self, progress: Progress | None, max_nodes: int | None,
                    budget: float) -> SearchResult:
        """A budgeted tree search of every declared value, then of the values the strategies
        suggest (:data:`SUGGESTED_SHARE` of the tree's time): a space small enough to search
        to its end in about a second, whose best the wide space's search may not reach in
        that time (tccg_28: 31.7 ms predicted, against 37.8 after five seconds of the wide
        space). Then one local search over every declared value from the candidates of both,
        with the wide search's proof of how far its winner can be: a climb within the
        suggested values alone ended 85% above tccg_03's best (block_x 1 and block_z 32 are
        not suggested), and the two local searches halved the time of each."""
        started = clock()
        tree = max(budget, 0.0) * SEARCH_SHARE
        best, scored, stats, floors = self._tree(
            progress, max_nodes, started + tree * (1 - SUGGESTED_SHARE))
        if not stats.complete:
            try:
                narrow = Searcher(*self._arguments)._tree(None, max_nodes, started + tree)
            except StrategyError:  # small extents rule out every suggested value
                narrow = None
            trees = 1
            if narrow is not None:
                best = min(best, narrow[0], key=Candidate.key)
                scored += narrow[1]
                stats.nodes_visited += narrow[2].nodes_visited
                trees = 2
            best = self._polish(best, scored, stats, self._limit(max_nodes, trees),
                                started + budget)
        return self._finish(best, scored, stats, floors, started, progress)

    def _later(self, name: str, value: Any) -> float:
        """0 for a value the strategy suggests trying first (:attr:`Parameter.searched`), a
        sliver of a second for the others: equal floors are taken suggested values first."""
        suggested = self._suggested.get(name)
        return 0.0 if suggested is None or value in suggested else 1e-12

    def _dive(self, stats: SearchStats, start: Mapping[str, Any] | None = None,
              max_nodes: int | None = None, deadline: float | None = None) -> Candidate | None:
        """Follow the child with the lowest floor from ``start`` (the root by default) down to
        a complete candidate, backing up out of dead ends: the classic first incumbent of a
        branch and bound, and under a budget, more incumbents from the most promising open
        nodes. None where no candidate lies below ``start`` (or within ``max_nodes`` or before
        ``deadline``)."""
        partial: dict[str, Any] = dict(start or {})
        stack = [iter([partial])]
        visited = 0
        while stack:
            partial = next(stack[-1], None)
            if partial is None:
                stack.pop()
                continue
            if (max_nodes is not None and visited >= max_nodes
                    or visited and expired(deadline, visited)):
                return None
            visited += 1
            stats.nodes_visited += 1
            if self._below(partial) <= FINISH:  # the last decisions: the best of them all
                leaves = [self.candidate(p) for p in self.space.points(partial)]
                stats.nodes_visited += len(leaves)
                if leaves:
                    return min(leaves, key=Candidate.key)
                continue
            step = self.space.choices(partial)
            if step is None:
                return self.candidate(partial)
            parameter, values = step
            floors = [(self._floor({**partial, parameter.name: v}), v) for v in values]
            near = min(floors, key=lambda pair: pair[0])[0] * (1 + NEAR) if floors else 0.0
            floors.sort(key=lambda pair, n=parameter.name: (
                pair[0] > near, self._later(n, pair[1]) > 0, pair[0]))
            stack.append(iter([{**partial, parameter.name: v} for _, v in floors]))
        return None

    def _polish(self, best: Candidate, scored: list[Candidate], stats: SearchStats,
                limit: int, deadline: float | None = None) -> Candidate:
        """Local search after the tree, from the best candidate of every mapping (the first
        decision), within ``limit`` candidates and ``deadline``. First a race for half of
        them: the seed that is fastest now moves to a faster neighbour (one change, or the
        last decisions: :meth:`_step`) until it has none, and then the next fastest does;
        then the fastest of all climbs on, two changes at a time too (:meth:`_climb`).
        Best-first with a loose bound spends a budget under one or two mappings: on
        tccg_31/34/37/42/45/48 it never reached the GETT grouping "a*b_c" on x, 27% faster
        (predicted) once a seed of it climbed. The race spends nothing on seeds slower than
        the local optima of faster ones, and climbs each seed it starts to such an optimum
        (about 100 candidates on tccg_03), where rounds of successive halving compared
        seeds after equal shares of 2 to 20 candidates: tccg_03's "a,c,d" seed, 22% above
        the best at first, 1.9% once climbed, lost to seeds that ended 2.6-2.8% above it."""
        seen = {identity(c.params) for c in scored}
        seeds = self._seeds(scored, stats, deadline)
        cap = stats.polished + limit
        race = (stats.polished + limit // 2,  # half of what the seeds' dives left
                None if deadline is None else clock() + max(deadline - clock(), 0.0) / 2)
        heap = [(c.key(), c) for c in seeds]
        heapq.heapify(heap)
        while heap:  # (key, candidate): keys differ (they end with the parameters' text)
            key, seed = heapq.heappop(heap)
            faster = self._step(seed, scored, seen, stats, 1, *race)
            if faster is None and self._spent(stats, *race):
                heapq.heappush(heap, (key, seed))
                break
            best = min(best, seed, key=Candidate.key)
            if faster is not None:
                heapq.heappush(heap, (faster.key(), faster))
        best = min([best, *(seed for _, seed in heap)], key=Candidate.key)
        return self._climb(best, scored, seen, stats, cap, deadline)

    def _seeds(self, scored: list[Candidate], stats: SearchStats,
               deadline: float | None = None) -> list[Candidate]:
        """The best scored candidate of every value of the first decision, a dive from it
        where none was scored."""
        first = self.space.parameters[0].name
        seeds: dict[Any, Candidate] = {}
        for candidate in scored:
            value = candidate.params[first]
            if value not in seeds or candidate.key() < seeds[value].key():
                seeds[value] = candidate
        for value in self.space.parameters[0].values:
            if value not in seeds and (found := self._dive(stats, {first: value},
                                                           deadline=deadline)) is not None:
                scored.append(found)
                seeds[value] = found
        return list(seeds.values())

    def _climb(self, best: Candidate, scored: list[Candidate], seen: set[str],
               stats: SearchStats, cap: int, deadline: float | None = None) -> Candidate:
        """Hill climbing: move to a faster neighbour (:meth:`_step`, up to two changes) until
        none is (a local optimum) or :attr:`SearchStats.polished` reaches ``cap``. On TCCG's
        rows the best kernels lie close to a good incumbent, in a few coupled changes (a
        register tile grown while the threads shrink), that best-first with a loose bound
        reaches late (tccg_01 after 3000 nodes: 0.181 ms predicted, optimum 0.095 ms)."""
        while (faster := self._step(best, scored, seen, stats, 2, cap, deadline)) is not None:
            best = faster
        return best

    @staticmethod
    def _spent(stats: SearchStats, cap: int, deadline: float | None) -> bool:
        """Whether the local search has scored ``cap`` candidates or reached ``deadline``."""
        return stats.polished >= cap or deadline is not None and clock() >= deadline

    def _step(self, best: Candidate, scored: list[Candidate], seen: set[str],
              stats: SearchStats, level: int, cap: int,
              deadline: float | None) -> Candidate | None:
        """The first neighbour of ``best`` not ``seen`` yet that is faster, scoring the
        neighbourhoods of :meth:`_neighbours` up to ``level`` in turn (one change or a trade,
        the last decisions together, two changes); None at a local optimum of those, or
        once :meth:`_spent`."""
        for params in itertools.chain.from_iterable(
                self._neighbours(best.params, n) for n in range(level + 1)):
            if self._spent(stats, cap, deadline):
                return None
            if identity(params) in seen:
                continue
            seen.add(identity(params))
            candidate = self.candidate(params, with_bound=False)
            scored.append(candidate)
            stats.polished += 1
            if candidate.key() < best.key():
                stats.improvements += 1
                return candidate
        return None

    def _neighbours(self, params: Mapping[str, Any], level: int) -> Iterator[dict[str, Any]]:
        """The valid candidates that differ from ``params`` in one parameter, or trade threads
        for registers along an axis keeping its tile (twice the registers, half the threads,
        or the reverse: the coupled change by which the best kernels differ from good ones,
        GEMM 4096^3: 32 x 4 threads x registers along x at 3.45 ms, 16 x 8 at 3.07 ms);
        at ``level`` 1 in any of the last decisions (:meth:`_finishes`), at 2 in two.

        Changes of the last decisions come first, of the first decision (the mapping) last:
        the local search starts from the best candidate of every mapping, and a climb mostly
        moves tiles, steps and buffers; on tccg_03 a climb found each faster neighbour
        after 16 candidates where it took 30, and its first two-change move after 130
        where it took 600."""
        others = [[(p.name, v) for v in p.values if v != params[p.name]]
                  for p in reversed(self.space.parameters)]
        changes = (itertools.chain(self._trades(params),
                                   ((change,) for change in itertools.chain(*others)))
                   if level == 0 else self._finishes(params) if level == 1 else
                   itertools.chain.from_iterable(
                       itertools.product(a, b) for a, b in itertools.combinations(others, 2)))
        for change in changes:
            neighbour = {**params, **dict(change)}
            if not self.space.violated(neighbour):
                yield neighbour

    def _finishes(self, params: Mapping[str, Any]) -> Iterator[tuple[tuple[str, Any], ...]]:
        """Every other choice of the last decisions (at most :data:`FINISH` of them: buffers,
        padding, unrolling), which depend on each other through their rules (preloading needs
        an unrolled step): one at a time, a climb can be stuck where two of them together
        are faster."""
        last = len(self.space.parameters)
        while last > 0 and self._below({p.name: 0 for p in self.space.parameters[:last - 1]}
                                       ) <= FINISH:
            last -= 1
        fixed = {p.name: params[p.name] for p in self.space.parameters[:last]}
        for point in self.space.points(fixed):
            yield tuple((name, value) for name, value in point.items() if name not in fixed)

    def _trades(self, params: Mapping[str, Any]) -> Iterator[tuple[tuple[str, Any], ...]]:
        """Changes that trade threads for registers along an axis and keep its tile."""
        values = {p.name: p.values for p in self.space.parameters}
        for a in AXES:
            block, reg = f"block_{a}", f"reg_{a}"
            if block not in values or reg not in values:
                continue
            b, r = params[block], params[reg]
            for nb, nr in ((b // 2, r * 2), (b * 2, r // 2)):
                if nb * nr == b * r and nb in values[block] and nr in values[reg]:
                    yield (block, nb), (reg, nr)

    def _result(self, best, scored, stats) -> SearchResult:
        if best.bound is None:  # found by the local search, which scores estimates alone
            best = replace(best, bound=self.model.bound(best.params).seconds)
            winner = identity(best.params)
            scored = [best if identity(c.params) == winner else c for c in scored]
        p = self.program
        return SearchResult(p.original.source, dict(p.expression_sizes), p.dtype, p.layout,
                            self.gpu, best, tuple(scored), stats, p.precision)


def search_program(program: Program, gpu: str | Gpu = "H100", *,
                   strategy: str = DEFAULT_STRATEGY, values: Mapping[str, tuple] | None = None,
                   progress: Progress | None = None,
                   max_nodes: int | None = None, budget: float | None = None,
                   seeds: Sequence[Mapping[str, Any]] = ()) -> SearchResult:
    """The fastest predicted candidates for ``program`` on ``gpu``, by branch and bound over
    the declared values of every parameter (``values`` narrows some), within ``max_nodes``
    nodes and ``budget`` seconds (None for both: the complete search); a stopped search
    starts from ``seeds`` too (parameters of similar problems' winners, those the space holds).

    Only candidates come back, nothing compiled: generating, walking and timing kernels is the
    API's part (:func:`treduda.search`).
    """
    results = [Searcher(program, gpu, offer, values, restrict=False, seeds=seeds)
               .branch_and_bound(progress, max_nodes, budget)
               for offer in offered(program, find_gpu(gpu), strategy, values)]
    return results[0] if len(results) == 1 else _merged(results)


def offered(program: Program, gpu: Gpu, strategy: str = DEFAULT_STRATEGY,
            values: Mapping[str, tuple] | None = None) -> tuple[str, ...]:
    """The strategies a search for ``strategy`` ranks: it, and beside the default (where no
    ``values`` narrow it) the tensor-core mapping wherever ``gpu`` has tensor cores for the
    program's dtype and precision. Its space is a few hundred points, searched completely."""
    if strategy == DEFAULT_STRATEGY and not values and mma_model.applies(program, gpu):
        return strategy, TENSOR_CORES
    return (strategy,)


def _merged(results: Sequence[SearchResult]) -> SearchResult:
    """One result of the searches of several strategies: the fastest winner, every candidate,
    the statistics added up (complete where every search was)."""
    best = min((r.best for r in results), key=Candidate.key)
    stats = [r.stats for r in results]
    lowers = [s.lower for s in stats]
    cuts: dict[str, int] = {}
    for s in stats:
        for name, count in s.cuts_per_depth.items():
            cuts[name] = cuts.get(name, 0) + count
    counts = ("space_size", "nodes_visited", "candidates_scored", "polished", "improvements",
              "seeded", "seconds")
    total = SearchStats(
        **{name: sum(getattr(s, name) for s in stats) for name in counts},
        space_size_exact=all(s.space_size_exact for s in stats),
        complete=all(s.complete for s in stats), cuts_per_depth=cuts,
        lower=None if None in lowers else min(lowers))
    return replace(results[0], best=best,
                   candidates=tuple(c for r in results for c in r.candidates), stats=total)


def worth_checking(program: Program, result: SearchResult) -> bool:
    """Whether ptxas's report on ``result``'s winner can change its estimate: where the
    registers the model predicts reach :data:`CHECK_REGISTERS` of the launch bounds' cap
    (tccg_28's winner: 126 of 128 predicted, ptxas spilled; tccg_15's: 113 of 128, 16 bytes
    spilled), or spill already. Well below the cap, ptxas's count moves neither."""
    best = result.best
    return model_of(program, result.gpu, best.strategy).register_pressure(
        best.params) >= CHECK_REGISTERS


def first_candidate(program: Program, gpu: str | Gpu = "H100", *,
                    max_nodes: int = 300) -> Candidate | None:
    """The search's first incumbent, one dive within ``max_nodes`` (over the searched values,
    then over all where those lead nowhere), or None: a step's cost for the path planner
    (:mod:`treduda.tuning.paths`), which compares hundreds of steps and cannot search each.
    A dive takes milliseconds; where small extents rule out the searched values, an
    unbounded dive can take seconds backing out of dead ends."""
    for restrict in (True, False):
        try:
            searcher = Searcher(program, gpu, restrict=restrict)
        except StrategyError:
            continue
        found = searcher._dive(SearchStats(0, False), max_nodes=max_nodes)
        if found is not None:
            return found
    return None
