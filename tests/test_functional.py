"""The functional API against the float64 reference: every padding form, 1D/2D/3D,
dtypes, layouts, torch in/torch out, plan caching and the errors."""
import threading

import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.algorithms import registry, selection
from tridnn.api import functional as F
from tridnn.errors import BadParamError, NotSupportedError

DTYPES = ["float32", "float64", "float16", "bfloat16"]


def has_algorithms(direction):
    return bool(registry.algorithms("conv", direction, "numpy"))


def needs(direction):
    return pytest.mark.skipif(not has_algorithms(direction),
                              reason=f"no NumPy {direction} convolution algorithm is registered yet")


def in_layout(values, layout):
    """values (logical N, C, *sp) laid out as NCHW, NHWC or a non-contiguous view."""
    _, view = testing.make_tensor(values.shape, values.dtype, layout, None, values)
    return view


def check(got, ref, dtype, name="y"):
    testing.assert_all_written(got, name)
    assert got.shape == ref.shape, f"{name}: shape {got.shape}, want {ref.shape}"
    assert got.dtype == tridnn.DataType.of(dtype).numpy
    testing.assert_close(got, ref, dtype, name)


@pytest.fixture
def handle():
    h = tridnn.Handle(find_cache=None)
    yield h
    F.clear_plan_cache(h)


# -- correctness ---------------------------------------------------------------------
CASES = [
    # spatial, kernel, stride, padding, dilation, groups, reference (pre, post)
    ((9,), (3,), 1, 1, 1, 1, ((1,), (1,))),
    ((8,), (4,), 2, "same", 1, 2, ((1,), (1,))),
    ((7, 6), (3, 3), 2, "same", 1, 1, ((1, 0), (1, 1))),
    ((7, 6), (3, 2), 1, "valid", (2, 1), 1, ((0, 0), (0, 0))),
    ((6, 7), (3, 3), (1, 2), ((2, 0), (1, 3)), 1, 3, ((2, 1), (0, 3))),
    ((5, 5), (5, 5), 1, "same", 1, 6, ((2, 2), (2, 2))),
    ((4, 5, 3), (3, 3, 2), 1, (1, 0, 1), 1, 1, ((1, 0, 1), (1, 0, 1))),
    ((4, 5, 4), (2, 3, 3), 2, "same", 1, 1, ((0, 1, 0), (0, 1, 1))),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{len(c[0])}d-s{c[2]}-p{c[3]}-g{c[5]}")
def test_conv_matches_reference(case, layout, dtype, rng, handle):
    spatial, kernel, stride, padding, dilation, groups, (pre, post) = case
    c, k = 6, 6 if groups == 6 else 4 * (groups if groups > 1 else 1)
    x = testing.fill((2, c, *spatial), dtype, rng)
    w = testing.fill((k, c // groups, *kernel), dtype, rng)
    bias = testing.fill((k,), dtype, rng)
    y = tridnn.conv(in_layout(x, layout), w, bias, stride=stride, padding=padding,
                    dilation=dilation, groups=groups, handle=handle)
    ref = reference.conv_forward(x, w, stride, pre, post, dilation, groups)
    ref += bias.astype(np.float64).reshape((1, k) + (1,) * len(spatial))
    check(y, ref, dtype)
    want_fmt = "NHWC" if layout == "NHWC" else "NCHW"
    assert tridnn.TensorDescriptor.like(y).format == want_fmt


def test_convolution_mode_flips_the_filter(rng, handle):
    x = testing.fill((1, 2, 6, 5), "float32", rng)
    w = testing.fill((3, 2, 3, 2), "float32", rng)
    got = tridnn.conv(x, w, padding=1, mode="convolution", handle=handle)
    check(got, reference.conv_forward(x, w, 1, 1, None, 1, 1, "convolution"), "float32")
    flipped = tridnn.conv(x, np.ascontiguousarray(w[:, :, ::-1, ::-1]), padding=1, handle=handle)
    np.testing.assert_array_equal(got, flipped)


@pytest.mark.parametrize("algo", [a.enum for a in registry.algorithms("conv", "fwd", "numpy")],
                         ids=lambda a: a.name)
def test_explicit_algorithm(algo, rng, handle):
    x = testing.fill((2, 4, 7, 7), "float32", rng)
    w = testing.fill((5, 4, 3, 3), "float32", rng)
    try:
        y = tridnn.conv(x, w, padding=1, algo=algo, handle=handle)
    except NotSupportedError as exc:
        pytest.skip(f"{algo.name} does not apply: {exc}")
    check(y, reference.conv_forward(x, w, 1, 1), "float32")
    assert F._plan_table(handle) and next(iter(F._plan_table(handle).values())).algorithm.enum == algo


def test_algo_by_name_and_int(rng, handle):
    x = testing.fill((1, 2, 5, 5), "float32", rng)
    w = testing.fill((2, 2, 3, 3), "float32", rng)
    ref = reference.conv_forward(x, w, 1, 0)
    check(tridnn.conv(x, w, algo="DIRECT", handle=handle), ref, "float32")
    check(tridnn.conv(x, w, algo=int(tridnn.ConvFwdAlgo.IMPLICIT_GEMM), handle=handle), ref, "float32")


def test_empty_batch(handle):
    y = tridnn.conv(np.zeros((0, 3, 5, 5), np.float32), np.ones((4, 3, 3, 3), np.float32),
                    handle=handle)
    assert y.shape == (0, 4, 3, 3)


def test_broadcast_and_reversed_inputs_are_copied(rng, handle):
    x = testing.fill((1, 3, 6, 6), "float32", rng)
    w = testing.fill((2, 3, 3, 3), "float32", rng)
    ref = reference.conv_forward(x[..., ::-1], w, 1, 0)
    check(tridnn.conv(x[..., ::-1], w, handle=handle), ref, "float32")
    row = testing.fill((1, 3, 1, 6), "float32", rng)
    wide = np.broadcast_to(row, (1, 3, 6, 6))
    check(tridnn.conv(wide, w, handle=handle), reference.conv_forward(wide, w, 1, 0), "float32")
    strided_w = np.asfortranarray(w)  # neither KCRS nor KRSC: copied
    check(tridnn.conv(x, strided_w, handle=handle), reference.conv_forward(x, w, 1, 0), "float32")


def test_inputs_are_not_modified(rng, handle):
    x = testing.fill((2, 3, 5, 5), "float32", rng)
    w = testing.fill((2, 3, 3, 3), "float32", rng)
    x0, w0 = x.copy(), w.copy()
    tridnn.conv(x, w, handle=handle)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


# -- torch in, torch out ---------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_torch_tensors_in_and_out(dtype, rng, handle):
    torch = pytest.importorskip("torch")
    x = testing.fill((2, 3, 6, 6), dtype, rng)
    w = testing.fill((4, 3, 3, 3), dtype, rng)
    tdt = getattr(torch, dtype)
    tx = torch.tensor(x.astype(np.float32)).to(tdt).to(memory_format=torch.channels_last)
    tw = torch.tensor(w.astype(np.float32)).to(tdt)
    y = tridnn.conv(tx, tw, padding=1, handle=handle)
    assert isinstance(y, torch.Tensor) and y.dtype == tdt
    assert y.is_contiguous(memory_format=torch.channels_last)
    want = torch.nn.functional.conv2d(tx.float(), tw.float(), padding=1)
    torch.testing.assert_close(y.float(), want, rtol=0, atol=0)  # integer fills: exact


# -- plans and the default handle ---------------------------------------------------------
def test_plans_are_cached_per_signature(rng, handle, monkeypatch):
    calls = []
    real_choose = selection.choose
    monkeypatch.setattr(selection, "choose", lambda *a, **k: calls.append(1) or real_choose(*a, **k))
    x = testing.fill((1, 2, 6, 6), "float32", rng)
    w = testing.fill((3, 2, 3, 3), "float32", rng)
    for _ in range(3):
        tridnn.conv(x, w, padding=1, handle=handle)
    assert len(calls) == 1 and F.plan_cache_info(handle) == 1
    tridnn.conv(x[:1, :, :5], w, padding=1, handle=handle)  # a new shape, a new plan
    assert len(calls) == 2 and F.plan_cache_info(handle) == 2


def test_find_runs_once_and_fills_the_find_cache(rng, tmp_path, monkeypatch):
    handle = tridnn.Handle(find_cache=str(tmp_path / "find.sqlite"), find_time_budget_s=0.05)
    calls = []
    real_find = selection.find
    monkeypatch.setattr(selection, "find", lambda *a, **k: calls.append(1) or real_find(*a, **k))
    x = testing.fill((1, 2, 6, 6), "float32", rng)
    w = testing.fill((3, 2, 3, 3), "float32", rng)
    for _ in range(2):
        y = tridnn.conv(x, w, padding=1, algo="find", handle=handle)
    check(y, reference.conv_forward(x, w, 1, 1), "float32")
    assert len(calls) == 1
    plan = next(iter(F._plan_table(handle).values()))
    assert handle.find_cache.get(selection.cache_key(handle, plan.problem)) is not None


def test_default_handle_is_per_thread(rng):
    x = testing.fill((1, 1, 4, 4), "float32", rng)
    w = testing.fill((1, 1, 3, 3), "float32", rng)
    seen = []

    def work():
        tridnn.conv(x, w)
        seen.append(tridnn.handle.default_handle("cpu"))
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 2 and seen[0] is not seen[1]


def test_destroyed_handle_raises(rng):
    h = tridnn.Handle(find_cache=None)
    h.destroy()
    with pytest.raises(tridnn.NotInitializedError):
        tridnn.conv(np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 3, 3), np.float32), handle=h)


# -- errors ------------------------------------------------------------------------------
X = np.ones((1, 4, 6, 6), np.float32)
W = np.ones((2, 4, 3, 3), np.float32)


@pytest.mark.parametrize("kwargs, words", [
    (dict(padding="full"), "'same', 'valid'"),
    (dict(padding=((1, 1),)), "pair per spatial dim"),
    (dict(padding=(1, 2, 3)), "3 entries"),
    (dict(padding=-1), "padding"),
    (dict(stride=0), "stride"),
    (dict(dilation=(1, 0)), "dilation"),
    (dict(groups=3), "groups"),
    (dict(mode="fancy"), "cross_correlation"),
    (dict(algo="fastest"), "unknown fwd convolution algorithm"),
    (dict(bias=np.ones(3, np.float32)), "bias must have shape (2,)"),
    (dict(padding=0, dilation=4), "smaller than the dilated kernel"),
])
def test_bad_parameters_raise(kwargs, words, handle):
    with pytest.raises(BadParamError, match=None) as info:
        tridnn.conv(X, W, handle=handle, **kwargs)
    assert words in str(info.value)


def test_bad_arrays_raise(handle):
    with pytest.raises(BadParamError, match="3 to 5 dims"):
        tridnn.conv(np.ones((4, 6), np.float32), W, handle=handle)
    with pytest.raises(BadParamError, match="input channels"):
        tridnn.conv(np.ones((1, 3, 6, 6), np.float32), W, handle=handle)
    with pytest.raises(BadParamError, match="dtype mismatch"):
        tridnn.conv(X, W.astype(np.float64), handle=handle)
    with pytest.raises(BadParamError, match="unsupported data type"):
        tridnn.conv(X.astype(np.int32), W.astype(np.int32), handle=handle)
    with pytest.raises(BadParamError, match="expected an array"):
        tridnn.conv([[1.0]], W, handle=handle)


def test_inapplicable_algorithm_is_not_supported(handle):
    missing = [a for a in tridnn.ConvFwdAlgo
               if a not in {x.enum for x in registry.algorithms("conv", "fwd", "numpy")}]
    algo = missing[0] if missing else tridnn.ConvFwdAlgo.WINOGRAD
    with pytest.raises(NotSupportedError):
        # a 1D 5-tap strided problem: no Winograd applies, and an unregistered enum never does
        tridnn.conv(np.ones((1, 2, 9), np.float32), np.ones((2, 2, 5), np.float32), stride=2,
                    algo=algo, handle=handle)


# -- other directions ----------------------------------------------------------------------
@needs("bwd_data")
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_backward_data(layout, dtype, rng, handle):
    x_shape = (2, 4, 7, 6)
    w = testing.fill((6, 2, 3, 3), dtype, rng)
    dy = testing.fill((2, 6, 4, 3), dtype, rng)
    dx = F.conv_backward_data(in_layout(dy, layout), w, x_shape, stride=2, padding=1, groups=2,
                              handle=handle)
    check(dx, reference.conv_backward_data(dy, w, x_shape, 2, 1, None, 1, 2), dtype, "dx")


@needs("bwd_filter")
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_backward_filter(layout, dtype, rng, handle):
    x = testing.fill((2, 4, 7, 6), dtype, rng)
    dy = testing.fill((2, 6, 4, 3), dtype, rng)
    dw = F.conv_backward_filter(in_layout(x, layout), in_layout(dy, layout), (6, 2, 3, 3), stride=2,
                                padding=1, groups=2, handle=handle)
    check(dw, reference.conv_backward_filter(x, dy, (6, 2, 3, 3), 2, 1, None, 1, 2), dtype, "dw")


@needs("bwd_data")
@pytest.mark.parametrize("case", [
    dict(shape=(2, 4, 5, 4), w=(4, 3, 3, 3), stride=2, padding=1, output_padding=1, groups=1),
    dict(shape=(1, 4, 6), w=(4, 1, 4), stride=3, padding=0, output_padding=2, groups=2),
    dict(shape=(1, 2, 3, 3, 2), w=(2, 2, 2, 3, 2), stride=(1, 2, 2), padding=(0, 1, 0),
         output_padding=(0, 1, 0), groups=1),
])
def test_conv_transpose_matches_torch(case, rng, handle):
    torch = pytest.importorskip("torch")
    x = testing.fill(case["shape"], "float32", rng)
    w = testing.fill(case["w"], "float32", rng)
    k = case["w"][1] * case["groups"]
    bias = testing.fill((k,), "float32", rng)
    y = tridnn.conv_transpose(x, w, bias, stride=case["stride"], padding=case["padding"],
                              output_padding=case["output_padding"], groups=case["groups"],
                              handle=handle)
    fn = {3: torch.nn.functional.conv_transpose1d, 4: torch.nn.functional.conv_transpose2d,
          5: torch.nn.functional.conv_transpose3d}[x.ndim]
    want = fn(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
              torch.tensor(bias, dtype=torch.float64), stride=case["stride"],
              padding=case["padding"], output_padding=case["output_padding"],
              groups=case["groups"]).numpy()
    check(y, want, "float32")


@needs("bwd_data")
def test_conv_transpose_errors(handle):
    with pytest.raises(BadParamError, match="output_padding"):
        tridnn.conv_transpose(np.ones((1, 2, 4, 4), np.float32), np.ones((2, 1, 3, 3), np.float32),
                              stride=2, output_padding=2, handle=handle)
    with pytest.raises(BadParamError, match="channels"):
        tridnn.conv_transpose(np.ones((1, 3, 4, 4), np.float32), np.ones((2, 1, 3, 3), np.float32),
                              handle=handle)
    with pytest.raises(BadParamError, match="numeric"):
        tridnn.conv_transpose(np.ones((1, 2, 4, 4), np.float32), np.ones((2, 1, 3, 3), np.float32),
                              padding="same", handle=handle)


# -- layers: compared with PyTorch's float64 results -------------------------------------------
def torch_or_skip():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pooling_matches_torch(layout, dtype, rng, handle):
    torch = torch_or_skip()
    tf = torch.nn.functional
    x = testing.fill((2, 3, 7, 6), dtype, rng, lo=-8, hi=8, density=0.9)
    xv = in_layout(x, layout)
    t = torch.tensor(x.astype(np.float64))
    check(tridnn.functional.max_pool(xv, 3, 2, 1, handle=handle),
          tf.max_pool2d(t, 3, 2, 1).numpy(), dtype, "max")
    check(tridnn.functional.avg_pool(xv, (2, 3), (2, 1), (1, 0), handle=handle),
          tf.avg_pool2d(t, (2, 3), (2, 1), (1, 0)).numpy(), dtype, "avg")
    check(tridnn.functional.avg_pool(xv, 3, 2, 1, count_include_pad=False, handle=handle),
          tf.avg_pool2d(t, 3, 2, 1, count_include_pad=False).numpy(), dtype, "avg excl")
    check(tridnn.functional.adaptive_avg_pool(xv, (3, 2), handle=handle),
          tf.adaptive_avg_pool2d(t, (3, 2)).numpy(), dtype, "adaptive avg")
    check(tridnn.functional.adaptive_max_pool(xv, 1, handle=handle),
          tf.adaptive_max_pool2d(t, 1).numpy(), dtype, "adaptive max")
    y = tridnn.functional.max_pool(xv, 2, handle=handle)
    if layout == "NHWC":
        assert tridnn.TensorDescriptor.like(y).format == "NHWC"


def test_pool_backward_matches_torch(rng, handle):
    torch = torch_or_skip()
    x = rng.standard_normal((2, 3, 6, 5))
    dy_max = rng.standard_normal((2, 3, 4, 3))
    t = torch.tensor(x, requires_grad=True)
    out = torch.nn.functional.max_pool2d(t, 2, 2, 1)
    out.backward(torch.tensor(dy_max))
    y = tridnn.functional.max_pool(x, 2, 2, 1, handle=handle)
    dx = tridnn.functional.pool_backward(y, dy_max, x, "max", 2, 2, 1, handle=handle)
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-12)
    t.grad = None
    torch.nn.functional.adaptive_avg_pool2d(t, (2, 2)).backward(torch.ones(2, 3, 2, 2, dtype=torch.float64))
    dx = tridnn.functional.adaptive_pool_backward(np.ones((2, 3, 2, 2)), x, "average", handle=handle)
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-12)


ACTIVATIONS = [
    ("relu", {}, lambda tf, t: tf.relu(t)),
    ("relu6", {}, lambda tf, t: tf.relu6(t)),
    ("leaky_relu", dict(negative_slope=0.2), lambda tf, t: tf.leaky_relu(t, 0.2)),
    ("elu", dict(alpha=0.7), lambda tf, t: tf.elu(t, 0.7)),
    ("sigmoid", {}, lambda tf, t: tf.sigmoid(t)),
    ("tanh", {}, lambda tf, t: tf.tanh(t)),
    ("silu", {}, lambda tf, t: tf.silu(t)),
    ("gelu", {}, lambda tf, t: tf.gelu(t)),
    ("gelu", dict(approximate="tanh"), lambda tf, t: tf.gelu(t, approximate="tanh")),
    ("softplus", dict(beta=2.0), lambda tf, t: tf.softplus(t, 2.0)),
    ("hard_swish", {}, lambda tf, t: tf.hardswish(t)),
]


@pytest.mark.parametrize("name, kwargs, fn", ACTIVATIONS, ids=lambda v: v if isinstance(v, str) else "")
def test_activations_match_torch(name, kwargs, fn, rng, handle):
    torch = torch_or_skip()
    x = rng.standard_normal((2, 3, 4, 5)) * 3
    t = torch.tensor(x, requires_grad=True)
    want = fn(torch.nn.functional, t)
    y = getattr(tridnn.functional, name)(x, handle=handle, **kwargs)
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-7, atol=1e-12)
    dy = rng.standard_normal(x.shape)
    want.backward(torch.tensor(dy))
    mode, coef, beta = {
        "relu": ("relu", 0, 1), "relu6": ("clipped_relu", 6, 1), "leaky_relu": ("leaky_relu", 0.2, 1),
        "elu": ("elu", 0.7, 1), "sigmoid": ("sigmoid", 0, 1), "tanh": ("tanh", 0, 1),
        "silu": ("swish", 0, 1), "softplus": ("softplus", 2.0, 1), "hard_swish": ("hard_swish", 0, 1),
        "gelu": ("gelu_tanh" if kwargs else "gelu", 0, 1)}[name]
    dx = tridnn.functional.activation_backward(y, dy, x, mode, coef, beta, handle=handle)
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("axis", [1, -1, 0, 2])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_matches_torch(axis, log, rng, handle):
    torch = torch_or_skip()
    x = rng.standard_normal((3, 4, 5)) * 4
    t = torch.tensor(x, requires_grad=True)
    want = (torch.log_softmax if log else torch.softmax)(t, axis)
    y = (tridnn.functional.log_softmax if log else tridnn.functional.softmax)(x, axis, handle=handle)
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-10, atol=1e-12)
    dy = rng.standard_normal(x.shape)
    want.backward(torch.tensor(dy))
    dx = tridnn.functional.softmax_backward(y, dy, axis, log=log, handle=handle)
    np.testing.assert_allclose(dx, t.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_softmax_of_a_vector_and_bad_axis(handle):
    y = tridnn.functional.softmax(np.array([1.0, 2.0, 3.0], np.float32), axis=0, handle=handle)
    assert y.shape == (3,) and abs(float(y.sum()) - 1) < 1e-6
    with pytest.raises(BadParamError, match="axis"):
        tridnn.functional.softmax(np.ones((2, 3), np.float32), axis=2, handle=handle)


def test_layer_errors(handle):
    x = np.ones((1, 2, 4, 4), np.float32)
    with pytest.raises(BadParamError, match="padding"):
        tridnn.functional.max_pool(x, 2, padding=2, handle=handle)
    with pytest.raises(BadParamError, match="window"):
        tridnn.functional.max_pool(x, 0, handle=handle)
    with pytest.raises(BadParamError, match="smaller than window"):
        tridnn.functional.avg_pool(x, 5, handle=handle)
    with pytest.raises(BadParamError, match="activation mode"):
        tridnn.functional.activation(x, "wiggle", handle=handle)
    with pytest.raises(BadParamError, match="approximate"):
        tridnn.functional.gelu(x, approximate="erf", handle=handle)
    with pytest.raises(BadParamError, match="larger than the input"):
        tridnn.functional.adaptive_avg_pool(x, 5, handle=handle)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(4, 3, 5, 4), (3, 2, 5), (2, 3, 2, 3, 2)])
def test_batch_norm_matches_torch(shape, layout, rng, handle):
    torch = torch_or_skip()
    tf = torch.nn.functional
    x = rng.standard_normal(shape) * 2 + 1
    w, b = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    rm, rv = rng.standard_normal(shape[1]), rng.random(shape[1]) + 0.5
    t_rm, t_rv = torch.tensor(rm), torch.tensor(rv)
    tx = torch.tensor(x, requires_grad=True)
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    want = tf.batch_norm(tx, t_rm, t_rv, tw, tb, training=True, momentum=0.2, eps=1e-4)
    xv = in_layout(x, layout) if len(shape) == 4 else x
    y, mean, inv = tridnn.functional.batch_norm_training(xv, w, b, rm, rv, momentum=0.2, eps=1e-4,
                                                         handle=handle)
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(rm, t_rm.numpy(), rtol=1e-12)  # updated in place, unbiased var
    np.testing.assert_allclose(rv, t_rv.numpy(), rtol=1e-12)
    dy = rng.standard_normal(shape)
    want.backward(torch.tensor(dy))
    dx, dw, db = tridnn.functional.batch_norm_backward(xv, dy, w, mean, inv, eps=1e-4, handle=handle)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(dw, tw.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(db, tb.grad.numpy(), rtol=1e-8, atol=1e-10)
    inf = tridnn.functional.batch_norm(xv, rm, rv, w, b, eps=1e-4, handle=handle)
    np.testing.assert_allclose(inf, tf.batch_norm(torch.tensor(x), t_rm, t_rv, torch.tensor(w),
                                                  torch.tensor(b), eps=1e-4).numpy(), rtol=1e-10)


def test_batch_norm_float32_params_for_half_data_and_errors(rng, handle):
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float16)
    rm, rv = np.zeros(3, np.float16), np.ones(3, np.float16)  # converted, then written back
    y, _, _ = tridnn.functional.batch_norm_training(x, running_mean=rm, running_var=rv, handle=handle)
    assert y.dtype == np.float16 and abs(float(y.astype(np.float32).mean())) < 1e-2
    np.testing.assert_allclose(rm, 0.1 * x.astype(np.float64).mean(axis=(0, 2, 3)), atol=2e-3)
    with pytest.raises(BadParamError, match="one per channel"):
        tridnn.functional.batch_norm_training(x, np.ones(4, np.float32), handle=handle)
    with pytest.raises(BadParamError, match="more than one value"):
        tridnn.functional.batch_norm_training(x[:1, :, :1, :1], handle=handle)
    with pytest.raises(BadParamError, match="both"):
        tridnn.functional.batch_norm_training(x, running_mean=rm, handle=handle)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("act", ["relu", "identity", "sigmoid"])
def test_conv_bias_activation(layout, act, rng, handle):
    x = testing.fill((2, 4, 6, 5), "float32", rng)
    w = testing.fill((3, 4, 3, 3), "float32", rng)
    b = testing.fill((3,), "float32", rng)
    z = testing.fill((2, 3, 6, 5), "float32", rng)
    pre = 0.5 * reference.conv_forward(x, w, 1, 1) + 2.0 * z + b.reshape(1, 3, 1, 1)
    want = {"relu": np.maximum(pre, 0), "identity": pre, "sigmoid": 1 / (1 + np.exp(-pre))}[act]
    y = tridnn.functional.conv_bias_activation(in_layout(x, layout), w, b, in_layout(z, layout), 0.5,
                                               2.0, act, padding=1, handle=handle)
    check(y, want, "float32")
    y2 = tridnn.functional.conv_bias_activation(x, w, None, activation=act, padding=1, handle=handle)
    pre2 = reference.conv_forward(x, w, 1, 1)
    check(y2, {"relu": np.maximum(pre2, 0), "identity": pre2, "sigmoid": 1 / (1 + np.exp(-pre2))}[act],
          "float32")


def test_softmax_of_torch_tensors_along_any_axis(rng, handle):
    torch = torch_or_skip()
    x = torch.tensor(rng.standard_normal((2, 3, 4)))
    for axis in (0, 1, 2):
        y = tridnn.functional.softmax(x, axis, handle=handle)
        assert isinstance(y, torch.Tensor)
        torch.testing.assert_close(y, torch.softmax(x, axis))


def test_layer_group_rms_norm_lrn_match_torch(rng, handle):
    torch = torch_or_skip()
    tf = torch.nn.functional
    x = rng.standard_normal((2, 6, 3, 4)) * 3 + 1
    w, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    tx = torch.tensor(x, requires_grad=True)
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    want = tf.layer_norm(tx, (3, 4), tw, tb, 1e-5)
    y, mean, inv = tridnn.functional.layer_norm(x, (3, 4), w, b, return_stats=True, handle=handle)
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-10, atol=1e-12)
    dy = rng.standard_normal(x.shape)
    want.backward(torch.tensor(dy))
    dx, dw, db = tridnn.functional.layer_norm_backward(x, dy, (3, 4), w, mean, inv, handle=handle)
    for got, ref in ((dx, tx.grad), (dw, tw.grad), (db, tb.grad)):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-9, atol=1e-11)
    gw, gb = rng.standard_normal(6), rng.standard_normal(6)
    np.testing.assert_allclose(
        tridnn.functional.group_norm(x, 3, gw, gb, handle=handle),
        tf.group_norm(torch.tensor(x), 3, torch.tensor(gw), torch.tensor(gb)).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tridnn.functional.rms_norm(x, 4, w[0], eps=1e-6, handle=handle),
                               tf.rms_norm(torch.tensor(x), (4,), torch.tensor(w[0]), 1e-6).numpy(),
                               rtol=1e-10)
    np.testing.assert_allclose(tridnn.functional.lrn(x, 3, 0.5, 0.75, 1.5, handle=handle),
                               tf.local_response_norm(torch.tensor(x), 3, 0.5, 0.75, 1.5).numpy(), rtol=1e-10)
    with pytest.raises(BadParamError, match="trailing dims"):
        tridnn.functional.layer_norm(x, (4, 3), handle=handle)


def test_dropout_masks(rng, handle):
    x = np.ones((4, 5, 6), np.float32)
    y, mask = tridnn.functional.dropout(x, 0.3, seed=7, return_mask=True, handle=handle)
    kept = y != 0
    assert set(np.unique(y).tolist()) <= {0.0, np.float32(1 / 0.7)} and 0.4 < kept.mean() < 0.95
    dx = tridnn.functional.dropout_backward(np.full_like(x, 2.0), mask, 0.3, handle=handle)
    np.testing.assert_array_equal(dx, 2 * y)
    fresh = tridnn.Handle(find_cache=None)
    np.testing.assert_array_equal(tridnn.functional.dropout(x, 0.3, seed=7, handle=fresh), y)  # replay
    assert not np.array_equal(tridnn.functional.dropout(x, 0.3, seed=7, handle=handle), y)  # next mask
    assert tridnn.functional.dropout(x, 0.3, training=False, handle=handle) is x
