"""Pooling forward and backward in Triton: max, average (with and without the padding
in the count), adaptive max and average; 1-D, 2-D and 3-D (1-D and 2-D run as 3-D
with unit dims).

Two kernel families, both with the window (or, backward, the number of covering
outputs) as compile-time constants so that every tap's load is issued before the first
one is used (a runtime tap loop keeps one load in flight per warp):

- gather kernels, any strides: a program owns a [BLOCK_P positions, BLOCK_C channels]
  tile laid out along the contiguous axis (channels for NHWC, so every tap is a run of
  16-byte loads along C);
- row kernels, W contiguous (NCHW) with a W stride of 1 or 2: a program owns
  [BLOCK_R rows of (n, c, d, h), BLOCK_W columns]; with stride 2 it loads each input
  row contiguously (2 * BLOCK_W values) and splits even and odd columns in registers,
  so only the taps left of the window's pair need a second (strided) load; the
  backward builds its even and odd input columns apart and interleaves them before
  one contiguous store;
- channels-last row kernels (CL_KERNELS), C contiguous and no window along D: a program
  owns [rows, columns, channels]; forward folds each input row's KW taps once
  (16-byte channel runs) and feeds the output rows holding it, carrying the row two
  windows share at KH == SH + 1; backward writes each dx row once, its column phases
  (SW * j + a) as separate channel-run tiles. Per output byte they issue 1.5-4x fewer
  instructions than the gather kernels (sm_90 SASS, 3x3/2 bf16).
- NCHW lane kernels (NCHW_LANE_KERNELS, every mode by default since session 6), forward
  only, W contiguous, no window along D: a lane is one (plane, output row) pair over
  8-column groups (one 16-byte vector a group); a program's loads all come before its
  one store, so they are all in flight at once; it combines the window's rows down,
  then takes the taps across once; the taps of max are (window maximum, then the first
  tap equal to it). The NCHW backward gathers are the row kernels' (a lane backward
  kernel was slower and was removed in session 36; see NCHW_LANE_KERNELS).

- issue 5 candidates, off by default (benchmarks/sweep_pooling.py measures them):
  CL_FUSED_MAX_BWD, the channels-last max backward in one pass that recomputes each
  output's first-maximum tap from x (x and dy read once, dx written once, no tap buffer);
  GLOBAL_AVG_KERNEL, global average pooling as a plain mean over each (n, c) plane.

Backward is a gather, so it is deterministic and needs no atomics or zeroing pass:
each program owns a tile of *input* positions and sums over the few outputs whose
windows cover them. Max pooling first stores, per output, which tap holds the
window's first maximum (one byte per output for windows up to 255 taps, laid out like
dy), so the gather only compares tap numbers. Adaptive windows share the gather
kernels through two small window functions."""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from ..errors import BadParamError
from .common import cdiv, wide
from .layer_utils import blend_args, channels_last, check_dtypes, compute_dtype, needs_int64

MAX, AVG_INCLUDE, AVG_EXCLUDE, MAX_DETERMINISTIC = 0, 1, 2, 3
TILE = 2048
ROW_TILE = 1024  # the row kernels' (rows x columns) tile forward
# ... and backward (since session 35 they serve every NCHW backward gather). H100, 2026-12-08,
# bf16 64x256x56x56 3x3/2 (sweep_pooling --more): 2048 took the NCHW max backward from 152.3
# to 140.2 us and the average backward from 60.1 to 57.2; 512 lost (151.4 / 68.6), 2048 at 8
# warps (156.9 / 60.0) and 4096 at 8 (146.1 / 57.8) lost to 4 warps.
ROW_TILE_BACKWARD = 2048
ROW_WARPS = 4  # the row kernels' warps
UNROLL_TAPS = 64  # windows (or covering-output sets) up to this many taps are unrolled
MAX_ROW_BLOCK_W = 64
ROW_KERNELS = True  # False: W-contiguous tensors take the gather kernels too (for comparison)
# channels-last row kernels (C contiguous, no window along D): False keeps the gather kernels
CL_KERNELS = True
CL_ROWS = 4  # output rows per program forward; input rows backward (rounded up to a multiple of the H stride)
CL_BLOCK_W = 32  # output columns forward; column pairs (phases) backward
CL_BLOCK_C = 64
CL_WARPS = 8
CL_ARG_EQ = True  # True: first-maximum taps as (row maximum, then the first tap equal to it)
CL_PACKED_MAX = False  # True: max-only folds of bf16/f16 in packed pairs (inline PTX, GPU only)
# (The NCHW row kernels, NCHW_ROW_KERNELS: a program walking a run of rows down [planes,
# 8-column groups], were removed in session 35: slower than the lane kernels in every run
# since session 6, H100 clean flush max forward 1.57 against 2.39 TB/s, backward 1.30
# against 1.33; they had served no mode by default. Their running tap rule, NCHW_ARG_EQ
# False, went with them: the lane kernels take the window maximum, then the first tap
# equal to it.)
# issue 5: the NCHW lane forward, a lane of the tile one (plane, output row) pair, lanes
# in memory order and one store at the end (all loads in flight before it); the modes that
# take it. sm_90 SASS, warp instructions x 32 per element, bf16 3x3/2, against the designs
# it replaced: max forward 36.0 (NCHW rows 46.5, one row of loads in flight), avg forward
# 41.7 (row kernels 102.9), max taps pass 74.3 (91.4). H200 (2026-11-30 15:10 UTC, TB/s on
# minimal bytes): max forward 1.72 -> 2.46, average forward 2.05 -> 2.38. Its backward
# (7.6 instructions an element for average, 15.7 for max's gather) ran ~1 TB/s on both GPUs
# (average 0.87 on the H200; H100 2026-12-08: max gather 140.0 us against the row kernel's
# 99.0, average 158.5 against 57.2) and was removed in session 36.
NCHW_LANE_KERNELS = frozenset({MAX, AVG_INCLUDE, AVG_EXCLUDE, MAX_DETERMINISTIC})
NCHW_LANE_TILE = 512  # (lane, 8-column group) pairs a program (56 columns: 64 lanes x 8 groups, 4 a thread)
NCHW_LANE_WARPS = 4
# issue 5 candidates (off until measured on the H200: benchmarks/sweep_pooling.py)
# channels-last max backward in one pass (x, dy read once, dx written once) instead of
# taps forward + gather (x read, taps written, taps and dy read, dx written): False (two
# passes), "phases" (groups of CL_FUSED_PHASES output columns, a tile per column phase:
# each output's taps folded once, plus one phase past the group) or "shift" (a tile of
# output columns and one of its right neighbours, folded again)
CL_FUSED_MAX_BWD = False
# sm_90, 3x3/2 bf16, 8 warps (warp instructions per output in the row loop; two passes: 2.30 + 1.89):
# phases 2 x 16 groups x 64 channels at 128 registers: no spills, 4.23, 2 programs an SM;
# phases 4 x 8 x 64: 174 registers, 4.19, 1 an SM; shift 32 x 64: 172 registers, 5.21
CL_FUSED_STEPS = 7  # output rows a program walks (28 rows: 4 row blocks)
CL_FUSED_PHASES = 2  # "phases": output columns per group
CL_FUSED_BLOCK_M = 16  # "phases": groups per program
CL_FUSED_BLOCK_J = 32  # "shift": column pairs (input columns / SW) per program
CL_FUSED_BLOCK_C = 64
CL_FUSED_WARPS = 8
CL_FUSED_MAXNREG = 128  # registers per thread at most (ptxas maxnreg; None: ptxas's choice)
# global average pooling (whole unpadded plane, 1x1 output) by pooling's own reduction
# kernel instead of tensor_ops.reduce_tensor; (BLOCK_C, BLOCK_S, warps) per layout
GLOBAL_AVG_KERNEL = False
GLOBAL_AVG_NCHW = (4, 1024, 4)  # 4 planes x 1024 positions: N * C / 4 programs
GLOBAL_AVG_NHWC = (32, 256, 8)  # 32 channels x 256 positions: N * C / 32 programs


@triton.jit
def _floor_div(a, b):
    """Floor division for possibly negative a (b > 0); Triton's // truncates."""
    q = a // b
    return tl.where((a % b != 0) & (a < 0), q - 1, q)


@triton.jit
def _window(o, size_in, size_out, stride, pad, window, ADAPTIVE: tl.constexpr):
    """[start, end) of output o's window along one dim, before clipping to the input."""
    if ADAPTIVE:
        start = (o * size_in) // size_out
        end = ((o + 1) * size_in + size_out - 1) // size_out
    else:
        start = o * stride - pad
        end = start + window
    return start, end


@triton.jit
def _first_cover(i, size_in, size_out, stride, pad, window, ADAPTIVE: tl.constexpr):
    """The smallest output index whose window may cover input i along one dim."""
    if ADAPTIVE:
        first = (i * size_out) // size_in
    else:
        first = _floor_div(i + pad - window, stride) + 1
    return first


@triton.jit
def _clipped(start, window, size):
    """How many of [start, start + window) lie inside [0, size)."""
    return tl.minimum(start + window, size) - tl.maximum(start, 0)


@triton.jit
def _unravel3(p, D1, D2):
    d2 = p % D2
    p = p // D2
    return p // D1, p % D1, d2


@triton.jit
def _pool_start(MODE: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr):
    """(accumulator, first tap) of a [BLOCK_A, BLOCK_B] window fold before any tap: -inf
    for the max modes (0 and 3), 0 for the averages; tap -1."""
    if MODE == 0 or MODE == 3:
        acc = tl.full([BLOCK_A, BLOCK_B], float("-inf"), COMPUTE)
    else:
        acc = tl.zeros([BLOCK_A, BLOCK_B], COMPUTE)
    return acc, tl.full([BLOCK_A, BLOCK_B], -1, tl.int32)


@triton.jit
def _first_max_hit(v, acc, ok, PROPAGATE_NAN: tl.constexpr):
    """Where tap value v holds the maximum acc already found (ARG_EQ's second pass; when
    propagating, NaN is the maximum): walked last tap to first, the final hit is the first."""
    if PROPAGATE_NAN:
        hit = ok & ((v == acc) | (v != v))
    else:
        hit = ok & (v == acc)
    return hit


@triton.jit
def _take(acc, arg, v, ok, tap, MODE: tl.constexpr, PROPAGATE_NAN: tl.constexpr):
    """Fold one tap into the running max (and its first tap) or sum."""
    if MODE == 0 or MODE == 3:
        better = (v > acc) | ((arg < 0) & (v == acc))
        if PROPAGATE_NAN:
            better = better | ((v != v) & (acc == acc))
        better = better & ok
        acc = tl.where(better, v, acc)
        arg = tl.where(better, tap, arg)
    else:
        acc += tl.where(ok, v, 0.0)
    return acc, arg


@triton.jit
def _tile_ids(N, C, P, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """(n, positions, channels) of this program's tile (int32: under BIG the kernels widen
    their strides instead, common.wide)."""
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_C)
    tiles_p = tl.cdiv(P, BLOCK_P)
    c_blk = pid % tiles_c
    rest = pid // tiles_c
    p_blk = rest % tiles_p
    n = rest // tiles_p
    p = p_blk * BLOCK_P + tl.arange(0, BLOCK_P)
    c = c_blk * BLOCK_C + tl.arange(0, BLOCK_C)
    return n, p, c


# -- gather kernels (any strides) ---------------------------------------------------------
@triton.jit
def _gather_tap(acc, arg, x_ptr, base, kd, kh, kw, d0, d1, h0, h1, w0, w1, ID, IH, IW, xsd, xsh, xsw,
                p_mask, c_mask, KH: tl.constexpr, KW: tl.constexpr, MODE: tl.constexpr,
                PROPAGATE_NAN: tl.constexpr, COMPUTE: tl.constexpr):
    di = d0 + kd
    hi = h0 + kh
    wi = w0 + kw
    ok = ((di >= 0) & (di < ID) & (di < d1) & (hi >= 0) & (hi < IH) & (hi < h1)
          & (wi >= 0) & (wi < IW) & (wi < w1) & p_mask)
    mask = ok[:, None] & c_mask[None, :]
    v = tl.load(x_ptr + base + (di * xsd + hi * xsh + wi * xsw)[:, None], mask=mask, other=0.0).to(COMPUTE)
    return _take(acc, arg, v, mask, (kd * KH + kh) * KW + kw, MODE, PROPAGATE_NAN)


@triton.jit
def _pool_forward_kernel(x_ptr, y_ptr, arg_ptr, N, C, ID, IH, IW, OD, OH, OW,
                         # strides: x, y, and the first-maximum taps (arg)
                         xsn, xsc, xsd, xsh, xsw, ysn, ysc, ysd, ysh, ysw, asn, asc, asd, ash, asw,
                         SD, SH, SW, PD, PH, PW, alpha: tl.float64, beta: tl.float64,
                         # window: KD x KH x KW taps (adaptive: the largest bin)
                         KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, UNROLL: tl.constexpr,
                         MODE: tl.constexpr, ADAPTIVE: tl.constexpr, PROPAGATE_NAN: tl.constexpr,
                         STORE_ARG: tl.constexpr, STORE_Y: tl.constexpr, HAS_BETA: tl.constexpr,
                         BIG: tl.constexpr, COMPUTE: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """y = alpha * pool(x) + beta * y; with STORE_ARG, the first maximum's tap per output
    (row-major within the KD x KH x KW box starting at the window's start)."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        xsn, xsc, xsd, xsh, xsw = wide((xsn, xsc, xsd, xsh, xsw))
        ysn, ysc, ysd, ysh, ysw = wide((ysn, ysc, ysd, ysh, ysw))
        asn, asc, asd, ash, asw = wide((asn, asc, asd, ash, asw))
    # map the program to [BLOCK_P outputs, BLOCK_C channels] and to each output's window
    P = OD * OH * OW
    n, p, c = _tile_ids(N, C, P, BLOCK_P, BLOCK_C)
    p_mask = p < P
    c_mask = c < C
    od, oh, ow = _unravel3(p, OH, OW)
    d0, d1 = _window(od, ID, OD, SD, PD, KD, ADAPTIVE)
    h0, h1 = _window(oh, IH, OH, SH, PH, KH, ADAPTIVE)
    w0, w1 = _window(ow, IW, OW, SW, PW, KW, ADAPTIVE)
    base = n * xsn + c[None, :] * xsc
    acc, arg = _pool_start(MODE, COMPUTE, BLOCK_P, BLOCK_C)
    # the taps: unrolled for small windows, so all their loads are in flight together
    if UNROLL:
        for kd in tl.static_range(KD):
            for kh in tl.static_range(KH):
                for kw in tl.static_range(KW):
                    acc, arg = _gather_tap(acc, arg, x_ptr, base, kd, kh, kw, d0, d1, h0, h1, w0, w1, ID, IH, IW,
                                           xsd, xsh, xsw, p_mask, c_mask, KH, KW, MODE, PROPAGATE_NAN, COMPUTE)
    else:
        for kd in range(KD):
            for kh in range(KH):
                for kw in range(KW):
                    acc, arg = _gather_tap(acc, arg, x_ptr, base, kd, kh, kw, d0, d1, h0, h1, w0, w1, ID, IH, IW,
                                           xsd, xsh, xsw, p_mask, c_mask, KH, KW, MODE, PROPAGATE_NAN, COMPUTE)
    # store the taps and/or y
    out_mask = p_mask[:, None] & c_mask[None, :]
    if STORE_ARG:
        a_off = n * asn + c[None, :] * asc + (od * asd + oh * ash + ow * asw)[:, None]
        tl.store(arg_ptr + a_off, arg.to(arg_ptr.dtype.element_ty), mask=out_mask)
    if STORE_Y:
        if MODE == 1:
            acc = acc / (KD * KH * KW)
        elif MODE == 2:
            count = (_clipped(d0, d1 - d0, ID) * _clipped(h0, h1 - h0, IH) * _clipped(w0, w1 - w0, IW))
            acc = acc / tl.maximum(count, 1).to(COMPUTE)[:, None]  # 1: masked-off lanes
        y_off = n * ysn + c[None, :] * ysc + (od * ysd + oh * ysh + ow * ysw)[:, None]
        out = acc * alpha
        if HAS_BETA:
            out += tl.load(y_ptr + y_off, mask=out_mask, other=0.0).to(COMPUTE) * beta
        tl.store(y_ptr + y_off, out.to(y_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _scatter_tap(acc, dy_ptr, arg_ptr, g_base, a_base, td, th, tw, fd, fh, fw, di, hi, wi,
                 ID, IH, IW, OD, OH, OW, gsd, gsh, gsw, asd, ash, asw, SD, SH, SW, PD, PH, PW, p_mask, c_mask,
                 KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, MODE: tl.constexpr,
                 ADAPTIVE: tl.constexpr, COMPUTE: tl.constexpr):
    """Add the gradient of covering output (fd + td, fh + th, fw + tw) where it reaches."""
    od = fd + td
    oh = fh + th
    ow = fw + tw
    d0, d1 = _window(od, ID, OD, SD, PD, KD, ADAPTIVE)
    h0, h1 = _window(oh, IH, OH, SH, PH, KH, ADAPTIVE)
    w0, w1 = _window(ow, IW, OW, SW, PW, KW, ADAPTIVE)
    ok = ((od >= 0) & (od < OD) & (d0 <= di) & (di < d1) & (oh >= 0) & (oh < OH) & (h0 <= hi) & (hi < h1)
          & (ow >= 0) & (ow < OW) & (w0 <= wi) & (wi < w1) & p_mask)
    mask = ok[:, None] & c_mask[None, :]
    g = tl.load(dy_ptr + g_base + (od * gsd + oh * gsh + ow * gsw)[:, None], mask=mask, other=0.0).to(COMPUTE)
    if MODE == 0 or MODE == 3:
        tap = ((di - d0) * KH + (hi - h0)) * KW + (wi - w0)
        a = tl.load(arg_ptr + a_base + (od * asd + oh * ash + ow * asw)[:, None], mask=mask, other=0).to(tl.int32)
        acc += tl.where(a == tap[:, None], g, 0.0)
    elif MODE == 1:
        acc += g / (KD * KH * KW)
    else:
        count = _clipped(d0, d1 - d0, ID) * _clipped(h0, h1 - h0, IH) * _clipped(w0, w1 - w0, IW)
        acc += g / tl.maximum(count, 1).to(COMPUTE)[:, None]  # 1: masked-off windows
    return acc


@triton.jit
def _pool_backward_kernel(dy_ptr, arg_ptr, dx_ptr, N, C, ID, IH, IW, OD, OH, OW,
                          # strides: dy, the first-maximum taps (arg), dx
                          gsn, gsc, gsd, gsh, gsw, asn, asc, asd, ash, asw, dsn, dsc, dsd, dsh, dsw,
                          SD, SH, SW, PD, PH, PW, alpha: tl.float64, beta: tl.float64,
                          # window and the most outputs covering one input along each dim
                          KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                          TD: tl.constexpr, TH: tl.constexpr, TW: tl.constexpr, UNROLL: tl.constexpr,
                          MODE: tl.constexpr, ADAPTIVE: tl.constexpr, HAS_BETA: tl.constexpr,
                          BIG: tl.constexpr, COMPUTE: tl.constexpr,
                          BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx = alpha * (sum over the outputs covering each input) + beta * dx."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        gsn, gsc, gsd, gsh, gsw = wide((gsn, gsc, gsd, gsh, gsw))
        asn, asc, asd, ash, asw = wide((asn, asc, asd, ash, asw))
        dsn, dsc, dsd, dsh, dsw = wide((dsn, dsc, dsd, dsh, dsw))
    # map the program to [BLOCK_P inputs, BLOCK_C channels] and each input's first cover
    P = ID * IH * IW
    n, p, c = _tile_ids(N, C, P, BLOCK_P, BLOCK_C)
    p_mask = p < P
    c_mask = c < C
    di, hi, wi = _unravel3(p, IH, IW)
    fd = _first_cover(di, ID, OD, SD, PD, KD, ADAPTIVE)
    fh = _first_cover(hi, IH, OH, SH, PH, KH, ADAPTIVE)
    fw = _first_cover(wi, IW, OW, SW, PW, KW, ADAPTIVE)
    acc = tl.zeros([BLOCK_P, BLOCK_C], COMPUTE)
    g_base = n * gsn + c[None, :] * gsc
    a_base = n * asn + c[None, :] * asc
    # the covering outputs
    if UNROLL:
        for td in tl.static_range(TD):
            for th in tl.static_range(TH):
                for tw in tl.static_range(TW):
                    acc = _scatter_tap(acc, dy_ptr, arg_ptr, g_base, a_base, td, th, tw, fd, fh, fw, di, hi, wi,
                                       ID, IH, IW, OD, OH, OW, gsd, gsh, gsw, asd, ash, asw, SD, SH, SW, PD, PH, PW,
                                       p_mask, c_mask, KD, KH, KW, MODE, ADAPTIVE, COMPUTE)
    else:
        for td in range(TD):
            for th in range(TH):
                for tw in range(TW):
                    acc = _scatter_tap(acc, dy_ptr, arg_ptr, g_base, a_base, td, th, tw, fd, fh, fw, di, hi, wi,
                                       ID, IH, IW, OD, OH, OW, gsd, gsh, gsw, asd, ash, asw, SD, SH, SW, PD, PH, PW,
                                       p_mask, c_mask, KD, KH, KW, MODE, ADAPTIVE, COMPUTE)
    # blend and store
    d_off = n * dsn + c[None, :] * dsc + (di * dsd + hi * dsh + wi * dsw)[:, None]
    out_mask = p_mask[:, None] & c_mask[None, :]
    out = acc * alpha
    if HAS_BETA:
        out += tl.load(dx_ptr + d_off, mask=out_mask, other=0.0).to(COMPUTE) * beta
    tl.store(dx_ptr + d_off, out.to(dx_ptr.dtype.element_ty), mask=out_mask)


# -- row kernels (W contiguous, W stride 1 or 2) --------------------------------------------
@triton.jit
def _rows(r, C, D, H):
    """Row r of the (N, C, D, H) rows -> (n, c, d, h) (int32, as _tile_ids)."""
    h = r % H
    r = r // H
    d = r % D
    r = r // D
    c = r % C
    n = r // C
    return n, c, d, h


@triton.jit
def _row_tap(x_ptr, row, row_ok, ow, IW, Q: tl.constexpr, PHASE: tl.constexpr, SW: tl.constexpr,
             BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    """x[row, SW * (ow + Q) + PHASE] for a [BLOCK_R, BLOCK_W] tile: with SW == 2 one
    contiguous load of the 2 * BLOCK_W values from column 2 * (ow[0] + Q), split into
    its even and odd columns (16-byte loads when Q == 0 and the row is aligned)."""
    if SW == 2:
        col = (tl.program_id(1) * BLOCK_W + Q) * 2 + tl.arange(0, 2 * BLOCK_W)
        pair = tl.load(x_ptr + row[:, None] + col[None, :],
                       mask=row_ok[:, None] & ((col >= 0) & (col < IW))[None, :], other=0.0)
        even, odd = tl.split(tl.reshape(pair, [BLOCK_R, BLOCK_W, 2]))
        if PHASE == 0:
            v = even
        else:
            v = odd
    else:
        col = ow + Q
        v = tl.load(x_ptr + row[:, None] + col[None, :], mask=row_ok[:, None] & ((col >= 0) & (col < IW))[None, :],
                    other=0.0)
    return v


@triton.jit
def _pool_rows_forward_kernel(x_ptr, y_ptr, arg_ptr, R, C, ID, IH, OD, OH, IWv, OWv,
                              # row strides in units of VX (x), VY (y), VA (arg); W strides are 1
                              xsn, xsc, xsd, xsh, ysn, ysc, ysd, ysh, asn, asc, asd, ash,
                              SD, SH, PD, PH, alpha: tl.float64, beta: tl.float64,
                              KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SW: tl.constexpr,
                              PW: tl.constexpr, VX: tl.constexpr, VY: tl.constexpr, VA: tl.constexpr,
                              VIW: tl.constexpr, VOW: tl.constexpr, MODE: tl.constexpr,
                              PROPAGATE_NAN: tl.constexpr, STORE_ARG: tl.constexpr,
                              STORE_Y: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr,
                              COMPUTE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    """y over [BLOCK_R output rows (n, c, od, oh), BLOCK_W output columns]. Row strides
    and widths come divided by power-of-two factors (IW = IWv * VIW) so that Triton sees
    rows starting on 16-byte boundaries and vectorizes along W."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        xsn, xsc, xsd, xsh = wide((xsn, xsc, xsd, xsh))
        ysn, ysc, ysd, ysh = wide((ysn, ysc, ysd, ysh))
        asn, asc, asd, ash = wide((asn, asc, asd, ash))
    # map the program to output rows and columns
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ow = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    IW = IWv * VIW
    OW = OWv * VOW
    r_mask = r < R
    ow_mask = ow < OW
    n, c, od, oh = _rows(r, C, OD, OH)
    acc, arg = _pool_start(MODE, COMPUTE, BLOCK_R, BLOCK_W)
    # the taps: each input row of the window is one contiguous load (stride 2: split
    # into even and odd columns); a tap outside that pair reads the pair tile shifted by
    # whole pairs, again contiguous, so every load of a warp is one run of the row
    for kd in tl.static_range(KD):
        di = od * SD - PD + kd
        for kh in tl.static_range(KH):
            hi = oh * SH - PH + kh
            row_ok = r_mask & (di >= 0) & (di < ID) & (hi >= 0) & (hi < IH)
            row = (n * xsn + c * xsc + di * xsd + hi * xsh) * VX
            for kw in tl.static_range(KW):
                wi = ow * SW + (kw - PW)
                ok = row_ok[:, None] & ((wi >= 0) & (wi < IW) & ow_mask)[None, :]
                v = _row_tap(x_ptr, row, row_ok, ow, IW, (kw - PW) // SW, (kw - PW) % SW, SW, BLOCK_R, BLOCK_W)
                acc, arg = _take(acc, arg, v.to(COMPUTE), ok, (kd * KH + kh) * KW + kw, MODE, PROPAGATE_NAN)
    # store the taps and/or y
    out_mask = r_mask[:, None] & ow_mask[None, :]
    if STORE_ARG:
        a_row = (n * asn + c * asc + od * asd + oh * ash) * VA
        tl.store(arg_ptr + a_row[:, None] + ow[None, :], arg.to(arg_ptr.dtype.element_ty), mask=out_mask)
    if STORE_Y:
        if MODE == 1:
            acc = acc / (KD * KH * KW)
        elif MODE == 2:
            rows = _clipped(od * SD - PD, KD, ID) * _clipped(oh * SH - PH, KH, IH)
            cols = _clipped(ow * SW - PW, KW, IW)
            acc = acc / tl.maximum(rows[:, None] * cols[None, :], 1).to(COMPUTE)  # 1: masked-off lanes
        y_off = ((n * ysn + c * ysc + od * ysd + oh * ysh) * VY)[:, None] + ow[None, :]
        out = acc * alpha
        if HAS_BETA:
            out += tl.load(y_ptr + y_off, mask=out_mask, other=0.0).to(COMPUTE) * beta
        tl.store(y_ptr + y_off, out.to(y_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _pool_rows_backward_kernel(dy_ptr, arg_ptr, dx_ptr, R, C, ID, IH, OD, OH, IWv, OWv,
                               # row strides in units of VG (dy), VA (arg), VD (dx); W strides are 1
                               gsn, gsc, gsd, gsh, asn, asc, asd, ash, dsn, dsc, dsd, dsh,
                               SD, SH, PD, PH, alpha: tl.float64, beta: tl.float64,
                               KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SW: tl.constexpr,
                               PW: tl.constexpr, TD: tl.constexpr, TH: tl.constexpr,
                               T_LO: tl.constexpr, T_HI: tl.constexpr,
                               VG: tl.constexpr, VA: tl.constexpr, VD: tl.constexpr,
                               VIW: tl.constexpr, VOW: tl.constexpr, MODE: tl.constexpr, HAS_BETA: tl.constexpr,
                               BIG: tl.constexpr,
                               COMPUTE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    """dx over [BLOCK_R input rows (n, c, id, ih), SW * BLOCK_W input columns]: column
    SW * j + a is covered by outputs j + t, t in [T_LO, T_HI], at tap kw = a + PW - SW * t;
    each phase a accumulates apart and the phases are interleaved before the store."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        gsn, gsc, gsd, gsh = wide((gsn, gsc, gsd, gsh))
        asn, asc, asd, ash = wide((asn, asc, asd, ash))
        dsn, dsc, dsd, dsh = wide((dsn, dsc, dsd, dsh))
    # map the program to input rows and column groups
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    j = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    IW = IWv * VIW
    OW = OWv * VOW
    r_mask = r < R
    n, c, di, hi = _rows(r, C, ID, IH)
    fd = _floor_div(di + PD - KD, SD) + 1
    fh = _floor_div(hi + PH - KH, SH) + 1
    acc0 = tl.zeros([BLOCK_R, BLOCK_W], COMPUTE)
    acc1 = tl.zeros([BLOCK_R, BLOCK_W], COMPUTE)
    # the covering outputs: rows (td, th), then columns j + t
    for td in tl.static_range(TD):
        od = fd + td
        kd = di - (od * SD - PD)
        for th in tl.static_range(TH):
            oh = fh + th
            kh = hi - (oh * SH - PH)
            row_ok = (r_mask & (od >= 0) & (od < OD) & (kd >= 0) & (kd < KD)
                      & (oh >= 0) & (oh < OH) & (kh >= 0) & (kh < KH))
            g_row = (n * gsn + c * gsc + od * gsd + oh * gsh) * VG
            a_row = (n * asn + c * asc + od * asd + oh * ash) * VA
            tap_row = (kd * KH + kh) * KW
            if MODE == 2:
                rows = _clipped(od * SD - PD, KD, ID) * _clipped(oh * SH - PH, KH, IH)
            for t in tl.static_range(T_LO, T_HI + 1):
                ow = j + t
                mask = row_ok[:, None] & ((ow >= 0) & (ow < OW))[None, :]
                g = tl.load(dy_ptr + g_row[:, None] + ow[None, :], mask=mask, other=0.0).to(COMPUTE)
                if MODE == 0 or MODE == 3:
                    a = tl.load(arg_ptr + a_row[:, None] + ow[None, :], mask=mask, other=0).to(tl.int32)
                elif MODE == 1:
                    g = g / (KD * KH * KW)
                else:
                    cols = _clipped(ow * SW - PW, KW, IW)
                    g = g / tl.maximum(rows[:, None] * cols[None, :], 1).to(COMPUTE)
                for phase in tl.static_range(SW):
                    kw = phase + PW - SW * t
                    if kw >= 0 and kw < KW:
                        if MODE == 0 or MODE == 3:
                            part = tl.where(a == (tap_row + kw)[:, None], g, 0.0)
                        else:
                            part = g
                        if phase == 0:
                            acc0 += part
                        else:
                            acc1 += part
    # interleave the phases, blend and store
    if SW == 2:
        out = tl.reshape(tl.join(acc0, acc1), [BLOCK_R, 2 * BLOCK_W])
        col = tl.program_id(1) * (2 * BLOCK_W) + tl.arange(0, 2 * BLOCK_W)
    else:
        out = acc0
        col = j
    mask = r_mask[:, None] & (col < IW)[None, :]
    d_off = ((n * dsn + c * dsc + di * dsd + hi * dsh) * VD)[:, None] + col[None, :]
    out = out * alpha
    if HAS_BETA:
        out += tl.load(dx_ptr + d_off, mask=mask, other=0.0).to(COMPUTE) * beta
    tl.store(dx_ptr + d_off, out.to(dx_ptr.dtype.element_ty), mask=mask)


# -- NCHW column groups (W contiguous, W and H strides 1 or 2, no window along D) ----------
# The NCHW lane forward's tiles are [BLOCK_P lanes, BLOCK_G column groups]. A group is 8
# contiguous input columns, one 16-byte load for 16-bit types, so 8 // SW output columns;
# a tap is that vector split into its SW column phases and shifted by whole outputs, the
# one column it lacks (left or right of the group) read by a second, scalar load.
@triton.jit
def _split4(v, BLOCK_P: tl.constexpr, BLOCK_G: tl.constexpr):
    """The 4 columns of a [BLOCK_P, BLOCK_G, 4] tile (register moves, no data exchange)."""
    even, odd = tl.split(tl.reshape(v, [BLOCK_P, BLOCK_G, 2, 2]))
    v0, v2 = tl.split(even)
    v1, v3 = tl.split(odd)
    return v0, v1, v2, v3


@triton.jit
def _join4(v0, v1, v2, v3, BLOCK_P: tl.constexpr, BLOCK_G: tl.constexpr):
    """The inverse of _split4."""
    return tl.reshape(tl.join(tl.join(v0, v2), tl.join(v1, v3)), [BLOCK_P, BLOCK_G, 4])


@triton.jit
def _phase(v, A: tl.constexpr, SW: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_G: tl.constexpr):
    """Columns SW * m + A of a [BLOCK_P, BLOCK_G, 8] tile: [BLOCK_P, BLOCK_G, 8 // SW]."""
    if SW == 2:
        even, odd = tl.split(tl.reshape(v, [BLOCK_P, BLOCK_G, 4, 2]))
        if A == 0:
            v = even
        else:
            v = odd
    return v


@triton.jit
def _shift(v, lo, hi, T: tl.constexpr, O: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_G: tl.constexpr):
    """[BLOCK_P, BLOCK_G, O] tile of outputs m + T (T in -1, 0, 1): the group's own values
    shifted by one, lo ([BLOCK_P, BLOCK_G], column -1) or hi (column O) entering."""
    if T != 0:
        if O == 4:
            v0, v1, v2, v3 = _split4(v, BLOCK_P, BLOCK_G)
            if T < 0:
                v = _join4(lo, v0, v1, v2, BLOCK_P, BLOCK_G)
            else:
                v = _join4(v1, v2, v3, hi, BLOCK_P, BLOCK_G)
        else:
            even, odd = tl.split(tl.reshape(v, [BLOCK_P, BLOCK_G, 4, 2]))
            v0, v2, v4, v6 = _split4(even, BLOCK_P, BLOCK_G)
            v1, v3, v5, v7 = _split4(odd, BLOCK_P, BLOCK_G)
            if T < 0:
                even = _join4(lo, v1, v3, v5, BLOCK_P, BLOCK_G)
                odd = _join4(v0, v2, v4, v6, BLOCK_P, BLOCK_G)
            else:
                even = _join4(v1, v3, v5, v7, BLOCK_P, BLOCK_G)
                odd = _join4(v2, v4, v6, hi, BLOCK_P, BLOCK_G)
            v = tl.reshape(tl.join(even, odd), [BLOCK_P, BLOCK_G, 8])
    return v


@triton.jit
def _nchw_tap(v, lo, hi, kw: tl.constexpr, PW: tl.constexpr, SW: tl.constexpr, O: tl.constexpr,
              BLOCK_P: tl.constexpr, BLOCK_G: tl.constexpr):
    """Tap kw of the group's O outputs: column SW * (m + T) + A of the group's input vector,
    T = floor((kw - PW) / SW), A = (kw - PW) mod SW (written on kw - PW + SW >= 0: the
    interpreter's static_range counters divide like C); the odd phase shifts in column -1 only."""
    if (kw - PW + SW) % SW == 0:
        tap = _shift(_phase(v, 0, SW, BLOCK_P, BLOCK_G), lo, hi, (kw - PW + SW) // SW - 1, O, BLOCK_P, BLOCK_G)
    else:
        tap = _shift(_phase(v, 1, SW, BLOCK_P, BLOCK_G), lo, lo, (kw - PW + SW) // SW - 1, O, BLOCK_P, BLOCK_G)
    return tap


# NCHW block kernels removed, mostly slower (H200 11-30, TB/s max/avg: fwd 1.89/1.91 vs 2.46/2.38,
# bwd 1.52/1.44 vs the lane backward's 1.39 and the row kernels' 2.16)


# -- NCHW lane forward (NCHW_LANE_KERNELS): the column groups above; a lane of the tile is
# one (plane, output row) pair, lanes in memory order, so a program reads one contiguous
# run of rows and stores once at its end: every load comes before the first store (a store
# between loads keeps ptxas from issuing the later loads early, as it might alias them).
# The row two windows share (3x3/2) is read by both lanes (the second time from L1), not
# carried.
@triton.jit
def _nchw_lane_ids(TILES_G, LANES, STEPS, C, D, BLOCK_L: tl.constexpr):
    """(column-group block, n, c, d, row or step, lanes in range) of this program's lanes
    (lane = plane * STEPS + row); int32 index math per lane, not per element (under BIG the
    kernels widen their strides, common.wide)."""
    pid = tl.program_id(0)
    lane = (pid // TILES_G) * BLOCK_L + tl.arange(0, BLOCK_L)
    k = lane % STEPS
    p = lane // STEPS
    d = p % D
    nc = p // D
    n = nc // C
    return pid % TILES_G, n, nc % C, d, k, lane < LANES


@triton.jit
def _max_num(a, b, PROPAGATE_NAN: tl.constexpr, INTERP: tl.constexpr):
    """max ignoring NaN where either is a number (IEEE maxNum), or letting it through. On
    the GPU tl.maximum is maxNum (max.f32, max.bf16x2: one instruction, packed for 16-bit
    types); the interpreter's propagates NaN, so it takes the select."""
    if PROPAGATE_NAN:
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    elif INTERP:
        return tl.where((b > a) | (a != a), b, a)
    else:
        return tl.maximum(a, b)


@triton.jit
def _nchw_row_load(x_ptr, row, row_ok, g, IW, KW: tl.constexpr, SW: tl.constexpr, PW: tl.constexpr,
                   FILL: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_G: tl.constexpr):
    """One input row for the groups g, as COMPUTE values: the group's 8 columns (one
    vector load) and the columns left (PW > 0) and right of it (scalar loads); FILL where
    masked."""
    col = g[:, None] * 8 + tl.arange(0, 8)[None, :]
    v = tl.load(x_ptr + row[:, None, None] + col[None, :, :], mask=row_ok[:, None, None] & (col < IW)[None, :, :],
                other=FILL).to(COMPUTE)
    lo = tl.full([BLOCK_L, BLOCK_G], FILL, COMPUTE)  # placeholders when no tap reaches out of the group
    hi = lo
    if PW > 0:
        c_lo = g * 8 - 1
        lo = tl.load(x_ptr + row[:, None] + c_lo[None, :], mask=row_ok[:, None] & ((c_lo >= 0) & (c_lo < IW))[None, :],
                     other=FILL).to(COMPUTE)
    if KW - 1 - PW >= SW:
        c_hi = g * 8 + 8
        hi = tl.load(x_ptr + row[:, None] + c_hi[None, :], mask=row_ok[:, None] & (c_hi < IW)[None, :],
                     other=FILL).to(COMPUTE)
    return v, lo, hi


@triton.jit
def _pool_nchw_lane_forward_kernel(x_ptr, y_ptr, arg_ptr, LANES, C, D, IH, OH, IWv, OWv, TILES_G,
                                   # plane and row strides in units of VX (x), VY (y), VA (arg); W strides are 1
                                   xsn, xsc, xsd, xsh, ysn, ysc, ysd, ysh, asn, asc, asd, ash,
                                   alpha: tl.float64, beta: tl.float64,
                                   KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                                   PH: tl.constexpr, PW: tl.constexpr, VX: tl.constexpr, VY: tl.constexpr,
                                   VA: tl.constexpr, VIW: tl.constexpr, VOW: tl.constexpr, MODE: tl.constexpr,
                                   PROPAGATE_NAN: tl.constexpr, STORE_ARG: tl.constexpr, STORE_Y: tl.constexpr,
                                   HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                                   INTERP: tl.constexpr, ONE_ALPHA: tl.constexpr,
                                   BLOCK_L: tl.constexpr, BLOCK_G: tl.constexpr):
    """y over [BLOCK_L (plane, output row) lanes, BLOCK_G * 8 // SW output columns]: the
    KH input rows of each lane combined down, then the KW taps across."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        xsn, xsc, xsd, xsh = wide((xsn, xsc, xsd, xsh))
        ysn, ysc, ysd, ysh = wide((ysn, ysc, ysd, ysh))
        asn, asc, asd, ash = wide((asn, asc, asd, ash))
    O: tl.constexpr = 8 // SW
    # map the program to lanes and column groups
    pid_g, n, c, d, oh, l_ok = _nchw_lane_ids(TILES_G, LANES, OH, C, D, BLOCK_L)
    g = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)
    IW = IWv * VIW
    OW = OWv * VOW
    ow = g[:, None] * O + tl.arange(0, O)[None, :]
    iw_tap0 = ow * SW - PW
    x_row0 = n * xsn + c * xsc + d * xsd + (oh * SH - PH) * xsh  # the window's first input row
    if STORE_ARG:
        # the first-maximum taps: the window's maximum M (rows combined down, then across),
        # then the first tap (row-major) equal to M, or, propagating, the first NaN; found
        # walking the taps last to first (the rows' loads repeat the first pass's and are
        # merged with them). Masked taps read NaN, which neither holds M nor changes it
        # (maxNum); propagating they read -inf and are masked explicitly.
        AFILL: tl.constexpr = float("-inf") if PROPAGATE_NAN else float("nan")
        for kh in tl.static_range(KH):
            ih = oh * SH - PH + kh
            v, lo, hi = _nchw_row_load(x_ptr, (x_row0 + kh * xsh) * VX, l_ok & (ih >= 0) & (ih < IH), g, IW, KW, SW,
                                       PW, AFILL, COMPUTE, BLOCK_L, BLOCK_G)
            if kh == 0:
                cv, clo, chi = v, lo, hi
            else:
                cv = _max_num(cv, v, PROPAGATE_NAN, INTERP)
                clo = _max_num(clo, lo, PROPAGATE_NAN, INTERP)
                chi = _max_num(chi, hi, PROPAGATE_NAN, INTERP)
        acc = _nchw_tap(cv, clo, chi, 0, PW, SW, O, BLOCK_L, BLOCK_G)
        for kw in tl.static_range(1, KW):
            acc = _max_num(acc, _nchw_tap(cv, clo, chi, kw, PW, SW, O, BLOCK_L, BLOCK_G), PROPAGATE_NAN, INTERP)
        arg = tl.full([BLOCK_L, BLOCK_G, O], -1, tl.int32)
        for kk in tl.static_range(KH):
            kh = KH - 1 - kk
            ih = oh * SH - PH + kh
            row_ok = l_ok & (ih >= 0) & (ih < IH)
            v, lo, hi = _nchw_row_load(x_ptr, (x_row0 + kh * xsh) * VX, row_ok, g, IW, KW, SW, PW, AFILL, COMPUTE,
                                       BLOCK_L, BLOCK_G)
            for jj in tl.static_range(KW):
                kw = KW - 1 - jj
                tap = _nchw_tap(v, lo, hi, kw, PW, SW, O, BLOCK_L, BLOCK_G)
                if PROPAGATE_NAN:
                    iw = iw_tap0 + kw
                    hit = ((tap == acc) | (tap != tap)) & (row_ok[:, None, None] & ((iw >= 0) & (iw < IW))[None, :, :])
                else:
                    hit = tap == acc
                arg = tl.where(hit, kh * KW + kw, arg)
    else:
        # a value alone: the window's rows combined down first (max in x's type, packed
        # for 16-bit types; sums in COMPUTE), then the KW taps across in COMPUTE (column
        # splits move whole registers), once per output row rather than once per input row
        IS_MAX: tl.constexpr = MODE == 0 or MODE == 3
        FILL: tl.constexpr = float("-inf") if IS_MAX else 0.0
        ROW_TYPE: tl.constexpr = x_ptr.dtype.element_ty if IS_MAX else COMPUTE
        for kh in tl.static_range(KH):
            ih = oh * SH - PH + kh
            v, lo, hi = _nchw_row_load(x_ptr, (x_row0 + kh * xsh) * VX, l_ok & (ih >= 0) & (ih < IH), g, IW, KW, SW,
                                       PW, FILL, ROW_TYPE, BLOCK_L, BLOCK_G)
            if kh == 0:
                cv, clo, chi = v, lo, hi
            elif IS_MAX:
                cv = _max_num(cv, v, PROPAGATE_NAN, INTERP)
                clo = _max_num(clo, lo, PROPAGATE_NAN, INTERP)
                chi = _max_num(chi, hi, PROPAGATE_NAN, INTERP)
            else:
                cv += v
                clo += lo
                chi += hi
        cv, clo, chi = cv.to(COMPUTE), clo.to(COMPUTE), chi.to(COMPUTE)
        acc = tl.full([BLOCK_L, BLOCK_G, O], FILL, COMPUTE)
        for kw in tl.static_range(KW):
            tap = _nchw_tap(cv, clo, chi, kw, PW, SW, O, BLOCK_L, BLOCK_G)
            if IS_MAX:
                acc = _max_num(acc, tap, PROPAGATE_NAN, INTERP)
            else:
                acc += tap
    # store the taps and/or y
    out_mask = l_ok[:, None, None] & (ow < OW)[None, :, :]
    if STORE_ARG:
        a_off = ((n * asn + c * asc + d * asd + oh * ash) * VA)[:, None, None] + ow[None, :, :]
        tl.store(arg_ptr + a_off, arg.to(arg_ptr.dtype.element_ty), mask=out_mask)
    if STORE_Y:
        if MODE == 1:
            out = acc / (KH * KW)
        elif MODE == 2:
            rows = _clipped(oh * SH - PH, KH, IH)
            out = acc / tl.maximum(rows[:, None, None] * _clipped(iw_tap0, KW, IW)[None, :, :], 1).to(COMPUTE)
        else:
            out = acc
        y_off = ((n * ysn + c * ysc + d * ysd + oh * ysh) * VY)[:, None, None] + ow[None, :, :]
        if not ONE_ALPHA:
            out = out * alpha
        if HAS_BETA:
            out += tl.load(y_ptr + y_off, mask=out_mask, other=0.0).to(COMPUTE) * beta
        tl.store(y_ptr + y_off, out.to(y_ptr.dtype.element_ty), mask=out_mask)


# -- channels-last row kernels (C contiguous, no window along D) ----------------------------
@triton.jit
def _cl_tile_ids(C, D, TILES_H, TILES_W, BLOCK_C: tl.constexpr):
    """(n, d, row block, column block, channels) of this program; channel blocks vary
    fastest, then columns, then rows, so neighbouring programs share halo rows in L2.
    int32 (under BIG the kernels widen their strides instead, common.wide)."""
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_C)
    c_blk = pid % tiles_c
    rest = pid // tiles_c
    w_blk = rest % TILES_W
    rest = rest // TILES_W
    h_blk = rest % TILES_H
    nd = rest // TILES_H
    c = c_blk * BLOCK_C + tl.arange(0, BLOCK_C)
    return nd // D, nd % D, h_blk, w_blk, c


@triton.jit
def _cl_row_fold(x_ptr, row, row_ok, ow, c, c_mask, IW, xsw, KW: tl.constexpr, SW: tl.constexpr,
                 PW: tl.constexpr, MODE: tl.constexpr, PROPAGATE_NAN: tl.constexpr, MAX_ONLY: tl.constexpr,
                 PACKED: tl.constexpr, ARG_EQ: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_W: tl.constexpr,
                 BLOCK_C: tl.constexpr):
    """Fold the KW horizontal taps of one input row: [BLOCK_W, BLOCK_C] (value, first tap
    kw or -1); each tap is one load of channel runs (16-byte vectors along C). MAX_ONLY
    (no taps wanted): a plain maximum in x's own type (exact; packed bf16x2/f16x2 on sm_90).
    ARG_EQ: the maximum first, then the first tap equal to it (a compare and a select per
    tap instead of the running rule's compares, predicate logic and two selects)."""
    acc, arg = _pool_start(MODE, COMPUTE, BLOCK_W, BLOCK_C)
    if MAX_ONLY:  # a plain maximum in x's own type
        acc = tl.full([BLOCK_W, BLOCK_C], float("-inf"), x_ptr.dtype.element_ty)
    for kw in tl.static_range(KW):
        iw = ow * SW - PW + kw
        ok = ((iw >= 0) & (iw < IW))[:, None] & c_mask[None, :] & row_ok
        if MAX_ONLY:
            v = tl.load(x_ptr + row + (iw * xsw)[:, None] + c[None, :], mask=ok, other=float("-inf"))
            acc = _max2(acc, v, PROPAGATE_NAN, PACKED)
        elif ARG_EQ and (MODE == 0 or MODE == 3):
            v = tl.load(x_ptr + row + (iw * xsw)[:, None] + c[None, :], mask=ok, other=float("-inf")).to(COMPUTE)
            acc = _max2(acc, v, PROPAGATE_NAN, 0)
        else:
            v = tl.load(x_ptr + row + (iw * xsw)[:, None] + c[None, :], mask=ok, other=0.0).to(COMPUTE)
            acc, arg = _take(acc, arg, v, ok, kw, MODE, PROPAGATE_NAN)
    if ARG_EQ and (MODE == 0 or MODE == 3) and not MAX_ONLY:
        # the first tap holding the row's maximum (or, propagating, its first NaN), found
        # last to first; the loads repeat the ones above (the compiler reuses their values)
        for kk in tl.static_range(KW):
            kw = KW - 1 - kk
            iw = ow * SW - PW + kw
            ok = ((iw >= 0) & (iw < IW))[:, None] & c_mask[None, :] & row_ok
            v = tl.load(x_ptr + row + (iw * xsw)[:, None] + c[None, :], mask=ok, other=float("-inf")).to(COMPUTE)
            arg = tl.where(_first_max_hit(v, acc, ok, PROPAGATE_NAN), kw, arg)
    return acc, arg


@triton.jit
def _max2(a, b, PROPAGATE_NAN: tl.constexpr, PACKED: tl.constexpr):
    """max that ignores NaN (IEEE maxNum: the taps' rule without propagation) or lets it
    through. PACKED (1 bf16, 2 f16; GPU only): one max.bf16x2 / max.f16x2 per two values
    instead of two conversions and an FMNMX each."""
    if PACKED == 1:
        if PROPAGATE_NAN:
            return tl.inline_asm_elementwise("max.NaN.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.bfloat16,
                                             is_pure=True, pack=2)
        else:
            return tl.inline_asm_elementwise("max.bf16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.bfloat16,
                                             is_pure=True, pack=2)
    elif PACKED == 2:
        if PROPAGATE_NAN:
            return tl.inline_asm_elementwise("max.NaN.f16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float16,
                                             is_pure=True, pack=2)
        else:
            return tl.inline_asm_elementwise("max.f16x2 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float16,
                                             is_pure=True, pack=2)
    elif PROPAGATE_NAN:
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    else:
        return tl.where(b > a, b, a)  # tl.maximum leaves NaN unspecified (the interpreter propagates it)


@triton.jit
def _cl_fold_rows(acc, arg, h, harg, kh, KW: tl.constexpr, MODE: tl.constexpr, PROPAGATE_NAN: tl.constexpr,
                  MAX_ONLY: tl.constexpr, PACKED: tl.constexpr):
    """Fold one input row's horizontal result into an output row: a later row wins only
    on a strictly larger value (or the first NaN), so the tap is the row-major first."""
    if MAX_ONLY:
        acc = _max2(acc, h, PROPAGATE_NAN, PACKED)
    elif MODE == 0 or MODE == 3:
        acc, arg = _take(acc, arg, h, harg >= 0, tl.where(harg >= 0, harg + kh * KW, -1), MODE, PROPAGATE_NAN)
    else:
        acc += h
    return acc, arg


@triton.jit
def _pool_cl_forward_kernel(x_ptr, y_ptr, arg_ptr, C, D, IH, IW, OH, OW, TILES_H, TILES_W,
                            # strides of N, D, H, W (the channel stride is 1): x, y, first-maximum taps
                            xsn, xsd, xsh, xsw, ysn, ysd, ysh, ysw, asn, asd, ash, asw,
                            alpha: tl.float64, beta: tl.float64,
                            KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                            PH: tl.constexpr, PW: tl.constexpr, MODE: tl.constexpr,
                            PROPAGATE_NAN: tl.constexpr, STORE_ARG: tl.constexpr, STORE_Y: tl.constexpr,
                            HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                            PACKED: tl.constexpr, ARG_EQ: tl.constexpr, ROWS: tl.constexpr,
                            BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """y over [ROWS output rows, BLOCK_W output columns, BLOCK_C channels] of one (n, d):
    each input row's KW taps fold once into a horizontal (value, tap) result, which the
    output rows whose windows hold that row fold in turn; with KH == SH + 1 the last row
    of an output is the first of the next and is kept in registers, not reloaded."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        xsn, xsd, xsh, xsw = wide((xsn, xsd, xsh, xsw))
        ysn, ysd, ysh, ysw = wide((ysn, ysd, ysh, ysw))
        asn, asd, ash, asw = wide((asn, asd, ash, asw))
    # map the program to its tile; the masks of columns and channels are shared by every row
    n, d, h_blk, w_blk, c = _cl_tile_ids(C, D, TILES_H, TILES_W, BLOCK_C)
    ow = w_blk * BLOCK_W + tl.arange(0, BLOCK_W)
    c_mask = c < C
    out_mask = (ow < OW)[:, None] & c_mask[None, :]
    x_base = n * xsn + d * xsd
    y_off = (n * ysn + d * ysd) + (ow * ysw)[:, None] + c[None, :]
    a_off = (n * asn + d * asd) + (ow * asw)[:, None] + c[None, :]
    if MODE == 2:
        iw0 = ow * SW - PW
        cols = (tl.minimum(iw0 + KW, IW) - tl.maximum(iw0, 0)).to(COMPUTE)
    CARRY: tl.constexpr = KH == SH + 1
    MAX_ONLY: tl.constexpr = (MODE == 0 or MODE == 3) and not STORE_ARG
    carried = tl.zeros([BLOCK_W, BLOCK_C], COMPUTE)
    carried_arg = tl.zeros([BLOCK_W, BLOCK_C], tl.int32)
    # the output rows in order, each folding its KH input rows
    for r in tl.static_range(ROWS):
        oh = h_blk * ROWS + r
        acc, arg = _pool_start(MODE, COMPUTE, BLOCK_W, BLOCK_C)
        if MAX_ONLY:  # a plain maximum in x's own type
            acc = tl.full([BLOCK_W, BLOCK_C], float("-inf"), x_ptr.dtype.element_ty)
        for kh in tl.static_range(KH):
            if CARRY and r > 0 and kh == 0:
                h = carried
                harg = carried_arg
            else:
                ih = oh * SH - PH + kh
                h, harg = _cl_row_fold(x_ptr, x_base + ih * xsh, (ih >= 0) & (ih < IH), ow, c, c_mask, IW, xsw,
                                       KW, SW, PW, MODE, PROPAGATE_NAN, MAX_ONLY, PACKED, ARG_EQ, COMPUTE,
                                       BLOCK_W, BLOCK_C)
            acc, arg = _cl_fold_rows(acc, arg, h, harg, kh, KW, MODE, PROPAGATE_NAN, MAX_ONLY, PACKED)
            if CARRY and kh == KH - 1:
                carried = h
                carried_arg = harg
        # store the taps and/or y
        mask = out_mask & (oh < OH)
        if STORE_ARG:
            tl.store(arg_ptr + a_off + oh * ash, arg.to(arg_ptr.dtype.element_ty), mask=mask)
        if STORE_Y:
            if MODE == 1:
                acc = acc / (KH * KW)
            elif MODE == 2:
                ih0 = oh * SH - PH
                rows = tl.minimum(ih0 + KH, IH) - tl.maximum(ih0, 0)
                acc = acc / tl.maximum(cols * rows.to(COMPUTE), 1.0)[:, None]  # 1: masked-off lanes
            out = acc.to(COMPUTE) * alpha
            if HAS_BETA:
                out += tl.load(y_ptr + y_off + oh * ysh, mask=mask, other=0.0).to(COMPUTE) * beta
            tl.store(y_ptr + y_off + oh * ysh, out.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _pool_cl_backward_kernel(dy_ptr, arg_ptr, dx_ptr, C, D, IH, IW, OH, OW, TILES_H, TILES_J,
                             # strides of N, D, H, W (the channel stride is 1): dy, first-maximum taps, dx
                             gsn, gsd, gsh, gsw, asn, asd, ash, asw, dsn, dsd, dsh, dsw,
                             alpha: tl.float64, beta: tl.float64,
                             KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                             PH: tl.constexpr, PW: tl.constexpr, Q_LO: tl.constexpr, Q_HI: tl.constexpr,
                             T_LO: tl.constexpr, T_HI: tl.constexpr, MODE: tl.constexpr,
                             HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                             ROWS: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx over [ROWS input rows, SW * BLOCK_J input columns, BLOCK_C channels] of one
    (n, d), written once. ROWS is a multiple of SH, so input row ROWS * h_blk + r is
    covered by output rows ROWS * h_blk / SH + q at the compile-time tap kh = r + PH - SH * q,
    and input column SW * j + a by output column j + t at kw = a + PW - SW * t; each
    column phase a is its own [BLOCK_J, BLOCK_C] tile (channel runs: no interleaving)."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        gsn, gsd, gsh, gsw = wide((gsn, gsd, gsh, gsw))
        asn, asd, ash, asw = wide((asn, asd, ash, asw))
        dsn, dsd, dsh, dsw = wide((dsn, dsd, dsh, dsw))
    # map the program to its tile
    n, d, h_blk, j_blk, c = _cl_tile_ids(C, D, TILES_H, TILES_J, BLOCK_C)
    j = j_blk * BLOCK_J + tl.arange(0, BLOCK_J)
    c_mask = c < C
    g_base = n * gsn + d * gsd
    a_base = n * asn + d * asd
    d_base = n * dsn + d * dsd
    oh0 = h_blk * (ROWS // SH)
    for r in tl.static_range(ROWS):
        ih = h_blk * ROWS + r
        acc0 = tl.zeros([BLOCK_J, BLOCK_C], COMPUTE)
        acc1 = tl.zeros([BLOCK_J, BLOCK_C], COMPUTE)
        # the covering outputs: rows oh0 + q, columns j + t
        for q in tl.static_range(Q_LO, Q_HI + 1):
            kh = r + PH - SH * q
            if kh >= 0 and kh < KH:
                oh = oh0 + q
                row_ok = (oh >= 0) & (oh < OH)
                if MODE == 2:
                    rows = tl.minimum(oh * SH - PH + KH, IH) - tl.maximum(oh * SH - PH, 0)
                for t in tl.static_range(T_LO, T_HI + 1):
                    ow = j + t
                    mask = ((ow >= 0) & (ow < OW))[:, None] & c_mask[None, :] & row_ok
                    g = tl.load(dy_ptr + g_base + oh * gsh + (ow * gsw)[:, None] + c[None, :], mask=mask,
                                other=0.0).to(COMPUTE)
                    if MODE == 0 or MODE == 3:
                        a = tl.load(arg_ptr + a_base + oh * ash + (ow * asw)[:, None] + c[None, :], mask=mask,
                                    other=0).to(tl.int32)
                    elif MODE == 1:
                        g = g / (KH * KW)
                    else:
                        iw0 = ow * SW - PW
                        cols = tl.minimum(iw0 + KW, IW) - tl.maximum(iw0, 0)
                        g = g / tl.maximum(cols * rows, 1).to(COMPUTE)[:, None]
                    for phase in tl.static_range(SW):
                        kw = phase + PW - SW * t
                        if kw >= 0 and kw < KW:
                            if MODE == 0 or MODE == 3:
                                part = tl.where(a == kh * KW + kw, g, 0.0)
                            else:
                                part = g
                            if phase == 0:
                                acc0 += part
                            else:
                                acc1 += part
        # blend and store each phase
        for phase in tl.static_range(SW):
            iw = j * SW + phase
            mask = (iw < IW)[:, None] & c_mask[None, :] & (ih < IH)
            off = d_base + ih * dsh + (iw * dsw)[:, None] + c[None, :]
            if phase == 0:
                out = acc0 * alpha
            else:
                out = acc1 * alpha
            if HAS_BETA:
                out += tl.load(dx_ptr + off, mask=mask, other=0.0).to(COMPUTE) * beta
            tl.store(dx_ptr + off, out.to(dx_ptr.dtype.element_ty), mask=mask)


# -- fused channels-last max backward (CL_FUSED_MAX_BWD) ---------------------------------
# One pass instead of two (taps forward, then the gather): a program walks a run of
# output rows a, recomputes each output's first-maximum tap from x with the forward's own
# folds (so the taps are the same bit for bit), and writes the dx rows [SH * a - PH,
# SH * (a + 1) - PH), covered by outputs a - 1 (carried from the step before) and a.
# Bytes: x and dy read once, dx written once; no tap buffer written and read back.
@triton.jit
def _cl_out_row_taps(x_ptr, dy_ptr, x_base, g_row, oh, ow, c, c_mask, IH, IW, OH, OW, xsh, xsw, gsw, top, top_arg,
                     KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr,
                     PW: tl.constexpr, PROPAGATE_NAN: tl.constexpr, ARG_EQ: tl.constexpr, CARRY: tl.constexpr,
                     COMPUTE: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """(first-maximum tap, dy, the last input row's fold) of outputs (oh, ow): [BLOCK_W,
    BLOCK_C] each; with CARRY the first input row's fold is (top, top_arg), not reloaded.
    dy is 0 where (oh, ow) is out of range, so such taps route nothing."""
    acc, arg = _pool_start(0, COMPUTE, BLOCK_W, BLOCK_C)
    for kh in tl.static_range(KH):
        if CARRY and kh == 0:
            h = top
            harg = top_arg
        else:
            ih = oh * SH - PH + kh
            h, harg = _cl_row_fold(x_ptr, x_base + ih * xsh, (ih >= 0) & (ih < IH), ow, c, c_mask, IW, xsw, KW, SW,
                                   PW, 0, PROPAGATE_NAN, False, 0, ARG_EQ, COMPUTE, BLOCK_W, BLOCK_C)
        acc, arg = _cl_fold_rows(acc, arg, h, harg, kh, KW, 0, PROPAGATE_NAN, False, 0)
    mask = ((ow >= 0) & (ow < OW))[:, None] & c_mask[None, :] & (oh >= 0) & (oh < OH)
    g = tl.load(dy_ptr + g_row + (ow * gsw)[:, None] + c[None, :], mask=mask, other=0.0).to(COMPUTE)
    return arg, g, h, harg


@triton.jit
def _cl_route(acc, arg, g, tap):
    """Add dy where the output's first maximum is tap (a compile-time number)."""
    return acc + tl.where(arg == tap, g, 0.0)


@triton.jit
def _cl_fused_tile(C, D, TILES_H, TILES_W, STEPS, A0, A1, xsn, xsd, gsn, gsd, dsn, dsd, EVEN_C: tl.constexpr,
                   BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """A fused backward program's tile, the same in both designs (_cl_fused_backward sizes
    the grid for it): (its column pairs j or groups m [BLOCK_W], channels, channel mask,
    the x, dy and dx offsets of its (n, d), its run of output rows [a0, a1))."""
    n, d, h_blk, w_blk, c = _cl_tile_ids(C, D, TILES_H, TILES_W, BLOCK_C)
    w = w_blk * BLOCK_W + tl.arange(0, BLOCK_W)
    if EVEN_C:
        c_mask = tl.full([BLOCK_C], 1, tl.int1)
    else:
        c_mask = c < C
    x_base = n * xsn + d * xsd
    g_base = n * gsn + d * gsd
    d_base = n * dsn + d * dsd
    a0 = A0 + h_blk * STEPS
    a1 = tl.minimum(a0 + STEPS, A1)
    return w, c, c_mask, x_base, g_base, d_base, a0, a1


@triton.jit
def _pool_cl_max_backward_kernel(x_ptr, dy_ptr, dx_ptr, C, D, IH, IW, OH, OW, TILES_H, TILES_J, STEPS, A0, A1,
                                 # strides of N, D, H, W (the channel stride is 1): x, dy, dx
                                 xsn, xsd, xsh, xsw, gsn, gsd, gsh, gsw, dsn, dsd, dsh, dsw,
                                 alpha: tl.float64, beta: tl.float64,
                                 KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                                 PH: tl.constexpr, PW: tl.constexpr, T_LO: tl.constexpr, T_HI: tl.constexpr,
                                 PROPAGATE_NAN: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr,
                                 COMPUTE: tl.constexpr, ARG_EQ: tl.constexpr, BLOCK_J: tl.constexpr,
                                 BLOCK_C: tl.constexpr):
    """dx of max pooling over [SH * STEPS input rows, SW * BLOCK_J input columns, BLOCK_C
    channels] of one (n, d), each written once, straight from x and dy. Needs KH <= 2 SH
    (an input row is covered by outputs a - 1 and a at most) and T_HI <= T_LO + 1 (an
    input column by outputs j + T_LO and j + T_HI); input column SW * j + p takes output
    j + t at kw = p + PW - SW * t. Sums run over (output row, output column) ascending,
    the order of the two-pass gather, so dx is the same bit for bit."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        xsn, xsd, xsh, xsw = wide((xsn, xsd, xsh, xsw))
        gsn, gsd, gsh, gsw = wide((gsn, gsd, gsh, gsw))
        dsn, dsd, dsh, dsw = wide((dsn, dsd, dsh, dsw))
    # map the program to its tile and run of output rows [a0, a1)
    j, c, c_mask, x_base, g_base, d_base, a0, a1 = _cl_fused_tile(C, D, TILES_H, TILES_J, STEPS, A0, A1, xsn, xsd,
                                                                  gsn, gsd, dsn, dsd, False, BLOCK_J, BLOCK_C)
    CARRY: tl.constexpr = KH == SH + 1
    TWO: tl.constexpr = T_HI > T_LO
    # output row a0 - 1: its taps and dy (and, carried, its last input row's folds)
    top0 = tl.zeros([BLOCK_J, BLOCK_C], COMPUTE)
    top0_arg = tl.zeros([BLOCK_J, BLOCK_C], tl.int32)
    p_arg0, p_g0, top0, top0_arg = _cl_out_row_taps(
        x_ptr, dy_ptr, x_base, g_base + (a0 - 1) * gsh, a0 - 1, j + T_LO, c, c_mask, IH, IW, OH, OW, xsh, xsw, gsw,
        top0, top0_arg, KH, KW, SH, SW, PH, PW, PROPAGATE_NAN, ARG_EQ, False, COMPUTE, BLOCK_J, BLOCK_C)
    p_arg1, p_g1, top1, top1_arg = p_arg0, p_g0, top0, top0_arg  # placeholders when one column shift covers
    if TWO:
        p_arg1, p_g1, top1, top1_arg = _cl_out_row_taps(
            x_ptr, dy_ptr, x_base, g_base + (a0 - 1) * gsh, a0 - 1, j + T_HI, c, c_mask, IH, IW, OH, OW, xsh, xsw,
            gsw, top0, top0_arg, KH, KW, SH, SW, PH, PW, PROPAGATE_NAN, ARG_EQ, False, COMPUTE, BLOCK_J, BLOCK_C)
    for a in range(a0, a1):
        # output row a's taps and dy at both column shifts
        arg0, g0, top0, top0_arg = _cl_out_row_taps(
            x_ptr, dy_ptr, x_base, g_base + a * gsh, a, j + T_LO, c, c_mask, IH, IW, OH, OW, xsh, xsw, gsw,
            top0, top0_arg, KH, KW, SH, SW, PH, PW, PROPAGATE_NAN, ARG_EQ, CARRY, COMPUTE, BLOCK_J, BLOCK_C)
        arg1, g1 = arg0, g0
        if TWO:
            arg1, g1, top1, top1_arg = _cl_out_row_taps(
                x_ptr, dy_ptr, x_base, g_base + a * gsh, a, j + T_HI, c, c_mask, IH, IW, OH, OW, xsh, xsw, gsw,
                top1, top1_arg, KH, KW, SH, SW, PH, PW, PROPAGATE_NAN, ARG_EQ, CARRY, COMPUTE, BLOCK_J, BLOCK_C)
        # the step's dx rows: row r is tap kh = r + SH of output a - 1 and kh = r of output a
        for r in tl.static_range(SH):
            ih = a * SH - PH + r
            for p in tl.static_range(SW):
                acc = tl.zeros([BLOCK_J, BLOCK_C], COMPUTE)
                if r + SH < KH:
                    if p + PW - SW * T_LO >= 0 and p + PW - SW * T_LO < KW:
                        acc = _cl_route(acc, p_arg0, p_g0, (r + SH) * KW + p + PW - SW * T_LO)
                    if TWO and p + PW - SW * T_HI >= 0 and p + PW - SW * T_HI < KW:
                        acc = _cl_route(acc, p_arg1, p_g1, (r + SH) * KW + p + PW - SW * T_HI)
                if r < KH:
                    if p + PW - SW * T_LO >= 0 and p + PW - SW * T_LO < KW:
                        acc = _cl_route(acc, arg0, g0, r * KW + p + PW - SW * T_LO)
                    if TWO and p + PW - SW * T_HI >= 0 and p + PW - SW * T_HI < KW:
                        acc = _cl_route(acc, arg1, g1, r * KW + p + PW - SW * T_HI)
                iw = j * SW + p
                mask = (iw < IW)[:, None] & c_mask[None, :] & (ih >= 0) & (ih < IH)
                off = d_base + ih * dsh + (iw * dsw)[:, None] + c[None, :]
                out = acc * alpha
                if HAS_BETA:
                    out += tl.load(dx_ptr + off, mask=mask, other=0.0).to(COMPUTE) * beta
                tl.store(dx_ptr + off, out.to(dx_ptr.dtype.element_ty), mask=mask)
        p_arg0, p_g0, p_arg1, p_g1 = arg0, g0, arg1, g1


# The phases design of the fused backward (CL_FUSED_MAX_BWD == "phases"): output columns
# j = K * m + e, a tile per phase e, so that output j + 1 of phase e is phase e + 1 of the
# same group, in the same thread: no tap fold is computed twice except the one phase
# past the group (K + T_HI - T_LO tiles per K outputs), and every x column the phases
# share is loaded and converted once per input row (tuples of tiles, unrolled).
@triton.jit
def _phase_row_fold(x_ptr, row, row_ok, m, c, c_mask, IW, xsw, K: tl.constexpr, KW: tl.constexpr, SW: tl.constexpr,
                    PW: tl.constexpr, T_LO: tl.constexpr, T_HI: tl.constexpr, PROPAGATE_NAN: tl.constexpr,
                    COMPUTE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """Fold the KW taps of one input row for the phases e in [T_LO, K + T_HI) of the
    groups m: tuples of [BLOCK_M, BLOCK_C] (row maximum, first tap kw holding it or -1),
    the rule of _cl_row_fold with ARG_EQ (so the taps are the same)."""
    Q0: tl.constexpr = SW * T_LO - PW  # x column of phase T_LO's tap 0, relative to SW * K * m
    xs = ()
    oks = ()
    for i in tl.static_range(SW * (K - 1 + T_HI - T_LO) + KW):
        col = m * (SW * K) + (Q0 + i)
        ok = (col >= 0) & (col < IW) & row_ok
        xs = xs + (tl.load(x_ptr + row + (col * xsw)[:, None] + c[None, :], mask=ok[:, None] & c_mask[None, :],
                           other=float("-inf")).to(COMPUTE),)
        oks = oks + (ok[:, None],)
    hs = ()
    hargs = ()
    for i in tl.static_range(K + T_HI - T_LO):
        h = tl.full([BLOCK_M, BLOCK_C], float("-inf"), COMPUTE)
        for kw in tl.static_range(KW):
            h = _max2(h, xs[SW * i + kw], PROPAGATE_NAN, 0)
        harg = tl.full([BLOCK_M, BLOCK_C], -1, tl.int32)
        for kk in tl.static_range(KW):
            harg = tl.where(_first_max_hit(xs[SW * i + KW - 1 - kk], h, oks[SW * i + KW - 1 - kk], PROPAGATE_NAN),
                            KW - 1 - kk, harg)
        hs = hs + (h,)
        hargs = hargs + (harg,)
    return hs, hargs


@triton.jit
def _phase_fold_rows(acc, arg, h, harg, kh: tl.constexpr, KW: tl.constexpr, PROPAGATE_NAN: tl.constexpr):
    """_cl_fold_rows for max with fewer instructions, the same result: a row without a
    tap (harg < 0) has h = -inf, so the first row is taken as is, and later rows need the
    tap test only where they tie."""
    if kh == 0:
        return h, harg
    better = (h > acc) | ((arg < 0) & (h == acc) & (harg >= 0))
    if PROPAGATE_NAN:
        better = better | ((h != h) & (acc == acc))
    return tl.where(better, h, acc), tl.where(better, harg + kh * KW, arg)


@triton.jit
def _phase_out_row(x_ptr, dy_ptr, x_base, g_row, oh, m, c, c_mask, IH, IW, OH, OW, xsh, xsw, gsw, top, top_arg,
                   K: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                   PH: tl.constexpr, PW: tl.constexpr, T_LO: tl.constexpr, T_HI: tl.constexpr,
                   PROPAGATE_NAN: tl.constexpr, CARRY: tl.constexpr, COMPUTE: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per phase: (first-maximum tap, dy) of output row oh, and the last input row's folds;
    with CARRY the first input row's folds are (top, top_arg), not reloaded. dy is 0 out
    of range, so such outputs route nothing."""
    args = ()
    accs = ()
    for i in tl.static_range(K + T_HI - T_LO):
        acc, arg = _pool_start(0, COMPUTE, BLOCK_M, BLOCK_C)
        accs = accs + (acc,)
        args = args + (arg,)
    for kh in tl.static_range(KH):
        if CARRY and kh == 0:
            hs = top
            hargs = top_arg
        else:
            ih = oh * SH - PH + kh
            hs, hargs = _phase_row_fold(x_ptr, x_base + ih * xsh, (ih >= 0) & (ih < IH), m, c, c_mask, IW, xsw, K, KW,
                                        SW, PW, T_LO, T_HI, PROPAGATE_NAN, COMPUTE, BLOCK_M, BLOCK_C)
        new_accs = ()
        new_args = ()
        for i in tl.static_range(K + T_HI - T_LO):
            acc, arg = _phase_fold_rows(accs[i], args[i], hs[i], hargs[i], kh, KW, PROPAGATE_NAN)
            new_accs = new_accs + (acc,)
            new_args = new_args + (arg,)
        accs = new_accs
        args = new_args
    gs = ()
    for i in tl.static_range(K + T_HI - T_LO):
        ow = m * K + (T_LO + i)
        mask = ((ow >= 0) & (ow < OW) & (oh >= 0) & (oh < OH))[:, None] & c_mask[None, :]
        gs = gs + (tl.load(dy_ptr + g_row + (ow * gsw)[:, None] + c[None, :], mask=mask, other=0.0).to(COMPUTE),)
    return args, gs, hs, hargs


@triton.jit
def _phase_route(acc, args, gs, S: tl.constexpr, KH_TAP: tl.constexpr, K: tl.constexpr, KW: tl.constexpr,
                 SW: tl.constexpr, PW: tl.constexpr, T_LO: tl.constexpr, T_HI: tl.constexpr):
    """Add, phases ascending, the dy of the outputs whose first maximum is dx column
    SW * K * m + S at vertical tap KH_TAP (horizontal tap S + PW - SW * e)."""
    for i in tl.static_range(K + T_HI - T_LO):
        if S + PW - SW * (T_LO + i) >= 0 and S + PW - SW * (T_LO + i) < KW:
            acc = acc + tl.where(args[i] == KH_TAP * KW + S + PW - SW * (T_LO + i), gs[i], 0.0)
    return acc


@triton.jit
def _pool_cl_max_backward_phases_kernel(x_ptr, dy_ptr, dx_ptr, C, D, IH, IW, OH, OW, TILES_H, TILES_M, STEPS, A0, A1,
                                        # strides of N, D, H, W (the channel stride is 1): x, dy, dx
                                        xsn, xsd, xsh, xsw, gsn, gsd, gsh, gsw, dsn, dsd, dsh, dsw,
                                        alpha: tl.float64, beta: tl.float64,
                                        KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                                        PH: tl.constexpr, PW: tl.constexpr, T_LO: tl.constexpr, T_HI: tl.constexpr,
                                        K: tl.constexpr, PROPAGATE_NAN: tl.constexpr, HAS_BETA: tl.constexpr,
                                        ONE_ALPHA: tl.constexpr, BIG: tl.constexpr, EVEN_C: tl.constexpr,
                                        COMPUTE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx of max pooling over [SH * STEPS input rows, BLOCK_M groups of SW * K input
    columns, BLOCK_C channels] of one (n, d), each written once, from x and dy. Step a
    writes dx rows SH * a - PH + r: tap kh = r of output row a and, for r < KH - SH,
    kh = r + SH of output row a - 1, whose share was summed the step before (partial);
    sums run over (output row, output column) ascending, the two-pass order, so dx is the
    same bit for bit. Needs KH <= 2 SH."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        xsn, xsd, xsh, xsw = wide((xsn, xsd, xsh, xsw))
        gsn, gsd, gsh, gsw = wide((gsn, gsd, gsh, gsw))
        dsn, dsd, dsh, dsw = wide((dsn, dsd, dsh, dsw))
    # map the program to its tile and run of output rows [a0, a1)
    m, c, c_mask, x_base, g_base, d_base, a0, a1 = _cl_fused_tile(C, D, TILES_H, TILES_M, STEPS, A0, A1, xsn, xsd,
                                                                  gsn, gsd, dsn, dsd, EVEN_C, BLOCK_M, BLOCK_C)
    CARRY: tl.constexpr = KH == SH + 1
    zero = tl.zeros([BLOCK_M, BLOCK_C], COMPUTE)
    top = ()
    top_arg = ()
    for i in tl.static_range(K + T_HI - T_LO):
        top = top + (zero,)
        top_arg = top_arg + (tl.zeros([BLOCK_M, BLOCK_C], tl.int32),)
    # output row a0 - 1: its share of the first step's dx rows, and its last row's folds
    args, gs, top, top_arg = _phase_out_row(x_ptr, dy_ptr, x_base, g_base + (a0 - 1) * gsh, a0 - 1, m, c, c_mask,
                                            IH, IW, OH, OW, xsh, xsw, gsw, top, top_arg, K, KH, KW, SH, SW, PH, PW,
                                            T_LO, T_HI, PROPAGATE_NAN, False, COMPUTE, BLOCK_M, BLOCK_C)
    partial = ()
    for r in tl.static_range(KH - SH):
        for s in tl.static_range(SW * K):
            partial = partial + (_phase_route(zero, args, gs, s, r + SH, K, KW, SW, PW, T_LO, T_HI),)
    for a in range(a0, a1):
        args, gs, top, top_arg = _phase_out_row(x_ptr, dy_ptr, x_base, g_base + a * gsh, a, m, c, c_mask, IH, IW, OH,
                                                OW, xsh, xsw, gsw, top, top_arg, K, KH, KW, SH, SW, PH, PW, T_LO, T_HI,
                                                PROPAGATE_NAN, CARRY, COMPUTE, BLOCK_M, BLOCK_C)
        # the step's dx rows, each column of the group as one [BLOCK_M, BLOCK_C] tile
        for r in tl.static_range(SH):
            ih = a * SH - PH + r
            for s in tl.static_range(SW * K):
                if r < KH - SH:
                    acc = partial[r * SW * K + s]
                else:
                    acc = zero
                if r < KH:
                    acc = _phase_route(acc, args, gs, s, r, K, KW, SW, PW, T_LO, T_HI)
                iw = m * (SW * K) + s
                mask = ((iw < IW) & (ih >= 0) & (ih < IH))[:, None] & c_mask[None, :]
                off = d_base + ih * dsh + (iw * dsw)[:, None] + c[None, :]
                if ONE_ALPHA:  # acc * 1.0 is acc
                    out = acc
                else:
                    out = acc * alpha
                if HAS_BETA:
                    out += tl.load(dx_ptr + off, mask=mask, other=0.0).to(COMPUTE) * beta
                tl.store(dx_ptr + off, out.to(dx_ptr.dtype.element_ty), mask=mask)
        # this output row's share of the next step's rows
        partial = ()
        for r in tl.static_range(KH - SH):
            for s in tl.static_range(SW * K):
                partial = partial + (_phase_route(zero, args, gs, s, r + SH, K, KW, SW, PW, T_LO, T_HI),)


# -- global average pooling (GLOBAL_AVG_KERNEL) -------------------------------------------
@triton.jit
def _global_avg_kernel(x_ptr, y_ptr, C, S, TILES_C,
                       # strides: x's N, C and flattened spatial S; y's N, C
                       xsn, xsc, xss, ysn, ysc, alpha: tl.float64, beta: tl.float64,
                       HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_C: tl.constexpr,
                       BLOCK_S: tl.constexpr):
    """y[n, c] = alpha * mean over S of x[n, c, :] + beta * y[n, c] for a [BLOCK_C, BLOCK_S]
    tile of (channels, positions) walked along S. Whichever axis is contiguous (S for
    NCHW, C for NHWC) is the one Triton vectorizes. The next step's tile is loaded before
    the current one is added, so two tiles are in flight per program."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64, not only the image's (common.wide)
        xsn, xsc, xss = wide((xsn, xsc, xss))
        ysn, ysc = wide((ysn, ysc))
    # map the program to (n, channel block)
    pid = tl.program_id(0)
    n = pid // TILES_C
    c = (pid % TILES_C) * BLOCK_C + tl.arange(0, BLOCK_C)
    s = tl.arange(0, BLOCK_S)
    c_mask = c < C
    ptrs = x_ptr + n * xsn + (c * xsc)[:, None] + (s * xss)[None, :]
    acc = tl.zeros([BLOCK_C, BLOCK_S], COMPUTE)
    v = tl.load(ptrs, mask=c_mask[:, None] & (s < S)[None, :], other=0.0)
    # walk S one tile ahead
    for s0 in range(BLOCK_S, S, BLOCK_S):
        nxt = tl.load(ptrs + s0 * xss, mask=c_mask[:, None] & ((s0 + s) < S)[None, :], other=0.0)
        acc += v.to(COMPUTE)
        v = nxt
    acc += v.to(COMPUTE)
    # finish: mean, blend, store
    out = tl.sum(acc, axis=1) / S * alpha
    y_off = n * ysn + c * ysc
    if HAS_BETA:
        out += tl.load(y_ptr + y_off, mask=c_mask, other=0.0).to(COMPUTE) * beta
    tl.store(y_ptr + y_off, out.to(y_ptr.dtype.element_ty), mask=c_mask)


# -- launchers --------------------------------------------------------------------------
def _as_3d(t):
    """A (N, C, D, H, W) view of a 1-D, 2-D or 3-D tensor."""
    while t.dim() < 5:
        t = t.unsqueeze(2)
    return t


def _pad3(values, fill):
    values = tuple(int(v) for v in values)
    return (fill,) * (3 - len(values)) + values


def _tile(t, C, P):
    """(BLOCK_P, BLOCK_C, warps) of a gather kernel: channels along the tile for
    channels-last tensors (16-byte loads along C), positions otherwise."""
    if channels_last(t):
        block_c = min(triton.next_power_of_2(C), 128)
        block_p = max(1, min(triton.next_power_of_2(P), TILE // block_c))
    else:
        block_p = min(triton.next_power_of_2(P), 512)
        block_c = max(1, min(triton.next_power_of_2(C), TILE // block_p))
    warps = 4 if block_p * block_c <= 1024 else 8
    return block_p, block_c, warps


def _grid(N, C, P, block_p, block_c):
    return (N * cdiv(P, block_p) * cdiv(C, block_c),)


def _arg_dtype(taps: int):
    return torch.uint8 if taps <= 255 else (torch.int16 if taps <= 32767 else torch.int32)


def _covers(size_in, size_out, stride, pad, window, adaptive):
    """The most outputs whose windows cover one input along a dim."""
    if adaptive:
        return -(-size_out // size_in) + 1
    return -(-window // stride)


def _max_bin(size_in, size_out):
    return max(-((-(o + 1) * size_in) // size_out) - (o * size_in) // size_out for o in range(size_out))


def _check(mode, x, y, window, padding, stride):
    if int(mode) not in (MAX, AVG_INCLUDE, AVG_EXCLUDE, MAX_DETERMINISTIC):
        raise BadParamError(f"unknown pooling mode {mode}; valid: MAX 0, AVERAGE_COUNT_INCLUDE_PADDING 1, "
                            f"AVERAGE_COUNT_EXCLUDE_PADDING 2, MAX_DETERMINISTIC 3")
    if not 3 <= x.dim() <= 5 or x.dim() != y.dim():
        raise BadParamError(f"pooling needs x and y of 3 to 5 dims with equal rank, got {tuple(x.shape)} "
                            f"and {tuple(y.shape)}")
    nd = x.dim() - 2
    for name, v in (("window", window), ("padding", padding), ("stride", stride)):
        if len(tuple(v)) != nd:
            raise BadParamError(f"pooling {name} {tuple(v)} needs {nd} entries for x dims {tuple(x.shape)}")


class _Geometry:
    def __init__(self, x, y, window, padding, stride, adaptive):
        self.adaptive = adaptive
        self.x5, self.y5 = _as_3d(x), _as_3d(y)
        self.N, self.C = x.shape[0], x.shape[1]
        self.ins = tuple(self.x5.shape[2:])
        self.outs = tuple(self.y5.shape[2:])
        if adaptive:
            self.window = tuple(_max_bin(i, o) for i, o in zip(self.ins, self.outs))
            self.stride, self.padding = (1, 1, 1), (0, 0, 0)
        else:
            self.window, self.padding, self.stride = _pad3(window, 1), _pad3(padding, 0), _pad3(stride, 1)
        self.covers = tuple(_covers(i, o, s, p, k, adaptive) for i, o, s, p, k in
                            zip(self.ins, self.outs, self.stride, self.padding, self.window))

    def params(self):
        return (*self.stride, *self.padding)


def _pow2_factor(*values):
    """The largest of 8, 4, 2, 1 dividing every value."""
    return next(v for v in (8, 4, 2, 1) if all(x % v == 0 for x in values))


def _row_strides(t5):
    """(factor, the N, C, D, H strides divided by it) of a tensor whose W stride is 1."""
    strides = [s if d > 1 else 0 for d, s in zip(t5.shape[:4], t5.stride()[:4])]
    v = _pow2_factor(*strides)
    return v, [s // v for s in strides]


def _unit_w(*tensors):
    return all(t.shape[4] == 1 or t.stride(4) == 1 for t in tensors)


def _use_rows(geo, *tensors):
    """The row kernels: W contiguous in every tensor, a regular window with W stride 1 or 2,
    and a layout that is not channels-last (whose gather kernel reads 16-byte channel runs)."""
    return (ROW_KERNELS and not geo.adaptive and geo.stride[2] in (1, 2) and geo.padding[2] < geo.window[2]
            and math.prod(geo.window) <= UNROLL_TAPS and _unit_w(*tensors)
            and not channels_last(tensors[0]) and geo.ins[2] > 1)


def _use_cl(geo, *tensors):
    """The channels-last row kernels: C contiguous in every tensor, no window along D, a
    regular window with W stride 1 or 2."""
    return (CL_KERNELS and not geo.adaptive and geo.window[0] == 1 and geo.stride[0] == 1 and geo.padding[0] == 0
            and geo.stride[2] in (1, 2) and math.prod(geo.window) <= UNROLL_TAPS
            and geo.padding[1] < geo.window[1] and geo.padding[2] < geo.window[2]
            and channels_last(tensors[0]) and all(t.shape[1] == 1 or t.stride(1) == 1 for t in tensors))


def _cl_block(C, width):
    return min(triton.next_power_of_2(C), CL_BLOCK_C), min(triton.next_power_of_2(width), CL_BLOCK_W)


def _ndhw(t5):
    s = t5.stride()
    return s[0], s[2], s[3], s[4]


def _cl_forward(x5, y5, arg5, geo, alpha, beta, flags):
    (D, IH, IW), (_, OH, OW) = geo.ins, geo.outs
    _, KH, KW = geo.window
    rows = max(1, min(CL_ROWS, OH))
    block_c, block_w = _cl_block(geo.C, OW)
    tiles_h, tiles_w = cdiv(OH, rows), cdiv(OW, block_w)
    _pool_cl_forward_kernel[(geo.N * D * tiles_h * tiles_w * cdiv(geo.C, block_c),)](
        x5, y5, arg5, geo.C, D, IH, IW, OH, OW, tiles_h, tiles_w, *_ndhw(x5), *_ndhw(y5), *_ndhw(arg5),
        alpha, beta, KH=KH, KW=KW, SH=geo.stride[1], SW=geo.stride[2], PH=geo.padding[1], PW=geo.padding[2],
        **flags, PACKED=_packed(x5), ARG_EQ=CL_ARG_EQ, ROWS=rows, BLOCK_W=block_w, BLOCK_C=block_c, num_warps=CL_WARPS)


def _packed(x):
    """1 bf16, 2 f16: the packed max of PTX (not in Triton's interpreter)."""
    if not CL_PACKED_MAX or x.device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return 0
    return {torch.bfloat16: 1, torch.float16: 2}.get(x.dtype, 0)


def _cl_backward(dy5, arg5, dx5, geo, alpha, beta, flags):
    (D, IH, IW), (_, OH, OW) = geo.ins, geo.outs
    _, KH, KW = geo.window
    _, SH, SW = geo.stride
    _, PH, PW = geo.padding
    rows = SH * max(1, cdiv(min(CL_ROWS, IH), SH))
    qs = [q for r in range(rows) for q in range(-KH - 1, rows + KH + 1) if 0 <= r + PH - SH * q < KH]
    t_lo, t_hi = _column_shifts(geo)
    J = cdiv(IW, SW)
    block_c, block_j = _cl_block(geo.C, J)
    tiles_h, tiles_j = cdiv(IH, rows), cdiv(J, block_j)
    _pool_cl_backward_kernel[(geo.N * D * tiles_h * tiles_j * cdiv(geo.C, block_c),)](
        dy5, arg5, dx5, geo.C, D, IH, IW, OH, OW, tiles_h, tiles_j, *_ndhw(dy5), *_ndhw(arg5), *_ndhw(dx5),
        alpha, beta, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, Q_LO=min(qs), Q_HI=max(qs), T_LO=t_lo,
        T_HI=t_hi, **flags, ROWS=rows, BLOCK_J=block_j, BLOCK_C=block_c, num_warps=CL_WARPS)


def _use_cl_fused(geo, mode, *tensors):
    """The fused channels-last max backward: the channels-last kernels' conditions, an
    input row covered by at most two output rows (KH <= 2 SH) and an input column by at
    most two output columns."""
    if CL_FUSED_MAX_BWD not in ("phases", "shift") or int(mode) not in (MAX, MAX_DETERMINISTIC):
        return False
    if not _use_cl(geo, *tensors) or geo.window[1] > 2 * geo.stride[1]:
        return False
    t_lo, t_hi = _column_shifts(geo)
    if CL_FUSED_MAX_BWD == "phases":
        return geo.window[1] >= geo.stride[1]
    return t_hi - t_lo <= 1


def _cl_fused_backward(x5, dy5, dx5, geo, propagate_nan, alpha, beta, flags):
    (D, IH, IW), (_, OH, OW) = geo.ins, geo.outs
    _, KH, KW = geo.window
    _, SH, SW = geo.stride
    _, PH, PW = geo.padding
    t_lo, t_hi = _column_shifts(geo)
    a0, a1 = PH // SH, (IH - 1 + PH) // SH + 1  # the steps: step a writes dx rows [SH * a - PH, SH * (a + 1) - PH)
    steps = max(1, min(CL_FUSED_STEPS, a1 - a0))
    tiles_h = cdiv(a1 - a0, steps)
    if CL_FUSED_MAX_BWD == "phases":
        K = CL_FUSED_PHASES
        groups = cdiv(IW, SW * K)
        block_c = min(triton.next_power_of_2(geo.C), CL_FUSED_BLOCK_C)
        block_m = min(triton.next_power_of_2(groups), CL_FUSED_BLOCK_M)
        tiles_m = cdiv(groups, block_m)
        _pool_cl_max_backward_phases_kernel[(geo.N * D * tiles_h * tiles_m * cdiv(geo.C, block_c),)](
            x5, dy5, dx5, geo.C, D, IH, IW, OH, OW, tiles_h, tiles_m, steps, a0, a1, *_ndhw(x5), *_ndhw(dy5),
            *_ndhw(dx5), alpha, beta, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, T_LO=t_lo, T_HI=t_hi, K=K,
            PROPAGATE_NAN=bool(propagate_nan), HAS_BETA=flags["HAS_BETA"], ONE_ALPHA=alpha == 1.0, BIG=flags["BIG"],
            EVEN_C=geo.C % block_c == 0, COMPUTE=flags["COMPUTE"], BLOCK_M=block_m, BLOCK_C=block_c,
            num_warps=CL_FUSED_WARPS, **_maxnreg())
        return
    J = cdiv(IW, SW)
    block_c = min(triton.next_power_of_2(geo.C), CL_FUSED_BLOCK_C)
    block_j = min(triton.next_power_of_2(J), CL_FUSED_BLOCK_J)
    tiles_j = cdiv(J, block_j)
    _pool_cl_max_backward_kernel[(geo.N * D * tiles_h * tiles_j * cdiv(geo.C, block_c),)](
        x5, dy5, dx5, geo.C, D, IH, IW, OH, OW, tiles_h, tiles_j, steps, a0, a1, *_ndhw(x5), *_ndhw(dy5),
        *_ndhw(dx5), alpha, beta, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW, T_LO=t_lo, T_HI=t_hi,
        PROPAGATE_NAN=bool(propagate_nan), HAS_BETA=flags["HAS_BETA"], BIG=flags["BIG"], COMPUTE=flags["COMPUTE"],
        ARG_EQ=CL_ARG_EQ, BLOCK_J=block_j, BLOCK_C=block_c, num_warps=CL_FUSED_WARPS, **_maxnreg())


def _maxnreg():
    return {"maxnreg": int(CL_FUSED_MAXNREG)} if CL_FUSED_MAXNREG else {}


def _column_shifts(geo):
    """(T_LO, T_HI): dx column SW * j + a takes output j + t, t in that range (the
    backward gathers' covering columns); also the forward taps' (kw - PW) // SW, which the
    NCHW lane forward allows one column beyond its group on either side."""
    KW = geo.window[2]
    SW, PW = geo.stride[2], geo.padding[2]
    ts = [t for a in range(SW) for t in range(-KW - 1, KW + 2) if 0 <= a + PW - SW * t < KW]
    return min(ts), max(ts)


def _use_nchw(geo, mode):
    """The NCHW lane forward (on top of _use_rows) for the modes of NCHW_LANE_KERNELS: no
    window along D, H and W strides 1 or 2, each tap at most one column beyond the 8-column
    group (PW <= 1, KW - 1 - PW <= SW)."""
    _, KH, KW = geo.window
    _, SH, SW = geo.stride
    _, PH, PW = geo.padding
    if int(mode) not in NCHW_LANE_KERNELS:
        return False
    if geo.window[0] != 1 or geo.stride[0] != 1 or geo.padding[0] != 0:
        return False
    if SH not in (1, 2) or SW not in (1, 2) or PH >= KH or PW > 1 or KW - 1 - PW > SW:
        return False
    t_lo, t_hi = _column_shifts(geo)
    return t_lo >= -1 and t_hi <= 1


def _nchw_lane_tiles(lanes, groups):
    """(BLOCK_L, BLOCK_G, programs) of the NCHW lane kernels."""
    block_g = min(triton.next_power_of_2(groups), NCHW_LANE_TILE)
    block_l = max(1, min(triton.next_power_of_2(lanes), NCHW_LANE_TILE // block_g))
    return block_l, block_g, cdiv(lanes, block_l) * cdiv(groups, block_g)


def _nchw_forward(x5, y5, arg5, geo, alpha, beta, flags, store_y, has_arg):
    (D, IH, IW), (_, OH, OW) = geo.ins, geo.outs
    _, KH, KW = geo.window
    _, SH, SW = geo.stride
    _, PH, PW = geo.padding
    vx, xs = _row_strides(x5)
    vy, ys = _row_strides(y5) if store_y else (1, [0] * 4)
    va, as_ = _row_strides(arg5) if has_arg else (1, [0] * 4)
    planes = geo.N * geo.C * D
    groups = cdiv(OW, 8 // SW)
    block_l, block_g, programs = _nchw_lane_tiles(planes * OH, groups)
    _pool_nchw_lane_forward_kernel[(programs,)](
        x5, y5, arg5, planes * OH, geo.C, D, IH, OH, IW // _pow2_factor(IW), OW // _pow2_factor(OW),
        cdiv(groups, block_g), *xs, *ys, *as_, alpha, beta, KH=KH, KW=KW, SH=SH, SW=SW, PH=PH, PW=PW,
        VX=vx, VY=vy, VA=va, VIW=_pow2_factor(IW), VOW=_pow2_factor(OW), **flags,
        INTERP=os.environ.get("TRITON_INTERPRET") == "1", ONE_ALPHA=alpha == 1.0, BLOCK_L=block_l,
        BLOCK_G=block_g, num_warps=NCHW_LANE_WARPS)


def _row_block(width, rows, tile):
    block_w = min(triton.next_power_of_2(width), MAX_ROW_BLOCK_W)
    block_r = max(1, min(triton.next_power_of_2(rows), tile // block_w))
    return block_r, block_w


def _flat_spatial(t5):
    """The one stride of t5's spatial dims walked as a flat run (D, H, W collapsible), or None."""
    dims = [(n, s) for n, s in zip(t5.shape[2:], t5.stride()[2:]) if n > 1]
    if not dims:
        return 1
    for (n0, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != n1 * s1:
            return None
    return dims[-1][1]


def _global_avg(x, y, geo, alpha, beta):
    """GLOBAL_AVG_KERNEL: the mean of each (n, c) plane by _global_avg_kernel; False when
    the spatial dims cannot be walked as one run."""
    x5, y5 = geo.x5, geo.y5
    xss = _flat_spatial(x5)
    if xss is None:
        return False
    alpha, beta, has_beta = blend_args(alpha, beta)
    S = math.prod(geo.ins)
    block_c, block_s, warps = GLOBAL_AVG_NHWC if channels_last(x5) else GLOBAL_AVG_NCHW
    block_c = min(block_c, triton.next_power_of_2(geo.C))
    block_s = min(block_s, triton.next_power_of_2(S))
    tiles_c = cdiv(geo.C, block_c)
    _global_avg_kernel[(geo.N * tiles_c,)](
        x5, y5, geo.C, S, tiles_c, x5.stride(0), x5.stride(1), xss, y5.stride(0), y5.stride(1), alpha, beta,
        HAS_BETA=has_beta, BIG=needs_int64(x, y), COMPUTE=compute_dtype(x), BLOCK_C=block_c, BLOCK_S=block_s,
        num_warps=warps)
    return True


def _global_as_reduction(x, y, mode, geo, propagate_nan, alpha, beta):
    """A window that is the whole (unpadded) plane of an NCHW-like tensor is a row
    reduction: hand it to the reduce kernel, which reads each plane as one contiguous
    run instead of looping over taps with channel-strided loads."""
    from . import tensor_ops
    if any(p != 0 for p in geo.padding) or any(o != 1 for o in geo.outs):
        return False
    if tuple(geo.window[-x.dim() + 2:]) != tuple(x.shape[2:]) and math.prod(geo.window) != math.prod(geo.ins):
        return False
    average = int(mode) in (AVG_INCLUDE, AVG_EXCLUDE)
    # (Hopper, dense channels-last: reduce_tensor's Gluon TMA stream, before GLOBAL_AVG_KERNEL)
    if (GLOBAL_AVG_KERNEL and average and not tensor_ops.gluon_route(x, y, tensor_ops.RED_AVG)
            and _global_avg(x, y, geo, alpha, beta)):
        return True
    op = tensor_ops.RED_MAX if int(mode) in (MAX, MAX_DETERMINISTIC) else tensor_ops.RED_AVG
    tensor_ops.reduce_tensor(x, y, None, None, op, alpha, beta, propagate_nan)
    return True


def _forward(x, y, mode, geo, propagate_nan, alpha, beta, arg=None, store_y=True):
    if arg is None and store_y and _global_as_reduction(x, y, mode, geo, propagate_nan, alpha, beta):
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    x5, y5 = geo.x5, geo.y5
    arg5 = arg if arg is not None else y5
    flags = dict(MODE=int(mode), PROPAGATE_NAN=bool(propagate_nan), STORE_ARG=arg is not None, STORE_Y=store_y,
                 HAS_BETA=has_beta, BIG=needs_int64(x, y), COMPUTE=compute_dtype(x))
    KD, KH, KW = geo.window
    if _use_cl(geo, x5, *([y5] if store_y else []), *([arg5] if arg is not None else [])):
        _cl_forward(x5, y5, arg5, geo, alpha, beta, flags)
        return
    if _use_rows(geo, x5, *([y5] if store_y else []), arg5):
        if _use_nchw(geo, mode):
            _nchw_forward(x5, y5, arg5, geo, alpha, beta, flags, store_y, arg is not None)
            return
        (ID, IH, IW), (OD, OH, OW) = geo.ins, geo.outs
        vx, xs = _row_strides(x5)
        vy, ys = _row_strides(y5) if store_y else (1, [0] * 4)
        va, as_ = _row_strides(arg5) if arg is not None else (1, [0] * 4)
        viw, vow = _pow2_factor(IW), _pow2_factor(OW)
        rows = geo.N * geo.C * OD * OH
        block_r, block_w = _row_block(OW, rows, ROW_TILE)
        _pool_rows_forward_kernel[(cdiv(rows, block_r), cdiv(OW, block_w))](
            x5, y5, arg5, rows, geo.C, ID, IH, OD, OH, IW // viw, OW // vow, *xs, *ys, *as_,
            geo.stride[0], geo.stride[1], geo.padding[0], geo.padding[1], alpha, beta,
            KD=KD, KH=KH, KW=KW, SW=geo.stride[2], PW=geo.padding[2], VX=vx, VY=vy, VA=va, VIW=viw, VOW=vow, **flags,
            BLOCK_R=block_r, BLOCK_W=block_w, num_warps=ROW_WARPS)
        return
    P = math.prod(geo.outs)
    block_p, block_c, warps = _tile(x5, geo.C, P)
    _pool_forward_kernel[_grid(geo.N, geo.C, P, block_p, block_c)](
        x5, y5, arg5, geo.N, geo.C, *geo.ins, *geo.outs, *x5.stride(), *y5.stride(), *arg5.stride(),
        *geo.params(), alpha, beta, KD=KD, KH=KH, KW=KW, UNROLL=KD * KH * KW <= UNROLL_TAPS,
        ADAPTIVE=geo.adaptive, **flags, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=warps)


def _arg_like(geo, dy5, dx5, taps):
    """The first-maximum taps, one per output, in the layout the backward kernel reads."""
    shape = tuple(dy5.shape)
    dtype = _arg_dtype(taps)
    if channels_last(dx5) or not _use_rows(geo, dx5, dy5):
        perm = (0, 2, 3, 4, 1)
        buf = torch.empty([shape[a] for a in perm], dtype=dtype, device=dy5.device)
        return buf.permute(0, 4, 1, 2, 3)
    return torch.empty(shape, dtype=dtype, device=dy5.device)


def _rows_backward(dy5, arg5, dx5, geo, alpha, beta, flags):
    """dx by the row kernel: W-contiguous tensors (every NCHW gather since session 35)."""
    KD, KH, KW = geo.window
    TD, TH, TW = geo.covers
    (ID, IH, IW), (OD, OH, OW) = geo.ins, geo.outs
    SW, PW = geo.stride[2], geo.padding[2]
    t_lo, t_hi = _column_shifts(geo)
    vg, gs = _row_strides(dy5)
    va, as_ = _row_strides(arg5)
    vd, ds = _row_strides(dx5)
    viw, vow = _pow2_factor(IW), _pow2_factor(OW)
    rows = geo.N * geo.C * ID * IH
    block_r, block_w = _row_block(cdiv(IW, SW), rows, ROW_TILE_BACKWARD)
    _pool_rows_backward_kernel[(cdiv(rows, block_r), cdiv(cdiv(IW, SW), block_w))](
        dy5, arg5, dx5, rows, geo.C, ID, IH, OD, OH, IW // viw, OW // vow, *gs, *as_, *ds,
        geo.stride[0], geo.stride[1], geo.padding[0], geo.padding[1], alpha, beta,
        KD=KD, KH=KH, KW=KW, SW=SW, PW=PW, TD=TD, TH=TH, T_LO=t_lo, T_HI=t_hi, VG=vg, VA=va, VD=vd,
        VIW=viw, VOW=vow, **flags, BLOCK_R=block_r, BLOCK_W=block_w, num_warps=ROW_WARPS)


def _backward(x, dy, dx, mode, geo, propagate_nan, alpha, beta):
    dy5, dx5 = _as_3d(dy), _as_3d(dx)
    arg = None
    if _use_cl_fused(geo, mode, dx5, dy5, geo.x5):
        a, b, has_beta = blend_args(alpha, beta)
        _cl_fused_backward(geo.x5, dy5, dx5, geo, propagate_nan, a, b,
                           dict(HAS_BETA=has_beta, BIG=needs_int64(x, dy, dx), COMPUTE=compute_dtype(dx)))
        return
    if int(mode) in (MAX, MAX_DETERMINISTIC):
        arg = _arg_like(geo, dy5, dx5, math.prod(geo.window))
        _forward(x, dy, mode, geo, propagate_nan, 1.0, 0.0, arg=arg, store_y=False)
    alpha, beta, has_beta = blend_args(alpha, beta)
    arg5 = arg if arg is not None else dy5
    flags = dict(MODE=int(mode), HAS_BETA=has_beta, BIG=needs_int64(x, dy, dx), COMPUTE=compute_dtype(dx))
    KD, KH, KW = geo.window
    TD, TH, TW = geo.covers
    if _use_cl(geo, dx5, dy5, *([arg5] if arg is not None else [])):
        _cl_backward(dy5, arg5, dx5, geo, alpha, beta, flags)
        return
    if _use_rows(geo, dx5, dy5, arg5):
        _rows_backward(dy5, arg5, dx5, geo, alpha, beta, flags)
        return
    P = math.prod(geo.ins)
    block_p, block_c, warps = _tile(dx5, geo.C, P)
    _pool_backward_kernel[_grid(geo.N, geo.C, P, block_p, block_c)](
        dy5, arg5, dx5, geo.N, geo.C, *geo.ins, *geo.outs, *dy5.stride(), *arg5.stride(), *dx5.stride(),
        *geo.params(), alpha, beta, KD=KD, KH=KH, KW=KW, TD=TD, TH=TH, TW=TW, UNROLL=TD * TH * TW <= UNROLL_TAPS,
        ADAPTIVE=geo.adaptive, **flags, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=warps)


def pooling_forward(x, y, mode, window, padding, stride, propagate_nan=False, alpha=1.0, beta=0.0) -> None:
    """y = alpha * pool(x) + beta * y; padding is symmetric per spatial dim."""
    _check(mode, x, y, window, padding, stride)
    check_dtypes(x=x, y=y)
    if y.numel() == 0:
        return
    _forward(x, y, mode, _Geometry(x, y, window, padding, stride, False), propagate_nan, alpha, beta)


def pooling_backward(y, dy, x, dx, mode, window, padding, stride, propagate_nan=False,
                     alpha=1.0, beta=0.0) -> None:
    """dx = alpha * pool'(dy) + beta * dx; max routes each window's gradient to its first
    maximum in x (row-major window order), recomputed from x, so y is not read."""
    _check(mode, x, dy, window, padding, stride)
    check_dtypes(x=x, dy=dy, dx=dx)
    if dx.numel() == 0:
        return
    _backward(x, dy, dx, mode, _Geometry(x, dy, window, padding, stride, False), propagate_nan, alpha, beta)


def _adaptive_mode(mode):
    if int(mode) not in (0, 1):
        raise BadParamError(f"unknown adaptive pooling mode {mode}; valid: MAX 0, AVERAGE 1")
    return MAX if int(mode) == 0 else AVG_EXCLUDE


def adaptive_pooling_forward(x, y, mode, alpha=1.0, beta=0.0) -> None:
    """PyTorch-style adaptive pooling: y's spatial dims are given, output i pools
    [floor(i*in/out), ceil((i+1)*in/out)); max lets NaN through."""
    pmode = _adaptive_mode(mode)
    check_dtypes(x=x, y=y)
    if y.numel() == 0:
        return
    geo = _Geometry(x, y, None, None, None, True)
    _forward(x, y, pmode, geo, True, alpha, beta)


def adaptive_pooling_backward(x, dy, dx, mode, alpha=1.0, beta=0.0) -> None:
    """Max routes to each bin's first maximum (first NaN if any); average spreads evenly."""
    pmode = _adaptive_mode(mode)
    check_dtypes(x=x, dy=dy, dx=dx)
    if dx.numel() == 0:
        return
    geo = _Geometry(x, dy, None, None, None, True)
    _backward(x, dy, dx, pmode, geo, True, alpha, beta)
