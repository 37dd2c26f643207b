"""The TMA convolution changes of issue 4 on the H200, config by config, next to cuDNN
(bfloat16 NHWC, ResNet-50 layers at --batch):

- bwd_data: strided backward data, one launch per phase of dx (conv_tma_kernel, the old
  path) against all phases in one launch (conv_tma_phases_kernel, FUSED configs);
- bwd_filter: small-image backward filter, the old configs (one image per box, WAVES 2
  or 1, float32 partials and a finish pass always) against the new ones (NB images per
  box, WAVES 0.5, and "direct": a one-slice split written straight into dw);
- fwd: 7x7 forward, one image per output box (old) against two (NB = 2, new).

    PYTHONPATH=src python3 benchmarks/bench_conv_phases.py [--sections bwd_data,bwd_filter,fwd]
        [--data-layers res3_3x3s2,...] [--filter-layers res4_3x3,...] [--fwd-layers res5_3x3]
        [--budget-s 240]

Every candidate conv_tma offers is timed as a CUDA-graph median (bench_gpu_conv.bench,
the finish pass included for backward filter) and its result compared with cuDNN's
(relative L2 error; over 1e-2 is marked WRONG and never counted as best). A config that
fails to compile or launch is reported and skipped. The last lines are a table: cuDNN,
the best old and the best new config, their ratios to cuDNN and the speedup.
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

DATA_LAYERS = "res3_3x3s2,res4_3x3s2,res5_3x3s2"
FILTER_LAYERS = "res4_3x3,res5_3x3,res5_1x1a,res5_1x1c"
FWD_LAYERS = "res5_3x3"


def name(cfg):
    if "BLOCK_M" in cfg:  # backward filter; DIRECT: one slice written straight into dw
        new = cfg.get("NB", 1) > 1 or cfg.get("WAVES", 2) < 1 or cfg["DIRECT"]
        return (f"{'new' if new else 'old'} nb{cfg.get('NB', 1)} {cfg['BH']}x{cfg['BW']} {cfg['BLOCK_M']}x{cfg['BLOCK_N']} "
                f"w{cfg['num_warps']}s{cfg['num_stages']} waves{cfg.get('WAVES', 2)}{' direct' if cfg['DIRECT'] else ''}")
    new = cfg.get("FUSED") or cfg.get("NB", 1) > 1
    return (f"{'new' if new else 'old'} {'fused' if cfg.get('FUSED') else 'phase'} nb{cfg.get('NB', 1)} "
            f"{cfg['BH']}x{cfg['BW']}x{cfg['BLOCK_N']} w{cfg['num_warps']}s{cfg['num_stages']}")


def time_configs(row, label, cands, launch, out, ref, deadline):
    """Times each config's launch(cfg) into out (NaN-filled first); records us and error."""
    for cfg in cands:
        if time.time() > deadline:
            row["configs"][name(cfg)] = dict(error="budget spent")
            continue
        fn = lambda: launch(cfg)  # noqa: E731
        try:
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = rel_err(out, ref)
            t = bench(fn)
        except Exception as exc:  # report and go on: a config may not fit or compile
            try:
                torch.cuda.synchronize()
            except Exception:  # a fault poisons the context: later configs will report it too
                pass
            row["configs"][name(cfg)] = dict(error=f"{type(exc).__name__}: {exc}"[:200])
            print(f"  {label:12s} {name(cfg):44s} {type(exc).__name__}", flush=True)
            continue
        row["configs"][name(cfg)] = dict(us=t * 1e6, rel_err=err, ok=bool(err < 1e-2))
        print(f"  {label:12s} {name(cfg):44s} {t * 1e6:8.1f} us  err {err:.1e}{'' if err < 1e-2 else '  WRONG'}",
              flush=True)
    for kind in ("old", "new"):
        ok = {k: v for k, v in row["configs"].items() if k.startswith(kind) and v.get("ok")}
        if ok:
            best = min(ok, key=lambda k: ok[k]["us"])
            row[kind] = dict(config=best[4:], us=ok[best]["us"])
    return row


def run_filter(p, n, dev, deadline):
    from tridnn.cuda.common import sm_count
    from tridnn.cuda.conv_bwd_filter_implicit_gemm import ImplicitGemmBackwardFilter
    cd, xd, wd, yd, x, w, dy = make(p, n, "bfloat16", tridnn.MathType.DEFAULT, dev)
    ref_fn = torch_conv("bwd_filter", p, x, w, dy)
    ref = ref_fn()
    row = dict(layer=p["name"], direction="bwd_filter", cudnn_us=bench(ref_fn) * 1e6, configs={})
    problem = ConvProblem("bwd_filter", xd, wd, yd, cd)
    out = torch.empty_like(ref)
    plan = conv_tma.backward_filter_plan(problem, x, dy, out)
    if plan is None:
        row["error"] = "no TMA plan"
        return row
    cap = ImplicitGemmBackwardFilter()._cap(problem)  # the slices of partials ALGO_1's workspace holds
    part = torch.empty((cap, plan.c_red, plan.taps.taps, plan.c_out), dtype=torch.float32, device=dev)
    sms = sm_count(out.device)

    def launch(cfg):
        slices = conv_tma.launch_wgrad_partials(plan, problem, x, dy, part, cfg,
                                                conv_tma.slices_for(plan, cfg, sms, cap),
                                                out if cfg["DIRECT"] else None)
        if slices:
            ImplicitGemmBackwardFilter._finish(problem, part, out, slices, 1.0, 0.0, plan.c_out)
    cands = []
    for cfg in conv_tma.wgrad_candidates(plan, out.device, x.element_size()):
        one = conv_tma.slices_for(plan, cfg, sms, cap) == 1  # the old path: partials and finish even then
        cands += [dict(cfg, DIRECT=False)] + ([dict(cfg, DIRECT=True)] if one else [])
    return time_configs(row, p["name"], cands, launch, out, ref, deadline)


def run_forward(p, n, dev, deadline):
    """Forward through conv_tma_kernel: one image per box (old) or NB images (new)."""
    cd, xd, wd, yd, x, w, dy = make(p, n, "bfloat16", tridnn.MathType.DEFAULT, dev)
    ref_fn = torch_conv("fwd", p, x, w, dy)
    ref = ref_fn()
    row = dict(layer=p["name"], direction="fwd", cudnn_us=bench(ref_fn) * 1e6, configs={})
    problem = ConvProblem("fwd", xd, wd, yd, cd)
    out = torch.empty_like(ref)
    plan = conv_tma.forward_plan(problem, x, w, out)
    if plan is None:
        row["error"] = "no TMA plan"
        return row
    return time_configs(row, p["name"], conv_tma.candidates(plan, out.device, problem),
                        lambda cfg: conv_tma.launch_conv(plan, problem, x, w, out, 1.0, 0.0, cfg), out, ref, deadline)


def run(p, n, dev, deadline):
    cd, xd, wd, yd, x, w, dy = make(p, n, "bfloat16", tridnn.MathType.DEFAULT, dev)
    ref_fn = torch_conv("bwd_data", p, x, w, dy)
    ref = ref_fn()
    row = dict(layer=p["name"], direction="bwd_data", cudnn_us=bench(ref_fn) * 1e6, configs={})
    problem = ConvProblem("bwd_data", xd, wd, yd, cd)
    out = torch.empty_like(ref)
    plan = conv_tma.backward_data_plan(problem, dy, w, out)
    if not isinstance(plan, tuple) or len(plan) < 2:
        row["error"] = f"no phase plans (plan: {type(plan).__name__})"
        return row
    cands = conv_tma.candidates(plan, out.device, problem)
    return time_configs(row, p["name"], cands,
                        lambda cfg: conv_tma.launch_conv(plan, problem, dy, w, out, 1.0, 0.0, cfg, kmajor=True),
                        out, ref, deadline)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="bwd_data,bwd_filter,fwd")
    ap.add_argument("--fwd-layers", default=FWD_LAYERS)
    ap.add_argument("--data-layers", default=DATA_LAYERS)
    ap.add_argument("--filter-layers", default=FILTER_LAYERS)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=240)
    ap.add_argument("--out", default="", help="directory for phases.json (optional)")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    deadline = time.time() + args.budget_s
    rows = []
    sections = (("bwd_data", args.data_layers, run), ("bwd_filter", args.filter_layers, run_filter),
                ("fwd", args.fwd_layers, run_forward))
    for section, names, fn in sections:
        if section not in args.sections.split(","):
            continue
        want = names.split(",")
        layers = [p for p in shapes.RESNET50 if p["name"] in want]
        missing = set(want) - {p["name"] for p in layers}
        if missing:
            print(f"# unknown layers skipped: {sorted(missing)}")
        for p in layers:
            if time.time() > deadline:
                print(f"# budget spent; skipping {section} {p['name']}")
                continue
            try:
                rows.append(fn(p, args.batch, dev, deadline))
            except Exception as exc:  # one layer's failure must not lose the others' numbers
                print(f"# {section} {p['name']}: {type(exc).__name__}: {exc}"[:300])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "phases.json"), "w") as f:
            json.dump(rows, f, indent=1)
    print("\n| direction | layer | cuDNN us | old best us (config) | ratio | new best us (config) | ratio | speedup |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        c = r["cudnn_us"]
        old, new = r.get("old"), r.get("new")
        cell = lambda b: (f"{b['us']:.1f} ({b['config']})", f"{b['us'] / c:.2f}") if b else ("-", "-")  # noqa: E731
        (ot, orat), (nt, nrat) = cell(old), cell(new)
        sp = f"{old['us'] / new['us']:.2f}" if old and new else "-"
        print(f"| {r['direction']} | {r['layer']} | {c:.1f} | {ot} | {orat} | {nt} | {nrat} | {sp} |")


if __name__ == "__main__":
    main()
