"""DIRECT forward convolution in Triton: depthwise and small-group, memory bound.

With one (or a few) input channels per group there is no GEMM worth the name: each
output element is taps x (channels per group) multiply-adds. A program owns a tile
of BLOCK_P output pixels x BLOCK_C output channels; channels run along the tile's
fast axis, so in NHWC every load and store is a contiguous, vectorized run of
channels. The loop visits each tap (and each input channel of the group) once,
accumulating in float32; neighbouring pixels' taps overlap, and those re-reads hit
L1/L2, so x and y cross DRAM about once. Ends in the fused epilogue.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from .common import TritonConvAlgorithm, Tuner, cdiv, launch, problem_key, split_rows
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, needs_int64, strides5
from .memo import IdentityMemo

MAX_CHANNELS_PER_GROUP = 16


@triton.jit(do_not_specialize=['M', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW'])
def conv_direct_fwd_kernel(
        x_ptr, w_ptr, y_ptr, bias_ptr, z_ptr,
        M, K, Cg, Kg, ID, IH, IW, OD, OH, OW, KD, KH, KW,
        SD, SH, SW, PD, PH, PW, DD, DH, DW,
        xs_n, xs_c, xs_d, xs_h, xs_w,
        ws_k, ws_c, ws_d, ws_h, ws_w,
        ys_n, ys_k, ys_d, ys_h, ys_w,
        zs_n, zs_k, zs_d, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, DEPTHWISE: tl.constexpr, FLIP: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_k = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_m = offs_m < M
    mask_k = offs_k < K
    nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
    if INT64:
        nn = nn.to(tl.int64)
    if DEPTHWISE:
        x_chan = offs_k * xs_c
    else:
        x_chan = (offs_k // Kg) * Cg * xs_c
    id0 = od * SD - PD
    ih0 = oh * SH - PH
    iw0 = ow * SW - PW
    x_row = nn * xs_n + id0 * xs_d + ih0 * xs_h + iw0 * xs_w
    w_col = offs_k * ws_k
    acc = tl.zeros((BLOCK_P, BLOCK_C), dtype=tl.float32)
    for kd in range(0, KD):
        okd = mask_m & (id0 + kd * DD >= 0) & (id0 + kd * DD < ID)
        for kh in range(0, KH):
            okh = okd & (ih0 + kh * DH >= 0) & (ih0 + kh * DH < IH)
            for kw in range(0, KW):
                ok = okh & (iw0 + kw * DW >= 0) & (iw0 + kw * DW < IW)
                x_tap = x_row + kd * DD * xs_d + kh * DH * xs_h + kw * DW * xs_w
                if FLIP:
                    w_tap = (KD - 1 - kd) * ws_d + (KH - 1 - kh) * ws_h + (KW - 1 - kw) * ws_w
                else:
                    w_tap = kd * ws_d + kh * ws_h + kw * ws_w
                mask = ok[:, None] & mask_k[None, :]
                if DEPTHWISE:
                    xv = tl.load(x_ptr + x_tap[:, None] + x_chan[None, :], mask=mask, other=0.0)
                    wv = tl.load(w_ptr + w_col + w_tap, mask=mask_k, other=0.0)
                    acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
                else:
                    for ci in range(0, Cg):
                        xv = tl.load(x_ptr + x_tap[:, None] + (x_chan + ci * xs_c)[None, :], mask=mask,
                                     other=0.0)
                        wv = tl.load(w_ptr + w_col + ci * ws_c + w_tap, mask=mask_k, other=0.0)
                        acc += xv.to(tl.float32) * wv.to(tl.float32)[None, :]
    row_y = nn * ys_n + od * ys_d + oh * ys_h + ow * ys_w
    row_z = nn * zs_n + od * zs_d + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, offs_k, mask_m, mask_k, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
               bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


def _configs(device, k):
    if device.type != "cuda":
        return [dict(BLOCK_P=16, BLOCK_C=16, num_warps=1)]
    out = []
    for bp, bc, warps in ((64, 64, 4), (32, 128, 4), (128, 32, 4), (64, 128, 8), (128, 64, 8), (16, 256, 4)):
        if bc <= max(32, triton.next_power_of_2(k)):
            out.append(dict(BLOCK_P=bp, BLOCK_C=bc, num_warps=warps))
    return out


def launch_direct(problem, x, w, y, alpha, beta, spec, cfg):
    if spec is None:  # launch arguments built once per problem, strides and config
        recipe = _recipes.get((problem, cfg), (x.stride(), w.stride(), y.stride(), beta == 0),
                              lambda: _recipe(problem, x, w, y, beta, None, cfg))
        bias, z = y, y
    else:
        recipe = _recipe(problem, x, w, y, beta, spec, cfg)
        bias = spec.bias.reshape(-1) if spec.bias is not None else y
        z = spec.z if spec.z is not None else y
    grid, head, tail, consts, options, static = recipe
    launch(conv_direct_fwd_kernel, grid, (x, w, y, bias, z) + head + (float(alpha), float(beta)) + tail,
           consts, options, static)


_recipes = IdentityMemo()


def _recipe(problem, x, w, y, beta, spec, cfg):
    """Grid, scalar arguments and constexprs: everything but the tensors and alpha/beta."""
    geo = geometry(problem)
    nd = problem.nd
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    M = geo.out_pixels
    grid = (cdiv(M, cfg["BLOCK_P"]), cdiv(geo.k, cfg["BLOCK_C"]))
    head = (M, geo.k, geo.cg, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
            *strides5(x, nd), *strides5(w, nd), *strides5(y, nd), *zs, bias_stride)
    tail = (alpha2, coef, swish_beta)
    consts = dict(BLOCK_P=cfg["BLOCK_P"], BLOCK_C=cfg["BLOCK_C"], DEPTHWISE=geo.cg == 1 and geo.kg == 1,
                  FLIP=problem.mode == 0, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                  INT64=needs_int64(x, y, z))
    options = dict(num_warps=cfg["num_warps"])
    static = ((head, tail, tuple(consts.items()), tuple(options.items()),
               (x.dtype, w.dtype, y.dtype, bias.dtype, z.dtype)), 5)
    return grid, head, tail, consts, options, static


class DirectForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.DIRECT
    tuner = Tuner()

    def not_applicable(self, problem):
        reason = super().not_applicable(problem)
        if reason is None and problem.w.c > MAX_CHANNELS_PER_GROUP:
            reason = (f"DIRECT is for depthwise and small-group convolutions (<= "
                      f"{MAX_CHANNELS_PER_GROUP} input channels per group); this one has {problem.w.c}")
        return reason

    def estimate(self, problem):
        byte = problem.dtype.itemsize
        moved = (problem.x.size + problem.y.size) * byte
        compute = problem.flops / 5e12  # CUDA-core FMAs: measured 4-6 TFLOP/s on the H200 (conv1, depthwise)
        return max(moved / 3.0e12, compute) + 4e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        key = (problem_key(problem), spec is not None and spec.act_code, "fwd-direct")
        cfg = self.tuner.pick(key, lambda: _configs(y.device, problem.k),
                              lambda c, out: launch_direct(problem, x, w, out, 1.0, 0.0, spec, c), y, y.device)
        launch_direct(problem, x, w, y, alpha, beta, spec, cfg)
