"""The statements and schedule of a tensor-core kernel (:class:`.tensorcore.TensorCore`).

Per reduction step of ``BK`` summed values the block copies the ``BM x BK`` tile of A and the
``BK x BN`` tile of B into shared memory, in a 2-D layout whose rows are the operand's fastest
global index (so copies coalesce) and whose leading dimension is padded, tile by tile, so that
the rows a fragment load reads at once lie on distinct banks
(:func:`.tensorcore_tiles.operand_pads`). Elements outside the tensors are zero-filled, so
partial tiles multiply zeros, except where each warp's last fragment along N has its last 8
columns wholly outside N (:func:`.tensorcore_tiles.last_columns`): its B loads and MMAs then
take its first 8 only (ldmatrix.x2, one mma.sync of two). The accumulators then go
through a shared ``BM x BN`` tile to the output, in its own layout, by the program's own
write statement (alpha, beta, ``+=``), which only covers elements inside the output. That
tile takes over the operand tiles' memory (:attr:`ir.Local.reuses`): it is written after
the barrier that follows the main loop, when no copy is in flight and no fragment is read
any more. Schedule::

    fill[P, w, f, l]          -> [bn, bm, 0, 32w + l, 0, 0, batch, 0, 0, 0, 0, 0, 0, f]
    sync0[P, ks, t]           -> [.., t, .., batch, 1, ks, 0, 0, 0, 0, 0]
    copy/zero_X[P, ks, c, t]  -> [.., t, .., batch, 1, ks, 1, 0, c, X, 0]
    sync2[P, ks, t]           -> [.., 1, ks, 2, 0, 0, 0, 0]
    load_X[P, ks, w, kf, f, l] / mma[P, ks, w, kf, f, l]
                              -> [.., 32w + l, .., 1, ks, 3, 0, kf, 0 | 1 | 2, f]
    sync, store[P, w, f, l], sync, write[P, c, j, t]
                              -> [.., 2, 0, 0 | 1 | 2 | 3, c, 0, 0, f | j]

with ``P = [bn, bm, batch]``; thread ``t`` (of ``T``) copies or zero-fills the tile element
``e = T c + t`` in iteration ``c``, so consecutive threads take consecutive elements, and
writes position ``t mod G + G j`` of the C tile's row ``t / G + (T / G) c``
(:meth:`Builder.write_statement`; the write's ``c`` in the fifth place of the tail where it
is unrolled whole, ``[.., 2, 0, 3, 0, c, 0, j]``).
The copies' ``c`` is in an unrolled dimension; where a thread copies more than
:data:`UNROLLED_COPIES` runs of an operand per step, in the loop's (``[.., 1, ks, 1, c, 0, X,
0]``).

Copies follow the operand, not the output: each group of indices is linearised in the memory
order of the operand whose fastest index it holds (:func:`.tensorcore_tiles.gemm_groups`;
unless the output's writes, which then outnumber the reads, would lose their order), and a
tile's rows run along that group, so the elements ``e`` numbers along a row are consecutive
in the operand (tccg_20's ``B[d,f,c,e]``, read along the output's ``c``, had consecutive
threads 8064 elements apart: 32 sectors per warp load where 2 do). The shared layout needs
nothing else: the fragment layout of each operand (row- or column-major) is the one that reads
its tile's rows (:func:`.tensorcore_tiles.operand_rows_major`). 16-bit values are copied as
their bits (the printer's raw copy into a tile of the stored type), or by cp.async in runs of
up to 8 where the row's group starts with the operand's contiguous indices; each operand takes
cp.async or not on its own (:func:`.tensorcore_tiles.copy_widths`).

Where A and B lead with different summed indices (tccg_14's ``A[c,a,d]`` and ``B[d,c,b]``),
no order of K reads both along their rows: steps along ``c`` read B a value per row, 32
sectors a warp request where 2 do. A K box (``frags_k`` 16, :func:`.tensorcore_tiles.k_box`)
steps over 16 values of ``c`` by 16 of ``d`` instead, both tiles' rows holding them in one
order (:func:`.tensorcore_tiles.box_indices`: a fragment's 16 columns are 16 values of ``c``
at one ``d``). A's copies move runs of ``c`` as before; B's read four values of ``d`` at once
(8 bytes: four copies a sector) and store them 64 columns apart (:attr:`ir.AsyncCopy.stride`,
no cp.async: it cannot transpose), dealt so that a warp's stores fill the 32 banks once
(:func:`.tensorcore_tiles.box_dealt`). ldmatrix cannot take B's tile as it lands instead: its
rows must be 16 bytes of the MMA's K (or of N, transposed), and B's contiguous values are
``d``, one per fragment k-extent.

Where the output's fastest index ``o`` follows other indices ``c`` of its group in the
operand (tccg_31's ``A[d,e,g,a]``, output ``C[a,...]``), neither order of the group serves
both the operand's copies and the output's writes. A free box (``free_layout`` "box",
:func:`.tensorcore_tiles.free_box`) linearises it as P values of ``c`` by Q of ``o``, then the
rest (:func:`.tensorcore_tiles.group_digits`): the copies move runs of P (cp.async where the
operand's rows run along the group), the write takes Q values of ``o`` at a time
(:func:`.tensorcore_tiles.output_local`) from C tile rows skewed so that a warp's reads, P
apart, take each bank once (:func:`.tensorcore_tiles.skew_words`). A "full" box (Q of all of
``o``, no power of two) takes ``o`` fastest instead, its copies dealt ``c`` fastest
(:func:`.tensorcore_tiles.interleaved_row`): no skew, the accumulators stored in pairs.

No copy divides by a group's extents in the main loop: the free groups' indices depend on the
block and the thread only, which nvcc computes once, and where K is a group the steps scan its
fastest index rounded up to whole steps (:func:`.tensorcore_tiles.stepped_k`), so that a
step's K indices are ``BK (ks mod S) + r`` and ``ks / S``, once per step, plus the thread's
row ``r``. Where rounding up would cost too much (84 in steps of 64), the step's digits are
divided once per step and each copy adds its row to the fastest, carrying one into the next
digit where it passes the extent (:meth:`Builder.carried_k`): a compare and a selected
displacement a copy, not a division.
An asynchronous copy zero-fills by its read size where its source lies outside the
tensor (:attr:`ir.AsyncCopy.reads`): one cp.async per run and no branch, where a copy and a
zero-fill under complementary guards gave nvcc a branch per run (tccg_20's SASS main loop:
534 instructions, 38 non-MMA per MMA executed, before all this; 102 and 2.19 after).

In ``stages`` S of two or more each operand tile has S buffers, step ``k`` taking buffer
``k mod S``: it fills the buffer step ``k - S`` read, which every thread finished before the
barrier of step ``k - S + 1``, so the first barrier goes (as in the staging strategy's double
buffering), and a step's copies are issued right after an earlier step's barrier.

With ``async_copy`` an operand with a copy width (:func:`copy_widths`) is copied by cp.async
runs (:class:`ir.AsyncCopy`) of that width, ``e`` numbering runs, in one statement ``copy_X``
that reads where the source lies inside the tensor and zero-fills elsewhere (an operand
without one is copied and zero-filled through registers); each thread commits them
(``[.., 1, ks, 2, 0, 0, 0, 0]``) and waits for them right before the second barrier. In S
stages they run ``S - 1`` steps ahead (``copy``, ``commit`` at position ``ks - S + 1``;
``wait``, ``sync2`` at stage 0 of step ``ks``), issued after that position's barrier into the
buffer step ``ks - S`` read, before its MMAs and those of the steps up to ``ks - 1``, which
they overlap: the wait (cp.async.wait_group ``S - 2``) leaves the copies of the ``S - 2``
later steps in flight. A commit at every position, empty ones after the last step's copies,
keeps that count exact at the last steps (as CUTLASS's multistage main loop commits).

With ``split > 1`` ``P`` gains the part of the reduction, a grid dimension: a block sums the
steps ``chunk * part <= ks < chunk * (part + 1)`` and adds its tile into the output atomically
(which starts at zero for ``=``), as the tiled strategy's split-K does. In a deterministic
program, and into float16 or bfloat16 (OpenCL has no 16-bit atomic addition:
``Program.split_workspace``), the write stores the part's tile into a float32 workspace instead
(``tiling.parts_workspace``), which a second kernel adds in order.

The warp-collective statements have the lane ``l`` in their domain but not in their operands:
isl's AST scan pins ``threadIdx.x = 32w + l`` as it pins every thread dimension, and every
thread of a warp executes the statement with the same operands, which is what a
warp-collective operation needs.

Every statement's index expressions are written once, as kernel IR: isl's text of them gives
the access relations, and simplified with the ranges of the statement's coordinates
(:func:`~treduda.codegen.simplify.simplify`) they are its ``formulas``, which the AST builder
takes instead of composing the relations with the schedule. Left to isl, the copies of
operands whose M, N or K are groups of indices (``floor((96 bm + r) / 96) mod 84``) and the
write of such an output, over the output's own indices, took tccg_20 minutes to scan. The
guards for partial tiles come from isl's scan of the domains.

The shared tiles' extents are the tile parameters' by construction (the 2-D tile of the
linearised groups), not a box hull. That staging is the strategy's own: fragment loads read
whole fragments, so the tiles need zeros outside the tensors and rows a fragment load
accepts, which the staging strategy's footprint boxes do not give; ``tensorcore+staged`` is
refused (see :meth:`.tensorcore.TensorCore.describe` for what the geometry's quantities mean
here).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import islpy as isl

from treduda.codegen import ir
from treduda.codegen.simplify import plus, quotient, remainder, simplify, times, value_range
from treduda.frontend import dtypes
from treduda.model import iteration
from treduda.polyhedral.ast_build import isl_text
from treduda.polyhedral.lower import Kind, Program, Statement
from treduda.polyhedral.strategy import Role, Scheduled

from .tensorcore_tiles import (
    UNROLLED_COPIES,
    WARP,
    accumulator_dtype,
    accumulator_extents,
    accumulator_pad,
    accumulator_skew,
    box_dealt,
    box_indices,
    boxed,
    copy_shape,
    copy_widths,
    digit_values,
    fastest_first,
    free_boxed,
    free_digits,
    gemm_groups,
    group_extents,
    group_slots,
    index_digits,
    interleaved_row,
    last_columns,
    mma_shape,
    o_first,
    operand_pads,
    operand_rows_major,
    output_along_n,
    output_local,
    skew_words,
    skewed,
    split_parts,
    stepped_k,
    swizzle_shift,
    tile_extents,
    transposed_product,
    write_lanes,
    write_span,
    write_vector,
)
from .tiling import PARTS, parts_workspace

A_TILE, B_TILE, C_TILE = "td_sa", "td_sb", "td_sc"
FRAG_A, FRAG_B, FRAG_C = "td_fa", "td_fb", "td_fc"
# Schedule positions after the phase: step, stage, loop, kf, operand, fragment.
STAGE_SYNC_BEFORE, STAGE_COPY, STAGE_SYNC_AFTER, STAGE_MMA = 0, 1, 2, 3
# The kernel IR's integer operators, in which the tile formulas shared with the model are written
OPERATORS = (quotient, remainder, plus, times)
# The most stores of a thread's write that the kernel IR unrolls whole, where a division
# by a group's extent reads ``c`` or ``j`` (_divides): each copy's, simplified with its
# constants in, a division of the block's or thread's values a thread instead of one an
# element (tccg_33's 128 x 256 warpgroup tile: 13.9 -> 4.0 SASS instructions an element).
WHOLE_WRITE = 128


@dataclass(frozen=True)
class Write:
    """The program's write statement as a tensor-core kernel writes it
    (:meth:`Builder.write_statement`): its name, coordinates and their constraints, body,
    accesses, and the values its guards keep below their limits."""

    name: str
    indices: tuple[str, ...]
    constraints: str
    body: ir.Assign
    accesses: tuple[ir.Element, ...]
    limits: tuple[tuple[ir.Expr, int], ...]
    ranges: dict[ir.Expr, tuple[int, int]]  # of its coordinates
    divides: bool  # a division by a constant reads c or j (_divides)
    whole: bool  # unrolled whole in the kernel IR: dividing, up to WHOLE_WRITE stores
    vector: int  # the output values a thread stores at once (write_vector)
    read: int  # the C tile values one of its loads takes (vectorize merges a vector's lanes)


def _isl_element(element: ir.Element) -> str:
    return f"{element.array}[{', '.join(isl_text(i) for i in element.indices)}]"


def _all(conditions: Sequence[ir.Expr]) -> ir.Expr | None:
    """The conjunction of ``conditions`` (None for none: always true)."""
    if not conditions:
        return None
    result = conditions[0]
    for condition in conditions[1:]:
        result = ir.Binary(ir.Op.AND, result, condition)
    return result


def _may_reach(e: ir.Expr, limit: int, ranges: Mapping[ir.Expr, tuple[int, int]]) -> bool:
    """Whether ``e`` may be ``limit`` or more, given its variables' ``ranges``."""
    span = value_range(e, ranges)
    return span is None or span[1] >= limit


def _formulas(accesses: Sequence[ir.Element], ranges: Mapping[ir.Expr, tuple[int, int]]
              ) -> tuple[tuple[ir.Expr, ...], ...]:
    """Each access's indices simplified with the ``ranges`` of its statement's coordinates."""
    return tuple(tuple(simplify(i, ranges) for i in a.indices) for a in accesses)


def _ranges(domain: isl.Set, indices: Sequence[str]) -> dict[ir.Expr, tuple[int, int]]:
    """The smallest and largest value of each of ``domain``'s ``indices`` (none where it is
    empty)."""
    if domain.is_empty():
        return {}
    return {ir.Var(index): (domain.dim_min_val(d).to_python(), domain.dim_max_val(d).to_python())
            for d, index in enumerate(indices)}


def _unrolled(formulas: Sequence[Sequence[ir.Expr]], globals_: Sequence[Sequence[ir.Expr]],
              limits: Sequence[tuple[ir.Expr, int]], ranges: Mapping[ir.Expr, tuple[int, int]]
              ) -> float:
    """A write unrolled whole (:attr:`Write.whole`): each copy's divisions with its ``c``
    and ``j`` in them, simplified as the unroller simplifies them
    (:mod:`treduda.codegen.unroll`); per store, the instructions a thread computes once for
    all of them: each distinct division (:func:`~treduda.model.iteration.divisions`), a
    test for each distinct guard its values may fail, and a term for each distinct offset
    of a global access holding a division, but for its constant (an immediate offset of the
    store)."""
    loops = (ir.Var("c"), ir.Var("j"))
    copies = math.prod(ranges[v][1] + 1 for v in loops)
    found: set[ir.Expr] = set()  # the copies' divisions
    offsets: set[tuple] = set()
    for i in {i: None for access in formulas for i in access} | {v: None for v, _ in limits}:
        nodes = iteration.divided(i, loops)  # the divisions that read c or j
        read = [v for v in loops if any(iteration.varies(n, v) for n in nodes)]
        stored = any(i in access for access in globals_)
        # each value of the loop variables the divisions read (a copy of each)
        for values in itertools.product(*(range(ranges[v][1] + 1) for v in read)):
            named = {v.name: ir.Int(value) for v, value in zip(read, values, strict=True)}
            simplified = [simplify(ir.substitute(n, named), ranges) for n in nodes]
            found.update(simplified)
            if stored and nodes:
                offsets.add((i, frozenset(t for e in simplified
                                          for t in ir.affine(e)[0].items())))
    tests: set[ir.Expr] = set()  # the copies' guards that their values may fail
    for v, limit in limits:
        read = [u for u in loops if iteration.varies(v, u)]
        for values in itertools.product(*(range(ranges[u][1] + 1) for u in read)):
            guard = ir.substitute(v, {u.name: ir.Int(value)
                                      for u, value in zip(read, values, strict=True)})
            if _may_reach(guard, limit, ranges):
                tests.add(guard)
    once = (iteration.divisions(found) + len(tests) * iteration.TEST
            + len(offsets) * iteration.TERM)
    return once / copies


def _loops_only(e: ir.Expr, loops: Sequence[ir.Var]) -> bool:
    """Whether ``e`` reads no variable but ``loops``: constant in each unrolled copy."""
    if isinstance(e, ir.Var):
        return e in loops
    return all(_loops_only(child, loops) for child in ir.children(e))


def _divides(formulas: Sequence[Sequence[ir.Expr]], limits: Sequence[tuple[ir.Expr, int]],
             ranges: Mapping[ir.Expr, tuple[int, int]], folded: bool) -> bool:
    """Whether one of a write's indices or guards divides ``c`` or ``j`` by a constant:
    what an unrolled copy simplifies (:func:`_unrolled`) and nvcc's loop cannot, so the
    kernel IR unrolls such a write whole, up to :data:`WHOLE_WRITE` stores. Any other write
    stays the loop over ``c`` as printed, which nvcc unrolls whole or in copies, the steps
    folded into the stores' offsets: unrolled by us instead, tccg_02's mma.sync write (48
    stores) left ptxas a main loop of 2.05 non-MMA instructions per MMA against 1.81
    (sm_90), and GEMM fp16's (128 stores) went from 3.44 SASS instructions an element as
    nvcc's loop of 16 copies to 3.88. Where the element numbering's divisions read ``c``
    alone (``folded``: the block's threads divide the row), nvcc's unrolling folds those as
    well: only a division that reads another value counts (tccg_04/06's group digits)."""
    loops = (ir.Var("c"), ir.Var("j"))
    indices = [*(i for found in formulas for i in found), *(v for v, _ in limits)]
    return any(not (folded and _loops_only(d, loops))
               for i in indices for d in iteration.divided(simplify(i, ranges), loops))


class Builder:
    """Builds the statements and schedule of one tensor-core kernel (see the module's doc)."""

    # Whether a split's parts all run ``chunk`` steps (:meth:`step_bounds`): the MMAs of a
    # step end within it, so a copy past the reduction's end lands in no buffer an MMA reads.
    whole_parts = True
    # Whether the write stores a vector of the output's fastest index at once (:meth:`vector`)
    vector_write = True
    # Whether the C tile's rows are skewed for the write's vector reads and the write places
    # a vector at ``V first`` (:func:`.tensorcore_tiles.accumulator_skew`): the mma.sync C
    # tile's layout; the warpgroup kernel lays out its own (crossed rows)
    skews_vectors = True

    def __init__(self, program: Program, params: Mapping[str, Any]):
        self.program, self.params = program, params
        self.sizes = program.sizes
        self.shape = mma_shape(program)
        found = gemm_groups(program)
        (self.a,), (self.b,), self.m, self.n, self.k, self.batch = found
        self.row_a, self.row_b = operand_rows_major(program, found)
        self.tile = tile_extents(params, self.shape)
        # a free box (free_box): the output's fastest group linearised as its digits
        self.free_box = free_boxed(program, params)
        # the groups' extents as the tiles cover them: a padded box's extra slots included
        self.slots = group_slots(program, self.free_box)
        self.extent = {**group_extents(program, self.free_box),
                       "k": math.prod(self.sizes[i] for i in self.k)}
        # a K box (k_box): steps of 16 x 16 values of A's and B's leading summed indices
        self.box = boxed(program, params)
        # K's extents as the steps scan them (the fastest rounded up: see stepped_k)
        self.k_sizes = stepped_k(program, found, self.tile["k"], self.box)
        self.warps_n = params["warps_n"]
        self.threads = WARP * params["warps_m"] * params["warps_n"]
        pad_a, pad_b = operand_pads(program, params)
        self.pads = {A_TILE: pad_a, B_TILE: pad_b, C_TILE: accumulator_pad(program, params)}
        self.swizzled = params["shared_layout"] == "swizzle"
        # the C tile is laid out along what the output's write reads: N, or M (column-major,
        # its rows those of C^T where the MMA computes that: :meth:`fragment_uses`)
        self.along_n = output_along_n(program)
        self.transposed = transposed_product(program, params)
        self.split = program.precision == dtypes.TF32X3  # hi and lo fragments
        self.divide(params["split"])
        # each operand's cp.async width, None where it is copied through registers
        self.widths = (copy_widths(program, found, self.box, self.free_box)
                       if params["async_copy"]
                       else dict.fromkeys((self.a, self.b)))
        self.asynchronous = any(w is not None for w in self.widths.values())
        self.stages = params["stages"]
        # asynchronous copies into two or more buffers run ahead: step ks's at position
        # ks - lead, ``stages - 1`` steps before its MMAs
        self.lead = self.stages - 1 if self.asynchronous else 0
        self.statements: list[Statement] = []
        self.schedule: isl.UnionMap | None = None

    def divide(self, split: int) -> None:
        """A split reduction into ``split`` parts at most (:func:`split_parts` of the steps):
        parts of ``chunk`` steps, a grid dimension for the part; each part stores its sum in
        a workspace instead of adding it where the program says so (``split_workspace``)."""
        self.chunk, self.parts = split_parts(self.steps(), split)
        self.workspace = self.parts > 1 and self.program.split_workspace

    # -- the block prefix P = [bn, bm, batch] and schedule points ----------------------------

    def prefix(self) -> list[str]:
        return ["bn", "bm", *(f"g_{i}" for i in self.batch), *self.part()]

    def part(self) -> list[str]:
        """The part of a split reduction, as a prefix dimension (none without a split)."""
        return ["part"] if self.parts > 1 else []

    def prefix_bounds(self) -> str:
        blocks = {"bn": -(-self.extent["n"] // self.tile["n"]),
                  "bm": -(-self.extent["m"] // self.tile["m"])}
        parts = [f"0 <= {d} < {e}" for d, e in blocks.items()]
        parts += [f"0 <= g_{i} < {self.sizes[i]}" for i in self.batch]
        parts += [f"0 <= {p} < {self.parts}" for p in self.part()]
        return " and ".join(parts)

    def step_bounds(self, beyond: int = 0, whole_parts: bool = False) -> str:
        """The steps ``ks`` a block sums: all, or its part's; and ``beyond`` more after them.
        With ``whole_parts``, where the builder's :attr:`whole_parts` allows and the copies
        run ahead of their step (``lead``), a split's every part has ``chunk`` steps, the
        last one's past the reduction's end too where ``chunk`` does not divide the steps:
        what this mapping's statements of a step take (:meth:`sync`, :meth:`copy`,
        :meth:`fragments`), the copies zero-filling the values past K's end (their limits),
        whose products the MMAs add, so that each part's loop runs a fixed count of steps.
        Bounded by the end, the loop's count varied with the part (``ks <= min(2255, 162
        part + 161)``: tccg_13 fp16's 2256 steps in 14 parts), and nvcc's SASS main loop
        held 301 instructions (sm_90), 277 for 12 equal parts; whole parts, 281 (295 with
        the MMAs guarded at the end instead of the copies zero-filling). A part bounded at
        the end guards its copies that run ahead anyway; in one stage it guards nothing in
        its loop, and whole parts cost the zero-fills: tccg_14 fp16's single-stage loop
        held 758 instructions bounded, 778 whole."""
        if self.parts > 1:
            bounds = f"{self.chunk}*part <= ks < {self.chunk}*(part + 1) + {beyond}"
            return (bounds if whole_parts and self.whole_parts and self.lead
                    else f"0 <= ks < {self.steps() + beyond} and {bounds}")
        return f"0 <= ks < {self.steps() + beyond}"

    def point(self, thread: str, tail: Sequence[str], prefix: Sequence[str] | None = None
              ) -> str:
        """A schedule point: block coordinates, the thread, batch dimensions, ``tail``
        (phase, step, stage, loop, kf, operand, fragment)."""
        bn, bm, *batch = prefix or self.prefix()
        return ", ".join([bn, bm, "0", thread, "0", "0", *batch, *tail])

    def add(self, name: str, kind: Kind, indices: Sequence[str], constraints: str,
            body: ir.Stmt, accesses: Sequence[ir.Element], point: str,
            written: Sequence[ir.Element] | None = None) -> None:
        """Statement ``name[indices]`` over ``constraints``, reading and writing ``accesses``
        (in :func:`ir.elements` order, indexed by expressions of ``indices``), scheduled at
        ``point``. The expressions are the statement's formulas too, so the AST builder
        need not compose the access relations with the schedule: isl split those of copies
        from groups of indices into so many pieces that tccg_20 never finished. ``written``,
        the same elements in expressions isl cannot take (comparisons: :meth:`carried_k`),
        gives the formulas instead."""
        head = f"{name}[{', '.join(indices)}]"
        domain = isl.Set(f"{{ {head} : {constraints} }}")
        maps = tuple(isl.Map(f"{{ {head} -> {_isl_element(a)} }}").intersect_domain(domain)
                     for a in accesses)
        ranges = _ranges(domain, indices) if accesses else {}
        formulas = _formulas(written or accesses, ranges)
        self.statements.append(Statement(name, kind, tuple(indices), body, maps,
                                         formulas=formulas))
        schedule = isl.UnionMap.from_map(
            isl.Map(f"{{ {head} -> [{point}] }}").intersect_domain(domain))
        self.schedule = schedule if self.schedule is None else self.schedule.union(schedule)

    # -- statements ----------------------------------------------------------------------

    def run(self) -> Scheduled:
        fm, fn, _ = self.shape
        p = self.params
        accumulators = p["frags_m"] * p["frags_n"] * (2 if self.split else 1)
        warp = self.warp_domain()
        self.add("fill", Kind.INIT, [*self.prefix(), "w", "f", "l"],
                 f"{warp} and 0 <= f < {accumulators}",
                 ir.FillFragment(ir.Element(FRAG_C, ()), ir.Float(0.0)),
                 [ir.Element(FRAG_C, (ir.Var("f"),))], self.point("32*w + l", ["0"] * 6 + ["f"]))
        self.reduction()
        self.write()
        return self.scheduled()

    def warp_domain(self) -> str:
        return (f"{self.prefix_bounds()} and 0 <= w < {self.threads // WARP} "
                f"and 0 <= l < {WARP}")

    def dealt(self, elements: int) -> str:
        """The constraints of ``elements`` dealt to the block's threads: element
        ``e = T c + t`` to thread ``t`` (of ``T``) in iteration ``c``, so consecutive threads
        take consecutive elements."""
        return (f"0 <= t < {self.threads} and 0 <= c < {-(-elements // self.threads)} "
                f"and {self.threads}*c + t < {elements}")

    def steps(self) -> int:
        return -(-math.prod(self.k_sizes.values()) // self.tile["k"])

    def sync(self, name: str, tail: Sequence[str], stepped: bool,
             body: ir.Barrier | ir.CommitCopies | ir.WaitCopies | None = None,
             beyond: int = 0) -> None:
        """A statement every thread executes (a barrier, or a commit or wait of its
        asynchronous copies), once or per step (and ``beyond`` steps more)."""
        body = body or ir.Barrier()
        indices = [*self.prefix(), *(["ks"] if stepped else []), "t"]
        steps = f" and {self.step_bounds(beyond, whole_parts=True)}" if stepped else ""
        self.add(name, Kind.SYNC if isinstance(body, ir.Barrier) else Kind.COPY, indices,
                 f"{self.prefix_bounds()}{steps} and 0 <= t < {self.threads}",
                 body, [], self.point("t", tail))

    def reduction(self) -> None:
        """Per step: the copies of the operand tiles, a barrier, the fragments. Single-
        buffered, a barrier first (the previous step's fragments are read); asynchronous
        copies are committed and waited for before the barrier, or, in ``S`` stages, issued
        ``S - 1`` steps ahead (after the barrier that follows the wait for the step's own
        copies). A thread then commits a group at every position, empty ones past the last
        step's copies included, so that waiting until ``S - 2`` groups are pending leaves
        exactly the later steps' in flight."""
        copy_step = f"ks - {self.lead}" if self.lead else "ks"
        wait = self.wait_stage()
        if self.stages == 1:  # else step k's buffer was last read at k - S
            self.sync("sync_before", ["1", "ks", str(STAGE_SYNC_BEFORE), "0", "0", "0", "0"],
                      True)
        self.copy(self.a, A_TILE, "m", 0, copy_step)
        self.copy(self.b, B_TILE, "n", 1, copy_step)
        if not self.asynchronous:
            self.sync("sync_after", ["1", "ks", str(STAGE_SYNC_AFTER), "0", "0", "0", "0"],
                      True)
        else:
            self.sync("commit", ["1", copy_step, str(STAGE_SYNC_AFTER), "0", "0", "0", "0"],
                      True, ir.CommitCopies(), beyond=max(0, self.lead - 1))
            self.sync("wait", ["1", "ks", str(wait), "0", "1", "0", "0"], True,
                      ir.WaitCopies(max(0, self.lead - 1)))
            self.sync("sync_after", ["1", "ks", str(wait), "0", "2", "0", "0"], True)
        self.fragments()

    def dealt_run(self, e: ir.Expr, shape: Mapping[str, Any]) -> tuple[ir.Expr, ir.Expr]:
        """The row of the 2-D tile and the first column of copy ``e``'s run (a tile of
        :func:`copy_shape` ``shape``): along the rows in turn, the rows interleaved as the
        shape's ``order`` says."""
        return (interleaved_row(quotient(e, shape["runs"]), shape["order"], OPERATORS),
                times(shape["width"], remainder(e, shape["runs"])))

    def wait_stage(self) -> int:
        """The stage of a step where its asynchronous copies are waited for: its first where
        they were issued steps ahead, else after them."""
        return STAGE_SYNC_BEFORE if self.lead else STAGE_SYNC_AFTER

    def held_apart(self, tile: str, columns: int) -> int:
        """Elements of ``tile`` as it is held between two places ``columns`` apart along a
        row of the 2-D tile: as many here, its rows held whole (padded after)."""
        return columns

    def copy(self, tensor: str, tile: str, free: str, order: int, step: str) -> None:
        """``copy_X[P, ks, e]: X_sh[..] = X[..]`` for the step's tile elements inside X and
        ``zero_X[P, ks, e]: X_sh[..] = 0`` for those outside, element ``e`` numbered along the
        tile's rows, scheduled at step position ``step``. A's row-major tile is M x K (``free``
        = "m"), B's is K x N ("n"). Asynchronous copies move a run of the operand's copy
        width each, ``e`` numbering the runs, in one statement that reads where the run lies
        inside X (only the conditions that may fail) and zero-fills elsewhere."""
        extent_free, extent_k = self.tile[free], self.tile["k"]
        shape = self.copy_shape(tensor, tile)
        row_is_free, rows, width = shape["row_is_free"], shape["rows"], shape["width"]
        runs = shape["runs"]  # tiles span multiples of 32 bytes: see copy_widths
        e = plus(times(self.threads, ir.Var("c")), ir.Var("t"))
        row, column = (box_dealt(e, width, OPERATORS) if shape["dealt"]
                       else self.dealt_run(e, shape))
        local_free, local_k = (row, column) if row_is_free else (column, row)
        block = "bm" if free == "m" else "bn"
        value = {free: plus(times(extent_free, ir.Var(block)), local_free),
                 "k": plus(times(extent_k, ir.Var("ks")), local_k)}
        summed = (self.box_summed(tile, local_k) if self.box
                  else digit_values(index_digits(self.k, self.k_sizes), value["k"],
                                    self.k_sizes, OPERATORS))
        held = digit_values(free_digits(self.program, self.params, free), value[free],
                            self.sizes, OPERATORS)

        def element(values: Mapping[str, ir.Expr], moved: tuple[str, ir.Expr] | None = None
                    ) -> ir.Element:
            found = [ir.Var(f"g_{index}") if index in self.batch
                     else values[index] if index in values else held[index]
                     for index in self.program.contraction.inputs[tensor]]
            if moved is not None:  # a carry's displacement, in the fastest index
                at = self.program.contraction.inputs[tensor].index(moved[0])
                found[at] = plus(found[at], moved[1])
            return ir.Element(tensor, tuple(found))

        carried = None if self.box else self.carried_k(tensor, local_k)
        summed_extent = math.prod(self.k_sizes.values())
        # where whole steps cover K, K ends with a step: one compare of the step, which a
        # step's copies share (a split's last part zero-fills past it: step_bounds), where
        # each copy compared its own element (tccg_13 fp16's split loop: 281 SASS
        # instructions against 289)
        limits = [(value[free], self.extent[free]),
                  (ir.Var("ks"), self.steps()) if summed_extent % extent_k == 0
                  else (value["k"], summed_extent)]
        limits += [(summed[i], self.sizes[i]) for i in self.k  # the rounded-up values: zeros
                   if self.k_sizes[i] > self.sizes[i]]
        limits += self.padded(held)
        inside = " and ".join(f"{isl_text(v)} < {limit}" for v, limit in limits)
        domain = (f"{self.prefix_bounds()} and {self.step_bounds(whole_parts=True)} and "
                  f"{self.dealt(rows * runs)}")  # zeros past K's end: the limits say so
        names = [*self.prefix(), "ks", "c", "t"]
        target = ir.Element(tile, (*self.buffer(),
                                   *self.tile_index(tile, row, column, row_is_free)))
        # a thread's few copies unrolled (in the fragments' dimension, unlike the write's)
        unrolled = -(-rows * runs // self.threads) <= UNROLLED_COPIES
        point = self.point("t", ["1", step, str(STAGE_COPY), *(
            ("0", "c") if unrolled else ("c", "0")), str(order), "0"])
        tile_element, source = ir.Element(tile, ()), ir.Element(tensor, ())
        accesses = [target, element(summed)]
        # the same elements, K's digits carried from the step's (carried_k)
        written = (None if carried is None
                   else [target, element(carried[0], (carried[1], carried[2]))])
        if self.widths[tensor] is not None:  # one cp.async, which zero-fills outside X
            ranges = _ranges(isl.Set(f"{{ copy_{tensor}[{', '.join(names)}] : {domain} }}"),
                             names)
            simplified = [(simplify(v, ranges), limit) for v, limit in limits]
            reads = [ir.Binary(ir.Op.LT, v, ir.Int(limit)) for v, limit in simplified
                     if _may_reach(v, limit, ranges)]
            stride = shape["stride"]
            self.add(f"copy_{tensor}", Kind.COPY, names, domain,
                     ir.AsyncCopy(tile_element, source, width, reads=_all(reads),
                                  stride=self.held_apart(tile, stride)),
                     accesses, point, written)
            self.landed(tile, names, domain, order, width, lambda j: ir.Element(
                tile, (*self.buffer(), *self.tile_index(tile, row, plus(column, times(stride, j)),
                                                        row_is_free))))
            return
        self.add(f"copy_{tensor}", Kind.COPY, names, f"{domain} and {inside}",
                 ir.Assign(tile_element, "=", self.copied(source)), accesses, point, written)
        self.add(f"zero_{tensor}", Kind.COPY, names, f"{domain} and not ({inside})",
                 ir.Assign(tile_element, "=", ir.Float(0.0)), [target], point)

    def carried_k(self, tensor: str, local_k: ir.Expr
                  ) -> tuple[dict[str, ir.Expr], str, ir.Expr] | None:
        """What a copy of ``tensor`` at K's value ``BK ks + local_k`` writes (:meth:`add`'s
        ``written``) where K is a group whose fastest extent ``n`` the step ``BK`` does not
        divide but spans at most (else None: :func:`stepped_k` rounded it up, or a step
        spans several of its values): K's digits as the step's (``BK ks mod n``, ``BK ks /
        n``, ...), the same for all a thread's copies, which nvcc computes once a step, the
        fastest plus ``local_k`` (``< BK <= n``); the tensor's fastest index; and the
        displacement to add to it. Where the fastest digit passes ``n`` one is carried
        into the next (a compare, ``d >= n``), which moves the element by ``s' - n s``
        (the two digits' strides): added to the fastest index, whose term the offset's
        Horner form (:func:`~treduda.polyhedral.ast_build.offset`) adds last, rather than
        into the digits, which left nvcc a Horner evaluation a copy (tccg_20's main loop:
        357 SASS instructions, against 329 dividing each copy's value and 316 so). Each
        copy divided its own value before: tccg_20 (``e, f`` = 84 x 84, ``BK`` 64) 12
        divisions a step, 113 of its loop's 201 non-MMA instructions."""
        sizes = [self.k_sizes[i] for i in self.k]
        if len(sizes) < 2 or sizes[0] % self.tile["k"] == 0 or self.tile["k"] > sizes[0]:
            return None
        indices = self.program.contraction.inputs[tensor]
        order = fastest_first(indices, self.program.layout)
        strides = dict(zip(order, itertools.accumulate(
            (self.sizes[i] for i in order[:-1]), operator.mul, initial=1), strict=True))
        higher = times(self.tile["k"], ir.Var("ks"))  # the step's value, then its higher digits
        carry, values, moved = local_k, {}, ir.Int(0)
        for index, following, size in zip(self.k, self.k[1:], sizes, strict=False):
            values[index] = remainder(higher, size)
            higher = quotient(higher, size)
            carry = ir.Binary(ir.Op.GE, plus(values[index], carry), ir.Int(size))
            moved = plus(moved, times(strides[following] - size * strides[index], carry))
        values[self.k[-1]] = higher
        values[self.k[0]] = plus(values[self.k[0]], local_k)
        return values, order[0], moved

    def copy_shape(self, tensor: str, tile: str) -> dict[str, Any]:
        """How the copies of ``tensor`` into ``tile`` are dealt (:func:`copy_shape`)."""
        return copy_shape(self.program, self.params, tensor, self.tile, self.pads[tile],
                          self.widths)

    def box_summed(self, tile: str, column: ir.Expr) -> dict[str, ir.Expr]:
        """The summed indices' values at ``column`` of a K box step's ``tile``
        (:func:`.tensorcore_tiles.box_indices`)."""
        return box_indices(self.program, ir.Var("ks"), column, OPERATORS)

    def padded(self, values: Mapping[str, ir.Expr]) -> list[tuple[ir.Expr, int]]:
        """The ``values`` of a padded free box's rounded-up index, each with its size: the
        slots past it are zeros in the copies and no element of the output."""
        return [(values[i], self.sizes[i]) for i in values if self.slots[i] > self.sizes[i]]

    def landed(self, tile: str, names: Sequence[str], domain: str, order: int, width: int,
               place: Callable[[ir.Expr], ir.Element]) -> None:
        """What a thread does with the run ``copy_X[names]`` copied asynchronously into
        ``tile`` (``place(j)`` its element ``j`` of ``width``) once it landed: nothing here
        (a mapping whose tiles must change in place says what)."""

    def fragments(self) -> None:
        """Per fragment k-extent of the step: load A's and B's fragments of the warp, then
        multiply-accumulate every pair. 3xTF32 adds hi*hi into the accumulator and lo*hi,
        hi*lo into a second one, added to it at the end: the large products round as FP32's
        do and the small ones' rounding errors are 2^-11 of theirs (summed into the same
        accumulator, 3xTF32's error on PoCL was up to 2.5 times FP32 SIMT's)."""
        fm, fn, fk = self.shape
        p = self.params
        frags_m, frags_n = p["frags_m"], p["frags_n"]
        warp = (f"{self.warp_domain()} and {self.step_bounds(whole_parts=True)} "
                f"and 0 <= kf < {p['frags_k']}")  # past K's end, of the copies' zeros
        names = [*self.prefix(), "ks", "w", "kf", "f", "l"]
        w, f = ir.Var("w"), ir.Var("f")
        wm, wn = quotient(w, self.warps_n), remainder(w, self.warps_n)
        pieces = (ir.Function.TF32, ir.Function.TF32_RESIDUAL) if self.split else (
            (ir.Function.TF32,) if self.program.precision == dtypes.TF32 else (None,))
        for operand, (tile, fragment, count, warp_origin, size, row_major, ld) in enumerate((
                (A_TILE, FRAG_A, frags_m, times(frags_m * fm, wm), fm, self.row_a,
                 self.ld(A_TILE)),
                (B_TILE, FRAG_B, frags_n, times(frags_n * fn, wn), fn, self.row_b,
                 self.ld(B_TILE)))):
            origin_free = plus(warp_origin, times(size, remainder(f, count)))
            origin_k = times(fk, ir.Var("kf"))
            if operand == 0:
                first = (origin_free, origin_k) if row_major else (origin_k, origin_free)
            else:
                first = (origin_k, origin_free) if row_major else (origin_free, origin_k)
            for piece, rounding in enumerate(pieces):
                for suffix, fragments, columns in self.columns(count, operand == 1):
                    self.add(f"load_{fragment}{piece}{suffix}", Kind.REDUCE, names,
                             f"{warp} and {piece * count} <= f < {(piece + 1) * count} "
                             f"and {fragments}",
                             ir.LoadFragment(ir.Element(fragment, ()), ir.Element(tile, ()), ld,
                                             rounding, columns),
                             [ir.Element(fragment, (f,)),
                              ir.Element(tile, (*self.buffer(), *first))],
                             self.point("32*w + l", ["1", "ks", str(STAGE_MMA), "0", "kf",
                                                     str(operand), "f"]))
        # products (a, b) of fragment offsets: 3xTF32 adds lo*hi and hi*lo before hi*hi
        count = frags_m * frags_n
        products = ([(count, frags_m, 0), (count, 0, frags_n), (0, 0, 0)] if self.split
                    else [(0, 0, 0)])
        # the transposed product's MMA multiplies B^T by A^T (:meth:`fragment_uses`)
        first, second = (FRAG_B, FRAG_A) if self.transposed else (FRAG_A, FRAG_B)
        for n, (c_offset, a_offset, b_offset) in enumerate(products):
            operands = {FRAG_A: plus(ir.Int(a_offset), quotient(f, frags_n)),
                        FRAG_B: plus(ir.Int(b_offset), remainder(f, frags_n))}
            for suffix, fragments, columns in self.columns(frags_n, True):
                self.add(f"mma{n}{suffix}", Kind.REDUCE, names,
                         f"{warp} and 0 <= f < {count} and {fragments}",
                         ir.MultiplyAccumulate(ir.Element(FRAG_C, ()), ir.Element(first, ()),
                                               ir.Element(second, ()), columns),
                         [ir.Element(FRAG_C, (plus(ir.Int(c_offset), f),)),
                          ir.Element(first, (operands[first],)),
                          ir.Element(second, (operands[second],))],
                         self.point("32*w + l", ["1", "ks", str(STAGE_MMA), "0", "kf", "2",
                                                 f"{len(products)}*f + {n}"]))

    def columns(self, period: int, along_n: bool) -> list[tuple[str, str, int | None]]:
        """The statements a fragment statement over ``f`` splits into by the columns of N it
        computes: a name suffix, the constraint on ``f`` and the columns (None: all). Where
        the warp's last fragment along N (``f`` = ``period - 1`` modulo ``period``) has
        columns wholly outside N (:func:`last_columns`), the B loads and MMAs
        (``along_n``) of that fragment take its leading columns only."""
        last = last_columns(self.program, self.params) if along_n else None
        if last is None:
            return [("", "0 <= f", None)]
        narrow = f"exists (q : f = {period}q + {period - 1})"
        return [("", f"not ({narrow})", None), ("_narrow", narrow, last)]

    def copied(self, source: ir.Element) -> ir.Expr:
        """What a copy through registers stores of the operand's element: the element (the
        fragment loads round, where the precision asks)."""
        return source

    def tile_index(self, tile: str, row: ir.Expr, column: ir.Expr, row_is_free: bool
                   ) -> tuple[ir.Expr, ...]:
        """The indices of ``tile``'s element (``row``, ``column``) after its buffer:
        here the 2-D tile's own (a mapping with another layout says its own)."""
        return row, column

    def ld(self, tile: str) -> int:
        return self.locals()[tile].shape[-1]

    def buffer(self) -> tuple[ir.Expr, ...]:
        """The first coordinate of an operand tile's element: in ``S`` stages, the step
        modulo ``S``; single-buffered, none."""
        return (remainder(ir.Var("ks"), self.stages),) if self.stages > 1 else ()

    def locals(self) -> dict[str, ir.Local]:
        t = self.tile
        stored = self.program.dtype in dtypes.STORED
        pad_a, pad_b = self.pads[A_TILE], self.pads[B_TILE]
        a_shape = (t["m"], t["k"] + pad_a) if self.row_a else (t["k"], t["m"] + pad_a)
        b_shape = (t["k"], t["n"] + pad_b) if self.row_b else (t["n"], t["k"] + pad_b)
        pieces = 2 if self.split else 1
        p = self.params
        mapping = p["mapping"]
        rows, columns = accumulator_extents(self.program, p)
        buffers = (self.stages,) if self.stages > 1 else ()
        return {
            **self.parts_local(),
            A_TILE: ir.Local(A_TILE, ir.Space.SHARED, buffers + a_shape, stored=stored,
                             swizzle=swizzle_shift(a_shape[1]) if self.swizzled else 0),
            B_TILE: ir.Local(B_TILE, ir.Space.SHARED, buffers + b_shape, stored=stored,
                             swizzle=swizzle_shift(b_shape[1]) if self.swizzled else 0),
            C_TILE: ir.Local(C_TILE, ir.Space.SHARED, (rows, columns + self.pads[C_TILE]),
                             reuses=(A_TILE, B_TILE), vector_reads=self.vector() > 1),
            **{name: ir.Local(name, ir.Space.FRAGMENT, (pieces * p[frags],),
                              fragment=ir.Fragment(use, self.shape, row_major, mapping))
               for name, frags, (use, row_major) in zip(
                   (FRAG_A, FRAG_B), ("frags_m", "frags_n"), self.fragment_uses(), strict=True)},
            FRAG_C: ir.Local(FRAG_C, ir.Space.FRAGMENT, (pieces * p["frags_m"] * p["frags_n"],),
                             fragment=ir.Fragment(ir.Use.ACCUMULATOR, self.shape,
                                                  mapping=mapping)),
        }

    def fragment_uses(self) -> tuple[tuple[ir.Use, bool], tuple[ir.Use, bool]]:
        """The use and layout (:class:`ir.Fragment`) of A's fragments and of B's. Where the
        output's fastest index is M's, the MMA computes C^T = B^T A^T (unless fragments are
        narrowed: :func:`.tensorcore_tiles.transposed_product`): A's fragments are its
        B operand (K x M, M adjacent where A's tile is not row-major) and B's its A operand
        (N x K, K adjacent where B's tile is not row-major), so that the accumulators hold a
        fragment of C^T, whose pairs (PTX ISA, "Matrix Fragments for mma.m16n8k16": c0, c1
        at columns 2i, 2i + 1 of row g) lie along M, the C tile's rows (:meth:`write`). Each
        tile's ldmatrix is transposed or not as before (:func:`.fragments.ldmatrix_transposed`
        reads the same tile layout), and the fragments' shapes are square in M and N."""
        if not self.transposed:
            return (ir.Use.A, self.row_a), (ir.Use.B, self.row_b)
        return (ir.Use.B, not self.row_a), (ir.Use.A, not self.row_b)

    def parts_local(self) -> dict[str, ir.Local]:
        """The workspace of a deterministic split (:func:`parts_workspace`), by name; none
        without one."""
        if not self.workspace:
            return {}
        workspace = parts_workspace(self.program, self.parts)
        return {workspace.name: workspace}

    def write(self) -> None:
        """Each warp stores its accumulators into the C tile; then the program's write
        statement, a thread per tile element (along the output's fastest group), reads the
        tile instead of the accumulator register."""
        fm, fn, _ = self.shape
        p = self.params
        frags_n = p["frags_n"]
        self.sync("sync_store", ["2", "0", "0", "0", "0", "0", "0"], False)
        w, f = ir.Var("w"), ir.Var("f")
        row = plus(times(p["frags_m"] * fm, quotient(w, self.warps_n)),
                    times(fm, quotient(f, frags_n)))
        column = plus(times(frags_n * fn, remainder(w, self.warps_n)),
                       times(fn, remainder(f, frags_n)))
        count = p["frags_m"] * frags_n
        fragments = f"{self.warp_domain()} and 0 <= f < {count}"
        if self.split:
            self.add("add", Kind.WRITE, [*self.prefix(), "w", "f", "l"], fragments,
                     ir.AddFragment(ir.Element(FRAG_C, ()), ir.Element(FRAG_C, ())),
                     [ir.Element(FRAG_C, (f,)), ir.Element(FRAG_C, (plus(ir.Int(count), f),))],
                     self.point("32*w + l", ["2", "0", "1", "0", "0", "0", "f"]))
        self.add("store", Kind.WRITE, [*self.prefix(), "w", "f", "l"], fragments,
                 ir.StoreFragment(ir.Element(C_TILE, ()), ir.Element(FRAG_C, ()),
                                  self.ld(C_TILE), row_major=self.along_n or self.transposed),
                 [self.accumulator(row, column), ir.Element(FRAG_C, (f,))],
                 self.point("32*w + l", ["2", "0", "1", "0", "0", "1", "f"]))
        self.sync("sync_stored", ["2", "0", "2", "0", "0", "0", "0"], False)
        self.output()

    def accumulator(self, m: ir.Expr, n: ir.Expr) -> ir.Element:
        """The C tile's element (``m``, ``n``): rows of N, or of M (column-major), the free
        box's or a vector write's skewed (:func:`.tensorcore_tiles.accumulator_skew`; the
        warpgroup kernel lays out its own: :attr:`skews_vectors`)."""
        words, alternate = (accumulator_skew(self.program, self.params, self.tile)
                            if self.skews_vectors
                            else (skew_words(self.free_box, self.tile), False))
        if self.along_n:
            return ir.Element(C_TILE, (m, skewed(n, words, OPERATORS, alternate)))
        return ir.Element(C_TILE, (n, skewed(m, words, OPERATORS, alternate)))

    def output(self) -> None:
        """The program's write statement (:meth:`write_statement`), scheduled after the C
        tile's barrier: ``j`` unrolled, and ``c`` too where the write is unrolled whole
        (:attr:`Write.whole`), else a loop."""
        write = self.write_statement()
        tail = ["0", "c", "j", "v"] if write.whole else ["c", "0", "j", "v"]
        self.add(write.name, Kind.WRITE, write.indices, write.constraints, write.body,
                 write.accesses, self.point("t", ["2", "0", "3", *tail]))

    def write_statement(self) -> Write:
        """The program's write statement over ``write[P, c, j, t, v]``: thread ``t`` writes
        the C tile's position ``V (t mod G + G j) + v`` of its row ``t / G + (T / G) c``,
        ``V`` consecutive values of the output's fastest index a vector (:meth:`vector`,
        lane ``v``), rows and positions as the output's fastest group numbers them
        (:func:`write_span`), ``G`` the threads sharing a row's vectors
        (:func:`write_lanes`); where no such ``G`` deals a warp 32 consecutive vectors,
        vector ``e = T c + t`` of the rows one after the other (``j`` 0). It reads the tile
        instead of the accumulators and writes the output element that stands for, where
        that lies inside the output: a vector's lanes differ in the output's fastest index
        only, by ``v``, so their indices and guards are the first lane's (its fastest index
        a multiple of ``V``: the printed offsets show the vectorizer the alignment,
        :mod:`treduda.codegen.vectorize`, which merges the lanes' stores and the C tile's
        loads where aligned). Its own domain (the output's indices) would leave isl to
        invert the groups of indices when scanning it, which took minutes for tccg_20."""
        write = next(s for s in self.program.statements if s.kind == Kind.WRITE)
        c, j, t = ir.Var("c"), ir.Var("j"), ir.Var("t")
        tile_m, tile_n = self.tile["m"], self.tile["n"]
        vector = self.vector()
        lane = ir.Var("v") if vector > 1 else ir.Int(0)
        span, rows = write_span(self.tile, self.along_n, self.free_box)
        slots = span // vector  # a row's vectors
        lanes = write_lanes(self.threads, self.tile, self.along_n, self.free_box, vector)
        # The block's threads divide the row: the element numbering's divisions read ``c``
        # alone, which nvcc's unrolling of main's loop folds (tccg_03/07's mma.sync write,
        # 48 stores of one: 173 / 191 SASS instructions a thread after the last barrier,
        # where 24 iterations of 2 took 184 / 200).
        folded = lanes == self.threads < slots
        if lanes is None or folded:
            e = plus(times(self.threads, c), t)
            first, row = remainder(e, slots), quotient(e, slots)
            dealt, stores = f"{self.dealt(tile_m * tile_n // vector)} and j = 0", 1
        else:
            across = self.threads // lanes  # rows a pass of the block's threads writes
            # (a vector's write leaves out a ``j`` of one value: a division reading it
            # would unroll the write whole, :func:`_divides`; main's numbering keeps it)
            first = plus(remainder(t, lanes),
                         times(lanes, j) if slots > lanes or vector == 1 else ir.Int(0))
            row = plus(quotient(t, lanes), times(across, c))
            stores = slots // lanes
            dealt = (f"0 <= t < {self.threads} and 0 <= j < {stores} "
                     f"and 0 <= c < {-(-rows // across)} "
                     f"and floor(t/{lanes}) + {across}*c < {rows}")
        passes = -(-tile_m * tile_n // (self.threads * stores * vector))
        output, limits, local = self.write_indices(first, row, vector)
        axis = self.free_box.axis if self.free_box else "n" if self.along_n else "m"
        if self.skews_vectors and (self.free_box is None or o_first(self.free_box)):
            # position V first at V first itself (output_local's runs and their remainders,
            # which the skew's divisions of the C tile's place would read again: tccg_32's
            # write took 10 more instructions a thread; the warpgroup kernel's write is left
            # as it prints)
            local[axis] = times(vector, first)
        # the lane's place in the C tile: a vector's lanes lie side by side (write_vector)
        local[axis] = plus(local[axis], lane)
        inside = " and ".join(f"{isl_text(v)} < {limit}" for v, limit in limits)
        accesses = [self.accumulator(local["m"], local["n"])
                    if element.array in self.program.accumulators
                    else ir.Element(element.array, tuple(ir.substitute(i, output)
                                                         for i in element.indices))
                    for element in ir.elements(write.body)]
        body = write.body
        if self.workspace:  # each part stores its sum; a second pass adds them in order
            stored = tuple(output[i] for i in self.program.output_indices)
            part = (ir.Var("part"),)
            accesses[0] = ir.Element(PARTS, part + stored if self.program.layout == "C"
                                     else stored + part)
            body = ir.Assign(ir.Element(PARTS, ()), "=", body.value)
        elif self.parts > 1:  # each part adds its sum into the output (zeroed for "=")
            update = "-=" if self.program.contraction.op == "-=" else "+="
            body = ir.Assign(body.target, update, body.value, atomic=True)
        indices = (*self.prefix(), "c", "j", "t", "v")
        constraints = (f"{self.prefix_bounds()} and {dealt} and 0 <= v < {vector} "
                       f"and {inside}")
        domain = isl.Set(f"{{ {write.name}[{', '.join(indices)}] : {constraints} }}")
        ranges = _ranges(domain, indices)
        divides = _divides(_formulas(accesses, ranges), limits, ranges, folded)
        # a vector's lanes side by side in the C tile are loaded together, up to 16 bytes
        read = min(vector, ir.VECTOR_BYTES // dtypes.itemsize(accumulator_dtype(self.program)))
        return Write(write.name, indices, constraints, body, tuple(accesses), limits, ranges,
                     divides, divides and passes * stores <= WHOLE_WRITE, vector, read)

    def vector(self) -> int:
        """The output values a thread's write stores at once (:func:`write_vector`): one
        in a split reduction, whose parts add into the output or a workspace."""
        return (write_vector(self.program, self.params, self.tile)
                if self.vector_write and self.parts == 1 else 1)

    def write_indices(self, first: ir.Expr, row: ir.Expr, vector: int
                      ) -> tuple[dict[str, ir.Expr], list[tuple[ir.Expr, int]],
                                 dict[str, ir.Expr]]:
        """The output's indices at lane ``v`` of vector ``first`` of the C tile's ``row``
        (its first position ``V first``), the limits that keep its
        first lane inside the output, and that lane's C tile element (``m``, ``n``).
        Where the write's group is linearised with the output's fastest index ``o`` first
        (no free box, or one taking ``o`` fastest), its digits are read in vectors: ``o``'s
        first digit by ``V``, the group's value too, so that ``o`` is ``V`` times a value
        with no division by ``V`` (a division reading ``j`` would unroll nvcc's loop:
        :func:`_divides`). Only there is ``V`` above 1 (:func:`write_vector`)."""
        m_local, n_local = output_local(times(vector, first), row, self.tile, self.along_n,
                                        self.free_box, OPERATORS)
        local = {"m": m_local, "n": n_local}
        value = {axis: plus(times(self.tile[axis], ir.Var(f"b{axis}")), local[axis])
                 for axis in "mn"}
        output = {i: ir.Var(f"g_{i}") for i in self.batch}
        digits = {axis: free_digits(self.program, self.params, axis) for axis in "mn"}
        lane = ir.Var("v") if vector > 1 else ir.Int(0)
        o = fastest_first(self.program.output_indices, self.program.layout)[0] \
            if vector > 1 else None
        axis = next((a for a in "mn" if o is not None and digits[a][0][0] == (o,)), None)
        limits: list[tuple[ir.Expr, int]] = []
        padded: list[tuple[ir.Expr, int]] = []
        for side in "mn":
            if side == axis:  # in vectors: the first digit, the value and the limit by V
                # (the group's value is the tile's position there: output_local)
                scaled = plus(times(self.tile[side] // vector, ir.Var(f"b{side}")), first)
                found = digit_values(((digits[side][0][0], digits[side][0][1] // vector),
                                      *digits[side][1:]), scaled, self.sizes, OPERATORS)
                limits.append((scaled, self.extent[side] // vector))
                padded += [(found[i], self.sizes[i] // (vector if i == o else 1))
                           for i in self.padded(found)]
                found[o] = plus(times(vector, found[o]), lane)
            else:
                found = digit_values(digits[side], value[side], self.sizes, OPERATORS)
                limits.append((value[side], self.extent[side]))
                padded += self.padded(found)
            output |= found
        return output, limits + padded, local

    def write_instructions(self) -> float:
        """A thread's instructions for each output element it writes, counted from the
        write statement (:meth:`write_statement`) as the kernel prints it
        (:mod:`treduda.model.iteration`): a load or store per access, the value's arithmetic
        and a 16-bit output's conversion; unrolled whole by the kernel IR
        (:attr:`Write.whole`) or by nvcc (no division reads ``c`` or ``j``:
        :attr:`Write.divides`), the address of each global access and the divisions that
        change with ``c`` or ``j`` (a group's digits), the rest folded into constants; in a
        loop over ``c`` that divides, once an iteration shared by its ``j`` stores, the
        index arithmetic that changes with ``c``, a term of each access's offset that does
        and the global accesses' addresses; and the guards of a partial tile that no loop
        bound takes, each element. GEMM fp16's 256 x 192 warpgroup tile (64 iterations of 3
        stores, nvcc's loop): 4.02 (SASS 3.6-3.9 an element); its 128 x 256 mma.sync tile
        (128 stores, nvcc's loop of 16 copies): 4 (3.44); tccg_33's warpgroup 128 x 256,
        unrolled whole: 4.34 (4.0). A vector of ``V`` values (:attr:`Write.vector`) pays
        its store, addresses, guards and a share of the iteration once, its C tile loads
        once per :attr:`Write.read` lanes, and a 16-bit conversion once per pair
        (``cvt.rn.f16x2.f32``); each value its arithmetic."""
        write = self.write_statement()
        ranges = write.ranges
        c, j = ir.Var("c"), ir.Var("j")
        formulas = _formulas(write.accesses, ranges)
        limits = [(simplify(v, ranges), limit) for v, limit in write.limits]
        guards = sum(iteration.guarded(v, c) and _may_reach(v, limit, ranges)
                     for v, limit in limits)
        converted = self.program.dtype in dtypes.STORED and not self.workspace
        vector = write.vector
        each = (sum(1 / write.read if a.array == C_TILE else 1 / vector
                    for a in write.accesses)
                + iteration.arithmetic(write.body.value)
                + converted / (2 if vector > 1 else 1))
        if write.whole or not write.divides:  # unrolled, by the kernel IR or by nvcc
            globals_ = [found for a, found in zip(write.accesses, formulas, strict=True)
                        if a.array != C_TILE]
            return each + (len(globals_) + _unrolled(formulas, globals_, limits, ranges)) / vector
        each += guards * iteration.GUARD / vector
        first = {"j": ir.Int(0)}  # the iteration's j stores share what changes with c
        formulas = tuple(tuple(simplify(ir.substitute(i, first), ranges) for i in found)
                         for found in formulas)
        changing = list(dict.fromkeys(i for found in formulas for i in found
                                      if iteration.varies(i, c)))
        moved = sum(a.array != C_TILE for a, found in zip(write.accesses, formulas,
                                                          strict=True)
                    if any(iteration.varies(i, c) for i in found))
        stores = ranges[j][1] - ranges[j][0] + 1 if j in ranges else 1
        shared = (moved + len(changing) * iteration.TERM
                  + iteration.iteration_instructions([*changing, *(v for v, _ in limits)], c))
        return each + shared / (stores * vector)

    def scheduled(self) -> Scheduled:
        roles = ((Role.BLOCK,) * 3 + (Role.THREAD,) * 3
                 + (Role.GRID,) * (len(self.batch) + len(self.part()))
                 + (Role.PHASE, Role.STEP, Role.STAGE, Role.INNER)
                 + (Role.REGISTER,) * 3)
        unroll = tuple(range(len(roles) - 3, len(roles)))
        return Scheduled(self.program, tuple(self.statements), self.schedule, roles,
                         (self.threads, 1, 1), tuple(self.locals().values()), unroll,
                         zeroed_output=(self.parts > 1 and not self.workspace
                                        and self.program.contraction.op == "="))

