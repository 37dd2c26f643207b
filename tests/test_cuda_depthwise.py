"""The depthwise Triton paths against the float64 reference, through the public API.

conv_direct's dw3_rows_kernel (forward; backward data of stride-1 layers on dy with the
flipped filter) and conv_depthwise_backward's dw3_wgrad_kernel (the 3x3 filter gradient,
every tap in one pass), on tiny shapes under the interpreter: both layouts and strided
views, channel counts and H/W that are not multiples of the blocks (interpreter blocks
are 4 wide), paddings 0/1/2, stride 2, dilation 2, channel multiplier 2, alpha/beta and
NaN-poisoned outputs (run_case poisons the output when beta == 0).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

import test_cuda_conv as T  # noqa: E402  (run_case: one algorithm through the public API vs the reference)

DIRECT = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.DIRECT)
DATA = registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)
FILTER = [registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo[a]) for a in ("ALGO_0", "ALGO_1")]


def _problem(p, n=2):
    cd = T.conv(p)
    x_desc = tridnn.TensorDescriptor.nchw(n, p["C"], *p["spatial"])
    w_desc = tridnn.FilterDescriptor((p["K"], 1, *p["kernel"]))
    return ConvProblem.forward(x_desc, w_desc, cd)


# 3x3 stride 1: the row kernel's cases (C = 5, 6: channel tails; H/W odd; pads 0, 1, 2)
ROWS = [T.P(5, 5, (7, 5), 3, 1, 1, 1, 5), T.P(6, 6, (5, 9), 3, 1, 0, 1, 6), T.P(5, 5, (6, 7), 3, 1, 2, 1, 5),
        T.P(4, 8, (5, 6), 3, 1, 1, 1, 4)]     # multiplier 2 (forward only; backward data keeps the tap kernel)
# the filter kernel also takes stride 2 and dilation 2
WGRAD = ROWS + [T.P(6, 6, (7, 8), 3, 2, 1, 1, 6), T.P(5, 5, (9, 7), 3, 1, 2, 2, 5), T.P(3, 6, (7, 7), 3, 2, 1, 1, 3)]


@pytest.mark.parametrize("p", ROWS, ids=T._ids)
@pytest.mark.parametrize("layout,dtype", [("NHWC", "float32"), ("NCHW", "float16"), ("strided", "float32")])
def test_rows_forward(p, layout, dtype, rng):
    from tridnn.cuda import conv_direct
    assert conv_direct.rows3_applies(_problem(p))
    assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=2, as_torch=True) is None
    assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None


@pytest.mark.parametrize("p", ROWS, ids=T._ids)
@pytest.mark.parametrize("layout,dtype", [("NHWC", "float32"), ("NCHW", "float16"), ("strided", "float32")])
def test_rows_backward_data(p, layout, dtype, rng):
    from tridnn.cuda import conv_depthwise_backward as D
    assert D.rows3_backward_applies(_problem(p)) == (p["K"] == p["C"])
    assert T.run_case("bwd_data", DATA, p, dtype, layout, rng, as_torch=True) is None
    assert T.run_case("bwd_data", DATA, p, dtype, layout, rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None


@pytest.mark.parametrize("p", WGRAD, ids=T._ids)
@pytest.mark.parametrize("algo", FILTER, ids=lambda a: a.name)
def test_wgrad3(p, algo, rng):
    from tridnn.cuda import conv_depthwise_backward as D
    assert D.wgrad3_applies(_problem(p))
    assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng) is None
    assert T.run_case("bwd_filter", algo, p, "float16", "NCHW", rng, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None


def test_wgrad3_many_slices(rng, monkeypatch):
    """More slices than the interpreter's default 3: every slice's partial is summed once."""
    from tridnn.cuda import conv_depthwise_backward as D
    monkeypatch.setattr(D, "filter_slices", lambda problem, device, cap: min(cap, 7))
    p = T.P(5, 5, (6, 5), 3, 1, 1, 1, 5)
    for algo in FILTER:
        assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng, n=3) is None


def test_rows_forward_epilogue(rng):
    """Bias, residual z, activation and alpha/beta fused into the row kernel's stores."""
    from tridnn.api.convolution import execute
    from tridnn.cuda.epilogue import EpilogueSpec
    from tridnn.descriptors.activation import ActivationMode
    p = T.P(6, 6, (5, 7), 3, 1, 1, 1, 6)
    cd = T.conv(p)
    handle = T._handle("cpu")
    x_vals = testing.fill((2, 6, 5, 7), "float32", rng)
    w_vals = testing.fill((6, 1, 3, 3), "float32", rng)
    x_desc, x = testing.make_tensor(x_vals.shape, "float32", "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, "float32", "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), "float32", "NHWC", rng)
    z_vals = testing.fill(y_desc.dims, "float32", rng)
    z_desc, z = testing.make_tensor(y_desc.dims, "float32", "NCHW", rng, z_vals)
    bias = rng.standard_normal(6).astype(np.float32)
    prior = testing.fill(y_desc.dims, "float32", rng)
    y[...] = prior
    spec = EpilogueSpec(activation=ActivationMode.RELU, coef=0.0, bias=torch.from_numpy(bias).reshape(1, 6, 1, 1),
                        z=T._to_torch(z, "cpu"), alpha2=0.5)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    views = {k: handle.backend.view(v, d, k, k == "y") for k, v, d in
             (("x", x, x_desc), ("w", w, w_desc.as_tensor()), ("y", y, y_desc))}
    execute(handle, problem, DIRECT, views, handle.workspace(DIRECT.workspace_size(problem)), 2.0, 0.25,
            epilogue=spec)
    v = (2.0 * reference.conv_forward(x_vals, w_vals, 1, 1, None, 1, 6) + 0.25 * prior.astype(np.float64)
         + 0.5 * z_vals.astype(np.float64) + bias.astype(np.float64)[None, :, None, None])
    np.testing.assert_allclose(np.asarray(y, np.float64), np.maximum(v, 0), rtol=2e-5, atol=2e-5)
