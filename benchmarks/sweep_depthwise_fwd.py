"""MobileNetV2 depthwise forward: conv_depthwise_strip's configs against the DIRECT tuner and cuDNN.

    PYTHONPATH=src python3 benchmarks/sweep_depthwise_fwd.py --out results/dwf [--batch 64]
        [--layers dw32_112,dw144_56] [--budget-s 90] [--passes strip,tuner]
    PYTHONPATH=src python3 benchmarks/sweep_depthwise_fwd.py --dry-run     # CPU, interpreter

For every layer of shapes.MOBILENETV2_DW (bfloat16, NHWC / channels_last, forward):
  cudnn         F.conv2d, cudnn.benchmark on (the reference every variant is checked against)
  tuner         tridnn DIRECT through the public call, a fresh tuner WITHOUT the strip
                configs: what the library picked before conv_depthwise_strip
  tuner+strip   the same with the strip configs offered after the existing ones (what it
                picks now; the pick is listed)
  strip ...     each conv_depthwise_strip config launched directly (BHxBWxBC, warps,
                REG_AHEAD r, L2_AHEAD l)
Each variant's output is checked against cuDNN's (max |diff| / max |ref|) before it is
timed; times are medians of CUDA-graph replays (bench_gpu_conv.bench). TB/s counts the
minimal bytes (x + y + w, each crossing DRAM once); ratio = variant / cuDNN (lower is
better). The table comes last, then per layer the best variant; JSON to --out.
Two passes: cuDNN and the strip configs over the layers, then the two tuner variants (they
compile every existing candidate on the first layer: tens of seconds); a layer (of either
pass) is started while the elapsed time is under --budget-s, skipped ones are listed.

``--dry-run``: the same code on the CPU (Triton's interpreter, float32, batch 1, spatial
sizes / 16 (at least 5), channels / 32 (at least 4), the CPU torch convolution as the
reference, one timed call): it checks the structure, not the speed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

DRY_RUN = "--dry-run" in sys.argv
if DRY_RUN:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import bench_gpu_conv as B  # noqa: E402  (make, torch_conv, tridnn_call, bench: the GPU harness)
import bench_gpu_layers as L  # noqa: E402  (rel_err: max |diff| / max |ref|)
import depthwise_bench_common as common  # noqa: E402
import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_depthwise_strip as S  # noqa: E402
from tridnn.cuda import conv_direct  # noqa: E402
from tridnn.cuda.common import Tuner  # noqa: E402
from tridnn.cuda.geometry import geometry  # noqa: E402

PEAK_TBS = 4.27  # H200 copy ceiling for this project (TB/s)
DIRECT = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.DIRECT)
GPU = torch.device("cuda")


def parse():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="sweep_depthwise_fwd_out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", default="all", help="comma-separated names of shapes.MOBILENETV2_DW, or all")
    ap.add_argument("--budget-s", type=float, default=90.0, help="start no new layer after this many seconds")
    ap.add_argument("--passes", default="strip,tuner",
                    help="strip: cuDNN and the strip configs; tuner: the two tuner variants (they compile and time "
                         "every existing candidate); run them as separate calls if one does not fit the time")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes")
    return ap.parse_args()


def scaled(p):
    return common.scaled(p, DRY_RUN)


def timed(fn):
    return common.timed(fn, DRY_RUN)


def sync():
    if not DRY_RUN:
        torch.cuda.synchronize()


def label(cfg):
    pairs = f" pairs cvt{cfg.get('CVT', 0)}" if cfg.get("PAIRS") else ""
    pairs += f" persist{cfg['PERSIST']}" if cfg.get("PERSIST") else ""
    return (f"strip {cfg['BH']}x{cfg['BW']}x{cfg['BC']} w{cfg['num_warps']} r{cfg['REG_AHEAD']} "
            f"l{cfg['L2_AHEAD']}{pairs}")


def run_layer(handle, p, n, dtype, dev, part, row=None):
    """part "strip": cuDNN and every strip config (a new row; "cudnn": cuDNN only);
    "tuner": the two tuner variants, appended to ``row`` (cuDNN's time from pass 1)."""
    cd, xd, wd, yd, x, w, dy = B.make(p, n, dtype, tridnn.MathType.DEFAULT, dev)
    ref_fn = B.torch_conv("fwd", p, x, w, dy)
    ref = ref_fn()
    sync()
    nbytes = sum(t.numel() * t.element_size() for t in (x, w, dy))  # dy has y's shape
    if row is None:
        t_ref = timed(ref_fn)
        row = dict(layer=p["name"], batch=n, C=p["C"], spatial=list(p["spatial"]), stride=p["stride"][0],
                   min_bytes=nbytes, floor_us=nbytes / PEAK_TBS / 1e6, variants=[])
        row["variants"].append(dict(variant="cudnn", us=t_ref * 1e6, tbs=nbytes / t_ref / 1e12, ratio=1.0,
                                    max_rel_err=0.0))
    else:
        t_ref = row["variants"][0]["us"] * 1e-6

    def add(name, fn, out, extra=None):
        try:
            out.fill_(float("nan"))
            fn()  # compiles (and tunes)
            sync()
            err = L.rel_err(out, ref)
            if not err < 2e-2:
                raise AssertionError(f"max rel err {err:.3g} vs cuDNN")
            t = timed(fn)
        except Exception as exc:  # report it, keep going
            row["variants"].append(dict(variant=name, error=f"{type(exc).__name__}: {exc}"[:300]))
            print(f"  {p['name']} {name}: {row['variants'][-1]['error']}", file=sys.stderr)
            return
        row["variants"].append(dict(variant=name, us=t * 1e6, tbs=nbytes / t / 1e12, ratio=t / t_ref, max_rel_err=err,
                                    **(extra or {})))

    out = torch.empty_like(ref)
    if part == "tuner":
        real = S.configs
        for name, hide in (("tuner", True), ("tuner+strip", False)):
            tuner = Tuner()
            conv_direct.DirectForward.tuner = tuner
            S.configs = (lambda *a, **k: []) if hide else real
            try:
                ws = torch.empty(DIRECT.workspace_size(ConvProblem("fwd", xd, wd, yd, cd)), dtype=torch.uint8,
                                 device=dev)
                fn = B.tridnn_call(handle, "fwd", DIRECT, cd, xd, wd, yd, x, w, dy, out, ws)
                add(name, fn, out)
            finally:
                S.configs = real
            picks = list(tuner._best.values())
            if picks and "error" not in row["variants"][-1]:
                row["variants"][-1]["picked"] = {k: v for k, v in picks[-1].items()}
        return row
    if part == "cudnn":
        return row
    problem = ConvProblem("fwd", xd, wd, yd, cd)
    geo = geometry(problem)
    stride = p["stride"][0]
    # the GPU list; the dry run takes the list of a 128-channel layer (its blocks mask the tails)
    for cfg in S.configs(GPU, 128 if DRY_RUN else p["K"], stride):
        fn = (lambda c=cfg: S.launch_strip(x, w, out, geo, 1.0, 0.0, None, c, False, 2))
        add(label(cfg), fn, out, dict(cfg=cfg))
    return row


def table(rows):
    lines = [f"{'layer':12s} {'variant':46s} {'us':>9s} {'TB/s':>6s} {'ratio':>6s} {'max rel err':>11s}"]
    for r in rows:
        for v in r["variants"]:
            if "us" in v:
                lines.append(f"{r['layer']:12s} {v['variant']:46s} {v['us']:9.1f} {v['tbs']:6.2f} {v['ratio']:6.3f} "
                             f"{v['max_rel_err']:11.2e}")
            else:
                lines.append(f"{r['layer']:12s} {v['variant']:46s} ERROR {v['error'][:80]}")
    lines.append("best per layer (floor = minimal bytes at 4.27 TB/s):")
    best_ratios, tuner_ratios, new_ratios = [], [], []
    for r in rows:
        ok = [v for v in r["variants"] if "us" in v and v["variant"] != "cudnn"]
        if not ok:
            continue
        b = min(ok, key=lambda v: v["us"])
        best_ratios.append(b["ratio"])
        tr = {v["variant"]: v["ratio"] for v in ok}
        if "tuner" in tr:
            tuner_ratios.append(tr["tuner"])
        if "tuner+strip" in tr:
            new_ratios.append(tr["tuner+strip"])
        pick = next((v.get("picked") for v in ok if v["variant"] == "tuner+strip"), None)
        lines.append(f"  {r['layer']:12s} floor {r['floor_us']:7.1f} us  best {b['variant']:46s} {b['us']:8.1f} us "
                     f"{b['tbs']:5.2f} TB/s ratio {b['ratio']:.3f}; tuner+strip picked {pick}")
    g = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
    lines.append(f"geomean ratio to cuDNN over {len(best_ratios)} layers: best variant {g(best_ratios):.3f}, "
                 f"tuner {g(tuner_ratios):.3f}, tuner+strip {g(new_ratios):.3f}")
    return "\n".join(lines)


def main():
    args = parse()
    dev = "cpu" if DRY_RUN else "cuda"
    dtype = "float32" if DRY_RUN else "bfloat16"
    n = 1 if DRY_RUN else args.batch
    if DRY_RUN:
        handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    else:
        torch.backends.cudnn.benchmark = True
        handle = tridnn.Handle(device="cuda", find_cache=None)
    layers = common.select_layers(args.layers)
    start = time.time()
    rows, skipped = [], []
    # pass 1: cuDNN and the strip configs (~35 kernels to compile); pass 2: the tuners
    # (each compiles and times every existing candidate on its first layer: slow)
    for p in layers:
        if time.time() - start > args.budget_s:
            skipped.append(p["name"])
            continue
        rows.append(run_layer(handle, scaled(p), n, dtype, dev, "strip" if "strip" in args.passes else "cudnn"))
        print(json.dumps(rows[-1]), flush=True)
    if "tuner" in args.passes:
        by_name = {r["layer"]: r for r in rows}
        for p in layers:
            if p["name"] not in by_name:
                continue
            if time.time() - start > args.budget_s:
                skipped.append(p["name"] + " (tuners)")
                continue
            run_layer(handle, scaled(p), n, dtype, dev, "tuner", by_name[p["name"]])
            print(json.dumps(by_name[p["name"]]["variants"][-2:]), flush=True)
    info = common.write_json(args.out, "sweep_depthwise_fwd.json", dev, n, dtype, skipped, start, rows)
    print()
    if skipped:
        print(f"skipped past --budget-s: {', '.join(skipped)}")
    print(f"{info['device']}, batch {n}, {dtype}, {info['seconds']:.0f} s")
    print(table(rows))


if __name__ == "__main__":
    main()
