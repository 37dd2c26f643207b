"""Space-to-depth convolution: a stride-2 convolution over few input channels (a network's
first layer, ResNet-50's 7x7 stride-2 conv1 on 3 channels) run as a stride-1 convolution
of 4x4 pixel blocks, inside IMPLICIT_PRECOMP_GEMM forward (a precomputation into the
workspace: IMPLICIT_GEMM stays workspace-free, as cuDNN's), ALGO_1 backward data and ALGO_1
backward filter.

Why: with 3 input channels no tensor-core tile fits the problem. cuDNN runs ResNet-50's
conv1 at ~35 TFLOP/s on the H200 (443 us at batch 64, bfloat16) and tridnn's GEMM
(im2col into a 257 MB column matrix, then a matmul) at 475 us, both far from the ~60 us
its bytes and flops need. Regrouping the pixels gives the kernels a shape they are built
for:

- x [N, C, H, W] -> xb [N, H/4, W/4, CP]: each 4x4 block of pixels as the channels
  (bh, bw, c), zero-padded to CP = 64 (C <= 4);
- y's 2x2 output blocks as 4K channels (i, j, k): yb [N, H/4, W/4, 4K];
- then yb = conv(xb, wb) is a stride-1 T x T convolution (3x3 for conv1) with CP input
  and 4K output channels: IMPLICIT_GEMM's own TMA path (the Gluon kernel on Hopper).
  Output pixel 2p + i reads input row 4p + 2i + kh - pad = 4(p + ta - P) + bh, so
  wb[(i, j, k), ta, tb, (bh, bw, c)] = w[k, c, kh, kw] at kh = 4(ta - P) + bh - 2i + pad
  (kw likewise), zero where (kh, kw) falls outside the filter; P pads the block taps
  symmetrically. The products are ~4x the useful ones (conv1: 576 per output where 147
  count) but run at ~15x the rate;
- y[n, k, 2p + i, 2q + j] = yb[n, p, q, (i, j, k)]. With beta != 0, y is first gathered
  into yb and blended there by the convolution (one rounding, as every other path).

Predicted at batch 64, bfloat16: xb 19 MB read and 26 MB written, the 3x3 convolution
59 GFLOP (~110 us at the Gluon kernel's ~550 TFLOP/s), yb 103 MB written and read, y
103 MB written: ~190 us against cuDNN's 443 (measured 167 us, session 10).

Backward data is the same regrouping in reverse: dy into blocks (dyb), the block
problem's backward data (ALGO_1's own path: dxb = the 3x3 transposed convolution of dyb
by the block filter), then dx from dxb's real channels (measured 237 us against cuDNN's
805, session 10). Backward filter (ALGO_1; WGRAD): x and dy into blocks, the block
problem's filter gradient (float32), then each dw element the sum of its four copies (one
per output phase) in it, rounded once (measured 212.9 us against cuDNN's 293.5, session 11).

The three copy kernels (x and its blocks, the filter into the block filter, y and its
blocks) are plain Triton: they run under the interpreter on the CPU and at any strides.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import triton
import triton.language as tl

from ..descriptors import FilterDescriptor, TensorDescriptor
from ..types import ConvMode, TensorFormat
from ..workspace import Buffer
from .common import cdiv, launch, wide
from .epilogue import launch_args, store_tile
from .geometry import needs_int64
from .memo import IdentityMemo

BLOCK = 4       # input pixels a block side: twice the stride, so each block holds 2x2 outputs
CP = 64         # block channels (16 * C real ones, zero-padded): the Gluon kernel's channel multiple


@triton.jit
def split_block_channels(ch, C):
    """Block channel (bh * 4 + bw) * C + c -> (c, bw, bh)."""
    return ch % C, (ch // C) % 4, ch // (4 * C)


@triton.jit
def x_and_blocks_kernel(
    x_ptr, xb_ptr,
    # block pixels M = N * H4 * W4, block grid H4 x W4, real input channels C
    M, H4, W4, C,
    # x's strides (n, c, h, w) in elements
    xs_n, xs_c, xs_h, xs_w,
    TO_X: tl.constexpr, CP: tl.constexpr, BLOCK_M: tl.constexpr, INT64: tl.constexpr,
):
    """xb[m, (bh * 4 + bw) * C + c] = x[n, c, 4p + bh, 4q + bw] for block pixel m = (n, p, q),
    0 in the padding channels; TO_X: the reverse, x from the real channels of xb (backward
    data's dx). One program: BLOCK_M block pixels x all CP channels."""
    # map the program to its block pixels and split the channels into (bh, bw, c)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:  # the channel terms too (c * xs_c of NCHW can pass 2^31): common.wide
        rows = rows.to(tl.int64)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
    ch = tl.arange(0, CP)
    q = rows % W4
    t = rows // W4
    p = t % H4
    n = t // H4
    c, bw, bh = split_block_channels(ch, C)
    # the block's pixels in x, one dense row of channels in xb
    real = ch < 16 * C
    x_ptrs = (x_ptr + n[:, None] * xs_n + c[None, :] * xs_c + (4 * p[:, None] + bh[None, :]) * xs_h
              + (4 * q[:, None] + bw[None, :]) * xs_w)
    b_ptrs = xb_ptr + rows[:, None] * CP + ch[None, :]
    mask = rows[:, None] < M
    if TO_X:
        tl.store(x_ptrs, tl.load(b_ptrs, mask=mask & real[None, :]), mask=mask & real[None, :])
    else:
        tl.store(b_ptrs, tl.load(x_ptrs, mask=mask & real[None, :], other=0.0), mask=mask)


@triton.jit
def filter_to_blocks_kernel(
    w_ptr, wb_ptr,
    # rows R = 4K * TH * TW of wb; output and input channels, filter size, padding
    R, K, C, KH, KW, PH, PW,
    # block taps per dimension and their symmetric padding
    TH, TW, P_H, P_W,
    # w's strides (k, c, kh, kw) in elements
    ws_k, ws_c, ws_h, ws_w,
    FLIP: tl.constexpr, CP: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """wb[(i, j, k), ta, tb, (bh, bw, c)] = w[k, c, kh, kw] with kh = 4(ta - P_H) + bh - 2i + PH,
    kw = 4(tb - P_W) + bw - 2j + PW (taps reversed under FLIP: CONVOLUTION mode); 0 outside
    the filter and in the padding channels. One program: BLOCK_R rows x CP channels."""
    # map the program to rows (o, ta, tb), o = (i, j, k), and channels (bh, bw, c)
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ch = tl.arange(0, CP)
    tb = r % TW
    t = r // TW
    ta = t % TH
    o = t // TH
    k = o % K
    i = o // (2 * K)
    j = (o // K) % 2
    c, bw, bh = split_block_channels(ch, C)
    # the source tap of each element, where it is inside the filter
    kh = 4 * (ta[:, None] - P_H) + bh[None, :] - 2 * i[:, None] + PH
    kw = 4 * (tb[:, None] - P_W) + bw[None, :] - 2 * j[:, None] + PW
    inside = (kh >= 0) & (kh < KH) & (kw >= 0) & (kw < KW) & (ch[None, :] < 16 * C) & (r[:, None] < R)
    if FLIP:
        kh = KH - 1 - kh
        kw = KW - 1 - kw
    src = w_ptr + k[:, None] * ws_k + c[None, :] * ws_c + kh * ws_h + kw * ws_w
    v = tl.load(src, mask=inside, other=0.0)
    tl.store(wb_ptr + r[:, None] * CP + ch[None, :], v, mask=r[:, None] < R)


@triton.jit
def blocks_and_y_kernel(
    yb_ptr, y_ptr,
    # output pixels M = N * OH * OW, output size, output channels
    M, OH, OW, K,
    # y's strides (n, k, h, w) in elements
    ys_n, ys_k, ys_h, ys_w,
    # the fused epilogue (TO_Y): residual z and its strides, bias, their scalars
    z_ptr, zs_n, zs_k, zs_h, zs_w, bias_ptr, bias_stride, alpha2, coef, swish_beta,
    TO_Y: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, INT64: tl.constexpr,
):
    """TO_Y: y[n, k, 2p + i, 2q + j] = act(yb[n, p, q, (i * 2 + j) * K + k] + alpha2 * z + bias)
    (epilogue.store_tile; z may be y itself); else y gathered into the blocks (for a beta
    blend). One program: BLOCK_M output pixels x BLOCK_K channels, rows of channels
    contiguous on both sides in NHWC."""
    # map the program to output pixels (n, oh, ow) and channels
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    if INT64:  # the channel terms too (ks * ys_k of NCHW can pass 2^31): common.wide
        rows = rows.to(tl.int64)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    ks = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    ow = rows % OW
    t = rows // OW
    oh = t % OH
    n = t // OH
    # the block pixel and block channel of each output pixel
    blk = (n * (OH // 2) + oh // 2) * (OW // 2) + ow // 2
    sub = (oh % 2) * 2 + ow % 2
    b_ptrs = yb_ptr + (blk * (4 * K) + sub * K)[:, None] + ks[None, :]
    row_y = n * ys_n + oh * ys_h + ow * ys_w
    mask_row, mask_col = rows < M, ks < K
    mask = mask_row[:, None] & mask_col[None, :]
    if TO_Y:
        acc = tl.load(b_ptrs, mask=mask, other=0.0).to(tl.float32)
        store_tile(acc, row_y, n * zs_n + oh * zs_h + ow * zs_w, ks, mask_row, mask_col,
                   y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride, 1.0, 0.0, alpha2, coef, swish_beta,
                   ACT, HAS_BIAS, HAS_Z, True)
    else:
        tl.store(b_ptrs, tl.load(y_ptr + row_y[:, None] + ks[None, :] * ys_k, mask=mask), mask=mask)


@triton.jit
def blocks_to_filter_kernel(
    wb_ptr, dw_ptr,
    # dw's elements (K * C * KH * KW), its sizes and padding; block taps and their padding
    TOTAL, K, C, KH, KW, PH, PW, TH, TW, P_H, P_W,
    # dw's strides (k, c, kh, kw) in elements
    ds_k, ds_c, ds_h, ds_w,
    alpha, beta,
    FLIP: tl.constexpr, BETA_ZERO: tl.constexpr, CP: tl.constexpr, BLOCK: tl.constexpr,
):
    """Backward filter: dw[k, c, h, w] = alpha * (the sum over the 2x2 output phases (i, j) of
    the block filter's gradient at the one (ta, bh, tb, bw) where filter_to_blocks_kernel put
    w[k, c, h, w]) + beta * dw; in a fixed order (deterministic)."""
    # map the program to BLOCK elements of dw and their taps (reversed under FLIP)
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = e < TOTAL
    w_ = e % KW
    t = e // KW
    h = t % KH
    t = t // KH
    c = t % C
    k = t // C
    kh = h
    kw = w_
    if FLIP:
        kh = KH - 1 - h
        kw = KW - 1 - w_
    # kh = 4(ta - P_H) + bh - 2i + PH, so 4 ta + bh = kh + 2i - PH + 4 P_H (>= 0 as 4 P_H >= PH)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(2):
        rh = kh + 2 * i - PH + 4 * P_H
        for j in tl.static_range(2):
            rw = kw + 2 * j - PW + 4 * P_W
            ok = mask & (rh // 4 < TH) & (rw // 4 < TW)
            row = (((i * 2 + j) * K + k) * TH + rh // 4) * TW + rw // 4
            ch = ((rh % 4) * 4 + rw % 4) * C + c
            acc += tl.load(wb_ptr + row * CP + ch, mask=ok, other=0.0).to(tl.float32)
    ptrs = dw_ptr + k * ds_k + c * ds_c + h * ds_h + w_ * ds_w
    v = alpha * acc
    if not BETA_ZERO:
        v += beta * tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs, v.to(dw_ptr.dtype.element_ty), mask=mask)


@dataclasses.dataclass(frozen=True)
class Blocks:
    """The block problem of a space-to-depth convolution: block grid, taps and padding."""
    h4: int
    w4: int
    th: int   # block taps (rows)
    tw: int
    p_h: int  # their symmetric padding
    p_w: int


def _taps(kernel: int, pad: int) -> tuple[int, int]:
    """(taps, padding) of one dimension: offsets 2i + kh - pad over i in {0, 1} and the
    filter's taps fall in blocks floor(offset / 4); padded symmetrically."""
    first = -((pad + BLOCK - 1) // BLOCK)          # floor(-pad / 4)
    last = (2 + kernel - 1 - pad) // BLOCK         # floor((2 + KH - 1 - pad) / 4)
    p = max(-first, last, 0)
    return 2 * p + 1, p


# Backward filter through the blocks (ALGO_1 only: conv_bwd_filter_implicit_gemm): on the
# H200 (session 11) conv1 bf16 batch 64 took 212.9 us against 267.6 without the blocks and
# cuDNN's 293.5 (predicted ~180); ALGO_0's atomic kernel on the block problem took 570.
# TRIDNN_S2D_WGRAD=0 turns it off.
WGRAD = os.environ.get("TRIDNN_S2D_WGRAD", "1") == "1"


def why_not(problem) -> str | None:
    """None when this path computes the problem: forward, backward data (and backward
    filter with WGRAD), 2-D, groups 1, stride 2, dilation 1, at most 4 input channels, H and
    W multiples of 4 and the output half the input (the usual 'same' padding of a stride-2
    first layer)."""
    if problem.direction == "bwd_filter" and not WGRAD:
        return "backward filter through the blocks is switched off (TRIDNN_S2D_WGRAD=0)"
    if problem.nd != 2 or problem.groups != 1:
        return "2-D problems with groups 1 only"
    if tuple(problem.stride) != (2, 2) or tuple(problem.dilation) != (1, 1):
        return "stride 2 and dilation 1 only"
    if problem.c * BLOCK * BLOCK > CP:
        return f"at most {CP // (BLOCK * BLOCK)} input channels"
    n, c, h, w = problem.x.dims
    if h % BLOCK or w % BLOCK or tuple(problem.out_spatial) != (h // 2, w // 2):
        return "H and W multiples of 4 and an output half the input"
    return None


_blocks = IdentityMemo()


def blocks(problem) -> Blocks:
    """The problem's block grid, taps and padding (memoized per problem object: each call of
    ``run`` needs them)."""
    def build():
        n, c, h, w = problem.x.dims
        th, p_h = _taps(problem.kernel[0], problem.pad_pre[0])
        tw, p_w = _taps(problem.kernel[1], problem.pad_pre[1])
        return Blocks(h // BLOCK, w // BLOCK, th, tw, p_h, p_w)
    return _blocks.get((problem,), None, build)


def buffers(problem) -> list:
    """The workspace: xb, the block filter wb and yb, in the problem's dtype; for backward
    filter wb (the block filter's gradient, 0.6 MB at conv1) is float32, so each dw element
    is the sum of its four copies rounded once (a 16-bit wb measured 2.6e-3 relative error
    against cuDNN on the H200 where the path without blocks has 2.1e-4)."""
    b = blocks(problem)
    n, k, dt = problem.n, problem.k, problem.dtype.numpy
    wt = np.float32 if problem.direction == "bwd_filter" else dt
    return [Buffer("s2d_x", (n, b.h4, b.w4, CP), dt), Buffer("s2d_w", (4 * k, b.th, b.tw, CP), wt),
            Buffer("s2d_y", (n, b.h4, b.w4, 4 * k), dt)]


_inner = IdentityMemo()


def inner_problem(problem):
    """The stride-1 block convolution, in the problem's direction (memoized per problem
    object)."""
    from ..algorithms.problem import ConvProblem

    def build():
        b = blocks(problem)
        n, k, dt = problem.n, problem.k, problem.dtype
        conv = dataclasses.replace(problem.conv, padding=(b.p_h, b.p_w), pad_post=(b.p_h, b.p_w), stride=(1, 1),
                                   dilation=(1, 1), mode=ConvMode.CROSS_CORRELATION)
        xd = TensorDescriptor.packed((n, CP, b.h4, b.w4), dt, TensorFormat.NHWC)
        wd = FilterDescriptor((4 * k, CP, b.th, b.tw), dt, TensorFormat.NHWC)
        yd = TensorDescriptor.packed((n, 4 * k, b.h4, b.w4), dt, TensorFormat.NHWC)
        return ConvProblem(problem.direction, xd, wd, yd, conv)
    return _inner.get((problem,), None, build)


def estimate(problem, inner_seconds=None) -> float:
    """Seconds on an H200-like GPU: the block convolution (``inner_seconds``, default its
    flops at the tensor-core rate) plus the copies (x into blocks, blocks out to y) at ~3 TB/s."""
    from .conv_implicit_gemm import dot_rate
    inner = inner_problem(problem)
    byte = problem.dtype.itemsize
    moved = (problem.x.size + 2 * inner.x.size + 2 * inner.y.size + problem.y.size) * byte
    if inner_seconds is None:
        inner_seconds = inner.flops / dot_rate(problem)
    return inner_seconds + moved / 3e12 + 10e-6


def run(algorithm, problem, x, w, y, alpha, beta, workspace, spec=None):
    """Forward: y = alpha * conv(x, w) + beta * y; backward data: x = alpha * dconv(y, w) +
    beta * x (y is dy, x is dx); backward filter: w = alpha * wgrad(x, y) + beta * w; through
    the block convolution (algorithm: the IMPLICIT_GEMM forward (for IMPLICIT_PRECOMP_GEMM),
    ALGO_1 backward data or the backward filter whose ``run`` computes it; backward
    filter's own buffers for the block problem are the workspace's names without the s2d_
    prefix). spec: forward's fused
    epilogue (z, bias, activation), applied as the blocks move out to y, after the block
    convolution's one rounding to the data type (a second rounding; float32 data has one)."""
    b = blocks(problem)
    inner = inner_problem(problem)
    n, c = x.shape[0], x.shape[1]
    k, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    xb, wb, yb = workspace["s2d_x"], workspace["s2d_w"], workspace["s2d_y"]
    bm = 64 if y.device.type == "cuda" else 16
    nw = dict(num_warps=4)
    m = n * b.h4 * b.w4
    blocks_x = (x_and_blocks_kernel, (cdiv(m, bm),), (x, xb, m, b.h4, b.w4, c, *x.stride()))
    x_meta = dict(CP=CP, BLOCK_M=bm, INT64=needs_int64(x, xb))
    if problem.direction != "bwd_filter":  # (backward filter computes wb's gradient instead)
        rows = wb.shape[0] * b.th * b.tw
        launch(filter_to_blocks_kernel, (cdiv(rows, bm),),
               (w, wb, rows, k, c, kh, kw, problem.pad_pre[0], problem.pad_pre[1], b.th, b.tw, b.p_h, b.p_w,
                *w.stride()), dict(FLIP=problem.mode == ConvMode.CONVOLUTION, CP=CP, BLOCK_R=bm), nw)
    oh, ow = y.shape[2], y.shape[3]
    mo, bk = n * oh * ow, min(64, 1 << (k - 1).bit_length())
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, 2)
    blocks_y = (blocks_and_y_kernel, (cdiv(mo, bm), cdiv(k, bk)),
                (yb, y, mo, oh, ow, k, *y.stride(), z, zs[0], zs[1], zs[3], zs[4], bias, bias_stride, alpha2, coef,
                 swish_beta))
    y_meta = dict(ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BLOCK_M=bm, BLOCK_K=bk, INT64=needs_int64(y, yb, z))
    views = {"x": xb.permute(0, 3, 1, 2), "w": wb.permute(0, 3, 1, 2), "y": yb.permute(0, 3, 1, 2)}
    if problem.direction == "fwd":
        launch(*blocks_x, dict(x_meta, TO_X=False), nw)
        if beta != 0:  # y into blocks, blended there by the convolution's own beta
            launch(*blocks_y, dict(y_meta, TO_Y=False), nw)
        algorithm.run(inner, views, {}, alpha, beta)
        launch(*blocks_y, dict(y_meta, TO_Y=True), nw)
    elif problem.direction == "bwd_data":  # dy into blocks; dx out of them (its real channels)
        launch(*blocks_y, dict(y_meta, TO_Y=False), nw)
        if beta != 0:
            launch(*blocks_x, dict(x_meta, TO_X=False), nw)
        algorithm.run(inner, views, {}, alpha, beta)
        launch(*blocks_x, dict(x_meta, TO_X=True), nw)
    else:  # backward filter: x and dy into blocks, the block filter's gradient, folded into dw
        launch(*blocks_x, dict(x_meta, TO_X=False), nw)
        launch(*blocks_y, dict(y_meta, TO_Y=False), nw)
        algorithm.run(inner, views, {name: v for name, v in workspace.items() if not name.startswith("s2d_")},
                      1.0, 0.0)
        total = k * c * kh * kw
        launch(blocks_to_filter_kernel, (cdiv(total, 256),),
               (wb, w, total, k, c, kh, kw, problem.pad_pre[0], problem.pad_pre[1], b.th, b.tw, b.p_h, b.p_w,
                *w.stride(), float(alpha), float(beta)),
               dict(FLIP=problem.mode == ConvMode.CONVOLUTION, BETA_ZERO=beta == 0, CP=CP, BLOCK=256), nw)


# --------------------------------------------------------------------------------------
# Offline compile (no GPU needed): CI checks the kernels build for sm_90
# --------------------------------------------------------------------------------------

def compile_sm90(name: str, dtype: str = "bf16", to=True, act=-1, has_bias=False, has_z=False):
    """Compile one of this module's kernels (name: "x_and_blocks", "filter_to_blocks",
    "blocks_and_y", "blocks_to_filter") for sm_90 without a GPU; returns the CompiledKernel.
    to: TO_X / TO_Y; act, has_bias, has_z: blocks_and_y's epilogue."""
    from triton.compiler import ASTSource

    from .gluon_common import compile_sm90 as compile_for_sm90  # (the one offline compile helper)

    ptr = "*" + dtype
    kernels = {
        "x_and_blocks": (x_and_blocks_kernel, {"x_ptr": ptr, "xb_ptr": ptr},
                         dict(TO_X=to, CP=CP, BLOCK_M=64, INT64=False)),
        "filter_to_blocks": (filter_to_blocks_kernel, {"w_ptr": ptr, "wb_ptr": ptr},
                             dict(FLIP=False, CP=CP, BLOCK_R=64)),
        "blocks_and_y": (blocks_and_y_kernel, {"yb_ptr": ptr, "y_ptr": ptr, "z_ptr": ptr, "bias_ptr": ptr,
                                               "alpha2": "fp32", "coef": "fp32", "swish_beta": "fp32"},
                         dict(TO_Y=to, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BLOCK_M=64, BLOCK_K=64,
                              INT64=False)),
        "blocks_to_filter": (blocks_to_filter_kernel, {"wb_ptr": ptr, "dw_ptr": ptr, "alpha": "fp32",
                                                       "beta": "fp32"},
                             dict(FLIP=False, BETA_ZERO=False, CP=CP, BLOCK=256)),
    }
    fn, types, consts = kernels[name]
    return compile_for_sm90(fn, types, consts, 4, source=ASTSource)
