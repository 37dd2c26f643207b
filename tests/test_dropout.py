"""Dropout: the mask is a function of (seed, offset, logical index) only; forward and
backward agree with the reference given the reserve-space mask; the keep rate matches
the probability; errors for bad probabilities and too-small reserve spaces."""
import numpy as np
import pytest

import tridnn
from tridnn import DropoutDescriptor
from tridnn.cpu.dropout import dropout_mask, philox_first_word
from tridnn.errors import BadParamError
from tridnn.reference.dropout import dropout_apply

from layer_cases import DTYPES, LAYOUTS, check, handle, normal, output

DIMS = (2, 3, 5, 4)


def forward(h, desc, x_desc, x, layout, rng, dtype):
    y_desc, y, _ = output(x_desc.dims, dtype, layout, rng, 0.0)
    reserve = np.full(tridnn.dropout_get_reserve_space_size(x_desc), 9, np.uint8)
    tridnn.dropout_forward(h, desc, x_desc, x, y_desc, y, reserve)
    return y_desc, y, reserve.reshape(x_desc.dims)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_forward_backward_match_reference(dtype, layout, rng):
    h = handle()
    p = 0.3
    desc = DropoutDescriptor(p, seed=1234)
    x_desc, x = normal(DIMS, dtype, layout, rng)
    y_desc, y, mask = forward(h, desc, x_desc, x, layout, rng, dtype)
    assert set(np.unique(mask)) <= {0, 1}
    np.testing.assert_array_equal(mask, dropout_mask(DIMS, p, 1234, 0))
    check(y, dropout_apply(x, mask, p), dtype, name="y")
    dy_desc, dy = normal(DIMS, dtype, layout, rng)
    dx_desc, dx, _ = output(DIMS, dtype, layout, rng, 0.0)
    tridnn.dropout_backward(h, desc, dy_desc, dy, dx_desc, dx, mask)
    check(dx, dropout_apply(dy, mask, p), dtype, name="dx")


def test_same_seed_same_masks_in_every_layout_new_masks_per_call(rng):
    h = handle()
    masks = {}
    for layout in ("NCHW", "NHWC", "strided"):
        desc = DropoutDescriptor(0.5, seed=7)
        x_desc, x = normal(DIMS, "float32", layout, rng)
        first = forward(h, desc, x_desc, x, layout, rng, "float32")[2]
        second = forward(h, desc, x_desc, x, layout, rng, "float32")[2]
        masks[layout] = (first.copy(), second.copy())
        assert desc.offset == 2 * x.size
    for layout in ("NHWC", "strided"):
        np.testing.assert_array_equal(masks[layout][0], masks["NCHW"][0])
        np.testing.assert_array_equal(masks[layout][1], masks["NCHW"][1])
    assert not np.array_equal(masks["NCHW"][0], masks["NCHW"][1])
    other = DropoutDescriptor(0.5, seed=8)
    x_desc, x = normal(DIMS, "float32", "NCHW", rng)
    assert not np.array_equal(forward(h, other, x_desc, x, "NCHW", rng, "float32")[2], masks["NCHW"][0])


def test_restore_keeps_the_state(rng):
    h = handle()
    states = np.zeros(tridnn.dropout_get_states_size(h), np.uint8)
    desc = DropoutDescriptor(0.5, seed=3, states=states)
    x_desc, x = normal(DIMS, "float32", "NCHW", rng)
    forward(h, desc, x_desc, x, "NCHW", rng, "float32")
    restored = DropoutDescriptor.restore(0.5, states)
    assert restored.seed == 3 and restored.offset == x.size
    np.testing.assert_array_equal(forward(h, restored, x_desc, x, "NCHW", rng, "float32")[2],
                                  dropout_mask(DIMS, 0.5, 3, x.size))


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9])
def test_keep_rate(p):
    mask = dropout_mask((200_000,), p, seed=99, offset=0)
    assert abs(mask.mean() - (1 - p)) < 0.005


def test_mask_does_not_depend_on_blocking():
    whole = dropout_mask((3, 1000), 0.4, 5, 17)
    tail = dropout_mask((1000,), 0.4, 5, 17 + 2000)
    np.testing.assert_array_equal(whole[2], tail)


def test_philox_matches_triton_randint():
    """Same counter-based generator as Triton's tl.randint (run in Triton's interpreter)."""
    import os
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs Triton's interpreter (TRITON_INTERPRET=1, set by conftest)")
    triton = pytest.importorskip("triton")
    torch = pytest.importorskip("torch")
    import triton.language as tl

    @triton.jit
    def draw(out_ptr, seed, offset, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out_ptr + i, tl.randint(seed, offset + i))

    seed, offset = 0x1234_5678_9ABC, 3_000_000_000
    out = torch.empty(64, dtype=torch.int32)
    draw[(1,)](out, seed, offset, N=64)
    want = philox_first_word(seed, np.arange(offset, offset + 64, dtype=np.uint64))
    np.testing.assert_array_equal(out.numpy().view(np.uint32).astype(np.uint64), want)


def test_errors(rng):
    h = handle()
    with pytest.raises(BadParamError, match="probability"):
        DropoutDescriptor(1.0)
    with pytest.raises(BadParamError, match="probability"):
        DropoutDescriptor(-0.1)
    with pytest.raises(BadParamError, match="states of 8 bytes"):
        DropoutDescriptor(0.5, 1, np.zeros(8, np.uint8))
    desc = DropoutDescriptor(0.5, 1)
    x_desc, x = normal(DIMS, "float32", "NCHW", rng)
    y = np.full(DIMS, 4.0, np.float32)
    with pytest.raises(BadParamError, match="reserve space of 10 bytes"):
        tridnn.dropout_forward(h, desc, x_desc, x, x_desc, y, np.zeros(10, np.uint8))
    with pytest.raises(BadParamError, match="reserve space"):
        tridnn.dropout_forward(h, desc, x_desc, x, x_desc, y, None)
    assert (y == 4).all() and desc.offset == 0
