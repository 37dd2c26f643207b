"""Backward data FFT, WINOGRAD and WINOGRAD_NONFUSED on the Triton backend
(cuda/conv_bwd_data_as_forward.py: the forward transform methods run on dy).

On the CPU through Triton's interpreter against the float64 reference: layouts, both
modes, alpha/beta, padding before and after, groups (one view, depthwise, a copy),
dilation, 1-D and 3-D for FFT; the refusals; the caller's dy and filter untouched. With
--gpu: real sizes.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_bwd_data_as_forward as as_forward  # noqa: E402

import test_cuda_conv as T  # noqa: E402


def problem_of(p, pad_post=None):
    return T.nhwc_problem("bwd_data", p, pad_post=pad_post)


NAMES = ["FFT", "WINOGRAD", "WINOGRAD_NONFUSED"]
ALGO = {n: registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo[n]) for n in NAMES}

CASES = [
    T.P(8, 6, (9, 10), 3, 1, 1),
    T.P(5, 7, (6, 7), 3, 1, 0),            # no padding: dx's border sums fewer taps
    T.P(16, 8, (8, 8), 3, 1, 2, 1, 2),     # padding 2 (the forward problem pads 0), two groups (a copy)
    T.P(6, 6, (7, 7), 3, 1, 1, 1, 6),      # depthwise (the filter as it is)
    T.P(4, 8, (6, 6), 3, 1, 1, 1, 4),      # depthwise with multiplier 2 (a copy)
]
FFT_ONLY = [
    T.P(4, 6, (9, 9), 5, 1, 2, 2),         # 5x5, dilation 2
    T.P(6, 4, (9,), 3, 1, 1),              # 1-D
    T.P(4, 4, (3, 4, 5), 3, 1, 1),         # 3-D
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("p", CASES, ids=[p["name"] for p in CASES])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_reference(name, p, layout, dtype, rng):
    assert T.run_case("bwd_data", ALGO[name], p, dtype, layout, rng, as_torch=True, alpha=1.5, beta=-0.5) is None


@pytest.mark.parametrize("p", FFT_ONLY, ids=[p["name"] for p in FFT_ONLY])
def test_fft_other_filters_and_ranks(p, rng):
    assert T.run_case("bwd_data", ALGO["FFT"], p, "float32", "NHWC", rng, as_torch=True) is None


@pytest.mark.parametrize("name", NAMES)
def test_convolution_mode_and_padding_after(name, rng):
    p = T.P(6, 5, (8, 9), 3, 1, 1)
    assert T.run_case("bwd_data", ALGO[name], p, "float32", "NHWC", rng, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None
    assert T.run_case("bwd_data", ALGO[name], p, "float32", "NCHW", rng, as_torch=True, pad_post=(0, 2)) is None


def test_float32_fma_takes_the_large_winograd_tile(rng, monkeypatch):
    """Under FMA math the staged Winograd runs F(4x4, 3x3) (winograd_f4) for dx too."""
    from tridnn.cuda import conv_winograd_nonfused as nonfused, winograd_f4
    seen = []
    real = nonfused.launch
    monkeypatch.setattr(nonfused, "launch", lambda k, *a, **kw: (seen.append(k), real(k, *a, **kw))[1])
    p = T.P(8, 6, (9, 10), 3, 1, 1)
    assert T.run_case("bwd_data", ALGO["WINOGRAD_NONFUSED"], p, "float32", "NHWC", rng, as_torch=True,
                      math=tridnn.MathType.FMA) is None
    assert winograd_f4.input_transform_kernel in seen


@pytest.mark.parametrize("p,pad_post,words", [
    (T.P(8, 8, (7, 7), 3, 2, 1), None, "stride 1"),
    (T.P(8, 8, (7, 7), 3, 1, 3), None, "negative padding"),
    (T.P(8, 8, (7, 7), 3, 1, 1), (1, 3), "3 after"),
])
def test_refusals_name_the_reason(p, pad_post, words):
    problem = problem_of(p, pad_post)
    for name in NAMES:
        reason = ALGO[name].not_applicable(problem)
        assert reason and words in reason, (name, reason)


def test_forward_problem_swaps_roles_and_turns_the_filter():
    problem = problem_of(T.P(16, 8, (8, 8), 3, 1, 0, 1, 2))
    fwd = as_forward.forward_problem(problem)
    assert fwd.direction == "fwd"
    assert fwd.x == problem.y and fwd.y == problem.x
    assert fwd.w.dims == (16, 4, 3, 3)           # C, K / groups
    assert fwd.pad_pre == (2, 2) and fwd.pad_post == (2, 2)
    assert fwd.mode == tridnn.ConvMode.CONVOLUTION
    assert as_forward.forward_problem(problem) is fwd   # built once


@pytest.mark.parametrize("name", NAMES)
def test_leaves_dy_and_the_filter_untouched(name, rng):
    """The grouped case copies the swapped filter into the workspace, never into w."""
    p = T.P(8, 4, (6, 6), 3, 1, 1, 1, 2)
    cd = T.conv(p)
    x_desc, dx = testing.make_tensor((2, 8, 6, 6), "float32", "NHWC", rng)
    w_vals = testing.fill((4, 4, 3, 3), "float32", rng)
    w_desc, w = testing.make_filter(w_vals.shape, "float32", "NCHW", w_vals)
    y_desc, dy = testing.make_tensor(cd.output_dims(x_desc, w_desc), "float32", "NHWC", rng,
                                     testing.fill(cd.output_dims(x_desc, w_desc), "float32", rng))
    problem = ConvProblem("bwd_data", x_desc, w_desc, y_desc, cd)
    tw, tdy, tdx = (T._to_torch(a, "cpu") for a in (w, dy, dx))
    before = (tw.clone(), tdy.clone())
    ws = torch.empty(ALGO[name].workspace_size(problem), dtype=torch.uint8)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    tridnn.convolution_backward_data(handle, 1.0, w_desc, tw, y_desc, tdy, cd, name, ws, 0.0, x_desc, tdx)
    assert torch.equal(tw, before[0]) and torch.equal(tdy, before[1])
    assert not torch.isnan(tdx).any()


def test_listed_by_get_and_find():
    """get ranks the new methods with the rest on a 3x3 stride-1 problem."""
    problem = problem_of(T.P(16, 16, (8, 8), 3, 1, 1))
    listed = {a.name for a in registry.algorithms("conv", "bwd_data", "triton") if a.not_applicable(problem) is None}
    assert set(NAMES) <= listed, listed


GPU_CASES = [T.P(128, 128, (28, 28), 3, 1, 1), T.P(64, 64, (56, 56), 3, 1, 1), T.P(96, 80, (17, 23), 3, 1, 1, 1, 2),
             T.P(144, 144, (28, 28), 3, 1, 1, 1, 144)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("p", GPU_CASES, ids=[p["name"] for p in GPU_CASES])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_against_float64(name, p, dtype, rng):
    reason = T.run_case("bwd_data", ALGO[name], p, dtype, "NHWC", rng, n=4, device="cuda", beta=0.5)
    assert reason is None, reason
