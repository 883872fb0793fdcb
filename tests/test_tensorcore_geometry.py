"""The tensor-core strategy described in the geometry's quantities (issue 26): the description
is what the generated kernel does (threads, blocks per axis, accumulators per thread, shared
bytes), the benchmark verifies tensor-core winners at sizes fitted to their tiles, and
'tensorcore+staged' is refused for the tensor-core strategy alone, which stages its operands
itself. Every kernel runs on PoCL against numpy.einsum at sizes no multiple of the fragment."""

from __future__ import annotations

import math

import pytest
from treduda.strategies.tensorcore import TensorCore

import treduda
from treduda import strategies
from treduda.app.bench import fitted, run_case, select
from treduda.codegen import ir
from treduda.errors import StrategyError
from treduda.frontend import dtypes
from treduda.model.gpus import gpu
from treduda.model.model import Model, model_of
from treduda.polyhedral import geometry
from treduda.polyhedral.geometry import AXES, decided, group_extent, groups, on_axes
from treduda.polyhedral.lower import plan
from treduda.tuning.walk import shared_bytes

GEMM = "C[i,j] = A[i,k] * B[k,j]"
ONE_WARP = {"warps_m": 1, "warps_n": 1, "frags_m": 1, "frags_n": 1, "frags_k": 1}
# name: expression, sizes, layout, dtype, precision, parameters (None: the defaults)
CASES = {
    "gemm_partial": (GEMM, {"i": 40, "j": 50, "k": 70}, "C", "float16", "highest", None),
    "gemm_fp64": (GEMM, {"i": 19, "j": 13, "k": 11}, "F", "float64", "highest",
                  {"warps_m": 2, "warps_n": 1, "frags_m": 1, "frags_n": 2, "frags_k": 2}),
    "batched": ("C[b,i,j] = A[b,i,k]*B[b,k,j]", {"b": 3, "i": 20, "j": 18, "k": 24}, "C",
                "bfloat16", "highest", None),
    "tccg_03": ("C[a,b,c,d]=A[d,b,e,a]*B[e,c]", {"a": 6, "b": 5, "c": 24, "d": 7, "e": 20},
                "F", "float32", "tf32", {"warps_m": 2, "warps_n": 1, "frags_m": 2,
                                         "frags_n": 2, "stages": 2}),
    # 5 steps of 16 in 4 parts: parts of 2 steps, so 3 parts, not 4
    "split_3xtf32": (GEMM, {"i": 40, "j": 50, "k": 70}, "C", "float32", "3xtf32",
                     {**ONE_WARP, "frags_k": 2, "split": 4}),
    "gemv": ("C[i] = A[i,k]*B[k]", {"i": 40, "k": 30}, "C", "float16", "highest", None),
}


def _compile(case: str) -> treduda.Kernel:
    expression, sizes, layout, dtype, precision, params = CASES[case]
    return treduda.compile(expression, sizes, dtype=dtype, precision=precision, layout=layout,
                           strategy="tensorcore", params=params, cache=False)


@pytest.mark.parametrize("case", CASES)
def test_the_description_is_what_the_kernel_does(case):
    kernel = _compile(case)
    program = kernel.program
    described = decided(strategies.get("tensorcore").geometry(program, kernel.params))
    assert kernel.verify().ok
    assert described["block_x"] * described["block_y"] * described["block_z"] == math.prod(
        kernel.block)
    # blocks: the tiles along each axis, a block per value of the other (batch) output indices,
    # and each tile's parts of a split reduction
    order = described["order"]
    tiles = [-(-group_extent(group, program.sizes)
               // (described[f"block_{axis}"] * described[f"reg_{axis}"]))
             for axis, group in zip(AXES, groups(order), strict=False)]
    batch = math.prod(program.sizes[i] for i in program.output_indices
                      if i not in on_axes(order))
    summed = math.prod(program.sizes[i] for s in program.statements if s.summed
                       for i in s.summed)
    steps = -(-summed // described["step"])
    parts = -(-steps // -(-steps // described["split"]))
    assert math.prod(kernel.grid) == math.prod(tiles) * batch * parts
    if len(tiles) == 2:  # N's tiles on x (with the batch and the parts), M's on y
        assert kernel.grid[1] == tiles[1]
    # each thread's values: its share of the warp's accumulator fragments
    accumulators = next(local for local in kernel.built.kernel.locals
                        if local.fragment and local.fragment.use is ir.Use.ACCUMULATOR)
    m, n, _ = accumulators.fragment.shape
    pieces = 2 if program.precision == dtypes.TF32X3 else 1  # 3xTF32's hi and lo sums
    assert described["reg_x"] * described["reg_y"] == accumulators.size // pieces * m * n // 32
    assert described["shared"] == geometry.shared_bytes(program, described) == shared_bytes(
        kernel)
    assert described["stage"] == "A,B" and described["unroll"]
    assert described["double_buffer"] == (kernel.params["stages"] > 1)


def test_an_open_description_holds_every_completion():
    """What the search's bound needs of any description: each quantity's values of a partial
    choice include those of every complete one."""
    program = plan(GEMM, {"i": 40, "j": 50, "k": 70}, dtype="float16")
    strategy = strategies.get("tensorcore")
    partial = {"warps_m": 2, "stages": 2}
    described = strategy.geometry(program, partial)
    points = list(strategy.space(program).points(partial))
    assert points
    for point in points:
        for quantity, value in decided(strategy.geometry(program, point)).items():
            assert value in described[quantity], (quantity, point)


def test_tensorcore_then_staged_is_refused_and_tensorcore_alone_stages():
    """The tensor-core strategy stages its operands itself, in 2-D tiles of its linearised
    index groups zero-filled outside the tensors; 'staged' would lay them out as footprint
    boxes. The refusal says what to use instead, and that runs."""
    sizes = {"i": 33, "j": 17, "k": 41}
    for ask in (lambda: treduda.compile(GEMM, sizes, dtype="float16", cache=False,
                                        strategy="tensorcore+staged"),
                lambda: treduda.search(GEMM, sizes, dtype="float16",
                                       strategy="tensorcore+staged")):
        with pytest.raises(StrategyError, match="'tensorcore' stages A,B in shared memory "
                           r"itself.*use 'tensorcore' alone \(its async_copy"):
            ask()
    for stages in (2, 1):
        kernel = treduda.compile(GEMM, sizes, dtype="float16", strategy="tensorcore",
                                 params={**ONE_WARP, "frags_k": 2, "stages": stages},
                                 cache=False)
        assert kernel.verify().ok


def test_fitted_sizes_take_the_tensor_core_tiles():
    """Half a tile left empty is a whole fragment outside the tensors, which the tensor-core
    strategy refuses: the sizes grow to a tile less one instead, and the kernel of exactly
    the given parameters verifies there."""
    params = {"warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 2, "frags_k": 4,
              "stages": 1, "split": 1, "mapping": "wmma", "shared_layout": "pad",
              "async_copy": False, "free_layout": "group"}  # 64 x 64 tiles, steps of 64
    sizes = fitted(GEMM, {"i": 39, "j": 40, "k": 40}, "tensorcore", params, "float16")
    assert sizes == {"i": 63, "j": 63, "k": 63}
    kernel = treduda.compile(GEMM, sizes, dtype="float16", strategy="tensorcore",
                             params=params, cache=False)
    assert dict(kernel.params) == params and kernel.verify().ok


def test_the_benchmark_verifies_a_tensor_core_winner_with_its_own_parameters():
    case = next(iter(select("gemm_fp16", ["gemm_1000"])))
    outcome = run_case(case, gpu("A100"), max_nodes=50)  # the H100 picks wgmma
    assert outcome.strategy == "tensorcore" and outcome.verified
    assert outcome.verified_params == "searched" and outcome.verify_note is None
    assert any(extent % 16 for extent in outcome.scaled_sizes.values())


def test_the_tensor_core_model_reads_the_description(monkeypatch):
    """The model reads a candidate through the description the tests above check against the
    kernels: a description holding more shared memory leaves fewer warps resident. The SIMT
    model refuses the tensor-core strategy rather than reading it as threads of FMAs."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype="float16")
    params = strategies.get("tensorcore").defaults(program)
    before = model_of(program, gpu("H100"), "tensorcore").estimate(params)
    describe = TensorCore.describe
    monkeypatch.setattr(TensorCore, "describe", lambda self, program, choices: {
        **describe(self, program, choices), "shared": (gpu("H100").shared_per_sm,)})
    after = model_of(program, gpu("H100"), "tensorcore").estimate(params)
    assert after.warps < before.warps and after.seconds > before.seconds
    with pytest.raises(StrategyError, match="model of its own"):
        Model(program, gpu("H100"), "tensorcore")
