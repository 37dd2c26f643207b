"""WINOGRAD_NONFUSED forward convolution: whole-tensor transforms, then one GEMM per point.

Unlike WINOGRAD (conv_winograd.py), which runs its three stages block by block, this
method runs each stage over a whole block of images with its result in the
workspace, as cuDNN's nonfused variant does: (1) the filter transform
``U = G g G^T`` for all filters, (2) the input transform ``V = B^T d B`` of every tile
of the images into one point-major buffer, (3) one large batched GEMM per transform
point (``U[pt] @ V[pt]`` for NCHW data, ``V[pt] @ U[pt]^T`` for NHWC, so that neither
the packing nor the store transposes), and (4) the output transform ``A^T M A`` back
into the output. The GEMMs are few and large, so BLAS
runs near its peak, and the transforms are GEMMs with a 6- or 8-wide inner dim along
the leading axis of contiguous buffers.

Tile choice: F(4x4,3x3) (6x6 input tiles, 4x fewer multiplies than direct) by
default. F(6x6,3x3) (8x8 tiles, 5.06x fewer, and 1.78x instead of 2.25x the input's
size in transformed data) is used when the convolution's math type is TENSOR_OP (the
caller accepts reduced precision, as tf32 on GPUs) and the output is at least 24
wide, where 8x8 tiles waste little at the edges. F(6x6)'s points +-1/2 and entries up
to 5.25 cost precision: on standard-normal float32 data with 64-512 channels
(28x28, batch 2) the relative L2 error measured 3.1e-6 to 5.3e-6 and the max error
over max |y| up to 2.2e-5, against 1.6e-6 to 3.2e-6 and 1.4e-5 for F(4x4), i.e.
F(6x6) sits at the edge of tridnn.testing's float32 tolerance (2e-5 pointwise,
5e-6 L2), F(4x4) inside it.
"""
from __future__ import annotations

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo, MathType
from ..workspace import Buffer
from .common import BANDWIDTH, batch_block, channels_last, prod
from .conv_winograd import (acc_view, filter_scratch_size, output_as_acc, pack_input, padded_view, store_tiles,
                            tile_grid, transformed_filter, winograd_estimate, winograd_not_applicable,
                            winograd_stages)

BLOCK_BYTES = 96 << 20   # transformed input + products of one block of images
LARGE_TILE_FROM = 24     # output width from which F(6x6,3x3) may be used


class WinogradNonfusedForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.WINOGRAD_NONFUSED
    exact = False

    def not_applicable(self, problem):
        return winograd_not_applicable(problem, "WINOGRAD_NONFUSED")

    @staticmethod
    def tile(problem) -> int:
        if problem.math_type == MathType.TENSOR_OP and min(problem.out_spatial) >= LARGE_TILE_FROM:
            return 6
        return 4

    def _block(self, problem, m):
        n = m + 2
        tiles, _ = tile_grid(problem, m)
        cg, kg = problem.w.c, problem.k // problem.groups
        per_image = (n * n * prod(tiles) * problem.groups * (3 * max(cg, kg) + kg)
                     * problem.accumulator.itemsize)
        return batch_block(problem, per_image, BLOCK_BYTES)

    def buffers(self, problem):
        m = self.tile(problem)
        n, g, acc = m + 2, problem.groups, problem.accumulator
        tiles, extent = tile_grid(problem, m)
        b = self._block(problem, m)
        p = b * prod(tiles)
        cg, kg = problem.w.c, problem.k // g
        wide = n * n * g * p * max(cg, kg)
        return [Buffer("u", (n * n, problem.k, cg), acc),
                Buffer("wscratch", (filter_scratch_size(problem, m),), acc),
                Buffer("xpad", (b * prod(extent) * problem.c,), acc),
                Buffer("d", (n * n * g * p * cg,), acc),  # all gathered tiles of a block
                Buffer("v", (wide,), acc),                # their transforms, later the output tiles
                Buffer("half", (wide,), acc),             # half-transformed data
                Buffer("m", (n * n * g * p * kg,), acc),  # the point GEMMs' products
                Buffer("acc", (b * prod(tiles) * m * m * problem.k,), acc)]

    def estimate(self, problem):
        m = self.tile(problem)
        block = self._block(problem, m)
        return winograd_estimate(problem, m, BANDWIDTH, block * prod(tile_grid(problem, m)[0]),
                                 -(-problem.n // block))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        m, g, first = self.tile(problem), problem.groups, not channels_last(x)
        tiles, extent = tile_grid(problem, m)
        u = transformed_filter(problem, w, m, workspace)
        block = self._block(problem, m)
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            xpad = padded_view(workspace["xpad"], b, problem.c, extent, first)
            acc = acc_view(workspace["acc"], b, g, problem.k // g, tuple(t * m for t in tiles), first)
            target = output_as_acc(problem, y[n0:n0 + b], m, alpha, beta, epilogue, first)
            pack_input(problem, x[n0:n0 + b], xpad, first)
            # every stage over all tiles of the block: one transform pass, n*n large GEMMs, one pass back
            winograd_stages(problem, m, xpad, slice(0, tiles[0]), u, workspace,
                            acc if target is None else target, first)
            if target is None:
                store_tiles(problem, acc, y[n0:n0 + b], alpha, beta, epilogue, (slice(n0, n0 + b),), first)
