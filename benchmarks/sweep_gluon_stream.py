"""Gluon TMA streaming reductions (tridnn.cuda.gluon_stream) against copy bandwidth (issue 5).

    PYTHONPATH=src python benchmarks/sweep_gluon_stream.py --out results/   # one H200, <= 100 s
    PYTHONPATH=src python benchmarks/sweep_gluon_stream.py --dry-run        # CPU: sm_90 compiles only

Problem: x 64x256x56x56 bfloat16 channels-last (102.8 MB). Rows (TB/s = minimal bytes / time:
x read once + outputs written once; ``moved`` = the bytes the design itself moves at least,
so moved/us shows how close a multi-pass design runs to DRAM speed):
  copy              dst.copy_(x), the ceiling (2|x|)
  torch sum_hw      x.sum((2, 3)) / x.mean((2, 3)) on channels_last; torch sum_nhw: x.sum((0, 2, 3))
  tridnn sum_hw     tensor_ops.reduce_tensor (the current Triton kernel, "reduce sum over H*W")
  torch bn fwd      F.batch_norm training forward (context), tridnn bn fwd: batchnorm.py's
                    statistics + apply passes (|x| in, |y| out: minimal 2|x|, moved 3|x|)
  <config> sum_hw   gluon_stream per-image sums + finish kernel ([N, C] bf16); "kernel" = without it
  <config> stats    batch statistics over N*H*W (shifted sums and squares) + finish (mean, var, coef)
  <config> apply    y = a[c] * x + b[c] alone (2|x|)
  <config> bn fwd   stats + finish + apply, apply in memory order ("fwd") or each program from its
                    last box ("L2": what the statistics pass read last is read first)
Every result is checked against float64 first (> 2e-2 relative: BAD, not timed). Times:
medians of CUDA-graph replays (triton.testing.do_bench_cudagraph) over --rotate copies of
the tensors used in turn, so no call finds its input in the 50 MB L2 from the call before.

A Gluon kernel that deadlocks would hang the process, so every config first runs on small
problems in child processes ("canary", --jobs in parallel, 60 s limit each); a config that
hangs, crashes or disagrees is reported and left out of the timed sweep.
--dry-run (CPU): builds every descriptor and launch, compiles every kernel for sm_90 through
the kernels' own JIT binding (an offline driver stands in for CUDA), prints the table empty.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gluon_sweep_common as gsc  # noqa: E402  (benchmarks/, the script's own folder)
from gluon_sweep_common import offline_driver  # noqa: E402

SHAPE = (64, 256, 56, 56)
# ragged boxes (221 pixels an image, 495 in all) and columns (200 of a 256-wide box); the
# boxes of the timed problem, so the canaries' compiles serve the sweep (the other widths
# and dtypes: tests/test_gluon_stream.py --gpu)
CANARY = [(3, 256, 13, 17), (5, 200, 9, 11)]
SMS = 132


def rel_err(got, want) -> float:
    got, want = got.double().reshape(want.shape), want.double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def make(shape, dev, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    n, c, h, w = shape
    # |mean| >> std in some channels: the shifted sums must keep the variance's digits
    x = torch.randn(shape, generator=g) + 4.0 * torch.rand(1, c, 1, 1, generator=g) * (torch.arange(c) % 3 == 0).view(
        1, c, 1, 1)
    return x.to(dtype).to(dev).contiguous(memory_format=torch.channels_last)


def references(x, scale, bias, eps=1e-5):
    """float64 sums per image, mean and biased variance over N*H*W, and y of batch norm."""
    x64 = x.double()
    mean, var = x64.mean((0, 2, 3)), x64.var((0, 2, 3), unbiased=False)
    c = x.shape[1]
    a = scale.double() / torch.sqrt(var + eps)
    y = x64 * a.view(1, c, 1, 1) + (bias.double() - mean * a).view(1, c, 1, 1)
    return dict(sum_hw=x64.sum((2, 3)), mean=mean, var=var, y=y)


def bn_err(y, m, v, ref) -> float:
    return max(rel_err(m, ref["mean"]), rel_err(v, ref["var"]), rel_err(y, ref["y"]))


def _warm(kernel, grid, args, meta):
    kernel.warmup(*args, grid=grid, **meta)


def dry_compile(pp=None, pa=None):
    """--dry-run: compile what ``launch`` / ``launch_apply`` would run, for sm_90."""
    from tridnn.cuda import gluon_stream as gs
    if pp is not None:
        _warm(gs.stream_sums_kernel, pp["grid"], pp["args"], pp["meta"])
        _warm(gs._finish_kernel, pp["fin_grid"], pp["fin_args"], pp["fin_meta"])
    if pa is not None:
        _warm(gs.stream_apply_kernel, pa["grid"], pa["args"], pa["meta"])


# -- canary (child process) ---------------------------------------------------------------
def canary(indices, dry):
    """Every variant of each config on the CANARY shapes, on all SMs and on 3 programs (many
    units each: the ring wraps across units); one flushed line per config."""
    from tridnn.cuda import gluon_stream as gs
    dev = "cpu" if dry else "cuda"
    for i in indices:
        cfg = gs.CONFIGS[i]
        worst = 0.0
        for k, shape in enumerate(CANARY):
            x = make(shape, dev, seed=k)
            c = shape[1]
            scale = torch.rand(c, device=dev) + 0.5
            bias = torch.randn(c, device=dev)
            ref = None if dry else references(x, scale, bias)
            for sms in (SMS if dry else None, 3):
                if gs.why_not(x, True) is None:
                    pp = gs.prepare(x, per_image=True, cfg=cfg, sms=sms)
                    if dry:
                        dry_compile(pp)
                    else:
                        gs.launch(pp)
                        torch.cuda.synchronize()
                        worst = max(worst, rel_err(pp["out"], ref["sum_hw"]))
                if gs.why_not(x, False) is None:
                    for reverse in (False, True):
                        ps, pa = gs.prepare_batch_norm(x, scale, bias, cfg=cfg, reverse=reverse, sms=sms)
                        if dry:
                            dry_compile(ps, pa)
                            continue
                        y, m, v = gs.launch_batch_norm(ps, pa)
                        torch.cuda.synchronize()
                        worst = max(worst, bn_err(y, m, v, ref))
        gsc.report_canary(i, worst)


# -- timing -------------------------------------------------------------------------------
def bench(fns, rep):
    """Median microseconds of fns[0], fns[1], ... called in turn (CUDA-graph replays)."""
    state = [0]

    def call():
        fns[state[0] % len(fns)]()
        state[0] += 1
    return gsc.bench(call, rep)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="directory for gluon_stream.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build and compile for sm_90 only")
    ap.add_argument("--configs", default="", help="comma-separated indices into gluon_stream.CONFIGS (default all)")
    ap.add_argument("--rep", type=int, default=15, help="milliseconds of graph replays per timing")
    ap.add_argument("--rotate", type=int, default=3, help="copies of the tensors used in turn (L2 cold)")
    ap.add_argument("--budget-s", type=float, default=85.0, help="stop starting new configs after this")
    ap.add_argument("--jobs", type=int, default=min(6, os.cpu_count() or 1), help="canary children in parallel")
    ap.add_argument("--no-canary", action="store_true", help="skip the child-process trial runs")
    ap.add_argument("--canary", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dry_run:
        os.environ.pop("TRITON_INTERPRET", None)
        offline_driver()
    if a.canary is not None:
        canary([int(i) for i in a.canary.split(",") if i], a.dry_run)
        return

    from tridnn.cuda import gluon_stream as gs
    t0 = time.time()
    indices = [int(i) for i in a.configs.split(",") if i] or list(range(len(gs.CONFIGS)))
    dry = a.dry_run
    dev = "cpu" if dry else "cuda"
    if not dry:
        print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    status = {i: ("ok", 0.0) for i in indices} if a.no_canary else gsc.run_canaries(__file__, indices, dry, jobs=a.jobs)
    print(f"canaries ({time.time() - t0:.0f} s): " + ", ".join(
        f"{gs.name(gs.CONFIGS[i])}={status[i][0]}" for i in indices), flush=True)

    shape = SHAPE  # the dry run too: it compiles the timed problem's exact kernels (nothing runs)
    n, c, h, w = shape
    k = 1 if dry else max(1, a.rotate)
    x0 = make(shape, dev)
    xs = [x0] + [x0.clone(memory_format=torch.channels_last) for _ in range(k - 1)]
    ys = [torch.empty_like(x0, memory_format=torch.channels_last) for _ in range(k)]
    scale = torch.rand(c, device=dev) + 0.5
    bias = torch.randn(c, device=dev)
    ref = None if dry else references(x0, scale, bias)
    X = x0.numel() * x0.element_size()
    rows = []

    def row(variant, config, fns, minimal, moved, check=None, note=""):
        r = dict(variant=variant, config=config, us=None, tbs=None, moved_tbs=None, err=None, note=note)
        if dry:
            r["note"] = note or "dry"
        else:
            try:
                if check is not None:
                    r["err"] = check()
                if r["err"] is not None and r["err"] > 2e-2:
                    r["note"] = "BAD"
                else:
                    us = bench(fns, a.rep)
                    r.update(us=us, tbs=minimal / us * 1e-6, moved_tbs=moved / us * 1e-6)
            except Exception as e:  # noqa: BLE001 - report and go on
                r["note"] = gsc.error_note(e)
        rows.append(r)
        print(f"{variant:16s} {config:20s} " + (f"{r['us']:8.1f} us {r['tbs']:5.2f} TB/s (moved {r['moved_tbs']:5.2f})"
              + (f" err {r['err']:.1e}" if r["err"] is not None else "") if r["us"] else r["note"]), flush=True)

    # -- baselines -----------------------------------------------------------------------
    if not dry:
        from tridnn.cuda import batchnorm, tensor_ops
        red = [torch.empty((n, c, 1, 1), device=dev, dtype=x0.dtype) for _ in range(k)]
        row("copy", "torch", [lambda i=i: ys[i].copy_(xs[i]) for i in range(k)], 2 * X, 2 * X,
            check=lambda: rel_err(ys[0].copy_(xs[0]), x0))
        row("sum_hw", "torch sum", [lambda i=i: xs[i].sum((2, 3)) for i in range(k)], X, X,
            check=lambda: rel_err(x0.sum((2, 3)), ref["sum_hw"]))
        row("sum_hw", "torch mean", [lambda i=i: xs[i].mean((2, 3)) for i in range(k)], X, X,
            check=lambda: rel_err(x0.mean((2, 3)) * (h * w), ref["sum_hw"]))
        row("sum_nhw", "torch sum", [lambda i=i: xs[i].sum((0, 2, 3)) for i in range(k)], X, X,
            check=lambda: rel_err(x0.sum((0, 2, 3)), ref["sum_hw"].sum(0)))
        row("stats", "torch var_mean", [lambda i=i: torch.var_mean(xs[i], (0, 2, 3), correction=0)
                                        for i in range(k)], X, X,
            check=lambda: rel_err(torch.var_mean(x0, (0, 2, 3), correction=0)[0], ref["var"]))

        def tri_reduce(i):
            tensor_ops.reduce_tensor(xs[i], red[i], None, None, 0, 1.0, 0.0, False)
            return red[i]
        row("sum_hw", "tridnn reduce", [lambda i=i: tri_reduce(i) for i in range(k)], X, X,
            check=lambda: rel_err(tri_reduce(0).view(n, c), ref["sum_hw"]))
        rm, rv = torch.zeros(c, device=dev), torch.ones(c, device=dev)
        row("bn fwd", "torch", [lambda i=i: F.batch_norm(xs[i], rm, rv, scale, bias, training=True, momentum=0.1,
                                                         eps=1e-5) for i in range(k)], 2 * X, 2 * X,
            check=lambda: rel_err(F.batch_norm(x0, rm.clone(), rv.clone(), scale, bias, training=True, eps=1e-5),
                                  ref["y"]))
        w4, b4 = scale.view(1, c, 1, 1), bias.view(1, c, 1, 1)
        rm4, rv4 = torch.zeros(1, c, 1, 1, device=dev), torch.ones(1, c, 1, 1, device=dev)
        sm4, si4 = torch.empty(1, c, 1, 1, device=dev), torch.empty(1, c, 1, 1, device=dev)

        def tri_bn(i):
            batchnorm.batch_norm_forward_training(xs[i], None, ys[i], w4, b4, rm4, rv4, sm4, si4, 1, 0.1, 1e-5, 0,
                                                  1.0, 0.0)
            return ys[i]
        row("bn fwd", "tridnn batchnorm", [lambda i=i: tri_bn(i) for i in range(k)], 2 * X, 3 * X,
            check=lambda: rel_err(tri_bn(0), ref["y"]))

    # -- the Gluon configs ---------------------------------------------------------------
    for i in indices:
        cfg = gs.CONFIGS[i]
        cname = gs.name(cfg)
        if status[i][0] != "ok":
            rows.append(dict(variant="all", config=cname, us=None, tbs=None, moved_tbs=None, err=None,
                             note="canary " + status[i][0]))
            continue
        if time.time() - t0 > a.budget_s:
            rows.append(dict(variant="all", config=cname, us=None, tbs=None, moved_tbs=None, err=None, note="budget"))
            continue
        try:
            sms = SMS if dry else None
            pps = [gs.prepare(xs[j], per_image=True, cfg=cfg, sms=sms) for j in range(k)]
            bns_fwd = [gs.prepare_batch_norm(xs[j], scale, bias, cfg=cfg, y=ys[j], reverse=False, sms=sms)
                       for j in range(k)]
            bns_rev = [gs.prepare_batch_norm(xs[j], scale, bias, cfg=cfg, y=ys[j], reverse=True, sms=sms)
                       for j in range(k)]
        except Exception as e:  # noqa: BLE001
            rows.append(dict(variant="all", config=cname, us=None, tbs=None, moved_tbs=None, err=None,
                             note=f"{type(e).__name__}: {str(e)[:80]}"))
            continue
        if dry:
            dry_compile(pps[0])
            dry_compile(*bns_fwd[0])
            dry_compile(*bns_rev[0])
        out_bytes = n * c * x0.element_size()
        row("sum_hw", cname, [lambda p=p: gs.launch(p) for p in pps], X + out_bytes, X + out_bytes,
            check=lambda: (gs.launch(pps[0]), rel_err(pps[0]["out"], ref["sum_hw"]))[1])
        row("sum_hw kernel", cname, [lambda p=p: gs.launch(p, finish=False) for p in pps], X, X)
        row("stats", cname, [lambda b=b: gs.launch(b[0]) for b in bns_fwd], X, X,
            check=lambda: (gs.launch(bns_fwd[0][0]), max(rel_err(bns_fwd[0][0]["out"][0], ref["mean"]),
                                                          rel_err(bns_fwd[0][0]["out2"][0], ref["var"])))[1])
        row("apply", cname, [lambda b=b: gs.launch_apply(b[1]) for b in bns_fwd], 2 * X, 2 * X)
        row("bn fwd", cname + " fwd", [lambda b=b: gs.launch_batch_norm(*b) for b in bns_fwd], 2 * X, 3 * X,
            check=lambda: bn_err(*gs.launch_batch_norm(*bns_fwd[0]), ref))
        row("bn fwd", cname + " L2", [lambda b=b: gs.launch_batch_norm(*b) for b in bns_rev], 2 * X, 3 * X,
            check=lambda: bn_err(*gs.launch_batch_norm(*bns_rev[0]), ref))

    print(f"\ntotal {time.time() - t0:.0f} s  (x {X / 1e6:.1f} MB, rotate {k})\n")
    print(f"{'variant':16s} {'config':24s} {'us':>8s} {'TB/s':>6s} {'moved':>6s} {'err':>8s} note")
    for r in rows:
        us = f"{r['us']:8.1f}" if r["us"] else f"{'-':>8s}"
        tb = f"{r['tbs']:6.2f}" if r["tbs"] else f"{'-':>6s}"
        mv = f"{r['moved_tbs']:6.2f}" if r["moved_tbs"] else f"{'-':>6s}"
        err = f"{r['err']:8.1e}" if r["err"] is not None else f"{'-':>8s}"
        print(f"{r['variant']:16s} {r['config']:24s} {us} {tb} {mv} {err} {r.get('note', '')}")
    gsc.write_json(a.out, "gluon_stream.json", dict(
        dry_run=dry, shape=shape, rotate=k, canaries={gs.name(gs.CONFIGS[i]): status[i][0] for i in indices},
        rows=rows, seconds=time.time() - t0))


if __name__ == "__main__":
    main()
