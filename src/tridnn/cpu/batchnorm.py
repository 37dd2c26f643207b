"""Batch normalization in NumPy (cuDNN's BatchNormalization* calls, *Ex included).

Statistics are per channel (SPATIAL: over N and every spatial position) or per
activation (PER_ACTIVATION: over N only). Parameter arrays arrive shaped like the
derived descriptor, (1, C, 1, ...) or (1, C, *spatial), so they broadcast against x
as they are. Sums run in float64 whatever the data type, so float32 statistics of
large batches keep their digits; the normalization itself runs in float32 (float64
for float64 data).
"""
from __future__ import annotations

import numpy as np

from .layer_utils import acc_dtype, blend

PER_ACTIVATION, SPATIAL, SPATIAL_PERSISTENT = 0, 1, 2
NORM, NORM_ACTIVATION, NORM_ADD_ACTIVATION = 0, 1, 2


def reduce_axes(ndim: int, mode: int) -> tuple[int, ...]:
    return (0,) if int(mode) == PER_ACTIVATION else (0,) + tuple(range(2, ndim))


def channel_stats(x, axes):
    """(mean, biased variance) over ``axes`` in float64, keepdims, two passes."""
    count = np.prod([x.shape[a] for a in axes])
    mean = np.sum(x, axis=axes, dtype=np.float64, keepdims=True) / count
    centered = x - mean.astype(acc_dtype(x.dtype))
    var = np.sum(np.square(centered, dtype=np.float64), axis=axes, keepdims=True) / count
    return mean, var


def _apply(x, z, scale, bias, mean, inv_std, bn_ops):
    """act(scale * (x - mean) * inv_std + bias [+ z]) as a new array in the compute dtype."""
    dt = acc_dtype(x.dtype)
    a = (scale.astype(np.float64) * inv_std).astype(dt)          # per-channel multiplier
    b = (bias.astype(np.float64) - mean * scale.astype(np.float64) * inv_std).astype(dt)
    xw = x if x.dtype == dt else x.astype(dt)
    out = np.multiply(xw, a)
    out += b
    if int(bn_ops) == NORM_ADD_ACTIVATION:
        out += z.astype(dt, copy=False)
    if int(bn_ops) != NORM:
        np.maximum(out, 0, out=out)
    return out


def batch_norm_forward_training(x, z, y, scale, bias, running_mean, running_var, saved_mean,
                                saved_inv_var, mode, exp_avg_factor, epsilon, bn_ops, alpha, beta):
    """y = alpha * bn(x) + beta * y with batch statistics; updates the running averages
    (variance: unbiased) and saves mean and 1/sqrt(var + epsilon) for the backward."""
    axes = reduce_axes(x.ndim, mode)
    mean, var = channel_stats(x, axes)
    inv_std = 1.0 / np.sqrt(var + epsilon)
    blend(y, _apply(x, z, scale, bias, mean, inv_std, bn_ops), alpha, beta)
    count = int(np.prod([x.shape[a] for a in axes]))
    f = float(exp_avg_factor)
    if running_mean is not None:
        running_mean[...] = (1.0 - f) * running_mean.astype(np.float64) + f * mean
    if running_var is not None:
        running_var[...] = (1.0 - f) * running_var.astype(np.float64) + f * var * (count / (count - 1))
    if saved_mean is not None:
        saved_mean[...] = mean
    if saved_inv_var is not None:
        saved_inv_var[...] = inv_std


def batch_norm_forward_inference(x, z, y, scale, bias, mean, var, mode, epsilon, bn_ops, alpha, beta):
    """y = alpha * (scale * (x - mean) / sqrt(var + epsilon) + bias) + beta * y."""
    inv_std = 1.0 / np.sqrt(var.astype(np.float64) + epsilon)
    blend(y, _apply(x, z, scale, bias, mean.astype(np.float64), inv_std, bn_ops), alpha, beta)


def batch_norm_backward(x, y, dy, dz, dx, scale, bias, dscale, dbias, saved_mean, saved_inv_var, mode,
                        epsilon, bn_ops, alpha_data, beta_data, alpha_param, beta_param):
    """dx (alpha_data/beta_data), dscale and dbias (alpha_param/beta_param); with the
    *Ex ops, the relu's gradient mask comes from y > 0 and dz receives the gradient
    of the added z. Missing saved statistics are recomputed from x."""
    axes = reduce_axes(x.ndim, mode)
    dt = acc_dtype(x.dtype)
    count = int(np.prod([x.shape[a] for a in axes]))
    if saved_mean is None or saved_inv_var is None:
        mean, var = channel_stats(x, axes)
        inv_std = 1.0 / np.sqrt(var + epsilon)
    else:
        mean = saved_mean.astype(np.float64)
        inv_std = saved_inv_var.astype(np.float64)
    g = dy.astype(dt, copy=True)
    if int(bn_ops) != NORM:
        g[~(y > 0)] = 0
    if int(bn_ops) == NORM_ADD_ACTIVATION and dz is not None:
        blend(dz, g.copy(), alpha_data, beta_data)
    xhat = (x.astype(dt) - mean.astype(dt)) * inv_std.astype(dt)
    sum_g = np.sum(g, axis=axes, dtype=np.float64, keepdims=True)
    sum_gx = np.sum(g * xhat, axis=axes, dtype=np.float64, keepdims=True)
    k = (scale.astype(np.float64) * inv_std).astype(dt)
    # dx = scale * inv_std * (g - mean(g) - xhat * mean(g * xhat))
    xhat *= (sum_gx / count).astype(dt)
    g -= (sum_g / count).astype(dt)
    g -= xhat
    g *= k
    blend(dx, g, alpha_data, beta_data)
    blend(dscale, sum_gx.reshape(dscale.shape).astype(acc_dtype(dscale.dtype)), alpha_param, beta_param)
    blend(dbias, sum_g.reshape(dbias.shape).astype(acc_dtype(dbias.dtype)), alpha_param, beta_param)
