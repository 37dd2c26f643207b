"""Float64 reference of convolution_bias_activation_forward, composed from the pieces."""
from __future__ import annotations

import numpy as np

from .activation import activation_forward
from .conv import conv_forward


def conv_bias_activation_forward(x, w, z, bias, mode, coef=0.0, swish_beta=1.0, alpha1=1.0, alpha2=0.0,
                                 stride=1, pad_pre=0, pad_post=None, dilation=1, groups=1,
                                 conv_mode="cross_correlation"):
    """act(alpha1 * conv(x, w) + alpha2 * z + bias), every step in float64.

    ``bias`` has one value per output channel (any shape that holds K values);
    ``z`` may be None when alpha2 == 0."""
    y = alpha1 * conv_forward(x, w, stride, pad_pre, pad_post, dilation, groups, conv_mode)
    if alpha2 != 0:
        y = y + alpha2 * np.asarray(z, np.float64)
    k = y.shape[1]
    y = y + np.asarray(bias, np.float64).reshape((1, k) + (1,) * (y.ndim - 2))
    return activation_forward(y, mode, coef, swish_beta)
