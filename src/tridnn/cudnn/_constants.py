"""cuDNN's constants under their C names, with cuDNN's numeric values.

Each constant is the member of the matching tridnn enum (an IntEnum), so it compares
equal to the C value and prints its meaning. Data types tridnn cannot compute in
(INT8, ...) are defined so that ported code imports; using them raises
BadParamError naming the supported types.
"""
from __future__ import annotations

from ..descriptors.activation import ActivationMode, NanPropagation
from ..descriptors.lrn import LRN_MAX_N, LRN_MIN_BETA, LRN_MIN_K, LRN_MIN_N, LRNMode
from ..descriptors.normalization import BN_MIN_EPSILON, BatchNormMode, BatchNormOps
from ..descriptors.pooling import PoolingMode
from ..descriptors.softmax import SoftmaxAlgorithm, SoftmaxMode
from ..descriptors.tensor_ops import IndicesType, OpTensorOp, ReduceTensorIndices, ReduceTensorOp
from ..errors import Status
from ..types import (ConvBwdDataAlgo, ConvBwdFilterAlgo, ConvFwdAlgo, ConvMode, DataType,
                     Determinism, MathType, TensorFormat)

# The API level these names follow (cudnnGetVersion); tridnn's own is tridnn.__version__.
CUDNN_MAJOR = 9
CUDNN_MINOR = 0
CUDNN_PATCHLEVEL = 0
CUDNN_VERSION = CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL

_exported: list[str] = ["CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL", "CUDNN_VERSION"]


def _define(prefix: str, enum_type, count: str | None = None) -> None:
    """CUDNN_<prefix><MEMBER> for every member (and CUDNN_<prefix>COUNT when asked)."""
    for member in enum_type:
        name = f"CUDNN_{prefix}{member.name}"
        globals()[name] = member
        _exported.append(name)
    if count:
        globals()[count] = len(enum_type)
        _exported.append(count)


_define("STATUS_", Status)
_define("CONVOLUTION_FWD_ALGO_", ConvFwdAlgo, "CUDNN_CONVOLUTION_FWD_ALGO_COUNT")
_define("CONVOLUTION_BWD_DATA_ALGO_", ConvBwdDataAlgo, "CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT")
_define("CONVOLUTION_BWD_FILTER_ALGO_", ConvBwdFilterAlgo, "CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT")
_define("ACTIVATION_", ActivationMode)
_define("", NanPropagation)          # CUDNN_NOT_PROPAGATE_NAN, CUDNN_PROPAGATE_NAN
_define("", Determinism)             # CUDNN_NON_DETERMINISTIC, CUDNN_DETERMINISTIC
_define("", ConvMode)                # CUDNN_CONVOLUTION, CUDNN_CROSS_CORRELATION
_define("POOLING_", PoolingMode)
_define("SOFTMAX_", SoftmaxAlgorithm)  # CUDNN_SOFTMAX_FAST, _ACCURATE, _LOG
_define("SOFTMAX_MODE_", SoftmaxMode)
_define("BATCHNORM_", BatchNormMode)
_define("OP_TENSOR_", OpTensorOp)
_define("REDUCE_TENSOR_", ReduceTensorOp)
_define("REDUCE_TENSOR_", ReduceTensorIndices)  # CUDNN_REDUCE_TENSOR_NO_INDICES, _FLATTENED_INDICES

CUDNN_LRN_CROSS_CHANNEL_DIM1 = LRNMode.CROSS_CHANNEL_DIM1
CUDNN_BATCHNORM_OPS_BN = BatchNormOps.NORM
CUDNN_BATCHNORM_OPS_BN_ACTIVATION = BatchNormOps.NORM_ACTIVATION
CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION = BatchNormOps.NORM_ADD_ACTIVATION
CUDNN_BN_MIN_EPSILON = BN_MIN_EPSILON
CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N, CUDNN_LRN_MIN_K, CUDNN_LRN_MIN_BETA = LRN_MIN_N, LRN_MAX_N, LRN_MIN_K, LRN_MIN_BETA
CUDNN_32BIT_INDICES = IndicesType.INDICES_32BIT
CUDNN_64BIT_INDICES = IndicesType.INDICES_64BIT
CUDNN_16BIT_INDICES = IndicesType.INDICES_16BIT
CUDNN_8BIT_INDICES = IndicesType.INDICES_8BIT
_exported += ["CUDNN_LRN_CROSS_CHANNEL_DIM1", "CUDNN_BATCHNORM_OPS_BN", "CUDNN_BATCHNORM_OPS_BN_ACTIVATION",
              "CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION", "CUDNN_BN_MIN_EPSILON", "CUDNN_LRN_MIN_N",
              "CUDNN_LRN_MAX_N", "CUDNN_LRN_MIN_K", "CUDNN_LRN_MIN_BETA", "CUDNN_32BIT_INDICES",
              "CUDNN_64BIT_INDICES", "CUDNN_16BIT_INDICES", "CUDNN_8BIT_INDICES"]

CUDNN_TENSOR_NCHW = TensorFormat.NCHW
CUDNN_TENSOR_NHWC = TensorFormat.NHWC
CUDNN_TENSOR_NCHW_VECT_C = TensorFormat.NCHW_VECT_C

CUDNN_DATA_FLOAT = DataType.FLOAT
CUDNN_DATA_DOUBLE = DataType.DOUBLE
CUDNN_DATA_HALF = DataType.HALF
CUDNN_DATA_BFLOAT16 = DataType.BFLOAT16
CUDNN_DATA_INT8 = 3       # not computed in by tridnn: rejected with BadParamError when used
CUDNN_DATA_INT32 = 4
CUDNN_DATA_UINT8 = 6
CUDNN_DATA_INT64 = 10

CUDNN_DEFAULT_MATH = MathType.DEFAULT
CUDNN_TENSOR_OP_MATH = MathType.TENSOR_OP
CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = MathType.TENSOR_OP_ALLOW_CONVERSION
CUDNN_FMA_MATH = MathType.FMA

_exported += ["CUDNN_TENSOR_NCHW", "CUDNN_TENSOR_NHWC", "CUDNN_TENSOR_NCHW_VECT_C",
              "CUDNN_DATA_FLOAT", "CUDNN_DATA_DOUBLE", "CUDNN_DATA_HALF", "CUDNN_DATA_BFLOAT16",
              "CUDNN_DATA_INT8", "CUDNN_DATA_INT32", "CUDNN_DATA_UINT8", "CUDNN_DATA_INT64",
              "CUDNN_DEFAULT_MATH", "CUDNN_TENSOR_OP_MATH", "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION",
              "CUDNN_FMA_MATH"]

# the C enum type names, for code that spells them (cudnnDataType_t.CUDNN_DATA_FLOAT is not C,
# but ``cudnnDataType_t(0)`` and isinstance checks read naturally)
cudnnStatus_t = Status
cudnnDataType_t = DataType
cudnnTensorFormat_t = TensorFormat
cudnnMathType_t = MathType
cudnnConvolutionMode_t = ConvMode
cudnnDeterminism_t = Determinism
cudnnConvolutionFwdAlgo_t = ConvFwdAlgo
cudnnConvolutionBwdDataAlgo_t = ConvBwdDataAlgo
cudnnConvolutionBwdFilterAlgo_t = ConvBwdFilterAlgo
cudnnActivationMode_t = ActivationMode
cudnnNanPropagation_t = NanPropagation
cudnnPoolingMode_t = PoolingMode
cudnnSoftmaxAlgorithm_t = SoftmaxAlgorithm
cudnnSoftmaxMode_t = SoftmaxMode
cudnnBatchNormMode_t = BatchNormMode
cudnnBatchNormOps_t = BatchNormOps
cudnnLRNMode_t = LRNMode
cudnnOpTensorOp_t = OpTensorOp
cudnnReduceTensorOp_t = ReduceTensorOp
cudnnReduceTensorIndices_t = ReduceTensorIndices
cudnnIndicesType_t = IndicesType
_exported += ["cudnnStatus_t", "cudnnDataType_t", "cudnnTensorFormat_t", "cudnnMathType_t",
              "cudnnConvolutionMode_t", "cudnnDeterminism_t", "cudnnConvolutionFwdAlgo_t",
              "cudnnConvolutionBwdDataAlgo_t", "cudnnConvolutionBwdFilterAlgo_t",
              "cudnnActivationMode_t", "cudnnNanPropagation_t", "cudnnPoolingMode_t",
              "cudnnSoftmaxAlgorithm_t", "cudnnSoftmaxMode_t", "cudnnBatchNormMode_t", "cudnnBatchNormOps_t",
              "cudnnLRNMode_t", "cudnnOpTensorOp_t", "cudnnReduceTensorOp_t", "cudnnReduceTensorIndices_t",
              "cudnnIndicesType_t"]

__all__ = list(_exported)
