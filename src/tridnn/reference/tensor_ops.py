"""Float64 reference tensor ops: explicit broadcasting and per-output-element reductions."""
from __future__ import annotations

import numpy as np


def op_tensor(op, a, b, alpha1, alpha2, propagate_nan=False):
    a = alpha1 * np.asarray(a, np.float64)
    b = alpha2 * np.asarray(b, np.float64)
    if op == 0:
        return a + b
    if op == 1:
        return a * b
    if op in (2, 3):
        if propagate_nan:
            return np.minimum(a, b) if op == 2 else np.maximum(a, b)
        return np.fmin(a, b) if op == 2 else np.fmax(a, b)
    if op == 4:
        with np.errstate(invalid="ignore"):
            return np.sqrt(a)
    if op == 5:
        return 1 - a
    raise ValueError(op)


def reduce_tensor(op, a, c_shape):
    """(values, indices): each output element reduces the elements of a it covers;
    indices are row-major positions within the reduced dims (first extreme)."""
    a = np.asarray(a, np.float64)
    axes = [i for i, (sa, sc) in enumerate(zip(a.shape, c_shape)) if sc == 1 and sa != 1]
    values = np.empty(c_shape)
    indices = np.zeros(c_shape, np.int64)
    for out in np.ndindex(*c_shape):
        sel = tuple(slice(None) if i in axes else out[i] for i in range(a.ndim))
        block = a[sel]
        flat = block.reshape(-1) if block.ndim else block.reshape(1)
        if op == 0:
            v = flat.sum()
        elif op == 1:
            v = flat.prod()
        elif op in (2, 3, 4):
            vals = np.abs(flat) if op == 4 else flat
            i = int(np.argmin(vals)) if op == 2 else int(np.argmax(vals))
            v, indices[out] = vals[i], i
        elif op == 5:
            v = flat.mean()
        elif op == 6:
            v = np.abs(flat).sum()
        elif op == 7:
            v = np.sqrt((flat ** 2).sum())
        elif op == 8:
            v = np.where(flat == 0, 1.0, flat).prod()
        else:
            raise ValueError(op)
        values[out] = v
    return values, indices
