"""Issue 5 pooling candidates against the designs they would replace and the float64
reference, under the interpreter with small blocks so that every block is ragged:

- CL_FUSED_MAX_BWD: channels-last max backward in one pass (taps recomputed from x)
  must equal the two-pass backward bit for bit (ties, -inf, NaN with and without
  propagation, both first-maximum rules), and the float64 reference;
- GLOBAL_AVG_KERNEL: global average pooling by pooling's own reduction kernel, both
  layouts and a strided view, against float64 and with alpha/beta.

Blocks are as large as still leaves every one ragged (the interpreter's time grows with
the number of programs), MAX_DETERMINISTIC (the same kernel as MAX) and float64 (the
same code as float32) are tried on one case each."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import pooling, tensor_ops  # noqa: E402
from tridnn.reference import pooling as ref_pool  # noqa: E402

from test_cuda_layers import check, check_pooling_blend, f64, make, poisoned  # noqa: E402
from test_pooling_cl import _ints, _special  # noqa: E402

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
    monkeypatch.setattr(pooling, "CL_FUSED_BLOCK_J", 4)
    monkeypatch.setattr(pooling, "CL_FUSED_BLOCK_C", 4)  # C is 2, 3 or 5
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


def _check_backward(x, mode, window, padding, stride, rng):
    """The backward alone (the forward is not the kernel under test) into a poisoned dx,
    against the float64 reference."""
    oshape = ref_pool.pooling_forward(f64(x)[:1, :1], 0, window, padding, stride).shape[2:]
    dy = make(tuple(x.shape[:2]) + oshape, "NHWC", rng=rng)
    dx = poisoned(tuple(x.shape), "NHWC")
    pooling.pooling_backward(dy, dy, x, dx, mode, window, padding, stride, False, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride), torch.float32, "dx")


@pytest.mark.parametrize("case", FUSED_CASES, ids=FUSED_IDS)
def test_fused_max_backward_matches_reference(case, rng, fused):
    shape, window, padding, stride = case
    x = make(shape, "NHWC", values=_ints(shape, rng))
    _check_backward(x, 0, window, padding, stride, rng)
    if case == FUSED_CASES[1]:
        _check_backward(x, 3, window, padding, stride, rng)  # MAX_DETERMINISTIC


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
    _check_backward(x, 0, window, padding, stride, rng)


@pytest.mark.parametrize("case", FUSED_CASES[:4], ids=FUSED_IDS[:4])
def test_fused_max_backward_blend(case, rng, fused):
    shape, window, padding, stride = case
    x = make(shape, "NHWC", values=_ints(shape, rng))
    check_pooling_blend(x, 0, window, padding, stride, "NHWC", rng)


FUSED_4D = [(c, i) for c, i in zip(FUSED_CASES, FUSED_IDS) if len(c[0]) == 4]  # _special writes 4-D values


# phases on every 4-D window, shift on 3x3/2 and 2x2/2, the running tap rule on 3x3/2;
# both NaN rules on 3x3/2 in each design, one rule (alternating) on the other windows
# (the NaN rule's code does not depend on the window). 3x3/2 on one sample of 3 channels.
def _bit_exact_cases():
    cases, ids = [], []
    for k, (case, name) in enumerate(FUSED_4D):
        if k == 0:
            case = ((1,) + case[0][1:],) + case[1:]
        for design in ("phases", "shift") if k < 2 else ("phases",):
            for propagate in (False, True) if k == 0 else (bool(k % 2),):
                cases.append((design, case, True, propagate))
                ids.append(f"{design}-{name}-{'propagate' if propagate else 'ignore'}")
    cases.append(("phases", cases[0][1], False, True))
    ids.append(f"phases-{FUSED_4D[0][1]}-running_rule-propagate")
    return cases, ids


BIT_EXACT, BIT_EXACT_IDS = _bit_exact_cases()


def _backward_only(x, dy, window, padding, stride, propagate):
    dx = torch.full(x.shape, 7.0, dtype=x.dtype).contiguous(memory_format=torch.channels_last)
    pooling.pooling_backward(dy, dy, x, dx, 0, window, padding, stride, propagate, 1.0, 0.0)
    return dx


@pytest.mark.parametrize("design, case, arg_eq, propagate", BIT_EXACT, ids=BIT_EXACT_IDS)
def test_fused_max_backward_bit_exact(design, case, arg_eq, propagate, rng, monkeypatch):
    """Ties, -inf and NaN anywhere: the fused dx equals the two-pass dx bit for bit
    (same first-maximum taps, same summation order), with small blocks on both sides;
    the two-pass taps by either rule (CL_ARG_EQ)."""
    shape, window, padding, stride = case
    monkeypatch.setattr(pooling, "CL_ARG_EQ", arg_eq)
    monkeypatch.setattr(pooling, "CL_ROWS", 2)
    monkeypatch.setattr(pooling, "CL_BLOCK_W", 4)
    monkeypatch.setattr(pooling, "CL_BLOCK_C", 4)
    for anywhere in (True, False):
        values = _special(shape, rng, anywhere)
        x = make(shape, "NHWC", values=values)
        oshape = ref_pool.pooling_forward(values[:1, :1], 0, window, padding, stride).shape[2:]
        dy = make(shape[:2] + oshape, "NHWC", values=rng.normal(size=shape[:2] + oshape))
        monkeypatch.setattr(pooling, "CL_FUSED_MAX_BWD", False)
        dx_old = _backward_only(x, dy, window, padding, stride, propagate)
        _small_fused(monkeypatch, design)
        dx_new = _backward_only(x, dy, window, padding, stride, propagate)
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


GAP_SHAPES = [(2, 5, 7, 9), (3, 3, 37), (1, 6, 3, 4, 5), (2, 3, 1, 1)]
GAP_CASES = ([(s, lay, torch.float32) for s in GAP_SHAPES for lay in ("NCHW", "NHWC", "strided")
              if lay != "NHWC" or len(s) == 4] + [(GAP_SHAPES[0], "NCHW", torch.float64)])
GAP_IDS = [f"{['2d', '1d', '3d', '1x1'][GAP_SHAPES.index(s)]}-{lay}-{str(dt)[6:]}" for s, lay, dt in GAP_CASES]


@pytest.mark.parametrize("shape, layout, dtype", GAP_CASES, ids=GAP_IDS)
def test_global_average(shape, layout, dtype, rng, gap):
    """adaptive average to 1x1 and plain average with the whole plane as window."""
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
