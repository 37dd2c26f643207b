"""Pooling forward/backward against the float64 reference: every mode, dtype, layout,
1D/2D/3D, alpha/beta; max backward's first-maximum routing; NaN; adaptive pooling;
errors raised before any output is touched."""
import numpy as np
import pytest

import tridnn
from tridnn import PoolingDescriptor, PoolingMode
from tridnn.errors import BadParamError
from tridnn.reference import pooling as ref

from layer_cases import DTYPES, LAYOUTS, check, handle, normal, numeric_grad, output, tensor

MODES = list(PoolingMode)


def run(mode, dims, window, padding, stride, dtype="float32", layout="NCHW", rng=None, alpha=1.0,
        beta=0.0, nan=False, x_values=None):
    pool = PoolingDescriptor(mode, window, padding, stride, nan_opt=int(nan), nd=len(dims) - 2)
    x_desc, x = tensor(dims, dtype, layout, rng, x_values)
    y_dims = tridnn.get_pooling_forward_output_dim(pool, x_desc)
    y_desc, y, y_prior = output(y_dims, dtype, layout, rng, beta)
    h = handle()
    x_before = x.copy()
    tridnn.pooling_forward(h, pool, alpha, x_desc, x, beta, y_desc, y)
    y_ref = ref.pooling_forward(x, int(mode), pool.window, pool.padding, pool.stride, nan)
    exact = pool.mode.is_max
    check(y, y_ref, dtype, alpha, beta, y_prior, exact=exact, name="y")
    assert np.array_equal(x, x_before, equal_nan=True)

    dy_desc, dy = tensor(y_dims, dtype, layout, rng)
    _, y_fwd, _ = output(y_dims, dtype, layout, rng, 0.0)
    tridnn.pooling_forward(h, pool, 1.0, x_desc, x, 0.0, y_desc, y_fwd)
    dx_desc, dx, dx_prior = output(dims, dtype, layout, rng, beta)
    tridnn.pooling_backward(h, pool, alpha, y_desc, y_fwd, dy_desc, dy, x_desc, x, beta, dx_desc, dx)
    dx_ref = ref.pooling_backward(x, dy, int(mode), pool.window, pool.padding, pool.stride, nan)
    check(dx, dx_ref, dtype, alpha, beta, dx_prior, exact=exact, name="dx")


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_mode_and_dtype(mode, dtype, rng):
    run(mode, (2, 3, 7, 6), (3, 2), (1, 1), (2, 2), dtype, "NHWC" if dtype in ("float16", "bfloat16") else "NCHW", rng)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_overlapping_windows(mode, layout, rng):
    run(mode, (2, 5, 6, 7), (3, 3), (1, 2), (1, 2), "float32", layout, rng)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dims,window,padding,stride", [
    ((2, 3, 9), (3,), (1,), (2,)),
    ((1, 2, 4, 5, 6), (2, 3, 2), (1, 1, 0), (2, 1, 2)),
    ((3, 2, 5, 5), (5, 5), (0, 0), (1, 1)),          # global pooling
    ((2, 2, 4, 4), (2, 2), (0, 0), (3, 3)),          # stride > window: some inputs unused
], ids=["1d", "3d", "global", "gaps"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_1d_2d_3d(mode, dims, window, padding, stride, layout, rng):
    run(mode, dims, window, padding, stride, "float32", layout, rng)


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.0), (0.5, 1.0), (-1.5, 0.25)])
@pytest.mark.parametrize("mode", [PoolingMode.MAX, PoolingMode.AVERAGE_COUNT_EXCLUDE_PADDING], ids=lambda m: m.name)
def test_alpha_beta(alpha, beta, mode, rng):
    run(mode, (2, 3, 5, 5), (2, 2), (1, 1), (2, 2), "float64", "NHWC", rng, alpha, beta)


@pytest.mark.parametrize("mode", [PoolingMode.MAX, PoolingMode.MAX_DETERMINISTIC], ids=lambda m: m.name)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_without_ties(mode, layout, rng):
    """Continuous random values have no ties, which takes the tie-free routing path."""
    values = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    run(mode, values.shape, (3, 3), (1, 1), (2, 2), "float32", layout, rng, x_values=values)


def test_max_backward_routes_to_first_maximum():
    x = np.array([[[[1, 5, 5], [5, 2, 5], [0, 5, 1]]]], np.float32)
    pool = PoolingDescriptor(PoolingMode.MAX, 3, 0, 1)
    h = handle()
    desc = tridnn.TensorDescriptor.like(x)
    y = np.empty((1, 1, 1, 1), np.float32)
    y_desc = tridnn.TensorDescriptor.like(y)
    tridnn.pooling_forward(h, pool, 1, desc, x, 0, y_desc, y)
    dx = np.full_like(x, np.nan)
    tridnn.pooling_backward(h, pool, 1, y_desc, y, y_desc, np.full_like(y, 7), desc, x, 0, desc, dx)
    want = np.zeros_like(x)
    want[0, 0, 0, 1] = 7
    assert y[0, 0, 0, 0] == 5
    np.testing.assert_array_equal(dx, want)


@pytest.mark.parametrize("nan", [False, True])
def test_nan_propagation(nan, rng):
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 1, 1] = np.nan
    pool = PoolingDescriptor(PoolingMode.MAX, 2, 0, 2, nan_opt=int(nan))
    h = handle()
    y = np.empty((1, 1, 2, 2), np.float32)
    tridnn.pooling_forward(h, pool, 1, tridnn.TensorDescriptor.like(x), x, 0, tridnn.TensorDescriptor.like(y), y)
    assert np.isnan(y[0, 0, 0, 0]) == nan
    if not nan:
        assert y[0, 0, 0, 0] == 4
    assert np.array_equal(y[0, 0, 1], [13, 15])
    dy = rng.integers(1, 5, size=y.shape).astype(np.float32)
    dx = np.full_like(x, np.nan)
    desc = tridnn.TensorDescriptor.like(x)
    y_desc = tridnn.TensorDescriptor.like(y)
    tridnn.pooling_backward(h, pool, 1, y_desc, y, y_desc, dy, desc, x, 0, desc, dx)
    want = ref.pooling_backward(x, dy, 0, (2, 2), (0, 0), (2, 2), nan)
    np.testing.assert_array_equal(dx, want)
    assert want[0, 0, 1, 1] == (dy[0, 0, 0, 0] if nan else 0)


def _all_nan_case():
    """(x, dy, y, dx) of a 1x2x4x4 input pooled 2x2/2 without NaN propagation. Channel 0:
    window (0, 0) all NaN, window (0, 1) a NaN before a -inf (its maximum), the others
    ordinary; channel 1 ordinary (two channels, so NHWC is a layout of its own)."""
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, :2, :2] = np.nan
    x[0, 0, 0, 2] = np.nan
    x[0, 0, 0, 3] = x[0, 0, 1, 2] = x[0, 0, 1, 3] = -np.inf
    dy = np.arange(1.0, 9.0).reshape(1, 2, 2, 2)
    y = np.array([[[-np.inf, -np.inf], [13.0, 15.0]], [[21.0, 23.0], [29.0, 31.0]]])[None]
    dx = np.zeros(x.shape)
    dx[0, 0, 0, 3] = dy[0, 0, 0, 1]                    # the first -inf of window (0, 1)
    dx[0, 0, 3, 1], dx[0, 0, 3, 3] = dy[0, 0, 1, 0], dy[0, 0, 1, 1]
    dx[0, 1, 1::2, 1::2] = dy[0, 1]                    # channel 1: each window's last element
    return x, dy, y, dx


@pytest.mark.parametrize("backend", ["numpy", "triton"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mode", [PoolingMode.MAX, PoolingMode.MAX_DETERMINISTIC], ids=lambda m: m.name)
def test_all_nan_window_without_propagation(mode, layout, backend):
    """NaN ignored: a window of only NaN has no maximum, so y is -inf (the maximum of no
    number; cuDNN 9.19 writes -FLT_MAX there) and no element takes its gradient; a -inf
    behind a NaN is its window's maximum and takes the gradient. Same answer from the
    reference, the NumPy backend and the Triton kernels (interpreter)."""
    if backend == "triton":
        torch = pytest.importorskip("torch")
        pytest.importorskip("triton")
        h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    else:
        h = handle()
    values, dy_values, want_y, want_dx = _all_nan_case()
    pool = PoolingDescriptor(mode, 2, 0, 2, nan_opt=0)
    x_desc, x = _tensor_holding(values, layout)
    y_desc, y = _tensor_holding(np.full(want_y.shape, 99.0), layout)
    dy_desc, dy = _tensor_holding(dy_values, layout)
    dx_desc, dx = _tensor_holding(np.full(values.shape, 99.0), layout)
    if backend == "triton":  # the same memory, strides and all, as torch tensors
        x, y, dy, dx = (torch.from_numpy(a) for a in (x, y, dy, dx))
    tridnn.pooling_forward(h, pool, 1, x_desc, x, 0, y_desc, y)
    tridnn.pooling_backward(h, pool, 1, y_desc, y, dy_desc, dy, x_desc, x, 0, dx_desc, dx)
    np.testing.assert_array_equal(np.asarray(y), want_y)
    np.testing.assert_array_equal(np.asarray(dx), want_dx)
    np.testing.assert_array_equal(ref.pooling_forward(values, int(mode), (2, 2), (0, 0), (2, 2)), want_y)
    np.testing.assert_array_equal(ref.pooling_backward(values, dy_values, int(mode), (2, 2), (0, 0), (2, 2)),
                                  want_dx)


def _tensor_holding(values, layout):
    """(descriptor, float32 array in ``layout``) holding ``values``."""
    return tensor(values.shape, "float32", layout, None, values)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_reference_backward_matches_finite_differences(mode, rng):
    x = rng.standard_normal((1, 2, 5, 4))
    dy = rng.standard_normal((1, 2, 3, 2))
    args = (int(mode), (3, 2), (1, 0), (2, 2))
    numeric = numeric_grad(lambda v: ref.pooling_forward(v, *args), x, dy)
    np.testing.assert_allclose(ref.pooling_backward(x, dy, *args), numeric, atol=1e-6)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("dims,out", [((2, 3, 7, 5), (3, 2)), ((1, 2, 10), (4,)), ((1, 2, 3, 5, 4), (2, 3, 3))])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_adaptive_pooling(mode, dims, out, layout, rng):
    h = handle()
    x_desc, x = normal(dims, "float32", layout, rng)
    y_desc, y, _ = output(dims[:2] + out, "float32", layout, rng, 0.0)
    tridnn.adaptive_pooling_forward(h, mode, 1.0, x_desc, x, 0.0, y_desc, y)
    check(y, ref.adaptive_pooling_forward(x, out, mode), "float32", name="y")
    dy_desc, dy = normal(dims[:2] + out, "float32", layout, rng)
    dx_desc, dx, prior = output(dims, "float32", layout, rng, 0.5)
    tridnn.adaptive_pooling_backward(h, mode, 1.0, dy_desc, dy, x_desc, x, 0.5, dx_desc, dx)
    check(dx, ref.adaptive_pooling_backward(x, dy, mode), "float32", 1.0, 0.5, prior, name="dx")
    x64 = np.asarray(x, np.float64)
    numeric = numeric_grad(lambda v: ref.adaptive_pooling_forward(v, out, mode), x64, np.asarray(dy, np.float64))
    np.testing.assert_allclose(ref.adaptive_pooling_backward(x64, dy, mode), numeric, atol=1e-6)


@pytest.mark.parametrize("kwargs,match", [
    (dict(window=0), "window"), (dict(window=(2, -1)), "window"), (dict(stride=0), "stride"),
    (dict(padding=-1), "padding"), (dict(padding=2, window=2), "smaller than window"),
    (dict(mode=7), "pooling mode"), (dict(mode="median"), "pooling mode"), (dict(nan_opt=3), "NaN"),
])
def test_descriptor_errors(kwargs, match):
    args = dict(mode=PoolingMode.MAX, window=2, padding=0, stride=1)
    args.update(kwargs)
    with pytest.raises(BadParamError, match=match):
        PoolingDescriptor(**args)


def test_call_errors_leave_outputs_untouched(rng):
    h = handle()
    pool = PoolingDescriptor(PoolingMode.MAX, 3, 0, 1)
    x_desc, x = tensor((1, 2, 2, 5), "float32", "NCHW", rng)
    with pytest.raises(BadParamError, match="output dim 0"):
        pool.output_dims(x_desc)
    x_desc, x = tensor((1, 2, 4, 4), "float32", "NCHW", rng)
    y = np.full((1, 2, 3, 3), 9.0, np.float32)
    with pytest.raises(BadParamError, match="do not match"):
        tridnn.pooling_forward(h, pool, 1, x_desc, x, 0, tridnn.TensorDescriptor((1, 2, 3, 2)), y[..., :2])
    with pytest.raises(BadParamError, match="dtype"):
        tridnn.pooling_forward(h, pool, 1, x_desc, x, 0, tridnn.TensorDescriptor((1, 2, 2, 2), "float64"),
                               np.zeros((1, 2, 2, 2)))
    y_desc = tridnn.TensorDescriptor((1, 2, 2, 2))
    y = np.full((1, 2, 2, 2), 9.0, np.float32)
    with pytest.raises(BadParamError, match="alpha"):
        tridnn.pooling_forward(h, pool, float("nan"), x_desc, x, 0, y_desc, y)
    with pytest.raises(BadParamError, match="overlaps"):
        tridnn.pooling_backward(h, pool, 1, y_desc, y, y_desc, y, x_desc, x, 0, x_desc, x)
    assert (y == 9).all()
