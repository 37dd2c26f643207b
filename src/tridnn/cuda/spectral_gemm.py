"""The FFT methods' per-frequency channel contraction as a complex batched GEMM in Triton.

After the transforms, an FFT convolution is one small complex matrix product per frequency
(and group): forward Y[f] = X[f] conj(W[f])^T over input channels, backward filter
DW[f] = DY[f]^H X[f] over images. An elementwise kernel that runs each image's product on
its own re-reads the filter spectrum once per image (res3_3x3 backward data, batch 64, on an
H100: 4.6 GB of W traffic, 2.8 ms against WINOGRAD_NONFUSED's 165 us); as a GEMM every
loaded tile serves a whole block of rows.

Operands are complex as interleaved float32 pairs, frequency-major (the FFT buffers are laid
out [*spatial, images, channels], so each frequency's matrix is contiguous). A tile loads as
[rows, cols, 2] and splits into real and imaginary parts; four real tl.dots a step:

    (ar + i ai)(br + i bi) = (ar br - ai bi) + i (ar bi + ai br),

with ai or bi negated for a conjugated operand. The reduction runs in a fixed order
(deterministic). Precision follows tl.dot's input_precision: "ieee" (CUDA-core float32),
"tf32" or "tf32x3".
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import cdiv, launch
from .geometry import needs_int64


@triton.jit
def spectral_gemm_kernel(
        # complex operands, interleaved float32: a [F, G, M, R], b [F, G, R, N], c [F, G, M, N]
        a_ptr, b_ptr, c_ptr,
        # the matrix sizes, the frequency count and the groups
        M, N, R, G,
        # strides in float32 elements (each complex element is two): frequency, group, row, column
        sa_f, sa_g, sa_m, sa_r, sb_f, sb_g, sb_r, sb_n, sc_f, sc_g, sc_m, sc_n,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
        CONJ_A: tl.constexpr, CONJ_B: tl.constexpr, PREC: tl.constexpr, INT64: tl.constexpr):
    """c[f, g] = op(a[f, g]) @ op(b[f, g]), op conjugating where CONJ_A / CONJ_B."""
    # map the program to an (m, n) tile of one frequency and group (tiles fastest, so the
    # programs of one frequency run together and share its operands in L2)
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    tile = pid % tiles
    batch = (pid // tiles).to(tl.int64)
    f = batch // G
    g = batch % G
    offs_m = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    mask_m = offs_m < M
    mask_n = offs_n < N
    part = tl.arange(0, 2)  # real, imaginary
    # pointers to the first reduction step's tiles, [rows, cols, 2]
    a_base = a_ptr + f * sa_f + g * sa_g + (offs_m * sa_m)[:, None, None] + part[None, None, :]
    b_base = b_ptr + f * sb_f + g * sb_g + (offs_n * sb_n)[None, :, None] + part[None, None, :]
    acc_re = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_im = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # the reduction, in order
    for r0 in range(0, R, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        if INT64:
            r = r.to(tl.int64)
        mask_r = r < R
        a = tl.load(a_base + (r * sa_r)[None, :, None], mask=(mask_m[:, None] & mask_r[None, :])[:, :, None],
                    other=0.0)
        b = tl.load(b_base + (r * sb_r)[:, None, None], mask=(mask_r[:, None] & mask_n[None, :])[:, :, None],
                    other=0.0)
        ar, ai = tl.split(a)
        br, bi = tl.split(b)
        if CONJ_A:
            ai = -ai
        if CONJ_B:
            bi = -bi
        acc_re = tl.dot(ar, br, acc_re, input_precision=PREC)
        acc_re = tl.dot(-ai, bi, acc_re, input_precision=PREC)
        acc_im = tl.dot(ar, bi, acc_im, input_precision=PREC)
        acc_im = tl.dot(ai, br, acc_im, input_precision=PREC)
    # store the tile as complex pairs
    c = c_ptr + f * sc_f + g * sc_g + (offs_m * sc_m)[:, None, None] + (offs_n * sc_n)[None, :, None]
    tl.store(c + part[None, None, :], tl.join(acc_re, acc_im), mask=(mask_m[:, None] & mask_n[None, :])[:, :, None])


# GPU tiles (BLOCK_M, BLOCK_N, BLOCK_R, warps) by precision, the largest that compile for sm_90
# without register spills (tests/test_cuda_spectral_gemm.py): four real accumulating dots a
# step hold two accumulators and four operand tiles; IEEE 64 x 64 x 32 over 4 warps spilled
# 979 values, 64 x 64 x 16 over 8 warps none
GPU_TILES = {"ieee": (64, 64, 16, 8), "tf32x3": (32, 64, 16, 4), "tf32": (64, 64, 32, 4)}


def tiles(prec: str, m: int, n: int, gpu: bool) -> tuple:
    """(BLOCK_M, BLOCK_N, BLOCK_R, warps) for an m x n product: GPU_TILES' sides shrunk to small
    matrices (down to tl.dot's 16); 16s on one warp under the interpreter."""
    if not gpu:
        return 16, 16, 16, 1
    bm, bn, br, warps = GPU_TILES.get(prec, GPU_TILES["ieee"])
    fit = lambda side, size: min(side, max(16, triton.next_power_of_2(size)))
    bm, bn = fit(bm, m), fit(bn, n)
    # A 16-column tile gets at most a warp per 16 rows: there Triton lays the warps along M
    # (mma warpsPerCTA [4, 1]), so 4 warps on 16 rows all computed the same tile (38 such
    # kernels in the GPU fuzz's Triton cache, session 24; the layout class of session 23's
    # WINOGRAD fault). Wider tiles put the warps along N. With fewer warps a k-step of 16
    # keeps tf32's one-warp tile in registers. Offline sm_90 compiles: no spills and no
    # repeated warps either way (tests/test_cuda_spectral_gemm.py)
    if bn == 16:
        return bm, bn, 16, min(warps, bm // 16)
    return bm, bn, br, warps


def contract(a, b, c, prec: str, conj_a: bool = False, conj_b: bool = False) -> None:
    """c[f, g] = op(a[f, g]) @ op(b[f, g]) for complex views as float32 pairs: a [F, G, M, R, 2],
    b [F, G, R, N, 2], c [F, G, M, N, 2] (any strides; the pair itself contiguous)."""
    nf, ng, m, r, _ = a.shape
    n = b.shape[3]
    gpu = c.device.type == "cuda"
    bm, bn, br, warps = tiles(prec, m, n, gpu)
    programs = cdiv(m, bm) * cdiv(n, bn) * nf * ng
    launch(spectral_gemm_kernel, (programs,), (a, b, c, m, n, r, ng, *a.stride()[:4], *b.stride()[:4],
                                               *c.stride()[:4]),
           dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_R=br, CONJ_A=conj_a, CONJ_B=conj_b, PREC=prec,
                INT64=needs_int64(a, b, c)),
           dict(num_warps=warps, num_stages=3 if gpu else 1))


def flops(images: int, kg: int, cg: int, groups: int, frequencies: int) -> float:
    """Real flops the contraction's tiles run (a complex multiply-add is 8): each matrix side
    rounded up to tl.dot's 16, so depthwise (1x1 matrices) costs 16^3 a frequency."""
    up = lambda v: max(16, v)
    return 8.0 * up(images) * up(kg) * up(cg) * groups * frequencies
