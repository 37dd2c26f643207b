"""Cross-channel LRN forward and backward in Triton.

y = x * s^-beta with s = k + alpha/n * sum of x^2 over the channel window
[c - (n-1)//2, c + n//2] (clipped at the edges). Each program owns a
[BLOCK_S positions, BLOCK_C channels] tile of the (N, C, S) view and sums the window
with n shifted loads (n <= 16; the neighbours come from L1/L2). The backward sum over
the windows that contain c needs each neighbour's s, which it recomputes the same way,
so no temporary is written."""
from __future__ import annotations

import triton
import triton.language as tl

from ..errors import BadParamError
from .layer_utils import (NCSStaging, blend_args, channels_last, check_dtypes, check_same_shape, compute_dtype,
                          ncs_dims, ncs_strides, needs_int64)


@triton.jit
def _window_scale(x_ptr, base, c, s_mask, C, sc, lrn_n, k_over, alpha_over_n, COMPUTE: tl.constexpr):
    """k + alpha/n * sum of x^2 over channel c's window, for a [BLOCK_S, BLOCK_C] tile."""
    total = tl.zeros(base.shape, COMPUTE)
    before = (lrn_n - 1) // 2
    for j in range(lrn_n):
        cj = c - before + j
        mask = s_mask[:, None] & ((cj >= 0) & (cj < C))[None, :]
        v = tl.load(x_ptr + base + (cj * sc)[None, :], mask=mask, other=0.0).to(COMPUTE)
        total += v * v
    return k_over + alpha_over_n * total


@triton.jit
def _lrn_kernel(x_ptr, y_ptr, dy_ptr, out_ptr, N, C, S,
                xsn, xsc, xss, ysn, ysc, yss, gsn, gsc, gss, osn, osc, oss,
                lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha, beta,
                BACKWARD: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_C)
    tiles_s = tl.cdiv(S, BLOCK_S)
    c = (pid % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)
    rest = pid // tiles_c
    s = (rest % tiles_s) * BLOCK_S + tl.arange(0, BLOCK_S)
    n = rest // tiles_s
    if BIG:
        n = n.to(tl.int64)
    s_mask = s < S
    c_mask = c < C
    mask = s_mask[:, None] & c_mask[None, :]
    alpha_over_n = lrn_alpha / lrn_n
    x_base = n * xsn + (s * xss)[:, None] + tl.zeros([BLOCK_S, BLOCK_C], tl.int32)
    scale = _window_scale(x_ptr, x_base, c, s_mask, C, xsc, lrn_n, lrn_k, alpha_over_n, COMPUTE)
    x = tl.load(x_ptr + x_base + (c * xsc)[None, :], mask=mask, other=0.0).to(COMPUTE)
    if BACKWARD:
        # dx = dy * s^-beta - 2 alpha beta / n * x * sum over windows containing c of dy * y / s
        y_base = n * ysn + (s * yss)[:, None]
        g_base = n * gsn + (s * gss)[:, None]
        dy = tl.load(dy_ptr + g_base + (c * gsc)[None, :], mask=mask, other=0.0).to(COMPUTE)
        back = tl.zeros([BLOCK_S, BLOCK_C], COMPUTE)
        after = (lrn_n - 1) // 2
        for j in range(lrn_n):
            cj = c + after - j
            ok = s_mask[:, None] & ((cj >= 0) & (cj < C))[None, :]
            s_j = _window_scale(x_ptr, x_base, cj, s_mask, C, xsc, lrn_n, lrn_k, alpha_over_n, COMPUTE)
            y_j = tl.load(y_ptr + y_base + (cj * ysc)[None, :], mask=ok, other=0.0).to(COMPUTE)
            g_j = tl.load(dy_ptr + g_base + (cj * gsc)[None, :], mask=ok, other=0.0).to(COMPUTE)
            back += tl.where(ok, g_j * y_j / s_j, 0.0)
        out = dy * tl.exp2(-lrn_beta * tl.log2(scale)) - (2.0 * lrn_alpha * lrn_beta / lrn_n) * x * back
    else:
        out = x * tl.exp2(-lrn_beta * tl.log2(scale))
    out = out * alpha
    o_off = n * osn + (s * oss)[:, None] + (c * osc)[None, :]
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
    if channels_last(xv):
        block_c = min(triton.next_power_of_2(C), 64)
        block_s = max(1, min(triton.next_power_of_2(S), 1024 // block_c))
    else:
        block_s = min(triton.next_power_of_2(S), 256)
        block_c = max(1, min(triton.next_power_of_2(C), 1024 // block_s))
    grid = (N * triton.cdiv(S, block_s) * triton.cdiv(C, block_c),)
    _lrn_kernel[grid](xv, yv, gv, ov, N, C, S, *ncs_strides(xv), *ncs_strides(yv), *ncs_strides(gv),
                      *ncs_strides(ov), int(lrn_n), float(lrn_alpha), float(lrn_beta), float(lrn_k), alpha, beta,
                      BACKWARD=backward, HAS_BETA=has_beta, BIG=needs_int64(xv, ov), COMPUTE=compute_dtype(x),
                      BLOCK_S=block_s, BLOCK_C=block_c, num_warps=4)
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
