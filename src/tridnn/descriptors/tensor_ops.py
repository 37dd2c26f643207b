"""Descriptors of the tensor ops (cudnnOpTensorDescriptor_t, cudnnReduceTensorDescriptor_t)
and their broadcasting rules."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import BadParamError, NotSupportedError
from ..types import DataType
from .activation import NanPropagation
from .enum_parse import enum_member
from .tensor import TensorDescriptor


class OpTensorOp(enum.IntEnum):
    """cudnnOpTensorOp_t: c = op(alpha1 * a, alpha2 * b) + beta * c; SQRT and NOT read a only."""
    ADD = 0
    MUL = 1
    MIN = 2
    MAX = 3
    SQRT = 4
    NOT = 5

    @property
    def unary(self) -> bool:
        return self in (OpTensorOp.SQRT, OpTensorOp.NOT)


class ReduceTensorOp(enum.IntEnum):
    """cudnnReduceTensorOp_t."""
    ADD = 0
    MUL = 1
    MIN = 2
    MAX = 3
    AMAX = 4
    AVG = 5
    NORM1 = 6
    NORM2 = 7
    MUL_NO_ZEROS = 8

    @property
    def has_indices(self) -> bool:
        return self in (ReduceTensorOp.MIN, ReduceTensorOp.MAX, ReduceTensorOp.AMAX)


class ReduceTensorIndices(enum.IntEnum):
    """cudnnReduceTensorIndices_t."""
    NO_INDICES = 0
    FLATTENED_INDICES = 1


class IndicesType(enum.IntEnum):
    """cudnnIndicesType_t; tridnn computes 32-bit indices."""
    INDICES_32BIT = 0
    INDICES_64BIT = 1
    INDICES_16BIT = 2
    INDICES_8BIT = 3


def _comp_type(value):
    if value is None:
        return None
    ct = DataType.of(value)
    if ct not in (DataType.FLOAT, DataType.DOUBLE):
        raise NotSupportedError(f"tensor-op compute type {ct.name} is not supported; valid: FLOAT, DOUBLE")
    return ct


@dataclass(frozen=True)
class OpTensorDescriptor:
    op: OpTensorOp = OpTensorOp.ADD
    comp_type: DataType | None = None
    nan_opt: NanPropagation = NanPropagation.NOT_PROPAGATE_NAN

    def __post_init__(self):
        object.__setattr__(self, "op", enum_member(OpTensorOp, self.op, "op-tensor op", "CUDNN_OP_TENSOR_"))
        object.__setattr__(self, "comp_type", _comp_type(self.comp_type))
        object.__setattr__(self, "nan_opt", enum_member(NanPropagation, self.nan_opt, "NaN propagation", "CUDNN_"))

    @property
    def propagate_nan(self) -> bool:
        return self.nan_opt == NanPropagation.PROPAGATE_NAN


@dataclass(frozen=True)
class ReduceTensorDescriptor:
    op: ReduceTensorOp = ReduceTensorOp.ADD
    comp_type: DataType | None = None
    nan_opt: NanPropagation = NanPropagation.NOT_PROPAGATE_NAN
    indices: ReduceTensorIndices = ReduceTensorIndices.NO_INDICES
    indices_type: IndicesType = IndicesType.INDICES_32BIT

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)
        set_("op", enum_member(ReduceTensorOp, self.op, "reduce-tensor op", "CUDNN_REDUCE_TENSOR_"))
        set_("comp_type", _comp_type(self.comp_type))
        set_("nan_opt", enum_member(NanPropagation, self.nan_opt, "NaN propagation", "CUDNN_"))
        set_("indices", enum_member(ReduceTensorIndices, self.indices, "reduce-tensor indices",
                                    "CUDNN_REDUCE_TENSOR_"))
        set_("indices_type", enum_member(IndicesType, self.indices_type, "indices type", "CUDNN_"))
        if self.indices_type != IndicesType.INDICES_32BIT:
            raise NotSupportedError(f"indices type {self.indices_type.name} is not supported; valid: "
                                    f"INDICES_32BIT")
        if self.wants_indices and not self.op.has_indices:
            raise NotSupportedError(f"indices are computed only for MIN, MAX and AMAX, not {self.op.name}; "
                                    f"use NO_INDICES")

    @property
    def wants_indices(self) -> bool:
        return self.indices == ReduceTensorIndices.FLATTENED_INDICES

    @property
    def propagate_nan(self) -> bool:
        return self.nan_opt == NanPropagation.PROPAGATE_NAN


def check_broadcast(src: TensorDescriptor, dst: TensorDescriptor, src_name: str, dst_name: str) -> None:
    """cuDNN's broadcasting: same rank, and each dim of src equals dst's or is 1."""
    if src.ndim != dst.ndim:
        raise BadParamError(f"{src_name} has {src.ndim} dims {src.dims}, {dst_name} has {dst.ndim} dims "
                            f"{dst.dims}; broadcasting needs the same rank")
    for axis, (s, d) in enumerate(zip(src.dims, dst.dims)):
        if s != d and s != 1:
            raise BadParamError(f"{src_name} dims {src.dims} do not broadcast to {dst_name} dims {dst.dims}: "
                                f"dim {axis} is {s}, valid: {d} or 1")
