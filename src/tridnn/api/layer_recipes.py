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

import enum
import sys
import weakref


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


_extents: dict = {}


def extent(t) -> int:
    """``_extent(t)``, kept per (shape, strides, element size): what an overlap check
    asks of the same layer's tensors every call."""
    key = (t.shape, t.stride(), t.dtype)
    n = _extents.get(key)
    if n is None:
        if len(_extents) >= 4096:
            _extents.clear()
        n = _extents[key] = _extent(t)
    return n


def _extent(t) -> int:
    """Bytes from ``t.data_ptr()`` to one past the last element (strides are >= 0 here:
    the full path copied anything else, and then kept no recipe)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride()))) * t.element_size()


def _converted(a, dtype):
    """The full path's conversion of a per-channel parameter (functional._bn_param):
    ``a.detach().to(dtype).contiguous()``; a contiguous ``a`` converts to a contiguous
    tensor, so that last call (a dispatcher round trip) is made only when it copies."""
    t = (a.detach() if a.requires_grad else a).to(dtype)
    return t if t.is_contiguous() else t.contiguous()


def _converted_slots(slots, to):
    """A batch norm recipe's parameter slots as its kernels take them: each slot whose
    ``to`` entry is a dtype converted as the full path does (_converted), the others the
    caller's tensor itself. A slot with a dtype is never None (functional._route)."""
    return [a if t is None else _converted(a, t) for a, t in zip(slots, to)]


def _write_back(original, updated):
    """The full path's copy of converted running statistics back (functional._write_back)."""
    if updated.shape != original.shape:
        updated = updated.reshape(original.shape)
    (original.detach() if original.requires_grad else original).copy_(updated)


class BatchNormTraining:
    """functional.batch_norm_training on tensors of one key whose x the full path used in
    place: allocate y and the saved statistics, call the Triton launcher on the caller's
    tensors (its geometry is kept per signature there).

    ``to``: per parameter slot (weight, bias, running_mean, running_var), None when the
    kernels take the caller's tensor itself (the full path did not convert it, or
    converted it by an exact widening, bfloat16/float16 -> float32: the kernels widen
    every parameter they load to float64 themselves, so they read the same values), else
    the dtype the full path converted it to, which the recipe repeats each call (and for
    running statistics copies the updated values back, as the full path does), so the
    kernels see the same values and the caller gets the same bits.
    What the key cannot vouch for, running statistics (outputs) overlapping x, weight,
    bias or each other, ``running_overlap`` rechecks each call; the caller then takes the
    full path, which raises its error. y and the saved statistics are allocated here, so
    they overlap nothing."""

    def __init__(self, given, used, y, saved_mean, saved_inv, ones, zeros, to, mode: int, momentum: float,
                 eps: float, packed: bool = False):
        from ..cuda import batchnorm
        self.launch = batchnorm.batch_norm_forward_training
        self.out_y, self.out_mean, self.out_inv = Output(y), Output(saved_mean), Output(saved_inv)
        # packed: the saved statistics as views of one buffer (batchnorm.packed_stats)
        self.packed = batchnorm.packed_stats if packed else None
        self.ones, self.zeros = ones, zeros  # the full path's filled weight/bias when none was given
        self.to = to
        self.convert = any(t is not None for t in to)
        self.mode, self.momentum, self.eps = mode, momentum, eps
        # Both running statistics converted and copied back: torch._foreach_copy_ does the
        # two copy_ calls of _write_back in one (the same conversion, element by element),
        # for 1-d statistics (no reshape) when neither requires grad (no detach, checked
        # each call).
        rm, rv = given[3], given[4]
        self.copy_both = None
        if to[2] is not None and to[3] is not None and to[2] == to[3] and rm.dim() == 1 and rv.dim() == 1:
            self.copy_both = getattr(sys.modules["torch"], "_foreach_copy_", None)
        # each slot's byte extent: fixed by its signature (or its absence), part of the key
        self.extents = tuple(0 if t is None else _extent(t) for t in given)
        # the launcher's arguments for these signatures, or None: then the launcher itself.
        # ``used``: what the full path's kernels saw per slot (x, scale, shift, rm, rv);
        # the plan is built on what this recipe's kernels will see.
        x = given[0]
        seen = [g if (g is not None and t is None) else u for g, u, t in zip(given[1:], used[1:], to)]
        self.plan = batchnorm.training_plan(x, y, *seen, saved_mean, saved_inv, mode, momentum, eps)

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
        y = self.out_y()
        if self.packed is not None:
            out = self.out_mean
            mean, inv = self.packed(out.dims, out.strides, out.dtype, out.device)
        else:
            mean, inv = self.out_mean(), self.out_inv()
        rm_k, rv_k = rm, rv
        if self.convert:
            weight, bias, rm_k, rv_k = _converted_slots((weight, bias, rm, rv), self.to)
        scale, shift = self.ones if weight is None else weight, self.zeros if bias is None else bias
        if self.plan is not None:
            self.plan(x, y, scale, shift, rm_k, rv_k, mean, inv)
        else:
            self.launch(x, None, y, scale, shift, rm_k, rv_k, mean, inv, self.mode, self.momentum, self.eps, 0)
        if (rm_k is not rm and rv_k is not rv and self.copy_both is not None and not rm.requires_grad
                and not rv.requires_grad):
            self.copy_both([rm, rv], [rm_k, rv_k])  # one op (one launch on a GPU) for both
        else:
            if rm_k is not rm:
                _write_back(rm, rm_k)
            if rv_k is not rv:
                _write_back(rv, rv_k)
        return y, mean, inv


class BatchNormBackward:
    """functional.batch_norm_backward on tensors of one key whose x and dy the full path
    used in place: allocate dx, dscale and dbias and call the Triton launcher on the
    caller's tensors. ``to``: per parameter slot (weight, saved_mean, saved_inv_std), as
    BatchNormTraining's (the kernels widen the scale they load to float64, and the saved
    statistics are copied into float32/float64 scratch first, so an exact widening reads
    the same values)."""

    def __init__(self, given, used, dx, dscale, dbias, ones, to, mode: int, eps: float):
        from ..cuda import batchnorm
        self.launch = batchnorm.batch_norm_backward
        # dscale and dbias are allocated flat, the shape they are returned in (the kernels
        # take pointers; the plan's geometry is the same for either shape)
        self.out_dx, self.out_param = Output(dx), Output(dscale.reshape(-1))
        self.ones, self.mode, self.eps = ones, mode, eps
        self.to = to
        self.convert = any(t is not None for t in to)
        x, dy = given[0], given[1]
        seen = [g if (g is not None and t is None) else u for g, u, t in zip(given[2:], used, to)]
        self.plan = batchnorm.backward_plan(x, dy, dx, seen[0], dscale, dbias, seen[1], seen[2], mode, eps)

    def __call__(self, given):
        x, dy, weight, mean, inv = given
        dx, dscale, dbias = self.out_dx(), self.out_param(), self.out_param()
        if self.convert:
            weight, mean, inv = _converted_slots((weight, mean, inv), self.to)
        scale = self.ones if weight is None else weight
        if self.plan is not None:
            self.plan(x, dy, dx, scale, dscale, dbias, mean, inv)
        else:
            self.launch(x, None, dy, None, dx, scale, None, dscale, dbias, mean, inv, self.mode, self.eps, 0)
        return dx, dscale, dbias


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


def frozen(value):
    """A hashable key of a call parameter that keeps each element's type (lists become
    tuples of typed leaves), or None when a leaf is not a plain immutable value (a tensor,
    an array, an unknown object): such calls take the full path every time."""
    t = type(value)
    if t in _LEAVES:
        return (t, value)
    if t is list or isinstance(value, tuple):  # (tuples include torch.Size)
        out = [t]
        for v in value:
            k = frozen(v)
            if k is None:
                return None
            out.append(k)
        return tuple(out)
    np = sys.modules.get("numpy")
    if isinstance(value, enum.Enum) or (np is not None and isinstance(value, np.generic)):
        return (t, value)  # enum members and NumPy scalars are immutable
    return None


_LEAVES = frozenset((int, float, str, bool, type(None)))


class Conv:
    """functional conv / conv_backward_data / conv_backward_filter on tensors of one key
    that the full path took as they are (no layout copy, no view): allocate the output
    and run the plan's algorithm on the caller's tensors with the plan's workspace
    buffers, as api.convolution.execute does for a call that needs no special handling
    (output not empty, batch not empty, no filter flip). ``names``: the algorithm's
    names of the two inputs; ``bias_k``: conv's unfused bias add (the full path's
    ``_add_bias``) when the key holds a bias, else None.

    The workspace views (``backend.carve``: five tensor operations per buffer and call,
    each a dispatcher round trip on a GPU host) are kept with a weak reference to the
    arena they were carved from and reused while the handle hands out the same arena
    (per thread; a new or grown arena is carved afresh). The kept views hold a replaced
    arena's memory until this recipe's next call."""
    __slots__ = ("out", "problem", "algorithm", "buffers", "ws_size", "names", "output", "bias_shape", "carved")

    def __init__(self, out, problem, algorithm, ws_size, names, bias_k=None):
        self.out, self.problem, self.algorithm = Output(out), problem, algorithm
        self.buffers = algorithm.buffers(problem)
        self.ws_size, self.names, self.output = ws_size, names, problem.output
        self.bias_shape = None if bias_k is None else (1, bias_k) + (1,) * (len(out.shape) - 2)
        self.carved = None  # (weak reference to an arena, its carved views)

    def _carve(self, handle):
        ws = handle.workspace(self.ws_size) if self.ws_size else None
        carved = self.carved
        if carved is not None and ws is not None and carved[0]() is ws:
            return dict(carved[1])  # (a copy: an algorithm may edit its dict)
        backend = handle.backend
        views = backend.carve(backend.workspace_bytes(ws), self.buffers)
        self.carved = None if ws is None else (weakref.ref(ws), views)
        return dict(views)

    def __call__(self, handle, a, b, bias=None):
        out = self.out()
        views = {self.names[0]: a, self.names[1]: b, self.output: out}
        self.algorithm.run(self.problem, views, self._carve(handle) if self.buffers else {}, 1.0, 0.0)
        if self.bias_shape is not None:
            out += bias.reshape(self.bias_shape).to(out.dtype)
        return out
