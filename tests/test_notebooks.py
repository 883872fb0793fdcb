"""The notebooks of ``notebooks/`` run top to bottom, and are committed without outputs.

Each notebook runs in a fresh kernel, in the notebooks folder, on the Python that runs the
tests. It uses the tuning cache that ``conftest.py`` points this session to, not the user's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
FILES = sorted(NOTEBOOKS.glob("*.ipynb"))


@pytest.fixture
def this_python(tmp_path, monkeypatch):
    """Make the kernel named python3 start this interpreter, whatever is installed elsewhere.

    Directories in JUPYTER_PATH come before the user's and the system's kernel directories."""
    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(tmp_path / "kernels" / "python3")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))


def test_the_notebooks_are_found():
    names = [f.name for f in FILES]
    assert names == ["01_quick_start.ipynb", "02_inside_the_machine.ipynb",
                     "03_writing_a_strategy.ipynb", "04_search_and_model.ipynb"]
    readme = (NOTEBOOKS / "README.md").read_text()
    assert all(name in readme for name in names)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_committed_without_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    for n, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name}: cell {n} has outputs; clear them"
            assert cell["execution_count"] is None, f"{path.name}: cell {n} has a count"


# A notebook's reader sees the public API only: ``treduda`` and ``treduda.authoring``.
PUBLIC = {"treduda", "treduda.authoring"}
IMPORTED = re.compile(r"^\s*(?:from|import)\s+(treduda[\w.]*)", re.MULTILINE)
INTERNAL = re.compile(r"treduda\.(?:api|app|codegen|frontend|kernel|polyhedral|programs|run|tuning)"
                      r"\b|treduda\.strategies\.\w+_kernel")
PRIVATE_SET = re.compile(r"\._\w+\s*=[^=]")  # a private attribute replaced: monkeypatching


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_imports_only_the_public_api(path):
    code = "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]
                     if cell["cell_type"] == "code")
    assert set(IMPORTED.findall(code)) <= PUBLIC, f"{path.name} imports an internal module"
    assert not INTERNAL.findall(code), f"{path.name} reaches an internal module"
    assert not PRIVATE_SET.findall(code), f"{path.name} replaces a private attribute"


# The notebooks that take a minute of CPU or more to run (03 searches three strategies on a
# large problem, 04 enumerates a space and bounds every prefix of it) run with `-m matrix`:
# by default, `.ci/run`'s `mkdocs build --strict` executes every notebook with errors not
# allowed (mkdocs.yml), and tests/test_site.py finds each cell's outputs on its page.
HEAVY = {"03_writing_a_strategy", "04_search_and_model"}


@pytest.mark.parametrize("path", [
    pytest.param(f, id=f.stem, marks=pytest.mark.matrix if f.stem in HEAVY else ())
    for f in FILES])
def test_runs_top_to_bottom(path, this_python):
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError, with the traceback, if a cell raises
    errors = [output for cell in notebook.cells if cell.cell_type == "code"
              for output in cell.outputs if output.output_type == "error"]
    assert not errors
