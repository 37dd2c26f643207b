"""Batch normalization against the float64 reference: training (with running averages
and saved statistics), inference and backward; SPATIAL and PER_ACTIVATION; every
dtype and layout; the *Ex fusions; alpha/beta for data and parameters; errors."""
import numpy as np
import pytest

import tridnn
from tridnn import BatchNormMode, BatchNormOps
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode
from tridnn.errors import BadParamError, NotSupportedError
from tridnn.reference import normalization as ref

from layer_cases import DTYPES, LAYOUTS, check, handle, normal, numeric_grad, output

MODES = list(BatchNormMode)
RELU = ActivationDescriptor(ActivationMode.RELU)
EPS = 1e-4


def params(x_desc, mode, rng):
    bn = tridnn.derive_bn_tensor_descriptor(x_desc, mode)
    dt = bn.dtype.numpy
    make = lambda lo, hi: rng.uniform(lo, hi, bn.dims).astype(dt)
    return bn, make(0.5, 1.5), make(-0.5, 0.5), make(-0.2, 0.2), make(0.5, 2.0)


def spatial(mode):
    return BatchNormMode(mode).spatial


def run_training(mode, dtype, layout, rng, dims=(3, 4, 3, 5), alpha=1.0, beta=0.0, bn_ops=BatchNormOps.NORM,
                 factor=0.3):
    h = handle()
    x_desc, x = normal(dims, dtype, layout, rng, 2.0)
    bn, scale, bias, rmean, rvar = params(x_desc, mode, rng)
    rmean0, rvar0 = rmean.copy(), rvar.copy()
    z_desc, z = normal(dims, dtype, layout, rng) if bn_ops == BatchNormOps.NORM_ADD_ACTIVATION else (None, None)
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    smean, sinv = np.full(bn.dims, np.nan, bn.dtype.numpy), np.full(bn.dims, np.nan, bn.dtype.numpy)
    act = RELU if bn_ops != BatchNormOps.NORM else None
    tridnn.batch_norm_forward_training_ex(h, mode, bn_ops, alpha, beta, x_desc, x, z_desc, z, y_desc, y, bn,
                                          scale, bias, factor, rmean, rvar, EPS, smean, sinv, act)
    relu = bn_ops != BatchNormOps.NORM
    y_ref, mean, var = ref.batch_norm_train(x, scale, bias, EPS, spatial(mode), z, relu)
    check(y, y_ref, dtype, alpha, beta, prior, name="y")
    m = x.size // mean.size
    check(rmean, (1 - factor) * rmean0 + factor * mean, bn.dtype, name="running mean")
    check(rvar, (1 - factor) * rvar0 + factor * var * m / (m - 1), bn.dtype, name="running var")
    check(smean, mean, bn.dtype, name="saved mean")
    check(sinv, 1 / np.sqrt(var + EPS), bn.dtype, name="saved inv var")
    return h, x_desc, x, bn, scale, bias, smean, sinv, z_desc, z


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_training_forward_and_backward_every_dtype(mode, dtype, rng):
    layout = "NHWC" if dtype in ("float16", "bfloat16") else "NCHW"
    run_backward(mode, dtype, layout, rng)


@pytest.mark.parametrize("mode", [BatchNormMode.SPATIAL, BatchNormMode.PER_ACTIVATION], ids=lambda m: m.name)
@pytest.mark.parametrize("layout", LAYOUTS)
# batch >= 3 everywhere: PER_ACTIVATION over 2 values a channel is ill-conditioned
@pytest.mark.parametrize("dims", [(3, 4, 3, 5), (4, 3, 6), (3, 3, 2, 3, 2)], ids=["2d", "1d", "3d"])
def test_every_layout_and_rank(mode, layout, dims, rng):
    run_backward(mode, "float32", layout, rng, dims)


def run_backward(mode, dtype, layout, rng, dims=(3, 4, 3, 5), alpha_d=1.0, beta_d=0.0, alpha_p=1.0, beta_p=0.0,
                 bn_ops=BatchNormOps.NORM, use_saved=True):
    h, x_desc, x, bn, scale, bias, smean, sinv, z_desc, z = run_training(mode, dtype, layout, rng, dims,
                                                                        bn_ops=bn_ops)
    relu = bn_ops != BatchNormOps.NORM
    y_desc, y = x_desc, None
    if relu:
        y_desc, y, _ = output(dims, dtype, layout, rng, 0.0)
        tridnn.batch_norm_forward_training_ex(h, mode, bn_ops, 1.0, 0.0, x_desc, x, z_desc, z, y_desc, y, bn,
                                              scale, bias, 0.0, None, None, EPS, None, None, RELU)
    dy_desc, dy = normal(dims, dtype, layout, rng)
    dx_desc, dx, dx_prior = output(dims, dtype, layout, rng, beta_d)
    dz_desc, dz, dz_prior = output(dims, dtype, layout, rng, beta_d) if bn_ops == 2 else (None, None, None)
    dscale = rng.standard_normal(bn.dims).astype(bn.dtype.numpy)
    dbias = rng.standard_normal(bn.dims).astype(bn.dtype.numpy)
    ds_prior, db_prior = dscale.astype(np.float64), dbias.astype(np.float64)
    if beta_p == 0:
        dscale[...] = np.nan
        dbias[...] = np.nan
    tridnn.batch_norm_backward_ex(h, mode, bn_ops, alpha_d, beta_d, alpha_p, beta_p, x_desc, x, y_desc, y,
                                  dy_desc, dy, dz_desc, dz, dx_desc, dx, bn, scale, bias, dscale, dbias, EPS,
                                  smean if use_saved else None, sinv if use_saved else None,
                                  RELU if relu else None)
    dx_ref, ds_ref, db_ref, dz_ref = ref.batch_norm_backward(x, dy, scale, EPS, spatial(mode), y, relu)
    slack = {"float16": 4.0, "bfloat16": 4.0}.get(dtype)  # the relu mask and y come from rounded data
    check(dx, dx_ref, dtype, alpha_d, beta_d, dx_prior, name="dx", slack=slack)
    check(dscale, ds_ref, bn.dtype, alpha_p, beta_p, ds_prior, name="dscale",
          slack=None if dtype in ("float32", "float64") else 1e3)
    check(dbias, db_ref, bn.dtype, alpha_p, beta_p, db_prior, name="dbias",
          slack=None if dtype in ("float32", "float64") else 1e3)
    if dz is not None:
        check(dz, dz_ref, dtype, alpha_d, beta_d, dz_prior, name="dz")


@pytest.mark.parametrize("alpha_d,beta_d,alpha_p,beta_p", [(2.0, 0.0, 1.0, 1.0), (0.5, 1.0, -1.0, 0.0),
                                                           (1.0, 0.25, 0.5, 0.5)])
def test_backward_alpha_beta(alpha_d, beta_d, alpha_p, beta_p, rng):
    run_backward(BatchNormMode.SPATIAL, "float64", "NHWC", rng, alpha_d=alpha_d, beta_d=beta_d, alpha_p=alpha_p,
                 beta_p=beta_p)


@pytest.mark.parametrize("alpha,beta", [(2.0, 0.0), (0.5, 1.0)])
def test_forward_alpha_beta(alpha, beta, rng):
    run_training(BatchNormMode.SPATIAL, "float32", "NCHW", rng, alpha=alpha, beta=beta)


def test_backward_without_saved_statistics(rng):
    run_backward(BatchNormMode.SPATIAL, "float32", "NHWC", rng, use_saved=False)


@pytest.mark.parametrize("bn_ops", [BatchNormOps.NORM_ACTIVATION, BatchNormOps.NORM_ADD_ACTIVATION],
                         ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_ex_fused_add_relu(bn_ops, dtype, rng):
    run_backward(BatchNormMode.SPATIAL, dtype, "NHWC" if dtype == "bfloat16" else "NCHW", rng, bn_ops=bn_ops)


@pytest.mark.parametrize("mode", [BatchNormMode.SPATIAL, BatchNormMode.PER_ACTIVATION], ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bn_ops", [BatchNormOps.NORM, BatchNormOps.NORM_ADD_ACTIVATION], ids=lambda o: o.name)
def test_inference(mode, dtype, bn_ops, rng):
    h = handle()
    dims = (2, 3, 4, 3)
    layout = "NHWC" if dtype in ("float16", "bfloat16") else "NCHW"
    x_desc, x = normal(dims, dtype, layout, rng)
    bn, scale, bias, mean, var = params(x_desc, mode, rng)
    y_desc, y, _ = output(dims, dtype, layout, rng, 0.0)
    if bn_ops == BatchNormOps.NORM:
        tridnn.batch_norm_forward_inference(h, mode, 1.0, 0.0, x_desc, x, y_desc, y, bn, scale, bias, mean, var, EPS)
        z = None
    else:
        z_desc, z = normal(dims, dtype, layout, rng)
        tridnn.batch_norm_forward_inference_ex(h, mode, bn_ops, 1.0, 0.0, x_desc, x, z_desc, z, y_desc, y, bn,
                                               scale, bias, mean, var, EPS, RELU)
    check(y, ref.batch_norm_inference(x, scale, bias, mean, var, EPS, z, bn_ops != 0), dtype, name="y")


@pytest.mark.parametrize("is_spatial", [True, False])
def test_reference_backward_matches_finite_differences(is_spatial, rng):
    x = rng.standard_normal((3, 2, 2, 2))
    pshape = (1, 2, 1, 1) if is_spatial else (1, 2, 2, 2)
    scale, bias = rng.uniform(0.5, 1.5, pshape), rng.standard_normal(pshape)
    dy = rng.standard_normal(x.shape)
    dx, dscale, dbias, _ = ref.batch_norm_backward(x, dy, scale, EPS, is_spatial)
    np.testing.assert_allclose(dx, numeric_grad(lambda v: ref.batch_norm_train(v, scale, bias, EPS, is_spatial)[0],
                                                x, dy), atol=1e-6)
    np.testing.assert_allclose(dscale, numeric_grad(
        lambda s: ref.batch_norm_train(x, s, bias, EPS, is_spatial)[0], scale, dy), atol=1e-6)
    np.testing.assert_allclose(dbias, numeric_grad(
        lambda b: ref.batch_norm_train(x, scale, b, EPS, is_spatial)[0], bias, dy), atol=1e-6)


def test_running_variance_is_unbiased_and_factor_one_overwrites(rng):
    h = handle()
    x = np.array([1.0, 2.0, 4.0, 9.0], np.float32).reshape(4, 1, 1, 1)
    d = tridnn.TensorDescriptor.like(x)
    bn = tridnn.derive_bn_tensor_descriptor(d, "spatial")
    rm, rv = np.full(bn.dims, 7.0, np.float32), np.full(bn.dims, 7.0, np.float32)
    y = np.empty_like(x)
    tridnn.batch_norm_forward_training(h, "spatial", 1, 0, d, x, d, y, bn, np.ones(bn.dims, np.float32),
                                       np.zeros(bn.dims, np.float32), 1.0, rm, rv, 1e-5)
    assert rm.item() == 4.0
    assert abs(rv.item() - np.var([1, 2, 4, 9], ddof=1)) < 1e-5


def test_errors_leave_outputs_untouched(rng):
    h = handle()
    x_desc, x = normal((2, 3, 2, 2), "float32", "NCHW", rng)
    bn, scale, bias, rm, rv = params(x_desc, "spatial", rng)
    y = np.full(x.shape, 5.0, np.float32)
    rm0 = rm.copy()
    call = lambda **kw: tridnn.batch_norm_forward_training(
        h, kw.get("mode", "spatial"), 1, 0, kw.get("x_desc", x_desc), kw.get("x", x), kw.get("x_desc", x_desc), y,
        kw.get("bn", bn), scale, bias, kw.get("factor", 0.1), rm, rv, kw.get("eps", 1e-5))
    with pytest.raises(BadParamError, match="CUDNN_BN_MIN_EPSILON"):
        call(eps=1e-6)
    with pytest.raises(BadParamError, match="not derived"):
        call(bn=tridnn.TensorDescriptor((1, 3, 2, 2)))
    with pytest.raises(BadParamError, match="not derived"):
        call(bn=tridnn.TensorDescriptor((1, 3, 1, 1), "float64"))
    with pytest.raises(BadParamError, match="batch norm mode"):
        call(mode=9)
    with pytest.raises(BadParamError, match="exponential_average_factor"):
        call(factor=1.5)
    one = tridnn.TensorDescriptor((1, 3, 1, 1))
    with pytest.raises(BadParamError, match="more than one value per channel"):
        call(x_desc=one, x=np.ones((1, 3, 1, 1), np.float32))
    pa = tridnn.TensorDescriptor((1, 3, 2, 2))
    with pytest.raises(BadParamError, match="more than one value per channel"):
        tridnn.batch_norm_forward_training(h, "per_activation", 1, 0, pa, np.ones((1, 3, 2, 2), np.float32), pa,
                                           y[:1], tridnn.derive_bn_tensor_descriptor(pa, 0), np.ones(pa.dims, np.float32),
                                           np.zeros(pa.dims, np.float32), 0.1, None, None, 1e-5)
    with pytest.raises(NotSupportedError, match="RELU"):
        tridnn.batch_norm_forward_training_ex(h, "spatial", "norm_activation", 1, 0, x_desc, x, None, None, x_desc,
                                              y, bn, scale, bias, 0.1, rm, rv, 1e-5, None, None,
                                              ActivationDescriptor(ActivationMode.TANH))
    with pytest.raises(BadParamError, match="needs z"):
        tridnn.batch_norm_forward_training_ex(h, "spatial", 2, 1, 0, x_desc, x, None, None, x_desc, y, bn, scale,
                                              bias, 0.1, rm, rv, 1e-5, None, None, RELU)
    assert (y == 5).all() and np.array_equal(rm, rm0)
