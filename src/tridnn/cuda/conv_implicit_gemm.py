"""IMPLICIT_GEMM forward convolution in Triton: the GEMM of im2col, never built.

The convolution is a GEMM with rows = output pixels (n, od, oh, ow), columns = output
channels of a group, and the reduction over (kernel tap, input channel). Each program
computes a BLOCK_M x BLOCK_N tile of y. Its reduction loop walks the taps and, inside
each tap, BLOCK_K input channels at a time: the A tile is gathered straight from x
(for NHWC, each row is a contiguous run of channels, so loads are wide) with padding
as masked-out rows, the B tile comes from the filter, and ``tl.dot`` accumulates in
float32 on tensor cores (float16, bfloat16; float32 as tf32 under TENSOR_OP math or in
strict IEEE float32 otherwise). The tile ends in the fused epilogue (epilogue.py).

When input channels per group are few (the first layer of a network, C = 3), the
reduction runs over (tap, channel) pairs flattened, so no tile is mostly padding.

The same kernel serves IMPLICIT_PRECOMP_GEMM (PRECOMP: row and tap offsets read from
tables in the workspace instead of computed) and split-K (SPLIT_K > 1: each program
reduces a slice of the loop into a float32 partial in the workspace; ``splitk_finish``
sums the slices in a fixed order, so the result is deterministic).
"""
from __future__ import annotations

import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from . import conv_tma
from .common import TritonConvAlgorithm, Tuner, cdiv, grouped_tile, launch, problem_key, sm_count, split_rows, wide
from .epilogue import launch_args, spec_of, store_tile
from .geometry import geometry, input_precision, needs_int64, strides5
from .memo import IdentityMemo

try:  # Gluon (Triton >= 3.5): the warp-specialized kernel, offered as extra tuner candidates
    from . import gluon_common, gluon_conv
except ImportError:  # pragma: no cover - a Triton without Gluon
    gluon_conv = None

FLAT_BELOW = 16  # input channels per group under which the (tap, channel) loop is flattened


@triton.jit(do_not_specialize=['M', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW', 'iters_per_split'])
def conv_fwd_kernel(
        x_ptr, w_ptr, y_ptr, part_ptr, rows_ptr, taps_ptr, bias_ptr, z_ptr,
        M, Cg, Kg, ID, IH, IW, OD, OH, OW, KD, KH, KW,
        SD, SH, SW, PD, PH, PW, DD, DH, DW,
        xs_n, xs_c, xs_d, xs_h, xs_w,
        ws_k, ws_c, ws_d, ws_h, ws_w,
        ys_n, ys_k, ys_d, ys_h, ys_w,
        zs_n, zs_k, zs_d, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta, iters_per_split,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        SPLIT_K: tl.constexpr, FLAT: tl.constexpr, PRECOMP: tl.constexpr, FLIP: tl.constexpr,
        PREC: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr,
        BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    pid_k = tl.program_id(2)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(Kg, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_m, num_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < Kg
    T = KD * KH * KW
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
        ws_k, ws_c, ws_d, ws_h, ws_w = wide((ws_k, ws_c, ws_d, ws_h, ws_w))
        ys_n, ys_k, ys_d, ys_h, ys_w = wide((ys_n, ys_k, ys_d, ys_h, ys_w))
        zs_n, zs_k, zs_d, zs_h, zs_w = wide((zs_n, zs_k, zs_d, zs_h, zs_w))

    # Per output pixel: where its receptive field starts in x.
    if PRECOMP:
        # rows table: int64 [M, 2] = (x offset of (n, id0, ih0, iw0), packed id0/ih0/iw0)
        row2 = offs_m.to(tl.int64) * 2  # over 2^30 output pixels, offs_m * 2 passes int32
        x_row = tl.load(rows_ptr + row2, mask=mask_m, other=0)
        packed = tl.load(rows_ptr + row2 + 1, mask=mask_m, other=0)
        id0 = (packed >> 42).to(tl.int32) - (1 << 20)
        ih0 = ((packed >> 21) & 0x1FFFFF).to(tl.int32) - (1 << 20)
        iw0 = (packed & 0x1FFFFF).to(tl.int32) - (1 << 20)
        if not INT64:
            x_row = x_row.to(tl.int32)
    else:
        nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
        id0 = od * SD - PD
        ih0 = oh * SH - PH
        iw0 = ow * SW - PW
        x_row = nn * xs_n + id0 * xs_d + ih0 * xs_h + iw0 * xs_w
    x_row += (g * Cg) * xs_c
    w_col = (g * Kg + offs_n) * ws_k

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if FLAT:
        total = tl.cdiv(T * Cg, BLOCK_K)
    else:
        n_cblk = tl.cdiv(Cg, BLOCK_K)
        total = T * n_cblk
    start = pid_k * iters_per_split
    end = tl.minimum(start + iters_per_split, total)
    for it in range(start, end):
        if FLAT:
            r = it * BLOCK_K + offs_k  # (tap, channel) pairs
            c = r % Cg
            tap = r // Cg
            kw = tap % KW
            kh = (tap // KW) % KH
            kd = tap // (KW * KH)
            dd = kd * DD
            dh = kh * DH
            dw = kw * DW
            ok = (mask_m[:, None] & (tap < T)[None, :]
                  & (id0[:, None] + dd[None, :] >= 0) & (id0[:, None] + dd[None, :] < ID)
                  & (ih0[:, None] + dh[None, :] >= 0) & (ih0[:, None] + dh[None, :] < IH)
                  & (iw0[:, None] + dw[None, :] >= 0) & (iw0[:, None] + dw[None, :] < IW))
            a = tl.load(x_ptr + x_row[:, None] + (dd * xs_d + dh * xs_h + dw * xs_w + c * xs_c)[None, :],
                        mask=ok, other=0.0)
            if FLIP:
                kd = KD - 1 - kd
                kh = KH - 1 - kh
                kw = KW - 1 - kw
            b = tl.load(w_ptr + w_col[None, :] + (c * ws_c + kd * ws_d + kh * ws_h + kw * ws_w)[:, None],
                        mask=(tap < T)[:, None] & mask_n[None, :], other=0.0)
        else:
            tap = it // n_cblk
            c = (it % n_cblk) * BLOCK_K + offs_k
            if PRECOMP:
                # taps table: int64 [T, 3] = (x offset delta, packed dd/dh/dw, w offset)
                x_delta = tl.load(taps_ptr + tap * 3)
                tpack = tl.load(taps_ptr + tap * 3 + 1)
                w_off = tl.load(taps_ptr + tap * 3 + 2)
                dd = (tpack >> 42).to(tl.int32)
                dh = ((tpack >> 21) & 0x1FFFFF).to(tl.int32)
                dw = (tpack & 0x1FFFFF).to(tl.int32)
                if not INT64:
                    x_delta = x_delta.to(tl.int32)
                    w_off = w_off.to(tl.int32)
            else:
                kw = tap % KW
                kh = (tap // KW) % KH
                kd = tap // (KW * KH)
                dd = kd * DD
                dh = kh * DH
                dw = kw * DW
                x_delta = dd * xs_d + dh * xs_h + dw * xs_w
                if FLIP:
                    kd = KD - 1 - kd
                    kh = KH - 1 - kh
                    kw = KW - 1 - kw
                w_off = kd * ws_d + kh * ws_h + kw * ws_w
            ok = (mask_m & (id0 + dd >= 0) & (id0 + dd < ID) & (ih0 + dh >= 0) & (ih0 + dh < IH)
                  & (iw0 + dw >= 0) & (iw0 + dw < IW))
            mask_c = c < Cg
            a = tl.load(x_ptr + (x_row + x_delta)[:, None] + c[None, :] * xs_c,
                        mask=ok[:, None] & mask_c[None, :], other=0.0)
            b = tl.load(w_ptr + w_off + w_col[None, :] + c[:, None] * ws_c,
                        mask=mask_c[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)

    cols = g * Kg + offs_n
    if SPLIT_K > 1:
        # float32 partial [SPLIT_K, M, K]; splitk_finish blends and stores
        Ktot = Kg * tl.num_programs(1)
        prow = (pid_k * M + offs_m).to(tl.int64) * Ktot
        tl.store(part_ptr + prow[:, None] + cols[None, :], acc, mask=mask_m[:, None] & mask_n[None, :])
    else:
        nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
        row_y = nn * ys_n + od * ys_d + oh * ys_h + ow * ys_w
        row_z = nn * zs_n + od * zs_d + oh * zs_h + ow * zs_w
        store_tile(acc, row_y, row_z, cols, mask_m, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
                   bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


@triton.jit
def splitk_finish(part_ptr, y_ptr, bias_ptr, z_ptr, M, K, OD, OH, OW, SPLIT,
                  ys_n, ys_k, ys_d, ys_h, ys_w, zs_n, zs_k, zs_d, zs_h, zs_w, bias_stride,
                  alpha, beta, alpha2, coef, swish_beta,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr,
                  HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
                  INT64: tl.constexpr):
    """y = epilogue(sum over s of part[s]), summed in order s = 0, 1, ... (deterministic)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < K
    mask = mask_m[:, None] & mask_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(0, SPLIT):
        prow = (s * M + offs_m).to(tl.int64) * K
        acc += tl.load(part_ptr + prow[:, None] + offs_n[None, :], mask=mask, other=0.0)
    nn, od, oh, ow = split_rows(offs_m, OD, OH, OW)
    if INT64:  # (as conv_fwd_kernel)
        ys_n, ys_k, ys_d, ys_h, ys_w = wide((ys_n, ys_k, ys_d, ys_h, ys_w))
        zs_n, zs_k, zs_d, zs_h, zs_w = wide((zs_n, zs_k, zs_d, zs_h, zs_w))
    row_y = nn * ys_n + od * ys_d + oh * ys_h + ow * ys_w
    row_z = nn * zs_n + od * zs_d + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, offs_n, mask_m, mask_n, y_ptr, ys_k, z_ptr, zs_k, bias_ptr,
               bias_stride, alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


# -- launch configs -------------------------------------------------------------------
def _cfg(bm, bn, bk, warps, stages, split=1):
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages, SPLIT_K=split)


GPU_CONFIGS_16 = [_cfg(128, 128, 64, 8, 3), _cfg(128, 128, 64, 4, 4), _cfg(128, 64, 64, 4, 4),
                  _cfg(64, 128, 64, 4, 4), _cfg(256, 128, 64, 8, 3), _cfg(128, 256, 64, 8, 3),
                  _cfg(64, 64, 64, 4, 4), _cfg(128, 128, 32, 4, 4)]
GPU_CONFIGS_32 = [_cfg(128, 128, 32, 8, 3), _cfg(128, 64, 32, 4, 4), _cfg(64, 128, 32, 4, 4),
                  _cfg(64, 64, 32, 4, 4), _cfg(128, 128, 16, 4, 4)]
INTERPRETER_CONFIG = _cfg(16, 16, 16, 1, 1)
# FLAT problems (fewer than FLAT_BELOW input channels per group: conv1, grouped convolutions):
# compiled for sm_90 offline (2026-12-05), every tile above spills in the flattened (tap,
# channel) loop (16-bit 89-564 local stores; float32 under IEEE 4-410, tf32x3 up to 392),
# these do not, the fused epilogue included. Not timed on a GPU yet: the tuner keeps the fastest.
FLAT_CONFIGS_16_NO_SPILL = [_cfg(128, 64, 32, 8, 3), _cfg(64, 128, 32, 8, 3), _cfg(64, 64, 64, 8, 3)]
FLAT_CONFIGS_32_NO_SPILL = [_cfg(64, 64, 32, 8, 3), _cfg(128, 64, 16, 8, 3), _cfg(64, 128, 16, 8, 3)]


def flat_reduction(geo) -> bool:
    return geo.cg < FLAT_BELOW


def split_for(geo, cfg, sms, max_split=16) -> int:
    """Slices of the reduction loop so a small output still fills the GPU."""
    tiles = cdiv(geo.out_pixels, cfg["BLOCK_M"]) * cdiv(geo.kg, cfg["BLOCK_N"]) * geo.groups
    iters = (cdiv(geo.taps * geo.cg, cfg["BLOCK_K"]) if flat_reduction(geo)
             else geo.taps * cdiv(geo.cg, cfg["BLOCK_K"]))
    if tiles == 0 or tiles * 2 > sms or iters < 8:  # tiles == 0: an empty batch
        return 1
    return max(1, min(max_split, cdiv(sms, tiles), iters // 4))


def gpu_configs(problem, geo) -> list:
    """The GPU tiles for this problem: its data type's list, plus the spill-free FLAT tiles
    where the (tap, channel) loop is flattened."""
    if problem.dtype.itemsize == 4:
        return GPU_CONFIGS_32 + (FLAT_CONFIGS_32_NO_SPILL if flat_reduction(geo) else [])
    return GPU_CONFIGS_16 + (FLAT_CONFIGS_16_NO_SPILL if flat_reduction(geo) else [])


def candidates(problem, geo, device, allow_split: bool):
    if device.type != "cuda":
        cfgs = [dict(INTERPRETER_CONFIG)]
        if allow_split:
            it = geo.taps * cdiv(geo.cg, 16) if not flat_reduction(geo) else cdiv(geo.taps * geo.cg, 16)
            if it >= 2:
                cfgs = [dict(INTERPRETER_CONFIG, SPLIT_K=2)]
        return cfgs
    base = gpu_configs(problem, geo)
    out = []
    sms = sm_count(device)
    for cfg in base:
        out.append(cfg)
        if allow_split:
            s = split_for(geo, cfg, sms)
            if s > 1:
                out.append(dict(cfg, SPLIT_K=s))
    return out


def max_split(problem, geo, device_is_gpu=True) -> int:
    """Upper bound of SPLIT_K over the candidates (sizes the partial-sum workspace)."""
    if not device_is_gpu:
        return 2
    return max(split_for(geo, cfg, 132) for cfg in gpu_configs(problem, geo) + [dict(INTERPRETER_CONFIG)])


def launch_forward(problem, x, w, y, alpha, beta, spec, cfg, part=None, rows=None, taps=None):
    """Run conv_fwd_kernel (and splitk_finish when cfg splits) for y = epilogue(conv(x, w))."""
    if spec is None:  # the common case: the launch arguments are built once per problem and strides
        recipe = _recipes.get((problem, cfg), (x.stride(), w.stride(), y.stride(), beta == 0, rows is not None),
                              lambda: _recipe(problem, x, w, y, beta, None, cfg, rows is not None))
    else:
        recipe = _recipe(problem, x, w, y, beta, spec, cfg, rows is not None)
    grid, head, tail, consts, options, static, finish = recipe
    bias, z = (y, y) if spec is None else (spec.bias.reshape(-1) if spec.bias is not None else y,
                                            spec.z if spec.z is not None else y)
    split = consts["SPLIT_K"]
    alpha, beta = float(alpha), float(beta)
    launch(conv_fwd_kernel, grid, (x, w, y, part if split > 1 else y, y if rows is None else rows,
                                   y if taps is None else taps, bias, z) + head + (alpha, beta) + tail,
           consts, options, static)
    if finish is not None:
        fgrid, fhead, ftail, fconsts, foptions, fstatic = finish
        launch(splitk_finish, fgrid, (part, y, bias, z) + fhead + (alpha, beta) + ftail, fconsts, foptions, fstatic)


_recipes = IdentityMemo()


def _recipe(problem, x, w, y, beta, spec, cfg, precomp):
    """Everything but the tensors and alpha/beta: grid, scalar arguments, constexprs."""
    geo = geometry(problem)
    nd = problem.nd
    xs, ys = strides5(x, nd), strides5(y, nd)
    ws = strides5(w, nd)
    bias, bias_stride, z, zs, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, y, nd)
    int64 = needs_int64(x, y, z, w)
    M = geo.out_pixels
    flat = flat_reduction(geo)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    split = cfg["SPLIT_K"]
    total = cdiv(geo.taps * geo.cg, bk) if flat else geo.taps * cdiv(geo.cg, bk)
    per_split = cdiv(total, split)
    split = cdiv(total, per_split)
    grid = (cdiv(M, bm) * cdiv(geo.kg, bn), geo.groups, split)
    head = (M, geo.cg, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
            *xs, *ws, *ys, *zs, bias_stride)
    tail = (alpha2, coef, swish_beta, per_split)
    consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT_K=split, FLAT=flat, PRECOMP=precomp,
                  FLIP=problem.mode == 0, PREC=input_precision(problem), ACT=act, HAS_BIAS=has_bias,
                  HAS_Z=has_z, BETA_ZERO=beta == 0, INT64=int64)
    options = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    dtypes = (x.dtype, w.dtype, y.dtype, bias.dtype, z.dtype)
    static = ((head, tail, tuple(consts.items()), tuple(options.items()), dtypes), 8)
    finish = None
    if split > 1:
        fbm, fbn = (64, 64) if y.device.type == "cuda" else (16, 16)
        fhead = (M, geo.k, *geo.out, split, *ys, *zs, bias_stride)
        fconsts = dict(BLOCK_M=fbm, BLOCK_N=fbn, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z, BETA_ZERO=beta == 0,
                       INT64=int64)
        foptions = dict(num_warps=4)
        fstatic = ((fhead, (alpha2, coef, swish_beta), tuple(fconsts.items()), dtypes), 4)
        finish = ((cdiv(M, fbm), cdiv(geo.k, fbn)), fhead, (alpha2, coef, swish_beta), fconsts, foptions, fstatic)
    return grid, head, tail, consts, options, static, finish


TC_RATE = {2: 600e12, 4: 300e12}  # rough sustained dot rates (bytes per element -> flop/s)


def dot_rate(problem) -> float:
    """Rough sustained tl.dot rate (flop/s) for the problem's dtype and math type."""
    rate = TC_RATE.get(problem.dtype.itemsize, 300e12)
    if problem.dtype.itemsize == 4 and input_precision(problem) == "ieee":
        rate = 45e12
    elif problem.dtype.itemsize == 4 and input_precision(problem) == "tf32x3":
        rate /= 3  # three tf32 products per multiply (DEFAULT math for float32)
    return rate


def gemm_estimate(problem, efficiency=1.0, rate=None) -> float:
    """Seconds: the larger of the arithmetic and the memory time, on an H200-like GPU.
    rate: the dot rate in flop/s (default ``dot_rate``)."""
    rate = rate or dot_rate(problem)
    geo = geometry(problem)
    if geo.cg < FLAT_BELOW:
        rate /= 32  # the flattened (tap, channel) gather: conv1 (C = 3) measured 17 TFLOP/s on the H200
    if geo.kg < 16:  # tl.dot pads a group's columns to 16: depthwise wastes 15/16 of each tile
        rate *= geo.kg / 16
    byte = problem.dtype.itemsize
    moved = (problem.x.size + problem.y.size + problem.w.as_tensor().size) * byte
    return max(problem.flops / rate, moved / 3.5e12) / efficiency + 5e-6


def tma_forward_candidates(plan, problem, x, w, y, spec, device=None) -> list:
    """The forward TMA path's tuner list: conv_tma's configs (the conservative reference
    first), then on Hopper the Gluon kernel's (GLUON: see gluon_conv.forward_candidates)
    for the problems it takes. device: y's (tests: another)."""
    device = device or y.device
    out = conv_tma.candidates(plan, device, problem)
    if gluon_conv is not None:
        out = out + gluon_conv.forward_candidates(problem, x, w, y, spec, device)
    return out


def launch_tma_forward(plan, problem, x, w, y, alpha, beta, cfg, spec=None):
    """A forward TMA candidate's launch: a GLUON config by gluon_conv (or, where these
    tensors do not qualify or its host side fails, conv_tma's first config: the tuner's pick
    is shared by every layout of a problem), the others by conv_tma.launch_conv."""
    if cfg.get("GLUON"):
        if gluon_common.guarded_launch(f"forward config {gluon_conv.name(cfg)}", gluon_conv.launch_forward,
                                       problem, x, w, y, alpha, beta, cfg, spec):
            return
        cfg = conv_tma.candidates(plan, y.device, problem)[0]
    conv_tma.launch_conv(plan, problem, x, w, y, alpha, beta, cfg, spec=spec)


def tma_forward_key(problem, plan, spec):
    """The tuner's key of the forward TMA path."""
    return (problem_key(problem), spec is not None and spec.act_code, "fwd-tma", conv_tma.plan_kind(plan))


def run_tma_forward(tuner, plan, problem, x, w, y, alpha, beta, spec):
    """Tune (first call) and launch the forward TMA path for a plan: conv_tma's configs,
    then Gluon's."""
    key = tma_forward_key(problem, plan, spec)
    cfg = tuner.pick(key, lambda: tma_forward_candidates(plan, problem, x, w, y, spec),
                     lambda c, out: launch_tma_forward(plan, problem, x, w, out, 1.0, 0.0, c, spec),
                     y, y.device)
    launch_tma_forward(plan, problem, x, w, y, alpha, beta, cfg, spec)


class ImplicitGemmForward(TritonConvAlgorithm):
    """Channels-last problems with stride 1 (or a 1x1 filter) take conv_tma's kernel,
    whose input tiles are TMA boxes; the rest take conv_fwd_kernel. No workspace (as
    cuDNN's IMPLICIT_GEMM); IMPLICIT_PRECOMP_GEMM runs stride-2 first layers through
    conv_s2d's blocks, with this algorithm's ``run`` on the block problem."""
    direction = "fwd"
    enum = ConvFwdAlgo.IMPLICIT_GEMM
    tuner = Tuner()

    def estimate(self, problem):
        return gemm_estimate(problem)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        plan = conv_tma.forward_plan(problem, x, w, y, spec.z if spec is not None else None)
        if plan is not None:  # channels-last, stride 1 or 1x1: the input boxes come by TMA
            run_tma_forward(self.tuner, plan, problem, x, w, y, alpha, beta, spec)
            return
        cands = lambda: candidates(problem, geometry(problem), y.device, allow_split=False)
        key = (problem_key(problem), spec is not None and spec.act_code, "fwd-ig")
        cfg = self.tuner.pick(key, cands, lambda c, out: launch_forward(problem, x, w, out, 1.0, 0.0, spec, c),
                              y, y.device)
        launch_forward(problem, x, w, y, alpha, beta, spec, cfg)

    def replay(self, problem, tensors, workspace, alpha, beta):
        """The Gluon launch record of a plain call that ran on Hopper (see gluon_conv's
        launch records); a dry run's record (TritonConvAlgorithm.replay) for every other path."""
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        plan = conv_tma.forward_plan(problem, x, w, y)
        cfg = self.tuner.chosen(tma_forward_key(problem, plan, None)) if plan is not None else None
        kept = None
        if gluon_conv is not None and cfg and cfg.get("GLUON"):
            kept = gluon_conv.forward_record(problem, x, w, y, alpha, beta, cfg)
        if kept is None:
            return super().replay(problem, tensors, workspace, alpha, beta)
        return lambda tensors: kept()
