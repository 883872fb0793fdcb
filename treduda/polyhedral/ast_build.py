"""isl AST generation and its conversion into the kernel IR.

The scheduled kernel's first six schedule dimensions are fixed to the parameters
``blockIdx_{x,y,z}`` and ``threadIdx_{x,y,z}`` (as PPCG does), so ``AstBuild`` emits no loop for
them, only the guards that keep threads of partial blocks inside the iteration domain. Output
dimensions a strategy gives blocks of their own (role ``GRID``, right after those six) are fixed
to parameters ``gridIdx_<n>`` too and folded into the grid's x axis, which allows 2^31 - 1
blocks: the kernel decodes ``blockIdx.x`` into them with a division and a remainder per
dimension, the one fastest in memory varying fastest (GETT's grouping of free indices). The y and
z axes allow only 65535 blocks, so a y or z extent that is larger, or not known before launch,
is folded into x the same way. Every
isl AST node and expression is converted once into :mod:`treduda.codegen.ir`; statement calls
``S(args)`` become the statement's assignment with its indices replaced by ``args`` and tensor
elements linearised for the layout. The loops a strategy unrolls (register tiles) are scanned
by isl as loops and unrolled in the IR (:mod:`treduda.codegen.unroll`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import islpy as isl

from ..codegen import ir
from ..codegen.idle import clamp_idle
from ..codegen.parts import PartsSum, parts_sum
from ..codegen.role_split import joined_roles
from ..codegen.unroll import copy_guards_over_steps, peel, unroll, unroll_uneven
from ..codegen.unswitch import unswitch
from ..codegen.vectorize import vectorize
from ..errors import SizeLimit, StrategyError, TredudaError
from ..frontend.merge import Merging
from .geometry import AXES
from .lower import Program
from .strategy import MAPPED_DIMS, Role, Scheduled

BLOCK_PARAMS = tuple(f"blockIdx_{a}" for a in AXES)
THREAD_PARAMS = tuple(f"threadIdx_{a}" for a in AXES)
_BUILTINS = {
    **{p: ir.Index(ir.Builtin.BLOCK_ID, axis) for axis, p in enumerate(BLOCK_PARAMS)},
    **{p: ir.Index(ir.Builtin.THREAD_ID, axis) for axis, p in enumerate(THREAD_PARAMS)},
}
INT32_LIMIT = 2**31 - 1
# Largest gridDim.y and gridDim.z; gridDim.x allows 2^31 - 1 (CUDA C++ Programming Guide,
# "Features and Technical Specifications", table 21, every compute capability since 3.0).
GRID_YZ_LIMIT = 65535

_OPS = {
    isl.ast_expr_op_type.add: ir.Op.ADD,
    isl.ast_expr_op_type.sub: ir.Op.SUB,
    isl.ast_expr_op_type.mul: ir.Op.MUL,
    isl.ast_expr_op_type.div: ir.Op.DIV,
    isl.ast_expr_op_type.pdiv_q: ir.Op.DIV,
    isl.ast_expr_op_type.pdiv_r: ir.Op.MOD,
    isl.ast_expr_op_type.zdiv_r: ir.Op.MOD,
    isl.ast_expr_op_type.fdiv_q: ir.Op.FLOOR_DIV,
    isl.ast_expr_op_type.min: ir.Op.MIN,
    isl.ast_expr_op_type.max: ir.Op.MAX,
    isl.ast_expr_op_type.lt: ir.Op.LT,
    isl.ast_expr_op_type.le: ir.Op.LE,
    isl.ast_expr_op_type.eq: ir.Op.EQ,
    isl.ast_expr_op_type.ge: ir.Op.GE,
    isl.ast_expr_op_type.gt: ir.Op.GT,
    isl.ast_expr_op_type.and_: ir.Op.AND,
    isl.ast_expr_op_type.and_then: ir.Op.AND,
    isl.ast_expr_op_type.or_: ir.Op.OR,
    isl.ast_expr_op_type.or_else: ir.Op.OR,
}


@dataclass(frozen=True)
class Built:
    """The kernel IR of a scheduled kernel and its launch geometry (formulas in the sizes)."""

    kernel: ir.KernelIR
    grid: tuple[ir.Expr, ir.Expr, ir.Expr]
    block: tuple[int, int, int]
    ast: str  # isl's own C rendering of the AST, for people who want to look inside
    # The kernel launched after it that adds a deterministic split's parts (None: no parts).
    parts_sum: PartsSum | None = None


def build(scheduled: Scheduled, name: str) -> Built:
    """Scan ``scheduled`` into loops with isl and convert the result into kernel IR."""
    program = scheduled.program
    folded = _folded_dims(scheduled)
    grid_params = tuple(f"gridIdx_{n}" for n in range(folded))
    pinned = BLOCK_PARAMS + THREAD_PARAMS + grid_params
    all_params = ", ".join((*program.parameters, *pinned))
    n_dims = _schedule_dims(scheduled)
    dims = [f"d{n}" for n in range(n_dims)]
    fixed = " and ".join(f"d{n} = {p}" for n, p in enumerate(pinned))
    schedule = scheduled.schedule.intersect_range(isl.UnionSet.from_set(
        isl.Set(f"[{all_params}] -> {{ [{', '.join(dims)}] : {fixed} }}")))

    used = scheduled.schedule.range().as_set()
    launch = _launch(scheduled, folded)
    block_range, extents, too_long = launch.blocks, launch.extents, launch.too_long
    coordinates = [f"b{n}" for n in range(3 + folded)]
    equal = " and ".join(f"{b} = {p}" for b, p in
                         zip(coordinates, BLOCK_PARAMS + grid_params, strict=True))
    blocks = isl.Set(f"[{all_params}] -> {{ [{', '.join(coordinates)}] : {equal} }}")
    threads = " and ".join(f"0 <= {p} < {b}"
                           for p, b in zip(THREAD_PARAMS, scheduled.block, strict=True))
    context = (block_range.intersect(blocks).params()
               .intersect(isl.Set(f"[{all_params}] -> {{ : {threads} }}"))
               .intersect(program.context()))

    into_x = [(BLOCK_PARAMS[axis], extents[axis]) for axis in too_long]
    names = _decoded(extents[0], into_x + _memory_order(list(zip(grid_params, extents[3:],
                                                                  strict=True)), program.layout))
    converter = _Converter(scheduled, names)
    # Barriers sit in the step loops, which every thread of a block must run alike. Left to
    # itself isl may scan a dimension in pieces, e.g. peel a short last step for the threads
    # that load nothing in it, and give those threads barriers of their own; "atomic" scans
    # each dimension down to the innermost step in one piece (isl manual, "AST Generation
    # Options (Schedule Map)").
    # The loops a strategy unrolls stay loops here and are unrolled in the kernel IR
    # (treduda.codegen.unroll): isl's own unrolling took most of a kernel's generation.
    steps = scheduled.positions(Role.STEP)
    # isl scans only the dimensions after the pinned ones, which equal parameters: scanned as
    # dimensions of their own they took most of isl's time (GEMM 4096^3's winner: 0.45 CPU s,
    # 0.16 s without them). Its iterators keep the names of their schedule dimensions.
    # Coalesced, the context (often a union of pieces that one box covers) and the schedule
    # cost isl's scan less, with the same AST (a staged group's kernel: 5.9 -> 3.0 CPU s).
    scanned = _without_pinned(schedule, len(pinned)).coalesce()
    loops = dims[len(pinned):]
    iterators = isl.IdList.alloc(schedule.get_ctx(), len(loops))
    for d in range(len(pinned), n_dims):
        iterators = iterators.add(isl.Id(f"c{d}", context=schedule.get_ctx()))

    def scan(context: isl.Set, how: str = "atomic") -> isl.AstNode:
        builder, _ = (isl.AstBuild.from_context(context.coalesce()).set_iterators(iterators)
                      .set_at_each_domain(converter.at_domain))
        if steps:
            options = [f"[{', '.join(loops)}] -> {how}[{d - len(pinned)}]"
                       for d in range(len(pinned), max(steps) + 1)]
            builder = builder.set_options(isl.UnionMap(f"{{ {'; '.join(options)} }}"))
        return builder.node_from_schedule_map(scanned)

    root = scan(context)
    # a warp-specialised kernel's roles, one thread test each, as one role split
    body = joined_roles(converter.node(root), scheduled.block[0])
    # Not for tensor-core kernels (fragments, warpgroup MMAs), whose builder zero-fills what
    # lies outside the tensors and lays out its own pipeline.
    fragments = (any(local.space is ir.Space.FRAGMENT for local in scheduled.locals)
                 or any(isinstance(s.body, ir.WarpgroupMultiply) for s in scheduled.statements))
    full = (_full_blocks(scheduled, block_range, folded)
            if program.sizes is not None and not fragments and _guarded_loop(body) else None)
    if full is not None:  # the same scan where every guard of an edge block holds
        inside = full.intersect(blocks).params()
        # Separated, the steps run without the tests of a pipeline's first and last ones,
        # unless that gives threads barriers of their own (see "atomic" above): foreseen
        # where the steps hold barriers and some thread runs a statement in steps that
        # others skip, found afterwards otherwise.
        barriers = any(ir.has_barrier(s.body) for s in scheduled.statements)
        separate = not (steps and barriers and _split_by_thread(
            scanned, context.intersect(inside), max(steps) - len(pinned)))
        fast = converter.node(scan(context.intersect(inside), "separate")) if separate else None
        if fast is None or _divergent_barrier(fast):
            fast = converter.node(scan(context.intersect(inside)))
        condition = isl.AstBuild.from_context(context).expr_from_set(inside)
        body = ir.If(_expr(condition, names), fast, body)
    grid = launch.grid
    kernel = ir.KernelIR(name=name, dtype=program.dtype,
                         index_bits=_index_bits(program, scheduled.locals),
                         params=_params(program, scheduled.locals), locals=scheduled.locals,
                         body=body, zeroed_output=scheduled.zeroed_output,
                         tensor_maps=scheduled.tensor_maps)
    ids = _id_ranges(grid, scheduled.block)
    kernel = unroll(kernel, _unrolled(scheduled, used), ids, divisions=bool(fragments))
    kernel = unswitch(kernel) if full is None else _unswitched_inside(kernel)
    kernel = vectorize(copy_guards_over_steps(kernel, ids) if fragments
                       else clamp_idle(unroll_uneven(peel(kernel, ids), ids)))
    return Built(kernel, grid, scheduled.block, root.to_C_str(), parts_sum(
        kernel, program.contraction.output, program.contraction.op, program.layout))


@dataclass(frozen=True)
class _Launch:
    """Where a kernel's blocks lie and how many it launches, from its schedule alone."""

    blocks: isl.Set  # { [block x, y, z, folded dims] } used by some statement instance
    extents: list[ir.Expr]  # blocks along each of those dimensions
    too_long: list[int]  # the axes (y, z) with more blocks than a grid allows, folded into x
    grid: tuple[ir.Expr, ir.Expr, ir.Expr]


def _launch(scheduled: Scheduled, folded: int) -> _Launch:
    """The blocks and grid of ``scheduled``, whose first ``folded`` dimensions after the
    mapped ones have blocks of their own."""
    used = scheduled.schedule.range().as_set()
    n_dims = _schedule_dims(scheduled)
    # coalesced: the projection leaves pieces that one box often covers, which every later
    # step pays for
    blocks = (used.project_out(isl.dim_type.set, MAPPED_DIMS + folded,
                               n_dims - MAPPED_DIMS - folded)
              .project_out(isl.dim_type.set, 3, 3)).coalesce()
    host = isl.AstBuild.from_context(scheduled.program.context())
    extents = [_grid_extent(blocks, axis, host) for axis in range(3 + folded)]
    too_long = [axis for axis in (1, 2) if not (isinstance(extents[axis], ir.Int)
                                               and extents[axis].value <= GRID_YZ_LIMIT)]
    grid_x = extents[0]
    for extent in [extents[axis] for axis in too_long] + extents[3:]:
        grid_x = ir.Binary(ir.Op.MUL, grid_x, extent)
    grid = (_folded_constants(grid_x), *(ir.Int(1) if axis in too_long else extents[axis]
                                         for axis in (1, 2)))
    return _Launch(blocks, extents, too_long, grid)


def launch_grid(scheduled: Scheduled) -> tuple[ir.Expr, ir.Expr, ir.Expr]:
    """The grid :func:`build` would give ``scheduled`` (formulas in the sizes), without
    scanning it: isl's scan, and what follows it, take most of a build, which a caller that
    only needs the launch (is it still the one measured?) need not pay."""
    return _launch(scheduled, _folded_dims(scheduled)).grid


def grid_at(grid: Sequence[ir.Expr], merging: Merging, sizes: Mapping[str, int]
            ) -> tuple[int, int, int]:
    """Blocks along each axis of the ``grid`` formulas at the expression's ``sizes`` (before
    ``merging`` merges its indices); StrategyError where x needs more blocks than a GPU
    allows."""
    env = {f"N_{index}": extent for index, extent in merging.sizes(sizes).items()}
    blocks = tuple(int(ir.evaluate(g, env)) for g in grid)
    if blocks[0] > INT32_LIMIT:
        raise StrategyError(f"this launch needs {blocks[0]} blocks along x, more than a GPU "
                            f"allows ({INT32_LIMIT}); choose larger tiles (block_*, reg_*)")
    return blocks


def _without_pinned(schedule: isl.UnionMap, pinned: int) -> isl.UnionMap:
    """``schedule`` without its first ``pinned`` dimensions (each equal to a parameter)."""
    n = schedule.range().as_set().dim(isl.dim_type.set)
    dims = [f"d{d}" for d in range(n)]
    return schedule.apply_range(isl.UnionMap(
        f"{{ [{', '.join(dims)}] -> [{', '.join(dims[pinned:])}] }}"))


def _full_blocks(scheduled: Scheduled, used: isl.Set, folded: int) -> isl.Set | None:
    """``{ [b] }``: the blocks that run every instance any block runs (relative to the block:
    the same threads, register and step coordinates), of all used ``{ [b] }`` (x, y, z and the
    ``folded`` grid coordinates); None where every block does, or none.

    isl guards the instances a block beyond a tensor's end lacks (sizes no tile divides), in
    every block, inside the step loop: nvcc turns each guard into a branch between the FMAs of
    the unrolled step (tccg_12's pick: 48 branches in its main loop). The kernel tests once
    whether its block is one of these and runs a scan without guards if so (:func:`build`);
    the test is the same for every thread of the block, so barriers stay uniform. Per
    statement ``{ [b] -> [q] }`` (its schedule points, ``q`` the other coordinates), a block
    lacks some instance where ``{ [b] -> [q] : q of any block }`` minus it is not empty; a
    statement that some blocks do not run at all (zero-filling what lies outside a tensor)
    decides nothing, and the fast scan drops it where the others' bounds rule it out."""
    lacking = isl.Set.empty(used.get_space())
    coordinates = [*range(3), *range(MAPPED_DIMS, MAPPED_DIMS + folded)]
    maps: list[isl.Map] = []
    scheduled.schedule.foreach_map(maps.append)
    for m in maps:
        points = isl.Map.from_range(m.range())  # { [] -> [d] }
        for n, d in enumerate(coordinates):  # the block coordinates, into the domain
            points = points.move_dims(isl.dim_type.in_, n, isl.dim_type.out, d - n, 1)
        # the same set with its implied equalities explicit and redundant constraints gone:
        # the subtraction below is ten times cheaper on it (a random grouped contraction of
        # tests/test_properties.py: 15.6 -> 1.6 CPU s in this function; the sets are equal)
        points = points.detect_equalities().remove_redundancies()
        if not used.is_subset(points.domain()) or _zero_fill(scheduled, m):
            continue  # zero-filling a tile's part outside a tensor: more of it at the edges
        every = isl.Map.from_domain_and_range(used, points.range())
        lacking = lacking.union(every.subtract(points).domain())
    full = used.subtract(lacking).coalesce()
    return None if full.is_empty() or lacking.is_empty() else full


def _zero_fill(scheduled: Scheduled, m: isl.Map) -> bool:
    """Whether ``m`` schedules a statement that zero-fills part of a shared tile: it covers
    what lies outside a tensor, in edge blocks and in a short last step alike."""
    body = scheduled.statement(m.get_tuple_name(isl.dim_type.in_)).body
    return isinstance(body, ir.AsyncCopy) and body.zero


def _split_by_thread(schedule: isl.UnionMap, context: isl.Set, last: int) -> bool:
    """Whether, in ``context``, the scan coordinates up to ``last`` (the innermost step) at
    which some statement of ``schedule`` (``{ S[...] -> [c...] }``) runs differ between the
    threads of a block that run it: isl's "separate" then splits the step loop where they
    do, into loops and tests of thread ids around barriers (:func:`_divergent_barrier`)."""
    maps: list[isl.Map] = []
    schedule.foreach_map(maps.append)
    for m in maps:
        points = m.intersect_params(context).range()
        n = points.dim(isl.dim_type.set)
        outer = points.project_out(isl.dim_type.set, last + 1, n - last - 1)
        anyone = outer
        for name in THREAD_PARAMS:  # { [c] : some thread runs S at c }
            position = anyone.find_dim_by_name(isl.dim_type.param, name)
            if position >= 0:
                anyone = anyone.project_out(isl.dim_type.param, position, 1)
        # the threads that run S at all (others skip it in every step: a test of thread ids
        # around S alone, no barrier in it)
        anyone = anyone.align_params(outer.get_space()).intersect_params(outer.params())
        if not anyone.is_subset(outer):
            return True
    return False


def _guarded_loop(s: ir.Stmt) -> bool:
    """Whether a loop in ``s`` tests a condition inside, or holds a loop bounded by a min or
    max (a register loop cut by a tensor's end): what a second scan for full blocks saves (a
    guard around the whole body costs one test, wherever it is)."""
    def cut(e: ir.Expr) -> bool:
        return (isinstance(e, ir.Binary) and e.op in (ir.Op.MIN, ir.Op.MAX)
                or any(cut(c) for c in ir.children(e)))

    return any(isinstance(c, ir.For) and any(
        isinstance(d, ir.If) or isinstance(d, ir.For) and d is not c
        and (cut(d.start) or cut(d.condition)) for d in ir.nested(c)) for c in ir.nested(s))


def _divergent_barrier(s: ir.Stmt) -> bool:
    """Whether some barrier in ``s`` lies under a test or in a loop whose bounds depend on the
    thread ids, so that not every thread of a block may reach it."""
    by_thread = ir.reads_thread_id
    return any((isinstance(c, ir.If) and by_thread(c.condition)
                or isinstance(c, ir.For) and (by_thread(c.start) or by_thread(c.condition)))
               and ir.has_barrier(c) for c in ir.nested(s))


def _unswitched_inside(kernel: ir.KernelIR) -> ir.KernelIR:
    """``kernel``, whose body is ``if (full block) fast else guarded``, with the fast scan's
    loops unswitched (:mod:`treduda.codegen.unswitch`). The edge blocks' scan stays as isl
    wrote it, guards inside its loops: a second copy of each for a few blocks would double its
    size (and be the loop with the most FMAs, which the SASS report takes for the main one)."""
    split = kernel.body
    fast = unswitch(replace(kernel, body=split.then)).body
    return replace(kernel, body=replace(split, then=fast))


def check_grid(program: Program, threads_per_block: int, values_per_thread: int) -> None:
    """Raise :class:`SizeLimit` where no kernel's grid can cover ``program``'s output: a
    thread computes at most ``values_per_thread`` output values (each is held in a register:
    no thread loops over output points beyond its register tile), a block at most
    ``threads_per_block`` threads, and the grid holds at most 2^31 - 1 blocks along x, with
    65535 along y and z only where the output has a second and third index (anything more is
    folded into x)."""
    if program.sizes is None:
        return  # symbolic: Kernel.grid_for checks each launch
    indices = program.output_indices
    values = math.prod(program.sizes[i] for i in indices)
    per_block = threads_per_block * values_per_thread
    fewest = -(-values // per_block)
    axes = min(3, len(indices))
    capacity = INT32_LIMIT * GRID_YZ_LIMIT ** max(0, axes - 1)
    if fewest > capacity:
        c = program.original
        raise SizeLimit(
            f"{c.output} has {values:.3g} values and a block computes at most "
            f"{threads_per_block} threads x {values_per_thread} registers = {per_block} of "
            f"them, so it needs at least {fewest:.3g} blocks; a grid holds at most "
            f"{capacity:.3g} ({INT32_LIMIT} along x, {GRID_YZ_LIMIT} along y and z, with "
            f"{axes} of the three axes used by {len(indices)} output "
            f"{'index' if len(indices) == 1 else 'indices'}); nothing was searched or "
            "compiled: give smaller sizes, or split the contraction into several")


def _folded_dims(scheduled: Scheduled) -> int:
    """How many dimensions have blocks of their own; they must follow the six mapped ones."""
    folded = scheduled.positions(Role.GRID)
    if folded != list(range(MAPPED_DIMS, MAPPED_DIMS + len(folded))):
        raise TredudaError(f"strategy '{scheduled.strategy}' put grid dimensions at "
                           f"{folded}; they must directly follow the {MAPPED_DIMS} block and "
                           "thread dimensions")
    return len(folded)


def _memory_order(dims: list[tuple[str, ir.Expr]], layout: str) -> list[tuple[str, ir.Expr]]:
    """Grid dimensions from the one fastest in memory: the last in C layout, the first in F."""
    return dims[::-1] if layout == "C" else dims


def _decoded(x_extent: ir.Expr, folded: list[tuple[str, ir.Expr]]) -> dict[str, ir.Expr]:
    """What the kernel reads for each pinned parameter: the builtins, and with ``folded``
    parameters (and their extents) ``blockIdx.x`` split into the x block coordinate (fastest)
    and each folded one's value, in the order given."""
    if not folded:
        return _BUILTINS
    names = dict(_BUILTINS)
    block = ir.Index(ir.Builtin.BLOCK_ID, 0)
    names[BLOCK_PARAMS[0]] = ir.Binary(ir.Op.MOD, block, x_extent)
    rest = ir.Binary(ir.Op.DIV, block, x_extent)
    for n, (param, extent) in enumerate(folded):
        last = n == len(folded) - 1
        names[param] = rest if last else ir.Binary(ir.Op.MOD, rest, extent)
        rest = ir.Binary(ir.Op.DIV, rest, extent)
    return names


def _folded_constants(expr: ir.Expr) -> ir.Expr:
    """A product of known extents as one number (fixed sizes), else the expression."""
    if isinstance(expr, ir.Binary) and expr.op == ir.Op.MUL:
        left, right = _folded_constants(expr.left), _folded_constants(expr.right)
        if isinstance(left, ir.Int) and isinstance(right, ir.Int):
            return ir.Int(left.value * right.value)
        return ir.Binary(ir.Op.MUL, left, right)
    return expr


def _unrolled(scheduled: Scheduled, used: isl.Set) -> dict[str, tuple[int, int]]:
    """The iterators of the loops ``scheduled`` unrolls (isl names them after their schedule
    dimension) and the first and last value of each, from ``used``, the schedule's range."""
    loops = {}
    for d in scheduled.unroll:
        first, last = used.dim_min_val(d), used.dim_max_val(d)
        if not (first.is_int() and last.is_int()):
            raise TredudaError(f"strategy '{scheduled.strategy}' unrolls schedule dimension {d}, "
                               "whose extent is not bounded by a constant")
        loops[f"c{d}"] = (first.to_python(), last.to_python())
    return loops


def _id_ranges(grid: tuple[ir.Expr, ...], block: tuple[int, int, int]
               ) -> dict[ir.Expr, tuple[int, int]]:
    """The values the thread ids and (where the grid's extents are numbers) the block ids
    take: what decides the guards of an unrolled loop's iterations."""
    ranges: dict[ir.Expr, tuple[int, int]] = {
        ir.Index(ir.Builtin.THREAD_ID, axis): (0, extent - 1) for axis, extent in enumerate(block)}
    for axis, extent in enumerate(grid):
        if isinstance(extent, ir.Int):
            ranges[ir.Index(ir.Builtin.BLOCK_ID, axis)] = (0, extent.value - 1)
    return ranges


def _schedule_dims(scheduled: Scheduled) -> int:
    n = scheduled.schedule.range().as_set().dim(isl.dim_type.set)
    if n < MAPPED_DIMS:
        raise TredudaError(f"strategy '{scheduled.strategy}' produced a schedule with {n} "
                           f"dimensions; the first {MAPPED_DIMS} must be block and thread ids")
    return n


def _grid_extent(grid_range: isl.Set, axis: int, host: isl.AstBuild) -> ir.Expr:
    """Number of blocks along ``axis``: one more than the largest block coordinate used."""
    largest = grid_range.dim_max(axis)
    expr = _expr(host.expr_from_pw_aff(largest))
    if isinstance(expr, ir.Int):
        return ir.Int(expr.value + 1)
    if isinstance(expr, ir.Binary) and expr.op == ir.Op.SUB and expr.right == ir.Int(1):
        return expr.left  # (n - 1) + 1
    return ir.Binary(ir.Op.ADD, expr, ir.Int(1))


def _index_bits(program: Program, locals_: tuple[ir.Local, ...] = ()) -> int:
    """32-bit indices when every tensor (and workspace) of a fixed-size kernel fits, else
    64-bit."""
    if program.sizes is None:
        return 64
    c = program.contraction
    largest = max((v.size for v in locals_ if v.space is ir.Space.GLOBAL), default=1)
    for tensor in (c.output, *c.inputs):
        count = 1
        for extent in program.shape(tensor):
            count *= extent.value
        largest = max(largest, count)
    return 32 if largest <= INT32_LIMIT else 64


def _params(program: Program, locals_: tuple[ir.Local, ...] = ()) -> tuple[ir.Param, ...]:
    c = program.contraction
    return (ir.Param(c.output, ir.ParamKind.OUTPUT),
            *(ir.Param(t, ir.ParamKind.INPUT) for t in c.inputs),
            *(ir.Param(s, ir.ParamKind.SCALAR) for s in c.scalars),
            *(ir.Param(p, ir.ParamKind.SIZE) for p in program.parameters),
            *(ir.Param(v.name, ir.ParamKind.WORKSPACE) for v in locals_
              if v.space is ir.Space.GLOBAL))


def _expr(e: isl.AstExpr, names: dict[str, ir.Expr] = _BUILTINS) -> ir.Expr:
    """isl's expression in the kernel IR; ``names`` says what pinned parameters stand for."""
    kind = e.get_type()
    if kind == isl.ast_expr_type.int:
        return ir.Int(e.get_val().to_python())
    if kind == isl.ast_expr_type.id:
        name = e.get_id().get_name()
        return names.get(name, ir.Var(name))
    op = e.get_op_type()
    args = [_expr(e.get_op_arg(i), names) for i in range(e.get_op_n_arg())]
    if op == isl.ast_expr_op_type.minus:
        return ir.Neg(args[0])
    if op in (isl.ast_expr_op_type.cond, isl.ast_expr_op_type.select):
        return ir.Select(*args)
    if op not in _OPS:
        raise TredudaError(f"isl produced an expression treduda cannot print: {e.to_C_str()}")
    result = args[0]
    for arg in args[1:]:  # min and max may take more than two arguments
        result = ir.Binary(_OPS[op], result, arg)
    return result


def formula(function: isl.PwAff, names: list[str]) -> ir.Expr:
    """``function``, of ``[names]`` (and the sizes), as an expression of ``ir.Var(name)``:
    its inputs become parameters, which isl's AST expressions name."""
    n = function.dim(isl.dim_type.in_)
    for d, name in enumerate(names):
        function = function.set_dim_id(isl.dim_type.in_, d, isl.Id(name))
    function = function.move_dims(isl.dim_type.param, function.dim(isl.dim_type.param),
                                  isl.dim_type.in_, 0, n)
    build = isl.AstBuild.from_context(isl.Set.universe(function.get_domain_space()))
    return _expr(build.expr_from_pw_aff(function), {})


_ISL_OPS = {ir.Op.ADD: "+", ir.Op.SUB: "-", ir.Op.MUL: "*"}


def isl_text(e: ir.Expr) -> str:
    """Integer expression ``e`` of the kernel IR as isl's quasi-affine text, so that a strategy
    writes an index expression once and gets both its access relation and its formula (the
    inverse of :func:`formula`): ``/`` (of non-negative operands) and ``floord`` are floors,
    ``%`` (of non-negative operands) is ``mod``."""
    if isinstance(e, ir.Int):
        return str(e.value)
    if isinstance(e, ir.Var):
        return e.name
    if isinstance(e, ir.Neg):
        return f"(-{isl_text(e.operand)})"
    if isinstance(e, ir.Binary) and e.op in _ISL_OPS:
        return f"({isl_text(e.left)} {_ISL_OPS[e.op]} {isl_text(e.right)})"
    if isinstance(e, ir.Binary) and e.op in (ir.Op.DIV, ir.Op.FLOOR_DIV):
        return f"floor({isl_text(e.left)}/{isl_text(e.right)})"
    if isinstance(e, ir.Binary) and e.op is ir.Op.MOD:
        return f"({isl_text(e.left)} mod {isl_text(e.right)})"
    raise TredudaError(f"{e} is no quasi-affine expression isl can take")


class _Converter:
    """Walks an isl AST and builds kernel IR statements.

    While isl builds the AST, :meth:`at_domain` derives the index expressions of every access
    of each statement instance from its access relation and the current schedule
    (``{ iterators -> S[..] } . { S[..] -> A[..] }``), the way PPCG does, or puts the
    instance's coordinates into the statement's formulas where it has them; :meth:`node` then
    puts them into the statement's body.
    """

    def __init__(self, scheduled: Scheduled, names: dict[str, ir.Expr]):
        self.scheduled = scheduled
        self.names = names
        self.program = scheduled.program
        self.locals = {local.name: local for local in scheduled.locals}
        self.found: list[list[ir.Expr]] = []
        # each instance's coordinates, where its statement has formulas
        self.coordinates: list[dict[str, ir.Expr]] = []

    def at_domain(self, node: isl.AstNode, build: isl.AstBuild) -> isl.AstNode:
        call = node.user_get_expr()
        statement = self.scheduled.statement(call.get_op_arg(0).get_id().get_name())
        if statement.formulas is not None:  # the instance's coordinates, put into them
            coordinates = {index: self.expr(call.get_op_arg(1 + n))
                           for n, index in enumerate(statement.indices)}
            self.found.append([
                self.element(access.get_tuple_name(isl.dim_type.out),
                             tuple(ir.substitute(f, coordinates) for f in formula))
                for access, formula in zip(statement.accesses, statement.formulas, strict=True)])
            self.coordinates.append(coordinates)
            return node.set_annotation(isl.Id(f"accesses{len(self.found) - 1}"))
        if (isinstance(statement.body, ir.AsyncCopy) and statement.body.reads is not None
                or ir.has_indices(statement.body)):
            raise TredudaError(f"{statement.name} reads its coordinates beside its accesses "
                               "(a copy's condition, a bulk copy's box, a phase's parity), "
                               "which only its formulas give the AST builder")
        iterators = build.get_schedule().reverse()
        elements = []
        for access in statement.accesses:  # the array is the range's name: strategies redirect
            indices: tuple[ir.Expr, ...] = ()
            if access.dim(isl.dim_type.out) > 0:
                at = isl.Map.from_union_map(iterators.apply_range(isl.UnionMap.from_map(access)))
                # The composition leaves existentials (the schedule's divisions) that isl turns
                # into a function by parametric integer programming; made explicit first, they
                # cost a staged group's kernel less than half as much.
                at = at.compute_divs()
                call = build.access_from_pw_multi_aff(isl.PwMultiAff.from_map(at))
                indices = tuple(_expr(call.get_op_arg(1 + d), self.names)
                                for d in range(call.get_op_n_arg() - 1))
            elements.append(self.element(access.get_tuple_name(isl.dim_type.out), indices))
        self.found.append(elements)
        self.coordinates.append({})
        return node.set_annotation(isl.Id(f"accesses{len(self.found) - 1}"))

    def element(self, array: str, indices: tuple[ir.Expr, ...]) -> ir.Expr:
        """A load of ``array[indices]`` at its flat offset; a scalar register is a variable."""
        if array in self.locals:
            local = self.locals[array]
            if not local.shape:
                return ir.Var(array)
            shape = tuple(ir.Int(e) for e in local.shape)
            return ir.Load(array, offset(indices, shape, local.layout))
        return ir.Load(array, offset(indices, self.program.shape(array), self.program.layout))

    def node(self, n: isl.AstNode) -> ir.Stmt:
        kind = n.get_type()
        if kind == isl.ast_node_type.block:
            children = n.block_get_children()
            return ir.Block(tuple(self.node(children.get_at(i))
                                  for i in range(children.n_ast_node())))
        if kind == isl.ast_node_type.for_:
            iterator = n.for_get_iterator().get_id().get_name()
            dimension = _dimension(iterator)
            unroll = (ir.Unroll.FULL if dimension in self.scheduled.pragma_unroll
                      else ir.Unroll.NEVER if dimension in self.scheduled.pragma_keep
                      else ir.Unroll.COMPILER)
            return ir.For(iterator, self.expr(n.for_get_init()), self.expr(n.for_get_cond()),
                          self.expr(n.for_get_inc()), self.node(n.for_get_body()), unroll)
        if kind == isl.ast_node_type.if_:
            otherwise = self.node(n.if_get_else_node()) if n.if_has_else_node() else None
            return ir.If(self.expr(n.if_get_cond()), self.node(n.if_get_then_node()), otherwise)
        if kind == isl.ast_node_type.mark:
            return self.node(n.mark_get_node())
        if kind == isl.ast_node_type.user:
            return self.statement(n)
        raise TredudaError(f"isl produced an AST node treduda cannot convert: {kind}")

    def expr(self, e: isl.AstExpr) -> ir.Expr:
        return _expr(e, self.names)

    def statement(self, node: isl.AstNode) -> ir.Stmt:
        """The statement's body with the index expressions found by :meth:`at_domain`."""
        name = node.user_get_expr().get_op_arg(0).get_id().get_name()
        body = self.scheduled.statement(name).body
        if not isinstance(body, (ir.Assign, *ir.OPERAND_STATEMENTS)):  # a barrier, an anchor,
            return body  # a commit or a wait of asynchronous copies
        instance = int(node.get_annotation().get_name().removeprefix("accesses"))
        if isinstance(body, ir.AsyncCopy) and body.reads is not None:
            body = replace(body, reads=ir.substitute(body.reads, self.coordinates[instance]))
        body = ir.map_indices(body, lambda e: ir.substitute(e, self.coordinates[instance]))
        return ir.replace_elements(body, iter(self.found[instance]))


def _dimension(iterator: str) -> int:
    """The schedule dimension a loop scans: isl names its iterators c0, c1, .. by dimension."""
    return int(iterator[1:]) if iterator[:1] == "c" and iterator[1:].isdigit() else -1


def offset(indices: tuple[ir.Expr, ...], shape: tuple[ir.Expr, ...], layout: str) -> ir.Expr:
    """Flat offset of an element in Horner form: row-major (``C``) has the last index fastest,
    column-major (``F``) the first."""
    pairs = list(zip(indices, shape, strict=True))
    if layout == "F":
        pairs.reverse()
    if not pairs:
        return ir.Int(0)
    result = pairs[0][0]
    for index, extent in pairs[1:]:
        result = ir.Binary(ir.Op.ADD, ir.Binary(ir.Op.MUL, result, extent), index)
    return result
