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

from ..errors import StrategyError
from .prediction import Compiled, Prediction


class CostModel(Protocol):
    """One program's model on one GPU for one strategy: what it must answer. Beside these it
    may declare :data:`CAPABILITIES`, which the search, the policy and the walk read through
    :func:`capable`: a model that declares none is taken conservatively."""

    # Predictions made: the work a search's budget counts (treduda.tuning.budgets).
    evaluations: int

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


# What a model may declare as an attribute, and what is taken where it does not: the
# conservative answer, which may cost a search work or time but never misleads it.
CAPABILITIES: dict[str, bool] = {
    # Whether it remembers every prediction it made, so that asked again it makes none (and a
    # searcher that remembered the answer charges none for it). Not declared: each is charged.
    "remembers": False,
    # Whether its estimates read a compiled kernel's SASS main loop (Compiled.instructions_per_fma)
    # and it counts, per multiply-add, the instructions that loop issues by kind
    # (issue_instructions(params) -> dict[str, float]), so that a kin's report is carried in the
    # ratio of two candidates' counts (treduda.tuning.policy.as_kin). Not declared: ptxas's check
    # does not disassemble the cubin (a third of a CPU second) and carries a kin's report as is.
    "reads_sass": False,
    # Whether its near-ties (candidates predicted within treduda.tuning.policy.SASS_TIE of the
    # best checked one) are broken by their SASS main loop's economy (Compiled.mma_economy:
    # instructions and shared bytes beside the MMAs, per multiply-add): ptxas's check then
    # disassembles its kernels and compiles the near-tied ones of other kin. It counts too the
    # global sectors each operand's reads take per sector a fully coalesced read of theirs
    # would (read_sectors(params) -> dict[str, float], 1 at best): a near-tie whose reads
    # take more than the best's is no tie. Not declared: the model's order alone decides.
    "ties_by_sass": False,
    # Whether the walk (treduda.tuning.walk) can count its kernels' per-thread statements; a
    # warp's fragment statements have none. Not declared: the model answers for the walk.
    "walkable": False,
}

# What a model that declares a capability answers beside the Protocol's members.
CAPABILITY_NEEDS: dict[str, tuple[str, ...]] = {"reads_sass": ("issue_instructions",),
                                                 "ties_by_sass": ("read_sectors",)}


def capable(model: CostModel, capability: str) -> bool:
    """Whether ``model`` declares ``capability`` (one of :data:`CAPABILITIES`); its default
    where it does not, so that a strategy's own model need declare none."""
    return bool(getattr(model, capability, CAPABILITIES[capability]))


def conforming(model: CostModel, strategy: str) -> CostModel:
    """``model``, once it is known to have every member of :class:`CostModel` and what its
    capabilities need (:data:`CAPABILITY_NEEDS`): a strategy's own model that lacks one fails
    where it is made, naming what it lacks, not in a search with an AttributeError."""
    needed = [*CostModel.__annotations__, *(name for name, member in vars(CostModel).items()
                                           if callable(member) and not name.startswith("_"))]
    needed += [need for capability, needs in CAPABILITY_NEEDS.items()
               if capable(model, capability) for need in needs]
    missing = [name for name in needed if not hasattr(model, name)]
    if missing:
        raise StrategyError(
            f"strategy {strategy!r}'s cost model ({type(model).__name__}) lacks "
            f"{', '.join(missing)}: give it what treduda.model.interface.CostModel lists (and "
            f"what CAPABILITY_NEEDS lists for a capability it declares), or let the strategy's "
            f"model() return None to take the analytic model")
    return model
