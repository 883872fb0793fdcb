"""What a search's budget counts, and how the search shares it.

A budget is work, not time: the model's predictions the search makes (:class:`Work`), so
that the same inputs give the same pick on any machine, at any load, in any process; a budget
of CPU seconds bought less search on a loaded machine, and three idle processes picked GEMM
4096^3's ``double_buffer`` differently. Users still give it in seconds (``budget=``): a fixed
rate (:data:`WORK_PER_SECOND`, measured once on the development machine, never at run time)
turns seconds into work, so a budget takes about that long on that machine and the same work
everywhere. The tree search (:mod:`treduda.tuning.search`) takes a share of it, first over
every declared value and then over the suggested ones, and the local search
(:mod:`treduda.tuning.local_search`) the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..options import DEFAULT_BUDGET as DEFAULT_BUDGET  # the budget= option's default

# The work of one prediction of the model's bound (a node's floor makes one for each order of
# the indices it leaves open: an AO->MO step's shallow nodes, dozens) and of its estimate (a
# candidate's score): in default searches on the development machine a bound's prediction
# took 0.9-1.4 ms of profiled CPU, an estimate 1.9-3.0 ms (tccg_03, GEMM 4096^3).
BOUND_WORK = 1
ESTIMATE_WORK = 3
# The work a second of budget buys: what the development machine (2 cores, shared with other
# jobs) did in a CPU second of default searches of GEMM 4096^3 and tccg_01/03/28 (3200-7100;
# GEMM's estimates cost the most), so that GEMM 4096^3's search takes about the budget.
WORK_PER_SECOND = 4000

# Problems of fewer points in their iteration space are small: their candidates differ by
# microseconds, the model's first good candidate is taken at once (search.at_once), and a path
# costs their steps by the floor of their whole space (paths.py).
SMALL_PROBLEM = 10_000_000


# The budget (seconds, as work) of the search of the quickest kernels to make (search.quick())
# that a small problem gets where its first incumbent is not good (search.at_once): enough for
# the search's first dives (258 work on AO->MO's steps at n=16, whose best is then 0.7 us
# above the floor of every strategy's space, where the first incumbent was 9 us above it).
QUICK_SEARCH = 0.05


def small(sizes: Mapping[str, int]) -> bool:
    """Whether a problem of these extents is small (:data:`SMALL_PROBLEM`)."""
    return math.prod(sizes.values()) < SMALL_PROBLEM


# The node budget of each row's search in `treduda bench`, so that one row cannot run away.
BENCH_MAX_NODES = 3000

# Under a budget, the share of it the tree search takes; local search takes the rest. The
# tree finds incumbents and the mappings' seeds; the picks come from the climb: GEMM 4096^3's
# reached its best (the complete search's) at 1486 of 2000 work at 0.2 of a 0.5 s budget, the
# same pick as at 0.5 of 0.8 s; tccg_01/03/15/33 picked the same at 0.2 and 0.3, tccg_28 15%
# faster at 0.2 (0.3 leaves its climb too little).
SEARCH_SHARE = 0.2
# The share of the work the tree leaves that the local search's seeds may spend diving into
# mappings the tree scored nothing of (LocalSearch._seeds); past it a seed is the fastest
# candidate moved to the mapping, one estimate where a dive takes 70-170 work.
SEED_DIVES = 0.1
# Under a budget over every declared value, the share of the tree's work spent on the
# values the strategies suggest (Searcher._two_spaces).
SUGGESTED_SHARE = 0.7


def work_of(seconds: float) -> int:
    """The work ``seconds`` of budget buy (:data:`WORK_PER_SECOND`), the same everywhere."""
    return round(max(seconds, 0.0) * WORK_PER_SECOND)


class Work:
    """The work one search has done so far: the model's predictions, weighted
    (:data:`BOUND_WORK`, :data:`ESTIMATE_WORK`). The two tree searches of a budgeted search
    (:meth:`~treduda.tuning.search.Searcher._two_spaces`) count on one."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = 0

    def deadline(self, seconds: float | None, share: float = 1.0) -> int | None:
        """When ``share`` of a budget of ``seconds`` (None: no budget) started now ends."""
        return None if seconds is None else self.done + round(work_of(seconds) * share)

    def after_tree(self, end: int | None, seconds: float | None) -> int | None:
        """The local search's deadline once the tree stopped: the budget's ``end``, or where
        the tree's work reached it already, the local search's share of ``seconds`` (1 -
        :data:`SEARCH_SHARE`) from now. An enumerating model's first bound lists every
        completion of the space (:class:`~treduda.strategies.tensorcore_model.
        EnumeratingModel`): tccg_13 fp16's warpgroup space, 3078 candidates once its splits
        fill the SMs, took 1.5 default budgets at the root, and its search ended at the first
        dive's kernel, never climbing (two warpgroups of one accumulator, 0.08938 ms, where
        one of two is 0.08928 ms); the climb then costs no work, every estimate remembered."""
        if end is None or self.done < end:
            return end
        return self.deadline(seconds, 1 - SEARCH_SHARE)

    def halfway(self, deadline: int | None) -> int | None:
        """Half way from now to ``deadline``."""
        return None if deadline is None else self.done + max(deadline - self.done, 0) // 2

    def spent(self, deadline: int | None) -> bool:
        """Whether the work has reached ``deadline`` (never, for None)."""
        return deadline is not None and self.done >= deadline
