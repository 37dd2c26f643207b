"""Backward filter (wgrad) of ResNet-50's small-image layers and conv1 on one GPU: every
launch config of ALGO_1's current kernel (conv_tma.wgrad_tma_kernel + wgrad_finish,
"old"), every config of conv_wgrad_tma ("sched": fitted boxes, whole tiles where they fill
waves; "rows": conv1's window-row kernel) and cuDNN, bfloat16 NHWC, batch 64.

    PYTHONPATH=src python3 benchmarks/sweep_wgrad.py [--layers res4_3x3,...] [--budget-s 80] [--out DIR]
    PYTHONPATH=src python3 benchmarks/sweep_wgrad.py --dry-run     # CPU, interpreter, tiny shapes

Each config is run once into a NaN-filled dw, compared with cuDNN's dw (torch's
convolution_backward on channels_last tensors, cudnn.benchmark on): relative L2 error and
max |difference| / max |cuDNN|; over 1e-2 (L2) is marked WRONG and never counted as best.
Then timed as a CUDA-graph median (bench_gpu_conv.bench; finish passes and conv1's copies
of x included). conv1 also gets ALGO_0 through the API (what `get` picks there today).
A config that fails to compile or launch is reported and skipped; once --budget-s is
spent the remaining configs are skipped. Before timing, --workers processes launch every
config once, so Triton compiles them in parallel into its disk cache. The last lines are
the table: per layer cuDNN, today's best (old configs; conv1: also ALGO_0) and the best
config overall, ratios to cuDNN, and the geomeans over the layers.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

if "--dry-run" in sys.argv:  # the interpreter must be chosen before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gpu_conv import bench, make, rel_err, torch_conv, tridnn_call  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_tma, conv_wgrad_tma  # noqa: E402
from tridnn.cuda.common import sm_count  # noqa: E402
from tridnn.cuda.conv_bwd_filter_implicit_gemm import ImplicitGemmBackwardFilter  # noqa: E402

LAYERS = ("res4_3x3,res4_3x3s2,res5_3x3,res5_3x3s2,res4_ds,res5_ds,res5_1x1a,res4_1x1c,conv1,res3_3x3,"
          "res2_3x3")


def name(cfg):
    if cfg.get("ROWS"):
        return f"rows P{cfg['BLOCK_P']} M{cfg['BLOCK_M']} w{cfg['num_warps']}s{cfg['num_stages']} slices{cfg['SLICES']}"
    box = (f"nb{cfg.get('NB', 1)} {cfg['BH']}x{cfg['BW']} {cfg['BLOCK_M']}x{cfg['BLOCK_N']} "
           f"w{cfg['num_warps']}s{cfg['num_stages']}")
    if cfg.get("SCHED"):
        return (f"sched {box} direct{cfg['DIRECT']} slices{cfg['SLICES']} model {cfg.get('model_us', 0):.0f}"
                f"{' kept' if cfg.get('kept') else ''}")
    return f"old {box} waves{cfg.get('WAVES', 2)}"


def max_rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


def dry_layer(p):
    """The layer at interpreter size: 16 channels (conv1 keeps C = 3), small images."""
    side = {224: 20, 56: 8, 28: 8, 14: 6, 7: 7}
    return dict(p, C=p["C"] if p["C"] < 16 else 16, K=16, spatial=tuple(side.get(s, s) for s in p["spatial"]))


def workspace(problem, x):
    """ALGO_1's workspace buffers as tensors: float32 partials, and conv1's copies of x."""
    out = {}
    for buf in ImplicitGemmBackwardFilter().buffers(problem):
        dtype = torch.float32 if np.dtype(buf.dtype) == np.float32 else x.dtype
        out[buf.name] = torch.zeros(buf.shape, dtype=dtype, device=x.device)
    return out


class Layer:
    """One layer's tensors, ALGO_1's workspace, the configs to time and their launch."""

    def __init__(self, p, n, dtype, dev):
        self.p = p
        self.cd, self.xd, self.wd, self.yd, self.x, self.w, self.dy = make(p, n, dtype, tridnn.MathType.DEFAULT, dev)
        self.problem = ConvProblem("bwd_filter", self.xd, self.wd, self.yd, self.cd)
        self.out = torch.empty(self.wd.dims, dtype=self.x.dtype, device=dev)
        self.out = self.out.contiguous(memory_format=torch.channels_last)
        self.ws = workspace(self.problem, self.x)
        self.part = self.ws["part"]
        self.x_tma = self.ws["x_pad"].permute(0, 3, 1, 2) if "x_pad" in self.ws else self.x
        self.plan = conv_tma.backward_filter_plan(self.problem, self.x_tma, self.dy, self.out)
        self.sms = sm_count(self.out.device)
        self.cands = []
        if self.plan is not None:
            self.cands += conv_tma.wgrad_candidates(self.plan, self.out.device, self.x.element_size())
            every = conv_wgrad_tma.candidates(self.plan, self.out.device, self.part.numel(), self.sms,
                                              self.x.element_size(), keep=None)
            kept = conv_wgrad_tma.candidates(self.plan, self.out.device, self.part.numel(), self.sms,
                                             self.x.element_size())
            for c in every:  # the time model's guess, and whether ALGO_1's tuner times it (kept)
                c["kept"] = c in kept
                c["model_us"] = conv_wgrad_tma.predict_us(self.plan, c, self.sms)
            self.cands += every
        if "x_rows" in self.ws:
            self.cands += conv_wgrad_tma.rows_candidates(self.problem, self.out.device, self.part.numel(), self.sms)

    def launch(self, cfg):
        """dw into self.out with config cfg, as ALGO_1's run_tma does it."""
        problem, x, dy, out, part = self.problem, self.x, self.dy, self.out, self.part
        if cfg.get("ROWS"):
            conv_wgrad_tma.launch_rows(problem, x, dy, out, self.ws["x_rows"], part, cfg)
            return
        if self.x_tma is not x:
            conv_tma.pad_into(x, self.x_tma)
        if cfg.get("SCHED"):
            conv_wgrad_tma.launch_sched(self.plan, problem, self.x_tma, dy, out, part, cfg)
            return
        slices = conv_tma.launch_wgrad_partials(self.plan, problem, self.x_tma, dy, part, cfg,
                                                conv_tma.slices_for(self.plan, cfg, self.sms, part.shape[0]), out)
        if slices:
            ImplicitGemmBackwardFilter._finish(problem, part, out, slices, 1.0, 0.0, self.plan.c_out)


_layers: dict = {}


def _layer_for(lname, n, dry):
    p = {p["name"]: p for p in shapes.RESNET50}[lname]
    if dry:
        tridnn.Handle(device="cpu", backend="triton")  # patches Triton's interpreter
        return Layer(dry_layer(p), n, "float32", torch.device("cpu"))
    return Layer(p, n, "bfloat16", torch.device("cuda"))


def _compile_job(job):
    """A worker process: launch (and so compile, into Triton's disk cache) some configs."""
    lname, indices, n, dry = job
    if lname not in _layers:
        _layers[lname] = _layer_for(lname, n, dry)
    layer = _layers[lname]
    done = 0
    for i in indices:
        try:
            layer.launch(layer.cands[i])
            done += 1
        except Exception:  # the timing pass reports it
            pass
    if not dry:
        torch.cuda.synchronize()
    return done


def precompile(names, n, workers, dry=False):
    """Compile every config of every layer in ``workers`` processes first (Triton's
    compiler is single-threaded; the timing pass then loads the kernels from the cache)."""
    import concurrent.futures
    import multiprocessing
    jobs = []
    for lname in names:
        count = len(_layer_for(lname, n, dry).cands)
        jobs += [(lname, list(range(i, count, 4)), n, dry) for i in range(min(4, count))]
    jobs.sort(key=lambda j: j[1][0])  # spread each layer's configs over the workers
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return sum(pool.map(_compile_job, jobs))


def run_layer(p, n, dtype, dev, deadline, dry):
    layer = Layer(p, n, dtype, dev)
    cd, xd, wd, yd, x, w, dy = layer.cd, layer.xd, layer.wd, layer.yd, layer.x, layer.w, layer.dy
    ref_fn = torch_conv("bwd_filter", p, x, w, dy)
    ref = ref_fn()
    problem, out, cands = layer.problem, layer.out, layer.cands
    row = dict(layer=p["name"], cudnn_us=timed(ref_fn, dry) * 1e6, gflop=problem.flops / 1e9, configs={})
    launch = layer.launch
    for cfg in cands:
        record(row, name(cfg), lambda: launch(cfg), out, ref, deadline, dry)  # noqa: B023
    if p["name"] == "conv1" or dry and p["C"] < 16:  # today's choice there: ALGO_0 (atomics)
        algo = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.ALGO_0)
        handle = tridnn.Handle("cpu" if dry else "cuda", backend="triton", find_cache=None)
        buf = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
        record(row, "api ALGO_0", tridnn_call(handle, "bwd_filter", algo, cd, xd, wd, yd, x, w, dy, out, buf), out,
               ref, deadline, dry)
    for kind in ("old", "sched", "rows", "api"):
        ok = {k: v for k, v in row["configs"].items() if k.startswith(kind) and v.get("ok")}
        if ok:
            best = min(ok, key=lambda k: ok[k]["us"])
            row[kind] = dict(config=best, us=ok[best]["us"], rel_err=ok[best]["rel_err"], max_rel=ok[best]["max_rel"])
    return row


def timed(fn, dry):
    if dry:  # the interpreter: one call, wall time (only to exercise the path)
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    return bench(fn)


def record(row, label, fn, out, ref, deadline, dry):
    if time.time() > deadline:
        row["configs"][label] = dict(error="budget spent")
        return
    try:
        out.fill_(float("nan"))
        fn()
        if not dry:
            torch.cuda.synchronize()
        err, mx = rel_err(out, ref), max_rel(out, ref)
        t = timed(fn, dry)
    except Exception as exc:  # report and go on: a config may not fit or compile
        if not dry:
            try:
                torch.cuda.synchronize()
            except Exception:  # a fault poisons the context: later configs report it too
                pass
        row["configs"][label] = dict(error=f"{type(exc).__name__}: {exc}"[:200])
        print(f"  {row['layer']:11s} {label:52s} {type(exc).__name__}: {str(exc)[:80]}", flush=True)
        return
    ok = bool(err < 1e-2)
    row["configs"][label] = dict(us=t * 1e6, rel_err=err, max_rel=mx, ok=ok)
    print(f"  {row['layer']:11s} {label:52s} {t * 1e6:9.1f} us  err {err:.1e} max {mx:.1e}{'' if ok else '  WRONG'}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default=LAYERS)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=80)
    ap.add_argument("--out", default="", help="directory for sweep_wgrad.json (optional)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, tiny shapes, float32")
    ap.add_argument("--workers", type=int, default=min(8, (os.cpu_count() or 2) // 2),
                    help="processes that compile every config first (1: compile while timing)")
    args = ap.parse_args()
    if args.dry_run:
        tridnn.Handle(device="cpu", backend="triton")  # patches Triton's interpreter
        dev, dtype, n = torch.device("cpu"), "float32", 2
    else:
        torch.backends.cudnn.benchmark = True
        dev, dtype, n = torch.device("cuda"), "bfloat16", args.batch
    deadline = time.time() + args.budget_s
    want = args.layers.split(",")
    if args.workers > 1:
        t0 = time.time()
        names = [w for w in want if w in {p["name"] for p in shapes.RESNET50}]
        try:
            print(f"# compiled {precompile(names, n, args.workers, args.dry_run)} configs in {args.workers} "
                  f"processes, {time.time() - t0:.1f} s", flush=True)
        except Exception as exc:  # a worker that died (a GPU fault): the timing pass compiles what is left
            print(f"# parallel compile stopped after {time.time() - t0:.1f} s: {type(exc).__name__}: {exc}"[:300],
                  flush=True)
    by_name = {p["name"]: p for p in shapes.RESNET50}
    missing = [w for w in want if w not in by_name]
    if missing:
        print(f"# unknown layers skipped: {missing}")
    rows = []
    for lname in want:
        if lname not in by_name:
            continue
        if time.time() > deadline:
            print(f"# budget spent; skipping {lname}")
            continue
        p = dry_layer(by_name[lname]) if args.dry_run else by_name[lname]
        try:
            rows.append(run_layer(p, n, dtype, dev, deadline, args.dry_run))
        except Exception as exc:  # one layer's failure must not lose the others' numbers
            print(f"# {lname}: {type(exc).__name__}: {exc}"[:300])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sweep_wgrad.json"), "w") as f:
            json.dump(rows, f, indent=1)
    print("\n| layer | cuDNN us | TFLOP/s | today's best us | ratio | best us (config) | ratio | TFLOP/s "
          "| err L2 / max |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = {"old": [], "new": []}
    for r in rows:
        c = r["cudnn_us"]
        old = min((r[k] for k in ("old", "api") if k in r), key=lambda b: b["us"], default=None)  # today's best
        new = min((r[k] for k in ("sched", "rows") if k in r), key=lambda b: b["us"], default=None)
        if old and new and old["us"] < new["us"]:
            new = dict(old, config="(old) " + old["config"])
        cell = lambda b: (f"{b['us']:.1f}", f"{b['us'] / c:.2f}") if b else ("-", "-")  # noqa: E731
        (ot, orat), (nt, nrat) = cell(old), cell(new)
        for k, b in (("old", old), ("new", new)):
            if b:
                ratios[k].append(b["us"] / c)
        tf = f"{r['gflop'] / new['us'] * 1e-3:.0f}" if new else "-"
        err = f"{new['rel_err']:.1e} / {new['max_rel']:.1e}" if new else "-"
        print(f"| {r['layer']} | {c:.1f} | {r['gflop'] / c * 1e-3:.0f} | {ot} | {orat} | "
              f"{nt} ({new['config'] if new else '-'}) "
              f"| {nrat} | {tf} | {err} |")
    for k, v in ratios.items():
        if v:
            print(f"geomean ratio {k} ({len(v)} layers): {math.exp(sum(map(math.log, v)) / len(v)):.3f}")


if __name__ == "__main__":
    main()
