"""Softmax forward/backward against the float64 reference: every algorithm, mode, dtype
and layout, alpha/beta, extreme rows, and finite differences of the reference."""
import numpy as np
import pytest

import tridnn
from tridnn import SoftmaxAlgorithm, SoftmaxMode
from tridnn.errors import BadParamError
from tridnn.reference import softmax as ref

from layer_cases import DTYPES, LAYOUTS, check, handle, normal, numeric_grad, output, tensor

ALGOS = list(SoftmaxAlgorithm)
MODES = list(SoftmaxMode)


def run(algo, mode, dtype, layout, rng, dims=(2, 5, 3, 4), alpha=1.0, beta=0.0, x_values=None):
    h = handle()
    x_desc, x = (tensor(dims, dtype, layout, rng, x_values) if x_values is not None
                 else normal(dims, dtype, layout, rng, 2.0))
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    tridnn.softmax_forward(h, algo, mode, alpha, x_desc, x, beta, y_desc, y)
    y_ref = ref.softmax_forward(x, int(algo), int(mode))
    check(y, y_ref, dtype, alpha, beta, prior, name="y")

    _, y_fwd, _ = output(dims, dtype, layout, rng, 0.0)
    tridnn.softmax_forward(h, algo, mode, 1.0, x_desc, x, 0.0, y_desc, y_fwd)
    dy_desc, dy = normal(dims, dtype, layout, rng)
    dx_desc, dx, prior = output(dims, dtype, layout, rng, beta)
    tridnn.softmax_backward(h, algo, mode, alpha, y_desc, y_fwd, dy_desc, dy, beta, dx_desc, dx)
    # the backward is checked on the y it was given, rounded as the dtype rounds it
    check(dx, ref.softmax_backward(y_fwd, dy, int(algo), int(mode)), dtype, alpha, beta, prior, name="dx")


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.name)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_algorithm_mode_dtype(algo, mode, dtype, rng):
    run(algo, mode, dtype, "NHWC" if dtype in ("float16", "bfloat16") else "NCHW", rng)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.name)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dims", [(2, 5, 3, 4), (3, 7), (2, 4, 2, 3, 2)], ids=["4d", "2d", "5d"])
def test_every_layout_and_rank(algo, mode, layout, dims, rng):
    run(algo, mode, "float32", layout, rng, dims)


@pytest.mark.parametrize("alpha,beta", [(2.0, 0.0), (0.5, 1.0), (-1.0, 0.25)])
@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.name)
def test_alpha_beta(alpha, beta, algo, rng):
    run(algo, SoftmaxMode.CHANNEL, "float32", "NHWC", rng, alpha=alpha, beta=beta)


@pytest.mark.parametrize("algo", ALGOS, ids=lambda a: a.name)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_reference_backward_matches_finite_differences(algo, mode, rng):
    x = rng.standard_normal((2, 3, 2, 2))
    dy = rng.standard_normal(x.shape)
    numeric = numeric_grad(lambda v: ref.softmax_forward(v, int(algo), int(mode)), x, dy)
    y = ref.softmax_forward(x, int(algo), int(mode))
    np.testing.assert_allclose(ref.softmax_backward(y, dy, int(algo), int(mode)), numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("algo", [SoftmaxAlgorithm.ACCURATE, SoftmaxAlgorithm.LOG], ids=lambda a: a.name)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_extreme_rows(algo, dtype):
    big = 6e4 if dtype == "float16" else 1e38
    x = np.array([[[-np.inf, 0.0, 1.0, -np.inf]], [[big, big, -big, 0.0]], [[-np.inf, -np.inf, 5.0, -np.inf]]],
                 dtype).transpose(0, 2, 1)  # (3, 4, 1): CHANNEL rows of 4
    h = handle()
    d = tridnn.TensorDescriptor.like(x)
    y = np.full_like(x, np.nan)
    tridnn.softmax_forward(h, algo, SoftmaxMode.CHANNEL, 1.0, d, x, 0.0, d, y)
    with np.errstate(all="ignore"):
        want = ref.softmax_forward(x.astype(np.float64), int(algo), 1)[:, :, 0].astype(dtype).astype(np.float64)
    if algo == SoftmaxAlgorithm.ACCURATE:
        p = np.exp(np.array([0.0, 1.0]) - np.logaddexp(0.0, 1.0))
        np.testing.assert_allclose(want, [[0, p[0], p[1], 0], [0.5, 0.5, 0, 0], [0, 0, 1, 0]], rtol=1e-3)
    got = y[:, :, 0].astype(np.float64)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=2e-3)


def test_all_minus_inf_row_is_nan_and_other_rows_are_not():
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0]], np.float32)
    h = handle()
    d = tridnn.TensorDescriptor.like(x)
    y = np.empty_like(x)
    tridnn.softmax_forward(h, SoftmaxAlgorithm.ACCURATE, SoftmaxMode.INSTANCE, 1.0, d, x, 0.0, d, y)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()


def test_in_place_forward(rng):
    h = handle()
    x_desc, x = normal((2, 3, 4), "float32", "NCHW", rng)
    want = ref.softmax_forward(x, 1, 1)
    tridnn.softmax_forward(h, "accurate", "channel", 1.0, x_desc, x, 0.0, x_desc, x)
    check(x, want, "float32")


def test_errors(rng):
    h = handle()
    x_desc, x = normal((2, 3, 4), "float32", "NCHW", rng)
    y = np.full_like(x, 3.0)
    with pytest.raises(BadParamError, match="softmax algorithm"):
        tridnn.softmax_forward(h, 5, 0, 1.0, x_desc, x, 0.0, x_desc, y)
    with pytest.raises(BadParamError, match="softmax mode"):
        tridnn.softmax_forward(h, 0, "spatial", 1.0, x_desc, x, 0.0, x_desc, y)
    with pytest.raises(BadParamError, match="dims"):
        tridnn.softmax_forward(h, 0, 0, 1.0, x_desc, x, 0.0, tridnn.TensorDescriptor((2, 3, 3)), y[..., :3])
    with pytest.raises(BadParamError, match="overlaps"):
        tridnn.softmax_backward(h, 1, 0, 1.0, x_desc, x, x_desc, y, 0.0, x_desc, y)
    assert (y == 3).all()
