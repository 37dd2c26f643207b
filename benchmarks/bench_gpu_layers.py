"""Every Triton layer kernel, forward and backward, against PyTorch's CUDA equivalent.

Spatial layers run on 64x256x56x56 bfloat16 in NCHW and NHWC (channels_last);
softmax, log-softmax and the row norms on 32768x4096 bfloat16. Each candidate is
captured in a CUDA graph and its replays are timed (median; the L2 flushed before each
replay, see ``flush_l2``), so the numbers are device time; the eager (host-launched) time of
the tridnn call is also recorded. TB/s counts minimal bytes: every input of the call read once
and every output written once. The two candidates of a layer run back to back in one
process, and where both compute the same thing the tridnn result is compared with
PyTorch's (``err``: max |tridnn - torch| / max(1, max |torch|)).

Rows marked ``[...]`` are alternative tridnn designs of the row above them (a module
switch flipped for that call), so one run decides between them.

    PYTHONPATH=src python benchmarks/bench_gpu_layers.py [--out results.json] [--only NAME]
    PYTHONPATH=src python benchmarks/bench_gpu_layers.py --dry-run   # CPU, interpreter, tiny shapes
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

DRY_RUN = "--dry-run" in sys.argv
if DRY_RUN:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from tridnn.cuda import (activation, batchnorm, dropout, group_norm_coop, lrn, norms, pooling,  # noqa: E402
                         softmax, tensor_ops)

if DRY_RUN:
    DEVICE, DT, SPATIAL, ROWS = "cpu", torch.float32, (2, 32, 10, 12), (8, 2048)  # W % 4 == 0, K > 1024
else:
    DEVICE, DT, SPATIAL, ROWS = "cuda", torch.bfloat16, (64, 256, 56, 56), (32768, 4096)
GROUPS = 32


FLUSH = "clean"  # --flush: how the L2 is emptied before each timed replay (see flush_l2)
FLUSH_BYTES = 256 << 20  # five times the L2 of an H100 or H200 (50 MB)
_flush_buffers = {}


def flush_l2():
    """Empty the L2 before a timed call. "dirty" is triton.testing.do_bench's flush: zero a
    256 MB buffer, which leaves the L2 full of dirty lines that the timed kernel then has to
    write back (~50 MB: ~15 us at the H100's copy rate, charged to a kernel that moves ~100
    MB). "clean" zeroes the buffer, then reads another 256 MB one, so those write-backs
    happen before the timer starts and the timed call starts on a cold, clean L2 (as after
    a previous layer that read its data: the brief's 4.27 TB/s copy ceiling is such a
    measurement)."""
    if not _flush_buffers:
        _flush_buffers.update(dirty=torch.empty(FLUSH_BYTES, dtype=torch.int8, device=DEVICE),
                              clean=torch.ones(FLUSH_BYTES // 4, dtype=torch.float32, device=DEVICE),
                              sink=torch.empty((), dtype=torch.float32, device=DEVICE))
    _flush_buffers["dirty"].zero_()
    if FLUSH == "clean":
        torch.sum(_flush_buffers["clean"], dim=0, out=_flush_buffers["sink"])


def flushed_median_ms(fn, warmup_ms=10.0, rep_ms=60.0) -> float:
    """Median ms of fn, each call after flush_l2 (do_bench's loop with our flush)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush_l2()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)  # includes the flush: fewer reps, never too few
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    n = max(5, int(rep_ms / estimate))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        flush_l2()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return times[len(times) // 2]


def graph_time(fn, who="") -> float:
    """Median ms of a CUDA-graph replay of fn (falls back to eager timing)."""
    fn()
    torch.cuda.synchronize()
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # captured on the warm-up stream: state a call keeps per stream (the split
        # reduction's ticket counters) exists already and is not re-created in the graph
        with torch.cuda.graph(graph, stream=stream):
            fn()
    except Exception as exc:  # noqa: BLE001 - report and time eagerly
        print(f"  ({who} graph capture failed: {type(exc).__name__}: {str(exc).splitlines()[0]}; timing eagerly)",
              file=sys.stderr)
        torch.cuda.synchronize()
        return flushed_median_ms(fn)
    return flushed_median_ms(graph.replay)


def eager_time(fn) -> float:
    """Median ms of the host-launched call (host time included when it exceeds the GPU's)."""
    return flushed_median_ms(fn, warmup_ms=5.0, rep_ms=20.0)


def wall_time(fn, who="") -> float:
    """Dry run: one call, wall-clock ms (the interpreter; only shows the case runs)."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# issue 5 candidates for reductions over H, W (tensor_ops switches). NCHW: grid and
# occupancy (sm_90 registers) - runs 4 rows: 4096 programs, 32 regs, 16/SM (1.94 waves);
# 8: 2048, 40 regs, 12/SM (1.29 waves); 16: 1024, 56 regs, 9/SM (0.86); 8 rows x 4096:
# 2048, 64 regs, 8/SM. NHWC: 256-channel tiles (contiguous 8 KB steps), 64 row blocks
# split to 4/8/16 programs an SM (576, 1088, 2112 programs; 9 resident at 3 stages).
REDUCE_ISSUE5_VARIANTS_NCHW = (
    ("runs 4 rows", (("CONTIGUOUS_ROWS_KERNEL", "runs"), ("RUNS_ROWS", 4))),
    ("runs 8 rows", (("CONTIGUOUS_ROWS_KERNEL", "runs"), ("RUNS_ROWS", 8))),
    ("runs 16 rows", (("CONTIGUOUS_ROWS_KERNEL", "runs"), ("RUNS_ROWS", 16))),
    ("runs 8 rows x 4096", (("CONTIGUOUS_ROWS_KERNEL", "runs"), ("RUNS_ROWS", 8), ("RUNS_BLOCK", 4096))))
REDUCE_ISSUE5_VARIANTS_NHWC = (
    ("256 ch x 16, 8/SM", (("STRIDED_ROWS_BLOCK_K", 256), ("STRIDED_ROWS_BLOCK_R", 16), ("SPLIT_PROGRAMS_PER_SM", 8))),
    ("256 ch x 16, 16/SM", (("STRIDED_ROWS_BLOCK_K", 256), ("STRIDED_ROWS_BLOCK_R", 16),
                            ("SPLIT_PROGRAMS_PER_SM", 16))),
    ("256 ch x 16, 4/SM", (("STRIDED_ROWS_BLOCK_K", 256), ("STRIDED_ROWS_BLOCK_R", 16))),
    ("256 ch x 32, 8/SM", (("STRIDED_ROWS_BLOCK_K", 256), ("STRIDED_ROWS_BLOCK_R", 32), ("SPLIT_PROGRAMS_PER_SM", 8))),
    ("256 ch x 16, 8/SM, last combines", (("STRIDED_ROWS_BLOCK_K", 256), ("STRIDED_ROWS_BLOCK_R", 16),
                                          ("SPLIT_PROGRAMS_PER_SM", 8), ("SPLIT_COMBINE", "last"))),
    ("256 ch x 16, 16/SM, last combines", (("STRIDED_ROWS_BLOCK_K", 256), ("STRIDED_ROWS_BLOCK_R", 16),
                                           ("SPLIT_PROGRAMS_PER_SM", 16), ("SPLIT_COMBINE", "last"))))


def switched(module, name, value, fn):
    """fn with module.name = value for the duration of the call (graph capture included)."""
    def run():
        saved = getattr(module, name)
        setattr(module, name, value)
        try:
            return fn()
        finally:
            setattr(module, name, saved)
    return run


def switched_all(module, settings, fn):
    """fn with every (name, value) of settings set on module for the call."""
    for name, value in reversed(settings):
        fn = switched(module, name, value, fn)
    return fn


def first(t):
    return t[0] if isinstance(t, (tuple, list)) else t


class Case:
    """One layer: the tridnn call, PyTorch's call, the minimal bytes, and optionally how
    to compare them (check() -> (tridnn tensor, torch tensor) after both ran)."""

    def __init__(self, name, tri, ref, moved, check=None):
        self.name, self.tri, self.ref, self.moved, self.check = name, tri, ref, moved, check


def spatial_cases(layout):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    new = lambda shape=SPATIAL: torch.randn(shape, device=DEVICE, generator=g).to(DT).contiguous(memory_format=fmt)  # noqa: E731
    x, dy_full, z = new(), new(), new()
    y = torch.empty_like(x)
    dx = torch.empty_like(x)
    N, C, H, W = SPATIAL
    w = torch.randn(C, device=DEVICE, generator=g)
    b = torch.randn(C, device=DEVICE, generator=g)
    w4, b4 = w.view(1, C, 1, 1), b.view(1, C, 1, 1)
    rm, rv = torch.zeros(1, C, 1, 1, device=DEVICE), torch.ones(1, C, 1, 1, device=DEVICE)
    sm, si = torch.empty(1, C, 1, 1, device=DEVICE), torch.empty(1, C, 1, 1, device=DEVICE)
    out = {}  # torch results kept for the checks
    cases = []

    def keep(key, fn):
        def run():
            out[key] = fn()
            return out[key]
        return run

    # activations
    for name, mode, tfwd in (("relu", 1, torch.relu), ("gelu", 101, F.gelu), ("sigmoid", 0, torch.sigmoid)):
        cases.append(Case(f"{name} fwd", lambda mode=mode: activation.activation_forward(
            x, y, mode=mode, coef=0.0, swish_beta=1.0, propagate_nan=False, alpha=1.0, beta=0.0),
            keep(name, lambda tfwd=tfwd: tfwd(x)), nbytes(x, y), lambda name=name: (y, out[name])))
    cases.append(Case("relu bwd", lambda: activation.activation_backward(
        y, dy_full, x, dx, mode=1, coef=0.0, swish_beta=1.0, alpha=1.0, beta=0.0),
        lambda: torch.ops.aten.threshold_backward(dy_full, x, 0.0), nbytes(x, dy_full, dx)))
    cases.append(Case("gelu bwd", lambda: activation.activation_backward(
        y, dy_full, x, dx, mode=activation.GELU, coef=0.0, swish_beta=1.0, alpha=1.0, beta=0.0),
        keep("gelub", lambda: torch.ops.aten.gelu_backward(dy_full, x)), nbytes(x, dy_full, dx),
        lambda: (dx, out["gelub"])))

    def gelu_rows(label, setting):
        """gelu forward and backward, timed under ``setting`` (a switched(...) wrapper)."""
        cases.append(Case(f"gelu fwd [{label}]", setting(lambda: activation.activation_forward(
            x, y, mode=activation.GELU, coef=0.0, swish_beta=1.0, propagate_nan=False, alpha=1.0, beta=0.0)),
            keep("gelu", lambda: F.gelu(x)), nbytes(x, y), lambda: (y, out["gelu"])))
        cases.append(Case(f"gelu bwd [{label}]", setting(lambda: activation.activation_backward(
            y, dy_full, x, dx, mode=activation.GELU, coef=0.0, swish_beta=1.0, alpha=1.0, beta=0.0)),
            keep("gelub", lambda: torch.ops.aten.gelu_backward(dy_full, x)), nbytes(x, dy_full, dx),
            lambda: (dx, out["gelub"])))
    # gelu with gelu_cdf instead of erf (activation.GELU_ERF), both layouts
    for variant, label in (("exact", "exact erf"), ("fast_div", "fast erf, div")):
        gelu_rows(label, lambda fn, variant=variant: switched(activation, "GELU_ERF", variant, fn))
    if layout == "NCHW":  # fast gelu at 1024 x 4 too (fewer instructions may prefer the general tile)
        gelu_rows("fast erf, 1024x4 warps", lambda fn: switched(activation, "GELU_ERF", "fast", switched(
            activation, "TILES", {activation.GELU: (1024, 4)}, fn)))
        # gelu with other (elements per program, warps); flat in both layouts
        for block, warps in ((512, 4), (1024, 4), (2048, 8), (4096, 8)):
            gelu_rows(f"{block}x{warps} warps", lambda fn, block=block, warps=warps: switched(
                activation, "TILES", {activation.GELU: (block, warps)}, fn))

    # pooling
    oh, ow = (H + 2 - 3) // 2 + 1, (W + 2 - 3) // 2 + 1
    py = torch.empty((N, C, oh, ow), device=DEVICE, dtype=DT).contiguous(memory_format=fmt)
    pdy = torch.randn((N, C, oh, ow), device=DEVICE, generator=g).to(DT).contiguous(memory_format=fmt)
    _, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    maxfwd = lambda: pooling.pooling_forward(x, py, 0, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)  # noqa: E731
    maxbwd = lambda: pooling.pooling_backward(py, pdy, x, dx, 0, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)  # noqa: E731
    avgfwd = lambda: pooling.pooling_forward(x, py, 1, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)  # noqa: E731
    avgbwd = lambda: pooling.pooling_backward(py, pdy, x, dx, 1, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)  # noqa: E731
    tmaxfwd = keep("maxfwd", lambda: F.max_pool2d(x, 3, 2, 1))
    tmaxbwd = keep("maxbwd", lambda: torch.ops.aten.max_pool2d_with_indices_backward(
        pdy, x, [3, 3], [2, 2], [1, 1], [1, 1], False, idx))
    tavgfwd = keep("avgfwd", lambda: F.avg_pool2d(x, 3, 2, 1))
    tavgbwd = lambda: torch.ops.aten.avg_pool2d_backward(  # noqa: E731
        pdy, x, [3, 3], [2, 2], [1, 1], False, True, None)

    def avgbwd_reference():
        """On NCHW copies: PyTorch's channels-last CUDA avg_pool2d backward with padding
        maps inputs to the wrong windows (pytorch/pytorch#188344, in torch 2.11); it is
        still the timed baseline."""
        if "avgbwd" not in out:
            out["avgbwd"] = torch.ops.aten.avg_pool2d_backward(pdy.contiguous(), x.contiguous(), [3, 3], [2, 2],
                                                               [1, 1], False, True, None)
        return out["avgbwd"]

    # the four pooling layers: (name, tridnn call, torch call, bytes moved, torch's result, tridnn's output)
    pool_ops = (("maxpool3x3s2 fwd", maxfwd, tmaxfwd, nbytes(x, py), lambda: out["maxfwd"], py),
                ("maxpool3x3s2 bwd", maxbwd, tmaxbwd, nbytes(x, py, pdy, dx), lambda: out["maxbwd"], dx),
                ("avgpool3x3s2 fwd", avgfwd, tavgfwd, nbytes(x, py), lambda: out["avgfwd"], py),
                ("avgpool3x3s2 bwd", avgbwd, tavgbwd, nbytes(pdy, dx), avgbwd_reference, dx))
    for name, fn, ref, moved, want, res in pool_ops:
        cases.append(Case(name, fn, ref, moved, lambda want=want, res=res: (res, want())))
    if layout == "NCHW":  # the gather kernels instead of the row kernels
        for name, fn, ref, moved, want, res in pool_ops:
            if name == "avgpool3x3s2 fwd":
                continue  # no gather row for the average forward (as before)
            cases.append(Case(f"{name} [gather]", switched(pooling, "ROW_KERNELS", False, fn), ref, moved,
                              lambda want=want, res=res: (res, want())))
        # the design before the NCHW lane forward (pooling.NCHW_LANE_KERNELS, the default
        # for every forward since session 6), the row kernels. (Max backward's gather by the
        # lane kernel, its default before session 35, was removed in session 36: H100 194.9
        # us for the whole backward against 152.0 with the row gather.)
        for name, fn, ref, moved, want, res in pool_ops:
            cases.append(Case(f"{name} [row kernels]", switched(pooling, "NCHW_LANE_KERNELS", frozenset(), fn),
                              ref, moved, lambda want=want, res=res: (res, want())))
    else:  # channels-last: the gather kernels (the design before CL_KERNELS) and the row kernels' settings
        variants = (("gather", [("CL_KERNELS", False)]), ("cl packed max", [("CL_PACKED_MAX", True)]),
                    ("cl 8 rows", [("CL_ROWS", 8)]), ("cl 2 rows", [("CL_ROWS", 2)]),
                    ("cl 4 warps", [("CL_WARPS", 4)]), ("cl running rule", [("CL_ARG_EQ", False)]),
                    ("cl 16 cols 4 warps", [("CL_BLOCK_W", 16), ("CL_WARPS", 4)]))
        for name, fn, ref, moved, want, res in pool_ops:
            for label, settings in variants:
                if label == "cl packed max" and not name.startswith("maxpool3x3s2 fwd"):
                    continue  # the packed max serves only max-only folds (the forward without taps)
                if label == "cl running rule" and not name.startswith("maxpool3x3s2 bwd"):
                    continue  # CL_ARG_EQ changes only the taps pass of max backward
                cases.append(Case(f"{name} [{label}]", switched_all(pooling, settings, fn), ref, moved,
                                  lambda want=want, res=res: (res, want())))
    ay = torch.empty((N, C, 1, 1), device=DEVICE, dtype=DT).contiguous(memory_format=fmt)
    adaptive = lambda: pooling.adaptive_pooling_forward(x, ay, 1, 1.0, 0.0)  # noqa: E731
    t_adaptive = keep("adaptive", lambda: F.adaptive_avg_pool2d(x, 1))
    cases.append(Case("adaptive avgpool 1x1 fwd", adaptive, t_adaptive, nbytes(x, ay),
                      lambda: (ay, out["adaptive"])))
    # On a Hopper GPU, NHWC sums over H*W take gluon_stream's route, so tensor_ops' Triton
    # switches change nothing there unless the route is off: the NHWC alternative rows turn it
    # off and say so ("triton"), and compare the Triton kernel's designs with the route (the
    # main row). Before session 33 they left it on and all measured the route.
    triton_nhwc, tag = (lambda fn: switched(tensor_ops, "GLUON_STREAM", False, fn), "triton, ") \
        if layout == "NHWC" else (lambda fn: fn, "")
    if layout == "NHWC":  # the Triton reduction as it is, without the split along H * W, ...
        cases.append(Case("adaptive avgpool 1x1 fwd [triton]", triton_nhwc(adaptive), t_adaptive, nbytes(x, ay),
                          lambda: (ay, out["adaptive"])))
        for label, fn in (("no split", switched(tensor_ops, "REDUCE_SPLIT", 1, adaptive)),
                          ("last combines", switched(tensor_ops, "SPLIT_COMBINE", "last", adaptive)),
                          ("split 2 parts", switched(tensor_ops, "REDUCE_SPLIT", 2, adaptive)),
                          ("stages 2", switched(tensor_ops, "STRIDED_ROWS_STAGES", 2, adaptive)),
                          ("split 2 parts, last combines", switched(tensor_ops, "SPLIT_COMBINE", "last", switched(
                              tensor_ops, "REDUCE_SPLIT", 2, adaptive)))):
            cases.append(Case(f"adaptive avgpool 1x1 fwd [{tag}{label}]", triton_nhwc(fn), t_adaptive, nbytes(x, ay),
                              lambda: (ay, out["adaptive"])))
    # issue 5: NCHW rows as contiguous runs of whole rows; NHWC tiles of 256 channels
    for label, settings in (REDUCE_ISSUE5_VARIANTS_NCHW if layout == "NCHW" else REDUCE_ISSUE5_VARIANTS_NHWC)[:2]:
        cases.append(Case(f"adaptive avgpool 1x1 fwd [{tag}{label}]",
                          triton_nhwc(switched_all(tensor_ops, settings, adaptive)),
                          t_adaptive, nbytes(x, ay), lambda: (ay, out["adaptive"])))

    # batch norm; the alternative row flips L2_REUSE (on: the apply pass re-reads the
    # stats pass's last tiles from the L2 first, with cache hints)
    tw, tb = w.clone(), b.clone()
    trm, trv = torch.zeros(C, device=DEVICE), torch.ones(C, device=DEVICE)
    bn_fwd = lambda: batchnorm.batch_norm_forward_training(x, None, y, w4, b4, rm, rv, sm, si, 1, 0.1, 1e-5, 0,  # noqa: E731
                                                           1.0, 0.0)
    bn_add = lambda: batchnorm.batch_norm_forward_training(x, z, y, w4, b4, rm, rv, sm, si, 1, 0.1, 1e-5, 2,  # noqa: E731
                                                           1.0, 0.0)
    ds, db = torch.empty_like(w4), torch.empty_like(w4)
    bn_bwd = lambda: batchnorm.batch_norm_backward(x, None, dy_full, None, dx, w4, b4, ds, db, sm, si, 1, 1e-5, 0,  # noqa: E731
                                                   1.0, 0.0, 1.0, 0.0)
    t_bn = keep("bn", lambda: F.batch_norm(x, trm, trv, tw, tb, training=True, momentum=0.1, eps=1e-5))
    t_add = keep("bnadd", lambda: torch.relu_(F.batch_norm(x, trm, trv, tw, tb, training=True, momentum=0.1,
                                                           eps=1e-5).add_(z)))
    _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, tw, tb, trm, trv, True, 0.1, 1e-5)
    t_bwd = keep("bnbwd", lambda: torch.ops.aten.native_batch_norm_backward(
        dy_full, x, tw, trm, trv, save_mean, save_invstd, True, 1e-5, [True, True, True]))
    cases.append(Case("batchnorm train fwd", bn_fwd, t_bn, nbytes(x, y), lambda: (y, out["bn"])))
    cases.append(Case("batchnorm train fwd [L2 order]", switched(batchnorm, "L2_REUSE", True, bn_fwd), t_bn,
                      nbytes(x, y), lambda: (y, out["bn"])))
    cases.append(Case("batchnorm add+relu fwd", bn_add, t_add, nbytes(x, z, y), lambda: (y, out["bnadd"])))
    cases.append(Case("batchnorm add+relu fwd [L2 order]", switched(batchnorm, "L2_REUSE", True, bn_add), t_add,
                      nbytes(x, z, y), lambda: (y, out["bnadd"])))
    cases.append(Case("batchnorm inference fwd", lambda: batchnorm.batch_norm_forward_inference(
        x, None, y, w4, b4, rm, rv, 1, 1e-5, 0, 1.0, 0.0),
        lambda: F.batch_norm(x, trm, trv, tw, tb, training=False, eps=1e-5), nbytes(x, y)))
    cases.append(Case("batchnorm bwd", bn_bwd, t_bwd, nbytes(x, dy_full, dx), lambda: (dx, first(out["bnbwd"]))))
    cases.append(Case("batchnorm bwd [L2 order]", switched(batchnorm, "L2_REUSE", True, bn_bwd), t_bwd,
                      nbytes(x, dy_full, dx), lambda: (dx, first(out["bnbwd"]))))

    # group norm (32 groups): the other design as the alternative
    gm, gi = torch.empty(N, GROUPS, device=DEVICE), torch.empty(N, GROUPS, device=DEVICE)
    twb, tbb = tw.to(DT), tb.to(DT)  # PyTorch's CUDA group norm wants the data's dtype
    gds, gdb = torch.empty_like(w), torch.empty_like(w)
    xg = x.detach().clone().requires_grad_()
    wg, bg = twb.detach().clone().requires_grad_(), tbb.detach().clone().requires_grad_()
    gout = F.group_norm(xg, GROUPS, wg, bg, 1e-5)
    gn_fwd = lambda: norms.group_norm_forward(x, y, w, b, gm, gi, GROUPS, 1e-5, 1.0, 0.0)  # noqa: E731
    gn_bwd = lambda: norms.group_norm_backward(x, dy_full, dx, w, gds, gdb, gm, gi, GROUPS, 1.0, 0.0)  # noqa: E731
    t_gn = keep("gn", lambda: F.group_norm(x, GROUPS, twb, tbb, 1e-5))
    t_gnb = keep("gnbwd", lambda: torch.autograd.grad(gout, (xg, wg, bg), dy_full, retain_graph=True))

    def coop(value):
        """group_norm_coop on ("channels_last") or off ("never": resident forward, split backward)."""
        return lambda fn: switched(group_norm_coop, "GROUP_NORM_COOP", value, fn)
    without_coop = coop("never")

    def before_resident(fn):
        """The designs before the resident one (split forward, fused NCHW / split NHWC backward).
        (Until session 34 these rows flipped GROUP_NORM_SPLIT alone, which the resident design
        ignores: where it served, they timed it again.)"""
        return without_coop(switched(norms, "GROUP_NORM_RESIDENT", "never", fn))

    for name, fn, ref, moved, want in (("fwd", gn_fwd, t_gn, nbytes(x, y), lambda: (y, out["gn"])),
                                       ("bwd", gn_bwd, t_gnb, nbytes(x, dy_full, dx),
                                        lambda: (dx, first(out["gnbwd"])))):
        cases.append(Case(f"groupnorm32 {name}", fn, ref, moved, want))
        if layout == "NHWC":  # the channels-last cooperative design (session 34) on, and off
            cases.append(Case(f"groupnorm32 {name} [coop]", coop("channels_last")(fn), ref, moved, want))
            cases.append(Case(f"groupnorm32 {name} [no coop]", without_coop(fn), ref, moved, want))
        cases.append(Case(f"groupnorm32 {name} [before resident]", before_resident(fn), ref, moved, want))

    # LRN, dropout
    cases.append(Case("lrn5 fwd", lambda: lrn.lrn_cross_channel_forward(x, y, 5, 1e-4, 0.75, 2.0, 1.0, 0.0),
                      keep("lrn", lambda: F.local_response_norm(x, 5, 1e-4, 0.75, 2.0)), nbytes(x, y),
                      lambda: (y, out["lrn"])))
    xl = x.detach().clone().requires_grad_()
    lout = F.local_response_norm(xl, 5, 1e-4, 0.75, 2.0)
    ly = lout.detach()
    cases.append(Case("lrn5 bwd", lambda: lrn.lrn_cross_channel_backward(ly, dy_full, x, dx, 5, 1e-4, 0.75, 2.0,
                                                                          1.0, 0.0),
                      keep("lrnbwd", lambda: torch.autograd.grad(lout, (xl,), dy_full, retain_graph=True)),
                      nbytes(x, ly, dy_full, dx), lambda: (dx, first(out["lrnbwd"]))))
    # the one-read kernels (lrn.FAST_LRN) and their settings; bytes as above (the default
    # fast backward recomputes y from x, so it reads 3 of the 4 tensors counted)
    lrn_fwd = lambda: lrn.lrn_cross_channel_forward(x, y, 5, 1e-4, 0.75, 2.0, 1.0, 0.0)  # noqa: E731
    lrn_bwd = lambda: lrn.lrn_cross_channel_backward(ly, dy_full, x, dx, 5, 1e-4, 0.75, 2.0, 1.0, 0.0)  # noqa: E731
    fast = [("FAST_LRN", True)]
    lrn_variants = [("one-read", fast, True, True), ("one-read reads y", fast + [("BWD_READS_Y", True)], False, True),
                    ("one-read exact log2", fast + [("APPROX_LOG2", False)], True, True)]
    if layout == "NCHW":
        lrn_variants += [("one-read 4 warps", fast + [("NCHW_WARPS", 4)], True, True),
                         ("one-read prefetch 2", fast + [("NCHW_PREFETCH", 2)], True, True),
                         ("one-read chunk 64", fast + [("NCHW_CHUNK_C", 64)], True, False),
                         ("one-read chunk 128", fast + [("NCHW_CHUNK_C", 128)], False, True)]
    else:
        lrn_variants += [("one-read tile 4096", fast + [("LANES_TILE", 4096)], True, False),
                         ("one-read tile 2048", fast + [("LANES_TILE", 2048)], False, True)]
    for label, settings, with_fwd, with_bwd in lrn_variants:
        if with_fwd:
            cases.append(Case(f"lrn5 fwd [{label}]", switched_all(lrn, settings, lrn_fwd),
                              keep("lrn", lambda: F.local_response_norm(x, 5, 1e-4, 0.75, 2.0)), nbytes(x, y),
                              lambda: (y, out["lrn"])))
        if with_bwd:
            cases.append(Case(f"lrn5 bwd [{label}]", switched_all(lrn, settings, lrn_bwd),
                              keep("lrnbwd", lambda: torch.autograd.grad(lout, (xl,), dy_full, retain_graph=True)),
                              nbytes(x, ly, dy_full, dx), lambda: (dx, first(out["lrnbwd"]))))
    reserve = torch.empty(x.numel(), dtype=torch.uint8, device=DEVICE)
    tmask = torch.rand(SPATIAL, device=DEVICE, generator=g) > 0.1
    cases.append(Case("dropout0.1 fwd", lambda: dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0),
                      lambda: torch.ops.aten.native_dropout(x, 0.1, True), nbytes(x, y, reserve)))
    cases.append(Case("dropout0.1 bwd", lambda: dropout.dropout_backward(dy_full, dx, reserve, 0.1),
                      lambda: torch.ops.aten.native_dropout_backward(dy_full, tmask, 1 / 0.9),
                      nbytes(dy_full, reserve, dx)))
    if layout == "NHWC":  # the other NHWC_DRAW designs of each direction (dropout.py's docstring)
        default = dropout.NHWC_DRAW if isinstance(dropout.NHWC_DRAW, dict) else \
            {"forward": dropout.NHWC_DRAW, "backward": dropout.NHWC_DRAW}
        for draw in ("split", "join", "reload"):
            design = lambda fn, draw=draw: switched(dropout, "NHWC_DRAW", draw, fn)  # noqa: E731
            if draw != default["forward"]:
                cases.append(Case(f"dropout0.1 fwd [{draw}]",
                                  design(lambda: dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0)),
                                  lambda: torch.ops.aten.native_dropout(x, 0.1, True), nbytes(x, y, reserve)))
            if draw != default["backward"]:
                cases.append(Case(f"dropout0.1 bwd [{draw}]",
                                  design(lambda: dropout.dropout_backward(dy_full, dx, reserve, 0.1)),
                                  lambda: torch.ops.aten.native_dropout_backward(dy_full, tmask, 1 / 0.9),
                                  nbytes(dy_full, reserve, dx)))
        # the default designs with W alone (dropout.MERGE_W off: 56 = 8 + 6 groups per tile
        # row), and with other tiles (TILE_W W values x TILE_ELEMENTS per program)
        for name, value, label in (("MERGE_W", False, "W alone"), ("TILE_ELEMENTS", 2048, "tile 2048"),
                                   ("TILE_W", 64, "tile W 64"), ("SPLIT_THREAD_ELEMENTS", 16, "split 8 warps"),
                                   ("SPLIT_KEEP_FROM_WORD", False, "keep tiles")):
            setting = lambda fn, name=name, value=value: switched(dropout, name, value, fn)  # noqa: E731
            cases.append(Case(f"dropout0.1 fwd [{label}]",
                              setting(lambda: dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0)),
                              lambda: torch.ops.aten.native_dropout(x, 0.1, True), nbytes(x, y, reserve)))
            cases.append(Case(f"dropout0.1 bwd [{label}]",
                              setting(lambda: dropout.dropout_backward(dy_full, dx, reserve, 0.1)),
                              lambda: torch.ops.aten.native_dropout_backward(dy_full, tmask, 1 / 0.9),
                              nbytes(dy_full, reserve, dx)))
        # sm_90: 32 registers (full occupancy), 5 barriers, 49.5 instructions an element
        both = lambda fn: switched(dropout, "SPLIT_KEEP_FROM_WORD", True, switched(  # noqa: E731
            dropout, "SPLIT_THREAD_ELEMENTS", 16, fn))
        cases.append(Case("dropout0.1 fwd [keep from word, split 8 warps]",
                          both(lambda: dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0)),
                          lambda: torch.ops.aten.native_dropout(x, 0.1, True), nbytes(x, y, reserve)))

    # tensor ops
    bias = b.to(DT).view(1, C, 1, 1)
    cases.append(Case("add_tensor bias", lambda: tensor_ops.add_tensor(bias.expand(SPATIAL), y, 1.0, 1.0),
                      lambda: y.add_(bias), nbytes(y, y)))
    # issue 5: one bias value a 16-byte vector (default; NCHW: the generic kernel for comparison)
    for label, settings in ((("generic", (("BIAS_KERNEL", "generic"),)),
                             ("planes 2048", (("BIAS_KERNEL", "planes"), ("BIAS_BLOCK", 2048))))
                            if layout == "NCHW" else ()):
        cases.append(Case(f"add_tensor bias [{label}]", switched_all(
            tensor_ops, settings, lambda: tensor_ops.add_tensor(bias.expand(SPATIAL), y, 1.0, 1.0)),
            lambda: y.add_(bias), nbytes(y, y)))
    cases.append(Case("op_tensor mul", lambda: tensor_ops.op_tensor(x, z, y, 1, 1.0, 1.0, 0.0, False),
                      lambda: torch.mul(x, z, out=y), nbytes(x, z, y)))
    cases.append(Case("scale_tensor", lambda: tensor_ops.scale_tensor(y, 0.5), lambda: y.mul_(0.5), nbytes(y, y)))
    other_fmt = torch.empty_like(x, memory_format=torch.contiguous_format if layout == "NHWC" else torch.channels_last)
    cases.append(Case(f"transform to {'NCHW' if layout == 'NHWC' else 'NHWC'}",
                      lambda: tensor_ops.transform_tensor(x, other_fmt, 1.0, 0.0), lambda: other_fmt.copy_(x),
                      nbytes(x, other_fmt)))
    red = torch.empty((N, C, 1, 1), device=DEVICE, dtype=DT)
    reduce_hw = lambda: tensor_ops.reduce_tensor(x, red, None, None, 0, 1.0, 0.0, False)  # noqa: E731
    cases.append(Case("reduce sum HW", reduce_hw, keep("red", lambda: x.sum((2, 3), keepdim=True)), nbytes(x, red),
                      lambda: (red, out["red"])))
    # NHWC: the split along H * W off, and other programs per SM; NCHW: shorter steps
    # (4/SM on 132 SMs: 3 parts of 256 row blocks, 768 programs, about 1.5 waves at 4
    # resident per SM; 2 parts: 512, one wave), the combine by the last program
    alternatives = ((("REDUCE_SPLIT", 1, "no split"), ("SPLIT_PROGRAMS_PER_SM", 8, "split 8/SM"),
                     ("SPLIT_PROGRAMS_PER_SM", 16, "split 16/SM"), ("REDUCE_SPLIT", 2, "split 2 parts"),
                     ("REDUCE_SPLIT", 4, "split 4 parts"), ("SPLIT_COMBINE", "last", "last combines"),
                     ("STRIDED_ROWS_STAGES", 2, "stages 2"), ("STRIDED_ROWS_STAGES", None, "no stages"))
                    if layout == "NHWC" else
                    (("CONTIGUOUS_ROWS_BLOCK_R", 2048, "R step 2048"), ("CONTIGUOUS_ROWS_BLOCK_R", 4096, "R step 4096")))
    if layout == "NHWC":  # the Triton kernel as it is (triton_nhwc: the route off)
        cases.append(Case("reduce sum HW [triton]", triton_nhwc(reduce_hw),
                          keep("red", lambda: x.sum((2, 3), keepdim=True)), nbytes(x, red),
                          lambda: (red, out["red"])))
    for name, value, label in alternatives:
        cases.append(Case(f"reduce sum HW [{tag}{label}]", triton_nhwc(switched(tensor_ops, name, value, reduce_hw)),
                          keep("red", lambda: x.sum((2, 3), keepdim=True)), nbytes(x, red),
                          lambda: (red, out["red"])))
    for label, settings in REDUCE_ISSUE5_VARIANTS_NCHW if layout == "NCHW" else REDUCE_ISSUE5_VARIANTS_NHWC:
        cases.append(Case(f"reduce sum HW [{tag}{label}]", triton_nhwc(switched_all(tensor_ops, settings, reduce_hw)),
                          keep("red", lambda: x.sum((2, 3), keepdim=True)), nbytes(x, red),
                          lambda: (red, out["red"])))
    if layout == "NHWC":
        for parts in (2, 4):
            last = lambda fn, parts=parts: switched(tensor_ops, "SPLIT_COMBINE", "last", switched(  # noqa: E731
                tensor_ops, "REDUCE_SPLIT", parts, fn))
            cases.append(Case(f"reduce sum HW [{tag}split {parts} parts, last combines]", triton_nhwc(last(reduce_hw)),
                              keep("red", lambda: x.sum((2, 3), keepdim=True)), nbytes(x, red),
                              lambda: (red, out["red"])))
    return cases


def row_tensors(device, dt, rows):
    """The row layers' tensors (sweep_layers_c1.py draws the same): x (values * 2), dy, y
    and dx of shape ``rows`` in ``dt``; float32 scale w and bias b of the row length, wb and
    bb their copies in ``dt`` (PyTorch's CUDA layer norm wants the data's dtype); float32
    saved statistics mean and inv (one per row); ds and db for the parameter gradients."""
    g = torch.Generator(device=device).manual_seed(1)
    x = (torch.randn(rows, device=device, generator=g) * 2).to(dt)
    dy = torch.randn(rows, device=device, generator=g).to(dt)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    w = torch.randn(rows[1], device=device, generator=g)
    b = torch.randn(rows[1], device=device, generator=g)
    wb, bb = w.to(dt), b.to(dt)
    mean, inv = torch.empty(rows[0], device=device), torch.empty(rows[0], device=device)
    ds, db = torch.empty_like(w), torch.empty_like(w)
    return x, dy, y, dx, w, b, wb, bb, mean, inv, ds, db


def row_cases():
    x, dy, y, dx, w, b, wb, bb, mean, inv, ds, db = row_tensors(DEVICE, DT, ROWS)
    K = ROWS[1]
    ty = torch.softmax(x, 1)
    tly = torch.log_softmax(x, 1)
    out = {}

    def keep(key, fn):
        def run():
            out[key] = fn()
            return out[key]
        return run

    cases = [
        Case("softmax fwd", lambda: softmax.softmax_forward(x, y, 1, 1, 1.0, 0.0),
             keep("sm", lambda: torch.softmax(x, 1)), nbytes(x, y), lambda: (y, out["sm"])),
        Case("softmax bwd", lambda: softmax.softmax_backward(ty, dy, dx, 1, 1, 1.0, 0.0),
             keep("smb", lambda: torch._softmax_backward_data(dy, ty, 1, DT)), nbytes(ty, dy, dx),
             lambda: (dx, out["smb"])),
        Case("log_softmax fwd", lambda: softmax.softmax_forward(x, y, 2, 1, 1.0, 0.0),
             keep("lsm", lambda: torch.log_softmax(x, 1)), nbytes(x, y), lambda: (y, out["lsm"])),
        Case("log_softmax bwd", lambda: softmax.softmax_backward(tly, dy, dx, 2, 1, 1.0, 0.0),
             keep("lsmb", lambda: torch._log_softmax_backward_data(dy, tly, 1, DT)), nbytes(tly, dy, dx),
             lambda: (dx, out["lsmb"])),
    ]
    ln_fwd = lambda: norms.layer_norm_forward(x, y, w, b, mean, inv, 1, 1e-5, 1.0, 0.0)  # noqa: E731
    rms_fwd = lambda: norms.rms_norm_forward(x, y, w, inv, 1, 1e-5, 1.0, 0.0)  # noqa: E731
    t_ln = keep("ln", lambda: F.layer_norm(x, (K,), wb, bb, 1e-5))
    t_rms = keep("rms", lambda: F.rms_norm(x, (K,), w.to(DT), 1e-5))
    cases.append(Case("layernorm fwd", ln_fwd, t_ln, nbytes(x, y), lambda: (y, out["ln"])))
    # rows per program (1: the one-row kernel) and the one-pass statistics
    for name, value, label in (("ROWS_PER_PROGRAM", 1, "1 row/program"), ("ROWS_PER_PROGRAM", 16, "16 rows/program"),
                               ("ONE_PASS_STATS", True, "one-pass stats")):
        cases.append(Case(f"layernorm fwd [{label}]", switched(norms, name, value, ln_fwd), t_ln, nbytes(x, y),
                          lambda: (y, out["ln"])))
    _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [K], wb, bb, 1e-5)
    cases.append(Case("layernorm bwd", lambda: norms.layer_norm_backward(x, dy, dx, w, ds, db, mean, inv, 1,
                                                                         1.0, 0.0),
                      keep("lnb", lambda: torch.ops.aten.native_layer_norm_backward(
                          dy, x, [K], tmean, trstd, wb, bb, [True, True, True])),
                      nbytes(x, dy, dx), lambda: (dx, first(out["lnb"]))))
    cases.append(Case("rmsnorm fwd", rms_fwd, t_rms, nbytes(x, y), lambda: (y, out["rms"])))
    cases.append(Case("rmsnorm fwd [1 row/program]", switched(norms, "ROWS_PER_PROGRAM", 1, rms_fwd), t_rms,
                      nbytes(x, y), lambda: (y, out["rms"])))
    xr = x.detach().clone().requires_grad_()
    wr = w.to(DT).detach().clone().requires_grad_()
    rout = F.rms_norm(xr, (K,), wr, 1e-5)
    cases.append(Case("rmsnorm bwd", lambda: norms.rms_norm_backward(x, dy, dx, w, ds, inv, 1, 1.0, 0.0),
                      keep("rmsb", lambda: torch.autograd.grad(rout, (xr, wr), dy, retain_graph=True)),
                      nbytes(x, dy, dx), lambda: (dx, first(out["rmsb"]))))
    return cases


def copy_bandwidth() -> float:
    src = torch.randn(SPATIAL, device=DEVICE).to(DT)
    dst = torch.empty_like(src)
    ms = graph_time(lambda: dst.copy_(src))
    return 2 * nbytes(src) / ms / 1e9


def driver_version() -> str:
    import subprocess
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001 - metadata only
        return "unknown"


def rel_err(got, want) -> float:
    got, want = got.detach().double(), want.detach().double()
    if got.shape != want.shape:
        want = want.reshape(got.shape)
    return ((got - want).abs().max() / max(1.0, want.abs().max().item())).item()


def snapshot(outputs):
    return [t.detach().clone() for t in outputs]


def diff(got, want):
    """The sweeps' check: largest normalized difference over the outputs (uint8 masks: bytes that differ)."""
    worst = 0.0
    for a, b in zip(got, want):
        if a.dtype == torch.uint8:
            worst = max(worst, float((a != b).sum().item()))
        else:
            worst = max(worst, rel_err(a, b))
    return worst


def run_case(layout, case):
    t0 = time.time()
    timer_g, timer_e = (wall_time, wall_time) if DRY_RUN else (graph_time, eager_time)
    try:
        tri_ms = timer_g(case.tri, "tridnn")
        tri_eager = timer_e(case.tri)
    except Exception as exc:  # noqa: BLE001 - a broken case is reported, not fatal
        print(f"{layout:5s} {case.name:38s} FAILED: {type(exc).__name__}: {exc}", flush=True)
        return {"layout": layout, "layer": case.name, "error": f"{type(exc).__name__}: {exc}"}
    try:
        ref_ms = timer_g(case.ref, "torch")
    except Exception as exc:  # noqa: BLE001
        print(f"{layout:5s} {case.name:38s} torch baseline FAILED: {exc}", flush=True)
        ref_ms = float("nan")
    err = None
    if case.check is not None and ref_ms == ref_ms:
        try:
            case.tri()
            if not DRY_RUN:
                torch.cuda.synchronize()
            err = rel_err(*case.check())
        except Exception as exc:  # noqa: BLE001
            print(f"  (check failed: {type(exc).__name__}: {exc})", flush=True)
    row = {"layout": layout, "layer": case.name, "bytes": case.moved, "tridnn_ms": tri_ms, "tridnn_eager_ms": tri_eager,
           "torch_ms": ref_ms, "tridnn_tb_s": case.moved / tri_ms / 1e9, "torch_tb_s": case.moved / ref_ms / 1e9,
           "time_ratio": tri_ms / ref_ms, "err": err}
    print(f"{layout:5s} {case.name:38s} tridnn {tri_ms * 1e3:8.1f} us {row['tridnn_tb_s']:5.2f} TB/s | torch "
          f"{ref_ms * 1e3:8.1f} us {row['torch_tb_s']:5.2f} TB/s | ratio {row['time_ratio']:.2f} | err "
          f"{'-' if err is None else f'{err:.1e}'} (eager {tri_eager * 1e3:.0f} us; {time.time() - t0:.1f}s)",
          flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench_gpu_layers.json")
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    parser.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, tiny float32 shapes")
    parser.add_argument("--flush", choices=("clean", "dirty"), default="clean",
                        help="the L2 flush before each timed replay (flush_l2; before session 33: dirty)")
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="start no new case after this many seconds (the table still prints)")
    args = parser.parse_args()
    global FLUSH
    FLUSH = args.flush
    meta = {"flush": FLUSH, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "triton": triton.__version__, "python": platform.python_version(), "spatial": SPATIAL, "rows": ROWS,
            "dtype": str(DT)}
    if DRY_RUN:
        meta.update(gpu="none (dry run)", copy_tb_s=float("nan"))
        copy = float("nan")
    else:
        props = torch.cuda.get_device_properties(0)
        meta.update(gpu=props.name, driver=driver_version(), cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
        copy = copy_bandwidth()
        meta["copy_tb_s"] = copy
        FLUSH = "dirty" if args.flush == "clean" else "clean"  # the other flush's copy, for the record
        meta[f"copy_tb_s_{FLUSH}_flush"] = copy_bandwidth()
        FLUSH = args.flush
    print(f"{meta}", flush=True)
    rows = []
    started = time.time()
    groups = [("rows", row_cases), ("NCHW", lambda: spatial_cases("NCHW")), ("NHWC", lambda: spatial_cases("NHWC"))]
    skipped = []
    for layout, make in groups:
        if time.time() - started > args.budget_s:
            skipped.append(f"{layout} (whole group)")
            continue
        for case in make():
            if args.only and args.only not in case.name:
                continue
            if time.time() - started > args.budget_s:
                skipped.append(f"{layout} {case.name}")
                continue
            rows.append(run_case(layout, case))
            if not DRY_RUN:
                torch.cuda.empty_cache()
        with open(args.out, "w") as f:  # after every group, so a cut run keeps what it measured
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if skipped:
        meta["skipped_over_budget"] = skipped
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"\nskipped (over --budget-s): {', '.join(skipped)}")
    ok = [r for r in rows if "error" not in r and r["time_ratio"] == r["time_ratio"] and "[" not in r["layer"]]
    target = 0.85 * copy
    print(f"\n{time.time() - started:.0f} s. {FLUSH} L2 flush. copy {copy:.2f} TB/s; target 85% = {target:.2f} "
          f"TB/s. geomean time ratio tridnn/torch (main designs) "
          f"{math.exp(sum(math.log(r['time_ratio']) for r in ok) / max(1, len(ok))):.3f}")
    print(f"{'layout':6s} {'layer':38s} {'TB/s':>6s} {'torch':>6s} {'ratio':>6s} {'err':>8s}  flags")
    for r in rows:
        if "error" in r:
            print(f"{r['layout']:6s} {r['layer']:38s} ERROR {r['error'][:60]}")
            continue
        flags = []
        if r["tridnn_tb_s"] < target:
            flags.append("<85%")
        if r["time_ratio"] > 1.0:
            flags.append("SLOWER")
        if r["err"] is not None and r["err"] > 5e-2:
            flags.append("ERR")
        err = "-" if r["err"] is None else f"{r['err']:.1e}"
        print(f"{r['layout']:6s} {r['layer']:38s} {r['tridnn_tb_s']:6.2f} {r['torch_tb_s']:6.2f} "
              f"{r['time_ratio']:6.2f} {err:>8s}  {' '.join(flags)}")


if __name__ == "__main__":
    main()
