"""Double-buffered shared memory (issue #3, strategy 9's option): each staged tile gets two
buffers, alternating by step, and the barrier before the copy goes except where the innermost
step starts again. Checked three ways: PoCL and the emulator against numpy.einsum, and the
emulator's race check, which catches a single buffer used as if it were two."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc
from treduda.strategies import staging_kernel

import treduda
from treduda.codegen import ir
from treduda.errors import StrategyError
from treduda.model import tiles
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.polyhedral import geometry
from treduda.polyhedral.strategy import Limits
from treduda.run.counters import main_loop
from treduda.tuning.walk import count

TILES = {"block_x": 8, "block_y": 4, "reg_x": 2, "reg_y": 2, "step": 4, "unroll": True}
CONTRACTIONS = {
    "gemm": ("C[i,j] = A[i,k]*B[k,j]", {"i": 37, "j": 29, "k": 23}),
    # two summed indices: two step loops, the parity must follow the inner one
    "two_summed": ("C[i,j] = A[i,k,l]*B[l,k,j]", {"i": 13, "j": 11, "k": 5, "l": 9}),
    # two reductions over different indices, each with tiles of its own
    "two_groups": ("C[i,j] = A[i,k]*B[k,j] - D[i,l,m]*E[m,l,j]",
                   {"i": 10, "j": 9, "k": 7, "l": 3, "m": 6}),
}


# TILES completed to every parameter but double_buffer, as the model and the space take them
COMPLETE = {**TILES, "order": "j,i", "block_z": 1, "reg_z": 1, "assign_x": "cyclic",
            "assign_y": "cyclic", "assign_z": "cyclic", "stage": "A,B", "pad": 0,
            "preload": False, "split": 1, "async_copy": False}


def compiled(name: str, layout: str = "C", **params) -> treduda.Kernel:
    expression, sizes = CONTRACTIONS[name]
    return treduda.compile(expression, sizes, layout=layout, dtype="float64",
                           strategy="tiled+staged", cache=False,
                           params={**TILES, "double_buffer": True, **params})


@pytest.mark.parametrize("preload", [False, True], ids=["plain", "preload"])
@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("name", CONTRACTIONS)
def test_double_buffered_kernel_matches_einsum(name, layout, preload):
    kernel = compiled(name, layout, preload=preload)
    assert kernel.verify().ok  # PoCL, with guard zones
    assert kernel.verify(backend="emulator").ok  # raises HazardError on any race


def test_tiles_have_two_buffers_as_their_slowest_dimension():
    # A[i,k]: i is on y (8 values) in C, where j is fastest, and on x (16) in F; k in steps of 4
    for layout, shape in (("C", (2, 8, 5)), ("F", (17, 4, 2))):
        locals_ = {local.name: local for local in compiled("gemm", layout, pad=1,
                                                           stage="A").built.kernel.locals}
        assert locals_["A_sh"].shape == shape  # padding on the fastest dimension


def test_double_buffering_halves_the_barriers():
    single = count(compiled("gemm", double_buffer=False), use_nvcc=False).barriers
    double = count(compiled("gemm"), use_nvcc=False).barriers
    steps = -(-23 // TILES["step"])
    assert (single, double) == (2 * steps, steps + 1)  # one more where the steps start


def test_one_buffer_used_as_two_is_a_race(monkeypatch):
    """The emulator sees what happens without the alternation: step k + 1 overwrites the tile
    that slower threads still read in step k."""
    monkeypatch.setattr(staging_kernel.Stager, "_parity", lambda self: "0")
    hazards = compiled("gemm").hazards()  # a fresh kernel (conftest's _unkept_when_patched)
    assert hazards and {h.kind for h in hazards} == {"race"}


def test_double_buffering_needs_steps_and_doubles_shared_memory():
    expression, sizes = CONTRACTIONS["gemm"]
    with pytest.raises(StrategyError, match="double buffering needs staged inputs and "
                                            "reduction steps"):
        treduda.compile(expression, sizes, strategy="tiled+staged",
                        params={"step": 0, "unroll": False, "double_buffer": True})
    program = compiled("gemm").program
    tile = {**geometry.decided(geometry.NEUTRAL), "order": "j,i", "block_x": 8, "block_y": 4,
            "reg_y": 4, "step": 4, "stage": "A,B"}  # i: 16, j: 8, k: 4 per block and step
    one = geometry.shared_bytes(program, tile)
    two = geometry.shared_bytes(program, {**tile, "double_buffer": True})
    assert (one, two) == (8 * (16 * 4 + 4 * 8), 2 * 8 * (16 * 4 + 4 * 8))


@needs_nvcc
def test_double_buffered_gemm_compiles_without_spills():
    kernel = treduda.compile(
        "C[i,j] = A[i,k]*B[k,j]", {"i": 4096, "j": 4096, "k": 4096}, strategy="tiled+staged",
        params={"block_x": 16, "block_y": 16, "reg_x": 8, "reg_y": 8, "step": 16,
                "stage": "A,B", "pad": 1, "preload": True, "double_buffer": True})
    report = kernel.compile_cuda("sm_90")
    assert report.spill_stores == report.spill_loads == 0
    assert report.shared_bytes == 2 * 4 * (128 * 17 + 16 * 129)
    steps = main_loop(kernel.built.kernel)  # one barrier a step (the last step peeled off)
    assert sum(isinstance(s, ir.Barrier) for s in ir.nested(steps.body)) == 1


def test_the_model_prices_the_barriers_saved(monkeypatch):
    program = compiled("gemm").program
    model = Model(program, gpu("H100"))
    single = model.estimate({**COMPLETE, "double_buffer": False})
    double = model.estimate({**COMPLETE, "double_buffer": True})
    # the alternating buffers' bookkeeping costs more than the barrier a step saves
    assert double.resources["issue"] > single.resources["issue"]
    monkeypatch.setattr(tiles, "DOUBLE_BUFFER_INSTRUCTIONS", 0)
    fresh = Model(program, gpu("H100"))  # a model remembers its counts
    assert (fresh.estimate({**COMPLETE, "double_buffer": True}).resources["issue"]
            < fresh.estimate({**COMPLETE, "double_buffer": False}).resources["issue"])
    # one step (k = 23 <= 32) needs two barriers either way: nothing saved
    one_step = {**COMPLETE, "step": 32}
    assert (model.estimate({**one_step, "double_buffer": True}).resources["issue"]
            == model.estimate({**one_step, "double_buffer": False}).resources["issue"])


def test_the_space_drops_double_buffering_when_two_buffers_do_not_fit():
    program = compiled("gemm").program
    one_buffer = 8 * (16 * 4 + 4 * 8)
    for budget, allowed in ((one_buffer, (False,)), (2 * one_buffer, (False, True))):
        strategy = treduda.strategies.get("tiled+staged", Limits(shared_per_block=budget))
        parameter, values = strategy.space(program).choices(COMPLETE)
        assert (parameter.name, values) == ("double_buffer", allowed)
