"""Backward filter WINOGRAD_NONFUSED on the Triton backend (cuda/conv_bwd_filter_winograd.py).

On the CPU through Triton's interpreter: the transforms against the CPU's F(3x3, 2x2)
matrices, the algorithm through the public API against the float64 reference (layouts,
odd sizes, padding, groups, depthwise, both modes, alpha/beta) with the tiles in one slice
and in many, the slice count, the refusals. With --gpu: real sizes.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cpu.conv_winograd import matrices  # noqa: E402
from tridnn.cuda import conv_bwd_filter_winograd as wino  # noqa: E402

import test_cuda_conv as T  # noqa: E402


def problem_of(p, n=2):
    return T.nhwc_problem("bwd_filter", p, n)


ALGO = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.WINOGRAD_NONFUSED)
AT, G, BT = matrices(3, 2)


def test_input_transform_is_bt_d_b(rng):
    """A 4x4 image without padding is one tile: V[4i + j] = (B^T d B)[i, j]; the padding row
    (T_ROWS = 2 > T = 1) is zeros."""
    d = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    x = torch.from_numpy(d)
    v = torch.full((16, 1, 2, 3), float("nan"))
    wino.input_transform_kernel[(1, 1, 1)](x, v, 1, 2, 3, 4, 4, 1, 1, 0, 0, *x.stride(),
                                           BLOCK_T=16, BLOCK_C=16, INT64=False)
    want = np.einsum("ab,cbd,ed->aec", BT, d[0].astype(np.float64), BT).reshape(16, 3)
    np.testing.assert_allclose(v.numpy()[:, 0, 0], want, rtol=1e-6, atol=1e-6)
    assert torch.equal(v[:, 0, 1], torch.zeros(16, 3))


def test_dy_transform_is_g_e_gt_with_zeros_past_the_edge(rng):
    """A 3x3 dy is 2x2 tiles; the last tile row and column reach past dy and read zeros."""
    e = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    dy = torch.from_numpy(e)
    u = torch.full((16, 1, 4, 2), float("nan"))
    wino.dy_transform_kernel[(1, 1, 1)](dy, u, 4, 4, 2, 3, 3, 2, 2, *dy.stride(), BLOCK_T=16, BLOCK_K=16, INT64=False)
    padded = np.zeros((2, 4, 4))
    padded[:, :3, :3] = e[0]
    for t, (i, j) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        tile = padded[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
        want = np.einsum("ab,kbd,ed->aek", G, tile, G).reshape(16, 2)
        np.testing.assert_allclose(u.numpy()[:, 0, t], want, rtol=1e-6, atol=1e-6)


CASES = [T.P(8, 6, (9, 10), 3, 1, 1),
         T.P(5, 7, (6, 7), 3, 1, 0),            # no padding
         T.P(16, 8, (8, 8), 3, 1, 2, 1, 2),     # padding 2, two groups
         T.P(6, 6, (7, 7), 3, 1, 1, 1, 6)]      # depthwise


@pytest.mark.parametrize("p", CASES, ids=[p["name"] for p in CASES])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_reference(p, layout, dtype, rng):
    assert T.run_case("bwd_filter", ALGO, p, dtype, layout, rng, as_torch=True, alpha=1.5, beta=-0.5) is None


@pytest.mark.parametrize("p", CASES, ids=[p["name"] for p in CASES])
def test_many_slices_convolution_mode(p, rng, monkeypatch):
    """Slices of 4 tiles (SLICE_MIN lowered): the slice sums and their order are exercised."""
    monkeypatch.setattr(wino, "SLICE_MIN", 4)
    problem = problem_of(p)
    assert ALGO._layout(problem)[0] > 1
    assert T.run_case("bwd_filter", ALGO, p, "float32", "NHWC", rng, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None


def test_slices_fill_the_gpu_but_sum_enough_tiles():
    """res3_3x3 at batch 64 (one 128 x 128 GEMM tile a point): 16 GEMMs need slices to fill
    132 SMs twice; a tiny problem keeps one slice."""
    big = problem_of(T.P(128, 128, (28, 28), 3, 1, 1), n=64)
    S = wino.slices(big, 1)
    assert S == 17 and wino.tiles(big)[0] // S >= wino.SLICE_MIN
    assert wino.slices(problem_of(T.P(8, 8, (6, 6), 3, 1, 1)), 1) == 1


@pytest.mark.parametrize("p,words", [(T.P(8, 8, (7, 7), 3, 2, 1), "stride"), (T.P(8, 8, (7, 7), 5, 1, 2), "3x3"),
                                     (T.P(6, 4, (9,), 3, 1, 1), "2-D")])
def test_refusals_name_the_reason(p, words):
    cd = T.conv(p)
    nd = len(p["spatial"])
    x = tridnn.TensorDescriptor.nhwc(2, p["C"], *p["spatial"]) if nd == 2 else \
        tridnn.TensorDescriptor((2, p["C"], *p["spatial"]))
    w = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]))
    problem = ConvProblem("bwd_filter", x, w, x.with_dims(cd.output_dims(x, w)), cd)
    reason = ALGO.not_applicable(problem)
    assert reason and words in reason, reason


GPU_CASES = [T.P(64, 64, (56, 56), 3, 1, 1), T.P(128, 128, (28, 28), 3, 1, 1), T.P(512, 512, (7, 7), 3, 1, 1),
             T.P(96, 80, (17, 23), 3, 1, 1, 1, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("p", GPU_CASES, ids=[p["name"] for p in GPU_CASES])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_against_float64(p, dtype, rng):
    assert T.run_case("bwd_filter", ALGO, p, dtype, "NHWC", rng, n=8, device="cuda", beta=0.5) is None
