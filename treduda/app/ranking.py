"""Ranks: Spearman's correlation of estimates with measured times, and where the model's pick
among measured kernels ranks when they are timed (the fidelity tool and its held-out folds
both ask)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..model.prediction import Prediction
from ..tuning.search_result import Candidate


class Measured(Protocol):
    """A measured kernel beside its prediction (the fidelity tool's ``Outcome``)."""

    @property
    def row(self) -> Any: ...  # its id, problem, params and measured seconds

    @property
    def left_out(self) -> str | None: ...  # why it is not predicted, if it is not

    @property
    def prediction(self) -> Prediction | None: ...

    @property
    def estimate(self) -> float: ...  # seconds

    @property
    def error(self) -> float: ...  # estimate / measured - 1

    @property
    def bound(self) -> float | None: ...  # seconds


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their average rank)."""
    return _pearson(_ranks(xs), _ranks(ys))


def spearman_within_spread(estimates: Sequence[float], measured: Sequence[float],
                           spreads: Sequence[float | None]) -> tuple[float, int]:
    """Spearman's rank correlation where two measured times closer than the larger of their
    run-to-run spreads (``spreads``: (slowest - fastest) / median of each kernel's launches,
    None where not recorded) count as tied, and how many pairs are: the GPU itself does not
    order such a pair. A tied pair costs a model that orders it either way the same (an order
    the plain rho rewards costs a little here, one it punishes costs less). A kernel's
    measured rank is 1 + the kernels clearly faster + half those tied with it, which is the
    average rank where ties are transitive (closeness need not be)."""
    ranks, tied = [], 0
    for i, mine in enumerate(measured):
        ties = [j for j, other in enumerate(measured)
                if j != i and within_spread(mine, spreads[i], other, spreads[j])]
        faster = sum(other < mine for j, other in enumerate(measured) if j not in ties)
        ranks.append(1 + faster + len(ties) / 2)
        tied += len(ties)
    return _pearson(_ranks(estimates), ranks), tied // 2


def within_spread(one: float, one_spread: float | None, other: float,
                  other_spread: float | None) -> bool:
    """Whether two measured times differ by less than the larger of their run-to-run spreads
    ((slowest - fastest) / median of each kernel's launches; None where not recorded): the
    GPU itself does not order such a pair."""
    return abs(one - other) < max(one * (one_spread or 0.0), other * (other_spread or 0.0))


def _pearson(rx: Sequence[float], ry: Sequence[float]) -> float:
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    spread = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return cov / spread if spread else 0.0


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda n: values[n])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for n in order[start:end + 1]:
            ranks[n] = (start + end) / 2 + 1
        start = end + 1
    return ranks


@dataclass(frozen=True)
class Pick:
    """The search's choice among the measured candidates of one search space."""

    id: str
    rank: int  # its measured rank among them, 1 = fastest
    candidates: int
    ratio: float  # its measured time over the fastest measured one


def pick(members: Sequence[Measured]) -> Pick:
    """The candidate the search ranks first (its order: estimate, then the tie-breaker)."""
    def key(o: Measured) -> tuple:
        params: Mapping[str, Any] = o.row.params
        return Candidate.order(o.prediction, params)

    chosen = min(members, key=key)
    measured = sorted(o.row.measured for o in members)
    return Pick(chosen.row.id, measured.index(chosen.row.measured) + 1, len(members),
                chosen.row.measured / measured[0])
