"""The activation layer against the float64 reference: every mode, dtype and layout,
alpha/beta, in place, NaN handling, and the reference's derivatives against finite
differences."""
import numpy as np
import pytest

import tridnn
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode
from tridnn.errors import BadParamError
from tridnn.reference import activation as ref

from layer_cases import DTYPES, LAYOUTS, check, handle, numeric_grad, output, tensor

COEF = {ActivationMode.CLIPPED_RELU: 2.5, ActivationMode.ELU: 0.7, ActivationMode.LEAKY_RELU: 0.1,
        ActivationMode.SOFTPLUS: 1.5}
MODES = list(ActivationMode)


def away_from_kinks(x, coef):
    """Keep values off the points where a derivative jumps (0, +-3, the clip ceiling)."""
    for kink in (0.0, 3.0, -3.0, coef):
        near = np.abs(x - kink) < 0.05
        x = np.where(near, x + 0.1, x)
    return x


def descriptor(mode):
    return ActivationDescriptor(mode, coef=COEF.get(mode, 0.0), swish_beta=1.3)


def run(mode, dtype, layout, rng, alpha=1.0, beta=0.0, dims=(2, 3, 4, 5)):
    desc = descriptor(mode)
    values = away_from_kinks(rng.uniform(-5, 5, dims), desc.coef).astype(tridnn.DataType.of(dtype).numpy)
    x_desc, x = tensor(dims, dtype, layout, rng, values)
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    h = handle()
    tridnn.activation_forward(h, desc, alpha, x_desc, x, beta, y_desc, y)
    check(y, ref.activation_forward(x, mode, desc.coef, desc.swish_beta), dtype, alpha, beta, prior, name="y")

    _, y_fwd, _ = output(dims, dtype, layout, rng, 0.0)
    tridnn.activation_forward(h, desc, 1.0, x_desc, x, 0.0, y_desc, y_fwd)
    dy_desc, dy = tensor(dims, dtype, layout, rng)
    dx_desc, dx, prior = output(dims, dtype, layout, rng, beta)
    tridnn.activation_backward(h, desc, alpha, y_desc, y_fwd, dy_desc, dy, x_desc, x, beta, dx_desc, dx)
    check(dx, ref.activation_backward(x, dy, mode, desc.coef, desc.swish_beta), dtype, alpha, beta, prior,
          name="dx")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_mode_and_dtype(mode, dtype, rng):
    run(mode, dtype, "NHWC" if dtype in ("float16", "bfloat16") else "NCHW", rng)


@pytest.mark.parametrize("mode", [ActivationMode.RELU, ActivationMode.SIGMOID, ActivationMode.GELU], ids=lambda m: m.name)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dims", [(2, 3, 4, 5), (2, 3, 7), (1, 2, 3, 2, 4)], ids=["2d", "1d", "3d"])
def test_every_layout_and_rank(mode, layout, dims, rng):
    run(mode, "float32", layout, rng, dims=dims)


@pytest.mark.parametrize("alpha,beta", [(2.0, 0.0), (0.5, 1.0), (-1.0, 0.5)])
@pytest.mark.parametrize("mode", [ActivationMode.RELU, ActivationMode.CLIPPED_RELU, ActivationMode.TANH], ids=lambda m: m.name)
def test_alpha_beta(alpha, beta, mode, rng):
    run(mode, "float32", "NHWC", rng, alpha, beta)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_reference_derivative_matches_finite_differences(mode, rng):
    desc = descriptor(mode)
    x = away_from_kinks(rng.uniform(-5, 5, (2, 3, 4)), desc.coef)
    dy = rng.standard_normal(x.shape)
    numeric = numeric_grad(lambda v: ref.activation_forward(v, mode, desc.coef, desc.swish_beta), x, dy)
    np.testing.assert_allclose(ref.activation_backward(x, dy, mode, desc.coef, desc.swish_beta), numeric,
                               rtol=1e-6, atol=1e-7)


def test_in_place(rng):
    h = handle()
    desc = ActivationDescriptor(ActivationMode.TANH)
    x_desc, x = tensor((2, 3, 4, 4), "float32", "NCHW", rng)
    want = np.tanh(x.astype(np.float64))
    tridnn.activation_forward(h, desc, 1.0, x_desc, x, 0.0, x_desc, x)
    check(x, want, "float32")
    relu = ActivationDescriptor(ActivationMode.RELU)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    want = np.where(x > 0, dy, 0)
    tridnn.activation_backward(h, relu, 1.0, x_desc, x, x_desc, dy, x_desc, x, 0.0, x_desc, dy)
    np.testing.assert_array_equal(dy, want)


@pytest.mark.parametrize("nan_opt", [0, 1])
def test_relu_nan_propagation(nan_opt):
    x = np.array([[[-1.0, np.nan, 2.0, 9.0]]], np.float32)
    h = handle()
    d = tridnn.TensorDescriptor.like(x)
    for mode, want_last in ((ActivationMode.RELU, 9.0), (ActivationMode.CLIPPED_RELU, 4.0)):
        for alpha in (1.0, 2.0):  # the one-pass path and the general path agree
            y = np.full_like(x, 7)
            tridnn.activation_forward(h, ActivationDescriptor(mode, nan_opt, coef=4.0), alpha, d, x, 0.0, d, y)
            assert y[0, 0, 0] == 0 and y[0, 0, 2] == 2 * alpha and y[0, 0, 3] == want_last * alpha
            assert np.isnan(y[0, 0, 1]) == bool(nan_opt), (mode, alpha, y)
            if not nan_opt:
                assert y[0, 0, 1] == 0


def test_errors_leave_outputs_untouched(rng):
    h = handle()
    desc = ActivationDescriptor(ActivationMode.RELU)
    x_desc, x = tensor((1, 2, 3, 3), "float32", "NCHW", rng)
    y = np.full((1, 2, 3, 3), 5.0, np.float32)
    with pytest.raises(BadParamError, match="dims"):
        tridnn.activation_forward(h, desc, 1, x_desc, x, 0, tridnn.TensorDescriptor((1, 2, 3, 2)), y[..., :2])
    with pytest.raises(BadParamError, match="dtype"):
        tridnn.activation_forward(h, desc, 1, x_desc, x, 0, tridnn.TensorDescriptor((1, 2, 3, 3), "float64"),
                                  y.astype(np.float64))
    with pytest.raises(BadParamError, match="beta"):
        tridnn.activation_forward(h, desc, 1, x_desc, x, float("inf"), x_desc, y)
    with pytest.raises(BadParamError, match="ActivationDescriptor"):
        tridnn.activation_forward(h, "relu", 1, x_desc, x, 0, x_desc, y)
    with pytest.raises(BadParamError, match="activation mode"):
        ActivationDescriptor(42)
    assert (y == 5).all()
    buf = np.full(19, 5.0, np.float32)
    with pytest.raises(BadParamError, match="overlaps"):
        tridnn.activation_forward(h, desc, 1, x_desc, buf[1:].reshape(x.shape), 0, x_desc, buf[:-1].reshape(x.shape))
    assert (buf == 5).all()
