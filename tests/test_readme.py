"""README.md is the front door (issue 42): one screen, its two commands the ones CI runs, its
GPU table the data file's, its links alive, and its examples running as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SET_UP = ("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && "
          ".venv/bin/treduda demo")
TESTS = ".venv/bin/python -m pytest -n 2"


def test_the_readme_fits_on_a_screen_or_two():
    assert len(README.splitlines()) <= 150


def test_the_two_commands_are_the_ones_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in (SET_UP, TESTS):
        assert f"    {command}\n" in README
        assert command in ci


def test_the_gpu_table_is_the_reports_output_from_the_data_files_it_names():
    """benchmarks/gpu_report.py is the one writer of the table, from the files in
    benchmarks/data/ that the marker's command names."""
    found = re.search(r"<!-- gpu-table: written by `python (benchmarks/gpu_report.py --readme "
                      r"(?:benchmarks/data/\S+ ?)+)`.*?-->\n(.*?)\n<!-- /gpu-table -->", README,
                      re.DOTALL)
    assert found, "README.md's gpu-table marker names no gpu_report.py --readme command"
    command, table = found.groups()
    written = subprocess.run([sys.executable, *command.split()], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    assert table == written.rstrip("\n"), f"run `python {command}` and paste its table"
    assert "geometric mean" in table and "gemm_4096" in table


def test_the_links_resolve():
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert targets
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing


@pytest.mark.slow
def test_the_examples_run(capsys):
    """Each Python example, as the README shows it (the compiled kernel's is searched and
    verified on PoCL; the numpy-style one asserts its result)."""
    for example in re.findall(r"```python\n(.*?)```", README, re.DOTALL):
        namespace: dict = {}
        exec(compile(example, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "matches numpy.einsum" in printed and "intermediate T: 96 x 64" in printed
    assert np.allclose(namespace["out"]["D"], 80 * 64 * np.ones((96, 48)))
