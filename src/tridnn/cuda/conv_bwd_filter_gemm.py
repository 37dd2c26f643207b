"""Backward filter ALGO_3 in Triton: the column matrix in the workspace, then matmuls.

cuDNN's ALGO_3 is ALGO_0's method with indices precomputed in a small workspace. Here the
precomputation goes all the way: GEMM forward's ``im2col_kernel`` writes x's column matrix
col[g, m, (tap, c)] once (every gather and padding test done there), and the filter gradient
of each group is a plain matmul dw_g = dy_g^T col_g over the output pixels m, with dy
transposed once into the workspace as dyt[g, k, m]. The pixel reduction is cut into slices
(``batched_gemm.bmm`` launches batched over a group's slices or a slice's groups, each slice
writing its float32 partial) so the few [Kg, taps x Cg] outputs fill the GPU, and
ALGO_0/ALGO_1's ``wgrad_finish`` sums the slices in a fixed order and blends alpha/beta into dw
(taps reversed for CONVOLUTION mode). Unlike cuDNN's ALGO_3, the result is deterministic.
The column matrix costs taps x the input in workspace and traffic; in exchange the matmuls
stream plain rows with no gather or bounds tests.
"""
from __future__ import annotations

import numpy as np

from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from . import batched_gemm
from .common import TritonConvAlgorithm, Tuner, cdiv, problem_key, reduction_slices
from .conv_bwd_filter_implicit_gemm import finish, float32_efficiency
from .conv_gemm import im2col, padded_row
from .conv_implicit_gemm import gemm_estimate
from .geometry import geometry, input_precision

SLICE_MIN = 1024   # output pixels a slice sums at least


def slices(problem, sms: int = 132) -> int:
    """Slices of the pixel reduction: enough 128 x 128 matmul tiles for two waves of the GPU,
    each slice summing at least SLICE_MIN pixels (the workspace does not depend on the GPU)."""
    geo = geometry(problem)
    tiles = geo.groups * cdiv(geo.kg, 128) * cdiv(geo.taps * geo.cg, 128)
    return reduction_slices(tiles, geo.out_pixels, SLICE_MIN, sms)


class GemmBackwardFilter(TritonConvAlgorithm):
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.ALGO_3
    tuner = Tuner()

    def buffers(self, problem):
        geo = geometry(problem)
        return [Buffer("col", (geo.groups, geo.out_pixels, padded_row(geo)), problem.dtype.numpy),
                Buffer("dyt", (geo.groups, geo.kg, geo.out_pixels), problem.dtype.numpy),
                Buffer("part", (slices(problem), geo.k, geo.taps * geo.cg), np.float32)]

    def estimate(self, problem):
        """The matmuls at the dot rate, plus the column matrix's round trip at im2col's measured
        1.2 TB/s (conv_gemm) and dy's transpose and the partials' pass at memory speed."""
        geo = geometry(problem)
        byte = problem.dtype.itemsize
        col = geo.groups * geo.out_pixels * padded_row(geo)
        moved = 2 * problem.y.size * byte + 2 * slices(problem) * geo.k * geo.taps * geo.cg * 4
        matmuls = gemm_estimate(problem, efficiency=0.8 * float32_efficiency(problem))
        return matmuls + 2 * col * byte / 1.2e12 + moved / 3.0e12 + 6e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dw, dy = tensors["x"], tensors["w"], tensors["y"]
        geo = geometry(problem)
        col, dyt, part = workspace["col"], workspace["dyt"], workspace["part"]
        im2col(problem, x, col)
        # dy transposed per group: dyt[g, k, (n, pixel)]
        dyt.view(geo.groups, geo.kg, problem.n, *problem.out_spatial).copy_(
            dy.unflatten(1, (geo.groups, geo.kg)).movedim(0, 2))
        # a matmul a slice of pixels and group: part[s, g, k, (tap, c)] = dyt[g, k, slice s] @
        # col[g, slice s, :R], batched over the slices of a group or over the groups of a slice,
        # whichever makes fewer launches (a launch a slice left the GPU nearly idle: res2_3x3
        # has 5 output tiles); a shorter last slice has launches of its own
        S = part.shape[0]
        per = cdiv(geo.out_pixels, S)
        whole = geo.out_pixels // per
        rest = geo.out_pixels - whole * per
        R = geo.taps * geo.cg
        prec = input_precision(problem)
        parts = part.view(S, geo.groups, geo.kg, R)

        def slices_of_group(g, first, count, length):
            """(dy^T, col, partials) of group g's slices first .. first + count - 1, each
            ``length`` pixels long: one batched matmul."""
            m = slice(first * per, first * per + count * length)
            a = dyt[g, :, m].unflatten(1, (count, length)).transpose(0, 1)
            b = col[g, m].unflatten(0, (count, length))[:, :, :R]
            return a, b, parts[first:first + count, g]
        launches = []
        if geo.groups <= whole:
            for g in range(geo.groups):
                launches.append(slices_of_group(g, 0, whole, per))
                if rest:
                    launches.append(slices_of_group(g, whole, 1, rest))
        else:
            for s in range(whole + (1 if rest else 0)):
                m = slice(s * per, s * per + (per if s < whole else rest))
                launches.append((dyt[:, :, m], col[:, m, :R], parts[s]))
        cfg = self.tuner.pick((problem_key(problem), "bwd-filter-gemm"),
                              batched_gemm.configs(dw.device, problem.dtype.itemsize),
                              lambda c, out: batched_gemm.bmm(*launches[0][:2], out, prec, c), launches[0][2],
                              dw.device, scratch_ok=True)
        for a, b, c in launches:
            batched_gemm.bmm(a, b, c, prec, cfg)
        # the slices written (fewer than the workspace holds where the pixels split evenly sooner)
        finish(problem, part, dw, cdiv(geo.out_pixels, per), alpha, beta)
