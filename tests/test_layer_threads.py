"""The NumPy layers on 1 thread and on 2: bit for bit the same results.

layer_utils.THREADS switches the layers' worker threads (relu's slabs, pooling's,
softmax's and batch norm's blocks). Each block's arithmetic does not depend on the
thread that runs it, and batch norm combines its per-block sums in block order, so the
threaded path must reproduce the single-threaded bits exactly. The shapes are odd (no
block size divides them) and the block sizes are shrunk so that even these small
tensors split into many uneven blocks; every result is also checked against the
float64 reference, so a wrong answer on both paths would fail too."""
import numpy as np
import pytest

from tridnn.cpu import activation, batchnorm, common, layer_utils, pooling, softmax
from tridnn.reference import activation as ref_act
from tridnn.reference import normalization as ref_bn
from tridnn.reference import pooling as ref_pool
from tridnn.reference import softmax as ref_softmax

SHAPES = [(3, 7, 9, 5), (5, 3, 11, 13), (2, 13, 7, 3)]
LAYOUTS = ["NCHW", "NHWC"]


@pytest.fixture
def calls(monkeypatch):
    """Small blocks and slabs, at least 2 workers; records the threads of each spread call."""
    monkeypatch.setattr(layer_utils, "CHUNK_ELEMENTS", 96)
    monkeypatch.setattr(softmax, "CHUNK_ELEMENTS", 96)
    monkeypatch.setattr(layer_utils, "PARALLEL_MIN_ELEMENTS", 16)
    monkeypatch.setattr(layer_utils, "SLAB_ELEMENTS", 37)
    monkeypatch.setattr(layer_utils, "SHARE_ELEMENTS", 101)
    monkeypatch.setattr(common, "WORKERS", max(2, common.WORKERS))
    seen = []
    real = layer_utils._spread

    def counting(drain, workers):
        seen.append(workers)
        return real(drain, workers)

    monkeypatch.setattr(layer_utils, "_spread", counting)
    return seen


def tensor(shape, layout, rng, values=None):
    n, c, h, w = shape
    a = np.empty(shape, np.float32) if layout == "NCHW" else \
        np.empty((n, h, w, c), np.float32).transpose(0, 3, 1, 2)
    a[...] = rng.standard_normal(shape) if values is None else values
    return a


def both(monkeypatch, calls, run):
    """run() with 1 thread and with 2: (single, threaded) outputs; the threaded run must
    really have gone through the pool with 2 workers."""
    monkeypatch.setattr(layer_utils, "THREADS", 1)
    single = [np.array(a, copy=True) for a in run()]
    assert not calls, "THREADS = 1 still used the pool"
    monkeypatch.setattr(layer_utils, "THREADS", 2)
    threaded = [np.array(a, copy=True) for a in run()]
    assert calls and max(calls) == 2, f"the threaded path did not use 2 workers: {calls}"
    for i, (s, t) in enumerate(zip(single, threaded)):
        assert s.shape == t.shape and s.dtype == t.dtype
        assert s.tobytes() == t.tobytes(), f"output {i} differs between 1 and 2 threads"
    return single


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode,coef", [(1, 0.0), (3, 0.7)], ids=["relu", "clipped"])
def test_relu(shape, layout, mode, coef, monkeypatch, calls, rng):
    x = tensor(shape, layout, rng)
    x.flat[::7] = np.nan
    dy = tensor(shape, layout, rng)
    y, dx = tensor(shape, layout, rng), tensor(shape, layout, rng)

    def run():
        activation.activation_forward(x, y, mode, coef, 1.0, False, 1.0, 0.0)
        activation.activation_backward(y, dy, x, dx, 1, 0.0, 1.0, 1.0, 0.0)
        return y, dx

    fwd, bwd = both(monkeypatch, calls, run)
    clean = np.nan_to_num(x, nan=-1.0)       # NOT_PROPAGATE_NAN: relu(NaN) = 0
    np.testing.assert_array_equal(fwd, ref_act.activation_forward(clean, mode, coef).astype(np.float32))
    np.testing.assert_array_equal(bwd, ref_act.activation_backward(clean, dy, 1).astype(np.float32))


@pytest.mark.parametrize("shape", SHAPES)
def test_relu_unpacked(shape, monkeypatch, calls, rng):
    """Views that are not packed (every other column, and dx in the other memory order)
    take the outer-slab split."""
    x = tensor(shape[:3] + (2 * shape[3],), "NCHW", rng)[..., ::2]
    dy = tensor(shape, "NCHW", rng)
    y, dx = tensor(shape, "NCHW", rng), tensor(shape, "NHWC", rng)

    def run():
        activation.activation_forward(x, y, 1, 0.0, 1.0, True, 1.0, 0.0)
        activation.activation_backward(y, dy, x, dx, 1, 0.0, 1.0, 1.0, 0.0)
        return y, dx

    fwd, bwd = both(monkeypatch, calls, run)
    np.testing.assert_array_equal(fwd, ref_act.activation_forward(x, 1).astype(np.float32))
    np.testing.assert_array_equal(bwd, ref_act.activation_backward(x, dy, 1).astype(np.float32))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", [pooling.MAX, pooling.AVG_EXCLUDE], ids=["max", "avg"])
@pytest.mark.parametrize("ties", [False, True])
def test_pooling(shape, layout, mode, ties, monkeypatch, calls, rng):
    values = rng.integers(-2, 3, shape) if ties else None
    x = tensor(shape, layout, rng, values)
    window, padding, stride = (3, 3), (1, 1), (2, 2)
    out = tuple((s + 2 * p - k) // st + 1 for s, p, k, st in zip(shape[2:], padding, window, stride))
    y = tensor(shape[:2] + out, layout, rng)
    dy = tensor(shape[:2] + out, layout, rng)
    dx = tensor(shape, layout, rng)

    def run():
        pooling.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
        pooling.pooling_backward(y, dy, x, dx, mode, window, padding, stride, False, 1.0, 0.0)
        return y, dx

    fwd, bwd = both(monkeypatch, calls, run)
    np.testing.assert_allclose(fwd, ref_pool.pooling_forward(x, mode, window, padding, stride), rtol=1e-6,
                               atol=1e-6)
    np.testing.assert_allclose(bwd, ref_pool.pooling_backward(x, dy, mode, window, padding, stride),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algo", [softmax.ACCURATE, softmax.LOG], ids=["accurate", "log"])
@pytest.mark.parametrize("mode", [softmax.CHANNEL, softmax.INSTANCE], ids=["channel", "instance"])
def test_softmax(shape, layout, algo, mode, monkeypatch, calls, rng):
    x = tensor(shape, layout, rng)
    dy = tensor(shape, layout, rng)
    y, dx = tensor(shape, layout, rng), tensor(shape, layout, rng)

    def run():
        softmax.softmax_forward(x, y, algo, mode, 1.0, 0.0)
        softmax.softmax_backward(y, dy, dx, algo, mode, 1.0, 0.0)
        return y, dx

    fwd, bwd = both(monkeypatch, calls, run)
    ref_y = ref_softmax.softmax_forward(x, algo, mode)
    np.testing.assert_allclose(fwd, ref_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bwd, ref_softmax.softmax_backward(fwd, dy, algo, mode), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("bn_ops", [batchnorm.NORM, batchnorm.NORM_ACTIVATION], ids=["norm", "norm_relu"])
def test_batch_norm_backward(shape, layout, bn_ops, monkeypatch, calls, rng):
    x = tensor(shape, layout, rng, rng.standard_normal(shape) * 3 + 1)
    dy = tensor(shape, layout, rng)
    c = shape[1]
    scale = rng.uniform(0.5, 1.5, (1, c, 1, 1)).astype(np.float32)
    bias = rng.uniform(-0.5, 0.5, (1, c, 1, 1)).astype(np.float32)
    relu = bn_ops != batchnorm.NORM
    y_ref, mean, var = ref_bn.batch_norm_train(x, scale, bias, 1e-5, relu=relu)
    y = tensor(shape, layout, rng, y_ref)
    dx = tensor(shape, layout, rng)
    ds, db = np.empty_like(scale), np.empty_like(scale)
    saved_mean = mean.astype(np.float32)
    saved_inv = (1 / np.sqrt(var + 1e-5)).astype(np.float32)

    def run():
        batchnorm.batch_norm_backward(x, y, dy, None, dx, scale, bias, ds, db, saved_mean, saved_inv,
                                      batchnorm.SPATIAL, 1e-5, bn_ops, 1.0, 0.0, 1.0, 0.0)
        return dx, ds, db

    dx1, ds1, db1 = both(monkeypatch, calls, run)
    dx_ref, ds_ref, db_ref, _ = ref_bn.batch_norm_backward(x, dy, scale, 1e-5, True, y, relu)
    np.testing.assert_allclose(dx1, dx_ref, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(ds1, ds_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db1, db_ref, rtol=1e-4, atol=1e-4)


def test_batch_channel_chunks_are_even():
    """256 channels of 56 x 56 split into two blocks of 128, not 167 + 89 (which left one
    of two threads with two thirds of the work)."""
    x = np.empty((8, 256, 56, 56), np.float32)
    sizes = {cb.stop - cb.start for _, cb in layer_utils.batch_channel_chunks(x, min_channels=64)}
    assert sizes == {128}


def test_run_blocks_uses_helpers_and_keeps_block_order(monkeypatch):
    """Blocks slow enough for a helper thread to join: both threads run blocks, and the
    results still come back in block order."""
    import threading
    import time

    monkeypatch.setattr(common, "WORKERS", max(2, common.WORKERS))
    monkeypatch.setattr(layer_utils, "THREADS", 2)
    ran = []

    def block(i):
        time.sleep(0.005)
        ran.append(threading.current_thread().name)
        return i * i

    assert layer_utils.run_blocks(block, range(20)) == [i * i for i in range(20)]
    assert len(set(ran)) == 2 and len(ran) == 20


def test_run_blocks_raises_a_blocks_error(monkeypatch):
    monkeypatch.setattr(common, "WORKERS", max(2, common.WORKERS))
    monkeypatch.setattr(layer_utils, "THREADS", 2)

    def block(i):
        if i == 5:
            raise ValueError("block 5")
        return i

    with pytest.raises(ValueError, match="block 5"):
        layer_utils.run_blocks(block, range(12))
    assert layer_utils.run_blocks(lambda i: i, range(12)) == list(range(12))   # still usable
