"""Lowering: a validated :class:`~treduda.frontend.contraction.Contraction` becomes isl statements.

Every output element gets one register accumulator per group of product terms that share the
same summed indices (Treduda's strategy 3 reuse of intermediate values), so a program has

* ``init<g>[o]``       ``acc<g> = 0``                           for each group g,
* ``reduce<g>[o, r]``  ``acc<g> += A[..]*B[..]``                summed over r, the group's indices,
* ``write[o]``         ``C[o] = alpha*acc0 + beta*C[o] + ...``  once per output element,

and the initial schedule of the thesis (fig. 10) orders them per output element::

    { init<g>[o] -> [o, 0, 0..]; reduce<g>[o, r] -> [o, 1+g, r, 0..]; write[o] -> [o, G+1, 0..] }

Sizes are isl parameters ``N_<index>`` when symbolic, fixed numbers otherwise.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import islpy as isl

from ..codegen import ir
from ..errors import InvalidName, StrategyError
from ..frontend.contraction import Contraction, Term, analyse, resolve_sizes
from ..frontend.dtypes import HIGHEST, STORED, TF32, check_dtype, check_literals, check_precision
from ..frontend.identity import SYMBOLIC, Identity
from ..frontend.merge import Merging, merge
from ..frontend.tree import Read

LAYOUTS = ("C", "F")


class Kind(enum.Enum):
    """What a statement does; the printer and the strategies switch on it."""

    INIT = "init"
    REDUCE = "reduce"
    WRITE = "write"
    COPY = "copy"  # global memory to a shared-memory tile (added by staging strategies)
    SYNC = "sync"  # a barrier every thread of the block executes


@dataclass(frozen=True)
class Statement:
    """One isl statement ``name[indices]`` that executes ``body``.

    ``accesses`` holds one isl map ``{ name[indices] -> array[...] }`` for every ``ir.Element``
    of the body, in the order :func:`treduda.codegen.ir.elements` lists them (target first); the AST
    builder derives each element's index expressions from these, so a strategy redirects an
    access (to a register tile, to shared memory) by replacing its map.

    ``formulas``, where a strategy gives them, are the same index expressions in closed form,
    one tuple per access, in the statement's own coordinates (``ir.Var`` named by
    ``indices``): the AST builder then puts each instance's coordinates into them instead of
    composing the map with the schedule, which isl may split into many pieces (the copies of
    tccg_28's pick took 1.6 s of its 2.1 s generation so, and printed as nested conditionals).
    """

    name: str
    kind: Kind
    indices: tuple[str, ...]
    # a warp-collective statement (tensor cores) executes with the same operands in the
    # 32 threads of a warp; the lane is in its domain, not in its operands
    body: ir.Assign | ir.Barrier | ir.FillFragment | ir.LoadFragment | ir.MultiplyAccumulate \
        | ir.AddFragment | ir.StoreFragment | ir.AsyncCopy | ir.CommitCopies | ir.WaitCopies \
        | ir.WarpgroupMultiply | ir.WarpgroupFence | ir.WarpgroupCommit | ir.WarpgroupWait \
        | ir.ProxyFence
    accesses: tuple[isl.Map, ...] = ()
    summed: tuple[str, ...] = ()
    phase: int = 0
    formulas: tuple[tuple[ir.Expr, ...], ...] | None = None


Derived = TypeVar("Derived")


@dataclass(frozen=True)
class Program:
    """The polyhedral program of a contraction, before any strategy has touched it.

    ``schedule`` has the shape ``{ S[o, r] -> [o_0 .. o_n-1, phase, r_0 .. r_R-1] }``: the output
    dimensions by name, then the statement order, then the summed dimensions (positional, padded
    with zeros for statements with fewer).
    """

    contraction: Contraction
    sizes: dict[str, int] | None  # None when sizes are isl parameters
    layout: str
    dtype: str
    statements: tuple[Statement, ...]
    domain: isl.UnionSet
    schedule: isl.UnionMap
    accumulators: tuple[str, ...]
    reduction_depth: int  # R: how many summed dimensions the widest reduction has
    merging: Merging  # ``contraction`` is ``merging.merged``: the expression, indices merged
    expression_sizes: dict[str, int] | None  # the extents of the expression's own indices
    # Bitwise the same result on every run: no atomic additions (a split reduction writes its
    # parts to a workspace that a second kernel adds up in a fixed order).
    deterministic: bool = False
    precision: str = HIGHEST  # how the sums' products round their inputs (dtypes.PRECISIONS)
    # what was derived from the program alone, by name (:meth:`derived`); a replaced program
    # starts empty
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False,
                                     compare=False)

    def derived(self, name: str, compute: Callable[[Program], Derived]) -> Derived:
        """``compute(self)``, remembered under ``name``: a search asks the same of the program
        for each of its many thousand candidates (the tensor-core model's index groups took a
        fifth of a TCCG row's search)."""
        if name not in self._derived:
            self._derived[name] = compute(self)
        return self._derived[name]

    @property
    def identity(self) -> Identity:
        """The problem's :class:`~treduda.frontend.identity.Identity` (no text parsed again)."""
        sizes = self.expression_sizes
        return Identity(repr(self.original.tree),
                        SYMBOLIC if sizes is None else tuple(sorted(sizes.items())), self.dtype,
                        self.layout, self.precision, self.deterministic)

    @property
    def split_workspace(self) -> bool:
        """Whether a split reduction stores its parts in a float32 workspace that a second
        kernel adds up in a fixed order, rather than adding them into the output atomically:
        in a deterministic program, and into float16 and bfloat16 outputs, which OpenCL has
        no atomic addition for (and each part rounded to their precision would lose bits of
        the sum)."""
        return self.deterministic or self.dtype in STORED

    @property
    def original(self) -> Contraction:
        """The contraction as written, before merging (``contraction`` is the merged one)."""
        return self.merging.original

    @property
    def symbolic(self) -> bool:
        return self.sizes is None

    @property
    def output_indices(self) -> tuple[str, ...]:
        return self.contraction.output_indices

    @property
    def parameters(self) -> tuple[str, ...]:
        """isl parameters (and kernel arguments) of a symbolic program: one size per index."""
        return tuple(size_name(i) for i in self.contraction.indices) if self.symbolic else ()

    def extent(self, index: str) -> ir.Expr:
        """The extent of ``index`` as the kernel sees it: a number, or the size argument."""
        return ir.Var(size_name(index)) if self.sizes is None else ir.Int(self.sizes[index])

    def shape(self, tensor: str) -> tuple[ir.Expr, ...]:
        c = self.contraction
        indices = c.output_indices if tensor == c.output else c.inputs[tensor]
        return tuple(self.extent(i) for i in indices)

    def isl_params(self) -> str:
        return f"[{', '.join(self.parameters)}] -> " if self.symbolic else ""

    def bounds(self, indices: tuple[str, ...]) -> str:
        """isl constraints ``0 <= i < N_i`` for the given indices (``true`` for none)."""
        parts = [f"0 <= {i} < {self.bound(i)}" for i in indices]
        return " and ".join(parts) if parts else "true"

    def bound(self, index: str) -> str:
        """The extent of ``index`` in isl syntax: its parameter, or its number."""
        return size_name(index) if self.sizes is None else str(self.sizes[index])

    def context(self) -> isl.Set:
        """What is known about the parameters: every size is at least one."""
        return isl.Set(f"{self.isl_params()}{{ : {self.bounds(())} {self._positive_sizes()} }}")

    def _positive_sizes(self) -> str:
        return "".join(f" and {p} >= 1" for p in self.parameters)

    def accesses(self, kind: str = "read") -> isl.UnionMap:
        """``{ S[..] -> T[..] }`` for every read (or ``"write"``) of a tensor by a statement."""
        result = isl.UnionMap.empty(self.domain.get_space())
        for s in self.statements:
            for n, (element, access) in enumerate(zip(ir.elements(s.body), s.accesses,
                                                      strict=True)):
                is_write = n == 0
                if element.array not in self.accumulators and is_write == (kind == "write"):
                    result = result.union(isl.UnionMap.from_map(access))
        return result


def size_name(index: str) -> str:
    """The kernel argument (and isl parameter) that holds the extent of ``index``."""
    return f"N_{index}"


def accumulator_name(group: int) -> str:
    return f"acc{group}"


GENERATED_NAME = re.compile(r"(acc|c)\d+")  # registers and isl's loop iterators


def plan(expr: str | Contraction, sizes: Mapping[str, int] | None = None, layout: str = "C",
         dtype: str = "float32", *, symbolic: bool = False, deterministic: bool = False,
         precision: str = HIGHEST) -> Program:
    """The one way from an expression to a :class:`Program`: dtype, layout and sizes checked,
    the text parsed and lowered once; compile, the cache key, the search and the kernel walk
    take the result instead of starting again from the text.

    With ``symbolic=True`` the sizes become kernel arguments (given ``sizes`` are still
    checked, so typos and bad extents are reported). ``deterministic=True`` rules out atomic
    additions (:attr:`Program.deterministic`).
    """
    check_dtype(dtype)
    check_precision(precision, dtype)
    check_layout(layout)
    contraction = analyse(expr) if isinstance(expr, str) else expr
    check_literals([t.coefficient for t in contraction.terms], dtype)
    if symbolic and not sizes:
        return replace(lower(contraction, None, layout, dtype, precision),
                       deterministic=deterministic)
    fixed = resolve_sizes(contraction, sizes or {})
    return replace(lower(contraction, None if symbolic else fixed, layout, dtype, precision),
                   deterministic=deterministic)


def check_layout(layout: str) -> None:
    """StrategyError unless ``layout`` is one of :data:`LAYOUTS`."""
    if layout not in LAYOUTS:
        raise StrategyError(f"layout {layout!r} is not supported; choose 'C' (row-major) or "
                            "'F' (column-major)")


def lower(contraction: Contraction, sizes: dict[str, int] | None, layout: str = "C",
          dtype: str = "float32", precision: str = HIGHEST) -> Program:
    """Build the isl statements, accesses and initial schedule of ``contraction``.

    ``precision`` other than ``"highest"`` rounds the operands of each sum's products
    (:func:`_rounded`); the write's scaling by scalars and hoisted factors stays FP32, as a
    GEMM's alpha and beta do.

    ``sizes`` maps every index to its extent, or is None for a kernel whose sizes are parameters.
    Indices that always appear together are merged first (:mod:`treduda.frontend.merge`): the
    program's contraction and sizes are the merged ones.
    """
    _check_generated_names(contraction)
    merging = merge(contraction)
    expression_sizes, contraction = sizes, merging.merged
    sizes = None if sizes is None else merging.sizes(sizes)
    _check_generated_names(contraction)
    out = contraction.output_indices
    groups = _group_terms(contraction)
    direct = tuple(t for t in contraction.terms if not t.summed(out))
    statements: list[Statement] = []
    written_value: list[tuple[bool, ir.Expr]] = [_signed_product(t, ()) for t in direct]
    for g, (summed, terms) in enumerate(groups):
        acc = ir.Element(accumulator_name(g), ())
        statements.append(Statement(f"init{g}", Kind.INIT, out,
                                    ir.Assign(acc, "=", ir.Float(0.0))))
        if len(terms) == 1:  # hoist the factors that do not depend on the summed indices
            term = terms[0]
            inner = tuple(r for r in term.reads if set(r.indices) & set(summed))
            negative, outer = _signed_product(term, inner, acc)
            statements.append(Statement(f"reduce{g}", Kind.REDUCE, out + summed,
                                        ir.Assign(acc, "+=", _rounded(_product(inner),
                                                                      precision)),
                                        (), summed, 1 + g))
            written_value.append((negative, outer))
        else:
            body = _rounded(_sum(_signed_product(t, ()) for t in terms), precision)
            statements.append(Statement(f"reduce{g}", Kind.REDUCE, out + summed,
                                        ir.Assign(acc, "+=", body), (), summed, 1 + g))
            written_value.append((False, acc))
    target = _element(contraction.output, out)
    statements.append(Statement("write", Kind.WRITE, out,
                                ir.Assign(target, contraction.op, _sum(written_value)), (), (),
                                1 + len(groups)))
    program = Program(contraction, sizes, layout, dtype, tuple(statements), None, None,
                      tuple(accumulator_name(g) for g in range(len(groups))),
                      max((len(s) for s, _ in groups), default=0), merging, expression_sizes,
                      precision=precision)
    return _polyhedral(program)


def _polyhedral(program: Program) -> Program:
    """Attach isl domains, access relations and the initial schedule to the statements."""
    contraction, statements, depth = program.contraction, program.statements, (
        program.reduction_depth)
    params = program.isl_params()
    domains, schedule, with_accesses = [], [], []
    out = contraction.output_indices
    for s in statements:
        head = f"{s.name}[{', '.join(s.indices)}]"
        domain = isl.Set(f"{params}{{ {head} : {program.bounds(s.indices)} }}")
        domains.append(domain)
        summed = list(s.summed) + ["0"] * (depth - len(s.summed))
        schedule.append(f"{head} -> [{', '.join([*out, str(s.phase), *summed])}]")
        accesses = tuple(
            isl.Map(f"{params}{{ {head} -> {e.array}[{', '.join(v.name for v in e.indices)}] }}")
            .intersect_domain(domain) for e in ir.elements(s.body))
        with_accesses.append(replace(s, accesses=accesses))
    domain = domains[0]
    union = isl.UnionSet.from_set(domain)
    for d in domains[1:]:
        union = union.union(isl.UnionSet.from_set(d))
    initial = isl.UnionMap(f"{params}{{ {'; '.join(schedule)} }}").intersect_domain(union)
    return replace(program, statements=tuple(with_accesses), domain=union, schedule=initial)


def _group_terms(c: Contraction) -> list[tuple[tuple[str, ...], tuple[Term, ...]]]:
    """Terms with summed indices, grouped by their set of summed indices (one register each)."""
    groups: dict[frozenset, list[Term]] = {}
    order: dict[frozenset, tuple[str, ...]] = {}
    for term in c.terms:
        summed = term.summed(c.output_indices)
        if summed:
            key = frozenset(summed)
            groups.setdefault(key, []).append(term)
            order.setdefault(key, summed)
    return [(order[k], tuple(v)) for k, v in groups.items()]


def _element(tensor: str, indices) -> ir.Element:
    return ir.Element(tensor, tuple(ir.Var(i) for i in indices))


def _product(reads: tuple[Read, ...]) -> ir.Expr:
    factors = [_element(r.tensor, r.indices) for r in reads]
    result = factors[0]
    for f in factors[1:]:
        result = ir.Binary(ir.Op.MUL, result, f)
    return result


def _rounded(value: ir.Expr, precision: str) -> ir.Expr:
    """A sum's value with its products computed at ``precision``: with TF32 every tensor
    element is rounded before use; with 3xTF32 every product of two factors is taken from
    their TF32 pieces (:class:`ir.Function`); "highest" leaves it as it is."""
    if precision == HIGHEST:
        return value
    if isinstance(value, ir.Element):
        return ir.Call(ir.Function.TF32, (value,)) if precision == TF32 else value
    if isinstance(value, ir.Binary):
        left, right = _rounded(value.left, precision), _rounded(value.right, precision)
        if value.op is ir.Op.MUL and precision != TF32:
            return ir.Call(ir.Function.TF32X3, (left, right))
        return ir.Binary(value.op, left, right)
    if isinstance(value, ir.Neg):
        return ir.Neg(_rounded(value.operand, precision))
    return value


def _signed_product(term: Term, exclude: tuple[Read, ...],
                    extra: ir.Expr | None = None) -> tuple[bool, ir.Expr]:
    """``term`` without the reads in ``exclude`` (times ``extra``), as (negative?, magnitude)."""
    factors: list[ir.Expr] = []
    magnitude = abs(term.coefficient)
    if magnitude != 1.0:
        factors.append(ir.Float(magnitude))
    factors += [ir.Var(s) for s in term.scalars]
    remaining = list(term.reads)
    for r in exclude:
        remaining.remove(r)
    factors += [_element(r.tensor, r.indices) for r in remaining]
    if extra is not None:
        factors.append(extra)
    result = factors[0] if factors else ir.Float(1.0)
    for f in factors[1:]:
        result = ir.Binary(ir.Op.MUL, result, f)
    return term.coefficient < 0, result


def _sum(summands) -> ir.Expr:
    result = None
    for negative, expr in summands:
        if result is None:
            result = ir.Neg(expr) if negative else expr
        else:
            result = ir.Binary(ir.Op.SUB if negative else ir.Op.ADD, result, expr)
    return result if result is not None else ir.Float(0.0)


def _check_generated_names(c: Contraction) -> None:
    """Names that reach C must not shadow the ones treduda generates (acc0, c0, N_<index>);
    index names only meet the size parameters, inside isl."""
    sizes = {size_name(i) for i in c.indices}
    clashes = [n for n in (c.output, *c.inputs, *c.scalars) if GENERATED_NAME.fullmatch(n)]
    clashes += [n for n in (c.output, *c.inputs, *c.scalars, *c.indices) if n in sizes]
    if clashes:
        name = clashes[0]
        source = c.tree.source
        raise InvalidName(f"the name '{name}' collides with a name treduda generates "
                          "(registers accN, loop iterators cN, sizes N_<index>); rename it",
                          source, max(source.find(name), 0), len(name))
