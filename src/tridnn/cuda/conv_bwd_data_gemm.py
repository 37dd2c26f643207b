"""Backward data ALGO_0 in Triton: a GEMM into the workspace, then col2im.

The transpose of forward GEMM. ``dcol_kernel`` computes the column gradient

    dcol[g, m, r] = sum over k of dy[m, g*Kg + k] * w[g*Kg + k, c(r), tap(r)]

(rows m = dy pixels, r = (tap, input channel) as in im2col) with ``tl.dot``, in
float32, into the workspace. ``col2im_kernel`` then gathers it back: each dx element
sums the column entries of the (tap, output pixel) pairs that read it, i.e. the taps
t with (i + pad - t * dilation) divisible by the stride, and blends alpha/beta. Each
dx element is written once by one program in a fixed tap order: deterministic, no
atomics. The column matrix costs taps x the input in float32 workspace.
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ..types import ConvBwdDataAlgo
from ..workspace import Buffer
from .common import TritonConvAlgorithm, Tuner, cdiv, grouped_tile, launch, problem_key, split_rows, wide
from .conv_implicit_gemm import GPU_CONFIGS_16, GPU_CONFIGS_32, INTERPRETER_CONFIG, gemm_estimate
from .epilogue import store_tile
from .geometry import geometry, input_precision, needs_int64, strides5


@triton.jit(do_not_specialize=['M', 'R', 'OD', 'OH', 'OW'])
def dcol_kernel(dy_ptr, w_ptr, col_ptr, M, R, Cg, Kg, OD, OH, OW, KD, KH, KW,
                dys_n, dys_k, dys_d, dys_h, dys_w, ws_k, ws_c, ws_d, ws_h, ws_w,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                FLIP: tl.constexpr, PREC: tl.constexpr, INT64: tl.constexpr):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(R, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_r = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_r = offs_r < R
    nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        dys_n, dys_k, dys_d, dys_h, dys_w = wide((dys_n, dys_k, dys_d, dys_h, dys_w))
    dy_row = nn * dys_n + od * dys_d + oh * dys_h + ow * dys_w + (g * Kg) * dys_k
    c = offs_r % Cg
    tap = offs_r // Cg
    kw = tap % KW
    kh = (tap // KW) % KH
    kd = tap // (KW * KH)
    if FLIP:
        kd = KD - 1 - kd
        kh = KH - 1 - kh
        kw = KW - 1 - kw
    w_col = c * ws_c + kd * ws_d + kh * ws_h + kw * ws_w + (g * Kg) * ws_k
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, Kg, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        mask_k = k < Kg
        a = tl.load(dy_ptr + dy_row[:, None] + k[None, :] * dys_k, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(w_ptr + w_col[None, :] + k[:, None] * ws_k, mask=mask_k[:, None] & mask_r[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    dst = (g.to(tl.int64) * M + offs_m)[:, None] * R + offs_r[None, :]
    tl.store(col_ptr + dst, acc, mask=mask_m[:, None] & mask_r[None, :])


@triton.jit
def _source(i, pad, t, dil, s, size):
    """Output index o with o * s = i + pad - t * dil, and whether it exists."""
    num = i + pad - t * dil
    o = num // s
    return o, (num >= 0) & (num - o * s == 0) & (o < size)


@triton.jit(do_not_specialize=['P', 'M', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW'])
def col2im_kernel(col_ptr, dx_ptr, P, M, C, Cg, ID, IH, IW, OD, OH, OW, KD, KH, KW,
                  SD, SH, SW, PD, PH, PW, DD, DH, DW, xs_n, xs_c, xs_d, xs_h, xs_w, alpha, beta,
                  BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    """dx[n, c, i] = alpha * sum over taps of dcol[g, m(n, o), (t, c)] + beta * dx."""
    offs_p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_p = offs_p < P
    mask_c = offs_c < C
    nn, idd, ih, iw = split_rows(offs_p, ID, IH, IW)
    g = offs_c // Cg
    cl = offs_c % Cg
    R = KD * KH * KW * Cg
    col_c = (g.to(tl.int64) * M) * R + cl
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for td in range(0, KD):
        od, okd = _source(idd, PD, td, DD, SD, OD)
        for th in range(0, KH):
            oh, okh = _source(ih, PH, th, DH, SH, OH)
            for tw in range(0, KW):
                ow, okw = _source(iw, PW, tw, DW, SW, OW)
                ok = mask_p & okd & okh & okw
                m = ((nn.to(tl.int64) * OD + od) * OH + oh) * OW + ow
                tap = (td * KH + th) * KW + tw
                v = tl.load(col_ptr + (m * R)[:, None] + col_c[None, :] + tap * Cg,
                            mask=ok[:, None] & mask_c[None, :], other=0.0)
                acc += v
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
    row = nn * xs_n + idd * xs_d + ih * xs_h + iw * xs_w
    store_tile(acc, row, row, offs_c, mask_p, mask_c, dx_ptr, xs_c, dx_ptr, 0, dx_ptr, 0,
               alpha, beta, 0.0, 0.0, 1.0, -1, False, False, BETA_ZERO)


def launch_dcol(problem, dy, w, col, cfg):
    geo = geometry(problem)
    nd = problem.nd
    M, R = geo.out_pixels, geo.taps * geo.cg
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    launch(dcol_kernel, (cdiv(M, bm) * cdiv(R, bn), geo.groups), (
        dy, w, col, M, R, geo.cg, geo.kg, *geo.out, *geo.ker, *strides5(dy, nd), *strides5(w, nd)),
        dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, FLIP=problem.mode == 0, PREC=input_precision(problem),
             INT64=needs_int64(dy)), dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))


class Col2imGemmBackwardData(TritonConvAlgorithm):
    direction = "bwd_data"
    enum = ConvBwdDataAlgo.ALGO_0
    tuner = Tuner()

    def buffers(self, problem):
        geo = geometry(problem)
        return [Buffer("dcol", (geo.groups, geo.out_pixels, geo.taps * geo.cg), np.float32)]

    def estimate(self, problem):
        geo = geometry(problem)
        col_bytes = 2 * 4 * geo.groups * geo.out_pixels * geo.taps * geo.cg
        return gemm_estimate(problem, efficiency=0.85) + col_bytes / 3.5e12 + 4e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        dx, w, dy = tensors["x"], tensors["w"], tensors["y"]
        col = workspace["dcol"]
        gpu = dx.device.type == "cuda"
        cands = (GPU_CONFIGS_32 if problem.dtype.itemsize == 4 else GPU_CONFIGS_16) if gpu \
            else [dict(INTERPRETER_CONFIG)]
        cfg = self.tuner.pick((problem_key(problem), "bwd-data-col2im"), cands,
                              lambda c, out: launch_dcol(problem, dy, w, out, c), col, dx.device,
                              scratch_ok=True)
        launch_dcol(problem, dy, w, col, cfg)
        geo = geometry(problem)
        nd = problem.nd
        bp, bc = (64, 64) if gpu else (16, 16)
        launch(col2im_kernel, (cdiv(geo.in_pixels, bp), cdiv(geo.c, bc)), (
            col, dx, geo.in_pixels, geo.out_pixels, geo.c, geo.cg, *geo.inp, *geo.out, *geo.ker, *geo.stride,
            *geo.pad, *geo.dil, *strides5(dx, nd), float(alpha), float(beta)),
            dict(BLOCK_P=bp, BLOCK_C=bc, BETA_ZERO=beta == 0, INT64=needs_int64(dx)),
            dict(num_warps=4 if gpu else 1))
