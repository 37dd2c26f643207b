"""FFT forward convolution: torch.fft (cuFFT on the GPU) for the transforms, a Triton
kernel for the per-frequency channel contraction, every buffer in the workspace.

A cross-correlation is a product in the frequency domain: with x zero-padded to
length L >= in + pad_pre + pad_post per dim (so no output index wraps around) and
the filter dilated and zero-padded to L,

    corr[n, k] = IFFT( sum_c FFT(x_pad[n, c]) * conj(FFT(w_pad[k, c])) )

and y[n, k, o] = corr[n, k, o * stride]. The steps, each writing its workspace buffer:
pad x (float32, any input dtype), rfftn; pad and dilate w (flipped for CONVOLUTION
mode), rfftn; ``fft_contract_kernel`` sums over the input channels of the group per
frequency (complex multiply-adds in float32, frequencies on the fast axis so loads
are contiguous); irfftn; ``fft_store_kernel`` picks the strided outputs and ends in
the fused epilogue. Rounding differs from direct summation (``exact = False``). L is
rounded up to a 2-3-5-7-smooth size, which cuFFT transforms fastest.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import TritonConvAlgorithm, cdiv, launch, split_rows
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, needs_int64, strides5


def fast_size(n: int) -> int:
    """The smallest 2-3-5-7-smooth integer >= n (powers of two beyond 2^20)."""
    if n > 1 << 20:
        return 1 << (n - 1).bit_length()
    m = max(n, 1)
    while True:
        r = m
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


@triton.jit
def fft_contract_kernel(x_ptr, w_ptr, y_ptr, F, C, Cg, Kg,
                        BLOCK_F: tl.constexpr, BLOCK_K: tl.constexpr):
    """Y[n, g*Kg + k, f] = sum_c X[n, g*Cg + c, f] * conj(W[g*Kg + k, c, f]); complex as
    interleaved float32 pairs, X [N, C, F], W [K, Cg, F], Y [N, K, F].

    One flat grid (frequency blocks fastest, then channel blocks, then image x group):
    a large plane has millions of frequency blocks, beyond the 65535 of grid axes 1 and 2."""
    pid = tl.program_id(0)
    num_f = tl.cdiv(F, BLOCK_F)
    num_k = tl.cdiv(Kg, BLOCK_K)
    pid_f = pid % num_f
    pid_k = (pid // num_f) % num_k
    ng = pid // (num_f * num_k)
    offs_f = pid_f.to(tl.int64) * BLOCK_F + tl.arange(0, BLOCK_F)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    G = C // Cg
    n = ng // G
    g = ng % G
    mask_f = offs_f < F
    mask_k = offs_k < Kg
    mask = mask_k[:, None] & mask_f[None, :]
    K = Kg * G
    kk = (g * Kg + offs_k).to(tl.int64)
    acc_re = tl.zeros((BLOCK_K, BLOCK_F), dtype=tl.float32)
    acc_im = tl.zeros((BLOCK_K, BLOCK_F), dtype=tl.float32)
    for c in range(0, Cg):
        xrow = ((n.to(tl.int64) * C + g * Cg + c) * F + offs_f) * 2
        xr = tl.load(x_ptr + xrow, mask=mask_f, other=0.0)[None, :]
        xi = tl.load(x_ptr + xrow + 1, mask=mask_f, other=0.0)[None, :]
        wrow = ((kk * Cg + c) * F)[:, None] * 2 + (offs_f * 2)[None, :]
        wr = tl.load(w_ptr + wrow, mask=mask, other=0.0)
        wi = tl.load(w_ptr + wrow + 1, mask=mask, other=0.0)
        acc_re += xr * wr + xi * wi
        acc_im += xi * wr - xr * wi
    yrow = ((n.to(tl.int64) * K + kk) * F)[:, None] * 2 + (offs_f * 2)[None, :]
    tl.store(y_ptr + yrow, acc_re, mask=mask)
    tl.store(y_ptr + yrow + 1, acc_im, mask=mask)


@triton.jit(do_not_specialize=['M', 'OD', 'OH', 'OW'])
def fft_store_kernel(c_ptr, y_ptr, bias_ptr, z_ptr, M, K, OD, OH, OW, SD, SH, SW,
                     cs_n, cs_k, cs_d, cs_h, cs_w, ys_n, ys_k, ys_d, ys_h, ys_w,
                     zs_n, zs_k, zs_d, zs_h, zs_w, bias_stride, alpha, beta, alpha2, coef, swish_beta,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                     HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    """y[n, k, o] = epilogue(corr[n, k, o * stride])."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < K
    nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
    nn = nn.to(tl.int64)
    src = nn * cs_n + od * SD * cs_d + oh * SH * cs_h + ow * SW * cs_w
    acc = tl.load(c_ptr + src[:, None] + offs_n[None, :] * cs_k, mask=mask_m[:, None] & mask_n[None, :], other=0.0)
    if not INT64:
        nn = nn.to(tl.int32)
    row_y = nn * ys_n + od * ys_d + oh * ys_h + ow * ys_w
    row_z = nn * zs_n + od * zs_d + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, offs_n, mask_m, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
               alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


def fft_lengths(problem) -> tuple:
    """Per spatial dim: the transform length L >= padded input."""
    return tuple(fast_size(i + a + b) for i, a, b in zip(problem.in_spatial, problem.pad_pre, problem.pad_post))


def spectrum(lengths) -> tuple:
    """The shape of rfftn's output for real planes of ``lengths``."""
    return tuple(lengths[:-1]) + (lengths[-1] // 2 + 1,)


def fft_estimate(problem, lengths=None, images=None) -> float:
    """Seconds of an FFT convolution in any direction: the transforms of the image, filter and
    output planes, the per-frequency contraction and the passes over the workspace. lengths and
    images: the transforms' size and count of image planes (default: whole planes, one an image;
    FFT_TILING: its tiles)."""
    L = lengths or fft_lengths(problem)
    P = math.prod(L)
    F = math.prod(spectrum(L))
    n, c, k, cg = images or problem.n, problem.c, problem.k, problem.w.c
    planes = n * c + k * cg + n * k
    transforms = 2.5 * planes * P * math.log2(max(P, 2)) / 20e12
    contract = 8.0 * n * k * cg * F / 40e12
    moved = 4.0 * (2 * planes * P + 4 * planes * F) / 3.0e12
    return transforms + contract + moved + 25e-6


def pad_input(problem, x, xp) -> None:
    """x zero-padded into xp: pre padding in front, zeros in the rest of xp."""
    xp.zero_()
    xp[(slice(None), slice(None)) + tuple(slice(p, p + i) for p, i in zip(problem.pad_pre,
                                                                          problem.in_spatial))].copy_(x)


def input_spectrum(problem, x, xp, X) -> None:
    """X = rfftn of x zero-padded into xp."""
    pad_input(problem, x, xp)
    torch.fft.rfftn(xp, dim=tuple(range(2, 2 + problem.nd)), out=X)


def correlate_with_filter(problem, w, workspace, images, lengths) -> None:
    """From X [images, C] in the workspace: W = rfftn of the filter dilated into ``lengths``
    (flipped for CONVOLUTION mode); Y = the per-frequency sum over each group's input channels
    of X conj(W) (``fft_contract_kernel``); corr = irfftn(Y) [images, K, *lengths]."""
    dims = tuple(range(2, 2 + problem.nd))
    wp = workspace["wp"]
    wp.zero_()
    w_eff = torch.flip(w, dims) if problem.mode == 0 else w
    wp[(slice(None), slice(None)) + tuple(slice(0, (kk - 1) * d + 1, d) for kk, d in
                                          zip(problem.kernel, problem.dilation))].copy_(w_eff)
    torch.fft.rfftn(wp, dim=dims, out=torch.view_as_complex(workspace["W"]))
    F = math.prod(spectrum(lengths))
    geo = geometry(problem)
    gpu = wp.device.type == "cuda"
    bf, bk = (128, 16) if gpu else (16, 16)
    programs = images * geo.groups * cdiv(F, bf) * cdiv(geo.kg, bk)
    launch(fft_contract_kernel, (programs,), (
        workspace["X"], workspace["W"], workspace["Y"], F, geo.c, geo.cg, geo.kg),
        dict(BLOCK_F=bf, BLOCK_K=bk), dict(num_warps=4 if gpu else 1))
    torch.fft.irfftn(torch.view_as_complex(workspace["Y"]), s=lengths, dim=dims, out=workspace["corr"])


class FftForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.FFT
    exact = False

    def buffers(self, problem):
        L = fft_lengths(problem)
        S = spectrum(L)
        n, c, k, cg = problem.n, problem.c, problem.k, problem.w.c
        f32 = np.float32
        return [Buffer("xp", (n, c, *L), f32), Buffer("X", (n, c, *S, 2), f32),
                Buffer("wp", (k, cg, *L), f32), Buffer("W", (k, cg, *S, 2), f32),
                Buffer("Y", (n, k, *S, 2), f32), Buffer("corr", (n, k, *L), f32)]

    def estimate(self, problem):
        return fft_estimate(problem)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        nd = problem.nd
        L = fft_lengths(problem)
        gpu = y.device.type == "cuda"
        input_spectrum(problem, x, workspace["xp"], torch.view_as_complex(workspace["X"]))
        correlate_with_filter(problem, w, workspace, problem.n, L)
        corr = workspace["corr"]
        geo = geometry(problem)
        bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
        M = geo.out_pixels
        bm, bn = (64, 64) if gpu else (16, 16)
        launch(fft_store_kernel, (cdiv(M, bm), cdiv(geo.k, bn)), (
            corr, y, bias, z, M, geo.k, *geo.out, *geo.stride, *strides5(corr, nd), *strides5(y, nd), *zs,
            bias_stride, float(alpha), float(beta), alpha2, coef, swish_beta),
            dict(BLOCK_M=bm, BLOCK_N=bn, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                 INT64=needs_int64(y, z)), dict(num_warps=4 if gpu else 1))
