"""Small pieces shared by the NumPy layers: accumulator dtypes, layout-keeping temporaries,
and the alpha/beta store."""
from __future__ import annotations

import numpy as np

from .common import store  # noqa: F401  (re-exported: out = alpha * acc + beta * out)


def acc_dtype(dtype) -> np.dtype:
    """float64 for float64 data, float32 for everything else (float16/bfloat16 included)."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def to_acc(a: np.ndarray) -> np.ndarray:
    """``a`` in its accumulator dtype, in ``a``'s memory order; no copy when already there."""
    return a.astype(acc_dtype(a.dtype), copy=False)


def empty_like(a: np.ndarray, dtype=None) -> np.ndarray:
    """An uninitialized array shaped like ``a`` in ``a``'s memory order (so elementwise
    work on NHWC views stays unit-stride)."""
    return np.empty_like(a, dtype=dtype or a.dtype, order="K")


def zeros_like(a: np.ndarray, dtype=None) -> np.ndarray:
    return np.zeros_like(a, dtype=dtype or a.dtype, order="K")


def blend(out: np.ndarray, value: np.ndarray, alpha: float, beta: float) -> None:
    """out = alpha * value + beta * out; ``value`` may be modified (it is a temporary)."""
    if value.dtype != acc_dtype(out.dtype) or not value.flags.writeable:
        value = value.astype(acc_dtype(out.dtype))
    store(out, value, alpha, beta)
