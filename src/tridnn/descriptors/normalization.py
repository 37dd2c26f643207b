"""Batch normalization's enums, the derived parameter descriptor, and the shape rules
of the normalization extensions (layer, group and RMS norm)."""
from __future__ import annotations

import enum

from ..errors import BadParamError, check_finite_scalar
from ..types import DataType
from .enum_parse import enum_member
from .tensor import TensorDescriptor

BN_MIN_EPSILON = 1e-5  # CUDNN_BN_MIN_EPSILON: smaller epsilons are rejected, as in cuDNN


class BatchNormMode(enum.IntEnum):
    """cudnnBatchNormMode_t. SPATIAL_PERSISTENT is SPATIAL's math (a faster kernel in cuDNN)."""
    PER_ACTIVATION = 0
    SPATIAL = 1
    SPATIAL_PERSISTENT = 2

    @property
    def spatial(self) -> bool:
        return self != BatchNormMode.PER_ACTIVATION


class BatchNormOps(enum.IntEnum):
    """cudnnBatchNormOps_t of the *Ex calls: norm, relu(norm), relu(norm + z)."""
    NORM = 0
    NORM_ACTIVATION = 1
    NORM_ADD_ACTIVATION = 2


def batch_norm_mode(value) -> BatchNormMode:
    return enum_member(BatchNormMode, value, "batch norm mode", "CUDNN_BATCHNORM_")


def batch_norm_ops(value) -> BatchNormOps:
    return enum_member(BatchNormOps, value, "batch norm ops", "CUDNN_BATCHNORM_OPS_")


def param_dtype(dtype: DataType) -> DataType:
    """Scale, bias and statistics are float32 for float32/half/bfloat16 data, float64 for float64."""
    return DataType.DOUBLE if dtype == DataType.DOUBLE else DataType.FLOAT


def _derived(x_desc: TensorDescriptor, mode) -> tuple:
    """(dims, dtype) of the descriptor derive_bn_tensor_descriptor gives for x."""
    mode = batch_norm_mode(mode)
    if not 3 <= x_desc.ndim <= 5 and not (mode == BatchNormMode.PER_ACTIVATION and x_desc.ndim == 2):
        raise BadParamError(f"batch norm needs a tensor of 3 to 5 dims (N, C, *spatial), got {x_desc.dims}")
    dims = (1, x_desc.c) + ((1,) * (x_desc.ndim - 2) if mode.spatial else tuple(x_desc.spatial))
    return dims, param_dtype(x_desc.dtype)


def derive_bn_tensor_descriptor(x_desc: TensorDescriptor, mode) -> TensorDescriptor:
    """cudnnDeriveBNTensorDescriptor: (1, C, 1, ...) for SPATIAL, (1, C, *spatial) per activation."""
    dims, dtype = _derived(x_desc, mode)
    return TensorDescriptor.packed(dims, dtype)


def check_derived(desc: TensorDescriptor, x_desc: TensorDescriptor, mode, name: str) -> None:
    """``desc`` must have the dims and dtype derive_bn_tensor_descriptor gives for x."""
    dims, dtype = _derived(x_desc, mode)
    if desc.dims != dims or desc.dtype != dtype:
        raise BadParamError(f"{name} descriptor (dims {desc.dims}, {desc.dtype.name}) is not derived from "
                            f"x's (dims {x_desc.dims}, {x_desc.dtype.name}) for mode "
                            f"{batch_norm_mode(mode).name}: expected dims {dims}, {dtype.name}; "
                            f"use derive_bn_tensor_descriptor")


def check_epsilon(epsilon) -> float:
    eps = check_finite_scalar("epsilon", epsilon)
    if eps < BN_MIN_EPSILON:
        raise BadParamError(f"epsilon must be >= CUDNN_BN_MIN_EPSILON = {BN_MIN_EPSILON}, got {eps}")
    return eps


def norm_param_dims(x_desc: TensorDescriptor, norm_ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Layer/RMS norm over the last ``norm_ndim`` dims: (scale dims, statistics dims)."""
    if isinstance(norm_ndim, bool) or not isinstance(norm_ndim, int) or not 1 <= norm_ndim < x_desc.ndim:
        raise BadParamError(f"norm_ndim must be an integer in [1, {x_desc.ndim - 1}] for x dims "
                            f"{x_desc.dims}, got {norm_ndim!r}")
    return tuple(x_desc.dims[-norm_ndim:]), tuple(x_desc.dims[:-norm_ndim])


def group_norm_dims(x_desc: TensorDescriptor, groups: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Group norm: (scale dims (C,), statistics dims (N, groups)); C must divide into groups."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or x_desc.ndim < 2 \
            or x_desc.c % groups:
        raise BadParamError(f"groups must be a positive integer dividing C={x_desc.dims[1] if x_desc.ndim > 1 else '?'} "
                            f"(x dims {x_desc.dims}), got {groups!r}")
    return (x_desc.c,), (x_desc.n, groups)
