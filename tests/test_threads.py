"""Threads: 16 threads at once, with their own handles and sharing one.

The rule (handle.py): a handle may be shared by threads. Each thread gets its own
workspace arena, the find cache is locked, and nothing else in a handle changes after
construction. One handle per thread remains the cheapest pattern. These tests run
real convolutions from 16 threads released together by a barrier and check every
result against the float64 reference.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem

THREADS = 16


def run_threads(work, count=THREADS):
    """Run ``work(i)`` in ``count`` threads started together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    errors = []

    def body(i):
        try:
            barrier.wait()
            work(i)
        except BaseException as exc:  # reported below, with the thread's index
            errors.append((i, exc))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        i, exc = errors[0]
        raise AssertionError(f"thread {i} of {count} failed ({len(errors)} failures): {exc!r}") from exc


def _problem(i: int, rng):
    """A per-thread problem: sizes vary so that threads really do different work."""
    c, k = 2 + i % 3, 3 + i % 4
    h, w = 6 + i % 5, 5 + (i * 3) % 7
    x = testing.fill((2, c, h, w), "float32", rng)
    f = testing.fill((k, c, 3, 3), "float32", rng)
    return x, f


def _forward_algorithms_for(problem):
    return [a for a in registry.algorithms("conv", "fwd", "numpy")
            if a.not_applicable(problem) is None]


def _check_all_algorithms(handle, i, rounds=3):
    rng = np.random.default_rng(1000 + i)
    for _ in range(rounds):
        x_vals, w_vals = _problem(i, rng)
        layout = ("NCHW", "NHWC")[i % 2]
        x_desc, x = testing.make_tensor(x_vals.shape, "float32", layout, rng, x_vals)
        w_desc, w = testing.make_filter(w_vals.shape, "float32", layout, w_vals)
        conv = tridnn.ConvolutionDescriptor(padding=1, nd=2)
        y_desc, y = testing.make_tensor(conv.output_dims(x_desc, w_desc), "float32", layout, rng)
        ref = reference.conv_forward(x_vals, w_vals, 1, 1)
        problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
        for algo in _forward_algorithms_for(problem):
            testing.poison(y)
            ws = np.empty(algo.workspace_size(problem), np.uint8)
            tridnn.convolution_forward(handle, 1.0, x_desc, x, w_desc, w, conv, algo.enum, ws, 0.0, y_desc, y)
            testing.check_result(y, ref, "float32", getattr(algo, "exact", False),
                                 name=f"thread {i} {algo.name}")


def test_16_threads_with_their_own_handles():
    def work(i):
        _check_all_algorithms(tridnn.Handle(find_cache=None), i)
    run_threads(work)


def test_16_threads_sharing_one_handle():
    shared = tridnn.Handle(find_cache=None)
    run_threads(lambda i: _check_all_algorithms(shared, i))


def test_shared_handle_functional_api_uses_per_thread_arenas():
    """The functional API takes its workspace from the handle's arena; threads sharing
    the handle must not share the arena (they would overwrite each other's temporaries)."""
    shared = tridnn.Handle(find_cache=None)

    def work(i):
        rng = np.random.default_rng(i)
        for _ in range(5):
            x_vals, w_vals = _problem(i, rng)
            for algo in ("GEMM", "IMPLICIT_PRECOMP_GEMM", "FFT", "WINOGRAD_NONFUSED"):
                try:
                    y = tridnn.conv(x_vals, w_vals, padding=1, algo=algo, handle=shared)
                except tridnn.NotSupportedError:
                    continue
                exact = getattr(registry.by_enum("conv", "fwd", "numpy", tridnn.ConvFwdAlgo[algo]),
                                "exact", False)
                testing.check_result(np.asarray(y), reference.conv_forward(x_vals, w_vals, 1, 1),
                                     "float32", exact, name=f"thread {i} conv {algo}")
    run_threads(work)


def test_arenas_are_per_thread_and_freed_by_destroy():
    shared = tridnn.Handle(find_cache=None)
    buffers = [None] * 4

    def work(i):
        buffers[i] = shared.workspace(4096 + i)
        assert shared.arena_bytes >= 4096 + i
    run_threads(work, 4)
    for a in range(4):
        for b in range(a + 1, 4):
            assert not np.shares_memory(buffers[a], buffers[b]), f"threads {a} and {b} share an arena"
    assert shared.arena_bytes == 0  # this thread never asked for one
    shared.destroy()
    with pytest.raises(tridnn.NotInitializedError):
        shared.workspace(1)


def test_shared_handle_concurrent_find_stores_a_valid_winner(tmp_path):
    shared = tridnn.Handle(find_cache=tmp_path / "find.sqlite3", find_time_budget_s=0.01)
    x = tridnn.TensorDescriptor((1, 3, 8, 8))
    w = tridnn.FilterDescriptor((4, 3, 3, 3))
    conv = tridnn.ConvolutionDescriptor(padding=1, nd=2)
    y = tridnn.TensorDescriptor(conv.output_dims(x, w))
    results = [None] * THREADS

    def work(i):
        results[i] = tridnn.find_convolution_forward_algorithm(shared, x, w, conv, y)
    run_threads(work)
    problem = ConvProblem("fwd", x, w, y, conv)
    applicable = {a.enum for a in _forward_algorithms_for(problem)}
    for records in results:
        assert {r.algo for r in records if r.status == tridnn.Status.SUCCESS} == applicable
    rows = shared.find_cache.entries()
    assert len(rows) == 1 and registry.by_id(rows[0][1]).enum in applicable


def test_16_threads_repeating_one_call_on_a_shared_handle():
    """The same handle and descriptor objects from 16 threads, each with its own arrays:
    the repeated-call fast path (keyed by handle and descriptors) is shared by all."""
    shared = tridnn.Handle(find_cache=None)
    rng = np.random.default_rng(0)
    x_desc = tridnn.TensorDescriptor.packed((2, 4, 7, 6), "float32", tridnn.TensorFormat.NHWC)
    w_desc = tridnn.FilterDescriptor((5, 4, 3, 3), "float32")
    conv = tridnn.ConvolutionDescriptor(padding=1, nd=2)
    y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
    algos = _forward_algorithms_for(problem)
    inputs = [(testing.fill((2, 4, 7, 6), "float32", rng), testing.fill((5, 4, 3, 3), "float32", rng))
              for _ in range(THREADS)]

    def work(i):
        x_vals, w_vals = inputs[i]
        _, x = testing.make_tensor(x_vals.shape, "float32", "NHWC", rng, x_vals)
        _, w = testing.make_filter(w_vals.shape, "float32", "NCHW", w_vals)
        _, y = testing.make_tensor(y_desc.dims, "float32", "NHWC", rng)
        ref = reference.conv_forward(x_vals, w_vals, 1, 1)
        for round_ in range(4):
            algo = algos[(i + round_) % len(algos)]
            testing.poison(y)
            ws = np.empty(algo.workspace_size(problem), np.uint8)
            tridnn.convolution_forward(shared, 1.0, x_desc, x, w_desc, w, conv, algo.enum, ws, 0.0, y_desc, y)
            testing.check_result(y, ref, "float32", getattr(algo, "exact", False),
                                 name=f"thread {i} round {round_} {algo.name}")
    run_threads(work)
