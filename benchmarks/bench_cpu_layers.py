"""CPU layers vs torch: pooling, activation, softmax and batch norm, forward and backward,
on an 8x256x56x56 float32 tensor in NCHW and NHWC (the issue's performance target).

Each case times tridnn's descriptor API (NumPy backend) and the matching torch CPU op
(aten's own forward/backward kernels), interleaved and repeated; the ratio is
median(tridnn) / median(torch) from the same run, so machine load mostly cancels.
The best-of ratio (min over repeats of each) shows each side with the least
interference from other processes; the CPU ratio compares median CPU time (all threads
of the process, so torch's two threads both count): the work each side does, which is
what decides the wall time once other processes saturate the cores.

Each timed call starts after a short pause (--settle-ms, default 50): torch's OpenMP
worker threads keep spinning for 20-50 ms after each op, and on a 2-core machine that
spin took a core from whatever ran next (measured: batch norm backward right after a
torch op ran 11 ms of its own CPU time plus 7 ms of torch's spinning, and 1.5-2x the
wall time). --settle-ms 0 times back to back.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_cpu_layers.py
    (--repeats N, --shape N C H W, --only NAME [NAME ...], --json out.json, --torch-threads T,
     --threads T (tridnn's layer threads, layer_utils.THREADS), --settle-ms MS,
     --compare-threads: tridnn on 1 and on 2 layer threads, interleaved in one process)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch

import tridnn
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode


def nd_array(shape, layout, rng):
    """A float32 NumPy array with logical dims (N, C, H, W) in NCHW or NHWC memory order."""
    n, c, h, w = shape
    if layout == "NCHW":
        a = np.empty(shape, np.float32)
    else:
        a = np.empty((n, h, w, c), np.float32).transpose(0, 3, 1, 2)
    a[...] = rng.standard_normal(shape, dtype=np.float32)
    return a


def to_torch(a, layout):
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.contiguous(memory_format=torch.channels_last) if layout == "NHWC" else t.contiguous()


def cases(shape, layout, rng):
    """(name, tridnn callable, torch callable) for every layer and direction."""
    h = tridnn.Handle(find_cache=None)
    x = nd_array(shape, layout, rng)
    dy_full = nd_array(shape, layout, rng)
    xd = tridnn.TensorDescriptor.like(x)
    tx, tdy_full = to_torch(x, layout), to_torch(dy_full, layout)
    out = []

    # pooling: ResNet's 3x3 stride 2 pad 1 max pool, and a 2x2 stride 2 average pool
    for mode, k, s, p, tname in ((tridnn.PoolingMode.MAX, 3, 2, 1, "max 3x3/2"),
                                 (tridnn.PoolingMode.AVERAGE_COUNT_INCLUDE_PADDING, 2, 2, 0, "avg 2x2/2")):
        pool = tridnn.PoolingDescriptor(mode, k, p, s)
        y_dims = tridnn.get_pooling_forward_output_dim(pool, xd)
        y = nd_array(y_dims, layout, rng)
        dy = nd_array(y_dims, layout, rng)
        dx = nd_array(shape, layout, rng)
        yd = tridnn.TensorDescriptor.like(y)
        tridnn.pooling_forward(h, pool, 1.0, xd, x, 0.0, yd, y)
        tdy = to_torch(dy, layout)
        if mode == tridnn.PoolingMode.MAX:
            ty, idx = torch.ops.aten.max_pool2d_with_indices(tx, [k, k], [s, s], [p, p])
            t_fwd = lambda: torch.ops.aten.max_pool2d(tx, [k, k], [s, s], [p, p])
            t_bwd = lambda: torch.ops.aten.max_pool2d_with_indices_backward(
                tdy, tx, [k, k], [s, s], [p, p], [1, 1], False, idx)
        else:
            t_fwd = lambda: torch.ops.aten.avg_pool2d(tx, [k, k], [s, s], [p, p], False, True)
            t_bwd = lambda: torch.ops.aten.avg_pool2d_backward(tdy, tx, [k, k], [s, s], [p, p], False, True, None)
        out.append((f"pool {tname} fwd", lambda pool=pool, y=y, yd=yd: tridnn.pooling_forward(
            h, pool, 1.0, xd, x, 0.0, yd, y), t_fwd))
        out.append((f"pool {tname} bwd", lambda pool=pool, y=y, yd=yd, dy=dy, dx=dx: tridnn.pooling_backward(
            h, pool, 1.0, yd, y, yd, dy, xd, x, 0.0, xd, dx), t_bwd))

    # activation: relu
    relu = ActivationDescriptor(ActivationMode.RELU)
    y = nd_array(shape, layout, rng)
    dx = nd_array(shape, layout, rng)
    out.append(("relu fwd", lambda: tridnn.activation_forward(h, relu, 1.0, xd, x, 0.0, xd, y),
                lambda: torch.relu(tx)))
    out.append(("relu bwd", lambda: tridnn.activation_backward(h, relu, 1.0, xd, y, xd, dy_full, xd, x, 0.0, xd, dx),
                lambda: torch.ops.aten.threshold_backward(tdy_full, tx, 0.0)))

    # softmax over channels
    ys = nd_array(shape, layout, rng)
    tridnn.softmax_forward(h, "accurate", "channel", 1.0, xd, x, 0.0, xd, ys)
    tys = to_torch(ys, layout)
    out.append(("softmax channel fwd", lambda: tridnn.softmax_forward(h, "accurate", "channel", 1.0, xd, x, 0.0, xd, y),
                lambda: torch.ops.aten._softmax(tx, 1, False)))
    out.append(("softmax channel bwd", lambda: tridnn.softmax_backward(h, "accurate", "channel", 1.0, xd, ys, xd,
                                                                        dy_full, 0.0, xd, dx),
                lambda: torch.ops.aten._softmax_backward_data(tdy_full, tys, 1, torch.float32)))

    # batch norm (spatial), training forward and backward
    bn = tridnn.derive_bn_tensor_descriptor(xd, "spatial")
    c = shape[1]
    scale = np.ones(bn.dims, np.float32)
    bias = np.zeros(bn.dims, np.float32)
    rm, rv = np.zeros(bn.dims, np.float32), np.ones(bn.dims, np.float32)
    sm, si = np.empty(bn.dims, np.float32), np.empty(bn.dims, np.float32)
    ds, db = np.empty(bn.dims, np.float32), np.empty(bn.dims, np.float32)
    tridnn.batch_norm_forward_training(h, "spatial", 1, 0, xd, x, xd, y, bn, scale, bias, 0.1, rm, rv, 1e-5, sm, si)
    tw, tb = torch.ones(c), torch.zeros(c)
    trm, trv = torch.zeros(c), torch.ones(c)
    _, tsm, tsi = torch.ops.aten.native_batch_norm(tx, tw, tb, trm, trv, True, 0.1, 1e-5)
    out.append(("batchnorm train fwd", lambda: tridnn.batch_norm_forward_training(
        h, "spatial", 1, 0, xd, x, xd, y, bn, scale, bias, 0.1, rm, rv, 1e-5, sm, si),
        lambda: torch.ops.aten.native_batch_norm(tx, tw, tb, trm, trv, True, 0.1, 1e-5)))
    out.append(("batchnorm bwd", lambda: tridnn.batch_norm_backward(
        h, "spatial", 1, 0, 1, 0, xd, x, xd, dy_full, xd, dx, bn, scale, ds, db, 1e-5, sm, si),
        lambda: torch.ops.aten.native_batch_norm_backward(tdy_full, tx, tw, trm, trv, tsm, tsi, True, 1e-5,
                                                          [True, True, True])))
    return out


def timed(fn, settle: float = 0.0) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process) of one call, made ``settle``
    seconds after the previous one returned."""
    time.sleep(settle)
    cpu, start = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def compare_threads(name, layout, ours, args) -> dict:
    """tridnn's time on 1 and on 2 layer threads (layer_utils.THREADS), interleaved per
    repeat in this process; CPU time above wall time means the threads overlapped."""
    from tridnn.cpu import common, layer_utils
    saved = (layer_utils.THREADS, common.WORKERS)
    common.WORKERS = max(2, common.WORKERS)
    times = {1: [], 2: []}
    try:
        for t in (1, 2):
            layer_utils.THREADS = t
            ours()  # warm up (each thread's scratch buffers)
        for _ in range(args.repeats):
            for t in (1, 2):
                layer_utils.THREADS = t
                times[t].append(timed(ours, args.settle_ms / 1e3))
    finally:
        layer_utils.THREADS, common.WORKERS = saved
    med = {t: (statistics.median(w for w, _ in v) * 1e3, statistics.median(c for _, c in v) * 1e3)
           for t, v in times.items()}
    row = dict(case=name, layout=layout, one_ms=med[1][0], one_cpu_ms=med[1][1], two_ms=med[2][0],
               two_cpu_ms=med[2][1], ratio=med[2][0] / med[1][0])
    print(f"{name:28s} {layout:6s} 1 thread {med[1][0]:7.2f} ms (cpu {med[1][1]:7.2f})   2 threads {med[2][0]:7.2f} ms "
          f"(cpu {med[2][1]:7.2f})   2/1 {row['ratio']:.2f}", flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=4, default=(8, 256, 56, 56))
    ap.add_argument("--layouts", nargs="+", default=["NCHW", "NHWC"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--only", nargs="+", default=None, help="substrings of the case names to run (any matches)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of tridnn's layers (layer_utils.THREADS; default: the pool's size)")
    ap.add_argument("--torch-threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--settle-ms", type=float, default=50.0,
                    help="pause before each timed call, so leftover spinning threads do not interfere")
    ap.add_argument("--compare-threads", action="store_true",
                    help="time tridnn with layer_utils.THREADS 1 and 2 (interleaved per repeat) instead of torch")
    args = ap.parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    if args.threads is not None:
        from tridnn.cpu import layer_utils
        if hasattr(layer_utils, "THREADS"):
            layer_utils.THREADS = args.threads
        else:   # older code without the switch: its pool size is TRIDNN_NUM_THREADS
            print("# this tridnn has no layer_utils.THREADS; set TRIDNN_NUM_THREADS instead")
    rng = np.random.default_rng(0)
    rows = []
    from tridnn.cpu import common, layer_utils
    layer_threads = layer_utils.threads() if hasattr(layer_utils, "threads") else common.WORKERS
    print(f"# tridnn layers on {layer_threads} thread(s), from {tridnn.__file__}")
    print(f"# shape {tuple(args.shape)} float32, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"numpy {np.__version__}, {args.repeats} interleaved repeats, {args.settle_ms:g} ms settle, medians")
    if not args.compare_threads:
        print(f"{'case':28s} {'layout':6s} {'tridnn ms':>10s} {'torch ms':>10s} {'ratio':>7s} "
              f"{'best ms':>8s} {'torch best':>10s} {'ratio':>6s} {'cpu ms':>7s} {'torch cpu':>9s} {'ratio':>6s}")
    for layout in args.layouts:
        for name, ours, theirs in cases(tuple(args.shape), layout, rng):
            if args.only and not any(part in name for part in args.only):
                continue
            if args.compare_threads:
                rows.append(compare_threads(name, layout, ours, args))
                continue
            ours(), theirs()  # warm up
            a, b, ca, cb = [], [], [], []
            for _ in range(args.repeats):
                wall, cpu = timed(ours, args.settle_ms / 1e3)
                a.append(wall)
                ca.append(cpu)
                wall, cpu = timed(theirs, args.settle_ms / 1e3)
                b.append(wall)
                cb.append(cpu)
            ta, tb = statistics.median(a) * 1e3, statistics.median(b) * 1e3
            ba, bb = min(a) * 1e3, min(b) * 1e3
            pa, pb = statistics.median(ca) * 1e3, max(statistics.median(cb) * 1e3, 1e-3)
            rows.append(dict(case=name, layout=layout, tridnn_ms=ta, torch_ms=tb, ratio=ta / tb,
                             tridnn_best_ms=ba, torch_best_ms=bb, best_ratio=ba / bb,
                             tridnn_cpu_ms=pa, torch_cpu_ms=pb, cpu_ratio=pa / pb))
            print(f"{name:28s} {layout:6s} {ta:10.2f} {tb:10.2f} {ta / tb:7.2f} {ba:8.2f} {bb:10.2f} {ba / bb:6.2f} "
                  f"{pa:7.2f} {pb:9.2f} {pa / pb:6.2f}", flush=True)
    if args.compare_threads:
        if rows:
            print(f"geomean 2 / 1 threads {float(np.exp(np.mean(np.log([r['ratio'] for r in rows])))):.2f}")
        return rows
    ratios = [r["ratio"] for r in rows]
    if ratios:
        geomean = lambda key: float(np.exp(np.mean(np.log([r[key] for r in rows]))))
        print(f"geomean ratio {geomean('ratio'):.2f} (best-of {geomean('best_ratio'):.2f}, "
              f"CPU time {geomean('cpu_ratio'):.2f}) over {len(ratios)} cases")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
