"""Issue #5's benchmark suite; the same as `treduda bench` (see treduda/app/bench.py).

    python benchmarks/bench.py [--suite tccg_fp32|tccg_fp64|tc|tapp|all] [--gpu H100]
                               [--json out.json] [--plot out.png] [--limit N] [--ids ID,ID]
"""

from __future__ import annotations

import sys

from treduda.app.bench_cli import main

if __name__ == "__main__":
    sys.exit(main())
