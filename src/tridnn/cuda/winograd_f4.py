"""F(4x4, 3x3) transform kernels for WINOGRAD_NONFUSED (float32 data at float32 accuracy).

A 4x4 output tile comes from a 6x6 input patch with 36 multiplies instead of 144 (4x
fewer than direct; F(2x2)'s 16 for 4 outputs is 2.25x fewer), and the transformed input
and the point products are 36/16 = 2.25x the input and the output instead of F(2x2)'s 4x,
so both the batched GEMM and the workspace traffic shrink. Lavin and Gray's matrices for
the points 0, 1, -1, 2, -2 and infinity (the CPU's ``cpu.conv_winograd.matrices(4)``,
which the tests compare these against):

    B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
    G   = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
    A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]

Why only for float32 data with float32-accurate products (FMA or DEFAULT math): the
entries up to 8 amplify the rounding of V and U. Emulated on standard-normal data with
64-256 channels against the float64 direct convolution (benchmarks/emulate_winograd_error.py),
the max error over max |y| is 1.1e-6 with float32 operands (F(2x2): 7e-8; tridnn's
float32 tolerance is 2e-5), but 9e-3 with tf32 operands (F(2x2): 6e-4, direct 3e-4) and
7e-2 with bfloat16 V and U (F(2x2): 4e-3). So tf32 and the half types keep F(2x2).

Each kernel builds tuples of [rows, cols] tensors in ``tl.static_range`` loops: the
transform is applied along the rows of the patch, then down its columns; point (i, j) of
a 6x6 transform is stored at plane ``6 * i + j`` of V, U and M.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import split_rows, wide
from .conv_winograd import window_row
from .epilogue import store_tile


@triton.jit
def bt6(d0, d1, d2, d3, d4, d5):
    """B^T d for one row (or column) of 6 input values."""
    return (4 * d0 - 5 * d2 + d4, d3 + d4 - 4 * (d1 + d2), 4 * (d1 - d2) + d4 - d3,
            2 * (d3 - d1) + d4 - d2, 2 * (d1 - d3) + d4 - d2, 4 * d1 - 5 * d3 + d5)


@triton.jit
def gt6(g0, g1, g2):
    """G g for one row (or column) of 3 filter values."""
    even = g0 + g2
    return (g0 * 0.25, (even + g1) * (-1.0 / 6.0), (even - g1) * (-1.0 / 6.0),
            g0 * (1.0 / 24.0) + g1 * (1.0 / 12.0) + g2 * (1.0 / 6.0),
            g0 * (1.0 / 24.0) - g1 * (1.0 / 12.0) + g2 * (1.0 / 6.0), g2)


@triton.jit
def at6(m0, m1, m2, m3, m4, m5):
    """A^T m for one row (or column) of 6 point values: 4 outputs."""
    s = m1 + m2
    d = m1 - m2
    s2 = m3 + m4
    d2 = m3 - m4
    return m0 + s + s2, d + 2 * d2, s + 4 * s2, d + 8 * d2 + m5


@triton.jit(do_not_specialize=['T', 'IH', 'IW', 'TH', 'TW', 'PH', 'PW'])
def input_transform_kernel(x_ptr, v_ptr, T, Cg, IH, IW, TH, TW, PH, PW, xs_n, xs_c, xs_h, xs_w,
                           BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, INT64: tl.constexpr):
    """V [36, G, T, Cg] = B^T d B for every 6x6 patch (tile t, channel c) of group g."""
    # map the program to a block of tiles x channels of one group
    offs_t = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    ok = (offs_t < T)[:, None] & (c < Cg)[None, :]
    nn, _, th, tw = split_rows(offs_t, 1, TH, TW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
    ih0 = (th * 4 - PH)[:, None]
    iw0 = (tw * 4 - PW)[:, None]
    base = x_ptr + (nn * xs_n)[:, None] + ((g * Cg + c) * xs_c)[None, :]
    # each patch row, loaded (zeros outside the image) and transformed along the row
    rows = ()
    for i in tl.static_range(6):
        d = window_row(base, ih0 + i, iw0, IH, IW, xs_h, xs_w, ok, 6)
        rows = rows + (bt6(d[0], d[1], d[2], d[3], d[4], d[5]),)
    # down each column, then store the 6 points of that column
    plane = G.to(tl.int64) * T * Cg
    offs = (g.to(tl.int64) * T + offs_t)[:, None] * Cg + c[None, :]
    for j in tl.static_range(6):
        col = bt6(rows[0][j], rows[1][j], rows[2][j], rows[3][j], rows[4][j], rows[5][j])
        for i in tl.static_range(6):
            tl.store(v_ptr + (6 * i + j) * plane + offs, col[i].to(v_ptr.dtype.element_ty), mask=ok)


@triton.jit
def filter_transform_kernel(w_ptr, u_ptr, Cg, Kg, ws_k, ws_c, ws_h, ws_w,
                            BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, FLIP: tl.constexpr):
    """U [36, G, Cg, Kg] = G g G^T for every 3x3 filter (FLIP: turned 180 degrees first,
    CONVOLUTION mode)."""
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    k = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    mask = (c < Cg)[:, None] & (k < Kg)[None, :]
    base = w_ptr + ((g * Kg + k) * ws_k)[None, :] + (c * ws_c)[:, None]
    rows = ()
    for r in tl.static_range(3):
        v = ()
        for s in tl.static_range(3):
            if FLIP:
                p = base + (2 - r) * ws_h + (2 - s) * ws_w
            else:
                p = base + r * ws_h + s * ws_w
            v = v + (tl.load(p, mask=mask, other=0.0).to(tl.float32),)
        rows = rows + (gt6(v[0], v[1], v[2]),)
    plane = G.to(tl.int64) * Cg * Kg
    offs = (g.to(tl.int64) * Cg + c)[:, None] * Kg + k[None, :]
    for j in tl.static_range(6):
        col = gt6(rows[0][j], rows[1][j], rows[2][j])
        for i in tl.static_range(6):
            tl.store(u_ptr + (6 * i + j) * plane + offs, col[i].to(u_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=['T', 'OH', 'OW', 'TH', 'TW'])
def output_transform_kernel(m_ptr, y_ptr, bias_ptr, z_ptr, T, Kg, OH, OW, TH, TW,
                            ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
                            alpha, beta, alpha2, coef, swish_beta,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr,
                            HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
                            INT64: tl.constexpr):
    """y = epilogue(A^T M A), M [36, G, T, Kg] float32: 4x4 outputs per tile."""
    offs_t = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    g = tl.program_id(2)
    G = tl.num_programs(2)
    mask_t = offs_t < T
    mask_n = offs_n < Kg
    mask = mask_t[:, None] & mask_n[None, :]
    plane = G.to(tl.int64) * T * Kg
    p = m_ptr + (g.to(tl.int64) * T + offs_t)[:, None] * Kg + offs_n[None, :]
    # A^T along each row of points: 6 rows of 4 values
    rows = ()
    for i in tl.static_range(6):
        m = ()
        for j in tl.static_range(6):
            m = m + (tl.load(p + (6 * i + j) * plane, mask=mask, other=0.0),)
        rows = rows + (at6(m[0], m[1], m[2], m[3], m[4], m[5]),)
    # down each column: output column b's 4 rows, each through the epilogue
    nn, _, th, tw = split_rows(offs_t, 1, TH, TW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_h, ys_w = wide((ys_n, ys_k, ys_h, ys_w))
        zs_n, zs_k, zs_h, zs_w = wide((zs_n, zs_k, zs_h, zs_w))
    oh = th * 4
    ow = tw * 4
    cols = g * Kg + offs_n
    for b in tl.static_range(4):
        out = at6(rows[0][b], rows[1][b], rows[2][b], rows[3][b], rows[4][b], rows[5][b])
        for a in tl.static_range(4):
            ok = mask_t & (oh + a < OH) & (ow + b < OW)
            ry = nn * ys_n + (oh + a) * ys_h + (ow + b) * ys_w
            rz = nn * zs_n + (oh + a) * zs_h + (ow + b) * zs_w
            store_tile(out[a], ry, rz, cols, ok, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
                       alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)
