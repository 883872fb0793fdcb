"""mkdocs hook: an API reference page for every public name of ``treduda`` and
``treduda.authoring``, made from their ``__all__`` when the site is built, so a name added
there has its page without anyone writing one."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

# Each public module, the folder its pages go in, and what its index says about it.
MODULES = {
    "treduda": ("treduda", "the entry points, the kernel and plan they return, the errors"),
    "treduda.authoring": ("authoring", "what a strategy author needs"),
}

# A Sphinx role before code, as docstrings write :func:`name` or :class:`~path.Name`, which
# Markdown leaves as text: the page shows the code alone.
ROLE = re.compile(r":(?:attr|class|data|exc|func|meth|mod):(<code>)~?")


def documented(module: str, name: str, root: Path) -> str:
    """The dotted path mkdocstrings reads ``module.name`` from: the file that defines it, as a
    path from the repository's root, since ``treduda`` loads its names on first use (a static
    reader cannot follow that) and ``treduda.strategies`` is installed from ``strategies/``."""
    value = getattr(importlib.import_module(module), name)
    source = Path(inspect.getsourcefile(value)).relative_to(root).with_suffix("")
    parts = source.parts[:-1] if source.name == "__init__" else source.parts
    return ".".join(parts if inspect.ismodule(value) else (*parts, name))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = Path(config.config_file_path).resolve().parent
    index, pages = ["# API reference", ""], {}  # pages: each documented object's page
    for module, (folder, what) in MODULES.items():
        index += [f"## `{module}`", "", f"{what[0].upper()}{what[1:]}.", ""]
        for name in sorted(importlib.import_module(module).__all__, key=str.lower):
            target = documented(module, name, root)
            if target not in pages:  # a name both modules export has one page
                pages[target] = f"api/{folder}/{name}.md"
                page = f"# `{module}.{name}`\n\n::: {target}\n"
                files.append(File.generated(config, pages[target], content=page))
            index.append(f"- [`{name}`]({pages[target].removeprefix('api/')})")
        index.append("")
    files.append(File.generated(config, "api/index.md", content="\n".join(index)))
    return files


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return ROLE.sub(r"\1", html) if page.file.src_uri.startswith("api/") else html
