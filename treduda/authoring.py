"""What a strategy author needs, in one public place.

A strategy (:class:`Strategy`) declares its parameters (:class:`Parameter`, each with a
:class:`Priority` that says when the search decides it and, where the search may trade or
move it, a :class:`Role`) and the rules on them (:class:`Constraint`, gathered in a
:class:`ParamSpace`), and rewrites the initial schedule of a :class:`Program` into one whose
dimensions have :class:`Role` s: :func:`schedule_space` names the initial schedule's
dimensions, :func:`transform_schedule` applies an affine target to them, and
:func:`reduction_schedule` is the tail that lets a mapping chain with shared-memory staging.
:func:`register` makes it available by name.

To look at what a strategy does, :func:`plan` lowers an expression to its program and
:func:`initial` gives the schedule a strategy starts from. To check that the model's bound
stays below its estimate over a strategy's space, :class:`Searcher` enumerates and searches
that space on a GPU description (:func:`gpu`). A strategy that the analytic model does not
describe well supplies a model of its own (:meth:`Strategy.model`), whose answers are
:class:`Prediction` s.

Everything here is re-exported from the stage that defines it: the modules themselves are
internal and may move, this list does not.
"""

from __future__ import annotations

from treduda.model.gpus import Gpu, gpu
from treduda.model.prediction import Prediction
from treduda.polyhedral.lower import Program, Statement, plan
from treduda.polyhedral.strategy import (
    Constraint,
    Parameter,
    ParamSpace,
    Priority,
    Role,
    Scheduled,
    Strategy,
    initial,
    reduction_schedule,
    register,
    schedule_space,
    transform_schedule,
)
from treduda.tuning.search import Searcher

__all__ = ["Constraint", "Gpu", "ParamSpace", "Parameter", "Prediction", "Priority", "Program",
           "Role",
           "Scheduled",
           "Searcher", "Statement", "Strategy", "gpu", "initial", "plan", "reduction_schedule",
           "register", "schedule_space", "transform_schedule"]
