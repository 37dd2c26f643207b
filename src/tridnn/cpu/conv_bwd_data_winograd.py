"""Backward data WINOGRAD and WINOGRAD_NONFUSED (3x3 filters, stride 1, 2D).

With stride 1, dx is a forward correlation of dy (padded by 2 - pad) with the
filter flipped in space and with its channel axes swapped. That correlation runs
as Winograd's minimal filtering F(m x m, 3 x 3): each (m+2)^2 tile of dy and each
filter go to the transform domain, where the channel reduction is one GEMM per
transform point, and an inverse transform gives an m x m tile of dx.

WINOGRAD uses F(2x2, 3x3) (16 points, the best-conditioned tiles) and small batch
blocks, so its transformed tiles stay in cache-sized workspace; WINOGRAD_NONFUSED
uses F(4x4, 3x3) (36 points, 2.25x fewer multiplies than direct) over larger
blocks with the transformed tensors materialized. Both round in the transforms.
"""
from __future__ import annotations

from numpy.lib.stride_tricks import sliding_window_view

from ..algorithms.base import Algorithm
from ..types import ConvBwdDataAlgo
from ..workspace import Buffer
from .common import store
from .conv_bwd_common import (BLAS_FLOPS, MEM_BW, batch_block, blocks, contract, grouped_filter, shaped,
                              transform_2d, winograd_3x3_applies, winograd_matrices)


class _WinogradBackwardData(Algorithm):
    direction = "bwd_data"
    exact = False
    m = 2
    budget = 4 << 20

    def not_applicable(self, problem):
        return winograd_3x3_applies(problem)

    def _tiles(self, problem):
        return tuple(-(-i // self.m) for i in problem.in_spatial)

    def _per_image(self, problem):
        a2 = (self.m + 2) ** 2
        th, tw = self._tiles(problem)
        padded = (th * self.m + 2) * (tw * self.m + 2)
        return problem.accumulator.itemsize * (problem.k * padded + 3 * a2 * th * tw * (problem.k + problem.c))

    def _block(self, problem):
        return batch_block(problem.n, self._per_image(problem), self.budget)

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        b, acc = self._block(problem), problem.accumulator
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        a2 = (self.m + 2) ** 2
        th, tw = self._tiles(problem)
        rows = b * th * tw
        return [Buffer("u", (a2, g, cg, kg), acc),
                Buffer("dy_pad", (b * problem.k * (th * self.m + 2) * (tw * self.m + 2),), acc),
                Buffer("v", (rows * problem.k * a2,), acc),
                Buffer("v_rows", (rows * problem.k * a2,), acc),
                Buffer("m_rows", (rows * problem.c * a2,), acc),
                Buffer("dx_tiles", (rows * problem.c * self.m * self.m,), acc),
                Buffer("half", (rows * max(problem.k, problem.c) * a2,), acc)]  # half-transformed tiles

    def estimate(self, problem):
        a2 = (self.m + 2) ** 2
        th, tw = self._tiles(problem)
        tiles = problem.n * th * tw
        gemm = 2.0 * a2 * tiles * problem.k * problem.w.c
        # the tile transforms are batches of tiny matmuls and transposes: ~40 passes
        traffic = 40 * a2 * tiles * (problem.k + problem.c) * 4
        return gemm / BLAS_FLOPS + traffic / MEM_BW

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        w, dy, dx = tensors["w"], tensors["y"], tensors["x"]
        g, cg, kg, m = problem.groups, problem.w.c, problem.k // problem.groups, self.m
        a = m + 2
        acc_dtype = problem.accumulator
        a_t, g_mat, b_t = winograd_matrices(m, 3, acc_dtype)
        # the flipped, channel-swapped filter in the transform domain: (a*a, G, Cg, Kg)
        flipped = grouped_filter(w, g)[..., ::-1, ::-1].astype(acc_dtype)
        u = transform_2d(g_mat, flipped)                                   # (G, Kg, Cg, a, a)
        workspace["u"][...] = u.transpose(3, 4, 0, 2, 1).reshape(a * a, g, cg, kg)
        th, tw = self._tiles(problem)
        (h_in, w_in), (h_out, w_out) = problem.in_spatial, problem.out_spatial
        shift = tuple(2 - p for p in problem.pad_pre)                     # dy row i lands at i + shift
        dst, src = [], []
        for s, size, length in zip(shift, (h_out, w_out), (th * m + 2, tw * m + 2)):
            lo, hi = max(0, -s), min(size, length - s)
            src.append(slice(lo, hi))
            dst.append(slice(lo + s, hi + s))
        for n0, b in blocks(problem.n, self._block(problem)):
            dy_pad = shaped(workspace["dy_pad"], (b, g, kg, th * m + 2, tw * m + 2))
            dy_pad[...] = 0
            dy_pad[(Ellipsis,) + tuple(dst)] = dy[(slice(n0, n0 + b), slice(None)) + tuple(src)].reshape(
                b, g, kg, src[0].stop - src[0].start, src[1].stop - src[1].start)
            tiles = sliding_window_view(dy_pad, (a, a), axis=(3, 4))[:, :, :, ::m, ::m]
            v = transform_2d(b_t, tiles, shaped(workspace["v"], (b, g, kg, th, tw, a, a)), workspace["half"])
            v_rows = shaped(workspace["v_rows"], (a, a, g, kg, b, th, tw))
            v_rows[...] = v.transpose(5, 6, 1, 2, 0, 3, 4)
            m_rows = shaped(workspace["m_rows"], (a * a, g, cg, b * th * tw))
            contract(workspace["u"], v_rows.reshape(a * a, g, kg, -1), m_rows)
            spectra = m_rows.reshape(a, a, g, cg, b, th, tw).transpose(4, 2, 3, 5, 6, 0, 1)
            out = shaped(workspace["dx_tiles"], (b, g, cg, th, tw, m, m))
            transform_2d(a_t, spectra, out, workspace["half"])
            whole = out.transpose(0, 1, 2, 3, 5, 4, 6).reshape(b, problem.c, th * m, tw * m)
            store(dx[n0:n0 + b], whole[:, :, :h_in, :w_in], alpha, beta)


class WinogradBackwardData(_WinogradBackwardData):
    enum = ConvBwdDataAlgo.WINOGRAD
    m = 2
    budget = 4 << 20


class WinogradNonfusedBackwardData(_WinogradBackwardData):
    enum = ConvBwdDataAlgo.WINOGRAD_NONFUSED
    m = 4
    budget = 32 << 20
