"""tridnn.torch's training batch norm in eager mode updates the module's running
statistics in place (ops._bn_training_in_place) instead of through the op's copies: the
results (y, running statistics, gradients) must equal the registered op's route bit for
bit, on the NumPy backend and on the Triton backend (with its per-signature recipes), and
running statistics that overlap an input must still take the op's route."""
import pytest

torch = pytest.importorskip("torch")

import tridnn  # noqa: E402
from tridnn import handle as handle_mod  # noqa: E402
from tridnn.torch import ops  # noqa: E402


@pytest.fixture(params=["numpy", "triton"])
def backend(request):
    handle_mod.default_handle("cpu")
    table = handle_mod._default.handles
    old = table["cpu"]
    if request.param == "triton":
        table["cpu"] = tridnn.Handle(device="cpu", backend="triton")
    yield request.param
    table["cpu"] = old


def _step(train, x, w, b, rm, rv, dy):
    x = x.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    b = b.clone().requires_grad_(True)
    y = train(x, w, b, rm, rv, 0.1, 1e-5)
    y.backward(dy)
    return [y.detach(), rm, rv, x.grad, w.grad, b.grad]


def _through_op(x, w, b, rm, rv, momentum, eps):
    y, _, _, new_mean, new_var = torch.ops.tridnn.batch_norm_training(x, w, b, rm, rv, momentum, eps)
    with torch.no_grad():
        rm.copy_(new_mean)
        rv.copy_(new_var)
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
def test_in_place_route_matches_the_op_bitwise(backend, dtype, channels_last):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 4, 5, 3, generator=g, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(4, generator=g, dtype=dtype), torch.randn(4, generator=g, dtype=dtype)
    dy = torch.randn(x.shape, generator=g, dtype=dtype)
    rm0, rv0 = torch.randn(4, generator=g, dtype=dtype), torch.rand(4, generator=g, dtype=dtype) + 0.5
    stats_a, stats_b = (rm0.clone(), rv0.clone()), (rm0.clone(), rv0.clone())
    for _ in range(3):  # repeats: the Triton backend's recipes after the first call
        ours = _step(ops.batch_norm_train, x, w, b, *stats_a, dy)
        theirs = _step(_through_op, x, w, b, *stats_b, dy)
        for a, c in zip(ours, theirs):
            assert a.shape == c.shape and a.stride() == c.stride() and torch.equal(a, c)
    # and against float64 autograd for the first call's running statistics
    x64 = x.double()
    mean = x64.mean((0, 2, 3))
    var = x64.var((0, 2, 3), unbiased=True)
    rm, rv = rm0.double(), rv0.double()
    for _ in range(3):
        rm, rv = 0.9 * rm + 0.1 * mean, 0.9 * rv + 0.1 * var
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(stats_a[0].double(), rm, rtol=tol, atol=tol)
    torch.testing.assert_close(stats_a[1].double(), rv, rtol=tol, atol=tol)


def test_overlapping_running_stats_take_the_op_route(backend):
    """The op copies the running statistics first, so stats sharing memory with weight
    are accepted there; the in-place route must not change that."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 4, 3, 3, generator=g)
    buf = torch.rand(8, generator=g) + 0.5
    w = buf[:4]
    rm, rv = buf[:4].clone(), buf[4:]  # rv is a view of the same buffer as w: no overlap with w
    assert ops._separate(x, w, None, rm, rv)
    assert not ops._separate(x, w, None, buf[:4], buf[4:])
    shared = torch.rand(4, generator=g) + 0.5
    want_rm = shared.clone()
    want_rv = shared.clone()
    y_ref = _through_op(x, shared.clone(), None, want_rm, want_rv, 0.1, 1e-5)
    y = ops.batch_norm_train(x, shared, None, shared, shared.clone(), 0.1, 1e-5)  # rm is the weight itself
    assert torch.equal(y, y_ref)
    assert torch.equal(shared, want_rm)


@pytest.mark.parametrize("channels_last", [False, True])
def test_in_place_route_with_half_parameters_matches_the_op_bitwise(backend, channels_last):
    """A half-precision model's batch norm (float16 weight, bias and running statistics;
    bfloat16 on a GPU, which the interpreter lacks) on float32 data: the in-place route,
    with its recipes on the Triton backend, equals the op's route bit for bit."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(3, 4, 5, 3, generator=g)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    half = torch.float16
    w, b = torch.randn(4, generator=g).to(half), torch.randn(4, generator=g).to(half)
    dy = torch.randn(x.shape, generator=g)
    rm0, rv0 = torch.randn(4, generator=g).to(half), (torch.rand(4, generator=g) + 0.5).to(half)
    stats_a, stats_b = (rm0.clone(), rv0.clone()), (rm0.clone(), rv0.clone())
    for _ in range(3):
        ours = _step(ops.batch_norm_train, x, w, b, *stats_a, dy)
        theirs = _step(_through_op, x, w, b, *stats_b, dy)
        for a, c in zip(ours, theirs):
            assert a.dtype == c.dtype and a.shape == c.shape and a.stride() == c.stride() and torch.equal(a, c)
    assert ours[4].dtype == half and stats_a[0].dtype == half


def test_in_place_route_runs_one_autograd_node_and_no_zero_gradients(backend):
    """The eager route's Function has one output (y): the backward materializes no zero
    gradients for the op's other outputs, and the gradients are the op's."""
    g = torch.Generator().manual_seed(10)
    x = torch.randn(2, 3, 4, 4, generator=g).requires_grad_(True)
    w = torch.rand(3, generator=g).requires_grad_(True)
    b = torch.randn(3, generator=g).requires_grad_(True)
    rm, rv = torch.zeros(3), torch.ones(3)
    y = ops.batch_norm_train(x, w, b, rm, rv, 0.1, 1e-5)
    assert type(y.grad_fn).__name__ == "_BatchNormTrainInPlaceBackward"
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y.backward(torch.ones_like(y))
    assert not [e for e in prof.events() if e.name == "aten::zeros"]
    # d(sum y)/dx of batch norm is zero; dbias is the count, dweight the sum of x-hat (zero)
    torch.testing.assert_close(b.grad, torch.full((3,), 32.0))
    torch.testing.assert_close(x.grad, torch.zeros_like(x), atol=1e-5, rtol=0)
    torch.testing.assert_close(w.grad, torch.zeros(3), atol=1e-4, rtol=0)
