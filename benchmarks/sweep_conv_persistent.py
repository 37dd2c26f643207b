"""The persistent TMA convolution kernel (conv_tma_persistent_kernel) against the
non-persistent one (conv_tma_kernel) and cuDNN, on the ResNet-50 layers where they differ
most, bfloat16 channels-last, batch 64, forward and backward data.

    PYTHONPATH=src python3 benchmarks/sweep_conv_persistent.py [--out DIR] [--budget-s 85]
    PYTHONPATH=src python3 benchmarks/sweep_conv_persistent.py --dry-run   # CPU interpreter, tiny shapes

Every launch config that conv_tma.candidates offers is timed through conv_tma.launch_conv
(the tuner's own call, alpha = 1, beta = 0: the persistent configs store by TMA), after
its result is checked against torch's convolution (cuDNN). Configs whose relative L2
error exceeds --tol are reported and left out of the best-of columns. The kernels are
compiled first, all at once on a thread pool (Triton's AsyncCompileMode), so the run fits
in about 90 s on one H200. Times: CUDA-graph replay medians (bench_gpu_conv.bench).
"""
from __future__ import annotations

import argparse
import json
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

LAYERS = ["res2_1x1c", "res3_ds", "res4_1x1r", "res5_1x1r", "res5_1x1c", "res3_3x3", "res5_3x3"]
DRY_LAYERS = [shapes.conv("t_1x1", 16, 32, (5, 5), 1), shapes.conv("t_ds", 32, 16, (6, 6), 1, 2),
              shapes.conv("t_3x3", 16, 16, (6, 7), 3, 1, 1), shapes.conv("t_small", 16, 32, (3, 3), 3, 1, 1)]


def cfg_name(c):
    short = dict(BLOCK_N="N", BK_CAP="K", num_warps="w", num_stages="s", PERSISTENT="P", EPI_SPLIT="split")
    return ",".join(f"{short.get(k, k)}{v}" for k, v in c.items())


class Case:
    """One (layer, direction): tensors, torch's result and timing, the plan and configs."""

    def __init__(self, p, direction, batch, dtype, dev, dry):
        self.p, self.direction = p, direction
        cd, xd, wd, yd, x, w, dy = base.make(p, batch, dtype, tridnn.MathType.DEFAULT, dev)
        self.problem = ConvProblem(direction, xd, wd, yd, cd)
        self.ref_fn = base.torch_conv(direction, p, x, w, dy)
        self.ref = self.ref_fn()
        self.out = torch.empty_like(self.ref)
        if direction == "fwd":
            self.plan = conv_tma.plan_forward(self.problem, x, w, self.out)
            self.inp, self.kmajor = x, False
        else:
            self.plan = conv_tma.plan_backward_data(self.problem, dy, w, self.out)
            self.inp, self.kmajor = dy, True
        self.w = w
        self.configs = [] if self.plan is None else self._configs(dev, dry)

    def _configs(self, dev, dry):
        cands = conv_tma.candidates(self.plan, dev, self.problem)
        if dry:  # the interpreter gets one config (float32): add its persistent twins by hand
            plan = self.plan[0] if isinstance(self.plan, tuple) and len(self.plan) == 1 else self.plan
            if not isinstance(plan, tuple) and plan.fill == (1, 1):
                cands = cands + [dict(cands[0], PERSISTENT=1), dict(cands[0], PERSISTENT=1, EPI_SPLIT=2)]
        return cands

    def call(self, cfg):
        return lambda: conv_tma.launch_conv(self.plan, self.problem, self.inp, self.w, self.out, 1.0, 0.0, cfg,
                                            kmajor=self.kmajor)


def precompile(cases, dry):
    """Compile every (case, config) kernel in parallel: launch_conv's launches become
    Triton warmups inside AsyncCompileMode, so the timed launches later find them built."""
    if dry:
        return 0.0
    from concurrent.futures import ThreadPoolExecutor
    t0 = time.time()
    real = conv_tma.launch

    def warm(kernel, grid, args, consts, options, static=None):
        kernel.warmup(*args, grid=grid, **consts, **options)
    conv_tma.launch = warm
    try:
        from triton.runtime._async_compile import AsyncCompileMode  # Triton >= 3.4
        with ThreadPoolExecutor(max(4, os.cpu_count() or 4)) as pool, AsyncCompileMode(pool, ignore_errors=True):
            for case in cases:
                for cfg in case.configs:
                    case.call(cfg)()
    except Exception as exc:  # fall back to compiling on first launch
        print(f"# parallel compile failed ({type(exc).__name__}: {exc}); compiling serially", flush=True)
    finally:
        conv_tma.launch = real
    return time.time() - t0


def run_case(case, tol, deadline, rep):
    flops = case.problem.flops
    row = dict(layer=case.p["name"], direction=case.direction, plan=conv_tma.plan_kind(case.plan)
               if case.plan is not None else None, cudnn_us=base.bench(case.ref_fn, rep) * 1e6, configs={})
    for cfg in case.configs:
        if time.time() > deadline:
            row["configs"][cfg_name(cfg)] = dict(error="budget spent", persistent=bool(cfg.get("PERSISTENT")))
            continue
        fn = case.call(cfg)
        entry = dict(persistent=bool(cfg.get("PERSISTENT")))
        try:
            case.out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            entry["rel_err"] = base.rel_err(case.out, case.ref)
            entry["ok"] = entry["rel_err"] <= tol  # NaN (an unwritten element) fails too
            entry["us"] = base.bench(fn, rep) * 1e6
            entry["tflops"] = flops / entry["us"] / 1e6
        except Exception as exc:  # report, keep going
            entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row["configs"][cfg_name(cfg)] = entry
    for kind, persistent in (("existing", False), ("persistent", True)):
        ok = {k: v for k, v in row["configs"].items() if v["persistent"] == persistent and v.get("ok")}
        if ok:
            best = min(ok, key=lambda k: ok[k]["us"])
            row[kind] = dict(config=best, us=ok[best]["us"], tflops=ok[best]["tflops"])
    errs = [v["rel_err"] for v in row["configs"].values() if "rel_err" in v]
    row["max_rel_err"] = max(errs) if errs else None
    row["bad"] = [k for k, v in row["configs"].items() if "error" in v or not v.get("ok", True)]
    return row


def parse_args(layers, budget_s):
    """The command line (``layers``: the default --layers; ``budget_s``: the default
    budget on the GPU)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", default=",".join(layers))
    ap.add_argument("--directions", default="fwd,bwd_data")
    ap.add_argument("--budget-s", type=float, default=None,
                    help=f"seconds (default {budget_s:g} on the GPU, none dry)")
    ap.add_argument("--rep", type=int, default=10, help="milliseconds of replays per timing (do_bench's rep)")
    ap.add_argument("--tol", type=float, default=1e-2, help="relative L2 error vs cuDNN that fails a config")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU through Triton's interpreter")
    return ap.parse_args()


def setup(args, dry_layers, budget_s):
    """(start, deadline, dev, dtype, batch, layers). --dry-run: the CPU interpreter on
    ``dry_layers`` in float32, batch 3, and base.bench times one call; otherwise the GPU,
    bfloat16, --batch and --layers from shapes.RESNET50."""
    start = time.time()
    deadline = start + (args.budget_s or (float("inf") if args.dry_run else budget_s))
    if args.dry_run:
        dev, dtype, batch = torch.device("cpu"), "float32", 3
        tridnn.Handle(device="cpu", backend="triton")  # patches the interpreter (layer_utils)
        torch.cuda.synchronize = lambda *a: None
        base.bench = lambda fn, rep=30: (lambda t0: (fn(), time.perf_counter() - t0)[1])(time.perf_counter())
        layers = dry_layers
    else:
        dev, dtype, batch = torch.device("cuda"), "bfloat16", args.batch
        torch.backends.cudnn.benchmark = True
        by_name = {p["name"]: p for p in shapes.RESNET50}
        layers = [by_name[n] for n in args.layers.split(",")]
    return start, deadline, dev, dtype, batch, layers


def write_json(args, filename, dev, batch, dtype, rows, start):
    """The rows to args.out/filename (when --out is given)."""
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, filename), "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu (interpreter)",
                           batch=batch, dtype=dtype, rows=rows, wall_s=time.time() - start), f, indent=1)


def compile_and_run(cases, run, args, deadline):
    """Compiles every case's configs at once (precompile), then rows = run(case) for each
    case until the deadline passes."""
    compile_s = precompile(cases, args.dry_run)
    print(f"# {sum(len(c.configs) for c in cases)} configs over {len(cases)} cases; compiled in {compile_s:.1f} s",
          flush=True)
    rows = []
    for case in cases:
        if time.time() > deadline:
            print(f"# budget spent; skipping {case.p['name']} {case.direction}", flush=True)
            continue
        rows.append(run(case))
    return rows


def exit_status(rows, args):
    """Lists the failed configs; a dry run with any fails (exit status 1)."""
    failed = [(r["layer"], r["direction"], b) for r in rows for b in r["bad"]]
    if failed:
        print("# failed configs:", failed)
    return 1 if args.dry_run and failed else 0


def main():
    args = parse_args(LAYERS, 85.0)
    start, deadline, dev, dtype, batch, layers = setup(args, DRY_LAYERS, 85.0)
    cases = [Case(p, d, batch, dtype, dev, args.dry_run) for p in layers for d in args.directions.split(",")]

    def run(case):
        row = run_case(case, args.tol, deadline, args.rep)
        for name, v in row["configs"].items():
            shown = f"{v['us']:8.1f} us {v['tflops']:6.1f} TF/s err {v['rel_err']:.1e}" if "us" in v else \
                v.get("error", f"err {v.get('rel_err', float('nan')):.1e}")
            flag = "" if v.get("ok") else "  BAD"
            print(f"  {row['layer']:10s} {row['direction']:8s} {name:45s} {shown}{flag}", flush=True)
        return row
    rows = compile_and_run(cases, run, args, deadline)
    write_json(args, "sweep_conv_persistent.json", dev, batch, dtype, rows, start)
    print(f"\n# {dtype}, batch {batch}, wall {time.time() - start:.0f} s; us = CUDA-graph median; "
          f"err = max relative L2 vs cuDNN over the timed configs")
    print("| layer | dir | plan | best existing us (TF/s) | best persistent us (TF/s) | cuDNN us | pers/exist "
          "| pers/cuDNN | max err | failed configs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        e, p = r.get("existing"), r.get("persistent")
        fmt = lambda b: f"{b['us']:.1f} ({b['tflops']:.0f})" if b else "n/a"
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "n/a"
        err = f"{r['max_rel_err']:.1e}" if r["max_rel_err"] is not None else "n/a"
        print(f"| {r['layer']} | {r['direction']} | {r['plan']} | {fmt(e)} | {fmt(p)} | {r['cudnn_us']:.1f} | "
              f"{ratio(p and p['us'], e and e['us'])} | {ratio(p and p['us'], r['cudnn_us'])} | {err} | "
              f"{len(r['bad'])} |")
    for r in rows:
        if e := r.get("existing"):
            print(f"# {r['layer']} {r['direction']}: existing {e['config']}"
                  + (f"; persistent {r['persistent']['config']}" if r.get("persistent") else ""))
    return exit_status(rows, args)


if __name__ == "__main__":
    sys.exit(main())
