"""tridnn's primitives as PyTorch custom operators (``torch.ops.tridnn.*``).

Each op is a ``torch.library.custom_op`` whose real kernel calls tridnn's functional
API (CPU tensors go to the NumPy backend zero copy; CUDA tensors to the Triton
backend), with a fake kernel so torch.compile can trace it, and autograd formulas
that are themselves tridnn ops. Outputs follow the input's memory format
(channels_last in, channels_last out); the fake kernels compute the same strides.
"""
from __future__ import annotations

import functools
from typing import List, Optional

import torch
from torch import Tensor

from ..api import functional as F
from ..api import layer_recipes as recipes
from ..descriptors.tensor import packed_strides
from ..types import TensorFormat
from .eager import caller, plain_eager

_formulas: dict = {}  # op -> (backward, setup_context), for the eager callers (``fast``)


def _autograd(op, backward, setup_context):
    """op.register_autograd, remembered so ``fast.<op>`` can use the same formulas."""
    op.register_autograd(backward, setup_context=setup_context)
    _formulas[op] = (backward, setup_context)


# -- the device a kernel runs on ----------------------------------------------------------------
def _on_input_device(kernel):
    """Run ``kernel`` with its first tensor's GPU as the current CUDA device, as PyTorch's
    own ops do with their device guard: Triton launches on the current device, so a
    process whose tensors live on cuda:1 while cuda:0 is current (a DDP rank that never
    called torch.cuda.set_device) would otherwise launch on the wrong GPU."""
    @functools.wraps(kernel)
    def run(*args, **kwargs):
        x = args[0] if args else next(iter(kwargs.values()))
        if x.is_cuda and x.get_device() != torch.cuda.current_device():
            with torch.cuda.device(x.device):
                return kernel(*args, **kwargs)
        return kernel(*args, **kwargs)
    return run


# -- layout helpers shared by real and fake kernels -------------------------------------------
def _format_of(t: Tensor) -> TensorFormat:
    return F.output_format(tuple(t.shape), tuple(t.stride()))


def _layout_strides(ref: Tensor, shape) -> tuple:
    """The packed strides of ``shape`` in ``ref``'s layout (the rule the real kernels follow)."""
    shape = tuple(int(s) for s in shape)
    return tuple(packed_strides(shape, _format_of(ref)) if len(shape) >= 3 else packed_strides(shape))


def _empty_like_layout(ref: Tensor, shape, dtype=None) -> Tensor:
    """An empty tensor of ``shape`` in ``ref``'s layout (the rule the real kernels follow)."""
    shape = tuple(int(s) for s in shape)
    return torch.empty_strided(shape, _layout_strides(ref, shape), dtype=dtype or ref.dtype, device=ref.device)


_strides_memo: dict = {}


def _matching(out: Tensor, ref: Tensor) -> Tensor:
    """``out`` with the strides the fake kernel promised (copied only when they differ).
    Real kernels only (concrete sizes): the strides are kept per (ref's shape and
    strides, out's shape), as every eager call asks."""
    key = (ref.shape, ref.stride(), out.shape)
    want = _strides_memo.get(key)
    if want is None:
        if len(_strides_memo) >= 4096:
            _strides_memo.clear()
        want = _strides_memo[key] = _layout_strides(ref, out.shape)
    if out.stride() == want or out.numel() <= 1:
        return out
    return torch.empty_strided(out.shape, want, dtype=out.dtype, device=out.device).copy_(out)


def _conv_out_shape(x_shape, w_shape, stride, pre, post, dilation):
    out = [(i + a + b - d * (k - 1) - 1) // s + 1
           for i, k, s, a, b, d in zip(x_shape[2:], w_shape[2:], stride, pre, post, dilation)]
    return (x_shape[0], w_shape[0], *out)


def _padding(pre, post):
    return tuple(zip(pre, post))


# -- convolution --------------------------------------------------------------------------------
@torch.library.custom_op("tridnn::conv_forward", mutates_args=())
@_on_input_device
def conv_forward(x: Tensor, w: Tensor, bias: Optional[Tensor], stride: List[int], pad_pre: List[int],
                 pad_post: List[int], dilation: List[int], groups: int) -> Tensor:
    """N-d convolution (cross-correlation) with optional bias."""
    y = F.conv(x, w, bias, stride, _padding(pad_pre, pad_post), dilation, groups)
    return _matching(y, x)


@conv_forward.register_fake
def _(x, w, bias, stride, pad_pre, pad_post, dilation, groups):
    return _empty_like_layout(x, _conv_out_shape(x.shape, w.shape, stride, pad_pre, pad_post, dilation))


@torch.library.custom_op("tridnn::conv_backward_data", mutates_args=())
@_on_input_device
def conv_backward_data(dy: Tensor, w: Tensor, x_shape: List[int], stride: List[int],
                       pad_pre: List[int], pad_post: List[int], dilation: List[int],
                       groups: int) -> Tensor:
    """dx of conv_forward (a transposed convolution of dy)."""
    dx = F.conv_backward_data(dy, w, x_shape, stride, _padding(pad_pre, pad_post), dilation, groups)
    return _matching(dx, dy)


@conv_backward_data.register_fake
def _(dy, w, x_shape, stride, pad_pre, pad_post, dilation, groups):
    return _empty_like_layout(dy, x_shape)


@torch.library.custom_op("tridnn::conv_backward_filter", mutates_args=())
@_on_input_device
def conv_backward_filter(x: Tensor, dy: Tensor, w_shape: List[int], stride: List[int],
                         pad_pre: List[int], pad_post: List[int], dilation: List[int],
                         groups: int) -> Tensor:
    """dw of conv_forward, returned packed KCRS (contiguous), whatever x's layout."""
    dw = F.conv_backward_filter(x, dy, w_shape, stride, _padding(pad_pre, pad_post), dilation, groups,
                                filter_format="NCHW")
    return dw.contiguous()


@conv_backward_filter.register_fake
def _(x, dy, w_shape, stride, pad_pre, pad_post, dilation, groups):
    return x.new_empty(w_shape)


def _conv_setup_context(ctx, inputs, output):
    x, w, bias, stride, pad_pre, pad_post, dilation, groups = inputs
    ctx.save_for_backward(x, w)
    ctx.geometry = (list(stride), list(pad_pre), list(pad_post), list(dilation), groups)
    ctx.has_bias = bias is not None


def _in_strides_of(grad: Tensor, param: Tensor) -> Tensor:
    """``grad`` with ``param``'s exact strides when the two differ only on size-1 axes (a
    1x1 channels_last filter): the same memory, but DistributedDataParallel compares
    strides exactly, and a mismatch makes it warn and copy every gradient into its bucket."""
    if grad.stride() == param.stride() or grad.shape != param.shape:
        return grad
    if all(d <= 1 or a == b for d, a, b in zip(grad.shape, grad.stride(), param.stride())):
        return grad.as_strided(param.shape, param.stride())
    return grad


def _conv_backward(ctx, dy):
    x, w = ctx.saved_tensors
    geometry = ctx.geometry
    dx = dw = db = None
    if ctx.needs_input_grad[0]:
        dx = fast.conv_backward_data(dy, w, list(x.shape), *geometry)
    if ctx.needs_input_grad[1]:
        dw = _in_strides_of(fast.conv_backward_filter(x, dy, list(w.shape), *geometry), w)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        db = dy.sum(dim=[0] + list(range(2, dy.dim())))
    return dx, dw, db, None, None, None, None, None


_autograd(conv_forward, _conv_backward, _conv_setup_context)


# The two backward passes are bilinear in their inputs, so their own gradients are the
# other convolution directions (double backward, gradient penalties, opcheck).
def _bwd_data_setup_context(ctx, inputs, output):
    dy, w, x_shape, *geometry = inputs
    ctx.save_for_backward(dy, w)
    ctx.geometry = geometry


def _bwd_data_backward(ctx, g):
    dy, w = ctx.saved_tensors
    d_dy = fast.conv_forward(g, w, None, *ctx.geometry) if ctx.needs_input_grad[0] else None
    d_w = fast.conv_backward_filter(g, dy, list(w.shape), *ctx.geometry) if ctx.needs_input_grad[1] else None
    return d_dy, d_w, None, None, None, None, None, None


_autograd(conv_backward_data, _bwd_data_backward, _bwd_data_setup_context)


def _bwd_filter_setup_context(ctx, inputs, output):
    x, dy, w_shape, *geometry = inputs
    ctx.save_for_backward(x, dy)
    ctx.geometry = geometry


def _bwd_filter_backward(ctx, g):
    x, dy = ctx.saved_tensors
    d_x = fast.conv_backward_data(dy, g, list(x.shape), *ctx.geometry) if ctx.needs_input_grad[0] else None
    d_dy = fast.conv_forward(x, g, None, *ctx.geometry) if ctx.needs_input_grad[1] else None
    return d_x, d_dy, None, None, None, None, None, None


_autograd(conv_backward_filter, _bwd_filter_backward, _bwd_filter_setup_context)


@torch.library.custom_op("tridnn::conv_bias_activation", mutates_args=())
@_on_input_device
def conv_bias_activation(x: Tensor, w: Tensor, bias: Optional[Tensor], z: Optional[Tensor],
                         alpha1: float, alpha2: float, activation: str, coef: float,
                         stride: List[int], pad_pre: List[int], pad_post: List[int],
                         dilation: List[int], groups: int) -> Tensor:
    """act(alpha1 * conv(x, w) + alpha2 * z + bias), fused (forward only: no autograd)."""
    y = F.conv_bias_activation(x, w, bias, z, alpha1, alpha2, activation, coef, stride,
                               _padding(pad_pre, pad_post), dilation, groups)
    return _matching(y, x)


@conv_bias_activation.register_fake
def _(x, w, bias, z, alpha1, alpha2, activation, coef, stride, pad_pre, pad_post, dilation, groups):
    return _empty_like_layout(x, _conv_out_shape(x.shape, w.shape, stride, pad_pre, pad_post, dilation))


# -- pooling ---------------------------------------------------------------------------------------
def _pool_out_shape(x_shape, kernel, stride, padding):
    return (*x_shape[:2], *[(i + 2 * p - k) // s + 1
                            for i, k, s, p in zip(x_shape[2:], kernel, stride, padding)])


@torch.library.custom_op("tridnn::pool", mutates_args=())
@_on_input_device
def pool(x: Tensor, mode: str, kernel: List[int], stride: List[int], padding: List[int]) -> Tensor:
    """mode "max", "avg" (padding counted) or "avg_exclude_pad"."""
    if mode == "max":
        y = F.max_pool(x, kernel, stride, padding)
    else:
        y = F.avg_pool(x, kernel, stride, padding, count_include_pad=mode == "avg")
    return _matching(y, x)


@pool.register_fake
def _(x, mode, kernel, stride, padding):
    return _empty_like_layout(x, _pool_out_shape(x.shape, kernel, stride, padding))


@torch.library.custom_op("tridnn::pool_backward", mutates_args=())
@_on_input_device
def pool_backward(y: Tensor, dy: Tensor, x: Tensor, mode: str, kernel: List[int], stride: List[int],
                  padding: List[int]) -> Tensor:
    return _matching(F.pool_backward(y, dy, x, mode, kernel, stride, padding), x)


@pool_backward.register_fake
def _(y, dy, x, mode, kernel, stride, padding):
    return _empty_like_layout(x, x.shape)


def _pool_setup_context(ctx, inputs, output):
    x, mode, kernel, stride, padding = inputs
    ctx.save_for_backward(x, output)
    ctx.params = (mode, list(kernel), list(stride), list(padding))


def _pool_backward(ctx, dy):
    x, y = ctx.saved_tensors
    return fast.pool_backward(y, dy, x, *ctx.params), None, None, None, None


_autograd(pool, _pool_backward, _pool_setup_context)


@torch.library.custom_op("tridnn::adaptive_pool", mutates_args=())
@_on_input_device
def adaptive_pool(x: Tensor, mode: str, output_size: List[int]) -> Tensor:
    """mode "average" or "max" (PyTorch's adaptive pooling bins)."""
    y = F.adaptive_avg_pool(x, output_size) if mode == "average" else F.adaptive_max_pool(x, output_size)
    return _matching(y, x)


@adaptive_pool.register_fake
def _(x, mode, output_size):
    return _empty_like_layout(x, (*x.shape[:2], *output_size))


@torch.library.custom_op("tridnn::adaptive_pool_backward", mutates_args=())
@_on_input_device
def adaptive_pool_backward(dy: Tensor, x: Tensor, mode: str) -> Tensor:
    return _matching(F.adaptive_pool_backward(dy, x, mode), x)


@adaptive_pool_backward.register_fake
def _(dy, x, mode):
    return _empty_like_layout(x, x.shape)


def _adaptive_setup_context(ctx, inputs, output):
    x, mode, output_size = inputs
    ctx.save_for_backward(x)
    ctx.mode = mode


def _adaptive_backward(ctx, dy):
    (x,) = ctx.saved_tensors
    return fast.adaptive_pool_backward(dy, x, ctx.mode), None, None


_autograd(adaptive_pool, _adaptive_backward, _adaptive_setup_context)


# -- activations -------------------------------------------------------------------------------------
@torch.library.custom_op("tridnn::activation", mutates_args=())
@_on_input_device
def activation(x: Tensor, mode: str, coef: float, swish_beta: float) -> Tensor:
    """Any tridnn activation mode by name ("relu", "gelu_tanh", ...)."""
    return _matching(F.activation(x, mode, coef, swish_beta), x)


@activation.register_fake
def _(x, mode, coef, swish_beta):
    return _empty_like_layout(x, x.shape)


@torch.library.custom_op("tridnn::activation_backward", mutates_args=())
@_on_input_device
def activation_backward(y: Tensor, dy: Tensor, x: Tensor, mode: str, coef: float,
                        swish_beta: float) -> Tensor:
    return _matching(F.activation_backward(y, dy, x, mode, coef, swish_beta), x)


@activation_backward.register_fake
def _(y, dy, x, mode, coef, swish_beta):
    return _empty_like_layout(x, x.shape)


def _act_setup_context(ctx, inputs, output):
    x, mode, coef, swish_beta = inputs
    ctx.save_for_backward(x, output)
    ctx.params = (mode, coef, swish_beta)


def _act_backward(ctx, dy):
    x, y = ctx.saved_tensors
    return fast.activation_backward(y, dy, x, *ctx.params), None, None, None


_autograd(activation, _act_backward, _act_setup_context)


# -- softmax ------------------------------------------------------------------------------------------
@torch.library.custom_op("tridnn::softmax", mutates_args=())
@_on_input_device
def softmax(x: Tensor, dim: int, log: bool) -> Tensor:
    """softmax (or log-softmax) along ``dim``."""
    return _matching(F.softmax(x, dim, log=log), x)


@softmax.register_fake
def _(x, dim, log):
    return _empty_like_layout(x, x.shape)


@torch.library.custom_op("tridnn::softmax_backward", mutates_args=())
@_on_input_device
def softmax_backward(y: Tensor, dy: Tensor, dim: int, log: bool) -> Tensor:
    return _matching(F.softmax_backward(y, dy, dim, log=log), y)


@softmax_backward.register_fake
def _(y, dy, dim, log):
    return _empty_like_layout(y, y.shape)


def _softmax_setup_context(ctx, inputs, output):
    x, dim, log = inputs
    ctx.save_for_backward(output)
    ctx.params = (dim, log)


def _softmax_backward(ctx, dy):
    (y,) = ctx.saved_tensors
    return fast.softmax_backward(y, dy, *ctx.params), None, None


_autograd(softmax, _softmax_backward, _softmax_setup_context)


# -- batch normalization ---------------------------------------------------------------------------------
@torch.library.custom_op("tridnn::batch_norm_training", mutates_args=())
@_on_input_device
def batch_norm_training(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                        running_mean: Optional[Tensor], running_var: Optional[Tensor],
                        momentum: float, eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(y, saved_mean, saved_inv_std, new_running_mean, new_running_var) with batch
    statistics. The op is functional (autograd needs that): the updated running
    statistics come back as new tensors (empty when none were given);
    ``batch_norm_train`` copies them into the module's buffers."""
    new_mean = running_mean.clone() if running_mean is not None else None
    new_var = running_var.clone() if running_var is not None else None
    return _bn_training(x, weight, bias, new_mean, new_var, momentum, eps)


def _bn_training(x, weight, bias, running_mean, running_var, momentum, eps):
    """The op's body after its copies of the running statistics, which are updated in place
    and returned (empty when none were given). The saved statistics need no clone: the
    functional API allocates each of them (and y) separately, so no returned tensor shares
    storage with an input or with another output, which is all a custom op asks."""
    y, mean, inv = F.batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps)
    c = x.shape[1]
    return (_matching(y, x), mean.view(c), inv.view(c),
            mean.new_empty((0,)) if running_mean is None else running_mean,
            mean.new_empty((0,)) if running_var is None else running_var)


@_on_input_device
def _bn_training_in_place(x, weight, bias, running_mean, running_var, momentum, eps):
    """The eager route's body (``_BatchNormTrainInPlace``): the module's running statistics
    are updated in place instead of in copies that batch_norm_train would copy back, so
    two copies a call (a kernel launch each on a GPU) are saved. The same kernel reads the
    same values and writes the same results, only into the buffers themselves:
    bit-identical. Returns (y, saved_mean, saved_inv_std), the statistics in the
    functional API's shape (what the backward passes back to it), packed in one buffer
    that the backward takes as is (functional.batch_norm_training's _packed_stats). batch_norm_train takes
    this route only when the running statistics overlap no other argument, where the
    functional API would refuse them and the op's copies would not."""
    y, mean, inv = F.batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps,
                                         _packed_stats=True)
    return _matching(y, x), mean, inv


class _BatchNormTrainInPlace(torch.autograd.Function):
    """The eager route's autograd Function: the registered op's formulas (``_bn_grads``)
    on one output, y. The op's other four outputs (saved statistics, new running
    statistics) are internal here, so no views or empty tensors are made for them, and the
    autograd engine does not materialize zero gradients for them in the backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, momentum, eps):
        y, mean, inv = _bn_training_in_place(x, weight, bias, running_mean, running_var, momentum, eps)
        ctx.save_for_backward(x, weight, mean, inv)
        ctx.eps = eps
        ctx.has = (weight is not None, bias is not None)
        return y

    @staticmethod
    def backward(ctx, dy):
        dx, dw, db = _bn_grads(ctx, dy)
        return dx, dw, db, None, None, None, None


@batch_norm_training.register_fake
def _(x, weight, bias, running_mean, running_var, momentum, eps):
    stat = torch.float64 if x.dtype == torch.float64 else torch.float32
    c = x.shape[1]
    return (_empty_like_layout(x, x.shape), x.new_empty((c,), dtype=stat),
            x.new_empty((c,), dtype=stat),
            x.new_empty((0,), dtype=stat) if running_mean is None else torch.empty_like(running_mean),
            x.new_empty((0,), dtype=stat) if running_var is None else torch.empty_like(running_var))


def batch_norm_train(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                     running_mean: Optional[Tensor], running_var: Optional[Tensor], momentum: float,
                     eps: float) -> Tensor:
    """Training-mode batch norm as torch.nn.BatchNorm does it: y, with the running
    statistics (when given) updated in place."""
    args = (x, weight, bias, running_mean, running_var)
    if (running_mean is not None and running_var is not None and not torch.compiler.is_compiling()
            and plain_eager(args) and _separate(*args)):  # (fake tensors have no data pointers)
        # the in-place route: the buffers are updated already
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
            return _BatchNormTrainInPlace.apply(x, weight, bias, running_mean, running_var, momentum, eps)
        return _bn_training_in_place(x, weight, bias, running_mean, running_var, momentum, eps)[0]
    y, _, _, new_mean, new_var = fast.batch_norm_training(x, weight, bias, running_mean, running_var,
                                                          momentum, eps)
    # the traced op returns the new statistics, to copy back
    if running_mean is not None:
        with torch.no_grad():
            running_mean.copy_(new_mean)
            running_var.copy_(new_var)
    return y


def _separate(x, weight, bias, running_mean, running_var) -> bool:
    """Whether the running statistics share no byte with each other, x, weight or bias."""
    stats = [(t.data_ptr(), recipes.extent(t)) for t in (running_mean, running_var)]
    others = [(t.data_ptr(), recipes.extent(t)) for t in (x, weight, bias) if t is not None]
    for i, (a0, an) in enumerate(stats):
        for b0, bn in stats[i + 1:] + others:
            if an and bn and a0 < b0 + bn and b0 < a0 + an:
                return False
    return True


@torch.library.custom_op("tridnn::batch_norm_backward", mutates_args=())
@_on_input_device
def batch_norm_backward(x: Tensor, dy: Tensor, weight: Optional[Tensor], saved_mean: Tensor,
                        saved_inv_std: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias) of batch_norm_training."""
    dx, dw, db = F.batch_norm_backward(x, dy, weight, saved_mean, saved_inv_std, eps)
    # no clones: the functional API allocates dx, dweight and dbias separately (see _bn_training)
    return _matching(dx, x), dw, db


@batch_norm_backward.register_fake
def _(x, dy, weight, saved_mean, saved_inv_std, eps):
    c = x.shape[1]
    return (_empty_like_layout(x, x.shape), saved_mean.new_empty((c,)), saved_mean.new_empty((c,)))


def _bn_setup_context(ctx, inputs, output):
    x, weight, bias, running_mean, running_var, momentum, eps = inputs
    _, mean, inv, _, _ = output
    ctx.save_for_backward(x, weight, mean, inv)
    ctx.eps = eps
    ctx.has = (weight is not None, bias is not None)


def _bn_grads(ctx, dy):
    """(dx, dweight, dbias) from what _bn_setup_context saved (both routes' formula)."""
    x, weight, mean, inv = ctx.saved_tensors
    dx, dw, db = fast.batch_norm_backward(x, dy, weight, mean, inv, ctx.eps)
    dw = dw.to(weight.dtype) if ctx.has[0] and ctx.needs_input_grad[1] else None
    db = db.to(weight.dtype if weight is not None else db.dtype) \
        if ctx.has[1] and ctx.needs_input_grad[2] else None
    return dx, dw, db


def _bn_backward(ctx, dy, _dmean, _dinv, _drunning_mean, _drunning_var):
    dx, dw, db = _bn_grads(ctx, dy)
    return dx, dw, db, None, None, None, None


_autograd(batch_norm_training, _bn_backward, _bn_setup_context)


@torch.library.custom_op("tridnn::batch_norm_inference", mutates_args=())
@_on_input_device
def batch_norm_inference(x: Tensor, running_mean: Tensor, running_var: Tensor,
                         weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tensor:
    """Batch norm with the running statistics (eval mode)."""
    return _matching(F.batch_norm_inference(x, running_mean, running_var, weight, bias, eps), x)


@batch_norm_inference.register_fake
def _(x, running_mean, running_var, weight, bias, eps):
    return _empty_like_layout(x, x.shape)


def _bn_inf_setup_context(ctx, inputs, output):
    x, running_mean, running_var, weight, bias, eps = inputs
    ctx.save_for_backward(x, running_mean, running_var, weight)
    ctx.eps = eps
    ctx.has_bias = bias is not None


def _bn_inf_backward(ctx, dy):
    """The inference transform is affine per channel: y = (x - mean) * w / sqrt(var + eps) + b."""
    x, mean, var, weight = ctx.saved_tensors
    shape = (1, -1) + (1,) * (x.dim() - 2)
    inv = torch.rsqrt(var.double() + ctx.eps).reshape(shape)
    scale = inv * (weight.double().reshape(shape) if weight is not None else 1.0)
    dy64 = dy.double()
    axes = [0] + list(range(2, x.dim()))
    dx = (dy64 * scale).to(x.dtype) if ctx.needs_input_grad[0] else None
    dw = (dy64 * (x.double() - mean.double().reshape(shape)) * inv).sum(axes).to(weight.dtype) \
        if weight is not None and ctx.needs_input_grad[3] else None
    db = dy64.sum(axes).to(dy.dtype) if ctx.has_bias and ctx.needs_input_grad[4] else None
    return dx, None, None, dw, db, None


_autograd(batch_norm_inference, _bn_inf_backward, _bn_inf_setup_context)


# -- eager callers ----------------------------------------------------------------------------------------
class _Callers:
    """``fast.<op>(...)``: each op's eager caller (see eager.py); what the nn layers and the
    autograd formulas above call. ``torch.ops.tridnn.<op>`` stays the traceable op."""

    def __init__(self, ops):
        for op in ops:
            setattr(self, op._name, caller(op, _formulas.get(op)))


fast = _Callers([conv_forward, conv_backward_data, conv_backward_filter, conv_bias_activation, pool,
                 pool_backward, adaptive_pool, adaptive_pool_backward, activation, activation_backward,
                 softmax, softmax_backward, batch_norm_training, batch_norm_backward, batch_norm_inference])
