"""Pooling forward and backward in Triton: max, average (with and without the padding
in the count), adaptive max and average; 1-D, 2-D and 3-D (1-D and 2-D run as 3-D
with unit dims).

Forward: each program owns a [BLOCK_P output positions, BLOCK_C channels] tile laid
out along the contiguous axis (channels for NHWC, positions for NCHW) and loops over
the window taps.

Backward is a gather, so it is deterministic and needs no atomics or zeroing pass:
each program owns a tile of *input* positions and sums over the few outputs whose
windows cover them. Max pooling first stores, per output, which tap holds the
window's first maximum (one byte per output for windows up to 255 taps), so the
gather only compares tap numbers. Regular and adaptive windows share the kernels
through two small window functions."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..errors import BadParamError
from .layer_utils import blend_args, channels_last, check_dtypes, compute_dtype, needs_int64

MAX, AVG_INCLUDE, AVG_EXCLUDE, MAX_DETERMINISTIC = 0, 1, 2, 3
TILE = 2048


@triton.jit
def _floor_div(a, b):
    """Floor division for possibly negative a (b > 0); Triton's // truncates."""
    q = a // b
    return tl.where((a % b != 0) & (a < 0), q - 1, q)


@triton.jit
def _window(o, size_in, size_out, stride, pad, window, ADAPTIVE: tl.constexpr):
    """[start, end) of output o's window along one dim, before clipping to the input."""
    if ADAPTIVE:
        start = (o * size_in) // size_out
        end = ((o + 1) * size_in + size_out - 1) // size_out
    else:
        start = o * stride - pad
        end = start + window
    return start, end


@triton.jit
def _first_cover(i, size_in, size_out, stride, pad, window, ADAPTIVE: tl.constexpr):
    """The smallest output index whose window may cover input i along one dim."""
    if ADAPTIVE:
        first = (i * size_out) // size_in
    else:
        first = _floor_div(i + pad - window, stride) + 1
    return first


@triton.jit
def _unravel3(p, D1, D2):
    d2 = p % D2
    p = p // D2
    return p // D1, p % D1, d2


@triton.jit
def _tile_ids(N, C, P, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, BIG: tl.constexpr):
    """(n, positions, channels) of this program's tile."""
    pid = tl.program_id(0)
    tiles_c = tl.cdiv(C, BLOCK_C)
    tiles_p = tl.cdiv(P, BLOCK_P)
    c_blk = pid % tiles_c
    rest = pid // tiles_c
    p_blk = rest % tiles_p
    n = rest // tiles_p
    if BIG:
        n = n.to(tl.int64)
    p = p_blk * BLOCK_P + tl.arange(0, BLOCK_P)
    c = c_blk * BLOCK_C + tl.arange(0, BLOCK_C)
    return n, p, c


@triton.jit
def _pool_forward_kernel(x_ptr, y_ptr, arg_ptr, N, C, ID, IH, IW, OD, OH, OW,
                         xsn, xsc, xsd, xsh, xsw, ysn, ysc, ysd, ysh, ysw,
                         KD, KH, KW, SD, SH, SW, PD, PH, PW, alpha, beta,
                         MODE: tl.constexpr, ADAPTIVE: tl.constexpr, PROPAGATE_NAN: tl.constexpr,
                         STORE_ARG: tl.constexpr, STORE_Y: tl.constexpr, HAS_BETA: tl.constexpr,
                         BIG: tl.constexpr, COMPUTE: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """y = alpha * pool(x) + beta * y; with STORE_ARG, the first maximum's tap per output
    (row-major within the KD x KH x KW box starting at the window's start)."""
    P = OD * OH * OW
    n, p, c = _tile_ids(N, C, P, BLOCK_P, BLOCK_C, BIG)
    p_mask = p < P
    c_mask = c < C
    od, oh, ow = _unravel3(p, OH, OW)
    d0, d1 = _window(od, ID, OD, SD, PD, KD, ADAPTIVE)
    h0, h1 = _window(oh, IH, OH, SH, PH, KH, ADAPTIVE)
    w0, w1 = _window(ow, IW, OW, SW, PW, KW, ADAPTIVE)
    base = n * xsn + c[None, :] * xsc
    if MODE == 0 or MODE == 3:
        acc = tl.full([BLOCK_P, BLOCK_C], float("-inf"), COMPUTE)
        arg = tl.full([BLOCK_P, BLOCK_C], -1, tl.int32)
    else:
        acc = tl.zeros([BLOCK_P, BLOCK_C], COMPUTE)
    for kd in range(KD):
        di = d0 + kd
        d_ok = (di >= 0) & (di < ID) & (di < d1)
        for kh in range(KH):
            hi = h0 + kh
            dh_ok = d_ok & (hi >= 0) & (hi < IH) & (hi < h1)
            for kw in range(KW):
                wi = w0 + kw
                ok = dh_ok & (wi >= 0) & (wi < IW) & (wi < w1) & p_mask
                mask = ok[:, None] & c_mask[None, :]
                offs = base + (di * xsd + hi * xsh + wi * xsw)[:, None]
                v = tl.load(x_ptr + offs, mask=mask, other=0.0).to(COMPUTE)
                if MODE == 0 or MODE == 3:
                    better = (v > acc) | ((arg < 0) & (v == acc))
                    if PROPAGATE_NAN:
                        better = better | ((v != v) & (acc == acc))
                    better = better & mask
                    acc = tl.where(better, v, acc)
                    arg = tl.where(better, (kd * KH + kh) * KW + kw, arg)
                else:
                    acc += v
    if STORE_ARG:
        a_off = ((n * C + c[None, :]) * P + p[:, None])
        tl.store(arg_ptr + a_off, arg.to(arg_ptr.dtype.element_ty), mask=p_mask[:, None] & c_mask[None, :])
    if STORE_Y:
        if MODE == 1:
            acc = acc / (KD * KH * KW)
        elif MODE == 2:
            count = ((tl.minimum(d1, ID) - tl.maximum(d0, 0)) * (tl.minimum(h1, IH) - tl.maximum(h0, 0))
                     * (tl.minimum(w1, IW) - tl.maximum(w0, 0)))
            acc = acc / count.to(COMPUTE)[:, None]
        y_off = n * ysn + c[None, :] * ysc + (od * ysd + oh * ysh + ow * ysw)[:, None]
        out_mask = p_mask[:, None] & c_mask[None, :]
        out = acc * alpha
        if HAS_BETA:
            out += tl.load(y_ptr + y_off, mask=out_mask, other=0.0).to(COMPUTE) * beta
        tl.store(y_ptr + y_off, out.to(y_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _pool_backward_kernel(dy_ptr, arg_ptr, dx_ptr, N, C, ID, IH, IW, OD, OH, OW,
                          gsn, gsc, gsd, gsh, gsw, dsn, dsc, dsd, dsh, dsw,
                          KD, KH, KW, SD, SH, SW, PD, PH, PW, TD, TH, TW, alpha, beta,
                          MODE: tl.constexpr, ADAPTIVE: tl.constexpr, HAS_BETA: tl.constexpr,
                          BIG: tl.constexpr, COMPUTE: tl.constexpr,
                          BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx = alpha * (sum over the outputs covering each input) + beta * dx. TD, TH, TW:
    the most outputs that can cover one input along each dim."""
    P = ID * IH * IW
    n, p, c = _tile_ids(N, C, P, BLOCK_P, BLOCK_C, BIG)
    p_mask = p < P
    c_mask = c < C
    di, hi, wi = _unravel3(p, IH, IW)
    fd = _first_cover(di, ID, OD, SD, PD, KD, ADAPTIVE)
    fh = _first_cover(hi, IH, OH, SH, PH, KH, ADAPTIVE)
    fw = _first_cover(wi, IW, OW, SW, PW, KW, ADAPTIVE)
    acc = tl.zeros([BLOCK_P, BLOCK_C], COMPUTE)
    g_base = n * gsn + c[None, :] * gsc
    a_base = (n * C + c[None, :]) * (OD * OH * OW)
    for td in range(TD):
        od = fd + td
        d0, d1 = _window(od, ID, OD, SD, PD, KD, ADAPTIVE)
        d_ok = (od >= 0) & (od < OD) & (d0 <= di) & (di < d1)
        for th in range(TH):
            oh = fh + th
            h0, h1 = _window(oh, IH, OH, SH, PH, KH, ADAPTIVE)
            dh_ok = d_ok & (oh >= 0) & (oh < OH) & (h0 <= hi) & (hi < h1)
            for tw in range(TW):
                ow = fw + tw
                w0, w1 = _window(ow, IW, OW, SW, PW, KW, ADAPTIVE)
                ok = dh_ok & (ow >= 0) & (ow < OW) & (w0 <= wi) & (wi < w1) & p_mask
                mask = ok[:, None] & c_mask[None, :]
                g = tl.load(dy_ptr + g_base + (od * gsd + oh * gsh + ow * gsw)[:, None],
                            mask=mask, other=0.0).to(COMPUTE)
                if MODE == 0 or MODE == 3:
                    tap = ((di - d0) * KH + (hi - h0)) * KW + (wi - w0)
                    o_lin = (od * OH + oh) * OW + ow
                    a = tl.load(arg_ptr + a_base + o_lin[:, None], mask=mask, other=-1).to(tl.int32)
                    acc += tl.where(a == tap[:, None], g, 0.0)
                elif MODE == 1:
                    acc += g / (KD * KH * KW)
                else:
                    count = ((tl.minimum(d1, ID) - tl.maximum(d0, 0)) * (tl.minimum(h1, IH) - tl.maximum(h0, 0))
                             * (tl.minimum(w1, IW) - tl.maximum(w0, 0)))
                    acc += g / tl.maximum(count, 1).to(COMPUTE)[:, None]  # 1: masked-off windows
    d_off = n * dsn + c[None, :] * dsc + (di * dsd + hi * dsh + wi * dsw)[:, None]
    out_mask = p_mask[:, None] & c_mask[None, :]
    out = acc * alpha
    if HAS_BETA:
        out += tl.load(dx_ptr + d_off, mask=out_mask, other=0.0).to(COMPUTE) * beta
    tl.store(dx_ptr + d_off, out.to(dx_ptr.dtype.element_ty), mask=out_mask)


# -- launchers --------------------------------------------------------------------------
def _as_3d(t):
    """A (N, C, D, H, W) view of a 1-D, 2-D or 3-D tensor."""
    while t.dim() < 5:
        t = t.unsqueeze(2)
    return t


def _pad3(values, fill):
    values = tuple(int(v) for v in values)
    return (fill,) * (3 - len(values)) + values


def _tile(t, C, P):
    """(BLOCK_P, BLOCK_C, warps): channels along the tile for channels-last tensors."""
    if channels_last(t):
        block_c = min(triton.next_power_of_2(C), 128)
        block_p = max(1, min(triton.next_power_of_2(P), TILE // block_c))
    else:
        block_p = min(triton.next_power_of_2(P), 512)
        block_c = max(1, min(triton.next_power_of_2(C), TILE // block_p))
    warps = 4 if block_p * block_c <= 1024 else 8
    return block_p, block_c, warps


def _grid(N, C, P, block_p, block_c):
    return (N * triton.cdiv(P, block_p) * triton.cdiv(C, block_c),)


def _arg_dtype(taps: int):
    return torch.uint8 if taps <= 255 else (torch.int16 if taps <= 32767 else torch.int32)


def _covers(size_in, size_out, stride, pad, window, adaptive):
    """The most outputs whose windows cover one input along a dim."""
    if adaptive:
        return -(-size_out // size_in) + 1
    return -(-window // stride)


def _max_bin(size_in, size_out):
    return max(-((-(o + 1) * size_in) // size_out) - (o * size_in) // size_out for o in range(size_out))


def _check(mode, x, y, window, padding, stride):
    if int(mode) not in (MAX, AVG_INCLUDE, AVG_EXCLUDE, MAX_DETERMINISTIC):
        raise BadParamError(f"unknown pooling mode {mode}; valid: MAX 0, AVERAGE_COUNT_INCLUDE_PADDING 1, "
                            f"AVERAGE_COUNT_EXCLUDE_PADDING 2, MAX_DETERMINISTIC 3")
    if not 3 <= x.dim() <= 5 or x.dim() != y.dim():
        raise BadParamError(f"pooling needs x and y of 3 to 5 dims with equal rank, got {tuple(x.shape)} "
                            f"and {tuple(y.shape)}")
    nd = x.dim() - 2
    for name, v in (("window", window), ("padding", padding), ("stride", stride)):
        if len(tuple(v)) != nd:
            raise BadParamError(f"pooling {name} {tuple(v)} needs {nd} entries for x dims {tuple(x.shape)}")


class _Geometry:
    def __init__(self, x, y, window, padding, stride, adaptive):
        self.x5, self.y5 = _as_3d(x), _as_3d(y)
        self.N, self.C = x.shape[0], x.shape[1]
        self.ins = tuple(self.x5.shape[2:])
        self.outs = tuple(self.y5.shape[2:])
        if adaptive:
            self.window = tuple(_max_bin(i, o) for i, o in zip(self.ins, self.outs))
            self.stride, self.padding = (1, 1, 1), (0, 0, 0)
        else:
            self.window, self.padding, self.stride = _pad3(window, 1), _pad3(padding, 0), _pad3(stride, 1)
        self.covers = tuple(_covers(i, o, s, p, k, adaptive) for i, o, s, p, k in
                            zip(self.ins, self.outs, self.stride, self.padding, self.window))

    def params(self):
        return (*self.window, *self.stride, *self.padding)


def _global_as_reduction(x, y, mode, geo, propagate_nan, alpha, beta):
    """A window that is the whole (unpadded) plane of an NCHW-like tensor is a row
    reduction: hand it to the reduce kernel, which reads each plane as one contiguous
    run instead of looping over taps with channel-strided loads."""
    from . import tensor_ops
    if any(p != 0 for p in geo.padding) or any(o != 1 for o in geo.outs):
        return False
    if tuple(geo.window[-x.dim() + 2:]) != tuple(x.shape[2:]) and math.prod(geo.window) != math.prod(geo.ins):
        return False
    op = tensor_ops.RED_MAX if int(mode) in (MAX, MAX_DETERMINISTIC) else tensor_ops.RED_AVG
    tensor_ops.reduce_tensor(x, y, None, None, op, alpha, beta, propagate_nan)
    return True


def _forward(x, y, mode, geo, propagate_nan, alpha, beta, adaptive, arg=None, store_y=True):
    if arg is None and store_y and _global_as_reduction(x, y, mode, geo, propagate_nan, alpha, beta):
        return
    alpha, beta, has_beta = blend_args(alpha, beta)
    P = math.prod(geo.outs)
    block_p, block_c, warps = _tile(geo.x5, geo.C, P)
    _pool_forward_kernel[_grid(geo.N, geo.C, P, block_p, block_c)](
        geo.x5, geo.y5, arg if arg is not None else geo.y5, geo.N, geo.C, *geo.ins, *geo.outs,
        *geo.x5.stride(), *geo.y5.stride(), *geo.params(), alpha, beta,
        MODE=int(mode), ADAPTIVE=adaptive, PROPAGATE_NAN=bool(propagate_nan), STORE_ARG=arg is not None,
        STORE_Y=store_y, HAS_BETA=has_beta, BIG=needs_int64(x, y), COMPUTE=compute_dtype(x),
        BLOCK_P=block_p, BLOCK_C=block_c, num_warps=warps)


def _backward(x, dy, dx, mode, geo, propagate_nan, alpha, beta, adaptive):
    arg = None
    if int(mode) in (MAX, MAX_DETERMINISTIC):
        taps = math.prod(geo.window)
        arg = torch.empty(geo.N * geo.C * math.prod(geo.outs), dtype=_arg_dtype(taps), device=x.device)
        _forward(x, dy, mode, geo, propagate_nan, 1.0, 0.0, adaptive, arg=arg, store_y=False)
    alpha, beta, has_beta = blend_args(alpha, beta)
    dy5, dx5 = _as_3d(dy), _as_3d(dx)
    P = math.prod(geo.ins)
    block_p, block_c, warps = _tile(dx5, geo.C, P)
    _pool_backward_kernel[_grid(geo.N, geo.C, P, block_p, block_c)](
        dy5, arg if arg is not None else dy5, dx5, geo.N, geo.C, *geo.ins, *geo.outs,
        *dy5.stride(), *dx5.stride(), *geo.params(), *geo.covers, alpha, beta,
        MODE=int(mode), ADAPTIVE=adaptive, HAS_BETA=has_beta, BIG=needs_int64(x, dy, dx),
        COMPUTE=compute_dtype(dx), BLOCK_P=block_p, BLOCK_C=block_c, num_warps=warps)


def pooling_forward(x, y, mode, window, padding, stride, propagate_nan=False, alpha=1.0, beta=0.0) -> None:
    """y = alpha * pool(x) + beta * y; padding is symmetric per spatial dim."""
    _check(mode, x, y, window, padding, stride)
    check_dtypes(x=x, y=y)
    if y.numel() == 0:
        return
    _forward(x, y, mode, _Geometry(x, y, window, padding, stride, False), propagate_nan, alpha, beta, False)


def pooling_backward(y, dy, x, dx, mode, window, padding, stride, propagate_nan=False,
                     alpha=1.0, beta=0.0) -> None:
    """dx = alpha * pool'(dy) + beta * dx; max routes each window's gradient to its first
    maximum in x (row-major window order), recomputed from x, so y is not read."""
    _check(mode, x, dy, window, padding, stride)
    check_dtypes(x=x, dy=dy, dx=dx)
    if dx.numel() == 0:
        return
    _backward(x, dy, dx, mode, _Geometry(x, dy, window, padding, stride, False), propagate_nan,
              alpha, beta, False)


def _adaptive_mode(mode):
    if int(mode) not in (0, 1):
        raise BadParamError(f"unknown adaptive pooling mode {mode}; valid: MAX 0, AVERAGE 1")
    return MAX if int(mode) == 0 else AVG_EXCLUDE


def adaptive_pooling_forward(x, y, mode, alpha=1.0, beta=0.0) -> None:
    """PyTorch-style adaptive pooling: y's spatial dims are given, output i pools
    [floor(i*in/out), ceil((i+1)*in/out)); max lets NaN through."""
    pmode = _adaptive_mode(mode)
    check_dtypes(x=x, y=y)
    if y.numel() == 0:
        return
    geo = _Geometry(x, y, None, None, None, True)
    _forward(x, y, pmode, geo, True, alpha, beta, True)


def adaptive_pooling_backward(x, dy, dx, mode, alpha=1.0, beta=0.0) -> None:
    """Max routes to each bin's first maximum (first NaN if any); average spreads evenly."""
    pmode = _adaptive_mode(mode)
    check_dtypes(x=x, dy=dy, dx=dx)
    if dx.numel() == 0:
        return
    geo = _Geometry(x, dy, None, None, None, True)
    _backward(x, dy, dx, pmode, geo, True, alpha, beta, True)
