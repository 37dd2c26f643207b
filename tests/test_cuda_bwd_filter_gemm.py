"""Backward filter ALGO_3 on the Triton backend (cuda/conv_bwd_filter_gemm.py: im2col into the
workspace, matmuls over slices of pixels, the slices summed in order).

On the CPU through Triton's interpreter against the float64 reference: every problem shape of
test_cuda_conv (exact for float32 integer data), layouts, alpha/beta, one slice and many, the
slice count. With --gpu: real sizes.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.cuda import conv_bwd_filter_gemm as gemm  # noqa: E402

import test_cuda_conv as T  # noqa: E402


def problem_of(p, n=2):
    return T.nhwc_problem("bwd_filter", p, n)


ALGO = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.ALGO_3)


@pytest.mark.parametrize("p", T.PROBLEMS, ids=[p["name"] for p in T.PROBLEMS])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_reference(p, layout, dtype, rng):
    assert T.run_case("bwd_filter", ALGO, p, dtype, layout, rng, as_torch=True, alpha=1.5, beta=-0.5) is None


@pytest.mark.parametrize("p", T.PROBLEMS[:4], ids=[p["name"] for p in T.PROBLEMS[:4]])
def test_many_slices_strided_layout_convolution_mode(p, rng, monkeypatch):
    monkeypatch.setattr(gemm, "SLICE_MIN", 8)
    assert T.run_case("bwd_filter", ALGO, p, "float32", "strided", rng, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None


def test_slices():
    """res5_3x3 at batch 64 (512 x 4608 outputs: 4 x 36 = 144 tiles of 128 x 128) fills 264
    tile slots with 2 slices; res2_3x3 (64 x 576: 5 tiles) wants 53 but keeps >= 1024 pixels
    a slice (200,704 pixels: 53 slices of 3,787); a tiny problem keeps one."""
    assert gemm.slices(problem_of(T.P(512, 512, (7, 7), 3, 1, 1), 64)) == 2
    assert gemm.slices(problem_of(T.P(64, 64, (56, 56), 3, 1, 1), 64)) == 53
    assert gemm.slices(problem_of(T.P(8, 8, (6, 6), 3, 1, 1), 2)) == 1
    assert ALGO.deterministic and ALGO.exact


GPU_CASES = [T.P(64, 64, (56, 56), 3, 1, 1), T.P(256, 256, (14, 14), 3, 2, 1), T.P(3, 64, (112, 112), 7, 2, 3),
             T.P(96, 80, (17, 23), 3, 1, 1, 1, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("p", GPU_CASES, ids=[p["name"] for p in GPU_CASES])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_against_float64(p, dtype, rng):
    assert T.run_case("bwd_filter", ALGO, p, dtype, "NHWC", rng, n=4, device="cuda", beta=0.5) is None


FORCED = [(T.P(3, 5, (5, 5), 3, 1, 1), count) for count in (2, 7, 13, 20, 30)] + [
    (T.P(8, 16, (5, 5), 3, 2, 1, 1, 4), count) for count in (2, 5, 7)]


@pytest.mark.parametrize("p,count", FORCED, ids=[f"{p['name']}-{c}" for p, c in FORCED])
def test_forced_slice_counts(p, count, rng, monkeypatch):
    """The pixel slices run batched over the slices of a group, or over the groups of a slice
    where there are more groups than whole slices (the 4-group problem, 18 pixels, in 2 and 5
    slices), and a shorter last slice on its own (50 pixels for 13 slices: 12 of 4 + 1 of 2).
    Where the pixels split into fewer slices than the workspace holds (50 pixels for 20 slices:
    16 of 3 + 1 of 2; for 30: 25 of 2; 18 pixels for 7: 6 of 3), only the written partials are
    summed. The workspace arrives NaN-poisoned, so a partial left unwritten and summed fails."""
    monkeypatch.setattr(gemm, "slices", lambda problem, sms=132: count)
    assert T.run_case("bwd_filter", ALGO, p, "float32", "NHWC", rng, as_torch=True, alpha=1.5, beta=-0.5) is None
