"""Data buffers as C pointers: a flat 1-D array is memory the descriptor lays out.

cuDNN takes ``void*`` and reads it through the descriptor's dims and strides. Here a
buffer may be the logical view or the physical-dims array (the Pythonic API's two
forms) or, as in C, a flat 1-D array at least as long as the descriptor's span,
viewed through its strides (zero copy).
"""
from __future__ import annotations

import numpy as np

from ..descriptors import FilterDescriptor
from ..errors import BadParamError


def pointer(array, desc, name: str):
    """``array`` itself, or a flat 1-D array viewed as ``desc`` lays it out."""
    if array is None:
        return None
    tensor = desc.as_tensor() if isinstance(desc, FilterDescriptor) else desc
    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 1 or tensor.ndim == 1:
        return array
    if shape[0] < tensor.span:
        raise BadParamError(f"{name} is a flat buffer of {shape[0]} elements; its descriptor "
                            f"{tuple(tensor.dims)} with strides {tuple(tensor.strides)} reaches "
                            f"{tensor.span} elements")
    if isinstance(array, np.ndarray):
        if not array.flags.c_contiguous:
            raise BadParamError(f"{name}: a flat buffer must be contiguous")
        return np.lib.stride_tricks.as_strided(
            array, tensor.dims, tuple(s * array.itemsize for s in tensor.strides),
            writeable=array.flags.writeable)
    if hasattr(array, "as_strided"):  # torch, CPU or CUDA
        if not array.is_contiguous():
            raise BadParamError(f"{name}: a flat buffer must be contiguous")
        return array.as_strided(tensor.dims, tensor.strides)
    from ..arrays import to_numpy
    return pointer(to_numpy(array, name), desc, name)
