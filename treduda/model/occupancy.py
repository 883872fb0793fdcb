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


def waves_by_residency(gpu: Gpu, blocks: int, occupancy: int) -> tuple[tuple[int, int], ...]:
    """A launch of ``blocks`` blocks, at most ``occupancy`` of them resident per SM, as
    (blocks the busiest SM holds at once, waves) pairs, the fullest first: ``occupancy`` in
    each full wave, and in a last wave that does not fill the SMs the ``ceil(left / SMs)``
    its blocks give, fewer than ``occupancy`` where the grid leaves SMs short (36 blocks on
    132 SMs: one each). What an SM's tensor cores and warp schedulers are shared by, not the
    blocks its limits would allow."""
    full, left = divmod(blocks, gpu.sm_count * occupancy)
    shares = ((occupancy, full),) if full else ()
    return shares + (((math.ceil(left / gpu.sm_count), 1),) if left else ())
