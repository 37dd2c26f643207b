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


class BatchNormTraining:
    """functional.batch_norm_training on tensors of one key whose parameters the full path
    used in place (no dtype/layout copy): allocate y and the saved statistics, call the
    Triton launcher on the caller's tensors (its geometry is kept per signature there).
    What the key cannot vouch for, running statistics (outputs) overlapping x, weight,
    bias or each other, ``running_overlap`` rechecks each call; the caller then takes the
    full path, which raises its error. y and the saved statistics are allocated here, so
    they overlap nothing."""

    def __init__(self, given, y, saved_mean, saved_inv, ones, zeros, mode: int, momentum: float, eps: float):
        from ..cuda import batchnorm
        self.launch = batchnorm.batch_norm_forward_training
        self.out_y, self.out_mean, self.out_inv = Output(y), Output(saved_mean), Output(saved_inv)
        self.ones, self.zeros = ones, zeros  # the full path's filled weight/bias when none was given
        self.mode, self.momentum, self.eps = mode, momentum, eps
        # each slot's byte extent: fixed by its signature (or its absence), part of the key
        self.extents = tuple(0 if t is None else _extent(t) for t in given)
        x, weight, bias, rm, rv = given
        # the launcher's arguments for these signatures, or None: then the launcher itself
        self.plan = batchnorm.training_plan(x, y, ones if weight is None else weight, zeros if bias is None else bias,
                                            rm, rv, saved_mean, saved_inv, mode, momentum, eps)

    def running_overlap(self, given) -> bool:
        """Whether running_mean or running_var shares a byte with each other, x, weight or bias."""
        rm, rv = given[3], given[4]
        if rm is None:
            return False
        ext = self.extents
        m0, mn, v0, vn = rm.data_ptr(), ext[3], rv.data_ptr(), ext[4]
        if mn and vn and m0 < v0 + vn and v0 < m0 + mn:
            return True
        for t, tn in zip(given[:3], ext[:3]):
            if t is not None and tn:
                t0 = t.data_ptr()
                if (mn and m0 < t0 + tn and t0 < m0 + mn) or (vn and v0 < t0 + tn and t0 < v0 + vn):
                    return True
        return False

    def __call__(self, given):
        x, weight, bias, rm, rv = given
        y, mean, inv = self.out_y(), self.out_mean(), self.out_inv()
        scale, shift = self.ones if weight is None else weight, self.zeros if bias is None else bias
        if self.plan is not None:
            self.plan(x, y, scale, shift, rm, rv, mean, inv)
        else:
            self.launch(x, None, y, scale, shift, rm, rv, mean, inv, self.mode, self.momentum, self.eps, 0)
        return y, mean, inv


class BatchNormBackward:
    """functional.batch_norm_backward on tensors of one key (nothing copied): allocate dx,
    dscale and dbias and call the Triton launcher on the caller's tensors."""

    def __init__(self, given, dx, dscale, dbias, ones, mode: int, eps: float):
        from ..cuda import batchnorm
        self.launch = batchnorm.batch_norm_backward
        self.out_dx, self.out_param = Output(dx), Output(dscale)
        self.ones, self.mode, self.eps = ones, mode, eps
        x, dy, weight, mean, inv = given
        self.plan = batchnorm.backward_plan(x, dy, dx, ones if weight is None else weight, dscale, dbias, mean, inv,
                                            mode, eps)

    def __call__(self, given):
        x, dy, weight, mean, inv = given
        dx, dscale, dbias = self.out_dx(), self.out_param(), self.out_param()
        scale = self.ones if weight is None else weight
        if self.plan is not None:
            self.plan(x, dy, dx, scale, dscale, dbias, mean, inv)
        else:
            self.launch(x, None, dy, None, dx, scale, None, dscale, dbias, mean, inv, self.mode, self.eps, 0)
        return dx, dscale.reshape(-1), dbias.reshape(-1)


def _pool_args(pool) -> dict:
    """What api/pooling passes the Triton launcher from a checked PoolingDescriptor."""
    return dict(mode=int(pool.mode), window=pool.window, padding=pool.padding, stride=pool.stride,
                propagate_nan=pool.propagate_nan)


class PoolForward:
    """functional max_pool/avg_pool on an x of one key (not copied): allocate y and call the
    Triton launcher with the descriptor's values (alpha 1, beta 0). The key holds the
    pooling parameters with their types, so the descriptor's checks hold for it."""

    def __init__(self, y, pool):
        from ..cuda import pooling
        self.launch, self.out, self.args = pooling.pooling_forward, Output(y), _pool_args(pool)

    def __call__(self, x):
        y = self.out()
        self.launch(x, y, **self.args)
        return y


class PoolBackward:
    """functional pool_backward on y, dy, x of one key (none copied): allocate dx (so it
    overlaps no input) and call the Triton launcher."""

    def __init__(self, dx, pool):
        from ..cuda import pooling
        self.launch, self.out, self.args = pooling.pooling_backward, Output(dx), _pool_args(pool)

    def __call__(self, y, dy, x):
        dx = self.out()
        self.launch(y, dy, x, dx, **self.args)
        return dx
