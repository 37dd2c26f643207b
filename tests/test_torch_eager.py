"""The eager callers (tridnn.torch.ops.fast) against the registered custom ops.

Both run the same op body and autograd formulas, so results must be bitwise equal; the
callers must take the traced route wherever PyTorch's machinery has to see the op
(torch.compile, FakeTensorMode, functorch transforms) and the direct route otherwise."""
import pytest

torch = pytest.importorskip("torch")

import tridnn.torch as tt  # noqa: E402
from tridnn.torch import ops  # noqa: E402

GEOMETRY = ([1, 1], [1, 1], [1, 1], [1, 1], 1)


def _inputs(seed=0, channels_last=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 4, 6, 5, generator=g, dtype=torch.float64)
    w = torch.randn(3, 4, 3, 3, generator=g, dtype=torch.float64)
    if channels_last:
        x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
    return x, w


def _run(calls, x, w):
    """Forward through conv, batch norm, relu, max pool, softmax; backward of a weighted
    sum; returns the output and every input gradient."""
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    gamma = torch.linspace(0.5, 1.5, 3, dtype=torch.float64).requires_grad_(True)
    beta = torch.linspace(-0.2, 0.2, 3, dtype=torch.float64).requires_grad_(True)
    y = calls.conv_forward(x, w, None, *GEOMETRY)
    y = calls.batch_norm_training(y, gamma, beta, None, None, 0.1, 1e-5)[0]
    y = calls.activation(y, "relu", 0.0, 1.0)
    y = calls.pool(y, "max", [2, 2], [2, 2], [0, 0])
    y = calls.softmax(y, 1, False)
    weights = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape).sin()
    (y * weights).sum().backward()
    return [y.detach(), x.grad, w.grad, gamma.grad, beta.grad]


class _Registered:
    """The registered ops under the callers' names."""
    def __getattr__(self, name):
        return getattr(torch.ops.tridnn, name)


@pytest.mark.parametrize("channels_last", [False, True])
def test_eager_callers_match_the_registered_ops_bitwise(channels_last):
    x, w = _inputs(channels_last=channels_last)
    fast = _run(ops.fast, x, w)
    registered = _run(_Registered(), x, w)
    for a, b in zip(fast, registered):
        assert a.shape == b.shape and a.stride() == b.stride()
        assert torch.equal(a, b)
    assert float(fast[1].abs().sum()) > 0  # the gradients are not trivially zero


def test_eager_route_uses_the_plain_autograd_function():
    x, w = _inputs()
    x.requires_grad_(True)
    y = ops.fast.conv_forward(x, w, None, *GEOMETRY)
    assert type(y.grad_fn).__name__.startswith("Eager_tridnn_conv_forward")
    y2 = torch.ops.tridnn.conv_forward(x, w, None, *GEOMETRY)
    assert "GeneratedBackwardFor_tridnn_conv_forward" in type(y2.grad_fn).__name__
    with torch.no_grad():
        assert ops.fast.conv_forward(x, w, None, *GEOMETRY).grad_fn is None


def test_double_backward_through_the_eager_route():
    """create_graph=True: the backward formulas' own calls are differentiated again."""
    results = []
    for calls in (ops.fast, _Registered()):
        x, w = _inputs(1)
        x.requires_grad_(True)
        w.requires_grad_(True)
        y = calls.conv_forward(x, w, None, *GEOMETRY)
        (gx,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
        (gw,) = torch.autograd.grad(gx.pow(2).sum(), w)
        results.append(gw)
    assert torch.equal(results[0], results[1])
    assert float(results[0].abs().sum()) > 0


def test_fake_tensor_mode_takes_the_registered_op():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(2, 4, 6, 5)
        w = torch.empty(3, 4, 3, 3)
        y = ops.fast.conv_forward(x, w, None, *GEOMETRY)
    assert isinstance(y, FakeTensor)
    assert tuple(y.shape) == (2, 3, 6, 5)


def test_vmap_takes_the_registered_op():
    """functorch transforms need the registered op (its batching fallback runs the op per
    sample); the direct route is not taken inside the transform."""
    from tridnn.torch.eager import plain_eager
    x = torch.randn(3, 2, 4, 5, 5)
    routes = []

    def per_sample(t):
        routes.append(plain_eager([t]))
        return ops.fast.activation(t, "relu", 0.0, 1.0)

    y = torch.func.vmap(per_sample)(x)
    assert routes == [False]
    assert plain_eager([x])
    assert torch.equal(y, torch.relu(x))


def test_torch_compile_traces_the_registered_op():
    seen = []

    def backend(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    conv = tt.nn.Conv2d(4, 3, 3, padding=1, bias=False).double()
    x, _ = _inputs()
    compiled = torch.compile(conv, backend=backend, fullgraph=True)
    out = compiled(x)
    assert any("tridnn.conv_forward" in s for s in seen), seen
    assert torch.equal(out, conv(x))


def test_conv_layer_geometry_follows_every_attribute_and_size():
    """nn.Conv2d keeps its op geometry per attribute objects and sizes: reassigned
    stride, padding, dilation, groups and new input sizes ("same" padding) compute
    afresh; mutable attributes are never kept. Each result equals PyTorch's conv2d."""
    g = torch.Generator().manual_seed(3)
    conv = tt.nn.Conv2d(4, 4, 3, padding=1, bias=False).double()
    x = torch.randn(2, 4, 7, 6, generator=g, dtype=torch.float64)

    def check(inp):
        want = torch.nn.functional.conv2d(inp, conv.weight, None, conv.stride, conv.padding, conv.dilation,
                                          conv.groups)
        got = conv(inp)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)

    for _ in range(2):
        check(x)
    conv.stride = (2, 1)
    check(x)
    conv.padding = (0, 2)
    check(x)
    conv.dilation = (2, 2)
    check(x)
    conv.padding = "same"
    conv.stride = (1, 1)
    check(x)
    check(torch.randn(1, 4, 9, 5, generator=g, dtype=torch.float64))  # "same" follows the input size
    conv.padding = [1, 1]  # a list can change in place: computed every call, never kept
    check(x)
    conv.padding[0] = 0
    check(x)
    assert conv.__dict__["_tridnn_geometry"][0] == "same"
    conv.padding, conv.dilation = (1, 1), (1, 1)
    conv.groups = 2
    conv.weight = torch.nn.Parameter(torch.randn(4, 2, 3, 3, generator=g, dtype=torch.float64))
    check(x)
