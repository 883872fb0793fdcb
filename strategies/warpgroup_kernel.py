"""The statements and schedule of a warpgroup kernel (:class:`.warpgroup.Warpgroup`): the
tensor-core kernel's (:mod:`.tensorcore_kernel`) with Hopper's asynchronous MMAs.

What stays: the grouping of indices, the copies of each step's operand tiles (cp.async where
the operand's layout allows), their zero fill outside the tensors, the stages and the write
through the shared C tile in the output's own layout (alpha, beta, ``+=``). What changes:

* The operand tiles are laid out as wgmma reads them (PTX ISA, "Shared Memory Matrix
  Layout"; :class:`ir.CoreMatrices`), in blocks of 8 lines along the operand's contiguous
  index: K-major where that is K (``X[buffer][k / w][row / 8][row % 8][k % w]``), MN-major
  where it is M's or N's (``X[buffer][k / 8][row / w][k % 8][row % w]``, which wgmma reads
  transposed; 16-bit operands only: TF32 tiles are K-major whatever the operand's layout).
  Each tile takes the widest of wgmma's swizzles whose lines its extent along the operand's
  contiguous index fills (``w = L / s`` for lines of ``L`` = 128, 64 or 32 bytes: K-major, a
  step of 64, 32 or 16 16-bit values, ``frags_k`` 4, 2 or 1, or of 32, 16 or 8 TF32 ones;
  MN-major, rows a multiple of 64 or 32, so every tile): each atom of 8 lines (1024, 512 or
  256 bytes) holds line ``r``'s 16-byte chunk ``c`` at chunk ``c ^ (r mod 8)``, ``c ^ (r /
  2 mod 4)`` or ``c ^ (r / 4 mod 2)``, bits 7 on of its byte address XOR'd into bits 4 on
  (:attr:`ir.Local.swizzle`, the descriptor's layout type 1, 2 or 3: ``Swizzle<3|2|1,4,3>``),
  so that a warp's 16-byte copies along lines, and the MMA's reads of 8 lines at one chunk,
  fall on distinct banks; the pool of tiles starts at 1024 bytes
  (:func:`ir.shared_alignment`). Core matrices of 16-byte lines, unswizzled, stored a
  phase's runs of a line 128 bytes apart, on the same banks (tccg_31's B, 48-byte rows of
  K in steps of 32: 4 ways, so the search copied it through registers). Blocks are one
  block's bytes apart along M or N and a whole slice of the tile apart along K. So a copy's
  runs land in a line, and cp.async takes every 16-bit operand; a TF32 operand whose
  contiguous index is M's or N's moves a word per cp.async (:func:`operand_widths`), a
  warp's 32 words dealt 8 rows at 4 K so that their stores take 1 way
  (:meth:`WarpgroupBuilder.dealt_run`).
* A K box (``frags_k`` 16, where A and B lead with different summed indices:
  :func:`.tensorcore_tiles.k_box`) steps over 16 x 16 values of those two, 256 of K: both
  tiles K-major, four 128-byte swizzled lines of K a row, a wgmma's k16 one 16-column block
  of a line (:func:`.tensorcore_tiles.box_indices`). A moves by 16-byte cp.async; B by an
  8-byte vector load into registers whose four values are stored a line of K apart, a block
  of the tile's rows further on (:meth:`WarpgroupBuilder.held_apart`; the swizzle's XOR
  repeats there), as the tensor-core kernel's box copies B (cp.async cannot transpose).
  Those stores are the generic proxy's, as cp.async's are: the same fence to the async
  proxy before the barrier orders them before the MMAs' reads.
* A staged K box (``staged_b``, :func:`staged`) copies B by cp.async instead, runs of
  :func:`staged_width` in B's own order (``d`` fastest, then ``c``) into a staging tile of
  its own (``B_STAGED[buffer][n][16 c + d]``, its 128-byte lines' chunks rotated:
  :func:`staged_place`; a buffer per stage, so that a step's copies run ahead as A's do);
  after the wait for the step's copies and a barrier, each thread transposes pairs of its
  runs into B's tile in shared memory: two 8-byte loads, four values of ``d`` at two
  neighbouring ``c``, and four 32-bit stores of a value and its neighbour, a line of K
  apart where the register copy stores them (:meth:`WarpgroupBuilder.transpose`; a warp's
  loads and stores take each bank once), then fences and the barrier before the MMAs
  follow. No operand passes through registers from global memory; the staging tile costs
  B's bytes again per stage (tccg_28's 256 x 128 tile no longer fits) and shared traffic
  (a store and a load more per value). Pairs halved the 16-bit stores one by one took
  (tccg_28's 128 x 128 main loop: 128 STS, 656 instructions; 64 and 520).
* A split reduction (``split``) as the tensor-core kernel's: the part a grid dimension,
  each block summing its part's steps and adding its tile into the output (or a
  deterministic program's workspace). A wait on a stage's mbarrier names the parity of the
  stage's rounds from the part's first step (:meth:`WarpgroupBuilder.rounds`).
* With ``producer`` the block gains a role dimension: a producer warpgroup of its own issues
  the bulk copies on full and empty mbarriers while these warpgroups only multiply and write
  (:class:`.warpgroup_roles.ProducerBuilder`, which builds on this class).
* TF32 tiles hold values rounded to TF32 (``cvt.rna``, as the WMMA path and the twin round
  them; wgmma itself would drop the low 13 bits): a copy through registers rounds on its
  way (:meth:`copied`); after cp.async each thread rounds the words it copied in place,
  once its wait returned, before its fence to the async proxy (:meth:`landed`).
* A block is ``warpgroups`` warpgroups of 128 threads, warpgroup ``g`` holding
  ``frags_m`` accumulators of 64 x BN, rows ``64 (frags_m g + f)`` on, each ``BN / 2`` float
  registers of a thread (:class:`ir.WarpgroupMultiply`'s layout), in one register array.
* Per step, after the wait for its copies, each thread fences its writes to the async proxy
  (:class:`ir.ProxyFence`) before the barrier; then each warpgroup fences its registers, starts
  ``frags_k x frags_m`` MMAs of m64nBNk16 (k8 for TF32), commits them and waits until at most
  ``P`` groups are in flight (``wgmma.wait_group P``), before the next step's barrier, after
  which copies may overwrite the buffers that the MMAs retired by then read. In one or two
  stages ``P`` is 0. From three stages with cp.async, ``P`` is 1, the previous step's MMAs
  retired, and the copies issued at step ``p`` (after its barrier) fill the buffer of step
  ``p - 2``, ``S - 2`` steps ahead (CUTLASS's Hopper main loops keep MMAs in flight alike);
  every warpgroup waits for all of its MMAs after the main loop (``wg_drain``), before the
  accumulators are stored. Schedule (``P`` the block prefix, ``g`` the warpgroup, ``l`` its
  thread)::

    fill[P, g, l, r]              -> [.., 128g + l, .., 0, 0, 0, 0, 0, 0, r]
    round_X[P, ks, c, t, j]       -> [.., t, .., 1, ks, wait, 0, 1, 1 + X, width c + j]
    sync_staged[P, ks, t]         -> [.., t, .., 1, ks, wait, 0, 2, 1, 0] (staged B only)
    transpose[P, ks, c, t]        -> [.., t, .., 1, ks, wait, 1 + c, 0, 0, 0]
    fence_proxy[P, ks, t]         -> just before the step's barrier (sync_after), after them
    fence/mma/commit/wait[P, ks, g, kf, f, l]
                                  -> [.., 128g + l, .., 1, ks, 3, 0 | 1 | 2 | 3, kf, 0, f]
    wg_drain[P, g, l]             -> [.., 128g + l, .., 2, 0, 0, 0, 0, 0, 0]
    store[P, g, f, l, r]          -> [.., 128g + l, .., 2, 0, 1, 0, 0, f, r]

  and the rest as the tensor-core kernel's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from treduda.codegen import ir
from treduda.codegen.simplify import plus, quotient, remainder, times
from treduda.codegen.warpgroup import accumulator_column, accumulator_row
from treduda.frontend import dtypes
from treduda.polyhedral.geometry import copy_width
from treduda.polyhedral.lower import Kind, Program

from .tensorcore_kernel import (
    A_TILE,
    B_TILE,
    C_TILE,
    FRAG_C,
    OPERATORS,
    STAGE_COPY,
    STAGE_MMA,
    Builder,
)
from .tensorcore_tiles import (
    BOX,
    BOXED_STRIDE,
    BOXED_WIDTH,
    SKEWED,
    FreeBox,
    accumulator_dtype,
    accumulator_row_pad,
    box_values,
    boxed,
    copy_widths,
    digit_values,
    free_boxed,
    gemm_groups,
    index_digits,
    k_box,
    operand_rows_major,
    output_along_n,
    skew_words,
    skewed_extent,
    stepped_k,
)
from .warpgroup_tma import (
    BARRIERS,
    OperandBox,
    box_bytes,
    box_reason,
    line_fits,
    operand_box,
    tma_reason,
)

CORE_ROW_BYTES = 16  # a core matrix's row (PTX ISA, "Shared Memory Matrix Layout")
CORE_ROWS = 8
WARPGROUP_M = 64  # rows of one wgmma's A and accumulator
WARP_ROWS = 8  # rows of M or N a warp's word copies of TF32 take at once (dealt_run)
SWIZZLES = (128, 64, 32)  # bytes of a line in wgmma's swizzles (ir.SWIZZLE_MODES), widest first
B_STAGED = "td_sbs"  # a staged K box's B tile, in B's memory order (see the module's doc)


def wgmma_k(program: Program) -> int:
    """K of one wgmma: 16 for 16-bit inputs, 8 for TF32 (PTX ISA, "wgmma.mma_async")."""
    return 32 // dtypes.itemsize(program.dtype)


def warpgroup_tile(params: Mapping[str, Any], program: Program) -> dict[str, int]:
    """The block's tile: BM, BN and the step BK, in elements."""
    return {"m": WARPGROUP_M * params["warpgroups"] * params["frags_m"], "n": params["tile_n"],
            "k": params["frags_k"] * wgmma_k(program)}


def tensorcore_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The tensor-core builder's parameters that describe the same block: what it computes
    from them (the grouping, the copy widths, the stages) holds for this kernel; the tile
    and the threads are set again after."""
    return {"warps_m": params["warpgroups"], "warps_n": 1, "frags_m": params["frags_m"],
            "frags_n": 1, "frags_k": params["frags_k"], "stages": params["stages"],
            "split": params.get("split", 1), "async_copy": params["async_copy"],
            "free_layout": params.get("free_layout", "group"),
            "mapping": "wmma", "shared_layout": "pad"}  # the builder's own tiles, unswizzled


class WarpgroupBuilder(Builder):
    """Builds one warpgroup kernel (see the module's doc)."""

    # wgmma's MMAs run on past their step (mma_pending) and the bulk copies arrive on
    # mbarriers: a split's last part stops at the reduction's end (copies past it into a
    # buffer a wgmma still read were hazards)
    whole_parts = False
    # its C tile is its own (crossed rows), not skewed for the write's vectors
    skews_vectors = False
    def __init__(self, program: Program, params: Mapping[str, Any]):
        super().__init__(program, tensorcore_params(params))
        self.warpgroup_params = params
        self.per_row = CORE_ROW_BYTES // dtypes.itemsize(program.dtype)  # e
        self.shape = (WARPGROUP_M, params["tile_n"], wgmma_k(program))
        self.tile = warpgroup_tile(params, program)
        found = ((self.a,), (self.b,), self.m, self.n, self.k, self.batch)
        self.k_sizes = stepped_k(program, found, self.tile["k"], self.box)
        self.divide(params.get("split", 1))  # parts of this tile's steps
        self.threads = ir.WARPGROUP * params["warpgroups"]
        # the C tile padded as the tensor-core kernel's (tensorcore_tiles.accumulator_pad):
        # a warp stores wgmma's accumulators as it stores mma.sync's, 8 rows of 4 columns
        # two apart at a time
        self.pads = {A_TILE: 0, B_TILE: 0, C_TILE: accumulator_row_pad(
            program, self.c_columns(), self.along_n)}
        self.tf32 = program.dtype == "float32"
        self.widths = operand_widths(program, found, params["async_copy"], self.box,
                                     self.free_box)
        # a K box's B staged: copied by cp.async in its memory order, then transposed
        self.staged = staged(program, params)
        if self.staged:
            self.widths[self.b] = staged_width(program)
        self.asynchronous = any(w is not None for w in self.widths.values())
        self.swizzled = dict(zip((A_TILE, B_TILE), swizzles(program, params, found),
                                 strict=True))
        # From three asynchronous stages one step's MMAs stay in flight while the next
        # step's are issued, and the copies run a step less ahead (see the module's doc)
        self.mma_pending = 1 if self.asynchronous and self.stages >= 3 else 0
        self.lead = self.stages - 1 - self.mma_pending if self.asynchronous else 0
        # the operand tiles moved by the copy engine (tma: :mod:`.warpgroup_tma`)
        self.issuer = "0"  # the thread that starts the bulk copies
        self.boxes = ({tensor: operand_box(program, tensor, self.tile, self.line(tile),
                                           self.k_sizes)
                       for tensor, tile in ((self.a, A_TILE), (self.b, B_TILE))}
                      if params.get("tma") else {})

    def registers(self) -> int:
        """Accumulator registers of a thread per wgmma: ``BN / 2``."""
        return self.tile["n"] // 2

    def group_domain(self) -> str:
        return (f"{self.prefix_bounds()} and 0 <= g < {self.threads // ir.WARPGROUP} "
                f"and 0 <= l < {ir.WARPGROUP}")

    def run(self):
        self.fill()
        if self.boxes:  # the first thread initialises a stage's mbarrier, then all see it
            self.add("tma_init", Kind.SYNC, [*self.prefix(), "s"],
                     f"{self.prefix_bounds()} and 0 <= s < {self.stages}",
                     ir.MbarrierInit(ir.Element(BARRIERS, ()), 1),
                     [ir.Element(BARRIERS, (ir.Var("s"),))],
                     self.point("0", ["0"] * 5 + ["1", "s"]))
            super().sync("sync_init", ["0"] * 5 + ["2", "0"], False)
        self.reduction()
        self.write()
        return self.scheduled()

    def fill(self) -> None:
        """``fill[P, g, l, r]``: every accumulator register starts at zero."""
        count = self.warpgroup_params["frags_m"] * self.registers()
        self.add("fill", Kind.INIT, [*self.prefix(), "g", "l", "r"],
                 f"{self.group_domain()} and 0 <= r < {count}",
                 ir.Assign(ir.Element(FRAG_C, ()), "=", ir.Float(0.0)),
                 [ir.Element(FRAG_C, (ir.Var("r"),))],
                 self.point("128*g + l", ["0"] * 6 + ["r"]))

    def copied(self, source: ir.Element) -> ir.Expr:
        """TF32 operands rounded to TF32 (``cvt.rna``) as they are copied through registers:
        a wgmma reads float32 bits from shared memory as TF32 with no rounding of its own to
        ask for (it ignores the low 13 bits), so the tiles hold values it takes exactly, as
        the twin and the WMMA path round them."""
        if self.tf32:
            return ir.Call(ir.Function.TF32, (source,))
        return source

    def dealt_run(self, e: ir.Expr, shape: Mapping[str, Any]) -> tuple[ir.Expr, ir.Expr]:
        """TF32 words copied one at a time into K-major tiles (an operand contiguous along M
        or N, :func:`operand_widths`): a warp's 32 copies take 8 consecutive rows of M or N
        (the operand's contiguous index, the 2-D tile's columns) at 4 consecutive K, so that
        their stores, 8 lines by 4 words of one chunk, fall on 32 distinct banks (32 rows at
        one K take 8 banks, 4 ways) and their loads still fill whole 32-byte sectors."""
        if not (self.tf32 and shape["width"] == 1 and not shape["row_is_free"]):
            return super().dealt_run(e, shape)
        rows, groups = WARP_ROWS, shape["runs"] // WARP_ROWS  # runs of M or N: a multiple of 32
        lane, group = remainder(e, ir.WARP), quotient(e, ir.WARP)
        return (plus(times(ir.WARP // rows, quotient(group, groups)), quotient(lane, rows)),
                plus(times(rows, remainder(group, groups)), remainder(lane, rows)))

    def landed(self, tile: str, names: Sequence[str], domain: str, order: int, width: int,
               place: Callable[[ir.Expr], ir.Element]) -> None:
        """TF32 tiles copied by cp.async are rounded in place, as :meth:`copied` rounds them
        on their way: ``round_X[names, j]``, each thread its own run's words once its wait
        for them returned, before its fence to the async proxy and the barrier after which
        the MMAs read them (``[.., 1, ks, wait, 0, 1, 1 + X, width c + j]``). Thread ``t``
        takes its run's words from word ``t mod width`` on, so that the threads of a warp,
        whose runs lie on the same banks word by word, round words on distinct ones (1 way
        in lines of 64 and 128 bytes; 2 in the 32-byte swizzle, steps of 8 values, where
        rows 8 apart share banks)."""
        if not self.tf32:
            return
        element = place(remainder(plus(ir.Var("j"), ir.Var("t")), width))
        self.add(f"round_{tile}", Kind.COPY, [*names, "j"], f"{domain} and 0 <= j < {width}",
                 ir.Assign(ir.Element(tile, ()), "=",
                           ir.Call(ir.Function.TF32, (ir.Element(tile, ()),))),
                 [element, element],
                 self.point("t", ["1", "ks", str(self.wait_stage()), "0", "1", str(1 + order),
                                  f"{width}*c + j"]))

    def copy(self, tensor: str, tile: str, free: str, order: int, step: str) -> None:
        """A staged K box's B is copied into its staging tile (:meth:`transpose` moves it
        on into B's); with ``tma``, the copy engine moves the operand's boxes
        (:meth:`bulk`)."""
        if self.boxes:
            self.bulk(tensor, tile, order, step)
            return
        super().copy(tensor, B_STAGED if tile == B_TILE and self.staged else tile, free, order,
                     step)

    def barrier_of_step(self) -> ir.Element:
        """The mbarrier of step ``ks``'s stage."""
        return ir.Element(BARRIERS, self.buffer() or (ir.Int(0),))

    def rounds(self) -> ir.Expr:
        """The rounds step ``ks``'s stage went through in this block before it: the steps
        from its part's first (``ks - chunk part``), over the stages. Their parity is the
        phase a wait on the stage's mbarrier names: from the absolute step a middle part's
        first round would name the phase before a fresh barrier's, which counts as
        completed (PTX ISA, mbarrier.test_wait.parity), and read tiles not yet copied."""
        first = times(-self.chunk, ir.Var("part")) if self.parts > 1 else ir.Int(0)
        return quotient(plus(ir.Var("ks"), first), self.stages)

    def bulk(self, tensor: str, tile: str, order: int, step: str) -> None:
        """``tma_expect[P, ks]``, the first thread's arrival on the stage's mbarrier expecting
        both operands' bytes (before A's copies), and ``tma_X[P, ks, j]``: it starts the
        copy of box ``j`` of X's step tile, ``w`` values along the tile's lines from the
        step's first (:mod:`.warpgroup_tma`), into block ``j`` of the lines, scheduled at
        step position ``step`` as the cp.async copies are."""
        box = self.boxes[tensor]
        names = [*self.prefix(), "ks"]
        domain = f"{self.prefix_bounds()} and {self.step_bounds()}"
        barrier = self.barrier_of_step()
        if order == 0:
            total = box_bytes(tuple(self.boxes.values()), dtypes.itemsize(self.program.dtype))
            self.add("tma_expect", Kind.SYNC, names, domain,
                     ir.MbarrierArrive(ir.Element(BARRIERS, ()), total), [barrier],
                     self.point(self.issuer, ["1", step, str(STAGE_COPY), "0", "0", "0",
                                              "0"]))
        first = digit_values(index_digits(self.k, self.k_sizes),
                             times(self.tile["k"], ir.Var("ks")), self.k_sizes, OPERATORS)
        # the box's first row: the tile's, or in an MN-major tile box j's, w rows on
        j = ir.Var("j")
        row = times(box.rows, ir.Var("bm" if tile == A_TILE else "bn"))
        if not box.k_major:
            row = plus(row, times(box.line, j))
        sizes = self.program.sizes
        free = digit_values(index_digits(box.free, sizes), row, sizes, OPERATORS)
        coordinates = [first.get(i, free.get(i, ir.Var(f"g_{i}"))) for i in box.indices]
        if box.k_major:
            coordinates[0] = plus(coordinates[0], times(box.line, j))
        target = ir.Element(tile, (*self.buffer(), ir.Var("j"), *[ir.Int(0)] * 3))
        self.add(f"tma_{tensor}", Kind.COPY, [*names, "j"], f"{domain} and 0 <= j < {box.boxes}",
                 ir.TensorCopy(ir.Element(tile, ()), box.map.name, tuple(coordinates),
                               ir.Element(BARRIERS, ())), [target, barrier],
                 self.point(self.issuer, ["1", step, str(STAGE_COPY), "0", "1", str(order),
                                          "j"]))

    def copy_shape(self, tensor: str, tile: str) -> dict[str, Any]:
        """The staging tile's copies: rows of N, each B's 16 x 16 values of a box step in
        its memory order (``d`` fastest), runs of :func:`staged_width` dealt along the rows
        in turn, so that a warp's cp.async stores fill whole wavefronts."""
        if tile != B_STAGED:
            return super().copy_shape(tensor, tile)
        width = staged_width(self.program)
        return {"free": "n", "rows": self.tile["n"], "columns": self.tile["k"],
                "row_is_free": True, "width": width, "runs": self.tile["k"] // width,
                "pitch": self.tile["k"] * dtypes.itemsize(self.program.dtype), "order": None,
                "boxed": True, "dealt": False, "stride": 1}

    def box_summed(self, tile: str, column: ir.Expr) -> dict[str, ir.Expr]:
        """The staging tile's column ``16 c + d`` holds the box's ``c`` and ``d``."""
        if tile != B_STAGED:
            return super().box_summed(tile, column)
        return box_values(self.program, ir.Var("ks"), quotient(column, BOX),
                          remainder(column, BOX), OPERATORS)

    def transpose(self, tail: Sequence[str]) -> list[str]:
        """``sync_staged[P, ks, t]``, a barrier after the wait for the step's staged copies,
        then ``transpose[P, ks, c, t]``: thread ``t`` takes pair ``e = T c + t`` of the
        staging tile's runs, :data:`BOXED_WIDTH` values of ``d`` (``4 q ..``) at an even
        ``c`` and at the next (two 8-byte shared loads), and stores each value of ``d`` with
        its pair as one 32-bit word of B's tile, in four lines of K a row, as a K box's
        copies place them (:func:`.tensorcore_tiles.box_indices`). A warp takes one row, ``q``
        fastest then the pair ``c / 2``: its stores fill a line's 32 banks once, and its
        loads read half-warps of 128 bytes on distinct banks (:func:`staged_place`).
        Scheduled in the step's wait stage ``[.., 1, ks, wait, 1 + c, 0, 0, 0]``; the tail of
        what follows them (the fence to the async proxy and the barrier before the MMAs) is
        returned."""
        super().sync("sync_staged", [*tail[:-2], "1", tail[-1]], True)
        quads, pairs = BOX // BOXED_WIDTH, BOX // 2  # per row: 4 runs of d by 8 pairs of c
        e = plus(times(self.threads, ir.Var("c")), ir.Var("t"))
        row = quotient(e, quads * pairs)
        d = times(BOXED_WIDTH, remainder(e, quads))
        c = times(2, remainder(quotient(e, quads), pairs))
        runs = [ir.Element(B_STAGED, (*self.buffer(), *self.tile_index(
            B_STAGED, row, plus(times(BOX, plus(c, ir.Int(n))), d), True))) for n in (0, 1)]
        # d = 4 q + j lands in line j at column 16 q + c (box_indices' blocks)
        column = plus(times(BOX, quotient(d, BOXED_WIDTH)), c)
        target = ir.Element(B_TILE, (*self.buffer(), *self.tile_index(B_TILE, row, column, True)))
        count = self.tile["n"] * quads * pairs
        iterations = -(-count // self.threads)
        self.add("transpose", Kind.COPY, [*self.prefix(), "ks", "c", "t"],
                 f"{self.prefix_bounds()} and {self.step_bounds()} and {self.dealt(count)}",
                 ir.AsyncCopy(ir.Element(B_TILE, ()), ir.Element(B_STAGED, ()), BOXED_WIDTH,
                              stride=self.held_apart(B_TILE, BOXED_STRIDE),
                              paired=ir.Element(B_STAGED, ())),
                 [target, *runs], self.point("t", [*tail[:3], "1 + c", "0", "0", "0"]))
        return [*tail[:3], str(1 + iterations), *tail[4:]]

    def line(self, tile: str) -> int:
        """Elements of a line of ``tile``'s blocks: its swizzle's bytes (:func:`swizzles`)."""
        return self.swizzled[tile] // dtypes.itemsize(self.program.dtype)

    def blocking(self, tile: str, k_major: bool) -> tuple[int, int]:
        """Elements of K and of the rows (M or N) in one block of ``tile``."""
        line = self.line(tile)
        return (line, CORE_ROWS) if k_major else (CORE_ROWS, line)

    def tile_index(self, tile: str, row: ir.Expr, column: ir.Expr, row_is_free: bool
                   ) -> tuple[ir.Expr, ...]:
        """The blocks' indices (see the module's doc): the 2-D tile's rows are the operand's
        rows where they are free (K the column, the operand's contiguous index), else K;
        TF32 tiles, copied through registers, are K-major either way."""
        if tile == B_STAGED:  # in B's memory order (copy_shape), its chunks rotated
            return row, staged_place(column)
        free, k = (row, column) if row_is_free else (column, row)
        k_major = row_is_free or self.tf32
        along_k, along_rows = self.blocking(tile, k_major)
        blocks = self.outermost(tile, k_major, quotient(k, along_k), quotient(free, along_rows))
        return (*blocks, *((remainder(free, CORE_ROWS), remainder(k, along_k)) if k_major
                           else (remainder(k, CORE_ROWS), remainder(free, along_rows))))

    def outermost(self, tile: str, k_major: bool, along_k: Any, along_rows: Any
                  ) -> tuple[Any, Any]:
        """A tile's block coordinates (or counts) along K and along its rows, outermost
        first: K's, but the rows' in an MN-major tile that the copy engine fills (a box of
        ``w`` rows by the step's K after another: :mod:`.warpgroup_tma`)."""
        if self.boxes and not k_major:
            return along_rows, along_k
        return along_k, along_rows

    def held_apart(self, tile: str, columns: int) -> int:
        """Elements between two places ``columns`` of K apart in a row of a K-major tile
        held in blocks: whole lines of K apart (a K box's B copies, 64 apart: one line of
        the 128-byte swizzle, a block of the tile's rows further on, where the swizzle's
        XOR pattern repeats)."""
        if columns == 1:
            return 1
        _, rows, *_ = self.shapes()[tile == B_TILE]
        return columns // self.line(tile) * rows * CORE_ROWS * self.line(tile)

    def k_major(self) -> tuple[bool, bool]:
        """Whether A's and B's tiles are K-major (:meth:`tile_index`)."""
        return k_major_tiles(self.program, (self.row_a, self.row_b))

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """A's and B's tile shapes (after the buffer)."""
        shapes = []
        for tile, rows, k_major in zip((A_TILE, B_TILE), (self.tile["m"], self.tile["n"]),
                                       self.k_major(), strict=True):
            along_k, along_rows = self.blocking(tile, k_major)
            shapes.append((*self.outermost(tile, k_major, self.tile["k"] // along_k,
                                           rows // along_rows), CORE_ROWS, self.line(tile)))
        return shapes[0], shapes[1]

    def sync(self, name: str, tail: Sequence[str], stepped: bool,
             body: ir.Barrier | ir.CommitCopies | ir.WaitCopies | None = None,
             beyond: int = 0) -> None:
        """Before the barrier after which the step's MMAs read the tiles, every thread
        fences its writes of them to the async proxy."""
        if self.boxes and name == "commit":
            return  # the copy engine's copies complete on the stage's mbarrier
        if self.boxes and name == "wait":  # every thread waits for the step's phase
            parity = remainder(self.rounds(), 2)
            self.add("tma_wait", Kind.SYNC, [*self.prefix(), "ks", "t"],
                     f"{self.prefix_bounds()} and {self.step_bounds()} and "
                     f"0 <= t < {self.threads}",
                     ir.MbarrierWait(ir.Element(BARRIERS, ()), parity), [self.barrier_of_step()],
                     self.point("t", tail))
            return
        if name == "sync_after" and not self.boxes:  # the copy engine writes through the
            if self.staged:  # async proxy, which the MMAs read: no fence
                tail = self.transpose(tail)
            super().sync("fence_proxy", tail, stepped, ir.ProxyFence())
            tail = [*tail[:-2], "1", tail[-1]]
        super().sync(name, tail, stepped, body, beyond)

    def layouts(self) -> tuple[ir.CoreMatrices, ir.CoreMatrices]:
        """A's and B's descriptors: blocks of 8 lines one block apart along M or N, a slice
        of the tile's K apart along K."""
        layouts = []
        size = dtypes.itemsize(self.program.dtype)
        for tile, shape, k_major in zip((A_TILE, B_TILE), self.shapes(), self.k_major(),
                                        strict=True):
            block = CORE_ROWS * self.line(tile) * size
            leading, stride = ((block, shape[1] * block) if self.boxes and not k_major
                               else (shape[1] * block, block))
            layouts.append(ir.CoreMatrices(leading, stride, k_major, self.swizzled[tile]))
        return layouts[0], layouts[1]

    def fragments(self) -> None:
        """Per step and warpgroup: a register fence, ``frags_k x frags_m`` MMAs, a commit and
        a wait for them."""
        p = self.warpgroup_params
        frags_m, k = p["frags_m"], self.shape[2]
        names = [*self.prefix(), "ks", "g", "l"]
        domain = f"{self.group_domain()} and {self.step_bounds()}"
        for name, body, position in (("wg_fence", ir.WarpgroupFence(), "0"),
                                     ("wg_commit", ir.WarpgroupCommit(), "2"),
                                     ("wg_wait", ir.WarpgroupWait(self.mma_pending), "3")):
            self.add(name, Kind.REDUCE, names, domain, body, [],
                     self.point("128*g + l", ["1", "ks", str(STAGE_MMA), position, "0", "0",
                                              "0"]))
        g, f, kf = ir.Var("g"), ir.Var("f"), ir.Var("kf")
        (along_k_a, along_m), (along_k_b, _) = (
            self.blocking(tile, k)
            for tile, k in zip((A_TILE, B_TILE), self.k_major(), strict=True))
        a_layout, b_layout = self.layouts()
        rows = times(WARPGROUP_M // along_m, plus(times(frags_m, g), f))

        def k_start(along_k: int) -> tuple[ir.Expr, ir.Expr]:
            """Block and place in a line where the MMA's K slice starts: a slice of a
            swizzled K-major line starts inside it, where the hardware's XOR of the line's
            address finds it as the copies placed it (a K box's 256 values span four
            lines: blocks along K)."""
            if k >= along_k:
                return times(k // along_k, kf), ir.Int(0)
            return quotient(kf, along_k // k), times(k, remainder(kf, along_k // k))

        (a_block, a_line), (b_block, b_line) = k_start(along_k_a), k_start(along_k_b)
        a_major, b_major = self.k_major()
        a_blocks = self.outermost(A_TILE, a_major, a_block, rows)
        b_blocks = self.outermost(B_TILE, b_major, b_block, ir.Int(0))

        self.add("mma", Kind.REDUCE, [*self.prefix(), "ks", "g", "kf", "f", "l"],
                 f"{domain} and 0 <= kf < {p['frags_k']} and 0 <= f < {frags_m}",
                 ir.WarpgroupMultiply(ir.Element(FRAG_C, ()), ir.Element(A_TILE, ()),
                                      ir.Element(B_TILE, ()), self.shape, a_layout, b_layout),
                 [ir.Element(FRAG_C, (times(self.registers(), f),)),
                  ir.Element(A_TILE, (*self.buffer(), *a_blocks, ir.Int(0), a_line)),
                  ir.Element(B_TILE, (*self.buffer(), *b_blocks, ir.Int(0), b_line))],
                 self.point("128*g + l", ["1", "ks", str(STAGE_MMA), "1", "kf", "0", "f"]))

    def locals(self) -> dict[str, ir.Local]:
        t = self.tile
        buffers = (self.stages,) if self.stages > 1 else ()
        stored = self.program.dtype in dtypes.STORED
        along = (t["m"] if self.along_n else t["n"], self.c_columns() + self.pads[C_TILE])
        a, b = self.shapes()
        # bits 7 on of a byte offset (6 on of a 16-bit element's, 5 on of a float32's), 3, 2
        # or 1 of them by the line's bytes, XOR'd into its 16-byte chunk's (ir.swizzled):
        # CUTLASS's Swizzle<3|2|1,4,3> of byte addresses, which the descriptor's mode names
        shift = (ir.SWIZZLE_BYTES // dtypes.itemsize(self.program.dtype)).bit_length() - 1
        bits = {tile: (self.swizzled[tile] // CORE_ROW_BYTES).bit_length() - 1
                for tile in (A_TILE, B_TILE)}
        staging = ({B_STAGED: ir.Local(B_STAGED, ir.Space.SHARED, (*buffers, t["n"], t["k"]),
                                       stored=stored)} if self.staged else {})
        barriers = ({BARRIERS: ir.Local(BARRIERS, ir.Space.MBARRIER, (self.stages,))}
                    if self.boxes else {})
        return {
            **self.parts_local(),
            A_TILE: ir.Local(A_TILE, ir.Space.SHARED, (*buffers, *a), stored=stored,
                             swizzle=shift, swizzle_bits=bits[A_TILE]),
            B_TILE: ir.Local(B_TILE, ir.Space.SHARED, (*buffers, *b), stored=stored,
                             swizzle=shift, swizzle_bits=bits[B_TILE]),
            **staging,
            C_TILE: ir.Local(C_TILE, ir.Space.SHARED, along,
                             reuses=(A_TILE, B_TILE, *staging), vector_stores=True,
                             vector_reads=self.vector() > 1),
            FRAG_C: ir.Local(FRAG_C, ir.Space.REGISTER,
                             (self.warpgroup_params["frags_m"] * self.registers(),)),
            **barriers,
        }

    def scheduled(self):
        """The base's, with the tensor maps the bulk copies read."""
        return replace(super().scheduled(),
                       tensor_maps=tuple(box.map for box in self.boxes.values()))

    def c_columns(self) -> int:
        """Elements of a row of the C tile, unpadded: N, or M where the write reads along
        M, a free box's skewed."""
        return skewed_extent(self.tile["n"] if self.along_n else self.tile["m"],
                             skew_words(self.free_box, self.tile))

    def accumulator(self, m: ir.Expr, n: ir.Expr) -> ir.Element:
        """The C tile's element (``m``, ``n``): the tensor-core kernel's, or in a free box's
        rows of N, at its crossed place (:func:`crossed`)."""
        words = crossed_words(self.program, self.free_box, self.tile)
        if not words:
            return super().accumulator(m, n)
        return ir.Element(C_TILE, (m, crossed(n, words)))

    def stored(self, row: ir.Expr, lane: ir.Expr, register: ir.Expr
               ) -> tuple[ir.Element, ir.Expr]:
        """The C tile's element of ``row`` that a thread's store ``register`` writes, and
        the accumulator register it writes there: its own at :func:`accumulator_column`;
        in a crossed row (:func:`crossed_words`) the pair's (a thread's two neighbouring
        registers, at an even column and the next) place, its first column taking the
        register that :func:`crossed` puts there: the stores stay pairs of neighbouring
        registers at aligned columns (one 8-byte store each), the second register first
        where the crossing swaps them."""
        column = accumulator_column(lane, register)
        words = crossed_words(self.program, self.free_box, self.tile)
        if not words:
            return self.accumulator(row, column), register
        half = remainder(register, 2)
        other = remainder(plus(half, _swapped(column, words)), 2)  # the half placed here
        return (ir.Element(C_TILE, (row, ir.Binary(ir.Op.SUB, plus(crossed(column, words),
                                                                     half), other))),
                ir.Binary(ir.Op.SUB, plus(register, other), half))

    def write(self) -> None:
        """Each thread stores its accumulator registers into the C tile where wgmma's layout
        puts them; then the program's write statement, as the tensor-core kernel's."""
        self.add("wg_drain", Kind.WRITE, [*self.prefix(), "g", "l"], self.group_domain(),
                 ir.WarpgroupWait(0), [], self.point("128*g + l", ["2"] + ["0"] * 6))
        self.sync("sync_store", ["2", "0", "0", "1", "0", "0", "0"], False)
        frags_m = self.warpgroup_params["frags_m"]
        g, f, lane, r = ir.Var("g"), ir.Var("f"), ir.Var("l"), ir.Var("r")
        row = plus(times(WARPGROUP_M, plus(times(frags_m, g), f)), accumulator_row(lane, r))
        target, register = self.stored(row, lane, r)
        self.add("store", Kind.WRITE, [*self.prefix(), "g", "f", "l", "r"],
                 f"{self.group_domain()} and 0 <= f < {frags_m} "
                 f"and 0 <= r < {self.registers()}",
                 ir.Assign(ir.Element(C_TILE, ()), "=", ir.Element(FRAG_C, ())),
                 [target, ir.Element(FRAG_C, (plus(times(self.registers(), f), register),))],
                 self.point("128*g + l", ["2", "0", "1", "0", "0", "f", "r"]))
        self.sync("sync_stored", ["2", "0", "2", "0", "0", "0", "0"], False)
        self.output()


def operand_widths(program: Program, found: tuple[tuple[str, ...], ...], asynchronous: bool,
                   box: bool = False, free: FreeBox | None = None) -> dict[str, int | None]:
    """Each operand's cp.async width in elements (:func:`copy_widths`, B's a vector load's
    in a K ``box``, a ``free`` box's runs; None everywhere without ``asynchronous`` copies:
    through registers).
    TF32 tiles are K-major whatever the operand's layout (wgmma transposes 16-bit operands
    only), so an operand whose contiguous index is M's or N's moves a word per cp.async,
    each into a line of its own."""
    (a,), (b,), *_ = found
    if not asynchronous:
        return dict.fromkeys((a, b))
    widths = copy_widths(program, found, box, free)
    if program.dtype != "float32":
        return widths
    row_a, row_b = operand_rows_major(program, found)  # A's, B's lines along K: row_a, not row_b
    return {a: widths[a] if row_a else 1, b: widths[b] if not row_b else 1}


def k_major_tiles(program: Program, rows_major: tuple[bool, bool]) -> tuple[bool, bool]:
    """Whether A's and B's tiles are K-major, given whether their tiles' rows are the
    operands' rows (:func:`operand_rows_major`): where K is the operand's contiguous index,
    and always for TF32 (wgmma transposes 16-bit operands only)."""
    tf32 = program.dtype == "float32"
    return rows_major[0] or tf32, not rows_major[1] or tf32


def swizzles(program: Program, params: Mapping[str, Any],
             found: tuple[tuple[str, ...], ...]) -> tuple[int, int]:
    """The bytes of A's and B's swizzled lines: the widest of wgmma's swizzles (128, 64 or
    32 bytes) that the tile's extent along its contiguous index fills, a multiple of 32
    bytes in every tile (see the module's doc); with ``tma``, of an MN-major tile, the widest
    of those whose boxes stay in one value of the group's other indices
    (:func:`.warpgroup_tma.line_fits`: tccg_03's ``d`` of 96 values, 64-byte lines)."""
    tile = warpgroup_tile(params, program)
    size = dtypes.itemsize(program.dtype)
    majors = k_major_tiles(program, operand_rows_major(program, found))
    lines = []
    for rows, free, k_major in zip((tile["m"], tile["n"]), found[2:4], majors, strict=True):
        filled = [line for line in SWIZZLES if (tile["k"] if k_major else rows) * size % line == 0]
        boxed = [line for line in filled if k_major or line_fits(program, free, line // size)]
        lines.append((boxed if params.get("tma") and boxed else filled)[0])
    return lines[0], lines[1]


def staged_width(program: Program) -> int | None:
    """Elements of B that one cp.async moves into a K box's staging tile: the widest
    (:func:`copy_width`) that B's leading index's extent keeps aligned, a run all inside or
    all outside B; None where none does."""
    return copy_width(dtypes.itemsize(program.dtype), (program.sizes[k_box(program)[1]],))


def staged_place(column: ir.Expr) -> ir.Expr:
    """Where a staging tile's row holds its column ``16 c + d`` (B's memory order): each
    64 values (eight 16-byte chunks, a line of the 32 banks) with its chunks rotated by two
    per such line, so that a transpose's half-warp loads, the 16 values of ``d`` at four
    even ``c`` or four odd ones (:meth:`WarpgroupBuilder.transpose`), fall on distinct banks
    (unrotated, the even ``c`` of two lines shared theirs: 2 ways), while a warp's copies
    into it, consecutive chunks of one line at a time, still take each bank once."""
    # in 16-bit values (a staged B's: strided copies move those): 128 bytes, 16-byte chunks
    line, chunk = ir.SWIZZLE_BYTES // 2, CORE_ROW_BYTES // 2
    group = quotient(column, line)
    return plus(times(line, group),
                remainder(plus(remainder(column, line), times(2 * chunk, group)), line))


def staged(program: Program, params: Mapping[str, Any]) -> bool:
    """Whether a K box's B tile is staged (``staged_b``, offered where :func:`staged_width`
    finds a width, with cp.async): copied by cp.async in B's memory order into a staging
    tile of its own, then transposed from shared to shared memory (see the module's doc);
    else through registers."""
    return bool(params.get("staged_b")) and boxed(program, params)


def crossed_words(program: Program, box: FreeBox | None, tile: Mapping[str, int]) -> int:
    """The C tile's crossing (:func:`crossed`) where the write reads a free box's rows of
    N (:func:`skew_words`' words; 0 elsewhere: no box, or rows of M, whose accumulators
    are stored one by one, skewed as the tensor-core kernel skews them). The skew of
    ``w`` words per 32 placed a thread's pairs of accumulators at odd columns in every
    other block of 32 for ``w`` odd (Q' of 32: tccg_42/45/48's whole box), each then two
    4-byte stores of a warp's 8 rows 32 bytes apart, 2 ways at a pitch whose 8-byte
    stores take 1 (and such a pitch needs rows 4 apart on the same banks). No shift of a
    pair keeps it aligned and gives a row's 32 reads of one ``c`` (32 values of ``o`` 8
    apart) odd banks too; a swap of its two registers does."""
    return skew_words(box, tile) if box is not None and output_along_n(program) else 0


def crossed(position: ir.Expr, words: int) -> ir.Expr:
    """Where a crossed C tile row holds its element ``position`` (see
    :func:`crossed_words`): skewed as :func:`.tensorcore_tiles.skewed` skews it, ``s =
    words (position / 32)`` words, but by the even part of ``s`` and, where ``s`` is odd,
    with its pair's two columns swapped (``position mod 2`` XOR ``s mod 2``). The row keeps
    its skewed extent and every pair (a thread's two accumulators, at an even column and
    the next) stays aligned and whole; a thread's stores keep one address, their columns
    the register's own plus constants, so that they take immediates. The write's 32 reads
    of a row take each bank once wherever the skew's did (a row's ``c + P o`` for each P
    and Q': the same configurations fail both, none that a mapping takes): for tccg_42's
    ``s`` of 1 word per 32, a block of 32 reads 8 apart at one ``c`` lands 2 (``t / 2``)
    words on, and on the other half of its pair where ``t`` is odd."""
    skew = _skew(position, words)
    return plus(position, ir.Binary(ir.Op.SUB, times(2, quotient(skew, 2)),
                                    remainder(position, 2)),
                remainder(plus(position, skew), 2))


def _skew(position: ir.Expr, words: int) -> ir.Expr:
    """The skew of ``position``'s block of :data:`SKEWED` columns, ``words`` each."""
    return times(words, quotient(position, SKEWED))


def _swapped(position: ir.Expr, words: int) -> ir.Expr:
    """1 where :func:`crossed` swaps ``position``'s pair, else 0."""
    return remainder(_skew(position, words), 2)


def shared_bytes(program: Program, params: Mapping[str, Any]) -> int:
    """Bytes of a block's shared tiles: the operand tiles' stages (a staged B's twice), or
    the C tile (its rows padded by 16 bytes at most, a free box's as they are) that takes
    over their memory after the main loop; and with ``tma`` the stages' mbarriers after
    them (:func:`ir.shared_offsets`)."""
    tile = warpgroup_tile(params, program)
    operands = ((tile["m"] + tile["n"] * (2 if staged(program, params) else 1)) * tile["k"]
                * dtypes.itemsize(program.dtype))
    rows, along = (("m", "n") if output_along_n(program) else ("n", "m"))
    box = free_boxed(program, params)
    columns = skewed_extent(tile[along], skew_words(box, tile))
    size = dtypes.itemsize(accumulator_dtype(program))
    # a free box's skewed rows padded as the builder pads them
    pad = accumulator_row_pad(program, columns, output_along_n(program)) * size if box else 16
    barriers = ir.SHARED_ALIGNMENT if params.get("tma") else 0
    return max(operands * params["stages"], tile[rows] * (columns * size + pad)) + barriers


def step_boxes(program: Program, params: Mapping[str, Any]) -> tuple[OperandBox | None, ...]:
    """A's and B's boxes (:func:`operand_box`) for the parameters' tiles."""
    return tuple(operand_box(program, *arguments) for arguments in _box_arguments(program, params))


def tma_fits(program: Program, params: Mapping[str, Any]) -> bool:
    """Whether a step of the parameters' tiles spans one box of each operand."""
    return all(box is not None for box in step_boxes(program, params))


def tma_refusal(program: Program, params: Mapping[str, Any]) -> str | None:
    """Why bulk tensor copies fill no tiles of the parameters' shape (with ``tma`` or
    without), or None where they do: the tensors (:func:`.warpgroup_tma.tma_reason`), the
    layout, or each operand's tile that is no whole number of boxes
    (:func:`.warpgroup_tma.box_reason`)."""
    reason = tma_reason(program)
    if reason is not None:
        return reason
    if params.get("free_layout", "group") != "group":
        return f"a free box's tiles (free_layout {params['free_layout']})"
    reasons = [f"{arguments[0]}: {reason}"
               for arguments in _box_arguments(program, {**params, "tma": True})
               if (reason := box_reason(program, *arguments)) is not None]
    return "; ".join(reasons) or None


def _box_arguments(program: Program, params: Mapping[str, Any]
                   ) -> tuple[tuple[str, dict[str, int], int, dict[str, int]], ...]:
    """Each operand's name, step tile, values of a swizzled line and K's stepped extents:
    what decides its box."""
    found = gemm_groups(program)
    tile = warpgroup_tile(params, program)
    k_sizes = stepped_k(program, found, tile["k"])
    lines = swizzles(program, params, found)
    size = dtypes.itemsize(program.dtype)
    return tuple((tensor, tile, line // size, k_sizes)
                 for tensor, line in zip((found[0][0], found[1][0]), lines, strict=True))
