"""Cross-channel LRN forward and backward in Triton.

y = x * s^-beta with s = k + alpha/n * sum of x^2 over the channel window
[c - (n-1)//2, c + n//2] (clipped at the edges). Each program owns a
[BLOCK_S positions, BLOCK_C channels] tile of the (N, C, S) view; the window size is a
compile-time constant, so all of a window's shifted loads are in flight together.

Two ways to read the shifted channels:
- channels strided (NCHW): a shift by j channels is a whole-plane offset, so every
  shifted tile is an aligned, vectorized load (from L1/L2 after the first);
- channels contiguous (NHWC): a shift by an odd number of channels would break the
  16-byte alignment, so the tile is read as channel pairs: tiles shifted by whole pairs
  (4-byte aligned), split into even and odd channels in registers; channel 2p + d is
  the even or odd half of pair p + d // 2, and the even and odd results are
  interleaved again before one contiguous store.

The backward sum over the windows that contain c needs each neighbour's s, which it
recomputes the same way, so no temporary is written:
dx = dy * s^-beta - 2 alpha beta / n * x * sum over j in [c - n//2, c + (n-1)//2] of
dy_j * y_j / s_j.

Precision: the kernel computes in COMPUTE (float32, or float64 for float64 data); the
scalars are float64 kernel arguments converted once to COMPUTE, so float64 data sees
the LRN constants unrounded.

FAST_LRN (off until measured on a GPU) switches to kernels that read each element once
from memory (halo channels aside) instead of once per window tap:
- channels strided (NCHW), _lrn_planes_kernel: a program owns BLOCK_S contiguous
  positions x a run of CHUNK_C channels and walks the channels one plane at a time,
  keeping the last n planes (and, backward, the last n window terms) in registers as a
  tuple ring; every window sum is recomputed over the ring (no running add/subtract,
  so no cancellation), in the same channel order as the kernel above. Planes are
  loaded NCHW_PREFETCH steps ahead and converted where used, so loads stay in flight
  across steps. A chunk first loads its halo planes (n - 1 before it;
  backward 2(n - 1), computing the terms that reach into the chunk).
- channels contiguous (NHWC), _lrn_lanes_kernel: a thread owns groups of 8 contiguous
  channels (one 16-byte vector for 16-bit data), split into 8 lane tensors in
  registers; the window's neighbours outside the group come from two small halo loads
  (the last / first channels of the neighbouring groups, read again from L1), so the
  shifted windows are register arithmetic and the store is one vector per group.
- backward recomputes y = x s^-beta from x instead of reading y (BWD_READS_Y = False):
  one tensor less from memory for two MUFU ops more per element, and the result does
  not carry y's rounding; BWD_READS_Y = True reads y like the kernel above."""
from __future__ import annotations

import os

import triton
import triton.language as tl

from ..errors import BadParamError
from .common import cdiv, wide
from .layer_utils import (NCSStaging, blend_args, channels_last, check_dtypes, check_same_shape, compute_dtype,
                          ncs_dims, ncs_strides, needs_int64)

TILE = 2048
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"  # no inline assembly there

FAST_LRN = True  # the one-read kernels below (module docstring). H200, 64x256x56x56 bf16, n=5:
                # forward 1.64 -> 2.72 TB/s NCHW, 1.71 -> 2.67 NHWC; backward 0.96 -> 2.00 NCHW,
                # 1.64 -> 3.34 NHWC (docs/performance.md)
BWD_READS_Y = False  # fast backward: read y (True) or recompute it from x (False)
NCHW_WARPS = None  # fast NCHW: warps per program (None: fewest idle lanes for S)
NCHW_CHUNK_C = None  # fast NCHW: channels per program (None: 32 forward, 64 backward)
NCHW_PREFETCH = None  # fast NCHW: planes loaded ahead and steps unrolled (None: n, at most 8)
LANES_TILE = None  # fast NHWC: elements per program (None: LANES_FORWARD_TILE forward, 1024 backward)
# fast NHWC forward's elements a program when LANES_TILE is None (issue 5, session 6). The
# lanes forward is issue bound: sm_90 bf16, n = 5, 256 channels, SASS instructions an
# element: 2048 (8 warps, 8 elements a thread) 33.0, 4096 (16 a thread) 26.0, 8192 (32 a
# thread, 60 registers) 22.2 - a thread's fixed work (program and position indices, halo
# loads, masks) spread over more elements. At the ~2.6 warp instructions a cycle an SM the
# dropout kernels run at, 33.0 predicts 2.6 TB/s (measured 2.66) and 22.2 over 3.3.
# Measured on the H200 (2026-11-30 15:10 UTC, sweep_layers_b2.py, 64x256x56x56 bf16 NHWC):
# 2048 2.66 TB/s, 4096 2.31, 8192 1.56: fewer instructions, but fewer programs and loads in
# flight; 2048 stays.
LANES_FORWARD_TILE = 2048
APPROX_LOG2 = True  # fast kernels, float32 compute on a GPU: log2 from the MUFU (_pow_neg_fast)
GROUP = 8  # fast NHWC: channels per thread group (one 16-byte vector of 16-bit data)
LANES_MAX_GROUPS = 64  # fast NHWC: groups per program at most (512 channels)


@triton.jit
def _load_shifted(ptr, base, c, s_mask, C, sc, COMPUTE: tl.constexpr):
    """ptr[base + c * sc] for a [BLOCK_S, BLOCK_C] tile, zero outside [0, C)."""
    mask = s_mask[:, None] & ((c >= 0) & (c < C))[None, :]
    return tl.load(ptr + base + (c * sc)[None, :], mask=mask, other=0.0).to(COMPUTE)


@triton.jit
def _window_scale(x_ptr, base, c, s_mask, C, sc, k_over, alpha_over_n, LRN_N: tl.constexpr,
                  COMPUTE: tl.constexpr):
    """k + alpha/n * sum of x^2 over channel c's window (channel-strided tiles)."""
    total = tl.zeros([base.shape[0], c.shape[0]], COMPUTE)
    for j in tl.static_range(LRN_N):
        v = _load_shifted(x_ptr, base, c - (LRN_N - 1) // 2 + j, s_mask, C, sc, COMPUTE)
        total += v * v
    return k_over + alpha_over_n * total


@triton.jit
def _pairs(ptr, base, c0, Q: tl.constexpr, s_mask, C, sc, COMPUTE: tl.constexpr, BLOCK_C: tl.constexpr):
    """(even, odd) channels of the pair tile shifted by Q pairs: channels
    c0 + 2Q + [0, BLOCK_C), split into [BLOCK_S, BLOCK_C / 2] halves."""
    v = _load_shifted(ptr, base, c0 + 2 * Q + tl.arange(0, BLOCK_C), s_mask, C, sc, COMPUTE)
    return tl.split(tl.reshape(v, [base.shape[0], BLOCK_C // 2, 2]))


@triton.jit
def _pair_window_scale(x_ptr, base, c0, Q: tl.constexpr, s_mask, C, sc, k_over, alpha_over_n,
                       LRN_N: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_C: tl.constexpr):
    """(s of the even channels, s of the odd channels) of the pair tile shifted by Q
    pairs: channel 2p + r + d (d in the window) is half (r + d) % 2 of pair p + (r + d) // 2."""
    BEFORE: tl.constexpr = (LRN_N - 1) // 2
    AFTER: tl.constexpr = LRN_N // 2
    even_sum = tl.zeros([base.shape[0], BLOCK_C // 2], COMPUTE)
    odd_sum = tl.zeros([base.shape[0], BLOCK_C // 2], COMPUTE)
    for i in tl.static_range((AFTER + 1) // 2 - (-BEFORE // 2) + 1):
        q = -BEFORE // 2 + i
        e, o = _pairs(x_ptr, base, c0, Q + q, s_mask, C, sc, COMPUTE, BLOCK_C)
        e2 = e * e
        o2 = o * o
        # even channel 2p: d = 2q (from e) and 2q + 1 (from o); odd channel 2p + 1: d = 2q - 1, 2q
        if 2 * q >= -BEFORE and 2 * q <= AFTER:
            even_sum += e2
            odd_sum += o2
        if 2 * q + 1 >= -BEFORE and 2 * q + 1 <= AFTER:
            even_sum += o2
        if 2 * q - 1 >= -BEFORE and 2 * q - 1 <= AFTER:
            odd_sum += e2
    return k_over + alpha_over_n * even_sum, k_over + alpha_over_n * odd_sum


@triton.jit
def _pow_neg(s, beta):
    return tl.exp2(-beta * tl.log2(s))


@triton.jit
def _lrn_kernel(x_ptr, y_ptr, dy_ptr, out_ptr, N, C, S,
                # strides of x, y, dy and the output (y forward, dx backward)
                xsn, xsc, xss, ysn, ysc, yss, gsn, gsc, gss, osn, osc, oss,
                lrn_alpha: tl.float64, lrn_beta: tl.float64, lrn_k: tl.float64, alpha: tl.float64,
                beta: tl.float64, LRN_N: tl.constexpr, PAIRS: tl.constexpr, BACKWARD: tl.constexpr,
                HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_S: tl.constexpr,
                BLOCK_C: tl.constexpr):
    # scalars in COMPUTE
    lrn_alpha, lrn_beta = tl.full([], lrn_alpha, COMPUTE), tl.full([], lrn_beta, COMPUTE)
    lrn_k = tl.full([], lrn_k, COMPUTE)
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to (n, positions, channels)
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_C)
    tiles_s = tl.cdiv(S, BLOCK_S)
    c0 = (pid % tiles_c) * BLOCK_C
    c = c0 + tl.arange(0, BLOCK_C)
    rest = pid // tiles_c
    s = (rest % tiles_s) * BLOCK_S + tl.arange(0, BLOCK_S)
    n = rest // tiles_s
    if BIG:  # every offset term in int64 (common.wide): s * xss of one big image alone can pass 2^31
        n = n.to(tl.int64)
        xsn, xsc, xss, ysn, ysc, yss = wide((xsn, xsc, xss, ysn, ysc, yss))
        gsn, gsc, gss, osn, osc, oss = wide((gsn, gsc, gss, osn, osc, oss))
    s_mask = s < S
    mask = s_mask[:, None] & (c < C)[None, :]
    alpha_over_n = lrn_alpha / LRN_N
    x_base = n * xsn + s[:, None] * xss
    y_base = n * ysn + s[:, None] * yss
    g_base = n * gsn + s[:, None] * gss
    BEFORE: tl.constexpr = (LRN_N - 1) // 2
    AFTER: tl.constexpr = LRN_N // 2
    if PAIRS:
        se, so = _pair_window_scale(x_ptr, x_base, c0, 0, s_mask, C, xsc, lrn_k, alpha_over_n, LRN_N, COMPUTE,
                                    BLOCK_C)
        xe, xo = _pairs(x_ptr, x_base, c0, 0, s_mask, C, xsc, COMPUTE, BLOCK_C)
        if BACKWARD:
            # sum over j = c + d, d in [-AFTER, BEFORE], of dy_j y_j / s_j, by halves as above
            ge, go = _pairs(dy_ptr, g_base, c0, 0, s_mask, C, gsc, COMPUTE, BLOCK_C)
            back_e = tl.zeros([BLOCK_S, BLOCK_C // 2], COMPUTE)
            back_o = tl.zeros([BLOCK_S, BLOCK_C // 2], COMPUTE)
            for i in tl.static_range((BEFORE + 1) // 2 - (-AFTER // 2) + 1):
                q = -AFTER // 2 + i
                sqe, sqo = _pair_window_scale(x_ptr, x_base, c0, q, s_mask, C, xsc, lrn_k, alpha_over_n, LRN_N,
                                              COMPUTE, BLOCK_C)
                dye, dyo = _pairs(dy_ptr, g_base, c0, q, s_mask, C, gsc, COMPUTE, BLOCK_C)
                ye, yo = _pairs(y_ptr, y_base, c0, q, s_mask, C, ysc, COMPUTE, BLOCK_C)
                te = dye * ye / sqe
                to = dyo * yo / sqo
                if 2 * q >= -AFTER and 2 * q <= BEFORE:
                    back_e += te
                    back_o += to
                if 2 * q + 1 >= -AFTER and 2 * q + 1 <= BEFORE:
                    back_e += to
                if 2 * q - 1 >= -AFTER and 2 * q - 1 <= BEFORE:
                    back_o += te
            coef = 2.0 * lrn_alpha * lrn_beta / LRN_N
            out_e = ge * _pow_neg(se, lrn_beta) - coef * xe * back_e
            out_o = go * _pow_neg(so, lrn_beta) - coef * xo * back_o
        else:
            out_e = xe * _pow_neg(se, lrn_beta)
            out_o = xo * _pow_neg(so, lrn_beta)
        out = tl.reshape(tl.join(out_e, out_o), [BLOCK_S, BLOCK_C])
    else:
        scale = _window_scale(x_ptr, x_base, c, s_mask, C, xsc, lrn_k, alpha_over_n, LRN_N, COMPUTE)
        x = _load_shifted(x_ptr, x_base, c, s_mask, C, xsc, COMPUTE)
        if BACKWARD:
            dy = _load_shifted(dy_ptr, g_base, c, s_mask, C, gsc, COMPUTE)
            back = tl.zeros([BLOCK_S, BLOCK_C], COMPUTE)
            for j in tl.static_range(LRN_N):
                cj = c + BEFORE - j
                s_j = _window_scale(x_ptr, x_base, cj, s_mask, C, xsc, lrn_k, alpha_over_n, LRN_N, COMPUTE)
                y_j = _load_shifted(y_ptr, y_base, cj, s_mask, C, ysc, COMPUTE)
                g_j = _load_shifted(dy_ptr, g_base, cj, s_mask, C, gsc, COMPUTE)
                back += g_j * y_j / s_j
            out = dy * _pow_neg(scale, lrn_beta) - (2.0 * lrn_alpha * lrn_beta / LRN_N) * x * back
        else:
            out = x * _pow_neg(scale, lrn_beta)
    # blend and store
    out = out * alpha
    o_off = n * osn + s[:, None] * oss + (c * osc)[None, :]
    if HAS_BETA:
        out += tl.load(out_ptr + o_off, mask=mask, other=0.0).to(COMPUTE) * beta
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=mask)


# -- one-read kernels (FAST_LRN) ---------------------------------------------------------
@triton.jit
def _pow_neg_fast(s, beta, APPROX_LOG2: tl.constexpr):
    """s^-beta; APPROX_LOG2 (float32 on a GPU) takes log2 from the MUFU (lg2.approx,
    absolute error ~2^-22: ~1e-7 relative on the result) instead of tl.log2's ~20-instruction
    accurate polynomial, which made the kernels instruction-bound."""
    if APPROX_LOG2:
        lg = tl.inline_asm_elementwise("lg2.approx.f32 $0, $1;", "=r,r", [s], dtype=tl.float32, is_pure=True,
                                       pack=1)
    else:
        lg = tl.log2(s)
    return tl.exp2(-beta * lg)


@triton.jit
def _ring_sum_sq(window, k_over, alpha_over_n, LRN_N: tl.constexpr):
    """k + alpha/n * sum of squares of the n values of window, in channel order."""
    total = tl.zeros_like(window[0])
    for j in tl.static_range(LRN_N):
        total += window[j] * window[j]
    return k_over + alpha_over_n * total


@triton.jit
def _plane(ptr, base, ch, s_mask, lo, hi, sc, BIG: tl.constexpr, COMPUTE: tl.constexpr):
    """Plane ch of a [BLOCK_S] position run, zero unless lo <= ch < hi."""
    if BIG:
        ch = tl.cast(ch, tl.int64)  # (tl.cast: under the interpreter a loop's ch is a Python int)
    return tl.load(ptr + base + ch * sc, mask=s_mask & (ch >= lo) & (ch < hi), other=0.0).to(COMPUTE)


@triton.jit
def _plane_raw(ptr, base, ch, s_mask, lo, hi, sc, BIG: tl.constexpr):
    """_plane in the data's dtype: a prefetched plane is converted where it is used, so
    its load is waited for there (a step or more later), not in the step that issued it."""
    if BIG:
        ch = tl.cast(ch, tl.int64)  # (tl.cast: under the interpreter a loop's ch is a Python int)
    return tl.load(ptr + base + ch * sc, mask=s_mask & (ch >= lo) & (ch < hi), other=0.0)


@triton.jit
def _lrn_planes_kernel(x_ptr, y_ptr, dy_ptr, out_ptr, C, S,
                       # strides of x, y, dy and the output (y forward, dx backward)
                       xsn, xsc, xss, ysn, ysc, yss, gsn, gsc, gss, osn, osc, oss,
                       lrn_alpha: tl.float64, lrn_beta: tl.float64, lrn_k: tl.float64, alpha: tl.float64,
                       beta: tl.float64,
                       # what to compute
                       LRN_N: tl.constexpr, BACKWARD: tl.constexpr, READ_Y: tl.constexpr,
                       HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr, APPROX_LOG2: tl.constexpr,
                       # tile: BLOCK_S positions x CHUNK_C channels, walked one channel at a time,
                       # loads issued PREFETCH steps ahead
                       BLOCK_S: tl.constexpr, CHUNK_C: tl.constexpr, PREFETCH: tl.constexpr):
    """Channels strided: walk a run of planes with the window's planes in registers."""
    BEFORE: tl.constexpr = (LRN_N - 1) // 2
    AFTER: tl.constexpr = LRN_N // 2
    lrn_alpha, lrn_beta = tl.full([], lrn_alpha, COMPUTE), tl.full([], lrn_beta, COMPUTE)
    lrn_k = tl.full([], lrn_k, COMPUTE)
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    alpha_over_n = lrn_alpha / LRN_N
    # map the program to (n, positions, channel chunk); chunks of one run are neighbours
    pid = tl.program_id(0)
    chunks = tl.cdiv(C, CHUNK_C)
    c_begin = (pid % chunks) * CHUNK_C
    c_end = tl.minimum(c_begin + CHUNK_C, C)
    rest = pid // chunks
    s = (rest % tl.cdiv(S, BLOCK_S)) * BLOCK_S + tl.arange(0, BLOCK_S)
    n = rest // tl.cdiv(S, BLOCK_S)
    if BIG:
        n = n.to(tl.int64)
        s = s.to(tl.int64)
    s_mask = s < S
    x_base = n * xsn + s * xss
    o_base = n * osn + s * oss
    zero = tl.zeros([BLOCK_S], COMPUTE)
    # ring of x planes; the first plane of a step's window leaves at the step's end
    xring = (zero,) * (LRN_N - 1)
    if BACKWARD:
        y_base = n * ysn + s * yss
        g_base = n * gsn + s * gss
        coef = 2.0 * lrn_alpha * lrn_beta / LRN_N
        # step c: x planes [c, c + n - 1] give s_j of j = c + BEFORE, whose term
        # t_j = dy_j y_j / s_j joins the ring of j in [c - AFTER, c + BEFORE] (dx_c's sum)
        if LRN_N > 1:
            for c in range(c_begin - 2 * (LRN_N - 1), c_begin - (LRN_N - 1)):  # x planes only
                xring = xring[1:] + (_plane(x_ptr, x_base, c + LRN_N - 1, s_mask, 0, C, xsc, BIG, COMPUTE),)
        tring = (zero,) * (LRN_N - 1)
        qring = (zero,) * BEFORE  # dy_j s_j^-beta of j in [c, c + BEFORE)
        lo_j = tl.maximum(c_begin - AFTER, 0)
        first = c_begin - (LRN_N - 1)
        x_hi = tl.minimum(c_end + LRN_N - 1, C)
        g_hi = tl.minimum(c_end + BEFORE, C)
        pend_x = ()  # x planes c + n - 1 + [0, PREFETCH) and dy (y) planes c + BEFORE + [0, PREFETCH) in flight
        pend_g = ()
        pend_y = ()
        for d in tl.static_range(PREFETCH):
            pend_x = pend_x + (_plane_raw(x_ptr, x_base, first + LRN_N - 1 + d, s_mask, 0, x_hi, xsc, BIG),)
            pend_g = pend_g + (_plane_raw(dy_ptr, g_base, first + BEFORE + d, s_mask, lo_j, g_hi, gsc, BIG),)
            if READ_Y:
                pend_y = pend_y + (_plane_raw(y_ptr, y_base, first + BEFORE + d, s_mask, lo_j, g_hi, ysc, BIG),)
        # unrolled PREFETCH steps at a time: the tuples rotate back to their places by the
        # loop's end, so no register moves wait on the loads in flight
        for c0 in range(first, c_end, PREFETCH):
            for u in tl.static_range(PREFETCH):
                c = c0 + u
                xw = xring + (pend_x[0].to(COMPUTE),)
                g_j = pend_g[0].to(COMPUTE)
                pend_x = pend_x[1:] + (_plane_raw(x_ptr, x_base, c + LRN_N - 1 + PREFETCH, s_mask, 0, x_hi, xsc,
                                                  BIG),)
                pend_g = pend_g[1:] + (_plane_raw(dy_ptr, g_base, c + BEFORE + PREFETCH, s_mask, lo_j, g_hi, gsc,
                                                  BIG),)
                s_j = _ring_sum_sq(xw, lrn_k, alpha_over_n, LRN_N)
                p_j = _pow_neg_fast(s_j, lrn_beta, APPROX_LOG2)
                if READ_Y:
                    y_j = pend_y[0].to(COMPUTE)
                    pend_y = pend_y[1:] + (_plane_raw(y_ptr, y_base, c + BEFORE + PREFETCH, s_mask, lo_j, g_hi, ysc,
                                                      BIG),)
                else:
                    y_j = xw[BEFORE] * p_j
                tw = tring + (g_j * y_j / s_j,)
                qw = qring + (g_j * p_j,)
                back = tw[0]
                for j in tl.static_range(1, LRN_N):
                    back += tw[j]
                out = (qw[0] - coef * xw[0] * back) * alpha
                cc = c.to(tl.int64) if BIG else c
                mask = s_mask & (c >= c_begin) & (c < c_end)
                if HAS_BETA:
                    out += tl.load(out_ptr + o_base + cc * osc, mask=mask, other=0.0).to(COMPUTE) * beta
                tl.store(out_ptr + o_base + cc * osc, out.to(out_ptr.dtype.element_ty), mask=mask)
                xring = xw[1:]
                tring = tw[1:]
                qring = qw[1:]
    else:
        if LRN_N > 1:
            for c in range(c_begin - LRN_N + 1, c_begin):  # the planes before the chunk: loads only
                xring = xring[1:] + (_plane(x_ptr, x_base, c + AFTER, s_mask, 0, C, xsc, BIG, COMPUTE),)
        x_hi = tl.minimum(c_end + AFTER, C)
        pend = ()  # planes c + AFTER + [0, PREFETCH), loads in flight
        for d in tl.static_range(PREFETCH):
            pend = pend + (_plane_raw(x_ptr, x_base, c_begin + AFTER + d, s_mask, 0, x_hi, xsc, BIG),)
        for c0 in range(c_begin, c_end, PREFETCH):  # unrolled as in the backward
            for u in tl.static_range(PREFETCH):
                c = c0 + u
                xw = xring + (pend[0].to(COMPUTE),)  # planes [c - BEFORE, c + AFTER]
                pend = pend[1:] + (_plane_raw(x_ptr, x_base, c + AFTER + PREFETCH, s_mask, 0, x_hi, xsc, BIG),)
                scale = _ring_sum_sq(xw, lrn_k, alpha_over_n, LRN_N)
                out = xw[BEFORE] * _pow_neg_fast(scale, lrn_beta, APPROX_LOG2) * alpha
                cc = c.to(tl.int64) if BIG else c
                mask = s_mask & (c < c_end)
                if HAS_BETA:
                    out += tl.load(out_ptr + o_base + cc * osc, mask=mask, other=0.0).to(COMPUTE) * beta
                tl.store(out_ptr + o_base + cc * osc, out.to(out_ptr.dtype.element_ty), mask=mask)
                xring = xw[1:]


@triton.jit
def _lanes(v, W: tl.constexpr):
    """The W channels of a [BLOCK_S, BLOCK_G, W] tile as W [BLOCK_S, BLOCK_G] tensors, in
    channel order (split in registers: W is each thread's own vector)."""
    if W == 1:
        r = (tl.reshape(v, [v.shape[0], v.shape[1]]),)
    elif W == 2:
        a, b = tl.split(v)
        r = (a, b)
    elif W == 4:
        e, o = tl.split(tl.reshape(v, [v.shape[0], v.shape[1], 2, 2]))
        e0, e2 = tl.split(e)
        o1, o3 = tl.split(o)
        r = (e0, o1, e2, o3)
    else:
        e, o = tl.split(tl.reshape(v, [v.shape[0], v.shape[1], 4, 2]))
        e0, e1 = tl.split(tl.reshape(e, [v.shape[0], v.shape[1], 2, 2]))
        o0, o1 = tl.split(tl.reshape(o, [v.shape[0], v.shape[1], 2, 2]))
        v0, v4 = tl.split(e0)
        v2, v6 = tl.split(e1)
        v1, v5 = tl.split(o0)
        v3, v7 = tl.split(o1)
        r = (v0, v1, v2, v3, v4, v5, v6, v7)
    return r


@triton.jit
def _join8(r):
    """Inverse of _lanes for W = 8: [BLOCK_S, BLOCK_G, 8]."""
    return tl.join(tl.join(tl.join(r[0], r[4]), tl.join(r[2], r[6])),
                   tl.join(tl.join(r[1], r[5]), tl.join(r[3], r[7])))


@triton.jit
def _load_lanes(ptr, base, first, W: tl.constexpr, s_mask, C, sc, COMPUTE: tl.constexpr):
    """Channels first + [0, W) of every group as W lane tensors, zero outside [0, C)."""
    c = first[None, :, None] + tl.arange(0, W)[None, None, :]
    mask = s_mask[:, None, None] & (c >= 0) & (c < C)
    return _lanes(tl.load(ptr + base[:, None, None] + c * sc, mask=mask, other=0.0).to(COMPUTE), W)


@triton.jit
def _load_window(ptr, base, cg, HL: tl.constexpr, PL: tl.constexpr, HR: tl.constexpr, PR: tl.constexpr,
                 s_mask, C, sc, COMPUTE: tl.constexpr):
    """Channels cg - HL .. cg + 7 + HR of each group as lane tensors: the group's vector
    plus the halos, loaded PL (PR) wide (a power of two >= HL (HR), 0 for none)."""
    G: tl.constexpr = 8
    r = _load_lanes(ptr, base, cg, G, s_mask, C, sc, COMPUTE)
    if HL > 0:
        r = _load_lanes(ptr, base, cg - PL, PL, s_mask, C, sc, COMPUTE)[PL - HL:] + r
    if HR > 0:
        r = r + _load_lanes(ptr, base, cg + G, PR, s_mask, C, sc, COMPUTE)[:HR]
    return r


@triton.jit
def _lrn_lanes_kernel(x_ptr, y_ptr, dy_ptr, out_ptr, C, S,
                      # strides of x, y, dy and the output (y forward, dx backward)
                      xsn, xsc, xss, ysn, ysc, yss, gsn, gsc, gss, osn, osc, oss,
                      lrn_alpha: tl.float64, lrn_beta: tl.float64, lrn_k: tl.float64, alpha: tl.float64,
                      beta: tl.float64,
                      # what to compute
                      LRN_N: tl.constexpr, BACKWARD: tl.constexpr, READ_Y: tl.constexpr,
                      HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr, APPROX_LOG2: tl.constexpr,
                      # halo load widths (powers of two): x left/right, dy (and y) left/right
                      PXL: tl.constexpr, PXR: tl.constexpr, PGL: tl.constexpr, PGR: tl.constexpr,
                      # tile: BLOCK_S positions x BLOCK_G groups of 8 channels
                      BLOCK_S: tl.constexpr, BLOCK_G: tl.constexpr):
    """Channels contiguous: each thread's 8-channel vector split into lanes; the window
    sums are lane arithmetic, the neighbours beyond the group two halo loads."""
    G: tl.constexpr = 8
    BEFORE: tl.constexpr = (LRN_N - 1) // 2
    AFTER: tl.constexpr = LRN_N // 2
    lrn_alpha, lrn_beta = tl.full([], lrn_alpha, COMPUTE), tl.full([], lrn_beta, COMPUTE)
    lrn_k = tl.full([], lrn_k, COMPUTE)
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    alpha_over_n = lrn_alpha / LRN_N
    # map the program to (n, positions, channel groups)
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_G * G)
    cg = (pid % tiles_c) * (BLOCK_G * G) + tl.arange(0, BLOCK_G) * G  # each group's first channel
    rest = pid // tiles_c
    s = (rest % tl.cdiv(S, BLOCK_S)) * BLOCK_S + tl.arange(0, BLOCK_S)
    n = rest // tl.cdiv(S, BLOCK_S)
    if BIG:
        n = n.to(tl.int64)
        s = s.to(tl.int64)
        cg = cg.to(tl.int64)
    s_mask = s < S
    x_base = n * xsn + s * xss
    if BACKWARD:
        # x over [cg - (n-1), cg + 7 + (n-1)]: the s_j of j in [cg - AFTER, cg + 7 + BEFORE]
        xs = _load_window(x_ptr, x_base, cg, LRN_N - 1, PXL, LRN_N - 1, PXR, s_mask, C, xsc, COMPUTE)
        gs = _load_window(dy_ptr, n * gsn + s * gss, cg, AFTER, PGL, BEFORE, PGR, s_mask, C, gsc, COMPUTE)
        if READ_Y:
            ys = _load_window(y_ptr, n * ysn + s * yss, cg, AFTER, PGL, BEFORE, PGR, s_mask, C, ysc, COMPUTE)
        # m = j - (cg - AFTER): s_m from xs[m + d], x_j = xs[m + BEFORE], dy_j = gs[m]
        terms = ()
        dyp = ()
        for m in tl.static_range(G + LRN_N - 1):
            s_m = _ring_sum_sq(xs[m:m + LRN_N], lrn_k, alpha_over_n, LRN_N)
            p_m = _pow_neg_fast(s_m, lrn_beta, APPROX_LOG2)
            if READ_Y:
                y_m = ys[m]
            else:
                y_m = xs[m + BEFORE] * p_m
            terms = terms + (gs[m] * y_m / s_m,)
            dyp = dyp + (gs[m] * p_m,)
        coef = 2.0 * lrn_alpha * lrn_beta / LRN_N
        outs = ()
        for i in tl.static_range(G):
            # channel i: dy_i p_i - coef x_i sum of terms j in [i - AFTER, i + BEFORE] (m in [i, i + n))
            back = terms[i]
            for j in tl.static_range(1, LRN_N):
                back += terms[i + j]
            outs = outs + (dyp[i + AFTER] - coef * xs[i + LRN_N - 1] * back,)
    else:
        xs = _load_window(x_ptr, x_base, cg, BEFORE, PXL, AFTER, PXR, s_mask, C, xsc, COMPUTE)
        outs = ()
        for i in tl.static_range(G):
            scale = _ring_sum_sq(xs[i:i + LRN_N], lrn_k, alpha_over_n, LRN_N)
            outs = outs + (xs[i + BEFORE] * _pow_neg_fast(scale, lrn_beta, APPROX_LOG2),)
    # blend and store one vector per group
    out = tl.reshape(_join8(outs), [BLOCK_S, BLOCK_G, G]) * alpha
    c = cg[None, :, None] + tl.arange(0, G)[None, None, :]
    o_off = (n * osn + s * oss)[:, None, None] + c * osc
    mask = s_mask[:, None, None] & (c < C)
    if HAS_BETA:
        out += tl.load(out_ptr + o_off, mask=mask, other=0.0).to(COMPUTE) * beta
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=mask)


def _pow2_at_least(h):
    return 0 if h <= 0 else triton.next_power_of_2(h)


def _fast_ok(x, lrn_n, backward):
    """The one-read kernels cover n <= 16 forward; backward NHWC needs n - 1 <= 8 (the x
    halo is read from one neighbouring group), NCHW backward n <= 9 (registers)."""
    return FAST_LRN and (not backward or int(lrn_n) <= 9)


def _launch_fast(xv, yv, gv, ov, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha, beta, has_beta, backward, compute):
    N, C, S = ncs_dims(xv)
    read_y = bool(backward and BWD_READS_Y)
    args = (xv, yv, gv, ov, C, S, *ncs_strides(xv), *ncs_strides(yv), *ncs_strides(gv), *ncs_strides(ov),
            float(lrn_alpha), float(lrn_beta), float(lrn_k), alpha, beta)
    consts = dict(LRN_N=lrn_n, BACKWARD=backward, READ_Y=read_y, HAS_BETA=has_beta, BIG=needs_int64(xv, ov),
                  COMPUTE=compute, APPROX_LOG2=APPROX_LOG2 and compute == tl.float32 and not _INTERPRET)
    before, after = (lrn_n - 1) // 2, lrn_n // 2
    if channels_last(xv) and C > 1:
        tile = LANES_TILE or (1024 if backward else LANES_FORWARD_TILE)
        block_g = min(triton.next_power_of_2(cdiv(C, GROUP)), LANES_MAX_GROUPS)
        block_s = max(1, min(triton.next_power_of_2(S), tile // (block_g * GROUP)))
        halo_x = (lrn_n - 1, lrn_n - 1) if backward else (before, after)
        grid = (N * cdiv(S, block_s) * cdiv(C, block_g * GROUP),)
        _lrn_lanes_kernel[grid](*args, **consts, PXL=_pow2_at_least(halo_x[0]), PXR=_pow2_at_least(halo_x[1]),
                                PGL=_pow2_at_least(after), PGR=_pow2_at_least(before), BLOCK_S=block_s,
                                BLOCK_G=block_g, num_warps=4 if block_s * block_g * GROUP <= 1024 else 8)
        return
    # channels strided: 16 bytes per thread, fewer when the rings get long
    vec = max(1, 16 // xv.element_size())
    ring = (3 * lrn_n if backward else lrn_n)
    while vec > 1 and vec * ring > 64:
        vec //= 2
    warps = NCHW_WARPS
    if warps is None:  # the fewest idle lanes in the last position tile, ties to more warps
        warps = min((1, 2, 4), key=lambda w: (cdiv(S, vec * 32 * w) * vec * 32 * w, -w))
    block_s = vec * 32 * warps
    prefetch = NCHW_PREFETCH or min(lrn_n, 8)  # n: the x ring rotates back in place too
    chunk = NCHW_CHUNK_C or (64 if backward else 32)
    chunk = max(1, round(chunk / prefetch)) * prefetch  # whole unrolled groups in all but the last chunk
    grid = (N * cdiv(S, block_s) * cdiv(C, chunk),)
    _lrn_planes_kernel[grid](*args, **consts, BLOCK_S=block_s, CHUNK_C=chunk, PREFETCH=prefetch,
                             num_warps=warps)


def _check(lrn_n):
    if not 1 <= int(lrn_n) <= 16:
        raise BadParamError(f"lrn n must be in [1, 16], got {lrn_n}")


def _launch(x, y, dy, out, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha, beta, backward):
    alpha, beta, has_beta = blend_args(alpha, beta)
    staging = NCSStaging()
    xv = staging.input(x)
    yv = staging.input(y, like=xv) if y is not None else xv
    gv = staging.input(dy, like=xv) if dy is not None else xv
    ov = staging.output(out, like=xv, read=has_beta)
    if _fast_ok(xv, lrn_n, backward):
        _launch_fast(xv, yv, gv, ov, int(lrn_n), lrn_alpha, lrn_beta, lrn_k, alpha, beta, has_beta, backward,
                     compute_dtype(x))
        staging.finish()
        return
    N, C, S = ncs_dims(xv)
    pairs = channels_last(xv) and C > 1
    tile = TILE // 2 if backward else TILE  # the backward holds n shifted windows: fewer values per program
    if pairs:
        block_c = min(triton.next_power_of_2(C), 128)
        block_s = max(1, min(triton.next_power_of_2(S), tile // block_c))
    else:
        block_s = min(triton.next_power_of_2(S), 128)
        block_c = max(1, min(triton.next_power_of_2(C), tile // block_s))
    grid = (N * cdiv(S, block_s) * cdiv(C, block_c),)
    _lrn_kernel[grid](xv, yv, gv, ov, N, C, S, *ncs_strides(xv), *ncs_strides(yv), *ncs_strides(gv),
                      *ncs_strides(ov), float(lrn_alpha), float(lrn_beta), float(lrn_k), alpha, beta,
                      LRN_N=int(lrn_n), PAIRS=pairs, BACKWARD=backward, HAS_BETA=has_beta,
                      BIG=needs_int64(xv, ov), COMPUTE=compute_dtype(x), BLOCK_S=block_s, BLOCK_C=block_c,
                      num_warps=4 if block_s * block_c <= 1024 else 8)
    staging.finish()


def lrn_cross_channel_forward(x, y, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha=1.0, beta=0.0) -> None:
    """y = alpha * x * (k + alpha_lrn/n * window sum of x^2)^-beta_lrn + beta * y."""
    _check(lrn_n)
    check_dtypes(x=x, y=y)
    check_same_shape(x=x, y=y)
    if x.numel():
        _launch(x, None, None, y, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha, beta, False)


def lrn_cross_channel_backward(y, dy, x, dx, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha=1.0, beta=0.0) -> None:
    """dx = alpha * LRN'(x)^T dy + beta * dx, using the forward output y."""
    _check(lrn_n)
    check_dtypes(x=x, y=y, dy=dy, dx=dx)
    check_same_shape(x=x, y=y, dy=dy, dx=dx)
    if x.numel():
        _launch(x, y, dy, dx, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha, beta, True)
