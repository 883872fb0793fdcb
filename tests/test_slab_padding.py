"""A vector's padding of staged tiles whose free fastest index a thread holds in whole vectors
(geometry.padded): rows stay 16-byte aligned, so copies and loads move 16 bytes, and slabs of
rows lie an odd multiple of 64 bytes apart, so a quarter warp's 16-byte loads of two
neighbouring slabs use the two halves of the banks. Worked by hand on tccg_07 and tccg_04,
then counted by the emulator, priced by the model and verified on PoCL."""

from __future__ import annotations

import pytest

import treduda
from treduda.codegen import ir
from treduda.polyhedral import geometry
from treduda.polyhedral.lower import plan
from treduda.run.counters import ASYNC_COPY, LOAD
from treduda.run.nvcc import nvcc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load
from treduda.tuning.search import Searcher
from treduda.tuning.search_result import SearchStats

ROWS = {r.id: r for r in load("tccg_fp32")}
TCCG07, TCCG04 = ROWS["tccg_07"], ROWS["tccg_04"]  # column-major
# tccg_07's rows of A's tile run along e (x: 4 threads of 4 adjacent values, whole vectors),
# its slabs along a (y: a thread's values 8 apart, 16 rows of (c, b, f) apart in the tile).
PICK07 = {"order": "e,a*b,d", "stage": "A,B", "block_x": 4, "reg_x": 4, "assign_x": "adjacent",
          "block_y": 8, "reg_y": 2, "assign_y": "cyclic", "block_z": 4, "reg_z": 8,
          "assign_z": "adjacent", "step": 16, "split": 1, "preload": False,
          "double_buffer": True, "pad": 4, "async_copy": True, "unroll": True}
PICK04 = {"order": "d,a,b", "block_x": 4, "reg_x": 8, "assign_x": "adjacent", "block_y": 8,
          "reg_y": 1, "assign_y": "cyclic", "block_z": 4, "reg_z": 8, "assign_z": "adjacent",
          "step": 4}


def _tiles(row, params: dict) -> dict[str, list[int]]:
    """Each input's staged tile, padded for ``params``, in its indices' order."""
    program = plan(row.expression, row.sizes, layout=row.layout)
    described = {**geometry.decided({q: (v,) for q, v in geometry.NEUTRAL.items()}), **params}
    extents = geometry.tile_extents(program, described)
    return {t: geometry.padded(program, idx, [extents[i] for i in idx], params.get("pad", 4),
                               described) for t, idx in program.contraction.inputs.items()}


def test_the_slab_strides_by_hand():
    # tccg_07, A[e,c,b,f,a]: 16 e x 16 f x 16 a. Rows of 16 floats are 64 bytes; slabs of 16
    # rows (a's stride) 1024 bytes, whole bank lines, and rows 17 floats long (padded by one)
    # cannot be copied 16 bytes at a time. One row more per slab: 16 * 17 = 272 floats, 1088
    # bytes = 8.5 lines. A vector on the rows instead: 20 * 16 = 320 floats, whole lines.
    tiles = _tiles(TCCG07, PICK07)
    assert tiles["A"] == [16, 1, 1, 17, 16]
    assert 16 * 17 * 4 % 128 == 64 and 20 * 16 * 4 % 128 == 0
    assert tiles["B"] == [16 + 4, 24]  # B[f,d], read along the unrolled f: a vector, as before
    # tccg_04 with d on x, A[d,e,c,a]: 32 d x 4 e x 8 a; rows padded by a vector: (32 + 4) * 4
    # = 144 floats between slabs, 576 bytes = 4.5 lines. B[b,e] has no slabs: padded by one.
    tiles = _tiles(TCCG04, PICK04)
    assert tiles["A"] == [32 + 4, 4, 1, 8] and 36 * 4 * 4 % 128 == 64
    assert tiles["B"] == [24 + 1, 4]
    # Registers that are no whole vectors (2 along x), or vectors along z (tccg_04's pick, d on
    # z), which the model prices as scalar loads: padded by one.
    assert _tiles(TCCG07, {**PICK07, "block_x": 8, "reg_x": 2})["A"] == [16 + 1, 1, 1, 16, 16]
    assert _tiles(TCCG04, {**PICK04, "order": "b,a,d"})["A"] == [32 + 1, 4, 1, 8]


def test_the_model_prices_the_slabs_below_padding_by_one_or_none():
    # Padded by one, A's rows of 17 floats are read in scalars; unpadded, its 16-byte loads of
    # slabs 1024 bytes apart meet in the same banks (2 ways): the slab padding costs the
    # fewest shared wavefronts, and its copies are 16-byte cp.async (one run of 4 per copy).
    model = Searcher(plan(TCCG07.expression, TCCG07.sizes, layout="F"), "H100").model
    slab, one, none = (model.estimate({**PICK07, "pad": pad}) for pad in (4, 1, 0))
    assert slab.resources["memory"] < 0.8 * min(one.resources["memory"],
                                                none.resources["memory"])
    assert slab.resources["issue"] < one.resources["issue"]
    assert slab.seconds < min(one.seconds, none.seconds)
    assert model.bound({**PICK07, "pad": 4}).seconds <= slab.seconds


def test_the_climb_stages_a_together_with_the_threads_that_share_it():
    # The climb of tccg_07's "e,a*b,d" stopped at A unstaged and one thread along d: staging A
    # alone, or four threads along d alone, is slower; both at once reach the slab padding.
    searcher = Searcher(plan(TCCG07.expression, TCCG07.sizes, layout="F"), "H100")
    stuck = searcher.candidate({**PICK07, "stage": "B", "block_z": 1, "assign_z": "cyclic",
                                "pad": 0}, with_bound=False)
    for change in ({"stage": "A,B"}, {"block_z": 4}):
        alone = searcher.model.estimate({**stuck.params, **change})
        assert alone.seconds > stuck.prediction.seconds
    restagings = list(searcher._restagings(stuck.params))
    assert (("stage", "A,B"), ("block_z", 4)) in restagings
    for (_, stage), (block, threads) in restagings:  # more threads where more is staged
        assert stage in ("A,B", "") and (threads > stuck.params[block]) == (stage == "A,B")
    faster = searcher._step(stuck, [], set(), SearchStats(0, False), 0, 10**6, None)
    assert faster is not None and faster.key() < stuck.key()
    assert (faster.params["stage"], faster.params["block_z"]) == ("A,B", 4)


# tccg_07 at sizes no tile divides (e and a of 20 on tiles of 16, d of 40 on 32, f of 40 in
# steps of 16); e stays a multiple of 4, so that A's copies may move 16 bytes. a alone on y:
# a tile of a*b would cross into the next b, and its box of both (20 x 2) not fit twice.
SMALL = {"a": 20, "b": 3, "c": 2, "d": 40, "e": 20, "f": 40}
FORMS = {"F": "C[a,b,c,d,e] = A[e,c,b,f,a] * B[f,d]",
         "C": "C[e,d,c,b,a] = A[a,f,b,c,e] * B[d,f]"}  # the same tiles, row-major


def _small(layout: str, statement: str = "{} = {}", **params) -> treduda.Kernel:
    output, product = FORMS[layout].split(" = ")
    return treduda.compile(statement.format(output, product), SMALL, layout=layout,
                           strategy="tiled+staged",
                           params={**PICK07, "order": "e,a,d", **params})


@pytest.mark.parametrize("layout", ["F", pytest.param("C", marks=pytest.mark.matrix)])
def test_slab_padded_tiles_are_copied_and_read_16_bytes_at_a_time_without_conflicts(layout):
    kernel = _small(layout)
    shapes = {local.name: local.shape for local in kernel.built.kernel.locals
              if local.space is ir.Space.SHARED}
    slab = (16, 1, 1, 17, 16, 2)  # a second buffer is the slowest dimension
    assert shapes["A_sh"] == (slab if layout == "F" else slab[::-1])
    tile = [t for t in kernel.counters().traffic if t.array == "A_sh"]  # every region
    assert {t.operation for t in tile} == {ASYNC_COPY, LOAD}
    assert all((t.width, t.ways, t.transactions) == (16, 1, t.ideal) for t in tile)
    assert kernel.hazards() == []


# The default run verifies one form on PoCL (partial tiles, alpha/beta), the matrix the others.
@pytest.mark.parametrize(("layout", "statement", "params"), [
    ("C", "{} = alpha * {} + beta * {}", {}),
    pytest.param("F", "{} += {}", {"split": 2}, marks=pytest.mark.matrix),
    pytest.param("F", "{} = {}", {"double_buffer": False, "async_copy": False, "preload": True},
                 marks=pytest.mark.matrix),
])
def test_slab_padded_kernels_verify(layout, statement, params):
    output = FORMS[layout].split(" = ")[0]
    kernel = _small(layout, statement.replace("beta * {}", f"beta * {output}"), **params)
    assert kernel.verify().ok
    assert kernel.hazards() == []


@pytest.mark.matrix
@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_tccg07s_slab_padded_main_loop_copies_16_bytes():
    # sm_90, CUDA 13: padded by one, 33 LDGSTS per step (32 of 4 bytes of A) and 77.6% FFMA;
    # slab-padded, 9 (8 of 16 bytes of A, one of B) and 88.1%.
    one, slab = (sass_report(treduda.compile(
        TCCG07.expression, TCCG07.sizes, layout="F", strategy="tiled+staged",
        params={**PICK07, "pad": pad}).cuda_source)[0] for pad in (1, 4))
    assert slab.main_loop_opcodes["LDGSTS"] < one.main_loop_opcodes["LDGSTS"] // 3
    assert slab.ffma_share > 0.85 > one.ffma_share
