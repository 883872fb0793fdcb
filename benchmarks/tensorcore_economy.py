"""Issue 37's economy table: how the tensor-core picks spend their instructions and memory
transactions, read on the CPU, beside CUTLASS. For GEMM 4096^3 in fp16, bf16, tf32, 3xtf32 and
fp64 and every TCCG row in fp16 (the search as `treduda bench` runs it, H100 model, over
``--strategy``: "tensorcore" by default, the mma.sync mapping issue 37 is about, since the
H100's default search picks the warpgroup one for GEMM and most TCCG rows; ptxas checks
the pick, as bench does, and breaks its near-ties by their SASS main loops): the pick,
its tiles and buffering, ptxas's registers, shared bytes, occupancy, global sectors per warp
request of A and B beside the ideal (the emulator, on one block at full size), the worst
bank-conflict ways in the main loop, non-MMA instructions and shared bytes per MMA from the
SASS main loop, the model's instructions per step beside the SASS loop's (as many steps as
nvcc unrolled into it; none where it unrolled the whole reduction), the warp instructions a
block executes per output element (exec/out, the whole kernel: executed_instructions.py; it
reads a loop and a reduction nvcc unrolled whole alike, where the per-MMA figures read that
straight run, the whole kernel, and are marked " s"), and the predicted time.
Needs nvcc and nvdisasm for the SASS columns (left empty without them).

    python benchmarks/tensorcore_economy.py [--rows gemm_fp16,tccg_20] [--json FILE]
                                            [--gpu H100] [--steps 4] [--before FILE]
                                            [--free-layout padded]

``--before`` takes an earlier run's ``--json`` (benchmarks/data/tensorcore_economy_before.json
holds the figures before issue 37's builder changes) and prints its sectors, ways and SASS
figures of each row in a second table, beside the same columns now. ``--free-layout`` holds
the search to one ``free_layout`` ("group", "box", "padded", "whole" or "full"; rows that do
not offer it fail), to see the best candidate of a layout the search does not pick.

A row took 12-50 s on two shared cores (the search, then nvcc); all 53 about 21 minutes.
"""

from __future__ import annotations

import math
import sys

from economy_tables import arguments, measure_rows, print_tables, wanted_rows
from executed_instructions import block_outputs, warp_instructions_per_output
from treduda.strategies.tensorcore_kernel import A_TILE, B_TILE, Builder

import treduda
from treduda.errors import BackendUnavailable
from treduda.frontend import dtypes
from treduda.model.gpus import gpu as find_gpu
from treduda.model.model import model_of
from treduda.model.occupancy import blocks_per_sm
from treduda.suites import load
from treduda.tuning.budgets import BENCH_MAX_NODES
from treduda.tuning.walk import shared_bytes

GEMM = next(r for r in load("gemm") if r.id == "gemm_4096")
KINDS = {"fp16": ("float16", "highest"), "bf16": ("bfloat16", "highest"),
         "tf32": ("float32", "tf32"), "3xtf32": ("float32", "3xtf32"),
         "fp64": ("float64", "highest")}
# Read the same way from CUTLASS 2.x's SASS (sm_80; ../shared/tools/README.md): non-MMA
# instructions per MMA and shared bytes per MMA.
ANCHORS = (("CUTLASS 2.x fp16 128x128x32, 3 stages", 1.53, 198),
           ("CUTLASS 2.x tf32 128x128x16, 4 stages", 3.53, 198))


def rows() -> dict[str, tuple]:
    """name -> (row, dtype, precision): the GEMM in every kind, then the TCCG rows in fp16."""
    found = {f"gemm_{kind}": (GEMM, dtype, precision)
             for kind, (dtype, precision) in KINDS.items()}
    found.update({r.id: (r, "float16", "highest") for r in load("tccg_fp16")})
    return found


def economy(row, dtype: str, precision: str, gpu: str, steps: int, strategy: str | None,
            free_layout: str | None = None) -> dict:
    """One row's figures (None where a figure does not apply or cannot be read here), the
    search held to ``strategy`` (None: every strategy) and to ``free_layout`` (None: all)."""
    result = treduda.search(row.expression, row.sizes, gpu, dtype=dtype, layout=row.layout,
                            max_nodes=BENCH_MAX_NODES, precision=precision,
                            strategy=strategy, check=True,
                            values={"free_layout": (free_layout,)} if free_layout else None)
    best = result.best
    kernel = treduda.compile(row.expression, row.sizes, dtype=dtype, layout=row.layout,
                             strategy=best.strategy, params=best.params, precision=precision)
    p = kernel.params
    figures = {"pick": best.strategy, "params": dict(p), "predicted_ms": best.prediction.seconds
               * 1e3, "shared_bytes": shared_bytes(kernel), "threads": math.prod(kernel.block)}
    if best.strategy == "tensorcore":
        figures["tiles"] = (f"{p['warps_m']}x{p['warps_n']}w {p['frags_m']}x{p['frags_n']}f "
                            f"k{p['frags_k']} {p['mapping']}"
                            + (" swizzled" if p["shared_layout"] == "swizzle" else "")
                            + ("" if p.get("free_layout", "group") == "group"
                               else f" {p['free_layout']}"))
        figures["stages"] = p["stages"]
        model = model_of(kernel.program, find_gpu(gpu), best.strategy)
        figures.update(model_step=model.step_instructions(p), model_mma=model.step_mmas(p),
                       block_steps=model.block_steps(p))
        sectors = model.copy_sectors(p, steps)  # the model's count, beside the emulator's
        for name, operand in zip("AB", kernel.contraction.inputs, strict=False):
            requests, transactions, _, _ = sectors[operand]
            figures[f"{name}_model_sectors"] = transactions / requests
    counted = kernel.counters(steps=steps)
    for name, operand in zip("AB", kernel.contraction.inputs, strict=False):
        loads = counted.of(operand, "ldgsts") or counted.of(operand)
        if loads is not None:
            figures[f"{name}_sectors"] = loads.per_request
            figures[f"{name}_ideal"] = loads.ideal_per_request
    figures["ways"] = counted.worst_ways()
    if best.strategy == "tensorcore":  # the operand tiles' fragment loads and copies alone
        figures["tile_ways"] = max(t.ways for t in counted.traffic
                                   if t.array in (A_TILE, B_TILE))
    try:
        report = kernel.sass_report()
        registers = kernel.compile_cuda().registers
    except BackendUnavailable:
        return figures
    g = find_gpu(gpu)
    resident = blocks_per_sm(g, figures["threads"], registers, figures["shared_bytes"])
    figures.update(registers=registers, blocks_per_sm=resident,
                   occupancy=resident * figures["threads"] / g.max_threads_per_sm,
                   non_mma_per_mma=report.non_mma_per_mma,
                   shared_per_mma=report.shared_bytes_per_mma,
                   sass_loop=report.main_loop_instructions, sass_mma=report.main_loop_mma,
                   ldsm=report.main_loop_opcodes.get("LDSM", 0),
                   generic_loads=report.main_loop_opcodes.get("LD", 0),
                   never=sum(report.main_loop_never_executed.values()),
                   looped=report.looped)
    if best.strategy == "tensorcore":
        tile = Builder(kernel.program, p).tile
        figures["executed_per_output"] = warp_instructions_per_output(
            report, figures["model_mma"] * figures["block_steps"],
            tile["m"] * tile["n"] * dtypes.itemsize(kernel.dtype) * 8 // figures["threads"],
            figures["threads"] // 32, block_outputs(kernel, row.sizes))
    return figures


COLUMNS = ("row", "pick", "tiles", "stg", "regs", "smem B", "occ", "A sect/req", "B sect/req",
           "ways", "tile ways", "frags", "nonMMA/MMA", "smem B/MMA", "never",
           "model/SASS step", "exec/out", "pred ms")


def fragments(f: dict) -> str:
    """How the SASS main loop loads fragments: ldmatrix, generic loads (LD) or LDS; "-"
    where no loop holds an MMA (nvcc unrolled a short reduction whole)."""
    if not f.get("sass_mma"):
        return "-"
    return "ldmatrix" if f["ldsm"] else "generic LD" if f["generic_loads"] else "LDS"


def cells(name: str, f: dict) -> list[str]:
    def shown(key: str, form: str) -> str:
        return "-" if f.get(key) is None else form.format(f[key])

    def sectors(operand: str) -> str:
        if f.get(f"{operand}_sectors") is None:
            return "-"
        counted = f"{f[f'{operand}_sectors']:.1f} ({f[f'{operand}_ideal']:.0f})"
        model = f.get(f"{operand}_model_sectors")
        differs = model is not None and abs(model - f[f"{operand}_sectors"]) > 1e-9
        return f"{counted} model {model:.1f}" if differs else counted

    return [name, f["pick"], shown("tiles", "{}"), shown("stages", "{}"),
            shown("registers", "{}"), str(f["shared_bytes"]), shown("occupancy", "{:.0%}"),
            sectors("A"), sectors("B"), str(f["ways"]), shown("tile_ways", "{}"), fragments(f),
            shown("non_mma_per_mma", "{:.2f}") + straight_run(f),
            shown("shared_per_mma", "{:.0f}"), shown("never", "{}"), step(f),
            shown("executed_per_output", "{:.3g}"), f"{f['predicted_ms']:.3f}"]


def straight_run(f: dict) -> str:
    """" s" where the SASS figures read the straight run holding the MMAs (nvcc unrolled the
    reduction whole: the run is the kernel, setup to write), not a loop's body."""
    return " s" if f.get("looped") is False else ""


def step(f: dict) -> str:
    """The model's instructions per step beside the SASS loop's: where the loop holds ``n``
    steps' MMAs (nvcc unrolled them), the model's ``n`` steps ("xn"); "unrolled" where it
    holds all of a block's steps (the reduction unrolled whole: the loop is another one, and
    the two counts compare different things); "-" where no loop holds an MMA."""
    if f.get("model_step") is None or not f.get("sass_mma"):
        return "-"
    if "model_mma" not in f:  # a run from before the model counted its MMAs per step
        return f"{f['model_step']:.0f}/{f['sass_loop']}"
    steps, left = divmod(f["sass_mma"], f["model_mma"])
    if left or steps >= f["block_steps"] > 1:
        return f"{f['model_step']:.0f}/unrolled"
    times = f" (x{steps})" if steps > 1 else ""
    return f"{steps * f['model_step']:.0f}/{f['sass_loop']}{times}"


BESIDE = ("row", "A sect/req", "B sect/req", "ways", "tile ways", "frags", "nonMMA/MMA",
          "smem B/MMA", "exec/out")


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, "gemm_fp16, ..., tccg_01, ...")
    parser.add_argument("--steps", type=int, default=4,
                        help="main-loop iterations the counters emulate (default 4: a "
                             "pipeline's first iterations only copy)")
    parser.add_argument("--strategy", default="tensorcore",
                        help="the strategy searched (default tensorcore: the mma.sync picks; "
                             "'default' searches them all, as treduda bench does)")
    parser.add_argument("--free-layout", choices=("group", "box", "padded", "whole", "full"),
                        help="hold the search to this free_layout (default: all offered)")
    args = parser.parse_args(argv)
    strategy = None if args.strategy == "default" else args.strategy
    known = rows()
    wanted = wanted_rows(parser, args.rows, list(known))
    lines = measure_rows(wanted, lambda name: economy(*known[name], args.gpu, args.steps,
                                                     strategy, args.free_layout),
                         cells, COLUMNS, args.json)
    print("anchors (SASS main loop, non-MMA per MMA / shared bytes per MMA): "
          + "; ".join(f"{name} {per:.2f} / {smem} B" for name, per, smem in ANCHORS))
    print("A/B sect/req: global sectors per warp request (ideal for the width in brackets), "
          "one block at full size; ways: worst bank conflict in the main loop (1: none; the "
          "C tile's too where the main loop is inside a loop of blocks' work); tile ways: the "
          "worst of the operand tiles' fragment loads and copies (the tensor-core model's "
          "count of the copies' sectors is shown beside where it differs); model/SASS step: "
          "the model's instructions per step beside the SASS loop's, (xn) where nvcc unrolled "
          "n steps into it, 'unrolled' where it unrolled them all (no loop is the reduction's); "
          "'-' in the SASS columns: no loop holds an MMA (the reduction unrolled whole); "
          "never: the loop's instructions guarded by a never-true predicate (@!PT LDS RZ, "
          "[RZ] before LDGSTS), issued (in nonMMA/MMA) but in no shared bytes; nonMMA/MMA and "
          "smem B/MMA read the SASS main loop, or where nvcc unrolled the reduction whole "
          "(marked ' s') the straight run holding the MMAs, which is then the whole kernel "
          "(setup, prologue copies, C tile, often the write): compare such rows by exec/out, "
          "the warp instructions a block executes per output element (the whole kernel, each "
          "loop counted as many times as it runs: executed_instructions.py)")
    print_tables(COLUMNS, cells, BESIDE, lines, args.before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
