"""DIRECT forward convolution in Triton: depthwise and small-group, memory bound.

With one (or a few) input channels per group there is no GEMM worth the name: each
output element is taps x (channels per group) multiply-adds. A program owns a tile
of BLOCK_P output pixels x BLOCK_C output channels; channels run along the tile's
fast axis, so in NHWC every load and store is a contiguous, vectorized run of
channels. The loop visits each tap (and each input channel of the group) once,
accumulating in float32; neighbouring pixels' taps overlap, and those re-reads hit
L1/L2, so x and y cross DRAM about once. Ends in the fused epilogue.

Depthwise 3x3 with stride 1 and no dilation (MobileNet's common layer) takes
``dw3_rows_kernel`` instead: a program owns a strip of BH output rows x BW columns x
BC channels of one image and walks down the input rows, each loaded once (three
column-shifted loads whose overlap hits L1) and multiplied into the three output rows
it feeds, kept as three rolling float32 accumulators; an output row is stored the
moment its last input row has arrived. Per input element that is 3 loads and 9 FMAs
instead of 9 loads, no per-pixel div/mod, and the strip's x crosses L2 once plus two
halo rows. Backward data of such a layer (stride 1, multiplier 1) is the same kernel on
dy with the flipped filter and padding 2 - pad (conv_depthwise_backward).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from .common import TritonConvAlgorithm, Tuner, cdiv, launch, next_pow2, problem_key, split_rows, wide
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, needs_int64, strides5
from .memo import IdentityMemo

MAX_CHANNELS_PER_GROUP = 16


@triton.jit(do_not_specialize=['M', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW'])
def conv_direct_fwd_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr, z_ptr,
        M, K, Cg, Kg, ID, IH, IW, OD, OH, OW, KD, KH, KW,
        SD, SH, SW, PD, PH, PW, DD, DH, DW,
        xs_n, xs_c, xs_d, xs_h, xs_w,
        ws_k, ws_c, ws_d, ws_h, ws_w,
        ys_n, ys_k, ys_d, ys_h, ys_w,
        zs_n, zs_k, zs_d, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, DEPTHWISE: tl.constexpr, FLIP: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_k = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_m = offs_m < M
    mask_k = offs_k < K
    nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
        ws_k, ws_c, ws_d, ws_h, ws_w = wide((ws_k, ws_c, ws_d, ws_h, ws_w))
        ys_n, ys_k, ys_d, ys_h, ys_w = wide((ys_n, ys_k, ys_d, ys_h, ys_w))
        zs_n, zs_k, zs_d, zs_h, zs_w = wide((zs_n, zs_k, zs_d, zs_h, zs_w))
    if DEPTHWISE:
        x_chan = offs_k * xs_c
    else:
        x_chan = (offs_k // Kg) * Cg * xs_c
    id0 = od * SD - PD
    ih0 = oh * SH - PH
    iw0 = ow * SW - PW
    x_row = nn * xs_n + id0 * xs_d + ih0 * xs_h + iw0 * xs_w
    w_col = offs_k * ws_k
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for kd in range(0, KD):
        okd = mask_m & (id0 + kd * DD >= 0) & (id0 + kd * DD < ID)
        for kh in range(0, KH):
            okh = okd & (ih0 + kh * DH >= 0) & (ih0 + kh * DH < IH)
            for kw in range(0, KW):
                ok = okh & (iw0 + kw * DW >= 0) & (iw0 + kw * DW < IW)
                x_tap = x_row + kd * DD * xs_d + kh * DH * xs_h + kw * DW * xs_w
                if FLIP:
                    w_tap = (KD - 1 - kd) * ws_d + (KH - 1 - kh) * ws_h + (KW - 1 - kw) * ws_w
                else:
                    w_tap = kd * ws_d + kh * ws_h + kw * ws_w
                mask = ok[:, None] & mask_k[None, :]
                if DEPTHWISE:
                    xv = tl.load(x_ptr + x_tap[:, None] + x_chan[None, :], mask=mask, other=0.0)
                    wv = tl.load(w_ptr + w_col + w_tap, mask=mask_k, other=0.0)
                    acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
                else:
                    for ci in range(0, Cg):
                        xv = tl.load(x_ptr + x_tap[:, None] + (x_chan + ci * xs_c)[None, :], mask=mask,
                                     other=0.0)
                        wv = tl.load(w_ptr + w_col + ci * ws_c + w_tap, mask=mask_k, other=0.0)
                        acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
    row_y = nn * ys_n + od * ys_d + oh * ys_h + ow * ys_w
    row_z = nn * zs_n + od * zs_d + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, offs_k, mask_m, mask_k, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
               bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


@triton.jit
def _row3(x_ptr, row, row_ok, col0, col1, col2, ok0, ok1, ok2, chan, mask_k):
    """One input row at the three column shifts of a 3-wide filter, [BW, BC] in x's dtype
    (converted where used, so a prefetched row holds half the registers in 16 bit)."""
    base = x_ptr + row
    m = row_ok & mask_k[None, :]
    x0 = tl.load(base + col0[:, None] + chan[None, :], mask=m & ok0[:, None], other=0.0)
    x1 = tl.load(base + col1[:, None] + chan[None, :], mask=m & ok1[:, None], other=0.0)
    x2 = tl.load(base + col2[:, None] + chan[None, :], mask=m & ok2[:, None], other=0.0)
    return x0, x1, x2


@triton.jit
def _taps3(w_ptr, w_col, mask_k, kh, ws_h, ws_w, FLIP: tl.constexpr):
    """The three weights of filter row kh (of the flipped filter when FLIP), float32 [1, BC]."""
    if FLIP:
        kh = 2 - kh
        base = w_ptr + w_col + kh * ws_h + 2 * ws_w
        step = -ws_w
    else:
        base = w_ptr + w_col + kh * ws_h
        step = ws_w
    w0 = tl.load(base, mask=mask_k, other=0.0).to(tl.float32)[None, :]
    w1 = tl.load(base + step, mask=mask_k, other=0.0).to(tl.float32)[None, :]
    w2 = tl.load(base + 2 * step, mask=mask_k, other=0.0).to(tl.float32)[None, :]
    return w0, w1, w2


@triton.jit(do_not_specialize=['IH', 'IW', 'OH', 'OW', 'PH', 'PW', 'n_rows', 'n_cols'])
def dw3_rows_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr, z_ptr,
        # sizes: output channels, output channels per input channel, input / output H x W,
        # padding (any sign), row strips and column blocks per image
        K, Kg, IH, IW, OH, OW, PH, PW, n_rows, n_cols,
        # element strides (n, c, h, w) of x, (k, h, w) of w, (n, k, h, w) of y and z
        xs_n, xs_c, xs_h, xs_w,
        ws_k, ws_h, ws_w,
        ys_n, ys_k, ys_h, ys_w,
        zs_n, zs_k, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        BH: tl.constexpr, BW: tl.constexpr, BC: tl.constexpr, FLIP: tl.constexpr, PREFETCH: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr):
    """Depthwise 3x3, stride 1, dilation 1: y[n, k, o, q] = sum_{a,b} x[n, k // Kg, o - PH + a,
    q - PW + b] * w[k, a, b], one strip of BH rows x BW columns x BC channels per program."""
    # -- map the program to (image, row strip, column block) and a channel block
    pid = tl.program_id(0)
    col_blk = pid % n_cols
    t = pid // n_cols
    row_blk = t % n_rows
    n = t // n_rows
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
        ws_k, ws_h, ws_w = wide((ws_k, ws_h, ws_w))
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    offs_k = tl.program_id(1) * BC + tl.arange(0, BC)
    mask_k = offs_k < K
    ow = col_blk * BW + tl.arange(0, BW)
    mask_w = ow < OW
    oh0 = row_blk * BH
    oh_end = tl.minimum(oh0 + BH, OH)

    # -- pointers: the three column shifts of an input row, the channels, the weights
    iw = ow - PW
    ok0 = mask_w & (iw >= 0) & (iw < IW)
    ok1 = mask_w & (iw >= -1) & (iw + 1 < IW)
    ok2 = mask_w & (iw >= -2) & (iw + 2 < IW)
    col0 = iw * xs_w
    col1 = col0 + xs_w
    col2 = col1 + xs_w
    chan = (offs_k // Kg) * xs_c
    x_img = n * xs_n
    w_col = offs_k * ws_k
    w00, w01, w02 = _taps3(w_ptr, w_col, mask_k, 0, ws_h, ws_w, FLIP)
    w10, w11, w12 = _taps3(w_ptr, w_col, mask_k, 1, ws_h, ws_w, FLIP)
    w20, w21, w22 = _taps3(w_ptr, w_col, mask_k, 2, ws_h, ws_w, FLIP)

    # -- walk the input rows i = o - PH + a that feed output rows oh0 .. oh_end - 1: row i
    # is tap row 2 of output row i + PH - 2 (finished with it), row 1 of i + PH - 1 and
    # row 0 of i + PH (started with it)
    acc_done = tl.zeros((BW, BC), dtype=tl.float32)
    acc_mid = tl.zeros((BW, BC), dtype=tl.float32)
    y_cols = ow * ys_w
    z_cols = ow * zs_w
    i_first = oh0 - PH
    i_end = oh_end - PH + 2
    # PREFETCH rows ahead (0-3): row i + PREFETCH's loads are issued before row i's FMAs,
    # so PREFETCH + 1 rows are in flight per program (raw values: 16-bit x costs 1.5
    # registers per element and row)
    if PREFETCH >= 1:
        a0, a1, a2 = _row3(x_ptr, x_img + i_first * xs_h, (i_first >= 0) & (i_first < IH), col0, col1, col2,
                           ok0, ok1, ok2, chan, mask_k)
    if PREFETCH >= 2:
        j = i_first + 1
        b0, b1, b2 = _row3(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH) & (j < i_end), col0, col1, col2,
                           ok0, ok1, ok2, chan, mask_k)
    if PREFETCH >= 3:
        j = i_first + 2
        c0, c1, c2 = _row3(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH) & (j < i_end), col0, col1, col2,
                           ok0, ok1, ok2, chan, mask_k)
    for i in range(i_first, i_end):
        j = i + PREFETCH
        j_ok = (j >= 0) & (j < IH) & (j < i_end)
        if PREFETCH == 0:
            x0, x1, x2 = _row3(x_ptr, x_img + i * xs_h, (i >= 0) & (i < IH), col0, col1, col2, ok0, ok1, ok2,
                               chan, mask_k)
        elif PREFETCH == 1:
            x0, x1, x2 = a0, a1, a2
            a0, a1, a2 = _row3(x_ptr, x_img + j * xs_h, j_ok, col0, col1, col2, ok0, ok1, ok2, chan, mask_k)
        elif PREFETCH == 2:
            x0, x1, x2 = a0, a1, a2
            a0, a1, a2 = b0, b1, b2
            b0, b1, b2 = _row3(x_ptr, x_img + j * xs_h, j_ok, col0, col1, col2, ok0, ok1, ok2, chan, mask_k)
        else:
            x0, x1, x2 = a0, a1, a2
            a0, a1, a2 = b0, b1, b2
            b0, b1, b2 = c0, c1, c2
            c0, c1, c2 = _row3(x_ptr, x_img + j * xs_h, j_ok, col0, col1, col2, ok0, ok1, ok2, chan, mask_k)
        x0 = x0.to(tl.float32)
        x1 = x1.to(tl.float32)
        x2 = x2.to(tl.float32)
        acc_done += x0 * w20 + x1 * w21 + x2 * w22
        acc_mid += x0 * w10 + x1 * w11 + x2 * w12
        acc_new = x0 * w00 + x1 * w01 + x2 * w02
        o = i + PH - 2
        if o >= oh0:
            store_tile(acc_done, n * ys_n + o * ys_h + y_cols, n * zs_n + o * zs_h + z_cols, offs_k, mask_w,
                       mask_k, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride, alpha, beta, alpha2, coef,
                       swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
        acc_done = acc_mid
        acc_mid = acc_new


@triton.jit(do_not_specialize=['M', 'IH', 'IW', 'OH', 'OW', 'SH', 'SW', 'PH', 'PW', 'DH', 'DW'])
def dw_taps_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr, z_ptr,
        # sizes: output pixels (N x OH x OW), output channels and output channels per input
        # channel, H x W of x and y, stride, padding, dilation
        M, K, Kg, IH, IW, OH, OW, SH, SW, PH, PW, DH, DW,
        # element strides (n, c, h, w) of x, (k, h, w) of w, (n, k, h, w) of y and z
        xs_n, xs_c, xs_h, xs_w,
        ws_k, ws_h, ws_w,
        ys_n, ys_k, ys_h, ys_w,
        zs_n, zs_k, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        KH: tl.constexpr, KW: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, FLIP: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr):
    """2-D depthwise forward, any stride/padding/dilation: conv_direct_fwd_kernel's tile
    (flattened output pixels x channels) with the filter size a constexpr, so the taps
    unroll and all their masked loads are in flight together (the runtime tap loop has one
    load per iteration: 2.15-2.4 TB/s on the H200's strided layers)."""
    # -- map the program to a tile of output pixels (n, o, q) x channels
    offs_m = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_k = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_m = offs_m < M
    mask_k = offs_k < K
    ow = offs_m % OW
    t = offs_m // OW
    oh = t % OH
    nn = t // OH
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
        ws_k, ws_h, ws_w = wide((ws_k, ws_h, ws_w))
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    # -- pointers: the tile's top-left input pixel, the channels, the weights
    ih0 = oh * SH - PH
    iw0 = ow * SW - PW
    x_row = nn * xs_n + ih0 * xs_h + iw0 * xs_w
    x_chan = (offs_k // Kg) * xs_c
    w_col = w_ptr + offs_k * ws_k
    # -- every tap, unrolled
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for kh in tl.static_range(KH):
        okh = mask_m & (ih0 + kh * DH >= 0) & (ih0 + kh * DH < IH)
        for kw in tl.static_range(KW):
            ok = okh & (iw0 + kw * DW >= 0) & (iw0 + kw * DW < IW)
            if FLIP:
                w_tap = (KH - 1 - kh) * ws_h + (KW - 1 - kw) * ws_w
            else:
                w_tap = kh * ws_h + kw * ws_w
            xv = tl.load(x_ptr + (x_row + kh * DH * xs_h + kw * DW * xs_w)[:, None] + x_chan[None, :],
                         mask=ok[:, None] & mask_k[None, :], other=0.0)
            wv = tl.load(w_col + w_tap, mask=mask_k, other=0.0)
            acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
    # -- the fused epilogue
    row_y = nn * ys_n + oh * ys_h + ow * ys_w
    row_z = nn * zs_n + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, offs_k, mask_m, mask_k, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
               bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


def taps2d_applies(problem) -> bool:
    """dw_taps_kernel's case: 2-D (or 1-row) depthwise (one input channel per group)."""
    geo = geometry(problem)
    return geo.cg == 1 and geo.inp[0] == 1 and geo.out[0] == 1 and geo.ker[0] == 1


def taps2d_configs(device, k):
    """(BLOCK_P, BLOCK_C, warps) for dw_taps_kernel: the nine raw tap tiles are live at
    once, so tiles of 8-16 elements per thread (sm_90 bf16 3x3: see the commit)."""
    if device.type != "cuda":
        return [dict(BLOCK_P=8, BLOCK_C=8, num_warps=1)]
    out = []
    for bp, bc, warps in ((32, 64, 4), (64, 32, 4), (16, 64, 4), (32, 32, 4), (16, 128, 4), (64, 64, 8),
                          (32, 128, 8), (128, 32, 8)):
        if bc <= max(32, next_pow2(k)):
            out.append(dict(BLOCK_P=bp, BLOCK_C=bc, num_warps=warps))
    return out


def launch_taps2d(x, w, y, geo, alpha, beta, spec, cfg, flip, nd):
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    xs, ws, ys = strides5(x, nd), strides5(w, nd), strides5(y, nd)
    M = geo.out_pixels
    grid = (cdiv(M, cfg["BLOCK_P"]), cdiv(geo.k, cfg["BLOCK_C"]))
    head = (M, geo.k, geo.kg, *geo.inp[1:], *geo.out[1:], *geo.stride[1:], *geo.pad[1:], *geo.dil[1:],
            xs[0], xs[1], xs[3], xs[4], ws[0], ws[3], ws[4], ys[0], ys[1], ys[3], ys[4],
            zs[0], zs[1], zs[3], zs[4], bias_stride)
    consts = dict(KH=geo.ker[1], KW=geo.ker[2], BLOCK_P=cfg["BLOCK_P"], BLOCK_C=cfg["BLOCK_C"], FLIP=flip, ACT=act,
                  HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0, INT64=needs_int64(x, y, z))
    launch(dw_taps_kernel, grid, (x, w, y, bias, z) + head + (float(alpha), float(beta), alpha2, coef, swish_beta),
           consts, dict(num_warps=cfg["num_warps"]))


def rows3_applies(problem) -> bool:
    """dw3_rows_kernel's case: 2-D (or 1-row) depthwise 3x3, stride 1, no dilation."""
    geo = geometry(problem)
    return (geo.cg == 1 and geo.ker == (1, 3, 3) and geo.stride == (1, 1, 1) and geo.dil == (1, 1, 1)
            and geo.inp[0] == 1 and geo.out[0] == 1)


def rows3_configs(device, k):
    """(BH, BW, BC, warps, PREFETCH) candidates; the first is the conservative one the tuner
    checks the others against. The kernel is latency bound (1.2-1.6 TB/s on the H200 with
    4-element tiles per thread; sm_90: 89 registers at 4 elements, 150 at 8, mostly the
    nine float32 weights per channel, so 3-5 programs per SM), so the others put more
    bytes in flight: rows prefetched 1-3 ahead, 8 elements (16 bytes of bf16) per thread,
    shorter strips (more programs, BH 4-8) and wider tiles. BC spans the channels when they are few (C = 32: one block),
    else 16/32/64/128-wide blocks (C = 144 = 9 x 16: no masked channels)."""
    if device.type != "cuda":
        return [dict(BH=4, BW=4, BC=4, num_warps=1)]
    out = []
    for bh, bw, bc, warps, pre in (
            (16, 16, 32, 4, 0), (8, 32, 32, 4, 0), (16, 8, 64, 4, 0), (16, 32, 16, 4, 0),
            (8, 16, 64, 4, 0), (16, 16, 64, 8, 0), (8, 8, 128, 4, 0),
            # prefetched 1-3 rows ahead: 4 and 8 elements per thread, strips of 4-16 rows
            (16, 16, 32, 4, 1), (16, 16, 32, 4, 2), (16, 16, 32, 4, 3), (8, 16, 32, 4, 2), (32, 16, 32, 4, 3),
            (8, 32, 32, 4, 1), (8, 32, 32, 4, 2), (4, 32, 32, 4, 2), (8, 8, 64, 4, 2), (16, 8, 64, 4, 3),
            (8, 16, 64, 4, 2), (4, 16, 64, 4, 1), (8, 8, 128, 4, 2), (8, 32, 64, 8, 1), (16, 16, 16, 4, 3),
            (16, 32, 16, 4, 3)):
        if bc <= max(16, next_pow2(k)):
            out.append(dict(BH=bh, BW=bw, BC=bc, num_warps=warps, PREFETCH=pre))
    return out


def fwd_dw3_candidates(device, k, gluon_shape=None):
    """The forward tuner's list for dw3_rows_kernel's layers: the row kernel's configs
    (first: the conservative one), then conv_direct_fwd_kernel's (KIND "taps": flattened
    pixels x channels, one masked load per tap), which measured as fast or faster on some
    layers (dw144_56: 96.8 vs 100.1 us); then, on the GPU, the TMA row walker's (KIND
    "tma", conv_depthwise_tma: rows in flight by asynchronous copies; run where the
    layout allows it, else the first row config stands in), the prefetching strips, and
    on Hopper the warp-specialized Gluon walker's (KIND "gluon", conv_depthwise_gluon;
    gluon_shape: (OH, OW, itemsize) of a problem it takes, else None). The GPU decides
    per layer."""
    from . import conv_depthwise_strip, conv_depthwise_tma
    rows = [dict(c, KIND="rows") for c in rows3_configs(device, k)]
    tma = conv_depthwise_tma.fwd_configs(device, k) if device.type == "cuda" else []
    strip = [dict(c, KIND="strip") for c in conv_depthwise_strip.configs(device, k)]
    gluon = []
    if gluon_shape is not None:
        from . import conv_depthwise_gluon
        gluon = conv_depthwise_gluon.configs(gluon_shape[0], gluon_shape[1], k, gluon_shape[2])
    return rows + depthwise_taps_candidates(device, k) + tma + strip + gluon


def dw2d_candidates(device, problem, gluon_shape=None):
    """depthwise_taps_candidates, then (GPU, 3x3 stride 2 padding 1) the TMA row walker's
    phase-view configs (KIND "tma"), then (3x3 stride 2) conv_depthwise_strip's
    prefetching row walker (KIND "strip"), then on Hopper the Gluon walker's pair-view
    configs (KIND "gluon"; gluon_shape: gluon_dw3_shape's answer, else None)."""
    from . import conv_depthwise_strip, conv_depthwise_tma
    out = depthwise_taps_candidates(device, problem.k)
    if device.type == "cuda" and conv_depthwise_tma.s2_applies(problem):
        out += conv_depthwise_tma.fwd_configs(device, problem.k, stride=2)
    if conv_depthwise_strip.applies(problem) and geometry(problem).stride[1:] == (2, 2):
        out += [dict(c, KIND="strip") for c in conv_depthwise_strip.configs(device, problem.k, stride=2)]
    if gluon_shape is not None:
        from . import conv_depthwise_gluon
        out += conv_depthwise_gluon.configs(gluon_shape[0], gluon_shape[1], problem.k, gluon_shape[2])
    return out


def launch_tma_or(x, w, y, nd, stride, pad, alpha, beta, spec, cfg, flip, fallback):
    """conv_depthwise_tma's forward row walker when x's layout allows TMA, else
    ``fallback()`` (the tuner's key does not fix the strides and alignment of a call)."""
    from . import conv_depthwise_tma
    if conv_depthwise_tma.fwd_layout_ok(x, y, nd, stride, pad) and conv_depthwise_tma.box_ok(cfg, x):
        conv_depthwise_tma.launch_fwd(x, w, y, nd, stride, pad, alpha, beta, spec, cfg, flip)
    else:
        fallback()


def gluon_dw3_shape(problem, x, w, y, spec):
    """(OH, OW, itemsize) when conv_depthwise_gluon's walker may run this forward call
    (offered, no fused epilogue, its why_not holds), else None."""
    if spec is not None:
        return None
    geo = geometry(problem)
    return gluon_dw3_shape_of(x, w, y, geo.stride[1:], geo.dil[1:])


def gluon_dw3_shape_of(x, w, y, stride=(1, 1), dilation=(1, 1)):
    """(OH, OW, itemsize) when conv_depthwise_gluon's walker is offered and may compute
    y = conv(x, w) (backward data: x = dy, y = dx, the filter turned), else None."""
    try:
        from . import conv_depthwise_gluon
    except ImportError:  # a Triton without Gluon
        return None
    if not conv_depthwise_gluon.OFFERED or conv_depthwise_gluon.why_not(x, w, y, stride, dilation) is not None:
        return None
    return y.shape[2], y.shape[3], y.element_size()


def launch_gluon_or(x, w, y, pad, alpha, beta, spec, cfg, flip, fallback, stride=1):
    """conv_depthwise_gluon's walker when these tensors qualify (the tuner's key does not
    fix a call's strides and alignment), else ``fallback()``."""
    from . import conv_depthwise_gluon
    if spec is None and conv_depthwise_gluon.why_not(x, w, y, (stride, stride), (1, 1)) is None:
        conv_depthwise_gluon.conv(x, w, y, pad, cfg, alpha, beta, flip, stride=stride)
    else:
        fallback()


def depthwise_taps_candidates(device, k):
    """conv_direct_fwd_kernel's configs (KIND "taps", the runtime tap loop: first, the
    reference of the other layers' tuning), then dw_taps_kernel's (KIND "taps2d")."""
    return [dict(c, KIND="taps") for c in _configs(device, k)] + [dict(c, KIND="taps2d")
                                                                   for c in taps2d_configs(device, k)]


def launch_rows3(x, w, y, geo, pad_hw, alpha, beta, spec, cfg, flip, nd):
    """dw3_rows_kernel over x (N, C, [1,] H, W) into y: forward (x, w, y) or, with the
    filter flipped and padding 2 - pad, backward data (dy, w, dx) of a stride-1 layer."""
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    xs, ws, ys = strides5(x, nd), strides5(w, nd), strides5(y, nd)
    k, kg = y.shape[1], y.shape[1] // x.shape[1]
    ih, iw = x.shape[-2] if nd >= 2 else 1, x.shape[-1]
    oh, ow = y.shape[-2] if nd >= 2 else 1, y.shape[-1]
    n_rows, n_cols = cdiv(oh, cfg["BH"]), cdiv(ow, cfg["BW"])
    grid = (y.shape[0] * n_rows * n_cols, cdiv(k, cfg["BC"]))
    head = (k, kg, ih, iw, oh, ow, pad_hw[0], pad_hw[1], n_rows, n_cols,
            xs[0], xs[1], xs[3], xs[4], ws[0], ws[3], ws[4], ys[0], ys[1], ys[3], ys[4],
            zs[0], zs[1], zs[3], zs[4], bias_stride)
    consts = dict(BH=cfg["BH"], BW=cfg["BW"], BC=cfg["BC"], FLIP=flip, PREFETCH=cfg.get("PREFETCH", 0), ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z,
                  BETA_ZERO=beta == 0, INT64=needs_int64(x, y, z))
    launch(dw3_rows_kernel, grid, (x, w, y, bias, z) + head + (float(alpha), float(beta), alpha2, coef, swish_beta),
           consts, dict(num_warps=cfg["num_warps"]))


def _configs(device, k):
    if device.type != "cuda":
        return [dict(BLOCK_P=16, BLOCK_C=16, num_warps=1)]
    out = []
    for bp, bc, warps in ((64, 64, 4), (32, 128, 4), (128, 32, 4), (64, 128, 8), (128, 64, 8), (16, 256, 4)):
        if bc <= max(32, triton.next_power_of_2(k)):
            out.append(dict(BLOCK_P=bp, BLOCK_C=bc, num_warps=warps))
    return out


def launch_direct(problem, x, w, y, alpha, beta, spec, cfg):
    if spec is None:  # launch arguments built once per problem, strides and config
        recipe = _recipes.get((problem, cfg), (x.stride(), w.stride(), y.stride(), beta == 0),
                              lambda: _recipe(problem, x, w, y, beta, None, cfg))
        bias, z = y, y
    else:
        recipe = _recipe(problem, x, w, y, beta, spec, cfg)
        bias = spec.bias.reshape(-1) if spec.bias is not None else y
        z = spec.z if spec.z is not None else y
    grid, head, tail, consts, options, static = recipe
    launch(conv_direct_fwd_kernel, grid, (x, w, y, bias, z) + head + (float(alpha), float(beta)) + tail,
           consts, options, static)


_recipes = IdentityMemo()


def _recipe(problem, x, w, y, beta, spec, cfg):
    """Grid, scalar arguments and constexprs: everything but the tensors and alpha/beta."""
    geo = geometry(problem)
    nd = problem.nd
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    M = geo.out_pixels
    grid = (cdiv(M, cfg["BLOCK_P"]), cdiv(geo.k, cfg["BLOCK_C"]))
    head = (M, geo.k, geo.cg, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
            *strides5(x, nd), *strides5(w, nd), *strides5(y, nd), *zs, bias_stride)
    tail = (alpha2, coef, swish_beta)
    consts = dict(BLOCK_P=cfg["BLOCK_P"], BLOCK_C=cfg["BLOCK_C"], DEPTHWISE=geo.cg == 1 and geo.kg == 1,
                  FLIP=problem.mode == 0, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                  INT64=needs_int64(x, y, z))
    options = dict(num_warps=cfg["num_warps"])
    static = ((head, tail, tuple(consts.items()), tuple(options.items()),
               (x.dtype, w.dtype, y.dtype, bias.dtype, z.dtype)), 5)
    return grid, head, tail, consts, options, static


class DirectForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.DIRECT
    tuner = Tuner()

    def not_applicable(self, problem):
        reason = super().not_applicable(problem)
        if reason is None and problem.w.c > MAX_CHANNELS_PER_GROUP:
            reason = (f"DIRECT is for depthwise and small-group convolutions (<= "
                      f"{MAX_CHANNELS_PER_GROUP} input channels per group); this one has {problem.w.c}")
        return reason

    def estimate(self, problem):
        byte = problem.dtype.itemsize
        moved = (problem.x.size + problem.y.size) * byte
        compute = problem.flops / 5e12  # CUDA-core FMAs: measured 4-6 TFLOP/s on the H200 (conv1, depthwise)
        return max(moved / 3.0e12, compute) + 4e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        from . import conv_depthwise_strip
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        if rows3_applies(problem):
            geo = geometry(problem)
            pad, nd, flip = geo.pad[1:], problem.nd, problem.mode == 0
            key = (problem_key(problem), spec is not None and spec.act_code, "fwd-dw3")

            def run(c, out, a=1.0, b=0.0):
                if c["KIND"] == "rows":
                    launch_rows3(x, w, out, geo, pad, a, b, spec, c, flip, nd)
                elif c["KIND"] == "strip":
                    conv_depthwise_strip.launch_strip(x, w, out, geo, a, b, spec, c, flip, nd)
                elif c["KIND"] == "tma":
                    first = rows3_configs(y.device, problem.k)[0]
                    launch_tma_or(x, w, out, nd, (1, 1), pad, a, b, spec, c, flip,
                                  lambda: launch_rows3(x, w, out, geo, pad, a, b, spec, first, flip, nd))
                elif c["KIND"] == "taps2d":
                    launch_taps2d(x, w, out, geo, a, b, spec, c, flip, nd)
                elif c["KIND"] == "gluon":
                    first = rows3_configs(y.device, problem.k)[0]
                    launch_gluon_or(x, w, out, pad, a, b, spec, c, flip,
                                    lambda: launch_rows3(x, w, out, geo, pad, a, b, spec, first, flip, nd))
                else:
                    launch_direct(problem, x, w, out, a, b, spec, c)
            # (the list is built on the tuner's miss only: host time per call)
            shape = lambda: gluon_dw3_shape(problem, x, w, y, spec) if y.device.type == "cuda" else None
            cfg = self.tuner.pick(key, lambda: fwd_dw3_candidates(y.device, problem.k, shape()), run, y, y.device)
            run(cfg, y, alpha, beta)
            return
        if taps2d_applies(problem):  # strided / dilated / other sizes: the tap loop or unrolled taps
            geo = geometry(problem)
            nd, flip = problem.nd, problem.mode == 0
            key = (problem_key(problem), spec is not None and spec.act_code, "fwd-dw2d")

            def run2(c, out, a=1.0, b=0.0):
                if c["KIND"] == "taps2d":
                    launch_taps2d(x, w, out, geo, a, b, spec, c, flip, nd)
                elif c["KIND"] == "strip":
                    conv_depthwise_strip.launch_strip(x, w, out, geo, a, b, spec, c, flip, nd)
                elif c["KIND"] == "tma":
                    first = _configs(y.device, problem.k)[0]
                    launch_tma_or(x, w, out, nd, (2, 2), geo.pad[1:], a, b, spec, c, flip,
                                  lambda: launch_direct(problem, x, w, out, a, b, spec, first))
                elif c["KIND"] == "gluon":  # offered at stride 2 (gluon_dw3_shape)
                    first = _configs(y.device, problem.k)[0]
                    launch_gluon_or(x, w, out, geo.pad[1:], a, b, spec, c, flip,
                                    lambda: launch_direct(problem, x, w, out, a, b, spec, first), stride=geo.stride[1])
                else:
                    launch_direct(problem, x, w, out, a, b, spec, c)
            shape = lambda: gluon_dw3_shape(problem, x, w, y, spec) if y.device.type == "cuda" else None
            cfg = self.tuner.pick(key, lambda: dw2d_candidates(y.device, problem, shape()), run2, y, y.device)
            run2(cfg, y, alpha, beta)
            return
        key = (problem_key(problem), spec is not None and spec.act_code, "fwd-direct")
        cfg = self.tuner.pick(key, lambda: _configs(y.device, problem.k),
                              lambda c, out: launch_direct(problem, x, w, out, 1.0, 0.0, spec, c), y, y.device)
        launch_direct(problem, x, w, y, alpha, beta, spec, cfg)
