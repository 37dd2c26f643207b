"""tridnn demo: a short training run learns, the same seed repeats bit for bit, and the
network's hand-written backward pass matches torch autograd."""
import numpy as np
import pytest

pytest.importorskip("sklearn")

import tridnn  # noqa: E402
from tridnn import cli  # noqa: E402
from tridnn.demo import DemoConfig, Net, load_data, run_demo  # noqa: E402

QUICK = dict(epochs=3, train_fraction=0.4, batch_size=16, progress=False, verbose=False, find_time_budget_s=0.02)


def test_short_run_learns_and_the_same_seed_repeats_bit_for_bit():
    result = run_demo(DemoConfig(seed=0, **QUICK))
    assert result.test_accuracy > 0.6  # chance is 0.1; the full demo reaches >= 0.97
    assert result.epoch_losses[-1] < result.epoch_losses[0]
    assert len(result.epoch_seconds) == 3 and all(t > 0 for t in result.epoch_seconds)
    directions = {(layer, direction) for layer, direction, *_ in result.choices}
    assert directions == {("conv1", "fwd"), ("conv1", "bwd_filter"),
                          ("conv2", "fwd"), ("conv2", "bwd_data"), ("conv2", "bwd_filter"),
                          ("conv3", "fwd"), ("conv3", "bwd_data"), ("conv3", "bwd_filter")}
    for _, direction, algo, ms, workspace in result.choices:
        assert algo in tridnn.types.ALGO_ENUMS[direction].__members__
        assert ms > 0 and workspace >= 0
    again = run_demo(DemoConfig(seed=0, **QUICK))  # same find cache, so the same algorithms
    assert again.choices == result.choices
    assert again.epoch_losses == result.epoch_losses
    assert again.test_accuracy == result.test_accuracy
    for name, value in result.parameters.items():
        np.testing.assert_array_equal(value, again.parameters[name], err_msg=name)


def test_different_seed_different_result():
    quick = dict(QUICK, algo="heuristic", epochs=1)
    assert run_demo(DemoConfig(seed=4, **quick)).epoch_losses != \
        run_demo(DemoConfig(seed=5, **quick)).epoch_losses


def test_backward_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x_train, y_train, _, _ = load_data(0, 0.1)
    x, y = x_train[:8], y_train[:8]
    net = Net(tridnn.Handle(find_cache=None), seed=5, algo="heuristic")
    rng = np.random.default_rng(1)  # non-trivial batch-norm parameters
    for bn in (net.bn1, net.bn2):
        bn.scale.upload(1 + 0.3 * rng.standard_normal(bn.desc.dims))
        bn.bias.upload(0.3 * rng.standard_normal(bn.desc.dims))
    net.bias3.upload(0.3 * rng.standard_normal(net.bias3.desc.dims))
    a = net.plan(len(x), training=True)
    a.t["x"].upload(x)
    net.forward(a, training=True)
    grad = np.zeros((len(x), 10), np.float32)
    grad[np.arange(len(x)), y] = -1.0 / len(x)
    a.d["logp"].upload(grad.reshape(len(x), 10, 1, 1))
    net.backward(a)

    leaf = lambda t: torch.tensor(t.host(), dtype=torch.float64, requires_grad=True)
    w1, w2, w3, b3 = leaf(net.conv1.w), leaf(net.conv2.w), leaf(net.conv3.w), leaf(net.bias3)
    g1, be1, g2, be2 = leaf(net.bn1.scale), leaf(net.bn1.bias), leaf(net.bn2.scale), leaf(net.bn2.bias)
    bn = lambda v, g, b: F.batch_norm(v, None, None, g.reshape(-1), b.reshape(-1), training=True, eps=1e-5)
    h = torch.tensor(x, dtype=torch.float64)
    h = F.max_pool2d(F.relu(bn(F.conv2d(h, w1, padding=1), g1, be1)), 2)
    h = F.avg_pool2d(F.relu(bn(F.conv2d(h, w2, padding=1), g2, be2)), 4)
    logp = F.log_softmax((F.conv2d(h, w3) + b3).reshape(len(x), 10), dim=1)
    np.testing.assert_allclose(a.t["logp"].host().reshape(len(x), 10), logp.detach().numpy(), atol=2e-5)
    F.nll_loss(logp, torch.tensor(y)).backward()
    pairs = [(net.conv1.dw, w1), (net.conv2.dw, w2), (net.conv3.dw, w3), (net.dbias3, b3),
             (net.bn1.dscale, g1), (net.bn1.dbias, be1), (net.bn2.dscale, g2), (net.bn2.dbias, be2)]
    for ours, theirs in pairs:
        want = theirs.grad.numpy()
        np.testing.assert_allclose(ours.host(), want, rtol=1e-3, atol=1e-5 * max(1.0, np.abs(want).max()))


def test_cli_demo_prints_accuracy_timing_and_algorithms(capsys):
    rc = cli.main(["demo", "--epochs", "1", "--train-fraction", "0.2", "--no-progress", "--algo", "heuristic"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "test accuracy:" in out and "time per epoch:" in out
    assert "conv2  bwd_data" in out and "workspace" in out


@pytest.mark.parametrize("bad, message", [(dict(train_fraction=0.0), "train fraction"),
                                          (dict(epochs=0), "epochs and batch size"),
                                          (dict(algo="fastest"), "unknown algorithm choice")])
def test_bad_config(bad, message):
    with pytest.raises(tridnn.BadParamError, match=message):
        run_demo(DemoConfig(**{**QUICK, **bad}))
