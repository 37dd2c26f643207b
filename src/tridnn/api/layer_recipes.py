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
    if torch is None or (type(a) is not torch.Tensor and type(a) is not torch.nn.Parameter):
        return None  # (a Parameter is a plain tensor: it overrides no torch function)
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


def immutable_scalars(*values) -> bool:
    """Whether every parameter is a plain number or string: a key holding a mutable
    object (a 0-d tensor, an array) could match after the object changed in place."""
    return all(type(v) in (int, float, str) or (isinstance(v, int) and not isinstance(v, bool))
               for v in values)


def _extent(t) -> int:
    """Bytes from ``t.data_ptr()`` to one past the last element (strides are >= 0 here:
    the full path copied anything else, and then kept no recipe)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride()))) * t.element_size()


def _overlap(a, a_bytes, b, b_bytes) -> bool:
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a_bytes > 0 and b_bytes > 0 and a0 < b0 + b_bytes and b0 < a0 + a_bytes


class BatchNormTraining:
    """functional.batch_norm_training on tensors of one key whose parameters the full path
    used in place (no dtype/layout copy): allocate y and the saved statistics, call the
    Triton launcher on the caller's tensors (its geometry is kept per signature there).
    What the key cannot vouch for, running statistics (outputs) overlapping x, weight,
    bias or each other, ``running_overlap`` rechecks each call; the caller then takes the
    full path, which raises its error. y and the saved statistics are allocated here, so
    they overlap nothing."""

    def __init__(self, x, y, saved_mean, saved_inv, ones, zeros, mode: int, momentum: float, eps: float):
        from ..cuda import batchnorm
        self.launch = batchnorm.batch_norm_forward_training
        self.out_y, self.out_mean, self.out_inv = Output(y), Output(saved_mean), Output(saved_inv)
        self.ones, self.zeros = ones, zeros  # the full path's filled weight/bias when none was given
        self.mode, self.momentum, self.eps = mode, momentum, eps
        self.x_bytes = _extent(x)

    def running_overlap(self, given) -> bool:
        x, weight, bias, rm, rv = given
        if rm is None:
            return False
        stat = _extent(rm)  # rm and rv are packed (C,)-sized vectors of one signature each
        var = _extent(rv)
        if _overlap(rm, stat, rv, var) or _overlap(rm, stat, x, self.x_bytes) or _overlap(rv, var, x, self.x_bytes):
            return True
        for p in (weight, bias):
            if p is not None:
                size = _extent(p)
                if _overlap(rm, stat, p, size) or _overlap(rv, var, p, size):
                    return True
        return False

    def __call__(self, given):
        x, weight, bias, rm, rv = given
        y, mean, inv = self.out_y(), self.out_mean(), self.out_inv()
        self.launch(x, None, y, self.ones if weight is None else weight, self.zeros if bias is None else bias,
                    rm, rv, mean, inv, self.mode, self.momentum, self.eps, 0)
        return y, mean, inv


class BatchNormBackward:
    """functional.batch_norm_backward on tensors of one key (nothing copied): allocate dx,
    dscale and dbias and call the Triton launcher on the caller's tensors."""

    def __init__(self, dx, dscale, ones, mode: int, eps: float):
        from ..cuda import batchnorm
        self.launch = batchnorm.batch_norm_backward
        self.out_dx, self.out_param = Output(dx), Output(dscale)
        self.ones, self.mode, self.eps = ones, mode, eps

    def __call__(self, given):
        x, dy, weight, mean, inv = given
        dx, dscale, dbias = self.out_dx(), self.out_param(), self.out_param()
        self.launch(x, None, dy, None, dx, self.ones if weight is None else weight, None, dscale, dbias, mean, inv,
                    self.mode, self.eps, 0)
        return dx, dscale.reshape(-1), dbias.reshape(-1)
