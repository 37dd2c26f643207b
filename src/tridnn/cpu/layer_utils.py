"""Small pieces shared by the NumPy layers: accumulator dtypes, layout-keeping temporaries,
and the alpha/beta store."""
from __future__ import annotations

import threading

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


_SCRATCH = threading.local()


def scratch(tag: str, shape, dtype) -> np.ndarray:
    """An uninitialized C-order array reused across calls (one growing buffer per tag
    and thread). Large temporaries that are freshly allocated on every call cost page
    faults comparable to the arithmetic itself; layers keep theirs here instead, as a
    GPU library keeps a workspace. Two live temporaries of one call need two tags."""
    pool = getattr(_SCRATCH, "pool", None)
    if pool is None:
        pool = _SCRATCH.pool = {}
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = pool.get(tag)
    if buf is None or buf.nbytes < nbytes:
        buf = pool[tag] = np.empty(max(nbytes, 1), np.uint8)
    return buf[:nbytes].view(dtype).reshape(shape)


CHUNK_ELEMENTS = 1 << 19  # ~2 MB of float32 input per chunk: the chunk's temporaries stay in cache


def batch_channel_chunks(x: np.ndarray, target: int | None = None, min_channels: int = 1):
    """(batch slice, channel slice) blocks of a (N, C, ...) array of about ``target``
    elements each. A layer whose math is independent per (n, c) runs block by block, so
    its many NumPy passes hit cache instead of memory. Channels-innermost arrays keep
    at least ``min_channels`` channels per block (short inner loops are slow)."""
    target = CHUNK_ELEMENTS if target is None else target
    n, c = x.shape[:2]
    per_nc = max(1, int(np.prod(x.shape[2:], dtype=np.int64)))
    channels_last = x.ndim > 2 and x.strides[1] < min(x.strides[2:])
    cb = max(1, min(c, target // per_nc))
    if channels_last:  # whole images keep blocks packed (one long run per row of pixels)
        cb = c if per_nc * c <= 4 * target else min(c, max(cb, min_channels))
    nb = max(1, min(n, target // (per_nc * cb))) if cb == c else 1
    for n0 in range(0, n, nb):
        for c0 in range(0, c, cb):
            yield slice(n0, min(n, n0 + nb)), slice(c0, min(c, c0 + cb))


def scratch_like(tag: str, a: np.ndarray, dtype=None) -> np.ndarray:
    """A scratch array shaped like ``a`` in ``a``'s memory order (see ``scratch``)."""
    order = sorted(range(a.ndim), key=lambda i: -abs(a.strides[i]))
    phys = scratch(tag, tuple(a.shape[i] for i in order), dtype or a.dtype)
    return phys.transpose(np.argsort(order))
