"""Batch normalization in cuDNN's calling model (cudnnBatchNormalizationForwardTraining,
ForwardInference, Backward and their *Ex forms), plus layer, group and RMS norm.

The scale/bias/mean/variance descriptor must be the one derive_bn_tensor_descriptor
gives for x (its dims and dtype); statistics and parameters are float32 for float32,
float16 and bfloat16 data, float64 for float64 data.
"""
from __future__ import annotations

from ..descriptors.activation import ActivationDescriptor, ActivationMode
from ..descriptors.normalization import (BatchNormOps, batch_norm_mode, batch_norm_ops, check_derived,
                                         check_epsilon, group_norm_dims, norm_param_dims)
from ..descriptors.normalization import derive_bn_tensor_descriptor  # noqa: F401  (re-exported)
from ..errors import BadParamError, NotSupportedError, check_finite_scalar
from .layer_common import backend_module, is_empty, same_dims, scalars, views


def _check_bn(x_desc, mode, bn_desc, bn_ops=BatchNormOps.NORM, activation_desc=None, z_desc=None):
    mode = batch_norm_mode(mode)
    bn_ops = batch_norm_ops(bn_ops)
    check_derived(bn_desc, x_desc, mode, "bn_scale_bias_mean_var_desc")
    if bn_ops != BatchNormOps.NORM:
        if not isinstance(activation_desc, ActivationDescriptor):
            raise BadParamError(f"bn_ops {bn_ops.name} needs an ActivationDescriptor, got {activation_desc!r}")
        if activation_desc.mode != ActivationMode.RELU:
            raise NotSupportedError(f"batch norm *Ex fuses only RELU, not {activation_desc.mode.name}")
    if bn_ops == BatchNormOps.NORM_ADD_ACTIVATION:
        if z_desc is None:
            raise BadParamError("bn_ops NORM_ADD_ACTIVATION needs z_desc and z")
        same_dims(x_desc, z_desc, "x", "z")
    return mode, bn_ops


def _check_training_count(x_desc, mode):
    count = x_desc.n if mode == 0 else x_desc.size // max(x_desc.c, 1)
    if count <= 1:
        raise BadParamError(f"batch norm training needs more than one value per channel to estimate a "
                            f"variance; x dims {x_desc.dims} give {count} (N * spatial for SPATIAL, N for "
                            f"PER_ACTIVATION)")


def batch_norm_forward_training_ex(handle, mode, bn_ops, alpha, beta, x_desc, x, z_desc, z, y_desc, y,
                                   bn_desc, bn_scale, bn_bias, exponential_average_factor,
                                   result_running_mean, result_running_variance, epsilon,
                                   result_save_mean, result_save_inv_variance, activation_desc=None,
                                   workspace=None, reserve_space=None):
    """cudnnBatchNormalizationForwardTrainingEx: y = alpha * act(bn(x) [+ z]) + beta * y.
    The NumPy version needs no workspace or reserve space (their sizes are 0)."""
    mode, bn_ops = _check_bn(x_desc, mode, bn_desc, bn_ops, activation_desc, z_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    factor = check_finite_scalar("exponential_average_factor", exponential_average_factor)
    if not 0.0 <= factor <= 1.0:
        raise BadParamError(f"exponential_average_factor must be in [0, 1], got {factor}")
    epsilon = check_epsilon(epsilon)
    same_dims(x_desc, y_desc, "x", "y")
    _check_training_count(x_desc, mode)
    if (result_running_mean is None) != (result_running_variance is None):
        raise BadParamError("pass both running mean and running variance, or neither")
    if (result_save_mean is None) != (result_save_inv_variance is None):
        raise BadParamError("pass both saved mean and saved inverse variance, or neither")
    use_z = bn_ops == BatchNormOps.NORM_ADD_ACTIVATION
    xv, zv, sv, bv, yv, rmv, rvv, smv, siv = views(
        handle, [(x, x_desc, "x"), (z if use_z else None, z_desc, "z"), (bn_scale, bn_desc, "bn_scale"),
                 (bn_bias, bn_desc, "bn_bias")],
        [(y, y_desc, "y"), (result_running_mean, bn_desc, "result_running_mean"),
         (result_running_variance, bn_desc, "result_running_variance"),
         (result_save_mean, bn_desc, "result_save_mean"),
         (result_save_inv_variance, bn_desc, "result_save_inv_variance")])
    if not is_empty(xv):
        backend_module(handle, "batchnorm").batch_norm_forward_training(
            x=xv, z=zv, y=yv, scale=sv, bias=bv, running_mean=rmv, running_var=rvv, saved_mean=smv,
            saved_inv_var=siv, mode=int(mode), exp_avg_factor=factor, epsilon=epsilon, bn_ops=int(bn_ops),
            alpha=alpha, beta=beta)
    return y


def batch_norm_forward_training(handle, mode, alpha, beta, x_desc, x, y_desc, y, bn_desc, bn_scale, bn_bias,
                                exponential_average_factor, result_running_mean, result_running_variance,
                                epsilon, result_save_mean=None, result_save_inv_variance=None):
    """cudnnBatchNormalizationForwardTraining."""
    return batch_norm_forward_training_ex(
        handle, mode, BatchNormOps.NORM, alpha, beta, x_desc, x, None, None, y_desc, y, bn_desc, bn_scale,
        bn_bias, exponential_average_factor, result_running_mean, result_running_variance, epsilon,
        result_save_mean, result_save_inv_variance)


def batch_norm_forward_inference_ex(handle, mode, bn_ops, alpha, beta, x_desc, x, z_desc, z, y_desc, y,
                                    bn_desc, bn_scale, bn_bias, estimated_mean, estimated_variance, epsilon,
                                    activation_desc=None):
    """Inference with the *Ex fusions (tridnn extension; cuDNN fuses these only in training)."""
    mode, bn_ops = _check_bn(x_desc, mode, bn_desc, bn_ops, activation_desc, z_desc)
    alpha, beta = scalars(alpha=alpha, beta=beta)
    epsilon = check_epsilon(epsilon)
    same_dims(x_desc, y_desc, "x", "y")
    use_z = bn_ops == BatchNormOps.NORM_ADD_ACTIVATION
    xv, zv, sv, bv, mv, vv, yv = views(
        handle, [(x, x_desc, "x"), (z if use_z else None, z_desc, "z"), (bn_scale, bn_desc, "bn_scale"),
                 (bn_bias, bn_desc, "bn_bias"), (estimated_mean, bn_desc, "estimated_mean"),
                 (estimated_variance, bn_desc, "estimated_variance")],
        [(y, y_desc, "y")])
    if not is_empty(xv):
        backend_module(handle, "batchnorm").batch_norm_forward_inference(
            x=xv, z=zv, y=yv, scale=sv, bias=bv, mean=mv, var=vv, mode=int(mode), epsilon=epsilon,
            bn_ops=int(bn_ops), alpha=alpha, beta=beta)
    return y


def batch_norm_forward_inference(handle, mode, alpha, beta, x_desc, x, y_desc, y, bn_desc, bn_scale, bn_bias,
                                 estimated_mean, estimated_variance, epsilon):
    """cudnnBatchNormalizationForwardInference."""
    return batch_norm_forward_inference_ex(handle, mode, BatchNormOps.NORM, alpha, beta, x_desc, x, None, None,
                                           y_desc, y, bn_desc, bn_scale, bn_bias, estimated_mean,
                                           estimated_variance, epsilon)


def batch_norm_backward_ex(handle, mode, bn_ops, alpha_data_diff, beta_data_diff, alpha_param_diff,
                           beta_param_diff, x_desc, x, y_desc, y, dy_desc, dy, dz_desc, dz, dx_desc, dx,
                           bn_desc, bn_scale, bn_bias, result_bn_scale_diff, result_bn_bias_diff, epsilon,
                           saved_mean=None, saved_inv_variance=None, activation_desc=None, workspace=None,
                           reserve_space=None):
    """cudnnBatchNormalizationBackwardEx: dx and dz with alpha/beta_data_diff, dscale and dbias
    with alpha/beta_param_diff. y (the forward output) is needed for the relu of the *Ex ops."""
    mode, bn_ops = _check_bn(x_desc, mode, bn_desc, bn_ops, activation_desc, dz_desc)
    alpha_d, beta_d, alpha_p, beta_p = scalars(alpha_data_diff=alpha_data_diff, beta_data_diff=beta_data_diff,
                                               alpha_param_diff=alpha_param_diff, beta_param_diff=beta_param_diff)
    epsilon = check_epsilon(epsilon)
    same_dims(x_desc, dy_desc, "x", "dy")
    same_dims(x_desc, dx_desc, "x", "dx")
    _check_training_count(x_desc, mode)
    if (saved_mean is None) != (saved_inv_variance is None):
        raise BadParamError("pass both saved mean and saved inverse variance, or neither")
    fused = bn_ops != BatchNormOps.NORM
    if fused:
        if y_desc is None or y is None:
            raise BadParamError(f"bn_ops {bn_ops.name} needs y (the forward output) for the relu's gradient")
        same_dims(x_desc, y_desc, "x", "y")
    use_z = bn_ops == BatchNormOps.NORM_ADD_ACTIVATION
    xv, yv, dyv, sv, bv, smv, siv, dxv, dzv, dsv, dbv = views(
        handle, [(x, x_desc, "x"), (y if fused else None, y_desc, "y"), (dy, dy_desc, "dy"),
                 (bn_scale, bn_desc, "bn_scale"), (bn_bias, bn_desc, "bn_bias"),
                 (saved_mean, bn_desc, "saved_mean"), (saved_inv_variance, bn_desc, "saved_inv_variance")],
        [(dx, dx_desc, "dx"), (dz if use_z else None, dz_desc, "dz"),
         (result_bn_scale_diff, bn_desc, "result_bn_scale_diff"),
         (result_bn_bias_diff, bn_desc, "result_bn_bias_diff")])
    if not is_empty(xv):
        backend_module(handle, "batchnorm").batch_norm_backward(
            x=xv, y=yv, dy=dyv, dz=dzv, dx=dxv, scale=sv, bias=bv, dscale=dsv, dbias=dbv, saved_mean=smv,
            saved_inv_var=siv, mode=int(mode), epsilon=epsilon, bn_ops=int(bn_ops), alpha_data=alpha_d,
            beta_data=beta_d, alpha_param=alpha_p, beta_param=beta_p)
    return dx


def batch_norm_backward(handle, mode, alpha_data_diff, beta_data_diff, alpha_param_diff, beta_param_diff,
                        x_desc, x, dy_desc, dy, dx_desc, dx, bn_desc, bn_scale, result_bn_scale_diff,
                        result_bn_bias_diff, epsilon, saved_mean=None, saved_inv_variance=None):
    """cudnnBatchNormalizationBackward."""
    return batch_norm_backward_ex(handle, mode, BatchNormOps.NORM, alpha_data_diff, beta_data_diff,
                                  alpha_param_diff, beta_param_diff, x_desc, x, None, None, dy_desc, dy, None,
                                  None, dx_desc, dx, bn_desc, bn_scale, None, result_bn_scale_diff,
                                  result_bn_bias_diff, epsilon, saved_mean, saved_inv_variance)


def get_batch_norm_forward_training_ex_workspace_size(handle, mode, bn_ops, x_desc, z_desc, y_desc, bn_desc,
                                                      activation_desc=None) -> int:
    """The NumPy and Triton batch norms keep no temporaries in a workspace: 0 bytes."""
    _check_bn(x_desc, mode, bn_desc, bn_ops, activation_desc, z_desc)
    return 0


def get_batch_norm_backward_ex_workspace_size(handle, mode, bn_ops, x_desc, y_desc, dy_desc, dz_desc, dx_desc,
                                              bn_desc, activation_desc=None) -> int:
    _check_bn(x_desc, mode, bn_desc, bn_ops, activation_desc, dz_desc)
    return 0


def get_batch_norm_training_ex_reserve_space_size(handle, mode, bn_ops, activation_desc, x_desc) -> int:
    """The relu mask is recomputed from y in the backward, so nothing is reserved: 0 bytes."""
    batch_norm_mode(mode)
    batch_norm_ops(bn_ops)
    return 0


# -- layer, group and RMS norm (tridnn extensions) -----------------------------------------
def _param_descs(x_desc, param_dims, stats_dims):
    from ..descriptors.normalization import param_dtype
    from ..descriptors.tensor import TensorDescriptor
    dt = param_dtype(x_desc.dtype)
    return TensorDescriptor.packed(param_dims, dt), TensorDescriptor.packed(stats_dims, dt)


def layer_norm_descriptors(x_desc, norm_ndim):
    """(scale/bias descriptor: the trailing norm_ndim dims; statistics descriptor: the leading dims)."""
    return _param_descs(x_desc, *norm_param_dims(x_desc, norm_ndim))


def group_norm_descriptors(x_desc, groups):
    """(scale/bias descriptor: (C,); statistics descriptor: (N, groups))."""
    return _param_descs(x_desc, *group_norm_dims(x_desc, groups))


def rms_norm_descriptors(x_desc, norm_ndim):
    return layer_norm_descriptors(x_desc, norm_ndim)


def _check_param(desc, want, name):
    if desc is None:
        raise BadParamError(f"{name} was given without its descriptor")
    if desc.dims != want.dims or desc.dtype != want.dtype:
        raise BadParamError(f"{name} descriptor (dims {desc.dims}, {desc.dtype.name}) must have dims {want.dims} "
                            f"and dtype {want.dtype.name}; use the *_norm_descriptors helpers")


def _norm_call(handle, fn, alpha, beta, data, params, stats, extra):
    """Common validation: data = [(array, desc, name, is_output)], params/stats likewise
    against the expected descriptors (each entry (array, desc, want, name, is_output))."""
    alpha, beta = scalars(alpha=alpha, beta=beta)
    ins, outs, names_in, names_out = [], [], [], []
    for array, desc, want, name, is_out in params + stats:
        if array is not None:
            _check_param(desc, want, name)
        (outs if is_out else ins).append((array, desc, name))
        (names_out if is_out else names_in).append(name)
    for array, desc, name, is_out in data:
        (outs if is_out else ins).append((array, desc, name))
        (names_out if is_out else names_in).append(name)
    kwargs = dict(zip(names_in + names_out, views(handle, ins, outs)))
    if not is_empty(*[kwargs[n] for _, _, n, _ in data]):
        getattr(backend_module(handle, "norms"), fn)(alpha=alpha, beta=beta, **kwargs, **extra)


def layer_norm_forward(handle, norm_ndim, alpha, x_desc, x, beta, y_desc, y, param_desc, scale, bias, epsilon,
                       stats_desc=None, result_mean=None, result_inv_std=None):
    """y = alpha * ((x - mean) * inv_std * scale + bias) + beta * y over the trailing norm_ndim dims."""
    want_p, want_s = layer_norm_descriptors(x_desc, norm_ndim)
    epsilon = _check_eps(epsilon)
    same_dims(x_desc, y_desc, "x", "y")
    _norm_call(handle, "layer_norm_forward", alpha, beta,
               [(x, x_desc, "x", False), (y, y_desc, "y", True)],
               [(scale, param_desc, want_p, "scale", False), (bias, param_desc, want_p, "bias", False)],
               [(result_mean, stats_desc, want_s, "mean", True), (result_inv_std, stats_desc, want_s, "inv_std", True)],
               dict(norm_ndim=norm_ndim, epsilon=epsilon))
    return y


def layer_norm_backward(handle, norm_ndim, alpha, x_desc, x, dy_desc, dy, beta, dx_desc, dx, param_desc, scale,
                        result_dscale, result_dbias, stats_desc, saved_mean, saved_inv_std):
    """dx = alpha * dL/dx + beta * dx; dscale and dbias are overwritten. Needs the saved statistics."""
    want_p, want_s = layer_norm_descriptors(x_desc, norm_ndim)
    same_dims(x_desc, dy_desc, "x", "dy")
    same_dims(x_desc, dx_desc, "x", "dx")
    _need(saved_mean, saved_inv_std)
    _norm_call(handle, "layer_norm_backward", alpha, beta,
               [(x, x_desc, "x", False), (dy, dy_desc, "dy", False), (dx, dx_desc, "dx", True)],
               [(scale, param_desc, want_p, "scale", False), (result_dscale, param_desc, want_p, "dscale", True),
                (result_dbias, param_desc, want_p, "dbias", True)],
               [(saved_mean, stats_desc, want_s, "mean", False), (saved_inv_std, stats_desc, want_s, "inv_std", False)],
               dict(norm_ndim=norm_ndim))
    return dx


def group_norm_forward(handle, groups, alpha, x_desc, x, beta, y_desc, y, param_desc, scale, bias, epsilon,
                       stats_desc=None, result_mean=None, result_inv_std=None):
    """Group norm: statistics per sample over each group of C/groups channels and all positions."""
    want_p, want_s = group_norm_descriptors(x_desc, groups)
    epsilon = _check_eps(epsilon)
    same_dims(x_desc, y_desc, "x", "y")
    _norm_call(handle, "group_norm_forward", alpha, beta,
               [(x, x_desc, "x", False), (y, y_desc, "y", True)],
               [(scale, param_desc, want_p, "scale", False), (bias, param_desc, want_p, "bias", False)],
               [(result_mean, stats_desc, want_s, "mean", True), (result_inv_std, stats_desc, want_s, "inv_std", True)],
               dict(groups=groups, epsilon=epsilon))
    return y


def group_norm_backward(handle, groups, alpha, x_desc, x, dy_desc, dy, beta, dx_desc, dx, param_desc, scale,
                        result_dscale, result_dbias, stats_desc, saved_mean, saved_inv_std):
    want_p, want_s = group_norm_descriptors(x_desc, groups)
    same_dims(x_desc, dy_desc, "x", "dy")
    same_dims(x_desc, dx_desc, "x", "dx")
    _need(saved_mean, saved_inv_std)
    _norm_call(handle, "group_norm_backward", alpha, beta,
               [(x, x_desc, "x", False), (dy, dy_desc, "dy", False), (dx, dx_desc, "dx", True)],
               [(scale, param_desc, want_p, "scale", False), (result_dscale, param_desc, want_p, "dscale", True),
                (result_dbias, param_desc, want_p, "dbias", True)],
               [(saved_mean, stats_desc, want_s, "mean", False), (saved_inv_std, stats_desc, want_s, "inv_std", False)],
               dict(groups=groups))
    return dx


def rms_norm_forward(handle, norm_ndim, alpha, x_desc, x, beta, y_desc, y, param_desc, scale, epsilon,
                     stats_desc=None, result_inv_rms=None):
    """y = alpha * x / sqrt(mean(x^2) + epsilon) * scale + beta * y over the trailing norm_ndim dims."""
    want_p, want_s = rms_norm_descriptors(x_desc, norm_ndim)
    epsilon = _check_eps(epsilon)
    same_dims(x_desc, y_desc, "x", "y")
    _norm_call(handle, "rms_norm_forward", alpha, beta,
               [(x, x_desc, "x", False), (y, y_desc, "y", True)],
               [(scale, param_desc, want_p, "scale", False)],
               [(result_inv_rms, stats_desc, want_s, "inv_rms", True)],
               dict(norm_ndim=norm_ndim, epsilon=epsilon))
    return y


def rms_norm_backward(handle, norm_ndim, alpha, x_desc, x, dy_desc, dy, beta, dx_desc, dx, param_desc, scale,
                      result_dscale, stats_desc, saved_inv_rms):
    want_p, want_s = rms_norm_descriptors(x_desc, norm_ndim)
    same_dims(x_desc, dy_desc, "x", "dy")
    same_dims(x_desc, dx_desc, "x", "dx")
    _need(saved_inv_rms)
    _norm_call(handle, "rms_norm_backward", alpha, beta,
               [(x, x_desc, "x", False), (dy, dy_desc, "dy", False), (dx, dx_desc, "dx", True)],
               [(scale, param_desc, want_p, "scale", False), (result_dscale, param_desc, want_p, "dscale", True)],
               [(saved_inv_rms, stats_desc, want_s, "inv_rms", False)],
               dict(norm_ndim=norm_ndim))
    return dx


def _check_eps(epsilon) -> float:
    eps = check_finite_scalar("epsilon", epsilon)
    if eps <= 0:
        raise BadParamError(f"epsilon must be > 0, got {eps}")
    return eps


def _need(*arrays):
    if any(a is None for a in arrays):
        raise BadParamError("the backward needs the statistics the forward saved (mean/inv_std or inv_rms)")
