"""The functional API's per-signature recipes (api/layer_recipes.py) never hand back a
stale result: a repeat call with other strides, dtype, parameters or data computes
afresh, and what the full path refuses is still refused on a repeat."""
import gc

import pytest
import torch

import tridnn
import tridnn.functional as TF
from tridnn.api import functional as api_functional
from tridnn.api import layer_recipes as recipes
from tridnn.errors import BadParamError


@pytest.fixture
def h():
    handle = tridnn.Handle(device="cpu", backend="triton")
    yield handle
    api_functional.clear_plan_cache(handle)


def _leaky(x, slope):
    x = x.double()
    return torch.where(x > 0, x, x * slope)


def _close(got, want, dtype):
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_repeat_calls_follow_strides_dtype_and_coef(h):
    torch.manual_seed(0)
    base = torch.randn(2, 3, 4, 5)
    cases = [(base, 0.1), (base.contiguous(memory_format=torch.channels_last), 0.1),
             (base.double(), 0.1), (base, 0.2), (base.transpose(2, 3), 0.1), (base, 0.1)]
    for _ in range(2):  # the second round hits the recipes the first round left
        for x, slope in cases:
            y = TF.activation(x, "leaky_relu", slope, handle=h)
            assert y.dtype == x.dtype and y.shape == x.shape
            assert (y.stride() == x.stride()) == (x.is_contiguous() or x.is_contiguous(
                memory_format=torch.channels_last))
            _close(y, _leaky(x, slope), x.dtype)


def test_new_data_at_a_reused_address(h):
    for seed in range(4):  # each x is freed before the next is allocated (often at the same address)
        torch.manual_seed(seed)
        x = torch.randn(2, 8, 4, 4)
        y = TF.activation(x, "relu", handle=h)
        _close(y, x.double().clamp_min(0), x.dtype)
        dy = torch.randn(2, 8, 4, 4)
        dx = TF.activation_backward(y, dy, x, "relu", handle=h)
        _close(dx, torch.where(x > 0, dy, 0).double(), x.dtype)
        del x, y, dy, dx
        gc.collect()


def test_backward_follows_each_operand_signature(h):
    torch.manual_seed(1)
    x = torch.randn(2, 3, 4, 4)
    y = TF.activation(x, "sigmoid", handle=h)
    for dy in (torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4).contiguous(memory_format=torch.channels_last),
               torch.randn(2, 3, 4, 8)[..., ::2], torch.randn(2, 3, 4, 4)):
        for _ in range(2):
            dx = TF.activation_backward(y, dy, x, "sigmoid", handle=h)
            s = torch.sigmoid(x.double())
            _close(dx, dy.double() * s * (1 - s), x.dtype)


def test_refused_parameters_stay_refused(h):
    x = torch.randn(2, 3, 4)
    TF.activation(x, 1, handle=h)  # mode 1 (RELU) is accepted and leaves a recipe
    TF.activation(x, 1, handle=h)
    with pytest.raises(BadParamError):
        TF.activation(x, True, handle=h)  # equal to 1 and hashes alike, but not a mode
    for _ in range(2):
        with pytest.raises(BadParamError):
            TF.activation(x, "clipped_relu", float("nan"), handle=h)
    with pytest.raises(BadParamError):
        TF.activation(x, "relu", [0.0], handle=h)  # unhashable: the full path names it


def test_destroyed_handle_is_refused_on_a_repeat():
    handle = tridnn.Handle(device="cpu", backend="triton")
    x = torch.randn(2, 3, 4)
    TF.activation(x, "relu", handle=handle)
    TF.activation(x, "relu", handle=handle)
    handle.destroy()
    with pytest.raises(tridnn.errors.TridnnError):
        TF.activation(x, "relu", handle=handle)


def _bn_reference(x, w, b, eps):
    x = x.double()
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    var = x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    shape = (1, -1, 1, 1)
    return (x - mean) / torch.sqrt(var + eps) * w.double().reshape(shape) + b.double().reshape(shape)


def test_batch_norm_layouts_repeat_without_stale_geometry(h):
    """cuda/batchnorm.py keeps each signature's geometry: NCHW, channels_last, a view whose
    spatial dims do not merge (staged) and a strided weight (copied) share the shape."""
    torch.manual_seed(2)
    base = torch.randn(2, 3, 4, 6)
    w, b = torch.randn(3), torch.randn(3)
    xs = [base, base.contiguous(memory_format=torch.channels_last), torch.randn(2, 3, 4, 12)[..., ::2],
          base.double()]
    for _ in range(2):
        for x in xs:
            for weight in (w, torch.randn(6)[::2]):
                ww, bb = weight.to(x.dtype), b.to(x.dtype)
                rm, rv = torch.zeros(3, dtype=ww.dtype), torch.ones(3, dtype=ww.dtype)
                y, mean, inv = TF.batch_norm_training(x, ww, bb, rm, rv, 0.1, 1e-5, handle=h)
                _close(y, _bn_reference(x, ww, bb, 1e-5), x.dtype)
                _close(rm, 0.1 * x.double().mean(dim=(0, 2, 3)), x.dtype)
                dy = torch.randn_like(x)
                dx, dw, db = TF.batch_norm_backward(x, dy, ww, mean, inv, 1e-5, handle=h)
                xr = x.detach().double().clone().requires_grad_(True)
                wr, br = (t.detach().double().clone().requires_grad_(True) for t in (ww, bb))
                _bn_reference(xr, wr, br, 1e-5).backward(dy.double())
                tol = dict(rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(dx.double(), xr.grad, **tol, msg=lambda m: f"{x.stride()} {weight.stride()} {x.dtype}: {m}")
                torch.testing.assert_close(dw.double(), wr.grad, **tol)
                torch.testing.assert_close(db.double(), br.grad, **tol)


# -- convolution recipes (functional conv / conv_backward_data / conv_backward_filter) --------------
def _full_path(fn, *args, **kwargs):
    """``fn`` on a fresh handle: no plan, no recipe, the full path."""
    fresh = tridnn.Handle(device="cpu", backend="triton")
    try:
        return fn(*args, handle=fresh, **kwargs)
    finally:
        api_functional.clear_plan_cache(fresh)


def _same(a, b):
    assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
    assert torch.equal(a, b)


def _conv_cases():
    g = torch.Generator().manual_seed(5)
    cl = torch.channels_last
    x = torch.randn(2, 4, 5, 5, generator=g)
    w = torch.randn(4, 4, 3, 3, generator=g)
    w2 = torch.randn(4, 2, 3, 3, generator=g)
    b = torch.randn(4, generator=g)
    return [  # (x, w, bias, stride, padding, dilation, groups, mode)
        (x, w, None, 1, 1, 1, 1, "cross_correlation"),
        (x.contiguous(memory_format=cl), w.contiguous(memory_format=cl), None, 1, 1, 1, 1, "cross_correlation"),
        (x, w, b, 1, 1, 1, 1, "cross_correlation"),
        (x, w, None, 2, 1, 1, 1, "cross_correlation"),
        (x, w, None, [1, 2], "same", 1, 1, "cross_correlation"),
        (x, w, None, 1, ((1, 0), (0, 1)), 1, 1, "cross_correlation"),
        (x, w, None, 1, 2, 2, 1, "cross_correlation"),
        (x, w2, None, 1, 1, 1, 2, "cross_correlation"),
        (x, w, None, 1, 1, 1, 1, "convolution"),
        (x.half(), w.half(), None, 1, 1, 1, 1, "cross_correlation"),
        (x.transpose(2, 3), w, None, 1, 1, 1, 1, "cross_correlation"),
    ]


def test_conv_recipes_are_bit_identical_to_the_full_path_and_follow_every_change(h):
    """Two rounds over convolutions that differ in one thing each (layout, bias, stride,
    padding, dilation, groups, mode, dtype, strides): the second round runs the recipes
    the first left, and every direction equals the full path's result bit for bit, and
    PyTorch's in float64."""
    F = torch.nn.functional
    for _ in range(2):
        for x, w, b, stride, padding, dilation, groups, mode in _conv_cases():
            args = (stride, padding, dilation, groups, mode)
            y = TF.conv(x, w, b, *args, handle=h)
            _same(y, _full_path(TF.conv, x, w, b, *args))
            pads = api_functional.padding_pairs(padding, 2, x.shape[2:], w.shape[2:],
                                                (stride,) * 2 if isinstance(stride, int) else stride,
                                                (dilation, dilation))
            wr = w.double().flip(2, 3) if mode == "convolution" else w.double()
            xr = F.pad(x.double(), (pads[0][1], pads[1][1], pads[0][0], pads[1][0]))
            ref = F.conv2d(xr, wr, None if b is None else b.double(), stride, 0, dilation, groups)
            tol = 2e-3 if x.dtype == torch.float16 else 2e-5
            torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)
            dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(6), dtype=y.dtype)
            dx = TF.conv_backward_data(dy, w, x.shape, *args, handle=h)
            _same(dx, _full_path(TF.conv_backward_data, dy, w, x.shape, *args))
            dw = TF.conv_backward_filter(x, dy, w.shape, *args, handle=h)
            _same(dw, _full_path(TF.conv_backward_filter, x, dy, w.shape, *args))
    kinds = {k[0] for k in api_functional._plan_table(h) if isinstance(k, tuple) and k[0] in (
        "conv", "bwd_data", "bwd_filter") and isinstance(api_functional._plan_table(h)[k], recipes.Conv)}
    assert kinds == {"conv", "bwd_data", "bwd_filter"}  # the recipes were kept and taken


def test_conv_recipe_reads_new_data_and_follows_in_place_changes(h):
    g = torch.Generator().manual_seed(7)
    w = torch.randn(3, 2, 3, 3, generator=g)
    b = torch.randn(3, generator=g)
    for step in range(4):
        x = torch.randn(2, 2, 4, 4, generator=g)
        y = TF.conv(x, w, b, 1, 1, handle=h)
        _same(y, _full_path(TF.conv, x, w, b, 1, 1))
        w.mul_(-0.5)  # the parameters change in place between calls (an optimizer step)
        b.add_(1.0)
        del x, y
        gc.collect()


def test_conv_recipe_follows_the_handle_settings(h):
    g = torch.Generator().manual_seed(8)
    x, w = torch.randn(2, 3, 5, 5, generator=g), torch.randn(3, 3, 3, 3, generator=g)
    TF.conv(x, w, None, 1, 1, handle=h)
    TF.conv(x, w, None, 1, 1, handle=h)
    h.workspace_limit = 0  # a different plan key: the recipe of the old limit must not answer
    y = TF.conv(x, w, None, 1, 1, handle=h)
    fresh = tridnn.Handle(device="cpu", backend="triton", workspace_limit=0)
    _same(y, TF.conv(x, w, None, 1, 1, handle=fresh))
    keys = [k for k in api_functional._plan_table(h) if isinstance(k, tuple) and k[0] == "conv"]
    assert {k[-2] for k in keys} == {0, tridnn.Handle(device="cpu", backend="triton").workspace_limit}


def test_conv_refused_parameters_stay_refused_on_a_repeat(h):
    x, w = torch.randn(2, 3, 5, 5), torch.randn(3, 3, 3, 3)
    for _ in range(2):
        TF.conv(x, w, None, 1, 1, handle=h)
        TF.conv_backward_data(torch.randn(2, 3, 5, 5), w, x.shape, 1, 1, handle=h)
    for stride in (1.0, True, [1.0, 1]):  # equal to 1 and hash alike, but not strides
        with pytest.raises(BadParamError):
            TF.conv(x, w, None, stride, 1, handle=h)
        with pytest.raises(BadParamError):
            TF.conv_backward_data(torch.randn(2, 3, 5, 5), w, x.shape, stride, 1, handle=h)
    with pytest.raises(BadParamError):
        TF.conv(x, w, torch.randn(2), 1, 1, handle=h)  # a bias of the wrong size
    with pytest.raises(BadParamError):
        TF.conv(x, w[:, :2], None, 1, 1, handle=h)  # channels that do not match


def test_conv_parameters_that_can_change_in_place_keep_no_recipe(h):
    x, w = torch.randn(2, 2, 4, 4), torch.randn(2, 2, 3, 3)
    stride = torch.tensor(1)  # a 0-d tensor: mutable, so never part of a key
    for _ in range(2):
        y = TF.conv(x, w, None, 1, 1, handle=h)
    assert recipes.frozen((stride,)) is None
    assert recipes.frozen(([1, 2], ((1, 0), (0, 1)), 2, "x", None)) is not None
    assert recipes.frozen((1,)) != recipes.frozen((1.0,)) != recipes.frozen((True,))
    _same(y, _full_path(TF.conv, x, w, None, 1, 1))


def test_conv_recipe_recarves_a_new_arena_and_per_thread(h):
    """The recipe keeps its workspace views per arena: a grown arena and another thread's
    arena are carved afresh, and results stay equal to the full path."""
    import threading
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 4, 6, 6, generator=g).contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 4, 3, 3, generator=g).contiguous(memory_format=torch.channels_last)
    want = _full_path(TF.conv, x, w, None, 1, 1)
    for _ in range(2):
        _same(TF.conv(x, w, None, 1, 1, handle=h), want)
    recipe = [r for r in api_functional._plan_table(h).values() if isinstance(r, recipes.Conv)]
    assert len(recipe) == 1
    recipe = recipe[0]
    old = h.workspace(1)
    h.workspace(old.numel() + 4096)  # the arena grows: a new tensor
    _same(TF.conv(x, w, None, 1, 1, handle=h), want)
    if recipe.buffers:
        assert recipe.carved[0]() is h.workspace(1) and recipe.carved[0]() is not old
    out = []
    t = threading.Thread(target=lambda: out.append(TF.conv(x, w, None, 1, 1, handle=h)))
    t.start()
    t.join()
    _same(out[0], want)
    _same(TF.conv(x, w, None, 1, 1, handle=h), want)
