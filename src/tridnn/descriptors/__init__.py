"""Descriptors: frozen, storage-free descriptions of tensors and operations.

Each module holds one operation's descriptor and all of its shape math.
"""
from .convolution import ConvolutionDescriptor, output_size, transposed_input_dims
from .tensor import FilterDescriptor, TensorDescriptor, packed_strides

__all__ = ["TensorDescriptor", "FilterDescriptor", "ConvolutionDescriptor", "output_size",
           "transposed_input_dims", "packed_strides"]
