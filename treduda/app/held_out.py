"""The model judged on problems it was not tuned on (issue 40): leave one problem out, or halves.

A calibration file measures a few kernels of each problem (a TCCG row: the search's pick and
its rivals). A figure computed on the rows a change was tuned on says little about the next
problem, so the fidelity tool judges by folds: each fold holds some problems out, fits on the
others whatever is fitted, and predicts the held-out ones. Two schemes:

* ``leave one out``: each problem in turn is held out, every other one fits;
* ``halves``: the problems in the file's order, the first half fitting the second and the
  second the first (TCCG rows 1-12 and 13-24 of the H200 file).

The one thing fitted here is a *scale*, the model's systematic error: the geometric mean of
measured / estimate over the fitting rows, by which the held-out estimates are multiplied. The
model itself (what the search ranks by) fits nothing, so its raw error is reported beside the
calibrated one; a scale changes no order within a problem, so the picks and the rank
correlations within problems are the model's own. Lower bounds are never scaled.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .ranking import Measured, pick, spearman

LEAVE_ONE_OUT, HALVES = "leave one out", "halves"


@dataclass(frozen=True)
class Problem:
    """The kept rows of one problem (its pick and rivals), named by its first row's id."""

    name: str
    members: tuple[Measured, ...]


@dataclass(frozen=True)
class HeldOut:
    """The figures of one scheme, every one computed on held-out problems."""

    scheme: str
    median_error: float  # |calibrated estimate / measured - 1|, median over held-out rows
    raw_median_error: float  # the same with nothing fitted: the model as the search uses it
    bounds_above: int  # rows whose lower bound exceeds the measured time
    rows: int
    rho_within: dict[str, float]  # per problem of several rows: Spearman over its rows
    rho_overall: float  # Spearman over every held-out row's calibrated estimate
    picks_fastest: int  # problems whose pick (lowest estimate) is the fastest measured
    ratios: dict[str, float]  # per problem of several rows: the pick's time over the fastest

    @property
    def rho_within_mean(self) -> float:
        return statistics.fmean(self.rho_within.values()) if self.rho_within else math.nan


def problems(outcomes: Sequence[Measured]) -> list[Problem]:
    """The kept rows grouped by problem, in the file's order; a problem is named by its first
    row's id without the rival's ``~n`` (``tccg_19`` for tccg_19, tccg_19~1, tccg_19~2)."""
    groups: dict[tuple, list[Measured]] = {}
    for o in outcomes:
        if o.left_out is None:
            groups.setdefault(o.row.problem, []).append(o)
    return [Problem(members[0].row.id.split("~")[0], tuple(members))
            for members in groups.values()]


def scale(fitting: Sequence[Measured]) -> float:
    """The model's systematic error on ``fitting``: the geometric mean of measured / estimate
    (1 where nothing fits)."""
    if not fitting:
        return 1.0
    return math.exp(statistics.fmean(math.log(o.row.measured / o.estimate) for o in fitting))


def folds(found: Sequence[Problem], scheme: str) -> list[tuple[list[Problem], list[Problem]]]:
    """Per fold, the problems that fit and those held out."""
    if scheme == LEAVE_ONE_OUT:
        return [([q for q in found if q is not p], [p]) for p in found]
    half = len(found) // 2
    first, second = list(found[:half]), list(found[half:])
    return [(first, second), (second, first)]


def judge(outcomes: Sequence[Measured], scheme: str = LEAVE_ONE_OUT) -> HeldOut:
    """The figures of ``scheme`` over the kept rows of ``outcomes``."""
    predicted: list[tuple[Measured, float]] = []  # each held-out row and its calibrated estimate
    for fitting, held in folds(problems(outcomes), scheme):
        factor = scale([o for p in fitting for o in p.members])
        predicted += [(o, o.estimate * factor) for p in held for o in p.members]
    errors = [abs(estimate / o.row.measured - 1) for o, estimate in predicted]
    several = [p for p in problems(outcomes) if len(p.members) > 1]
    picks = {p.name: pick(p.members) for p in several}
    return HeldOut(
        scheme=scheme,
        median_error=statistics.median(errors) if errors else math.nan,
        raw_median_error=(statistics.median(abs(o.error) for o, _ in predicted)
                          if predicted else math.nan),
        bounds_above=sum(o.bound > o.row.measured for o, _ in predicted),
        rows=len(predicted),
        rho_within={p.name: spearman([o.estimate for o in p.members],
                                     [o.row.measured for o in p.members]) for p in several},
        rho_overall=spearman([e for _, e in predicted], [o.row.measured for o, _ in predicted]),
        picks_fastest=sum(p.rank == 1 for p in picks.values()),
        ratios={name: p.ratio for name, p in picks.items()})


def report(judged: HeldOut, watched: Sequence[str] = ()) -> str:
    """``judged``'s figures as lines of text; ``watched`` problems get their pick's ratio to
    the fastest (or a note that the data lacks them)."""
    j = judged
    lines = [f"held out ({j.scheme}), {j.rows} rows of {len(j.ratios)} problems with rivals:",
             f"  |error|: median {j.median_error:.0%} with a scale fitted on the other "
             f"problems, {j.raw_median_error:.0%} with nothing fitted",
             f"  lower bound above the measured time: {j.bounds_above} of {j.rows} rows "
             f"({j.bounds_above / j.rows:.0%})" if j.rows else "  no rows",
             f"  Spearman rho: {j.rho_within_mean:.2f} within a problem (mean over "
             f"{len(j.rho_within)}), {j.rho_overall:.2f} over all rows",
             f"  the pick (lowest estimate) is the fastest measured in {j.picks_fastest} of "
             f"{len(j.ratios)} problems; its time over the fastest: geometric mean "
             f"{_geometric_mean(j.ratios.values()):.2f}"]
    for name in watched:
        ratio = j.ratios.get(name)
        lines.append(f"  {name}: the pick " + (f"{ratio:.2f}x the fastest" if ratio is not None
                                                 else "not in the data (no rivals measured)"))
    return "\n".join(lines)


def _geometric_mean(values) -> float:
    values = list(values)
    return math.exp(statistics.fmean(map(math.log, values))) if values else math.nan
