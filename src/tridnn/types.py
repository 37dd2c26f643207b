"""The enums of cuDNN's model: data types, layouts, math types, modes, algorithms.

Values follow cuDNN's headers so that numbers stored in a find cache or written in
a ported C program keep their meaning.
"""
from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from .errors import BadParamError


class DataType(enum.IntEnum):
    """cudnnDataType_t (the subset tridnn computes in)."""
    FLOAT = 0
    DOUBLE = 1
    HALF = 2
    BFLOAT16 = 9

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _NUMPY[self].itemsize

    @property
    def accumulator(self) -> np.dtype:
        """The dtype sums are kept in: float64 for DOUBLE, float32 otherwise."""
        return np.dtype(np.float64) if self is DataType.DOUBLE else np.dtype(np.float32)

    @classmethod
    def of(cls, value) -> "DataType":
        """Accept a DataType, a numpy dtype, a torch dtype or a name ('float32', 'bf16')."""
        if isinstance(value, DataType):
            return value
        if value is None:  # np.dtype(None) would silently mean float64
            raise BadParamError("data type None; valid: float32, float64, float16, bfloat16 "
                                "(or DataType.FLOAT/DOUBLE/HALF/BFLOAT16)")
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            try:
                return DataType(int(value))
            except ValueError:
                pass
        name = _torch_dtype_name(value)
        if name is None:
            try:
                name = np.dtype(value).name
            except TypeError:
                name = str(value).lower()
        if name in _BY_NAME:
            return _BY_NAME[name]
        raise BadParamError(f"unsupported data type {value!r}; valid: float32, float64, "
                            f"float16, bfloat16 (or DataType.FLOAT/DOUBLE/HALF/BFLOAT16)")


_NUMPY = {
    DataType.FLOAT: np.dtype(np.float32),
    DataType.DOUBLE: np.dtype(np.float64),
    DataType.HALF: np.dtype(np.float16),
    DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
}
_BY_NAME = {
    "float32": DataType.FLOAT, "float": DataType.FLOAT, "f32": DataType.FLOAT,
    "float64": DataType.DOUBLE, "double": DataType.DOUBLE, "f64": DataType.DOUBLE,
    "float16": DataType.HALF, "half": DataType.HALF, "f16": DataType.HALF,
    "bfloat16": DataType.BFLOAT16, "bf16": DataType.BFLOAT16,
}


def _torch_dtype_name(value):
    text = str(value)
    if text.startswith("torch."):
        return text[len("torch."):]
    return None


class TensorFormat(enum.IntEnum):
    """cudnnTensorFormat_t. NCHW also names NCW/NCDHW, NHWC also NWC/NDHWC."""
    NCHW = 0
    NHWC = 1
    NCHW_VECT_C = 2


class MathType(enum.IntEnum):
    """cudnnMathType_t. On the CPU every math type computes in strict float32 or wider."""
    DEFAULT = 0
    TENSOR_OP = 1
    TENSOR_OP_ALLOW_CONVERSION = 2
    FMA = 3


class ConvMode(enum.IntEnum):
    """cudnnConvolutionMode_t: CONVOLUTION flips the filter, CROSS_CORRELATION does not."""
    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class Determinism(enum.IntEnum):
    """cudnnDeterminism_t."""
    NON_DETERMINISTIC = 0
    DETERMINISTIC = 1


class ConvFwdAlgo(enum.IntEnum):
    """cudnnConvolutionFwdAlgo_t."""
    IMPLICIT_GEMM = 0
    IMPLICIT_PRECOMP_GEMM = 1
    GEMM = 2
    DIRECT = 3
    FFT = 4
    FFT_TILING = 5
    WINOGRAD = 6
    WINOGRAD_NONFUSED = 7


class ConvBwdDataAlgo(enum.IntEnum):
    """cudnnConvolutionBwdDataAlgo_t."""
    ALGO_0 = 0
    ALGO_1 = 1
    FFT = 2
    FFT_TILING = 3
    WINOGRAD = 4
    WINOGRAD_NONFUSED = 5


class ConvBwdFilterAlgo(enum.IntEnum):
    """cudnnConvolutionBwdFilterAlgo_t."""
    ALGO_0 = 0
    ALGO_1 = 1
    FFT = 2
    ALGO_3 = 3
    WINOGRAD = 4
    WINOGRAD_NONFUSED = 5
    FFT_TILING = 6


ALGO_ENUMS = {"fwd": ConvFwdAlgo, "bwd_data": ConvBwdDataAlgo, "bwd_filter": ConvBwdFilterAlgo}
DIRECTIONS = tuple(ALGO_ENUMS)


def algo_enum(direction: str, value):
    """Turn an int, name or enum member into the direction's algorithm enum member."""
    enum_type = ALGO_ENUMS[direction]
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        name = value.upper()
        for prefix in ("CUDNN_CONVOLUTION_FWD_ALGO_", "CUDNN_CONVOLUTION_BWD_DATA_ALGO_",
                       "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_"):
            if name.startswith(prefix):
                name = name[len(prefix):]
        if name in enum_type.__members__:
            return enum_type[name]
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool) and not isinstance(
            value, enum.Enum):
        try:
            return enum_type(int(value))
        except ValueError:
            pass
    valid = ", ".join(f"{m.name}={m.value}" for m in enum_type)
    raise BadParamError(f"unknown {direction} convolution algorithm {value!r}; valid: {valid}")
