"""The tuning cache: search results that persist across runs, keyed by what shaped them.

A search over strategies and parameters is expensive, so its result is stored under a key made of
everything that could change the answer: the normalised expression, the sizes (or a size class),
dtype, layout, GPU and treduda's version. Storage is one SQLite file in WAL mode, so writers from
several processes are atomic and never corrupt it, even if one is killed mid-write. A cache is only
an optimisation: an entry that fails its checks is reported with :class:`CacheWarning`, removed and
treated as a miss, never returned; a file that cannot be used at all is reported once and the
process goes on in memory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from treduda.errors import TredudaError
from treduda.frontend.contraction import Contraction
from treduda.frontend.dtypes import HIGHEST
from treduda.frontend.identity import Identity
from treduda.versions import installed_version

if TYPE_CHECKING:
    from treduda.polyhedral.lower import Program

SCHEMA_VERSION = 1
"""Stored in every row; bump it when the meaning of keys or values changes."""

APPLICATION_ID = int.from_bytes(b"TRDD", "big")
"""SQLite header field marking a file as a treduda cache, so we never write into a foreign one."""

BUSY_TIMEOUT = 10.0
"""Seconds to wait for another process's write lock before giving up on the file."""

SALVAGE_TIMEOUT = 1.0
"""Seconds to wait for a lock while reading what a damaged file still holds."""

_TABLE = "tuning"
_COLUMNS = ("digest", "key", "value", "checksum", "schema", "created")
_CREATE = f"""
CREATE TABLE {_TABLE} (
    digest   TEXT PRIMARY KEY,  -- CacheKey.digest()
    key      TEXT NOT NULL,     -- the key fields as canonical JSON
    value    TEXT NOT NULL,     -- the search result as JSON
    checksum TEXT NOT NULL,     -- sha256 of key and value, to detect tampering or bit rot
    schema   INTEGER NOT NULL,  -- SCHEMA_VERSION of the writer
    created  REAL NOT NULL      -- unix time
)"""

# Generated kernels (the kernel store): each under its Identity and the code generator's
# version, so a kernel from another generator is never found, and a new one replaces it.
_KERNELS = "kernels"
_KERNEL_COLUMNS = ("digest", "identity", "key", "value", "checksum", "schema", "created")
_CREATE_KERNELS = f"""
CREATE TABLE IF NOT EXISTS {_KERNELS} (
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

KERNEL_STORE_MB = 256
"""The kernel store's default size: once its kernels' records take more megabytes, the oldest
kept are removed (and generated again when next asked for). A GEMM's record takes 20-100 kB,
so this keeps thousands. ``$TREDUDA_KERNEL_STORE_MB`` or ``TuningCache(kernel_store_mb=)``
set another; 0 keeps none."""


class CacheWarning(UserWarning):
    """A cache entry was corrupt and was ignored, or the cache file cannot be used and the
    process keeps its cache in memory (see :class:`TuningCache`)."""


def _canonical(data: Any) -> str:
    """One JSON text per value, so equal keys hash equally on every platform and run."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# Fields added after keys were first stored, with the value every earlier key meant: a key
# holding that value stores and hashes without the field, as it did before the field existed.
OPTIONAL_FIELDS = {"precision": HIGHEST, "deterministic": False}


@dataclass(frozen=True)
class CacheKey:
    """Everything a search result depends on; build it with :meth:`make` to normalise it."""

    expression: str
    sizes: tuple[tuple[str, int], ...] | str
    dtype: str
    layout: str
    gpu: str
    version: str
    precision: str = HIGHEST  # dtypes.PRECISIONS: how the sums' products round their inputs
    # No atomic additions (deterministic splits only), so other kernels are allowed.
    deterministic: bool = False

    @classmethod
    def make(cls, expression: str | Contraction, sizes: Mapping[str, int] | str | None,
             dtype: str, layout: str, gpu: str, version: str | None = None,
             precision: str = HIGHEST, deterministic: bool = False) -> CacheKey:
        """A key for ``expression`` (any spelling, or its analysed contraction) with checked
        ``sizes``.

        ``sizes`` is ``None`` for symbolic kernels (size class ``"symbolic"``), another size
        class string, or a mapping that must give every index a positive extent.
        """
        return cls.of_identity(Identity.make(expression, sizes, dtype, layout,
                                             precision=precision,
                                             deterministic=deterministic).on(gpu), version)

    @classmethod
    def of(cls, program: Program, gpu: str) -> CacheKey:
        """The key of a planned program on ``gpu``: no text parsed again."""
        return cls.of_identity(program.identity.on(gpu))

    @classmethod
    def of_identity(cls, identity: Identity, version: str | None = None) -> CacheKey:
        """The key of a search result: its :class:`Identity` (a problem on a GPU) and the
        version of treduda that searched."""
        if identity.gpu is None or identity.strategy is not None:
            raise TredudaError(f"a tuning-cache key is a problem on a GPU, not {identity}")
        return cls(identity.expression, identity.sizes, identity.dtype, identity.layout,
                   identity.gpu, installed_version() if version is None else version,
                   identity.precision, identity.deterministic)

    @property
    def identity(self) -> Identity:
        """The search's identity this key stores it under, without the version."""
        return Identity(self.expression, self.sizes, self.dtype, self.layout, self.precision,
                        self.deterministic, self.gpu)

    def to_json(self) -> str:
        """The fields as canonical JSON: what is stored and what :meth:`digest` hashes
        (:data:`OPTIONAL_FIELDS` only where set, so the entries stored before them still
        match)."""
        fields = dataclasses.asdict(self)
        for name, default in OPTIONAL_FIELDS.items():
            if fields[name] == default:
                del fields[name]
        return _canonical(fields)

    @classmethod
    def from_json(cls, text: str) -> CacheKey:
        """Parse :meth:`to_json` output; ValueError if it is not a well-formed key."""
        data = json.loads(text)
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(data, dict):
            data = {**OPTIONAL_FIELDS, **data}  # to_json leaves out a default one
        if not isinstance(data, dict) or sorted(data) != sorted(names):
            raise ValueError(f"expected an object with exactly the fields {', '.join(names)}")
        sizes = data["sizes"]
        if isinstance(sizes, list) and all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
            and isinstance(pair[1], int) and not isinstance(pair[1], bool) for pair in sizes
        ):
            data["sizes"] = tuple((index, extent) for index, extent in sizes)
        elif not isinstance(sizes, str):
            raise ValueError("sizes is neither a size class nor a list of [index, extent] pairs")
        if not all(isinstance(data[name], str) for name in names
                   if name not in ("sizes", "deterministic")):
            raise ValueError("a field other than sizes and deterministic is not a string")
        if data["deterministic"] is not True and data["deterministic"] is not False:
            raise ValueError("deterministic is not true or false")
        return cls(**data)

    def digest(self) -> str:
        """sha256 hex of :meth:`to_json`: the primary key of the stored entry."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def __str__(self) -> str:
        sizes = (self.sizes if isinstance(self.sizes, str)
                 else ",".join(f"{index}={extent}" for index, extent in self.sizes))
        precision = "" if self.precision == HIGHEST else f" precision {self.precision}"
        return (f"{self.expression} [{sizes}] {self.dtype}{precision} layout {self.layout} on "
                f"{self.gpu!r} {'deterministic ' if self.deterministic else ''}"
                f"(treduda {self.version})")


@dataclass(frozen=True)
class Entry:
    """One valid stored search result."""

    key: CacheKey
    value: dict
    created: float


@dataclass(frozen=True)
class StoredKernel:
    """One kernel of the kernel store, as ``treduda cache list --kernels`` shows it."""

    identity: Identity
    generator: str  # the code generator's version that made it
    bytes: int  # the size of its record
    created: float

    def __str__(self) -> str:
        i = self.identity
        sizes = i.sizes if isinstance(i.sizes, str) else ",".join(f"{k}={v}" for k, v in i.sizes)
        params = " ".join(f"{k}={v}" for k, v in i.params or ())
        return (f"{i.expression} [{sizes}] {i.dtype} layout {i.layout}: {i.strategy} {params} "
                f"({self.bytes / 1e3:.1f} kB, generator {self.generator[:12]})")


def default_kernel_store_mb() -> float:
    """The kernel store's size in megabytes: $TREDUDA_KERNEL_STORE_MB, else
    :data:`KERNEL_STORE_MB`."""
    given = os.environ.get("TREDUDA_KERNEL_STORE_MB")
    if not given:
        return KERNEL_STORE_MB
    try:
        mb = float(given)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise TredudaError(f"$TREDUDA_KERNEL_STORE_MB is {given!r}; give the kernel store's "
                           "size as a number of megabytes, 0 or more")
    return mb


def default_path() -> Path:
    """Where the cache lives: $TREDUDA_CACHE, else the XDG cache directory (~/.cache)."""
    explicit = os.environ.get("TREDUDA_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative paths are invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "treduda" / "tuning.sqlite3"


def _checksum(key_json: str, value_json: str) -> str:
    return hashlib.sha256(f"{key_json}\n{value_json}".encode()).hexdigest()


# What to do about a cache file that cannot be used, by cause ({path}: the file).
_REPAIR = ("`treduda cache repair --path {path}` rebuilds it from what it still holds (or "
           "delete it: treduda starts a new one)")
_ELSEWHERE = "set $TREDUDA_CACHE to another file"
_WRITABLE = ("check that it and its folder can be written, that its disk has room and that no "
             "other process keeps it locked, or set $TREDUDA_CACHE to another file")


class _Unusable(Exception):
    """The cache file cannot be used (internal): the reason, and what to do (a template of
    ``path``)."""

    def __init__(self, reason: str, advice: str):
        super().__init__(reason)
        self.reason, self.advice = reason, advice


class _Corrupt(Exception):
    """One row failed a check (internal; carries the reason)."""


def _validate(row: Row, expected: CacheKey | None = None) -> Entry:
    """The entry stored in ``row``, or :class:`_Corrupt` saying which check failed."""
    digest, key_json, value_json, checksum, schema, created = row
    _check_row(key_json, value_json, checksum, schema)
    try:
        key = CacheKey.from_json(key_json)
    except ValueError as e:
        raise _Corrupt(f"its stored key is not a valid key ({e})") from None
    if expected is not None and key.to_json() != expected.to_json():
        raise _Corrupt(f"its stored key fields are for a different key: {key}")
    if key.digest() != digest:
        raise _Corrupt("its stored key does not hash to the digest it is stored under")
    value = _object(value_json)
    if isinstance(created, bool) or not isinstance(created, (int, float)):
        raise _Corrupt(f"its creation time {created!r} is not a number")
    return Entry(key, value, float(created))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _kernel_key(identity: Identity, generator: str) -> str:
    """The kernel store's key: a generated kernel's identity and the generator's version."""
    if identity.strategy is None:
        raise TredudaError(f"the kernel store keeps generated kernels, not {identity}")
    return _canonical({"identity": identity.fields(), "generator": generator})


def _validate_kernel(row: Row, key_json: str) -> dict:
    """The record stored in the kernel store's ``row`` under ``key_json``, or :class:`_Corrupt`
    saying which check failed."""
    digest, _, stored_key, value_json, checksum, schema, _ = row
    _check_row(stored_key, value_json, checksum, schema)
    if stored_key != key_json or _digest(stored_key) != digest:
        raise _Corrupt("its stored key is not the key it is stored under")
    return _object(value_json)


def _check_row(key_json: Any, value_json: Any, checksum: Any, schema: Any) -> None:
    """:class:`_Corrupt` unless a row is of this schema, text, and matches its checksum."""
    if schema != SCHEMA_VERSION:
        raise _Corrupt(f"it has schema version {schema!r}, this treduda reads {SCHEMA_VERSION}")
    if not all(isinstance(text, str) for text in (key_json, value_json, checksum)):
        raise _Corrupt("its key, value or checksum is not text")
    if _checksum(key_json, value_json) != checksum:
        raise _Corrupt("its checksum does not match its key and value (modified or damaged)")


def _object(value_json: str) -> dict:
    """A row's value: a JSON object, or :class:`_Corrupt`."""
    try:
        value = json.loads(value_json)
    except ValueError as e:
        raise _Corrupt(f"its value is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise _Corrupt(f"its value is a JSON {type(value).__name__}, not an object")
    return value


def _describe(row: Row) -> str:
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
        return (_ELSEWHERE if self.foreign else _REPAIR).format(path=path)


def _insert(table: str, columns: tuple[str, ...]) -> str:
    return (f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' * len(columns))})")


def _is_ours(conn: sqlite3.Connection) -> bool:
    """True if the cache table is there; False if the file is empty; else :class:`_Unusable`."""
    application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    tables = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")]
    if application_id == 0 and not tables:
        return False
    if application_id != APPLICATION_ID:
        raise _Unusable(f"it is an SQLite database of another program (application_id "
                        f"{application_id}, tables: {', '.join(tables) or 'none'})", _ELSEWHERE)
    columns = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})"))
    if columns != _COLUMNS:
        raise _Unusable(f"its table {_TABLE!r} has columns {columns}, expected {_COLUMNS}",
                        _REPAIR)
    return True


def _prepare(conn: sqlite3.Connection) -> None:
    """Check the file is ours, creating the tables in an empty one, and switch it to WAL."""
    conn.execute("BEGIN")  # one snapshot for the checks, or a concurrent creation fools them
    ours = _is_ours(conn)
    conn.execute("COMMIT")
    if not ours:
        conn.execute("BEGIN IMMEDIATE")  # re-check under the lock: another process may race
        if not _is_ours(conn):
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(_CREATE)
        conn.execute("COMMIT")
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (_KERNELS,)).fetchone():
        conn.execute(_CREATE_KERNELS)  # a cache from before the kernel store had none
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


def _readable(conn: sqlite3.Connection, table: str, columns: tuple[str, ...]
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


def _passing(rows: list[Row], check: Callable[[Row], Any]) -> list[Row]:
    """The ``rows`` that pass ``check`` (which raises :class:`_Corrupt` for the others)."""
    kept = []
    for row in rows:
        with suppress(_Corrupt):
            check(row)
            kept.append(row)
    return kept


def _salvage(path: Path) -> tuple[list[Row], list[Row], Health]:
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
        if not _is_ours(conn):
            return [], [], Health(0, 0, ())  # empty: a new cache
        try:
            found = [line for (message,) in conn.execute("PRAGMA quick_check(3)")
                     for line in message.splitlines() if not line.startswith("***")]
        except sqlite3.DatabaseError as e:
            found = [str(e)]
        problems = [f"SQLite finds damage ({'; '.join(found)})"] if found != ["ok"] else []
        rows, unreadable = _readable(conn, _TABLE, _COLUMNS)
        stored, lost = _readable(conn, _KERNELS, _KERNEL_COLUMNS)
    except _Unusable as e:
        return [], [], Health(0, 0, (e.reason,), foreign=e.advice == _ELSEWHERE)
    except sqlite3.DatabaseError as e:
        return [], [], Health(0, 0, (f"it is not a readable SQLite database ({e})",))
    finally:
        conn.close()
    entries = _passing(rows, _validate)
    kernels = _passing(stored, lambda row: _validate_kernel(row, row[2]))
    failing = len(rows) + len(stored) - len(entries) - len(kernels)
    if unreadable + lost:
        problems.append(f"{unreadable + lost} rows cannot be read")
    if failing:
        problems.append(f"{failing} rows fail their checks (modified or damaged)")
    return entries, kernels, Health(len(entries), len(kernels), tuple(problems))


class _Memory:
    """A process's stand-in for a cache file it cannot use: an in-memory database holding the
    valid rows the file still held, one connection shared by the threads under a lock."""

    def __init__(self, path: Path, reason: str):
        self.reason = reason
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        _prepare(self._conn)
        entries, kernels, _ = _salvage(path)
        self._conn.executemany(_insert(_TABLE, _COLUMNS), entries)
        self._conn.executemany(_insert(_KERNELS, _KERNEL_COLUMNS), kernels)

    def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            try:
                return work(self._conn)
            finally:
                if self._conn.in_transaction:  # work that failed midway leaves nothing behind
                    self._conn.rollback()


# The in-memory caches of the files this process cannot use, by absolute path: every
# TuningCache of the file finds it (compile() makes one per call), and it is reported once.
_FALLBACKS: dict[str, _Memory] = {}
_FALLBACKS_LOCK = threading.Lock()


class TuningCache:
    """Search results in one SQLite file, safe for concurrent processes and threads.

    Every operation opens its own short-lived connection: connections must not cross threads or
    forks, and short transactions keep other writers waiting as briefly as possible. The cache
    only saves time, so a file that cannot be used (damaged, another program's or schema's,
    read-only, on a full disk, locked too long) never fails a call: the first operation that
    meets it reports it with one :class:`CacheWarning` saying what to do, and the process goes
    on with an in-memory cache holding the valid rows the file still held (:attr:`degraded`).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None,
                 kernel_store_mb: float | None = None):
        self.path = Path(default_path() if path is None else path)
        self._where = os.path.abspath(self.path)
        # The kernel store's size (:data:`KERNEL_STORE_MB`): the oldest kernels go beyond it.
        self.kernel_store_bytes = int((default_kernel_store_mb() if kernel_store_mb is None
                                       else kernel_store_mb) * 1e6)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._degrade(_Unusable(f"cannot create its folder: {e.strerror or e}", _ELSEWHERE))

    def __repr__(self) -> str:
        return f"TuningCache({str(self.path)!r})"

    @property
    def degraded(self) -> str | None:
        """Why this process keeps the cache in memory instead of in its file; None while the
        file is used."""
        memory = _FALLBACKS.get(self._where)
        return None if memory is None else memory.reason

    def get(self, key: CacheKey) -> dict | None:
        """The stored value for ``key``; None on a miss or if the entry fails its checks."""
        row = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM {_TABLE} WHERE digest = ?",
            (key.digest(),)).fetchone())
        if row is None:
            return None
        try:
            return _validate(row, key).value
        except _Corrupt as e:
            self._discard([(row, f"{key}: {e}")])
            return None

    def put(self, key: CacheKey, value: dict) -> None:
        """Store ``value`` under ``key``, replacing any previous entry, in one transaction."""
        if not isinstance(value, dict):
            raise TredudaError(f"a tuning-cache value must be a dict, got {type(value).__name__}")
        try:
            value_json = _canonical(value)
        except (TypeError, ValueError) as e:
            raise TredudaError(
                f"cannot cache the result for {key}: it is not JSON-serialisable ({e}); use only "
                "dicts with string keys, lists, strings, numbers, booleans and None"
            ) from None
        key_json = key.to_json()
        row = (key.digest(), key_json, value_json, _checksum(key_json, value_json),
               SCHEMA_VERSION, time.time())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(_insert(_TABLE, _COLUMNS), row)
            conn.execute("COMMIT")

        self._run(write)

    def entries(self) -> list[Entry]:
        """Every valid entry, oldest first; corrupt ones are reported, removed and skipped."""
        rows = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM {_TABLE} ORDER BY created, digest").fetchall())
        valid, corrupt = [], []
        for row in rows:
            try:
                valid.append(_validate(row))
            except _Corrupt as e:
                corrupt.append((row, f"{_describe(row)}: {e}"))
        self._discard(corrupt)
        return valid

    def similar(self, key: CacheKey, count: int) -> list[dict]:
        """The values of up to ``count`` entries of the same problem at other sizes (the same
        expression, dtype, layout, precision and GPU; any treduda version), the nearest sizes
        first (the least sum of |log| of the extents' ratios): where a new search starts."""
        if isinstance(key.sizes, str):
            return []
        wanted = dict(key.sizes)
        same = dataclasses.replace(key, sizes=(), version="")
        near = []
        for entry in self.entries():
            other = entry.key
            if (isinstance(other.sizes, str) or dict(other.sizes) == wanted
                    or {i for i, _ in other.sizes} != set(wanted)
                    or dataclasses.replace(other, sizes=(), version="") != same):
                continue
            distance = sum(abs(math.log(extent / wanted[i])) for i, extent in other.sizes)
            near.append((distance, entry.created, entry.value))
        near.sort(key=lambda found: found[:2])
        return [value for _, _, value in near[:count]]

    def get_kernel(self, identity: Identity, generator: str) -> dict | None:
        """The record of the kernel ``identity`` names, as ``generator`` made it; None on a
        miss, or where the row fails its checks (reported and removed): the kernel is
        generated again."""
        key_json = _kernel_key(identity, generator)
        row = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(_KERNEL_COLUMNS)} FROM {_KERNELS} WHERE digest = ?",
            (_digest(key_json),)).fetchone())
        if row is None:
            return None
        try:
            return _validate_kernel(row, key_json)
        except _Corrupt as e:
            self._discard([(row, f"kernel {identity.to_json()}: {e}")], _KERNELS,
                          _KERNEL_COLUMNS)
            return None

    def has_kernel(self, identity: Identity, generator: str) -> bool:
        """Whether the store holds the kernel ``identity`` names, as ``generator`` made it
        (its row is checked when read)."""
        digest = _digest(_kernel_key(identity, generator))
        return self._run(lambda conn: conn.execute(
            f"SELECT 1 FROM {_KERNELS} WHERE digest = ?", (digest,)).fetchone()) is not None

    def put_kernel(self, identity: Identity, generator: str, record: dict) -> None:
        """Keep ``record`` as the kernel ``identity`` names, made by ``generator``, in place of
        any made by another; a record that is not JSON is reported, not raised: the store
        only saves time."""
        try:
            key_json, value_json = _kernel_key(identity, generator), _canonical(record)
        except (TypeError, ValueError) as e:  # e.g. a parameter that is not JSON
            warnings.warn(f"cannot keep the kernel {identity} ({e})", CacheWarning,
                          stacklevel=2)
            return
        row = (_digest(key_json), identity.digest(), key_json, value_json,
               _checksum(key_json, value_json), SCHEMA_VERSION, time.time())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"DELETE FROM {_KERNELS} WHERE identity = ?", (row[1],))
            conn.execute(_insert(_KERNELS, _KERNEL_COLUMNS), row)
            # The oldest kernels beyond the store's size go, from the newest kept down.
            conn.execute(f"""DELETE FROM {_KERNELS} WHERE digest IN (
                SELECT digest FROM (SELECT digest, SUM(LENGTH(value)) OVER (
                    ORDER BY created DESC, digest) AS total FROM {_KERNELS})
                WHERE total > ?)""", (self.kernel_store_bytes,))
            conn.execute("COMMIT")

        self._run(write)

    def stored_kernels(self) -> list[StoredKernel]:
        """The kernel store's kernels, the newest first (rows whose key cannot be read are
        left out: reading the kernel checks and removes them)."""
        rows = self._run(lambda conn: conn.execute(
            f"SELECT key, LENGTH(value), created FROM {_KERNELS} ORDER BY created DESC"
        ).fetchall())
        kernels = []
        for key_json, size, created in rows:
            try:
                key = json.loads(key_json)
                fields = dict(key["identity"])
                fields["sizes"] = (fields["sizes"] if isinstance(fields["sizes"], str)
                                   else tuple(tuple(pair) for pair in fields["sizes"]))
                fields["params"] = tuple(tuple(pair) for pair in fields.get("params", ()))
                kernels.append(StoredKernel(Identity(**fields), str(key["generator"]),
                                            int(size), float(created)))
            except (ValueError, TypeError, KeyError):
                continue
        return kernels

    def kernels(self) -> int:
        """Kernels in the store."""
        return self._run(lambda conn: conn.execute(
            f"SELECT COUNT(*) FROM {_KERNELS}").fetchone()[0])

    def clear(self) -> int:
        """Remove every entry and every stored kernel; returns how many entries were
        removed."""
        def empty(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"DELETE FROM {_KERNELS}")
            removed = conn.execute(f"DELETE FROM {_TABLE}").rowcount
            conn.execute("COMMIT")
            return removed

        return self._run(empty)

    def __len__(self) -> int:
        """Stored rows, counting corrupt ones that get() or entries() has not yet detected."""
        return self._run(lambda conn: conn.execute(
            f"SELECT COUNT(*) FROM {_TABLE}").fetchone()[0])

    def check(self) -> Health:
        """What the file still holds and what is wrong with it (``treduda cache check``);
        read-only."""
        return _salvage(self.path)[2]

    def repair(self) -> Health:
        """Rebuild the file from the valid rows it still holds (``treduda cache repair``),
        keeping the damaged one beside it as ``<name>.damaged``; returns what was found (a
        sound file is left as it is). A database of another program is left alone
        (TredudaError). Run it while no other process uses the cache."""
        entries, kernels, health = _salvage(self.path)
        if health.sound:
            return health
        if health.foreign:
            raise TredudaError(f"{self.path} is not a treduda tuning cache "
                               f"({health.problems[0]}), so repair leaves it alone; "
                               f"{_ELSEWHERE}")
        building = self.path.with_name(f"{self.path.name}.repairing")
        building.unlink(missing_ok=True)
        conn = sqlite3.connect(building, isolation_level=None)
        try:
            _prepare(conn)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_insert(_TABLE, _COLUMNS), entries)
            conn.executemany(_insert(_KERNELS, _KERNEL_COLUMNS), kernels)
            conn.execute("COMMIT")
        finally:
            conn.close()  # the last connection: its log is merged into the file and removed
        for suffix in ("", "-wal", "-shm"):  # SQLite would apply the old log to the new file
            with suppress(FileNotFoundError):
                os.replace(f"{self.path}{suffix}", f"{self.path}.damaged{suffix}")
        os.replace(building, self.path)
        with _FALLBACKS_LOCK:
            _FALLBACKS.pop(self._where, None)
        return health

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` done on the file, or on the process's in-memory cache once the file
        cannot be used (:meth:`_degrade`)."""
        memory = _FALLBACKS.get(self._where)
        if memory is None:
            try:
                with self._connect() as conn:
                    return work(conn)
            except _Unusable as error:
                memory = self._degrade(error)
        return memory.run(work)

    def _degrade(self, error: _Unusable) -> _Memory:
        """The process's in-memory cache for this file: made on the first failure, from the
        valid rows the file still holds, and reported then with what to do; later calls use
        it silently."""
        with _FALLBACKS_LOCK:
            memory = _FALLBACKS.get(self._where)
            if memory is None:
                memory = _FALLBACKS[self._where] = _Memory(self.path, error.reason)
                warnings.warn(f"cannot use the tuning cache {self.path} ({error.reason}); "
                              f"{error.advice.format(path=self.path)}; until then this process "
                              "keeps its tuning in memory", CacheWarning, stacklevel=4)
        return memory

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A checked connection to the file in autocommit mode; closing it rolls back anything
        uncommitted. Raises :class:`_Unusable` where the file cannot be used."""
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as e:
            raise _Unusable(str(e), _WRITABLE) from None
        try:
            _prepare(conn)
            yield conn
        except sqlite3.OperationalError as e:  # read-only, disk full, locked too long, a folder
            raise _Unusable(str(e), _WRITABLE) from None
        except sqlite3.DatabaseError as e:  # not a database, or a damaged one
            raise _Unusable(f"it is damaged: {e}", _REPAIR) from None
        finally:
            conn.close()

    def _discard(self, corrupt: list[tuple[Row, str]], table: str = _TABLE,
                 columns: tuple[str, ...] = _COLUMNS) -> None:
        """Report each corrupt row, then delete it unless another process has replaced it."""
        for _, reason in corrupt:
            warnings.warn(f"ignoring tuning-cache entry {reason}; removing it from {self.path}",
                          CacheWarning, stacklevel=3)
        if not corrupt:
            return

        def delete(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            for row, _ in corrupt:
                conn.execute(f"DELETE FROM {table} WHERE "
                             + " AND ".join(f"{column} IS ?" for column in columns), row)
            conn.execute("COMMIT")

        self._run(delete)
