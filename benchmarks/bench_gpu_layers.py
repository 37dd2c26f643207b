"""Every Triton layer kernel, forward and backward, against PyTorch's CUDA equivalent.

Spatial layers run on 64x256x56x56 bfloat16 in NCHW and NHWC (channels_last);
softmax and the row norms on 32768x4096 bfloat16. Each candidate is captured in a
CUDA graph and its replays are timed with triton.testing.do_bench (median), so the
numbers are device time; the eager (host-launched) time of the tridnn call is also
recorded. TB/s counts minimal bytes: every input of the call read once and every
output written once. The two candidates of a layer run back to back in one process.

    PYTHONPATH=src python benchmarks/bench_gpu_layers.py [--out results.json] [--only NAME]
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from tridnn.cuda import activation, batchnorm, dropout, lrn, norms, pooling, softmax, tensor_ops

SPATIAL = (64, 256, 56, 56)
ROWS = (32768, 4096)
DT = torch.bfloat16


def graph_time(fn) -> float:
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
        with torch.cuda.graph(graph):
            fn()
        return do_bench(graph.replay, warmup=25, rep=100, return_mode="median")
    except Exception as exc:  # noqa: BLE001 - report and time eagerly
        print(f"  (graph capture failed: {type(exc).__name__}: {exc}; timing eagerly)", file=sys.stderr)
        torch.cuda.synchronize()
        return do_bench(fn, warmup=25, rep=100, return_mode="median")


def eager_time(fn) -> float:
    return do_bench(fn, warmup=10, rep=50, return_mode="median")


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def spatial_cases(layout):
    g = torch.Generator(device="cuda").manual_seed(0)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    new = lambda shape=SPATIAL: torch.randn(shape, device="cuda", generator=g).to(DT).contiguous(memory_format=fmt)  # noqa: E731
    x, dy_full, z = new(), new(), new()
    y = torch.empty_like(x)
    dx = torch.empty_like(x)
    C = SPATIAL[1]
    w = torch.randn(C, device="cuda", generator=g)
    b = torch.randn(C, device="cuda", generator=g)
    w4, b4 = w.view(1, C, 1, 1), b.view(1, C, 1, 1)
    rm, rv = torch.zeros(1, C, 1, 1, device="cuda"), torch.ones(1, C, 1, 1, device="cuda")
    sm, si = torch.empty(1, C, 1, 1, device="cuda"), torch.empty(1, C, 1, 1, device="cuda")
    cases = []

    # activations
    for name, mode, tfwd in (("relu", 1, torch.relu), ("gelu", 101, F.gelu), ("sigmoid", 0, torch.sigmoid)):
        cases.append((f"{name} fwd", lambda mode=mode: activation.activation_forward(
            x, y, mode=mode, coef=0.0, swish_beta=1.0, propagate_nan=False, alpha=1.0, beta=0.0),
            lambda tfwd=tfwd: tfwd(x), nbytes(x, y)))
    cases.append(("relu bwd", lambda: activation.activation_backward(
        y, dy_full, x, dx, mode=1, coef=0.0, swish_beta=1.0, alpha=1.0, beta=0.0),
        lambda: torch.ops.aten.threshold_backward(dy_full, x, 0.0), nbytes(x, dy_full, dx)))
    cases.append(("gelu bwd", lambda: activation.activation_backward(
        y, dy_full, x, dx, mode=101, coef=0.0, swish_beta=1.0, alpha=1.0, beta=0.0),
        lambda: torch.ops.aten.gelu_backward(dy_full, x), nbytes(x, dy_full, dx)))

    # pooling
    out = (64, C, 28, 28)
    py = torch.empty(out, device="cuda", dtype=DT).contiguous(memory_format=fmt)
    pdy = torch.randn(out, device="cuda", generator=g).to(DT).contiguous(memory_format=fmt)
    ty, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    cases.append(("maxpool3x3s2 fwd", lambda: pooling.pooling_forward(x, py, 0, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0),
                  lambda: F.max_pool2d(x, 3, 2, 1), nbytes(x, py)))
    cases.append(("maxpool3x3s2 bwd", lambda: pooling.pooling_backward(py, pdy, x, dx, 0, (3, 3), (1, 1), (2, 2), False,
                                                                      1.0, 0.0),
                  lambda: torch.ops.aten.max_pool2d_with_indices_backward(pdy, x, [3, 3], [2, 2], [1, 1], [1, 1],
                                                                          False, idx),
                  nbytes(x, py, pdy, dx)))
    cases.append(("avgpool3x3s2 fwd", lambda: pooling.pooling_forward(x, py, 1, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0),
                  lambda: F.avg_pool2d(x, 3, 2, 1), nbytes(x, py)))
    cases.append(("avgpool3x3s2 bwd", lambda: pooling.pooling_backward(py, pdy, x, dx, 1, (3, 3), (1, 1), (2, 2), False,
                                                                      1.0, 0.0),
                  lambda: torch.ops.aten.avg_pool2d_backward(pdy, x, [3, 3], [2, 2], [1, 1], False, True, None),
                  nbytes(pdy, dx)))
    ay = torch.empty((64, C, 1, 1), device="cuda", dtype=DT).contiguous(memory_format=fmt)
    cases.append(("adaptive avgpool 1x1 fwd", lambda: pooling.adaptive_pooling_forward(x, ay, 1, 1.0, 0.0),
                  lambda: F.adaptive_avg_pool2d(x, 1), nbytes(x, ay)))

    # batch norm
    tw, tb = w.clone(), b.clone()
    trm, trv = torch.zeros(C, device="cuda"), torch.ones(C, device="cuda")
    cases.append(("batchnorm train fwd", lambda: batchnorm.batch_norm_forward_training(
        x, None, y, w4, b4, rm, rv, sm, si, 1, 0.1, 1e-5, 0, 1.0, 0.0),
        lambda: F.batch_norm(x, trm, trv, tw, tb, training=True, momentum=0.1, eps=1e-5), nbytes(x, y)))
    cases.append(("batchnorm add+relu fwd", lambda: batchnorm.batch_norm_forward_training(
        x, z, y, w4, b4, rm, rv, sm, si, 1, 0.1, 1e-5, 2, 1.0, 0.0),
        lambda: torch.relu_(F.batch_norm(x, trm, trv, tw, tb, training=True, momentum=0.1, eps=1e-5).add_(z)),
        nbytes(x, z, y)))
    cases.append(("batchnorm inference fwd", lambda: batchnorm.batch_norm_forward_inference(
        x, None, y, w4, b4, rm, rv, 1, 1e-5, 0, 1.0, 0.0),
        lambda: F.batch_norm(x, trm, trv, tw, tb, training=False, eps=1e-5), nbytes(x, y)))
    ds, db = torch.empty_like(w4), torch.empty_like(w4)
    _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(x, tw, tb, trm, trv, True, 0.1, 1e-5)
    cases.append(("batchnorm bwd", lambda: batchnorm.batch_norm_backward(
        x, None, dy_full, None, dx, w4, b4, ds, db, sm, si, 1, 1e-5, 0, 1.0, 0.0, 1.0, 0.0),
        lambda: torch.ops.aten.native_batch_norm_backward(dy_full, x, tw, trm, trv, save_mean, save_invstd, True,
                                                          1e-5, [True, True, True]),
        nbytes(x, dy_full, dx)))

    # group norm (32 groups), LRN, dropout
    gm, gi = torch.empty(64, 32, device="cuda"), torch.empty(64, 32, device="cuda")
    twb, tbb = tw.to(DT), tb.to(DT)  # PyTorch's CUDA group norm wants the data's dtype
    cases.append(("groupnorm32 fwd", lambda: norms.group_norm_forward(x, y, w, b, gm, gi, 32, 1e-5, 1.0, 0.0),
                  lambda: F.group_norm(x, 32, twb, tbb, 1e-5), nbytes(x, y)))
    gds, gdb = torch.empty_like(w), torch.empty_like(w)
    xg = x.detach().clone().requires_grad_()
    wg, bg = twb.detach().clone().requires_grad_(), tbb.detach().clone().requires_grad_()
    gout = F.group_norm(xg, 32, wg, bg, 1e-5)
    cases.append(("groupnorm32 bwd", lambda: norms.group_norm_backward(x, dy_full, dx, w, gds, gdb, gm, gi, 32, 1.0, 0.0),
                  lambda: torch.autograd.grad(gout, (xg, wg, bg), dy_full, retain_graph=True),
                  nbytes(x, dy_full, dx)))
    cases.append(("lrn5 fwd", lambda: lrn.lrn_cross_channel_forward(x, y, 5, 1e-4, 0.75, 2.0, 1.0, 0.0),
                  lambda: F.local_response_norm(x, 5, 1e-4, 0.75, 2.0), nbytes(x, y)))
    reserve = torch.empty(x.numel(), dtype=torch.uint8, device="cuda")
    tmask = torch.rand(SPATIAL, device="cuda", generator=g) > 0.1
    cases.append(("dropout0.1 fwd", lambda: dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0),
                  lambda: torch.ops.aten.native_dropout(x, 0.1, True), nbytes(x, y, reserve)))
    cases.append(("dropout0.1 bwd", lambda: dropout.dropout_backward(dy_full, dx, reserve, 0.1),
                  lambda: torch.ops.aten.native_dropout_backward(dy_full, tmask, 1 / 0.9), nbytes(dy_full, reserve, dx)))

    # tensor ops
    bias = b.to(DT).view(1, C, 1, 1)
    cases.append(("add_tensor bias", lambda: tensor_ops.add_tensor(bias.expand(SPATIAL), y, 1.0, 1.0),
                  lambda: y.add_(bias), nbytes(y, y)))
    cases.append(("op_tensor mul", lambda: tensor_ops.op_tensor(x, z, y, 1, 1.0, 1.0, 0.0, False),
                  lambda: torch.mul(x, z, out=y), nbytes(x, z, y)))
    cases.append(("scale_tensor", lambda: tensor_ops.scale_tensor(y, 0.5), lambda: y.mul_(0.5), nbytes(y, y)))
    other = torch.empty_like(x, memory_format=torch.contiguous_format if layout == "NHWC" else torch.channels_last)
    cases.append((f"transform to {'NCHW' if layout == 'NHWC' else 'NHWC'}",
                  lambda: tensor_ops.transform_tensor(x, other, 1.0, 0.0), lambda: other.copy_(x), nbytes(x, other)))
    red = torch.empty((64, C, 1, 1), device="cuda", dtype=DT)
    cases.append(("reduce sum HW", lambda: tensor_ops.reduce_tensor(x, red, None, None, 0, 1.0, 0.0, False),
                  lambda: x.sum((2, 3), keepdim=True), nbytes(x, red)))
    return cases


def row_cases():
    g = torch.Generator(device="cuda").manual_seed(1)
    x = (torch.randn(ROWS, device="cuda", generator=g) * 2).to(DT)
    dy = torch.randn(ROWS, device="cuda", generator=g).to(DT)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    K = ROWS[1]
    w = torch.randn(K, device="cuda", generator=g)
    b = torch.randn(K, device="cuda", generator=g)
    wb, bb = w.to(DT), b.to(DT)  # PyTorch's CUDA layer norm wants the data's dtype
    mean, inv = torch.empty(ROWS[0], device="cuda"), torch.empty(ROWS[0], device="cuda")
    ds, db = torch.empty_like(w), torch.empty_like(w)
    ty = torch.softmax(x, 1)
    cases = [
        ("softmax fwd", lambda: softmax.softmax_forward(x, y, 1, 1, 1.0, 0.0), lambda: torch.softmax(x, 1),
         nbytes(x, y)),
        ("softmax bwd", lambda: softmax.softmax_backward(ty, dy, dx, 1, 1, 1.0, 0.0),
         lambda: torch._softmax_backward_data(dy, ty, 1, DT), nbytes(ty, dy, dx)),
        ("log_softmax fwd", lambda: softmax.softmax_forward(x, y, 2, 1, 1.0, 0.0), lambda: torch.log_softmax(x, 1),
         nbytes(x, y)),
        ("layernorm fwd", lambda: norms.layer_norm_forward(x, y, w, b, mean, inv, 1, 1e-5, 1.0, 0.0),
         lambda: F.layer_norm(x, (K,), wb, bb, 1e-5), nbytes(x, y)),
    ]
    _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [K], wb, bb, 1e-5)
    cases.append(("layernorm bwd", lambda: norms.layer_norm_backward(x, dy, dx, w, ds, db, mean, inv, 1, 1.0, 0.0),
                  lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [K], tmean, trstd, wb, bb, [True, True, True]),
                  nbytes(x, dy, dx)))
    cases.append(("rmsnorm fwd", lambda: norms.rms_norm_forward(x, y, w, inv, 1, 1e-5, 1.0, 0.0),
                  lambda: F.rms_norm(x, (K,), w.to(DT), 1e-5), nbytes(x, y)))
    xr = x.detach().clone().requires_grad_()
    wr = w.to(DT).detach().clone().requires_grad_()
    out = F.rms_norm(xr, (K,), wr, 1e-5)
    cases.append(("rmsnorm bwd", lambda: norms.rms_norm_backward(x, dy, dx, w, ds, inv, 1, 1.0, 0.0),
                  lambda: torch.autograd.grad(out, (xr, wr), dy, retain_graph=True), nbytes(x, dy, dx)))
    return cases


def pointwise_sweep():
    """relu forward (NCHW, flat path) under several (BLOCK, num_warps) launch configs."""
    x = torch.randn(SPATIAL, device="cuda").to(DT)
    y = torch.empty_like(x)
    saved = activation.BLOCK, activation.NUM_WARPS
    out = {}
    for block, warps in ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16)):
        activation.BLOCK, activation.NUM_WARPS = block, warps
        ms = graph_time(lambda: activation.activation_forward(x, y, mode=1, coef=0.0, swish_beta=1.0,
                                                              propagate_nan=False, alpha=1.0, beta=0.0))
        out[f"{block}/{warps}"] = 2 * nbytes(x) / ms / 1e9
    activation.BLOCK, activation.NUM_WARPS = saved
    print("relu fwd TB/s by BLOCK/num_warps:", {k: round(v, 2) for k, v in out.items()}, flush=True)
    return out


def copy_bandwidth() -> float:
    src = torch.randn(SPATIAL, device="cuda").to(DT)
    dst = torch.empty_like(src)
    ms = graph_time(lambda: dst.copy_(src))
    return 2 * nbytes(src) / ms / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench_gpu_layers.json")
    parser.add_argument("--only", default=None, help="run the cases whose name contains this")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": props.name,
            "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "python": platform.python_version()}
    copy = copy_bandwidth()
    meta["copy_tb_s"] = copy
    print(f"{meta}", flush=True)
    meta["pointwise_sweep"] = pointwise_sweep()
    rows = []
    groups = [("NCHW", lambda: spatial_cases("NCHW")), ("NHWC", lambda: spatial_cases("NHWC")),
              ("rows", row_cases)]
    for layout, make in groups:
        for name, tri, ref, moved in make():
            if args.only and args.only not in name:
                continue
            t0 = time.time()
            try:
                tri_ms = graph_time(tri)
                tri_eager = eager_time(tri)
            except Exception as exc:  # noqa: BLE001 - a broken case is reported, not fatal
                print(f"{layout:5s} {name:28s} FAILED: {type(exc).__name__}: {exc}", flush=True)
                rows.append({"layout": layout, "layer": name, "error": f"{type(exc).__name__}: {exc}"})
                continue
            try:
                ref_ms = graph_time(ref)
            except Exception as exc:  # noqa: BLE001
                print(f"{layout:5s} {name:28s} torch baseline FAILED: {exc}", flush=True)
                ref_ms = float("nan")
            row = {"layout": layout, "layer": name, "bytes": moved, "tridnn_ms": tri_ms, "tridnn_eager_ms": tri_eager,
                   "torch_ms": ref_ms, "tridnn_tb_s": moved / tri_ms / 1e9, "torch_tb_s": moved / ref_ms / 1e9,
                   "time_ratio": tri_ms / ref_ms}
            rows.append(row)
            print(f"{layout:5s} {name:28s} tridnn {tri_ms * 1e3:8.1f} us {row['tridnn_tb_s']:5.2f} TB/s | torch "
                  f"{ref_ms * 1e3:8.1f} us {row['torch_tb_s']:5.2f} TB/s | ratio {row['time_ratio']:.2f} "
                  f"(eager {tri_eager * 1e3:.0f} us; {time.time() - t0:.1f}s)", flush=True)
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    ok = [r for r in rows if "error" not in r]
    print(f"\ncopy {copy:.2f} TB/s; target 3.6 TB/s. geomean time ratio tridnn/torch "
          f"{math.exp(sum(math.log(r['time_ratio']) for r in ok) / max(1, len(ok))):.3f}")
    print(f"{'layout':6s} {'layer':28s} {'TB/s':>6s} {'torch':>6s} {'ratio':>6s}")
    for r in rows:
        if "error" in r:
            print(f"{r['layout']:6s} {r['layer']:28s} ERROR")
        else:
            print(f"{r['layout']:6s} {r['layer']:28s} {r['tridnn_tb_s']:6.2f} {r['torch_tb_s']:6.2f} "
                  f"{r['time_ratio']:6.2f}")


if __name__ == "__main__":
    main()
