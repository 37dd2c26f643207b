"""The activation layer in cuDNN's calling model (cudnnActivationForward/Backward).
x and y may be the same array (in place), as in cuDNN."""
from __future__ import annotations

from ..descriptors.activation import ActivationDescriptor
from ..errors import BadParamError
from .layer_common import backend_module, is_empty, same_dims, scalars, views


def _check_desc(act_desc):
    if not isinstance(act_desc, ActivationDescriptor):
        raise BadParamError(f"act_desc must be an ActivationDescriptor, got {type(act_desc).__name__}")


def _params(act_desc) -> dict:
    return dict(mode=int(act_desc.mode), coef=act_desc.coef, swish_beta=act_desc.swish_beta,
                propagate_nan=act_desc.propagate_nan)


def activation_forward(handle, act_desc, alpha, x_desc, x, beta, y_desc, y):
    """y = alpha * act(x) + beta * y; returns y."""
    _check_desc(act_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    same_dims(x_desc, y_desc, "x", "y")
    xv, yv = views(handle, [(x, x_desc, "x")], [(y, y_desc, "y")], in_place_ok=True)
    if not is_empty(xv):
        backend_module(handle, "activation").activation_forward(x=xv, y=yv, alpha=alpha, beta=beta,
                                                                **_params(act_desc))
    return y


def activation_backward(handle, act_desc, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx):
    """dx = alpha * dy * act'(x) + beta * dx; dx may alias dy (in place)."""
    _check_desc(act_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    for desc, name in ((y_desc, "y"), (dy_desc, "dy"), (dx_desc, "dx")):
        same_dims(x_desc, desc, "x", name)
    yv, dyv, xv, dxv = views(handle, [(y, y_desc, "y"), (dy, dy_desc, "dy"), (x, x_desc, "x")],
                             [(dx, dx_desc, "dx")], in_place_ok=True)
    for other, name in ((yv, "y"), (xv, "x")):
        if other is not dyv and _same_buffer(other, dxv):
            raise BadParamError(f"dx may alias dy only, not {name}")
    if not is_empty(xv):
        params = _params(act_desc)
        del params["propagate_nan"]  # the derivative does not depend on it
        backend_module(handle, "activation").activation_backward(y=yv, dy=dyv, x=xv, dx=dxv, alpha=alpha,
                                                                 beta=beta, **params)
    return dx


def _same_buffer(a, b) -> bool:
    import numpy as np
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.may_share_memory(a, b)
