"""IMPLICIT_PRECOMP_GEMM forward convolution: precomputed gather indices, then GEMM.

Where IMPLICIT_GEMM walks the kernel taps over strided views, this method first
computes, into the workspace, the flat input offset that every (output position,
kernel tap) pair reads (cuDNN's "precomputed indices"). Taps that land in padding
point at a sentinel: one extra all-zero row after each packed image. Each block of
output rows is then one gather (``np.take``) into a row-major column tile and one
GEMM with the filter, so padding, stride and dilation cost nothing at run time:
they live in the index table.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import (BANDWIDTH, MATMUL_CALL, batch_block, gemm_geometry, gemm_rate, prod, split_groups, store)

BLOCK_BYTES = 16 << 20  # packed input + indices + accumulator of one block of images
TILE_BYTES = 4 << 20    # one gathered column tile


def gather_offsets(problem) -> np.ndarray:
    """(out positions, taps) flat offsets into one image's packed plane; padding -> plane size.

    Offset of output o and tap t: ravel(o*stride + t*dilation - pad_pre), or the sentinel
    ``prod(in_spatial)`` when any coordinate falls outside the input."""
    nd = problem.nd
    flat = np.zeros((1,) * (2 * nd), np.intp)
    valid = np.ones((1,) * (2 * nd), bool)
    place = 1
    for d in reversed(range(nd)):
        o = np.arange(problem.out_spatial[d])[:, None]
        t = np.arange(problem.kernel[d])[None, :]
        coord = o * problem.stride[d] + t * problem.dilation[d] - problem.pad_pre[d]
        shape = [1] * (2 * nd)
        shape[d], shape[nd + d] = coord.shape
        coord = coord.reshape(shape)
        valid = valid & (coord >= 0) & (coord < problem.in_spatial[d])
        flat = flat + coord * place
        place *= problem.in_spatial[d]
    offsets = np.where(valid, flat, place)  # place == prod(in_spatial): the zero row
    return offsets.reshape(prod(problem.out_spatial), prod(problem.kernel))


class PrecompGemmForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.IMPLICIT_PRECOMP_GEMM
    exact = True

    def _block(self, problem):
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        item = problem.accumulator.itemsize
        per_image = ((prod(problem.in_spatial) + 1) * problem.c * item + out * ntaps * 8
                     + out * problem.k * item)
        return batch_block(problem, per_image, BLOCK_BYTES)

    def _tile_rows(self, problem):
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        row_bytes = ntaps * cg * problem.accumulator.itemsize
        return max(1, min(self._block(problem) * out, TILE_BYTES // row_bytes))

    def buffers(self, problem):
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        acc, b = problem.accumulator, self._block(problem)
        plane = prod(problem.in_spatial) + 1
        return [Buffer("xpack", (g, b * plane, cg), acc),                    # images + zero rows
                Buffer("index", (b * out, ntaps), np.intp),                   # the gather table
                Buffer("cols", (self._tile_rows(problem), ntaps * cg), acc),  # one gathered tile
                Buffer("acc", (g, b * out, kg), acc),
                Buffer("wmat", (g, ntaps * cg, kg), acc)]

    def estimate(self, problem):
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        gathered = problem.n * out * ntaps * problem.c * 4
        packed = problem.n * prod(problem.in_spatial) * problem.c * 4
        out_bytes = problem.n * out * problem.k * 4
        rows = self._tile_rows(problem)
        calls = g * -(-problem.n * out // rows)
        return (problem.flops / gemm_rate(rows, kg, cg * ntaps)
                + (2 * packed + 3 * gathered + 2 * out_bytes) / BANDWIDTH + calls * MATMUL_CALL)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, cg, kg, ntaps, out = gemm_geometry(problem)
        plane = prod(problem.in_spatial) + 1
        block, tile = self._block(problem), self._tile_rows(problem)
        wmat = workspace["wmat"].reshape(g, *problem.kernel, cg, kg)
        wmat[...] = np.moveaxis(split_groups(w, g, axis=0), (1, 2), (-1, -2))
        wmat = wmat.reshape(g, ntaps * cg, kg)
        # the index table for a whole block: image i's offsets shifted by i planes
        index = workspace["index"].reshape(block, out, ntaps)
        np.add(gather_offsets(problem)[None], (np.arange(block) * plane)[:, None, None], out=index)
        index = index.reshape(block * out, ntaps)
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            rows = b * out
            xpack = workspace["xpack"][:, :b * plane].reshape(g, b, plane, cg)
            xpack[:, :, -1] = 0  # the sentinel rows
            packed = xpack[:, :, :-1].reshape(g, b, *problem.in_spatial, cg)
            packed[...] = np.moveaxis(split_groups(x[n0:n0 + b], g), (0, 2), (1, -1))
            acc = workspace["acc"][:, :rows]
            for gi in range(g):
                source = xpack[gi].reshape(b * plane, cg)
                for r0 in range(0, rows, tile):
                    r1 = min(rows, r0 + tile)
                    cols = workspace["cols"][:r1 - r0]
                    np.take(source, index[r0:r1], axis=0, out=cols.reshape(r1 - r0, ntaps, cg),
                            mode="clip")
                    np.matmul(cols, wmat[gi], out=acc[gi, r0:r1])
            yg = split_groups(y[n0:n0 + b], g)
            for gi in range(g):
                acc_g = np.moveaxis(acc[gi].reshape(b, *problem.out_spatial, kg), -1, 1)
                index_g = (slice(n0, n0 + b),) if g == 1 else (slice(n0, n0 + b),
                                                                  slice(gi * kg, (gi + 1) * kg))
                store(yg[:, gi], acc_g, alpha, beta, epilogue, index_g)
