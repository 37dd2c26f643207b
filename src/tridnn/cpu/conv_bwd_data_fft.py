"""Backward data FFT and FFT_TILING: dx as a linear convolution computed with real FFTs.

dx (padded) is the full convolution of dy, upsampled by the stride, with the dilated
filter; in frequency space that is a per-frequency GEMM over the output channels,
DX[f] (tiles x Cg) = DY[f] (tiles x Kg) @ W[f] (Kg x Cg), for every group. FFT
transforms each image whole; FFT_TILING cuts dy into small tiles, transforms each at
a small size and overlap-adds the results, which keeps the spectra small for large
images and small filters. Both round inside the transforms, so they are not exact.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvBwdDataAlgo
from ..workspace import Buffer
from .common import store
from .conv_bwd_common import (SpectralPlan, batch_block, blocks, complex_accumulator, grouped_filter, prod,
                              shaped, spectral_estimate, tile_pieces)


class _SpectralBackwardData(Algorithm):
    direction = "bwd_data"
    exact = False
    tiled = False

    def _plan(self, problem):
        return SpectralPlan(problem, self.tiled)

    def _padded(self, problem, plan):
        """Extent of the padded-dx accumulator: every tile's output, and all of pad + x,
        rounded up to whole tiles for the overlap-add view."""
        out = []
        for c, t, f, pre, size in zip(plan.count, plan.tile, plan.fft, problem.pad_pre, problem.in_spatial):
            need = max((c - 1) * t + f, pre + size)
            out.append(-(-need // t) * t)
        return tuple(out)

    def _per_image(self, problem, plan):
        real, cplx = problem.accumulator.itemsize, 2 * problem.accumulator.itemsize
        up = sum(plan.dy_tiles_size(problem.k))
        spectra = plan.tiles * plan.freqs * (2 * problem.k + problem.c)
        return real * (up + plan.tiles * problem.c * prod(plan.fft)
                       + problem.c * prod(self._padded(problem, plan))) + cplx * spectra

    def _block(self, problem):
        plan = self._plan(problem)
        return batch_block(problem.n, self._per_image(problem, plan))

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        plan, b = self._plan(problem), self._block(problem)
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        real, cplx = problem.accumulator, complex_accumulator(problem)
        spec = b * plan.tiles * plan.freqs
        return [Buffer("w_dilated", (g * kg * cg * prod(plan.fft),), real),
                Buffer("w_hat", (plan.freqs, g, kg, cg), cplx),
                Buffer("dy_up", (b * plan.dy_tiles_size(problem.k)[0],), real),
                Buffer("dy_tiles", (b * plan.dy_tiles_size(problem.k)[1],), real),
                Buffer("dy_hat", (spec * problem.k,), cplx),
                Buffer("dy_rows", (spec * problem.k,), cplx),
                Buffer("dx_rows", (spec * problem.c,), cplx),
                Buffer("dx_tiles", (b * plan.tiles * problem.c * prod(plan.fft),), real),
                Buffer("dx_pad", (b * problem.c * prod(self._padded(problem, plan)),), real)]

    def estimate(self, problem):
        return spectral_estimate(problem, self._plan(problem))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        w, dy, dx = tensors["w"], tensors["y"], tensors["x"]
        plan = self._plan(problem)
        g, cg, kg, nd = problem.groups, problem.w.c, problem.k // problem.groups, problem.nd
        axes, spectrum = plan.axes, plan.spectrum
        # the dilated filter's spectrum, frequency-major: (freqs, G, Kg, Cg)
        w_dil = shaped(workspace["w_dilated"], (g, kg, cg, *plan.fft))
        w_dil[...] = 0
        w_dil[(Ellipsis,) + tuple(slice(0, e, d) for e, d in zip(plan.span, problem.dilation))] = \
            grouped_filter(w, g)
        w_hat = np.fft.rfftn(w_dil, s=plan.fft, axes=axes)
        workspace["w_hat"][...] = w_hat.reshape(g, kg, cg, plan.freqs).transpose(3, 0, 1, 2)
        padded = self._padded(problem, plan)
        crop = tuple(slice(p, p + i) for p, i in zip(problem.pad_pre, problem.in_spatial))
        for n0, b in blocks(problem.n, self._block(problem)):
            tiles = plan.dy_tiles(workspace["dy_up"], workspace["dy_tiles"], dy[n0:n0 + b], problem.stride)
            dy_hat = shaped(workspace["dy_hat"], (b, *plan.count, problem.k, *spectrum))
            np.fft.rfftn(tiles, axes=axes, out=dy_hat)
            rows = plan.frequency_major(dy_hat, g, workspace["dy_rows"])       # (F, G, b*tiles, Kg)
            dx_rows = shaped(workspace["dx_rows"], (plan.freqs, g, b * plan.tiles, cg))
            np.matmul(rows, workspace["w_hat"], out=dx_rows)
            dx_spec = dx_rows.transpose(2, 1, 3, 0).reshape(b, *plan.count, problem.c, *spectrum)
            dx_tiles = shaped(workspace["dx_tiles"], (b, *plan.count, problem.c, *plan.fft))
            np.fft.irfftn(dx_spec, s=plan.fft, axes=axes, out=dx_tiles)
            acc = shaped(workspace["dx_pad"], (b, problem.c, *padded))
            acc[...] = 0
            self._overlap_add(acc, dx_tiles, plan, nd)
            store(dx[n0:n0 + b], acc[(slice(None), slice(None)) + crop], alpha, beta)

    @staticmethod
    def _overlap_add(acc, tiles, plan, nd):
        """Add every tile's output block at its offset: in tile-sized chunks, so each chunk
        position is one strided add over all tiles at once."""
        b, c = acc.shape[:2]
        blocked = acc.reshape((b, c) + tuple(v for p, t in zip(acc.shape[2:], plan.tile) for v in (p // t, t)))
        # tiles (b, *count, C, *fft) -> (b, C, count_0, fft_0, count_1, fft_1, ...)
        order = (0, 1 + nd) + tuple(v for i in range(nd) for v in (1 + i, 2 + nd + i))
        src = tiles.transpose(order)
        for offsets, pieces in tile_pieces(plan.tile, plan.fft):
            dst_idx, src_idx = [slice(None), slice(None)], [slice(None), slice(None)]
            for j, piece, count in zip(offsets, pieces, plan.count):
                dst_idx += [slice(j, j + count), slice(0, piece.stop - piece.start)]
                src_idx += [slice(None), piece]
            blocked[tuple(dst_idx)] += src[tuple(src_idx)]


class FftBackwardData(_SpectralBackwardData):
    enum = ConvBwdDataAlgo.FFT
    tiled = False


class FftTilingBackwardData(_SpectralBackwardData):
    enum = ConvBwdDataAlgo.FFT_TILING
    tiled = True
