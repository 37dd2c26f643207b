"""The find cache under stress: concurrent writers, killed writers, damaged files,
read-only directories and caches written by other versions.

The promises (DESIGN.md, algorithms/find_cache.py): no crash, no wrong algorithm used,
no committed entry lost, and a RuntimeWarning whenever the cache had to be ignored.
Child processes run small scripts through ``sys.executable`` so that a crash in one
of them is seen as an exit status, not as a crash of the test run.
"""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import tridnn
from tridnn.algorithms import registry, selection
from tridnn.algorithms.find_cache import CacheEntry, FindCache
from tridnn.algorithms.problem import ConvProblem

SRC = str(Path(tridnn.__file__).resolve().parents[1])


def run_children(script: str, args_list, timeout=240):
    """Start one child per args tuple at once; wait for all; return their outputs."""
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=SRC))
             for args in args_list]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, f"child failed with status {p.returncode}:\n{err[-3000:]}"
        outs.append((out, err))
    return outs


def entry_for(i: int, j: int, k: int) -> CacheEntry:
    return CacheEntry(algo_id=(i * 7 + j * 3 + k) % 8, algo_name=f"A{i}-{j}-{k}",
                      time_ms=float(i + j / 10 + k / 100), memory=i * 1000 + j * 100 + k)


WRITER = """
    import sys, threading, warnings
    warnings.simplefilter("error")  # a cache warning under plain contention is a failure
    import numpy as np
    import tridnn
    from tridnn.algorithms.find_cache import CacheEntry, FindCache
    path, proc, threads, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    errors = []

    def work(t):
        try:
            cache = FindCache(path)
            for k in range(keys):
                e = CacheEntry((proc * 7 + t * 3 + k) % 8, f"A{proc}-{t}-{k}",
                               float(proc + t / 10 + k / 100), proc * 1000 + t * 100 + k)
                cache.put(f"key/{proc}/{t}/{k}", e)
                cache.put("shared", e)
                got = FindCache(path).get(f"key/{proc}/{t}/{k}")  # a fresh reader sees it
                assert got == e, (got, e)
            # and a real find through the API, which stores its winner in the same file
            handle = tridnn.Handle(find_cache=path, find_time_budget_s=0.01)
            x = tridnn.TensorDescriptor((1, 2, 5 + t, 5))
            w = tridnn.FilterDescriptor((2, 2, 3, 3))
            conv = tridnn.ConvolutionDescriptor(padding=1, nd=2)
            y = tridnn.TensorDescriptor(conv.output_dims(x, w))
            tridnn.find_convolution_forward_algorithm(handle, x, w, conv, y)
        except BaseException as exc:
            errors.append(repr(exc))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in ts: th.start()
    for th in ts: th.join()
    if errors:
        raise SystemExit("errors: " + "; ".join(errors))
    print("ok")
"""


def test_8_processes_x_4_threads_lose_nothing(tmp_path):
    path = tmp_path / "cache" / "find.sqlite3"
    procs, threads, keys = 8, 4, 8
    run_children(WRITER, [(path, p, threads, keys) for p in range(procs)])
    cache = FindCache(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for p in range(procs):
            for t in range(threads):
                for k in range(keys):
                    assert cache.get(f"key/{p}/{t}/{k}") == entry_for(p, t, k)
        shared = cache.get("shared")
        assert shared is not None and shared.algo_name.startswith("A")
        rows = cache.entries()
    finds = [r for r in rows if r[0].startswith("conv/")]
    assert len(finds) == threads  # the 4 distinct problems, found by every process
    fwd_ids = {a.id: a.name for a in registry.algorithms("conv", "fwd", "numpy")}
    for key, algo_id, name, *_ in finds:
        assert fwd_ids.get(algo_id) == name, f"{key}: cached {name} (id {algo_id}) is not a forward algorithm"
    assert len(rows) == procs * threads * keys + 1 + threads
    con = sqlite3.connect(str(path))
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()


KILLED_WRITER = """
    import sys
    from tridnn.algorithms.find_cache import CacheEntry, FindCache
    cache = FindCache(sys.argv[1])
    round_ = sys.argv[2]
    k = 0
    while True:
        cache.put(f"r{round_}/{k}", CacheEntry(k % 8, f"N{k}", float(k), k))
        print(k, flush=True)  # only after the commit returned
        k += 1
"""


def test_writer_killed_mid_write_loses_no_committed_entry(tmp_path):
    path = tmp_path / "find.sqlite3"
    rng = np.random.default_rng(7)
    acknowledged = {}
    for round_ in range(4):
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED_WRITER), str(path), str(round_)],
                                stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=SRC))
        last = None
        target = 20 + int(rng.integers(0, 40))
        for line in proc.stdout:
            last = int(line)
            if last >= target:
                break
        time.sleep(float(rng.random()) * 0.02)  # somewhere inside a later write
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        acknowledged[round_] = last
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a killed writer must not leave a cache we must ignore
        cache = FindCache(path)
        for round_, last in acknowledged.items():
            for k in range(last + 1):
                assert cache.get(f"r{round_}/{k}") == CacheEntry(k % 8, f"N{k}", float(k), k), (round_, k)
        cache.put("after", CacheEntry(1, "X", 1.0, 1))
        assert FindCache(path).get("after") == CacheEntry(1, "X", 1.0, 1)


def _populate(path, count=300):
    cache = FindCache(path)
    for k in range(count):
        cache.put(f"key/{k:04d}/" + "x" * 40, CacheEntry(k % 8, f"N{k}", float(k), k))
    return cache


@pytest.mark.parametrize("damage", ["truncate", "garbage", "garbage_header", "zero_length"])
def test_damaged_file_warns_and_recovers(tmp_path, damage):
    path = tmp_path / "find.sqlite3"
    _populate(path)
    size = path.stat().st_size
    rng = np.random.default_rng(1)
    if damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(size // 2)
    elif damage == "garbage":
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    elif damage == "garbage_header":
        with open(path, "r+b") as f:
            f.write(rng.integers(0, 256, 100, dtype=np.uint8).tobytes())
    else:
        path.write_bytes(b"")
    cache = FindCache(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(300):  # every answer is the committed entry or a miss, never garbage
            got = cache.get(f"key/{k:04d}/" + "x" * 40)
            assert got is None or got == CacheEntry(k % 8, f"N{k}", float(k), k), (k, got)
        cache.put("fresh", CacheEntry(3, "F", 1.0, 0))
        assert cache.get("fresh") == CacheEntry(3, "F", 1.0, 0)
        assert FindCache(path).get("fresh") == CacheEntry(3, "F", 1.0, 0), "the new file does not work"
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if damage == "zero_length":  # an empty file is a valid empty database: nothing to warn about
        assert not messages, messages
    else:
        assert any("find cache" in m and str(path) in m for m in messages), messages
        assert list(tmp_path.glob("find.sqlite3.corrupt-*")), "the damaged file was not kept aside"


def test_concurrent_recovery_keeps_entries_written_after_it(tmp_path):
    """Two caches see the same damaged file; the second must not move aside the fresh
    file the first one already wrote to."""
    path = tmp_path / "find.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    first, second = FindCache(path), FindCache(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first.put("kept", CacheEntry(1, "K", 1.0, 0))
        second.put("other", CacheEntry(2, "O", 2.0, 0))
        assert FindCache(path).get("kept") == CacheEntry(1, "K", 1.0, 0)
        assert FindCache(path).get("other") == CacheEntry(2, "O", 2.0, 0)
        # the race itself: a process that saw the damage before another one replaced
        # the file recovers late; the fresh file (and "kept") must stay where it is
        late = FindCache(path)
        con = late._recover(sqlite3.DatabaseError("file is not a database"))
        con.close()
        assert FindCache(path).get("kept") == CacheEntry(1, "K", 1.0, 0)
    assert len(list(tmp_path.glob("find.sqlite3.corrupt-*"))) == 1  # only the garbage was moved


def test_schema_of_another_version_warns_and_works_in_memory(tmp_path):
    path = tmp_path / "find.sqlite3"
    con = sqlite3.connect(str(path))
    con.execute("CREATE TABLE find_results (key TEXT PRIMARY KEY, winner BLOB)")
    con.execute("INSERT INTO find_results VALUES ('k', x'00')")
    con.commit()
    con.close()
    cache = FindCache(path)
    with pytest.warns(RuntimeWarning, match="find cache"):
        assert cache.get("k") is None
    with pytest.warns(RuntimeWarning, match="find cache"):
        cache.put("k", CacheEntry(1, "A", 1.0, 0))
    assert cache.get("k") == CacheEntry(1, "A", 1.0, 0)


READ_ONLY_CHILD = """
    import os, sys, warnings
    from tridnn.algorithms.find_cache import CacheEntry, FindCache
    path = sys.argv[1]
    os.setuid(65534)  # nobody: the directory is root's and read-only to us
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = FindCache(path)
        print("committed", cache.get("committed"))
        cache.put("new", CacheEntry(2, "NEW", 2.0, 0))
        print("new", cache.get("new"))
    print("warnings", [str(w.message) for w in caught])
"""


def test_read_only_directory_reads_and_keeps_new_results_in_memory():
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user (root ignores directory permissions)")
    root = Path(tempfile.mkdtemp(prefix="tridnn-ro-"))
    try:
        os.chmod(root, 0o755)
        path = root / "cache" / "find.sqlite3"
        FindCache(path).put("committed", CacheEntry(1, "OLD", 1.0, 0))
        os.chmod(path.parent, 0o555)
        os.chmod(path, 0o644)
        (out, err), = run_children(READ_ONLY_CHILD, [(path,)])
        assert "committed CacheEntry(algo_id=1, algo_name='OLD'" in out, out + err
        assert "new CacheEntry(algo_id=2, algo_name='NEW'" in out, out + err
        assert "read-only" in out and str(path) in out, out + err
        assert FindCache(path).get("new") is None  # nothing was written
    finally:
        os.chmod(root / "cache", 0o755)
        import shutil
        shutil.rmtree(root)


def test_uncreatable_directory_warns_and_works_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = FindCache(blocker / "sub" / "find.sqlite3")
    with pytest.warns(RuntimeWarning, match="find cache"):
        cache.put("k", CacheEntry(1, "A", 1.0, 0))
    assert cache.get("k") == CacheEntry(1, "A", 1.0, 0)


# -- the entries themselves: other versions, bogus ids -----------------------------------
def _problem():
    x = tridnn.TensorDescriptor((1, 4, 6, 6))
    w = tridnn.FilterDescriptor((4, 4, 1, 1))
    conv = tridnn.ConvolutionDescriptor(nd=2)
    return ConvProblem("fwd", x, w, tridnn.TensorDescriptor(conv.output_dims(x, w)), conv)


def test_entries_of_another_version_are_not_used(tmp_path):
    path = tmp_path / "find.sqlite3"
    handle = tridnn.Handle(find_cache=path)
    problem = _problem()
    heuristic = selection.choose(handle, problem, "heuristic")
    other = next(a for a in registry.algorithms("conv", "fwd", "numpy")
                 if a is not heuristic and a.not_applicable(problem) is None)
    key = selection.cache_key(handle, problem)
    old_key = key.replace(f"tridnn-{tridnn.__version__}", "tridnn-0.0.0-old")
    assert old_key != key
    handle.find_cache.put(old_key, CacheEntry(other.id, other.name, 0.001, 0))
    assert selection.choose(tridnn.Handle(find_cache=path), problem) is heuristic
    # ... but a same-version entry is (the control), and the old entry is still stored
    handle.find_cache.put(key, CacheEntry(other.id, other.name, 0.001, 0))
    assert selection.choose(tridnn.Handle(find_cache=path), problem) is other
    assert FindCache(path).get(old_key) is not None


def _bwd_data_id():
    algos = registry.algorithms("conv", "bwd_data", "numpy")
    if not algos:
        pytest.skip("no backward-data algorithm registered yet")
    return algos[0]


@pytest.mark.parametrize("bogus", ["unknown_id", "other_direction", "not_applicable", "renamed"])
def test_bogus_entries_never_select_a_wrong_algorithm(tmp_path, bogus):
    path = tmp_path / "find.sqlite3"
    handle = tridnn.Handle(find_cache=path)
    problem = _problem()
    heuristic = selection.choose(handle, problem, "heuristic")
    if bogus == "unknown_id":
        entry = CacheEntry(9999, "MADE_UP", 0.001, 0)
    elif bogus == "other_direction":
        algo = _bwd_data_id()
        entry = CacheEntry(algo.id, algo.name, 0.001, 0)
    elif bogus == "not_applicable":
        algo = next((a for a in registry.algorithms("conv", "fwd", "numpy")
                     if a.not_applicable(problem) is not None), None)
        if algo is None:
            pytest.skip("every forward algorithm applies to the 1x1 problem")
        entry = CacheEntry(algo.id, algo.name, 0.001, 0)
    else:
        other = next(a for a in registry.algorithms("conv", "fwd", "numpy")
                     if a is not heuristic and a.not_applicable(problem) is None)
        entry = CacheEntry(other.id, "SOMETHING_ELSE", 0.001, 0)
    handle.find_cache.put(selection.cache_key(handle, problem), entry)
    fresh = tridnn.Handle(find_cache=path)
    if bogus == "not_applicable":
        chosen = selection.choose(fresh, problem)
    else:
        with pytest.warns(RuntimeWarning, match="find cache"):
            chosen = selection.choose(fresh, problem)
    assert chosen is heuristic
    assert chosen.direction == "fwd" and chosen.not_applicable(problem) is None
