"""The strategy base class, its parameter space, composition, and the registry.

A strategy transforms a :class:`Scheduled` kernel: a mapping strategy builds the schedule that
assigns output elements to blocks, threads and registers; a refinement (shared-memory staging)
adds statements to an existing one. ``Composite`` chains them (``"tiled+staged"``) without a
third class. Parameters form a space enumerable one decision at a time (``space.choices``), so a
search can descend through it and a user sees at once why a value is not allowed.

Every schedule follows one convention, as PPCG does: dimensions 0-2 are the block coordinates
(x, y, z), 3-5 the thread coordinates; the AST builder fixes them to ``blockIdx``/``threadIdx``
and scans the rest into loops. ``Scheduled.roles`` names the role of every dimension.
"""

from __future__ import annotations

import enum
import functools
import importlib
import math
import operator
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar

import islpy as isl

from ..codegen import ir
from ..errors import StrategyError
from . import geometry
from .geometry import Description
from .lower import Program, Statement

MAPPED_DIMS = 6  # block x, y, z and thread x, y, z
# Where the compute statement sits among a step's stages: a staging strategy puts its barrier,
# copies, barrier and next loads before it (0-3, see strategies/staging.py).
STAGE_COMPUTE = 4
DEFAULT_STRATEGY = "tiled+staged"  # what compile() applies and search() explores by default


class Role(enum.Enum):
    """What a schedule dimension is; strategies find the dimensions they extend by role."""

    BLOCK = "block"
    THREAD = "thread"
    LOOP = "loop"  # an output dimension every thread walks
    # An output dimension with one block per value, right after the thread dimensions: the AST
    # builder folds these into the grid's x axis and decodes them from blockIdx.x.
    GRID = "grid"
    PHASE = "phase"  # orders init / reduce / write
    STEP = "step"  # the step of a strip-mined reduction
    STAGE = "stage"  # orders barrier / copy / barrier / compute within a step
    INNER = "inner"  # reduction within a step
    REGISTER = "register"  # the register tile of one thread


@dataclass(frozen=True)
class Limits:
    """The target's hard limits that every strategy's constraints respect.

    Defaults are CUDA's for every compute capability since 2.0 (CUDA C++ Programming Guide,
    "Technical Specifications per Compute Capability": 1024 threads per block, 48 KiB of static
    shared memory per block, 255 registers per thread), but for dynamic shared memory.
    """

    threads_per_block: int = 1024
    block_extent: tuple[int, int, int] = (1024, 1024, 64)
    shared_per_block: int = 48 * 1024
    # What a kernel that declares its tiles as dynamic shared memory may take, the launch
    # raising its attribute (codegen.ir.dynamic_shared_bytes): the GPU's opt-in limit when
    # the search targets one, else the largest of any compute capability (9.0's 227 KiB,
    # "Technical Specifications per Compute Capability"), so that a kernel the search chose
    # for that GPU can be generated again from its parameters.
    dynamic_shared_per_block: int = 227 * 1024
    registers_per_thread: int = 255
    sm_count: int | None = None  # the GPU's SMs when the search targets one, else no rule on it
    # Whether the target has asynchronous copies (cp.async, compute capability 8.0). A kernel
    # with them still runs anywhere (the CUDA text copies at once below sm_80), so only a
    # search for an older GPU rules them out.
    async_copies: bool = True
    # Whether the target has warpgroup MMAs (wgmma: compute capability 9.0 built for sm_90a,
    # PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"); without
    # a GPU named, a kernel is generated for whatever its parameters say.
    warpgroup_mma: bool = True


class Priority(enum.IntEnum):
    """When the search takes a decision: what shapes the kernel most comes first, so that the
    bound separates good from bad branches early. Within a priority, the space's order."""

    MAPPING = 0  # which output index goes on which axis
    STAGING = 1  # what goes through shared memory
    TILES = 2  # threads and registers per axis
    STEP = 3  # the reduction's step
    BUFFERS = 4  # preloading, double buffering, padding
    CODE = 5  # how the compiler is asked to emit the loops


@dataclass(frozen=True)
class Parameter:
    """One decision of a strategy: its name, the values it may take, and what it means;
    ``searched`` are the values the search tries (None: all of them; fewer keep a full-size
    space enumerable, so the search can be checked against enumeration), ``priority`` when;
    ``accepts`` a rule for values beyond ``values`` a kernel may still be given (a split that
    fills one GPU's SMs, generated again with no GPU targeted), which the search never tries.

    ``role`` declares what it sets of the schedule where the search reads it (its name is the
    strategy's own): :attr:`Role.THREAD`, threads per block along ``axis``, and
    :attr:`Role.REGISTER`, a thread's values along ``axis`` held in registers, which a local
    search trades for each other keeping the tile and moves between axes; the register tile
    is a mechanism of its own to ptxas's check, whose registers follow it (it keeps the best
    of each, as of each mapping and staging); :attr:`Role.STAGE`, the inputs each step stages
    in shared memory, comma separated ('' for none), which a local search changes with the
    threads along an axis (:mod:`treduda.tuning.local_search`)."""

    name: str
    values: tuple
    doc: str = ""
    searched: tuple | None = None
    priority: Priority = Priority.MAPPING
    accepts: Constraint | None = None
    role: Role | None = None
    axis: str = ""


@dataclass(frozen=True)
class Constraint:
    """A rule over some parameters, checked as soon as all of them are fixed."""

    description: str
    needs: tuple[str, ...]
    holds: Callable[[Mapping[str, Any]], bool]


# The rules' outcomes a parameter space remembers (ParamSpace._holds), all forgotten beyond.
RULES_KEPT = 1 << 16


@dataclass(frozen=True)
class ParamSpace:
    """The parameters of a strategy for one program, in decision order, and their rules."""

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
        names = fixed.keys()
        return [c for c, needs in self._needs if needs <= names and not c.holds(fixed)]

    def breaks(self, valid: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
        """Whether ``changes`` to the valid, complete assignment ``valid`` break a rule. Only
        the rules that read a changed parameter are checked: the others held and still do (a
        local search checks thousands of neighbours a change or two away from a candidate,
        and checking every rule of each took a sixth of GEMM 4096^3's search)."""
        changed = {**valid, **changes}
        return any(not self._holds(rule, changed) for name in changes
                   for rule in self._checks_of[name])

    def _holds(self, rule: tuple[int, Callable[[Mapping[str, Any]], Any], Constraint],
               fixed: Mapping[str, Any]) -> bool:
        """Whether ``rule`` (its number, what reads its parameters' values, the rule) holds
        for ``fixed``, remembered by the values of the parameters it reads, which are all it
        may read: a local search checks the same rules for the same few values thousands of
        times (the shared-memory rules of GEMM 4096^3's staging, a sixth of its neighbours'
        checks)."""
        number, read, constraint = rule
        key = (number, read(fixed))
        found = self._outcomes.get(key)
        if found is None:
            found = bool(constraint.holds(fixed))
            if len(self._outcomes) >= RULES_KEPT:
                self._outcomes.clear()
            self._outcomes[key] = found
        return found

    @functools.cached_property
    def _outcomes(self) -> dict[tuple, bool]:
        """The rules' outcomes by their parameters' values (:meth:`_holds`)."""
        return {}

    @functools.cached_property
    def _checks_of(self) -> dict[str, tuple[tuple[int, Callable[[Mapping[str, Any]], Any],
                                                  Constraint], ...]]:
        """For each parameter, the rules that read it, as :meth:`_holds` takes them."""
        numbers = {id(c): n for n, c in enumerate(self.constraints)}
        return {name: tuple((numbers[id(c)], operator.itemgetter(*c.needs), c)
                            for c, _ in rules)
                for name, rules in self._rules_of.items()}

    @functools.cached_property
    def _needs(self) -> tuple[tuple[Constraint, frozenset[str]], ...]:
        """Each rule with the names it reads, as a set (the search checks rules at every
        node)."""
        return tuple((c, frozenset(c.needs)) for c in self.constraints)

    @functools.cached_property
    def _rules_of(self) -> dict[str, tuple[tuple[Constraint, frozenset[str]], ...]]:
        """For each parameter, the rules that read it (checked when it is decided), each with
        the other names it reads."""
        return {p.name: tuple((c, needs - {p.name}) for c, needs in self._needs
                              if p.name in needs)
                for p in self.parameters}

    def choices(self, fixed: Mapping[str, Any]) -> tuple[Parameter, tuple] | None:
        """The next open parameter and its values that break no rule; None when all are fixed.

        ``fixed`` is assumed valid (as every node the search builds is), so only the rules
        that read the parameter being decided are checked."""
        names = fixed.keys()
        for p in self.parameters:
            if p.name not in fixed:
                rules = [rule for rule, (_, others) in zip(self._checks_of[p.name],
                                                           self._rules_of[p.name], strict=True)
                         if others <= names]
                return p, tuple(v for v in p.values if self._allowed(rules, fixed, p.name, v))
        return None

    def _allowed(self, rules: list, fixed: Mapping[str, Any], name: str, value: Any) -> bool:
        """Whether ``fixed`` with ``name`` at ``value`` keeps every rule of ``rules``."""
        if not rules:
            return True
        chosen = {**fixed, name: value}
        return all(self._holds(rule, chosen) for rule in rules)

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

    def complete(self, fixed: Mapping[str, Any], preferred: Mapping[str, Any]) -> dict | None:
        """The first valid completion of ``fixed``, trying each open parameter's ``preferred``
        value before the others (None if there is none)."""
        step = self.choices(fixed)
        if step is None:
            return dict(fixed)
        parameter, values = step
        first = preferred.get(parameter.name)
        for value in sorted(values, key=lambda v: v != first):
            found = self.complete({**fixed, parameter.name: value}, preferred)
            if found is not None:
                return found
        return None

    def sample(self, rng: random.Random, fixed: Mapping[str, Any] | None = None) -> dict:
        """A random complete, valid assignment: a depth-first descent through :meth:`choices`
        that tries each parameter's values in random order and backs out of dead ends."""
        fixed = dict(fixed or {})
        step = self.choices(fixed)
        if step is None:
            return fixed
        parameter, values = step
        for value in rng.sample(values, len(values)):
            try:
                return self.sample(rng, {**fixed, parameter.name: value})
            except StrategyError:
                continue
        raise StrategyError(f"no valid value for {parameter.name} after {dict(fixed)}")

    def size(self) -> int:
        """How many assignments there are before constraints prune them."""
        return math.prod(len(p.values) for p in self.parameters)

    def __add__(self, other: ParamSpace) -> ParamSpace:
        clash = {p.name for p in self.parameters} & {p.name for p in other.parameters}
        if clash:
            raise StrategyError(f"strategies to compose both have parameter(s) {sorted(clash)}")
        return ParamSpace(self.parameters + other.parameters,
                          self.constraints + other.constraints)

    def check_value(self, name: str, value: Any) -> None:
        """Raise StrategyError if ``name`` is unknown or cannot take ``value``: one of its
        values, or one its rule accepts (:attr:`Parameter.accepts`)."""
        parameter = self.parameter(name)
        if value in parameter.values:
            return
        rule = parameter.accepts
        if rule is None:
            raise StrategyError(f"{name}={value!r} is not allowed; choose one of "
                                f"{parameter.values}")
        if not rule.holds({name: value}):
            raise StrategyError(f"{name}={value!r} is not allowed; choose one of "
                                f"{parameter.values} or {rule.description}")

    def check(self, params: Mapping[str, Any]) -> None:
        """Raise StrategyError naming the rule or value that ``params`` breaks."""
        for name, value in params.items():
            self.check_value(name, value)
        missing = [p.name for p in self.parameters if p.name not in params]
        if missing:
            raise StrategyError(f"parameters not set: {', '.join(missing)}")
        broken = self.violated(params)
        if broken:
            raise StrategyError("; ".join(c.description for c in broken)
                                + f" (parameters: {dict(params)})")


@dataclass(frozen=True)
class Scheduled:
    """A program, its statements (a strategy may add some) and a schedule
    ``{ S[..] -> [bx, by, bz, tx, ty, tz, ...] }`` whose dimensions have ``roles``."""

    program: Program
    statements: tuple[Statement, ...]
    schedule: isl.UnionMap
    roles: tuple[Role, ...]
    block: tuple[int, int, int] = (1, 1, 1)
    locals: tuple[ir.Local, ...] = ()
    unroll: tuple[int, ...] = ()  # schedule dimensions unrolled in the IR (codegen.unroll)
    pragma_unroll: tuple[int, ...] = ()  # schedule dimensions the C compiler is asked to unroll
    pragma_keep: tuple[int, ...] = ()  # ... and to keep as loops
    strategy: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)  # read-only once made
    zeroed_output: bool = False  # the kernel adds into its output, which must start at zero
    tensor_maps: tuple[ir.TensorMap, ...] = ()  # what its bulk tensor copies read

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", read_only(self.params))

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    def positions(self, role: Role) -> list[int]:
        return [n for n, r in enumerate(self.roles) if r == role]


def read_only(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only copy of ``params``: what a frozen Scheduled or Kernel hands out cannot be
    changed under it (``dict(...)`` gives a mutable copy; JSON needs one too)."""
    return MappingProxyType(dict(params))


def reduction_schedule(program: Program, step: int) -> tuple[list[str], tuple[Role, ...]]:
    """The schedule's tail after the output dimensions: the phase, the reduction in steps of
    ``step`` summed values (0: one step), the stage slot a staging strategy fills, and the
    values within a step, with their roles. A mapping whose schedule ends with it can be
    chained with staging."""
    reductions = schedule_space(program)[len(program.output_indices) + 1:]
    steps = [f"floor({r}/{step})" for r in reductions] if step else []
    inner = [f"{r} mod {step}" for r in reductions] if step else reductions
    roles = ((Role.PHASE,) + (Role.STEP,) * len(steps) + (Role.STAGE,)
             + (Role.INNER,) * len(inner))
    return ["phase", *steps, str(STAGE_COMPUTE), *inner], roles


def initial(program: Program) -> Scheduled:
    """The program as one thread would run it: no block or thread coordinates yet."""
    n_out = len(program.output_indices)
    roles = ((Role.BLOCK,) * 3 + (Role.THREAD,) * 3 + (Role.LOOP,) * n_out + (Role.PHASE,)
             + (Role.INNER,) * program.reduction_depth)
    schedule = transform_schedule(program, ["0"] * MAPPED_DIMS + schedule_space(program))
    locals_ = tuple(ir.Local(a, ir.Space.REGISTER) for a in program.accumulators)
    return Scheduled(program, program.statements, schedule, roles, locals=locals_)


class Strategy:
    """Base class of every strategy. Subclasses set ``name`` and ``description`` and implement
    :meth:`space` (the parameters, for this program) and :meth:`transform`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    # Marks the search reads (:func:`marked`), so that it names no strategy: ``quick``, its
    # kernels are the quickest to generate and build (a small problem's kernel is looked for
    # in it first); ``offered``, a search of the default strategy ranks it too wherever it
    # :meth:`applies`.
    quick: ClassVar[bool] = False
    offered: ClassVar[bool] = False
    # Whether its first decision (the mapping) is one that :meth:`twins` moves with the tiles:
    # a local search's two-change steps then keep it (a mapping's hundreds of values, each
    # paired with another change, made thousands of steps), where another strategy's first
    # decision (the tutorial's threads per block) may be paired.
    twinned: ClassVar[bool] = False

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()

    def applies(self, program: Program, gpu: Any) -> bool:
        """Whether it computes ``program`` well on ``gpu`` (a :class:`treduda.model.gpus.Gpu`),
        so that a search of the default strategy ranks it where it is :attr:`offered`."""
        return True

    def model(self, program: Program, gpu: Any, values: Mapping[str, tuple] | None = None
              ) -> Any:
        """Its cost model of the fixed-size ``program`` on ``gpu``, ``values`` the values its
        open parameters may take: an object with ``bound``, ``estimate`` and ``refine(kernel)``
        (:class:`treduda.model.interface.CostModel`), which the search, the policy and
        :meth:`treduda.kernel.Kernel.estimate` ask. None, the default: the analytic model
        (:class:`treduda.model.model.Model`), which reads the strategy through :meth:`describe`."""
        return None

    def space(self, program: Program, before: Sequence[Strategy] = ()) -> ParamSpace:
        """The parameters and rules; ``before`` are the strategies applied earlier in a chain."""
        raise NotImplementedError

    def describe(self, program: Program, choices: Mapping[str, tuple]) -> dict[str, tuple]:
        """The quantities of :data:`~treduda.polyhedral.geometry.QUANTITIES` this strategy sets,
        each as the values it can still take, given ``choices``: the values each parameter
        (of the chain it is part of: it reads its own) can still take, one once decided.
        The model, the search's bound and a staging strategy read a strategy only through
        this; one that does not describe itself can be compiled but not searched or staged."""
        raise StrategyError(f"strategy '{self.name}' does not describe itself to the model: "
                            "implement describe() (see treduda.polyhedral.geometry)")

    def tile_parameters(self, program: Program) -> tuple[str, ...]:
        """The parameters the block's tile (order, threads, registers, walk, step) depends on:
        a staging strategy checks its shared memory as soon as these are decided."""
        return tuple(p.name for p in self.space(program).parameters)

    def twins(self, params: Mapping[str, Any], space: ParamSpace) -> Iterator[dict[str, Any]]:
        """Changes of the complete ``params`` that compute the same tiles otherwise (the tiled
        mapping's groups on other axes), each a few parameters' values of ``space``: a local
        search climbs from them where it is stuck, as one or two changes cannot reach them.
        Nothing by default."""
        return iter(())

    def geometry(self, program: Program, params: Mapping[str, Any],
                 values: Mapping[str, tuple] | None = None) -> Description:
        """Every quantity's possible values for the (partial) ``params``: an open parameter
        takes ``values`` (by default all of its space's)."""
        if values is None:
            values = {p.name: p.values for p in self.space(program).parameters}
        choices = {name: (params[name],) if name in params else tuple(allowed)
                   for name, allowed in values.items()}
        return geometry.complete(self.describe(program, choices), self.name)

    def defaults(self, program: Program, before: Sequence[Strategy] = ()) -> dict[str, Any]:
        """A sensible complete choice: by default the first valid point of the space."""
        space = self.space(program, before)
        for point in space.points():
            return point
        first = {p.name: p.values[0] for p in space.parameters}
        reasons = "; ".join(c.description for c in space.violated(first)) or "its rules"
        raise StrategyError(f"strategy '{self.name}' cannot compute {program.contraction.source!r}:"
                            f" no parameters satisfy {reasons}")

    def transform(self, scheduled: Scheduled, params: Mapping[str, Any]) -> Scheduled:
        raise NotImplementedError

    def apply(self, program: Program, params: Mapping[str, Any] | None = None) -> Scheduled:
        """Check ``params`` against the space, fill the rest with the defaults (or, where those
        break a rule with the given ones, the nearest valid values) and transform."""
        space = self.space(program)
        params = dict(params or {})
        for name, value in params.items():
            space.check_value(name, value)
        defaults = self.defaults(program)
        chosen = {**defaults, **params}
        if space.violated(chosen):
            chosen = space.complete(params, defaults) or chosen  # or report what breaks
        space.check(chosen)
        chosen = {p.name: chosen[p.name] for p in space.parameters}  # in decision order
        result = self.transform(initial(program), chosen)
        return replace(result, strategy=self.name, params=chosen)


class Composite(Strategy):
    """Strategies applied one after the other; their parameter spaces are concatenated."""

    def __init__(self, parts: Sequence[Strategy], limits: Limits | None = None):
        super().__init__(limits)
        self.parts = tuple(parts)
        self.name = "+".join(p.name for p in self.parts)
        self.description = "; then ".join(p.description for p in self.parts)
        self.twinned = any(p.twinned for p in self.parts)

    def space(self, program: Program, before: Sequence[Strategy] = ()) -> ParamSpace:
        total = ParamSpace(())
        for n, part in enumerate(self.parts):
            total = total + part.space(program, (*before, *self.parts[:n]))
        return total

    def defaults(self, program: Program, before: Sequence[Strategy] = ()) -> dict[str, Any]:
        """Each part's defaults; where a later part's break a rule with the earlier ones (a
        staged tile too big for the tiling's tiles), its nearest valid values."""
        space = self.space(program, before)
        chosen: dict[str, Any] = {}
        for n, part in enumerate(self.parts):
            names = {p.name for p in part.space(program, (*before, *self.parts[:n])).parameters}
            proposal = {**chosen, **part.defaults(program, (*before, *self.parts[:n]))}
            if space.violated(proposal):
                completed = space.complete(chosen, proposal)
                if completed is None:
                    raise StrategyError(f"no valid parameters for '{self.name}' on "
                                        f"{program.contraction.source!r}")
                proposal = {k: v for k, v in completed.items() if k in chosen or k in names}
            chosen = proposal
        return chosen

    def describe(self, program: Program, choices: Mapping[str, tuple]) -> dict[str, tuple]:
        """The parts' descriptions together (each reads its own parameters' choices)."""
        described: dict[str, tuple] = {}
        for part in self.parts:
            described.update(part.describe(program, choices))
        return described

    def tile_parameters(self, program: Program) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for part in self.parts for n in part.tile_parameters(program)))

    def twins(self, params: Mapping[str, Any], space: ParamSpace) -> Iterator[dict[str, Any]]:
        for part in self.parts:
            yield from part.twins(params, space)

    def transform(self, scheduled: Scheduled, params: Mapping[str, Any]) -> Scheduled:
        for n, part in enumerate(self.parts):
            names = {p.name for p in part.space(scheduled.program, self.parts[:n]).parameters}
            scheduled = part.transform(scheduled, {k: v for k, v in params.items()
                                                   if k in names})
        return scheduled


_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator that makes a strategy available by its ``name``."""
    if not cls.name or not cls.description:
        raise StrategyError(f"{cls.__name__} needs a name and a one-line description to register")
    _REGISTRY[cls.name] = cls
    return cls


def _built_in() -> None:
    """Register the built-in strategies (``treduda.strategies``, which ``import treduda`` no
    longer loads: it is loaded on first use)."""
    importlib.import_module("treduda.strategies")


def available() -> dict[str, str]:
    """Registered strategies: name -> one-line description. Chain them with '+'."""
    _built_in()
    return {name: cls.description for name, cls in sorted(_REGISTRY.items())}


def get(name: str, limits: Limits | None = None) -> Strategy:
    """A strategy by name; ``"a+b"`` composes registered strategies a and b."""
    _built_in()
    parts = [p.strip() for p in name.split("+")]
    unknown = [p for p in parts if p not in _REGISTRY]
    if unknown:
        raise StrategyError(f"unknown strategy '{unknown[0]}'; available: "
                            f"{', '.join(sorted(_REGISTRY))} (chain them with '+')")
    if len(parts) == 1:
        return _REGISTRY[parts[0]](limits)
    return Composite([_REGISTRY[p](limits) for p in parts], limits)


def marked(mark: str) -> tuple[str, ...]:
    """The registered strategies whose class sets ``mark`` (:attr:`Strategy.quick`,
    :attr:`Strategy.offered`) itself, by name: a subclass is another strategy, which a mark
    of its base does not describe."""
    _built_in()
    return tuple(name for name, cls in sorted(_REGISTRY.items()) if vars(cls).get(mark))


def schedule_space(program: Program) -> list[str]:
    """Names for the dimensions of the initial schedule, ``[o0.., phase, r0..]``, for isl maps."""
    outputs = [f"o{d}" for d in range(len(program.output_indices))]
    return [*outputs, "phase", *(f"r{d}" for d in range(program.reduction_depth))]


def transform_schedule(program: Program, target: list[str]) -> isl.UnionMap:
    """Apply ``{ [o.., phase, r..] -> [target] }`` to the initial schedule."""
    source = ", ".join(schedule_space(program))
    mapping = isl.Map(f"{program.isl_params()}{{ [{source}] -> [{', '.join(target)}] }}")
    return program.schedule.apply_range(isl.UnionMap.from_map(mapping))
