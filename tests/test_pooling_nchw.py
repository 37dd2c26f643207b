"""The NCHW row kernels of pooling (pooling.NCHW_ROW_KERNELS) against the float64
reference and, bit for bit for max, against the row kernels they replace. Tiny odd
shapes under the interpreter, with small tiles (NCHW_GROUPS, NCHW_STEPS) so that planes,
column groups and row runs all have ragged last blocks and the row carry restarts."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import pooling  # noqa: E402
from tridnn.reference import pooling as ref_pool  # noqa: E402

from test_cuda_layers import check, check_pooling, check_pooling_blend, f64, make, poisoned  # noqa: E402
from test_pooling_cl import _special  # noqa: E402

# (shape, window, padding, stride): 3x3/2 pad 1 (ResNet; odd H and W, two column groups),
# 2x2/2, 3x3/1 pad 1 (shifts both ways, three covering rows), 3x3/2 unpadded (the tap right
# of the group), 4x4/2 pad 1, 2x3 at strides (1, 2), 1-D, 3-D without a window along D
NCHW_CASES = [((2, 3, 7, 19), (3, 3), (1, 1), (2, 2)), ((1, 3, 6, 13), (2, 2), (0, 0), (2, 2)),
              ((2, 2, 5, 11), (3, 3), (1, 1), (1, 1)), ((1, 2, 7, 17), (3, 3), (0, 0), (2, 2)),
              ((1, 2, 6, 20), (4, 4), (1, 1), (2, 2)), ((1, 3, 5, 9), (2, 3), (0, 1), (1, 2)),
              ((2, 3, 21), (3,), (1,), (2,)), ((1, 2, 3, 5, 9), (1, 3, 3), (0, 1, 1), (1, 2, 2))]
NCHW_IDS = ["3x3s2", "2x2s2", "3x3s1", "3x3s2p0", "4x4s2", "2x3s12", "1d", "3d"]

ALL_MODES = frozenset({0, 1, 2, 3})


def _small_tiles(monkeypatch):
    monkeypatch.setattr(pooling, "NCHW_GROUPS", 4)
    monkeypatch.setattr(pooling, "NCHW_STEPS", 2)


@pytest.fixture
def nchw(monkeypatch):
    """The NCHW row kernels on, with small tiles; the older kernels raise, so a case that
    silently fell back would fail."""
    monkeypatch.setattr(pooling, "NCHW_ROW_KERNELS", ALL_MODES)
    _small_tiles(monkeypatch)

    class Refuse:
        def __getitem__(self, grid):
            raise AssertionError("an older kernel ran instead of the NCHW row kernel")
    for name in ("_pool_forward_kernel", "_pool_backward_kernel", "_pool_rows_forward_kernel",
                 "_pool_rows_backward_kernel"):
        monkeypatch.setattr(pooling, name, Refuse())


def _ints(shape, rng):
    """Small integers: ties test the first-maximum rule, sums stay exact."""
    return rng.integers(-3, 4, size=shape).astype(np.float64)


@pytest.mark.parametrize("case", NCHW_CASES, ids=NCHW_IDS)
@pytest.mark.parametrize("mode", [0, 1, 2, 3], ids=["MAX", "AVG_INCL", "AVG_EXCL", "MAX_DET"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
def test_nchw_pooling_matches_reference(case, mode, dtype, rng, nchw):
    """Forward into a poisoned y, backward with fresh dy into a poisoned dx."""
    shape, window, padding, stride = case
    x = make(shape, "NCHW", dtype, values=_ints(shape, rng))
    check_pooling(x, mode, window, padding, stride, "NCHW", rng, dtype)


@pytest.mark.parametrize("case", NCHW_CASES[:6], ids=NCHW_IDS[:6])
@pytest.mark.parametrize("mode", [0, 2], ids=["MAX", "AVG_EXCL"])
def test_nchw_pooling_blend(case, mode, rng, nchw):
    """alpha and beta: y = 2 pool(x) - y, dx = 0.5 pool'(dy) + 2 dx."""
    shape, window, padding, stride = case
    x = make(shape, "NCHW", values=_ints(shape, rng))
    check_pooling_blend(x, mode, window, padding, stride, "NCHW", rng)


def _run(x, dy, mode, window, padding, stride, propagate):
    y = torch.full(dy.shape, 7.0, dtype=x.dtype)
    dx = torch.full(x.shape, 7.0, dtype=x.dtype)
    pooling.pooling_forward(x, y, mode, window, padding, stride, propagate, 1.0, 0.0)
    pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, propagate, 1.0, 0.0)
    return y, dx


@pytest.mark.parametrize("case", NCHW_CASES[:6], ids=NCHW_IDS[:6])
@pytest.mark.parametrize("propagate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
def test_nchw_first_maximum_bit_exact(case, propagate, dtype, rng, monkeypatch):
    """Max pooling with many ties, -inf and NaN, and dy of random floats (the order of the
    sums over overlapping windows shows): y and dx equal the older row kernels' bit for bit,
    and the float64 reference where it is well defined (see test_pooling_cl._special)."""
    shape, window, padding, stride = case
    for anywhere in (True, False):
        values = _special(shape, rng, anywhere)
        x = make(shape, "NCHW", dtype, values=values)
        oshape = ref_pool.pooling_forward(values[:1, :1], 0, window, padding, stride).shape[2:]
        dy = make(shape[:2] + oshape, "NCHW", dtype, rng=rng)
        monkeypatch.setattr(pooling, "NCHW_ROW_KERNELS", frozenset())
        y_old, dx_old = _run(x, dy, 0, window, padding, stride, propagate)
        monkeypatch.setattr(pooling, "NCHW_ROW_KERNELS", ALL_MODES)
        _small_tiles(monkeypatch)
        y_new, dx_new = _run(x, dy, 0, window, padding, stride, propagate)
        assert torch.equal(torch.isnan(y_new), torch.isnan(y_old))
        assert torch.equal(torch.nan_to_num(y_new), torch.nan_to_num(y_old))
        assert torch.equal(dx_new, dx_old)
        if not anywhere:
            y_ref = ref_pool.pooling_forward(values, 0, window, padding, stride, propagate_nan=propagate)
            np.testing.assert_array_equal(np.isnan(f64(y_new)), np.isnan(y_ref))
            np.testing.assert_array_equal(np.nan_to_num(f64(y_new)), np.nan_to_num(y_ref))
            dx_ref = ref_pool.pooling_backward(values, f64(dy), 0, window, padding, stride, propagate_nan=propagate)
            check(dx_new, dx_ref, dtype, "dx")
            assert np.isnan(y_ref).any() == propagate  # NaN reached some window


@pytest.mark.parametrize("case", [((1, 2, 4, 6, 9), (2, 3, 3), (1, 1, 1), (2, 2, 2)),
                                  ((1, 2, 6, 11), (3, 3), (1, 1), (3, 3)),
                                  ((1, 2, 7, 11), (3, 3), (0, 0), (1, 1))], ids=["3d_window_d", "stride3", "3x3s1p0"])
@pytest.mark.parametrize("mode", [0, 2], ids=["MAX", "AVG_EXCL"])
def test_nchw_other_windows_take_older_kernels(case, mode, rng, monkeypatch):
    """Windows outside the NCHW row kernels (along D, stride 3, two columns right of the
    group) still run, through the older kernels, with the switch on."""
    monkeypatch.setattr(pooling, "NCHW_ROW_KERNELS", ALL_MODES)
    _small_tiles(monkeypatch)
    shape, window, padding, stride = case
    x = make(shape, "NCHW", values=_ints(shape, rng))
    y_ref = ref_pool.pooling_forward(f64(x), mode, window, padding, stride)
    assert not pooling._use_nchw(pooling._Geometry(x, torch.empty(y_ref.shape), window, padding, stride, False), mode)
    y = poisoned(y_ref.shape, "NCHW")
    pooling.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
    check(y, y_ref, torch.float32, "y")
    dy = make(y_ref.shape, "NCHW", rng=rng)
    dx = poisoned(shape, "NCHW")
    pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, False, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride), torch.float32, "dx")


def test_default_modes_take_the_kernels_measured_faster(rng):
    """By default (the H200 measurement in pooling.py) max pooling takes the NCHW row
    kernels and average pooling the older row kernels, for the same 3x3/2 window."""
    x = make((1, 2, 7, 19), "NCHW", values=_ints((1, 2, 7, 19), rng))
    geo = pooling._Geometry(x, torch.empty((1, 2, 4, 10)), (3, 3), (1, 1), (2, 2), False)
    assert pooling._use_nchw(geo, 0) and pooling._use_nchw(geo, 3)
    assert not pooling._use_nchw(geo, 1) and not pooling._use_nchw(geo, 2)
