"""Backward filter FFT and FFT_TILING on the Triton backend (cuda/conv_bwd_filter_fft.py).

On the CPU through Triton's interpreter against the float64 reference: every problem shape
of test_cuda_conv (strides, dilation, padding wider than the filter, groups, depthwise, 1-D,
3-D), a 5x5 dilated filter, layouts, both modes, alpha/beta, the same bits twice, the
caller's x and dy untouched; FFT_TILING on planes of several tiles, its tiling arithmetic and
refusals. With --gpu: real sizes.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

import test_cuda_conv as T  # noqa: E402


def problem_of(p, n=2):
    return T.nhwc_problem("bwd_filter", p, n)


ALGO = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.FFT)
TILING = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.FFT_TILING)
CASES = T.PROBLEMS + [T.P(4, 6, (9, 9), 5, 1, 2, 2)]


@pytest.mark.parametrize("p", CASES, ids=[p["name"] for p in CASES])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_reference(p, layout, dtype, rng):
    assert T.run_case("bwd_filter", ALGO, p, dtype, layout, rng, as_torch=True, alpha=1.5, beta=-0.5) is None


@pytest.mark.parametrize("p", CASES[:4], ids=[p["name"] for p in CASES[:4]])
def test_strided_layout_convolution_mode_beta_zero(p, rng):
    """beta = 0 on a NaN-poisoned dw: the old values are never read."""
    assert T.run_case("bwd_filter", ALGO, p, "float32", "strided", rng, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None


def test_same_bits_twice_and_inputs_untouched(rng):
    p = T.P(6, 8, (7, 6), 3, 2, 1, 1, 2)
    cd = T.conv(p)
    x_desc, x = testing.make_tensor((3, 6, 7, 6), "float32", "NHWC", rng, testing.fill((3, 6, 7, 6), "float32", rng))
    w_desc, w = testing.make_filter((8, 3, 3, 3), "float32", "NHWC")
    y_dims = cd.output_dims(x_desc, w_desc)
    y_desc, dy = testing.make_tensor(y_dims, "float32", "NHWC", rng, testing.fill(y_dims, "float32", rng))
    problem = ConvProblem("bwd_filter", x_desc, w_desc, y_desc, cd)
    tx, tdy, tw = (T._to_torch(a, "cpu") for a in (x, dy, w))
    before = (tx.clone(), tdy.clone())
    ws = torch.empty(ALGO.workspace_size(problem), dtype=torch.uint8)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    results = []
    for _ in range(2):
        tw.fill_(float("nan"))
        tridnn.convolution_backward_filter(handle, 1.0, x_desc, tx, y_desc, tdy, cd, "FFT", ws, 0.0, w_desc, tw)
        results.append(tw.clone())
    assert not torch.isnan(results[0]).any()
    assert torch.equal(results[0], results[1])
    assert torch.equal(tx, before[0]) and torch.equal(tdy, before[1])
    assert ALGO.deterministic and not ALGO.exact


TILED = [T.P(4, 6, (20, 19), 3, 1, 1),          # dy 20x19: 2 x 2 tiles of 14
         T.P(5, 4, (38, 24), 3, 2, 0),          # stride 2: dy spread to 35 x 21
         T.P(4, 6, (21, 17), 5, 1, 4, 2),       # dilated 5x5 (span 9): tiles of 10 in 18 points
         T.P(6, 6, (19, 18), 3, 1, 1, 1, 6),    # depthwise
         T.P(4, 8, (20, 20), 3, 1, 1, 1, 2),    # two groups
         T.P(3, 4, (70,), 5, 1, 2),             # 1-D
         T.P(3, 4, (10, 9, 11), 3, 1, 1)]       # 3-D


@pytest.mark.parametrize("p", TILED, ids=[p["name"] for p in TILED])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_tiling_matches_reference(p, layout, rng):
    assert T.run_case("bwd_filter", TILING, p, "float32", layout, rng, as_torch=True, alpha=1.5, beta=-0.5) is None


def test_tiling_float16_strided_convolution_mode(rng):
    p = T.P(5, 4, (18, 23), 3, 1, 1)
    assert T.run_case("bwd_filter", TILING, p, "float16", "NHWC", rng, as_torch=True) is None
    assert T.run_case("bwd_filter", TILING, p, "float32", "strided", rng, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None


def test_tiling_arithmetic():
    """Stride 2 on 38 rows, no padding: dy has 18 rows, spread to 35; tiles of 14 (16 points
    less the 3x3's span 3 plus one) need 3, and the windows reach 3 * 14 + 2 = 44 >= 38 rows."""
    from tridnn.cuda.conv_bwd_filter_fft import wgrad_tiling
    sizes, valid, counts, extents = wgrad_tiling(problem_of(T.P(5, 4, (38, 24), 3, 2, 0)))
    assert sizes == (16, 16) and valid == (14, 14) and counts == (3, 2) and extents == (44, 30)


@pytest.mark.parametrize("p,words", [(T.P(8, 8, (8, 8), 3, 1, 1), "one"), (T.P(8, 8, (20, 20), 1, 1, 0), "1x1")])
def test_tiling_refusals_name_the_reason(p, words):
    reason = TILING.not_applicable(problem_of(p))
    assert reason and words in reason, reason


GPU_CASES = [T.P(64, 64, (56, 56), 3, 1, 1), T.P(128, 128, (28, 28), 3, 2, 1), T.P(32, 48, (33, 33), 5, 1, 4, 2),
             T.P(96, 80, (17, 23), 3, 1, 1, 1, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("p", GPU_CASES, ids=[p["name"] for p in GPU_CASES])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", ["FFT", "FFT_TILING"])
def test_gpu_against_float64(p, dtype, name, rng):
    algo = ALGO if name == "FFT" else TILING
    assert T.run_case("bwd_filter", algo, p, dtype, "NHWC", rng, n=4, device="cuda", beta=0.5) is None


# -- torch.fft in runs of planes (conv_fft.transform) ---------------------------------------------
def test_transform_runs_match_one_call(rng, monkeypatch):
    """Both run shapes (whole images, channels within an image) give what one call gives (to
    rounding: a batched FFT may order its sums differently), for the real-to-complex and
    complex-to-real transforms on frequency-major strided views."""
    from tridnn.cuda import conv_fft
    # [images, channels, *spatial] = [6, 4, 3, 5] over a frequency-major buffer [3, 5, 6, 4]
    src = torch.from_numpy(rng.standard_normal((3, 5, 6, 4)).astype("float32")).permute(2, 3, 0, 1)
    whole = torch.fft.rfftn(src, dim=(2, 3))
    back = torch.fft.irfftn(whole, s=(3, 5), dim=(2, 3))
    plane = whole[0, 0].numel() * whole.element_size()
    for chunk in (1, 2 * plane):  # one plane a call; two planes: runs of channels
        monkeypatch.setattr(conv_fft, "TRANSFORM_CHUNK_BYTES", chunk)
        spec = torch.full_like(whole, float("nan"))
        conv_fft.transform(torch.fft.rfftn, src, spec, (2, 3))
        torch.testing.assert_close(spec, whole, rtol=1e-6, atol=1e-6)
        got = torch.full_like(back, float("nan"))
        conv_fft.transform(torch.fft.irfftn, whole, got, (2, 3), s=(3, 5))
        torch.testing.assert_close(got, back, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(conv_fft, "TRANSFORM_CHUNK_BYTES", 5 * plane)  # runs of one image (5 >= 4 planes)
    calls = []
    spec = torch.full_like(whole, float("nan"))
    conv_fft.transform(lambda s, **kw: calls.append(s.shape) or torch.fft.rfftn(s, **kw), src, spec, (2, 3))
    torch.testing.assert_close(spec, whole, rtol=1e-6, atol=1e-6)
    assert calls == [(1, 4, 3, 5)] * 6
    empty = torch.zeros(0, 4, 3, 3, dtype=torch.complex64)  # no planes: no call (torch.fft rejects it)
    conv_fft.transform(lambda s, **kw: calls.append(s.shape), src[:0], empty, (2, 3))
    assert len(calls) == 6


CHUNKED = [("fwd", tridnn.ConvFwdAlgo.FFT), ("fwd", tridnn.ConvFwdAlgo.FFT_TILING),
           ("bwd_data", tridnn.ConvBwdDataAlgo.FFT), ("bwd_filter", tridnn.ConvBwdFilterAlgo.FFT),
           ("bwd_filter", tridnn.ConvBwdFilterAlgo.FFT_TILING)]


@pytest.mark.parametrize("direction, enum", CHUNKED, ids=[f"{d}-{e.name}" for d, e in CHUNKED])
def test_fft_methods_with_one_plane_a_transform(direction, enum, rng, monkeypatch):
    """Every FFT method with its transforms cut to one plane a call (as 2^31-element problems
    are) still matches the float64 reference, and really ran in pieces."""
    from tridnn.cuda import conv_fft
    monkeypatch.setattr(conv_fft, "TRANSFORM_CHUNK_BYTES", 1)
    calls = []
    for name in ("rfftn", "irfftn"):
        real = getattr(torch.fft, name)
        monkeypatch.setattr(torch.fft, name, lambda *a, _real=real, **kw: calls.append(1) or _real(*a, **kw))
    algo = registry.by_enum("conv", direction, "triton", enum)
    p = T.P(4, 6, (20, 19), 3, 1, 1, 1, 2)  # stride 1 (backward data FFT), 2 x 2 tiles (FFT_TILING)
    assert T.run_case(direction, algo, p, "float32", "NHWC", rng, as_torch=True, alpha=1.5, beta=-0.5) is None
    # at least one call per plane of the transform over the images' planes (2 images x 4 or 6)
    assert len(calls) >= 2 * 4 + 2 * 6, len(calls)
