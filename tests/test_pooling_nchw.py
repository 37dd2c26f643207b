"""NCHW pooling, the lane forward (NCHW_LANE_KERNELS, max's taps pass included) and the
row kernel's gather backward, against the float64 reference and, bit for bit for max,
against the row kernels the lane forward replaced. (A lane backward kernel was the
gather's other design until session 36, when it was removed.) Tiny odd shapes under the
interpreter, with small tiles so that column groups, lanes and row blocks all have ragged
last blocks."""
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
NCHW_CASES = [((1, 5, 7, 19), (3, 3), (1, 1), (2, 2)), ((1, 3, 6, 13), (2, 2), (0, 0), (2, 2)),
              ((2, 2, 5, 11), (3, 3), (1, 1), (1, 1)), ((1, 2, 7, 17), (3, 3), (0, 0), (2, 2)),
              ((1, 2, 6, 20), (4, 4), (1, 1), (2, 2)), ((1, 3, 5, 9), (2, 3), (0, 1), (1, 2)),
              ((2, 3, 21), (3,), (1,), (2,)), ((1, 2, 3, 5, 9), (1, 3, 3), (0, 1, 1), (1, 2, 2))]
NCHW_IDS = ["3x3s2", "2x2s2", "3x3s1", "3x3s2p0", "4x4s2", "2x3s12", "1d", "3d"]

ALL_MODES = frozenset({0, 1, 2, 3})


# the kernels the NCHW path must not fall back to
OLDER = ("_pool_forward_kernel", "_pool_backward_kernel", "_pool_rows_forward_kernel")


def _small_tiles(monkeypatch):
    """The lane forward on for every mode, with small tiles: 32 (lane, group) pairs (8
    lanes of up to 4 groups); the row kernel's gather in blocks of 4 rows x 4 column pairs."""
    monkeypatch.setattr(pooling, "NCHW_LANE_KERNELS", ALL_MODES)
    monkeypatch.setattr(pooling, "NCHW_LANE_TILE", 32)
    monkeypatch.setattr(pooling, "MAX_ROW_BLOCK_W", 4)
    monkeypatch.setattr(pooling, "ROW_TILE", 16)
    monkeypatch.setattr(pooling, "ROW_TILE_BACKWARD", 16)


def _refuse(monkeypatch):
    class Refuse:
        def __getitem__(self, grid):
            raise AssertionError("another kernel ran instead of the NCHW lane forward")
    for name in OLDER:
        monkeypatch.setattr(pooling, name, Refuse())


@pytest.fixture
def nchw(monkeypatch):
    """The NCHW path on, with small tiles; the kernels the lane forward replaced raise, so
    a case that silently fell back would fail."""
    _small_tiles(monkeypatch)
    _refuse(monkeypatch)


def _ints(shape, rng):
    """Small integers: ties test the first-maximum rule, sums stay exact."""
    return rng.integers(-3, 4, size=shape).astype(np.float64)


MODE_IDS = ["MAX", "AVG_INCL", "AVG_EXCL", "MAX_DET"]
# every window in MAX and AVG_EXCL; AVG_INCL (the same kernels, another divisor) on two
# (and on 3x3/2 in float16)
MATCHES = [(c, m) for c in NCHW_CASES for m in (0, 2)] + [(NCHW_CASES[i], 1) for i in (4, 7)]
MATCHES_IDS = [f"{MODE_IDS[m]}-{NCHW_IDS[NCHW_CASES.index(c)]}" for c, m in MATCHES]


@pytest.mark.parametrize("case, mode", MATCHES, ids=MATCHES_IDS)
def test_nchw_pooling_matches_reference(case, mode, rng, nchw):
    """Forward into a poisoned y, backward with fresh dy into a poisoned dx (float32; the
    kernels are dtype-agnostic, float16 and MAX_DETERMINISTIC below)."""
    shape, window, padding, stride = case
    x = make(shape, "NCHW", values=_ints(shape, rng))
    check_pooling(x, mode, window, padding, stride, "NCHW", rng)


def test_nchw_pooling_float16(rng, nchw):
    """float16 in and out (float32 inside) on the ResNet window: MAX_DETERMINISTIC and
    AVG_INCL; an unpadded window in AVG_EXCL."""
    for (shape, window, padding, stride), mode in ((NCHW_CASES[0], 3), (NCHW_CASES[0], 1), (NCHW_CASES[3], 2)):
        x = make(shape, "NCHW", torch.float16, values=_ints(shape, rng))
        check_pooling(x, mode, window, padding, stride, "NCHW", rng, torch.float16)


@pytest.mark.parametrize("case", [NCHW_CASES[i] for i in (0, 5)], ids=[NCHW_IDS[i] for i in (0, 5)])
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


# both NaN rules on 3x3/2; on each other window one NaN rule, taken in turn
BIT_EXACT = [(NCHW_CASES[0], p) for p in (False, True)] + [(NCHW_CASES[i], i % 2 == 0) for i in range(1, 6)]
BIT_EXACT_IDS = [f"{NCHW_IDS[NCHW_CASES.index(c)]}-{'propagate' if p else 'ignore'}" for c, p in BIT_EXACT]


@pytest.mark.parametrize("case, propagate", BIT_EXACT, ids=BIT_EXACT_IDS)
def test_nchw_first_maximum_bit_exact(case, propagate, rng, monkeypatch):
    """Max pooling with many ties, -inf and NaN, and dy of random floats (the order of the
    sums over overlapping windows shows): y and dx equal the older row kernels' bit for bit,
    and the float64 reference where it is well defined (see test_pooling_cl._special);
    float16 on the ResNet window."""
    shape, window, padding, stride = case
    dtype = torch.float16 if case == NCHW_CASES[0] else torch.float32
    for anywhere in (True, False):
        values = _special(shape, rng, anywhere)
        x = make(shape, "NCHW", dtype, values=values)
        oshape = ref_pool.pooling_forward(values[:1, :1], 0, window, padding, stride).shape[2:]
        dy = make(shape[:2] + oshape, "NCHW", dtype, rng=rng)
        monkeypatch.setattr(pooling, "NCHW_LANE_KERNELS", frozenset())
        y_old, dx_old = _run(x, dy, 0, window, padding, stride, propagate)
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
    """Windows outside the NCHW lane forward (along D, stride 3, two columns right of the
    group) are refused and still run, through the older kernels."""
    shape, window, padding, stride = case
    x = make(shape, "NCHW", values=_ints(shape, rng))
    y_ref = ref_pool.pooling_forward(f64(x), mode, window, padding, stride)
    _small_tiles(monkeypatch)
    geo = pooling._Geometry(x, torch.empty(y_ref.shape), window, padding, stride, False)
    assert not pooling._use_nchw(geo, mode)
    y = poisoned(y_ref.shape, "NCHW")
    pooling.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
    check(y, y_ref, torch.float32, "y")
    dy = make(y_ref.shape, "NCHW", rng=rng)
    dx = poisoned(shape, "NCHW")
    pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, False, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride), torch.float32, "dx")


def test_default_modes_take_the_lane_kernels(rng, monkeypatch):
    """By default every mode's forward takes the NCHW lane forward for the 3x3/2 window,
    max's backward taps pass included, and every backward gather takes the row kernel."""
    x = make((1, 2, 7, 19), "NCHW", values=_ints((1, 2, 7, 19), rng))
    geo = pooling._Geometry(x, torch.empty((1, 2, 4, 10)), (3, 3), (1, 1), (2, 2), False)
    assert all(pooling._use_nchw(geo, m) for m in ALL_MODES) and pooling.NCHW_LANE_KERNELS == ALL_MODES
    ran = []

    class Spy:
        def __init__(self, name):
            self.name, self.kernel = name, getattr(pooling, name)

        def __getitem__(self, grid):
            ran.append(self.name)
            return self.kernel[grid]
    for name in ("_pool_nchw_lane_forward_kernel", "_pool_rows_forward_kernel", "_pool_rows_backward_kernel",
                 "_pool_forward_kernel", "_pool_backward_kernel"):
        monkeypatch.setattr(pooling, name, Spy(name))
    y = poisoned((1, 2, 4, 10), "NCHW")
    pooling.pooling_forward(x, y, 0, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
    check(y, ref_pool.pooling_forward(f64(x), 0, (3, 3), (1, 1), (2, 2)), torch.float32, "y")
    assert ran == ["_pool_nchw_lane_forward_kernel"]
    for mode in (0, 2):
        ran.clear()
        dy = make((1, 2, 4, 10), "NCHW", rng=rng)
        dx = poisoned((1, 2, 7, 19), "NCHW")
        pooling.pooling_backward(y, dy, x, dx, mode, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
        check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, (3, 3), (1, 1), (2, 2)), torch.float32, "dx")
        assert ran == (["_pool_nchw_lane_forward_kernel"] if mode == 0 else []) + ["_pool_rows_backward_kernel"]
    monkeypatch.setattr(pooling, "NCHW_LANE_KERNELS", frozenset())
    assert not any(pooling._use_nchw(geo, m) for m in ALL_MODES)


def test_nchw_strided_views_and_planes(rng, monkeypatch):
    """A sliced (non-contiguous) x and dx with a stride no vector factor divides, and more
    planes than one program's lanes or planes: against float64, max and average."""
    _small_tiles(monkeypatch)
    _refuse(monkeypatch)
    full = make((3, 5, 9, 22), "NCHW", values=_ints((3, 5, 9, 22), rng))
    x = full[:, 1:, 1:, 1:20]
    for mode in (0, 1):
        y_ref = ref_pool.pooling_forward(f64(x), mode, (3, 3), (1, 1), (2, 2))
        y = poisoned(y_ref.shape, "NCHW")
        pooling.pooling_forward(x, y, mode, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
        check(y, y_ref, torch.float32, "y")
        dy = make(y_ref.shape, "NCHW", rng=rng)
        dx = poisoned((3, 5, 9, 22), "NCHW")[:, 1:, 1:, 1:20]
        pooling.pooling_backward(y, dy, x, dx, mode, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
        check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, (3, 3), (1, 1), (2, 2)), torch.float32, "dx")
