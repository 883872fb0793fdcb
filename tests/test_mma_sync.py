"""The tensor-core strategy's "mma" mapping: fragments as inline PTX mma.sync.m16n8k16 fed by
ldmatrix.x4. The lanes' addresses and accumulator places the CUDA printer emits are checked
against the PTX ISA's fragment layouts; its kernels (whose OpenCL twin computes the same tile
products) against numpy.einsum on PoCL and in the emulator; nvcc's SASS against the
instructions the mapping means to issue."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess

import numpy as np
import pytest
from treduda.strategies.tensorcore_tiles import last_columns, swizzle_shift

import treduda
from treduda.codegen import ir
from treduda.codegen.fragments import (
    ACCUMULATOR_LANES,
    LDMATRIX_LANES,
    TF32_LANES,
    beside_swizzle,
    by_rows,
    ldmatrix_transposed,
)
from treduda.codegen.simplify import plus, times
from treduda.errors import StrategyError
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import plan
from treduda.run.counters import count
from treduda.run.nvcc import cubin, nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.tuning.search import search_program

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
             _lanes(LDMATRIX_LANES[row_major][1], l=lane, c=8)) for lane in range(32)]
    words = _ldmatrix(tile, rows, ldmatrix_transposed(use, row_major))
    assert np.array_equal(_operand(words, use), fragment)


@pytest.mark.parametrize("use", [ir.Use.A, ir.Use.B])
def test_tf32_words_by_ldmatrix_and_by_shared_loads_are_the_operands_of_m16n8k8(use):
    """TF32 operands: where the tile's memory rows are the fragment's rows (A row-major, B
    stored along K... as N x K), ldmatrix of 16-bit pairs gives lane ``l`` in word ``j``
    word ``l % 4`` of row ``l / 4`` of matrix ``j``; elsewhere each word is a shared load of
    :data:`TF32_LANES`'s element. Both are the PTX ISA's m16n8k8 .tf32 layout: a0..a3 at
    (g, i), (g + 8, i), (g, i + 4), (g + 8, i + 4); b0, b1 at (i, g), (i + 4, g) of each 8
    columns."""
    rng = np.random.default_rng(2)
    shape = (16, 8) if use is ir.Use.A else (8, 16)
    fragment = rng.standard_normal(shape)
    ld = 12
    memory = fragment if use is ir.Use.A else fragment.T  # rows of M, or of N
    tile = np.zeros((16, ld))
    tile[:, :8] = memory
    row_major = use is ir.Use.A
    assert not ldmatrix_transposed(use, row_major)
    rows = [(_lanes(LDMATRIX_LANES[row_major][0], l=lane),
             _lanes(LDMATRIX_LANES[row_major][1], l=lane, c=4)) for lane in range(32)]
    matrices = np.array([[tile[r, c:c + 4] for r, c in rows[8 * j:8 * j + 8]]
                         for j in range(4)])
    for lane in range(32):
        g, i = divmod(lane, 4)
        expected = ([(g, i), (g + 8, i), (g, i + 4), (g + 8, i + 4)] if use is ir.Use.A
                    else [(i, g), (i + 4, g), (i, g + 8), (i + 4, g + 8)])
        for word, (row, column) in enumerate(expected):
            assert matrices[word, lane // 4, lane % 4] == fragment[row, column]
            assert (tuple(_lanes(f, l=lane, w=word) for f in TF32_LANES[use])
                    == (row, column))


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


@pytest.mark.parametrize("precision", ["tf32", "3xtf32"])
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("expression", "sizes"), [
    ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", PARTIAL), TCCG_20])
def test_tf32_mma_kernels_match_einsum_without_hazards(expression, sizes, layout, precision):
    kernel = treduda.compile(expression, sizes, dtype="float32", precision=precision,
                             layout=layout, strategy="tensorcore",
                             params={**SMALL, "frags_k": 1, "stages": 2})
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32" in kernel.cuda_source
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


def test_tf32_fragments_count_as_ldmatrix_where_it_reads_them():
    """GEMM's A tile (rows of M) is read by ldmatrix, B's (rows of N) a value per lane:
    both conflict-free in the padded tiles."""
    kernel = treduda.compile(GEMM, PARTIAL, dtype="float32", precision="tf32",
                             strategy="tensorcore", params={**SMALL, "frags_k": 1})
    ways = _shared_ways(kernel.counters())
    assert ("td_sa", "ldsm") in ways and ("td_sb", "ld") in ways, ways
    assert set(ways.values()) == {1}, ways


def test_a_split_mma_kernel_matches_einsum():
    """A deterministic split of float16 (no 16-bit atomics): the parts in a workspace."""
    kernel = treduda.compile(GEMM, {"i": 20, "j": 24, "k": 300}, dtype="float16",
                             strategy="tensorcore", deterministic=True,
                             params={**SMALL, "split": 2})
    assert kernel.params["split"] == 2
    assert kernel.verify().ok


@pytest.mark.parametrize(("expression", "sizes", "params", "precision", "narrowed"), [
    (GEMM, {"i": 40, "j": 24, "k": 20}, {}, "highest", True),  # N 24 in a tile of 32
    ("C[a,b,c]=A[a,k,b]*B[k,c]", {"a": 4, "b": 5, "c": 20, "k": 24}, {}, "tf32",
     True),  # M and N 20
    ("C[a,b,c,d]=A[a,e,b]*B[d,e,c]", {"a": 4, "b": 6, "c": 2, "d": 4, "e": 20},
     {"frags_n": 1}, "highest", True),  # M 24; N 8 in a fragment of 16
    ("C[a,b,c,d,e]=A[e,f,b,a,d]*B[c,f]", {"a": 2, "b": 2, "c": 24, "d": 2, "e": 5, "f": 19},
     {}, "tf32", True),  # tccg_06's shape: M 40 in two tiles of 32, N 24
    ("C[a,b,c,d,e,g]=A[e,f,b,a]*B[c,g,d,f]",
     {"a": 2, "b": 2, "c": 2, "d": 5, "e": 2, "f": 17, "g": 4},
     {"warps_m": 1}, "highest", False),  # M 8; N 40 in two tiles of 32
], ids=["gemm_n24", "rank3_20", "rank4_n8", "rank5_n24", "rank6_n40"])
def test_fragments_partly_past_the_extents_match_einsum(expression, sizes, params, precision,
                                                        narrowed):
    """Extents of 24, 20 and 8 leave each warp's last fragment along N 8 columns wholly
    outside N, which it neither loads nor multiplies (:func:`last_columns`); 40 in two
    tiles leaves them in its last block only, which multiplies them; M 20, 24, 40 and 8."""
    dtype = "float32" if precision == "tf32" else "float16"
    kernel = treduda.compile(expression, sizes, dtype=dtype, precision=precision,
                             strategy="tensorcore", params={**SMALL, **params})
    assert (last_columns(kernel.program, kernel.params) is not None) == narrowed
    assert kernel.verify().ok


def test_a_fragments_columns_past_n_are_neither_loaded_nor_multiplied():
    """N = 24 in a tile of 32 (tccg_06's): each warp's last fragment takes one mma.sync of
    two (3 of 4 a k-slice here, as the model counts) and its B by ldmatrix.x2, and the
    kernel runs without hazards; N = 32 takes all four."""
    sizes = {"i": 32, "j": 24, "k": 64}
    narrow = _compile(GEMM, sizes, params={"frags_k": 1})
    whole = _compile(GEMM, {**sizes, "j": 32}, params={"frags_k": 1})
    calls = {name: kernel.cuda_source.count("td_mma(&") for name, kernel in
             (("narrow", narrow), ("whole", whole))}
    assert 4 * calls["narrow"] == 3 * calls["whole"], calls
    assert "td_ldmatrix_x2" in narrow.cuda_source and "_x2" not in whole.cuda_source
    model = model_of(narrow.program, gpu("H100"), "tensorcore")
    assert model.step_mmas(narrow.params) == 3
    assert narrow.verify(backend="emulator").ok  # every block: a hazard raises


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_the_sass_loop_of_a_narrowed_fragment_holds_a_quarter_fewer_hmma():
    """ptxas keeps what the kernel says: GEMM with N = 24 in a tile of 32, 2x1 warps of
    1x2 fragments, issues 3 HMMA.16816 a k-slice where N = 32 issues 4 (96 and 128 in the
    main loop), from as many LDSM (a quarter of them .x2)."""
    sizes = {"i": 64, "j": 24, "k": 512}
    narrow, whole = (sass_report(_compile(GEMM, {**sizes, "j": n}).cuda_source, "sm_90")[0]
                     for n in (24, 32))
    assert 4 * narrow.main_loop_mma == 3 * whole.main_loop_mma > 0
    assert narrow.main_loop_opcodes["LDSM"] == whole.main_loop_opcodes["LDSM"]


def test_mma_kernels_run_without_hazards():
    kernel = _compile("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", PARTIAL,
                      params={"stages": 2})
    assert kernel.verify(backend="emulator").ok  # every block: a hazard raises


def test_float64_has_no_mma_mapping():
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


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tf32_sass_multiplies_by_hmma_1688_from_shared_memory(arch):
    """TF32: HMMA.1688, A by ldmatrix, B (whose rows run along N) by shared loads, no
    generic load in the main loop."""
    kernel = treduda.compile(GEMM, {"i": 256, "j": 256, "k": 256}, dtype="float32",
                             precision="tf32", strategy="tensorcore",
                             params={**SMALL, "stages": 2})
    report = sass_report(kernel.cuda_source, arch)[0]
    opcodes = report.main_loop_opcodes
    assert report.main_loop_mma > 0 and "LD" not in opcodes, opcodes
    assert opcodes.get("LDSM", 0) > 0 and opcodes.get("LDS", 0) > 0, opcodes
    disassembler = find_disassembler()
    with cubin(kernel.cuda_source, arch) as (binary, _):
        listing = subprocess.run([disassembler, "-c" if "nvdisasm" in disassembler
                                  else "-sass", str(binary)],
                                 capture_output=True, text=True, check=True).stdout
    assert "HMMA.1688.F32.TF32" in listing and "HMMA.1684" not in listing


@pytest.mark.parametrize("ld", [32, 64, 128, 256])
def test_ldmatrix_lanes_swizzle_as_the_tile_holds_them(ld):
    """A fragment at a multiple of 16 rows and 16 columns (and a buffer's offset) of a
    swizzled tile: the printer's split of the XOR (the rows outside it, the lane's XOR
    applied to the column) is where the tile holds each lane's element."""
    shift = swizzle_shift(ld)
    buffer, warp = ir.Var("buffer"), ir.Var("warp")
    first = plus(times(16 * ld * 3, buffer), times(16, warp), ir.Int(32 * ld + 16))
    rows, constant, columns = by_rows(first, ld)
    for b, w, along in itertools.product(range(3), range(ld // 16 - 1), (True, False)):
        values = {"buffer": ir.Int(b), "warp": ir.Int(w)}
        at = ir.affine(ir.substitute(first, values))[1]
        row_part = ir.affine(ir.substitute(rows, values))[1] + constant
        column = ir.affine(ir.substitute(columns, values))[1]
        for lane in range(32):
            r, c = (_lanes(f, l=lane, c=8) for f in LDMATRIX_LANES[along])
            lane_xor = ir.swizzled(r * ld + c, shift) - r * ld
            assert row_part + r * ld + (column ^ lane_xor) == ir.swizzled(at + r * ld + c, shift)


def test_terms_beside_the_swizzle_move_no_bit_it_reads():
    shift = swizzle_shift(64)
    step, thread = ir.Var("step"), ir.Var("thread")
    offset = plus(times(4096, step), times(72, thread), ir.Int(5000))
    high, low = beside_swizzle(offset, shift)
    for s, t in itertools.product(range(4), range(100)):
        values = {"step": ir.Int(s), "thread": ir.Int(t)}
        at = ir.affine(ir.substitute(offset, values))[1]
        assert (ir.affine(ir.substitute(high, values))[1]
                + ir.swizzled(ir.affine(ir.substitute(low, values))[1], shift)
                == ir.swizzled(at, shift))


def _shared_ways(counted) -> dict[tuple[str, str], int]:
    return {(t.array, t.operation): t.ways for t in counted.traffic
            if t.space == "shared" and t.region.name == "MAIN_LOOP"}


SWIZZLED = {**SMALL, "shared_layout": "swizzle", "warps_n": 2, "frags_n": 2, "frags_k": 2}


@pytest.mark.parametrize(("expression", "sizes", "params"), [
    (GEMM, {"i": 40, "j": 150, "k": 140}, {"stages": 2}),
    ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", {"i": 70, "j": 66, "k": 100},
     {"stages": 3}),
    ("C[a,b,c] = A[b,d,a]*B[d,c]", {"a": 20, "b": 12, "c": 72, "d": 70}, {}),
], ids=["gemm", "alpha_beta", "tccg_01"])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_swizzled_tiles_match_einsum_without_bank_conflicts(expression, sizes, params, layout):
    """Swizzled operand tiles: the same results (PoCL, emulator) and every copy and fragment
    load of the main loop conflict-free (ways 1); the same kernel holding its tiles
    unswizzled and unpadded has conflicts, so the counts see the swizzle."""
    kernel = _compile(expression, sizes, layout=layout, params={**SWIZZLED, **params})
    assert kernel.params["shared_layout"] == "swizzle"
    assert "td_swizzle(" in kernel.opencl_source
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)
    ways = _shared_ways(kernel.counters())
    assert ways and set(ways.values()) == {1}, ways
    plain = dataclasses.replace(kernel.built.kernel, locals=tuple(
        dataclasses.replace(local, swizzle=0) for local in kernel.built.kernel.locals))
    launch = kernel._prepare(sizes, {t: np.zeros([sizes[i] for i in idx], np.float16,
                                                 order=layout)
                                     for t, idx in kernel.contraction.inputs.items()},
                             dict.fromkeys(kernel.contraction.scalars, 0.0))
    assert max(_shared_ways(count(plain, launch)).values()) > 1


def test_swizzled_tiles_need_the_mma_mapping_and_rows_of_32():
    with pytest.raises(StrategyError, match="mma mapping"):
        _compile(GEMM, PARTIAL, params={**SWIZZLED, "mapping": "wmma"})
    with pytest.raises(StrategyError, match="rows of 32"):
        _compile(GEMM, PARTIAL, params={**SWIZZLED, "frags_k": 1})


def test_the_model_charges_the_swizzle_and_prefers_the_leaner_mapping():
    """Per step, on GEMM 4096^3's tiles, the model counts what the SASS main loop issues
    (sm_90: 318 WMMA fp16, 259 mma padded, 286 mma swizzled) within 10%, so the search
    prefers the mma mapping and keeps padding where the swizzle's smaller tiles do not
    pay."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, dtype="float16")
    model = model_of(program, gpu("H100"), "tensorcore")
    tiles = {"warps_m": 2, "warps_n": 4, "frags_m": 4, "frags_n": 4, "frags_k": 4,
             "stages": 2, "split": 1, "async_copy": True}
    found = {(mapping, layout): model.step_instructions(
        {**tiles, "mapping": mapping, "shared_layout": layout})
        for mapping, layout in (("wmma", "pad"), ("mma", "pad"), ("mma", "swizzle"))}
    sass = {("wmma", "pad"): 318, ("mma", "pad"): 259, ("mma", "swizzle"): 286}
    assert all(abs(found[key] / sass[key] - 1) < 0.1 for key in sass), found
    picked = search_program(program, gpu("H100"), strategy="tensorcore").best.params
    assert picked["mapping"] == "mma" and picked["shared_layout"] == "pad", picked


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
@pytest.mark.parametrize(("dtype", "precision", "layout"), [
    ("float16", "highest", "swizzle"), ("bfloat16", "highest", "pad"),
    ("float32", "tf32", "pad")])
def test_nvrtc_compiles_mma_kernels(dtype, precision, layout, arch):
    """No header: the mapping's PTX is inline (WMMA's needs mma.h)."""
    kernel = treduda.compile(GEMM, PARTIAL, dtype=dtype, precision=precision,
                             strategy="tensorcore", params={**SMALL, "shared_layout": layout})
    assert "#include <mma.h>" not in kernel.cuda_source
    ptx = compile_nvrtc(kernel.cuda_source, arch)
    assert "mma.sync.aligned.m16n8k" in ptx and "ldmatrix.sync.aligned.m8n8.x4" in ptx


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_the_models_3xtf32_step_counts_the_residuals_rounding():
    """3xTF32 on the mma mapping: the model's step is the SASS main loop's within 20%. Its
    residual piece rounds the values the high piece loaded, 11 instructions a word (the
    model counted a second load and one rounding: 1488 against 2869 a step on GEMM 4096^3)."""
    params = {"warps_m": 2, "warps_n": 4, "frags_m": 4, "frags_n": 2, "frags_k": 2,
              "stages": 2, "split": 1, "async_copy": True, "mapping": "mma",
              "shared_layout": "pad"}
    kernel = treduda.compile(GEMM, {"i": 1024, "j": 1024, "k": 1024}, dtype="float32",
                             precision="3xtf32", strategy="tensorcore", params=params)
    report = sass_report(kernel.cuda_source, "sm_90")[0]
    model = model_of(kernel.program, gpu("H100"), "tensorcore")
    assert report.main_loop_mma == model.step_mmas(params)
    predicted = model.step_instructions(params)
    assert abs(predicted / report.main_loop_instructions - 1) < 0.2, (
        predicted, report.main_loop_instructions)


def test_3xtf32_holds_no_more_accumulators_than_a_warp_keeps_in_registers():
    """3xTF32 keeps two accumulators per fragment product: 4x4 fragments (32 accumulators)
    spilled (255 registers), so they are refused where 2x4 are not."""
    sizes, tiles = {"i": 70, "j": 50, "k": 40}, {"warps_m": 1, "warps_n": 1, "frags_k": 2,
                                                 "mapping": "mma"}
    with pytest.raises(StrategyError, match="accumulator fragments"):
        treduda.compile(GEMM, sizes, dtype="float32", precision="3xtf32",
                        strategy="tensorcore", params={**tiles, "frags_m": 4, "frags_n": 4})
    assert treduda.compile(GEMM, sizes, dtype="float32", precision="3xtf32",
                           strategy="tensorcore",
                           params={**tiles, "frags_m": 2, "frags_n": 4}).verify().ok
