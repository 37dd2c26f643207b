"""LRN's one-read kernels (lrn.FAST_LRN: the channel walk for strided channels, the
8-channel lanes for contiguous channels) against the float64 reference, and the
existing Triton LRN tests (float32, float64) rerun with the switch on.

Shapes are tiny; NCHW_CHUNK_C and LANES_MAX_GROUPS are made small so that a run of
channels splits into several programs (halos across chunks, a short last chunk), and
C is odd so the last group of 8 channels is partial."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import lrn  # noqa: E402
from tridnn.reference import lrn as ref  # noqa: E402

from test_cuda_layers import LAYOUTS, check, f64, make, poisoned  # noqa: E402
# the existing LRN test, collected again under the switch (autouse fixture)
from test_cuda_layers import test_lrn  # noqa: E402,F401
from test_cuda_float64 import test_lrn_float64  # noqa: E402,F401
RERUN = (test_lrn, test_lrn_float64)


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    monkeypatch.setattr(lrn, "FAST_LRN", True)


def _spy(monkeypatch):
    """Names of the kernels launched (the tests assert the fast path ran)."""
    seen = []
    for name in ("_lrn_planes_kernel", "_lrn_lanes_kernel", "_lrn_kernel"):
        kernel = getattr(lrn, name)

        class Spy:
            def __getitem__(self, grid, kernel=kernel, name=name):
                seen.append(name)
                return kernel[grid]
        monkeypatch.setattr(lrn, name, Spy())
    return seen


def run(shape, layout, dtype, n, rng, alpha=1.0, beta=0.0, params=(1.2, 0.6, 1.0), read_y=False, tol=1.0,
        monkeypatch=None):
    """Forward into y and backward into dx (poisoned when beta == 0, primed otherwise),
    each against the float64 reference blended as alpha * ref + beta * old."""
    la, lb, lk = params
    x = make(shape, layout, dtype, rng=rng, scale=1.5)
    y = poisoned(shape, layout, dtype)
    old_y = None
    if beta:
        old_y = make(shape, layout, dtype, rng=rng)
        y.copy_(old_y)
    lrn.lrn_cross_channel_forward(x, y, n, la, lb, lk, alpha, beta)
    y_ref = ref.lrn_forward(f64(x), n, la, lb, lk)
    check(y, alpha * y_ref + (beta * f64(old_y) if beta else 0.0), dtype, "y", scale=tol)
    # backward from the unblended forward output
    y1 = poisoned(shape, layout, dtype)
    lrn.lrn_cross_channel_forward(x, y1, n, la, lb, lk, 1.0, 0.0)
    dy = make(shape, layout, dtype, rng=rng)
    dx = poisoned(shape, layout, dtype)
    old_dx = None
    if beta:
        old_dx = make(shape, layout, dtype, rng=rng)
        dx.copy_(old_dx)
    if monkeypatch is not None:
        monkeypatch.setattr(lrn, "BWD_READS_Y", read_y)
    lrn.lrn_cross_channel_backward(y1, dy, x, dx, n, la, lb, lk, alpha, beta)
    dx_ref = ref.lrn_backward(f64(x), f64(dy), n, la, lb, lk)
    check(dx, alpha * dx_ref + (beta * f64(old_dx) if beta else 0.0), dtype, "dx", scale=3.0 * tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=["float32", "float16", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 9])
def test_fast_against_reference(dtype, layout, n, rng, monkeypatch):
    # NCHW chunks of a few channels (4 rounded to whole unrolled steps: n = 5 gives 5, 5, 3
    # over C = 13, the last short); NHWC one group per program (two, the second partial)
    monkeypatch.setattr(lrn, "NCHW_CHUNK_C", 4)
    monkeypatch.setattr(lrn, "LANES_MAX_GROUPS", 1)
    seen = _spy(monkeypatch)
    run((2, 13, 3, 5), layout, dtype, n, rng)
    want = "_lrn_lanes_kernel" if layout != "NCHW" else "_lrn_planes_kernel"
    if layout == "strided":  # the strided view stages through a packed copy in its own (NHWC) order
        want = "_lrn_lanes_kernel"
    assert seen == [want] * 3, seen


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("read_y", [False, True], ids=["y-from-x", "reads-y"])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.0), (0.5, 1.0), (-1.5, 0.25)])
def test_fast_blending_and_y_source(layout, read_y, alpha, beta, rng, monkeypatch):
    monkeypatch.setattr(lrn, "NCHW_CHUNK_C", 5)
    run((2, 11, 2, 3), layout, torch.float32, 5, rng, alpha, beta, params=(2.5, 0.75, 0.5), read_y=read_y,
        monkeypatch=monkeypatch)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(1, 1, 4, 4), (3, 2, 1, 1), (1, 24, 7), (1, 9, 2, 3, 2)],
                         ids=["C1", "C2-S1", "1d-C24", "3d"])
def test_fast_edge_shapes(layout, shape, rng, monkeypatch):
    monkeypatch.setattr(lrn, "NCHW_CHUNK_C", 8)
    run(shape, layout, torch.float32, 5, rng, params=(1e-1, 0.75, 1e-5))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_fast_backward_large_n_falls_back(layout, rng, monkeypatch):
    """n > 9 backward takes the older kernel (the fast lanes read the x halo from one
    neighbouring group); the forward stays fast for every n."""
    seen = _spy(monkeypatch)
    run((1, 20, 2, 2), layout, torch.float32, 13, rng)
    fast = "_lrn_lanes_kernel" if layout == "NHWC" else "_lrn_planes_kernel"
    assert seen == [fast, fast, "_lrn_kernel"], seen


def test_fast_matches_older_kernel_forward(rng, monkeypatch):
    """Forward sums squares in the older kernel's order: float32 results agree to a few
    ulp (not bit-exact: contraction into FMAs may differ between the two)."""
    x = make((2, 17, 4, 4), "NCHW", torch.float32, rng=rng, scale=2.0)
    outs = []
    for fast in (True, False):
        monkeypatch.setattr(lrn, "FAST_LRN", fast)
        y = poisoned(tuple(x.shape), "NCHW")
        lrn.lrn_cross_channel_forward(x, y, 5, 1e-2, 0.75, 2.0)
        outs.append(f64(y))
    np.testing.assert_allclose(outs[0], outs[1], rtol=4e-7, atol=0)


@pytest.mark.parametrize("tile", [8192, 64], ids=["one-position-tile", "ragged-position-tiles"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
def test_fast_nhwc_forward_tiles(tile, dtype, rng, monkeypatch):
    """LANES_FORWARD_TILE (the NHWC forward's elements a program, default 8192): 24
    channels (3 groups in a tile of 4), 35 positions in one tile of 64 (8192) or 18 tiles
    of 2 (64, the last ragged); blended forward and backward against float64."""
    monkeypatch.setattr(lrn, "LANES_FORWARD_TILE", tile)
    monkeypatch.setattr(lrn, "LANES_TILE", None)
    seen = _spy(monkeypatch)
    run((2, 24, 5, 7), "NHWC", dtype, 5, rng, alpha=-1.5, beta=0.25)
    assert seen == ["_lrn_lanes_kernel"] * 3, seen
