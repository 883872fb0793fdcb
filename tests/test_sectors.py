"""The global-memory transactions the model prices (issue 40), beside what the emulator counts
on the kernel itself (Kernel.counters): sectors per warp request of reads and stores, and the
sectors of a block's staged tile. Each kernel is also run on PoCL against numpy.einsum."""

from __future__ import annotations

import pytest

from treduda.api import compile
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.polyhedral.lower import plan
from treduda.run.counters import Region

GEMM = "C[i,j] = A[i,k]*B[k,j]"
# Not multiples of the tiles; rows of B and C of 136 floats are 17 sectors, so every row
# starts on a sector; A's rows of 36 floats start on a sector or half-way into one.
SIZES = {"i": 70, "j": 136, "k": 36}
UNSTAGED = {"block_y": 2, "block_z": 1, "reg_y": 1, "reg_z": 1, "assign_y": "cyclic",
            "assign_z": "cyclic", "step": 8, "split": 1, "unroll": True, "stage": "",
            "preload": False, "double_buffer": False, "pad": 0}


def counted_and_checked(params: dict) -> tuple:
    """The kernel of ``params``, checked against numpy.einsum on PoCL, and its counters."""
    kernel = compile(GEMM, SIZES, strategy="tiled+staged", params=params)
    assert kernel.verify().ok  # on PoCL, against numpy.einsum
    return kernel, kernel.counters()


@pytest.mark.parametrize("mapping, tensor, sectors", [
    # lanes along i read A down a column: 32 lanes, 32 sectors
    ({"order": "i,j", "block_x": 32, "reg_x": 1, "assign_x": "cyclic"}, "A", 32),
    # lanes along j read 32 consecutive floats of B: 128 bytes, 4 sectors
    ({"order": "j,i", "block_x": 32, "reg_x": 1, "assign_x": "cyclic"}, "B", 4),
    # four adjacent values of j per lane, one float4 each: 512 bytes, 16 sectors
    ({"order": "j,i", "block_x": 32, "reg_x": 4, "assign_x": "adjacent"}, "B", 16),
    # every lane the same value of A: one sector
    ({"order": "j,i", "block_x": 32, "reg_x": 1, "assign_x": "cyclic"}, "A", 1),
])
def test_sectors_per_request_of_a_read_are_the_emulators(mapping, tensor, sectors):
    params = {**UNSTAGED, **mapping}
    _, counters = counted_and_checked(params)
    model = Model(plan(GEMM, SIZES), gpu("H100"), "tiled+staged")
    assert model.request_sectors(params)[tensor] == sectors
    assert counters.of(tensor).per_request == sectors


def test_sectors_per_request_of_the_output_store_are_the_emulators():
    params = {**UNSTAGED, "order": "i,j", "block_x": 32, "reg_x": 1, "assign_x": "cyclic"}
    _, counters = counted_and_checked(params)
    model = Model(plan(GEMM, SIZES), gpu("H100"), "tiled+staged")
    store = counters.of("C", "st", Region.AFTER)
    assert model.request_sectors(params)["C"] == store.per_request == 32  # down a column


def test_a_staged_tile_costs_the_sectors_its_copy_reads():
    # A's tile of 32 rows of 8 floats (a step): rows start on a sector or half-way into one,
    # so a row takes 1 or 2 sectors, 1.5 on average; B's 8 rows of 64 floats take 8 each.
    params = {**UNSTAGED, "order": "j,i", "block_x": 16, "reg_x": 4, "assign_x": "adjacent",
              "block_y": 8, "reg_y": 4, "stage": "A,B"}
    kernel, _ = counted_and_checked(params)
    counters = kernel.counters(steps=1)  # the first step's copies
    model = Model(plan(GEMM, SIZES), gpu("H100"), "tiled+staged")
    a, b = model.reads
    assert model.box_sectors(a, {"i": 32, "k": 8}) == 48 == counters.of("A").transactions
    assert model.box_sectors(b, {"k": 8, "j": 64}) == 64 == counters.of("B").transactions


def test_sectors_of_hand_worked_warps():
    model = Model(plan(GEMM, SIZES), gpu("H100"), "tiled+staged")
    assert model.sectors([[lane * 4096] for lane in range(32)]) == 32  # transposed fp32
    assert model.sectors([[lane] for lane in range(32)]) == 4  # coalesced fp32
    assert model.sectors([[4 * lane + v for v in range(4)] for lane in range(32)]) == 16
