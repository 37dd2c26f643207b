"""The NumPy backend: how the API turns arrays into views, allocates and times on the CPU."""
from __future__ import annotations

import time

import numpy as np

from .. import arrays, workspace
from ..errors import AllocFailedError

# Allocations at least this large are checked against the memory the kernel reports as
# available first: Linux overcommits, so np.empty of more than is free can "succeed"
# and the process is killed later, when the pages are touched.
_CHECK_AVAILABLE_FROM = 256 << 20


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes; None where the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def allocate(count: int, dtype, what: str) -> np.ndarray:
    """np.empty(count, dtype), raising AllocFailedError (naming the size and what it was
    for) instead of MemoryError/ValueError, or the OOM killer, when it cannot fit."""
    dtype = np.dtype(dtype)
    nbytes = int(count) * dtype.itemsize
    if nbytes >= _CHECK_AVAILABLE_FROM:
        free = available_memory()
        if free is not None and nbytes > free:
            raise AllocFailedError(f"cannot allocate {nbytes} bytes for {what}: only {free} bytes "
                                   f"of memory are available")
    try:
        return np.empty(int(count), dtype)
    except (MemoryError, ValueError, OverflowError) as exc:
        raise AllocFailedError(f"cannot allocate {nbytes} bytes for {what}: {exc}") from None


class NumpyBackend:
    name = "numpy"
    device_name = "cpu"

    def view(self, array, desc, name: str, writable: bool = False) -> np.ndarray:
        return arrays.as_view(array, desc, name, writable)

    @staticmethod
    def span(a) -> tuple:
        """(first byte, one past the last byte) a view can touch; (0, 0) when empty (the
        bounds np.may_share_memory compares by default)."""
        if a.size == 0:
            return (0, 0)
        return np.lib.array_utils.byte_bounds(a)

    def empty(self, desc) -> np.ndarray:
        """A packed array for ``desc`` (its strides, dtype), as a logical view."""
        flat = allocate(desc.span, desc.dtype.numpy, f"a tensor of dims {desc.dims}")
        return np.lib.stride_tricks.as_strided(
            flat, shape=desc.dims, strides=tuple(s * flat.itemsize for s in desc.strides))

    def random(self, desc, rng: np.random.Generator) -> np.ndarray:
        out = self.empty(desc)
        # one image's worth at a time: a full float64 temporary would double the memory
        for i in range(desc.dims[0] if desc.dims else 0):
            out[i] = rng.standard_normal(desc.dims[1:]).astype(desc.dtype.numpy)
        return out

    def workspace_bytes(self, ws):
        return workspace.workspace_bytes(ws)

    def allocate_workspace(self, nbytes: int):
        return allocate(nbytes, np.uint8, "a workspace")

    def carve(self, ws_bytes, buffers):
        return workspace.carve(ws_bytes, buffers)

    @staticmethod
    def flip_spatial(array, nd: int):
        """A view with the spatial axes reversed (CONVOLUTION mode's flipped filter)."""
        return array[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]

    def synchronize(self) -> None:
        pass

    def now(self) -> float:
        return time.perf_counter()
