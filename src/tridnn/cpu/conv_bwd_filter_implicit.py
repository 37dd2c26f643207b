"""Backward filter ALGO_1 and ALGO_3: implicit GEMMs, one per kernel tap.

Neither builds a column matrix; they differ in layout and blocking.

ALGO_1 works channels-first and reduces over the batch in blocks: per block, dy is
packed once as (G, Kg, positions) and, per tap, only the in-bounds box of x (and of
dy when the box is smaller) is packed, so no product of a padding zero is computed.

ALGO_3 works on a zero-padded copy of x, so padding is real zeros and no tap needs
a box. With stride 1 it copies nothing per tap: x's padded planes and dy (padded to
the same row length) are flattened, and a tap is then a contiguous shifted window of
each flat plane, fed to BLAS as a strided operand: dw_t (Kg x Cg) += dy (Kg x L) @
x[off_t : off_t + L]^T. With a larger stride the taps' inputs are strided views of a
channels-last padded copy, gathered into (positions, G, Cg) rows.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from .common import channels_last, store
from .conv_bwd_common import (BLAS_FLOPS, MEM_BW, batch_block, blocks, covers_output, dilated_extent,
                              grouped, prod, shaped, tap_boxes)
from .conv_depthwise import DepthwisePlan

DEPTHWISE_RATE = 8e9  # elements/s of a depthwise pass (conv_depthwise), in cache
CALL_SECONDS = 3e-6   # overhead of one NumPy call


class ImplicitGemmBackwardFilter(Algorithm):
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.ALGO_1
    exact = True

    def _block(self, problem):
        out = prod(problem.out_spatial)
        per_image = (2 * problem.k + problem.c) * out * problem.accumulator.itemsize
        return batch_block(problem.n, per_image)

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        b, acc = self._block(problem), problem.accumulator
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        out = prod(problem.out_spatial)
        return [Buffer("dy", (b * problem.k * out,), acc),
                Buffer("dy_box", (b * problem.k * out,), acc),
                Buffer("x_box", (b * problem.c * out,), acc),
                Buffer("part", (g, kg, cg), acc),
                Buffer("dw", (g, kg, cg, prod(problem.kernel)), acc)]

    def estimate(self, problem):
        taps = prod(problem.kernel)
        img_bytes = problem.n * (problem.c + problem.k) * prod(problem.out_spatial) * 4
        return problem.flops / BLAS_FLOPS + 1.5 * taps * img_bytes / MEM_BW

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dy, dw = tensors["x"], tensors["y"], tensors["w"]
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        out_sp = problem.out_spatial
        total, part = workspace["dw"], workspace["part"]
        total[...] = 0
        for n0, b in blocks(problem.n, self._block(problem)):
            dyp = shaped(workspace["dy"], (g, kg, b, *out_sp))
            dyp[...] = np.moveaxis(grouped(dy[n0:n0 + b], g), 0, 2)
            xg = np.moveaxis(grouped(x[n0:n0 + b], g), 0, 2)  # (G, Cg, b, *in)
            for flat, _, out_sl, in_sl in tap_boxes(problem):
                box = tuple(s.stop - s.start for s in out_sl)
                if covers_output(problem, out_sl):
                    dy_rows = dyp.reshape(g, kg, -1)
                else:
                    dy_rows = shaped(workspace["dy_box"], (g, kg, b, *box))
                    dy_rows[...] = dyp[(Ellipsis,) + out_sl]
                    dy_rows = dy_rows.reshape(g, kg, -1)
                x_rows = shaped(workspace["x_box"], (g, cg, b, *box))
                x_rows[...] = xg[(Ellipsis,) + in_sl]
                np.matmul(dy_rows, x_rows.reshape(g, cg, -1).transpose(0, 2, 1), out=part)
                total[..., flat] += part
        store(dw, total.reshape(problem.k, cg, *problem.kernel), alpha, beta)


class PaddedGemmBackwardFilter(Algorithm):
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.ALGO_3
    exact = True

    @classmethod
    def depthwise_plan(cls, problem):
        """Depthwise layers (one filter per channel) go through conv_depthwise's plan: x packed
        once per block into its stride phases (or channels-last), so that every tap is one
        dot-product pass of a shifted window against dy, with no per-tap gather. Channel-first
        stride-1 layers keep the shifted-window path below, which is the same method for
        them (measured 0-20% faster than the plan on 14x14 and 7x7 planes)."""
        if not (problem.depthwise and problem.k == problem.c):
            return None
        if cls._shifted(problem) and not channels_last(problem.x):
            return None
        return DepthwisePlan.of_filter(problem)

    @staticmethod
    def _padded_extent(problem):
        """Padded input span the taps actually reach: (out - 1) * stride + dilated kernel."""
        return tuple((o - 1) * s + e for o, s, e in zip(problem.out_spatial, problem.stride,
                                                         dilated_extent(problem)))

    @staticmethod
    def _shifted(problem) -> bool:
        return all(s == 1 for s in problem.stride)

    def _flat(self, problem):
        """Flat-plane geometry of the stride-1 path: (plane length F, window length L,
        element stride of each spatial dim, offset of each tap)."""
        padded = self._padded_extent(problem)
        steps = [prod(padded[i + 1:]) for i in range(problem.nd)]
        span = dilated_extent(problem)
        window = problem.out_spatial[0] * steps[0]
        plane = prod(padded) + sum((e - 1) * st for e, st in zip(span[1:], steps[1:]))
        offsets = [sum(t * d * st for t, d, st in zip(tap, problem.dilation, steps))
                   for tap in np.ndindex(*problem.kernel)]
        return plane, window, steps, offsets

    def _block(self, problem):
        if self._shifted(problem):
            plane, window, _, _ = self._flat(problem)
            per_image = (problem.c * plane + problem.k * window) * problem.accumulator.itemsize
        else:
            out = prod(problem.out_spatial)
            per_image = (prod(self._padded_extent(problem)) * problem.c + (problem.k + problem.c) * out) \
                * problem.accumulator.itemsize
        return batch_block(problem.n, per_image, 16 << 20)

    def buffers(self, problem):
        if problem.n == 0:
            return []  # an empty batch runs nothing (execute handles it)
        plan = self.depthwise_plan(problem)
        if plan is not None:
            return plan.filter_buffers()
        b, acc = self._block(problem), problem.accumulator
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        total = Buffer("dw", (g, kg, cg, prod(problem.kernel)), acc)
        if self._shifted(problem):
            plane, window, _, _ = self._flat(problem)
            return [Buffer("x_pad", (b * problem.c * plane,), acc),
                    Buffer("dy", (b * problem.k * window,), acc),
                    Buffer("part", (b * g * kg * cg,), acc), total]
        out = prod(problem.out_spatial)
        return [Buffer("x_pad", (b * prod(self._padded_extent(problem)) * problem.c,), acc),
                Buffer("dy", (b * out * problem.k,), acc),
                Buffer("x_tap", (b * out * problem.c,), acc),
                Buffer("part", (g, kg, cg), acc), total]

    def estimate(self, problem):
        plan = self.depthwise_plan(problem)
        if plan is not None:
            return plan.estimate(DEPTHWISE_RATE, CALL_SECONDS, products=False)
        taps = prod(problem.kernel)
        img_bytes = problem.n * problem.c * prod(problem.out_spatial) * 4
        pad_bytes = problem.n * problem.c * prod(self._padded_extent(problem)) * 4
        gather = 0 if self._shifted(problem) else 2 * taps * img_bytes
        # one BLAS call per image, group and tap; a one-by-one product (depthwise) is a dot
        # product costing far less (measured ~0.02 us: 69K of them in 1.7 ms on dw960_7)
        per_call = 0.02e-6 if problem.w.c * (problem.k // problem.groups) == 1 else 0.3e-6
        calls = taps * problem.n * problem.groups * per_call if self._shifted(problem) else 0
        # the shifted-window GEMMs read x with a plane-sized leading dimension: fine for
        # few channels per group (depthwise), measured 3-10x slower than im2col for wide ones
        wide = 4.0 if self._shifted(problem) and problem.w.c * (problem.k // problem.groups) > 64 else 1.0
        return wide * problem.flops / BLAS_FLOPS + (gather + 2 * pad_bytes) / MEM_BW + calls

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        plan = self.depthwise_plan(problem)
        if plan is not None:
            plan.run_filter(tensors["x"], tensors["y"], tensors["w"], workspace, alpha, beta)
            return
        total = workspace["dw"]
        total[...] = 0
        if self._shifted(problem):
            self._run_shifted(problem, tensors, workspace, total)
        else:
            self._run_gathered(problem, tensors, workspace, total)
        store(tensors["w"], total.reshape(problem.k, problem.w.c, *problem.kernel), alpha, beta)

    def _run_shifted(self, problem, tensors, workspace, total):
        x, dy = tensors["x"], tensors["y"]
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        padded, out_sp = self._padded_extent(problem), problem.out_spatial
        plane, window, _, offsets = self._flat(problem)
        dst = tuple(slice(p, min(p + i, e)) for p, i, e in zip(problem.pad_pre, problem.in_spatial, padded))
        src = tuple(slice(0, s.stop - s.start) for s in dst)
        for n0, b in blocks(problem.n, self._block(problem)):
            x_pad = shaped(workspace["x_pad"], (b, g, cg, plane))
            x_pad[...] = 0
            x_pad[..., :prod(padded)].reshape(b, problem.c, *padded)[(slice(None), slice(None)) + dst] = \
                x[(slice(n0, n0 + b), slice(None)) + src]
            # dy rows padded to the padded input's row length: (b, G, Kg, o_0 * P_1 * ... )
            dyp = shaped(workspace["dy"], (b, g, kg, window))
            dyp[...] = 0
            dyp.reshape(b, problem.k, out_sp[0], *padded[1:])[(Ellipsis,) + tuple(
                slice(0, o) for o in out_sp[1:])] = dy[n0:n0 + b]
            part = shaped(workspace["part"], (b, g, kg, cg))
            for flat, offset in enumerate(offsets):
                np.matmul(dyp, x_pad[..., offset:offset + window].swapaxes(-1, -2), out=part)
                total[..., flat] += part.sum(axis=0)

    def _run_gathered(self, problem, tensors, workspace, total):
        x, dy = tensors["x"], tensors["y"]
        g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
        out_sp, padded = problem.out_spatial, self._padded_extent(problem)
        part = workspace["part"]
        # where x lands in the padded copy (x may reach past what the taps read)
        dst = tuple(slice(p, min(p + i, e)) for p, i, e in zip(problem.pad_pre, problem.in_spatial, padded))
        src = tuple(slice(0, s.stop - s.start) for s in dst)
        for n0, b in blocks(problem.n, self._block(problem)):
            x_pad = shaped(workspace["x_pad"], (b, *padded, problem.c))
            x_pad[...] = 0
            x_pad[(slice(None),) + dst] = np.moveaxis(x[(slice(n0, n0 + b), slice(None)) + src], 1, -1)
            dyc = shaped(workspace["dy"], (b, *out_sp, g, kg))
            dyc.reshape(b, *out_sp, problem.k)[...] = np.moveaxis(dy[n0:n0 + b], 1, -1)
            dy_rows = dyc.reshape(-1, g, kg).transpose(1, 2, 0)  # (G, Kg, positions), BLAS-strided
            x_tap = shaped(workspace["x_tap"], (b, *out_sp, problem.c))
            for flat, tap in enumerate(np.ndindex(*problem.kernel)):
                view = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, s, o in
                             zip(tap, problem.dilation, problem.stride, out_sp))
                x_tap[...] = x_pad[(slice(None),) + view]
                np.matmul(dy_rows, x_tap.reshape(-1, g, cg).transpose(1, 0, 2), out=part)
                total[..., flat] += part
