"""The SIMT model's registers per thread (issue 40): hand-worked counts of the estimate's
formula on small GEMM kernels, and the same kernels beside ptxas's count where nvcc is here."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

import treduda
from treduda.model.gpus import gpu
from treduda.model.model import Model, model_of
from treduda.model.optimist import _Optimist
from treduda.model.prediction import Compiled
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import compile_cuda_batch

GEMM = "C[i,j] = A[i,k] * B[k,j]"
SIZES = {"i": 70, "j": 66, "k": 68}  # no extent a multiple of a tile
# 16 x 8 threads of 2 x 2 registers, A and B staged (pad 1: rows read one value at a time),
# an unrolled 8-step
STAGED = {"order": "j,i", "block_x": 16, "block_y": 8, "block_z": 1, "reg_x": 2, "reg_y": 2,
          "reg_z": 1, "assign_x": "cyclic", "assign_y": "cyclic", "assign_z": "cyclic",
          "step": 8, "split": 1, "unroll": True, "stage": "A,B", "pad": 1, "preload": False,
          "double_buffer": False, "async_copy": False}
# 4 x 4 registers, A and B read straight from global memory
DIRECT = {**STAGED, "reg_x": 4, "reg_y": 4, "stage": "", "pad": 0}
# 4 x 4 registers staged with 16-byte rows: A's tile is read along k by LDS.128
VECTOR = {**STAGED, "reg_x": 4, "reg_y": 4, "pad": 0}
# (parameters, dtype): registers by the formula, worked by hand below
CASES = {
    # 4 accumulators, A's 2 values of one k (one per register along i) and B's 2, an
    # address for each read (8 each) and bookkeeping (6)
    "staged": (STAGED, "float32", 4 + 2 + 2 + 2 * 8 + 6),
    # 16 accumulators, 4 values of A and 4 of B, addresses and bookkeeping
    "direct": (DIRECT, "float32", 16 + 4 + 4 + 2 * 8 + 6),
    # 16 accumulators, A's 4 rows of 4 values along k (one LDS.128 each), B's 4
    "vector": (VECTOR, "float32", 16 + 4 * 4 + 4 + 2 * 8 + 6),
    # the staged tile in float64: every value two registers, addresses as in float32
    "float64": (STAGED, "float64", 2 * (4 + 2 + 2) + 2 * 8 + 6),
}


def _model(dtype: str, params: dict):
    kernel = treduda.compile(GEMM, SIZES, dtype=dtype, strategy="tiled+staged",
                             params=params, cache=False)
    return kernel, model_of(kernel.program, gpu("H100"), "tiled+staged")


@pytest.mark.parametrize("name", CASES)
def test_the_registers_a_kernel_holds_are_counted_from_its_tile_operands_and_addresses(name):
    params, dtype, registers = CASES[name]
    _, model = _model(dtype, params)
    assert model.registers(params) == (registers, 0)


def test_spills_are_judged_on_operands_consumed_one_by_one_and_amounted_on_the_hoisted_step():
    _, model = _model("float32", DIRECT)
    o = _Optimist(model, model.describe(DIRECT))
    # ptxas can consume each operand as it loads it before it spills: one value each
    assert o.live_registers(least=True) == 16 + 1 + 1 + 2 * 8 + 6
    # what it spills is the unrolled step's loads, each read 4 values a point for 8 points
    assert o.live_registers(hoisted=True) == 16 + 2 * 4 * 8 + 2 * 8 + 6
    # the launch bounds of 128 threads allow 255: nothing spills
    assert o.spilled_registers() == 0
    assert model.register_pressure(DIRECT) == pytest.approx(40 / 255)


@needs_nvcc
def test_the_estimate_is_near_ptxas_on_the_hand_worked_kernels():
    kernels = [_model(dtype, params)[0] for params, dtype, _ in CASES.values()]
    reports = compile_cuda_batch([k.cuda_source for k in kernels])
    for (name, (_, _, registers)), report in zip(CASES.items(), reports, strict=True):
        # ptxas (CUDA 13, sm_90): 39, 40, 48, 40; across the 201 kernels of
        # benchmarks/simt_registers.py the median difference is 6
        assert abs(report[0].registers - registers) <= 12, name


# 32 x 32 threads of 8 x 8 registers (GEMM 700 x 660 x 68): launch bounds of 1024 threads let
# ptxas give a thread 64 registers on an H100, fewer than the loop holds
CAPPED = {**STAGED, "block_x": 32, "block_y": 32, "reg_x": 8, "reg_y": 8}


def _capped() -> Model:
    return Model(plan(GEMM, {"i": 700, "j": 660, "k": 68}), gpu("H100"), "tiled+staged")


def test_predicted_spills_move_their_bytes_through_l2_once_a_step():
    model = _capped()
    o = _Optimist(model, model.describe(CAPPED))
    spilled = model.registers(CAPPED)[1]
    assert spilled == 64 + 8 + 8 + 2 * 8 + 6 - 64  # staged: nothing held beyond the loop's
    predicted = model.estimate(CAPPED).resources
    clean = model.estimate(CAPPED, Compiled(64)).resources
    # each spilled register stored and loaded once in each of the 9 steps of k's 68 values,
    # 4 bytes through L2 each time; only a main loop read from the SASS is priced in issue
    # slots and LSU wavefronts as well (below)
    assert o.steps() == 9
    moved = 2 * 4 * spilled * o.steps() * o.blocks() * o.threads()
    assert predicted["l2"] - clean["l2"] == pytest.approx(moved / model.gpu.l2_bandwidth)
    assert {k: v for k, v in predicted.items() if k != "l2"} == {
        k: v for k, v in clean.items() if k != "l2"}


def test_spills_cost_what_the_main_loop_moves_not_what_is_stored_once_outside_it():
    model = _capped()
    # ptxas stores 116 bytes a thread (tccg_18 on the H200, nvcc 13): read without the SASS,
    # they are taken to move at every step; its main loop moves none here, or 8 per 1024 FFMA
    read = {per_fma: model.estimate(CAPPED, Compiled(64, 116, 1.2, per_fma)).resources
            for per_fma in (0.0, 8 / 1024)}
    clean = model.estimate(CAPPED, Compiled(64, 0, 1.2, 0.0)).resources
    unread = model.estimate(CAPPED, Compiled(64, 116)).resources
    assert read[0.0] == clean
    assert unread["l2"] > read[8 / 1024]["l2"] > clean["l2"]
    o = _Optimist(model, model.describe(CAPPED))
    moved = 8 / 1024 * o.fmas_per_block_step() * o.blocks() * o.steps() * o.walks()
    assert read[8 / 1024]["l2"] - clean["l2"] == pytest.approx(moved / model.gpu.l2_bandwidth)
    # each 4 bytes a warp's load or store of one wavefront; the issue is the SASS's, which
    # holds the loads and stores already
    assert read[8 / 1024]["memory"] > clean["memory"]
    assert read[8 / 1024]["issue"] == clean["issue"]
