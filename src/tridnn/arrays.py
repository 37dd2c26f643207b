"""Host arrays: take NumPy or DLPack arrays zero copy and check them against descriptors.

The API accepts an array for a descriptor in either of two forms:
- the logical view: shape == descriptor dims and element strides == descriptor strides
  (what ``x_nhwc.transpose(0, 3, 1, 2)`` or a torch channels_last tensor gives);
- the raw buffer: a C-contiguous array whose shape is the descriptor's physical
  (memory-order) dims, e.g. an (N, H, W, C) array for an NHWC descriptor, as a
  pointer is in cuDNN's C API.
Either way the array is returned as the logical strided view, never a copy.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import BadParamError
from .types import DataType


def to_numpy(array, name: str = "array") -> np.ndarray:
    """A NumPy view of ``array`` (NumPy, or any CPU DLPack producer such as torch), zero copy."""
    if isinstance(array, np.ndarray):
        return array
    if _is_torch_tensor(array):
        return _torch_to_numpy(array, name)
    if hasattr(array, "__dlpack__"):
        try:
            return np.from_dlpack(array)
        except (TypeError, RuntimeError, BufferError) as exc:
            raise BadParamError(f"{name}: cannot take a {type(array).__name__} as a host array "
                                f"through DLPack ({exc}); pass a NumPy array or a CPU tensor") from None
    raise BadParamError(f"{name} must be a NumPy array or a DLPack-capable CPU array, got "
                        f"{type(array).__name__}")


def _is_torch_tensor(array) -> bool:
    return type(array).__module__.startswith("torch") and hasattr(array, "is_cuda")


def _torch_to_numpy(tensor, name):
    if tensor.device.type != "cpu":
        raise BadParamError(f"{name} is on device {tensor.device}, but the handle's device is the "
                            f"CPU; use Handle(device='cuda') or move the tensor with .cpu()")
    # DLPack rather than Tensor.numpy(): .numpy() marks the storage non-resizable for
    # good, which breaks FSDP (it frees parameters by resizing their storage).
    tensor = tensor.detach()
    if str(tensor.dtype) == "torch.bfloat16":
        # NumPy has no bfloat16 in DLPack; reinterpret the bits zero copy.
        import torch
        return np.from_dlpack(tensor.view(torch.int16)).view(ml_dtypes.bfloat16)
    return np.from_dlpack(tensor)


def shape_strides_dtype(array):
    """Shape, element strides and DataType of a NumPy or torch array, without converting it."""
    if _is_torch_tensor(array):
        return tuple(array.shape), tuple(array.stride()), DataType.of(array.dtype)
    arr = to_numpy(array)
    item = arr.itemsize
    return arr.shape, tuple(s // item for s in arr.strides), DataType.of(arr.dtype)


def as_view(array, desc, name: str, writable: bool = False) -> np.ndarray:
    """The logical strided NumPy view of ``array`` described by ``desc``.

    Raises BadParamError naming both sides when the array does not match."""
    arr = to_numpy(array, name)
    if arr.dtype != desc.dtype.numpy:
        raise BadParamError(f"{name} has dtype {arr.dtype}, its descriptor says {desc.dtype.name} "
                            f"({desc.dtype.numpy})")
    if writable and not arr.flags.writeable:
        raise BadParamError(f"{name} is an output but the array is read-only")
    dims = tuple(desc.dims)
    strides = tuple(desc.strides)
    if arr.shape == dims and _same_strides(arr, dims, strides):
        return arr
    physical = tuple(desc.physical_dims) if hasattr(desc, "physical_dims") else None
    if physical is not None and arr.shape == physical and arr.flags.c_contiguous \
            and desc.span == desc.size:
        return np.lib.stride_tricks.as_strided(
            arr, shape=dims, strides=tuple(s * arr.itemsize for s in strides), writeable=writable or arr.flags.writeable)
    got_strides = tuple(s // arr.itemsize for s in arr.strides)
    raise BadParamError(f"{name} does not match its descriptor: array shape {arr.shape} strides "
                        f"{got_strides}, descriptor dims {dims} strides {strides}"
                        + (f" (or a C-contiguous buffer of shape {physical})" if physical else ""))


def _same_strides(arr: np.ndarray, dims, strides) -> bool:
    item = arr.itemsize
    return all(d <= 1 or s * item == a for d, s, a in zip(dims, strides, arr.strides))
