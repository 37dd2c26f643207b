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


def _use_phases(window, stride) -> bool:
    """Overlapping strided windows (3x3 stride 2) read each input element from several
    taps; splitting x once into its stride phases makes every tap a unit-stride slice."""
    return (any(s > 1 for s in stride) and all(w >= s for w, s in zip(window, stride))
            and any(w > s for w, s in zip(window, stride)))


def _phase_taps(window, in_sizes, out_sizes, padding, stride):
    """For each tap: (phase, output slices, phase slices). Phase a of dim d holds input
    rows a, a+s, a+2s, ...; the tap at offset t reads phase (t-p) mod s, shifted by
    (t-p) // s, for the outputs whose row lands inside the input."""
    lead = (slice(None), slice(None))
    for tap in np.ndindex(*window):
        phase, out_sl, in_sl = [], [], []
        for t, size, o, p, s in zip(tap, in_sizes, out_sizes, padding, stride):
            a, shift = (t - p) % s, (t - p) // s
            length = (size - a + s - 1) // s
            lo, hi = max(0, -shift), min(o, length - shift)
            if hi <= lo:
                break
            phase.append(a)
            out_sl.append(slice(lo, hi))
            in_sl.append(slice(lo + shift, hi + shift))
        else:
            yield tuple(phase), lead + tuple(out_sl), lead + tuple(in_sl)


def _phase_slices(key, stride):
    return (slice(None), slice(None)) + tuple(slice(a, None, s) for a, s in zip(key, stride))


def _split_phases(x, stride, dtype):
    """Contiguous copies (in x's memory order) of every stride phase of x."""
    phases = {}
    for key in np.ndindex(*stride):
        view = x[_phase_slices(key, stride)]
        copy = empty_like(view, dtype)
        np.copyto(copy, view, casting="unsafe")
        phases[key] = copy
    return phases


def _reads(x, like, window, padding, stride, dtype):
    """Every tap as (key, source array, output slices, source slices), reading x's stride
    phases (key = the phase) or x itself (key None)."""
    if _use_phases(window, stride):
        phases = _split_phases(x, stride, dtype)
        return [(k, phases[k], o, i) for k, o, i in _phase_taps(window, x.shape[2:], like.shape[2:], padding, stride)]
    work = x if x.dtype == dtype else x.astype(dtype)
    return [(None, work, o, i) for o, i in _taps(window, x.shape[2:], like.shape[2:], padding, stride)]


def _window_max(reads, like, dtype, propagate_nan):
    """Max over each window (NaN wins when propagate_nan, else NaN is skipped) in an
    array shaped and ordered like ``like``. Max is exact in the data's own float type."""
    m = empty_like(like, dtype)
    m.fill(-np.inf)
    pick = np.maximum if propagate_nan else np.fmax
    for _, src, out_sl, in_sl in reads:
        target = m[out_sl]
        pick(target, src[in_sl], out=target)
    return m


def _max_dtype(x):
    return x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)


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
        dt = _max_dtype(x)
        m = _window_max(_reads(x, y, window, padding, stride, dt), y, dt, propagate_nan)
        blend(y, m, alpha, beta)
        return
    acc = zeros_like(y, acc_dtype(y.dtype))
    for _, src, out_sl, in_sl in _reads(x, y, window, padding, stride, acc.dtype):
        acc[out_sl] += src[in_sl]
    if mode == AVG_INCLUDE:
        acc *= acc.dtype.type(1.0 / math.prod(window))
    else:
        acc /= _counts(x.shape[2:], y.shape[2:], window, padding, stride, acc.dtype)
    blend(y, acc, alpha, beta)


def _gradient_sinks(dx, window, stride, dtype):
    """Zeroed gradient accumulators: one per stride phase of dx when the taps read phases,
    else one shaped like dx (key None)."""
    if _use_phases(window, stride):
        return {key: zeros_like(dx[_phase_slices(key, stride)], dtype) for key in np.ndindex(*stride)}
    return {None: zeros_like(dx, dtype)}


def _store_sinks(dx, sinks, stride, alpha, beta):
    for key, sink in sinks.items():
        blend(dx if key is None else dx[_phase_slices(key, stride)], sink, alpha, beta)


def pooling_backward(y, dy, x, dx, mode, window, padding, stride, propagate_nan, alpha, beta):
    """dx = alpha * pool'(dy) + beta * dx. Max routes each window's gradient to the first
    maximum of x in row-major window order (the window max is recomputed from x, so the
    result does not depend on how y was blended)."""
    mode = int(mode)
    dt = acc_dtype(dx.dtype)
    g = dy if dy.dtype == dt else dy.astype(dt)
    sinks = _gradient_sinks(dx, window, stride, dt)
    if mode in (MAX, MAX_DETERMINISTIC):
        _max_backward(x, g, sinks, window, padding, stride, propagate_nan)
    else:
        if mode == AVG_INCLUDE:
            g = g * dt.type(1.0 / math.prod(window))
        else:
            g = g / _counts(x.shape[2:], dy.shape[2:], window, padding, stride, dt)
        if _use_phases(window, stride):
            taps = _phase_taps(window, x.shape[2:], dy.shape[2:], padding, stride)
        else:
            taps = ((None, o, i) for o, i in _taps(window, x.shape[2:], dy.shape[2:], padding, stride))
        for key, out_sl, in_sl in taps:
            sinks[key][in_sl] += g[out_sl]
    _store_sinks(dx, sinks, stride, alpha, beta)


def _max_backward(x, g, sinks, window, padding, stride, propagate_nan):
    """sinks += each window's gradient at its first maximum (row-major tap order)."""
    dt = _max_dtype(x)
    reads = _reads(x, g, window, padding, stride, dt)
    m = _window_max(reads, g, dt, propagate_nan)
    nan_windows = bool(np.isnan(m).any())
    taken = np.zeros(m.shape, bool)
    for key, src, out_sl, in_sl in reads:
        ms = m[out_sl]
        xs = src[in_sl]
        hit = xs == ms
        if nan_windows:
            hit |= np.isnan(xs) & np.isnan(ms)
        tk = taken[out_sl]
        hit &= ~tk
        tk |= hit
        sinks[key][in_sl] += g[out_sl] * hit


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
