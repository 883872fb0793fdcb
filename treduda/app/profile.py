"""The `treduda profile` command: what Nsight Compute would show of a kernel, counted on the
CPU. The memory transactions come from emulating a block on the kernel's own addresses
(:meth:`treduda.Kernel.counters`), the instruction mix from the SASS of its main loop
(:meth:`treduda.Kernel.sass_report`, where nvcc and nvdisasm are installed)."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable
from .bench_cli import count

if TYPE_CHECKING:  # the command line imports no compiler part before a command needs it
    from ..kernel import Kernel
    from ..run.counters import Counters

DEFAULT_STEPS = 4  # main-loop iterations per emulated block: enough to see the pattern


def _block(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) > 3 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected a block X,Y,Z such as 0,1,0, got {text!r}")
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


def profile_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `treduda profile` besides the problem's and the kernel's."""
    parser.add_argument("--steps", type=count, default=DEFAULT_STEPS, metavar="N",
                        help="main-loop iterations each emulated block runs (default "
                             "%(default)s; 0: all, as a profiler sees them)")
    parser.add_argument("--block", type=_block, action="append", metavar="X,Y,Z",
                        help="a block to emulate (repeat for several; default the first)")
    parser.add_argument("--arch", default="sm_90", help="the SASS's architecture "
                        "(default %(default)s)")


def profile_command(args: argparse.Namespace, kernel: Kernel) -> int:
    print(profile(kernel, args.steps or None, args.block, args.arch))
    return 0


def profile(kernel: Kernel, steps: int | None = DEFAULT_STEPS,
            blocks: list[tuple[int, int, int]] | None = None, arch: str = "sm_90") -> str:
    """The counters table, its totals under Nsight Compute's names, and the SASS main loop's
    instructions by kind, per MMA and per FMA."""
    counted = kernel.counters(blocks=blocks, steps=steps)
    lines = [repr(kernel), "  " + " ".join(f"{k}={v}" for k, v in kernel.params.items()), "",
             "memory, from the kernel's addresses on emulated warps (sectors: global, "
             "wavefronts: shared; ideal: coalesced or conflict-free; ways: bank conflicts)",
             str(counted), *_grid(kernel, counted), "", *_sass(kernel, arch)]
    return "\n".join(lines)


def _grid(kernel: Kernel, counted: Counters) -> list[str]:
    """Where every iteration ran: the totals of the whole grid, blocks taken alike."""
    if counted.steps is not None:
        return [f"  (per-request ratios compare with ncu's; for its totals run --steps 0: "
                f"{counted.steps} main-loop iterations of each block were counted)"]
    scale = math.prod(kernel.grid) / len(counted.blocks)
    return [f"  whole grid ({math.prod(kernel.grid)} blocks, taken alike), as ncu sums it:",
            *(f"    {name} = {value * scale:g}" for name, value in counted.metrics().items()
              if name.endswith(".sum"))]


def _sass(kernel: Kernel, arch: str) -> list[str]:
    """The SASS main loop's economy, or why it cannot be read here."""
    try:
        report = kernel.sass_report(arch)
    except BackendUnavailable as error:
        return [f"SASS: not read ({error})"]
    per = [f"{name} {value:.2f}" for name, value in (
        ("non-MMA instructions per MMA", report.non_mma_per_mma),
        ("non-FMA instructions per FMA", report.non_fma_per_fma),
        ("shared bytes per MMA", report.shared_bytes_per_mma)) if value is not None]
    kinds = [f"  {kind:18} {sum(opcodes.values()):4}  " + ", ".join(
        f"{opcode} {n}" for opcode, n in opcodes.items())
        for kind, opcodes in report.main_loop_kinds().items()]
    return [f"SASS main loop ({arch}): {report.main_loop_instructions} instructions, "
            f"{report.main_loop_mma} MMA, {report.main_loop_ffma} FFMA/DFMA"
            + (f"; {'; '.join(per)}" if per else ""), *kinds]
