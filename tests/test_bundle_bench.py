"""The GPU path of `treduda bench --bundle FILE --gpu-time` (issue 41), as far as it goes
without a GPU: loading cubins or compiling with NVRTC, the exit status that makes the session
script retry with --nvrtc, --stop-after, the interleaved rounds, the baselines' TF32 and
bfloat16 rules, a line's statistics; and benchmarks/gpu_session.sh's `run` on CUDA with its
commands stood in for."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

import treduda
from treduda.app import bundle_bench
from treduda.errors import CompileError
from treduda.frontend.contraction import analyse
from treduda.run import cuda, device_arrays
from treduda.run.nvcc import nvcc_available
from treduda.run.timing import Timing

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """Two small kernels, with sm_90 cubins where nvcc is here."""
    path = tmp_path_factory.mktemp("bundle") / "two.zip"
    kernels = {"gemm": treduda.compile("C[i,j]=A[i,k]*B[k,j]", {"i": 37, "j": 45, "k": 13}),
               "tccg": treduda.compile("C[a,b,c]=A[b,d,a]*B[d,c]",
                                       {"a": 19, "b": 21, "c": 6, "d": 17})}
    treduda.export(kernels, path, gpu=None)
    return path


class _Runtime:
    """CUDA as bundle_bench sees it: an architecture, a device, a context."""

    device = "Fake GPU (CuPy, CUDA events)"

    def __init__(self, arch: str):
        self.arch = arch

    def active(self):
        return contextlib.nullcontext()


def _fake_cuda(monkeypatch, arch: str, registers) -> list:
    loaded: list = []

    def registers_cuda(source, name, cubins=None):
        loaded.append((name, arch in (cubins or {})))
        return registers(name)

    monkeypatch.setattr(cuda, "cuda_runtime", lambda: _Runtime(arch))
    monkeypatch.setattr(cuda, "registers_cuda", registers_cuda)
    monkeypatch.setattr(bundle_bench, "gpu_libraries", lambda: (np, None))
    return loaded


@pytest.mark.skipif(not nvcc_available(), reason="the bundle holds cubins only where nvcc is")
@pytest.mark.parametrize(("arch", "cubins"), [("sm_90", 2), ("sm_80", 0)])
def test_loading_takes_the_cubins_for_this_gpu_and_compiles_the_rest(bundle, tmp_path,
                                                                     monkeypatch, arch, cubins):
    loaded = _fake_cuda(monkeypatch, arch, lambda name: 64)
    jsonl = tmp_path / "results.jsonl"
    log = tmp_path / "log"
    with log.open("w") as stream:
        status = bundle_bench.run(str(bundle), jsonl=str(jsonl), stop_after=0, log=stream,
                                  out=stream)
    assert status == 0 and len(loaded) == 2
    assert sum(cubin for _, cubin in loaded) == cubins
    [line] = [json.loads(text) for text in jsonl.read_text().splitlines()]
    assert (line["kind"], line["kernels"], line["cubins"], line["nvrtc"]) == \
        ("compile", 2, cubins, 2 - cubins)
    assert "stopped before gemm (2 left)" in log.read_text()  # --stop-after 0: nothing timed


def test_nvrtc_compiles_every_source_even_where_a_cubin_is_held(bundle, tmp_path, monkeypatch):
    loaded = _fake_cuda(monkeypatch, "sm_90", lambda name: 64)
    jsonl = tmp_path / "results.jsonl"
    with (tmp_path / "log").open("w") as stream:
        bundle_bench.run(str(bundle), jsonl=str(jsonl), nvrtc=True, stop_after=0, log=stream,
                         out=stream)
    assert [cubin for _, cubin in loaded] == [False, False]
    assert json.loads(jsonl.read_text())["nvrtc"] == 2


def test_kernels_that_do_not_load_exit_3_and_time_nothing(bundle, tmp_path, monkeypatch,
                                                          capsys):
    def refused(name):
        raise CompileError(f"{name}: CUDA_ERROR_NO_BINARY_FOR_GPU")

    _fake_cuda(monkeypatch, "sm_90", refused)
    jsonl = tmp_path / "results.jsonl"
    assert bundle_bench.run(str(bundle), jsonl=str(jsonl)) == 3
    assert "could not be compiled or loaded" in capsys.readouterr().out
    assert not jsonl.exists()


def test_rounds_interleave_the_timers_and_skip_what_times_nothing():
    calls = []

    def timer(name, seconds):
        def timed():
            calls.append(name)
            return None if seconds is None else Timing.of([seconds], "fake")
        return timed

    runs = bundle_bench._interleaved({"treduda": timer("treduda", 1e-3),
                                      "torch": timer("torch", 2e-3),
                                      "cupy": timer("cupy", None)})
    assert calls == ["treduda", "torch", "cupy"] * bundle_bench.ROUNDS
    assert runs == {"treduda": [1e-3] * 3, "torch": [2e-3] * 3, "cupy": []}


def test_a_lines_statistics_are_medians_spreads_and_ratios():
    fields = bundle_bench.summarised({"treduda": [2e-3, 1e-3, 1.5e-3], "torch": [3e-3] * 3},
                                     flops=3e9)
    assert fields["treduda_ms"] == pytest.approx(1.5)
    assert fields["treduda_runs_ms"] == pytest.approx([2.0, 1.0, 1.5])
    assert fields["treduda_spread"] == pytest.approx((2 - 1) / 1.5)
    assert fields["ratio_torch"] == pytest.approx(2.0) and fields["torch_spread"] == 0
    assert fields["gflops"] == pytest.approx(3e9 / 1.5e-3 / 1e9)
    assert fields["cupy_ms"] is None and fields["cupy_runs_ms"] == []
    assert fields["ratio_cupy"] is None and fields["cupy_spread"] is None


@pytest.mark.parametrize(("dtype", "precision", "timed", "tf32"),
                         [("float32", "tf32", ["torch", "cupy"], [True]),
                          ("float32", "highest", ["torch", "cupy"], [False]),
                          ("bfloat16", "highest", ["torch"], [False])])
def test_baselines_allow_tf32_only_for_tf32_rows_and_leave_cupy_out_for_bfloat16(
        monkeypatch, dtype, precision, timed, tf32):
    matmul = types.SimpleNamespace(allow_tf32=False)
    seen = []
    torch = types.SimpleNamespace(backends=types.SimpleNamespace(
        cuda=types.SimpleNamespace(matmul=matmul)), einsum=lambda spec, *t: None)

    def time_calls(call, repeats):
        seen.append(matmul.allow_tf32)
        call()
        return Timing.of([1e-3], "fake")

    cupy = types.SimpleNamespace(einsum=lambda spec, *a: None)
    monkeypatch.setattr(cuda, "time_calls", time_calls)
    monkeypatch.setattr(device_arrays, "cupy_module", lambda: cupy)
    monkeypatch.setattr(device_arrays, "to_framework", lambda framework, array: array)
    kernel = types.SimpleNamespace(contraction=analyse("C[i,j]=A[i,k]*B[k,j]"), dtype=dtype,
                                   precision=precision, expression="C[i,j]=A[i,k]*B[k,j]")
    operands = {"A": np.ones((2, 3)), "B": np.ones((3, 4))}
    baselines = bundle_bench._baselines(kernel, operands, torch, repeats=5)
    assert sorted(baselines) == sorted(timed)
    baselines["torch"]()
    assert seen == tf32 and matmul.allow_tf32 is False  # set for the call, then off again


FAKE_PYTHON = """#!/usr/bin/env bash
# benchmarks/gpu_session.sh's python on a GPU machine, stood in for: each bundle's timing
# is recorded; the second bundle's cubins do not load (exit 3) unless --nvrtc.
if [[ " $* " == *" --bundle "* ]]; then
  echo "$*" >> "$CALLS"
  jsonl=$(sed 's/.*--jsonl \\([^ ]*\\).*/\\1/' <<< "$*")
  if [[ " $* " == *"02_b.zip"* && " $* " != *" --nvrtc "* ]]; then exit 3; fi
  echo '{"kind": "kernel", "status": "ok", "name": "x", "device": "Fake", "bundle": "b",
    "dtype": "float32", "precision": "highest", "expression": "C[i]=A[i]", "treduda_ms": 1}' \\
    | tr -d '\\n' >> "$jsonl"
  echo >> "$jsonl"
  exit 0
fi
exec "$REAL_PYTHON" "$@"
"""


def test_the_session_on_cuda_retries_a_bundle_whose_cubins_fail_with_nvrtc(tmp_path):
    folder, out = tmp_path / "bundles", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    for name in ("01_a.zip", "02_b.zip"):
        (folder / name).write_bytes(b"")
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    environment = {**os.environ, "OUT": str(out), "PYTHON": str(python), "CALLS": str(calls),
                   "REAL_PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "run",
                           str(folder)], env=environment, capture_output=True, text=True,
                          timeout=120)
    log = (out / "session.log").read_text()
    assert done.returncode == 0, done.stderr + log
    commands = calls.read_text().splitlines()
    assert [("01_a" in c, "--nvrtc" in c) for c in commands] == \
        [(True, False), (False, False), (False, True)], commands
    assert all("--gpu-time" in c and "--stop-after" in c and "--pocl" not in c
               for c in commands)
    assert "02_b.zip with --nvrtc exit 0" in log
    assert sorted(p.name for p in out.iterdir()) == ["ncu.json", "report.md", "results.jsonl",
                                                    "session.log"]
    assert "2 of 2 entries verified and timed" in (out / "report.md").read_text()


def test_the_session_starts_no_bundle_it_has_no_time_for(tmp_path):
    folder, out = tmp_path / "bundles", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    (folder / "01_a.zip").write_bytes(b"")
    environment = {**os.environ, "OUT": str(out), "PYTHON": sys.executable,
                   "SESSION_SECONDS": "20"}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "run",
                           str(folder)], env=environment, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0
    assert "no time left for" in (out / "session.log").read_text()
    assert len(list(out.iterdir())) <= 4


def _call_taking(seconds: float):
    """A bundled kernel's call that returns after ``seconds`` with no result."""
    def call(self, **values):
        time.sleep(seconds)
        raise RuntimeError("no result")
    return call


def test_an_entry_whose_first_call_never_ends_is_reported_as_hung(bundle, monkeypatch):
    """A kernel that never ends (an mbarrier phase no copy completes) blocks the check; after
    HANG_SECONDS the watchdog hands over the entry's FAILED line (run then exits, HUNG); a
    call that ends in time leaves it alone."""
    gemm = treduda.bundle.load(bundle)["gemm"]
    hung: list = []
    monkeypatch.setattr(bundle_bench, "HANG_SECONDS", 0.2)
    monkeypatch.setattr(type(gemm), "__call__", _call_taking(0))
    line = bundle_bench.measure(gemm, np, None, 1, True, hung.append)
    assert line["error"] == "RuntimeError: no result" and hung == []
    monkeypatch.setattr(type(gemm), "__call__", _call_taking(0.4))
    bundle_bench.measure(gemm, np, None, 1, True, hung.append)
    assert [(x["name"], x["status"], x["stage"]) for x in hung] == [("gemm", "FAILED", "verify")]
    assert "did not end in 0 s: a kernel that never ends" in hung[0]["error"]
