"""The README's table of GPU measurements, written from the latest GPU run's data file.

    python benchmarks/readme_table.py [--data benchmarks/data/h200_measured_2026-11-26.json]

It prints the Markdown table that README.md holds between its ``gpu-table`` markers;
tests/test_readme.py checks that the two are the same, so the README's numbers are the file's.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "h200_measured_2026-11-26.json"


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def table(run: dict) -> str:
    """Markdown rows: GEMM 4096³ (the search's pick) and the TCCG fp32 suite beside torch.einsum
    (cuBLAS, TF32 off). A ratio is torch.einsum's time over treduda's: above 1, treduda is
    faster."""
    gemm = next(row for row in run["gemm4096"] if row["label"] == "search-default")
    rows = run["rows"]
    ratios = {row["id"]: row["ratio_torch"] for row in rows}
    ratios.update({row["id"]: row["ratio_torch"] for row in run["rows_from_log"]})
    best = max(rows, key=lambda row: row["ratio_torch"])
    lines = ["| contraction (float32) | treduda ms | torch.einsum ms | torch / treduda |",
             "|---|---:|---:|---:|",
             f"| GEMM 4096³, the search's pick | {gemm['treduda_ms']:.2f} | "
             f"{gemm['torch_ms']:.2f} | {gemm['ratio_torch']:.2f}x |",
             f"| {best['id']} `{best['expression']}`, the best row | {best['treduda_ms']:.3f} | "
             f"{best['torch_ms']:.3f} | {best['ratio_torch']:.2f}x |",
             f"| TCCG rows 1-{len(rows)}, geometric mean | | | "
             f"{geometric_mean([row['ratio_torch'] for row in rows]):.2f}x |",
             f"| TCCG rows 1-{len(ratios)}, geometric mean | | | "
             f"{geometric_mean(list(ratios.values())):.2f}x |"]
    device = run["device"].split(" (")[0]
    lines.append(f"\n{device}, {run['date']}: median of 20 launches (CUDA events), kernels "
                 f"searched for the H100 model; `{DATA.relative_to(DATA.parents[2]).as_posix()}`.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="a GPU run's --json file")
    args = parser.parse_args()
    print(table(json.loads(args.data.read_text())))


if __name__ == "__main__":
    main()
