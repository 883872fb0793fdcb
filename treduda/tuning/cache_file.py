"""The tuning cache's SQLite file: its tables, the checks every row passes, and what a
damaged or unusable file still yields (the rows :func:`salvage` reads, the in-memory
:class:`Memory` a process keeps in its place). :class:`~treduda.tuning.cache.TuningCache`
is the interface; this is its storage."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from treduda.errors import TredudaError
from treduda.frontend.identity import Identity

from .cache_key import CacheKey, Entry, canonical

SCHEMA_VERSION = 1
"""Stored in every row; bump it when the meaning of keys or values changes."""

APPLICATION_ID = int.from_bytes(b"TRDD", "big")
"""SQLite header field marking a file as a treduda cache, so we never write into a foreign one."""

SALVAGE_TIMEOUT = 1.0
"""Seconds to wait for a lock while reading what a damaged file still holds."""

TABLE = "tuning"
COLUMNS = ("digest", "key", "value", "checksum", "schema", "created")
CREATE = f"""
CREATE TABLE {TABLE} (
    digest   TEXT PRIMARY KEY,  -- CacheKey.digest()
    key      TEXT NOT NULL,     -- the key fields as canonical JSON
    value    TEXT NOT NULL,     -- the search result as JSON
    checksum TEXT NOT NULL,     -- sha256 of key and value, to detect tampering or bit rot
    schema   INTEGER NOT NULL,  -- SCHEMA_VERSION of the writer
    created  REAL NOT NULL      -- unix time
)"""

# Generated kernels (the kernel store): each under its Identity and the code generator's
# version, so a kernel from another generator is never found, and a new one replaces it.
KERNELS = "kernels"
KERNEL_COLUMNS = ("digest", "identity", "key", "value", "checksum", "schema", "created")
CREATE_KERNELS = f"""
CREATE TABLE IF NOT EXISTS {KERNELS} (
    digest   TEXT PRIMARY KEY,  -- sha256 of key
    identity TEXT NOT NULL,     -- Identity.digest(): one row per kernel, whatever generated it
    key      TEXT NOT NULL,     -- the identity and the generator's version as canonical JSON
    value    TEXT NOT NULL,     -- the kernel's record as JSON (treduda.kernel.Kernel.record)
    checksum TEXT NOT NULL,     -- sha256 of key and value
    schema   INTEGER NOT NULL,  -- SCHEMA_VERSION of the writer
    created  REAL NOT NULL      -- unix time
)"""

Row = tuple[Any, ...]
T = TypeVar("T")

def row_checksum(key_json: str, value_json: str) -> str:
    return hashlib.sha256(f"{key_json}\n{value_json}".encode()).hexdigest()


# What to do about a cache file that cannot be used, by cause ({path}: the file).
REPAIR = ("`treduda cache repair --path {path}` rebuilds it from what it still holds (or "
           "delete it: treduda starts a new one)")
ELSEWHERE = "set $TREDUDA_CACHE to another file"
WRITABLE = ("check that it and its folder can be written, that its disk has room and that no "
             "other process keeps it locked, or set $TREDUDA_CACHE to another file")


class Unusable(Exception):
    """The cache file cannot be used (internal): the reason, and what to do (a template of
    ``path``)."""

    def __init__(self, reason: str, advice: str):
        super().__init__(reason)
        self.reason, self.advice = reason, advice


class Corrupt(Exception):
    """One row failed a check (internal; carries the reason)."""


def validate_entry(row: Row, expected: CacheKey | None = None) -> Entry:
    """The entry stored in ``row``, or :class:`Corrupt` saying which check failed."""
    digest, key_json, value_json, checksum, schema, created = row
    check_row(key_json, value_json, checksum, schema)
    try:
        key = CacheKey.from_json(key_json)
    except ValueError as e:
        raise Corrupt(f"its stored key is not a valid key ({e})") from None
    if expected is not None and key.to_json() != expected.to_json():
        raise Corrupt(f"its stored key fields are for a different key: {key}")
    if key.digest() != digest:
        raise Corrupt("its stored key does not hash to the digest it is stored under")
    value = value_object(value_json)
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        raise Corrupt(f"its creation time {created!r} is not a number")
    return Entry(key, value, float(created))


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_key(identity: Identity, generator: str) -> str:
    """The kernel store's key: a generated kernel's identity and the generator's version."""
    if identity.strategy is None:
        raise TredudaError(f"the kernel store keeps generated kernels, not {identity}")
    return canonical({"identity": identity.fields(), "generator": generator})


def validate_kernel(row: Row, key_json: str) -> dict:
    """The record stored in the kernel store's ``row`` under ``key_json``, or :class:`Corrupt`
    saying which check failed."""
    digest, _, stored_key, value_json, checksum, schema, _ = row
    check_row(stored_key, value_json, checksum, schema)
    if stored_key != key_json or sha256_hex(stored_key) != digest:
        raise Corrupt("its stored key is not the key it is stored under")
    return value_object(value_json)


def check_row(key_json: Any, value_json: Any, checksum: Any, schema: Any) -> None:
    """:class:`Corrupt` unless a row is of this schema, text, and matches its checksum."""
    if schema != SCHEMA_VERSION:
        raise Corrupt(f"it has schema version {schema!r}, this treduda reads {SCHEMA_VERSION}")
    if not all(isinstance(text, str) for text in (key_json, value_json, checksum)):
        raise Corrupt("its key, value or checksum is not text")
    if row_checksum(key_json, value_json) != checksum:
        raise Corrupt("its checksum does not match its key and value (modified or damaged)")


def value_object(value_json: str) -> dict:
    """A row's value: a JSON object, or :class:`Corrupt`."""
    try:
        value = json.loads(value_json)
    except ValueError as e:
        raise Corrupt(f"its value is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise Corrupt(f"its value is a JSON {type(value).__name__}, not an object")
    return value


def describe_row(row: Row) -> str:
    """The key of a possibly corrupt row, as readable as its contents allow."""
    try:
        return str(CacheKey.from_json(row[1]))
    except (ValueError, TypeError):
        return f"with digest {row[0]!r}"


@dataclass(frozen=True)
class Health:
    """What ``treduda cache check`` finds in a cache file: the valid rows it still holds, and
    each problem with it, in words (none for a sound file)."""

    entries: int  # search results that can be read and pass their checks
    kernels: int  # stored kernels likewise
    problems: tuple[str, ...]
    foreign: bool = False  # a database of another program: nothing of it is treduda's

    @property
    def sound(self) -> bool:
        return not self.problems

    def advice(self, path: Path) -> str:
        """What to do about the file at ``path`` where it is not sound."""
        return (ELSEWHERE if self.foreign else REPAIR).format(path=path)


def insert_sql(table: str, columns: tuple[str, ...]) -> str:
    return (f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})")


def is_ours(conn: sqlite3.Connection) -> bool:
    """True if the cache table is there; False if the file is empty; else :class:`Unusable`."""
    application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")]
    if application_id == 0 and not tables:
        return False
    if application_id != APPLICATION_ID:
        raise Unusable(f"it is an SQLite database of another program (application_id "
                        f"{application_id}, tables: {', '.join(tables) or 'none'})", ELSEWHERE)
    columns = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})"))
    if columns != COLUMNS:
        raise Unusable(f"its table {TABLE!r} has columns {columns}, expected {COLUMNS}",
                        REPAIR)
    return True


def prepare(conn: sqlite3.Connection) -> None:
    """Check the file is ours, creating the tables in an empty one, and switch it to WAL."""
    conn.execute("BEGIN")  # one snapshot for the checks, or a concurrent creation fools them
    ours = is_ours(conn)
    conn.execute("COMMIT")
    if not ours:
        conn.execute("BEGIN IMMEDIATE")  # re-check under the lock: another process may race
        if not is_ours(conn):
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(CREATE)
        conn.execute("COMMIT")
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (KERNELS,)).fetchone():
        conn.execute(CREATE_KERNELS)  # a cache from before the kernel store had none
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() not in ("wal", "memory"):
        # Persistent; may stay "delete" on filesystems without shared memory, which is
        # slower under contention but still atomic. The switch needs the file to itself and
        # SQLite refuses it at once, without waiting, while another connection uses the
        # file: a later connection switches it then (4 threads writing to a new cache hit
        # this under load).
        with suppress(sqlite3.OperationalError):
            conn.execute("PRAGMA journal_mode = WAL")
    # In WAL mode NORMAL survives a killed process; only power loss may drop the last commits.
    conn.execute("PRAGMA synchronous = NORMAL")


def readable_rows(conn: sqlite3.Connection, table: str, columns: tuple[str, ...]
              ) -> tuple[list[Row], int]:
    """The rows of ``table`` that can still be read, and how many cannot. Each row is read on
    its own, so a damaged page loses only the rows on it; the rowids come from the table and
    from its primary key's index, each scanned up to its first damaged page."""
    rowids: set[int] = set()
    for scan in (f"SELECT rowid FROM {table}",
                 f"SELECT rowid FROM {table} INDEXED BY sqlite_autoindex_{table}_1"):
        with suppress(sqlite3.DatabaseError):  # damaged, or no such table or index
            for (rowid,) in conn.execute(scan):
                rowids.add(rowid)
    rows, unreadable = [], 0
    select = f"SELECT {', '.join(columns)} FROM {table} WHERE rowid = ?"
    for rowid in sorted(rowids):
        try:
            rows.append(conn.execute(select, (rowid,)).fetchone())
        except sqlite3.DatabaseError:
            unreadable += 1
    return [row for row in rows if row is not None], unreadable


def passing(rows: list[Row], check: Callable[[Row], Any]) -> list[Row]:
    """The ``rows`` that pass ``check`` (which raises :class:`Corrupt` for the others)."""
    kept = []
    for row in rows:
        with suppress(Corrupt):
            check(row)
            kept.append(row)
    return kept


def salvage(path: Path) -> tuple[list[Row], list[Row], Health]:
    """The valid rows the cache file at ``path`` still holds (search results, stored kernels)
    and its :class:`Health` (a file not made yet is a sound, empty cache). The file is opened
    read-only: a damaged one is never written."""
    if not path.exists():
        return [], [], Health(0, 0, ())
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True,
                               timeout=SALVAGE_TIMEOUT, isolation_level=None)
    except sqlite3.Error as e:
        return [], [], Health(0, 0, (f"it cannot be opened ({e})",))
    try:
        if not is_ours(conn):
            return [], [], Health(0, 0, ())  # empty: a new cache
        try:
            found = [line for (message,) in conn.execute("PRAGMA quick_check(3)")
                     for line in message.splitlines() if not line.startswith("***")]
        except sqlite3.DatabaseError as e:
            found = [str(e)]
        problems = [f"SQLite finds damage ({'; '.join(found)})"] if found != ["ok"] else []
        rows, unreadable = readable_rows(conn, TABLE, COLUMNS)
        stored, lost = readable_rows(conn, KERNELS, KERNEL_COLUMNS)
    except Unusable as e:
        return [], [], Health(0, 0, (e.reason,), foreign=e.advice == ELSEWHERE)
    except sqlite3.DatabaseError as e:
        return [], [], Health(0, 0, (f"it is not a readable SQLite database ({e})",))
    finally:
        conn.close()
    entries = passing(rows, validate_entry)
    kernels = passing(stored, lambda row: validate_kernel(row, row[2]))
    failing = len(rows) + len(stored) - len(entries) - len(kernels)
    if unreadable + lost:
        problems.append(f"{unreadable + lost} rows cannot be read")
    if failing:
        problems.append(f"{failing} rows fail their checks (modified or damaged)")
    return entries, kernels, Health(len(entries), len(kernels), tuple(problems))


class Memory:
    """A process's stand-in for a cache file it cannot use: an in-memory database holding the
    valid rows the file still held, one connection shared by the threads under a lock."""

    def __init__(self, path: Path, reason: str):
        self.reason = reason
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        prepare(self._conn)
        entries, kernels, _ = salvage(path)
        self._conn.executemany(insert_sql(TABLE, COLUMNS), entries)
        self._conn.executemany(insert_sql(KERNELS, KERNEL_COLUMNS), kernels)

    def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            try:
                return work(self._conn)
            finally:
                if self._conn.in_transaction:  # work that failed midway leaves nothing behind
                    self._conn.rollback()
