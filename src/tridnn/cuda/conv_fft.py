"""FFT forward convolution: torch.fft (cuFFT on the GPU) for the transforms, a Triton
kernel for the per-frequency channel contraction, every buffer in the workspace.

A cross-correlation is a product in the frequency domain: with x zero-padded to
length L >= in + pad_pre + pad_post per dim (so no output index wraps around) and
the filter dilated and zero-padded to L,

    corr[n, k] = IFFT( sum_c FFT(x_pad[n, c]) * conj(FFT(w_pad[k, c])) )

and y[n, k, o] = corr[n, k, o * stride]. The steps, each writing its workspace buffer:
pad x (float32, any input dtype), rfftn; pad and dilate w (flipped for CONVOLUTION
mode), rfftn; ``spectral_gemm`` sums over the input channels of the group, one complex
GEMM per frequency; irfftn; ``fft_store_kernel`` picks the strided outputs and ends in
the fused epilogue. The buffers are frequency-major, [*spatial, images, channels]
(``planes_first`` gives the [images, channels, *spatial] view the transforms take), so
each frequency's matrix is contiguous for the GEMM. Rounding differs from direct
summation (``exact = False``). L is rounded up to a 2-3-5-7-smooth size, which cuFFT
transforms fastest.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from ..workspace import Buffer
from . import spectral_gemm
from .common import TritonConvAlgorithm, cdiv, launch, split_rows, wide
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, input_precision, needs_int64, strides5


# Fitted to the H100 run of 2026-12-05 (step fft_bench: FFT res3/res5_3x3 float32 FMA backward
# data 1016 / 964 us, aspp_d12 bf16 backward filter 7992 us, DEFAULT backward filter res3 1116 us):
# the spectral GEMM ran at ~28 TFLOP/s IEEE (tf32x3 no faster), while the transforms and
# workspace passes took ~4.3x what their flop and byte counts predict at 20 TFLOP/s and 3 TB/s
# (torch.fft's launches, strided planes, the padded copies)
CONTRACT_FLOPS = {"ieee": 28e12, "tf32x3": 25e12}
TRANSFORM_OVERHEAD = 4.3


def spectral_precision(problem) -> str:
    """tl.dot precision of the spectral GEMM: the GEMM methods' (geometry.input_precision),
    but never plain tf32. Why: on tf32 the spectra's products erred 3e-4 to 9e-4 relative
    (H100 fuzz, 2026-12-05, 13 runs under TENSOR_OP math) where float32 FFT methods promise
    float32's tolerance (tridnn.testing), as cuDNN's FFT algorithms, which compute in
    float32. tf32x3 keeps that at no measured cost: the transforms dominate."""
    prec = input_precision(problem)
    return "tf32x3" if prec == "tf32" else prec


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
    # corr is frequency-major ([*L, images, K]): a row's stride spans every image, so one term
    # alone can pass 2^31 where y does not; its offset is int64 in every case.
    src = (nn.to(tl.int64) * cs_n + od.to(tl.int64) * SD * cs_d + oh.to(tl.int64) * SH * cs_h
           + ow.to(tl.int64) * SW * cs_w)
    acc = tl.load(c_ptr + src[:, None] + (offs_n.to(tl.int64) * cs_k)[None, :],
                  mask=mask_m[:, None] & mask_n[None, :], other=0.0)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_d, ys_h, ys_w = wide((ys_n, ys_k, ys_d, ys_h, ys_w))
        zs_n, zs_k, zs_d, zs_h, zs_w = wide((zs_n, zs_k, zs_d, zs_h, zs_w))
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
    contract = spectral_gemm.flops(n, k // problem.groups, cg, problem.groups, F) / CONTRACT_FLOPS[
        spectral_precision(problem)]
    moved = 4.0 * (2 * planes * P + 4 * planes * F) / 3.0e12
    return TRANSFORM_OVERHEAD * (transforms + moved) + contract + 25e-6


# torch.fft allocates beside its out= buffer: a complex-to-real transform copies its input
# (cuFFT overwrites it), 32 GiB outside the workspace for backward filter's irfftn on the
# 1x2x32800x32800 problem (H200, 2026-12-05: out of memory with a 64 GiB workspace). One call
# per run of planes of at most this many bytes bounds those temporaries.
TRANSFORM_CHUNK_BYTES = 1 << 30


def transform(fft, src, out, dims, **kwargs) -> None:
    """out = fft(src) over ``dims`` (torch.fft.rfftn or irfftn on [images, channels, *spatial]
    views), in runs of whole planes of at most TRANSFORM_CHUNK_BYTES (one plane at least),
    so the copies torch.fft makes stay that small. Small problems take one call."""
    a, b = src.shape[:2]
    if a * b == 0:  # no planes (cuFFT and MKL reject an empty batch)
        return
    plane = max(src[0, 0].numel() * src.element_size(), out[0, 0].numel() * out.element_size())
    run = max(1, TRANSFORM_CHUNK_BYTES // max(plane, 1))
    if run >= a * b:
        fft(src, dim=dims, out=out, **kwargs)
    elif run >= b:  # whole images at a time
        for i in range(0, a, run // b):
            fft(src[i:i + run // b], dim=dims, out=out[i:i + run // b], **kwargs)
    else:  # runs of channels within one image
        for i in range(a):
            for j in range(0, b, run):
                fft(src[i:i + 1, j:j + run], dim=dims, out=out[i:i + 1, j:j + run], **kwargs)


def planes_first(buffer, nd: int):
    """The [images, channels, *spatial(, 2)] view of a frequency-major workspace buffer laid
    out [*spatial, images, channels(, 2)]."""
    return buffer.permute((nd, nd + 1) + tuple(range(nd)) + tuple(range(nd + 2, buffer.dim())))


def by_frequency(buffer, nd: int, groups: int):
    """The [F, groups, images, channels of a group, 2] view of a frequency-major complex buffer
    [*spatial, images, channels, 2] (the spectral GEMM's operand shape)."""
    rows, cols = buffer.shape[nd], buffer.shape[nd + 1]
    return buffer.view(-1, rows, groups, cols // groups, 2).transpose(1, 2)


def filter_by_frequency(buffer, nd: int, groups: int):
    """The [F, groups, K of a group, Cg, 2] view of a frequency-major filter spectrum
    [*spatial, K, Cg, 2]."""
    rows, cols = buffer.shape[nd], buffer.shape[nd + 1]
    return buffer.view(-1, groups, rows // groups, cols, 2)


def pad_input(problem, x, xp) -> None:
    """x zero-padded into xp (an [images, channels, *spatial] view): pre padding in front,
    zeros in the rest of xp."""
    xp.zero_()
    xp[(slice(None), slice(None)) + tuple(slice(p, p + i) for p, i in zip(problem.pad_pre,
                                                                          problem.in_spatial))].copy_(x)


def input_spectrum(problem, x, workspace) -> None:
    """X = rfftn of x zero-padded into xp (both frequency-major buffers)."""
    nd = problem.nd
    xp = planes_first(workspace["xp"], nd)
    pad_input(problem, x, xp)
    transform(torch.fft.rfftn, xp, torch.view_as_complex(planes_first(workspace["X"], nd)), tuple(range(2, 2 + nd)))


def correlate_with_filter(problem, w, workspace, lengths) -> None:
    """From X [*spectrum, images, C] in the workspace: W = rfftn of the filter dilated into
    ``lengths`` (flipped for CONVOLUTION mode); Y = the per-frequency sum over each group's input
    channels of X conj(W) (``spectral_gemm``); corr = irfftn(Y) [*lengths, images, K]."""
    nd = problem.nd
    dims = tuple(range(2, 2 + nd))
    wp = planes_first(workspace["wp"], nd)
    wp.zero_()
    w_eff = torch.flip(w, dims) if problem.mode == 0 else w
    wp[(slice(None), slice(None)) + tuple(slice(0, (kk - 1) * d + 1, d) for kk, d in
                                          zip(problem.kernel, problem.dilation))].copy_(w_eff)
    transform(torch.fft.rfftn, wp, torch.view_as_complex(planes_first(workspace["W"], nd)), dims)
    g = problem.groups
    # Y[f, g][i, k] = sum_c X[f, g][i, c] conj(W[f, g][k, c])
    spectral_gemm.contract(by_frequency(workspace["X"], nd, g),
                           filter_by_frequency(workspace["W"], nd, g).transpose(2, 3),
                           by_frequency(workspace["Y"], nd, g), spectral_precision(problem), conj_b=True)
    transform(torch.fft.irfftn, torch.view_as_complex(planes_first(workspace["Y"], nd)),
              planes_first(workspace["corr"], nd), dims, s=lengths)


class FftForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.FFT
    exact = False

    def buffers(self, problem):
        L = fft_lengths(problem)
        S = spectrum(L)
        n, c, k, cg = problem.n, problem.c, problem.k, problem.w.c
        f32 = np.float32
        return [Buffer("xp", (*L, n, c), f32), Buffer("X", (*S, n, c, 2), f32),
                Buffer("wp", (*L, k, cg), f32), Buffer("W", (*S, k, cg, 2), f32),
                Buffer("Y", (*S, n, k, 2), f32), Buffer("corr", (*L, n, k), f32)]

    def estimate(self, problem):
        return fft_estimate(problem)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        nd = problem.nd
        L = fft_lengths(problem)
        gpu = y.device.type == "cuda"
        input_spectrum(problem, x, workspace)
        correlate_with_filter(problem, w, workspace, L)
        corr = planes_first(workspace["corr"], nd)
        geo = geometry(problem)
        bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
        M = geo.out_pixels
        bm, bn = (64, 64) if gpu else (16, 16)
        launch(fft_store_kernel, (cdiv(M, bm), cdiv(geo.k, bn)), (
            corr, y, bias, z, M, geo.k, *geo.out, *geo.stride, *strides5(corr, nd), *strides5(y, nd), *zs,
            bias_stride, float(alpha), float(beta), alpha2, coef, swish_beta),
            dict(BLOCK_M=bm, BLOCK_N=bn, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                 INT64=needs_int64(y, z)), dict(num_warps=4 if gpu else 1))
