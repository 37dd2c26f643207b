"""Float64 reference activations and their derivatives, straight from the formulas."""
from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def activation_forward(x, mode, coef=0.0, swish_beta=1.0):
    """mode: an ActivationMode (or its int); NaN handling is not modelled here."""
    x = np.asarray(x, np.float64)
    m = int(mode)
    if m == 0:
        return _sigmoid(x)
    if m == 1:
        return np.where(x > 0, x, 0.0)
    if m == 2:
        return np.tanh(x)
    if m == 3:
        return np.clip(x, 0.0, coef)
    if m == 4:
        return np.where(x > 0, x, coef * (np.exp(np.minimum(x, 0)) - 1))
    if m == 5:
        return x.copy()
    if m == 6:
        return x * _sigmoid(swish_beta * x)
    if m == 100:
        return np.where(x > 0, x, coef * x)
    if m == 101:
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if m == 102:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    if m == 103:
        c = coef or 1.0
        return np.logaddexp(0.0, c * x) / c
    if m == 104:
        return x * np.clip(x + 3, 0, 6) / 6
    raise ValueError(mode)


def activation_backward(x, dy, mode, coef=0.0, swish_beta=1.0):
    """dx = dy * act'(x), the derivative written out by hand for each mode."""
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    m = int(mode)
    if m == 0:
        s = _sigmoid(x)
        d = s * (1 - s)
    elif m == 1:
        d = (x > 0).astype(np.float64)
    elif m == 2:
        d = 1 - np.tanh(x) ** 2
    elif m == 3:
        d = ((x > 0) & (x < coef)).astype(np.float64)
    elif m == 4:
        d = np.where(x > 0, 1.0, coef * np.exp(np.minimum(x, 0)))
    elif m == 5:
        d = np.ones_like(x)
    elif m == 6:
        s = _sigmoid(swish_beta * x)
        d = s + swish_beta * x * s * (1 - s)
    elif m == 100:
        d = np.where(x > 0, 1.0, coef)
    elif m == 101:
        d = 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    elif m == 102:
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (x + 0.044715 * x ** 3))
        d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    elif m == 103:
        d = _sigmoid((coef or 1.0) * x)
    elif m == 104:
        d = np.where(x < -3, 0.0, np.where(x > 3, 1.0, (2 * x + 3) / 6))
    else:
        raise ValueError(mode)
    return dy * d
