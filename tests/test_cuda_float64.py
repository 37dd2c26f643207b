"""The Triton normalizations, LRN and softmax on float64 data against the float64
references, with float64 tolerances (test_cuda_layers.TOL: 1e-10 normalized error).

Statistics and per-channel coefficients accumulated in float32 leave errors near
1e-7, so these tests tell a float64 computation from a float32 one. Tiny shapes: the
kernels run in Triton's interpreter on the CPU."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from test_cuda_layers import DEVICE, check, f64, make, poisoned  # noqa: E402
from tridnn.cpu import lrn as cpu_lrn  # noqa: E402
from tridnn.cuda import batchnorm, lrn, norms, softmax  # noqa: E402
from tridnn.reference import normalization as ref_norm  # noqa: E402
from tridnn.reference import softmax as ref_softmax  # noqa: E402

F64 = torch.float64


@pytest.fixture
def rng(request):
    """Inputs reproducible from the test's name across processes."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def param(values):
    return torch.as_tensor(np.asarray(values, np.float64), dtype=F64, device=DEVICE)


def nan_param(shape):
    return param(np.full(shape, np.nan))


# -- batch norm ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [batchnorm.SPATIAL, batchnorm.SPATIAL_PERSISTENT, batchnorm.PER_ACTIVATION],
                         ids=["SPATIAL", "SPATIAL_PERSISTENT", "PER_ACTIVATION"])
@pytest.mark.parametrize("layout,ops", [("NCHW", batchnorm.NORM), ("NHWC", batchnorm.NORM_ADD_ACTIVATION)],
                         ids=["NCHW-norm", "NHWC-add-relu"])
def test_batch_norm_float64(mode, layout, ops, rng):
    shape = (3, 4, 2, 5)
    spatial = mode != batchnorm.PER_ACTIVATION
    pshape = (1, 4, 1, 1) if spatial else (1, 4, 2, 5)
    eps = 1e-4
    x = make(shape, layout, F64, rng=rng, scale=2.0)
    x.add_(3.0)  # a mean away from zero
    z = make(shape, layout, F64, rng=rng) if ops == batchnorm.NORM_ADD_ACTIVATION else None
    relu = ops != batchnorm.NORM
    scale, bias = param(rng.standard_normal(pshape)), param(rng.standard_normal(pshape))
    rmean, rvar = param(rng.standard_normal(pshape)), param(rng.random(pshape) + 0.5)
    rmean0, rvar0 = f64(rmean), f64(rvar)
    smean, sinv = nan_param(pshape), nan_param(pshape)

    # training forward: y, saved statistics, running averages
    y = poisoned(shape, layout, F64)
    batchnorm.batch_norm_forward_training(x, z, y, scale, bias, rmean, rvar, smean, sinv, mode, 0.1, eps, ops)
    y_ref, mean_ref, var_ref = ref_norm.batch_norm_train(f64(x), f64(scale), f64(bias), eps, spatial=spatial,
                                                         z=None if z is None else f64(z), relu=relu)
    m = x.numel() // scale.numel()
    check(y, y_ref, F64, "y")
    check(smean, mean_ref, F64, "saved mean")
    check(sinv, 1 / np.sqrt(var_ref + eps), F64, "saved inv std")
    check(rmean, 0.9 * rmean0 + 0.1 * mean_ref, F64, "running mean")
    check(rvar, 0.9 * rvar0 + 0.1 * var_ref * m / (m - 1), F64, "running var")

    # inference
    y_inf = poisoned(shape, layout, F64)
    batchnorm.batch_norm_forward_inference(x, z, y_inf, scale, bias, rmean, rvar, mode, eps, ops)
    check(y_inf, ref_norm.batch_norm_inference(f64(x), f64(scale), f64(bias), f64(rmean), f64(rvar), eps,
                                               z=None if z is None else f64(z), relu=relu), F64, "inference y")

    # backward, with the saved statistics and with statistics recomputed from x
    dy = make(shape, layout, F64, rng=rng)
    dx_ref, ds_ref, db_ref, dz_ref = ref_norm.batch_norm_backward(f64(x), f64(dy), f64(scale), eps,
                                                                  spatial=spatial, y=f64(y), relu=relu)
    for saved in ((smean, sinv), (None, None)):
        dx = poisoned(shape, layout, F64)
        dz = poisoned(shape, layout, F64) if z is not None else None
        dscale, dbias = nan_param(pshape), nan_param(pshape)
        batchnorm.batch_norm_backward(x, y, dy, dz, dx, scale, bias, dscale, dbias, *saved, mode, eps, ops)
        how = "saved" if saved[0] is not None else "recomputed"
        check(dx, dx_ref, F64, f"dx ({how} statistics)")
        check(dscale, ds_ref, F64, f"dscale ({how} statistics)")
        check(dbias, db_ref, F64, f"dbias ({how} statistics)")
        if dz is not None:
            check(dz, dz_ref, F64, f"dz ({how} statistics)")


# -- layer / RMS norm --------------------------------------------------------------------------
@pytest.mark.parametrize("norm_ndim", [1, 3])
@pytest.mark.parametrize("long_rows", [False, True], ids=["registers", "looped"])
def test_layer_and_rms_norm_float64(norm_ndim, long_rows, rng, monkeypatch):
    if long_rows:
        monkeypatch.setattr(norms, "MAX_TILE", 4)
    shape = (3, 4, 3, 5)
    eps = 1e-5
    x = make(shape, "NCHW", F64, rng=rng, scale=2.0)
    x.add_(3.0)
    pshape, lead = shape[4 - norm_ndim:], shape[:4 - norm_ndim]
    scale, bias = param(rng.standard_normal(pshape)), param(rng.standard_normal(pshape))
    dy = make(shape, "NCHW", F64, rng=rng)

    y, mean, inv = poisoned(shape, "NCHW", F64), nan_param(lead), nan_param(lead)
    norms.layer_norm_forward(x, y, scale, bias, mean, inv, norm_ndim, eps)
    y_ref, mean_ref, inv_ref = ref_norm.layer_norm(f64(x), f64(scale), f64(bias), norm_ndim, eps)
    check(y, y_ref, F64, "y")
    check(mean, mean_ref, F64, "mean")
    check(inv, inv_ref, F64, "inv_std")
    dx_ref, ds_ref, db_ref = ref_norm.layer_norm_backward(f64(x), f64(dy), f64(scale), norm_ndim, eps)
    for stats in ((mean, inv), (None, None)):
        how = "saved" if stats[0] is not None else "recomputed"
        dx, dscale, dbias = poisoned(shape, "NCHW", F64), nan_param(pshape), nan_param(pshape)
        norms.layer_norm_backward(x, dy, dx, scale, dscale, dbias, *stats, norm_ndim, epsilon=eps)
        check(dx, dx_ref, F64, f"dx ({how})")
        check(dscale, ds_ref, F64, f"dscale ({how})")
        check(dbias, db_ref, F64, f"dbias ({how})")

    y, inv = poisoned(shape, "NCHW", F64), nan_param(lead)
    norms.rms_norm_forward(x, y, scale, inv, norm_ndim, eps)
    y_ref, inv_ref = ref_norm.rms_norm(f64(x), f64(scale), norm_ndim, eps)
    check(y, y_ref, F64, "rms y")
    check(inv, inv_ref, F64, "inv_rms")
    dx_ref, ds_ref = ref_norm.rms_norm_backward(f64(x), f64(dy), f64(scale), norm_ndim, eps)
    for saved in (inv, None):
        how = "saved" if saved is not None else "recomputed"
        dx, dscale = poisoned(shape, "NCHW", F64), nan_param(pshape)
        norms.rms_norm_backward(x, dy, dx, scale, dscale, saved, norm_ndim, epsilon=eps)
        check(dx, dx_ref, F64, f"rms dx ({how})")
        check(dscale, ds_ref, F64, f"rms dscale ({how})")


# -- group norm ------------------------------------------------------------------------------
@pytest.mark.parametrize("design", ["always", "never"], ids=["split", "fused"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_group_norm_float64(design, layout, rng, monkeypatch):
    monkeypatch.setattr(norms, "GROUP_NORM_SPLIT", design)
    monkeypatch.setattr(norms, "SPLITS_PER_SAMPLE", 3)
    monkeypatch.setattr(norms, "GN_TILE", 16)
    shape, groups, eps = (2, 8, 3, 5), 4, 1e-5
    x = make(shape, layout, F64, rng=rng, scale=2.0)
    x.add_(3.0)
    scale, bias = param(rng.standard_normal(8)), param(rng.standard_normal(8))
    y, mean, inv = poisoned(shape, layout, F64), nan_param((2, groups)), nan_param((2, groups))
    norms.group_norm_forward(x, y, scale, bias, mean, inv, groups, eps)
    y_ref, mean_ref, inv_ref = ref_norm.group_norm(f64(x), f64(scale), f64(bias), groups, eps)
    check(y, y_ref, F64, "y")
    check(mean, mean_ref, F64, "mean")
    check(inv, inv_ref, F64, "inv_std")
    dy = make(shape, layout, F64, rng=rng)
    dx_ref, ds_ref, db_ref = ref_norm.group_norm_backward(f64(x), f64(dy), f64(scale), groups, eps)
    for stats in ((mean, inv), (None, None)):
        how = "saved" if stats[0] is not None else "recomputed"
        dx, dscale, dbias = poisoned(shape, layout, F64), nan_param(8), nan_param(8)
        norms.group_norm_backward(x, dy, dx, scale, dscale, dbias, *stats, groups, epsilon=eps)
        check(dx, dx_ref, F64, f"dx ({how})")
        check(dscale, ds_ref, F64, f"dscale ({how})")
        check(dbias, db_ref, F64, f"dbias ({how})")


# -- LRN and softmax ---------------------------------------------------------------------------
@pytest.mark.parametrize("lrn_n", [3, 4])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_lrn_float64(lrn_n, layout, rng):
    shape = (2, 6, 3, 4)
    args = (lrn_n, 1e-1, 0.75, 2.0, 1.0, 0.0)
    x = make(shape, layout, F64, rng=rng, scale=3.0)
    y = poisoned(shape, layout, F64)
    lrn.lrn_cross_channel_forward(x, y, *args)
    y_ref = np.empty(shape)
    cpu_lrn.lrn_cross_channel_forward(f64(x), y_ref, *args)
    check(y, y_ref, F64, "y")
    dy = make(shape, layout, F64, rng=rng)
    dx = poisoned(shape, layout, F64)
    lrn.lrn_cross_channel_backward(y, dy, x, dx, *args)
    dx_ref = np.empty(shape)
    cpu_lrn.lrn_cross_channel_backward(f64(y), f64(dy), f64(x), dx_ref, *args)
    check(dx, dx_ref, F64, "dx")


@pytest.mark.parametrize("algorithm", [softmax.FAST, softmax.ACCURATE, softmax.LOG], ids=["FAST", "ACCURATE", "LOG"])
@pytest.mark.parametrize("mode", [softmax.INSTANCE, softmax.CHANNEL], ids=["INSTANCE", "CHANNEL"])
@pytest.mark.parametrize("long_rows", [False, True], ids=["registers", "two-pass"])
def test_softmax_float64(algorithm, mode, long_rows, rng, monkeypatch):
    if long_rows:
        monkeypatch.setattr(softmax, "MAX_TILE", 4)
    shape = (2, 6, 2, 3)
    x = make(shape, "NCHW", F64, rng=rng, scale=3.0)
    y = poisoned(shape, "NCHW", F64)
    softmax.softmax_forward(x, y, algorithm=algorithm, mode=mode)
    check(y, ref_softmax.softmax_forward(f64(x), algorithm, mode), F64, "y")
    dy = make(shape, "NCHW", F64, rng=rng)
    dx = poisoned(shape, "NCHW", F64)
    softmax.softmax_backward(y, dy, dx, algorithm=algorithm, mode=mode)
    check(dx, ref_softmax.softmax_backward(f64(y), f64(dy), algorithm, mode), F64, "dx")
