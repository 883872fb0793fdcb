"""The GPU benchmark: each searched kernel of a suite timed beside cupy.einsum and torch.einsum
on the same operands; the same as `treduda bench --gpu-time` (see treduda/app/gpu_bench.py).

    python benchmarks/gpu.py [--suite tccg_fp32|tccg_fp64|tc|tapp|all] [--repeats 20]
                             [--json out.json] [--plot out.png] [--limit N] [--ids ID,ID]
"""

from __future__ import annotations

import sys

from treduda.app.bench_cli import main

if __name__ == "__main__":
    sys.exit(main(["--gpu-time", *sys.argv[1:]]))
