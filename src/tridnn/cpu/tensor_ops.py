"""cuDNN's tensor arithmetic in NumPy: add (with broadcasting), op_tensor, reductions with
indices, transform (layout change), set and scale.

Broadcast inputs arrive as zero-stride views of the output's shape, so every op here
is one NumPy expression over equal shapes; math runs in float32 (float64 for float64
data) and is rounded once into the output.
"""
from __future__ import annotations

import numpy as np

from .layer_utils import acc_dtype, blend

OP_ADD, OP_MUL, OP_MIN, OP_MAX, OP_SQRT, OP_NOT = range(6)
RED_ADD, RED_MUL, RED_MIN, RED_MAX, RED_AMAX, RED_AVG, RED_NORM1, RED_NORM2, RED_MUL_NO_ZEROS = range(9)


def _acc(a, dt):
    return a if a.dtype == dt else a.astype(dt)


def add_tensor(a, c, alpha, beta):
    """c = alpha * a + beta * c (a broadcast to c's shape)."""
    if alpha == 1.0 and beta == 1.0 and a.dtype == c.dtype == acc_dtype(c.dtype):
        np.add(c, a, out=c)
        return
    dt = acc_dtype(c.dtype)
    blend(c, np.array(_acc(a, dt), dtype=dt, copy=True), alpha, beta)


def op_tensor(op, a, b, c, alpha1, alpha2, beta, propagate_nan):
    """c = op(alpha1 * a, alpha2 * b) + beta * c; SQRT and NOT read only a."""
    dt = acc_dtype(c.dtype)
    op = int(op)
    left = _acc(a, dt) * dt.type(alpha1)
    if op == OP_SQRT:
        with np.errstate(invalid="ignore"):
            value = np.sqrt(left)
    elif op == OP_NOT:
        value = dt.type(1) - left
    else:
        right = _acc(b, dt) * dt.type(alpha2)
        if op == OP_ADD:
            value = left + right
        elif op == OP_MUL:
            value = left * right
        elif op == OP_MIN:
            value = (np.minimum if propagate_nan else np.fmin)(left, right)
        else:
            value = (np.maximum if propagate_nan else np.fmax)(left, right)
    blend(c, value, 1.0, beta)


def reduced_axes(a_shape, c_shape) -> tuple[int, ...]:
    return tuple(i for i, (sa, sc) in enumerate(zip(a_shape, c_shape)) if sc == 1 and sa != 1)


def _first_extreme(values, axes, pick_max, propagate_nan):
    """Row-major flat index (within the reduced dims) of the first extreme element."""
    keep = [i for i in range(values.ndim) if i not in axes]
    rows = np.transpose(values, keep + list(axes)).reshape([values.shape[i] for i in keep] + [-1])
    nan = np.isnan(rows)
    if nan.any():
        if propagate_nan:
            filler = rows
        else:
            filler = np.where(nan, -np.inf if pick_max else np.inf, rows)
        index = filler.argmax(axis=-1) if pick_max else filler.argmin(axis=-1)
        if propagate_nan:
            has = nan.any(axis=-1)
            index = np.where(has, nan.argmax(axis=-1), index)
    else:
        index = rows.argmax(axis=-1) if pick_max else rows.argmin(axis=-1)
    out_shape = [1 if i in axes else values.shape[i] for i in range(values.ndim)]
    return index.reshape(out_shape)


def reduce_tensor(op, a, c, indices, workspace, alpha, beta, propagate_nan):
    """c = alpha * reduce(a over the dims where c is 1 and a is not) + beta * c; the
    reduction is built in ``workspace`` (an accumulator of c's shape) before the blend."""
    op = int(op)
    dt = acc_dtype(c.dtype)
    axes = reduced_axes(a.shape, c.shape)
    acc = workspace if workspace is not None else np.empty(c.shape, dt)
    work = _acc(a, dt)
    if not axes:
        reduced = work.reshape(c.shape)
        if op in (RED_AMAX, RED_NORM1, RED_NORM2):
            reduced = np.abs(reduced)
        elif op == RED_MUL_NO_ZEROS:
            reduced = np.where(reduced == 0, dt.type(1), reduced)
        acc[...] = reduced
    elif op == RED_ADD:
        np.sum(work, axis=axes, keepdims=True, out=acc)
    elif op == RED_MUL:
        np.prod(work, axis=axes, keepdims=True, out=acc)
    elif op in (RED_MIN, RED_MAX, RED_AMAX):
        values = np.abs(work) if op == RED_AMAX else work
        pick_max = op != RED_MIN
        if propagate_nan:
            (np.max if pick_max else np.min)(values, axis=axes, keepdims=True, out=acc)
        else:
            with np.errstate(invalid="ignore"), _quiet_all_nan():
                acc[...] = (np.nanmax if pick_max else np.nanmin)(values, axis=axes, keepdims=True)
        if indices is not None:
            indices[...] = _first_extreme(values, axes, pick_max, propagate_nan)
    elif op == RED_AVG:
        np.mean(work, axis=axes, keepdims=True, out=acc)
    elif op == RED_NORM1:
        np.sum(np.abs(work), axis=axes, keepdims=True, out=acc)
    elif op == RED_NORM2:
        np.sqrt(np.sum(np.square(work), axis=axes, keepdims=True), out=acc)
    elif op == RED_MUL_NO_ZEROS:
        np.prod(np.where(work == 0, dt.type(1), work), axis=axes, keepdims=True, out=acc)
    else:  # pragma: no cover - the API validated op
        raise AssertionError(op)
    if indices is not None and not axes:
        indices[...] = 0
    blend(c, acc, alpha, beta)


class _quiet_all_nan:
    """nanmin/nanmax warn on all-NaN slices (the result is NaN, which is what we want)."""

    def __enter__(self):
        import warnings
        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


def transform_tensor(x, y, alpha, beta):
    """y = alpha * x + beta * y where x and y differ in layout (and possibly dtype)."""
    if alpha == 1.0 and beta == 0.0:
        np.copyto(y, x, casting="unsafe")
        return
    dt = acc_dtype(y.dtype) if y.dtype != np.float64 and x.dtype != np.float64 else np.dtype(np.float64)
    blend(y, np.array(x, dtype=dt, copy=True), alpha, beta)


def set_tensor(y, value):
    y[...] = value


def scale_tensor(y, alpha):
    dt = acc_dtype(y.dtype)
    y[...] = _acc(y, dt) * dt.type(alpha)
