"""Register tiles dealt in runs of a vector (issue 38): with ``assign_x="vector"`` thread ``t``
holds ``4t .. 4t+3, 4(t + block_x) ..`` (float32), so its values of a staged tile row are read
with one 128-bit load each (``ir.VectorLoad`` from shared memory) and a warp's loads cover
whole banks. Checked on PoCL and in the emulator against numpy.einsum, on sizes the tiles do
not divide (the x tile, 64 values, is not clipped to a dimension shorter than it: its rows
would then be no multiple of a vector), both layouts, alpha/beta, ``+=`` and split
reductions; the emulator's counters check the vector loads for bank conflicts."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc

import treduda
from treduda import strategies
from treduda.codegen import ir
from treduda.errors import StrategyError
from treduda.frontend.contraction import analyse
from treduda.polyhedral.lower import lower

TILES = {"order": "j,i", "block_x": 8, "reg_x": 8, "assign_x": "vector", "block_y": 4,
         "reg_y": 4, "assign_y": "cyclic", "step": 8, "unroll": True, "stage": "A,B", "pad": 0}
CONTRACTIONS = {
    "gemm": ("C[i,j] = A[i,k]*B[k,j]", {"i": 67, "j": 75, "k": 21}),
    # A read transposed, alpha and beta
    "scaled_transposed": ("C[i,j] = alpha*A[k,i]*B[j,k] + beta*C[i,j]",
                          {"i": 71, "j": 70, "k": 13}),
    "accumulate": ("C[i,j] += A[i,k]*B[k,j]", {"i": 69, "j": 66, "k": 17}),
}


def compiled(name: str, layout: str = "C", dtype: str = "float32", **params) -> treduda.Kernel:
    expression, sizes = CONTRACTIONS[name]
    return treduda.compile(expression, sizes, layout=layout, dtype=dtype,
                           strategy="tiled+staged", cache=False, params={**TILES, **params})


def shared_vector_loads(kernel: treduda.Kernel) -> list[ir.VectorLoad]:
    tiles = {local.name for local in kernel.built.kernel.locals
             if local.space is ir.Space.SHARED}
    return [s for s in ir.nested(kernel.built.kernel.body)
            if isinstance(s, ir.VectorLoad) and s.first.array in tiles]


@pytest.mark.parametrize("copies", [{}, {"async_copy": True, "double_buffer": True},
                                    {"preload": True}], ids=["plain", "async", "preload"])
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("name", CONTRACTIONS)
def test_vector_tiles_match_einsum(name, layout, copies):
    order = {"order": "i,j"} if layout == "F" else {}  # x on the output's fastest index
    kernel = compiled(name, layout, **order, **copies)
    # the transposed operand's tile along x (B[j,k] in C, A[k,i] in F) is stored as the
    # tensor is: a thread's values are a column of it, read one by one
    assert bool(shared_vector_loads(kernel)) == (name != "scaled_transposed")
    assert kernel.verify().ok  # PoCL, partial tiles along every axis
    assert kernel.verify(backend="emulator").ok  # and no race, no read outside a tile


@pytest.mark.parametrize("dtype, width", [("float32", 4), ("float64", 2)])
def test_a_thread_reads_its_row_of_a_tile_in_vectors_of_16_bytes(dtype, width):
    kernel = compiled("gemm", dtype=dtype, reg_x=4)
    loads = shared_vector_loads(kernel)
    assert max(load.width for load in loads) == width  # narrower in partial tiles
    assert {load.first.array for load in loads} == {"B_sh"}  # B[k,j]: j on x
    assert kernel.verify().ok


def test_split_reductions_of_vector_tiles_match_einsum():
    expression, sizes = "C[i,j] = A[i,k]*B[k,j]", {"i": 13, "j": 40, "k": 150}
    kernel = treduda.compile(expression, sizes, strategy="tiled+staged", cache=False,
                             params={**TILES, "split": 4})
    assert kernel.verify().ok


def test_vector_loads_of_tiles_are_free_of_bank_conflicts():
    # a 16 x 8-thread block, 8 x 8 values each: the shape of the GEMM picks
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 256, "j": 256, "k": 64},
                             strategy="tiled+staged", cache=False,
                             params={**TILES, "block_x": 16, "block_y": 16, "reg_y": 8,
                                     "step": 16})
    counted = kernel.counters(steps=2)
    b = counted.of("B_sh")
    assert b.ways == 1 and b.transactions == b.ideal
    assert counted.worst_ways() == 1


def test_the_vector_assignment_holds_whole_vectors():
    with pytest.raises(StrategyError, match="multiple of 4"):
        compiled("gemm", reg_x=2)


def test_float16_has_no_vector_assignment():
    program = lower(analyse("C[i,j] = A[i,k]*B[k,j]"), {"i": 64, "j": 64, "k": 64}, "C",
                    "float16")
    space = strategies.get("tiled").space(program)
    assert "vector" not in next(p for p in space.parameters if p.name == "assign_x").values


@needs_nvcc
def test_the_gemm_tile_reads_shared_memory_in_128_bit_loads():
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 512, "j": 512, "k": 512},
                             strategy="tiled+staged", cache=False,
                             params={**TILES, "block_x": 16, "block_y": 16, "reg_y": 8,
                                     "step": 16})
    report = kernel.sass_report()
    assert set(report.main_loop_shared_load_widths) == {128}
    assert report.main_loop_shared_load_widths[128] * 12 <= report.main_loop_ffma
