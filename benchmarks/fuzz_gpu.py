"""Fuzz the Triton kernels: random valid problems through the public API, every applicable
Triton algorithm, each result against the float64 reference.

The GPU half of docs/reliability.md's fuzzing (tests/test_fuzz_conv.py and
tests/test_fuzz_layers.py fuzz the NumPy backend). Problem ``i`` of seed ``s`` is drawn
from ``numpy.random.default_rng([s, i])``, so any one problem re-runs alone with
``--seed s --only i``. Drawn: convolution forward, backward data and backward filter
(1D/2D/3D, groups and depthwise, dilation, stride, asymmetric padding, both modes,
float32 (every math type) / float16 / bfloat16, x, w and y in NCHW, NHWC or a strided view,
alpha/beta with beta == 0 over a NaN-filled output, empty batches), every Triton algorithm
of the direction that applies; and pooling, softmax, batch norm (training forward and
backward) and activations, forward and backward, through Handle(device="cuda") (or,
for a dry run on the CPU, Handle(device="cpu", backend="triton") under TRITON_INTERPRET=1).

Checks per run: every output element written (NaN poison), exact methods equal the
reference rounded once, the others meet tridnn.testing's tolerances (layers:
tests/layer_cases.check), inputs untouched, nothing written outside the output view.

Compilation dominates on a GPU (each new specialization compiles once, 0.2-1.5 s), so
problems come in templates (see TEMPLATES) that repeat Triton's specializations, and the
launch-config tuner is replaced by an untimed choice (``--tuning rotate``, the default:
template t starts at candidate t mod the list's length and takes the first that fits, so
over the templates every config runs, not only the first and last: WINOGRAD's wrong config
was the first, and a middle one would never have run; ``--tuning timed`` keeps the
library's timing tuner, one compile per candidate). ``--workers N`` runs the problems in
N processes on the same GPU, each taking whole templates, so compilation runs on N cores.
``--count-only`` (interpreter) counts the specializations without running anything.

    PYTHONPATH=src python3 benchmarks/fuzz_gpu.py --device cuda --problems 2000 --workers 12 --out $OUT
    TRITON_INTERPRET=1 .venv/bin/python benchmarks/fuzz_gpu.py --device cpu --problems 30
"""
from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

SENTINEL = 7.0
NICE = (1.0, 2.0, 0.5, -1.0, 0.25, -1.5, 3.0)
CONV_KINDS = ("fwd", "bwd_data", "bwd_filter")
LAYER_KINDS = ("pooling", "softmax", "batch_norm", "activation")
# share of the problems per kind; the convolutions have the most kernels
WEIGHTS = {"fwd": 0.30, "bwd_data": 0.19, "bwd_filter": 0.19,
           "pooling": 0.09, "softmax": 0.07, "batch_norm": 0.07, "activation": 0.09}

# Channel structures (groups, channels per group, output channels per group), few of them
# so that Triton's specializations on channel counts (== 1, divisible by 16, other) repeat:
# the flattened reduction (Cg < 16), the channel-blocked one (Cg >= 16, a tail at 24),
# grouped and depthwise (Cg == 1).
CHANNELS = ((1, 3, 4), (1, 3, 16), (1, 16, 16), (1, 16, 5), (1, 24, 8), (1, 1, 3),
            (2, 3, 4), (2, 16, 8), (4, 2, 3), (4, 1, 1), (8, 1, 1), (8, 1, 2), (3, 1, 2))
LAYER_CHANNELS = (1, 3, 5, 16)
KERNEL = {1: (2, 3, 5), 2: (2, 3, 3, 5), 3: (2, 3)}
OUT_MAX = {1: 15, 2: 7, 3: 5}  # largest (odd) output size per dim
LAYOUT_WEIGHTS = (("NHWC", 0.4), ("NCHW", 0.4), ("strided", 0.2))


# -- drawing problems ------------------------------------------------------------------------------
# Problems come in templates: a template fixes what Triton specializes a kernel on (dtype,
# math type, channel counts, layouts, rank, mode, beta == 0, pointwise filters, layer modes),
# and each problem of it draws the rest (batch, sizes, kernel, stride, dilation, padding,
# scalars, data). Sizes are odd and >= 3 (outputs too), so no stride of a tensor is 1 or a
# multiple of 16 by accident: a template's specialization pattern stays the same and its
# kernels compile once.
TEMPLATES = {"fwd": 40, "bwd_data": 24, "bwd_filter": 24, "pooling": 40, "softmax": 24, "batch_norm": 24,
             "activation": 30}


def dtypes_for(device: str, layers: bool = False):
    """Triton's interpreter has no bfloat16; the convolutions have no float64."""
    out = ["float32", "float16"] + (["bfloat16"] if device != "cpu" else [])
    return out + (["float64"] if layers else [])


def _pick(rng, options, weights=None):
    if weights is not None:
        p = np.asarray(weights, float)
        return options[int(rng.choice(len(options), p=p / p.sum()))]
    return options[int(rng.integers(len(options)))]


def _layout(rng):
    return _pick(rng, [name for name, _ in LAYOUT_WEIGHTS], [w for _, w in LAYOUT_WEIGHTS])


def _template_scalars(rng):
    """(beta is zero, nice scalars): what a template fixes about alpha and beta."""
    return bool(rng.random() < 0.5), bool(rng.random() < 0.6)


def _scalars(rng, beta_zero: bool, nice: bool):
    """(alpha, beta): nice scalars (powers of two, small integers) keep integer results exact."""
    def one():
        if nice:
            return float(_pick(rng, NICE))
        v = 0.0
        while abs(v) < 1e-3:
            v = float(rng.uniform(-3, 3))
        return v
    return one(), 0.0 if beta_zero else one()


def _odd(rng, lo: int, hi: int) -> int:
    return int(_pick(rng, list(range(lo | 1, hi + 1, 2))))


def draw_problem(seed: int, index: int, device: str) -> dict:
    """Problem ``index`` of ``seed``: its kind and template, then its own sizes and scalars."""
    rng = np.random.default_rng([seed, index])
    kinds = list(WEIGHTS)
    kind = _pick(rng, kinds, [WEIGHTS[k] for k in kinds])
    template = int(rng.integers(TEMPLATES[kind]))
    template_rng = np.random.default_rng([seed, 1 + kinds.index(kind), template, 7919])
    problem = dict(index=index, seed=seed, kind=kind, template=template)
    draw = _conv_problem if kind in CONV_KINDS else _LAYER_DRAW[kind]
    problem.update(draw(template_rng, rng, device))
    problem["data_seed"] = int(rng.integers(2**32))
    return problem


def _conv_problem(trng, rng, device):
    from tridnn import MathType
    t = dict(dtype=_pick(trng, dtypes_for(device)), math_type=_pick(trng, [m.name for m in MathType]),
             mode=_pick(trng, ("cross_correlation", "convolution")))
    t["x_layout"] = _layout(trng)
    t["y_layout"] = t["x_layout"] if trng.random() < 0.7 else _layout(trng)
    w_default = "NHWC" if t["x_layout"] == "NHWC" else "NCHW"
    t["w_layout"] = w_default if trng.random() < 0.8 else _pick(trng, ("NCHW", "NHWC"))
    beta_zero, nice = _template_scalars(trng)
    alpha, beta = _scalars(rng, beta_zero, nice)
    n = int(_pick(rng, (1, 2, 2, 3))) if rng.random() > 0.03 else 0
    shape = trng.random()
    if shape < 0.15:  # a real network layer (tests/problems.py scales them down), sizes as they are
        from problems import suite_problems
        layers = suite_problems()
        p = layers[int(trng.integers(len(layers)))]
        return dict(t, nd=len(p["spatial"]), n=n, c=p["C"], k=p["K"], groups=p["groups"], kernel=list(p["kernel"]),
                    stride=list(p["stride"]), dilation=list(p["dilation"]), pad_pre=list(p["pad"]),
                    pad_post=list(p["pad"]), spatial=list(p["spatial"]), alpha=alpha, beta=beta,
                    exact_scalars=nice, suite_layer=p.get("name", ""))
    classic = shape < 0.40  # 2D 3x3 stride 1 pad 1: Winograd's domain
    pointwise = not classic and shape > 0.88  # 1x1 filters
    nd = 2 if classic else int(_pick(trng, (1, 2, 2, 3)))
    groups, cg, kg = _pick(trng, CHANNELS)
    asymmetric = not classic and trng.random() < 0.4
    # per dim, the template fixes each value's class as Triton sees an int (== 1, == 0
    # (divisible by 16), other); the problem draws a value of that class
    classes = []
    for _ in range(nd):
        k = "3" if classic else "1" if pointwise else "k"
        p0 = "1" if classic else _pick(trng, ("0", "1", "p"))
        classes.append(dict(k=k, s="1" if classic else _pick(trng, ("1", "1", "s")),
                            d="1" if k != "k" else _pick(trng, ("1", "1", "d")),
                            p0=p0, p1=_pick(trng, ("0", "1", "p")) if asymmetric else p0))
    values = dict(k=KERNEL[nd], s=(2, 3), d=(2, 3), p=(2, 3))
    value = lambda cls, name: int(cls) if cls.isdigit() else int(_pick(rng, values[name]))  # noqa: E731
    kernel, stride, dilation, pre, post, spatial = [], [], [], [], [], []
    for c in classes:
        for _attempt in range(200):  # odd input and output sizes >= 3 where the classes allow
            k, s, d = value(c["k"], "k"), value(c["s"], "s"), value(c["d"], "d")
            p0, p1 = value(c["p0"], "p"), value(c["p1"], "p")
            out = _odd(rng, 3, OUT_MAX[nd])
            size = (out - 1) * s + d * (k - 1) + 1 - p0 - p1 + int(rng.integers(0, s))
            if size >= 3 and size % 2 == 1:
                break
        size = max(size, 1 + max(0, d * (k - 1) - p0 - p1))  # an even size when no odd one exists
        kernel.append(k)
        dilation.append(d)
        stride.append(s)
        pre.append(p0)
        post.append(p1)
        spatial.append(size)
    return dict(t, nd=nd, n=n, c=groups * cg, k=groups * kg, groups=groups, kernel=kernel, stride=stride,
                dilation=dilation, pad_pre=pre, pad_post=post, spatial=spatial, alpha=alpha, beta=beta,
                exact_scalars=nice, suite_layer="")


# The layer kernels specialize on every size (no do_not_specialize) and size their blocks
# from them, so a layer template fixes the whole geometry; its problems draw the batch
# (of the template's class: 1, or 2-3), the scalars and the data.
def _layer_template(trng, device, rank):
    beta_zero, _ = _template_scalars(trng)
    t = dict(dtype=_pick(trng, dtypes_for(device, layers=True)), layout=_layout(trng))
    return t, beta_zero, [int(_pick(trng, LAYER_CHANNELS))] + [_odd(trng, 3, 7) for _ in range(rank - 2)]


def _batch(trng, rng, low=1):
    return 1 if low == 1 and trng.random() < 0.3 else int(rng.integers(2, 4))


def _pooling_problem(trng, rng, device):
    from tridnn import PoolingMode
    t, beta_zero, _ = _layer_template(trng, device, 2)
    t.update(mode=_pick(trng, [m.name for m in PoolingMode]), propagate_nan=bool(trng.random() < 0.5),
             nan_input=bool(trng.random() < 0.3))
    nd = int(_pick(trng, (1, 2, 2, 3)))
    window, padding, stride, spatial = [], [], [], []
    for _ in range(nd):
        for _attempt in range(200):
            w = int(trng.integers(1, 4))
            p = int(trng.integers(0, w))
            s = int(trng.integers(1, 4))
            out = _odd(trng, 3, OUT_MAX[nd])
            size = (out - 1) * s + w - 2 * p + int(trng.integers(0, s))
            if size >= 3 and size % 2 == 1:
                break
        window.append(w)
        padding.append(p)
        stride.append(s)
        spatial.append(size)
    alpha, beta = _scalars(rng, beta_zero, True)
    return dict(t, window=window, padding=padding, stride=stride,
                dims=[_batch(trng, rng), int(_pick(trng, LAYER_CHANNELS)), *spatial], alpha=alpha, beta=beta)


def _softmax_problem(trng, rng, device):
    import tridnn
    t, beta_zero, dims = _layer_template(trng, device, int(trng.integers(2, 6)))
    t.update(algorithm=_pick(trng, [a.name for a in tridnn.SoftmaxAlgorithm]),
             mode=_pick(trng, [m.name for m in tridnn.SoftmaxMode]))
    alpha, beta = _scalars(rng, beta_zero, True)
    return dict(t, dims=[_batch(trng, rng), *dims], alpha=alpha, beta=beta)


def _batch_norm_problem(trng, rng, device):
    import tridnn
    t, beta_zero, dims = _layer_template(trng, device, int(trng.integers(2, 6)))
    t.update(mode=_pick(trng, [m.name for m in tridnn.BatchNormMode]))
    alpha, beta = _scalars(rng, beta_zero, True)
    return dict(t, dims=[_batch(trng, rng, low=2), *dims], alpha=alpha, beta=beta)


def _activation_problem(trng, rng, device):
    from tridnn.descriptors.activation import ActivationMode
    t, beta_zero, dims = _layer_template(trng, device, int(trng.integers(3, 6)))
    t.update(mode=_pick(trng, [m.name for m in ActivationMode]), coef=float(_pick(trng, (0.5, 1.0, 6.0))),
             propagate_nan=bool(trng.random() < 0.5), nan_input=bool(trng.random() < 0.3))
    alpha, beta = _scalars(rng, beta_zero, True)
    return dict(t, dims=[_batch(trng, rng), *dims], alpha=alpha, beta=beta)


_LAYER_DRAW = {"pooling": _pooling_problem, "softmax": _softmax_problem, "batch_norm": _batch_norm_problem,
               "activation": _activation_problem}


def family(problem: dict) -> tuple:
    """Problems of one template share their compiled kernels: --workers keeps a template
    in one process."""
    return (problem["kind"], problem["template"])


# -- arrays on the device ----------------------------------------------------------------------------
class DeviceView:
    """A torch view on the device with the NumPy view's shape and strides, inside a buffer
    whose gaps (strided layouts) hold a sentinel, so a write outside the view is seen."""

    def __init__(self, host_view: np.ndarray, device, torch):
        from tridnn.cuda.backend import to_tensor
        host = to_tensor(host_view, torch.device("cpu"))
        shape, stride = tuple(host.shape), tuple(max(1, s) for s in host.stride())
        extent = 1 + sum((d - 1) * s for d, s in zip(shape, stride)) if host.numel() else 1
        self.torch = torch
        self.flat = torch.full((extent,), SENTINEL, dtype=host.dtype, device=device)
        self.view = self.flat.as_strided(shape, stride)
        self.view.copy_(host)
        self.shape, self.stride = shape, stride

    def host(self) -> np.ndarray:
        """The view's values as a float64 NumPy array."""
        return self.view.detach().to("cpu", self.torch.float64).numpy().copy()

    def outside_untouched(self) -> int:
        """How many elements outside the view no longer hold the sentinel."""
        inside = self.torch.zeros(self.flat.numel(), dtype=self.torch.bool, device=self.flat.device)
        inside.as_strided(self.shape, self.stride).fill_(True)
        around = self.flat[~inside]
        return int((around != SENTINEL).sum().item())


class Failure(Exception):
    pass


# -- convolutions ------------------------------------------------------------------------------------
def run_conv(problem: dict, ctx) -> None:
    import tridnn
    from tridnn import reference, testing
    from tridnn.algorithms import registry
    from tridnn.algorithms.problem import ConvProblem
    from tridnn.cuda.backend import to_tensor

    direction, dtype = problem["kind"], problem["dtype"]
    rng = np.random.default_rng(problem["data_seed"])
    conv = tridnn.ConvolutionDescriptor(padding=tuple(problem["pad_pre"]), pad_post=tuple(problem["pad_post"]),
                                        stride=tuple(problem["stride"]), dilation=tuple(problem["dilation"]),
                                        groups=problem["groups"], mode=tridnn.ConvMode[problem["mode"].upper()],
                                        nd=problem["nd"], math_type=tridnn.MathType[problem["math_type"]])
    x_dims = (problem["n"], problem["c"], *problem["spatial"])
    w_dims = (problem["k"], problem["c"] // problem["groups"], *problem["kernel"])
    y_dims = conv.output_dims(tridnn.TensorDescriptor(x_dims, dtype), tridnn.FilterDescriptor(w_dims, dtype))
    out_name = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[direction]
    dims = {"x": x_dims, "w": w_dims, "y": y_dims}
    alpha, beta = problem["alpha"], problem["beta"]
    geometry = dict(stride=tuple(problem["stride"]), pad_pre=tuple(problem["pad_pre"]),
                    pad_post=tuple(problem["pad_post"]), dilation=tuple(problem["dilation"]),
                    groups=problem["groups"], mode=problem["mode"])

    def draw_data():
        """(inputs, prior output or None, float64 reference): one call's data."""
        vals = {name: testing.fill(dims[name], dtype, rng) for name in dims if name != out_name}
        prior = testing.fill(dims[out_name], dtype, rng) if beta != 0 else None
        if direction == "fwd":
            ref = reference.conv_forward(vals["x"], vals["w"], **geometry)
        elif direction == "bwd_data":
            ref = reference.conv_backward_data(vals["y"], vals["w"], x_dims, **geometry)
        else:
            ref = reference.conv_backward_filter(vals["x"], vals["y"], w_dims, **geometry)
        return vals, prior, ref

    vals, prior, ref = draw_data()
    api = {"fwd": tridnn.convolution_forward, "bwd_data": tridnn.convolution_backward_data,
           "bwd_filter": tridnn.convolution_backward_filter}[direction]

    for algo in registry.algorithms("conv", direction, "triton"):
        x_desc, x = testing.make_tensor(x_dims, dtype, problem["x_layout"], rng)
        w_desc, w = testing.make_filter(w_dims, dtype, problem["w_layout"])
        y_desc, y = testing.make_tensor(y_dims, dtype, problem["y_layout"], rng)
        reason = algo.not_applicable(ConvProblem(direction, x_desc, w_desc, y_desc, conv))
        if reason is not None:
            ctx.not_applicable(problem, algo.name)
            continue
        host = {"x": x, "w": w, "y": y}
        for name, view in host.items():
            if name != out_name:
                view[...] = vals[name]
            elif prior is None:
                testing.poison(view)
            else:
                view[...] = prior
        dev = {name: DeviceView(view, ctx.device, ctx.torch) for name, view in host.items()}
        before = {name: d.view.clone() for name, d in dev.items() if name != out_name}
        label = f"conv {direction} {algo.name}"
        state = dict(prior=prior, ref=ref)  # this call's data; the workspace ("ws"), made once

        def call():
            if "ws" not in state:
                need = algo.workspace_size(ConvProblem(direction, x_desc, w_desc, y_desc, conv))
                state["ws"] = ctx.torch.empty(need, dtype=ctx.torch.uint8, device=ctx.device) if need else None
            ws = state["ws"]
            x_t, w_t, y_t = dev["x"].view, dev["w"].view, dev["y"].view
            if direction == "fwd":
                api(ctx.handle, alpha, x_desc, x_t, w_desc, w_t, conv, algo.enum, ws, beta, y_desc, y_t)
            elif direction == "bwd_data":
                api(ctx.handle, alpha, w_desc, w_t, y_desc, y_t, conv, algo.enum, ws, beta, x_desc, x_t)
            else:
                api(ctx.handle, alpha, x_desc, x_t, y_desc, y_t, conv, algo.enum, ws, beta, w_desc, w_t)

        def check():
            out = dev[out_name]
            # half-type weight gradients round partial sums (split reductions), as tests/test_cuda_conv.py says
            exact = (algo.exact and problem["exact_scalars"]
                     and not (direction == "bwd_filter" and dtype in ("float16", "bfloat16")))
            testing.check_result(out.host(), state["ref"], dtype, exact, alpha, beta, state["prior"],
                                 name=f"{label} call {state.get('call', 0)}")
            if out.outside_untouched():
                raise Failure(f"{label}: {out.outside_untouched()} elements outside the output view were written")
            for name, old in before.items():
                if not ctx.torch.equal(dev[name].view, old):
                    raise Failure(f"{label}: input {name} was modified")

        reproducer = lambda: conv_reproducer(problem, algo.name, ctx)
        if not ctx.run(problem, algo.name, call, check, reproducer):
            continue
        # --repeats: new values in the same tensors and workspace, so the API's fast path
        # answers (its one-call checks) and, from the third call, replays a launch record
        for repeat in range(1, ctx.repeats):
            new_vals, state["prior"], state["ref"] = draw_data()
            state["call"] = repeat
            for name, d in dev.items():
                if name != out_name:
                    d.view.copy_(to_tensor(new_vals[name], ctx.torch.device("cpu")))
                elif state["prior"] is None:
                    d.view.fill_(float("nan"))
                else:
                    d.view.copy_(to_tensor(state["prior"], ctx.torch.device("cpu")))
            before = {name: d.view.clone() for name, d in dev.items() if name != out_name}
            if not ctx.run(problem, f"{algo.name} repeat", call, check, reproducer):
                break


def conv_reproducer(problem: dict, algo_name: str, ctx) -> str:
    from tridnn.reproduce import ConvSpec, conv_command
    spec = ConvSpec.make(problem["n"], problem["c"], problem["k"], problem["spatial"], problem["kernel"],
                         problem["stride"], problem["pad_pre"], problem["dilation"], problem["groups"],
                         problem["pad_post"])
    line = conv_command(spec, problem["kind"], problem["dtype"], problem["x_layout"], algo_name, problem["mode"],
                        problem["math_type"], problem["alpha"], problem["beta"], ctx.device_name,
                        problem["w_layout"], "triton")
    if problem["y_layout"] != problem["x_layout"]:
        line += f"  # the fuzz had y in {problem['y_layout']}"
    return line


# -- layers ---------------------------------------------------------------------------------------------
def _layer_arrays(ctx, dims, dtype, layout, rng, beta, maker="tensor"):
    import layer_cases
    if maker == "output":
        desc, view, prior = layer_cases.output(dims, dtype, layout, rng, beta)
        return desc, DeviceView(view, ctx.device, ctx.torch), prior
    desc, view = (layer_cases.tensor if maker == "tensor" else layer_cases.normal)(dims, dtype, layout, rng)
    return desc, DeviceView(view, ctx.device, ctx.torch), view.astype(np.float64)


def _layer_label(problem):
    keys = [k for k in ("mode", "algorithm") if k in problem]
    return f"{problem['kind']} " + " ".join(str(problem[k]) for k in keys)


def _untouched(label, *views):
    for name, view in views:
        if view.outside_untouched():
            raise Failure(f"{label}: {view.outside_untouched()} elements outside {name} were written")


def run_pooling(problem: dict, ctx) -> None:
    import tridnn
    from layer_cases import check
    from tridnn import PoolingDescriptor, PoolingMode
    from tridnn.reference import pooling as pool_ref
    rng = np.random.default_rng(problem["data_seed"])
    mode, dtype, layout = PoolingMode[problem["mode"]], problem["dtype"], problem["layout"]
    alpha, beta = problem["alpha"], problem["beta"]
    dims = tuple(problem["dims"])
    pool = PoolingDescriptor(mode, tuple(problem["window"]), tuple(problem["padding"]), tuple(problem["stride"]),
                             nan_opt=int(problem["propagate_nan"]), nd=len(problem["window"]))
    import layer_cases
    x_desc, x_host = layer_cases.tensor(dims, dtype, layout, rng)
    if problem["nan_input"]:
        x_host[tuple(int(rng.integers(0, d)) for d in dims)] = np.nan
    x = DeviceView(x_host, ctx.device, ctx.torch)
    x64 = x_host.astype(np.float64)
    y_dims = tridnn.get_pooling_forward_output_dim(pool, x_desc)
    y_desc, y, prior = _layer_arrays(ctx, y_dims, dtype, layout, rng, beta, "output")
    label = _layer_label(problem)
    want = pool_ref.pooling_forward(x64, int(mode), pool.window, pool.padding, pool.stride, problem["propagate_nan"])

    def forward():
        tridnn.pooling_forward(ctx.handle, pool, alpha, x_desc, x.view, beta, y_desc, y.view)

    def check_forward():
        got = y.host()
        if problem["nan_input"]:
            want_nan = np.isnan(alpha * want + (beta * prior if beta else 0.0))
            if not np.array_equal(np.isnan(got), want_nan):
                raise Failure(f"{label}: NaN pattern differs ({int(np.isnan(got).sum())} NaN, "
                              f"reference {int(want_nan.sum())})")
        else:
            check(got, want, dtype, alpha, beta, prior, exact=mode.is_max, name=f"{label} y")
        _untouched(label, ("y", y))

    ctx.run(problem, "forward", forward, check_forward, reproducer=lambda: _layer_line("pooling_forward", dict(
        pool_desc=pool, x_desc=x_desc, alpha=alpha, beta=beta, handle=ctx.handle)))
    if problem["nan_input"]:
        return
    _, y_fwd, _ = _layer_arrays(ctx, y_dims, dtype, layout, rng, 0.0, "output")
    dy_desc, dy, dy64 = _layer_arrays(ctx, y_dims, dtype, layout, rng, 0.0)
    dx_desc, dx, dx_prior = _layer_arrays(ctx, dims, dtype, layout, rng, beta, "output")
    dx_want = pool_ref.pooling_backward(x64, dy64, int(mode), pool.window, pool.padding, pool.stride,
                                        problem["propagate_nan"])

    def backward():
        tridnn.pooling_forward(ctx.handle, pool, 1.0, x_desc, x.view, 0.0, y_desc, y_fwd.view)
        tridnn.pooling_backward(ctx.handle, pool, alpha, y_desc, y_fwd.view, dy_desc, dy.view, x_desc, x.view,
                                beta, dx_desc, dx.view)

    def check_backward():
        check(dx.host(), dx_want, dtype, alpha, beta, dx_prior, exact=mode.is_max, name=f"{label} dx")
        _untouched(label, ("dx", dx))

    ctx.run(problem, "backward", backward, check_backward, reproducer=lambda: _layer_line("pooling_backward", dict(
        pool_desc=pool, x_desc=x_desc, alpha=alpha, beta=beta, handle=ctx.handle)))


def run_softmax(problem: dict, ctx) -> None:
    import tridnn
    from layer_cases import check
    from tridnn.reference import softmax as softmax_ref
    rng = np.random.default_rng(problem["data_seed"])
    algorithm, mode = tridnn.SoftmaxAlgorithm[problem["algorithm"]], tridnn.SoftmaxMode[problem["mode"]]
    dims, dtype = tuple(problem["dims"]), problem["dtype"]
    layout = problem["layout"] if len(dims) >= 3 else "NCHW"
    alpha, beta = problem["alpha"], problem["beta"]
    import layer_cases
    x_desc, x_host = layer_cases.normal(dims, dtype, layout, rng, 3.0)
    x = DeviceView(x_host, ctx.device, ctx.torch)
    y_desc, y, prior = _layer_arrays(ctx, dims, dtype, layout, rng, beta, "output")
    want = softmax_ref.softmax_forward(x_host.astype(np.float64), int(algorithm), int(mode))
    label = _layer_label(problem)
    line = lambda name: _layer_line(name, dict(x_desc=x_desc, algorithm=algorithm, mode=mode, alpha=alpha,  # noqa
                                               beta=beta, handle=ctx.handle))

    def forward():
        tridnn.softmax_forward(ctx.handle, algorithm, mode, alpha, x_desc, x.view, beta, y_desc, y.view)

    def check_forward():
        check(y.host(), want, dtype, alpha, beta, prior, name=f"{label} y")
        _untouched(label, ("y", y))

    ctx.run(problem, "forward", forward, check_forward, reproducer=lambda: line("softmax_forward"))
    _, y_fwd, _ = _layer_arrays(ctx, dims, dtype, layout, rng, 0.0, "output")
    dy_desc, dy, dy64 = _layer_arrays(ctx, dims, dtype, layout, rng, 0.0, "normal")
    dx_desc, dx, dx_prior = _layer_arrays(ctx, dims, dtype, layout, rng, beta, "output")

    def backward():
        tridnn.softmax_forward(ctx.handle, algorithm, mode, 1.0, x_desc, x.view, 0.0, y_desc, y_fwd.view)
        tridnn.softmax_backward(ctx.handle, algorithm, mode, alpha, y_desc, y_fwd.view, dy_desc, dy.view, beta,
                                dx_desc, dx.view)

    def check_backward():
        dx_want = softmax_ref.softmax_backward(y_fwd.host(), dy64, int(algorithm), int(mode))
        check(dx.host(), dx_want, dtype, alpha, beta, dx_prior, name=f"{label} dx")
        _untouched(label, ("dx", dx))

    ctx.run(problem, "backward", backward, check_backward, reproducer=lambda: line("softmax_backward"))


def run_batch_norm(problem: dict, ctx) -> None:
    import tridnn
    from layer_cases import check
    from tridnn.reference import normalization as bn_ref
    torch = ctx.torch
    rng = np.random.default_rng(problem["data_seed"])
    mode = tridnn.BatchNormMode[problem["mode"]]
    dims, dtype = list(problem["dims"]), problem["dtype"]
    layout = problem["layout"] if len(dims) >= 3 else "NCHW"
    if len(dims) == 2 and mode.spatial:
        dims.append(2)
    dims = tuple(dims)
    alpha, beta, eps = problem["alpha"], problem["beta"], 1e-4
    import layer_cases
    x_desc, x_host = layer_cases.normal(dims, dtype, layout, rng, 2.0)
    x = DeviceView(x_host, ctx.device, torch)
    bn = tridnn.derive_bn_tensor_descriptor(x_desc, mode)
    bdt = bn.dtype.numpy
    param = lambda values: torch.as_tensor(np.asarray(values, bdt)).to(ctx.device)  # noqa: E731
    scale, bias = param(rng.uniform(0.5, 1.5, bn.dims)), param(rng.uniform(-0.5, 0.5, bn.dims))
    rmean, rvar = param(np.zeros(bn.dims)), param(np.ones(bn.dims))
    smean, sinv = param(np.full(bn.dims, np.nan)), param(np.full(bn.dims, np.nan))
    y_desc, y, prior = _layer_arrays(ctx, dims, dtype, layout, rng, beta, "output")
    x64 = x_host.astype(np.float64)
    y_want, mean, _ = bn_ref.batch_norm_train(x64, scale.cpu().double().numpy(), bias.cpu().double().numpy(), eps,
                                              mode.spatial)
    label = _layer_label(problem)
    host = lambda t: t.detach().to("cpu", torch.float64).numpy()  # noqa: E731
    line = lambda name: _layer_line(name, dict(x_desc=x_desc, mode=mode, epsilon=eps, alpha=alpha, beta=beta,  # noqa
                                               handle=ctx.handle))

    def forward():
        tridnn.batch_norm_forward_training(ctx.handle, mode, alpha, beta, x_desc, x.view, y_desc, y.view, bn, scale,
                                           bias, 0.5, rmean, rvar, eps, smean, sinv)

    def check_forward():
        check(y.host(), y_want, dtype, alpha, beta, prior, name=f"{label} y")
        check(host(smean), mean, bn.dtype, name=f"{label} saved mean")
        _untouched(label, ("y", y))

    ctx.run(problem, "forward_training", forward, check_forward,
            reproducer=lambda: line("batch_norm_forward_training"))
    dy_desc, dy, dy64 = _layer_arrays(ctx, dims, dtype, layout, rng, 0.0, "normal")
    dx_desc, dx, dx_prior = _layer_arrays(ctx, dims, dtype, layout, rng, beta, "output")
    dscale, dbias = param(np.full(bn.dims, np.nan)), param(np.full(bn.dims, np.nan))
    dx_want, dscale_want, dbias_want, _ = bn_ref.batch_norm_backward(x64, dy64, host(scale), eps, mode.spatial)

    def backward():
        tridnn.batch_norm_backward(ctx.handle, mode, alpha, beta, 1.0, 0.0, x_desc, x.view, dy_desc, dy.view,
                                   dx_desc, dx.view, bn, scale, dscale, dbias, eps, smean, sinv)

    def check_backward():
        check(dx.host(), dx_want, dtype, alpha, beta, dx_prior, name=f"{label} dx")
        check(host(dscale), dscale_want, bn.dtype, name=f"{label} dscale")
        check(host(dbias), dbias_want, bn.dtype, name=f"{label} dbias")
        _untouched(label, ("dx", dx))

    ctx.run(problem, "backward", backward, check_backward,
            reproducer=lambda: line("batch_norm_backward"))


def run_activation(problem: dict, ctx) -> None:
    import tridnn
    from layer_cases import check
    from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode
    from tridnn.reference import activation as act_ref
    rng = np.random.default_rng(problem["data_seed"])
    mode, coef = ActivationMode[problem["mode"]], problem["coef"]
    dims, dtype, layout = tuple(problem["dims"]), problem["dtype"], problem["layout"]
    alpha, beta = problem["alpha"], problem["beta"]
    desc = ActivationDescriptor(mode, nan_opt=int(problem["propagate_nan"]), coef=coef)
    import layer_cases
    x_desc, x_host = layer_cases.normal(dims, dtype, layout, rng, 2.0)
    if problem["nan_input"]:
        x_host[tuple(int(rng.integers(0, d)) for d in dims)] = np.nan
    x = DeviceView(x_host, ctx.device, ctx.torch)
    x64 = x_host.astype(np.float64)
    y_desc, y, prior = _layer_arrays(ctx, dims, dtype, layout, rng, beta, "output")
    label = f"{_layer_label(problem)} propagate_nan={problem['propagate_nan']}"
    exact = mode in (ActivationMode.RELU, ActivationMode.IDENTITY, ActivationMode.CLIPPED_RELU)
    line = lambda name: _layer_line(name, dict(act_desc=desc, x_desc=x_desc, alpha=alpha, beta=beta,  # noqa: E731
                                               handle=ctx.handle))

    def forward():
        tridnn.activation_forward(ctx.handle, desc, alpha, x_desc, x.view, beta, y_desc, y.view)

    def check_forward():
        got = y.host()
        if problem["nan_input"]:
            nan_in = np.isnan(x64)
            if problem["propagate_nan"] and not np.array_equal(np.isnan(got), nan_in):
                raise Failure(f"{label}: NaN pattern differs")
            if not problem["propagate_nan"] and (np.isnan(got) & ~nan_in).any():
                raise Failure(f"{label}: NaN where the input had none")
        else:
            want = act_ref.activation_forward(x64, int(mode), coef)
            check(got, want, dtype, alpha, beta, prior, exact=exact, name=f"{label} y")
        _untouched(label, ("y", y))

    ctx.run(problem, "forward", forward, check_forward, reproducer=lambda: line("activation_forward"))
    if problem["nan_input"]:
        return
    _, y_fwd, _ = _layer_arrays(ctx, dims, dtype, layout, rng, 0.0, "output")
    dy_desc, dy, dy64 = _layer_arrays(ctx, dims, dtype, layout, rng, 0.0, "normal")
    dx_desc, dx, dx_prior = _layer_arrays(ctx, dims, dtype, layout, rng, beta, "output")
    dx_want = act_ref.activation_backward(x64, dy64, int(mode), coef)

    def backward():
        tridnn.activation_forward(ctx.handle, desc, 1.0, x_desc, x.view, 0.0, y_desc, y_fwd.view)
        tridnn.activation_backward(ctx.handle, desc, alpha, y_desc, y_fwd.view, dy_desc, dy.view, x_desc, x.view,
                                   beta, dx_desc, dx.view)

    def check_backward():
        check(dx.host(), dx_want, dtype, alpha, beta, dx_prior, exact=exact, name=f"{label} dx")
        _untouched(label, ("dx", dx))

    ctx.run(problem, "backward", backward, check_backward, reproducer=lambda: line("activation_backward"))


def _layer_line(name: str, args: dict) -> str:
    from tridnn.reproduce_layers import layer_reproducer
    found = layer_reproducer(name, args)
    if found is None:
        return ""
    line, notes = found
    return line + ("  # " + "; ".join(notes) if notes else "")


RUNNERS = {"fwd": run_conv, "bwd_data": run_conv, "bwd_filter": run_conv, "pooling": run_pooling,
           "softmax": run_softmax, "batch_norm": run_batch_norm, "activation": run_activation}


# -- running and counting ------------------------------------------------------------------------------
class StickyDeviceError(Exception):
    """The CUDA context is broken (e.g. an illegal memory access): nothing after it can run."""


class Context:
    def __init__(self, device: str, count_only: bool = False):
        import torch

        import tridnn
        self.torch = torch
        self.count_only = count_only
        self.repeats = 1  # calls per convolution algorithm (--repeats)
        if device == "cpu":
            self.handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
        else:
            self.handle = tridnn.Handle(device=device, find_cache=None)
        self.device = self.handle.backend.device
        self.device_name = self.handle.device
        self.counts = collections.Counter()
        self.failures: list = []
        self.not_supported = collections.Counter()

    def not_applicable(self, problem, algo_name):
        self.counts[f"not_applicable/{problem['kind']}/{algo_name}"] += 1

    def run(self, problem, algo_name, call, check, reproducer) -> bool:
        """One algorithm (or layer direction) on one problem: call, wait, check; a failure is
        recorded with its reproducer and the fuzz goes on. True when it ran and passed."""
        from tridnn.errors import NotSupportedError
        kind = problem["kind"]
        try:
            call()
            if self.device.type == "cuda":
                self.torch.cuda.synchronize(self.device)
            if not self.count_only:
                check()
        except NotSupportedError as exc:  # a documented refusal, counted apart (not a pass)
            self.not_supported[f"{kind}/{algo_name}: {str(exc)[:120]}"] += 1
            self.counts[f"not_supported/{kind}/{algo_name}"] += 1
            return False
        except Exception as exc:  # noqa: BLE001  (every failure is recorded, the fuzz goes on)
            message = f"{type(exc).__name__}: {exc}"
            try:
                line = reproducer()
            except Exception as rexc:  # noqa: BLE001
                line = f"(no tridnn run line: {rexc})"
            self.failures.append(dict(index=problem["index"], kind=kind, algo=algo_name, error=message[:2000],
                                      traceback=traceback.format_exc()[-3000:], tridnn_run=line,
                                      rerun=f"--seed {problem['seed']} --only {problem['index']}", problem=problem))
            self.counts[f"failures/{kind}"] += 1
            self.counts[f"runs/{kind}"] += 1
            self.counts[f"runs/{kind}/{algo_name}"] += 1
            if self.device.type == "cuda" and _context_broken(self.torch, self.device, message):
                raise StickyDeviceError(message) from exc
            return False
        self.counts[f"runs/{kind}"] += 1
        self.counts[f"runs/{kind}/{algo_name}"] += 1
        return True


def _context_broken(torch, device, message: str) -> bool:
    if any(s in message for s in ("illegal memory access", "unspecified launch failure", "misaligned address",
                                  "device-side assert", "an illegal instruction")):
        return True
    try:
        torch.cuda.synchronize(device)
        torch.zeros(1, device=device).add_(1).item()
        return False
    except Exception:  # noqa: BLE001
        return True


# the template of the problem running now: "alternate" tuning takes the last fitting config on odd
# templates, "rotate" starts at candidate template mod the list's length
_TUNING = {"template": 0}


def limit_tuning(mode: str) -> None:
    """Launch configs without timing. The library's Tuner times every candidate config of a
    tuned kernel per problem (one compile per candidate); ``first`` takes the first config
    that fits the GPU, ``alternate`` the first on even templates and the last on odd ones
    (other tile shapes and split-K), ``rotate`` the first that fits from candidate
    template mod the list's length on, so each config compiles once per specialization.
    Done here because the library has no switch for it yet; ``timed`` keeps the Tuner."""
    if mode == "timed":
        return
    import torch
    from tridnn.cuda import common

    def pick_untimed(self, key, candidates, launch, out, device, scratch_ok=False):
        best = self._best.get(key)
        if best is not None:
            return best
        cands = list(candidates() if callable(candidates) else candidates)
        if mode == "alternate" and _TUNING["template"] % 2 == 1:
            cands.reverse()
        elif mode == "rotate":
            k = _TUNING["template"] % len(cands)
            cands = cands[k:] + cands[:k]
        best = cands[0]
        if device.type == "cuda" and len(cands) > 1:
            if callable(out):  # (as Tuner.pick: a timing buffer made on a miss only)
                out = out()
            scratch = out if scratch_ok else torch.empty_strided(out.shape, out.stride(), dtype=out.dtype,
                                                                 device=out.device)
            for cfg in cands:
                try:
                    launch(cfg, scratch)
                except Exception as exc:  # as the Tuner: skip configs that do not fit the GPU
                    if "OutOfResources" not in type(exc).__name__ and "resources" not in str(exc).lower():
                        raise
                    continue
                best = cfg
                break
        with self._lock:
            self._best[key] = best
        return best

    common.Tuner.pick = pick_untimed


class CompileCounter:
    """Distinct Triton specializations: on a GPU the compilations themselves (and their
    seconds); under the interpreter the keys Triton would compile for (argument types,
    16-divisibility and == 1 of ints and pointers, constexprs, launch options), an
    estimate (GPU launch configs differ from the interpreter's)."""

    def __init__(self, device: str, count_only: bool):
        self.keys: set = set()
        self.compiles = 0
        self.seconds = 0.0
        self.by_kernel = collections.Counter()
        if device == "cpu":
            self._hook_interpreter(count_only)
        else:
            self._hook_jit()

    def _hook_jit(self):
        from triton.runtime.jit import JITFunction
        original = JITFunction._do_compile
        counter = self

        def timed_compile(fn_self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(fn_self, *args, **kwargs)
            finally:
                counter.compiles += 1
                counter.seconds += time.perf_counter() - start
                counter.by_kernel[fn_self.fn.__name__] += 1
        JITFunction._do_compile = timed_compile

    def _hook_interpreter(self, count_only: bool):
        from triton.backends.compiler import BaseBackend
        from triton._C.libtriton import native_specialize_impl
        from triton.runtime import interpreter
        original = interpreter.InterpretedFunction.run
        counter = self

        def run(fn_self, *args, grid, warmup, **kwargs):
            signature = inspect.signature(fn_self.fn)
            options = {k: v for k, v in kwargs.items() if k not in signature.parameters}
            bound = signature.bind(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
            bound.apply_defaults()
            no_spec = set(fn_self.kwargs.get("do_not_specialize") or ())
            key = [fn_self.fn.__module__, fn_self.fn.__name__, tuple(sorted(options.items()))]
            for name, value in bound.arguments.items():
                annotation = str(signature.parameters[name].annotation)
                if "constexpr" in annotation:
                    key.append((name, repr(value)))
                elif name in no_spec:
                    key.append((name, type(value).__name__))
                else:
                    try:
                        key.append((name, native_specialize_impl(BaseBackend, value, False, True, True)))
                    except Exception:  # noqa: BLE001
                        key.append((name, type(value).__name__))
            key = tuple(key)
            if key not in counter.keys:
                counter.keys.add(key)
                counter.compiles += 1
                counter.by_kernel[fn_self.fn.__name__] += 1
            if count_only:
                return None
            return original(fn_self, *args, grid=grid, warmup=warmup, **kwargs)
        interpreter.InterpretedFunction.run = run


def run_problems(args, indices) -> dict:
    """Run the problems ``indices`` in this process; returns the report part."""
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import warnings
    warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)
    # the interpreter evaluates masked-off lanes too (log(0), 0/0): NumPy warns, results are unaffected
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    counter = CompileCounter(args.device, args.count_only)
    limit_tuning(args.tuning)
    ctx = Context(args.device, args.count_only)
    ctx.repeats = args.repeats
    start = time.perf_counter()
    done, stopped, aborted = 0, None, None
    seconds_by_kind = collections.Counter()
    for index in indices:
        if time.perf_counter() - start > args.time_budget_s:
            stopped = f"time budget of {args.time_budget_s:g} s reached after {done} problems"
            break
        problem = draw_problem(args.seed, index, args.device)
        _TUNING["template"] = problem["template"]
        t0 = time.perf_counter()
        ctx.counts[f"problems/{problem['kind']}"] += 1
        try:
            RUNNERS[problem["kind"]](problem, ctx)
        except StickyDeviceError as exc:
            aborted = f"problem {index}: the CUDA context broke ({exc}); nothing after it could run"
            done += 1
            break
        except Exception as exc:  # noqa: BLE001  (a failure while setting a problem up)
            ctx.failures.append(dict(index=index, kind=problem["kind"], algo="(setup)",
                                     error=f"{type(exc).__name__}: {exc}"[:2000],
                                     traceback=traceback.format_exc()[-3000:], tridnn_run="",
                                     rerun=f"--seed {args.seed} --only {index}", problem=problem))
            ctx.counts[f"failures/{problem['kind']}"] += 1
        seconds_by_kind[problem["kind"]] += time.perf_counter() - t0
        done += 1
        if args.progress and done % 50 == 0:
            print(f"  [{os.getpid()}] {done}/{len(indices)} problems, {time.perf_counter() - start:.0f} s, "
                  f"{counter.compiles} compiles, {len(ctx.failures)} failures", file=sys.stderr, flush=True)
    return dict(problems_run=done, indices_assigned=len(indices), seconds=time.perf_counter() - start,
                stopped=stopped, aborted=aborted, counts=dict(ctx.counts), failures=ctx.failures,
                not_supported=dict(ctx.not_supported), compiles=counter.compiles,
                compile_seconds=round(counter.seconds, 1), compiles_by_kernel=dict(counter.by_kernel),
                seconds_by_kind={k: round(v, 1) for k, v in seconds_by_kind.items()})


# -- workers -------------------------------------------------------------------------------------------
# rough count of the kernels one template compiles (measured with --count-only)
KERNELS_PER_TEMPLATE = {"fwd": 10, "bwd_data": 4, "bwd_filter": 4, "pooling": 3, "softmax": 2, "batch_norm": 6,
                        "activation": 2}


def split_by_family(args, indices, workers: int):
    """Whole families to workers, largest first onto the least loaded (greedy balance)."""
    families = collections.defaultdict(list)
    for i in indices:
        families[family(draw_problem(args.seed, i, args.device))].append(i)
    # a template's cost is mostly its first problem's compiles (roughly its kernels' count)
    weight = lambda fam, idx: KERNELS_PER_TEMPLATE[fam[0]] + 0.05 * len(idx)  # noqa: E731
    loads = [[0, []] for _ in range(workers)]
    for fam, idx in sorted(families.items(), key=lambda kv: -weight(*kv)):
        slot = min(loads, key=lambda s: s[0])
        slot[0] += weight(fam, idx)
        slot[1].extend(idx)
    return [sorted(s[1]) for s in loads if s[1]]


def run_workers(args, indices) -> list:
    parts = split_by_family(args, indices, args.workers)
    tmp = Path(tempfile.mkdtemp(prefix="tridnn-fuzz-gpu-"))
    procs = []
    for w, part in enumerate(parts):
        (tmp / f"in{w}.json").write_text(json.dumps(part))
        cmd = [sys.executable, __file__, "--device", args.device, "--seed", str(args.seed),
               "--time-budget-s", str(args.time_budget_s), "--tuning", args.tuning,
               "--worker-in", str(tmp / f"in{w}.json"), "--worker-out", str(tmp / f"out{w}.json")]
        cmd += ["--progress"] if args.progress else []
        cmd += ["--repeats", str(args.repeats)]
        cmd += ["--count-only"] if args.count_only else []
        procs.append(subprocess.Popen(cmd, cwd=ROOT))
    results = []
    for w, proc in enumerate(procs):
        rc = proc.wait()
        out = tmp / f"out{w}.json"
        if out.exists():
            results.append(json.loads(out.read_text()))
        else:
            results.append(dict(problems_run=0, indices_assigned=len(parts[w]), seconds=0.0, stopped=None,
                                aborted=f"worker {w} exited with status {rc} and wrote no result", counts={},
                                failures=[], not_supported={}, compiles=0, compile_seconds=0.0,
                                compiles_by_kernel={}, seconds_by_kind={}))
    return results


def merge(parts: list) -> dict:
    counts, by_kernel, not_supported, seconds_by_kind = (collections.Counter() for _ in range(4))
    failures = []
    for p in parts:
        counts.update(p["counts"])
        by_kernel.update(p["compiles_by_kernel"])
        not_supported.update(p["not_supported"])
        seconds_by_kind.update(p["seconds_by_kind"])
        failures.extend(p["failures"])
    return dict(problems_run=sum(p["problems_run"] for p in parts), counts=dict(sorted(counts.items())),
                failures=sorted(failures, key=lambda f: f["index"]), not_supported=dict(not_supported),
                compiles=sum(p["compiles"] for p in parts),
                compile_seconds=round(sum(p["compile_seconds"] for p in parts), 1),
                compiles_by_kernel=dict(by_kernel.most_common()),
                seconds_by_kind={k: round(v, 1) for k, v in seconds_by_kind.items()},
                stopped=[p["stopped"] for p in parts if p["stopped"]],
                aborted=[p["aborted"] for p in parts if p["aborted"]],
                worker_seconds=[round(p["seconds"], 1) for p in parts],
                worker_compiles=[p["compiles"] for p in parts], worker_problems=[p["problems_run"] for p in parts])


def table(report: dict) -> str:
    counts = report["counts"]
    rows = [("op", "problems", "runs", "not applicable", "not supported", "failures")]
    for kind in (*CONV_KINDS, *LAYER_KINDS):
        na = sum(v for k, v in counts.items() if k.startswith(f"not_applicable/{kind}/"))
        ns = sum(v for k, v in counts.items() if k.startswith(f"not_supported/{kind}/"))
        rows.append((kind, counts.get(f"problems/{kind}", 0), counts.get(f"runs/{kind}", 0), na, ns,
                     counts.get(f"failures/{kind}", 0)))
    total = [sum(r[i] for r in rows[1:]) for i in range(1, 6)]
    rows.append(("total", *total))
    widths = [max(len(str(r[i])) for r in rows) for i in range(6)]
    return "\n".join("  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
                     for r in rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (the interpreter, a dry run)")
    parser.add_argument("--problems", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-budget-s", type=float, default=330.0,
                        help="stop cleanly (and report) once this many seconds are spent, per process")
    parser.add_argument("--out", type=Path, default=None, help="directory for fuzz_gpu.json")
    parser.add_argument("--only", default=None, help="comma-separated problem indices to run (reproducers)")
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the GPU (compiles run in parallel)")
    parser.add_argument("--tuning", default="rotate", choices=("rotate", "alternate", "first", "timed"),
                        help="rotate (default): template t takes the first launch config that fits from candidate "
                             "t mod the list's length on; alternate: the first on even templates, the last on odd "
                             "ones (sessions 16-23's default); first: always the first; timed: the library's "
                             "timing tuner")
    parser.add_argument("--count-only", action="store_true",
                        help="interpreter only: count the specializations without running kernels or checks")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--repeats", type=int, default=1,
                        help="calls per convolution algorithm, each with new values in the same tensors (>= 3: "
                             "the API's fast path and its launch-record replays are checked too)")
    parser.add_argument("--worker-in", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.count_only and args.device != "cpu":
        parser.error("--count-only runs under the interpreter (--device cpu)")
    if args.worker_in:  # one worker of --workers
        part = run_problems(args, json.loads(args.worker_in.read_text()))
        args.worker_out.write_text(json.dumps(part, default=str))
        return 0

    indices = ([int(v) for v in args.only.split(",")] if args.only else list(range(args.problems)))
    start = time.perf_counter()
    if args.workers > 1 and len(indices) > 1:
        parts = run_workers(args, indices)
    else:
        parts = [run_problems(args, indices)]
    report = merge(parts)
    runs = sum(v for k, v in report["counts"].items() if k.startswith("runs/") and k.count("/") == 1)
    import torch
    import triton
    report = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), device=args.device,
                  device_name=torch.cuda.get_device_name(args.device) if args.device != "cpu" else "cpu (interpreter)",
                  torch=torch.__version__, triton=triton.__version__, seed=args.seed,
                  problems_asked=len(indices), workers=args.workers, tuning=args.tuning, count_only=args.count_only,
                  wall_seconds=round(time.perf_counter() - start, 1), algorithm_runs=runs,
                  failure_count=len(report["failures"]), **report)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fuzz_gpu.json").write_text(json.dumps(report, indent=1, default=str))
    for f in report["failures"][:20]:
        print(f"FAIL problem {f['index']} {f['kind']} {f['algo']}: {f['error'][:300]}\n"
              f"     rerun: python benchmarks/fuzz_gpu.py --device {args.device} {f['rerun']}\n"
              f"     {f['tridnn_run']}")
    # distinct failures: the message with its numbers blanked, per op, algorithm and dtype
    groups = collections.Counter((f["kind"], f["algo"], f["problem"].get("dtype"),
                                  re.sub(r"\d[\d.e+-]*", "#", f["error"].split("\n")[0])[:90])
                                 for f in report["failures"])
    for (kind, algo, dtype, error), n in groups.most_common():
        print(f"failures x{n}: {kind} {algo} {dtype}: {error}")
    for reason, n in sorted(report["not_supported"].items()):
        print(f"not supported x{n}: {reason}")
    for note in report["stopped"] + report["aborted"]:
        print(f"NOTE: {note}")
    compiled = "specializations (interpreter estimate)" if args.device == "cpu" else "Triton compiles"
    print(f"{report['problems_run']} of {len(indices)} problems, {runs} algorithm runs, "
          f"{report['failure_count']} failures, {report['compiles']} {compiled} "
          f"({report['compile_seconds']} s), {report['wall_seconds']} s wall, {args.workers} worker(s)")
    print(table(report))
    incomplete = report["aborted"] or (report["problems_run"] < len(indices) and not report["stopped"])
    return 1 if report["failures"] or incomplete else 0


if __name__ == "__main__":
    sys.exit(main())
