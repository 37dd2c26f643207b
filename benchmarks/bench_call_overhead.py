"""Per-call host overhead of each API layer on a tiny convolution (1x1x4x4, 3x3 filter).

The kernel itself costs a few microseconds here, so the differences between the rows
are what each layer adds: the algorithm alone (execute with prepared views), the
descriptor API (validation every call), the functional API (cached plan), the torch
custom op, and torch's own conv2d for scale. Rows are interleaved and repeated; the
median of the repeats is reported, in CPU time of the calling thread.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_call_overhead.py
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

import tridnn
from tridnn.algorithms.problem import ConvProblem
from tridnn.api.convolution import execute


def per_call_us(fn, calls):
    """CPU time of this thread per call: on a machine shared with other jobs, wall time
    mostly measures the scheduler; this problem is too small for BLAS threads."""
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls * 1e6


def main(calls=2000, repeats=7):
    handle = tridnn.Handle(find_cache=None)
    x = np.ones((1, 1, 4, 4), np.float32)
    w = np.ones((1, 1, 3, 3), np.float32)
    x_desc, w_desc = tridnn.TensorDescriptor.like(x), tridnn.FilterDescriptor.like(w)
    conv = tridnn.ConvolutionDescriptor()
    y_desc = tridnn.TensorDescriptor.nchw(*conv.output_dims(x_desc, w_desc))
    y = np.empty(y_desc.dims, np.float32)
    from tridnn.algorithms import registry
    pinned = tridnn.ConvFwdAlgo.IMPLICIT_GEMM  # one cheap algorithm for the rows that compare layers
    algo = registry.by_enum("conv", "fwd", "numpy", pinned)
    auto = tridnn.api.functional.selection.choose(handle, ConvProblem.forward(x_desc, w_desc, conv))
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
    ws = np.empty(max(algo.workspace_size(problem), 1), np.uint8)
    views = {"x": x, "w": w, "y": y}
    rows = {
        f"algorithm only ({algo.name}, execute)": lambda: execute(handle, problem, algo, views, ws, 1.0, 0.0),
        "descriptor API (convolution_forward)": lambda: tridnn.convolution_forward(
            handle, 1.0, x_desc, x, w_desc, w, conv, algo.enum, ws, 0.0, y_desc, y),
        f"functional API (tridnn.conv, algo={pinned.name})": lambda: tridnn.conv(x, w, algo=pinned,
                                                                                  handle=handle),
        f"functional API (tridnn.conv, algo='auto' -> {auto.name})": lambda: tridnn.conv(x, w, handle=handle),
    }
    try:
        import torch
        import tridnn.torch as _  # noqa: F401  (registers torch.ops.tridnn)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        tridnn.conv(tx, tw)
        rows[f"torch custom op (torch.ops.tridnn.conv_forward, auto -> {auto.name})"] = lambda: torch.ops.tridnn.conv_forward(
            tx, tw, None, [1, 1], [0, 0], [0, 0], [1, 1], 1)
        rows["torch.nn.functional.conv2d (oneDNN)"] = lambda: torch.nn.functional.conv2d(tx, tw)
    except ImportError:
        pass
    samples = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            fn()
            samples[name].append(per_call_us(fn, calls))
    result = {name: statistics.median(v) for name, v in samples.items()}
    width = max(map(len, result))
    for name, us in result.items():
        print(f"{name:<{width}}  {us:8.1f} us/call")
    json.dump(result, sys.stdout if "--json" in sys.argv else open("/dev/null", "w"), indent=1)


if __name__ == "__main__":
    main()
