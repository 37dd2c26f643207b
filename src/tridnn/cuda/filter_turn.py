"""The turned filter of a Gluon backward data: w [K, C, KH, KW] -> m [C, KH*KW*K].

Why: gluon_conv runs backward data as forward convolutions of dy by the filter with K and
C swapped (and, for cross-correlation, its taps reversed). torch's copy of that permuted
view is a strided gather: on the H200 it made the Gluon backward data of res5_3x3 (a 4.7 MB
filter) 43.8 us against the forward's 24.9 (2026-11-30; 27.5 us with this kernel). This
kernel reads each tap's [K, C] block along the filter's contiguous dimension and writes it
along K (Triton moves the tile between the two orders through shared memory): a copy at
memory speed. Where each tap lands is a table (``order``): reversed for the 180-degree
turn, grouped by output phase for strided backward data (dgrad_phases).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import bind, cdiv, int32_table, launch


@triton.jit
def turn_filter_kernel(
    # pointers: the filter (any strides), the turned filter m [C, T, K] (contiguous) and
    # order [T] int32: the slot in m of each tap t = kh * KW + kw of w
    w_ptr, m_ptr, order_ptr,
    # sizes: output channels K, input channels C, filter width KW, taps T = KH * KW
    K, C, KW, T,
    # the filter's strides in elements
    ws_k, ws_c, ws_h, ws_w,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # map the program to one tap and a [BLOCK_C, BLOCK_K] tile of (c, k)
    tap = tl.program_id(0)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ks = tl.program_id(2) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (cs[:, None] < C) & (ks[None, :] < K)
    # read the tile in the filter's layout, write it along K at the tap's slot
    src = w_ptr + (tap // KW) * ws_h + (tap % KW) * ws_w + cs[:, None] * ws_c + ks[None, :] * ws_k
    tile = tl.load(src, mask=mask)
    slot = tl.load(order_ptr + tap)
    tl.store(m_ptr + cs[:, None] * (T * K) + slot * K + ks[None, :], tile, mask=mask)


def turned_filter(w, flip: bool = True, order=None, out=None):
    """m [C, KH*KW*K] with m[c, (order[t], k)] = w[k, c, t] over taps t = kh * KW + kw;
    order defaults to the 180-degree turn (flip: slot T-1-t) or the identity: a new
    contiguous tensor on w's device, or ``out`` (a contiguous tensor of that shape and
    w's dtype and device: a launch record's own buffer)."""
    import torch
    k, c, kh, kw = w.shape
    taps = kh * kw
    if out is None:
        m = torch.empty((c, taps * k), dtype=w.dtype, device=w.device)
    elif (tuple(out.shape) != (c, taps * k) or out.dtype != w.dtype or out.device != w.device
          or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous {(c, taps * k)} tensor of w's dtype {w.dtype} on {w.device}, "
                         f"got {tuple(out.shape)} {out.dtype} on {out.device}")
    else:
        m = out
    if m.numel():
        # (common.launch: after the first call its compiled launcher directly, skipping the
        # JIT's per-call argument binding: tens of microseconds of host time on the H200's host)
        launch(*_launch_args(w, m, flip, order))
    return m


def bound_turn(w, m, flip: bool = True, order=None):
    """The launch ``turned_filter(w, flip, order, out=m)`` makes, bound (common.Bound: a
    launch record replays it as one C call), and its order table, which the caller keeps
    alive as long as the Bound (it holds the table's address only); None before that
    launch was compiled."""
    if not m.numel():
        return None
    args = _launch_args(w, m, flip, order)
    bound = bind(*args)
    return None if bound is None else (bound, args[2][2])


def _launch_args(w, m, flip, order) -> tuple:
    """(kernel, grid, args, constexprs, options) of the turn of w into m."""
    k, c, kh, kw = w.shape
    taps = kh * kw
    if order is None:
        order = [taps - 1 - t for t in range(taps)] if flip else list(range(taps))
    if sorted(order) != list(range(taps)):
        raise ValueError(f"order must be a permutation of the {taps} taps, got {list(order)}")
    block_c, block_k = 64, 64
    grid = (taps, cdiv(c, block_c), cdiv(k, block_k))
    return (turn_filter_kernel, grid, (w, m, int32_table(order, w.device), k, c, kw, taps, *w.stride()),
            dict(BLOCK_C=block_c, BLOCK_K=block_k), dict(num_warps=4))
