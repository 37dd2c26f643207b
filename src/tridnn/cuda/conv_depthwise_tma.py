"""Depthwise 3x3 convolutions that stream input rows through TMA (Hopper's tensor memory accelerator).

The pointer row kernel of conv_direct (``dw3_rows_kernel``) holds its loads in
registers, so it has few bytes in flight per SM and runs latency bound (1.2-2.5 TB/s on
the H200). Here a program owns (image, column strip of BW pixels, channel block of BC,
strip of rows) and walks down the rows; each input row arrives as three TMA boxes
[1, 1, BW, BC] of channels-last x, one per horizontal tap (column offsets -pad, +1,
+2). The loop is a ``tl.range(num_stages=STAGES)``: the pipeliner turns the box loads
into asynchronous copies into shared memory, so STAGES - 1 rows are in flight per
program without registers to hold them. TMA fills every coordinate outside the array
with zeros (negative ones too): that is the zero padding, and no load has a mask.
The three boxes of a row overlap (each element is fetched three times from L2, once
from DRAM).

- ``dw3_tma_fwd_kernel``: forward. Stride 1: input row i feeds output rows i + PH - 2,
  i + PH - 1 and i + PH (filter rows 2, 1, 0); three rolling float32 accumulators, the
  finished row stored each iteration through the fused epilogue (``store_tile``).
  Backward data of a stride-1 layer is the same kernel on dy with the flipped filter and
  padding 2 - pad. Stride 2 (padding 1, even H and W, packed pixels) reads x through
  the phase view [N, H/2, 2, W/2, 2C] (conv_tma's trick): input row 2o + r is row o of
  phase r, columns 2q - 1, 2q, 2q + 1 are boxes at (q - 1, phase 1), (q, phase 0),
  (q, phase 1). Output row o takes rows (o - 1, 1), (o, 0), (o, 1); the first is the
  previous iteration's last, carried as its product with filter row 0.
- ``dw3_tma_pairs_kernel``: the stride-1 walk for column padding 1 and even W through
  the pair view [N, H, W/2, 2, C]: one box of output-pixel pairs, split into even and
  odd columns in registers, and two half boxes (the odd column before each pair, the
  even one after), so x crosses L2 twice instead of three times.
- ``dw3_tma_wgrad_kernel``: backward filter, stride 1. The same walk over x rows with
  the dy rows (one box each) that pair with them: x row i meets dy rows i + PH - a at
  filter row a, and nine [BW, BC] float32 accumulators take dy * x; at the end each is
  summed over the strip into the program's partial [slot, K, 9] (the caller sums the
  slots in a fixed order). A loaded tile carried to the next iteration keeps Triton's
  pipeliner from making the loads asynchronous, so the dy rows are loaded where used:
  three per x row, or (ROWS3) five per three x rows.

Only multiplier 1 (one output channel per input channel: the channel box is the same
for x and y) and channels-last operands with 16-byte aligned strides apply
(``fwd_layout_ok``, ``wgrad_layout_ok``, ``box_ok``); otherwise the callers keep the
pointer kernels.
"""
from __future__ import annotations

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import cdiv, launch, wide
from .conv_direct import _taps3
from .epilogue import launch_args, store_tile
from .geometry import needs_int64, strides5


# -- kernels -----------------------------------------------------------------------
@triton.jit
def _mul3(x0, x1, x2, w0, w1, w2):
    return x0 * w0 + x1 * w1 + x2 * w2


@triton.jit
def _box(x_desc, n, i, col, c0, BW: tl.constexpr, BC: tl.constexpr):
    """Box [BW, BC] of row i of image n from column col, channel c0, as float32."""
    return x_desc.load([n, i, col, c0]).reshape(BW, BC).to(tl.float32)


@triton.jit
def _box_s2(x_desc, n, i, phase, col, c, BW: tl.constexpr, BC: tl.constexpr):
    """Box [BW, BC] of the phase view [N, H/2, 2, W/2, 2C] at (n, i, phase, col, c)."""
    return x_desc.load([n, i, phase, col, c]).reshape(BW, BC).to(tl.float32)


@triton.jit
def _row_s2(x_desc, n, i, phase, q0, c0, C, BW: tl.constexpr, BC: tl.constexpr):
    """Input row 2i + phase at output columns q0 ..: the boxes of columns 2q - 1, 2q, 2q + 1."""
    x0 = _box_s2(x_desc, n, i, phase, q0 - 1, C + c0, BW, BC)
    x1 = _box_s2(x_desc, n, i, phase, q0, c0, BW, BC)
    x2 = _box_s2(x_desc, n, i, phase, q0, C + c0, BW, BC)
    return x0, x1, x2


@triton.jit
def _strip_program(C, OH, BH, n_rows, n_cols, BC: tl.constexpr):
    """The forward kernels' program: (column strip, image, channel block c0, its channels
    and their mask, first output row, row end) from grid (N x row strips x column strips,
    channel blocks)."""
    pid = tl.program_id(0)
    col_blk = pid % n_cols
    t = pid // n_cols
    row_blk = t % n_rows
    n = t // n_rows
    c0 = tl.program_id(1) * BC
    offs_k = c0 + tl.arange(0, BC)
    mask_k = offs_k < C
    oh0 = row_blk * BH
    oh_end = tl.minimum(oh0 + BH, OH)
    return col_blk, n, c0, offs_k, mask_k, oh0, oh_end


@triton.jit
def _weights9(w_ptr, offs_k, mask_k, ws_k, ws_h, ws_w, FLIP: tl.constexpr):
    """The nine weights of channels offs_k (of the flipped filter when FLIP), float32 [1, BC]."""
    w_col = offs_k * ws_k
    w00, w01, w02 = _taps3(w_ptr, w_col, mask_k, 0, ws_h, ws_w, FLIP)
    w10, w11, w12 = _taps3(w_ptr, w_col, mask_k, 1, ws_h, ws_w, FLIP)
    w20, w21, w22 = _taps3(w_ptr, w_col, mask_k, 2, ws_h, ws_w, FLIP)
    return w00, w01, w02, w10, w11, w12, w20, w21, w22


@triton.jit
def _out_cols(n, ow, ys_n, ys_w, zs_n, zs_w, INT64: tl.constexpr):
    """Element offsets of output pixels (n, row 0, columns ow) in y and z (int64 when INT64)."""
    n_off = n
    if INT64:
        n_off = n.to(tl.int64)
    return n_off * ys_n + ow * ys_w, n_off * zs_n + ow * zs_w


@triton.jit(do_not_specialize=['C', 'OH', 'OW', 'PH', 'PW', 'BH', 'n_rows', 'n_cols'])
def dw3_tma_fwd_kernel(
        # epilogue pointers: output, bias, residual z; the filter (C, 1, 3, 3) at any strides
        y_ptr, bias_ptr, z_ptr, w_ptr,
        # TMA descriptor of the input: [N, H, W, C] with box [1, 1, BW, BC] (stride 1), or
        # the phase view [N, H/2, 2, W/2, 2C] with box [1, 1, 1, BW, BC] (STRIDE2)
        x_desc,
        # channels, output H x W, padding (stride 1; stride 2 takes 1), rows per strip,
        # row strips and column strips per image
        C, OH, OW, PH, PW, BH, n_rows, n_cols,
        # element strides: w (k, h, w), y and z (n, k, h, w), bias
        ws_k, ws_h, ws_w,
        ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        BW: tl.constexpr, BC: tl.constexpr, STAGES: tl.constexpr, STRIDE2: tl.constexpr, FLIP: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr):
    """y[n, c, o, q] = sum_{a,b} x[n, c, S*o - PH + a, S*q - PW + b] * w[c, a, b] for one
    strip of BH rows x BW columns x BC channels (S = 1, or 2 with STRIDE2)."""
    # -- map the program to (image, row strip, column strip) and a channel block
    col_blk, n, c0, offs_k, mask_k, oh0, oh_end = _strip_program(C, OH, BH, n_rows, n_cols, BC)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    q0 = col_blk * BW
    ow = q0 + tl.arange(0, BW)
    mask_w = ow < OW

    # -- the nine weights, float32 [1, BC]; the output pointers' parts
    w00, w01, w02, w10, w11, w12, w20, w21, w22 = _weights9(w_ptr, offs_k, mask_k, ws_k, ws_h, ws_w, FLIP)
    y_cols, z_cols = _out_cols(n, ow, ys_n, ys_w, zs_n, zs_w, INT64)

    if STRIDE2:
        # -- output row o = rows (o - 1, phase 1) x filter row 0 (carried), (o, 0) x row 1,
        # (o, 1) x row 2
        x0, x1, x2 = _row_s2(x_desc, n, oh0 - 1, 1, q0, c0, C, BW, BC)
        carry = _mul3(x0, x1, x2, w00, w01, w02)
        for o in tl.range(oh0, oh_end, num_stages=STAGES):
            a0, a1, a2 = _row_s2(x_desc, n, o, 0, q0, c0, C, BW, BC)
            b0, b1, b2 = _row_s2(x_desc, n, o, 1, q0, c0, C, BW, BC)
            acc = carry + _mul3(a0, a1, a2, w10, w11, w12) + _mul3(b0, b1, b2, w20, w21, w22)
            carry = _mul3(b0, b1, b2, w00, w01, w02)
            store_tile(acc, y_cols + o * ys_h, z_cols + o * zs_h, offs_k, mask_w, mask_k, y_ptr, ys_k, z_ptr, zs_k,
                       bias_ptr, bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z,
                       BETA_ZERO)
    else:
        # -- walk input rows i = o - PH + a of output rows oh0 .. oh_end - 1: row i ends
        # output row i + PH - 2 (filter row 2), continues i + PH - 1, starts i + PH
        acc_done = tl.zeros((BW, BC), dtype=tl.float32)
        acc_mid = tl.zeros((BW, BC), dtype=tl.float32)
        col = q0 - PW
        for i in tl.range(oh0 - PH, oh_end - PH + 2, num_stages=STAGES):
            x0 = _box(x_desc, n, i, col, c0, BW, BC)
            x1 = _box(x_desc, n, i, col + 1, c0, BW, BC)
            x2 = _box(x_desc, n, i, col + 2, c0, BW, BC)
            acc_done += _mul3(x0, x1, x2, w20, w21, w22)
            acc_mid += _mul3(x0, x1, x2, w10, w11, w12)
            acc_new = _mul3(x0, x1, x2, w00, w01, w02)
            o = i + PH - 2
            if o >= oh0:
                store_tile(acc_done, y_cols + o * ys_h, z_cols + o * zs_h, offs_k, mask_w, mask_k, y_ptr, ys_k,
                           z_ptr, zs_k, bias_ptr, bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT,
                           HAS_BIAS, HAS_Z, BETA_ZERO)
            acc_done = acc_mid
            acc_mid = acc_new


@triton.jit
def _pair_row(xp_desc, xh_desc, n, i, j0, c0, BWH: tl.constexpr, BC: tl.constexpr):
    """Input row i around output pixel pairs j0 ..: the even and odd columns of the pairs
    (one box [BWH, 2, BC], split in registers), the odd column of the pair before each and
    the even column of the pair after (half boxes [BWH, 1, BC]), float32 [BWH, BC] each."""
    pair = xp_desc.load([n, i, j0, 0, c0]).reshape(BWH, 2, BC)
    even, odd = tl.split(tl.permute(pair, (0, 2, 1)))
    left = xh_desc.load([n, i, j0 - 1, 1, c0]).reshape(BWH, BC)
    right = xh_desc.load([n, i, j0 + 1, 0, c0]).reshape(BWH, BC)
    return left.to(tl.float32), even.to(tl.float32), odd.to(tl.float32), right.to(tl.float32)


@triton.jit(do_not_specialize=['C', 'OH', 'OW', 'PH', 'BH', 'n_rows', 'n_cols'])
def dw3_tma_pairs_kernel(
        # epilogue pointers: output, bias, residual z; the filter (C, 1, 3, 3) at any strides
        y_ptr, bias_ptr, z_ptr, w_ptr,
        # TMA descriptors of the pair view of x [N, H, W/2, 2, C]: boxes [1, 1, BW/2, 2, BC]
        # (whole pairs) and [1, 1, BW/2, 1, BC] (one column of each pair)
        xp_desc, xh_desc,
        # channels, output H x W, row padding (columns: 1), rows per strip, strips per image
        C, OH, OW, PH, BH, n_rows, n_cols,
        ws_k, ws_h, ws_w,
        ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        BW: tl.constexpr, BC: tl.constexpr, STAGES: tl.constexpr, FLIP: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr):
    """dw3_tma_fwd_kernel's stride-1 walk with column padding 1 and even W, reading each
    input row as output pixel pairs: the even output column 2j takes columns (2j - 1, 2j,
    2j + 1) = (odd of pair j - 1, even of j, odd of j), the odd one (even of j, odd of j,
    even of j + 1). One box of pairs and two half boxes: x crosses L2 twice, not three
    times (three shifted boxes)."""
    BWH: tl.constexpr = BW // 2
    # -- map the program to (image, row strip, column strip) and a channel block
    col_blk, n, c0, offs_k, mask_k, oh0, oh_end = _strip_program(C, OH, BH, n_rows, n_cols, BC)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    j0 = col_blk * BWH
    ow_e = 2 * (j0 + tl.arange(0, BWH))
    mask_e = ow_e < OW
    mask_o = ow_e + 1 < OW

    # -- the nine weights, float32 [1, BC]; the output pointers' parts (even columns)
    w00, w01, w02, w10, w11, w12, w20, w21, w22 = _weights9(w_ptr, offs_k, mask_k, ws_k, ws_h, ws_w, FLIP)
    y_e, z_e = _out_cols(n, ow_e, ys_n, ys_w, zs_n, zs_w, INT64)

    # -- walk input rows as dw3_tma_fwd_kernel, even and odd output columns apart
    done_e = tl.zeros((BWH, BC), dtype=tl.float32)
    done_o = tl.zeros((BWH, BC), dtype=tl.float32)
    mid_e = tl.zeros((BWH, BC), dtype=tl.float32)
    mid_o = tl.zeros((BWH, BC), dtype=tl.float32)
    for i in tl.range(oh0 - PH, oh_end - PH + 2, num_stages=STAGES):
        left, even, odd, right = _pair_row(xp_desc, xh_desc, n, i, j0, c0, BWH, BC)
        done_e += _mul3(left, even, odd, w20, w21, w22)
        done_o += _mul3(even, odd, right, w20, w21, w22)
        mid_e += _mul3(left, even, odd, w10, w11, w12)
        mid_o += _mul3(even, odd, right, w10, w11, w12)
        new_e = _mul3(left, even, odd, w00, w01, w02)
        new_o = _mul3(even, odd, right, w00, w01, w02)
        o = i + PH - 2
        if o >= oh0:
            store_tile(done_e, y_e + o * ys_h, z_e + o * zs_h, offs_k, mask_e, mask_k, y_ptr, ys_k,
                       z_ptr, zs_k, bias_ptr, bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT,
                       HAS_BIAS, HAS_Z, BETA_ZERO)
            store_tile(done_o, y_e + ys_w + o * ys_h, z_e + zs_w + o * zs_h, offs_k, mask_o, mask_k, y_ptr, ys_k,
                       z_ptr, zs_k, bias_ptr, bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT,
                       HAS_BIAS, HAS_Z, BETA_ZERO)
        done_e = mid_e
        done_o = mid_o
        mid_e = new_e
        mid_o = new_o


@triton.jit
def _wsum(part_ptr, acc, slot, K, offs_k, mask_k, tap, ATOMIC: tl.constexpr):
    col = tl.sum(acc, axis=0)
    ptrs = part_ptr + (slot * K + offs_k).to(tl.int64) * 9 + tap  # partial layout [slots, K, 9, 1]
    if ATOMIC:
        tl.atomic_add(ptrs, col, mask=mask_k)
    else:
        tl.store(ptrs, col, mask=mask_k)


@triton.jit
def _wsum9(part_ptr, a00, a01, a02, a10, a11, a12, a20, a21, a22, slot, K, offs_k, mask_k, ATOMIC: tl.constexpr):
    """The nine accumulators' column sums into partial slot ``slot`` (ATOMIC: added)."""
    _wsum(part_ptr, a00, slot, K, offs_k, mask_k, 0, ATOMIC)
    _wsum(part_ptr, a01, slot, K, offs_k, mask_k, 1, ATOMIC)
    _wsum(part_ptr, a02, slot, K, offs_k, mask_k, 2, ATOMIC)
    _wsum(part_ptr, a10, slot, K, offs_k, mask_k, 3, ATOMIC)
    _wsum(part_ptr, a11, slot, K, offs_k, mask_k, 4, ATOMIC)
    _wsum(part_ptr, a12, slot, K, offs_k, mask_k, 5, ATOMIC)
    _wsum(part_ptr, a20, slot, K, offs_k, mask_k, 6, ATOMIC)
    _wsum(part_ptr, a21, slot, K, offs_k, mask_k, 7, ATOMIC)
    _wsum(part_ptr, a22, slot, K, offs_k, mask_k, 8, ATOMIC)


@triton.jit
def window_masks(o, q, mask_q, IH, IW, SH, SW, PH, PW, DH, DW):
    """The 3x3 window of output pixels (o, q): its first x row and column (ih, iw) and
    which of its three rows (masked by ``mask_q``) and three columns fall inside x."""
    ih = o * SH - PH
    iw = q * SW - PW
    ok_r0 = mask_q & (ih >= 0) & (ih < IH)
    ok_r1 = mask_q & (ih + DH >= 0) & (ih + DH < IH)
    ok_r2 = mask_q & (ih + 2 * DH >= 0) & (ih + 2 * DH < IH)
    ok_c0 = (iw >= 0) & (iw < IW)
    ok_c1 = (iw + DW >= 0) & (iw + DW < IW)
    ok_c2 = (iw + 2 * DW >= 0) & (iw + 2 * DW < IW)
    return ih, iw, ok_r0, ok_r1, ok_r2, ok_c0, ok_c1, ok_c2


@triton.jit
def _zeros9(BW: tl.constexpr, BC: tl.constexpr):
    """Nine float32 [BW, BC] accumulators, one per tap."""
    z = tl.zeros((BW, BC), dtype=tl.float32)
    return z, z, z, z, z, z, z, z, z


@triton.jit
def _wgrad_program(K, OH, BH, n_rows, BC: tl.constexpr):
    """The filter-gradient kernels' program: (channel block c0, its channels and their
    mask, column strip, unit = image x row strips + row strip, image, first dy row, row
    end) from grid (channel blocks, column strips, N x row strips)."""
    c0 = tl.program_id(0) * BC
    offs_k = c0 + tl.arange(0, BC)
    mask_k = offs_k < K
    col_blk = tl.program_id(1)
    unit = tl.program_id(2)
    n = unit // n_rows
    o0 = (unit - n * n_rows) * BH
    o_end = tl.minimum(o0 + BH, OH)
    return c0, offs_k, mask_k, col_blk, unit, n, o0, o_end


@triton.jit
def _wrow(a00, a01, a02, a10, a11, a12, a20, a21, a22, g0, g1, g2, x_desc, n, i, col, c0,
          BW: tl.constexpr, BC: tl.constexpr):
    """The nine accumulators plus x row i (three shifted boxes) times the dy rows that meet
    it at filter rows 0, 1, 2 (g0, g1, g2)."""
    x0 = _box(x_desc, n, i, col, c0, BW, BC)
    x1 = _box(x_desc, n, i, col + 1, c0, BW, BC)
    x2 = _box(x_desc, n, i, col + 2, c0, BW, BC)
    return (a00 + g0 * x0, a01 + g0 * x1, a02 + g0 * x2, a10 + g1 * x0, a11 + g1 * x1, a12 + g1 * x2,
            a20 + g2 * x0, a21 + g2 * x1, a22 + g2 * x2)


@triton.jit(do_not_specialize=['K', 'OH', 'PH', 'PW', 'BH', 'n_rows'])
def dw3_tma_wgrad_kernel(
        # the partials [slots, K, 9] (float32)
        part_ptr,
        # TMA descriptors: x [N, H, W, C] and dy [N, OH, OW, K], boxes [1, 1, BW, BC]
        x_desc, dy_desc,
        # channels, dy rows, padding, rows per strip, row strips per image
        K, OH, PH, PW, BH, n_rows,
        BW: tl.constexpr, BC: tl.constexpr, STAGES: tl.constexpr, ROWS3: tl.constexpr, ATOMIC: tl.constexpr):
    """part[slot, k, 3a + b] = sum over the strip's dy pixels (n, o, q) of
    dy[n, k, o, q] * x[n, k, o - PH + a, q - PW + b], stride 1; slot = (image, row strip)
    x column strips + column strip (ATOMIC: all added into slot 0)."""
    # -- map the program to a channel block, column strip and (image, row strip)
    c0, offs_k, mask_k, col_blk, unit, n, o0, o_end = _wgrad_program(K, OH, BH, n_rows, BC)
    q0 = col_blk * BW
    col = q0 - PW

    # -- walk the x rows i = o - PH + a; dy row i + PH - a meets filter row a. dy rows
    # outside the strip (and x rows past it) are read at row -1: TMA zeros, no memory
    # traffic. The dy rows are loaded each iteration (from L2 but the first time):
    # carrying a loaded row into the next iteration keeps the pipeliner from making the
    # loads async. ROWS3: three x rows an iteration, so the five dy rows they meet are
    # loaded once for three rows (dy crosses L2 5/3 times instead of 3)
    a00, a01, a02, a10, a11, a12, a20, a21, a22 = _zeros9(BW, BC)
    if ROWS3:
        # -- three x rows an iteration with the five dy rows they meet (dy read 5/3 times)
        i_end = o_end - PH + 2
        for i in tl.range(o0 - PH, i_end, 3, num_stages=STAGES):
            j = i + PH - 2
            d0 = _box(dy_desc, n, tl.where(j >= o0, j, -1), q0, c0, BW, BC)
            d1 = _box(dy_desc, n, tl.where((j + 1 >= o0) & (j + 1 < o_end), j + 1, -1), q0, c0, BW, BC)
            d2 = _box(dy_desc, n, tl.where(j + 2 < o_end, j + 2, -1), q0, c0, BW, BC)
            d3 = _box(dy_desc, n, tl.where(j + 3 < o_end, j + 3, -1), q0, c0, BW, BC)
            d4 = _box(dy_desc, n, tl.where(j + 4 < o_end, j + 4, -1), q0, c0, BW, BC)
            a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wrow(
                a00, a01, a02, a10, a11, a12, a20, a21, a22, d2, d1, d0, x_desc, n, i, col, c0, BW, BC)
            a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wrow(
                a00, a01, a02, a10, a11, a12, a20, a21, a22, d3, d2, d1, x_desc, n,
                tl.where(i + 1 < i_end, i + 1, -1), col, c0, BW, BC)
            a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wrow(
                a00, a01, a02, a10, a11, a12, a20, a21, a22, d4, d3, d2, x_desc, n,
                tl.where(i + 2 < i_end, i + 2, -1), col, c0, BW, BC)
    else:
        for i in tl.range(o0 - PH, o_end - PH + 2, num_stages=STAGES):
            j = i + PH
            g0 = _box(dy_desc, n, tl.where(j < o_end, j, -1), q0, c0, BW, BC)
            g1 = _box(dy_desc, n, tl.where((j - 1 < o_end) & (j - 1 >= o0), j - 1, -1), q0, c0, BW, BC)
            g2 = _box(dy_desc, n, tl.where(j - 2 >= o0, j - 2, -1), q0, c0, BW, BC)
            a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wrow(
                a00, a01, a02, a10, a11, a12, a20, a21, a22, g0, g1, g2, x_desc, n, i, col, c0, BW, BC)

    # -- per-tap sums over the strip's columns into this program's partial slot
    slot = 0
    if not ATOMIC:
        slot = unit * tl.num_programs(1) + col_blk
    _wsum9(part_ptr, a00, a01, a02, a10, a11, a12, a20, a21, a22, slot, K, offs_k, mask_k, ATOMIC)


@triton.jit
def _dy_pairs(dyp_desc, n, j, ok, j0, c0, BWH: tl.constexpr, BC: tl.constexpr):
    """dy row j (row -1, TMA zeros, where not ok) at pixel pairs j0 ..: even and odd columns."""
    pair = dyp_desc.load([n, tl.where(ok, j, -1), j0, 0, c0]).reshape(BWH, 2, BC)
    even, odd = tl.split(tl.permute(pair, (0, 2, 1)))
    return even.to(tl.float32), odd.to(tl.float32)


@triton.jit
def _wrow_pairs(a00, a01, a02, a10, a11, a12, a20, a21, a22, e0, o0, e1, o1, e2, o2, xp_desc, xh_desc, n, i, j0,
                c0, BWH: tl.constexpr, BC: tl.constexpr):
    """The nine accumulators plus x row i at pixel pairs j0 .. times the dy rows meeting it
    at filter rows 0, 1, 2 (even columns e*, odd o*): dy column 2j meets x columns 2j - 1,
    2j, 2j + 1 (left, even, odd), dy column 2j + 1 meets (even, odd, right)."""
    left, even, odd, right = _pair_row(xp_desc, xh_desc, n, i, j0, c0, BWH, BC)
    return (a00 + e0 * left + o0 * even, a01 + e0 * even + o0 * odd, a02 + e0 * odd + o0 * right,
            a10 + e1 * left + o1 * even, a11 + e1 * even + o1 * odd, a12 + e1 * odd + o1 * right,
            a20 + e2 * left + o2 * even, a21 + e2 * even + o2 * odd, a22 + e2 * odd + o2 * right)


@triton.jit(do_not_specialize=['K', 'OH', 'PH', 'BH', 'n_rows'])
def dw3_tma_wgrad_pairs_kernel(
        # the partials [slots, K, 9] (float32)
        part_ptr,
        # TMA descriptors of the pair views: x [N, H, W/2, 2, C] boxes [1, 1, BW/2, 2, BC]
        # and [1, 1, BW/2, 1, BC]; dy [N, OH, OW/2, 2, K] boxes [1, 1, BW/2, 2, BC]
        xp_desc, xh_desc, dyp_desc,
        # channels, dy rows, row padding (columns: 1), rows per strip, row strips per image
        K, OH, PH, BH, n_rows,
        BW: tl.constexpr, BC: tl.constexpr, STAGES: tl.constexpr, ATOMIC: tl.constexpr):
    """dw3_tma_wgrad_kernel's ROWS3 walk for column padding 1 and even W through the pair
    views (dw3_tma_pairs_kernel's): x crosses L2 twice instead of three times, dy 5/3 times."""
    BWH: tl.constexpr = BW // 2
    # -- map the program to a channel block, column strip and (image, row strip)
    c0, offs_k, mask_k, col_blk, unit, n, o0, o_end = _wgrad_program(K, OH, BH, n_rows, BC)
    j0 = col_blk * BWH

    # -- three x rows an iteration with the five dy rows they meet (as dw3_tma_wgrad_kernel)
    a00, a01, a02, a10, a11, a12, a20, a21, a22 = _zeros9(BWH, BC)
    i_end = o_end - PH + 2
    for i in tl.range(o0 - PH, i_end, 3, num_stages=STAGES):
        j = i + PH - 2
        e0, d0 = _dy_pairs(dyp_desc, n, j, j >= o0, j0, c0, BWH, BC)
        e1, d1 = _dy_pairs(dyp_desc, n, j + 1, (j + 1 >= o0) & (j + 1 < o_end), j0, c0, BWH, BC)
        e2, d2 = _dy_pairs(dyp_desc, n, j + 2, j + 2 < o_end, j0, c0, BWH, BC)
        e3, d3 = _dy_pairs(dyp_desc, n, j + 3, j + 3 < o_end, j0, c0, BWH, BC)
        e4, d4 = _dy_pairs(dyp_desc, n, j + 4, j + 4 < o_end, j0, c0, BWH, BC)
        a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wrow_pairs(
            a00, a01, a02, a10, a11, a12, a20, a21, a22, e2, d2, e1, d1, e0, d0, xp_desc, xh_desc, n, i, j0, c0,
            BWH, BC)
        a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wrow_pairs(
            a00, a01, a02, a10, a11, a12, a20, a21, a22, e3, d3, e2, d2, e1, d1, xp_desc, xh_desc, n,
            tl.where(i + 1 < i_end, i + 1, -1), j0, c0, BWH, BC)
        a00, a01, a02, a10, a11, a12, a20, a21, a22 = _wrow_pairs(
            a00, a01, a02, a10, a11, a12, a20, a21, a22, e4, d4, e3, d3, e2, d2, xp_desc, xh_desc, n,
            tl.where(i + 2 < i_end, i + 2, -1), j0, c0, BWH, BC)

    # -- per-tap sums over the strip's columns into this program's partial slot
    slot = 0
    if not ATOMIC:
        slot = unit * tl.num_programs(1) + col_blk
    _wsum9(part_ptr, a00, a01, a02, a10, a11, a12, a20, a21, a22, slot, K, offs_k, mask_k, ATOMIC)


# -- host side ---------------------------------------------------------------------
def _nhwc(t, nd):
    """(shape [N, H, W, C], strides) of a 1-D / 2-D activation tensor view, or None when its
    channels are not contiguous or a stride / the base is not 16-byte aligned (TMA)."""
    if t.dim() != nd + 2 or nd > 2:
        return None
    sn, sc, _, sh, sw = strides5(t, nd)
    n, c = t.shape[0], t.shape[1]
    h = t.shape[2] if nd == 2 else 1
    w = t.shape[-1]
    if nd == 1:
        sh = sw * w  # one row: any multiple of 16 bytes serves
    item = t.element_size()
    if sc != 1 and c > 1:
        return None
    if t.data_ptr() % 16 or any(s * item % 16 for s in (sn, sh, sw)):
        return None
    return [n, h, w, c], [sn, sh, sw, 1]


def _hardware_ok(t) -> bool:
    """TMA: a Hopper-class GPU, or the interpreter (which emulates it)."""
    if t.device.type != "cuda":
        return True
    import torch
    return torch.cuda.get_device_capability(t.device)[0] >= 9


def _descriptor(t, shape, strides, block):
    if t.device.type != "cuda":  # the interpreter reads the tensor itself
        return TensorDescriptor(t, list(shape), list(strides), list(block))
    from .conv_tma import descriptor  # cached per address and view
    return descriptor(t, shape, strides, block)


def fwd_layout_ok(x, y, nd, stride, pad) -> bool:
    """Whether dw3_tma_fwd_kernel can read x: channels-last with 16-byte aligned strides;
    stride 2 also needs padding 1, even H and W and packed pixels (the phase view)."""
    v = _nhwc(x, nd)
    if v is None or not _hardware_ok(x) or x.shape[1] != y.shape[1]:
        return False
    if stride == (1, 1):
        return True
    if stride != (2, 2) or pad != (1, 1) or nd != 2:
        return False
    (n, h, w, c), (sn, sh, sw, _) = v
    return h % 2 == 0 and w % 2 == 0 and sw == c


def box_ok(cfg, t) -> bool:
    """A box row of BC channels spans at most 128 bytes (the widest shared-memory swizzle:
    16-bit data up to 64 channels, float32 up to 32)."""
    return cfg["BC"] * t.element_size() <= 128


def _key(args, consts):
    """launch's static key: every int and each descriptor's dtype, shape, strides and box."""
    def one(a):
        if isinstance(a, TensorDescriptor):
            return (a.base.dtype, tuple(a.shape), tuple(a.strides), tuple(a.block_shape))
        if isinstance(a, (int, bool)):
            return a
        return type(a)
    return tuple(one(a) for a in args) + tuple(consts.items())


def launch_fwd(x, w, y, nd, stride, pad, alpha, beta, spec, cfg, flip):
    """dw3_tma_fwd_kernel over x (N, C, [H,] W) into y: forward (x, w, y), or with the
    filter flipped and padding 2 - pad, backward data (dy, w, dx) of a stride-1 layer.
    The caller checks fwd_layout_ok first."""
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    (n, h, wd, c), xst = _nhwc(x, nd)
    ws, ys = strides5(w, nd), strides5(y, nd)
    oh, ow = (y.shape[2] if nd == 2 else 1), y.shape[-1]
    bw, bc = cfg["BW"], cfg["BC"]
    bh = min(cfg["BH"], oh)
    n_rows, n_cols = cdiv(oh, bh), cdiv(ow, bw)
    grid = (n * n_rows * n_cols, cdiv(c, bc))
    tail = (ws[0], ws[3], ws[4], ys[0], ys[1], ys[3], ys[4], zs[0], zs[1], zs[3], zs[4], bias_stride,
            float(alpha), float(beta), alpha2, coef, swish_beta)
    consts = dict(BW=bw, BC=bc, STAGES=cfg["STAGES"], FLIP=flip, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z,
                  BETA_ZERO=beta == 0, INT64=needs_int64(y, z))
    options = dict(num_warps=cfg["num_warps"])
    if cfg.get("PAIRS") and stride == (1, 1) and pad[1] == 1 and wd % 2 == 0 and bw >= 2:
        # the pair view [N, H, W/2, 2, C]: whole pairs and single columns of pairs
        shape = [n, h, wd // 2, 2, c]
        strides = [xst[0], xst[1], 2 * xst[2], xst[2], 1]
        descs = (_descriptor(x, shape, strides, [1, 1, bw // 2, 2, bc]),
                 _descriptor(x, shape, strides, [1, 1, bw // 2, 1, bc]))
        kernel, head = dw3_tma_pairs_kernel, (c, oh, ow, pad[0], bh, n_rows, n_cols)
    else:
        if stride == (2, 2):
            shape = [n, h // 2, 2, wd // 2, 2 * c]
            strides = [xst[0], 2 * xst[1], xst[1], 2 * xst[2], 1]
            block = [1, 1, 1, bw, bc]
        else:
            shape, strides, block = [n, h, wd, c], xst, [1, 1, bw, bc]
        descs = (_descriptor(x, shape, strides, block),)
        kernel, head = dw3_tma_fwd_kernel, (c, oh, ow, pad[0], pad[1], bh, n_rows, n_cols)
        consts["STRIDE2"] = stride == (2, 2)
    args = (y, bias, z, w) + descs + head + tail
    static = ((_key(args[4:], consts), tuple(options.items()), x.dtype, w.dtype, y.dtype, bias.dtype, z.dtype), 4)
    launch(kernel, grid, args, consts, options, static)


def fwd_configs(device, c, stride=1):
    """(BW, BC, BH, STAGES, warps[, PAIRS]) candidates (KIND "tma"). sm_90 bf16, three
    shifted boxes: 80 registers at 4 elements per thread (36 of them the nine weights of
    a thread's 4 channels), ~150 at 8, 46 at 2; PAIRS (dw3_tma_pairs_kernel, stride 1,
    column padding 1, even W; else the three-box kernel runs): 56 at 4 elements (2
    channels a thread), 103 at 8. STAGES - 1 rows are in flight per program (stride 2: two
    input rows an output row), so 5-6 stages put ~30 KB of x in flight per SM. Strips of
    8-32 rows give enough programs (64 x 112 / 16 x 112 / 16 = 3584 for dw32_112) or
    whole columns."""
    if device.type != "cuda":
        return [dict(BW=4, BC=8, BH=3, STAGES=2, num_warps=1, KIND="tma"),
                dict(BW=4, BC=8, BH=3, STAGES=2, num_warps=1, KIND="tma", PAIRS=True)]
    # The configs that were the fastest TMA one for some MobileNetV2 layer and direction on
    # the H200 (sweep_depthwise_tma.py, 2026-11-30 11:40 UTC; 17 stride-1 and 8 stride-2
    # configs were timed): each one compiles on a layer's first call, so the rest are not
    # offered.
    if stride == 2:
        table = ((16, 32, 8, 4, 4, 0), (8, 64, 28, 4, 4, 0), (8, 64, 8, 4, 4, 0))
    else:
        table = ((16, 32, 16, 4, 4, 0), (8, 64, 16, 5, 4, 1), (32, 32, 32, 6, 8, 1), (8, 64, 16, 5, 4, 0),
                 (16, 32, 16, 5, 4, 1))
    return [dict(BW=bw, BC=bc, BH=bh, STAGES=st, num_warps=warps, KIND="tma", PAIRS=bool(pairs))
            for bw, bc, bh, st, warps, pairs in table if bc <= max(16, triton.next_power_of_2(c))]


# -- backward filter ---------------------------------------------------------------
def s2_applies(problem) -> bool:
    """dw3_tma_fwd_kernel's strided case: 2-D depthwise 3x3 (multiplier 1), stride 2,
    padding 1, no dilation (the layout is checked per call: fwd_layout_ok)."""
    from .geometry import geometry
    geo = geometry(problem)
    return (geo.cg == 1 and geo.k == geo.c and geo.ker == (1, 3, 3) and geo.stride == (1, 2, 2)
            and geo.pad == (0, 1, 1) and geo.dil == (1, 1, 1) and geo.inp[0] == 1 and problem.nd == 2)


def wgrad_applies(problem) -> bool:
    """dw3_tma_wgrad_kernel's case: depthwise 3x3 (1-D or 2-D), stride 1, no dilation,
    multiplier 1 (the layouts are checked per call: wgrad_layout_ok)."""
    from .geometry import geometry
    geo = geometry(problem)
    return (geo.cg == 1 and geo.k == geo.c and geo.ker == (1, 3, 3) and geo.stride == (1, 1, 1)
            and geo.dil == (1, 1, 1) and geo.inp[0] == 1 and problem.nd <= 2)


def wgrad_layout_ok(problem, x, dy, cfg=None) -> bool:
    """wgrad_applies, x and dy channels-last with 16-byte aligned strides (and cfg's box
    within box_ok)."""
    return (wgrad_applies(problem) and _nhwc(x, problem.nd) is not None and _nhwc(dy, problem.nd) is not None
            and _hardware_ok(x) and (cfg is None or (box_ok(cfg, x) and box_ok(cfg, dy))))


def wgrad_slots(problem, cfg, cap):
    """(rows per strip, row strips per image, column strips, slots) for cfg, with strips
    made taller until the slots fit the partial buffer's ``cap``; None if they cannot."""
    from .geometry import geometry
    geo = geometry(problem)
    oh, ow = geo.out[1], geo.out[2]
    n_cols = cdiv(ow, cfg["BW"])
    bh = min(cfg["BH"], oh)
    if geo.n * n_cols > cap:
        return None
    while geo.n * cdiv(oh, bh) * n_cols > cap:
        bh = cdiv(oh, max(1, cap // (geo.n * n_cols)))
    n_rows = cdiv(oh, bh)
    return bh, n_rows, n_cols, geo.n * n_rows * n_cols


def launch_wgrad(problem, x, dy, part, atomic, cfg, cap):
    """dw3_tma_wgrad_kernel into part [slots, K, 9, 1] (ALGO_0: added into slot 0);
    returns the slots used."""
    from .geometry import geometry
    geo = geometry(problem)
    nd = problem.nd
    bh, n_rows, n_cols, slots = wgrad_slots(problem, cfg, cap)
    bw, bc = cfg["BW"], cfg["BC"]
    (xs, xst), (ds, dst) = _nhwc(x, nd), _nhwc(dy, nd)
    options = dict(num_warps=cfg["num_warps"])
    if cfg.get("PAIRS") and geo.pad[2] == 1 and xs[2] % 2 == 0 and bw >= 2:
        # pair views [N, H, W/2, 2, C] of x and dy (OW = W)
        xshape, xstr = [xs[0], xs[1], xs[2] // 2, 2, xs[3]], [xst[0], xst[1], 2 * xst[2], xst[2], 1]
        dshape, dstr = [ds[0], ds[1], ds[2] // 2, 2, ds[3]], [dst[0], dst[1], 2 * dst[2], dst[2], 1]
        descs = (_descriptor(x, xshape, xstr, [1, 1, bw // 2, 2, bc]), _descriptor(x, xshape, xstr, [1, 1, bw // 2, 1, bc]),
                 _descriptor(dy, dshape, dstr, [1, 1, bw // 2, 2, bc]))
        kernel, head = dw3_tma_wgrad_pairs_kernel, (geo.k, geo.out[1], geo.pad[1], bh, n_rows)
        consts = dict(BW=bw, BC=bc, STAGES=cfg["STAGES"], ATOMIC=atomic)
    else:
        descs = (_descriptor(x, xs, xst, [1, 1, bw, bc]), _descriptor(dy, ds, dst, [1, 1, bw, bc]))
        kernel, head = dw3_tma_wgrad_kernel, (geo.k, geo.out[1], geo.pad[1], geo.pad[2], bh, n_rows)
        consts = dict(BW=bw, BC=bc, STAGES=cfg["STAGES"], ROWS3=cfg.get("ROWS3", False), ATOMIC=atomic)
    args = (part,) + descs + head
    launch(kernel, (cdiv(geo.k, bc), n_cols, geo.n * n_rows), args, consts, options,
           ((_key(args[1:], consts), tuple(options.items()), part.dtype), 1))
    return 1 if atomic else slots


def wgrad_configs(device, k):
    """(BW, BC, BH, STAGES, warps, ROWS3, PAIRS): nine float32 accumulators held, so 4
    elements per thread (BW x BC = 512 at 4 warps: 72 registers on sm_90 bf16) or 2 (~40);
    strips of 8-56 rows. ROWS3 (three x rows and five dy rows an iteration): 14 boxes a
    stage, so 3-4 stages, 121 registers at 4 elements, 55 at 2. PAIRS (ROWS3 through the
    pair views; column padding 1 and even W, else the three-box ROWS3 walk runs)."""
    if device.type != "cuda":
        return [dict(BW=4, BC=8, BH=3, STAGES=2, num_warps=1, KIND="tma", ROWS3=False, PAIRS=False),
                dict(BW=4, BC=8, BH=4, STAGES=2, num_warps=1, KIND="tma", ROWS3=True, PAIRS=False),
                dict(BW=4, BC=8, BH=4, STAGES=2, num_warps=1, KIND="tma", ROWS3=True, PAIRS=True)]
    out = []
    # the fastest TMA config for some MobileNetV2 layer on the H200 (11:40 UTC, of 18 timed)
    for bw, bc, bh, stages, warps, rows3, pairs in (
            (16, 32, 32, 3, 4, 1, 1), (16, 32, 32, 4, 4, 0, 0), (16, 32, 16, 3, 4, 0, 0), (8, 64, 16, 4, 4, 0, 0)):
        if bc <= max(16, triton.next_power_of_2(k)):
            out.append(dict(BW=bw, BC=bc, BH=bh, STAGES=stages, num_warps=warps, KIND="tma", ROWS3=bool(rows3),
                            PAIRS=bool(pairs)))
    return out
