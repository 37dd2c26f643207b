"""The channels-last row kernels of pooling (pooling.CL_KERNELS) against the float64
reference and, bit for bit, against the gather kernels they replace. Tiny odd shapes
under the interpreter, with small blocks (CL_ROWS, CL_BLOCK_W, CL_BLOCK_C) so that
rows, columns and channels all have ragged last blocks; --gpu runs them on the GPU.
MAX_DETERMINISTIC (the same kernels as MAX) and the strided layout (the same kernels
with other strides) run on a few windows, not all."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import pooling  # noqa: E402
from tridnn.reference import pooling as ref_pool  # noqa: E402

from test_cuda_layers import check, check_pooling, check_pooling_blend, f64, make, poisoned  # noqa: E402

# (shape, window, padding, stride): 3x3/2 pad 1 (ResNet), 2x2/2, 3x3/1 (the row carry
# does not apply at stride 1: KH != SH + 1), 5x5/2 pad 2, 3x4/2 (uneven), 1-D, 3-D without
# a window along D, 2x3/1 with zero padding
CL_CASES = [((2, 5, 7, 9), (3, 3), (1, 1), (2, 2)), ((1, 3, 6, 7), (2, 2), (0, 0), (2, 2)),
            ((1, 5, 5, 6), (3, 3), (1, 1), (1, 1)), ((1, 3, 9, 11), (5, 5), (2, 2), (2, 2)),
            ((2, 3, 7, 9), (3, 4), (1, 1), (2, 2)), ((2, 5, 13), (3,), (1,), (2,)),
            ((1, 3, 2, 5, 7), (1, 3, 3), (0, 1, 1), (1, 2, 2)), ((1, 3, 4, 5), (2, 3), (0, 0), (1, 1))]
CL_IDS = ["3x3s2", "2x2s2", "3x3s1", "5x5s2", "3x4s2", "1d", "3d", "2x3s1"]


@pytest.fixture
def cl(monkeypatch):
    """The channels-last kernels on, with small blocks; the gather kernels raise, so a
    case that silently fell back would fail."""
    monkeypatch.setattr(pooling, "CL_KERNELS", True)
    monkeypatch.setattr(pooling, "CL_ROWS", 2)
    monkeypatch.setattr(pooling, "CL_BLOCK_W", 4)
    monkeypatch.setattr(pooling, "CL_BLOCK_C", 4)  # C is 3 or 5

    class Refuse:
        def __getitem__(self, grid):
            raise AssertionError("the gather kernel ran instead of the channels-last kernel")
    monkeypatch.setattr(pooling, "_pool_forward_kernel", Refuse())
    monkeypatch.setattr(pooling, "_pool_backward_kernel", Refuse())


def _ints(shape, rng):
    """Small integers: ties test the first-maximum rule, sums stay exact."""
    return rng.integers(-3, 4, size=shape).astype(np.float64)


# every window in MAX and AVG_EXCL (NHWC); AVG_INCL (the same kernels, another divisor) on
# half of them; MAX_DETERMINISTIC and the strided view on a few
MATCHES = ([(c, m, "NHWC") for c in CL_CASES for m in (0, 2)] + [(CL_CASES[i], 1, "NHWC") for i in (0, 3, 5, 6)]
           + [(CL_CASES[0], 3, "NHWC"), (CL_CASES[0], 0, "strided"), (CL_CASES[1], 2, "strided"),
              (CL_CASES[6], 2, "strided")])
MATCHES_IDS = [f"{lay}-{['MAX', 'AVG_INCL', 'AVG_EXCL', 'MAX_DET'][m]}-{CL_IDS[CL_CASES.index(c)]}"
               for c, m, lay in MATCHES]


@pytest.mark.parametrize("case, mode, layout", MATCHES, ids=MATCHES_IDS)
def test_cl_pooling_matches_reference(case, mode, layout, rng, cl):
    shape, window, padding, stride = case
    x = make(shape, layout, values=_ints(shape, rng))
    check_pooling(x, mode, window, padding, stride, layout, rng)


@pytest.mark.parametrize("case", CL_CASES[:5], ids=CL_IDS[:5])
@pytest.mark.parametrize("mode", [0, 2], ids=["MAX", "AVG_EXCL"])
def test_cl_pooling_blend(case, mode, rng, cl):
    """alpha and beta: y = 2 pool(x) - y, dx = 0.5 pool'(dy) + 2 dx."""
    shape, window, padding, stride = case
    x = make(shape, "NHWC", values=_ints(shape, rng))
    check_pooling_blend(x, mode, window, padding, stride, "NHWC", rng)


def _run(x, dy, window, padding, stride, propagate):
    y = torch.full(dy.shape, 7.0, dtype=x.dtype, device=x.device).contiguous(memory_format=_fmt(x))
    dx = torch.full(x.shape, 7.0, dtype=x.dtype, device=x.device).contiguous(memory_format=_fmt(x))
    pooling.pooling_forward(x, y, 0, window, padding, stride, propagate, 1.0, 0.0)
    pooling.pooling_backward(y, dy, x, dx, 0, window, padding, stride, propagate, 1.0, 0.0)
    return y, dx


def _fmt(t):
    return torch.channels_last if t.dim() == 4 else torch.contiguous_format


def _special(shape, rng, anywhere):
    """Small integers with -inf and NaN. anywhere: both at random everywhere (all-NaN
    windows and -inf maxima behind a NaN included). Otherwise -inf only in channels 0-1
    (channel 0 of sample 0 entirely) and NaN only in odd rows of the other channels."""
    values = rng.integers(-1, 2, size=shape).astype(np.float64)
    if anywhere:
        values[rng.random(shape) < 0.1] = -np.inf
        values[rng.random(shape) < 0.08] = np.nan
    else:
        values[:, :2][rng.random(values[:, :2].shape) < 0.1] = -np.inf
        odd = values[:, 2:, 1::2]
        odd[rng.random(odd.shape) < 0.15] = np.nan
        values[-1, -1, 1, 0] = np.nan  # at least one, in an odd row of a channel past 1
    values[0, 0] = -np.inf  # a whole plane of -inf: the first in-range tap is the maximum
    return values


def _bit_exact_cases():
    """Both tap rules and both NaN rules on 3x3/2 (one sample); one combination,
    alternating, on each other window."""
    cases, ids = [], []
    for i in range(5):
        case = (((1,) + CL_CASES[0][0][1:],) + CL_CASES[0][1:]) if i == 0 else CL_CASES[i]
        combos = [(p, a) for p in (False, True) for a in (False, True)] if i == 0 else [(i % 2 == 0, i % 4 < 2)]
        for p, a in combos:
            cases.append((case, p, a))
            ids.append(f"{'arg_eq' if a else 'running_rule'}-{'propagate' if p else 'ignore'}-{CL_IDS[i]}")
    return cases, ids


BIT_EXACT, BIT_EXACT_IDS = _bit_exact_cases()


@pytest.mark.parametrize("case, propagate, arg_eq", BIT_EXACT, ids=BIT_EXACT_IDS)
def test_cl_first_maximum_bit_exact(case, propagate, arg_eq, rng, monkeypatch):
    """Max pooling with many ties, -inf and NaN: y and dx equal the gather kernels' bit
    for bit (the same first-maximum tap), on -inf and NaN anywhere, and equal the float64
    reference where it is well defined (see _special); with CL_ARG_EQ the taps come from
    (row maximum, first tap equal to it)."""
    shape, window, padding, stride = case
    for anywhere in (True, False):
        values = _special(shape, rng, anywhere)
        x = make(shape, "NHWC", values=values)
        oshape = ref_pool.pooling_forward(values[:1, :1], 0, window, padding, stride).shape[2:]
        dy = make(shape[:2] + oshape, "NHWC", values=rng.integers(1, 9, size=shape[:2] + oshape).astype(np.float64))
        monkeypatch.setattr(pooling, "CL_KERNELS", False)
        y_old, dx_old = _run(x, dy, window, padding, stride, propagate)
        monkeypatch.setattr(pooling, "CL_KERNELS", True)
        monkeypatch.setattr(pooling, "CL_ARG_EQ", arg_eq)
        monkeypatch.setattr(pooling, "CL_ROWS", 2)
        monkeypatch.setattr(pooling, "CL_BLOCK_W", 4)
        monkeypatch.setattr(pooling, "CL_BLOCK_C", 4)
        y_new, dx_new = _run(x, dy, window, padding, stride, propagate)
        assert torch.equal(torch.isnan(y_new), torch.isnan(y_old))
        assert torch.equal(torch.nan_to_num(y_new), torch.nan_to_num(y_old))
        assert torch.equal(dx_new, dx_old)
        y_ref = ref_pool.pooling_forward(values, 0, window, padding, stride, propagate_nan=propagate)
        dx_ref = ref_pool.pooling_backward(values, f64(dy), 0, window, padding, stride, propagate_nan=propagate)
        np.testing.assert_array_equal(np.isnan(f64(y_new)), np.isnan(y_ref))
        np.testing.assert_array_equal(f64(y_new)[~np.isnan(y_ref)], y_ref[~np.isnan(y_ref)])
        np.testing.assert_array_equal(f64(dx_new), dx_ref)
        assert np.isnan(y_ref).any() == propagate  # NaN reached some window


@pytest.mark.parametrize("case", CL_CASES, ids=CL_IDS)
@pytest.mark.parametrize("mode", [0], ids=["MAX"])
def test_cl_running_rule_matches_reference(case, mode, rng, cl, monkeypatch):
    """The taps by the running rule (CL_ARG_EQ False; the default, True, runs above) on
    every window shape: dx routed to the first maximum (float64 reference)."""
    monkeypatch.setattr(pooling, "CL_ARG_EQ", False)
    shape, window, padding, stride = case
    x = make(shape, "NHWC", values=_ints(shape, rng))
    y_ref = ref_pool.pooling_forward(f64(x), mode, window, padding, stride)
    y = poisoned(y_ref.shape, "NHWC")
    pooling.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
    check(y, y_ref, torch.float32, "y")
    dy = make(y_ref.shape, "NHWC", rng=rng)
    dx = poisoned(shape, "NHWC")
    pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, False, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride), torch.float32, "dx")
