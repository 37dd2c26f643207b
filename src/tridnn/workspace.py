"""Workspace layout: an algorithm's temporaries carved out of the caller's buffer.

An algorithm declares its temporaries once, as a list of ``Buffer`` specs. The same
list gives ``workspace_size`` and, at run time, the named views into the workspace,
so the declared size is exactly what is used and nothing writes past it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import BadParamError

ALIGN = 64  # bytes; keeps every view cache-line and SIMD aligned


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        count = 1
        for d in self.shape:
            count *= int(d)
        return count * np.dtype(self.dtype).itemsize


def layout_size(buffers) -> int:
    """Total bytes of a buffer list, each buffer aligned (0 when there are none).

    One extra ALIGN of slack lets the caller's buffer start at any address."""
    total = 0
    for buf in buffers:
        total = _align(total) + buf.nbytes
    return _align(total) + ALIGN if total else 0


def _align(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


def workspace_bytes(workspace) -> np.ndarray:
    """The caller's workspace as a flat uint8 NumPy array (zero copy); None gives an empty one."""
    if workspace is None:
        return np.empty(0, np.uint8)
    from .arrays import to_numpy
    arr = to_numpy(workspace, "workspace")
    if not arr.flags.c_contiguous:
        raise BadParamError("workspace must be a contiguous array")
    return arr.reshape(-1).view(np.uint8)


def carve(workspace: np.ndarray, buffers) -> dict[str, np.ndarray]:
    """Named views into ``workspace`` laid out as ``layout_size`` counts them."""
    need = layout_size(buffers)
    if workspace.nbytes < need:
        raise BadParamError(f"workspace of {workspace.nbytes} bytes is smaller than the "
                            f"{need} bytes required")
    base = workspace.ctypes.data
    views, offset = {}, 0
    for buf in buffers:
        # align the absolute address, so views are aligned whatever the caller passed
        start = _align(base + offset) - base
        dtype = np.dtype(buf.dtype)
        if start + buf.nbytes > workspace.nbytes:  # pragma: no cover - guarded by `need`
            raise BadParamError(f"workspace too small for buffer {buf.name!r}")
        raw = workspace[start:start + buf.nbytes]
        views[buf.name] = raw.view(dtype).reshape(buf.shape)
        offset = start + buf.nbytes
    return views
