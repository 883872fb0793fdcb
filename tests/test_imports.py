"""``import treduda`` and the command line's start load only what they use (issue 44: `import
treduda` took 0.7-1.1 s, `treduda --help` 2.6-3.0 s, importing isl, the model and the
strategies eagerly); the public names load on first use and work as before."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

import treduda
from treduda.tuning.cache import CacheKey, TuningCache

# What a start must not import: isl, the model, the search, the strategies, code generation,
# and the optional heavy packages.
HEAVY = ("islpy", "treduda.api", "treduda.model.model", "treduda.tuning.search",
         "treduda.strategies", "treduda.codegen", "treduda.polyhedral", "dask", "matplotlib",
         "pyopencl", "jinja2", "sympy")


def loaded_by(code: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules of ``heavy`` that a new process running ``code`` has imported."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, check=True)
    modules = json.loads(done.stdout.splitlines()[-1])
    return [m for m in modules if m.split(".")[0] in heavy or m.startswith(heavy)]


def test_import_treduda_and_the_command_lines_help_load_nothing_heavy():
    assert loaded_by("import treduda", (*HEAVY, "numpy")) == []
    help_ = ("import contextlib, io\nfrom treduda.app import cli\n"
             "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
             "    cli.main(['--help'])")
    assert loaded_by(help_, (*HEAVY, "numpy")) == []


def test_listing_the_tuning_cache_loads_nothing_heavy(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    TuningCache(path).put(CacheKey.make("C[i]=A[i]", {"i": 4}, "float32", "C", "H100"),
                          {"strategy": "tiled", "params": {}, "seconds": 1e-6})
    code = ("from treduda.app import cli\n"
            f"assert cli.main(['cache', 'list', '--path', {str(path)!r}]) == 0")
    assert loaded_by(code) == []


def test_the_public_names_load_on_first_use_and_compute():
    assert set(treduda.__all__) <= set(dir(treduda))
    for name in treduda.__all__:
        assert getattr(treduda, name) is not None
    a, b = np.arange(12.0).reshape(3, 4), np.arange(8.0).reshape(4, 2)
    assert np.allclose(treduda.contract("C[i,j] = A[i,k]*B[k,j]", A=a, B=b), a @ b)
    assert "tiled" in treduda.strategies.available()


def test_the_options_value_is_reached_without_loading_anything_heavy():
    """treduda.Options is named at the top of a program; numpy comes when a value is made."""
    assert loaded_by("import treduda\nassert treduda.Options.__name__ == 'Options'",
                     (*HEAVY, "numpy")) == []
