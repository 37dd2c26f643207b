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
the LRN constants unrounded."""
from __future__ import annotations

import triton
import triton.language as tl

from ..errors import BadParamError
from .layer_utils import (NCSStaging, blend_args, channels_last, check_dtypes, check_same_shape, compute_dtype,
                          ncs_dims, ncs_strides, needs_int64)

TILE = 2048


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
    if BIG:
        n = n.to(tl.int64)
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
    N, C, S = ncs_dims(xv)
    pairs = channels_last(xv) and C > 1
    tile = TILE // 2 if backward else TILE  # the backward holds n shifted windows: fewer values per program
    if pairs:
        block_c = min(triton.next_power_of_2(C), 128)
        block_s = max(1, min(triton.next_power_of_2(S), tile // block_c))
    else:
        block_s = min(triton.next_power_of_2(S), 128)
        block_c = max(1, min(triton.next_power_of_2(C), tile // block_s))
    grid = (N * triton.cdiv(S, block_s) * triton.cdiv(C, block_c),)
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
