"""Property-based layer tests: random pooling, softmax, batch-norm and activation problems
against the float64 references, forward and backward.

Hypothesis draws ranks, sizes, modes, dtypes, layouts (NCHW/NHWC/strided), alpha/beta
(beta == 0 over NaN-filled outputs) and, for pooling and activations, the NaN
propagation flag with NaN placed in the input. Tolerances are layer_cases.check's
(testing.TOLERANCE with the documented slack for exp/log/rsqrt); max pooling and the
piecewise-linear activations are exact. Profiles as in test_fuzz_conv.py.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tridnn
from tridnn import PoolingDescriptor, PoolingMode
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode
from tridnn.reference import activation as act_ref
from tridnn.reference import normalization as bn_ref
from tridnn.reference import pooling as pool_ref
from tridnn.reference import softmax as softmax_ref

from fuzz_support import Stats, fuzz_settings
from layer_cases import SLACK, check, handle, normal, output, tensor

stats = Stats(__name__)
DTYPES = ("float32", "float64", "float16", "bfloat16")
NICE = (1.0, 2.0, 0.5, -1.0)


@pytest.fixture(scope="module", autouse=True)
def _dump_stats():
    yield
    stats.dump()


def scalars():
    return st.tuples(st.sampled_from(NICE), st.sampled_from((0.0, 0.0, 1.0, -0.5)))


# -- pooling ---------------------------------------------------------------------------
@st.composite
def pooling_cases(draw):
    nd = draw(st.sampled_from((1, 2, 2, 3)))
    window = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    padding = tuple(draw(st.integers(0, w - 1)) for w in window)
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    spatial = tuple(draw(st.integers(max(1, w - 2 * p), w - 2 * p + 6)) for w, p in zip(window, padding))
    return dict(mode=draw(st.sampled_from(list(PoolingMode))), window=window, padding=padding, stride=stride,
                dims=(draw(st.integers(1, 3)), draw(st.integers(1, 4)), *spatial),
                dtype=draw(st.sampled_from(DTYPES)), layout=draw(st.sampled_from(("NCHW", "NHWC", "strided"))),
                nan=draw(st.booleans()), nan_input=draw(st.booleans()), scalars=draw(scalars()),
                seed=draw(st.integers(0, 2**32 - 1)))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@fuzz_settings(ci_examples=40)
@given(case=pooling_cases())
def test_pooling_matches_reference(case):
    stats.problem("pooling")
    rng = np.random.default_rng(case["seed"])
    mode, dtype, layout = case["mode"], case["dtype"], case["layout"]
    alpha, beta = case["scalars"]
    pool = PoolingDescriptor(mode, case["window"], case["padding"], case["stride"], nan_opt=int(case["nan"]),
                             nd=len(case["window"]))
    x_desc, x = tensor(case["dims"], dtype, layout, rng)
    if case["nan_input"]:
        x[tuple(int(rng.integers(0, d)) for d in case["dims"])] = np.nan
    y_dims = tridnn.get_pooling_forward_output_dim(pool, x_desc)
    y_desc, y, prior = output(y_dims, dtype, layout, rng, beta)
    h = handle()
    tridnn.pooling_forward(h, pool, alpha, x_desc, x, beta, y_desc, y)
    want = pool_ref.pooling_forward(x, int(mode), pool.window, pool.padding, pool.stride, case["nan"])
    label = f"pool {mode.name} {case}"
    if case["nan_input"]:
        # IEEE / propagation flag: NaN exactly where the reference has it
        got_nan = np.isnan(np.asarray(y, np.float64))
        want_nan = np.isnan(alpha * want + (beta * prior if beta else 0.0))
        assert np.array_equal(got_nan, want_nan), f"{label}: NaN pattern differs"
        stats.ran("pooling-nan", mode.name)
        return
    check(y, want, dtype, alpha, beta, prior, exact=mode.is_max, name=f"{label} y")
    # backward through the forward result
    _, y_fwd, _ = output(y_dims, dtype, layout, rng, 0.0)
    tridnn.pooling_forward(h, pool, 1.0, x_desc, x, 0.0, y_desc, y_fwd)
    dy_desc, dy = tensor(y_dims, dtype, layout, rng)
    dx_desc, dx, dx_prior = output(case["dims"], dtype, layout, rng, beta)
    tridnn.pooling_backward(h, pool, alpha, y_desc, y_fwd, dy_desc, dy, x_desc, x, beta, dx_desc, dx)
    dx_want = pool_ref.pooling_backward(x, dy, int(mode), pool.window, pool.padding, pool.stride, case["nan"])
    check(dx, dx_want, dtype, alpha, beta, dx_prior, exact=mode.is_max, name=f"{label} dx")
    stats.ran("pooling", mode.name)


# -- softmax -------------------------------------------------------------------------------
@fuzz_settings(ci_examples=30)
@given(dims=st.lists(st.integers(1, 5), min_size=2, max_size=5).map(tuple),
       algorithm=st.sampled_from(list(tridnn.SoftmaxAlgorithm)), mode=st.sampled_from(list(tridnn.SoftmaxMode)),
       dtype=st.sampled_from(DTYPES), layout=st.sampled_from(("NCHW", "NHWC", "strided")), ab=scalars(),
       seed=st.integers(0, 2**32 - 1))
def test_softmax_matches_reference(dims, algorithm, mode, dtype, layout, ab, seed):
    stats.problem("softmax")
    rng = np.random.default_rng(seed)
    alpha, beta = ab
    if len(dims) < 3:
        layout = "NCHW"
    h = handle()
    x_desc, x = normal(dims, dtype, layout, rng, 3.0)
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    tridnn.softmax_forward(h, algorithm, mode, alpha, x_desc, x, beta, y_desc, y)
    want = softmax_ref.softmax_forward(x, int(algorithm), int(mode))
    label = f"softmax {algorithm.name} {mode.name} {dims} {dtype} {layout}"
    check(y, want, dtype, alpha, beta, prior, name=f"{label} y")
    _, y_fwd, _ = output(dims, dtype, layout, rng, 0.0)
    tridnn.softmax_forward(h, algorithm, mode, 1.0, x_desc, x, 0.0, y_desc, y_fwd)
    dy_desc, dy = normal(dims, dtype, layout, rng)
    dx_desc, dx, dx_prior = output(dims, dtype, layout, rng, beta)
    tridnn.softmax_backward(h, algorithm, mode, alpha, y_desc, y_fwd, dy_desc, dy, beta, dx_desc, dx)
    dx_want = softmax_ref.softmax_backward(y_fwd, dy, int(algorithm), int(mode))
    check(dx, dx_want, dtype, alpha, beta, dx_prior, name=f"{label} dx")
    stats.ran("softmax", f"{algorithm.name}/{mode.name}")


# -- batch normalization -----------------------------------------------------------------------
@fuzz_settings(ci_examples=25)
@given(dims=st.tuples(st.integers(2, 4), st.integers(1, 4)).flatmap(
           lambda nc: st.lists(st.integers(1, 4), min_size=0, max_size=3).map(lambda sp: (*nc, *sp))),
       mode=st.sampled_from(list(tridnn.BatchNormMode)), dtype=st.sampled_from(DTYPES),
       layout=st.sampled_from(("NCHW", "NHWC", "strided")), ab=scalars(), seed=st.integers(0, 2**32 - 1))
def test_batch_norm_matches_reference(dims, mode, dtype, layout, ab, seed):
    stats.problem("batch_norm")
    rng = np.random.default_rng(seed)
    alpha, beta = ab
    if len(dims) < 3:
        layout = "NCHW"
    if len(dims) == 2 and tridnn.BatchNormMode(mode).spatial:
        dims = (*dims, 2)
    eps = 1e-4
    h = handle()
    x_desc, x = normal(dims, dtype, layout, rng, 2.0)
    bn = tridnn.derive_bn_tensor_descriptor(x_desc, mode)
    bdt = bn.dtype.numpy
    scale = rng.uniform(0.5, 1.5, bn.dims).astype(bdt)
    bias = rng.uniform(-0.5, 0.5, bn.dims).astype(bdt)
    rmean, rvar = np.zeros(bn.dims, bdt), np.ones(bn.dims, bdt)
    smean, sinv = np.full(bn.dims, np.nan, bdt), np.full(bn.dims, np.nan, bdt)
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    tridnn.batch_norm_forward_training(h, mode, alpha, beta, x_desc, x, y_desc, y, bn, scale, bias, 0.5,
                                       rmean, rvar, eps, smean, sinv)
    spatial = tridnn.BatchNormMode(mode).spatial
    y_want, mean, var = bn_ref.batch_norm_train(x, scale, bias, eps, spatial)
    label = f"batch norm {tridnn.BatchNormMode(mode).name} {dims} {dtype} {layout}"
    check(y, y_want, dtype, alpha, beta, prior, name=f"{label} y")
    check(smean, mean, bn.dtype, name=f"{label} saved mean")
    dy_desc, dy = normal(dims, dtype, layout, rng)
    dx_desc, dx, dx_prior = output(dims, dtype, layout, rng, beta)
    dscale, dbias = np.full(bn.dims, np.nan, bdt), np.full(bn.dims, np.nan, bdt)
    tridnn.batch_norm_backward(h, mode, alpha, beta, 1.0, 0.0, x_desc, x, dy_desc, dy, dx_desc, dx, bn, scale,
                               dscale, dbias, eps, smean, sinv)
    dx_want, dscale_want, dbias_want, _ = bn_ref.batch_norm_backward(x, dy, scale, eps, spatial)
    # A channel whose values nearly agree (a std far below |x|) loses digits in x - mean
    # in float32 however it is computed, and dx amplifies that by up to |x| / std: the long
    # fuzz's (2, 2, 3) PER_ACTIVATION case with std 0.018 at |x| 2.3 erred 1.8e-4 (2026-12-06)
    amplification = float(np.max(np.abs(np.asarray(x, np.float64)) / np.sqrt(var + eps)))
    check(dx, dx_want, dtype, alpha, beta, dx_prior, name=f"{label} dx",
          slack=SLACK[tridnn.types.DataType.of(dtype)] * max(1.0, amplification / 16))
    check(dscale, dscale_want, bn.dtype, name=f"{label} dscale")
    check(dbias, dbias_want, bn.dtype, name=f"{label} dbias")
    stats.ran("batch_norm", tridnn.BatchNormMode(mode).name)


# -- activations ---------------------------------------------------------------------------------
EXACT_ACTIVATIONS = {ActivationMode.RELU, ActivationMode.IDENTITY, ActivationMode.CLIPPED_RELU}


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@fuzz_settings(ci_examples=40)
@given(dims=st.lists(st.integers(1, 5), min_size=3, max_size=5).map(tuple),
       mode=st.sampled_from(list(ActivationMode)), nan_opt=st.booleans(), nan_input=st.booleans(),
       coef=st.sampled_from((0.5, 1.0, 6.0)), dtype=st.sampled_from(DTYPES),
       layout=st.sampled_from(("NCHW", "NHWC", "strided")), ab=scalars(), seed=st.integers(0, 2**32 - 1))
def test_activation_matches_reference(dims, mode, nan_opt, nan_input, coef, dtype, layout, ab, seed):
    stats.problem("activation")
    rng = np.random.default_rng(seed)
    alpha, beta = ab
    desc = ActivationDescriptor(mode, nan_opt=int(nan_opt), coef=coef)
    h = handle()
    x_desc, x = normal(dims, dtype, layout, rng, 2.0)
    if nan_input:
        x[tuple(int(rng.integers(0, d)) for d in dims)] = np.nan
    y_desc, y, prior = output(dims, dtype, layout, rng, beta)
    tridnn.activation_forward(h, desc, alpha, x_desc, x, beta, y_desc, y)
    want = act_ref.activation_forward(np.asarray(x, np.float64), int(mode), coef)
    label = f"activation {mode.name} nan_opt={nan_opt} {dims} {dtype} {layout}"
    if nan_input:
        got_nan = np.isnan(np.asarray(y, np.float64))
        if nan_opt:  # PROPAGATE_NAN: exactly the NaN inputs give NaN
            assert np.array_equal(got_nan, np.isnan(np.asarray(x, np.float64))), f"{label}: NaN pattern differs"
        else:  # NOT_PROPAGATE_NAN may map it to a number, but never invents NaN elsewhere
            assert not (got_nan & ~np.isnan(np.asarray(x, np.float64))).any(), f"{label}: new NaN"
        stats.ran("activation-nan", mode.name)
        return
    exact = mode in EXACT_ACTIVATIONS
    check(y, want, dtype, alpha, beta, prior, exact=exact, name=f"{label} y")
    _, y_fwd, _ = output(dims, dtype, layout, rng, 0.0)
    tridnn.activation_forward(h, desc, 1.0, x_desc, x, 0.0, y_desc, y_fwd)
    dy_desc, dy = normal(dims, dtype, layout, rng)
    dx_desc, dx, dx_prior = output(dims, dtype, layout, rng, beta)
    tridnn.activation_backward(h, desc, alpha, y_desc, y_fwd, dy_desc, dy, x_desc, x, beta, dx_desc, dx)
    dx_want = act_ref.activation_backward(np.asarray(x, np.float64), np.asarray(dy, np.float64), int(mode), coef)
    check(dx, dx_want, dtype, alpha, beta, dx_prior, exact=exact, name=f"{label} dx")
    stats.ran("activation", mode.name)
