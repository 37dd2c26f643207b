"""Gluon warp-specialized convolution (tridnn.cuda.gluon_conv) against cuDNN.

    PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --out results/   # one H200, <= 150 s
    PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --dry-run        # CPU: sm_90 compiles only

ResNet-50 batch 64 3x3 layers, forward, bfloat16 NHWC (stride 1, padding 1):
  res2_3x3 64->64 56x56, res3_3x3 128->128 28x28, res4_3x3 256->256 14x14, res5_3x3 512->512 7x7
(each 14.8 GFLOP), and the same-size GEMMs gemm_res3 (M 50176, N 128, K 1152) and gemm_res4
(M 12544, N 256, K 2304) as 1x1 convolutions over one row of M pixels. Rows:
  cudnn       torch F.conv2d, channels_last, cudnn.benchmark=True
  cublas      (GEMM rows) torch.matmul of the same bfloat16 matrices
  <config>    gluon_conv with that tile (NB x BH x BW pixels x BLOCK_N channels), ring depth
              sN, consumer warps wN, pN programs an SM, pp = ping-pong consumers
Every output is checked against cuDNN's first (max |diff| / max |cuDNN|; > 2e-2 is
flagged BAD and not timed). Times: medians of CUDA-graph replays
(triton.testing.do_bench_cudagraph). useful = output pixels / pixels the tiles cover;
fill = tiles / (rounds x persistent programs), the wave quantization; /cudnn = time ratio
(lower is better; cuBLAS for the GEMM rows). TFLOP/s count useful work only.

A Gluon kernel that deadlocks would hang the process, so every config is first run once
on small problems in a child process ("canary", 60 s limit); a config that hangs,
crashes or disagrees there is reported and left out of the timed sweep.
--dry-run (CPU): builds every layer's descriptors and launch arguments, and compiles
every config for sm_90 through the kernel's own JIT binding (an offline driver stands in
for CUDA), then prints the table with empty timings and writes the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

LAYERS = {  # name: (N, C, K, H, W, filter size, padding)
    "res2_3x3": (64, 64, 64, 56, 56, 3, 1),
    "res3_3x3": (64, 128, 128, 28, 28, 3, 1),
    "res4_3x3": (64, 256, 256, 14, 14, 3, 1),
    "res5_3x3": (64, 512, 512, 7, 7, 3, 1),
    # the GEMMs of the same size (res3, res4 as M x N x K), as 1x1 convolutions over one
    # image row of M pixels: the kernel against cuBLAS (torch.matmul) without box waste
    "gemm_res3": (1, 1152, 128, 1, 50176, 1, 0),
    "gemm_res4": (1, 2304, 256, 1, 12544, 1, 0),
}
CANARY = [  # (N, C, K, H, W, KH, KW, pad, alpha): edges in every direction, K not a multiple of 128
    # (the child's compiles land in Triton's disk cache, which the sweep then reads)
    (2, 64, 192, 11, 19, 3, 3, 1, 1.0),
    (3, 128, 64, 7, 7, 3, 3, 1, 0.5),
]
SMS = 132


def offline_driver():
    """--dry-run: let the JIT bind and compile for sm_90 without CUDA."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    class Offline:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    driver.set_active(Offline())


def rel_err(got, want) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)).item()


def bench(fn, rep):
    import triton
    return triton.testing.do_bench_cudagraph(fn, rep=rep, return_mode="median") * 1e3  # microseconds


def useful(cfg, n, oh, ow) -> float:
    import triton
    nb, bh, bw = cfg["NB"], cfg["BH"], cfg["BW"]
    covered = triton.cdiv(n, nb) * nb * triton.cdiv(oh, bh) * bh * triton.cdiv(ow, bw) * bw
    return n * oh * ow / covered


def fill(cfg, n, k, oh, ow) -> float:
    """Tiles / (rounds x programs): the share of the persistent programs' last round that
    has work (wave quantization; a ping-pong program's two consumers share its tiles)."""
    import triton
    tiles = (triton.cdiv(n, cfg["NB"]) * triton.cdiv(oh, cfg["BH"]) * triton.cdiv(ow, cfg["BW"])
             * triton.cdiv(k, cfg["BLOCK_N"]))
    slots = SMS * cfg.get("PER_SM", 1)
    return tiles / (triton.cdiv(tiles, slots) * slots)


def applies(cfg, n, c, k, oh, ow) -> bool:
    """Skip tiles mostly outside the layer (half the pixels or channels wasted), and the
    64-channel tiles where wider ones fit (they need ~1.5x the L2 bandwidth)."""
    if cfg["BLOCK_N"] > max(k, 64) or (cfg["BLOCK_N"] < 128 and k >= 128):
        return False
    return c % cfg["BLOCK_K"] == 0 and useful(cfg, n, oh, ow) >= 0.5


def make(n, c, k, h, w, kh, kw, dev, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).to(torch.bfloat16)
    wt = (torch.randn(k, c, kh, kw, generator=g) / (c * kh * kw) ** 0.5).to(torch.bfloat16)
    return x.to(dev).contiguous(memory_format=torch.channels_last), wt.to(dev).contiguous(memory_format=torch.channels_last)


# -- canary (child process) ---------------------------------------------------------------
def canary(indices, dry):
    """Run each config on the CANARY problems, on all SMs and on a grid of 3 programs (many
    tiles each: the ring wraps across tiles, ping-pong consumers alternate); print one
    line per config, flushed."""
    from tridnn.cuda import gluon_conv as gc
    dev = "cpu" if dry else "cuda"
    for i in indices:
        cfg = gc.CONFIGS[i]
        worst = 0.0
        for case in CANARY:
            n, c, k, h, w, kh, kw, pad, alpha = case
            if c % cfg["BLOCK_K"]:
                continue
            x, wt = make(n, c, k, h, w, kh, kw, dev, seed=i)
            want = None if dry else alpha * F.conv2d(x.double(), wt.double(), padding=pad)
            for sms in (SMS if dry else None, 3):
                grid, args, meta, y = gc.prepare(x, wt, (pad, pad), (1, 1), cfg, alpha=alpha, sms=sms)
                if dry:
                    gc.gluon_conv_fwd_kernel.warmup(*args, grid=grid, **meta)
                    continue
                gc.launch(grid, args, meta, y)
                torch.cuda.synchronize()
                worst = max(worst, rel_err(y.double(), want))
        print(f"CANARY {i} {'ok' if worst < 2e-2 else 'BAD'} {worst:.3e}", flush=True)


def run_canaries(indices, dry, limit_s=60.0):
    """{config index: (status, error)}; status ok / BAD / hang / crash."""
    status = {}
    todo = list(indices)
    while todo:
        cmd = [sys.executable, os.path.abspath(__file__), "--canary", ",".join(map(str, todo))]
        if dry:
            cmd.append("--dry-run")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=limit_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            timed_out = True
        for line in out.splitlines():
            if line.startswith("CANARY "):
                _, i, st, e = line.split()
                status[int(i)] = (st, float(e))
        todo = [i for i in todo if i not in status]
        if todo:  # the first unreported config hung or crashed the child
            bad = todo.pop(0)
            status[bad] = ("hang" if timed_out else "crash", float("nan"))
            tail = (err or "").strip().splitlines()[-3:]
            print(f"canary: config {bad} {status[bad][0]}: {' | '.join(tail)}", flush=True)
    return status


# -- the sweep ----------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="directory for gluon_conv.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build and compile for sm_90 only")
    ap.add_argument("--layers", default=",".join(LAYERS), help="comma-separated subset of " + ",".join(LAYERS))
    ap.add_argument("--configs", default="", help="comma-separated indices into gluon_conv.CONFIGS (default all)")
    ap.add_argument("--rep", type=int, default=40, help="milliseconds of graph replays per timing")
    ap.add_argument("--budget-s", type=float, default=140.0, help="stop starting new configs after this")
    ap.add_argument("--no-canary", action="store_true", help="skip the child-process trial runs")
    ap.add_argument("--canary", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dry_run:
        offline_driver()
    if a.canary is not None:
        canary([int(i) for i in a.canary.split(",") if i], a.dry_run)
        return

    from tridnn.cuda import gluon_conv as gc
    t0 = time.time()
    indices = [int(i) for i in a.configs.split(",") if i] or list(range(len(gc.CONFIGS)))
    layers = [name for name in a.layers.split(",") if name]
    for name in layers:
        if name not in LAYERS:
            ap.error(f"unknown layer {name}")
    dev = "cpu" if a.dry_run else "cuda"
    if not a.dry_run:
        torch.backends.cudnn.benchmark = True
        print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  cudnn "
              f"{torch.backends.cudnn.version()}", flush=True)

    status = {i: ("ok", 0.0) for i in indices} if a.no_canary else run_canaries(indices, a.dry_run)
    print(f"canaries ({time.time() - t0:.0f} s): " + ", ".join(
        f"{gc.name(gc.CONFIGS[i])}={status[i][0]}" for i in indices), flush=True)

    rows = []
    for name in layers:
        n, c, k, h, w, ks, pad = LAYERS[name]
        oh, ow = h + 2 * pad - ks + 1, w + 2 * pad - ks + 1
        flop = gc.flops(n, c, k, oh, ow, ks, ks)
        x, wt = make(n, c, k, h, w, ks, ks, dev)
        w_mat = gc.filter_matrix(wt)
        ref = None
        if not a.dry_run:
            if ks == 1 and n == 1 and h == 1:  # x is an [M, C] matrix: the reference is cuBLAS
                who = "cublas"
                a2, b2 = x.permute(0, 2, 3, 1).reshape(w, c), w_mat.t()
                fn = lambda: torch.matmul(a2, b2)  # noqa: E731
                ref = fn().t().reshape(1, k, 1, w)
            else:
                who = "cudnn"
                fn = lambda: F.conv2d(x, wt, padding=pad)  # noqa: E731
                ref = fn()
            us = bench(fn, a.rep)
            rows.append(dict(layer=name, config=who, us=us, tflops=flop / us * 1e-6, ratio=1.0, err=0.0,
                             useful=1.0, fill=1.0))
            print(f"{name:9s} {who} {us:8.1f} us {flop / us * 1e-6:6.0f} TFLOP/s", flush=True)
        cudnn_us = rows[-1]["us"] if rows and rows[-1]["config"] in ("cudnn", "cublas") else None
        for i in indices:
            cfg = gc.CONFIGS[i]
            row = dict(layer=name, config=gc.name(cfg), us=None, tflops=None, ratio=None, err=None,
                       useful=round(useful(cfg, n, oh, ow), 3), fill=round(fill(cfg, n, k, oh, ow), 3),
                       shared=gc.shared_bytes(cfg))
            if not applies(cfg, n, c, k, oh, ow):
                continue
            if status[i][0] != "ok":
                row["note"] = "canary " + status[i][0]
                rows.append(row)
                continue
            if time.time() - t0 > a.budget_s:
                row["note"] = "budget"
                rows.append(row)
                continue
            try:
                y = torch.empty((n, k, oh, ow), device=dev, dtype=torch.bfloat16, memory_format=torch.channels_last)
                grid, args, meta, y = gc.prepare(x, wt, (pad, pad), (1, 1), cfg, y=y, w_mat=w_mat,
                                                 sms=SMS if a.dry_run else None)
                if a.dry_run:
                    gc.gluon_conv_fwd_kernel.warmup(*args, grid=grid, **meta)
                    row["note"] = "dry"
                else:
                    gc.launch(grid, args, meta, y)
                    torch.cuda.synchronize()
                    row["err"] = rel_err(y, ref)
                    if row["err"] > 2e-2:
                        row["note"] = "BAD"
                    else:
                        us = bench(lambda: gc.launch(grid, args, meta, y), a.rep)
                        row.update(us=us, tflops=flop / us * 1e-6, ratio=us / cudnn_us)
            except Exception as e:  # report and go on: one config must not end the sweep
                row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
            rows.append(row)
            print(f"{name:9s} {row['config']:22s} " + (f"{row['us']:8.1f} us {row['tflops']:6.0f} TFLOP/s "
                  f"x{row['ratio']:.2f} err {row['err']:.1e}" if row["us"] else row.get("note", "")), flush=True)

    print(f"\ntotal {time.time() - t0:.0f} s\n")
    print(f"{'layer':9s} {'config':22s} {'us':>8s} {'TFLOP/s':>8s} {'/cudnn':>7s} {'err':>8s} {'useful':>6s} "
          f"{'fill':>5s} note")
    for r in rows:
        us = f"{r['us']:8.1f}" if r["us"] else f"{'-':>8s}"
        tf = f"{r['tflops']:8.0f}" if r["tflops"] else f"{'-':>8s}"
        ratio = f"{r['ratio']:7.2f}" if r["ratio"] else f"{'-':>7s}"
        err = f"{r['err']:8.1e}" if r["err"] is not None else f"{'-':>8s}"
        print(f"{r['layer']:9s} {r['config']:22s} {us} {tf} {ratio} {err} {r['useful']:6.2f} {r['fill']:5.2f} {r.get('note', '')}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        path = os.path.join(a.out, "gluon_conv.json")
        with open(path, "w") as f:
            json.dump(dict(dry_run=a.dry_run, canaries={gc.name(gc.CONFIGS[i]): status[i][0] for i in indices},
                           rows=rows, seconds=time.time() - t0), f, indent=1)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
