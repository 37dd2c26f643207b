"""Property-based convolution tests: random valid problems against the float64 reference.

Hypothesis draws 1D/2D/3D problems with groups (depthwise included), dilation, stride,
per-dim and asymmetric padding, both modes, every math type, every dtype, NCHW/NHWC/strided views (and
the raw-buffer form of packed arrays), alpha/beta (beta == 0 over NaN-filled outputs),
and runs every registered NumPy algorithm of the direction that applies. Exact
methods (``algo.exact``) must equal the reference rounded once; the others meet
tridnn.testing's tolerances. Each run also checks that the inputs are untouched, that
nothing outside the output view is written, and that ``get`` offers exactly the
applicable algorithms. Directions whose API is not there yet are skipped.

Integer fills (tridnn.testing.fill) keep every partial sum exact, and "nice" alpha/beta
values (powers of two and small integers) keep the blend exact; arbitrary alpha/beta
are drawn too and then every algorithm is held to the tolerance instead.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tridnn
from tridnn import reference, testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem
from tridnn.errors import Status

from fuzz_support import Stats, WriteGuard, fuzz_settings

DTYPES = ("float32", "float64", "float16", "bfloat16")
NICE_SCALARS = (1.0, 2.0, 0.5, -1.0, 0.25, -1.5, 3.0)
MAX_SPATIAL = {1: 12, 2: 7, 3: 4}
MAX_KERNEL = {1: 5, 2: 4, 3: 3}

stats = Stats(__name__)


@pytest.fixture(scope="module", autouse=True)
def _dump_stats():
    yield
    stats.dump()


@st.composite
def conv_cases(draw):
    """One random valid convolution problem with its layouts, dtype and scalars."""
    # a quarter of the problems are the common 2D 3x3 stride-1 layer (Winograd's domain);
    # the rest range over every geometry
    classic = draw(st.integers(0, 3)) == 0
    nd = 2 if classic else draw(st.sampled_from((1, 2, 2, 3)))
    groups = draw(st.integers(1, 4))
    if draw(st.integers(0, 3)) == 0:  # depthwise: one input channel per group
        cg, kg = 1, draw(st.integers(1, 2))
    else:
        cg, kg = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    n = draw(st.sampled_from((0, 1, 1, 2, 2, 3)))
    kernel, stride, dilation, pre, post, spatial = [], [], [], [], [], []
    asymmetric = draw(st.booleans())
    for _ in range(nd):
        k = 3 if classic else draw(st.integers(1, MAX_KERNEL[nd]))
        d = 1 if classic or k == 1 else draw(st.integers(1, 3))
        p0 = draw(st.integers(0, 3))
        p1 = draw(st.integers(0, 3)) if asymmetric else p0
        need = max(1, d * (k - 1) + 1 - p0 - p1)  # smallest input with a non-empty output
        kernel.append(k)
        dilation.append(d)
        stride.append(1 if classic else draw(st.integers(1, 3)))
        pre.append(p0)
        post.append(p1)
        spatial.append(draw(st.integers(need, need + MAX_SPATIAL[nd])))
    exact_scalars = draw(st.booleans())
    scalar = st.sampled_from(NICE_SCALARS) if exact_scalars else \
        st.floats(-3, 3, allow_nan=False, allow_infinity=False).filter(lambda v: abs(v) > 1e-3)
    alpha = draw(scalar)
    beta = 0.0 if draw(st.booleans()) else draw(scalar)
    return dict(
        nd=nd, n=n, c=groups * cg, k=groups * kg, groups=groups, kernel=tuple(kernel),
        stride=tuple(stride), dilation=tuple(dilation), pad_pre=tuple(pre), pad_post=tuple(post),
        spatial=tuple(spatial),
        mode=draw(st.sampled_from((tridnn.ConvMode.CROSS_CORRELATION, tridnn.ConvMode.CONVOLUTION))),
        dtype=draw(st.sampled_from(DTYPES)),
        math_type=draw(st.sampled_from(list(tridnn.MathType))),
        x_layout=draw(st.sampled_from(testing.LAYOUTS)),
        y_layout=draw(st.sampled_from(testing.LAYOUTS)),
        w_layout=draw(st.sampled_from(("NCHW", "NHWC"))),
        raw_inputs=draw(st.booleans()),
        ws_offset=draw(st.sampled_from((0, 0, 1, 13))),
        alpha=alpha, beta=beta, exact_scalars=exact_scalars,
        seed=draw(st.integers(0, 2**32 - 1)))


def _mode_name(mode) -> str:
    return "convolution" if mode == tridnn.ConvMode.CONVOLUTION else "cross_correlation"


def _as_passed(view: np.ndarray, desc, raw: bool):
    """The array the caller passes: the logical view, or (for packed layouts, when
    ``raw``) the C-contiguous buffer in memory order, as a pointer is in cuDNN's C API."""
    if raw and desc.format != "strided":
        physical = view.transpose(desc.memory_order)
        if physical.flags.c_contiguous:
            return physical
    return view


# -- the three directions: which operand is the output, the API call, the reference ----
def _api(direction):
    """The public entry point of a direction, or None when it is not there yet."""
    name = {"fwd": "convolution_forward", "bwd_data": "convolution_backward_data",
            "bwd_filter": "convolution_backward_filter"}[direction]
    return getattr(tridnn, name, None)


def _call(direction, handle, case, descs, passed, algo, workspace):
    x_d, w_d, y_d = descs
    x, w, y = passed
    conv = descs.conv
    a, b = case["alpha"], case["beta"]
    fn = _api(direction)
    if direction == "fwd":
        return fn(handle, a, x_d, x, w_d, w, conv, algo.enum, workspace, b, y_d, y)
    if direction == "bwd_data":  # cuDNN order: w, dy in; dx out
        return fn(handle, a, w_d, w, y_d, y, conv, algo.enum, workspace, b, x_d, x)
    return fn(handle, a, x_d, x, y_d, y, conv, algo.enum, workspace, b, w_d, w)  # dw out


def _reference(direction, case, vals):
    geometry = dict(stride=case["stride"], pad_pre=case["pad_pre"], pad_post=case["pad_post"],
                    dilation=case["dilation"], groups=case["groups"], mode=_mode_name(case["mode"]))
    if direction == "fwd":
        return reference.conv_forward(vals["x"], vals["w"], **geometry)
    if direction == "bwd_data":
        return reference.conv_backward_data(vals["y"], vals["w"], vals["x"].shape, **geometry)
    return reference.conv_backward_filter(vals["x"], vals["y"], vals["w"].shape, **geometry)


class _Descs(tuple):
    conv = None


def check_case(direction: str, case: dict) -> None:
    """Run every applicable algorithm of ``direction`` on ``case`` and check each result."""
    if _api(direction) is None:
        pytest.skip(f"the {direction} convolution API is not implemented yet")
    algos = registry.algorithms("conv", direction, "numpy")
    if not algos:
        pytest.skip(f"no NumPy {direction} algorithm is registered yet")
    rng = np.random.default_rng(case["seed"])
    dtype = case["dtype"]
    conv = tridnn.ConvolutionDescriptor(padding=case["pad_pre"], pad_post=case["pad_post"],
                                        stride=case["stride"], dilation=case["dilation"],
                                        groups=case["groups"], mode=case["mode"], nd=case["nd"],
                                        math_type=case["math_type"])
    x_dims = (case["n"], case["c"], *case["spatial"])
    w_dims = (case["k"], case["c"] // case["groups"], *case["kernel"])
    w_desc0 = tridnn.FilterDescriptor(w_dims, dtype)
    y_dims = conv.output_dims(tridnn.TensorDescriptor(x_dims, dtype), w_desc0)
    out_name = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[direction]
    dims = {"x": x_dims, "w": w_dims, "y": y_dims}
    vals = {name: testing.fill(dims[name], dtype, rng) for name in ("x", "w", "y") if name != out_name}
    prior = testing.fill(dims[out_name], dtype, rng) if case["beta"] != 0 else None
    vals[out_name] = np.zeros(dims[out_name])  # shape only, for the reference
    ref = _reference(direction, case, vals)
    stats.problem(direction)

    handle = tridnn.Handle(find_cache=None)
    applicable = set()
    for algo in algos:
        x_desc, x = testing.make_tensor(x_dims, dtype, case["x_layout"], rng)
        w_desc, w = testing.make_filter(w_dims, dtype, case["w_layout"])
        y_desc, y = testing.make_tensor(y_dims, dtype, case["y_layout"], rng)
        views = {"x": x, "w": w, "y": y}
        problem = ConvProblem(direction, x_desc, w_desc, y_desc, conv)
        reason = algo.not_applicable(problem)
        if reason is not None:
            stats.not_applicable(direction, algo.name)
            continue
        applicable.add(algo.enum)
        guard = WriteGuard(views[out_name])
        for name, arr in views.items():
            if name != out_name:
                arr[...] = vals[name]
        out = views[out_name]
        if prior is None:
            testing.poison(out)
        else:
            out[...] = prior
        inputs_before = {name: views[name].copy() for name in views if name != out_name}
        need = algo.workspace_size(problem)
        workspace = np.empty(need + case["ws_offset"], np.uint8)[case["ws_offset"]:]
        descs = _Descs((x_desc, w_desc, y_desc))
        descs.conv = conv
        passed = tuple(_as_passed(views[name], desc, case["raw_inputs"] and name != out_name)
                       for name, desc in (("x", x_desc), ("w", w_desc.as_tensor()), ("y", y_desc)))
        _call(direction, handle, case, descs, passed, algo, workspace)
        label = f"{direction} {algo.name} on {problem.describe()}"
        exact = getattr(algo, "exact", False) and case["exact_scalars"]
        testing.check_result(out, ref, dtype, exact, case["alpha"], case["beta"], prior, name=label)
        guard.check(label)
        for name, before in inputs_before.items():
            assert np.array_equal(views[name], before, equal_nan=True), f"{label}: input {name} was modified"
        stats.ran(direction, algo.name)

    # `get` offers exactly the algorithms that apply (the tiny problems never reach the
    # workspace limit), each with the workspace size the algorithm declares.
    records = {r.algo: r for r in _get(direction, handle, descs)}
    offered = {a for a, r in records.items() if r.status == Status.SUCCESS}
    assert offered == applicable, f"get offers {offered}, applicable: {applicable}"


def _get(direction, handle, descs):
    from tridnn.api import convolution as api
    problem = api._problem(handle, direction, descs[0], descs[1], descs.conv, descs[2])
    from tridnn.algorithms import selection
    return selection.get(handle, problem)


@fuzz_settings(ci_examples=60)
@given(case=conv_cases())
def test_forward_matches_reference(case):
    check_case("fwd", case)


@fuzz_settings(ci_examples=30)
@given(case=conv_cases())
def test_backward_data_matches_reference(case):
    check_case("bwd_data", case)


@fuzz_settings(ci_examples=30)
@given(case=conv_cases())
def test_backward_filter_matches_reference(case):
    check_case("bwd_filter", case)


def test_case_strategy_covers_the_space():
    """The strategy reaches every feature the fuzz claims to cover (guards against a
    strategy that silently stopped drawing e.g. 3D or depthwise problems)."""
    from hypothesis import find
    for wanted in (lambda c: c["nd"] == 3 and c["groups"] > 1,
                   lambda c: c["c"] == c["groups"] > 1,
                   lambda c: c["pad_pre"] != c["pad_post"],
                   lambda c: max(c["dilation"]) > 1 and max(c["stride"]) > 1,
                   lambda c: c["n"] == 0,
                   lambda c: c["dtype"] == "bfloat16" and c["x_layout"] == "strided",
                   lambda c: c["beta"] == 0 and not c["exact_scalars"],
                   lambda c: c["mode"] == tridnn.ConvMode.CONVOLUTION and c["nd"] == 1,
                   lambda c: c["kernel"] == (3, 3) and c["stride"] == (1, 1) and c["dilation"] == (1, 1)):
        assert find(conv_cases(), wanted) is not None
    assert math.isfinite(find(conv_cases(), lambda c: c["alpha"] < 0)["alpha"])


# -- NaN and inf: IEEE through every algorithm ---------------------------------------------
def _nonfinite_case(direction, case, poison_operand, value):
    """(reference, {algo name: result}) with one element of ``poison_operand`` set to
    ``value`` (NaN or inf); integer fills elsewhere, alpha 1, beta 0."""
    rng = np.random.default_rng(case["seed"])
    dtype = case["dtype"]
    conv = tridnn.ConvolutionDescriptor(padding=case["pad_pre"], pad_post=case["pad_post"],
                                        stride=case["stride"], dilation=case["dilation"],
                                        groups=case["groups"], mode=case["mode"], nd=case["nd"])
    x_dims = (max(case["n"], 1), case["c"], *case["spatial"])
    w_dims = (case["k"], case["c"] // case["groups"], *case["kernel"])
    y_dims = conv.output_dims(tridnn.TensorDescriptor(x_dims, dtype), tridnn.FilterDescriptor(w_dims, dtype))
    dims = {"x": x_dims, "w": w_dims, "y": y_dims}
    out_name = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[direction]
    vals = {name: testing.fill(dims[name], dtype, rng) for name in dims if name != out_name}
    where = tuple(int(rng.integers(0, d)) for d in dims[poison_operand])
    vals[poison_operand][where] = value
    vals[out_name] = np.zeros(dims[out_name])
    ref = _reference(direction, case, vals)
    results = {}
    handle = tridnn.Handle(find_cache=None)
    for algo in registry.algorithms("conv", direction, "numpy"):
        views = {}
        x_desc, views["x"] = testing.make_tensor(x_dims, dtype, "NCHW", rng)
        w_desc, views["w"] = testing.make_filter(w_dims, dtype, "NCHW")
        y_desc, views["y"] = testing.make_tensor(y_dims, dtype, "NCHW", rng)
        problem = ConvProblem(direction, x_desc, w_desc, y_desc, conv)
        if algo.not_applicable(problem) is not None:
            continue
        for name in dims:
            if name != out_name:
                views[name][...] = vals[name]
        testing.poison(views[out_name])
        descs = _Descs((x_desc, w_desc, y_desc))
        descs.conv = conv
        ws = np.empty(algo.workspace_size(problem), np.uint8)
        _call(direction, handle, dict(case, alpha=1.0, beta=0.0), descs,
              (views["x"], views["w"], views["y"]), algo, ws)
        results[algo] = np.asarray(views[out_name], np.float64)
    return ref, results, where


# Exact methods that still spread a NaN/inf beyond its receptive field, and why
# (documented in docs/reliability.md); for them, only "never lost, finite values exact".
NAN_SPREADS = {
    ("bwd_filter", "ALGO_3"): "its stride-1 path multiplies flat shifted windows of x by dy rows "
                              "zero-padded to x's row length, so 0 * NaN reaches taps that never "
                              "read the element",
}


def _assert_ieee(label, direction, algo, got, ref):
    """Exact methods: the same NaN/inf pattern as the reference and the same finite values.
    Transform methods: every non-finite reference output is non-finite (NaN may spread)."""
    ref_bad = ~np.isfinite(ref)
    got_bad = ~np.isfinite(got)
    assert not (ref_bad & ~got_bad).any(), f"{label}: a NaN/inf of the reference was lost"
    if not getattr(algo, "exact", False):
        return
    both = ~ref_bad & ~got_bad
    assert np.array_equal(got[both], ref[both]), f"{label}: finite outputs differ"
    if (direction, algo.name) in NAN_SPREADS:
        return
    assert np.array_equal(got_bad, ref_bad), (
        f"{label}: {int((got_bad & ~ref_bad).sum())} outputs are NaN/inf outside the receptive field")
    assert np.array_equal(np.isnan(got), np.isnan(ref)), f"{label}: NaN where the reference has inf"
    assert np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)]), f"{label}: wrong inf sign"


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("direction", ("fwd", "bwd_data", "bwd_filter"))
@fuzz_settings(ci_examples=15)
@given(case=conv_cases(), value=st.sampled_from((math.nan, math.inf, -math.inf)))
def test_nan_and_inf_inputs_follow_ieee(direction, case, value):
    """One NaN/inf in the data input: exact methods poison exactly the outputs whose
    receptive field holds it (inf * 0 = NaN included); no method loses it."""
    if _api(direction) is None:
        pytest.skip(f"the {direction} convolution API is not implemented yet")
    case = dict(case, dtype="float32" if case["dtype"] in ("float16", "bfloat16") else case["dtype"])
    data_input = {"fwd": "x", "bwd_data": "y", "bwd_filter": "x"}[direction]
    stats.problem(f"{direction}-nonfinite")
    ref, results, _ = _nonfinite_case(direction, case, data_input, value)
    for algo, got in results.items():
        _assert_ieee(f"{direction} {algo.name} {value} in {data_input}", direction, algo, got, ref)
        stats.ran(f"{direction}-nonfinite", algo.name)
        # how far each method spreads it, for docs/reliability.md
        stats.add(f"nonfinite_outputs/reference/{direction}/{algo.name}", (~np.isfinite(ref)).sum())
        stats.add(f"nonfinite_outputs/got/{direction}/{algo.name}", (~np.isfinite(got)).sum())
        stats.add(f"outputs/{direction}/{algo.name}", got.size)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@fuzz_settings(ci_examples=15)
@given(case=conv_cases())
def test_nan_weight_poisons_its_output_channel(case):
    """A NaN weight tap: every output of its channel where the tap reads real input is
    NaN; outputs where it reads only zero padding may be NaN (0 * NaN, as the padded
    reference computes) or not (methods that skip padding); other channels stay finite."""
    case = dict(case, dtype="float64")
    stats.problem("fwd-nan-weight")
    ref, results, (k, c, *tap) = _nonfinite_case("fwd", case, "w", math.nan)
    # where the tap hits real input: a forward convolution of ones with an indicator filter
    x_ones = np.ones((max(case["n"], 1), case["c"], *case["spatial"]))
    indicator = np.zeros((case["k"], case["c"] // case["groups"], *case["kernel"]))
    indicator[(k, c, *tap)] = 1.0
    hits = reference.conv_forward(x_ones, indicator, case["stride"], case["pad_pre"], case["pad_post"],
                                  case["dilation"], case["groups"], _mode_name(case["mode"])) > 0
    for algo, got in results.items():
        label = f"fwd {algo.name} NaN weight {(k, c, *tap)}"
        nan = np.isnan(got)
        assert nan[hits].all(), f"{label}: an output reading the NaN weight is not NaN"
        if getattr(algo, "exact", False):
            assert not (nan & ~np.isnan(ref)).any(), f"{label}: NaN outside the weight's output channel"
            others = np.ones(got.shape[1], bool)
            others[k] = False
            assert np.isfinite(got[:, others]).all(), f"{label}: NaN leaked into other channels"
        stats.ran("fwd-nan-weight", algo.name)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("direction", ("fwd", "bwd_data", "bwd_filter"))
def test_nan_in_output_propagates_only_with_beta(direction, rng):
    """y = alpha * conv + beta * y: a NaN in y stays where it is when beta != 0 (IEEE)
    and vanishes when beta == 0 (y is not read)."""
    if _api(direction) is None:
        pytest.skip(f"the {direction} convolution API is not implemented yet")
    case = dict(nd=2, n=2, c=3, k=4, groups=1, kernel=(3, 3), stride=(1, 1), dilation=(1, 1),
                pad_pre=(1, 1), pad_post=(1, 1), spatial=(6, 5), mode=tridnn.ConvMode.CROSS_CORRELATION,
                dtype="float32", seed=5)
    out_name = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[direction]
    handle = tridnn.Handle(find_cache=None)
    conv = tridnn.ConvolutionDescriptor(padding=1, nd=2)
    for algo in registry.algorithms("conv", direction, "numpy"):
        for beta in (0.0, 1.0):
            x_desc, x = testing.make_tensor((2, 3, 6, 5), "float32", "NCHW", rng, testing.fill((2, 3, 6, 5), "float32", rng))
            w_desc, w = testing.make_filter((4, 3, 3, 3), "float32", "NCHW", testing.fill((4, 3, 3, 3), "float32", rng))
            y_desc, y = testing.make_tensor((2, 4, 6, 5), "float32", "NCHW", rng, testing.fill((2, 4, 6, 5), "float32", rng))
            problem = ConvProblem(direction, x_desc, w_desc, y_desc, conv)
            if algo.not_applicable(problem) is not None:
                continue
            out = {"x": x, "w": w, "y": y}[out_name]
            out[(0, 1, 1, 1)] = np.nan
            descs = _Descs((x_desc, w_desc, y_desc))
            descs.conv = conv
            _call(direction, handle, dict(case, alpha=1.0, beta=beta), descs, (x, w, y), algo,
                  np.empty(algo.workspace_size(problem), np.uint8))
            nan = np.isnan(out)
            if beta == 0:
                assert not nan.any(), f"{direction} {algo.name}: NaN in the output leaked with beta 0"
            else:
                assert nan[0, 1, 1, 1] and nan.sum() == 1, f"{direction} {algo.name}: beta*NaN not local"


# -- the fused forward: act(alpha1 * conv(x, w) + alpha2 * z + bias) through every algorithm ----
@fuzz_settings(ci_examples=30)
@given(case=conv_cases(), alpha2=st.sampled_from((0.0, 1.0, 0.5, -1.0)), z_is_y=st.booleans(),
       mode_index=st.integers(0, 100), coef=st.sampled_from((0.5, 3.0)))
def test_fused_bias_activation_matches_reference(case, alpha2, z_is_y, mode_index, coef):
    """Every forward algorithm runs the fused epilogue (bias, residual z, activation)
    before its one rounding; z may be y itself (in-place residual)."""
    from tridnn.cpu.epilogue import FUSED_MODES
    from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode
    from tridnn.reference.fused import conv_bias_activation_forward as fused_ref
    mode = FUSED_MODES[mode_index % len(FUSED_MODES)]
    act = ActivationDescriptor(mode, coef=coef, swish_beta=1.5)
    stats.problem("fwd-fused")
    rng = np.random.default_rng(case["seed"])
    dtype, nd = case["dtype"], case["nd"]
    conv = tridnn.ConvolutionDescriptor(padding=case["pad_pre"], pad_post=case["pad_post"], stride=case["stride"],
                                        dilation=case["dilation"], groups=case["groups"], mode=case["mode"], nd=nd,
                                        math_type=case["math_type"])
    x_dims = (case["n"], case["c"], *case["spatial"])
    w_dims = (case["k"], case["c"] // case["groups"], *case["kernel"])
    x_vals, w_vals = testing.fill(x_dims, dtype, rng), testing.fill(w_dims, dtype, rng)
    y_dims = conv.output_dims(tridnn.TensorDescriptor(x_dims, dtype), tridnn.FilterDescriptor(w_dims, dtype))
    z_vals = testing.fill(y_dims, dtype, rng)
    bias_vals = testing.fill((1, case["k"]) + (1,) * nd, dtype, rng, density=1.0)
    alpha1 = case["alpha"]
    ref = fused_ref(x_vals, w_vals, z_vals, bias_vals, int(mode), coef, 1.5, alpha1, alpha2, case["stride"],
                    case["pad_pre"], case["pad_post"], case["dilation"], case["groups"], _mode_name(case["mode"]))
    handle = tridnn.Handle(find_cache=None)
    for algo in registry.algorithms("conv", "fwd", "numpy"):
        x_desc, x = testing.make_tensor(x_dims, dtype, case["x_layout"], rng, x_vals)
        w_desc, w = testing.make_filter(w_dims, dtype, case["w_layout"], w_vals)
        y_desc, y = testing.make_tensor(y_dims, dtype, case["y_layout"], rng)
        problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
        if algo.not_applicable(problem) is not None:
            continue
        if z_is_y:
            z_desc, z = y_desc, y
            y[...] = z_vals
        else:
            z_desc, z = testing.make_tensor(y_dims, dtype, case["x_layout"], rng, z_vals)
            testing.poison(y)
        bias_desc = tridnn.TensorDescriptor.packed(bias_vals.shape, dtype)
        ws = np.empty(algo.workspace_size(problem), np.uint8)
        tridnn.convolution_bias_activation_forward(handle, alpha1, x_desc, x, w_desc, w, conv, algo.enum, ws,
                                                   alpha2, z_desc, z, bias_desc, bias_vals.copy(), act, y_desc, y)
        exact = (getattr(algo, "exact", False) and case["exact_scalars"]
                 and mode in (ActivationMode.IDENTITY, ActivationMode.RELU, ActivationMode.CLIPPED_RELU))
        testing.check_result(y, ref, dtype, exact, name=f"fused {algo.name} {mode.name} on {problem.describe()}")
        stats.ran("fwd-fused", algo.name)


# -- the functional API: plan caching must never mix up two problems ---------------------------
@fuzz_settings(ci_examples=40)
@given(case=conv_cases(), algo=st.sampled_from(("auto", "heuristic")), nhwc=st.booleans())
def test_functional_api_matches_reference(case, algo, nhwc):
    """tridnn.conv / conv_backward_data / conv_backward_filter on the thread's default
    handle, whose plan cache persists across examples: a plan reused for the wrong
    problem would show up as a wrong result."""
    stats.problem("functional")
    rng = np.random.default_rng(case["seed"])
    dtype = case["dtype"]
    x_dims = (case["n"], case["c"], *case["spatial"])
    w_dims = (case["k"], case["c"] // case["groups"], *case["kernel"])
    x, w = testing.fill(x_dims, dtype, rng), testing.fill(w_dims, dtype, rng)
    if nhwc and case["nd"] >= 1:
        x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)  # channels-last view
    padding = tuple(zip(case["pad_pre"], case["pad_post"]))
    geometry = dict(stride=case["stride"], padding=padding, dilation=case["dilation"], groups=case["groups"],
                    mode=_mode_name(case["mode"]))
    ref_geometry = dict(stride=case["stride"], pad_pre=case["pad_pre"], pad_post=case["pad_post"],
                        dilation=case["dilation"], groups=case["groups"], mode=_mode_name(case["mode"]))
    y = tridnn.conv(x, w, algo=algo, **geometry)
    y_ref = reference.conv_forward(x, w, **ref_geometry)
    testing.assert_close(y, y_ref, dtype, name=f"conv {case}")
    stats.ran("functional", "conv")
    dy = testing.fill(y_ref.shape, dtype, rng)
    dx = tridnn.conv_backward_data(dy, w, x_dims, algo=algo, **geometry)
    testing.assert_close(dx, reference.conv_backward_data(dy, w, x_dims, **ref_geometry), dtype,
                         name=f"conv_backward_data {case}")
    stats.ran("functional", "conv_backward_data")
    dw = tridnn.conv_backward_filter(x, dy, w_dims, algo=algo, **geometry)
    testing.assert_close(dw, reference.conv_backward_filter(x, dy, w_dims, **ref_geometry), dtype,
                         name=f"conv_backward_filter {case}")
    stats.ran("functional", "conv_backward_filter")
