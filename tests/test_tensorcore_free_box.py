"""Free boxes of the tensor-core strategy (:func:`treduda.strategies.tensorcore_tiles.free_box`):
where the output's fastest index ``o`` follows another index ``c`` of its group in the
operand's memory order (tccg_31's ``A[d,e,g,a]``, output ``C[a,...]``), the group is
linearised as P values of ``c`` by Q of ``o``, so that the operand's copies read runs of P and
the output's writes runs of Q."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from conftest import bound_paths_hold, in_layout
from treduda.strategies import tensorcore_tiles as tiles
from treduda.strategies import warpgroup_kernel

import treduda
from treduda.codegen import ir
from treduda.codegen.warpgroup import accumulator_column
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import get
from treduda.run.nvcc import kernel_names, nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load
from treduda.tuning.search import Searcher

TCCG_31 = "C[a,b,c,d,e,f]=A[d,e,g,a]*B[g,f,b,c]"  # the box on A's M: d_e by a
TCCG_33 = "C[a,b,c,d,e,f]=A[d,e,g,c]*B[g,f,a,b]"  # on B's N: f by a_b (rows along K)
TCCG_34 = "C[a,b,c,d,e,f]=A[d,f,g,a]*B[g,e,b,c]"  # on A's M: d and f fused by a
TCCG_32 = "C[a,b,c,d,e,f]=A[d,e,g,b]*B[g,f,a,c]"  # on B's N: f by a, a padded 24 -> 32
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


def _grid_written(kernel: treduda.Kernel):
    """What ``Kernel.counters()`` counts of the output's stores over every block of the grid
    (no step of the main loop: the write follows it), which the models' write sectors count."""
    blocks = list(itertools.product(*map(range, kernel.grid)))
    return next(t for t in kernel.counters(blocks=blocks, steps=0).traffic
                if (t.array, t.operation) == ("C", "st"))


@pytest.mark.parametrize(("expression", "a", "box", "padded", "whole", "full"), [
    (TCCG_31, 24, tiles.FreeBox("m", ("d_e",), "a", 16, 8),
     tiles.FreeBox("m", ("d_e",), "a", 16, 32, 32), tiles.FreeBox("m", ("d_e",), "a", 8, 32, 32),
     tiles.FreeBox("m", ("d_e",), "a", 16, 24)),  # 16 x 24 across tiles: A copied along M
    (TCCG_33, 24, tiles.FreeBox("n", ("f",), "a_b", 4, 32), None, None, None),  # a_b: 480
    (TCCG_34, 24, tiles.FreeBox("m", ("d", "f"), "a", 16, 8),  # d and f fused
     tiles.FreeBox("m", ("d", "f"), "a", 16, 32, 32),
     tiles.FreeBox("m", ("d", "f"), "a", 8, 32, 32), tiles.FreeBox("m", ("d", "f"), "a", 16, 24)),
    (TCCG_32, 24, tiles.FreeBox("n", ("f",), "a", 4, 8),  # P = 4: 256 holds Q already
     tiles.FreeBox("n", ("f",), "a", 4, 32, 32), None,
     tiles.FreeBox("n", ("f",), "a", 4, 24, o_fastest=True)),  # B copied along K: o fastest
    (TCCG_32, 20, tiles.FreeBox("n", ("f",), "a", 4, 4), None, None, None),  # 20 -> 32 pads
    # 60%; 4 x 20 is no multiple of a warp's 32
    ("C[a,b,c,e]=A[b,d,c,a]*B[d,e]", 24, None, None, None, None),  # b and c apart in A
    ("C[a,b,c]=A[a,d,b]*B[d,c]", 24, None, None, None, None),  # A's order keeps a first
    ("C[i,j] = A[i,k] * B[k,j]", 24, None, None, None, None)])
def test_a_box_is_offered_where_an_index_precedes_the_outputs_fastest(expression, a, box,
                                                                        padded, whole, full):
    """An exact box where Q divides ``o``'s size; a padded one (Q of 32) where rounding
    ``o`` up to 32 adds at most a third (24 -> 32, not 20 -> 32); a "whole" one where that
    box's P x Q is wider than the widest tile (256), P narrowed; a "full" one (Q of all 24
    of ``o``) where P x Q is a multiple of 32, within the widest tile where the operand is
    copied along K (its tiles then take ``o`` fastest); both mappings offer each."""
    sizes = {i: 20 if i in "bcef" else a if i == "a" else 24
             for i in re.findall(r"[a-z]", expression.split("=")[1])}
    program = plan(expression, sizes, "F", "float16")
    assert tiles.free_box(program) == box
    boxes = {"group": None, "box": box, "padded": padded, "whole": whole, "full": full}
    assert tiles.free_boxes(program) == {k: v for k, v in boxes.items() if k == "group" or v}
    for mapping in ("tensorcore", "warpgroup"):
        assert get(mapping).space(program).parameter("free_layout").values == tuple(
            k for k, v in boxes.items() if k == "group" or v)


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
    span, _ = tiles.write_span(tile, False, box)
    m, n = tiles.output_local(e % span, e // span, tile, False, box, tiles.NUMPY)
    assert len(set(zip(m.tolist(), n.tolist(), strict=True))) == e.size
    assert np.all((m < 64) & (n < 32))
    a = tiles.digit_values(digits, m[:4], program.sizes, tiles.NUMPY)["a"]
    assert a.tolist() == [0, 1, 2, 3] and len(set(n[:4].tolist())) == 1


@pytest.mark.parametrize(("expression", "layout", "tile"), [
    (TCCG_33, "box", {"m": 128, "n": 256}),  # on N: 4 of f by 8 of a, 8 boxes a tile
    (TCCG_31, "full", {"m": 256, "n": 128})])  # on M: 16 of d_e by 16 of a's 24
def test_a_threads_place_in_the_boxs_group_is_the_same_in_every_write(expression, layout,
                                                                       tile):
    """The write numbers the rest of the box's group before the other group, as the group
    layout numbers it: where the block's threads span the box's group of the tile, a thread
    writes one place of it in every iteration, and nvcc works out that part of the output's
    address and the partial tile's guard once (tccg_33's warpgroup box took 39.5 SASS
    instructions an element in the write's loop, with a guard in each; now 13.9, the group
    layout's). Every element of the tile is written once, and a warp's 32 writes stay in one
    row of the C tile."""
    program = plan(expression, TCCG_31_SIZES, "F", "float16")
    box = tiles.free_boxes(program)[layout]
    threads = tile[box.axis]
    c, t = np.divmod(np.arange(tile["m"] * tile["n"]), threads)
    e = threads * c + t
    span, _ = tiles.write_span(tile, box.axis == "n", box)
    m, n = tiles.output_local(e % span, e // span, tile, box.axis == "n", box, tiles.NUMPY)
    place, across = (n, m) if box.axis == "n" else (m, n)
    assert np.all(place.reshape(-1, threads) == place[:threads])
    assert np.all(across == c)
    assert len(set(zip(m.tolist(), n.tolist(), strict=True))) == c.size
    assert np.all(across.reshape(-1, 32) == across[::32, None])


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
    written = _grid_written(kernel)
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


# The padded class (tccg_32/35/38 on B, 41/44/47 on A): ``a`` of 24 boxed by Q = 32
TCCG_41 = "C[a,b,c,d,e,f]=A[g,d,a,c]*B[e,f,g,b]"  # on A's M: d by a (rows along K)
SMALL_32 = {"a": 24, "b": 5, "c": 3, "d": 6, "e": 4, "f": 12, "g": 10}  # P = 4 of f
SMALL_41 = {"a": 24, "b": 5, "c": 3, "d": 12, "e": 6, "f": 4, "g": 10}  # P = 4 of d
PADDED = {"free_layout": "padded"}
WHOLE = {"B": {"warps_n": 2, "frags_n": 4}, "A": {"frags_m": 4}}  # tiles of 128: boxes of 4 x 32
# The warpgroup's "whole" box (tccg_42/45/48 on B's N: e_f by a, a padded 24 -> 32; P = 8 of
# e_f where the padded box's 16 let a 256-wide tile hold 16 of a); M = 6 x 5 x 3: partial tiles
TCCG_42 = "C[a,b,c,d,e,f]=A[g,d,b,c]*B[e,f,g,a]"
SMALL_42 = {"a": 24, "b": 5, "c": 3, "d": 6, "e": 4, "f": 12, "g": 10}


def test_a_padded_box_numbers_each_element_once_and_its_padding_outside():
    """The padded box's digits take each of ``a``'s 24 values once per value of the rest
    and 8 slots past them (zeros: outside the tensor); its group covers 32 / 24 of N."""
    program = plan(TCCG_32, SMALL_32, "F", "float16")
    box = tiles.free_boxes(program)["padded"]
    assert tiles.group_digits(program, "n", box) == (
        (("f",), 4), (("a",), 32), (("f",), 3), (("c",), 3))
    extents = tiles.group_extents(program, box)
    assert extents == {"m": 6 * 4 * 5, "n": 32 * 3 * 12}
    values = tiles.digit_values(tiles.group_digits(program, "n", box), np.arange(extents["n"]),
                                program.sizes, tiles.NUMPY)
    inside = values["a"] < 24
    assert inside.sum() == 24 * 3 * 12 and values["a"].max() == 31
    assert len({(int(a), int(c), int(f)) for a, c, f in zip(
        values["a"][inside], values["c"][inside], values["f"][inside], strict=True)}) \
        == inside.sum()


@pytest.mark.parametrize(("a", "run", "width"), [(24, 32, 8), (25, 4, 4)])
def test_a_run_of_the_operand_keeps_inside_a_padded_box_s_slots(a, run, width):
    """Where P takes all of ``c`` and ``o`` follows it in the operand (``A[d,a,g]``, ``d`` of
    4), a run of the group continues into ``a``'s 32 slots by as many values as divide its
    size: 8 of 24 (runs all inside or all outside), 1 of 25 (a run of 8 slots of ``a``
    would straddle its end)."""
    program = plan("C[a,d,b]=A[d,a,g]*B[g,b]", {"a": a, "b": 5, "d": 4, "g": 10}, "F",
                   "float16")
    box = tiles.free_boxes(program)["padded"]
    digits = tiles.group_digits(program, "m", box)
    assert digits == ((("d",), 4), (("a",), 32))
    assert tiles.digits_run(program, "A", digits) == run
    assert tiles.copy_widths(program, tiles.gemm_groups(program), free=box)["A"] == width


@pytest.mark.parametrize(("expression", "sizes", "operand"), [
    (TCCG_32, SMALL_32 | {"g": 24}, "B"), (TCCG_41, SMALL_41 | {"g": 24}, "A")])
def test_the_padded_box_reads_its_operand_and_writes_at_the_ideal(expression, sizes, operand):
    """The boxed operand's rows (K runs of 4 values of ``f`` or ``d`` side by side) at its
    ideal sectors a request, the output written 24 values of ``a`` a request (48 bytes: 2
    sectors, where the exact 4 x 8 box takes 4), no bank conflict; the model counts what
    the emulator does, the padding's slots reading and writing nothing."""
    kernel = _compile(expression, sizes, frags_k=2, **PADDED, **WHOLE[operand])
    counted = kernel.counters(steps=1)
    loads = counted.of(operand, "ldgsts")
    assert loads.per_request == loads.ideal_per_request
    assert counted.worst_ways() == 1
    model = model_of(kernel.program, gpu("H100"), "tensorcore")
    requests, sectors, _, _ = model.copy_sectors(kernel.params, steps=1)[operand]
    assert (requests, sectors) == (loads.requests, loads.transactions)
    written = _grid_written(kernel)
    assert model.write_sectors(kernel.params)[:2] == (written.requests, written.transactions)
    assert written.transactions == written.ideal == 2 * written.requests


def test_the_model_counts_the_padded_boxs_wasted_work():
    """A padded box's tiles cover 32 values of ``a`` where 24 are real: 4/3 of the exact
    box's blocks, and their MMA work (the tensor-core resource, quantised to waves)."""
    program = plan(TCCG_32, TCCG_31_SIZES, "F", "float16")
    model = model_of(program, gpu("H100"), "tensorcore")
    params = {**PARAMS, "warps_m": 4, "warps_n": 2, "frags_m": 4, "frags_n": 4, "frags_k": 2}
    tile = {"m": 256, "n": 128}
    exact, padded = ({**params, "free_layout": layout} for layout in ("box", "padded"))
    assert 3 * model.tiles(tile, padded) == 4 * model.tiles(tile, exact)
    ratio = model.estimate(padded).resources["mma"] / model.estimate(exact).resources["mma"]
    assert 1.25 < ratio < 1.4


@pytest.mark.parametrize(("expression", "sizes", "layout", "params"), [
    (in_layout("C[a,b,c,d,e,f] += alpha*A[g,d,a,c]*B[e,f,g,b]", "C"), SMALL_41, "C",
     {"stages": 3}),  # on A, scaled update
    pytest.param(TCCG_32, SMALL_32, "F", {"frags_m": 1, **WHOLE["B"]},
                 marks=pytest.mark.matrix)])  # on B
def test_padded_box_kernels_match_einsum_without_hazards(expression, sizes, layout, params):
    """The padded box on A in the default run (on B and the other forms: ``-m matrix``):
    partial tiles, whole boxes of zeros past ``a``'s 24 values."""
    kernel = _compile(expression, sizes, layout, **{**PADDED, **WHOLE["A"], **params})
    assert tiles.free_boxed(kernel.program, kernel.params).slots == 32
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok  # raises on a hazard


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "sizes", "params"), [
    ("C[a,b,c,d,e,f] = alpha*A[g,d,a,c]*B[e,f,g,b] + beta*C[a,b,c,d,e,f]", SMALL_41,
     {"stages": 3}),
    ("C[a,b,c,d,e,f] += A[d,e,g,b]*B[g,f,a,c]", SMALL_32, {"stages": 1}),
    (TCCG_41, SMALL_41, {"async_copy": False}),  # through registers
    (TCCG_32, SMALL_32, {"mapping": "wmma"}),
    (TCCG_41, SMALL_41, {"frags_m": 1}),  # a tile of half a box: Q' = 8
    (TCCG_31, SMALL_31 | {"a": 24, "g": 40}, {"shared_layout": "swizzle", "frags_k": 2,
                                              "frags_m": 2, "frags_n": 2}),  # rows along M
    (TCCG_32, SMALL_32 | {"g": 40}, {"split": 2, "deterministic": True}),  # 16-bit: ordered
    (TCCG_41, SMALL_41, {"dtype": "bfloat16", "warps_n": 2}),
    ("C[a,d,b]=A[d,a,g]*B[g,b]", {"a": 25, "b": 20, "d": 4, "g": 10},
     {"frags_m": 2, "frags_n": 1}),  # cp.async runs of d into a's slots, 25 -> 32
], ids=["alpha_beta", "update", "registers", "wmma", "half_box", "swizzle", "split", "bf16",
       "runs_into_a"])
@pytest.mark.parametrize("layout", ["F", "C"])
def test_every_padded_box_form_matches_einsum_without_hazards(expression, sizes, params,
                                                              layout):
    kernel = _compile(in_layout(expression, layout), sizes, layout,
                      **{**PADDED, **WHOLE["A"], **params})
    assert tiles.free_boxed(kernel.program, kernel.params).slots == 32
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", pytest.param("sm_90", marks=pytest.mark.matrix)])
def test_padded_and_full_box_kernels_compile_to_mma_fed_by_cp_async(arch):
    """tccg_32's padded box and its full box (2 x 3 warps of 4 x 4 fragments, as the H100
    search picks it) and tccg_31's full box (``c`` fastest, 4 x 2 warps, the pick) at their
    size, in one nvcc call: HMMA fed by ldmatrix, both operands by cp.async, no LDG in the
    main loop, tccg_32's full box's accumulators stored in pairs; NVRTC (the GPU session's
    compiler) builds them too."""
    shape = {"frags_m": 4, "frags_n": 4, "frags_k": 2}
    sources = [_compile(TCCG_32, TCCG_31_SIZES, warps_m=4, warps_n=2, **shape,
                        **PADDED).cuda_source,
               _compile(TCCG_32, TCCG_31_SIZES, warps_m=2, warps_n=3, **shape,
                        free_layout="full").cuda_source,
               _compile(TCCG_31, TCCG_31_SIZES, warps_m=4, warps_n=2, **shape,
                        free_layout="full").cuda_source]
    reports = sass_report("\n".join(sources), arch)
    assert len(reports) == len(sources)
    for report in reports:
        assert report.main_loop_opcodes.get("HMMA", 0) > 0
        assert report.main_loop_opcodes.get("LDSM", 0) > 0
        assert report.main_loop_opcodes.get("LDGSTS", 0) > 0
        assert report.main_loop_opcodes.get("LDG", 0) == 0
    # the full box's C tile takes o fastest, unskewed: every accumulator pair one STS.64
    full = next(r for r in reports if r.kernel in kernel_names(sources[1]))
    assert set(full.shared_store_widths) == {64}
    if nvrtc_available():
        for source in sources:
            ptx = compile_nvrtc(source, arch.replace("sm_", "compute_"))
            assert "mma.sync" in ptx and "cp.async" in ptx and "ldmatrix" in ptx


# The whole box in the mma.sync mapping: tccg_42's N tile of 4 warps x 4 fragments of 16 (256)
# holds all 32 slots of a by P = 8 of e_f; M = 6 x 5 x 3 in tiles of 16 or 32: partial
WHOLE_MMA = {"free_layout": "whole", "warps_m": 1, "warps_n": 4, "frags_n": 4}


def test_the_mma_whole_box_matches_einsum_and_writes_at_the_ideal():
    """tccg_42's whole box on PoCL and the emulator (hazard-free), its write 2 sectors a
    request (24 values of ``a``, then the next ``b``'s), no bank conflict."""
    kernel = _compile(TCCG_42, SMALL_42, **WHOLE_MMA)
    assert tiles.free_boxed(kernel.program, kernel.params) == tiles.FreeBox(
        "n", ("e_f",), "a", 8, 32, 32)
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    counted = kernel.counters(steps=1)
    written = next(t for t in counted.traffic if (t.array, t.operation) == ("C", "st"))
    assert written.transactions == written.ideal == 2 * written.requests
    assert counted.worst_ways() == 1


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "params"), [
    ("C[a,b,c,d,e,f] = alpha*A[g,d,b,c]*B[e,f,g,a] + beta*C[a,b,c,d,e,f]",
     {"stages": 3, "frags_m": 2}),
    ("C[a,b,c,d,e,f] += A[g,d,b,c]*B[e,f,g,a]", {"stages": 1, "frags_k": 2}),
    (TCCG_42, {"async_copy": False, "warps_n": 2}),  # through registers, a tile of 128
    (TCCG_42, {"shared_layout": "swizzle", "frags_k": 2})],
    ids=["alpha_beta", "update", "registers", "swizzle"])
@pytest.mark.parametrize("layout", ["F", "C"])
def test_every_mma_whole_box_form_matches_einsum_without_hazards(expression, params, layout):
    kernel = _compile(in_layout(expression, layout), SMALL_42 | {"g": 40}, layout,
                      **{**WHOLE_MMA, **params})
    assert tiles.free_boxed(kernel.program, kernel.params).p == 8
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


@pytest.mark.matrix
@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_the_mma_whole_box_compiles_to_mma_fed_by_cp_async():
    """tccg_42's whole box at the row's size on sm_80: HMMA fed by ldmatrix, both operands
    by cp.async, no LDG in the main loop."""
    row = next(r for r in load("tccg_fp16") if r.id == "tccg_42")
    kernel = _compile(row.expression, row.sizes, row.layout,
                      **{**WHOLE_MMA, "warps_m": 2, "frags_m": 4, "frags_k": 2})
    report = sass_report(kernel.cuda_source, "sm_80")[0]
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
                 {"stages": 1}, marks=pytest.mark.matrix),
    (TCCG_41, SMALL_41, "F", {"free_layout": "padded", "frags_m": 2}),  # M 128: a whole box
    pytest.param(in_layout("C[a,b,c,d,e,f] = alpha*A[d,e,g,b]*B[g,f,a,c]", "C"), SMALL_32, "C",
                 {"free_layout": "padded", "tile_n": 128, "stages": 3},
                 marks=pytest.mark.matrix),
    pytest.param(TCCG_31, SMALL_31 | {"a": 24, "g": 40}, "F",  # the H100 pick's form on tccg_31
                 {"free_layout": "padded", "warpgroups": 2, "frags_m": 2, "frags_k": 2,
                  "stages": 1, "async_copy": False}, marks=pytest.mark.matrix),
    (TCCG_42, SMALL_42, "F", {"free_layout": "whole", "tile_n": 256}),
    pytest.param(in_layout("C[a,b,c,d,e,f] = alpha*A[g,d,b,c]*B[e,f,g,a] + beta*C[a,b,c,d,e,f]",
                           "C"), SMALL_42, "C",
                 {"free_layout": "whole", "tile_n": 256, "warpgroups": 2, "stages": 3},
                 marks=pytest.mark.matrix),
    pytest.param("C[a,b,c,d,e,f] += A[g,d,b,c]*B[e,f,g,a]", SMALL_42, "F",
                 {"free_layout": "whole", "tile_n": 128, "frags_k": 2, "stages": 1,
                  "async_copy": False}, marks=pytest.mark.matrix),
    (TCCG_31, SMALL_31 | {"a": 24, "d": 8, "e": 6}, "F",  # on A's M: P = 8
     {"free_layout": "whole", "warpgroups": 2, "frags_m": 2, "frags_k": 2, "tile_n": 128}),
    (TCCG_42, SMALL_42 | {"e": 8, "f": 2, "g": 24}, "F",  # the H100 pick's form: c fastest
     {"free_layout": "full", "tile_n": 256, "frags_k": 2})])
def test_warpgroup_box_kernels_match_einsum_without_hazards(expression, sizes, layout, params):
    """The warpgroup mapping takes the box, exact, padded or whole, as the tensor-core one
    does (its copies and write are the tensor-core builder's)."""
    kernel = _warpgroup(expression, sizes, layout, **params)
    assert tiles.free_boxed(kernel.program, kernel.params) is not None
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok  # raises on a hazard


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize(("expression", "layout"), [
    (TCCG_31, "box"), pytest.param(TCCG_32, "padded", marks=pytest.mark.matrix)])
def test_warpgroup_box_kernels_copy_both_operands_by_cp_async(expression, layout):
    """tccg_31 at its size (issue 39: no LDG of operands in the main loop): with the box A's
    tile is copied by cp.async in 16-byte runs too, not through registers; tccg_32's padded
    box copies both by cp.async as well."""
    kernel = _warpgroup(expression, TCCG_31_SIZES, warpgroups=2, tile_n=128, frags_k=2,
                        free_layout=layout)
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
                                 pytest.param("tccg_37", marks=pytest.mark.matrix), "tccg_42",
                                 pytest.param("tccg_45", marks=pytest.mark.matrix),
                                 pytest.param("tccg_48", marks=pytest.mark.matrix)])
def test_the_h100_search_copies_both_box_operands_by_cp_async(row):
    """tccg_31/34/37 and 42/45/48 at their sizes (issue 39): the H100 search takes a box with
    both operands copied by cp.async, B's 48-byte rows of K into lines of 64 bytes in the
    64-byte swizzle (unswizzled, its 16-byte runs took 4 ways, so the search copied B through
    registers); the full box since ``c`` stays fastest in it (16 x 24, nothing padded; the
    group layout's element copies of the boxed operand went by LDG); the pick's copies store
    on 1 way, and its sm_90a SASS runs HGMMA and LDGSTS and loads no operand by LDG; NVRTC
    builds it too."""
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


def test_branch_and_bound_keeps_the_box_the_exhaustive_search_picks():
    """tccg_42 at its size on the H100 model: the bound stays below every estimate in the
    warpgroup space with the free boxes, and branch and bound finds the pick the exhaustive
    enumeration does, the whole box: its write takes 1.25 lines a request over the grid
    where the full box's takes 2.83 (2.0 on the first block, which alone was counted
    before: the full box won), worth the third more blocks its 24 -> 32 pads."""
    searcher = Searcher(plan(TCCG_42, TCCG_31_SIZES | {"d": 20, "e": 24}, "F", "float16"),
                        "H100", "warpgroup")
    assert bound_paths_hold(searcher) > 100
    best = searcher.branch_and_bound().best
    assert best.prediction.seconds == searcher.exhaustive().best.prediction.seconds
    assert best.params["free_layout"] == "whole"


def test_the_whole_box_writes_at_the_ideal_in_fewer_lines_than_the_padded_one():
    """tccg_42's shape in a 256-wide tile: the whole box writes 24 values of ``a`` then the
    next ``b``'s, 2 sectors a request (the ideal) in fewer 128-byte lines than the padded
    box's 16 of ``a`` at once; the warpgroup model counts what the emulator does."""
    counted, lines = {}, {}
    for layout in ("whole", "padded"):
        kernel = _warpgroup(TCCG_42, SMALL_42 | {"g": 24}, free_layout=layout, tile_n=256,
                            frags_k=2)
        counted[layout] = _grid_written(kernel)
        modelled = model_of(kernel.program, gpu("H100"), "warpgroup").write_sectors(
            kernel.params)
        assert modelled[:2] == (counted[layout].requests, counted[layout].transactions)
        lines[layout] = modelled[3]
    whole = counted["whole"]
    assert whole.transactions == whole.ideal == 2 * whole.requests
    assert lines["whole"] < lines["padded"]


def test_the_whole_boxs_crossed_rows_keep_the_accumulator_pairs_on_one_way():
    """tccg_42's whole box along N (P = 8, Q' = 32: a skew of 1 word per 32): skewed, the
    C tile held every other block's accumulator pairs at odd columns, 64 4-byte stores of
    2 ways beside 32 8-byte ones; crossed (:func:`warpgroup_kernel.crossed`), every pair
    is one 8-byte store at the ideal wavefronts and the write's reads still take 1 way.
    (The kernel matches einsum on PoCL and the emulator:
    test_warpgroup_box_kernels_match_einsum_without_hazards.)"""
    kernel = _warpgroup(TCCG_42, SMALL_42 | {"g": 24}, free_layout="whole", tile_n=256,
                        frags_k=2)
    c_tile = {t.operation: t for t in kernel.counters(steps=1).traffic if t.array == "td_sc"}
    stores, loads = c_tile["st"], c_tile["ld"]
    assert stores.width == 8 and stores.ways == 1 and stores.transactions == stores.ideal
    assert loads.ways == 1
    tile = warpgroup_kernel.warpgroup_tile(kernel.params, kernel.program)
    box = tiles.free_boxed(kernel.program, kernel.params)
    assert warpgroup_kernel.crossed_words(kernel.program, box, tile) == 1


@pytest.mark.parametrize("words", [1, 2, 4, 8, 16])
def test_a_crossed_row_keeps_pairs_whole_and_aligned(words):
    """:func:`warpgroup_kernel.crossed` and :meth:`WarpgroupBuilder.stored` agree: a row's
    columns placed once each within its skewed extent, a pair of columns at an even column
    and the next; a thread's store of each register goes where the crossing puts the
    accumulator it writes, at its pair's columns in order, a constant from its own column;
    the reads of 32 values of ``o`` 8 apart at one ``c`` (tccg_42's) take 32 banks."""
    position = np.arange(256)
    placed = ir.evaluate(warpgroup_kernel.crossed(ir.Var("n"), words), {"n": position})
    assert len(set(placed)) == 256 and placed.max() < tiles.skewed_extent(256, words)
    assert (placed[0::2] // 2 == placed[1::2] // 2).all()  # one aligned pair, maybe swapped
    if words > 1:
        assert (placed == position + words * (position // 32)).all()  # the skew itself
        return
    for c in range(8):
        assert len(set(placed[c + 8 * np.arange(32)] % 32)) == 32
    program = plan(TCCG_42, SMALL_42 | {"g": 24}, "F", "float16")
    builder = warpgroup_kernel.WarpgroupBuilder(program, {
        **get("warpgroup").defaults(program), "free_layout": "whole", "tile_n": 256,
        "frags_k": 2})
    lane, register = np.meshgrid(np.arange(128), np.arange(128), indexing="ij")
    target, read = builder.stored(ir.Int(0), ir.Var("l"), ir.Var("r"))
    column = ir.evaluate(target.indices[1], {"l": lane, "r": register})
    written = ir.evaluate(read, {"l": lane, "r": register})
    own = ir.evaluate(accumulator_column(ir.Var("l"), ir.Var("r")), {"l": lane, "r": written})
    assert (column == ir.evaluate(warpgroup_kernel.crossed(ir.Var("n"), 1), {"n": own})).all()
    assert (column % 2 == register % 2).all() and (written // 2 == register // 2).all()
    mine = ir.evaluate(accumulator_column(ir.Var("l"), ir.Var("r")), {"l": lane, "r": register})
    assert (column - mine == (column - mine)[:1]).all()  # the same for every lane


# The full box (tccg_32/35/38 on B, 41/44/47 on A): Q of all 24 values of ``a`` by P = 4,
# nothing padded; its tiles hold whole boxes of 96, so 3 warps along the box's group
FULL = {"free_layout": "full"}
FULL_TILES = {"B": {"warps_n": 3, "frags_n": 4}, "A": {"warps_m": 3, "frags_m": 2}}


def test_three_warps_only_tile_whole_full_boxes():
    """The box's group alone takes 3 warps, and only with the full box, whose tiles must be
    multiples of P x Q = 96 (a tile of 128 would split a box, and the write's numbering takes
    whole ones)."""
    program = plan(TCCG_32, TCCG_31_SIZES, "F", "float16")
    space = get("tensorcore").space(program)
    assert space.parameter("warps_n").values == (1, 2, 3, 4)
    assert space.parameter("warps_m").values == (1, 2, 4)
    chosen = {**PARAMS, "warps_m": 2, "frags_m": 4, "frags_n": 4, "frags_k": 2}
    assert not space.violated({**chosen, "warps_n": 3, "free_layout": "full"})
    assert space.violated({**chosen, "warps_n": 2, "free_layout": "full"})
    assert space.violated({**chosen, "warps_n": 3, "free_layout": "group"})


@pytest.mark.parametrize(("expression", "sizes", "operand"), [
    ("C[a,b,c,d,e,f] = alpha*A[d,e,g,b]*B[g,f,a,c] + beta*C[a,b,c,d,e,f]",
     SMALL_32 | {"g": 24}, "B"),
    pytest.param(TCCG_41, SMALL_41 | {"g": 24}, "A", marks=pytest.mark.matrix)])
def test_the_full_box_reads_its_operand_at_the_ideal_without_conflicts(expression, sizes,
                                                                       operand):
    """On PoCL and the emulator (hazard-free; partial tiles: N = 12 x 24 x 3 in tiles of
    192; alpha and beta on B): the boxed operand's rows (4 rows of ``g``'s 24 values, 192
    bytes side by side) at the ideal sectors a request (the group layout's took 16 where 12
    do), no bank conflict anywhere (the C tile's reads of 24 values of ``a``, 4 apart); the
    model counts the copies' and the write's sectors as the emulator does."""
    kernel = _compile(expression, sizes, frags_k=2, **FULL, **FULL_TILES[operand])
    assert tiles.free_boxed(kernel.program, kernel.params).q == 24
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    counted = kernel.counters(steps=1)
    loads = counted.of(operand, "ldgsts")
    assert loads.per_request == loads.ideal_per_request
    assert max(t.ways for t in counted.traffic) == 1  # every shared request, C tile's too
    model = model_of(kernel.program, gpu("H100"), "tensorcore")
    requests, sectors, _, _ = model.copy_sectors(kernel.params, steps=1)[operand]
    assert (requests, sectors) == (loads.requests, loads.transactions)
    written = _grid_written(kernel)
    assert model.write_sectors(kernel.params)[:2] == (written.requests, written.transactions)


# The full box where the operand is copied along its group (tccg_31/34/37 on A, 42/45/48 on
# B): P = 16 of d_e (a sector) by all 24 of a, c kept fastest; a tile of 256 holds 16 values of
# a (box_q), 128 holds 8. M = 24 x 8 x 2 = 384 in tiles of 256: partial; N = 5 x 3 x 7
SMALL_31_FULL = SMALL_31 | {"a": 24, "d": 8, "e": 2, "g": 24}
SMALL_42_FULL = SMALL_42 | {"e": 8, "f": 2, "g": 24}
ALONG = {"A": {"warps_m": 4, "frags_m": 4}, "B": {"warps_n": 2, "frags_n": 4}}


def test_a_full_box_copied_along_its_group_keeps_c_fastest_in_powers_of_two():
    """tccg_31's full box keeps ``d_e`` fastest (its copies' runs of 16), so its tiles hold
    a power of two of ``a`` (the write's skew spreads those only): 4 or 2 warps of 64 rows,
    not 3 (12 of ``a``); tccg_32's (B copied along K) takes ``a`` fastest in tiles of 96."""
    program = plan(TCCG_31, TCCG_31_SIZES, "F", "float16")
    box = tiles.free_boxes(program)["full"]
    assert not tiles.o_first(box)
    assert tiles.group_digits(program, "m", box) == ((("d_e",), 16), (("a",), 24),
                                                     (("d_e",), 30))
    assert [m for m in (64, 128, 192, 256) if tiles.holds_boxes(box, {"m": m})] == [64, 128,
                                                                                    256]
    assert tiles.box_q(box, {"m": 256}) == 16
    assert tiles.o_first(tiles.free_boxes(plan(TCCG_32, TCCG_31_SIZES, "F", "float16"))["full"])


@pytest.mark.parametrize(("expression", "sizes", "operand", "params"), [
    ("C[a,b,c,d,e,f] = alpha*A[d,e,g,a]*B[g,f,b,c] + beta*C[a,b,c,d,e,f]", SMALL_31_FULL, "A",
     ALONG["A"]),
    pytest.param(TCCG_42, SMALL_42_FULL, "B", ALONG["B"], marks=pytest.mark.matrix),
    pytest.param(TCCG_31, SMALL_31_FULL, "A", {"warps_m": 2, "frags_m": 4},
                 marks=pytest.mark.matrix)], ids=["alpha_beta", "on_b", "tile_128"])
def test_the_full_box_along_its_group_reads_both_operands_at_the_ideal(expression, sizes,
                                                                       operand, params):
    """On PoCL and the emulator (hazard-free; partial M and N tiles, alpha and beta): the
    boxed operand in runs of 16 values of ``d_e`` (whole sectors; the whole box's 8 took
    twice the ideal), the other at its ideal too, no bank conflict (the C tile's reads, 16
    apart, skewed); the model counts the copies' and the write's sectors as the emulator
    does."""
    kernel = _compile(expression, sizes, frags_k=2, **FULL, **params)
    assert tiles.free_boxed(kernel.program, kernel.params).p == 16
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    counted = kernel.counters(steps=1)
    assert counted.worst_ways() == 1
    model = model_of(kernel.program, gpu("H100"), "tensorcore")
    modelled = model.copy_sectors(kernel.params, steps=1)
    for tensor in ("A", "B"):
        loads = counted.of(tensor, "ldgsts")
        assert loads.per_request == loads.ideal_per_request
        assert modelled[tensor][:2] == (loads.requests, loads.transactions)
    written = _grid_written(kernel)
    assert model.write_sectors(kernel.params)[:2] == (written.requests, written.transactions)


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "sizes", "layout", "params"), [
    (in_layout("C[a,b,c,d,e,f] += alpha*A[g,d,a,c]*B[e,f,g,b]", "C"), SMALL_41, "C",
     {"stages": 3, **FULL_TILES["A"]}),  # on A
    (in_layout("C[a,b,c,d,e,f] += A[d,e,g,b]*B[g,f,a,c]", "C"), SMALL_32, "C",
     {"stages": 1, **FULL_TILES["B"]}),
    (TCCG_32, SMALL_32, "F", {"async_copy": False, **FULL_TILES["B"]}),  # through registers
    (in_layout(TCCG_41, "C"), SMALL_41, "C", {"mapping": "wmma", **FULL_TILES["A"]}),
    (TCCG_32, SMALL_32 | {"g": 40}, "F", {"split": 2, "deterministic": True, **FULL_TILES["B"]}),
    (in_layout(TCCG_41, "C"), SMALL_41 | {"g": 40}, "C",
     {"split": 2, "deterministic": True, **FULL_TILES["A"]}),  # 16-bit: ordered
    (in_layout(TCCG_32, "C"), SMALL_32, "C", {"dtype": "bfloat16", "warps_n": 3, "frags_n": 2}),
    (TCCG_41, SMALL_41, "F", {"dtype": "bfloat16", "warps_n": 2, **FULL_TILES["A"]}),
    (in_layout("C[a,b,c,d,e,f] += A[d,e,g,a]*B[g,f,b,c]", "C"), SMALL_31_FULL, "C",
     {"stages": 3, **ALONG["A"]}),  # c fastest, both layouts
    (TCCG_42, SMALL_42_FULL | {"g": 40}, "F",
     {"split": 2, "deterministic": True, **ALONG["B"]}),
    (TCCG_31, SMALL_31_FULL, "F", {"async_copy": False, **ALONG["A"]}),
    (in_layout(TCCG_42, "C"), SMALL_42_FULL, "C", {"mapping": "wmma", **ALONG["B"]}),
    (TCCG_31, SMALL_31_FULL, "F", {"shared_layout": "swizzle", "frags_k": 2, **ALONG["A"]}),
    (TCCG_42, SMALL_42_FULL, "F", {"dtype": "bfloat16", **ALONG["B"]})],
    ids=["update_on_a", "update", "registers", "wmma", "split", "split_on_a",
         "bf16_tile_96", "bf16_on_a", "update_along", "split_along", "registers_along",
         "wmma_along", "swizzle_along", "bf16_along"])
def test_full_box_kernels_match_einsum_without_hazards(expression, sizes, layout, params):
    """The full box's forms beside the default run's (alpha and beta on B, in
    :func:`test_the_full_box_reads_its_operand_at_the_ideal_without_conflicts`): a scaled
    update on A, on B, through registers, WMMA, split, bfloat16, in both layouts."""
    kernel = _compile(expression, sizes, layout, **{**FULL, **params})
    assert tiles.free_boxed(kernel.program, kernel.params).q == 24
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok  # raises on a hazard
