"""The persistent find cache: the winner of ``find`` per problem, in a sqlite3 file.

Keys are problem key + backend + device name + tridnn version, so a result is never
reused on other hardware or by another version. sqlite's own locking makes
concurrent writers from many processes safe (WAL journal, busy timeout, one
transaction per write). A file that is not a readable database is moved aside with a
warning and a fresh one is started (under an inter-process lock, and only if it is
still damaged, so a second process cannot move aside the fresh file of the first);
a cache in a read-only place is read, with a warning, and new results stay in
memory; where nothing can be opened the cache runs in memory only, with a warning.
A cache problem never fails a convolution (tests/test_find_cache_stress.py).
"""
from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """CREATE TABLE IF NOT EXISTS find_results (
    key TEXT PRIMARY KEY,
    algo_id INTEGER NOT NULL,
    algo_name TEXT NOT NULL,
    time_ms REAL NOT NULL,
    memory INTEGER NOT NULL,
    created REAL NOT NULL)"""


def default_path() -> Path:
    """$TRIDNN_CACHE_DIR, else $XDG_CACHE_HOME/tridnn, else ~/.cache/tridnn."""
    root = os.environ.get("TRIDNN_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tridnn")
    return Path(root) / "find-cache.sqlite3"


@dataclass(frozen=True)
class CacheEntry:
    algo_id: int
    algo_name: str
    time_ms: float
    memory: int


class FindCache:
    """A dict in front of a sqlite3 file. ``path=None`` keeps results in memory only."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path is not None else None
        self._memory: dict[str, CacheEntry] = {}
        self._lock = threading.Lock()
        self._disabled_reason: str | None = None
        self._read_only_reason: str | None = None

    # -- public -------------------------------------------------------------------
    def get(self, key: str) -> CacheEntry | None:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        row = self._query("SELECT algo_id, algo_name, time_ms, memory FROM find_results WHERE key = ?",
                          (key,))
        if row:
            entry = CacheEntry(*row[0])
            with self._lock:
                self._memory[key] = entry
            return entry
        return None

    def put(self, key: str, entry: CacheEntry) -> None:
        with self._lock:
            self._memory[key] = entry
        self._execute("INSERT OR REPLACE INTO find_results VALUES (?, ?, ?, ?, ?, ?)",
                      (key, entry.algo_id, entry.algo_name, entry.time_ms, entry.memory, time.time()))

    def entries(self) -> list[tuple]:
        """All stored rows (key, algo_id, algo_name, time_ms, memory, created)."""
        rows = self._query("SELECT key, algo_id, algo_name, time_ms, memory, created FROM find_results "
                           "ORDER BY key", ())
        if rows is None:
            rows = [(k, e.algo_id, e.algo_name, e.time_ms, e.memory, 0.0) for k, e in self._memory.items()]
        return rows

    def clear(self) -> None:
        with self._lock:
            self._memory.clear()
        self._execute("DELETE FROM find_results", ())

    def __len__(self) -> int:
        return len(self.entries())

    # -- sqlite plumbing ------------------------------------------------------------
    def _connect(self):
        if self.path is None or self._disabled_reason:
            return None
        if self._read_only_reason:
            return self._open_read_only()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            try:
                con.execute("PRAGMA busy_timeout = 30000")
                try:
                    con.execute("PRAGMA journal_mode = WAL")
                except sqlite3.OperationalError:
                    pass  # e.g. a read-only directory: the default journal still works for reads
                con.execute(SCHEMA)
            except BaseException:
                con.close()
                raise
            return con
        except sqlite3.DatabaseError as exc:
            if _is_corrupt(exc):
                return self._recover(exc)
            if self.path.is_file() and _is_read_only(exc):
                con = self._open_read_only()
                if con is not None:
                    self._read_only_reason = str(exc)
                    warnings.warn(f"tridnn find cache {self.path} is read-only ({exc}): its results "
                                  f"are used, new results are kept in memory only",
                                  RuntimeWarning, stacklevel=4)
                    return con
            self._disable(f"cannot open {self.path}: {exc}")
        except OSError as exc:
            self._disable(f"cannot create {self.path.parent}: {exc}")
        return None

    def _open_read_only(self):
        """A read-only connection; ``immutable`` where even the WAL index cannot be made."""
        from urllib.parse import quote
        for flags in ("mode=ro", "immutable=1"):
            try:
                con = sqlite3.connect(f"file:{quote(str(self.path))}?{flags}", uri=True, timeout=30.0,
                                      isolation_level=None)
            except sqlite3.Error:
                continue
            try:
                con.execute("SELECT count(*) FROM find_results").fetchone()
                return con
            except sqlite3.Error:
                con.close()
        return None

    def _recover(self, exc):
        """Move a damaged file aside (kept for inspection) and start a new one.

        Under an exclusive lock, and only if the file is still damaged: another process
        may have replaced it already, and its fresh file (with entries committed since)
        must not be moved aside."""
        with _exclusive(self.path.with_name(self.path.name + ".lock")):
            if not _is_damaged(self.path):
                try:
                    con = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
                    con.execute("PRAGMA busy_timeout = 30000")
                    con.execute(SCHEMA)
                    return con
                except sqlite3.Error as exc2:
                    self._disable(f"cannot reopen {self.path}: {exc2}")
                    return None
            aside = self.path.with_name(self.path.name + f".corrupt-{os.getpid()}-{time.time_ns()}")
            warnings.warn(f"tridnn find cache {self.path} is not a readable database ({exc}); moved it "
                          f"to {aside} and started a new one", RuntimeWarning, stacklevel=4)
            try:
                os.replace(self.path, aside)
                for suffix in ("-wal", "-shm"):
                    side = Path(str(self.path) + suffix)
                    if side.exists():
                        os.replace(side, Path(str(aside) + suffix))
                con = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
                con.execute("PRAGMA busy_timeout = 30000")
                con.execute(SCHEMA)
                return con
            except (OSError, sqlite3.Error) as exc2:
                self._disable(f"cannot replace the damaged cache {self.path}: {exc2}")
                return None

    def _disable(self, reason: str) -> None:
        self._disabled_reason = reason
        warnings.warn(f"tridnn find cache disabled, results kept in memory only: {reason}",
                      RuntimeWarning, stacklevel=4)

    def _query(self, sql, args):
        con = self._connect()
        if con is None:
            return None
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            if _is_corrupt(exc):
                con.close()
                con = self._recover(exc)
                return [] if con is not None else None
            warnings.warn(f"tridnn find cache {self.path}: read failed: {exc}", RuntimeWarning,
                          stacklevel=3)
            return None
        finally:
            if con is not None:
                con.close()

    def _execute(self, sql, args) -> None:
        con = self._connect()
        if con is None or self._read_only_reason:
            if con is not None:
                con.close()
            return
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute(sql, args)
            con.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            try:
                con.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if _is_corrupt(exc):
                con.close()
                con = self._recover(exc)
                if con is not None:
                    try:
                        con.execute(sql, args)
                    except sqlite3.Error as exc2:
                        warnings.warn(f"tridnn find cache {self.path}: write failed, kept in memory: "
                                      f"{exc2}", RuntimeWarning, stacklevel=3)
            else:
                warnings.warn(f"tridnn find cache {self.path}: write failed, kept in memory: {exc}",
                              RuntimeWarning, stacklevel=3)
        finally:
            if con is not None:
                con.close()


def _is_read_only(exc) -> bool:
    text = str(exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text


def _is_damaged(path: Path) -> bool:
    """Whether ``path`` (as it is now) fails to open or to pass a quick integrity check."""
    try:
        con = sqlite3.connect(str(path), timeout=30.0, isolation_level=None)
    except sqlite3.Error:
        return True
    try:
        con.execute("PRAGMA busy_timeout = 30000")
        rows = con.execute("PRAGMA quick_check").fetchall()
        return rows != [("ok",)]
    except sqlite3.DatabaseError as exc:
        return _is_corrupt(exc)
    finally:
        con.close()


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """An inter-process lock (flock on a side file) where the platform has one."""
    try:
        import fcntl
        f = open(lock_path, "a+")
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(f, fcntl.LOCK_UN)
        finally:
            f.close()


def _is_corrupt(exc) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text or "file is encrypted" in text
