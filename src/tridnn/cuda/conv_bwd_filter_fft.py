"""Backward filter FFT and FFT_TILING: torch.fft (cuFFT on the GPU) for the transforms, a
Triton kernel for the per-frequency reduction over images, every buffer in the workspace.

The filter gradient is a correlation of the padded input with dy, summed over images:

    dw[k, c, r] = sum_n sum_o x_pad[n, g Cg + c, o s + r d] dy[n, k, o]

With dy spread by the stride into a zero buffer (dy_up[o s] = dy[o]) this is
sum_u x_pad[u + r d] dy_up[u], and with both zero-padded to L >= the padded input (no
index wraps around), in the frequency domain

    corr[k, c] = IFFT( sum_n FFT(x_pad[n, g Cg + c]) * conj(FFT(dy_up[n, k])) ),
    dw[k, c, r] = corr[k, c, r d]   (taps reversed for CONVOLUTION mode).

The steps, each writing its workspace buffer: pad x (float32), rfftn; spread dy, rfftn;
``fft_wgrad_contract_kernel`` sums over the images per frequency (complex multiply-adds in
float32, frequencies on the fast axis); irfftn; the taps are picked and blended into dw
(alpha, beta, one rounding to the data type). Any stride, dilation, groups and 1-3
spatial dims. Rounding differs from direct summation (``exact = False``); the sums run in a
fixed order (deterministic).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from .common import TritonConvAlgorithm, cdiv, launch
from .conv_fft import fft_estimate, fft_lengths, input_spectrum, spectrum
from .conv_fft_tiling import tile_major, tile_size, tiled_input_spectrum, why_not_tiled


@triton.jit
def fft_wgrad_contract_kernel(x_ptr, dy_ptr, dw_ptr, F, N, C, Cg, Kg,
                              BLOCK_F: tl.constexpr, BLOCK_C: tl.constexpr):
    """DW[g*Kg + k, c, f] = sum_n X[n, g*Cg + c, f] * conj(DY[n, g*Kg + k, f]); complex as
    interleaved float32 pairs, X [N, C, F], DY [N, K, F], DW [K, Cg, F].

    One flat grid (frequency blocks fastest, then input-channel blocks, then output
    channels), as conv_fft's contraction: a plane can have millions of frequency blocks."""
    # map the program to one output channel k and a [BLOCK_C, BLOCK_F] tile of (c, f)
    pid = tl.program_id(0)
    num_f = tl.cdiv(F, BLOCK_F)
    num_c = tl.cdiv(Cg, BLOCK_C)
    pid_f = pid % num_f
    pid_c = (pid // num_f) % num_c
    k = (pid // (num_f * num_c)).to(tl.int64)
    g = k // Kg
    K = Kg * (C // Cg)
    offs_f = pid_f.to(tl.int64) * BLOCK_F + tl.arange(0, BLOCK_F)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_f = offs_f < F
    mask = (offs_c < Cg)[:, None] & mask_f[None, :]
    # the reduction over images, in order
    acc_re = tl.zeros((BLOCK_C, BLOCK_F), dtype=tl.float32)
    acc_im = tl.zeros((BLOCK_C, BLOCK_F), dtype=tl.float32)
    for n in range(0, N):
        dyrow = ((n * K + k) * F + offs_f) * 2
        dr = tl.load(dy_ptr + dyrow, mask=mask_f, other=0.0)[None, :]
        di = tl.load(dy_ptr + dyrow + 1, mask=mask_f, other=0.0)[None, :]
        xrow = ((n * C + g * Cg + offs_c) * F)[:, None] * 2 + (offs_f * 2)[None, :]
        xr = tl.load(x_ptr + xrow, mask=mask, other=0.0)
        xi = tl.load(x_ptr + xrow + 1, mask=mask, other=0.0)
        acc_re += xr * dr + xi * di
        acc_im += xi * dr - xr * di
    # store DW[k, c, f]
    dwrow = ((k * Cg + offs_c) * F)[:, None] * 2 + (offs_f * 2)[None, :]
    tl.store(dw_ptr + dwrow, acc_re, mask=mask)
    tl.store(dw_ptr + dwrow + 1, acc_im, mask=mask)


def reduce_and_finish(problem, workspace, lengths, images, dw, alpha, beta) -> None:
    """From the spectra X [images, C] and DY [images, K] in the workspace: DW = the sum over
    images of X conj(DY) per frequency (Triton), its inverse transform at ``lengths``, and the
    taps at multiples of the dilation (reversed for CONVOLUTION mode) blended into dw once."""
    dims = tuple(range(2, 2 + problem.nd))
    DW, corr = torch.view_as_complex(workspace["DW"]), workspace["corr"]
    gpu = dw.device.type == "cuda"
    F = math.prod(spectrum(lengths))
    kg = problem.k // problem.groups
    bf, bc = (128, 16) if gpu else (16, 16)
    programs = problem.k * cdiv(problem.w.c, bc) * cdiv(F, bf)
    launch(fft_wgrad_contract_kernel, (programs,), (
        workspace["X"], workspace["DY"], workspace["DW"], F, images, problem.c, problem.w.c, kg),
        dict(BLOCK_F=bf, BLOCK_C=bc), dict(num_warps=4 if gpu else 1))
    torch.fft.irfftn(DW, s=lengths, dim=dims, out=corr)
    taps = corr[(slice(None), slice(None)) + tuple(slice(0, (kk - 1) * d + 1, d) for kk, d in
                                                   zip(problem.kernel, problem.dilation))]
    if problem.mode == 0:
        taps = torch.flip(taps, dims)
    if beta == 0:
        dw.copy_(taps * float(alpha))
    else:
        dw.copy_(taps * float(alpha) + dw.float() * float(beta))


def _buffers(problem, lengths, images, staging):
    """The spectra (X, DY, DW) and correlation at ``lengths`` for ``images`` planes, after the
    method's own staging buffers."""
    S = spectrum(lengths)
    k, c, cg = problem.k, problem.c, problem.w.c
    f32 = np.float32
    return staging + [Buffer("X", (images, c, *S, 2), f32), Buffer("DY", (images, k, *S, 2), f32),
                      Buffer("DW", (k, cg, *S, 2), f32), Buffer("corr", (k, cg, *lengths), f32)]


def _spread(problem) -> tuple:
    """dy's place in a zero buffer spread by the stride: every stride-th element."""
    return (slice(None), slice(None)) + tuple(slice(0, (o - 1) * s + 1, s) for o, s in
                                              zip(problem.out_spatial, problem.stride))


class FftBackwardFilter(TritonConvAlgorithm):
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.FFT
    exact = False

    def buffers(self, problem):
        L = fft_lengths(problem)
        f32 = np.float32
        return _buffers(problem, L, problem.n, [Buffer("xp", (problem.n, problem.c, *L), f32),
                                                Buffer("dyp", (problem.n, problem.k, *L), f32)])

    def estimate(self, problem):
        return fft_estimate(problem)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dw, dy = tensors["x"], tensors["w"], tensors["y"]
        dims = tuple(range(2, 2 + problem.nd))
        L = fft_lengths(problem)
        input_spectrum(problem, x, workspace["xp"], torch.view_as_complex(workspace["X"]))
        dyp = workspace["dyp"]
        dyp.zero_()
        dyp[_spread(problem)].copy_(dy)
        torch.fft.rfftn(dyp, dim=dims, out=torch.view_as_complex(workspace["DY"]))
        reduce_and_finish(problem, workspace, L, problem.n, dw, alpha, beta)


def wgrad_tiling(problem):
    """(tile sizes L, dy outputs a tile V, tile counts, padded-input extent) per dim: dy spread
    by the stride is cut into tiles of V; tile t meets the input window [t V, t V + L)."""
    sizes, valid, counts, extents = [], [], [], []
    for i, o, k, s, d, p in zip(problem.in_spatial, problem.out_spatial, problem.kernel, problem.stride,
                                problem.dilation, problem.pad_pre):
        span = d * (k - 1) + 1
        size, v = tile_size(span, problem.nd)
        count = -(-((o - 1) * s + 1) // v)
        sizes.append(size)
        valid.append(v)
        counts.append(count)
        extents.append(max(count * v + span - 1, p + i))
    return tuple(sizes), tuple(valid), tuple(counts), tuple(extents)


class FftTilingBackwardFilter(TritonConvAlgorithm):
    """The same sum over small tiles: dy (spread by the stride) cut into tiles of V outputs,
    each zero-padded to L and paired with the L-wide input window it meets (one ``unfold``
    view of the padded x); the per-frequency sum runs over images and tiles at once."""
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.FFT_TILING
    exact = False

    def not_applicable(self, problem):
        sizes, _, counts, _ = wgrad_tiling(problem)
        return super().not_applicable(problem) or why_not_tiled(problem, sizes, counts, "dy")

    def buffers(self, problem):
        sizes, valid, counts, extents = wgrad_tiling(problem)
        images = problem.n * math.prod(counts)
        spread = tuple(c * v for c, v in zip(counts, valid))
        f32 = np.float32
        return _buffers(problem, sizes, images, [
            Buffer("xp", (problem.n, problem.c, *extents), f32), Buffer("xt", (images, problem.c, *sizes), f32),
            Buffer("dyp", (problem.n, problem.k, *spread), f32), Buffer("dyt", (images, problem.k, *sizes), f32)])

    def estimate(self, problem):
        sizes, _, counts, _ = wgrad_tiling(problem)
        return fft_estimate(problem, lengths=sizes, images=problem.n * math.prod(counts))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dw, dy = tensors["x"], tensors["w"], tensors["y"]
        nd = problem.nd
        dims = tuple(range(2, 2 + nd))
        sizes, valid, counts, _ = wgrad_tiling(problem)
        n, k = problem.n, problem.k
        # the input windows (forward FFT_TILING's), transformed
        tiled_input_spectrum(problem, x, workspace, sizes, valid, counts)
        # dy spread by the stride, cut into tiles of V, each zero-padded to L
        dyp, dyt = workspace["dyp"], workspace["dyt"]
        dyp.zero_()
        dyp[_spread(problem)].copy_(dy)
        pieces = dyp
        for axis, v in enumerate(valid):
            pieces = pieces.unfold(2 + axis, v, v)
        dyt.zero_()
        dyt.view(n, *counts, k, *sizes)[(Ellipsis,) + tuple(slice(0, v) for v in valid)].copy_(
            pieces.permute(tile_major(nd)))
        torch.fft.rfftn(dyt, dim=dims, out=torch.view_as_complex(workspace["DY"]))
        reduce_and_finish(problem, workspace, sizes, n * math.prod(counts), dw, alpha, beta)
