"""The GPU session on bundles (issue 41) without a GPU: `treduda bench --export` writes a
suite's picks and rivals with their rows' metadata; benchmarks/gpu_session.sh's dry run times
a few entries of each bundle on PoCL, in a process that cannot import islpy, jinja2 or
opt_einsum, into at most 4 files; benchmarks/gpu_report.py turns its JSON lines into Markdown
and into the fidelity tool's input."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from test_tensor_maps import BUNDLED
from test_warpgroup_tma import TILES

import treduda
from treduda.api import tuning_entry
from treduda.app import bundle_bench, cli, fidelity, ncu_compare, ncu_profile
from treduda.app.bench import Case
from treduda.app.bench_cli import planned
from treduda.app.bench_export import Planned, export_suite, export_suites
from treduda.bundle import load
from treduda.errors import TredudaError
from treduda.model.gpus import gpu
from treduda.polyhedral.lower import plan
from treduda.run.cuda import gpu_present
from treduda.suites import Row
from treduda.tuning.search import offered

ROOT = Path(__file__).resolve().parent.parent
BLOCKER = """import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("islpy", "jinja2", "opt_einsum"):
            raise ImportError(name + " is blocked: the GPU session must not need it")

sys.meta_path.insert(0, Blocked())
"""
PROFILED = ("mini:mini/gemm_small", "mini:mini/gemm_small~1", "mini:mini/nothing")
ROWS = (Row("gemm_small", "C[i,j]=A[i,k]*B[k,j]", {"i": 37, "j": 45, "k": 13}, "C", ""),
        Row("tccg_small", "C[a,b,c]=A[b,d,a]*B[d,c]", {"a": 19, "b": 21, "c": 6, "d": 17}, "C",
            ""))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> Path:
    """A folder of two bundles: two rows' picks with a rival each; a GEMM whose tiles the
    tensor memory accelerator moves (its maps encoded from the operands on a GPU) and the
    AO->MO program."""
    folder = tmp_path_factory.mktemp("bundles")
    export_suite([Case(row, "float32", "mini") for row in ROWS], folder / "01_mini.zip",
                 rivals=1)
    tma = treduda.compile(ROWS[0].expression, BUNDLED, dtype="float16", strategy="warpgroup",
                          params=TILES)
    sizes = {**dict.fromkeys("pqrs", 9), **dict.fromkeys("ijkl", 6)}
    program = treduda.program("pqrs,pi,qj,rk,sl->ijkl", sizes)
    treduda.export({"tma/gemm": tma, "ao_mo": program}, folder / "02_programs.zip",
                   metadata={"tma/gemm": {"suite": "tma", "id": "gemm_tma", "role": "pick"}})
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
                   "PYTHONPATH": str(blocker), "NCU_ENTRIES": ",".join(PROFILED)}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "run",
                           "--dry-run", str(bundles)], env=environment, capture_output=True,
                          text=True, timeout=600)
    log = (out / "session.log").read_text()
    assert done.returncode == 0, done.stderr + log
    files = sorted(p.name for p in out.iterdir())
    assert files == ["ncu.json", "report.md", "results.jsonl", "session.log"], log
    step = json.loads((out / "ncu.json").read_text())  # ncu not run: launched on PoCL
    assert step["status"] == "dry run" and step["missing"] == ["mini:mini/nothing"]
    assert [e["entry"] for e in step["entries"]] == ["mini/gemm_small", "mini/gemm_small~1"]
    assert "launched mini/gemm_small~1 (td_" in log
    lines = [json.loads(text) for text in (out / "results.jsonl").read_text().splitlines()]
    assert [x["name"] for x in lines] == ["mini/gemm_small", "mini/gemm_small~1", "tma/gemm",
                                          "ao_mo"], log
    assert all(x["status"] == "ok" and x["verified"] for x in lines), lines
    pick, rival, tma, program = lines
    assert tma["params"]["tma"] and tma["treduda_ms"] > 0
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
    assert [r.id for r in rows] == ["gemm_small", "gemm_small~1", "gemm_tma"]
    assert rows[0].measured == pytest.approx(pick["treduda_ms"] / 1e3)
    # each kernel timed records its code, which the fidelity tool matches with today's
    assert rows[0].code == pick["code_digest"] and rows[1].code == rival["code_digest"]
    again = fidelity.regenerate(rows, ptxas=False)
    assert [fidelity.changed(r, a) for r, a in zip(rows, again, strict=True)] == [None] * 3


def test_the_dry_run_binds_entries_too_large_for_pocl_without_running_them(bundles, tmp_path,
                                                                          monkeypatch):
    """A dry run on full-size bundles launched GEMM 4096^3 on PoCL (210 s for the ncu step
    alone): an entry above bundle_bench.POCL_FLOPS is built and its arguments bound, not
    run, a kernel and a program's steps alike; a source that does not build still fails
    its line, at "bind"; the ncu step's launch says what it bound."""
    monkeypatch.setattr(bundle_bench, "POCL_FLOPS", 0)
    jsonl = tmp_path / "results.jsonl"
    for name in ("01_mini.zip", "02_programs.zip"):
        assert bundle_bench.run(str(bundles / name), jsonl=str(jsonl), pocl=True,
                                out=io.StringIO(), log=io.StringIO()) == 0
    lines = [json.loads(text) for text in jsonl.read_text().splitlines()]
    assert len(lines) == 6 and all(x["status"] == "ok" and x["launched"] is False
                                   and not x["verified"] and x["treduda_ms"] is None
                                   for x in lines), lines
    kernel = load(bundles / "01_mini.zip")["mini/gemm_small"]
    broken = dataclasses.replace(kernel, opencl_source="__kernel void td_broken( {")
    line = bundle_bench.measure(broken, np, None, 1, pocl=True)
    assert (line["status"], line["stage"]) == ("FAILED", "bind")
    out = io.StringIO()
    assert ncu_profile.launch(ncu_profile.select(bundles, PROFILED)[0], pocl=True, out=out) == 0
    assert "bound mini/gemm_small~1 (td_" in out.getvalue()


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


def test_a_plan_names_each_bundle_and_its_rows_and_rivals(tmp_path):
    bundles = planned(["# comment", "", "07_tccg_fp16 --suite tccg_fp16 --rivals 0 --limit 3",
                       "08_tccg_fp32 --suite tccg_fp32 --ids tccg_02,tccg_05",
                       "05_gemm_3xtf32 --suite gemm --ids gemm_4096 --precision 3xtf32"],
                      tmp_path)
    assert [b.path.name for b in bundles] == ["07_tccg_fp16.zip", "08_tccg_fp32.zip",
                                              "05_gemm_3xtf32.zip"]
    assert [b.rivals for b in bundles] == [0, 2, 2]  # --export's default: 2 rivals
    assert [c.row.id for c in bundles[1].cases] == ["tccg_02", "tccg_05"]
    assert {c.dtype for c in bundles[0].cases} == {"float16"} and len(bundles[0].cases) == 3
    assert bundles[2].cases[0].precision == "3xtf32"
    with pytest.raises(TredudaError, match="plan line 'x --suite nothing'"):
        planned(["x --suite nothing"], tmp_path)


def test_bundles_of_a_plan_are_searched_together_without_pocl_or_cubins(tmp_path):
    """`--no-verify` leaves the check to the GPU run; without --cubins NVRTC compiles there."""
    first, second = (Planned(tmp_path / f"{n}.zip", (Case(row, "float32", "mini"),), rivals)
                     for n, row, rivals in (("a", ROWS[0], 1), ("b", ROWS[1], 0)))
    log = io.StringIO()
    manifests = export_suites([first, second], verify=False, log=log)
    assert [sorted(m["kernels"]) for m in manifests] == [
        ["mini/gemm_small", "mini/gemm_small~1"], ["mini/tccg_small"]]
    assert all(m["targets"] == [] and not any(k["cubins"] for k in m["kernels"].values())
               for m in manifests)
    pick = manifests[0]["kernels"]["mini/gemm_small"]["metadata"]
    assert pick["verified_scaled_on_pocl"] is False and pick["rivals"] == 1
    assert "searched 2 row(s)" in log.getvalue() and "] gemm_small ... done" in \
        log.getvalue()
    assert f"wrote {second.path}: 1 kernel(s) of 1 row(s)" in log.getvalue()


def test_a_held_search_exports_its_form_and_leaves_the_tuning_cache_to_the_pick(bundles,
                                                                               tmp_path):
    """`--hold pad=4`: the best candidate with pad 4 (the pick has pad 0), recorded as held
    and not kept as the row's winner; a value the strategy does not offer fails the row."""
    log = io.StringIO()
    manifest = export_suite([Case(ROWS[0], "float32", "mini", hold=(("pad", 4),)),
                             Case(ROWS[1], "float32", "mini", hold=(("pad", 3),))],
                            tmp_path / "held.zip", rivals=0, verify=False, log=log)
    held = manifest["kernels"]["mini/gemm_small"]["metadata"]
    assert held["hold"] == {"pad": 4} and held["params"]["pad"] == 4
    assert list(manifest["kernels"]) == ["mini/gemm_small"]
    assert "mini/tccg_small: left out" in log.getvalue()
    assert "offers pad [0, 1, 4] here, not [3]" in log.getvalue()
    with zipfile.ZipFile(bundles / "01_mini.zip") as archive:
        pick = json.loads(archive.read("manifest.json"))["kernels"]["mini/gemm_small"]
    assert pick["metadata"]["hold"] is None and pick["metadata"]["params"]["pad"] == 0
    entry = tuning_entry(ROWS[0].expression, ROWS[0].sizes, "H100")
    assert entry is not None and entry["params"]["pad"] == 0


def test_a_plan_line_holds_its_rows_searches_and_refuses_a_hold_without_a_value(tmp_path):
    line = ("14_tccg_fp16_padded --suite tccg_fp16 --ids tccg_32 --hold strategy=tensorcore "
            "--hold free_layout=padded")
    [bundle] = planned([line], tmp_path)
    assert bundle.cases[0].hold == (("strategy", "tensorcore"), ("free_layout", "padded"))
    with pytest.raises(TredudaError, match="expected NAME=VALUE"):
        planned(["x --suite tccg_fp16 --hold padded"], tmp_path)


def test_the_session_plans_the_k_box_rows_held_to_a_staged_b(tmp_path):
    """07d: tccg_14/28/30 held to staged_b=True, a hold that narrows their searches to the
    warpgroup mapping (the only strategy with a staged B) without naming it."""
    script = (ROOT / "benchmarks" / "gpu_session.sh").read_text()
    line = next(s for s in script.splitlines() if s.startswith("07d_"))
    [bundle] = planned([line], tmp_path)
    assert bundle.path.name == "07d_tccg_fp16_staged.zip" and bundle.rivals == 0
    assert [c.row.id for c in bundle.cases] == ["tccg_14", "tccg_28", "tccg_30"]
    assert {c.hold for c in bundle.cases} == {(("staged_b", True),)}
    assert {c.dtype for c in bundle.cases} == {"float16"}
    case = bundle.cases[0]
    program = plan(case.row.expression, case.row.sizes, case.row.layout, case.dtype)
    assert offered(program, gpu("H100"), values=dict(case.hold)) == ("warpgroup",)


@pytest.mark.parametrize(("row", "hold"), [("tccg_32", {"free_layout": "padded"}),
                                           ("tccg_14", {"staged_b": True})])
def test_the_report_sets_a_held_search_beside_its_rows_pick(row, hold):
    report = _gpu_report()
    line = {"kind": "kernel", "status": "ok", "role": "pick", "device": "GPU X",
            "dtype": "float16", "precision": "highest", "suite": "tccg_fp16", "id": row,
            "predicted_seconds": 1e-4, "treduda_ms": 0.2, "ratio_torch": 2.0}
    lines = [{**line, "hold": None},
             {**line, "hold": hold, "treduda_ms": 0.16, "ratio_torch": 2.5}]
    text = report.markdown(lines)
    held = " ".join(f"{k}={v}" for k, v in hold.items())
    assert "### tccg_fp16 (float16)\n" in text
    assert f"### tccg_fp16 (float16), held to {held}" in text
    assert (f"| tccg_fp16/{row} | {held} | 0.1000 | 0.2000 | 0.1000 | 0.1600 "
            "| 1.250 | 2.00 | 2.50 |") in text


def test_the_readme_table_from_session_lines_shows_a_groups_one_row_or_best_and_means():
    report = _gpu_report()
    line = {"kind": "kernel", "status": "ok", "role": "pick", "device": "GPU X (driver 1)",
            "dtype": "float16", "precision": "highest", "bundle": "b",
            "treduda_runs_ms": [1.0]}
    lines = [{**line, "suite": "gemm_fp16", "id": "gemm_4096", "treduda_ms": 2.0,
              "expression": "C[i,j]=A[i,k]*B[k,j]", "torch_ms": 1.0, "ratio_torch": 0.5},
             *({**line, "suite": "tccg_fp16", "id": f"tccg_0{n}", "expression": "E",
                "treduda_ms": 1.0, "torch_ms": ratio, "ratio_torch": ratio}
               for n, ratio in ((1, 4.0), (2, 1.0))),
             {**line, "suite": "tccg_fp16", "id": "tccg_03", "status": "FAILED"},
             {**line, "suite": "tccg_fp16", "id": "tccg_04", "role": "rival",
              "treduda_ms": 9.0, "ratio_torch": 9.0}]
    table = report.readme(lines, ["results.jsonl"]).splitlines()
    assert table[2] == "| gemm_fp16 (float16) gemm_4096 | 2.000 | 1.000 | 0.50x |"
    assert table[3].startswith("| tccg_fp16 (float16) tccg_01 `E`, the best row | 1.000 |")
    assert table[4] == ("| tccg_fp16 (float16): geometric mean of the 2 rows timed in full "
                        "|  |  | 2.00x |")
    assert len(table) == 7 and table[6].startswith("GPU X, undated: median of 3 interleaved")
    assert table[6].endswith("`results.jsonl`.")


def _gpu_report():
    spec = importlib.util.spec_from_file_location("gpu_report",
                                                  ROOT / "benchmarks" / "gpu_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ncu as the GPU session runs it, without the GPU: a run that asks the gmma stall is refused
# (naming it, or with $UNNAMED not), the next runs its program on PoCL (with $LAUNCH) and gets
# the fixture's CSV (ncu's format, the kernels renamed after the bundle's)
FAKE_NCU = """#!{python}
import os, re, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1)")
    sys.exit(0)
option = dict(zip(args, args[1:]))
if "gmma" in option["--metrics"]:
    print("==ERROR== Failed to find metric " + ("a metric" if os.environ.get("UNNAMED") else
          "smsp__average_warps_issue_stalled_gmma_per_issue_active"))
    sys.exit(1)
program = args[args.index("--log-file") + 2:]
if os.environ.get("LAUNCH") and subprocess.run(program + ["--pocl"]).returncode != 0:
    sys.exit(1)
functions = re.fullmatch(r"regex:\\^\\((.*)\\)\\$", option["--kernel-name"]).group(1).split("|")
text = open({fixture!r}).read()
for n, function in enumerate(functions, 1):
    text = text.replace("td_C_000000000%d" % n, function)
open(option["--log-file"], "w").write(text)
"""


def _fake_ncu(folder: Path) -> Path:
    fake = folder / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable,
                                    fixture=str(ROOT / "tests" / "data" / "ncu_details.csv")))
    fake.chmod(0o755)
    return fake


def test_the_ncu_step_reads_ncus_csv_and_leaves_out_a_metric_it_refuses(bundles, tmp_path):
    environment = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "LAUNCH": "1",
                   "NCU": str(_fake_ncu(tmp_path)), "NCU_ENTRIES": ",".join(PROFILED)}
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh"), "profile",
                    str(bundles)], env=environment, check=True, timeout=300)
    path = tmp_path / "ncu.json"
    step = json.loads(path.read_text())
    log = (tmp_path / "session.log").read_text()
    assert step["status"] == "ok" and step["ncu"] == "Version 2025.3.1.0 (build 1)", log
    assert step["metrics"] == [m for m in ncu_profile.METRICS if "gmma" not in m], log
    assert "launched mini/gemm_small~1 (td_" in step["log"]  # what ncu ran: the launcher
    command = step["command"]
    assert command[command.index("--launch-count") + 1] == "2"
    assert command[command.index("--clock-control") + 1] == "none"
    profiled = ncu_profile.parse_csv(step["csv"])
    pick, rival = (e["function"] for e in step["entries"])
    assert set(profiled) == {pick, rival}
    metrics = profiled[pick]
    assert metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 1280  # "1,280"
    assert metrics["gpu__time_duration.sum"] == pytest.approx(3.104e-6)  # nseconds
    assert profiled[rival]["gpu__time_duration.sum"] == pytest.approx(2.98e-6)  # useconds
    assert "smsp__inst_executed_op_ldsm.sum" not in metrics  # n/a

    out = io.StringIO()  # here: ncu beside Kernel.counters() of the kernels generated again
    assert ncu_compare.report(ncu_compare.read(str(path)), out=out) == 0
    text = out.getvalue()
    assert "ok (Version 2025.3.1.0 (build 1)); 2 of 2 kernels profiled" in text
    assert f"not asked, after this ncu refused a metric: {ncu_profile.stall_metric('gmma')})" \
        in text
    counted = ncu_compare._counted(step["entries"][0], ncu_compare.STEPS)[0]
    requests, wavefronts, ideal = counted[("shared", "ld")]
    row = next(line.split() for line in text.splitlines()
               if line.startswith("mini/gemm_small ") and "shared ld" in line)
    assert row[3:] == ["1280", "1.12", f"{wavefronts / requests:.2f}", f"{ideal / requests:.2f}",
                       "0.12", f"{(wavefronts - ideal) / requests:.2f}",
                       ncu_compare._equal([1.125, 0.125], [wavefronts / requests,
                                                           (wavefronts - ideal) / requests])]
    assert ncu_compare._equal([4.0, 0.12], [4.05, 0.13]) == "yes"
    assert ncu_compare._equal([4.0, None], [5.0, 0.0]) == "no"
    assert ncu_compare._equal([None, None], [5.0, 0.0]) == "-"
    assert "mini/gemm_small: side by side" in text
    stalls = next(line.split() for line in text.splitlines() if "long_scoreboard" in line)
    assert stalls == ["stall", "long_scoreboard", "4.10", "6.25"]


def test_the_ncu_step_asks_the_core_metrics_where_ncu_refuses_one_without_naming_it(
        bundles, tmp_path, monkeypatch):
    monkeypatch.setenv("UNNAMED", "1")
    path = tmp_path / "ncu.json"
    ncu_profile.profile(bundles, path, wanted=PROFILED, ncu=str(_fake_ncu(tmp_path)),
                        log=io.StringIO())
    step = json.loads(path.read_text())
    assert step["status"] == "ok" and step["metrics"] == list(ncu_profile.CORE)
    ld, ldgsts = (ncu_profile.global_metric("sectors", op) for op in ("ld", "ldgsts"))
    assert ncu_profile.refused("==ERROR== Failed to find metric l1tex__t_sectors_pipe_lsu_"
                               "mem_global_op_ld\nl1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts",
                               [ld, ldgsts]) == [ld]  # an error line's, by its whole name
