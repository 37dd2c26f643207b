"""Issue 4 sweep: the depthwise backward-filter row walker (cuda/conv_depthwise_wgrad.py)
against today's tuner choice and cuDNN, on the 10 MobileNetV2 depthwise layers (bf16
NHWC, batch 64).

    PYTHONPATH=src python3 benchmarks/sweep_depthwise_wgrad.py --out results/dw_wgrad [--jobs 12]
        [--layers dw32_112,dw144_56] [--budget-s 75]
    PYTHONPATH=src python3 benchmarks/sweep_depthwise_wgrad.py --dry-run   # CPU, interpreter

Per layer: cuDNN (aten.convolution_backward, weight only: torch's autograd path of
F.conv2d with groups = C, channels_last, cudnn.benchmark on); backward filter ALGO_1
through the public API tuned over today's candidates (the walker's taken out: "tuner
today") and over all of them ("tuner + rows", the config it picks in the label); and
every walker config launched directly, its partial slots summed by ALGO_1's own finish
kernel (wgrad_finish) in the timed call; on Hopper also the Gluon walker's configs
(cuda/conv_depthwise_gluon_wgrad.py, "gluon ..." rows, stride-1 layers), launched the
same way. Each result is checked against torch in float32 first: err = max |got - ref| /
max |ref|. Times are CUDA-graph medians; TB/s
counts the minimal bytes (x + dy read once, dw written once); floor = those bytes at
4.27 TB/s. The table ends with the geometric means of tridnn / cuDNN.

Compiling ~100 kernels one after another takes minutes, so --jobs worker processes
first launch every (layer, candidate slice) once (tuner timing stubbed): Triton's disk
cache fills in parallel and the measuring pass loads them. --dry-run: Triton's
interpreter on the CPU, float32, batch 1, 8 channels, spatial sizes / 8 (even, >= 6),
one call per variant, no timing. Before the GPU run a child process launches one
L2-prefetch config (inline PTX) and checks it: if it fails, every config runs without the
prefetch (TRIDNN_DW_WGRAD_PF=0, which also turns it off in tridnn itself).
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
    ap.add_argument("--out", default=None, help="directory for sweep_depthwise_wgrad.json")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", default="all")
    ap.add_argument("--jobs", type=int, default=12, help="compile workers (0: compile in the measuring pass)")
    ap.add_argument("--budget-s", type=float, default=75.0,
                    help="start no new layer this many seconds into the run")
    ap.add_argument("--rep", type=int, default=10, help="ms of CUDA-graph replays per timing")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--probe-prefetch", action="store_true",
                    help="(internal) launch one L2-prefetch config, check it, exit 0 if it works")
    return ap.parse_args(argv)


ARGS = parse() if __name__ == "__main__" else None
if ARGS is not None and ARGS.dry_run:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu_conv as B  # noqa: E402  (make, tridnn_call, torch_conv, bench)
import depthwise_bench_common as DC  # noqa: E402  (the tuner's stubbed timers)

from tridnn.cuda import conv_bwd_filter_implicit_gemm as IG  # noqa: E402
from tridnn.cuda import conv_depthwise_backward as D  # noqa: E402
from tridnn.cuda import conv_depthwise_wgrad as W  # noqa: E402
from tridnn.cuda.common import Tuner  # noqa: E402

PEAK_TBS = 4.27
ALGO = tridnn.ConvBwdFilterAlgo.ALGO_1
_REAL_CANDIDATES = W.candidates


def walker_in_tuner(on: bool):
    """Offer the walker's configs to the depthwise filter tuner (on) or not; a fresh tuner
    either way (the public call tunes again)."""
    W.candidates = _REAL_CANDIDATES if on else (lambda *a, **k: [])
    D._wgrad_tuner = Tuner(tolerance=3e-3)


def layer(name, dry):
    p = next(q for q in shapes.MOBILENETV2_DW if q["name"] == name)
    if not dry:
        return p
    return dict(p, C=8, K=8, groups=8, spatial=tuple(max(6, s // 8 // 2 * 2) for s in p["spatial"]))


def reference(p, x, dy):
    """torch's weight gradient in float32 (the bf16 operands widened)."""
    w_shape = [p["K"], 1, *p["kernel"]]
    return torch.ops.aten.convolution_backward(
        dy.float(), x.float(), torch.empty(w_shape, device=x.device), None, list(p["stride"]), list(p["pad"]),
        list(p["dilation"]), False, [0, 0], p["groups"], [False, True, False])[1]


def err(got, ref):
    got, ref = got.float().reshape(ref.shape), ref.float()
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def label(c):
    return (f"rows BW{c['BW']} BC{c['BC']} w{c['num_warps']} W{c['WAVES']} A{c['AHEAD']} U{c['UNROLL']} "
            f"PF{c['PF']}")


def prepare(handle, name, n, dtype, dev, dry):
    """Tensors, the public ALGO_1 call and the walker's direct variants (label, fn) of one layer."""
    p = layer(name, dry)
    cd, xd, wd, yd, x, w, dy = B.make(p, n, dtype, tridnn.MathType.DEFAULT, dev)
    algo = registry.by_enum("conv", "bwd_filter", "triton", ALGO)
    problem = ConvProblem("bwd_filter", xd, wd, yd, cd)
    ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
    out = torch.empty_like(w)
    public = B.tridnn_call(handle, "bwd_filter", algo, cd, xd, wd, yd, x, w, dy, out, ws)
    cap = algo._cap(problem)  # the slots of ALGO_1's partial buffer
    part = torch.empty(cap * p["K"] * 9, dtype=torch.float32, device=dev)
    dw = torch.empty_like(w)

    def run(c):
        used = W.launch_rows(problem, x, dy, part, False, c, cap)
        IG._WgradBase._finish(problem, part, dw, used, 1.0, 0.0)
    variants = [(label(c), lambda c=c: run(c)) for c in _REAL_CANDIDATES(problem, x.device, cap)]
    if not dry and D.conv_depthwise_gluon_wgrad is not None and torch.cuda.get_device_capability()[0] == 9 \
            and tuple(p["stride"]) == (1, 1):
        G = D.conv_depthwise_gluon_wgrad

        def run_gluon(c):
            used = G.launch(x, dy, part, p["pad"], c, cap)
            IG._WgradBase._finish(problem, part, dw, used, 1.0, 0.0)
        spatial = [s + 2 * q - 2 for s, q in zip(p["spatial"], p["pad"])]
        for c in G.configs(*spatial, p["C"], x.element_size()):
            variants.append((f"gluon BWI{c['BWI']} NB{c['NB']} BC{c['BC']} RUN{c['RUN']} S{c['STAGES']}",
                             lambda c=c: run_gluon(c)))
    return p, x, dy, out, public, dw, variants


def warm(task):
    """Worker: launch slice ``part`` of ``parts`` of one layer's kernels once (the public
    call's tuner list, timing stubbed to one launch, and the walker's configs), so Triton's
    disk cache fills in parallel."""
    name, n, dtype, dev, part, parts = task
    DC.tuner_timing_once()
    full = D.wgrad3_candidates
    D.wgrad3_candidates = lambda *a, **k: full(*a, **k)[part::parts] or full(*a, **k)[:1]
    dry = dev == "cpu"
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None) if dry else tridnn.Handle(
        device="cuda", find_cache=None)
    try:
        walker_in_tuner(False)
        _, _, _, _, public, _, variants = prepare(handle, name, n, dtype, dev, dry)
        public()
        for _, fn in variants[part::parts]:
            fn()
        if not dry:
            torch.cuda.synchronize()
        return None
    except Exception as exc:  # the measuring pass reports it
        return f"{name} part {part}: {type(exc).__name__}: {exc}"[:300]
    finally:
        D.wgrad3_candidates = full


def bench(fn, dry):
    if dry:
        fn()
        return float("nan")
    return B.bench(fn, rep=ARGS.rep)


def _timed(row, key, fn, out, ref, dry):
    try:
        out.fill_(float("nan"))
        fn()
        row["variants"][key] = dict(err=err(out, ref), us=bench(fn, dry) * 1e6)
    except Exception as exc:
        row["variants"][key] = dict(error=f"{type(exc).__name__}: {exc}"[:300])


def measure(handle, name, n, dtype, dev, dry):
    p, x, dy, out, public, dw, variants = prepare(handle, name, n, dtype, dev, dry)
    ref = reference(p, x, dy)
    nbytes = sum(t.numel() * t.element_size() for t in (x, dy, out))
    row = dict(layer=name, min_bytes=nbytes, floor_us=nbytes / PEAK_TBS / 1e6, variants={})
    if not dry:
        cudnn = B.torch_conv("bwd_filter", p, x, out, dy)
        row["cudnn_us"] = bench(cudnn, dry) * 1e6
        row["cudnn_err"] = err(cudnn(), ref)
    walker_in_tuner(False)
    _timed(row, "tuner today", public, out, ref, dry)
    walker_in_tuner(True)
    _timed(row, "tuner + rows", public, out, ref, dry)
    picked = next(iter(D._wgrad_tuner._best.values()), None)
    row["picked"] = {k: v for k, v in picked.items()} if picked else None
    for lab, fn in variants:
        _timed(row, lab, fn, dw, ref, dry)
    for v in row["variants"].values():
        if "us" in v:
            v["tbs"] = nbytes / v["us"] / 1e6 if v["us"] == v["us"] else float("nan")
    return row


def _picked(c):
    if not c:
        return "-"
    if c.get("KIND") == "rows":
        return label(c)
    return " ".join(f"{k}={v}" for k, v in c.items())[:60]


def table(rows):
    lines = [f"{'layer':12s} {'variant':40s} {'us':>8s} {'TB/s':>5s} {'/cuDNN':>7s} {'err':>8s}"]
    summary = []
    for r in rows:
        cu = r.get("cudnn_us", float("nan"))
        if "cudnn_us" in r:
            lines.append(f"{r['layer']:12s} {'cuDNN':40s} {cu:8.1f} {r['min_bytes'] / cu / 1e6:5.2f} "
                         f"{1.0:7.3f} {r['cudnn_err']:8.1e}")
        for lab, v in r["variants"].items():
            if "error" in v:
                lines.append(f"{r['layer']:12s} {lab:40s} ERROR {v['error']}")
            else:
                lines.append(f"{r['layer']:12s} {lab:40s} {v['us']:8.1f} {v['tbs']:5.2f} {v['us'] / cu:7.3f} "
                             f"{v['err']:8.1e}")
        ok = {k: v for k, v in r["variants"].items() if "us" in v and v["err"] < 2e-2}
        rows_ok = {k: v for k, v in ok.items() if k.startswith("rows")}
        best = min(rows_ok, key=lambda k: rows_ok[k]["us"]) if rows_ok else None
        summary.append((r, cu, ok.get("tuner today"), ok.get("tuner + rows"), best, rows_ok.get(best)))
    lines.append("")
    lines.append(f"{'layer':12s} {'floor':>6s} {'cuDNN':>7s} {'today':>7s} {'+rows':>7s} {'rows':>7s} {'TB/s':>5s} "
                 f"{'today/cu':>8s} {'+rows/cu':>8s} {'rows/cu':>7s}  best rows config | tuner's pick")
    ratios = []
    nan = float("nan")
    for r, cu, today, tuned, best, bv in summary:
        t0 = today["us"] if today else nan
        t1 = tuned["us"] if tuned else nan
        t2 = bv["us"] if bv else nan
        lines.append(f"{r['layer']:12s} {r['floor_us']:6.1f} {cu:7.1f} {t0:7.1f} {t1:7.1f} {t2:7.1f} "
                     f"{(r['min_bytes'] / t2 / 1e6) if bv else nan:5.2f} {t0 / cu:8.3f} {t1 / cu:8.3f} "
                     f"{t2 / cu:7.3f}  {best or '-'} | {_picked(r.get('picked'))}")
        if all(v == v for v in (cu, t0, t1, t2)):
            ratios.append((t0 / cu, t1 / cu, t2 / cu))
    if ratios:
        g = lambda i: math.exp(sum(math.log(t[i]) for t in ratios) / len(ratios))
        lines.append(f"geomean tridnn/cuDNN over {len(ratios)} layers: tuner today {g(0):.3f}, "
                     f"tuner + rows {g(1):.3f}, best rows config {g(2):.3f}")
    return "\n".join(lines)


def probe_prefetch():
    """Child process: one PF config on dw960_7 (bf16 NHWC, batch 8), synchronized and
    checked, so a faulting prefetch cannot take down the measuring process."""
    handle = tridnn.Handle(device="cuda", find_cache=None)
    _, x, dy, _, _, dw, variants = prepare(handle, "dw960_7", 8, "bfloat16", "cuda", False)
    ref = reference(layer("dw960_7", False), x, dy)
    runs = [fn for lab, fn in variants if not lab.endswith("PF0")]
    runs[0]()
    torch.cuda.synchronize()
    e = err(dw, ref)
    print(f"prefetch probe: err {e:.1e}", flush=True)
    sys.exit(0 if e < 2e-2 else 1)


def main():
    if ARGS.probe_prefetch:
        probe_prefetch()
    dry = ARGS.dry_run
    if not dry and os.environ.get("TRIDNN_DW_WGRAD_PF") != "0":
        import subprocess
        try:
            child = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe-prefetch"], timeout=120)
            ok = child.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        if not ok:  # the workers inherit it
            os.environ["TRIDNN_DW_WGRAD_PF"] = "0"
            print("the L2 prefetch (PF) failed its probe: configs run without it (TRIDNN_DW_WGRAD_PF=0)", flush=True)
    dev = "cpu" if dry else "cuda"
    dtype = "float32" if dry else "bfloat16"
    n = 1 if dry else ARGS.batch
    names = [p["name"] for p in shapes.MOBILENETV2_DW] if ARGS.layers == "all" else ARGS.layers.split(",")
    start = time.time()
    jobs = min(ARGS.jobs, 2) if dry else ARGS.jobs  # the dry run checks the workers' path on one layer
    if jobs > 0:
        import multiprocessing as mp
        slices = [(name, n, dtype, dev, i, jobs) for name in (names[:1] if dry else names) for i in range(jobs)]
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
    for name in names:
        if time.time() - start > ARGS.budget_s:
            skipped.append(name)
            continue
        row = measure(handle, name, n, dtype, dev, dry)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if ARGS.out:
        os.makedirs(ARGS.out, exist_ok=True)
        info = dict(device=torch.cuda.get_device_name() if not dry else "cpu (interpreter dry run)",
                    torch=torch.__version__, batch=n, dtype=dtype, seconds=time.time() - start, skipped=skipped)
        with open(os.path.join(ARGS.out, "sweep_depthwise_wgrad.json"), "w") as f:
            json.dump(dict(info=info, rows=rows), f, indent=1)
    print()
    print(table(rows))
    if skipped:
        print(f"skipped past --budget-s: {', '.join(skipped)}")
    print(f"total {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
