"""Determinism: every algorithm reported deterministic gives bit-identical results over
repeated runs, whatever its workspace held before, and across BLAS/OpenMP thread counts.

Inputs are random normals (not the exact integer fills), so that any change in the
order of floating-point operations would show up in the low bits.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tridnn
from tridnn import testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem

SRC = str(Path(tridnn.__file__).resolve().parents[1])

# (x dims, w dims, padding, stride, groups, layout): big enough that BLAS splits the work
# between threads, small enough for CI
PROBLEMS = [
    ((4, 32, 12, 12), (32, 32, 3, 3), 1, 1, 1, "NCHW"),
    ((2, 16, 10, 9), (24, 16, 3, 3), 1, 1, 1, "NHWC"),
    ((2, 8, 9, 9), (8, 2, 5, 5), 2, 2, 4, "NCHW"),
    ((3, 6, 40), (12, 6, 5), 2, 1, 1, "NHWC"),
    ((1, 4, 6, 6, 6), (8, 4, 3, 3, 3), 1, 1, 1, "NCHW"),
]
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
API = {"fwd": "convolution_forward", "bwd_data": "convolution_backward_data",
       "bwd_filter": "convolution_backward_filter"}


def _tensors(index, direction, seed=0):
    """Descriptors and arrays of problem ``index`` with seeded random-normal contents."""
    x_dims, w_dims, pad, stride, groups, layout = PROBLEMS[index]
    rng = np.random.default_rng(seed + index)
    conv = tridnn.ConvolutionDescriptor(padding=pad, stride=stride, groups=groups, nd=len(x_dims) - 2)
    x_desc, x = testing.make_tensor(x_dims, "float32", layout, rng,
                                    rng.standard_normal(x_dims).astype(np.float32))
    w_desc, w = testing.make_filter(w_dims, "float32", layout,
                                    rng.standard_normal(w_dims).astype(np.float32))
    y_dims = conv.output_dims(x_desc, w_desc)
    y_desc, y = testing.make_tensor(y_dims, "float32", layout, rng,
                                    rng.standard_normal(y_dims).astype(np.float32))
    return conv, (x_desc, x), (w_desc, w), (y_desc, y)


def run_algorithm(index, direction, algo, workspace_fill: int, beta: float = 0.0) -> bytes:
    """One call of ``algo``; returns the output's bytes. ``workspace_fill`` seeds the
    garbage the workspace holds before the call."""
    conv, (x_desc, x), (w_desc, w), (y_desc, y) = _tensors(index, direction)
    problem = ConvProblem(direction, x_desc, w_desc, y_desc, conv)
    ws = np.random.default_rng(workspace_fill).integers(
        0, 256, algo.workspace_size(problem), dtype=np.uint8)
    handle = tridnn.Handle(find_cache=None)
    fn = getattr(tridnn, API[direction])
    if direction == "fwd":
        out = fn(handle, 0.75, x_desc, x, w_desc, w, conv, algo.enum, ws, beta, y_desc, y)
    elif direction == "bwd_data":
        out = fn(handle, 0.75, w_desc, w, y_desc, y, conv, algo.enum, ws, beta, x_desc, x)
    else:
        out = fn(handle, 0.75, x_desc, x, y_desc, y, conv, algo.enum, ws, beta, w_desc, w)
    return np.ascontiguousarray(out).tobytes()


def deterministic_cases():
    cases = []
    for direction in DIRECTIONS:
        for algo in registry.algorithms("conv", direction, "numpy"):
            if not algo.deterministic:
                continue
            for index in range(len(PROBLEMS)):
                conv, (x_desc, _), (w_desc, _), (y_desc, _) = _tensors(index, direction)
                if algo.not_applicable(ConvProblem(direction, x_desc, w_desc, y_desc, conv)) is None:
                    cases.append((direction, algo.name, index))
    return cases


def _algo(direction, name):
    return next(a for a in registry.algorithms("conv", direction, "numpy") if a.name == name)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_repeated_runs_are_bit_identical(direction):
    if getattr(tridnn, API[direction], None) is None:
        pytest.skip(f"{direction} API not implemented yet")
    cases = [c for c in deterministic_cases() if c[0] == direction]
    if not cases:
        pytest.skip(f"no deterministic {direction} algorithm registered")
    for _, name, index in cases:
        algo = _algo(direction, name)
        for beta in (0.0, 0.5):
            first = run_algorithm(index, direction, algo, workspace_fill=1, beta=beta)
            for fill in (2, 3):  # other garbage in the workspace must not matter
                again = run_algorithm(index, direction, algo, workspace_fill=fill, beta=beta)
                assert again == first, (f"{direction} {name} on problem {index} (beta {beta}): "
                                        f"results differ between runs")


CHILD = """
    import hashlib, json, sys
    sys.path.insert(0, sys.argv[1])
    import test_determinism as t
    out = {}
    for direction, name, index in t.deterministic_cases():
        data = t.run_algorithm(index, direction, t._algo(direction, name), workspace_fill=1)
        out[f"{direction}/{name}/{index}"] = hashlib.sha256(data).hexdigest()
    print(json.dumps(out))
"""


def _digests(threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=SRC, OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), str(Path(__file__).parent)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_reproducible_across_processes_at_each_thread_count():
    """A fresh process with the same BLAS/OpenMP thread count gives the same bits."""
    for threads in (1, 2):
        first, second = _digests(threads), _digests(threads)
        assert first, "no deterministic algorithm ran"
        differ = [k for k in first if second.get(k) != first[k]]
        assert not differ, f"with {threads} threads two processes differ: {differ}"


def test_results_agree_across_multithreaded_counts():
    """2 and 4 threads agree. (1 thread may not, for the BLAS-backed algorithms: OpenBLAS
    runs a single-threaded GEMM through other edge kernels than a split one, so some dot
    products are summed in another order; docs/reliability.md lists which. tridnn's
    determinism, like cuDNN's, is per configuration, and the thread count is part of it.)"""
    two, four = _digests(2), _digests(4)
    differ = [k for k in two if four.get(k) != two[k]]
    assert two.keys() == four.keys() and not differ, f"2 and 4 threads differ: {differ}"


def one_vs_two_threads() -> list[str]:
    """The cases whose bits differ between 1 and 2 threads (for docs/reliability.md)."""
    one, two = _digests(1), _digests(2)
    return sorted(k for k in one if two.get(k) != one[k])
