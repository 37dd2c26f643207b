"""Pooling in NumPy: one strided slice per window tap, no padded copy of the input.

Each tap (an offset inside the window) reads, for every output position whose
window puts that tap inside the input, one strided slice of x; taps that land in
the padding are skipped, which is what "padding is -inf for max, and absent or zero
for the averages" means. Work runs on logical views, so NCHW, NHWC and strided
inputs need no transposes, and temporaries keep the input's memory order.
"""
from __future__ import annotations

import math

import numpy as np

from .layer_utils import acc_dtype, blend, empty_like, zeros_like

MAX, AVG_INCLUDE, AVG_EXCLUDE, MAX_DETERMINISTIC = 0, 1, 2, 3


def _tap_slices(tap, in_sizes, out_sizes, padding, stride):
    """(output slices, input slices) of one window tap, or None when it only reads padding."""
    out_sl, in_sl = [], []
    for t, size, o, p, s in zip(tap, in_sizes, out_sizes, padding, stride):
        offset = t - p                        # input index of output 0
        lo = max(0, -(offset // s))           # first output whose input index is >= 0
        hi = min(o, (size - 1 - offset) // s + 1) if size - 1 - offset >= 0 else 0
        if hi <= lo:
            return None
        first = offset + lo * s
        out_sl.append(slice(lo, hi))
        in_sl.append(slice(first, first + (hi - lo - 1) * s + 1, s))
    lead = (slice(None), slice(None))
    return lead + tuple(out_sl), lead + tuple(in_sl)


def _taps(window, in_sizes, out_sizes, padding, stride):
    for tap in np.ndindex(*window):
        sl = _tap_slices(tap, in_sizes, out_sizes, padding, stride)
        if sl is not None:
            yield sl


def _window_max(x, like, window, padding, stride, propagate_nan):
    """Max over each window (NaN wins when propagate_nan, else NaN is skipped) in an
    array shaped and ordered like ``like``. Max is exact, so float32/float64 data are
    compared as they are; half types are widened once."""
    work = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
    m = empty_like(like, work.dtype)
    m.fill(-np.inf)
    pick = np.maximum if propagate_nan else np.fmax
    for out_sl, in_sl in _taps(window, x.shape[2:], like.shape[2:], padding, stride):
        target = m[out_sl]
        pick(target, work[in_sl], out=target)
    return m, work


def _counts(in_sizes, out_sizes, window, padding, stride, dtype):
    """In-bounds element count of every window (for AVERAGE_COUNT_EXCLUDE_PADDING),
    as a broadcastable array of shape (1, 1, *out)."""
    total = np.ones((1, 1) + (1,) * len(out_sizes), dtype)
    for d, (size, o, w, p, s) in enumerate(zip(in_sizes, out_sizes, window, padding, stride)):
        start = np.arange(o) * s - p
        count = np.minimum(start + w, size) - np.maximum(start, 0)
        shape = [1] * (2 + len(out_sizes))
        shape[2 + d] = o
        total = total * count.astype(dtype).reshape(shape)
    return total


def pooling_forward(x, y, mode, window, padding, stride, propagate_nan, alpha, beta):
    """y = alpha * pool(x) + beta * y."""
    mode = int(mode)
    if mode in (MAX, MAX_DETERMINISTIC):
        m, _ = _window_max(x, y, window, padding, stride, propagate_nan)
        blend(y, m, alpha, beta)
        return
    acc = zeros_like(y, acc_dtype(y.dtype))
    work = x if x.dtype == acc.dtype else x.astype(acc.dtype)
    for out_sl, in_sl in _taps(window, x.shape[2:], y.shape[2:], padding, stride):
        acc[out_sl] += work[in_sl]
    if mode == AVG_INCLUDE:
        acc *= acc.dtype.type(1.0 / math.prod(window))
    else:
        acc /= _counts(x.shape[2:], y.shape[2:], window, padding, stride, acc.dtype)
    blend(y, acc, alpha, beta)


def pooling_backward(y, dy, x, dx, mode, window, padding, stride, propagate_nan, alpha, beta):
    """dx = alpha * pool'(dy) + beta * dx. Max routes each window's gradient to the first
    maximum of x in row-major window order (the window max is recomputed from x, so the
    result does not depend on how y was blended)."""
    mode = int(mode)
    acc = zeros_like(dx, acc_dtype(dx.dtype))
    g = dy if dy.dtype == acc.dtype else dy.astype(acc.dtype)
    taps = list(_taps(window, x.shape[2:], dy.shape[2:], padding, stride))
    if mode in (MAX, MAX_DETERMINISTIC):
        m, work = _window_max(x, dy, window, padding, stride, propagate_nan)
        nan_windows = bool(np.isnan(m).any())
        taken = np.zeros(m.shape, bool)
        for out_sl, in_sl in taps:
            xs = work[in_sl]
            ms = m[out_sl]
            hit = xs == ms
            if nan_windows:
                hit |= np.isnan(xs) & np.isnan(ms)
            tk = taken[out_sl]
            hit &= ~tk
            tk |= hit
            acc[in_sl] += np.where(hit, g[out_sl], 0)
    else:
        if mode == AVG_INCLUDE:
            g = g * acc.dtype.type(1.0 / math.prod(window))
        else:
            g = g / _counts(x.shape[2:], dy.shape[2:], window, padding, stride, acc.dtype)
        for out_sl, in_sl in taps:
            acc[in_sl] += g[out_sl]
    blend(dx, acc, alpha, beta)


# -- adaptive pooling (tridnn extension) ------------------------------------------------
def adaptive_bins(size_in: int, size_out: int):
    """PyTorch's adaptive bins: output i covers [floor(i*in/out), ceil((i+1)*in/out))."""
    return [((i * size_in) // size_out, -((-(i + 1) * size_in) // size_out)) for i in range(size_out)]


def _adaptive_boxes(in_sizes, out_sizes):
    bins = [adaptive_bins(i, o) for i, o in zip(in_sizes, out_sizes)]
    for idx in np.ndindex(*out_sizes):
        box = tuple(slice(*bins[d][i]) for d, i in enumerate(idx))
        yield (slice(None), slice(None)) + idx, (slice(None), slice(None)) + box


def adaptive_pooling_forward(x, y, mode, alpha, beta):
    """mode 0: max (NaN propagates), 1: average over each adaptive bin."""
    acc = empty_like(y, acc_dtype(y.dtype))
    work = x.astype(acc.dtype, copy=False)
    axes = tuple(range(2, x.ndim))
    for out_idx, box in _adaptive_boxes(x.shape[2:], y.shape[2:]):
        patch = work[box]
        acc[out_idx] = patch.max(axis=axes) if int(mode) == 0 else patch.mean(axis=axes)
    blend(y, acc, alpha, beta)


def adaptive_pooling_backward(x, dy, dx, mode, alpha, beta):
    """Max routes to the first maximum of each bin; average spreads evenly."""
    acc = zeros_like(dx, acc_dtype(dx.dtype))
    work = x.astype(acc.dtype, copy=False)
    g = dy.astype(acc.dtype, copy=False)
    n, c = x.shape[:2]
    for out_idx, box in _adaptive_boxes(x.shape[2:], dy.shape[2:]):
        patch = work[box]
        gi = g[out_idx]
        if int(mode) == 0:
            flat = patch.reshape(n, c, -1)
            nan = np.isnan(flat)
            first = np.where(nan.any(axis=2), nan.argmax(axis=2), flat.argmax(axis=2))
            local = np.unravel_index(first, patch.shape[2:])
            ni, ci = np.indices((n, c))
            sub = acc[box]
            sub[(ni, ci) + local] += gi
        else:
            acc[box] += (gi / math.prod(patch.shape[2:]))[(...,) + (None,) * (x.ndim - 2)]
    blend(dx, acc, alpha, beta)
