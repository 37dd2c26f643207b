"""Sweep of the TMA convolution kernels (src/tridnn/cuda/conv_tma.py) against cuDNN on the
ResNet-50 layers, every launch config timed, so one H200 run says which configs win.

    PYTHONPATH=src python3 benchmarks/bench_gpu_conv_tma.py --out $OUT [--batch 64] [--budget-s 300]

For each layer and direction (fwd, bwd_data, bwd_filter), bfloat16 channels-last: cuDNN's
time (PyTorch, cudnn.benchmark on), the time of each TMA config with its relative L2 error
against cuDNN's result, cuBLAS's time for the same GEMM on 1x1 stride-1 layers, and, where
the TMA path does not apply (stride-2 3x3, conv1, dgrad of stride 2), the existing
pointer kernels through bench_gpu_conv.run_layer. Times: CUDA-graph replay medians.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu_conv as base  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_tma  # noqa: E402
from tridnn.cuda.common import sm_count  # noqa: E402


def tma_direction(direction, problem, x, w, dy, ref, flops):
    """Time every candidate config of the TMA kernel for one direction; None if not applicable."""
    dev = x.device
    if direction == "fwd":
        out = torch.empty_like(ref)
        plan = conv_tma.plan_forward(problem, x, w, out)
        if plan is None:
            return None
        cands = conv_tma.candidates(plan, dev)
        call = lambda c: (lambda: conv_tma.launch_conv(plan, problem, x, w, out, 1.0, 0.0, c))
    elif direction == "bwd_data":
        out = torch.empty_like(x)
        plan = conv_tma.plan_backward_data(problem, dy, w, out)
        if plan is None:
            return None
        cands = conv_tma.candidates(plan, dev)
        call = lambda c: (lambda: conv_tma.launch_conv(plan, problem, dy, w, out, 1.0, 0.0, c, kmajor=True))
    else:
        out = torch.empty_like(w)
        plan = conv_tma.plan_backward_filter(problem, x, dy, out)
        if plan is None:
            return None
        cands = conv_tma.wgrad_candidates(plan, dev)
        sms = sm_count(dev)
        cap = 64
        part = torch.empty((cap, out.shape[0], plan.taps.taps, out.shape[1]), dtype=torch.float32, device=dev)
        from tridnn.cuda.conv_bwd_filter_implicit_gemm import ImplicitGemmBackwardFilter

        def call(c):
            def fn():
                used = conv_tma.launch_wgrad_partials(plan, problem, x, dy, part, c,
                                                      conv_tma.slices_for(plan, c, sms, cap))
                ImplicitGemmBackwardFilter._finish(problem, part, out, used, 1.0, 0.0, plan.c_out)
            return fn
    res = {}
    for c in cands:
        name = "_".join(f"{k}{v}" for k, v in c.items())
        try:
            fn = call(c)
            t0 = time.time()
            fn()
            torch.cuda.synchronize()
            first = time.time() - t0
            err = base.rel_err(out, ref)
            t = base.bench(fn)
        except Exception as exc:
            res[name] = dict(error=f"{type(exc).__name__}: {exc}"[:400])
            continue
        res[name] = dict(us=t * 1e6, tflops=flops / t / 1e12, rel_err=err, first_call_s=first)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=300)
    ap.add_argument("--layers", default="")
    ap.add_argument("--directions", default="fwd,bwd_data,bwd_filter")
    ap.add_argument("--dry-run", action="store_true",
                    help="tiny layers on the CPU through Triton's interpreter (checks the script, no timing)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    dtype = "float32" if args.dry_run else "bfloat16"
    if args.dry_run:
        dev = torch.device("cpu")
        handle = tridnn.Handle(device="cpu", backend="triton")
        from tridnn.cuda import layer_utils  # noqa: F401  (lets the interpreter loop over runtime bounds)
        torch.cuda.synchronize = lambda *a: None
        base.bench = lambda fn, rep=30: (lambda t0: (fn(), time.perf_counter() - t0)[1])(time.perf_counter())
        layers = [shapes.conv("t_3x3", 16, 16, (6, 7), 3, 1, 1), shapes.conv("t_1x1", 16, 32, (5, 5), 1),
                  shapes.conv("t_ds", 32, 16, (6, 6), 1, 2), shapes.conv("t_3x3s2", 16, 16, (6, 6), 3, 2, 1)]
    else:
        dev = torch.device("cuda")
        handle = tridnn.Handle(device="cuda")
        layers = [p for p in shapes.RESNET50 if not args.layers or p["name"] in args.layers.split(",")]
    rows = []
    start = time.time()
    todo = []
    for direction in args.directions.split(","):
        todo += [(direction, p, True) for p in layers]
    todo += [(d, p, False) for d, p, _ in todo]  # pass 2: layers the TMA path does not take
    done = set()
    for direction, p, tma_pass in todo:
            if (direction, p["name"]) in done:
                continue
            if time.time() - start > args.budget_s:
                print(f"budget spent; skipped {direction} {p['name']}", flush=True)
                continue
            cd, xd, wd, yd, x, w, dy = base.make(p, args.batch, dtype, tridnn.MathType.DEFAULT, dev)
            problem = ConvProblem(direction, xd, wd, yd, cd)
            ref_fn = base.torch_conv(direction, p, x, w, dy)
            ref = ref_fn()
            row = dict(layer=p["name"], direction=direction, cudnn_us=base.bench(ref_fn) * 1e6,
                       flops=problem.flops)
            if p["kernel"] == (1, 1) and p["stride"] == (1, 1) and direction != "bwd_filter":
                a = x.permute(0, 2, 3, 1).reshape(-1, p["C"]) if direction == "fwd" else \
                    dy.permute(0, 2, 3, 1).reshape(-1, p["K"])
                b = w.reshape(p["K"], p["C"]).t() if direction == "fwd" else w.reshape(p["K"], p["C"])
                row["cublas_us"] = base.bench(lambda: a @ b) * 1e6
            tma = tma_direction(direction, problem, x, w, dy, ref, problem.flops) if tma_pass else None
            if tma_pass and tma is None:
                continue
            done.add((direction, p["name"]))
            if tma is not None:
                row["tma"] = tma
                ok = {k: v for k, v in tma.items() if "us" in v}
                if ok:
                    best = min(ok, key=lambda k: ok[k]["us"])
                    row.update(best=best, best_us=ok[best]["us"], best_err=ok[best]["rel_err"])
                elif not any("tma" in r and any("us" in v for v in r["tma"].values()) for r in rows):
                    print(json.dumps(tma, indent=1))  # nothing ran yet: stop rather than time the rest
                    sys.exit(f"no TMA config ran on {direction} {p['name']}")
            else:
                old = base.run_layer(handle, direction, p, args.batch, dtype, tridnn.MathType.DEFAULT, dev)
                row["old"] = old["algos"]
                if "best_us" in old:
                    row.update(best="old:" + old["best"], best_us=old["best_us"], best_err=old["best_err"])
            if "best_us" in row:
                row["ratio"] = row["best_us"] / row["cudnn_us"]
            rows.append(row)
            print(f"{direction:10s} {p['name']:11s} cudnn {row['cudnn_us']:8.1f} us  best {row.get('best_us', 0):8.1f}"
                  f" ratio {row.get('ratio', float('nan')):5.2f} err {row.get('best_err', float('nan')):.1e}"
                  f" {row.get('best', '')}", flush=True)
            with open(os.path.join(args.out, "conv_tma.json"), "w") as f:
                json.dump(rows, f, indent=1)
    print("\nsummary (geomean of best/cuDNN, layers measured)")
    for direction in args.directions.split(","):
        r = [row["ratio"] for row in rows if row["direction"] == direction and "ratio" in row]
        tma_only = [row["ratio"] for row in rows if row["direction"] == direction and "tma" in row and "ratio" in row]
        g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
        print(f"{direction:10s} all {len(r):2d} layers {g(r):5.2f}   TMA-path {len(tma_only):2d} layers {g(tma_only):5.2f}")


if __name__ == "__main__":
    main()
