"""Depthwise backward kernels in Triton: memory bound, channels on the fast axis.

With one input channel per group a GEMM tile is almost all padding (tl.dot needs 16
columns), so the backward directions of depthwise convolutions get their own kernels,
the backward twins of conv_direct.py. Backward data ALGO_1 and backward filter
ALGO_0/ALGO_1 route depthwise problems (1 input channel and at most
``MAX_MULTIPLIER`` output channels per group) here.

- ``dw_bwd_data_kernel``: a tile of dx pixels x channels; per tap, the dy pixel that
  read it (o * stride = i + pad - t * dilation, when divisible and in range) times the
  tap's weight, over the group's output channels. Each dx element written once.
- ``dw_bwd_filter_kernel``: per (channel block, tap, slice of the N x pixels rows), a
  float32 column sum of dy * x over the slice, written to the slice's partial (or
  atomically added, for ALGO_0); ``conv_bwd_filter_implicit_gemm.wgrad_finish`` adds
  the slices in order and blends alpha/beta.
- ``dw3_wgrad_kernel``: the 3x3 (2-D, any stride, dilation, padding) filter gradient in
  one pass: a program takes a channel block and a slice of output rows, loads each dy
  tile [BW columns, BC channels] once and the nine x tiles it meets (overlapping: L1),
  and keeps one float32 accumulator per tap. dy and x cross DRAM about once instead of
  nine times (the per-tap kernel above re-read both for every tap). Same partial
  layout, same finish, ATOMIC for ALGO_0.
- backward data of a stride-1 3x3 layer with multiplier 1 is the forward row kernel of
  conv_direct (``dw3_rows_kernel``) on dy with the flipped filter and padding 2 - pad.
- backward data at a stride > 1: ``dw_bwd_data_phase_kernel`` (one dx phase a program),
  and for 3x3 stride 2 padding 1 on Hopper also conv_depthwise_gluon's DATA walk (dy rows
  streamed by TMA; each makes two dx rows), both tuner candidates.
"""
from __future__ import annotations

import dataclasses
import os

import torch
import triton
import triton.language as tl

from . import conv_depthwise_tma, conv_depthwise_wgrad, conv_depthwise_wgrad_tiles, conv_direct
from .common import Tuner, cdiv, launch, next_pow2, problem_key, sm_count, split_rows, wide
from .epilogue import store_tile
from .geometry import geometry, needs_int64, strides5

try:
    from . import conv_depthwise_gluon, conv_depthwise_gluon_wgrad
except ImportError:  # a Triton without Gluon
    conv_depthwise_gluon = conv_depthwise_gluon_wgrad = None

MAX_MULTIPLIER = 16


def routes_here(problem) -> bool:
    """Depthwise: one input channel per group, a small channel multiplier."""
    return problem.w.c == 1 and problem.k // problem.groups <= MAX_MULTIPLIER


@triton.jit
def _source(i, pad, t, dil, s, size):
    num = i + pad - t * dil
    o = num // s
    return o, (num >= 0) & (num - o * s == 0) & (o < size)


@triton.jit
def _add_tap(acc, dy_ptr, w_ptr, row, w_tap, ok, offs_c, mask_c, Kg, dys_k, ws_k):
    """acc + one tap's contribution to dx: the dy pixels at ``row`` (where ``ok``) times
    the tap's weight, summed over the Kg output channels of each input channel."""
    mask = ok[:, None] & mask_c[None, :]
    for j in range(0, Kg):
        k = offs_c * Kg + j
        v = tl.load(dy_ptr + row[:, None] + (k * dys_k)[None, :], mask=mask, other=0.0)
        wv = tl.load(w_ptr + k * ws_k + w_tap, mask=mask_c, other=0.0)
        acc += v.to(tl.float32) * wv.to(tl.float32)[None, :]
    return acc


@triton.jit(do_not_specialize=['P', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW'])
def dw_bwd_data_kernel(dy_ptr, w_ptr, dx_ptr, P, C, Kg, ID, IH, IW, OD, OH, OW, KD, KH, KW,
                       SD, SH, SW, PD, PH, PW, DD, DH, DW,
                       dys_n, dys_k, dys_d, dys_h, dys_w, ws_k, ws_d, ws_h, ws_w,
                       xs_n, xs_c, xs_d, xs_h, xs_w, alpha, beta,
                       BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, FLIP: tl.constexpr,
                       BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    offs_p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_p = offs_p < P
    mask_c = offs_c < C
    nn, idd, ih, iw = split_rows(offs_p, ID, IH, IW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        dys_n, dys_k, dys_d, dys_h, dys_w = wide((dys_n, dys_k, dys_d, dys_h, dys_w))
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for td in range(0, KD):
        od, okd = _source(idd, PD, td, DD, SD, OD)
        for th in range(0, KH):
            oh, okh = _source(ih, PH, th, DH, SH, OH)
            for tw in range(0, KW):
                ow, okw = _source(iw, PW, tw, DW, SW, OW)
                ok = mask_p & okd & okh & okw
                row = nn * dys_n + od * dys_d + oh * dys_h + ow * dys_w
                if FLIP:
                    w_tap = (KD - 1 - td) * ws_d + (KH - 1 - th) * ws_h + (KW - 1 - tw) * ws_w
                else:
                    w_tap = td * ws_d + th * ws_h + tw * ws_w
                acc = _add_tap(acc, dy_ptr, w_ptr, row, w_tap, ok, offs_c, mask_c, Kg, dys_k, ws_k)
    row_x = nn * xs_n + idd * xs_d + ih * xs_h + iw * xs_w
    store_tile(acc, row_x, row_x, offs_c, mask_p, mask_c, dx_ptr, xs_c, dx_ptr, 0, dx_ptr, 0,
               alpha, beta, 0.0, 0.0, 1.0, -1, False, False, BETA_ZERO)


@triton.jit(do_not_specialize=['P', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW', 'rows_per_split'])
def dw_bwd_filter_kernel(x_ptr, dy_ptr, part_ptr, P, K, Kg, ID, IH, IW, OD, OH, OW, KD, KH, KW,
                         SD, SH, SW, PD, PH, PW, DD, DH, DW,
                         xs_n, xs_c, xs_d, xs_h, xs_w, dys_n, dys_k, dys_d, dys_h, dys_w, rows_per_split,
                         BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, ATOMIC: tl.constexpr, INT64: tl.constexpr):
    """part[slice, k, tap] = sum over the slice's rows of dy[row, k] * x[row shifted by tap, k // Kg]."""
    offs_k = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    tap = tl.program_id(1)
    split = tl.program_id(2)
    T = KD * KH * KW
    mask_k = offs_k < K
    tw = tap % KW
    th = (tap // KW) % KH
    td = tap // (KW * KH)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
        dys_n, dys_k, dys_d, dys_h, dys_w = wide((dys_n, dys_k, dys_d, dys_h, dys_w))
    x_chan = (offs_k // Kg) * xs_c
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    start = split * rows_per_split
    end = tl.minimum(start + rows_per_split, P)
    for p0 in range(start, end, BLOCK_P):
        offs_p = p0 + tl.arange(0, BLOCK_P)
        mask_p = offs_p < end
        nn, od, oh, ow = split_rows(offs_p, OD, OH, OW)
        idd = od * SD - PD + td * DD
        ih = oh * SH - PH + th * DH
        iw = ow * SW - PW + tw * DW
        ok = mask_p & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
        g = tl.load(dy_ptr + (nn * dys_n + od * dys_d + oh * dys_h + ow * dys_w)[:, None] + (offs_k * dys_k)[None, :],
                    mask=mask_p[:, None] & mask_k[None, :], other=0.0)
        v = tl.load(x_ptr + (nn * xs_n + idd * xs_d + ih * xs_h + iw * xs_w)[:, None] + x_chan[None, :],
                    mask=ok[:, None] & mask_k[None, :], other=0.0)
        acc += g.to(tl.float32) * v.to(tl.float32)
    col = tl.sum(acc, axis=0)
    slot = 0 if ATOMIC else split
    ptrs = part_ptr + (slot * K + offs_k).to(tl.int64) * T + tap  # partial layout [slices, K, T, 1]
    if ATOMIC:
        tl.atomic_add(ptrs, col, mask=mask_k)
    else:
        tl.store(ptrs, col, mask=mask_k)


@triton.jit(do_not_specialize=['P', 'IH', 'IW', 'OH', 'OW', 'SH', 'SW', 'PH', 'PW', 'DH', 'DW', 'HA', 'WB'])
def dw_bwd_data_phase_kernel(
        dy_ptr, w_ptr, dx_ptr,
        # sizes: channels, output channels per channel, H x W of dx and dy, the filter,
        # stride, padding, dilation, the largest phase's rows x columns (ceil(IH / SH),
        # ceil(IW / SW)) and N x HA x WB
        P, C, Kg, IH, IW, OH, OW, SH, SW, PH, PW, DH, DW, HA, WB,
        # element strides (n, k, h, w) of dy, (k, h, w) of w, (n, c, h, w) of dx
        dys_n, dys_k, dys_h, dys_w, ws_k, ws_h, ws_w, xs_n, xs_c, xs_h, xs_w,
        alpha, beta,
        KH: tl.constexpr, KW: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, FLIP: tl.constexpr,
        BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    """Strided backward data, one (row phase, column phase) of dx per program: the dx
    pixels (a * SH + rh, b * SW + rw) read dy (a + eh, b + ew) at the taps with
    (rh + PH - th * DH) divisible by SH (and likewise for w), eh = that quotient. Which taps
    apply and their dy offsets are program scalars, so the loads are dense (no per-pixel
    divisibility test) and the other taps' loads move no bytes (stride 2, 3x3: 4, 2, 2 or
    1 taps of 9). The filter size is a constexpr: the taps unroll and their loads are in
    flight together (a runtime tap loop had one load per iteration)."""
    # -- map the program to a tile of one phase's pixels (n, a, b) and a channel block
    phase = tl.program_id(1)
    rh = phase // SW
    rw = phase - rh * SW
    offs_p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    b = offs_p % WB
    t = offs_p // WB
    a = t % HA
    n = t // HA
    ih = a * SH + rh
    iw = b * SW + rw
    mask_p = (offs_p < P) & (ih < IH) & (iw < IW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        dys_n, dys_k, dys_h, dys_w = wide((dys_n, dys_k, dys_h, dys_w))
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
    offs_c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_c = offs_c < C
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    # -- loop: every tap, unrolled; the phase's own (a program scalar) read dy rows a + eh,
    # columns b + ew, the others are masked off whole, so all loads issue back to back
    for th in tl.static_range(KH):
        num_h = rh + PH - th * DH
        oh = a + num_h // SH
        ok_h = mask_p & (num_h % SH == 0) & (oh >= 0) & (oh < OH)
        for tw in tl.static_range(KW):
            num_w = rw + PW - tw * DW
            ow = b + num_w // SW
            ok = ok_h & (num_w % SW == 0) & (ow >= 0) & (ow < OW)
            row = n * dys_n + oh * dys_h + ow * dys_w
            if FLIP:
                w_tap = (KH - 1 - th) * ws_h + (KW - 1 - tw) * ws_w
            else:
                w_tap = th * ws_h + tw * ws_w
            acc = _add_tap(acc, dy_ptr, w_ptr, row, w_tap, ok, offs_c, mask_c, Kg, dys_k, ws_k)
    # -- store the phase's dx pixels
    row_x = n * xs_n + ih * xs_h + iw * xs_w
    store_tile(acc, row_x, row_x, offs_c, mask_p, mask_c, dx_ptr, xs_c, dx_ptr, 0, dx_ptr, 0,
               alpha, beta, 0.0, 0.0, 1.0, -1, False, False, BETA_ZERO)


def phase_backward_applies(problem) -> bool:
    """dw_bwd_data_phase_kernel's case: 2-D (or 1-row) depthwise with a stride > 1."""
    geo = geometry(problem)
    return geo.cg == 1 and geo.inp[0] == 1 and geo.out[0] == 1 and geo.ker[0] == 1 and geo.stride[0] == 1 \
        and max(geo.stride[1:]) > 1


def phase_configs(device, c):
    """(BLOCK_P, BLOCK_C, warps); the first is the older per-tap kernel's tile (sm_90 bf16:
    186 registers with the nine taps unrolled; 32x32 and 16x64: 124-132)."""
    if device.type != "cuda":
        return [dict(BLOCK_P=16, BLOCK_C=16, num_warps=1)]
    out = []
    for bp, bc, warps in ((64, 64, 4), (32, 64, 4), (128, 32, 4), (64, 32, 4), (32, 128, 4), (16, 128, 4),
                          (128, 64, 8), (64, 128, 8), (32, 32, 4), (16, 64, 4)):
        if bc <= max(32, next_pow2(c)):
            out.append(dict(BLOCK_P=bp, BLOCK_C=bc, num_warps=warps))
    return out


def phase_data_candidates(device, geo, gluon_itemsize=None):
    """Strided backward data: the phase kernel's configs (first: the reference), then, when
    conv_depthwise_gluon's stride-2 walk takes the problem (gluon_itemsize: its data's
    itemsize, else None), that walker's configs (KIND gluon)."""
    out = phase_configs(device, geo.c)
    if gluon_itemsize is not None:
        out = out + conv_depthwise_gluon.configs(geo.out[1], geo.out[2], geo.c, gluon_itemsize, data=True)
    return out


def gluon_data_why_not(problem, dy, w, dx):
    """conv_depthwise_gluon.why_not_data for this problem ("not offered" when switched off or
    Triton has no Gluon), None when its stride-2 walk may run."""
    if conv_depthwise_gluon is None or not conv_depthwise_gluon.OFFERED:
        return "the Gluon depthwise walker is not offered (TRIDNN_GLUON_DW=0, or a Triton without Gluon)"
    geo = geometry(problem)
    return conv_depthwise_gluon.why_not_data(dy, w, dx, geo.stride[1:], geo.pad[1:], geo.dil[1:])


def launch_phase(problem, dy, w, dx, alpha, beta, cfg):
    geo = geometry(problem)
    nd = problem.nd
    (_, ih, iw), (_, oh, ow) = geo.inp, geo.out
    (_, kh, kw), (_, sh, sw), (_, ph, pw), (_, dh, dw) = geo.ker, geo.stride, geo.pad, geo.dil
    ha, wb = cdiv(ih, sh), cdiv(iw, sw)
    ds, ws, xs = strides5(dy, nd), strides5(w, nd), strides5(dx, nd)
    grid = (cdiv(geo.n * ha * wb, cfg["BLOCK_P"]), sh * sw, cdiv(geo.c, cfg["BLOCK_C"]))
    launch(dw_bwd_data_phase_kernel, grid, (
        dy, w, dx, geo.n * ha * wb, geo.c, geo.kg, ih, iw, oh, ow, sh, sw, ph, pw, dh, dw, ha, wb,
        ds[0], ds[1], ds[3], ds[4], ws[0], ws[3], ws[4], xs[0], xs[1], xs[3], xs[4], float(alpha), float(beta)),
        dict(KH=kh, KW=kw, BLOCK_P=cfg["BLOCK_P"], BLOCK_C=cfg["BLOCK_C"], FLIP=problem.mode == 0,
             BETA_ZERO=beta == 0, INT64=needs_int64(dy, dx)), dict(num_warps=cfg["num_warps"]))


def rows3_backward_applies(problem) -> bool:
    """Backward data through dw3_rows_kernel: stride-1, undilated 3x3, one filter per channel."""
    return conv_direct.rows3_applies(problem) and problem.k == problem.c


_data_tuner = Tuner()


def rows3_data_candidates(device, c, gluon_shape=None):
    """Stride-1 backward data: the row kernel's configs (first: the conservative one), then
    dw_taps_kernel's (KIND taps2d), then on the GPU the TMA row walker's (KIND tma,
    conv_depthwise_tma), then on Hopper the Gluon walker's (KIND gluon,
    conv_depthwise_gluon; gluon_shape: conv_direct.gluon_dw3_shape_of's answer), all
    reading dy with the flipped filter."""
    tma = conv_depthwise_tma.fwd_configs(device, c) if device.type == "cuda" else []
    gluon = []
    if gluon_shape is not None:
        from . import conv_depthwise_gluon
        gluon = conv_depthwise_gluon.configs(gluon_shape[0], gluon_shape[1], c, gluon_shape[2])
    return conv_direct.rows3_configs(device, c) + [dict(cfg, KIND="taps2d")
                                                   for cfg in conv_direct.taps2d_configs(device, c)] + tma + gluon


def backward_data(problem, dy, w, dx, alpha, beta) -> None:
    geo = geometry(problem)
    nd = problem.nd
    if rows3_backward_applies(problem):
        # dx[i] = sum_t dy[i + pad - t] w[t] = sum_t' dy[i - (2 - pad) + t'] w[2 - t']
        pad = (2 - geo.pad[1], 2 - geo.pad[2])
        flip = problem.mode != 0  # flipped relative to the forward's reading

        def run(c, out, a=1.0, b=0.0):
            if c.get("KIND") == "taps2d":
                # the same as a forward over dy (dx's geometry as its output) for dw_taps_kernel
                fwd = dataclasses.replace(geo, inp=geo.out, out=geo.inp, pad=(0,) + pad)
                conv_direct.launch_taps2d(dy, w, out, fwd, a, b, None, c, flip, nd)
            elif c.get("KIND") == "tma":
                first = conv_direct.rows3_configs(dx.device, geo.c)[0]
                conv_direct.launch_tma_or(dy, w, out, nd, (1, 1), pad, a, b, None, c, flip,
                                          lambda: conv_direct.launch_rows3(dy, w, out, geo, pad, a, b, None, first,
                                                                           flip, nd))
            elif c.get("KIND") == "gluon":
                first = conv_direct.rows3_configs(dx.device, geo.c)[0]
                conv_direct.launch_gluon_or(dy, w, out, pad, a, b, None, c, flip,
                                            lambda: conv_direct.launch_rows3(dy, w, out, geo, pad, a, b, None, first,
                                                                             flip, nd))
            else:
                conv_direct.launch_rows3(dy, w, out, geo, pad, a, b, None, c, flip, nd)
        # (the lists are built on the tuner's miss only: host time per call)
        shape = lambda: conv_direct.gluon_dw3_shape_of(dy, w, dx) if dx.device.type == "cuda" else None
        cfg = _data_tuner.pick((problem_key(problem), "dw3-rows-bwd-data"),
                               lambda: rows3_data_candidates(dx.device, geo.c, shape()), run, dx, dx.device)
        run(cfg, dx, alpha, beta)
        return
    if phase_backward_applies(problem):
        def run_phase(c, out, a=1.0, b=0.0):
            if c.get("KIND") == "gluon":  # when this call's tensors qualify, else the first phase config
                if gluon_data_why_not(problem, dy, w, out) is None:
                    conv_depthwise_gluon.conv_data(dy, w, out, c, a, b, flip=problem.mode == 0)
                else:
                    launch_phase(problem, dy, w, out, a, b, phase_configs(dx.device, geo.c)[0])
            else:
                launch_phase(problem, dy, w, out, a, b, c)
        gluon = lambda: dx.device.type == "cuda" and gluon_data_why_not(problem, dy, w, dx) is None
        cfg = _data_tuner.pick((problem_key(problem), "dw-phase-bwd-data"),
                               lambda: phase_data_candidates(dx.device, geo, dy.element_size() if gluon() else None),
                               run_phase, dx, dx.device)
        run_phase(cfg, dx, alpha, beta)
        return
    gpu = dx.device.type == "cuda"
    bp, bc = (64, 64) if gpu else (16, 16)
    ws = strides5(w, nd)
    launch(dw_bwd_data_kernel, (cdiv(geo.in_pixels, bp), cdiv(geo.c, bc)), (
        dy, w, dx, geo.in_pixels, geo.c, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
        *strides5(dy, nd), ws[0], *ws[2:], *strides5(dx, nd), float(alpha), float(beta)),
        dict(BLOCK_P=bp, BLOCK_C=bc, FLIP=problem.mode == 0, BETA_ZERO=beta == 0, INT64=needs_int64(dy, dx)),
        dict(num_warps=4 if gpu else 1))


@triton.jit
def _wtap(acc, g, x_ptr, offs, ok, chan, mask_k):
    """acc += dy tile g times the x tile at one tap (element offsets [BW] of its pixels)."""
    v = tl.load(x_ptr + offs[:, None] + chan[None, :], mask=ok[:, None] & mask_k[None, :], other=0.0)
    return acc + g * v.to(tl.float32)


@triton.jit
def _wtile(a00, a01, a02, a10, a11, a12, a20, a21, a22, x_ptr, dy_ptr, n, o, q, mask_q, chan, dy_chan, mask_k,
           IH, IW, SH, SW, PH, PW, DH, DW, xs_n, xs_h, xs_w, dys_n, dys_h, dys_w):
    """One dy tile (pixels (n, o, q), scalars or [BW] vectors) into the nine accumulators."""
    g = tl.load(dy_ptr + (n * dys_n + o * dys_h + q * dys_w)[:, None] + dy_chan[None, :],
                mask=mask_q[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
    ih, iw, ok_r0, ok_r1, ok_r2, ok_c0, ok_c1, ok_c2 = conv_depthwise_tma.window_masks(
        o, q, mask_q, IH, IW, SH, SW, PH, PW, DH, DW)
    c0 = iw * xs_w
    c1 = c0 + DW * xs_w
    c2 = c1 + DW * xs_w
    r0 = n * xs_n + ih * xs_h
    r1 = r0 + DH * xs_h
    r2 = r1 + DH * xs_h
    a00 = _wtap(a00, g, x_ptr, r0 + c0, ok_r0 & ok_c0, chan, mask_k)
    a01 = _wtap(a01, g, x_ptr, r0 + c1, ok_r0 & ok_c1, chan, mask_k)
    a02 = _wtap(a02, g, x_ptr, r0 + c2, ok_r0 & ok_c2, chan, mask_k)
    a10 = _wtap(a10, g, x_ptr, r1 + c0, ok_r1 & ok_c0, chan, mask_k)
    a11 = _wtap(a11, g, x_ptr, r1 + c1, ok_r1 & ok_c1, chan, mask_k)
    a12 = _wtap(a12, g, x_ptr, r1 + c2, ok_r1 & ok_c2, chan, mask_k)
    a20 = _wtap(a20, g, x_ptr, r2 + c0, ok_r2 & ok_c0, chan, mask_k)
    a21 = _wtap(a21, g, x_ptr, r2 + c1, ok_r2 & ok_c1, chan, mask_k)
    a22 = _wtap(a22, g, x_ptr, r2 + c2, ok_r2 & ok_c2, chan, mask_k)
    return a00, a01, a02, a10, a11, a12, a20, a21, a22


@triton.jit(do_not_specialize=['IH', 'IW', 'OH', 'OW', 'SH', 'SW', 'PH', 'PW', 'DH', 'DW', 'rows_per_split'])
def dw3_wgrad_kernel(
        x_ptr, dy_ptr, part_ptr,
        # sizes: output channels and channels per group, H x W of x and dy, the total
        # output rows (N x OH) and the rows of one slice
        K, Kg, IH, IW, OH, OW, SH, SW, PH, PW, DH, DW, rows, rows_per_split,
        # element strides (n, c, h, w) of x and dy
        xs_n, xs_c, xs_h, xs_w, dys_n, dys_k, dys_h, dys_w,
        BW: tl.constexpr, BC: tl.constexpr, FLAT: tl.constexpr, ATOMIC: tl.constexpr, INT64: tl.constexpr):
    """part[slice, k, tap] = sum over the slice's output rows and columns of
    dy[n, k, o, q] * x[n, k // Kg, o * SH - PH + a * DH, q * SW - PW + b * DW], tap = 3a + b.
    A tile is BW columns of one output row, or (FLAT) BW consecutive pixels of the slice's
    rows taken as one run: no masked columns when OW is small (7, 14) against BW."""
    # -- the program's channel block and slice of output rows (n, o)
    offs_k = tl.program_id(0) * BC + tl.arange(0, BC)
    mask_k = offs_k < K
    split = tl.program_id(1)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
        dys_n, dys_k, dys_h, dys_w = wide((dys_n, dys_k, dys_h, dys_w))
    chan = (offs_k // Kg) * xs_c
    dy_chan = offs_k * dys_k
    a00, a01, a02, a10, a11, a12, a20, a21, a22 = conv_depthwise_tma._zeros9(BW, BC)
    start = split * rows_per_split
    end = tl.minimum(start + rows_per_split, rows)
    if FLAT:
        # -- loop: BW pixels of the slice at a time, each split into (n, o, q)
        for p0 in range(start * OW, end * OW, BW):
            p = p0 + tl.arange(0, BW)
            mask_q = p < end * OW
            r = p // OW
            q = p - r * OW
            n = r // OH
            o = r - n * OH
            a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wtile(
                a00, a01, a02, a10, a11, a12, a20, a21, a22, x_ptr, dy_ptr, n, o, q, mask_q, chan, dy_chan, mask_k,
                IH, IW, SH, SW, PH, PW, DH, DW, xs_n, xs_h, xs_w, dys_n, dys_h, dys_w)
    else:
        # -- loop: one output row at a time, its columns BW at a time
        for r in range(start, end):
            n = r // OH
            o = r - n * OH
            for q0 in range(0, OW, BW):
                q = q0 + tl.arange(0, BW)
                mask_q = q < OW
                a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wtile(
                    a00, a01, a02, a10, a11, a12, a20, a21, a22, x_ptr, dy_ptr, n, o, q, mask_q, chan, dy_chan,
                    mask_k, IH, IW, SH, SW, PH, PW, DH, DW, xs_n, xs_h, xs_w, dys_n, dys_h, dys_w)
    # -- per-tap column sums into this slice's partial (or added atomically)
    slot = 0 if ATOMIC else split
    conv_depthwise_tma._wsum9(part_ptr, a00, a01, a02, a10, a11, a12, a20, a21, a22, slot, K, offs_k, mask_k,
                              ATOMIC)


def wgrad3_applies(problem) -> bool:
    """dw3_wgrad_kernel's case: a 2-D (or 1-row) 3x3 depthwise filter."""
    geo = geometry(problem)
    return geo.cg == 1 and geo.ker == (1, 3, 3) and geo.inp[0] == 1 and geo.out[0] == 1


def _wgrad3_config(problem, device, slices=None):
    """(BW, BC, warps): channel blocks no wider than the channels (C = 144 takes 16-wide
    blocks: none masked), columns filling the rest of a 4-elements-per-thread tile. When
    the slices are capped (ALGO_1's partial buffer) and the programs would not cover the
    SMs twice, narrower channel blocks and 8 warps spread the work wider."""
    if device.type != "cuda":
        return dict(BW=4, BC=4, num_warps=1, FLAT=False, PER_SM=4)
    k = problem.k
    bc = 16 if k % 32 else (32 if k % 64 else 64)
    warps = 4
    if slices is not None and cdiv(k, bc) * slices < 2 * sm_count(device):
        bc, warps = 16, 8
    return dict(BW=max(8, 128 * warps // bc), BC=bc, num_warps=warps, FLAT=False, PER_SM=4)


def wgrad3_candidates(problem, device, slices, atomic, cap):
    """dw3_wgrad_kernel's configs for the tuner, each with its slice count: first the older
    heuristic's (the slices the caller asked for). H200 (09:10 UTC): 0.8-1.4 TB/s, with 4
    programs of 4 warps per SM (ALGO_0 asked for 4 x SMs programs in all), too few loads
    in flight; the others run 4, 8 or 16 programs per SM (ALGO_1: up to ``cap`` slices,
    the partial buffer's; 64 today), 8 elements per thread, and FLAT tiles (pixel runs
    across rows: no masked columns at OW = 7, 14, 28 against BW = 16-32). Then the row
    walker of conv_depthwise_wgrad (KIND rows: multiplier 1, stride 1 or 2); last, on
    Hopper, the Gluon walker's (KIND gluon, gluon_wgrad_candidates)."""
    first = dict(_wgrad3_config(problem, device, None if atomic else slices), slices=slices)
    if device.type != "cuda":
        return [first, dict(first, FLAT=True)]
    walkers = conv_depthwise_wgrad.candidates(problem, device, cap, sm_count(device)) if walker_pays(problem) else []
    tiles = conv_depthwise_wgrad_tiles.candidates(problem, device, cap, sm_count(device)) if tiles_pay(problem) else []
    return (_pointer_wgrad3_candidates(problem, device, first, cap) + tma_wgrad_candidates(problem, device, cap)
            + walkers + gluon_wgrad_candidates(problem, device, cap) + tiles)


TILES_MAX_PIXELS = int(os.environ.get("TRIDNN_DW_WGRAD_TILES_MAX_PIXELS", 28 * 28))


def tiles_pay(problem) -> bool:
    """Whether conv_depthwise_wgrad_tiles' configs (KIND tiles) join the tuner's list:
    output maps of at most TILES_MAX_PIXELS pixels (28x28 by default; the environment
    variable TRIDNN_DW_WGRAD_TILES_MAX_PIXELS moves it, 0 never), where the row walks are
    short and every other kernel measured 1.3-1.8x cuDNN's time (sessions 11-18)."""
    geo = geometry(problem)
    return 0 < geo.out[1] * geo.out[2] <= TILES_MAX_PIXELS


def gluon_wgrad_candidates(problem, device, cap):
    """conv_depthwise_gluon_wgrad's configs (KIND gluon), each with its slot count, for a
    stride-1 undilated 3x3 depthwise problem (multiplier 1) on a Hopper GPU, when offered
    (by default below WALKER_MIN_CHANNELS channels: see conv_depthwise_gluon_wgrad.MODE);
    run where x's and dy's layouts allow TMA."""
    geo = geometry(problem)
    if (conv_depthwise_gluon_wgrad is None or not conv_depthwise_gluon_wgrad.OFFERED or device.type != "cuda"
            or not torch.cuda.is_available() or torch.cuda.get_device_capability(device)[0] != 9 or geo.k != geo.c
            or geo.stride[1:] != (1, 1) or geo.dil[1:] != (1, 1) or geo.ker[1:] != (3, 3)):
        return []
    if not conv_depthwise_gluon_wgrad.EVERYWHERE and geo.c >= WALKER_MIN_CHANNELS:
        return []
    return [dict(cfg, slices=conv_depthwise_gluon_wgrad.plan_slots(geo.n, geo.out[1], geo.out[2], geo.c, cfg, cap,
                                                                    sm_count(device)))
            for cfg in conv_depthwise_gluon_wgrad.configs(geo.out[1], geo.out[2], geo.c, problem.dtype.itemsize)]


WALKER_MIN_CHANNELS = 64


def walker_pays(problem) -> bool:
    """Whether the row walker's configs join the tuner's list: stride 1 with at least
    WALKER_MIN_CHANNELS channels. On the H200 (2026-11-30 15:08-15:12 UTC,
    benchmarks/sweep_depthwise_wgrad.py, MobileNetV2 bf16 batch 64) the tuner with them
    took faster configs on the stride-1 layers of 144-576 channels (dw144_56 133.4 -> 86.8
    us, dw192_28 103.5 -> 44.3, dw576_14 37.1 -> 27.3; 384 and 960 channels within 3%), but
    slower ones on stride 2 (dw96_112s2 110.7 -> 142.9, dw144_56s2 49.9 -> 68.6) and on
    32 channels (dw32_112 121.7 -> 139.7): its timing (do_bench, L2 flushed) and the
    CUDA-graph timing disagree there. Geomean over the 10 layers: 1.75 (without) -> 1.50
    (with, by this rule) -> 1.61 (everywhere)."""
    geo = geometry(problem)
    return all(s == 1 for s in geo.stride[1:]) and geo.c >= WALKER_MIN_CHANNELS


def tma_wgrad_candidates(problem, device, cap):
    """conv_depthwise_tma's filter-gradient configs (KIND tma: stride 1, multiplier 1),
    each with its slot count ("slices": images x row strips x column strips, strips made
    taller to fit ``cap``); run where x's and dy's layouts allow TMA."""
    if not conv_depthwise_tma.wgrad_applies(problem):
        return []
    out = []
    for cfg in conv_depthwise_tma.wgrad_configs(device, problem.k):
        fit = conv_depthwise_tma.wgrad_slots(problem, cfg, cap)
        if fit is not None:
            out.append(dict(cfg, slices=fit[3]))
    return out


def _pointer_wgrad3_candidates(problem, device, first, cap):
    """dw3_wgrad_kernel's GPU configs after ``first``: 4 or 8 elements per thread, row or
    FLAT tiles, 4-16 programs per SM (distinct launches only)."""
    k = problem.k
    out = [first]
    widths = [bc for bc in (16, 32, 64) if bc <= max(16, next_pow2(k))]
    for bc in widths:
        for per_thread in (4, 8):
            for flat in (False, True):
                for per_sm in (4, 8, 16):
                    cfg = dict(BW=max(8, 32 * 4 * per_thread // bc), BC=bc, num_warps=4, FLAT=flat, PER_SM=per_sm)
                    cfg["slices"] = _wgrad3_slices(problem, device, cfg, cap)
                    if all(any(c[f] != cfg[f] for f in ("BW", "BC", "num_warps", "FLAT", "slices")) for c in out):
                        out.append(cfg)
    return out


def filter_slices(problem, device, cap: int) -> int:
    """Slices of the N x pixels rows: enough programs to fill the GPU, each >= 8 row blocks."""
    geo = geometry(problem)
    if device.type != "cuda":
        return max(1, min(cap, 3))
    if wgrad3_applies(problem):  # slices of whole output rows
        cfg = _wgrad3_config(problem, device)
        return _wgrad3_slices(problem, device, cfg, cap)
    bc = 64
    programs = cdiv(geo.k, bc) * geo.taps
    want = cdiv(4 * sm_count(device), programs)
    return max(1, min(want, cdiv(geo.out_pixels, 8 * 64), cap, 65535))


def _wgrad3_slices(problem, device, cfg, cap):
    """Slices giving cfg["PER_SM"] programs per SM (at most one slice per output row)."""
    geo = geometry(problem)
    programs = cdiv(geo.k, cfg["BC"])
    rows = geo.n * geo.out[0] * geo.out[1]
    want = cdiv(cfg["PER_SM"] * sm_count(device), programs)
    return max(1, min(want, rows, cap, 65535))


_wgrad_tuner = Tuner(tolerance=3e-3)  # slice counts (ALGO_0) change the summation order


def _launch_wgrad3(problem, x, dy, part, slices, atomic, cfg, cap=65535):
    """dw3_wgrad_kernel (or KIND tma: conv_depthwise_tma's, when the layouts allow it)
    into part; returns the slices used."""
    if cfg.get("KIND") == "rows" and conv_depthwise_wgrad.applies(problem):  # the row walker (any layout)
        return conv_depthwise_wgrad.launch_rows(problem, x, dy, part, atomic, cfg, cap)
    if cfg.get("KIND") == "tiles" and conv_depthwise_wgrad_tiles.applies(problem):  # pixel tiles (any layout)
        sms = sm_count(x.device) if x.device.type == "cuda" else 4
        return conv_depthwise_wgrad_tiles.launch_tiles(problem, x, dy, part, atomic, cfg, cap, sms)
    if cfg.get("KIND") == "tma":
        if conv_depthwise_tma.wgrad_layout_ok(problem, x, dy, cfg):
            return conv_depthwise_tma.launch_wgrad(problem, x, dy, part, atomic, cfg, cap)
        cfg = _wgrad3_config(problem, x.device, None if atomic else slices)
    geo = geometry(problem)
    if cfg.get("KIND") == "gluon":
        if problem.nd == 2 and conv_depthwise_gluon_wgrad.why_not(x, dy, geo.stride[1:], geo.pad[1:],
                                                                  geo.dil[1:]) is None:
            return conv_depthwise_gluon_wgrad.launch(x, dy, part, geo.pad[1:], cfg, 65535 if atomic else cap, atomic)
        cfg = _wgrad3_config(problem, x.device, None if atomic else slices)
    nd = problem.nd
    rows = geo.n * geo.out[0] * geo.out[1]
    per = cdiv(rows, slices)
    slices = cdiv(rows, per)
    xs, ds = strides5(x, nd), strides5(dy, nd)
    launch(dw3_wgrad_kernel, (cdiv(geo.k, cfg["BC"]), slices), (
        x, dy, part, geo.k, geo.kg, *geo.inp[1:], *geo.out[1:], *geo.stride[1:], *geo.pad[1:], *geo.dil[1:],
        rows, per, xs[0], xs[1], xs[3], xs[4], ds[0], ds[1], ds[3], ds[4]),
        dict(BW=cfg["BW"], BC=cfg["BC"], FLAT=cfg["FLAT"], ATOMIC=atomic, INT64=needs_int64(x, dy)),
        dict(num_warps=cfg["num_warps"]))
    return slices


def backward_filter_partials(problem, x, dy, part, slices, atomic) -> int:
    """Fill part [slices, K, T, 1] (ALGO_0: add into slice 0, zeroed by the caller);
    returns the slice count actually used."""
    geo = geometry(problem)
    nd = problem.nd
    if wgrad3_applies(problem):
        cap = part.shape[0] if not atomic else 65535
        slices = min(slices, cap)
        cols = geo.k * 9
        tmp = []

        def run(cfg, out):
            """Tuning: the config's partials into a private buffer, summed over its slices
            into out [K * 9] (slice counts differ between candidates; the sum's time
            stands in for the finish pass, which grows with them)."""
            if not tmp:
                tmp.append(torch.empty_like(part.reshape(-1)) if not atomic
                           else torch.empty(cols, dtype=part.dtype, device=part.device))
            buf = tmp[0]
            if atomic:
                buf.zero_()
            used = _launch_wgrad3(problem, x, dy, buf, cfg["slices"], atomic, cfg, cap)
            torch.sum(buf[:(1 if atomic else used) * cols].view(-1, cols), dim=0, out=out)
        key = (problem_key(problem), "dw3-wgrad", atomic, slices, cap)
        cfg = _wgrad_tuner.pick(key, lambda: wgrad3_candidates(problem, x.device, slices, atomic, cap), run,
                                lambda: torch.empty(cols, dtype=part.dtype, device=part.device), x.device)
        return _launch_wgrad3(problem, x, dy, part, cfg["slices"], atomic, cfg, cap)
    gpu = x.device.type == "cuda"
    bp, bc = (64, 64) if gpu else (16, 16)
    per = cdiv(cdiv(geo.out_pixels, slices), bp) * bp
    slices = max(1, cdiv(geo.out_pixels, per))
    launch(dw_bwd_filter_kernel, (cdiv(geo.k, bc), geo.taps, slices), (
        x, dy, part, geo.out_pixels, geo.k, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
        *strides5(x, nd), *strides5(dy, nd), per),
        dict(BLOCK_P=bp, BLOCK_C=bc, ATOMIC=atomic, INT64=needs_int64(x, dy)), dict(num_warps=4 if gpu else 1))
    return slices
