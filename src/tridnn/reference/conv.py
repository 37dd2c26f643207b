"""Float64 reference convolutions, written to be obviously right, not fast.

One loop over the kernel taps; each tap is a strided slice of the padded input and
an einsum over channels within each group. The backward passes are the exact
adjoints of the same loop (scatter for data, gather for filter).
"""
from __future__ import annotations

import numpy as np


def _setup(x_shape, w_shape, stride, pad_pre, pad_post, dilation, groups):
    nd = len(x_shape) - 2
    as_t = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd
    stride, dilation, pad_pre = as_t(stride), as_t(dilation), as_t(pad_pre)
    pad_post = pad_pre if pad_post is None else as_t(pad_post)
    kernel = w_shape[2:]
    out = tuple((i + a + b - d * (k - 1) - 1) // s + 1
                for i, k, s, a, b, d in zip(x_shape[2:], kernel, stride, pad_pre, pad_post, dilation))
    return nd, stride, dilation, pad_pre, pad_post, kernel, out


def _tap_slices(tap, dilation, stride, out):
    return tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, s, o in zip(tap, dilation, stride, out))


def _flip(w, mode):
    if mode in ("convolution", "CONVOLUTION", 0):
        return w[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)]
    return w


def conv_forward(x, w, stride=1, pad_pre=0, pad_post=None, dilation=1, groups=1,
                 mode="cross_correlation"):
    """y[n, k, o] = sum over c, taps of x_padded[n, g*Cg + c, o*stride + tap*dilation] * w[k, c, tap]."""
    x = np.asarray(x, np.float64)
    w = _flip(np.asarray(w, np.float64), mode)
    nd, stride, dilation, pad_pre, pad_post, kernel, out = _setup(
        x.shape, w.shape, stride, pad_pre, pad_post, dilation, groups)
    n, c = x.shape[:2]
    k = w.shape[0]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pad_pre, pad_post)))
    xg = xp.reshape(n, groups, c // groups, *xp.shape[2:])
    wg = w.reshape(groups, k // groups, c // groups, *kernel)
    y = np.zeros((n, groups, k // groups, *out))
    for tap in np.ndindex(*kernel):
        patch = xg[(Ellipsis,) + _tap_slices(tap, dilation, stride, out)]
        y += np.einsum("ngc...,gkc->ngk...", patch, wg[(Ellipsis,) + tap])
    return y.reshape(n, k, *out)


def conv_backward_data(dy, w, x_shape, stride=1, pad_pre=0, pad_post=None, dilation=1, groups=1,
                       mode="cross_correlation"):
    """dx = the adjoint of conv_forward with respect to x (the transposed convolution)."""
    dy = np.asarray(dy, np.float64)
    w = _flip(np.asarray(w, np.float64), mode)
    nd, stride, dilation, pad_pre, pad_post, kernel, out = _setup(
        x_shape, w.shape, stride, pad_pre, pad_post, dilation, groups)
    n, c = x_shape[:2]
    k = w.shape[0]
    padded = tuple(i + a + b for i, a, b in zip(x_shape[2:], pad_pre, pad_post))
    dxg = np.zeros((n, groups, c // groups, *padded))
    dyg = dy.reshape(n, groups, k // groups, *out)
    wg = w.reshape(groups, k // groups, c // groups, *kernel)
    for tap in np.ndindex(*kernel):
        dxg[(Ellipsis,) + _tap_slices(tap, dilation, stride, out)] += np.einsum(
            "ngk...,gkc->ngc...", dyg, wg[(Ellipsis,) + tap])
    crop = tuple(slice(a, a + i) for a, i in zip(pad_pre, x_shape[2:]))
    return dxg.reshape(n, c, *padded)[(slice(None), slice(None)) + crop]


def conv_backward_filter(x, dy, w_shape, stride=1, pad_pre=0, pad_post=None, dilation=1, groups=1,
                         mode="cross_correlation"):
    """dw = the adjoint of conv_forward with respect to w."""
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    nd, stride, dilation, pad_pre, pad_post, kernel, out = _setup(
        x.shape, w_shape, stride, pad_pre, pad_post, dilation, groups)
    n, c = x.shape[:2]
    k = w_shape[0]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pad_pre, pad_post)))
    xg = xp.reshape(n, groups, c // groups, *xp.shape[2:])
    dyg = dy.reshape(n, groups, k // groups, *out)
    dw = np.zeros((groups, k // groups, c // groups, *kernel))
    for tap in np.ndindex(*kernel):
        patch = xg[(Ellipsis,) + _tap_slices(tap, dilation, stride, out)]
        positions = int(np.prod(out))
        dw[(Ellipsis,) + tap] = np.einsum("ngcp,ngkp->gkc", patch.reshape(n, groups, c // groups, positions),
                                          dyg.reshape(n, groups, k // groups, positions))
    return _flip(dw.reshape(k, c // groups, *kernel), mode)


def conv_backward_bias(dy):
    """db[k] = sum of dy over every axis but the channel axis."""
    dy = np.asarray(dy, np.float64)
    return dy.sum(axis=(0,) + tuple(range(2, dy.ndim)))
