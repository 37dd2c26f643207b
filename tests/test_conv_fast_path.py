"""The fast path for repeated convolution calls (api/conv_fast_path.py): a call with the
same descriptor objects and algorithm as an earlier validated one skips re-validating the
problem, but every check that depends on the call's arrays and scalars still runs and
raises the same documented error before anything is written."""
from fractions import Fraction

import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.api import conv_fast_path
from tridnn.errors import BadParamError, NotInitializedError, NotSupportedError


def _setup(dtype="float32"):
    x_desc = tridnn.TensorDescriptor.nchw(2, 3, 6, 5, dtype)
    w_desc = tridnn.FilterDescriptor((4, 3, 3, 3), dtype)
    conv = tridnn.ConvolutionDescriptor(padding=1)
    y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))
    return x_desc, w_desc, conv, y_desc


def _arrays(x_desc, w_desc, y_desc, rng, dtype="float32"):
    x = testing.fill(x_desc.dims, dtype, rng)
    w = testing.fill(w_desc.dims, dtype, rng)
    y = np.full(y_desc.dims, np.nan, testing.DataType.of(dtype).numpy)
    return x, w, y


@pytest.mark.parametrize("algo", ["IMPLICIT_GEMM", "GEMM"])
def test_repeated_calls_hit_the_cache_and_stay_correct(algo, rng):
    h = tridnn.Handle(find_cache=None)
    x_desc, w_desc, conv, y_desc = _setup()
    ws_size = tridnn.get_convolution_forward_workspace_size(h, x_desc, w_desc, conv, y_desc, algo)
    ws = np.empty(ws_size, np.uint8)
    for i in range(3):
        x, w, y = _arrays(x_desc, w_desc, y_desc, rng)
        cached = conv_fast_path.lookup(h, "fwd", x_desc, w_desc, conv, y_desc, algo)
        assert (cached is not None) == (i > 0), f"call {i}: cache entry {cached}"
        tridnn.convolution_forward(h, 1.0, x_desc, x, w_desc, w, conv, algo, ws, 0.0, y_desc, y)
        testing.check_result(y, reference.conv_forward(x, w, 1, 1), "float32", True, name=f"call {i}")


def test_equal_but_distinct_descriptors_take_the_full_path(rng):
    h = tridnn.Handle(find_cache=None)
    x_desc, w_desc, conv, y_desc = _setup()
    x, w, y = _arrays(x_desc, w_desc, y_desc, rng)
    ws = h.workspace(tridnn.get_convolution_forward_workspace_size(h, x_desc, w_desc, conv, y_desc, "IMPLICIT_GEMM"))
    tridnn.convolution_forward(h, 1.0, x_desc, x, w_desc, w, conv, "IMPLICIT_GEMM", ws, 0.0, y_desc, y)
    assert conv_fast_path.lookup(h, "fwd", x_desc, w_desc, conv, y_desc, "IMPLICIT_GEMM") is not None
    other = tridnn.ConvolutionDescriptor(padding=1)
    assert conv_fast_path.lookup(h, "fwd", x_desc, w_desc, other, y_desc, "IMPLICIT_GEMM") is None
    assert conv_fast_path.lookup(tridnn.Handle(find_cache=None), "fwd", x_desc, w_desc, conv, y_desc,
                                 "IMPLICIT_GEMM") is None


def test_every_per_call_check_still_raises_before_writing(rng):
    h = tridnn.Handle(find_cache=None)
    x_desc, w_desc, conv, y_desc = _setup()
    x, w, y = _arrays(x_desc, w_desc, y_desc, rng)
    algo = "GEMM"
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(h, x_desc, w_desc, conv, y_desc, algo), np.uint8)
    call = lambda **kw: tridnn.convolution_forward(h, kw.get("alpha", 1.0), x_desc, kw.get("x", x), w_desc, w, conv,
                                                   algo, kw.get("ws", ws), kw.get("beta", 0.0), y_desc,
                                                   kw.get("y", y))
    call()
    assert conv_fast_path.lookup(h, "fwd", x_desc, w_desc, conv, y_desc, algo) is not None
    y[...] = 7.0
    with pytest.raises(BadParamError, match="alpha"):
        call(alpha=float("nan"))
    with pytest.raises(BadParamError, match="beta"):
        call(beta="1")
    with pytest.raises(BadParamError, match="dtype"):
        call(x=x.astype(np.float16))
    with pytest.raises(BadParamError, match="does not match its descriptor"):
        call(x=np.zeros((2, 3, 6, 6), np.float32))
    shared = np.zeros(400, np.float32)
    with pytest.raises(BadParamError, match="overlaps"):
        call(x=shared[:180].reshape(x_desc.dims), y=shared[100:340].reshape(y_desc.dims))
    with pytest.raises(BadParamError, match="workspace of"):
        call(ws=ws[:-100])
    ro = y.copy()
    ro.flags.writeable = False
    with pytest.raises(BadParamError, match="read-only"):
        call(y=ro)
    assert np.all(y == 7.0), "y was modified before an error"
    h.destroy()
    with pytest.raises(NotInitializedError):
        call()
    assert np.all(y == 7.0)


def test_determinism_flag_is_part_of_the_key(rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    x_desc = tridnn.TensorDescriptor.nhwc(1, 2, 4, 4)
    w_desc = tridnn.FilterDescriptor((2, 2, 3, 3))
    conv = tridnn.ConvolutionDescriptor(padding=1)
    y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))
    x = torch.zeros(1, 2, 4, 4).contiguous(memory_format=torch.channels_last)
    dy = torch.ones(1, 2, 4, 4).contiguous(memory_format=torch.channels_last)
    dw = torch.zeros(2, 2, 3, 3)
    ws = torch.empty(tridnn.get_convolution_backward_filter_workspace_size(h, x_desc, y_desc, conv, w_desc,
                                                                           "ALGO_0"), dtype=torch.uint8)
    tridnn.convolution_backward_filter(h, 1.0, x_desc, x, y_desc, dy, conv, "ALGO_0", ws, 0.0, w_desc, dw)
    h.deterministic = True
    with pytest.raises(NotSupportedError, match="deterministic"):
        tridnn.convolution_backward_filter(h, 1.0, x_desc, x, y_desc, dy, conv, "ALGO_0", ws, 0.0, w_desc, dw)


def test_triton_repeated_calls_with_new_tensors(rng):
    """On the Triton backend the cached launch arguments are reused with each call's tensors."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    x_desc = tridnn.TensorDescriptor.nhwc(2, 4, 5, 5)
    w_desc = tridnn.FilterDescriptor((8, 4, 3, 3), "float32", tridnn.TensorFormat.NHWC)
    conv = tridnn.ConvolutionDescriptor(padding=1, stride=2)
    y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))
    cl = torch.channels_last
    for i in range(3):
        xv, wv = testing.fill(x_desc.dims, "float32", rng), testing.fill(w_desc.dims, "float32", rng)
        x = torch.from_numpy(xv).contiguous(memory_format=cl)
        w = torch.from_numpy(wv).contiguous(memory_format=cl)
        y = torch.full(y_desc.dims, float("nan")).contiguous(memory_format=cl)
        prior = torch.from_numpy(testing.fill(y_desc.dims, "float32", rng))
        y.copy_(prior)
        tridnn.convolution_forward(h, 2.0, x_desc, x, w_desc, w, conv, "IMPLICIT_GEMM", None, 0.5 * i, y_desc, y)
        testing.check_result(y.numpy(), reference.conv_forward(xv, wv, 2, 1), "float32", True, 2.0, 0.5 * i,
                             prior.numpy(), name=f"call {i}")
    # the cached entry's quick checks still reject what the full path rejects
    assert conv_fast_path.lookup(h, "fwd", x_desc, w_desc, conv, y_desc, "IMPLICIT_GEMM") is not None
    y.fill_(7.0)
    call = lambda **kw: tridnn.convolution_forward(h, 1.0, x_desc, kw.get("x", x), w_desc, w, conv, "IMPLICIT_GEMM",
                                                   None, 0.0, y_desc, kw.get("y", y))
    big = torch.zeros(4 * 2 * 5 * 5 * 8)
    with pytest.raises(BadParamError, match="overlaps"):
        call(x=big[:200].view(2, 5, 5, 4).permute(0, 3, 1, 2), y=big[100:100 + 2 * 3 * 3 * 8].view(2, 3, 3, 8)
             .permute(0, 3, 1, 2))
    with pytest.raises(BadParamError, match="dtype"):
        call(x=x.half())
    with pytest.raises(BadParamError, match="does not match its descriptor"):
        call(y=y.contiguous())
    with pytest.raises(BadParamError, match="torch tensor"):
        call(x=[1, 2])
    assert bool((y == 7.0).all()), "y was modified before an error"


def test_triton_quick_check_learns_strides_of_unit_dimensions(rng):
    """A [K, 1, 3, 3] channels-last filter: torch's strides (9, 9, 3, 1) differ from the
    descriptor's (9, 1, 3, 1) only on the size-1 dimension, which the general check accepts;
    after one such call the quick check accepts them too (no general check), while a filter
    whose other strides differ is still rejected with the general check's error."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    x_desc = tridnn.TensorDescriptor.nhwc(1, 4, 5, 5)
    w_desc = tridnn.FilterDescriptor((4, 1, 3, 3), "float32", tridnn.TensorFormat.NHWC)
    conv = tridnn.ConvolutionDescriptor(padding=1, groups=4)
    y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))
    cl = torch.channels_last
    x = torch.from_numpy(testing.fill(x_desc.dims, "float32", rng)).contiguous(memory_format=cl)
    w = torch.from_numpy(testing.fill(w_desc.dims, "float32", rng)).contiguous(memory_format=cl)
    y = torch.zeros(y_desc.dims).contiguous(memory_format=cl)
    assert w.stride() != tuple(w_desc.as_tensor().strides)
    general = []
    real_view = h.backend.view
    h.backend.view = lambda *a, **k: general.append(a[2]) or real_view(*a, **k)
    try:
        for _ in range(3):
            tridnn.convolution_forward(h, 1.0, x_desc, x, w_desc, w, conv, "DIRECT", None, 0.0, y_desc, y)
        # the full first call checks all three; the first repeat checks w in general, once
        assert general == ["x", "w", "y", "w"], general
        with pytest.raises(BadParamError, match="does not match its descriptor"):
            tridnn.convolution_forward(h, 1.0, x_desc, x, w_desc, w.permute(0, 1, 3, 2), conv, "DIRECT", None, 0.0,
                                       y_desc, y)
    finally:
        del h.backend.view
    want = reference.conv_forward(x.numpy(), w.numpy(), 1, 1, groups=4)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_triton_repeated_calls_check_the_workspace(rng):
    """The Triton fast path reads the workspace's size and address without its byte view
    (workspace_extent): a too-small, non-contiguous or non-tensor workspace on a repeat still
    raises the full path's error, before anything is written."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    x_desc = tridnn.TensorDescriptor.nchw(2, 4, 5, 5)
    w_desc = tridnn.FilterDescriptor((6, 4, 3, 3), "float32")
    conv = tridnn.ConvolutionDescriptor(padding=1)
    y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))
    x = torch.from_numpy(testing.fill(x_desc.dims, "float32", rng))
    dy = torch.from_numpy(testing.fill(y_desc.dims, "float32", rng))
    dw = torch.zeros(w_desc.dims)
    need = tridnn.get_convolution_backward_filter_workspace_size(h, x_desc, y_desc, conv, w_desc, "ALGO_0")
    assert need > 0
    ws = torch.zeros(need, dtype=torch.uint8)
    call = lambda workspace: tridnn.convolution_backward_filter(h, 1.0, x_desc, x, y_desc, dy, conv, "ALGO_0",
                                                                workspace, 0.0, w_desc, dw)
    for _ in range(3):  # the full path, then two repeats (the second asks for a replay)
        call(ws)
    want = reference.conv_backward_filter(x.numpy(), dy.numpy(), w_desc.dims, 1, 1)
    np.testing.assert_allclose(dw.numpy(), want, rtol=1e-4, atol=1e-4)
    dw.fill_(7.0)
    with pytest.raises(BadParamError, match="workspace of"):
        call(ws[:need - 1])
    with pytest.raises(BadParamError, match="contiguous"):
        call(torch.zeros(2 * need, dtype=torch.uint8)[::2])
    with pytest.raises(BadParamError, match="workspace"):
        call([0] * need)
    assert bool((dw == 7.0).all()), "dw was modified before an error"


def test_triton_quick_check_answers_only_exact_matches():
    """TritonBackend.quick_check: the addresses of three tensors exactly as validated, and
    None (the general checks run) for any difference or an output overlapping an input."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    x_desc, w_desc, conv, y_desc = _setup()
    metas = tuple(h.backend.view_meta(d) for d in (x_desc, w_desc.as_tensor(), y_desc))
    check = h.backend.quick_check(metas, 2)
    x, w, y = torch.zeros(x_desc.dims), torch.zeros(w_desc.dims), torch.zeros(y_desc.dims)
    assert check(x, w, y) == (x.data_ptr(), w.data_ptr(), y.data_ptr())
    different = {"dtype": x.double(), "shape": torch.zeros(2, 3, 6, 6)[..., :5].contiguous()[:, :, :5],
                 "strides": torch.zeros(x_desc.dims).contiguous(memory_format=torch.channels_last),
                 "device": torch.zeros(x_desc.dims, device="meta"), "type": x.numpy()}
    for what, other in different.items():
        assert check(other, w, y) is None, what
        assert check(x, w, other if what != "shape" else torch.zeros(2, 4, 6, 6)) is None, what
    shared = torch.zeros(1000)
    xs, ys = shared[:x.numel()].view(x_desc.dims), shared[x.numel() - 1:x.numel() - 1 + y.numel()].view(y_desc.dims)
    assert check(xs, w, ys) is None, "an output overlapping x by one element"
    ys = shared[x.numel():x.numel() + y.numel()].view(y_desc.dims)
    assert check(xs, w, ys) == (xs.data_ptr(), w.data_ptr(), ys.data_ptr()), "adjacent, not overlapping"
    # the output's index decides which overlaps count: as backward data (x written), w and y are inputs
    check_dx = h.backend.quick_check(metas, 0)
    assert check_dx(xs, w, ys) == (xs.data_ptr(), w.data_ptr(), ys.data_ptr())
    ys = shared[x.numel() - 1:x.numel() - 1 + y.numel()].view(y_desc.dims)
    assert check_dx(xs, w, ys) is None


@pytest.mark.parametrize("backend", ["numpy", "triton"])
def test_repeated_calls_take_every_kind_of_real_scalar(backend, rng):
    """alpha/beta on a repeat: ints, numpy scalars and floats run; inf, nan, strings and
    ints past float's range raise the full path's errors, before y is written."""
    if backend == "triton":
        torch = pytest.importorskip("torch")
        pytest.importorskip("triton")
    h = tridnn.Handle(device="cpu", backend=backend, find_cache=None)
    x_desc, w_desc, conv, y_desc = _setup()
    x, w, _ = _arrays(x_desc, w_desc, y_desc, rng)
    prior = testing.fill(y_desc.dims, "float32", rng)
    want = reference.conv_forward(x, w, 1, 1)
    ws = h.workspace(tridnn.get_convolution_forward_workspace_size(h, x_desc, w_desc, conv, y_desc, "IMPLICIT_GEMM"))
    if backend == "triton":
        x, w = torch.from_numpy(x), torch.from_numpy(w)
    for i, (alpha, beta) in enumerate([(1.0, 0.0), (2, 1), (np.float32(0.5), np.float64(0.25)), (1.5, -1.0)]):
        y = np.array(prior) if backend == "numpy" else torch.from_numpy(np.array(prior))
        tridnn.convolution_forward(h, alpha, x_desc, x, w_desc, w, conv, "IMPLICIT_GEMM", ws, beta, y_desc, y)
        got = y if backend == "numpy" else y.numpy()
        testing.check_result(got, want, "float32", True, float(alpha), float(beta), prior, name=f"call {i}")
    y.fill(7.0) if backend == "numpy" else y.fill_(7.0)
    for bad, match in [(float("inf"), "finite"), (float("nan"), "finite"), ("1", "string"), (10 ** 400, "finite"),
                       (Fraction(10 ** 400, 3), "finite"), (None, "real number")]:
        for name in ("alpha", "beta"):
            args = {"alpha": 1.0, "beta": 0.0, name: bad}
            with pytest.raises(BadParamError, match=f"{name} must be .*{match}"):
                tridnn.convolution_forward(h, args["alpha"], x_desc, x, w_desc, w, conv, "IMPLICIT_GEMM", ws,
                                           args["beta"], y_desc, y)
    got = y if backend == "numpy" else y.numpy()
    assert np.all(got == 7.0), "y was written before a scalar error"


def test_destroy_drops_the_handles_validated_calls(rng):
    h = tridnn.Handle(find_cache=None)
    x_desc, w_desc, conv, y_desc = _setup()
    x, w, y = _arrays(x_desc, w_desc, y_desc, rng)
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(h, x_desc, w_desc, conv, y_desc, "GEMM"), np.uint8)
    tridnn.convolution_forward(h, 1.0, x_desc, x, w_desc, w, conv, "GEMM", ws, 0.0, y_desc, y)
    assert conv_fast_path.lookup(h, "fwd", x_desc, w_desc, conv, y_desc, "GEMM") is not None
    h.destroy()
    assert h.conv_calls is None
    with pytest.raises(NotInitializedError):
        tridnn.convolution_forward(h, 1.0, x_desc, x, w_desc, w, conv, "GEMM", ws, 0.0, y_desc, y)
