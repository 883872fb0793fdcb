"""The command line: compile, strategies, demo, and its error messages."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import filled

from treduda.app.cli import main
from treduda.tuning.cache import TuningCache
from treduda.tuning.policy import finish_background


def test_compile_prints_cuda(capsys):
    assert main(["compile", "C[i,j] = A[i,k]*B[k,j]", "--size", "i=64", "-s", "j=33",
                 "-s", "k=8", "--strategy", "thread_per_element", "--param", "block_x=16"]) == 0
    out = capsys.readouterr().out
    assert "__global__" in out and "block_x=16" in out and "grid = (3, 16, 1)" in out


def test_compile_writes_opencl_for_symbolic_sizes(tmp_path, capsys):
    target = tmp_path / "k.cl"
    assert main(["compile", "ik,kj->ij", "--symbolic", "--layout", "F", "--dtype", "float64",
                 "--opencl", "--out", str(target)]) == 0
    text = target.read_text()
    assert "__kernel" in text and "const long N_k" in text and "cl_khr_fp64" in text
    assert "wrote" in capsys.readouterr().out


def test_compile_reports_errors_with_a_caret(capsys):
    assert main(["compile", "C[i,j] = A[i,k] * ", "-s", "i=4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("treduda: error:") and "^" in err


def test_bad_size_argument_is_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["compile", "C[i] = A[i]", "--size", "i:4"])
    assert "expected INDEX=EXTENT" in capsys.readouterr().err


def test_strategies_lists_the_baseline(capsys):
    assert main(["strategies"]) == 0
    assert "thread_per_element" in capsys.readouterr().out


def test_demo_verifies_both_kernels_and_says_where_their_cuda_files_are(capsys, tmp_path):
    assert main(["demo", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("matches numpy.einsum") == 2 and "all kernels verified" in out
    written = sorted(tmp_path.glob("*.cu"))
    assert [p.name for p in written] == ["gemm.cu", "tccg3.cu"]
    for path in written:
        assert f"CUDA file  {path}" in out and "__global__" in path.read_text()
    assert "__global__" not in out and len(out.splitlines()) < 30  # the summary, not the code


def test_demo_prints_the_source_when_asked(capsys, tmp_path):
    assert main(["demo", "--out", str(tmp_path), "--source"]) == 0
    assert capsys.readouterr().out.count("__global__") == 2


@pytest.mark.parametrize("command", ["cache list --path {cache}", "gpus", "strategies"])
def test_output_piped_into_head_ends_quietly(command, tmp_path):
    """A real pipe whose reader leaves early: the first line arrives and no traceback follows."""
    cache = tmp_path / "tuning.sqlite3"
    assert len(TuningCache(cache)) == 0  # made: `cache list` refuses a file that does not exist
    line = f"{sys.executable} -m treduda.app.cli {command.format(cache=cache)} | head -1"
    shell = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120)
    assert shell.stdout.count("\n") == 1 and shell.stderr == ""
    # The reader gone before the first write: every write fails, deterministically.
    process = subprocess.Popen([sys.executable, "-m", "treduda.app.cli", *command.format(
        cache=cache).split()], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    stderr = process.communicate(timeout=120)[1].decode()
    assert stderr == "" and process.returncode == 141


def test_compile_with_a_chained_strategy_and_parameters(capsys):
    assert main(["compile", "C[i,j] = A[i,k]*B[k,j]", "-s", "i=40", "-s", "j=33", "-s", "k=20",
                 "--strategy", "tiled+staged", "-p", "reg_x=2", "-p", "preload=true",
                 "-p", "stage=B"]) == 0
    out = capsys.readouterr().out
    assert "strategy: tiled+staged" in out and "preload=True" in out and "B_sh" in out
    assert "A_sh" not in out


def test_space_lists_parameters_and_rules(capsys):
    assert main(["space", "C[i,j] = A[i,k]*B[k,j]", "-s", "i=40", "-s", "j=33", "-s", "k=20"]) == 0
    out = capsys.readouterr().out
    assert "preload" in out and "shared memory per block" in out and "combinations" in out
    assert "the search tries 16, 32, 64, with the tiles" in out  # what block_x declares


def test_unknown_strategy_is_an_error(capsys):
    assert main(["compile", "C[i] = A[i]", "-s", "i=4", "--strategy", "tiled+magic"]) == 2
    assert "unknown strategy 'magic'" in capsys.readouterr().err


def test_search_prints_a_table_and_the_winner(tmp_path, capsys):
    out_file = tmp_path / "best.json"
    assert main(["search", "C[i,j] = A[i,k]*B[k,j]", "-s", "i=1024", "-s", "j=1024",
                 "-s", "k=1024", "--gpu", "A100", "--top", "3", "--json", str(out_file)]) == 0
    captured = capsys.readouterr()
    assert "bound ms" in captured.out and "best on A100" in captured.out
    assert "nodes visited" in captured.err  # the progress line
    assert '"strategy": "tiled+staged"' in out_file.read_text()


def test_gpus_lists_every_description(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("H100", "A100", "V100", "RTX3070", "GTX560Ti"))


def test_cache_lists_and_clears_tuned_entries(tmp_path, capsys):
    import treduda

    path = tmp_path / "tuning.sqlite3"
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 30, "j": 20, "k": 10},
                             cache=TuningCache(path))
    finish_background()  # the kernel store is written on the background thread
    assert main(["cache", "list", "--path", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 entries") and kernel.strategy in out and "i=30" in out
    assert "1 generated kernels in the kernel store" in out
    assert main(["cache", "list", "--kernels", "--path", str(path)]) == 0
    listed = capsys.readouterr().out.splitlines()[-1]
    assert kernel.strategy in listed and "i=30" in listed and "kB" in listed
    assert main(["cache", "clear", "--path", str(path)]) == 0
    assert "removed 1 entries and 1 stored kernels" in capsys.readouterr().out
    assert len(TuningCache(path)) == 0 and TuningCache(path).kernels() == 0


def test_search_keeps_its_winner_and_a_rerun_answers_from_the_tuning_cache(tmp_path, capsys,
                                                                          monkeypatch):
    import treduda

    cache = tmp_path / "tuning.sqlite3"
    monkeypatch.setenv("TREDUDA_CACHE", str(cache))
    argv = ["search", "C[i] = A[i,k]*B[k]", "-s", "i=16", "-s", "k=8", "--top", "1", "--complete"]
    assert main(argv) == 0
    assert f"kept in the tuning cache {cache}" in capsys.readouterr().out
    [entry] = TuningCache(cache).entries()
    assert entry.value["found"].startswith("by treduda.search(), a complete search of")
    search = treduda.tuning.policy.search_program
    monkeypatch.setattr(treduda.tuning.policy, "search_program",
                        lambda *a, **k: pytest.fail("searched"))
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert again.startswith(f"from the tuning cache {cache}: searched 0 nodes now")
    params = " ".join(f"{k}={v}" for k, v in entry.value["params"].items())
    assert f"{entry.value['strategy']} {params}" in again and "--fresh searches again" in again
    kernel = treduda.compile("C[i] = A[i,k]*B[k]", {"i": 16, "k": 8})  # the same answer
    assert dict(kernel.params) == entry.value["params"]
    monkeypatch.setattr(treduda.tuning.policy, "search_program", search)
    assert main([*argv, "--fresh"]) == 0
    assert "bound ms" in capsys.readouterr().out  # searched again, the table with it


TUNED_ROW = "id\texpression\tsizes\nrow\tC[i]=A[i,k]*B[k]\ti=6,k=5\n"


@pytest.mark.parametrize("argv, fragment", [
    (["tune", "--scheduler", "nonsense", "--file", "{tmp}/rows.tsv", "--cache",
      "{tmp}/t.sqlite3"], "nonsense"),
    (["compile"], "the following arguments are required: expression; see `treduda compile "
                  "--help`"),
    (["compile", "C[i]=A[i]", "--dtype", "float7"], "invalid choice: 'float7'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["compile", "C[i]=A[i]", "-s", "i=4", "-o", "/proc/version"], "cannot write /proc/version: "),
    (["compile", "C[i]=A[i]", "-s", "i=4", "-o", "/dev/full"], "cannot write /dev/full: "),
    (["compile", "C[i]=A[i]", "-s", "i=4", "-o", "{tmp}/rows.tsv/x.cu"],
     "{tmp}/rows.tsv is a file, not a folder"),
    (["compile", "C[i,j]=A[i,k]*B[k,j]", "--symbolic", "-s", "i=4"],
     "give each one, e.g. -s j=64 -s k=64, or leave out -s"),
    (["compile", "D[i,l]=A[i,j]*B[j,k]*C[k,l]", "-s", "i=4"], "e.g. -s l=64 -s j=64 -s k=64"),
    (["tune", "--file", "{tmp}/headless.tsv", "--cache", "{tmp}/t.sqlite3"],
     "--file {tmp}/headless.tsv, line 1: expected the header line"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else "")
def test_every_error_is_one_line_naming_the_value_and_the_fix(argv, fragment, tmp_path, capsys):
    (tmp_path / "rows.tsv").write_text(TUNED_ROW)
    (tmp_path / "headless.tsv").write_text(TUNED_ROW.split("\n", 1)[1])
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    if any(arg.startswith("/proc/") or arg.startswith("/dev/") for arg in argv) and not all(
            os.path.exists(arg) for arg in argv if arg.startswith("/")):
        pytest.skip("no such device here")
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.startswith("treduda: error: ") and err.count("\n") == 1, err
    assert fragment.format(tmp=tmp_path) in err, err
    assert "sizes={" not in err


def test_tune_help_says_the_file_needs_its_header(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    assert "first line is the header 'id expression sizes'" in " ".join(
        capsys.readouterr().out.split())


def test_cache_check_finds_damage_and_repair_keeps_what_is_readable(tmp_path, capsys):
    path = tmp_path / "tuning.sqlite3"
    filled(path)
    data = bytearray(path.read_bytes())
    page = len(data) // 4096 // 2  # within the kernels' records: one or a few are lost
    data[page * 4096:(page + 1) * 4096] = b"\xa5" * 4096
    path.write_bytes(bytes(data))
    health = TuningCache(path).check()
    assert health.kernels >= 30 and health.entries == 40, health
    held = f"{health.entries} entries and {health.kernels} stored kernels"
    assert main(["cache", "check", "--path", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path} is not a sound tuning cache: SQLite finds damage" in out
    assert f"{held} can still be read; `treduda cache repair --path {path}`" in out
    assert main(["cache", "list", "--kernels", "--path", str(path)]) == 1
    out, err = capsys.readouterr()
    assert f"{health.kernels} generated kernels in the kernel store" in out
    assert out.count("tiled n=") == health.kernels
    assert err.startswith(f"treduda: warning: cannot use the tuning cache {path} (")
    assert main(["cache", "clear", "--path", str(path)]) == 2  # a damaged file is left alone
    assert "is not a sound tuning cache" in capsys.readouterr().err
    assert main(["cache", "repair", "--path", str(path)]) == 0
    assert f"the damaged file is kept as {path}.damaged" in capsys.readouterr().out
    assert main(["cache", "check", "--path", str(path)]) == 0
    assert capsys.readouterr().out == f"{path} is sound: {held}\n"


def test_a_search_with_an_unusable_cache_warns_once_and_says_its_winner_is_not_kept(
        tmp_path, capsys, monkeypatch):
    garbage = tmp_path / "tuning.sqlite3"
    garbage.write_bytes(b"not a database " * 300)
    monkeypatch.setenv("TREDUDA_CACHE", str(garbage))
    assert main(["search", "C[i] = A[i,k]*B[k]", "-s", "i=16", "-s", "k=8", "--top", "1"]) == 0
    out, err = capsys.readouterr()
    assert f"NOT KEPT: the tuning cache {garbage} cannot be used (it is damaged" in out
    assert err.count(f"treduda: warning: cannot use the tuning cache {garbage}") == 1, err
    assert garbage.read_bytes() == b"not a database " * 300
