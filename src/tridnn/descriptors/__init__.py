"""Descriptors: frozen, storage-free descriptions of tensors and operations.

Each module holds one operation's descriptor and all of its shape math.
"""
from .convolution import ConvolutionDescriptor, output_size, transposed_input_dims
from .tensor import FilterDescriptor, TensorDescriptor, packed_strides

__all__ = ["TensorDescriptor", "FilterDescriptor", "ConvolutionDescriptor", "output_size",
           "transposed_input_dims", "packed_strides"]
from .dropout import DropoutDescriptor, dropout_get_reserve_space_size, dropout_get_states_size  # noqa: E402
from .lrn import LRNDescriptor, LRNMode  # noqa: E402
from .normalization import (BN_MIN_EPSILON, BatchNormMode, BatchNormOps,  # noqa: E402
                            derive_bn_tensor_descriptor)
from .pooling import AdaptivePoolingMode, PoolingDescriptor, PoolingMode  # noqa: E402
from .softmax import SoftmaxAlgorithm, SoftmaxMode  # noqa: E402
from .tensor_ops import (IndicesType, OpTensorDescriptor, OpTensorOp, ReduceTensorDescriptor,  # noqa: E402
                         ReduceTensorIndices, ReduceTensorOp)

__all__ += ["PoolingDescriptor", "PoolingMode", "AdaptivePoolingMode", "SoftmaxAlgorithm", "SoftmaxMode",
            "BatchNormMode", "BatchNormOps", "BN_MIN_EPSILON", "derive_bn_tensor_descriptor",
            "LRNDescriptor", "LRNMode", "DropoutDescriptor", "dropout_get_states_size",
            "dropout_get_reserve_space_size", "OpTensorDescriptor", "OpTensorOp",
            "ReduceTensorDescriptor", "ReduceTensorOp", "ReduceTensorIndices", "IndicesType"]
