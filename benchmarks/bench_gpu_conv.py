"""GPU convolution benchmark: every applicable Triton algorithm against cuDNN (through
PyTorch, cudnn.benchmark on, channels_last), side by side in one run.

    PYTHONPATH=src python benchmarks/bench_gpu_conv.py --out results/ [--sections ...]

Sections (run in this order, each skipped once --budget-s is spent):
  overhead      host time of convolution_forward on an already-tuned problem
  rn50-fwd / rn50-bwd_data / rn50-bwd_filter   ResNet-50, bfloat16 NHWC, --batch
  dw-fwd / dw-bwd_data / dw-bwd_filter         MobileNetV2 depthwise, bfloat16 NHWC
  dil-fwd / dil-bwd_data / dil-bwd_filter      DeepLab ASPP dilated 3x3 (dilation 2, 4, 12),
                bfloat16 NHWC, --dil-batch
  fused         conv + bias + relu + residual in one kernel vs cuDNN conv + PyTorch ops
  fp32-tf32 / fp32-strict / fp32-default       ResNet-50 forward in float32: tridnn's
                TENSOR_OP (tf32), FMA (CUDA cores) and DEFAULT (3xTF32, float32-level
                error) math; cuDNN with tf32 on for the first, off (FMA) for the others
  fp32-MATH-bwd_data / fp32-MATH-bwd_filter    the same maths for the backward directions
Times are medians of CUDA-event timings (triton.testing.do_bench, L2 flushed before
each run) for both sides. "best" is the fastest Triton algorithm, which is what
``find`` picks; ratio = best / cuDNN (lower is better). Each algorithm's JSON entry also
lists "tuned": the launch configs its first call's tuners chose (KIND: the kernel family,
for example "gluon" or "rows"), so a run shows which kernel produced a time. Results: a
table on stdout, JSON and a plot (if matplotlib is there) under --out.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton

import tridnn
from tridnn import shapes
from tridnn.algorithms import registry, selection
from tridnn.algorithms.problem import ConvProblem
from tridnn.cuda.common import Tuner
from tridnn.types import TensorFormat

TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def bench(fn, rep=30):
    """Median GPU seconds of fn, replayed from a CUDA graph (host overhead excluded; it is
    measured on its own in the overhead section); plain event timing if capture fails."""
    try:
        return triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median") * 1e-3
    except Exception:
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn, warmup=10, rep=rep, return_mode="median") * 1e-3


def make(p, n, dtype, math_type, dev):
    nd = len(p["spatial"])
    cd = tridnn.ConvolutionDescriptor(padding=p["pad"], stride=p["stride"], dilation=p["dilation"],
                                      groups=p["groups"], nd=nd, math_type=math_type)
    xd = tridnn.TensorDescriptor.packed((n, p["C"], *p["spatial"]), dtype, TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    t = TORCH[dtype]
    cl = torch.channels_last if nd == 2 else torch.channels_last_3d
    x = torch.randn(xd.dims, device=dev).to(t).contiguous(memory_format=cl)
    w = (torch.randn(wd.dims, device=dev) / math.sqrt(wd.dims[1] * math.prod(p["kernel"]))).to(t)
    w = w.contiguous(memory_format=cl)
    dy = torch.randn(yd.dims, device=dev).to(t).contiguous(memory_format=cl)
    return cd, xd, wd, yd, x, w, dy


def torch_conv(direction, p, x, w, dy):
    args = (list(p["stride"]), list(p["pad"]), list(p["dilation"]))
    if direction == "fwd":
        return lambda: F.conv2d(x, w, None, *args, p["groups"])
    mask = [direction == "bwd_data", direction == "bwd_filter", False]
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *args, False, [0, 0], p["groups"], mask)[
        0 if direction == "bwd_data" else 1]


def tridnn_call(handle, direction, algo, cd, xd, wd, yd, x, w, dy, out, ws):
    if direction == "fwd":
        return lambda: tridnn.convolution_forward(handle, 1.0, xd, x, wd, w, cd, algo.enum, ws, 0.0, yd, out)
    if direction == "bwd_data":
        return lambda: tridnn.convolution_backward_data(handle, 1.0, wd, w, yd, dy, cd, algo.enum, ws, 0.0, xd, out)
    return lambda: tridnn.convolution_backward_filter(handle, 1.0, xd, x, yd, dy, cd, algo.enum, ws, 0.0, wd, out)


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(b.norm(), 1e-30))


ALGOS = "all"  # --algos: "all" applicable algorithms, or "get" (only get's first choice)


def describe(cfg) -> str:
    """A tuner's choice in a few words: its KIND (the kernel family) and its settings."""
    if not isinstance(cfg, dict):
        return str(cfg)[:120]
    rest = ",".join(f"{k}={v}" for k, v in cfg.items() if k != "KIND")
    return f"{cfg.get('KIND', 'triton')}: {rest}"[:120]


def run_layer(handle, direction, p, n, dtype, math_type, dev):
    cd, xd, wd, yd, x, w, dy = make(p, n, dtype, math_type, dev)
    ref_fn = torch_conv(direction, p, x, w, dy)
    ref = ref_fn()
    t_cudnn = bench(ref_fn)
    problem = ConvProblem(direction, xd, wd, yd, cd)
    flops = problem.flops
    row = dict(layer=p["name"], direction=direction, dtype=dtype, math=math_type.name, batch=n,
               cudnn_us=t_cudnn * 1e6, cudnn_tflops=flops / t_cudnn / 1e12, algos={})
    algos = registry.algorithms("conv", direction, "triton")
    if ALGOS == "get":
        ranked = [r for r in selection.get(handle, problem) if r.status == tridnn.Status.SUCCESS]
        algos = [registry.by_enum("conv", direction, "triton", r.algo) for r in ranked[:1]]
    for algo in algos:
        reason = algo.not_applicable(problem)
        if reason:
            continue
        ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
        # poisoned: a call that writes nothing reads NaN, not a freed block that held the
        # reference (1x1 layers match cuDNN bit for bit: both sweep K in order on wgmma)
        out = torch.full_like(ref, float("nan"))
        fn = tridnn_call(handle, direction, algo, cd, xd, wd, yd, x, w, dy, out, ws)
        try:
            Tuner.picks.clear()
            fn()
            torch.cuda.synchronize()
            tuned = [describe(cfg) for _, cfg in Tuner.picks]  # the kernels this call tuned to
            err = rel_err(out, ref)
            t = bench(fn)
        except Exception as exc:  # report, keep going
            row["algos"][algo.name] = dict(error=f"{type(exc).__name__}: {exc}"[:300])
            continue
        row["algos"][algo.name] = dict(us=t * 1e6, tflops=flops / t / 1e12, rel_err=err, tuned=tuned)
    ok = {k: v for k, v in row["algos"].items() if "us" in v}
    if ok:
        best = min(ok, key=lambda k: ok[k]["us"])
        row.update(best=best, best_us=ok[best]["us"], ratio=ok[best]["us"] / row["cudnn_us"],
                   best_err=ok[best]["rel_err"])
    ranked = selection.get(handle, problem)
    row["get_choice"] = ranked[0].algo.name if ranked and ranked[0].status == tridnn.Status.SUCCESS else None
    return row


def fused_layer(handle, p, n, dev):
    from tridnn.api.convolution import execute
    from tridnn.cuda.epilogue import EpilogueSpec
    from tridnn.descriptors.activation import ActivationMode
    cd, xd, wd, yd, x, w, dy = make(p, n, "bfloat16", tridnn.MathType.DEFAULT, dev)
    bias = torch.randn(p["K"], device=dev).to(torch.bfloat16)
    z = torch.randn_like(dy)
    args = (list(p["stride"]), list(p["pad"]), list(p["dilation"]))
    ref_fn = lambda: torch.relu(F.conv2d(x, w, None, *args, p["groups"]) + bias.view(1, -1, 1, 1) + z)
    ref = ref_fn()
    t_ref = bench(ref_fn)
    problem = ConvProblem("fwd", xd, wd, yd, cd)
    spec = EpilogueSpec(activation=ActivationMode.RELU, bias=bias, z=z, alpha2=1.0)
    row = dict(layer=p["name"], direction="fused", ref_us=t_ref * 1e6, algos={})
    for algo in registry.algorithms("conv", "fwd", "triton"):
        if algo.not_applicable(problem):
            continue
        ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
        out = torch.full_like(dy, float("nan"))  # poisoned (see run_layer)
        views = {"x": x, "w": w, "y": out}
        fn = lambda: execute(handle, problem, algo, views, ws, 1.0, 0.0, epilogue=spec)
        fn()
        torch.cuda.synchronize()
        row["algos"][algo.name] = dict(us=bench(fn) * 1e6, rel_err=rel_err(out, ref))
    best = min(row["algos"], key=lambda k: row["algos"][k]["us"])
    row.update(best=best, best_us=row["algos"][best]["us"], ratio=row["algos"][best]["us"] / row["ref_us"],
               best_err=row["algos"][best]["rel_err"])
    return row


def host_overhead(handle, dev):
    """Wall time per convolution_forward call on a tiny, already-tuned problem, where the
    GPU finishes each kernel long before the host issues the next: the host's cost."""
    p = shapes.conv("tiny", 64, 64, (8, 8), 3, 1, 1)
    cd, xd, wd, yd, x, w, dy = make(p, 1, "bfloat16", tridnn.MathType.DEFAULT, dev)
    out = torch.empty_like(dy)
    res = {}
    from tridnn.cuda.conv_implicit_gemm import launch_forward
    algo = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM)
    problem = ConvProblem("fwd", xd, wd, yd, cd)
    cfg = None

    def kernel_launch():
        if "BH" in cfg:  # the TMA kernel (channels-last, stride 1)
            from tridnn.cuda import conv_tma
            conv_tma.launch_conv(conv_tma.forward_plan(problem, x, w, out), problem, x, w, out, 1.0, 0.0, cfg)
        else:
            launch_forward(problem, x, w, out, 1.0, 0.0, None, cfg)
    for name, fn in (
            ("convolution_forward", lambda: tridnn.convolution_forward(handle, 1.0, xd, x, wd, w, cd,
                                                                       tridnn.ConvFwdAlgo.IMPLICIT_GEMM, None, 0.0,
                                                                       yd, out)),
            ("algorithm.run", lambda: algo.run(problem, {"x": x, "w": w, "y": out}, {}, 1.0, 0.0)),
            ("kernel launch", kernel_launch),
            ("torch F.conv2d", lambda: F.conv2d(x, w, None, 1, 1))):
        if name == "kernel launch":
            cfg = next(iter(algo.tuner._best.values()))
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        reps = 2000
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        res[name] = (time.perf_counter() - t0) / reps * 1e6
    return res


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench_out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dil-batch", type=int, default=16,
                    help="batch of the dilated (ASPP, 64x64 and 33x33 maps of 512/256 channels) sections")
    ap.add_argument("--sections", default="overhead,rn50-fwd,rn50-bwd_data,rn50-bwd_filter,dw-fwd,"
                                         "dw-bwd_data,dw-bwd_filter,dil-fwd,dil-bwd_data,dil-bwd_filter,fused,fp32-tf32,"
                                         "fp32-strict,fp32-default")
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--layers", default="", help="comma-separated layer names (default all)")
    ap.add_argument("--algos", choices=("all", "get"), default="all",
                    help="time every applicable algorithm (find's view) or only get's first choice")
    args = ap.parse_args()
    global ALGOS
    ALGOS = args.algos
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    handle = tridnn.Handle("cuda", find_cache=None)
    start = time.time()
    results = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                   cudnn=torch.backends.cudnn.version(), date=time.strftime("%Y-%m-%d"), batch=args.batch,
                   sections={})
    want = set(args.layers.split(",")) if args.layers else None
    layers = lambda suite: [p for p in suite if want is None or p["name"] in want]

    def save():
        with open(os.path.join(args.out, "bench_gpu_conv.json"), "w") as f:
            json.dump(results, f, indent=1)

    for section in args.sections.split(","):
        if time.time() - start > args.budget_s:
            print(f"# budget spent; skipping {section}", flush=True)
            continue
        rows = []
        results["sections"][section] = rows
        if section == "overhead":
            results["overhead_us"] = host_overhead(handle, dev)
            print("# host overhead (us/call):", json.dumps(results["overhead_us"]), flush=True)
            continue
        if section == "fused":
            for p in layers(shapes.RESNET50):
                if time.time() - start > args.budget_s:
                    break
                rows.append(fused_layer(handle, p, args.batch, dev))
                print(section, rows[-1]["layer"], f"{rows[-1]['ratio']:.2f}", flush=True)
            save()
            continue
        kind, direction = section.split("-", 1)
        if kind == "fp32":  # fp32-MATH or fp32-MATH-DIRECTION (forward by default)
            suite, dtype = shapes.RESNET50, "float32"
            math_name, _, direction = direction.partition("-")
            math_type = dict(tf32=tridnn.MathType.TENSOR_OP, strict=tridnn.MathType.FMA,
                             default=tridnn.MathType.DEFAULT)[math_name]
            direction = direction or "fwd"
        else:
            suite = {"rn50": shapes.RESNET50, "dw": shapes.MOBILENETV2_DW, "dil": shapes.DILATED}[kind]
            dtype, math_type = "bfloat16", tridnn.MathType.DEFAULT
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = math_type == tridnn.MathType.TENSOR_OP
        for p in layers(suite):
            if time.time() - start > args.budget_s:
                break
            row = run_layer(handle, direction, p, args.dil_batch if kind == "dil" else args.batch, dtype,
                            math_type, dev)
            rows.append(row)
            print(section, row["layer"], f"cudnn {row['cudnn_us']:.1f}us best {row.get('best')} "
                  f"{row.get('best_us', float('nan')):.1f}us ratio {row.get('ratio', float('nan')):.2f} "
                  f"err {row.get('best_err', float('nan')):.1e}",
                  {k: round(v.get("us", -1), 1) if "us" in v else v["error"][:80] for k, v in row["algos"].items()},
                  "tuned:", sorted({t.split(":")[0] for t in row["algos"].get(row.get("best"), {}).get("tuned", [])}),
                  flush=True)
        save()
    save()
    print("\n| section | layers | geomean ratio (best/cuDNN) | weighted time ratio |")
    print("|---|---|---|---|")
    for section, rows in results["sections"].items():
        rows = [r for r in rows if "ratio" in r]
        if not rows:
            continue
        suite = {p["name"]: p for p in shapes.RESNET50 + shapes.MOBILENETV2_DW + shapes.DILATED}
        ours = sum(r["best_us"] * suite[r["layer"]]["repeat"] for r in rows)
        ref = sum(r.get("cudnn_us", r.get("ref_us")) * suite[r["layer"]]["repeat"] for r in rows)
        print(f"| {section} | {len(rows)} | {geomean([r['ratio'] for r in rows]):.3f} | {ours / ref:.3f} |")
    if "overhead_us" in results:
        print("host overhead us/call:", {k: round(v, 2) for k, v in results["overhead_us"].items()})
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(12, 4))
        for section, rows in results["sections"].items():
            rows = [r for r in rows if "ratio" in r]
            ax.plot([r["layer"] for r in rows], [r["ratio"] for r in rows], "o-", label=section)
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_ylabel("tridnn / cuDNN time")
        ax.tick_params(axis="x", rotation=90)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "bench_gpu_conv.png"), dpi=80)
    except Exception as exc:  # plotting is optional
        print("no plot:", exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
