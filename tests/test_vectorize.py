"""Vector accesses (treduda.codegen.vectorize): a thread's neighbouring elements of a tensor move
in one aligned access where the kernel IR proves the alignment, the kernels still match
numpy.einsum on PoCL (which runs the same IR as vload/vstore) with partial tiles, and nothing
that could read or write out of turn is merged."""

from __future__ import annotations

import numpy as np
import pytest

import treduda
from treduda.codegen import ir
from treduda.codegen.vectorize import steps_merged, vectorize
from treduda.run.emulator import emulate
from treduda.tuning import walk

GEMM = "C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]"
# x on the output's fastest index, four adjacent values per thread: neighbours in memory.
ADJACENT = {"block_x": 8, "reg_x": 4, "assign_x": "adjacent", "block_y": 4, "reg_y": 2,
            "step": 8}


def vector_accesses(kernel: treduda.Kernel) -> tuple[set[int], set[int]]:
    """The widths of the kernel's vector loads and of its vector stores."""
    nodes = list(ir.nested(kernel.built.kernel.body))
    return ({s.width for s in nodes if isinstance(s, ir.VectorLoad)},
            {len(s.values) for s in nodes if isinstance(s, ir.VectorStore)})


def gemm(sizes: dict[str, int], layout: str = "C", dtype: str = "float32",
         strategy: str = "tiled", **params) -> treduda.Kernel:
    fastest = "j,i" if layout == "C" else "i,j"
    return treduda.compile(GEMM, sizes, layout=layout, dtype=dtype, strategy=strategy,
                           params={"order": fastest, **ADJACENT, **params})


@pytest.mark.parametrize(("layout", "dtype", "width"), [
    ("C", "float32", 4), ("F", "float32", 4), ("C", "float64", 2), ("F", "float64", 2)])
@pytest.mark.parametrize(("strategy", "params"), [
    ("tiled", {}),
    ("tiled+staged", {"preload": True, "double_buffer": True, "pad": 0}),
])
def test_partial_tiles_of_aligned_rows_match_einsum(layout, dtype, width, strategy, params):
    """The fastest index spans 40 values (tiles of 32: one partial), the others 37 and 19;
    the input whose fastest index is on x is read from global memory, the other staged."""
    fastest, along_x, other = ("j", "B", "A") if layout == "C" else ("i", "A", "B")
    sizes = {"i": 37, "j": 37, "k": 19, fastest: 40}
    staged = {"stage": other} if strategy == "tiled+staged" else {}
    kernel = gemm(sizes, layout, dtype, strategy, **params, **staged)
    assert vector_accesses(kernel) == ({width}, {width})
    vector = {"float32": "float", "float64": "double"}[dtype] + str(width)
    assert f"*(const {vector} *)&{along_x}[" in kernel.cuda_source
    assert f"vload{width}(0, &{along_x}[" in kernel.opencl_source
    assert f"vstore{width}(" in kernel.opencl_source
    assert kernel.verify().ok
    assert kernel.hazards() == []


def test_a_row_of_a_multiple_of_two_moves_in_pairs():
    """Rows of 50 floats start 8 bytes apart: pairs are aligned, quadruples are not."""
    kernel = gemm({"i": 9, "j": 50, "k": 7})
    assert vector_accesses(kernel) == ({2}, {2})
    assert kernel.verify().ok


def test_odd_rows_stay_scalar():
    kernel = gemm({"i": 9, "j": 51, "k": 7})
    assert vector_accesses(kernel) == (set(), set())
    assert kernel.verify().ok


def test_rows_whose_length_is_a_kernel_argument_stay_scalar():
    kernel = treduda.compile(GEMM, symbolic=True, strategy="tiled",
                             params={"order": "j,i", **ADJACENT})
    assert vector_accesses(kernel) == (set(), set())
    assert kernel.verify({"i": 9, "j": 52, "k": 7}).ok


def test_the_walk_counts_a_vector_load_as_one_load_and_its_stores_as_points():
    """Unstaged, one row per thread: per summed value one load of A and one vector load of
    B's four neighbours (five scalar loads without vectors), then four loads of C for beta;
    four output points stored."""
    kernel = gemm({"i": 32, "j": 64, "k": 16}, reg_y=1)
    counts = walk.count(kernel, use_nvcc=False)
    assert (counts.global_loads, counts.global_stores) == (2 * 16 + 4, 4)


def _run(*statements: ir.Stmt) -> ir.Stmt:
    """The statements, as a float32 kernel's body writing C and reading A, vectorised."""
    params = (ir.Param("C", ir.ParamKind.OUTPUT), ir.Param("A", ir.ParamKind.INPUT))
    return vectorize(ir.KernelIR("k", "float32", 32, params, (), ir.Block(statements))).body


def _element(array: str, lane: int, shift: int = 0) -> ir.Load:
    """``array[4 * threadIdx.x + shift + lane]``."""
    t = ir.Index(ir.Builtin.THREAD_ID, 0)
    offset = ir.Binary(ir.Op.ADD, ir.Binary(ir.Op.MUL, ir.Int(4), t), ir.Int(shift + lane))
    return ir.Load(array, offset)


def test_four_neighbours_load_and_store_as_one_access():
    body = _run(*(ir.Assign(_element("C", n), "=", _element("A", n)) for n in range(4)))
    load, store = body.body
    assert load == ir.VectorLoad("td_v0", _element("A", 0), 4)
    assert store == ir.VectorStore(_element("C", 0), tuple(ir.Lane("td_v0", n)
                                                           for n in range(4)))


def test_only_aligned_windows_are_merged():
    """Elements 4t+1 .. 4t+4: no aligned four among them, one aligned pair (4t+2, 4t+3)."""
    body = _run(*(ir.Assign(_element("C", n, 1), "=", _element("A", n, 1)) for n in range(4)))
    assert body.body[0] == ir.VectorLoad("td_v0", _element("A", 1, shift=1), 2)
    assert not any(isinstance(s, ir.VectorLoad) for s in body.body[1:])
    stores = [s for s in body.body if isinstance(s, ir.VectorStore)]
    assert [s.first for s in stores] == [_element("C", 1, shift=1)]  # 4t+2, 4t+3 again


def test_a_load_under_a_condition_is_not_hoisted():
    """Only the true branch of a Select reads A: loading the window first could read past it."""
    t = ir.Index(ir.Builtin.THREAD_ID, 0)
    guarded = [ir.Assign(_element("C", n), "=", ir.Select(ir.Binary(ir.Op.LT, t, ir.Int(3)),
                                                         _element("A", n), ir.Float(0.0)))
               for n in range(4)]
    body = _run(*guarded)
    assert not any(isinstance(s, ir.VectorLoad) for s in ir.nested(body))
    assert isinstance(body.body[0], ir.VectorStore)


def test_a_store_that_reads_another_element_of_its_window_is_not_merged():
    """C[4t+n] = C[4t+3-n] reverses the window: as scalars, later lanes read what earlier
    ones wrote, which one vector store would not."""
    swapped = [ir.Assign(_element("C", n), "=", _element("C", 3 - n)) for n in range(4)]
    body = _run(*swapped)
    assert body.body == tuple(swapped)


@pytest.mark.parametrize(("expression", "sizes", "tile"), [
    ("C[i,j] = A[i,k]*B[k,j]", {"i": 67, "j": 75, "k": 21}, "A_sh"),
    # B[j,k] staged as stored: a thread's column of it runs along k
    ("C[i,j] = alpha*A[k,i]*B[j,k] + beta*C[i,j]", {"i": 71, "j": 70, "k": 13}, "B_sh"),
])
def test_loads_merged_along_the_unrolled_step_compute_what_einsum_does(expression, sizes, tile):
    """steps_merged (what the counters count) reads the tile along k in vectors, four steps
    of the unrolled step loop at once, where the printed kernel reads it value by value; on
    partial tiles the emulator computes with it what it computes with the printed kernel's
    IR, numpy.einsum's result."""
    params = {"order": "j,i", "block_x": 8, "reg_x": 8, "assign_x": "vector", "block_y": 4,
              "reg_y": 4, "assign_y": "cyclic", "step": 8, "unroll": True, "stage": "A,B",
              "pad": 0}
    kernel = treduda.compile(expression, sizes, strategy="tiled+staged", params=params,
                             cache=False)
    merged = steps_merged(kernel.built.kernel)

    def vectors_of_tile(k: ir.KernelIR) -> int:
        return sum(isinstance(s, ir.VectorLoad) and s.first.array == tile
                   for s in ir.nested(k.body))

    assert vectors_of_tile(merged) > vectors_of_tile(kernel.built.kernel)
    arrays, scalars = kernel._random_operands(sizes, 0)
    launch = kernel._prepare(sizes, arrays, scalars)
    (merged_output, hazards), (printed_output, _) = (
        emulate(k, launch) for k in (merged, kernel.built.kernel))
    assert not hazards
    assert np.array_equal(merged_output, printed_output)  # the same sums, in the same order
    assert kernel.verify(backend="emulator").ok  # and they are einsum's
