"""Strided forward convolution in Gluon: gluon_conv's kernel with a phase-view loader (Hopper only).

Why: gluon_conv handles stride 1 only, and ResNet-50's stride-2 layers (res3/4/5 3x3 s2, the
1x1 s2 downsamples) were the worst forward layers left to conv_tma (1.2-1.7x cuDNN). Here
(H200, 2026-11-30, sweep_gluon_conv --strided) they run at 0.89-1.04 of cuDNN; gluon_conv's
forward_candidates offers these picks to IMPLICIT_GEMM's tuner for stride > 1.

How (conv_tma's "phase view"): NHWC x is viewed as the 5-D tensor [N, H/sh, sh, W/sw, sw*C]
(H, W multiples of the stride), so input pixel (sh*i + b, sw*j + a) of image n sits at
[n, i, b, j, a*C + c]. Output pixel (oh, ow) reads, for tap (kh, kw), input row
sh*oh + kh*dh - ph = sh*(oh + ah) + bh with (ah, bh) = divmod(kh*dh - ph, sh) (floor), and
likewise for columns: the box of a whole output tile is then one 5-D TMA box
[NB, BH, 1, BW, BLOCK_K] at origin [n0, oh0 + ah, bh, ow0 + aw, bw*C + c0]; TMA zero-fills
coordinates out of range (negative ones too), which gives the padding. An images-inner
config (gluon_conv's PICKS_INNER*) views the same memory as [H/sh, sh, W/sw, N, sw*C] (x)
and [OH, OW, N, K] (y): its box is NB images at one or two pixels.

Only the loader differs from gluon_conv: it walks (ah, bh, aw, bw*C) per tap incrementally
from host-computed starts and steps (no divisions on the issue path). The consumer
partitions, the epilogue, the tile order, the register split and the host helpers are
gluon_conv's, imported; the consumer reshapes the 5-D box [NB, BH, 1, BW, BLOCK_K] to its
[BLOCK_M, BLOCK_K] operand exactly as it does gluon_conv's 4-D one. float32 under TENSOR_OP
math runs gluon_conv's TF32 variants of the same picks (TF32_CONFIGS; tf32 products).
"""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from .gluon_common import compile_sm90 as _compile_sm90, descriptor
from .gluon_common import desc_sig as _desc_sig, phase_view_order, pixel_order, placeholder
from . import gluon_conv
from .gluon_conv import (PICKS_INNER, PICKS_INNER_SMALL, PICKS_LARGE, PICKS_MEDIUM, PICKS_SMALL, TF32_OF,
                         _channels_last_ok, _consumer, _nhwc, _tile_coords, check_dtypes, checked_epilogue, config,
                         constexprs, filter_matrix, flops, name, shared_bytes, shared_state, sig_dtype, tile_grid,
                         with_tf32_extra)


# --------------------------------------------------------------------------------------
# Device code: the loader (the consumers are gluon_conv's)
# --------------------------------------------------------------------------------------

@gluon.jit
def _loader_strided(x_desc, w_desc, a_bufs, b_bufs, ready, empty,
                    # channels, filter width
                    C, KW,
                    # tap walk: first tap's (row shift, row phase, column shift, column phase * C);
                    # per-tap steps (dilation divmod stride; the column phase step times C);
                    # wrap limits (row stride, column stride * C)
                    AH0, BH0, AW0, CB0, DAH, DBH, DAW, DCB, SH, SWC,
                    # tile list
                    NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                    NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr,
                    BLOCK_K: gl.constexpr, STAGES: gl.constexpr, IMAGES_INNER: gl.constexpr):
    """Producer (one warp): per k-step, wait for a free slot, TMA the phase-view x box of
    the tap and the filter box into it. A phase steps by DBH (DCB) per tap and wraps once
    past the stride into a shift of one more row (column): DBH < SH, DCB < SWC.
    IMAGES_INNER: the view's dimensions are [H/sh, sh, W/sw, N, sw*C] (phase_view_order)."""
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    it = 0
    for t in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        n0, oh0, ow0, k0 = _tile_coords(t, TILES_H, TILES_W, N_BLOCKS, NB, BH, BW, BLOCK_N)
        ih = oh0 + AH0
        ph = BH0
        iw0 = ow0 + AW0
        iw = iw0
        cb = CB0
        c0 = 0
        kw = 0
        for kk in range(K_STEPS):
            s = it % STAGES
            phase = (it // STAGES) & 1
            mbarrier.wait(empty.index(s), phase ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            if IMAGES_INNER:
                tma.async_copy_global_to_shared(x_desc, [ih, ph, iw, n0, cb + c0], bar, a_bufs.index(s))
            else:
                tma.async_copy_global_to_shared(x_desc, [n0, ih, ph, iw, cb + c0], bar, a_bufs.index(s))
            tma.async_copy_global_to_shared(w_desc, [k0, kk * BLOCK_K], bar, b_bufs.index(s))
            it += 1
            # next channel block; after the last, the next tap of the row
            c0 += BLOCK_K
            next_tap = c0 == C
            c0 = gl.where(next_tap, 0, c0)
            kw = gl.where(next_tap, kw + 1, kw)
            cb = gl.where(next_tap, cb + DCB, cb)
            iw = gl.where(next_tap, iw + DAW, iw)
            wrap_w = cb >= SWC
            cb = gl.where(wrap_w, cb - SWC, cb)
            iw = gl.where(wrap_w, iw + 1, iw)
            # after the row's last tap, the first tap of the next filter row
            next_row = kw == KW
            kw = gl.where(next_row, 0, kw)
            iw = gl.where(next_row, iw0, iw)
            cb = gl.where(next_row, CB0, cb)
            ph = gl.where(next_row, ph + DBH, ph)
            ih = gl.where(next_row, ih + DAH, ih)
            wrap_h = ph >= SH
            ph = gl.where(wrap_h, ph - SH, ph)
            ih = gl.where(wrap_h, ih + 1, ih)


_RUNTIME_INTS = ["C_OUT", "C", "KW", "AH0", "BH0", "AW0", "CB0", "DAH", "DBH", "DAW", "DCB", "SH", "SWC",
                 "NUM_TILES", "TILES_H", "TILES_W", "N_BLOCKS", "K_STEPS"]


@gluon.jit(do_not_specialize=_RUNTIME_INTS + ["bias_ptr"])
def gluon_conv_strided_kernel(
    # TMA descriptors: x's phase view [N, H/sh, sh, W/sw, sw*C] box [NB, BH, 1, BW, BLOCK_K];
    # filter [K, KH*KW*C] box [BLOCK_N, BLOCK_K]; y [N, OH, OW, K] box [NB, BH, BW, BLOCK_N]
    # (IMAGES_INNER: x and y with the images next to the channels, gluon_common's
    # phase_view_order and pixel_order)
    x_desc, w_desc, y_desc,
    alpha, beta,
    # fused epilogue (gluon_conv's): residual z, bias, their scalars
    z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
    # geometry and the tap walk (_loader_strided)
    C, KW, AH0, BH0, AW0, CB0, DAH, DBH, DAW, DCB, SH, SWC,
    # tile list
    NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
    NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr, PINGPONG: gl.constexpr, LOADER_REGS: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr, HAS_BETA: gl.constexpr = False,
    ACT: gl.constexpr = -1, HAS_BIAS: gl.constexpr = False, HAS_Z: gl.constexpr = False, FMA: gl.constexpr = False,
    IMAGES_INNER: gl.constexpr = False,
):
    """gluon_conv_fwd_kernel with the phase-view loader (see the module docstring)."""
    CONSUMERS: gl.constexpr = 2 if PINGPONG else 1
    a_bufs, b_bufs, c_bufs, ready, empty, turns, ybar = shared_state(x_desc, w_desc, y_desc, STAGES, CONSUMERS)

    if PINGPONG:
        gl.warp_specialize([
            (_consumer, (y_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta,
                         z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
                         NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                         NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 0, CONSUMERS, num_warps, HAS_BETA,
                         ACT, HAS_BIAS, HAS_Z, FMA, IMAGES_INNER)),
            (_loader_strided, (x_desc, w_desc, a_bufs, b_bufs, ready, empty,
                               C, KW, AH0, BH0, AW0, CB0, DAH, DBH, DAW, DCB, SH, SWC,
                               NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                               NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, IMAGES_INNER)),
            (_consumer, (y_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta,
                         z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
                         NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                         NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 1, CONSUMERS, num_warps, HAS_BETA,
                         ACT, HAS_BIAS, HAS_Z, FMA, IMAGES_INNER)),
        ], [1, num_warps], [LOADER_REGS, CONSUMER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (y_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta,
                         z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
                         NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                         NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 0, CONSUMERS, num_warps, HAS_BETA,
                         ACT, HAS_BIAS, HAS_Z, FMA, IMAGES_INNER)),
            (_loader_strided, (x_desc, w_desc, a_bufs, b_bufs, ready, empty,
                               C, KW, AH0, BH0, AW0, CB0, DAH, DBH, DAW, DCB, SH, SWC,
                               NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                               NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, IMAGES_INNER)),
        ], [1], [LOADER_REGS])


# --------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------

# gluon_conv's picks by output width (the same box shapes): res3 3x3 s2 and res3_ds (28x28
# out), res4 (14x14), res5 (7x7); K >= 128 everywhere there. Its images-inner picks too
# (session 29): NB images at one or two pixels fill the tiles those 28-, 14- and 7-wide
# outputs leave 1/8 empty, where NB divides the batch (gluon_conv.forward_candidates; on
# since session 30, gluon_common.IMAGES_INNER_STRIDED).
PICKS = {"large": PICKS_LARGE, "medium": PICKS_MEDIUM, "small": PICKS_SMALL, "inner": PICKS_INNER,
         "inner_small": PICKS_INNER_SMALL}
CONFIGS = []
for _p in (PICKS_LARGE, PICKS_MEDIUM, PICKS_SMALL, PICKS_INNER, PICKS_INNER_SMALL):
    for _c in _p:
        if name(_c) not in map(name, CONFIGS):
            CONFIGS.append(_c)


# float32 under TENSOR_OP math: gluon_conv's TF32 variants of the same picks (tf32_config)
TF32_CONFIGS = [TF32_OF[name(c)] for c in CONFIGS]


FMA_CONFIGS = [c for c in gluon_conv.FMA_CONFIGS if not (c["NB"] == 1 and c["BH"] == 1)]  # (no flat view here)


def picks(out_w: int, k_out: int, tf32: bool = False, fma: bool = False, n: int | None = None) -> list:
    """The configs to try for an output of width out_w with k_out channels (gluon_conv.picks'
    non-flat choice; no BLOCK_N wider than the channels need); tf32: their float32 variants,
    with gluon_conv.TF32_EXTRA's; fma: gluon_conv.fma_picks' (float32 under FMA math).
    n: the batch; gluon_conv.inner_picks' images-inner configs are added for it, as
    gluon_conv.picks does at stride 1."""
    if fma:
        return gluon_conv.fma_picks(out_w, k_out, False)
    base = with_tf32_extra(PICKS_LARGE if out_w >= 28 else PICKS_MEDIUM if out_w >= 14 else PICKS_SMALL, tf32)
    base = base + gluon_conv.inner_picks(out_w, n)
    cap = max(64, triton.next_power_of_2(k_out))
    return [TF32_OF[name(c)] if tf32 else c for c in base if c["BLOCK_N"] <= cap]


def why_not(x, w, padding, dilation, stride) -> str | None:
    """None when this kernel can compute the problem, else the reason."""
    import torch
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32) or w.dtype != x.dtype:
        return "bfloat16/float16 (or float32 with a TF32 or FMA config) only"
    reason = phase_view_why_not(x, stride)
    if reason:
        return reason
    n, c, h, wd = x.shape
    if c % 64:
        return "channels must be a multiple of 64"
    if not _channels_last_ok(x):
        return "x must be channels-last with 16-byte aligned strides"
    if w.shape[0] % 8:
        return "output channels must be a multiple of 8 (TMA row alignment)"
    if w.shape[1] != c:
        return "groups are not supported"
    return None


def phase_view_why_not(t, stride) -> str | None:
    """None when ``phase_view`` can view the channels-last [N, C, H, W] tensor t: 2-D strides
    >= 1 dividing H and W, and (for a column stride > 1) t's pixels dense within a row, so
    sw neighbouring pixels are one run of sw*C values. gluon_conv's strided forward reads x
    through it, gluon_dgrad_fused writes dx through it."""
    if len(stride) != 2 or min(stride) < 1:
        return "2-D strides >= 1"
    n, c, h, wd = t.shape
    if h % stride[0] or wd % stride[1]:
        return "H and W must be multiples of the stride (the phase view)"
    if stride[1] > 1 and wd > 1 and t.stride(3) != c:
        return "pixels must be dense within a row (the phase view)"
    return None


def phase_view(x, stride):
    """(shape, strides) of channels-last x [N, C, H, W] viewed as [N, H/sh, sh, W/sw, sw*C]."""
    (n, h, wd, c), (s0, sh_, sw_, _) = _nhwc(x)
    sh, sw = stride
    return (n, h // sh, sh, wd // sw, sw * c), (s0, sh * sh_, sh_, sw * sw_, 1)


def out_size(h, wd, kh, kw, padding, dilation, stride):
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return oh, ow


def walk_args(c, padding, dilation, stride):
    """The loader's tap walk (AH0, BH0, AW0, CB0, DAH, DBH, DAW, DCB, SH, SWC)."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    ah0, bh0 = divmod(-ph, sh)
    aw0, bw0 = divmod(-pw, sw)
    dah, dbh = divmod(dh, sh)
    daw, dbw = divmod(dw, sw)
    return ah0, bh0, aw0, bw0 * c, dah, dbh, daw, dbw * c, sh, sw * c


def walk_taps(c, kh, kw, padding, dilation, stride):
    """[(ah, bh, aw, bw*C)] per tap in the loader's (kh, kw) order, by the loader's own
    incremental arithmetic (a per-tap mirror of _loader_strided's channel-block walk)."""
    ah0, bh0, aw0, cb0, dah, dbh, daw, dcb, sh, swc = walk_args(c, padding, dilation, stride)
    out, ih, ph = [], ah0, bh0
    for _ in range(kh):
        iw, cb = aw0, cb0
        for _ in range(kw):
            out.append((ih, ph, iw, cb))
            cb, iw = cb + dcb, iw + daw
            if cb >= swc:
                cb, iw = cb - swc, iw + 1
        ph, ih = ph + dbh, ih + dah
        if ph >= sh:
            ph, ih = ph - sh, ih + 1
    return out


def prepare(x, w, stride=(2, 2), padding=(1, 1), dilation=(1, 1), cfg=None, y=None, alpha=1.0, sms=None,
            beta=0.0, epilogue=None, w_mat=None):
    """Descriptors and launch arguments: (grid, args, meta, y), as gluon_conv.prepare (x
    channels-last [N, C, H, W]; w [K, C, KH, KW], read through w_mat, its [K, KH*KW*C]
    matrix, when given; epilogue: gluon_conv.fused_args' tuple)."""
    import torch
    cfg = dict(cfg or CONFIGS[0])
    stride, padding, dilation = tuple(stride), tuple(padding), tuple(dilation)
    reason = why_not(x, w, padding, dilation, stride)
    if reason:
        raise ValueError(reason)
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    if y is None:
        oh, ow = out_size(h, wd, kh, kw, padding, dilation, stride)
        y = torch.empty((n, k, oh, ow), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    elif not _channels_last_ok(y):
        raise ValueError("y must be channels-last with 16-byte aligned strides")
    NB, BH, BW, BN, BK = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    if c % BK:
        raise ValueError(f"channels ({c}) must be a multiple of the config's BLOCK_K ({BK})")
    if w_mat is None:
        w_mat = filter_matrix(w)
    check_dtypes(cfg, x, w_mat, y)
    if tuple(w_mat.shape) != (k, kh * kw * c) or w_mat.stride(1) != 1:
        raise ValueError("the filter matrix must be [K, KH*KW*C] with unit column stride")
    bias, z, alpha2, act, coef, swish_beta = checked_epilogue(epilogue, y, k)
    xshape, xs = (phase_view_order(cfg, d) for d in phase_view(x, stride))
    (_, oh, ow, _), ys = _nhwc(y)
    yshape, ys, y_box = (pixel_order(cfg, d) for d in ((n, oh, ow, k), ys, [NB, BH, BW, BN]))
    x_desc = descriptor(x, xshape, xs, list(phase_view_order(cfg, [NB, BH, 1, BW, BK])))
    w_desc = descriptor(w_mat, w_mat.shape, w_mat.stride(), [BN, BK])
    y_desc = descriptor(y, yshape, ys, y_box)
    z_desc = y_desc if z is None else descriptor(z, yshape, pixel_order(cfg, _nhwc(z)[1]), y_box)
    bias_arg = placeholder(y.device, y.dtype) if bias is None else bias  # (never read when absent)
    grid, tiles = tile_grid(cfg, n, oh, ow, k, kh * kw * (c // BK), x.device, sms)
    args = (x_desc, w_desc, y_desc, float(alpha), float(beta), z_desc, bias_arg, float(alpha2), float(coef),
            float(swish_beta), k, c, kw, *walk_args(c, padding, dilation, stride), *tiles)
    consts, cap = constexprs(cfg, beta != 0, act, bias is not None, z is not None)
    return grid, args, dict(consts, maxnreg=cap), y


def launch(grid, args, meta, y=None):
    """gluon_conv_strided_kernel[grid](*args, **meta), through gluon_conv.launch's direct
    launcher after the first call."""
    return gluon_conv.launch(grid, args, meta, y, kernel=gluon_conv_strided_kernel)


def conv2d(x, w, stride=(2, 2), padding=(1, 1), dilation=(1, 1), cfg=None, alpha=1.0, sms=None, y=None, beta=0.0,
           epilogue=None):
    """y = alpha * conv2d(x, w, stride) (+ beta * y, gluon_conv's fused epilogue) for
    channels-last bf16/fp16 x (float32 with a TF32 config) on a Hopper GPU. sms: pretend the GPU has that many SMs."""
    grid, args, meta, y = prepare(x, w, stride, padding, dilation, cfg, y=y, alpha=alpha, sms=sms, beta=beta,
                                  epilogue=epilogue)
    return launch(grid, args, meta, y)


def compile_sm90(cfg, has_beta=False, act=-1, has_bias=False, has_z=False, bias_dtype="fp32"):
    """Compile the kernel for sm_90 without a GPU; returns the CompiledKernel (bfloat16 data,
    float32 for a TF32 config)."""
    NB, BH, BW, BN, BK = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    dt = sig_dtype(cfg)
    y_sig = _desc_sig(dt, list(pixel_order(cfg, [NB, BH, BW, BN])))
    types_ = {
        "x_desc": _desc_sig(dt, list(phase_view_order(cfg, [NB, BH, 1, BW, BK]))), "w_desc": _desc_sig(dt, [BN, BK]),
        "y_desc": y_sig, "z_desc": y_sig, "bias_ptr": "*" + bias_dtype,
        "alpha": "fp32", "beta": "fp32", "alpha2": "fp32", "coef": "fp32", "swish_beta": "fp32",
    }
    consts, cap = constexprs(cfg, has_beta, act, has_bias, has_z)
    return _compile_sm90(gluon_conv_strided_kernel, types_, consts, cfg["num_warps"], maxnreg=cap)


__all__ = ["gluon_conv_strided_kernel", "conv2d", "prepare", "launch", "compile_sm90", "CONFIGS", "TF32_CONFIGS",
           "PICKS", "picks",
           "why_not", "phase_view", "walk_args", "walk_taps", "out_size", "config", "name",
           "shared_bytes", "flops", "filter_matrix"]
