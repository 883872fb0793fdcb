"""Occupancy: how many blocks of a kernel one SM holds at once.

One rule for the analytic model (from a candidate's parameters) and the kernel walk (from the
generated IR and ptxas's registers), so the two can only differ in what they feed it.
"""

from __future__ import annotations

import math

from .gpus import Gpu


def blocks_per_sm(gpu: Gpu, threads: int, registers: int, shared_bytes: int) -> int:
    """Resident blocks per SM for blocks of ``threads`` threads using ``registers`` registers
    each and ``shared_bytes`` of shared memory: the tightest of the block, thread, register and
    shared-memory limits, 0 when one block does not fit. Threads are allocated in whole warps,
    registers in the GPU's allocation unit per warp."""
    warps = math.ceil(threads / gpu.warp_size)
    unit = gpu.register_allocation_unit
    per_warp = math.ceil(registers * gpu.warp_size / unit) * unit
    limits = [gpu.max_blocks_per_sm, gpu.max_threads_per_sm // (warps * gpu.warp_size),
              gpu.registers_per_sm // (per_warp * warps)]
    if shared_bytes:
        limits.append(gpu.shared_per_sm // shared_bytes)
    return max(0, min(limits))
