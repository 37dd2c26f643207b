"""FFT_TILING forward and backward data on the Triton backend (cuda/conv_fft_tiling.py; backward
data is the forward method on dy, cuda/conv_bwd_data_as_forward.py).

On the CPU through Triton's interpreter against the float64 reference: planes of several
tiles with tails, strides, a dilated 5x5, groups, depthwise, 1-D and 3-D, layouts, both modes,
alpha/beta, the fused epilogue, the tiling arithmetic and the refusals. With --gpu: real sizes.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_fft_tiling as tiling  # noqa: E402
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode  # noqa: E402

import test_cuda_conv as T  # noqa: E402

FWD = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.FFT_TILING)
BWD = registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.FFT_TILING)
CASES = [T.P(4, 6, (20, 19), 3, 1, 1),            # 2 x 2 tiles of 14 outputs, tails
         T.P(4, 6, (21, 17), 5, 1, 4, 2),         # dilated 5x5: span 9, tiles of 10 outputs
         T.P(6, 6, (19, 18), 3, 1, 1, 1, 6),      # depthwise
         T.P(4, 8, (20, 20), 3, 1, 1, 1, 2),      # two groups
         T.P(3, 4, (70,), 5, 1, 2),               # 1-D: tiles of 64 points
         T.P(3, 4, (10, 9, 11), 3, 1, 1)]         # 3-D: tiles of 8 points


@pytest.mark.parametrize("p", CASES, ids=[p["name"] for p in CASES])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_matches_reference(p, layout, direction, rng):
    algo = FWD if direction == "fwd" else BWD
    assert T.run_case(direction, algo, p, "float32", layout, rng, as_torch=True, alpha=1.5, beta=-0.5) is None


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_float16_convolution_mode_padding_after(direction, rng):
    algo = FWD if direction == "fwd" else BWD
    p = T.P(5, 4, (18, 23), 3, 1, 1)
    assert T.run_case(direction, algo, p, "float16", "NHWC", rng, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None
    assert T.run_case(direction, algo, p, "float32", "NCHW", rng, as_torch=True, pad_post=(0, 2)) is None


def test_forward_strided(rng):
    """A stride picks every other stride-1 output from its tile."""
    assert T.run_case("fwd", FWD, T.P(5, 4, (18, 23), 3, 2, 1), "float32", "NHWC", rng, as_torch=True) is None


def test_fused_epilogue(rng):
    dtype = "float32"
    cd = tridnn.ConvolutionDescriptor(padding=1)
    x_vals = testing.fill((2, 4, 20, 19), dtype, rng)
    w_vals = testing.fill((6, 4, 3, 3), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), dtype, "NHWC", rng)
    z_vals = testing.fill(y_desc.dims, dtype, rng)
    z_desc, z = testing.make_tensor(y_desc.dims, dtype, "NCHW", rng, z_vals)
    b_vals = testing.fill((1, 6, 1, 1), dtype, rng)
    b_desc, bias = testing.make_tensor((1, 6, 1, 1), dtype, "NCHW", rng, b_vals)
    act = ActivationDescriptor(ActivationMode.RELU)
    want = reference.fused.conv_bias_activation_forward(x_vals, w_vals, z_vals, b_vals, act.mode, 0.0, 1.0,
                                                         alpha1=2.0, alpha2=0.5, stride=1, pad_pre=1)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    ws = np.empty(FWD.workspace_size(problem), np.uint8)
    testing.poison(y)
    tridnn.convolution_bias_activation_forward(handle, 2.0, x_desc, x, w_desc, w, cd, "FFT_TILING", ws, 0.5,
                                               z_desc, z, b_desc, bias, act, y_desc, y)
    testing.assert_all_written(y, "FFT_TILING")
    scale = np.abs(2.0 * reference.conv_forward(x_vals, w_vals, 1, 1) + 0.5 * z_vals).max()
    np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=0, atol=2e-5 * scale)


def test_tiling_covers_the_padded_plane():
    """20 + 2 padding, 3x3: 16-point tiles of 14 valid outputs, 2 tiles (28 outputs >= 20)
    from a padded extent of 30; a dilated 5x5 (span 9) takes 10 valid of 18 (2 x span, smooth)."""
    sizes, valid, counts, padded = tiling.tiling(T.nhwc_problem("fwd", T.P(4, 4, (20, 20), 3, 1, 1)))
    assert sizes == (16, 16) and valid == (14, 14) and counts == (2, 2) and padded == (30, 30)
    sizes, valid, counts, _ = tiling.tiling(T.nhwc_problem("fwd", T.P(4, 4, (21, 17), 5, 1, 4, 2)))
    assert sizes == (18, 18) and valid == (10, 10) and counts == (3, 2)


@pytest.mark.parametrize("p,words", [(T.P(8, 8, (8, 8), 3, 1, 1), "one"), (T.P(8, 8, (20, 20), 1, 1, 0), "1x1")])
def test_refusals_name_the_reason(p, words):
    reason = FWD.not_applicable(T.nhwc_problem("fwd", p))
    assert reason and words in reason, reason


GPU_CASES = [T.P(64, 64, (56, 56), 3, 1, 1), T.P(32, 48, (64, 64), 5, 1, 4, 2), T.P(96, 80, (37, 41), 3, 1, 1, 1, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("p", GPU_CASES, ids=[p["name"] for p in GPU_CASES])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_against_float64(p, direction, dtype, rng):
    algo = FWD if direction == "fwd" else BWD
    assert T.run_case(direction, algo, p, dtype, "NHWC", rng, n=4, device="cuda", beta=0.5) is None
