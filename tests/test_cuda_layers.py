"""The Triton layer kernels (tridnn.cuda.<layer>) against float64 references.

On the CPU the kernels run in Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1) on tiny shapes; with TRIDNN_GPU_TESTS=1 and --gpu the same tests
run on the GPU, and the tests marked gpu add full-size problems. Every output is
poisoned with NaN first, so an unwritten element fails."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cpu import dropout as cpu_dropout  # noqa: E402
from tridnn.cpu import lrn as cpu_lrn  # noqa: E402
from tridnn.cuda import (activation, batchnorm, dropout, group_norm_coop, lrn, norms, pooling,  # noqa: E402
                         softmax, tensor_ops)
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode  # noqa: E402
from tridnn.errors import BadParamError  # noqa: E402
from tridnn.reference import activation as ref_act  # noqa: E402
from tridnn.reference import normalization as ref_norm  # noqa: E402
from tridnn.reference import pooling as ref_pool  # noqa: E402
from tridnn.reference import softmax as ref_softmax  # noqa: E402

ON_GPU = os.environ.get("TRIDNN_GPU_TESTS") == "1"
DEVICE = "cuda" if ON_GPU else "cpu"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64}
# max |got - ref| / max(1, max |ref|)
TOL = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
LAYOUTS = ("NCHW", "NHWC", "strided")


def make(shape, layout, dtype=torch.float32, values=None, rng=None, scale=1.0):
    """A logical (N, C, *spatial) view in the layout: packed NCHW, packed NHWC, or
    'strided' (every other element of the last spatial dim of a channel-padded NHWC
    buffer). ``values`` (a float64 array) or fresh normals fill it."""
    shape = tuple(shape)
    if values is None:
        values = rng.standard_normal(shape) * scale
    data = torch.as_tensor(np.asarray(values, np.float64)).to(dtype)
    nd = len(shape)
    if layout == "NCHW" or nd < 3:
        out = torch.empty(shape, dtype=dtype, device=DEVICE)
    elif layout == "NHWC":
        perm = (0, *range(2, nd), 1)
        out = torch.empty([shape[a] for a in perm], dtype=dtype, device=DEVICE).permute(
            *[perm.index(a) for a in range(nd)])
    else:
        n, c, *sp = shape
        big = torch.empty((n, *sp[:-1], sp[-1] * 2, c + 3), dtype=dtype, device=DEVICE)
        phys = big[(slice(None),) * (nd - 2) + (slice(None, None, 2), slice(1, 1 + c))]
        out = phys.permute(0, nd - 1, *range(1, nd - 1))
    out.copy_(data.to(DEVICE))
    return out


def poisoned(shape, layout, dtype=torch.float32):
    return make(shape, layout, dtype, values=np.full(shape, np.nan))


def f64(t):
    return t.detach().to("cpu", torch.float64).numpy().copy()  # never a view of t


def check(got, ref, dtype, name="output", scale=1.0):
    got = f64(got) if isinstance(got, torch.Tensor) else np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{name}: shape {got.shape} != {ref.shape}"
    assert not np.isnan(got).any() or np.array_equal(np.isnan(got), np.isnan(ref)), \
        f"{name}: {int(np.isnan(got).sum())} NaN where the reference has {int(np.isnan(ref).sum())}"
    ok = ~np.isnan(ref)
    err = np.abs(got[ok] - ref[ok]).max(initial=0.0) / max(1.0, np.abs(ref[ok]).max(initial=0.0))
    assert err <= TOL[dtype] * scale, f"{name}: normalized error {err:.3g} > {TOL[dtype] * scale:.3g}"


# -- activation --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(ActivationMode), ids=lambda m: m.name)
@pytest.mark.parametrize("layout,dtype", [("NCHW", "float32"), ("NHWC", "bfloat16"), ("strided", "float16")])
def test_activation_forward_backward(mode, layout, dtype, rng):
    dt = DTYPES[dtype]
    desc = ActivationDescriptor(mode=mode, coef=1.5 if mode == ActivationMode.CLIPPED_RELU else 0.3)
    shape = (2, 3, 4, 5)
    x = make(shape, layout, dt, rng=rng, scale=2.0)
    y = poisoned(shape, layout, dt)
    params = dict(mode=int(mode), coef=desc.coef, swish_beta=desc.swish_beta)
    activation.activation_forward(x, y, **params, propagate_nan=False, alpha=1.0, beta=0.0)
    y_ref = ref_act.activation_forward(f64(x), mode, desc.coef, desc.swish_beta)
    check(y, y_ref, dt, "y")
    dy = make(shape, layout, dt, rng=rng)
    dx = make(shape, layout, dt, rng=rng)
    old = f64(dx)
    activation.activation_backward(y, dy, x, dx, **params, alpha=2.0, beta=0.5)
    dx_ref = 2.0 * ref_act.activation_backward(f64(x), f64(dy), mode, desc.coef, desc.swish_beta) + 0.5 * old
    # sigmoid/tanh/elu use the rounded y, so half types get a looser bound
    check(dx, dx_ref, dt, "dx", scale=3.0)


@pytest.mark.parametrize("erf", ["exact", "fast", "fast_div"])
@pytest.mark.parametrize("layout", ["NCHW", "strided"])
def test_activation_per_mode_tiles(layout, erf, rng, monkeypatch):
    """A TILES entry (elements per program, warps) for gelu: several programs and a
    ragged last one, flat and strided, forward and backward; with each GELU_ERF."""
    gelu = int(ActivationMode.GELU)
    monkeypatch.setattr(activation, "TILES", {gelu: (64, 2)})
    monkeypatch.setattr(activation, "GELU_ERF", erf)
    shape = (2, 3, 4, 7)  # 168 elements: 3 programs of 64
    x = make(shape, layout, rng=rng, scale=2.0)
    y = poisoned(shape, layout)
    activation.activation_forward(x, y, mode=gelu, propagate_nan=False, alpha=1.0, beta=0.0)
    check(y, ref_act.activation_forward(f64(x), ActivationMode.GELU, 0.0, 1.0), torch.float32, "y")
    dy = make(shape, layout, rng=rng)
    dx = poisoned(shape, layout)
    activation.activation_backward(y, dy, x, dx, mode=gelu, alpha=1.0, beta=0.0)
    check(dx, ref_act.activation_backward(f64(x), f64(dy), ActivationMode.GELU, 0.0, 1.0), torch.float32, "dx")


def test_activation_nan_propagation_and_beta_zero_never_reads():
    x = torch.tensor([[float("nan"), -1.0, 2.0, 7.0]], device=DEVICE)
    for propagate, expected in ((False, [0.0, 0.0, 2.0, 6.0]), (True, [np.nan, 0.0, 2.0, 6.0])):
        y = torch.full_like(x, float("nan"))
        activation.activation_forward(x, y, mode=int(ActivationMode.CLIPPED_RELU), coef=6.0,
                                      propagate_nan=propagate, alpha=1.0, beta=0.0)
        np.testing.assert_array_equal(f64(y)[0], expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("mode", list(ActivationMode), ids=lambda m: m.name)
def test_activation_nan_inputs_give_nan_exactly_when_propagated(mode, dtype):
    """Under PROPAGATE_NAN exactly the NaN inputs give NaN, in every mode; otherwise no
    NaN appears where the input has none. (ELU's tl.minimum(x, 0) dropped the NaN on an
    H100, where PTX min returns the other operand; conftest's interpreter now follows that
    rule, so this runs the GPU's semantics on the CPU.)"""
    x = torch.tensor([[float("nan"), -3.0, -0.5, 0.0, 0.25, 2.0, 7.0, float("nan")]], device=DEVICE, dtype=dtype)
    nan_in = torch.isnan(x).cpu()
    for propagate in (True, False):
        y = torch.zeros_like(x)
        activation.activation_forward(x, y, mode=int(mode), coef=1.5, swish_beta=1.0, propagate_nan=propagate,
                                      alpha=1.0, beta=0.0)
        nan_out = torch.isnan(y).cpu()
        if propagate:
            assert torch.equal(nan_out, nan_in), (mode.name, propagate, y)
        else:
            assert not (nan_out & ~nan_in).any(), (mode.name, propagate, y)


def test_int64_offsets_are_chosen_past_2_to_the_31():
    from tridnn.cuda.layer_utils import needs_int64
    assert not needs_int64(torch.empty(4, 5, device="meta"))
    assert needs_int64(torch.empty(2**16, 2**15 + 1, device="meta"))
    assert needs_int64(torch.empty(3, 2**30, device="meta")[:, :2])  # a small view of a huge span


@pytest.mark.gpu
def test_gpu_tensor_past_2_to_the_31_elements():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x = torch.empty(2**31 + 4096, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    y = torch.empty_like(x)
    activation.activation_forward(x, y, mode=1, coef=0.0, swish_beta=1.0, propagate_nan=False, alpha=1.0, beta=0.0)
    assert torch.equal(y[-8192:], torch.relu(x[-8192:]))
    del y
    reserve = torch.empty(x.numel(), dtype=torch.uint8, device="cuda")
    dropout.dropout_forward(x, x, reserve, 0.5, 7, 0)  # in place
    kept = reserve[-4096:].float().mean().item()
    assert 0.4 < kept < 0.6


# -- softmax -----------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", [0, 1, 2], ids=["FAST", "ACCURATE", "LOG"])
@pytest.mark.parametrize("mode", [0, 1], ids=["INSTANCE", "CHANNEL"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_softmax(algorithm, mode, layout, rng):
    shape = (2, 5, 3, 4)
    x = make(shape, layout, rng=rng, scale=3.0)
    y = poisoned(shape, layout)
    softmax.softmax_forward(x, y, algorithm=algorithm, mode=mode, alpha=1.0, beta=0.0)
    check(y, ref_softmax.softmax_forward(f64(x), algorithm, mode), torch.float32, "y")
    dy = make(shape, "NHWC" if layout == "NCHW" else "NCHW", rng=rng)  # mixed layouts
    dx = make(shape, layout, rng=rng)
    old = f64(dx)
    softmax.softmax_backward(y, dy, dx, algorithm=algorithm, mode=mode, alpha=0.5, beta=2.0)
    ref = 0.5 * ref_softmax.softmax_backward(f64(y), f64(dy), algorithm, mode) + 2.0 * old
    check(dx, ref, torch.float32, "dx")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_softmax_long_rows_take_the_two_pass_kernel(dtype, rng, monkeypatch):
    monkeypatch.setattr(softmax, "MAX_TILE", 16)
    dt = DTYPES[dtype]
    x = make((3, 70), "NCHW", dt, rng=rng, scale=4.0)
    for algorithm in (1, 2):
        y = poisoned((3, 70), "NCHW", dt)
        softmax.softmax_forward(x, y, algorithm=algorithm, mode=1, alpha=1.0, beta=0.0)
        check(y, ref_softmax.softmax_forward(f64(x), algorithm, 1), dt, "y")
        dy = make((3, 70), "NCHW", dt, rng=rng)
        dx = poisoned((3, 70), "NCHW", dt)
        softmax.softmax_backward(y, dy, dx, algorithm=algorithm, mode=1, alpha=1.0, beta=0.0)
        check(dx, ref_softmax.softmax_backward(f64(y), f64(dy), algorithm, 1), dt, "dx", scale=2.0)


def test_softmax_extreme_rows():
    x = torch.tensor([[-np.inf, 0.0, 1.0], [1e30, 1e30, -1e30], [-np.inf] * 3], device=DEVICE)
    y = torch.empty_like(x)
    softmax.softmax_forward(x, y, algorithm=1, mode=1, alpha=1.0, beta=0.0)
    got = f64(y)
    np.testing.assert_allclose(got[0], [0.0, 1 / (1 + np.e), np.e / (1 + np.e)], rtol=1e-6)
    np.testing.assert_allclose(got[1], [0.5, 0.5, 0.0])
    assert np.isnan(got[2]).all()  # an all -inf row has no softmax, as on the CPU


# -- pooling -----------------------------------------------------------------------------
POOL_CASES = [((2, 3, 7, 6), (3, 3), (1, 1), (2, 2)), ((2, 3, 9), (3,), (1,), (2,)),
              ((1, 2, 4, 5, 4), (2, 3, 2), (1, 1, 0), (1, 2, 2))]


@pytest.mark.parametrize("case", POOL_CASES, ids=["2d", "1d", "3d"])
@pytest.mark.parametrize("mode", [0, 1, 2, 3], ids=["MAX", "AVG_INCL", "AVG_EXCL", "MAX_DET"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pooling(case, mode, layout, rng):
    shape, window, padding, stride = case
    # small integers: ties test the first-maximum rule, sums stay exact
    x = make(shape, layout, values=rng.integers(-3, 4, size=shape).astype(np.float64))
    check_pooling(x, mode, window, padding, stride, layout, rng)


def check_pooling(x, mode, window, padding, stride, layout, rng, dtype=torch.float32):
    """Forward into a poisoned y, then backward with fresh dy into a poisoned dx, each
    against the float64 reference (x, y, dy, dx in ``dtype``)."""
    y_ref = ref_pool.pooling_forward(f64(x), mode, window, padding, stride)
    y = poisoned(y_ref.shape, layout, dtype)
    pooling.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
    check(y, y_ref, dtype, "y")
    dy = make(y_ref.shape, layout, dtype, rng=rng)
    dx = poisoned(tuple(x.shape), layout, dtype)
    pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, False, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride), dtype, "dx")


def check_pooling_blend(x, mode, window, padding, stride, layout, rng):
    """alpha and beta: y = 2 pool(x) - y, dx = 0.5 pool'(dy) + 2 dx, against float64."""
    y_ref = ref_pool.pooling_forward(f64(x), mode, window, padding, stride)
    y = make(y_ref.shape, layout, rng=rng)
    old = f64(y)
    pooling.pooling_forward(x, y, mode, window, padding, stride, False, 2.0, -1.0)
    check(y, 2.0 * y_ref - old, torch.float32, "y")
    dy = make(y_ref.shape, layout, rng=rng)
    dx = make(tuple(x.shape), layout, rng=rng)
    old = f64(dx)
    pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, False, 0.5, 2.0)
    ref = 0.5 * ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride) + 2.0 * old
    check(dx, ref, torch.float32, "dx")


# windows that exercise the row kernels' phase split (stride 2: taps left of, inside and
# right of each output's column pair; stride 1: shifted loads), several column blocks
# (W past MAX_ROW_BLOCK_W = 4 here) and widths no vector factor divides
ROW_CASES = [((2, 3, 5, 11), (3, 3), (1, 1), (1, 1)), ((1, 2, 6, 13), (5, 5), (2, 2), (2, 2)),
             ((1, 2, 4, 12), (2, 2), (0, 0), (2, 2)), ((2, 2, 5, 9), (3, 4), (1, 1), (2, 2)),
             ((1, 2, 3, 2, 17), (1, 2, 3), (0, 0, 1), (1, 1, 2))]


@pytest.mark.parametrize("case", ROW_CASES, ids=["3x3s1", "5x5s2", "2x2s2", "3x4s2", "3d"])
@pytest.mark.parametrize("mode", [0, 2], ids=["MAX", "AVG_EXCL"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pooling_windows(case, mode, layout, rng, monkeypatch):
    monkeypatch.setattr(pooling, "MAX_ROW_BLOCK_W", 4)
    shape, window, padding, stride = case
    x = make(shape, layout, values=rng.integers(-3, 4, size=shape).astype(np.float64))
    y_ref = ref_pool.pooling_forward(f64(x), mode, window, padding, stride)
    y = poisoned(y_ref.shape, layout)
    pooling.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
    check(y, y_ref, torch.float32, "y")
    dy = make(y_ref.shape, layout, rng=rng)
    dx = make(shape, layout, rng=rng)
    old = f64(dx)
    pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, False, 0.5, 2.0)
    ref = 0.5 * ref_pool.pooling_backward(f64(x), f64(dy), mode, window, padding, stride) + 2.0 * old
    check(dx, ref, torch.float32, "dx")


@pytest.mark.parametrize("propagate", [False, True])
def test_max_pooling_nan(propagate, rng):
    shape = (1, 2, 4, 4)
    values = rng.integers(-3, 4, size=shape).astype(np.float64)
    values[0, 0, 1, 1] = np.nan
    x = make(shape, "NCHW", values=values)
    y_ref = ref_pool.pooling_forward(values, 0, (2, 2), (0, 0), (2, 2), propagate_nan=propagate)
    y = poisoned(y_ref.shape, "NCHW")
    pooling.pooling_forward(x, y, 0, (2, 2), (0, 0), (2, 2), propagate, 1.0, 0.0)
    np.testing.assert_array_equal(np.isnan(f64(y)), np.isnan(y_ref))
    dy = make(y_ref.shape, "NCHW", rng=rng)
    dx = poisoned(shape, "NCHW")
    pooling.pooling_backward(y, dy, x, dx, 0, (2, 2), (0, 0), (2, 2), propagate, 1.0, 0.0)
    check(dx, ref_pool.pooling_backward(values, f64(dy), 0, (2, 2), (0, 0), (2, 2), propagate_nan=propagate),
          torch.float32, "dx")


@pytest.mark.parametrize("shape,out", [((2, 3, 7, 6), (3, 4)), ((1, 2, 3, 3), (5, 5)), ((2, 2, 9), (4,))])
@pytest.mark.parametrize("mode", [0, 1], ids=["max", "avg"])
def test_adaptive_pooling(shape, out, mode, rng):
    x = make(shape, "NHWC", values=rng.integers(-3, 4, size=shape).astype(np.float64))
    y_ref = ref_pool.adaptive_pooling_forward(f64(x), out, mode)
    y = poisoned(y_ref.shape, "NHWC")
    pooling.adaptive_pooling_forward(x, y, mode, 1.0, 0.0)
    check(y, y_ref, torch.float32, "y")
    dy = make(y_ref.shape, "NCHW", rng=rng)
    dx = poisoned(shape, "NHWC")
    pooling.adaptive_pooling_backward(x, dy, dx, mode, 1.0, 0.0)
    check(dx, ref_pool.adaptive_pooling_backward(f64(x), f64(dy), mode), torch.float32, "dx")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64"])
def test_pooling_dtypes_and_blend(dtype, rng):
    dt = DTYPES[dtype]
    shape = (2, 4, 6, 6)
    x = make(shape, "strided", dt, rng=rng)
    y_ref = ref_pool.pooling_forward(f64(x), 2, (3, 3), (1, 1), (2, 2))
    y = make(y_ref.shape, "NHWC", dt, rng=rng)
    old = f64(y)
    pooling.pooling_forward(x, y, 2, (3, 3), (1, 1), (2, 2), False, 2.0, -1.0)
    check(y, 2.0 * y_ref - old, dt, "y")


# -- batch norm --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [1, 0], ids=["SPATIAL", "PER_ACTIVATION"])
@pytest.mark.parametrize("ops", [0, 1, 2], ids=["NORM", "NORM_RELU", "NORM_ADD_RELU"])
@pytest.mark.parametrize("layout,dtype", [("NCHW", "float32"), ("NHWC", "bfloat16"), ("strided", "float32")])
def test_batch_norm(mode, ops, layout, dtype, rng):
    dt = DTYPES[dtype]
    shape = (4, 5, 3, 4)
    pshape = (1, 5, 1, 1) if mode == 1 else (1, 5, 3, 4)
    x = make(shape, layout, dt, rng=rng, scale=2.0)
    x.add_(3.0)  # a mean away from zero tests the shifted sums
    z = make(shape, layout, dt, rng=rng) if ops == 2 else None
    p = lambda v: torch.as_tensor(np.asarray(v, np.float32)).to(DEVICE)  # noqa: E731
    scale, bias = p(rng.standard_normal(pshape)), p(rng.standard_normal(pshape))
    rmean, rvar = p(rng.standard_normal(pshape)), p(rng.random(pshape) + 0.5)
    rmean0, rvar0 = f64(rmean), f64(rvar)
    smean, sinv = p(np.full(pshape, np.nan)), p(np.full(pshape, np.nan))
    y = poisoned(shape, layout, dt)
    batchnorm.batch_norm_forward_training(x, z, y, scale, bias, rmean, rvar, smean, sinv, mode, 0.1, 1e-5, ops,
                                          1.0, 0.0)
    y_ref, mean_ref, var_ref = ref_norm.batch_norm_train(f64(x), f64(scale), f64(bias), 1e-5, spatial=mode == 1,
                                                         z=None if z is None else f64(z), relu=ops > 0)
    m = x.numel() // scale.numel()
    check(y, y_ref, dt, "y", scale=2.0)
    check(smean, mean_ref, torch.float32, "saved mean")
    check(sinv, 1 / np.sqrt(var_ref + 1e-5), torch.float32, "saved inv var", scale=10.0)
    check(rmean, 0.9 * rmean0 + 0.1 * mean_ref, torch.float32, "running mean")
    check(rvar, 0.9 * rvar0 + 0.1 * var_ref * m / (m - 1), torch.float32, "running var")

    y_inf = poisoned(shape, layout, dt)
    batchnorm.batch_norm_forward_inference(x, z, y_inf, scale, bias, rmean, rvar, mode, 1e-5, ops, 1.0, 0.0)
    check(y_inf, ref_norm.batch_norm_inference(f64(x), f64(scale), f64(bias), f64(rmean), f64(rvar), 1e-5,
                                               z=None if z is None else f64(z), relu=ops > 0), dt, "inference y")

    dy = make(shape, layout, dt, rng=rng)
    dx, dz = poisoned(shape, layout, dt), poisoned(shape, layout, dt) if ops == 2 else None
    dscale, dbias = p(rng.standard_normal(pshape)), p(np.full(pshape, np.nan))
    dscale_old = f64(dscale)
    saved = (smean, sinv) if layout != "strided" else (None, None)  # also: statistics recomputed
    batchnorm.batch_norm_backward(x, y, dy, dz, dx, scale, bias, dscale, dbias, *saved, mode, 1e-5, ops,
                                  1.0, 0.0, 1.0, 0.0 if layout != "NCHW" else 0.0)
    dx_ref, ds_ref, db_ref, dz_ref = ref_norm.batch_norm_backward(f64(x), f64(dy), f64(scale), 1e-5,
                                                                  spatial=mode == 1, y=f64(y), relu=ops > 0)
    scale_tol = 10.0 if mode == 0 else 2.0  # per-activation statistics come from 4 values
    check(dx, dx_ref, dt, "dx", scale=scale_tol * (5.0 if dt != torch.float32 else 1.0))
    check(dscale, ds_ref, torch.float32 if dt == torch.float32 else dt, "dscale", scale=scale_tol)
    check(dbias, db_ref, torch.float32 if dt == torch.float32 else dt, "dbias")
    if dz is not None:
        check(dz, dz_ref, dt, "dz")
    assert dscale_old.shape == ds_ref.shape


@pytest.mark.parametrize("ops", [0, 1], ids=["NORM", "NORM_RELU"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_training_keeps_a_nan_in_its_channel(ops, layout, rng):
    """A NaN in channel 2's input makes that channel's y, saved statistics and running
    averages NaN, and leaves the other channels finite, with and without the fused relu, as
    the NumPy backend does. (The variance's clamp at 0 and the relu were PTX max, which
    returns the other operand: the GPU gave a finite inv_std and running variance, and 0
    for the relu of a NaN.)"""
    shape, pshape = (3, 4, 2, 5), (1, 4, 1, 1)
    x = make(shape, layout, rng=rng)
    x[1, 2, 1, 3] = float("nan")
    p = lambda v: torch.as_tensor(np.asarray(v, np.float32)).to(DEVICE)  # noqa: E731
    scale, bias = p(np.ones(pshape)), p(np.zeros(pshape))
    rmean, rvar, smean, sinv = p(np.zeros(pshape)), p(np.ones(pshape)), p(np.zeros(pshape)), p(np.zeros(pshape))
    y = poisoned(shape, layout)
    batchnorm.batch_norm_forward_training(x, None, y, scale, bias, rmean, rvar, smean, sinv, 1, 0.1, 1e-5, ops,
                                          1.0, 0.0)
    nan_channel = np.arange(4) == 2
    for name, t in (("saved mean", smean), ("saved inv std", sinv), ("running mean", rmean), ("running var", rvar)):
        np.testing.assert_array_equal(np.isnan(f64(t).reshape(-1)), nan_channel, err_msg=name)
    y_nan = np.isnan(f64(y))
    assert y_nan[:, 2].all() and not y_nan[:, nan_channel == 0].any()


@pytest.mark.parametrize("l2_reuse,keep", [(True, 1), (True, 0), (False, 0)], ids=["l2-keep1", "l2-keep0", "plain"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_split_orders(l2_reuse, keep, layout, rng, monkeypatch):
    """Several splits with a short last one, the evict-last tail of each split, and the
    apply pass in L2 order (newest items first) or in memory order."""
    monkeypatch.setattr(batchnorm, "PROGRAMS_PER_SM", 1)
    monkeypatch.setattr(batchnorm, "_sm_count", lambda t: 3)  # 2-3 splits, the last one short
    monkeypatch.setattr(batchnorm, "L2_REUSE", l2_reuse)
    monkeypatch.setattr(batchnorm, "BLOCK_SPLITS", 2)
    monkeypatch.setattr(batchnorm._Layout, "keep_items", lambda self, splits, tensors: keep)
    monkeypatch.setattr(batchnorm, "TILE", 64)
    shape = (5, 3, 3, 7)
    x = make(shape, layout, rng=rng, scale=2.0)
    x.add_(3.0)
    p = lambda v: torch.as_tensor(np.asarray(v, np.float32)).to(DEVICE)  # noqa: E731
    scale, bias = p(rng.standard_normal((1, 3, 1, 1))), p(rng.standard_normal((1, 3, 1, 1)))
    smean, sinv = p(np.full((1, 3, 1, 1), np.nan)), p(np.full((1, 3, 1, 1), np.nan))
    y = poisoned(shape, layout)
    batchnorm.batch_norm_forward_training(x, None, y, scale, bias, None, None, smean, sinv, 1, 0.1, 1e-5, 1,
                                          1.0, 0.0)
    y_ref, mean_ref, _ = ref_norm.batch_norm_train(f64(x), f64(scale), f64(bias), 1e-5, relu=True)
    check(y, y_ref, torch.float32, "y", scale=2.0)
    check(smean, mean_ref, torch.float32, "saved mean")
    dy = make(shape, layout, rng=rng)
    dx = poisoned(shape, layout)
    dscale, dbias = p(np.full((1, 3, 1, 1), np.nan)), p(np.full((1, 3, 1, 1), np.nan))
    batchnorm.batch_norm_backward(x, y, dy, None, dx, scale, bias, dscale, dbias, smean, sinv, 1, 1e-5, 1)
    dx_ref, ds_ref, db_ref, _ = ref_norm.batch_norm_backward(f64(x), f64(dy), f64(scale), 1e-5, y=f64(y), relu=True)
    check(dx, dx_ref, torch.float32, "dx", scale=2.0)
    check(dscale, ds_ref, torch.float32, "dscale", scale=2.0)
    check(dbias, db_ref, torch.float32, "dbias")


def test_batch_norm_parameter_blending(rng):
    shape = (3, 4, 5, 2)
    x = make(shape, "NHWC", rng=rng)
    y = poisoned(shape, "NHWC")
    ones, zeros = torch.ones(1, 4, 1, 1, device=DEVICE), torch.zeros(1, 4, 1, 1, device=DEVICE)
    batchnorm.batch_norm_forward_training(x, None, y, ones, zeros, None, None, None, None, 1, 0.1, 1e-5, 0,
                                          1.0, 0.0)
    dy = make(shape, "NHWC", rng=rng)
    dx = make(shape, "NHWC", rng=rng)
    dscale, dbias = torch.full((1, 4, 1, 1), 2.0, device=DEVICE), torch.full((1, 4, 1, 1), -1.0, device=DEVICE)
    old_dx = f64(dx)
    batchnorm.batch_norm_backward(x, y, dy, None, dx, ones, zeros, dscale, dbias, None, None, 1, 1e-5, 0,
                                  0.5, 1.0, 2.0, 0.5)
    dx_ref, ds_ref, db_ref, _ = ref_norm.batch_norm_backward(f64(x), f64(dy), 1.0, 1e-5)
    check(dx, 0.5 * dx_ref + old_dx, torch.float32, "dx")
    check(dscale, 2.0 * ds_ref + 0.5 * 2.0, torch.float32, "dscale")
    check(dbias, 2.0 * db_ref - 0.5, torch.float32, "dbias")


# -- layer / RMS / group norm ----------------------------------------------------------------
@pytest.mark.parametrize("norm_ndim", [1, 3])
@pytest.mark.parametrize("layout,dtype", [("NCHW", "float32"), ("NHWC", "bfloat16"), ("strided", "float16")])
@pytest.mark.parametrize("long_rows", [False, True], ids=["registers", "looped"])
def test_layer_and_rms_norm(norm_ndim, layout, dtype, long_rows, rng, monkeypatch):
    if long_rows:
        monkeypatch.setattr(norms, "MAX_TILE", 4)
    dt = DTYPES[dtype]
    shape = (3, 4, 3, 5)
    x = make(shape, layout, dt, rng=rng, scale=2.0)
    x.add_(1.0)
    pshape = shape[4 - norm_ndim:]
    lead = shape[:4 - norm_ndim]
    scale = torch.as_tensor(rng.standard_normal(pshape), dtype=torch.float32, device=DEVICE)
    bias = torch.as_tensor(rng.standard_normal(pshape), dtype=torch.float32, device=DEVICE)
    y = poisoned(shape, layout, dt)
    mean = torch.full(lead, float("nan"), device=DEVICE)
    inv = torch.full(lead, float("nan"), device=DEVICE)
    norms.layer_norm_forward(x, y, scale, bias, mean, inv, norm_ndim, 1e-5, 1.0, 0.0)
    y_ref, mean_ref, inv_ref = ref_norm.layer_norm(f64(x), f64(scale), f64(bias), norm_ndim, 1e-5)
    check(y, y_ref, dt, "y", scale=2.0)
    check(mean, mean_ref, torch.float32, "mean")
    check(inv, inv_ref, torch.float32, "inv_std")
    dy = make(shape, layout, dt, rng=rng)
    dx = poisoned(shape, layout, dt)
    dscale = torch.full(pshape, float("nan"), device=DEVICE)
    dbias = torch.full(pshape, float("nan"), device=DEVICE)
    norms.layer_norm_backward(x, dy, dx, scale, dscale, dbias, mean, inv, norm_ndim, 1.0, 0.0)
    dx_ref, ds_ref, db_ref = ref_norm.layer_norm_backward(f64(x), f64(dy), f64(scale), norm_ndim, 1e-5)
    check(dx, dx_ref, dt, "dx", scale=3.0)
    check(dscale, ds_ref, dt if dt != torch.float64 else torch.float32, "dscale", scale=2.0)
    check(dbias, db_ref, dt if dt != torch.float64 else torch.float32, "dbias")

    y = poisoned(shape, layout, dt)
    norms.rms_norm_forward(x, y, scale, inv, norm_ndim, 1e-5, 1.0, 0.0)
    y_ref, inv_ref = ref_norm.rms_norm(f64(x), f64(scale), norm_ndim, 1e-5)
    check(y, y_ref, dt, "rms y", scale=2.0)
    check(inv, inv_ref, torch.float32, "inv_rms")
    dx = poisoned(shape, layout, dt)
    norms.rms_norm_backward(x, dy, dx, scale, dscale, None, norm_ndim, 1.0, 0.0, epsilon=1e-5)
    dx_ref, ds_ref = ref_norm.rms_norm_backward(f64(x), f64(dy), f64(scale), norm_ndim, 1e-5)
    check(dx, dx_ref, dt, "rms dx", scale=3.0)
    check(dscale, ds_ref, dt if dt != torch.float64 else torch.float32, "rms dscale", scale=2.0)


@pytest.mark.parametrize("one_pass", [False, True], ids=["two-pass", "one-pass"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_row_norms_several_rows_per_program(one_pass, dtype, rng, monkeypatch):
    """Rows of 1024 < K <= MAX_TILE take the kernel that loops over ROWS_PER_PROGRAM rows
    (3 here, so the last program has one row of 7); statistics both ways, with blending."""
    calls = []
    monkeypatch.setattr(norms, "ROW_FORWARD", "rows")  # (layer norm's default is the ahead kernel)
    monkeypatch.setattr(norms, "ROWS_PER_PROGRAM", 3)
    monkeypatch.setattr(norms, "ONE_PASS_STATS", one_pass)
    monkeypatch.setattr(norms, "_row_norm_rows_kernel", _Recorder(norms._row_norm_rows_kernel, "rows", calls))
    dt = DTYPES[dtype]
    R, K = 7, 1100
    x = make((R, K), "NCHW", dt, rng=rng, scale=2.0)
    x.add_(3.0)
    scale = torch.as_tensor(rng.standard_normal(K), dtype=torch.float32, device=DEVICE)
    bias = torch.as_tensor(rng.standard_normal(K), dtype=torch.float32, device=DEVICE)
    y = make((R, K), "NCHW", dt, rng=rng)
    old = f64(y)
    mean = torch.full((R,), float("nan"), device=DEVICE)
    inv = torch.full((R,), float("nan"), device=DEVICE)
    norms.layer_norm_forward(x, y, scale, bias, mean, inv, 1, 1e-5, 1.5, 0.5)
    y_ref, mean_ref, inv_ref = ref_norm.layer_norm(f64(x), f64(scale), f64(bias), 1, 1e-5)
    check(y, 1.5 * y_ref + 0.5 * old, dt, "y", scale=2.0)
    check(mean, mean_ref, torch.float32, "mean")
    check(inv, inv_ref, torch.float32, "inv_std")
    y = poisoned((R, K), "NCHW", dt)
    norms.rms_norm_forward(x, y, scale, inv, 1, 1e-5, 1.0, 0.0)
    y_ref, inv_ref = ref_norm.rms_norm(f64(x), f64(scale), 1, 1e-5)
    check(y, y_ref, dt, "rms y", scale=2.0)
    check(inv, inv_ref, torch.float32, "inv_rms")
    assert calls == ["rows", "rows"]


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("layout,dtype", [("NCHW", "float32"), ("NHWC", "bfloat16"), ("strided", "float32")])
def test_group_norm(groups, layout, dtype, rng):
    dt = DTYPES[dtype]
    shape = (2, 6, 3, 5)
    x = make(shape, layout, dt, rng=rng, scale=2.0)
    scale = torch.as_tensor(rng.standard_normal(6), dtype=torch.float32, device=DEVICE)
    bias = torch.as_tensor(rng.standard_normal(6), dtype=torch.float32, device=DEVICE)
    y = poisoned(shape, layout, dt)
    mean = torch.full((2, groups), float("nan"), device=DEVICE)
    inv = torch.full((2, groups), float("nan"), device=DEVICE)
    norms.group_norm_forward(x, y, scale, bias, mean, inv, groups, 1e-5, 1.0, 0.0)
    y_ref, mean_ref, inv_ref = ref_norm.group_norm(f64(x), f64(scale), f64(bias), groups, 1e-5)
    check(y, y_ref, dt, "y", scale=2.0)
    check(mean, mean_ref, torch.float32, "mean")
    check(inv, inv_ref, torch.float32, "inv_std")
    dy = make(shape, layout, dt, rng=rng)
    dx = make(shape, layout, dt, rng=rng)
    old = f64(dx)
    dscale = torch.full((6,), float("nan"), device=DEVICE)
    dbias = torch.full((6,), float("nan"), device=DEVICE)
    norms.group_norm_backward(x, dy, dx, scale, dscale, dbias, mean, inv, groups, 1.0, 1.0)
    dx_ref, ds_ref, db_ref = ref_norm.group_norm_backward(f64(x), f64(dy), f64(scale), groups, 1e-5)
    check(dx, dx_ref + old, dt, "dx", scale=3.0)
    check(dscale, ds_ref, dt, "dscale")
    check(dbias, db_ref, dt, "dbias")


@pytest.mark.parametrize("design", ["always", "never"], ids=["split", "fused"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("saved", [True, False], ids=["saved", "recomputed"])
def test_group_norm_designs(design, layout, saved, rng, monkeypatch):
    """Both group-norm designs in both layouts; the split design with several splits per
    sample (a short last one) and backward statistics given or recomputed."""
    monkeypatch.setattr(norms, "GROUP_NORM_SPLIT", design)
    monkeypatch.setattr(group_norm_coop, "GROUP_NORM_COOP", "never")  # (its own tests: test_cuda_group_norm_coop)
    monkeypatch.setattr(norms, "SPLITS_PER_SAMPLE", 4)
    monkeypatch.setattr(norms, "GN_TILE", 16)
    shape, groups = (2, 8, 5, 7), 4
    x = make(shape, layout, rng=rng, scale=2.0)
    x.add_(3.0)
    scale = torch.as_tensor(rng.standard_normal(8), dtype=torch.float32, device=DEVICE)
    bias = torch.as_tensor(rng.standard_normal(8), dtype=torch.float32, device=DEVICE)
    y = make(shape, layout, rng=rng)
    old_y = f64(y)
    mean = torch.full((2, groups), float("nan"), device=DEVICE)
    inv = torch.full((2, groups), float("nan"), device=DEVICE)
    norms.group_norm_forward(x, y, scale, bias, mean, inv, groups, 1e-5, 2.0, 0.5)
    y_ref, mean_ref, inv_ref = ref_norm.group_norm(f64(x), f64(scale), f64(bias), groups, 1e-5)
    check(y, 2.0 * y_ref + 0.5 * old_y, torch.float32, "y", scale=2.0)
    check(mean, mean_ref, torch.float32, "mean")
    check(inv, inv_ref, torch.float32, "inv_std")
    dy = make(shape, layout, rng=rng)
    dx = poisoned(shape, layout)
    dscale = torch.full((8,), float("nan"), device=DEVICE)
    dbias = torch.full((8,), float("nan"), device=DEVICE)
    stats = (mean, inv) if saved else (None, None)
    norms.group_norm_backward(x, dy, dx, scale, dscale, dbias, *stats, groups, 1.0, 0.0)
    dx_ref, ds_ref, db_ref = ref_norm.group_norm_backward(f64(x), f64(dy), f64(scale), groups, 1e-5)
    check(dx, dx_ref, torch.float32, "dx", scale=3.0)
    check(dscale, ds_ref, torch.float32, "dscale")
    check(dbias, db_ref, torch.float32, "dbias")


# -- LRN ---------------------------------------------------------------------------------
@pytest.mark.parametrize("lrn_n", [1, 2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_lrn(lrn_n, layout, rng):
    shape = (2, 7, 3, 4)
    x = make(shape, layout, rng=rng, scale=3.0)
    y = poisoned(shape, layout)
    lrn.lrn_cross_channel_forward(x, y, lrn_n, 1e-2, 0.75, 2.0, 1.0, 0.0)
    y_ref = np.empty(shape)
    cpu_lrn.lrn_cross_channel_forward(f64(x), y_ref, lrn_n, 1e-2, 0.75, 2.0, 1.0, 0.0)
    check(y, y_ref, torch.float32, "y")
    dy = make(shape, layout, rng=rng)
    dx = poisoned(shape, layout)
    lrn.lrn_cross_channel_backward(y, dy, x, dx, lrn_n, 1e-2, 0.75, 2.0, 1.0, 0.0)
    dx_ref = np.empty(shape)
    cpu_lrn.lrn_cross_channel_backward(f64(y), f64(dy), f64(x), dx_ref, lrn_n, 1e-2, 0.75, 2.0, 1.0, 0.0)
    check(dx, dx_ref, torch.float32, "dx")


# -- dropout -----------------------------------------------------------------------------
# (shape, offset): offsets that are multiples of 4 take the grouped kernels (one Philox
# call per 4 elements; NHWC and strided through the inner-dim tiling when W % 4 == 0),
# the rest one call per element; all must draw the NumPy backend's mask
DROPOUT_CASES = [((3, 5, 4, 6), 77), ((2, 5, 3, 8), 2**40 + 4), ((2, 3, 4, 6), 2**64 - 8),
                 ((1, 3, 2, 12), 5)]


@pytest.mark.parametrize("shape,offset", DROPOUT_CASES, ids=["W6-odd", "W8-aligned", "wraps", "W12-odd"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_dropout_matches_the_numpy_mask_and_reproduces(layout, shape, offset, rng):
    x = make(shape, layout, rng=rng)
    y = poisoned(shape, layout)
    reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
    seed = 2**40 + 12345
    dropout.dropout_forward(x, y, reserve, 0.3, seed, offset)
    mask = cpu_dropout.dropout_mask(shape, 0.3, seed, offset)
    np.testing.assert_array_equal(reserve.cpu().numpy(), mask)
    check(y, np.where(mask == 1, f64(x) / 0.7, 0.0), torch.float32, "y")
    again = torch.empty_like(reserve)
    dropout.dropout_forward(x, poisoned(shape, "NCHW"), again, 0.3, seed, offset)
    assert torch.equal(again, reserve)
    other = torch.empty_like(reserve)
    dropout.dropout_forward(x, poisoned(shape, "NCHW"), other, 0.3, seed + 1, offset)
    assert not torch.equal(other, reserve)
    dy = make(shape, layout, rng=rng)
    dx = poisoned(shape, layout)
    dropout.dropout_backward(dy, dx, reserve, 0.3)
    check(dx, np.where(mask == 1, f64(dy) / 0.7, 0.0), torch.float32, "dx")


TILE_KERNELS = {"split": "_dropout_split_kernel", "join": "_dropout_join_kernel", "reload": "_dropout_tile_kernel"}


@pytest.mark.parametrize("layout,kernel", [("NCHW", "_dropout_flat_kernel"), ("NHWC", "_dropout_split_kernel"),
                                           ("strided", "_dropout_split_kernel")])
def test_dropout_takes_the_grouped_kernels(layout, kernel, rng, monkeypatch):
    """Aligned offsets and W % 4 == 0 must not fall back to one Philox call per element.
    (NCHW through the groups4 flat kernel here; vec8, the default, draws the same mask:
    test_cuda_norms_dropout_fast.)"""
    calls = []
    monkeypatch.setattr(dropout, "FLAT_KERNEL", "groups4")
    monkeypatch.setattr(dropout, "NHWC_DRAW", "split")
    for name in ("_dropout_flat_kernel", *TILE_KERNELS.values(), "_dropout_element_kernel"):
        real = getattr(dropout, name)
        monkeypatch.setattr(dropout, name, _Recorder(real, name, calls))
    shape = (2, 3, 2, 8)
    x = make(shape, layout, rng=rng)
    reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x, poisoned(shape, layout), reserve, 0.5, 3, 16)
    dropout.dropout_backward(x, poisoned(shape, layout), reserve, 0.5)
    assert calls == [kernel, kernel]
    np.testing.assert_array_equal(reserve.cpu().numpy(), cpu_dropout.dropout_mask(shape, 0.5, 3, 16))
    if layout != "NCHW":  # the split kernel with more warps: the same mask
        monkeypatch.setattr(dropout, "SPLIT_THREAD_ELEMENTS", 1)
        again = torch.empty_like(reserve)
        dropout.dropout_forward(x, poisoned(shape, layout), again, 0.5, 3, 16)
        assert torch.equal(again, reserve)
        monkeypatch.setattr(dropout, "SPLIT_THREAD_ELEMENTS", 32)
        del calls[2:]
    if layout != "NCHW":  # one design per direction
        monkeypatch.setattr(dropout, "NHWC_DRAW", {"forward": "join", "backward": "reload"})
        dropout.dropout_forward(x, poisoned(shape, layout), reserve, 0.5, 3, 16)
        dropout.dropout_backward(x, poisoned(shape, layout), reserve, 0.5)
        assert calls[2:] == ["_dropout_join_kernel", "_dropout_tile_kernel"]


@pytest.mark.parametrize("merge_w", [True, False], ids=["HW-merged", "W-alone"])
@pytest.mark.parametrize("draw", [*TILE_KERNELS, "split-keep-from-word"])
@pytest.mark.parametrize("layout", ["NHWC", "strided"])
@pytest.mark.parametrize("aligned", [True, False], ids=["int32-mask", "byte-mask"])
def test_dropout_tile_designs_draw_the_nchw_mask(draw, layout, aligned, merge_w, rng, monkeypatch):
    """Every NHWC_DRAW design draws, bit for bit, the mask of the same tensor in NCHW
    (the flat kernel) and of the NumPy backend, and its backward reads it back; several
    tiles along W, the inner dim and the outer dims, with ragged edges (W = 20 is 5
    groups of 4 in tiles of 2, H x W merged 15 groups; 5 channels in tiles of 4).
    ``aligned`` False hands a reserve whose first byte is not 4-byte aligned (the split
    design then stores bytes). ``merge_w``: dropout.MERGE_W. The NCHW side takes the
    groups4 flat kernel (vec8, the default, draws the same mask: test_cuda_norms_dropout_fast)."""
    calls = []
    monkeypatch.setattr(dropout, "FLAT_KERNEL", "groups4")
    if draw == "split-keep-from-word":  # the split kernel with SPLIT_KEEP_FROM_WORD
        draw = "split"
        monkeypatch.setattr(dropout, "SPLIT_KEEP_FROM_WORD", True)
    monkeypatch.setattr(dropout, "NHWC_DRAW", draw)
    monkeypatch.setattr(dropout, "MERGE_W", merge_w)
    monkeypatch.setattr(dropout, "TILE_W", 8)
    monkeypatch.setattr(dropout, "TILE_ELEMENTS", 32)
    for name in ("_dropout_flat_kernel", *TILE_KERNELS.values(), "_dropout_element_kernel"):
        monkeypatch.setattr(dropout, name, _Recorder(getattr(dropout, name), name, calls))
    shape, seed, offset = (2, 5, 3, 20), 2**33 + 7, 2**40 + 12
    numel = int(np.prod(shape))
    x = make(shape, layout, rng=rng)
    assert dropout._tile_plan(x, x)["W"] == (60 if merge_w else 20)
    nchw = torch.empty(numel, dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x.contiguous(), poisoned(shape, "NCHW"), nchw, 0.4, seed, offset)
    buf = torch.full((numel + 4,), 7, dtype=torch.uint8, device=DEVICE)
    reserve = buf[:numel] if aligned else buf[1:numel + 1]
    assert (reserve.data_ptr() % 4 == 0) == aligned
    y = poisoned(shape, layout)
    dropout.dropout_forward(x, y, reserve, 0.4, seed, offset)
    assert calls == ["_dropout_flat_kernel", TILE_KERNELS[draw]]
    assert torch.equal(reserve, nchw)
    np.testing.assert_array_equal(reserve.cpu().numpy(), cpu_dropout.dropout_mask(shape, 0.4, seed, offset).reshape(-1))
    mask = reserve.cpu().numpy().reshape(shape)
    assert 0 < mask.sum() < numel
    check(y, np.where(mask == 1, f64(x) / 0.6, 0.0), torch.float32, "y")
    dy = make(shape, layout, rng=rng)
    dx = poisoned(shape, layout)
    dropout.dropout_backward(dy, dx, reserve, 0.4)
    check(dx, np.where(mask == 1, f64(dy) / 0.6, 0.0), torch.float32, "dx")
    assert calls[-1] == TILE_KERNELS[draw]
    untouched = buf[numel:] if aligned else torch.cat([buf[:1], buf[numel + 1:]])
    assert (untouched == 7).all()  # no byte outside the reserve's numel was written


@pytest.mark.parametrize("draw", list(TILE_KERNELS))
def test_dropout_tile_w_merge_stops_where_runs_break(draw, rng, monkeypatch):
    """MERGE_W merges H into W only where every tensor steps over H as W's run: an NHWC
    view cut along W (stride of H = 20 C, W = 16) keeps W alone, an NHWC output whose H
    does run on still gets the source's plan; the mask is NCHW's, bit for bit."""
    monkeypatch.setattr(dropout, "NHWC_DRAW", draw)
    monkeypatch.setattr(dropout, "TILE_W", 8)
    monkeypatch.setattr(dropout, "TILE_ELEMENTS", 32)
    big = make((2, 5, 3, 20), "NHWC", rng=rng)
    x = big[..., :16]
    y = poisoned((2, 5, 3, 16), "NHWC")
    assert dropout._tile_plan(x, y)["W"] == 16
    assert dropout._tile_plan(y, y)["W"] == 48
    nchw = torch.empty(x.numel(), dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x.contiguous(), poisoned(x.shape, "NCHW"), nchw, 0.3, 5, 8)
    reserve = torch.empty_like(nchw)
    dropout.dropout_forward(x, y, reserve, 0.3, 5, 8)
    assert torch.equal(reserve, nchw)
    mask = reserve.cpu().numpy().reshape(x.shape)
    check(y, np.where(mask == 1, f64(x) / 0.7, 0.0), torch.float32, "y")


class _Recorder:
    """kernel[grid](...) that records the kernel's name before launching it."""

    def __init__(self, kernel, name, calls):
        self.kernel, self.name, self.calls = kernel, name, calls

    def __getitem__(self, grid):
        self.calls.append(self.name)
        return self.kernel[grid]


# -- tensor ops --------------------------------------------------------------------------
@pytest.mark.parametrize("src_layout,dst_layout", [("NCHW", "NHWC"), ("NHWC", "NCHW"), ("strided", "NCHW"),
                                                   ("NCHW", "NCHW")])
def test_transform_tensor(src_layout, dst_layout, rng):
    shape = (2, 5, 3, 70)
    x = make(shape, src_layout, rng=rng)
    y = make(shape, dst_layout, torch.float16, rng=rng)
    old = f64(y)
    tensor_ops.transform_tensor(x, y, 2.0, 0.5)
    check(y, 2.0 * f64(x) + 0.5 * old, torch.float16, "y")


def test_set_scale_add_tensor(rng):
    y = make((2, 3, 4, 5), "strided", rng=rng)
    tensor_ops.set_tensor(y, 1.25)
    np.testing.assert_array_equal(f64(y), np.full((2, 3, 4, 5), 1.25))
    tensor_ops.scale_tensor(y, -2.0)
    np.testing.assert_array_equal(f64(y), np.full((2, 3, 4, 5), -2.5))
    bias = make((1, 3, 1, 1), "NCHW", rng=rng)
    tensor_ops.add_tensor(bias.expand(2, 3, 4, 5), y, 2.0, 1.0)
    check(y, -2.5 + 2.0 * np.broadcast_to(f64(bias), (2, 3, 4, 5)), torch.float32, "c")


@pytest.mark.parametrize("op", range(6), ids=["ADD", "MUL", "MIN", "MAX", "SQRT", "NOT"])
def test_op_tensor(op, rng):
    shape = (2, 3, 4, 5)
    a = make(shape, "NHWC", rng=rng)
    if op == 4:
        a.abs_()
    b = make((1, 3, 1, 5), "NCHW", rng=rng)
    a_np, b_np = 1.5 * f64(a), 0.5 * np.broadcast_to(f64(b), shape)
    a_np[0, 0, 0, 0] = np.nan if op in (2, 3) else a_np[0, 0, 0, 0]
    if op in (2, 3):
        a[0, 0, 0, 0] = float("nan")
    c = make(shape, "NCHW", rng=rng)
    old = f64(c)
    tensor_ops.op_tensor(a, b.expand(shape), c, op, 1.5, 0.5, 1.0, False)
    ref = [a_np + b_np, a_np * b_np, np.fmin(a_np, b_np), np.fmax(a_np, b_np), np.sqrt(a_np), 1 - a_np][op] + old
    check(c, ref, torch.float32, "c")


@pytest.mark.parametrize("op", range(9), ids=["ADD", "MUL", "MIN", "MAX", "AMAX", "AVG", "NORM1", "NORM2",
                                               "MUL_NO_ZEROS"])
@pytest.mark.parametrize("c_shape", [(3, 1, 5, 1), (1, 1, 1, 1), (1, 4, 5, 6)])
def test_reduce_tensor(op, c_shape, rng):
    shape = (3, 4, 5, 6)
    values = rng.standard_normal(shape) * 0.9
    values[values.__abs__() < 0.1] = 0.0
    a = make(shape, "NHWC", values=values)
    c = poisoned(c_shape, "NCHW")
    indexed = op in (2, 3, 4)
    idx = torch.full(c_shape, -1, dtype=torch.int32, device=DEVICE) if indexed else None
    tensor_ops.reduce_tensor(a, c, idx, None, op, 1.0, 0.0, False)
    axes = tuple(i for i in range(4) if c_shape[i] == 1)
    v = np.abs(values) if op in (4, 6) else values
    ref = {0: lambda: v.sum(axes, keepdims=True), 1: lambda: v.prod(axes, keepdims=True),
           2: lambda: v.min(axes, keepdims=True), 3: lambda: v.max(axes, keepdims=True),
           4: lambda: v.max(axes, keepdims=True), 5: lambda: v.mean(axes, keepdims=True),
           6: lambda: v.sum(axes, keepdims=True), 7: lambda: np.sqrt((v * v).sum(axes, keepdims=True)),
           8: lambda: np.where(v == 0, 1.0, v).prod(axes, keepdims=True)}[op]()
    check(c, ref, torch.float32, "c")
    if indexed:
        kept = [i for i in range(4) if i not in axes]
        rows = np.transpose(v, kept + list(axes)).reshape(*[shape[i] for i in kept], -1)
        want = (rows.argmin(-1) if op == 2 else rows.argmax(-1)).reshape(-1)
        got = idx.permute(*kept, *axes).reshape(-1).cpu().numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", tensor_ops.SPLIT_OPS, ids=lambda op: ["ADD", "MUL", "", "", "", "AVG", "NORM1", "NORM2",
                                                                     "MUL_NO_ZEROS"][op])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("combine,stages", [("kernel", None), ("last", None), ("kernel", 2)])
def test_reduce_split_rows_combine(op, dtype, combine, stages, rng, monkeypatch):
    """NHWC over H, W with the rows cut into parts (forced: 4 positions a step, 3 parts
    of 12, 12 and 6 positions): partials, then the combine kernel or (SPLIT_COMBINE
    "last") the program with the last ticket, with alpha and beta; twice, so the
    ticket counters must come back to zero."""
    calls = []
    monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_BLOCK_R", 4)
    monkeypatch.setattr(tensor_ops, "REDUCE_SPLIT", 3)
    monkeypatch.setattr(tensor_ops, "SPLIT_COMBINE", combine)
    monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_STAGES", stages)  # tl.range's pipelining (GPU only)
    monkeypatch.setattr(tensor_ops, "_COUNTERS", {})
    monkeypatch.setattr(tensor_ops, "_combine_kernel", _Recorder(tensor_ops._combine_kernel, "combine", calls))
    monkeypatch.setattr(tensor_ops, "GLUON_STREAM", False)  # on a Hopper GPU ADD/AVG go to gluon_stream instead
    shape = (3, 4, 5, 6)
    values = rng.standard_normal(shape) * 0.9
    values[np.abs(values) < 0.1] = 0.0
    a = make(shape, "NHWC", dtype, values=values)
    v = np.abs(values) if op == 6 else values
    ref = {0: lambda: v.sum((2, 3), keepdims=True), 1: lambda: v.prod((2, 3), keepdims=True),
           5: lambda: v.mean((2, 3), keepdims=True), 6: lambda: v.sum((2, 3), keepdims=True),
           7: lambda: np.sqrt((v * v).sum((2, 3), keepdims=True)),
           8: lambda: np.where(v == 0, 1.0, v).prod((2, 3), keepdims=True)}[op]()
    for _ in range(2):
        c = make((3, 4, 1, 1), "NCHW", dtype, rng=rng)
        old = f64(c)
        tensor_ops.reduce_tensor(a, c, None, None, op, 2.0, 0.5, False)
        check(c, 2.0 * ref + 0.5 * old, dtype, "c")
    assert calls == (["combine"] * 2 if combine == "kernel" else [])
    counters = [t for bufs in tensor_ops._COUNTERS.values() for t in bufs]
    assert len(counters) == (1 if combine == "last" else 0)
    assert all(int(t.abs().sum()) == 0 for t in counters)


def test_reduce_split_is_not_taken_for_indices_or_contiguous_rows(rng, monkeypatch):
    """MIN/MAX/AMAX (indices) and NCHW rows keep one program per row block."""
    calls = []
    monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_BLOCK_R", 4)
    monkeypatch.setattr(tensor_ops, "REDUCE_SPLIT", 3)
    monkeypatch.setattr(tensor_ops, "_combine_kernel", _Recorder(tensor_ops._combine_kernel, "combine", calls))
    shape = (2, 3, 4, 5)
    values = rng.standard_normal(shape)
    for layout, op in (("NHWC", 3), ("NCHW", 0)):
        c = poisoned((2, 3, 1, 1), "NCHW")
        tensor_ops.reduce_tensor(make(shape, layout, values=values), c, None, None, op, 1.0, 0.0, False)
        check(c, values.max((2, 3), keepdims=True) if op == 3 else values.sum((2, 3), keepdims=True),
              torch.float32, layout)
    assert calls == []


@pytest.mark.parametrize("split,combine", [(None, "kernel"), (2, "kernel"), (2, "last")])
def test_adaptive_average_pool_to_1x1_nhwc_split(split, combine, rng, monkeypatch):
    """Global average pooling of NHWC is the split row reduction (forced into 2 parts;
    combined by the second kernel or by the last program)."""
    monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_BLOCK_R", 8)
    monkeypatch.setattr(tensor_ops, "REDUCE_SPLIT", split)
    monkeypatch.setattr(tensor_ops, "SPLIT_COMBINE", combine)
    monkeypatch.setattr(tensor_ops, "GLUON_STREAM", False)  # (a Hopper GPU's route: test_gluon_stream_routing)
    x = make((2, 6, 5, 7), "NHWC", rng=rng)
    y = poisoned((2, 6, 1, 1), "NHWC")
    pooling.adaptive_pooling_forward(x, y, 1, 1.0, 0.0)
    check(y, f64(x).mean((2, 3), keepdims=True), torch.float32, "y")


@pytest.mark.parametrize("propagate", [False, True])
def test_reduce_max_nan(propagate):
    a = torch.tensor([[1.0, float("nan"), 3.0, 3.0], [float("nan")] * 4], device=DEVICE)
    c = torch.empty(2, 1, device=DEVICE)
    idx = torch.empty(2, 1, dtype=torch.int32, device=DEVICE)
    tensor_ops.reduce_tensor(a, c, idx, None, 3, 1.0, 0.0, propagate)
    got = f64(c)[:, 0]
    if propagate:
        assert np.isnan(got).all() and idx[:, 0].tolist() == [1, 0]
    else:
        assert got[0] == 3.0 and np.isnan(got[1]) and idx[0, 0].item() == 2


# -- errors ------------------------------------------------------------------------------
def test_bad_inputs_raise_before_writing():
    x = torch.ones(2, 3, 4, 4, device=DEVICE)
    y = torch.full((2, 3, 2, 2), 7.0, device=DEVICE)
    with pytest.raises(BadParamError, match="pooling mode"):
        pooling.pooling_forward(x, y, 9, (2, 2), (0, 0), (2, 2), False, 1.0, 0.0)
    with pytest.raises(BadParamError, match="dtype mismatch"):
        pooling.pooling_forward(x, y.half(), 0, (2, 2), (0, 0), (2, 2), False, 1.0, 0.0)
    with pytest.raises(BadParamError, match="softmax algorithm"):
        softmax.softmax_forward(x, x.clone(), algorithm=7, mode=1)
    with pytest.raises(BadParamError, match="groups=4"):
        norms.group_norm_forward(x, x.clone(), torch.ones(3), torch.ones(3), None, None, 4, 1e-5)
    with pytest.raises(BadParamError, match="dropout probability"):
        dropout.dropout_forward(x, x.clone(), torch.empty(96, dtype=torch.uint8), 1.0, 0, 0)
    with pytest.raises(BadParamError, match="reduce op"):
        tensor_ops.reduce_tensor(x, y, None, None, 11)
    with pytest.raises(BadParamError, match="cannot broadcast"):
        tensor_ops.add_tensor(torch.ones(1, 2, 1, 1), x)
    with pytest.raises(BadParamError, match="lrn n"):
        lrn.lrn_cross_channel_forward(x, x.clone(), 17, 1e-4, 0.75, 2.0)
    assert (y == 7.0).all()


# -- through the public API (Handle(device="cpu", backend="triton") vs the NumPy backend) ---------
@pytest.mark.skipif(ON_GPU, reason="the interpreter path is what this compares")
def test_public_api_matches_the_numpy_backend(rng):
    import tridnn
    from tridnn.api import activation as api_act
    from tridnn.api import pooling as api_pool
    from tridnn.api import softmax as api_softmax
    from tridnn.descriptors import TensorDescriptor
    from tridnn.descriptors.pooling import PoolingDescriptor
    from tridnn.types import TensorFormat

    numpy_handle = tridnn.Handle(device="cpu")
    triton_handle = tridnn.Handle(device="cpu", backend="triton")
    x_desc = TensorDescriptor.packed((2, 3, 6, 6), "float32", TensorFormat.NHWC)
    x = rng.integers(-3, 4, size=(2, 6, 6, 3)).astype(np.float32)  # raw NHWC buffer
    pool = PoolingDescriptor(mode=0, window=3, padding=1, stride=2)
    y_dims = api_pool.get_pooling_forward_output_dim(pool, x_desc)
    y_desc = TensorDescriptor.packed(y_dims, "float32", TensorFormat.NHWC)
    results = []
    for handle in (numpy_handle, triton_handle):
        y = np.full((y_dims[0], *y_dims[2:], y_dims[1]), np.nan, np.float32)
        api_pool.pooling_forward(handle, pool, 1.0, x_desc, x, 0.0, y_desc, y)
        s = np.full_like(x, np.nan)
        api_softmax.softmax_forward(handle, 1, 1, 1.0, x_desc, x, 0.0, x_desc, s)
        a = np.full_like(x, np.nan)
        api_act.activation_forward(handle, ActivationDescriptor(mode="gelu"), 1.0, x_desc, x, 0.0, x_desc, a)
        results.append((y, s, a))
    for got, want in zip(results[1], results[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- full size on the GPU -----------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_gpu_full_size_layers(layout, monkeypatch):
    """The benchmark shapes (64x256x56x56 bf16) against float64 torch on the GPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (64, 256, 56, 56)
    x = torch.randn(shape, device="cuda", generator=g).to(torch.bfloat16)
    if layout == "NHWC":
        x = x.contiguous(memory_format=torch.channels_last)
    xd = x.double()
    y = torch.full_like(x, float("nan"))
    activation.activation_forward(x, y, mode=1, coef=0.0, swish_beta=1.0, propagate_nan=False, alpha=1.0, beta=0.0)
    assert torch.equal(y, torch.relu(x))
    y = torch.full((64, 256, 28, 28), float("nan"), device="cuda", dtype=torch.bfloat16)
    pooling.pooling_forward(x, y, 0, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
    assert torch.equal(y, torch.nn.functional.max_pool2d(x, 3, 2, 1))
    dy = torch.randn(y.shape, device="cuda", generator=g).to(torch.bfloat16)
    dx = torch.full_like(x, float("nan"))
    pooling.pooling_backward(y, dy, x, dx, 0, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
    xr = xd.clone().requires_grad_()
    torch.nn.functional.max_pool2d(xr, 3, 2, 1).backward(dy.double())
    err = (dx.double() - xr.grad).abs().max().item()
    assert err <= 2e-2 * max(1.0, xr.grad.abs().max().item())
    ones = torch.ones(1, 256, 1, 1, device="cuda")
    zeros = torch.zeros(1, 256, 1, 1, device="cuda")
    y = torch.full_like(x, float("nan"))
    smean, sinv = torch.empty_like(ones), torch.empty_like(ones)
    batchnorm.batch_norm_forward_training(x, None, y, ones, zeros, None, None, smean, sinv, 1, 0.1, 1e-5, 0, 1.0, 0.0)
    ref = torch.nn.functional.batch_norm(xd, None, None, training=True, eps=1e-5)
    assert (y.double() - ref).abs().max().item() < 0.05
    assert (smean.view(-1).double() - xd.mean((0, 2, 3))).abs().max().item() < 1e-4
    # average pooling forward and backward
    y = torch.full((64, 256, 28, 28), float("nan"), device="cuda", dtype=torch.bfloat16)
    pooling.pooling_forward(x, y, 1, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
    assert (y.double() - torch.nn.functional.avg_pool2d(xd, 3, 2, 1)).abs().max().item() < 2e-2
    dx = torch.full_like(x, float("nan"))
    pooling.pooling_backward(y, dy, x, dx, 1, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
    # reference on an NCHW copy: PyTorch's channels-last CUDA avg_pool2d backward with
    # padding maps inputs to the wrong windows (pytorch/pytorch#188344, torch 2.11 has it)
    xr = xd.clone(memory_format=torch.contiguous_format).requires_grad_()
    torch.nn.functional.avg_pool2d(xr, 3, 2, 1).backward(dy.double())
    assert (dx.double() - xr.grad).abs().max().item() <= 2e-2 * max(1.0, xr.grad.abs().max().item())
    # group norm (32 groups) forward
    y = torch.full_like(x, float("nan"))
    norms.group_norm_forward(x, y, ones.view(-1), zeros.view(-1), None, None, 32, 1e-5, 1.0, 0.0)
    assert (y.double() - torch.nn.functional.group_norm(xd, 32, eps=1e-5)).abs().max().item() < 0.05
    # dropout: the tail of the mask against the NumPy backend's definition, and y there
    reserve = torch.empty(x.numel(), dtype=torch.uint8, device="cuda")
    y = torch.full_like(x, float("nan"))
    dropout.dropout_forward(x, y, reserve, 0.1, 99, 8)
    tail = 4096
    want = cpu_dropout.dropout_mask((tail,), 0.1, 99, 8 + x.numel() - tail)
    np.testing.assert_array_equal(reserve[-tail:].cpu().numpy(), want)
    y_tail = y.contiguous().reshape(-1)[-tail:].double()  # logical order in both layouts
    x_tail = x.contiguous().reshape(-1)[-tail:].double()
    expect = torch.where(torch.as_tensor(want, device="cuda") == 1, x_tail / 0.9, 0.0)
    assert (y_tail - expect).abs().max().item() <= 1e-2 * max(1.0, expect.abs().max().item())
    if layout == "NHWC":  # every NHWC_DRAW design: NCHW's mask and outputs, bit for bit
        xc = x.contiguous()
        y_nchw, dx_nchw = torch.empty_like(xc), torch.empty_like(xc)
        mask_nchw = torch.empty_like(reserve)
        dropout.dropout_forward(xc, y_nchw, mask_nchw, 0.1, 99, 8)
        dropout.dropout_backward(xc, dx_nchw, mask_nchw, 0.1)
        assert torch.equal(mask_nchw, reserve)
        for draw in ("split", "join", "reload", "split-keep-from-word"):
            for merge_w in (True, False):
                monkeypatch.setattr(dropout, "SPLIT_KEEP_FROM_WORD", draw == "split-keep-from-word")
                monkeypatch.setattr(dropout, "NHWC_DRAW", "split" if draw == "split-keep-from-word" else draw)
                monkeypatch.setattr(dropout, "MERGE_W", merge_w)
                got, y, dx = torch.empty_like(reserve), torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
                dropout.dropout_forward(x, y, got, 0.1, 99, 8)
                dropout.dropout_backward(x, dx, got, 0.1)
                assert torch.equal(got, mask_nchw), (draw, merge_w)
                assert torch.equal(y, y_nchw) and torch.equal(dx, dx_nchw), (draw, merge_w)
    # sum over H, W and global average pooling (NHWC: split along H * W, then combined; the
    # Triton kernels, not gluon_stream's route, which test_gluon_stream_routing covers)
    monkeypatch.setattr(tensor_ops, "GLUON_STREAM", False)
    for split, combine, stages in ((None, "kernel", None), (1, "kernel", None), (None, "last", None),
                                   (2, "last", None), (2, "kernel", None), (None, "kernel", 2), (1, "kernel", 3)):
        monkeypatch.setattr(tensor_ops, "REDUCE_SPLIT", split)
        monkeypatch.setattr(tensor_ops, "SPLIT_COMBINE", combine)
        monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_STAGES", stages)
        red = torch.full((64, 256, 1, 1), float("nan"), device="cuda", dtype=torch.bfloat16)
        tensor_ops.reduce_tensor(x, red, None, None, 0, 1.0, 0.0, False)
        ref = xd.sum((2, 3), keepdim=True)
        assert (red.double() - ref).abs().max().item() <= 1e-2 * max(1.0, ref.abs().max().item())
        red.fill_(float("nan"))
        pooling.adaptive_pooling_forward(x, red, 1, 1.0, 0.0)
        ref = xd.mean((2, 3), keepdim=True)
        assert (red.double() - ref).abs().max().item() <= 1e-2 * max(1.0, ref.abs().max().item())
    # gelu forward and backward (float64 torch as the reference), erf and both gelu_cdf
    dy = torch.randn(x.shape, device="cuda", generator=g).to(x.dtype).contiguous(memory_format=torch.channels_last
                                                                              if layout == "NHWC" else
                                                                              torch.contiguous_format)
    ref = torch.ops.aten.gelu_backward(dy.double(), xd)
    for erf in ("exact", "fast", "fast_div"):
        monkeypatch.setattr(activation, "GELU_ERF", erf)
        y = torch.full_like(x, float("nan"))
        activation.activation_forward(x, y, mode=101, coef=0.0, swish_beta=1.0, propagate_nan=False, alpha=1.0,
                                      beta=0.0)
        assert (y.double() - torch.nn.functional.gelu(xd)).abs().max().item() < 2e-2, erf
        dx = torch.full_like(x, float("nan"))
        activation.activation_backward(y, dy, x, dx, mode=101, coef=0.0, swish_beta=1.0, alpha=1.0, beta=0.0)
        assert (dx.double() - ref).abs().max().item() <= 2e-2 * max(1.0, ref.abs().max().item()), erf
    # float32 on the GPU (its ex2/rsqrt units): gelu_cdf within 1.5e-6 per element
    xf = torch.linspace(-12, 12, 1 << 22, device="cuda")
    for erf in ("fast", "fast_div"):
        monkeypatch.setattr(activation, "GELU_ERF", erf)
        yf, dxf = torch.empty_like(xf), torch.empty_like(xf)
        activation.activation_forward(xf, yf, mode=101, coef=0.0, swish_beta=1.0, propagate_nan=False, alpha=1.0,
                                      beta=0.0)
        activation.activation_backward(yf, torch.ones_like(xf), xf, dxf, mode=101, coef=0.0, swish_beta=1.0,
                                       alpha=1.0, beta=0.0)
        xfd = xf.double()
        want_y = torch.nn.functional.gelu(xfd)
        want_d = torch.ops.aten.gelu_backward(torch.ones_like(xfd), xfd)
        assert ((yf.double() - want_y).abs() / want_y.abs().clamp(min=1)).max().item() < 1.5e-6, erf
        assert ((dxf.double() - want_d).abs() / want_d.abs().clamp(min=1)).max().item() < 1.5e-6, erf


@pytest.mark.gpu
@pytest.mark.parametrize("rows,one_pass", [(None, False), (1, False), (None, True)],
                         ids=["default", "one-row", "one-pass"])
def test_gpu_full_size_rows(rows, one_pass, monkeypatch):
    """Softmax and the row norms on 32768 x 4096 bf16 against float64 torch."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    g = torch.Generator(device="cuda").manual_seed(1)
    x = (torch.randn(32768, 4096, device="cuda", generator=g) * 3).to(torch.bfloat16)
    xd = x.double()
    y = torch.full_like(x, float("nan"))
    softmax.softmax_forward(x, y, algorithm=1, mode=1, alpha=1.0, beta=0.0)
    assert (y.double() - torch.softmax(xd, 1)).abs().max().item() < 1e-2
    w = torch.randn(4096, device="cuda", generator=g)
    b = torch.randn(4096, device="cuda", generator=g)
    if rows is not None:
        monkeypatch.setattr(norms, "ROWS_PER_PROGRAM", rows)
    monkeypatch.setattr(norms, "ONE_PASS_STATS", one_pass)
    mean, inv = torch.full((32768,), float("nan"), device="cuda"), torch.full((32768,), float("nan"), device="cuda")
    norms.layer_norm_forward(x, y, w, b, mean, inv, 1, 1e-5, 1.0, 0.0)
    ref = torch.nn.functional.layer_norm(xd, (4096,), w.double(), b.double(), 1e-5)
    assert (y.double() - ref).abs().max().item() < 0.1
    assert (mean.double() - xd.mean(1)).abs().max().item() < 1e-4
    assert (inv.double() - 1 / (xd.var(1, unbiased=False) + 1e-5).sqrt()).abs().max().item() < 1e-4
    y.fill_(float("nan"))
    norms.rms_norm_forward(x, y, w, inv, 1, 1e-5, 1.0, 0.0)
    ref = xd / (xd.square().mean(1, keepdim=True) + 1e-5).sqrt() * w.double()
    assert (y.double() - ref).abs().max().item() < 0.1


@pytest.mark.gpu
@pytest.mark.parametrize("packed", [False, True], ids=["cl", "cl_packed_max"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(64, 256, 56, 56), (3, 37, 29, 31)], ids=["bench", "ragged"])
def test_gpu_pooling_channels_last_rows(packed, dtype, shape, monkeypatch):
    """pooling.CL_KERNELS (and its packed max, which only runs on the GPU) on channels-last
    tensors: max y and dx bit for bit equal to the gather kernels' (the first-maximum
    rule, NaN with and without propagation), y equal to PyTorch's max_pool2d; average
    pooling against float64 PyTorch."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    dt = DTYPES[dtype]
    g = torch.Generator(device="cuda").manual_seed(1)
    cl = torch.channels_last
    x = torch.randint(-4, 5, shape, device="cuda", generator=g).to(dt).contiguous(memory_format=cl)  # ties
    oh, ow = (shape[2] - 1) // 2 + 1, (shape[3] - 1) // 2 + 1
    dy = torch.randn((shape[0], shape[1], oh, ow), device="cuda", generator=g).to(dt).contiguous(memory_format=cl)
    xnan = x.clone()
    xnan.permute(0, 2, 3, 1).view(-1)[torch.randint(0, x.numel(), (x.numel() // 50,), device="cuda",
                                                    generator=g)] = float("nan")

    def run(design, mode, xin, propagate=False):
        monkeypatch.setattr(pooling, "CL_KERNELS", design)
        monkeypatch.setattr(pooling, "CL_PACKED_MAX", packed and design)
        y = torch.full(dy.shape, float("nan"), device="cuda", dtype=dt).contiguous(memory_format=cl)
        dx = torch.full(shape, float("nan"), device="cuda", dtype=dt).contiguous(memory_format=cl)
        pooling.pooling_forward(xin, y, mode, (3, 3), (1, 1), (2, 2), propagate, 1.0, 0.0)
        pooling.pooling_backward(y, dy, xin, dx, mode, (3, 3), (1, 1), (2, 2), propagate, 1.0, 0.0)
        return y, dx

    y, dx = run(True, 0, x)
    y_old, dx_old = run(False, 0, x)
    assert torch.equal(y, torch.nn.functional.max_pool2d(x, 3, 2, 1))
    assert torch.equal(y, y_old) and torch.equal(dx, dx_old)
    for propagate in (False, True):
        y, dx = run(True, 0, xnan, propagate)
        y_old, dx_old = run(False, 0, xnan, propagate)
        assert torch.equal(torch.isnan(y), torch.isnan(y_old))
        assert torch.equal(torch.nan_to_num(y), torch.nan_to_num(y_old))
        assert torch.equal(dx, dx_old)
        assert bool(torch.isnan(y).any()) == propagate
    xd, dyd = x.double(), dy.double()
    for mode, include in ((1, True), (2, False)):
        y, dx = run(True, mode, x)
        # reference on an NCHW copy: PyTorch's channels-last CUDA avg_pool2d backward with
        # padding shifts dx by one column (pytorch/pytorch#188344; torch 2.11 on the H200,
        # benchmarks/diag_avg_pool_backward.py: tridnn agrees with NumPy, CPU torch and NCHW)
        xr = xd.clone(memory_format=torch.contiguous_format).requires_grad_()
        ref = torch.nn.functional.avg_pool2d(xr, 3, 2, 1, count_include_pad=include)
        ref.backward(dyd)
        tol = TOL[dt]
        assert (y.double() - ref.detach()).abs().max().item() <= tol * max(1.0, ref.abs().max().item())
        assert (dx.double() - xr.grad).abs().max().item() <= tol * max(1.0, xr.grad.abs().max().item())
