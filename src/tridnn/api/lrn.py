"""Cross-channel LRN in cuDNN's calling model (cudnnLRNCrossChannelForward/Backward)."""
from __future__ import annotations

from ..descriptors.lrn import LRNDescriptor, lrn_mode
from ..errors import BadParamError
from .layer_common import backend_module, is_empty, same_dims, scalars, views


def _check(norm_desc, mode, x_desc):
    if not isinstance(norm_desc, LRNDescriptor):
        raise BadParamError(f"norm_desc must be an LRNDescriptor, got {type(norm_desc).__name__}")
    lrn_mode(mode)
    if not 3 <= x_desc.ndim <= 5:
        raise BadParamError(f"LRN needs a tensor of 3 to 5 dims (N, C, *spatial), got {x_desc.dims}")
    return dict(lrn_n=norm_desc.n, lrn_alpha=norm_desc.alpha, lrn_beta=norm_desc.beta, lrn_k=norm_desc.k)


def lrn_cross_channel_forward(handle, norm_desc, mode, alpha, x_desc, x, beta, y_desc, y):
    """y = alpha * x / (k + lrn_alpha/n * window sum of x^2)^lrn_beta + beta * y."""
    params = _check(norm_desc, mode, x_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    same_dims(x_desc, y_desc, "x", "y")
    xv, yv = views(handle, [(x, x_desc, "x")], [(y, y_desc, "y")])
    if not is_empty(xv):
        backend_module(handle, "lrn").lrn_cross_channel_forward(x=xv, y=yv, alpha=alpha, beta=beta, **params)
    return y


def lrn_cross_channel_backward(handle, norm_desc, mode, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta,
                               dx_desc, dx):
    """dx = alpha * LRN'(x)^T dy + beta * dx (y is the forward output)."""
    params = _check(norm_desc, mode, x_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    for desc, name in ((y_desc, "y"), (dy_desc, "dy"), (dx_desc, "dx")):
        same_dims(x_desc, desc, "x", name)
    yv, dyv, xv, dxv = views(handle, [(y, y_desc, "y"), (dy, dy_desc, "dy"), (x, x_desc, "x")],
                             [(dx, dx_desc, "dx")])
    if not is_empty(xv):
        backend_module(handle, "lrn").lrn_cross_channel_backward(y=yv, dy=dyv, x=xv, dx=dxv, alpha=alpha,
                                                                 beta=beta, **params)
    return dx
