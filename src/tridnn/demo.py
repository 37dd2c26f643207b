"""``tridnn demo``: train a small CNN on scikit-learn's 8x8 digits with tridnn calls only.

The network, in cuDNN's calling model (descriptors, find, workspace, one call per op):

    x (N,1,8,8) -> conv 3x3 (16) -> batch norm -> relu -> max pool 2x2
                -> conv 3x3 (32) -> batch norm -> relu -> average pool 4x4
                -> conv 1x1 (10) + bias -> log-softmax -> negative log-likelihood

Forward and backward run through tridnn's API (convolution forward / backward data /
backward filter / backward bias, batch norm training and backward, activation,
pooling, softmax, add_tensor); SGD with momentum updates the parameters with
add_tensor as well. Only the loss value and its gradient (one -1/N per row) are
computed on the host. The convolution algorithms come from ``find`` (through the
find cache, so a second run with the same seed makes the same choices and gives
the same result bit for bit).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

EPSILON = 1e-5
BN_AVERAGE_FACTOR = 0.1


@dataclass
class DemoConfig:
    epochs: int | None = None        # default 12
    batch_size: int | None = None    # default 32
    lr: float | None = None          # default 0.05
    momentum: float | None = None    # default 0.9
    seed: int = 0
    device: str = "cpu"
    algo: str = "find"               # find | auto | heuristic
    train_fraction: float = 1.0
    progress: bool = True
    verbose: bool = True
    find_time_budget_s: float = 0.25

    def resolved(self) -> "DemoConfig":
        from .errors import BadParamError
        out = DemoConfig(**{**self.__dict__})
        out.epochs = 12 if self.epochs is None else self.epochs
        out.batch_size = 32 if self.batch_size is None else self.batch_size
        out.lr = 0.05 if self.lr is None else self.lr
        out.momentum = 0.9 if self.momentum is None else self.momentum
        if out.epochs < 1 or out.batch_size < 1:
            raise BadParamError(f"epochs and batch size must be >= 1, got {out.epochs} and {out.batch_size}")
        if not 0 < out.train_fraction <= 1:
            raise BadParamError(f"train fraction must be in (0, 1], got {out.train_fraction}")
        if out.algo not in ("find", "auto", "heuristic"):
            raise BadParamError(f"unknown algorithm choice {out.algo!r}; valid: find, auto, heuristic")
        return out


@dataclass
class DemoResult:
    test_accuracy: float
    epoch_seconds: list
    epoch_losses: list
    setup_seconds: float
    choices: list                    # (layer, direction, algo, ms, workspace bytes)
    parameters: dict = field(repr=False, default_factory=dict)  # name -> host copy


# -- data ---------------------------------------------------------------------------------------
def load_data(seed: int, train_fraction: float = 1.0):
    """Standardized 8x8 digits as (N, 1, 8, 8) float32, split 80/20 stratified by class."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        from .errors import RuntimePrerequisiteMissingError
        raise RuntimePrerequisiteMissingError("the demo needs scikit-learn: pip install 'tridnn[demo]'") from None
    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    mean, std = x_train.mean(), x_train.std()
    prep = lambda a: ((a - mean) / std).reshape(-1, 1, 8, 8).astype(np.float32)
    if train_fraction < 1:
        keep = np.random.default_rng(seed).permutation(len(x_train))[:max(1, int(len(x_train) * train_fraction))]
        x_train, y_train = x_train[np.sort(keep)], y_train[np.sort(keep)]
    return prep(x_train), y_train, prep(x_test), y_test


# -- the network ----------------------------------------------------------------------------------
class Tensor:
    """A descriptor and its array on the handle's device."""

    def __init__(self, handle, desc, values=None):
        from .reproduce import device_array
        self.desc = desc
        self.array = device_array(handle, desc, values)

    def host(self) -> np.ndarray:
        from .reproduce import to_host
        return to_host(self.array)

    def upload(self, values) -> None:
        if isinstance(self.array, np.ndarray):
            self.array[...] = values
        else:
            from .reproduce import device_array_copy
            device_array_copy(self.array, values)


class ConvLayer:
    """A convolution with its filter, gradient, momentum buffer and chosen algorithms."""

    def __init__(self, name, handle, rng, c, k, kernel, padding):
        import tridnn
        self.name = name
        self.conv = tridnn.ConvolutionDescriptor(padding=padding)
        fan_in = c * kernel * kernel
        self.w_desc = tridnn.FilterDescriptor((k, c, kernel, kernel))
        w = rng.standard_normal(self.w_desc.dims) * np.sqrt(2.0 / fan_in)
        self.w = Tensor(handle, self.w_desc.as_tensor(), w)
        self.dw = Tensor(handle, self.w_desc.as_tensor())
        self.v = Tensor(handle, self.w_desc.as_tensor(), np.zeros(self.w_desc.dims))


class BatchNormLayer:
    def __init__(self, handle, x_desc):
        import tridnn
        self.desc = tridnn.derive_bn_tensor_descriptor(x_desc, tridnn.BatchNormMode.SPATIAL)
        dims = self.desc.dims
        self.scale = Tensor(handle, self.desc, np.ones(dims))
        self.bias = Tensor(handle, self.desc, np.zeros(dims))
        self.running_mean = Tensor(handle, self.desc, np.zeros(dims))
        self.running_var = Tensor(handle, self.desc, np.ones(dims))
        self.saved_mean = Tensor(handle, self.desc)
        self.saved_inv_var = Tensor(handle, self.desc)
        self.dscale = Tensor(handle, self.desc)
        self.dbias = Tensor(handle, self.desc)
        self.v_scale = Tensor(handle, self.desc, np.zeros(dims))
        self.v_bias = Tensor(handle, self.desc, np.zeros(dims))


class Activations:
    """Every intermediate tensor (and its gradient) of one batch size."""

    def __init__(self, net, n: int, training: bool):
        import tridnn
        h = net.handle
        self.n = n
        packed = lambda *dims: tridnn.TensorDescriptor.packed(dims)
        names = {"x": (n, 1, 8, 8), "c1": (n, 16, 8, 8), "b1": (n, 16, 8, 8), "r1": (n, 16, 8, 8),
                 "p1": (n, 16, 4, 4), "c2": (n, 32, 4, 4), "b2": (n, 32, 4, 4), "r2": (n, 32, 4, 4),
                 "p2": (n, 32, 1, 1), "c3": (n, 10, 1, 1), "logp": (n, 10, 1, 1)}
        self.t = {name: Tensor(h, packed(*dims)) for name, dims in names.items()}
        self.d = {name: Tensor(h, packed(*dims)) for name, dims in names.items()
                  if training and name != "x"}
        self.algos = {}
        for layer, x_name, y_name in ((net.conv1, "x", "c1"), (net.conv2, "p1", "c2"), (net.conv3, "p2", "c3")):
            directions = ("fwd", "bwd_filter") if training else ("fwd",)
            if training and layer is not net.conv1:
                directions += ("bwd_data",)
            for direction in directions:
                self.algos[(layer.name, direction)] = net.choose(layer, direction, self.t[x_name].desc,
                                                                 self.t[y_name].desc)
        need = max((a[1] for a in self.algos.values()), default=0)
        self.workspace = h.workspace(need) if need else None


class Net:
    def __init__(self, handle, seed: int, algo: str):
        import tridnn
        self.handle = handle
        self.algo = algo
        rng = np.random.default_rng(seed)
        self.conv1 = ConvLayer("conv1", handle, rng, 1, 16, 3, 1)
        self.conv2 = ConvLayer("conv2", handle, rng, 16, 32, 3, 1)
        self.conv3 = ConvLayer("conv3", handle, rng, 32, 10, 1, 0)
        bias_desc = tridnn.TensorDescriptor.packed((1, 10, 1, 1))
        self.bias3 = Tensor(handle, bias_desc, np.zeros(bias_desc.dims))
        self.dbias3 = Tensor(handle, bias_desc)
        self.vbias3 = Tensor(handle, bias_desc, np.zeros(bias_desc.dims))
        packed = tridnn.TensorDescriptor.packed
        self.bn1 = BatchNormLayer(handle, packed((1, 16, 8, 8)))
        self.bn2 = BatchNormLayer(handle, packed((1, 32, 4, 4)))
        self.relu = tridnn.ActivationDescriptor(tridnn.ActivationMode.RELU)
        self.max_pool = tridnn.PoolingDescriptor(tridnn.PoolingMode.MAX, 2)
        self.avg_pool = tridnn.PoolingDescriptor(tridnn.PoolingMode.AVERAGE_COUNT_INCLUDE_PADDING, 4)
        self.choices = {}
        self._plans = {}

    # -- algorithm choice -----------------------------------------------------------------
    def choose(self, layer: ConvLayer, direction: str, x_desc, y_desc):
        """(algorithm enum, workspace bytes): find's winner through the find cache."""
        from .algorithms import selection
        from .algorithms.problem import ConvProblem
        problem = ConvProblem(direction, x_desc, layer.w_desc, y_desc, layer.conv)
        algorithm = selection.choose(self.handle, problem, self.algo)
        workspace = algorithm.workspace_size(problem)
        entry = self.handle.find_cache.get(selection.cache_key(self.handle, problem))
        ms = entry.time_ms if entry is not None and entry.algo_id == algorithm.id else \
            algorithm.estimate(problem) * 1e3
        measured = entry is not None and entry.algo_id == algorithm.id
        self.choices[(layer.name, direction, problem.n)] = (algorithm.name, ms, measured, workspace)
        return algorithm.enum, workspace

    def plan(self, n: int, training: bool) -> Activations:
        key = (n, training)
        if key not in self._plans:
            self._plans[key] = Activations(self, n, training)
        return self._plans[key]

    # -- forward and backward -------------------------------------------------------------
    def forward(self, a: Activations, training: bool) -> None:
        import tridnn
        h, t = self.handle, a.t
        self._conv_fwd(a, self.conv1, "x", "c1")
        self._bn_fwd(a, self.bn1, "c1", "b1", training)
        tridnn.activation_forward(h, self.relu, 1.0, t["b1"].desc, t["b1"].array, 0.0, t["r1"].desc, t["r1"].array)
        tridnn.pooling_forward(h, self.max_pool, 1.0, t["r1"].desc, t["r1"].array, 0.0, t["p1"].desc, t["p1"].array)
        self._conv_fwd(a, self.conv2, "p1", "c2")
        self._bn_fwd(a, self.bn2, "c2", "b2", training)
        tridnn.activation_forward(h, self.relu, 1.0, t["b2"].desc, t["b2"].array, 0.0, t["r2"].desc, t["r2"].array)
        tridnn.pooling_forward(h, self.avg_pool, 1.0, t["r2"].desc, t["r2"].array, 0.0, t["p2"].desc, t["p2"].array)
        self._conv_fwd(a, self.conv3, "p2", "c3")
        tridnn.add_tensor(h, 1.0, self.bias3.desc, self.bias3.array, 1.0, t["c3"].desc, t["c3"].array)
        tridnn.softmax_forward(h, tridnn.SoftmaxAlgorithm.LOG, tridnn.SoftmaxMode.INSTANCE, 1.0,
                               t["c3"].desc, t["c3"].array, 0.0, t["logp"].desc, t["logp"].array)

    def _conv_fwd(self, a, layer, x, y):
        import tridnn
        t = a.t
        tridnn.convolution_forward(self.handle, 1.0, t[x].desc, t[x].array, layer.w_desc, layer.w.array,
                                   layer.conv, a.algos[(layer.name, "fwd")][0], a.workspace, 0.0,
                                   t[y].desc, t[y].array)

    def _bn_fwd(self, a, bn, x, y, training):
        import tridnn
        t, mode = a.t, tridnn.BatchNormMode.SPATIAL
        if training:
            tridnn.batch_norm_forward_training(
                self.handle, mode, 1.0, 0.0, t[x].desc, t[x].array, t[y].desc, t[y].array, bn.desc,
                bn.scale.array, bn.bias.array, BN_AVERAGE_FACTOR, bn.running_mean.array,
                bn.running_var.array, EPSILON, bn.saved_mean.array, bn.saved_inv_var.array)
        else:
            tridnn.batch_norm_forward_inference(
                self.handle, mode, 1.0, 0.0, t[x].desc, t[x].array, t[y].desc, t[y].array, bn.desc,
                bn.scale.array, bn.bias.array, bn.running_mean.array, bn.running_var.array, EPSILON)

    def backward(self, a: Activations) -> None:
        """Gradients of every parameter from d['logp'] (the loss gradient, already uploaded)."""
        import tridnn
        h, t, d = self.handle, a.t, a.d
        tridnn.softmax_backward(h, tridnn.SoftmaxAlgorithm.LOG, tridnn.SoftmaxMode.INSTANCE, 1.0,
                                t["logp"].desc, t["logp"].array, d["logp"].desc, d["logp"].array, 0.0,
                                d["c3"].desc, d["c3"].array)
        tridnn.convolution_backward_bias(h, 1.0, d["c3"].desc, d["c3"].array, 0.0, self.dbias3.desc,
                                         self.dbias3.array)
        self._conv_bwd(a, self.conv3, "p2", "c3", data=True)
        tridnn.pooling_backward(h, self.avg_pool, 1.0, t["p2"].desc, t["p2"].array, d["p2"].desc,
                                d["p2"].array, t["r2"].desc, t["r2"].array, 0.0, d["r2"].desc, d["r2"].array)
        tridnn.activation_backward(h, self.relu, 1.0, t["r2"].desc, t["r2"].array, d["r2"].desc,
                                   d["r2"].array, t["b2"].desc, t["b2"].array, 0.0, d["b2"].desc,
                                   d["b2"].array)
        self._bn_bwd(a, self.bn2, "c2", "b2")
        self._conv_bwd(a, self.conv2, "p1", "c2", data=True)
        tridnn.pooling_backward(h, self.max_pool, 1.0, t["p1"].desc, t["p1"].array, d["p1"].desc,
                                d["p1"].array, t["r1"].desc, t["r1"].array, 0.0, d["r1"].desc, d["r1"].array)
        tridnn.activation_backward(h, self.relu, 1.0, t["r1"].desc, t["r1"].array, d["r1"].desc,
                                   d["r1"].array, t["b1"].desc, t["b1"].array, 0.0, d["b1"].desc,
                                   d["b1"].array)
        self._bn_bwd(a, self.bn1, "c1", "b1")
        self._conv_bwd(a, self.conv1, "x", "c1", data=False)

    def _conv_bwd(self, a, layer, x, y, data: bool):
        import tridnn
        t, d = a.t, a.d
        tridnn.convolution_backward_filter(self.handle, 1.0, t[x].desc, t[x].array, d[y].desc, d[y].array,
                                           layer.conv, a.algos[(layer.name, "bwd_filter")][0], a.workspace,
                                           0.0, layer.w_desc, layer.dw.array)
        if data:
            tridnn.convolution_backward_data(self.handle, 1.0, layer.w_desc, layer.w.array, d[y].desc,
                                             d[y].array, layer.conv, a.algos[(layer.name, "bwd_data")][0],
                                             a.workspace, 0.0, d[x].desc, d[x].array)

    def _bn_bwd(self, a, bn, x, y):
        import tridnn
        t, d = a.t, a.d
        tridnn.batch_norm_backward(self.handle, tridnn.BatchNormMode.SPATIAL, 1.0, 0.0, 1.0, 0.0,
                                   t[x].desc, t[x].array, d[y].desc, d[y].array, d[x].desc, d[x].array,
                                   bn.desc, bn.scale.array, bn.dscale.array, bn.dbias.array, EPSILON,
                                   bn.saved_mean.array, bn.saved_inv_var.array)

    # -- SGD with momentum ------------------------------------------------------------------
    def parameters(self):
        """(name, parameter, gradient, velocity) for every trained tensor."""
        out = []
        for layer in (self.conv1, self.conv2, self.conv3):
            out.append((layer.name + ".w", layer.w, layer.dw, layer.v))
        for name, bn in (("bn1", self.bn1), ("bn2", self.bn2)):
            out.append((name + ".scale", bn.scale, bn.dscale, bn.v_scale))
            out.append((name + ".bias", bn.bias, bn.dbias, bn.v_bias))
        out.append(("conv3.bias", self.bias3, self.dbias3, self.vbias3))
        return out

    def sgd_step(self, lr: float, momentum: float) -> None:
        """v = momentum * v + g; p = p - lr * v (tridnn's add_tensor: c = alpha * a + beta * c)."""
        import tridnn
        h = self.handle
        for _, p, g, v in self.parameters():
            tridnn.add_tensor(h, 1.0, g.desc, g.array, momentum, v.desc, v.array)
            tridnn.add_tensor(h, -lr, v.desc, v.array, 1.0, p.desc, p.array)


# -- training -------------------------------------------------------------------------------
def _bar(iterable, enabled, **kwargs):
    from .cli import progress
    return progress(iterable, enabled, **kwargs)


def evaluate(net: Net, x, y) -> float:
    a = net.plan(len(x), training=False)
    a.t["x"].upload(x)
    net.forward(a, training=False)
    logp = a.t["logp"].host().reshape(len(x), 10)
    return float((logp.argmax(axis=1) == y).mean())


def run_demo(config: DemoConfig, out=None) -> DemoResult:
    from .handle import Handle
    cfg = config.resolved()
    out = out or sys.stdout
    say = (lambda *a: print(*a, file=out)) if cfg.verbose else (lambda *a: None)
    x_train, y_train, x_test, y_test = load_data(cfg.seed, cfg.train_fraction)
    n = min(cfg.batch_size, len(x_train))
    say(f"tridnn demo: 8x8 digits, {len(x_train)} training / {len(x_test)} test images, "
        f"device {cfg.device}, batch {n}, {cfg.epochs} epochs, SGD lr {cfg.lr} momentum {cfg.momentum}")
    start = time.perf_counter()
    handle = Handle(cfg.device, find_time_budget_s=cfg.find_time_budget_s)
    net = Net(handle, cfg.seed, cfg.algo)
    train = net.plan(n, training=True)
    net.plan(len(x_test), training=False)
    setup = time.perf_counter() - start
    say(f"chose convolution algorithms ({cfg.algo}) in {setup:.2f} s")
    rng = np.random.default_rng(cfg.seed)
    steps = len(x_train) // n
    epoch_seconds, epoch_losses = [], []
    for epoch in range(cfg.epochs):
        lr = cfg.lr * 0.5 * (1 + np.cos(np.pi * epoch / cfg.epochs))  # cosine decay per epoch
        order = rng.permutation(len(x_train))
        t0 = time.perf_counter()
        losses, correct = [], 0
        bar = _bar(range(steps), cfg.progress, desc=f"epoch {epoch + 1}/{cfg.epochs}", unit="batch",
                   leave=True)
        for step in bar:
            idx = order[step * n:(step + 1) * n]
            labels = y_train[idx]
            train.t["x"].upload(x_train[idx])
            net.forward(train, training=True)
            logp = train.t["logp"].host().reshape(n, 10)
            losses.append(float(-logp[np.arange(n), labels].mean()))
            correct += int((logp.argmax(axis=1) == labels).sum())
            grad = np.zeros((n, 10), np.float32)
            grad[np.arange(n), labels] = -1.0 / n
            train.d["logp"].upload(grad.reshape(n, 10, 1, 1))
            net.backward(train)
            net.sgd_step(lr, cfg.momentum)
            if hasattr(bar, "set_postfix_str") and (step % 5 == 0 or step == steps - 1):
                bar.set_postfix_str(f"loss {np.mean(losses):.3f} acc {correct / ((step + 1) * n):.3f}")
        epoch_seconds.append(time.perf_counter() - t0)
        epoch_losses.append(float(np.mean(losses)))
        if not cfg.progress:
            say(f"epoch {epoch + 1}/{cfg.epochs}: loss {epoch_losses[-1]:.4f}, train accuracy "
                f"{correct / (steps * n):.4f}, {epoch_seconds[-1]:.2f} s")
    accuracy = evaluate(net, x_test, y_test)
    total = time.perf_counter() - start
    say(f"\ntest accuracy: {accuracy * 100:.2f}% ({int(round(accuracy * len(x_test)))}/{len(x_test)})")
    say(f"time per epoch: {np.mean(epoch_seconds):.2f} s (total {total:.1f} s including "
        f"{setup:.2f} s of algorithm selection)")
    choices = [(layer, direction, *values) for (layer, direction, batch), values in sorted(net.choices.items())
               if batch == n]
    say(format_choices(choices, n, cfg.algo))
    params = {name: p.host() for name, p, _, _ in net.parameters()}
    return DemoResult(accuracy, epoch_seconds, epoch_losses, setup,
                      [(layer, direction, algo, ms, ws) for layer, direction, algo, ms, _, ws in choices],
                      params)


def format_choices(choices, batch, how) -> str:
    from .bench import format_table
    from .cli import human_bytes
    rows = [(layer, direction, algo, f"{ms:.3f}" + ("" if measured else " (est)"), human_bytes(ws))
            for layer, direction, algo, ms, measured, ws in choices]
    order = {"fwd": 0, "bwd_data": 1, "bwd_filter": 2}
    rows.sort(key=lambda r: (r[0], order[r[1]]))
    title = f"convolution algorithms ({how}, batch {batch}; time from find, '(est)' = heuristic estimate):"
    return title + "\n" + format_table(("layer", "direction", "algo", "ms", "workspace"), rows)
