"""The model's issue counts follow what the SASS of the main loop issues (issue 38): one load
per aligned vector run of a thread's values (along x, or along an unrolled step's summed
index; staged or read directly), the address arithmetic of each cp.async, and a rolled step
loop's own instructions; and the local search trades threads between two axes at once."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

import treduda
from treduda.model import tiles
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.model.optimist import _Optimist
from treduda.polyhedral.lower import plan
from treduda.tuning.search import Searcher

# tccg_25 (F layout): A[a,e,d,f] is read along a, its fastest index, which x deals 4 values
# per thread; B[f,b,e,c] along f, a summed index the step unrolls.
TCCG_25 = ("C[a,b,c,d]=A[a,e,d,f]*B[f,b,e,c]",
           {"a": 96, "b": 84, "c": 84, "d": 84, "e": 84, "f": 96})
PICK = {"order": "a,b,d", "stage": "B", "block_x": 8, "reg_x": 4, "assign_x": "adjacent",
        "block_y": 4, "reg_y": 8, "assign_y": "cyclic", "block_z": 2, "reg_z": 2,
        "assign_z": "adjacent", "step": 8, "split": 1, "preload": False,
        "double_buffer": True, "pad": 0, "async_copy": True, "unroll": True}


@pytest.fixture(scope="module")
def model() -> Model:
    expr, sizes = TCCG_25
    return Model(plan(expr, sizes, layout="F"), gpu("H100"))


def test_a_thread_loads_each_aligned_vector_run_once(model):
    # A: 4 adjacent values along a per thread, read from global memory as one LDG.128 (A's
    # strides are multiples of 4); B: 8 values along y, each run of 4 along f in one LDS.128.
    # Per reduction point the thread's 64 FMAs need 2 + 2 loads (the SASS: 26 LDG.128 and
    # 26 LDS.128 for 832 FFMA).
    assert model.issue_instructions(PICK)["loads"] == pytest.approx(4 / 64)
    cyclic = model.issue_instructions({**PICK, "assign_x": "cyclic"})["loads"]
    assert cyclic == pytest.approx((8 + 2) / 64)  # A value by value
    rolled = model.issue_instructions({**PICK, "unroll": False})["loads"]
    assert rolled == pytest.approx((2 + 8) / 64)  # B value by value


def test_a_rolled_step_loop_costs_its_own_instructions_each_point(model):
    unrolled = model.issue_instructions(PICK)
    rolled = model.issue_instructions({**PICK, "unroll": False})
    assert unrolled["loop"] == 0
    assert rolled["loop"] > rolled["loads"]  # the loop's overhead and an address per load
    assert model.estimate({**PICK, "unroll": False}).seconds > model.estimate(PICK).seconds


def test_each_async_copy_counts_its_address_arithmetic(model):
    both = {**PICK, "stage": "A,B", "step": 4}
    copies = model.issue_instructions(both)["copies"]
    synchronous = model.issue_instructions({**both, "async_copy": False})["copies"]
    assert 0 < copies < synchronous  # fewer instructions than a load and a store per value
    # 10 cp.async per thread and step (A 8, B 2), 1024 FMAs: with their addresses at least
    # 4 instructions each
    assert copies >= 10 * 4 / 1024


def test_a_double_buffer_costs_its_bookkeeping_each_step(model, monkeypatch):
    # One barrier a step fewer, but the alternating buffers' addresses and the pipeline's
    # tests: tccg_31's SASS spent 17 to 51 more instructions a step double-buffered.
    def copies(model: Model, double_buffer: bool) -> float:
        return model.issue_instructions({**PICK, "double_buffer": double_buffer})["copies"]

    assert copies(model, True) > copies(model, False)
    monkeypatch.setattr(tiles, "DOUBLE_BUFFER_INSTRUCTIONS", 0)
    fresh = Model(model.program, model.gpu)  # the model remembers its counts
    assert copies(fresh, True) < copies(fresh, False)  # as barriers alone, it looked cheaper


def test_the_local_search_trades_threads_between_two_axes():
    expr, sizes = TCCG_25
    searcher = Searcher(plan(expr, sizes, layout="F"), "H100", restrict=False)
    start = {**PICK, "block_x": 4, "reg_x": 8, "block_y": 8, "reg_y": 4}
    trades = [dict(change) for change in searcher._trades(start)]
    both = {"block_x": 8, "reg_x": 4, "block_y": 4, "reg_y": 8}
    assert both in trades  # x gains the threads y gives up; every tile and register stays
    for change in trades:
        moved = {**start, **change}
        assert (moved["block_x"] * moved["block_y"] * moved["block_z"]
                * moved["reg_x"] * moved["reg_y"] * moved["reg_z"]) == 4 * 8 * 8 * 4 * 2 * 2


@needs_nvcc
@pytest.mark.matrix
def test_the_counted_loads_match_the_sass_of_the_main_loop(model):
    expr, sizes = TCCG_25
    kernel = treduda.compile(expr, sizes, layout="F", strategy="tiled+staged", params=PICK)
    report = kernel.sass_report()
    loads = report.main_loop_opcodes.get("LDS", 0) + report.main_loop_opcodes.get("LDG", 0)
    predicted = model.issue_instructions(PICK)["loads"] * report.main_loop_ffma
    assert loads == pytest.approx(predicted, rel=0.1)


GEMM_4096 = ("C[i,j] = A[i,k]*B[k,j]", {"i": 4096, "j": 4096, "k": 4096})
# 512 threads, 8 x 8 each, 128 registers: one block per SM.
ALONE = {"order": "j,i", "stage": "A,B", "block_x": 16, "reg_x": 8, "assign_x": "vector",
         "block_y": 32, "reg_y": 8, "assign_y": "cyclic", "block_z": 1, "reg_z": 1,
         "assign_z": "cyclic", "step": 16, "split": 1, "preload": False, "double_buffer": True,
         "pad": 0, "async_copy": True, "unroll": True}


def test_a_single_buffered_step_idles_the_sm_its_block_has_alone():
    # Every warp of the block waits for the step's copies at the barrier; a second resident
    # block would issue its own step (about 4400 cycles) meanwhile. Without this the model
    # picked the single-buffered twin for GEMM 4096^3, which ptxas spills (16 B).
    expr, sizes = GEMM_4096
    model = Model(plan(expr, sizes), gpu("H100"))
    single = {**ALONE, "double_buffer": False}
    assert model.estimate(single).seconds > model.estimate(ALONE).seconds
    o = _Optimist(model, model.describe(single))
    assert o.step_stall(1, 1.0) == model.gpu.l2_latency_cycles
    assert o.step_stall(2, 1.0) == 0.0
    assert _Optimist(model, model.describe(ALONE)).step_stall(1, 1.0) == 0.0  # copied ahead


def test_a_step_shorter_than_the_others_costs_its_guarded_copy():
    # c = 96 in steps of 64: the second step holds 32 values, a third of the reduction points,
    # and runs the unrolled step's guarded copy (tccg_10's rival: a 64-step over e = 96); in
    # steps of 32 (or 96, or 128: one step) every step is full. Two summed indices of 12 in
    # steps of 8: 64 of the 144 points lie in a full step along both.
    model = Model(plan("C[a,b]=A[a,c]*B[c,b]", {"a": 64, "b": 64, "c": 96}, layout="F"),
                  gpu("H100"))
    gemm = {"order": "a,b", "stage": "A,B", "block_x": 16, "reg_x": 4, "assign_x": "adjacent",
            "block_y": 16, "reg_y": 4, "assign_y": "adjacent", "block_z": 1, "reg_z": 1,
            "assign_z": "cyclic", "split": 1, "preload": False, "double_buffer": False,
            "pad": 0, "async_copy": True, "unroll": True}
    partial = model.issue_instructions({**gemm, "step": 64})["partial step"]
    assert partial == pytest.approx(tiles.GUARDED_STEP_INSTRUCTIONS / 3)
    for step in (32, 96, 128):  # 128: one step of all 96 values, of constant length
        assert model.issue_instructions({**gemm, "step": step})["partial step"] == 0
    # rolled, every step runs the same loop (its own cost: loop_instructions)
    assert model.issue_instructions({**gemm, "step": 64, "unroll": False})["partial step"] == 0
    two = Model(plan("C[a]=A[a,c,d]*B[d,c]", {"a": 64, "c": 12, "d": 12}, layout="F"),
                gpu("H100"))
    direct = {"order": "a", "stage": "", "block_x": 32, "reg_x": 2, "assign_x": "adjacent",
              "block_y": 1, "reg_y": 1, "assign_y": "cyclic", "block_z": 1, "reg_z": 1,
              "assign_z": "cyclic", "split": 1, "step": 8, "unroll": True}
    assert two._issue(_Optimist(two, two.describe(direct)))["partial step"] == pytest.approx(
        tiles.GUARDED_STEP_INSTRUCTIONS * (1 - 64 / 144))


@pytest.mark.parametrize(("layout", "slowest"), [("F", "d"), ("C", "c")])
def test_issue_counts_rounds_a_merged_index_through_the_expressions_own(layout, slowest):
    """benchmarks/issue_counts.py compiles the sizes rounded to whole tiles: for c and d,
    merged into c_d (tccg_10's form), it rounds the slower of the two (d in F order, c in C),
    so that c_d is a multiple of z's tile, and it names the expression's indices."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "issue_counts.py"
    spec = importlib.util.spec_from_file_location("issue_counts", path)
    issue_counts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(issue_counts)
    sizes = {"a": 9, "b": 7, "c": 5, "d": 3, "e": 6}
    program = plan("C[a,b,c,d]=A[e,b]*B[a,e,c,d]", sizes, layout=layout)
    assert program.merging.merges == {"c_d": ("c", "d")}
    params = {"order": "a,b,c_d", "block_x": 2, "reg_x": 2, "block_y": 4, "reg_y": 1,
              "block_z": 1, "reg_z": 4, "step": 4, "split": 1}
    whole = issue_counts.whole(program, params)
    kept = ({"c", "d"} - {slowest}).pop()
    assert whole == {**sizes, "a": 12, "b": 8, "e": 8, kept: sizes[kept],
                     slowest: 4 if slowest == "d" else 8}
    assert whole["c"] * whole["d"] % 4 == 0
