"""Issue 5 pooling candidates against the designs they would replace and the float64
reference, under the interpreter with small blocks so that every block is ragged:

- CL_FUSED_MAX_BWD: channels-last max backward in one pass (taps recomputed from x)
  must equal the two-pass backward bit for bit (ties, -inf, NaN with and without
  propagation, both first-maximum rules), and the float64 reference;
- GLOBAL_AVG_KERNEL: global average pooling by pooling's own reduction kernel, both
  layouts and a strided view, against float64 and with alpha/beta."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import pooling, tensor_ops  # noqa: E402
from tridnn.reference import pooling as ref_pool  # noqa: E402

from test_cuda_layers import check, check_pooling, check_pooling_blend, f64, make, poisoned  # noqa: E402
from test_pooling_cl import _ints, _run, _special  # noqa: E402

# windows the fused kernel takes (KH <= 2 SH, at most two covering output columns):
# 3x3/2 pad 1 (ResNet, carried row), 2x2/2, 1-D, 3-D without a window along D, 2x3 at
# H stride 1 (carried row at SH = 1), 3x2/2 (one column shift), 4x3/2 pad 2 (no carry,
# first step past 0), 3x3/2 unpadded
FUSED_CASES = [((2, 5, 7, 9), (3, 3), (1, 1), (2, 2)), ((1, 3, 6, 7), (2, 2), (0, 0), (2, 2)),
               ((2, 5, 13), (3,), (1,), (2,)), ((1, 3, 2, 5, 7), (1, 3, 3), (0, 1, 1), (1, 2, 2)),
               ((1, 3, 8, 9), (2, 3), (0, 1), (1, 2)), ((1, 3, 9, 8), (3, 2), (1, 0), (2, 2)),
               ((1, 2, 9, 9), (4, 3), (2, 1), (2, 2)), ((1, 3, 8, 10), (3, 3), (0, 0), (2, 2))]
FUSED_IDS = ["3x3s2", "2x2s2", "1d", "3d", "2x3s1x2", "3x2s2", "4x3s2p2", "3x3s2p0"]


def _small_fused(monkeypatch, design):
    """The fused kernel (design "phases" or "shift") with small blocks: ragged rows,
    columns and channels."""
    monkeypatch.setattr(pooling, "CL_FUSED_MAX_BWD", design)
    monkeypatch.setattr(pooling, "CL_FUSED_STEPS", 2)
    monkeypatch.setattr(pooling, "CL_FUSED_PHASES", 3 if design == "phases" else 4)
    monkeypatch.setattr(pooling, "CL_FUSED_BLOCK_M", 2)
    monkeypatch.setattr(pooling, "CL_FUSED_BLOCK_J", 2)
    monkeypatch.setattr(pooling, "CL_FUSED_BLOCK_C", 2)
    monkeypatch.setattr(pooling, "CL_FUSED_WARPS", 4)


@pytest.fixture(params=["phases", "shift"])
def fused(request, monkeypatch):
    """Each fused design with small blocks; the two-pass kernels raise, so a case that
    silently fell back would fail."""
    _small_fused(monkeypatch, request.param)

    class Refuse:
        def __getitem__(self, grid):
            raise AssertionError("a two-pass max backward kernel ran instead of the fused one")
    monkeypatch.setattr(pooling, "_pool_cl_backward_kernel", Refuse())
    monkeypatch.setattr(pooling, "_pool_backward_kernel", Refuse())


def _backward(x, dy, window, padding, stride, propagate, mode=0):
    dx = torch.full(x.shape, 7.0, dtype=x.dtype).contiguous(memory_format=torch.channels_last if x.dim() == 4
                                                            else torch.contiguous_format)
    pooling.pooling_backward(dy, dy, x, dx, mode, window, padding, stride, propagate, 1.0, 0.0)
    return dx


@pytest.mark.parametrize("case", FUSED_CASES, ids=FUSED_IDS)
@pytest.mark.parametrize("mode", [0, 3], ids=["MAX", "MAX_DET"])
def test_fused_max_backward_matches_reference(case, mode, rng, fused):
    shape, window, padding, stride = case
    x = make(shape, "NHWC", values=_ints(shape, rng))
    check_pooling(x, mode, window, padding, stride, "NHWC", rng)


@pytest.mark.parametrize("case", [((2, 3, 7, 9), (3, 4), (1, 1), (2, 2)), ((1, 2, 7, 13), (2, 3), (1, 1), (2, 2))],
                         ids=["3x4s2", "2x3s2p1"])
def test_fused_phases_three_column_covers(case, rng, monkeypatch):
    """Windows whose input columns three output columns cover (phases only; the shift
    design refuses them): phases before and after the group."""
    _small_fused(monkeypatch, "phases")
    shape, window, padding, stride = case
    x = make(shape, "NHWC", values=_ints(shape, rng))
    geo = pooling._Geometry(x, torch.empty(ref_pool.pooling_forward(f64(x)[:1, :1], 0, window, padding, stride).shape),
                            window, padding, stride, False)
    assert pooling._use_cl_fused(geo, 0, geo.x5, geo.x5, geo.x5)
    check_pooling(x, 0, window, padding, stride, "NHWC", rng)


@pytest.mark.parametrize("case", FUSED_CASES[:4], ids=FUSED_IDS[:4])
def test_fused_max_backward_blend(case, rng, fused):
    shape, window, padding, stride = case
    x = make(shape, "NHWC", values=_ints(shape, rng))
    check_pooling_blend(x, 0, window, padding, stride, "NHWC", rng)


FUSED_4D = [(c, i) for c, i in zip(FUSED_CASES, FUSED_IDS) if len(c[0]) == 4]  # _special writes 4-D values


# phases on every 4-D window; shift (the design the sweep is less likely to pick) on
# 3x3/2 and 2x2/2; the running tap rule on 3x3/2
BIT_EXACT = ([("phases", c, True) for c, _ in FUSED_4D] + [("shift", c, True) for c, _ in FUSED_4D[:2]]
             + [("phases", FUSED_4D[0][0], False)])
BIT_EXACT_IDS = ([f"phases-{i}" for _, i in FUSED_4D] + [f"shift-{i}" for _, i in FUSED_4D[:2]]
                 + [f"phases-{FUSED_4D[0][1]}-running_rule"])


@pytest.mark.parametrize("design, case, arg_eq", BIT_EXACT, ids=BIT_EXACT_IDS)
@pytest.mark.parametrize("propagate", [False, True])
def test_fused_max_backward_bit_exact(design, case, arg_eq, propagate, rng, monkeypatch):
    """Ties, -inf and NaN anywhere: the fused dx equals the two-pass dx bit for bit
    (same first-maximum taps, same summation order), with small blocks on both sides;
    the two-pass taps by either rule (CL_ARG_EQ)."""
    shape, window, padding, stride = case
    monkeypatch.setattr(pooling, "CL_ARG_EQ", arg_eq)
    monkeypatch.setattr(pooling, "CL_ROWS", 2)
    monkeypatch.setattr(pooling, "CL_BLOCK_W", 4)
    monkeypatch.setattr(pooling, "CL_BLOCK_C", 2)
    for anywhere in (True, False):
        values = _special(shape, rng, anywhere)
        x = make(shape, "NHWC", values=values)
        oshape = ref_pool.pooling_forward(values[:1, :1], 0, window, padding, stride).shape[2:]
        dy = make(shape[:2] + oshape, "NHWC", values=rng.normal(size=shape[:2] + oshape))
        monkeypatch.setattr(pooling, "CL_FUSED_MAX_BWD", False)
        _, dx_old = _run(x, dy, window, padding, stride, propagate)
        _small_fused(monkeypatch, design)
        _, dx_new = _run(x, dy, window, padding, stride, propagate)
        assert torch.equal(dx_new, dx_old)
        if not anywhere:
            dx_ref = ref_pool.pooling_backward(values, f64(dy), 0, window, padding, stride, propagate_nan=propagate)
            np.testing.assert_allclose(f64(dx_new), dx_ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("design", ["phases", "shift"])
def test_fused_refuses_other_windows(design, monkeypatch):
    """Windows outside the fused kernel's conditions keep the two-pass kernels."""
    monkeypatch.setattr(pooling, "CL_FUSED_MAX_BWD", design)
    x = torch.zeros((1, 2, 9, 9)).contiguous(memory_format=torch.channels_last)
    for window, padding, stride, mode, want in (((3, 3), (1, 1), (2, 2), 0, True), ((3, 3), (1, 1), (1, 1), 0, False),
                                                ((5, 5), (2, 2), (2, 2), 0, False), ((3, 3), (1, 1), (2, 2), 1, False),
                                                ((3, 4), (1, 1), (2, 2), 0, design == "phases"),
                                                ((1, 1), (0, 0), (2, 2), 0, design == "shift")):
        y = torch.zeros(ref_pool.pooling_forward(np.zeros((1, 1, 9, 9)), 0, window, padding, stride).shape)
        geo = pooling._Geometry(x, y, window, padding, stride, False)
        assert pooling._use_cl_fused(geo, mode, geo.x5, geo.x5, geo.x5) == want
    geo = pooling._Geometry(x.contiguous(), y.contiguous(), (3, 3), (1, 1), (2, 2), False)
    assert not pooling._use_cl_fused(geo, 0, geo.x5, geo.x5, geo.x5)  # NCHW


# -- global average ------------------------------------------------------------------------
@pytest.fixture
def gap(monkeypatch):
    """Pooling's global-average kernel on with small tiles (ragged channels and positions);
    tensor_ops' reduction raises, so a case that silently fell back would fail."""
    monkeypatch.setattr(pooling, "GLOBAL_AVG_KERNEL", True)
    monkeypatch.setattr(pooling, "GLOBAL_AVG_NCHW", (2, 16, 4))
    monkeypatch.setattr(pooling, "GLOBAL_AVG_NHWC", (4, 8, 4))

    def refuse(*args, **kwargs):
        raise AssertionError("tensor_ops.reduce_tensor ran instead of the global-average kernel")
    monkeypatch.setattr(tensor_ops, "reduce_tensor", refuse)


@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (3, 3, 37), (1, 6, 3, 4, 5), (2, 3, 1, 1)],
                         ids=["2d", "1d", "3d", "1x1"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_global_average(shape, layout, dtype, rng, gap):
    """adaptive average to 1x1 and plain average with the whole plane as window."""
    if layout == "NHWC" and len(shape) != 4:
        layout = "NCHW"
    x = make(shape, layout, dtype, rng=rng)
    nd = len(shape) - 2
    want = f64(x).mean(axis=tuple(range(2, 2 + nd)), keepdims=True)
    y = poisoned(want.shape, layout if layout != "strided" else "NCHW", dtype)
    pooling.adaptive_pooling_forward(x, y, 1, 1.0, 0.0)
    check(y, want, dtype, "adaptive y")
    for mode in (1, 2):
        y = poisoned(want.shape, "NCHW", dtype)
        pooling.pooling_forward(x, y, mode, shape[2:], (0,) * nd, (1,) * nd, False, 1.0, 0.0)
        check(y, want, dtype, "avg y")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_global_average_blend(layout, rng, gap):
    x = make((2, 5, 6, 7), layout, rng=rng)
    want = f64(x).mean(axis=(2, 3), keepdims=True)
    y = make(want.shape, layout, rng=rng)
    old = f64(y)
    pooling.adaptive_pooling_forward(x, y, 1, 2.0, -1.0)
    check(y, 2.0 * want - old, torch.float32, "y")
