"""DIRECT forward convolution: tap-by-tap multiply-accumulate, no GEMM.

For each kernel tap and each input channel of a group, the shifted input is
multiplied by that tap's weights and added into the output. The work is
taps x (channels per group) passes over the output, so it pays only where channels
per group are few (depthwise, small groups), where GEMM methods degenerate into
tiny, badly shaped matrix products. Depthwise layers (one filter per channel) run
through conv_depthwise's phase-split plan; the tap loop below serves small groups.

Those passes are memory-bound and NumPy pays per inner loop, so the layout is chosen
for long contiguous loops:
- the input is first copied, zero-padded, into a workspace buffer, so every tap reads
  one full box (no edge cases);
- NCHW data with rows of 24 outputs or more is processed plane by plane: one scalar
  weight per (output channel, tap) broadcast over rows of the plane;
- otherwise (NHWC data, or small planes with many channels) the buffer is channels
  last and each tap's weights are replicated along the output row, so weights, input
  and accumulator run contiguously over a whole (width x channels) row and NumPy
  fuses it into one loop;
- the output is computed in cache-sized blocks of rows (or of whole images for small
  planes), each stored (blended, rounded once) before the next.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import WORKERS, channels_last, pack_padded, parallel_map, prod, read_extent, store, taps
from .conv_depthwise import DepthwisePlan

MAX_CHANNELS_PER_GROUP = 16
MIN_PLANAR_ROW = 24      # output row length from which NCHW data is processed plane by plane
BLOCK_BYTES = 256 << 10   # accumulator + product of one block (they stay in L2)
CACHE_RATE = 20e9         # bytes/s of an in-cache NumPy elementwise pass (estimate)
CALL_SECONDS = 3e-6       # overhead of one NumPy call (estimate)
DEPTHWISE_RATE = 8e9      # elements/s of a depthwise pass, in cache (measured 8-16 on the dw suite)


class DirectForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.DIRECT
    exact = True

    def not_applicable(self, problem):
        if problem.w.c > MAX_CHANNELS_PER_GROUP:
            return (f"DIRECT is for depthwise and small-group convolutions (<= "
                    f"{MAX_CHANNELS_PER_GROUP} input channels per group); this one has {problem.w.c}")
        return None

    @staticmethod
    def depthwise_plan(problem):
        """The phase-split plan of conv_depthwise for depthwise layers (one filter per channel),
        None for the small-group layers that the tap loop below handles."""
        return DepthwisePlan.of(problem) if problem.depthwise and problem.k == problem.c else None

    def _blocks(self, problem):
        """(images, rows of the first spatial dim) per block, from the accumulator's size."""
        out = problem.out_spatial
        row = 2 * prod(out[1:]) * problem.k * problem.accumulator.itemsize  # acc + product
        rows = max(1, min(out[0], BLOCK_BYTES // max(row, 1))) if problem.nd > 1 else out[0]
        images = max(1, min(problem.n, BLOCK_BYTES // max(row * out[0], 1))) if rows == out[0] else 1
        return images, rows

    @staticmethod
    def _padded(problem):
        return read_extent(problem)

    @staticmethod
    def planar(problem) -> bool:
        """Channels-first (per-plane) passes for NCHW data with rows long enough to make
        the inner loop; channels-last passes otherwise (NHWC data, or small planes)."""
        return not channels_last(problem.x) and problem.out_spatial[-1] >= MIN_PLANAR_ROW

    def buffers(self, problem):
        plan = self.depthwise_plan(problem)
        if plan is not None:
            return plan.buffers()
        images, rows = self._blocks(problem)
        out, acc = problem.out_spatial, problem.accumulator
        weights = prod(problem.kernel) * problem.w.c * problem.k * (1 if self.planar(problem) else out[-1])
        block = (WORKERS, images * rows * prod(out[1:]) * problem.k)  # one block per worker
        return [Buffer("xpad", (images * prod(self._padded(problem)) * problem.c,), acc),
                Buffer("weights", (weights,), acc),
                Buffer("acc", block, acc), Buffer("prod", block, acc)]

    def estimate(self, problem):
        plan = self.depthwise_plan(problem)
        if plan is not None:
            return plan.estimate(DEPTHWISE_RATE, CALL_SECONDS)
        images, rows = self._blocks(problem)
        blocks = -(-problem.n // images) * -(-problem.out_spatial[0] // rows)
        passes = prod(problem.kernel) * problem.w.c
        out_bytes = problem.n * problem.k * prod(problem.out_spatial) * 4
        in_bytes = problem.n * problem.c * prod(problem.in_spatial) * 4
        return (passes * (4 * out_bytes / CACHE_RATE + blocks * 2 * CALL_SECONDS)
                + 3 * (in_bytes + out_bytes) / CACHE_RATE)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        plan = self.depthwise_plan(problem)
        if plan is not None:
            plan.run(x, w, y, workspace, alpha, beta, epilogue)
            return
        g, nd, cg, k = problem.groups, problem.nd, problem.w.c, problem.k
        kg, out, ntaps = k // g, problem.out_spatial, prod(problem.kernel)
        images, rows = self._blocks(problem)
        padded, planar = self._padded(problem), self.planar(problem)
        wk = np.moveaxis(w.reshape(k, cg, ntaps), (2, 1), (0, 1))  # (taps, Cg, K)
        if planar:
            # weights[tap, ci] as (G, Kg, 1, ...): one scalar per output plane
            weights = workspace["weights"].reshape(ntaps, cg, k)
            weights[...] = wk
            weights = weights.reshape(ntaps, cg, g, kg, *(1,) * nd)
        else:
            # weights[tap, ci, j] = w[:, ci, tap] for every output column j (a row-long loop)
            weights = workspace["weights"].reshape(ntaps, cg, out[-1], k)
            weights[...] = wk[:, :, None, :]
            weights = weights.reshape(ntaps, cg, out[-1], g, kg)
        # the input of a block of images, zero-padded, in the orientation's layout
        for n0 in range(0, problem.n, images):
            nb = min(problem.n, n0 + images) - n0
            size = nb * prod(padded) * problem.c
            if planar:
                xpad = workspace["xpad"][:size].reshape(nb, problem.c, *padded)
                logical = xpad
                xpad = xpad.reshape(nb, g, cg, *padded)
            else:
                xpad = workspace["xpad"][:size].reshape(nb, *padded, problem.c)
                logical = np.moveaxis(xpad, -1, 1)
                xpad = xpad.reshape(nb, *padded, g, cg)
            pack_padded(problem, x[n0:n0 + nb], logical)
            blocks = range(0, out[0], rows)
            parallel_map(lambda worker, r0: self._block(problem, planar, xpad, weights, workspace, worker, n0,
                                                        nb, r0, min(out[0], r0 + rows) - r0, y, alpha, beta,
                                                        epilogue), blocks)

    @staticmethod
    def _block(problem, planar, xpad, weights, workspace, worker, n0, nb, r0, rb, y, alpha, beta, epilogue):
        """Output rows [r0, r0 + rb) of images [n0, n0 + nb): every tap, then one store."""
        nd, cg, k, out, g = problem.nd, problem.w.c, problem.k, problem.out_spatial, problem.groups
        size = nb * rb * prod(out[1:]) * k
        shape = (nb, g, k // g, rb, *out[1:]) if planar else (nb, rb, *out[1:], g, k // g)
        acc = workspace["acc"][worker, :size].reshape(shape)
        tmp = workspace["prod"][worker, :size].reshape(shape)
        lead = (slice(None),) * (3 if planar else 1)
        first = True
        for t, tap in enumerate(taps(problem)):
            window = tuple(slice(tp * d + o0 * s, tp * d + (o0 + ob - 1) * s + 1, s)
                           for tp, d, s, o0, ob in zip(tap, problem.dilation, problem.stride,
                                                       (r0,) + (0,) * (nd - 1), (rb,) + out[1:]))
            x_tap = xpad[lead + window]  # (nb, G, Cg, rb, ...) or (nb, rb, ..., G, Cg)
            for ci in range(cg):
                x_ci = x_tap[:, :, ci:ci + 1] if planar else x_tap[..., ci:ci + 1]
                if first:
                    np.multiply(x_ci, weights[t, ci], out=acc)
                    first = False
                else:
                    np.multiply(x_ci, weights[t, ci], out=tmp)
                    np.add(acc, tmp, out=acc)
        if planar:
            result = acc.reshape(nb, k, rb, *out[1:])
        else:
            result = np.moveaxis(acc.reshape(nb, rb, *out[1:], k), -1, 1)
        index = (slice(n0, n0 + nb), slice(None), slice(r0, r0 + rb))
        store(y[index], result, alpha, beta, epilogue, index)

