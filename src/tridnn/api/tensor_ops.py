"""Tensor ops in cuDNN's calling model: cudnnAddTensor, cudnnOpTensor, cudnnReduceTensor
(with its workspace and indices size queries), cudnnTransformTensor, cudnnSetTensor and
cudnnScaleTensor. Broadcasting follows cuDNN: same rank, each dim of the broadcast
operand equal to the output's or 1."""
from __future__ import annotations

import numpy as np

from ..descriptors.tensor_ops import (OpTensorDescriptor, OpTensorOp, ReduceTensorDescriptor, check_broadcast)
from ..errors import BadParamError, check_finite_scalar
from ..types import DataType
from ..workspace import Buffer, layout_size
from .layer_common import backend_module, is_empty, same_dims, scalars, views


def _broadcast(view, shape):
    if isinstance(view, np.ndarray):
        return np.broadcast_to(view, shape)
    return view.expand(*shape)


def _same_dtype(a_desc, c_desc, a_name, c_name):
    if a_desc.dtype != c_desc.dtype:
        raise BadParamError(f"dtype mismatch: {a_name} is {a_desc.dtype.name}, {c_name} is {c_desc.dtype.name}")


def add_tensor(handle, alpha, a_desc, a, beta, c_desc, c):
    """c = alpha * a + beta * c, a broadcast over c (a bias: dims equal to c's or 1)."""
    alpha, beta = scalars(alpha=alpha, beta=beta)
    check_broadcast(a_desc, c_desc, "a", "c")
    _same_dtype(a_desc, c_desc, "a", "c")
    av, cv = views(handle, [(a, a_desc, "a")], [(c, c_desc, "c")], in_place_ok=True)
    if not is_empty(cv):
        backend_module(handle, "tensor_ops").add_tensor(a=_broadcast(av, cv.shape), c=cv, alpha=alpha, beta=beta)
    return c


def op_tensor(handle, op_desc, alpha1, a_desc, a, alpha2, b_desc, b, beta, c_desc, c):
    """c = op(alpha1 * a, alpha2 * b) + beta * c; a has c's dims, b broadcasts; c may be a or b."""
    if not isinstance(op_desc, OpTensorDescriptor):
        raise BadParamError(f"op_desc must be an OpTensorDescriptor, got {type(op_desc).__name__}")
    alpha1, alpha2, beta = scalars(alpha1=alpha1, alpha2=alpha2, beta=beta)
    same_dims(c_desc, a_desc, "c", "a")
    unary = op_desc.op.unary
    if b is None or b_desc is None:
        if not unary:
            raise BadParamError(f"op {op_desc.op.name} needs b and b_desc")
        b_desc, b = a_desc, a
    check_broadcast(b_desc, c_desc, "b", "c")
    _same_dtype(b_desc, c_desc, "b", "c")
    av, bv, cv = views(handle, [(a, a_desc, "a"), (b, b_desc, "b")], [(c, c_desc, "c")], in_place_ok=True)
    if not is_empty(cv):
        backend_module(handle, "tensor_ops").op_tensor(
            op=int(op_desc.op), a=av, b=_broadcast(bv, cv.shape), c=cv, alpha1=alpha1, alpha2=alpha2, beta=beta,
            propagate_nan=op_desc.propagate_nan)
    return c


def _reduce_buffers(a_desc, c_desc):
    acc = DataType.DOUBLE if c_desc.dtype == DataType.DOUBLE else DataType.FLOAT
    return [Buffer("acc", tuple(c_desc.dims), acc.numpy)]


def _check_reduce(reduce_desc, a_desc, c_desc):
    if not isinstance(reduce_desc, ReduceTensorDescriptor):
        raise BadParamError(f"reduce_desc must be a ReduceTensorDescriptor, got {type(reduce_desc).__name__}")
    check_broadcast(c_desc, a_desc, "c", "a")
    _same_dtype(a_desc, c_desc, "a", "c")


def get_reduction_workspace_size(handle, reduce_desc, a_desc, c_desc) -> int:
    """cudnnGetReductionWorkspaceSize: an accumulator of c's shape (float32, float64 for double)."""
    _check_reduce(reduce_desc, a_desc, c_desc)
    return layout_size(_reduce_buffers(a_desc, c_desc))


def get_reduction_indices_size(handle, reduce_desc, a_desc, c_desc) -> int:
    """cudnnGetReductionIndicesSize: 4 bytes per element of c when indices are requested, else 0."""
    _check_reduce(reduce_desc, a_desc, c_desc)
    return 4 * c_desc.size if reduce_desc.wants_indices else 0


def _typed(handle, raw_array, need: int, dims, name: str):
    """A contiguous caller buffer of at least ``need`` bytes as 32-bit indices of ``dims``."""
    raw = handle.backend.workspace_bytes(raw_array)
    have = int(raw.nbytes) if hasattr(raw, "nbytes") else raw.numel()
    if have < need:
        raise BadParamError(f"{name} of {have} bytes is smaller than the {need} bytes "
                            f"get_reduction_indices_size gives")
    if isinstance(raw, np.ndarray):
        return raw[:need].view(np.uint32).reshape(dims)
    import torch
    return raw[:need].view(torch.int32).reshape(dims)


def reduce_tensor(handle, reduce_desc, indices, workspace, alpha, a_desc, a, beta, c_desc, c):
    """c = alpha * reduce(a) + beta * c over the dims where c is 1; ``indices`` (with
    FLATTENED_INDICES, for MIN/MAX/AMAX) receives each extreme's row-major position
    within the reduced dims as uint32."""
    _check_reduce(reduce_desc, a_desc, c_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    buffers = _reduce_buffers(a_desc, c_desc)
    need = layout_size(buffers)
    backend = handle.backend
    ws = backend.workspace_bytes(workspace)
    have = int(ws.nbytes) if hasattr(ws, "nbytes") else ws.numel()
    if have < need:
        raise BadParamError(f"workspace of {have} bytes is smaller than the {need} bytes "
                            f"get_reduction_workspace_size gives")
    idx = None
    if reduce_desc.wants_indices:
        if indices is None:
            raise BadParamError("FLATTENED_INDICES needs an indices buffer of get_reduction_indices_size bytes")
        idx = _typed(handle, indices, 4 * c_desc.size, tuple(c_desc.dims), "indices")
    av, cv = views(handle, [(a, a_desc, "a")], [(c, c_desc, "c")])
    for other, name in ((idx, "indices"), (ws, "workspace")):
        if isinstance(other, np.ndarray) and (np.may_share_memory(other, cv) or np.may_share_memory(other, av)):
            raise BadParamError(f"{name} overlaps a or c; pass separate buffers")
    if is_empty(cv):
        return c
    acc = backend.carve(ws, buffers)["acc"]
    if is_empty(av):
        raise BadParamError(f"cannot reduce an empty tensor a (dims {a_desc.dims}) into a non-empty c")
    backend_module(handle, "tensor_ops").reduce_tensor(
        op=int(reduce_desc.op), a=av, c=cv, indices=idx, workspace=acc, alpha=alpha, beta=beta,
        propagate_nan=reduce_desc.propagate_nan)
    return c


def transform_tensor(handle, alpha, x_desc, x, beta, y_desc, y):
    """y = alpha * x + beta * y with any layouts (and data types) of the same dims."""
    alpha, beta = scalars(alpha=alpha, beta=beta)
    same_dims(x_desc, y_desc, "x", "y", dtype=False)
    xv, yv = views(handle, [(x, x_desc, "x")], [(y, y_desc, "y")])
    if not is_empty(yv):
        backend_module(handle, "tensor_ops").transform_tensor(x=xv, y=yv, alpha=alpha, beta=beta)
    return y


def set_tensor(handle, y_desc, y, value):
    """Every element of y = value."""
    value = check_finite_scalar("value", value)
    (yv,) = views(handle, [], [(y, y_desc, "y")])
    if not is_empty(yv):
        backend_module(handle, "tensor_ops").set_tensor(y=yv, value=value)
    return y


def scale_tensor(handle, y_desc, y, alpha):
    """y = alpha * y."""
    (alpha,) = scalars(alpha=alpha)
    (yv,) = views(handle, [], [(y, y_desc, "y")])
    if not is_empty(yv):
        backend_module(handle, "tensor_ops").scale_tensor(y=yv, alpha=alpha)
    return y


__all__ = ["add_tensor", "op_tensor", "reduce_tensor", "get_reduction_workspace_size",
           "get_reduction_indices_size", "transform_tensor", "set_tensor", "scale_tensor", "OpTensorOp"]
