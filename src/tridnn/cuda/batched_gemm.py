"""A strided batched matmul in Triton: C[b] = A[b] @ B[b], float32 accumulation.

The GEMM stage of the transform-based convolutions (WINOGRAD_NONFUSED: one GEMM per
transform point and group). Every operand is read and written at its own strides,
so the workspace layouts of the callers need no copies; C is float32.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import cdiv, grouped_tile, launch
from .geometry import needs_int64


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, sc_b, sc_m, sc_n,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               PREC: tl.constexpr, INT64: tl.constexpr):
    """INT64: a matrix spans more than int32 offsets (a long reduction over pixels or tiles),
    so rows, columns and k run in int64."""
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_rows = a_ptr + batch * sa_b + offs_m[:, None] * sa_m
    b_cols = b_ptr + batch * sb_b + offs_n[None, :] * sb_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        if INT64:
            k = k.to(tl.int64)
        mask_k = k < K
        a = tl.load(a_rows + k[None, :] * sa_k, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_cols + k[:, None] * sb_k, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    c = c_ptr + batch * sc_b + offs_m[:, None] * sc_m + offs_n[None, :] * sc_n
    tl.store(c, acc, mask=mask_m[:, None] & mask_n[None, :])


def configs(device, itemsize: int):
    if device.type != "cuda":
        return [dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=1, num_stages=1)]
    bk = 32 if itemsize == 4 else 64
    return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=wp, num_stages=st)
            for bm, bn, wp, st in ((128, 128, 8, 3), (128, 64, 4, 4), (64, 128, 4, 4), (64, 64, 4, 4))]


def bmm(a, b, c, prec: str, cfg) -> None:
    """c[i] = a[i] @ b[i] for 3-D tensors a [B, M, K], b [B, K, N], c [B, M, N] (float32)."""
    nb, m, k = a.shape
    n = b.shape[2]
    grid = (cdiv(m, cfg["BLOCK_M"]) * cdiv(n, cfg["BLOCK_N"]), nb)
    launch(bmm_kernel, grid, (a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride()),
           dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=8, PREC=prec,
                INT64=needs_int64(a, b, c)),
           dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
