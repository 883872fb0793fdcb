"""Occupancy, the one rule the model and the kernel walk share: each limit binds in turn."""

from __future__ import annotations

import math

import pytest

from treduda.model.gpus import GPUS
from treduda.model.occupancy import blocks_per_sm


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
