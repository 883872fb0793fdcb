"""The wheel, installed into a fresh virtual environment, works from outside the checkout:
built-in strategies import as ``treduda.strategies`` and the templates are found."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import importlib.util, pathlib, sys
    import numpy as np
    import treduda
    from treduda.strategies import available
    root = pathlib.Path(sys.argv[1])
    assert root not in pathlib.Path(treduda.__file__).parents, treduda.__file__
    assert importlib.util.find_spec("strategies") is None, "a bare 'strategies' module leaked"
    assert "thread_per_element" in available()
    a, b = np.arange(12.0).reshape(3, 4), np.arange(20.0).reshape(4, 5)
    np.testing.assert_allclose(treduda.contract("C[i,j] = A[i,k]*B[k,j]", A=a, B=b), a @ b)
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 9, "j": 10, "k": 11})
    assert "__global__" in kernel.cuda_source and kernel.verify().ok
    print("wheel ok")
""")


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_outside_the_checkout(tmp_path):
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist,
                    ROOT], check=True, cwd=elsewhere)
    wheel = next(dist.glob("treduda-*.whl"))
    # A venv without pip of its own (ensurepip: 6.7 CPU s), installed into by this pip
    # (pip's --python), without byte-compiling what it installs (sympy, numpy: most of the
    # install's CPU time); the imports below compile what they load.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
                    "--no-compile", wheel], check=True, cwd=elsewhere)
    result = subprocess.run([python, "-c", SCRIPT, ROOT], cwd=elsewhere, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert "wheel ok" in result.stdout
    command = subprocess.run([venv / "bin" / "treduda", "strategies"], cwd=elsewhere,
                             capture_output=True, text=True, check=True)
    assert "thread_per_element" in command.stdout
