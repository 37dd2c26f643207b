"""GEMM forward convolution: explicit im2col in the workspace, then one BLAS call per group.

The input of a block of images is unfolded into a column matrix (one column per
output position, one row per channel x kernel tap), so the whole convolution of the
block is a single matrix product per group. The column matrix is laid out after the
output's memory order, so the product lands in the output's own layout:

- channels-first output (NCHW): ``acc[n, g] = W[g] (Kg, Cg*taps) @ cols[n, g] (Cg*taps, out)``
- channels-last output (NHWC): ``acc[g] = cols[:, g] (rows, taps*Cg) @ W[g].T (taps*Cg, Kg)``

The unfold itself is one strided copy: the block's input is first copied, zero-padded,
into the workspace (in x's channel order), and every output's receptive field is then
a fixed-stride window of it, so ``cols[...] = windows`` is a single NumPy copy whose
inner loop runs along rows (or, channels-last, along kernel-width x channels).

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
from .common import (BANDWIDTH, MATMUL_CALL, as_matrix, batch_block, channels_last, gemm_geometry, gemm_rate,
                     pack_padded, prod, read_extent, split_groups, store, windows_channels_first, windows_channels_last,
                     writes_through)

BLOCK_BYTES = 16 << 20  # column matrix + accumulator of one block of images


def is_pointwise(problem) -> bool:
    """1x1 kernel, stride 1, no padding: the input is its own im2col matrix."""
    return (all(k == 1 for k in problem.kernel) and all(s == 1 for s in problem.stride)
            and not any(problem.pad_pre) and not any(problem.pad_post))


class GemmForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.GEMM
    exact = True

    def _block(self, problem):
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        per_image = (g * cg * ntaps + problem.k) * out * problem.accumulator.itemsize
        return batch_block(problem, per_image, BLOCK_BYTES)

    def buffers(self, problem):
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        acc, b = problem.accumulator, self._block(problem)
        return [Buffer("cols", (b * out * g * cg * ntaps,), acc),  # im2col of one block
                Buffer("acc", (b * out * problem.k,), acc),          # its product
                Buffer("wmat", (g * kg * cg * ntaps,), acc),         # the filter as matrices
                Buffer("xpad", (b * prod(read_extent(problem)) * problem.c,), acc)]  # NHWC unfold

    def estimate(self, problem):
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        cols_bytes = 0 if is_pointwise(problem) else 2 * problem.n * out * g * cg * ntaps * 4
        out_bytes = 0 if is_pointwise(problem) else 2 * problem.n * out * problem.k * 4  # the store
        calls = problem.n * g
        return (problem.flops / gemm_rate(kg, out, cg * ntaps) + (cols_bytes + out_bytes) / BANDWIDTH
                + calls * MATMUL_CALL)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        if channels_last(tensors["y"]):
            self._run_channels_last(problem, tensors, workspace, alpha, beta, epilogue)
        else:
            self._run_channels_first(problem, tensors, workspace, alpha, beta, epilogue)

    # -- NCHW-like output: W @ cols per image and group ------------------------------
    def _run_channels_first(self, problem, tensors, workspace, alpha, beta, epilogue):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        acc_dtype = problem.accumulator
        wmat = workspace["wmat"].reshape(g, kg, cg, *problem.kernel)
        wmat[...] = split_groups(w, g, axis=0)
        wmat = wmat.reshape(g, kg, cg * ntaps)
        block, pointwise = self._block(problem), is_pointwise(problem)
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            xb, yb = x[n0:n0 + b], y[n0:n0 + b]
            cols = as_matrix(xb, (b, g, cg, out), acc_dtype) if pointwise else None
            if cols is None:
                cols = workspace["cols"][:b * g * cg * ntaps * out].reshape(
                    b, g, cg, *problem.kernel, *problem.out_spatial)
                xpad = workspace["xpad"][:b * prod(read_extent(problem)) * problem.c].reshape(
                    b, problem.c, *read_extent(problem))
                pack_padded(problem, xb, xpad)
                cols[...] = windows_channels_first(problem, xpad)  # the whole unfold, one copy
                cols = cols.reshape(b, g, cg * ntaps, out)
            direct = writes_through(yb, acc_dtype, alpha, beta, epilogue)
            target = as_matrix(yb, (b, g, kg, out), acc_dtype) if direct else None
            if target is not None:
                np.matmul(wmat, cols, out=target)
                continue
            if direct and g == 1:
                # channels-last y: the transposed product cols^T @ W^T lands in y's own order
                target = as_matrix(np.moveaxis(yb, 1, -1), (b, out, problem.k), acc_dtype)
                if target is not None:
                    np.matmul(cols[:, 0].transpose(0, 2, 1), wmat[0].T, out=target)
                    continue
            acc = workspace["acc"][:b * problem.k * out].reshape(b, g, kg, out)
            np.matmul(wmat, cols, out=acc)
            store(yb, acc.reshape(b, problem.k, *problem.out_spatial), alpha, beta, epilogue,
                  (slice(n0, n0 + b),))

    # -- NHWC-like output: cols @ W.T per group ---------------------------------------
    def _run_channels_last(self, problem, tensors, workspace, alpha, beta, epilogue):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        acc_dtype = problem.accumulator
        # filter as (G, taps*Cg, Kg), rows ordered (tap, channel) like the columns
        wmat = workspace["wmat"].reshape(g, *problem.kernel, cg, kg)
        wmat[...] = np.moveaxis(split_groups(w, g, axis=0), (1, 2), (-1, -2))
        wmat = wmat.reshape(g, ntaps * cg, kg)
        block, pointwise = self._block(problem), is_pointwise(problem)
        spatial_first = lambda a: np.moveaxis(a, 1, -1)  # (b, C, *sp) -> (b, *sp, C)
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            rows = b * out
            xb, yb = x[n0:n0 + b], y[n0:n0 + b]
            cols = as_matrix(spatial_first(xb), (rows, g, cg), acc_dtype) if pointwise else None
            if cols is None:
                cols = workspace["cols"][:rows * g * ntaps * cg].reshape(
                    b, *problem.out_spatial, g, *problem.kernel, cg)
                xpad = workspace["xpad"][:b * prod(read_extent(problem)) * problem.c].reshape(
                    b, *read_extent(problem), problem.c)
                pack_padded(problem, xb, np.moveaxis(xpad, -1, 1))
                cols[...] = windows_channels_last(problem, xpad)  # the whole unfold, one copy
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
