"""Stream-K sweep (tridnn.cuda.conv_tma_streamk) on ResNet-50's under-filled layers.

    PYTHONPATH=src python benchmarks/sweep_conv_streamk.py --out results/   # one H200, < 100 s
    PYTHONPATH=src python benchmarks/sweep_conv_streamk.py --dry-run        # CPU, interpreter

Per layer (bfloat16 NHWC, batch 64; forward, and backward data of the stride-1 3x3s):
  cudnn        torch F.conv2d / convolution_backward, channels_last, cudnn.benchmark
  tridnn       conv_tma's configs as the tuner picks them today (no stream-K)
  tridnn+sk    the algorithm with its workspace: the tuner weighs stream-K too
  sk:<cfg>     each stream-K config with its DP waves (conv_tma_streamk.dp_options),
               also where ``offered`` is False (the rule would not offer it: the data
               to check the rule against); --sk all adds DP 0 everywhere
A cold Triton cache compiles ~60 kernels (conv_tma's tuner lists and the stream-K
configs): the layers where stream-K is offered come first, and --budget-s cuts the
tail (rerun the rest with --layers fwd:res4_ds,...).
Every variant's output is checked against torch's first (max relative error, and the
relative L2 error that the tuner's cross-check uses). Times: medians of CUDA-graph
replays (bench_gpu_conv.bench). The table comes last; --out writes JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--dry-run" in sys.argv:  # before Triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu_conv as bgc  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import common, conv_tma  # noqa: E402
from tridnn.cuda import conv_tma_streamk as streamk  # noqa: E402

# (direction, layer), those where stream-K is offered first (the budget may cut the tail)
LAYERS = [("fwd", "res4_1x1r"), ("fwd", "res5_1x1r"), ("fwd", "res5_3x3"), ("bwd_data", "res5_3x3"),
          ("fwd", "res5_3x3s2"), ("fwd", "res5_1x1a"), ("fwd", "res5_1x1c"), ("fwd", "res5_ds"),
          ("bwd_data", "res4_3x3"), ("fwd", "res4_ds"), ("fwd", "res4_3x3s2"), ("fwd", "res3_ds"),
          ("fwd", "res3_3x3s2")]


def max_rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


def shrink(p):
    """--dry-run: the layer at interpreter size (16-32 channels, 8x8 or smaller)."""
    q = dict(p)
    q["C"], q["K"] = min(p["C"], 32), min(p["K"], 16)
    q["spatial"] = tuple(min(s, 6) for s in p["spatial"])
    return q


def sk_configs(plan, problem, dev, part, dry):
    """(config, offered) for every stream-K config that fits the plan's columns."""
    if dry:
        base = [dict(streamk.interpreter_config(plan), PROGRAMS=3), dict(streamk.interpreter_config(plan), PROGRAMS=3, DP=1)]
        return [(c, True) for c in base]
    offered = streamk.candidates(plan, dev, problem, part)
    single = streamk._single(plan)
    flat = single.n == 1 and single.oh == 1
    base = streamk.SK_FLAT if flat else streamk.SK_TILE + streamk.SK_SMALL
    out = []
    for cfg in base:
        if cfg["BLOCK_N"] > max(64, 1 << (single.c_out - 1).bit_length()):
            continue
        if cfg.get("NB", 1) > 1 and (flat or single.oh * single.ow > conv_tma.SMALL_OUTPUT):
            continue
        programs = min(streamk.sm_count(dev) * cfg["SK"], part.numel() // (2 * streamk._piece(cfg)))
        tiles = streamk._tiles(*streamk._shape(single), cfg)
        dps = streamk.dp_options(tiles, programs)
        for dp in sorted(set(dps + [0])):
            c = dict(cfg, DP=dp)
            if c in offered or (dp == dps[0] and ALL_SK is not None) or ALL_SK:
                out.append((c, c in offered))
    return out


ALL_SK = False  # --sk all: every config, DP 0 too; offered: offered ones only; rest: + the first DP option of the rest


def label(cfg):
    nb = cfg.get("NB", 1)
    box = f"{nb}x{cfg['BH']}x{cfg['BW']}" if nb > 1 else f"{cfg['BH']}x{cfg['BW']}"
    kind = "nested" if cfg.get("NESTED") else f"loop{cfg.get('END_PARTS', 1)}"
    return f"sk:{box}x{cfg['BLOCK_N']} w{cfg['num_warps']}s{cfg['num_stages']} x{cfg['SK']} dp{cfg['DP']} {kind}"


DEADLINE = float("inf")  # time.time() after which no variant starts (--budget-s + 12 s)


def run_layer(handle, direction, p, n, dev, dry, timer):
    dtype = "float32" if dry else "bfloat16"
    cd, xd, wd, yd, x, w, dy = bgc.make(p, n, dtype, tridnn.MathType.DEFAULT, dev)
    ref_fn = bgc.torch_conv(direction, p, x, w, dy)
    ref = ref_fn()
    problem = ConvProblem(direction, xd, wd, yd, cd)
    flops = problem.flops
    rows = []

    def record(variant, fn, out, **extra):
        if time.time() > DEADLINE:
            rows.append(dict(layer=p["name"], direction=direction, variant=variant, error="skipped: budget", **extra))
            return
        try:
            fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            err, l2 = max_rel(out, ref), bgc.rel_err(out, ref)
            t = timer(fn)
        except Exception as exc:  # report it, keep going
            rows.append(dict(layer=p["name"], direction=direction, variant=variant,
                             error=f"{type(exc).__name__}: {exc}"[:300], **extra))
            return
        rows.append(dict(layer=p["name"], direction=direction, variant=variant, us=t * 1e6,
                         tflops=flops / t / 1e12, max_rel_err=err, rel_l2=l2, **extra))

    record("cudnn", ref_fn, ref)
    out = torch.empty_like(ref)
    if direction == "fwd":
        plan, kmajor, inp = conv_tma.forward_plan(problem, x, w, out), False, x
        algo = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM)
    else:
        plan, kmajor, inp = conv_tma.backward_data_plan(problem, dy, w, out), True, dy
        algo = registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)
    if plan is None:
        rows.append(dict(layer=p["name"], direction=direction, variant="tridnn", error="no TMA plan"))
        return rows
    # today's choice: conv_tma's candidates only, as the tuner picks them
    base = conv_tma.candidates(plan, dev, problem)
    launch = lambda c, o: conv_tma.launch_conv(plan, problem, inp, w, o, 1.0, 0.0, c, kmajor=kmajor)
    cfg = common.Tuner().pick(("sweep", p["name"], direction), base, launch, out, dev)
    record("tridnn", lambda: launch(cfg, out), out, config=str(cfg))
    # the algorithm with its workspace: stream-K among the candidates where offered
    ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
    if ws.numel() or dry:  # without a workspace the algorithm is today's tridnn
        algo.tuner._best.clear()
        record("tridnn+sk", bgc.tridnn_call(handle, direction, algo, cd, xd, wd, yd, x, w, dy, out, ws), out,
               workspace_mb=ws.numel() / 2 ** 20)
        rows[-1]["config"] = str(next(iter(algo.tuner._best.values()), None))
    # every stream-K config, offered or not, on a buffer big enough for any of them
    part = torch.empty(2 * 264 * 128 * 256 if not dry else 2 * 8 * 256, dtype=torch.float32, device=dev)
    for c, offered in sk_configs(plan, problem, dev, part, dry):
        record(label(c), lambda c=c: streamk.launch_streamk(plan, problem, inp, w, out, 1.0, 0.0, c, part,
                                                             kmajor=kmajor), out, offered=offered)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=80, help="no layer starts after this (no variant after +12 s)")
    ap.add_argument("--layers", default="", help="comma-separated direction:layer (default: all of LAYERS)")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes, float32")
    ap.add_argument("--sk", choices=("offered", "rest", "all"), default="rest",
                    help="stream-K configs to time: the offered ones; also the rest (their first DP option); all DP options")
    args = ap.parse_args()
    global ALL_SK, DEADLINE
    ALL_SK = dict(offered=None, rest=False, all=True)[args.sk]
    dry = args.dry_run
    if dry:
        dev = torch.device("cpu")
        handle = tridnn.Handle(device="cpu", backend="triton")
        timer = lambda fn: (lambda t0: (fn(), time.perf_counter() - t0)[1])(time.perf_counter())
        n = 2
    else:
        torch.backends.cudnn.benchmark = True
        dev = torch.device("cuda")
        handle = tridnn.Handle("cuda", find_cache=None)
        timer = lambda fn: bgc.bench(fn, rep=20)
        n = args.batch
    layers = {p["name"]: p for p in shapes.RESNET50}
    start = time.time()
    if not dry:
        DEADLINE = start + args.budget_s + 12
    rows = []
    todo = [tuple(item.split(":")) for item in args.layers.split(",")] if args.layers else LAYERS
    for direction, name in todo:
        if time.time() - start > args.budget_s and not dry:
            print(f"# budget spent: skipping {direction} {name}", flush=True)
            continue
        p = shrink(layers[name]) if dry else layers[name]
        got = run_layer(handle, direction, p, n, dev, dry, timer)
        rows += got
        for r in got:
            print(json.dumps(r), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = dict(device=torch.cuda.get_device_name() if not dry else "cpu (dry run)", torch=torch.__version__,
                    date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), batch=n, rows=rows)
        with open(os.path.join(args.out, "sweep_conv_streamk.json"), "w") as f:
            json.dump(meta, f, indent=1)
    cudnn = {(r["layer"], r["direction"]): r["us"] for r in rows if r["variant"] == "cudnn" and "us" in r}
    print(f"# {time.time() - start:.0f} s; ratio = us / cuDNN's us; offered: the tuner would weigh this config")
    print(f"\n{'layer':12s} {'dir':8s} {'variant':44s} {'us':>8s} {'TFLOP/s':>8s} {'/cuDNN':>7s} {'max rel':>9s} offered")
    for r in rows:
        if "us" not in r:
            print(f"{r['layer']:12s} {r['direction']:8s} {r['variant']:44s} ERROR {r['error'][:80]}")
            continue
        ratio = r["us"] / cudnn.get((r["layer"], r["direction"]), float("nan"))
        print(f"{r['layer']:12s} {r['direction']:8s} {r['variant']:44s} {r['us']:8.1f} {r['tflops']:8.1f} "
              f"{ratio:7.2f} {r['max_rel_err']:9.1e} {r.get('offered', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
