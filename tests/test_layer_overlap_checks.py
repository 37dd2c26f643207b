"""The layer API's overlap rule on both backends (api/layer_common.views through
_check_spans: each backend's byte extents, sorted once): an output may not share memory with an input or
another output, except an exact in-place alias where the layer allows it; inputs may
share memory with each other. Nothing is written when a call is refused."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn.api import layer_common  # noqa: E402
from tridnn.errors import BadParamError  # noqa: E402


@pytest.fixture(params=["numpy", "triton"])
def handle(request):
    return tridnn.Handle(device="cpu", backend=request.param, find_cache=None)


def _address(v):
    return v.__array_interface__["data"][0] if hasattr(v, "__array_interface__") else v.data_ptr()


def _desc(t):
    return tridnn.TensorDescriptor.like(t)


def test_disjoint_views_pass_and_inputs_may_share(handle):
    buf = torch.zeros(64)
    a, b = buf[0:16].view(1, 1, 4, 4), buf[0:16].view(1, 1, 4, 4)  # two inputs, same memory
    out = buf[32:48].view(1, 1, 4, 4)
    views = layer_common.views(handle, [(a, _desc(a), "x"), (b, _desc(b), "z")], [(out, _desc(out), "y")])
    assert len(views) == 3


@pytest.mark.parametrize("lo", [8, 12, 15])
def test_output_overlapping_an_input_is_named(handle, lo):
    buf = torch.zeros(64)
    x = buf[0:16].view(1, 1, 4, 4)
    y = buf[lo:lo + 16].view(1, 1, 4, 4)
    with pytest.raises(BadParamError, match="output y overlaps x"):
        layer_common.views(handle, [(x, _desc(x), "x")], [(y, _desc(y), "y")])


def test_two_outputs_overlapping_name_the_earlier_output_first(handle):
    buf = torch.zeros(64)
    x = buf[40:56].view(1, 1, 4, 4)
    m = buf[4:20].view(1, 1, 4, 4)
    v = buf[0:16].view(1, 1, 4, 4)  # starts before m: the sweep meets v first
    with pytest.raises(BadParamError, match="output mean overlaps var"):
        layer_common.views(handle, [(x, _desc(x), "x")], [(m, _desc(m), "mean"), (v, _desc(v), "var")])


def test_in_place_alias_only_when_allowed(handle):
    x = torch.zeros(1, 1, 4, 4)
    with pytest.raises(BadParamError, match="overlaps"):
        layer_common.views(handle, [(x, _desc(x), "x")], [(x, _desc(x), "y")])
    views = layer_common.views(handle, [(x, _desc(x), "x")], [(x, _desc(x), "y")], in_place_ok=True)
    assert _address(views[0]) == _address(views[1])
    shifted = x.view(-1)[1:].as_strided((1, 1, 3, 4), (16, 16, 4, 1))  # overlaps but is not the same view
    with pytest.raises(BadParamError, match="overlaps"):
        layer_common.views(handle, [(x, _desc(x), "x")], [(shifted, _desc(shifted), "y")], in_place_ok=True)


def test_refused_call_writes_nothing(handle):
    buf = torch.randn(2 * 3 * 4 * 4 + 8)
    x = buf[:96].view(2, 3, 4, 4)
    y = buf[8:104].view(2, 3, 4, 4)  # partly over x: not an in-place alias
    before = buf.clone()
    with pytest.raises(BadParamError, match="overlaps"):
        tridnn.activation_forward(handle, tridnn.ActivationDescriptor("relu"), 1.0, _desc(x), x, 0.0,
                                  _desc(y), y)
    assert torch.equal(buf, before)
