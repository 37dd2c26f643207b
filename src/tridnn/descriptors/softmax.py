"""Softmax's enums (cudnnSoftmaxAlgorithm_t, cudnnSoftmaxMode_t); softmax has no descriptor."""
from __future__ import annotations

import enum

from .enum_parse import enum_member


class SoftmaxAlgorithm(enum.IntEnum):
    """FAST skips the max subtraction, ACCURATE subtracts the max, LOG gives log-softmax."""
    FAST = 0
    ACCURATE = 1
    LOG = 2


class SoftmaxMode(enum.IntEnum):
    """INSTANCE: over C*spatial for each n. CHANNEL: over C for each (n, spatial position)."""
    INSTANCE = 0
    CHANNEL = 1


def softmax_algorithm(value) -> SoftmaxAlgorithm:
    return enum_member(SoftmaxAlgorithm, value, "softmax algorithm", "CUDNN_SOFTMAX_")


def softmax_mode(value) -> SoftmaxMode:
    return enum_member(SoftmaxMode, value, "softmax mode", "CUDNN_SOFTMAX_MODE_")
