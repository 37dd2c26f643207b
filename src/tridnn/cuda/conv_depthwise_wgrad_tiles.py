"""Depthwise 3x3 backward filter for small images: pixel tiles whose offsets are reused
across a group of images, the next image's ten tiles loaded while this one's FMAs run.

dw[k, a, b] = sum over (n, o, q) of dy[n, k, o, q] * x[n, k // Kg, o*SH - PH + a*DH, q*SW - PW + b*DW].

The late MobileNetV2 layers (14x14 and 7x7 maps, 384-960 channels, batch 64) move only
12-38 MB, and every walker so far ran them at 1.3-1.8x cuDNN's time (docs/performance.md,
sessions 11-18): a row walk has a handful of rows per image, so a program's loads wait
one memory round trip per short step, and conv_depthwise_backward's FLAT pointer tiles
split every pixel index into (n, o, q) with three divisions a step.

Here a program owns (a channel block, a slice of the images, a slice of the image's
pixels). For each pixel tile [TP pixels of the flattened OH x OW map, BC channels] the
(o, q) split, the tap offsets and the border masks are computed once; the loop over the
slice's images then adds only the image's offset, and loads image n + 1's dy tile and
nine x tiles (overlapping: L1) before image n's 9 FMAs, so two images' loads are in
flight per program. Nine float32 [TP, BC] accumulators are summed over pixels once, at
the end, into the program's partial slot (layout [slots, K, 9, 1], as the other
walkers; conv_bwd_filter_implicit_gemm's ``wgrad_finish`` adds the slots in a fixed
order; ATOMIC, for ALGO_0, adds into slot 0).

Any strides, padding, dilation and channel multiplier (Kg output channels per input
channel), 2-D 3x3 filters; 64-bit offsets (INT64) when a tensor needs them.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import cdiv, launch, next_pow2, wide
from .conv_depthwise_tma import _wsum9, _zeros9, window_masks
from .conv_depthwise_wgrad import _fma9
from .geometry import geometry, needs_int64, strides5


# -- kernel ------------------------------------------------------------------------
@triton.jit
def _tap(ptr, offs, ok, chan, mask_k):
    """A raw [TP, BC] tile: pixel offsets ``offs`` masked by ``ok``, channels at ``chan``."""
    return tl.load(ptr + offs[:, None] + chan[None, :], mask=ok[:, None] & mask_k[None, :], other=0.0)


@triton.jit
def _image_tiles(x_ptr, dy_ptr, xb, db, live, d_pix, ok_p, x_pix, r0, r1, r2, k0, k1, k2, sh, sw, chan_x, chan_d,
                 mask_k):
    """One image's dy tile and the nine x tiles it meets (raw), at image offsets xb, db;
    all masked off when not ``live`` (past the slice's images: no traffic)."""
    g = _tap(dy_ptr + db, d_pix, ok_p & live, chan_d, mask_k)
    row0 = x_ptr + xb
    row1 = row0 + sh
    row2 = row1 + sh
    m0 = r0 & live
    m1 = r1 & live
    m2 = r2 & live
    return (g,
            _tap(row0, x_pix, m0 & k0, chan_x, mask_k), _tap(row0 + sw, x_pix, m0 & k1, chan_x, mask_k),
            _tap(row0 + 2 * sw, x_pix, m0 & k2, chan_x, mask_k),
            _tap(row1, x_pix, m1 & k0, chan_x, mask_k), _tap(row1 + sw, x_pix, m1 & k1, chan_x, mask_k),
            _tap(row1 + 2 * sw, x_pix, m1 & k2, chan_x, mask_k),
            _tap(row2, x_pix, m2 & k0, chan_x, mask_k), _tap(row2 + sw, x_pix, m2 & k1, chan_x, mask_k),
            _tap(row2 + 2 * sw, x_pix, m2 & k2, chan_x, mask_k))


@triton.jit(do_not_specialize=['N', 'IH', 'IW', 'OH', 'OW', 'SH', 'SW', 'PH', 'PW', 'DH', 'DW', 'IPS', 'PPS'])
def dw3_wgrad_tiles_kernel(
        x_ptr, dy_ptr, part_ptr,
        # sizes: images, output channels and output channels per input channel, H x W of x and dy
        N, K, Kg, IH, IW, OH, OW,
        # stride, padding and dilation (rows, columns)
        SH, SW, PH, PW, DH, DW,
        # images per image slice, pixels (of the flattened OH x OW map) per pixel slice
        IPS, PPS,
        # element strides (n, c, h, w) of x and dy
        xs_n, xs_c, xs_h, xs_w, dys_n, dys_k, dys_h, dys_w,
        TP: tl.constexpr, BC: tl.constexpr, ATOMIC: tl.constexpr, INT64: tl.constexpr):
    """part[slot, k, 3a + b] = sum over the program's images and pixels of
    dy[n, k, o, q] * x[n, k // Kg, o*SH - PH + a*DH, q*SW - PW + b*DW];
    slot = image slice x pixel slices + pixel slice (ATOMIC: added into slot 0)."""
    # -- map the program to a channel block, an image slice and a pixel slice
    offs_k = tl.program_id(0) * BC + tl.arange(0, BC)
    mask_k = offs_k < K
    n0 = tl.program_id(1) * IPS
    n1 = tl.minimum(n0 + IPS, N)
    p_lo = tl.program_id(2) * PPS
    p_hi = tl.minimum(p_lo + PPS, OH * OW)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
        dys_n, dys_k, dys_h, dys_w = wide((dys_n, dys_k, dys_h, dys_w))
    chan_x = (offs_k // Kg) * xs_c
    chan_d = offs_k * dys_k
    sh = DH * xs_h  # one filter row / column further in x
    sw = DW * xs_w

    a00, a01, a02, a10, a11, a12, a20, a21, a22 = _zeros9(TP, BC)
    for p0 in range(p_lo, p_hi, TP):
        # -- the pixel tile's (o, q), offsets and border masks, once for all the images
        p = p0 + tl.arange(0, TP)
        ok_p = p < p_hi
        o = p // OW
        q = p - o * OW
        ih, iw, r0, r1, r2, k0, k1, k2 = window_masks(o, q, ok_p, IH, IW, SH, SW, PH, PW, DH, DW)
        x_pix = ih * xs_h + iw * xs_w
        d_pix = o * dys_h + q * dys_w

        # -- the slice's images: image n + 1's tiles in flight during image n's FMAs
        g, x00, x01, x02, x10, x11, x12, x20, x21, x22 = _image_tiles(
            x_ptr, dy_ptr, n0 * xs_n, n0 * dys_n, n0 < n1, d_pix, ok_p, x_pix, r0, r1, r2, k0, k1, k2, sh, sw,
            chan_x, chan_d, mask_k)
        for n in range(n0, n1):
            cg, c00, c01, c02, c10, c11, c12, c20, c21, c22 = g, x00, x01, x02, x10, x11, x12, x20, x21, x22
            g, x00, x01, x02, x10, x11, x12, x20, x21, x22 = _image_tiles(
                x_ptr, dy_ptr, (n + 1) * xs_n, (n + 1) * dys_n, n + 1 < n1, d_pix, ok_p, x_pix, r0, r1, r2,
                k0, k1, k2, sh, sw, chan_x, chan_d, mask_k)
            f = cg.to(tl.float32)
            a00, a01, a02, a10, a11, a12, a20, a21, a22 = _fma9(
                a00, a01, a02, a10, a11, a12, a20, a21, a22, f, f, f,
                c00.to(tl.float32), c01.to(tl.float32), c02.to(tl.float32), c10.to(tl.float32),
                c11.to(tl.float32), c12.to(tl.float32), c20.to(tl.float32), c21.to(tl.float32),
                c22.to(tl.float32))

    # -- the nine accumulators summed over the tile's pixels into this program's slot
    slot = 0
    if not ATOMIC:
        slot = tl.program_id(1) * tl.num_programs(2) + tl.program_id(2)
    _wsum9(part_ptr, a00, a01, a02, a10, a11, a12, a20, a21, a22, slot, K, offs_k, mask_k, ATOMIC)


# -- host side ---------------------------------------------------------------------
def applies(problem) -> bool:
    """A 2-D (or 1-row) 3x3 depthwise filter (one input channel per group), any stride,
    padding, dilation and channel multiplier."""
    geo = geometry(problem)
    return geo.cg == 1 and geo.ker == (1, 3, 3) and geo.inp[0] == 1 and geo.out[0] == 1 and problem.nd <= 2


# (TP pixels, BC channels, warps, programs per SM: one wave at the compiled kernel's
# registers). sm_90 bf16 compile probe (K, strides and pointers multiples of 16, channel
# stride 1, as Triton specializes packed NHWC): 4 elements a thread -> 64-bit loads,
# 108-110 registers; 8 -> 128-bit loads, 190; 16 spill (119 local stores), so none are
# offered. The tiles' rows are pixels of the flattened map: a 7x7 map fills two 32-pixel
# tiles to 77%, a 14x14 one seven to 88%.
GPU_CONFIGS = ((32, 16, 4, 4), (16, 32, 4, 4), (16, 16, 2, 8), (32, 16, 2, 5), (64, 16, 4, 2))


def configs(device, k):
    """Launch configs; under the interpreter two tiny ones."""
    if device.type != "cuda":
        return [dict(KIND="tiles", TP=8, BC=4, num_warps=1, PER_SM=2), dict(KIND="tiles", TP=4, BC=8, num_warps=1,
                                                                           PER_SM=4)]
    return [dict(KIND="tiles", TP=tp, BC=bc, num_warps=warps, PER_SM=per_sm)
            for tp, bc, warps, per_sm in GPU_CONFIGS if bc <= max(16, next_pow2(k))]


def plan(problem, cfg, cap, sms):
    """(images a slice, image slices, pixels a slice, pixel slices): image slices first,
    then pixel slices (whole tiles), until channel blocks x slices reach cfg["PER_SM"] x
    SMs programs, at most ``cap`` slots (image slices x pixel slices)."""
    geo = geometry(problem)
    n, pixels = geo.n, geo.out[1] * geo.out[2]
    want = max(1, cfg["PER_SM"] * sms // cdiv(geo.k, cfg["BC"]))
    img = max(1, min(n, want, cap))
    ips = cdiv(n, img)
    img = cdiv(n, ips)
    tiles = cdiv(pixels, cfg["TP"])
    pix = max(1, min(tiles, want // img, cap // img))
    pps = cdiv(tiles, pix) * cfg["TP"]
    pix = cdiv(pixels, pps)
    return ips, img, pps, pix


def candidates(problem, device, cap, sms):
    """configs() with their slot counts ("slices")."""
    if not applies(problem):
        return []
    out = []
    for cfg in configs(device, problem.k):
        _, img, _, pix = plan(problem, cfg, cap, sms)
        out.append(dict(cfg, slices=img * pix))
    return out


def launch_tiles(problem, x, dy, part, atomic, cfg, cap, sms):
    """dw3_wgrad_tiles_kernel into part [slots, K, 9, 1] (ATOMIC: added into slot 0, zeroed
    by the caller); returns the slots used."""
    geo = geometry(problem)
    nd = problem.nd
    ips, img, pps, pix = plan(problem, cfg, 65535 if atomic else cap, sms)
    xs, ds = strides5(x, nd), strides5(dy, nd)
    launch(dw3_wgrad_tiles_kernel, (cdiv(geo.k, cfg["BC"]), img, pix), (
        x, dy, part, geo.n, geo.k, geo.kg, *geo.inp[1:], *geo.out[1:], *geo.stride[1:], *geo.pad[1:], *geo.dil[1:],
        ips, pps, xs[0], xs[1], xs[3], xs[4], ds[0], ds[1], ds[3], ds[4]),
        dict(TP=cfg["TP"], BC=cfg["BC"], ATOMIC=atomic, INT64=needs_int64(x, dy)), dict(num_warps=cfg["num_warps"]))
    return 1 if atomic else img * pix
