"""The IR walk (issue #4): its counts add up to the iteration space, see staging, coalescing and
bank conflicts in the actual index expressions, and its estimate never undercuts the model's
bound, which branch and bound relies on."""

from __future__ import annotations

import functools
import math
import time

import pytest
from conftest import needs_nvcc

import treduda
from treduda.errors import MissingSize
from treduda.polyhedral.lower import plan
from treduda.tuning import walk
from treduda.tuning.search import Searcher

GEMM = "C[i,j] = A[i,k]*B[k,j]"
CUBE = {"i": 128, "j": 128, "k": 128}
TILED = {"order": "j,i", "block_x": 16, "reg_x": 4, "block_y": 8, "reg_y": 4, "step": 16,
         "unroll": True, "stage": "A,B", "pad": 1, "preload": False}
VARIANTS = {  # tiled+staged parameter sets, all dividing 128
    "staged-AB": TILED,
    "staged-A-preload": {**TILED, "stage": "A", "pad": 0, "preload": True},
    "unstaged-rolled": {**TILED, "stage": "", "pad": 0, "unroll": False, "block_x": 32},
    "staged-B-along-i": {**TILED, "order": "i,j", "stage": "B", "reg_x": 2, "step": 32},
}
WINNER_4096 = {"order": "j,i", "stage": "A", "block_x": 64, "reg_x": 4, "assign_x": "cyclic",
               "block_y": 16, "reg_y": 8, "assign_y": "cyclic", "block_z": 1, "reg_z": 1,
               "assign_z": "cyclic", "step": 32, "preload": True, "pad": 0, "unroll": True}


@functools.cache
def kernel(strategy: str, params: tuple = (), sizes: tuple = tuple(CUBE.items()),
           expr: str = GEMM, symbolic: bool = False) -> treduda.Kernel:
    return treduda.compile(expr, None if symbolic else dict(sizes), strategy=strategy,
                           params=dict(params) or None, symbolic=symbolic)


def threads(k: treduda.Kernel) -> int:
    return math.prod(k.grid) * math.prod(k.block)


def staged(name: str) -> treduda.Kernel:
    return kernel("tiled+staged", tuple(VARIANTS[name].items()))


@pytest.mark.parametrize("name", VARIANTS)
def test_fmas_of_all_threads_cover_the_iteration_space(name):
    k = staged(name)
    assert walk.count(k, use_nvcc=False).fma * threads(k) == 128**3


def test_thread_per_element_does_one_fma_per_point():
    k = kernel("thread_per_element")
    c = walk.count(k, use_nvcc=False)
    assert c.fma * threads(k) == 128**3
    assert (c.global_loads, c.global_stores, c.shared_loads, c.barriers) == (256, 1, 0, 0)


def test_partial_tiles_count_their_padding():
    """Thread 0 of block 0 holds a full register tile; the last blocks' guards cut the rest,
    so per thread x threads is the padded space (as the model's fma resource counts it)."""
    sizes = {"i": 100, "j": 72, "k": 200}
    k = kernel("tiled+staged", tuple(TILED.items()), tuple(sizes.items()))
    padded = math.ceil(100 / 32) * 32 * math.ceil(72 / 64) * 64 * 200
    assert walk.count(k, use_nvcc=False).fma * threads(k) == padded


@pytest.mark.parametrize("name", ["staged-AB", "staged-A-preload", "staged-B-along-i"])
def test_staging_loads_shared_memory_between_two_barriers_per_step(name):
    c = walk.count(staged(name), use_nvcc=False)
    steps = 128 // VARIANTS[name]["step"]
    assert c.shared_loads > 0 and c.shared_stores > 0
    assert c.barriers == 2 * steps


def test_unstaged_kernel_has_no_shared_traffic_or_barriers():
    c = walk.count(staged("unstaged-rolled"), use_nvcc=False)
    assert (c.shared_loads, c.shared_stores, c.barriers) == (0, 0, 0)


def test_reading_a_row_major_matrix_down_its_column_costs_wavefronts():
    """x along i: consecutive threads read A[i,k] K elements apart, 32 sectors per warp."""
    along_j = walk.count(kernel("thread_per_element", (("order", "j,i"),)), use_nvcc=False)
    along_i = walk.count(kernel("thread_per_element", (("order", "i,j"),)), use_nvcc=False)
    assert along_j.global_loads == along_i.global_loads
    assert along_j.global_wavefronts == along_j.global_loads  # one per load: coalesced
    assert along_i.global_wavefronts == along_i.global_loads / 2 * (8 + 1)  # A: 8, B: broadcast


def test_padding_the_shared_tile_removes_bank_conflicts():
    """x along i reads the staged A[i,k] tile down its column: 16 words apart without padding
    (8 lanes per bank), 17 apart with it (no conflict)."""
    params = {**TILED, "order": "i,j", "stage": "A"}
    fronts = {pad: walk.count(kernel("tiled+staged", tuple({**params, "pad": pad}.items())),
                                 use_nvcc=False) for pad in (0, 1)}
    assert fronts[0].shared_loads == fronts[1].shared_loads
    assert fronts[0].shared_wavefronts > 4 * fronts[1].shared_wavefronts


def test_identical_loads_count_once_as_nvcc_reuses_them():
    """A 4x4 register tile loads 4 + 4 operands per k, not 16 + 16."""
    c = walk.count(staged("staged-AB"), use_nvcc=False)
    assert c.shared_loads == 128 * (4 + 4)


def test_sampled_loops_agree_with_walking_every_iteration(monkeypatch):
    sizes = (("i", 100), ("j", 72), ("k", 200))
    for params in (TILED, VARIANTS["staged-A-preload"], VARIANTS["unstaged-rolled"]):
        k = kernel("tiled+staged", tuple(params.items()), sizes)
        sampled = walk.count(k, use_nvcc=False)
        monkeypatch.setattr(walk, "SAMPLED", 10**9)
        assert walk.count(k, use_nvcc=False) == sampled
        monkeypatch.undo()


def test_a_pipelined_loop_is_sampled_past_its_prologue(monkeypatch):
    """A double-buffered loop starts at -1 (the prologue's loads) and its second iteration
    waits at a barrier of its own: the third stands for the rest, with the counts of walking
    every iteration, and the walk visits six iterations, not all 64."""
    params = {**TILED, "preload": True, "double_buffer": True}
    k = kernel("tiled+staged", tuple(params.items()), (("i", 128), ("j", 128), ("k", 1024)))
    visited = []
    real = walk._Walker.walk
    monkeypatch.setattr(walk._Walker, "walk", lambda self, s: visited.append(s) or real(self, s))
    sampled, walked = walk.count(k, use_nvcc=False), len(visited)
    monkeypatch.setattr(walk, "SAMPLED", 10**9)
    assert walk.count(k, use_nvcc=False) == sampled
    assert len(visited) - walked > 5 * walked


def test_symbolic_kernels_need_sizes():
    k = kernel("tiled+staged", tuple(TILED.items()), symbolic=True)
    with pytest.raises(MissingSize):
        walk.count(k, use_nvcc=False)
    fixed = walk.count(staged("staged-AB"), use_nvcc=False)
    assert walk.count(k, use_nvcc=False, sizes=CUBE).fma == fixed.fma
    assert walk.estimate_kernel(k, sizes=CUBE, use_nvcc=False).seconds > 0


@pytest.mark.parametrize("name", VARIANTS)
def test_estimate_is_never_below_the_models_bound(name):
    model = Searcher(plan(GEMM, CUBE), "H100").model
    prediction = walk.estimate_kernel(staged(name), "H100", use_nvcc=False)
    assert prediction.seconds >= model.bound(VARIANTS[name]).seconds
    assert set(prediction.resources) == {"fma", "issue", "memory", "l2", "dram", "latency"}
    assert prediction.because.startswith(prediction.binding)


def test_walking_a_large_kernel_is_quick():
    """GEMM 4096^3 with a 4x8 register tile: sampling keeps the walk well under a second
    (walking all 129 steps x 32 unrolled iterations would take several)."""
    sizes = {"i": 4096, "j": 4096, "k": 4096}
    k = kernel("tiled+staged", tuple(WINNER_4096.items()), tuple(sizes.items()))
    started = time.perf_counter()
    c = walk.count(k, use_nvcc=False)
    assert time.perf_counter() - started < 3
    assert c.fma * threads(k) == 4096**3
    model = Searcher(plan(GEMM, sizes), "H100").model
    assert walk.estimate_kernel(k, use_nvcc=False).seconds >= model.bound(
        WINNER_4096).seconds


def test_registers_without_nvcc_are_the_register_locals_plus_bookkeeping():
    k = staged("staged-AB")
    assert walk.count(k, use_nvcc=False).registers == 16 + 16  # a 4x4 accumulator tile


@needs_nvcc
def test_registers_come_from_ptxas():
    k = staged("staged-A-preload")
    assert walk.count(k).registers == k.compile_cuda().registers
