"""What a search returns: candidates, statistics and the result, small and replayable.

A :class:`Candidate` is a strategy's parameters (its :class:`Decision` values) with its
prediction and bound; :class:`SearchStats` say how the search went; a :class:`SearchResult`
holds the winner and every candidate scored, ranks them, explains itself and serialises to
JSON. The policy, incremental tuning, the API and the apps read these apart from the search
that makes them (:mod:`treduda.tuning.search`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..frontend.identity import params_text
from ..model.gpus import Gpu
from ..model.prediction import Compiled, Prediction
from ..polyhedral.strategy import read_only

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
    # Its parameters' identity (:func:`identity`), made once: a search orders and tells
    # apart its candidates by it thousands of times.
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", read_only(self.params))
        object.__setattr__(self, "text", identity(self.params))

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return tuple(Decision(k, v) for k, v in self.params.items())

    def key(self) -> tuple:
        """The search's order of candidates (see :meth:`order`)."""
        return _ordered(self.prediction, self.text)

    @staticmethod
    def order(prediction: Prediction, params: Mapping[str, Any]) -> tuple:
        """Order by predicted time; equal times by fewer LSU wavefronts per FMA (bank
        conflicts, uncoalesced loads: the cost a model is least sure of), then by more
        resident warps (more latency hidden); the parameters' text only makes the order
        deterministic where even those agree."""
        return _ordered(prediction, identity(params))


def _ordered(prediction: Prediction, text: str) -> tuple:
    """:meth:`Candidate.order` of the parameters whose identity is ``text``."""
    return (prediction.seconds, prediction.wavefronts, -prediction.warps, text)


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
        distinct = {c.text: c
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
        (dense, as the datasheet gives it) for a kernel its model times on them (an ``mma``
        resource), else the FMA units'."""
        g = self.gpu
        peak = (g.mma_flops(self.dtype, self.precision) / g.mma_share
                if "mma" in self.best.prediction.resources else g.peak_flops(self.dtype))
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
                f"({self.fraction_of_peak():.0%} of peak); {p.because}"
                f"{self._against()}\n{self.stats}{proven}")

    def strategy_bests(self) -> dict[str, Candidate]:
        """The best candidate of each strategy the search ranked, fastest first."""
        bests: dict[str, Candidate] = {}
        for c in sorted(self.candidates, key=Candidate.key):
            bests.setdefault(c.strategy, c)
        return bests

    def _against(self) -> str:
        """Why the winner's strategy won where several were ranked: each other one's best."""
        others = [c for name, c in self.strategy_bests().items()
                  if name != self.best.strategy]
        return "".join(f"\nagainst {c.strategy}'s best: {c.prediction.seconds * 1e3:.4f} ms "
                       f"({self.best.prediction.seconds / c.prediction.seconds:.2f}x its "
                       f"time); {c.prediction.because}" for c in others)

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
