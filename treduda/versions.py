"""Versions of treduda's code, so that a stored result made by other code is never taken for
one of ours: the installed version, and hashes of the sources that make a result (no version
constant to forget to bump)."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.resources
from collections.abc import Iterable


@functools.cache
def installed_version() -> str:
    """treduda's version: kernels from another version may differ, so it is part of every key."""
    try:
        return importlib.metadata.version("treduda")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def sources_digest(packages: Iterable[str], extra: bytes = b"") -> str:
    """treduda's version and a hash of ``extra`` and of the Python and template sources of
    ``packages`` (each package's own folder, sorted by name, so every machine agrees)."""
    digest = hashlib.sha256(extra)
    for package in packages:
        folder = importlib.resources.files(package)
        for source in sorted((f for f in folder.iterdir() if f.name.endswith((".py", ".j2"))),
                             key=lambda f: f.name):
            digest.update(f"{package}/{source.name}\n".encode())
            digest.update(source.read_bytes())
    return f"{installed_version()}+{digest.hexdigest()[:16]}"
