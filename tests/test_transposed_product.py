"""Where the output's fastest index is M's, the tensor-core kernel's C tile is column-major
(its rows of M, which the output's write reads along), and the MMA computes C^T = B^T A^T:
A's fragments are its B operand, B's its A, so that mma.sync's accumulator layout, which
gives each thread pairs of values along its N (c0, c1 at columns 2i, 2i + 1), gives them
along M, and each pair is one store into the tile (the accumulators of C took one store a
value). Kernels of ranks 2 to 6 in float16, bfloat16 and TF32 against numpy.einsum on PoCL,
sizes no multiple of a tile; the C tile's stores and reads without bank conflicts; nvcc's
SASS storing pairs."""

from __future__ import annotations

import pytest
from treduda.strategies.tensorcore_kernel import FRAG_A, FRAG_B
from treduda.strategies.tensorcore_tiles import output_along_n

import treduda
from treduda.codegen import ir
from treduda.run.counters import LOAD, STORE
from treduda.run.nvcc import nvcc_available
from treduda.run.sass import find_disassembler, sass_report

MMA = {"mapping": "mma", "stages": 2, "async_copy": True, "split": 1, "frags_k": 1}
# (expression, sizes, dtype, precision, params), every output's fastest index M's (layout F)
CASES = {
    "gemm_bf16": ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", {"i": 70, "j": 50, "k": 40},
                  "bfloat16", "highest",
                  {"warps_m": 2, "warps_n": 1, "frags_m": 2, "frags_n": 2}),
    "tccg_01_tf32": ("C[a,b,c]=A[b,d,a]*B[d,c]", {"a": 20, "b": 6, "c": 36, "d": 20},
                     "float32", "tf32", {"warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 1}),
    "tccg_20_fp16": ("C[a,b,c,d]=A[a,e,b,f]*B[d,f,c,e]",
                     {"a": 7, "b": 5, "c": 6, "d": 4, "e": 5, "f": 3}, "float16", "highest",
                     {"warps_m": 1, "warps_n": 1, "frags_m": 2, "frags_n": 1}),
    "tccg_31_fp16": ("C[a,b,c,d,e,f]=A[d,e,g,a]*B[g,f,b,c]",
                     {"a": 6, "b": 2, "c": 3, "d": 4, "e": 3, "f": 5, "g": 12}, "float16",
                     "highest", {"warps_m": 2, "warps_n": 1, "frags_m": 2, "frags_n": 2}),
}
MATRIX = {
    "tccg_06_bf16": ("C[a,b,c,d,e]=A[e,f,b,a,d]*B[c,f]",
                     {"a": 5, "b": 3, "c": 20, "d": 4, "e": 3, "f": 18}, "bfloat16", "highest",
                     {"warps_m": 2, "warps_n": 1, "frags_m": 2, "frags_n": 1}),
    "tccg_20_tf32": ("C[a,b,c,d]=A[a,e,b,f]*B[d,f,c,e]",
                     {"a": 7, "b": 5, "c": 6, "d": 4, "e": 5, "f": 3}, "float32", "tf32",
                     {"warps_m": 1, "warps_n": 1, "frags_m": 2, "frags_n": 1}),
}


def _compile(case: str) -> treduda.Kernel:
    expression, sizes, dtype, precision, params = {**CASES, **MATRIX}[case]
    return treduda.compile(expression, sizes, dtype=dtype, precision=precision, layout="F",
                           strategy="tensorcore", params={**MMA, **params})


def _check(kernel: treduda.Kernel) -> None:
    """The MMA's operands are B's fragments, then A's; the C tile is stored and read
    without a conflict; PoCL's result is einsum's."""
    assert not output_along_n(kernel.program)
    uses = {local.name: local.fragment.use for local in kernel.built.kernel.locals
            if local.space is ir.Space.FRAGMENT}
    assert (uses[FRAG_A], uses[FRAG_B]) == (ir.Use.B, ir.Use.A)
    c_tile = {t.operation: t for t in kernel.counters().traffic if t.array == "td_sc"}
    assert (c_tile[STORE].ways, c_tile[LOAD].ways) == (1, 1)
    assert kernel.verify().ok


@pytest.mark.parametrize("case", CASES)
def test_an_output_whose_fastest_index_is_ms_is_computed_transposed(case):
    _check(_compile(case))


@pytest.mark.matrix
@pytest.mark.parametrize("case", MATRIX)
def test_more_transposed_products_match_einsum(case):
    _check(_compile(case))


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_the_transposed_products_c_tile_is_stored_in_pairs():
    """tccg_31's form, 2 x 2 fragments of 16 x 16 a warp: 32 accumulators a thread, stored
    as 16 STS.64 (C's accumulators took 32 STS.32); the copies of rows of 12 values store
    16 bits at a time."""
    kernel = _compile("tccg_31_fp16")
    widths = sass_report(kernel.cuda_source, "sm_90")[0].shared_store_widths
    assert (widths[64], widths.get(32, 0)) == (16, 0)
