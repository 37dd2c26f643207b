"""MobileNetV2 depthwise convolutions: tridnn's Triton algorithms against cuDNN, by direction.

    PYTHONPATH=src python3 benchmarks/bench_gpu_depthwise.py --out results/dw [--batch 64]
        [--layers dw32_112,dw144_56] [--directions fwd,bwd_data,bwd_filter] [--budget-s 300]

For each layer of shapes.MOBILENETV2_DW (bfloat16, NHWC / channels_last) and each
direction, cuDNN (torch F.conv2d / aten.convolution_backward, cudnn.benchmark on) and
every applicable Triton algorithm through the public tridnn calls are timed by CUDA-graph
replay medians (bench_gpu_conv.bench); each result is checked against cuDNN's (relative
L2 error). TB/s counts the minimal bytes: x + y for the forward, dy + dx for backward
data, x + dy for backward filter (plus the filter), each crossing DRAM once; ratio =
best tridnn / cuDNN (lower is better). A table is printed last, then the launch config
each depthwise tuner picked for the best algorithm; JSON goes to --out.

``--device cpu`` is a dry run of the same code on the CPU (Triton's interpreter, float32,
batch 1, spatial sizes / 16, channels / 32, the CPU torch convolution as the reference, one timed call):
it checks the structure, not the speed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench_gpu_depthwise_out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", default="all", help="comma-separated layer names of MOBILENETV2_DW, or all")
    ap.add_argument("--directions", default="fwd,bwd_data,bwd_filter")
    ap.add_argument("--budget-s", type=float, default=600.0, help="start no new layer after this many seconds")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--algos", default="all", help="comma-separated Triton algorithm names (e.g. DIRECT,ALGO_1), or all")
    return ap.parse_args()


ARGS = parse()
if ARGS.device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu_conv as B  # noqa: E402  (make, torch_conv, tridnn_call, rel_err, bench: the same harness)
import depthwise_bench_common as common  # noqa: E402
PEAK_TBS = 4.27  # H200 copy ceiling measured for this project (TB/s)


def bench(fn):
    return common.timed(fn, ARGS.device == "cpu")


def scaled(p):
    return common.scaled(p, ARGS.device != "cuda")


def min_bytes(direction, x, w, dy):
    """Bytes each tensor the direction must touch, once: the DRAM floor."""
    size = lambda t: t.numel() * t.element_size()
    if direction == "fwd":
        return size(x) + size(dy) + size(w)  # reads x, w; writes y (dy has y's shape)
    if direction == "bwd_data":
        return size(dy) + size(x) + size(w)  # reads dy, w; writes dx
    return size(x) + size(dy) + size(w)      # reads x, dy; writes dw


def tuners():
    """The depthwise paths' tuners (their picks are reported per row: the configs to make
    defaults of)."""
    from tridnn.cuda import conv_depthwise_backward as D
    from tridnn.cuda import conv_direct
    return {"fwd": conv_direct.DirectForward.tuner, "bwd_data": D._data_tuner, "wgrad": D._wgrad_tuner}


def picks_since(before):
    """Tuner entries added since ``before`` (a snapshot of every tuner's keys)."""
    out = {}
    for name, t in tuners().items():
        for key, cfg in list(t._best.items()):
            if key not in before[name]:
                out[f"{name}:{key[-1] if name != 'wgrad' else key[1:]}"] = {k: (v if isinstance(v, (int, float, str, bool))
                                                                             else str(v)) for k, v in cfg.items()}
    return out


def run_layer(handle, direction, p, n, dtype, dev):
    cd, xd, wd, yd, x, w, dy = B.make(p, n, dtype, tridnn.MathType.DEFAULT, dev)
    ref_fn = B.torch_conv(direction, p, x, w, dy)
    ref = ref_fn()
    t_ref = bench(ref_fn)
    nbytes = min_bytes(direction, x, w, dy)
    row = dict(layer=p["name"], direction=direction, dtype=dtype, batch=n, spatial=list(p["spatial"]),
               min_bytes=nbytes, floor_us=nbytes / PEAK_TBS / 1e6, cudnn_us=t_ref * 1e6,
               cudnn_tbs=nbytes / t_ref / 1e12, algos={})
    problem = ConvProblem(direction, xd, wd, yd, cd)
    out = torch.empty_like(ref)
    for algo in registry.algorithms("conv", direction, "triton"):
        reason = algo.not_applicable(problem)
        if reason or (ARGS.algos != "all" and algo.name not in ARGS.algos.split(",")):
            continue
        ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
        fn = B.tridnn_call(handle, direction, algo, cd, xd, wd, yd, x, w, dy, out, ws)
        try:
            out.fill_(float("nan"))
            before = {k: set(t._best) for k, t in tuners().items()}
            fn()  # first call: tunes and compiles
            picked = picks_since(before)
            if dev != "cpu":
                torch.cuda.synchronize()
            err = B.rel_err(out, ref)
            t = bench(fn)
        except Exception as exc:  # report it, keep going
            row["algos"][algo.name] = dict(error=f"{type(exc).__name__}: {exc}"[:300])
            continue
        row["algos"][algo.name] = dict(us=t * 1e6, tbs=nbytes / t / 1e12, ratio=t / t_ref, rel_err=err, picked=picked)
    ok = {k: v for k, v in row["algos"].items() if "us" in v and v["rel_err"] < 2e-2}
    if ok:
        best = min(ok, key=lambda k: ok[k]["us"])
        row.update(best=best, best_us=ok[best]["us"], best_tbs=ok[best]["tbs"], ratio=ok[best]["us"] / row["cudnn_us"])
    return row


def table(rows):
    lines = [f"{'layer':12s} {'dir':10s} {'floor us':>8s} {'cuDNN us':>9s} {'TB/s':>5s} {'best':>14s} "
             f"{'us':>8s} {'TB/s':>5s} {'ratio':>6s}  others (us, rel err)"]
    for r in rows:
        others = ", ".join(f"{k} {v['us']:.1f} ({v['rel_err']:.1e})" if "us" in v else f"{k} ERROR"
                           for k, v in r["algos"].items())
        best = r.get("best")
        lines.append(f"{r['layer']:12s} {r['direction']:10s} {r['floor_us']:8.1f} {r['cudnn_us']:9.1f} "
                     f"{r['cudnn_tbs']:5.2f} {best or '-':>14s} {r.get('best_us', float('nan')):8.1f} "
                     f"{r.get('best_tbs', float('nan')):5.2f} {r.get('ratio', float('nan')):6.3f}  {others}")
    lines.append("tuner picks (the best algorithm's):")
    for r in rows:
        if r.get("best"):
            lines.append(f"  {r['layer']:12s} {r['direction']:10s} {r['best']}: {r['algos'][r['best']].get('picked')}")
    for d in ("fwd", "bwd_data", "bwd_filter"):
        rs = [r for r in rows if r["direction"] == d and "ratio" in r]
        if rs:
            g = math.exp(sum(math.log(r["ratio"]) for r in rs) / len(rs))
            worst = max(rs, key=lambda r: r["ratio"])
            lines.append(f"{d}: geomean ratio {g:.3f} over {len(rs)} layers; worst {worst['layer']} "
                         f"{worst['ratio']:.3f}")
    return "\n".join(lines)


def main():
    dev = ARGS.device
    dtype = "float32" if dev == "cpu" else ARGS.dtype
    n = 1 if dev == "cpu" else ARGS.batch
    if dev == "cuda":
        torch.backends.cudnn.benchmark = True
        handle = tridnn.Handle(device="cuda", find_cache=None)
    else:
        handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    layers = common.select_layers(ARGS.layers)
    directions = ARGS.directions.split(",")
    start = time.time()
    rows, skipped = [], []
    for p in layers:
        for d in directions:
            if time.time() - start > ARGS.budget_s:
                skipped.append(f"{p['name']}/{d}")
                continue
            row = run_layer(handle, d, scaled(p), n, dtype, dev)
            rows.append(row)
            print(json.dumps(row), flush=True)
    common.write_json(ARGS.out, "depthwise.json", dev, n, dtype, skipped, start, rows)
    print()
    print(table(rows))
    if skipped:
        print(f"skipped past --budget-s: {', '.join(skipped)}")


if __name__ == "__main__":
    main()
