"""Library-level calls: handles, version and error strings."""
from __future__ import annotations

from ..errors import BadParamError, NotInitializedError, get_error_string
from ..handle import Handle
from ._constants import CUDNN_VERSION


def cudnnCreate(device: str = "cpu", **options) -> Handle:
    """cudnnCreate(&handle) -> handle. ``device`` and the keyword options are Handle's
    (an extension: C's cudnnCreate always takes the current CUDA device)."""
    return Handle(device, **options)


def cudnnDestroy(handle) -> None:
    """Destroys the handle; any later use of it raises NotInitializedError."""
    check_handle(handle).destroy()


def cudnnGetVersion() -> int:
    """The cuDNN API level these names follow (CUDNN_VERSION), not tridnn's version."""
    return CUDNN_VERSION


def cudnnGetErrorString(status) -> str:
    """The status's name as cuDNN prints it, e.g. 'CUDNN_STATUS_BAD_PARAM'."""
    try:
        return get_error_string(status)
    except ValueError:
        return "CUDNN_STATUS_UNKNOWN"


def check_handle(handle) -> Handle:
    if not isinstance(handle, Handle):
        raise BadParamError(f"expected a handle from cudnnCreate(), got {type(handle).__name__}")
    if not handle._alive:
        raise NotInitializedError("the handle was destroyed (cudnnDestroy); create a new one with "
                                  "cudnnCreate()")
    return handle
