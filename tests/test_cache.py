"""The tuning cache: keys, persistence, and surviving concurrent, killed and foreign writers.

Concurrency and crash tests use real processes (a cache that only works inside one process is
no cache), each running a short script with ``python -c``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager, nullcontext
from pathlib import Path

import numpy as np
import pytest
from conftest import filled, filled_key

import treduda
from treduda.errors import ShapeMismatch, TredudaError
from treduda.frontend.contraction import analyse
from treduda.tuning import cache as cache_module
from treduda.tuning.cache import CacheKey, CacheWarning, Entry, Health, TuningCache, default_path
from treduda.tuning.policy import finish_background

GEMM = "C[i,j]=A[i,k]*B[k,j]"
SIZES = {"i": 64, "j": 32, "k": 16}
RESULT = {"strategy": "tiled", "params": {"tile_i": 16, "tile_j": 8}, "seconds": 1.5e-5}


def gemm_key(**changes) -> CacheKey:
    key = CacheKey.make(GEMM, SIZES, "float32", "C", "sm_80 A100", version="0.1.0")
    return dataclasses.replace(key, **changes)


@pytest.fixture
def cache(tmp_path: Path) -> TuningCache:
    return TuningCache(tmp_path / "tuning.sqlite3")


@pytest.fixture(autouse=True)
def no_unexpected_warnings():
    """A CacheWarning a test does not ask for with pytest.warns is a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        yield


# --- keys, hits and misses -------------------------------------------------------------------

def test_hit_and_miss(cache: TuningCache):
    assert cache.get(gemm_key()) is None
    cache.put(gemm_key(), RESULT)
    assert cache.get(gemm_key()) == RESULT
    assert len(cache) == 1


def test_spelling_variants_of_one_expression_hit(cache: TuningCache):
    cache.put(gemm_key(), RESULT)
    respelled = CacheKey.make("C[i, j] = A[i,k] * B[k,j]", dict(reversed(SIZES.items())),
                              "float32", "C", "sm_80 A100", version="0.1.0")
    assert respelled == gemm_key()
    assert cache.get(respelled) == RESULT


@pytest.mark.parametrize("changes", [
    {"sizes": (("i", 64), ("j", 32), ("k", 17))},
    {"sizes": "symbolic"},
    {"dtype": "float64"},
    {"layout": "F"},
    {"gpu": "sm_90 H100"},
    {"version": "0.2.0"},
    {"expression": "C[i,j] = A[k,i]*B[k,j]"},
], ids=lambda changes: next(iter(changes)))
def test_any_other_field_misses(cache: TuningCache, changes: dict):
    cache.put(gemm_key(), RESULT)
    assert cache.get(gemm_key(**changes)) is None


def test_make_normalises_and_checks():
    symbolic = CacheKey.make(GEMM, None, "float32", "C", "gpu")
    assert symbolic.sizes == "symbolic"
    assert symbolic.version  # the installed version, or "(not installed)"
    assert gemm_key().sizes == (("i", 64), ("j", 32), ("k", 16))
    numpy_style = CacheKey.make("ik,kj->ij", SIZES, "float32", "C", "gpu")
    assert numpy_style.expression == repr(analyse("ik,kj->ij").tree)
    with pytest.raises(ShapeMismatch):
        CacheKey.make(GEMM, {**SIZES, "q": 3}, "float32", "C", "gpu")
    assert gemm_key().digest() == gemm_key().digest() != gemm_key(gpu="other").digest()
    assert CacheKey.from_json(gemm_key().to_json()) == gemm_key()


def test_put_replaces_entries_and_clear(cache: TuningCache):
    cache.put(gemm_key(), RESULT)
    cache.put(gemm_key(), {"strategy": "naive"})
    cache.put(gemm_key(dtype="float64"), RESULT)
    assert cache.get(gemm_key()) == {"strategy": "naive"}
    entries = cache.entries()
    assert {entry.key for entry in entries} == {gemm_key(), gemm_key(dtype="float64")}
    assert all(isinstance(entry, Entry) and entry.created <= time.time() for entry in entries)
    assert cache.clear() == 2
    assert len(cache) == 0 and cache.get(gemm_key()) is None


def test_persists_across_instances(tmp_path: Path):
    TuningCache(tmp_path / "deep" / "dir" / "c.sqlite3").put(gemm_key(), RESULT)
    assert TuningCache(tmp_path / "deep" / "dir" / "c.sqlite3").get(gemm_key()) == RESULT


@pytest.mark.parametrize("value", [{"f": object()}, {"s": {1, 2}}, ["not", "a", "dict"]])
def test_unserialisable_value_is_a_treduda_error(cache: TuningCache, value):
    with pytest.raises(TredudaError, match="JSON-serialisable|must be a dict"):
        cache.put(gemm_key(), value)
    assert len(cache) == 0


# --- real processes --------------------------------------------------------------------------

WRITER = """
import pathlib, sys, time
from treduda.frontend.contraction import analyse
from treduda.tuning.cache import CacheKey, TuningCache
path, worker, count, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cache = TuningCache(path)
print("ready", flush=True)
while go and not pathlib.Path(go).exists():
    time.sleep(0.001)
n = 0
while count < 0 or n < count:
    key = CacheKey("E", (("i", n + 1),), "float32", "C", f"gpu{worker}", "test")
    cache.put(key, {"worker": worker, "n": n, "padding": "x" * 2000})
    print(n, flush=True)  # only after put returned, i.e. after the commit
    n += 1
"""


def writer_key(worker: int, n: int) -> CacheKey:
    return CacheKey("E", (("i", n + 1),), "float32", "C", f"gpu{worker}", "test")


def start_writer(path: Path, worker: int, count: int, go: Path | str = "") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(worker), str(count),
                             str(go)], stdout=subprocess.PIPE, text=True)


def test_concurrent_writers_lose_nothing(tmp_path: Path):
    path, go = tmp_path / "shared.sqlite3", tmp_path / "go"
    writers = [start_writer(path, worker, 50, go) for worker in range(4)]
    for writer in writers:  # all imported and waiting, so the writes really overlap
        assert writer.stdout.readline().strip() == "ready"
    go.touch()
    for writer in writers:
        writer.communicate(timeout=60)
        assert writer.returncode == 0
    cache = TuningCache(path)
    assert len(cache) == 200
    assert sorted((e.value["worker"], e.value["n"]) for e in cache.entries()) == [
        (worker, n) for worker in range(4) for n in range(50)]
    assert cache.get(writer_key(3, 49))["n"] == 49


def test_killed_writer_leaves_a_sound_cache(tmp_path: Path):
    path = tmp_path / "killed.sqlite3"
    writer = start_writer(path, 7, -1)
    assert writer.stdout.readline().strip() == "ready"
    committed = [int(writer.stdout.readline()) for _ in range(30)]
    writer.kill()  # SIGKILL on POSIX: no cleanup, possibly in the middle of a transaction
    # Read the rest through the same text stream: communicate(timeout=...) reads the pipe
    # itself and would miss lines readline() had already buffered (a loaded machine lets the
    # writer run ahead, so the buffer holds more than the 30 lines read).
    committed += [int(line) for line in writer.stdout.read().split()]
    writer.wait(timeout=30)
    if hasattr(signal, "SIGKILL"):
        assert writer.returncode == -signal.SIGKILL
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    cache = TuningCache(path)
    for n in committed:
        assert cache.get(writer_key(7, n)) == {"worker": 7, "n": n, "padding": "x" * 2000}
    entries = cache.entries()  # may hold one more than reported: committed, then killed
    assert len(entries) in (len(committed), len(committed) + 1)
    cache.put(gemm_key(), RESULT)
    assert cache.get(gemm_key()) == RESULT


def test_threads_share_one_cache(cache: TuningCache):
    def write(worker: int) -> None:
        for n in range(10):
            cache.put(writer_key(worker, n), {"n": n})

    threads = [threading.Thread(target=write, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache.entries()) == 40


# --- corrupt entries and foreign files -------------------------------------------------------

def tamper(path: Path, row_of: CacheKey, columns: dict) -> None:
    """Overwrite columns of ``row_of``'s row behind the cache's back."""
    assignments = ", ".join(f"{column} = ?" for column in columns)
    with sqlite3.connect(path) as conn:
        changed = conn.execute(f"UPDATE tuning SET {assignments} WHERE digest = ?",
                               (*columns.values(), row_of.digest())).rowcount
    assert changed == 1


def checksum(key_json: str, value_json: str) -> str:
    return hashlib.sha256(f"{key_json}\n{value_json}".encode()).hexdigest()


def corruptions() -> dict[str, tuple[dict, str]]:
    """Ways to damage gemm_key()'s row: the columns to overwrite and the reason to report."""
    key, other = gemm_key().to_json(), gemm_key(gpu="elsewhere").to_json()
    return {
        "value changed": ({"value": '{"strategy":"evil"}'}, "checksum"),
        "unparsable value": ({"value": "{oops", "checksum": checksum(key, "{oops")},
                             "not valid JSON"),
        "foreign key fields": ({"key": other, "checksum": checksum(other, '{"a":1}'),
                                "value": '{"a":1}'}, "different key|does not hash"),
        "schema version": ({"schema": 99}, "schema version 99"),
    }


@pytest.mark.parametrize("kind", list(corruptions()))
def test_corrupt_entry_is_reported_removed_and_never_returned(tmp_path: Path, kind: str):
    cache = TuningCache(tmp_path / "c.sqlite3")
    columns, reason = corruptions()[kind]
    cache.put(gemm_key(), RESULT)
    cache.put(gemm_key(dtype="float64"), RESULT)
    tamper(cache.path, gemm_key(), columns)
    with pytest.warns(CacheWarning, match=rf"C\[i,j\] = A\[i,k\]\*B\[k,j\].*({reason})"):
        assert cache.get(gemm_key()) is None
    assert len(cache) == 1
    assert cache.get(gemm_key()) is None  # removed, so now a plain miss without a warning

    cache.put(gemm_key(), RESULT)
    tamper(cache.path, gemm_key(), columns)
    with pytest.warns(CacheWarning, match=reason):
        assert [entry.key for entry in cache.entries()] == [gemm_key(dtype="float64")]
    assert cache.get(gemm_key(dtype="float64")) == RESULT


def test_unreadable_key_is_named_by_digest(cache: TuningCache):
    cache.put(gemm_key(), RESULT)
    tamper(cache.path, gemm_key(),
           {"key": "not json", "checksum": checksum("not json", "{}"), "value": "{}"})
    with pytest.warns(CacheWarning, match=f"digest '{gemm_key().digest()}'.*not a valid key"):
        assert cache.entries() == []


def test_foreign_file_is_reported_once_and_not_overwritten(tmp_path: Path):
    path = tmp_path / "random.bin"
    junk = os.urandom(8192)
    path.write_bytes(junk)
    cache = TuningCache(path)
    with pytest.warns(CacheWarning, match=rf"cannot use the tuning cache {path} .*damaged.*"
                                          "treduda cache repair"):
        assert cache.get(gemm_key()) is None
    assert cache.entries() == [] and len(cache) == 0  # in memory now: no warning again
    cache.put(gemm_key(), RESULT)
    assert TuningCache(path).get(gemm_key()) == RESULT  # every cache of the file shares it
    assert "damaged" in cache.degraded
    assert path.read_bytes() == junk


def test_foreign_sqlite_database_is_left_alone(tmp_path: Path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    cache = TuningCache(path)
    with pytest.warns(CacheWarning, match=r"another program.*notes.*\$TREDUDA_CACHE"):
        assert cache.get(gemm_key()) is None
    cache.put(gemm_key(), RESULT)
    assert cache.get(gemm_key()) == RESULT
    with sqlite3.connect(path) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("notes",)]
    assert cache.check().foreign and not cache.check().sound
    with pytest.raises(TredudaError, match="not a treduda tuning cache.*leaves it alone"):
        cache.repair()


# --- a damaged, foreign or read-only file never costs a call its result ----------------------

@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` made read-only, for root too (which writes files without write permission):
    immutable with chattr, or the test is skipped."""
    path.chmod(0o444)
    immutable = os.geteuid() == 0
    if immutable and subprocess.run(["chattr", "+i", str(path)], capture_output=True,
                                    check=False).returncode != 0:
        pytest.skip("root here cannot make a file read-only (no chattr +i)")
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o644)


def damage(path: Path, kind: str) -> None:
    data = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[:1000])
    elif kind == "half-length":
        path.write_bytes(data[:len(data) // 2])
    elif kind == "garbage":
        path.write_bytes(random.Random(kind).randbytes(len(data)))
    elif kind == "wrong schema":
        with closing(sqlite3.connect(path)) as conn:  # closed: its log merged into the file
            conn.execute("ALTER TABLE tuning ADD COLUMN extra TEXT")
            conn.commit()


@pytest.mark.parametrize("kind", ["truncated", "half-length", "garbage", "wrong schema",
                                  "read-only"])
def test_contract_is_right_with_one_warning_whatever_the_cache_file(tmp_path, monkeypatch,
                                                                     kind):
    path = tmp_path / "tuning.sqlite3"
    filled(path)
    damage(path, kind)
    before = path.read_bytes()
    monkeypatch.setenv("TREDUDA_CACHE", str(path))
    a, b = np.random.default_rng(3).random((6, 5)), np.random.default_rng(4).random((5, 7))
    with warnings.catch_warnings(record=True) as caught, (
            read_only(path) if kind == "read-only" else nullcontext()):
        warnings.simplefilter("always")
        result = treduda.contract("ik,kj->ij", a, b)
        finish_background()  # the kernel store is written on the background thread
    np.testing.assert_allclose(result, np.einsum("ik,kj->ij", a, b), rtol=1e-12)
    [warning] = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert f"cannot use the tuning cache {path} (" in warning
    assert ("treduda cache repair" if kind != "read-only" else "can be written") in warning
    assert path.read_bytes() == before  # a damaged or read-only file is never written
    assert len(TuningCache(path)) >= 1  # the search's winner, kept in memory for the process


def test_a_read_only_cache_is_still_read(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    filled(path)
    with read_only(path), pytest.warns(CacheWarning, match="readonly"):
        cache = TuningCache(path)
        assert cache.get(filled_key(7))["n"] == 7  # reading needs no writing
        cache.put(gemm_key(), RESULT)  # the write fails, so the process goes on in memory
        assert cache.get(gemm_key()) == RESULT and cache.get(filled_key(39))["n"] == 39
        assert cache.kernels() == 40


def test_a_cache_locked_too_long_is_kept_in_memory(tmp_path, monkeypatch):
    cache = TuningCache(tmp_path / "tuning.sqlite3")
    cache.put(gemm_key(), RESULT)
    monkeypatch.setattr(cache_module, "BUSY_TIMEOUT", 0.1)
    with closing(sqlite3.connect(cache.path, isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")  # another process writing, for too long
        with pytest.warns(CacheWarning, match="database is locked.*no other process keeps it"):
            cache.put(gemm_key(dtype="float64"), RESULT)
        assert cache.get(gemm_key()) == RESULT == cache.get(gemm_key(dtype="float64"))
        holder.execute("ROLLBACK")


def test_a_page_damaged_file_is_checked_and_repaired_keeping_what_is_readable(tmp_path):
    path = tmp_path / "tuning.sqlite3"
    filled(path)
    data = bytearray(path.read_bytes())
    page = len(data) // 4096 // 2  # within the kernels' records
    data[page * 4096:(page + 1) * 4096] = b"\xa5" * 4096
    path.write_bytes(bytes(data))
    health = TuningCache(path).check()
    assert not health.sound and "damage" in health.problems[0]
    assert health.entries + health.kernels >= 70, health
    assert TuningCache(path).repair() == health
    assert (tmp_path / "tuning.sqlite3.damaged").read_bytes() == data
    repaired = TuningCache(path)
    assert repaired.check() == Health(health.entries, health.kernels, ())
    assert len(repaired.entries()) == health.entries and repaired.kernels() == health.kernels


# --- where the cache lives -------------------------------------------------------------------

def test_default_path_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TREDUDA_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_path() == tmp_path / "home" / ".cache" / "treduda" / "tuning.sqlite3"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")
    assert default_path() == tmp_path / "home" / ".cache" / "treduda" / "tuning.sqlite3"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "treduda" / "tuning.sqlite3"
    monkeypatch.setenv("TREDUDA_CACHE", str(tmp_path / "mine.db"))
    assert default_path() == tmp_path / "mine.db"


def test_unusable_locations_are_kept_in_memory(tmp_path: Path):
    (tmp_path / "file").write_text("")
    with pytest.warns(CacheWarning, match=r"cannot create its folder.*\$TREDUDA_CACHE"):
        in_a_file = TuningCache(tmp_path / "file" / "tuning.sqlite3")
    in_a_file.put(gemm_key(), RESULT)
    assert in_a_file.get(gemm_key()) == RESULT
    with pytest.warns(CacheWarning, match=f"cannot use the tuning cache {tmp_path} "):
        TuningCache(tmp_path).put(gemm_key(), RESULT)  # a directory


def test_no_path_means_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TREDUDA_CACHE", str(tmp_path / "new" / "dir" / "t.sqlite3"))
    TuningCache().put(gemm_key(), RESULT)
    assert TuningCache(tmp_path / "new" / "dir" / "t.sqlite3").get(gemm_key()) == RESULT


def test_the_suite_never_writes_the_users_cache(tmp_path: Path):
    """conftest.py replaces $TREDUDA_CACHE; a test that tunes must not reach the user's file."""
    user = tmp_path / "user.sqlite3"
    tuning = "tests/test_pipeline.py::test_contract_infers_sizes_dtype_and_accepts_views"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          tuning], cwd=Path(__file__).parent.parent, capture_output=True,
                         text=True, env={**os.environ, "TREDUDA_CACHE": str(user)}, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert not user.exists()
