"""Backward filter FFT and FFT_TILING: torch.fft (cuFFT on the GPU) for the transforms, a
Triton GEMM for the per-frequency reduction over images, every buffer in the workspace.

The filter gradient is a correlation of the padded input with dy, summed over images:

    dw[k, c, r] = sum_n sum_o x_pad[n, g Cg + c, o s + r d] dy[n, k, o]

With dy spread by the stride into a zero buffer (dy_up[o s] = dy[o]) this is
sum_u x_pad[u + r d] dy_up[u], and with both zero-padded to L >= the padded input (no
index wraps around), in the frequency domain

    corr[k, c] = IFFT( sum_n FFT(x_pad[n, g Cg + c]) * conj(FFT(dy_up[n, k])) ),
    dw[k, c, r] = corr[k, c, r d]   (taps reversed for CONVOLUTION mode).

The steps, each writing its workspace buffer: pad x (float32), rfftn; spread dy, rfftn;
``spectral_gemm`` sums over the images, one complex GEMM DY^H X per frequency and group
(buffers frequency-major, as conv_fft's); irfftn; the taps are picked and blended into dw
(alpha, beta, one rounding to the data type). Any stride, dilation, groups and 1-3
spatial dims. Rounding differs from direct summation (``exact = False``); the sums run in a
fixed order (deterministic).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from . import spectral_gemm
from .common import TritonConvAlgorithm
from .conv_fft import (by_frequency, fft_estimate, fft_lengths, filter_by_frequency, input_spectrum, planes_first,
                       spectral_precision, spectrum, transform)
from .conv_fft_tiling import tile_major, tile_size, tiled_input_spectrum, why_not_tiled


def reduce_and_finish(problem, workspace, lengths, dw, alpha, beta) -> None:
    """From the spectra X [*spectrum, images, C] and DY [*spectrum, images, K] in the workspace:
    DW = the sum over images of conj(DY) X per frequency (``spectral_gemm``), its inverse
    transform at ``lengths``, and the taps at multiples of the dilation (reversed for
    CONVOLUTION mode) blended into dw once."""
    nd = problem.nd
    dims = tuple(range(2, 2 + nd))
    g = problem.groups
    # DW[f, g][k, c] = sum_i conj(DY[f, g][i, k]) X[f, g][i, c]
    spectral_gemm.contract(by_frequency(workspace["DY"], nd, g).transpose(2, 3), by_frequency(workspace["X"], nd, g),
                           filter_by_frequency(workspace["DW"], nd, g), spectral_precision(problem), conj_a=True)
    corr = planes_first(workspace["corr"], nd)
    transform(torch.fft.irfftn, torch.view_as_complex(planes_first(workspace["DW"], nd)), corr, dims, s=lengths)
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
    return staging + [Buffer("X", (*S, images, c, 2), f32), Buffer("DY", (*S, images, k, 2), f32),
                      Buffer("DW", (*S, k, cg, 2), f32), Buffer("corr", (*lengths, k, cg), f32)]


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
        return _buffers(problem, L, problem.n, [Buffer("xp", (*L, problem.n, problem.c), f32),
                                                Buffer("dyp", (*L, problem.n, problem.k), f32)])

    def estimate(self, problem):
        return fft_estimate(problem)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dw, dy = tensors["x"], tensors["w"], tensors["y"]
        dims = tuple(range(2, 2 + problem.nd))
        L = fft_lengths(problem)
        input_spectrum(problem, x, workspace)
        dyp = planes_first(workspace["dyp"], problem.nd)
        dyp.zero_()
        dyp[_spread(problem)].copy_(dy)
        transform(torch.fft.rfftn, dyp, torch.view_as_complex(planes_first(workspace["DY"], problem.nd)), dims)
        reduce_and_finish(problem, workspace, L, dw, alpha, beta)


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
            Buffer("xp", (problem.n, problem.c, *extents), f32), Buffer("xt", (*sizes, images, problem.c), f32),
            Buffer("dyp", (problem.n, problem.k, *spread), f32), Buffer("dyt", (*sizes, images, problem.k), f32)])

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
        dyt = planes_first(dyt, nd)
        dyt.zero_()
        dyt.view(n, *counts, k, *sizes)[(Ellipsis,) + tuple(slice(0, v) for v in valid)].copy_(
            pieces.permute(tile_major(nd)))
        transform(torch.fft.rfftn, dyt, torch.view_as_complex(planes_first(workspace["DY"], nd)), dims)
        reduce_and_finish(problem, workspace, sizes, dw, alpha, beta)
