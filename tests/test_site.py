"""The documentation site as a reader's browser shows it (issue 42): the index and a notebook
page, served on localhost and rendered by headless Chromium, show their figures and no error.

The site is the one ``$TREDUDA_SITE_DIR`` names (``.ci/run`` builds it with ``mkdocs build
--strict`` just before), else this test builds it, which executes the notebooks (minutes): then
only with ``pytest -m matrix``, since tests/test_notebooks.py runs the notebooks already.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=10000"]
ERRORS = re.compile(r"Traceback \(most recent call last\)|\b\w+(?:Error|Exception): "
                    r"|404 - Not found")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None,
                       reason="mkdocs is not installed: pip install -e '.[docs]'"),
    pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                       reason="headless Chromium is missing: apt-get install chromium"),
    *([] if os.environ.get("TREDUDA_SITE_DIR") else [pytest.mark.matrix]),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The built site's folder."""
    if os.environ.get("TREDUDA_SITE_DIR"):
        return Path(os.environ["TREDUDA_SITE_DIR"]).resolve()
    built = tmp_path_factory.mktemp("site")
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict",
                           "--site-dir", str(built)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return built


@pytest.fixture(scope="module")
def served(site):
    """The site's address on localhost, served from a thread for this module's tests."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


def rendered(url: str, profile: Path) -> str:
    """The page's DOM once Chromium has loaded it and run its scripts."""
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                          capture_output=True, text=True, timeout=180, check=True)
    return done.stdout


def text_of(dom: str) -> str:
    """What a reader reads: the DOM without its tags, scripts and styles."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", " ", dom))


def test_the_index_shows_its_figure(served, tmp_path):
    dom = rendered(f"{served}/", tmp_path / "profile")
    assert "<h1" in dom and "treduda" in dom
    sources = re.findall(r'<img[^>]*\bsrc="([^"]+\.png)"', dom)
    assert any("figures/tccg_ratio.png" in s for s in sources), sources
    with urllib.request.urlopen(f"{served}/figures/tccg_ratio.png") as figure:
        assert figure.read(8) == b"\x89PNG\r\n\x1a\n"
    assert not ERRORS.search(text_of(dom))


def test_a_notebook_page_shows_its_plots_and_no_error(served, tmp_path):
    dom = rendered(f"{served}/notebooks/04_search_and_model/", tmp_path / "profile")
    plots = re.findall(r'<img[^>]*\bsrc="data:image/png;base64,', dom)
    assert len(plots) >= 3  # bound vs estimate, cuts per depth, the roofline
    assert "branch and bound:" in text_of(dom)  # a cell's printed output
    assert not ERRORS.search(text_of(dom))


@pytest.mark.parametrize("notebook", sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_every_notebook_page_shows_its_outputs(served, tmp_path, notebook):
    """Each notebook's cells ran when the site was built: their outputs are on its page (the
    quick start's and the strategy's deliberate ParseError and StrategyError are printed
    text, not tracebacks)."""
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    code = sum(cell["cell_type"] == "code" for cell in cells)
    dom = rendered(f"{served}/notebooks/{notebook}/", tmp_path / "profile")
    outputs = re.findall(r'class="[^"]*\bjp-OutputArea-output\b', dom)
    assert len(outputs) >= code // 2 > 0  # most cells print or plot something
    assert "Traceback (most recent call last)" not in text_of(dom)
