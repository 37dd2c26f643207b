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
