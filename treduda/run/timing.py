"""How long a kernel took: the median of several timed launches, and their spread.

Backends time each launch with the device's own clock (CUDA events, OpenCL profiling events),
after warm-up launches that take compilation, caches and clock ramp-up out of the numbers.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

WARMUP = 3  # untimed launches before timing: module load, caches, clocks ramping up
REPEATS = 20


@dataclass(frozen=True)
class Timing:
    """Seconds per launch: the median of ``repeats`` timed launches, the fastest and slowest."""

    seconds: float
    fastest: float
    slowest: float
    repeats: int
    device: str  # what measured, e.g. "NVIDIA H100 80GB HBM3 (CuPy, CUDA events)"

    @classmethod
    def of(cls, seconds: Sequence[float], device: str) -> Timing:
        return cls(statistics.median(seconds), min(seconds), max(seconds), len(seconds), device)

    @property
    def spread(self) -> float:
        """(slowest - fastest) / median: how much the launches disagreed."""
        return (self.slowest - self.fastest) / self.seconds if self.seconds else 0.0

    def __str__(self) -> str:
        return (f"{self.seconds * 1e3:.4f} ms median of {self.repeats} "
                f"({self.fastest * 1e3:.4f}-{self.slowest * 1e3:.4f} ms) on {self.device}")


@dataclass(frozen=True)
class TimedRun:
    """One real launch and how long it took on the device: ``result`` is what the run returns
    (the output array), ``seconds`` the device's time from the start of its first kernel to
    the end of its last (events around the launch: no warm-up, no repeats, no transfers)."""

    result: Any
    seconds: float
    device: str  # as Timing.device
