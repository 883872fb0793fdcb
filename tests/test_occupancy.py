"""Occupancy, the one rule the model and the kernel walk share: each limit binds in turn."""

from __future__ import annotations

import math

import pytest

from treduda.model.gpus import GPUS
from treduda.model.occupancy import blocks_per_sm, waves_by_residency


@pytest.mark.parametrize("name", sorted(GPUS))
def test_each_limit_binds_in_turn(name):
    g = GPUS[name]
    assert blocks_per_sm(g, 32, 16, 0) == g.max_blocks_per_sm  # tiny blocks: the block limit
    assert blocks_per_sm(g, 33, 16, 0) == min(g.max_blocks_per_sm,
                                              g.max_threads_per_sm // 64)  # whole warps
    heavy = g.max_registers_per_thread
    per_warp = math.ceil(heavy * g.warp_size / g.register_allocation_unit) * (
        g.register_allocation_unit)
    assert blocks_per_sm(g, 256, heavy, 0) == min(g.max_blocks_per_sm,
                                                  g.registers_per_sm // (per_warp * 8))
    assert blocks_per_sm(g, 32, 16, g.shared_per_sm // 3 + 1) == 2  # shared memory
    assert blocks_per_sm(g, 32, 16, g.shared_per_sm + 1) == 0  # does not fit at all


def test_a_grid_short_of_the_sms_holds_fewer_blocks_than_the_limits_allow():
    """132 SMs (H100), 2 blocks resident at most: the busiest SM's blocks in each wave."""
    g = GPUS["H100"]
    assert waves_by_residency(g, 36, 2) == ((1, 1),)  # tccg_13's grid: a third of the SMs
    assert waves_by_residency(g, 136, 2) == ((2, 1),)  # 4 SMs hold two
    assert waves_by_residency(g, 264, 2) == ((2, 1),)
    assert waves_by_residency(g, 2 * 264 + 8, 2) == ((2, 2), (1, 1))  # the last wave's 8
