"""The NumPy layers' blocked, multi-threaded paths on small tensors: the block size is
shrunk so that pooling, softmax and batch norm split even these shapes into many blocks
(spread over the worker threads), and the results are checked against the float64
references as the per-layer tests check the single-block path."""
import numpy as np
import pytest

from tridnn import BatchNormMode, BatchNormOps, PoolingMode, SoftmaxAlgorithm, SoftmaxMode
from tridnn.cpu import common, layer_utils, softmax

import test_batchnorm as batchnorm_cases
import test_pooling as pooling_cases
import test_softmax as softmax_cases

DIMS = (3, 6, 9, 8)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of about 64 elements, at least two worker threads."""
    monkeypatch.setattr(layer_utils, "CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(softmax, "CHUNK_ELEMENTS", 64)
    monkeypatch.setattr(common, "WORKERS", max(2, common.WORKERS))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
def test_the_shapes_do_split_into_blocks(layout, small_blocks, rng):
    _, x = pooling_cases.tensor(DIMS, "float32", layout, rng)
    assert len(list(layer_utils.batch_channel_chunks(x, min_channels=2))) > 2


@pytest.mark.parametrize("mode", list(PoolingMode), ids=lambda m: m.name)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
def test_pooling(mode, layout, small_blocks, rng):
    """Small integers (ties: the tie-aware routing) and continuous values (tie-free)."""
    pooling_cases.run(mode, DIMS, (3, 3), (1, 1), (2, 2), "float32", layout, rng)
    values = rng.standard_normal(DIMS).astype(np.float32)
    pooling_cases.run(mode, DIMS, (3, 3), (1, 1), (2, 2), "float32", layout, rng, x_values=values)


@pytest.mark.parametrize("alpha,beta", [(2.0, 0.0), (0.5, 1.0)])
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_max_pooling_alpha_beta_dtypes(alpha, beta, dtype, small_blocks, rng):
    values = rng.standard_normal(DIMS)
    pooling_cases.run(PoolingMode.MAX, DIMS, (3, 2), (1, 0), (2, 1), dtype, "NHWC", rng, alpha, beta,
                      x_values=values.astype(np.float16 if dtype == "float16" else np.float64))


@pytest.mark.parametrize("window,padding,stride", [((3, 3), (1, 1), (2, 2)), ((2, 2), (1, 1), (1, 1))])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_pooling_minus_inf_inputs(window, padding, stride, layout, small_blocks, rng):
    """-inf inputs tie with the (-inf) padding: the gradient still goes to the window's
    first real element equal to the maximum, never to padding."""
    values = rng.standard_normal(DIMS).astype(np.float32)
    values[:, :, :3, :3] = -np.inf
    values[1, 2] = -np.inf
    pooling_cases.run(PoolingMode.MAX, DIMS, window, padding, stride, "float32", layout, rng, x_values=values)
    pooling_cases.run(PoolingMode.MAX, DIMS, window, padding, stride, "float32", layout, rng, x_values=values,
                      nan=True)


@pytest.mark.parametrize("nan", [False, True])
def test_max_pooling_nan_windows(nan, small_blocks, rng):
    """NaN inputs, one window entirely NaN: forward and the backward's routing (first NaN
    when NaN propagates) match the reference in every block."""
    import tridnn
    from tridnn.reference import pooling as ref

    x = np.empty((DIMS[0], DIMS[2], DIMS[3], DIMS[1]), np.float32).transpose(0, 3, 1, 2)    # NHWC
    x[...] = rng.standard_normal(DIMS)
    x[0, 1, 2, 3] = np.nan
    x[2, 4, 5:8, 4:7] = np.nan
    x[1, 3, :2, :2] = np.nan                 # with the padding, all of the corner window
    pool = tridnn.PoolingDescriptor(PoolingMode.MAX, 3, 1, 2, nan_opt=int(nan))
    h = tridnn.Handle(find_cache=None)
    x_desc = tridnn.TensorDescriptor.like(x)
    y = np.full(tridnn.get_pooling_forward_output_dim(pool, x_desc), np.nan, np.float32)
    y_desc = tridnn.TensorDescriptor.like(y)
    tridnn.pooling_forward(h, pool, 1, x_desc, x, 0, y_desc, y)
    np.testing.assert_array_equal(y, ref.pooling_forward(x, 0, (3, 3), (1, 1), (2, 2), nan).astype(np.float32))
    dy = rng.integers(1, 5, size=y.shape).astype(np.float32)
    dx = np.full_like(x, np.nan)
    tridnn.pooling_backward(h, pool, 1, y_desc, y, y_desc, dy, x_desc, x, 0, x_desc, dx)
    np.testing.assert_array_equal(dx, ref.pooling_backward(x, dy, 0, (3, 3), (1, 1), (2, 2), nan))


@pytest.mark.parametrize("algo", list(SoftmaxAlgorithm), ids=lambda a: a.name)
@pytest.mark.parametrize("mode", list(SoftmaxMode), ids=lambda m: m.name)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_softmax(algo, mode, layout, small_blocks, rng):
    softmax_cases.run(algo, mode, "float32", layout, rng, dims=DIMS)
    softmax_cases.run(algo, mode, "float64", layout, rng, dims=DIMS, alpha=0.5, beta=0.25)


@pytest.mark.parametrize("bn_ops", list(BatchNormOps), ids=lambda o: o.name)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
def test_batch_norm(bn_ops, layout, small_blocks, rng):
    batchnorm_cases.run_backward(BatchNormMode.SPATIAL, "float32", layout, rng, DIMS, bn_ops=bn_ops)
    batchnorm_cases.run_backward(BatchNormMode.SPATIAL, "float64", layout, rng, DIMS, alpha_d=0.5, beta_d=0.25,
                                alpha_p=2.0, beta_p=0.5, bn_ops=bn_ops)


def test_batch_norm_in_place_backward(small_blocks, rng):
    """dx may be the buffer of dy or of x (each block reads both before writing dx)."""
    from tridnn.reference import normalization as ref
    from tridnn.cpu import batchnorm

    x = rng.standard_normal(DIMS) * 3 + 1
    dy = rng.standard_normal(DIMS)
    scale = rng.uniform(0.5, 1.5, (1, DIMS[1], 1, 1))
    dx_ref, _, _, _ = ref.batch_norm_backward(x, dy, scale, 1e-4, True, None, False)
    for target in ("x", "dy"):
        xs, dys = x.copy(), dy.copy()
        dx = xs if target == "x" else dys
        ds, db = np.empty_like(scale), np.empty_like(scale)
        batchnorm.batch_norm_backward(xs, None, dys, None, dx, scale, scale, ds, db, None, None, 1, 1e-4, 0,
                                      1.0, 0.0, 1.0, 0.0)
        np.testing.assert_allclose(dx, dx_ref, rtol=1e-9, atol=1e-9, err_msg=f"dx in the buffer of {target}")
