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


# -- blocks on the worker threads ------------------------------------------------------------
# NumPy's ufuncs release the GIL, so the blocks of a memory-bound layer pass can run in
# parallel. THREADS caps the threads a layer call uses: None means common.WORKERS (from
# TRIDNN_NUM_THREADS, default 2); 1 runs every block on the calling thread.
#
# Default 1: on the shared 2-core VMs two threads made max pooling, softmax and batch norm
# backward 1-7% slower in every interleaved run (docs/performance.md, "Threads for the layer
# misses"), with the second core free or not: their passes are many 20-200 us ufuncs, too
# short for the GIL to change hands between them, so the helper thread mostly waited. Only
# relu forward ever gained (0.8x in one quiet run, 1.03x median over all runs).
#
# The calling thread works too, and helpers only take blocks nobody has started: on the
# 2-core VMs a pool thread woken for a few milliseconds of work often started late or landed
# on the core of the thread that woke it (measured: two pool threads sharing 2 x 3 ms of
# np.sin ran one after the other in half the runs, CPU time = wall time), so a layer call
# that waits for its pool gained nothing. With the caller working, a late helper costs a
# few microseconds and an early one halves the time. The helpers are layer_utils' own
# threads (common.parallel_map blocks its caller).
THREADS: int | None = 1
PARALLEL_MIN_ELEMENTS = 1 << 18  # below ~1 MB of float32 a thread hand-off costs more than it saves

_helpers = None
_helpers_lock = threading.Lock()
_in_helper = threading.local()


def threads() -> int:
    """Threads a layer call spreads its blocks over (THREADS, at most common.WORKERS)."""
    from . import common
    limit = common.WORKERS if THREADS is None else THREADS
    return max(1, min(int(limit), common.WORKERS))


def _spread(drain, workers: int) -> None:
    """drain() on the calling thread and on workers - 1 helper threads (which may start
    late or not at all: drain must finish the work alone if need be)."""
    global _helpers
    with _helpers_lock:
        if _helpers is None or _helpers._max_workers < workers - 1:
            from concurrent.futures import ThreadPoolExecutor
            _helpers = ThreadPoolExecutor(workers - 1, thread_name_prefix="tridnn-layer")
        pool = _helpers

    def helper():
        _in_helper.active = True
        drain()

    for _ in range(workers - 1):
        pool.submit(helper)
    drain()


def run_blocks(fn, blocks) -> list:
    """[fn(block) for block in blocks], in block order, the blocks taken one at a time by
    whichever thread comes free (a static split leaves the wall time to the thread that
    lost its core). Every block's arithmetic is the same whatever thread runs it, and the
    results come back in block order, so a caller that combines them in order gets the
    single-threaded bits. Returns once every block is done; an exception from any block
    is raised here."""
    blocks = list(blocks)
    workers = min(threads(), len(blocks))
    if workers <= 1 or getattr(_in_helper, "active", False):   # no nesting on the helpers
        return [fn(block) for block in blocks]
    results = [None] * len(blocks)
    errors = []
    state = dict(next=0, done=0)
    cond = threading.Condition()

    def drain():
        while True:
            with cond:
                i = state["next"]
                if i >= len(blocks) or errors:
                    return
                state["next"] = i + 1
            try:
                results[i] = fn(blocks[i])
            except BaseException as exc:      # re-raised by the caller
                errors.append(exc)
            with cond:
                state["done"] += 1
                cond.notify_all()

    _spread(drain, workers)
    with cond:                                # blocks a helper is still running
        cond.wait_for(lambda: state["done"] == state["next"])
    if errors:
        raise errors[0]
    return results


def flat_view(a: np.ndarray):
    """``a`` as a 1-D view in its memory order, or None when it is not packed (or is
    reversed along some axis); with the order of its axes, so callers can check that two
    arrays' flat views match element for element."""
    order = tuple(sorted(range(a.ndim), key=lambda d: -a.strides[d]))
    t = a.transpose(order)
    if not t.flags.c_contiguous:
        return None, order
    return t.reshape(-1), order


def outer_chunks(a: np.ndarray, parts: int):
    """Index tuples splitting ``a`` into about ``parts`` slabs along its outermost (largest
    stride) axis of size > 1: each slab is one contiguous stretch of a packed array, in any
    layout, and elementwise work on it is the same arithmetic as on the whole array."""
    axes = [d for d in range(a.ndim) if a.shape[d] > 1]
    if not axes or parts <= 1:
        return [()]
    axis = max(axes, key=lambda d: abs(a.strides[d]))
    size = a.shape[axis]
    parts = min(parts, size)
    bounds = [size * i // parts for i in range(parts + 1)]
    lead = (slice(None),) * axis
    return [lead + (slice(lo, hi),) for lo, hi in zip(bounds, bounds[1:])]


SLAB_ELEMENTS = 1 << 18  # an elementwise pass's sub-block: its temporaries (a mask) stay in L2
SHARE_ELEMENTS = 1 << 20  # the piece a thread takes at a time (~0.1-0.3 ms of a relu pass)


def elementwise(fn, out: np.ndarray, *arrays, slabs: bool = True) -> None:
    """fn(out_part, *parts) over pieces of the arrays (all shaped like out), the pieces
    taken by the worker threads. Packed arrays in one memory order go as 1-D stretches of
    SHARE_ELEMENTS, each walked in SLAB_ELEMENTS sub-blocks (a mask temporary stays in
    cache: relu backward measured 2.86 -> 2.50 ms single-threaded on 8x256x56x56); other
    arrays go whole or as outer slabs. fn sees the same elements with the same arithmetic
    whatever the split, so every split gives the same bits. slabs=False: one call per share
    (a single pass with no temporaries gains nothing from sub-blocks)."""
    flats = [flat_view(a) for a in (out, *arrays)]
    workers = threads() if out.size >= PARALLEL_MIN_ELEMENTS else 1
    if any(f is None for f, _ in flats) or len({order for _, order in flats}) > 1:
        if workers == 1:
            fn(out, *arrays)
        else:
            run_blocks(lambda i: fn(out[i], *(a[i] for a in arrays)), outer_chunks(out, 4 * workers))
        return
    flat = [f for f, _ in flats]
    size = out.size
    step = SHARE_ELEMENTS if workers > 1 else max(size, 1)

    sub = SLAB_ELEMENTS if slabs else step

    def share(lo):
        top = min(size, lo + step)
        for a in range(lo, top, sub):
            b = min(top, a + sub)
            fn(*(f[a:b] for f in flat))

    run_blocks(share, range(0, size, step))


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
    if not channels_last or even_step(c, cb) >= min(c, min_channels):
        cb = even_step(c, cb)
    nb = even_step(n, max(1, min(n, target // (per_nc * cb)))) if cb == c else 1
    for n0 in range(0, n, nb):
        for c0 in range(0, c, cb):
            yield slice(n0, min(n, n0 + nb)), slice(c0, min(c, c0 + cb))


def even_step(total: int, step: int) -> int:
    """The step that splits ``total`` into as many pieces as ``step`` does, but of equal size
    (but for the last): 256 channels in steps of 167 leave a block of 89, which left one of
    two threads with two thirds of the work; steps of 128 split it evenly."""
    pieces = -(-total // max(1, step))
    return -(-total // pieces)


def scratch_like(tag: str, a: np.ndarray, dtype=None) -> np.ndarray:
    """A scratch array shaped like ``a`` in ``a``'s memory order (see ``scratch``)."""
    order = sorted(range(a.ndim), key=lambda i: -abs(a.strides[i]))
    phys = scratch(tag, tuple(a.shape[i] for i in order), dtype or a.dtype)
    return phys.transpose(np.argsort(order))
