"""Reproducers for the layers around convolution: ``tridnn run pool | softmax | activation |
batchnorm``, and the ``tridnn run`` lines the API-call log writes for them.

Each op builds its descriptors from flags, fills its inputs with seeded random
values, calls the public API once, checks every output against the float64
reference (``tridnn.reference``) within the dtype's tolerance, and then times the call.
Inputs a backward pass takes from the forward pass (y of pooling, softmax and
activations) come from the reference forward, rounded to the dtype.
"""
from __future__ import annotations

import shlex
import statistics
import sys

import numpy as np

from .errors import BadParamError
from .reproduce import check_layout, dims_arg, device_array, poison_array, time_calls, to_host
from .types import DataType, TensorFormat

OPS = ("pool", "softmax", "activation", "batchnorm")


# -- command line --------------------------------------------------------------------------------
def add_layer_parsers(ops, add_problem_options) -> None:
    common = dict(allow_abbrev=False)
    p = ops.add_parser("pool", help="pooling forward / backward", **common)
    p.add_argument("--mode", default="max", help="max, average_count_include_padding, "
                   "average_count_exclude_padding, max_deterministic (or avg, avg_exclude)")
    p.add_argument("--window", default="2")
    p.add_argument("--pad", default="0")
    p.add_argument("--stride", default=None, help="default: the window")
    p.add_argument("--propagate-nan", action="store_true")
    _common(p, add_problem_options)
    p = ops.add_parser("softmax", help="softmax / log-softmax forward / backward", **common)
    p.add_argument("--algo", default="accurate", help="fast, accurate or log")
    p.add_argument("--mode", default="channel", help="instance (over C*spatial) or channel (over C)")
    _common(p, add_problem_options)
    p = ops.add_parser("activation", help="activation forward / backward", **common)
    p.add_argument("--mode", default="relu", help="relu, sigmoid, tanh, clipped_relu, elu, swish, "
                   "leaky_relu, gelu, gelu_tanh, softplus, hard_swish, identity")
    p.add_argument("--coef", type=float, default=0.0)
    p.add_argument("--swish-beta", type=float, default=1.0)
    _common(p, add_problem_options)
    p = ops.add_parser("batchnorm", help="batch norm: training forward, inference or backward", **common)
    p.add_argument("--mode", default="spatial", help="spatial, per_activation or spatial_persistent")
    p.add_argument("--epsilon", type=float, default=1e-5)
    _common(p, add_problem_options, directions="fwd (training), inference, bwd")


def _common(p, add_problem_options, directions="fwd or bwd"):
    p.add_argument("--dims", required=True, help="N,C,*spatial, e.g. 8,64,56,56")
    add_problem_options(p)
    p.set_defaults(direction="fwd")
    for action in p._actions:  # one direction per run here
        if action.dest == "direction":
            action.help = directions
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-check", action="store_true")
    from .cli import cmd_run
    p.set_defaults(func=cmd_run)


def _ints(text, name):
    try:
        values = tuple(int(v) for v in str(text).split(","))
    except ValueError:
        raise BadParamError(f"--{name} must be integers separated by commas, got {text!r}") from None
    return values


def _per_dim(text, name, nd):
    values = _ints(text, name)
    if len(values) == 1:
        return values * nd
    if len(values) != nd:
        raise BadParamError(f"--{name} {text} has {len(values)} entries; the tensor has {nd} spatial dims")
    return values


# -- one layer problem ----------------------------------------------------------------------------
class LayerCase:
    """Descriptors, device arrays and references of one layer call."""

    def __init__(self, handle, args):
        import tridnn
        self.handle, self.args, self.t = handle, args, tridnn
        self.op, self.direction = args.op, args.direction
        self.dims = _ints(args.dims, "dims")
        if len(self.dims) < 3 and self.op != "softmax":
            raise BadParamError(f"--dims {args.dims}: {self.op} needs N,C and at least one spatial dim")
        self.dtype = DataType.of(args.dtype)
        self.layout = check_layout(args.layout)
        self.alpha, self.beta = float(args.alpha), float(args.beta)
        self.rng = np.random.default_rng(args.seed)
        self.inputs, self.outputs, self.refs = {}, {}, {}
        getattr(self, "_setup_" + self.op)()

    # -- helpers --------------------------------------------------------------------
    def desc(self, dims):
        if self.layout == "strided":
            from .reproduce import _strided_desc
            return _strided_desc(tuple(dims), self.dtype)
        fmt = TensorFormat.NHWC if self.layout == "NHWC" else TensorFormat.NCHW
        return self.t.TensorDescriptor.packed(tuple(dims), self.dtype, fmt)

    def random(self, dims, scale=1.0):
        return (scale * self.rng.standard_normal(tuple(dims))).astype(self.dtype.numpy).astype(np.float64)

    def tensor(self, name, desc, values=None, output=False):
        array = device_array(self.handle, desc, values)
        (self.outputs if output else self.inputs)[name] = (desc, array, values)
        return array

    def _check_direction(self, valid):
        if self.direction not in valid:
            raise BadParamError(f"unknown direction {self.direction!r} for {self.op}; valid: {', '.join(valid)}")

    # -- pooling ----------------------------------------------------------------------
    def _setup_pool(self):
        from .reference import pooling as ref
        a = self.args
        self._check_direction(("fwd", "bwd"))
        nd = len(self.dims) - 2
        mode = {"avg": "AVERAGE_COUNT_INCLUDE_PADDING", "avg_exclude": "AVERAGE_COUNT_EXCLUDE_PADDING"}.get(
            a.mode.lower(), a.mode)
        window = _per_dim(a.window, "window", nd)
        pool = self.t.PoolingDescriptor(mode, window, _per_dim(a.pad, "pad", nd),
                                        None if a.stride is None else _per_dim(a.stride, "stride", nd),
                                        int(a.propagate_nan), nd=nd)
        self.label = (f"pool {pool.mode.name} window {pool.window} pad {pool.padding} stride "
                      f"{pool.stride}")
        x_desc = self.desc(self.dims)
        y_desc = self.desc(self.t.get_pooling_forward_output_dim(pool, x_desc))
        xv = self.random(self.dims)
        x = self.tensor("x", x_desc, xv)
        geometry = (int(pool.mode), pool.window, pool.padding, pool.stride, bool(a.propagate_nan))
        yv = ref.pooling_forward(xv, *geometry)
        if self.direction == "fwd":
            y = self.tensor("y", y_desc, None, output=True)
            self.refs["y"] = yv
            self.call = lambda: self.t.pooling_forward(self.handle, pool, self.alpha, x_desc, x, self.beta,
                                                       y_desc, y)
        else:
            y = self.tensor("y", y_desc, yv.astype(self.dtype.numpy).astype(np.float64))
            dyv = self.random(y_desc.dims)
            dy = self.tensor("dy", y_desc, dyv)
            dx = self.tensor("dx", x_desc, None, output=True)
            self.refs["dx"] = ref.pooling_backward(xv, dyv, *geometry)
            self.call = lambda: self.t.pooling_backward(self.handle, pool, self.alpha, y_desc, y, y_desc, dy,
                                                        x_desc, x, self.beta, x_desc, dx)

    # -- softmax ------------------------------------------------------------------------
    def _setup_softmax(self):
        from .descriptors.softmax import softmax_algorithm, softmax_mode
        from .reference import softmax as ref
        self._check_direction(("fwd", "bwd"))
        algo, mode = softmax_algorithm(self.args.algo), softmax_mode(self.args.mode)
        self.label = f"softmax {algo.name} {mode.name}"
        desc = self.desc(self.dims)
        xv = self.random(self.dims, 3.0)
        yv = ref.softmax_forward(xv, int(algo), int(mode))
        if self.direction == "fwd":
            x = self.tensor("x", desc, xv)
            y = self.tensor("y", desc, None, output=True)
            self.refs["y"] = yv
            self.call = lambda: self.t.softmax_forward(self.handle, algo, mode, self.alpha, desc, x,
                                                       self.beta, desc, y)
        else:
            yr = yv.astype(self.dtype.numpy).astype(np.float64)
            y = self.tensor("y", desc, yr)
            dyv = self.random(self.dims)
            dy = self.tensor("dy", desc, dyv)
            dx = self.tensor("dx", desc, None, output=True)
            self.refs["dx"] = ref.softmax_backward(yr, dyv, int(algo), int(mode))
            self.call = lambda: self.t.softmax_backward(self.handle, algo, mode, self.alpha, desc, y, desc,
                                                        dy, self.beta, desc, dx)

    # -- activation -------------------------------------------------------------------------
    def _setup_activation(self):
        from .reference import activation as ref
        a = self.args
        self._check_direction(("fwd", "bwd"))
        act = self.t.ActivationDescriptor(a.mode, coef=a.coef, swish_beta=a.swish_beta)
        self.label = f"activation {act.mode.name} coef {act.coef} swish_beta {act.swish_beta}"
        desc = self.desc(self.dims)
        xv = self.random(self.dims, 2.0)
        x = self.tensor("x", desc, xv)
        params = (int(act.mode), act.coef, act.swish_beta)
        yv = ref.activation_forward(xv, *params)
        if self.direction == "fwd":
            y = self.tensor("y", desc, None, output=True)
            self.refs["y"] = yv
            self.call = lambda: self.t.activation_forward(self.handle, act, self.alpha, desc, x, self.beta,
                                                          desc, y)
        else:
            y = self.tensor("y", desc, yv.astype(self.dtype.numpy).astype(np.float64))
            dyv = self.random(self.dims)
            dy = self.tensor("dy", desc, dyv)
            dx = self.tensor("dx", desc, None, output=True)
            self.refs["dx"] = ref.activation_backward(xv, dyv, *params)
            self.call = lambda: self.t.activation_backward(self.handle, act, self.alpha, desc, y, desc, dy,
                                                           desc, x, self.beta, desc, dx)

    # -- batch norm ---------------------------------------------------------------------------
    def _setup_batchnorm(self):
        from .descriptors.normalization import batch_norm_mode
        from .reference import normalization as ref
        t, a = self.t, self.args
        self._check_direction(("fwd", "inference", "bwd"))
        mode = batch_norm_mode(a.mode)
        spatial = mode != t.BatchNormMode.PER_ACTIVATION
        eps = float(a.epsilon)
        self.label = f"batchnorm {mode.name} epsilon {eps:g}"
        x_desc = self.desc(self.dims)
        bn_desc = t.derive_bn_tensor_descriptor(x_desc, mode)
        param = lambda name, values=None, output=False: self._param(name, bn_desc, values, output)
        xv = self.random(self.dims)
        x = self.tensor("x", x_desc, xv)
        scale_v = 1 + 0.5 * self.rng.standard_normal(bn_desc.dims)
        bias_v = 0.5 * self.rng.standard_normal(bn_desc.dims)
        scale, bias = param("scale", scale_v), param("bias", bias_v)
        if self.direction == "fwd":
            y = self.tensor("y", x_desc, None, output=True)
            rmean, rvar = param("running_mean", np.zeros(bn_desc.dims)), param("running_var", np.ones(bn_desc.dims))
            smean, sinv = param("saved_mean", None, True), param("saved_inv_var", None, True)
            yv, mean, var = ref.batch_norm_train(xv, scale_v, bias_v, eps, spatial)
            self.refs.update(y=yv, saved_mean=mean, saved_inv_var=1 / np.sqrt(var + eps))
            self.call = lambda: t.batch_norm_forward_training(
                self.handle, mode, self.alpha, self.beta, x_desc, x, x_desc, y, bn_desc, scale, bias, 1.0,
                rmean, rvar, eps, smean, sinv)
        elif self.direction == "inference":
            mean_v = 0.3 * self.rng.standard_normal(bn_desc.dims)
            var_v = 0.5 + self.rng.random(bn_desc.dims)
            mean, var = param("mean", mean_v), param("var", var_v)
            y = self.tensor("y", x_desc, None, output=True)
            self.refs["y"] = ref.batch_norm_inference(xv, scale_v, bias_v, mean_v, var_v, eps)
            self.call = lambda: t.batch_norm_forward_inference(
                self.handle, mode, self.alpha, self.beta, x_desc, x, x_desc, y, bn_desc, scale, bias,
                mean, var, eps)
        else:
            dyv = self.random(self.dims)
            dy = self.tensor("dy", x_desc, dyv)
            dx = self.tensor("dx", x_desc, None, output=True)
            dscale, dbias = param("dscale", None, True), param("dbias", None, True)
            dxv, dscale_v, dbias_v, _ = ref.batch_norm_backward(xv, dyv, scale_v, eps, spatial)
            self.refs.update(dx=dxv, dscale=dscale_v.reshape(bn_desc.dims), dbias=dbias_v.reshape(bn_desc.dims))
            self.param_outputs = ("dscale", "dbias")
            self.call = lambda: t.batch_norm_backward(
                self.handle, mode, self.alpha, self.beta, 1.0, 0.0, x_desc, x, x_desc, dy, x_desc, dx,
                bn_desc, scale, dscale, dbias, eps)

    def _param(self, name, desc, values, output):
        array = device_array(self.handle, desc, values)
        if output:
            self.outputs[name] = (desc, array, None)
        return array

    # -- run, check, time --------------------------------------------------------------------------
    def blend(self, name) -> tuple[float, float]:
        """The (alpha, beta) that applies to output ``name`` (statistics are written plainly)."""
        if name in ("saved_mean", "saved_inv_var") or name in getattr(self, "param_outputs", ()):
            return 1.0, 0.0
        return self.alpha, self.beta

    def prepare(self) -> dict:
        """Poison outputs written with beta 0; give the others seeded prior values."""
        priors = {}
        for name, (desc, array, _) in self.outputs.items():
            alpha, beta = self.blend(name)
            if beta == 0:
                poison_array(array)
            else:
                priors[name] = self.random(desc.dims)
                if isinstance(array, np.ndarray):
                    array[...] = priors[name]
                else:
                    from .reproduce import device_array_copy
                    device_array_copy(array, priors[name])
        return priors

    def check(self, priors) -> list[str]:
        from . import testing
        problems = []
        for name, (desc, array, _) in self.outputs.items():
            alpha, beta = self.blend(name)
            got = to_host(array)
            want = alpha * np.asarray(self.refs[name], np.float64).reshape(got.shape)
            if beta:
                want = want + beta * priors[name]
            try:
                testing.assert_close(got, want, self.dtype, name)
            except AssertionError as exc:
                problems.append(str(exc))
        return problems


def run_layer(args) -> int:
    from .bench import format_table
    from .cli import EXIT_MISMATCH, EXIT_OK, make_handle
    handle = make_handle(args)
    case = LayerCase(handle, args)
    print(f"problem  {case.label}, dims {case.dims} ({args.direction}, {case.dtype.numpy.name}, "
          f"{case.layout}, {handle.device}/{handle.backend_name})")
    priors = case.prepare()
    case.call()
    handle.backend.synchronize()
    problems = [] if args.no_check else case.check(priors)
    times = time_calls(handle, case.call, args.repeat)
    ms = statistics.median(times) * 1e3
    moved = sum(d.nbytes for d, _, _ in case.inputs.values()) + sum(d.nbytes for d, _, _ in case.outputs.values())
    status = "mismatch" if problems else "ok"
    check = "not checked" if args.no_check else ("; ".join(problems)[:80] if problems else "within tolerance")
    print(format_table(("status", "check", "ms", "GB/s"),
                       [(status, check, f"{ms:.3f}", f"{moved / (ms * 1e-3) / 1e9:.3g}")]))
    for p in problems:
        print(f"{args.op}: MISMATCH: {p}", file=sys.stderr)
    print("reproduce: tridnn " + " ".join(shlex.quote(a) for a in args.argv))
    return EXIT_MISMATCH if problems else EXIT_OK


# -- reproducers for logged layer calls ---------------------------------------------------------------
def layer_reproducer(name: str, args: dict):
    """(``tridnn run`` line, notes) for a logged pooling, softmax, activation or batch norm call."""
    if name in ("pooling_forward", "pooling_backward"):
        pool, x_desc = args.get("pool_desc"), args.get("x_desc")
        if pool is None or x_desc is None:
            return None
        extra = ["--mode", pool.mode.name.lower(), "--window", dims_arg(pool.window), "--pad", dims_arg(pool.padding),
                 "--stride", dims_arg(pool.stride)] + (["--propagate-nan"] if pool.propagate_nan else [])
        return _line("pool", x_desc, "fwd" if name.endswith("forward") else "bwd", extra, args)
    if name in ("softmax_forward", "softmax_backward"):
        desc = args.get("x_desc", args.get("y_desc"))
        if desc is None:
            return None
        from .descriptors.softmax import softmax_algorithm, softmax_mode
        extra = ["--algo", softmax_algorithm(args["algorithm"]).name.lower(),
                 "--mode", softmax_mode(args["mode"]).name.lower()]
        return _line("softmax", desc, "fwd" if name.endswith("forward") else "bwd", extra, args)
    if name in ("activation_forward", "activation_backward"):
        act, desc = args.get("act_desc"), args.get("x_desc")
        if act is None or desc is None:
            return None
        extra = ["--mode", act.mode.name.lower(), "--coef", repr(float(act.coef)),
                 "--swish-beta", repr(float(act.swish_beta))]
        return _line("activation", desc, "fwd" if name.endswith("forward") else "bwd", extra, args)
    if name in ("batch_norm_forward_training", "batch_norm_forward_inference", "batch_norm_backward"):
        from .descriptors.normalization import batch_norm_mode
        desc = args.get("x_desc")
        if desc is None:
            return None
        direction = {"batch_norm_forward_training": "fwd", "batch_norm_forward_inference": "inference",
                     "batch_norm_backward": "bwd"}[name]
        extra = ["--mode", batch_norm_mode(args["mode"]).name.lower(), "--epsilon", repr(float(args["epsilon"]))]
        if name == "batch_norm_backward":
            args = dict(args, alpha=args.get("alpha_data_diff", 1.0), beta=args.get("beta_data_diff", 0.0))
        return _line("batchnorm", desc, direction, extra, args)
    return None


def _line(op, desc, direction, extra, args):
    handle = args.get("handle")
    notes = []
    layout = desc.format
    if layout == "strided":
        notes.append(f"the tensor has strides {desc.strides}; the reproducer uses tridnn.testing's strided view")
    parts = ["tridnn", "run", op, "--dims", ",".join(map(str, desc.dims)), *extra,
             "--dtype", desc.dtype.numpy.name, "--layout", layout, "--direction", direction]
    alpha, beta = float(args.get("alpha", 1.0)), float(args.get("beta", 0.0))
    if alpha != 1.0:
        parts += ["--alpha", repr(alpha)]
    if beta != 0.0:
        parts += ["--beta", repr(beta)]
    device = getattr(handle, "device", "cpu")
    if device != "cpu":
        parts += ["--device", device]
    if getattr(handle, "backend_name", None) == "triton" and device == "cpu":
        parts += ["--backend", "triton"]
    return " ".join(parts), notes
