"""Every output index on the GPU: index merging, output indices beyond three on the grid, the
grid's limits, 64-bit indexing, and the searched TCCG kernels filling an H100."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import needs_nvcc
from treduda.strategies.tensorcore import SPLITS
from treduda.strategies.tiling import PARTS

import treduda
from treduda.app.bench import fitted
from treduda.codegen import ir
from treduda.errors import StrategyError
from treduda.frontend.contraction import analyse
from treduda.frontend.merge import merge
from treduda.model.gpus import Gpu, gpu
from treduda.model.prediction import LAUNCH_SECONDS
from treduda.polyhedral.ast_build import GRID_YZ_LIMIT, INT32_LIMIT
from treduda.polyhedral.geometry import GROUP, decided, groups, tile_extents
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import compile_cuda
from treduda.suites import SUITES, load, scaled
from treduda.tuning.search import Searcher


@pytest.mark.parametrize(("expression", "merged", "described"), [
    ("C[a,b,c]=A[a,b,k]*B[k,c]", "C[a_b,c] = A[a_b,k]*B[k,c]", "a,b -> a_b"),
    ("C[a,b,c,d,e,f]=A[d,e,g,a]*B[g,f,b,c]", "C[a,b_c,d_e,f] = A[d_e,g,a]*B[g,f,b_c]",
     "b,c -> b_c; d,e -> d_e"),
    ("C[a,b,c]=A[a,b,c,k,l]*B[l,k]", "C[a_b_c] = A[a_b_c,k,l]*B[l,k]", "a,b,c -> a_b_c"),
    ("C[a,b,a_b]=A[a,b,a_b]", "C[a_b_a_b] = A[a_b_a_b]", "a,b,a_b -> a_b_a_b"),
    ("C[a,b,x]=A[a,b]*B[x]+D[a,b,x]", "C[a_b,x] = A[a_b]*B[x] + D[a_b,x]", "a,b -> a_b"),
    # transposed somewhere, split by another index, or a diagonal: nothing merges
    ("C[i,j]=A[i,k]*B[k,j]", "C[i,j]=A[i,k]*B[k,j]", ""),
    ("C[a,b]=A[a,b]*B[b,a]", "C[a,b]=A[a,b]*B[b,a]", ""),
    ("C[a,b]=A[a,k,b]*B[k]", "C[a,b]=A[a,k,b]*B[k]", ""),
    ("C[a]=A[a,i,i]", "C[a]=A[a,i,i]", ""),
])
def test_merge_joins_indices_that_always_travel_together(expression, merged, described):
    merging = merge(analyse(expression))
    assert repr(merging.merged.tree) == repr(analyse(merged).tree)
    assert merging.describe() == described


def test_merged_sizes_are_products_and_taken_names_are_avoided():
    merging = merge(analyse("C[a,b,a_b]=A[a,b,k]*B[k,a_b]"))
    assert merging.merges == {"a_b_2": ("a", "b")}
    assert merging.sizes({"a": 3, "b": 5, "a_b": 7, "k": 2}) == {"a_b_2": 15, "a_b": 7, "k": 2}


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize(("strategy", "params"), [
    ("thread_per_element", {}),
    ("tiled", {"reg_x": 2, "reg_y": 2, "assign_y": "adjacent", "step": 4}),
    ("tiled+staged", {"stage": "A,B", "double_buffer": True, "preload": True}),
])
def test_merged_kernels_match_einsum(layout, symbolic, strategy, params):
    expression = "C[a,b,c,d] = A[a,b,k,l]*B[k,l,c,d]"
    sizes = {"a": 3, "b": 7, "c": 5, "d": 6, "k": 3, "l": 5}
    kernel = treduda.compile(expression, None if symbolic else sizes, layout=layout,
                             symbolic=symbolic, strategy=strategy, params=params)
    assert kernel.merged == {"a_b": ("a", "b"), "c_d": ("c", "d"), "k_l": ("k", "l")}
    assert "//   merged:   a,b -> a_b; c,d -> c_d; k,l -> k_l" in kernel.cuda_source
    assert "merged a,b -> a_b" in repr(kernel)
    assert kernel.verify(sizes).ok
    if strategy == "tiled+staged":
        assert kernel.hazards(sizes) == []


def _output_stores(node: ir.Stmt, output: str, loops: int = 0) -> list[int]:
    """For each element of ``output`` a thread stores, how many loops enclose it (of an
    ``if`` with an ``else``, the branch with more stores: full blocks run a scan of their own,
    issue 38)."""
    if isinstance(node, ir.Assign):
        return [loops] if getattr(node.target, "array", None) == output else []
    if isinstance(node, ir.VectorStore):
        return [loops] * len(node.values) if node.first.array == output else []
    if isinstance(node, ir.Block):
        return [n for child in node.body for n in _output_stores(child, output, loops)]
    if isinstance(node, ir.For):
        return _output_stores(node.body, output, loops + 1)
    if isinstance(node, ir.If):  # a thread runs one branch: the one with more stores
        branches = [node.then] + ([node.otherwise] if node.otherwise is not None else [])
        return max((_output_stores(branch, output, loops) for branch in branches), key=len)
    return []


def _register_tile(kernel: treduda.Kernel) -> int:
    return math.prod(kernel.params.get(f"reg_{a}", 1) for a in "xyz")


@pytest.mark.parametrize("layout", ["C", "F"])
def test_rank_eight_output_has_every_index_on_the_gpu(layout):
    expression = "C[a,b,c,d,e,f,g,h] = A[g,e,c,a,k]*B[h,k,f,d,b]"
    sizes = {"a": 3, "b": 2, "c": 3, "d": 2, "e": 3, "f": 2, "g": 3, "h": 2, "k": 3}
    for strategy in ("thread_per_element", "tiled", "tiled+staged"):
        kernel = treduda.compile(expression, sizes, layout=layout, strategy=strategy)
        assert kernel.verify().ok
        stores = _output_stores(kernel.built.kernel.body, "C")
        assert stores and max(stores) == 0  # no output point is a loop iteration of a thread
        assert len(stores) <= _register_tile(kernel)
        points = math.prod(sizes.values()) // sizes["k"]
        threads = math.prod(kernel.grid) * math.prod(kernel.block)
        assert threads * _register_tile(kernel) >= points  # every output point has a thread


def test_y_beyond_the_grid_limit_is_folded_into_x():
    sizes = {"i": GRID_YZ_LIMIT + 2, "j": 3, "k": 2}
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", sizes, strategy="thread_per_element",
                             params={"order": "j,i", "block_x": 4, "block_y": 1})
    assert kernel.grid == (GRID_YZ_LIMIT + 2, 1, 1)
    assert kernel.verify().ok


def test_search_takes_tiles_a_grid_can_hold():
    """A 10^12-row GEMM fits a grid only with tiles of 466 rows or more (or with i folded
    into x beside a short axis): the search's rule on blocks along x finds such tiles instead
    of choosing small ones that no launch allows."""
    expression = treduda.contract_expression("ij,jk->ik", (10**12, 2), (2, 3))
    kernel = expression.kernel
    assert kernel.grid[0] <= INT32_LIMIT
    with pytest.raises(StrategyError, match="grid holds the tiles"):
        treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 10**12, "j": 3, "k": 2},
                        strategy="tiled", params={"order": "i,j", "block_x": 32, "reg_x": 4})


def test_symbolic_kernel_refuses_a_grid_no_gpu_launches():
    kernel = treduda.compile("C[i] = A[i]", symbolic=True, strategy="thread_per_element",
                             params={"block_x": 1})
    assert kernel.grid_for({"i": 2**31 - 1}) == (2**31 - 1, 1, 1)
    with pytest.raises(StrategyError, match="blocks along x"):
        kernel.grid_for({"i": 2**31})


@needs_nvcc
def test_tensor_beyond_two_to_the_31_elements_gets_64_bit_indices():
    sizes = {"i": 50_000, "j": 50_000, "k": 8}  # C has 2.5e9 elements
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", sizes, strategy="tiled")
    small = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 500, "j": 500, "k": 8},
                            strategy="tiled")
    assert kernel.built.kernel.index_bits == 64 and small.built.kernel.index_bits == 32
    assert "long long" in kernel.cuda_source and "long long" not in small.cuda_source
    assert "((long long)blockIdx.x)" in kernel.cuda_source
    compile_cuda(kernel.cuda_source)


TCCG = load("tccg_fp32")
# CI checks a row of three, four and six output indices and the two-index outputs (whose
# searches once kept most SMs idle); each row is a full 5000-node search and a ptxas check, so
# `pytest -m matrix` checks every row of the four suites.
CI_ROWS = {"tccg_01", "tccg_05", "tccg_37", "tccg_13", "tccg_14"}
SUITE_ROWS = [pytest.param(suite, row, id=f"{suite}-{row.id}",
                           marks=() if suite == "tccg_fp32" and row.id in CI_ROWS
                           else pytest.mark.matrix)
              for suite in SUITES for row in load(suite)]


@pytest.mark.parametrize(("suite", "row"), SUITE_ROWS)
def test_searched_suite_kernel_fills_an_h100(suite, row):
    """From the grid and the kernel IR: at least two blocks per SM wherever the output has the
    points for it, and no thread computes more output points than its register tile; a
    warpgroup kernel by its own rule (:func:`_fills_with_warpgroups`)."""
    sms = gpu("H100").sm_count
    kernel = treduda.compile(row.expression, row.sizes, layout=row.layout, gpu="H100",
                             dtype=SUITES[suite].dtype, precision=SUITES[suite].precision)
    if kernel.strategy == "warpgroup":
        _fills_with_warpgroups(kernel, gpu("H100"))
        return
    points = math.prod(row.sizes[i] for i in analyse(row.expression).output_indices)
    if points >= 2 * sms * math.prod(kernel.block):
        assert math.prod(kernel.grid) >= 2 * sms
    stores = _output_stores(kernel.built.kernel.body, kernel.contraction.output)
    assert stores and max(stores) == 0 and len(stores) <= _register_tile(kernel)


# wgmma's accumulator tile is 64 rows by N (PTX ISA, "wgmma.mma_async": .m64nNk16), N 8 to 256
WGMMA_M = 64


def _fills_with_warpgroups(kernel: treduda.Kernel, h100: Gpu) -> None:
    """A warpgroup is four warps, one on each of an SM's four sub-partitions and their tensor
    cores, so one block of one or more warpgroups keeps its SM's tensor cores busy, and an
    H100 is as full as its blocks fill waves of one block per SM (more resident blocks
    only hide latency): over its waves at least half of the SMs busy, wherever the output's
    64 x 64 tiles, or their parts in a split of the reduction (8 at most), can be that many
    blocks, and the row is bigger than a launch on the whole GPU (its products on every
    tensor core, its operands and output through DRAM: GEMM 1000^3 in fp16, 2 us, takes 64
    blocks of 256 x 128 split in 2, a near-tie of the model's at 9.2-9.4 us with 128 of
    64 x 128). The output is stored from the accumulators after the reduction: a thread
    stores in at most one loop (the C tile's rows), and no loop around a store holds a
    wgmma."""
    blocks, program, sms = math.prod(kernel.grid), kernel.program, h100.sm_count
    points = math.prod(program.sizes[i] for i in program.output_indices)
    parts = max(SPLITS)  # a suite row is a product alone: its sum may be split
    tensor = h100.tensor_tf32_flops if program.precision == "tf32" else h100.tensor_fp16_flops
    values = sum(math.prod(program.sizes[i] for i in indices)
                 for indices in (*program.contraction.inputs.values(), program.output_indices))
    least = max(2 * math.prod(program.sizes.values()) / tensor,
                values * np.dtype(kernel.dtype).itemsize / h100.dram_bandwidth)
    if least > LAUNCH_SECONDS and points // (WGMMA_M * WGMMA_M) * parts >= sms / 2:
        waves = -(-blocks // sms)
        assert blocks >= waves * sms / 2, (blocks, kernel.params)
    body = kernel.built.kernel.body
    # (a split into a workspace stores its parts there: the second kernel writes the output)
    written = kernel.contraction.output if kernel.signature.parts_sum is None else PARTS
    stores = _output_stores(body, written)
    assert stores and max(stores) <= 1
    assert not any(isinstance(s, ir.WarpgroupMultiply) for loop in
                   _loops_around_stores(body, written) for s in ir.nested(loop.body))


def _loops_around_stores(node: ir.Stmt, output: str,
                         loops: tuple[ir.For, ...] = ()) -> set[ir.For]:
    """The loops that enclose a store of ``output``."""
    if isinstance(node, ir.Assign | ir.VectorStore):
        target = node.target if isinstance(node, ir.Assign) else node.first
        return set(loops) if getattr(target, "array", None) == output else set()
    if isinstance(node, ir.For):
        return _loops_around_stores(node.body, output, (*loops, node))
    children = (node.body if isinstance(node, ir.Block) else
                (node.then, node.otherwise) if isinstance(node, ir.If) else ())
    return set().union(*(_loops_around_stores(c, output, loops) for c in children
                         if c is not None))


def test_merged_kernel_runs_on_arrays_of_the_expression_shape():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 3, 5)), rng.standard_normal((5, 6))
    result = treduda.contract("C[a,b,c] = A[a,b,k]*B[k,c]", A=a, B=b, strategy="tiled")
    np.testing.assert_allclose(result, np.einsum("abk,kc->abc", a, b), rtol=1e-4)


# Groups of output indices on one axis (order "d*c,b": x runs over d + S_d * c), GETT-style.
SIX = ("C[a,b,c,d,e,f] = A[d,f,g,b]*B[g,e,a,c]",  # no two indices merge
       {"a": 5, "b": 3, "c": 4, "d": 6, "e": 3, "f": 2, "g": 5})


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("strategy", "params"), [
    ("tiled", {"block_x": 16, "reg_x": 2, "block_y": 4, "reg_y": 2, "assign_y": "adjacent",
               "step": 4}),
    ("tiled+staged", {"block_x": 8, "reg_x": 2, "assign_x": "adjacent", "block_y": 2,
                      "reg_y": 2, "step": 4, "stage": "A,B", "preload": True,
                      "double_buffer": True}),
])
def test_grouped_kernels_match_einsum(layout, strategy, params):
    """Groups of two and three indices on x and y; tiles that wrap from one index of a group
    to the next (16 x 2 values over 5 x 6): the staged tiles still hold every value."""
    expression, sizes = SIX
    # fastest first: f, e, d, c, b, a in C; a, b, c, d, e, f in F
    order = "f*e*d,c*b,a" if layout == "C" else "a*b*c,d*e,f"
    kernel = treduda.compile(expression, sizes, layout=layout, strategy=strategy,
                             params={**params, "order": order})
    assert kernel.params["order"] == order and f"order={order}" in kernel.cuda_source
    assert kernel.verify().ok
    stores = _output_stores(kernel.built.kernel.body, "C")
    assert stores and max(stores) == 0 and len(stores) <= _register_tile(kernel)
    if strategy == "tiled+staged":
        assert kernel.hazards() == []


def test_groups_are_runs_in_memory_order_with_fixed_sizes_only():
    expression, sizes = SIX
    fixed = treduda.strategies.get("tiled").space(plan(expression, sizes))
    orders = fixed.parameter("order").values
    assert "f*e,d,c" in orders and "e*f,d,c" not in orders and "f*d,e,c" not in orders
    assert not any(len(group) > 3 for o in orders for group in groups(o))
    assert not any(len(g) > 1 for o in orders for g in groups(o)[2:])  # z holds one index
    symbolic = treduda.strategies.get("tiled").space(plan(expression, symbolic=True))
    assert not any(GROUP in o for o in symbolic.parameter("order").values)
    with pytest.raises(StrategyError, match="order='f\\*e,d,c' is not allowed"):
        treduda.compile(expression, symbolic=True, strategy="tiled", params={"order": "f*e,d,c"})


# 4 x 4 threads in column-major order is the slowest kernel of the default run to build (isl's
# scan: 16 of the test's 23 CPU s alone, ten times another block's), so it runs with
# `pytest -m matrix`: the 4 x 4 block keeps its row-major case, column-major its other blocks.
@pytest.mark.parametrize(("layout", "block_x", "block_y"), [
    pytest.param(layout, x, y, id=f"{x}-{y}-{layout}",
                 marks=pytest.mark.matrix if (layout, x, y) == ("F", 4, 4) else ())
    for x, y in [(16, 2), (8, 2), (64, 1), (4, 4)] for layout in "CF"])
def test_geometry_knows_the_staged_box_of_a_group(layout, block_x, block_y):
    """The shared memory the strategy's rules budget (geometry.touched) is at least the box
    isl's footprint of a grouped tile spans."""
    expression, sizes = SIX
    order = "f*e*d,c*b,a" if layout == "C" else "a*b*c,d*e,f"
    params = {"order": order, "step": 4, "stage": "A,B", "pad": 0, "block_x": block_x,
              "reg_x": 1, "block_y": block_y, "reg_y": 1}
    strategy = treduda.strategies.get("tiled+staged")
    kernel = treduda.compile(expression, sizes, layout=layout, strategy=strategy.name,
                             params=params)
    program = plan(expression, sizes, layout)
    extents = tile_extents(program, decided(strategy.geometry(program, kernel.params)))
    shared = [local for local in kernel.built.kernel.locals if local.space is ir.Space.SHARED]
    assert len(shared) == 2
    for local in shared:
        modelled = [extents[i] for i in program.contraction.inputs[local.name[0]]]
        assert all(m >= s for m, s in zip(modelled, local.shape, strict=True)), (
            local.name, modelled, local.shape)
    assert kernel.verify().ok


def test_model_prefers_a_group_on_a_six_index_tccg_row():
    """tccg_35 (six output indices of 20-24, none merged): a complete search over a reduced
    space puts a group on x, and predicts it faster than the best kernel without groups, which
    wastes a third of a 32-wide tile along x (24 values). The winner verifies at scaled sizes."""
    row = next(r for r in TCCG if r.id == "tccg_35")
    program = plan(row.expression, row.sizes, row.layout)
    values = {"block_x": (16, 32, 64), "block_y": (1, 4), "block_z": (1, 4), "reg_x": (1, 2, 4),
              "reg_y": (8,), "reg_z": (2,), "step": (32,), "stage": ("A,B", "A", "B")}
    grouped = Searcher(program, "H100", values=values).branch_and_bound()
    assert grouped.stats.complete and GROUP in grouped.best.params["order"]
    orders = Searcher(program, "H100").space.parameter("order").values
    single = Searcher(program, "H100", values={
        **values, "order": tuple(o for o in orders if GROUP not in o)}).branch_and_bound()
    assert single.stats.complete
    assert grouped.best.prediction.seconds < single.best.prediction.seconds
    sizes = fitted(row.expression, scaled(row.sizes), grouped.best.strategy, grouped.best.params)
    kernel = treduda.compile(row.expression, sizes, layout=row.layout,
                             strategy=grouped.best.strategy, params=grouped.best.params)
    assert kernel.verify().ok
