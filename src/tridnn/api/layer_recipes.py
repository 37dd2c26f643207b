"""Per-signature recipes for the functional API's layer calls on the Triton backend.

tridnn.torch's layers call tridnn.functional once per layer and step, with tensors whose
shapes, strides and dtypes repeat. The full path (descriptors, the layer API's checks,
the launcher's geometry) costs ~100 us of Python a call, more than a small kernel takes.
So the first call of a signature takes the full path and, when it succeeds on the
Triton backend with plain torch tensors, keeps a *recipe* here: how to allocate the
outputs and the launcher's plan (``run``), which depends only on what the key holds.

The key is everything a recipe depends on: the op, its parameters with their types (so
1, 1.0 and True are different keys and a value that the full path would refuse never
matches one it accepted), and each array's type, shape, strides, dtype and device. The
table lives per handle (``functional._plan_table``), and the caller checks the handle is
alive each call. Data pointers are read at launch, so a freed tensor's address reused by
another changes nothing. What a key cannot vouch for (whether caller-provided outputs
overlap inputs) the op's recipe rechecks every call.
"""
from __future__ import annotations

import sys


def signature(a):
    """(shape, strides, dtype, device) of a plain torch tensor, else None (other arrays
    and tensor subclasses always take the full path). torch is looked up, not imported:
    the NumPy path must not pull it in, and without torch loaded no tensor exists."""
    torch = sys.modules.get("torch")
    if torch is None or type(a) is not torch.Tensor:
        return None
    return a.shape, a.stride(), a.dtype, a.device


def lookup(table: dict, key):
    """The recipe for ``key``, or None (also for unhashable parameters: the full path
    reports those)."""
    try:
        return table.get(key)
    except TypeError:
        return None


def remember(table: dict, key, recipe, limit: int) -> None:
    try:
        hash(key)
    except TypeError:
        return
    if len(table) >= limit:
        table.clear()
    table[key] = recipe


class Output:
    """An output's allocation: torch.empty_strided with the full path's dims, strides,
    dtype and device."""
    __slots__ = ("dims", "strides", "dtype", "device", "empty")

    def __init__(self, t):
        self.dims, self.strides, self.dtype, self.device = tuple(t.shape), t.stride(), t.dtype, t.device
        self.empty = sys.modules["torch"].empty_strided  # t is a torch tensor, so torch is loaded

    def __call__(self):
        return self.empty(self.dims, self.strides, dtype=self.dtype, device=self.device)
