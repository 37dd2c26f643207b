"""Backward filter WINOGRAD_NONFUSED in Triton: F(3x3, 2x2) over 2x2 tiles of dy.

Each 2x2 tile of dy meets a 4x4 window of the padded input (windows overlap by 2), and that
tile's share of the 3x3 filter gradient is a correlation of the window by the tile: Winograd's
F(3x3, 2x2), 16 multiplies instead of 36 (points 0, 1, -1 and infinity; the CPU's
``cpu.conv_winograd.matrices(3, 2)``, which the tests compare these against):

    B^T = [-1 0 1 0; 0 1 1 0; 0 -1 1 0; 0 -1 0 1]   (the x window)
    G   = [-1 0; 1/2 1/2; 1/2 -1/2; 0 1]           (the dy tile)
    A^T = [1 1 1 0; 0 1 -1 0; 0 1 1 1]

Summed over images and tiles the transform is linear, so the sum happens in the transform
domain, as one GEMM per point reducing over the tiles, and one inverse transform per filter:

1. ``input_transform_kernel``: V[p, g, t, c] = (B^T d B)[p] for the 4x4 x window of tile t;
2. ``dy_transform_kernel``: U[p, g, t, k] = (G e G^T)[p] for the 2x2 dy tile e of tile t;
3. ``batched_gemm.bmm``: M[p, g, s] = U[p, g, slice s]^T @ V[p, g, slice s] (float32), the
   tiles cut into S slices so that the few [Kg, Cg] outputs of each point still fill the GPU;
4. ``output_transform_kernel``: dw = alpha A^T (sum over s of M[s]) A + beta dw, slices added
   in order (deterministic), taps reversed for CONVOLUTION mode.

V and U hold the data type (float16/bfloat16 multiply on tensor cores, so the transformed
values are rounded: ``exact = False``). 2-D, 3x3, stride 1, dilation 1, any groups.
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ..types import ConvBwdFilterAlgo
from ..workspace import Buffer
from . import batched_gemm
from .common import TritonConvAlgorithm, Tuner, cdiv, launch, problem_key, reduction_slices, split_rows, wide
from .conv_winograd import strides4, window_row, winograd_estimate, winograd_not_applicable
from .geometry import geometry, input_precision, needs_int64

POINTS = 16
SLICE_MIN = 256   # tiles a slice sums at least (a GEMM's reduction of fewer is mostly overhead)


@triton.jit
def bt4(d0, d1, d2, d3):
    """B^T d for one row (or column) of an x window."""
    return d2 - d0, d1 + d2, d2 - d1, d3 - d1


@triton.jit
def g2(e0, e1):
    """G e for one row (or column) of a dy tile."""
    return -e0, (e0 + e1) * 0.5, (e0 - e1) * 0.5, e1


@triton.jit
def at3(m0, m1, m2, m3):
    """A^T m for one row (or column) of 4 points: 3 filter taps."""
    return m0 + m1 + m2, m1 - m2, m1 + m2 + m3


@triton.jit(do_not_specialize=['T', 'IH', 'IW', 'TH', 'TW', 'PH', 'PW'])
def input_transform_kernel(x_ptr, v_ptr, T, T_ROWS, Cg, IH, IW, TH, TW, PH, PW, xs_n, xs_c, xs_h, xs_w,
                           BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, INT64: tl.constexpr):
    """V [16, G, T_ROWS, Cg] = B^T d B of each tile's 4x4 x window; rows T..T_ROWS are zeros."""
    # map the program to a block of tiles x channels of one group
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    ok = (offs_t < T)[:, None] & (c < Cg)[None, :]
    nn, _, th, tw = split_rows(offs_t, 1, TH, TW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
    ih0 = (th * 2 - PH)[:, None]
    iw0 = (tw * 2 - PW)[:, None]
    base = x_ptr + (nn * xs_n)[:, None] + ((g * Cg + c) * xs_c)[None, :]
    # each window row, loaded (zeros outside the image) and transformed along the row
    rows = ()
    for i in tl.static_range(4):
        d = window_row(base, ih0 + i, iw0, IH, IW, xs_h, xs_w, ok, 4)
        rows = rows + (bt4(d[0], d[1], d[2], d[3]),)
    # down each column; padding rows (t >= T) are stored as zeros
    keep = (offs_t < T_ROWS)[:, None] & (c < Cg)[None, :]
    plane = G.to(tl.int64) * T_ROWS * Cg
    offs = (g.to(tl.int64) * T_ROWS + offs_t)[:, None] * Cg + c[None, :]
    for j in tl.static_range(4):
        col = bt4(rows[0][j], rows[1][j], rows[2][j], rows[3][j])
        for i in tl.static_range(4):
            tl.store(v_ptr + (4 * i + j) * plane + offs, col[i].to(v_ptr.dtype.element_ty), mask=keep)


@triton.jit(do_not_specialize=['T', 'OH', 'OW', 'TH', 'TW'])
def dy_transform_kernel(dy_ptr, u_ptr, T, T_ROWS, Kg, OH, OW, TH, TW, ys_n, ys_k, ys_h, ys_w,
                        BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, INT64: tl.constexpr):
    """U [16, G, T_ROWS, Kg] = G e G^T of each 2x2 dy tile e (zeros past dy's edge)."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    ok = (offs_t < T)[:, None] & (k < Kg)[None, :]
    nn, _, th, tw = split_rows(offs_t, 1, TH, TW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
    oh0 = (th * 2)[:, None]
    ow0 = (tw * 2)[:, None]
    base = dy_ptr + (nn * ys_n)[:, None] + ((g * Kg + k) * ys_k)[None, :]
    rows = ()
    for i in tl.static_range(2):
        ok_h = ok & (oh0 + i < OH)
        e0 = tl.load(base + (oh0 + i) * ys_h + ow0 * ys_w, mask=ok_h, other=0.0).to(tl.float32)
        e1 = tl.load(base + (oh0 + i) * ys_h + (ow0 + 1) * ys_w, mask=ok_h & (ow0 + 1 < OW),
                     other=0.0).to(tl.float32)
        rows = rows + (g2(e0, e1),)
    keep = (offs_t < T_ROWS)[:, None] & (k < Kg)[None, :]
    plane = G.to(tl.int64) * T_ROWS * Kg
    offs = (g.to(tl.int64) * T_ROWS + offs_t)[:, None] * Kg + k[None, :]
    for j in tl.static_range(4):
        col = g2(rows[0][j], rows[1][j])
        for i in tl.static_range(4):
            tl.store(u_ptr + (4 * i + j) * plane + offs, col[i].to(u_ptr.dtype.element_ty), mask=keep)


@triton.jit
def output_transform_kernel(m_ptr, dw_ptr, Kg, Cg, SLICES, ws_k, ws_c, ws_h, ws_w, alpha, beta,
                            BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr, FLIP: tl.constexpr,
                            BETA_ZERO: tl.constexpr):
    """dw = alpha A^T M A + beta dw, M [16, G, SLICES, Kg, Cg] float32 summed over slices in order."""
    k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    mask = (k < Kg)[:, None] & (c < Cg)[None, :]
    matrix = Kg * Cg
    p = m_ptr + k[:, None] * Cg + c[None, :]
    # A^T along each row of points (each point's slices summed first)
    rows = ()
    for i in tl.static_range(4):
        m = ()
        for j in tl.static_range(4):
            first = ((4 * i + j) * G + g).to(tl.int64) * SLICES
            acc = tl.zeros((BLOCK_K, BLOCK_C), dtype=tl.float32)
            for s in range(0, SLICES):
                acc += tl.load(p + (first + s) * matrix, mask=mask, other=0.0)
            m = m + (acc,)
        rows = rows + (at3(m[0], m[1], m[2], m[3]),)
    # down each column: tap (r, q) of the filter gradient, blended and stored
    base = dw_ptr + ((g * Kg + k) * ws_k)[:, None] + (c * ws_c)[None, :]
    for q in tl.static_range(3):
        col = at3(rows[0][q], rows[1][q], rows[2][q], rows[3][q])
        for r in tl.static_range(3):
            if FLIP:
                ptrs = base + (2 - r) * ws_h + (2 - q) * ws_w
            else:
                ptrs = base + r * ws_h + q * ws_w
            v = col[r] * alpha
            if not BETA_ZERO:
                v += beta * tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            tl.store(ptrs, v.to(dw_ptr.dtype.element_ty), mask=mask)


def tiles(problem):
    """(tiles, tiles along h, tiles along w) of 2x2 dy pixels."""
    oh, ow = problem.out_spatial
    th, tw = cdiv(oh, 2), cdiv(ow, 2)
    return problem.n * th * tw, th, tw


def slices(problem, programs_per_point: int, sms: int = 132) -> int:
    """Slices of the tile reduction: enough GEMM programs for two waves of the GPU, each
    slice summing at least SLICE_MIN tiles."""
    return reduction_slices(POINTS * problem.groups * programs_per_point, tiles(problem)[0], SLICE_MIN, sms)


class WinogradNonfusedBackwardFilter(TritonConvAlgorithm):
    direction = "bwd_filter"
    enum = ConvBwdFilterAlgo.WINOGRAD_NONFUSED
    exact = False
    tuner = Tuner()

    def not_applicable(self, problem):
        reason = super().not_applicable(problem) or winograd_not_applicable(problem)
        if reason is None and POINTS * problem.groups > 65535:
            reason = f"{problem.groups} groups x 16 transform points exceed the GPU's 65535 grid rows"
        return reason

    def _layout(self, problem):
        """(slices, tile rows a slice, tile rows in all) for the GPU (128 x 128 GEMM tiles)."""
        geo = geometry(problem)
        S = slices(problem, cdiv(geo.kg, 128) * cdiv(geo.cg, 128))
        T = tiles(problem)[0]
        per = cdiv(T, S)
        return S, per, S * per

    def buffers(self, problem):
        geo = geometry(problem)
        S, _, rows = self._layout(problem)
        dt = problem.dtype.numpy
        return [Buffer("V", (POINTS * geo.groups, rows, geo.cg), dt),
                Buffer("U", (POINTS * geo.groups, rows, geo.kg), dt),
                Buffer("M", (POINTS * geo.groups * S, geo.kg, geo.cg), np.float32)]

    def estimate(self, problem):
        geo = geometry(problem)
        S, _, rows = self._layout(problem)
        oh, ow = problem.out_spatial
        savings = 9 * problem.n * oh * ow / (POINTS * tiles(problem)[0])
        staged = POINTS * rows * (geo.c + geo.k) * problem.dtype.itemsize * 2 + S * POINTS * geo.k * geo.cg * 8
        return winograd_estimate(problem, efficiency=0.6, savings=savings) + staged / 3.5e12 + 10e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dw, dy = tensors["x"], tensors["w"], tensors["y"]
        geo = geometry(problem)
        T, TH, TW = tiles(problem)
        S, per, rows = self._layout(problem)
        V, U, M = workspace["V"], workspace["U"], workspace["M"]
        gpu = dw.device.type == "cuda"
        bt, bc, warps = (32, 32, 4) if gpu else (16, 16, 1)
        launch(input_transform_kernel, (cdiv(rows, bt), cdiv(geo.cg, bc), geo.groups), (
            x, V, T, rows, geo.cg, geo.inp[1], geo.inp[2], TH, TW, geo.pad[1], geo.pad[2], *strides4(x)),
            dict(BLOCK_T=bt, BLOCK_C=bc, INT64=needs_int64(x)), dict(num_warps=warps))
        launch(dy_transform_kernel, (cdiv(rows, bt), cdiv(geo.kg, bc), geo.groups), (
            dy, U, T, rows, geo.kg, geo.out[1], geo.out[2], TH, TW, *strides4(dy)),
            dict(BLOCK_T=bt, BLOCK_K=bc, INT64=needs_int64(dy)), dict(num_warps=warps))
        # one GEMM a (point, group, slice): [Kg, per] @ [per, Cg] (views: the rows are S slices)
        batches = POINTS * geo.groups * S
        a = U.view(batches, per, geo.kg).transpose(1, 2)
        b = V.view(batches, per, geo.cg)
        prec = input_precision(problem)
        cfg = self.tuner.pick((problem_key(problem), "bwd-filter-winograd-nonfused"),
                              batched_gemm.configs(dw.device, problem.dtype.itemsize),
                              lambda c, out: batched_gemm.bmm(a, b, out, prec, c), M, dw.device, scratch_ok=True)
        batched_gemm.bmm(a, b, M, prec, cfg)
        bk, bc = (32, 32) if gpu else (16, 16)
        launch(output_transform_kernel, (cdiv(geo.kg, bk), cdiv(geo.cg, bc), geo.groups), (
            M, dw, geo.kg, geo.cg, S, *strides4(dw), float(alpha), float(beta)),
            dict(BLOCK_K=bk, BLOCK_C=bc, FLIP=problem.mode == 0, BETA_ZERO=beta == 0),
            dict(num_warps=4 if gpu else 1))
