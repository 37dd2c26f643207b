"""Issue 5, session 6 (helper B2): the changed memory-bound rows, default design against
the other designs behind module switches and PyTorch, on one H200 in about a minute.

Problems on 64x256x56x56 bfloat16: NHWC dropout p = 0.1 forward (dropout.NHWC_DENSE_KERNEL:
"octets", the new default, against the split tile kernel), NHWC LRN n = 5 forward
(lrn.LANES_FORWARD_TILE 8192, the new default, against 2048 and 4096), the sum over H, W and global
average pooling (adaptive 1x1) in NCHW (tensor_ops.AHEAD_DEPTH / AHEAD_WARPS /
AHEAD_PROGRAMS_PER_SM) and NHWC (tensor_ops.SPLIT_ROUND "down", the new default, against
"up", no split, and the "last" combine). TB/s counts minimal bytes (each input read once,
each output written once; dropout's uint8 mask included). A copy (torch clone of the
tensor) first sets the 85% line.

Per row: the variant's device time (a CUDA graph replayed by triton.testing.do_bench,
median), TB/s, PyTorch's TB/s, tridnn/torch time, ``err`` (max |tridnn - torch| /
max(1, max |torch|); dropout: y against x * mask / 0.9 computed by torch from tridnn's
mask, since PyTorch draws another mask) and ``vs default`` (the same measure against the
default design's output; dropout: mask bytes that differ, which must be 0).

    PYTHONPATH=src python benchmarks/sweep_layers_b2.py [--out DIR] [--only TEXT]
    PYTHONPATH=src python benchmarks/sweep_layers_b2.py --dry-run   # CPU, interpreter, tiny float16
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
from bench_gpu_layers import diff, graph_time, nbytes, snapshot, switched_all, wall_time  # noqa: E402
from tridnn.cuda import dropout, lrn, pooling, tensor_ops  # noqa: E402

if DRY_RUN:  # C % 8 == 0 and H * W % 4 == 0 (the octets kernel), H * W > 1024 (the ahead kernel)
    DEVICE, DT, SPATIAL = "cpu", torch.float16, (2, 16, 33, 36)
else:
    DEVICE, DT, SPATIAL = "cuda", torch.bfloat16, (64, 256, 56, 56)

# (label, module, settings); the first of each list is the default design (no settings).
# sm_90 (bf16, compile probe): octets 4096 elements a program, 4 warps: 32.5 SASS
# instructions an element, 56 registers, no shared memory, loads at 63-139 of 1040;
# 8 warps (8192): the same 32.5; keep from words 31.8 (48 registers, loads sunk to 598);
# 256 rows at 4 warps (two rows a thread) 30.9, 122 registers; split (the old default):
# 37.5, 53 registers, 7 barriers.
DROP_NHWC = [("default", dropout, ()),
             ("split (old default)", dropout, (("NHWC_DENSE_KERNEL", None),)),
             ("octets 256 rows (8 warps)", dropout, (("OCTETS_ROWS", 256),)),
             ("octets 256 rows, 4 warps", dropout, (("OCTETS_ROWS", 256), ("OCTETS_WARPS", 4))),
             ("octets loads after", dropout, (("OCTETS_LOADS", "after"),)),
             ("octets keep from words", dropout, (("OCTETS_KEEP_FROM_WORDS", True),)),
             ("octets 64 ch x 16 groups", dropout, (("OCTETS_BLOCK_O", 8), ("OCTETS_ROWS", 128))),
             ("octets 64 ch x 32 groups", dropout, (("OCTETS_BLOCK_O", 8), ("OCTETS_ROWS", 256)))]
# NHWC LRN n = 5 forward (lanes kernel): elements a program, sm_90 SASS instructions an
# element 33.0 (2048), 26.0 (4096), 22.2 (8192, the new default, 60 registers)
LRN_NHWC = [("default", lrn, ()),
            ("tile 2048 (old default)", lrn, (("LANES_FORWARD_TILE", 2048),)),
            ("tile 4096", lrn, (("LANES_FORWARD_TILE", 4096),))]
# NCHW rows of 3136 (the ahead kernel, 2048-element steps): depth 2 = two rows in flight
# (sm_90 4 warps: 60 registers, 8 programs an SM; depth 1: 36)
RED_NCHW = [("default", tensor_ops, ()),
            ("depth 2, 8/SM", tensor_ops, (("AHEAD_DEPTH", 2),)),
            ("depth 2, 6/SM", tensor_ops, (("AHEAD_DEPTH", 2), ("AHEAD_PROGRAMS_PER_SM", 6))),
            ("depth 2, 8 warps, 4/SM", tensor_ops, (("AHEAD_DEPTH", 2), ("AHEAD_WARPS", 8),
                                                    ("AHEAD_PROGRAMS_PER_SM", 4))),
            ("depth 1, 12/SM", tensor_ops, (("AHEAD_PROGRAMS_PER_SM", 12),))]
# NHWC: 256 row blocks of 64 channels, 4 programs an SM fit (8 warps, 62 registers):
# "down" 2 parts (512 programs, one wave), "up" 3 (768, 1.45 waves)
RED_NHWC = [("default", tensor_ops, ()),
            ("round up (old default)", tensor_ops, (("SPLIT_ROUND", "up"),)),
            ("no split", tensor_ops, (("REDUCE_SPLIT", 1),)),
            ("round down, last combines", tensor_ops, (("SPLIT_COMBINE", "last"),)),
            ("round down, 8/SM", tensor_ops, (("SPLIT_PROGRAMS_PER_SM", 8),))]


class Problem:
    """One layer on one layout: tridnn's call (run(), returning the outputs to compare),
    PyTorch's (ref()), the reference outputs to check against (want(out) -> tensors),
    minimal bytes, and the variants to time."""

    def __init__(self, name, layout, run, ref, want, moved, variants):
        self.name, self.layout, self.run, self.ref, self.want = name, layout, run, ref, want
        self.moved, self.variants = moved, variants


def problems(layout):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    x = torch.randn(SPATIAL, device=DEVICE, generator=g).to(DT).contiguous(memory_format=fmt)
    y = torch.empty_like(x)
    reserve = torch.empty(x.numel(), dtype=torch.uint8, device=DEVICE)
    N, C = SPATIAL[:2]
    red = torch.empty((N, C, 1, 1), device=DEVICE, dtype=DT)
    ay = torch.empty((N, C, 1, 1), device=DEVICE, dtype=DT).contiguous(memory_format=fmt)
    x32 = x.float() if DRY_RUN else x  # PyTorch's CPU kernels and float16

    def drop_fwd():
        dropout.dropout_forward(x, y, reserve, 0.1, 1234, 0)
        return y, reserve

    def drop_want(out):
        keep = out[1].view(SPATIAL).bool()
        return torch.where(keep, x.float() / 0.9, 0.0), out[1]

    def reduce_hw():
        tensor_ops.reduce_tensor(x, red, None, None, 0, 1.0, 0.0, False)
        return (red,)

    def adaptive():
        pooling.adaptive_pooling_forward(x, ay, 1, 1.0, 0.0)
        return (ay,)

    def lrn_fwd():
        lrn.lrn_cross_channel_forward(x, y, 5, 1e-4, 0.75, 2.0, 1.0, 0.0)
        return (y,)

    out = []
    if layout == "NHWC":
        out.append(Problem("dropout0.1 fwd", layout, drop_fwd, lambda: torch.ops.aten.native_dropout(x, 0.1, True),
                           drop_want, nbytes(x, y, reserve), DROP_NHWC))
        out.append(Problem("lrn5 fwd", layout, lrn_fwd, lambda: F.local_response_norm(x32, 5, 1e-4, 0.75, 2.0),
                           lambda o: (F.local_response_norm(x32, 5, 1e-4, 0.75, 2.0),), nbytes(x, y), LRN_NHWC))
    variants = RED_NCHW if layout == "NCHW" else RED_NHWC
    out.append(Problem("reduce sum HW", layout, reduce_hw, lambda: x.sum((2, 3), keepdim=True),
                       lambda o: (x32.sum((2, 3), keepdim=True),), nbytes(x, red), variants))
    out.append(Problem("adaptive avg 1x1", layout, adaptive, lambda: F.adaptive_avg_pool2d(x, 1),
                       lambda o: (F.adaptive_avg_pool2d(x32, 1),), nbytes(x, ay), variants))
    return out


def copy_bandwidth(timer):
    src = torch.randn(SPATIAL, device=DEVICE).to(DT)
    ms = timer(lambda: src.clone())
    return 2 * nbytes(src) / ms / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="directory for sweep_layers_b2.json")
    parser.add_argument("--only", default=None, help="problems whose name contains this")
    parser.add_argument("--dry-run", action="store_true", help="CPU, Triton interpreter, tiny float16")
    parser.add_argument("--budget-s", type=float, default=68.0,
                        help="start no new variant (but a problem's default) after this many seconds")
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
            "copy_tb_s": copy, "spatial": SPATIAL, "dtype": str(DT)}
    print(meta, flush=True)
    rows, skipped = [], []
    for layout in ("NHWC", "NCHW"):
        for prob in problems(layout):
            if args.only and args.only not in prob.name:
                continue
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
                err = diff(out, prob.want(out))
                row = dict(layout=prob.layout, problem=prob.name, variant=label, us=ms * 1e3,
                           tb_s=prob.moved / ms / 1e9, torch_us=torch_ms * 1e3, torch_tb_s=prob.moved / torch_ms / 1e9,
                           ratio=ms / torch_ms, err=err, vs_default=diff(out, default_out), bytes=prob.moved)
                rows.append(row)
                print(f"{prob.layout:5s} {prob.name:16s} {label:28s} {row['us']:8.1f} us {row['tb_s']:5.2f} TB/s | "
                      f"torch {row['torch_tb_s']:5.2f} | ratio {row['ratio']:.3f} | err {err:.1e} | "
                      f"vs default {row['vs_default']:.1e} ({time.time() - t0:.1f}s)", flush=True)
                if not DRY_RUN:
                    torch.cuda.empty_cache()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "sweep_layers_b2.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows, "skipped": skipped}, f, indent=1)
    target = 0.85 * copy
    print(f"\n{time.time() - started:.0f} s. copy {copy:.2f} TB/s; 85% = {target:.2f} TB/s"
          + (f"; skipped (over --budget-s): {', '.join(skipped)}" if skipped else ""))
    print(f"{'layout':6s} {'problem':16s} {'variant':28s} {'us':>8s} {'TB/s':>6s} {'torch':>6s} {'ratio':>6s} "
          f"{'err':>8s} {'vs dflt':>8s}  flags")
    for r in rows:
        if "error" in r:
            print(f"{r['layout']:6s} {r['problem']:16s} {r['variant']:28s} ERROR {r['error'][:50]}")
            continue
        flags = [f for f, bad in (("<85%", r["tb_s"] < target), ("SLOWER", r["ratio"] > 1.0)) if bad]
        print(f"{r['layout']:6s} {r['problem']:16s} {r['variant']:28s} {r['us']:8.1f} {r['tb_s']:6.2f} "
              f"{r['torch_tb_s']:6.2f} {r['ratio']:6.3f} {r['err']:8.1e} {r['vs_default']:8.1e}  {' '.join(flags)}")


if __name__ == "__main__":
    main()
