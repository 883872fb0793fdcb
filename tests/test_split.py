"""A reduction split over blocks (split-K): each block sums a part of the steps of the first
summed index and adds it into the output atomically; the output starts at zero for ``=``."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bound_paths_hold, needs_nvcc

import treduda
from treduda.app.bench import fitted
from treduda.errors import StrategyError
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import compile_cuda
from treduda.tuning.search import Searcher

SHORT_AND_DEEP = "C[a,b] = A[c,a,d]*B[d,c,b]"  # tccg_14's shape: a small output, a long sum
SIZES = {"a": 37, "b": 21, "c": 45, "d": 19}  # not multiples of the tiles or the step
TILES = {"order": "a,b", "block_x": 16, "reg_x": 2, "block_y": 4, "reg_y": 2, "step": 8}


@pytest.mark.parametrize("strategy", ["tiled", "tiled+staged"])
@pytest.mark.parametrize("split", [2, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_split_kernels_match_numpy(strategy, split, dtype):
    kernel = treduda.compile(SHORT_AND_DEEP, SIZES, layout="F", dtype=dtype, strategy=strategy,
                             params={**TILES, "split": split})
    # 45 values of c are 6 steps: 2 parts of 3 steps, or 3 parts of 2 where 4 were asked for
    assert kernel.grid[0] == 2 * {2: 2, 4: 3}[split]
    assert kernel.verify().ok


def test_a_split_is_a_power_of_two():
    with pytest.raises(StrategyError, match="split=6 is not allowed"):
        treduda.compile(SHORT_AND_DEEP, SIZES, layout="F", strategy="tiled",
                        params={**TILES, "split": 6})


@pytest.mark.parametrize("op", ["=", "+=", "-="])
def test_split_kernels_add_into_the_output_as_the_operator_says(op):
    expr = f"C[i,j] {op} alpha * A[i,k] * B[k,j] * D[i]"
    kernel = treduda.compile(expr, {"i": 9, "j": 30, "k": 70}, strategy="tiled+staged",
                             params={"order": "j,i", "block_x": 16, "reg_x": 2, "block_y": 4,
                                     "reg_y": 2, "step": 8, "split": 4})
    rng = np.random.default_rng(1)
    A, B, D = (rng.random(shape, np.float32) for shape in ((9, 70), (70, 30), (9,)))
    C = rng.random((9, 30), np.float32)
    got = kernel.run(A=A, B=B, D=D, C=C.copy(), alpha=0.5)
    product = 0.5 * np.einsum("ik,kj,i->ij", A, B, D)
    expected = {"=": product, "+=": C + product, "-=": C - product}[op]
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    assert ("must be zero before the launch" in kernel.cuda_source) == (op == "=")


@pytest.mark.slow
def test_the_emulator_finds_no_race_in_a_split_staged_kernel():
    kernel = treduda.compile(SHORT_AND_DEEP, SIZES, layout="F", strategy="tiled+staged",
                             params={**TILES, "split": 4, "double_buffer": True})
    assert kernel.hazards() == []
    assert kernel.verify(backend="emulator").ok


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_split_cuda_adds_atomically_and_zeroes_the_output_first(dtype):
    kernel = treduda.compile(SHORT_AND_DEEP, SIZES, layout="F", dtype=dtype,
                             strategy="tiled+staged", params={**TILES, "split": 4})
    source = kernel.cuda_source
    assert "atomicAdd(&C[" in source or "atomicAdd((double *)&C[" in source
    assert f"cudaMemsetAsync(C, 0, {37 * 21 * np.dtype(dtype).itemsize}, stream)" in source
    assert compile_cuda(source)  # ptxas accepts every atomic (double ones need sm_60 or newer)


def test_only_a_linear_combination_of_one_sum_is_split():
    sizes = {"i": 8, "j": 8, "k": 64, "l": 64}
    splittable = ("C[i,j] = A[i,k]*B[k,j] + E[i,k]*F[k,j]*G[i]",  # one sum over k
                  "C[i,j] -= 2 * alpha * A[i,k]*B[k,j]*G[i]")
    unsplittable = ("C[i,j] = A[i,k]*B[k,j] + D[i,j]",  # D would be added once per part
                    "C[i,j] = A[i,k]*B[k,j] + E[i,l]*F[l,j]",  # two sums
                    "C[i,j] = A[i,k]*B[k,j] + 1",
                    "C[i,j] = C[i,j] * 2 + A[i,k]*B[k,j]")  # reads the output
    for expr in splittable + unsplittable:
        used = {i: n for i, n in sizes.items() if i in expr.replace("alpha", "")}
        space = treduda.strategies.get("tiled").space(plan(expr, used))
        assert (space.parameter("split").values != (1,)) == (expr in splittable), expr
    symbolic = treduda.strategies.get("tiled").space(plan("C[i,j] = A[i,k]*B[k,j]", None,
                                                          symbolic=True))
    assert symbolic.parameter("split").values == (1,)


def test_the_bound_holds_over_a_space_with_splits():
    searcher = Searcher(plan(SHORT_AND_DEEP, {"a": 32, "b": 32, "c": 96, "d": 64}, "F"),
                        "H100", values={"order": ("a,b",), "block_x": (16,), "block_y": (4, 8),
                                        "reg_x": (2,), "reg_y": (2, 4), "step": (8, 16),
                                        "stage": ("A,B", ""), "pad": (1,),
                                        "preload": (False,), "double_buffer": (False,)},
                        strategy="tiled+staged")
    assert bound_paths_hold(searcher) > 8
    assert {p["split"] for p in searcher.space.points()} == {1, 2, 4, 8}  # 12 steps at most


def test_the_search_splits_tccg_14_and_the_winner_verifies():
    # 384 x 376 outputs fill 36 blocks of 64 x 64: too few for 132 SMs, so the predicted best
    # splits the 147456-long sum (predicted 1.4 ms; 3.9 ms without a split).
    expr, sizes = "C[a,b]=A[c,a,d]*B[d,c,b]", {"a": 384, "b": 376, "c": 384, "d": 384}
    # A node limit, not the CPU-time budget: under load the budget visits fewer nodes and
    # may end on a winner whose tiles do not fit the small sizes verified below.
    result = treduda.search(expr, sizes, layout="F", max_nodes=3000, budget=None)
    assert result.best.params["split"] > 1
    unsplit = treduda.search(expr, sizes, layout="F", max_nodes=3000, budget=None,
                             values={"split": (1,)})
    assert result.best.prediction.seconds < 0.5 * unsplit.best.prediction.seconds
    # verified at small sizes grown to the winner's tiles, as the benchmark verifies its rows
    small = fitted(expr, {"a": 40, "b": 36, "c": 384, "d": 30}, result.best.strategy,
                   result.best.params, layout="F")
    kernel = treduda.compile(expr, small, layout="F", strategy=result.best.strategy,
                             params=result.best.params)
    assert kernel.verify().ok


@pytest.mark.parametrize("double_buffer", [False, True])
def test_preloaded_split_kernels_reach_every_barrier_in_every_thread(double_buffer):
    # 35 summed values (c_d merged) in steps of 8 are 5 steps, in parts of 2, 2 and 1; threads
    # whose elements of the short step lie outside B load nothing for it. isl had scanned
    # their step loop in pieces of its own, with barriers of their own (divergent barriers,
    # wrong values on PoCL); the step loops are atomic now.
    expr, sizes = "C[a,b,i,j]=A[a,b,c,d]*B[c,d,i,j]", {"a": 9, "b": 6, "i": 4, "j": 3,
                                                       "c": 7, "d": 5}
    params = {"order": "a_b,i_j", "block_x": 16, "block_y": 1, "reg_y": 2, "step": 8,
              "stage": "B", "double_buffer": double_buffer, "pad": 0, "split": 4,
              "preload": True}
    kernel = treduda.compile(expr, sizes, layout="F", dtype="complex128",
                             strategy="tiled+staged", params=params)
    assert kernel.hazards() == []
    assert kernel.verify().ok
    # The same with a GEMM whose second part is one short step of a single value
    kernel = treduda.compile("C[m,n]=A[m,k]*B[n,k]", {"m": 20, "n": 17, "k": 33},
                             strategy="tiled+staged",
                             params={"order": "n,m", "block_x": 32, "block_y": 4, "reg_y": 8,
                                     "step": 16, "split": 2, "stage": "A", "preload": True,
                                     "double_buffer": double_buffer, "pad": 0})
    assert kernel.hazards() == []
    assert kernel.verify().ok
