"""The model judged on problems it was not tuned on (issue 40): leave one problem out, or halves.

A calibration file measures a few kernels of each problem (a TCCG row: the search's pick and
its rivals). A figure computed on the rows a change was tuned on says little about the next
problem, so the fidelity tool judges by folds: each fold holds some problems out, fits on the
others whatever is fitted, and predicts the held-out ones. Two schemes:

* ``leave one out``: each problem in turn is held out, every other one fits;
* ``halves``: the problems in the file's order, the first half fitting the second and the
  second the first (TCCG rows 1-12 and 13-24 of the H200 file).

What each fold fits: a *scale*, the model's systematic error (the geometric mean of
measured / estimate over the fitting rows, by which the held-out estimates are multiplied;
the search never uses it, so the raw error is reported beside the calibrated one, and it
changes no order within a problem); and, where the caller gives the rows predicted under
each value of a model constant the search does use (the fidelity tool: the GPU's
``global_request_wavefronts``), that constant, so that the picks and rank correlations are
judged on problems it was not fitted on. Lower bounds are never scaled.

The issue's targets (issue 40) are printed beside the figures, each holding or not
(:data:`TARGETS`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .ranking import Measured, pick, spearman

T = TypeVar("T")

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
    # the value of the fitted constant each fold chose (judge's ``fitted``), none if none
    fitted: list[float] = field(default_factory=list)

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


def folds(found: Sequence[T], scheme: str) -> list[tuple[list[T], list[T]]]:
    """Per fold, the problems that fit and those held out."""
    if scheme == LEAVE_ONE_OUT:
        return [([q for q in found if q is not p], [p]) for p in found]
    half = len(found) // 2
    first, second = list(found[:half]), list(found[half:])
    return [(first, second), (second, first)]


def judge(outcomes: Sequence[Measured], scheme: str = LEAVE_ONE_OUT,
          fitted: Mapping[float, Sequence[Measured]] | None = None) -> HeldOut:
    """The figures of ``scheme`` over the kept rows of ``outcomes``. ``fitted``: the same rows
    predicted under each value of a model constant being fitted; each fold then predicts its
    held-out problems under the value that does best on its fitting ones (:func:`best`), so
    the constant is judged on problems it was not fitted on."""
    variants = {**fitted} if fitted else {math.nan: outcomes}
    grouped = {value: {p.name: p for p in problems(rows)} for value, rows in variants.items()}
    names = list(next(iter(grouped.values())))
    predicted: list[tuple[Measured, float]] = []  # each held-out row and its calibrated estimate
    held: list[Problem] = []
    chosen: list[float] = []
    for fitting, out in folds(names, scheme):
        value = best({v: [found[n] for n in fitting] for v, found in grouped.items()})
        found = grouped[value]
        factor = scale([o for n in fitting for o in found[n].members])
        for name in out:
            held.append(found[name])
            chosen.append(value)
            predicted += [(o, o.estimate * factor) for o in found[name].members]
    errors = [abs(estimate / o.row.measured - 1) for o, estimate in predicted]
    several = [p for p in held if len(p.members) > 1]
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
        ratios={name: p.ratio for name, p in picks.items()},
        fitted=sorted(v for v in chosen if not math.isnan(v)))


def best(candidates: Mapping[float, Sequence[Problem]]) -> float:
    """Of a constant's values, each with the fitting problems predicted under it, the one whose
    pick is the fastest measured in the most problems, then the least median |error| with
    their own scale (:func:`scale`; the smallest value where they tie)."""
    def score(value: float) -> tuple:
        found = candidates[value]
        fastest = sum(pick(p.members).rank == 1 for p in found if len(p.members) > 1)
        rows = [o for p in found for o in p.members]
        factor = scale(rows)
        errors = [abs(o.estimate * factor / o.row.measured - 1) for o in rows]
        return -fastest, statistics.median(errors) if errors else 0.0, value

    return min(candidates, key=score)


# issue 40's targets: median |error| with the scale fitted, picks fastest (of 24 problems),
# mean Spearman within a problem, the watched picks' ratio to the fastest
TARGETS = {"median": 0.20, "picks": 14, "rho": 0.8, "ratio": 1.2}


def report(judged: HeldOut, watched: Sequence[str] = ()) -> str:
    """``judged``'s figures as lines of text, each of the issue's targets beside it; ``watched``
    problems get their pick's ratio to the fastest (or a note that the data lacks them)."""
    j = judged

    def held(ok: bool) -> str:
        return "holds" if ok else "does not hold"

    lines = [f"held out ({j.scheme}), {j.rows} rows of {len(j.ratios)} problems with rivals:",
             f"  |error|: median {j.median_error:.0%} with a scale fitted on the other "
             f"problems, {j.raw_median_error:.0%} with nothing fitted (target <= "
             f"{TARGETS['median']:.0%}: {held(j.median_error <= TARGETS['median'])})",
             f"  lower bound above the measured time: {j.bounds_above} of {j.rows} rows "
             f"({j.bounds_above / j.rows:.0%}; target none: {held(not j.bounds_above)})"
             if j.rows else "  no rows",
             f"  Spearman rho: {j.rho_within_mean:.2f} within a problem (mean over "
             f"{len(j.rho_within)}; target >= {TARGETS['rho']}: "
             f"{held(j.rho_within_mean >= TARGETS['rho'])}), {j.rho_overall:.2f} over all rows",
             f"  the pick (lowest estimate) is the fastest measured in {j.picks_fastest} of "
             f"{len(j.ratios)} problems (target >= {TARGETS['picks']}: "
             f"{held(j.picks_fastest >= TARGETS['picks'])}); its time over the fastest: "
             f"geometric mean {_geometric_mean(j.ratios.values()):.2f}"]
    # which problems the misses are, so that a change's effect on them reads off the report
    slower = [f"{name} {ratio:.2f}x" for name, ratio in j.ratios.items() if ratio > 1]
    if slower:
        lines.append("  picks slower than the fastest: " + ", ".join(slower))
    if j.fitted:
        counts = {v: j.fitted.count(v) for v in sorted(set(j.fitted))}
        lines.append("  global_request_wavefronts fitted per held-out problem: "
                     + ", ".join(f"{v:g} for {n}" for v, n in counts.items()))
    for name in watched:
        ratio = j.ratios.get(name)
        lines.append(f"  {name}: the pick " + (
            f"{ratio:.2f}x the fastest (target <= {TARGETS['ratio']}x: "
            f"{held(ratio <= TARGETS['ratio'])})" if ratio is not None
            else "not in the data (no rivals measured)"))
    return "\n".join(lines)


def _geometric_mean(values) -> float:
    values = list(values)
    return math.exp(statistics.fmean(map(math.log, values))) if values else math.nan
