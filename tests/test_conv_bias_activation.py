"""convolution_bias_activation_forward against a composed float64 reference.

y = act(alpha1 * conv(x, w) + alpha2 * z + bias), fused into the forward algorithm's
epilogue. Integer fills keep the pre-activation sum exact, so exact algorithms with
piecewise-linear activations (identity, relu, clipped relu) must match bit for bit;
smooth activations get the dtype's tolerance.
"""
import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem
from tridnn.cpu.epilogue import FUSED_MODES
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode as M
from tridnn.errors import BadParamError, NotSupportedError
from tridnn.shapes import conv as make_conv

FWD = registry.algorithms("conv", "fwd", "numpy")
DTYPES = ["float32", "float64", "float16", "bfloat16"]
COEF = {M.CLIPPED_RELU: 3.0, M.ELU: 0.7}
PIECEWISE_LINEAR = (M.IDENTITY, M.RELU, M.CLIPPED_RELU)
P = make_conv("fused", 6, 8, (7, 9), 3, 1, 1)
P_LARGE = make_conv("fused_large", 3, 4, (40, 44), 3, 1, 1)  # for methods that pay only on large planes


def activation(mode):
    return ActivationDescriptor(mode, coef=COEF.get(mode, 0.0), swish_beta=1.5)


def run_fused(algo_enum, mode, dtype, layout, rng, p=P, alpha1=1.0, alpha2=1.0, z_is_y=False, n=2,
              exact=True, z_nan=False, y_nan=True):
    nd = len(p["spatial"])
    conv = tridnn.ConvolutionDescriptor(padding=p["pad"], stride=p["stride"], dilation=p["dilation"],
                                        groups=p["groups"], nd=nd)
    x_vals = testing.fill((n, p["C"], *p["spatial"]), dtype, rng)
    w_vals = testing.fill((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, layout, rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, layout, w_vals)
    y_dims = conv.output_dims(x_desc, w_desc)
    y_desc, y = testing.make_tensor(y_dims, dtype, layout, rng)
    z_vals = testing.fill(y_dims, dtype, rng)
    if z_is_y:
        z_desc, z = y_desc, y
        y[...] = z_vals
    else:
        z_desc, z = testing.make_tensor(y_dims, dtype, layout, rng, z_vals)
        if z_nan:
            testing.poison(z)
        if y_nan:
            testing.poison(y)
    bias_vals = testing.fill((1, p["K"]) + (1,) * nd, dtype, rng, density=1.0)
    bias_desc = tridnn.TensorDescriptor.packed(bias_vals.shape, dtype)
    bias = bias_vals.copy()
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
    algo = registry.by_enum("conv", "fwd", "numpy", algo_enum)
    reason = algo.not_applicable(problem)
    if reason is not None and p is P:
        return run_fused(algo_enum, mode, dtype, layout, rng, P_LARGE, alpha1, alpha2, z_is_y, 1, exact,
                         z_nan, y_nan)
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")
    handle = tridnn.Handle(find_cache=None)
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc, algo_enum),
                  np.uint8)
    desc = activation(mode)
    got = tridnn.convolution_bias_activation_forward(handle, alpha1, x_desc, x, w_desc, w, conv, algo_enum, ws,
                                                     alpha2, z_desc, z, bias_desc, bias, desc, y_desc, y)
    assert got is y
    ref = reference.conv_bias_activation_forward(x_vals, w_vals, z_vals, bias_vals, mode, desc.coef,
                                                 desc.swish_beta, alpha1, alpha2, p["stride"], p["pad"],
                                                 None, p["dilation"], p["groups"])
    exact = exact and algo.exact and mode in PIECEWISE_LINEAR
    testing.check_result(y, ref, dtype, exact, name=f"{algo.name} {mode.name}")
    return y


@pytest.mark.parametrize("mode", FUSED_MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_every_activation_every_forward_algorithm(algo, mode, rng):
    run_fused(algo.enum, mode, "float32", "NCHW", rng)


@pytest.mark.parametrize("mode", FUSED_MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype(mode, dtype, rng):
    run_fused(tridnn.ConvFwdAlgo.IMPLICIT_GEMM, mode, dtype, "NHWC", rng)


@pytest.mark.parametrize("layout", testing.LAYOUTS)
@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_layouts(algo, layout, rng):
    run_fused(algo.enum, M.RELU, "float32", layout, rng)


@pytest.mark.parametrize("alpha1,alpha2", [(1.0, 0.0), (2.0, 0.5), (-1.0, 1.0), (0.5, -2.0)])
@pytest.mark.parametrize("mode", [M.RELU, M.TANH], ids=lambda m: m.name)
def test_alpha1_alpha2(alpha1, alpha2, mode, rng):
    run_fused(tridnn.ConvFwdAlgo.IMPLICIT_GEMM, mode, "float32", "NCHW", rng, alpha1=alpha1, alpha2=alpha2)


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_residual_in_place(algo, rng):
    """z may be y itself: the residual is read block by block before that block is written."""
    run_fused(algo.enum, M.RELU, "float32", "NHWC", rng, z_is_y=True)


def test_alpha2_zero_does_not_read_z(rng):
    y = run_fused(tridnn.ConvFwdAlgo.IMPLICIT_GEMM, M.SIGMOID, "float32", "NCHW", rng, alpha2=0.0, z_nan=True)
    assert np.isfinite(y).all()


def test_depthwise_grouped_and_strided(rng):
    for p in (make_conv("dw", 6, 6, (8, 8), 3, 2, 1, groups=6), make_conv("g2", 4, 6, (7, 5), 3, 1, 2, 2, groups=2),
              make_conv("c1d", 3, 5, (11,), 5, 2, 2), make_conv("c3d", 2, 4, (4, 5, 3), 3, 1, 1)):
        run_fused(tridnn.ConvFwdAlgo.IMPLICIT_GEMM, M.GELU, "float32", "NCHW", rng, p=p)


def test_epilogue_runs_inside_the_algorithm(rng, monkeypatch):
    """The fused op hands an epilogue to the algorithm (no separate pass over y)."""
    algo = registry.by_enum("conv", "fwd", "numpy", tridnn.ConvFwdAlgo.IMPLICIT_GEMM)
    seen = []
    original = type(algo).run

    def spy(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        seen.append(epilogue)
        return original(self, problem, tensors, workspace, alpha, beta, epilogue=epilogue)

    monkeypatch.setattr(type(algo), "run", spy)
    run_fused(tridnn.ConvFwdAlgo.IMPLICIT_GEMM, M.RELU, "float32", "NCHW", rng)
    assert len(seen) == 1 and callable(seen[0])


def test_empty_batch(rng):
    conv = tridnn.ConvolutionDescriptor(padding=1)
    x_desc = tridnn.TensorDescriptor.packed((0, 2, 4, 4))
    w_desc = tridnn.FilterDescriptor((3, 2, 3, 3))
    y_desc = tridnn.TensorDescriptor.packed((0, 3, 4, 4))
    b_desc = tridnn.TensorDescriptor.packed((1, 3, 1, 1))
    empty = np.empty((0, 3, 4, 4), np.float32)
    handle = tridnn.Handle(find_cache=None)
    ws = handle.workspace(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc,
                                                                        "IMPLICIT_GEMM"))
    tridnn.convolution_bias_activation_forward(
        handle, 1.0, x_desc, np.empty((0, 2, 4, 4), np.float32), w_desc,
        np.ones((3, 2, 3, 3), np.float32), conv, "IMPLICIT_GEMM", ws, 1.0, y_desc, empty.copy(), b_desc,
        np.ones((1, 3, 1, 1), np.float32), ActivationDescriptor(M.RELU), y_desc, empty)
    assert empty.shape == (0, 3, 4, 4)


# -- errors ------------------------------------------------------------------------------------
def _setup():
    conv = tridnn.ConvolutionDescriptor(padding=1)
    x_desc = tridnn.TensorDescriptor.packed((1, 2, 4, 4))
    w_desc = tridnn.FilterDescriptor((3, 2, 3, 3))
    y_desc = tridnn.TensorDescriptor.packed((1, 3, 4, 4))
    arrays = dict(x=np.ones((1, 2, 4, 4), np.float32), w=np.ones((3, 2, 3, 3), np.float32),
                  z=np.ones((1, 3, 4, 4), np.float32), bias=np.ones((1, 3, 1, 1), np.float32),
                  y=np.full((1, 3, 4, 4), np.nan, np.float32))
    return conv, x_desc, w_desc, y_desc, arrays


def _call(conv, x_desc, w_desc, y_desc, a, act=None, bias_desc=None, z_desc=None, alpha2=1.0, z="z"):
    return tridnn.convolution_bias_activation_forward(
        tridnn.Handle(find_cache=None), 1.0, x_desc, a["x"], w_desc, a["w"], conv, "IMPLICIT_GEMM",
        np.empty(1 << 20, np.uint8), alpha2, z_desc or y_desc, a[z] if z else None,
        bias_desc or tridnn.TensorDescriptor.packed((1, 3, 1, 1)), a["bias"],
        act or ActivationDescriptor(M.RELU), y_desc, a["y"])


def test_activation_that_cannot_be_fused():
    conv, x_desc, w_desc, y_desc, a = _setup()
    with pytest.raises(NotSupportedError, match="LEAKY_RELU"):
        _call(conv, x_desc, w_desc, y_desc, a, act=ActivationDescriptor(M.LEAKY_RELU, coef=0.1))
    with pytest.raises(BadParamError, match="ActivationDescriptor"):
        _call(conv, x_desc, w_desc, y_desc, a, act="relu")
    assert np.isnan(a["y"]).all()


def test_bad_bias_and_z_descriptors():
    conv, x_desc, w_desc, y_desc, a = _setup()
    with pytest.raises(BadParamError, match=r"valid: \(1, 3, 1, 1\)"):
        _call(conv, x_desc, w_desc, y_desc, a, bias_desc=tridnn.TensorDescriptor.packed((1, 4, 1, 1)))
    with pytest.raises(BadParamError, match="must match y"):
        _call(conv, x_desc, w_desc, y_desc, a, z_desc=tridnn.TensorDescriptor.packed((1, 3, 4, 5)))
    with pytest.raises(BadParamError, match="z and z_desc are required"):
        _call(conv, x_desc, w_desc, y_desc, a, z=None)
    a["z"] = a["y"][:, :, :, :]
    a["z"] = np.lib.stride_tricks.as_strided(a["y"][:, 1:], (1, 3, 4, 4), a["y"].strides)
    with pytest.raises(BadParamError, match="partially overlaps"):
        _call(conv, x_desc, w_desc, y_desc, a)
    assert np.isnan(a["y"]).all()


def test_alpha2_zero_allows_no_z():
    conv, x_desc, w_desc, y_desc, a = _setup()
    _call(conv, x_desc, w_desc, y_desc, a, alpha2=0.0, z=None)
    assert np.isfinite(a["y"]).all() and (a["y"] > 0).all()
