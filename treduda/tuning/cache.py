"""The tuning cache: search results that persist across runs, keyed by what shaped them.

A search over strategies and parameters is expensive, so its result is stored under a key made of
everything that could change the answer: the normalised expression, the sizes (or a size class),
dtype, layout, GPU and treduda's version. Storage is one SQLite file in WAL mode, so writers from
several processes are atomic and never corrupt it, even if one is killed mid-write. A cache is only
an optimisation: an entry that fails its checks is reported with :class:`CacheWarning`, removed and
treated as a miss, never returned; a file that cannot be used at all is reported once and the
process goes on in memory.

The keys are :mod:`~treduda.tuning.cache_key`'s, the file's tables, row checks and salvage
:mod:`~treduda.tuning.cache_file`'s; this module is the interface the rest of treduda uses.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from treduda.errors import TredudaError
from treduda.frontend.identity import Identity

from .cache_file import (
    COLUMNS,
    ELSEWHERE,
    KERNEL_COLUMNS,
    KERNELS,
    REPAIR,
    SCHEMA_VERSION,
    TABLE,
    WRITABLE,
    Corrupt,
    Health,
    Memory,
    Row,
    Unusable,
    describe_row,
    insert_sql,
    kernel_key,
    prepare,
    row_checksum,
    salvage,
    sha256_hex,
    validate_entry,
    validate_kernel,
)
from .cache_key import CacheKey, Entry, canonical

__all__ = ["CacheKey", "CacheWarning", "Entry", "Health", "StoredKernel", "TuningCache",
           "default_path"]

T = TypeVar("T")

BUSY_TIMEOUT = 10.0
"""Seconds to wait for another process's write lock before giving up on the file."""

KERNEL_STORE_MB = 256
"""The kernel store's default size: once its kernels' records take more megabytes, the oldest
kept are removed (and generated again when next asked for). A GEMM's record takes 20-100 kB,
so this keeps thousands. ``$TREDUDA_KERNEL_STORE_MB`` or ``TuningCache(kernel_store_mb=)``
set another; 0 keeps none."""


class CacheWarning(UserWarning):
    """A cache entry was corrupt and was ignored, or the cache file cannot be used and the
    process keeps its cache in memory (see :class:`TuningCache`)."""


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


# The in-memory caches of the files this process cannot use, by absolute path: every
# TuningCache of the file finds it (compile() makes one per call), and it is reported once.
_FALLBACKS: dict[str, Memory] = {}
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
            self._degrade(Unusable(f"cannot create its folder: {e.strerror or e}", ELSEWHERE))

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
            f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE digest = ?",
            (key.digest(),)).fetchone())
        if row is None:
            return None
        try:
            return validate_entry(row, key).value
        except Corrupt as e:
            self._discard([(row, f"{key}: {e}")])
            return None

    def put(self, key: CacheKey, value: dict) -> None:
        """Store ``value`` under ``key``, replacing any previous entry, in one transaction."""
        if not isinstance(value, dict):
            raise TredudaError(f"a tuning-cache value must be a dict, got {type(value).__name__}")
        try:
            value_json = canonical(value)
        except (TypeError, ValueError) as e:
            raise TredudaError(
                f"cannot cache the result for {key}: it is not JSON-serialisable ({e}); use only "
                "dicts with string keys, lists, strings, numbers, booleans and None"
            ) from None
        key_json = key.to_json()
        row = (key.digest(), key_json, value_json, row_checksum(key_json, value_json),
               SCHEMA_VERSION, time.time())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(insert_sql(TABLE, COLUMNS), row)
            conn.execute("COMMIT")

        self._run(write)

    def entries(self) -> list[Entry]:
        """Every valid entry, oldest first; corrupt ones are reported, removed and skipped."""
        rows = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(COLUMNS)} FROM {TABLE} ORDER BY created, digest").fetchall())
        valid, corrupt = [], []
        for row in rows:
            try:
                valid.append(validate_entry(row))
            except Corrupt as e:
                corrupt.append((row, f"{describe_row(row)}: {e}"))
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
        key_json = kernel_key(identity, generator)
        row = self._run(lambda conn: conn.execute(
            f"SELECT {', '.join(KERNEL_COLUMNS)} FROM {KERNELS} WHERE digest = ?",
            (sha256_hex(key_json),)).fetchone())
        if row is None:
            return None
        try:
            return validate_kernel(row, key_json)
        except Corrupt as e:
            self._discard([(row, f"kernel {identity.to_json()}: {e}")], KERNELS,
                          KERNEL_COLUMNS)
            return None

    def has_kernel(self, identity: Identity, generator: str) -> bool:
        """Whether the store holds the kernel ``identity`` names, as ``generator`` made it
        (its row is checked when read)."""
        digest = sha256_hex(kernel_key(identity, generator))
        return self._run(lambda conn: conn.execute(
            f"SELECT 1 FROM {KERNELS} WHERE digest = ?", (digest,)).fetchone()) is not None

    def put_kernel(self, identity: Identity, generator: str, record: dict) -> None:
        """Keep ``record`` as the kernel ``identity`` names, made by ``generator``, in place of
        any made by another; a record that is not JSON is reported, not raised: the store
        only saves time."""
        try:
            key_json, value_json = kernel_key(identity, generator), canonical(record)
        except (TypeError, ValueError) as e:  # e.g. a parameter that is not JSON
            warnings.warn(f"cannot keep the kernel {identity} ({e})", CacheWarning,
                          stacklevel=2)
            return
        row = (sha256_hex(key_json), identity.digest(), key_json, value_json,
               row_checksum(key_json, value_json), SCHEMA_VERSION, time.time())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"DELETE FROM {KERNELS} WHERE identity = ?", (row[1],))
            conn.execute(insert_sql(KERNELS, KERNEL_COLUMNS), row)
            # The oldest kernels beyond the store's size go, from the newest kept down.
            conn.execute(f"""DELETE FROM {KERNELS} WHERE digest IN (
                SELECT digest FROM (SELECT digest, SUM(LENGTH(value)) OVER (
                    ORDER BY created DESC, digest) AS total FROM {KERNELS})
                WHERE total > ?)""", (self.kernel_store_bytes,))
            conn.execute("COMMIT")

        self._run(write)

    def stored_kernels(self) -> list[StoredKernel]:
        """The kernel store's kernels, the newest first (rows whose key cannot be read are
        left out: reading the kernel checks and removes them)."""
        rows = self._run(lambda conn: conn.execute(
            f"SELECT key, LENGTH(value), created FROM {KERNELS} ORDER BY created DESC"
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
            f"SELECT COUNT(*) FROM {KERNELS}").fetchone()[0])

    def clear(self) -> int:
        """Remove every entry and every stored kernel; returns how many entries were
        removed."""
        def empty(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"DELETE FROM {KERNELS}")
            removed = conn.execute(f"DELETE FROM {TABLE}").rowcount
            conn.execute("COMMIT")
            return removed

        return self._run(empty)

    def __len__(self) -> int:
        """Stored rows, counting corrupt ones that get() or entries() has not yet detected."""
        return self._run(lambda conn: conn.execute(
            f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0])

    def check(self) -> Health:
        """What the file still holds and what is wrong with it (``treduda cache check``);
        read-only."""
        return salvage(self.path)[2]

    def repair(self) -> Health:
        """Rebuild the file from the valid rows it still holds (``treduda cache repair``),
        keeping the damaged one beside it as ``<name>.damaged``; returns what was found (a
        sound file is left as it is). A database of another program is left alone
        (TredudaError). Run it while no other process uses the cache."""
        entries, kernels, health = salvage(self.path)
        if health.sound:
            return health
        if health.foreign:
            raise TredudaError(f"{self.path} is not a treduda tuning cache "
                               f"({health.problems[0]}), so repair leaves it alone; "
                               f"{ELSEWHERE}")
        building = self.path.with_name(f"{self.path.name}.repairing")
        building.unlink(missing_ok=True)
        conn = sqlite3.connect(building, isolation_level=None)
        try:
            prepare(conn)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert_sql(TABLE, COLUMNS), entries)
            conn.executemany(insert_sql(KERNELS, KERNEL_COLUMNS), kernels)
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
            except Unusable as error:
                memory = self._degrade(error)
        return memory.run(work)

    def _degrade(self, error: Unusable) -> Memory:
        """The process's in-memory cache for this file: made on the first failure, from the
        valid rows the file still holds, and reported then with what to do; later calls use
        it silently."""
        with _FALLBACKS_LOCK:
            memory = _FALLBACKS.get(self._where)
            if memory is None:
                memory = _FALLBACKS[self._where] = Memory(self.path, error.reason)
                warnings.warn(f"cannot use the tuning cache {self.path} ({error.reason}); "
                              f"{error.advice.format(path=self.path)}; until then this process "
                              "keeps its tuning in memory", CacheWarning, stacklevel=4)
        return memory

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A checked connection to the file in autocommit mode; closing it rolls back anything
        uncommitted. Raises :class:`Unusable` where the file cannot be used."""
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as e:
            raise Unusable(str(e), WRITABLE) from None
        try:
            prepare(conn)
            yield conn
        except sqlite3.OperationalError as e:  # read-only, disk full, locked too long, a folder
            raise Unusable(str(e), WRITABLE) from None
        except sqlite3.DatabaseError as e:  # not a database, or a damaged one
            raise Unusable(f"it is damaged: {e}", REPAIR) from None
        finally:
            conn.close()

    def _discard(self, corrupt: list[tuple[Row, str]], table: str = TABLE,
                 columns: tuple[str, ...] = COLUMNS) -> None:
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
