"""filter_turn.turned_filter (the Gluon backward data's turned filter) against torch's
permute / flip of the same filter: both turns, channel tails past the 64-wide tiles, KCRS,
KRSC and strided-slice filters, 1x1 and 5x3 taps, an empty filter. Under the interpreter
on the CPU (tests/conftest.py), on the GPU with TRIDNN_GPU_TESTS=1."""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda.filter_turn import turned_filter  # noqa: E402

DEVICE = "cuda" if os.environ.get("TRIDNN_GPU_TESTS") == "1" else "cpu"


def _want(w, flip):
    k, c, kh, kw = w.shape
    src = w.permute(1, 2, 3, 0)
    return (src.flip((1, 2)) if flip else src).reshape(c, kh * kw * k)


@pytest.mark.parametrize("shape", [(70, 67, 3, 3), (8, 130, 1, 1), (65, 16, 5, 3)])
@pytest.mark.parametrize("layout", ["KCRS", "KRSC", "slice"])
@pytest.mark.parametrize("flip", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_turned_filter_matches_torch(shape, layout, flip, dtype):
    g = torch.Generator().manual_seed(sum(shape))
    w = torch.randn(shape, generator=g).to(dtype).to(DEVICE)
    if layout == "KRSC":
        w = w.contiguous(memory_format=torch.channels_last)
    elif layout == "slice":  # every other output channel of a wider filter: no dense view
        w = torch.randn((2 * shape[0],) + shape[1:], generator=g).to(dtype).to(DEVICE)[::2]
    before = w.clone()
    m = turned_filter(w, flip)
    assert m.shape == (shape[1], shape[0] * shape[2] * shape[3]) and m.is_contiguous() and m.dtype == dtype
    assert torch.equal(m, _want(w, flip))
    assert torch.equal(w, before)  # the filter is only read


def test_empty_filter():
    m = turned_filter(torch.empty(0, 4, 3, 3, device=DEVICE), True)
    assert m.shape == (4, 0)


def test_order_table():
    """An explicit order places each tap at its slot; anything but a permutation of the taps
    is refused before any copy, naming the order."""
    w = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2).to(DEVICE)
    order = [2, 0, 3, 1]
    m = turned_filter(w, order=order).reshape(3, 4, 2)  # [c, slot, k]
    for t, slot in enumerate(order):
        assert torch.equal(m[:, slot, :], w[:, :, t // 2, t % 2].T)
    for bad in ([0, 1, 2], [0, 1, 1, 2], [0, 1, 2, 4]):
        with pytest.raises(ValueError, match="permutation of the 4 taps"):
            turned_filter(w, order=bad)


def test_turns_into_a_given_buffer_and_refuses_a_wrong_one():
    """out (a launch record's own buffer) is written in place and returned; a buffer of
    another shape, dtype or layout is refused by name and left untouched."""
    w = torch.randn(16, 8, 3, 3).to(DEVICE)
    out = torch.full((8, 9 * 16), float("nan"), device=DEVICE)
    assert turned_filter(w, True, out=out) is out and torch.equal(out, _want(w, True))
    for bad in (torch.zeros(8, 9 * 15, device=DEVICE), torch.zeros(8, 9 * 16, device=DEVICE, dtype=torch.float16),
                torch.zeros(9 * 16, 8, device=DEVICE).t()):
        before = bad.clone()
        with pytest.raises(ValueError, match="out must be a contiguous"):
            turned_filter(w, True, out=bad)
        assert torch.equal(bad, before)
