"""K boxes of the tensor-core strategy (:func:`treduda.strategies.tensorcore_tiles.k_box`):
where A and B lead with different summed indices (tccg_14's A[c,a,d] and B[d,c,b]), a step of
16 x 16 values of those two reads both operands in whole sectors, B by a vector load whose
16-bit values land 64 columns apart in its tile (``AsyncCopy.stride``)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bound_paths_hold, in_layout
from treduda.strategies import tensorcore_tiles as tiles

import treduda
from treduda.codegen import ir, serial
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import get
from treduda.run.nvcc import nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available, toolkit_headers
from treduda.run.sass import find_disassembler, sass_report
from treduda.tuning.search import Searcher

TCCG_14 = "C[a,b]=A[c,a,d]*B[d,c,b]"
TCCG_28 = "C[a,b,c,d]=A[e,a,f,b]*B[f,d,e,c]"
# c and d rounded up from 40 to 48 (zeros), a and b partial tiles
PARTIAL = {"a": 40, "b": 36, "c": 40, "d": 40}
BOX = {"warps_m": 2, "warps_n": 1, "frags_m": 1, "frags_n": 2, "frags_k": tiles.BOX_FRAGMENTS,
       "split": 1, "stages": 2, "mapping": "mma", "shared_layout": "pad", "async_copy": True}


def _compile(expression: str, sizes: dict, layout: str = "F", **params) -> treduda.Kernel:
    return treduda.compile(expression, sizes, dtype=params.pop("dtype", "float16"),
                           layout=layout, strategy="tensorcore", cache=False,
                           deterministic=params.pop("deterministic", False),
                           params={**BOX, **params})


def test_a_box_step_holds_each_pair_of_its_indices_once():
    """The columns of a step's tiles hold the 16 x 16 values of the box once each, a
    fragment's 16 columns one value of B's leading index, and B's copies' four values of it
    64 columns apart."""
    program = plan(TCCG_14, {"a": 64, "b": 64, "c": 32, "d": 48}, "F", "float16")
    assert tiles.k_box(program) == ("c", "d")
    column = np.arange(tiles.BOX * tiles.BOX)
    pairs = {(int(c), int(d)) for ks in range(6)
             for c, d in zip(*tiles.box_indices(program, ks, column, tiles.NUMPY).values(),
                             strict=True)}
    assert pairs == {(c, d) for c in range(32) for d in range(48)}
    values = tiles.box_indices(program, 0, column, tiles.NUMPY)
    assert all(len(set(values["d"][f * 16:(f + 1) * 16])) == 1 for f in range(16))
    _, first = tiles.box_dealt(np.arange(4), tiles.BOXED_WIDTH, tiles.NUMPY)
    lanes = first[:, None] + tiles.BOXED_STRIDE * np.arange(tiles.BOXED_WIDTH)
    d = tiles.box_indices(program, 0, lanes, tiles.NUMPY)["d"]
    assert d.tolist() == [[4 * q + j for j in range(4)] for q in range(4)]


@pytest.mark.parametrize(("expression", "sizes", "box"), [
    (TCCG_14, PARTIAL, ("c", "d")),
    (TCCG_28, {"a": 8, "b": 8, "c": 8, "d": 8, "e": 16, "f": 40}, ("e", "f")),
    (TCCG_14, {"a": 40, "b": 36, "c": 40, "d": 36}, None),  # d: 36 -> 48, more than 1.25x
    ("C[a,b]=A[c,a,d]*B[c,d,b]", PARTIAL, None),  # both lead with c
    ("C[i,j] = A[i,k] * B[k,j]", {"i": 32, "j": 32, "k": 32}, None)])
def test_only_operands_leading_with_different_summed_indices_take_a_box(expression, sizes, box):
    program = plan(expression, sizes, "F", "float16")
    assert tiles.k_box(program) == box
    offered = get("tensorcore").space(program).parameter("frags_k").values
    assert (tiles.BOX_FRAGMENTS in offered) == (box is not None)


def test_box_copies_read_whole_sectors_and_store_without_conflicts():
    """tccg_14 at its size: A by cp.async in 16-byte runs, B by 8-byte loads, both at the
    ideal sectors per request (B took 32 where 2 do with steps along one index), and no
    bank conflict in the copies' stores or the fragment loads; the model counts the same
    sectors as the emulator."""
    sizes = {"a": 384, "b": 376, "c": 384, "d": 384}
    params = {**BOX, "warps_n": 2, "frags_m": 2, "frags_n": 2}
    kernel = _compile(TCCG_14, sizes, **params)
    counted = kernel.counters(steps=2)
    model = model_of(kernel.program, gpu("H100"), "tensorcore").copy_sectors(
        kernel.params, steps=2)
    for tensor, operation, width in (("A", "ldgsts", 16), ("B", "ld", 8)):
        loads = counted.of(tensor, operation)
        assert loads.width == width
        assert loads.per_request == loads.ideal_per_request, tensor
        requests, sectors, _, _ = model[tensor]
        assert sectors / requests == loads.per_request, tensor
    assert counted.worst_ways() == 1


def test_the_bound_stays_below_every_estimate_where_boxes_are_offered():
    """The space with K boxes, searched without regrets: branch and bound finds the best
    the exhaustive enumeration does."""
    searcher = Searcher(plan(TCCG_14, {"a": 96, "b": 64, "c": 48, "d": 64}, "F", "float16"),
                        "H100", "tensorcore")
    assert bound_paths_hold(searcher) > 100
    best = searcher.branch_and_bound().best
    assert best.prediction.seconds == searcher.exhaustive().best.prediction.seconds


@pytest.mark.parametrize("layout", ["F", "C"])
def test_box_kernels_match_einsum_without_hazards(layout):
    """tccg_14 in column-major layout, mirrored in row-major, partial tiles and boxes."""
    kernel = _compile(in_layout(TCCG_14, layout), PARTIAL, layout)
    copies = [s for s in ir.nested(kernel.built.kernel.body) if isinstance(s, ir.AsyncCopy)]
    assert {c.stride for c in copies} == {1, tiles.BOXED_STRIDE}
    assert serial.Decoder()(serial.encode(kernel.built.kernel)) == kernel.built.kernel
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "sizes", "params"), [
    ("C[a,b] = alpha*A[c,a,d]*B[d,c,b] + beta*C[a,b]", PARTIAL, {"stages": 3}),
    ("C[a,b] += A[c,a,d]*B[d,c,b]", PARTIAL, {"stages": 1}),
    (TCCG_14, PARTIAL, {"async_copy": False}),  # both through registers, element by element
    (TCCG_14, PARTIAL, {"shared_layout": "swizzle", "warps_m": 1, "frags_m": 2}),
    (TCCG_14, {"a": 20, "b": 20, "c": 16, "d": 60}, {"split": 2, "deterministic": True}),
    (TCCG_14, PARTIAL, {"dtype": "bfloat16"}),
    (TCCG_28, {"a": 5, "b": 4, "c": 4, "d": 6, "e": 16, "f": 40}, {}),
], ids=["alpha_beta", "update", "registers", "swizzle", "split", "bf16", "tccg_28"])
@pytest.mark.parametrize("layout", ["F", "C"])
def test_every_box_form_matches_einsum_without_hazards(expression, sizes, params, layout):
    """Each form, in column-major layout and mirrored (every tensor's indices reversed) in
    row-major."""
    kernel = _compile(in_layout(expression, layout), sizes, layout, **params)
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_box_kernels_compile_to_mma_fed_by_ldmatrix(arch):
    kernel = _compile(TCCG_14, {"a": 384, "b": 376, "c": 384, "d": 384})
    report = sass_report(kernel.cuda_source, arch)[0]
    assert report.main_loop_opcodes.get("HMMA", 0) > 0
    assert report.main_loop_opcodes.get("LDSM", 0) > 0
    assert report.main_loop_opcodes.get("LDG", 0) > 0  # B's vector loads
    if nvrtc_available() and toolkit_headers():  # as CuPy compiles them on a GPU
        assert "mma.sync" in compile_nvrtc(kernel.cuda_source, arch.replace("sm", "compute"))
