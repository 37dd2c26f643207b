"""Issue 5 group-norm sweep: 32-group norm forward and backward on 64x256x56x56 bfloat16
(NCHW and NHWC; --more adds 64x512x28x28 and 64x128x112x112), every design of
cuda/norms.py (module switches flipped for the call) against PyTorch, in one process on
one H200 (< 90 s without --more).

Designs: "coop" (session 34, cuda/group_norm_coop.py, off by default since session 35's run
of this sweep: a sample's pixels in slices held by programs that meet at a per-sample barrier;
its tickets, its two-launch form and its tiles as variants), "resident" (GROUP_NORM_RESIDENT: a program
holds its whole group in registers, x and dy read once; the NCHW default), the old defaults
(GROUP_NORM_RESIDENT "never": split forward, fused NCHW / split NHWC backward) and the
other of fused / split, plus resident tile settings (warps through GN_RESIDENT_DATA_REGS,
the bfloat16 narrow hold off, channels-last groups a program).

TB/s counts minimal bytes: forward x read and y written once; backward x and dy read and
dx written once (parameters and statistics are negligible). A copy of x is timed first:
``%copy`` is each row's share of it (issue 5 asks for >= 85%). Each variant's outputs
are compared with PyTorch's before it is timed (``err``: max |tridnn - torch| /
max(1, max |torch|) over y, mean and 1/std, or over dx, dscale and dbias). Times are
CUDA-graph replays timed with triton.testing.do_bench (median), the timers of
bench_gpu_layers.

    PYTHONPATH=src python benchmarks/sweep_group_norm.py [--out DIR] [--only SUBSTRING] [--more]
    PYTHONPATH=src python benchmarks/sweep_group_norm.py --dry-run   # CPU, interpreter, tiny shapes
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

DRY_RUN = "--dry-run" in sys.argv
if DRY_RUN:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import bench_gpu_layers as bgl  # noqa: E402  (graph timer, switches, copy bandwidth, rel_err)
from tridnn.cuda import group_norm_coop, norms  # noqa: E402

GROUPS, EPS = 32, 1e-5
OLD = [("GROUP_NORM_RESIDENT", "never")]  # the defaults before the resident design
RES = [("GROUP_NORM_RESIDENT", "always")]
# (label, [(norms switch, value), ...]) per direction and layout; the first row is the default.
# sm_90 at 64x256x56x56 bf16 (compile probe; registers, programs an SM, instructions):
# NCHW forward 16 warps 64 (2, 872), 8 warps 115 (2, 1600), 32 warps 59 (1, 552), float32
# hold 32 warps 51 (1, 456); backward 32 warps 63 (1, 712), 16 warps 128 (1, 1192);
# NHWC (pixel stride compiled in) forward 2 groups 16 warps 122 (1), 2 groups 32 warps 64
# + 18 spill instructions (1), 1 group 8 warps 124 (2), 1 group 16 warps 90 (1); backward
# 1 group 32 warps 64 (1), 16 warps 128 (1). No spills but where said. L2 prefetch of the
# group one wave ahead (GN_RESIDENT_PREFETCH programs an SM ahead): forward 8 warps 119
# registers (2), 16 warps 64 (2, 928 instructions); backward 63 (1, 760). H200 14:31 UTC
# (NCHW): forward 16 warps 3.17 TB/s, 8 warps 3.28 (now the default), backward 2.57.
DR64 = [("GN_RESIDENT_DATA_REGS", 64)]
# group_norm_coop's switches (session 34: a sample's slices meeting at a barrier, for
# channels-last views; off by default since session 35; the rows turn it on or off)
NO_COOP = [("coop", "GROUP_NORM_COOP", "never")]
COOP = [("coop", "GROUP_NORM_COOP", "channels_last")]


def coop(name, value):
    return ("coop", name, value)


# the cooperative design and its variants, both directions
COOP_ROWS = [("coop 64KB 8w", COOP),
             ("coop no tickets", COOP + [coop("COOP_TICKETS", False)]),
             ("coop two launches", COOP + [coop("COOP_BARRIER", False)]),
             ("coop backoff 100ns", COOP + [coop("COOP_BACKOFF_NS", 100)]),
             ("coop backoff 500ns", COOP + [coop("COOP_BACKOFF_NS", 500)]),
             ("coop 32KB 4w", COOP + [coop("COOP_BYTES", 32768), coop("COOP_WARPS", 4)]),
             ("coop 32KB 8w", COOP + [coop("COOP_BYTES", 32768)]),
             ("coop 128KB 16w", COOP + [coop("COOP_BYTES", 131072), coop("COOP_WARPS", 16)])]


def switched(settings, fn):
    """fn with norms' (name, value) and group_norm_coop's ("coop", name, value) switches flipped."""
    fn = bgl.switched_all(norms, [s for s in settings if len(s) == 2], fn)
    return bgl.switched_all(group_norm_coop, [s[1:] for s in settings if len(s) == 3], fn)


VARIANTS = {
    ("fwd", "NCHW"): [("default (resident 8w)", []),
                      ("resident 16 warps", RES + [("GN_RESIDENT_DATA_REGS", 32)]),
                      ("resident 32 warps", RES + [("GN_RESIDENT_DATA_REGS", 16)]),
                      ("resident f32 hold 32w", RES + [("GN_RESIDENT_NARROW", False), ("GN_RESIDENT_DATA_REGS", 32)]),
                      ("resident 8w L2 prefetch 2/SM", RES + [("GN_RESIDENT_PREFETCH", 2)]),
                      ("resident 16w L2 prefetch 2/SM", RES + [("GN_RESIDENT_PREFETCH", 2),
                                                              ("GN_RESIDENT_DATA_REGS", 32)]),
                      ("old default (split)", OLD),
                      ("fused", OLD + [("GROUP_NORM_SPLIT", "never")])],
    ("bwd", "NCHW"): [("default (resident 32w)", []),
                      ("resident 16 warps", RES + DR64),
                      ("resident L2 prefetch 1/SM", RES + [("GN_RESIDENT_PREFETCH", 1)]),
                      ("resident L2 prefetch 2/SM", RES + [("GN_RESIDENT_PREFETCH", 2)]),
                      ("default, separate dscale/dbias sums", [("PARAM_SUMS", "separate")]),
                      ("old default (fused)", OLD),
                      ("split", OLD + [("GROUP_NORM_SPLIT", "always")])],
    ("fwd", "NHWC"): [("default", [])] + COOP_ROWS + [
                      ("coop 64KB 8w no maxnreg", COOP + [coop("COOP_MAXNREG", None)]),
                      ("resident 2g 16w (no coop)", NO_COOP),
                      ("split", NO_COOP + [("GROUP_NORM_RESIDENT", "never")]),
                      ("resident 1 group 8w", NO_COOP + RES + DR64 + [("GN_RESIDENT_GPP", 1)]),
                      ("fused", NO_COOP + [("GROUP_NORM_RESIDENT", "never"), ("GROUP_NORM_SPLIT", "never")])],
    ("bwd", "NHWC"): [("default", [])] + COOP_ROWS + [
                      ("split (no coop)", NO_COOP),
                      ("resident 1 group 32w", NO_COOP + RES),
                      ("fused", NO_COOP + [("GROUP_NORM_SPLIT", "never")])],
}
MORE_VARIANTS = {  # the other shapes (--more): the default, the old default, resident and torch
    ("fwd", "NCHW"): [("default", []), ("old default", OLD)],
    ("bwd", "NCHW"): [("default", []), ("old default", OLD)],
    ("fwd", "NHWC"): [("default", []), ("coop", COOP), ("no coop", NO_COOP), ("resident", NO_COOP + RES)],
    ("bwd", "NHWC"): [("default", []), ("coop", COOP), ("no coop", NO_COOP), ("resident", NO_COOP + RES)],
}
MORE_SHAPES = [(64, 512, 28, 28), (64, 128, 112, 112)]


def problems(shape, layout):
    """(direction, tridnn call, torch call, minimal bytes, tridnn outputs, torch outputs)."""
    dt, dev = bgl.DT, bgl.DEVICE
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    g = torch.Generator(device=dev).manual_seed(0)

    def new(s):
        return torch.randn(s, device=dev, generator=g).to(dt).contiguous(memory_format=fmt)
    N, C, H, W = shape
    x, dy = new(shape), new(shape)
    x.mul_(2.0).add_(1.0)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    # parameters that bf16 holds exactly: PyTorch (which wants the data's dtype) sees the same values
    w = torch.randn(C, device=dev, generator=g).to(dt).float()
    b = torch.randn(C, device=dev, generator=g).to(dt).float()
    mean, inv = torch.empty(N, GROUPS, device=dev), torch.empty(N, GROUPS, device=dev)
    # the backward's saved statistics, its own (the forward rows refill theirs; an --only
    # without them left these uninitialized for the backward rows)
    bmean, binv = torch.empty_like(mean), torch.empty_like(inv)
    norms.group_norm_forward(x, torch.empty_like(x), w, b, bmean, binv, GROUPS, EPS)
    dw, db = torch.empty_like(w), torch.empty_like(w)
    tw, tb = w.to(dt), b.to(dt)
    # the reference values from aten's kernels on contiguous copies (they take no channels-last
    # input; the timed torch calls are F.group_norm and its autograd on the tensors as they are)
    xc, dyc = x.contiguous(), dy.contiguous()
    ref_fwd = torch.ops.aten.native_group_norm(xc, tw, tb, N, C, H * W, GROUPS, EPS)
    t_mean, t_rstd = ref_fwd[1].float(), ref_fwd[2].float()
    ref_bwd = torch.ops.aten.native_group_norm_backward(dyc, xc, ref_fwd[1], ref_fwd[2], tw, N, C, H * W, GROUPS,
                                                        [True, True, True])
    xg = x.detach().clone().requires_grad_()
    wg, bg = tw.detach().clone().requires_grad_(), tb.detach().clone().requires_grad_()
    gout = torch.nn.functional.group_norm(xg, GROUPS, wg, bg, EPS)
    n = bgl.nbytes
    return [
        ("fwd", lambda: norms.group_norm_forward(x, y, w, b, mean, inv, GROUPS, EPS, 1.0, 0.0),
         lambda: torch.nn.functional.group_norm(x, GROUPS, tw, tb, EPS), n(x, y), (y, mean, inv),
         (ref_fwd[0], t_mean.view(N, GROUPS), t_rstd.view(N, GROUPS))),
        ("bwd", lambda: norms.group_norm_backward(x, dy, dx, w, dw, db, bmean, binv, GROUPS, 1.0, 0.0),
         lambda: torch.autograd.grad(gout, (xg, wg, bg), dy, retain_graph=True), n(x, dy, dx), (dx, dw, db),
         ref_bwd)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes: only checks it runs")
    ap.add_argument("--out", help="directory for sweep_group_norm.json")
    ap.add_argument("--only", default="",
                    help="rows whose 'direction layout shape variant' contains this (or one of a|b|c)")
    ap.add_argument("--more", action="store_true", help="also 64x512x28x28 and 64x128x112x112 (past 90 s)")
    args = ap.parse_args()
    timer = bgl.wall_time if DRY_RUN else bgl.graph_time
    t_start = time.time()
    copy = float("nan") if DRY_RUN else bgl.copy_bandwidth()
    print(f"copy {copy:.3f} TB/s (85%: {0.85 * copy:.3f}); {bgl.DT} on {bgl.DEVICE}", flush=True)
    if DRY_RUN:  # interpreter: tiny shapes (a group of 4 channels x 35 positions; 2 x 6 x 15)
        shapes = [((2, 128, 5, 7), VARIANTS)]
    else:
        shapes = [(bgl.SPATIAL, VARIANTS)] + ([(s, MORE_VARIANTS) for s in MORE_SHAPES] if args.more else [])
    rows = []
    for shape, table in shapes:
        for layout in ("NCHW", "NHWC"):
            for direction, tri, ref, moved, got, want in problems(shape, layout):
                tag = f"{direction} {layout} {'x'.join(map(str, shape))}"
                variants = [(lab, s) for lab, s in table[(direction, layout)]
                            if any(o in f"{tag} {lab}" for o in args.only.split("|"))]
                if not variants:
                    continue
                try:
                    ref_ms = timer(ref, "torch")
                except Exception as exc:  # noqa: BLE001 - the rows still run
                    print(f"  torch {tag} failed: {exc}", flush=True)
                    ref_ms = float("nan")
                for label, settings in variants:
                    fn = switched(settings, tri)
                    row = dict(direction=direction, layout=layout, shape=list(shape), variant=label,
                               settings=[list(map(str, s)) for s in settings], bytes=moved)
                    try:
                        for t in got:
                            t.fill_(float("nan"))
                        fn()
                        row["errs"] = [bgl.rel_err(a, b) for a, b in zip(got, want)]
                        row["err"] = max(row["errs"])
                        row["ms"] = timer(fn, label)
                    except Exception as exc:  # noqa: BLE001 - a broken variant is reported, not fatal
                        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                        print(f"{tag:26s} {label:26s} FAILED {row['error']}", flush=True)
                        rows.append(row)
                        continue
                    row["tbs"] = moved / row["ms"] / 1e9
                    row["copy_share"] = row["tbs"] / copy
                    row["torch_ms"] = ref_ms
                    row["torch_tbs"] = moved / ref_ms / 1e9
                    print(f"{tag:26s} {label:26s} {row['ms'] * 1e3:8.1f} us {row['tbs']:6.3f} TB/s "
                          f"err {row['err']:.2e}  ({time.time() - t_start:.0f} s)", flush=True)
                    rows.append(row)
    # the table, last
    print(f"\ncopy {copy:.3f} TB/s, 85% line {0.85 * copy:.3f} TB/s; minimal bytes; torch on the same tensors")
    print(f"{'problem':26s} {'variant':26s} {'us':>8s} {'TB/s':>6s} {'%copy':>6s} {'torch us':>9s} "
          f"{'torch TB/s':>10s} {'vs torch':>8s} {'err':>9s}")
    for r in rows:
        tag = f"{r['direction']} {r['layout']} {'x'.join(map(str, r['shape']))}"
        if "error" in r:
            print(f"{tag:26s} {r['variant']:26s} FAILED {r['error']}")
            continue
        print(f"{tag:26s} {r['variant']:26s} {r['ms'] * 1e3:8.1f} {r['tbs']:6.3f} {100 * r['copy_share']:5.1f}% "
              f"{r['torch_ms'] * 1e3:9.1f} {r['torch_tbs']:10.3f} {r['torch_ms'] / r['ms']:7.2f}x {r['err']:9.2e}")
    print(f"({time.time() - t_start:.0f} s)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sweep_group_norm.json"), "w") as f:
            json.dump(dict(copy_tbs=copy, dtype=str(bgl.DT), device=bgl.DEVICE, torch=torch.__version__,
                           date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), rows=rows), f, indent=1,
                      default=str)


if __name__ == "__main__":
    main()
