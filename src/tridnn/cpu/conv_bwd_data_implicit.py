"""Backward data ALGO_1: implicit GEMM over the transposed problem.

No column matrix: for each kernel tap, one GEMM w_t^T (Cg x Kg) @ dy (Kg x box)
over the dy positions whose forward input lies inside x, added straight into the
strided view of dx that the tap reads forward. Temporaries are one batch block's
accumulator and one tap's product, whatever the filter size.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvBwdDataAlgo
from ..workspace import Buffer
from .common import store
from .conv_bwd_common import (BLAS_FLOPS, MEM_BW, batch_block, blocks, contract, grouped_filter, prod,
                              shaped, tap_boxes)
from .conv_depthwise import TransposedPlan

DEPTHWISE_RATE = 8e9  # elements/s of a depthwise pass (conv_depthwise), in cache
CALL_SECONDS = 3e-6   # overhead of one NumPy call

FULL_PRODUCT = 0.75  # compute a tap over all of dy (then slice) when its box covers this much


class ImplicitGemmBackwardData(Algorithm):
    direction = "bwd_data"
    enum = ConvBwdDataAlgo.ALGO_1
    exact = True

    @staticmethod
    def depthwise_plan(problem):
        """Depthwise layers (one filter per channel) have no GEMM to run per tap: they go
        through conv_depthwise's transposed plan, one multiply-add pass per tap and stride
        phase of dx, with no scatter-add."""
        return TransposedPlan(problem) if problem.depthwise and problem.k == problem.c else None

    def _block(self, problem):
        out, inp = prod(problem.out_spatial), prod(problem.in_spatial)
        per_image = (2 * problem.k * out + problem.c * out + problem.c * inp) * problem.accumulator.itemsize
        return batch_block(problem.n, per_image)

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        plan = self.depthwise_plan(problem)
        if plan is not None:
            return plan.buffers()
        b, acc = self._block(problem), problem.accumulator
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        taps, out, inp = prod(problem.kernel), prod(problem.out_spatial), prod(problem.in_spatial)
        return [Buffer("w", (taps, g, cg, kg), acc),
                Buffer("dy", (b * problem.k * out,), acc),
                Buffer("box", (b * problem.k * out,), acc),     # a tap's dy box, packed
                Buffer("prod", (b * problem.c * out,), acc),    # a tap's product
                Buffer("acc", (b * problem.c * inp,), acc)]

    def estimate(self, problem):
        # the same passes as ALGO_0's col2im, as per-tap GEMMs: measured a little faster for
        # 1x1 filters (no column matrix), slower for larger ones (smaller GEMMs, more calls)
        plan = self.depthwise_plan(problem)
        if plan is not None:
            return plan.estimate(DEPTHWISE_RATE, CALL_SECONDS)
        taps = prod(problem.kernel)
        img_bytes = problem.n * problem.c * prod(problem.out_spatial) * 4
        scale = 0.8 if taps == 1 or problem.k == problem.groups else 1.5  # 1x1, or depthwise (no GEMM)
        return problem.flops / BLAS_FLOPS + scale * 3 * taps * img_bytes / MEM_BW

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        w, dy, dx = tensors["w"], tensors["y"], tensors["x"]
        plan = self.depthwise_plan(problem)
        if plan is not None:
            plan.run(w, dy, dx, workspace, alpha, beta)
            return
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        out_sp, in_sp = problem.out_spatial, problem.in_spatial
        taps = prod(problem.kernel)
        wt = workspace["w"]  # (taps, G, Cg, Kg)
        wt[...] = np.transpose(grouped_filter(w, g).reshape(g, kg, cg, taps), (3, 0, 2, 1))
        for n0, b in blocks(problem.n, self._block(problem)):
            dyb = shaped(workspace["dy"], (b, g, kg, *out_sp))
            dyb.reshape(b, problem.k, *out_sp)[...] = dy[n0:n0 + b]
            acc = shaped(workspace["acc"], (b, g, cg, *in_sp))
            acc[...] = 0
            for flat, _, out_sl, in_sl in tap_boxes(problem):
                box = tuple(s.stop - s.start for s in out_sl)
                if prod(box) >= FULL_PRODUCT * prod(out_sp):
                    full = shaped(workspace["prod"], (b, g, cg, prod(out_sp)))
                    contract(wt[flat], dyb.reshape(b, g, kg, -1), full)
                    part = full.reshape(b, g, cg, *out_sp)[(Ellipsis,) + out_sl]
                else:
                    packed = shaped(workspace["box"], (b, g, kg, *box))
                    packed[...] = dyb[(Ellipsis,) + out_sl]
                    part = shaped(workspace["prod"], (b, g, cg, prod(box)))
                    contract(wt[flat], packed.reshape(b, g, kg, -1), part)
                    part = part.reshape(b, g, cg, *box)
                acc[(Ellipsis,) + in_sl] += part
            store(dx[n0:n0 + b], acc.reshape(b, problem.c, *in_sp), alpha, beta)
