"""Layer norm, RMS norm and group norm, forward and backward, in Triton.

Layer and RMS norm normalize rows: the last ``norm_ndim`` dims (K elements) for each
of the R leading positions; one kernel serves both (RMS: no mean, no bias). A program
takes BLOCK_R rows; a row up to MAX_TILE elements stays in registers (one read, one
write), a longer one is read again in a second loop. Rows of more than 1024 elements
that fit a tile go to a kernel that walks several rows a program (ROW_FORWARD: one after
the other, or a resident wave of runs with the next row loaded ahead). Group norm normalizes, for each
(n, group), the group's channels times all positions, seen through the (N, C, S)
strides, so NCHW and NHWC need no copies.

Backward passes give dx per row or group, and the parameter gradients (dscale,
dbias) as per-program partial sums reduced by a small column-sum kernel, so no
atomics are used and results are deterministic.

Precision: everything in the kernels (statistics, sums, partial gradients and their
workspaces) is in COMPUTE, float32 for 16- and 32-bit data and float64 for float64
data, chosen on the host from x (compute_dtype); the split group-norm finalize
combines in float64 for all. epsilon, alpha and beta are float64 kernel arguments,
converted once to COMPUTE, so float64 data sees them unrounded."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..errors import BadParamError
from .common import cdiv, wide
from .layer_utils import (NCSStaging, blend_args, blend_store, channels_last, check_dtypes, compute_dtype,
                          ncs_dims, ncs_strides, needs_int64)

MAX_TILE = 8192
# rows of more than 1024 elements that fit one tile (layer/RMS norm forward): each
# program loops over this many rows and loads scale and bias once (1: the one-row
# kernel, which reloads them per row; it measured 2.63 TB/s for layer norm on 32768 x
# 4096 bf16 on the H200, PyTorch 2.66). ONE_PASS_STATS: mean and variance from one
# fused reduction of (x - x[0], (x - x[0])**2) instead of the mean, then the squares.
ROWS_PER_PROGRAM = 4
ONE_PASS_STATS = False
# the forward for rows that fit one tile (issue 5): "rows" is _row_norm_rows_kernel
# (ROWS_PER_PROGRAM rows a program, one after the other: a row's load waits for the one
# before to be normalized and stored); "ahead" is _row_norm_ahead_kernel: one resident
# wave of programs (AHEAD_PROGRAMS_PER_SM an SM), each a run of rows, the next row's load
# issued before this row's statistics, so two rows a program are in flight. The
# statistics are the same two passes over the row in registers (the same reductions in
# the same layout), so y, mean and 1/std are the same bits. AHEAD_HOLD_PARAMS keeps
# scale and bias in registers for all rows (32 registers a thread at K = 4096 float32,
# 8 warps); False reloads them every row from L1 (16 KB each, shared by the SM's
# programs), so more programs fit. sm_90 compile (K = 4096 bf16, float32 parameters,
# 8 warps): rows 79 registers (3 programs an SM, 24 KB of rows in flight); see the
# kernel's docstring for ahead's.
# ROW_FORWARD may also map "layer" / "rms" to a kernel each. H200 2026-11-30 11:40 UTC
# (sweep_layers_c1.py, 32768 x 4096 bf16): layer norm rows 3.04 TB/s, ahead 4/SM 3.54;
# RMS norm rows 3.82, ahead 3.58. So each norm takes its faster kernel.
ROW_FORWARD = {"layer": "ahead", "rms": "rows"}
AHEAD_PROGRAMS_PER_SM = 4
AHEAD_HOLD_PARAMS = False
# the row backward (issue 5). BACKWARD_AHEAD_STATS: the saved mean and 1/std of the next
# row are loaded with its data (today's kernel loads them at the top of each row, so their
# latency stands before the row's reductions); BACKWARD_PAIR_SUM: layer norm's sum(g) and
# sum(g * xhat) as one two-value reduction (one round of barriers instead of two; sm_90:
# 11 barriers in the kernel instead of 14; on the GPU the same tree as two tl.sum, which the
# sweep checks: the interpreter folds tl.reduce in another order, 1e-7 apart). PARAM_SUMS: the per-program partial dscale and dbias
# rows summed by "separate" launches of _column_sum_kernel (16 programs each for K = 4096:
# 33 dependent steps of 8 partial rows) or by one "joint" launch of _param_sums_kernel
# (both gradients, 64-column x 64-row tiles: 128 programs of 5 steps for K = 4096 and
# 264 partial rows). The joint sum adds the partials in another order (float32
# rounding of the sum of the programs' partials; the sums stay float32).
# H200 11:40 UTC: layer norm backward 3.06 TB/s -> 3.65 with all three (joint sums alone
# 3.61); RMS norm 3.45 -> 3.70 (joint sums, ahead statistics). dscale/dbias moved 1.9e-7
# (the partials' summation order), dx the same bits.
BACKWARD_AHEAD_STATS = True
BACKWARD_PAIR_SUM = True
PARAM_SUMS = "joint"


# -- rows: layer norm and RMS norm ----------------------------------------------------------
@triton.jit
def _row_norm_forward_kernel(x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr, R, K,
                             xsr, xsk, ysr, ysk, eps: tl.float64, alpha: tl.float64, beta: tl.float64,
                             RMS: tl.constexpr, HAS_BIAS: tl.constexpr, SAVE: tl.constexpr,
                             HAS_BETA: tl.constexpr, SINGLE: tl.constexpr, BIG: tl.constexpr,
                             COMPUTE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        r = r.to(tl.int64)
        xsk, ysk = wide((xsk, ysk))
    r_mask = r < R
    if SINGLE:
        k = tl.arange(0, BLOCK_K)
        k_mask = k < K
        mask = r_mask[:, None] & k_mask[None, :]
        x = tl.load(x_ptr + r[:, None] * xsr + k[None, :] * xsk, mask=mask, other=0.0).to(COMPUTE)
        if RMS:
            mean = tl.zeros([BLOCK_R], COMPUTE)
        else:
            mean = tl.sum(x, axis=1) / K
        d = tl.where(mask, x - mean[:, None], 0.0)
        inv = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / K + eps)
    else:
        shift = tl.load(x_ptr + r * xsr, mask=r_mask, other=0.0).to(COMPUTE)
        if RMS:
            shift = shift * 0.0
        acc = tl.zeros([BLOCK_R, BLOCK_K], COMPUTE)
        acc2 = tl.zeros([BLOCK_R, BLOCK_K], COMPUTE)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            mask = r_mask[:, None] & (k[None, :] < K)
            x = tl.load(x_ptr + r[:, None] * xsr + k[None, :] * xsk, mask=mask, other=0.0).to(COMPUTE)
            d = tl.where(mask, x - shift[:, None], 0.0)
            acc += d
            acc2 += d * d
        m_shift = tl.sum(acc, axis=1) / K
        var = tl.maximum(tl.sum(acc2, axis=1) / K - m_shift * m_shift, 0.0)
        if RMS:
            mean = tl.zeros([BLOCK_R], COMPUTE)
            var = tl.sum(acc2, axis=1) / K
        else:
            mean = m_shift + shift
        inv = 1.0 / tl.sqrt(var + eps)
    if SAVE:
        if not RMS:
            tl.store(mean_ptr + r, mean.to(mean_ptr.dtype.element_ty), mask=r_mask)
        tl.store(inv_ptr + r, inv.to(inv_ptr.dtype.element_ty), mask=r_mask)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_mask = k < K
        mask = r_mask[:, None] & k_mask[None, :]
        if not SINGLE:
            x = tl.load(x_ptr + r[:, None] * xsr + k[None, :] * xsk, mask=mask, other=0.0).to(COMPUTE)
        w = tl.load(scale_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)
        y = (x - mean[:, None]) * inv[:, None] * w[None, :]
        if HAS_BIAS:
            y += tl.load(bias_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)[None, :]
        y_off = r[:, None] * ysr + k[None, :] * ysk
        blend_store(y_ptr, y_off, mask, y.to(COMPUTE), alpha, beta, HAS_BETA)


@triton.jit
def _add_pair(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _row_moments(x, mask, K, eps, RMS: tl.constexpr):
    """(mean, inv) of a row of K values held in registers (lanes off ``mask`` hold zeros),
    two passes: the mean, then the squared deviations from it (RMS: mean 0, mean of x^2)."""
    if RMS:
        mean = 0.0
        var = tl.sum(x * x, axis=0) / K
    else:
        mean = tl.sum(x, axis=0) / K
        d = tl.where(mask, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / K
    inv = 1.0 / tl.sqrt(var + eps)
    return mean, inv


@triton.jit
def _row_norm_rows_kernel(x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr, R, K,
                          xsr, xsk, ysr, ysk, eps: tl.float64, alpha: tl.float64, beta: tl.float64,
                          RMS: tl.constexpr, HAS_BIAS: tl.constexpr, SAVE: tl.constexpr,
                          HAS_BETA: tl.constexpr, ONE_PASS: tl.constexpr, BIG: tl.constexpr,
                          COMPUTE: tl.constexpr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """ROWS consecutive rows of K <= BLOCK_K elements, one after the other: scale and bias
    are loaded once per program (not once per row), each row is read once and written once."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # the parameters, kept in registers for all rows
    k = tl.arange(0, BLOCK_K)
    k_mask = k < K
    w = tl.load(scale_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)
    if HAS_BIAS:
        b = tl.load(bias_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)
    first = tl.program_id(0) * ROWS
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        first = first.to(tl.int64)
        xsk, ysk = wide((xsk, ysk))
    for i in range(ROWS):
        r = first + i
        row_ok = r < R
        mask = k_mask & row_ok
        x = tl.load(x_ptr + r * xsr + k * xsk, mask=mask, other=0.0).to(COMPUTE)
        # statistics
        if ONE_PASS and not RMS:
            shift = tl.load(x_ptr + r * xsr, mask=row_ok, other=0.0).to(COMPUTE)
            d = tl.where(mask, x - shift, 0.0)
            s1, s2 = tl.reduce((d, d * d), 0, _add_pair)
            m_shift = s1 / K
            var = tl.maximum(s2 / K - m_shift * m_shift, 0.0)
            mean = shift + m_shift
            inv = 1.0 / tl.sqrt(var + eps)
        else:
            mean, inv = _row_moments(x, mask, K, eps, RMS)
        if SAVE:
            if not RMS:
                tl.store(mean_ptr + r, mean.to(mean_ptr.dtype.element_ty), mask=row_ok)
            tl.store(inv_ptr + r, inv.to(inv_ptr.dtype.element_ty), mask=row_ok)
        # normalize, blend, store
        y = (x - mean) * inv * w
        if HAS_BIAS:
            y += b
        y_off = r * ysr + k * ysk
        blend_store(y_ptr, y_off, mask, y.to(COMPUTE), alpha, beta, HAS_BETA)


@triton.jit
def _row_norm_ahead_kernel(x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr, R, K, rows_per_program,
                           xsr, xsk, ysr, ysk, eps: tl.float64, alpha: tl.float64, beta: tl.float64,
                           RMS: tl.constexpr, HAS_BIAS: tl.constexpr, SAVE: tl.constexpr,
                           HAS_BETA: tl.constexpr, HOLD_PARAMS: tl.constexpr, BIG: tl.constexpr,
                           COMPUTE: tl.constexpr, BLOCK_K: tl.constexpr):
    """A run of rows_per_program rows of K <= BLOCK_K elements a program, the next row
    loaded before this one is reduced (two rows of the program in flight); statistics
    and y exactly as _row_norm_rows_kernel (two passes over the row in registers)."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to its run of rows
    k = tl.arange(0, BLOCK_K)
    k_mask = k < K
    first = tl.program_id(0) * rows_per_program
    last = tl.minimum(first + rows_per_program, R)
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        first = first.to(tl.int64)
        xsk, ysk = wide((xsk, ysk))
    if HOLD_PARAMS:
        w = tl.load(scale_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)
        if HAS_BIAS:
            b = tl.load(bias_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)
    x_next = tl.load(x_ptr + first * xsr + k * xsk, mask=k_mask & (first < last), other=0.0)
    for r in range(first, last):
        # this row from the registers; the next one's load is issued before the reductions
        x = x_next.to(COMPUTE)
        x_next = tl.load(x_ptr + (r + 1) * xsr + k * xsk, mask=k_mask & (r + 1 < last), other=0.0)
        # statistics: two passes over the row in registers
        mean, inv = _row_moments(x, k_mask, K, eps, RMS)
        if SAVE:
            if not RMS:
                tl.store(mean_ptr + r, mean.to(mean_ptr.dtype.element_ty))
            tl.store(inv_ptr + r, inv.to(inv_ptr.dtype.element_ty))
        # normalize, blend, store (parameters from L1 unless held)
        if not HOLD_PARAMS:
            w = tl.load(scale_ptr + k, mask=k_mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
        y = (x - mean) * inv * w
        if HAS_BIAS:
            if not HOLD_PARAMS:
                b = tl.load(bias_ptr + k, mask=k_mask, other=0.0, eviction_policy="evict_last").to(COMPUTE)
            y += b
        y_off = r * ysr + k * ysk
        blend_store(y_ptr, y_off, k_mask, y.to(COMPUTE), alpha, beta, HAS_BETA)


@triton.jit
def _row_stats(x_ptr, mean_ptr, inv_ptr, row, xsr, xsk, K, eps, RMS: tl.constexpr, HAS_STATS: tl.constexpr,
               COMPUTE: tl.constexpr, BLOCK_K: tl.constexpr):
    """(mean, inv) of one row: saved, or recomputed with a loop over the row."""
    if HAS_STATS:
        inv = tl.load(inv_ptr + row).to(COMPUTE)
        if RMS:
            mean = 0.0
        else:
            mean = tl.load(mean_ptr + row).to(COMPUTE)
    else:
        total = tl.zeros([BLOCK_K], COMPUTE)
        total2 = tl.zeros([BLOCK_K], COMPUTE)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + row * xsr + k * xsk, mask=k < K, other=0.0).to(COMPUTE)
            total += x
            total2 += x * x
        if RMS:
            mean = 0.0
            var = tl.sum(total2, axis=0) / K
        else:
            mean = tl.sum(total, axis=0) / K
            var = tl.maximum(tl.sum(total2, axis=0) / K - mean * mean, 0.0)
        inv = 1.0 / tl.sqrt(var + eps)
    return mean, inv


@triton.jit
def _row_norm_backward_kernel(x_ptr, dy_ptr, dx_ptr, scale_ptr, mean_ptr, inv_ptr, part_ptr, R, K,
                              xsr, xsk, gsr, gsk, dsr, dsk, eps: tl.float64, alpha: tl.float64,
                              beta: tl.float64, rows_per_program,
                              RMS: tl.constexpr, HAS_STATS: tl.constexpr, HAS_BETA: tl.constexpr,
                              SINGLE: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                              BLOCK_K: tl.constexpr, AHEAD_STATS: tl.constexpr = False,
                              PAIR: tl.constexpr = False):
    """One row at a time over this program's rows: dx = inv * (g - mean(g) - xhat *
    mean(g * xhat)) with g = dy * scale (RMS: no mean(g) term); partial dscale and
    dbias sums go to this program's row of ``part`` ([programs, 2, K]). A row that fits
    in registers (SINGLE) is loaded one step ahead, so the next row's reads overlap this
    row's reductions (AHEAD_STATS: its saved statistics too; PAIR: layer norm's two row
    sums in one reduction). ``part`` is in COMPUTE."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    pid = tl.program_id(0)
    part_row = part_ptr + pid * 2 * K
    k_all = tl.arange(0, BLOCK_K)
    first = pid * rows_per_program
    last = tl.minimum(first + rows_per_program, R)
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        first = first.to(tl.int64)
        xsk, gsk, dsk = wide((xsk, gsk, dsk))
    if SINGLE:
        k_mask = k_all < K
        w = tl.load(scale_ptr + k_all, mask=k_mask, other=0.0).to(COMPUTE)
        dscale_acc = tl.zeros([BLOCK_K], COMPUTE)
        dbias_acc = tl.zeros([BLOCK_K], COMPUTE)
        ahead = k_mask & (first < last)
        x_next = tl.load(x_ptr + first * xsr + k_all * xsk, mask=ahead, other=0.0)
        dy_next = tl.load(dy_ptr + first * gsr + k_all * gsk, mask=ahead, other=0.0)
        if HAS_STATS and AHEAD_STATS:
            inv_next = tl.load(inv_ptr + first, mask=first < last, other=1.0)
            if not RMS:
                mean_next = tl.load(mean_ptr + first, mask=first < last, other=0.0)
        for row in range(first, last):
            x = x_next.to(COMPUTE)
            dy = dy_next.to(COMPUTE)
            ahead = k_mask & (row + 1 < last)
            x_next = tl.load(x_ptr + (row + 1) * xsr + k_all * xsk, mask=ahead, other=0.0)
            dy_next = tl.load(dy_ptr + (row + 1) * gsr + k_all * gsk, mask=ahead, other=0.0)
            if HAS_STATS and AHEAD_STATS:
                inv = inv_next.to(COMPUTE)
                inv_next = tl.load(inv_ptr + row + 1, mask=row + 1 < last, other=1.0)
                if RMS:
                    mean = 0.0
                else:
                    mean = mean_next.to(COMPUTE)
                    mean_next = tl.load(mean_ptr + row + 1, mask=row + 1 < last, other=0.0)
            elif HAS_STATS:
                mean, inv = _row_stats(x_ptr, mean_ptr, inv_ptr, row, xsr, xsk, K, eps, RMS, True, COMPUTE,
                                       BLOCK_K)
            else:
                mean, inv = _row_moments(x, k_mask, K, eps, RMS)
            xhat = tl.where(k_mask, (x - mean) * inv, 0.0)
            g = dy * w
            if PAIR and not RMS:
                sum_g, sum_gx = tl.reduce((g, g * xhat), 0, _add_pair)
                dx = inv * (g - sum_g / K - xhat * (sum_gx / K))
            else:
                mean_gx = tl.sum(g * xhat, axis=0) / K
                if RMS:
                    dx = inv * (g - xhat * mean_gx)
                else:
                    dx = inv * (g - tl.sum(g, axis=0) / K - xhat * mean_gx)
            dscale_acc += dy * xhat
            dbias_acc += dy
            d_off = row * dsr + k_all * dsk
            blend_store(dx_ptr, d_off, k_mask, dx.to(COMPUTE), alpha, beta, HAS_BETA)
        tl.store(part_row + k_all, dscale_acc, mask=k_mask)
        tl.store(part_row + K + k_all, dbias_acc, mask=k_mask)
    else:
        for k0 in range(0, K, BLOCK_K):
            k = k0 + k_all
            tl.store(part_row + k, tl.zeros([BLOCK_K], COMPUTE), mask=k < K)
            tl.store(part_row + K + k, tl.zeros([BLOCK_K], COMPUTE), mask=k < K)
        for row in range(first, last):
            mean, inv = _row_stats(x_ptr, mean_ptr, inv_ptr, row, xsr, xsk, K, eps, RMS, HAS_STATS, COMPUTE,
                                   BLOCK_K)
            sum_g = tl.zeros([BLOCK_K], COMPUTE)
            sum_gx = tl.zeros([BLOCK_K], COMPUTE)
            for k0 in range(0, K, BLOCK_K):
                k = k0 + k_all
                k_mask = k < K
                x = tl.load(x_ptr + row * xsr + k * xsk, mask=k_mask, other=0.0).to(COMPUTE)
                dy = tl.load(dy_ptr + row * gsr + k * gsk, mask=k_mask, other=0.0).to(COMPUTE)
                w = tl.load(scale_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)
                xhat = tl.where(k_mask, (x - mean) * inv, 0.0)
                g = dy * w
                sum_g += g
                sum_gx += g * xhat
                tl.store(part_row + k, tl.load(part_row + k, mask=k_mask, other=0.0) + dy * xhat, mask=k_mask)
                tl.store(part_row + K + k, tl.load(part_row + K + k, mask=k_mask, other=0.0) + dy, mask=k_mask)
            mean_g = tl.sum(sum_g, axis=0) / K
            mean_gx = tl.sum(sum_gx, axis=0) / K
            if RMS:
                mean_g = 0.0
            for k0 in range(0, K, BLOCK_K):
                k = k0 + k_all
                k_mask = k < K
                x = tl.load(x_ptr + row * xsr + k * xsk, mask=k_mask, other=0.0).to(COMPUTE)
                dy = tl.load(dy_ptr + row * gsr + k * gsk, mask=k_mask, other=0.0).to(COMPUTE)
                w = tl.load(scale_ptr + k, mask=k_mask, other=0.0).to(COMPUTE)
                xhat = (x - mean) * inv
                dx = inv * (dy * w - mean_g - xhat * mean_gx)
                d_off = row * dsr + k * dsk
                blend_store(dx_ptr, d_off, k_mask, dx.to(COMPUTE), alpha, beta, HAS_BETA)


@triton.jit
def _sum_down_rows(part_ptr, rows, row_stride, c, c_mask, COMPUTE: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                   BLOCK_K: tl.constexpr):
    """sum over rows of part[row * row_stride + c] for the columns c: [BLOCK_ROWS, BLOCK_K]
    tiles down the rows, the rows of a tile folded at the end (in COMPUTE)."""
    acc = tl.zeros([BLOCK_ROWS, BLOCK_K], COMPUTE)
    for r0 in range(0, rows, BLOCK_ROWS):
        r = r0 + tl.arange(0, BLOCK_ROWS)
        mask = (r[:, None] < rows) & c_mask[None, :]
        acc += tl.load(part_ptr + r[:, None] * row_stride + c[None, :], mask=mask, other=0.0)
    return tl.sum(acc, axis=0)


@triton.jit
def _column_sum_kernel(part_ptr, out_ptr, rows, K, row_stride, out_stride,
                       COMPUTE: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[k] = sum over rows of part[row * row_stride + k] (partials and sum in COMPUTE)."""
    k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_mask = k < K
    total = _sum_down_rows(part_ptr, rows, row_stride, k, k_mask, COMPUTE, BLOCK_ROWS, BLOCK_K)
    tl.store(out_ptr + k * out_stride, total.to(out_ptr.dtype.element_ty), mask=k_mask)


@triton.jit
def _param_sums_kernel(part_ptr, ds_ptr, db_ptr, rows, K, COLS, ds_stride, db_stride,
                       COMPUTE: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """dscale[k] and dbias[k] from the partial rows part[row, 0:K] and part[row, K:2K]
    (row length 2K) in one launch: column c of the first COLS columns (K: dscale only,
    2K: both) sums down the rows (partials and sums in COMPUTE)."""
    # map the program to BLOCK_K of the partial columns, and sum them down the rows
    c = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    c_mask = c < COLS
    total = _sum_down_rows(part_ptr, rows, 2 * K, c, c_mask, COMPUTE, BLOCK_ROWS, BLOCK_K)
    # columns below K are dscale's, the rest dbias's
    is_ds = c < K
    tl.store(ds_ptr + c * ds_stride, total.to(ds_ptr.dtype.element_ty), mask=c_mask & is_ds)
    tl.store(db_ptr + (c - K) * db_stride, total.to(db_ptr.dtype.element_ty), mask=c_mask & (c >= K))


def _param_sums(part, rows, K, dscale, dbias):
    """PARAM_SUMS "joint": dscale and/or dbias (flat outputs or None) in one launch."""
    if dscale is None and dbias is None:
        return
    if dscale is None:  # only dbias: its columns start at K, so sum them alone
        _column_sum(part[K:], rows, K, 2 * K, dbias)
        return
    cols = 2 * K if dbias is not None else K
    block_k = min(triton.next_power_of_2(cols), 64)
    block_rows = min(triton.next_power_of_2(rows), 64)
    _param_sums_kernel[(cdiv(cols, block_k),)](
        part, dscale, dbias if dbias is not None else dscale, rows, K, cols, dscale.stride(0),
        dbias.stride(0) if dbias is not None else 0, COMPUTE=compute_dtype(part), BLOCK_ROWS=block_rows,
        BLOCK_K=block_k, num_warps=4)


def _column_sum(part, rows, K, row_stride, out):
    """Sum ``rows`` partial rows of K floats into the flat parameter gradient ``out``."""
    block_k = min(triton.next_power_of_2(K), 256)
    _column_sum_kernel[(cdiv(K, block_k),)](part, out, rows, K, row_stride, out.stride(0),
                                                   COMPUTE=compute_dtype(part), BLOCK_ROWS=8, BLOCK_K=block_k)


def _workspace_dtype(x):
    """Partial sums and statistics the host allocates: COMPUTE's torch dtype."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _as_rows(t, R, K, staging, is_out=False, read=False):
    """A (R, K) strided view of t, staging through a contiguous copy when the leading or
    the trailing dims do not merge."""
    if t is None:
        return None
    try:
        return t.view(R, K)
    except RuntimeError:
        staged = staging.output(t, read=read, force=True) if is_out else staging.input(t, force=True)
        return staged.view(R, K)


def _flat(t, staging=None, is_out=False):
    """A 1-D view of a parameter or statistics tensor (staged when not one strided run)."""
    if t is None:
        return None
    try:
        return t.view(-1)
    except RuntimeError:
        if is_out:
            tmp = torch.empty(t.numel(), dtype=t.dtype, device=t.device)
            staging._writeback.append((t, tmp.view(t.shape)))
            return tmp
        return t.reshape(-1)


def _row_geometry(x, norm_ndim):
    norm_ndim = int(norm_ndim)
    if not 1 <= norm_ndim <= x.dim():
        raise BadParamError(f"norm_ndim must be in [1, {x.dim()}] for x dims {tuple(x.shape)}, got {norm_ndim}")
    K = 1
    for d in x.shape[x.dim() - norm_ndim:]:
        K *= d
    return x.numel() // max(K, 1), K


def _row_tiles(R, K):
    block_k = min(triton.next_power_of_2(K), MAX_TILE)
    block_r = max(1, min(triton.next_power_of_2(R), 2048 // block_k))
    warps = 4 if block_r * block_k <= 2048 else (8 if block_r * block_k <= 4096 else 16)
    return block_r, block_k, block_k >= K, warps


def _row_forward(x, y, scale, bias, mean, inv, norm_ndim, epsilon, alpha, beta, rms):
    check_dtypes(x=x, y=y)
    if tuple(x.shape) != tuple(y.shape):
        raise BadParamError(f"shape mismatch: x has dims {tuple(x.shape)}, y has {tuple(y.shape)}")
    R, K = _row_geometry(x, norm_ndim)
    if x.numel() == 0:
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    staging = NCSStaging()
    xv = _as_rows(x, R, K, staging)
    yv = _as_rows(y, R, K, staging, is_out=True, read=has_beta)
    save = inv is not None and (rms or mean is not None)
    mean_f = _flat(mean, staging, True) if save and not rms else None
    inv_f = _flat(inv, staging, True) if save else None
    scale_f, bias_f = _flat(scale), _flat(bias)
    block_r, block_k, single, warps = _row_tiles(R, K)
    kind = ROW_FORWARD.get("rms" if rms else "layer", "rows") if isinstance(ROW_FORWARD, dict) else ROW_FORWARD
    if kind not in ("rows", "ahead"):
        raise ValueError(f"norms.ROW_FORWARD must be 'rows' or 'ahead' (or a dict of them), got {ROW_FORWARD!r}")
    if single and block_r == 1 and kind == "ahead" and R > 1:
        programs = _programs(x, R, AHEAD_PROGRAMS_PER_SM)
        per = cdiv(R, programs)
        _row_norm_ahead_kernel[(cdiv(R, per),)](
            xv, yv, scale_f, bias_f if bias_f is not None else scale_f, mean_f if mean_f is not None else xv,
            inv_f if inv_f is not None else xv, R, K, per, xv.stride(0), xv.stride(1), yv.stride(0), yv.stride(1),
            float(epsilon), alpha, beta, RMS=rms, HAS_BIAS=bias_f is not None, SAVE=save, HAS_BETA=has_beta,
            HOLD_PARAMS=bool(AHEAD_HOLD_PARAMS), BIG=needs_int64(xv, yv), COMPUTE=compute_dtype(x),
            BLOCK_K=block_k, num_warps=warps)
        staging.finish()
        return
    if single and block_r == 1 and ROWS_PER_PROGRAM > 1 and R > 1:
        rows = min(int(ROWS_PER_PROGRAM), R)
        _row_norm_rows_kernel[(cdiv(R, rows),)](
            xv, yv, scale_f, bias_f if bias_f is not None else scale_f, mean_f if mean_f is not None else xv,
            inv_f if inv_f is not None else xv, R, K, xv.stride(0), xv.stride(1), yv.stride(0), yv.stride(1),
            float(epsilon), alpha, beta, RMS=rms, HAS_BIAS=bias_f is not None, SAVE=save, HAS_BETA=has_beta,
            ONE_PASS=bool(ONE_PASS_STATS), BIG=needs_int64(xv, yv), COMPUTE=compute_dtype(x), ROWS=rows,
            BLOCK_K=block_k, num_warps=warps)
        staging.finish()
        return
    _row_norm_forward_kernel[(cdiv(R, block_r),)](
        xv, yv, scale_f, bias_f if bias_f is not None else scale_f, mean_f if mean_f is not None else xv,
        inv_f if inv_f is not None else xv, R, K, xv.stride(0), xv.stride(1), yv.stride(0), yv.stride(1),
        float(epsilon), alpha, beta, RMS=rms, HAS_BIAS=bias_f is not None, SAVE=save, HAS_BETA=has_beta,
        SINGLE=single, BIG=needs_int64(xv, yv), COMPUTE=compute_dtype(x), BLOCK_R=block_r, BLOCK_K=block_k,
        num_warps=warps)
    staging.finish()


def _programs(t, rows, per_sm=2):
    """One resident wave (two 8-warp programs per SM): no tail wave, half the partials."""
    sms = torch.cuda.get_device_properties(t.device).multi_processor_count if t.device.type == "cuda" else 2
    return max(1, min(rows, sms * int(per_sm)))


def _row_backward(x, dy, dx, scale, dscale, dbias, mean, inv, norm_ndim, epsilon, alpha, beta, rms):
    check_dtypes(x=x, dy=dy, dx=dx)
    R, K = _row_geometry(x, norm_ndim)
    if x.numel() == 0:
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    staging = NCSStaging()
    xv, gv = _as_rows(x, R, K, staging), _as_rows(dy, R, K, staging)
    dv = _as_rows(dx, R, K, staging, is_out=True, read=has_beta)
    has_stats = inv is not None and (rms or mean is not None)
    block_k = min(triton.next_power_of_2(K), MAX_TILE)
    programs = _programs(x, R)
    per = cdiv(R, programs)
    programs = cdiv(R, per)
    part = torch.empty(programs * 2 * K, dtype=_workspace_dtype(x), device=x.device)
    _row_norm_backward_kernel[(programs,)](
        xv, gv, dv, _flat(scale), _flat(mean) if has_stats and not rms else xv,
        _flat(inv) if has_stats else xv, part, R, K, xv.stride(0), xv.stride(1), gv.stride(0), gv.stride(1),
        dv.stride(0), dv.stride(1), float(epsilon), alpha, beta, per, RMS=rms, HAS_STATS=has_stats,
        HAS_BETA=has_beta, SINGLE=block_k >= K, BIG=needs_int64(xv, gv, dv), COMPUTE=compute_dtype(x),
        BLOCK_K=block_k, AHEAD_STATS=bool(BACKWARD_AHEAD_STATS), PAIR=bool(BACKWARD_PAIR_SUM),
        num_warps=4 if block_k <= 1024 else (8 if block_k <= 4096 else 16))
    if PARAM_SUMS not in ("separate", "joint"):
        raise ValueError(f"norms.PARAM_SUMS must be 'separate' or 'joint', got {PARAM_SUMS!r}")
    if PARAM_SUMS == "joint":
        _param_sums(part, programs, K, _flat(dscale, staging, True), _flat(dbias, staging, True))
        staging.finish()
        return
    if dscale is not None:
        _column_sum(part, programs, K, 2 * K, _flat(dscale, staging, True))
    if dbias is not None:
        _column_sum(part[K:], programs, K, 2 * K, _flat(dbias, staging, True))
    staging.finish()


def layer_norm_forward(x, y, scale, bias, mean, inv_std, norm_ndim, epsilon, alpha=1.0, beta=0.0) -> None:
    """y = alpha * ((x - mean) * inv_std * scale + bias) + beta * y over the last norm_ndim
    dims; saves mean and inv_std (shape: the leading dims) when given."""
    _row_forward(x, y, scale, bias, mean, inv_std, norm_ndim, epsilon, alpha, beta, False)


def layer_norm_backward(x, dy, dx, scale, dscale, dbias, mean, inv_std, norm_ndim, alpha=1.0, beta=0.0,
                        epsilon=1e-5) -> None:
    """dx (blended with alpha/beta), dscale and dbias; statistics recomputed when not given."""
    _row_backward(x, dy, dx, scale, dscale, dbias, mean, inv_std, norm_ndim, epsilon, alpha, beta, False)


def rms_norm_forward(x, y, scale, inv_rms, norm_ndim, epsilon, alpha=1.0, beta=0.0) -> None:
    """y = alpha * x / sqrt(mean(x^2) + epsilon) * scale + beta * y."""
    _row_forward(x, y, scale, None, None, inv_rms, norm_ndim, epsilon, alpha, beta, True)


def rms_norm_backward(x, dy, dx, scale, dscale, inv_rms, norm_ndim, alpha=1.0, beta=0.0, epsilon=1e-5) -> None:
    _row_backward(x, dy, dx, scale, dscale, None, None, inv_rms, norm_ndim, epsilon, alpha, beta, True)


# -- group norm ------------------------------------------------------------------------------
# Three designs, chosen per direction and layout (GROUP_NORM_RESIDENT, then GROUP_NORM_SPLIT):
# - resident (issue 5, below the split kernels): one program holds its whole group in
#   registers, so x (backward x and dy) is read from DRAM once and every load of a program
#   is in flight at once; statistics are two passes over the registers. The NCHW default
#   (64x256x56x56 bf16: a group of 8 x 3136 values is a 64 KB tile padded, 8 warps, 115
#   registers, 2 programs an SM; the backward's x and dy 32 warps, 63 registers, 1 an SM).
#   Groups over GN_RESIDENT_BYTES fall back to the two below.
# - fused: one program per (n, group) reads its group twice (statistics, then normalize);
#   the second read is of data the same program just read, so it comes from the L2. Good
#   when a group is one contiguous run (NCHW: 8 planes of 3136 values = 50 KB).
# - split: channels-last groups are 8 channels of every pixel, 16-byte pieces 512 bytes
#   apart, so a per-group program would fetch a sector per 16 bytes. Instead (like batch
#   norm) a statistics kernel reads [pixels, 128+ channels] tiles of each sample in
#   runs (one resident wave of programs) and writes per-channel shifted sums, a finalize kernel per
#   (n, group) combines them (float64) into the group's mean and 1/std and per-(n, c)
#   coefficients, and an elementwise kernel applies them, walking the tiles in the order
#   the statistics kernel left them in the L2 (newest first). The three kernels a chunk of
#   samples at a time, so the apply pass re-reads whole chunks from the L2, lost (session
#   36, H100, NHWC bf16 64x256x56x56: backward 184.8 us in one chunk, 242.3 in chunks of
#   7 samples, 211.7 of 16, 331.8 of 4; forward 119.6 -> 144.9): removed.
# Measured on the H200 (64x256x56x56 bf16, 32 groups; docs/performance.md) before the
# resident design: the split forward is faster in both layouts (NCHW 1.94 against 1.60
# TB/s: the fused forward runs 2048 programs that each wait for their group's statistics
# before writing), the fused backward wins for NCHW (2.07 against 1.76 TB/s), the split
# backward for NHWC. The resident design (benchmarks/sweep_group_norm.py, 14:31 UTC, NCHW):
# forward 1.95 -> 3.28 TB/s, backward 2.08 -> 2.57; GROUP_NORM_RESIDENT = "never" returns
# to the choice above.
GROUP_NORM_SPLIT = {"forward": "always", "backward": "channels_last"}  # per direction (or one value
# for both): "channels_last", "always" or "never"
SPLITS_PER_SAMPLE = None  # None: as many as one resident wave of GN_PROGRAMS_PER_SM per SM allows
GN_PROGRAMS_PER_SM = 2
GN_TILE = 4096
# the resident design (issue 5; kernels below): one program holds a whole group (or GPP
# adjacent channels-last groups) in registers, so x (backward: x and dy) is read once.
# GROUP_NORM_RESIDENT per direction (or one value for both): "channels_first" (not for
# channels-last views), "always" or "never" (GROUP_NORM_SPLIT then picks). It is taken
# when the held tile (positions and channels padded to powers of two; backward x and dy)
# takes at most GN_RESIDENT_BYTES of registers: bfloat16 2 bytes an element when
# GN_RESIDENT_NARROW (held as loaded, widened per use), others 4 (float64 8); else the
# designs above serve. Warps: GN_RESIDENT_DATA_REGS held registers a thread (4 to 32 warps).
# H200 (sweep_group_norm, 64x256x56x56 bf16, TB/s on minimal bytes, 15:10 UTC): NCHW
# forward 3.26 (split 1.94), backward 3.02 (fused 2.38); NHWC forward 2 groups a program
# 2.30 (split 1.86): resident for every layout forward; NHWC backward 1.47-1.51 (split
# 1.95): channels-first only backward.
GROUP_NORM_RESIDENT = {"forward": "always", "backward": "channels_first"}
GN_RESIDENT_BYTES = {"forward": 131072, "backward": 131072}
GN_RESIDENT_GPP = 2
# H200 (sweep_group_norm, 64x256x56x56 bf16 NCHW, 14:31 UTC): forward 16 warps (32 data
# registers) 3.17 TB/s, 8 warps (64) 3.28; backward 32 warps 2.57
GN_RESIDENT_DATA_REGS = {"forward": 64, "backward": 32}  # per direction or one value
GN_RESIDENT_NARROW = True
GN_RESIDENT_PIX = True  # channels-last: the pixel stride compiled in (one kernel per stride)
# contiguous (channels-first) groups: each program prefetches into L2 the group of the program
# this many resident programs an SM ahead (PTX prefetch.global.L2; 0: off), so DRAM stays
# busy while a program reduces and computes (the backward runs one program an SM)
GN_RESIDENT_PREFETCH = 0


@triton.jit
def _group_offsets(n, s, c, sn, ss, sc):
    return n * sn + s[:, None] * ss + c[None, :] * sc


@triton.jit
def _group_channels(g, CG, BLOCK_C: tl.constexpr, EXACT: tl.constexpr):
    """Channels of group g and their mask (EXACT: CG == BLOCK_C, so Triton sees aligned,
    unmasked runs and vectorizes them)."""
    if EXACT:
        return g * BLOCK_C + tl.arange(0, BLOCK_C), tl.arange(0, BLOCK_C) < BLOCK_C
    return g * CG + tl.arange(0, BLOCK_C), tl.arange(0, BLOCK_C) < CG


@triton.jit
def _group_moments(x_ptr, n, c, c_mask, S, xsn, xss, xsc, shift, COMPUTE: tl.constexpr, BLOCK_S: tl.constexpr):
    """sum(x - shift) and sum((x - shift)^2) over the group, two tiles in flight."""
    acc = tl.zeros([BLOCK_S, c.shape[0]], COMPUTE)
    acc2 = tl.zeros([BLOCK_S, c.shape[0]], COMPUTE)
    for s0 in range(0, S, 2 * BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        m0 = (s[:, None] < S) & c_mask[None, :]
        m1 = (s[:, None] + BLOCK_S < S) & c_mask[None, :]
        x0 = tl.load(x_ptr + _group_offsets(n, s, c, xsn, xss, xsc), mask=m0, other=0.0).to(COMPUTE)
        x1 = tl.load(x_ptr + _group_offsets(n, s + BLOCK_S, c, xsn, xss, xsc), mask=m1, other=0.0).to(COMPUTE)
        d0 = tl.where(m0, x0 - shift, 0.0)
        d1 = tl.where(m1, x1 - shift, 0.0)
        acc += d0 + d1
        acc2 += d0 * d0 + d1 * d1
    return tl.sum(tl.sum(acc, axis=1), axis=0), tl.sum(tl.sum(acc2, axis=1), axis=0)


@triton.jit
def _group_norm_forward_kernel(x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr, G, CG, S,
                               xsn, xsc, xss, ysn, ysc, yss, eps: tl.float64, alpha: tl.float64,
                               beta: tl.float64, SAVE: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr,
                               COMPUTE: tl.constexpr, EXACT: tl.constexpr,
                               BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Fused: one (n, group) per program: a statistics loop, then a normalize loop that
    re-reads the group (still in L2: it was just read)."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    pid = tl.program_id(0)
    n = pid // G
    g = pid % G
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        n = n.to(tl.int64)
        xsn, xsc, xss, ysn, ysc, yss = wide((xsn, xsc, xss, ysn, ysc, yss))
    c, c_mask = _group_channels(g, CG, BLOCK_C, EXACT)
    shift = tl.load(x_ptr + n * xsn + g * CG * xsc).to(COMPUTE)
    s1, s2 = _group_moments(x_ptr, n, c, c_mask, S, xsn, xss, xsc, shift, COMPUTE, BLOCK_S)
    count = CG * S
    m_shift = s1 / count
    var = tl.maximum(s2 / count - m_shift * m_shift, 0.0)
    mean = m_shift + shift
    inv = 1.0 / tl.sqrt(var + eps)
    if SAVE:
        tl.store(mean_ptr + pid, mean.to(mean_ptr.dtype.element_ty))
        tl.store(inv_ptr + pid, inv.to(inv_ptr.dtype.element_ty))
    w = tl.load(scale_ptr + c, mask=c_mask, other=0.0).to(COMPUTE)
    b = tl.load(bias_ptr + c, mask=c_mask, other=0.0).to(COMPUTE)
    a = w * inv
    off = b - mean * a
    for s0 in range(0, S, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        mask = (s[:, None] < S) & c_mask[None, :]
        x = tl.load(x_ptr + _group_offsets(n, s, c, xsn, xss, xsc), mask=mask, other=0.0).to(COMPUTE)
        y_off = _group_offsets(n, s, c, ysn, yss, ysc)
        blend_store(y_ptr, y_off, mask, (x * a[None, :] + off[None, :]).to(COMPUTE), alpha, beta, HAS_BETA)


@triton.jit
def _group_norm_backward_kernel(x_ptr, dy_ptr, dx_ptr, scale_ptr, mean_ptr, inv_ptr, part_ptr, G, CG, S, C,
                                xsn, xsc, xss, gsn, gsc, gss, dsn, dsc, dss, eps: tl.float64,
                                alpha: tl.float64, beta: tl.float64, HAS_STATS: tl.constexpr, HAS_BETA: tl.constexpr,
                                BIG: tl.constexpr, COMPUTE: tl.constexpr, EXACT: tl.constexpr,
                                BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Fused: dx for one (n, group); per-channel partial dscale/dbias for this n into part[n]."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    pid = tl.program_id(0)
    n = pid // G
    g = pid % G
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        n = n.to(tl.int64)
        xsn, xsc, xss, gsn, gsc, gss = wide((xsn, xsc, xss, gsn, gsc, gss))
        dsn, dsc, dss = wide((dsn, dsc, dss))
    c, c_mask = _group_channels(g, CG, BLOCK_C, EXACT)
    count = CG * S
    if HAS_STATS:
        mean = tl.load(mean_ptr + pid).to(COMPUTE)
        inv = tl.load(inv_ptr + pid).to(COMPUTE)
    else:
        shift = tl.load(x_ptr + n * xsn + g * CG * xsc).to(COMPUTE)
        s1, s2 = _group_moments(x_ptr, n, c, c_mask, S, xsn, xss, xsc, shift, COMPUTE, BLOCK_S)
        m_shift = s1 / count
        var = tl.maximum(s2 / count - m_shift * m_shift, 0.0)
        mean = m_shift + shift
        inv = 1.0 / tl.sqrt(var + eps)
    w = tl.load(scale_ptr + c, mask=c_mask, other=0.0).to(COMPUTE)
    sum_dy = tl.zeros([BLOCK_S, BLOCK_C], COMPUTE)
    sum_dyx = tl.zeros([BLOCK_S, BLOCK_C], COMPUTE)
    for s0 in range(0, S, 2 * BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        m0 = (s[:, None] < S) & c_mask[None, :]
        m1 = (s[:, None] + BLOCK_S < S) & c_mask[None, :]
        x0 = tl.load(x_ptr + _group_offsets(n, s, c, xsn, xss, xsc), mask=m0, other=0.0).to(COMPUTE)
        dy0 = tl.load(dy_ptr + _group_offsets(n, s, c, gsn, gss, gsc), mask=m0, other=0.0).to(COMPUTE)
        x1 = tl.load(x_ptr + _group_offsets(n, s + BLOCK_S, c, xsn, xss, xsc), mask=m1, other=0.0).to(COMPUTE)
        dy1 = tl.load(dy_ptr + _group_offsets(n, s + BLOCK_S, c, gsn, gss, gsc), mask=m1, other=0.0).to(COMPUTE)
        sum_dy += dy0 + dy1
        sum_dyx += dy0 * tl.where(m0, (x0 - mean) * inv, 0.0) + dy1 * tl.where(m1, (x1 - mean) * inv, 0.0)
    ch_dy = tl.sum(sum_dy, axis=0)
    ch_dyx = tl.sum(sum_dyx, axis=0)
    tl.store(part_ptr + n * 2 * C + c, ch_dyx, mask=c_mask)
    tl.store(part_ptr + n * 2 * C + C + c, ch_dy, mask=c_mask)
    mean_g = tl.sum(ch_dy * w, axis=0) / count
    mean_gx = tl.sum(ch_dyx * w, axis=0) / count
    for s0 in range(0, S, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        mask = (s[:, None] < S) & c_mask[None, :]
        x = tl.load(x_ptr + _group_offsets(n, s, c, xsn, xss, xsc), mask=mask, other=0.0).to(COMPUTE)
        dy = tl.load(dy_ptr + _group_offsets(n, s, c, gsn, gss, gsc), mask=mask, other=0.0).to(COMPUTE)
        xhat = (x - mean) * inv
        dx = inv * (dy * w[None, :] - mean_g - xhat * mean_gx)
        d_off = _group_offsets(n, s, c, dsn, dss, dsc)
        blend_store(dx_ptr, d_off, mask, dx.to(COMPUTE), alpha, beta, HAS_BETA)


# split design: statistics over [BLOCK_S, BLOCK_C] tiles of each sample's split runs
@triton.jit
def _split_item(split, j, SPS, per, SB, BIG: tl.constexpr):
    """(n, block index within the sample, valid) of item j of split ``split``."""
    n = split // SPS
    blk = (split % SPS) * per + j
    if BIG:
        n = n.to(tl.int64)
    return n, blk, (j < per) & (blk < SB)


@triton.jit
def _gn_stats_kernel(x_ptr, dy_ptr, mean_ptr, inv_ptr, part_ptr, C, S, G, CG, SB, SPS, per,
                     xsn, xsc, xss, gsn, gsc, gss,
                     GRAD: tl.constexpr, BIG: tl.constexpr, UNROLL: tl.constexpr, COMPUTE: tl.constexpr,
                     BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per channel over this split's pixels (UNROLL tiles in flight): forward (GRAD off) sum(x - shift) and
    sum((x - shift)^2) with shift = x[n, c, 0]; backward sum(dy) and sum(dy * x_hat)
    with x_hat = (x - mean[n, g]) * inv[n, g]. Into part[split, 2, C]."""
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    split = tl.program_id(1)
    c_mask = c < C
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        xsn, xsc, xss, gsn, gsc, gss = wide((xsn, xsc, xss, gsn, gsc, gss))
    n, _, _ = _split_item(split, 0, SPS, per, SB, BIG)
    if GRAD:
        ng = n * G + c // CG
        ca = tl.load(inv_ptr + ng, mask=c_mask, other=0.0).to(COMPUTE)
        cb = -tl.load(mean_ptr + ng, mask=c_mask, other=0.0).to(COMPUTE) * ca
    else:
        shift = tl.load(x_ptr + n * xsn + c * xsc, mask=c_mask, other=0.0).to(COMPUTE)
    acc = tl.zeros([BLOCK_S, BLOCK_C], COMPUTE)
    acc2 = tl.zeros([BLOCK_S, BLOCK_C], COMPUTE)
    for j in range(0, per, UNROLL):
        for u in tl.static_range(UNROLL):
            n, blk, ok = _split_item(split, j + u, SPS, per, SB, BIG)
            s = blk * BLOCK_S + tl.arange(0, BLOCK_S)
            mask = (s[:, None] < S) & c_mask[None, :] & ok
            x = tl.load(x_ptr + _group_offsets(n, s, c, xsn, xss, xsc), mask=mask, other=0.0).to(COMPUTE)
            if GRAD:
                dy = tl.load(dy_ptr + _group_offsets(n, s, c, gsn, gss, gsc), mask=mask, other=0.0).to(COMPUTE)
                acc += dy
                acc2 += tl.where(mask, dy * (x * ca[None, :] + cb[None, :]), 0.0)
            else:
                d = tl.where(mask, x - shift[None, :], 0.0)
                acc += d
                acc2 += d * d
    tl.store(part_ptr + split * 2 * C + c, tl.sum(acc, axis=0), mask=c_mask)
    tl.store(part_ptr + split * 2 * C + C + c, tl.sum(acc2, axis=0), mask=c_mask)


@triton.jit
def _gn_finalize_kernel(part_ptr, x_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr, coef_ptr, dpart_ptr,
                        G, CG, C, S, SPS, xsn, xsc, eps: tl.float64,
                        GRAD: tl.constexpr, HAS_BIAS: tl.constexpr, SAVE: tl.constexpr, BIG: tl.constexpr,
                        BLOCK_SPS: tl.constexpr, BLOCK_CG: tl.constexpr):
    """One (n, group): combine the splits' per-channel sums (float64).
    Forward: mean and 1/std (saved when SAVE), then coef[n, :, c] = (a, b) with
    y = a x + b, and (for the backward) x_hat = coef2[n, :, c] = (inv, -mean inv).
    Backward: mean(g) and mean(g x_hat) with g = dy * scale, dpart[n, :, c] =
    (sum dy x_hat, sum dy), and coef[n, :, c] = (p, q, r) with dx = p dy + q x + r."""
    pid = tl.program_id(0)
    n = pid // G
    g = pid % G
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        n = n.to(tl.int64)
        xsn, xsc = wide((xsn, xsc))
    cg = tl.arange(0, BLOCK_CG)
    c = g * CG + cg
    c_mask = cg < CG
    sp = tl.arange(0, BLOCK_SPS)
    m = (sp < SPS)[:, None] & c_mask[None, :]
    offs = (n * SPS + sp)[:, None] * 2 * C + c[None, :]
    t1 = tl.sum(tl.load(part_ptr + offs, mask=m, other=0.0).to(tl.float64), axis=0)
    t2 = tl.sum(tl.load(part_ptr + offs + C, mask=m, other=0.0).to(tl.float64), axis=0)
    w = tl.load(scale_ptr + c, mask=c_mask, other=0.0).to(tl.float64)
    count = CG * S
    if GRAD:
        mean = tl.load(mean_ptr + pid).to(tl.float64)
        inv = tl.load(inv_ptr + pid).to(tl.float64)
        mean_g = tl.sum(t1 * w, axis=0) / count
        mean_gx = tl.sum(t2 * w, axis=0) / count
        out_ty = coef_ptr.dtype.element_ty
        tl.store(dpart_ptr + n * 2 * C + c, t2.to(dpart_ptr.dtype.element_ty), mask=c_mask)
        tl.store(dpart_ptr + n * 2 * C + C + c, t1.to(dpart_ptr.dtype.element_ty), mask=c_mask)
        tl.store(coef_ptr + n * 3 * C + c, (inv * w).to(out_ty), mask=c_mask)
        zero = tl.zeros([BLOCK_CG], out_ty)
        tl.store(coef_ptr + n * 3 * C + C + c, zero + (-inv * inv * mean_gx).to(out_ty), mask=c_mask)
        tl.store(coef_ptr + n * 3 * C + 2 * C + c, zero + (inv * (mean * inv * mean_gx - mean_g)).to(out_ty),
                 mask=c_mask)
    else:
        # channel c's sums are shifted by its own first value: move them all to the group's mean
        shift = tl.load(x_ptr + n * xsn + c * xsc, mask=c_mask, other=0.0).to(tl.float64)
        mean = tl.sum(t1 + S * shift, axis=0) / count
        d = tl.where(c_mask, shift - mean, 0.0)
        var = tl.maximum(tl.sum(t2 + 2.0 * d * t1 + S * d * d, axis=0) / count, 0.0)
        inv = 1.0 / tl.sqrt(var + eps)
        if SAVE:
            tl.store(mean_ptr + pid, mean.to(mean_ptr.dtype.element_ty))
            tl.store(inv_ptr + pid, inv.to(inv_ptr.dtype.element_ty))
        a = w * inv
        if HAS_BIAS:
            b = tl.load(bias_ptr + c, mask=c_mask, other=0.0).to(tl.float64) - mean * a
        else:
            b = -mean * a
        tl.store(coef_ptr + n * 2 * C + c, a.to(coef_ptr.dtype.element_ty), mask=c_mask)
        tl.store(coef_ptr + n * 2 * C + C + c, b.to(coef_ptr.dtype.element_ty), mask=c_mask)


@triton.jit
def _gn_apply_kernel(x_ptr, dy_ptr, out_ptr, coef_ptr, C, S, SB, SPS, per, splits,
                     xsn, xsc, xss, gsn, gsc, gss, osn, osc, oss, alpha: tl.float64, beta: tl.float64,
                     GRAD: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                     BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Forward y = a x + b; backward dx = p dy + q x + r (coefficients per (n, c)).
    Tiles in L2 order: (channel block, split, position from the split's end)."""
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        xsn, xsc, xss, gsn, gsc, gss = wide((xsn, xsc, xss, gsn, gsc, gss))
        osn, osc, oss = wide((osn, osc, oss))
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_C)
    c = (pid % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)
    t = pid // tiles_c
    split = t % splits
    n, blk, ok = _split_item(split, per - 1 - t // splits, SPS, per, SB, BIG)
    ok = ok & (t // splits < per)
    s = blk * BLOCK_S + tl.arange(0, BLOCK_S)
    c_mask = c < C
    mask = (s[:, None] < S) & c_mask[None, :] & ok
    x = tl.load(x_ptr + _group_offsets(n, s, c, xsn, xss, xsc), mask=mask, other=0.0,
                eviction_policy="evict_first").to(COMPUTE)
    if GRAD:
        p = tl.load(coef_ptr + n * 3 * C + c, mask=c_mask, other=0.0).to(COMPUTE)
        q = tl.load(coef_ptr + n * 3 * C + C + c, mask=c_mask, other=0.0).to(COMPUTE)
        r = tl.load(coef_ptr + n * 3 * C + 2 * C + c, mask=c_mask, other=0.0).to(COMPUTE)
        dy = tl.load(dy_ptr + _group_offsets(n, s, c, gsn, gss, gsc), mask=mask, other=0.0,
                     eviction_policy="evict_first").to(COMPUTE)
        out = dy * p[None, :] + x * q[None, :] + r[None, :]
    else:
        a = tl.load(coef_ptr + n * 2 * C + c, mask=c_mask, other=0.0).to(COMPUTE)
        b = tl.load(coef_ptr + n * 2 * C + C + c, mask=c_mask, other=0.0).to(COMPUTE)
        out = x * a[None, :] + b[None, :]
    out = out * alpha
    o_off = _group_offsets(n, s, c, osn, oss, osc)
    if HAS_BETA:
        out += tl.load(out_ptr + o_off, mask=mask, other=0.0).to(COMPUTE) * beta
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")


# resident design (issue 5): a program holds its whole group(s) in registers, so x (and dy)
# are read from DRAM once: statistics are two passes over the registers (exact, like the
# reference), then y (dx) is written from the same registers. The tile is
# [GPP, BLOCK_C, Q, SW]: GPP adjacent groups of one sample, their channels, and the
# positions s = q * SW + j. Channels-first (NCHW: a group is one contiguous run): GPP = 1
# and SW a few warps wide, so Triton puts the warps along the channels and SW (each thread
# holds one channel: one base address, one scale) and a thread's Q values in a register
# row. Channels-last: SW = 1 and Q = the positions; GPP groups' channels are adjacent in
# each pixel, so 2 groups of 8 bf16 channels fill a 32-byte sector.
@triton.jit
def _resident_tile(n, pid_g, G, CG, S, sn, sc, ss, BIG: tl.constexpr, EXACT: tl.constexpr, GPP: tl.constexpr,
                   BLOCK_C: tl.constexpr, Q: tl.constexpr, SW: tl.constexpr, PIX: tl.constexpr):
    """Offsets of block pid_g's groups in sample n (a thread's part [GPP, BLOCK_C, 1, SW]
    and the rows' [1, 1, Q, 1]: ptr + inner + outer spans the [GPP, BLOCK_C, Q, SW] tile),
    its mask, the groups [GPP] and channels [GPP, BLOCK_C] (EXACT: CG == BLOCK_C, the channel mask is
    a constant, so channels-last loads stay vectorized)."""
    g = pid_g * GPP + tl.arange(0, GPP)
    ci = tl.arange(0, BLOCK_C)
    if EXACT:
        c = g[:, None] * BLOCK_C + ci[None, :]
        c_mask = (g[:, None] < G) & (ci[None, :] < BLOCK_C)
    else:
        c = g[:, None] * CG + ci[None, :]
        c_mask = (g[:, None] < G) & (ci[None, :] < CG)
    q = (tl.arange(0, Q) * SW)[None, None, :, None]
    j = tl.arange(0, SW)[None, None, None, :]
    mask = c_mask[:, :, None, None] & (q + j < S)
    if BIG:
        n = n.to(tl.int64)
        q = q.to(tl.int64)
        j = j.to(tl.int64)
        c = c.to(tl.int64)
    # a thread's part, then the register rows' part (constant when ss is: immediate offsets;
    # PIX, when not 0, is ss known on the host: channels-last tensors' pixel stride)
    if PIX != 0:
        outer = q * PIX
    else:
        outer = q * ss
    return (n * sn + c[:, :, None, None] * sc + j * ss), outer, mask, g, c, c_mask


@triton.jit
def _resident_program(G, CG, S, sn, sc, ss, BIG: tl.constexpr, EXACT: tl.constexpr, GPP: tl.constexpr,
                      BLOCK_C: tl.constexpr, Q: tl.constexpr, SW: tl.constexpr, PIX: tl.constexpr):
    """Map the program to (sample n, block pid_g of GPP groups): (program id, blocks a
    sample, n, pid_g) and the block's _resident_tile in the view of strides (sn, sc, ss)."""
    pid = tl.program_id(0)
    blocks = tl.cdiv(G, GPP)
    n = pid // blocks
    pid_g = pid % blocks
    inner, outer, mask, g, c, c_mask = _resident_tile(n, pid_g, G, CG, S, sn, sc, ss, BIG, EXACT, GPP, BLOCK_C, Q,
                                                      SW, PIX)
    return pid, blocks, n, pid_g, inner, outer, mask, g, c, c_mask


@triton.jit
def _channel_sums(t, CF: tl.constexpr):
    """[GPP, BLOCK_C] sums over the positions, the in-thread axis first."""
    if CF:
        t2 = tl.sum(t, axis=2)
    else:
        t2 = tl.sum(t, axis=3)
    return tl.sum(t2, axis=2)


@triton.jit
def _channel_sum_pair(a, b, CF: tl.constexpr):
    """_channel_sums of two tiles in one reduction (one round of barriers, not two)."""
    if CF:
        a2, b2 = tl.reduce((a, b), 2, _add_pair)
    else:
        a2, b2 = tl.reduce((a, b), 3, _add_pair)
    return tl.reduce((a2, b2), 2, _add_pair)


@triton.jit
def _group_sums(t, CF: tl.constexpr, GPP: tl.constexpr):
    """[GPP] sums over each group's channels and positions (one group: one flat reduction,
    a single round of barriers)."""
    if GPP == 1:
        total = tl.zeros([GPP], t.dtype) + tl.sum(t)
    else:
        total = tl.sum(_channel_sums(t, CF), axis=1)
    return total


@triton.jit
def _at_groups(v):
    """[GPP] -> broadcast over the tile."""
    return v[:, None, None, None]


@triton.jit
def _at_channels(v):
    """[GPP, BLOCK_C] -> broadcast over the tile."""
    return v[:, :, None, None]


@triton.jit
def _widen(v, COMPUTE: tl.constexpr, WAY: tl.constexpr):
    """v in COMPUTE. Held bfloat16 tiles (v.dtype bf16, WAY 1 to 3) are widened at each
    use by a different exact instruction sequence (bits << 16, the 16 bits packed over a
    zero half, a byte permute), so neither LLVM nor ptxas merges the uses into one float32
    copy that would stay live: the registers hold the 2-byte values (half the registers)."""
    if WAY == 1:
        return tl.inline_asm_elementwise("{ .reg .b32 t; cvt.u32.u16 t, $1; shl.b32 $0, t, 16; }", "=r,h", [v],
                                         dtype=tl.float32, is_pure=True, pack=1).to(COMPUTE)
    elif WAY == 2:
        return tl.inline_asm_elementwise("{ .reg .b16 z; mov.b16 z, 0; mov.b32 $0, {z, $1}; }", "=r,h", [v],
                                         dtype=tl.float32, is_pure=True, pack=1).to(COMPUTE)
    elif WAY == 3:
        return tl.inline_asm_elementwise("{ .reg .b32 t; cvt.u32.u16 t, $1; prmt.b32 $0, t, 0, 0x1044; }", "=r,h",
                                         [v], dtype=tl.float32, is_pure=True, pack=1).to(COMPUTE)
    else:
        return v.to(COMPUTE)


@triton.jit
def _prefetch_group(ptr, pid, ahead, programs, blocks, sn, sc, CG, S, BIG: tl.constexpr, LINES: tl.constexpr,
                    LINE: tl.constexpr):
    """L2 prefetch (PTX prefetch.global.L2, no registers held) of the group of program
    pid + ahead (one contiguous run of CG * S elements: channels-first, GPP = 1), so its
    DRAM reads overlap this program's arithmetic and the later program finds it in L2."""
    nxt = pid + ahead
    if nxt < programs:
        n = nxt // blocks
        if BIG:
            n = n.to(tl.int64)
        k = tl.arange(0, LINES) * LINE
        start = n * sn + ((nxt % blocks) * CG).to(n.dtype) * sc  # (int64 when BIG: it can pass 2^31 alone)
        tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
                                  "=r,l,r", [ptr + start + k, (k < CG * S).to(tl.int32)], dtype=tl.int32,
                                  is_pure=False, pack=1)


@triton.jit
def _resident_store(ptr, offsets, mask, value, beta, HAS_BETA: tl.constexpr):
    """ptr[offsets] = value + beta * ptr[offsets] (alpha is already in value)."""
    if HAS_BETA:
        value += tl.load(ptr + offsets, mask=mask, other=0.0).to(value.dtype) * beta
    tl.store(ptr + offsets, value.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _resident_stats(x, mask, count, eps, COMPUTE: tl.constexpr, NARROW: tl.constexpr, CF: tl.constexpr,
                    GPP: tl.constexpr):
    """Per-group mean and 1/std [GPP] of the held tile x: two passes over the registers
    (the mean, then the squared deviations from it), widened WAY 0 and 1."""
    mean = _group_sums(_widen(x, COMPUTE, 0), CF, GPP) / count
    d = tl.where(mask, _widen(x, COMPUTE, 1 if NARROW else 0) - _at_groups(mean), 0.0)
    var = _group_sums(d * d, CF, GPP) / count
    return mean, 1.0 / tl.sqrt(var + eps)


@triton.jit
def _channel_coefficients(scale_ptr, bias_ptr, c, c_mask, mean, inv, alpha, HAS_BIAS: tl.constexpr,
                          COMPUTE: tl.constexpr):
    """Per-channel (a, b) [groups, channels] with alpha y = x a + b, from the groups' mean
    and 1/std [groups] (alpha folded in)."""
    w = tl.load(scale_ptr + c, mask=c_mask, other=0.0).to(COMPUTE)
    a = w * inv[:, None]
    b = -mean[:, None] * a
    if HAS_BIAS:
        b += tl.load(bias_ptr + c, mask=c_mask, other=0.0).to(COMPUTE)
    return a * alpha, b * alpha


@triton.jit
def _gn_resident_forward_kernel(x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr,  # tensors
                                G, CG, S,  # groups, channels a group, positions
                                xsn, xsc, xss, ysn, ysc, yss,  # (N, C, S) strides
                                eps: tl.float64, alpha: tl.float64, beta: tl.float64,
                                HAS_BIAS: tl.constexpr, SAVE: tl.constexpr, HAS_BETA: tl.constexpr,
                                BIG: tl.constexpr, COMPUTE: tl.constexpr, NARROW: tl.constexpr, EXACT: tl.constexpr,
                                CF: tl.constexpr, GPP: tl.constexpr, BLOCK_C: tl.constexpr, Q: tl.constexpr,
                                SW: tl.constexpr, PIX: tl.constexpr, ahead=0, LINES: tl.constexpr = 0,
                                LINE: tl.constexpr = 64):
    """GPP groups of one sample a program: one load of the groups, their statistics from
    registers, y = x * a + b stored from the same registers (NARROW: bfloat16 held as
    loaded, widened per use)."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to (sample, block of groups) and its x tile
    pid, blocks, n, pid_g, inner, outer, mask, g, c, c_mask = _resident_program(G, CG, S, xsn, xsc, xss, BIG, EXACT,
                                                                                GPP, BLOCK_C, Q, SW, PIX)
    if LINES > 0:  # (before the load: the prefetch's addresses are dead before x is live)
        _prefetch_group(x_ptr, pid, ahead, tl.num_programs(0), blocks, xsn, xsc, CG, S, BIG, LINES, LINE)
    # the one read of x; everything below works on registers
    x = tl.load(x_ptr + inner + outer, mask=mask, other=0.0)
    mean, inv = _resident_stats(x, mask, CG * S, eps, COMPUTE, NARROW, CF, GPP)
    g_mask = g < G
    if SAVE:
        tl.store(mean_ptr + n * G + g, mean.to(mean_ptr.dtype.element_ty), mask=g_mask)
        tl.store(inv_ptr + n * G + g, inv.to(inv_ptr.dtype.element_ty), mask=g_mask)
    # y = alpha (x a + b) + beta y with per-channel a, b (alpha folded into them)
    a, b = _channel_coefficients(scale_ptr, bias_ptr, c, c_mask, mean, inv, alpha, HAS_BIAS, COMPUTE)
    y = _widen(x, COMPUTE, 2 if NARROW else 0) * _at_channels(a) + _at_channels(b)
    inner, outer, _, _, _, _ = _resident_tile(n, pid_g, G, CG, S, ysn, ysc, yss, BIG, EXACT, GPP, BLOCK_C, Q, SW,
                                              PIX)
    _resident_store(y_ptr + inner, outer, mask, y, beta, HAS_BETA)


@triton.jit
def _gn_resident_backward_kernel(x_ptr, dy_ptr, dx_ptr, scale_ptr, mean_ptr, inv_ptr, part_ptr,  # tensors
                                 G, CG, S, C,  # groups, channels a group, positions, channels
                                 xsn, xsc, xss, gsn, gsc, gss, dsn, dsc, dss,  # (N, C, S) strides
                                 eps: tl.float64, alpha: tl.float64, beta: tl.float64,
                                 HAS_STATS: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr,
                                 COMPUTE: tl.constexpr, NARROW: tl.constexpr, EXACT: tl.constexpr,
                                 CF: tl.constexpr, GPP: tl.constexpr, BLOCK_C: tl.constexpr, Q: tl.constexpr,
                                 SW: tl.constexpr, PIX: tl.constexpr, ahead=0, LINES: tl.constexpr = 0,
                                 LINE: tl.constexpr = 64):
    """dx for GPP groups of one sample, x and dy held in registers (each read once); the
    per-channel sum(dy x_hat) and sum(dy) of this sample into part[n, 2, C]."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to (sample, block of groups) and its x and dy tiles
    pid, blocks, n, pid_g, inner, outer, mask, g, c, c_mask = _resident_program(G, CG, S, xsn, xsc, xss, BIG, EXACT,
                                                                                GPP, BLOCK_C, Q, SW, PIX)
    g_inner, g_outer, _, _, _, _ = _resident_tile(n, pid_g, G, CG, S, gsn, gsc, gss, BIG, EXACT, GPP, BLOCK_C, Q,
                                                  SW, PIX)
    # both loads issued before any arithmetic: the one read of x and dy
    x = tl.load(x_ptr + inner + outer, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + g_inner + g_outer, mask=mask, other=0.0)
    if LINES > 0:
        _prefetch_group(x_ptr, pid, ahead, tl.num_programs(0), blocks, xsn, xsc, CG, S, BIG, LINES, LINE)
        _prefetch_group(dy_ptr, pid, ahead, tl.num_programs(0), blocks, gsn, gsc, CG, S, BIG, LINES, LINE)
    count = CG * S
    g_mask = g < G
    if HAS_STATS:
        mean = tl.load(mean_ptr + n * G + g, mask=g_mask, other=0.0).to(COMPUTE)
        inv = tl.load(inv_ptr + n * G + g, mask=g_mask, other=0.0).to(COMPUTE)
    else:
        mean, inv = _resident_stats(x, mask, count, eps, COMPUTE, NARROW, CF, GPP)
    # per-channel sum(dy) and sum(dy (x - mean)) (x widened one way; padding has dy = 0), then
    # dx = alpha inv (dy w - mean(dy w) - x_hat mean(dy w x_hat)) from x and dy widened another way
    dyf = _widen(dy, COMPUTE, 0)
    xc = _widen(x, COMPUTE, (0 if HAS_STATS else 2) if NARROW else 0) - _at_groups(mean)
    ch_dy, ch_dyx = _channel_sum_pair(dyf, dyf * xc, CF)  # [GPP, BLOCK_C]
    ch_dyx = ch_dyx * inv[:, None]
    if BIG:
        n = n.to(tl.int64)
    tl.store(part_ptr + n * 2 * C + c, ch_dyx, mask=c_mask)
    tl.store(part_ptr + n * 2 * C + C + c, ch_dy, mask=c_mask)
    w = tl.load(scale_ptr + c, mask=c_mask, other=0.0).to(COMPUTE)
    mean_g, mean_gx = tl.reduce((ch_dy * w, ch_dyx * w), 1, _add_pair)  # [GPP]
    p = (alpha * inv)[:, None] * w  # dx = p dy + q (x - mean) + r
    q = -alpha * inv * inv * mean_gx / count
    r = -alpha * inv * mean_g / count
    xc = _widen(x, COMPUTE, (1 if HAS_STATS else 3) if NARROW else 0) - _at_groups(mean)
    dx = _widen(dy, COMPUTE, 1 if NARROW else 0) * _at_channels(p) + (xc * _at_groups(q) + _at_groups(r))
    inner, outer, _, _, _, _ = _resident_tile(n, pid_g, G, CG, S, dsn, dsc, dss, BIG, EXACT, GPP, BLOCK_C, Q, SW,
                                              PIX)
    _resident_store(dx_ptr + inner, outer, mask, dx, beta, HAS_BETA)


def _group_setup(x, groups):
    groups = int(groups)
    C = x.shape[1]
    if groups < 1 or C % groups:
        raise BadParamError(f"groups={groups} must be >= 1 and divide the {C} channels")
    return groups, C // groups


def _group_tiles(x, CG, S):
    """(BLOCK_S, BLOCK_C, warps) of the fused kernels: the group's channels x positions."""
    block_c = triton.next_power_of_2(CG)
    block_s = max(1, min(triton.next_power_of_2(S), max(1, 4096 // block_c)))
    warps = 8 if block_s * block_c >= 2048 else 4
    return block_s, block_c, warps


def _use_split(xv, direction):
    rule = GROUP_NORM_SPLIT if isinstance(GROUP_NORM_SPLIT, str) else GROUP_NORM_SPLIT[direction]
    if rule == "always":
        return True
    return rule == "channels_last" and channels_last(xv)


class _SplitPlan:
    """Tiles and splits of the split design for an (N, C, S) view."""

    def __init__(self, xv, N, C, S):
        sms = torch.cuda.get_device_properties(xv.device).multi_processor_count if xv.device.type == "cuda" else 2
        if channels_last(xv):
            self.block_c = min(triton.next_power_of_2(C), 128)
            self.block_s = max(1, min(triton.next_power_of_2(S), GN_TILE // self.block_c))
        else:
            self.block_s = min(triton.next_power_of_2(S), 512, GN_TILE)
            self.block_c = max(1, min(triton.next_power_of_2(C), GN_TILE // self.block_s))
        self.SB = cdiv(S, self.block_s)
        self.tiles_c = cdiv(C, self.block_c)
        wanted = SPLITS_PER_SAMPLE or max(1, sms * GN_PROGRAMS_PER_SM // (N * self.tiles_c))
        self.per = cdiv(self.SB, min(self.SB, wanted))
        self.sps = cdiv(self.SB, self.per)
        self.splits = N * self.sps
        self.warps = 8 if self.block_s * self.block_c >= 2048 else 4

    def stats_grid(self):
        return (self.tiles_c, self.splits)

    def apply_grid(self):
        return (self.tiles_c * self.splits * self.per,)


def _split_forward(xv, yv, scale, bias, mean_f, inv_f, G, CG, eps, alpha, beta, has_beta, x, big):
    N, C, S = ncs_dims(xv)
    plan = _SplitPlan(xv, N, C, S)
    dev, acc = xv.device, _workspace_dtype(xv)
    part = torch.empty(plan.splits * 2 * C, dtype=acc, device=dev)
    coef = torch.empty(N * 2 * C, dtype=acc, device=dev)
    xs = ncs_strides(xv)
    _gn_stats_kernel[plan.stats_grid()](xv, xv, coef, coef, part, C, S, G, CG, plan.SB, plan.sps, plan.per,
                                        *xs, *xs, GRAD=False, BIG=big, UNROLL=4, COMPUTE=compute_dtype(xv),
                                        BLOCK_S=plan.block_s,
                                        BLOCK_C=plan.block_c, num_warps=plan.warps)
    save = mean_f is not None
    _gn_finalize_kernel[(N * G,)](part, xv, scale, bias if bias is not None else scale,
                                  mean_f if save else coef, inv_f if save else coef, coef, coef,
                                  G, CG, C, S, plan.sps, xs[0], xs[1], float(eps), GRAD=False,
                                  HAS_BIAS=bias is not None, SAVE=save, BIG=big,
                                  BLOCK_SPS=triton.next_power_of_2(plan.sps), BLOCK_CG=triton.next_power_of_2(CG))
    _gn_apply_kernel[plan.apply_grid()](xv, xv, yv, coef, C, S, plan.SB, plan.sps, plan.per, plan.splits,
                                        *xs, *xs, *ncs_strides(yv), alpha, beta, GRAD=False, HAS_BETA=has_beta,
                                        BIG=big, COMPUTE=compute_dtype(x), BLOCK_S=plan.block_s,
                                        BLOCK_C=plan.block_c, num_warps=plan.warps)


def _split_backward(xv, gv, dv, scale, mean_f, inv_f, G, CG, eps, alpha, beta, has_beta, x, big, part_out):
    """dx through the split kernels; per-n partial (dscale, dbias) into part_out [N, 2, C]."""
    N, C, S = ncs_dims(xv)
    plan = _SplitPlan(xv, N, C, S)
    dev, acc = xv.device, _workspace_dtype(xv)
    if mean_f is None:
        mean_f = torch.empty(N * G, dtype=acc, device=dev)
        inv_f = torch.empty(N * G, dtype=acc, device=dev)
        _split_stats_only(xv, torch.ones(C, dtype=acc, device=dev), mean_f, inv_f, G, CG, eps, plan, big)
    part = torch.empty(plan.splits * 2 * C, dtype=acc, device=dev)
    xs, gs = ncs_strides(xv), ncs_strides(gv)
    _gn_stats_kernel[plan.stats_grid()](xv, gv, mean_f, inv_f, part, C, S, G, CG, plan.SB, plan.sps, plan.per,
                                        *xs, *gs, GRAD=True, BIG=big, UNROLL=2, COMPUTE=compute_dtype(xv),
                                        BLOCK_S=plan.block_s,
                                        BLOCK_C=plan.block_c, num_warps=plan.warps)
    coef = torch.empty(N * 3 * C, dtype=acc, device=dev)
    _gn_finalize_kernel[(N * G,)](part, xv, scale, scale, mean_f, inv_f, coef, part_out,
                                  G, CG, C, S, plan.sps, xs[0], xs[1], float(eps), GRAD=True, HAS_BIAS=False,
                                  SAVE=False, BIG=big, BLOCK_SPS=triton.next_power_of_2(plan.sps),
                                  BLOCK_CG=triton.next_power_of_2(CG))
    _gn_apply_kernel[plan.apply_grid()](xv, gv, dv, coef, C, S, plan.SB, plan.sps, plan.per, plan.splits,
                                        *xs, *gs, *ncs_strides(dv), alpha, beta, GRAD=True, HAS_BETA=has_beta,
                                        BIG=big, COMPUTE=compute_dtype(x), BLOCK_S=plan.block_s,
                                        BLOCK_C=plan.block_c, num_warps=plan.warps)


def _split_stats_only(xv, ones, mean_f, inv_f, G, CG, eps, plan, big):
    N, C, S = ncs_dims(xv)
    part = torch.empty(plan.splits * 2 * C, dtype=_workspace_dtype(xv), device=xv.device)
    coef = torch.empty(N * 2 * C, dtype=_workspace_dtype(xv), device=xv.device)
    xs = ncs_strides(xv)
    _gn_stats_kernel[plan.stats_grid()](xv, xv, coef, coef, part, C, S, G, CG, plan.SB, plan.sps, plan.per,
                                        *xs, *xs, GRAD=False, BIG=big, UNROLL=4, COMPUTE=compute_dtype(xv),
                                        BLOCK_S=plan.block_s,
                                        BLOCK_C=plan.block_c, num_warps=plan.warps)
    _gn_finalize_kernel[(N * G,)](part, xv, ones, ones, mean_f, inv_f, coef, coef, G, CG, C, S, plan.sps,
                                  xs[0], xs[1], float(eps), GRAD=False, HAS_BIAS=False, SAVE=True, BIG=big,
                                  BLOCK_SPS=triton.next_power_of_2(plan.sps), BLOCK_CG=triton.next_power_of_2(CG))


def _held_size(xv):
    """Bytes a held element takes in registers: bfloat16 narrow 2, others as float32 or wider."""
    return 2 if _narrow(xv) else max(4, xv.element_size())


def _resident_plan(xv, CG, G, direction):
    """The resident design's tile for this (N, C, S) view (a dict of the kernel's
    constexprs and num_warps, with the grid's groups a program), or None when it is
    switched off for this layout or the held tile would exceed GN_RESIDENT_BYTES."""
    rule = GROUP_NORM_RESIDENT if isinstance(GROUP_NORM_RESIDENT, str) else GROUP_NORM_RESIDENT[direction]
    if rule not in ("channels_first", "always", "never"):
        raise ValueError(f"norms.GROUP_NORM_RESIDENT must be 'channels_first', 'always' or 'never', got {rule!r}")
    last = channels_last(xv)
    if rule == "never" or (rule == "channels_first" and last):
        return None
    _, _, S = ncs_dims(xv)
    block_c, block_s = triton.next_power_of_2(CG), triton.next_power_of_2(S)
    tensors = 2 if direction == "backward" else 1
    gpp = 1
    if last:  # adjacent groups until a pixel's piece fills a 32-byte sector
        while gpp < min(GN_RESIDENT_GPP, G) and gpp * block_c * xv.element_size() < 32:
            gpp *= 2
    while True:
        held = tensors * gpp * block_c * block_s * _held_size(xv)
        if held <= GN_RESIDENT_BYTES[direction] or gpp == 1:
            break
        gpp //= 2
    if held > GN_RESIDENT_BYTES[direction]:
        return None
    regs = GN_RESIDENT_DATA_REGS if isinstance(GN_RESIDENT_DATA_REGS, int) else GN_RESIDENT_DATA_REGS[direction]
    warps = max(4, min(32, triton.next_power_of_2(max(1, held // (128 * int(regs))))))
    if last:
        q, sw = block_s, 1
    else:  # a few warps wide along the positions, the rest along the channels
        sw = min(block_s, 32 * max(1, 16 // xv.element_size()) * max(1, warps // block_c))
        q = block_s // sw
    return dict(CF=not last, GPP=gpp, BLOCK_C=block_c, Q=q, SW=sw, num_warps=warps)


def _pixel_stride(plan, *tensors):
    """PIX: the channels-last pixel stride as a constant (immediate offsets for a thread's
    rows; one compile per stride) when GN_RESIDENT_PIX and all tensors share it, else 0."""
    if plan["CF"] or not GN_RESIDENT_PIX:
        return 0
    strides = {ncs_strides(t)[2] for t in tensors}
    return strides.pop() if len(strides) == 1 else 0


def _prefetch_args(plan, CG, *tensors):
    """(ahead, LINES, LINE) of GN_RESIDENT_PREFETCH: on the GPU, for channels-first groups
    that are one contiguous run in every input, prefetch the group of the program one
    resident wave ahead (GN_RESIDENT_PREFETCH programs an SM) into L2; else off."""
    t, off = tensors[0], dict(ahead=0, LINES=0, LINE=64)
    if not GN_RESIDENT_PREFETCH or t.device.type != "cuda" or not plan["CF"]:
        return off
    _, _, S = ncs_dims(t)
    if any(ncs_strides(u)[2] != 1 or ncs_strides(u)[1] != S for u in tensors):
        return off
    line = 128 // t.element_size()
    sms = torch.cuda.get_device_properties(t.device).multi_processor_count
    return dict(ahead=sms * int(GN_RESIDENT_PREFETCH), LINES=triton.next_power_of_2(cdiv(CG * S, line)),
                LINE=line)


def _narrow(xv):
    """bfloat16 tiles are held as loaded and widened per use (_widen: inline PTX, so on
    a GPU only; the interpreter holds them as float32)."""
    return xv.dtype == torch.bfloat16 and GN_RESIDENT_NARROW and xv.device.type == "cuda"


def _resident_forward(xv, yv, scale, bias, mean_f, inv_f, G, CG, eps, alpha, beta, has_beta, big, plan):
    N, C, S = ncs_dims(xv)
    save = mean_f is not None
    _gn_resident_forward_kernel[(N * cdiv(G, plan["GPP"]),)](
        xv, yv, scale, bias if bias is not None else scale, mean_f if save else xv, inv_f if save else xv, G, CG, S,
        *ncs_strides(xv), *ncs_strides(yv), float(eps), alpha, beta, HAS_BIAS=bias is not None, SAVE=save,
        HAS_BETA=has_beta, BIG=big, COMPUTE=compute_dtype(xv), NARROW=_narrow(xv), EXACT=plan["BLOCK_C"] == CG,
        PIX=_pixel_stride(plan, xv, yv), **_prefetch_args(plan, CG, xv), **plan)


def _resident_backward(xv, gv, dv, scale, mean_f, inv_f, part, G, CG, eps, alpha, beta, has_beta, big, plan):
    N, C, S = ncs_dims(xv)
    has_stats = mean_f is not None
    _gn_resident_backward_kernel[(N * cdiv(G, plan["GPP"]),)](
        xv, gv, dv, scale, mean_f if has_stats else xv, inv_f if has_stats else xv, part, G, CG, S, C,
        *ncs_strides(xv), *ncs_strides(gv), *ncs_strides(dv), float(eps), alpha, beta, HAS_STATS=has_stats,
        HAS_BETA=has_beta, BIG=big, COMPUTE=compute_dtype(xv), NARROW=_narrow(xv), EXACT=plan["BLOCK_C"] == CG,
        PIX=_pixel_stride(plan, xv, gv, dv), **_prefetch_args(plan, CG, xv, gv), **plan)


def group_norm_forward(x, y, scale, bias, mean, inv_std, groups, epsilon, alpha=1.0, beta=0.0) -> None:
    """y = alpha * (normalized over each (n, group) * scale[c] + bias[c]) + beta * y;
    saves mean and inv_std of shape (N, groups) when given."""
    check_dtypes(x=x, y=y)
    G, CG = _group_setup(x, groups)
    if x.numel() == 0:
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    staging = NCSStaging()
    xv = staging.input(x)
    yv = staging.output(y, like=xv, read=has_beta)
    N, C, S = ncs_dims(xv)
    save = mean is not None and inv_std is not None
    mean_f = _flat(mean, staging, True) if save else None
    inv_f = _flat(inv_std, staging, True) if save else None
    big = needs_int64(xv, yv)
    from . import group_norm_coop  # (it imports this module's helpers)
    coop = group_norm_coop.plan(xv, G, CG, "forward", _narrow(xv))
    plan = _resident_plan(xv, CG, G, "forward")
    if coop is not None:
        group_norm_coop.forward(xv, yv, _flat(scale), _flat(bias), mean_f, inv_f, G, CG, epsilon, alpha, beta,
                                has_beta, big, _narrow(xv), coop)
    elif plan is not None:
        _resident_forward(xv, yv, _flat(scale), _flat(bias), mean_f, inv_f, G, CG, epsilon, alpha, beta, has_beta,
                          big, plan)
    elif _use_split(xv, "forward"):
        _split_forward(xv, yv, _flat(scale), _flat(bias), mean_f, inv_f, G, CG, epsilon, alpha, beta, has_beta,
                       x, big)
    else:
        block_s, block_c, warps = _group_tiles(xv, CG, S)
        _group_norm_forward_kernel[(N * G,)](
            xv, yv, _flat(scale), _flat(bias), mean_f if save else xv, inv_f if save else xv, G, CG, S,
            *ncs_strides(xv), *ncs_strides(yv), float(epsilon), alpha, beta, SAVE=save, HAS_BETA=has_beta,
            BIG=big, COMPUTE=compute_dtype(x), EXACT=block_c == CG, BLOCK_S=block_s, BLOCK_C=block_c,
            num_warps=warps)
    staging.finish()


def group_norm_backward(x, dy, dx, scale, dscale, dbias, mean, inv_std, groups, alpha=1.0, beta=0.0,
                        epsilon=1e-5) -> None:
    check_dtypes(x=x, dy=dy, dx=dx)
    G, CG = _group_setup(x, groups)
    if x.numel() == 0:
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    staging = NCSStaging()
    xv = staging.input(x)
    gv = staging.input(dy, like=xv)
    dv = staging.output(dx, like=xv, read=has_beta)
    N, C, S = ncs_dims(xv)
    has_stats = mean is not None and inv_std is not None
    part = torch.empty(N * 2 * C, dtype=_workspace_dtype(x), device=x.device)
    big = needs_int64(xv, gv, dv)
    from . import group_norm_coop  # (it imports this module's helpers)
    coop = group_norm_coop.plan(xv, G, CG, "backward", _narrow(xv)) if has_stats else None
    plan = _resident_plan(xv, CG, G, "backward")
    if coop is not None:
        group_norm_coop.backward(xv, gv, dv, _flat(scale), _flat(mean), _flat(inv_std), part, G, CG, alpha, beta,
                                 has_beta, big, _narrow(xv), coop)
    elif plan is not None:
        _resident_backward(xv, gv, dv, _flat(scale), _flat(mean) if has_stats else None,
                           _flat(inv_std) if has_stats else None, part, G, CG, epsilon, alpha, beta, has_beta, big,
                           plan)
    elif _use_split(xv, "backward"):
        _split_backward(xv, gv, dv, _flat(scale), _flat(mean) if has_stats else None,
                        _flat(inv_std) if has_stats else None, G, CG, epsilon, alpha, beta, has_beta, x, big, part)
    else:
        block_s, block_c, warps = _group_tiles(xv, CG, S)
        _group_norm_backward_kernel[(N * G,)](
            xv, gv, dv, _flat(scale), _flat(mean) if has_stats else xv, _flat(inv_std) if has_stats else xv, part,
            G, CG, S, C, *ncs_strides(xv), *ncs_strides(gv), *ncs_strides(dv), float(epsilon), alpha, beta,
            HAS_STATS=has_stats, HAS_BETA=has_beta, BIG=big, COMPUTE=compute_dtype(x), EXACT=block_c == CG,
            BLOCK_S=block_s, BLOCK_C=block_c, num_warps=warps)
    if PARAM_SUMS == "joint":  # both parameter gradients in one launch (as the row norms)
        _param_sums(part, N, C, _flat(dscale, staging, True), _flat(dbias, staging, True))
    else:
        if dscale is not None:
            _column_sum(part, N, C, 2 * C, _flat(dscale, staging, True))
        if dbias is not None:
            _column_sum(part[C:], N, C, 2 * C, _flat(dbias, staging, True))
    staging.finish()
