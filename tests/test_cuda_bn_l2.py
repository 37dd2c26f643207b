"""Batch norm's channel-chunked path (batchnorm.CHUNKED: statistics, finalize and apply
chunk by chunk so the apply pass re-reads x from the L2) against the float64 reference,
and the existing Triton batch norm tests rerun with the path switched on.

Chunks here are a few channels: CHUNK_BYTES is set per test so that C = 5 splits into
chunks whose last one is short (the chunk does not divide C)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import batchnorm  # noqa: E402
from tridnn.reference import normalization as ref_norm  # noqa: E402

from test_cuda_layers import DEVICE, check, f64, make, poisoned  # noqa: E402
# the existing batch norm tests, collected here again under the chunked switch (autouse fixture)
from test_cuda_layers import test_batch_norm, test_batch_norm_parameter_blending  # noqa: E402,F401
from test_cuda_layers import test_batch_norm_split_orders  # noqa: E402,F401
from test_cuda_float64 import test_batch_norm_float64  # noqa: E402,F401
RERUN = (test_batch_norm, test_batch_norm_parameter_blending, test_batch_norm_split_orders, test_batch_norm_float64)


@pytest.fixture(autouse=True)
def _chunked(monkeypatch):
    monkeypatch.setattr(batchnorm, "CHUNKED", True)
    monkeypatch.setattr(batchnorm, "CHUNK_BYTES", 400)  # 1-4 channels a chunk for the shapes here


def _bounds_used(monkeypatch):
    """Record the chunk bounds every call takes (the tests assert the path ran chunked)."""
    seen = []
    real = batchnorm._Layout.chunk_bounds

    def spy(self, tensors):
        b = real(self, tensors)
        seen.append(b)
        return b
    monkeypatch.setattr(batchnorm._Layout, "chunk_bounds", spy)
    return seen


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("ops", [0, 2], ids=["NORM", "NORM_ADD_RELU"])
@pytest.mark.parametrize("chunk_bytes", [400, 100], ids=["chunks-2-4", "chunks-1"])
def test_chunked_train_inference_backward(dtype, layout, ops, chunk_bytes, rng, monkeypatch):
    monkeypatch.setattr(batchnorm, "CHUNK_BYTES", chunk_bytes)
    seen = _bounds_used(monkeypatch)
    shape, C = (3, 5, 4, 4), 5
    pshape = (1, C, 1, 1)
    x = make(shape, layout, dtype, rng=rng, scale=2.0)
    x.add_(3.0)  # a mean away from zero: the shifted sums
    z = make(shape, layout, dtype, rng=rng) if ops == 2 else None
    p = lambda v: torch.as_tensor(np.asarray(v, np.float32)).to(DEVICE)  # noqa: E731
    scale, bias = p(rng.standard_normal(pshape)), p(rng.standard_normal(pshape))
    rmean, rvar = p(rng.standard_normal(pshape)), p(rng.random(pshape) + 0.5)
    rmean0, rvar0 = f64(rmean), f64(rvar)
    smean, sinv = p(np.full(pshape, np.nan)), p(np.full(pshape, np.nan))
    y = poisoned(shape, layout, dtype)
    old_y = y.clone().fill_(0.25)
    y.copy_(old_y)  # beta reads y: a finite old value
    batchnorm.batch_norm_forward_training(x, z, y, scale, bias, rmean, rvar, smean, sinv, 1, 0.1, 1e-5, ops,
                                          2.0, 0.5)
    assert seen[-1] is not None and len(seen[-1]) >= 2 and seen[-1][-1][1] == C
    y_ref, mean_ref, var_ref = ref_norm.batch_norm_train(f64(x), f64(scale), f64(bias), 1e-5,
                                                         z=None if z is None else f64(z), relu=ops > 0)
    m = x.numel() // C
    check(y, 2.0 * y_ref + 0.5 * f64(old_y), dtype, "y", scale=4.0)
    check(smean, mean_ref, torch.float32, "saved mean")
    check(sinv, 1 / np.sqrt(var_ref + 1e-5), torch.float32, "saved inv var", scale=10.0)
    check(rmean, 0.9 * rmean0 + 0.1 * mean_ref, torch.float32, "running mean")
    check(rvar, 0.9 * rvar0 + 0.1 * var_ref * m / (m - 1), torch.float32, "running var")

    y_act = poisoned(shape, layout, dtype)  # the forward output the relu backward masks with
    batchnorm.batch_norm_forward_training(x, z, y_act, scale, bias, None, None, None, None, 1, 0.1, 1e-5, ops,
                                          1.0, 0.0)
    check(y_act, y_ref, dtype, "y (alpha 1)", scale=2.0)
    y_inf = poisoned(shape, layout, dtype)
    batchnorm.batch_norm_forward_inference(x, z, y_inf, scale, bias, rmean, rvar, 1, 1e-5, ops, 1.0, 0.0)
    check(y_inf, ref_norm.batch_norm_inference(f64(x), f64(scale), f64(bias), f64(rmean), f64(rvar), 1e-5,
                                               z=None if z is None else f64(z), relu=ops > 0), dtype, "inference y")

    dy = make(shape, layout, dtype, rng=rng)
    dx, dz = poisoned(shape, layout, dtype), poisoned(shape, layout, dtype) if ops == 2 else None
    dscale, dbias = p(np.full(pshape, np.nan)), p(np.full(pshape, np.nan))
    batchnorm.batch_norm_backward(x, y_act, dy, dz, dx, scale, bias, dscale, dbias, smean, sinv, 1, 1e-5, ops,
                                  1.0, 0.0, 1.0, 0.0)
    assert seen[-1] is not None and len(seen[-1]) >= 2 and seen[-1][-1][1] == C
    dx_ref, ds_ref, db_ref, dz_ref = ref_norm.batch_norm_backward(f64(x), f64(dy), f64(scale), 1e-5,
                                                                  y=f64(y_act), relu=ops > 0)
    check(dx, dx_ref, dtype, "dx", scale=2.0 if dtype == torch.float32 else 10.0)
    check(dscale, ds_ref, torch.float32, "dscale", scale=2.0 if dtype == torch.float32 else 10.0)
    check(dbias, db_ref, torch.float32, "dbias")
    if dz is not None:
        check(dz, dz_ref, dtype, "dz")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_chunked_backward_blending_and_recomputed_stats(layout, rng):
    """alpha/beta on data and parameters, no saved statistics (recomputed, then chunked)."""
    shape = (3, 5, 3, 4)
    x = make(shape, layout, rng=rng)
    ones, zeros = torch.ones(1, 5, 1, 1, device=DEVICE), torch.zeros(1, 5, 1, 1, device=DEVICE)
    y = poisoned(shape, layout)
    batchnorm.batch_norm_forward_training(x, None, y, ones, zeros, None, None, None, None, 1, 0.1, 1e-5, 0,
                                          1.0, 0.0)
    dy = make(shape, layout, rng=rng)
    dx = make(shape, layout, rng=rng)
    dscale, dbias = torch.full((1, 5, 1, 1), 2.0, device=DEVICE), torch.full((1, 5, 1, 1), -1.0, device=DEVICE)
    old_dx = f64(dx)
    batchnorm.batch_norm_backward(x, y, dy, None, dx, ones, zeros, dscale, dbias, None, None, 1, 1e-5, 0,
                                  0.5, 1.0, 2.0, 0.5)
    dx_ref, ds_ref, db_ref, _ = ref_norm.batch_norm_backward(f64(x), f64(dy), 1.0, 1e-5)
    check(dx, 0.5 * dx_ref + old_dx, torch.float32, "dx")
    check(dscale, 2.0 * ds_ref + 0.5 * 2.0, torch.float32, "dscale")
    check(dbias, 2.0 * db_ref - 0.5, torch.float32, "dbias")


@pytest.mark.parametrize("last,C,per_channel,want", [
    (False, 256, 401408, 40),    # NCHW 64x256x56x56 bf16, 16 MiB: 40 channels (a multiple of 8)
    (True, 256, 401408, 32),     # NHWC: a power of two, 32
    (False, 5, 100, 4),          # fewer than 8 a chunk: as many as fit
    (True, 5, 100, 4),
    (False, 3, 100, None),       # one chunk holds every channel: the unchunked path
])
def test_chunk_bounds(last, C, per_channel, want, monkeypatch):
    lay = batchnorm._Layout.__new__(batchnorm._Layout)
    lay.N, lay.S, lay.C, lay.last = 1, per_channel // 2, C, last
    lay.views = {"x": torch.empty(1, dtype=torch.bfloat16)}
    monkeypatch.setattr(batchnorm, "CHUNK_BYTES", 16 << 20 if C == 256 else 400)
    bounds = lay.chunk_bounds(1)
    if want is None:
        assert bounds is None
        return
    assert bounds[0] == (0, want) and bounds[-1][1] == C
    assert all(b[0] == a[1] for a, b in zip(bounds, bounds[1:]))
    assert all(c1 - c0 == want for c0, c1 in bounds[:-1]) and 0 < bounds[-1][1] - bounds[-1][0] <= want
