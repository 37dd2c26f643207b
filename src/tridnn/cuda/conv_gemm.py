"""GEMM forward convolution in Triton: im2col into the workspace, then a matmul.

``im2col_kernel`` writes the column matrix col[g, m, r] (rows m = output pixels, r =
(tap, input channel) with channels fastest, so NHWC reads are contiguous runs),
padding as zeros, in x's dtype. Rows are padded with zeros to R_PAD, a multiple of 32
columns, so every row starts 64-byte aligned and the matmul's loads of col need no
mask along r and vectorize (a first layer has R = 7 * 7 * 3 = 147: unpadded, each row
starts anywhere and every load is split into 2-byte pieces). ``gemm_kernel`` then
multiplies it by the filter seen as a [taps x Cg, Kg] matrix per group (read at the
filter's own strides, the CONVOLUTION flip folded into the tap index) and ends in the
fused epilogue. The
explicit matrix costs a write and a read of taps x the input, which implicit GEMM
avoids; in exchange the matmul streams plain rows with no gather or bounds checks.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import TritonConvAlgorithm, Tuner, cdiv, grouped_tile, launch, next_pow2, problem_key, split_rows, wide
from .conv_implicit_gemm import GPU_CONFIGS_16, GPU_CONFIGS_32, INTERPRETER_CONFIG, _cfg, dot_rate
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, input_precision, needs_int64, strides5


@triton.jit(do_not_specialize=['M', 'R', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW',
                               'DD', 'DH', 'DW'])
def im2col_kernel(
        x_ptr, col_ptr,
        # col's rows (M output pixels) and columns (R real, R_PAD stored)
        M, R, R_PAD,
        # input and output extents, stride, padding, dilation
        ID, IH, IW, OD, OH, OW, SD, SH, SW, PD, PH, PW, DD, DH, DW,
        # x's strides (n, channel, d, h, w)
        xs_n, xs_c, xs_d, xs_h, xs_w,
        # the filter's channels per group and taps: constants, so splitting a column
        # index into (tap, channel) is a multiply-shift instead of an integer division
        CG: tl.constexpr, KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, INT64: tl.constexpr):
    """col[g, m, r] = x[n, g*Cg + c, o*s - p + t*d] (0 where that falls in the padding,
    and in the columns R..R_PAD). A program covers BLOCK_M pixels of one output row, so
    (n, od, oh) are scalars and only the column offset varies per element."""
    # -- map the program to (output row, run of pixels in it, column block, group)
    tiles_w = tl.cdiv(OW, BLOCK_M)
    row = tl.program_id(0) // tiles_w  # (n, od, oh) flattened
    ow = (tl.program_id(0) % tiles_w) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    g = tl.program_id(2)
    oh = row % OH
    od = (row // OH) % OD
    nn = row // (OH * OD)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
    mask_m = ow < OW
    # -- the columns: (tap, channel), and the input row / depth each reads (per column)
    c = offs_r % CG
    tap = offs_r // CG
    kw = tap % KW
    kh = (tap // KW) % KH
    kd = tap // (KW * KH)
    idd = od * SD - PD + kd * DD
    ih = oh * SH - PH + kh * DH
    ok_r = (offs_r < R) & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH)
    col_off = (g * CG + c) * xs_c + idd * xs_d + ih * xs_h
    # -- gather: only the input column varies per element
    iw = (ow * SW - PW)[:, None] + (kw * DW)[None, :]
    ok = mask_m[:, None] & ok_r[None, :] & (iw >= 0) & (iw < IW)
    v = tl.load(x_ptr + nn * xs_n + col_off[None, :] + iw * xs_w, mask=ok, other=0.0)
    m = row * OW + ow
    dst = (g.to(tl.int64) * M + m)[:, None] * R_PAD + offs_r[None, :]
    tl.store(col_ptr + dst, v, mask=mask_m[:, None] & (offs_r < R_PAD)[None, :])


@triton.jit(do_not_specialize=['M', 'R', 'OD', 'OH', 'OW'])
def gemm_kernel(col_ptr, w_ptr, y_ptr, bias_ptr, z_ptr, M, R, R_PAD, Cg, Kg, OD, OH, OW, KD, KH, KW,
                ws_k, ws_c, ws_d, ws_h, ws_w,
                ys_n, ys_k, ys_d, ys_h, ys_w, zs_n, zs_k, zs_d, zs_h, zs_w, bias_stride,
                alpha, beta, alpha2, coef, swish_beta,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                FLIP: tl.constexpr, PREC: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr,
                HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    """y[:, g*Kg:(g+1)*Kg] = epilogue(col[g] @ wmat[g]) with wmat[r, k] = w[k, c, tap(r)].
    BLOCK_K divides R_PAD (col's zero-padded row length), so col loads mask rows only."""
    pid = tl.program_id(0)
    g = tl.program_id(1)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(Kg, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < Kg
    a_row = (g.to(tl.int64) * M + offs_m) * R_PAD
    w_col = (g * Kg + offs_n) * ws_k
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r0 in range(0, R_PAD, BLOCK_K):
        r = r0 + tl.arange(0, BLOCK_K)
        mask_r = r < R
        a = tl.load(col_ptr + a_row[:, None] + r[None, :], mask=mask_m[:, None], other=0.0)
        c = r % Cg
        tap = r // Cg
        kw = tap % KW
        kh = (tap // KW) % KH
        kd = tap // (KW * KH)
        if FLIP:
            kd = KD - 1 - kd
            kh = KH - 1 - kh
            kw = KW - 1 - kw
        b = tl.load(w_ptr + w_col[None, :] + (c * ws_c + kd * ws_d + kh * ws_h + kw * ws_w)[:, None],
                    mask=mask_r[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        ys_n, ys_k, ys_d, ys_h, ys_w = wide((ys_n, ys_k, ys_d, ys_h, ys_w))
        zs_n, zs_k, zs_d, zs_h, zs_w = wide((zs_n, zs_k, zs_d, zs_h, zs_w))
    row_y = nn * ys_n + od * ys_d + oh * ys_h + ow * ys_w
    row_z = nn * zs_n + od * zs_d + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, g * Kg + offs_n, mask_m, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
               bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


ROW_ALIGN = 32  # col's rows are padded to a multiple of this many columns
# gemm_kernel's 16-bit tiles with no register spills (sm_90, offline, 2026-12-05): every one
# of the forward's 16-bit tiles spills in this kernel (3-129 local stores), these do not,
# with the fused bias, residual and activation too (128x128x32 did there: 4). Not timed on a
# GPU yet (conv1 bf16 GEMM ran 849 us where ~200 were predicted): the tuner keeps the fastest.
GEMM_CONFIGS_16_NO_SPILL = [_cfg(64, 128, 64, 8, 3), _cfg(64, 128, 32, 8, 3), _cfg(128, 64, 32, 8, 3)]


def padded_row(geo) -> int:
    """R_PAD: the column matrix's row length, taps x channels rounded up to ROW_ALIGN."""
    return -(-geo.taps * geo.cg // ROW_ALIGN) * ROW_ALIGN


def im2col(problem, x, col):
    geo = geometry(problem)
    nd = problem.nd
    M, R, r_pad = geo.out_pixels, geo.taps * geo.cg, padded_row(geo)
    gpu = x.device.type == "cuda"
    bm = min(64 if gpu else 16, next_pow2(geo.out[2]))
    br = ROW_ALIGN if gpu else 16
    rows = geo.n * geo.out[0] * geo.out[1]
    launch(im2col_kernel, (rows * cdiv(geo.out[2], bm), cdiv(r_pad, br), geo.groups), (
        x, col, M, R, r_pad, *geo.inp, *geo.out, *geo.stride, *geo.pad, *geo.dil, *strides5(x, nd)),
        dict(CG=geo.cg, KD=geo.ker[0], KH=geo.ker[1], KW=geo.ker[2], BLOCK_M=bm, BLOCK_R=br,
             INT64=needs_int64(x)), dict(num_warps=4 if gpu else 1))


def launch_gemm(problem, col, w, y, alpha, beta, spec, cfg):
    geo = geometry(problem)
    nd = problem.nd
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    M, R = geo.out_pixels, geo.taps * geo.cg
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    launch(gemm_kernel, (cdiv(M, bm) * cdiv(geo.kg, bn), geo.groups), (
        col, w, y, bias, z, M, R, padded_row(geo), geo.cg, geo.kg, *geo.out, *geo.ker, *strides5(w, nd), *strides5(y, nd), *zs,
        bias_stride, float(alpha), float(beta), alpha2, coef, swish_beta),
        dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, FLIP=problem.mode == 0, PREC=input_precision(problem),
             ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0, INT64=needs_int64(y, z)),
        dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))


class GemmForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.GEMM
    tuner = Tuner()

    def buffers(self, problem):
        geo = geometry(problem)
        return [Buffer("col", (geo.groups, geo.out_pixels, padded_row(geo)), problem.dtype.numpy)]

    def estimate(self, problem):
        """The matmul over col's padded rows at the dot rate (or y's write), plus col's round
        trip at the rate measured for conv1 (bf16 batch 64 on the H200, 2026-11-30 11:40 UTC:
        476 us for 514 MB of col written and read, ~1.2 TB/s: im2col is bound by its index
        arithmetic, ~45 instructions an element)."""
        geo = geometry(problem)
        byte = problem.dtype.itemsize
        col = geo.groups * geo.out_pixels * padded_row(geo)
        rate = dot_rate(problem) * min(1.0, geo.kg / 16)  # tl.dot pads a group's columns to 16
        matmul = max(2 * col * geo.kg / rate, problem.y.size * byte / 3.5e12) / 0.9
        return matmul + 2 * col * byte / 1.2e12 + 3e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        col = workspace["col"]
        im2col(problem, x, col)
        if y.device.type != "cuda":
            cands = [dict(INTERPRETER_CONFIG)]
        else:
            base = GPU_CONFIGS_32 if problem.dtype.itemsize == 4 else GPU_CONFIGS_16 + GEMM_CONFIGS_16_NO_SPILL
            r_pad = padded_row(geometry(problem))
            cands = []
            for c in base:  # BLOCK_K must divide R_PAD; a narrowed config may repeat another
                c = c if r_pad % c["BLOCK_K"] == 0 else dict(c, BLOCK_K=ROW_ALIGN)
                if c not in cands:
                    cands.append(c)
        key = (problem_key(problem), spec is not None and spec.act_code, "fwd-gemm")
        cfg = self.tuner.pick(key, cands, lambda c, out: launch_gemm(problem, col, w, out, 1.0, 0.0, spec, c),
                              y, y.device)
        launch_gemm(problem, col, w, y, alpha, beta, spec, cfg)
