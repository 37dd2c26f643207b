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

import weakref
from dataclasses import dataclass

import numpy as np

from ..algorithms import selection
from ..algorithms.problem import ConvProblem
from ..descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor
from ..descriptors.convolution import per_dim, transposed_input_dims
from ..descriptors.tensor import packed_strides
from ..errors import BadParamError
from ..handle import default_handle
from ..types import ConvMode, TensorFormat
from .convolution import _algorithm, execute

__all__ = ["conv", "conv_transpose", "conv_backward_data", "conv_backward_filter",
           "clear_plan_cache", "plan_cache_info"]

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
        return handle.check()
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


def _conv_plan(handle, direction, key, build):
    """The cached plan for ``key``, built by ``build()`` -> (problem, out name) on a miss."""
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


def _execute(handle, plan, arrays: dict, epilogue=None):
    """Check the inputs against the plan's descriptors, allocate the output, run;
    returns the backend's array (wrap it with ``_like``)."""
    backend = handle.backend
    out_name = plan.problem.output
    views = {name: backend.view(arr, plan.descs[name], _ARG[plan.problem.direction][name])
             for name, arr in arrays.items()}
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


def _hashable(value):
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def _bias_epilogue(bias, k, acc_dtype):
    """Fused bias add: applied to each accumulator block before its one rounding."""
    b = np.asarray(_to_numpy(bias), dtype=acc_dtype)
    if b.shape != (k,):
        raise BadParamError(f"bias must have shape ({k},) (one value per output channel), "
                            f"got {b.shape}")

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


# -- convolution ----------------------------------------------------------------------
def conv(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, mode="cross_correlation",
         algo="auto", handle=None, math_type=None):
    """N-d convolution (1D, 2D or 3D from x's rank): ``y = conv(x, w) + bias``.

    x: (N, C, *spatial); w: (K, C/groups, *kernel), packed KCRS or KRSC; bias: (K,).
    padding: an int, one int per dim, one (pre, post) pair per dim, "same" or "valid".
    """
    handle = _handle_for(x, handle)
    x, w = _usable(x), _packed_filter(w)
    xs, ws = _signature(x), _signature(w)
    nd = _spatial_nd(xs[0], "x")
    if bias is not None:
        _check_bias(bias, ws[0][0] if len(ws[0]) else -1)
    key = ("fwd", xs, ws, _hashable(stride), _hashable(padding), _hashable(dilation), groups, mode,
           algo if isinstance(algo, str) else _hashable(algo), math_type,
           handle.workspace_limit, handle.deterministic)

    def build():
        x_desc = TensorDescriptor(xs[0], xs[2], _positive(xs))
        w_desc = FilterDescriptor.like(w)
        cdesc = _conv_params(nd, x_desc.spatial, w_desc.kernel, stride, padding, dilation, groups,
                             mode, handle.math_type if math_type is None else math_type)
        y_dims = cdesc.output_dims(x_desc, w_desc)
        y_desc = TensorDescriptor.packed(y_dims, x_desc.dtype, output_format(xs[0], xs[1]))
        return ConvProblem("fwd", x_desc, w_desc, y_desc, cdesc), algo

    plan = _conv_plan(handle, "fwd", key, build)
    epilogue = None
    if bias is not None:
        if handle.backend_name != "numpy":
            out = _execute(handle, plan, {"x": x, "w": w})
            return _like(_add_bias(out, bias, plan.problem.k), x)
        epilogue = _bias_epilogue(bias, plan.problem.k, plan.problem.accumulator)
    return _like(_execute(handle, plan, {"x": x, "w": w}, epilogue), x)


def _positive(sig):
    """Strides as a descriptor takes them: size-1 axes may report 0, any value works."""
    return tuple(s if s > 0 else 1 for s in sig[1])


def conv_backward_data(dy, w, x_shape, stride=1, padding=0, dilation=1, groups=1,
                       mode="cross_correlation", algo="auto", handle=None, math_type=None):
    """dx: the gradient of ``conv`` with respect to its input of shape ``x_shape``."""
    handle = _handle_for(dy, handle)
    dy, w = _usable(dy), _packed_filter(w)
    dys, ws = _signature(dy), _signature(w)
    x_shape = tuple(int(d) for d in x_shape)
    nd = _spatial_nd(x_shape, "x_shape")
    key = ("bwd_data", dys, ws, x_shape, _hashable(stride), _hashable(padding), _hashable(dilation),
           groups, mode, algo if isinstance(algo, str) else _hashable(algo), math_type,
           handle.workspace_limit, handle.deterministic)

    def build():
        dy_desc = TensorDescriptor(dys[0], dys[2], _positive(dys))
        w_desc = FilterDescriptor.like(w)
        cdesc = _conv_params(nd, x_shape[2:], w_desc.kernel, stride, padding, dilation, groups,
                             mode, handle.math_type if math_type is None else math_type)
        dx_desc = TensorDescriptor.packed(x_shape, dy_desc.dtype, output_format(dys[0], dys[1]))
        return ConvProblem("bwd_data", dx_desc, w_desc, dy_desc, cdesc), algo

    plan = _conv_plan(handle, "bwd_data", key, build)
    return _like(_execute(handle, plan, {"y": dy, "w": w}), dy)


def conv_backward_filter(x, dy, w_shape, stride=1, padding=0, dilation=1, groups=1,
                         mode="cross_correlation", algo="auto", handle=None, math_type=None,
                         filter_format=None):
    """dw: the gradient of ``conv`` with respect to its filter of shape ``w_shape``.

    filter_format: "NCHW" (KCRS) or "NHWC" (KRSC); default: x's layout."""
    handle = _handle_for(x, handle)
    x, dy = _usable(x), _usable(dy)
    xs, dys = _signature(x), _signature(dy)
    w_shape = tuple(int(d) for d in w_shape)
    nd = _spatial_nd(xs[0], "x")
    key = ("bwd_filter", xs, dys, w_shape, _hashable(stride), _hashable(padding),
           _hashable(dilation), groups, mode, algo if isinstance(algo, str) else _hashable(algo),
           math_type, filter_format, handle.workspace_limit, handle.deterministic)

    def build():
        x_desc = TensorDescriptor(xs[0], xs[2], _positive(xs))
        dy_desc = TensorDescriptor(dys[0], dys[2], _positive(dys))
        fmt = output_format(xs[0], xs[1]) if filter_format is None else filter_format
        w_desc = FilterDescriptor(w_shape, x_desc.dtype, fmt)
        cdesc = _conv_params(nd, x_desc.spatial, w_desc.kernel, stride, padding, dilation, groups,
                             mode, handle.math_type if math_type is None else math_type)
        return ConvProblem("bwd_filter", x_desc, w_desc, dy_desc, cdesc), algo

    plan = _conv_plan(handle, "bwd_filter", key, build)
    return _like(_execute(handle, plan, {"x": x, "y": dy}), x)


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
    key = ("transpose", xs, ws, _hashable(stride), _hashable(padding), _hashable(output_padding),
           _hashable(dilation), groups, mode, algo if isinstance(algo, str) else _hashable(algo),
           math_type, handle.workspace_limit, handle.deterministic)

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

    plan = _conv_plan(handle, "bwd_data", key, build)
    out = _execute(handle, plan, {"y": x, "w": w})
    if bias is not None:
        _add_bias(out, bias, plan.problem.c)
    return _like(out, x)
