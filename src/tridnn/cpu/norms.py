"""Layer, group and RMS normalization in NumPy (tridnn extensions beside batch norm).

Each normalizes groups of elements of one sample: layer and RMS norm the trailing
``norm_ndim`` dims (scale and bias shaped like those dims), group norm the channels of
each of ``groups`` channel groups with their spatial dims (scale and bias per channel).
Statistics are summed in float64 and saved per sample (per sample and group) for the
backward; the normalization runs in float32 (float64 for float64 data).
"""
from __future__ import annotations

import numpy as np

from .layer_utils import acc_dtype, blend


def _trailing(ndim, norm_ndim):
    return tuple(range(ndim - norm_ndim, ndim))


def _stats(v, axes, epsilon, center=True):
    count = np.prod([v.shape[a] for a in axes])
    mean = np.sum(v, axis=axes, dtype=np.float64, keepdims=True) / count if center else 0.0
    centered = v - np.asarray(mean).astype(v.dtype) if center else v
    var = np.sum(np.square(centered, dtype=np.float64), axis=axes, keepdims=True) / count
    return mean, 1.0 / np.sqrt(var + epsilon)


def _normalized_backward(xhat, g, inv_std, axes):
    """dx for xhat = (x - mean) * inv_std given g = dL/dxhat (all in the compute dtype)."""
    count = np.prod([xhat.shape[a] for a in axes])
    mean_g = np.sum(g, axis=axes, dtype=np.float64, keepdims=True) / count
    mean_gx = np.sum(g * xhat, axis=axes, dtype=np.float64, keepdims=True) / count
    return (g - mean_g.astype(g.dtype) - xhat * mean_gx.astype(g.dtype)) * inv_std.astype(g.dtype)


def _save(dst, value):
    if dst is not None:
        dst[...] = value.reshape(dst.shape)


# -- layer norm ---------------------------------------------------------------------------
def layer_norm_forward(x, y, scale, bias, mean, inv_std, norm_ndim, epsilon, alpha, beta):
    dt = acc_dtype(y.dtype)
    axes = _trailing(x.ndim, norm_ndim)
    xw = x.astype(dt)
    mu, inv = _stats(xw, axes, epsilon)
    out = (xw - mu.astype(dt)) * inv.astype(dt)
    out *= scale.astype(dt)
    out += bias.astype(dt)
    blend(y, out, alpha, beta)
    _save(mean, mu)
    _save(inv_std, inv)


def layer_norm_backward(x, dy, dx, scale, dscale, dbias, mean, inv_std, norm_ndim, alpha, beta):
    """dx (blended with alpha/beta); dscale and dbias are overwritten."""
    dt = acc_dtype(dx.dtype)
    axes = _trailing(x.ndim, norm_ndim)
    lead = tuple(range(x.ndim - norm_ndim))
    keep = x.shape[:x.ndim - norm_ndim] + (1,) * norm_ndim
    mu = mean.astype(np.float64).reshape(keep)
    inv = inv_std.astype(np.float64).reshape(keep)
    xhat = (x.astype(dt) - mu.astype(dt)) * inv.astype(dt)
    g = dy.astype(dt)
    dscale[...] = np.sum(g * xhat, axis=lead, dtype=np.float64)
    dbias[...] = np.sum(g, axis=lead, dtype=np.float64)
    blend(dx, _normalized_backward(xhat, g * scale.astype(dt), inv, axes), alpha, beta)


# -- group norm ---------------------------------------------------------------------------
def _grouped(a, groups, dt):
    """(N, C, *S) -> a contiguous (N, groups, C/groups * prod(S)) copy in the compute dtype."""
    return np.ascontiguousarray(a, dtype=dt).reshape(a.shape[0], groups, -1)


def _per_channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def group_norm_forward(x, y, scale, bias, mean, inv_std, groups, epsilon, alpha, beta):
    dt = acc_dtype(y.dtype)
    xg = _grouped(x, groups, dt)
    mu, inv = _stats(xg, (2,), epsilon)
    out = ((xg - mu.astype(dt)) * inv.astype(dt)).reshape(x.shape)
    out *= _per_channel(scale.astype(dt), x.ndim)
    out += _per_channel(bias.astype(dt), x.ndim)
    blend(y, out, alpha, beta)
    _save(mean, mu)
    _save(inv_std, inv)


def group_norm_backward(x, dy, dx, scale, dscale, dbias, mean, inv_std, groups, alpha, beta):
    dt = acc_dtype(dx.dtype)
    n = x.shape[0]
    mu = mean.astype(np.float64).reshape(n, groups, 1)
    inv = inv_std.astype(np.float64).reshape(n, groups, 1)
    xhat = (_grouped(x, groups, dt) - mu.astype(dt)) * inv.astype(dt)
    g = np.ascontiguousarray(dy, dtype=dt)
    other = (0,) + tuple(range(2, x.ndim))
    dscale[...] = np.sum(g * xhat.reshape(x.shape), axis=other, dtype=np.float64)
    dbias[...] = np.sum(g, axis=other, dtype=np.float64)
    gs = (g * _per_channel(scale.astype(dt), x.ndim)).reshape(n, groups, -1)
    blend(dx, _normalized_backward(xhat, gs, inv, (2,)).reshape(x.shape), alpha, beta)


# -- RMS norm -----------------------------------------------------------------------------
def rms_norm_forward(x, y, scale, inv_rms, norm_ndim, epsilon, alpha, beta):
    dt = acc_dtype(y.dtype)
    axes = _trailing(x.ndim, norm_ndim)
    xw = x.astype(dt)
    _, inv = _stats(xw, axes, epsilon, center=False)
    out = xw * inv.astype(dt)
    out *= scale.astype(dt)
    blend(y, out, alpha, beta)
    _save(inv_rms, inv)


def rms_norm_backward(x, dy, dx, scale, dscale, inv_rms, norm_ndim, alpha, beta):
    """dx = inv * (g - x * inv^2 * mean(g * x)) with g = dy * scale; dscale overwritten."""
    dt = acc_dtype(dx.dtype)
    axes = _trailing(x.ndim, norm_ndim)
    lead = tuple(range(x.ndim - norm_ndim))
    inv = inv_rms.astype(np.float64).reshape(x.shape[:x.ndim - norm_ndim] + (1,) * norm_ndim)
    xw = x.astype(dt)
    g = dy.astype(dt)
    xhat = xw * inv.astype(dt)
    dscale[...] = np.sum(g * xhat, axis=lead, dtype=np.float64)
    gs = g * scale.astype(dt)
    count = np.prod([x.shape[a] for a in axes])
    mean_gx = np.sum(gs * xhat, axis=axes, dtype=np.float64, keepdims=True) / count
    blend(dx, (gs - xhat * mean_gx.astype(dt)) * inv.astype(dt), alpha, beta)
