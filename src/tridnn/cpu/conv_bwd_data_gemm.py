"""Backward data ALGO_0: GEMM into columns, then col2im.

The transposed problem as one GEMM per batch block: every tap's weights side by
side, W^T (taps*Cg x Kg) @ dy (Kg x positions), gives the column matrix, whose
row block for tap t is that tap's contribution to dx at the positions the tap
reads in the forward pass. col2im scatters each row block into dx with a strided
add, accumulating in the workspace, so the caller's dx is written once.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvBwdDataAlgo
from ..workspace import Buffer
from .common import store
from .conv_bwd_common import (BLAS_FLOPS, MEM_BW, batch_block, blocks, contract, grouped_filter, prod,
                              shaped, tap_boxes)


class Col2imGemmBackwardData(Algorithm):
    direction = "bwd_data"
    enum = ConvBwdDataAlgo.ALGO_0
    exact = True

    def _block(self, problem):
        taps, out, inp = prod(problem.kernel), prod(problem.out_spatial), prod(problem.in_spatial)
        per_image = (problem.k * out + taps * problem.c * out + problem.c * inp) * problem.accumulator.itemsize
        return batch_block(problem.n, per_image)

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        b, acc = self._block(problem), problem.accumulator
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        taps, out, inp = prod(problem.kernel), prod(problem.out_spatial), prod(problem.in_spatial)
        return [Buffer("w", (g, taps * cg, kg), acc),
                Buffer("dy", (b * problem.k * out,), acc),
                Buffer("cols", (b * g * taps * cg * out,), acc),
                Buffer("acc", (b * problem.c * inp,), acc)]

    def estimate(self, problem):
        taps = prod(problem.kernel)
        cols_bytes = problem.n * problem.c * taps * prod(problem.out_spatial) * 4
        return problem.flops / BLAS_FLOPS + 3 * cols_bytes / MEM_BW

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        w, dy, dx = tensors["w"], tensors["y"], tensors["x"]
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        taps, out_sp, in_sp = prod(problem.kernel), problem.out_spatial, problem.in_spatial
        wt = workspace["w"]  # (G, taps*Cg, Kg): row (t, c) of group g holds w[g, :, c, t]
        wt.reshape(g, taps, cg, kg)[...] = np.transpose(
            grouped_filter(w, g).reshape(g, kg, cg, taps), (0, 3, 2, 1))
        for n0, b in blocks(problem.n, self._block(problem)):
            dyb = shaped(workspace["dy"], (b, g, kg, prod(out_sp)))
            dyb.reshape(b, problem.k, *out_sp)[...] = dy[n0:n0 + b]
            cols = shaped(workspace["cols"], (b, g, taps * cg, prod(out_sp)))
            contract(wt, dyb, cols)
            cols = cols.reshape(b, g, taps, cg, *out_sp)
            acc = shaped(workspace["acc"], (b, g, cg, *in_sp))
            acc[...] = 0
            for flat, _, out_sl, in_sl in tap_boxes(problem):  # col2im
                acc[(Ellipsis,) + in_sl] += cols[(slice(None), slice(None), flat, slice(None)) + out_sl]
            store(dx[n0:n0 + b], acc.reshape(b, problem.c, *in_sp), alpha, beta)
