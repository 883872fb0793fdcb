"""The GPU session on bundles (issue 41) without a GPU: `treduda bench --export` writes a
suite's picks and rivals with their rows' metadata; benchmarks/gpu_session.sh's dry run times
a few entries of each bundle on PoCL, in a process that cannot import islpy, jinja2 or
opt_einsum, into at most 4 files; benchmarks/gpu_report.py turns its JSON lines into Markdown
and into the fidelity tool's input."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import treduda
from treduda.app import cli, fidelity
from treduda.app.bench import Case
from treduda.app.bench_export import export_suite
from treduda.run.cuda import gpu_present
from treduda.suites import Row

ROOT = Path(__file__).resolve().parent.parent
BLOCKER = """import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("islpy", "jinja2", "opt_einsum"):
            raise ImportError(name + " is blocked: the GPU session must not need it")

sys.meta_path.insert(0, Blocked())
"""
ROWS = (Row("gemm_small", "C[i,j]=A[i,k]*B[k,j]", {"i": 37, "j": 45, "k": 13}, "C", ""),
        Row("tccg_small", "C[a,b,c]=A[b,d,a]*B[d,c]", {"a": 19, "b": 21, "c": 6, "d": 17}, "C",
            ""))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> Path:
    """A folder of two bundles: two rows' picks with a rival each, and the AO->MO program."""
    folder = tmp_path_factory.mktemp("bundles")
    export_suite([Case(row, "float32", "mini") for row in ROWS], folder / "01_mini.zip",
                 rivals=1)
    sizes = {**dict.fromkeys("pqrs", 9), **dict.fromkeys("ijkl", 6)}
    program = treduda.program("pqrs,pi,qj,rk,sl->ijkl", sizes)
    treduda.export({"ao_mo": program}, folder / "02_programs.zip")
    return folder


def test_bench_export_writes_picks_and_rivals_with_their_rows(bundles):
    with zipfile.ZipFile(bundles / "01_mini.zip") as archive:
        kernels = json.loads(archive.read("manifest.json"))["kernels"]
    assert set(kernels) == {"mini/gemm_small", "mini/gemm_small~1", "mini/tccg_small",
                            "mini/tccg_small~1"}
    rival = kernels["mini/gemm_small~1"]["metadata"]
    assert (rival["role"], rival["rank"], rival["id"]) == ("rival", 1, "gemm_small")
    assert rival["predicted_seconds"] > 0 and rival["sizes"] == ROWS[0].sizes


def test_a_rerun_of_bench_export_takes_the_rows_it_holds_instead_of_searching(bundles,
                                                                              tmp_path):
    path = tmp_path / "again.zip"
    shutil.copy(bundles / "01_mini.zip", path)
    log = io.StringIO()
    again = export_suite([Case(row, "float32", "mini") for row in ROWS], path, rivals=1,
                         log=log)
    assert "2 of 2 row(s) taken from" in log.getvalue()
    with zipfile.ZipFile(bundles / "01_mini.zip") as archive:
        first = json.loads(archive.read("manifest.json"))["kernels"]
    assert {n: k["metadata"] for n, k in again["kernels"].items()} == \
        {n: k["metadata"] for n, k in first.items()}
    log = io.StringIO()  # searched on other terms (two rivals): searched again
    export_suite([Case(ROWS[0], "float32", "mini")], path, rivals=2, log=log)
    assert "0 of 1 row(s) taken from" in log.getvalue()


def test_the_dry_run_measures_on_pocl_without_the_compiler(bundles, tmp_path):
    out, blocker = tmp_path / "out", tmp_path / "blocker"
    out.mkdir()
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    environment = {**os.environ, "OUT": str(out), "PYTHON": sys.executable,
                   "PYTHONPATH": str(blocker)}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "run",
                           "--dry-run", str(bundles)], env=environment, capture_output=True,
                          text=True, timeout=600)
    log = (out / "session.log").read_text()
    assert done.returncode == 0, done.stderr + log
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 4 and files == ["report.md", "results.jsonl", "session.log"], log
    lines = [json.loads(text) for text in (out / "results.jsonl").read_text().splitlines()]
    assert [x["name"] for x in lines] == ["mini/gemm_small", "mini/gemm_small~1", "ao_mo"], log
    assert all(x["status"] == "ok" and x["verified"] for x in lines), lines
    pick, rival, program = lines
    assert pick["treduda_ms"] > 0 and len(pick["treduda_runs_ms"]) == 3
    assert pick["role"] == "pick" and rival["role"] == "rival" and rival["rank"] == 1
    assert pick["torch_ms"] is None and pick["backend"] == "opencl"  # no library on PoCL
    assert program["kind"] == "program" and len(program["steps"]) >= 2

    report = (out / "report.md").read_text()
    assert "### mini (float32)" in report and "| gemm_small |" in report
    assert "### Rivals beside their picks" in report and "### Programs" in report
    data = tmp_path / "fidelity.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_report.py"),
                    str(out / "results.jsonl"), "--fidelity", str(data)], check=True,
                   timeout=60)
    rows = fidelity.load(data)
    assert [r.id for r in rows] == ["gemm_small", "gemm_small~1"]
    assert rows[0].measured == pytest.approx(pick["treduda_ms"] / 1e3)


def test_timing_a_bundle_needs_gpu_time_and_a_jsonl_file(bundles, tmp_path, capsys):
    bundle = str(bundles / "01_mini.zip")
    assert cli.main(["bench", "--bundle", bundle]) == 2
    assert "add --gpu-time and --jsonl FILE" in capsys.readouterr().err


@pytest.mark.skipif(gpu_present(), reason="a GPU is here: the bundle would be timed on it")
def test_timing_a_bundle_without_a_gpu_says_so_and_writes_nothing(bundles, tmp_path, capsys):
    jsonl = tmp_path / "results.jsonl"
    assert cli.main(["bench", "--bundle", str(bundles / "01_mini.zip"), "--gpu-time",
                     "--jsonl", str(jsonl)]) == 0
    assert "cannot time on a GPU here" in capsys.readouterr().out
    assert not jsonl.exists()


def test_the_report_renders_the_earlier_gpu_benchmarks_data():
    """benchmarks/data keeps `treduda bench --gpu-time --json` files: the report reads them
    as it reads the session's JSON lines (each row, then its rivals)."""
    data = ROOT / "benchmarks" / "data" / "h200_measured_2026-11-26.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_report.py"),
                           str(data)], capture_output=True, text=True, check=True, timeout=60)
    assert "### tccg_fp32 (float32)" in done.stdout
    assert "Geometric mean: torch.einsum" in done.stdout
    assert "| tccg_fp32/tccg_01~1 |" in done.stdout  # a rival beside its pick
