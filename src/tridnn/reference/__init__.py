"""Float64 NumPy references, simple enough to trust; tests compare every algorithm to them."""
from .conv import conv_backward_bias, conv_backward_data, conv_backward_filter, conv_forward

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias"]
