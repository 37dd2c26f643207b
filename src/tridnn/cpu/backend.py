"""The NumPy backend: how the API turns arrays into views, allocates and times on the CPU."""
from __future__ import annotations

import time

import numpy as np

from .. import arrays, workspace


class NumpyBackend:
    name = "numpy"
    device_name = "cpu"

    def view(self, array, desc, name: str, writable: bool = False) -> np.ndarray:
        return arrays.as_view(array, desc, name, writable)

    def empty(self, desc) -> np.ndarray:
        """A packed array for ``desc`` (its strides, dtype), as a logical view."""
        flat = np.empty(desc.span, desc.dtype.numpy)
        return np.lib.stride_tricks.as_strided(
            flat, shape=desc.dims, strides=tuple(s * flat.itemsize for s in desc.strides))

    def random(self, desc, rng: np.random.Generator) -> np.ndarray:
        out = self.empty(desc)
        out[...] = rng.standard_normal(desc.dims).astype(desc.dtype.numpy)
        return out

    def workspace_bytes(self, ws):
        return workspace.workspace_bytes(ws)

    def allocate_workspace(self, nbytes: int):
        return np.empty(nbytes, np.uint8)

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
