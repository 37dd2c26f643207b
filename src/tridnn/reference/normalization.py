"""Float64 reference normalizations, written as the textbook formulas.

The backward passes are the analytic gradients; tests also check them against
finite differences of the forward functions here.
"""
from __future__ import annotations

import numpy as np


def _axes(ndim, spatial):
    return (0,) + tuple(range(2, ndim)) if spatial else (0,)


def batch_norm_train(x, scale, bias, eps, spatial=True, z=None, relu=False):
    """(y, batch mean, biased batch variance); scale/bias broadcast like the derived descriptor."""
    x = np.asarray(x, np.float64)
    axes = _axes(x.ndim, spatial)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = np.asarray(scale, np.float64) * (x - mean) / np.sqrt(var + eps) + np.asarray(bias, np.float64)
    if z is not None:
        y = y + np.asarray(z, np.float64)
    if relu:
        y = np.maximum(y, 0)
    return y, mean, var


def batch_norm_inference(x, scale, bias, mean, var, eps, z=None, relu=False):
    x = np.asarray(x, np.float64)
    y = np.asarray(scale, np.float64) * (x - mean) / np.sqrt(np.asarray(var, np.float64) + eps) + bias
    if z is not None:
        y = y + np.asarray(z, np.float64)
    return np.maximum(y, 0) if relu else y


def batch_norm_backward(x, dy, scale, eps, spatial=True, y=None, relu=False):
    """(dx, dscale, dbias, dz) of batch_norm_train (dz is the gradient reaching z)."""
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    if relu:
        dy = np.where(np.asarray(y, np.float64) > 0, dy, 0.0)
    axes = _axes(x.ndim, spatial)
    m = np.prod([x.shape[a] for a in axes])
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    xhat = (x - mean) / np.sqrt(var + eps)
    dbias = dy.sum(axis=axes, keepdims=True)
    dscale = (dy * xhat).sum(axis=axes, keepdims=True)
    dx = np.asarray(scale, np.float64) / np.sqrt(var + eps) / m * (m * dy - dbias - xhat * dscale)
    return dx, dscale, dbias, dy


def layer_norm(x, scale, bias, norm_ndim, eps):
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim - norm_ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * scale + bias
    return y, mean.reshape(x.shape[:x.ndim - norm_ndim]), (1 / np.sqrt(var + eps)).reshape(x.shape[:x.ndim - norm_ndim])


def group_norm(x, scale, bias, groups, eps):
    x = np.asarray(x, np.float64)
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(axis=2, keepdims=True)
    var = ((xg - mean) ** 2).mean(axis=2, keepdims=True)
    xhat = ((xg - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    y = xhat * np.reshape(scale, shape) + np.reshape(bias, shape)
    return y, mean.reshape(n, groups), (1 / np.sqrt(var + eps)).reshape(n, groups)


def rms_norm(x, scale, norm_ndim, eps):
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim - norm_ndim, x.ndim))
    ms = (x ** 2).mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(ms + eps)
    return x * inv * scale, inv.reshape(x.shape[:x.ndim - norm_ndim])


def _norm_backward(xhat, g, inv, axes):
    """dx of xhat = (x - mean) * inv over ``axes`` given g = dL/dxhat."""
    m = np.prod([xhat.shape[a] for a in axes])
    return inv / m * (m * g - g.sum(axis=axes, keepdims=True) - xhat * (g * xhat).sum(axis=axes, keepdims=True))


def layer_norm_backward(x, dy, scale, norm_ndim, eps):
    """(dx, dscale, dbias) of layer_norm."""
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    axes = tuple(range(x.ndim - norm_ndim, x.ndim))
    lead = tuple(range(x.ndim - norm_ndim))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * inv
    dx = _norm_backward(xhat, dy * scale, inv, axes)
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def group_norm_backward(x, dy, scale, groups, eps):
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    n, c = x.shape[:2]
    shape = (1, c) + (1,) * (x.ndim - 2)
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(axis=2, keepdims=True)
    inv = 1 / np.sqrt(((xg - mean) ** 2).mean(axis=2, keepdims=True) + eps)
    xhat = (xg - mean) * inv
    g = (dy * np.reshape(scale, shape)).reshape(n, groups, -1)
    dx = _norm_backward(xhat, g, inv, (2,)).reshape(x.shape)
    other = (0,) + tuple(range(2, x.ndim))
    return dx, (dy * xhat.reshape(x.shape)).sum(axis=other), dy.sum(axis=other)


def rms_norm_backward(x, dy, scale, norm_ndim, eps):
    """(dx, dscale) of rms_norm."""
    x = np.asarray(x, np.float64)
    dy = np.asarray(dy, np.float64)
    axes = tuple(range(x.ndim - norm_ndim, x.ndim))
    lead = tuple(range(x.ndim - norm_ndim))
    m = np.prod([x.shape[a] for a in axes])
    inv = 1 / np.sqrt((x ** 2).mean(axis=axes, keepdims=True) + eps)
    g = dy * scale
    dx = inv * g - x * inv ** 3 * (g * x).sum(axis=axes, keepdims=True) / m
    return dx, (dy * x * inv).sum(axis=lead)
