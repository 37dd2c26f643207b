"""Which kernels one tridnn convolution call launches, and for how long each (GPU only).

    PYTHONPATH=src python3 benchmarks/profile_gpu_conv_kernels.py --suite mobilenetv2_dw \
        --direction bwd_filter [--layers dw960_7,dw576_14s2] [--algo ALGO_0] [--batch 64] \
        [--dtype float32 --math FMA] [--dw-wgrad-kind tiles]

Why: the suites time a whole call (CUDA-graph medians); where a small layer is far above its
memory or FLOP floor, the question is whether the main kernel, a zeroing or finishing pass,
or a gap between launches takes the time. Per layer: the call runs once (the tuner picks its
config), then ``--calls`` calls run under torch.profiler; each CUDA kernel's launches per call
and mean duration are printed, with cuDNN's (torch) kernels for the same problem beside them.
Durations are the kernels' own; the sum per call is below the graph-timed figure by the gaps.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

import tridnn
from tridnn.algorithms import registry, selection
from tridnn.algorithms.problem import ConvProblem
from tridnn.shapes import SUITES

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu_conv as B  # noqa: E402  (make, torch_conv, tridnn_call: the suites' harness)

ENUMS = {"fwd": tridnn.ConvFwdAlgo, "bwd_data": tridnn.ConvBwdDataAlgo, "bwd_filter": tridnn.ConvBwdFilterAlgo}


def kernel_table(fn, calls):
    """{kernel name: (launches per call, mean us)} of ``calls`` runs of fn."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    acc = defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            acc[e.name][0] += 1
            acc[e.name][1] += e.device_time
    return {k: (n / calls, t / n) for k, (n, t) in acc.items()}


def show(label, table):
    total = sum(n * t for n, t in table.values())
    print(f"  {label}: {total:.1f} us of kernels a call")
    for name, (n, t) in sorted(table.items(), key=lambda kv: -kv[1][0] * kv[1][1]):
        print(f"    {n:5.1f} x {t:8.1f} us  {name[:90]}")


def only_kind(kind):
    """The depthwise filter-gradient tuner's list cut to one kernel family (the pointer
    kernel's configs carry no KIND), so its own kernel time shows beside the others'."""
    from tridnn.cuda import conv_depthwise_backward as D
    full = D.wgrad3_candidates

    def only(*args):
        out = [c for c in full(*args) if c.get("KIND", "pointer") == kind]
        if not out:
            raise SystemExit(f"no {kind} config is offered for this problem")
        return out
    D.wgrad3_candidates = only


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="mobilenetv2_dw")
    ap.add_argument("--direction", default="bwd_filter", choices=["fwd", "bwd_data", "bwd_filter"])
    ap.add_argument("--layers", default="", help="comma-separated names (default all)")
    ap.add_argument("--algo", default="", help="algorithm name (default: get's first choice)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--math", default="DEFAULT", choices=["DEFAULT", "TENSOR_OP", "FMA"],
                    help="tridnn's math type (float32: FMA means cuDNN with tf32 off, TENSOR_OP on)")
    ap.add_argument("--dw-wgrad-kind", default="",
                    help="depthwise 3x3 backward filter: offer the tuner only configs of this KIND "
                         "(tiles, rows, gluon, tma; 'pointer' for conv_depthwise_backward's own kernel)")
    a = ap.parse_args()
    if a.dw_wgrad_kind:
        only_kind(a.dw_wgrad_kind)
    math = tridnn.MathType[a.math]
    torch.backends.cudnn.allow_tf32 = a.math != "FMA"
    dev = "cuda"
    handle = tridnn.Handle(device=dev)
    wanted = [s for s in a.layers.split(",") if s]
    for p in SUITES[a.suite]:
        if wanted and p["name"] not in wanted:
            continue
        cd, xd, wd, yd, x, w, dy = B.make(p, a.batch, a.dtype, math, dev)
        problem = ConvProblem(a.direction, xd, wd, yd, cd)
        if a.algo:
            algo = registry.by_enum("conv", a.direction, "triton", ENUMS[a.direction][a.algo])
        else:
            ranked = [r for r in selection.get(handle, problem) if r.status == tridnn.Status.SUCCESS]
            algo = registry.by_enum("conv", a.direction, "triton", ranked[0].algo)
        ref = B.torch_conv(a.direction, p, x, w, dy)
        want = ref()
        out = torch.full_like(want, float("nan"))
        ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
        fn = B.tridnn_call(handle, a.direction, algo, cd, xd, wd, yd, x, w, dy, out, ws)
        fn()  # tunes
        torch.cuda.synchronize()
        print(f"{p['name']} {a.direction} {algo.name} err {B.rel_err(out, want):.1e} "
              f"(x {x.numel() * x.element_size() / 1e6:.1f} MB, dy {dy.numel() * dy.element_size() / 1e6:.1f} MB, "
              f"ws {ws.numel() / 1e6:.1f} MB)")
        show("tridnn", kernel_table(fn, a.calls))
        show("cuDNN", kernel_table(ref, a.calls))


if __name__ == "__main__":
    main()
