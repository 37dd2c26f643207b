"""Float64 NumPy references, simple enough to trust; tests compare every algorithm to them."""
from .conv import conv_backward_bias, conv_backward_data, conv_backward_filter, conv_forward
from .fused import conv_bias_activation_forward

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias",
           "conv_bias_activation_forward"]
from . import activation, dropout, lrn, normalization, pooling, softmax, tensor_ops  # noqa: E402,F401  (layer references)
