"""Issue 5 sweep: layer norm, dropout and the H*W sum, each module switch's variants
against the default design and PyTorch, on one H200 in about a minute.

Problems: layer norm (and RMS norm, for comparison) forward and backward on 32768 x 4096
bfloat16 rows (float32 scale and bias, as bench_gpu_layers.py); dropout p = 0.1 forward
and backward and the sum over H, W on 64x256x56x56 bfloat16 in NCHW and NHWC. TB/s counts
minimal bytes (each input read once, each output written once; dropout's uint8 mask
included). First a copy (torch clone of the 64x256x56x56 tensor) sets the 85% line.

Per row: the variant's device time (a CUDA graph replayed by triton.testing.do_bench,
median), TB/s, PyTorch's TB/s, tridnn/torch time, ``err`` (max |tridnn - torch| /
max(1, max |torch|)) and ``vs default`` (the same measure against the default design's
output: 0 where a variant claims the same bits; dropout: the number of mask bytes that
differ, which must be 0).

    PYTHONPATH=src python benchmarks/sweep_layers_c1.py [--out DIR] [--only TEXT]
    PYTHONPATH=src python benchmarks/sweep_layers_c1.py --dry-run   # CPU, interpreter, tiny float32
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
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

import tridnn  # noqa: E402
from bench_gpu_layers import diff, graph_time, nbytes, row_tensors, snapshot, switched_all, wall_time  # noqa: E402
from tridnn.cuda import dropout, norms, tensor_ops  # noqa: E402

if DRY_RUN:
    DEVICE, DT, SPATIAL, ROWS = "cpu", torch.float32, (2, 3, 33, 36), (8, 2048)  # H*W = 1188: the ahead sum applies
else:
    DEVICE, DT, SPATIAL, ROWS = "cuda", torch.bfloat16, (64, 256, 56, 56), (32768, 4096)

# (label, module, settings); the first of each list is the default design (no settings)
LN_FWD = [("default", norms, ()),
          ("ahead 4/SM, params from L1", norms, (("ROW_FORWARD", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 4))),
          ("ahead 3/SM, params from L1", norms, (("ROW_FORWARD", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 3))),
          ("ahead 2/SM, params held", norms, (("ROW_FORWARD", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 2),
                                              ("AHEAD_HOLD_PARAMS", True))),
          ("ahead 3/SM, params held", norms, (("ROW_FORWARD", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 3),
                                              ("AHEAD_HOLD_PARAMS", True)))]
RMS_FWD = [("default", norms, ()),
           ("ahead 4/SM, params from L1", norms, (("ROW_FORWARD", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 4))),
           ("ahead 5/SM, params held", norms, (("ROW_FORWARD", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 5),
                                               ("AHEAD_HOLD_PARAMS", True)))]
LN_BWD = [("default", norms, ()),
          ("joint sums", norms, (("PARAM_SUMS", "joint"),)),
          ("joint sums, ahead stats, pair sum", norms, (("PARAM_SUMS", "joint"), ("BACKWARD_AHEAD_STATS", True),
                                                        ("BACKWARD_PAIR_SUM", True))),
          ("ahead stats, pair sum", norms, (("BACKWARD_AHEAD_STATS", True), ("BACKWARD_PAIR_SUM", True)))]
RMS_BWD = [("default", norms, ()),
           ("joint sums, ahead stats", norms, (("PARAM_SUMS", "joint"), ("BACKWARD_AHEAD_STATS", True)))]
DROP_NCHW = [("default", dropout, ()),
             ("vec8 2048/4 warps", dropout, (("FLAT_KERNEL", "vec8"), ("VEC8_BLOCK", 2048), ("VEC8_WARPS", 4))),
             ("vec8 1024/4 warps", dropout, (("FLAT_KERNEL", "vec8"), ("VEC8_BLOCK", 1024), ("VEC8_WARPS", 4))),
             ("vec8 4096/8 warps", dropout, (("FLAT_KERNEL", "vec8"), ("VEC8_BLOCK", 4096), ("VEC8_WARPS", 8))),
             ("vec8 4096/4 warps", dropout, (("FLAT_KERNEL", "vec8"), ("VEC8_BLOCK", 4096), ("VEC8_WARPS", 4))),
             ("vec8 2048/4 warps, load first", dropout, (("FLAT_KERNEL", "vec8"), ("VEC8_BLOCK", 2048),
                                                         ("VEC8_WARPS", 4), ("LOAD_FIRST", True))),
             ("vec8 1024/4 warps, load first", dropout, (("FLAT_KERNEL", "vec8"), ("VEC8_BLOCK", 1024),
                                                         ("VEC8_WARPS", 4), ("LOAD_FIRST", True))),
             ("vec8 4096/8 warps, load first", dropout, (("FLAT_KERNEL", "vec8"), ("VEC8_BLOCK", 4096),
                                                         ("VEC8_WARPS", 8), ("LOAD_FIRST", True)))]
# NHWC (the split forward): sm_90, 32 elements a thread, ptxas issues the loads after the
# draws even with LOAD_FIRST (instruction 711 of 1144, 48 registers); at 16 a thread (8
# warps) they go early (184 of 696, 32 registers, 8-byte vectors)
DROP_NHWC = [("default", dropout, ()),
             ("split, load first", dropout, (("LOAD_FIRST", True),)),
             ("split, load first, 16/thread", dropout, (("LOAD_FIRST", True), ("SPLIT_THREAD_ELEMENTS", 16))),
             ("split, 16/thread", dropout, (("SPLIT_THREAD_ELEMENTS", 16),))]
DROP_NCHW_BWD = DROP_NCHW[:2] + DROP_NCHW[3:4]  # the backward never draws: no load-first rows
RED_NCHW = [("default", tensor_ops, ()),
            ("ahead 8/SM", tensor_ops, (("CONTIGUOUS_ROWS_KERNEL", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 8))),
            ("ahead 4/SM", tensor_ops, (("CONTIGUOUS_ROWS_KERNEL", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 4))),
            ("ahead 12/SM", tensor_ops, (("CONTIGUOUS_ROWS_KERNEL", "ahead"), ("AHEAD_PROGRAMS_PER_SM", 12))),
            ("ahead 8/SM, steps of 2048", tensor_ops, (("CONTIGUOUS_ROWS_KERNEL", "ahead"),
                                                       ("AHEAD_PROGRAMS_PER_SM", 8),
                                                       ("AHEAD_BLOCK_R", 2048)))]
# NHWC (existing switches): no split measured 2.61-2.72 against the default's 2.49-2.51
# (bench_gpu_layers 06:15 and 09:11 UTC); deeper cp.async pipelines without the split
RED_NHWC = [("default", tensor_ops, ()),
            ("no split", tensor_ops, (("REDUCE_SPLIT", 1),)),
            ("no split, 4 stages", tensor_ops, (("REDUCE_SPLIT", 1), ("STRIDED_ROWS_STAGES", 4))),
            ("no split, 128 ch x 64, 4 stages", tensor_ops, (("REDUCE_SPLIT", 1), ("STRIDED_ROWS_BLOCK_K", 128),
                                                             ("STRIDED_ROWS_BLOCK_R", 64),
                                                             ("STRIDED_ROWS_STAGES", 4)))]


class Problem:
    """One layer on one layout: tridnn's call (run(), returning the outputs to compare),
    PyTorch's (ref(), returning its outputs), minimal bytes, and the variants to time."""

    def __init__(self, name, layout, run, ref, moved, variants, compare):
        self.name, self.layout, self.run, self.ref, self.moved = name, layout, run, ref, moved
        self.variants, self.compare = variants, compare


def row_problems():
    x, dy, y, dx, w, b, wb, bb, mean, inv, ds, db = row_tensors(DEVICE, DT, ROWS)
    K = ROWS[1]
    norms.layer_norm_forward(x, y, w, b, mean, inv, 1, 1e-5, 1.0, 0.0)  # saved statistics for the backward
    mean_s, inv_s = mean.clone(), inv.clone()
    inv_rms = torch.empty(ROWS[0], device=DEVICE)
    norms.rms_norm_forward(x, y, w, inv_rms, 1, 1e-5, 1.0, 0.0)
    _, tmean, trstd = torch.ops.aten.native_layer_norm(x, [K], wb, bb, 1e-5)
    xr = x.detach().clone().requires_grad_()
    wr = wb.detach().clone().requires_grad_()
    rout = F.rms_norm(xr, (K,), wr, 1e-5)

    def ln_fwd():
        norms.layer_norm_forward(x, y, w, b, mean, inv, 1, 1e-5, 1.0, 0.0)
        return y, mean, inv

    def ln_bwd():
        norms.layer_norm_backward(x, dy, dx, w, ds, db, mean_s, inv_s, 1, 1.0, 0.0)
        return dx, ds, db

    def rms_fwd():
        norms.rms_norm_forward(x, y, w, inv, 1, 1e-5, 1.0, 0.0)
        return y, inv

    def rms_bwd():
        norms.rms_norm_backward(x, dy, dx, w, ds, inv_rms, 1, 1.0, 0.0)
        return dx, ds

    return [
        Problem("layernorm fwd", "rows", ln_fwd, lambda: (F.layer_norm(x, (K,), wb, bb, 1e-5),), nbytes(x, y), LN_FWD,
                compare=1),
        Problem("layernorm bwd", "rows", ln_bwd, lambda: torch.ops.aten.native_layer_norm_backward(
            dy, x, [K], tmean, trstd, wb, bb, [True, True, True]), nbytes(x, dy, dx), LN_BWD, compare=1),
        Problem("rmsnorm fwd", "rows", rms_fwd, lambda: (F.rms_norm(x, (K,), wb, 1e-5),), nbytes(x, y), RMS_FWD,
                compare=1),
        Problem("rmsnorm bwd", "rows", rms_bwd, lambda: torch.autograd.grad(rout, (xr,), dy, retain_graph=True),
                nbytes(x, dy, dx), RMS_BWD, compare=1),
    ]


def spatial_problems(layout):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    new = lambda: torch.randn(SPATIAL, device=DEVICE, generator=g).to(DT).contiguous(memory_format=fmt)  # noqa: E731
    x, dy = new(), new()
    y, dx = torch.empty_like(x), torch.empty_like(x)
    reserve = torch.empty(x.numel(), dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0)  # the mask the backward reads
    mask_s = reserve.clone()
    tmask = mask_s.view(SPATIAL).bool()  # logical (NCHW) order, as the reserve
    red = torch.empty((SPATIAL[0], SPATIAL[1], 1, 1), device=DEVICE, dtype=DT)

    def drop_fwd():
        dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0)
        return y, reserve

    def drop_bwd():
        dropout.dropout_backward(dy, dx, mask_s, 0.1)
        return (dx,)

    def reduce_hw():
        tensor_ops.reduce_tensor(x, red, None, None, 0, 1.0, 0.0, False)
        return (red,)

    return [
        # PyTorch draws another mask: its forward is timed, not compared
        Problem("dropout0.1 fwd", layout, drop_fwd, lambda: torch.ops.aten.native_dropout(x, 0.1, True),
                nbytes(x, y, reserve), DROP_NCHW if layout == "NCHW" else DROP_NHWC, compare=0),
        Problem("dropout0.1 bwd", layout, drop_bwd, lambda: (torch.ops.aten.native_dropout_backward(
            dy, tmask, 1 / 0.9),), nbytes(dy, mask_s, dx), DROP_NCHW_BWD if layout == "NCHW" else DROP_NHWC[:1],
            compare=1),
        Problem("reduce sum HW", layout, reduce_hw, lambda: (x.sum((2, 3), keepdim=True),), nbytes(x, red),
                RED_NCHW if layout == "NCHW" else RED_NHWC, compare=1),
    ]


def copy_bandwidth(timer):
    src = torch.randn(SPATIAL, device=DEVICE).to(DT)
    ms = timer(lambda: src.clone())
    return 2 * nbytes(src) / ms / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for sweep_layers_c1.json")
    parser.add_argument("--only", default=None, help="problems whose name contains this")
    parser.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, tiny float32 shapes")
    parser.add_argument("--budget-s", type=float, default=85.0,
                        help="start no new problem or variant (but a problem's default) after this many seconds")
    args = parser.parse_args()
    started = time.time()
    if DRY_RUN:
        tridnn.Handle(device="cpu", backend="triton", find_cache=None)  # patches the interpreter
        timer = wall_time
    else:
        timer = graph_time
    copy = float("nan") if DRY_RUN else copy_bandwidth(timer)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "triton": triton.__version__, "gpu": "none (dry run)" if DRY_RUN else torch.cuda.get_device_name(0),
            "copy_tb_s": copy, "spatial": SPATIAL, "rows": ROWS, "dtype": str(DT)}
    print(meta, flush=True)
    rows, skipped = [], []
    for make in (row_problems, lambda: spatial_problems("NCHW"), lambda: spatial_problems("NHWC")):
        if time.time() - started > args.budget_s:
            skipped.append("a group")
            continue
        for prob in make():
            if args.only and args.only not in prob.name:
                continue
            if time.time() - started > args.budget_s:
                skipped.append(f"{prob.layout} {prob.name}")
                continue
            torch_out = snapshot(prob.ref()[:prob.compare])
            torch_ms = timer(prob.ref)
            default_out = None
            for label, module, settings in prob.variants:
                if default_out is not None and time.time() - started > args.budget_s:
                    skipped.append(f"{prob.layout} {prob.name} [{label}]")
                    continue
                fn = switched_all(module, settings, prob.run)
                t0 = time.time()
                try:
                    out = snapshot(fn())
                    ms = timer(fn)
                except Exception as exc:  # noqa: BLE001 - a broken variant is reported, not fatal
                    print(f"{prob.layout:5s} {prob.name:16s} [{label}] FAILED: {type(exc).__name__}: {exc}", flush=True)
                    rows.append(dict(layout=prob.layout, problem=prob.name, variant=label, error=str(exc)[:200]))
                    continue
                if default_out is None:
                    default_out = out
                err = diff(out[:prob.compare], torch_out) if prob.compare else None
                row = dict(layout=prob.layout, problem=prob.name, variant=label, us=ms * 1e3,
                           tb_s=prob.moved / ms / 1e9, torch_us=torch_ms * 1e3, torch_tb_s=prob.moved / torch_ms / 1e9,
                           ratio=ms / torch_ms, err=err, vs_default=diff(out, default_out), bytes=prob.moved)
                rows.append(row)
                print(f"{prob.layout:5s} {prob.name:16s} {label:36s} {row['us']:8.1f} us {row['tb_s']:5.2f} TB/s | "
                      f"torch {row['torch_tb_s']:5.2f} | ratio {row['ratio']:.3f} | err "
                      f"{'-' if err is None else f'{err:.1e}'} | vs default {row['vs_default']:.1e} "
                      f"({time.time() - t0:.1f}s)", flush=True)
                if not DRY_RUN:
                    torch.cuda.empty_cache()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sweep_layers_c1.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows, "skipped": skipped}, f, indent=1)
    target = 0.85 * copy
    print(f"\n{time.time() - started:.0f} s. copy {copy:.2f} TB/s; 85% = {target:.2f} TB/s"
          + (f"; skipped (over --budget-s): {', '.join(skipped)}" if skipped else ""))
    print(f"{'layout':6s} {'problem':16s} {'variant':36s} {'us':>8s} {'TB/s':>6s} {'torch':>6s} {'ratio':>6s} "
          f"{'err':>8s} {'vs dflt':>8s}  flags")
    for r in rows:
        if "error" in r:
            print(f"{r['layout']:6s} {r['problem']:16s} {r['variant']:36s} ERROR {r['error'][:50]}")
            continue
        flags = [f for f, bad in (("<85%", r["tb_s"] < target), ("SLOWER", r["ratio"] > 1.0)) if bad]
        err = "-" if r["err"] is None else f"{r['err']:.1e}"
        print(f"{r['layout']:6s} {r['problem']:16s} {r['variant']:36s} {r['us']:8.1f} {r['tb_s']:6.2f} "
              f"{r['torch_tb_s']:6.2f} {r['ratio']:6.3f} {err:>8s} {r['vs_default']:8.1e}  {' '.join(flags)}")


if __name__ == "__main__":
    main()
