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
estimate improves), always climbing on from the fastest seed that can still improve
(:mod:`treduda.tuning.local_search`); :mod:`treduda.tuning.budgets` says what a budget counts
and how the tree and the local search share it. The candidates and the result a search
returns are :mod:`treduda.tuning.search_result`'s.
"""

from __future__ import annotations

import heapq
import itertools
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import StrategyError
from ..model.gpus import Gpu
from ..model.gpus import gpu as find_gpu
from ..model.interface import capable
from ..model.model import model_of
from ..model.prediction import LAUNCH_SECONDS, Prediction
from ..polyhedral.lower import Program
from ..polyhedral.strategy import DEFAULT_STRATEGY, Limits, Parameter, ParamSpace, marked
from ..strategies import get as get_strategy
from .budgets import (
    BOUND_WORK,
    DEFAULT_BUDGET,
    ESTIMATE_WORK,
    QUICK_SEARCH,
    SEARCH_SHARE,
    SUGGESTED_SHARE,
    Work,
)
from .local_search import FINISH, LocalSearch
from .search_result import Candidate, SearchResult, SearchStats

# Under a node budget, every this many nodes the search dives from the open node with the lowest
# bound to a complete candidate: best-first alone, with a loose bound, may spend a whole budget
# above the leaves and return only its first incumbent.
DIVE_INTERVAL = 250
# A dive takes the values a strategy suggests first among children whose floors are within
# this share of the lowest: early floors barely separate tiles, and the suggestions are sound.
NEAR = 0.01
# The predictions a searcher remembers (Searcher._charged), the latest: a node's bound is asked
# for again soon after, if at all.
PREDICTIONS_KEPT = 4096

Progress = Callable[[int, int, float], None]  # nodes visited, candidates scored, best seconds


class Searcher(LocalSearch):
    """The search space of one planned, fixed-size program on one GPU, searchable and
    enumerable: with ``restrict`` (the default here, for spaces small enough to enumerate) the
    values each strategy suggests (:attr:`Parameter.searched`), else every declared value
    (what :func:`search_program`, so compile(), searches); ``values`` narrows parameters."""

    def __init__(self, program: Program, gpu: str | Gpu = "H100",
                 strategy: str = DEFAULT_STRATEGY, values: Mapping[str, tuple] | None = None,
                 restrict: bool = True, seeds: Sequence[Mapping[str, Any]] = (),
                 work: Work | None = None):
        if program.symbolic:
            raise StrategyError("the search ranks kernels for fixed sizes; plan the program "
                                "with sizes, not symbolic=True")
        self.gpu = find_gpu(gpu)
        self.program = program
        limits = Limits(threads_per_block=self.gpu.max_threads_per_block,
                        sm_count=self.gpu.sm_count,
                        shared_per_block=self.gpu.shared_per_block,
                        dynamic_shared_per_block=self.gpu.shared_per_block_optin,
                        registers_per_thread=self.gpu.max_registers_per_thread,
                        async_copies=self.gpu.async_copies,
                        warpgroup_mma=self.gpu.warpgroup_mma)
        self.strategy = get_strategy(strategy, limits)
        full = self.strategy.space(self.program)
        unknown = sorted(set(values or {}) - {p.name for p in full.parameters})
        if unknown:
            raise StrategyError(f"'{strategy}' has no parameter(s) {unknown}; it has: "
                                f"{', '.join(p.name for p in full.parameters)}")
        for p in full.parameters:
            if p.name in (values or {}) and not set(values[p.name]) & set(p.values):
                raise StrategyError(f"'{strategy}' offers {p.name} {list(p.values)} here, not "
                                    f"{list(values[p.name])}")
        wanted = {p.name: p.searched for p in full.parameters if restrict and p.searched}
        # The values each strategy suggests trying first, among the declared ones.
        self._suggested = {p.name: frozenset(p.searched) for p in full.parameters if p.searched}
        wanted.update(values or {})
        ordered = sorted(full.parameters, key=lambda p: p.priority)  # stable: the space's order
        self.space = ParamSpace(tuple(
            Parameter(p.name, tuple(v for v in p.values if v in wanted.get(p.name, p.values)),
                      p.doc, priority=p.priority, role=p.role, axis=p.axis) for p in ordered),
            full.constraints)
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
        self.work = Work() if work is None else work  # what a budget counts (budgets.py)
        # The latest predictions by kind and parameters, with the work each counted: a dive
        # and the tree, or a seed and the local search, ask for some twice (GEMM 4096^3: 124
        # of 2079). A searcher searches on one thread.
        self._predicted: dict[tuple[str, tuple], tuple[Prediction, int]] = {}

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
        bound = self._charged(BOUND_WORK, self.model.bound, params).seconds if with_bound \
            else None
        return Candidate(self.strategy.name, dict(params),
                         self._charged(ESTIMATE_WORK, self.model.estimate, params), bound)

    def _charged(self, weight: int, evaluate: Callable[[Mapping[str, Any]], Prediction],
                 params: Mapping[str, Any]) -> Prediction:
        """``evaluate(params)``, its predictions (``model.evaluations``: a bound makes one per
        order it leaves open; a model that ``remembers`` (:data:`~treduda.model.interface.
        CAPABILITIES`) makes none for what it predicted before) counted as ``weight`` work each in
        :attr:`work`, also where it was remembered (:attr:`_predicted`) and the model would
        predict it again, so that the budget buys the same search."""
        key = (evaluate.__name__, tuple(params.items()))  # a dict of another order: recomputed
        known = self._predicted.get(key)
        if known is None:
            before = self.model.evaluations
            prediction, work = evaluate(params), weight * (self.model.evaluations - before)
            if len(self._predicted) >= PREDICTIONS_KEPT:
                del self._predicted[next(iter(self._predicted))]  # the oldest
            self._predicted[key] = prediction, 0 if capable(self.model, "remembers") else work
            self.work.done += work
            return prediction
        self.work.done += known[1]
        return known[0]

    def _floor(self, params: Mapping[str, Any]) -> float:
        """The least estimate of any completion of ``params`` (:attr:`Prediction.floor`)."""
        bound = self._charged(BOUND_WORK, self.model.bound, params)
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
        """Best-first branch and bound; ``max_nodes`` nodes or ``budget`` seconds (as work:
        :func:`~treduda.tuning.budgets.work_of`) stop it early
        (the stats say so, and how far from the space's optimum its winner can be at most).

        Under a budget, :data:`SEARCH_SHARE` of it goes to the tree (over every declared value
        and the suggested ones apart: :meth:`_two_spaces`) and the rest to the local search
        around the best candidates found (:meth:`_polish`). Without either, the search is
        complete; it starts from the winner of a search within :data:`DEFAULT_BUDGET`, whose
        estimate cuts most of the tree at once."""
        started = time.perf_counter()
        if budget is not None and self._wider:
            return self._two_spaces(progress, max_nodes, budget)
        end = self.work.deadline(budget)
        best, scored, stats, floors = self._tree(progress, max_nodes,
                                                 self.work.deadline(budget, SEARCH_SHARE))
        if not stats.complete:
            best = self._polish(best, scored, stats, self._limit(max_nodes),
                                self.work.after_tree(end, budget))
        return self._finish(best, scored, stats, floors, started, progress)

    def _tree(self, progress: Progress | None, max_nodes: int | None,
              deadline: int | None) -> tuple[Candidate, list[Candidate], SearchStats,
                                               list[float]]:
        """The branch and bound itself, until ``max_nodes`` nodes or the ``deadline`` of its
        work (:class:`~treduda.tuning.budgets.Work`): its best
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
                    or self.work.spent(deadline)):
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
        ``max_nodes`` nodes each (as many as they visited), or by their work alone (no count:
        its deadline stops it)."""
        return sys.maxsize if max_nodes is None else max(max_nodes * trees, 2)

    def _finish(self, best: Candidate, scored: list[Candidate], stats: SearchStats,
                floors: Sequence[float], started: float,
                progress: Progress | None) -> SearchResult:
        """The result of a search that began at ``started`` and left nodes of ``floors``
        open."""
        stats.lower = min([best.prediction.seconds, *floors])
        stats.candidates_scored = len(scored)
        stats.seconds = time.perf_counter() - started
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
        started = time.perf_counter()
        end, tree = self.work.deadline(budget), self.work.deadline(budget, SEARCH_SHARE)
        best, scored, stats, floors = self._tree(
            progress, max_nodes, self.work.deadline(budget, SEARCH_SHARE * (1 - SUGGESTED_SHARE)))
        if not stats.complete:
            try:
                narrow = Searcher(*self._arguments, work=self.work)._tree(None, max_nodes, tree)
            except StrategyError:  # small extents rule out every suggested value
                narrow = None
            trees = 1
            if narrow is not None:
                best = min(best, narrow[0], key=Candidate.key)
                scored += narrow[1]
                stats.nodes_visited += narrow[2].nodes_visited
                trees = 2
            best = self._polish(best, scored, stats, self._limit(max_nodes, trees),
                                self.work.after_tree(end, budget))
        return self._finish(best, scored, stats, floors, started, progress)

    def _later(self, name: str, value: Any) -> float:
        """0 for a value the strategy suggests trying first (:attr:`Parameter.searched`), a
        sliver of a second for the others: equal floors are taken suggested values first."""
        suggested = self._suggested.get(name)
        return 0.0 if suggested is None or value in suggested else 1e-12

    def _dive(self, stats: SearchStats, start: Mapping[str, Any] | None = None,
              max_nodes: int | None = None, deadline: int | None = None) -> Candidate | None:
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
                    or visited and self.work.spent(deadline)):
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

    def _result(self, best, scored, stats) -> SearchResult:
        if best.bound is None:  # found by the local search, which scores estimates alone
            best = replace(best, bound=self.model.bound(best.params).seconds)
            scored = [best if c.text == best.text else c for c in scored]
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
    """The strategies a search for ``strategy`` ranks: it, and beside the default every
    registered strategy marked :attr:`~treduda.polyhedral.strategy.Strategy.offered` that
    :meth:`~treduda.polyhedral.strategy.Strategy.applies` (the tensor-core mapping, wherever
    ``gpu`` has tensor cores for the program's dtype and precision: its space is a few hundred
    points, searched completely). ``values`` narrow these to the strategies that have every
    parameter they name (`treduda bench --hold staged_b=True`: the warpgroup mapping's), or
    to the default, whose search then says which parameters it has."""
    if strategy != DEFAULT_STRATEGY:
        return (strategy,)
    names = (strategy, *(name for name in marked("offered")
                         if get_strategy(name).applies(program, gpu)))
    if not values:
        return names
    having = tuple(name for name in names if set(values) <= {
        p.name for p in get_strategy(name).space(program).parameters})
    return having or (strategy,)


def quick() -> str:
    """The strategy a small problem's kernel is first looked for in (:func:`at_once`): the
    registered one marked :attr:`~treduda.polyhedral.strategy.Strategy.quick`."""
    return marked("quick")[0]


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


def first_candidate(program: Program, gpu: str | Gpu = "H100", *, max_nodes: int = 300,
                    strategy: str = DEFAULT_STRATEGY,
                    stats: SearchStats | None = None) -> Candidate | None:
    """The search's first incumbent, one dive within ``max_nodes`` (over the searched values,
    then over all where those lead nowhere), or None: a step's cost for the path planner
    (:mod:`treduda.tuning.paths`), which compares hundreds of steps and cannot search each.
    A dive takes milliseconds; where small extents rule out the searched values, an
    unbounded dive can take seconds backing out of dead ends. ``stats`` counts the nodes."""
    for restrict in (True, False):
        try:
            searcher = Searcher(program, gpu, strategy, restrict=restrict)
        except StrategyError:
            continue
        found = searcher._dive(stats or SearchStats(0, False), max_nodes=max_nodes)
        if found is not None:
            return found
    return None


def at_once(program: Program, gpu: str | Gpu = "H100", *,
            max_nodes: int = 300) -> SearchResult | None:
    """The model's first good candidate as the search's answer, where no candidate can beat
    it by a launch's overhead: the first incumbent (:func:`first_candidate`), among the
    kernels quickest to make first (:func:`quick`), taken where its estimate is within
    :data:`LAUNCH_SECONDS` of the least estimate any candidate of the strategies offered can
    have (each model's ``least``). None where it is not, and a search must tell.
    On small problems the first incumbent's estimate is mostly within a microsecond of that
    floor (a ring step of extents 2-5: 0.2 us; GEMM 64x80x48: 0.5 us; AO->MO at n=16: 0.4
    us), where the search took seconds to rank candidates that differ by less than a launch;
    where a step's first incumbent reads across strides (AO->MO's middle index at n=16: 12 us
    against a floor of 3.3), a search of the quick strategy within :data:`QUICK_SEARCH` (258
    work, 0.03 s) finds one (4.0 us) and it is taken, where the search of every strategy
    took 0.37 s to pick a tensor-core kernel 0.03 us faster that took twice as long to
    generate."""
    g = find_gpu(gpu)
    started = time.perf_counter()
    wholes = [Searcher(program, g, offer, restrict=False) for offer in offered(program, g)]
    stats = SearchStats(sum(w.space.size() for w in wholes), False, complete=False,
                        candidates_scored=1, lower=min(w.model.least() for w in wholes))
    for strategy in (quick(), DEFAULT_STRATEGY):
        found = first_candidate(program, g, max_nodes=max_nodes, strategy=strategy, stats=stats)
        if found is not None and found.prediction.seconds <= stats.lower + LAUNCH_SECONDS:
            stats.seconds = time.perf_counter() - started
            return Searcher(program, g, strategy, restrict=False)._result(found, [found], stats)
    try:
        searched = Searcher(program, g, quick(), restrict=False).branch_and_bound(
            budget=QUICK_SEARCH)
    except StrategyError:  # the quick strategy has no candidate that fits these extents
        return None
    if searched.best.prediction.seconds > stats.lower + LAUNCH_SECONDS:
        return None
    stats.nodes_visited += searched.stats.nodes_visited
    stats.candidates_scored += searched.stats.candidates_scored
    stats.seconds = time.perf_counter() - started
    return replace(searched, stats=stats)
