"""Thread mapping with block and register tiles (thesis strategies 3-6) and reduction steps.

Up to three output dimensions are mapped onto x, y, z (``order``). With fixed sizes an axis may
hold a group of output indices, GETT-style: ``order="c*a,b"`` puts ``o = c + S_c * a`` (extent
``S_c * S_a``, c fastest) on x, so that short indices fill a tile together; a group is
consecutive in the output's memory order, so it is one stride of the output. Along axis ``a``
a block covers a tile of ``T = block_a * reg_a`` values of its dimension ``o``; each thread holds
``reg_a`` of them in registers, assigned *cyclic* (thread ``t`` takes ``t, t+B, t+2B, ..``:
consecutive threads touch consecutive elements, so loads and stores coalesce) or *adjacent*
(thread ``t`` takes ``t*R .. t*R+R-1``)::

    block  = floor(o / T)
    thread = o mod B                 (cyclic)    floor((o mod T) / R)   (adjacent)
    reg    = floor((o mod T) / B)    (cyclic)    o mod R                (adjacent)

Output dimensions beyond those three are no loop of any thread: each of their values gets blocks
of its own (role ``GRID``: the AST builder folds them into the grid's x axis, GETT-style), so a
thread computes no more output elements than its register tile. With ``step > 0`` every summed
dimension ``r`` is strip-mined into ``floor(r / step)`` (the step loop) and ``r mod step``. The
schedule is

    { S[o, r] -> [block xyz, thread xyz, unmapped o, phase, steps, stage, r in step, reg zyx] }

and each accumulator becomes a register array indexed by the register coordinates, which isl
expresses in terms of the register loops; the AST builder unrolls those in the kernel IR
(:mod:`treduda.codegen.unroll`), so the indices are constants and the arrays stay in registers.

Where the output has too few points to fill the GPU, ``split`` blocks share each output tile,
each summing a contiguous part of the steps of the first summed index (split-K, as GEMM
libraries do for short, deep products): a grid dimension ``floor(r0 / (step * chunk))`` for the
reduction, and for the initialisation and the write one instance per part. The parts are added
into the output atomically, so the output starts at zero for ``=`` (the kernel says so, and every
backend zeroes it before the launch). Atomic additions come in any order, so the sum's rounding
differs from run to run; a deterministic program (``Program.deterministic``) has each part
write its values into a workspace ``td_parts[part, o]`` instead, which a second kernel adds up
in a fixed order (:mod:`treduda.codegen.parts`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import islpy as isl

from treduda.codegen import ir
from treduda.frontend.dtypes import registers
from treduda.polyhedral.ast_build import GRID_YZ_LIMIT, INT32_LIMIT
from treduda.polyhedral.geometry import (
    AXES,
    GROUP,
    group_extent,
    groups,
    on_axes,
    rolled_depth,
    split_index,
    split_parts,
    vector_run,
)
from treduda.polyhedral.lower import Kind, Program
from treduda.polyhedral.strategy import (
    MAPPED_DIMS,
    Constraint,
    Parameter,
    ParamSpace,
    Priority,
    Role,
    Scheduled,
    Strategy,
    reduction_schedule,
    register,
    schedule_space,
    transform_schedule,
)

BLOCK_EXTENTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
REGISTER_EXTENTS = (1, 2, 4, 8)
# "vector": runs of a 16-byte vector's values dealt cyclically, so that a thread's values of a
# staged tile row are read with 128-bit loads, and a warp's loads of a run cover whole banks.
ASSIGNMENTS = ("cyclic", "adjacent", "vector")
STEPS = (0, 4, 8, 16, 32, 64)
POWERS_OF_TWO = tuple(2**n for n in range(32))
# An index joins the faster ones of a group only while those span fewer values than this (the
# default tile along x, 16 threads x 4 registers): beyond it they fill a tile by themselves. At most
# GROUP_LENGTH indices per group, groups only on x and y (z's tiles are a few values).
GROUP_BELOW = 64
GROUP_LENGTH = 3
GROUPED_AXES = 2
SPLITS = (1, 2, 4, 8, 16)
PARTS = "td_parts"  # the workspace of a deterministic split (td_ names are treduda's own)
PART = "td_part"  # the part a write of a deterministic split stores, an isl dimension
ACCUMULATOR_BUDGET = 64  # accumulators per thread: a quarter of the 255 registers in float32
# The values the search tries (a subset of each parameter's), chosen so that a full-size
# contraction's space can still be enumerated to check the search against.
SEARCHED: dict[str, tuple] = {
    "block_x": (16, 32, 64), "block_y": (1, 2, 4, 8, 16), "block_z": (1, 2, 4),
    "reg_x": (1, 2, 4), "reg_y": (1, 2, 4, 8), "reg_z": (1, 2),
    "assign_y": ("cyclic",), "assign_z": ("cyclic",), "step": (8, 16, 32), "unroll": (True,),
    "split": SPLITS,
}


def fastest_first(program: Program) -> tuple[str, ...]:
    """Output indices from the fastest-varying in memory to the slowest, for coalesced stores."""
    indices = program.output_indices
    return tuple(reversed(indices)) if program.layout == "C" else tuple(indices)


def mapping_orders(program: Program) -> tuple[str, ...]:
    """Every way to put up to three output indices on x, y, z, the coalescing one first; then,
    with fixed sizes, every way to put groups (:func:`index_groups`) on x and y as well: three
    axes, or fewer where they hold every output index."""
    indices = fastest_first(program)
    orders = [",".join(p) for p in itertools.permutations(indices, min(3, len(indices)))]
    grouped = index_groups(program)
    if grouped:
        entries = [(i,) for i in indices] + list(grouped)
        for chosen in (c for k in (1, 2, 3) for c in itertools.permutations(entries, k)):
            members = [i for group in chosen for i in group]
            if (len(set(members)) == len(members) and any(len(g) > 1 for g in chosen)
                    and all(len(g) == 1 for g in chosen[GROUPED_AXES:])
                    and (len(chosen) == 3 or len(members) == len(indices))):
                orders.append(",".join(GROUP.join(g) for g in chosen))
    return tuple(orders) if orders else ("",)


def index_groups(program: Program) -> tuple[tuple[str, ...], ...]:
    """The groups an axis may hold (fixed sizes only): runs of output indices consecutive in
    the output's memory order, fastest first, so that X = c + S_c * a is one stride of the
    output; an index joins only while the faster ones span fewer than GROUP_BELOW values."""
    if program.sizes is None:
        return ()
    indices = fastest_first(program)
    found = []
    for start in range(len(indices)):
        for end in range(start + 2, min(start + GROUP_LENGTH, len(indices)) + 1):
            if math.prod(program.sizes[i] for i in indices[start:end - 1]) >= GROUP_BELOW:
                break
            found.append(indices[start:end])
    return tuple(found)


def covering(extent: int, values: Sequence[int]) -> int:
    """The smallest value that covers ``extent`` (or the largest value)."""
    return next((v for v in values if v >= extent), values[-1])


@register
class Tiled(Strategy):
    name = "tiled"
    description = ("block and register tiles over up to three output dimensions, cyclic or "
                   "adjacent per axis, reduction in steps (thesis strategies 3-6)")
    # The default strategy's thread mapping without its staging: the kernels quickest to
    # generate and for PoCL to build (a ring step of extents 2-5: 0.2-0.4 s of generation
    # instead of 0.6-1.9 s), where a small problem's kernel is looked for first.
    quick = True
    twinned = True  # its mapping, an order of groups on the axes, moves with its tiles
    blocks = BLOCK_EXTENTS
    registers = REGISTER_EXTENTS
    assignments = ASSIGNMENTS
    steps = STEPS
    unrolls = (True, False)

    # Its parameters are named after the quantities of the geometry they set.
    quantities = ("order", *(f"{k}_{a}" for a in AXES for k in ("block", "reg", "assign")),
                  "step", "unroll", "split")
    splits = SPLITS

    def space(self, program: Program, before: Sequence[Strategy] = ()) -> ParamSpace:
        summed = any(s.summed for s in program.statements)
        orders = mapping_orders(program)
        coalescing = fastest_first(program)[:2]  # x on one of the two fastest output indices
        assignments = tuple(a for a in self.assignments
                            if a != "vector" or vector_run(program) > 1)
        parameters = [Parameter("order", orders, "output indices mapped to x, y, z (comma "
                                f"separated; '{GROUP}' joins a group on one axis, fastest "
                                "first)", tuple(o for o in orders if not coalescing
                                                or groups(o)[0][0] in coalescing))]
        for a in AXES:  # decided axis by axis: the tile along x shapes a warp's accesses
            parameters += [
                Parameter(f"block_{a}", self.blocks, f"threads per block along {a}",
                          SEARCHED[f"block_{a}"], Priority.TILES, role=Role.THREAD, axis=a),
                Parameter(f"reg_{a}", self.registers, f"elements per thread along {a}",
                          SEARCHED[f"reg_{a}"], Priority.TILES, role=Role.REGISTER, axis=a),
                Parameter(f"assign_{a}", assignments,
                          f"how the {a} tile's elements are dealt to threads",
                          SEARCHED.get(f"assign_{a}"), Priority.TILES)]
        parameters += [Parameter("step", self.steps if summed else (0,),
                                 "summed values per step (0: the whole reduction at once)",
                                 SEARCHED["step"], Priority.STEP),
                       Parameter("split", self.splits if splittable(program) else (1,),
                                 "blocks sharing each output tile, each summing a part of the "
                                 "reduction (added into the output atomically)",
                                 SEARCHED["split"], Priority.STEP),
                       Parameter("unroll", self.unrolls, "unroll the loop within a step",
                                 SEARCHED["unroll"], Priority.CODE)]
        return ParamSpace(tuple(parameters), tuple(self._rules(program)))

    def describe(self, program: Program, choices: Mapping[str, tuple]) -> dict[str, tuple]:
        return {q: choices[q] for q in self.quantities}

    def tile_parameters(self, program: Program) -> tuple[str, ...]:
        return ("order", *(f"{k}_{a}" for k in ("block", "reg") for a in AXES), "step")

    def twins(self, params: Mapping[str, Any], space: ParamSpace) -> Iterator[dict[str, Any]]:
        """Every other order of ``params``' groups among ``space``'s, each axis's threads,
        registers and assignment moved along with its group: the same tiles with other
        threads along the memory's fastest axis."""
        groups = params["order"].split(",")
        for order in space.parameter("order").values:
            moved = order.split(",")
            if order == params["order"] or sorted(moved) != sorted(groups):
                continue
            change = {"order": order}
            for axis, group in zip(AXES, moved, strict=False):
                source = AXES[groups.index(group)]
                for name in ("block", "reg", "assign"):
                    if f"{name}_{source}" in params:
                        change[f"{name}_{axis}"] = params[f"{name}_{source}"]
            yield change

    def _rules(self, program: Program) -> list[Constraint]:
        limits = self.limits
        accumulators = max(1, len(program.accumulators))
        words = registers(program.dtype)
        run = vector_run(program)
        rules = [
            Constraint(f"at most {limits.threads_per_block} threads per block",
                       ("block_x", "block_y", "block_z"),
                       lambda p: p["block_x"] * p["block_y"] * p["block_z"]
                       <= limits.threads_per_block),
            Constraint(f"at most {ACCUMULATOR_BUDGET} accumulator registers per thread",
                       ("reg_x", "reg_y", "reg_z"),
                       lambda p: accumulators * p["reg_x"] * p["reg_y"] * p["reg_z"]
                       <= ACCUMULATOR_BUDGET),
            Constraint(f"accumulators ({words} register(s) each in {program.dtype}) within "
                       f"{limits.registers_per_thread} registers per thread",
                       ("reg_x", "reg_y", "reg_z"),
                       lambda p: accumulators * p["reg_x"] * p["reg_y"] * p["reg_z"] * words
                       <= limits.registers_per_thread),
            Constraint("unrolling needs a step (the whole reduction is too long to unroll)",
                       ("step", "unroll"), lambda p: p["step"] > 0 or not p["unroll"]),
        ]
        for n, a in enumerate(AXES):
            rules += [
                Constraint(f"block_{a} <= {limits.block_extent[n]}", (f"block_{a}",),
                           lambda p, a=a, n=n: p[f"block_{a}"] <= limits.block_extent[n]),
                Constraint(f"an axis without a dimension ({a}) has one thread and one register",
                           ("order", f"block_{a}", f"reg_{a}"),
                           lambda p, a=a, n=n: len(groups(p["order"])) > n
                           or p[f"block_{a}"] == p[f"reg_{a}"] == 1),
                Constraint(f"assign_{a} is cyclic when reg_{a} is 1 (both are the same then)",
                           (f"reg_{a}", f"assign_{a}"),
                           lambda p, a=a: p[f"reg_{a}"] > 1 or p[f"assign_{a}"] == "cyclic"),
                Constraint(f"a vector assignment along {a} holds whole vectors of {run} "
                           f"values (reg_{a} a multiple of {run})", (f"reg_{a}", f"assign_{a}"),
                           lambda p, a=a: p[f"assign_{a}"] != "vector"
                           or p[f"reg_{a}"] % run == 0),
            ]
        if program.sizes is not None:
            rules += self._fixed_size_rules(program)
        return rules

    def _fixed_size_rules(self, program: Program) -> list[Constraint]:
        """With known sizes, tiles and steps no larger than what they cover."""
        sizes = program.sizes
        rules = []
        for n, a in enumerate(AXES):
            def fits(p, n=n, a=a):
                axes = groups(p["order"])
                if len(axes) <= n:
                    return True
                tile = p[f"block_{a}"] * p[f"reg_{a}"]
                return tile <= covering(group_extent(axes[n], sizes), POWERS_OF_TWO)
            rules.append(Constraint(f"the {a} tile is no larger than its dimension needs",
                                    ("order", f"block_{a}", f"reg_{a}"), fits))
        # Only an output of more values than the x axis holds blocks can need more blocks.
        if math.prod(sizes[i] for i in program.output_indices) > INT32_LIMIT:
            rules.append(Constraint(
                f"the grid holds the tiles: at most {INT32_LIMIT} blocks along x (with the y and z "
                f"axes' blocks folded into it where they exceed {GRID_YZ_LIMIT})",
                ("order", *(f"{k}_{a}" for k in ("block", "reg") for a in AXES)),
                lambda p: grid_x_blocks(program, p) <= INT32_LIMIT))
        if self.limits.sm_count:
            rules.append(self._filling_rule(program, self.limits.sm_count))
        longest = max((sizes[i] for s in program.statements for i in s.summed), default=0)
        rules.append(Constraint("the step is no longer than the reduction needs", ("step",),
                                lambda p: p["step"] <= covering(longest, STEPS[1:])))
        if splittable(program):
            rules += self._split_rules(program)
        return rules

    def _split_rules(self, program: Program) -> list[Constraint]:
        """A split needs steps, at least one per part, and blocks too few to fill the GPU
        without it (otherwise it only adds atomic traffic)."""
        first = split_extent(program)
        rules = [Constraint("splitting the reduction needs steps, at least one per part",
                            ("step", "split"),
                            lambda p: p["split"] == 1 or 0 < p["step"] and p["split"] <= -(
                                -first // p["step"]))]
        if self.limits.sm_count:
            sms = self.limits.sm_count
            tiled = ("order", *(f"{k}_{a}" for k in ("block", "reg") for a in AXES))
            rules.append(Constraint(
                f"a split only where the tiles give fewer than {2 * sms} blocks", (*tiled, "split"),
                lambda p: p["split"] == 1 or tile_blocks(program, p) < 2 * sms))
        return rules

    @staticmethod
    def _filling_rule(program: Program, sms: int) -> Constraint:
        """At least two blocks per SM wherever the output has the points for them: with one
        block or none an SM idles at every barrier (CUDA C++ Best Practices Guide, "Thread
        and Block Heuristics": more blocks than SMs, and several active blocks per SM so that
        blocks not waiting at a __syncthreads() keep it busy)."""
        points = math.prod(program.sizes[i] for i in program.output_indices)
        tiled = ("order", *(f"{k}_{a}" for k in ("block", "reg") for a in AXES))

        def fills(p: Mapping[str, Any]) -> bool:
            threads = p["block_x"] * p["block_y"] * p["block_z"]
            return (tile_blocks(program, p) * p["split"] >= 2 * sms
                    or points < 2 * sms * threads)

        return Constraint(f"at least {2 * sms} blocks (two per SM) when the output has "
                          f"{2 * sms} x threads per block points (or a split reduction makes "
                          "up the blocks)", (*tiled, "split"), fills)

    def defaults(self, program: Program, before: Sequence[Strategy] = ()) -> dict[str, Any]:
        order = mapping_orders(program)[0]
        chosen: dict[str, Any] = {"order": order}
        wanted = ((16, 4), (16, 4), (2, 1))  # (threads, registers) per axis: 64 x 64 x 2 tiles
        for n, a in enumerate(AXES):
            axes = groups(order)
            threads, regs = wanted[n] if n < len(axes) else (1, 1)
            if program.sizes is not None and n < len(axes):
                extent = group_extent(axes[n], program.sizes)
                threads = min(threads, covering(extent, self.blocks))
                regs = min(regs, covering(-(-extent // threads), self.registers))
            chosen.update({f"block_{a}": min(threads, max(self.blocks)),
                           f"reg_{a}": min(regs, max(self.registers)), f"assign_{a}": "cyclic"})
        summed = [program.sizes[i] if program.sizes else 64
                  for s in program.statements for i in s.summed]
        step = min(16, covering(max(summed), STEPS[1:])) if summed else 0
        chosen.update(step=step if step in self.steps else self.steps[0],
                      unroll=step > 0 and True in self.unrolls, split=1)
        return chosen

    def transform(self, scheduled: Scheduled, params: Mapping[str, Any]) -> Scheduled:
        program = scheduled.program
        order = groups(params["order"])
        names = schedule_space(program)
        position = {index: names[d] for d, index in enumerate(program.output_indices)}
        blocks, threads, registers = ["0"] * 3, ["0"] * 3, []
        for n, group in enumerate(order):
            a = AXES[n]
            b, r = params[f"block_{a}"], params[f"reg_{a}"]
            blocks[n], threads[n], reg = _tile(_linear(group, position, program.sizes), b, r,
                                               params[f"assign_{a}"], vector_run(program))
            if r > 1:
                registers.insert(0, reg)  # z, y, x: x innermost
        unmapped = [position[i] for i in program.output_indices
                    if i not in on_axes(params["order"])]
        reduction, reduction_roles = reduction_schedule(program, params["step"])
        parts = _split_parts(program, params)
        target = blocks + threads + unmapped + parts + reduction + registers
        roles = ((Role.BLOCK,) * 3 + (Role.THREAD,) * 3 + (Role.GRID,) * (len(unmapped)
                                                                          + len(parts))
                 + reduction_roles + (Role.REGISTER,) * len(registers))
        # Register loops are unrolled in the kernel IR, so register indices become constants;
        # the loop within a step by the C compiler (unrolled in the IR too, it would multiply
        # the code the IR's passes walk by the step), its innermost summed index only
        # (rolled_depth).
        unroll = tuple(n for n, role in enumerate(roles) if role == Role.REGISTER)
        inner = [n for n, role in enumerate(roles) if role == Role.INNER]
        rolled = rolled_depth(program) if params["unroll"] else 0
        pragma = tuple(inner[rolled:]) if params["unroll"] else ()
        statements, locals_ = _register_tiles(scheduled, order, params)
        schedule = transform_schedule(program, target)
        if parts:
            schedule, statements = _split(program, schedule, statements, params,
                                          MAPPED_DIMS + len(unmapped))
        workspace = bool(parts) and program.split_workspace
        if workspace:
            locals_ += (parts_workspace(program, part_count(program, params)),)
        return Scheduled(program, statements, schedule, roles,
                         tuple(params[f"block_{a}"] for a in AXES), locals_, unroll, pragma,
                         tuple(inner[:rolled]),
                         params=params,  # the mapping's decisions: a stager pads by them
                         zeroed_output=bool(parts) and not workspace
                         and program.contraction.op == "=")


def _linear(group: Sequence[str], names: Mapping[str, str],
            sizes: Mapping[str, int] | None) -> str:
    """The isl expression of an axis's value: its index, or for a group ``(c, a, b)`` the
    affine ``(c + S_c * a + S_c * S_a * b)`` (groups are offered for fixed sizes only, so
    that isl can divide it)."""
    if len(group) == 1:
        return names[group[0]]
    terms, stride = [], 1
    for index in group:
        terms.append(f"{stride}*{names[index]}")
        stride *= sizes[index]
    return f"({' + '.join(terms)})"


def _tile(o: str, threads: int, registers: int, assignment: str, run: int
          ) -> tuple[str, str, str]:
    """isl expressions of the block, thread and register coordinate of output value ``o``
    (``run``: the values of a vector, for the ``vector`` assignment)."""
    tile = threads * registers
    if assignment == "vector":
        return (f"floor({o}/{tile})", f"floor({o}/{run}) mod {threads}",
                f"{run}*floor(({o} mod {tile})/{run * threads}) + {o} mod {run}")
    if assignment == "cyclic":
        return f"floor({o}/{tile})", f"{o} mod {threads}", f"floor(({o} mod {tile})/{threads})"
    return f"floor({o}/{tile})", f"floor(({o} mod {tile})/{registers})", f"{o} mod {registers}"


def _register_tiles(scheduled: Scheduled, order: tuple[tuple[str, ...], ...],
                    params: Mapping[str, Any]):
    """Accumulators become arrays ``acc[reg_z][reg_y][reg_x]`` over the axes with reg > 1."""
    program = scheduled.program
    axes = [n for n in reversed(range(len(order))) if params[f"reg_{AXES[n]}"] > 1]
    shape = tuple(params[f"reg_{AXES[n]}"] for n in axes)
    statements = []
    for s in scheduled.statements:
        if s.kind not in (Kind.INIT, Kind.REDUCE, Kind.WRITE):
            statements.append(s)
            continue
        head = f"{s.name}[{', '.join(s.indices)}]"
        names = {i: i for i in program.output_indices}
        indices = [_tile(_linear(order[n], names, program.sizes), params[f"block_{AXES[n]}"],
                         params[f"reg_{AXES[n]}"], params[f"assign_{AXES[n]}"],
                         vector_run(program))[2]
                   for n in axes]
        accesses = []
        for element, access in zip(ir.elements(s.body), s.accesses, strict=True):
            if element.array in program.accumulators:
                access = isl.Map(f"{program.isl_params()}{{ {head} -> {element.array}"
                                 f"[{', '.join(indices)}] }}").intersect_domain(access.domain())
            accesses.append(access)
        statements.append(replace(s, accesses=tuple(accesses)))
    locals_ = tuple(ir.Local(a, ir.Space.REGISTER, shape) for a in program.accumulators)
    return tuple(statements), locals_


def splittable(program: Program) -> bool:
    """Whether the reduction may be split over blocks whose parts are added into the output:
    fixed sizes, one reduction, and an output that is a linear combination of its sum (no
    term without it, no read of the output), so that adding the parts adds up to it. The
    parts go into the output atomically, or, where :attr:`Program.split_workspace` (float16
    and bfloat16 outputs, deterministic programs), into a float32 workspace that a second
    kernel adds in order."""
    reduces = [s for s in program.statements if s.kind == Kind.REDUCE]
    write = next(s for s in program.statements if s.kind == Kind.WRITE)
    return (program.sizes is not None and len(reduces) == 1
            and not program.contraction.reads_output
            and _multiple_of_sums(write.body.value, set(program.accumulators)))


def _multiple_of_sums(e: ir.Expr, accumulators: set[str]) -> bool:
    """Whether ``e`` is a multiple of the accumulators: zero where they are."""
    if isinstance(e, ir.Element):
        return e.array in accumulators
    if isinstance(e, ir.Neg):
        return _multiple_of_sums(e.operand, accumulators)
    if isinstance(e, ir.Binary) and e.op in (ir.Op.ADD, ir.Op.SUB):
        return _multiple_of_sums(e.left, accumulators) and _multiple_of_sums(e.right, accumulators)
    if isinstance(e, ir.Binary) and e.op is ir.Op.MUL:
        constant = [not any(x.array in accumulators for x in ir.elements(side))
                    for side in (e.left, e.right)]
        return (constant[0] and _multiple_of_sums(e.right, accumulators)
                or constant[1] and _multiple_of_sums(e.left, accumulators))
    return False


def split_extent(program: Program) -> int:
    """The extent of the summed index a split divides."""
    return program.sizes[split_index(program)]


def tile_blocks(program: Program, p: Mapping[str, Any]) -> int:
    """Blocks the output tiles take (without a split): the tiles along each axis times one
    block per value of every other output index."""
    sizes = program.sizes
    blocks = math.prod(sizes[i] for i in program.output_indices)
    for n, group in enumerate(groups(p["order"])):
        tile = p[f"block_{AXES[n]}"] * p[f"reg_{AXES[n]}"]
        extent = group_extent(group, sizes)
        blocks = blocks // extent * -(-extent // tile)
    return blocks


def grid_x_blocks(program: Program, p: Mapping[str, Any]) -> int:
    """Blocks along the grid's x axis (without a split, which only small grids take): the x
    tiles, times the y or z tiles where those exceed what their own axis holds, times one
    block per value of every output index not on an axis (all folded into x, see
    :mod:`treduda.polyhedral.ast_build`)."""
    sizes = program.sizes
    on_axes = groups(p["order"])
    blocks = math.prod(sizes[i] for i in program.output_indices
                       if not any(i in group for group in on_axes))
    for n, group in enumerate(on_axes):
        tiles = -(-group_extent(group, sizes) // (p[f"block_{AXES[n]}"] * p[f"reg_{AXES[n]}"]))
        if n == 0 or tiles > GRID_YZ_LIMIT:
            blocks *= tiles
    return blocks


def split_chunk(program: Program, params: Mapping[str, Any]) -> int:
    """Steps of the split index each part sums (the last part may have fewer)."""
    return split_parts(-(-split_extent(program) // params["step"]), params["split"])[0]


def _split_parts(program: Program, params: Mapping[str, Any]) -> list[str]:
    """The schedule's part dimension (empty without a split): which part of the first summed
    index's steps an instance of the reduction belongs to."""
    if params.get("split", 1) == 1:
        return []
    r0 = schedule_space(program)[len(program.output_indices) + 1]
    return [f"floor({r0}/{params['step'] * split_chunk(program, params)})"]


def part_count(program: Program, params: Mapping[str, Any]) -> int:
    """How many parts a split reduction has (``split``, or fewer where the steps run out)."""
    return split_parts(-(-split_extent(program) // params["step"]), params["split"])[1]


def parts_workspace(program: Program, parts: int) -> ir.Local:
    """The workspace of a deterministic split into ``parts``, ``td_parts[part, o]``: one
    output per part, the part slowest in memory in either layout, so a part's values are laid
    out as the output's (float32 for float16 and bfloat16 outputs: each part's sum is rounded
    once, with the others, when the parts are added)."""
    shape = tuple(program.sizes[i] for i in program.output_indices)
    shape = (parts, *shape) if program.layout == "C" else (*shape, parts)
    return ir.Local(PARTS, ir.Space.GLOBAL, shape, program.layout)


def _split(program: Program, schedule: isl.UnionMap, statements: tuple, params: Mapping[str, Any],
           position: int) -> tuple[isl.UnionMap, tuple]:
    """The initialisation and the write once per part (the reduction already has its part
    from its summed index), the write an atomic addition into the output, or in a
    deterministic program a store into the workspace (:func:`to_workspace`)."""
    parts = part_count(program, params)
    per_part = {s.name for s in statements if s.kind in (Kind.INIT, Kind.WRITE)}
    maps: list[isl.Map] = []
    schedule.foreach_map(maps.append)
    result = None
    for m in maps:
        if m.get_tuple_name(isl.dim_type.in_) in per_part:
            dims = [f"d{n}" for n in range(m.dim(isl.dim_type.out))]
            every_part = isl.Set(f"{{ [{', '.join(dims)}] : 0 <= d{position} < {parts} }}")
            m = (m.project_out(isl.dim_type.out, position, 1)
                 .insert_dims(isl.dim_type.out, position, 1).intersect_range(every_part))
        result = isl.UnionMap.from_map(m) if result is None else result.union(m)
    if program.split_workspace:
        return to_workspace(program, result, statements, parts, position)
    update = "-=" if program.contraction.op == "-=" else "+="
    statements = tuple(
        replace(s, body=ir.Assign(s.body.target, update, s.body.value, atomic=True))
        if s.kind == Kind.WRITE else s for s in statements)
    return result, statements


def to_workspace(program: Program, schedule: isl.UnionMap, statements: tuple, parts: int,
                 position: int) -> tuple[isl.UnionMap, tuple]:
    """The write of a deterministic split: its domain gains the part,
    ``{ write[o] } -> { write[o, td_part] : 0 <= td_part < parts }``, scheduled at its part
    (schedule dimension ``position``), and it stores into ``td_parts`` instead of adding into
    the output: ``{ write[o, td_part] -> td_parts[td_part, o] }`` (``[o, td_part]`` in layout
    F, whose first index is fastest)."""
    write = next(s for s in statements if s.kind == Kind.WRITE)
    outputs = list(write.indices)
    lifted = f"{write.name}[{', '.join([*outputs, PART])}]"
    lift = isl.Map(f"{{ {lifted} -> {write.name}[{', '.join(outputs)}] : 0 <= {PART} < {parts} }}")
    maps: list[isl.Map] = []
    schedule.foreach_map(maps.append)
    result = None
    for m in maps:
        if m.get_tuple_name(isl.dim_type.in_) == write.name:
            dims = [f"d{n}" for n in range(m.dim(isl.dim_type.out))]
            m = lift.apply_range(m).intersect(
                isl.Map(f"{{ {lifted} -> [{', '.join(dims)}] : d{position} = {PART} }}"))
        result = isl.UnionMap.from_map(m) if result is None else result.union(m)
    indices = [PART, *outputs] if program.layout == "C" else [*outputs, PART]
    target = isl.Map(f"{{ {lifted} -> {PARTS}[{', '.join(indices)}] }}").intersect_domain(
        lift.domain())
    accesses = (target, *(lift.apply_range(a) for a in write.accesses[1:]))
    body = ir.Assign(ir.Element(PARTS, tuple(ir.Var(i) for i in indices)), "=", write.body.value)
    stored = replace(write, indices=(*outputs, PART), body=body, accesses=accesses)
    return result, tuple(stored if s is write else s for s in statements)


@register
class ThreadPerElement(Tiled):
    name = "thread_per_element"
    description = ("one output element per thread, sums in registers; up to three output "
                   "dimensions on the grid (thesis strategy 3)")
    registers = (1,)
    assignments = ("cyclic",)
    steps = (0,)
    unrolls = (False,)
    splits = (1,)

    def defaults(self, program: Program, before: Sequence[Strategy] = ()) -> dict[str, Any]:
        chosen = super().defaults(program, before)
        order = groups(chosen["order"])
        for n, (a, wanted) in enumerate(zip(AXES, (32, 4, 2), strict=True)):
            extent = (group_extent(order[n], program.sizes) if program.sizes and n < len(order)
                      else wanted)
            chosen[f"block_{a}"] = min(wanted, covering(extent, self.blocks)) if n < len(
                order) else 1
        return chosen

