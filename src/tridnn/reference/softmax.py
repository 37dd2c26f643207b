"""Float64 reference softmax: rows gathered explicitly, each computed on its own."""
from __future__ import annotations

import numpy as np


def _rows(x, mode):
    """x as (rows, row length): CHANNEL rows are the C values at one (n, position);
    INSTANCE rows are everything of one n."""
    if mode == 1:
        moved = np.moveaxis(x, 1, -1)
        return moved.reshape(-1, x.shape[1]), lambda r: np.moveaxis(r.reshape(moved.shape), -1, 1)
    return x.reshape(x.shape[0], -1), lambda r: r.reshape(x.shape)


def softmax_forward(x, algorithm, mode):
    x = np.asarray(x, np.float64)
    rows, back = _rows(x, mode)
    out = np.empty_like(rows)
    for i, r in enumerate(rows):
        m = r.max() if algorithm != 0 else 0.0
        e = np.exp(r - m)
        out[i] = (r - m - np.log(e.sum())) if algorithm == 2 else e / e.sum()
    return back(out)


def softmax_backward(y, dy, algorithm, mode):
    y = np.asarray(y, np.float64)
    dy = np.asarray(dy, np.float64)
    yr, back = _rows(y, mode)
    dr, _ = _rows(dy, mode)
    out = np.empty_like(yr)
    for i, (a, g) in enumerate(zip(yr, dr)):
        if algorithm == 2:
            out[i] = g - np.exp(a) * g.sum()
        else:
            jac = np.diag(a) - np.outer(a, a)
            out[i] = jac.T @ g
    return back(out)
