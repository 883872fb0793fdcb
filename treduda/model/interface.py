"""What a strategy's cost model answers (:meth:`treduda.polyhedral.strategy.Strategy.model`).

The search, the policy that checks its finalists, the walk and :meth:`treduda.kernel.Kernel.
estimate` ask a strategy's model only this, so that a strategy author who adds a mapping can
give it a model, and one estimator answers for a kernel wherever it is asked. The analytic
model (:class:`treduda.model.model.Model`) answers for every strategy that describes itself
in the geometry's quantities; the tensor cores' (``strategies/tensorcore_model.py``) is the
tensor-core strategy's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .prediction import Compiled, Prediction


class CostModel(Protocol):
    """One program's model on one GPU for one strategy."""

    # Predictions made: the work a search's budget counts (treduda.tuning.budgets).
    evaluations: int
    # Whether it remembers every prediction it made, so that asked again it makes none (and a
    # searcher that remembered the answer charges none for it).
    remembers: bool
    # Whether its estimates read a compiled kernel's SASS main loop (Compiled.instructions_per_fma)
    # and it counts, per multiply-add, the instructions that loop issues by kind
    # (issue_instructions(params) -> dict[str, float]), so that a kin's report is carried in the
    # ratio of two candidates' counts (treduda.tuning.policy.as_kin). Where none does, ptxas's
    # check need not disassemble the cubin (a third of a CPU second).
    reads_sass: bool
    # Whether the walk (treduda.tuning.walk) can count its kernels' per-thread statements; a
    # warp's fragment statements have none, and the model answers for the walk.
    walkable: bool

    def bound(self, params: Mapping[str, Any]) -> Prediction:
        """A lower bound on every completion of the partial ``params``; its ``floor`` the
        least estimate any completion can have."""

    def least(self) -> float:
        """A lower bound on every candidate's estimate."""

    def estimate(self, params: Mapping[str, Any], compiled: Compiled | None = None
                 ) -> Prediction:
        """The predicted time of a complete candidate, refined by ptxas's ``compiled``."""

    def refine(self, kernel: Any, use_nvcc: bool = True) -> Prediction:
        """The estimate of a generated kernel of this program (a :class:`treduda.kernel.
        Kernel`), with what its compilation says (:func:`.prediction.ptxas_report`)."""

    def registers(self, params: Mapping[str, Any]) -> tuple[int, int]:
        """A complete candidate's registers per thread and those beyond the launch bounds."""

    def register_pressure(self, params: Mapping[str, Any]) -> float:
        """The registers a complete candidate holds, as a share of its launch bounds' cap."""
