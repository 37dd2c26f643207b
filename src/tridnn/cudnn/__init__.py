"""cuDNN's C API under its own names, so a program written against cuDNN ports line by line.

Conventions (see docs/api.md, "tridnn.cudnn"):
- C out-parameters are return values: one value, or a tuple when the C call has
  several; the get/find algorithm calls return the list of perf records.
- ``cudnnCreate*Descriptor()`` returns a mutable descriptor that the Set* calls fill.
- Data buffers are arrays (NumPy, torch, DLPack) written in place.
- A non-success status raises the matching tridnn.errors exception (BadParamError for
  CUDNN_STATUS_BAD_PARAM, NotSupportedError for CUDNN_STATUS_NOT_SUPPORTED, ...); the
  exception's ``status`` attribute is the cudnnStatus_t value. Calls return None on success.
- Using a destroyed handle or descriptor raises NotInitializedError.
"""
from ._constants import *  # noqa: F401,F403
from ._constants import __all__ as _constant_names
from ._convolution import *  # noqa: F401,F403 - the backward names
from ._layers import *  # noqa: F401,F403
from ._convolution import (cudnnConvolutionAlgoPerf_t, cudnnConvolutionBwdDataAlgoPerf_t,  # noqa: F401
                           cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionForward,
                           cudnnConvolutionFwdAlgoPerf_t, cudnnFindConvolutionForwardAlgorithm,
                           cudnnFindConvolutionForwardAlgorithmEx,
                           cudnnGetConvolutionForwardAlgorithm_v7,
                           cudnnGetConvolutionForwardAlgorithmMaxCount,
                           cudnnGetConvolutionForwardWorkspaceSize)
from ._descriptors import (cudnnConvolutionStruct, cudnnCreateConvolutionDescriptor,  # noqa: F401
                           cudnnCreateFilterDescriptor, cudnnCreateTensorDescriptor,
                           cudnnDestroyConvolutionDescriptor, cudnnDestroyFilterDescriptor,
                           cudnnDestroyTensorDescriptor, cudnnFilterStruct,
                           cudnnGetConvolution2dDescriptor, cudnnGetConvolution2dForwardOutputDim,
                           cudnnGetConvolutionGroupCount, cudnnGetConvolutionMathType,
                           cudnnGetConvolutionNdDescriptor, cudnnGetConvolutionNdForwardOutputDim,
                           cudnnGetFilter4dDescriptor, cudnnGetFilterNdDescriptor,
                           cudnnGetFilterSizeInBytes, cudnnGetTensor4dDescriptor,
                           cudnnGetTensorNdDescriptor, cudnnGetTensorSizeInBytes,
                           cudnnSetConvolution2dDescriptor, cudnnSetConvolutionGroupCount,
                           cudnnSetConvolutionMathType, cudnnSetConvolutionNdDescriptor,
                           cudnnSetFilter4dDescriptor, cudnnSetFilterNdDescriptor,
                           cudnnSetTensor4dDescriptor, cudnnSetTensor4dDescriptorEx,
                           cudnnSetTensorNdDescriptor, cudnnSetTensorNdDescriptorEx,
                           cudnnTensorStruct)
from ..handle import Handle
from ._library import cudnnCreate, cudnnDestroy, cudnnGetErrorString, cudnnGetVersion  # noqa: F401

# C's opaque pointer types name the mutable descriptor classes
cudnnHandle_t = Handle
cudnnTensorDescriptor_t = cudnnTensorStruct
cudnnFilterDescriptor_t = cudnnFilterStruct
cudnnConvolutionDescriptor_t = cudnnConvolutionStruct

__all__ = list(_constant_names) + sorted(
    name for name in dir() if name.startswith("cudnn") and name not in _constant_names)
