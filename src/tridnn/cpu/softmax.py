"""Softmax and log-softmax in NumPy, over the channels (CHANNEL) or over everything but
the batch (INSTANCE).

ACCURATE and LOG subtract each row's maximum first, so huge inputs do not overflow and
-inf entries give exactly 0 (LOG: -inf); a row that is entirely -inf has no softmax and
gives NaN. FAST skips the subtraction, as cuDNN's does: it overflows for inputs beyond
exp's range (about 88 in float32).
"""
from __future__ import annotations

import numpy as np

from .layer_utils import acc_dtype, blend, empty_like

FAST, ACCURATE, LOG = 0, 1, 2
INSTANCE, CHANNEL = 0, 1


def _axes(ndim: int, mode: int):
    return (1,) if int(mode) == CHANNEL else tuple(range(1, ndim))


def _target(out, alpha, beta):
    """Where to build the result: straight in ``out`` when nothing is blended and the
    dtype is the compute dtype, else a temporary in out's memory order."""
    direct = alpha == 1.0 and beta == 0.0 and out.dtype == acc_dtype(out.dtype)
    return out if direct else empty_like(out, acc_dtype(out.dtype)), direct


def softmax_forward(x, y, algo, mode, alpha, beta):
    """y = alpha * softmax(x) + beta * y (log-softmax for LOG)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        _forward(x, y, algo, mode, alpha, beta)


def _forward(x, y, algo, mode, alpha, beta):
    axes = _axes(x.ndim, mode)
    e, direct = _target(y, alpha, beta)
    work = x if x.dtype == e.dtype else x.astype(e.dtype)
    if int(algo) == FAST:
        np.exp(work, out=e)
    else:
        m = work.max(axis=axes, keepdims=True)
        np.subtract(work, m, out=e)
        if int(algo) == LOG:
            shifted = e.copy()
            np.exp(e, out=e)
            log_sum = np.log(e.sum(axis=axes, keepdims=True))
            np.subtract(shifted, log_sum, out=e)
            if not direct:
                blend(y, e, alpha, beta)
            return
        np.exp(e, out=e)
    total = e.sum(axis=axes, keepdims=True)
    np.multiply(e, np.reciprocal(total), out=e)
    if not direct:
        blend(y, e, alpha, beta)


def softmax_backward(y, dy, dx, algo, mode, alpha, beta):
    """dx = alpha * J^T dy + beta * dx: y * (dy - sum(dy * y)) for softmax,
    dy - exp(y) * sum(dy) for log-softmax (y is the forward output)."""
    with np.errstate(over="ignore", invalid="ignore"):
        _backward(y, dy, dx, algo, mode, alpha, beta)


def _backward(y, dy, dx, algo, mode, alpha, beta):
    axes = _axes(y.ndim, mode)
    g, direct = _target(dx, alpha, beta)
    yw = y if y.dtype == g.dtype else y.astype(g.dtype)
    dyw = dy if dy.dtype == g.dtype else dy.astype(g.dtype)
    if int(algo) == LOG:
        total = dyw.sum(axis=axes, keepdims=True)
        np.exp(yw, out=g)
        np.multiply(g, total, out=g)
        np.subtract(dyw, g, out=g)
    else:
        np.multiply(dyw, yw, out=g)
        total = g.sum(axis=axes, keepdims=True)
        np.subtract(dyw, total, out=g)
        np.multiply(g, yw, out=g)
    if not direct:
        blend(dx, g, alpha, beta)
