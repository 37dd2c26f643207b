"""The functional API's per-signature recipes (api/layer_recipes.py) never hand back a
stale result: a repeat call with other strides, dtype, parameters or data computes
afresh, and what the full path refuses is still refused on a repeat."""
import gc

import pytest
import torch

import tridnn
import tridnn.functional as TF
from tridnn.api import functional as api_functional
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
