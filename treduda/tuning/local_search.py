"""The local search a budgeted search ends with: a race of seeds, then hill climbing.

Once its budget stops the tree (:mod:`treduda.tuning.search`), the search improves the best
candidate of every mapping by changing one parameter, a thread-register trade or the last
decisions together, then two parameters, while the estimate improves, always climbing on from
the fastest seed that can still improve (:meth:`LocalSearch._polish`); at a local optimum, from
its tiles on other axes (:meth:`LocalSearch._transposed`), and from those of the race's other
optima (:meth:`LocalSearch._rivals`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from ..polyhedral.strategy import Parameter, Role
from .budgets import SEED_DIVES
from .search_result import Candidate, SearchStats, identity

# The race's local optima within this share of the fastest are its rivals: their tiles on other
# axes climb before the fastest's two-change climb (LocalSearch._rivals), the others' after it.
# Near ties by the model are alternatives the model cannot tell apart (tccg_35/38: 0.1% and
# 0.3%); climbing every optimum's twins first left the fastest's climb too little of the
# default budget (tccg_01: 0.0955 -> 0.1031 ms, tccg_15 +1.6%).
RIVALS = 0.02
# A dive scores every completion of a node with at most this many below it (the buffers and
# code decisions, which the floor cannot tell apart, as the estimate can); the local search
# changes as many of the last decisions together (LocalSearch._finishes).
FINISH = 128


class LocalSearch:
    """The local search of :class:`~treduda.tuning.search.Searcher`, which mixes it in: it
    reads the searcher's ``space``, ``work`` and what its ``strategy`` declares (twins, the
    parameters' roles) and scores through its ``candidate``, ``_dive``, ``_floor`` and
    ``_below``."""

    def _polish(self, best: Candidate, scored: list[Candidate], stats: SearchStats,
                limit: int, deadline: int | None = None) -> Candidate:
        """Local search after the tree, from the best candidate of every mapping (the first
        decision), within ``limit`` candidates and ``deadline``. First a race for half of
        them: the seed that is fastest now moves to a faster neighbour of its mapping (one
        change, or the last decisions: :meth:`_step`) until it has none, and then the next
        fastest does; then the race's optima within :data:`RIVALS` of the fastest climb
        from their tiles on other axes (:meth:`_rivals`), the fastest of all climbs on, two
        changes at a time too (:meth:`_climb`), and the other optima from their tiles on
        other axes; what the climbs leave goes back to the race, and the same again.
        Best-first with a loose bound spends a budget under one or two mappings: on
        tccg_31/34/37/42/45/48 it never reached the GETT grouping "a*b_c" on x, 27% faster
        (predicted) once a seed of it climbed. The race spends nothing on seeds slower than
        the local optima of faster ones, and climbs each seed it starts to such an optimum
        (about 100 candidates on tccg_03), where rounds of successive halving compared
        seeds after equal shares of 2 to 20 candidates: tccg_03's "a,c,d" seed, 22% above
        the best at first, 1.9% once climbed, lost to seeds that ended 2.6-2.8% above it."""
        seeds = self._seeds(scored, stats, deadline)
        seen = {c.text for c in scored}
        cap = stats.polished + limit
        race = (stats.polished + limit // 2,  # half of what the seeds' dives left
                self.work.halfway(deadline))
        # Seeds of one predicted time are look-alikes (mappings alike but for a symmetry of
        # the sizes): their climbs end alike, so the race climbs one of them (tccg_35's first
        # four climbs were two such pairs, 350 candidates each, where the count of registers
        # that agrees with ptxas ranks them first).
        alike = {c.prediction.seconds: c for c in sorted(seeds, key=Candidate.key, reverse=True)}
        heap = [(c.key(), c) for c in alike.values()]
        heapq.heapify(heap)
        optima: list[Candidate] = []  # the race's local optima, one of each predicted time
        for end in (race, (cap, deadline)):  # the climbs' leftovers go back to the race
            while heap:  # (key, candidate): keys differ (they end with the parameters' text)
                key, seed = heapq.heappop(heap)
                faster = self._step(seed, scored, seen, stats, 1, *end, mapped=True)
                if faster is None and self._spent(stats, *end):
                    heapq.heappush(heap, (key, seed))
                    break
                best = min(best, seed, key=Candidate.key)
                if faster is not None:
                    heapq.heappush(heap, (faster.key(), faster))
                elif all(o.prediction.seconds != seed.prediction.seconds for o in optima):
                    optima.append(seed)
            best = min([best, *(seed for _, seed in heap)], key=Candidate.key)
            best = self._rivals(best, optima, scored, seen, stats, cap, deadline, RIVALS)
            best = self._climb(best, scored, seen, stats, cap, deadline)
            best = self._rivals(best, optima, scored, seen, stats, cap, deadline)
        return self._finished(best, scored, seen, stats)

    def _rivals(self, best: Candidate, optima: list[Candidate], scored: list[Candidate],
                seen: set[str], stats: SearchStats, cap: int, deadline: int | None,
                within: float | None = None) -> Candidate:
        """``best``, or the fastest kernel climbed from the twins on other axes
        (:meth:`_transposed`) of the race's local ``optima`` (where ``within`` is given, those
        slower than ``best`` by at most that share), fastest first, within ``cap`` and
        ``deadline`` (each optimum is tried once: ``optima`` loses those tried). A
        mapping's seed is scored with tiles another mapping's dive chose, and a race climbs
        from a seed to its nearest optimum: tccg_35's race ended "a*b,c,d" at 256 x 2
        threads x registers along x (0.1594 ms predicted, second of its optima); its tiles
        with a*b on y, climbed, are the best the search finds (0.1444 ms), whose seed (its
        mapping's best dive, 0.395 ms) ranked 17th of 252 and was never climbed. Those near
        ``best`` climb before its two-change climb: on tccg_38 that climb took 650 candidates
        and its own twins 700 more, leaving none for the second optimum (0.3% slower), whose
        tiles with e_f on x climb to 0.1415 ms against 0.1485."""
        while not self._spent(stats, cap, deadline):
            fastest = best.prediction.seconds
            near = [o for o in optima if within is None
                    or fastest < o.prediction.seconds <= fastest * (1 + within)]
            if not near:
                break
            optimum = min(near, key=Candidate.key)
            optima.remove(optimum)
            found = self._transposed(optimum, scored, seen, stats, cap, deadline)
            if found is not None and found.prediction.seconds < best.prediction.seconds:
                best = found
        return best

    def _finished(self, best: Candidate, scored: list[Candidate], seen: set[str],
                  stats: SearchStats) -> Candidate:
        """The winner with its last decisions settled even where the budget stopped the
        climb: the best of its completions by them (:meth:`_finishes`, at most :data:`FINISH`,
        those not scored yet), which cost little and which the floor cannot tell apart. GEMM
        4096^3's climb stopped at a single-buffered winner (2.852 ms predicted) whose
        double-buffered twin (2.835 ms) it had not scored; ptxas spills 16 bytes of the
        first and none of the second."""
        for change in self._finishes(best.params):
            candidate = self._scored({**best.params, **dict(change)}, scored, seen, stats)
            if candidate is not None and candidate.key() < best.key():
                stats.improvements += 1
                best = candidate
        return best

    def _scored(self, params: dict[str, Any], scored: list[Candidate], seen: set[str],
                stats: SearchStats) -> Candidate | None:
        """``params`` scored (kept in ``scored`` and ``seen``, counted as polished), or None
        where it was ``seen`` already."""
        known = identity(params)
        if known in seen:
            return None
        seen.add(known)
        candidate = self.candidate(params, with_bound=False)
        scored.append(candidate)
        stats.polished += 1
        return candidate

    def _seeds(self, scored: list[Candidate], stats: SearchStats,
               deadline: int | None = None) -> list[Candidate]:
        """The best scored candidate of every value of the first decision (the mapping) whose
        floor can beat the fastest, where none was scored a dive from it, lowest floor
        first, until the dives have taken :data:`SEED_DIVES` of the work left before
        ``deadline``; after that, the fastest candidate moved to the mapping (its other values
        where they fit: the space's nearest valid candidate; a dive where it has none). A dive
        costs 70-170 work (its floors, then its last decisions scored): on tccg_03 and tccg_28
        the dives of 13 of their 28 mappings took what the tree left of the default budget,
        the race scored 30 candidates and ended 43% and 31% above the best a 10 s search
        finds; a moved seed costs one estimate."""
        first = self.space.parameters[0].name
        seeds: dict[Any, Candidate] = {}
        for candidate in scored:
            value = candidate.params[first]
            if value not in seeds or candidate.key() < seeds[value].key():
                seeds[value] = candidate
        fastest = min(seeds.values(), key=Candidate.key, default=None)
        open_ = sorted((self._floor({first: value}), index, value)
                       for index, value in enumerate(self.space.parameters[0].values)
                       if value not in seeds)
        dives = (None if deadline is None else
                 self.work.done + round(max(deadline - self.work.done, 0) * SEED_DIVES))
        for floor, _, value in open_:
            if fastest is not None and floor > fastest.prediction.seconds:
                break  # nothing of this mapping, nor of those after it, is faster
            moved = (self.space.complete({first: value}, fastest.params)
                     if fastest is not None and self.work.spent(dives) else None)
            found = (self.candidate(moved, with_bound=False) if moved is not None
                     else self._dive(stats, {first: value}, deadline=deadline))
            if found is not None:
                scored.append(found)
                seeds[value] = found
                fastest = min(fastest or found, found, key=Candidate.key)
        return list(seeds.values())

    def _climb(self, best: Candidate, scored: list[Candidate], seen: set[str],
               stats: SearchStats, cap: int, deadline: int | None = None) -> Candidate:
        """Hill climbing: move to a faster neighbour (:meth:`_step`, up to two changes) until
        none is (a local optimum) or :attr:`SearchStats.polished` reaches ``cap``. On TCCG's
        rows the best kernels lie close to a good incumbent, in a few coupled changes (a
        register tile grown while the threads shrink), that best-first with a loose bound
        reaches late (tccg_01 after 3000 nodes: 0.181 ms predicted, optimum 0.095 ms)."""
        while (faster := self._step(best, scored, seen, stats, 2, cap, deadline)
               or self._transposed(best, scored, seen, stats, cap, deadline)) is not None:
            best = faster
        return best

    def _transposed(self, best: Candidate, scored: list[Candidate], seen: set[str],
                    stats: SearchStats, cap: int, deadline: int | None) -> Candidate | None:
        """The first of ``best``'s twins on other axes (:meth:`_twins`) that, climbed one
        change at a time (:meth:`_step`), ends faster than ``best``; None where none does. A
        twin computes the same tiles with other threads along the memory's fastest axis, so it
        is seldom faster itself, and the climb from ``best`` moves to it only within two
        changes of the tiles: tccg_42's climb stopped at "b_c,a,e_f", 4 x 8 and 8 x 1 threads
        x registers along x and y (0.1477 ms predicted); its twin on "a,b_c,e_f" (0.1807 ms)
        climbs to 8 x 8 along b_c (0.1471 ms, 85% FFMA where the first has 78%). A twin's
        climb may leave its mapping, as the race's may not (one change at a time, mappings
        last): kept to theirs, the 3000-node searches of tccg_04 and tccg_21 ended at 0.1293
        and 21.64 ms predicted, short of the kernels they now reach (0.1287, 21.45)."""
        for twin in self._twins(best.params):
            candidate = self._scored(twin, scored, seen, stats)
            if candidate is None:
                continue
            while (faster := self._step(candidate, scored, seen, stats, 0, cap,
                                        deadline)) is not None:
                candidate = faster
            if candidate.prediction.seconds < best.prediction.seconds:  # not a look-alike
                return candidate
        return None

    def _twins(self, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The valid candidates of the strategy's twins of ``params``
        (:meth:`~treduda.polyhedral.strategy.Strategy.twins`: the tiled mapping's groups on
        other axes, each axis's threads, registers and assignment moved along)."""
        for change in self.strategy.twins(params, self.space):
            if not self.space.breaks(params, change):
                yield {**params, **change}

    def _roles(self, role: Role) -> dict[str, Parameter]:
        """The space's parameters of ``role`` (:attr:`Parameter.role`, what the strategy
        declares of them) by their axis, in the order of the decisions."""
        return {p.axis: p for p in self.space.parameters if p.role is role}

    def _spent(self, stats: SearchStats, cap: int, deadline: int | None) -> bool:
        """Whether the local search has scored ``cap`` candidates or its work reached
        ``deadline``."""
        return stats.polished >= cap or self.work.spent(deadline)

    def _step(self, best: Candidate, scored: list[Candidate], seen: set[str],
              stats: SearchStats, level: int, cap: int,
              deadline: int | None, mapped: bool = False) -> Candidate | None:
        """The first neighbour of ``best`` not ``seen`` yet that is faster, scoring the
        neighbourhoods of :meth:`_neighbours` up to ``level`` in turn (one change or a trade,
        the last decisions together, two changes), of its own mapping where ``mapped``; None
        at a local optimum of those, or once :meth:`_spent`."""
        for params in itertools.chain.from_iterable(
                self._neighbours(best.params, n, mapped) for n in range(level + 1)):
            if self._spent(stats, cap, deadline):
                return None
            candidate = self._scored(params, scored, seen, stats)
            if candidate is not None and candidate.key() < best.key():
                stats.improvements += 1
                return candidate
        return None

    def _neighbours(self, params: Mapping[str, Any], level: int,
                    mapped: bool = False) -> Iterator[dict[str, Any]]:
        """The valid candidates that differ from ``params`` in one parameter, or trade threads
        for registers along an axis keeping its tile (twice the registers, half the threads,
        or the reverse: the coupled change by which the best kernels differ from good ones,
        GEMM 4096^3: 32 x 4 threads x registers along x at 3.45 ms, 16 x 8 at 3.07 ms), or
        stage other operands with other threads along one axis (:meth:`_restagings`);
        at ``level`` 1 in any of the last decisions (:meth:`_finishes`), at 2 in two other
        than the mapping. ``mapped`` keeps the mapping at every level: a race's seeds are
        every mapping's best, and 204 of a failed step's 261 neighbours on tccg_35 were
        other mappings.

        Changes of the last decisions come first, of the first decision (the mapping) last:
        the local search starts from the best candidate of every mapping, and a climb mostly
        moves tiles, steps and buffers; on tccg_03 a climb found each faster neighbour
        after 16 candidates where it took 30, and its first two-change move after 130
        where it took 600."""
        # Two changes keep a mapping that is an order of groups: with another change, its
        # hundreds of values gave thousands of pairs, and tccg_35's last failed two-change
        # step spent 1500 of the budget's 3000 candidates on them; :meth:`_transposed` moves
        # such a mapping with its tiles (the strategy says so: ``twinned``). Another
        # strategy's first decision (the tutorial's threads per block) may be paired.
        kept = 1 if mapped or level == 2 and self.strategy.twinned else 0
        others = [[(p.name, v) for v in p.values if v != params[p.name]]
                  for p in reversed(self.space.parameters[kept:])]
        changes = (itertools.chain(self._trades(params),
                                   ((change,) for change in itertools.chain(*others)),
                                   self._restagings(params), self._moves(params))
                   if level == 0 else self._finishes(params) if level == 1 else
                   itertools.chain.from_iterable(
                       itertools.product(a, b) for a, b in itertools.combinations(others, 2)))
        for change in changes:
            if not self.space.breaks(params, dict(change)):
                yield {**params, **dict(change)}

    def _finishes(self, params: Mapping[str, Any]) -> Iterator[tuple[tuple[str, Any], ...]]:
        """Every other choice of the last decisions (at most :data:`FINISH` of them: buffers,
        padding, unrolling), which depend on each other through their rules (preloading needs
        an unrolled step): one at a time, a climb can be stuck where two of them together
        are faster."""
        fixed = {p.name: params[p.name] for p in self.space.parameters[:self._decided()]}
        for point in self.space.points(fixed):
            yield tuple((name, value) for name, value in point.items() if name not in fixed)

    def _decided(self) -> int:
        """How many of the first decisions come before the last ones (:meth:`_finishes`):
        the most whose completions number more than :data:`FINISH`."""
        last = len(self.space.parameters)
        while last > 0 and self._below({p.name: 0 for p in self.space.parameters[:last - 1]}
                                       ) <= FINISH:
            last -= 1
        return last

    def _restagings(self, params: Mapping[str, Any]) -> Iterator[tuple[tuple[str, Any], ...]]:
        """Changes of the staged operands together with the block's threads along one axis:
        more threads where more operands are staged, fewer where fewer. A staged tile pays
        only where the block's threads share it, and an operand is best read unstaged where
        a block has one thread along the axes that reuse it, so neither change alone may
        improve a candidate that both together do. tccg_07's climb stopped at A unstaged and
        one thread along d (0.3305 ms predicted), staging A or four threads along d one at a
        time slower (0.937, 0.360 ms), both at once faster (0.3176 ms: the slab-padded
        kernel)."""
        blocks = self._roles(Role.THREAD).values()
        for staging in self._roles(Role.STAGE).values():
            staged = set(filter(None, params[staging.name].split(",")))
            for stage in staging.values:
                other = set(filter(None, stage.split(",")))
                more = other > staged  # more operands staged: more threads
                if not (more or other < staged):
                    continue
                for block in blocks:
                    for threads in block.values:
                        if threads != params[block.name] and (
                                threads > params[block.name]) == more:
                            yield (staging.name, stage), (block.name, threads)

    def _moves(self, params: Mapping[str, Any]) -> Iterator[tuple[tuple[str, Any], ...]]:
        """Changes that move half the threads along one axis to another and keep the block's
        threads, the first axis's tile with them (its registers doubled) or not: the tile grows
        along the second axis, and where its staged tiles no longer fit the buffers, the last
        decisions are settled anew (the nearest valid ones). One change at a time passes
        through a block of half or twice the threads, whose occupancy the registers decide,
        so where the predicted registers move, so do the climbs that pass there: tccg_36's
        race stopped at "d,a_b,f", 2 x 4 and 32 x 4 threads x registers along x and y, double
        buffered (0.1462 ms predicted); 1 x 8 and 64 x 4, single buffered, is faster (0.1438
        ms: the pick of the count before)."""
        values = {p.name: p.values for p in self.space.parameters}
        fixed = [p.name for p in self.space.parameters[:self._decided()]]
        blocks, registers = self._roles(Role.THREAD), self._roles(Role.REGISTER)
        for a, b in itertools.permutations(blocks, 2):
            if a not in registers:
                continue
            names = (blocks[a].name, registers[a].name, blocks[b].name)
            fewer, more = params[names[0]] // 2, params[names[2]] * 2
            if fewer * 2 != params[names[0]] or fewer not in values[names[0]] \
                    or more not in values[names[2]]:
                continue
            moves = [{names[0]: fewer, names[2]: more}]
            if params[names[1]] * 2 in values[names[1]]:
                moves.append({**moves[0], names[1]: params[names[1]] * 2})
            for move in moves:
                if self.space.breaks(params, move):
                    settled = self.space.complete(
                        {**{name: params[name] for name in fixed}, **move}, params)
                    if settled is None:
                        continue
                    move = {k: v for k, v in settled.items() if v != params[k]}
                yield tuple(move.items())

    def _trades(self, params: Mapping[str, Any]) -> Iterator[tuple[tuple[str, Any], ...]]:
        """Changes that trade threads for registers along an axis and keep its tile, then
        those that make both trades along two axes at once, the other way along the second:
        the block's threads and a thread's registers stay, the block's tile changes shape.
        tccg_25's climb stopped at 4 x 8 and 8 x 4 threads x registers along x and y (21.65 ms
        predicted), both trades one at a time slower, both at once faster (21.31 ms), and
        from there staging B alone at step 8 (20.50 ms)."""
        values = {p.name: p.values for p in self.space.parameters}
        blocks, registers = self._roles(Role.THREAD), self._roles(Role.REGISTER)
        single = {}
        for a in blocks:
            if a not in registers:
                continue
            block, reg = blocks[a].name, registers[a].name
            b, r = params[block], params[reg]
            single[a] = [((block, nb), (reg, nr)) for nb, nr in ((b // 2, r * 2), (b * 2, r // 2))
                         if nb * nr == b * r and nb in values[block] and nr in values[reg]]
        for trades in single.values():
            yield from trades
        for a, b in itertools.combinations(single, 2):
            for one, other in itertools.product(single[a], single[b]):
                if (one[0][1] > params[blocks[a].name]) != (other[0][1]
                                                            > params[blocks[b].name]):
                    yield one + other
