"""Routing of NHWC reductions, global / adaptive average pooling and batch-norm training to
gluon_stream's TMA kernels on Hopper GPUs (tensor_ops.gluon_route, batchnorm.gluon_stats_route,
batchnorm.gluon_apply_route).

- CPU: the routing decisions (the device check patched: ``gluon_device_ok``), the finish
  kernel's alpha/beta/mean blend in the interpreter against float64, and that under the
  interpreter nothing is routed (the Triton kernels run as before);
- GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu -m gpu tests/test_gluon_stream_routing.py``): through
  the public API against float64, checking that the Gluon path ran (or, for the cases it
  does not take, that it did not).
"""
import os

import numpy as np
import pytest
import torch

import tridnn
from tridnn import BatchNormMode, BatchNormOps, PoolingDescriptor, PoolingMode, ReduceTensorDescriptor
from tridnn.cuda import batchnorm, tensor_ops
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode

gs = pytest.importorskip("tridnn.cuda.gluon_stream", reason="Triton without Gluon")
CL = torch.channels_last


def _nhwc(n, c, h, w, dtype=torch.bfloat16):
    return torch.zeros(n, c, h, w, dtype=dtype).contiguous(memory_format=CL)


@pytest.fixture
def hopper(monkeypatch):
    """Pretend the device is a Hopper GPU (the decisions only; nothing is launched)."""
    monkeypatch.setattr(tensor_ops, "gluon_device_ok", lambda device: True)


def _reduce(h, op, alpha, xd, x, beta, cd, c):
    """tridnn.reduce_tensor with the workspace it asks for."""
    desc = ReduceTensorDescriptor(op)
    size = tridnn.get_reduction_workspace_size(h, desc, xd, cd)
    ws = torch.empty(max(size, 1), dtype=torch.uint8, device=x.device)
    tridnn.reduce_tensor(h, desc, None, ws, alpha, xd, x, beta, cd, c)


# -- CPU: routing decisions ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_reduce_routes_nhwc_sums_over_hw(hopper, dtype):
    x = _nhwc(2, 256, 7, 7, dtype)
    c = torch.zeros(2, 256, 1, 1, dtype=dtype)
    for op in (tensor_ops.RED_ADD, tensor_ops.RED_AVG):
        assert tensor_ops.gluon_route(x, c, op)
        assert tensor_ops.gluon_route(x, c.contiguous(memory_format=CL), op)  # same [N, C] memory
    for op in (tensor_ops.RED_MUL, tensor_ops.RED_MAX, tensor_ops.RED_MIN, tensor_ops.RED_AMAX,
               tensor_ops.RED_NORM1, tensor_ops.RED_NORM2, tensor_ops.RED_MUL_NO_ZEROS):
        assert not tensor_ops.gluon_route(x, c, op)


def test_reduce_odd_channels_route_when_rows_fit(hopper):
    # C = 3 bf16: 8 pixels a 16-byte row, so H*W must be a multiple of 8
    assert tensor_ops.gluon_route(_nhwc(2, 3, 13, 16), torch.zeros(2, 3, 1, 1, dtype=torch.bfloat16), 0)
    assert not tensor_ops.gluon_route(_nhwc(2, 3, 5, 5), torch.zeros(2, 3, 1, 1, dtype=torch.bfloat16), 0)
    # C = 200 bf16: 400-byte pixels, any H*W
    assert tensor_ops.gluon_route(_nhwc(2, 200, 9, 11), torch.zeros(2, 200, 1, 1, dtype=torch.bfloat16), 0)
    # C = 3 float32: 4 pixels a row
    assert tensor_ops.gluon_route(_nhwc(2, 3, 4, 5, torch.float32), torch.zeros(2, 3, 1, 1), 0)
    assert not tensor_ops.gluon_route(_nhwc(2, 3, 3, 5, torch.float32), torch.zeros(2, 3, 1, 1), 0)


def test_reduce_falls_back(hopper, monkeypatch):
    bf = torch.bfloat16
    x = _nhwc(2, 64, 8, 8)
    c = torch.zeros(2, 64, 1, 1, dtype=bf)
    assert not tensor_ops.gluon_route(x.contiguous(), c, 0), "NCHW"
    assert not tensor_ops.gluon_route(x.double(), c.double(), 0), "float64"
    assert not tensor_ops.gluon_route(_nhwc(2, 64, 8, 16)[:, :, :, ::2], c, 0), "not dense"
    assert not tensor_ops.gluon_route(_nhwc(2, 128, 8, 8)[:, :64], c, 0), "channel slice"
    assert not tensor_ops.gluon_route(x, torch.zeros(1, 64, 1, 1, dtype=bf), 0), "over N, H, W"
    assert not tensor_ops.gluon_route(x, torch.zeros(2, 64, 8, 1, dtype=bf), 0), "over W only"
    assert not tensor_ops.gluon_route(x, torch.zeros(2, 1, 1, 1, dtype=bf), 0), "over C, H, W"
    assert not tensor_ops.gluon_route(x, torch.zeros(2, 128, 1, 1, dtype=bf)[:, ::2], 0), "c strided"
    assert not tensor_ops.gluon_route(_nhwc(2, 64, 1, 1), c, 0), "nothing to reduce"
    x5 = torch.zeros(2, 64, 2, 4, 4, dtype=bf).contiguous(memory_format=torch.channels_last_3d)
    assert not tensor_ops.gluon_route(x5, torch.zeros(2, 64, 1, 1, 1, dtype=bf), 0), "5-D"
    flat = torch.zeros(2 * 64 * 64 + 1, dtype=bf)
    odd = flat[1:].view(2, 8, 8, 64).permute(0, 3, 1, 2)  # dense NHWC, 2 bytes off 16
    assert odd.is_contiguous(memory_format=CL) and not tensor_ops.gluon_route(odd, c, 0), "misaligned"
    monkeypatch.setattr(tensor_ops, "GLUON_STREAM", False)
    assert not tensor_ops.gluon_route(x, c, 0), "switched off"


def test_device_check():
    assert not tensor_ops.gluon_device_ok(torch.device("cpu"))
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert not tensor_ops.gluon_route(_nhwc(2, 64, 8, 8), torch.zeros(2, 64, 1, 1, dtype=torch.bfloat16), 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_batch_norm_routes(hopper, dtype):
    x = _nhwc(4, 64, 9, 11, dtype)
    y = torch.empty_like(x)
    assert batchnorm.gluon_stats_route(x, batchnorm.SPATIAL)
    assert batchnorm.gluon_stats_route(x, batchnorm.SPATIAL_PERSISTENT)
    assert not batchnorm.gluon_stats_route(x, batchnorm.PER_ACTIVATION)
    for ops in (batchnorm.NORM, batchnorm.NORM_ACTIVATION):
        assert batchnorm.gluon_apply_route(x, y, ops, 1.0, 0.0)
        assert not batchnorm.gluon_apply_route(x, y, ops, 0.5, 0.0), "alpha"
        assert not batchnorm.gluon_apply_route(x, y, ops, 1.0, 1.0), "beta"
        assert not batchnorm.gluon_apply_route(x, y.contiguous(), ops, 1.0, 0.0), "y NCHW"
    assert not batchnorm.gluon_apply_route(x, y, batchnorm.NORM_ADD_ACTIVATION, 1.0, 0.0), "z"
    assert batchnorm.gluon_apply_route(x, x, batchnorm.NORM, 1.0, 0.0), "in place"


def test_batch_norm_falls_back(hopper, monkeypatch):
    S = batchnorm.SPATIAL
    assert not batchnorm.gluon_stats_route(_nhwc(4, 64, 8, 8, torch.float32), S), "float32"
    assert not batchnorm.gluon_stats_route(_nhwc(4, 3, 8, 8), S), "C = 3: 8 pixels a TMA row"
    assert not batchnorm.gluon_stats_route(_nhwc(4, 100, 8, 8), S), "C = 100: 2 pixels a TMA row"
    assert batchnorm.gluon_stats_route(_nhwc(4, 200, 8, 8), S)
    assert not batchnorm.gluon_stats_route(_nhwc(4, 64, 8, 8).contiguous(), S), "NCHW"
    assert not batchnorm.gluon_stats_route(torch.zeros(4, 64, dtype=torch.bfloat16), S), "2-D"
    monkeypatch.setattr(batchnorm, "GLUON_STREAM", False)
    assert not batchnorm.gluon_stats_route(_nhwc(4, 64, 8, 8), S), "switched off"


def test_training_plan_leaves_routed_calls_to_the_launcher(hopper):
    """The layer recipes' fast path (training_plan) must not bypass the Gluon route."""
    x = _nhwc(2, 64, 4, 4)
    y = torch.empty_like(x)
    p = [torch.ones(64) for _ in range(6)]
    assert batchnorm.training_plan(x, y, *p, batchnorm.SPATIAL, 0.1, 1e-5) is None


def test_training_plan_unchanged_without_the_route():
    x = _nhwc(2, 64, 4, 4, torch.float32)
    y = torch.empty_like(x)
    p = [torch.ones(64) for _ in range(6)]
    assert batchnorm.training_plan(x, y, *p, batchnorm.SPATIAL, 0.1, 1e-5) is not None


# -- CPU (interpreter): the finish kernel's blend ------------------------------------------------
@pytest.mark.parametrize("alpha,beta,mean", [(1.0, 0.0, False), (0.5, 2.0, False), (1.0, 0.0, True),
                                             (-1.5, 0.25, True)])
@pytest.mark.parametrize("shape", [(2, 3, 4, 8), (3, 40, 5, 7)], ids=lambda s: "x".join(map(str, s)))
def test_finish_blend_against_float64(shape, alpha, beta, mean):
    """Per-image partials [SEGS, SPLITS, 1, CC] (G column groups a channel) through the real
    finish kernel: out = alpha * (sum or mean) + beta * out, in float64 then rounded once."""
    import triton
    from tridnn.cuda.layer_utils import _let_interpreter_loop_over_runtime_bounds
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the CPU test runs the finish kernel in the interpreter")
    _let_interpreter_loop_over_runtime_bounds()
    n, c, h, w = shape
    g = gs.group(c, 2)
    splits, rows = 3, h * w // g
    gen = torch.Generator().manual_seed(c)
    part = torch.randn(n, splits, 1, g * c, generator=gen) * 100
    prior = torch.randn(n, c, generator=gen).double()
    out = prior.clone()
    x = torch.zeros(g * c)  # (the shifts: not read for sums)
    fin_s, fin_c = gs.finish_tile(splits)
    gs._finish_kernel[(n, triton.cdiv(c, fin_c))](
        part, x, out, out, c, g * c, g, splits, rows, out, out, out, 1e-5, alpha, beta,
        SQUARES=False, COEF=False, BLOCK=fin_c, BLOCK_S=fin_s, MEAN=mean, HAS_BETA=beta != 0.0)
    total = part.double().sum(1)[:, 0].view(n, g, c).sum(1)
    want = alpha * (total / (h * w) if mean else total) + beta * prior
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12, atol=1e-9)


def test_interpreter_reductions_do_not_route(monkeypatch):
    """Under the interpreter the NHWC sum over H, W keeps the Triton kernels (and is right)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("interpreter only")

    def boom(*a, **k):
        raise AssertionError("gluon_stream called under the interpreter")
    monkeypatch.setattr(gs, "sum_hw_into", boom)
    monkeypatch.setattr(gs, "bn_partials", boom)
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    x = torch.randn(2, 8, 3, 4, generator=torch.Generator().manual_seed(5)).contiguous(memory_format=CL)
    xd = tridnn.TensorDescriptor.packed((2, 8, 3, 4), "float32", tridnn.TensorFormat.NHWC)
    cd = tridnn.TensorDescriptor.packed((2, 8, 1, 1), "float32")
    c = torch.full((2, 8, 1, 1), float("nan"))
    _reduce(h, "avg", 1.0, xd, x, 0.0, cd, c)
    np.testing.assert_allclose(c.double().numpy(), x.double().mean((2, 3), keepdim=True).numpy(), rtol=1e-6,
                               atol=1e-6)  # (float32 sums of 12 values of ~1)


# -- CPU (interpreter): the routed paths end to end, the Gluon kernels stood in for -------------
class _StandInStream:
    """stream_sums_kernel's contract in torch: part[seg, split, 0, col] = sum over the split's
    rows of x - shift (shift = the first row with SQUARES, else 0), part[..., 1, col] = sum of
    squares; rows of split s: [s * PER * BLOCK_P, (s + 1) * PER * BLOCK_P) within L."""
    calls = 0

    def __getitem__(self, grid):
        def run(x_desc, x, part, L, CC, B, PER, SPLITS, CBN, UNITS, **meta):
            type(self).calls += 1
            v = x.permute(0, 2, 3, 1).reshape(part.shape[0], L, CC).double()
            shift = v[0, 0] if meta["SQUARES"] else 0.0
            step = PER * meta["BLOCK_P"]
            for sp in range(SPLITS):
                d = v[:, sp * step:min((sp + 1) * step, L)] - shift
                part[:, sp, 0] = d.sum(1).float()
                if meta["SQUARES"]:
                    part[:, sp, 1] = (d * d).sum(1).float()
        return run


class _StandInApply:
    """stream_apply_kernel's contract in torch: y = act(coef[c] * x + coef[C + c])."""
    calls = 0

    def __getitem__(self, grid):
        def run(x_desc, y_desc, coef, C, *ints, **meta):
            type(self).calls += 1
            a, b = coef[:C].view(1, C, 1, 1), coef[C:2 * C].view(1, C, 1, 1)
            v = x_desc.base.float() * a + b
            y_desc.base.copy_(v.clamp_min(0) if meta["RELU"] else v)
        return run


@pytest.fixture
def stand_ins(hopper, monkeypatch):
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("interpreter only (on a GPU the real kernels run: the gpu tests)")
    from tridnn.cuda.layer_utils import _let_interpreter_loop_over_runtime_bounds
    _let_interpreter_loop_over_runtime_bounds()  # the finish kernels loop over runtime bounds
    _StandInStream.calls = _StandInApply.calls = 0
    monkeypatch.setattr(gs, "stream_sums_kernel", _StandInStream())
    monkeypatch.setattr(gs, "stream_apply_kernel", _StandInApply())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=lambda d: _DT[d])
@pytest.mark.parametrize("shape", [(2, 3, 4, 8), (3, 40, 5, 7)], ids=lambda s: "x".join(map(str, s)))
def test_routed_reduce_and_pooling_end_to_end(shape, dtype, stand_ins):
    """tridnn.reduce_tensor / pooling_forward / adaptive_pooling_forward on the routed path
    (the streaming kernel stood in for, the real finish): alpha, beta, mean, against float64."""
    n, c, hh, ww = shape
    gen = torch.Generator().manual_seed(c)
    x = (0.5 + torch.randn(shape, generator=gen)).to(dtype).contiguous(memory_format=CL)
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    xd = tridnn.TensorDescriptor.packed(shape, _DT[dtype], tridnn.TensorFormat.NHWC)
    cd = tridnn.TensorDescriptor.packed((n, c, 1, 1), _DT[dtype])
    x64 = x.double()
    calls = 0
    for op, alpha, beta in (("add", 1.0, 0.0), ("avg", 1.0, 0.0), ("add", 0.5, 2.0), ("avg", -1.5, 0.25)):
        prior = torch.randn(n, c, 1, 1, generator=gen).to(dtype)
        out = prior.clone() if beta else torch.full((n, c, 1, 1), float("nan"), dtype=dtype)
        _reduce(h, op, alpha, xd, x, beta, cd, out)
        r = x64.sum((2, 3), keepdim=True) / (hh * ww if op == "avg" else 1)
        _close(out, alpha * r + beta * prior.double(), dtype, (op, alpha, beta))
        calls += 1
        assert _StandInStream.calls == calls, "routed"
    for how in ("global", "adaptive"):
        prior = torch.randn(n, c, 1, 1, generator=gen).to(dtype)
        out = prior.clone()
        if how == "global":
            pool = PoolingDescriptor(PoolingMode.AVERAGE_COUNT_INCLUDE_PADDING, (hh, ww), 0, (hh, ww))
            tridnn.pooling_forward(h, pool, 2.0, xd, x, -0.5, cd, out)
        else:
            tridnn.adaptive_pooling_forward(h, 1, 2.0, xd, x, -0.5, cd, out)
        _close(out, 2.0 * x64.mean((2, 3), keepdim=True) - 0.5 * prior.double(), dtype, how)
        calls += 1
        assert _StandInStream.calls == calls, ("routed", how)


@pytest.mark.parametrize("case", ["norm", "relu", "add_relu", "alpha_beta"])
def test_routed_batch_norm_end_to_end(case, stand_ins):
    """batch_norm_forward_training_ex on the routed path (partials and apply stood in for,
    batchnorm.py's real finalize on them, x's first pixel as the shift): y, running and saved
    statistics against float64."""
    _check_batch_norm((3, 16, 5, 7), case, torch.float16, "cpu")
    assert _StandInStream.calls == 1
    assert _StandInApply.calls == int(case in ("norm", "relu"))


# -- GPU: through the public API against float64 ---------------------------------------------
def _gpu():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper GPU")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.fail("Gluon does not run under the interpreter: set TRIDNN_GPU_TESTS=1")


class _Spy:
    def __init__(self, monkeypatch, *names):
        self.calls = {n: 0 for n in names}
        for n in names:
            real = getattr(gs, n)

            def wrapped(*a, _real=real, _n=n, **k):
                self.calls[_n] += 1
                return _real(*a, **k)
            monkeypatch.setattr(gs, n, wrapped)


_DT = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
_TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 2e-5}
GPU_SHAPES = [(64, 256, 56, 56), (2, 3, 13, 16), (2, 200, 9, 11), (3, 64, 17, 19), (2, 3, 5, 5), (1, 2048, 7, 7)]


def _routes(shape, dtype):
    x = torch.empty(shape, dtype=dtype, device="cuda").contiguous(memory_format=CL)
    return gs.sum_hw_why_not(x, torch.empty(shape[0], shape[1], 1, 1, dtype=dtype, device="cuda")) is None


def _close(got, want, dtype, what):
    got = got.double().cpu()
    assert torch.isfinite(got).all(), what
    err = ((got - want).abs().max() / max(1.0, want.abs().max().item())).item()
    assert err < _TOL[dtype], (what, err)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=lambda d: _DT[d])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_reduce_and_pooling(shape, dtype, monkeypatch):
    _gpu()
    spy = _Spy(monkeypatch, "sum_hw_into")
    n, c, hh, ww = shape
    gen = torch.Generator().manual_seed(n + c)
    x = (0.5 + torch.randn(shape, generator=gen)).to(dtype)
    x64 = x.double()
    xg = x.cuda().contiguous(memory_format=CL)
    h = tridnn.Handle(device="cuda", find_cache=None)
    xd = tridnn.TensorDescriptor.packed(shape, _DT[dtype], tridnn.TensorFormat.NHWC)
    cd = tridnn.TensorDescriptor.packed((n, c, 1, 1), _DT[dtype])
    routed = _routes(shape, dtype)
    expected = 0
    for op, alpha, beta in (("add", 1.0, 0.0), ("avg", 1.0, 0.0), ("add", 0.5, 2.0), ("avg", -1.5, 0.25)):
        prior = torch.randn(n, c, 1, 1, generator=gen).to(dtype)
        out = prior.cuda() if beta else torch.full((n, c, 1, 1), float("nan"), dtype=dtype, device="cuda")
        _reduce(h, op, alpha, xd, xg, beta, cd, out)
        r = x64.sum((2, 3), keepdim=True) / (hh * ww if op == "avg" else 1)
        _close(out, alpha * r + beta * prior.double(), dtype, (op, alpha, beta))
        expected += routed
    # global average pooling (window = the plane) and adaptive average pooling to 1x1
    mean = x64.mean((2, 3), keepdim=True)
    for alpha, beta in ((1.0, 0.0), (2.0, -0.5)):
        prior = torch.randn(n, c, 1, 1, generator=gen).to(dtype)
        for how in ("global", "adaptive"):
            out = prior.cuda() if beta else torch.full((n, c, 1, 1), float("nan"), dtype=dtype, device="cuda")
            if how == "global":
                pool = PoolingDescriptor(PoolingMode.AVERAGE_COUNT_EXCLUDE_PADDING, (hh, ww), 0, (hh, ww))
                tridnn.pooling_forward(h, pool, alpha, xd, xg, beta, cd, out)
            else:
                tridnn.adaptive_pooling_forward(h, 1, alpha, xd, xg, beta, cd, out)
            _close(out, alpha * mean + beta * prior.double(), dtype, (how, alpha, beta))
            expected += routed
    torch.cuda.synchronize()
    assert spy.calls["sum_hw_into"] == expected, (routed, spy.calls)
    assert routed or shape == (2, 3, 5, 5), "the shapes here route except 2x3x5x5 (falls back)"


BN_SHAPES = [(64, 256, 56, 56), (2, 200, 9, 11), (4, 64, 17, 19), (2, 3, 13, 16)]


def _check_batch_norm(shape, case, dtype, device):
    """batch_norm_forward_training_ex (SPATIAL) through the public API against float64: y
    (NaN-poisoned unless beta), running mean/variance, saved mean/inverse std."""
    n, c, hh, ww = shape
    gen = torch.Generator().manual_seed(c + hh)
    x = (30.0 + 2.0 * torch.randn(shape, generator=gen)).to(dtype)  # |mean| >> std: the shift matters
    z = torch.randn(shape, generator=gen).to(dtype)
    ops = {"norm": BatchNormOps.NORM, "relu": BatchNormOps.NORM_ACTIVATION,
           "add_relu": BatchNormOps.NORM_ADD_ACTIVATION, "alpha_beta": BatchNormOps.NORM}[case]
    alpha, beta = (0.5, 1.5) if case == "alpha_beta" else (1.0, 0.0)
    if device == "cuda":
        h = tridnn.Handle(device="cuda", find_cache=None)
    else:
        h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    xd = tridnn.TensorDescriptor.packed(shape, _DT[dtype], tridnn.TensorFormat.NHWC)
    bn = tridnn.derive_bn_tensor_descriptor(xd, BatchNormMode.SPATIAL)
    scale = torch.rand(bn.dims, generator=gen) + 0.5
    bias = torch.randn(bn.dims, generator=gen)
    rm0, rv0 = torch.randn(bn.dims, generator=gen), torch.rand(bn.dims, generator=gen) + 0.5
    prior = torch.randn(shape, generator=gen).to(dtype)
    cl = lambda t: t.clone().to(device).contiguous(memory_format=CL)  # noqa: E731  (copies, also on the CPU)
    xg, zg = cl(x), cl(z)
    y = cl(prior) if beta else cl(torch.full(shape, float("nan"), dtype=dtype))
    rm, rv = rm0.clone().to(device), rv0.clone().to(device)
    sm, si = (torch.full(bn.dims, float("nan"), device=device) for _ in range(2))
    eps, factor = 1e-5, 0.1
    act = ActivationDescriptor(ActivationMode.RELU) if ops != BatchNormOps.NORM else None
    add = ops == BatchNormOps.NORM_ADD_ACTIVATION
    tridnn.batch_norm_forward_training_ex(h, BatchNormMode.SPATIAL, ops, alpha, beta, xd, xg, xd if add else None,
                                          zg if add else None, xd, y, bn, scale.to(device), bias.to(device), factor,
                                          rm, rv, eps, sm, si, act)
    if device == "cuda":
        torch.cuda.synchronize()
    x64 = x.double()
    mean = x64.mean((0, 2, 3), keepdim=True)
    var = x64.var((0, 2, 3), unbiased=False, keepdim=True)
    want = (x64 - mean) / torch.sqrt(var + eps) * scale.double() + bias.double()
    if add:
        want = want + z.double()
    if ops != BatchNormOps.NORM:
        want = want.clamp_min(0)
    want = alpha * want + beta * prior.double()
    _close(y, want, dtype, "y")
    m = n * hh * ww
    assert torch.allclose(sm.double().cpu(), mean.view(bn.dims), rtol=1e-6, atol=1e-6)
    assert torch.allclose(si.double().cpu(), (1 / torch.sqrt(var + eps)).view(bn.dims), rtol=1e-4)
    assert torch.allclose(rm.double().cpu(), (1 - factor) * rm0.double() + factor * mean.view(bn.dims),
                          rtol=1e-6, atol=1e-6)
    assert torch.allclose(rv.double().cpu(), (1 - factor) * rv0.double() + factor * var.view(bn.dims) * m / (m - 1),
                          rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=lambda d: _DT[d])
@pytest.mark.parametrize("case", ["norm", "relu", "add_relu", "alpha_beta"])
@pytest.mark.parametrize("shape", BN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_batch_norm_training(shape, case, dtype, monkeypatch):
    _gpu()
    spy = _Spy(monkeypatch, "bn_partials", "bn_apply")
    _check_batch_norm(shape, case, dtype, "cuda")
    routed = shape[1] != 3  # C = 3: 8 pixels a TMA row, batchnorm.py's own kernels
    assert spy.calls["bn_partials"] == int(routed), spy.calls
    assert spy.calls["bn_apply"] == int(routed and case in ("norm", "relu")), spy.calls
