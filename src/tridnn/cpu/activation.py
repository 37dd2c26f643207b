"""Activation functions and their derivatives in NumPy, shared by the activation layer
and the fused convolution epilogue. Inputs are float32 or float64 arrays; results are
new arrays of the same dtype (callers round and blend)."""
from __future__ import annotations

import math

import numpy as np

from ..descriptors.activation import SQRT_2_OVER_PI, ActivationDescriptor, ActivationMode as M


def _erf(x):
    """erf for arrays (NumPy has none): exact math.erf per element for float64, a
    Chebyshev fit with relative error < 1.2e-7 (float32 rounding) for float32."""
    if x.dtype == np.float64:
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return _erf_numpy(x)


def _erf_numpy(x):
    x = np.asarray(x)
    a = np.abs(x).astype(np.float64)
    t = 1.0 / (1.0 + 0.5 * a)
    # Numerical Recipes erfc (Chebyshev fit), fractional error < 1.2e-7
    poly = -a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    erfc = t * np.exp(poly)
    return (np.sign(x) * (1.0 - erfc)).astype(x.dtype)


def _sigmoid(x):
    # stable for large |x|: exp of a non-positive number only
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


def forward(desc: ActivationDescriptor, x: np.ndarray) -> np.ndarray:
    """y = act(x) elementwise."""
    m, c = desc.mode, desc.coef
    if m == M.IDENTITY:
        return x.copy()
    if m in (M.RELU, M.CLIPPED_RELU, M.LEAKY_RELU):
        if m == M.LEAKY_RELU:
            y = np.where(x > 0, x, c * x).astype(x.dtype)
        else:
            y = np.maximum(x, 0) if desc.propagate_nan else np.fmax(x, 0)
            if m == M.CLIPPED_RELU:
                y = np.minimum(y, c) if desc.propagate_nan else np.fmin(y, c)
        if not desc.propagate_nan:
            y = np.where(np.isnan(x), 0, y).astype(x.dtype)
        return y
    if m == M.SIGMOID:
        return _sigmoid(x)
    if m == M.TANH:
        return np.tanh(x)
    if m == M.ELU:
        return np.where(x > 0, x, c * np.expm1(np.minimum(x, 0))).astype(x.dtype)
    if m == M.SWISH:
        return x * _sigmoid(desc.swish_beta * x)
    if m == M.GELU:
        return (0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))).astype(x.dtype)
    if m == M.GELU_TANH:
        return (0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))).astype(x.dtype)
    if m == M.SOFTPLUS:
        z = c * x
        return (np.logaddexp(0, z) / c).astype(x.dtype)
    if m == M.HARD_SWISH:
        return (x * np.clip(x + 3.0, 0.0, 6.0) / 6.0).astype(x.dtype)
    raise AssertionError(m)


def backward(desc: ActivationDescriptor, x: np.ndarray, y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy * act'(x); uses y where the derivative is cheaper from the output."""
    m, c = desc.mode, desc.coef
    if m == M.IDENTITY:
        return dy.copy()
    if m == M.RELU:
        return np.where(x > 0, dy, 0).astype(dy.dtype)
    if m == M.CLIPPED_RELU:
        return np.where((x > 0) & (x < c), dy, 0).astype(dy.dtype)
    if m == M.LEAKY_RELU:
        return np.where(x > 0, dy, c * dy).astype(dy.dtype)
    if m == M.SIGMOID:
        return dy * y * (1 - y)
    if m == M.TANH:
        return dy * (1 - y * y)
    if m == M.ELU:
        return np.where(x > 0, dy, dy * (y + c)).astype(dy.dtype)
    if m == M.SWISH:
        s = _sigmoid(desc.swish_beta * x)
        return dy * (s + desc.swish_beta * x * s * (1 - s))
    if m == M.GELU:
        cdf = 0.5 * (1.0 + _erf(x / np.sqrt(2.0)))
        pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
        return (dy * (cdf + x * pdf)).astype(dy.dtype)
    if m == M.GELU_TANH:
        inner = SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
        t = np.tanh(inner)
        d_inner = SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
        return (dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner)).astype(dy.dtype)
    if m == M.SOFTPLUS:
        return dy * _sigmoid(c * x)
    if m == M.HARD_SWISH:
        grad = np.where(x < -3, 0.0, np.where(x > 3, 1.0, (2 * x + 3) / 6.0))
        return (dy * grad).astype(dy.dtype)
    raise AssertionError(m)


# -- the activation layer (cudnnActivationForward/Backward) --------------------------------
def _descriptor(mode, coef, swish_beta, propagate_nan) -> ActivationDescriptor:
    return ActivationDescriptor(M(int(mode)), int(bool(propagate_nan)), coef, swish_beta)


def _plain(*arrays) -> bool:
    return all(a.dtype in (np.float32, np.float64) for a in arrays)


def activation_forward(x, y, mode, coef, swish_beta, propagate_nan, alpha, beta):
    """y = alpha * act(x) + beta * y. RELU and CLIPPED_RELU with alpha 1, beta 0 write
    straight into y in one pass (fmax/fmin skip NaN, which is NOT_PROPAGATE_NAN)."""
    if int(mode) in (M.RELU, M.CLIPPED_RELU) and alpha == 1.0 and beta == 0.0 and _plain(x, y) \
            and x.dtype == y.dtype:
        pick_max, pick_min = (np.maximum, np.minimum) if propagate_nan else (np.fmax, np.fmin)
        zero, top, clipped = x.dtype.type(0), x.dtype.type(coef), int(mode) == M.CLIPPED_RELU

        def slab(ys, xs):
            pick_max(xs, zero, out=ys)
            if clipped:
                pick_min(ys, top, out=ys)

        elementwise(slab, y, x, slabs=False)   # shares on the worker threads; same bits as one call
        return
    desc = _descriptor(mode, coef, swish_beta, propagate_nan)
    acc = forward(desc, to_acc(x))
    blend(y, acc if acc is not x else acc.copy(), alpha, beta)


def activation_backward(y, dy, x, dx, mode, coef, swish_beta, alpha, beta):
    """dx = alpha * dy * act'(x) + beta * dx."""
    if int(mode) == M.RELU and alpha == 1.0 and beta == 0.0 and _plain(x, dy, dx) and dy.dtype == dx.dtype:
        # one multiply by the 0/1 derivative (NumPy's masked copies are far slower);
        # an inf or NaN in dy where x <= 0 therefore stays NaN, as dy * 0 does
        def slab(dxs, dys, xs):
            mask = np.greater(xs, 0, out=scratch("relu.mask", xs.shape, bool))
            np.multiply(dys, mask, out=dxs)

        elementwise(slab, dx, dy, x)     # slabs on the worker threads; same bits as one call
        return
    desc = _descriptor(mode, coef, swish_beta, False)
    acc = backward(desc, to_acc(x), to_acc(y), to_acc(dy))
    blend(dx, acc if acc is not dy else acc.copy(), alpha, beta)


from .layer_utils import blend, elementwise, scratch, to_acc  # noqa: E402  (after the math above, which fused epilogues import)
