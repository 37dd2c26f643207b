"""Turning user input (an enum member, its number or its name) into a layer enum member.

Shared by the layer descriptors so every unsupported value fails the same way: a
BadParamError naming the value and listing the valid members with their numbers.
"""
from __future__ import annotations

import enum

import numpy as np

from ..errors import BadParamError


def enum_member(enum_type: type[enum.IntEnum], value, what: str, prefix: str = ""):
    """``value`` as a member of ``enum_type``; names may carry cuDNN's ``prefix``
    (``CUDNN_POOLING_MAX``) and any case."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        name = value.upper()
        if prefix and name.startswith(prefix):
            name = name[len(prefix):]
        if name in enum_type.__members__:
            return enum_type[name]
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool) \
            and (not isinstance(value, enum.Enum) or isinstance(value, enum_type)):
        try:
            return enum_type(int(value))
        except ValueError:
            pass
    valid = ", ".join(f"{m.name}={m.value}" for m in enum_type)
    raise BadParamError(f"unsupported {what} {value!r}; valid: {valid}")
