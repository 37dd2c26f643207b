"""The activation descriptor (cudnnActivationDescriptor_t) and its modes.

cuDNN's modes keep their numbers; tridnn's extensions (leaky relu, gelu, softplus,
hard-swish) are numbered from 100 so they never collide with a future cuDNN mode.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from ..errors import BadParamError, check_finite_scalar


class ActivationMode(enum.IntEnum):
    SIGMOID = 0
    RELU = 1
    TANH = 2
    CLIPPED_RELU = 3
    ELU = 4
    IDENTITY = 5
    SWISH = 6
    LEAKY_RELU = 100   # x if x > 0 else coef * x
    GELU = 101         # x * Phi(x), the erf form
    GELU_TANH = 102    # the tanh approximation
    SOFTPLUS = 103     # log(1 + exp(coef * x)) / coef, coef defaulting to 1
    HARD_SWISH = 104   # x * relu6(x + 3) / 6


class NanPropagation(enum.IntEnum):
    """cudnnNanPropagation_t: whether max/min-based ops let NaN through."""
    NOT_PROPAGATE_NAN = 0
    PROPAGATE_NAN = 1


def activation_mode(value) -> ActivationMode:
    """A mode from the enum, its value or its name ('relu', 'CUDNN_ACTIVATION_RELU')."""
    if isinstance(value, ActivationMode):
        return value
    if isinstance(value, str):
        name = value.upper().removeprefix("CUDNN_ACTIVATION_")
        if name in ActivationMode.__members__:
            return ActivationMode[name]
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            return ActivationMode(value)
        except ValueError:
            pass
    raise BadParamError(f"unknown activation mode {value!r}; valid: "
                        + ", ".join(m.name.lower() for m in ActivationMode))


@dataclass(frozen=True)
class ActivationDescriptor:
    """``coef``: the clipping ceiling (CLIPPED_RELU), alpha (ELU), the negative slope
    (LEAKY_RELU) or beta (SOFTPLUS); ``swish_beta``: SWISH's x * sigmoid(beta * x)."""
    mode: ActivationMode = ActivationMode.RELU
    nan_opt: NanPropagation = NanPropagation.NOT_PROPAGATE_NAN
    coef: float = 0.0
    swish_beta: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "mode", activation_mode(self.mode))
        try:
            object.__setattr__(self, "nan_opt", NanPropagation(self.nan_opt))
        except ValueError:
            raise BadParamError(f"unknown NaN propagation {self.nan_opt!r}; valid: "
                                f"NOT_PROPAGATE_NAN (0), PROPAGATE_NAN (1)") from None
        coef = check_finite_scalar("activation coef", self.coef)
        object.__setattr__(self, "swish_beta", check_finite_scalar("swish_beta", self.swish_beta))
        if self.mode == ActivationMode.CLIPPED_RELU and coef <= 0:
            raise BadParamError(f"CLIPPED_RELU needs a clipping ceiling coef > 0, got {coef}")
        if self.mode == ActivationMode.SOFTPLUS:
            coef = coef or 1.0
            if coef <= 0:
                raise BadParamError(f"SOFTPLUS needs beta coef > 0, got {coef}")
        object.__setattr__(self, "coef", coef)

    @property
    def propagate_nan(self) -> bool:
        return self.nan_opt == NanPropagation.PROPAGATE_NAN


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
