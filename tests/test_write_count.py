"""The tensor-core models count a kernel's write from its own statement: the index arithmetic
that changes in each iteration of the write's loop (:mod:`treduda.model.iteration`), as nvcc
compiles it, checked here against the SASS figures measured on these kernels."""

from __future__ import annotations

from treduda.strategies.tensorcore_kernel import Builder
from treduda.strategies.warpgroup_kernel import WarpgroupBuilder

from treduda.codegen import ir
from treduda.codegen.simplify import plus, quotient, remainder, times
from treduda.model import iteration
from treduda.polyhedral.lower import plan
from treduda.suites import load

TCCG_33 = next(r for r in load("tccg_fp16") if r.id == "tccg_33")
TCCG_05 = next(r for r in load("tccg_fp16") if r.id == "tccg_05")
GEMM = next(r for r in load("gemm") if r.id == "gemm_4096")
WARPGROUP = {"warpgroups": 2, "frags_m": 1, "tile_n": 256, "frags_k": 2, "split": 1,
             "stages": 2, "async_copy": True, "staged_b": False, "tma": False,
             "producer": False}


def _program(row):
    return plan(row.expression, row.sizes, row.layout, "float16")


def test_an_iteration_costs_what_changes_with_its_variable():
    """A division by a constant that is no power of two is a multiply-high sequence (3), its
    remainder beside it one more, alone 4; by a power of two a shift; a sum a term each;
    what does not change with ``c`` nothing; a subexpression computed once."""
    c, t = ir.Var("c"), ir.Var("t")
    m = plus(times(128, ir.Var("bm")), c)
    assert iteration.iteration_instructions([quotient(t, 480), remainder(t, 7)], c) == 0
    assert iteration.iteration_instructions([quotient(m, 480)], c) == 1 + 3
    assert iteration.iteration_instructions([quotient(m, 480), remainder(m, 480)], c) \
        == 1 + 3 + 1
    assert iteration.iteration_instructions([remainder(m, 480), remainder(m, 480)], c) \
        == 1 + 4
    assert iteration.iteration_instructions([quotient(c, 64), remainder(c, 64)], c) == 2
    assert iteration.guarded(plus(times(2, remainder(c, 64)), t), c)
    assert not iteration.guarded(plus(times(2, c), t), c)  # a loop bound takes it


def test_the_box_writes_as_the_group_layout_does():
    """tccg_33's warpgroup write: 12 instructions an element in the group layout and in
    the box (the SASS loops: 13.9 each; the box's old numbering: 39.5, counted 37)."""
    program = _program(TCCG_33)
    group, box = (WarpgroupBuilder(program, WARPGROUP | {"free_layout": layout})
                  .write_instructions() for layout in ("group", "box"))
    assert group == box == 12


def test_a_tile_that_divides_its_row_by_no_power_of_two_writes_dearer():
    """GEMM 4096^3's 256 x 192 warpgroup tile numbers its write's elements ``e mod 192``
    and ``e / 192``: a division, its remainder and a guard each element (SASS: about 30 an
    element, four elements a loop); 128 x 256 shifts and masks."""
    program = _program(GEMM)
    wide = {**WARPGROUP, "frags_m": 2, "tile_n": 192, "free_layout": "group"}
    narrow = {**WARPGROUP, "tile_n": 256, "free_layout": "group"}
    assert WarpgroupBuilder(program, wide).write_instructions() \
        > 2 * WarpgroupBuilder(program, narrow).write_instructions()


def test_a_write_of_few_iterations_is_counted_unrolled():
    """tccg_05's mma.sync box pick writes 48 elements a thread in a loop nvcc unrolls whole
    (about 5 SASS instructions an element): a shared load, the conversion, an address and
    the store."""
    params = {"warps_m": 4, "warps_n": 1, "frags_m": 4, "frags_n": 2, "frags_k": 2,
              "stages": 2, "split": 1, "mapping": "mma", "shared_layout": "pad",
              "free_layout": "box", "async_copy": True}
    assert Builder(_program(TCCG_05), params).write_instructions() == 4
