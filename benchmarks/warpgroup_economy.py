"""Issue 39's economy table: the warpgroup (wgmma) picks beside the tensor-core (WMMA) ones,
read on the CPU. For GEMM 4096^3 in fp16, bf16 and tf32 and every TCCG row in fp16, the
search named 'warpgroup' and the one named 'tensorcore' on the H100 model: each pick's tiles,
its predicted time and binding resource, and from the warpgroup kernel's SASS (sm_90a) the
main loop's HGMMA, instructions beside each MMA, LDG of operands and LDGSTS. Needs nvcc and
nvdisasm for the SASS columns (left empty without them).

    python benchmarks/warpgroup_economy.py [--rows gemm_fp16,tccg_20] [--json FILE]
                                           [--gpu H100] [--before FILE]

A row takes a few seconds to twenty (two searches and nvcc).
"""

from __future__ import annotations

import sys

from economy_tables import arguments, measure_rows, print_tables, wanted_rows

import treduda
from treduda.errors import BackendUnavailable
from treduda.run.sass import sass_report
from treduda.suites import load

GEMM = next(r for r in load("gemm") if r.id == "gemm_4096")
KINDS = {"fp16": ("float16", "highest"), "bf16": ("bfloat16", "highest"),
         "tf32": ("float32", "tf32")}


def rows() -> dict[str, tuple]:
    """name -> (row, dtype, precision): the GEMM in every kind, then the TCCG rows in fp16."""
    found = {f"gemm_{kind}": (GEMM, dtype, precision)
             for kind, (dtype, precision) in KINDS.items()}
    found.update({r.id: (r, "float16", "highest") for r in load("tccg_fp16")})
    return found


def economy(row, dtype: str, precision: str, gpu: str) -> dict:
    """One row's figures (None where a figure cannot be read here)."""
    picks = {strategy: treduda.search(row.expression, row.sizes, gpu, dtype=dtype,
                                      layout=row.layout, precision=precision,
                                      strategy=strategy).best
             for strategy in ("warpgroup", "tensorcore")}
    best = picks["warpgroup"]
    p = best.params
    figures = {"params": dict(p),
               "tiles": f"{64 * p['warpgroups'] * p['frags_m']}x{p['tile_n']}x{p['frags_k']}",
               "stages": p["stages"],
               "predicted_ms": best.prediction.seconds * 1e3,
               "binding": best.prediction.binding,
               "wmma_ms": picks["tensorcore"].prediction.seconds * 1e3}
    kernel = treduda.compile(row.expression, row.sizes, dtype=dtype, layout=row.layout,
                             precision=precision, strategy="warpgroup", params=p)
    try:
        report, = sass_report(kernel.cuda_source, "sm_90a")
    except BackendUnavailable:
        return figures
    kinds = report.main_loop_kinds()
    figures.update(hgmma=report.mma, loop_hgmma=report.main_loop_mma,
                   non_mma_per_mma=report.non_mma_per_mma,
                   ldg=kinds.get("global memory", {}).get("LDG", 0),
                   ldgsts=kinds.get("async copy", {}).get("LDGSTS", 0))
    return figures


COLUMNS = ("row", "tiles", "stg", "pred ms", "binds", "WMMA ms", "HGMMA", "loop HGMMA",
           "nonMMA/MMA", "loop LDG", "loop LDGSTS")


def cells(name: str, f: dict) -> list[str]:
    def shown(key: str, form: str) -> str:
        return "-" if f.get(key) is None else form.format(f[key])

    return [name, f["tiles"], str(f["stages"]), f"{f['predicted_ms']:.3f}", f["binding"],
            f"{f['wmma_ms']:.3f}", shown("hgmma", "{}"), shown("loop_hgmma", "{}"),
            shown("non_mma_per_mma", "{:.2f}"), shown("ldg", "{}"), shown("ldgsts", "{}")]


BESIDE = ("row", "pred ms", "nonMMA/MMA", "loop LDG")


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, "gemm_fp16, ..., tccg_01, ...")
    args = parser.parse_args(argv)
    known = rows()
    wanted = wanted_rows(parser, args.rows, list(known))
    lines = measure_rows(wanted, lambda name: economy(*known[name], args.gpu), cells,
                         COLUMNS, args.json)
    print("tiles: BM x BN x wgmma k-extents per step; WMMA ms: the tensor-core search's pick "
          "on the same model; loop columns: the SASS main loop ('-' or 0 HGMMA there: the "
          "reduction unrolled whole)")
    print_tables(COLUMNS, cells, BESIDE, lines, args.before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
