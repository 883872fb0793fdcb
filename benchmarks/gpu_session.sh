#!/usr/bin/env bash
# One GPU session's measurements, in the order they matter, each under its own time limit so
# that a session cut short keeps what finished. Sessions get about 15 minutes of device time
# in all, start included; this spends at most about 9 of them.
#
# Here (this machine, with network), once:   benchmarks/gpu_session.sh prepare
#   builds treduda's wheel and fetches islpy's for the device's Python (3.12) into .whl/
#   (the device has CuPy, torch, nvcc and ml_dtypes, but no islpy and no network).
# There (the device tool's `run`, carrying .whl):   bash benchmarks/gpu_session.sh
#   writes under $OUT: tests.log, gemm*.json, tccg_fp16_N.json, tccg_fp32_N.json, session.log.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = prepare ]; then
  set -e
  grep -qx '/.whl/' .git/info/exclude || echo '/.whl/' >> .git/info/exclude
  rm -rf .whl && mkdir .whl
  python3 -m pip wheel -q --no-deps -w .whl .
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    -d .whl islpy
  ls -l .whl
  exit 0
fi

: "${OUT:?run this on the device machine, where \$OUT is set}"
start=$(date +%s)
left() { echo $(( ${1} - ($(date +%s) - start) )); }
log() { echo "$(( $(date +%s) - start )) s: $*" | tee -a "$OUT/session.log"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/*.whl || { echo "the wheels did not install: run 'prepare' here first"; exit 1; }
export PYTHONPATH=/tmp/site TREDUDA_CACHE=/tmp/tuning.sqlite3 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee "$OUT/session.log"
python3 -c "import treduda, cupy, torch; print(treduda.__file__, 'cupy', cupy.__version__, 'torch', torch.__version__)" 2>&1 | tee -a "$OUT/session.log"
R=$(pwd)
cd /tmp  # the checkout's treduda/ (without strategies/ installed) must not shadow the wheel

# 1. The tests that only a GPU runs (device arrays, torch float16/bfloat16, the bench's rows).
timeout "$(left 120)" python3 -m pytest -q -p no:cacheprovider "$R/tests/test_backends.py" \
  "$R/tests/test_bench.py" -k "on_the_gpu or on_a_gpu or device_view" > "$OUT/tests.log" 2>&1
log "GPU tests: $(tail -1 "$OUT/tests.log")"

# 2. GEMM 4096^3 in each precision beside cuBLAS (issue 26's 0.7x targets; fp32 as before).
for suite in gemm gemm_fp16 gemm_bf16 gemm_tf32; do
  timeout "$(left 240)" python3 -m treduda.app.cli bench --suite "$suite" --ids gemm_4096 \
    --gpu-time --json "$OUT/$suite.json" > "$OUT/$suite.log" 2>&1
  log "$suite: $(grep 'verified on' "$OUT/$suite.log")"
done

# 3. TCCG in float16 (issue 26: geometric mean >= 1.0x torch.einsum in float16), then fp32
#    (the SIMT kernels against the last run's 0.67x), 12 rows a file so that a timeout loses
#    at most one chunk. benchmarks/model_fidelity.py --data reads the files.
for suite in tccg_fp16 tccg_fp32; do
  for chunk in 1 2 3 4; do
    budget=$(left 540)
    [ "$budget" -lt 30 ] && { log "no time left for $suite chunk $chunk"; break 2; }
    ids=$(seq -f "tccg_%02g" $(( chunk * 12 - 11 )) $(( chunk * 12 )) | paste -sd,)
    timeout "$budget" python3 -m treduda.app.cli bench --suite $suite --ids "$ids" --gpu-time \
      --json "$OUT/${suite}_$chunk.json" > "$OUT/${suite}_$chunk.log" 2>&1
    log "$suite chunk $chunk: $(grep 'verified on' "$OUT/${suite}_$chunk.log")"
  done
done
log "done"
