"""Cross-channel LRN in NumPy: y = x * (k + alpha/n * S)^-beta, where S sums x^2 over the
channel window [c - (n-1)//2, c + n//2] (clipped at the edges). The window sums are n
shifted adds along the channel axis (n <= 16), which stays exact where a running
cumulative sum would cancel."""
from __future__ import annotations

import numpy as np

from .layer_utils import acc_dtype, blend, zeros_like


def _window_sum(v, before: int, after: int):
    """out[:, c] = sum of v[:, c - before : c + after + 1] along channels (clipped)."""
    out = zeros_like(v)
    channels = v.shape[1]
    for shift in range(-before, after + 1):
        lo, hi = max(0, -shift), min(channels, channels - shift)
        if hi > lo:
            out[:, lo:hi] += v[:, lo + shift:hi + shift]
    return out


def _scale(xw, n, alpha, k):
    return k + (alpha / n) * _window_sum(np.square(xw), (n - 1) // 2, n // 2)


def lrn_cross_channel_forward(x, y, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha, beta):
    dt = acc_dtype(y.dtype)
    xw = x.astype(dt)
    s = _scale(xw, lrn_n, dt.type(lrn_alpha), dt.type(lrn_k))
    blend(y, xw * np.power(s, dt.type(-lrn_beta)), alpha, beta)


def lrn_cross_channel_backward(y, dy, x, dx, lrn_n, lrn_alpha, lrn_beta, lrn_k, alpha, beta):
    """dx = dy * s^-beta - (2 alpha beta / n) * x * sum over the windows containing c of
    dy * y / s (the transposed window: before and after swap)."""
    dt = acc_dtype(dx.dtype)
    xw = x.astype(dt)
    s = _scale(xw, lrn_n, dt.type(lrn_alpha), dt.type(lrn_k))
    g = dy.astype(dt)
    ratio = g * y.astype(dt) / s
    back = _window_sum(ratio, lrn_n // 2, (lrn_n - 1) // 2)
    out = g * np.power(s, dt.type(-lrn_beta)) - dt.type(2.0 * lrn_alpha * lrn_beta / lrn_n) * xw * back
    blend(dx, out, alpha, beta)
