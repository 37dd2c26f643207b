"""Float64 reference pooling: an explicit loop over output positions and their windows."""
from __future__ import annotations

import math

import numpy as np


def _windows(in_sizes, window, padding, stride):
    out = tuple((i + 2 * p - w) // s + 1 for i, w, p, s in zip(in_sizes, window, padding, stride))
    for idx in np.ndindex(*out):
        start = [o * s - p for o, s, p in zip(idx, stride, padding)]
        cells = [pos for pos in np.ndindex(*window)]
        inside = [tuple(st + t for st, t in zip(start, pos)) for pos in cells]
        inside = [q for q in inside if all(0 <= v < n for v, n in zip(q, in_sizes))]
        yield idx, inside, out


def _first_max(vals, propagate_nan):
    """Index of the first maximum; NaN is the maximum when propagated, else skipped. None
    for an all-NaN window without propagation: it has no maximum, so no element takes its
    gradient (cuDNN 9.19 does the same; docs/reliability.md)."""
    nan = np.isnan(vals)
    if propagate_nan and nan.any():
        return int(np.argmax(nan))
    if nan.all():
        return None
    return int(np.flatnonzero(vals == np.nanmax(vals))[0])  # (NaN equals nothing)


def pooling_forward(x, mode, window, padding, stride, propagate_nan=False):
    """mode: 0 max, 1 average including padding, 2 average excluding padding, 3 max."""
    x = np.asarray(x, np.float64)
    results = {}
    out = None
    for idx, inside, out in _windows(x.shape[2:], window, padding, stride):
        vals = np.stack([x[(slice(None), slice(None)) + q] for q in inside], axis=-1)
        if mode in (0, 3):
            if propagate_nan:
                results[idx] = np.max(vals, -1)
            else:  # NaN skipped; a window of only NaN has no number: -inf, the empty max
                results[idx] = np.where(np.isnan(vals).all(-1), -np.inf, np.fmax.reduce(vals, -1))
        elif mode == 1:
            results[idx] = vals.sum(-1) / math.prod(window)
        else:
            results[idx] = vals.sum(-1) / len(inside)
    y = np.empty(x.shape[:2] + out)
    for idx, v in results.items():
        y[(slice(None), slice(None)) + idx] = v
    return y


def pooling_backward(x, dy, mode, window, padding, stride, propagate_nan=False):
    """The adjoint; max sends each window's gradient to its first maximum (row-major)."""
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    dx = np.zeros_like(x)
    n, c = x.shape[:2]
    for idx, inside, _ in _windows(x.shape[2:], window, padding, stride):
        g = dy[(slice(None), slice(None)) + idx]
        if mode in (0, 3):
            for b in range(n):
                for ch in range(c):
                    vals = np.array([x[(b, ch) + q] for q in inside])
                    best = _first_max(vals, propagate_nan)
                    if best is not None:
                        dx[(b, ch) + inside[best]] += g[b, ch]
        else:
            count = math.prod(window) if mode == 1 else len(inside)
            for q in inside:
                dx[(slice(None), slice(None)) + q] += g / count
    return dx


def adaptive_pooling_forward(x, out_sizes, mode):
    """mode 0 max, 1 average; bins [floor(i*in/out), ceil((i+1)*in/out))."""
    x = np.asarray(x, np.float64)
    y = np.empty(x.shape[:2] + tuple(out_sizes))
    for idx in np.ndindex(*out_sizes):
        box = tuple(slice(i * n // o, -(-(i + 1) * n // o)) for i, n, o in zip(idx, x.shape[2:], out_sizes))
        patch = x[(slice(None), slice(None)) + box].reshape(x.shape[0], x.shape[1], -1)
        y[(slice(None), slice(None)) + idx] = patch.max(-1) if mode == 0 else patch.mean(-1)
    return y


def adaptive_pooling_backward(x, dy, mode):
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    dx = np.zeros_like(x)
    out_sizes = dy.shape[2:]
    for idx in np.ndindex(*out_sizes):
        box = tuple(slice(i * n // o, -(-(i + 1) * n // o)) for i, n, o in zip(idx, x.shape[2:], out_sizes))
        for b in range(x.shape[0]):
            for ch in range(x.shape[1]):
                patch = x[(b, ch) + box]
                g = dy[(b, ch) + idx]
                sub = dx[(b, ch) + box]
                if mode == 0:
                    flat = patch.reshape(-1)
                    first = int(np.argmax(np.isnan(flat))) if np.isnan(flat).any() else int(np.argmax(flat))
                    sub[np.unravel_index(first, patch.shape)] += g
                else:
                    sub += g / patch.size
    return dx
