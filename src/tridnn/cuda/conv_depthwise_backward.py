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
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import launch, sm_count, split_rows
from .epilogue import store_tile
from .geometry import geometry, needs_int64, strides5

MAX_MULTIPLIER = 16


def routes_here(problem) -> bool:
    """Depthwise: one input channel per group, a small channel multiplier."""
    return problem.w.c == 1 and problem.k // problem.groups <= MAX_MULTIPLIER


@triton.jit
def _source(i, pad, t, dil, s, size):
    num = i + pad - t * dil
    o = num // s
    return o, (num >= 0) & (num - o * s == 0) & (o < size)


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
    if INT64:
        nn = nn.to(tl.int64)
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
                mask = ok[:, None] & mask_c[None, :]
                for j in range(0, Kg):
                    k = offs_c * Kg + j
                    v = tl.load(dy_ptr + row[:, None] + (k * dys_k)[None, :], mask=mask, other=0.0)
                    wv = tl.load(w_ptr + k * ws_k + w_tap, mask=mask_c, other=0.0)
                    acc += v.to(tl.float32) * wv.to(tl.float32)[None, :]
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
    x_chan = (offs_k // Kg) * xs_c
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    start = split * rows_per_split
    end = tl.minimum(start + rows_per_split, P)
    for p0 in range(start, end, BLOCK_P):
        offs_p = p0 + tl.arange(0, BLOCK_P)
        mask_p = offs_p < end
        nn, od, oh, ow = split_rows(offs_p, OD, OH, OW)
        if INT64:
            nn = nn.to(tl.int64)
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


def backward_data(problem, dy, w, dx, alpha, beta) -> None:
    geo = geometry(problem)
    nd = problem.nd
    gpu = dx.device.type == "cuda"
    bp, bc = (64, 64) if gpu else (16, 16)
    ws = strides5(w, nd)
    launch(dw_bwd_data_kernel, (triton.cdiv(geo.in_pixels, bp), triton.cdiv(geo.c, bc)), (
        dy, w, dx, geo.in_pixels, geo.c, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
        *strides5(dy, nd), ws[0], *ws[2:], *strides5(dx, nd), float(alpha), float(beta)),
        dict(BLOCK_P=bp, BLOCK_C=bc, FLIP=problem.mode == 0, BETA_ZERO=beta == 0, INT64=needs_int64(dy, dx)),
        dict(num_warps=4 if gpu else 1))


def filter_slices(problem, device, cap: int) -> int:
    """Slices of the N x pixels rows: enough programs to fill the GPU, each >= 8 row blocks."""
    geo = geometry(problem)
    if device.type != "cuda":
        return max(1, min(cap, 3))
    bc = 64
    programs = triton.cdiv(geo.k, bc) * geo.taps
    want = triton.cdiv(4 * sm_count(device), programs)
    return max(1, min(want, triton.cdiv(geo.out_pixels, 8 * 64), cap, 65535))


def backward_filter_partials(problem, x, dy, part, slices, atomic) -> int:
    """Fill part [slices, K, T, 1]; returns the slice count actually used."""
    geo = geometry(problem)
    nd = problem.nd
    gpu = x.device.type == "cuda"
    bp, bc = (64, 64) if gpu else (16, 16)
    per = triton.cdiv(triton.cdiv(geo.out_pixels, slices), bp) * bp
    slices = max(1, triton.cdiv(geo.out_pixels, per))
    launch(dw_bwd_filter_kernel, (triton.cdiv(geo.k, bc), geo.taps, slices), (
        x, dy, part, geo.out_pixels, geo.k, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
        *strides5(x, nd), *strides5(dy, nd), per),
        dict(BLOCK_P=bp, BLOCK_C=bc, ATOMIC=atomic, INT64=needs_int64(x, dy)), dict(num_warps=4 if gpu else 1))
    return slices
