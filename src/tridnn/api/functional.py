"""The functional API: arrays in, new arrays out, as in ``torch.nn.functional``.

``tridnn.conv(x, w, stride=2, padding="same")`` builds the descriptors, validates
the problem, picks an algorithm and runs it, all through the descriptor API. The
work that depends only on shapes (descriptors, the problem, the algorithm choice,
the workspace size) is done once per distinct call signature and kept in a *plan*
cache on the handle, so a repeated call costs a dictionary lookup plus the kernel.

Conventions:
- The output is a new array in the input's layout: an NHWC input (a logical
  (N, C, H, W) view of NHWC memory, like a torch channels_last tensor) gives an NHWC
  output; anything else gives a packed NCHW-order output.
- NumPy in, NumPy out; a torch tensor in, a torch tensor out (zero copy).
- ``handle=None`` uses the calling thread's default handle for the input's device
  (``tridnn.handle.default_handle``).
- ``algo``: "auto" (a cached ``find`` result, else the heuristic's best), "find"
  (benchmark once, then cached), "heuristic", or an algorithm enum member, name or int.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np

from ..algorithms import selection
from ..algorithms.problem import ConvProblem
from ..descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor
from ..descriptors.convolution import per_dim, transposed_input_dims
from ..descriptors.tensor import packed_strides
from ..errors import BadParamError
from ..handle import check_handle, default_handle
from ..types import ConvMode, TensorFormat
from . import layer_recipes as recipes
from .convolution import _algorithm, execute

__all__ = ["conv", "conv_bias_activation", "conv_transpose", "conv_backward_data", "conv_backward_filter",
           "max_pool", "avg_pool", "pool_backward", "adaptive_avg_pool", "adaptive_max_pool",
           "adaptive_pool_backward", "activation", "activation_backward", "relu", "relu6",
           "clipped_relu", "leaky_relu", "elu", "sigmoid", "tanh", "swish", "silu", "gelu",
           "softplus", "hard_swish", "softmax", "log_softmax", "softmax_backward",
           "batch_norm", "batch_norm_training", "batch_norm_inference", "batch_norm_backward",
           "layer_norm", "layer_norm_backward", "group_norm", "rms_norm", "lrn", "dropout",
           "dropout_backward",
           "clear_plan_cache", "plan_cache_info", "output_format", "padding_pairs"]

CHOOSERS = ("auto", "find", "heuristic")
MAX_PLANS_PER_HANDLE = 4096

# handle -> {call signature: plan}; weak, so a destroyed-and-dropped handle frees its plans
_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


# -- arrays ---------------------------------------------------------------------------
def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch") and hasattr(a, "is_cuda")


def _signature(a):
    """(shape, element strides, dtype) of an array, cheaply and without converting it."""
    if isinstance(a, np.ndarray):
        item = a.itemsize
        return a.shape, tuple(s // item if item else s for s in a.strides), a.dtype
    if _is_torch(a):
        return tuple(a.shape), a.stride(), a.dtype
    if hasattr(a, "shape") and hasattr(a, "__dlpack__"):
        from ..arrays import to_numpy
        return _signature(to_numpy(a))
    raise BadParamError(f"expected an array (NumPy, torch or DLPack), got {type(a).__name__}")


def _device_of(a) -> str:
    if _is_torch(a):
        return "cpu" if a.device.type == "cpu" else str(a.device)
    if hasattr(a, "__cuda_array_interface__"):
        return "cuda"
    return "cpu"


def _handle_for(array, handle):
    if handle is not None:
        return check_handle(handle)
    return default_handle(_device_of(array))


def _usable(a):
    """``a`` itself when every axis longer than 1 has a positive stride, else a packed copy
    (broadcast and reversed views cannot be described by a tensor descriptor)."""
    shape, strides, _ = _signature(a)
    if all(s > 0 or d <= 1 for d, s in zip(shape, strides)):
        return a
    return a.contiguous() if _is_torch(a) else np.ascontiguousarray(a)


def _packed_filter(a):
    """A filter must be packed KCRS or KRSC (cuDNN has no strided filters); copy otherwise."""
    a = _usable(a)
    shape, strides, _ = _signature(a)
    for fmt in (TensorFormat.NCHW, TensorFormat.NHWC):
        want = packed_strides(shape, fmt)
        if all(d <= 1 or s == t for d, s, t in zip(shape, strides, want)):
            return a
    return a.contiguous() if _is_torch(a) else np.ascontiguousarray(a)


def _to_numpy(a):
    from ..arrays import to_numpy
    return to_numpy(a)


def _like(out, ref):
    """Hand ``out`` back in the kind of array the caller passed (torch in, torch out)."""
    if isinstance(out, np.ndarray) and _is_torch(ref):
        import torch
        if out.dtype.name == "bfloat16":
            return torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(out)
    return out


def output_format(dims, strides) -> TensorFormat:
    """The layout an output follows: NHWC when the input is packed NHWC (and not also
    NCHW, as when C == 1), else NCHW. Shared with tridnn.torch's fake kernels."""
    def same(want):
        return all(d <= 1 or s == t for d, s, t in zip(dims, strides, want))
    if len(dims) >= 3 and not same(packed_strides(dims, TensorFormat.NCHW)) \
            and same(packed_strides(dims, TensorFormat.NHWC)):
        return TensorFormat.NHWC
    return TensorFormat.NCHW


# -- parameters -----------------------------------------------------------------------
def _mode(mode) -> ConvMode:
    if isinstance(mode, str):
        name = mode.upper().removeprefix("CUDNN_")
        if name in ConvMode.__members__:
            return ConvMode[name]
    else:
        try:
            return ConvMode(mode)
        except (ValueError, TypeError):
            pass
    raise BadParamError(f"unknown convolution mode {mode!r}; valid: 'cross_correlation', "
                        f"'convolution' (or ConvMode members)")


def padding_pairs(padding, nd, in_spatial, kernel, stride, dilation):
    """(pre, post) per spatial dim from an int, per-dim ints, per-dim (pre, post) pairs,
    "valid" (no padding) or "same" (output = ceil(input / stride); the odd pixel of an
    even total goes after, as in TensorFlow and PyTorch)."""
    if isinstance(padding, str):
        kind = padding.lower()
        if kind == "valid":
            return (0,) * nd, (0,) * nd
        if kind == "same":
            pre, post = [], []
            for i, k, s, d in zip(in_spatial, kernel, stride, dilation):
                out = -(-i // s)
                total = max((out - 1) * s + d * (k - 1) + 1 - i, 0)
                pre.append(total // 2)
                post.append(total - total // 2)
            return tuple(pre), tuple(post)
        raise BadParamError(f"padding {padding!r} is not a padding; valid strings: 'same', 'valid'")
    if isinstance(padding, (tuple, list)) and any(isinstance(p, (tuple, list)) for p in padding):
        if len(padding) != nd or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in padding):
            raise BadParamError(f"padding {padding!r}: give one (pre, post) pair per spatial dim "
                                f"({nd} dims)")
        return (per_dim("padding (pre)", [p[0] for p in padding], nd, 0),
                per_dim("padding (post)", [p[1] for p in padding], nd, 0))
    pads = per_dim("padding", padding, nd, 0)
    return pads, pads


def _spatial_nd(shape, name) -> int:
    if not 3 <= len(shape) <= 5:
        raise BadParamError(f"{name} must have 3 to 5 dims (N, C, *spatial) for a 1D/2D/3D "
                            f"convolution, got shape {tuple(shape)}")
    return len(shape) - 2


# -- plans ----------------------------------------------------------------------------
@dataclass
class _Plan:
    """Everything about one call signature that does not depend on the data."""
    problem: ConvProblem
    algorithm: object
    workspace_size: int
    descs: dict          # name -> TensorDescriptor the array of that name is checked against
    out_desc: TensorDescriptor


def _plan_table(handle) -> dict:
    table = _plans.get(handle)
    if table is None:
        table = _plans[handle] = {}
    return table


def clear_plan_cache(handle=None) -> None:
    """Forget cached plans (of one handle, or of all)."""
    if handle is None:
        _plans.clear()
    else:
        _plans.pop(handle, None)


def plan_cache_info(handle) -> int:
    """How many plans a handle holds."""
    return len(_plans.get(handle, ()))


def _choose(handle, problem, algo):
    if isinstance(algo, str) and algo.lower() in CHOOSERS:
        return selection.choose(handle, problem, algo.lower())
    return _algorithm(handle, problem, algo)


def _conv_plan(handle, key, build):
    """The cached plan for ``key``, built by ``build()`` -> (problem, algo) on a miss."""
    table = _plan_table(handle)
    plan = table.get(key)
    if plan is not None:
        return plan
    problem, algo = build()
    algorithm = _choose(handle, problem, algo)
    descs = {"x": problem.x, "w": problem.w.as_tensor(), "y": problem.y}
    plan = _Plan(problem, algorithm, algorithm.workspace_size(problem), descs,
                 descs[problem.output])
    if len(table) >= MAX_PLANS_PER_HANDLE:
        table.clear()
    table[key] = plan
    return plan


def _execute(handle, plan, arrays: dict, epilogue=None, seen=None):
    """Check the inputs against the plan's descriptors, allocate the output, run;
    returns the backend's array (wrap it with ``_like``). ``seen``: a dict that receives
    the views the algorithm ran on (the recipes ask whether they are the caller's)."""
    backend = handle.backend
    out_name = plan.problem.output
    views = {name: backend.view(arr, plan.descs[name], _ARG[plan.problem.direction][name])
             for name, arr in arrays.items()}
    if seen is not None:
        seen.update(views)
    out = backend.empty(plan.out_desc)
    views[out_name] = out
    ws = handle.workspace(plan.workspace_size) if plan.workspace_size else None
    execute(handle, plan.problem, plan.algorithm, views, ws, 1.0, 0.0, epilogue)
    return out


_ARG = {"fwd": {"x": "x", "w": "w", "y": "y"},
        "bwd_data": {"x": "dx", "w": "w", "y": "dy"},
        "bwd_filter": {"x": "x", "w": "dw", "y": "dy"}}


def _conv_params(nd, in_spatial, kernel, stride, padding, dilation, groups, mode, math_type):
    stride = per_dim("stride", stride, nd, 1)
    dilation = per_dim("dilation", dilation, nd, 1)
    pre, post = padding_pairs(padding, nd, in_spatial, kernel, stride, dilation)
    return ConvolutionDescriptor(padding=pre, pad_post=post, stride=stride, dilation=dilation,
                                 groups=groups, mode=_mode(mode), math_type=math_type, nd=nd)


def _typed(value):
    """A hashable key of a parameter that keeps each element's type (lists become tuples)."""
    if isinstance(value, (list, tuple)):
        return (type(value),) + tuple(_typed(v) for v in value)
    return (type(value), value)


def _bias_epilogue(bias, acc_dtype):
    """Fused bias add: applied to each accumulator block before its one rounding. The
    caller has checked that bias is (K,) (``_check_bias``)."""
    b = np.asarray(_to_numpy(bias), dtype=acc_dtype)

    def epilogue(acc, index):
        channels = index[1] if len(index) > 1 else slice(None)
        acc += b[channels].reshape((-1,) + (1,) * (acc.ndim - 2))
        return acc
    return epilogue


def _check_bias(bias, k):
    shape = _signature(bias)[0]
    if tuple(shape) != (k,):
        raise BadParamError(f"bias must have shape ({k},) (one value per output channel), "
                            f"got {tuple(shape)}")


def _add_bias(out, bias, k):
    """Unfused bias add for directions without an epilogue (transposed convolution)."""
    if isinstance(out, np.ndarray):
        b = np.asarray(_to_numpy(bias), np.float32 if out.dtype != np.float64 else np.float64)
        shape = (1, k) + (1,) * (out.ndim - 2)
        np.add(out, b.reshape(shape), out=out, casting="unsafe")
    else:
        out += bias.reshape((1, k) + (1,) * (out.ndim - 2)).to(out.dtype)
    return out


# -- convolution recipes (api/layer_recipes.py) ------------------------------------------
def _conv_recipe_key(kind, handle, arrays, params):
    """The recipe key of a convolution call: the direction, each array's signature
    (shape, strides, dtype, device; None for a missing bias), the parameters with their
    types and the handle settings the plan depends on. None when an array is not a plain
    torch tensor or a parameter is not a plain immutable value: the full path, always."""
    sigs = []
    for a in arrays:
        if a is None:
            sigs.append(None)
            continue
        sig = recipes.signature(a)
        if sig is None:
            return None
        sigs.append(sig)
    frozen = recipes.frozen(params)
    if frozen is None:
        return None
    return (kind, tuple(sigs), frozen, handle.math_type, handle.workspace_limit, handle.deterministic)


def _remember_conv(table, rkey, handle, plan, out, names, given, seen, bias_k=None):
    """Keep a recipe after a full-path call whose algorithm ran on the caller's own
    tensors (``seen``: the views _execute checked), when api.convolution.execute ran it
    without special handling (non-empty output and batch, no filter flip)."""
    problem, algorithm = plan.problem, plan.algorithm
    if rkey is None or handle.backend_name != "triton":
        return
    if any(seen.get(n) is not a for n, a in zip(names, given)):
        return
    if out.numel() == 0 or problem.n == 0 or (problem.mode == ConvMode.CONVOLUTION
                                               and not getattr(algorithm, "handles_flip", False)):
        return
    recipes.remember(table, rkey, recipes.Conv(out, problem, algorithm, plan.workspace_size, names, bias_k),
                     MAX_PLANS_PER_HANDLE)


# -- convolution ----------------------------------------------------------------------
def conv(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, mode="cross_correlation",
         algo="auto", handle=None, math_type=None):
    """N-d convolution (1D, 2D or 3D from x's rank): ``y = conv(x, w) + bias``.

    x: (N, C, *spatial); w: (K, C/groups, *kernel), packed KCRS or KRSC; bias: (K,).
    padding: an int, one int per dim, one (pre, post) pair per dim, "same" or "valid".
    """
    handle = _handle_for(x, handle)
    rkey = _conv_recipe_key("conv", handle, (x, w, bias), (stride, padding, dilation, groups, mode, algo,
                                                           math_type))
    if rkey is not None:
        table = _plan_table(handle)
        recipe = recipes.lookup(table, rkey)
        if recipe is not None:
            return recipe(handle, x, w, bias)
    given = (x, w)
    x, w = _usable(x), _packed_filter(w)
    xs, ws = _signature(x), _signature(w)
    nd = _spatial_nd(xs[0], "x")
    if bias is not None:
        _check_bias(bias, ws[0][0] if len(ws[0]) else -1)
    plan = _forward_plan(handle, w, xs, ws, nd, stride, padding, dilation, groups, mode, algo, math_type)
    epilogue = None
    seen = {}
    if bias is not None:
        if handle.backend_name != "numpy":
            out = _add_bias(_execute(handle, plan, {"x": x, "w": w}, seen=seen), bias, plan.problem.k)
            _remember_conv(table if rkey else None, rkey, handle, plan, out, ("x", "w"), given, seen, plan.problem.k)
            return _like(out, x)
        epilogue = _bias_epilogue(bias, plan.problem.accumulator)
    out = _execute(handle, plan, {"x": x, "w": w}, epilogue, seen=seen)
    _remember_conv(table if rkey else None, rkey, handle, plan, out, ("x", "w"), given, seen)
    return _like(out, x)


def _forward_plan(handle, w, xs, ws, nd, stride, padding, dilation, groups, mode, algo, math_type):
    """The cached plan of a forward convolution (``conv`` and ``conv_bias_activation`` share
    it); xs, ws are the signatures of x and w, math_type None means the handle's."""
    key = ("fwd", xs, ws, _typed(stride), _typed(padding), _typed(dilation), _typed(groups), _typed(mode),
           _typed(algo), _typed(math_type), handle.math_type, handle.workspace_limit, handle.deterministic)

    def build():
        x_desc = TensorDescriptor(xs[0], xs[2], _positive(xs))
        w_desc = FilterDescriptor.like(w)
        cdesc = _conv_params(nd, x_desc.spatial, w_desc.kernel, stride, padding, dilation, groups,
                             mode, handle.math_type if math_type is None else math_type)
        y_dims = cdesc.output_dims(x_desc, w_desc)
        y_desc = TensorDescriptor.packed(y_dims, x_desc.dtype, output_format(xs[0], xs[1]))
        return ConvProblem("fwd", x_desc, w_desc, y_desc, cdesc), algo

    return _conv_plan(handle, key, build)


def _positive(sig):
    """Strides as a descriptor takes them: size-1 axes may report 0, any value works."""
    return tuple(s if s > 0 else 1 for s in sig[1])


def conv_backward_data(dy, w, x_shape, stride=1, padding=0, dilation=1, groups=1,
                       mode="cross_correlation", algo="auto", handle=None, math_type=None):
    """dx: the gradient of ``conv`` with respect to its input of shape ``x_shape``."""
    handle = _handle_for(dy, handle)
    rkey = _conv_recipe_key("bwd_data", handle, (dy, w), (x_shape, stride, padding, dilation, groups, mode, algo,
                                                          math_type))
    if rkey is not None:
        table = _plan_table(handle)
        recipe = recipes.lookup(table, rkey)
        if recipe is not None:
            return recipe(handle, dy, w)
    given = (dy, w)
    dy, w = _usable(dy), _packed_filter(w)
    dys, ws = _signature(dy), _signature(w)
    x_shape = tuple(int(d) for d in x_shape)
    nd = _spatial_nd(x_shape, "x_shape")
    key = ("bwd_data", dys, ws, x_shape, _typed(stride), _typed(padding), _typed(dilation),
           _typed(groups), _typed(mode), _typed(algo), _typed(math_type), handle.math_type,
           handle.workspace_limit, handle.deterministic)

    def build():
        dy_desc = TensorDescriptor(dys[0], dys[2], _positive(dys))
        w_desc = FilterDescriptor.like(w)
        cdesc = _conv_params(nd, x_shape[2:], w_desc.kernel, stride, padding, dilation, groups,
                             mode, handle.math_type if math_type is None else math_type)
        dx_desc = TensorDescriptor.packed(x_shape, dy_desc.dtype, output_format(dys[0], dys[1]))
        return ConvProblem("bwd_data", dx_desc, w_desc, dy_desc, cdesc), algo

    plan = _conv_plan(handle, key, build)
    seen = {}
    out = _execute(handle, plan, {"y": dy, "w": w}, seen=seen)
    _remember_conv(table if rkey else None, rkey, handle, plan, out, ("y", "w"), given, seen)
    return _like(out, dy)


def conv_backward_filter(x, dy, w_shape, stride=1, padding=0, dilation=1, groups=1,
                         mode="cross_correlation", algo="auto", handle=None, math_type=None,
                         filter_format=None):
    """dw: the gradient of ``conv`` with respect to its filter of shape ``w_shape``.

    filter_format: "NCHW" (KCRS) or "NHWC" (KRSC); default: x's layout."""
    handle = _handle_for(x, handle)
    rkey = _conv_recipe_key("bwd_filter", handle, (x, dy), (w_shape, stride, padding, dilation, groups, mode, algo,
                                                            math_type, filter_format))
    if rkey is not None:
        table = _plan_table(handle)
        recipe = recipes.lookup(table, rkey)
        if recipe is not None:
            return recipe(handle, x, dy)
    given = (x, dy)
    x, dy = _usable(x), _usable(dy)
    xs, dys = _signature(x), _signature(dy)
    w_shape = tuple(int(d) for d in w_shape)
    nd = _spatial_nd(xs[0], "x")
    key = ("bwd_filter", xs, dys, w_shape, _typed(stride), _typed(padding),
           _typed(dilation), _typed(groups), _typed(mode), _typed(algo),
           _typed(math_type), filter_format, handle.math_type, handle.workspace_limit, handle.deterministic)

    def build():
        x_desc = TensorDescriptor(xs[0], xs[2], _positive(xs))
        dy_desc = TensorDescriptor(dys[0], dys[2], _positive(dys))
        fmt = output_format(xs[0], xs[1]) if filter_format is None else filter_format
        w_desc = FilterDescriptor(w_shape, x_desc.dtype, fmt)
        cdesc = _conv_params(nd, x_desc.spatial, w_desc.kernel, stride, padding, dilation, groups,
                             mode, handle.math_type if math_type is None else math_type)
        return ConvProblem("bwd_filter", x_desc, w_desc, dy_desc, cdesc), algo

    plan = _conv_plan(handle, key, build)
    seen = {}
    out = _execute(handle, plan, {"x": x, "y": dy}, seen=seen)
    _remember_conv(table if rkey else None, rkey, handle, plan, out, ("x", "y"), given, seen)
    return _like(out, x)


def conv_transpose(x, w, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                   mode="cross_correlation", algo="auto", handle=None, math_type=None):
    """Transposed convolution (PyTorch's conv_transpose): the backward-data pass of the
    convolution whose filter is ``w`` of shape (C_in, C_out/groups, *kernel).

    padding: an int, one int or one (pre, post) pair per dim (the forward
    convolution's padding); output_padding picks among the output sizes a strided
    forward convolution maps to the same input size."""
    handle = _handle_for(x, handle)
    x, w = _usable(x), _packed_filter(w)
    xs, ws = _signature(x), _signature(w)
    nd = _spatial_nd(xs[0], "x")
    if isinstance(padding, str):
        raise BadParamError(f"conv_transpose padding must be numeric, got {padding!r} "
                            f"(the output size would be ambiguous)")
    if bias is not None:
        _check_bias(bias, ws[0][1] * groups if len(ws[0]) > 1 else -1)
    key = ("transpose", xs, ws, _typed(stride), _typed(padding), _typed(output_padding),
           _typed(dilation), _typed(groups), _typed(mode), _typed(algo),
           _typed(math_type), handle.math_type, handle.workspace_limit, handle.deterministic)

    def build():
        dy_desc = TensorDescriptor(xs[0], xs[2], _positive(xs))
        w_desc = FilterDescriptor.like(w)
        cdesc = _conv_params(nd, None, w_desc.kernel, stride, padding, dilation, groups, mode,
                             handle.math_type if math_type is None else math_type)
        if dy_desc.c != w_desc.k:
            raise BadParamError(f"conv_transpose: x has {dy_desc.c} channels but w has "
                                f"{w_desc.k} input channels (w is (C_in, C_out/groups, *kernel) "
                                f"= {w_desc.dims})")
        dx_dims = transposed_input_dims(dy_desc, w_desc, cdesc, output_padding)
        dx_desc = TensorDescriptor.packed(dx_dims, dy_desc.dtype, output_format(xs[0], xs[1]))
        return ConvProblem("bwd_data", dx_desc, w_desc, dy_desc, cdesc), algo

    plan = _conv_plan(handle, key, build)
    out = _execute(handle, plan, {"y": x, "w": w})
    if bias is not None:
        _add_bias(out, bias, plan.problem.c)
    return _like(out, x)


# -- layers ----------------------------------------------------------------------------
# The layers' own APIs (tridnn.api.<layer>) validate every call; here the work is to
# describe the caller's arrays, allocate the output in the input's layout and keep the
# descriptors of a call signature for the next call.
def _described(a, name="x"):
    """(array, its TensorDescriptor) for any NumPy/torch/DLPack array."""
    a = _usable(a)
    return a, _descriptor(_signature(a))


_descriptors: dict = {}


def _descriptor(sig):
    """The TensorDescriptor of an array signature (shape, strides, dtype), validated once
    per signature: descriptors are immutable, and building one costs ~15 us of checks that
    a training step would otherwise repeat for every layer call."""
    key = (sig[0], sig[1], sig[2])
    desc = _descriptors.get(key)
    if desc is None:
        if len(_descriptors) >= 4096:
            _descriptors.clear()
        desc = _descriptors[key] = TensorDescriptor(sig[0], sig[2], _positive(sig))
    return desc


def _cached(handle, key, build):
    table = _plan_table(handle)
    value = table.get(key)
    if value is None:
        if len(table) >= MAX_PLANS_PER_HANDLE:
            table.clear()
        value = table[key] = build()
    return value


_output_descs: dict = {}  # (id(like), dims) -> (like, descriptor); descriptors are immutable


def _output_desc(like: TensorDescriptor, dims=None) -> TensorDescriptor:
    """A packed descriptor of ``dims`` (default: like's) in like's layout, built once per
    (descriptor object, dims): layer calls repeat with the same cached input descriptor."""
    key = (id(like), dims)
    hit = _output_descs.get(key)
    if hit is not None and hit[0] is like:
        return hit[1]
    desc = TensorDescriptor.packed(like.dims if dims is None else dims, like.dtype,
                                   output_format(like.dims, like.strides))
    if len(_output_descs) >= 4096:
        _output_descs.clear()
    _output_descs[key] = (like, desc)
    return desc


def _pool_descriptor(kind, nd, kernel_size, stride, padding, nan_propagation):
    from ..descriptors.pooling import PoolingDescriptor
    return PoolingDescriptor(kind, kernel_size, padding, kernel_size if stride is None else stride,
                             1 if nan_propagation else 0, nd=nd)


def _pool(x, mode, kernel_size, stride, padding, nan_propagation, handle):
    from .pooling import pooling_forward
    handle = _handle_for(x, handle)
    sig = recipes.signature(x)
    if sig is not None:
        table = _plan_table(handle)
        rkey = ("pool_recipe", sig, int(mode), _typed(kernel_size), _typed(stride), _typed(padding),
                type(nan_propagation), nan_propagation)
        recipe = recipes.lookup(table, rkey)
        if recipe is not None:
            return recipe(x)
    x_in = x
    x, x_desc = _described(x)
    nd = _spatial_nd(x_desc.dims, "x")
    key = ("pool", x_desc, int(mode), _typed(kernel_size), _typed(stride), _typed(padding),
           bool(nan_propagation))

    def build():
        pool = _pool_descriptor(mode, nd, kernel_size, stride, padding, nan_propagation)
        return pool, _output_desc(x_desc, pool.output_dims(x_desc))
    pool, y_desc = _cached(handle, key, build)
    y = handle.backend.empty(y_desc)
    pooling_forward(handle, pool, 1.0, x_desc, x, 0.0, y_desc, y)
    if sig is not None and x is x_in and handle.backend_name == "triton" and y.numel() > 0:
        recipes.remember(table, rkey, recipes.PoolForward(y, pool), MAX_PLANS_PER_HANDLE)
    return _like(y, x)


def max_pool(x, kernel_size, stride=None, padding=0, nan_propagation=False, handle=None):
    """Max pooling over 1-3 spatial dims; stride defaults to the window; padding
    (symmetric) must be smaller than the window. NaN propagates when asked."""
    return _pool(x, 0, kernel_size, stride, padding, nan_propagation, handle)


def avg_pool(x, kernel_size, stride=None, padding=0, count_include_pad=True, handle=None):
    """Average pooling; ``count_include_pad`` divides by the whole window (cuDNN's
    AVERAGE_COUNT_INCLUDE_PADDING, PyTorch's default) or by its in-bounds part."""
    return _pool(x, 1 if count_include_pad else 2, kernel_size, stride, padding, False, handle)


def pool_backward(y, dy, x, mode, kernel_size, stride=None, padding=0, nan_propagation=False,
                  handle=None):
    """dx of max_pool/avg_pool; mode "max" (routes to the first maximum), "avg" (with
    padding counted) or "avg_exclude_pad", or a PoolingMode."""
    from .pooling import pooling_backward
    handle = _handle_for(x, handle)
    mode = {"max": 0, "avg": 1, "avg_exclude_pad": 2}.get(mode, mode) if isinstance(mode, str) else mode
    given = (y, dy, x)
    sigs = tuple(recipes.signature(a) for a in given)
    plain = None not in sigs
    if plain:
        table = _plan_table(handle)
        rkey = ("pool_bwd_recipe", sigs, type(mode), mode, _typed(kernel_size), _typed(stride), _typed(padding),
                type(nan_propagation), nan_propagation)
        recipe = recipes.lookup(table, rkey)
        if recipe is not None:  # dx is allocated here: it overlaps no input
            return recipe(*given)
    x, x_desc = _described(x)
    y, y_desc = _described(y, "y")
    dy, dy_desc = _described(dy, "dy")
    nd = _spatial_nd(x_desc.dims, "x")
    # The descriptor depends on nothing but these values (and nd); typed, so 3 and 3.0 or
    # True never share an entry, and a value the descriptor refuses is never stored.
    key = ("pool_bwd", nd, type(mode), mode, _typed(kernel_size), _typed(stride), _typed(padding),
           type(nan_propagation), nan_propagation)
    try:
        pool = _cached(handle, key, lambda: _pool_descriptor(mode, nd, kernel_size, stride, padding,
                                                             nan_propagation))
    except TypeError:  # an unhashable parameter: the descriptor reports what is wrong with it
        pool = _pool_descriptor(mode, nd, kernel_size, stride, padding, nan_propagation)
    dx_desc = _output_desc(x_desc)
    dx = handle.backend.empty(dx_desc)
    pooling_backward(handle, pool, 1.0, y_desc, y, dy_desc, dy, x_desc, x, 0.0, dx_desc, dx)
    if (plain and all(a is b for a, b in zip((y, dy, x), given)) and handle.backend_name == "triton"
            and dx.numel() > 0 and dy.numel() > 0):
        recipes.remember(table, rkey, recipes.PoolBackward(dx, pool), MAX_PLANS_PER_HANDLE)
    return _like(dx, x)


def _adaptive(x, output_size, mode, handle):
    from .pooling import adaptive_pooling_forward
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    nd = _spatial_nd(x_desc.dims, "x")
    out = per_dim("output_size", output_size, nd, 1)
    y_desc = _output_desc(x_desc, (*x_desc.dims[:2], *out))
    y = handle.backend.empty(y_desc)
    adaptive_pooling_forward(handle, mode, 1.0, x_desc, x, 0.0, y_desc, y)
    return _like(y, x)


def adaptive_avg_pool(x, output_size, handle=None):
    """PyTorch's adaptive average pooling: ``output_size`` fixes the output, bins follow."""
    return _adaptive(x, output_size, "average", handle)


def adaptive_max_pool(x, output_size, handle=None):
    return _adaptive(x, output_size, "max", handle)


def adaptive_pool_backward(dy, x, mode, handle=None):
    """dx of adaptive_avg_pool (mode "average") or adaptive_max_pool (mode "max")."""
    from .pooling import adaptive_pooling_backward
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    dy, dy_desc = _described(dy, "dy")
    dx_desc = _output_desc(x_desc)
    dx = handle.backend.empty(dx_desc)
    adaptive_pooling_backward(handle, mode, 1.0, dy_desc, dy, x_desc, x, 0.0, dx_desc, dx)
    return _like(dx, x)


# -- activations -------------------------------------------------------------------------
def _act_descriptor(mode, coef, swish_beta, nan_propagation=False):
    from ..descriptors.activation import ActivationDescriptor
    return ActivationDescriptor(mode, 1 if nan_propagation else 0, coef, swish_beta)


def activation(x, mode="relu", coef=0.0, swish_beta=1.0, handle=None):
    """y = act(x) for any activation mode (a name such as "relu", "gelu_tanh", or an
    ActivationMode); ``coef`` is the clipping ceiling, ELU alpha, leaky slope or
    softplus beta; ``swish_beta`` is SWISH's beta."""
    from .activation import activation_forward
    handle = _handle_for(x, handle)
    sig = recipes.signature(x)
    if sig is not None:
        table = _plan_table(handle)
        key = ("act", sig, type(mode), mode, type(coef), coef, type(swish_beta), swish_beta)
        recipe = recipes.lookup(table, key)
        if recipe is not None:
            y = recipe[0]()
            recipe[1](x, y)
            return y
    x_in = x
    x, x_desc = _described(x)
    act = _act_descriptor(mode, coef, swish_beta)
    y_desc = _output_desc(x_desc)
    y = handle.backend.empty(y_desc)
    activation_forward(handle, act, 1.0, x_desc, x, 0.0, y_desc, y)
    if sig is not None and x is x_in and handle.backend_name == "triton":
        from ..cuda.activation import forward_plan
        run = forward_plan(x, y, mode=int(act.mode), coef=act.coef, swish_beta=act.swish_beta,
                           propagate_nan=act.propagate_nan)
        if run is not None:
            recipes.remember(table, key, (recipes.Output(y), run), MAX_PLANS_PER_HANDLE)
    return _like(y, x)


def activation_backward(y, dy, x, mode="relu", coef=0.0, swish_beta=1.0, handle=None):
    """dx = dy * act'(x) (y is act(x); modes that need only y or x still take both)."""
    from .activation import activation_backward as backward
    handle = _handle_for(x, handle)
    sigs = (recipes.signature(y), recipes.signature(dy), recipes.signature(x))
    plain = None not in sigs
    if plain:
        table = _plan_table(handle)
        key = ("act_bwd", sigs, type(mode), mode, type(coef), coef, type(swish_beta), swish_beta)
        recipe = recipes.lookup(table, key)
        if recipe is not None:
            dx = recipe[0]()
            recipe[1](y, dy, x, dx)
            return dx
    given = (y, dy, x)
    x, x_desc = _described(x)
    y, y_desc = _described(y, "y")
    dy, dy_desc = _described(dy, "dy")
    act = _act_descriptor(mode, coef, swish_beta)
    dx_desc = _output_desc(x_desc)
    dx = handle.backend.empty(dx_desc)
    backward(handle, act, 1.0, y_desc, y, dy_desc, dy, x_desc, x, 0.0, dx_desc, dx)
    if plain and all(a is b for a, b in zip((y, dy, x), given)) and handle.backend_name == "triton":
        from ..cuda.activation import backward_plan
        run = backward_plan(y, dy, x, dx, mode=int(act.mode), coef=act.coef, swish_beta=act.swish_beta)
        if run is not None:
            recipes.remember(table, key, (recipes.Output(dx), run), MAX_PLANS_PER_HANDLE)
    return _like(dx, x)


def relu(x, handle=None):
    return activation(x, "relu", handle=handle)


def relu6(x, handle=None):
    return activation(x, "clipped_relu", 6.0, handle=handle)


def clipped_relu(x, ceiling, handle=None):
    return activation(x, "clipped_relu", ceiling, handle=handle)


def leaky_relu(x, negative_slope=0.01, handle=None):
    return activation(x, "leaky_relu", negative_slope, handle=handle)


def elu(x, alpha=1.0, handle=None):
    return activation(x, "elu", alpha, handle=handle)


def sigmoid(x, handle=None):
    return activation(x, "sigmoid", handle=handle)


def tanh(x, handle=None):
    return activation(x, "tanh", handle=handle)


def swish(x, beta=1.0, handle=None):
    """x * sigmoid(beta * x); beta 1 is SiLU."""
    return activation(x, "swish", swish_beta=beta, handle=handle)


silu = swish


def gelu(x, approximate="none", handle=None):
    """approximate "none" (the erf form) or "tanh", as PyTorch's gelu."""
    if approximate not in ("none", "tanh"):
        raise BadParamError(f"gelu approximate={approximate!r}; valid: 'none', 'tanh'")
    return activation(x, "gelu" if approximate == "none" else "gelu_tanh", handle=handle)


def softplus(x, beta=1.0, handle=None):
    return activation(x, "softplus", beta, handle=handle)


def hard_swish(x, handle=None):
    return activation(x, "hard_swish", handle=handle)


# -- softmax ------------------------------------------------------------------------------
def _channel_view(a, axis):
    """``a`` with ``axis`` moved to position 1 as a view (a 1-D array gains a batch dim),
    so that cuDNN's CHANNEL mode reduces over it."""
    ndim = len(_signature(a)[0])
    if not -ndim <= axis < ndim:
        raise BadParamError(f"softmax axis {axis} is out of range for an array of {ndim} dims")
    axis %= ndim
    if ndim == 1:
        return a[None], lambda out: out[0]
    if axis == 1:
        return a, lambda out: out
    return _moveaxis(a, axis, 1), lambda out: _moveaxis(out, 1, axis)


def _moveaxis(a, source, destination):
    return a.movedim(source, destination) if _is_torch(a) else np.moveaxis(a, source, destination)


def softmax(x, axis=1, log=False, algorithm="accurate", handle=None):
    """softmax (or log-softmax) along ``axis``; ``algorithm`` "accurate" subtracts the
    max first, "fast" does not (cuDNN's FAST: only for inputs known to be small)."""
    from .softmax import softmax_forward
    handle = _handle_for(x, handle)
    moved, back = _channel_view(x, axis)
    moved, x_desc = _described(moved)
    y_desc = _output_desc(x_desc)
    y = handle.backend.empty(y_desc)
    softmax_forward(handle, "log" if log else algorithm, "channel", 1.0, x_desc, moved, 0.0, y_desc, y)
    return _like(back(y), x)


def log_softmax(x, axis=1, handle=None):
    return softmax(x, axis, log=True, handle=handle)


def softmax_backward(y, dy, axis=1, log=False, handle=None):
    """dx of softmax (or log_softmax when ``log``) from its output y and the gradient dy."""
    from .softmax import softmax_backward as backward
    handle = _handle_for(y, handle)
    y_moved, back = _channel_view(y, axis)
    dy_moved, _ = _channel_view(dy, axis)
    y_moved, y_desc = _described(y_moved, "y")
    dy_moved, dy_desc = _described(dy_moved, "dy")
    dx_desc = _output_desc(y_desc)
    dx = handle.backend.empty(dx_desc)
    backward(handle, "log" if log else "accurate", "channel", 1.0, y_desc, y_moved, dy_desc, dy_moved,
             0.0, dx_desc, dx)
    return _like(back(dx), y)


# -- batch normalization --------------------------------------------------------------------
def _bn_param(a, desc, name, backend, fill=None):
    """A per-channel parameter as the derived descriptor's array: a (C,) array viewed as
    (1, C, 1, ...) without copying when its dtype is the parameter dtype, else converted.
    Returns (array, copied)."""
    want = desc.dtype.numpy
    if a is None:
        return _filled(backend, desc, fill), True
    size = math.prod(_signature(a)[0])
    if size != desc.size:
        raise BadParamError(f"{name} has {size} values; batch norm needs {desc.size} "
                            f"(one per channel{'' if desc.size == desc.c else ' and position'})")
    if _is_torch(a):
        import torch
        target = torch.float64 if want == np.float64 else torch.float32
        copied = a.dtype != target or not a.is_contiguous()
        t = a.detach().to(target).contiguous() if copied else a.detach()
        return t.reshape(desc.dims), copied
    arr = _to_numpy(a)
    copied = arr.dtype != want or not arr.flags.c_contiguous
    arr = np.ascontiguousarray(arr, want) if copied else arr
    return arr.reshape(desc.dims), copied


def _filled(backend, desc, value):
    out = backend.empty(desc)
    out[...] = value
    return out


def _bn_setup(x, mode, handle):
    from ..descriptors.normalization import derive_bn_tensor_descriptor
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    bn_desc = _cached(handle, ("bn", x_desc, mode),
                      lambda: derive_bn_tensor_descriptor(x_desc, mode))
    return handle, x, x_desc, bn_desc


def batch_norm_training(x, weight=None, bias=None, running_mean=None, running_var=None,
                        momentum=0.1, eps=1e-5, mode="spatial", handle=None, *, _packed_stats=False):
    """Training-mode batch norm: (y, saved_mean, saved_inv_std).

    running_mean/running_var, when given, are updated in place as PyTorch does
    (``(1 - momentum) * running + momentum * batch``, the unbiased batch variance).
    mode "spatial" (per channel, BatchNorm2d) or "per_activation" (per channel and
    position). weight/bias default to 1 and 0.
    ``_packed_stats`` (tridnn.torch's eager route, Triton backend): the saved statistics
    are views of one buffer laid out as the backward kernels' statistics
    (cuda.batchnorm.packed_stats), so batch_norm_backward reads them in place instead of
    copying them; they then share storage, which a custom op's outputs must not."""
    from .normalization import batch_norm_forward_training
    given = (x, weight, bias, running_mean, running_var)
    sigs = tuple(None if a is None else recipes.signature(a) for a in given)
    plain = (sigs[0] is not None and all(s is not None for s, a in zip(sigs, given) if a is not None)
             and recipes.immutable_scalars(momentum, eps, mode))
    if plain:
        handle = _handle_for(x, handle)
        table = _plan_table(handle)
        key = ("bn_train", sigs, type(momentum), momentum, type(eps), eps, type(mode), mode, _packed_stats is True)
        recipe = recipes.lookup(table, key)
        if recipe is not None and not recipe.running_overlap(given):
            return recipe(given)
    handle, x, x_desc, bn_desc = _bn_setup(x, mode, handle)
    backend = handle.backend
    scale, w_copied = _bn_param(weight, bn_desc, "weight", backend, 1.0)
    shift, b_copied = _bn_param(bias, bn_desc, "bias", backend, 0.0)
    if (running_mean is None) != (running_var is None):
        raise BadParamError("pass both running_mean and running_var, or neither")
    rm = rv = None
    rm_copied = rv_copied = False
    if running_mean is not None:
        rm, rm_copied = _bn_param(running_mean, bn_desc, "running_mean", backend)
        rv, rv_copied = _bn_param(running_var, bn_desc, "running_var", backend)
    y_desc = _output_desc(x_desc)
    y = backend.empty(y_desc)
    if _packed_stats is True and handle.backend_name == "triton":
        from ..cuda.batchnorm import packed_stats
        from ..cuda.backend import TORCH_DTYPE
        saved_mean, saved_inv = packed_stats(bn_desc.dims, bn_desc.strides, TORCH_DTYPE[bn_desc.dtype], backend.device)
    else:
        saved_mean, saved_inv = backend.empty(bn_desc), backend.empty(bn_desc)
    batch_norm_forward_training(handle, mode, 1.0, 0.0, x_desc, x, y_desc, y, bn_desc, scale, shift,
                                momentum, rm, rv, eps, saved_mean, saved_inv)
    if running_mean is not None:
        _write_back(running_mean, rm, rm_copied)
        _write_back(running_var, rv, rv_copied)
    # A recipe when the kernels saw the caller's own x; each parameter is either the
    # caller's own, a constant the full path made itself (weight/bias None, which the
    # kernels only read), or a conversion the recipe repeats (layer_recipes._route).
    if plain and x is given[0] and handle.backend_name == "triton" and x.numel() > 0:
        from ..descriptors.normalization import batch_norm_mode
        to = (_route(weight, scale, w_copied, True), _route(bias, shift, b_copied, True),
              _route(running_mean, rm, rm_copied, False), _route(running_var, rv, rv_copied, False))
        recipes.remember(table, key, recipes.BatchNormTraining(
            given, (x, scale, shift, rm, rv), y, saved_mean, saved_inv, scale if weight is None else None,
            shift if bias is None else None, to, int(batch_norm_mode(mode)), float(momentum), float(eps),
            _packed_stats is True),
            MAX_PLANS_PER_HANDLE)
    return _like(y, x), _like(saved_mean, x), _like(saved_inv, x)


_EXACT_WIDENING = None


def _route(a, used, copied, read_only):
    """How a batch norm recipe hands parameter ``a`` to the kernels (see
    layer_recipes.BatchNormTraining): None for the caller's tensor itself (as the full
    path did, or, for a read-only parameter, when the full path only widened a contiguous
    bfloat16/float16/float32 tensor exactly: the kernels widen what they load to float64
    themselves), else the dtype the full path converted it to."""
    global _EXACT_WIDENING
    if a is None or not copied:
        return None
    import torch
    if _EXACT_WIDENING is None:
        _EXACT_WIDENING = {(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                           (torch.bfloat16, torch.float64), (torch.float16, torch.float64),
                           (torch.float32, torch.float64)}
    if read_only and a.is_contiguous() and (a.dtype, used.dtype) in _EXACT_WIDENING:
        return None
    return used.dtype


def _write_back(original, updated, copied):
    """Running statistics that had to be converted are copied back into the caller's array."""
    if not copied:
        return
    if _is_torch(original):
        import torch
        src = updated if _is_torch(updated) else torch.from_numpy(np.asarray(updated))
        original.detach().copy_(src.reshape(original.shape))
    else:
        original[...] = np.asarray(updated).reshape(original.shape)


def batch_norm_inference(x, running_mean, running_var, weight=None, bias=None, eps=1e-5,
                         mode="spatial", handle=None):
    """Inference-mode batch norm with the estimated (running) statistics."""
    from .normalization import batch_norm_forward_inference
    handle, x, x_desc, bn_desc = _bn_setup(x, mode, handle)
    backend = handle.backend
    scale, _ = _bn_param(weight, bn_desc, "weight", backend, 1.0)
    shift, _ = _bn_param(bias, bn_desc, "bias", backend, 0.0)
    mean, _ = _bn_param(running_mean, bn_desc, "running_mean", backend)
    var, _ = _bn_param(running_var, bn_desc, "running_var", backend)
    y_desc = _output_desc(x_desc)
    y = backend.empty(y_desc)
    batch_norm_forward_inference(handle, mode, 1.0, 0.0, x_desc, x, y_desc, y, bn_desc, scale, shift,
                                 mean, var, eps)
    return _like(y, x)


def batch_norm(x, running_mean=None, running_var=None, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5, mode="spatial", handle=None):
    """PyTorch's F.batch_norm: batch statistics when training (or when no running
    statistics are given), the running ones otherwise; returns y."""
    if training or running_mean is None:
        return batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps, mode,
                                   handle)[0]
    return batch_norm_inference(x, running_mean, running_var, weight, bias, eps, mode, handle)


def batch_norm_backward(x, dy, weight, saved_mean, saved_inv_std, eps=1e-5, mode="spatial",
                        handle=None):
    """(dx, dweight, dbias) of training-mode batch norm, from batch_norm_training's saved
    statistics; dweight/dbias come back as (C,) arrays (per channel and position for
    per_activation, flattened)."""
    from .normalization import batch_norm_backward as backward
    given = (x, dy, weight, saved_mean, saved_inv_std)
    sigs = tuple(None if a is None else recipes.signature(a) for a in given)
    plain = (sigs[0] is not None and all(s is not None for s, a in zip(sigs, given) if a is not None)
             and recipes.immutable_scalars(eps, mode))
    if plain:
        handle = _handle_for(x, handle)
        table = _plan_table(handle)
        key = ("bn_bwd", sigs, type(eps), eps, type(mode), mode)
        recipe = recipes.lookup(table, key)
        if recipe is not None:  # every output is allocated here: none can overlap an input
            return recipe(given)
    handle, x, x_desc, bn_desc = _bn_setup(x, mode, handle)
    backend = handle.backend
    dy, dy_desc = _described(dy, "dy")
    scale, w_copied = _bn_param(weight, bn_desc, "weight", backend, 1.0)
    mean, m_copied = _bn_param(saved_mean, bn_desc, "saved_mean", backend)
    inv, i_copied = _bn_param(saved_inv_std, bn_desc, "saved_inv_std", backend)
    dx_desc = _output_desc(x_desc)
    dx = backend.empty(dx_desc)
    dscale, dbias = backend.empty(bn_desc), backend.empty(bn_desc)
    backward(handle, mode, 1.0, 0.0, 1.0, 0.0, x_desc, x, dy_desc, dy, dx_desc, dx, bn_desc, scale,
             dscale, dbias, eps, mean, inv)
    if plain and x is given[0] and dy is given[1] and handle.backend_name == "triton" and x.numel() > 0:
        from ..descriptors.normalization import batch_norm_mode
        to = (_route(weight, scale, w_copied, True), _route(saved_mean, mean, m_copied, True),
              _route(saved_inv_std, inv, i_copied, True))
        recipes.remember(table, key, recipes.BatchNormBackward(
            given, (scale, mean, inv), dx, dscale, dbias, scale if weight is None else None, to,
            int(batch_norm_mode(mode)), float(eps)), MAX_PLANS_PER_HANDLE)
    flat = (-1,)
    return _like(dx, x), _like(dscale.reshape(flat), x), _like(dbias.reshape(flat), x)


# -- fused convolution + bias + activation ----------------------------------------------------
def conv_bias_activation(x, w, bias=None, z=None, alpha1=1.0, alpha2=1.0, activation="relu", coef=0.0,
                         stride=1, padding=0, dilation=1, groups=1, mode="cross_correlation",
                         algo="auto", handle=None):
    """y = act(alpha1 * conv(x, w) + alpha2 * z + bias) in one pass over y (cuDNN's
    ConvolutionBiasActivationForward); z (a residual of y's shape) is optional."""
    from ..descriptors.activation import ActivationDescriptor
    from .convolution import convolution_bias_activation_forward
    handle = _handle_for(x, handle)
    x, w = _usable(x), _packed_filter(w)
    xs, ws_ = _signature(x), _signature(w)
    nd = _spatial_nd(xs[0], "x")
    plan = _forward_plan(handle, w, xs, ws_, nd, stride, padding, dilation, groups, mode, algo, None)
    problem, backend = plan.problem, handle.backend
    k = problem.k
    bias_desc = TensorDescriptor.packed((1, k) + (1,) * nd, problem.dtype)
    if bias is None:
        bias_arr = _filled(backend, bias_desc, 0.0)
    else:
        _check_bias(bias, k)
        bias_arr = _cast_like(bias, problem.dtype.numpy, x).reshape(bias_desc.dims)
    z_desc = None
    if z is not None:
        z, z_desc = _described(z, "z")
    else:
        alpha2 = 0.0
    act = ActivationDescriptor(activation, 0, coef)
    y = backend.empty(problem.y)
    ws = handle.workspace(plan.workspace_size) if plan.workspace_size else None
    convolution_bias_activation_forward(handle, alpha1, problem.x, x, problem.w, w, problem.conv,
                                        plan.algorithm.enum, ws, alpha2, z_desc, z, bias_desc,
                                        bias_arr, act, problem.y, y)
    return _like(y, x)


def _cast_like(a, np_dtype, ref):
    """``a`` in ``np_dtype``, as the kind of array ``ref`` is (zero copy when it already is)."""
    if _is_torch(a):
        import torch
        if a.device.type != "cpu":
            target = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                      np.dtype(np.float16): torch.float16}.get(np.dtype(np_dtype), torch.bfloat16)
            return a.detach().to(target).contiguous()
        a = _to_numpy(a)
    return np.ascontiguousarray(_to_numpy(a), np_dtype)


# -- layer, group and RMS norm (tridnn extensions), LRN, dropout --------------------------------
def _norm_params(param_desc, weight, bias, backend):
    scale, _ = _bn_param(weight, param_desc, "weight", backend, 1.0)
    shift = None
    if bias is not False:
        shift, _ = _bn_param(None if bias is None else bias, param_desc, "bias", backend, 0.0)
    return scale, shift


def _norm_ndim(x_desc, normalized_shape):
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if tuple(x_desc.dims[-len(shape):]) != tuple(int(s) for s in shape) or len(shape) >= x_desc.ndim:
        raise BadParamError(f"normalized_shape {shape} must equal the trailing dims of x {x_desc.dims} "
                            f"(and leave at least one leading dim)")
    return len(shape)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, handle=None, return_stats=False):
    """PyTorch's layer_norm over the trailing ``normalized_shape`` dims; with
    ``return_stats``, (y, mean, inv_std) for layer_norm_backward."""
    from .normalization import layer_norm_descriptors, layer_norm_forward
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    nd = _norm_ndim(x_desc, normalized_shape)
    param_desc, stats_desc = layer_norm_descriptors(x_desc, nd)
    scale, shift = _norm_params(param_desc, weight, bias, handle.backend)
    y_desc = _output_desc(x_desc)
    y, mean, inv = (handle.backend.empty(d) for d in (y_desc, stats_desc, stats_desc))
    layer_norm_forward(handle, nd, 1.0, x_desc, x, 0.0, y_desc, y, param_desc, scale, shift, eps,
                       stats_desc, mean, inv)
    return (_like(y, x), _like(mean, x), _like(inv, x)) if return_stats else _like(y, x)


def layer_norm_backward(x, dy, normalized_shape, weight, mean, inv_std, handle=None):
    """(dx, dweight, dbias) of layer_norm from its saved statistics."""
    from .normalization import layer_norm_backward as backward, layer_norm_descriptors
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    dy, dy_desc = _described(dy, "dy")
    nd = _norm_ndim(x_desc, normalized_shape)
    param_desc, stats_desc = layer_norm_descriptors(x_desc, nd)
    backend = handle.backend
    scale, _ = _norm_params(param_desc, weight, False, backend)
    mean, _ = _bn_param(mean, stats_desc, "mean", backend)
    inv, _ = _bn_param(inv_std, stats_desc, "inv_std", backend)
    dx_desc = _output_desc(x_desc)
    dx, dscale, dbias = backend.empty(dx_desc), backend.empty(param_desc), backend.empty(param_desc)
    backward(handle, nd, 1.0, x_desc, x, dy_desc, dy, 0.0, dx_desc, dx, param_desc, scale, dscale, dbias,
             stats_desc, mean, inv)
    return _like(dx, x), _like(dscale, x), _like(dbias, x)


def group_norm(x, groups, weight=None, bias=None, eps=1e-5, handle=None):
    """PyTorch's group_norm: statistics per sample over each group of channels."""
    from .normalization import group_norm_descriptors, group_norm_forward
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    param_desc, stats_desc = group_norm_descriptors(x_desc, groups)
    scale, shift = _norm_params(param_desc, weight, bias, handle.backend)
    y_desc = _output_desc(x_desc)
    y = handle.backend.empty(y_desc)
    group_norm_forward(handle, groups, 1.0, x_desc, x, 0.0, y_desc, y, param_desc, scale, shift, eps)
    return _like(y, x)


def rms_norm(x, normalized_shape, weight=None, eps=1e-6, handle=None):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing ``normalized_shape`` dims."""
    from .normalization import rms_norm_descriptors, rms_norm_forward
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    nd = _norm_ndim(x_desc, normalized_shape)
    param_desc, _ = rms_norm_descriptors(x_desc, nd)
    scale, _ = _norm_params(param_desc, weight, False, handle.backend)
    y_desc = _output_desc(x_desc)
    y = handle.backend.empty(y_desc)
    rms_norm_forward(handle, nd, 1.0, x_desc, x, 0.0, y_desc, y, param_desc, scale, eps)
    return _like(y, x)


def lrn(x, n=5, alpha=1e-4, beta=0.75, k=2.0, handle=None):
    """cuDNN's cross-channel LRN: x / (k + alpha/n * sum of x^2 over n channels)^beta
    (cuDNN's defaults; PyTorch's local_response_norm defaults to k=1)."""
    from ..descriptors.lrn import LRNDescriptor
    from .lrn import lrn_cross_channel_forward
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    y_desc = _output_desc(x_desc)
    y = handle.backend.empty(y_desc)
    lrn_cross_channel_forward(handle, LRNDescriptor(n, alpha, beta, k), 0, 1.0, x_desc, x, 0.0, y_desc, y)
    return _like(y, x)


def dropout(x, p=0.5, seed=0, training=True, return_mask=False, handle=None):
    """Inverted dropout: y = x * mask / (1 - p). Each call with the same (p, seed) on a
    handle draws the next mask of that seed's sequence (a fresh handle replays it).
    ``return_mask`` also returns the reserve space (the mask) for dropout_backward."""
    from ..descriptors.dropout import DropoutDescriptor, dropout_get_reserve_space_size
    from .dropout import dropout_forward
    if not training or p == 0:
        return (x, None) if return_mask else x
    handle = _handle_for(x, handle)
    x, x_desc = _described(x)
    desc = _cached(handle, ("dropout", float(p), int(seed)), lambda: DropoutDescriptor(p, seed))
    reserve = np.empty(dropout_get_reserve_space_size(x_desc), np.uint8) \
        if handle.backend_name == "numpy" else handle.backend.allocate_workspace(
            dropout_get_reserve_space_size(x_desc))
    y_desc = _output_desc(x_desc)
    y = handle.backend.empty(y_desc)
    dropout_forward(handle, desc, x_desc, x, y_desc, y, reserve)
    return (_like(y, x), reserve) if return_mask else _like(y, x)


def dropout_backward(dy, reserve, p=0.5, handle=None):
    """dx = dy * mask / (1 - p) with the mask dropout(..., return_mask=True) gave."""
    from ..descriptors.dropout import DropoutDescriptor
    from .dropout import dropout_backward as backward
    handle = _handle_for(dy, handle)
    dy, dy_desc = _described(dy, "dy")
    dx_desc = _output_desc(dy_desc)
    dx = handle.backend.empty(dx_desc)
    backward(handle, DropoutDescriptor(p), dy_desc, dy, dx_desc, dx, reserve)
    return _like(dx, dy)
