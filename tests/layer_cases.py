"""Shared pieces of the layer tests: tensors in every layout, poisoned or primed
outputs, the comparison against a float64 reference, and finite differences."""
from fractions import Fraction

import numpy as np

import tridnn
from tridnn import testing
from tridnn.types import DataType

DTYPES = ["float32", "float64", "float16", "bfloat16"]
LAYOUTS = list(testing.LAYOUTS)

# Extra slack over testing.TOLERANCE for ops whose float32 math rounds several times
# (exp, log, rsqrt, divisions) before the single rounding into the output dtype.
SLACK = {DataType.DOUBLE: 1e3, DataType.FLOAT: 5.0, DataType.HALF: 1.0, DataType.BFLOAT16: 1.0}


def handle():
    return tridnn.Handle(find_cache=None)


def tensor(dims, dtype, layout, rng, values=None, lo=-3, hi=3, density=0.8):
    """(descriptor, view) of random small-integer values (or ``values``) in ``layout``."""
    if values is None:
        values = testing.fill(dims, dtype, rng, lo, hi, density)
    if layout == "strided" and len(dims) < 3:
        layout = "NCHW"
    return testing.make_tensor(dims, dtype, layout, rng, values)


def normal(dims, dtype, layout, rng, scale=1.0):
    values = (rng.standard_normal(dims) * scale).astype(DataType.of(dtype).numpy)
    return tensor(dims, dtype, layout, rng, values)


def output(dims, dtype, layout, rng, beta):
    """(descriptor, view, prior): NaN-poisoned when beta == 0 (it must not be read),
    else primed with random values that the result must blend in."""
    desc, view = tensor(dims, dtype, layout, rng)
    if beta == 0:
        testing.poison(view)
        return desc, view, None
    return desc, view, view.astype(np.float64)


def either_rounding(got, want, ref, alpha, beta, prior):
    """``want`` where ``got`` equals the float64 blend alpha * ref + beta * prior rounded once.

    Why: on float64 data the reference rounds the blend twice (the product, then the sum),
    and a GPU kernel that fuses it into an FMA rounds once; both evaluate the same formula
    exactly, so either passes. Only the elements that differ are worked out, in fractions."""
    got64, want = np.asarray(got, np.float64), np.array(want)
    ref, prior = np.asarray(ref, np.float64), np.asarray(prior, np.float64)
    for i in map(tuple, np.argwhere((got64 != want) & np.isfinite(want))):
        once = float(Fraction(alpha) * Fraction(float(ref[i])) + Fraction(beta) * Fraction(float(prior[i])))
        if got64[i] == once:
            want[i] = once
    return want


def check(got, ref, dtype, alpha=1.0, beta=0.0, prior=None, exact=False, name="output", slack=None):
    """got == alpha * ref + beta * prior (float64), exactly or within the dtype's tolerance."""
    testing.assert_all_written(got, name)
    dtype = DataType.of(dtype)
    want = alpha * np.asarray(ref, np.float64) + (beta * prior if beta else 0.0)
    if exact:
        want = want.astype(dtype.numpy)
        if dtype == DataType.DOUBLE and beta:
            want = either_rounding(got, want, ref, alpha, beta, prior)
        testing.assert_exact(got, want, name)
        return
    pointwise, l2 = testing.TOLERANCE[dtype]
    k = SLACK[dtype] if slack is None else slack
    got64 = np.asarray(got, np.float64)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    err = float(np.abs(got64 - want).max(initial=0.0)) / scale
    assert err <= pointwise * k, f"{name}: max error {err:.3g} > {pointwise * k:.3g} for {dtype.name}"


def numeric_grad(f, x, dy, eps=1e-6):
    """d/dx of sum(f(x) * dy) by central differences, in float64."""
    x = np.array(x, np.float64)
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        old = x[idx]
        x[idx] = old + eps
        plus = np.sum(f(x) * dy)
        x[idx] = old - eps
        minus = np.sum(f(x) * dy)
        x[idx] = old
        grad[idx] = (plus - minus) / (2 * eps)
    return grad
