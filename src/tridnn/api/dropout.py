"""Dropout in cuDNN's calling model (cudnnDropoutForward/Backward). The descriptor holds
the probability and the RNG state (seed, offset); each forward call draws the mask of
counters [offset, offset + size) and advances the offset, so a descriptor set up again
with the same seed replays the same masks. The reserve space carries the mask from the
forward to the backward."""
from __future__ import annotations

from ..descriptors.dropout import DropoutDescriptor, dropout_get_reserve_space_size
from ..errors import BadParamError
from .layer_common import backend_module, is_empty, same_dims, views


def _check_desc(dropout_desc):
    if not isinstance(dropout_desc, DropoutDescriptor):
        raise BadParamError(f"dropout_desc must be a DropoutDescriptor, got {type(dropout_desc).__name__}")


def _reserve(handle, reserve_space, desc):
    need = dropout_get_reserve_space_size(desc)
    if reserve_space is None:
        raise BadParamError(f"dropout needs a reserve space of {need} bytes (dropout_get_reserve_space_size)")
    raw = handle.backend.workspace_bytes(reserve_space)
    have = int(raw.nbytes) if hasattr(raw, "nbytes") else raw.numel()
    if have < need:
        raise BadParamError(f"reserve space of {have} bytes is smaller than the {need} bytes "
                            f"dropout_get_reserve_space_size gives for dims {desc.dims}")
    return raw[:need].reshape(tuple(desc.dims))


def dropout_forward(handle, dropout_desc, x_desc, x, y_desc, y, reserve_space):
    """y = x * mask / (1 - p); the mask is saved in reserve_space for the backward."""
    _check_desc(dropout_desc)
    same_dims(x_desc, y_desc, "x", "y")
    reserve = _reserve(handle, reserve_space, x_desc)
    xv, yv = views(handle, [(x, x_desc, "x")], [(y, y_desc, "y")], in_place_ok=True)
    _check_reserve_overlap(reserve, xv, yv)
    if not is_empty(xv):
        backend_module(handle, "dropout").dropout_forward(
            x=xv, y=yv, reserve=reserve, probability=dropout_desc.probability, seed=dropout_desc.seed,
            offset=dropout_desc.offset)
        dropout_desc.advance(x_desc.size)
    return y


def dropout_backward(handle, dropout_desc, dy_desc, dy, dx_desc, dx, reserve_space):
    """dx = dy * mask / (1 - p) with the forward's mask from reserve_space."""
    _check_desc(dropout_desc)
    same_dims(dy_desc, dx_desc, "dy", "dx")
    reserve = _reserve(handle, reserve_space, dy_desc)
    dyv, dxv = views(handle, [(dy, dy_desc, "dy")], [(dx, dx_desc, "dx")], in_place_ok=True)
    _check_reserve_overlap(reserve, dyv, dxv)
    if not is_empty(dyv):
        backend_module(handle, "dropout").dropout_backward(dy=dyv, dx=dxv, reserve=reserve,
                                                           probability=dropout_desc.probability)
    return dx


def _check_reserve_overlap(reserve, *arrays):
    import numpy as np
    for arr in arrays:
        if isinstance(arr, np.ndarray) and isinstance(reserve, np.ndarray) and np.may_share_memory(arr, reserve):
            raise BadParamError("reserve space overlaps a data tensor; pass a separate buffer")
