"""FFT_TILING forward convolution: overlap-save with small FFT tiles.

A whole-plane FFT's size (and workspace) grows with the image; tiling keeps every
transform small and cache-sized whatever the plane. The stride-1 output is cut into
tiles of T outputs per dim; tile t needs the padded input window [t*T, t*T + L) with
L = T + (dilated kernel) - 1. All windows of a block of images are one strided view
of the padded input (they overlap by L - T), transformed at once by ``np.fft.rfftn``
over their last axes. Per tile and frequency, the channel sum is the same complex
matrix product as in FFT (conv_fft.py); after the inverse transform the first T
outputs of each tile are valid (circular wrap-around only spoils the last L - T),
and these are stitched back into the output. Strides subsample the stride-1 result,
dilation spaces the filter taps in the filter's tile.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import BANDWIDTH, GEMM_RATE, batch_block, pad_into, prod, split_groups, store
from .conv_fft import (complex_dtype, dilated_kernel, fast_size, filter_spectrum, half_spectrum,
                       padded_extent, spectrum_view)

MIN_TILE = {1: 64, 2: 16, 3: 8}  # FFT points per dim of a tile, at least
MAX_TILE_POINTS = 1 << 16
BLOCK_BYTES = 64 << 20


class FftTilingForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.FFT_TILING
    exact = False

    def _tiling(self, problem):
        """(fft sizes L, valid outputs per tile T, tile counts, padded extents E) per dim."""
        nd = problem.nd
        keff, ext = dilated_kernel(problem), padded_extent(problem)
        sizes, valid, counts, extents = [], [], [], []
        for d in range(nd):
            size = fast_size(max(2 * keff[d], MIN_TILE[nd]), even=(d == nd - 1))
            full = ext[d] - keff[d] + 1          # stride-1 outputs along d
            size = min(size, fast_size(ext[d], even=(d == nd - 1)))  # no larger than the plane
            t = size - keff[d] + 1
            count = -(-full // t)
            sizes.append(size)
            valid.append(t)
            counts.append(count)
            extents.append((count - 1) * t + size)
        return tuple(sizes), tuple(valid), tuple(counts), tuple(extents)

    def not_applicable(self, problem):
        if prod(problem.kernel) == 1:
            return "a 1x1 filter is a plain GEMM over channels; FFT would only add transforms"
        sizes, valid, counts, extents = self._tiling(problem)
        if prod(counts) == 1:
            return (f"the padded plane {padded_extent(problem)} fits in one {sizes} FFT tile; "
                    f"tiling pays only for larger planes (use FFT)")
        if prod(sizes) > MAX_TILE_POINTS:
            return (f"the dilated kernel {dilated_kernel(problem)} needs {sizes} FFT tiles, over "
                    f"{MAX_TILE_POINTS} points")
        return None

    def _block(self, problem):
        sizes, valid, counts, extents = self._tiling(problem)
        item, cplx = problem.accumulator.itemsize, complex_dtype(problem.accumulator).itemsize
        tiles = prod(counts)
        per_image = (problem.c * prod(extents) * item
                     + tiles * prod(half_spectrum(sizes)) * (problem.c + problem.k) * cplx
                     + problem.k * tiles * (prod(sizes) + prod(valid)) * item)
        return batch_block(problem, per_image, BLOCK_BYTES)

    def buffers(self, problem):
        sizes, valid, counts, extents = self._tiling(problem)
        g, b = problem.groups, self._block(problem)
        cg, kg = problem.w.c, problem.k // g
        spec = half_spectrum(sizes)
        real, cplx = problem.accumulator, complex_dtype(problem.accumulator)
        return [Buffer("xpad", (b, problem.c, *extents), real),
                Buffer("xf", (*counts, *spec, g, b, cg), cplx),
                Buffer("wpad", (g, kg, cg, *sizes), real),
                Buffer("wf", (*spec, g, cg, kg), cplx),
                Buffer("yf", (*counts, *spec, g, b, kg), cplx),
                Buffer("ytiles", (b, problem.k, *counts, *sizes), real),
                Buffer("acc", (b, problem.k, *(c * t for c, t in zip(counts, valid))), real)]

    def estimate(self, problem):
        sizes, valid, counts, extents = self._tiling(problem)
        points = prod(sizes) * prod(counts)
        fft_flops = 2.5 * points * np.log2(max(prod(sizes), 2)) * problem.n * (problem.c + problem.k)
        gemm_flops = 8 * prod(half_spectrum(sizes)) * prod(counts) * problem.n * problem.k * problem.w.c
        bytes_moved = 8 * points * problem.n * (problem.c + problem.k) * 4
        return fft_flops / 3e9 + gemm_flops / (GEMM_RATE / 3) + bytes_moved / BANDWIDTH

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        nd, g, block = problem.nd, problem.groups, self._block(problem)
        sizes, valid, counts, extents = self._tiling(problem)
        filter_spectrum(problem, w, workspace["wpad"], workspace["wf"], sizes)
        post = tuple(e - i - p for e, i, p in zip(extents, problem.in_spatial, problem.pad_pre))
        tile_axes = tuple(range(3 + nd, 3 + 2 * nd))
        pick = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(problem.out_spatial, problem.stride))
        # (b, G, Kg, t1, L1, t2, L2, ...): tile counts interleaved with tile extents
        interleave = [0, 1, 2] + [a for d in range(nd) for a in (3 + d, 3 + nd + d)]
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            xpad = split_groups(workspace["xpad"][:b], g)
            pad_into(xpad.reshape(b, problem.c, *extents), x[n0:n0 + b], problem.pad_pre, post)
            # every input window as one overlapping view: (b, G, Cg, *tiles, *L)
            st = xpad.strides
            windows = np.lib.stride_tricks.as_strided(
                xpad, (*xpad.shape[:3], *counts, *sizes),
                (*st[:3], *(s * t for s, t in zip(st[3:], valid)), *st[3:]), writeable=False)
            xf = workspace["xf"][..., :b, :]
            np.fft.rfftn(windows, axes=tile_axes, out=spectrum_view(xf, 2 * nd))
            yf = workspace["yf"][..., :b, :]
            np.matmul(xf, workspace["wf"], out=yf)
            ytiles = split_groups(workspace["ytiles"][:b], g)
            np.fft.irfftn(spectrum_view(yf, 2 * nd), s=sizes, axes=tile_axes, out=ytiles)
            # keep the first T outputs of every tile and stitch the tiles together
            acc = workspace["acc"][:b]
            stitched = acc.reshape(b, g, problem.k // g, *(a for c, t in zip(counts, valid) for a in (c, t)))
            kept = ytiles[(Ellipsis,) + tuple(slice(0, t) for t in valid)]
            stitched[...] = kept.transpose(interleave)
            store(y[n0:n0 + b], acc[(Ellipsis,) + pick], alpha, beta, epilogue, (slice(n0, n0 + b),))
