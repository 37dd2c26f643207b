"""torch.nn layers that compute with tridnn.

Each class subclasses its torch.nn counterpart, so parameters, buffers, their names,
initialization, ``extra_repr`` and state_dicts are torch's own; only ``forward``
calls the tridnn custom ops. Options tridnn does not have (dilated or ceil-mode
pooling, returned indices, ...) raise NotSupportedError at forward, and
``tridnn.torch.convert`` leaves such layers as they are.
"""
from __future__ import annotations

import torch
import torch.nn.functional as TF
from torch import nn

from ..api.functional import padding_pairs
from ..errors import NotSupportedError
from . import ops


def _tuple(value, nd):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd


def _frozen(value) -> bool:
    """Whether a layer attribute cannot change in place: an int, a string or a tuple of ints."""
    return type(value) in (int, str) or (type(value) is tuple and all(type(v) is int for v in value))


# -- convolution ---------------------------------------------------------------------------------
class _ConvMixin:
    def _conv_forward(self, input, weight, bias):
        if self.padding_mode != "zeros":
            nd = input.dim() - 2
            input = TF.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return ops.fast.conv_forward(input, weight, bias, list(_tuple(self.stride, nd)), [0] * nd, [0] * nd,
                                         list(_tuple(self.dilation, nd)), self.groups)
        return ops.fast.conv_forward(input, weight, bias, *self._geometry(input, weight))

    def _geometry(self, input, weight):
        """(stride, pad_pre, pad_post, dilation, groups) as the op takes them, kept per
        module and computed again when the padding, stride, dilation or groups object or
        the input's or kernel's spatial sizes change ("same" padding depends on them):
        padding_pairs costs a few microseconds a call. The attributes are compared by
        identity (a reassigned attribute is another object, checked afresh) and kept only
        when immutable; the kept lists are handed to the op, which never modifies its
        arguments."""
        compiling = torch.compiler.is_compiling()
        spatial, kernel = input.shape[2:], weight.shape[2:]
        kept = None if compiling else self.__dict__.get("_tridnn_geometry")
        if (kept is not None and kept[0] is self.padding and kept[1] is self.stride and kept[2] is self.dilation
                and kept[3] is self.groups and kept[4] == spatial and kept[5] == kernel):
            return kept[6]
        nd = input.dim() - 2
        stride, dilation = _tuple(self.stride, nd), _tuple(self.dilation, nd)
        pre, post = padding_pairs(self.padding, nd, tuple(spatial), tuple(kernel), stride, dilation)
        geometry = (list(stride), list(pre), list(post), list(dilation), self.groups)
        if not compiling and all(_frozen(v) for v in (self.padding, self.stride, self.dilation, self.groups)):
            # (kept only for immutable attributes, and no side effects while dynamo traces)
            self.__dict__["_tridnn_geometry"] = (self.padding, self.stride, self.dilation, self.groups, spatial,
                                                 kernel, geometry)
        return geometry


class Conv1d(_ConvMixin, nn.Conv1d):
    pass


class Conv2d(_ConvMixin, nn.Conv2d):
    pass


class Conv3d(_ConvMixin, nn.Conv3d):
    pass


# -- batch normalization -------------------------------------------------------------------------
class _BatchNormMixin:
    def forward(self, input):
        self._check_input_dim(input)
        squeeze = input.dim() == 2  # BatchNorm1d on (N, C): one position per channel
        x = input.unsqueeze(-1) if squeeze else input
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or self.running_mean is None
        if use_batch_stats:
            track = self.training and self.running_mean is not None
            y = ops.batch_norm_train(x, self.weight, self.bias, self.running_mean if track else None,
                                     self.running_var if track else None, momentum, self.eps)
        else:
            y = ops.fast.batch_norm_inference(x, self.running_mean, self.running_var, self.weight, self.bias,
                                         self.eps)
        return y.squeeze(-1) if squeeze else y


class BatchNorm1d(_BatchNormMixin, nn.BatchNorm1d):
    pass


class BatchNorm2d(_BatchNormMixin, nn.BatchNorm2d):
    pass


class BatchNorm3d(_BatchNormMixin, nn.BatchNorm3d):
    pass


# -- activations ---------------------------------------------------------------------------------
class ReLU(nn.ReLU):
    def forward(self, input):
        return ops.fast.activation(input, "relu", 0.0, 1.0)


class ReLU6(nn.ReLU6):
    def forward(self, input):
        return ops.fast.activation(input, "clipped_relu", 6.0, 1.0)


class LeakyReLU(nn.LeakyReLU):
    def forward(self, input):
        return ops.fast.activation(input, "leaky_relu", float(self.negative_slope), 1.0)


class ELU(nn.ELU):
    def forward(self, input):
        return ops.fast.activation(input, "elu", float(self.alpha), 1.0)


class Sigmoid(nn.Sigmoid):
    def forward(self, input):
        return ops.fast.activation(input, "sigmoid", 0.0, 1.0)


class Tanh(nn.Tanh):
    def forward(self, input):
        return ops.fast.activation(input, "tanh", 0.0, 1.0)


class SiLU(nn.SiLU):
    def forward(self, input):
        return ops.fast.activation(input, "swish", 0.0, 1.0)


class GELU(nn.GELU):
    def forward(self, input):
        return ops.fast.activation(input, "gelu_tanh" if self.approximate == "tanh" else "gelu", 0.0, 1.0)


class Softplus(nn.Softplus):
    """PyTorch's softplus turns linear above ``threshold``; tridnn's is exact everywhere
    (the two differ by less than exp(-threshold))."""

    def forward(self, input):
        return ops.fast.activation(input, "softplus", float(self.beta), 1.0)


class Hardswish(nn.Hardswish):
    def forward(self, input):
        return ops.fast.activation(input, "hard_swish", 0.0, 1.0)


# -- pooling -------------------------------------------------------------------------------------
def _pool_args(module, nd, kind):
    if getattr(module, "ceil_mode", False):
        raise NotSupportedError(f"{kind} with ceil_mode=True has no cuDNN/tridnn equivalent")
    if kind == "max" and (_tuple(module.dilation, nd) != (1,) * nd or module.return_indices):
        raise NotSupportedError("max pooling with dilation or return_indices has no tridnn equivalent")
    if kind == "avg" and getattr(module, "divisor_override", None):
        raise NotSupportedError("average pooling with divisor_override has no tridnn equivalent")
    kernel = _tuple(module.kernel_size, nd)
    stride = _tuple(module.stride if module.stride is not None else module.kernel_size, nd)
    return list(kernel), list(stride), list(_tuple(module.padding, nd))


class _MaxPoolMixin:
    nd = 2

    def forward(self, input):
        return ops.fast.pool(input, "max", *_pool_args(self, self.nd, "max"))


class _AvgPoolMixin:
    nd = 2

    def forward(self, input):
        mode = "avg" if self.count_include_pad else "avg_exclude_pad"
        return ops.fast.pool(input, mode, *_pool_args(self, self.nd, "avg"))


class MaxPool1d(_MaxPoolMixin, nn.MaxPool1d):
    nd = 1


class MaxPool2d(_MaxPoolMixin, nn.MaxPool2d):
    nd = 2


class MaxPool3d(_MaxPoolMixin, nn.MaxPool3d):
    nd = 3


class AvgPool1d(_AvgPoolMixin, nn.AvgPool1d):
    nd = 1


class AvgPool2d(_AvgPoolMixin, nn.AvgPool2d):
    nd = 2


class AvgPool3d(_AvgPoolMixin, nn.AvgPool3d):
    nd = 3


class _AdaptiveMixin:
    nd = 2
    mode = "average"

    def forward(self, input):
        size = _tuple(self.output_size, self.nd)
        size = [int(input.shape[2 + i]) if s is None else int(s) for i, s in enumerate(size)]
        if getattr(self, "return_indices", False):
            raise NotSupportedError("adaptive max pooling with return_indices has no tridnn equivalent")
        return ops.fast.adaptive_pool(input, self.mode, size)


class AdaptiveAvgPool1d(_AdaptiveMixin, nn.AdaptiveAvgPool1d):
    nd = 1


class AdaptiveAvgPool2d(_AdaptiveMixin, nn.AdaptiveAvgPool2d):
    nd = 2


class AdaptiveAvgPool3d(_AdaptiveMixin, nn.AdaptiveAvgPool3d):
    nd = 3


class AdaptiveMaxPool1d(_AdaptiveMixin, nn.AdaptiveMaxPool1d):
    nd, mode = 1, "max"


class AdaptiveMaxPool2d(_AdaptiveMixin, nn.AdaptiveMaxPool2d):
    nd, mode = 2, "max"


class AdaptiveMaxPool3d(_AdaptiveMixin, nn.AdaptiveMaxPool3d):
    nd, mode = 3, "max"


# -- softmax -------------------------------------------------------------------------------------
def _softmax_dim(module, input):
    dim = module.dim
    if dim is None:  # torch's legacy implicit choice
        dim = 0 if input.dim() in (0, 1, 3) else 1
    return dim


class Softmax(nn.Softmax):
    def forward(self, input):
        return ops.fast.softmax(input, _softmax_dim(self, input), False)


class LogSoftmax(nn.LogSoftmax):
    def forward(self, input):
        return ops.fast.softmax(input, _softmax_dim(self, input), True)


# torch.nn class -> tridnn class, for convert()
REPLACEMENTS = {
    nn.Conv1d: Conv1d, nn.Conv2d: Conv2d, nn.Conv3d: Conv3d,
    nn.BatchNorm1d: BatchNorm1d, nn.BatchNorm2d: BatchNorm2d, nn.BatchNorm3d: BatchNorm3d,
    nn.ReLU: ReLU, nn.ReLU6: ReLU6, nn.LeakyReLU: LeakyReLU, nn.ELU: ELU, nn.Sigmoid: Sigmoid,
    nn.Tanh: Tanh, nn.SiLU: SiLU, nn.GELU: GELU, nn.Softplus: Softplus, nn.Hardswish: Hardswish,
    nn.MaxPool1d: MaxPool1d, nn.MaxPool2d: MaxPool2d, nn.MaxPool3d: MaxPool3d,
    nn.AvgPool1d: AvgPool1d, nn.AvgPool2d: AvgPool2d, nn.AvgPool3d: AvgPool3d,
    nn.AdaptiveAvgPool1d: AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d: AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d: AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d: AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d: AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d: AdaptiveMaxPool3d,
    nn.Softmax: Softmax, nn.LogSoftmax: LogSoftmax,
}


def unsupported_reason(module) -> str | None:
    """Why a torch layer cannot be swapped for its tridnn class (None when it can)."""
    nd = getattr(module, "nd", None)
    if isinstance(module, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)):
        nd = {nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3}[type(module)]
        kind = "max"
    elif isinstance(module, (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)):
        nd = {nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3}[type(module)]
        kind = "avg"
    else:
        kind = None
    if kind:
        try:
            _pool_args(module, nd, kind)
        except NotSupportedError as exc:
            return str(exc)
        pad, kernel = _tuple(module.padding, nd), _tuple(module.kernel_size, nd)
        if any(p >= k for p, k in zip(pad, kernel)):
            return f"padding {pad} must be smaller than the window {kernel}"
    if isinstance(module, (nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)) \
            and module.return_indices:
        return "adaptive max pooling with return_indices"
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.eps < 1e-5:
        return f"eps={module.eps} is below cuDNN's CUDNN_BN_MIN_EPSILON (1e-5)"
    return None


__all__ = [cls.__name__ for cls in REPLACEMENTS.values()]
