"""The layer tests' exact check (layer_cases.check) on float64 blends.

Why: the GPU fuzz (seed 4, H100, 2026-12-06) failed CLIPPED_RELU on float64 data with
alpha 3, beta 0.5 by one unit in the last place: the kernel fuses alpha * f + beta * y
into an FMA (one rounding), the reference rounds twice. Both are exact evaluations of the
blend, so the check takes either; anything else must still fail.
"""
from fractions import Fraction

import numpy as np
import pytest

from layer_cases import check


def _blend_cases(alpha=3.0, beta=0.5, n=4000, seed=0):
    """(ref, prior, rounded twice, rounded once) where the two roundings differ."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(n) * 2.0
    prior = rng.integers(-3, 4, n).astype(np.float64)
    twice = alpha * ref + beta * prior
    once = np.array([float(Fraction(alpha) * Fraction(r) + Fraction(beta) * Fraction(p))
                     for r, p in zip(ref, prior)])
    differ = twice != once
    assert differ.any(), "no element where one rounding and two differ: the test would prove nothing"
    return ref, prior, twice, once, differ


def test_float64_blend_rounded_once_passes():
    ref, prior, twice, once, differ = _blend_cases()
    check(once, ref, "float64", 3.0, 0.5, prior, exact=True)   # the FMA's answer
    check(twice, ref, "float64", 3.0, 0.5, prior, exact=True)  # the reference's own


def test_float64_blend_one_ulp_off_fails():
    ref, prior, twice, once, differ = _blend_cases()
    got = twice.copy()
    i = int(np.flatnonzero(~differ)[0])   # an element where both roundings agree
    got[i] = np.nextafter(got[i], np.inf)
    with pytest.raises(AssertionError, match="not exact"):
        check(got, ref, "float64", 3.0, 0.5, prior, exact=True)


def test_float32_blend_stays_rounded_once():
    """float32: the float64 blend is exact for these data, so one rounding is the only answer."""
    ref, prior, _, _, _ = _blend_cases()
    ref32 = ref.astype(np.float32).astype(np.float64)
    want = (3.0 * ref32 + 0.5 * prior).astype(np.float32)
    check(want, ref32, "float32", 3.0, 0.5, prior, exact=True)
    got = want.copy()
    got[0] = np.nextafter(got[0], np.float32(np.inf))
    with pytest.raises(AssertionError, match="not exact"):
        check(got, ref32, "float32", 3.0, 0.5, prior, exact=True)
