"""Padding of staged tiles: by one element, or by a 16-byte vector where a tile is read in
vectors along its fastest index (the summed index an unrolled step unrolls), so that its rows
stay aligned; the kernels this shapes against numpy.einsum, their SASS, and what the model
makes of them."""

from __future__ import annotations

import pytest

import treduda
from treduda.codegen import ir
from treduda.model.optimist import _Optimist
from treduda.polyhedral import geometry
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import nvcc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.tuning.search import Searcher

# tccg_28: A's fastest index e is summed but rolled (f is the one unrolled); B's fastest is f.
TCCG28 = "C[a,b,c,d]=A[e,a,f,b]*B[f,d,e,c]"
FULL = {"a": 96, "b": 84, "c": 84, "d": 84, "e": 96, "f": 96}
# Small enough for 48 KiB of shared memory, with A's tile scalar and B's read in vectors.
PARAMS = {"order": "a,c,d", "block_x": 16, "reg_x": 2, "assign_x": "adjacent", "block_y": 4,
          "reg_y": 4, "block_z": 2, "reg_z": 2, "step": 8, "stage": "A,B"}


def test_only_tiles_read_in_vectors_are_padded_by_a_vector():
    program = plan(TCCG28, FULL, layout="F")
    a, b = program.contraction.inputs["A"], program.contraction.inputs["B"]
    assert geometry.unrolled_indices(program) == {"f"}
    assert [geometry.padding(program, b, pad) for pad in (0, 1, 4)] == [0, 1, 4]
    assert [geometry.padding(program, a, pad) for pad in (0, 1, 4)] == [0, 1, 1]
    assert geometry.vector_pad(plan(TCCG28, FULL, layout="F", dtype="float64")) == 2
    assert geometry.vector_pad(plan(TCCG28, FULL, layout="F", dtype="complex128")) == 1


def test_the_pad_of_a_vector_is_offered_only_where_a_tile_is_read_in_vectors():
    searcher = Searcher(plan(TCCG28, FULL, layout="F"), "H100")
    pad = next(p for p in searcher.space.parameters if p.name == "pad")
    assert pad.values == (0, 1, 4)
    violated = searcher.space.violated
    full = {**PARAMS, "split": 1, "unroll": True, "preload": False, "double_buffer": False,
            "assign_y": "cyclic", "assign_z": "cyclic"}
    assert not violated({**full, "pad": 4})
    assert violated({**full, "stage": "A", "pad": 4})  # A's tile is not read in vectors


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("preload", "double_buffer"), [(False, False), (True, True)])
def test_vector_padded_kernels_verify(layout, preload, double_buffer):
    # Extents that no tile divides; in C layout the fastest indices are the last ones, so the
    # vector-read tile is A's there (f last) and B's is padded by one.
    sizes = {"a": 19, "b": 3, "c": 10, "d": 5, "e": 11, "f": 13}
    expression = TCCG28 if layout == "F" else "C[a,b,c,d]=A[b,a,e,f]*B[c,e,d,f]"
    kernel = treduda.compile(expression, sizes, layout=layout, strategy="tiled+staged",
                             params={**PARAMS, "pad": 4, "preload": preload,
                                     "double_buffer": double_buffer})
    shapes = {local.name: local.shape for local in kernel.built.kernel.locals
              if local.space is ir.Space.SHARED}
    fastest = -1 if layout == "C" else 0  # a second buffer is the slowest dimension
    a_row, b_row = shapes["A_sh"][fastest], shapes["B_sh"][fastest]
    if layout == "F":
        assert (a_row, b_row) == (8 + 1, 8 + 4)  # a: e rolled, padded by one; b: f, by 4
    else:
        assert (a_row, b_row) == (8 + 4, 8 + 4)  # both end in f, the unrolled index
    assert kernel.verify().ok
    assert kernel.hazards() == []


def _tccg28(pad: int) -> dict:
    return {**PARAMS, "block_x": 32, "reg_x": 4, "block_z": 4, "reg_y": 8, "pad": pad,
            "assign_y": "cyclic", "assign_z": "cyclic", "split": 1, "preload": False,
            "double_buffer": False, "unroll": True, "async_copy": False}


def test_the_model_sees_the_vector_reads_of_a_vector_padded_tile():
    # Padded by one, B's rows are 9 floats and every value a thread reads is a wavefront of its
    # own; padded by 4 they are 12, and one LDS.128 brings 4 values (the same for every lane of
    # a warp): a quarter of the wavefronts for B.
    model = Searcher(plan(TCCG28, FULL, layout="F"), "H100").model
    b = next(r for r in model.reads if r.tensor == "B")
    scalar, vector = (_Optimist(model, model.describe(_tccg28(pad))) for pad in (1, 4))
    assert (scalar.vector_values(b), vector.vector_values(b)) == (1, 4)
    assert (scalar.wavefronts(b), vector.wavefronts(b)) == (1.0, 0.25)
    one, four = (model.estimate(_tccg28(pad)) for pad in (1, 4))
    assert four.resources["memory"] < 0.8 * one.resources["memory"]
    assert four.seconds < one.seconds
    assert model.bound(_tccg28(4)).seconds <= four.seconds


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_a_vector_pad_turns_shared_loads_into_lds128():
    # ptxas merges loads of neighbours along the unrolled f into LDS.128 only where it can
    # prove them 16-byte aligned: rows of 12 floats, not of 9 (sm_90, CUDA 13: 109 32-bit
    # shared loads became 30 32-bit and 19 128-bit ones, the loop 278 -> 218 instructions).
    reports = {}
    for pad in (1, 4):
        kernel = treduda.compile(TCCG28, FULL, layout="F", strategy="tiled+staged",
                                 params={**PARAMS, "pad": pad})
        reports[pad] = sass_report(kernel.cuda_source)[0]
    assert 128 not in reports[1].shared_load_widths
    assert reports[4].shared_load_widths.get(128, 0) > 0
    assert reports[4].main_loop_instructions < reports[1].main_loop_instructions
