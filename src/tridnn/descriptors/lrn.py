"""The LRN descriptor (cudnnLRNDescriptor_t) with cuDNN's defaults and limits."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import BadParamError, check_finite_scalar, check_positive_int
from .enum_parse import enum_member

LRN_MIN_N, LRN_MAX_N = 1, 16
LRN_MIN_K = 1e-5
LRN_MIN_BETA = 0.01


class LRNMode(enum.IntEnum):
    """cudnnLRNMode_t: the only mode normalizes across channels (dim 1)."""
    CROSS_CHANNEL_DIM1 = 0


def lrn_mode(value) -> LRNMode:
    return enum_member(LRNMode, value, "LRN mode", "CUDNN_LRN_")


@dataclass(frozen=True)
class LRNDescriptor:
    """y = x / (k + alpha/n * sum of x^2 over channels [c - (n-1)//2, c + n//2])^beta."""
    n: int = 5
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 2.0

    def __post_init__(self):
        n = check_positive_int("lrn n", self.n)
        if not LRN_MIN_N <= n <= LRN_MAX_N:
            raise BadParamError(f"lrn n must be in [{LRN_MIN_N}, {LRN_MAX_N}], got {n}")
        alpha = check_finite_scalar("lrn alpha", self.alpha)
        beta = check_finite_scalar("lrn beta", self.beta)
        k = check_finite_scalar("lrn k", self.k)
        if beta < LRN_MIN_BETA:
            raise BadParamError(f"lrn beta must be >= {LRN_MIN_BETA}, got {beta}")
        if k < LRN_MIN_K:
            raise BadParamError(f"lrn k must be >= {LRN_MIN_K}, got {k}")
        for name, value in (("n", n), ("alpha", alpha), ("beta", beta), ("k", k)):
            object.__setattr__(self, name, value)
