"""The statements and schedule of a warpgroup kernel (:class:`.warpgroup.Warpgroup`): the
tensor-core kernel's (:mod:`.tensorcore_kernel`) with Hopper's asynchronous MMAs.

What stays: the grouping of indices, the copies of each step's operand tiles (cp.async where
the operand's K is contiguous, else through registers), their zero fill outside the tensors,
the stages and the write through the shared C tile in the output's own layout (alpha, beta,
``+=``). What changes:

* The operand tiles are laid out as wgmma reads them without swizzle (PTX ISA, "Shared Memory
  Matrix Layout", K-major): ``X[buffer][k / e][row][k % e]``, ``e`` the elements of 16 bytes,
  so that 8 rows of a 16-byte slice of K are one 128-byte core matrix, core matrices along M
  or N 128 bytes apart (the descriptor's stride) and along K a whole slice apart (its leading
  offset: rows x 16 bytes). An operand whose contiguous index is M's or N's is copied element
  by element (wgmma transposes 16-bit operands itself, ``imm-trans``; that layout is a next
  step, see the strategy's doc).
* A block is ``warpgroups`` warpgroups of 128 threads, warpgroup ``g`` holding
  ``frags_m`` accumulators of 64 x BN, rows ``64 (frags_m g + f)`` on, each ``BN / 2`` float
  registers of a thread (:class:`ir.WarpgroupMultiply`'s layout), in one register array.
* Per step, after the wait for its copies, each thread fences its writes to the async proxy
  (:class:`ir.ProxyFence`) before the barrier; then each warpgroup fences its registers, starts
  ``frags_k x frags_m`` MMAs of m64nBNk16 (k8 for TF32), commits them and waits for them
  (``wgmma.wait_group 0``) before the next step's barrier, after which copies may overwrite the
  buffers they read. Schedule (``P`` the block prefix, ``g`` the warpgroup, ``l`` its thread)::

    fill[P, g, l, r]              -> [.., 128g + l, .., 0, 0, 0, 0, 0, 0, r]
    fence_proxy[P, ks, t]         -> just before the step's barrier (sync_after)
    fence/mma/commit/wait[P, ks, g, kf, f, l]
                                  -> [.., 128g + l, .., 1, ks, 3, 0 | 1 | 2 | 3, kf, 0, f]
    store[P, g, f, l, r]          -> [.., 128g + l, .., 2, 0, 1, 0, 0, f, r]

  and the rest as the tensor-core kernel's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from treduda.codegen import ir
from treduda.codegen.simplify import plus, quotient, remainder, times
from treduda.codegen.warpgroup import accumulator_column, accumulator_row
from treduda.frontend import dtypes
from treduda.polyhedral.lower import Kind, Program

from .tensorcore_kernel import A_TILE, B_TILE, C_TILE, FRAG_C, STAGE_MMA, Builder
from .tensorcore_tiles import (
    accumulator_dtype,
    conflict_free_pad,
    copy_widths,
    output_along_n,
    split_parts,
    stepped_k,
)

CORE_ROW_BYTES = 16  # a core matrix's row (PTX ISA, "Shared Memory Matrix Layout")
CORE_ROWS = 8
WARPGROUP_M = 64  # rows of one wgmma's A and accumulator


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
            "split": 1, "async_copy": params["async_copy"]}


class WarpgroupBuilder(Builder):
    """Builds one warpgroup kernel (see the module's doc)."""

    def __init__(self, program: Program, params: Mapping[str, Any]):
        super().__init__(program, tensorcore_params(params))
        self.warpgroup_params = params
        self.per_row = CORE_ROW_BYTES // dtypes.itemsize(program.dtype)  # e
        self.shape = (WARPGROUP_M, params["tile_n"], wgmma_k(program))
        self.tile = warpgroup_tile(params, program)
        found = (((self.a,), (self.b,), self.m, self.n, self.k, self.batch))
        self.k_sizes = stepped_k(program, found, self.tile["k"])
        self.threads = ir.WARPGROUP * params["warpgroups"]
        self.chunk, self.parts = split_parts(self.steps(), 1)
        size = dtypes.itemsize(accumulator_dtype(program))
        rows = self.tile["n"] if output_along_n(program) else self.tile["m"]
        self.pads = {A_TILE: 0, B_TILE: 0,
                     C_TILE: conflict_free_pad(rows * size, CORE_ROW_BYTES) // size}
        # cp.async only into K-major rows, where the copy's runs lie along K, and not for
        # TF32, whose values are rounded on their way (see copied)
        widths = (copy_widths(program, found)
                  if params["async_copy"] and program.dtype != "float32" else {})
        k_major = {self.a: self.row_a, self.b: not self.row_b}
        self.widths = {t: widths.get(t) if k_major[t] else None for t in (self.a, self.b)}
        self.asynchronous = any(w is not None for w in self.widths.values())
        self.lead = self.stages - 1 if self.asynchronous else 0

    def registers(self) -> int:
        """Accumulator registers of a thread per wgmma: ``BN / 2``."""
        return self.tile["n"] // 2

    def group_domain(self) -> str:
        return (f"{self.prefix_bounds()} and 0 <= g < {self.threads // ir.WARPGROUP} "
                f"and 0 <= l < {ir.WARPGROUP}")

    def run(self):
        count = self.warpgroup_params["frags_m"] * self.registers()
        self.add("fill", Kind.INIT, [*self.prefix(), "g", "l", "r"],
                 f"{self.group_domain()} and 0 <= r < {count}",
                 ir.Assign(ir.Element(FRAG_C, ()), "=", ir.Float(0.0)),
                 [ir.Element(FRAG_C, (ir.Var("r"),))],
                 self.point("128*g + l", ["0"] * 6 + ["r"]))
        self.reduction()
        self.write()
        return self.scheduled()

    def copied(self, source: ir.Element) -> ir.Expr:
        """TF32 operands rounded to TF32 (``cvt.rna``) as they are copied: a wgmma reads
        float32 bits from shared memory as TF32 with no rounding of its own to ask for, so
        the tiles hold values it takes exactly, as the twin and the WMMA path round them."""
        if self.program.dtype == "float32":
            return ir.Call(ir.Function.TF32, (source,))
        return source

    def tile_index(self, row: ir.Expr, column: ir.Expr, row_is_free: bool
                   ) -> tuple[ir.Expr, ...]:
        """``[k / e][row][k % e]`` of the core matrices: the free index is the 2-D tile's row
        where its rows are free (K the column), else its column."""
        free, k = (row, column) if row_is_free else (column, row)
        return quotient(k, self.per_row), free, remainder(k, self.per_row)

    def sync(self, name: str, tail: Sequence[str], stepped: bool,
             body: ir.Barrier | ir.CommitCopies | ir.WaitCopies | None = None,
             beyond: int = 0) -> None:
        """Before the barrier after which the step's MMAs read the tiles, every thread
        fences its writes of them to the async proxy."""
        if name == "sync_after":
            super().sync("fence_proxy", tail, stepped, ir.ProxyFence())
            tail = [*tail[:-2], "1", tail[-1]]
        super().sync(name, tail, stepped, body, beyond)

    def layouts(self) -> tuple[ir.CoreMatrices, ir.CoreMatrices]:
        """A's and B's descriptors: core matrices 128 bytes apart along M or N, a K slice
        (the tile's rows of 16 bytes) apart along K."""
        return (ir.CoreMatrices(self.tile["m"] * CORE_ROW_BYTES, CORE_ROWS * CORE_ROW_BYTES),
                ir.CoreMatrices(self.tile["n"] * CORE_ROW_BYTES, CORE_ROWS * CORE_ROW_BYTES))

    def fragments(self) -> None:
        """Per step and warpgroup: a register fence, ``frags_k x frags_m`` MMAs, a commit and
        a wait for them."""
        p = self.warpgroup_params
        frags_m, k = p["frags_m"], self.shape[2]
        names = [*self.prefix(), "ks", "g", "l"]
        domain = f"{self.group_domain()} and {self.step_bounds()}"
        for name, body, position in (("wg_fence", ir.WarpgroupFence(), "0"),
                                     ("wg_commit", ir.WarpgroupCommit(), "2"),
                                     ("wg_wait", ir.WarpgroupWait(0), "3")):
            self.add(name, Kind.REDUCE, names, domain, body, [],
                     self.point("128*g + l", ["1", "ks", str(STAGE_MMA), position, "0", "0",
                                              "0"]))
        g, f, kf = ir.Var("g"), ir.Var("f"), ir.Var("kf")
        slice_k = times(k // self.per_row, kf)
        a_layout, b_layout = self.layouts()
        rows = times(WARPGROUP_M, plus(times(frags_m, g), f))
        self.add("mma", Kind.REDUCE, [*self.prefix(), "ks", "g", "kf", "f", "l"],
                 f"{domain} and 0 <= kf < {p['frags_k']} and 0 <= f < {frags_m}",
                 ir.WarpgroupMultiply(ir.Element(FRAG_C, ()), ir.Element(A_TILE, ()),
                                      ir.Element(B_TILE, ()), self.shape, a_layout, b_layout),
                 [ir.Element(FRAG_C, (times(self.registers(), f),)),
                  ir.Element(A_TILE, (*self.buffer(), slice_k, rows, ir.Int(0))),
                  ir.Element(B_TILE, (*self.buffer(), slice_k, ir.Int(0), ir.Int(0)))],
                 self.point("128*g + l", ["1", "ks", str(STAGE_MMA), "1", "kf", "0", "f"]))

    def locals(self) -> dict[str, ir.Local]:
        t = self.tile
        buffers = (self.stages,) if self.stages > 1 else ()
        e, stored = self.per_row, self.program.dtype in dtypes.STORED
        along = (t["m"], t["n"] + self.pads[C_TILE]) if self.along_n else (
            t["n"], t["m"] + self.pads[C_TILE])
        return {
            A_TILE: ir.Local(A_TILE, ir.Space.SHARED, (*buffers, t["k"] // e, t["m"], e),
                             stored=stored),
            B_TILE: ir.Local(B_TILE, ir.Space.SHARED, (*buffers, t["k"] // e, t["n"], e),
                             stored=stored),
            C_TILE: ir.Local(C_TILE, ir.Space.SHARED, along, reuses=(A_TILE, B_TILE)),
            FRAG_C: ir.Local(FRAG_C, ir.Space.REGISTER,
                             (self.warpgroup_params["frags_m"] * self.registers(),)),
        }

    def write(self) -> None:
        """Each thread stores its accumulator registers into the C tile where wgmma's layout
        puts them; then the program's write statement, as the tensor-core kernel's."""
        self.sync("sync_store", ["2", "0", "0", "0", "0", "0", "0"], False)
        frags_m = self.warpgroup_params["frags_m"]
        g, f, lane, r = ir.Var("g"), ir.Var("f"), ir.Var("l"), ir.Var("r")
        row = plus(times(WARPGROUP_M, plus(times(frags_m, g), f)), accumulator_row(lane, r))
        column = accumulator_column(lane, r)
        self.add("store", Kind.WRITE, [*self.prefix(), "g", "f", "l", "r"],
                 f"{self.group_domain()} and 0 <= f < {frags_m} "
                 f"and 0 <= r < {self.registers()}",
                 ir.Assign(ir.Element(C_TILE, ()), "=", ir.Element(FRAG_C, ())),
                 [ir.Element(C_TILE, (row, column) if self.along_n else (column, row)),
                  ir.Element(FRAG_C, (plus(times(self.registers(), f), r),))],
                 self.point("128*g + l", ["2", "0", "1", "0", "0", "f", "r"]))
        self.sync("sync_stored", ["2", "0", "2", "0", "0", "0", "0"], False)
        self.output()
