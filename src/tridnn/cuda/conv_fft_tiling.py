"""FFT_TILING forward convolution: overlap-save with small FFT tiles (torch.fft for the
transforms, the spectral GEMM in Triton, a Triton store that stitches the tiles).

A whole-plane FFT (conv_fft) transforms at the padded plane's size, so its workspace and
its transforms grow with the image. Here the stride-1 output is cut into tiles of V outputs
per dim; tile t needs the padded-input window [t V, t V + L) with L = V + span - 1 (span:
the dilated filter's extent), and all windows are one strided view of the padded input
(``Tensor.unfold``; neighbours overlap by span - 1), copied tile-major into the workspace and
transformed at the small size L at once. Per frequency the channel sum is conv_fft's
spectral GEMM (the tiles are its images); after the inverse transform the first V outputs of
each tile are free of circular wrap-around, and ``fft_tile_store_kernel`` picks the outputs
(every stride-th) from their tiles through the fused epilogue. Tile sizes: 16 per dim in
2-D, 8 in 3-D, 64 in 1-D, or the 2-3-5-7-smooth size >= 2 x span when the filter is larger.
Rounding differs from direct summation (``exact = False``).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import TritonConvAlgorithm, cdiv, launch, split_rows, wide
from .conv_fft import correlate_with_filter, fast_size, fft_estimate, pad_input, planes_first, spectrum, transform
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, needs_int64, strides5

MIN_TILE = {1: 64, 2: 16, 3: 8}   # FFT points per dim of a tile, at least
MAX_TILE_POINTS = 1 << 16


@triton.jit(do_not_specialize=['M', 'OD', 'OH', 'OW'])
def fft_tile_store_kernel(
        # the tiles' correlations c [N * tiles, K, LD, LH, LW] (float32), y, bias, z
        c_ptr, y_ptr, bias_ptr, z_ptr,
        # c's strides: a tile (image-major), a channel, a point of the flattened tile
        cs_i, cs_k, cs_p,
        # output pixels M = N * OD * OH * OW, channels K, output sizes and strides of the conv
        M, K, OD, OH, OW, SD, SH, SW,
        # valid outputs per tile (V*), tiles (C*) and tile sizes (L*) per dim
        VD, VH, VW, CD, CH, CW, LD, LH, LW,
        # y's and z's strides, the epilogue's scalars
        ys_n, ys_k, ys_d, ys_h, ys_w, zs_n, zs_k, zs_d, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
        HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    """y[n, k, o] = epilogue(stride-1 output o * stride, read from the tile that holds it)."""
    # map the program to a block of output pixels x channels
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < K
    nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
    # the stride-1 position, its tile and its place in the tile
    qd = od * SD
    qh = oh * SH
    qw = ow * SW
    tile = ((qd // VD) * CH + qh // VH) * CW + qw // VW
    within = ((qd % VD) * LH + qh % VH) * LW + qw % VW
    src = (nn.to(tl.int64) * (CD * CH * CW) + tile) * cs_i + within.to(tl.int64) * cs_p
    acc = tl.load(c_ptr + src[:, None] + (offs_n.to(tl.int64) * cs_k)[None, :],  # (int64 as src: K * L can pass 2^31)
                  mask=mask_m[:, None] & mask_n[None, :], other=0.0)
    # through the epilogue into y
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_d, ys_h, ys_w = wide((ys_n, ys_k, ys_d, ys_h, ys_w))
        zs_n, zs_k, zs_d, zs_h, zs_w = wide((zs_n, zs_k, zs_d, zs_h, zs_w))
    row_y = nn * ys_n + od * ys_d + oh * ys_h + ow * ys_w
    row_z = nn * zs_n + od * zs_d + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, offs_n, mask_m, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
               alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


def tile_size(span: int, nd: int) -> tuple:
    """(L, V): a tile's FFT points along a dim and the outputs free of wrap-around in it, for a
    filter reaching ``span`` elements."""
    size = fast_size(max(MIN_TILE[nd], 2 * span))
    return size, size - span + 1


def why_not_tiled(problem, sizes, counts, what: str):
    """Why FFT tiles do not pay (a 1x1 filter, ``what`` fits one tile) or cannot run (tiles
    too large); None when they do."""
    if math.prod(problem.kernel) == 1:
        return "a 1x1 filter is a plain GEMM; FFT tiles would only add transforms"
    if math.prod(counts) == 1:
        return f"{what} fits in one {sizes} FFT tile; tiling pays only for larger planes (use FFT)"
    if math.prod(sizes) > MAX_TILE_POINTS:
        return f"the dilated filter needs {sizes} FFT tiles, over {MAX_TILE_POINTS} points"
    return None


def tiling(problem):
    """(tile sizes L, valid outputs V, tile counts, padded input extent) per spatial dim."""
    sizes, valid, counts, padded = [], [], [], []
    for i, k, d, p, q in zip(problem.in_spatial, problem.kernel, problem.dilation, problem.pad_pre,
                             problem.pad_post):
        span = d * (k - 1) + 1
        size, v = tile_size(span, problem.nd)
        count = -(-(i + p + q - span + 1) // v)
        sizes.append(size)
        valid.append(v)
        counts.append(count)
        padded.append(count * v + span - 1)
    return tuple(sizes), tuple(valid), tuple(counts), tuple(padded)


def tile_major(nd: int) -> tuple:
    """The permutation of an unfolded [N, C, *counts, *sizes] view to [N, *counts, C, *sizes]."""
    return (0,) + tuple(range(2, 2 + nd)) + (1,) + tuple(range(2 + nd, 2 + 2 * nd))


def tiled_input_spectrum(problem, x, workspace, sizes, valid, counts) -> None:
    """X [*spectrum, N * tiles, C] = rfftn of the input windows: x zero-padded into xp, unfolded
    at the tile size with a step of the valid outputs (the first ``counts`` windows per dim),
    copied tile-major into xt [*sizes, N * tiles, C]."""
    nd = problem.nd
    xp = workspace["xp"]
    pad_input(problem, x, xp)
    windows = xp
    for axis, (size, v, count) in enumerate(zip(sizes, valid, counts)):
        windows = windows.unfold(2 + axis, size, v).narrow(2 + axis, 0, count)
    xt = planes_first(workspace["xt"], nd)
    xt.view(problem.n, *counts, problem.c, *sizes).copy_(windows.permute(tile_major(nd)))
    transform(torch.fft.rfftn, xt, torch.view_as_complex(planes_first(workspace["X"], nd)), tuple(range(2, 2 + nd)))


def _pad3(values, fill):
    return (fill,) * (3 - len(values)) + tuple(values)


class FftTilingForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.FFT_TILING
    exact = False

    def not_applicable(self, problem):
        sizes, _, counts, _ = tiling(problem)
        return super().not_applicable(problem) or why_not_tiled(problem, sizes, counts, "the padded plane")

    def buffers(self, problem):
        sizes, _, counts, padded = tiling(problem)
        S = spectrum(sizes)
        images = problem.n * math.prod(counts)
        n, c, k, cg = problem.n, problem.c, problem.k, problem.w.c
        f32 = np.float32
        return [Buffer("xp", (n, c, *padded), f32), Buffer("xt", (*sizes, images, c), f32),
                Buffer("X", (*S, images, c, 2), f32), Buffer("wp", (*sizes, k, cg), f32),
                Buffer("W", (*S, k, cg, 2), f32), Buffer("Y", (*S, images, k, 2), f32),
                Buffer("corr", (*sizes, images, k), f32)]

    def estimate(self, problem):
        sizes, _, counts, _ = tiling(problem)
        return fft_estimate(problem, lengths=sizes, images=problem.n * math.prod(counts))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        nd = problem.nd
        sizes, valid, counts, _ = tiling(problem)
        gpu = y.device.type == "cuda"
        # the input windows' spectra; per tile and frequency the channel sum by the filter's
        tiled_input_spectrum(problem, x, workspace, sizes, valid, counts)
        correlate_with_filter(problem, w, workspace, sizes)
        corr = workspace["corr"]
        geo = geometry(problem)
        # each output from its tile, through the epilogue
        bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
        M = geo.out_pixels
        bm, bn = (64, 64) if gpu else (16, 16)
        launch(fft_tile_store_kernel, (cdiv(M, bm), cdiv(geo.k, bn)), (
            corr, y, bias, z, corr.stride(nd), corr.stride(nd + 1), corr.stride(nd - 1), M, geo.k, *geo.out,
            *geo.stride, *_pad3(valid, 1), *_pad3(counts, 1),
            *_pad3(sizes, 1), *strides5(y, nd), *zs, bias_stride, float(alpha), float(beta), alpha2, coef,
            swish_beta),
            dict(BLOCK_M=bm, BLOCK_N=bn, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                 INT64=needs_int64(y, z)), dict(num_warps=4 if gpu else 1))
