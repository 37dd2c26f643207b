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

--directions fwd,bwd_data adds backward-data rows: dx = conv(dy, the filter turned 180
degrees with K and C swapped), padding KH-1-p (gluon_conv.launch_backward_data's
formulation), against cuDNN's dgrad (aten.convolution_backward); the turned filter is
made once outside the timing, and a "turn" row times that copy (tridnn makes it per call).

--layers aspp_d2,aspp_d4,aspp_d12: DeepLab's dilated layers (batch 16, dilation 2 / 4 / 12), by name
only (not in the default set); backward data runs them at the same dilation, padding d(KS-1)-p.
Likewise flat_res4_1x1r,flat_res4_1x1c,flat_res5_1x1r,flat_res5_1x1c: the 1x1 layers on 14- and
7-wide maps as the flat GEMMs the API runs (batch 64).

--api: tridnn's public API instead (IMPLICIT_GEMM forward, ALGO_1 backward data), where the
tuner times conv_tma's candidates then the Gluon picks (gluon_conv.picks) and keeps the
fastest that agrees with conv_tma's reference. Per layer and direction: each candidate's
tuner time (conv_tma's best three, every Gluon pick), the pick, and the public call's
CUDA-graph time against cuDNN. The first call compiles every candidate (tens of seconds
a layer on a cold Triton cache): run a few layers at a time, e.g.
  PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --api --layers res3_3x3,res5_3x3 --out results/

A Gluon kernel that deadlocks would hang the process, so every config is first run once
on small problems in a child process ("canary", 60 s limit); a config that hangs,
crashes or disagrees there is reported and left out of the timed sweep.
--strided: gluon_conv_strided (the phase-view loader, not yet offered to the tuner) on the
stride-2 layers instead: res3/4/5_3x3s2 (3x3, padding 1, inputs 56/28/14) and the 1x1
downsamples res3/4/5_ds against cuDNN, e.g.
  PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --strided --out results/

--dgrad-phases: stride-2 backward data of res3/4/5_3x3s2 (dx 56/28/14, 3x3, padding 1) three
ways, per Gluon config that gluon_conv offers the layer: cuDNN's dgrad
(aten.convolution_backward), gluon_conv's launch per phase of dx ("phases4 <config>": the
four stride-1 launches of _launch_phases) and gluon_dgrad_fused's one launch over all phases
("fused <config>"; its canary runs first, in a child), the phase-ordered turned filter made
once outside the timing (a "turn" row times that copy, which tridnn makes per call), e.g.
  PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --dgrad-phases --out results/

--dtype float32: the TF32 configs (gluon_conv.TF32_CONFIGS, gluon_conv_strided's with
--strided: float32 data, tf32 products) on float32 tensors against cuDNN and cuBLAS with
tf32 allowed (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32), as
tridnn offers them for TENSOR_OP math (--api: the layers under TENSOR_OP math), e.g.
  PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --dtype float32 --out results/
  PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --dtype float32 --strided --out results/

--dtype fma: the FMA configs (gluon_conv.FMA_CONFIGS: float32 data, IEEE products on the CUDA
cores, as tridnn offers them for FMA math) against cuDNN and cuBLAS with tf32 off, e.g.
  PYTHONPATH=src python benchmarks/sweep_gluon_conv.py --dtype fma --out results/

--dry-run (CPU): builds every layer's descriptors and launch arguments, and compiles
every config for sm_90 through the kernel's own JIT binding (an offline driver stands in
for CUDA), then prints the table with empty timings and writes the JSON.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import types

import torch
import torch.nn.functional as F

if "--api" in sys.argv and "--dry-run" in sys.argv:  # the API's plumbing under Triton's interpreter
    os.environ["TRITON_INTERPRET"] = "1"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gluon_sweep_common as gsc  # noqa: E402  (benchmarks/, the script's own folder)
from gluon_sweep_common import bench, offline_driver, useful  # noqa: E402

LAYERS = {  # name: (N, C, K, H, W, filter size, padding)
    "res2_3x3": (64, 64, 64, 56, 56, 3, 1),
    "res3_3x3": (64, 128, 128, 28, 28, 3, 1),
    "res4_3x3": (64, 256, 256, 14, 14, 3, 1),
    "res5_3x3": (64, 512, 512, 7, 7, 3, 1),
    # the GEMMs of the same size (res3, res4 as M x N x K), as 1x1 convolutions over one
    # image row of M pixels: the kernel against cuBLAS (torch.matmul) without box waste
    "gemm_res3": (1, 1152, 128, 1, 50176, 1, 0),
    "gemm_res4": (1, 2304, 256, 1, 12544, 1, 0),
    # ResNet-50's 1x1 layers with the fewest (res2) and most (res4) input channels a pixel
    "res2_1x1c": (64, 64, 256, 56, 56, 1, 0),
    "res4_1x1c": (64, 256, 1024, 14, 14, 1, 0),
}
STRIDED_LAYERS = {  # --strided, stride 2: name: (N, C, K, H, W, filter size, padding) of the input
    "res3_3x3s2": (64, 128, 128, 56, 56, 3, 1),
    "res4_3x3s2": (64, 256, 256, 28, 28, 3, 1),
    "res5_3x3s2": (64, 512, 512, 14, 14, 3, 1),
    "res3_ds": (64, 256, 512, 56, 56, 1, 0),
    "res4_ds": (64, 512, 1024, 28, 28, 1, 0),
    "res5_ds": (64, 1024, 2048, 14, 14, 1, 0),
}
STRIDED_CANARY = [  # as CANARY, stride 2 (H and W even)
    (2, 64, 192, 12, 18, 3, 3, 1, 1.0),
    (3, 128, 64, 14, 14, 1, 1, 0, 0.5),
]
DILATED_LAYERS = {  # DeepLab's ASPP (shapes.DILATED) at bench_gpu_conv's --dil-batch 16:
    # name: (N, C, K, H, W, filter size, padding, dilation); named with --layers, not in the default set
    "aspp_d2": (16, 512, 512, 64, 64, 3, 2, 2),
    "aspp_d4": (16, 512, 512, 64, 64, 3, 4, 4),
    "aspp_d12": (16, 256, 256, 33, 33, 3, 12, 12),
}
FLAT_LAYERS = {  # ResNet-50's 1x1 layers on 14- and 7-wide maps at batch 64 as flat GEMMs (one row of
    # M = 64 * H * W pixels, as the API runs them): the ones furthest from cuDNN in session 30
    "flat_res4_1x1r": (1, 1024, 256, 1, 12544, 1, 0),
    "flat_res4_1x1c": (1, 256, 1024, 1, 12544, 1, 0),
    "flat_res5_1x1r": (1, 2048, 512, 1, 3136, 1, 0),
    "flat_res5_1x1c": (1, 512, 2048, 1, 3136, 1, 0),
}
NAMED_LAYERS = {**LAYERS, **DILATED_LAYERS, **FLAT_LAYERS}  # what --layers may name without --strided / --dgrad-phases
DGRAD_LAYERS = {name: STRIDED_LAYERS[name] for name in ("res3_3x3s2", "res4_3x3s2", "res5_3x3s2")}
DGRAD_CANARY = [  # --dgrad-phases: (N, C, K, H, W, filter size, padding, alpha, beta) of the forward's x;
    # C (dx's channels) a multiple of every BLOCK_N; H, W even
    (2, 256, 128, 12, 18, 3, 1, 1.0, 0.0),
    (3, 256, 64, 14, 10, 3, 1, 0.5, 0.5),
]
# --dgrad-phases reaches the canary children by the environment too
DGRAD_PHASES = "--dgrad-phases" in sys.argv or os.environ.get("TRIDNN_SWEEP_DGRAD_PHASES") == "1"
if DGRAD_PHASES:
    os.environ["TRIDNN_SWEEP_DGRAD_PHASES"] = "1"
# --strided reaches the canary children (gluon_sweep_common starts them without it) by the environment
STRIDED = "--strided" in sys.argv or os.environ.get("TRIDNN_SWEEP_STRIDED") == "1"
if STRIDED:
    os.environ["TRIDNN_SWEEP_STRIDED"] = "1"


def _argv_dtype() -> str:
    """--dtype's value (bfloat16 or float32), passed on to the canary children by the environment."""
    for i, arg in enumerate(sys.argv):
        if arg == "--dtype" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--dtype="):
            return arg.split("=", 1)[1]
    return os.environ.get("TRIDNN_SWEEP_DTYPE", "bfloat16")


DTYPE = _argv_dtype()
os.environ["TRIDNN_SWEEP_DTYPE"] = DTYPE
FMA = DTYPE == "fma"  # float32 data, CUDA-core products (FMA math)
FP32 = DTYPE in ("float32", "fma")
TORCH_DTYPE = torch.float32 if FP32 else torch.bfloat16
CANARY = [  # (N, C, K, H, W, KH, KW, pad, alpha): edges in every direction, K not a multiple of 128
    # (the child's compiles land in Triton's disk cache, which the sweep then reads)
    (2, 64, 192, 11, 19, 3, 3, 1, 1.0),
    (3, 128, 64, 7, 7, 3, 3, 1, 0.5),
]
SMS = 132


def rel_err(got, want) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)).item()


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
    x = torch.randn(n, c, h, w, generator=g).to(TORCH_DTYPE)
    wt = (torch.randn(k, c, kh, kw, generator=g) / (c * kh * kw) ** 0.5).to(TORCH_DTYPE)
    return x.to(dev).contiguous(memory_format=torch.channels_last), wt.to(dev).contiguous(memory_format=torch.channels_last)


def configs(mod) -> list:
    """The configs swept: the module's CONFIGS, or its TF32_CONFIGS under --dtype float32;
    --dgrad-phases: the configs gluon_conv offers strided backward data (its non-flat picks)."""
    if DGRAD_PHASES:
        base = list({mod.name(c): c for c in mod.PICKS_LARGE + mod.PICKS_MEDIUM + mod.PICKS_SMALL}.values())
        if FMA:
            return [c for c in mod.FMA_CONFIGS if not (c["NB"] == 1 and c["BH"] == 1)]
        return [mod.TF32_OF[mod.name(c)] for c in base] if FP32 else base
    if FMA:
        return mod.FMA_CONFIGS
    return mod.TF32_CONFIGS if FP32 else mod.CONFIGS


def kernel_module():
    """(module, its kernel, stride): gluon_conv at stride 1, or gluon_conv_strided (--strided) at 2."""
    if STRIDED:
        from tridnn.cuda import gluon_conv_strided as gs
        return gs, gs.gluon_conv_strided_kernel, 2
    from tridnn.cuda import gluon_conv as gc
    return gc, gc.gluon_conv_fwd_kernel, 1


def layer_geometry(table, name):
    """(N, C, K, H, W, filter size, padding, dilation) of a layer; dilation 1 unless given."""
    n, c, k, h, w, ks, pad, *dil = table[name]
    return n, c, k, h, w, ks, pad, dil[0] if dil else 1


def prepare_fwd(x, wt, pad, dil, cfg, **kw):
    """The forward launch arguments of kernel_module's module (grid, args, meta, y)."""
    gc, _, st = kernel_module()
    if STRIDED:
        return gc.prepare(x, wt, (st, st), (pad, pad), (dil, dil), cfg, **kw)
    return gc.prepare(x, wt, (pad, pad), (dil, dil), cfg, **kw)


# -- --dgrad-phases: strided backward data, one launch per phase against one for all -------
def turned_by_torch(wt, order):
    """filter_turn.turned_filter(wt, order=order) by a torch copy (the dry run's offline
    driver cannot run filter_turn's Triton kernel)."""
    k, c, kh, kw = wt.shape
    m = torch.empty((c, kh * kw, k), dtype=wt.dtype, device=wt.device)
    m[:, list(order), :] = wt.permute(1, 2, 3, 0).reshape(c, kh * kw, k)
    return m.view(c, kh * kw * k)


def dgrad_launches(dy, wt, dx, ks, pad, cfg, alpha, beta, sms, dry, per_phase=True):
    """(phases4, fused, m): launch-argument lists (kernel, grid, args, meta) of gluon_conv's
    launch per phase (_launch_phases' formulation) and of gluon_dgrad_fused's one launch,
    over one phase-ordered turned filter m; fused is None where it does not apply. The
    caller holds m while it replays the launches: their TMA descriptors keep its address
    only (freed, its memory went to the next allocation: session 9's res3 'BAD')."""
    from tridnn.cuda import gluon_conv as gc
    from tridnn.cuda import gluon_dgrad_fused as gf
    from tridnn.cuda.dgrad_phases import phases
    parts, order = phases((ks, ks), (2, 2), (pad, pad), convolution=False)
    from tridnn.cuda.filter_turn import turned_filter
    m = turned_by_torch(wt, order) if dry else turned_filter(wt, order=order)
    k = wt.shape[0]
    four = []
    for part in parts if per_phase else ():
        (a, b), (th, tw) = part.offset, part.taps
        view = dx[:, :, a::2, b::2]
        w_mat = m[:, part.column * k:(part.column + th * tw) * k]
        grid, args, meta, _ = gc.prepare(dy, None, part.padding, (1, 1), cfg, y=view, alpha=alpha, w_mat=w_mat,
                                         sms=sms, beta=beta, kernel=(th, tw))
        four.append((gc.gluon_conv_fwd_kernel, grid, args, meta))
    fused = None
    if gf.why_not(dx, (2, 2), cfg) is None:
        grid, args, meta = gf.prepare(dy, wt, dx, (ks, ks), (2, 2), (pad, pad), False, cfg, alpha=alpha, beta=beta,
                                      sms=sms, m=m)
        fused = [(gf.gluon_dgrad_fused_kernel, grid, args, meta)]
    return four, fused, m


def run_launches(launches):
    from tridnn.cuda import gluon_conv as gc
    for kernel, grid, args, meta in launches:
        gc.launch(grid, args, meta, kernel=kernel)


def dgrad_reference(dy, wt, h, w, pad):
    """cuDNN's stride-2 dgrad of x [N, C, h, w] (aten.convolution_backward)."""
    n, c = dy.shape[0], wt.shape[1]
    x_like = torch.empty((n, c, h, w), device=dy.device, dtype=dy.dtype, memory_format=torch.channels_last)
    return lambda: torch.ops.aten.convolution_backward(
        dy, x_like, wt, None, [2, 2], [pad, pad], [1, 1], False, [0, 0], 1, [True, False, False])[0]


def canary_dgrad(indices, dry):
    """The fused launch of each config on DGRAD_CANARY (all SMs, and 3 programs: many tiles
    each, the ring wrapping across tiles of different phases) against float64."""
    from tridnn.cuda import gluon_conv as gc
    for i in indices:
        cfg = configs(gc)[i]
        worst = 0.0
        for n, c, k, h, w, ks, pad, alpha, beta in DGRAD_CANARY:
            dev = "cpu" if dry else "cuda"
            dy = make(n, k, c, (h + 2 * pad - ks) // 2 + 1, (w + 2 * pad - ks) // 2 + 1, ks, ks, dev, seed=i)[0]
            wt = make(n, c, k, 1, 1, ks, ks, dev, seed=i + 1)[1]
            prior = make(n, c, c, h, w, 1, 1, dev, seed=i + 2)[0]
            want = None if dry else alpha * torch.nn.grad.conv2d_input(
                (n, c, h, w), wt.double(), dy.double(), stride=2, padding=pad) + beta * prior.double()
            for sms in (SMS if dry else None, 3):
                dx = prior.clone() if beta else torch.full_like(prior, float("nan"))
                _, fused, _m = dgrad_launches(dy, wt, dx, ks, pad, cfg, alpha, beta, sms, dry, per_phase=False)
                kernel, grid, args, meta = fused[0]
                if dry:
                    kernel.warmup(*args, grid=grid, **meta)
                    continue
                run_launches(fused)
                torch.cuda.synchronize()
                err = rel_err(dx.double(), want)
                worst = max(worst, err if err == err else float("inf"))  # (NaN: an element not written)
        gsc.report_canary(i, worst)


def dgrad_phases_sweep(a, t0):
    """--dgrad-phases (see the module docstring)."""
    import triton
    from tridnn.cuda import gluon_conv as gc
    from tridnn.cuda.dgrad_phases import phases
    from tridnn.cuda.filter_turn import turned_filter
    all_cfgs = configs(gc)
    indices = [int(i) for i in a.configs.split(",") if i] or list(range(len(all_cfgs)))
    dev = gsc.cudnn_setup(a.dry_run)
    if FP32:
        torch.backends.cudnn.allow_tf32 = not FMA
        print("float32: FMA configs; cuDNN with tf32 off" if FMA else "float32: tf32 configs; cuDNN with allow_tf32",
              flush=True)
    status = {i: ("ok", 0.0) for i in indices} if a.no_canary else gsc.run_canaries(__file__, indices, a.dry_run)
    print(f"canaries of the fused launch ({time.time() - t0:.0f} s): " + ", ".join(
        f"{gc.name(all_cfgs[i])}={status[i][0]}" for i in indices), flush=True)
    rows = []
    for name in [nm for nm in a.layers.split(",") if nm]:
        n, c, k, h, w, ks, pad = DGRAD_LAYERS[name]
        oh, ow = (h + 2 * pad - ks) // 2 + 1, (w + 2 * pad - ks) // 2 + 1
        flop = gc.flops(n, c, k, oh, ow, ks, ks)
        x, wt = make(n, c, k, h, w, ks, ks, dev)
        dy = make(n, k, c, oh, ow, ks, ks, dev, seed=1)[0]
        name_d = name + "_dgrad"
        ref = None
        if not a.dry_run:
            fn = dgrad_reference(dy, wt, h, w, pad)
            ref = fn()
            us = bench(fn, a.rep)
            rows.append(dict(layer=name_d, config="cudnn", us=us, ratio=1.0, err=0.0))
            order = phases((ks, ks), (2, 2), (pad, pad), convolution=False)[1]
            turn_us = bench(lambda: turned_filter(wt, order=order), a.rep)
            rows.append(dict(layer=name_d, config="turn", us=turn_us, ratio=None, err=None,
                             note="the phase-ordered turned filter (per tridnn call)"))
            print(f"{name_d} cudnn {us:.1f} us ({flop / us * 1e-6:.0f} TFLOP/s); turn {turn_us:.1f} us", flush=True)
        cudnn_us = rows[-2]["us"] if not a.dry_run else None
        offered = {gc.name(cfg) for cfg in gc.picks(triton.cdiv(w, 2), c, False, FP32)}
        for i in indices:
            cfg = all_cfgs[i]
            if gc.name(cfg) not in offered:
                continue
            if time.time() - t0 > a.budget_s:
                rows.append(dict(layer=name_d, config=gc.name(cfg), us=None, ratio=None, err=None, note="budget"))
                continue
            dx = torch.empty((n, c, h, w), device=dev, dtype=TORCH_DTYPE, memory_format=torch.channels_last)
            try:
                four, fused, m = dgrad_launches(dy, wt, dx, ks, pad, cfg, 1.0, 0.0, SMS if a.dry_run else None,
                                             a.dry_run)
            except Exception as e:
                rows.append(dict(layer=name_d, config=gc.name(cfg), us=None, ratio=None, err=None,
                                 note=gsc.error_note(e)))
                continue
            ways = [("phases4", four)]
            if fused is None:
                rows.append(dict(layer=name_d, config="fused " + gc.name(cfg), us=None, ratio=None, err=None,
                                 note="not applicable"))
            elif status[i][0] != "ok":
                rows.append(dict(layer=name_d, config="fused " + gc.name(cfg), us=None, ratio=None, err=None,
                                 note="canary " + status[i][0]))
            else:
                ways.append(("fused", fused))
            for way, launches in ways:
                row = dict(layer=name_d, config=f"{way} {gc.name(cfg)}", us=None, ratio=None, err=None,
                           launches=len(launches))
                try:
                    if a.dry_run:
                        for kernel, grid, args, meta in launches:
                            kernel.warmup(*args, grid=grid, **meta)
                        row["note"] = "dry"
                    else:
                        dx.fill_(float("nan"))
                        run_launches(launches)
                        torch.cuda.synchronize()
                        row["err"] = rel_err(dx, ref)
                        if not row["err"] <= 2e-2:  # which phases are wrong, and again on a second run
                            by_phase = [rel_err(dx[:, :, pa::2, pb::2], ref[:, :, pa::2, pb::2])
                                        for pa in range(2) for pb in range(2)]
                            dx.fill_(float("nan"))
                            run_launches(launches)
                            torch.cuda.synchronize()
                            row["note"] = (f"BAD (phases 00/01/10/11 {'/'.join(f'{e:.0e}' for e in by_phase)};"
                                           f" again {rel_err(dx, ref):.0e})")
                        else:
                            us = bench(lambda: run_launches(launches), a.rep)
                            row.update(us=us, ratio=us / cudnn_us)
                except Exception as e:
                    row["note"] = gsc.error_note(e)
                rows.append(row)
                print(f"{name_d} {row['config']:30s} " + (f"{row['us']:8.1f} us x{row['ratio']:.2f} "
                      f"err {row['err']:.1e}" if row["us"] else row.get("note", "")), flush=True)
    print(f"\ntotal {time.time() - t0:.0f} s\n")
    print(f"{'layer':18s} {'config':30s} {'us':>8s} {'/cudnn':>7s} {'err':>8s} note")
    for r in rows:
        us = f"{r['us']:8.1f}" if r["us"] else f"{'-':>8s}"
        ratio = f"{r['ratio']:7.2f}" if r["ratio"] else f"{'-':>7s}"
        err = f"{r['err']:8.1e}" if r["err"] is not None else f"{'-':>8s}"
        print(f"{r['layer']:18s} {r['config']:30s} {us} {ratio} {err} {r.get('note', '')}")
    gsc.write_json(a.out, "gluon_dgrad_phases_fp32.json" if FP32 else "gluon_dgrad_phases.json", dict(
        dry_run=a.dry_run, dtype=DTYPE, canaries={gc.name(all_cfgs[i]): status[i][0] for i in indices},
        rows=rows, seconds=time.time() - t0))


# -- canary (child process) ---------------------------------------------------------------
def canary(indices, dry):
    """Run each config on the CANARY problems, on all SMs and on a grid of 3 programs (many
    tiles each: the ring wraps across tiles, ping-pong consumers alternate); print one
    line per config, flushed."""
    gc, kernel, st = kernel_module()
    dev = "cpu" if dry else "cuda"
    for i in indices:
        cfg = configs(gc)[i]
        worst = 0.0
        for case in STRIDED_CANARY if STRIDED else CANARY:
            n, c, k, h, w, kh, kw, pad, alpha = case
            if c % cfg["BLOCK_K"]:
                continue
            x, wt = make(n, c, k, h, w, kh, kw, dev, seed=i)
            want = None if dry else alpha * F.conv2d(x.double(), wt.double(), padding=pad, stride=st)
            for sms in (SMS if dry else None, 3):
                grid, args, meta, y = prepare_fwd(x, wt, pad, 1, cfg, alpha=alpha, sms=sms)
                if dry:
                    kernel.warmup(*args, grid=grid, **meta)
                    continue
                gc.launch(grid, args, meta, y)
                torch.cuda.synchronize()
                worst = max(worst, rel_err(y.double(), want))
        gsc.report_canary(i, worst)


# -- --api: the public API with the tuner -------------------------------------------------
def _cfg_name(cfg) -> str:
    from tridnn.cuda import gluon_conv as gc
    if cfg.get("GLUON"):
        return "gluon " + gc.name(cfg)
    flags = "".join(f" {k}{'' if v is True else v}" for k, v in cfg.items()
                    if k in ("PERSISTENT", "FUSED", "EPI_SPLIT") and v)
    return (f"tma {cfg.get('NB', 1)}x{cfg['BH']}x{cfg['BW']}x{cfg['BLOCK_N']} w{cfg['num_warps']} "
            f"s{cfg['num_stages']}{flags}")


def api_sweep(a, directions, t0):
    """Each layer and direction through tridnn's public API on a fresh tuner that records
    every candidate's timing (see the module docstring)."""
    import warnings

    import triton
    import tridnn
    from tridnn.algorithms import registry
    from tridnn.algorithms.problem import ConvProblem
    from tridnn.cuda import common
    from tridnn.cuda import gluon_conv as gc
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import bench_gpu_conv as bg

    gc.TF32_OFFERED = gc.FMA_OFFERED = True  # (whatever TRIDNN_GLUON_TF32/FMA say: the sweep measures the configs)
    if FP32:  # cuDNN's reference in the configs' math: tf32 (TENSOR_OP) or strict (FMA)
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = not FMA

    dev = "cpu" if a.dry_run else "cuda"
    dtype = "float32" if FP32 else "float16" if a.dry_run else "bfloat16"  # (the interpreter has no bfloat16)
    math = (tridnn.MathType.FMA if FMA else tridnn.MathType.TENSOR_OP if FP32  # (what offers the float32 configs)
            else tridnn.MathType.DEFAULT)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None) if a.dry_run else \
        tridnn.Handle(device="cuda", find_cache=None)
    algos = {"fwd": registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM),
             "bwd_data": registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)}
    log = []
    current = [None]
    real_time = common.gpu_time_ms  # what Tuner.pick times each candidate with (CUDA graphs)

    def recording(fn, *args, **kw):
        ms = real_time(fn, *args, **kw)
        log.append((current[0], ms))
        return ms

    class Recording(common.Tuner):
        def pick(self, key, candidates, launch, out, device, scratch_ok=False):
            def tagged(cfg, o):
                current[0] = cfg
                return launch(cfg, o)
            return super().pick(key, candidates, tagged, out, device, scratch_ok)

    common.gpu_time_ms = recording  # (before session 27 this patched do_bench, which the tuner no longer calls)
    rows = []
    layers = [nm for nm in a.layers.split(",") if nm]
    for name, direction in [(nm, d) for nm in layers for d in directions]:
        if time.time() - t0 > a.budget_s:
            print(f"{name} {direction}: budget spent", flush=True)
            continue
        n, c, k, h, w, ks, pad, dil = layer_geometry(NAMED_LAYERS, name)
        if a.dry_run:  # the plumbing only, on a tiny problem under the interpreter
            n, c, k, h, w = 2, 64, 64, min(h, 6), min(w, 6)
        p = dict(C=c, K=k, spatial=(h, w), kernel=(ks, ks), stride=(1, 1), pad=(pad, pad), dilation=(dil, dil),
                 groups=1)
        cd, xd, wd, yd, x, wt, dy = bg.make(p, n, dtype, math, dev)
        algo = algos[direction]
        problem = ConvProblem(direction, xd, wd, yd, cd)
        need = algo.workspace_size(problem)
        ws = torch.empty(need, dtype=torch.uint8, device=dev) if need else None
        out = torch.empty_like(x if direction == "bwd_data" else dy)
        call = bg.tridnn_call(handle, direction, algo, cd, xd, wd, yd, x, wt, dy, out, ws)
        type(algo).tuner = Recording()
        del log[:]
        t1 = time.time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        tune_s = time.time() - t1
        dropped = [str(m.message)[:120] for m in caught if "disagrees" in str(m.message)]
        best = list(type(algo).tuner._best.values())
        pick = _cfg_name(best[0]) if best else "?"
        row = dict(layer=name, direction=direction, pick=pick, tune_s=round(tune_s, 1), dropped=dropped,
                   candidates=[(_cfg_name(cfg), ms * 1e3) for cfg, ms in log])
        if not a.dry_run:
            torch.cuda.synchronize()
            ref = bg.torch_conv(direction, p, x, wt, dy)
            row["err"] = bg.rel_err(out, ref())
            row["cudnn_us"] = bg.bench(ref) * 1e6
            row["api_us"] = bg.bench(call) * 1e6
            row["api_eager_us"] = triton.testing.do_bench(call, warmup=5, rep=30, return_mode="median") * 1e3
        rows.append(row)
        tma = sorted((c for c in row["candidates"] if c[0].startswith("tma")), key=lambda c: c[1])[:3]
        glu = [c for c in row["candidates"] if c[0].startswith("gluon")]
        print(f"{name} {direction}: pick {pick} (tuning {tune_s:.0f} s)"
              + (f"; api {row['api_us']:.1f} us (eager {row['api_eager_us']:.1f}), cuDNN {row['cudnn_us']:.1f}, "
                 f"err {row['err']:.1e}" if "api_us" in row else ""), flush=True)
        for cname, us in tma + glu:
            print(f"    {cname:40s} {us:8.1f} us (tuner)", flush=True)
        for d in dropped:
            print(f"    DROPPED: {d}", flush=True)
    common.gpu_time_ms = real_time

    print(f"\ntotal {time.time() - t0:.0f} s\n")
    print(f"{'layer':10s} {'dir':8s} {'cuDNN':>7s} {'api':>7s} {'eager':>7s} {'/cudnn':>6s} {'best tma':>8s} "
          f"{'best gl':>8s} {'err':>8s} pick")
    for r in rows:
        tma = min((us for cn, us in r["candidates"] if cn.startswith("tma")), default=float("nan"))
        glu = min((us for cn, us in r["candidates"] if cn.startswith("gluon")), default=float("nan"))
        f = lambda key: f"{r[key]:7.1f}" if key in r else f"{'-':>7s}"  # noqa: E731
        ratio = f"{r['api_us'] / r['cudnn_us']:6.2f}" if "api_us" in r else f"{'-':>6s}"
        err = f"{r['err']:8.1e}" if "err" in r else f"{'-':>8s}"
        print(f"{r['layer']:10s} {r['direction']:8s} {f('cudnn_us')} {f('api_us')} {f('api_eager_us')} {ratio} "
              f"{tma:8.1f} {glu:8.1f} {err} {r['pick']}")
    gsc.write_json(a.out, "gluon_api.json", dict(dry_run=a.dry_run, rows=rows, seconds=time.time() - t0))


# -- the sweep ----------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="directory for gluon_conv.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU: build and compile for sm_90 only")
    ap.add_argument("--layers", default=None, help="comma-separated subset of " + ",".join(LAYERS)
                    + " (or " + ",".join([*DILATED_LAYERS, *FLAT_LAYERS]) + ")"
                    + " (--strided: " + ",".join(STRIDED_LAYERS) + ")")
    ap.add_argument("--configs", default="", help="comma-separated indices into gluon_conv.CONFIGS (default all)")
    ap.add_argument("--rep", type=int, default=40, help="milliseconds of graph replays per timing")
    ap.add_argument("--budget-s", type=float, default=140.0, help="stop starting new configs after this")
    ap.add_argument("--no-canary", action="store_true", help="skip the child-process trial runs")
    ap.add_argument("--directions", default="fwd", help="fwd and/or bwd_data (comma-separated)")
    ap.add_argument("--api", action="store_true", help="time tridnn's public API with its tuner instead")
    ap.add_argument("--strided", action="store_true", help="gluon_conv_strided on the stride-2 layers")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "fma"],
                    help="float32: the TF32 configs against cuDNN/cuBLAS with tf32 allowed; fma: the FMA "
                         "configs (float32, CUDA-core products) against them with tf32 off")
    ap.add_argument("--dgrad-phases", action="store_true",
                    help="stride-2 backward data: cuDNN, a launch per phase, gluon_dgrad_fused's one launch")
    ap.add_argument("--canary", help=argparse.SUPPRESS)
    a = ap.parse_args()
    layer_table = DGRAD_LAYERS if DGRAD_PHASES else STRIDED_LAYERS if STRIDED else LAYERS
    if a.layers is None:
        a.layers = ",".join(layer_table)
    if layer_table is LAYERS:  # the dilated layers by name only
        layer_table = NAMED_LAYERS
    if STRIDED and (a.api or a.directions != "fwd"):
        ap.error("--strided times the forward kernel directly (no --api, no bwd_data)")
    if a.dry_run and not a.api:
        offline_driver()
    if DGRAD_PHASES and (STRIDED or a.api):
        ap.error("--dgrad-phases times the kernels directly (no --strided, no --api)")
    if a.canary is not None:
        (canary_dgrad if DGRAD_PHASES else canary)([int(i) for i in a.canary.split(",") if i], a.dry_run)
        return
    if DGRAD_PHASES:
        for name in a.layers.split(","):
            if name and name not in DGRAD_LAYERS:
                ap.error(f"unknown layer {name}")
        dgrad_phases_sweep(a, time.time())
        return

    gc, kernel, st = kernel_module()
    t0 = time.time()
    directions = [d for d in a.directions.split(",") if d]
    if any(d not in ("fwd", "bwd_data") for d in directions):
        ap.error("--directions takes fwd and bwd_data")
    if a.api:
        api_sweep(a, directions, t0)
        return
    indices, layers = gsc.select(ap, a, len(configs(gc)), layer_table)
    dev = gsc.cudnn_setup(a.dry_run)
    if FP32:  # the references in tf32 as the TF32 configs (TENSOR_OP math in tridnn), or strict for FMA
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = not FMA
        print("float32: FMA configs; cuDNN and cuBLAS with tf32 off" if FMA else
              "float32: tf32 configs; cuDNN and cuBLAS with allow_tf32", flush=True)

    status = {i: ("ok", 0.0) for i in indices} if a.no_canary else gsc.run_canaries(__file__, indices, a.dry_run)
    print(f"canaries ({time.time() - t0:.0f} s): " + ", ".join(
        f"{gc.name(configs(gc)[i])}={status[i][0]}" for i in indices), flush=True)

    rows = []
    for name, direction in [(nm, d) for nm in layers for d in directions]:
        n, c, k, h, w, ks, pad, dil = layer_geometry(layer_table, name)
        oh, ow = (h + 2 * pad - dil * (ks - 1) - 1) // st + 1, (w + 2 * pad - dil * (ks - 1) - 1) // st + 1
        flop = gc.flops(n, c, k, oh, ow, ks, ks)
        x, wt = make(n, c, k, h, w, ks, ks, dev)
        w_mat = gc.filter_matrix(wt)
        ref = None
        bwd = direction == "bwd_data"
        if bwd:  # dx [n, c, h, w] = conv(dy [n, k, oh, ow], turned filter [c, ks*ks*k]), padding ks-1-pad
            dy = make(n, k, c, oh, ow, ks, ks, dev, seed=1)[0]
            problem = types.SimpleNamespace(mode=1)  # cross-correlation: the taps are turned
            if a.dry_run:  # (filter_turn's Triton kernel cannot run on the offline driver: torch's copy)
                t_mat = wt.flip((2, 3)).permute(1, 2, 3, 0).contiguous().view(c, ks * ks * k)
            else:
                t_mat = gc.turned_filter(problem, wt)
            name_d = name + "_dgrad"
        else:
            name_d = name
        if not a.dry_run and bwd:
            who = "cudnn"
            fn = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
                dy, x, wt, None, [1, 1], [pad, pad], [dil, dil], False, [0, 0], 1, [True, False, False])[0]
            ref = fn()
            us = bench(fn, a.rep)
            rows.append(dict(layer=name_d, config=who, us=us, tflops=flop / us * 1e-6, ratio=1.0, err=0.0,
                             useful=1.0, fill=1.0))
            print(f"{name_d:9s} {who} {us:8.1f} us {flop / us * 1e-6:6.0f} TFLOP/s", flush=True)
            turn_us = bench(lambda: gc.turned_filter(problem, wt), a.rep)
            rows.append(dict(layer=name_d, config="turn", us=turn_us, tflops=None, ratio=None, err=None,
                             useful=1.0, fill=1.0, note="the turned filter's copy (per tridnn call)"))
            print(f"{name_d:9s} turn {turn_us:8.1f} us", flush=True)
        elif not a.dry_run:
            if ks == 1 and n == 1 and h == 1:  # x is an [M, C] matrix: the reference is cuBLAS
                who = "cublas"
                a2, b2 = x.permute(0, 2, 3, 1).reshape(w, c), w_mat.t()
                fn = lambda: torch.matmul(a2, b2)  # noqa: E731
                ref = fn().t().reshape(1, k, 1, w)
            else:
                who = "cudnn"
                fn = lambda: F.conv2d(x, wt, padding=pad, stride=st, dilation=dil)  # noqa: E731
                ref = fn()
            us = bench(fn, a.rep)
            rows.append(dict(layer=name, config=who, us=us, tflops=flop / us * 1e-6, ratio=1.0, err=0.0,
                             useful=1.0, fill=1.0))
            print(f"{name:9s} {who} {us:8.1f} us {flop / us * 1e-6:6.0f} TFLOP/s", flush=True)
        refs = [r for r in rows if r["layer"] == name_d and r["config"] in ("cudnn", "cublas")]
        cudnn_us = refs[-1]["us"] if refs else None
        # backward data: the output is dx (h x w, c channels), the reduction dy's k channels
        o_n, o_h, o_w, o_k, red = (n, h, w, c, k) if bwd else (n, oh, ow, k, c)
        for i in indices:
            cfg = configs(gc)[i]
            # a one-row box over a 1x1 layer without padding runs the flat GEMM view (gluon_conv.flat_ok)
            flat = ks == 1 and pad == 0 and cfg["NB"] == 1 and cfg["BH"] == 1
            u_n, u_h, u_w = (1, 1, o_n * o_h * o_w) if flat else (o_n, o_h, o_w)
            row = dict(layer=name_d, config=gc.name(cfg), us=None, tflops=None, ratio=None, err=None,
                       useful=round(useful(cfg, u_n, u_h, u_w), 3), fill=round(fill(cfg, u_n, o_k, u_h, u_w), 3),
                       shared=gc.shared_bytes(cfg))
            if not applies(cfg, u_n, red, o_k, u_h, u_w):
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
                y = torch.empty((o_n, o_k, o_h, o_w), device=dev, dtype=TORCH_DTYPE,
                                memory_format=torch.channels_last)
                if bwd:
                    bp = dil * (ks - 1) - pad
                    grid, args, meta, y = gc.prepare(dy, None, (bp, bp), (dil, dil), cfg, y=y, w_mat=t_mat,
                                                     sms=SMS if a.dry_run else None, kernel=(ks, ks))
                else:
                    extra = {} if STRIDED else dict(w_mat=w_mat)
                    grid, args, meta, y = prepare_fwd(x, wt, pad, dil, cfg, y=y, sms=SMS if a.dry_run else None,
                                                      **extra)
                if a.dry_run:
                    kernel.warmup(*args, grid=grid, **meta)
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
                row["note"] = gsc.error_note(e)
            rows.append(row)
            print(f"{name_d:9s} {row['config']:22s} " + (f"{row['us']:8.1f} us {row['tflops']:6.0f} TFLOP/s "
                  f"x{row['ratio']:.2f} err {row['err']:.1e}" if row["us"] else row.get("note", "")), flush=True)

    print(f"\ntotal {time.time() - t0:.0f} s\n")
    print(f"{'layer':15s} {'config':22s} {'us':>8s} {'TFLOP/s':>8s} {'/cudnn':>7s} {'err':>8s} {'useful':>6s} "
          f"{'fill':>5s} note")
    for r in rows:
        us = f"{r['us']:8.1f}" if r["us"] else f"{'-':>8s}"
        tf = f"{r['tflops']:8.0f}" if r["tflops"] else f"{'-':>8s}"
        ratio = f"{r['ratio']:7.2f}" if r["ratio"] else f"{'-':>7s}"
        err = f"{r['err']:8.1e}" if r["err"] is not None else f"{'-':>8s}"
        print(f"{r['layer']:15s} {r['config']:22s} {us} {tf} {ratio} {err} {r['useful']:6.2f} {r['fill']:5.2f} {r.get('note', '')}")
    gsc.write_json(a.out, "gluon_conv_fp32.json" if FP32 else "gluon_conv.json", dict(
        dry_run=a.dry_run, dtype=DTYPE, canaries={gc.name(configs(gc)[i]): status[i][0] for i in indices},
        rows=rows, seconds=time.time() - t0))


if __name__ == "__main__":
    main()
