"""Backward bias in Triton: db[k] = alpha * sum over (n, pixels) of dy[n, k, ...] + beta * db[k].

A reduction over every axis but the channels. The rows (n, d, h, w) are long (64 x
56 x 56 = 200k for a ResNet layer) and the channels few, so one program per channel
block would leave the GPU idle: the rows are split into SPLIT slices, each program
sums one (slice, channel block) tile into a float32 partial, and a second kernel adds
the partials in slice order (deterministic) and blends alpha/beta into db. Any
strides: channels-last dy gives contiguous channel loads, NCHW gives contiguous rows.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import cdiv, launch, sm_count, split_rows, wide
from .geometry import needs_int64, pad3, strides5


@triton.jit(do_not_specialize=['R', 'D', 'H', 'W', 'rows_per_split'])
def bias_partial_kernel(dy_ptr, part_ptr, R, K, D, H, W, s_n, s_k, s_d, s_h, s_w, rows_per_split,
                        BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, ACC: tl.constexpr,
                        INT64: tl.constexpr):
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    split = tl.program_id(1)
    mask_k = offs_k < K
    start = split * rows_per_split
    end = tl.minimum(start + rows_per_split, R)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        s_n, s_k, s_d, s_h, s_w = wide((s_n, s_k, s_d, s_h, s_w))
    acc = tl.zeros((BLOCK_R, BLOCK_K), dtype=ACC)
    for r0 in range(start, end, BLOCK_R):
        rows = r0 + tl.arange(0, BLOCK_R)
        n, d, h, w = split_rows(rows, D, H, W)
        off = n * s_n + d * s_d + h * s_h + w * s_w
        v = tl.load(dy_ptr + off[:, None] + offs_k[None, :] * s_k,
                    mask=(rows < end)[:, None] & mask_k[None, :], other=0.0)
        acc += v.to(ACC)
    tl.store(part_ptr + split * K + offs_k, tl.sum(acc, axis=0), mask=mask_k)


@triton.jit
def bias_finish_kernel(part_ptr, db_ptr, K, SPLIT, db_stride, alpha, beta,
                       BLOCK_K: tl.constexpr, ACC: tl.constexpr, BETA_ZERO: tl.constexpr):
    offs_k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_k = offs_k < K
    acc = tl.zeros((BLOCK_K,), dtype=ACC)
    for s in range(0, SPLIT):
        acc += tl.load(part_ptr + s * K + offs_k, mask=mask_k, other=0.0)
    v = acc * alpha
    ptrs = db_ptr + offs_k * db_stride
    if not BETA_ZERO:
        v += beta * tl.load(ptrs, mask=mask_k, other=0.0).to(ACC)
    tl.store(ptrs, v.to(db_ptr.dtype.element_ty), mask=mask_k)


def backward_bias(dy: torch.Tensor, db: torch.Tensor, alpha: float, beta: float) -> None:
    """db (K values, any shape with K elements and any strides) from dy (N, K, *spatial)."""
    nd = dy.dim() - 2
    n, k = dy.shape[0], dy.shape[1]
    D, H, W = pad3(dy.shape[2:], nd, 1)
    rows = n * D * H * W
    gpu = dy.device.type == "cuda"
    acc_dtype = torch.float64 if dy.dtype == torch.float64 else torch.float32
    block_k = min(64 if gpu else 16, triton.next_power_of_2(max(k, 1)))
    block_r = 64 if gpu else 16
    k_blocks = cdiv(k, block_k)
    want = max(1, cdiv(2 * sm_count(dy.device), k_blocks)) if gpu else 2
    split = max(1, min(want, cdiv(rows, 8 * block_r), 1024))
    per = cdiv(cdiv(rows, split), block_r) * block_r if rows else block_r
    split = max(1, cdiv(rows, per))
    part = torch.empty((split, k), dtype=acc_dtype, device=dy.device)
    acc = tl.float64 if acc_dtype == torch.float64 else tl.float32
    s = strides5(dy, nd)
    launch(bias_partial_kernel, (k_blocks, split), (dy, part, rows, k, D, H, W, *s, per),
           dict(BLOCK_R=block_r, BLOCK_K=block_k, ACC=acc, INT64=needs_int64(dy)),
           dict(num_warps=4 if gpu else 1))
    # db is (1, K, 1, ...) with any strides: channel k sits k * db.stride(1) elements in
    launch(bias_finish_kernel, (cdiv(k, block_k),), (part, db, k, split, db.stride(1), float(alpha),
                                                            float(beta)),
           dict(BLOCK_K=block_k, ACC=acc, BETA_ZERO=beta == 0), dict(num_warps=4 if gpu else 1))


