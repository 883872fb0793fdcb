"""The tuning cache: search results that persist across runs, keyed by what shaped them.

A search over strategies and parameters is expensive, so its result is stored under a key made of
everything that could change the answer: the normalised expression, the sizes (or a size class),
dtype, layout, GPU and treduda's version. Storage is one SQLite file in WAL mode, so writers from
several processes are atomic and never corrupt it, even if one is killed mid-write. A cache is only
an optimisation: an entry that fails its checks is reported with :class:`CacheWarning`, removed and
treated as a miss, never returned.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import math
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treduda.errors import TredudaError
from treduda.frontend.contraction import Contraction
from treduda.frontend.dtypes import HIGHEST
from treduda.frontend.identity import Identity

if TYPE_CHECKING:
    from treduda.polyhedral.lower import Program

SCHEMA_VERSION = 1
"""Stored in every row; bump it when the meaning of keys or values changes."""

APPLICATION_ID = int.from_bytes(b"TRDD", "big")
"""SQLite header field marking a file as a treduda cache, so we never write into a foreign one."""

BUSY_TIMEOUT = 10.0
"""Seconds to wait for another process's write lock before giving up."""

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

KERNEL_STORE_MB = 256
"""The kernel store's default size: once its kernels' records take more megabytes, the oldest
kept are removed (and generated again when next asked for). A GEMM's record takes 20-100 kB,
so this keeps thousands. ``$TREDUDA_KERNEL_STORE_MB`` or ``TuningCache(kernel_store_mb=)``
set another; 0 keeps none."""


class CacheWarning(UserWarning):
    """A cache entry (or the whole cache file) was corrupt or foreign and was ignored."""


def _canonical(data: Any) -> str:
    """One JSON text per value, so equal keys hash equally on every platform and run."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@functools.cache
def installed_version() -> str:
    """treduda's version: kernels from another version may differ, so it is part of every key."""
    try:
        return importlib.metadata.version("treduda")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


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


class _NotACache(Exception):
    """The file exists but is not a usable treduda cache (internal; carries the reason)."""


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


class TuningCache:
    """Search results in one SQLite file, safe for concurrent processes and threads.

    Every operation opens its own short-lived connection: connections must not cross threads or
    forks, and short transactions keep other writers waiting as briefly as possible.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None,
                 kernel_store_mb: float | None = None):
        self.path = Path(default_path() if path is None else path)
        # The kernel store's size (:data:`KERNEL_STORE_MB`): the oldest kernels go beyond it.
        self.kernel_store_bytes = int((default_kernel_store_mb() if kernel_store_mb is None
                                       else kernel_store_mb) * 1e6)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TredudaError(f"cannot create the directory of the tuning cache {self.path} "
                               f"({e}); set $TREDUDA_CACHE to a writable file path") from None

    def __repr__(self) -> str:
        return f"TuningCache({str(self.path)!r})"

    def get(self, key: CacheKey) -> dict | None:
        """The stored value for ``key``; None on a miss or if the entry fails its checks."""
        try:
            with self._connect() as conn:
                row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM {_TABLE} WHERE digest = ?",
                                   (key.digest(),)).fetchone()
        except _NotACache as e:
            self._warn_not_a_cache(e)
            return None
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
        try:
            with self._connect() as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(f"INSERT OR REPLACE INTO {_TABLE} ({', '.join(_COLUMNS)}) "
                             f"VALUES ({', '.join('?' * len(_COLUMNS))})", row)
                conn.execute("COMMIT")
        except _NotACache as e:
            raise TredudaError(self._not_a_cache_message(e)) from None

    def entries(self) -> list[Entry]:
        """Every valid entry, oldest first; corrupt ones are reported, removed and skipped."""
        try:
            with self._connect() as conn:
                rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM {_TABLE} "
                                    "ORDER BY created, digest").fetchall()
        except _NotACache as e:
            self._warn_not_a_cache(e)
            return []
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
        miss, or where the row fails its checks (reported and removed) or the store cannot
        be read (reported): the kernel is generated again."""
        key_json = _kernel_key(identity, generator)
        try:
            with self._connect() as conn:
                row = conn.execute(f"SELECT {', '.join(_KERNEL_COLUMNS)} FROM {_KERNELS} "
                                   "WHERE digest = ?", (_digest(key_json),)).fetchone()
        except (_NotACache, TredudaError) as e:
            warnings.warn(f"cannot read the kernel store in {self.path} ({e}); generating the "
                          "kernel", CacheWarning, stacklevel=2)
            return None
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
        try:
            with self._connect() as conn:
                return conn.execute(f"SELECT 1 FROM {_KERNELS} WHERE digest = ?", (
                    _digest(_kernel_key(identity, generator)),)).fetchone() is not None
        except (_NotACache, TredudaError):
            return False

    def put_kernel(self, identity: Identity, generator: str, record: dict) -> None:
        """Keep ``record`` as the kernel ``identity`` names, made by ``generator``, in place of
        any made by another; a store that cannot be written is reported, not raised: it only
        saves time."""
        try:
            key_json, value_json = _kernel_key(identity, generator), _canonical(record)
        except (TypeError, ValueError) as e:  # e.g. a parameter that is not JSON
            warnings.warn(f"cannot keep the kernel {identity} ({e})", CacheWarning,
                          stacklevel=2)
            return
        row = (_digest(key_json), identity.digest(), key_json, value_json,
               _checksum(key_json, value_json), SCHEMA_VERSION, time.time())
        try:
            with self._connect() as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(f"DELETE FROM {_KERNELS} WHERE identity = ?", (row[1],))
                conn.execute(f"INSERT OR REPLACE INTO {_KERNELS} ({', '.join(_KERNEL_COLUMNS)}) "
                             f"VALUES ({', '.join('?' * len(_KERNEL_COLUMNS))})", row)
                # The oldest kernels beyond the store's size go, from the newest kept down.
                conn.execute(f"""DELETE FROM {_KERNELS} WHERE digest IN (
                    SELECT digest FROM (SELECT digest, SUM(LENGTH(value)) OVER (
                        ORDER BY created DESC, digest) AS total FROM {_KERNELS})
                    WHERE total > ?)""", (self.kernel_store_bytes,))
                conn.execute("COMMIT")
        except (_NotACache, TredudaError) as e:
            warnings.warn(f"cannot keep the kernel in {self.path} ({e})", CacheWarning,
                          stacklevel=2)

    def stored_kernels(self) -> list[StoredKernel]:
        """The kernel store's kernels, the newest first (rows whose key cannot be read are
        left out: reading the kernel checks and removes them)."""
        try:
            with self._connect() as conn:
                rows = conn.execute(f"SELECT key, LENGTH(value), created FROM {_KERNELS} "
                                    "ORDER BY created DESC").fetchall()
        except (_NotACache, TredudaError):
            return []
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
        try:
            with self._connect() as conn:
                return conn.execute(f"SELECT COUNT(*) FROM {_KERNELS}").fetchone()[0]
        except (_NotACache, TredudaError):
            return 0

    def clear(self) -> int:
        """Remove every entry and every stored kernel; returns how many entries were
        removed."""
        try:
            with self._connect() as conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(f"DELETE FROM {_KERNELS}")
                removed = conn.execute(f"DELETE FROM {_TABLE}").rowcount
                conn.execute("COMMIT")
        except _NotACache as e:
            raise TredudaError(self._not_a_cache_message(e)) from None
        return removed

    def __len__(self) -> int:
        """Stored rows, counting corrupt ones that get() or entries() has not yet detected."""
        try:
            with self._connect() as conn:
                return conn.execute(f"SELECT COUNT(*) FROM {_TABLE}").fetchone()[0]
        except _NotACache as e:
            self._warn_not_a_cache(e)
            return 0

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A checked connection in autocommit mode; closing it rolls back anything uncommitted.

        Raises :class:`_NotACache` for a foreign or damaged file and :class:`TredudaError` when
        SQLite cannot use the file at all (permissions, a directory, a lock held too long).
        """
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as e:
            raise TredudaError(f"cannot open the tuning cache {self.path}: {e}") from None
        try:
            self._prepare(conn)
            yield conn
        except sqlite3.OperationalError as e:
            raise TredudaError(f"cannot use the tuning cache {self.path}: {e}; check that the "
                               "file is writable, or point $TREDUDA_CACHE elsewhere") from None
        except sqlite3.DatabaseError as e:  # file is not a database, or it is malformed
            raise _NotACache(str(e)) from None
        finally:
            conn.close()

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Check the file is ours, creating the table in an empty one, and switch it to WAL."""
        conn.execute("BEGIN")  # one snapshot for the checks, or a concurrent creation fools them
        ours = self._is_ours(conn)
        conn.execute("COMMIT")
        if not ours:
            conn.execute("BEGIN IMMEDIATE")  # re-check under the lock: another process may race
            if not self._is_ours(conn):
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(_CREATE)
            conn.execute("COMMIT")
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (_KERNELS,)).fetchone():
            with suppress(sqlite3.OperationalError):  # a read-only cache: no kernel store
                conn.execute(_CREATE_KERNELS)  # a cache from before the kernel store had none
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            # Persistent; may stay "delete" on filesystems without shared memory, which is
            # slower under contention but still atomic. The switch needs the file to itself and
            # SQLite refuses it at once, without waiting, while another connection uses the
            # file: a later connection switches it then (4 threads writing to a new cache hit
            # this under load).
            with suppress(sqlite3.OperationalError):
                conn.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL survives a killed process; only power loss may drop the last commits.
        conn.execute("PRAGMA synchronous = NORMAL")

    def _is_ours(self, conn: sqlite3.Connection) -> bool:
        """True if the cache table is there; False if the file is empty; else _NotACache."""
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        if application_id == 0 and not tables:
            return False
        if application_id != APPLICATION_ID:
            raise _NotACache(f"it is an SQLite database of another program (application_id "
                             f"{application_id}, tables: {', '.join(tables) or 'none'})")
        columns = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})"))
        if columns != _COLUMNS:
            raise _NotACache(f"its table {_TABLE!r} has columns {columns}, expected {_COLUMNS}")
        return True

    def _discard(self, corrupt: list[tuple[Row, str]], table: str = _TABLE,
                 columns: tuple[str, ...] = _COLUMNS) -> None:
        """Report each corrupt row, then delete it unless another process has replaced it."""
        for _, reason in corrupt:
            warnings.warn(f"ignoring tuning-cache entry {reason}; removing it from {self.path}",
                          CacheWarning, stacklevel=3)
        if not corrupt:
            return
        try:
            with self._connect() as conn:
                conn.execute("BEGIN IMMEDIATE")
                for row, _ in corrupt:
                    conn.execute(f"DELETE FROM {table} WHERE "
                                 + " AND ".join(f"{column} IS ?" for column in columns), row)
                conn.execute("COMMIT")
        except (TredudaError, _NotACache):
            pass  # e.g. a read-only cache: the entry stays ignored, and is reported again

    def _not_a_cache_message(self, error: _NotACache) -> str:
        return (f"{self.path} is not a treduda tuning cache ({error}); delete the file (treduda "
                "recreates it) or set $TREDUDA_CACHE to another path")

    def _warn_not_a_cache(self, error: _NotACache) -> None:
        warnings.warn(f"{self._not_a_cache_message(error)}; treating the cache as empty",
                      CacheWarning, stacklevel=3)
