"""Pooling in NumPy on "pitched phases": every window tap becomes one long unit-stride
slice, so NumPy runs each tap as a single fast loop instead of thousands of short rows.

The input is padded (with -inf for max, 0 for the averages) and split by stride phase:
phase a of a dim holds padded rows a, a+s, a+2s, ... . A tap at offset t of the window
reads phase t mod s from row t // s on, for all outputs at once. All phases share one
padded spatial shape P (O + (window-1)//stride per dim), flattened with a common
pitch, so a tap is the flat slice [offset, offset + L) of its phase, and outputs live
in the same pitched layout (a few padding columns of garbage per row, never stored).
Channels stay outermost for NCHW-like inputs and innermost for NHWC-like ones, so the
slices are contiguous either way; the result is copied out once into y (or dx).
"""
from __future__ import annotations

import math

import numpy as np

from .layer_utils import acc_dtype, batch_channel_chunks, blend, empty_like, run_blocks, scratch, zeros_like

MAX, AVG_INCLUDE, AVG_EXCLUDE, MAX_DETERMINISTIC = 0, 1, 2, 3


class _Pitched:
    """Geometry of the pitched-phase layout of one pooling problem."""

    def __init__(self, x, out_spatial, window, padding, stride):
        self.n, self.c = x.shape[:2]
        self.in_spatial = tuple(x.shape[2:])
        self.out_spatial = tuple(out_spatial)
        self.window, self.padding, self.stride = tuple(window), tuple(padding), tuple(stride)
        self.channels_last = x.ndim > 2 and x.strides[1] < min(x.strides[2:])
        self.p_shape = tuple(o + (w - 1) // s for o, w, s in zip(out_spatial, window, stride))
        self.pitch = tuple(math.prod(self.p_shape[d + 1:]) for d in range(len(self.p_shape)))
        self.length = math.prod(self.p_shape)
        self.out_length = sum((o - 1) * p for o, p in zip(out_spatial, self.pitch)) + 1

    # -- arrays in the layout -------------------------------------------------------
    def empty(self, dtype, tag):
        """(flat view for the tap math, logical (N, C, *P) view) of a scratch array."""
        if self.channels_last:
            phys = scratch(f"pool.{tag}", (self.n, *self.p_shape, self.c), dtype)
            return phys.reshape(self.n, self.length, self.c), np.moveaxis(phys, -1, 1)
        phys = scratch(f"pool.{tag}", (self.n, self.c, *self.p_shape), dtype)
        return phys.reshape(self.n, self.c, self.length), phys

    def span(self, flat, offset: int):
        """The L pitched outputs' worth of ``flat`` starting at flat position ``offset``."""
        if self.channels_last:
            return flat[:, offset:offset + self.out_length, :]
        return flat[:, :, offset:offset + self.out_length]

    def tail(self, flat):
        """The positions of ``flat`` past the last pitched output (no window starts there)."""
        if self.channels_last:
            return flat[:, self.out_length:, :]
        return flat[:, :, self.out_length:]

    def valid(self, logical):
        """The real outputs (N, C, *O) inside a pitched output array's logical view."""
        return logical[(slice(None), slice(None)) + tuple(slice(0, o) for o in self.out_spatial)]

    # -- taps and phases ------------------------------------------------------------
    def taps(self):
        """(phase key, flat offset) of every window tap, in row-major window order."""
        for tap in np.ndindex(*self.window):
            key = tuple(t % s for t, s in zip(tap, self.stride))
            offset = sum((t // s) * p for t, s, p in zip(tap, self.stride, self.pitch))
            yield key, offset

    def phase_rows(self, key):
        """(phase slices, input slices) of the real input rows a phase holds."""
        ph, inp = [], []
        for a, size, p, s, length in zip(key, self.in_spatial, self.padding, self.stride, self.p_shape):
            lo = max(0, -((a - p) // s))                       # first j with a + j*s - p >= 0
            hi = min(length, (size - 1 - a + p) // s + 1)      # past the last j inside the input
            if hi <= lo:
                return None
            first = a + lo * s - p
            ph.append(slice(lo, hi))
            inp.append(slice(first, first + (hi - lo - 1) * s + 1, s))
        lead = (slice(None), slice(None))
        return lead + tuple(ph), lead + tuple(inp)

    def phases(self, x, dtype, pad_value):
        """{key: flat view} of the padded input split into phases (only phases taps read)."""
        out = {}
        for key in sorted({k for k, _ in self.taps()}):
            flat, logical = self.empty(dtype, f"phase{key}")
            rows = self.phase_rows(key)
            if rows is None:
                logical.fill(pad_value)
            else:
                ph, inp = rows
                logical[ph] = x[inp]
                self._fill_border(logical, ph, pad_value)
            out[key] = flat
        return out

    @staticmethod
    def _fill_border(logical, box, value):
        """Set everything outside ``box`` (slices per spatial dim) to ``value``."""
        for d, sl in enumerate(box[2:]):
            before = (slice(None),) * (2 + d)
            logical[before + (slice(0, sl.start),)] = value
            logical[before + (slice(sl.stop, None),)] = value

    def counts(self, dtype):
        """In-bounds element count of each window, pitched and flattened for broadcasting."""
        total = np.ones(self.p_shape, dtype)
        for d, (size, w, p, s, length) in enumerate(zip(self.in_spatial, self.window, self.padding,
                                                        self.stride, self.p_shape)):
            start = np.arange(length) * s - p
            count = np.clip(np.minimum(start + w, size) - np.maximum(start, 0), 1, None)
            shape = [1] * len(self.p_shape)
            shape[d] = length
            total = total * count.astype(dtype).reshape(shape)
        flat = total.reshape(-1)[:self.out_length]
        return flat[None, :, None] if self.channels_last else flat[None, None, :]


def _max_padding(propagate_nan):
    """Padding for max windows: -inf, or NaN where NaN is skipped (np.fmax): padding never
    wins a window, and a window of padding and NaN is all NaN (-inf after _window_max)."""
    return -np.inf if propagate_nan else np.nan


def _max_dtype(x):
    return x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float32)


def _window_max(geo, phases, dtype, propagate_nan):
    """(flat, logical) pitched window maxima; NaN wins when propagate_nan, else is skipped
    and a window of only NaN gives -inf (it has no number; cuDNN gives no NaN there either)."""
    m_flat, m_logical = geo.empty(dtype, "max")
    m = geo.span(m_flat, 0)
    pick = np.maximum if propagate_nan else np.fmax
    for i, (key, offset) in enumerate(geo.taps()):
        src = geo.span(phases[key], offset)
        if i == 0:
            np.copyto(m, src)
        else:
            pick(m, src, out=m)
    if not propagate_nan:
        np.copyto(m, -np.inf, where=np.isnan(m))
    return m_flat, m_logical


def _window_sum(geo, phases, dtype):
    s_flat, s_logical = geo.empty(dtype, "sum")
    total = geo.span(s_flat, 0)
    for i, (key, offset) in enumerate(geo.taps()):
        src = geo.span(phases[key], offset)
        if i == 0:
            np.copyto(total, src)
        else:
            total += src
    return s_flat, s_logical


def _average_scale(geo, mode, dtype):
    if mode == AVG_INCLUDE:
        return dtype.type(1.0 / math.prod(geo.window))
    return 1.0 / geo.counts(dtype)


def pooling_forward(x, y, mode, window, padding, stride, propagate_nan, alpha, beta):
    """y = alpha * pool(x) + beta * y, in cache-sized blocks of images and channels spread
    over the worker threads (each thread keeps its own scratch arrays)."""
    def block(chunk):
        nb, cb = chunk
        _forward_block(x[nb, cb], y[nb, cb], int(mode), window, padding, stride, propagate_nan, alpha, beta)

    run_blocks(block, batch_channel_chunks(x, min_channels=64))


def _forward_block(x, y, mode, window, padding, stride, propagate_nan, alpha, beta):
    geo = _Pitched(x, y.shape[2:], window, padding, stride)
    if mode in (MAX, MAX_DETERMINISTIC):
        dt = _max_dtype(x)
        _, m_logical = _window_max(geo, geo.phases(x, dt, _max_padding(propagate_nan)), dt, propagate_nan)
        blend(y, geo.valid(m_logical), alpha, beta)
        return
    dt = acc_dtype(y.dtype)
    s_flat, s_logical = _window_sum(geo, geo.phases(x, dt, 0), dt)
    total = geo.span(s_flat, 0)
    total *= _average_scale(geo, mode, dt)
    blend(y, geo.valid(s_logical), alpha, beta)


def pooling_backward(y, dy, x, dx, mode, window, padding, stride, propagate_nan, alpha, beta):
    """dx = alpha * pool'(dy) + beta * dx. Max routes each window's gradient to the first
    maximum of x in row-major window order (the window max is recomputed from x, so the
    result does not depend on how y was blended). Blocks as in the forward."""
    def block(chunk):
        nb, cb = chunk
        _backward_block(dy[nb, cb], x[nb, cb], dx[nb, cb], int(mode), window, padding, stride, propagate_nan,
                        alpha, beta)

    run_blocks(block, batch_channel_chunks(x, min_channels=64))


def _backward_block(dy, x, dx, mode, window, padding, stride, propagate_nan, alpha, beta):
    geo = _Pitched(x, dy.shape[2:], window, padding, stride)
    dt = acc_dtype(dx.dtype)
    g_flat, g_logical = geo.empty(dt, "grad")
    g_logical[...] = 0
    geo.valid(g_logical)[...] = dy            # pitched dy, zero in the garbage columns
    g = geo.span(g_flat, 0)
    keys = sorted({k for k, _ in geo.taps()})
    sinks = {key: geo.empty(dt, f"sink{key}") for key in keys}
    if mode in (MAX, MAX_DETERMINISTIC):
        mdt = _max_dtype(x)
        phases = geo.phases(x, mdt, _max_padding(propagate_nan))
        m_flat, _ = _window_max(geo, phases, mdt, propagate_nan)
        m = geo.span(m_flat, 0)
        # NaN or infinite maxima (-inf ties with padding) make the sum non-finite: they
        # take the exact routing (so may a finite overflow, harmlessly)
        unusual = not np.isfinite(np.add.reduce(m, axis=None))
        if unusual or not _route_without_ties(geo, phases, m, g, sinks):
            _route_first_maximum(geo, phases, m, g, sinks, bool(np.isnan(m).any()))
    else:
        g *= _average_scale(geo, mode, dt)
        for key, offset in geo.taps():
            _deposit(geo, sinks[key][0], offset, g)
    covered = 0
    for key in keys:
        rows = geo.phase_rows(key)
        if rows is not None:
            ph, inp = rows
            blend(dx[inp], sinks[key][1][ph], alpha, beta)
            covered += math.prod(sl.stop - sl.start for sl in ph[2:])
    if covered != math.prod(geo.in_spatial):   # rows no window reads (stride > window)
        _blend_unread(dx, geo, keys, alpha, beta)


def _deposit(geo, sink, offset, value):
    """Add ``value`` (pitched, one per window) into ``sink`` at the tap's ``offset``. Each
    phase's first tap in window order has offset 0: it overwrites the sink instead (and
    clears the tail past the outputs), so sinks need no zeroing pass of their own."""
    target = geo.span(sink, offset)
    if offset == 0:
        np.copyto(target, value)
        geo.tail(sink)[...] = 0
    else:
        target += value


def _route_without_ties(geo, phases, m, g, sinks) -> bool:
    """Route every window's gradient to each tap equal to its maximum; True when that was
    exactly one tap per window (no ties, the usual case for real data), so the result
    is the first-maximum routing. False means ties: the caller redoes it tie-aware."""
    hit = scratch("pool.hit", m.shape, bool)
    routed = scratch("pool.routed", g.shape, g.dtype)
    hits = 0
    for key, offset in geo.taps():
        np.equal(geo.span(phases[key], offset), m, out=hit)
        hits += int(np.count_nonzero(hit))
        _deposit(geo, sinks[key][0], offset, np.multiply(g, hit, out=routed))
    return hits == hit.size


def _route_first_maximum(geo, phases, m, g, sinks, nan_windows):
    """Route each window's gradient to its first maximum in row-major window order (a
    NaN maximum: the first NaN), whatever the ties."""
    hit = scratch("pool.hit", m.shape, bool)
    taken = scratch("pool.taken", m.shape, bool)
    routed = scratch("pool.routed", g.shape, g.dtype)
    taken[...] = False
    inside = {}
    for key in phases:                          # padding positions never take the gradient
        flat, logical = geo.empty(bool, f"inside{key}")
        flat[...] = False
        rows = geo.phase_rows(key)
        if rows is not None:
            logical[rows[0]] = True
        inside[key] = flat
    for key, offset in geo.taps():
        xs = geo.span(phases[key], offset)
        np.equal(xs, m, out=hit)
        if nan_windows:
            hit |= np.isnan(xs) & np.isnan(m)
        hit &= geo.span(inside[key], offset)
        np.greater(hit, taken, out=hit)        # a maximum not yet claimed by an earlier tap
        np.logical_or(taken, hit, out=taken)
        _deposit(geo, sinks[key][0], offset, np.multiply(g, hit, out=routed))


def _blend_unread(dx, geo, keys, alpha, beta):
    """Input rows outside every window (stride > window) get gradient 0: dx = beta * dx there."""
    read = np.zeros(geo.in_spatial, bool)
    for key in keys:
        rows = geo.phase_rows(key)
        if rows is not None:
            read[rows[1][2:]] = True
    unread = (slice(None), slice(None), ~read)
    if beta == 0.0:
        dx[unread] = 0
    else:
        dx[unread] = (beta * dx[unread].astype(acc_dtype(dx.dtype))).astype(dx.dtype)


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
