"""Hostile inputs: invalid descriptors and calls raise the documented exception, with a
message naming the bad value, before the caller's output is touched.

Each case starts from one valid forward convolution and breaks one thing. The output
is filled with a random pattern first and compared bit for bit after the error.
Hypothesis then throws random bad values (negative, zero, huge, non-integer, NaN,
wrong types) at every parameter. Any exception that is not a tridnn error counts as
a crash.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import tridnn
from tridnn import testing
from tridnn.errors import (AllocFailedError, BadParamError, NotInitializedError, NotSupportedError,
                           TridnnError)

from fuzz_support import Stats, fuzz_settings

FWD = tridnn.ConvFwdAlgo.IMPLICIT_GEMM
stats = Stats(__name__)


@pytest.fixture(scope="module", autouse=True)
def _dump_stats():
    yield
    stats.dump()


class Call:
    """A valid forward convolution call whose pieces a case can replace."""

    def __init__(self, rng, layout="NCHW", dtype="float32"):
        self.handle = tridnn.Handle(find_cache=None)
        self.conv = tridnn.ConvolutionDescriptor(padding=1, stride=1, nd=2)
        self.x_desc, self.x = testing.make_tensor((2, 3, 5, 5), dtype, layout, rng,
                                                  testing.fill((2, 3, 5, 5), dtype, rng))
        self.w_desc, self.w = testing.make_filter((4, 3, 3, 3), dtype, layout,
                                                  testing.fill((4, 3, 3, 3), dtype, rng))
        self.y_desc, self.y = testing.make_tensor((2, 4, 5, 5), dtype, layout, rng,
                                                  rng.standard_normal((2, 4, 5, 5)))
        self.alpha, self.beta = 1.0, 0.5
        self.algo = FWD
        self.workspace = np.empty(tridnn.get_convolution_forward_workspace_size(
            self.handle, self.x_desc, self.w_desc, self.conv, self.y_desc, FWD), np.uint8)

    def __call__(self, **override):
        args = dict(handle=self.handle, alpha=self.alpha, x_desc=self.x_desc, x=self.x,
                    w_desc=self.w_desc, w=self.w, conv_desc=self.conv, algo=self.algo,
                    workspace=self.workspace, beta=self.beta, y_desc=self.y_desc, y=self.y)
        args.update(override)
        return tridnn.convolution_forward(**args)


def expect_error(fn, exc_type, *needles, output=None):
    """``fn()`` raises ``exc_type`` whose message contains every needle, and leaves
    ``output`` bit for bit as it was."""
    before = None if output is None else np.array(output, copy=True)
    with pytest.raises(exc_type) as info:
        fn()
    message = str(info.value)
    for needle in needles:
        assert str(needle) in message, f"message {message!r} does not name {needle!r}"
    if output is not None:
        assert np.array_equal(np.asarray(output).view(np.uint8), before.view(np.uint8)), \
            "the output was modified before the error"
    return message


# -- descriptors ----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, 0, 2.5, "3", None, math.nan, math.inf, True, 1 + 0j])
def test_tensor_dims_rejected(bad):
    expect_error(lambda: tridnn.TensorDescriptor((2, bad, 4, 4)), BadParamError, repr(bad))


@pytest.mark.parametrize("bad", [0, -3, 2.0, "x"])
def test_tensor_strides_rejected(bad):
    expect_error(lambda: tridnn.TensorDescriptor((2, 3, 4, 4), "float32", (48, bad, 4, 1)),
                 BadParamError, repr(bad))


@pytest.mark.parametrize("dims", [(), (1,) * 9, 5, None])
def test_tensor_rank_rejected(dims):
    expect_error(lambda: tridnn.TensorDescriptor(dims), BadParamError)


@pytest.mark.parametrize("dtype", ["int32", "float8", None, object, "complex64"])
def test_unsupported_dtype_rejected(dtype):
    expect_error(lambda: tridnn.TensorDescriptor((1, 1, 2, 2), dtype), BadParamError, repr(dtype))


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_filter_dims_rejected(bad):
    expect_error(lambda: tridnn.FilterDescriptor((4, 3, bad, 3)), BadParamError, repr(bad))


@pytest.mark.parametrize("field,bad,exc", [
    ("padding", -1, BadParamError), ("padding", 1.5, BadParamError), ("stride", 0, BadParamError),
    ("stride", -2, BadParamError), ("dilation", 0, BadParamError), ("groups", 0, BadParamError),
    ("groups", 2.5, BadParamError), ("mode", 7, BadParamError), ("math_type", 9, BadParamError),
    ("pad_post", -1, BadParamError), ("nd", 4, BadParamError), ("nd", 0, BadParamError),
    ("stride", math.nan, BadParamError), ("dilation", "2", BadParamError)])
def test_convolution_descriptor_rejected(field, bad, exc):
    kwargs = {"nd": 2, field: bad}
    expect_error(lambda: tridnn.ConvolutionDescriptor(**kwargs), exc, str(bad))


def test_per_dim_length_mismatch_rejected():
    expect_error(lambda: tridnn.ConvolutionDescriptor(padding=(1, 1), stride=(1, 1, 1)), BadParamError,
                 "(1, 1, 1)")


# -- calls ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["alpha", "beta"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "1", None, [1.0], 1j])
def test_nonfinite_or_non_real_scalars_rejected(rng, name, bad):
    call = Call(rng)
    expect_error(lambda: call(**{name: bad}), BadParamError, name, output=call.y)


def test_output_dims_mismatch_rejected(rng):
    call = Call(rng)
    y_desc = tridnn.TensorDescriptor((2, 4, 5, 6))
    expect_error(lambda: call(y_desc=y_desc), BadParamError, "(2, 4, 5, 6)", "(2, 4, 5, 5)", output=call.y)


def test_empty_output_dim_names_the_dim(rng):
    call = Call(rng)
    conv = tridnn.ConvolutionDescriptor(padding=0, dilation=4, nd=2)
    expect_error(lambda: call(conv_desc=conv), BadParamError, "spatial dim 0", output=call.y)


def test_rank_mismatches_rejected(rng):
    call = Call(rng)
    w3 = tridnn.FilterDescriptor((4, 3, 3))
    expect_error(lambda: call(w_desc=w3), BadParamError, "rank mismatch", output=call.y)
    conv3 = tridnn.ConvolutionDescriptor(padding=1, nd=3)
    expect_error(lambda: call(conv_desc=conv3), BadParamError, "rank mismatch", output=call.y)


def test_groups_that_do_not_divide_rejected(rng):
    call = Call(rng)
    expect_error(lambda: call(conv_desc=tridnn.ConvolutionDescriptor(padding=1, groups=2, nd=2)),
                 BadParamError, "groups", output=call.y)


def test_dtype_mismatches_rejected(rng):
    call = Call(rng)
    w64 = tridnn.FilterDescriptor((4, 3, 3, 3), "float64")
    expect_error(lambda: call(w_desc=w64), BadParamError, "FLOAT", "DOUBLE", output=call.y)
    expect_error(lambda: call(x=call.x.astype(np.float64)), BadParamError, "float64", output=call.y)
    y16 = tridnn.TensorDescriptor((2, 4, 5, 5), "float16")
    expect_error(lambda: call(y_desc=y16), BadParamError, "HALF", output=call.y)


def test_layout_mismatch_rejected(rng):
    call = Call(rng)
    nhwc = tridnn.TensorDescriptor.packed((2, 3, 5, 5), "float32", tridnn.TensorFormat.NHWC)
    expect_error(lambda: call(x_desc=nhwc), BadParamError, "strides", output=call.y)
    expect_error(lambda: call(x=call.x[:, :, ::-1]), BadParamError, "does not match", output=call.y)


@pytest.mark.parametrize("bad", [[[1.0]], "x", None, 3.0, object()])
def test_wrong_array_types_rejected(rng, bad):
    call = Call(rng)
    expect_error(lambda: call(x=bad), BadParamError, "x", output=call.y)
    expect_error(lambda: call(w=bad), BadParamError, "w", output=call.y)


def test_read_only_output_rejected(rng):
    call = Call(rng)
    call.y.flags.writeable = False
    expect_error(lambda: call(), BadParamError, "read-only", output=call.y)


def test_overlapping_output_rejected(rng):
    call = Call(rng)
    desc = tridnn.TensorDescriptor((2, 3, 5, 5))
    w_desc = tridnn.FilterDescriptor((3, 3, 3, 3))
    x = call.x.copy()
    expect_error(lambda: call(x=x, y=x, y_desc=desc, w_desc=w_desc, w=call.w[:3],
                              workspace=None, algo=tridnn.ConvFwdAlgo.DIRECT), BadParamError,
                 "overlaps", output=x)


@pytest.mark.parametrize("algo,exc", [(99, BadParamError), (-1, BadParamError), ("FOO", BadParamError),
                                      (2.5, BadParamError), (None, BadParamError),
                                      (tridnn.ConvBwdDataAlgo.ALGO_1, BadParamError)])
def test_bad_algorithm_rejected(rng, algo, exc):
    call = Call(rng)
    expect_error(lambda: call(algo=algo), exc, repr(algo) if not hasattr(algo, "name") else "",
                 output=call.y)


def test_not_applicable_algorithm_reports_the_reason(rng):
    """An algorithm that does not apply raises NotSupportedError naming itself and the
    reason, before the output is touched."""
    call = Call(rng)
    refused = 0
    for algo in tridnn.ConvFwdAlgo:
        before = call.y.copy()
        try:
            call(algo=algo, workspace=np.empty(1 << 22, np.uint8))
        except NotSupportedError as exc:
            refused += 1
            assert algo.name in str(exc) and "does not apply" in str(exc), str(exc)
            assert np.array_equal(call.y, before), f"{algo.name} touched y before refusing"
    if not refused:
        pytest.skip("every forward algorithm applies to this problem")


@pytest.mark.parametrize("size", [0, 1, 100])
def test_too_small_workspace_rejected(rng, size):
    call = Call(rng)
    need = call.workspace.nbytes
    if size >= need:
        pytest.skip(f"IMPLICIT_GEMM needs only {need} bytes here")
    expect_error(lambda: call(workspace=np.empty(size, np.uint8)), BadParamError, str(size), str(need),
                 output=call.y)
    expect_error(lambda: call(workspace=None), BadParamError, str(need), output=call.y)


def test_non_contiguous_or_foreign_workspace_rejected(rng):
    call = Call(rng)
    need = call.workspace.nbytes
    expect_error(lambda: call(workspace=np.empty(2 * need + 2, np.uint8)[::2]), BadParamError,
                 "contiguous", output=call.y)
    expect_error(lambda: call(workspace="workspace"), BadParamError, "workspace", output=call.y)


def test_destroyed_handle_rejected(rng):
    call = Call(rng)
    call.handle.destroy()
    expect_error(lambda: call(), NotInitializedError, "destroyed", output=call.y)
    expect_error(lambda: call.handle.workspace(10), NotInitializedError, "destroyed")
    expect_error(lambda: tridnn.get_convolution_forward_algorithm(
        call.handle, call.x_desc, call.w_desc, call.conv, call.y_desc), NotInitializedError)


@pytest.mark.parametrize("bad", [None, "cpu", object(), 0])
def test_foreign_handle_rejected(rng, bad):
    call = Call(rng)
    expect_error(lambda: call(handle=bad), BadParamError, "handle", output=call.y)


@pytest.mark.parametrize("what", ["x_desc", "w_desc", "y_desc", "conv_desc"])
@pytest.mark.parametrize("bad", [None, (2, 3, 5, 5), "NCHW"])
def test_foreign_descriptors_rejected(rng, what, bad):
    call = Call(rng)
    expect_error(lambda: call(**{what: bad}), BadParamError, output=call.y)


def test_swapped_descriptor_kinds_rejected(rng):
    call = Call(rng)
    expect_error(lambda: call(w_desc=call.w_desc.as_tensor()), BadParamError, "FilterDescriptor",
                 output=call.y)
    expect_error(lambda: call(x_desc=tridnn.FilterDescriptor(call.x_desc.dims)), BadParamError,
                 "TensorDescriptor", output=call.y)


@pytest.mark.parametrize("requested", [0, -1, 1.5, "2"])
def test_bad_requested_count_rejected(rng, requested):
    call = Call(rng)
    expect_error(lambda: tridnn.get_convolution_forward_algorithm(
        call.handle, call.x_desc, call.w_desc, call.conv, call.y_desc, requested), BadParamError,
        repr(requested))


@pytest.mark.parametrize("requested", [0, "2"])
def test_bad_requested_count_rejected_before_find_times_anything(rng, requested, monkeypatch):
    from tridnn.algorithms import selection

    def must_not_time(*args, **kwargs):
        raise AssertionError("find ran before the requested count was checked")
    monkeypatch.setattr(selection, "find", must_not_time)
    call = Call(rng)
    expect_error(lambda: tridnn.find_convolution_forward_algorithm(
        call.handle, call.x_desc, call.w_desc, call.conv, call.y_desc, requested), BadParamError,
        repr(requested))
    expect_error(lambda: tridnn.find_convolution_forward_algorithm_ex(
        call.handle, call.x_desc, call.x, call.w_desc, call.w, call.conv, call.y_desc, call.y,
        requested), BadParamError, repr(requested), output=call.y)


@pytest.mark.parametrize("kwargs", [dict(device="tpu"), dict(backend="cupy"),
                                    dict(workspace_limit=-1), dict(workspace_limit=1.5),
                                    dict(math_type=17)])
def test_bad_handle_arguments_rejected(kwargs):
    value = next(iter(kwargs.values()))
    expect_error(lambda: tridnn.Handle(find_cache=None, **kwargs), BadParamError, repr(value))


# -- sizes too large for the machine ----------------------------------------------------------
HUGE = 1 << 40


def test_huge_descriptors_do_not_allocate_in_queries(rng):
    """Descriptors for tensors far larger than memory are fine to describe and query."""
    handle = tridnn.Handle(find_cache=None)
    x = tridnn.TensorDescriptor((1, 1, HUGE, 4))
    w = tridnn.FilterDescriptor((1, 1, 3, 3))
    conv = tridnn.ConvolutionDescriptor(padding=1, nd=2)
    y = tridnn.TensorDescriptor(conv.output_dims(x, w))
    records = tridnn.get_convolution_forward_algorithm(handle, x, w, conv, y)
    assert records, "get returned no records"
    for r in records:
        assert r.memory >= 0, f"{r.algo} reports negative workspace {r.memory}"
        if r.status == tridnn.Status.SUCCESS:
            size = tridnn.get_convolution_forward_workspace_size(handle, x, w, conv, y, r.algo)
            assert size >= 0


def test_huge_find_raises_alloc_failed():
    """find on a problem whose tensors cannot fit raises AllocFailedError, never MemoryError
    from NumPy or a crash."""
    handle = tridnn.Handle(find_cache=None)
    x = tridnn.TensorDescriptor((1, 1, HUGE, 4))
    w = tridnn.FilterDescriptor((1, 1, 1, 1))
    conv = tridnn.ConvolutionDescriptor(nd=2)
    y = tridnn.TensorDescriptor(conv.output_dims(x, w))
    expect_error(lambda: tridnn.find_convolution_forward_algorithm(handle, x, w, conv, y),
                 AllocFailedError, "bytes")


def test_workspace_beyond_memory_raises_alloc_failed():
    handle = tridnn.Handle(find_cache=None, workspace_limit=1 << 62)
    expect_error(lambda: handle.workspace(1 << 61), AllocFailedError, str(1 << 61))
    assert handle.workspace(16).nbytes >= 16  # the handle still works afterwards


def test_workspace_over_the_handle_limit_rejected():
    handle = tridnn.Handle(find_cache=None, workspace_limit=1024)
    expect_error(lambda: handle.workspace(1025), BadParamError, "1025", "1024")


def test_backend_allocations_raise_alloc_failed():
    from tridnn.cpu.backend import NumpyBackend
    backend = NumpyBackend()
    expect_error(lambda: backend.allocate_workspace(1 << 62), AllocFailedError, str(1 << 62))
    expect_error(lambda: backend.empty(tridnn.TensorDescriptor((1 << 20, 1 << 20, 1 << 20))),
                 AllocFailedError, "dims")


# -- random hostile values at every parameter ------------------------------------------------
BAD_INTS = st.one_of(st.integers(max_value=0), st.sampled_from([1.5, -2.5, "4", None, math.nan, math.inf,
                                                               b"3", 2j, [], True]),
                     st.integers(min_value=1 << 31, max_value=1 << 70))  # huge: valid alone, wrong here
BAD_SCALARS = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, "0.5", None, 1j, [1.0], {}]),
                        st.text(max_size=3))


@st.composite
def hostile_calls(draw):
    """(which parameter, bad value): one broken piece of an otherwise valid call."""
    target = draw(st.sampled_from(["x_dim", "w_dim", "stride", "padding", "dilation", "groups",
                                   "alpha", "beta", "algo", "workspace", "requested", "x_stride"]))
    if target in ("alpha", "beta"):
        return target, draw(BAD_SCALARS)
    if target == "algo":
        return target, draw(st.one_of(st.integers(min_value=8), st.integers(max_value=-1),
                                      st.text(max_size=6), st.floats(), st.none()))
    if target == "workspace":
        return target, draw(st.integers(0, 7))
    if target == "padding":
        return target, draw(st.one_of(st.integers(max_value=-1),
                                      st.sampled_from([1.5, None, "1", math.nan, 2j])))
    if target == "requested":  # None ("every algorithm") and any count >= 1 are valid there
        return target, draw(BAD_INTS.filter(
            lambda v: v is not None and not (type(v) is int and v >= 1)))
    return target, draw(BAD_INTS)


@fuzz_settings(ci_examples=80)
@given(call_spec=hostile_calls(), seed=st.integers(0, 2**32 - 1))
def test_random_hostile_values_raise_documented_errors(call_spec, seed):
    target, bad = call_spec
    stats.problem("hostile_call")
    rng = np.random.default_rng(seed)
    call = Call(rng)
    before = call.y.copy()

    def attempt():
        if target == "x_dim":
            dims = list(call.x_desc.dims)
            dims[1] = bad
            return call(x_desc=tridnn.TensorDescriptor(dims))
        if target == "x_stride":
            return call(x_desc=tridnn.TensorDescriptor(call.x_desc.dims, "float32", (75, bad, 5, 1)))
        if target == "w_dim":
            return call(w_desc=tridnn.FilterDescriptor((4, 3, bad, 3)))
        if target in ("stride", "padding", "dilation", "groups"):
            return call(conv_desc=tridnn.ConvolutionDescriptor(**{"nd": 2, target: bad}))
        if target in ("alpha", "beta", "algo"):
            return call(**{target: bad})
        if target == "workspace":
            return call(workspace=np.empty(bad, np.uint8))
        return tridnn.get_convolution_forward_algorithm(call.handle, call.x_desc, call.w_desc,
                                                        call.conv, call.y_desc, bad)

    with pytest.raises(TridnnError) as info:
        attempt()
    assert isinstance(info.value, (BadParamError, NotSupportedError)), repr(info.value)
    if target not in ("workspace",) and not (isinstance(bad, str) and bad == ""):
        shown = {repr(bad), str(bad)} | ({repr(tuple(bad))} if isinstance(bad, list) else set())
        assert any(s in str(info.value) for s in shown), f"{info.value} does not name {bad!r}"
    assert np.array_equal(call.y.view(np.uint8), before.view(np.uint8)), "output modified"
    stats.ran("hostile_call", type(info.value).__name__)


# -- the same rules for the backward passes and the layers ----------------------------------------
def _layer_calls(rng):
    """name -> (function, valid keyword arguments, output keyword, output-descriptor keyword,
    a wrong output descriptor)."""
    x_desc, x = testing.make_tensor((2, 3, 6, 6), "float32", "NCHW", rng, testing.fill((2, 3, 6, 6), "float32", rng))
    w_desc, w = testing.make_filter((4, 3, 3, 3), "float32", "NCHW", testing.fill((4, 3, 3, 3), "float32", rng))
    conv = tridnn.ConvolutionDescriptor(padding=1, nd=2)
    dy_desc, dy = testing.make_tensor((2, 4, 6, 6), "float32", "NCHW", rng, testing.fill((2, 4, 6, 6), "float32", rng))
    same = lambda: testing.make_tensor((2, 3, 6, 6), "float32", "NCHW", rng, rng.standard_normal((2, 3, 6, 6)))
    wrong = tridnn.TensorDescriptor((2, 3, 6, 5))
    calls = {}
    dx_desc, dx = same()
    calls["convolution_backward_data"] = (tridnn.convolution_backward_data, dict(
        alpha=1.0, w_desc=w_desc, w=w, dy_desc=dy_desc, dy=dy, conv_desc=conv, algo=tridnn.ConvBwdDataAlgo.ALGO_0,
        workspace=np.empty(1 << 20, np.uint8), beta=0.5, dx_desc=dx_desc, dx=dx), "dx", "dx_desc", wrong)
    _, dw = testing.make_filter((4, 3, 3, 3), "float32", "NCHW", rng.standard_normal((4, 3, 3, 3)))
    calls["convolution_backward_filter"] = (tridnn.convolution_backward_filter, dict(
        alpha=1.0, x_desc=x_desc, x=x, dy_desc=dy_desc, dy=dy, conv_desc=conv,
        algo=tridnn.ConvBwdFilterAlgo.ALGO_0, workspace=np.empty(1 << 20, np.uint8), beta=0.5, dw_desc=w_desc,
        dw=dw), "dw", "dw_desc", tridnn.FilterDescriptor((4, 3, 3, 2)))
    y_desc, y = testing.make_tensor((2, 3, 3, 3), "float32", "NCHW", rng, rng.standard_normal((2, 3, 3, 3)))
    calls["pooling_forward"] = (tridnn.pooling_forward, dict(
        pool_desc=tridnn.PoolingDescriptor(tridnn.PoolingMode.MAX, 2, 0, 2), alpha=1.0, x_desc=x_desc, x=x,
        beta=0.5, y_desc=y_desc, y=y), "y", "y_desc", tridnn.TensorDescriptor((2, 3, 3, 2)))
    a_desc, a = same()
    calls["activation_forward"] = (tridnn.activation_forward, dict(
        act_desc=tridnn.ActivationDescriptor(), alpha=1.0, x_desc=x_desc, x=x, beta=0.5, y_desc=a_desc, y=a),
        "y", "y_desc", wrong)
    s_desc, s = same()
    calls["softmax_forward"] = (tridnn.softmax_forward, dict(
        algorithm=tridnn.SoftmaxAlgorithm.ACCURATE, mode=tridnn.SoftmaxMode.CHANNEL, alpha=1.0, x_desc=x_desc,
        x=x, beta=0.5, y_desc=s_desc, y=s), "y", "y_desc", wrong)
    bn = tridnn.derive_bn_tensor_descriptor(x_desc, tridnn.BatchNormMode.SPATIAL)
    b_desc, b = same()
    ones, zeros = np.ones(bn.dims, np.float32), np.zeros(bn.dims, np.float32)
    calls["batch_norm_forward_inference"] = (tridnn.batch_norm_forward_inference, dict(
        mode=tridnn.BatchNormMode.SPATIAL, alpha=1.0, beta=0.5, x_desc=x_desc, x=x, y_desc=b_desc, y=b,
        bn_desc=bn, bn_scale=ones, bn_bias=zeros, estimated_mean=zeros, estimated_variance=ones,
        epsilon=1e-5), "y", "y_desc", wrong)
    return calls


LAYER_NAMES = ["convolution_backward_data", "convolution_backward_filter", "pooling_forward",
               "activation_forward", "softmax_forward", "batch_norm_forward_inference"]


@pytest.mark.parametrize("name", LAYER_NAMES)
@pytest.mark.parametrize("breakage", ["no_handle", "foreign_handle", "destroyed_handle", "nan_alpha",
                                      "inf_beta", "wrong_output_dims", "read_only_output", "list_input"])
def test_backward_and_layer_calls_reject_hostile_inputs(rng, name, breakage):
    fn, kwargs, out_key, out_desc_key, wrong_desc = _layer_calls(rng)[name]
    handle = tridnn.Handle(find_cache=None)
    fn(handle=handle, **kwargs)  # the unbroken call works
    out = kwargs[out_key]
    kwargs = dict(kwargs, handle=handle)
    if breakage == "no_handle":
        kwargs["handle"], exc, needle = None, BadParamError, "handle"
    elif breakage == "foreign_handle":
        kwargs["handle"], exc, needle = object(), BadParamError, "handle"
    elif breakage == "destroyed_handle":
        handle.destroy()
        exc, needle = NotInitializedError, "destroyed"
    elif breakage == "nan_alpha":
        alpha_key = "alpha" if "alpha" in kwargs else "alpha1"
        kwargs[alpha_key], exc, needle = math.nan, BadParamError, "alpha"
    elif breakage == "inf_beta":
        kwargs["beta"], exc, needle = math.inf, BadParamError, "beta"
    elif breakage == "wrong_output_dims":
        kwargs[out_desc_key], exc, needle = wrong_desc, BadParamError, str(wrong_desc.dims)
    elif breakage == "read_only_output":
        out.flags.writeable = False
        exc, needle = BadParamError, "read-only"
    else:
        first_input = next(k for k in kwargs if k in ("x", "w", "dy") and k != out_key)
        kwargs[first_input], exc, needle = [[1.0, 2.0]], BadParamError, first_input
    expect_error(lambda: fn(**kwargs), exc, needle, output=out)


# -- the functional API ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,exc,needle", [
    (dict(stride=0), BadParamError, "0"),
    (dict(stride=-1), BadParamError, "-1"),
    (dict(padding=-2), BadParamError, "-2"),
    (dict(padding="bogus"), BadParamError, "bogus"),
    (dict(dilation=1.5), BadParamError, "1.5"),
    (dict(groups=2), BadParamError, "groups"),
    (dict(mode="flipped"), BadParamError, "flipped"),
    (dict(algo="NOPE"), BadParamError, "NOPE"),
    (dict(handle="cpu"), BadParamError, "handle"),
])
def test_functional_conv_rejects_bad_arguments(rng, kwargs, exc, needle):
    x = testing.fill((2, 3, 6, 6), "float32", rng)
    w = testing.fill((4, 3, 3, 3), "float32", rng)
    expect_error(lambda: tridnn.conv(x, w, **kwargs), exc, needle)


@pytest.mark.parametrize("x_shape,w_shape,needle", [
    ((2, 3, 6, 6), (4, 2, 3, 3), "3"),          # channels do not match
    ((2, 3, 6, 6), (4, 3, 3), "rank"),          # filter rank
    ((2, 3, 2, 2), (4, 3, 5, 5), "spatial dim"),  # output would be empty
    ((3, 6, 6), (4, 3, 3, 3), "rank"),
])
def test_functional_conv_rejects_mismatched_shapes(rng, x_shape, w_shape, needle):
    x = testing.fill(x_shape, "float32", rng)
    w = testing.fill(w_shape, "float32", rng)
    expect_error(lambda: tridnn.conv(x, w), BadParamError, needle)


def test_functional_conv_rejects_mixed_dtypes_and_non_arrays(rng):
    x = testing.fill((2, 3, 6, 6), "float32", rng)
    w = testing.fill((4, 3, 3, 3), "float64", rng)
    expect_error(lambda: tridnn.conv(x, w), BadParamError, "DOUBLE")
    expect_error(lambda: tridnn.conv("x", w.astype(np.float32)), BadParamError, "str")
    expect_error(lambda: tridnn.conv(x.astype(np.int32), w.astype(np.int32)), BadParamError, "int32")


# -- the repeated-call fast path re-checks everything that can change between calls ------------------
@pytest.mark.parametrize("breakage", ["nan_alpha", "inf_beta", "string_beta", "wrong_x_array", "wrong_dtype_y",
                                      "read_only_y", "small_workspace", "overlap", "list_x", "destroyed"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_repeated_call_with_same_descriptors_still_rejects(rng, breakage, direction):
    """After one valid call (which leaves a fast-path entry keyed by the descriptors),
    the same descriptors with a broken argument must fail exactly like a first call."""
    call = Call(rng)
    out_name = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[direction]
    algo = {"fwd": tridnn.ConvFwdAlgo.IMPLICIT_GEMM, "bwd_data": tridnn.ConvBwdDataAlgo.ALGO_0,
            "bwd_filter": tridnn.ConvBwdFilterAlgo.ALGO_0}[direction]
    fn = {"fwd": tridnn.convolution_forward, "bwd_data": tridnn.convolution_backward_data,
          "bwd_filter": tridnn.convolution_backward_filter}[direction]
    arrays = {"x": call.x, "w": call.w, "y": call.y}
    descs = {"x": call.x_desc, "w": call.w_desc, "y": call.y_desc}
    ws = np.empty(1 << 20, np.uint8)

    def invoke(alpha=1.0, beta=0.5, workspace=ws, **swap):
        a = dict(arrays, **swap)
        if direction == "fwd":
            return fn(call.handle, alpha, descs["x"], a["x"], descs["w"], a["w"], call.conv, algo, workspace,
                      beta, descs["y"], a["y"])
        if direction == "bwd_data":
            return fn(call.handle, alpha, descs["w"], a["w"], descs["y"], a["y"], call.conv, algo, workspace,
                      beta, descs["x"], a["x"])
        return fn(call.handle, alpha, descs["x"], a["x"], descs["y"], a["y"], call.conv, algo, workspace,
                  beta, descs["w"], a["w"])

    for _ in range(2):  # the first call validates in full, the second takes the fast path
        invoke()
    out = arrays[out_name]
    an_input = next(k for k in ("x", "w", "y") if k != out_name)
    if breakage == "nan_alpha":
        expect_error(lambda: invoke(alpha=math.nan), BadParamError, "alpha", output=out)
    elif breakage == "inf_beta":
        expect_error(lambda: invoke(beta=math.inf), BadParamError, "beta", output=out)
    elif breakage == "string_beta":
        expect_error(lambda: invoke(beta="0.5"), BadParamError, "beta", output=out)
    elif breakage == "wrong_x_array":
        bad = np.zeros(tuple(d + 1 for d in arrays[an_input].shape), np.float32)
        expect_error(lambda: invoke(**{an_input: bad}), BadParamError, "does not match", output=out)
    elif breakage == "wrong_dtype_y":
        expect_error(lambda: invoke(**{an_input: arrays[an_input].astype(np.float64)}), BadParamError,
                     "float64", output=out)
    elif breakage == "read_only_y":
        out.flags.writeable = False
        expect_error(lambda: invoke(), BadParamError, "read-only", output=out)
    elif breakage == "small_workspace":
        need = {"fwd": tridnn.get_convolution_forward_workspace_size,
                "bwd_data": tridnn.get_convolution_backward_data_workspace_size,
                "bwd_filter": tridnn.get_convolution_backward_filter_workspace_size}
        if direction == "fwd":
            size = need[direction](call.handle, call.x_desc, call.w_desc, call.conv, call.y_desc, algo)
        elif direction == "bwd_data":
            size = need[direction](call.handle, call.w_desc, call.y_desc, call.conv, call.x_desc, algo)
        else:
            size = need[direction](call.handle, call.x_desc, call.y_desc, call.conv, call.w_desc, algo)
        if size == 0:
            pytest.skip(f"{algo.name} needs no workspace here")
        expect_error(lambda: invoke(workspace=np.empty(size - 1, np.uint8)), BadParamError, str(size),
                     output=out)
    elif breakage == "overlap":
        if arrays[an_input].shape != out.shape:
            pytest.skip(f"{an_input} and {out_name} differ in shape; cannot alias them")
        expect_error(lambda: invoke(**{an_input: out}), BadParamError, "overlaps", output=out)
    elif breakage == "list_x":
        expect_error(lambda: invoke(**{an_input: arrays[an_input].tolist()}), BadParamError, an_input,
                     output=out)
    else:
        call.handle.destroy()
        expect_error(lambda: invoke(), NotInitializedError, "destroyed", output=out)
