"""WINOGRAD_NONFUSED's F(4x4, 3x3) kernels (cuda/winograd_f4.py) for float32 data.

On the CPU through Triton's interpreter: each transform against the CPU's F(4x4) matrices,
the tile choice, the whole algorithm through the public API against the float64 reference
(layouts, odd sizes, padding, groups, CONVOLUTION mode, alpha/beta, the fused epilogue),
and sm_90 compiles without register spills. With --gpu: real sizes against float64.
"""
import re
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cpu.conv_winograd import matrices  # noqa: E402
from tridnn.cuda import conv_winograd_nonfused as nonfused, winograd_f4 as f4  # noqa: E402
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode  # noqa: E402

import test_cuda_conv as T  # noqa: E402

ALGO = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.WINOGRAD_NONFUSED)
FMA, DEFAULT, TENSOR_OP = tridnn.MathType.FMA, tridnn.MathType.DEFAULT, tridnn.MathType.TENSOR_OP
AT, G, BT = matrices(4)


def problem_of(p, dtype=tridnn.DataType.FLOAT, math=FMA, n=2):
    return T.nhwc_problem("fwd", p, n, dtype, math)


@pytest.fixture
def launched(monkeypatch):
    """The kernels WINOGRAD_NONFUSED launches, recorded."""
    seen = []
    real = nonfused.launch

    def spy(kernel, *args, **kw):
        seen.append(kernel)
        return real(kernel, *args, **kw)
    monkeypatch.setattr(nonfused, "launch", spy)
    return seen


# -- the transforms, one at a time ------------------------------------------------------------
def test_input_transform_is_bt_d_b(rng):
    """One 6x6 image (no padding) is one tile: V[6i + j] = (B^T d B)[i, j] per channel."""
    d = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    x = torch.from_numpy(d)
    v = torch.full((36, 1, 1, 3), float("nan"))
    f4.input_transform_kernel[(1, 1, 1)](x, v, 1, 3, 6, 6, 1, 1, 0, 0, *x.stride(),
                                         BLOCK_M=16, BLOCK_C=16, INT64=False)
    want = np.einsum("ab,cbd,ed->aec", BT, d[0].astype(np.float64), BT).reshape(36, 3)
    np.testing.assert_allclose(v.numpy().reshape(36, 3), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flip", [False, True])
def test_filter_transform_is_g_w_gt(flip, rng):
    w = rng.standard_normal((5, 2, 3, 3)).astype(np.float32)   # K, C, 3, 3
    u = torch.full((36, 2, 5), float("nan"))
    tw = torch.from_numpy(w)
    f4.filter_transform_kernel[(1, 1, 1)](tw, u, 2, 5, *tw.stride(), BLOCK_C=16, BLOCK_N=16, FLIP=flip)
    g = w[:, :, ::-1, ::-1] if flip else w
    want = np.einsum("ab,kcbd,ed->aeck", G, g.astype(np.float64), G).reshape(36, 2, 5)
    np.testing.assert_allclose(u.numpy(), want, rtol=1e-6, atol=1e-6)


def test_output_transform_is_at_m_a_clipped_to_the_image(rng):
    """Two tiles along w of a 4x6 output: the second tile's last two columns fall outside and
    are not stored; alpha scales, beta blends."""
    m = rng.standard_normal((36, 2, 3)).astype(np.float32)      # points, tiles, K
    prior = rng.standard_normal((1, 3, 4, 6)).astype(np.float32)
    y = torch.from_numpy(prior.copy())
    mt = torch.from_numpy(m)
    f4.output_transform_kernel[(1, 1, 1)](mt, y, y, y, 2, 3, 4, 6, 1, 2, *y.stride(), 0, 0, 0, 0, 0,
                                          2.0, 0.5, 0.0, 0.0, 0.0, BLOCK_M=16, BLOCK_N=16, ACT=-1,
                                          HAS_BIAS=False, HAS_Z=False, BETA_ZERO=False, INT64=False)
    conv = np.zeros((3, 4, 8))
    for t in range(2):
        for k in range(3):
            conv[k, :, 4 * t:4 * t + 4] = AT @ m[:, t, k].astype(np.float64).reshape(6, 6) @ AT.T
    conv = conv[:, :, :6]
    np.testing.assert_allclose(y.numpy()[0], 2.0 * conv + 0.5 * prior[0], rtol=1e-5, atol=1e-5)


# -- which tile ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,math,spatial,want", [
    (tridnn.DataType.FLOAT, FMA, (8, 8), 4),
    (tridnn.DataType.FLOAT, DEFAULT, (56, 56), 4),
    (tridnn.DataType.FLOAT, FMA, (5, 6), 2),        # 9 F(2x2) tiles or 4 F(4x4): 144 multiplies each
    (tridnn.DataType.FLOAT, TENSOR_OP, (56, 56), 2),  # tf32 operands: F(4x4) amplifies their rounding
    (tridnn.DataType.HALF, FMA, (56, 56), 2),
    (tridnn.DataType.BFLOAT16, DEFAULT, (56, 56), 2),
])
def test_tile_choice(dtype, math, spatial, want):
    problem = problem_of(T.P(8, 8, spatial, 3, 1, 1), dtype, math)
    assert nonfused.tile_of(problem) == want
    points = (want + 2) ** 2
    assert ALGO.workspace_size(problem) > 0
    assert [b.shape[0] for b in ALGO.buffers(problem)] == [points] * 3


def test_estimate_prefers_the_larger_tile_where_it_saves_multiplies(monkeypatch):
    """The same problem under FMA (F(4x4)) and TENSOR_OP (F(2x2)): F(4x4)'s GEMM is 2.25/4 of
    F(2x2)'s, so the estimate must be lower at equal rates; checked through the savings
    factor the estimate passes on."""
    seen = {}
    real = nonfused.winograd_estimate

    def spy(problem, efficiency, savings):
        seen[problem.math_type] = savings
        return real(problem, efficiency, savings)
    monkeypatch.setattr(nonfused, "winograd_estimate", spy)
    for math in (FMA, TENSOR_OP):
        ALGO.estimate(problem_of(T.P(64, 64, (56, 56), 3, 1, 1), math=math))
    assert seen[TENSOR_OP] == pytest.approx(36 / 16)
    assert seen[FMA] == pytest.approx(4.0)


# -- the whole algorithm through the API ------------------------------------------------------
CASES = [T.P(8, 6, (9, 10), 3, 1, 1),       # output 9x10: tiles past both edges
         T.P(5, 7, (6, 13), 3, 1, 0),       # no padding, output 4x11
         T.P(16, 8, (8, 8), 3, 1, 2, 1, 2),  # padding 2, two groups
         T.P(3, 4, (12, 12), 3, 1, 1)]


@pytest.mark.parametrize("p", CASES, ids=[p["name"] for p in CASES])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("math", [FMA, DEFAULT], ids=["FMA", "DEFAULT"])
def test_forward_matches_reference(p, layout, math, rng, launched):
    assert T.run_case("fwd", ALGO, p, "float32", layout, rng, as_torch=True, math=math) is None
    assert f4.input_transform_kernel in launched and f4.output_transform_kernel in launched


def test_convolution_mode_alpha_beta(rng, launched):
    p = T.P(6, 5, (9, 9), 3, 1, 1)
    assert T.run_case("fwd", ALGO, p, "float32", "NHWC", rng, as_torch=True, math=FMA, alpha=1.5, beta=-0.5,
                      mode=tridnn.ConvMode.CONVOLUTION) is None
    assert f4.filter_transform_kernel in launched


def test_tf32_keeps_the_small_tile(rng, launched):
    p = T.P(8, 6, (9, 10), 3, 1, 1)
    assert T.run_case("fwd", ALGO, p, "float32", "NHWC", rng, as_torch=True, math=TENSOR_OP) is None
    assert launched and f4.input_transform_kernel not in launched


def test_random_data_error_is_float32_level(rng):
    """Standard-normal data, 32 channels: F(4x4)'s error stays well inside float32's
    tolerance (emulated: 1.1e-6 of max |y|; tf32 operands would give ~1e-2)."""
    n, c, k, h = 2, 32, 8, 12
    x = rng.standard_normal((n, c, h, h)).astype(np.float32)
    w = (rng.standard_normal((k, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    cd = tridnn.ConvolutionDescriptor(padding=1, math_type=FMA)
    x_desc = tridnn.TensorDescriptor.nhwc(n, c, h, h)
    w_desc = tridnn.FilterDescriptor((k, c, 3, 3))
    y_desc = tridnn.TensorDescriptor.nhwc(n, k, h, h)
    xt = torch.from_numpy(x).to(memory_format=torch.channels_last)
    y = torch.full((n, k, h, h), float("nan")).to(memory_format=torch.channels_last)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None, math_type=FMA)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    assert nonfused.tile_of(problem) == 4
    ws = torch.empty(ALGO.workspace_size(problem), dtype=torch.uint8)
    tridnn.convolution_forward(handle, 1.0, x_desc, xt, w_desc, torch.from_numpy(w), cd, "WINOGRAD_NONFUSED", ws,
                               0.0, y_desc, y)
    want = reference.conv_forward(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1), None, (1, 1), 1,
                                  "cross_correlation")
    err = np.abs(y.numpy().astype(np.float64) - want).max() / np.abs(want).max()
    assert err < 5e-6, err


def test_fused_epilogue(rng, launched):
    """act(alpha1 * conv + alpha2 * z + bias) through convolution_bias_activation_forward."""
    dtype = "float32"
    cd = tridnn.ConvolutionDescriptor(padding=1, math_type=FMA)
    x_vals = testing.fill((2, 6, 9, 10), dtype, rng)
    w_vals = testing.fill((8, 6, 3, 3), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), dtype, "NHWC", rng)
    z_vals = testing.fill(y_desc.dims, dtype, rng)
    z_desc, z = testing.make_tensor(y_desc.dims, dtype, "NCHW", rng, z_vals)
    b_vals = testing.fill((1, 8, 1, 1), dtype, rng)
    b_desc, bias = testing.make_tensor((1, 8, 1, 1), dtype, "NCHW", rng, b_vals)
    act = ActivationDescriptor(ActivationMode.CLIPPED_RELU, coef=1.5)
    want = reference.fused.conv_bias_activation_forward(x_vals, w_vals, z_vals, b_vals, act.mode, 1.5, 1.0,
                                                         alpha1=2.0, alpha2=0.5, stride=1, pad_pre=1)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None, math_type=FMA)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    ws = np.empty(ALGO.workspace_size(problem), np.uint8)
    testing.poison(y)
    tridnn.convolution_bias_activation_forward(handle, 2.0, x_desc, x, w_desc, w, cd, "WINOGRAD_NONFUSED", ws,
                                               0.5, z_desc, z, b_desc, bias, act, y_desc, y)
    testing.assert_all_written(y, "WINOGRAD_NONFUSED")
    # the transform's error scales with the pre-activation values (up to ~100 here), not with
    # the clipped output: float32's pointwise tolerance against their largest magnitude
    scale = np.abs(2.0 * reference.conv_forward(x_vals, w_vals, 1, 1) + 0.5 * z_vals).max()
    np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=0, atol=2e-5 * scale)
    assert f4.output_transform_kernel in launched


# -- sm_90 compiles -----------------------------------------------------------------------------
F32 = dict.fromkeys(("x_ptr", "v_ptr", "w_ptr", "u_ptr", "m_ptr", "y_ptr", "bias_ptr", "z_ptr"), "*fp32")
SCALARS = dict.fromkeys(("alpha", "beta", "alpha2", "coef", "swish_beta"), "fp32")
COMPILES = {
    "input": ("input_transform_kernel", dict(INT64=True)),
    "filter": ("filter_transform_kernel", dict(FLIP=True)),
    "output-beta-z-bias": ("output_transform_kernel", dict(ACT=1, HAS_BIAS=True, HAS_Z=True, BETA_ZERO=False,
                                                           INT64=False)),
    "output-plain": ("output_transform_kernel", dict(ACT=-1, HAS_BIAS=False, HAS_Z=False, BETA_ZERO=True,
                                                     INT64=False)),
}


def test_compiles_for_sm90_without_spills():
    """The GPU launch shapes (nonfused.launch_blocks) keep every live value in registers:
    no local-memory loads or stores in the sm_90 SASS."""
    from gluon_helpers import compile_in_child
    names = {"input": ("BLOCK_M", "BLOCK_C"), "filter": ("BLOCK_C", "BLOCK_N"), "output": ("BLOCK_M", "BLOCK_N")}
    specs = []
    for which, (kernel, consts) in COMPILES.items():
        stage = which.split("-")[0]
        rows, cols, warps = nonfused.launch_blocks(4, True)[stage]
        args = getattr(f4, kernel).arg_names
        types = {a: t for a, t in {**F32, **SCALARS}.items() if a in args}
        specs.append(["tridnn.cuda.winograd_f4", kernel, types,
                      {**consts, names[stage][0]: rows, names[stage][1]: cols}, warps])
    facts = compile_in_child([("gluon_helpers", "compile_triton_sm90", spec, {}) for spec in specs])
    for which, f in zip(COMPILES, facts):
        assert "STG" in f["sass"], which
        spills = len(re.findall(r"\b(STL|LDL)\b", f["sass"]))
        assert spills == 0, (which, spills, f["regs"])


# -- real sizes on the GPU ----------------------------------------------------------------------
GPU_CASES = [T.P(128, 128, (28, 28), 3, 1, 1), T.P(64, 64, (56, 56), 3, 1, 1), T.P(512, 512, (7, 7), 3, 1, 1),
             T.P(96, 80, (17, 23), 3, 1, 1, 1, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("p", GPU_CASES, ids=[p["name"] for p in GPU_CASES])
@pytest.mark.parametrize("math", [FMA, DEFAULT], ids=["FMA", "DEFAULT"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_gpu_against_float64(p, math, layout, rng, launched):
    assert T.run_case("fwd", ALGO, p, "float32", layout, rng, n=4, device="cuda", math=math) is None
    assert f4.input_transform_kernel in launched


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
