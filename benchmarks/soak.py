"""Soak: many calls of a mixed, tiny workload; process memory must stay flat and the
handle's workspace arena must never grow past its limit.

The workload cycles through forward convolution with every registered algorithm
(explicit workspaces), backward data and filter, get, an occasional find (its
winner stored in a sqlite find cache; open file descriptors are counted too), the
functional API (conv, conv_transpose, pooling, activations, softmax, batch norm) on
a shared handle with a small workspace limit, and hostile calls that must raise.
RSS (VmRSS from /proc/self/status) is read after a warm-up (caches, plans and lazy
imports settle) and at the end; its growth per 1,000 calls is the figure that
matters. Usage:

    nice -n 19 .venv/bin/python benchmarks/soak.py --calls 100000 --json out/soak.json
    PYTHONPATH=src TRIDNN_TUNE=first python3 benchmarks/soak.py --device cuda --calls 100000

``--device cuda`` runs the same kind of cycle through the Triton backend on torch CUDA
tensors (every applicable Triton convolution algorithm in three directions, both
layouts, float32 and bfloat16, the functional layers, hostile calls) and also reads
PyTorch's allocated and reserved GPU bytes before and after.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import tempfile
import sys
import time
from pathlib import Path

import numpy as np

import tridnn
from tridnn import testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem

WORKSPACE_LIMIT = 4 << 20


def rss_kib() -> dict:
    """VmRSS and VmHWM (peak) of this process, in KiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def open_fds() -> int:
    """File descriptors this process holds (a leaked sqlite connection would show here)."""
    return len(os.listdir("/proc/self/fd"))


def conv_algorithm_calls(handle, backend, conv, x, w, y, dx, dw, workspace) -> list:
    """One call per applicable registered algorithm of ``backend`` in each direction:
    forward blends into y (beta 0.5); the backward passes write dx and dw, so x, w and y
    keep their values. ``x``, ``w``, ``y``: (descriptor, array); ``workspace(bytes)``
    makes the algorithm's workspace."""
    (x_desc, xa), (w_desc, wa), (y_desc, ya) = x, w, y
    calls = []
    for direction, fn in (("fwd", tridnn.convolution_forward),
                          ("bwd_data", tridnn.convolution_backward_data),
                          ("bwd_filter", tridnn.convolution_backward_filter)):
        problem = ConvProblem(direction, x_desc, w_desc, y_desc, conv)
        for algo in registry.algorithms("conv", direction, backend):
            if algo.not_applicable(problem) is not None:
                continue
            ws = workspace(algo.workspace_size(problem))
            if direction == "fwd":
                args = (handle, 1.0, x_desc, xa, w_desc, wa, conv, algo.enum, ws, 0.5, y_desc, ya)
            elif direction == "bwd_data":
                args = (handle, 1.0, w_desc, wa, y_desc, ya, conv, algo.enum, ws, 0.0, x_desc, dx)
            else:
                args = (handle, 1.0, x_desc, xa, y_desc, ya, conv, algo.enum, ws, 0.0, w_desc, dw)
            calls.append(lambda fn=fn, args=args: fn(*args))
    return calls


def build_workload(rng, cache_path):
    """A list of zero-argument callables, each one API call (or one expected error)."""
    handle = tridnn.Handle(find_cache=cache_path, workspace_limit=WORKSPACE_LIMIT, find_time_budget_s=0.002)
    calls = []
    shapes = [((2, 3, 7, 6), (4, 3, 3, 3), 1, 1, 1), ((1, 4, 9), (4, 1, 3), 1, 2, 4),
              ((1, 2, 4, 5, 4), (2, 2, 3, 1, 3), 1, 1, 1), ((3, 8, 5, 5), (8, 4, 1, 1), 0, 1, 2)]
    for x_dims, w_dims, pad, stride, groups in shapes:
        conv = tridnn.ConvolutionDescriptor(padding=pad, stride=stride, groups=groups, nd=len(x_dims) - 2)
        for layout in ("NCHW", "NHWC"):
            x_desc, x = testing.make_tensor(x_dims, "float32", layout, rng, testing.fill(x_dims, "float32", rng))
            w_desc, w = testing.make_filter(w_dims, "float32", layout, testing.fill(w_dims, "float32", rng))
            y_dims = conv.output_dims(x_desc, w_desc)
            y_desc, y = testing.make_tensor(y_dims, "float32", layout, rng, testing.fill(y_dims, "float32", rng))
            # the backward passes write their own outputs, so the inputs stay as filled
            _, dx = testing.make_tensor(x_dims, "float32", layout, rng)
            _, dw = testing.make_filter(w_dims, "float32", layout)
            calls += conv_algorithm_calls(handle, "numpy", conv, (x_desc, x), (w_desc, w), (y_desc, y), dx, dw,
                                          lambda need: np.empty(need, np.uint8))
            calls.append(lambda a=(handle, x_desc, w_desc, conv, y_desc):
                         tridnn.get_convolution_forward_algorithm(*a))
            calls.append(lambda a=(handle, 1.0, x_desc, x, w_desc, w, conv, tridnn.ConvFwdAlgo.GEMM,
                                   None, 0.0, y_desc, y): _expect_error(tridnn.convolution_forward, a,
                                                                        dict(workspace=None)))
        xv = testing.fill(x_dims, "float32", rng)
        wv = testing.fill(w_dims, "float32", rng)
        calls.append(lambda xv=xv, wv=wv, p=pad, s=stride, g=groups:
                     tridnn.conv(xv, wv, stride=s, padding=p, groups=g, handle=handle))
    x4 = testing.fill((2, 4, 8, 8), "float32", rng)
    w4 = testing.fill((4, 4, 3, 3), "float32", rng)
    calls += [
        lambda: tridnn.conv_transpose(x4, w4, stride=2, padding=1, handle=handle),
        lambda: tridnn.max_pool(x4, 2, handle=handle),
        lambda: tridnn.avg_pool(x4, 3, stride=1, padding=1, handle=handle),
        lambda: tridnn.relu(x4, handle=handle),
        lambda: tridnn.softmax(x4, handle=handle),
        lambda: tridnn.batch_norm(x4, training=True, handle=handle),
        lambda: _expect_error(tridnn.TensorDescriptor, ((2, -1, 3),), {}),
        lambda: _expect_error(tridnn.convolution_forward, (handle, float("nan")), {}),
    ]
    find_args = (handle, tridnn.TensorDescriptor((1, 2, 5, 5)), tridnn.FilterDescriptor((2, 2, 3, 3)),
                 tridnn.ConvolutionDescriptor(padding=1, nd=2), tridnn.TensorDescriptor((1, 2, 5, 5)))
    return handle, calls, lambda: tridnn.find_convolution_forward_algorithm(*find_args)


def build_cuda_workload(device):
    """The cycle of ``build_workload`` on the Triton backend with torch CUDA tensors."""
    import torch
    torch.manual_seed(0)
    interpreted = device == "triton-cpu"  # a dry run through Triton's interpreter (float32 only)
    if interpreted:
        device = "cpu"
    handle = tridnn.Handle(device=device, find_cache=None, workspace_limit=64 << 20,
                           **({"backend": "triton"} if interpreted else {}))
    calls = []
    shapes = [((2, 16, 9, 7), (16, 16, 3, 3), 1, 1, 1), ((2, 16, 8, 8), (32, 16, 1, 1), 0, 2, 1),
              ((1, 8, 10, 10), (8, 1, 3, 3), 1, 1, 8), ((2, 3, 12, 12), (16, 3, 7, 7), 3, 2, 1)]
    for i, (x_dims, w_dims, pad, stride, groups) in enumerate(shapes):
        conv = tridnn.ConvolutionDescriptor(padding=pad, stride=stride, groups=groups, nd=2)
        # every shape in bfloat16, the first also in float32 (each dtype is another compile
        # of every kernel: the first cycle's compiles dominate a GPU soak's time)
        for dtype in (torch.float32,) if interpreted else (torch.bfloat16,) + ((torch.float32,) if i == 0 else ()):
            for fmt in (torch.contiguous_format, torch.channels_last):
                def make(dims):
                    return torch.randint(-2, 3, dims, device=device).to(dtype).contiguous(memory_format=fmt)
                x, w = make(x_dims), make(w_dims)
                x_desc = tridnn.TensorDescriptor.like(x)
                w_desc = tridnn.FilterDescriptor.like(w)
                y_dims = conv.output_dims(x_desc, w_desc)
                y, dx, dw = make(y_dims), torch.empty_like(x), torch.empty_like(w)
                y_desc = tridnn.TensorDescriptor.like(y)
                calls += conv_algorithm_calls(
                    handle, "triton", conv, (x_desc, x), (w_desc, w), (y_desc, y), dx, dw,
                    lambda need: torch.empty(need, dtype=torch.uint8, device=device) if need else None)
                calls.append(lambda a=(handle, x_desc, w_desc, conv, y_desc):
                             tridnn.get_convolution_forward_algorithm(*a))
                calls.append(lambda x=x, w=w, p=pad, s=stride, g=groups:
                             tridnn.conv(x, w, stride=s, padding=p, groups=g, handle=handle))
    for fmt in (torch.contiguous_format, torch.channels_last):
        x4 = torch.randn(2, 16, 8, 8, device=device).contiguous(memory_format=fmt)
        w4 = torch.randn(16, 16, 3, 3, device=device)
        calls += [
            lambda x4=x4, w4=w4: tridnn.conv_transpose(x4, w4, stride=2, padding=1, handle=handle),
            lambda x4=x4: tridnn.max_pool(x4, 2, handle=handle),
            lambda x4=x4: tridnn.avg_pool(x4, 3, stride=1, padding=1, handle=handle),
            lambda x4=x4: tridnn.relu(x4, handle=handle),
            lambda x4=x4: tridnn.softmax(x4, handle=handle),
            lambda x4=x4: tridnn.batch_norm(x4, training=True, handle=handle),
        ]
    calls += [
        lambda: _expect_error(tridnn.TensorDescriptor, ((2, -1, 3),), {}),
        lambda: _expect_error(tridnn.convolution_forward, (handle, float("nan")), {}),
    ]
    return handle, calls


def gpu_bytes(device) -> dict:
    import torch
    torch.cuda.synchronize(device)
    return {"allocated": torch.cuda.memory_allocated(device), "reserved": torch.cuda.memory_reserved(device)}


def _expect_error(fn, args, _kwargs):
    try:
        fn(*args)
    except tridnn.TridnnError:
        return
    except TypeError:  # a call with missing arguments (the NaN-alpha probe) counts as rejected
        return
    raise AssertionError(f"{fn.__name__}{args[:2]} did not raise")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=3_000)
    parser.add_argument("--find-every", type=int, default=5_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", default="cpu", help="cpu (NumPy backend), cuda[:N] (Triton backend) or "
                        "triton-cpu (the cuda cycle through Triton's interpreter: a dry run)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    cache_dir = tempfile.mkdtemp(prefix="tridnn-soak-")
    gpu = args.device.startswith("cuda")
    if gpu or args.device == "triton-cpu":
        handle, calls = build_cuda_workload(args.device)
        find, args.find_every = None, 0
    else:
        handle, calls, find = build_workload(rng, Path(cache_dir) / "find.sqlite3")
    limit = WORKSPACE_LIMIT if args.device == "cpu" else handle.workspace_limit
    print(f"{len(calls)} distinct calls in the cycle; {args.calls} calls in all", flush=True)
    samples = []
    max_arena = 0
    start = time.perf_counter()
    before = None
    for i in range(args.calls):
        if i == args.warmup:
            gc.collect()
            before = rss_kib()
            fds_before = open_fds()
            gpu_before = gpu_bytes(args.device) if gpu else None
            samples.append((i, before["VmRSS"]))
        if args.find_every and i % args.find_every == args.find_every - 1:
            find()
        else:
            calls[i % len(calls)]()
        arena = handle.arena_bytes
        max_arena = max(max_arena, arena)
        if arena > limit:
            raise AssertionError(f"call {i}: the arena grew to {arena} bytes, over the limit {limit}")
        if i and i % (2_000 if gpu else 10_000) == 0:
            samples.append((i, rss_kib()["VmRSS"]))
            print(f"{i:>7} calls  RSS {samples[-1][1] / 1024:.1f} MiB  "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    gc.collect()
    after = rss_kib()
    fds_after = open_fds()
    gpu_after = gpu_bytes(args.device) if gpu else None
    seconds = time.perf_counter() - start
    measured = args.calls - args.warmup
    growth = after["VmRSS"] - before["VmRSS"]
    result = dict(
        date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), machine=platform.machine(), python=platform.python_version(),
        numpy=np.__version__, tridnn=tridnn.__version__, calls=args.calls, warmup=args.warmup,
        distinct_calls=len(calls), seconds=round(seconds, 1),
        rss_before_kib=before["VmRSS"], rss_after_kib=after["VmRSS"], rss_growth_kib=growth,
        rss_growth_kib_per_1000_calls=round(growth / measured * 1000, 3), peak_rss_kib=after["VmHWM"],
        workspace_limit=limit, max_arena_bytes=max_arena, open_fds_before=fds_before,
        open_fds_after=fds_after, find_cache_entries=0 if gpu else len(handle.find_cache), device=args.device,
        gpu_bytes_before=gpu_before, gpu_bytes_after=gpu_after, rss_samples=samples)
    shutil.rmtree(cache_dir, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k != "rss_samples"}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    flat = growth <= max(2048, 0.02 * before["VmRSS"]) and fds_after <= fds_before
    if gpu:
        flat = flat and gpu_after["allocated"] <= gpu_before["allocated"]
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
