"""The benchmark suite of issue #5: table, summary, JSON, plot, and a failing row that does not
stop the others. A few cheap rows with a small node budget keep this CI-fast."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import json
import math
import sys

import pytest

import treduda
import treduda.app.bench
import treduda.frontend.contraction
import treduda.tuning.policy
from treduda.app import cli, fidelity
from treduda.app.bench import Case, plot, run, select, short_params
from treduda.app.gpu_bench import GpuOutcome, Pick, _untimed, load_picks, measure, summary
from treduda.app.gpu_bench import table as gpu_table
from treduda.run.cuda import gpu_present
from treduda.run.nvcc import code_digest, nvcc_available
from treduda.suites import Row

FP32_IDS = ("tccg_04", "tccg_05")  # column-major rows that generate in a few seconds
TC_ID = "tc_tmm_M128_N256_K32"
BUDGET = 100  # nodes: the report is tested here, not how far the search goes (test_search)
RIVALS = 2
BAD = Row("bad_expression", "C[i,j] = A[i,k) * B[k,j]", {"i": 64, "j": 64, "k": 64}, "C",
          "test: a parse error")


@pytest.mark.slow
def test_bench_reports_rows_summary_json_and_plot(tmp_path, monkeypatch):
    # One test for the one expensive run: pytest-xdist would repeat a module fixture per worker.
    cases = [*select("tccg_fp32", FP32_IDS), *select("tc", [TC_ID]), Case(BAD, suite="test")]
    compiled = {"check": [], "table": []}  # sources given to nvcc by ptxas's check, the table

    def spy(on, module, name):
        batch = getattr(module, name)

        def recorded(sources, arch, *read):
            compiled[on].extend(sources)
            return batch(sources, arch, *read)
        monkeypatch.setattr(module, name, recorded)
    spy("check", treduda.tuning.policy, "compile_with_sass")
    spy("table", treduda.app.bench, "compile_cuda_batch")
    out, log = io.StringIO(), io.StringIO()
    json_path, png_path = tmp_path / "bench.json", tmp_path / "bench.png"
    code = run(cases, max_nodes=BUDGET, json_path=str(json_path), plot_path=str(png_path),
               title="test", out=out, log=log, rivals=RIVALS)
    text, progress = out.getvalue(), log.getvalue()

    assert code == 1, "a FAILED row makes the exit status non-zero"
    assert not set(compiled["check"]) & set(compiled["table"]), "a kernel compiled twice"
    lines = text.splitlines()
    for number, name in enumerate([*FP32_IDS, TC_ID, BAD.id], 1):
        row = next(line for line in lines if line.startswith(name + " "))
        assert ("FAILED" in row) == (name == BAD.id), row
        assert f"[{number}/4] {name}" in progress
    end = lines[0].index("GFLOP/s") + len("GFLOP/s")  # numbers are right-aligned under it
    assert all(line[end - 1] in "0123456789-" and line[end] == " " for line in lines[1:5])
    assert f"{BAD.id} FAILED at search: ParseError" in text
    summary = next(line for line in lines if " verified (" in line)
    assert summary.startswith("3/4 verified") and "1 FAILED" in summary
    assert "geometric-mean predicted fraction of peak on H100-SXM" in summary

    report = json.loads(json_path.read_text())
    assert report["summary"] == summary and report["gpu"] == "H100-SXM"
    rows = {r["id"]: r for r in report["rows"]}
    assert list(rows) == [*FP32_IDS, TC_ID, BAD.id]
    for name in (*FP32_IDS, TC_ID):
        r = rows[name]
        assert r["status"] == "ok" and r["verified"] and r["error"] is None
        assert r["strategy"] and r["params"] and r["binding"]
        assert r["predicted_seconds"] > 0 and r["gflops"] > 0 and 0 < r["fraction_of_peak"] < 1
        assert r["nodes_visited"] > 0 and isinstance(r["search_complete"], bool)
        assert r["generate_seconds"] > 0 and r["search_seconds"] > 0
        assert r["scaled_sizes"] and r["verified_params"] in ("searched", "defaults")
        assert (r["verify_note"] is not None) == (r["verified_params"] == "defaults")
        assert (r["registers"] is not None) == nvcc_available()
        assert "cuda_source" not in r
        # the launch: every output point on a thread, within its register tile
        params = r["params"]
        points = math.prod(r["sizes"][i] for i in
                           treduda.frontend.contraction.analyse(r["expression"]).output_indices)
        tile = math.prod(params[f"reg_{a}"] * params[f"block_{a}"] for a in "xyz")
        assert r["blocks"] * tile >= points
        assert 1 <= r["points_per_thread"] <= math.prod(params[f"reg_{a}"] for a in "xyz")
        assert r["waves"] > 0
        # rivals for a GPU run to time: other kernels, each predicted at a time of its own
        seconds = [r["predicted_seconds"], *(x["predicted_seconds"] for x in r["rivals"])]
        assert len(r["rivals"]) == RIVALS
        assert all(abs(a - b) > 0.01 * b for a in seconds for b in seconds if a is not b)
        assert len({json.dumps(x["params"], sort_keys=True) for x in [r, *r["rivals"]]}) == 3
    picks = load_picks(str(json_path), select("tccg_fp32", FP32_IDS))
    assert [len(p.rivals) for p in picks.values()] == [RIVALS] * len(FP32_IDS)
    assert picks[FP32_IDS[0]].rivals[0].params == rows[FP32_IDS[0]]["rivals"][0]["params"]
    assert {rows[name]["layout"] for name in FP32_IDS} == {"F"}, "TCCG rows are column-major"
    assert rows[TC_ID]["layout"] == "C"
    assert rows[BAD.id]["status"] == "FAILED" and rows[BAD.id]["stage"] == "search"
    assert rows[BAD.id]["error"].startswith("ParseError")

    if importlib.util.find_spec("matplotlib") is not None:
        assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "skipping the plot" in progress


def test_plot_is_skipped_without_matplotlib(monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ImportError
    log = io.StringIO()
    assert plot([], str(tmp_path / "p.png"), "title", log) is False
    assert "matplotlib is not installed: skipping the plot" in log.getvalue()
    assert not (tmp_path / "p.png").exists()


def test_short_params_groups_axes_and_clips():
    params = {"order": "b,c,a", "stage": "B", "block_x": 16, "reg_x": 4, "assign_x": "cyclic",
              "block_y": 1, "reg_y": 8, "assign_y": "adjacent", "block_z": 4, "reg_z": 2,
              "assign_z": "cyclic", "step": 32, "preload": True, "pad": 0, "unroll": False}
    assert short_params(params) == ("ord=b,c,a stg=B blk=16x1x4 reg=4x8x2 asg=cac step=32 +pre "
                                    "pad=0 -unr")
    clipped = short_params(params, width=20)
    assert len(clipped) == 20 and clipped.endswith("…")
    assert short_params(None) == "-"
    assert short_params({"stage": ""}) == "stg=none"


def test_select_names_rows_of_every_suite_and_their_dtype():
    cases = select("all", ["tccg_fp64/tccg_01", "tc_tmm_M128_N256_K32"])
    assert [(c.name, c.dtype) for c in cases] == [("tccg_fp64/tccg_01", "float64"),
                                                  ("tc/tc_tmm_M128_N256_K32", "float32")]
    assert len(select("tccg_fp32", limit=3)) == 3


@pytest.mark.parametrize("arguments, message", [
    (["--ids", "tccg_01,nope"], "no row nope in suite tccg_fp32"),
    (["--limit", "0"], "no rows to run"),
    (["--gpu", "nonesuch", "--limit", "1"], "unknown GPU"),
])
def test_cli_bench_reports_bad_arguments(arguments, message, capsys):
    assert cli.main(["bench", *arguments]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(gpu_present(), reason="a GPU is here: the GPU benchmark would time it")
def test_gpu_time_without_a_gpu_says_so_and_exits_zero(capsys):
    assert cli.main(["bench", "--gpu-time", "--suite", "tc", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "cannot time on a GPU here" in out and "Nothing was timed" in out
    assert "treduda[cupy]" in out


def _picks_file(tmp_path, **changes) -> str:
    """A --json file as `treduda bench` writes it, with one chosen kernel for tccg_01."""
    (case,) = select("tccg_fp32", limit=1)
    row = {"id": case.name, "expression": case.row.expression, "sizes": dict(case.row.sizes),
           "layout": case.row.layout, "dtype": case.dtype, "strategy": "tiled+staged",
           "params": {"order": "b,c,a", "stage": "B"}, "predicted_seconds": 0.0001, **changes}
    path = tmp_path / "picks.json"
    path.write_text(json.dumps({"rows": [row]}))
    return str(path)


def test_picks_replay_the_kernel_an_earlier_run_chose(tmp_path):
    picks = load_picks(_picks_file(tmp_path), select("tccg_fp32", limit=1))
    assert picks == {"tccg_01": Pick("tiled+staged", {"order": "b,c,a", "stage": "B"}, 0.1)}


@pytest.mark.skipif(gpu_present(), reason="a GPU is here: the GPU benchmark would time it")
def test_picks_without_a_gpu_are_read_and_nothing_is_timed(tmp_path, capsys):
    assert cli.main(["bench", "--gpu-time", "--limit", "1", "--picks",
                     _picks_file(tmp_path)]) == 0
    assert "Nothing was timed" in capsys.readouterr().out


@pytest.mark.parametrize("arguments, changes, message", [
    (["--limit", "1"], {}, "--picks times an earlier run's kernels on a GPU: add --gpu-time"),
    (["--gpu-time", "--limit", "2"], {}, "holds no kernel for tccg_02 (it has tccg_01)"),
    (["--gpu-time", "--limit", "1"], {"layout": "C"},
     "tccg_01 has another layout there (C) than here (F)"),
    (["--gpu-time", "--limit", "1"], {"params": None}, "holds no kernel for tccg_01"),
    (["--gpu-time", "--limit", "1"], {"precision": "tf32"},
     "tccg_01 has another precision there (tf32) than here (highest)"),
    (["--gpu-time", "--limit", "1", "--rivals", "2"], {},
     "--rivals records rivals for a later GPU run: run without --gpu-time"),
])
def test_picks_that_cannot_be_replayed_are_refused(tmp_path, capsys, arguments, changes,
                                                   message):
    path = _picks_file(tmp_path, **changes)
    assert cli.main(["bench", *arguments, "--picks", path]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it (No such file or directory)"),
    ("[1, 2]", "not a file of treduda bench --json"),
])
def test_a_picks_file_that_is_no_bench_json_is_refused(tmp_path, capsys, content, message):
    path = tmp_path / "picks.json"
    if content is not None:
        path.write_text(content)
    assert cli.main(["bench", "--gpu-time", "--limit", "1", "--picks", str(path)]) == 2
    assert message in capsys.readouterr().err


def _timed(id: str, ours: float, cupy: float, torch: float | None) -> GpuOutcome:
    return GpuOutcome("tccg_fp32", id, "C[a,b]=A[a,k]*B[k,b]", "F", "float32",
                      {"a": 10, "b": 10, "k": 10}, strategy="tiled+staged", grid=(4, 2, 1),
                      block=(32, 8, 1), registers=40, verified=True, treduda_ms=ours,
                      cupy_ms=cupy, torch_ms=torch, flops=2000)


def test_gpu_table_and_summary_give_ratios_and_their_geometric_mean():
    rows = [_timed("r1", 2.0, 1.0, 4.0), _timed("r2", 1.0, 1.0, 1.0),
            _timed("r3", 0.5, 2.0, None)]
    rows[2].torch_ms = None
    assert rows[0].ratio("torch") == 2.0 and rows[0].ratio("cupy") == 0.5
    assert rows[0].blocks == 8 and rows[0].gflops(2.0) == pytest.approx(1e-3)
    line = summary(rows, "Some GPU")
    assert line.startswith("3/3 verified on Some GPU")
    assert "geometric-mean 1.414x torch.einsum over 2 rows (lowest 1.000x, r2)" in line
    assert "geometric-mean 1.260x cupy.einsum over 3 rows (lowest 0.500x, r1)" in line
    lines = gpu_table(rows).splitlines()
    assert lines[0].split()[:4] == ["id", "expression", "strategy", "ms"]
    r1 = next(line for line in lines if line.startswith("r1 "))
    assert "2.000" in r1 and "0.500" in r1 and r1.rstrip().endswith("yes")
    record = rows[0].to_dict()
    assert record["ratio_torch"] == 2.0 and record["blocks"] == 8 and record["status"] == "ok"
    json.dumps(record)  # JSON-serialisable as written by --json


def test_the_gpu_benchmarks_json_is_calibration_data(tmp_path):
    # what --gpu-time --picks writes, rivals included, is what model_fidelity.py --data reads
    timed = _timed("r1", 2.0, 1.0, 4.0)
    failed = _timed("r1~2", 3.0, None, None)
    failed.stage, failed.error = "verify", "VerificationError: differs"
    timed.rivals = [_timed("r1~1", 2.5, None, None), failed]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"rows": [timed.to_dict(), _timed("r2", 1.0, 1.0, 1.0).to_dict()]}))
    rows = fidelity.load(path)
    assert [(r.id, r.measured) for r in rows] == [("r1", 2e-3), ("r1~1", 2.5e-3), ("r2", 1e-3)]
    assert rows[1].grid == (4, 2, 1) and rows[1].block == (32, 8, 1) and rows[1].registers == 40
    assert "r1~2 FAILED at verify: VerificationError" in gpu_table([timed])


def test_the_gpu_benchmarks_rows_record_their_precision(tmp_path):
    # a TF32 suite's rows and rivals say tf32 beside their dtype, and the fidelity rows read it
    (case,) = select("gemm_tf32", limit=1)
    outcome = _untimed(case, case.name)
    outcome.treduda_ms = 1.0
    outcome.rivals = [dataclasses.replace(_untimed(case, f"{case.name}~1"), treduda_ms=2.0)]
    assert (outcome.dtype, outcome.precision) == ("float32", "tf32")
    record = {**outcome.to_dict(), "strategy": "tensorcore", "params": {}, "grid": [1, 1, 1],
              "block": [32, 1, 1], "registers": 64}
    record["rivals"] = [{**record["rivals"][0], **{k: record[k] for k in (
        "strategy", "params", "grid", "block", "registers")}}]
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"rows": [record]}))
    assert [(r.dtype, r.precision) for r in fidelity.load(path)] == [("float32", "tf32")] * 2


@pytest.mark.slow
def test_the_tensor_core_suites_run_in_their_dtype_and_precision():
    """gemm_fp16, tccg_tf32 and their kin: the GEMM and TCCG rows in the dtype and precision
    torch.einsum would run them in on tensor cores (issue 26); --dtype and --precision set
    them for any suite, and a precision float32 cannot take is refused before any work."""
    half = select("gemm_fp16", ["gemm_1000"])
    assert [(c.dtype, c.precision) for c in half] == [("float16", "highest")]
    assert {(c.dtype, c.precision) for c in select("tccg_tf32")} == {("float32", "tf32")}
    assert {c.dtype for c in select("tccg_fp32", dtype="bfloat16")} == {"bfloat16"}
    with pytest.raises(treduda.errors.TredudaError, match="float32"):
        select("tccg_fp64", precision="tf32")
    out, log = io.StringIO(), io.StringIO()
    cases = [*half, *select("gemm", ["gemm_1000"], precision="3xtf32")]
    assert run(cases, max_nodes=50, title="test", out=out, log=log) == 0
    assert "2/2 verified" in out.getvalue()
    # float16 goes to tensor cores, whose peak (not the FMA units') its fraction is of
    lines = out.getvalue().splitlines()
    half_row = next(line for line in lines if line.startswith("gemm_1000 ") and "tensorcore"
                    in line)
    assert 0 < float(half_row.split("%")[0].split()[-1]) < 100
    # A 3xTF32 kernel splits its products' inputs: the precision reached the generated code.
    assert "td_tf32x3" in treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 9, "j": 7, "k": 5},
                                          strategy="tiled", precision="3xtf32").opencl_source


def test_bench_dtype_and_precision_on_the_command_line(capsys):
    assert cli.main(["bench", "--suite", "gemm", "--ids", "gemm_1000", "--dtype", "float64",
                     "--precision", "tf32"]) == 2
    assert "float32" in capsys.readouterr().err


@pytest.mark.skipif(not gpu_present() or importlib.util.find_spec("torch") is None,
                    reason="needs a CUDA GPU and torch")
def test_a_bfloat16_row_is_verified_and_timed_beside_torch_on_the_gpu():
    """bfloat16 rows: torch makes the operands, the kernel is checked against both libraries
    in float64 and timed beside torch.einsum (CuPy's einsum has no bfloat16 products)."""
    from treduda.app.gpu_bench import _libraries, run_row
    from treduda.model.gpus import gpu

    row = Row("gemm_small", "C[i,j] = A[i,k]*B[k,j]", {"i": 300, "j": 200, "k": 170}, "C", "")
    cupy, torch = _libraries()
    outcome = run_row(Case(row, "bfloat16"), gpu("H100"), 50, 3, cupy, torch)
    assert outcome.error is None and outcome.verified
    assert outcome.torch_ms > 0 and outcome.cupy_ms is None and outcome.treduda_ms > 0


def test_each_timed_kernel_records_its_code_digest_and_the_fidelity_tool_reads_it(tmp_path):
    # measure() records the digest of the kernel it generated (here it stops at verify: no
    # GPU libraries given), and the fidelity tool keeps the row while today's kernel is that one
    (case,) = select("tccg_fp32", limit=1)
    pick = Pick("tiled+staged", {"order": "b,c,a", "stage": "B"}, None)
    outcome = measure(_untimed(case, case.name), case, pick, 1, None, None, False)
    kernel = treduda.compile(case.row.expression, case.row.sizes, layout=case.row.layout,
                             strategy=pick.strategy, params=pick.params)
    assert outcome.stage == "verify" and outcome.code_digest == code_digest(kernel.cuda_source)
    record = {**outcome.to_dict(), "status": "ok", "treduda_ms": 1.0, "registers": 40}
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"rows": [record, {**record, "id": "other",
                                                  "code_digest": "0" * 16}]}))
    rows = fidelity.load(path)
    assert [r.code for r in rows] == [outcome.code_digest, "0" * 16]
    kept, changed = fidelity.evaluate(rows, fidelity.regenerate(rows, ptxas=False))
    assert kept.left_out is None and changed.left_out.startswith("its code differs")
