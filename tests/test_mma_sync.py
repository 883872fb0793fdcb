"""The tensor-core strategy's "mma" mapping: fragments as inline PTX mma.sync.m16n8k16 fed by
ldmatrix.x4. The lanes' addresses and accumulator places the CUDA printer emits are checked
against the PTX ISA's fragment layouts; its kernels (whose OpenCL twin computes the same tile
products) against numpy.einsum on PoCL and in the emulator; nvcc's SASS against the
instructions the mapping means to issue."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import treduda
from treduda.codegen import ir
from treduda.codegen.fragments import ACCUMULATOR_LANES, LDMATRIX_LANES, ldmatrix_transposed
from treduda.errors import StrategyError
from treduda.run.nvcc import cubin, nvcc_available
from treduda.run.sass import find_disassembler, sass_report

GEMM = "C[i,j] = A[i,k] * B[k,j]"
PARTIAL = {"i": 40, "j": 50, "k": 70}  # no multiple of a fragment's 16
TCCG_20 = ("C[a,b,c,d]=A[a,e,b,f]*B[d,f,c,e]", {"a": 7, "b": 5, "c": 6, "d": 4, "e": 5, "f": 3})
MMA = {"mapping": "mma"}
SMALL = {"warps_m": 2, "warps_n": 1, "frags_m": 1, "frags_n": 2, "frags_k": 2, **MMA}


def _lanes(formula: str, **values: int) -> int:
    return eval(formula.format(**values))  # the printer's C, which Python reads alike


def _ldmatrix(tile: np.ndarray, rows: list[tuple[int, int]], trans: bool) -> np.ndarray:
    """What each lane receives (PTX ISA, "ldmatrix", .x4 of .b16): lane ``l`` gives the
    address of row ``l % 8`` of matrix ``l / 8`` (a tile row and the column it starts at);
    word ``j`` of lane ``l`` holds row ``l / 4``, elements ``2 (l % 4)`` and ``+1`` of matrix
    ``j``, or with .trans those of its transpose. Returns [lane, word, half]."""
    matrices = np.array([[tile[r, c:c + 8] for r, c in rows[8 * j:8 * j + 8]]
                         for j in range(4)])
    if trans:
        matrices = matrices.transpose(0, 2, 1)
    return np.array([[matrices[j, lane // 4, 2 * (lane % 4):2 * (lane % 4) + 2]
                      for j in range(4)] for lane in range(32)])


def _operand(words: np.ndarray, use: ir.Use) -> np.ndarray:
    """The 16x16 fragment the lanes' words stand for, placed as the PTX ISA's "Matrix
    Fragments for mma.m16n8k16 with floating point type" says (groupID ``g = l / 4``,
    threadID_in_group ``i = l % 4``): A's a0..a7 at rows ``g`` (a0, a1, a4, a5) or ``g + 8``
    and columns ``2i + (n & 1)``, 8 more from a4; B's b0..b3 of an 8-column half at rows
    ``2i + (n & 1)``, 8 more from b2, and column ``g`` (two halves of two words each)."""
    fragment = np.full((16, 16), np.nan)
    for lane in range(32):
        g, i = divmod(lane, 4)
        for n, value in enumerate(words[lane].ravel()):
            if use is ir.Use.A:
                row, column = g + 8 * (n // 2 % 2), 2 * i + n % 2 + 8 * (n // 4)
            else:
                half, n = divmod(n, 4)
                row, column = 2 * i + n % 2 + 8 * (n // 2), g + 8 * half
            fragment[row, column] = value
    return fragment


@pytest.mark.parametrize("use", [ir.Use.A, ir.Use.B])
@pytest.mark.parametrize("row_major", [True, False], ids=["row", "col"])
def test_ldmatrix_lanes_deliver_the_fragment_mma_sync_reads(use, row_major):
    """A 16x16 operand stored in a padded tile, its rows adjacent in memory (row_major) or
    its columns: the lanes' addresses and the transposition the printer takes give every
    lane the registers mma.sync expects, each value of the fragment exactly once."""
    rng = np.random.default_rng(1)
    fragment = rng.standard_normal((16, 16))
    ld = 24
    tile = np.zeros((16, ld))
    tile[:, :16] = fragment if row_major else fragment.T
    rows = [(_lanes(LDMATRIX_LANES[row_major][0], l=lane),
             _lanes(LDMATRIX_LANES[row_major][1], l=lane)) for lane in range(32)]
    words = _ldmatrix(tile, rows, ldmatrix_transposed(use, row_major))
    assert np.array_equal(_operand(words, use), fragment)


def test_accumulator_values_land_where_mma_sync_puts_them():
    """Value ``4h + v`` of a thread is c_v of the 8-column half ``h``: row ``g`` (c0, c1)
    or ``g + 8``, column ``8h + 2i + (v & 1)`` (PTX ISA), each of the 256 places once."""
    places = set()
    for lane in range(32):
        g, i = divmod(lane, 4)
        for t in range(8):
            half, v = divmod(t, 4)
            expected = (g + 8 * (v // 2), 8 * half + 2 * i + v % 2)
            found = tuple(_lanes(f, l=lane, t=t) for f in ACCUMULATOR_LANES)
            assert found == expected
            places.add(found)
    assert len(places) == 256


def _compile(expression: str, sizes: dict, dtype: str = "float16", layout: str = "C",
             params: dict | None = None) -> treduda.Kernel:
    return treduda.compile(expression, sizes, dtype=dtype, layout=layout,
                           strategy="tensorcore", params={**SMALL, **(params or {})})


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("expression", "sizes", "params"), [
    (GEMM, PARTIAL, {}),
    ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", {"i": 40, "j": 48, "k": 72}, {"stages": 3}),
    ("C[i,j] += A[i,k]*B[k,j]", {"i": 33, "j": 17, "k": 41}, {"stages": 2}),
    (*TCCG_20, {"frags_k": 1}),
], ids=["gemm", "alpha_beta", "update", "tccg_20"])
def test_mma_kernels_match_einsum(expression, sizes, params, layout, dtype):
    kernel = _compile(expression, sizes, dtype, layout, params)
    assert kernel.params["mapping"] == "mma"
    assert "td_mma(" in kernel.cuda_source and "nvcuda::wmma" not in kernel.cuda_source
    assert kernel.verify().ok


def test_a_split_mma_kernel_matches_einsum():
    """A deterministic split of float16 (no 16-bit atomics): the parts in a workspace."""
    kernel = treduda.compile(GEMM, {"i": 20, "j": 24, "k": 300}, dtype="float16",
                             strategy="tensorcore", deterministic=True,
                             params={**SMALL, "split": 2})
    assert kernel.params["split"] == 2
    assert kernel.verify().ok


def test_mma_kernels_run_without_hazards():
    kernel = _compile("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", PARTIAL,
                      params={"stages": 2})
    assert kernel.verify(backend="emulator").ok
    assert kernel.hazards() == []


def test_only_16_bit_types_have_the_mma_mapping():
    with pytest.raises(StrategyError, match="mapping"):
        treduda.compile(GEMM, PARTIAL, dtype="float64", strategy="tensorcore", params=MMA)


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sass_multiplies_by_hmma_16816_fed_by_ldsm(dtype, arch):
    kernel = _compile(GEMM, {"i": 256, "j": 256, "k": 256}, dtype,
                      params={"stages": 2, "frags_k": 2})
    report = sass_report(kernel.cuda_source, arch)[0]
    opcodes = report.main_loop_opcodes
    assert report.main_loop_mma > 0 and report.main_loop_ffma == 0
    assert opcodes.get("LDSM", 0) > 0 and "LD" not in opcodes, opcodes
    disassembler = find_disassembler()
    with cubin(kernel.cuda_source, arch) as (binary, _):
        listing = subprocess.run([disassembler, "-c" if "nvdisasm" in disassembler
                                  else "-sass", str(binary)],
                                 capture_output=True, text=True, check=True).stdout
    # A's tile is read as stored (M88), B's, whose rows run along N, transposed (MT88)
    assert "HMMA.16816.F32" in listing
    assert "LDSM.16.M88.4" in listing and "LDSM.16.MT88.4" in listing
