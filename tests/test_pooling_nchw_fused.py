"""NCHW_FUSED_MAX_BWD: the NCHW max backward in one launch, the lane backward kernel
recomputing the first-maximum taps from x instead of reading the taps pass's buffer. It
must equal the two-pass backward bit for bit (ties, -inf, NaN with and without
propagation), and the float64 reference, on the NCHW lane kernels' windows, with small
tiles so that lanes and column groups have ragged last blocks."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import pooling  # noqa: E402
from tridnn.reference import pooling as ref_pool  # noqa: E402

from test_cuda_layers import check, f64, make, poisoned  # noqa: E402
from test_pooling_cl import _ints, _special  # noqa: E402
from test_pooling_nchw import NCHW_CASES, NCHW_IDS  # noqa: E402


def _small_lanes(monkeypatch):
    """The lane kernels for max with 32 (lane, group) pairs a program: ragged blocks."""
    monkeypatch.setattr(pooling, "NCHW_LANE_KERNELS", frozenset({0, 3}))
    monkeypatch.setattr(pooling, "NCHW_LANE_BACKWARD", frozenset({0, 3}))
    monkeypatch.setattr(pooling, "NCHW_LANE_TILE", 32)


class _Refuse:
    def __getitem__(self, grid):
        raise AssertionError("the taps pass ran: the fused backward did not serve")


@pytest.fixture
def fused(monkeypatch):
    """The fused backward on; the taps pass (the lane forward kernel) and the older
    backward kernels raise, so a case that silently fell back would fail."""
    _small_lanes(monkeypatch)
    monkeypatch.setattr(pooling, "NCHW_FUSED_MAX_BWD", True)
    for name in ("_pool_nchw_lane_forward_kernel", "_pool_backward_kernel", "_pool_rows_backward_kernel",
                 "_pool_nchw_backward_kernel"):
        monkeypatch.setattr(pooling, name, _Refuse())


def _out_shape(values, window, padding, stride):
    return values.shape[:2] + ref_pool.pooling_forward(values[:1, :1], 0, window, padding, stride).shape[2:]


def _backward(x, dy, window, padding, stride, propagate, mode=0):
    dx = torch.full(x.shape, 7.0, dtype=x.dtype)
    pooling.pooling_backward(dy, dy, x, dx, mode, window, padding, stride, propagate, 1.0, 0.0)
    return dx


# both NaN rules on 3x3/2 (ResNet), one (alternating) on the other 4-D windows (_special
# writes 4-D values; the 1-D and 3-D windows are checked against float64 below)
BIT_EXACT = [(c, p) for k, c in enumerate(NCHW_CASES) if len(c[0]) == 4
             for p in ((False, True) if k == 0 else (bool(k % 2),))]
BIT_EXACT_IDS = [f"{NCHW_IDS[NCHW_CASES.index(c)]}-{'propagate' if p else 'ignore'}" for c, p in BIT_EXACT]


@pytest.mark.parametrize("case, propagate", BIT_EXACT, ids=BIT_EXACT_IDS)
def test_fused_equals_two_pass(case, propagate, rng, monkeypatch):
    """Ties, -inf and NaN anywhere (all-NaN windows, -inf maxima behind a NaN) and in
    rows only: the fused dx equals the two-pass dx bit for bit (same taps, same
    summation order); where the values leave the reference defined, float64 too."""
    shape, window, padding, stride = case
    _small_lanes(monkeypatch)
    for anywhere in (True, False):
        values = _special(shape, rng, anywhere)
        x = make(shape, "NCHW", values=values)
        dy = make(_out_shape(values, window, padding, stride), "NCHW",
                  values=rng.normal(size=_out_shape(values, window, padding, stride)))
        monkeypatch.setattr(pooling, "NCHW_FUSED_MAX_BWD", False)
        dx_old = _backward(x, dy, window, padding, stride, propagate)
        monkeypatch.setattr(pooling, "NCHW_FUSED_MAX_BWD", True)
        with monkeypatch.context() as m:
            m.setattr(pooling, "_pool_nchw_lane_forward_kernel", _Refuse())
            dx_new = _backward(x, dy, window, padding, stride, propagate)
        assert torch.equal(dx_new, dx_old)
        if not anywhere:
            dx_ref = ref_pool.pooling_backward(values, f64(dy), 0, window, padding, stride, propagate_nan=propagate)
            np.testing.assert_allclose(f64(dx_new), dx_ref, rtol=1e-6, atol=1e-6)


# MAX on every window, MAX_DETERMINISTIC (the same kernel) on one, float64 and float16 on one each
REFERENCE = ([(c, 0, torch.float32) for c in NCHW_CASES] + [(NCHW_CASES[0], 3, torch.float32),
                                                            (NCHW_CASES[0], 0, torch.float64),
                                                            (NCHW_CASES[1], 0, torch.float16)])
REFERENCE_IDS = [f"{NCHW_IDS[NCHW_CASES.index(c)]}-{['MAX', '', '', 'MAX_DET'][m]}-{str(dt)[6:]}"
                 for c, m, dt in REFERENCE]


@pytest.mark.parametrize("case, mode, dtype", REFERENCE, ids=REFERENCE_IDS)
def test_fused_against_float64(case, mode, dtype, rng, fused):
    """Into a poisoned dx; small integers, so ties test the first-maximum rule."""
    shape, window, padding, stride = case
    values = _ints(shape, rng)
    x = make(shape, "NCHW", dtype, values=values)
    dy = make(_out_shape(values, window, padding, stride), "NCHW", dtype, rng=rng)
    dx = poisoned(shape, "NCHW", dtype)
    pooling.pooling_backward(dy, dy, x, dx, mode, window, padding, stride, False, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride), dtype, "dx")


@pytest.mark.parametrize("case", [NCHW_CASES[0], NCHW_CASES[-1]], ids=[NCHW_IDS[0], NCHW_IDS[-1]])
def test_fused_blend(case, rng, fused):
    """dx = 0.5 pool'(dy) + 2 dx."""
    shape, window, padding, stride = case
    values = _ints(shape, rng)
    x = make(shape, "NCHW", values=values)
    dy = make(_out_shape(values, window, padding, stride), "NCHW", rng=rng)
    dx = make(shape, "NCHW", rng=rng)
    old = f64(dx)
    pooling.pooling_backward(dy, dy, x, dx, 0, window, padding, stride, False, 0.5, 2.0)
    check(dx, 0.5 * ref_pool.pooling_backward(f64(x), f64(dy), 0, window, padding, stride) + 2.0 * old,
          torch.float32, "dx")


def test_fused_strided_view(rng, fused):
    """x, dy and dx as views of larger tensors (W contiguous, the other strides not
    packed); the inputs and dx's surroundings are left untouched."""
    window, padding, stride = (3, 3), (1, 1), (2, 2)
    big_x = make((2, 6, 9, 11), "NCHW", values=_ints((2, 6, 9, 11), rng))
    x = big_x[:, 1:4, :7]
    oshape = _out_shape(np.zeros(x.shape), window, padding, stride)
    big_dy = make((2, 5) + oshape[2:], "NCHW", rng=rng)
    dy = big_dy[:, 2:5]
    big_dx = make((2, 4, 9, 11), "NCHW", rng=rng)
    dx = big_dx[:, :3, 1:8, :]
    keep_x, keep_dy, keep_dx = big_x.clone(), big_dy.clone(), big_dx.clone()
    pooling.pooling_backward(dy, dy, x, dx, 0, window, padding, stride, False, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(f64(x), f64(dy), 0, window, padding, stride), torch.float32, "dx")
    assert torch.equal(big_x, keep_x) and torch.equal(big_dy, keep_dy)
    keep_dx[:, :3, 1:8, :] = dx
    assert torch.equal(big_dx, keep_dx)


def test_fused_serves_only_its_cases(monkeypatch):
    """The fused backward takes the max modes on NCHW windows of the lane kernels, only
    with the switch on."""
    x = torch.zeros((1, 2, 9, 9))
    cases = (((3, 3), (1, 1), (2, 2), 0, True), ((3, 3), (1, 1), (2, 2), 3, True), ((3, 3), (1, 1), (2, 2), 1, False),
             ((3, 3), (1, 1), (2, 2), 2, False), ((5, 5), (2, 2), (2, 2), 0, False))
    for switch in (False, True):
        monkeypatch.setattr(pooling, "NCHW_FUSED_MAX_BWD", switch)
        for window, padding, stride, mode, want in cases:
            y = torch.zeros(_out_shape(np.zeros((1, 2, 9, 9)), window, padding, stride))
            geo = pooling._Geometry(x, y, window, padding, stride, False)
            assert pooling._use_nchw_fused(geo, mode, geo.x5, geo.y5, geo.x5) == (want and switch), (window, mode)
    xl = x.contiguous(memory_format=torch.channels_last)
    geo = pooling._Geometry(xl, torch.zeros((1, 2, 5, 5)).contiguous(memory_format=torch.channels_last),
                            (3, 3), (1, 1), (2, 2), False)
    assert not pooling._use_nchw_fused(geo, 0, geo.x5, geo.y5, geo.x5)  # channels-last
