"""Softmax in cuDNN's calling model (cudnnSoftmaxForward/Backward)."""
from __future__ import annotations

from ..descriptors.softmax import softmax_algorithm, softmax_mode
from ..errors import BadParamError
from .layer_common import backend_module, is_empty, same_dims, scalars, views


def _check_rank(desc):
    if desc.ndim < 2:
        raise BadParamError(f"softmax needs a tensor of at least 2 dims (N, C, ...), got {desc.dims}")


def softmax_forward(handle, algorithm, mode, alpha, x_desc, x, beta, y_desc, y):
    """y = alpha * softmax(x) + beta * y (log-softmax for LOG); x and y may be the same array."""
    algorithm, mode = softmax_algorithm(algorithm), softmax_mode(mode)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    _check_rank(x_desc)
    same_dims(x_desc, y_desc, "x", "y")
    xv, yv = views(handle, [(x, x_desc, "x")], [(y, y_desc, "y")], in_place_ok=True)
    if not is_empty(xv):
        backend_module(handle, "softmax").softmax_forward(x=xv, y=yv, algo=int(algorithm), mode=int(mode),
                                                          alpha=alpha, beta=beta)
    return y


def softmax_backward(handle, algorithm, mode, alpha, y_desc, y, dy_desc, dy, beta, dx_desc, dx):
    """dx = alpha * (the softmax's Jacobian^T dy) + beta * dx, from the forward output y."""
    algorithm, mode = softmax_algorithm(algorithm), softmax_mode(mode)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    _check_rank(y_desc)
    same_dims(y_desc, dy_desc, "y", "dy")
    same_dims(y_desc, dx_desc, "y", "dx")
    yv, dyv, dxv = views(handle, [(y, y_desc, "y"), (dy, dy_desc, "dy")], [(dx, dx_desc, "dx")])
    if not is_empty(yv):
        backend_module(handle, "softmax").softmax_backward(y=yv, dy=dyv, dx=dxv, algo=int(algorithm),
                                                           mode=int(mode), alpha=alpha, beta=beta)
    return dx
