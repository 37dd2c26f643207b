"""Layer, group and RMS norm (tridnn extensions) against the float64 reference: forward
with saved statistics, backward for data and parameters, every dtype and layout, and the
reference gradients against finite differences."""
import numpy as np
import pytest

from tridnn.api import normalization as norms
from tridnn.errors import BadParamError
from tridnn.reference import normalization as ref

from layer_cases import DTYPES, LAYOUTS, check, handle, normal, numeric_grad, output

EPS = 1e-5
DIMS = (3, 4, 3, 5)


def params(desc, rng, lo=0.5, hi=1.5):
    return rng.uniform(lo, hi, desc.dims).astype(desc.dtype.numpy)


def layout_for(dtype, layout):
    return layout if layout else ("NHWC" if dtype in ("float16", "bfloat16") else "NCHW")


def half_slack(dtype):
    return {"float16": 4.0, "bfloat16": 4.0}.get(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_ndim", [1, 3])
def test_layer_norm(dtype, norm_ndim, rng, layout=None, alpha=1.0, beta=0.0):
    run_layer_norm(dtype, norm_ndim, rng, layout_for(dtype, layout), alpha, beta)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.5, 2.0)])
def test_layer_norm_layouts_alpha_beta(layout, alpha, beta, rng):
    run_layer_norm("float32", 2, rng, layout, alpha, beta)


def run_layer_norm(dtype, norm_ndim, rng, layout, alpha, beta):
    h = handle()
    x_desc, x = normal(DIMS, dtype, layout, rng, 2.0)
    p_desc, s_desc = norms.layer_norm_descriptors(x_desc, norm_ndim)
    scale, bias = params(p_desc, rng), params(p_desc, rng, -0.5, 0.5)
    y_desc, y, prior = output(DIMS, dtype, layout, rng, beta)
    mean, inv = np.full(s_desc.dims, np.nan, s_desc.dtype.numpy), np.full(s_desc.dims, np.nan, s_desc.dtype.numpy)
    norms.layer_norm_forward(h, norm_ndim, alpha, x_desc, x, beta, y_desc, y, p_desc, scale, bias, EPS, s_desc, mean, inv)
    y_ref, mean_ref, inv_ref = ref.layer_norm(x, scale, bias, norm_ndim, EPS)
    check(y, y_ref, dtype, alpha, beta, prior, name="y")
    check(mean, mean_ref, s_desc.dtype, name="mean")
    check(inv, inv_ref, s_desc.dtype, name="inv_std")
    dy_desc, dy = normal(DIMS, dtype, layout, rng)
    dx_desc, dx, prior = output(DIMS, dtype, layout, rng, beta)
    dscale, dbias = np.full_like(scale, np.nan), np.full_like(bias, np.nan)
    norms.layer_norm_backward(h, norm_ndim, alpha, x_desc, x, dy_desc, dy, beta, dx_desc, dx, p_desc, scale, dscale,
                              dbias, s_desc, mean, inv)
    dx_ref, ds_ref, db_ref = ref.layer_norm_backward(x, dy, scale, norm_ndim, EPS)
    check(dx, dx_ref, dtype, alpha, beta, prior, name="dx", slack=half_slack(dtype))
    check(dscale, ds_ref, p_desc.dtype, name="dscale", slack=None if dtype in ("float32", "float64") else 1e3)
    check(dbias, db_ref, p_desc.dtype, name="dbias", slack=None if dtype in ("float32", "float64") else 1e3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_norm(dtype, groups, rng):
    run_group_norm(dtype, groups, rng, layout_for(dtype, None), DIMS)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dims", [(2, 6, 5), (2, 6, 2, 3, 2)], ids=["1d", "3d"])
def test_group_norm_layouts(layout, dims, rng):
    run_group_norm("float32", 3, rng, layout, dims, alpha=2.0, beta=0.5)


def run_group_norm(dtype, groups, rng, layout, dims, alpha=1.0, beta=0.0):
    h = handle()
    x_desc, x = normal(dims, dtype, layout, rng, 2.0)
    p_desc, s_desc = norms.group_norm_descriptors(x_desc, groups)
    scale, bias = params(p_desc, rng), params(p_desc, rng, -0.5, 0.5)
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    mean, inv = np.full(s_desc.dims, np.nan, s_desc.dtype.numpy), np.full(s_desc.dims, np.nan, s_desc.dtype.numpy)
    norms.group_norm_forward(h, groups, alpha, x_desc, x, beta, y_desc, y, p_desc, scale, bias, EPS, s_desc, mean, inv)
    y_ref, mean_ref, inv_ref = ref.group_norm(x, scale, bias, groups, EPS)
    check(y, y_ref, dtype, alpha, beta, prior, name="y")
    check(mean, mean_ref, s_desc.dtype, name="mean")
    check(inv, inv_ref, s_desc.dtype, name="inv_std")
    dy_desc, dy = normal(dims, dtype, layout, rng)
    dx_desc, dx, prior = output(dims, dtype, layout, rng, beta)
    dscale, dbias = np.full_like(scale, np.nan), np.full_like(bias, np.nan)
    norms.group_norm_backward(h, groups, alpha, x_desc, x, dy_desc, dy, beta, dx_desc, dx, p_desc, scale, dscale,
                              dbias, s_desc, mean, inv)
    dx_ref, ds_ref, db_ref = ref.group_norm_backward(x, dy, scale, groups, EPS)
    check(dx, dx_ref, dtype, alpha, beta, prior, name="dx", slack=half_slack(dtype))
    check(dscale, ds_ref, p_desc.dtype, name="dscale", slack=None if dtype in ("float32", "float64") else 1e3)
    check(dbias, db_ref, p_desc.dtype, name="dbias", slack=None if dtype in ("float32", "float64") else 1e3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", [None, "strided"])
def test_rms_norm(dtype, layout, rng):
    h = handle()
    layout = layout_for(dtype, layout)
    x_desc, x = normal(DIMS, dtype, layout, rng, 2.0)
    p_desc, s_desc = norms.rms_norm_descriptors(x_desc, 2)
    scale = params(p_desc, rng)
    y_desc, y, _ = output(DIMS, dtype, layout, rng, 0.0)
    inv = np.empty(s_desc.dims, s_desc.dtype.numpy)
    norms.rms_norm_forward(h, 2, 1.0, x_desc, x, 0.0, y_desc, y, p_desc, scale, EPS, s_desc, inv)
    y_ref, inv_ref = ref.rms_norm(x, scale, 2, EPS)
    check(y, y_ref, dtype, name="y")
    check(inv, inv_ref, s_desc.dtype, name="inv_rms")
    dy_desc, dy = normal(DIMS, dtype, layout, rng)
    dx_desc, dx, prior = output(DIMS, dtype, layout, rng, 1.0)
    dscale = np.empty_like(scale)
    norms.rms_norm_backward(h, 2, 1.0, x_desc, x, dy_desc, dy, 1.0, dx_desc, dx, p_desc, scale, dscale, s_desc, inv)
    dx_ref, ds_ref = ref.rms_norm_backward(x, dy, scale, 2, EPS)
    check(dx, dx_ref, dtype, 1.0, 1.0, prior, name="dx", slack=half_slack(dtype))
    check(dscale, ds_ref, p_desc.dtype, name="dscale", slack=None if dtype in ("float32", "float64") else 1e3)


def test_reference_gradients_match_finite_differences(rng):
    x = rng.standard_normal((2, 4, 3))
    dy = rng.standard_normal(x.shape)
    scale, bias = rng.uniform(0.5, 1.5, (4, 3)), rng.standard_normal((4, 3))
    dx, ds, db = ref.layer_norm_backward(x, dy, scale, 2, EPS)
    np.testing.assert_allclose(dx, numeric_grad(lambda v: ref.layer_norm(v, scale, bias, 2, EPS)[0], x, dy), atol=1e-6)
    np.testing.assert_allclose(ds, numeric_grad(lambda s: ref.layer_norm(x, s, bias, 2, EPS)[0], scale, dy), atol=1e-6)
    np.testing.assert_allclose(db, numeric_grad(lambda b: ref.layer_norm(x, scale, b, 2, EPS)[0], bias, dy), atol=1e-6)
    cs, cb = rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)
    dx, ds, db = ref.group_norm_backward(x, dy, cs, 2, EPS)
    np.testing.assert_allclose(dx, numeric_grad(lambda v: ref.group_norm(v, cs, cb, 2, EPS)[0], x, dy), atol=1e-6)
    np.testing.assert_allclose(ds, numeric_grad(lambda s: ref.group_norm(x, s, cb, 2, EPS)[0], cs, dy), atol=1e-6)
    dx, ds = ref.rms_norm_backward(x, dy, scale, 2, EPS)
    np.testing.assert_allclose(dx, numeric_grad(lambda v: ref.rms_norm(v, scale, 2, EPS)[0], x, dy), atol=1e-6)
    np.testing.assert_allclose(ds, numeric_grad(lambda s: ref.rms_norm(x, s, 2, EPS)[0], scale, dy), atol=1e-6)


def test_errors(rng):
    h = handle()
    x_desc, x = normal(DIMS, "float32", "NCHW", rng)
    y = np.full(DIMS, 3.0, np.float32)
    p_desc, s_desc = norms.layer_norm_descriptors(x_desc, 1)
    with pytest.raises(BadParamError, match="norm_ndim"):
        norms.layer_norm_descriptors(x_desc, 4)
    with pytest.raises(BadParamError, match="groups"):
        norms.group_norm_descriptors(x_desc, 3)
    with pytest.raises(BadParamError, match="must have dims"):
        norms.layer_norm_forward(h, 2, 1, x_desc, x, 0, x_desc, y, p_desc, np.ones(5, np.float32),
                                 np.zeros(5, np.float32), EPS)
    with pytest.raises(BadParamError, match="epsilon"):
        norms.layer_norm_forward(h, 1, 1, x_desc, x, 0, x_desc, y, p_desc, np.ones(5, np.float32),
                                 np.zeros(5, np.float32), 0.0)
    with pytest.raises(BadParamError, match="saved"):
        norms.rms_norm_backward(h, 1, 1, x_desc, x, x_desc, x, 0, x_desc, y, p_desc, np.ones(5, np.float32),
                                np.zeros(5, np.float32), s_desc, None)
    assert (y == 3).all()
