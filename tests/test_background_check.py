"""ptxas's check of compile()'s winner runs after compile() returns (issue 28: a first call of
GEMM 4096^3 in a second, where nvcc alone takes one): the call gets the model's pick, the
check corrects the tuning cache, and later calls in the process get its winner."""

from __future__ import annotations

import dataclasses
import threading
import types

import pytest
from conftest import needs_nvcc

import treduda
from treduda.errors import CompileError
from treduda.frontend.identity import params_text
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import plan
from treduda.run import sass
from treduda.tuning import policy
from treduda.tuning.cache import CacheWarning, TuningCache
from treduda.tuning.search_result import Candidate

GEMM = "C[i,j] = A[i,k]*B[k,j]"
SIZES = {"i": 4096, "j": 4096, "k": 4096}  # its winner's registers reach the cap: checked


def entry(cache: TuningCache) -> dict:
    (only,) = cache.entries()
    return only.value


@needs_nvcc
def test_compile_returns_before_ptxas_has_checked_its_winner(tmp_path, monkeypatch):
    cache = TuningCache(tmp_path / "tuning.sqlite3")
    released = threading.Event()

    def held(sources, arch="sm_90", read=None):
        assert released.wait(60), "compile() waited for ptxas"
        return sass.compile_with_sass(sources, arch, read)

    monkeypatch.setattr(policy, "compile_with_sass", held)
    treduda.compile(GEMM, SIZES, cache=cache)  # returns while ptxas is held
    assert "ptxas's check running" in entry(cache)["found"]
    released.set()
    policy.finish_background()
    # the SIMT winner's estimate takes the issue of its SASS main loop too, and says so
    assert ("re-estimated with ptxas's registers and spills and its SASS main loop's "
            "instructions per FMA") in entry(cache)["found"]
    assert "running" not in entry(cache)["found"]
    # later calls get the checked winner: the model's pick, or a rival where ptxas upset it
    assert entry(cache)["params"] == dict(treduda.compile(GEMM, SIZES, cache=cache).params)


@needs_nvcc
def test_a_winner_ptxas_upsets_is_replaced_for_later_calls_and_processes(tmp_path,
                                                                         monkeypatch):
    """ptxas is made to report 4 KB of spills for the model's pick: the check then ranks the
    rivals by their own reports, and the next compile() gets the fastest of those."""
    cache = TuningCache(tmp_path / "tuning.sqlite3")
    first: list[str] = []

    def spilling(sources, arch="sm_90", read=None):
        reports = sass.compile_with_sass(sources, arch, read)
        if not first:
            first.append(sources[0])
        return [[dataclasses.replace(r, ptxas=dataclasses.replace(r.ptxas, spill_stores=2048,
                                                                  spill_loads=2048))
                 for r in report]
                if source == first[0] else report
                for source, report in zip(sources, reports, strict=True)]

    monkeypatch.setattr(policy, "compile_with_sass", spilling)
    kernel = treduda.compile(GEMM, SIZES, cache=cache)
    policy.finish_background()
    corrected = treduda.compile(GEMM, SIZES, cache=cache)
    assert params_text(corrected.params) != params_text(kernel.params)
    assert entry(cache)["params"] == dict(corrected.params)
    assert "re-estimated with ptxas's registers and spills" in entry(cache)["found"]
    treduda.api._forget()  # a new process starts from the corrected entry
    assert treduda.compile(GEMM, SIZES, cache=cache).params == corrected.params


def test_a_failing_check_leaves_the_models_pick_and_says_so(tmp_path, monkeypatch):
    cache = TuningCache(tmp_path / "tuning.sqlite3")

    def broken(sources, arch="sm_90", read=None):
        raise CompileError("nvcc: out of memory")

    monkeypatch.setattr(policy, "compile_with_sass", broken)
    monkeypatch.setattr(policy, "nvcc_supports", lambda arch: True)
    with pytest.warns(CacheWarning, match="out of memory"):  # warned on the check's thread
        kernel = treduda.compile(GEMM, SIZES, cache=cache)
        policy.finish_background()
    assert entry(cache)["params"] == dict(kernel.params)
    assert treduda.compile(GEMM, SIZES, cache=cache).params == kernel.params


# GEMM 4096^3's 8 x 8 register tiles in 256 threads, single-buffered: 109 registers by the
# model, 155 by ptxas (nvcc 13, sm_90), one block per SM where the model saw two.
EIGHT_BY_EIGHT = {"order": "j,i", "stage": "A,B", "block_x": 16, "reg_x": 8,
                  "assign_x": "vector", "block_y": 16, "reg_y": 8, "assign_y": "cyclic",
                  "block_z": 1, "reg_z": 1, "assign_z": "cyclic", "step": 16, "split": 1,
                  "preload": False, "double_buffer": False, "pad": 0, "async_copy": True,
                  "unroll": True}


def winner(program, params: dict) -> types.SimpleNamespace:
    """A search result as worth_checking reads it: its GPU and its winner."""
    h100 = gpu("H100")
    model = model_of(program, h100, "tiled+staged")
    return types.SimpleNamespace(gpu=h100, best=Candidate("tiled+staged", params,
                                                          model.estimate(params)))


def test_a_winner_whose_occupancy_rests_on_its_registers_is_checked_far_below_the_cap():
    program = plan(GEMM, SIZES)
    model = model_of(program, gpu("H100"), "tiled+staged")
    assert model.register_pressure(EIGHT_BY_EIGHT) < policy.CHECK_REGISTERS  # 109 of 255
    assert policy.worth_checking(program, winner(program, EIGHT_BY_EIGHT))
    # 4 x 4 tiles in 64 threads, a 128-step: 32 KB of staged tiles hold an SM to 7 blocks,
    # at the 58 registers predicted as at 1.6 times as many (10 blocks)
    shared_bound = {**EIGHT_BY_EIGHT, "block_x": 8, "block_y": 8, "reg_x": 4, "reg_y": 4,
                    "step": 128}
    assert not policy.worth_checking(program, winner(program, shared_bound))
    # ... where a 64-step's 16 KB allow 14, and 1.6 times the registers 10: checked
    assert policy.worth_checking(program, winner(program, {**shared_bound, "step": 64}))
