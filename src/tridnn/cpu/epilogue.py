"""The fused epilogue of convolution_bias_activation_forward.

A forward algorithm calls ``epilogue(acc, index)`` on each block of its blended
accumulator (alpha1 * conv, still in float32 or float64) just before the one
rounding to y; ``index`` says which part of y the block is. Adding alpha2 * z and
the bias and applying the activation there means y is written once and never
re-read, and the activation sees the unrounded sum.
"""
from __future__ import annotations

import numpy as np

from ..descriptors.activation import ActivationMode as M
from . import activation

# cuDNN fuses RELU and IDENTITY; tridnn fuses these (all elementwise, none needs dy).
FUSED_MODES = (M.IDENTITY, M.RELU, M.CLIPPED_RELU, M.SIGMOID, M.TANH, M.ELU, M.SWISH, M.GELU)


def bias_activation(desc, bias: np.ndarray | None, z: np.ndarray | None = None, alpha2: float = 0.0):
    """epilogue(acc, index) -> act(acc + alpha2 * z[index] + bias[channels of index]).

    ``bias`` is (1, K, 1, ...) and ``z`` is y-shaped (or None when alpha2 == 0)."""

    def epilogue(acc: np.ndarray, index: tuple) -> np.ndarray:
        full = tuple(index) + (slice(None),) * (acc.ndim - len(index))
        if z is not None and alpha2 != 0.0:
            part = z[full].astype(acc.dtype)
            if alpha2 != 1.0:
                part *= alpha2
            acc += part
        if bias is not None:
            acc += bias[(slice(None), full[1])].astype(acc.dtype, copy=False)
        if desc.mode == M.IDENTITY:
            return acc
        if desc.mode == M.RELU and not desc.propagate_nan:
            return np.fmax(acc, 0, out=acc)
        return activation.forward(desc, acc)

    return epilogue
