"""Status codes and exceptions, after cuDNN's cudnnStatus_t.

Every failure raises the exception of its status. The classes also derive from the
matching Python built-in so that ordinary ``except ValueError`` code keeps working.
"""
from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """cudnnStatus_t, with cuDNN's numeric values."""
    SUCCESS = 0
    NOT_INITIALIZED = 1
    ALLOC_FAILED = 2
    BAD_PARAM = 3
    INTERNAL_ERROR = 4
    INVALID_VALUE = 5
    ARCH_MISMATCH = 6
    MAPPING_ERROR = 7
    EXECUTION_FAILED = 8
    NOT_SUPPORTED = 9
    LICENSE_ERROR = 10
    RUNTIME_PREREQUISITE_MISSING = 11
    RUNTIME_IN_PROGRESS = 12
    RUNTIME_FP_OVERFLOW = 13
    VERSION_MISMATCH = 14


class TridnnError(Exception):
    """Base class: ``status`` tells which cuDNN status the failure maps to."""
    status = Status.INTERNAL_ERROR


class NotInitializedError(TridnnError, RuntimeError):
    status = Status.NOT_INITIALIZED


class AllocFailedError(TridnnError, MemoryError):
    status = Status.ALLOC_FAILED


class BadParamError(TridnnError, ValueError):
    status = Status.BAD_PARAM


class InternalError(TridnnError, RuntimeError):
    status = Status.INTERNAL_ERROR


class InvalidValueError(TridnnError, ValueError):
    status = Status.INVALID_VALUE


class ArchMismatchError(TridnnError, RuntimeError):
    status = Status.ARCH_MISMATCH


class MappingError(TridnnError, RuntimeError):
    status = Status.MAPPING_ERROR


class ExecutionFailedError(TridnnError, RuntimeError):
    status = Status.EXECUTION_FAILED


class NotSupportedError(TridnnError, NotImplementedError):
    status = Status.NOT_SUPPORTED


class RuntimePrerequisiteMissingError(TridnnError, ImportError):
    status = Status.RUNTIME_PREREQUISITE_MISSING


class VersionMismatchError(TridnnError, RuntimeError):
    status = Status.VERSION_MISMATCH


_BY_STATUS = {cls.status: cls for cls in (
    NotInitializedError, AllocFailedError, BadParamError, InternalError, InvalidValueError,
    ArchMismatchError, MappingError, ExecutionFailedError, NotSupportedError,
    RuntimePrerequisiteMissingError, VersionMismatchError)}


def error_for(status: Status) -> type[TridnnError]:
    """The exception class that a non-success status raises."""
    return _BY_STATUS.get(Status(status), InternalError)


def get_error_string(status) -> str:
    """cudnnGetErrorString: the status name as cuDNN prints it."""
    return "CUDNN_STATUS_" + Status(status).name


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """Validate an integer parameter; the message names the value and the valid range."""
    if isinstance(value, bool) or not (isinstance(value, int) or _is_integral(value)):
        raise BadParamError(f"{name} must be an integer >= {minimum}, got {value!r} "
                            f"of type {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise BadParamError(f"{name} must be >= {minimum}, got {value}")
    return value


def _is_integral(value) -> bool:
    try:
        import numpy as np
        return isinstance(value, np.integer)
    except ImportError:  # pragma: no cover - numpy is a core dependency
        return False


def check_finite_scalar(name: str, value) -> float:
    """alpha/beta style scalars: a finite real number (not a string that parses as one)."""
    if isinstance(value, (str, bytes)):
        raise BadParamError(f"{name} must be a real number, got the string {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise BadParamError(f"{name} must be a real number, got {value!r}") from None
    except OverflowError:  # an int (or Fraction) past float's range
        raise BadParamError(f"{name} must be finite; the {type(value).__name__} given is past float's range") from None
    if f - f != 0.0:  # inf or nan (x - x is exactly 0.0 for every finite float)
        raise BadParamError(f"{name} must be finite, got {value!r}")
    return f
