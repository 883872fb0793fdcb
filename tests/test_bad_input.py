"""Wrong input, from Python and from the command line: each is a treduda.errors class with a
message that says what to do, raised before anything is searched, generated or compiled."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import treduda
from treduda.app import bench
from treduda.app.cli import main
from treduda.errors import (
    ArgumentError,
    DtypeError,
    MissingArray,
    MissingSize,
    ShapeMismatch,
    SizeLimit,
    StrategyError,
    TredudaError,
)
from treduda.polyhedral.ast_build import check_grid
from treduda.polyhedral.lower import plan

GEMM = "C[i,j] = A[i,k]*B[k,j]"
SIZES = {"i": 8, "j": 8, "k": 8}


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    """Spies: these cases are refused up front, so no search, kernel build or nvcc may run."""
    def ran(what):
        def spy(*args, **kwargs):
            raise AssertionError(f"{what} ran for an input that should have been refused")
        return spy
    monkeypatch.setattr(treduda.tuning.policy, "search_program", ran("the search"))
    monkeypatch.setattr(treduda.api, "search_program", ran("the search"))
    monkeypatch.setattr(treduda.generation, "build", ran("kernel generation"))
    monkeypatch.setattr(treduda.tuning.policy, "compile_with_sass", ran("nvcc"))
    monkeypatch.setattr(treduda.run.nvcc, "run_tool", ran("nvcc"))
    monkeypatch.setattr(bench, "run", ran("the bench"))


def a(*shape):
    return np.ones(shape, dtype=np.float32)


PYTHON_CASES = {
    "sizes a list": (lambda: treduda.compile(GEMM, [8, 8, 8]), ArgumentError,
                     "sizes must be a mapping from each index's name to its extent"),
    "sizes keyed by ints": (lambda: treduda.compile(GEMM, {0: 8, 1: 8, 2: 8}), ArgumentError,
                            "sizes must be a mapping"),
    "a size as text": (lambda: treduda.compile(GEMM, {**SIZES, "i": "8"}), ShapeMismatch,
                       "the size of index 'i' must be a positive int, got '8'"),
    "expression not a string": (lambda: treduda.compile(42, SIZES), ArgumentError,
                                "the expression must be a string such as"),
    "contract with an int expression": (lambda: treduda.contract(42, a(2, 2)), ArgumentError,
                                        "the expression must be a string"),
    "dtype=3": (lambda: treduda.compile(GEMM, SIZES, dtype=3), DtypeError,
                "dtype 3 is not a dtype numpy knows; choose one of float32"),
    "layout='X'": (lambda: treduda.compile(GEMM, SIZES, layout="X"), StrategyError,
                   "layout must be 'C' (row-major"),
    "gpu='nope'": (lambda: treduda.compile(GEMM, SIZES, gpu="nope"), ArgumentError,
                   "unknown GPU 'nope'; known GPUs: H100"),
    "gpu='nope' with a strategy": (lambda: treduda.compile(GEMM, SIZES, gpu="nope",
                                                           strategy="tiled"),
                                   ArgumentError, "unknown GPU 'nope'"),
    "gpu=3 to search": (lambda: treduda.search(GEMM, SIZES, gpu=3), ArgumentError,
                        "a GPU is a name or a treduda.model.gpus.Gpu"),
    "strategy=5": (lambda: treduda.compile(GEMM, SIZES, strategy=5), ArgumentError,
                   "strategy must be a strategy's name such as 'tiled+staged'"),
    "an unknown strategy": (lambda: treduda.compile(GEMM, SIZES, strategy="tiled+magic"),
                            StrategyError, "unknown strategy 'magic'"),
    "params=[1]": (lambda: treduda.compile(GEMM, SIZES, params=[1]), ArgumentError,
                   "params must be a mapping from parameter names to values"),
    "a parameter value that is a list": (
        lambda: treduda.compile(GEMM, SIZES, strategy="tiled+staged", params={"stage": ["A"]}),
        ArgumentError, "params must be a mapping"),
    "symbolic='yes'": (lambda: treduda.compile(GEMM, SIZES, symbolic="yes"), ArgumentError,
                       "symbolic must be True or False, got str 'yes'"),
    "cache='x'": (lambda: treduda.compile(GEMM, SIZES, cache="x"), ArgumentError,
                  "cache must be True, False or a treduda.tuning.cache.TuningCache"),
    "max_nodes=0": (lambda: treduda.search(GEMM, SIZES, max_nodes=0), ArgumentError,
                    "max_nodes must be a positive int"),
    "refine='2'": (lambda: treduda.search(GEMM, SIZES, refine="2"), ArgumentError,
                   "refine must be an int >= 0"),
    "search without sizes": (lambda: treduda.search(GEMM, None), MissingSize,
                             "no size for indices i, j, k"),
    "an unknown backend": (lambda: treduda.contract(GEMM, A=a(2, 3), B=a(3, 2), backend="cdua"),
                           ArgumentError, "backend must be one of opencl, cuda, emulator, got "
                                          "str 'cdua'; did you mean 'cuda'?"),
    "an array that is not numbers": (lambda: treduda.contract(GEMM, A=object(), B=a(2, 2)),
                                     DtypeError, "A has dtype object"),
    "a scalar given as an array": (lambda: treduda.contract("C[i] = alpha*A[i]", A=a(3),
                                                            alpha=np.ones(2)),
                                   ArgumentError, "the scalar alpha must be one number"),
    "a scalar not given": (lambda: treduda.contract("C[i] = alpha*A[i]", A=a(3)), MissingArray,
                           "no value for scalar(s) alpha; pass e.g. alpha=1.0"),
    "+= without the old output": (lambda: treduda.contract("C[i] += A[i]*B[i]", A=a(3), B=a(3)),
                                  MissingArray, "no array for the output C"),
    "a shape that is not a tuple": (lambda: treduda.contract_expression("ik,kj", "ab", (5, 3)),
                                    ArgumentError, "the shape of A must be a tuple of ints"),
    "tensors past 64-bit indices (compile)": (
        lambda: treduda.compile(GEMM, dict.fromkeys("ijk", 10**12)), SizeLimit,
        "C[i,j] would hold 1e+24 elements (i=1000000000000 x j=1000000000000), more than "
        "64-bit indices address"),
    "tensors past 64-bit indices (search)": (
        lambda: treduda.search("C[i] = A[i,k]*B[k]", {"i": 2**40, "k": 2**30}), SizeLimit,
        "A[i,k] would hold 1.18e+21 elements"),
    "an output past any grid": (
        lambda: treduda.compile("C[i] = A[i]*B[i]", {"i": 10**15}), SizeLimit,
        "it needs at least 3.83e+09 blocks; a grid holds at most 2.15e+09"),
}


@pytest.mark.parametrize("case", PYTHON_CASES)
def test_a_wrong_argument_is_refused_up_front(case):
    call, error, fragment = PYTHON_CASES[case]
    with pytest.raises(error) as raised:
        call()
    assert fragment in str(raised.value)


def test_the_grid_limit_counts_the_axes_an_output_can_use():
    """An output of two indices uses x and y, 65535 times the blocks of one; indices merged
    into one (adjacent in every tensor) are one index on the GPU."""
    with pytest.raises(SizeLimit, match="with 1 of the three axes used by 1 output index"):
        treduda.compile("C[i,j] = A[i,j]*B[i,j]", {"i": 10**8, "j": 10**8})
    check_grid(plan("C[i,j] = A[i]*B[j]", {"i": 10**8, "j": 10**8}), 1024, 255)  # fits


def command(capsys, *argv):
    """``treduda argv``: its exit status and what it wrote to stderr."""
    try:
        status = main(list(argv))
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    return status, capsys.readouterr().err


SIZED = ("-s", "i=8", "-s", "j=8", "-s", "k=8")
CLI_CASES = {
    "an output file in a missing folder": (
        ["compile", GEMM, *SIZED, "-o", "/nonexistent/x.cu"],
        "treduda: error: cannot write /nonexistent/x.cu: the folder /nonexistent does not exist"),
    "a negative size": (["compile", GEMM, "-s", "i=-8"],
                        "the extent of index i must be a positive integer such as i=1024, got "
                        "'-8'"),
    "no sizes": (["compile", GEMM], "no size for indices i, j, k of C[i,j] = A[i,k]*B[k,j]; "
                                    "give each one, e.g. -s i=64 -s j=64 -s k=64, or --symbolic"),
    "a size for no index": (["compile", GEMM, *SIZED, "-s", "x=3"],
                            "-s x=3: x is not an index of C[i,j] = A[i,k]*B[k,j]"),
    "a cache file that does not exist": (["cache", "list", "--path", "/missing.sqlite3"],
                                         "no tuning cache at /missing.sqlite3: the file does "
                                         "not exist"),
    "clearing a cache file that does not exist": (
        ["cache", "clear", "--path", "/missing.sqlite3"], "the file does not exist"),
    "search --symbolic": (["search", GEMM, "--symbolic"], "unrecognized arguments: --symbolic"),
    "a parameter value the strategy does not take": (
        ["compile", GEMM, *SIZED, "--strategy", "tiled", "-p", "block_x=abc"],
        "block_x='abc' is not allowed"),
    "a parameter without a value": (["compile", GEMM, *SIZED, "--strategy", "tiled", "-p", "b"],
                                    "expected NAME=VALUE such as block_x=32, got 'b'"),
    "an unknown strategy": (["compile", GEMM, *SIZED, "--strategy", "magic"],
                            "unknown strategy 'magic'"),
    "an unknown gpu to compile": (["compile", GEMM, *SIZED, "--gpu", "nope"],
                                  "unknown GPU 'nope'"),
    "an unknown gpu to search": (["search", GEMM, *SIZED, "--gpu", "nope"], "unknown GPU 'nope'"),
    "a search past 64-bit indices": (["search", GEMM, "-s", "i=1000000000000",
                                      "-s", "j=1000000000000", "-s", "k=1000000000000"],
                                     "more than 64-bit indices address"),
    "a negative --refine": (["search", GEMM, *SIZED, "--refine", "-1"],
                            "argument --refine: expected a count such as 5, got '-1'"),
    "a picks file that does not exist": (["bench", "--gpu-time", "--picks", "/missing.json"],
                                         "--picks /missing.json: cannot read it"),
    "a bench --json in a missing folder": (["bench", "--ids", "tccg_01", "--json",
                                            "/nonexistent/out.json"],
                                           "cannot write /nonexistent/out.json"),
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_the_command_line_says_what_is_wrong_in_one_line(case, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TREDUDA_CACHE", str(tmp_path / "tuning.sqlite3"))
    argv, fragment = CLI_CASES[case]
    status, err = command(capsys, *argv)
    assert status != 0 and "treduda" in err and "error: " in err
    assert fragment in err and "Traceback" not in err


def test_an_output_file_that_is_a_folder_is_one_line_in_a_real_process(tmp_path):
    done = subprocess.run([sys.executable, "-m", "treduda.app.cli", "compile", "C[i] = A[i]",
                           "-s", "i=8", "--strategy", "thread_per_element", "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"treduda: error: cannot write {tmp_path}: it is a folder; give the "
                           "path of a file in it\n")


def test_a_warning_is_one_line_too(tmp_path, capsys):
    foreign = tmp_path / "notes.sqlite3"
    foreign.write_text("not a database")
    assert main(["cache", "list", "--path", str(foreign)]) == 1
    err = capsys.readouterr().err
    assert err == (f"treduda: warning: cannot use the tuning cache {foreign} (it is damaged: "
                   f"file is not a database); `treduda cache repair --path {foreign}` rebuilds "
                   "it from what it still holds (or delete it: treduda starts a new one); until "
                   "then this process keeps its tuning in memory\n")


def test_compile_help_says_it_searches_and_takes_a_gpu(capsys):
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "it searches for the fastest kernel on --gpu" in text
    assert "--gpu GPU the GPU a search tunes for" in text


def test_every_treduda_error_is_a_subclass_of_the_root():
    assert issubclass(SizeLimit, ShapeMismatch) and issubclass(ArgumentError, TredudaError)
