"""What the MobileNetV2 depthwise benchmarks (bench_gpu_depthwise, sweep_depthwise_fwd) share:
the layer list, the dry run's shrunken layers and one-call timing, the JSON record, and the
sweeps' (sweep_depthwise_tma, sweep_depthwise_wgrad) stubbed tuner timers."""
from __future__ import annotations

import json
import os
import time


def select_layers(spec):
    """shapes.MOBILENETV2_DW, or the comma-separated names in ``spec`` ("all": every layer)."""
    from tridnn import shapes
    layers = shapes.MOBILENETV2_DW
    if spec != "all":
        want = spec.split(",")
        unknown = set(want) - {p["name"] for p in layers}
        if unknown:
            raise SystemExit(f"unknown layers {sorted(unknown)}; known: {[p['name'] for p in layers]}")
        layers = [p for p in layers if p["name"] in want]
    return layers


def scaled(p, dry):
    """The layer itself on the GPU; in the CPU dry run spatial sizes / 16 (at least 5), channels / 32."""
    if not dry:
        return p
    c = max(4, p["C"] // 32)
    return dict(p, spatial=tuple(max(5, s // 16) for s in p["spatial"]), C=c, K=c, groups=c)


def timed(fn, dry):
    """Seconds a call: CUDA-graph replay median (bench_gpu_conv.bench) on the GPU; in the dry
    run one call after a warm-up call."""
    if dry:
        fn()
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    import bench_gpu_conv
    return bench_gpu_conv.bench(fn)


def write_json(out, filename, dev, n, dtype, skipped, start, rows):
    """out/filename with the run's info and rows; returns the info."""
    import torch
    os.makedirs(out, exist_ok=True)
    info = dict(device=torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter dry run)",
                torch=torch.__version__, batch=n, dtype=dtype, skipped=skipped, seconds=time.time() - start)
    with open(os.path.join(out, filename), "w") as f:
        json.dump(dict(info=info, rows=rows), f, indent=1)
    return info


def tuner_timing_once():
    """Workers that only compile: each tuner candidate runs once and "takes" 1 ms. Stubs the
    tuner's timer (common.gpu_time_ms) and do_bench, its fallback."""
    import triton.testing
    from tridnn.cuda import common

    def once(fn, *a, **k):
        fn()
        return 1.0
    triton.testing.do_bench = once
    common.gpu_time_ms = once


def tuner_timing_quick():
    """Sweeps that tune ~40 candidates a task: at most 6 ms of timing a candidate (the tuner's
    timer, common.gpu_time_ms, and do_bench, its fallback)."""
    import triton.testing
    from tridnn.cuda import common
    full, full_graph = triton.testing.do_bench, common.gpu_time_ms

    def quick(fn, warmup=3, rep=15, **k):
        return full(fn, warmup=1, rep=min(rep, 6), **k)
    triton.testing.do_bench = quick
    common.gpu_time_ms = lambda fn, rep_ms=15.0: full_graph(fn, rep_ms=min(rep_ms, 6.0))
