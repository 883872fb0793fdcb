"""Free boxes of the tensor-core strategy (:func:`treduda.strategies.tensorcore_tiles.free_box`):
where the output's fastest index ``o`` follows another index ``c`` of its group in the
operand's memory order (tccg_31's ``A[d,e,g,a]``, output ``C[a,...]``), the group is
linearised as P values of ``c`` by Q of ``o``, so that the operand's copies read runs of P and
the output's writes runs of Q."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import bound_paths_hold, in_layout
from treduda.strategies import tensorcore_tiles as tiles

import treduda
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import get
from treduda.run.nvcc import nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load
from treduda.tuning.search import Searcher

TCCG_31 = "C[a,b,c,d,e,f]=A[d,e,g,a]*B[g,f,b,c]"  # the box on A's M: d_e by a
TCCG_33 = "C[a,b,c,d,e,f]=A[d,e,g,c]*B[g,f,a,b]"  # on B's N: f by a_b (rows along K)
TCCG_34 = "C[a,b,c,d,e,f]=A[d,f,g,a]*B[g,e,b,c]"  # on A's M: d and f fused by a
# partial tiles everywhere: M = 12 x 24, N = 5 x 3 x 7 (tccg_31); P = 8 of d_e, Q = 4 of a
SMALL_31 = {"a": 12, "b": 5, "c": 3, "d": 6, "e": 4, "f": 7, "g": 10}
SMALL_33 = {"a": 4, "b": 6, "c": 5, "d": 3, "e": 2, "f": 6, "g": 9}
SMALL_34 = {"a": 12, "b": 5, "c": 3, "d": 4, "e": 7, "f": 6, "g": 10}  # d, f: 24, P = 8
PARAMS = {"warps_m": 2, "warps_n": 1, "frags_m": 1, "frags_n": 2, "frags_k": 1, "split": 1,
          "stages": 2, "mapping": "mma", "shared_layout": "pad", "async_copy": True,
          "free_layout": "box"}


TCCG_31_SIZES = {"a": 24, "b": 20, "c": 20, "d": 24, "e": 20, "f": 20, "g": 24}
WARPGROUP = {"warpgroups": 1, "frags_m": 1, "tile_n": 64, "frags_k": 1, "stages": 2,
             "async_copy": True, "free_layout": "box"}


def _compile(expression: str, sizes: dict, layout: str = "F", **params) -> treduda.Kernel:
    return treduda.compile(expression, sizes, dtype=params.pop("dtype", "float16"),
                           layout=layout, strategy="tensorcore", cache=False,
                           deterministic=params.pop("deterministic", False),
                           params={**PARAMS, **params})


@pytest.mark.parametrize(("expression", "box"), [
    (TCCG_31, tiles.FreeBox("m", ("d_e",), "a", 16, 8)),
    (TCCG_33, tiles.FreeBox("n", ("f",), "a_b", 4, 32)),
    (TCCG_34, tiles.FreeBox("m", ("d", "f"), "a", 16, 8)),  # d and f fused
    ("C[a,b,c,d,e,f]=A[d,e,g,b]*B[g,f,a,c]", tiles.FreeBox("n", ("f",), "a", 4, 8)),
    ("C[a,b,c,e]=A[b,d,c,a]*B[d,e]", None),  # b and c apart in A: no run of both
    ("C[a,b,c]=A[a,d,b]*B[d,c]", None),  # A's order keeps a first: nothing to box
    ("C[i,j] = A[i,k] * B[k,j]", None)])
def test_a_box_is_offered_where_an_index_precedes_the_outputs_fastest(expression, box):
    sizes = {i: 20 if i in "bcef" else 24
             for i in re.findall(r"[a-z]", expression.split("=")[1])}
    program = plan(expression, sizes, "F", "float16")
    assert tiles.free_box(program) == box
    offered = get("tensorcore").space(program).parameter("free_layout").values
    assert offered == (("group", "box") if box else ("group",))


@pytest.mark.parametrize("strategy", ["tensorcore", "warpgroup"])
def test_the_description_says_where_a_group_is_boxed(strategy):
    """``order`` (what a user reads of the kernel) lists a boxed group from its contiguous
    indices (``d_e`` before ``a``); an open ``free_layout`` leaves both orders open."""
    program = plan(TCCG_31, SMALL_31, "F", "float16")
    mapping = get(strategy)
    orders = {layout: mapping.geometry(program, {"free_layout": layout})["order"]
              for layout in ("group", "box")}
    assert orders == {"group": ("f*b_c,a*d_e",), "box": ("f*b_c,d_e*a",)}
    assert mapping.geometry(program, {})["order"] == ("f*b_c,a*d_e", "f*b_c,d_e*a")


def test_box_digits_and_the_writes_order_number_every_element_once():
    """The box's digits take every value of the group once, P values of ``c`` side by side
    then Q of ``o``; the write's order takes every element of the C tile once, consecutive
    elements consecutive values of ``o``."""
    program = plan(TCCG_31, SMALL_31, "F", "float16")
    box = tiles.free_box(program)
    assert (box.p, box.q) == (8, 4)
    digits = tiles.group_digits(program, "m", box)
    assert digits == ((("d_e",), 8), (("a",), 4), (("d_e",), 3), (("a",), 3))
    v = np.arange(12 * 24)
    values = tiles.digit_values(digits, v, program.sizes, tiles.NUMPY)
    assert len({(int(x), int(y)) for x, y in zip(values["d_e"], values["a"], strict=True)}) \
        == v.size
    assert values["d_e"][:8].tolist() == list(range(8)) and values["a"][8] == 1
    tile = {"m": 64, "n": 32}
    e = np.arange(64 * 32)
    m, n = tiles.output_local(e, tile, False, box, tiles.NUMPY)
    assert len(set(zip(m.tolist(), n.tolist(), strict=True))) == e.size
    assert np.all((m < 64) & (n < 32))
    a = tiles.digit_values(digits, m[:4], program.sizes, tiles.NUMPY)["a"]
    assert a.tolist() == [0, 1, 2, 3] and len(set(n[:4].tolist())) == 1


def test_the_box_reads_and_writes_whole_runs_without_conflicts():
    """tccg_31's box (16 x 8): A by cp.async in 16-byte runs at its ideal sectors a request
    (a value of ``a`` per element before: 24 where 2 do), the C tile read Q values of ``a`` at
    once on 32 banks (its rows skewed), the output written in runs of 8; the model counts
    the sectors the emulator does."""
    sizes = {"a": 16, "b": 4, "c": 2, "d": 8, "e": 4, "f": 2, "g": 24}
    params = {"warps_m": 2, "frags_m": 4, "frags_n": 1, "frags_k": 2}
    kernel = _compile(TCCG_31, sizes, **params)
    counted = kernel.counters(steps=1)
    loads = counted.of("A", "ldgsts")
    assert loads.width == 16 and loads.per_request == loads.ideal_per_request
    assert counted.worst_ways() == 1
    model = model_of(kernel.program, gpu("H100"), "tensorcore")
    requests, sectors, _, _ = model.copy_sectors(kernel.params, steps=1)["A"]
    assert sectors / requests == loads.per_request
    written = next(t for t in counted.traffic if (t.array, t.operation) == ("C", "st"))
    assert model.write_sectors(kernel.params)[:2] == (written.requests, written.transactions)
    assert written.transactions == 2 * written.ideal  # runs of 8 values (16 bytes)


@pytest.mark.matrix  # about 40 s here: an exhaustive enumeration
def test_the_bound_stays_below_every_estimate_where_boxes_are_offered():
    """The space with free boxes, searched without regrets: branch and bound finds the best
    the exhaustive enumeration does."""
    searcher = Searcher(plan(TCCG_31, SMALL_31 | {"a": 48, "g": 24}, "F", "float16"), "H100",
                        "tensorcore")
    assert bound_paths_hold(searcher) > 100
    best = searcher.branch_and_bound().best
    assert best.prediction.seconds == searcher.exhaustive().best.prediction.seconds


@pytest.mark.parametrize(("expression", "sizes", "layout", "params"), [
    (TCCG_34, SMALL_34, "F", {}),  # on A, fused
    (in_layout(TCCG_33, "C"), SMALL_33, "C", {}),  # on B
    ("C[a,b,c,d,e,f] += alpha*A[d,e,g,a]*B[g,f,b,c]", SMALL_31, "F", {"stages": 3})])
def test_box_kernels_match_einsum_without_hazards(expression, sizes, layout, params):
    """One kernel per path in the default run: the box on A (fused), on B, and a scaled
    update, whose write reads C through the box's order (the other forms: ``-m matrix``)."""
    kernel = _compile(expression, sizes, layout, **params)
    assert tiles.free_boxed(kernel.program, kernel.params) is not None
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok  # raises on a hazard


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "sizes", "params"), [
    ("C[a,b,c,d,e,f] = alpha*A[d,e,g,a]*B[g,f,b,c] + beta*C[a,b,c,d,e,f]", SMALL_31,
     {"stages": 3}),
    ("C[a,b,c,d,e,f] += A[d,e,g,a]*B[g,f,b,c]", SMALL_31, {"stages": 1}),
    (TCCG_31, SMALL_31, {"async_copy": False}),  # through registers
    (TCCG_31, SMALL_31, {"mapping": "wmma"}),
    (TCCG_31, SMALL_31, {}),
    (TCCG_31, SMALL_31 | {"g": 40}, {"shared_layout": "swizzle", "frags_k": 2, "frags_m": 2,
                                      "frags_n": 2}),
    (TCCG_31, SMALL_31 | {"g": 40}, {"split": 2, "deterministic": True}),
    (TCCG_31, SMALL_31, {"dtype": "bfloat16", "warps_n": 2, "frags_m": 4}),
    (TCCG_33, SMALL_33, {"warps_m": 1, "warps_n": 2}),
    ("C[a,b,c,d,e,f] = alpha*A[d,e,g,c]*B[g,f,a,b] + beta*C[a,b,c,d,e,f]", SMALL_33, {}),
], ids=["alpha_beta", "update", "registers", "wmma", "tccg_31", "swizzle", "split", "bf16",
       "tccg_33", "tccg_33_beta"])
@pytest.mark.parametrize("layout", ["F", "C"])
def test_every_box_form_matches_einsum_without_hazards(expression, sizes, params, layout):
    """The forms the default run leaves out, in both layouts; the emulator's verify runs
    every block and raises HazardError on a hazard."""
    kernel = _compile(in_layout(expression, layout), sizes, layout, **params)
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", pytest.param("sm_90", marks=pytest.mark.matrix)])
def test_box_kernels_compile_to_mma_fed_by_cp_async(arch):
    """tccg_31's box at its size: HMMA fed by ldmatrix, both operands by cp.async (A was
    copied through registers, a value of ``a`` per element)."""
    kernel = _compile(TCCG_31, TCCG_31_SIZES, warps_n=4, frags_m=4, frags_n=4, frags_k=2)
    report = sass_report(kernel.cuda_source, arch)[0]
    assert report.main_loop_opcodes.get("HMMA", 0) > 0
    assert report.main_loop_opcodes.get("LDSM", 0) > 0
    assert report.main_loop_opcodes.get("LDGSTS", 0) > 0
    assert report.main_loop_opcodes.get("LDG", 0) == 0


def _warpgroup(expression: str, sizes: dict, layout: str = "F", **params) -> treduda.Kernel:
    return treduda.compile(expression, sizes, dtype="float16", layout=layout,
                           strategy="warpgroup", cache=False, gpu="H100",
                           params={**WARPGROUP, **params})


@pytest.mark.parametrize(("expression", "sizes", "layout", "params"), [
    (TCCG_31, SMALL_31, "F", {}),
    pytest.param(in_layout(TCCG_33, "C"), SMALL_33, "C", {"tile_n": 128},
                 marks=pytest.mark.matrix),
    pytest.param("C[a,b,c,d,e,f] = alpha*A[d,e,g,a]*B[g,f,b,c] + beta*C[a,b,c,d,e,f]",
                 SMALL_31, "F", {"warpgroups": 2, "stages": 3}, marks=pytest.mark.matrix),
    pytest.param(in_layout("C[a,b,c,d,e,f] += A[d,e,g,a]*B[g,f,b,c]", "C"), SMALL_31, "C",
                 {"stages": 1}, marks=pytest.mark.matrix)])
def test_warpgroup_box_kernels_match_einsum_without_hazards(expression, sizes, layout, params):
    """The warpgroup mapping takes the box as the tensor-core one does (its copies and write
    are the tensor-core builder's)."""
    kernel = _warpgroup(expression, sizes, layout, **params)
    assert tiles.free_boxed(kernel.program, kernel.params) is not None
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok  # raises on a hazard


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_warpgroup_box_kernels_copy_both_operands_by_cp_async():
    """tccg_31 at its size (issue 39: no LDG of operands in the main loop): with the box A's
    tile is copied by cp.async in 16-byte runs too, not through registers."""
    kernel = _warpgroup(TCCG_31, TCCG_31_SIZES, warpgroups=2, tile_n=128, frags_k=2)
    report, = sass_report(kernel.cuda_source, "sm_90a")
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"].get("HGMMA", 0) > 0
    assert "LDGSTS" in kinds["async copy"]
    assert report.main_loop_opcodes.get("LDG", 0) == 0
    if nvrtc_available():
        assert "wgmma.mma_async" in compile_nvrtc(kernel.cuda_source, "compute_90")


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("row", ["tccg_31", pytest.param("tccg_34", marks=pytest.mark.matrix),
                                 pytest.param("tccg_37", marks=pytest.mark.matrix)])
def test_the_h100_search_copies_both_box_operands_by_cp_async(row):
    """tccg_31/34/37 at their sizes (issue 39): the H100 search takes a box with both
    operands copied by cp.async, B's 48-byte rows of K into lines of 64 bytes in the 64-byte
    swizzle (unswizzled, its 16-byte runs took 4 ways, so the search copied B through
    registers); the pick's copies store on 1 way, and its sm_90a SASS runs HGMMA and LDGSTS
    and loads no operand by LDG; NVRTC builds it too."""
    found = next(r for r in load("tccg_fp16") if r.id == row)
    best = treduda.search(found.expression, found.sizes, "H100", dtype="float16",
                          layout=found.layout, strategy="warpgroup", cache=False).best
    kernel = _warpgroup(found.expression, found.sizes, found.layout, **best.params)
    assert tiles.free_boxed(kernel.program, kernel.params) is not None
    assert kernel.params["async_copy"]
    counted = kernel.counters(steps=1)
    assert {t.ways for t in counted.traffic if t.array in ("td_sa", "td_sb")} == {1}
    report, = sass_report(kernel.cuda_source, "sm_90a")
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"].get("HGMMA", 0) > 0 and "LDGSTS" in kinds["async copy"]
    assert report.global_load_widths == {}  # no LDG in the kernel: no operand, no beta
    if nvrtc_available():
        assert "wgmma.mma_async" in compile_nvrtc(kernel.cuda_source, "compute_90")
