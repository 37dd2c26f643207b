"""Backward filter ALGO_0: explicit im2col, then one GEMM per batch block.

The column matrix holds, for every (channel, tap) of a group, the input values that
tap multiplies at each output position (zero where it reads padding). Then
dw (Kg x Cg*taps) += dy (Kg x positions) @ cols^T (positions x Cg*taps): the whole
filter gradient of a block in one GEMM, summed over blocks in a fixed order.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from .common import store
from .conv_bwd_common import (BLAS_FLOPS, MEM_BW, batch_block, blocks, covers_output, grouped, prod,
                              shaped, tap_boxes)


class Im2colGemmBackwardFilter(Algorithm):
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.ALGO_0
    exact = True

    def _block(self, problem):
        taps, out = prod(problem.kernel), prod(problem.out_spatial)
        per_image = (problem.k + problem.c * taps) * out * problem.accumulator.itemsize
        return batch_block(problem.n, per_image)

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        b, acc = self._block(problem), problem.accumulator
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        taps, out = prod(problem.kernel), prod(problem.out_spatial)
        return [Buffer("dy", (b * problem.k * out,), acc),
                Buffer("cols", (b * problem.c * taps * out,), acc),
                Buffer("part", (g, kg, cg * taps), acc),
                Buffer("dw", (g, kg, cg * taps), acc)]

    def estimate(self, problem):
        taps = prod(problem.kernel)
        cols_bytes = problem.n * problem.c * taps * prod(problem.out_spatial) * 4
        return problem.flops / BLAS_FLOPS + 2 * cols_bytes / MEM_BW

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dy, dw = tensors["x"], tensors["y"], tensors["w"]
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        taps, out_sp = prod(problem.kernel), problem.out_spatial
        boxes = list(tap_boxes(problem))
        dense = len(boxes) == taps and all(covers_output(problem, o) for _, _, o, _ in boxes)
        total = workspace["dw"]
        total[...] = 0
        for n0, b in blocks(problem.n, self._block(problem)):
            dyp = shaped(workspace["dy"], (g, kg, b, *out_sp))
            dyp[...] = np.moveaxis(grouped(dy[n0:n0 + b], g), 0, 2)
            cols = shaped(workspace["cols"], (g, cg, taps, b, *out_sp))
            if not dense:
                cols[...] = 0  # positions that read padding
            xg = np.moveaxis(grouped(x[n0:n0 + b], g), 0, 2)  # (G, Cg, b, *in)
            for flat, _, out_sl, in_sl in boxes:  # im2col
                cols[(slice(None), slice(None), flat, slice(None)) + out_sl] = xg[(Ellipsis,) + in_sl]
            np.matmul(dyp.reshape(g, kg, -1), cols.reshape(g, cg * taps, -1).transpose(0, 2, 1),
                      out=workspace["part"])
            total += workspace["part"]
        store(dw, total.reshape(problem.k, cg, *problem.kernel), alpha, beta)
