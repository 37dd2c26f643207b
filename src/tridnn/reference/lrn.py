"""Float64 reference cross-channel LRN: one channel at a time, windows written out."""
from __future__ import annotations

import numpy as np


def _scale(x, n, alpha, k):
    c = x.shape[1]
    s = np.empty_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - (n - 1) // 2), min(c - 1, ch + n // 2)
        s[:, ch] = k + alpha / n * (x[:, lo:hi + 1] ** 2).sum(axis=1)
    return s


def lrn_forward(x, n, alpha, beta, k):
    x = np.asarray(x, np.float64)
    return x * _scale(x, n, alpha, k) ** -beta


def lrn_backward(x, dy, n, alpha, beta, k):
    """The gradient of sum(lrn_forward(x) * dy), summed over every output channel's window."""
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    s = _scale(x, n, alpha, k)
    c = x.shape[1]
    dx = dy * s ** -beta
    for out_ch in range(c):
        lo, hi = max(0, out_ch - (n - 1) // 2), min(c - 1, out_ch + n // 2)
        common = dy[:, out_ch] * x[:, out_ch] * -beta * s[:, out_ch] ** (-beta - 1) * alpha / n
        for j in range(lo, hi + 1):
            dx[:, j] += common * 2 * x[:, j]
    return dx
