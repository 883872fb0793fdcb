"""The GPU session's Nsight Compute step (`benchmarks/gpu_session.sh`, $OUT/ncu.json) beside
treduda's own counts (issues 37 and 40): per kernel, ncu's global sectors per request and
shared bank conflicts beside `Kernel.counters()` of the kernel generated again here; then the
kernels of one row (the pairs the model orders against the H200's times) side by side: stall
reasons, hit rates, occupancy, issue use. No GPU needed. See treduda/app/ncu_compare.py.

    python benchmarks/ncu_compare.py ncu.json [--steps 2]
"""

from __future__ import annotations

import sys

from treduda.app.ncu_compare import main

if __name__ == "__main__":
    sys.exit(main())
