"""DIRECT forward convolution: tap-by-tap multiply-accumulate, no GEMM.

For each kernel tap and each input channel of a group, the shifted input is
multiplied by that tap's weights and added into the output. The work is
taps x (channels per group) passes over the output, so it pays only where channels
per group are few (depthwise, small groups), where GEMM methods degenerate into
tiny, badly shaped matrix products.

Those passes are memory-bound and NumPy pays per inner loop, so the layout is chosen
for long contiguous loops, whatever the caller's layout:
- the input is first copied, zero-padded, into a channels-last workspace buffer, so
  every tap reads one full box (no edge cases) whose (width, channels) rows are
  contiguous at stride 1;
- the weights of each tap are replicated along the output row, so weights, input and
  accumulator all run contiguously over a whole row and NumPy fuses it into one loop;
- the output is computed in cache-sized blocks of rows (or of whole images for small
  planes), each stored (blended, rounded once) before the next.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import WORKERS, pad_into, parallel_map, prod, store, taps

MAX_CHANNELS_PER_GROUP = 16
BLOCK_BYTES = 256 << 10   # accumulator + product of one block (they stay in L2)
CACHE_RATE = 20e9         # bytes/s of an in-cache NumPy elementwise pass (estimate)
CALL_SECONDS = 3e-6       # overhead of one NumPy call (estimate)


class DirectForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.DIRECT
    exact = True

    def not_applicable(self, problem):
        if problem.w.c > MAX_CHANNELS_PER_GROUP:
            return (f"DIRECT is for depthwise and small-group convolutions (<= "
                    f"{MAX_CHANNELS_PER_GROUP} input channels per group); this one has {problem.w.c}")
        return None

    def _blocks(self, problem):
        """(images, rows of the first spatial dim) per block, from the accumulator's size."""
        out = problem.out_spatial
        row = 2 * prod(out[1:]) * problem.k * problem.accumulator.itemsize  # acc + product
        rows = max(1, min(out[0], BLOCK_BYTES // max(row, 1))) if problem.nd > 1 else out[0]
        images = max(1, min(problem.n, BLOCK_BYTES // max(row * out[0], 1))) if rows == out[0] else 1
        return images, rows

    @staticmethod
    def _padded(problem):
        """Extent of the padded input that the outputs actually read, per dim."""
        return tuple((o - 1) * s + d * (k - 1) + 1 for o, s, d, k in
                     zip(problem.out_spatial, problem.stride, problem.dilation, problem.kernel))

    def buffers(self, problem):
        images, rows = self._blocks(problem)
        out, acc = problem.out_spatial, problem.accumulator
        block = (WORKERS, images * rows * prod(out[1:]) * problem.k)  # one block per worker
        return [Buffer("xpad", (images, *self._padded(problem), problem.c), acc),
                Buffer("wrow", (prod(problem.kernel), problem.w.c, out[-1], problem.k), acc),
                Buffer("acc", block, acc), Buffer("prod", block, acc)]

    def estimate(self, problem):
        images, rows = self._blocks(problem)
        blocks = -(-problem.n // images) * -(-problem.out_spatial[0] // rows)
        passes = prod(problem.kernel) * problem.w.c
        out_bytes = problem.n * problem.k * prod(problem.out_spatial) * 4
        in_bytes = problem.n * problem.c * prod(problem.in_spatial) * 4
        return (passes * (4 * out_bytes / CACHE_RATE + blocks * 2 * CALL_SECONDS)
                + 3 * (in_bytes + out_bytes) / CACHE_RATE)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, nd, cg, k = problem.groups, problem.nd, problem.w.c, problem.k
        kg, out = k // g, problem.out_spatial
        images, rows = self._blocks(problem)
        padded = self._padded(problem)
        # wrow[tap, ci, j, g*Kg + kj] = w[g*Kg + kj, ci, tap] for every output column j
        wrow = workspace["wrow"]
        wk = np.moveaxis(w.reshape(k, cg, prod(problem.kernel)), (2, 1), (0, 1))  # (taps, Cg, K)
        wrow[...] = wk[:, :, None, :]
        wrow = wrow.reshape(prod(problem.kernel), cg, out[-1], g, kg)
        # the input of a block of images, zero-padded and channels last
        post = tuple(max(0, e - i - p) for e, i, p in zip(padded, problem.in_spatial, problem.pad_pre))
        crop = tuple(slice(0, max(0, min(i, e - p))) for i, e, p in zip(problem.in_spatial, padded, problem.pad_pre))
        for n0 in range(0, problem.n, images):
            nb = min(problem.n, n0 + images) - n0
            xpad = workspace["xpad"][:nb]
            pad_into(np.moveaxis(xpad, -1, 1), x[(slice(n0, n0 + nb), slice(None)) + crop],
                     problem.pad_pre, post)
            xpad_g = xpad.reshape(nb, *padded, g, cg)
            blocks = range(0, out[0], rows)
            parallel_map(lambda worker, r0: self._block(problem, xpad_g, wrow, workspace, worker, n0, nb,
                                                        r0, min(out[0], r0 + rows) - r0, y, alpha, beta,
                                                        epilogue), blocks)

    @staticmethod
    def _block(problem, xpad_g, wrow, workspace, worker, n0, nb, r0, rb, y, alpha, beta, epilogue):
        """Output rows [r0, r0 + rb) of images [n0, n0 + nb): every tap, then one store."""
        nd, cg, k, out = problem.nd, problem.w.c, problem.k, problem.out_spatial
        size = nb * rb * prod(out[1:]) * k
        acc = workspace["acc"][worker, :size].reshape(nb, rb, *out[1:], problem.groups, k // problem.groups)
        tmp = workspace["prod"][worker, :size].reshape(acc.shape)
        first = True
        for t, tap in enumerate(taps(problem)):
            window = tuple(slice(tp * d + o0 * s, tp * d + (o0 + ob - 1) * s + 1, s)
                           for tp, d, s, o0, ob in zip(tap, problem.dilation, problem.stride,
                                                       (r0,) + (0,) * (nd - 1), (rb,) + out[1:]))
            x_tap = xpad_g[(slice(None),) + window]  # (nb, rb, *out[1:], G, Cg)
            for ci in range(cg):
                weights = wrow[t, ci]  # (out[-1], G, Kg), broadcast over rows and images
                if first:
                    np.multiply(x_tap[..., ci:ci + 1], weights, out=acc)
                    first = False
                else:
                    np.multiply(x_tap[..., ci:ci + 1], weights, out=tmp)
                    np.add(acc, tmp, out=acc)
        result = np.moveaxis(acc.reshape(nb, rb, *out[1:], k), -1, 1)
        index = (slice(n0, n0 + nb), slice(None), slice(r0, r0 + rb))
        store(y[index], result, alpha, beta, epilogue, index)
