"""Stream-K sweep (tridnn.cuda.conv_tma_streamk) on ResNet-50's res4/res5 layers.

    PYTHONPATH=src python benchmarks/sweep_conv_streamk.py --out results/   # one H200, <= 150 s
    PYTHONPATH=src python benchmarks/sweep_conv_streamk.py --predict        # CPU: wave arithmetic only
    PYTHONPATH=src python benchmarks/sweep_conv_streamk.py --dry-run        # CPU, interpreter

Per layer (bfloat16 NHWC, batch 64; forward, and backward data of the stride-1 layers):
  cudnn         torch F.conv2d / convolution_backward, channels_last, cudnn.benchmark
  tridnn        conv_tma's data-parallel configs as the tuner picks them (stream-K off)
  tridnn+sk     the same tuner with OFFERED switched on for this process: what flipping
                conv_tma_streamk.OFFERED would pick
  sk:<cfg> dpD  each stream-K config with DP whole waves data-parallel first (0 and
                dp_options'), offered or not (the data to check worth_it against), but
                not those whose wave arithmetic is HOPELESS (8 x 16 boxes on 7x7); the
                row also carries main_us, the stream-K kernel without the finish pass
                (so us - main_us is what the fixup costs)
  ... dpall     the same kernel with every tile data-parallel (no split, no finish):
                the kernel's loop against conv_tma's on the same tile
The model columns come from the wave arithmetic alone: load = the busiest SM's MMA
work in 128 x 128 x 64 k-steps (its whole data-parallel tiles plus its stream-K range),
model_us = the same config's dpall time scaled by load / dpall's load (what the fuller
wave saves at that kernel's measured rate, no fixup), ends = tile ends a program
(each a pipeline drain and refill), piece_mb = float32 partial pieces written (and
read back by the finish pass). --predict prints them on the CPU, with the load of
the data-parallel config on the same tile and of the best-balanced conv_tma config.
Each variant's output is checked against torch's first (max relative error, relative
L2). Times: medians of CUDA-graph replays (bench_gpu_conv.bench). The layers where
stream-K may pay come first; --budget-s cuts the tail (rerun it with --layers
fwd:res4_3x3,...). The table comes last; --out writes JSON.
"""
from __future__ import annotations

import argparse
import json
import math
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
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import common, conv_tma  # noqa: E402
from tridnn.cuda import conv_tma_streamk as streamk  # noqa: E402

# (direction, layer): those where stream-K may pay first (the budget may cut the tail)
# (--predict: a fuller last wave on the first six; the rest are balanced already)
LAYERS = [("fwd", "res4_1x1r"), ("fwd", "res5_1x1r"), ("fwd", "res5_3x3"), ("bwd_data", "res5_3x3"),
          ("bwd_data", "res5_1x1c"), ("fwd", "res5_3x3s2"), ("fwd", "res5_1x1c"), ("fwd", "res5_1x1a"),
          ("fwd", "res5_ds"), ("fwd", "res4_3x3"), ("bwd_data", "res4_1x1r"), ("bwd_data", "res5_1x1r"),
          ("fwd", "res4_1x1c"), ("bwd_data", "res4_3x3")]
HOPELESS = 1.3  # configs whose load exceeds the best-balanced conv_tma config's by this are not timed
SMS = 132
DPALL = 1 << 20  # a DP wave count that covers every tile


def max_rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


def shrink(p):
    """--dry-run: the layer at interpreter size (16-32 channels, 6x6 or smaller)."""
    q = dict(p)
    q["C"], q["K"] = min(p["C"], 32), min(p["K"], 16)
    q["spatial"] = tuple(min(s, 6) for s in p["spatial"])
    return q


# -- the wave arithmetic ---------------------------------------------------------------
def _ipt(plan, cfg, itemsize=2):
    return plan.taps.taps * (plan.c_red // conv_tma._block_k(plan, cfg, itemsize))


def _scale(cfg):
    """A tile's k-step in 128 x 128 x 64 units of MMA work."""
    return streamk._piece(cfg) / (128 * 128)


def dp_model(plan, cfg, sms=SMS):
    """A data-parallel config: the busiest SM runs ceil(tiles / SMs) whole tiles."""
    tiles = streamk._tiles(*streamk._shape(plan), cfg)
    return dict(tiles=tiles, load=math.ceil(tiles / sms) * _ipt(plan, cfg) * _scale(cfg))


def sk_model(plan, cfg, sms=SMS):
    """A stream-K config: programs, DP tiles, the busiest SM's load, tile ends a program,
    float32 pieces written (MB)."""
    tiles, ipt = streamk._tiles(*streamk._shape(plan), cfg), _ipt(plan, cfg)
    programs = cfg.get("PROGRAMS") or sms * cfg["SK"]
    dp = min(cfg["DP"] * programs, tiles)
    programs = max(1, min(programs, max((tiles - dp) * ipt, dp)))
    total = (tiles - dp) * ipt
    per_program = math.ceil(dp / programs) * ipt + math.ceil(total / programs)
    starts = [p * total // programs for p in range(programs + 1)]
    pieces = ends = 0
    for p in range(programs):
        lo, hi = starts[p], starts[p + 1]
        if hi <= lo:
            continue
        first, last = lo // ipt, (hi - 1) // ipt
        ends = max(ends, last - first + 1)
        pieces += (lo % ipt != 0 or (first == last and hi - first * ipt < ipt))
        if last != first:
            pieces += hi - last * ipt < ipt
    per_sm = per_program * math.ceil(programs / sms)  # the block scheduler fills SMs breadth first
    return dict(tiles=tiles, ipt=ipt, programs=programs, dp_tiles=dp, load=per_sm * _scale(cfg),
                ends=ends + math.ceil(dp / programs), piece_mb=pieces * streamk._piece(cfg) * 4 / 2 ** 20,
                split=streamk.split_tiles(tiles - dp, ipt, programs))


def label(cfg):
    nb = cfg.get("NB", 1)
    box = f"{nb}x{cfg['BH']}x{cfg['BW']}" if nb > 1 else f"{cfg['BH']}x{cfg['BW']}"
    dp = "all" if cfg["DP"] >= DPALL else cfg["DP"]
    return f"sk:{box}x{cfg['BLOCK_N']} w{cfg['num_warps']}s{cfg['num_stages']} x{cfg['SK']} dp{dp}"


def sk_configs(plan, problem, dev, part, dry):
    """(config, offered) for every stream-K config that fits the plan's columns: first
    with every tile data-parallel (dpall: the model's rate), then at DP 0 and
    dp_options'."""
    if dry:
        base = streamk.interpreter_config(plan)
        return [(dict(base, PROGRAMS=4, DP=DPALL), False), (dict(base, PROGRAMS=4), True),
                (dict(base, PROGRAMS=4, DP=1), True)]
    saved = streamk.OFFERED
    streamk.OFFERED = True
    try:
        offered = streamk.candidates(plan, dev, problem, part)
    finally:
        streamk.OFFERED = saved
    single = streamk._single(plan)
    flat = single.n == 1 and single.oh == 1
    small = not flat and single.oh * single.ow <= conv_tma.SMALL_OUTPUT and single.n > 1
    base = streamk.SK_FLAT if flat else streamk.SK_TILE + (streamk.SK_SMALL + streamk.SK_TRIAL if small else [])
    best = min(dp_model(single, c)["load"] for c in conv_tma.candidates(plan, dev, problem))
    out = []
    for cfg in base:
        if cfg["BLOCK_N"] > max(64, 1 << (single.c_out - 1).bit_length()):
            continue
        if sk_model(single, cfg)["load"] > HOPELESS * best:  # e.g. 8 x 16 boxes on 7x7 images
            continue
        programs = min(SMS * cfg["SK"], part.numel() // (2 * streamk._piece(cfg)))
        tiles = streamk._tiles(*streamk._shape(single), cfg)
        out.append((dict(cfg, DP=DPALL), False))
        for dp in sorted(set(streamk.dp_options(tiles, programs) + [0])):
            c = dict(cfg, DP=dp)
            out.append((c, c in offered))
    return out


DEADLINE = float("inf")  # time.time() after which no variant starts (--budget-s + 15 s)


def make_plan(direction, problem, x, w, dy, out):
    if direction == "fwd":
        return conv_tma.forward_plan(problem, x, w, out), False, x
    return conv_tma.backward_data_plan(problem, dy, w, out), True, dy


def run_layer(handle, direction, p, n, dev, dry, timer):
    dtype = "float32" if dry else "bfloat16"
    cd, xd, wd, yd, x, w, dy = bgc.make(p, n, dtype, tridnn.MathType.DEFAULT, dev)
    ref_fn = bgc.torch_conv(direction, p, x, w, dy)
    ref = ref_fn()
    problem = ConvProblem(direction, xd, wd, yd, cd)
    flops = problem.flops
    rows = []

    def record(variant, fn, out, main=None, **extra):
        if time.time() > DEADLINE:
            rows.append(dict(layer=p["name"], direction=direction, variant=variant, error="skipped: budget", **extra))
            return
        try:
            fn()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            err, l2 = max_rel(out, ref), bgc.rel_err(out, ref)
            t = timer(fn)
            if main is not None:
                extra["main_us"] = timer(main) * 1e6
        except Exception as exc:  # report it, keep going
            rows.append(dict(layer=p["name"], direction=direction, variant=variant,
                             error=f"{type(exc).__name__}: {exc}"[:300], **extra))
            return
        rows.append(dict(layer=p["name"], direction=direction, variant=variant, us=t * 1e6,
                         tflops=flops / t / 1e12, max_rel_err=err, rel_l2=l2, **extra))

    record("cudnn", ref_fn, ref)
    out = torch.empty_like(ref)
    plan, kmajor, inp = make_plan(direction, problem, x, w, dy, out)
    if plan is None or streamk._single(plan) is None:
        rows.append(dict(layer=p["name"], direction=direction, variant="tridnn", error="no single TMA plan"))
        return rows
    single = streamk._single(plan)
    # today's choice: conv_tma's candidates only, as the tuner picks them
    base = conv_tma.candidates(plan, dev, problem)
    launch = lambda c, o: conv_tma.launch_conv(plan, problem, inp, w, o, 1.0, 0.0, c, kmajor=kmajor)
    cfg = common.Tuner().pick(("sweep", p["name"], direction), base, launch, out, dev)
    dp = dp_model(single, cfg)
    record("tridnn", lambda: launch(cfg, out), out, config=str(cfg), **dp)
    part = torch.empty(2 * 264 * 128 * 256 if not dry else 2 * 8 * 256, dtype=torch.float32, device=dev)
    # the tuner with stream-K offered (what flipping OFFERED would choose; on the CPU: conv_tma's)
    streamk.OFFERED = True
    try:
        cands = streamk.with_streamk(base, plan, dev, problem, part)
        both = lambda c, o: streamk.launch_any(plan, problem, inp, w, o, 1.0, 0.0, c, part, kmajor=kmajor)
        pick = common.Tuner().pick(("sweep+sk", p["name"], direction), cands, both, out, dev)
    finally:
        streamk.OFFERED = False
    record("tridnn+sk", lambda: both(pick, out), out, config=str(pick), offered_configs=len(cands) - len(base))
    # every stream-K config, offered or not; model_us from the same config's dpall row
    rate = None
    for c, offered in sk_configs(plan, problem, dev, part, dry):
        m = sk_model(single, c, SMS if not dry else c.get("PROGRAMS", SMS))
        if c["DP"] >= DPALL:
            rate = None
        elif rate is not None:
            m["model_us"] = rate * m["load"]
        run = lambda c=c, fin=True: streamk.launch_streamk(plan, problem, inp, w, out, 1.0, 0.0, c, part,
                                                           kmajor=kmajor, finish=fin)
        record(label(c), run, out, main=None if c["DP"] >= DPALL else (lambda run=run: run(fin=False)),
               offered=offered, **m)
        if c["DP"] >= DPALL and "us" in rows[-1]:
            rate = rows[-1]["us"] / m["load"]
    return rows


class _Part:
    """--predict: a partial buffer's size only (as the GPU run's)."""
    def numel(self):
        return 2 * 264 * 128 * 256


def predict():
    """The wave arithmetic of every layer and config on CPU (no kernels run): tiles,
    load, and the stream-K configs' load and fixup against the best data-parallel one."""
    dev = torch.device("cuda")  # candidates() for the GPU lists; nothing is launched
    streamk.sm_count = conv_tma.sm_count = lambda device: SMS
    layers = {p["name"]: p for p in shapes.RESNET50}
    print(f"{'layer':10s} {'dir':8s} {'config':34s} {'tiles':>5s} {'ipt':>4s} {'load':>6s} {'/same':>6s} "
          f"{'/best':>6s} {'ends':>4s} {'split':>5s} {'pieceMB':>7s}")
    for direction, name in LAYERS:
        p = layers[name]
        cd, xd, wd, yd, x, w, dy = bgc.make(p, 64, "bfloat16", tridnn.MathType.DEFAULT, torch.device("cpu"))
        problem = ConvProblem(direction, xd, wd, yd, cd)
        out = torch.empty(yd.dims if direction == "fwd" else xd.dims, dtype=torch.bfloat16).to(
            memory_format=torch.channels_last)
        plan, _, _ = make_plan(direction, problem, x, w, dy, out)
        single = streamk._single(plan) if plan is not None else None
        if single is None:
            print(f"{name:10s} {direction:8s} no single TMA plan")
            continue
        dps = [(dp_model(single, c)["load"], c) for c in conv_tma.candidates(plan, dev, problem)]
        best, bcfg = min(dps, key=lambda t: t[0])
        bt = dp_model(single, bcfg)["tiles"]
        box = f"{bcfg.get('NB', 1)}x{bcfg['BH']}x{bcfg['BW']}x{bcfg['BLOCK_N']}"
        print(f"{name:10s} {direction:8s} {'best DP load ' + box:34s} {bt:5d} {_ipt(single, bcfg):4d} {best:6.0f}")
        for c, offered in sk_configs(plan, problem, dev, _Part(), False):
            m = sk_model(single, c)
            if c["DP"] >= DPALL:
                same = m["load"]
                continue
            print(f"{'':10s} {'':8s} {label(c) + (' *' if offered else ''):34s} {m['tiles']:5d} {m['ipt']:4d} "
                  f"{m['load']:6.0f} {m['load'] / same:6.2f} {m['load'] / best:6.2f} {m['ends']:4d} {m['split']:5d} "
                  f"{m['piece_mb']:7.1f}")
    print("load: busiest SM's MMA work in 128x128x64 k-steps; /same: load / the same tile's all-data-parallel "
          "load; /best: load / the best-balanced conv_tma config's; ends: tile ends a program; * offered by worth_it")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget-s", type=float, default=115, help="no layer starts after this (no variant after +15 s)")
    ap.add_argument("--layers", default="", help="comma-separated direction:layer (default: all of LAYERS)")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes, float32")
    ap.add_argument("--predict", action="store_true", help="CPU: print the wave arithmetic, run nothing")
    args = ap.parse_args()
    global DEADLINE
    if args.predict:
        return predict()
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
        DEADLINE = start + args.budget_s + 15
    rows = []
    todo = [tuple(item.split(":")) for item in args.layers.split(",")] if args.layers else LAYERS
    if dry:
        todo = todo[:4]  # flat forward, 3x3 forward and backward data
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
    print(f"# {time.time() - start:.0f} s; /cuDNN = us / cuDNN's us; main: without the finish pass; "
          f"model: the dpall row's us x load ratio (no fixup); *: offered by worth_it")
    print(f"\n{'layer':10s} {'dir':8s} {'variant':36s} {'us':>7s} {'TFLOP/s':>7s} {'/cuDNN':>6s} {'main':>6s} "
          f"{'model':>6s} {'ends':>4s} {'pcMB':>5s} {'max rel':>8s}")
    for r in rows:
        v = r["variant"] + (" *" if r.get("offered") else "")
        if "us" not in r:
            print(f"{r['layer']:10s} {r['direction']:8s} {v:36s} ERROR {r['error'][:70]}")
            continue
        ratio = r["us"] / cudnn.get((r["layer"], r["direction"]), float("nan"))
        f = lambda key, fmt: format(r[key], fmt) if key in r else "-"
        print(f"{r['layer']:10s} {r['direction']:8s} {v:36s} {r['us']:7.1f} {r['tflops']:7.1f} {ratio:6.2f} "
              f"{f('main_us', '6.1f'):>6s} {f('model_us', '6.1f'):>6s} {f('ends', 'd'):>4s} {f('piece_mb', '5.1f'):>5s} "
              f"{r['max_rel_err']:8.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
