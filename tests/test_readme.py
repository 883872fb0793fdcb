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


def test_the_gpu_table_is_the_scripts_output():
    table = re.search(r"<!-- gpu-table.*?-->\n(.*?)\n<!-- /gpu-table -->", README, re.DOTALL)
    written = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "readme_table.py")],
                             capture_output=True, text=True, check=True).stdout
    assert table and table.group(1) == written.rstrip("\n"), \
        "run `python benchmarks/readme_table.py` and paste its table into README.md"


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
