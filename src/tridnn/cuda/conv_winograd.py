"""WINOGRAD forward convolution in Triton: fused F(2x2, 3x3), 3x3 filters, stride 1.

Winograd's minimal filtering computes a 2x2 output tile of a 3x3 correlation from a
4x4 input patch d with 16 multiplies instead of 36 (Lavin & Gray, 2015):

    Y = A^T [ (G g G^T) * (B^T d B) ] A

    B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
    G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
    A^T = [1 1 1 0; 0 1 -1 -1]

Summed over input channels, the elementwise product becomes 16 independent GEMMs,
one per transform point: M_p[tile, k] = sum_c V_p[tile, c] U_p[c, k]. The fused
kernel does everything in registers: each program owns BLOCK_M tiles x BLOCK_N
output channels, and per block of input channels it loads the 4x4 patches and the
3x3 filters, transforms both in float32, and feeds 16 ``tl.dot``s (tensor cores
for float16/bfloat16: the transformed values are rounded to the data type, hence
``exact = False``). The 2x2 outputs leave through the fused epilogue. No workspace.

The transforms (``input_row``, ``filter_row``, ``output_row``) are shared with
WINOGRAD_NONFUSED, which stages V, U and M in the workspace instead.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from .common import TritonConvAlgorithm, Tuner, cdiv, grouped_tile, launch, problem_key, split_rows, wide
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, input_precision, needs_int64

TILE = 2  # outputs per tile side: F(2x2, 3x3)

# The GPU tuner's (BLOCK_M, BLOCK_N, num_warps, num_stages). 16 float32 accumulator tiles
# live in registers (16K floats a program at 32x32); larger tiles spill.
# Not 32x32 at 8 warps: Triton 3.6 lays its MMAs out as warpsPerCTA [8, 1] over 32 rows, so
# four warps compute each row, and on an H100 that build gave wrong bfloat16 results in
# CONVOLUTION mode (the first column of every 2x2 output tile; fuzz seed 1, 2026-12-06,
# tests/test_cuda_winograd_grouped.py). It only repeated other warps' work anyway.
GPU_CONFIGS = ((32, 32, 4, 2), (64, 32, 8, 2), (32, 64, 8, 2), (16, 64, 4, 2))


@triton.jit
def bt(d0, d1, d2, d3):
    """One row (or column) of B^T d."""
    return d0 - d2, d1 + d2, d2 - d1, d1 - d3


@triton.jit
def gt(g0, g1, g2):
    """One row (or column) of G g."""
    return g0, (g0 + g1 + g2) * 0.5, (g0 - g1 + g2) * 0.5, g2


@triton.jit
def at(m0, m1, m2, m3):
    """One row (or column) of A^T m."""
    return m0 + m1 + m2, m1 - m2 - m3


@triton.jit
def input_row(x_ptr, base, ih, iw0, IH, IW, xs_h, xs_w, ok):
    """Row ih of the 4x4 patches starting at column iw0, B^T-transformed along the row.
    base: [rows, cols] offsets of (n, channel); ok: the [rows, cols] mask."""
    okh = ok & (ih >= 0) & (ih < IH)
    p = x_ptr + base + ih * xs_h
    d0 = tl.load(p + (iw0 + 0) * xs_w, mask=okh & (iw0 + 0 >= 0) & (iw0 + 0 < IW), other=0.0).to(tl.float32)
    d1 = tl.load(p + (iw0 + 1) * xs_w, mask=okh & (iw0 + 1 >= 0) & (iw0 + 1 < IW), other=0.0).to(tl.float32)
    d2 = tl.load(p + (iw0 + 2) * xs_w, mask=okh & (iw0 + 2 >= 0) & (iw0 + 2 < IW), other=0.0).to(tl.float32)
    d3 = tl.load(p + (iw0 + 3) * xs_w, mask=okh & (iw0 + 3 >= 0) & (iw0 + 3 < IW), other=0.0).to(tl.float32)
    return bt(d0, d1, d2, d3)


@triton.jit
def window_row(base, ih, iw0, IH, IW, xs_h, xs_w, ok, WIDTH: tl.constexpr):
    """Row ih of the WIDTH-wide input windows starting at column iw0, as a tuple of float32
    [rows, cols] tensors (zeros outside the image). base: pointers of (n, channel)."""
    ok_h = ok & (ih >= 0) & (ih < IH)
    out = ()
    for j in tl.static_range(WIDTH):
        iw = iw0 + j
        out = out + (tl.load(base + ih * xs_h + iw * xs_w, mask=ok_h & (iw >= 0) & (iw < IW),
                             other=0.0).to(tl.float32),)
    return out


@triton.jit
def filter_row(w_ptr, base, r, ws_h, ws_w, mask, FLIP: tl.constexpr):
    """Row r of the 3x3 filters, G-transformed along the row (float32)."""
    if FLIP:
        p = w_ptr + base + (2 - r) * ws_h
        g0 = tl.load(p + 2 * ws_w, mask=mask, other=0.0).to(tl.float32)
        g1 = tl.load(p + 1 * ws_w, mask=mask, other=0.0).to(tl.float32)
        g2 = tl.load(p, mask=mask, other=0.0).to(tl.float32)
    else:
        p = w_ptr + base + r * ws_h
        g0 = tl.load(p, mask=mask, other=0.0).to(tl.float32)
        g1 = tl.load(p + ws_w, mask=mask, other=0.0).to(tl.float32)
        g2 = tl.load(p + 2 * ws_w, mask=mask, other=0.0).to(tl.float32)
    return gt(g0, g1, g2)


@triton.jit
def store_outputs(m00, m01, m02, m03, m10, m11, m12, m13, m20, m21, m22, m23, m30, m31, m32, m33,
                  offs_t, mask_t, cols, mask_n, TH, TW, OH, OW,
                  y_ptr, ys_n, ys_k, ys_h, ys_w, z_ptr, zs_n, zs_k, zs_h, zs_w, bias_ptr, bias_stride,
                  alpha, beta, alpha2, coef, swish_beta,
                  ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
                  INT64: tl.constexpr):
    """Y = A^T M A for a block of tiles, each of the 4 outputs through the epilogue."""
    p0 = at(m00, m10, m20, m30)   # column j of A^T M: (row 0, row 1)
    p1 = at(m01, m11, m21, m31)
    p2 = at(m02, m12, m22, m32)
    p3 = at(m03, m13, m23, m33)
    y00, y01 = at(p0[0], p1[0], p2[0], p3[0])   # (A^T M) A
    y10, y11 = at(p0[1], p1[1], p2[1], p3[1])
    nn, _, th, tw = split_rows(offs_t, 1, TH, TW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    oh = th * 2
    ow = tw * 2
    ry = nn * ys_n + oh * ys_h + ow * ys_w
    rz = nn * zs_n + oh * zs_h + ow * zs_w
    m_h0 = mask_t & (oh < OH)
    m_h1 = mask_t & (oh + 1 < OH)
    m_w1 = ow + 1 < OW
    store_tile(y00, ry, rz, cols, m_h0, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
               alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
    store_tile(y01, ry + ys_w, rz + zs_w, cols, m_h0 & m_w1, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
               bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
    store_tile(y10, ry + ys_h, rz + zs_h, cols, m_h1, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
               alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
    store_tile(y11, ry + ys_h + ys_w, rz + zs_h + zs_w, cols, m_h1 & m_w1, mask_n, y_ptr, ys_k, z_ptr, zs_k,
               bias_ptr, bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


@triton.jit(do_not_specialize=['T', 'IH', 'IW', 'OH', 'OW', 'TH', 'TW', 'PH', 'PW'])
def winograd_fused_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr, z_ptr,
        T, Cg, Kg, IH, IW, OH, OW, TH, TW, PH, PW,
        xs_n, xs_c, xs_h, xs_w, ws_k, ws_c, ws_h, ws_w, ys_n, ys_k, ys_h, ys_w,
        zs_n, zs_k, zs_h, zs_w, bias_stride, alpha, beta, alpha2, coef, swish_beta,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        FLIP: tl.constexpr, PREC: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
        HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(T, BLOCK_M), tl.cdiv(Kg, BLOCK_N), GROUP_M)
    offs_t = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)   # tiles (n, th, tw)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)   # output channels of group g
    mask_t = offs_t < T
    mask_n = offs_n < Kg
    tw = offs_t % TW
    th = (offs_t // TW) % TH
    nn = offs_t // (TW * TH)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
    ih0 = (th * 2 - PH)[:, None]
    iw0 = (tw * 2 - PW)[:, None]
    dt = w_ptr.dtype.element_ty
    z = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    m00, m01, m02, m03 = z, z, z, z
    m10, m11, m12, m13 = z, z, z, z
    m20, m21, m22, m23 = z, z, z, z
    m30, m31, m32, m33 = z, z, z, z
    for c0 in range(0, Cg, BLOCK_K):
        c = c0 + tl.arange(0, BLOCK_K)
        mask_c = c < Cg
        xbase = (nn * xs_n)[:, None] + ((g * Cg + c) * xs_c)[None, :]
        ok = mask_t[:, None] & mask_c[None, :]
        r0 = input_row(x_ptr, xbase, ih0 + 0, iw0, IH, IW, xs_h, xs_w, ok)
        r1 = input_row(x_ptr, xbase, ih0 + 1, iw0, IH, IW, xs_h, xs_w, ok)
        r2 = input_row(x_ptr, xbase, ih0 + 2, iw0, IH, IW, xs_h, xs_w, ok)
        r3 = input_row(x_ptr, xbase, ih0 + 3, iw0, IH, IW, xs_h, xs_w, ok)
        wbase = ((g * Kg + offs_n) * ws_k)[None, :] + (c * ws_c)[:, None]
        wmask = mask_c[:, None] & mask_n[None, :]
        u0 = filter_row(w_ptr, wbase, 0, ws_h, ws_w, wmask, FLIP)
        u1 = filter_row(w_ptr, wbase, 1, ws_h, ws_w, wmask, FLIP)
        u2 = filter_row(w_ptr, wbase, 2, ws_h, ws_w, wmask, FLIP)
        # column j of V = B^T (rows) ; column j of U = G (rows)
        v0j = bt(r0[0], r1[0], r2[0], r3[0])
        v1j = bt(r0[1], r1[1], r2[1], r3[1])
        v2j = bt(r0[2], r1[2], r2[2], r3[2])
        v3j = bt(r0[3], r1[3], r2[3], r3[3])
        u0j = gt(u0[0], u1[0], u2[0])
        u1j = gt(u0[1], u1[1], u2[1])
        u2j = gt(u0[2], u1[2], u2[2])
        u3j = gt(u0[3], u1[3], u2[3])
        # M[i][j] += V[i][j] @ U[i][j]   (vXj[i] is V[i][X])
        m00 = tl.dot(v0j[0].to(dt), u0j[0].to(dt), m00, input_precision=PREC)
        m01 = tl.dot(v1j[0].to(dt), u1j[0].to(dt), m01, input_precision=PREC)
        m02 = tl.dot(v2j[0].to(dt), u2j[0].to(dt), m02, input_precision=PREC)
        m03 = tl.dot(v3j[0].to(dt), u3j[0].to(dt), m03, input_precision=PREC)
        m10 = tl.dot(v0j[1].to(dt), u0j[1].to(dt), m10, input_precision=PREC)
        m11 = tl.dot(v1j[1].to(dt), u1j[1].to(dt), m11, input_precision=PREC)
        m12 = tl.dot(v2j[1].to(dt), u2j[1].to(dt), m12, input_precision=PREC)
        m13 = tl.dot(v3j[1].to(dt), u3j[1].to(dt), m13, input_precision=PREC)
        m20 = tl.dot(v0j[2].to(dt), u0j[2].to(dt), m20, input_precision=PREC)
        m21 = tl.dot(v1j[2].to(dt), u1j[2].to(dt), m21, input_precision=PREC)
        m22 = tl.dot(v2j[2].to(dt), u2j[2].to(dt), m22, input_precision=PREC)
        m23 = tl.dot(v3j[2].to(dt), u3j[2].to(dt), m23, input_precision=PREC)
        m30 = tl.dot(v0j[3].to(dt), u0j[3].to(dt), m30, input_precision=PREC)
        m31 = tl.dot(v1j[3].to(dt), u1j[3].to(dt), m31, input_precision=PREC)
        m32 = tl.dot(v2j[3].to(dt), u2j[3].to(dt), m32, input_precision=PREC)
        m33 = tl.dot(v3j[3].to(dt), u3j[3].to(dt), m33, input_precision=PREC)
    store_outputs(m00, m01, m02, m03, m10, m11, m12, m13, m20, m21, m22, m23, m30, m31, m32, m33,
                  offs_t, mask_t, g * Kg + offs_n, mask_n, TH, TW, OH, OW,
                  y_ptr, ys_n, ys_k, ys_h, ys_w, z_ptr, zs_n, zs_k, zs_h, zs_w, bias_ptr, bias_stride,
                  alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO, INT64)


def winograd_not_applicable(problem) -> str | None:
    """F(2x2, 3x3): 2-D, 3x3 filters, stride 1, dilation 1."""
    if problem.nd != 2:
        return f"Winograd F(2x2,3x3) is 2-D only; this problem is {problem.nd}-D"
    if tuple(problem.kernel) != (3, 3):
        return f"Winograd F(2x2,3x3) needs a 3x3 filter, got {'x'.join(map(str, problem.kernel))}"
    if tuple(problem.stride) != (1, 1) or tuple(problem.dilation) != (1, 1):
        return f"Winograd needs stride 1 and dilation 1, got stride {problem.stride} dilation {problem.dilation}"
    return None


def tiles(problem, m=TILE):
    """(tiles, tiles along h, tiles along w) of m x m outputs."""
    oh, ow = problem.out_spatial
    th, tw = cdiv(oh, m), cdiv(ow, m)
    return problem.n * th * tw, th, tw


def strides4(t):
    """A 4-D tensor's strides as a tuple (the Winograd kernels take them one by one)."""
    s = tuple(t.stride())
    return s[0], s[1], s[2], s[3]


def winograd_estimate(problem, efficiency, savings=36 / 16) -> float:
    """Seconds: the direct multiplies over ``savings`` (F(2x2): 36/16) at the GEMM rate, plus
    the memory time."""
    from .conv_implicit_gemm import gemm_estimate
    return gemm_estimate(problem, efficiency=efficiency * savings)


class WinogradForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.WINOGRAD
    exact = False
    tuner = Tuner()

    def not_applicable(self, problem):
        return super().not_applicable(problem) or winograd_not_applicable(problem)

    def estimate(self, problem):
        # 16 accumulators in registers: small tiles, so well below the GEMM rate
        return winograd_estimate(problem, efficiency=0.3)

    def _launch(self, problem, x, w, y, alpha, beta, spec, cfg):
        geo = geometry(problem)
        T, TH, TW = tiles(problem)
        bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, 2)
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        launch(winograd_fused_kernel, (cdiv(T, bm) * cdiv(geo.kg, bn), geo.groups), (
            x, w, y, bias, z, T, geo.cg, geo.kg, geo.inp[1], geo.inp[2], geo.out[1], geo.out[2], TH, TW,
            geo.pad[1], geo.pad[2], *strides4(x), *strides4(w), *strides4(y), zs[0], zs[1], zs[3], zs[4],
            bias_stride, float(alpha), float(beta), alpha2, coef, swish_beta),
            dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, FLIP=problem.mode == 0,
                 PREC=input_precision(problem), ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                 INT64=needs_int64(x, y, z)), dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        if y.device.type != "cuda":
            cands = [dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=1, num_stages=1)]
        else:
            bk = 16 if problem.dtype.itemsize == 4 else 32
            cands = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=wp, num_stages=st)
                     for bm, bn, wp, st in GPU_CONFIGS]
        key = (problem_key(problem), spec is not None and spec.act_code, "fwd-winograd")
        cfg = self.tuner.pick(key, cands, lambda c, out: self._launch(problem, x, w, out, 1.0, 0.0, spec, c),
                              y, y.device)
        self._launch(problem, x, w, y, alpha, beta, spec, cfg)
