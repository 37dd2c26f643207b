"""The issue's "done when": a small CNN built from tridnn calls only (conv + bias, batch
norm, relu, max pool, conv, average pool, log-softmax cross-entropy), forward and
backward, with every gradient matching finite differences of a float64 reference of
the whole network."""
import numpy as np
import pytest

import tridnn
from tridnn import reference as ref
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode
from tridnn.errors import NotSupportedError
from tridnn.reference import normalization as ref_norm
from tridnn.reference import pooling as ref_pool
from tridnn.reference import softmax as ref_softmax

from layer_cases import handle

N, C, H, W = 2, 3, 8, 8
K1, K2 = 4, 5
EPS = 1e-5


def init(rng):
    return dict(x=rng.standard_normal((N, C, H, W)), w1=rng.standard_normal((K1, C, 3, 3)) * 0.4,
                b1=rng.standard_normal((1, K1, 1, 1)) * 0.1, gamma=rng.uniform(0.5, 1.5, (1, K1, 1, 1)),
                beta=rng.standard_normal((1, K1, 1, 1)) * 0.1, w2=rng.standard_normal((K2, K1, 3, 3)) * 0.4)


def reference_loss(p, labels):
    """The whole network in float64 from the reference modules."""
    a1 = ref.conv_forward(p["x"], p["w1"], 1, 1) + p["b1"]
    a2, _, _ = ref_norm.batch_norm_train(a1, p["gamma"], p["beta"], EPS, spatial=True)
    a3 = np.maximum(a2, 0)
    a4 = ref_pool.pooling_forward(a3, 0, (2, 2), (0, 0), (2, 2))
    a5 = ref.conv_forward(a4, p["w2"], 1, 0)
    a6 = ref_pool.pooling_forward(a5, 1, (2, 2), (0, 0), (2, 2))
    logp = ref_softmax.softmax_forward(a6, 2, 0)
    return -logp[np.arange(N), labels, 0, 0].mean()


def numeric_gradients(p, labels, eps=1e-6):
    grads = {}
    for name, value in p.items():
        g = np.zeros_like(value)
        for idx in np.ndindex(*value.shape):
            old = value[idx]
            value[idx] = old + eps
            plus = reference_loss(p, labels)
            value[idx] = old - eps
            minus = reference_loss(p, labels)
            value[idx] = old
            g[idx] = (plus - minus) / (2 * eps)
        grads[name] = g
    return grads


class Net:
    """Forward and backward through tridnn's descriptor API only."""

    def __init__(self, dtype, layout):
        self.h = handle()
        self.dtype = tridnn.DataType.of(dtype)
        self.fmt = tridnn.TensorFormat[layout]
        self.conv1 = tridnn.ConvolutionDescriptor(padding=1)
        self.conv2 = tridnn.ConvolutionDescriptor(padding=0)
        self.maxpool = tridnn.PoolingDescriptor(tridnn.PoolingMode.MAX, 2, 0, 2)
        self.avgpool = tridnn.PoolingDescriptor(tridnn.PoolingMode.AVERAGE_COUNT_INCLUDE_PADDING, 2, 0, 2)
        self.relu = ActivationDescriptor(ActivationMode.RELU)

    def tensor(self, dims, values=None):
        desc = tridnn.TensorDescriptor.packed(dims, self.dtype, self.fmt)
        arr = self.h.backend.empty(desc)
        arr[...] = np.nan if values is None else values
        return desc, arr

    def conv(self, direction, conv_desc, x_desc, w_desc, y_desc):
        getter = {"fwd": tridnn.get_convolution_forward_algorithm,
                  "bwd_data": tridnn.get_convolution_backward_data_algorithm,
                  "bwd_filter": tridnn.get_convolution_backward_filter_algorithm}[direction]
        sizer = {"fwd": tridnn.get_convolution_forward_workspace_size,
                 "bwd_data": tridnn.get_convolution_backward_data_workspace_size,
                 "bwd_filter": tridnn.get_convolution_backward_filter_workspace_size}[direction]
        args = {"fwd": (x_desc, w_desc, conv_desc, y_desc), "bwd_data": (w_desc, y_desc, conv_desc, x_desc),
                "bwd_filter": (x_desc, y_desc, conv_desc, w_desc)}[direction]
        algo = next(r.algo for r in getter(self.h, *args) if r.status == tridnn.Status.SUCCESS)
        return algo, np.empty(sizer(self.h, *args, algo), np.uint8)

    def run(self, p, labels):
        h, dt = self.h, self.dtype
        x_desc, x = self.tensor((N, C, H, W), p["x"])
        w1_desc = tridnn.FilterDescriptor((K1, C, 3, 3), dt, self.fmt)
        w1 = h.backend.empty(w1_desc.as_tensor())
        w1[...] = p["w1"]
        w2_desc = tridnn.FilterDescriptor((K2, K1, 3, 3), dt, self.fmt)
        w2 = h.backend.empty(w2_desc.as_tensor())
        w2[...] = p["w2"]
        b_desc = tridnn.TensorDescriptor((1, K1, 1, 1), dt)
        b1 = p["b1"].astype(dt.numpy)

        # forward
        a1_desc, a1 = self.tensor((N, K1, H, W))
        algo, ws = self.conv("fwd", self.conv1, x_desc, w1_desc, a1_desc)
        tridnn.convolution_forward(h, 1.0, x_desc, x, w1_desc, w1, self.conv1, algo, ws, 0.0, a1_desc, a1)
        tridnn.add_tensor(h, 1.0, b_desc, b1, 1.0, a1_desc, a1)
        bn = tridnn.derive_bn_tensor_descriptor(a1_desc, tridnn.BatchNormMode.SPATIAL)
        gamma, beta = p["gamma"].astype(bn.dtype.numpy), p["beta"].astype(bn.dtype.numpy)
        mean, inv = np.empty(bn.dims, bn.dtype.numpy), np.empty(bn.dims, bn.dtype.numpy)
        a2_desc, a2 = self.tensor(a1_desc.dims)
        tridnn.batch_norm_forward_training(h, "spatial", 1.0, 0.0, a1_desc, a1, a2_desc, a2, bn, gamma, beta, 0.1,
                                           None, None, EPS, mean, inv)
        a3_desc, a3 = self.tensor(a1_desc.dims)
        tridnn.activation_forward(h, self.relu, 1.0, a2_desc, a2, 0.0, a3_desc, a3)
        a4_desc, a4 = self.tensor(tridnn.get_pooling_forward_output_dim(self.maxpool, a3_desc))
        tridnn.pooling_forward(h, self.maxpool, 1.0, a3_desc, a3, 0.0, a4_desc, a4)
        a5_desc, a5 = self.tensor(self.conv2.output_dims(a4_desc, w2_desc))
        algo, ws = self.conv("fwd", self.conv2, a4_desc, w2_desc, a5_desc)
        tridnn.convolution_forward(h, 1.0, a4_desc, a4, w2_desc, w2, self.conv2, algo, ws, 0.0, a5_desc, a5)
        a6_desc, a6 = self.tensor(tridnn.get_pooling_forward_output_dim(self.avgpool, a5_desc))
        tridnn.pooling_forward(h, self.avgpool, 1.0, a5_desc, a5, 0.0, a6_desc, a6)
        logp_desc, logp = self.tensor(a6_desc.dims)
        tridnn.softmax_forward(h, "log", "instance", 1.0, a6_desc, a6, 0.0, logp_desc, logp)
        loss = -np.mean(logp[np.arange(N), labels, 0, 0].astype(np.float64))

        # backward: d loss / d logp = -onehot / N
        onehot = np.zeros(logp_desc.dims)
        onehot[np.arange(N), labels, 0, 0] = -1.0 / N
        _, dlogp = self.tensor(logp_desc.dims, onehot)
        _, da6 = self.tensor(a6_desc.dims)
        tridnn.softmax_backward(h, "log", "instance", 1.0, logp_desc, logp, logp_desc, dlogp, 0.0, a6_desc, da6)
        _, da5 = self.tensor(a5_desc.dims)
        tridnn.pooling_backward(h, self.avgpool, 1.0, a6_desc, a6, a6_desc, da6, a5_desc, a5, 0.0, a5_desc, da5)
        dw2 = h.backend.empty(w2_desc.as_tensor())
        algo, ws = self.conv("bwd_filter", self.conv2, a4_desc, w2_desc, a5_desc)
        tridnn.convolution_backward_filter(h, 1.0, a4_desc, a4, a5_desc, da5, self.conv2, algo, ws, 0.0, w2_desc, dw2)
        _, da4 = self.tensor(a4_desc.dims)
        algo, ws = self.conv("bwd_data", self.conv2, a4_desc, w2_desc, a5_desc)
        tridnn.convolution_backward_data(h, 1.0, w2_desc, w2, a5_desc, da5, self.conv2, algo, ws, 0.0, a4_desc, da4)
        _, da3 = self.tensor(a3_desc.dims)
        tridnn.pooling_backward(h, self.maxpool, 1.0, a4_desc, a4, a4_desc, da4, a3_desc, a3, 0.0, a3_desc, da3)
        _, da2 = self.tensor(a2_desc.dims)
        tridnn.activation_backward(h, self.relu, 1.0, a3_desc, a3, a3_desc, da3, a2_desc, a2, 0.0, a2_desc, da2)
        _, da1 = self.tensor(a1_desc.dims)
        dgamma, dbeta = np.empty(bn.dims, bn.dtype.numpy), np.empty(bn.dims, bn.dtype.numpy)
        tridnn.batch_norm_backward(h, "spatial", 1.0, 0.0, 1.0, 0.0, a1_desc, a1, a2_desc, da2, a1_desc, da1, bn,
                                   gamma, dgamma, dbeta, EPS, mean, inv)
        db1 = np.empty(b_desc.dims, dt.numpy)
        tridnn.convolution_backward_bias(h, 1.0, a1_desc, da1, 0.0, b_desc, db1)
        dw1 = h.backend.empty(w1_desc.as_tensor())
        algo, ws = self.conv("bwd_filter", self.conv1, x_desc, w1_desc, a1_desc)
        tridnn.convolution_backward_filter(h, 1.0, x_desc, x, a1_desc, da1, self.conv1, algo, ws, 0.0, w1_desc, dw1)
        _, dx = self.tensor(x_desc.dims)
        algo, ws = self.conv("bwd_data", self.conv1, x_desc, w1_desc, a1_desc)
        tridnn.convolution_backward_data(h, 1.0, w1_desc, w1, a1_desc, da1, self.conv1, algo, ws, 0.0, x_desc, dx)
        grads = dict(x=dx, w1=dw1, b1=db1, gamma=dgamma, beta=dbeta, w2=dw2)
        return loss, {k: np.asarray(v, np.float64) for k, v in grads.items()}


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(2024)
    p = init(rng)
    labels = rng.integers(0, K2, N)
    return p, labels, reference_loss(p, labels), numeric_gradients(p, labels)


@pytest.mark.parametrize("dtype,layout,tol", [("float64", "NCHW", 1e-6), ("float64", "NHWC", 1e-6),
                                              ("float32", "NCHW", 2e-3), ("float32", "NHWC", 2e-3)])
def test_cnn_gradients_match_float64_reference(problem, dtype, layout, tol):
    p, labels, loss_ref, numeric = problem
    if not hasattr(tridnn, "convolution_backward_data"):
        pytest.skip("convolution backward is not in tridnn yet")
    try:
        loss, grads = Net(dtype, layout).run({k: v.copy() for k, v in p.items()}, labels)
    except NotSupportedError as exc:  # pragma: no cover - every conv has at least one algorithm
        pytest.fail(f"no algorithm for a network layer: {exc}")
    assert abs(loss - loss_ref) <= tol * max(1.0, abs(loss_ref))
    for name, g in grads.items():
        want = numeric[name]
        err = np.abs(g - want).max() / max(np.abs(want).max(), 1e-3)
        assert err <= tol, f"{name}: relative error {err:.2e} > {tol:g} ({dtype}, {layout})"
