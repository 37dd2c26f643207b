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

from .layer_utils import acc_dtype, batch_channel_chunks, blend, run_blocks, scratch_like

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
    if _fast(x, mode):
        mean, var = _blocked_stats(x)
        inv_std = 1.0 / np.sqrt(var + epsilon)
        _blocked_apply(x, z, y, scale, bias, mean, inv_std, bn_ops, alpha, beta)
    else:
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
    if _fast(x, mode):
        _blocked_apply(x, z, y, scale, bias, mean.astype(np.float64), inv_std, bn_ops, alpha, beta)
    else:
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
        mean, var = _blocked_stats(x) if _fast(x, mode) else channel_stats(x, axes)
        inv_std = 1.0 / np.sqrt(var + epsilon)
    else:
        mean = saved_mean.astype(np.float64)
        inv_std = saved_inv_var.astype(np.float64)
    if _fast(x, mode):
        _blocked_backward(x, y, dy, dz, dx, scale, dscale, dbias, mean, inv_std, count, bn_ops,
                          alpha_data, beta_data, alpha_param, beta_param)
        return
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


# -- the SPATIAL fast path: cache-sized blocks, per-channel sums as BLAS products ----------
def _fast(x, mode) -> bool:
    return int(mode) != PER_ACTIVATION and x.dtype in (np.float32, np.float64) and x.ndim >= 3


def _channel_vector(v, ndim, dtype, cb=slice(None)):
    return np.asarray(v, np.float64).reshape(-1)[cb].astype(dtype).reshape((1, -1) + (1,) * (ndim - 2))


def _channel_sums(a, b=None):
    """Per-channel sum of a (or of a * b) over every axis but 1, float64. Packed NCHW and
    NHWC blocks reduce as 2-D matrices (row dot products, column sums); other strides
    take a plain NumPy sum."""
    nb, cb = a.shape[:2]
    rows = _as_matrix(a)
    other = None if b is None else _as_matrix(b)
    if rows is not None and (b is None or (other is not None and other[1] == rows[1])):
        m, channels_last = rows
        # no BLAS here: its threads spin badly on a loaded machine, and these are memory bound
        if b is None:
            sums = m.sum(axis=0) if channels_last else np.vecdot(m, np.ones(m.shape[-1], m.dtype))
        else:
            sums = np.einsum("ij,ij->j", m, other[0]) if channels_last else np.vecdot(m, other[0])
        sums = np.asarray(sums, np.float64)
        return sums if channels_last else sums.reshape(nb, cb).sum(axis=0)
    axes = (0,) + tuple(range(2, a.ndim))
    return np.sum(a if b is None else a * b, axis=axes, dtype=np.float64)


def _as_matrix(v):
    """(matrix, channels_last): (N*C, spatial) rows for packed channel-outer blocks, (N*spatial, C)
    for packed channels-last ones; None when the strides allow neither without a copy."""
    item = v.itemsize
    nb, cb = v.shape[:2]
    spatial = int(np.prod(v.shape[2:]))
    s = v.strides
    # channel-outer: every (n, c) plane contiguous, planes evenly spaced
    plane = _packed_spatial(v, item)
    if plane is not None and (cb == 1 or s[1] == plane) and (nb == 1 or s[0] == plane * cb):
        return np.lib.stride_tricks.as_strided(v, (nb * cb, spatial), (plane, item)), False
    # channels-last: channels contiguous, then the spatial dims packed, then images
    if s[1] == item:
        step = _packed_spatial(v, item * cb)
        if step is not None and (nb == 1 or s[0] == step):
            return np.lib.stride_tricks.as_strided(v, (nb * spatial, cb), (item * cb, item)), True
    return None


def _packed_spatial(v, step):
    """The bytes spanned by v's spatial dims (2..) when they are packed innermost first
    with the last one ``step`` bytes apart (size-1 dims may have any stride); else None."""
    for d in range(v.ndim - 1, 1, -1):
        if v.shape[d] > 1 and v.strides[d] != step:
            return None
        step *= v.shape[d]
    return step


def _blocked_stats(x):
    """(mean, biased var) per channel, float64 (1, C, 1, ...), from sums of x - shift, where
    the shift is each channel's first value (keeps float32 sums free of cancellation)."""
    dt = x.dtype
    c = x.shape[1]
    shift = x[(0, slice(None)) + (0,) * (x.ndim - 2)].astype(np.float64)
    s1 = np.zeros(c)
    s2 = np.zeros(c)
    count = x.size // c
    for nb, cb in batch_channel_chunks(x, min_channels=64):
        block = x[nb, cb]
        d = scratch_like("bn.d", block)
        np.subtract(block, _channel_vector(shift, x.ndim, dt, cb), out=d)
        s1[cb] += _channel_sums(d)
        s2[cb] += _channel_sums(d, d)
    mean_shifted = s1 / count
    var = np.maximum(s2 / count - mean_shifted ** 2, 0.0)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return (shift + mean_shifted).reshape(shape), var.reshape(shape)


def _blocked_apply(x, z, y, scale, bias, mean, inv_std, bn_ops, alpha, beta):
    """y = alpha * act(a * x + b [+ z]) + beta * y block by block, a = scale * inv_std."""
    dt = x.dtype
    a64 = scale.astype(np.float64).reshape(-1) * inv_std.reshape(-1)
    b64 = bias.astype(np.float64).reshape(-1) - mean.reshape(-1) * a64
    direct = alpha == 1.0 and beta == 0.0 and y.dtype == dt
    for nb, cb in batch_channel_chunks(x, min_channels=64):
        xb, yb = x[nb, cb], y[nb, cb]
        out = yb if direct else scratch_like("bn.out", xb)
        np.multiply(xb, _channel_vector(a64, x.ndim, dt, cb), out=out)
        out += _channel_vector(b64, x.ndim, dt, cb)
        if int(bn_ops) == NORM_ADD_ACTIVATION:
            out += z[nb, cb]
        if int(bn_ops) != NORM:
            np.maximum(out, 0, out=out)
        if not direct:
            blend(yb, out, alpha, beta)


def _blocked_backward(x, y, dy, dz, dx, scale, dscale, dbias, mean, inv_std, count, bn_ops,
                      alpha_data, beta_data, alpha_param, beta_param):
    """Two blocked passes, the blocks spread over the worker threads: per-channel sums of
    g and g * (x - mean), then dx = coef_g * g + coef_x * x + const (four NumPy passes per
    block), where with k = scale * inv: coef_g = k, coef_x = -k * inv^2 * mean(g * (x - mean))
    and const = -k * mean(g) - coef_x * mean."""
    dt = x.dtype
    c = x.shape[1]
    fused = int(bn_ops) != NORM
    mean_v, inv = mean.reshape(-1), inv_std.reshape(-1)
    blocks = list(batch_channel_chunks(x, min_channels=64))

    def gradient(nb, cb):
        return _masked_gradient(dy[nb, cb], y[nb, cb] if fused else None, dt)

    def block_sums(block):
        nb, cb = block
        g = gradient(nb, cb)
        if int(bn_ops) == NORM_ADD_ACTIVATION and dz is not None:
            blend(dz[nb, cb], g.copy(), alpha_data, beta_data)
        d = np.subtract(x[nb, cb], _channel_vector(mean_v, x.ndim, dt, cb), out=scratch_like("bn.d", g, dt))
        return cb, _channel_sums(g), _channel_sums(g, d)

    sum_g = np.zeros(c)
    sum_gd = np.zeros(c)
    for cb, part_g, part_gd in run_blocks(block_sums, blocks):   # combined in block order
        sum_g[cb] += part_g
        sum_gd[cb] += part_gd
    k = scale.astype(np.float64).reshape(-1) * inv
    coef_g = k
    coef_x = -k * inv * inv * sum_gd / count
    const = -k * sum_g / count - coef_x * mean_v
    direct = alpha_data == 1.0 and beta_data == 0.0 and dx.dtype == dt

    def block_dx(block):
        nb, cb = block
        g = gradient(nb, cb)
        x_term = np.multiply(x[nb, cb], _channel_vector(coef_x, x.ndim, dt, cb), out=scratch_like("bn.d", g, dt))
        out = dx[nb, cb] if direct else scratch_like("bn.out", g, dt)   # dx may be x or dy itself
        np.multiply(g, _channel_vector(coef_g, x.ndim, dt, cb), out=out)
        out += x_term
        out += _channel_vector(const, x.ndim, dt, cb)
        if not direct:
            blend(dx[nb, cb], out, alpha_data, beta_data)

    run_blocks(block_dx, blocks)
    shape = dscale.shape
    blend(dscale, (sum_gd * inv).reshape(shape).astype(acc_dtype(dscale.dtype)), alpha_param, beta_param)
    blend(dbias, sum_g.reshape(shape).astype(acc_dtype(dbias.dtype)), alpha_param, beta_param)


def _masked_gradient(dy, y, dt):
    """dy in the compute dtype, zeroed where the fused relu's output y was not positive."""
    g = dy if dy.dtype == dt else dy.astype(dt)
    if y is not None:
        g = np.multiply(g, y > 0, out=scratch_like("bn.g", dy, dt))
    return g
