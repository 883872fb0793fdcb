"""Issue 39's economy table: the warpgroup (wgmma) picks beside the tensor-core (WMMA) ones,
read on the CPU. For GEMM 4096^3 in fp16, bf16 and tf32 and every TCCG row in fp16, the
search named 'warpgroup' and the one named 'tensorcore' on the H100 model: each pick's tiles,
its predicted time and binding resource, and from the warpgroup kernel's SASS (sm_90a) the
main body's HGMMA, instructions beside each MMA, LDG of operands, LDGSTS, LDS, STS and STG
(and apart the never-executed placeholders ptxas puts before LDGSTS); and from the
emulator's count of its first block's first steps the worst bank-conflict ways, of all
shared accesses and of the operand tiles'. The main body is the SASS main loop, or where
nvcc unrolled a reduction of one or two steps whole (no loop holds an HGMMA), the straight
run of code holding them up to the wait for the last of them (WARPGROUP.DEPBAR), which is then
the kernel's body: the per-HGMMA figures read either alike, and the C tile's write comes after
the body as after a loop (tccg_42's 96 STS of the C tile were the body's, 113.5 instructions
beside each HGMMA where the body's are 64); the emulator's regions end there too. Beside them
the warp instructions a block executes per output element (exec/out, the whole kernel:
executed_instructions.py), which reads a loop and a straight run alike. Needs nvcc and
nvdisasm for the SASS columns (left empty without them).

    python benchmarks/warpgroup_economy.py [--rows gemm_fp16,tccg_20] [--json FILE]
                                           [--gpu H100] [--before FILE] [--hold K=V ...]

``--hold staged_b=True`` holds the warpgroup search to a form it may not pick (a K box's B
staged), as ``treduda bench --hold`` does; the tensor-core search is not held.

Below the table, each row's copies: how the pick's operand tiles arrive (tma, cp.async,
staged, registers) and, where not by bulk tensor copies, why (the tensors, or the pick's tile
no whole number of boxes: :func:`~treduda.strategies.warpgroup_kernel.tma_refusal`; or the
model's price of the best tma kernel, a search held to ``tma=True``, against the pick's); and
for a pick whose body loads operands by LDG, the best kernel that does not (a search held to
a staged B in a K box, else to cp.async) with its SASS counts: every row has a warpgroup
kernel with no LDG of operands.

A row takes a few seconds to twenty (two searches and nvcc).
"""

from __future__ import annotations

import json
import sys

from economy_tables import arguments, measure_rows, print_tables, table, wanted_rows
from executed_instructions import block_outputs, warp_instructions_per_output
from treduda.strategies.tensorcore_kernel import A_TILE, B_TILE
from treduda.strategies.tensorcore_tiles import boxed, k_box
from treduda.strategies.warpgroup_kernel import (
    WarpgroupBuilder,
    staged_width,
    step_boxes,
    tma_refusal,
)
from treduda.strategies.warpgroup_tma import tma_reason

import treduda
from treduda.app.bench_cli import param
from treduda.errors import BackendUnavailable, StrategyError
from treduda.frontend import dtypes
from treduda.polyhedral.lower import plan
from treduda.suites import load

GEMM = next(r for r in load("gemm") if r.id == "gemm_4096")
COUNTED_STEPS = 2  # the emulator's steps of the first block: the copies' and MMAs' pattern
KINDS = {"fp16": ("float16", "highest"), "bf16": ("bfloat16", "highest"),
         "tf32": ("float32", "tf32")}


def rows() -> dict[str, tuple]:
    """name -> (row, dtype, precision): the GEMM in every kind, then the TCCG rows in fp16."""
    found = {f"gemm_{kind}": (GEMM, dtype, precision)
             for kind, (dtype, precision) in KINDS.items()}
    found.update({r.id: (r, "float16", "highest") for r in load("tccg_fp16")})
    return found


def search(row, dtype: str, precision: str, gpu: str, strategy: str,
           held: dict | None = None, check: bool = False):
    """The ``strategy`` search's pick for ``row``, held to those parameters' values, and
    with ``check`` as ptxas's check re-ranks it (as bench does: near-ties by their SASS)."""
    values = {k: (v,) for k, v in (held or {}).items()} or None
    return treduda.search(row.expression, row.sizes, gpu, dtype=dtype, layout=row.layout,
                          precision=precision, strategy=strategy, values=values,
                          check=check).best


def tiles(p: dict) -> str:
    """A warpgroup kernel's tiles and forms, as the table's column shows them."""
    return (f"{64 * p['warpgroups'] * p['frags_m']}x{p['tile_n']}x{p['frags_k']}"
            + ("" if p.get("free_layout", "group") == "group" else f" {p['free_layout']}")
            + (" staged" if p.get("staged_b") else "") + (" tma" if p.get("tma") else "")
            + (" producer" if p.get("producer") else ""))


def copies(program, p: dict) -> str:
    """How a warpgroup kernel's operand tiles arrive."""
    if p.get("tma"):
        return "tma"
    if not p["async_copy"]:
        return "registers"
    if boxed(program, p):  # a K box's B
        return "cp.async, B staged" if p.get("staged_b") else "cp.async, B by registers"
    return "cp.async"


def economy(row, dtype: str, precision: str, gpu: str, held: dict | None = None) -> dict:
    """One row's figures (None where a figure cannot be read here), the warpgroup search
    ``held`` to those parameters' values."""
    best = search(row, dtype, precision, gpu, "warpgroup", held, check=True)
    p = best.params
    program = plan(row.expression, row.sizes, row.layout, dtype, precision=precision)
    figures = {"params": dict(p), "tiles": tiles(p), "stages": p["stages"],
               "predicted_ms": best.prediction.seconds * 1e3,
               "binding": best.prediction.binding,
               "wmma_ms": search(row, dtype, precision, gpu,
                                 "tensorcore").prediction.seconds * 1e3,
               "copies": copies(program, p)}
    if not p.get("tma"):
        figures["tma_refusal"] = tma_refusal(program, p)
        if tma_reason(program) is None:  # some tiles may take boxes: the best of them
            try:
                bulk = search(row, dtype, precision, gpu, "warpgroup",
                              {**(held or {}), "tma": True})
                figures["tma_ms"] = bulk.prediction.seconds * 1e3
                figures["tma_tiles"] = tiles(bulk.params)
            except StrategyError:  # no tile takes boxes: why the pick's would not
                grouped = tma_refusal(program, {**p, "free_layout": "group"})
                figures["tma_refusal"] += "; no tile takes boxes" + (
                    f" (the pick's in a group layout: {grouped})"
                    if grouped != figures["tma_refusal"] else "")
    figures.update(sass_figures(row, dtype, precision, p, counted=True))
    if figures.get("ldg"):  # the best kernel with no LDG of operands
        form = ({"staged_b": True} if k_box(program) and staged_width(program)
                else {"async_copy": True})
        other = search(row, dtype, precision, gpu, "warpgroup", {**(held or {}), **form})
        figures["no_ldg"] = {"tiles": tiles(other.params), "copies": copies(program, other.params),
                             "predicted_ms": other.prediction.seconds * 1e3,
                             **sass_figures(row, dtype, precision, other.params)}
    return figures


def sass_figures(row, dtype: str, precision: str, p: dict, counted: bool = False) -> dict:
    """The warpgroup kernel of parameters ``p``: its SASS figures (none without nvcc), and
    where ``counted`` the emulator's bank-conflict ways."""
    kernel = treduda.compile(row.expression, row.sizes, dtype=dtype, layout=row.layout,
                             precision=precision, strategy="warpgroup", params=p)
    figures = {}
    if counted:
        counted_steps = kernel.counters(steps=COUNTED_STEPS)
        # bulk tensor copies (tma) store through no load/store unit: no ways of the tiles'
        # stores
        figures.update(ways=counted_steps.worst_ways(),
                       tile_ways=max((t.ways for t in counted_steps.traffic
                                      if t.array in (A_TILE, B_TILE)), default=None))
    try:
        report = kernel.sass_report("sm_90a")  # (a split's second kernel aside)
    except BackendUnavailable:
        return figures
    kinds = report.main_loop_kinds()
    figures.update(hgmma=report.mma, loop_hgmma=report.main_loop_mma, looped=report.looped,
                   non_mma_per_mma=report.non_mma_per_mma,
                   others_non_mma_per_mma=report.others_non_mma_per_mma,
                   ldg=kinds.get("global memory", {}).get("LDG", 0),
                   ldgsts=kinds.get("async copy", {}).get("LDGSTS", 0),
                   utmaldg=kinds.get("integer and other", {}).get("UTMALDG", 0),
                   kernel_utmaldg=report.bulk_copies,
                   lds=kinds.get("shared memory", {}).get("LDS", 0),
                   sts=kinds.get("shared memory", {}).get("STS", 0),
                   stg=kinds.get("global memory", {}).get("STG", 0),
                   never=sum(report.main_loop_never_executed.values()),
                   producer_non_mma_per_mma=producer_per_mma(report, row, dtype, precision, p),
                   register_limits=list(report.register_limits),
                   executed_per_output=executed_per_output(report, kernel, p, row.sizes))
    return figures


def executed_per_output(report, kernel, p: dict, sizes: dict) -> float:
    """The warp instructions a block executes per output element (executed_instructions.py):
    the consumer warps' HGMMAs, frags_m x frags_k a step, and the producer's loop once per
    step's bulk copies."""
    built = WarpgroupBuilder(kernel.program, p)
    warps = built.threads // 32
    producer_warps = kernel.block[0] * kernel.block[1] * kernel.block[2] // 32 - warps
    producer_passes = (built.chunk / producer_pass_steps(report, kernel.program, p)
                       if producer_warps and report.producer_loop_bulk_copies else 0.0)
    return warp_instructions_per_output(
        report, built.chunk * p["frags_m"] * p["frags_k"],
        built.tile["m"] * built.tile["n"] * dtypes.itemsize(kernel.dtype) * 8 // built.threads,
        warps, block_outputs(kernel, sizes), producer_warps, producer_passes)


def producer_per_mma(report, row, dtype: str, precision: str, p: dict) -> float | None:
    """A producer warpgroup's instructions per step (its loop's, over the steps its UTMALDGs
    are: nvcc may unroll it) per HGMMA a consumer warp issues in a step; None without one."""
    if not report.producer_loop_bulk_copies:
        return None
    program = plan(row.expression, row.sizes, row.layout, dtype, precision=precision)
    return (report.producer_loop_instructions / producer_pass_steps(report, program, p)
            / (p["frags_m"] * p["frags_k"]))


def producer_pass_steps(report, program, p: dict) -> float:
    """The steps a pass of the producer loop copies (its UTMALDGs over a step's boxes: nvcc
    may unroll it)."""
    return report.producer_loop_bulk_copies / sum(box.boxes for box in step_boxes(program, p))


COLUMNS = ("row", "tiles", "stg", "pred ms", "binds", "WMMA ms", "HGMMA", "body",
           "body HGMMA", "nonMMA/MMA", "exec/out", "others", "body LDG", "body LDGSTS",
           "body STG", "ways", "tile ways", "body LDS", "body STS", "body never", "producer",
           "setmaxnreg")


def cells(name: str, f: dict) -> list[str]:
    def shown(key: str, form: str) -> str:
        return "-" if f.get(key) is None else form.format(f[key])

    return [name, f["tiles"], str(f["stages"]), f"{f['predicted_ms']:.3f}", f["binding"],
            f"{f['wmma_ms']:.3f}", shown("hgmma", "{}"), body(f), shown("loop_hgmma", "{}"),
            shown("non_mma_per_mma", "{:.2f}") + (" s" if f.get("looped") is False else ""),
            shown("executed_per_output", "{:.3g}"), shown("others_non_mma_per_mma", "{:.2f}"),
            shown("ldg", "{}"), shown("ldgsts", "{}"), shown("stg", "{}"),
            shown("ways", "{}"), shown("tile_ways", "{}"), shown("lds", "{}"),
            shown("sts", "{}"), shown("never", "{}"),
            shown("producer_non_mma_per_mma", "{:.2f}"),
            "/".join(map(str, f.get("register_limits") or [])) or "-"]


def body(f: dict) -> str:
    """Where the HGMMAs sit: in a loop, or in the straight run nvcc unrolled the reduction
    into ("-": no SASS; "loop" for a run from before the report said)."""
    if f.get("hgmma") is None:
        return "-"
    return "loop" if f.get("looped", True) else "straight"


BESIDE = ("row", "pred ms", "nonMMA/MMA", "exec/out", "body LDG")


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, "gemm_fp16, ..., tccg_01, ...")
    parser.add_argument("--hold", action="append", type=param, default=[], metavar="K=V",
                        help="hold the warpgroup search to this value of a parameter "
                             "(repeatable; e.g. staged_b=True)")
    args = parser.parse_args(argv)
    known = rows()
    wanted = wanted_rows(parser, args.rows, list(known))
    lines = measure_rows(wanted, lambda name: economy(*known[name], args.gpu, dict(args.hold)),
                         cells, COLUMNS, args.json)
    print("tiles: BM x BN x wgmma k-extents per step (and a free box's layout; staged: a K "
          "box's B by cp.async into a staging tile, transposed in shared memory; tma: tiles "
          "moved by bulk tensor copies on mbarriers); WMMA ms: "
          "the tensor-core search's pick on the same model; body: where the HGMMAs sit in "
          "the SASS, a loop or the straight run nvcc unrolled a reduction of one or two steps "
          "into; body columns: that code (nonMMA/MMA marked ' s' where it is the straight run, "
          "which holds the kernel's setup and copies too); exec/out: the warp instructions a "
          "block executes per output element, the whole kernel with each loop counted as many "
          "times as it runs (executed_instructions.py), which reads a loop and a straight run "
          "alike; others: nonMMA/MMA of the warps that branch over "
          "the bulk copies' issue (one thread's); ways: the worst bank-conflict ways in the first "
          f"block's first {COUNTED_STEPS} steps, of every shared access and of the operand "
          "tiles'; body never: instructions guarded by a never-true predicate (@!PT LDS RZ, "
          "[RZ] before LDGSTS), issued (in nonMMA/MMA) but not in body LDS; producer: a "
          "producer warpgroup's (tiles 'producer') loop instructions a step per HGMMA of a "
          "consumer warp's step, on its own warp; setmaxnreg: the roles' register counts")
    print_tables(COLUMNS, cells, BESIDE, lines, args.before)
    if args.json:
        with open(args.json) as measured:
            print("\ncopies: the pick's operand tiles, why not by bulk tensor copies, and the "
                  "best kernel with no LDG of operands where the pick has LDG")
            print(table(COPY_COLUMNS, [copy_cells(name, f) for name, f
                                       in json.load(measured).items() if "error" not in f],
                        left=len(COPY_COLUMNS)))
    return 0


COPY_COLUMNS = ("row", "copies", "UTMALDG body/kernel", "not tma because", "no-LDG kernel")


def copy_cells(name: str, f: dict) -> list[str]:
    """A row's copies: the pick's, why not tma, and its kernel without LDG of operands."""
    why = "-" if f.get("copies") == "tma" else (f.get("tma_refusal") or "")
    if f.get("tma_ms") is not None:
        why = (f"{why}; " if why else "") + (f"the best tma kernel {f['tma_tiles']} "
                                            f"{f['tma_ms']:.4f} ms vs {f['predicted_ms']:.4f}")
    other = f.get("no_ldg")
    alternative = ("the pick" if f.get("ldg") == 0 else "-" if other is None else
                   f"{other['tiles']} ({other['copies']}) {other['predicted_ms']:.4f} ms, "
                   f"body LDG {other.get('ldg', '-')} LDGSTS {other.get('ldgsts', '-')} "
                   f"UTMALDG {other.get('utmaldg', '-')}")
    return [name, f.get("copies", "-"),
            f"{f.get('utmaldg', '-')}/{f.get('kernel_utmaldg', '-')}", why, alternative]


if __name__ == "__main__":
    sys.exit(main())
