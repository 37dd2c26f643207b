"""Strided backward data on the H200: one launch per phase of dx (conv_tma_kernel, the
old path) against all phases in one launch (conv_tma_phases_kernel), config by config,
next to cuDNN. bfloat16 NHWC, ResNet-50 layers at --batch.

    PYTHONPATH=src python3 benchmarks/bench_conv_phases.py [--layers res3_3x3s2,...] [--budget-s 240]

Every candidate conv_tma.candidates offers (per-phase and FUSED) is timed as a CUDA-graph
median (bench_gpu_conv.bench) and its result compared with cuDNN's (relative L2 error;
a config over 1e-2 is marked WRONG and never counted as best). A config that fails to
compile or launch is reported and skipped. The last lines are a table: cuDNN, the best
per-phase config, the best fused config, their ratios to cuDNN and the speedup.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu_conv import bench, make, rel_err, torch_conv  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_tma  # noqa: E402

DEFAULT = "res3_3x3s2,res4_3x3s2,res5_3x3s2"


def name(cfg):
    return (f"{'fused' if cfg.get('FUSED') else 'phase'} {cfg['BH']}x{cfg['BW']}x{cfg['BLOCK_N']} "
            f"w{cfg['num_warps']}s{cfg['num_stages']}")


def run(p, n, dev, deadline):
    cd, xd, wd, yd, x, w, dy = make(p, n, "bfloat16", tridnn.MathType.DEFAULT, dev)
    ref_fn = torch_conv("bwd_data", p, x, w, dy)
    ref = ref_fn()
    row = dict(layer=p["name"], cudnn_us=bench(ref_fn) * 1e6, configs={})
    problem = ConvProblem("bwd_data", xd, wd, yd, cd)
    out = torch.empty_like(ref)
    plan = conv_tma.backward_data_plan(problem, dy, w, out)
    if not isinstance(plan, tuple) or len(plan) < 2:
        row["error"] = f"no phase plans (plan: {type(plan).__name__})"
        return row
    for cfg in conv_tma.candidates(plan, out.device, problem):
        if time.time() > deadline:
            row["configs"][name(cfg)] = dict(error="budget spent")
            continue
        fn = lambda: conv_tma.launch_conv(plan, problem, dy, w, out, 1.0, 0.0, cfg, kmajor=True)  # noqa: E731
        try:
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = rel_err(out, ref)
            t = bench(fn)
        except Exception as exc:  # report and go on: a config may not fit or compile
            torch.cuda.synchronize()
            row["configs"][name(cfg)] = dict(error=f"{type(exc).__name__}: {exc}"[:200])
            continue
        row["configs"][name(cfg)] = dict(us=t * 1e6, rel_err=err, ok=bool(err < 1e-2))
        print(f"  {p['name']:12s} {name(cfg):28s} {t * 1e6:8.1f} us  err {err:.1e}{'' if err < 1e-2 else '  WRONG'}",
              flush=True)
    for kind in ("phase", "fused"):
        ok = {k: v for k, v in row["configs"].items() if k.startswith(kind) and v.get("ok")}
        if ok:
            best = min(ok, key=lambda k: ok[k]["us"])
            row[kind] = dict(config=best, us=ok[best]["us"])
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default=DEFAULT)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=240)
    ap.add_argument("--out", default="", help="directory for phases.json (optional)")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    deadline = time.time() + args.budget_s
    want = args.layers.split(",")
    layers = [p for p in shapes.RESNET50 if p["name"] in want]
    missing = set(want) - {p["name"] for p in layers}
    if missing:
        print(f"# unknown layers skipped: {sorted(missing)}")
    rows = []
    for p in layers:
        if time.time() > deadline:
            print(f"# budget spent; skipping {p['name']}")
            continue
        try:
            rows.append(run(p, args.batch, dev, deadline))
        except Exception as exc:  # one layer's failure must not lose the others' numbers
            print(f"# {p['name']}: {type(exc).__name__}: {exc}"[:300])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "phases.json"), "w") as f:
            json.dump(rows, f, indent=1)
    print("\n| layer | cuDNN us | per-phase us (config) | ratio | fused us (config) | ratio | speedup |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        c = r["cudnn_us"]
        ph, fu = r.get("phase"), r.get("fused")
        cell = lambda b: (f"{b['us']:.1f} ({b['config'][6:]})", f"{b['us'] / c:.2f}") if b else ("-", "-")  # noqa: E731
        (pt, pr), (ft, fr) = cell(ph), cell(fu)
        sp = f"{ph['us'] / fu['us']:.2f}" if ph and fu else "-"
        print(f"| {r['layer']} | {c:.1f} | {pt} | {pr} | {ft} | {fr} | {sp} |")


if __name__ == "__main__":
    main()
