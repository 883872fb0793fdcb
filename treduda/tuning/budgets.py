"""What a search's time budget counts, and how the search shares it.

A budget is CPU seconds of the searching thread (:data:`clock`), read every few nodes
(:func:`expired`); the tree search (:mod:`treduda.tuning.search`) takes a share of it, first
over every declared value and then over the suggested ones, and the local search
(:mod:`treduda.tuning.local_search`) the rest. Both read the clock as ``budgets.clock`` so
that a test can replace it in one place.
"""

from __future__ import annotations

import time

# CPU seconds of search compile(), contract() and search() spend by default (budget=None: the
# complete search). From 0.8 s to 1.0 s the picks on GEMM 4096^3 and tccg_01/03/15/28/33 are
# within 1.5% of the best that minutes of search find (at 0.9 s: 1.000, 1.010, 1.010, 1.007,
# 1.007, 1.015); at 0.7 s tccg_28's is 17% off, its tree over the suggested values cut short
# (benchmarks/search_budget.py). 0.9 s keeps GEMM 4096^3's first call under a second here
# (its search ends at 0.70 s of 0.9, 0.76 of 1.0; generating its kernel takes 0.22 s).
DEFAULT_BUDGET = 0.9

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


# Under a time budget, the share of it the tree search takes; local search takes the rest. At 0.6
# of a 0.8 s budget tccg_03 ended 2.8% above the best (the seeds' dives alone take 0.23 s), at 0.4
# of it tccg_28 19% (its tree over the suggested values needs about 0.3 s).
SEARCH_SHARE = 0.5
# Under a time budget over every declared value, the share of the tree's time spent on the
# values the strategies suggest (Searcher._two_spaces).
SUGGESTED_SHARE = 0.7
