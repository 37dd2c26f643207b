"""Which launch configs make the TMA implicit GEMM fast in strict float32 (FMA math)?

Strict float32 (no tf32) runs tl.dot with input_precision="ieee", which Triton lowers to
CUDA-core FMAs instead of tensor-core MMAs. The tile configs tuned for bfloat16 MMAs are
not the right ones there (registers, not shared memory, bound an FMA tile). This script
times conv_tma's forward kernel on a few ResNet-50 layers over a grid of configs, with
cuDNN (allow_tf32 off) and cuBLAS's SGEMM on the same GEMM size beside them, and the
"tf32x3" precision (three tf32 MMAs, near-float32 accuracy) for comparison. Each result
is checked against cuDNN's (relative L2 error).

    PYTHONPATH=src python3 benchmarks/sweep_fp32_fma.py --out DIR [--budget-s 150]
    (CPU dry run: TRITON_INTERPRET=1 ... --device cpu --batch 1)
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu_conv as B  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_tma  # noqa: E402

LAYERS = ["res2_1x1c", "res2_1x1r", "res4_1x1c", "res2_3x3", "res4_3x3", "res3_1x1a"]


def configs(flat):
    """(BH, BW) x BLOCK_N x BK_CAP (BLOCK_K = BK_CAP // 2 in float32) x warps x stages."""
    boxes = [(1, 64), (1, 128), (1, 256)] if flat else [(8, 8), (8, 16), (16, 16)]
    out = []
    for (bh, bw), bn, cap, warps, stages in itertools.product(boxes, (64, 128), (16, 32), (4, 8), (2, 3)):
        if bh * bw * bn > 256 * 128 or (bh * bw * bn >= 128 * 128 and warps == 4):
            continue  # more than 128 accumulators a thread
        out.append(dict(BH=bh, BW=bw, BLOCK_N=bn, BK_CAP=cap, num_warps=warps, num_stages=stages))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sweep_out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=150)
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    tridnn.Handle("cuda" if gpu else "cpu", backend="triton", find_cache=None)  # sets the backend up
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    bench = B.bench if gpu else (lambda fn: (fn(), float("nan"))[1])
    start = time.time()
    rows = []
    by_name = {p["name"]: p for p in shapes.RESNET50}
    for name in args.layers.split(","):
        p = by_name[name]
        cd, xd, wd, yd, x, w, dy = B.make(p, args.batch, "float32", tridnn.MathType.FMA, dev)
        ref_fn = B.torch_conv("fwd", p, x, w, dy)
        ref = ref_fn()
        problem = ConvProblem("fwd", xd, wd, yd, cd)
        flops = problem.flops
        row = dict(layer=name, cudnn_us=bench(ref_fn) * 1e6, configs=[])
        m = args.batch * yd.dims[2] * yd.dims[3]
        if p["kernel"] == (1, 1):  # the same GEMM through cuBLAS (SGEMM, no tf32)
            a = torch.randn(m, p["C"], device=dev)
            b = torch.randn(p["C"], p["K"], device=dev)
            row["sgemm_us"] = bench(lambda: a @ b) * 1e6
        out = torch.empty_like(ref)
        plan = conv_tma.forward_plan(problem, x, w, out)
        if plan is None:
            print(name, "no TMA plan", flush=True)
            continue
        flat = plan.n == 1 and plan.oh == 1
        cands = configs(flat) if gpu else [conv_tma.candidates(plan, dev)[0]]
        for prec in ("ieee", "tf32x3"):
            conv_tma.input_precision = lambda problem, prec=prec: prec
            conv_tma._recipes = type(conv_tma._recipes)()  # the recipe holds the precision
            for cfg in cands:
                if time.time() - start > args.budget_s:
                    break
                if prec == "tf32x3" and cfg not in cands[:: max(1, len(cands) // 6)]:
                    continue  # a sample: tf32x3 is for comparison only
                fn = lambda: conv_tma.launch_conv(plan, problem, x, w, out, 1.0, 0.0, cfg)
                try:
                    out.fill_(float("nan"))
                    fn()
                    if gpu:
                        torch.cuda.synchronize()
                    err = B.rel_err(out, ref)
                    t = bench(fn)
                except Exception as exc:  # out of resources etc.: report and go on
                    row["configs"].append(dict(cfg, prec=prec, error=f"{type(exc).__name__}: {exc}"[:160]))
                    continue
                row["configs"].append(dict(cfg, prec=prec, us=t * 1e6, tflops=flops / t / 1e12, rel_err=err))
        ok = [c for c in row["configs"] if "us" in c and c["rel_err"] < 1e-5]
        for prec in ("ieee", "tf32x3"):
            mine = [c for c in ok if c["prec"] == prec]
            if mine:
                best = min(mine, key=lambda c: c["us"])
                row[f"best_{prec}"] = best
        rows.append(row)
        b = row.get("best_ieee", {})
        print(f"{name}: cudnn {row['cudnn_us']:.1f}us ({flops / row['cudnn_us'] / 1e6:.1f} TFLOP/s)"
              f" sgemm {row.get('sgemm_us', float('nan')):.1f}us best ieee {b.get('us', float('nan')):.1f}us"
              f" {({k: b[k] for k in ('BH', 'BW', 'BLOCK_N', 'BK_CAP', 'num_warps', 'num_stages')} if b else '')}"
              f" tf32x3 {row.get('best_tf32x3', {}).get('us', float('nan')):.1f}us"
              f" err {row.get('best_tf32x3', {}).get('rel_err', float('nan')):.1e}", flush=True)
        with open(os.path.join(args.out, "sweep_fp32_fma.json"), "w") as f:
            json.dump(rows, f, indent=1)
    print("\n| layer | cuDNN FMA us | SGEMM us | best ieee us | ratio | TFLOP/s | tf32x3 us |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        b = r.get("best_ieee", {})
        print(f"| {r['layer']} | {r['cudnn_us']:.1f} | {r.get('sgemm_us', float('nan')):.1f} | "
              f"{b.get('us', float('nan')):.1f} | {b.get('us', float('nan')) / r['cudnn_us']:.2f} | "
              f"{b.get('tflops', float('nan')):.1f} | {r.get('best_tf32x3', {}).get('us', float('nan')):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
