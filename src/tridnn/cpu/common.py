"""Pieces shared by the NumPy convolution algorithms: geometry and the alpha/beta store."""
from __future__ import annotations

import numpy as np


def store(out: np.ndarray, acc: np.ndarray, alpha: float, beta: float, epilogue=None,
          index: tuple = ()) -> None:
    """out = alpha * acc + beta * out, computed in acc's dtype and rounded once.

    ``acc`` is the algorithm's own temporary and is modified. With beta == 0, out is
    never read, so NaN or garbage in it cannot leak into the result. ``epilogue``
    (fused bias/activation/residual) maps the blended accumulator to the final value
    before the single rounding; ``index`` tells it which part of the whole output
    ``out`` is (a tuple of slices), so it can pick the matching bias and residual."""
    if alpha != 1.0:
        np.multiply(acc, alpha, out=acc)
    if beta != 0.0:
        acc += beta * out.astype(acc.dtype)
    if epilogue is not None:
        acc = epilogue(acc, index)
    out[...] = acc


def tap_box(tap: int, size_in: int, size_out: int, stride: int, dilation: int, pad: int):
    """For one kernel tap along one dim: the output range [lo, hi) whose input index
    o*stride + tap*dilation - pad lands inside [0, size_in), and the first input index;
    None when every output of this tap reads padding."""
    offset = tap * dilation - pad
    lo = max(0, -(offset // stride))  # ceil(-offset / stride), at least 0
    last = size_in - 1 - offset
    hi = min(size_out, last // stride + 1) if last >= 0 else 0
    if hi <= lo:
        return None
    return lo, hi, offset + lo * stride


def tap_views(problem, x: np.ndarray, tap):
    """(output slices, input view) of one kernel tap, or None when it only hits padding.

    The input view has the output box's spatial shape, so that
    ``acc[out_slices] += f(x_view)`` applies the tap to every in-bounds output."""
    out_sl, in_sl = [], []
    for t, i, o, s, d, p in zip(tap, problem.in_spatial, problem.out_spatial, problem.stride,
                                problem.dilation, problem.pad_pre):
        box = tap_box(t, i, o, s, d, p)
        if box is None:
            return None
        lo, hi, first = box
        out_sl.append(slice(lo, hi))
        in_sl.append(slice(first, first + (hi - lo - 1) * s + 1, s))
    return tuple(out_sl), x[(Ellipsis,) + tuple(in_sl)]


def taps(problem):
    return np.ndindex(*problem.kernel)


def batch_block(problem, bytes_per_image: int, budget: int = 8 << 20) -> int:
    """Images per block so that a block's temporaries stay near ``budget`` bytes."""
    return max(1, min(problem.n, budget // max(bytes_per_image, 1)))


def split_groups(a: np.ndarray, groups: int, axis: int = 1) -> np.ndarray:
    """View axis ``axis`` (channels) as (groups, channels // groups); never copies."""
    shape = a.shape[:axis] + (groups, a.shape[axis] // groups) + a.shape[axis + 1:]
    return a.reshape(shape)


# -- helpers for the GEMM and transform methods ---------------------------------------
# Rough machine rates for the cost models (seconds = flops / rate + bytes / bandwidth).
# They only need to rank algorithms; benchmarks/bench_cpu_conv.py measures the truth.
GEMM_RATE = 300e9       # NumPy matmul on large, well-shaped operands (float32, 2 cores)
SMALL_GEMM_RATE = 60e9  # matmul with a small inner or outer dim
BANDWIDTH = 4e9         # bytes/s through a NumPy elementwise pass (read + write)
MATMUL_CALL = 3e-6      # seconds of overhead per BLAS call inside a batched np.matmul


def gemm_rate(m: int, n: int, k: int) -> float:
    """Predicted flop rate of an (m x k) @ (k x n) product: GEMM_RATE when every dim is
    at least 64, falling in proportion to the smallest (a 1-wide product is a memory-bound
    scaling, not a GEMM)."""
    return GEMM_RATE * min(1.0, max(min(m, n, k), 1) / 64)


def prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def gemm_geometry(problem) -> tuple[int, int, int, int, int]:
    """(groups, channels per group, filters per group, taps, output positions): the
    sizes of the per-group GEMMs that the forward GEMM methods run."""
    g = problem.groups
    return g, problem.w.c, problem.k // g, prod(problem.kernel), prod(problem.out_spatial)


def channels_last(array_or_desc) -> bool:
    """True when the channel axis (1) has the smallest stride: NHWC-like memory order."""
    strides = array_or_desc.strides
    return len(strides) > 2 and strides[1] <= min(strides[2:])


def pad_into(buf: np.ndarray, x: np.ndarray, pre, post) -> None:
    """Copy x into buf (logical (N, C, *padded)) at offset ``pre``, zeroing only the borders.

    The copy also converts x's dtype to buf's (float16/bfloat16 -> float32)."""
    nd = len(pre)
    interior = tuple(slice(p, p + s) for p, s in zip(pre, x.shape[2:]))
    for axis in range(nd):
        lead = (slice(None),) * (2 + axis)
        if pre[axis]:
            buf[lead + (slice(0, pre[axis]),)] = 0
        if post[axis]:
            buf[lead + (slice(buf.shape[2 + axis] - post[axis], None),)] = 0
    buf[(slice(None), slice(None)) + interior] = x


def as_matrix(array: np.ndarray, shape, dtype) -> np.ndarray | None:
    """``array`` reshaped to ``shape`` without a copy, if it has dtype ``dtype``; else None."""
    if array.dtype != dtype:
        return None
    try:
        return array.reshape(shape, copy=False)
    except ValueError:
        return None


def writes_through(y: np.ndarray, acc_dtype, alpha: float, beta: float, epilogue) -> bool:
    """Whether a GEMM may write its result straight into y (no blend, no rounding)."""
    return alpha == 1.0 and beta == 0.0 and epilogue is None and y.dtype == acc_dtype


# -- a small pool of threads for block-parallel NumPy work -------------------------------
# NumPy's elementwise loops release the GIL, so independent blocks of an elementwise
# method (DIRECT) run in parallel on the cores that BLAS would otherwise use alone.
import os as _os
import threading as _threading

WORKERS = max(1, int(_os.environ.get("TRIDNN_NUM_THREADS", 0)) or min(2, _os.cpu_count() or 1))
_pool = None
_pool_lock = _threading.Lock()


def parallel_map(fn, items) -> list:
    """[fn(worker, item) for item in items], spread over WORKERS threads; worker in [0, WORKERS).

    Items are dealt round-robin, so worker w owns items w, w + WORKERS, ... and may
    reuse its own scratch buffers across them."""
    items = list(items)
    if WORKERS == 1 or len(items) < 2:
        return [fn(0, item) for item in items]
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="tridnn-cpu")
    futures = [_pool.submit(lambda w: [fn(w, item) for item in items[w::WORKERS]], w)
               for w in range(WORKERS)]
    results = [f.result() for f in futures]
    return [item for part in results for item in part]


# -- padded input and sliding windows (DIRECT, GEMM's channels-last unfold) ---------------
def read_extent(problem) -> tuple[int, ...]:
    """Extent of the padded input that the outputs actually read, per spatial dim."""
    return tuple((o - 1) * s + d * (k - 1) + 1 for o, s, d, k in
                 zip(problem.out_spatial, problem.stride, problem.dilation, problem.kernel))


def pack_padded(problem, x: np.ndarray, buf: np.ndarray) -> None:
    """buf (logical (b, C, *read_extent)) = x zero-padded, cropped to what the outputs read."""
    extent = read_extent(problem)
    post = tuple(max(0, e - i - p) for e, i, p in zip(extent, problem.in_spatial, problem.pad_pre))
    crop = tuple(slice(0, max(0, min(i, e - p)))
                 for i, e, p in zip(problem.in_spatial, extent, problem.pad_pre))
    pad_into(buf, x[(slice(None), slice(None)) + crop], problem.pad_pre, post)


def windows_channels_last(problem, xpad: np.ndarray) -> np.ndarray:
    """Every output's receptive field as one read-only view, (b, *out, G, *kernel, Cg), of a
    channels-last padded input xpad (b, *read_extent, C): copying it is a whole im2col."""
    nd, g = problem.nd, problem.groups
    b, c = xpad.shape[0], xpad.shape[-1]
    st = xpad.strides
    spatial, sc = st[1:1 + nd], st[-1]
    return np.lib.stride_tricks.as_strided(
        xpad, (b, *problem.out_spatial, g, *problem.kernel, c // g),
        (st[0], *(s * q for s, q in zip(spatial, problem.stride)), (c // g) * sc,
         *(s * d for s, d in zip(spatial, problem.dilation)), sc), writeable=False)


def windows_channels_first(problem, xpad: np.ndarray) -> np.ndarray:
    """The same receptive fields as (b, G, Cg, *kernel, *out), from a channels-first padded
    input xpad (b, C, *read_extent): copying it is a whole im2col in NCHW order."""
    g = problem.groups
    b, c = xpad.shape[:2]
    st = xpad.strides
    spatial = st[2:]
    return np.lib.stride_tricks.as_strided(
        xpad, (b, g, c // g, *problem.kernel, *problem.out_spatial),
        (st[0], (c // g) * st[1], st[1], *(s * d for s, d in zip(spatial, problem.dilation)),
         *(s * q for s, q in zip(spatial, problem.stride))), writeable=False)
