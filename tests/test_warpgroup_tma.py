"""The warpgroup mapping's operand tiles moved by the tensor memory accelerator (``tma``):
its kernels against numpy.einsum on PoCL (partial tiles, both layouts, alpha/beta, ``+=``,
a batch, a TCCG row), the emulator's run of the bulk copies' asynchrony (no hazard, and the
hazard a removed wait leaves), nvcc's sm_90a build with UTMALDG and HGMMA and no LDG of
operands, NVRTC's, and the offer: only where the tensors and the tiles allow; boxes over
several indices of a free group (a K-major tile's rows over all of one index and part of the
next, MN-major boxes of a first index with narrower lines), on PoCL, the emulator and nvcc."""

from __future__ import annotations

import pytest
from conftest import without
from treduda.strategies.warpgroup_kernel import tma_fits
from treduda.strategies.warpgroup_tma import box_reason, run_box, tma_reason

import treduda
from treduda.codegen import ir
from treduda.errors import StrategyError
from treduda.model.gpus import gpu
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load, scaled
from treduda.tuning.walk import launch

GEMM = "C[i,j] = A[i,k] * B[k,j]"
PARTIAL = {"i": 104, "j": 72, "k": 104}  # partial tiles of 128 x 64 x 64; strides of 16 bytes
TILES = {"warpgroups": 1, "frags_m": 2, "tile_n": 64, "frags_k": 4, "stages": 3,
         "async_copy": True, "tma": True}


def _compile(expression: str = GEMM, sizes: dict | None = None, dtype: str = "float16",
             layout: str = "C", **params) -> treduda.Kernel:
    return treduda.compile(expression, sizes or PARTIAL, dtype=dtype, layout=layout,
                           strategy="warpgroup", params={**TILES, **params})


def _statements(kernel: treduda.Kernel, kind: type) -> list:
    return [s for s in ir.nested(kernel.built.kernel.body) if isinstance(s, kind)]


@pytest.mark.parametrize("layout", ["C", "F"])  # K-major A and MN-major B, and the converse
def test_bulk_copied_tiles_match_einsum_without_hazards(layout):
    kernel = _compile(layout=layout)
    assert {c.map for c in _statements(kernel, ir.TensorCopy)} == {"td_map_A", "td_map_B"}
    # the walk the bench reports a launch by (blocks, waves) passes the mbarrier statements
    assert launch(kernel, gpu("H100")).blocks == 2  # 128 x 64 tiles of 104 x 72
    assert not _statements(kernel, ir.AsyncCopy) and not _statements(kernel, ir.ProxyFence)
    assert kernel.verify().ok
    assert kernel.hazards() == []
    # without the phase waits the MMAs read boxes in flight
    assert "unfinished tensor copy" in {h.kind for h in without(kernel, ir.MbarrierWait)
                                        .hazards()}


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "sizes", "dtype", "stages"), [
    ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", PARTIAL, "bfloat16", 2),
    ("C[i,j] += A[k,i] * B[j,k]", PARTIAL, "float16", 1),
    ("C[b,i,j] = A[b,i,k]*B[b,k,j]", {**PARTIAL, "b": 2}, "float16", 4),
])
def test_updates_batches_and_stages_match_einsum_without_hazards(expression, sizes, dtype,
                                                                  stages):
    kernel = _compile(expression, sizes, dtype, stages=stages)
    assert kernel.verify().ok and kernel.hazards() == []
    # two steps' copies into a single buffer: the second overwrites what the MMAs read
    if stages == 1:
        assert "unfinished wgmma" in {h.kind for h in without(kernel, ir.WarpgroupWait)
                                      .hazards()}


@pytest.mark.matrix
@pytest.mark.parametrize(("dtype", "expression", "layout"), [
    ("float16", GEMM, "C"), ("bfloat16", "C[i,j] += A[i,k] * B[k,j]", "F")])
def test_bulk_copies_of_a_split_reduction_match_einsum(dtype, expression, layout):
    """Each part's copies start at its own K: the coordinates follow the part's steps."""
    kernel = treduda.compile(expression, {**PARTIAL, "k": 520}, dtype=dtype, layout=layout,
                             strategy="warpgroup", params={**TILES, "split": 4},
                             deterministic=True)
    assert kernel.verify().ok and kernel.hazards() == []


@pytest.mark.matrix
def test_a_tccg_row_in_fp16_matches_einsum():
    row = next(r for r in load("tccg_fp16") if r.id == "tccg_09")
    sizes = scaled(row.sizes)
    kernel = treduda.compile(row.expression, sizes, dtype="float16", layout=row.layout,
                             strategy="warpgroup", params={**TILES, "frags_m": 1,
                                                           "tile_n": 32})
    assert _statements(kernel, ir.TensorCopy) and kernel.verify().ok and kernel.hazards() == []


def test_offered_only_where_the_tensors_and_tiles_allow():
    """Rows of 100 float16 values (200 bytes) have no tensor map; TF32 tiles are K-major
    while a row-major B is N-major; a step of 16 values of K's fastest index where it holds
    8 spans two values of the next."""
    assert tma_reason(plan(GEMM, PARTIAL, dtype="float16")) is None
    assert "200 bytes" in tma_reason(plan(GEMM, {**PARTIAL, "k": 100}, dtype="float16"))
    assert "float32" in tma_reason(plan(GEMM, PARTIAL, dtype="float32", precision="tf32"))
    with pytest.raises(StrategyError, match="one box"):
        _compile("C[i,j] = A[i,k,l] * B[k,j,l]", {"i": 64, "j": 64, "k": 24, "l": 8},
                 frags_m=1, frags_k=1, stages=2)


@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
def test_nvcc_builds_utmaldg_and_hgmma_with_no_ldg_of_operands():
    kernel = _compile(sizes={"i": 4096, "j": 4096, "k": 4096}, warpgroups=2, frags_m=1,
                      tile_n=128)
    report, = sass_report(kernel.cuda_source, "sm_90")
    assert report.arch == "sm_90a"
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HGMMA": 4}
    opcodes = {opcode.split(".")[0] for opcode in report.main_loop_opcodes}
    assert "UTMALDG" in opcodes and "LDGSTS" not in opcodes
    assert not report.global_load_widths  # no LDG of operands anywhere in the kernel
    # one thread issues the copies: the other warps branch over its block
    assert 0 < report.main_loop_one_warp and (report.others_non_mma_per_mma
                                              < report.non_mma_per_mma)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (CUDA toolkit) not installed")
def test_nvrtc_compiles_the_bulk_copies_for_sm_90a():
    ptx = compile_nvrtc(_compile(dtype="bfloat16").cuda_source, "compute_90")
    assert ".target sm_90a" in ptx and "cp.async.bulk.tensor.2d" in ptx


# M = (a, b), A's a after K: a K-major tile of 64 rows is all 16 of a by 4 of b (3-D boxes,
# b's 7 values partial); M = (a, b), A's a fastest: an MN-major tile's boxes of 32 values of
# a (64-byte lines, a's 32 values in whole), of one b. Each with partial tiles of N and K.
SEVERAL = [("C[b,n,a] += A[b,a,k] * B[k,n]", {"a": 16, "b": 7, "k": 72, "n": 40}, "C",
            (32, 16, 4)),
           ("C[a,n,b] = alpha*A[a,b,k]*B[k,n] + beta*C[a,n,b]",
            {"a": 32, "b": 5, "k": 72, "n": 40}, "F", (32, 1, 32))]
SMALL = {"frags_m": 1, "tile_n": 32, "frags_k": 2}


@pytest.mark.parametrize(("expression", "sizes", "layout", "box"), SEVERAL)
def test_boxes_over_several_indices_match_einsum_without_hazards(expression, sizes, layout,
                                                                  box):
    kernel = _compile(expression, sizes, layout=layout, **SMALL)
    a_map, = (m for m in kernel.built.kernel.tensor_maps if m.tensor == "A")
    assert a_map.box == box and a_map.swizzle == 64
    assert not _statements(kernel, ir.AsyncCopy)
    assert kernel.verify().ok and kernel.hazards() == []



@pytest.mark.matrix
@pytest.mark.parametrize("row_id", ["tccg_03", "tccg_10"])  # A's M, B's N over several indices
def test_tccg_rows_boxed_over_several_indices_match_einsum(row_id):
    row = next(r for r in load("tccg_fp16") if r.id == row_id)
    kernel = treduda.compile(row.expression, scaled(row.sizes), dtype="float16",
                             layout=row.layout, strategy="warpgroup", params={**TILES, **SMALL})
    assert any(len(m.box) > 2 for m in kernel.built.kernel.tensor_maps)
    assert kernel.verify().ok and kernel.hazards() == []

def test_a_run_of_a_group_is_a_box_where_it_holds_whole_indices_then_part_of_one():
    assert run_box((16, 7), 64) == (16, 4)  # all of a, 4 of b (the last: past 7 reads zeros)
    assert run_box((128, 5), 64) == (64, 1)  # part of a, inside one value of b
    assert run_box((96,), 128) == (128,)  # one index: the partial tile's rows read zeros
    assert run_box((16, 6, 3), 64) is None  # tile 1 holds b 4, 5 of c 0 and b 0, 1 of c 1
    assert run_box((24, 20), 64) is None  # 64 rows of a's 24 values: no whole number of a


def test_tiles_without_boxes_say_why():
    """M = (a, b) of 24 x 7 takes no box of 64 rows; A's fastest index of 24 values fills no
    swizzled line (16-bit: 16, 32 or 64 values); A holding M's indices in the other order
    spans them in another order than the tile's rows."""
    tile = {"m": 64, "n": 32, "k": 32}
    ragged = plan("C[b,n,a] = A[b,a,k] * B[k,n]", {"a": 24, "b": 7, "k": 72, "n": 40},
                  dtype="float16")
    assert "are no box" in box_reason(ragged, "A", tile, 32, {"k": 72})
    assert not tma_fits(ragged, {**TILES, **SMALL})
    narrow = plan("C[a,n,b] = A[a,b,k] * B[k,n]", {"a": 24, "b": 5, "k": 72, "n": 40},
                  dtype="float16", layout="F")
    assert "(24 values) fills no swizzled line" in tma_reason(narrow)
    # tccg_40's A[g,d,a,b] (F: g, d, a_b fastest first), M = (a_b, d) in the output's order:
    # 64 rows are all 32 of a_b by 2 of d, which A holds the other way round
    row = next(r for r in load("tccg_fp16") if r.id == "tccg_40")
    swapped = plan(row.expression, {**row.sizes, "a": 4, "b": 8}, dtype="float16",
                   layout=row.layout)
    assert "in another order" in box_reason(swapped, "A", tile, 32, {"g": 24})


@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
def test_nvcc_builds_boxes_over_several_indices_with_no_ldg_of_operands():
    """tccg_20 (A[a,e,b,f], M = (a, b) with a of 96 fastest; B[d,f,c,e], N = (d, c) with d
    of 96 fastest, F layout): boxes of 32 values of a and of d in 64-byte lines, two of each
    operand a step."""
    row = next(r for r in load("tccg_fp16") if r.id == "tccg_20")
    kernel = treduda.compile(row.expression, row.sizes, dtype="float16", layout=row.layout,
                             strategy="warpgroup", params={**TILES, "frags_m": 1,
                                                           "tile_n": 64, "frags_k": 2})
    assert {m.swizzle for m in kernel.built.kernel.tensor_maps} == {64}
    report, = sass_report(kernel.cuda_source, "sm_90a")
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HGMMA": 2}
    assert kinds["integer and other"]["UTMALDG"] == 4 and "async copy" not in kinds
    assert not report.global_load_widths
