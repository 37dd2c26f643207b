"""Float64 layers with scalars float32 cannot hold: every Triton layer call against the
NumPy backend's same call, both in float64.

cuDNN passes alpha and beta for double data as doubles. A Triton kernel types a Python
float argument as fp32 unless the parameter says ``tl.float64``, so ``alpha = 0.1`` on
float64 data comes out ~1e-9 off on the GPU. The interpreter keeps Python floats exact;
conftest's interpreter_fidelity shim makes it type them as the GPU does, so these tests
fail in CI for any kernel that takes a float64 scalar as fp32.

Each case calls the Triton function and the NumPy backend's function on the same float64
inputs (outputs pre-filled, since beta != 0 reads them) and compares every array argument
afterwards: written outputs must agree to float64 rounding, read-only inputs stay equal.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from test_cuda_layers import make  # noqa: E402
from tridnn import ActivationMode  # noqa: E402
from tridnn.cpu import activation as cpu_act  # noqa: E402
from tridnn.cpu import batchnorm as cpu_bn  # noqa: E402
from tridnn.cpu import lrn as cpu_lrn  # noqa: E402
from tridnn.cpu import norms as cpu_norms  # noqa: E402
from tridnn.cpu import pooling as cpu_pool  # noqa: E402
from tridnn.cpu import softmax as cpu_softmax  # noqa: E402
from tridnn.cpu import tensor_ops as cpu_ops  # noqa: E402
from tridnn.cuda import activation, batchnorm, lrn, norms, pooling, softmax, tensor_ops  # noqa: E402

F64 = torch.float64
ALPHA, BETA = 0.1, 0.3      # neither is a float32 value: a float32 copy is ~1.5e-9 off
TOL = 1e-12                 # normalized error two float64 evaluation orders stay within
SHAPE = (2, 5, 4, 3)
PSHAPE = (1, 5, 1, 1)       # per-channel parameters


def _torch(value, layout):
    if isinstance(value, np.ndarray):
        return make(value.shape, layout if value.ndim == 4 and value.shape[0] > 1 else "NCHW", F64, values=value)
    return value


def compare(cuda_call, cpu_call, arrays, layout):
    """Run both calls on copies of ``arrays`` (a name -> float64 array dict); every array
    must match afterwards."""
    gpu = {k: _torch(v, layout) for k, v in arrays.items()}
    cpu = {k: v.copy() for k, v in arrays.items()}
    cuda_call(**gpu)
    cpu_call(**cpu)
    for name, want in cpu.items():
        got = gpu[name].detach().to("cpu", F64).numpy()
        assert np.array_equal(np.isnan(got), np.isnan(want)), f"{name}: NaN positions differ"
        ok = ~np.isnan(want)
        err = np.abs(got[ok] - want[ok]).max(initial=0.0) / max(1.0, np.abs(want[ok]).max(initial=0.0))
        assert err <= TOL, f"{name}: normalized error {err:.3g} > {TOL:g} (a float32 scalar?)"


LAYOUTS = ("NCHW", "NHWC")

ACTIVATIONS = {"relu": (ActivationMode.RELU, 0.0), "clipped_relu": (ActivationMode.CLIPPED_RELU, 0.7),
               "elu": (ActivationMode.ELU, 0.7), "swish": (ActivationMode.SWISH, 0.0),
               "sigmoid": (ActivationMode.SIGMOID, 0.0), "tanh": (ActivationMode.TANH, 0.0),
               "gelu": (ActivationMode.GELU, 0.0)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(name, layout, rng):
    mode, coef = ACTIVATIONS[name]
    mode, swish = int(mode), 1.3
    x, y, dy, dx = (rng.standard_normal(SHAPE) for _ in range(4))
    compare(lambda x, y: activation.activation_forward(x, y, mode=mode, coef=coef, swish_beta=swish,
                                                         propagate_nan=False, alpha=ALPHA, beta=BETA),
            lambda x, y: cpu_act.activation_forward(x, y, mode, coef, swish, False, ALPHA, BETA),
            {"x": x, "y": y}, layout)
    y = np.zeros(SHAPE)
    cpu_act.activation_forward(x, y, mode, coef, swish, False, 1.0, 0.0)
    compare(lambda y, dy, x, dx: activation.activation_backward(y, dy, x, dx, mode=mode, coef=coef,
                                                                  swish_beta=swish, alpha=ALPHA, beta=BETA),
            lambda y, dy, x, dx: cpu_act.activation_backward(y, dy, x, dx, mode, coef, swish, ALPHA, BETA),
            {"y": y, "dy": dy, "x": x, "dx": dx}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("algo", [0, 1, 2], ids=["FAST", "ACCURATE", "LOG"])
@pytest.mark.parametrize("mode", [0, 1], ids=["INSTANCE", "CHANNEL"])
def test_softmax(algo, mode, layout, rng):
    x, y, dy, dx = (rng.standard_normal(SHAPE) for _ in range(4))
    compare(lambda x, y: softmax.softmax_forward(x, y, algo, mode, ALPHA, BETA),
            lambda x, y: cpu_softmax.softmax_forward(x, y, algo, mode, ALPHA, BETA), {"x": x, "y": y}, layout)
    y = np.zeros(SHAPE)
    cpu_softmax.softmax_forward(x, y, algo, mode, 1.0, 0.0)
    compare(lambda y, dy, dx: softmax.softmax_backward(y, dy, dx, algo, mode, ALPHA, BETA),
            lambda y, dy, dx: cpu_softmax.softmax_backward(y, dy, dx, algo, mode, ALPHA, BETA),
            {"y": y, "dy": dy, "dx": dx}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", [0, 1, 2, 3], ids=["MAX", "AVG_PAD", "AVG_NOPAD", "MAX_DET"])
def test_pooling(mode, layout, rng):
    window, padding, stride = (2, 2), (1, 0), (2, 1)
    x = rng.standard_normal(SHAPE)
    out = (2, 5, 2, 2)
    y, dy, dx = rng.standard_normal(out), rng.standard_normal(out), rng.standard_normal(SHAPE)
    args = (mode, window, padding, stride, False, ALPHA, BETA)
    compare(lambda x, y: pooling.pooling_forward(x, y, *args),
            lambda x, y: cpu_pool.pooling_forward(x, y, *args), {"x": x, "y": y}, layout)
    y = np.zeros(out)
    cpu_pool.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
    compare(lambda y, dy, x, dx: pooling.pooling_backward(y, dy, x, dx, *args),
            lambda y, dy, x, dx: cpu_pool.pooling_backward(y, dy, x, dx, *args),
            {"y": y, "dy": dy, "x": x, "dx": dx}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("route", ["bins", "reduce", "global_kernel"])
@pytest.mark.parametrize("mode", [0, 1], ids=["MAX", "AVG"])
def test_adaptive_pooling(mode, route, layout, rng, monkeypatch):
    """3x2 bins; 1x1 through reduce_tensor (the default) and through GLOBAL_AVG_KERNEL."""
    out = (3, 2) if route == "bins" else (1, 1)
    monkeypatch.setattr(pooling, "GLOBAL_AVG_KERNEL", route == "global_kernel")
    x, dx = rng.standard_normal(SHAPE), rng.standard_normal(SHAPE)
    y, dy = rng.standard_normal((2, 5, *out)), rng.standard_normal((2, 5, *out))
    compare(lambda x, y: pooling.adaptive_pooling_forward(x, y, mode, ALPHA, BETA),
            lambda x, y: cpu_pool.adaptive_pooling_forward(x, y, mode, ALPHA, BETA), {"x": x, "y": y}, layout)
    compare(lambda x, dy, dx: pooling.adaptive_pooling_backward(x, dy, dx, mode, ALPHA, BETA),
            lambda x, dy, dx: cpu_pool.adaptive_pooling_backward(x, dy, dx, mode, ALPHA, BETA),
            {"x": x, "dy": dy, "dx": dx}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ops", [0, 1, 2], ids=["NORM", "NORM_RELU", "NORM_ADD_RELU"])
def test_batch_norm(ops, layout, rng):
    mode, eps, factor = 1, 1e-3, 0.1     # SPATIAL
    x, z, y, dy, dz, dx = (rng.standard_normal(SHAPE) for _ in range(6))
    scale, bias = rng.standard_normal(PSHAPE), rng.standard_normal(PSHAPE)
    rmean, rvar = rng.standard_normal(PSHAPE), rng.random(PSHAPE) + 0.5
    smean, sinv = np.zeros(PSHAPE), np.zeros(PSHAPE)
    z = z if ops == 2 else None
    dz = dz if ops == 2 else None
    arrays = {"x": x, "y": y, "scale": scale, "bias": bias, "rmean": rmean, "rvar": rvar}
    compare(lambda x, y, scale, bias, rmean, rvar, z=None: batchnorm.batch_norm_forward_inference(
                x, z, y, scale, bias, rmean, rvar, mode, eps, ops, ALPHA, BETA),
            lambda x, y, scale, bias, rmean, rvar, z=None: cpu_bn.batch_norm_forward_inference(
                x, z, y, scale, bias, rmean, rvar, mode, eps, ops, ALPHA, BETA),
            arrays | ({"z": z} if z is not None else {}), layout)
    arrays |= {"smean": smean, "sinv": sinv}
    compare(lambda x, y, scale, bias, rmean, rvar, smean, sinv, z=None: batchnorm.batch_norm_forward_training(
                x, z, y, scale, bias, rmean, rvar, smean, sinv, mode, factor, eps, ops, ALPHA, BETA),
            lambda x, y, scale, bias, rmean, rvar, smean, sinv, z=None: cpu_bn.batch_norm_forward_training(
                x, z, y, scale, bias, rmean, rvar, smean, sinv, mode, factor, eps, ops, ALPHA, BETA),
            arrays | ({"z": z} if z is not None else {}), layout)
    cpu_bn.batch_norm_forward_training(x, z, y, scale, bias, None, None, smean, sinv, mode, factor, eps, ops,
                                       1.0, 0.0)
    dscale, dbias = rng.standard_normal(PSHAPE), rng.standard_normal(PSHAPE)
    grads = {"x": x, "y": y, "dy": dy, "dx": dx, "scale": scale, "bias": bias, "dscale": dscale,
             "dbias": dbias, "smean": smean, "sinv": sinv} | ({"dz": dz} if dz is not None else {})
    blend = (ALPHA, BETA, 0.7, 0.2)      # alpha and beta for dx, then for dscale and dbias
    compare(lambda x, y, dy, dx, scale, bias, dscale, dbias, smean, sinv, dz=None: batchnorm.batch_norm_backward(
                x, y, dy, dz, dx, scale, bias, dscale, dbias, smean, sinv, mode, eps, ops, *blend),
            lambda x, y, dy, dx, scale, bias, dscale, dbias, smean, sinv, dz=None: cpu_bn.batch_norm_backward(
                x, y, dy, dz, dx, scale, bias, dscale, dbias, smean, sinv, mode, eps, ops, *blend),
            grads, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["layer", "rms", "group"])
def test_row_norms(kind, layout, rng):
    eps = 1e-3
    x, y, dy, dx = (rng.standard_normal(SHAPE) for _ in range(4))
    if kind == "group":
        groups, pshape, stats = 5, (5,), (2, 5)
        scale, bias = rng.standard_normal(pshape), rng.standard_normal(pshape)
        fwd = lambda m, x, y, scale, bias, mean, inv: m.group_norm_forward(x, y, scale, bias, mean, inv, groups, eps,
                                                                           ALPHA, BETA)
        bwd = lambda m, x, dy, dx, scale, dscale, dbias, mean, inv: m.group_norm_backward(
            x, dy, dx, scale, dscale, dbias, mean, inv, groups, ALPHA, BETA)
    else:
        pshape, stats = SHAPE[1:], (2,)
        scale, bias = rng.standard_normal(pshape), rng.standard_normal(pshape)
        if kind == "layer":
            fwd = lambda m, x, y, scale, bias, mean, inv: m.layer_norm_forward(x, y, scale, bias, mean, inv, 3, eps,
                                                                               ALPHA, BETA)
            bwd = lambda m, x, dy, dx, scale, dscale, dbias, mean, inv: m.layer_norm_backward(
                x, dy, dx, scale, dscale, dbias, mean, inv, 3, ALPHA, BETA)
        else:
            fwd = lambda m, x, y, scale, bias, mean, inv: m.rms_norm_forward(x, y, scale, inv, 3, eps, ALPHA, BETA)
            bwd = lambda m, x, dy, dx, scale, dscale, dbias, mean, inv: m.rms_norm_backward(
                x, dy, dx, scale, dscale, inv, 3, ALPHA, BETA)
    mean, inv = np.zeros(stats), np.zeros(stats)
    compare(lambda **a: fwd(norms, **a), lambda **a: fwd(cpu_norms, **a),
            {"x": x, "y": y, "scale": scale, "bias": bias, "mean": mean, "inv": inv}, layout)
    fwd(cpu_norms, x, np.zeros(SHAPE), scale, bias, mean, inv)
    dscale, dbias = rng.standard_normal(pshape), rng.standard_normal(pshape)
    compare(lambda **a: bwd(norms, **a), lambda **a: bwd(cpu_norms, **a),
            {"x": x, "dy": dy, "dx": dx, "scale": scale, "dscale": dscale, "dbias": dbias, "mean": mean,
             "inv": inv}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_lrn(layout, rng):
    n, la, lb, lk = 3, 0.1, 0.7, 1.1       # LRN's own alpha, beta, k: none a float32 value
    x, y, dy, dx = (rng.standard_normal(SHAPE) for _ in range(4))
    compare(lambda x, y: lrn.lrn_cross_channel_forward(x, y, n, la, lb, lk, ALPHA, BETA),
            lambda x, y: cpu_lrn.lrn_cross_channel_forward(x, y, n, la, lb, lk, ALPHA, BETA),
            {"x": x, "y": y}, layout)
    y = np.zeros(SHAPE)
    cpu_lrn.lrn_cross_channel_forward(x, y, n, la, lb, lk, 1.0, 0.0)
    compare(lambda y, dy, x, dx: lrn.lrn_cross_channel_backward(y, dy, x, dx, n, la, lb, lk, ALPHA, BETA),
            lambda y, dy, x, dx: cpu_lrn.lrn_cross_channel_backward(y, dy, x, dx, n, la, lb, lk, ALPHA, BETA),
            {"y": y, "dy": dy, "x": x, "dx": dx}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tensor_scalars(layout, rng):
    x, y = rng.standard_normal(SHAPE), rng.standard_normal(SHAPE)
    compare(lambda y: tensor_ops.set_tensor(y, 0.1), lambda y: cpu_ops.set_tensor(y, 0.1), {"y": y}, layout)
    compare(lambda y: tensor_ops.scale_tensor(y, 0.1), lambda y: cpu_ops.scale_tensor(y, 0.1), {"y": y}, layout)
    compare(lambda x, y: tensor_ops.transform_tensor(x, y, ALPHA, BETA),
            lambda x, y: cpu_ops.transform_tensor(x, y, ALPHA, BETA), {"x": x, "y": y}, layout)
    for a in (rng.standard_normal(SHAPE), rng.standard_normal(PSHAPE)):
        compare(lambda a, c: tensor_ops.add_tensor(a, c, ALPHA, BETA),
                lambda a, c: cpu_ops.add_tensor(np.broadcast_to(a, SHAPE), c, ALPHA, BETA), {"a": a, "c": y}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", [0, 1, 2, 3, 4, 5], ids=["ADD", "MUL", "MIN", "MAX", "SQRT", "NOT"])
def test_op_tensor(op, layout, rng):
    a, b, c = rng.random(SHAPE), rng.standard_normal(PSHAPE), rng.standard_normal(SHAPE)
    compare(lambda a, b, c: tensor_ops.op_tensor(a, b.expand(SHAPE), c, op, ALPHA, 0.7, BETA, False),
            lambda a, b, c: cpu_ops.op_tensor(op, a, np.broadcast_to(b, SHAPE), c, ALPHA, 0.7, BETA, False),
            {"a": a, "b": b, "c": c}, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", [0, 1, 2, 3, 4, 5, 6, 7], ids=["ADD", "MUL", "MIN", "MAX", "AMAX", "AVG",
                                                             "NORM1", "NORM2"])
def test_reduce_tensor(op, layout, rng):
    a = rng.random(SHAPE) + 0.5
    for out in ((1, 5, 1, 1), (2, 1, 4, 1), (1, 1, 1, 1)):
        c = rng.standard_normal(out)
        compare(lambda a, c: tensor_ops.reduce_tensor(a, c, None, None, op, ALPHA, BETA, False),
                lambda a, c: cpu_ops.reduce_tensor(op, a, c, None, None, ALPHA, BETA, False),
                {"a": a, "c": c}, layout)


# -- the float64 arguments cost 16-bit and float32 data nothing ---------------------------
def _spec(module, kernel, compute, types, consts):
    ptr = "*bf16" if compute == "tl.float32" else "*fp64"
    types = {name: ptr if kind == "ptr" else kind for name, kind in types.items()}
    return [f"tridnn.cuda.{module}", kernel, types, consts | {"COMPUTE": compute}, 4]


def _kernels(compute):
    scalars = {"alpha": "fp64", "beta": "fp64"}
    act = {"x_ptr": "ptr", "y_ptr": "ptr", "coef": "fp64", "swish_beta": "fp64"} | scalars
    bwd = act | {"dy_ptr": "ptr", "dx_ptr": "ptr"}
    return [
        _spec("activation", "_activation_forward_kernel", compute, act,
              dict(MODE=int(ActivationMode.SWISH), PROPAGATE_NAN=False, HAS_BETA=True, FLAT=True, BIG=False,
                   BLOCK=1024, FAST_ERF=0)),
        _spec("activation", "_activation_backward_kernel", compute, bwd,
              dict(MODE=int(ActivationMode.ELU), NEEDS_X=True, NEEDS_Y=True, HAS_BETA=True, FLAT=True, BIG=False,
                   BLOCK=1024, FAST_ERF=0)),
        _spec("tensor_ops", "_pointwise_kernel", compute,
              {"a_ptr": "ptr", "b_ptr": "ptr", "c_ptr": "ptr", "alpha1": "fp64", "alpha2": "fp64", "beta": "fp64",
               "fill": "fp64"},
              dict(OP=0, HAS_B=True, HAS_BETA=True, PROPAGATE_NAN=False, FLAT=True, BIG=False, BLOCK=1024)),
        _spec("tensor_ops", "_bias_runs_kernel", compute, {"a_ptr": "ptr", "c_ptr": "ptr"} | scalars,
              dict(HAS_BETA=True, BIG=False, BLOCK=1024, VEC=8)),
        _spec("pooling", "_pool_forward_kernel", compute, {"x_ptr": "ptr", "y_ptr": "ptr", "arg_ptr": "*i8"} | scalars,
              dict(KD=1, KH=3, KW=3, UNROLL=True, MODE=1, ADAPTIVE=False, PROPAGATE_NAN=False, STORE_ARG=False,
                   STORE_Y=True, HAS_BETA=True, BIG=False, BLOCK_P=32, BLOCK_C=32)),
        _spec("pooling", "_global_avg_kernel", compute, {"x_ptr": "ptr", "y_ptr": "ptr"} | scalars,
              dict(HAS_BETA=True, BIG=False, BLOCK_C=32, BLOCK_S=64)),
    ]


def test_float64_scalars_add_no_float64_math_to_other_data():
    """The conversion to COMPUTE happens once: compiled for sm_90 with bf16 data, the
    kernels above execute no float64 arithmetic (DADD, DMUL, DFMA in the SASS), while
    the same kernels on float64 data do (so the check can fail)."""
    from gluon_helpers import compile_in_child
    fp64_math = re.compile(r"\b(DADD|DMUL|DFMA)\b")
    specs = _kernels("tl.float32") + _kernels("tl.float64")
    facts = compile_in_child([("gluon_helpers", "compile_triton_sm90", spec, {}) for spec in specs])
    half = len(specs) // 2
    for spec, f in zip(specs[:half], facts[:half]):
        assert not fp64_math.search(f["sass"]), f"{spec[1]} does float64 arithmetic on bf16 data"
    for spec, f in zip(specs[half:], facts[half:]):
        assert fp64_math.search(f["sass"]), f"{spec[1]} on float64 data shows no float64 arithmetic"


# -- the other kernel designs the layers route to (switches and shapes) ---------------------
POOL_DESIGNS = {
    "rows": dict(NCHW_LANE_KERNELS=frozenset()),
    "cl_fused_phases": dict(CL_FUSED_MAX_BWD="phases"),
    "cl_fused_shift": dict(CL_FUSED_MAX_BWD="shift"),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("design", list(POOL_DESIGNS))
@pytest.mark.parametrize("mode", [0, 1], ids=["MAX", "AVG_PAD"])
def test_pooling_designs(mode, design, layout, rng, monkeypatch):
    """Pooling through the row and fused channels-last kernels (8-wide rows)."""
    for switch, value in POOL_DESIGNS[design].items():
        monkeypatch.setattr(pooling, switch, value)
    shape, out = (2, 5, 6, 8), (2, 5, 3, 4)
    window, padding, stride = (3, 3), (1, 1), (2, 2)
    x, dx = rng.standard_normal(shape), rng.standard_normal(shape)
    y, dy = rng.standard_normal(out), rng.standard_normal(out)
    args = (mode, window, padding, stride, False, ALPHA, BETA)
    compare(lambda x, y: pooling.pooling_forward(x, y, *args),
            lambda x, y: cpu_pool.pooling_forward(x, y, *args), {"x": x, "y": y}, layout)
    y = np.zeros(out)
    cpu_pool.pooling_forward(x, y, mode, window, padding, stride, False, 1.0, 0.0)
    compare(lambda y, dy, x, dx: pooling.pooling_backward(y, dy, x, dx, *args),
            lambda y, dy, x, dx: cpu_pool.pooling_backward(y, dy, x, dx, *args),
            {"y": y, "dy": dy, "x": x, "dx": dx}, layout)


def test_transform_between_layouts(rng):
    """NCHW x into NHWC y: the tiled transpose kernel, against the NumPy backend's result."""
    shape = (2, 16, 4, 8)
    x, y = rng.standard_normal(shape), rng.standard_normal(shape)
    xt, yt = make(shape, "NCHW", F64, values=x), make(shape, "NHWC", F64, values=y)
    tensor_ops.transform_tensor(xt, yt, ALPHA, BETA)
    cpu_ops.transform_tensor(x, y, ALPHA, BETA)
    err = np.abs(yt.to("cpu").numpy() - y).max() / max(1.0, np.abs(y).max())
    assert err <= TOL, f"y: normalized error {err:.3g} > {TOL:g} (a float32 scalar?)"


@pytest.mark.parametrize("design", [dict(CONTIGUOUS_ROWS_KERNEL="runs"), dict(CONTIGUOUS_ROWS_KERNEL="ahead"),
                                    dict(REDUCE_SPLIT=2, SPLIT_COMBINE="kernel")], ids=["runs", "ahead", "split"])
@pytest.mark.parametrize("op", [0, 5, 7], ids=["ADD", "AVG", "NORM2"])
def test_reduce_designs(op, design, rng, monkeypatch):
    """Sums over rows of 2048 contiguous elements (NCHW: the runs and ahead kernels) and, over
    channels-last H, W, a forced two-part split with its combine kernel."""
    for switch, value in design.items():
        monkeypatch.setattr(tensor_ops, switch, value)
    a = rng.random((3, 2, 32, 64)) + 0.5
    compare(lambda a, c: tensor_ops.reduce_tensor(a, c, None, None, op, ALPHA, BETA, False),
            lambda a, c: cpu_ops.reduce_tensor(op, a, c, None, None, ALPHA, BETA, False),
            {"a": a, "c": rng.standard_normal((3, 2, 1, 1))}, "NHWC" if "REDUCE_SPLIT" in design else "NCHW")
