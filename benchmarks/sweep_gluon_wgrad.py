"""Gluon warp-specialized backward-filter convolution (tridnn.cuda.gluon_wgrad) against cuDNN
and tridnn's current choice.

    PYTHONPATH=src python benchmarks/sweep_gluon_wgrad.py --out results/   # one H200, <= 120 s
    PYTHONPATH=src python benchmarks/sweep_gluon_wgrad.py --dry-run        # CPU: sm_90 compiles only

ResNet-50 batch 64 3x3 layers, backward filter, bfloat16 NHWC (stride 1, padding 1):
  res2_3x3 64->64 56x56, res3_3x3 128->128 28x28, res4_3x3 256->256 14x14, res5_3x3 512->512 7x7
(each 14.8 GFLOP); on request (--layers) the stride-2 ones res3_3x3s2 (56x56 -> 28x28),
res4_3x3s2, res5_3x3s2. Rows:
  cudnn       torch.ops.aten.convolution_backward with output_mask (False, True, False):
              cuDNN's weight-gradient kernel alone (channels_last, cudnn.benchmark=True)
  tridnn      tridnn.convolution_backward_filter with the algorithm get() ranks first
              (ALGO_1's tuner picks among conv_tma / conv_wgrad_tma configs on its first call;
              timed after all gluon rows, so a slow tuner cannot starve them; --no-tridnn)
  <config> [dD sS]   gluon_wgrad with that config (NB x BH x BW pixel box, BLOCK_M x BLOCK_N
              tile per tap, "x4*64": 4 taps side by side in one tile (N = 256), ring sN,
              consumer warps wN, pN programs an SM) and schedule: the first D
              tiles whole, the others in S pixel slices (S=1: no split, no finish kernel).
              Schedules per config: the cost model's (gluon_wgrad.schedule), half and twice
              its slices, and all tiles split (D=0) when the model keeps tiles whole.
Every result is checked against cuDNN's first (max |diff| / max |cuDNN|; > 2e-2 is
flagged BAD and not timed). Times: medians of CUDA-graph replays
(triton.testing.do_bench_cudagraph; gluon rows include the finish kernel). useful = pixels /
pixels the boxes cover; fill = average / longest program's k-steps (load balance); /cudnn and
/tridnn = time ratios (lower is better). TFLOP/s count useful work only.

A Gluon kernel that deadlocks would hang the process, so every config first runs on small
problems in a child process ("canary", --canary-s limit) with several schedules and a
3-program grid against float64; a config that hangs, crashes or disagrees is reported and
left out of the timed sweep. --dry-run (CPU): builds every layer's plans and compiles every
config (and the finish kernel) for sm_90 through the kernels' JIT binding (an offline
driver stands in for CUDA), then prints the table with empty timings and writes the JSON.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gluon_sweep_common as gsc  # noqa: E402  (benchmarks/, the script's own folder)
from gluon_sweep_common import bench, offline_driver, useful  # noqa: E402

LAYERS = {  # name: (N, C, K, H, W, filter size, padding, stride)
    "res2_3x3": (64, 64, 64, 56, 56, 3, 1, 1),
    "res3_3x3": (64, 128, 128, 28, 28, 3, 1, 1),
    "res4_3x3": (64, 256, 256, 14, 14, 3, 1, 1),
    "res5_3x3": (64, 512, 512, 7, 7, 3, 1, 1),
    # stride 2 (not in the default run: --layers res3_3x3s2,...)
    "res3_3x3s2": (64, 128, 128, 56, 56, 3, 1, 2),
    "res4_3x3s2": (64, 256, 256, 28, 28, 3, 1, 2),
    "res5_3x3s2": (64, 512, 512, 14, 14, 3, 1, 2),
    # 1x1 stride 1 (the FLAT configs beside the image boxes: --layers res4_1x1c,...)
    "res3_1x1c": (64, 128, 512, 28, 28, 1, 0, 1),
    "res3_1x1r": (64, 512, 128, 28, 28, 1, 0, 1),
    "res4_1x1c": (64, 256, 1024, 14, 14, 1, 0, 1),
    "res4_1x1r": (64, 1024, 256, 14, 14, 1, 0, 1),
    "res5_1x1a": (64, 1024, 512, 14, 14, 1, 0, 1),
    "res5_1x1c": (64, 512, 2048, 7, 7, 1, 0, 1),
    "res5_1x1r": (64, 2048, 512, 7, 7, 1, 0, 1),
    # 1x1 stride 2 (the downsample shortcut of res5's first block: 14x14 -> 7x7)
    "res5_ds": (64, 1024, 2048, 14, 14, 1, 0, 2),
}
DEFAULT_LAYERS = "res2_3x3,res3_3x3,res4_3x3,res5_3x3"
CANARY = [  # (N, C, K, H, W, KH, KW, pad, alpha, beta, schedule (direct, splits) or None, sms, stride)
    (2, 64, 192, 11, 19, 3, 3, 1, 1.0, 0.0, None, None, 1),
    (3, 128, 64, 7, 7, 3, 3, 1, 0.5, 0.0, (0, 3), None, 1),
    (2, 64, 128, 9, 13, 5, 3, 2, 1.0, 0.5, (3, 2), 3, 1),
    (2, 128, 128, 14, 10, 3, 3, 1, 1.0, 0.0, None, None, 2),
    (3, 128, 192, 7, 9, 1, 1, 0, 1.0, 0.5, None, None, 1),  # 1x1: the only one FLAT configs take
]
SMS = 132


def rel_err(got, want) -> float:
    return ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-30)).item()


def fill(plan, boxes, programs) -> float:
    """Average over longest program's k-steps (units dealt round-robin)."""
    steps = [0] * programs
    rest = max(plan.units - plan.direct, 0)
    for u in range(plan.units):
        if u < plan.direct:
            s = boxes
        else:
            split = (u - plan.direct) // max(rest // max(plan.splits, 1), 1)
            s = min(plan.per, boxes - split * plan.per)
        steps[u % programs] += s
    return sum(steps) / (programs * max(steps)) if max(steps) else 0.0


def applies(cfg, c, k, n, oh, ow, flat=False, narrow=False) -> bool:
    """Skip tiles mostly outside the layer, 64-channel tiles where 128 fit (L2-bound; kept with
    narrow), boxes that waste half the pixels, and one-row (FLAT) configs off 1x1 stride-1
    layers (flat)."""
    if cfg.get("FLAT") and not flat:
        return False
    if cfg["BLOCK_M"] > max(k, 64) or cfg["BLOCK_N"] > max(c, 64):
        return False
    if min(cfg["BLOCK_M"], cfg["BLOCK_N"]) < 128 and min(c, k) >= 128 and not narrow:
        return False
    return useful(cfg, n, oh, ow) >= 0.5


def out_size(h, w, kh, kw, pad, stride):
    return (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1


def make(n, c, k, h, w, kh, kw, pad, dev, seed=0, stride=1):
    g = torch.Generator().manual_seed(seed)
    oh, ow = out_size(h, w, kh, kw, pad, stride)
    x = torch.randn(n, c, h, w, generator=g).to(torch.bfloat16)
    dy = torch.randn(n, k, oh, ow, generator=g).to(torch.bfloat16)
    cl = torch.channels_last
    return x.to(dev).contiguous(memory_format=cl), dy.to(dev).contiguous(memory_format=cl)


def schedules(gw, cfg, n, c, k, oh, ow, kh, kw, programs):
    """(direct, splits) variants to time for one config: the model's, half and twice its
    slices, all tiles split."""
    tiles = gw.num_tiles(cfg, k, c, kh * kw)
    boxes = gw.num_boxes(cfg, n, oh, ow)
    d, s, _ = gw.schedule(cfg, tiles, boxes, programs)
    out = [(d, s)]
    if d < tiles:
        out += [(d, max(1, s // 2)), (d, 2 * s)]
    if d > 0:
        out.append(gw.schedule(cfg, tiles, boxes, programs, direct=0)[:2])
    seen, uniq = set(), []
    for d2, s2 in out:
        d3, s3, _ = gw.schedule(cfg, tiles, boxes, programs, splits=s2, direct=d2)
        if (d3, s3) not in seen:
            seen.add((d3, s3))
            uniq.append((d3, s3))
    return uniq, boxes


# -- canary (child process) ---------------------------------------------------------------
def canary(indices, dry):
    """Run each config on the CANARY problems (model and forced schedules, a grid of 3
    programs, alpha and beta); print one line per config, flushed."""
    from tridnn.cuda import gluon_wgrad as gw
    dev = "cpu" if dry else "cuda"
    for i in indices:
        cfg = gw.CONFIGS[i]
        worst = 0.0
        for n, c, k, h, w, kh, kw, pad, alpha, beta, sched, sms, st in CANARY:
            if cfg.get("FLAT") and not gw.flat_ok((kh, kw), (pad, pad), (st, st)):
                continue
            x, dy = make(n, c, k, h, w, kh, kw, pad, dev, seed=i, stride=st)
            dw0 = torch.randn(k, c, kh, kw, generator=torch.Generator().manual_seed(7)).to(dev)
            want = None
            if not dry:
                want = alpha * torch.nn.grad.conv2d_weight(x.double(), (k, c, kh, kw), dy.double(), padding=pad,
                                                           stride=st)
                want = want + beta * dw0.double()
            d, s = sched if sched else (None, None)
            plan = gw.prepare(x, dy, (kh, kw), (pad, pad), (1, 1), cfg, alpha=alpha, beta=beta,
                              dw=dw0.clone() if beta else None, sms=sms or (SMS if dry else None),
                              splits=s, direct=d, stride=(st, st))
            if dry:
                gw.gluon_wgrad_kernel.warmup(*plan.args, grid=plan.grid, **plan.meta)
                continue
            got = gw.launch(plan)
            torch.cuda.synchronize()
            worst = max(worst, rel_err(got, want))
        gsc.report_canary(i, worst)


# -- reference rows ---------------------------------------------------------------------
def cudnn_fn(x, dy, k, ks, pad, st):
    """cuDNN's weight gradient alone (output_mask False, True, False)."""
    w = torch.empty(k, x.shape[1], ks, ks, device=x.device, dtype=x.dtype).contiguous(
        memory_format=torch.channels_last)
    return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [st, st], [pad, pad], [1, 1], False,
                                                       [0, 0], 1, [False, True, False])[1]


def tridnn_fn(x, dy, k, ks, pad, st):
    """tridnn.convolution_backward_filter with get()'s first-ranked algorithm; (fn, dw, name)."""
    import tridnn
    from tridnn.algorithms import registry, selection
    from tridnn.algorithms.problem import ConvProblem
    from tridnn.types import TensorFormat

    handle = tridnn.Handle("cuda", find_cache=None)
    n, c, h, w = x.shape
    cd = tridnn.ConvolutionDescriptor(padding=(pad, pad), stride=(st, st), dilation=(1, 1), groups=1, nd=2,
                                      math_type=tridnn.MathType.DEFAULT)
    xd = tridnn.TensorDescriptor.packed((n, c, h, w), "bfloat16", TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((k, c, ks, ks), "bfloat16", TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    problem = ConvProblem("bwd_filter", xd, wd, yd, cd)
    ranked = [r for r in selection.get(handle, problem) if r.status == tridnn.Status.SUCCESS]
    algo = registry.by_enum("conv", "bwd_filter", "triton", ranked[0].algo)
    ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=x.device)
    dw = torch.empty(k, c, ks, ks, device=x.device, dtype=x.dtype).contiguous(memory_format=torch.channels_last)
    fn = lambda: tridnn.convolution_backward_filter(handle, 1.0, xd, x, yd, dy, cd, algo.enum, ws, 0.0, wd, dw)  # noqa: E731
    return fn, dw, algo.name


# -- the sweep ----------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="directory for gluon_wgrad.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build and compile for sm_90 only")
    ap.add_argument("--layers", default=DEFAULT_LAYERS, help="comma-separated subset of " + ",".join(LAYERS))
    ap.add_argument("--configs", default="", help="comma-separated indices into gluon_wgrad.CONFIGS (default all)")
    ap.add_argument("--model-only", action="store_true", help="time only the cost model's schedule per config")
    ap.add_argument("--narrow", action="store_true", help="also time 64-channel tiles where 128 fit")
    ap.add_argument("--no-tridnn", action="store_true", help="skip tridnn's current algorithm (its tuner)")
    ap.add_argument("--rep", type=int, default=15, help="milliseconds of graph replays per timing")
    ap.add_argument("--budget-s", type=float, default=85.0, help="stop starting new gluon timings after this")
    ap.add_argument("--tridnn-budget-s", type=float, default=105.0, help="stop starting tridnn rows after this")
    ap.add_argument("--canary-s", type=float, default=75.0, help="time limit of one canary child")
    ap.add_argument("--no-canary", action="store_true", help="skip the child-process trial runs")
    ap.add_argument("--canary", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dry_run:
        offline_driver()
    if a.canary is not None:
        canary([int(i) for i in a.canary.split(",") if i], a.dry_run)
        return

    from tridnn.cuda import gluon_wgrad as gw
    t0 = time.time()
    indices, layers = gsc.select(ap, a, len(gw.CONFIGS), LAYERS)
    dev = gsc.cudnn_setup(a.dry_run)

    status = ({i: ("ok", 0.0) for i in indices} if a.no_canary
              else gsc.run_canaries(__file__, indices, a.dry_run, a.canary_s))
    print(f"canaries ({time.time() - t0:.0f} s): " + ", ".join(
        f"{i}:{gw.name(gw.CONFIGS[i])}={status[i][0]}" for i in indices), flush=True)

    rows = []
    refs = {}
    for name in layers:
        n, c, k, h, w, ks, pad, st = LAYERS[name]
        oh, ow = out_size(h, w, ks, ks, pad, st)
        flop = gw.flops(n, c, k, oh, ow, ks, ks)
        x, dy = make(n, c, k, h, w, ks, ks, pad, dev, stride=st)
        ref = cudnn_us = None
        if not a.dry_run:
            fn = cudnn_fn(x, dy, k, ks, pad, st)
            ref = fn().float()
            cudnn_us = bench(fn, a.rep)
            rows.append(dict(layer=name, config="cudnn", us=cudnn_us, tflops=flop / cudnn_us * 1e-6, ratio=1.0,
                             vs_tridnn=None, err=0.0, useful=1.0, fill=1.0))
            print(f"{name:9s} cudnn {cudnn_us:8.1f} us {flop / cudnn_us * 1e-6:6.0f} TFLOP/s", flush=True)
            refs[name] = (ref, cudnn_us)
        dw = torch.empty(k, c, ks, ks, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
        ws = None
        for i in indices:
            cfg = gw.CONFIGS[i]
            if not applies(cfg, c, k, n, oh, ow, flat=gw.flat_ok((ks, ks), (pad, pad), (st, st)), narrow=a.narrow):
                continue
            programs = SMS * cfg.get("PER_SM", 1)
            variants, boxes = schedules(gw, cfg, n, c, k, oh, ow, ks, ks, programs)
            if a.model_only:
                variants = variants[:1]
            for vi, (d, s) in enumerate(variants):
                row = dict(layer=name, config=f"{gw.name(cfg)} [d{d} S{s}]" + (" model" if vi == 0 else ""),
                           us=None, tflops=None, ratio=None, vs_tridnn=None, err=None,
                           useful=round(useful(cfg, n, oh, ow), 3), shared=gw.shared_bytes(cfg))
                if status[i][0] != "ok":
                    row.update(note="canary " + status[i][0], fill=None)
                    rows.append(row)
                    break
                if time.time() - t0 > a.budget_s:
                    row.update(note="budget", fill=None)
                    rows.append(row)
                    continue
                try:
                    plan = gw.prepare(x, dy, (ks, ks), (pad, pad), (1, 1), cfg, dw=dw, splits=s, direct=d, ws=ws,
                                      sms=SMS if a.dry_run else None, stride=(st, st))
                    ws = plan.ws if plan.ws.numel() > 1 else ws
                    row["fill"] = round(fill(plan, boxes, plan.grid[0]), 3)
                    row["model_us"] = round(gw.schedule_cost(cfg, gw.num_tiles(cfg, k, c, ks * ks), boxes,
                                                             programs, plan.direct, plan.splits), 1)
                    if a.dry_run:
                        gw.gluon_wgrad_kernel.warmup(*plan.args, grid=plan.grid, **plan.meta)
                        if plan.finish_grid is not None:
                            gw.wgrad_finish_kernel.warmup(*plan.finish_args, grid=plan.finish_grid,
                                                          **plan.finish_meta)
                        row["note"] = "dry"
                    else:
                        gw.launch(plan)
                        torch.cuda.synchronize()
                        row["err"] = rel_err(dw, ref)
                        if row["err"] > 2e-2:
                            row["note"] = "BAD"
                        else:
                            us = bench(lambda: gw.launch(plan), a.rep)
                            row.update(us=us, tflops=flop / us * 1e-6, ratio=us / cudnn_us)
                except Exception as e:  # report and go on: one config must not end the sweep
                    row["note"] = gsc.error_note(e)
                rows.append(row)
                print(f"{name:9s} {row['config']:42s} " + (
                    f"{row['us']:8.1f} us {row['tflops']:6.0f} TFLOP/s x{row['ratio']:.2f} err {row['err']:.1e} "
                    f"(model {row.get('model_us')} us)" if row["us"] else row.get("note", "")), flush=True)

    # tridnn's current algorithm last: its tuner's first call compiles and times candidates
    for name in ([] if a.dry_run or a.no_tridnn else layers):
        n, c, k, h, w, ks, pad, st = LAYERS[name]
        oh, ow = out_size(h, w, ks, ks, pad, st)
        flop = gw.flops(n, c, k, oh, ow, ks, ks)
        ref, cudnn_us = refs[name]
        x, dy = make(n, c, k, h, w, ks, ks, pad, dev, stride=st)  # the same data (seed 0) as cuDNN's
        row = dict(layer=name, config="tridnn", us=None, tflops=None, ratio=None, vs_tridnn=None, err=None,
                   useful=1.0, fill=1.0)
        if time.time() - t0 > a.tridnn_budget_s:
            row["note"] = "budget"
            rows.insert(next(j for j, r in enumerate(rows) if r["layer"] == name) + 1, row)
            continue
        try:
            fn, dwt, algo = tridnn_fn(x, dy, k, ks, pad, st)
            fn()
            torch.cuda.synchronize()
            row.update(config=f"tridnn {algo}", err=rel_err(dwt, ref))
            us = bench(fn, a.rep)
            row.update(us=us, tflops=flop / us * 1e-6, ratio=us / cudnn_us, vs_tridnn=1.0)
            for r in rows:
                if r["layer"] == name and r["us"] and not r["config"].startswith("cudnn"):
                    r["vs_tridnn"] = r["us"] / us
            print(f"{name:9s} {row['config']} {us:8.1f} us x{us / cudnn_us:.2f} err {row['err']:.1e} "
                  f"({time.time() - t0:.0f} s)", flush=True)
        except Exception as e:  # report, keep going
            row["note"] = f"{type(e).__name__}: {e}"[:100]
        rows.insert(next(j for j, r in enumerate(rows) if r["layer"] == name) + 1, row)

    print(f"\ntotal {time.time() - t0:.0f} s\n")
    print(f"{'layer':9s} {'config':42s} {'us':>8s} {'TFLOP/s':>8s} {'/cudnn':>7s} {'/tridnn':>7s} {'err':>8s} "
          f"{'useful':>6s} {'fill':>5s} {'model':>6s} note")
    for r in rows:
        us = f"{r['us']:8.1f}" if r["us"] else f"{'-':>8s}"
        tf = f"{r['tflops']:8.0f}" if r["tflops"] else f"{'-':>8s}"
        ratio = f"{r['ratio']:7.2f}" if r["ratio"] else f"{'-':>7s}"
        vt = f"{r['vs_tridnn']:7.2f}" if r.get("vs_tridnn") else f"{'-':>7s}"
        err = f"{r['err']:8.1e}" if r["err"] is not None else f"{'-':>8s}"
        fl = f"{r['fill']:5.2f}" if r.get("fill") is not None else f"{'-':>5s}"
        mu = f"{r['model_us']:6.1f}" if r.get("model_us") is not None else f"{'-':>6s}"
        print(f"{r['layer']:9s} {r['config']:42s} {us} {tf} {ratio} {vt} {err} {r['useful']:6.2f} {fl} {mu} "
              f"{r.get('note', '')}")
    gsc.write_json(a.out, "gluon_wgrad.json", dict(
        dry_run=a.dry_run, canaries={gw.name(gw.CONFIGS[i]): status[i][0] for i in indices}, rows=rows,
        seconds=time.time() - t0))


if __name__ == "__main__":
    main()
