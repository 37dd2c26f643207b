"""Softmax and log-softmax in NumPy, over the channels (CHANNEL) or over everything but
the batch (INSTANCE).

ACCURATE and LOG subtract each row's maximum first, so huge inputs do not overflow and
-inf entries give exactly 0 (LOG: -inf); a row that is entirely -inf has no softmax and
gives NaN. FAST skips the subtraction, as cuDNN's does: it overflows for inputs beyond
exp's range (about 88 in float32).
"""
from __future__ import annotations

import numpy as np

from .layer_utils import CHUNK_ELEMENTS, acc_dtype, blend, even_step, run_blocks, scratch, scratch_like

FAST, ACCURATE, LOG = 0, 1, 2
INSTANCE, CHANNEL = 0, 1


def _axes(ndim: int, mode: int):
    return (1,) if int(mode) == CHANNEL else tuple(range(1, ndim))


def _target(out, alpha, beta):
    """Where to build the result: straight in ``out`` when nothing is blended and the
    dtype is the compute dtype, else a scratch array in out's memory order."""
    direct = alpha == 1.0 and beta == 0.0 and out.dtype == acc_dtype(out.dtype)
    return out if direct else scratch_like("softmax.out", out, acc_dtype(out.dtype)), direct


def _row_scratch(a, axes):
    """A scratch array for one value per softmax row of ``a`` (``axes`` kept as size 1),
    in ``a``'s memory order so the reductions write it with unit stride."""
    shape = tuple(1 if d in axes else size for d, size in enumerate(a.shape))
    order = sorted(range(a.ndim), key=lambda i: -abs(a.strides[i]))
    phys = scratch("softmax.row", tuple(shape[i] for i in order), a.dtype)
    return phys.transpose(np.argsort(order))


def _blocks(x, mode):
    """Index tuples of cache-sized blocks that hold whole softmax rows: images (and, for
    CHANNEL, bands of the first spatial dim, since each position is its own row)."""
    n = x.shape[0]
    per_n = max(1, x.size // max(n, 1))
    channels_outer = x.ndim > 2 and x.strides[1] > max(x.strides[2:])
    if int(mode) == CHANNEL and channels_outer:
        # reductions across strided channel planes vectorize over whole planes: blocks are
        # whole images (measured: bands of rows run 1.2-3x slower, whole images 0.8x the
        # unblocked time)
        for i in range(n):
            yield (slice(i, i + 1),)
        return
    if int(mode) == CHANNEL and x.ndim > 2 and per_n > CHUNK_ELEMENTS:
        rows = x.shape[2]
        band = even_step(rows, max(1, rows * CHUNK_ELEMENTS // per_n))
        for i in range(n):
            for r in range(0, rows, band):
                yield (slice(i, i + 1), slice(None), slice(r, min(rows, r + band)))
        return
    nb = max(1, min(n, CHUNK_ELEMENTS // per_n))
    for i in range(0, n, nb):
        yield (slice(i, min(n, i + nb)),)


def softmax_forward(x, y, algo, mode, alpha, beta):
    """y = alpha * softmax(x) + beta * y (log-softmax for LOG), block by block, the blocks
    spread over the worker threads."""
    def block(index):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            _forward(x[index], y[index], algo, mode, alpha, beta)

    run_blocks(block, _blocks(x, mode))


def _forward(x, y, algo, mode, alpha, beta):
    axes = _axes(x.ndim, mode)
    e, direct = _target(y, alpha, beta)
    work = x if x.dtype == e.dtype else x.astype(e.dtype)
    row = _row_scratch(e, axes)                 # one value per softmax row
    if int(algo) == FAST:
        np.exp(work, out=e)
    else:
        np.maximum.reduce(work, axis=axes, keepdims=True, out=row)
        np.subtract(work, row, out=e)
        if int(algo) == LOG:
            expd = np.exp(e, out=scratch_like("softmax.exp", e))
            np.add.reduce(expd, axis=axes, keepdims=True, out=row)
            e -= np.log(row, out=row)
            if not direct:
                blend(y, e, alpha, beta)
            return
        np.exp(e, out=e)
    np.add.reduce(e, axis=axes, keepdims=True, out=row)
    e *= np.reciprocal(row, out=row)
    if not direct:
        blend(y, e, alpha, beta)


def softmax_backward(y, dy, dx, algo, mode, alpha, beta):
    """dx = alpha * J^T dy + beta * dx: y * (dy - sum(dy * y)) for softmax,
    dy - exp(y) * sum(dy) for log-softmax (y is the forward output)."""
    def block(index):
        with np.errstate(over="ignore", invalid="ignore"):
            _backward(y[index], dy[index], dx[index], algo, mode, alpha, beta)

    run_blocks(block, _blocks(y, mode))


def _backward(y, dy, dx, algo, mode, alpha, beta):
    axes = _axes(y.ndim, mode)
    g, direct = _target(dx, alpha, beta)
    yw = y if y.dtype == g.dtype else y.astype(g.dtype)
    dyw = dy if dy.dtype == g.dtype else dy.astype(g.dtype)
    total = _row_scratch(g, axes)
    if int(algo) == LOG:
        np.add.reduce(dyw, axis=axes, keepdims=True, out=total)
        np.exp(yw, out=g)
        np.multiply(g, total, out=g)
        np.subtract(dyw, g, out=g)
    else:
        np.multiply(dyw, yw, out=g)
        np.add.reduce(g, axis=axes, keepdims=True, out=total)
        np.subtract(dyw, total, out=g)
        np.multiply(g, yw, out=g)
    if not direct:
        blend(dx, g, alpha, beta)
