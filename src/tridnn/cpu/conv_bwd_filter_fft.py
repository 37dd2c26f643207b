"""Backward filter FFT and FFT_TILING: dw as a correlation computed with real FFTs.

dw[k, c, t] is the correlation of the padded input with dy upsampled by the stride,
read at the dilated tap offsets. In frequency space it is a per-frequency GEMM that
reduces over images (and tiles): DW[f] (Kg x Cg) += conj(DY[f]) (Kg x rows) @ X[f]
(rows x Cg). FFT transforms whole images; FFT_TILING cuts dy into small tiles and
pairs each with the input window it meets, so the transforms stay small. The sum
stays in frequency space until one inverse transform at the end.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..algorithms.base import Algorithm
from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from .common import store
from .conv_bwd_common import (SpectralPlan, batch_block, blocks, complex_accumulator, prod, shaped,
                              spectral_estimate)


class _SpectralBackwardFilter(Algorithm):
    direction = "bwd_filter"
    exact = False
    tiled = False

    def _plan(self, problem):
        return SpectralPlan(problem, self.tiled)

    @staticmethod
    def _window_extent(plan):
        return tuple((c - 1) * t + f for c, t, f in zip(plan.count, plan.tile, plan.fft))

    def _per_image(self, problem, plan):
        real, cplx = problem.accumulator.itemsize, 2 * problem.accumulator.itemsize
        up = sum(plan.dy_tiles_size(problem.k))
        spectra = plan.tiles * plan.freqs * 2 * (problem.k + problem.c)
        return real * (up + problem.c * prod(self._window_extent(plan))) + cplx * spectra

    def _block(self, problem):
        return batch_block(problem.n, self._per_image(problem, self._plan(problem)))

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        plan, b = self._plan(problem), self._block(problem)
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        real, cplx = problem.accumulator, complex_accumulator(problem)
        spec = b * plan.tiles * plan.freqs
        return [Buffer("x_pad", (b * problem.c * prod(self._window_extent(plan)),), real),
                Buffer("dy_up", (b * plan.dy_tiles_size(problem.k)[0],), real),
                Buffer("dy_tiles", (b * plan.dy_tiles_size(problem.k)[1],), real),
                Buffer("x_hat", (spec * problem.c,), cplx),
                Buffer("x_rows", (spec * problem.c,), cplx),
                Buffer("dy_hat", (spec * problem.k,), cplx),
                Buffer("dy_rows", (spec * problem.k,), cplx),
                Buffer("part", (plan.freqs, g, kg, cg), cplx),
                Buffer("dw_hat", (plan.freqs, g, kg, cg), cplx)]

    def estimate(self, problem):
        return spectral_estimate(problem, self._plan(problem))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dy, dw = tensors["x"], tensors["y"], tensors["w"]
        plan = self._plan(problem)
        g, cg, kg, nd = problem.groups, problem.w.c, problem.k // problem.groups, problem.nd
        axes, spectrum, extent = plan.axes, plan.spectrum, self._window_extent(plan)
        dst = tuple(slice(p, min(p + i, e)) for p, i, e in zip(problem.pad_pre, problem.in_spatial, extent))
        src = tuple(slice(0, s.stop - s.start) for s in dst)
        total = workspace["dw_hat"]
        total[...] = 0
        for n0, b in blocks(problem.n, self._block(problem)):
            x_pad = shaped(workspace["x_pad"], (b, problem.c, *extent))
            x_pad[...] = 0
            x_pad[(slice(None), slice(None)) + dst] = x[(slice(n0, n0 + b), slice(None)) + src]
            # the input window each dy tile meets: (b, C, *count, *fft) -> (b, *count, C, *fft)
            windows = sliding_window_view(x_pad, plan.fft, axis=tuple(range(2, 2 + nd)))
            windows = windows[(slice(None), slice(None)) + tuple(slice(None, None, t) for t in plan.tile)]
            windows = np.moveaxis(windows, 1, 1 + nd)
            x_hat = shaped(workspace["x_hat"], (b, *plan.count, problem.c, *spectrum))
            np.fft.rfftn(windows, s=plan.fft, axes=axes, out=x_hat)
            x_rows = plan.frequency_major(x_hat, g, workspace["x_rows"])       # (F, G, rows, Cg)
            tiles = plan.dy_tiles(workspace["dy_up"], workspace["dy_tiles"], dy[n0:n0 + b], problem.stride)
            dy_hat = shaped(workspace["dy_hat"], (b, *plan.count, problem.k, *spectrum))
            np.fft.rfftn(tiles, axes=axes, out=dy_hat)
            dy_rows = plan.frequency_major(dy_hat, g, workspace["dy_rows"])    # (F, G, rows, Kg)
            np.conjugate(dy_rows, out=dy_rows)
            np.matmul(dy_rows.transpose(0, 1, 3, 2), x_rows, out=workspace["part"])
            total += workspace["part"]
        spec = total.transpose(1, 2, 3, 0).reshape(g, kg, cg, *spectrum)
        full = np.fft.irfftn(spec, s=plan.fft, axes=axes)
        taps = full[(Ellipsis,) + tuple(slice(0, e, d) for e, d in zip(plan.span, problem.dilation))]
        store(dw, taps.reshape(problem.k, cg, *problem.kernel).astype(problem.accumulator), alpha, beta)


class FftBackwardFilter(_SpectralBackwardFilter):
    enum = ConvBwdFilterAlgo.FFT
    tiled = False


class FftTilingBackwardFilter(_SpectralBackwardFilter):
    enum = ConvBwdFilterAlgo.FFT_TILING
    tiled = True
