"""Issue 38's economy table: how the float32 SIMT picks spend the issue slots of their main
loop, read on the CPU from the SASS (nvcc, sm_90), beside a hand-written SGEMM. For GEMM 4096^3
and every TCCG fp32 row (the search as `treduda bench` runs it, H100 model, but with no time
budget, so the pick does not depend on the machine's load; ptxas checks the winner, as bench
and compile()'s background check do): the pick, the FFMA share of the SASS main loop, shared
loads per FFMA and their widths, global loads per FFMA, branches and integer instructions in the
main loop, ptxas's registers. Needs nvcc and nvdisasm (the SASS columns are left empty without
them).

    python benchmarks/simt_economy.py [--rows gemm_4096,tccg_12] [--json FILE]
                                      [--gpu H100] [--before FILE]

``--before`` takes an earlier run's ``--json`` (benchmarks/data/simt_economy_before.json holds
the figures before issue 38's changes) and prints its figures beside this run's.

A row takes several seconds on idle cores (the search, then nvcc); all 49 take a few minutes
there, an hour or more on busy ones. ``--json`` is written after every row.
"""

from __future__ import annotations

import sys

from economy_tables import arguments, measure_rows, print_tables, wanted_rows

import treduda
from treduda.errors import BackendUnavailable
from treduda.suites import load
from treduda.tuning.budgets import BENCH_MAX_NODES

GEMM = next(r for r in load("gemm") if r.id == "gemm_4096")
# The hand-written SGEMM of issue 38 (128x128x8 tiles, 8x8 per thread, A stored transposed in
# shared memory), read the same way: FFMA share and one LDS.128 per 16 FFMA.
ANCHOR = ("hand-written SGEMM 128x128x8, 8x8 per thread", 0.875, 1 / 16)
# The main loop's integer arithmetic (address and index computation, moves, predicates).
INTEGER = {"IMAD", "IADD3", "SHF", "LOP3", "LEA", "VIADD", "IMNMX", "VIMNMX", "ISETP", "SEL",
           "IABS", "MOV", "PRMT", "UIADD3", "UIMAD", "ULOP3", "USHF", "UISETP", "UMOV", "ULDC",
           "S2R", "S2UR", "CS2R", "R2UR", "LDC", "P2R", "R2P", "PLOP3", "I2F", "F2I"}


def rows() -> dict[str, object]:
    """name -> suite row: GEMM 4096^3, then every TCCG fp32 row."""
    return {GEMM.id: GEMM, **{r.id: r for r in load("tccg_fp32")}}


def economy(row, gpu: str) -> dict:
    """One row's figures (the SASS ones absent where nvcc or nvdisasm is missing)."""
    result = treduda.search(row.expression, row.sizes, gpu, layout=row.layout,
                            max_nodes=BENCH_MAX_NODES, budget=None, check=True)
    best = result.best
    kernel = treduda.compile(row.expression, row.sizes, layout=row.layout,
                             strategy=best.strategy, params=best.params)
    figures = {"pick": best.strategy, "params": dict(best.params),
               "predicted_ms": best.prediction.seconds * 1e3}
    try:
        report = kernel.sass_report()
        registers = kernel.compile_cuda().registers
    except BackendUnavailable:
        return figures
    opcodes = report.main_loop_opcodes
    ffma = report.main_loop_ffma
    figures.update(registers=registers, loop=report.main_loop_instructions, ffma=ffma,
                   ffma_share=report.ffma_share, lds=opcodes.get("LDS", 0),
                   lds_widths={str(bits): n for bits, n
                               in report.main_loop_shared_load_widths.items()},
                   ldg=opcodes.get("LDG", 0),
                   ldgsts=opcodes.get("LDGSTS", 0), branches=opcodes.get("BRA", 0),
                   integer=sum(n for op, n in opcodes.items() if op in INTEGER),
                   never=sum(report.main_loop_never_executed.values()))
    return figures


COLUMNS = ("row", "pick", "tiles", "regs", "FFMA", "FFMA %", "FFMA/LDS", "LDS widths",
           "FFMA/LDG", "BRA", "int", "never", "pred ms")


def tiles(params: dict) -> str:
    """The pick's tiles: threads x registers per axis, the step, the staged inputs."""
    axes = [f"{params[f'block_{a}']}x{params[f'reg_{a}']}" for a in "xyz"
            if f"block_{a}" in params and params[f"block_{a}"] * params[f"reg_{a}"] > 1]
    staged = params.get("stage") or "-"
    return f"{' '.join(axes)} k{params.get('step', 0)} st:{staged}"


def cells(name: str, f: dict) -> list[str]:
    def per(count: str) -> str:
        return "-" if f.get(count) is None else "none" if not f[count] else (
            f"{f['ffma'] / f[count]:.1f}")

    if f.get("ffma") is None:
        sass = ["-"] * 9
    else:
        widths = ",".join(f"{n}x{bits}" for bits, n in f["lds_widths"].items()) or "-"
        sass = [str(f["registers"]), str(f["ffma"]), f"{f['ffma_share']:.1%}", per("lds"),
                widths, per("ldg"), str(f["branches"]), str(f["integer"]),
                str(f.get("never", "-"))]
    return [name, f["pick"], tiles(f["params"]), *sass, f"{f['predicted_ms']:.3f}"]


BESIDE = ("row", "FFMA %", "FFMA/LDS", "LDS widths", "FFMA/LDG", "BRA", "int", "regs")


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, "gemm_4096, tccg_01, ...")
    args = parser.parse_args(argv)
    known = rows()
    wanted = wanted_rows(parser, args.rows, list(known))
    lines = measure_rows(wanted, lambda name: economy(known[name], args.gpu), cells, COLUMNS,
                         args.json)
    name, share, per_ffma = ANCHOR
    print(f"anchor: {name}: FFMA {share:.1%}, {1 / per_ffma:.0f} FFMA per LDS (all 128-bit)")
    print("FFMA %: FFMA share of the SASS main loop; FFMA/LDS, FFMA/LDG: FFMA per shared and "
          "global load instruction there ('none': no such load); LDS widths: count x bits; "
          "BRA, int: branches and integer instructions in the main loop; never: its "
          "instructions guarded by a never-true predicate (@!PT LDS RZ, [RZ] before LDGSTS: "
          "issued, in no other column; '-': a run from before they were counted apart)")
    print_tables(COLUMNS, cells, BESIDE, lines, args.before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
