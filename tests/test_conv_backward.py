"""Backward data, backward filter and backward bias against the float64 reference.

Integer fills make the GEMM-style methods exact; FFT and Winograd get the documented
tolerance. Outputs are poisoned with NaN first (an unwritten element fails, and
beta == 0 must not read them). The references themselves are checked against
finite differences of the float64 forward convolution.
"""
import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem
from tridnn.cpu.conv_bwd_common import fast_size, winograd_matrices
from tridnn.descriptors.convolution import transposed_input_dims
from tridnn.errors import BadParamError, NotSupportedError
from tridnn.shapes import conv as make_conv

from problems import REGRESSION, suite_problems

BWD_DATA = registry.algorithms("conv", "bwd_data", "numpy")
BWD_FILTER = registry.algorithms("conv", "bwd_filter", "numpy")
BWD = BWD_DATA + BWD_FILTER
DTYPES = ["float32", "float64", "float16", "bfloat16"]
CONV, XCORR = tridnn.ConvMode.CONVOLUTION, tridnn.ConvMode.CROSS_CORRELATION


def _ids(p):
    return p["name"]


def _algo_id(a):
    return f"{a.direction}-{a.name}"


def descriptors(p, dtype, layout, rng, n=2, mode=XCORR, pad_post=None, output_padding=0):
    """(conv, x desc/view/values, w desc/view/values, dy desc/view/values) for one problem."""
    nd = len(p["spatial"])
    conv = tridnn.ConvolutionDescriptor(padding=p["pad"], pad_post=pad_post, stride=p["stride"],
                                        dilation=p["dilation"], groups=p["groups"], mode=mode, nd=nd)
    w_vals = testing.fill((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, rng)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, layout, w_vals)
    x_dims = (n, p["C"], *p["spatial"])
    if output_padding:
        y_probe = tridnn.TensorDescriptor.packed((n, p["C"], *p["spatial"]))
        dy_dims = conv.output_dims(y_probe, w_desc)
        x_dims = transposed_input_dims(tridnn.TensorDescriptor.packed(dy_dims), w_desc, conv, output_padding)
    x_vals = testing.fill(x_dims, dtype, rng)
    x_desc, x = testing.make_tensor(x_dims, dtype, layout, rng, x_vals)
    dy_dims = conv.output_dims(x_desc, w_desc)
    dy_vals = testing.fill(dy_dims, dtype, rng)
    dy_desc, dy = testing.make_tensor(dy_dims, dtype, layout, rng, dy_vals)
    return conv, (x_desc, x, x_vals), (w_desc, w, w_vals), (dy_desc, dy, dy_vals)


def run_case(algo, p, dtype, layout, rng, n=2, alpha=1.0, beta=0.0, mode=XCORR, pad_post=None,
             output_padding=0):
    """Run one backward algorithm through the public API and check it; returns the
    reason when the algorithm does not apply (the caller skips)."""
    conv, (x_desc, x, x_vals), (w_desc, w, w_vals), (dy_desc, dy, dy_vals) = descriptors(
        p, dtype, layout, rng, n, mode, pad_post, output_padding)
    problem = ConvProblem(algo.direction, x_desc, w_desc, dy_desc, conv)
    reason = algo.not_applicable(problem)
    if reason is not None:
        return reason
    handle = tridnn.Handle(find_cache=None)
    mode_name = "convolution" if mode == CONV else "cross_correlation"
    geometry = (p["stride"], p["pad"], pad_post, p["dilation"], p["groups"], mode_name)
    out, out_vals = (x, x_vals) if algo.direction == "bwd_data" else (w, w_vals)
    if beta == 0:
        testing.poison(out)
        prior = None
    else:
        prior = testing.fill(out.shape, dtype, rng)
        out[...] = prior
    inputs_before = [a.copy() for a in ((w, dy) if algo.direction == "bwd_data" else (x, dy))]
    if algo.direction == "bwd_data":
        size = tridnn.get_convolution_backward_data_workspace_size(handle, w_desc, dy_desc, conv, x_desc,
                                                                    algo.enum)
        ws = np.empty(size, np.uint8)
        got = tridnn.convolution_backward_data(handle, alpha, w_desc, w, dy_desc, dy, conv, algo.enum, ws,
                                               beta, x_desc, x)
        ref = reference.conv_backward_data(dy_vals, w_vals, x_vals.shape, *geometry)
    else:
        size = tridnn.get_convolution_backward_filter_workspace_size(handle, x_desc, dy_desc, conv, w_desc,
                                                                      algo.enum)
        ws = np.empty(size, np.uint8)
        got = tridnn.convolution_backward_filter(handle, alpha, x_desc, x, dy_desc, dy, conv, algo.enum, ws,
                                                 beta, w_desc, w)
        ref = reference.conv_backward_filter(x_vals, dy_vals, w_vals.shape, *geometry)
    assert got is out
    testing.check_result(out, ref, dtype, algo.exact, alpha, beta, prior, name=f"{_algo_id(algo)}")
    after = (w, dy) if algo.direction == "bwd_data" else (x, dy)
    for before, now in zip(inputs_before, after):
        assert np.array_equal(before, now, equal_nan=True), "an input was modified"
    return None


def skip_unless_applies(reason):
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")


# -- every algorithm, every problem ------------------------------------------------------
@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
@pytest.mark.parametrize("p", REGRESSION, ids=_ids)
@pytest.mark.parametrize("dtype", DTYPES)
def test_regression_suite_every_dtype(algo, p, dtype, rng):
    layout = "NHWC" if dtype in ("float16", "bfloat16") else "NCHW"
    skip_unless_applies(run_case(algo, p, dtype, layout, rng))


# every problem in NCHW; NHWC and strided views on the regression suite and every
# fourth suite problem (the layouts only change packing, which those cover)
LAYOUT_CASES = [(p, "NCHW") for p in REGRESSION + suite_problems()] + \
    [(p, layout) for p in REGRESSION + suite_problems()[::4] for layout in ("NHWC", "strided")]


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
@pytest.mark.parametrize("p,layout", LAYOUT_CASES, ids=[f"{p['name']}-{l}" for p, l in LAYOUT_CASES])
def test_suites_every_layout(algo, p, layout, rng):
    skip_unless_applies(run_case(algo, p, "float32", layout, rng))


W3 = make_conv("w3", 5, 6, (9, 11), 3, 1, 1)        # a case every method applies to
W3_G = make_conv("w3g", 6, 4, (7, 8), 3, 1, 1, groups=2)


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_on_a_shared_case(algo, dtype, rng):
    assert run_case(algo, W3, dtype, "NHWC" if dtype in ("float16", "bfloat16") else "NCHW", rng) is None


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.0), (0.5, 1.0), (-1.0, 2.0)])
def test_alpha_beta(algo, alpha, beta, rng):
    assert run_case(algo, W3_G, "float32", "NHWC", rng, alpha=alpha, beta=beta) is None


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_convolution_mode_flips_filter(algo, dtype, rng):
    p = make_conv("flip", 4, 6, (7, 9), 3, 1, 1)
    assert run_case(algo, p, dtype, "NCHW", rng, mode=CONV) is None


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
def test_asymmetric_padding(algo, rng):
    p = make_conv("asym", 3, 5, (8, 7), 3, 1, (0, 2))
    assert run_case(algo, p, "float32", "NCHW", rng, pad_post=(2, 1)) is None


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
def test_large_padding_beyond_kernel(algo, rng):
    """Padding wider than the kernel: some taps read only padding."""
    p = make_conv("widepad", 2, 3, (5, 6), 3, 1, 4)
    assert run_case(algo, p, "float64", "NCHW", rng) is None


@pytest.mark.parametrize("algo", BWD_DATA, ids=_algo_id)
@pytest.mark.parametrize("geometry", [(2, 1, 1), (3, 2, 1), (2, 2, 1)], ids=["s2", "s3d2", "s2d2"])
def test_transposed_convolution_with_output_padding(algo, geometry, rng):
    """dx dims from transposed_input_dims with output padding: the extra rows no dy reaches are 0."""
    stride, dilation, output_padding = geometry
    p = make_conv("tconv", 3, 4, (6, 7), 3, stride, 1, dilation)
    skip_unless_applies(run_case(algo, p, "float32", "NCHW", rng, output_padding=output_padding))


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
@pytest.mark.parametrize("beta", [0.0, 2.0])
def test_empty_batch(algo, beta, rng):
    p = make_conv("empty", 4, 4, (5, 5), 3, 1, 1)
    assert run_case(algo, p, "float32", "NCHW", rng, n=0, beta=beta) is None


def test_empty_batch_filter_gradient_is_zero(rng):
    p = make_conv("empty", 4, 4, (5, 5), 3, 1, 1)
    conv, (x_desc, x, _), (w_desc, dw, _), (dy_desc, dy, _) = descriptors(p, "float32", "NCHW", rng, n=0)
    testing.poison(dw)
    tridnn.convolution_backward_filter(tridnn.Handle(find_cache=None), 1.0, x_desc, x, dy_desc, dy, conv,
                                       "ALGO_1", None, 0.0, w_desc, dw)
    assert not dw.any()


@pytest.mark.parametrize("algo", BWD, ids=_algo_id)
def test_deterministic_bit_for_bit(algo, rng):
    """Every method is deterministic (fixed reduction order): two runs give the same bits."""
    assert algo.deterministic
    conv, (x_desc, x, _), (w_desc, w, _), (dy_desc, dy, _) = descriptors(W3_G, "float32", "NCHW", rng, n=3)
    handle = tridnn.Handle(find_cache=None, deterministic=True)
    results = []
    for _ in range(2):
        if algo.direction == "bwd_data":
            tridnn.convolution_backward_data(handle, 1.0, w_desc, w, dy_desc, dy, conv, algo.enum,
                                             handle.workspace(1 << 24), 0.0, x_desc, x)
            results.append(x.copy())
        else:
            tridnn.convolution_backward_filter(handle, 1.0, x_desc, x, dy_desc, dy, conv, algo.enum,
                                               handle.workspace(1 << 24), 0.0, w_desc, w)
            results.append(w.copy())
    assert np.array_equal(results[0], results[1])


def test_every_algorithm_applies_somewhere(rng):
    """No registered backward algorithm is a stub that applies to nothing."""
    applied = {_algo_id(a): 0 for a in BWD}
    for p in REGRESSION + suite_problems() + [W3]:
        for algo in BWD:
            if run_case(algo, p, "float32", "NCHW", rng, n=1) is None:
                applied[_algo_id(algo)] += 1
    assert all(count > 0 for count in applied.values()), applied


def test_registered_enums():
    assert sorted(a.enum for a in BWD_DATA) == sorted(tridnn.ConvBwdDataAlgo)
    assert sorted(a.enum for a in BWD_FILTER) == sorted(set(tridnn.ConvBwdFilterAlgo)
                                                        - {tridnn.ConvBwdFilterAlgo.WINOGRAD})
    exact = {_algo_id(a) for a in BWD if a.exact}
    assert exact == {"bwd_data-ALGO_0", "bwd_data-ALGO_1", "bwd_filter-ALGO_0", "bwd_filter-ALGO_1",
                     "bwd_filter-ALGO_3"}
    registry.check_table()


# -- the references against finite differences ----------------------------------------------
FD_CASES = [make_conv("fd2d", 4, 4, (5, 6), 3, 2, (1, 0), 1, groups=2),
            make_conv("fd1d", 2, 3, (7,), 3, 1, 2, 2),
            make_conv("fd3d", 2, 2, (3, 4, 3), 2, 1, 1)]


@pytest.mark.parametrize("p", FD_CASES, ids=_ids)
@pytest.mark.parametrize("mode", ["cross_correlation", "convolution"])
def test_gradients_match_finite_differences(p, mode, rng):
    """L = sum(conv(x, w) * dy) is linear in x and in w, so central differences of the
    float64 forward are exact to rounding: they must equal dx and dw from the references
    and from tridnn's exact backward methods."""
    n = 1
    x = rng.standard_normal((n, p["C"], *p["spatial"]))
    w = rng.standard_normal((p["K"], p["C"] // p["groups"], *p["kernel"]))
    geometry = dict(stride=p["stride"], pad_pre=p["pad"], dilation=p["dilation"], groups=p["groups"], mode=mode)
    dy = rng.standard_normal(reference.conv_forward(x, w, **geometry).shape)
    loss = lambda x_, w_: float(np.sum(reference.conv_forward(x_, w_, **geometry) * dy))

    def numeric(array, f):
        grad = np.zeros_like(array)
        for idx in np.ndindex(*array.shape):
            plus, minus = array.copy(), array.copy()
            plus[idx] += 1e-3
            minus[idx] -= 1e-3
            grad[idx] = (f(plus) - f(minus)) / 2e-3
        return grad

    dx_num = numeric(x, lambda v: loss(v, w))
    dw_num = numeric(w, lambda v: loss(x, v))
    dx_ref = reference.conv_backward_data(dy, w, x.shape, **geometry)
    dw_ref = reference.conv_backward_filter(x, dy, w.shape, **geometry)
    np.testing.assert_allclose(dx_ref, dx_num, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(dw_ref, dw_num, rtol=1e-7, atol=1e-8)

    nd = len(p["spatial"])
    conv = tridnn.ConvolutionDescriptor(padding=p["pad"], stride=p["stride"], dilation=p["dilation"],
                                        groups=p["groups"], nd=nd,
                                        mode=CONV if mode == "convolution" else XCORR)
    x_desc, w_desc = tridnn.TensorDescriptor(x.shape, "float64"), tridnn.FilterDescriptor(w.shape, "float64")
    dy_desc = tridnn.TensorDescriptor(dy.shape, "float64")
    handle = tridnn.Handle(find_cache=None)
    dx = np.full_like(x, np.nan)
    dw = np.full_like(w, np.nan)
    tridnn.convolution_backward_data(handle, 1.0, w_desc, w, dy_desc, dy, conv, "ALGO_1",
                                     handle.workspace(1 << 20), 0.0, x_desc, dx)
    tridnn.convolution_backward_filter(handle, 1.0, x_desc, x, dy_desc, dy, conv, "ALGO_0",
                                       handle.workspace(1 << 20), 0.0, w_desc, dw)
    np.testing.assert_allclose(dx, dx_num, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(dw, dw_num, rtol=1e-7, atol=1e-8)


# -- transform building blocks --------------------------------------------------------------
@pytest.mark.parametrize("m,r", [(2, 3), (4, 3), (3, 2)])
def test_winograd_matrices_compute_correlation(m, r, rng):
    a_t, g, b_t = winograd_matrices(m, r)
    for _ in range(5):
        f = rng.standard_normal(r)
        d = rng.standard_normal(m + r - 1)
        want = np.array([f @ d[i:i + r] for i in range(m)])
        np.testing.assert_allclose(a_t @ ((g @ f) * (b_t @ d)), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [1, 7, 11, 13, 17, 58, 97, 1000])
def test_fast_size(n):
    size = fast_size(n)
    assert size >= n
    rest = size
    for p in (2, 3, 5, 7):
        while rest % p == 0:
            rest //= p
    assert rest == 1
    assert all(not _smooth(k) for k in range(n, size)), "a smaller fast size exists"


def _smooth(k):
    for p in (2, 3, 5, 7):
        while k % p == 0:
            k //= p
    return k == 1


# -- get / find ---------------------------------------------------------------------------------
@pytest.mark.parametrize("direction", ["bwd_data", "bwd_filter"])
def test_get_and_find(direction, rng, tmp_path):
    conv, (x_desc, x, _), (w_desc, w, _), (dy_desc, dy, _) = descriptors(W3, "float32", "NCHW", rng)
    handle = tridnn.Handle(find_cache=str(tmp_path / "cache.sqlite"), find_time_budget_s=0.2)
    if direction == "bwd_data":
        ranked = tridnn.get_convolution_backward_data_algorithm(handle, w_desc, dy_desc, conv, x_desc)
        found = tridnn.find_convolution_backward_data_algorithm(handle, w_desc, dy_desc, conv, x_desc)
        testing.poison(x)
        found_ex = tridnn.find_convolution_backward_data_algorithm_ex(handle, w_desc, w, dy_desc, dy, conv,
                                                                      x_desc, x, requested=2)
        enum_type, out = tridnn.ConvBwdDataAlgo, x
    else:
        ranked = tridnn.get_convolution_backward_filter_algorithm(handle, x_desc, dy_desc, conv, w_desc)
        found = tridnn.find_convolution_backward_filter_algorithm(handle, x_desc, dy_desc, conv, w_desc)
        testing.poison(w)
        found_ex = tridnn.find_convolution_backward_filter_algorithm_ex(handle, x_desc, x, dy_desc, dy, conv,
                                                                        w_desc, w, requested=2)
        enum_type, out = tridnn.ConvBwdFilterAlgo, w
    for records in (ranked, found):
        assert {r.algo for r in records} == {a.enum for a in registry.algorithms("conv", direction, "numpy")}
        assert all(isinstance(r.algo, enum_type) for r in records)
        ok = [r for r in records if r.status == tridnn.Status.SUCCESS]
        assert len(ok) == len(records), [r.reason for r in records if r.reason]
        assert [r.time_ms for r in ok] == sorted(r.time_ms for r in ok)
    assert all(r.measured for r in found) and not any(r.measured for r in ranked)
    assert len(found_ex) == 2
    testing.assert_all_written(out)  # FindEx overwrote the caller's output
    from tridnn.algorithms import selection
    problem = ConvProblem(direction, x_desc, w_desc, dy_desc, conv)
    assert selection.choose(handle, problem).enum == found_ex[0].algo


def test_get_reports_not_supported_with_reason(rng):
    p = make_conv("s2", 4, 4, (8, 8), 3, 2, 1)
    conv, (x_desc, _, _), (w_desc, _, _), (dy_desc, _, _) = descriptors(p, "float32", "NCHW", rng)
    records = tridnn.get_convolution_backward_data_algorithm(tridnn.Handle(find_cache=None), w_desc, dy_desc,
                                                             conv, x_desc)
    wino = [r for r in records if r.algo == tridnn.ConvBwdDataAlgo.WINOGRAD][0]
    assert wino.status == tridnn.Status.NOT_SUPPORTED and "stride" in wino.reason
    assert records[0].status == tridnn.Status.SUCCESS


# -- errors ----------------------------------------------------------------------------------
def _error_setup(rng):
    conv, (x_desc, x, _), (w_desc, w, _), (dy_desc, dy, _) = descriptors(W3, "float32", "NCHW", rng)
    return tridnn.Handle(find_cache=None), conv, x_desc, x, w_desc, w, dy_desc, dy


def test_mismatched_dx_descriptor(rng):
    handle, conv, x_desc, x, w_desc, w, dy_desc, dy = _error_setup(rng)
    bad_desc = tridnn.TensorDescriptor.packed((2, 5, 10, 11))
    bad = np.full(bad_desc.dims, np.nan, np.float32)
    with pytest.raises(BadParamError, match="do not match"):
        tridnn.convolution_backward_data(handle, 1.0, w_desc, w, dy_desc, dy, conv, "ALGO_0",
                                         handle.workspace(1 << 24), 0.0, bad_desc, bad)
    assert np.isnan(bad).all()
    with pytest.raises(BadParamError, match="does not match its descriptor"):
        testing.poison(x)
        tridnn.convolution_backward_data(handle, 1.0, w_desc, w, dy_desc, dy, conv, "ALGO_0",
                                         handle.workspace(1 << 24), 0.0, x_desc, x[:, :, :-1])
    assert np.isnan(x).all()


def test_mismatched_dw_descriptor(rng):
    handle, conv, x_desc, x, w_desc, w, dy_desc, dy = _error_setup(rng)
    bad_desc = tridnn.FilterDescriptor((6, 5, 5, 5))
    bad = np.full(bad_desc.dims, np.nan, np.float32)
    with pytest.raises(BadParamError):
        tridnn.convolution_backward_filter(handle, 1.0, x_desc, x, dy_desc, dy, conv, "ALGO_0",
                                           handle.workspace(1 << 24), 0.0, bad_desc, bad)
    assert np.isnan(bad).all()
    half = np.full(w.shape, np.nan, np.float16)
    with pytest.raises(BadParamError, match="dtype"):
        tridnn.convolution_backward_filter(handle, 1.0, x_desc, x, dy_desc, dy, conv, "ALGO_0",
                                           handle.workspace(1 << 24), 0.0, w_desc, half)


def test_output_overlapping_input(rng):
    handle, conv, x_desc, x, w_desc, w, dy_desc, dy = _error_setup(rng)
    same_desc = tridnn.TensorDescriptor.packed((2, 6, 9, 11))  # dy dims; dx = dy buffer is nonsense
    with pytest.raises(BadParamError):
        tridnn.convolution_backward_data(handle, 1.0, w_desc, w, dy_desc, dy, conv, "ALGO_0", None, 0.0,
                                         same_desc, dy)


@pytest.mark.parametrize("direction", ["bwd_data", "bwd_filter"])
def test_too_small_workspace(direction, rng):
    handle, conv, x_desc, x, w_desc, w, dy_desc, dy = _error_setup(rng)
    testing.poison(x)
    testing.poison(w)
    if direction == "bwd_data":
        need = tridnn.get_convolution_backward_data_workspace_size(handle, w_desc, dy_desc, conv, x_desc, "FFT")
        with pytest.raises(BadParamError, match=f"smaller than the {need} bytes"):
            tridnn.convolution_backward_data(handle, 1.0, w_desc, np.ones_like(w), dy_desc, dy, conv, "FFT",
                                             np.empty(need - 1, np.uint8), 0.0, x_desc, x)
        assert np.isnan(x).all()
    else:
        need = tridnn.get_convolution_backward_filter_workspace_size(handle, x_desc, dy_desc, conv, w_desc,
                                                                     "ALGO_0")
        with pytest.raises(BadParamError, match=f"smaller than the {need} bytes"):
            tridnn.convolution_backward_filter(handle, 1.0, x_desc, np.ones_like(x), dy_desc, dy, conv,
                                               "ALGO_0", np.empty(need - 1, np.uint8), 0.0, w_desc, w)
        assert np.isnan(w).all()


def test_unknown_algorithm(rng):
    handle, conv, x_desc, x, w_desc, w, dy_desc, dy = _error_setup(rng)
    with pytest.raises(BadParamError, match="unknown bwd_data convolution algorithm 'GEMM'"):
        tridnn.convolution_backward_data(handle, 1.0, w_desc, w, dy_desc, dy, conv, "GEMM", None, 0.0,
                                         x_desc, x)
    with pytest.raises(BadParamError, match="unknown bwd_filter"):
        tridnn.get_convolution_backward_filter_workspace_size(handle, x_desc, dy_desc, conv, w_desc, 99)


def test_winograd_backward_filter_is_not_supported(rng):
    """cuDNN lists WINOGRAD for backward filter but never implements it; neither does tridnn."""
    handle, conv, x_desc, x, w_desc, w, dy_desc, dy = _error_setup(rng)
    testing.poison(w)
    with pytest.raises(NotSupportedError, match="WINOGRAD"):
        tridnn.convolution_backward_filter(handle, 1.0, x_desc, x, dy_desc, dy, conv, "WINOGRAD", None, 0.0,
                                           w_desc, w)
    assert np.isnan(w).all()
    with pytest.raises(NotImplementedError):
        tridnn.get_convolution_backward_filter_workspace_size(handle, x_desc, dy_desc, conv, w_desc,
                                                              tridnn.ConvBwdFilterAlgo.WINOGRAD)


def test_not_applicable_algorithm_raises(rng):
    p = make_conv("s2", 4, 4, (8, 8), 3, 2, 1)
    conv, (x_desc, x, _), (w_desc, w, _), (dy_desc, dy, _) = descriptors(p, "float32", "NCHW", rng)
    with pytest.raises(NotSupportedError, match="stride"):
        tridnn.convolution_backward_data(tridnn.Handle(find_cache=None), 1.0, w_desc, w, dy_desc, dy, conv,
                                         "WINOGRAD_NONFUSED", None, 0.0, x_desc, x)


# -- backward bias ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", testing.LAYOUTS)
@pytest.mark.parametrize("spatial", [(7,), (5, 6), (3, 4, 2)], ids=["1d", "2d", "3d"])
def test_backward_bias(dtype, layout, spatial, rng):
    dims = (3, 5, *spatial)
    dy_vals = testing.fill(dims, dtype, rng)
    dy_desc, dy = testing.make_tensor(dims, dtype, layout, rng, dy_vals)
    db_desc = tridnn.TensorDescriptor.packed((1, 5) + (1,) * len(spatial), dtype)
    handle = tridnn.Handle(find_cache=None)
    for alpha, beta in [(1.0, 0.0), (0.5, 2.0)]:
        db = np.full(db_desc.dims, np.nan, testing.DataType.of(dtype).numpy) if beta == 0 else \
            testing.fill(db_desc.dims, dtype, rng)
        prior = None if beta == 0 else db.copy()
        tridnn.convolution_backward_bias(handle, alpha, dy_desc, dy, beta, db_desc, db)
        ref = reference.conv_backward_bias(dy_vals).reshape(db.shape)
        testing.check_result(db, ref, dtype, True, alpha, beta, prior, name="db")


def test_backward_bias_errors(rng):
    handle = tridnn.Handle(find_cache=None)
    dy_desc = tridnn.TensorDescriptor.packed((2, 4, 3, 3))
    dy = np.ones(dy_desc.dims, np.float32)
    bad = tridnn.TensorDescriptor.packed((1, 3, 1, 1))
    db = np.full((1, 3, 1, 1), np.nan, np.float32)
    with pytest.raises(BadParamError, match=r"valid: \(1, 4, 1, 1\)"):
        tridnn.convolution_backward_bias(handle, 1.0, dy_desc, dy, 0.0, bad, db)
    assert np.isnan(db).all()
    with pytest.raises(BadParamError, match="dtype"):
        tridnn.convolution_backward_bias(handle, 1.0, dy_desc, dy, 0.0,
                                         tridnn.TensorDescriptor.packed((1, 4, 1, 1), "float64"),
                                         np.zeros((1, 4, 1, 1)))
    with pytest.raises(BadParamError, match="alpha"):
        tridnn.convolution_backward_bias(handle, float("nan"), dy_desc, dy, 0.0,
                                         tridnn.TensorDescriptor.packed((1, 4, 1, 1)), np.zeros((1, 4, 1, 1), np.float32))
    empty_desc = tridnn.TensorDescriptor.packed((0, 4, 3, 3))
    db = np.full((1, 4, 1, 1), np.nan, np.float32)
    tridnn.convolution_backward_bias(handle, 1.0, empty_desc, np.ones(empty_desc.dims, np.float32), 0.0,
                                     tridnn.TensorDescriptor.packed((1, 4, 1, 1)), db)
    assert not db.any()


# -- depthwise: conv_depthwise's plans behind ALGO_1 (data) and ALGO_3 (filter) -------------
DEPTHWISE_CASES = [
    make_conv("dw_s1", 12, 12, (23, 20), 3, 1, 1, groups=12),
    make_conv("dw_s2", 12, 12, (23, 20), 3, 2, 1, groups=12),
    make_conv("dw_s3_k5", 8, 8, (25, 19), 5, 3, 2, groups=8),
    make_conv("dw_s2_d2", 8, 8, (21, 22), 3, 2, 2, 2, groups=8),
    make_conv("dw_s1_d2", 8, 8, (17, 16), 3, 1, 2, 2, groups=8),
    make_conv("dw_s2_d3_k5", 8, 8, (26, 23), 5, 2, 5, 3, groups=8),
    make_conv("dw_s2_k1", 8, 8, (15, 14), 1, 2, 0, groups=8),   # odd dx positions get no tap
    make_conv("dw_pad_beyond", 8, 8, (9, 10), 3, 1, 4, groups=8),
    make_conv("dw_1d_s2", 8, 8, (37,), 5, 2, 2, groups=8),
    make_conv("dw_3d_s2", 4, 4, (7, 9, 8), 3, 2, 1, groups=4),
]


def _depthwise_algos():
    return [a for a in BWD if (a.direction, a.enum) in (("bwd_data", tridnn.ConvBwdDataAlgo.ALGO_1),
                                                        ("bwd_filter", tridnn.ConvBwdFilterAlgo.ALGO_3))]


@pytest.mark.parametrize("algo", _depthwise_algos(), ids=_algo_id)
@pytest.mark.parametrize("p", DEPTHWISE_CASES, ids=_ids)
@pytest.mark.parametrize("planar", [True, False], ids=["planar", "channels-last"])
def test_depthwise_plans_every_orientation(algo, p, planar, rng, monkeypatch):
    """Both orientations forced, blocks small enough to split rows, channels and images,
    both layouts, CONVOLUTION mode and alpha/beta."""
    from tridnn.cpu import conv_depthwise
    monkeypatch.setattr(conv_depthwise, "BLOCK_ELEMENTS", 400)
    monkeypatch.setattr(conv_depthwise, "THREADS", 2)  # blocks taken by two threads
    monkeypatch.setattr(conv_depthwise, "FILTER_BLOCK_ELEMENTS", 400)
    monkeypatch.setattr(conv_depthwise.DepthwisePlan, "prefers_planar", staticmethod(lambda *args: planar))
    monkeypatch.setattr(conv_depthwise, "channels_last", lambda desc: not planar)  # the filter's rule
    conv, (x_desc, _, _), (w_desc, _, _), (dy_desc, _, _) = descriptors(p, "float32", "NCHW", rng)
    problem = ConvProblem(algo.direction, x_desc, w_desc, dy_desc, conv)
    plan = algo.depthwise_plan(problem)
    if algo.direction == "bwd_filter" and set(p["stride"]) == {1}:
        assert plan is None  # NCHW (x_desc) at stride 1: ALGO_3's own shifted-window path
    else:
        plans = [plan] if algo.direction == "bwd_filter" else [part for _, part, _ in plan.parts if part is not None]
        assert plans and all(part.planar == planar for part in plans)
    for layout in ("NCHW", "NHWC"):
        skip_unless_applies(run_case(algo, p, "float32", layout, rng, n=3))
        skip_unless_applies(run_case(algo, p, "float64", layout, rng, n=2, alpha=-1.5, beta=0.5, mode=CONV))
        skip_unless_applies(run_case(algo, p, "bfloat16", layout, rng, n=2, alpha=2.0, beta=1.0))


def test_transposed_taps_split_dx_by_stride_phase():
    """Stride 2, 3 taps, pad 1 (forward reads x[2o + r - 1]): even dx positions 2m get tap 1
    from dy[m]; odd ones 2m + 1 get taps 2 and 0 from dy[m] and dy[m + 1]; with a single
    tap (pad 1) no tap reaches the even positions."""
    from tridnn.cpu.conv_depthwise import transposed_taps
    assert transposed_taps(9, 3, 2, 1, 1, 0) == (5, [1], 0, 1)
    assert transposed_taps(9, 3, 2, 1, 1, 1) == (4, [2, 0], 0, 1)
    assert transposed_taps(9, 1, 2, 1, 1, 0) is None
