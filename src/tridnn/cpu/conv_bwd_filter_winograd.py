"""Backward filter WINOGRAD_NONFUSED: F(3x3, 2x2) over dy tiles (3x3 filters, stride 1, 2D).

dw is the correlation of the padded input with dy. Cut dy into 2x2 tiles: each
meets a 4x4 window of the input (windows overlap by 2), and that tile's share of
the 3x3 filter gradient is Winograd's F(3, 2) in each dim, with dy in the role of
the "filter". The transforms are linear, so all tiles and images are summed in the
transform domain (one GEMM per point: (Kg x rows) @ (rows x Cg)) and only the final
sum is transformed back. Transforms of x and dy are materialized (non-fused).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..algorithms.base import Algorithm
from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from .common import store
from .conv_bwd_common import (BLAS_FLOPS, MEM_BW, batch_block, blocks, shaped, transform_2d,
                              winograd_3x3_applies, winograd_matrices)


class WinogradNonfusedBackwardFilter(Algorithm):
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.WINOGRAD_NONFUSED
    exact = False

    def not_applicable(self, problem):
        return winograd_3x3_applies(problem)

    @staticmethod
    def _tiles(problem):
        return tuple(-(-o // 2) for o in problem.out_spatial)

    def _block(self, problem):
        th, tw = self._tiles(problem)
        per_image = problem.accumulator.itemsize * (
            problem.c * (2 * th + 2) * (2 * tw + 2) + problem.k * 4 * th * tw
            + 2 * 16 * th * tw * (problem.c + problem.k))
        return batch_block(problem.n, per_image)

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        b, acc = self._block(problem), problem.accumulator
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        th, tw = self._tiles(problem)
        rows = b * th * tw
        return [Buffer("x_pad", (b * problem.c * (2 * th + 2) * (2 * tw + 2),), acc),
                Buffer("dy_pad", (b * problem.k * 4 * th * tw,), acc),
                Buffer("u", (rows * problem.c * 16,), acc),
                Buffer("u_rows", (rows * problem.c * 16,), acc),
                Buffer("v", (rows * problem.k * 16,), acc),
                Buffer("v_rows", (rows * problem.k * 16,), acc),
                Buffer("part", (16, g, kg, cg), acc),
                Buffer("m", (16, g, kg, cg), acc),
                Buffer("half", (rows * max(problem.c, problem.k) * 16,), acc)]  # half-transformed tiles

    def estimate(self, problem):
        th, tw = self._tiles(problem)
        tiles = problem.n * th * tw
        gemm = 2.0 * 16 * tiles * problem.k * problem.w.c
        # the tile transforms are batches of tiny matmuls and transposes: ~40 passes
        traffic = 40 * 16 * tiles * (problem.k + problem.c) * 4
        return gemm / BLAS_FLOPS + traffic / MEM_BW

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dy, dw = tensors["x"], tensors["y"], tensors["w"]
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        a_t, g_mat, b_t = winograd_matrices(3, 2, problem.accumulator)
        th, tw = self._tiles(problem)
        (h_out, w_out) = problem.out_spatial
        extent = (2 * th + 2, 2 * tw + 2)
        dst = tuple(slice(p, min(p + i, e)) for p, i, e in zip(problem.pad_pre, problem.in_spatial, extent))
        src = tuple(slice(0, s.stop - s.start) for s in dst)
        total, part = workspace["m"], workspace["part"]
        total[...] = 0
        for n0, b in blocks(problem.n, self._block(problem)):
            rows = b * th * tw
            x_pad = shaped(workspace["x_pad"], (b, g, cg, *extent))
            x_pad[...] = 0
            x_pad[(Ellipsis,) + dst] = x[(slice(n0, n0 + b), slice(None)) + src].reshape(
                (b, g, cg) + tuple(s.stop for s in src))
            windows = sliding_window_view(x_pad, (4, 4), axis=(3, 4))[:, :, :, ::2, ::2]
            u = transform_2d(b_t, windows, shaped(workspace["u"], (b, g, cg, th, tw, 4, 4)), workspace["half"])
            u_rows = shaped(workspace["u_rows"], (4, 4, g, b, th, tw, cg))
            u_rows[...] = u.transpose(5, 6, 1, 0, 3, 4, 2)
            dy_pad = shaped(workspace["dy_pad"], (b, g, kg, 2 * th, 2 * tw))
            dy_pad[...] = 0
            dy_pad[..., :h_out, :w_out] = dy[n0:n0 + b].reshape(b, g, kg, h_out, w_out)
            dy_tiles = dy_pad.reshape(b, g, kg, th, 2, tw, 2).transpose(0, 1, 2, 3, 5, 4, 6)
            v = transform_2d(g_mat, dy_tiles, shaped(workspace["v"], (b, g, kg, th, tw, 4, 4)), workspace["half"])
            v_rows = shaped(workspace["v_rows"], (4, 4, g, kg, b, th, tw))
            v_rows[...] = v.transpose(5, 6, 1, 2, 0, 3, 4)
            np.matmul(v_rows.reshape(16, g, kg, rows), u_rows.reshape(16, g, rows, cg), out=part)
            total += part
        spectra = total.reshape(4, 4, g, kg, cg).transpose(2, 3, 4, 0, 1)
        taps = transform_2d(a_t, spectra)                                   # (G, Kg, Cg, 3, 3)
        store(dw, taps.reshape(problem.k, cg, 3, 3), alpha, beta)
