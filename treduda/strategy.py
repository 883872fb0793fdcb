"""The strategy base class, its parameter space, and the registry of strategies.

A strategy turns a :class:`~treduda.lower.Program` into a :class:`Scheduled` kernel by
transforming the isl schedule. Its parameters form a space that can be enumerated one decision at
a time (``space.choices(fixed)``), so a search can descend through it and a user can see at once
why a value is not allowed.

Every scheduled kernel follows one convention, as PPCG does: the first three schedule dimensions
are the block coordinates (x, y, z), the next three the thread coordinates within a block; the
AST builder fixes them to ``blockIdx``/``threadIdx`` and scans the rest into loops.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import islpy as isl

from .errors import StrategyError
from .lower import Program

# CUDA's limits for every compute capability since 2.0 (CUDA C++ Programming Guide, table
# "Technical Specifications per Compute Capability").
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_EXTENT = (1024, 1024, 64)
MAPPED_DIMS = 6  # block x, y, z and thread x, y, z


@dataclass(frozen=True)
class Parameter:
    """One decision of a strategy: its name, the values it may take, and what it means."""

    name: str
    values: tuple
    doc: str = ""


@dataclass(frozen=True)
class Constraint:
    """A rule over some parameters, checked as soon as all of them are fixed."""

    description: str
    needs: tuple[str, ...]
    holds: Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class ParamSpace:
    """The parameters of one strategy for one program, in decision order, and their rules."""

    parameters: tuple[Parameter, ...]
    constraints: tuple[Constraint, ...] = ()

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.parameters) or "none"
        raise StrategyError(f"unknown parameter '{name}' (this strategy has: {known})")

    def violated(self, fixed: Mapping[str, Any]) -> list[Constraint]:
        """Constraints whose parameters are all fixed and that do not hold."""
        return [c for c in self.constraints
                if all(n in fixed for n in c.needs) and not c.holds(fixed)]

    def choices(self, fixed: Mapping[str, Any]) -> tuple[Parameter, tuple] | None:
        """The next open parameter and its values that break no rule; None when all are fixed."""
        for p in self.parameters:
            if p.name not in fixed:
                return p, tuple(v for v in p.values if not self.violated({**fixed, p.name: v}))
        return None

    def points(self, fixed: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every complete, valid assignment that extends ``fixed``."""
        fixed = dict(fixed or {})
        step = self.choices(fixed)
        if step is None:
            yield fixed
            return
        parameter, values = step
        for v in values:
            yield from self.points({**fixed, parameter.name: v})

    def size(self) -> int:
        """How many assignments there are before constraints prune them."""
        return math.prod(len(p.values) for p in self.parameters)

    def check(self, params: Mapping[str, Any]) -> None:
        """Raise StrategyError naming the rule or value that ``params`` breaks."""
        for name, value in params.items():
            allowed = self.parameter(name).values
            if value not in allowed:
                raise StrategyError(f"{name}={value!r} is not allowed; choose one of {allowed}")
        missing = [p.name for p in self.parameters if p.name not in params]
        if missing:
            raise StrategyError(f"parameters not set: {', '.join(missing)}")
        broken = self.violated(params)
        if broken:
            raise StrategyError("; ".join(c.description for c in broken)
                                + f" (parameters: {dict(params)})")


@dataclass(frozen=True)
class Scheduled:
    """A program with a strategy's schedule ``{ S[..] -> [bx, by, bz, tx, ty, tz, ...] }``."""

    program: Program
    schedule: isl.UnionMap
    block: tuple[int, int, int]
    strategy: str
    params: dict[str, Any] = field(default_factory=dict)


class Strategy:
    """Base class of every strategy. Subclasses set ``name`` and ``description`` and implement
    :meth:`space` (the parameters, for this program) and :meth:`transform` (the schedule)."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def space(self, program: Program) -> ParamSpace:
        raise NotImplementedError

    def defaults(self, program: Program) -> dict[str, Any]:
        """A sensible complete choice: the first valid value of each parameter."""
        return next(self.space(program).points())

    def transform(self, program: Program, params: Mapping[str, Any]) -> Scheduled:
        raise NotImplementedError

    def apply(self, program: Program, params: Mapping[str, Any] | None = None) -> Scheduled:
        """Check ``params`` (filled up with defaults) against the space and transform."""
        chosen = {**self.defaults(program), **(params or {})}
        self.space(program).check(chosen)
        return self.transform(program, chosen)


_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator that makes a strategy available by its ``name``."""
    if not cls.name or not cls.description:
        raise StrategyError(f"{cls.__name__} needs a name and a one-line description to register")
    _REGISTRY[cls.name] = cls
    return cls


def available() -> dict[str, str]:
    """Registered strategies: name -> one-line description."""
    return {name: cls.description for name, cls in sorted(_REGISTRY.items())}


def get(name: str) -> Strategy:
    if name not in _REGISTRY:
        raise StrategyError(f"unknown strategy '{name}'; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]()


def schedule_space(program: Program) -> list[str]:
    """Names for the dimensions of the initial schedule, ``[o0.., phase, r0..]``, for isl maps."""
    outputs = [f"o{d}" for d in range(len(program.output_indices))]
    return [*outputs, "phase", *(f"r{d}" for d in range(program.reduction_depth))]


def transform_schedule(program: Program, target: list[str]) -> isl.UnionMap:
    """Apply ``{ [o.., phase, r..] -> [target] }`` to the initial schedule."""
    source = ", ".join(schedule_space(program))
    mapping = isl.Map(f"{program.isl_params()}{{ [{source}] -> [{', '.join(target)}] }}")
    return program.schedule.apply_range(isl.UnionMap.from_map(mapping))
