"""Dropout forward and backward in Triton with a counter-based RNG.

Element i (its logical row-major index) is kept iff the first word of
Philox-4x32-10 with key = seed and counter = (offset + i as lo, hi words, 0, 0),
read as int32 and folded with -v - 1 when negative, is >= ceil(p * 2**31): the mask
is a pure function of (seed, offset, i), so it is the same on every backend, layout
and launch configuration. The forward writes one byte per element (1 = kept) to the
reserve space; the backward only reads it."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.language.random import philox

from ..errors import BadParamError
from .layer_utils import compute_dtype, coalesce, needs_int64, unravel4

BLOCK = 1024
NUM_WARPS = 4


@triton.jit
def _dropout_kernel(src_ptr, dst_ptr, mask_ptr, numel, D1, D2, D3, ss0, ss1, ss2, ss3, ds0, ds1, ds2, ds3,
                    ls0, ls1, ls2, ls3, seed, offset, threshold, scale,
                    FORWARD: tl.constexpr, FLAT: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr):
    """dst = src * keep / (1 - p). Programs walk the source in its memory order (so NHWC
    reads stay coalesced); each element's logical index (strides ls*) is its RNG
    counter and its byte in the reserve."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_range = i < numel
    if FLAT:
        s_off = i
        d_off = i
        l_off = i
    else:
        i0, i1, i2, i3 = unravel4(i, D1, D2, D3)
        s_off = i0 * ss0 + i1 * ss1 + i2 * ss2 + i3 * ss3
        d_off = i0 * ds0 + i1 * ds1 + i2 * ds2 + i3 * ds3
        l_off = i0 * ls0 + i1 * ls1 + i2 * ls2 + i3 * ls3
    i = l_off
    if FORWARD:
        counter = offset + i
        lo = (counter & 0xFFFFFFFF).to(tl.uint32)
        hi = ((counter >> 32) & 0xFFFFFFFF).to(tl.uint32)
        zero = tl.zeros([BLOCK], tl.uint32)
        r, _, _, _ = philox(seed, lo, hi, zero, zero)
        v = r.to(tl.int32, bitcast=True)
        v = tl.where(v < 0, -v - 1, v)
        keep = v >= threshold
        tl.store(mask_ptr + i, keep.to(tl.uint8), mask=in_range)
    else:
        keep = tl.load(mask_ptr + i, mask=in_range, other=0) != 0
    src = tl.load(src_ptr + s_off, mask=in_range, other=0.0).to(COMPUTE)
    out = tl.where(keep, src * scale, 0.0)
    tl.store(dst_ptr + d_off, out.to(dst_ptr.dtype.element_ty), mask=in_range)


def _as_signed64(value: int) -> int:
    value = int(value) % (1 << 64)
    return value - (1 << 64) if value >= (1 << 63) else value


def _launch(src, dst, reserve, probability, seed, offset, forward):
    p = float(probability)
    if not 0.0 <= p < 1.0:
        raise BadParamError(f"dropout probability must be in [0, 1), got {probability}")
    if tuple(src.shape) != tuple(dst.shape):
        raise BadParamError(f"shape mismatch: {tuple(src.shape)} vs {tuple(dst.shape)}")
    numel = src.numel()
    if reserve.dtype != torch.uint8 or reserve.numel() < numel:
        raise BadParamError(f"reserve must be uint8 with at least {numel} bytes, got {reserve.dtype} "
                            f"with {reserve.numel()} elements")
    if numel == 0:
        return
    mask = reserve.reshape(-1)[:numel]
    if not mask.is_contiguous():
        raise BadParamError("reserve must be one contiguous run of bytes")
    # index order: logical row-major, so coalesce in that order (not the tensors' memory order)
    logical = [math.prod(src.shape[a + 1:]) for a in range(src.dim())]
    dims, (ss, ds, ls) = coalesce(tuple(src.shape), [src.stride(), dst.stride(), logical])
    staged = None
    if len(dims) > 4:
        src = src.contiguous()
        staged, dst = dst, torch.empty(dst.shape, dtype=dst.dtype, device=dst.device)
        dims, (ss, ds, ls) = coalesce(tuple(src.shape), [src.stride(), dst.stride(), logical])
    pad = 4 - len(dims)
    dims4, ss4, ds4, ls4 = [1] * pad + dims, [0] * pad + ss, [0] * pad + ds, [0] * pad + ls
    flat = len(dims) == 1 and ss[0] == 1 and ds[0] == 1 and ls[0] == 1
    _dropout_kernel[(triton.cdiv(numel, BLOCK),)](
        src, dst, mask, numel, dims4[1], dims4[2], dims4[3], *ss4, *ds4, *ls4,
        _as_signed64(seed), _as_signed64(offset), int(math.ceil(p * 2.0 ** 31)), 1.0 / (1.0 - p),
        FORWARD=forward, FLAT=flat, COMPUTE=compute_dtype(src), BLOCK=BLOCK, num_warps=NUM_WARPS)
    if staged is not None:
        staged.copy_(dst)


def dropout_forward(x, y, reserve, probability, seed, offset=0) -> None:
    """y = x * mask / (1 - p); the mask (uint8, 1 = kept, logical order) goes to reserve."""
    _launch(x, y, reserve, probability, seed, offset, True)


def dropout_backward(dy, dx, reserve, probability) -> None:
    """dx = dy * mask / (1 - p) with the mask the forward left in reserve."""
    _launch(dy, dx, reserve, probability, 0, 0, False)
