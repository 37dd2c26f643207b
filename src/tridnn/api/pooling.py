"""Pooling in cuDNN's calling model (cudnnPoolingForward/Backward), plus adaptive pooling."""
from __future__ import annotations

from ..descriptors.pooling import PoolingDescriptor, adaptive_pooling_mode
from ..errors import BadParamError
from .layer_common import backend_module, is_empty, same_dims, scalars, views


def _check_desc(pool_desc):
    if not isinstance(pool_desc, PoolingDescriptor):
        raise BadParamError(f"pool_desc must be a PoolingDescriptor, got {type(pool_desc).__name__}")


def get_pooling_forward_output_dim(pool_desc, x_desc) -> tuple[int, ...]:
    """cudnnGetPoolingNdForwardOutputDim: (N, C, *out)."""
    _check_desc(pool_desc)
    return pool_desc.output_dims(x_desc)


def pooling_forward(handle, pool_desc, alpha, x_desc, x, beta, y_desc, y):
    """y = alpha * pool(x) + beta * y; returns y."""
    _check_desc(pool_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    pool_desc.check(x_desc, y_desc)
    xv, yv = views(handle, [(x, x_desc, "x")], [(y, y_desc, "y")])
    backend = backend_module(handle, "pooling")
    if not is_empty(xv, yv):
        backend.pooling_forward(x=xv, y=yv, mode=int(pool_desc.mode), window=pool_desc.window,
                                padding=pool_desc.padding, stride=pool_desc.stride,
                                propagate_nan=pool_desc.propagate_nan, alpha=alpha, beta=beta)
    return y


def pooling_backward(handle, pool_desc, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx):
    """dx = alpha * pool'(x; dy) + beta * dx; max modes route to the first maximum of each window."""
    _check_desc(pool_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    pool_desc.check(x_desc, y_desc)
    same_dims(y_desc, dy_desc, "y", "dy")
    same_dims(x_desc, dx_desc, "x", "dx")
    yv, dyv, xv, dxv = views(handle, [(y, y_desc, "y"), (dy, dy_desc, "dy"), (x, x_desc, "x")],
                             [(dx, dx_desc, "dx")])
    backend = backend_module(handle, "pooling")
    if not is_empty(xv, dyv):
        backend.pooling_backward(y=yv, dy=dyv, x=xv, dx=dxv, mode=int(pool_desc.mode),
                                 window=pool_desc.window, padding=pool_desc.padding,
                                 stride=pool_desc.stride, propagate_nan=pool_desc.propagate_nan,
                                 alpha=alpha, beta=beta)
    return dx


def _check_adaptive(x_desc, y_desc):
    if x_desc.ndim != y_desc.ndim or not 3 <= x_desc.ndim <= 5:
        raise BadParamError(f"adaptive pooling needs x and y of the same rank, 3 to 5 dims; got "
                            f"{x_desc.dims} and {y_desc.dims}")
    if y_desc.dims[:2] != x_desc.dims[:2]:
        raise BadParamError(f"y dims {y_desc.dims} must keep x's N and C {x_desc.dims[:2]}")
    for i, (a, b) in enumerate(zip(x_desc.spatial, y_desc.spatial)):
        if b > a:
            raise BadParamError(f"adaptive pooling output dim {i} is {b}, larger than the input's {a}")
    if x_desc.dtype != y_desc.dtype:
        raise BadParamError(f"dtype mismatch: x is {x_desc.dtype.name}, y is {y_desc.dtype.name}")


def adaptive_pooling_forward(handle, mode, alpha, x_desc, x, beta, y_desc, y):
    """tridnn extension (PyTorch's adaptive pooling): y's spatial dims choose the bins."""
    mode = adaptive_pooling_mode(mode)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    _check_adaptive(x_desc, y_desc)
    xv, yv = views(handle, [(x, x_desc, "x")], [(y, y_desc, "y")])
    if not is_empty(xv, yv):
        backend_module(handle, "pooling").adaptive_pooling_forward(x=xv, y=yv, mode=int(mode), alpha=alpha,
                                                                   beta=beta)
    return y


def adaptive_pooling_backward(handle, mode, alpha, dy_desc, dy, x_desc, x, beta, dx_desc, dx):
    mode = adaptive_pooling_mode(mode)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    _check_adaptive(x_desc, dy_desc)
    same_dims(x_desc, dx_desc, "x", "dx")
    dyv, xv, dxv = views(handle, [(dy, dy_desc, "dy"), (x, x_desc, "x")], [(dx, dx_desc, "dx")])
    if not is_empty(xv, dyv):
        backend_module(handle, "pooling").adaptive_pooling_backward(x=xv, dy=dyv, dx=dxv, mode=int(mode),
                                                                    alpha=alpha, beta=beta)
    return dx
