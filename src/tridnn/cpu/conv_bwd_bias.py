"""Backward bias on the CPU: db = alpha * sum of dy over batch and space + beta * db."""
from __future__ import annotations

import numpy as np

from .common import store


def backward_bias(dy: np.ndarray, db: np.ndarray, alpha: float, beta: float) -> None:
    """Sums in float32 (float64 for double data), pairwise, and rounds once into db."""
    acc_dtype = np.float64 if dy.dtype == np.float64 else np.float32
    if dy.size == 0:
        total = np.zeros(db.shape, acc_dtype)
    else:
        total = dy.sum(axis=(0,) + tuple(range(2, dy.ndim)), dtype=acc_dtype).reshape(db.shape)
    store(db, total, alpha, beta)
