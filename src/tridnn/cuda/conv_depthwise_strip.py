"""Depthwise 3x3 forward (stride 1 or 2): row walkers that keep DRAM busy with L2
prefetches and spend fewer instructions per output element.

Why (sm_90 SASS of the older walkers, session 7): they are bound both by memory-level
parallelism and by instruction issue. A thread holds the nine float32 weights of its
channels and three rolling accumulators, so 2-5 programs of 128 threads fit an SM, each
with one or two 16-byte loads of new data per thread outstanding: 5-12 KB of x in
flight per SM where DRAM latency needs ~30-40 KB. And the loop costs 28-38 instructions
per output element (dw3_rows_kernel; 43 for the TMA walker at 4 elements a thread)
against 9 FMAs: at two instructions a cycle per SM that alone caps them at 1.4-2.3 TB/s.

What:
- ``dw3_strip_kernel``: the same walk (a program owns image n, a strip of BH output rows,
  BW output columns and BC channels; input rows arrive in order, each loaded once as
  three column-shifted [BW, BC] tiles whose overlap hits L1; float32 rolling
  accumulators; the finished row goes through the fused epilogue ``store_tile``), plus a
  ``prefetch.global.L2`` of the input row L2_AHEAD steps ahead: one instruction per
  64-byte chunk of the tile's row, no register, no scoreboard, so L2_AHEAD rows of every
  program are in flight and the register loads (REG_AHEAD rows ahead) hit L2. Stride 2
  walks the output rows: row o takes input rows 2o - PH (carried from the previous step
  as its product with filter row 0), 2o - PH + 1 and 2o - PH + 2.
- ``dw3_pairs_kernel`` (stride 1): the tile's rows are pairs of output columns, which take
  four input columns instead of six (two loads and two conversions per output and input
  row instead of three), optionally with a one-instruction bfloat16 unpack (CVT_ASM);
  alpha is folded into the weights. 19 instructions per output element at 8 per thread.

Both are offered to conv_direct's DIRECT tuner after the existing candidates (KIND
"strip"); the tuner times them and checks each against its first candidate. Under the
interpreter the prefetch is an ordinary load of the same (always valid) addresses and
the unpack is ``.to(float32)``: the interpreter has no inline PTX.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import cdiv, launch, next_pow2, wide
from .conv_direct import _row3, _taps3
from .epilogue import launch_args, store_tile
from .geometry import geometry, needs_int64, strides5


# -- kernel ------------------------------------------------------------------------
@triton.jit
def _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM: tl.constexpr):
    """Prefetch input row j of the tile (chunk offsets pf_off where pf_on != 0) into L2; a
    row outside the image is clamped to the nearest one (a harmless extra prefetch). Lanes
    off issue nothing: pointing them all at one valid line made that L2 line a hot spot
    (the 7 x 7 and 14 x 14 layers ran at 0.3-1 TB/s)."""
    ptr = x_ptr + tl.minimum(tl.maximum(j, 0), IH - 1) * xs_h + pf_off
    if PF_ASM:
        tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
                                  "=r,l,r", [ptr, pf_on], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.load(ptr, mask=pf_on != 0)  # the interpreter: the same addresses, loaded (so they must be valid)


@triton.jit
def _fma3(acc, x0, x1, x2, w0, w1, w2):
    return acc + x0 * w0 + x1 * w1 + x2 * w2


@triton.jit
def _filter_scaled(w_ptr, w_col, mask_k, ws_h, ws_w, alpha, FLIP: tl.constexpr):
    """The nine weights (row-major, float32 [1, BC] each) times alpha: alpha scales the
    weights once, so the epilogue's per-element multiply (by a constant 1.0) folds away."""
    w00, w01, w02 = _taps3(w_ptr, w_col, mask_k, 0, ws_h, ws_w, FLIP)
    w10, w11, w12 = _taps3(w_ptr, w_col, mask_k, 1, ws_h, ws_w, FLIP)
    w20, w21, w22 = _taps3(w_ptr, w_col, mask_k, 2, ws_h, ws_w, FLIP)
    return (w00 * alpha, w01 * alpha, w02 * alpha, w10 * alpha, w11 * alpha, w12 * alpha,
            w20 * alpha, w21 * alpha, w22 * alpha)


@triton.jit(do_not_specialize=['IH', 'IW', 'OH', 'OW', 'PH', 'PW', 'n_rows', 'n_cols'])
def dw3_strip_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr, z_ptr,
        # sizes: output channels, output channels per input channel, input / output H x W,
        # padding, row strips and column blocks per image
        K, Kg, IH, IW, OH, OW, PH, PW, n_rows, n_cols,
        # element strides (n, c, h, w) of x, (k, h, w) of w, (n, k, h, w) of y and z
        xs_n, xs_c, xs_h, xs_w,
        ws_k, ws_h, ws_w,
        ys_n, ys_k, ys_h, ys_w,
        zs_n, zs_k, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        # tile, stride, rows ahead (registers, L2), the prefetch's chunk grid
        BH: tl.constexpr, BW: tl.constexpr, BC: tl.constexpr, STRIDE: tl.constexpr,
        REG_AHEAD: tl.constexpr, L2_AHEAD: tl.constexpr, PF_ASM: tl.constexpr,
        PF_N: tl.constexpr, PF_SPAN: tl.constexpr, PF_CH: tl.constexpr, PF_E: tl.constexpr,
        FLIP: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr,
        BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    """y[n, k, o, q] = sum_{a,b} x[n, k // Kg, S o - PH + a, S q - PW + b] w[k, a, b]."""
    # -- map the program to (image, row strip, column block) and a channel block
    n, row_blk, col_blk = _tile_of(tl.program_id(0), n_rows, n_cols, INT64)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    k0 = tl.program_id(1) * BC
    offs_k = k0 + tl.arange(0, BC)
    mask_k = offs_k < K
    ow = col_blk * BW + tl.arange(0, BW)
    mask_w = ow < OW
    oh0 = row_blk * BH
    oh_end = tl.minimum(oh0 + BH, OH)

    # -- pointers: the three column shifts of an input row, the channels, the weights
    iw = ow * STRIDE - PW
    ok0 = mask_w & (iw >= 0) & (iw < IW)
    ok1 = mask_w & (iw >= -1) & (iw + 1 < IW)
    ok2 = mask_w & (iw >= -2) & (iw + 2 < IW)
    col0 = iw * xs_w
    col1 = col0 + xs_w
    col2 = col1 + xs_w
    chan = (offs_k // Kg) * xs_c
    x_img = n * xs_n
    w_col = offs_k * ws_k
    w00, w01, w02, w10, w11, w12, w20, w21, w22 = _filter_scaled(w_ptr, w_col, mask_k, ws_h, ws_w, alpha, FLIP)
    y_cols = ow * ys_w
    z_cols = ow * zs_w

    # -- the L2 prefetch's chunks: PF_SPAN input columns x PF_CH chunk starts of PF_E
    # channels (the last one at the block's last channel, so a block that straddles a
    # line is covered), flattened over PF_N >= PF_SPAN * PF_CH lanes
    pf = tl.arange(0, PF_N)
    pf_col = pf // PF_CH
    ci0 = k0 // Kg
    n_ci = (tl.minimum(k0 + BC, K) - 1) // Kg - ci0 + 1
    pf_ci = ci0 + tl.minimum((pf % PF_CH) * PF_E, n_ci - 1)
    pf_iw = col_blk * BW * STRIDE - PW + pf_col
    pf_ok = (pf < PF_SPAN * PF_CH) & (pf_iw >= 0) & (pf_iw < IW)
    pf_off = tl.where(pf_ok, x_img + pf_iw * xs_w + pf_ci * xs_c, 0)
    pf_on = pf_ok.to(tl.int32)

    if STRIDE == 1:
        # input row i is filter row 2 of output row i + PH - 2 (finished with it), row 1
        # of i + PH - 1 and row 0 of i + PH (started with it)
        i_first = oh0 - PH
        i_end = oh_end - PH + 2
        if L2_AHEAD > 0:
            for j in range(i_first, tl.minimum(i_first + L2_AHEAD, i_end)):
                _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM)
        if REG_AHEAD:
            a0, a1, a2 = _row3(x_ptr, x_img + i_first * xs_h, (i_first >= 0) & (i_first < IH), col0, col1,
                               col2, ok0, ok1, ok2, chan, mask_k)
        acc_done = tl.zeros((BW, BC), dtype=tl.float32)
        acc_mid = tl.zeros((BW, BC), dtype=tl.float32)
        for i in range(i_first, i_end):
            if L2_AHEAD > 0:
                j = i + L2_AHEAD
                _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM)
            if REG_AHEAD:
                x0, x1, x2 = a0, a1, a2
                j = i + 1
                a0, a1, a2 = _row3(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH) & (j < i_end), col0, col1, col2,
                                   ok0, ok1, ok2, chan, mask_k)
            else:
                x0, x1, x2 = _row3(x_ptr, x_img + i * xs_h, (i >= 0) & (i < IH), col0, col1, col2, ok0, ok1,
                                   ok2, chan, mask_k)
            x0 = x0.to(tl.float32)
            x1 = x1.to(tl.float32)
            x2 = x2.to(tl.float32)
            acc_done = _fma3(acc_done, x0, x1, x2, w20, w21, w22)
            acc_mid = _fma3(acc_mid, x0, x1, x2, w10, w11, w12)
            acc_new = x0 * w00 + x1 * w01 + x2 * w02
            o = i + PH - 2
            if o >= oh0:
                store_tile(acc_done, n * ys_n + o * ys_h + y_cols, n * zs_n + o * zs_h + z_cols, offs_k, mask_w,
                           mask_k, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride, 1.0, beta, alpha2, coef,
                           swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
            acc_done = acc_mid
            acc_mid = acc_new
    else:
        # output row o takes input rows 2o - PH (carried: its product with filter row 0),
        # 2o - PH + 1 and 2o - PH + 2 (filter rows 1 and 2; the latter is carried on)
        r_first = 2 * oh0 - PH
        r_end = 2 * oh_end - PH + 1  # one past the last input row the strip reads
        if L2_AHEAD > 0:
            for j in range(r_first, tl.minimum(r_first + 2 * L2_AHEAD + 1, r_end)):
                _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM)
        x0, x1, x2 = _row3(x_ptr, x_img + r_first * xs_h, (r_first >= 0) & (r_first < IH), col0, col1, col2,
                           ok0, ok1, ok2, chan, mask_k)
        carry = x0.to(tl.float32) * w00 + x1.to(tl.float32) * w01 + x2.to(tl.float32) * w02
        if REG_AHEAD:
            j = r_first + 1
            a0, a1, a2 = _row3(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH), col0, col1, col2, ok0, ok1, ok2,
                               chan, mask_k)
            j = r_first + 2
            b0, b1, b2 = _row3(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH), col0, col1, col2, ok0, ok1, ok2,
                               chan, mask_k)
        for o in range(oh0, oh_end):
            r1 = 2 * o - PH + 1
            r2 = r1 + 1
            if L2_AHEAD > 0:
                j = r2 + 2 * L2_AHEAD - 1
                _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM)
                _pf_row(x_ptr, j + 1, IH, xs_h, pf_off, pf_on, PF_ASM)
            if REG_AHEAD:
                x0, x1, x2 = a0, a1, a2
                u0, u1, u2 = b0, b1, b2
                j = r2 + 1
                ok_next = o + 1 < oh_end
                a0, a1, a2 = _row3(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH) & ok_next, col0, col1, col2,
                                   ok0, ok1, ok2, chan, mask_k)
                b0, b1, b2 = _row3(x_ptr, x_img + (j + 1) * xs_h, (j + 1 >= 0) & (j + 1 < IH) & ok_next, col0,
                                   col1, col2, ok0, ok1, ok2, chan, mask_k)
            else:
                x0, x1, x2 = _row3(x_ptr, x_img + r1 * xs_h, (r1 >= 0) & (r1 < IH), col0, col1, col2, ok0, ok1,
                                   ok2, chan, mask_k)
                u0, u1, u2 = _row3(x_ptr, x_img + r2 * xs_h, (r2 >= 0) & (r2 < IH), col0, col1, col2, ok0, ok1,
                                   ok2, chan, mask_k)
            acc = _fma3(carry, x0.to(tl.float32), x1.to(tl.float32), x2.to(tl.float32), w10, w11, w12)
            u0 = u0.to(tl.float32)
            u1 = u1.to(tl.float32)
            u2 = u2.to(tl.float32)
            acc = _fma3(acc, u0, u1, u2, w20, w21, w22)
            carry = u0 * w00 + u1 * w01 + u2 * w02
            store_tile(acc, n * ys_n + o * ys_h + y_cols, n * zs_n + o * zs_h + z_cols, offs_k, mask_w,
                       mask_k, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride, 1.0, beta, alpha2, coef,
                       swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


@triton.jit
def _f32(x, CVT_ASM: tl.constexpr):
    """x as float32; CVT_ASM (bfloat16 on the GPU): one shl / and per element instead of
    Triton's prmt + shift for every odd element."""
    if CVT_ASM:
        return tl.inline_asm_elementwise("{ shl.b32 $0, $2, 16; and.b32 $1, $2, 0xffff0000; }", "=r,=r,r", [x],
                                         dtype=tl.float32, is_pure=True, pack=2)
    else:
        return x.to(tl.float32)


@triton.jit
def _pair_row(x_ptr, row, row_ok, cl, ce, co, cr, ml, me, mo, mr):
    """One input row at the four columns of a pair of outputs (left, even, odd, right)."""
    base = x_ptr + row
    xl = tl.load(base + cl, mask=ml & row_ok, other=0.0)
    xe = tl.load(base + ce, mask=me & row_ok, other=0.0)
    xo = tl.load(base + co, mask=mo & row_ok, other=0.0)
    xr = tl.load(base + cr, mask=mr & row_ok, other=0.0)
    return xl, xe, xo, xr


@triton.jit
def _tile_of(sp, n_rows, n_cols, INT64: tl.constexpr):
    """(image, row strip, column block) of a flat spatial tile index (column block fastest)."""
    col_blk = sp % n_cols
    t = sp // n_cols
    row_blk = t % n_rows
    n = t // n_rows
    if INT64:
        n = n.to(tl.int64)
    return n, row_blk, col_blk


@triton.jit
def _pf_offsets(x_img, iw0, k0, K, Kg, IW, xs_w, xs_c, BC: tl.constexpr, PF_N: tl.constexpr, PF_SPAN: tl.constexpr,
                PF_CH: tl.constexpr, PF_E: tl.constexpr):
    """The L2 prefetch's chunk offsets for a tile: PF_SPAN input columns from iw0 x PF_CH
    chunk starts of PF_E channels (the last one at the block's last channel, so a block
    that straddles a line is covered), flattened over PF_N lanes; and which lanes are on
    (int32)."""
    pf = tl.arange(0, PF_N)
    pf_col = pf // PF_CH
    ci0 = k0 // Kg
    n_ci = (tl.minimum(k0 + BC, K) - 1) // Kg - ci0 + 1
    pf_ci = ci0 + tl.minimum((pf % PF_CH) * PF_E, n_ci - 1)
    pf_iw = iw0 + pf_col
    pf_ok = (pf < PF_SPAN * PF_CH) & (pf_iw >= 0) & (pf_iw < IW)
    return tl.where(pf_ok, x_img + pf_iw * xs_w + pf_ci * xs_c, 0), pf_ok.to(tl.int32)


@triton.jit(do_not_specialize=['N', 'IH', 'IW', 'OH', 'OW', 'PH', 'PW', 'n_rows', 'n_cols'])
def dw3_pairs_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr, z_ptr,
        # sizes (images, then as dw3_strip_kernel's) and strides
        N, K, Kg, IH, IW, OH, OW, PH, PW, n_rows, n_cols,
        xs_n, xs_c, xs_h, xs_w,
        ws_k, ws_h, ws_w,
        ys_n, ys_k, ys_h, ys_w,
        zs_n, zs_k, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        BH: tl.constexpr, BW: tl.constexpr, BC: tl.constexpr, PERSIST: tl.constexpr,
        REG_AHEAD: tl.constexpr, L2_AHEAD: tl.constexpr, PF_ASM: tl.constexpr, CVT_ASM: tl.constexpr,
        PF_N: tl.constexpr, PF_SPAN: tl.constexpr, PF_CH: tl.constexpr, PF_E: tl.constexpr,
        FLIP: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr,
        BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    """Stride 1 with the tile's rows being pairs of output columns (2g, 2g + 1): a pair
    takes four input columns (left, even, odd, right) instead of six, so per output
    element two loads and two conversions per input row, not three (the SASS count:
    the conversions and address math, not the 9 FMAs, are most of the instructions).
    BW output columns = BW / 2 pairs.

    A program walks spatial tiles of one channel block: one tile when the grid has a
    program per tile (the channel block varies slowest, as in a 2-D grid); PERSIST (a
    grid of a few programs per SM, a multiple of the channel blocks) keeps the block's
    weights in registers over its tiles (72 scattered 2-byte loads a thread per program
    otherwise) and prefetches the next tile's first rows during the current tile's last
    L2_AHEAD rows, so a new tile does not start with a DRAM round trip."""
    BWH: tl.constexpr = BW // 2
    n_sp = N * n_rows * n_cols
    pid = tl.program_id(0)
    if PERSIST:
        n_kb = tl.cdiv(K, BC)
        kb = pid % n_kb
        sp_first = pid // n_kb
        sp_step = tl.num_programs(0) // n_kb
    else:
        kb = pid // n_sp
        sp_first = pid % n_sp
        sp_step = n_sp
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    # -- the channel block and its weights
    k0 = kb * BC
    offs_k = k0 + tl.arange(0, BC)
    mask_k = offs_k < K
    chan = (offs_k // Kg) * xs_c
    mk = mask_k[None, :]
    w_col = offs_k * ws_k
    w00, w01, w02, w10, w11, w12, w20, w21, w22 = _filter_scaled(w_ptr, w_col, mask_k, ws_h, ws_w, alpha, FLIP)
    for sp in range(sp_first, n_sp, sp_step):
        # -- map the tile to (image, row strip, column block)
        n, row_blk, col_blk = _tile_of(sp, n_rows, n_cols, INT64)
        q0 = col_blk * BW + 2 * tl.arange(0, BWH)   # even output column of each pair
        mask_e = q0 < OW
        mask_o = q0 + 1 < OW
        oh0 = row_blk * BH
        oh_end = tl.minimum(oh0 + BH, OH)

        # -- pointers: the four input columns of each pair
        il = q0 - PW
        cl = (il * xs_w)[:, None] + chan[None, :]
        ce = cl + xs_w
        co = ce + xs_w
        cr = co + xs_w
        ml = (mask_e & (il >= 0) & (il < IW))[:, None] & mk
        me = (mask_e & (il + 1 >= 0) & (il + 1 < IW))[:, None] & mk
        mo = ((mask_e & (il + 2 >= 0) & (il + 2 < IW)))[:, None] & mk
        mr = (mask_o & (il + 3 >= 0) & (il + 3 < IW))[:, None] & mk
        x_img = n * xs_n
        y_e = q0 * ys_w
        z_e = q0 * zs_w

        # -- the L2 prefetch: this tile's rows; (PERSIST) the next tile's first rows
        i_first = oh0 - PH
        i_end = oh_end - PH + 2
        pf_off, pf_on = _pf_offsets(x_img, col_blk * BW - PW, k0, K, Kg, IW, xs_w, xs_c, BC, PF_N, PF_SPAN, PF_CH,
                                    PF_E)
        if PERSIST:
            n2, row_blk2, col_blk2 = _tile_of(tl.minimum(sp + sp_step, n_sp - 1), n_rows, n_cols, INT64)
            pf_next, on_next = _pf_offsets(n2 * xs_n, col_blk2 * BW - PW, k0, K, Kg, IW, xs_w, xs_c, BC, PF_N,
                                           PF_SPAN, PF_CH, PF_E)
            i_next = row_blk2 * BH - PH - i_end   # row j >= i_end of this walk is row j + i_next of the next
        if L2_AHEAD > 0:
            if sp == sp_first:  # a later tile's were prefetched by the one before it
                for j in range(i_first, tl.minimum(i_first + L2_AHEAD, i_end)):
                    _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM)
        # REG_AHEAD rows (0-2) loaded before the multiply-adds of the row before them
        if REG_AHEAD >= 1:
            al, ae, ao, ar = _pair_row(x_ptr, x_img + i_first * xs_h, (i_first >= 0) & (i_first < IH), cl, ce, co,
                                       cr, ml, me, mo, mr)
        if REG_AHEAD >= 2:
            j = i_first + 1
            bl, be, bo, br = _pair_row(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH) & (j < i_end), cl, ce, co, cr,
                                       ml, me, mo, mr)

        # -- walk the input rows (as dw3_strip_kernel, stride 1), two accumulators per stage
        done_e = tl.zeros((BWH, BC), dtype=tl.float32)
        done_o = tl.zeros((BWH, BC), dtype=tl.float32)
        mid_e = tl.zeros((BWH, BC), dtype=tl.float32)
        mid_o = tl.zeros((BWH, BC), dtype=tl.float32)
        for i in range(i_first, i_end):
            if L2_AHEAD > 0:
                j = i + L2_AHEAD
                if PERSIST:
                    if j < i_end:
                        _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM)
                    else:
                        _pf_row(x_ptr, j + i_next, IH, xs_h, pf_next, on_next, PF_ASM)
                else:
                    _pf_row(x_ptr, j, IH, xs_h, pf_off, pf_on, PF_ASM)
            if REG_AHEAD == 1:
                xl, xe, xo, xr = al, ae, ao, ar
                j = i + 1
                al, ae, ao, ar = _pair_row(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH) & (j < i_end), cl, ce, co,
                                           cr, ml, me, mo, mr)
            elif REG_AHEAD == 2:
                xl, xe, xo, xr = al, ae, ao, ar
                al, ae, ao, ar = bl, be, bo, br
                j = i + 2
                bl, be, bo, br = _pair_row(x_ptr, x_img + j * xs_h, (j >= 0) & (j < IH) & (j < i_end), cl, ce, co,
                                           cr, ml, me, mo, mr)
            else:
                xl, xe, xo, xr = _pair_row(x_ptr, x_img + i * xs_h, (i >= 0) & (i < IH), cl, ce, co, cr, ml, me, mo,
                                           mr)
            xl = _f32(xl, CVT_ASM)
            xe = _f32(xe, CVT_ASM)
            xo = _f32(xo, CVT_ASM)
            xr = _f32(xr, CVT_ASM)
            done_e = _fma3(done_e, xl, xe, xo, w20, w21, w22)
            done_o = _fma3(done_o, xe, xo, xr, w20, w21, w22)
            mid_e = _fma3(mid_e, xl, xe, xo, w10, w11, w12)
            mid_o = _fma3(mid_o, xe, xo, xr, w10, w11, w12)
            new_e = xl * w00 + xe * w01 + xo * w02
            new_o = xe * w00 + xo * w01 + xr * w02
            o = i + PH - 2
            if o >= oh0:
                ry = n * ys_n + o * ys_h
                rz = n * zs_n + o * zs_h
                store_tile(done_e, ry + y_e, rz + z_e, offs_k, mask_e, mask_k, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
                           bias_stride, 1.0, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
                store_tile(done_o, ry + y_e + ys_w, rz + z_e + zs_w, offs_k, mask_o, mask_k, y_ptr, ys_k, z_ptr,
                           zs_k, bias_ptr, bias_stride, 1.0, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z,
                           BETA_ZERO)
            done_e = mid_e
            done_o = mid_o
            mid_e = new_e
            mid_o = new_o


# -- host side -----------------------------------------------------------------------
def applies(problem) -> bool:
    """2-D (or 1-row) depthwise 3x3 (any multiplier), stride 1 or 2 in both axes, no dilation."""
    geo = geometry(problem)
    return (geo.cg == 1 and geo.ker == (1, 3, 3) and geo.stride[1:] in ((1, 1), (2, 2)) and geo.dil == (1, 1, 1)
            and geo.inp[0] == 1 and geo.out[0] == 1)


def configs(device, k, stride=1):
    """(BH, BW, BC, warps, REG_AHEAD, L2_AHEAD) candidates (KIND "strip"), offered after the
    existing ones. 8 elements per thread (16-byte bf16 vectors) at BW x BC = 1024 on 4
    warps, 4 elements (8-byte vectors, half the weight registers) at 512; L2_AHEAD rows
    of prefetch (steps of two rows at stride 2)."""
    if device.type != "cuda":
        cpu = [dict(BH=4, BW=4, BC=4, num_warps=1, REG_AHEAD=1, L2_AHEAD=2)]
        return cpu + ([dict(cpu[0], PAIRS=True, CVT=1), dict(cpu[0], PAIRS=True, CVT=1, PERSIST=3)]
                      if stride == 1 else [])
    if stride == 1:
        table = ((16, 16, 64, 4, 1, 4), (16, 32, 32, 4, 1, 4))
        # dw3_pairs_kernel (PAIRS): BW / 2 pairs x BC; CVT: the one-instruction bf16 unpack.
        # Pair-elements per thread 8 (16-byte vectors, 224-236 registers: 2 programs of 4
        # warps or 4 of 2 per SM) or 4 (8 bytes, ~128: 4 of 4); BW 16 fits W = 112 and
        # 14, 8 fits 7, BC 16 fits C = 144; BH 4-28 (short strips: enough programs for
        # the 14 x 14 and 7 x 7 layers); REG_AHEAD 2 and no CVT as hedges
        pairs = ((16, 32, 64, 4, 1, 4, 1), (16, 32, 64, 4, 1, 4, 0), (16, 16, 64, 4, 2, 4, 1),
                 (16, 16, 64, 2, 1, 4, 1), (16, 64, 32, 4, 1, 4, 1), (16, 32, 32, 2, 1, 4, 1),
                 (16, 64, 16, 2, 1, 4, 1), (8, 8, 64, 2, 1, 3, 1), (28, 32, 64, 4, 1, 8, 1),
                 (16, 32, 64, 4, 0, 4, 1), (8, 16, 64, 2, 1, 3, 1), (4, 16, 64, 2, 1, 2, 1),
                 (16, 32, 32, 4, 2, 4, 1))
        # persistent grids: PERSIST programs per SM, the occupancy sm_90 gives them
        persist = ((16, 32, 64, 4, 1, 4, 1, 2), (16, 16, 64, 2, 1, 4, 1, 4), (16, 32, 32, 2, 1, 4, 1, 4),
                   (8, 16, 64, 2, 1, 3, 1, 4), (8, 8, 64, 2, 1, 3, 1, 7))
    else:
        table = ((8, 16, 64, 4, 1, 2), (8, 8, 64, 4, 1, 2), (8, 32, 32, 4, 1, 2), (8, 16, 64, 4, 0, 3),
                 (4, 8, 64, 2, 1, 2), (8, 16, 16, 2, 1, 2), (8, 16, 32, 4, 1, 2))
        pairs = persist = ()
    out = []
    for bh, bw, bc, warps, reg, l2 in table:
        if bc <= max(16, next_pow2(k)):
            out.append(dict(BH=bh, BW=bw, BC=bc, num_warps=warps, REG_AHEAD=reg, L2_AHEAD=l2))
    for bh, bw, bc, warps, reg, l2, cvt in pairs:
        if bc <= max(16, next_pow2(k)):
            out.append(dict(BH=bh, BW=bw, BC=bc, num_warps=warps, REG_AHEAD=reg, L2_AHEAD=l2, PAIRS=True, CVT=cvt))
    for bh, bw, bc, warps, reg, l2, cvt, per_sm in persist:
        if bc <= max(16, next_pow2(k)):
            out.append(dict(BH=bh, BW=bw, BC=bc, num_warps=warps, REG_AHEAD=reg, L2_AHEAD=l2, PAIRS=True, CVT=cvt,
                            PERSIST=per_sm))
    return out


def launch_strip(x, w, y, geo, alpha, beta, spec, cfg, flip, nd):
    """dw3_strip_kernel over x (N, C, [1,] H, W) into y (forward, any layout; the L2
    prefetch only where channels are contiguous)."""
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    xs, ws, ys = strides5(x, nd), strides5(w, nd), strides5(y, nd)
    k, kg = y.shape[1], y.shape[1] // x.shape[1]
    stride = geo.stride[2]
    ih, iw = x.shape[-2] if nd >= 2 else 1, x.shape[-1]
    oh, ow = y.shape[-2] if nd >= 2 else 1, y.shape[-1]
    bh, bw, bc = cfg["BH"], cfg["BW"], cfg["BC"]
    n_rows, n_cols = cdiv(oh, bh), cdiv(ow, bw)
    grid = (y.shape[0] * n_rows * n_cols, cdiv(k, bc))
    # prefetch chunks of 64 bytes: the tile's input columns x (chunks + the last channel)
    l2 = cfg.get("L2_AHEAD", 0) if xs[1] == 1 else 0
    e = max(1, 64 // x.element_size())
    span = (bw - 1) * stride + 3
    ch = cdiv(cdiv(bc, kg), e) + 1
    head = (k, kg, ih, iw, oh, ow, geo.pad[1], geo.pad[2], n_rows, n_cols,
            xs[0], xs[1], xs[3], xs[4], ws[0], ws[3], ws[4], ys[0], ys[1], ys[3], ys[4],
            zs[0], zs[1], zs[3], zs[4], bias_stride)
    on_gpu = x.device.type == "cuda"
    consts = dict(BH=bh, BW=bw, BC=bc, STRIDE=stride, REG_AHEAD=bool(cfg.get("REG_AHEAD", 1)), L2_AHEAD=l2,
                  PF_ASM=on_gpu, PF_N=next_pow2(span * ch), PF_SPAN=span, PF_CH=ch, PF_E=e,
                  FLIP=flip, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                  INT64=needs_int64(x, y, z))
    tail = (float(alpha), float(beta), alpha2, coef, swish_beta)
    if cfg.get("PAIRS") and stride == 1 and bw >= 2:
        del consts["STRIDE"]
        consts["REG_AHEAD"] = int(cfg.get("REG_AHEAD", 1))
        consts["CVT_ASM"] = bool(cfg.get("CVT")) and on_gpu and x.dtype == torch.bfloat16
        per_sm = cfg.get("PERSIST", 0)  # programs per SM of the persistent grid (0: a program a tile)
        consts["PERSIST"] = bool(per_sm)
        n_sp, n_kb = grid
        programs = n_sp * n_kb
        if per_sm:  # whole channel blocks' worth: each program keeps one block
            programs = n_kb * min(n_sp, max(1, per_sm * (_sm_count(x.device) if on_gpu else 1) // n_kb))
        launch(dw3_pairs_kernel, (programs,), (x, w, y, bias, z, y.shape[0]) + head + tail, consts,
               dict(num_warps=cfg["num_warps"]))
        return
    launch(dw3_strip_kernel, grid, (x, w, y, bias, z) + head + tail, consts, dict(num_warps=cfg["num_warps"]))


_SMS = {}


def _sm_count(device):
    if device.index not in _SMS:
        _SMS[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device.index]
