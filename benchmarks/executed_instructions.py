"""What the economy tables' "exec/out" column reads: the warp instructions a block's warps
execute per output element, from the kernel's SASS, each loop counted as many times as it
runs. Where nvcc unrolls a reduction whole, "nonMMA/MMA" reads the straight run that holds
the MMAs, which is then the whole kernel (setup, copies, C tile, write); a kernel that executes
fewer instructions can read worse there than one whose reduction stayed a loop (tccg_04:
a loop of three steps 2.63, unrolled 5.34, while a thread executes about 800 and 633
instructions). This count reads both alike.

The count is static: code outside loops once (a partial tile's branch too, which a full block
skips), and each loop its passes for a full block: the innermost loop holding MMAs as many
as the warp's MMAs of the block's steps take (after those outside it), the write's loop (STG,
no MMA; the one storing the most a pass where a full and a partial tile's loop are apart) as
many as the thread's share of the block's outputs takes, the other write loops none; every
other loop once (an mbarrier wait that does not retry, a loop of blocks' work run once). A
warp-specialised kernel's producer warps run its producer loop alone, once per step's
bulk copies; its consumer warps never run it. Per output element: the output's elements over
the grid's blocks, so that the blocks' count over all outputs is the kernel's (a tile past
the output's extent, tccg_06's N = 24 in a tile of 32, executes for the elements it writes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from treduda.kernel import Kernel
from treduda.run.sass import SassLoop, SassReport


def block_outputs(kernel: Kernel, sizes: Mapping[str, int]) -> float:
    """The output elements a block of ``kernel`` writes on average over its grid."""
    outputs = math.prod(sizes[i] for i in kernel.contraction.output_indices)
    return outputs / math.prod(kernel.grid_for(sizes))


def warp_instructions_per_output(report: SassReport, warp_mmas: int, thread_bits: int,
                                 warps: int, outputs: int, producer_warps: int = 0,
                                 producer_passes: float = 0) -> float:
    """The warp instructions a block executes per output element: ``warps`` (consumer) warps
    that each issue ``warp_mmas`` MMAs over the block's steps and whose threads each store
    ``thread_bits`` bits of the block's ``outputs`` elements, and ``producer_warps`` that
    run the producer loop ``producer_passes`` times."""
    passes = _passes(report, warp_mmas, thread_bits)
    consumer = report.instructions + sum(
        loop.instructions * (_times(loop, report.loops, passes) - _times_outer(
            loop, report.loops, passes)) for loop in report.loops)
    producer = report.producer_loop_instructions * producer_passes
    return (warps * consumer + producer_warps * producer) / outputs


def _passes(report: SassReport, warp_mmas: int, thread_bits: int) -> dict[SassLoop, float]:
    """Each loop's passes per pass of the loop around it, for a consumer warp."""
    loops = report.loops
    passes = dict.fromkeys(loops, 1.0)
    main = [loop for loop in loops if loop.mma and not any(
        inner.mma and inner.within(loop) for inner in loops)]
    if main:
        inside = sum(loop.mma for loop in main)
        passes.update(dict.fromkeys(main, (warp_mmas - report.mma + inside) / inside))
    writes = [loop for loop in loops if loop.store_bits and not loop.mma]
    if writes:
        write = max(writes, key=lambda loop: loop.store_bits)
        stored = sum(bits * n for bits, n in report.global_store_widths.items())
        outside = stored - sum(loop.store_bits for loop in writes
                               if not any(loop.within(other) for other in writes))
        passes.update(dict.fromkeys(writes, 0.0))
        passes[write] = max(0.0, (thread_bits - outside) / write.store_bits)
    passes.update({loop: 0.0 for loop in loops if loop.producer})
    return passes


def _times(loop: SassLoop, loops: tuple[SassLoop, ...], passes: dict[SassLoop, float]
           ) -> float:
    """How many times a consumer warp runs ``loop``'s body: its passes, times its outer loops'."""
    times = passes[loop]
    for outer in loops:
        if loop.within(outer):
            times *= passes[outer]
    return times


def _times_outer(loop: SassLoop, loops: tuple[SassLoop, ...], passes: dict[SassLoop, float]
                 ) -> float:
    """How many times a consumer warp runs the code around ``loop`` (1 outside every loop),
    which the count has already taken for ``loop``'s instructions."""
    around = [outer for outer in loops if loop.within(outer)]
    if not around:
        return 1.0
    return _times(min(around, key=lambda outer: outer.end - outer.start), loops, passes)
