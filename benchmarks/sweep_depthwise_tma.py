"""Issue 4 sweep: the TMA depthwise row walkers (cuda/conv_depthwise_tma.py) against the
existing kernels and cuDNN, on the 10 MobileNetV2 depthwise layers (bf16 NHWC, batch 64).

    PYTHONPATH=src python3 benchmarks/sweep_depthwise_tma.py --out results/dw_tma [--jobs 8]
        [--layers dw32_112,dw144_56] [--dirs fwd,bwd_data,bwd_filter] [--budget-s 80]
    PYTHONPATH=src python3 benchmarks/sweep_depthwise_tma.py --dry-run   # CPU, interpreter

Per layer and direction: cuDNN (torch, channels_last, cudnn.benchmark on), the existing
tridnn path through the public API (forward DIRECT, backward data ALGO_1, backward
filter ALGO_1) tuned over its existing candidates only (the TMA configs are taken out
of its lists), and every TMA config launched directly (forward: stride 1 and stride 2;
backward data: stride 1; backward filter: stride 1, partial slots summed in the timed
call). Each result is checked against torch in float32 before timing: err = max |got -
ref| / max |ref|. Times are CUDA-graph medians; TB/s counts the minimal bytes (fwd x + y,
bwd_data dy + dx, bwd_filter x + dy, plus the filter). The table ends with each
direction's geometric mean of tridnn / cuDNN: existing best, and best of existing and TMA.

Compiling ~150 kernels one after another would take minutes, so --jobs worker processes
first run every (layer, direction) in --jobs slices, each launching every jobs-th
candidate of the existing tuner's list (timing stubbed) and every jobs-th TMA config
once: Triton's disk cache fills in parallel; the measuring pass then loads them. --dry-run: Triton's interpreter on the CPU, float32, batch 1,
8 channels, spatial sizes / 16 (even, at least 6), one call per variant, no timing.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="directory for sweep_depthwise_tma.json")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", default="all")
    ap.add_argument("--dirs", default="fwd,bwd_data,bwd_filter")
    ap.add_argument("--jobs", type=int, default=8, help="compile workers (0: compile in the measuring pass)")
    ap.add_argument("--budget-s", type=float, default=75.0,
                    help="start no new task this many seconds into the measuring pass (after the warm-up)")
    ap.add_argument("--rep", type=int, default=10, help="ms of CUDA-graph replays per timing")
    ap.add_argument("--dry-run", action="store_true")
    return ap.parse_args(argv)


ARGS = parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.dry_run:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu_conv as B  # noqa: E402  (make, tridnn_call, torch_conv, bench)
import depthwise_bench_common as DC  # noqa: E402  (the tuner's stubbed timers)

from tridnn.cuda import conv_depthwise_backward as D  # noqa: E402
from tridnn.cuda import conv_depthwise_tma as DT  # noqa: E402
from tridnn.cuda import conv_direct  # noqa: E402

PEAK_TBS = 4.27
ALGOS = {"fwd": ("fwd", tridnn.ConvFwdAlgo.DIRECT), "bwd_data": ("bwd_data", tridnn.ConvBwdDataAlgo.ALGO_1),
         "bwd_filter": ("bwd_filter", tridnn.ConvBwdFilterAlgo.ALGO_1)}
_REAL_FWD_CONFIGS, _REAL_WGRAD_CONFIGS = DT.fwd_configs, DT.wgrad_configs


def existing_only(on: bool):
    """Take the TMA configs out of the tuners' candidate lists (on) or put them back."""
    DT.fwd_configs = (lambda *a, **k: []) if on else _REAL_FWD_CONFIGS
    DT.wgrad_configs = (lambda *a, **k: []) if on else _REAL_WGRAD_CONFIGS


def tuners():
    return {"fwd": conv_direct.DirectForward.tuner, "bwd_data": D._data_tuner, "wgrad": D._wgrad_tuner}


def layer(name, dry):
    p = next(q for q in shapes.MOBILENETV2_DW if q["name"] == name)
    if not dry:
        return p
    return dict(p, C=8, K=8, groups=8, spatial=tuple(max(6, s // 16 // 2 * 2) for s in p["spatial"]))


def min_bytes(x, w, dy):
    return sum(t.numel() * t.element_size() for t in (x, w, dy))  # each direction: two activations + w


def reference(direction, p, x, w, dy):
    """torch in float32 (the bf16 inputs widened)."""
    args = (list(p["stride"]), list(p["pad"]), list(p["dilation"]))
    xf, wf, dyf = x.float(), w.float(), dy.float()
    if direction == "fwd":
        return F.conv2d(xf, wf, None, *args, p["groups"])
    mask = [direction == "bwd_data", direction == "bwd_filter", False]
    out = torch.ops.aten.convolution_backward(dyf, xf, wf, None, *args, False, [0, 0], p["groups"], mask)
    return out[0 if direction == "bwd_data" else 1]


def err(got, ref):
    got, ref = got.float().reshape(ref.shape), ref.float()
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def tma_variants(direction, p, problem, x, w, dy, out):
    """(label, fn) for each TMA config that applies; fn writes ``out`` (dw: [C * 9] float32)."""
    nd, stride, pad = 2, tuple(p["stride"]), tuple(p["pad"])
    dev = x.device
    if direction == "fwd":
        if conv_direct.rows3_applies(problem):
            cfgs = _REAL_FWD_CONFIGS(dev, p["C"])
        elif DT.s2_applies(problem):
            cfgs = _REAL_FWD_CONFIGS(dev, p["C"], stride=2)
        else:
            return []
        if not DT.fwd_layout_ok(x, out, nd, stride, pad):
            return []
        return [(_label(c), lambda c=c: DT.launch_fwd(x, w, out, nd, stride, pad, 1.0, 0.0, None, c, False))
                for c in cfgs if DT.box_ok(c, x)]
    if direction == "bwd_data":
        if not D.rows3_backward_applies(problem):
            return []
        bpad = (2 - pad[0], 2 - pad[1])
        if not DT.fwd_layout_ok(dy, out, nd, (1, 1), bpad):
            return []
        return [(_label(c), lambda c=c: DT.launch_fwd(dy, w, out, nd, (1, 1), bpad, 1.0, 0.0, None, c, True))
                for c in _REAL_FWD_CONFIGS(dev, p["C"]) if DT.box_ok(c, dy)]
    if not DT.wgrad_layout_ok(problem, x, dy):
        return []
    geo_rows = x.shape[0] * dy.shape[2]
    cap = min(4096, geo_rows)  # ALGO_1's partial buffer (DEPTHWISE_MAX_SLICES)
    part = torch.empty(cap * p["C"] * 9, dtype=torch.float32, device=dev)
    cols = p["C"] * 9
    out_flat = out.reshape(-1)

    def run(c):
        used = DT.launch_wgrad(problem, x, dy, part, False, c, cap)
        torch.sum(part[:used * cols].view(used, cols), dim=0, out=out_flat)
    return [(_label(c), lambda c=c: run(c)) for c in _REAL_WGRAD_CONFIGS(dev, p["C"])
            if DT.wgrad_slots(problem, c, cap) is not None and DT.wgrad_layout_ok(problem, x, dy, c)]


def _label(c):
    kind = "pairs" if c.get("PAIRS") else ("rows3" if c.get("ROWS3") else "tma")
    return f"{kind} BW{c['BW']} BC{c['BC']} BH{c['BH']} st{c['STAGES']} w{c['num_warps']}"


def prepare(handle, name, direction, n, dtype, dev, dry):
    """Tensors, the existing call (public API) and the TMA variants of one task."""
    p = layer(name, dry)
    cd, xd, wd, yd, x, w, dy = B.make(p, n, dtype, tridnn.MathType.DEFAULT, dev)
    algo = registry.by_enum("conv", direction, "triton", ALGOS[direction][1])
    problem = ConvProblem(direction, xd, wd, yd, cd)
    ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
    like = {"fwd": dy, "bwd_data": x, "bwd_filter": w}[direction]
    out = torch.empty_like(like)
    existing = B.tridnn_call(handle, direction, algo, cd, xd, wd, yd, x, w, dy, out, ws)
    tma_out = torch.empty_like(like) if direction != "bwd_filter" else torch.empty(
        p["C"] * 9, dtype=torch.float32, device=dev)
    variants = tma_variants(direction, p, problem, x, w, dy, tma_out)
    return p, x, w, dy, out, existing, tma_out, variants


# the existing paths' candidate lists, by module and name (a warm-up task takes a slice of each)
CANDIDATE_LISTS = ((conv_direct, "fwd_dw3_candidates"), (conv_direct, "dw2d_candidates"),
                   (D, "rows3_data_candidates"), (D, "phase_configs"), (D, "wgrad3_candidates"))


def warm(task):
    """Worker: compile slice ``part`` of ``parts`` of what one (layer, direction) needs:
    every parts-th candidate of the existing tuner's list (timing stubbed to one launch, a
    fresh tuner) and every parts-th TMA config, so the slices of one task compile in
    parallel (layers mostly share their kernels: later tasks find them in the cache)."""
    name, direction, n, dtype, dev, part, parts = task
    from tridnn.cuda.common import Tuner

    DC.tuner_timing_once()
    saved = [getattr(mod, attr) for mod, attr in CANDIDATE_LISTS]
    for (mod, attr), full in zip(CANDIDATE_LISTS, saved):
        setattr(mod, attr, lambda *a, full=full, **k: full(*a, **k)[part::parts] or full(*a, **k)[:1])
    conv_direct.DirectForward.tuner, D._data_tuner, D._wgrad_tuner = Tuner(), Tuner(), Tuner(tolerance=3e-3)
    dry = dev == "cpu"
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None) if dry else tridnn.Handle(
        device="cuda", find_cache=None)
    existing_only(True)
    try:
        _, _, _, _, _, existing, _, variants = prepare(handle, name, direction, n, dtype, dev, dry)
        existing()
        for _, fn in variants[part::parts]:
            fn()
        if not dry:
            torch.cuda.synchronize()
        return None
    except Exception as exc:  # the measuring pass reports it
        return f"{name}/{direction} part {part}: {type(exc).__name__}: {exc}"[:300]
    finally:
        for (mod, attr), full in zip(CANDIDATE_LISTS, saved):
            setattr(mod, attr, full)


def bench(fn, dry):
    if dry:
        fn()
        return float("nan")
    return B.bench(fn, rep=ARGS.rep)


def measure(handle, name, direction, n, dtype, dev, dry):
    p, x, w, dy, out, existing, tma_out, variants = prepare(handle, name, direction, n, dtype, dev, dry)
    ref = reference(direction, p, x, w, dy)
    nbytes = min_bytes(x, w, dy)
    row = dict(layer=name, direction=direction, min_bytes=nbytes, floor_us=nbytes / PEAK_TBS / 1e6, variants={})
    if not dry:
        cudnn = B.torch_conv(direction, p, x, w, dy)
        got = cudnn()
        row["cudnn_us"] = bench(cudnn, dry) * 1e6
        row["cudnn_err"] = err(got, ref)
    existing_only(True)  # the tuner sees the existing candidates only
    try:
        out.fill_(float("nan"))
        existing()
        row["variants"]["existing"] = dict(err=err(out, ref), us=bench(existing, dry) * 1e6)
    except Exception as exc:
        row["variants"]["existing"] = dict(error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        existing_only(False)
    for label, fn in variants:
        try:
            tma_out.fill_(float("nan"))
            fn()
            e = err(tma_out, ref)
            row["variants"][label] = dict(err=e, us=bench(fn, dry) * 1e6)
        except Exception as exc:
            row["variants"][label] = dict(error=f"{type(exc).__name__}: {exc}"[:300])
    for v in row["variants"].values():
        if "us" in v:
            v["tbs"] = nbytes / v["us"] / 1e6 if v["us"] == v["us"] else float("nan")
    return row


def table(rows):
    lines = [f"{'layer':12s} {'dir':10s} {'variant':36s} {'us':>8s} {'TB/s':>5s} {'err':>8s}"]
    summary = []
    for r in rows:
        if "cudnn_us" in r:
            lines.append(f"{r['layer']:12s} {r['direction']:10s} {'cuDNN':36s} {r['cudnn_us']:8.1f} "
                         f"{r['min_bytes'] / r['cudnn_us'] / 1e6:5.2f} {r['cudnn_err']:8.1e}")
        for label, v in r["variants"].items():
            if "error" in v:
                lines.append(f"{r['layer']:12s} {r['direction']:10s} {label:36s} ERROR {v['error']}")
            else:
                lines.append(f"{r['layer']:12s} {r['direction']:10s} {label:36s} {v['us']:8.1f} {v['tbs']:5.2f} "
                             f"{v['err']:8.1e}")
        ok = {k: v for k, v in r["variants"].items() if "us" in v and v["err"] < 2e-2}
        tma = {k: v for k, v in ok.items() if k != "existing"}
        best_tma = min(tma, key=lambda k: tma[k]["us"]) if tma else None
        summary.append((r, ok.get("existing"), best_tma, tma.get(best_tma)))
    lines.append("")
    lines.append(f"{'layer':12s} {'dir':10s} {'floor':>6s} {'cuDNN':>7s} {'exist':>7s} {'TMA':>7s} {'TB/s':>5s} "
                 f"{'ex/cuDNN':>8s} {'best/cuDNN':>10s}  best TMA config")
    ratios = {}
    for r, ex, best, bv in summary:
        cu = r.get("cudnn_us", float("nan"))
        ex_us = ex["us"] if ex else float("nan")
        t_us = bv["us"] if bv else float("nan")
        top = min((u for u in (ex_us, t_us) if u == u), default=float("nan"))
        lines.append(f"{r['layer']:12s} {r['direction']:10s} {r['floor_us']:6.1f} {cu:7.1f} {ex_us:7.1f} "
                     f"{t_us:7.1f} {(r['min_bytes'] / t_us / 1e6) if bv else float('nan'):5.2f} {ex_us / cu:8.3f} "
                     f"{top / cu:10.3f}  {best or '-'}")
        if cu == cu and ex_us == ex_us:
            ratios.setdefault(r["direction"], []).append((ex_us / cu, top / cu))
    for d, rs in ratios.items():
        g = lambda i: math.exp(sum(math.log(t[i]) for t in rs) / len(rs))
        lines.append(f"{d}: geomean tridnn/cuDNN over {len(rs)} layers: existing {g(0):.3f}, "
                     f"best of existing and TMA {g(1):.3f}")
    return "\n".join(lines)


def main():
    dry = ARGS.dry_run
    dev = "cpu" if dry else "cuda"
    dtype = "float32" if dry else "bfloat16"
    n = 1 if dry else ARGS.batch
    names = [p["name"] for p in shapes.MOBILENETV2_DW] if ARGS.layers == "all" else ARGS.layers.split(",")
    dirs = ARGS.dirs.split(",")
    tasks = [(name, d, n, dtype, dev) for name in names for d in dirs]
    start = time.time()
    jobs = min(ARGS.jobs, 2) if dry else ARGS.jobs  # the dry run checks the workers' path on 2 tasks
    if jobs > 0:
        import multiprocessing as mp
        slices = [t + (i, jobs) for t in (tasks[:1] if dry else tasks) for i in range(jobs)]
        with mp.get_context("spawn").Pool(jobs) as pool:
            for msg in pool.imap_unordered(warm, slices):
                if msg:
                    print("warm-up:", msg, flush=True)
        print(f"compiled in {time.time() - start:.1f} s ({jobs} workers)", flush=True)
    if not dry:
        torch.backends.cudnn.benchmark = True
        DC.tuner_timing_quick()  # ~40 candidates a task
        handle = tridnn.Handle(device="cuda", find_cache=None)
    else:
        handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    rows, skipped = [], []
    measuring = time.time()
    for name, d, _, _, _ in tasks:
        if time.time() - measuring > ARGS.budget_s:
            skipped.append(f"{name}/{d}")
            continue
        row = measure(handle, name, d, n, dtype, dev, dry)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if ARGS.out:
        os.makedirs(ARGS.out, exist_ok=True)
        info = dict(device=torch.cuda.get_device_name() if not dry else "cpu (interpreter dry run)",
                    torch=torch.__version__, batch=n, dtype=dtype, seconds=time.time() - start, skipped=skipped)
        with open(os.path.join(ARGS.out, "sweep_depthwise_tma.json"), "w") as f:
            json.dump(dict(info=info, rows=rows), f, indent=1)
    print()
    print(table(rows))
    if skipped:
        print(f"skipped past --budget-s: {', '.join(skipped)}")
    print(f"total {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
