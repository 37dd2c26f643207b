"""WINOGRAD_NONFUSED forward convolution in Triton: F(2x2, 3x3) in four passes.

The same arithmetic as the fused kernel (conv_winograd.py), staged through the
workspace so each pass is a plain, well-shaped kernel:

1. ``input_transform_kernel``: V[p, g, tile, c] = (B^T d B)[p] for every 4x4 patch;
2. ``filter_transform_kernel``: U[p, g, c, k] = (G g G^T)[p] for every 3x3 filter;
3. ``batched_gemm.bmm``: M[p, g] = V[p, g] @ U[p, g], 16 x groups GEMMs (float32 out);
4. ``output_transform_kernel``: y = epilogue(A^T M A), 2x2 outputs per tile.

V and U hold the data type (float16/bfloat16 go through tensor cores, so the
transformed values are rounded: ``exact = False``). The GEMMs are long and dense, so
this wins over the fused kernel when channels are many; it costs 16/4 = 4x the
input and the output in workspace traffic.

Float32 data under float32-accurate products (FMA math: IEEE; DEFAULT: three tf32
products) takes F(4x4, 3x3) instead (``winograd_f4``: 36 points per 16 outputs, 2.25x
the input and output in traffic, 1.78x fewer multiplies than F(2x2)) wherever it needs
fewer multiplies counting the tiles' overhang; its transforms' larger entries would
amplify tf32's or a half type's rounding 10-20x (see winograd_f4), so those keep F(2x2).
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ..types import ConvFwdAlgo, DataType
from ..workspace import Buffer
from . import batched_gemm, winograd_f4
from .common import TritonConvAlgorithm, Tuner, cdiv, launch, problem_key, wide
from .conv_winograd import (bt, filter_row, gt, input_row, store_outputs, strides4, tiles, winograd_estimate,
                            winograd_not_applicable)
from .epilogue import launch_args, spec_of
from .geometry import geometry, input_precision, needs_int64


def tile_of(problem) -> int:
    """Outputs per tile side: 4 (F(4x4, 3x3)) for float32 data with float32-accurate
    products where that needs fewer multiplies than F(2x2) (tiles past the edge
    included), else 2."""
    if problem.dtype != DataType.FLOAT or input_precision(problem) == "tf32":
        return 2
    multiplies = {m: (m + 2) ** 2 * tiles(problem, m)[0] for m in (2, 4)}
    return 4 if multiplies[4] < multiplies[2] else 2


@triton.jit
def _store16(ptr, offs, stride_p, mask, v0j, v1j, v2j, v3j):
    """Store the 16 transform points (vXj[i] is point (i, X)) at ptr + p * stride_p + offs."""
    dt = ptr.dtype.element_ty
    tl.store(ptr + 0 * stride_p + offs, v0j[0].to(dt), mask=mask)
    tl.store(ptr + 1 * stride_p + offs, v1j[0].to(dt), mask=mask)
    tl.store(ptr + 2 * stride_p + offs, v2j[0].to(dt), mask=mask)
    tl.store(ptr + 3 * stride_p + offs, v3j[0].to(dt), mask=mask)
    tl.store(ptr + 4 * stride_p + offs, v0j[1].to(dt), mask=mask)
    tl.store(ptr + 5 * stride_p + offs, v1j[1].to(dt), mask=mask)
    tl.store(ptr + 6 * stride_p + offs, v2j[1].to(dt), mask=mask)
    tl.store(ptr + 7 * stride_p + offs, v3j[1].to(dt), mask=mask)
    tl.store(ptr + 8 * stride_p + offs, v0j[2].to(dt), mask=mask)
    tl.store(ptr + 9 * stride_p + offs, v1j[2].to(dt), mask=mask)
    tl.store(ptr + 10 * stride_p + offs, v2j[2].to(dt), mask=mask)
    tl.store(ptr + 11 * stride_p + offs, v3j[2].to(dt), mask=mask)
    tl.store(ptr + 12 * stride_p + offs, v0j[3].to(dt), mask=mask)
    tl.store(ptr + 13 * stride_p + offs, v1j[3].to(dt), mask=mask)
    tl.store(ptr + 14 * stride_p + offs, v2j[3].to(dt), mask=mask)
    tl.store(ptr + 15 * stride_p + offs, v3j[3].to(dt), mask=mask)


@triton.jit(do_not_specialize=['T', 'IH', 'IW', 'TH', 'TW', 'PH', 'PW'])
def input_transform_kernel(x_ptr, v_ptr, T, Cg, IH, IW, TH, TW, PH, PW, xs_n, xs_c, xs_h, xs_w,
                           BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, INT64: tl.constexpr):
    """V [16, G, T, Cg]."""
    offs_t = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    mask_t = offs_t < T
    mask_c = c < Cg
    tw = offs_t % TW
    th = (offs_t // TW) % TH
    nn = offs_t // (TW * TH)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
    ih0 = (th * 2 - PH)[:, None]
    iw0 = (tw * 2 - PW)[:, None]
    xbase = (nn * xs_n)[:, None] + ((g * Cg + c) * xs_c)[None, :]
    ok = mask_t[:, None] & mask_c[None, :]
    r0 = input_row(x_ptr, xbase, ih0 + 0, iw0, IH, IW, xs_h, xs_w, ok)
    r1 = input_row(x_ptr, xbase, ih0 + 1, iw0, IH, IW, xs_h, xs_w, ok)
    r2 = input_row(x_ptr, xbase, ih0 + 2, iw0, IH, IW, xs_h, xs_w, ok)
    r3 = input_row(x_ptr, xbase, ih0 + 3, iw0, IH, IW, xs_h, xs_w, ok)
    stride_p = G.to(tl.int64) * T * Cg
    offs = (g.to(tl.int64) * T + offs_t)[:, None] * Cg + c[None, :]
    _store16(v_ptr, offs, stride_p, ok, bt(r0[0], r1[0], r2[0], r3[0]), bt(r0[1], r1[1], r2[1], r3[1]),
             bt(r0[2], r1[2], r2[2], r3[2]), bt(r0[3], r1[3], r2[3], r3[3]))


@triton.jit
def filter_transform_kernel(w_ptr, u_ptr, Cg, Kg, ws_k, ws_c, ws_h, ws_w,
                            BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, FLIP: tl.constexpr):
    """U [16, G, Cg, Kg]."""
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    k = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    mask = (c < Cg)[:, None] & (k < Kg)[None, :]
    wbase = ((g * Kg + k) * ws_k)[None, :] + (c * ws_c)[:, None]
    u0 = filter_row(w_ptr, wbase, 0, ws_h, ws_w, mask, FLIP)
    u1 = filter_row(w_ptr, wbase, 1, ws_h, ws_w, mask, FLIP)
    u2 = filter_row(w_ptr, wbase, 2, ws_h, ws_w, mask, FLIP)
    stride_p = G.to(tl.int64) * Cg * Kg
    offs = (g.to(tl.int64) * Cg + c)[:, None] * Kg + k[None, :]
    _store16(u_ptr, offs, stride_p, mask, gt(u0[0], u1[0], u2[0]), gt(u0[1], u1[1], u2[1]),
             gt(u0[2], u1[2], u2[2]), gt(u0[3], u1[3], u2[3]))


@triton.jit(do_not_specialize=['T', 'OH', 'OW', 'TH', 'TW'])
def output_transform_kernel(m_ptr, y_ptr, bias_ptr, z_ptr, T, Kg, OH, OW, TH, TW,
                            ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
                            alpha, beta, alpha2, coef, swish_beta,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr,
                            HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
                            INT64: tl.constexpr):
    """y = epilogue(A^T M A), M [16, G, T, Kg] float32."""
    offs_t = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    mask_t = offs_t < T
    mask_n = offs_n < Kg
    mask = mask_t[:, None] & mask_n[None, :]
    sp = G.to(tl.int64) * T * Kg
    p = m_ptr + (g.to(tl.int64) * T + offs_t)[:, None] * Kg + offs_n[None, :]
    m00 = tl.load(p, mask=mask, other=0.0)
    m01 = tl.load(p + sp, mask=mask, other=0.0)
    m02 = tl.load(p + 2 * sp, mask=mask, other=0.0)
    m03 = tl.load(p + 3 * sp, mask=mask, other=0.0)
    m10 = tl.load(p + 4 * sp, mask=mask, other=0.0)
    m11 = tl.load(p + 5 * sp, mask=mask, other=0.0)
    m12 = tl.load(p + 6 * sp, mask=mask, other=0.0)
    m13 = tl.load(p + 7 * sp, mask=mask, other=0.0)
    m20 = tl.load(p + 8 * sp, mask=mask, other=0.0)
    m21 = tl.load(p + 9 * sp, mask=mask, other=0.0)
    m22 = tl.load(p + 10 * sp, mask=mask, other=0.0)
    m23 = tl.load(p + 11 * sp, mask=mask, other=0.0)
    m30 = tl.load(p + 12 * sp, mask=mask, other=0.0)
    m31 = tl.load(p + 13 * sp, mask=mask, other=0.0)
    m32 = tl.load(p + 14 * sp, mask=mask, other=0.0)
    m33 = tl.load(p + 15 * sp, mask=mask, other=0.0)
    store_outputs(m00, m01, m02, m03, m10, m11, m12, m13, m20, m21, m22, m23, m30, m31, m32, m33,
                  offs_t, mask_t, g * Kg + offs_n, mask_n, TH, TW, OH, OW,
                  y_ptr, ys_n, ys_k, ys_h, ys_w, z_ptr, zs_n, zs_k, zs_h, zs_w, bias_ptr, bias_stride,
                  alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO, INT64)


def launch_blocks(m: int, gpu: bool) -> dict:
    """(rows, cols, warps) of each transform kernel's program. F(4x4)'s transforms keep 36
    (input) or 24 (output) [rows, cols] values live: smaller blocks and more warps keep them
    in registers (sm_90 compiles without spills, tests/test_cuda_winograd_f4.py)."""
    if not gpu:
        return dict(input=(16, 16, 1), filter=(16, 16, 1), output=(16, 16, 1))
    if m == 4:
        return dict(input=(16, 32, 4), filter=(16, 16, 4), output=(16, 64, 8))
    return dict(input=(32, 32, 4), filter=(32, 32, 4), output=(32, 64, 4))


class WinogradNonfusedForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.WINOGRAD_NONFUSED
    exact = False
    tuner = Tuner()

    def not_applicable(self, problem):
        reason = super().not_applicable(problem) or winograd_not_applicable(problem)
        if reason is None:
            points = (tile_of(problem) + 2) ** 2
            if points * problem.groups > 65535:
                reason = f"{problem.groups} groups x {points} transform points exceed the GPU's 65535 grid rows"
        return reason

    def buffers(self, problem):
        geo = geometry(problem)
        m = tile_of(problem)
        points = (m + 2) ** 2
        T = tiles(problem, m)[0]
        dt = problem.dtype.numpy
        return [Buffer("V", (points * geo.groups, T, geo.cg), dt),
                Buffer("U", (points * geo.groups, geo.cg, geo.kg), dt),
                Buffer("M", (points * geo.groups, T, geo.kg), np.float32)]

    def estimate(self, problem):
        geo = geometry(problem)
        m = tile_of(problem)
        points = (m + 2) ** 2
        T = tiles(problem, m)[0]
        oh, ow = problem.out_spatial
        savings = 9 * problem.n * oh * ow / (points * T)  # direct multiplies / the points' (F(2x2): 36/16)
        staged = points * T * (geo.c * problem.dtype.itemsize + geo.k * 4) * 2
        return winograd_estimate(problem, efficiency=0.8, savings=savings) + staged / 3.5e12 + 8e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        geo = geometry(problem)
        m = tile_of(problem)
        kernels = winograd_f4 if m == 4 else _F2
        T, TH, TW = tiles(problem, m)
        V, U, M = workspace["V"], workspace["U"], workspace["M"]
        blocks = launch_blocks(m, y.device.type == "cuda")
        bm, bc, warps = blocks["input"]
        launch(kernels.input_transform_kernel, (cdiv(T, bm), cdiv(geo.cg, bc), geo.groups), (
            x, V, T, geo.cg, geo.inp[1], geo.inp[2], TH, TW, geo.pad[1], geo.pad[2], *strides4(x)),
            dict(BLOCK_M=bm, BLOCK_C=bc, INT64=needs_int64(x)), dict(num_warps=warps))
        bc, bn, warps = blocks["filter"]
        launch(kernels.filter_transform_kernel, (cdiv(geo.cg, bc), cdiv(geo.kg, bn), geo.groups), (
            w, U, geo.cg, geo.kg, *strides4(w)), dict(BLOCK_C=bc, BLOCK_N=bn, FLIP=problem.mode == 0),
            dict(num_warps=warps))
        prec = input_precision(problem)
        cfg = self.tuner.pick((problem_key(problem), "fwd-winograd-nonfused"),
                              batched_gemm.configs(y.device, problem.dtype.itemsize),
                              lambda c, out: batched_gemm.bmm(V, U, out, prec, c), M, y.device, scratch_ok=True)
        batched_gemm.bmm(V, U, M, prec, cfg)
        bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, 2)
        bm, bn, warps = blocks["output"]
        launch(kernels.output_transform_kernel, (cdiv(T, bm), cdiv(geo.kg, bn), geo.groups), (
            M, y, bias, z, T, geo.kg, geo.out[1], geo.out[2], TH, TW, *strides4(y), zs[0], zs[1], zs[3], zs[4],
            bias_stride, float(alpha), float(beta), alpha2, coef, swish_beta),
            dict(BLOCK_M=bm, BLOCK_N=bn, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                 INT64=needs_int64(y, z)), dict(num_warps=warps))


class _F2:
    """F(2x2, 3x3)'s kernels (this module's), beside winograd_f4's."""
    input_transform_kernel = input_transform_kernel
    filter_transform_kernel = filter_transform_kernel
    output_transform_kernel = output_transform_kernel
