"""Tiles beyond CUDA's static 48 KB: the tensor-core strategy may take the GPU's opt-in shared
memory, which CUDA declares as dynamic shared memory (each tile a pointer into it) and the
launch passes, its attribute raised. The OpenCL twin declares the same tiles as local arrays,
so PoCL and the emulator check these kernels as every other."""

from __future__ import annotations

import subprocess

import pytest
from conftest import needs_nvcc
from treduda.strategies.tensorcore_tiles import shared_bytes

import treduda
from treduda.codegen import ir
from treduda.model.gpus import gpu
from treduda.model.occupancy import blocks_per_sm
from treduda.polyhedral.lower import plan
from treduda.run.sass import find_disassembler, sass_report
from treduda.tuning.search import Searcher

GEMM = "C[i,j] = A[i,k] * B[k,j]"
PARTIAL = {"i": 150, "j": 140, "k": 100}  # no multiple of the 128x128x32 tile
# a 128x128 block of 2x2 warps of 64x64, double-buffered: 105 KB of tiles in float16
LARGE = {"warps_m": 2, "warps_n": 2, "frags_m": 4, "frags_n": 4, "frags_k": 2,
         "stages": 2, "split": 1, "async_copy": True}


def _large(expression: str = GEMM, dtype: str = "float16") -> treduda.Kernel:
    return treduda.compile(expression, PARTIAL, dtype=dtype, strategy="tensorcore",
                           params=LARGE, cache=False)


def test_tiles_beyond_48_kb_are_dynamic_shared_memory_the_launch_passes():
    kernel = _large("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]")
    dynamic = ir.dynamic_shared_bytes(kernel.built.kernel)
    assert dynamic > ir.STATIC_SHARED_BYTES
    assert dynamic == ir.shared_offsets(kernel.built.kernel)[1]
    source = kernel.cuda_source
    assert "extern __shared__" in source and "__shared__ unsigned short" not in source
    assert (f"cudaFuncSetAttribute({kernel.name}, cudaFuncAttributeMaxDynamicSharedMemorySize, "
            f"{dynamic});") in source
    assert f"<<<grid, block, {dynamic}, stream>>>" in source
    assert kernel._prepare(kernel.sizes, *kernel._random_operands(kernel.sizes, 0)
                           ).dynamic_shared == dynamic
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


def test_tiles_within_48_kb_stay_static():
    kernel = treduda.compile(GEMM, PARTIAL, dtype="float16", strategy="tensorcore",
                             params={**LARGE, "frags_m": 1, "frags_n": 1}, cache=False)
    assert ir.dynamic_shared_bytes(kernel.built.kernel) == 0
    assert "extern __shared__" not in kernel.cuda_source
    assert "<<<grid, block, 0, stream>>>" in kernel.cuda_source


def test_operand_tiles_are_laid_out_apart_and_aligned_and_c_reuses_them():
    """The operand tiles lie one after the other at 128-byte boundaries; the C tile, written
    after the main loop's last barrier, starts where they start and the block takes the
    larger of their bytes and its own, which the strategy's shared bytes say too."""
    kernel = _large().built.kernel
    offsets, total = ir.shared_offsets(kernel)
    tiles = {v.name: v for v in kernel.locals if v.space is ir.Space.SHARED}
    assert offsets["td_sa"] == offsets["td_sc"] == 0
    assert 0 < offsets["td_sb"] and offsets["td_sb"] % ir.SHARED_ALIGNMENT == 0
    operands = offsets["td_sb"] + tiles["td_sb"].size * 2  # float16 tiles hold 2 bytes
    c = tiles["td_sc"].size * 4  # the float32 C tile
    assert total == max(-(-operands // 128) * 128, -(-c // 128) * 128)
    program = plan(GEMM, PARTIAL, dtype="float16")
    assert shared_bytes(program, LARGE) == max(operands, c)


# GEMM 4096^3's fp16 pick before the C tile reused the operand tiles: 2x4 warps of 4x4
# fragments, steps of 32, two buffers
PICK = {"warps_m": 2, "warps_n": 4, "frags_m": 4, "frags_n": 4, "frags_k": 2,
        "stages": 2, "split": 1, "async_copy": True}


def test_reusing_the_operand_tiles_for_c_shrinks_the_blocks_shared_memory():
    """The pick's C tile (128 x 264 floats, 132 KB) took 70% of its 183 KB beside the
    operand tiles (53 KB); reusing their memory, the block needs its C tile alone (one
    block per SM on an H100 either way: its 256 threads of 167 registers allow one), now
    128 x 280 floats, 140 KB: rows skewed for the write's vector reads
    (:func:`.tensorcore_tiles.accumulator_skew`). A 128 x 128 tile of 2x2 warps
    (CUTLASS's) needs 68 KB instead of 105 KB: three blocks per SM, not two."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype="float16")
    separate = 2 * (128 * 40 + 32 * 264) * 2 + 128 * 280 * 4
    assert shared_bytes(program, PICK) == 128 * 280 * 4 < separate
    square = {**PICK, "warps_n": 2}
    operands, c = 2 * (128 * 40 + 32 * 136) * 2, 128 * 136 * 4
    assert shared_bytes(program, square) == c
    h100 = gpu("H100")
    assert blocks_per_sm(h100, 128, 128, c) == 3
    assert blocks_per_sm(h100, 128, 128, operands + c) == 2


SCALED = "C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]"
ACCUMULATED = "C[i,j] += A[i,k]*B[k,j]"


@pytest.mark.parametrize(("expression", "dtype", "precision", "split", "deterministic"), [
    (SCALED, "float16", "highest", 1, False), (ACCUMULATED, "bfloat16", "highest", 1, False),
    (GEMM, "float32", "tf32", 2, False), (GEMM, "float16", "highest", 2, True),
    (SCALED, "float64", "highest", 1, False), (GEMM, "float32", "3xtf32", 1, False)])
def test_kernels_whose_c_tile_reuses_the_operand_tiles_verify(expression, dtype, precision,
                                                               split, deterministic):
    """Partial tiles, alpha and beta, +=, split reductions (atomic, and a deterministic
    workspace), every kind: PoCL and the emulator compute einsum's result, and the emulator
    finds no access of an operand tile after C took its memory."""
    kernel = treduda.compile(expression, PARTIAL, dtype=dtype, precision=precision,
                             strategy="tensorcore", deterministic=deterministic, cache=False,
                             params={**LARGE, "frags_m": 2, "frags_n": 2, "split": split})
    built = kernel.built.kernel
    assert ir.reuses_shared(built)
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


@needs_nvcc
def test_nvcc_compiles_the_kernel_and_its_host_glue(tmp_path):
    """ptxas refuses more than 48 KB of static shared memory; the dynamic declaration
    compiles, and so does the host glue that raises the attribute (nvcc -c, host code too);
    so does a static pool of tiles (the C tile reusing the operand tiles' memory)."""
    small = treduda.compile(GEMM, PARTIAL, dtype="float16", strategy="tensorcore",
                            params={**LARGE, "frags_m": 1, "frags_n": 1}, cache=False)
    assert "__shared__ __align__(128) unsigned char td_shared[" in small.cuda_source
    for name, kernel in (("large", _large()), ("small", small)):
        source = tmp_path / f"{name}.cu"
        source.write_text(kernel.cuda_source)
        for arch in ("sm_80", "sm_90"):
            subprocess.run(["nvcc", f"-arch={arch}", "-c", "-o",
                            str(tmp_path / f"{name}_{arch}.o"), str(source)],
                           check=True, capture_output=True)


@pytest.mark.skipif(find_disassembler() is None, reason="nvdisasm not installed")
@needs_nvcc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pointers_into_dynamic_shared_memory_are_still_shared_loads(dtype):
    report = sass_report(_large(dtype=dtype).cuda_source, "sm_90")[0]
    opcodes = report.main_loop_opcodes
    assert opcodes.get("LDSM", 0) > 0 and "LD" not in opcodes, opcodes


def test_the_search_offers_a_gpus_opt_in_shared_memory_only():
    """An H100 takes 227 KB per block, a V100 96 KB: each search's largest candidate fits its
    GPU, and GEMM 4096^3's tiles grow past the static 48 KB where the GPU allows it."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype="float16")
    for name, limit in (("H100", 227 * 1024), ("V100", 96 * 1024)):
        searcher = Searcher(program, name, "tensorcore")
        assert searcher.strategy.limits.dynamic_shared_per_block == limit
    result = treduda.search(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype="float16")
    kernel = treduda.compile(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype="float16",
                             strategy=result.best.strategy, params=result.best.params,
                             cache=False)
    assert ir.dynamic_shared_bytes(kernel.built.kernel) > ir.STATIC_SHARED_BYTES
