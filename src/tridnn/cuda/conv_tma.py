"""Implicit-GEMM convolutions whose tiles arrive by TMA (Hopper's tensor memory accelerator).

For a channels-last input and stride 1, each kernel tap of the convolution reads a
rectangular box of x: for an output tile of BH x BW pixels of image n and a block of
BLOCK_K channels, tap (kh, kw) reads

    x[n, oh0 + kh*dh - ph : + BH,  ow0 + kw*dw - pw : + BW,  c0 : c0 + BLOCK_K]

One TMA descriptor over x loads that box with one instruction, straight into shared
memory, and fills every element whose coordinate falls outside the array (the zero
padding, including negative coordinates) with zero. So the A tile needs no per-row
index math and no masks, which is what the pointer kernels spend their issue slots on.

Stride s works the same way through a "phase view" of x: with H and W divisible by s
and packed pixels, x[n, s*i + b, s*j + e, c] is the 5-D array [N, H/s, s, W/s, s*C] at
(n, i, b, j, e*C + c), so tap (kh, kw) of output pixel (oh, ow) is the box at
(oh + a_h, b_h, ow + a_w, b_w*C + c0) with (a, b) = divmod(k*d - p, s): still one box
per tap. A 1x1 filter without padding reads a strided view instead (any H, W), and a
1x1 stride-1 problem over dense pixels is a plain GEMM: the pixels are viewed as one
row of one image, so tiles are BLOCK_M consecutive pixels with no edge waste.

Two kernels share this idea:
- ``conv_tma_kernel``: forward (y = x * w) and, with the filter read K-major and
  flipped, backward data at stride 1 (dx = dy * w^T, a forward convolution of dy).
  ``conv_tma_persistent_kernel`` computes the same tiles with one program per SM (or
  two) looping over them in one software-pipelined loop, so a tile's epilogue overlaps
  the next tile's loads; its output leaves by TMA store when the epilogue reads
  neither y nor z. The tuner weighs it as PERSISTENT configs.
- ``wgrad_tma_kernel``: backward filter, dw[k, tap, c] = sum over pixels of
  dy[p, k] x[p + tap offset, c]; the pixel reduction is split into slices written as
  float32 partials that the caller's ``wgrad_finish`` sums in a fixed order
  (deterministic).
The epilogue (alpha/beta, residual, bias, activation) is the pointer-based
``store_tile`` shared by all convolutions. Applicability is decided on the host by
``plan_forward`` / ``plan_backward_data`` / ``plan_backward_filter`` (None: use the
pointer kernels).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import cdiv, grouped_tile, launch, sm_count, wide
from .epilogue import activate, launch_args, store_tile
from .geometry import geometry, input_precision, needs_int64, strides5
from .memo import IdentityMemo


@triton.jit
def tap_origin(tap, NTW, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W):
    """Where loop tap ``tap`` = (th, tw) reads in the phase view: (row shift, row phase,
    column shift, column phase) = floor-divmod of its offset row0 + t*rowstep by the
    view's stride. OFF_H, OFF_W: multiples of the strides that keep the dividends >= 0."""
    th = tap // NTW
    tw = tap - th * NTW
    qh = ROW0_H + th * ROWSTEP_H + OFF_H
    qw = ROW0_W + tw * ROWSTEP_W + OFF_W
    return th, tw, qh // SH - OFF_H // SH, qh % SH, qw // SW - OFF_W // SW, qw % SW


@triton.jit
def conv_tile(x_desc, w_desc, n, oh0, ow0, k0, C_RED, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W,
              SH, SW, OFF_H, OFF_W, W_TAP0, W_STEP_H, W_STEP_W, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, W_KMAJOR: tl.constexpr, PREC: tl.constexpr):
    """The float32 accumulator of one output tile (box origin n, oh0, ow0; columns k0 + ...):
    the sum over T loop taps and C_RED channels, one TMA box of input and one of filter
    per (tap, channel block)."""
    n_cblk = C_RED // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for it in range(0, T * n_cblk):
        tap = it // n_cblk
        c0 = (it - tap * n_cblk) * BLOCK_K
        th, tw, ah, bh, aw, bw = tap_origin(tap, NTW, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W)
        a = x_desc.load([n, oh0 + ah, bh, ow0 + aw, bw * C_RED + c0]).reshape(BLOCK_M, BLOCK_K)
        w_tap = W_TAP0 + th * W_STEP_H + tw * W_STEP_W
        if W_KMAJOR:
            b = w_desc.load([c0, w_tap, k0]).reshape(BLOCK_K, BLOCK_N)
            acc = tl.dot(a, b, acc, input_precision=PREC)
        else:
            b = w_desc.load([k0, w_tap, c0]).reshape(BLOCK_N, BLOCK_K)
            acc = tl.dot(a, b.T, acc, input_precision=PREC)
    return acc


@triton.jit
def tile_origin(tile, N, OH, OW, C_OUT, BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr,
                GROUP_M: tl.constexpr, NB: tl.constexpr):
    """Where output tile ``tile`` starts: (first image, row, column, channel). Tiles go in
    grouped order, GROUP_M pixel tiles at a time, so neighbours share filter columns in L2."""
    tiles_h = tl.cdiv(OH, BH)
    tiles_w = tl.cdiv(OW, BW)
    num_m = tl.cdiv(N, NB) * tiles_h * tiles_w
    num_n = tl.cdiv(C_OUT, BLOCK_N)
    pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
    tw = pid_m % tiles_w
    th = (pid_m // tiles_w) % tiles_h
    n = (pid_m // (tiles_w * tiles_h)) * NB
    return n, th * BH, tw * BW, pid_n * BLOCK_N


@triton.jit
def tile_pixels(n, oh0, ow0, N, OH, OW, BH: tl.constexpr, BW: tl.constexpr, NB: tl.constexpr,
                INT64: tl.constexpr):
    """The output pixel (image, row, column) of each of a tile's NB*BH*BW rows, and
    whether it lies inside the output (clipped at the image edge and at N)."""
    offs = tl.arange(0, NB * BH * BW)
    ow = ow0 + offs % BW
    if NB > 1:
        oh = oh0 + (offs // BW) % BH
        n = n + offs // (BH * BW)
        mask_m = (oh < OH) & (ow < OW) & (n < N)
    else:
        oh = oh0 + offs // BW
        mask_m = (oh < OH) & (ow < OW)
    if INT64:
        n = n.to(tl.int64)
    return n, oh, ow, mask_m


@triton.jit
def conv_tma_kernel(
        # epilogue pointers: output, bias (K values), residual z
        y_ptr, bias_ptr, z_ptr,
        # TMA descriptors: input phase view box [1, BH, 1, BW, BLOCK_K]; filter [rows, taps, cols]
        x_desc, w_desc,
        # output geometry, and the taps (see TapMap): loop taps NTH x NTW = T, input offsets,
        # the phase view's strides, the filter tap of each loop tap
        N, OH, OW, C_RED, C_OUT, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W,
        W_TAP0, W_STEP_H, W_STEP_W,
        # output extent for FILL (strided 1x1 backward data): dx's H and W
        FH, FW,
        # element offset and strides of y and z (n, channel, h, w), and of bias
        y_off, ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
        # epilogue scalars
        alpha, beta, alpha2, coef, swish_beta,
        BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, W_KMAJOR: tl.constexpr, PREC: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr, FILL_SH: tl.constexpr, FILL_SW: tl.constexpr, NB: tl.constexpr):
    """out[n, oh, ow, k] = sum over taps and C_RED channels of inp[box] * w; one
    NB*BH*BW x BLOCK_N output tile per program (NB > 1: the same box of NB images, for
    small images such as 7x7; images past N load as zeros and are not stored). W_KMAJOR: the filter is [C_RED, T, C_OUT]
    (backward data reads the forward filter that way), else [C_OUT, T, C_RED].
    FILL_SH x FILL_SW > 1 (backward data of a strided 1x1 filter): the output strides step
    over FILL_SH x FILL_SW pixels, and the tile also writes the skipped pixels, which get
    no gradient (alpha * 0 + beta * dx)."""
    BLOCK_M: tl.constexpr = NB * BH * BW
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    # -- map the program to an output tile (grouped order for L2 reuse of the filter)
    n, oh0, ow0, k0 = tile_origin(tl.program_id(0), N, OH, OW, C_OUT, BH, BW, BLOCK_N, GROUP_M, NB)

    # -- reduction over (tap, channel block): one TMA box of input, one of filter
    acc = conv_tile(x_desc, w_desc, n, oh0, ow0, k0, C_RED, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W,
                    SH, SW, OFF_H, OFF_W, W_TAP0, W_STEP_H, W_STEP_W, BLOCK_M, BLOCK_N, BLOCK_K, W_KMAJOR, PREC)

    # -- epilogue: rows are the tile's pixels, clipped at the image edge (and at N)
    n, oh, ow, mask_m = tile_pixels(n, oh0, ow0, N, OH, OW, BH, BW, NB, INT64)
    cols = k0 + tl.arange(0, BLOCK_N)
    mask_n = cols < C_OUT
    row_y = y_off + n * ys_n + oh * ys_h + ow * ys_w
    row_z = n * zs_n + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, cols, mask_m, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
               alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
    if FILL_SH * FILL_SW > 1:
        zero = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for a in tl.static_range(FILL_SH):
            for b in tl.static_range(FILL_SW):
                if a + b > 0:
                    inside = mask_m & (oh * FILL_SH + a < FH) & (ow * FILL_SW + b < FW)
                    shifted = row_y + a * (ys_h // FILL_SH) + b * (ys_w // FILL_SW)
                    store_tile(zero, shifted, row_z, cols, inside, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
                               bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z,
                               BETA_ZERO)


@triton.jit
def conv_tma_persistent_kernel(
        # epilogue pointers: output, bias (K values), residual z
        y_ptr, bias_ptr, z_ptr,
        # TMA descriptors: input phase view box [NB, BH, 1, BW, BLOCK_K]; filter [rows, taps, cols];
        # output (TMA_STORE) [N, OH, 1, OW, K] or the flat [1, 1, 1, P, K], box [NB, BH, 1, BW, BLOCK_N / EPI_SPLIT]
        x_desc, w_desc, y_desc,
        # output geometry and the taps, as conv_tma_kernel
        N, OH, OW, C_RED, C_OUT, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W,
        W_TAP0, W_STEP_H, W_STEP_W,
        # element offset and strides of y and z (n, channel, h, w), and of bias
        y_off, ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
        # epilogue scalars
        alpha, beta, alpha2, coef, swish_beta,
        BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, W_KMAJOR: tl.constexpr, PREC: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr, NB: tl.constexpr,
        NUM_PROGRAMS: tl.constexpr, TMA_STORE: tl.constexpr, EPI_SPLIT: tl.constexpr):
    """conv_tma_kernel's tiles, NUM_PROGRAMS programs each looping over every
    NUM_PROGRAMS-th tile. The tile loop is flattened with the (tap, channel block) loop
    into one software-pipelined loop, so the TMA loads of a program's next tile are in
    flight while it stores the current one, and a small layer's last wave has no tail of
    idle SMs waiting on a new launch's programs. TMA_STORE (no y or z to read: beta = 0,
    no residual): the tile leaves by TMA from shared memory (rows past the output are
    clipped by the descriptor), in EPI_SPLIT column slices to shrink the staging buffer;
    otherwise the pointer epilogue store_tile."""
    BLOCK_M: tl.constexpr = NB * BH * BW
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    num_tiles = tl.cdiv(N, NB) * tl.cdiv(OH, BH) * tl.cdiv(OW, BW) * tl.cdiv(C_OUT, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=True):
        # -- map the loop step to an output tile (grouped order, as conv_tma_kernel)
        n, oh0, ow0, k0 = tile_origin(tile, N, OH, OW, C_OUT, BH, BW, BLOCK_N, GROUP_M, NB)

        # -- reduction over (tap, channel block): one TMA box of input, one of filter
        acc = conv_tile(x_desc, w_desc, n, oh0, ow0, k0, C_RED, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W,
                        SH, SW, OFF_H, OFF_W, W_TAP0, W_STEP_H, W_STEP_W, BLOCK_M, BLOCK_N, BLOCK_K, W_KMAJOR,
                        PREC)

        # -- epilogue
        cols = k0 + tl.arange(0, BLOCK_N)
        mask_n = cols < C_OUT
        if TMA_STORE:
            v = acc * alpha
            if HAS_BIAS:
                v += tl.load(bias_ptr + cols * bias_stride, mask=mask_n, other=0.0).to(tl.float32)[None, :]
            if ACT >= 0:
                v = activate(v, ACT, coef, swish_beta)
            v = v.to(y_ptr.dtype.element_ty)
            if EPI_SPLIT == 2:
                HALF: tl.constexpr = BLOCK_N // 2
                v0, v1 = v.reshape(BLOCK_M, 2, HALF).permute(0, 2, 1).split()
                y_desc.store([n, oh0, 0, ow0, k0], v0.reshape(NB, BH, 1, BW, HALF))
                y_desc.store([n, oh0, 0, ow0, k0 + HALF], v1.reshape(NB, BH, 1, BW, HALF))
            else:
                y_desc.store([n, oh0, 0, ow0, k0], v.reshape(NB, BH, 1, BW, BLOCK_N))
        else:
            pn, oh, ow, mask_m = tile_pixels(n, oh0, ow0, N, OH, OW, BH, BW, NB, INT64)
            row_y = y_off + pn * ys_n + oh * ys_h + ow * ys_w
            row_z = pn * zs_n + oh * zs_h + ow * zs_w
            store_tile(acc, row_y, row_z, cols, mask_m, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
                       alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


@triton.jit
def phase_taps(a, K_N, PAD, DIL, S, STEP, FLIP: tl.constexpr):
    """The taps of dx's phase a (its pixels s*i + a) along one dim, as backward_data_taps
    finds them on the host: filter taps k = first + STEP*j (j < count) with
    (a + PAD - k*DIL) divisible by S, read from dy at i + row0 - j*(STEP*DIL/S).
    Returns (count, row0, filter index of the first tap: flipped in CONVOLUTION mode)."""
    first = a * 0 + STEP
    for t in range(0, STEP):
        first = tl.where(((a + PAD - t * DIL) % S == 0) & (first == STEP), t, first)
    count = tl.where((first < STEP) & (first < K_N), (K_N - first + STEP - 1) // STEP, 0)  # STEP: none
    row0 = (a + PAD - first * DIL) // S  # exact when count > 0 (unused otherwise)
    if FLIP:
        w0 = K_N - 1 - first
    else:
        w0 = first
    return count, row0, w0


@triton.jit
def conv_tma_phases_kernel(
        # output dx, written at its strides (n, channel, h, w)
        y_ptr,
        # TMA descriptors: dy box [1, BH, 1, BW, BLOCK_K]; the filter [K, taps, C] read K-major
        x_desc, w_desc,
        # dy (N, OH, OW, K = C_RED); dx's C_OUT channels, H x W pixels, strides SH x SW
        N, OH, OW, C_RED, C_OUT, H, W, SH, SW,
        # phase q of the grid is dx phase (ORDER >> 4q) & 15 (heaviest first)
        ORDER,
        # per dim: filter size, padding, dilation, tap step (s / gcd(s, d)), dy row step per tap
        KH, KW, PH, PW, DH, DW, STEP_H, STEP_W, RSTEP_H, RSTEP_W,
        ys_n, ys_k, ys_h, ys_w,
        alpha, beta,
        BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, PREC: tl.constexpr, BETA_ZERO: tl.constexpr, INT64: tl.constexpr,
        FLIP: tl.constexpr):
    """Strided backward data in one launch: every phase of dx (pixels (SH*i + a, SW*j + b))
    is a stride-1 convolution of dy over the taps that reach it (conv_tile), and the
    grid holds all phases' tiles, so the GPU balances them in one wave pattern instead
    of one launch per phase. Each dx element is written by exactly one program."""
    BLOCK_M: tl.constexpr = BH * BW
    # -- map the program to (phase, tile): every phase gets the tiles of the largest
    #    one (cdiv(H, SH) x cdiv(W, SW) pixels); a smaller phase masks its last row/column
    pid = tl.program_id(0)
    EH = tl.cdiv(H, SH)
    EW = tl.cdiv(W, SW)
    tiles_h = tl.cdiv(EH, BH)
    tiles_w = tl.cdiv(EW, BW)
    num_m = N * tiles_h * tiles_w
    num_n = tl.cdiv(C_OUT, BLOCK_N)
    q = pid // (num_m * num_n)
    phase = ((ORDER >> (4 * q)) & 15).to(tl.int32)
    a = phase // SW
    b = phase - a * SW
    pid_m, pid_n = grouped_tile(pid - q * (num_m * num_n), num_m, num_n, GROUP_M)
    tw = pid_m % tiles_w
    th = (pid_m // tiles_w) % tiles_h
    n = pid_m // (tiles_w * tiles_h)
    oh0 = th * BH
    ow0 = tw * BW
    k0 = pid_n * BLOCK_N

    # -- this phase's taps, and the reduction over them (dy read at stride 1)
    cnt_h, row0_h, w0_h = phase_taps(a, KH, PH, DH, SH, STEP_H, FLIP)
    cnt_w, row0_w, w0_w = phase_taps(b, KW, PW, DW, SW, STEP_W, FLIP)
    if FLIP:
        wstep_h = -STEP_H
        wstep_w = -STEP_W
    else:
        wstep_h = STEP_H
        wstep_w = STEP_W
    acc = conv_tile(x_desc, w_desc, n, oh0, ow0, k0, C_RED, cnt_w, cnt_h * cnt_w, row0_h, RSTEP_H, row0_w, RSTEP_W,
                    1, 1, 0, 0, w0_h * KW + w0_w, wstep_h * KW, wstep_w, BLOCK_M, BLOCK_N, BLOCK_K, True, PREC)

    # -- epilogue: rows are the tile's pixels of the phase, clipped at dx's edge
    offs = tl.arange(0, BLOCK_M)
    xh = a + SH * (oh0 + offs // BW)  # dx pixel (xh, xw)
    xw = b + SW * (ow0 + offs % BW)
    cols = k0 + tl.arange(0, BLOCK_N)
    mask_m = (xh < H) & (xw < W)
    mask_n = cols < C_OUT
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
    row_y = n * ys_n + xh * ys_h + xw * ys_w
    store_tile(acc, row_y, row_y, cols, mask_m, mask_n, y_ptr, ys_k, y_ptr, 0, y_ptr, 0,
               alpha, beta, 0.0, 0.0, 1.0, -1, False, False, BETA_ZERO)


@triton.jit
def wgrad_boxes(dy_desc, x_desc, first, last, tiles_h, tiles_w, k0, c0, ah, bh, aw, bw, C,
                BH: tl.constexpr, BW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                PREC: tl.constexpr, NB: tl.constexpr):
    """sum over pixel boxes first..last-1 (NB images x BH x BW, image-major) of dy^T x:
    one dy box and one x box (at the tap's origin ah, bh, aw, bw) a step, on the tensor
    cores. Boxes past the image or past N load as zeros. Shared by wgrad_tma_kernel and
    conv_wgrad_tma.wgrad_sched_kernel."""
    BLOCK_P: tl.constexpr = NB * BH * BW
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in range(first, last):
        tw = t % tiles_w
        th = (t // tiles_w) % tiles_h
        n = (t // (tiles_w * tiles_h)) * NB
        a = dy_desc.load([n, th * BH, 0, tw * BW, k0]).reshape(BLOCK_P, BLOCK_M)
        b = x_desc.load([n, th * BH + ah, bh, tw * BW + aw, bw * C + c0]).reshape(BLOCK_P, BLOCK_N)
        acc = tl.dot(a.T, b, acc, input_precision=PREC)
    return acc


@triton.jit
def blend_tile(acc, dw_ptr, rows, cols, tap, K, C_DW, ws_k, ws_c, ws_h, ws_w, KH, KW, alpha, beta,
               FLIP: tl.constexpr, BETA_ZERO: tl.constexpr):
    """dw[rows, cols, tap] = alpha * acc + beta * dw, clipped to K x C_DW; loop tap
    (kh, kw) is filter tap (KH-1-kh, KW-1-kw) in CONVOLUTION mode (FLIP)."""
    kh = tap // KW
    kw = tap - kh * KW
    if FLIP:
        kh = KH - 1 - kh
        kw = KW - 1 - kw
    ptrs = dw_ptr + (rows.to(tl.int64) * ws_k + kh * ws_h + kw * ws_w)[:, None] + cols[None, :] * ws_c
    mask = (rows < K)[:, None] & (cols < C_DW)[None, :]
    v = acc * alpha
    if not BETA_ZERO:
        v += beta * tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs, v.to(dw_ptr.dtype.element_ty), mask=mask)


@triton.jit
def wgrad_tma_kernel(
        part_ptr,  # float32 partial sums [SLICES, K, T, C]
        dw_ptr,    # DIRECT (one slice): the filter gradient itself, at strides ws_*
        # TMA descriptors: dy box [NB, BH, 1, BW, BLOCK_M], x phase view box [NB, BH, 1, BW, BLOCK_N]
        dy_desc, x_desc,
        N, OH, OW, K, C, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W, tiles_per_slice,
        # DIRECT: dw's strides (k, c, h, w), filter size, dw's channels (C may be padded), blend
        ws_k, ws_c, ws_h, ws_w, KH, KW, C_DW, alpha, beta,
        BH: tl.constexpr, BW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        PREC: tl.constexpr, NB: tl.constexpr, DIRECT: tl.constexpr, FLIP: tl.constexpr,
        BETA_ZERO: tl.constexpr):
    """part[s, k, tap, c] = sum over the slice's pixel tiles of dy[p, k] * x[p + tap, c].
    A pixel tile is an NB x BH x BW box: NB > 1 stacks the same box of NB images (small
    images, e.g. 7x7: more real pixels per MMA; images past N load as zeros). DIRECT (a
    single slice): dw = alpha * sum + beta * dw is stored at once, with no float32
    partials and no finish pass (the tap flipped in CONVOLUTION mode, as wgrad_finish)."""
    # -- map the program to (output-channel block, input-channel block, tap, slice)
    pid = tl.program_id(0)
    tap = tl.program_id(1)
    s = tl.program_id(2)
    num_n = tl.cdiv(C, BLOCK_N)
    k0 = (pid // num_n) * BLOCK_M
    c0 = (pid % num_n) * BLOCK_N
    _, _, ah, bh, aw, bw = tap_origin(tap, NTW, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W)
    tiles_h = tl.cdiv(OH, BH)
    tiles_w = tl.cdiv(OW, BW)
    first = s * tiles_per_slice
    last = tl.minimum(first + tiles_per_slice, tl.cdiv(N, NB) * tiles_h * tiles_w)

    # -- reduction over the slice's pixel tiles (dy rows past the edge load as zeros)
    acc = wgrad_boxes(dy_desc, x_desc, first, last, tiles_h, tiles_w, k0, c0, ah, bh, aw, bw, C,
                      BH, BW, BLOCK_M, BLOCK_N, PREC, NB)

    # -- store the partial, or (DIRECT) the blended gradient
    rows = k0 + tl.arange(0, BLOCK_M)
    cols = c0 + tl.arange(0, BLOCK_N)
    if DIRECT:
        blend_tile(acc, dw_ptr, rows, cols, tap, K, C_DW, ws_k, ws_c, ws_h, ws_w, KH, KW, alpha, beta,
                   FLIP, BETA_ZERO)
    else:
        offs = ((s * K + rows).to(tl.int64) * T + tap)[:, None] * C + cols[None, :]
        tl.store(part_ptr + offs, acc, mask=(rows < K)[:, None] & (cols < C)[None, :])


# -- host side: when the TMA path applies, and the views it reads ---------------------
def hardware_ok(t) -> bool:
    """TMA needs a Hopper-class GPU; the interpreter emulates it (tests run it on the CPU)."""
    if t.device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(t.device)[0] >= 9


@dataclass(frozen=True)
class TapMap:
    """The reduction over filter taps as the kernels loop over it, per spatial dim (h, w):
    loop tap t (0 <= t < count) reads the input at output pixel + row0 + t * rowstep (in
    input pixels, before the phase view's division by ``phase``) and multiplies filter tap
    w0 + t * wstep. Forward: row0 = -pad, rowstep = dilation, w taps in order (reversed in
    CONVOLUTION mode); backward data: the transposed walk; a phase of a strided backward
    data: every s-th tap."""
    count: tuple     # (NTH, NTW)
    row0: tuple
    rowstep: tuple
    phase: tuple     # the input phase view's strides (1: plain view)
    w0: tuple        # first filter tap per dim
    wstep: tuple     # filter tap step per dim
    filter_w: int    # the filter's width S (filter tap index = kh * S + kw)

    @property
    def taps(self):
        return self.count[0] * self.count[1]

    @property
    def offsets(self):
        """Multiples of the phase strides that keep each tap's input offset non-negative."""
        out = []
        for r0, st, n, s in zip(self.row0, self.rowstep, self.count, self.phase):
            lowest = min(r0, r0 + (n - 1) * st) if n else 0
            out.append(s * cdiv(max(0, -lowest), s))
        return tuple(out)

    @property
    def args(self):
        """The kernel's (NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W)."""
        return (self.count[1], self.taps, self.row0[0], self.rowstep[0], self.row0[1], self.rowstep[1],
                *self.phase, *self.offsets)

    @property
    def filter_args(self):
        """(W_TAP0, W_STEP_H, W_STEP_W): flat filter tap = W_TAP0 + th * W_STEP_H + tw * W_STEP_W."""
        return (self.w0[0] * self.filter_w + self.w0[1], self.wstep[0] * self.filter_w, self.wstep[1])


def forward_taps(geo, phase, flip) -> TapMap:
    """Loop taps of a forward convolution (and of backward filter, which writes tap t)."""
    (r, s), (ph, pw), (dh, dw) = geo.ker[1:], geo.pad[1:], geo.dil[1:]
    w0, wstep = ((r - 1, s - 1), (-1, -1)) if flip else ((0, 0), (1, 1))
    if phase == (1, 1) and geo.stride[1:] != (1, 1):  # strided 1x1 view: the view holds the stride
        return TapMap((1, 1), (0, 0), (0, 0), (1, 1), (0, 0), (1, 1), 1)
    return TapMap((r, s), (-ph, -pw), (dh, dw), phase, w0, wstep, s)


def backward_data_taps(geo, flip, out_phase=(0, 0)) -> TapMap:
    """Loop taps of dx's pixels s*i + a (phase a per dim) as a stride-1 convolution of dy:
    dx[s*i + a] = sum over taps k with (a + p - k*d) divisible by s of
    dy[i + (a + p - k*d) / s] * w[k] (w flipped in CONVOLUTION mode)."""
    count, row0, rowstep, w0, wstep = [], [], [], [], []
    for a, k_n, p, d, s in zip(out_phase, geo.ker[1:], geo.pad[1:], geo.dil[1:], geo.stride[1:]):
        ks = [k for k in range(k_n) if (a + p - k * d) % s == 0]
        step = ks[1] - ks[0] if len(ks) > 1 else 1
        first = ks[0] if ks else 0
        count.append(len(ks))
        row0.append((a + p - first * d) // s)
        rowstep.append(-(step * d) // s)
        # filter index of tap k: k itself (cross-correlation) or k_n - 1 - k (convolution)
        w0.append(k_n - 1 - first if flip else first)
        wstep.append(-step if flip else step)
    return TapMap(tuple(count), tuple(row0), tuple(rowstep), (1, 1), tuple(w0), tuple(wstep), geo.ker[2])


@dataclass(frozen=True)
class Plan:
    """What a TMA launch reads and writes. The input is a 5-D "phase view"
    [N, H/sh, sh, W/sw, sw*C] (dims and element strides): pixel (s*i + b) of a row sits at
    index (i, b), so a strided convolution's tap is a box at (oh + a, b) with
    (a, b) = divmod(kh*dh - ph, sh); stride 1 is the case sh = sw = 1. Plus the output
    geometry (N, OH, OW) with the output's offset and strides, and the taps."""
    in_shape: tuple
    in_strides: tuple
    n: int
    oh: int
    ow: int
    out_strides: tuple   # (n, channel, h, w) of the output; backward filter: dy's (n, h, w)
    z_strides: tuple     # same for the residual (zeros when absent)
    taps: TapMap
    c_red: int           # reduction channels
    c_out: int           # output channels
    out_offset: int = 0      # element offset of the output's first pixel (a phase of dx)
    fill: tuple = (1, 1)     # backward data of a strided 1x1: the output steps over fill pixels
    fill_hw: tuple = (0, 0)  # ... and the output's real H, W (for the skipped pixels' masks)


def _nhwc_strides(t):
    """(n, h, w) strides of a 4-D NCHW-indexed view whose channels are contiguous, else None."""
    if t.dim() != 4 or t.stride(1) != 1 and t.shape[1] > 1:
        return None
    return t.stride(0), t.stride(2), t.stride(3)


def _aligned(strides, itemsize) -> bool:
    return all(s * itemsize % 16 == 0 for s in strides)


def _dense_pixels(t) -> bool:
    """Pixels of the (n, h, w) dims sit at one uniform stride (a flat [pixels, C] matrix)."""
    n, h, w = t.shape[0], t.shape[2], t.shape[3]
    sn, sh, sw = t.stride(0), t.stride(2), t.stride(3)
    return (h == 1 or sh == w * sw) and (n == 1 or sn == h * w * sw)


def block_k_for(channels: int, itemsize: int):
    """The largest reduction block (64 for 16-bit data, 32 for float32) dividing the
    channels; tl.dot needs at least 16."""
    for bk in ((64, 32, 16) if itemsize == 2 else (32, 16)):
        if channels % bk == 0:
            return bk
    return None


def _filter_view(w):
    """The filter (K, C, R, S) viewed as [K, T, C] element strides (k, tap), or None when
    its taps are not one uniform stride with channels contiguous."""
    k, c, r, s = w.shape
    if w.stride(1) != 1 and c > 1:
        return None
    if r > 1 and w.stride(2) != s * w.stride(3):
        return None
    tap_stride = w.stride(3) if s > 1 else (w.stride(2) if r > 1 else w.stride(0))
    return w.stride(0), tap_stride


def why_not(problem, inputs, w=None) -> str | None:
    """Reason the TMA kernels do not apply, or None. ``inputs``: the activations read by
    TMA (channels-last, 16-byte aligned); ``w``: the filter when it is read by TMA too
    (forward, backward data). Outputs are written by pointers at any strides."""
    if problem.nd != 2:
        return "TMA path: 2-D problems only"
    if problem.groups != 1:
        return "TMA path: groups == 1 only"
    if not hardware_ok(inputs[0]):
        return "TMA path: needs compute capability 9.0 or newer"
    item = inputs[0].element_size()
    for t in inputs:
        st = _nhwc_strides(t)
        if st is None or not _aligned(st, item) or t.data_ptr() % 16:
            return "TMA path: needs channels-last tensors with 16-byte aligned strides"
    if w is not None:
        fv = _filter_view(w)
        if fv is None or not _aligned(fv, item) or w.data_ptr() % 16:
            return "TMA path: needs a channels-last (KRSC) filter with 16-byte aligned strides"
    return None


def padded_channels(problem) -> int | None:
    """The channel count a few-channel problem (a network's first layer: C = 3) is padded
    to in the workspace, so each pixel's channels are a row that TMA can load and tl.dot
    can reduce (a multiple of 16, tl.dot's smallest K); None when C already fits or the
    problem cannot take the TMA path. Only x and w are padded: the extra channels are
    zeros, so they add nothing to the sums."""
    c, item = problem.w.c, problem.dtype.itemsize
    if problem.nd != 2 or problem.groups != 1 or c >= 64 or block_k_for(c, item) is not None:
        return None
    if problem.x.strides[1] != 1:  # channels-last activations only
        return None
    return -(-c // 16) * 16


def pad_into(src, dst):
    """dst[:, :C] = src and dst[:, C:] = 0, for a channels-last dst with more channels."""
    c = src.shape[1]
    dst[:, c:].zero_()
    dst[:, :c].copy_(src)
    return dst


def _flat_view(m, pixel_stride, channels):
    """[1, 1, 1, m, C]: dense pixels as one row (the unit dims' strides are unused)."""
    big = m * pixel_stride
    return (1, 1, 1, m, channels), (big, big, big, pixel_stride, 1)


def _input_view(t, geo, one_by_one):
    """(shape, strides, phase) of the input's phase view, or None. Stride 1: the plain
    [N, H, 1, W, C]. Stride s with H, W divisible by s and packed pixels: [N, H/s, s, W/s,
    s*C]. A 1x1 filter without padding at any stride: the strided view [N, OH, 1, OW, C]."""
    sn, sh_, sw_ = _nhwc_strides(t)
    n, c = t.shape[0], t.shape[1]
    (h, w), (oh, ow), (sh, sw) = geo.inp[1:], geo.out[1:], geo.stride[1:]
    if (sh, sw) == (1, 1):
        return (n, h, 1, w, c), (sn, sh_, sh_, sw_, 1), (1, 1)
    if h % sh == 0 and w % sw == 0 and sw_ == c:
        return (n, h // sh, sh, w // sw, sw * c), (sn, sh * sh_, sh_, sw * sw_, 1), (sh, sw)
    if one_by_one:
        return (n, oh, 1, ow, c), (sn, sh * sh_, sh * sh_, sw * sw_, 1), (1, 1)
    return None


def _x_view(geo, x, c, written):
    """(shape, strides, phase, flat) of how TMA reads x, or None. flat: a 1x1 stride-1
    filter over dense pixels, where x and the tensors ``written`` per pixel are one flat
    row of pixels (a plain GEMM with no edge waste); otherwise the phase view."""
    (r, s), (ph, pw), (sh, sw) = geo.ker[1:], geo.pad[1:], geo.stride[1:]
    one_by_one = (r, s, ph, pw) == (1, 1, 0, 0)
    if one_by_one and (sh, sw) == (1, 1) and all(_dense_pixels(t) for t in (x, *written) if t is not None):
        m = geo.n * geo.out[1] * geo.out[2]
        return (*_flat_view(m, _nhwc_strides(x)[2], c), (1, 1), True)
    view = _input_view(x, geo, one_by_one)
    if view is None or not _aligned(view[1][:4], x.element_size()):
        return None
    return (*view, False)


def plan_forward(problem, x, w, y, z=None) -> Plan | None:
    geo = geometry(problem)
    c = x.shape[1]  # geo.c, or the padded count when x is a padded copy
    if why_not(problem, (x,), w) is not None or block_k_for(c, x.element_size()) is None:
        return None
    view = _x_view(geo, x, c, (y, z))
    if view is None:
        return None
    shape, strides, phase, flat = view
    ys = strides5(y, 2)
    zs = strides5(z, 2) if z is not None else (0, 0, 0, 0, 0)
    taps = forward_taps(geo, phase, problem.mode == 0)
    if flat:  # all pixels as one row of one image
        return Plan(shape, strides, 1, 1, shape[3], (0, ys[1], 0, ys[4]), (0, zs[1], 0, zs[4]), taps, c, geo.k)
    return Plan(shape, strides, geo.n, *geo.out[1:], (ys[0], ys[1], ys[3], ys[4]), (zs[0], zs[1], zs[3], zs[4]),
                taps, c, geo.k)


def plan_backward_data(problem, dy, w, dx) -> tuple | None:
    """dx as stride-1 forward convolutions of dy with the flipped, transposed filter: one
    plan at stride 1; at stride s, one plan per phase of dx (its pixels s*i + a) reading
    every s-th tap, or, for a 1x1 filter, one plan that also writes the skipped pixels."""
    geo = geometry(problem)
    if why_not(problem, (dy,), w) is not None or block_k_for(geo.k, dy.element_size()) is None:
        return None
    if w.shape[1] * w.element_size() % 16:  # the filter box's rows (input channels) must be 16 bytes
        return None
    r, s = geo.ker[1:]
    (ph, pw), (sh, sw) = geo.pad[1:], geo.stride[1:]
    (h, wd), (oh, ow) = geo.inp[1:], geo.out[1:]
    ys = _nhwc_strides(dy)
    xs = strides5(dx, 2)
    flip = problem.mode == 0  # CONVOLUTION mode's forward reads the filter reversed
    dy_view = ((geo.n, oh, 1, ow, geo.k), (ys[0], ys[1], ys[1], ys[2], 1))
    if (sh, sw) == (1, 1):
        if r == 1 and s == 1 and ph == 0 and pw == 0 and _dense_pixels(dy) and _dense_pixels(dx):
            m = geo.n * h * wd
            shape, strides = _flat_view(m, ys[2], geo.k)
            return (Plan(shape, strides, 1, 1, m, (0, xs[1], 0, xs[4]), (0, 0, 0, 0),
                         backward_data_taps(geo, flip), geo.k, geo.c),)
        return (Plan(*dy_view, geo.n, h, wd, (xs[0], xs[1], xs[3], xs[4]), (0, 0, 0, 0),
                     backward_data_taps(geo, flip), geo.k, geo.c),)
    if (r, s, ph, pw) == (1, 1, 0, 0) and tuple(problem.pad_post) == (0, 0):
        # strided 1x1: a GEMM of dy onto every s-th pixel of dx; the tile zeroes the rest
        return (Plan(*dy_view, geo.n, oh, ow, (xs[0], xs[1], sh * xs[3], sw * xs[4]), (0, 0, 0, 0),
                     backward_data_taps(geo, flip), geo.k, geo.c, 0, (sh, sw), (h, wd)),)
    plans = []
    for a in range(sh):
        for b in range(sw):
            if a >= h or b >= wd:
                continue
            plans.append(Plan(*dy_view, geo.n, cdiv(h - a, sh), cdiv(wd - b, sw),
                              (xs[0], xs[1], sh * xs[3], sw * xs[4]), (0, 0, 0, 0),
                              backward_data_taps(geo, flip, (a, b)), geo.k, geo.c, a * xs[3] + b * xs[4]))
    return tuple(plans)


def plan_backward_filter(problem, x, dy, dw) -> Plan | None:
    """dw[k, tap, c]: the plan's input is x (read at the tap offsets), its 'output' dy."""
    geo = geometry(problem)
    c = x.shape[1]  # geo.c, or the padded count when x is a padded copy
    if why_not(problem, (x, dy)) is not None:
        return None
    if block_k_for(c, x.element_size()) is None or geo.k % 8:
        return None
    view = _x_view(geo, x, c, (dy,))
    if view is None:
        return None
    shape, strides, phase, flat = view
    ds = _nhwc_strides(dy)
    taps = forward_taps(geo, phase, False)
    if flat:
        return Plan(shape, strides, 1, 1, shape[3], (0, 0, ds[2]), (0, 0, 0, 0), taps, geo.k, c)
    return Plan(shape, strides, geo.n, *geo.out[1:], ds, (0, 0, 0, 0), taps, geo.k, c)


# -- launch configs ------------------------------------------------------------------
def _cfg(bh, bw, bn, bk_cap, warps, stages):
    return dict(BH=bh, BW=bw, BLOCK_N=bn, BK_CAP=bk_cap, num_warps=warps, num_stages=stages)


# The first config of each list is the conservative one the tuner checks the others
# against. Measured on the H200 (docs/performance.md, "TMA convolutions"): BH*BW = 128 with
# BLOCK_N 128, 8 warps and 4 stages ((8, 16) and (16, 8) boxes) gave wrong results on the
# strided 1x1 view and on backward data (Triton 3.6), so those combinations are not listed.
FLAT_CONFIGS = [_cfg(1, 64, 128, 64, 4, 4), _cfg(1, 128, 64, 64, 4, 4), _cfg(1, 256, 128, 64, 8, 3),
                _cfg(1, 128, 256, 64, 8, 3), _cfg(1, 128, 128, 64, 8, 3), _cfg(1, 256, 64, 64, 8, 3)]
TILE_CONFIGS = [_cfg(8, 8, 128, 64, 4, 4), _cfg(16, 16, 128, 64, 8, 3), _cfg(8, 8, 256, 64, 8, 3),
                _cfg(8, 16, 256, 64, 8, 3), _cfg(4, 16, 128, 64, 4, 4), _cfg(8, 8, 64, 64, 4, 4),
                _cfg(16, 16, 64, 64, 8, 3), _cfg(8, 16, 64, 64, 4, 4)]
WGRAD_FLAT = [dict(BH=1, BW=128, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4),
              dict(BH=1, BW=128, BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=4),
              dict(BH=1, BW=64, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4),
              dict(BH=1, BW=128, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
              dict(BH=1, BW=64, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=4)]
WGRAD_TILE = [dict(BH=8, BW=8, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=4),
              # (at 4 stages this one was rejected by the tuner's cross-check on the H200's
              # res5 3x3 layers, 2026-11-30 09:02 and 11:50 UTC, Triton 3.6)
              dict(BH=8, BW=8, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
              dict(BH=8, BW=16, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4),
              dict(BH=8, BW=16, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)]
NARROW_CONFIGS = [_cfg(8, 16, 16, 64, 4, 4), _cfg(16, 16, 16, 64, 4, 3), _cfg(16, 16, 32, 64, 8, 3)]
# Strict float32 (tl.dot with input_precision "ieee" runs on CUDA-core FMAs, no MMA)
# wants a short reduction step: on the H200 (benchmarks/sweep_fp32_fma.py, 2026-11-30 08:27 UTC)
# BLOCK_K 16 (BK_CAP 32) ran the 1x1 layers in 496-524 us where the lists above (BLOCK_K
# 32) took 990-1088 us; BLOCK_K 8 does not compile. About 13 TFLOP/s with any of these.
FMA_FLAT = [_cfg(1, 64, 64, 32, 4, 3), _cfg(1, 256, 64, 32, 8, 3), _cfg(1, 64, 128, 32, 4, 2),
            _cfg(1, 128, 64, 32, 8, 3)]
FMA_TILE = [_cfg(8, 8, 64, 32, 4, 2), _cfg(8, 8, 128, 32, 4, 3), _cfg(8, 16, 64, 32, 4, 3)]
INTERPRETER_TILE = _cfg(2, 8, 16, 16, 1, 1)
INTERPRETER_FLAT = _cfg(1, 16, 16, 16, 1, 1)


# Small outputs (7x7: an 8x8 box holds 49 real pixels): boxes of 2 images, 128 rows per
# tile, so each filter tile loaded feeds twice the pixels. Not the 8-warp 4-stage
# combination that miscompiled with 128-pixel boxes (above), nor 2 images x 128 columns at
# 8 warps / 3 stages: the tuner's cross-check rejected it on res5_ds forward in two H200
# runs (2026-11-30 09:02 and 11:50 UTC, Triton 3.6).
SMALL_CONFIGS = [dict(_cfg(8, 8, 128, 64, 4, 4), NB=2), dict(_cfg(8, 8, 256, 64, 8, 3), NB=2),
                 dict(_cfg(8, 8, 64, 64, 4, 4), NB=2)]
SMALL_OUTPUT = 64  # output pixels per image up to which SMALL_CONFIGS are offered


# Extra boxes for the one-launch strided backward data (conv_tma_phases_kernel): 8 x 16
# boxes with 128 columns at 4 warps / 4 stages or 8 warps / 3 stages, neither of them the
# combination excluded above (8 warps and 4 stages); the tuner's cross-check still guards.
# (8 x 16 boxes at 8 warps / 3 stages were rejected by the cross-check on res4_3x3s2 in
# session 4 and again on 2026-11-30 11:50 UTC: not offered.)
PHASE_EXTRA = [_cfg(8, 16, 128, 64, 4, 4)]


# conv_tma_persistent_kernel (PERSISTENT = programs per SM). Shared memory per program as
# compiled for sm_90 (bf16; the H200 has 228 KB per SM): 128 x 256 and 256 x 128 tiles in
# 3 stages 208 KB (operands 144 KB + 64 KB store staging); EPI_SPLIT = 2 stores a tile in
# two column halves, half the staging, which lets 128 x 256 keep 4 stages (224 KB). 8 x 16
# and 16 x 16 boxes 192 and 176 KB, 8 x 8 x 256 144 KB, two 8 x 8 images x 128 144 KB: one
# program per SM. 64 x 128 (112 KB) and 8 x 8 x 128 (104 KB) run two per SM, so one's
# epilogue also overlaps the other's MMAs. 64 columns (outputs of 64 channels: backward
# data of ResNet's 64-channel layers): 256 x 64 152 KB, 16 x 16 x 64 120 KB (one per SM),
# 128 x 64 112 KB and 8 x 16 x 64 96 KB (two). 16-bit data only (float32 doubles the staging).
def _persistent(cfg, per_sm=1, split=1):
    return dict(cfg, PERSISTENT=per_sm, EPI_SPLIT=split)


PERSISTENT_FLAT = [_persistent(_cfg(1, 128, 256, 64, 8, 3)), _persistent(_cfg(1, 256, 128, 64, 8, 3)),
                   _persistent(_cfg(1, 128, 256, 64, 8, 4), split=2), _persistent(_cfg(1, 64, 128, 64, 4, 4), 2),
                   _persistent(_cfg(1, 128, 128, 64, 4, 3)), _persistent(_cfg(1, 256, 64, 64, 8, 3)),
                   _persistent(_cfg(1, 128, 64, 64, 4, 4), 2)]
PERSISTENT_TILE = [_persistent(_cfg(8, 16, 256, 64, 8, 3)), _persistent(_cfg(16, 16, 128, 64, 8, 3)),
                   _persistent(_cfg(8, 8, 256, 64, 8, 3)), _persistent(_cfg(8, 8, 128, 64, 4, 4), 2),
                   _persistent(_cfg(16, 16, 64, 64, 8, 3)), _persistent(_cfg(8, 16, 64, 64, 4, 4), 2)]
PERSISTENT_SMALL = [_persistent(dict(_cfg(8, 8, 256, 64, 8, 3), NB=2)),
                    _persistent(dict(_cfg(8, 8, 128, 64, 4, 4), NB=2))]


# Boxes fitted to the image (16-bit MMA data on tile plans): an 8 x 16 or 16 x 16 box on
# 28x28, 14x14 or 7x7 outputs holds 77% real pixels (the rest is MMA work on TMA's zero
# fill); box_for finds NB x BH x BW = 128 boxes with 87.5%: 28x28 -> 4 x 32, 14x14 -> 4
# images x 2 x 16, 7x7 -> 16 images x 1 x 8, 56x56 -> 2 images x 8 x 8 (all real).
# (pixels, BLOCK_N, warps, stages): the 128- and 256-pixel shapes of TILE_CONFIGS that
# the H200 runs have never rejected; offered after the lists above, the tuner weighs them.
FITTED = [(128, 256, 8, 3), (128, 128, 4, 4), (256, 128, 8, 3)]
BOX_WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128)


def box_for(plan: Plan, pixels: int, min_width: int = 8):
    """(NB, BH, BW) with NB * BH * BW = pixels that wastes the fewest MMA rows on this
    plan's images, BW at least ``min_width``; ties go to the wider box, then to fewer
    images. min_width 8: 7x7 -> 16 x 1 x 8, 14x14 -> 4 x 2 x 16 (87.5% real rows);
    min_width 1 finds exact covers where the sides allow: 14x14 -> 32 images x 2 x 2,
    28x28 -> 8 x 4 x 4, 7x7 at 64 pixels -> 64 x 1 x 1 (one pixel of 64 images).
    Flat plans (one row of dense pixels) take 1 x 1 x pixels."""
    if plan.n == 1 and plan.oh == 1:
        return 1, 1, pixels
    best = None
    for bw in BOX_WIDTHS:
        for bh in (1, 2, 4, 8, 16, 32):
            if bw < min_width or bw * bh > pixels or pixels % (bw * bh):
                continue
            nb = pixels // (bw * bh)
            if nb > 1 and nb >= 2 * plan.n:  # more images than the batch holds
                continue
            covered = cdiv(plan.n, nb) * nb * cdiv(plan.oh, bh) * bh * cdiv(plan.ow, bw) * bw
            key = (covered, -bw, nb)
            if best is None or key < best[0]:
                best = (key, (nb, bh, bw))
    return best[1]


def fitted_configs(plan, problem, out_cap: int) -> list:
    """FITTED's boxes for this plan's images (tile plans of 16-bit MMA data; boxes of
    several images only where every pixel is written, FILL = (1, 1))."""
    if problem is None or problem.dtype.itemsize != 2 or plan.c_out <= 16 or (plan.n == 1 and plan.oh == 1):
        return []
    out = []
    for pixels, bn, warps, stages in FITTED:
        nb, bh, bw = box_for(plan, pixels)
        if bn <= out_cap and (nb == 1 or plan.fill == (1, 1)):
            out.append(dict(_cfg(bh, bw, bn, 64, warps, stages), NB=nb))
    return out


def persistent_ok(plan, problem) -> bool:
    """Whether the persistent kernel is offered: one plan (not FILL: its tiles also write
    skipped pixels), 16-bit data with MMA math."""
    return (problem is not None and problem.dtype.itemsize == 2 and not strict_float32(problem)
            and plan.fill == (1, 1) and plan.out_offset == 0 and plan.c_out > 16)


def strict_float32(problem) -> bool:
    """Float32 data whose dot products run as FMAs (no tf32): its own config lists."""
    return problem is not None and problem.dtype.itemsize == 4 and input_precision(problem) == "ieee"


def candidates(plan, device, problem=None) -> list:
    """Launch configs to time, the conservative one first. A tuple of backward-data phase
    plans gets the per-phase configs (one launch per phase; the first is the reference)
    and, when ``problem`` is given and fused_phases_ok, the same boxes with FUSED (one
    launch for all phases). The interpreter takes the first: FUSED there, so CI runs it.
    On the GPU, 16-bit single plans also get PERSISTENT configs (conv_tma_persistent_kernel)
    after the others; tests force them under the interpreter."""
    if isinstance(plan, tuple):
        per_phase = candidates(plan[0], device, problem)
        if len(plan) > 1:  # one launch per phase: the persistent kernel is not offered
            per_phase = [c for c in per_phase if not c.get("PERSISTENT")]
        if problem is None or not fused_phases_ok(plan, problem):
            return per_phase
        extra = [c for c in PHASE_EXTRA if c["BLOCK_N"] <= max(64, triton.next_power_of_2(plan[0].c_out))]
        boxes = [c for c in per_phase if c.get("NB", 1) == 1] + (extra if device.type == "cuda" else [])
        # the fused grid gives every phase the largest phase's extent: drop boxes that
        # cover it with far more padding than the best box (16x16 on 7x7: 19% real)
        geo = geometry(problem)
        eh, ew = (cdiv(i, s) for i, s in zip(geo.inp[1:], geo.stride[1:]))
        real = [eh * ew / (cdiv(eh, c["BH"]) * c["BH"] * cdiv(ew, c["BW"]) * c["BW"]) for c in boxes]
        fused = [dict(c, FUSED=True) for c, r in zip(boxes, real) if r >= 0.8 * max(real)]
        return fused + per_phase if device.type != "cuda" else per_phase + fused
    flat = plan.n == 1 and plan.oh == 1
    if device.type != "cuda":
        return [dict(INTERPRETER_FLAT if flat else INTERPRETER_TILE)]
    if strict_float32(problem):
        base = FMA_FLAT if flat else FMA_TILE
    else:
        base = FLAT_CONFIGS if flat else TILE_CONFIGS
    out_cap = max(64, triton.next_power_of_2(plan.c_out))
    fits = [c for c in base if c["BLOCK_N"] <= out_cap]
    if plan.c_out <= 64:  # one column tile: taller row tiles instead of wider columns
        fits = [c for c in base if c["BLOCK_N"] == 64] + [c for c in fits if c["BLOCK_N"] != 64]
    if plan.c_out <= 16:  # e.g. backward data of a first layer (3 input channels)
        fits = [dict(c, BH=1, BW=c["BH"] * c["BW"]) if flat else c for c in NARROW_CONFIGS]
    elif not flat and plan.oh * plan.ow <= SMALL_OUTPUT and plan.n > 1 and plan.fill == (1, 1):
        fits = fits + [c for c in SMALL_CONFIGS if c["BLOCK_N"] <= out_cap]
    if strict_float32(problem):  # the narrow and small-image boxes too take the short K step
        fits = [dict(c, BK_CAP=min(c["BK_CAP"], 32)) for c in fits]
    elif fits and plan.c_out > 16:
        seen = [(c.get("NB", 1), c["BH"], c["BW"], c["BLOCK_N"], c["num_warps"], c["num_stages"]) for c in fits]
        fits = fits + [c for c in fitted_configs(plan, problem, out_cap)
                       if (c["NB"], c["BH"], c["BW"], c["BLOCK_N"], c["num_warps"], c["num_stages"]) not in seen]
    if fits and persistent_ok(plan, problem):
        extra = PERSISTENT_FLAT if flat else PERSISTENT_TILE
        if not flat and plan.oh * plan.ow <= SMALL_OUTPUT and plan.n > 1:
            extra = extra + PERSISTENT_SMALL
        # 64-column tiles only where the output has few channels (they re-read the input)
        fits = fits + [c for c in extra if c["BLOCK_N"] <= out_cap and (c["BLOCK_N"] > 64 or plan.c_out <= 128)]
    return fits or base[:1]


# Small images (e.g. 7x7, 14x14): an 8x8 box holds at most 64 pixels of one image, so
# these stack NB images per box (128 or 256 pixels per MMA step, half or a quarter of the
# loop iterations and barrier waits for the same work).
WGRAD_SMALL = [dict(BH=8, BW=8, NB=2, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
               dict(BH=8, BW=8, NB=2, BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=4),
               dict(BH=8, BW=8, NB=4, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)]
SMALL_IMAGE = 256  # pixels per image up to which WGRAD_SMALL is offered


def partials_outweigh_data(plan: Plan, cfg, sms: int, itemsize: int) -> bool:
    """Whether the float32 partials of a one-wave split (written, then read back by
    wgrad_finish) move more bytes than the kernel's operands dy and x: then half a wave
    of programs with fewer slices may win (small images, few taps, many channels)."""
    slices = slices_for(plan, dict(cfg, WAVES=1), sms, 64)
    partials = 2 * slices * plan.c_red * plan.c_out * plan.taps.taps * 4
    return partials > plan.n * plan.oh * plan.ow * (plan.c_red + plan.c_out) * itemsize


def wgrad_candidates(plan: Plan, device, itemsize=2) -> list:
    flat = plan.n == 1 and plan.oh == 1
    if device.type != "cuda":
        return [dict(BH=1 if flat else 2, BW=16 if flat else 8, BLOCK_M=16, BLOCK_N=16, num_warps=1,
                     num_stages=1)]
    base = WGRAD_FLAT if flat else WGRAD_TILE
    if not flat and plan.oh * plan.ow <= SMALL_IMAGE and plan.n > 1:
        base = base + WGRAD_SMALL
    fits = [c for c in base if c["BLOCK_M"] <= max(64, plan.c_red) and c["BLOCK_N"] <= max(64, plan.c_out)]
    # the pixel split aims at one or two waves of programs: fewer slices mean fewer partials
    # to write and sum, more mean a fuller GPU; which wins depends on the problem
    sms = sm_count(device)
    out = []
    for c in fits or base[:1]:
        seen = set()  # WAVES values that give the same slice count are one candidate
        for w in (2, 1, 0.5) if partials_outweigh_data(plan, c, sms, itemsize) else (2, 1):
            slices = slices_for(plan, dict(c, WAVES=w), sms, 64)
            if slices not in seen:
                seen.add(slices)
                out.append(dict(c, WAVES=w))
    return out


# -- launches ------------------------------------------------------------------------
class _Address:
    """A descriptor's base: what TensorDescriptor and the launcher read of a tensor (its
    address and dtype), without keeping the tensor's memory alive in the cache."""
    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr, dtype):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self):
        return self.ptr


_descriptors: dict = {}


def descriptor(t, shape, strides, block) -> TensorDescriptor:
    """A TMA descriptor of ``t`` viewed with ``shape``/``strides``, made once per address,
    view and box (a descriptor encodes only those, so a cached one stays valid for any
    tensor at the same address)."""
    return descriptor_of(t, (t.dtype, tuple(shape), tuple(strides), tuple(block)))


def descriptor_of(t, view) -> TensorDescriptor:
    """``descriptor`` with the view given as one hashable (dtype, shape, strides, block)."""
    if t.device.type != "cuda":  # the interpreter reads the tensor itself
        return TensorDescriptor(t, list(view[1]), list(view[2]), list(view[3]))
    key = (t.data_ptr(), view)
    d = _descriptors.get(key)
    if d is None:
        if len(_descriptors) > 4096:
            _descriptors.clear()
        d = _descriptors[key] = TensorDescriptor(_Address(t.data_ptr(), t.dtype), list(view[1]), list(view[2]),
                                                 list(view[3]))
    return d


_plans = IdentityMemo()


def _layout_key(*tensors):
    # (is_cuda, not device.type: a third of the key's host time, and a plan only
    # distinguishes the GPU from the interpreter)
    return tuple(None if t is None else (t.stride(), t.data_ptr() % 16 == 0, t.is_cuda) for t in tensors)


def forward_plan(problem, x, w, y, z=None):
    """plan_forward, computed once per problem and layout."""
    return _plans.get((problem,), ("fwd", _layout_key(x, w, y, z)), lambda: plan_forward(problem, x, w, y, z))


def backward_data_plan(problem, dy, w, dx):
    return _plans.get((problem,), ("bwd_data", _layout_key(dy, w, dx)), lambda: plan_backward_data(problem, dy, w, dx))


def backward_filter_plan(problem, x, dy, dw):
    return _plans.get((problem,), ("bwd_filter", _layout_key(x, dy, dw)),
                      lambda: plan_backward_filter(problem, x, dy, dw))


def plan_kind(plan) -> str:
    """'flat' (a plain GEMM over dense pixels) or 'tile' (spatial boxes); a tuple of
    backward-data phase plans is described by its first."""
    if isinstance(plan, tuple):
        return plan_kind(plan[0]) + (f"x{len(plan)}" if len(plan) > 1 else "")
    return "flat" if plan.n == 1 and plan.oh == 1 else "tile"


def _block_k(plan, cfg, itemsize):
    bk = block_k_for(plan.c_red, itemsize)
    return min(bk, cfg["BK_CAP"] if itemsize == 2 else cfg["BK_CAP"] // 2)


class _Recipe:
    """What a launch_conv call's plan, config and epilogue kind fix, built once: the two
    descriptor views, the grid, the constexprs, the plan's integer arguments. The recipe
    object is also the launch's static key (common.launch), so a repeated call hashes
    one object instead of the plan and its constexprs."""
    __slots__ = ("x_view", "w_view", "grid", "consts", "options", "middle")

    def __init__(self, plan, problem, inp, w, out, z, cfg, kmajor, act, has_bias, has_z, beta_zero):
        bk = _block_k(plan, cfg, inp.element_size())
        bh, bw, bn = cfg["BH"], cfg["BW"], cfg["BLOCK_N"]
        nb = cfg.get("NB", 1)
        self.x_view = (inp.dtype, tuple(plan.in_shape), tuple(plan.in_strides), (nb, bh, 1, bw, bk))
        ks, ts = _filter_view(w)
        r, s = w.shape[2], w.shape[3]
        self.w_view = (w.dtype, (w.shape[0], r * s, w.shape[1]), (ks, ts, 1), (bk, 1, bn) if kmajor else (bn, 1, bk))
        self.grid = (cdiv(plan.n, nb) * cdiv(plan.oh, bh) * cdiv(plan.ow, bw) * cdiv(plan.c_out, bn),)
        self.consts = dict(BH=bh, BW=bw, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, W_KMAJOR=kmajor,
                           PREC=input_precision(problem), ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z,
                           BETA_ZERO=beta_zero, INT64=needs_int64(out, z), FILL_SH=plan.fill[0], FILL_SW=plan.fill[1],
                           NB=nb)
        self.options = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        self.middle = (plan.n, plan.oh, plan.ow, plan.c_red, plan.c_out, *plan.taps.args, *plan.taps.filter_args,
                       *plan.fill_hw, plan.out_offset, *plan.out_strides, *plan.z_strides)


def store_view(plan: Plan, out, block):
    """The (dtype, shape, strides, box) TMA view through which the persistent kernel
    stores its tiles, or None (pointer stores): the output must be channels-last with
    16-byte aligned pixel strides, start at the plan's first pixel, and be dense (no FILL
    skipping). Tile plans: [N, OH, 1, OW, K]; flat plans: all pixels as [1, 1, 1, P, K]."""
    sn, sk, sh, sw = plan.out_strides
    item = out.element_size()
    if plan.fill != (1, 1) or plan.out_offset or sk != 1 or out.data_ptr() % 16:
        return None
    if plan.n == 1 and plan.oh == 1:
        shape, strides = _flat_view(plan.ow, sw, plan.c_out)
    else:
        shape, strides = (plan.n, plan.oh, 1, plan.ow, plan.c_out), (sn, sh, sh, sw, 1)
    if not _aligned(strides[:4], item):
        return None
    return (out.dtype, shape, strides, tuple(block))


class _PersistentRecipe(_Recipe):
    """conv_tma_persistent_kernel's launch: _Recipe's views and arguments (no FILL), a
    grid of PERSISTENT programs per SM (at most one per tile), and the output's TMA view
    when the epilogue reads neither y nor z (beta = 0, no residual)."""
    __slots__ = ("y_view",)

    def __init__(self, plan, problem, inp, w, out, z, cfg, kmajor, act, has_bias, has_z, beta_zero):
        super().__init__(plan, problem, inp, w, out, z, cfg, kmajor, act, has_bias, has_z, beta_zero)
        assert plan.fill == (1, 1), "FILL plans (strided 1x1 backward data) take conv_tma_kernel"
        split = cfg.get("EPI_SPLIT", 1)
        box = (cfg.get("NB", 1), cfg["BH"], 1, cfg["BW"], cfg["BLOCK_N"] // split)
        self.y_view = store_view(plan, out, box) if beta_zero and not has_z else None
        programs = min(self.grid[0], sm_count(out.device) * cfg["PERSISTENT"])
        self.grid = (programs,)
        del self.consts["FILL_SH"], self.consts["FILL_SW"]
        self.consts.update(NUM_PROGRAMS=programs, TMA_STORE=self.y_view is not None, EPI_SPLIT=split)
        self.middle = (plan.n, plan.oh, plan.ow, plan.c_red, plan.c_out, *plan.taps.args, *plan.taps.filter_args,
                       plan.out_offset, *plan.out_strides, *plan.z_strides)


_recipes = IdentityMemo()


def launch_conv(plan, problem, inp, w, out, alpha, beta, cfg, kmajor=False, spec=None):
    """out = epilogue(conv(inp, w)) through conv_tma_kernel (or, with cfg["PERSISTENT"],
    conv_tma_persistent_kernel): forward, or (kmajor) backward data, whose plan may be a
    tuple of phase plans: one launch each, or with cfg["FUSED"] one
    conv_tma_phases_kernel launch for all of them."""
    if isinstance(plan, tuple):
        if cfg.get("FUSED") and spec is None and fused_phases_ok(plan, problem):
            _launch_phases(plan, problem, inp, w, out, alpha, beta, cfg)
            return
        for p in plan:
            launch_conv(p, problem, inp, w, out, alpha, beta, cfg, kmajor=kmajor, spec=spec)
        return
    bias, bias_stride, z, _, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, out, 2)
    beta_zero = beta == 0
    # everything the recipe fixes is keyed: the operands' dtypes, the epilogue's kind and
    # the bias stride (an integer argument Triton specializes on)
    extra = (kmajor, act, has_bias, has_z, beta_zero, bias_stride, inp.dtype, w.dtype, out.dtype, bias.dtype,
             z.dtype)
    if cfg.get("PERSISTENT"):
        extra += (out.data_ptr() % 16 == 0,)  # the TMA store needs an aligned output
        recipe = _recipes.get((plan, cfg, problem), extra, lambda: _PersistentRecipe(
            plan, problem, inp, w, out, z if has_z else None, cfg, kmajor, act, has_bias, has_z, beta_zero))
        x_desc = descriptor_of(inp, recipe.x_view)
        y_desc = x_desc if recipe.y_view is None else descriptor_of(out, recipe.y_view)  # unused without TMA_STORE
        args = (out, bias, z, x_desc, descriptor_of(w, recipe.w_view), y_desc, *recipe.middle, bias_stride,
                float(alpha), float(beta), alpha2, coef, swish_beta)
        launch(conv_tma_persistent_kernel, recipe.grid, args, recipe.consts, recipe.options, (recipe, 3))
        return
    recipe = _recipes.get((plan, cfg, problem), extra, lambda: _Recipe(
        plan, problem, inp, w, out, z if has_z else None, cfg, kmajor, act, has_bias, has_z, beta_zero))
    args = (out, bias, z, descriptor_of(inp, recipe.x_view), descriptor_of(w, recipe.w_view), *recipe.middle,
            bias_stride, float(alpha), float(beta), alpha2, coef, swish_beta)
    launch(conv_tma_kernel, recipe.grid, args, recipe.consts, recipe.options, (recipe, 3))


def fused_phases_ok(plan, problem) -> bool:
    """A tuple of backward-data phase plans that conv_tma_phases_kernel can run in one
    launch: more than one phase, at most 16 (the phase order is 4 bits per phase)."""
    if not isinstance(plan, tuple) or len(plan) < 2 or any(p.fill != (1, 1) for p in plan):
        return False
    sh, sw = geometry(problem).stride[1:]
    return sh * sw <= 16


def phase_order(problem) -> int:
    """dx's phases (a * SW + b) sorted by their tap counts, most first, packed 4 bits each:
    the heaviest tiles start first and the light ones fill the tail of the last wave."""
    geo = geometry(problem)
    sh, sw = geo.stride[1:]
    taps = {a * sw + b: backward_data_taps(geo, False, (a, b)).taps for a in range(sh) for b in range(sw)}
    order = sorted(taps, key=lambda q: (-taps[q], q))
    return sum(q << (4 * i) for i, q in enumerate(order))


class _PhaseRecipe:
    """conv_tma_phases_kernel's fixed launch parts for one (plans, config, problem)."""
    __slots__ = ("x_view", "w_view", "grid", "consts", "options", "middle")

    def __init__(self, plan, problem, inp, w, out, cfg, beta_zero):
        geo = geometry(problem)
        first = plan[0]
        bk = _block_k(first, cfg, inp.element_size())
        bh, bw, bn = cfg["BH"], cfg["BW"], cfg["BLOCK_N"]
        self.x_view = (inp.dtype, tuple(first.in_shape), tuple(first.in_strides), (1, bh, 1, bw, bk))
        ks, ts = _filter_view(w)
        r, s = w.shape[2], w.shape[3]
        self.w_view = (w.dtype, (w.shape[0], r * s, w.shape[1]), (ks, ts, 1), (bk, 1, bn))
        (h, wd), (sh, sw) = geo.inp[1:], geo.stride[1:]
        (ph, pw), (dh, dw) = geo.pad[1:], geo.dil[1:]
        steps = (sh // math.gcd(sh, dh), sw // math.gcd(sw, dw))
        n, oh, ow, k = first.in_shape[0], first.in_shape[1], first.in_shape[3], first.c_red
        tiles = n * cdiv(cdiv(h, sh), bh) * cdiv(cdiv(wd, sw), bw) * cdiv(first.c_out, bn)
        self.grid = (sh * sw * tiles,)
        self.consts = dict(BH=bh, BW=bw, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, PREC=input_precision(problem),
                           BETA_ZERO=beta_zero, INT64=needs_int64(out), FLIP=problem.mode == 0)
        self.options = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        xs = strides5(out, 2)
        self.middle = (n, oh, ow, k, first.c_out, h, wd, sh, sw, phase_order(problem), r, s, ph, pw, dh, dw,
                       *steps, -(steps[0] * dh) // sh, -(steps[1] * dw) // sw, xs[0], xs[1], xs[3], xs[4])


def _launch_phases(plan, problem, inp, w, out, alpha, beta, cfg):
    """All phases of a strided backward data in one conv_tma_phases_kernel launch."""
    beta_zero = beta == 0
    extra = ("phases", beta_zero, inp.dtype, w.dtype, out.dtype)
    recipe = _recipes.get((plan, cfg, problem), extra, lambda: _PhaseRecipe(
        plan, problem, inp, w, out, cfg, beta_zero))
    args = (out, descriptor_of(inp, recipe.x_view), descriptor_of(w, recipe.w_view), *recipe.middle,
            float(alpha), float(beta))
    launch(conv_tma_phases_kernel, recipe.grid, args, recipe.consts, recipe.options, (recipe, 1))


def pixel_tiles(plan: Plan, cfg) -> int:
    """The wgrad reduction's pixel tiles: boxes of NB images x BH x BW pixels."""
    return cdiv(plan.n, cfg.get("NB", 1)) * cdiv(plan.oh, cfg["BH"]) * cdiv(plan.ow, cfg["BW"])


def slices_for(plan: Plan, cfg, sms: int, cap: int) -> int:
    tiles = cdiv(plan.c_red, cfg["BLOCK_M"]) * cdiv(plan.c_out, cfg["BLOCK_N"]) * plan.taps.taps
    pixel_tiles_ = pixel_tiles(plan, cfg)
    want = cdiv(math.ceil(cfg.get("WAVES", 2) * sms), tiles)
    return max(1, min(want, cap, max(1, pixel_tiles_ // 4)))


def launch_wgrad_partials(plan: Plan, problem, x, dy, part, cfg, slices, dw=None, alpha=1.0, beta=0.0) -> int:
    """Fill part[:slices] with wgrad_tma_kernel's partial sums; returns the slice count
    actually used (the caller's wgrad_finish sums them into dw). Given ``dw``, a split
    into one slice writes dw = alpha * sum + beta * dw directly and returns 0 (no finish)."""
    bh, bw, bm, bn, nb = cfg["BH"], cfg["BW"], cfg["BLOCK_M"], cfg["BLOCK_N"], cfg.get("NB", 1)
    x_desc = descriptor(x, plan.in_shape, plan.in_strides, (nb, bh, 1, bw, bn))
    ds = plan.out_strides
    dy_desc = descriptor(dy, (plan.n, plan.oh, 1, plan.ow, plan.c_red), (ds[0], ds[1], ds[1], ds[2], 1),
                         (nb, bh, 1, bw, bm))
    tiles = pixel_tiles(plan, cfg)
    per = cdiv(tiles, slices)
    slices = cdiv(tiles, per)
    grid = (cdiv(plan.c_red, bm) * cdiv(plan.c_out, bn), plan.taps.taps, slices)
    direct = dw is not None and slices == 1
    consts = dict(BH=bh, BW=bw, BLOCK_M=bm, BLOCK_N=bn, PREC=input_precision(problem), NB=nb, DIRECT=direct,
                  FLIP=problem.mode == 0, BETA_ZERO=beta == 0)
    options = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if direct:
        ws = strides5(dw, 2)
        blend = (ws[0], ws[1], ws[3], ws[4], dw.shape[2], dw.shape[3], dw.shape[1])
    else:
        dw, blend = part, (0, 0, 0, 0, 1, 1, plan.c_out)
    args = (part, dw, dy_desc, x_desc, plan.n, plan.oh, plan.ow, plan.c_red, plan.c_out, *plan.taps.args, per,
            *blend, float(alpha), float(beta))
    static = ((plan, slices, tuple(consts.items()), tuple(options.items()), x.dtype, dy.dtype, dw.dtype, blend), 2)
    launch(wgrad_tma_kernel, grid, args, consts, options, static)
    return 0 if direct else slices
