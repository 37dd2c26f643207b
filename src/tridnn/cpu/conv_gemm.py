"""GEMM forward convolution: explicit im2col in the workspace, then one BLAS call per group.

The input of a block of images is unfolded into a column matrix (one column per
output position, one row per channel x kernel tap), so the whole convolution of the
block is a single matrix product per group. The column matrix is laid out after the
output's memory order, so the product lands in the output's own layout:

- channels-first output (NCHW): ``acc[n, g] = W[g] (Kg, Cg*taps) @ cols[n, g] (Cg*taps, out)``
- channels-last output (NHWC): ``acc[g] = cols[:, g] (rows, taps*Cg) @ W[g].T (taps*Cg, Kg)``

A 1x1, stride-1, unpadded convolution needs no unfolding at all: the input already is
the column matrix (``W @ x[n]`` in NCHW, ``x2d @ W.T`` in NHWC), and when the output
can take the product directly (alpha 1, beta 0, accumulator dtype) the GEMM writes
into it, so the whole layer is one BLAS call and no copy.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import (BANDWIDTH, MATMUL_CALL, as_matrix, gemm_rate, batch_block, channels_last, prod, split_groups,
                     store, tap_box, tap_views, taps, writes_through)

BLOCK_BYTES = 16 << 20  # column matrix + accumulator of one block of images
MIN_RUN = 16            # channels per group from which the channels-last unfold is used


def is_pointwise(problem) -> bool:
    """1x1 kernel, stride 1, no padding: the input is its own im2col matrix."""
    return (all(k == 1 for k in problem.kernel) and all(s == 1 for s in problem.stride)
            and not any(problem.pad_pre) and not any(problem.pad_post))


def _needs_zeros(problem) -> bool:
    """Whether some column entries read padding (then the column buffer is zeroed first)."""
    for tap in np.ndindex(*problem.kernel):
        for t, i, o, s, d, p in zip(tap, problem.in_spatial, problem.out_spatial, problem.stride,
                                    problem.dilation, problem.pad_pre):
            box = tap_box(t, i, o, s, d, p)
            if box is None or box[0] != 0 or box[1] != o:
                return True
    return False


class GemmForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.GEMM
    exact = True

    def _geometry(self, problem):
        g = problem.groups
        return g, problem.w.c, problem.k // g, prod(problem.kernel), prod(problem.out_spatial)

    def _block(self, problem):
        g, cg, kg, ntaps, out = self._geometry(problem)
        per_image = (g * cg * ntaps + problem.k) * out * problem.accumulator.itemsize
        return batch_block(problem, per_image, BLOCK_BYTES)

    def buffers(self, problem):
        g, cg, kg, ntaps, out = self._geometry(problem)
        acc, b = problem.accumulator, self._block(problem)
        return [Buffer("cols", (b * out * g * cg * ntaps,), acc),  # im2col of one block
                Buffer("acc", (b * out * problem.k,), acc),          # its product
                Buffer("wmat", (g * kg * cg * ntaps,), acc)]         # the filter as matrices

    def estimate(self, problem):
        g, cg, kg, ntaps, out = self._geometry(problem)
        cols_bytes = 0 if is_pointwise(problem) else 2 * problem.n * out * g * cg * ntaps * 4
        out_bytes = 0 if is_pointwise(problem) else 2 * problem.n * out * problem.k * 4  # the store
        calls = problem.n * g
        return (problem.flops / gemm_rate(kg, out, cg * ntaps) + (cols_bytes + out_bytes) / BANDWIDTH
                + calls * MATMUL_CALL)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        # The channels-last unfold copies runs of Cg contiguous channels: with few channels
        # per group (conv1's 3) those runs are too short, and the channels-first unfold
        # (runs along output rows) plus a transposing store is faster.
        if channels_last(tensors["y"]) and (is_pointwise(problem) or problem.w.c >= MIN_RUN):
            self._run_channels_last(problem, tensors, workspace, alpha, beta, epilogue)
        else:
            self._run_channels_first(problem, tensors, workspace, alpha, beta, epilogue)

    # -- NCHW-like output: W @ cols per image and group ------------------------------
    def _run_channels_first(self, problem, tensors, workspace, alpha, beta, epilogue):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, cg, kg, ntaps, out = self._geometry(problem)
        acc_dtype, nd = problem.accumulator, problem.nd
        wmat = workspace["wmat"].reshape(g, kg, cg, *problem.kernel)
        wmat[...] = split_groups(w, g, axis=0)
        wmat = wmat.reshape(g, kg, cg * ntaps)
        block, pointwise, zero = self._block(problem), is_pointwise(problem), _needs_zeros(problem)
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            xb, yb = x[n0:n0 + b], y[n0:n0 + b]
            cols = as_matrix(xb, (b, g, cg, out), acc_dtype) if pointwise else None
            if cols is None:
                cols = workspace["cols"][:b * g * cg * ntaps * out].reshape(
                    b, g, cg, *problem.kernel, *problem.out_spatial)
                self._unfold_channels_first(problem, split_groups(xb, g), cols, zero)
                cols = cols.reshape(b, g, cg * ntaps, out)
            direct = writes_through(yb, acc_dtype, alpha, beta, epilogue)
            target = as_matrix(yb, (b, g, kg, out), acc_dtype) if direct else None
            if target is not None:
                np.matmul(wmat, cols, out=target)
                continue
            acc = workspace["acc"][:b * problem.k * out].reshape(b, g, kg, out)
            np.matmul(wmat, cols, out=acc)
            store(yb, acc.reshape(b, problem.k, *problem.out_spatial), alpha, beta, epilogue,
                  (slice(n0, n0 + b),))

    @staticmethod
    def _unfold_channels_first(problem, xg, cols, zero):
        """cols[n, g, c, *tap, *o] = x[n, g, c, o*stride + tap*dilation - pad] (0 in padding)."""
        if zero:
            cols[...] = 0
        lead = (slice(None),) * 3
        for tap in taps(problem):
            hit = tap_views(problem, xg, tap)
            if hit is not None:
                out_sl, x_tap = hit
                cols[lead + tap + out_sl] = x_tap

    # -- NHWC-like output: cols @ W.T per group ---------------------------------------
    def _run_channels_last(self, problem, tensors, workspace, alpha, beta, epilogue):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, cg, kg, ntaps, out = self._geometry(problem)
        acc_dtype, nd = problem.accumulator, problem.nd
        # filter as (G, taps*Cg, Kg), rows ordered (tap, channel) like the columns
        wmat = workspace["wmat"].reshape(g, *problem.kernel, cg, kg)
        wmat[...] = np.moveaxis(split_groups(w, g, axis=0), (1, 2), (-1, -2))
        wmat = wmat.reshape(g, ntaps * cg, kg)
        block, pointwise, zero = self._block(problem), is_pointwise(problem), _needs_zeros(problem)
        spatial_first = lambda a: np.moveaxis(a, 1, -1)  # (b, C, *sp) -> (b, *sp, C)
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            rows = b * out
            xb, yb = x[n0:n0 + b], y[n0:n0 + b]
            cols = as_matrix(spatial_first(xb), (rows, g, cg), acc_dtype) if pointwise else None
            if cols is None:
                cols = workspace["cols"][:rows * g * ntaps * cg].reshape(
                    b, *problem.out_spatial, g, *problem.kernel, cg)
                self._unfold_channels_last(problem, split_groups(xb, g), cols, zero)
                cols = cols.reshape(rows, g, ntaps * cg)
            direct = writes_through(yb, acc_dtype, alpha, beta, epilogue)
            if g == 1:
                target = as_matrix(spatial_first(yb), (rows, problem.k), acc_dtype) if direct else None
                if target is not None:
                    np.matmul(cols[:, 0], wmat[0], out=target)
                    continue
                acc = workspace["acc"][:rows * problem.k].reshape(rows, problem.k)
                np.matmul(cols[:, 0], wmat[0], out=acc)
                acc = np.moveaxis(acc.reshape(b, *problem.out_spatial, problem.k), -1, 1)
                store(yb, acc, alpha, beta, epilogue, (slice(n0, n0 + b),))
                continue
            # groups: one product per group into (G, rows, Kg), stored group by group
            acc = workspace["acc"][:rows * problem.k].reshape(g, rows, kg)
            for gi in range(g):
                np.matmul(cols[:, gi], wmat[gi], out=acc[gi])
            yg = split_groups(yb, g)
            for gi in range(g):
                acc_g = np.moveaxis(acc[gi].reshape(b, *problem.out_spatial, kg), -1, 1)
                store(yg[:, gi], acc_g, alpha, beta, epilogue,
                      (slice(n0, n0 + b), slice(gi * kg, (gi + 1) * kg)))

    @staticmethod
    def _unfold_channels_last(problem, xg, cols, zero):
        """cols[n, *o, g, *tap, c] = x[n, g, c, o*stride + tap*dilation - pad] (0 in padding)."""
        if zero:
            cols[...] = 0
        nd = problem.nd
        for tap in taps(problem):
            hit = tap_views(problem, xg, tap)
            if hit is not None:
                out_sl, x_tap = hit  # (b, G, Cg, *box)
                dest = cols[(slice(None),) + out_sl + (slice(None),) + tap]  # (b, *box, G, Cg)
                dest[...] = np.moveaxis(x_tap, (1, 2), (1 + nd, 2 + nd))
