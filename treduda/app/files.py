"""The files the commands write: refused before any work where they cannot be written, and
written so that a failure names the file, the system's reason and what to do."""

from __future__ import annotations

from pathlib import Path

from ..errors import TredudaError


def writable(path: str | None) -> None:
    """Refuse, before any work, an output file whose folder does not exist or is a file, or
    that is a folder (a bench runs for minutes before it writes)."""
    if not path:
        return
    folder = Path(path).parent
    if folder.exists() and not folder.is_dir():
        raise TredudaError(f"cannot write {path}: {folder} is a file, not a folder; give a path "
                           "in an existing folder")
    if not folder.is_dir():
        raise TredudaError(f"cannot write {path}: the folder {folder} does not exist; create it "
                           "or give a path in an existing folder")
    if Path(path).is_dir():
        raise TredudaError(f"cannot write {path}: it is a folder; give the path of a file in it")


def write_text(path: str, text: str) -> None:
    """Write ``text`` into the file ``path``, or say why it cannot be (a device that refuses
    writes, a full disk) in one line that names the file."""
    try:
        with open(path, "w") as out:
            out.write(text)
    except OSError as error:
        raise TredudaError(f"cannot write {path}: {error.strerror or error}; give a path "
                           "where a file can be written") from None
