"""Cross-channel LRN against the float64 reference: every dtype and layout, odd and even
window sizes, alpha/beta, finite differences of the reference, descriptor limits."""
import numpy as np
import pytest

import tridnn
from tridnn import LRNDescriptor
from tridnn.errors import BadParamError
from tridnn.reference import lrn as ref

from layer_cases import DTYPES, LAYOUTS, check, handle, normal, numeric_grad, output


def run(desc, dims, dtype, layout, rng, alpha=1.0, beta=0.0):
    h = handle()
    x_desc, x = normal(dims, dtype, layout, rng, 1.5)
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    tridnn.lrn_cross_channel_forward(h, desc, 0, alpha, x_desc, x, beta, y_desc, y)
    check(y, ref.lrn_forward(x, desc.n, desc.alpha, desc.beta, desc.k), dtype, alpha, beta, prior, name="y")
    _, y_fwd, _ = output(dims, dtype, layout, rng, 0.0)
    tridnn.lrn_cross_channel_forward(h, desc, 0, 1.0, x_desc, x, 0.0, y_desc, y_fwd)
    dy_desc, dy = normal(dims, dtype, layout, rng)
    dx_desc, dx, prior = output(dims, dtype, layout, rng, beta)
    tridnn.lrn_cross_channel_backward(h, desc, "cross_channel_dim1", alpha, y_desc, y_fwd, dy_desc, dy, x_desc, x,
                                      beta, dx_desc, dx)
    check(dx, ref.lrn_backward(x, dy, desc.n, desc.alpha, desc.beta, desc.k), dtype, alpha, beta, prior,
          name="dx", slack={"float16": 2.0, "bfloat16": 2.0}.get(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_dtype_and_layout(dtype, layout, rng):
    run(LRNDescriptor(5, 0.5, 0.75, 2.0), (2, 7, 3, 4), dtype, layout, rng)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9, 16])
@pytest.mark.parametrize("dims", [(2, 6, 5), (1, 5, 2, 3, 2)], ids=["1d", "3d"])
def test_window_sizes_and_ranks(n, dims, rng):
    run(LRNDescriptor(n, 1.2, 0.6, 1.0), dims, "float64", "NCHW", rng)


@pytest.mark.parametrize("alpha,beta", [(2.0, 0.0), (0.5, 1.0)])
def test_alpha_beta(alpha, beta, rng):
    run(LRNDescriptor(), (2, 6, 3, 3), "float32", "NHWC", rng, alpha, beta)


@pytest.mark.parametrize("n", [2, 5])
def test_reference_backward_matches_finite_differences(n, rng):
    x = rng.standard_normal((2, 6, 2))
    dy = rng.standard_normal(x.shape)
    numeric = numeric_grad(lambda v: ref.lrn_forward(v, n, 1.5, 0.8, 1.0), x, dy)
    np.testing.assert_allclose(ref.lrn_backward(x, dy, n, 1.5, 0.8, 1.0), numeric, atol=1e-7)


@pytest.mark.parametrize("kwargs,match", [(dict(n=0), "lrn n"), (dict(n=17), r"\[1, 16\]"),
                                          (dict(beta=0.001), "beta"), (dict(k=1e-6), "k must be")])
def test_descriptor_limits(kwargs, match):
    with pytest.raises(BadParamError, match=match):
        LRNDescriptor(**kwargs)


def test_call_errors(rng):
    h = handle()
    x_desc, x = normal((1, 3, 2, 2), "float32", "NCHW", rng)
    y = np.full((1, 3, 2, 2), 2.0, np.float32)
    with pytest.raises(BadParamError, match="LRN mode"):
        tridnn.lrn_cross_channel_forward(h, LRNDescriptor(), 1, 1.0, x_desc, x, 0.0, x_desc, y)
    with pytest.raises(BadParamError, match="LRNDescriptor"):
        tridnn.lrn_cross_channel_forward(h, None, 0, 1.0, x_desc, x, 0.0, x_desc, y)
    assert (y == 2).all()
