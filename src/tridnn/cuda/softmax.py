"""Softmax forward and backward in Triton (FAST, ACCURATE, LOG; INSTANCE and CHANNEL).

Both modes are one geometry: rows indexed by (outer, inner), each reduced along k.
CHANNEL mode reduces over C for each (n, spatial position): outer = n, inner = s,
k = c. INSTANCE mode reduces over C*spatial for each n: outer = n, k runs over the
channel and spatial dims merged into one stride. Each program holds a
[BLOCK_I rows, BLOCK_K] tile; the tile is laid out along whichever of inner or k is
contiguous, so NCHW channel softmax reads 128-wide runs of positions and NHWC (or
a plain 2-D row softmax) reads whole rows. A row that fits in registers is read
once and written once; longer rows take an online max/sum pass, then a write pass.
Everything is computed in COMPUTE (float32, or float64 for float64 data); alpha and
beta are float64 kernel arguments converted once to COMPUTE."""
from __future__ import annotations

import triton
import triton.language as tl

from ..errors import BadParamError
from .common import cdiv
from .layer_utils import (NCSStaging, blend_args, check_dtypes, check_same_shape, compute_dtype,
                          ncs_dims, ncs_strides, needs_int64)

FAST, ACCURATE, LOG = 0, 1, 2
INSTANCE, CHANNEL = 0, 1
MAX_TILE = 8192  # elements one program keeps in registers


@triton.jit
def _tile_offsets(o, i, k, so, si, sk):
    """Offsets of the [i, k] tile of outer index o, every term in o's integer type (int64
    when BIG: k * sk of one big image alone can pass 2^31)."""
    return o * so + i.to(o.dtype)[:, None] * si + k.to(o.dtype)[None, :] * sk


@triton.jit
def _program_rows(I, BIG: tl.constexpr, BLOCK_I: tl.constexpr):
    """This program's outer index o (int64 when BIG) and its BLOCK_I rows i of I (with
    their mask): programs walk the I tiles of one outer index, then the next."""
    pid = tl.program_id(0)
    tiles_i = tl.cdiv(I, BLOCK_I)
    o = pid // tiles_i
    if BIG:
        o = o.to(tl.int64)
    i = (pid % tiles_i) * BLOCK_I + tl.arange(0, BLOCK_I)
    return o, i, i < I


@triton.jit
def _softmax_forward_kernel(x_ptr, y_ptr, I, K, xso, xsi, xsk, yso, ysi, ysk, alpha: tl.float64, beta: tl.float64,
                            ALGO: tl.constexpr, HAS_BETA: tl.constexpr, SINGLE: tl.constexpr,
                            BIG: tl.constexpr, COMPUTE: tl.constexpr,
                            BLOCK_I: tl.constexpr, BLOCK_K: tl.constexpr):
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    o, i, i_mask = _program_rows(I, BIG, BLOCK_I)
    if SINGLE:
        k = tl.arange(0, BLOCK_K)
        mask = i_mask[:, None] & (k[None, :] < K)
        x = tl.load(x_ptr + _tile_offsets(o, i, k, xso, xsi, xsk), mask=mask,
                    other=float("-inf")).to(COMPUTE)
        if ALGO == 0:
            m = tl.zeros([BLOCK_I], COMPUTE)
        else:
            m = tl.max(x, axis=1)
            m = tl.where(m == float("-inf"), 0.0, m)
        e = tl.exp(x - m[:, None])
        total = tl.sum(e, axis=1)
        if ALGO == 2:
            y = x - m[:, None] - tl.log(total)[:, None]
        else:
            y = e / total[:, None]
        y = y * alpha
        y_off = _tile_offsets(o, i, k, yso, ysi, ysk)
        if HAS_BETA:
            y += tl.load(y_ptr + y_off, mask=mask, other=0.0).to(COMPUTE) * beta
        tl.store(y_ptr + y_off, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # pass 1: running max and rescaled running sum per lane (online softmax)
        m_run = tl.full([BLOCK_I, BLOCK_K], float("-inf"), COMPUTE)
        s_run = tl.zeros([BLOCK_I, BLOCK_K], COMPUTE)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask = i_mask[:, None] & (k[None, :] < K)
            x = tl.load(x_ptr + _tile_offsets(o, i, k, xso, xsi, xsk), mask=mask,
                        other=float("-inf")).to(COMPUTE)
            if ALGO == 0:
                s_run += tl.exp(x)
            else:
                m_new = tl.maximum(m_run, x)
                m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                s_run = s_run * tl.exp(m_run - m_safe) + tl.exp(x - m_safe)
                m_run = m_new
        if ALGO == 0:
            m = tl.zeros([BLOCK_I], COMPUTE)
            total = tl.sum(s_run, axis=1)
        else:
            m = tl.max(m_run, axis=1)
            m = tl.where(m == float("-inf"), 0.0, m)
            m_lane = tl.where(m_run == float("-inf"), 0.0, m_run)
            total = tl.sum(s_run * tl.exp(m_lane - m[:, None]), axis=1)
        log_total = tl.log(total)
        # pass 2: normalize and store
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask = i_mask[:, None] & (k[None, :] < K)
            x = tl.load(x_ptr + _tile_offsets(o, i, k, xso, xsi, xsk), mask=mask,
                        other=float("-inf")).to(COMPUTE)
            if ALGO == 2:
                y = x - m[:, None] - log_total[:, None]
            else:
                y = tl.exp(x - m[:, None]) / total[:, None]
            y = y * alpha
            y_off = _tile_offsets(o, i, k, yso, ysi, ysk)
            if HAS_BETA:
                y += tl.load(y_ptr + y_off, mask=mask, other=0.0).to(COMPUTE) * beta
            tl.store(y_ptr + y_off, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_kernel(y_ptr, dy_ptr, dx_ptr, I, K, yso, ysi, ysk, gso, gsi, gsk,
                             dso, dsi, dsk, alpha: tl.float64, beta: tl.float64,
                             ALGO: tl.constexpr, HAS_BETA: tl.constexpr, SINGLE: tl.constexpr,
                             BIG: tl.constexpr, COMPUTE: tl.constexpr,
                             BLOCK_I: tl.constexpr, BLOCK_K: tl.constexpr):
    """dx = y * (dy - sum(dy * y)) for softmax, dy - exp(y) * sum(dy) for log-softmax."""
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    o, i, i_mask = _program_rows(I, BIG, BLOCK_I)
    if SINGLE:
        k = tl.arange(0, BLOCK_K)
        mask = i_mask[:, None] & (k[None, :] < K)
        y = tl.load(y_ptr + _tile_offsets(o, i, k, yso, ysi, ysk), mask=mask, other=0.0).to(COMPUTE)
        dy = tl.load(dy_ptr + _tile_offsets(o, i, k, gso, gsi, gsk), mask=mask, other=0.0).to(COMPUTE)
        if ALGO == 2:
            dot = tl.sum(dy, axis=1)
            dx = dy - tl.exp(y) * dot[:, None]
        else:
            dot = tl.sum(dy * y, axis=1)
            dx = y * (dy - dot[:, None])
        dx = dx * alpha
        d_off = _tile_offsets(o, i, k, dso, dsi, dsk)
        if HAS_BETA:
            dx += tl.load(dx_ptr + d_off, mask=mask, other=0.0).to(COMPUTE) * beta
        tl.store(dx_ptr + d_off, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_I, BLOCK_K], COMPUTE)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask = i_mask[:, None] & (k[None, :] < K)
            dy = tl.load(dy_ptr + _tile_offsets(o, i, k, gso, gsi, gsk), mask=mask, other=0.0).to(COMPUTE)
            if ALGO == 2:
                acc += dy
            else:
                y = tl.load(y_ptr + _tile_offsets(o, i, k, yso, ysi, ysk), mask=mask, other=0.0).to(COMPUTE)
                acc += dy * y
        dot = tl.sum(acc, axis=1)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask = i_mask[:, None] & (k[None, :] < K)
            y = tl.load(y_ptr + _tile_offsets(o, i, k, yso, ysi, ysk), mask=mask, other=0.0).to(COMPUTE)
            dy = tl.load(dy_ptr + _tile_offsets(o, i, k, gso, gsi, gsk), mask=mask, other=0.0).to(COMPUTE)
            if ALGO == 2:
                dx = dy - tl.exp(y) * dot[:, None]
            else:
                dx = y * (dy - dot[:, None])
            dx = dx * alpha
            d_off = _tile_offsets(o, i, k, dso, dsi, dsk)
            if HAS_BETA:
                dx += tl.load(dx_ptr + d_off, mask=mask, other=0.0).to(COMPUTE) * beta
            tl.store(dx_ptr + d_off, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def row_geometry(t, mode: int):
    """(O, I, K) and this tensor's (so, si, sk) for the softmax mode, or None when
    INSTANCE mode's channel and spatial dims do not merge into one stride."""
    n, c, s = ncs_dims(t)
    sn, sc, ss = ncs_strides(t)
    if mode == CHANNEL:
        return (n, s, c), (sn, ss, sc)
    if c == 1 or s == 1:
        return (n, 1, c * s), (sn, 0, sc if s == 1 else ss)
    if sc == s * ss:
        return (n, 1, c * s), (sn, 0, ss)
    if ss == c * sc:
        return (n, 1, c * s), (sn, 0, sc)
    return None


def _tiles(I, K, k_contiguous: bool):
    """(BLOCK_I, BLOCK_K, single pass?, num_warps) for the tile along the contiguous axis."""
    k_pow2 = triton.next_power_of_2(max(K, 1))
    if k_contiguous or I == 1:
        block_k = min(k_pow2, MAX_TILE)
        block_i = max(1, min(triton.next_power_of_2(I), MAX_TILE // block_k, 16))
        if block_k < 128:
            block_i = max(block_i, min(triton.next_power_of_2(I), 2048 // block_k))
    else:
        block_i = min(triton.next_power_of_2(I), 128)
        block_k = min(k_pow2, max(1, MAX_TILE // block_i))
    single = block_k >= K
    warps = 4 if block_i * block_k <= 2048 else (8 if block_i * block_k <= 4096 else 16)
    return block_i, block_k, single, warps


def _prepare(mode, inputs, outputs):
    """Tensors in a mergeable form, and their row geometries. Views whose dims do not
    merge, or INSTANCE-mode tensors that disagree on their element order, are staged
    through contiguous copies."""
    for force in (False, True):
        staging = NCSStaging()
        ins = [staging.input(t, like=inputs[0], force=force) for t in inputs]
        outs = [staging.output(t, like=inputs[0], read=read, force=force) for t, read in outputs]
        geos = [row_geometry(t, mode) for t in ins + outs]
        if all(g is not None for g in geos) and (mode == CHANNEL or len({_instance_order(t) for t in ins + outs}) == 1):
            return staging, ins, outs, geos
    raise AssertionError("contiguous tensors always have a row geometry")


def _instance_order(t):
    n, c, s = ncs_dims(t)
    _, sc, ss = ncs_strides(t)
    return "channels_last" if (s > 1 and c > 1 and sc < ss) else "channels_first"


def _check(algorithm, mode, **tensors):
    if int(algorithm) not in (FAST, ACCURATE, LOG):
        raise BadParamError(f"unknown softmax algorithm {algorithm}; valid: FAST 0, ACCURATE 1, LOG 2")
    if int(mode) not in (INSTANCE, CHANNEL):
        raise BadParamError(f"unknown softmax mode {mode}; valid: INSTANCE 0, CHANNEL 1")
    check_dtypes(**tensors)
    check_same_shape(**tensors)


def softmax_forward(x, y, algorithm: int = ACCURATE, mode: int = CHANNEL, alpha=1.0, beta=0.0, algo=None) -> None:
    """y = alpha * softmax(x) + beta * y (log-softmax for LOG) over the mode's dims.
    ``algo`` is an alias of ``algorithm``."""
    algorithm = algorithm if algo is None else algo
    _check(algorithm, mode, x=x, y=y)
    if x.numel() == 0:
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    staging, (xv,), (yv,), geos = _prepare(int(mode), [x], [(y, has_beta)])
    (O, I, K), xs = geos[0]
    _, ys = geos[1]
    block_i, block_k, single, warps = _tiles(I, K, xs[2] == 1)
    grid = (cdiv(I, block_i) * O,)
    _softmax_forward_kernel[grid](xv, yv, I, K, *xs, *ys, alpha, beta, ALGO=int(algorithm), HAS_BETA=has_beta,
                                  SINGLE=single, BIG=needs_int64(xv, yv), COMPUTE=compute_dtype(x),
                                  BLOCK_I=block_i, BLOCK_K=block_k, num_warps=warps)
    staging.finish()


def softmax_backward(y, dy, dx, algorithm: int = ACCURATE, mode: int = CHANNEL, alpha=1.0, beta=0.0,
                     algo=None) -> None:
    """dx = alpha * (softmax gradient given y and dy) + beta * dx."""
    algorithm = algorithm if algo is None else algo
    _check(algorithm, mode, y=y, dy=dy, dx=dx)
    if y.numel() == 0:
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    staging, (yv, gv), (dv,), geos = _prepare(int(mode), [y, dy], [(dx, has_beta)])
    (O, I, K), ys = geos[0]
    gs, ds = geos[1][1], geos[2][1]
    block_i, block_k, single, warps = _tiles(I, K, ys[2] == 1)
    grid = (cdiv(I, block_i) * O,)
    _softmax_backward_kernel[grid](yv, gv, dv, I, K, *ys, *gs, *ds, alpha, beta, ALGO=int(algorithm),
                                   HAS_BETA=has_beta, SINGLE=single, BIG=needs_int64(yv, gv, dv),
                                   COMPUTE=compute_dtype(y), BLOCK_I=block_i, BLOCK_K=block_k,
                                   num_warps=warps)
    staging.finish()
