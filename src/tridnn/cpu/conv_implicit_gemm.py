"""IMPLICIT_GEMM forward convolution: one GEMM per kernel tap over strided views.

The im2col matrix is never built. For each tap, the input positions that tap reads
form a strided view of x (only the in-bounds box, so padding costs nothing), and
``acc[box] += x_view @ w_tap`` contracts the channels of a group with BLAS. Images
are processed in blocks so the only temporaries are a block's accumulator and one
tap's product, whatever the batch size.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import BANDWIDTH, MATMUL_CALL, batch_block, gemm_rate, split_groups, store, tap_views, taps


class ImplicitGemmForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.IMPLICIT_GEMM
    exact = True

    def _block(self, problem):
        out = int(np.prod(problem.out_spatial))
        per_image = (2 * problem.k + problem.w.c) * out * problem.accumulator.itemsize
        return batch_block(problem, per_image)

    def buffers(self, problem):
        rows = self._block(problem) * int(np.prod(problem.out_spatial))
        acc = problem.accumulator
        return [Buffer("acc", (rows, problem.k), acc),             # block accumulator, (rows, G*Kg)
                Buffer("cols", (rows, problem.w.c), acc),          # one tap's input box, packed
                Buffer("prod", (rows, problem.k // problem.groups), acc)]  # one tap's product

    def estimate(self, problem):
        taps_n = int(np.prod(problem.kernel))
        out = int(np.prod(problem.out_spatial))
        out_bytes = problem.n * problem.k * out * 4
        rows = self._block(problem) * out
        calls = taps_n * problem.groups * -(-problem.n // self._block(problem))
        rate = gemm_rate(rows, problem.k // problem.groups, problem.w.c)
        # per tap: pack the input box, the product, and one pass adding it into the accumulator
        return problem.flops / rate + taps_n * 3 * out_bytes / BANDWIDTH + calls * MATMUL_CALL

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        acc_dtype = problem.accumulator
        wg = split_groups(w, g, axis=0)  # (G, Kg, Cg, *k)
        xg = split_groups(x, g)          # (N, G, Cg, *sp)
        block = self._block(problem)
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            acc = workspace["acc"][: b * int(np.prod(problem.out_spatial))]
            acc[...] = 0
            acc_img = acc.reshape(b, *problem.out_spatial, g, kg)
            for tap in taps(problem):
                hit = tap_views(problem, xg[n0:n0 + b], tap)
                if hit is None:
                    continue
                out_sl, x_tap = hit                              # x_tap: (b, G, Cg, *box)
                box = x_tap.shape[3:]
                rows = b * int(np.prod(box))
                cols = workspace["cols"][:rows].reshape(b, *box, cg)
                prod = workspace["prod"][:rows]
                for gi in range(g):
                    cols[...] = np.moveaxis(x_tap[:, gi], 1, -1)  # pack (b, *box, Cg)
                    w_tap = wg[(gi, slice(None), slice(None)) + tap].T.astype(acc_dtype, copy=False)
                    np.matmul(cols.reshape(rows, cg), w_tap, out=prod)  # (rows, Cg) @ (Cg, Kg)
                    acc_img[(slice(None),) + out_sl + (gi,)] += prod.reshape(b, *box, kg)
            out = np.moveaxis(acc.reshape(b, *problem.out_spatial, problem.k), -1, 1)
            store(y[n0:n0 + b], out, alpha, beta, epilogue, (slice(n0, n0 + b),))
