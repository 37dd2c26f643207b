"""Reproducers: one problem from command-line flags or a benchdnn-style string, run once,
checked against the float64 reference, and timed.

``ConvSpec`` is the single description of a convolution's sizes shared by
``tridnn run``, ``tridnn bench``, ``tridnn find`` and the API-call log: it parses and
writes benchdnn problem strings (``mb8ic64ih56oc64kh3ph1``) and ``--flag`` lists, and
turns itself into descriptors. The ``run_*`` functions go through the public API
(``tridnn.convolution_forward`` and friends), so a reproducer exercises exactly the
path a user's call took.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

import numpy as np

from .errors import BadParamError, NotSupportedError
from .types import DataType, TensorFormat, algo_enum

LAYOUTS = ("NCHW", "NHWC", "strided")
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
# The public function of each direction and the order of its array arguments.
CONV_API = {
    "fwd": "convolution_forward",
    "bwd_data": "convolution_backward_data",
    "bwd_filter": "convolution_backward_filter",
}


# -- the problem ------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvSpec:
    """Sizes of one convolution: batch, channels, spatial dims, kernel and geometry.

    Tuples have one entry per spatial dim, outermost first (D, H, W). ``dilation`` is
    the real dilation (1 = dense); benchdnn strings write it minus one.
    """
    n: int
    c: int
    k: int
    spatial: tuple
    kernel: tuple
    stride: tuple
    pad: tuple
    pad_post: tuple
    dilation: tuple
    groups: int = 1
    name: str = field(default="", compare=False)

    def __post_init__(self):
        nd = len(self.spatial)
        if not 1 <= nd <= 3:
            raise BadParamError(f"a convolution has 1 to 3 spatial dims, got {self.spatial}")
        for label in ("kernel", "stride", "pad", "pad_post", "dilation"):
            value = getattr(self, label)
            if len(value) != nd:
                raise BadParamError(f"{label} {value} needs {nd} entries, one per spatial dim "
                                    f"of {self.spatial}")
        for label in ("n", "c", "k", "groups"):
            value = getattr(self, label)
            if not isinstance(value, (int, np.integer)) or value < (0 if label == "n" else 1):
                raise BadParamError(f"{label} must be an integer >= {0 if label == 'n' else 1}, "
                                    f"got {value!r}")
        if self.c % self.groups or self.k % self.groups:
            raise BadParamError(f"channels c={self.c} and k={self.k} must both be divisible by "
                                f"groups={self.groups}")

    @property
    def nd(self) -> int:
        return len(self.spatial)

    # -- constructors ---------------------------------------------------------------
    @classmethod
    def make(cls, n, c, k, spatial, kernel, stride=1, pad=0, dilation=1, groups=1, pad_post=None,
             name=""):
        """Ints broadcast over the spatial dims; ``pad_post`` defaults to ``pad``."""
        spatial = tuple(int(v) for v in spatial)
        nd = len(spatial)
        per = lambda v: tuple(int(x) for x in v) if isinstance(v, (tuple, list)) else (int(v),) * nd
        pad = per(pad)
        return cls(int(n), int(c), int(k), spatial, per(kernel), per(stride), pad,
                   pad if pad_post is None else per(pad_post), per(dilation), int(groups), name)

    @classmethod
    def from_shape(cls, p: dict, n: int) -> "ConvSpec":
        """From a ``tridnn.shapes`` problem dict at batch ``n``."""
        return cls.make(n, p["C"], p["K"], p["spatial"], p["kernel"], p["stride"], p["pad"],
                        p["dilation"], p["groups"], name=p.get("name", ""))

    @classmethod
    def from_descriptors(cls, x_desc, w_desc, conv_desc) -> "ConvSpec":
        return cls(x_desc.n, x_desc.c, w_desc.k, tuple(x_desc.spatial), tuple(w_desc.kernel),
                   tuple(conv_desc.stride), tuple(conv_desc.padding), tuple(conv_desc.pad_post),
                   tuple(conv_desc.dilation), conv_desc.groups)

    # -- derived ----------------------------------------------------------------------
    @property
    def out_spatial(self) -> tuple:
        return tuple((i + a + b - d * (k - 1) - 1) // s + 1 for i, k, s, a, b, d in zip(
            self.spatial, self.kernel, self.stride, self.pad, self.pad_post, self.dilation))

    @property
    def flops(self) -> float:
        return 2.0 * self.n * self.k * _prod(self.out_spatial) * (self.c // self.groups) * _prod(self.kernel)

    def descriptors(self, dtype="float32", layout="NCHW", mode="cross_correlation",
                    math_type="DEFAULT", filter_layout=None):
        """(x_desc, w_desc, conv_desc, y_desc) in ``layout`` (NCHW, NHWC or strided); the filter
        is KRSC when ``filter_layout`` (default: NHWC exactly when ``layout`` is) is NHWC."""
        from .descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor
        from .types import ConvMode, MathType
        dtype = DataType.of(dtype)
        layout = check_layout(layout)
        try:
            mode = ConvMode[str(mode).upper()] if not isinstance(mode, ConvMode) else mode
            math_type = MathType[str(math_type).upper()] if not isinstance(math_type, MathType) else math_type
        except KeyError as exc:
            raise BadParamError(f"unknown mode or math type {exc}; valid modes: "
                                f"{[m.name.lower() for m in ConvMode]}, math types: "
                                f"{[m.name for m in MathType]}") from None
        conv = ConvolutionDescriptor(padding=self.pad, pad_post=self.pad_post, stride=self.stride,
                                     dilation=self.dilation, groups=self.groups, mode=mode,
                                     math_type=math_type, nd=self.nd)
        x_dims = (self.n, self.c, *self.spatial)
        fmt = TensorFormat.NHWC if layout == "NHWC" else TensorFormat.NCHW
        filter_layout = ("NHWC" if layout == "NHWC" else "NCHW") if filter_layout is None \
            else check_layout(filter_layout)
        if filter_layout == "strided":
            raise BadParamError("filters are packed: valid filter layouts are NCHW (KCRS) and NHWC (KRSC)")
        w_fmt = TensorFormat.NHWC if filter_layout == "NHWC" else TensorFormat.NCHW
        w_desc = FilterDescriptor((self.k, self.c // self.groups, *self.kernel), dtype, w_fmt)
        if layout == "strided":
            x_desc = _strided_desc(x_dims, dtype)
            y_desc = _strided_desc(conv.output_dims(TensorDescriptor.packed(x_dims, dtype), w_desc), dtype)
        else:
            x_desc = TensorDescriptor.packed(x_dims, dtype, fmt)
            y_desc = TensorDescriptor.packed(conv.output_dims(x_desc, w_desc), dtype, fmt)
        return x_desc, w_desc, conv, y_desc

    # -- text forms -------------------------------------------------------------------
    def to_string(self) -> str:
        """benchdnn's problem string; defaults (g1, stride 1, pad 0, dense) are left out."""
        axes = "dhw"[3 - self.nd:]
        parts = [f"g{self.groups}" if self.groups != 1 else "", f"mb{self.n}ic{self.c}"]
        parts += [f"i{a}{v}" for a, v in zip(axes, self.spatial)]
        parts.append(f"oc{self.k}")
        if self.pad_post != self.pad:  # the output size is how benchdnn spells asymmetric padding
            parts += [f"o{a}{v}" for a, v in zip(axes, self.out_spatial)]
        parts += [f"k{a}{v}" for a, v in zip(axes, self.kernel)]
        if any(s != 1 for s in self.stride):
            parts += [f"s{a}{v}" for a, v in zip(axes, self.stride)]
        if any(self.pad):
            parts += [f"p{a}{v}" for a, v in zip(axes, self.pad)]
        if any(d != 1 for d in self.dilation):
            parts += [f"d{a}{v - 1}" for a, v in zip(axes, self.dilation)]
        if self.name:
            parts.append(f'n"{self.name}"')
        return "".join(parts)

    @classmethod
    def parse(cls, text: str) -> "ConvSpec":
        """A benchdnn problem string: g, mb, ic, i{d,h,w}, oc, o{d,h,w}, k{d,h,w}, s{d,h,w},
        p{d,h,w}, d{d,h,w} (dilation minus one) and n"name"; missing W sizes copy H (and H
        copies D); an output size other than symmetric padding gives sets the padding after
        the data (asymmetric padding), as in benchdnn."""
        values, name = _tokens(text)
        axes = [a for a in "dhw" if f"i{a}" in values]
        if not axes:
            raise BadParamError(f"problem {text!r} gives no input size; add ih (2D), id (3D) or iw (1D)")
        first = "dhw".index(axes[0])
        axes = list("dhw"[first:])

        def per_axis(prefix, default):
            out, last = [], None
            for a in axes:
                v = values.get(prefix + a, last if last is not None else default)
                if v is None:
                    raise BadParamError(f"problem {text!r} needs {prefix}{a}")
                out.append(v)
                last = v
            return tuple(out)

        for key in ("ic", "oc"):
            if key not in values:
                raise BadParamError(f"problem {text!r} needs {key} (channels), e.g. ic64oc64")
        spatial = per_axis("i", None)
        kernel = per_axis("k", 1)
        stride = per_axis("s", 1)
        pad = per_axis("p", 0)
        dilation = tuple(d + 1 for d in per_axis("d", 0))
        pad_post = list(pad)
        for i, a in enumerate(axes):
            want = values.get(f"o{a}")
            if want is None:
                continue
            natural = (spatial[i] + 2 * pad[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
            if want == natural:
                continue
            post = (want - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 - spatial[i] - pad[i]
            if want <= 0 or post < 0:
                raise BadParamError(f"o{a}{want} does not fit i{a}{spatial[i]} k{a}{kernel[i]} "
                                    f"s{a}{stride[i]} p{a}{pad[i]}; the natural output is {natural}")
            pad_post[i] = post
        return cls(values.get("mb", 2), values["ic"], values["oc"], spatial, kernel, stride, pad,
                   tuple(pad_post), dilation, values.get("g", 1), name)

    def flags(self) -> list[str]:
        """The ``tridnn run conv`` flags for these sizes."""
        names = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}[self.nd]
        kernel_names = {1: ("s",), 2: ("r", "s"), 3: ("t", "r", "s")}[self.nd]
        out = ["--n", str(self.n), "--c", str(self.c)]
        for a, v in zip(names, self.spatial):
            out += [f"--{a}", str(v)]
        out += ["--k", str(self.k)]
        for a, v in zip(kernel_names, self.kernel):
            out += [f"--{a}", str(v)]
        out += ["--pad", dims_arg(self.pad)]
        if self.pad_post != self.pad:
            out += ["--pad-post", dims_arg(self.pad_post)]
        out += ["--stride", dims_arg(self.stride), "--dilation", dims_arg(self.dilation),
                "--groups", str(self.groups)]
        return out


_TOKEN = re.compile(r"(mb|ic|oc|id|ih|iw|od|oh|ow|kd|kh|kw|sd|sh|sw|pd|ph|pw|dd|dh|dw|g)(\d+)")


def _tokens(text: str):
    values, name, pos = {}, "", 0
    text = text.strip()
    while pos < len(text):
        if text[pos] in "_ ":
            pos += 1
            continue
        if text[pos] == "n":  # no size token starts with n: the rest is the name
            rest = text[pos + 1:]
            name = rest[1:-1] if rest.startswith('"') and rest.endswith('"') and len(rest) >= 2 else rest
            break
        match = _TOKEN.match(text, pos)
        if match is None:
            raise BadParamError(f"cannot read problem {text!r} at {text[pos:]!r}; expected benchdnn "
                                f"tokens such as mb8ic64ih56oc64kh3ph1 (g mb ic i[dhw] oc o[dhw] "
                                f"k[dhw] s[dhw] p[dhw] d[dhw] n\"name\")")
        key, value = match.group(1), int(match.group(2))
        if key in values:
            raise BadParamError(f"problem {text!r} gives {key} twice")
        values[key] = value
        pos = match.end()
    return values, name


def dims_arg(values) -> str:
    """A per-dim command-line value: '1' when every spatial dim has the same value, else '1,2'."""
    values = tuple(values)
    return str(values[0]) if len(set(values)) == 1 else ",".join(str(v) for v in values)


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def check_layout(layout: str) -> str:
    text = str(layout)
    for valid in LAYOUTS:
        if text.upper() == valid.upper():
            return valid
    raise BadParamError(f"unknown layout {layout!r}; valid: {', '.join(LAYOUTS)}")


def _strided_desc(dims, dtype):
    """A non-packed view (every other W position, padded channels), as tridnn.testing makes."""
    from .testing import make_tensor
    desc, _ = make_tensor(dims, dtype, "strided", np.random.default_rng(0))
    return desc


# -- arrays on the handle's device ------------------------------------------------------
def device_array(handle, desc, values=None):
    """An array for ``desc`` on the handle's device, optionally filled with ``values``."""
    if handle.backend_name == "numpy" and desc.format == "strided":
        from .testing import make_tensor
        _, view = make_tensor(desc.dims, desc.dtype, "strided", np.random.default_rng(0), values)
        return view
    arr = handle.backend.empty(desc)
    if values is not None:
        if isinstance(arr, np.ndarray):
            arr[...] = values
        else:  # a torch tensor
            device_array_copy(arr, values)
    return arr


def to_host(arr) -> np.ndarray:
    """A float64 NumPy copy of a NumPy array or torch tensor."""
    if isinstance(arr, np.ndarray):
        return np.asarray(arr, np.float64)
    import torch
    return arr.detach().to("cpu", dtype=torch.float64).numpy()


def poison_array(arr) -> None:
    if isinstance(arr, np.ndarray):
        arr[...] = np.nan
    else:
        arr.fill_(float("nan"))


# -- running one convolution -------------------------------------------------------------
@dataclass
class ConvRun:
    """The outcome of one algorithm on one problem."""
    algo: str
    status: str               # "ok", "mismatch", "not supported", "error"
    check: str = ""           # "exact", "within tolerance (...)", the mismatch text, or the reason
    time_ms: float = float("nan")
    times_ms: list = field(default_factory=list)
    workspace: int = 0

    def as_dict(self) -> dict:
        return dict(algo=self.algo, status=self.status, check=self.check, time_ms=self.time_ms,
                    workspace=self.workspace)


class ConvCase:
    """One convolution problem with inputs on the handle's device, ready to run and check."""

    def __init__(self, handle, spec: ConvSpec, direction="fwd", dtype="float32", layout="NCHW",
                 mode="cross_correlation", math_type="DEFAULT", alpha=1.0, beta=0.0, seed=0,
                 fill="integers", filter_layout=None):
        from .algorithms.problem import ConvProblem
        if direction not in DIRECTIONS:
            raise BadParamError(f"unknown direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
        self.handle, self.spec, self.direction = handle, spec, direction
        self.alpha, self.beta = float(alpha), float(beta)
        self.descs = dict(zip(("x", "w", "conv", "y"), spec.descriptors(dtype, layout, mode, math_type,
                                                                            filter_layout)))
        self.problem = ConvProblem(direction, self.descs["x"], self.descs["w"], self.descs["y"],
                                   self.descs["conv"])
        self.dtype = self.problem.dtype
        rng = np.random.default_rng(seed)
        make = (lambda shape: _fill(shape, self.dtype, rng)) if fill == "integers" else \
            (lambda shape: rng.standard_normal(shape).astype(self.dtype.numpy).astype(np.float64))
        self.host = {"x": make(self.descs["x"].dims), "w": make(self.descs["w"].dims),
                     "y": make(self.descs["y"].dims)}
        self.output = self.problem.output
        w_tensor = self.descs["w"].as_tensor()
        self.arrays = {name: device_array(handle, w_tensor if name == "w" else self.descs[name],
                                          self.host[name]) for name in ("x", "w", "y")}
        self._reference = None

    # -- algorithm choice -------------------------------------------------------------
    def algorithms(self, algo="auto") -> list:
        """The algorithm objects ``algo`` names: auto | heuristic | find | all | an enum name or number."""
        from .algorithms import registry, selection
        text = str(algo).lower()
        if text in ("auto", "heuristic", "find"):
            return [selection.choose(self.handle, self.problem, text)]
        if text == "all":
            return registry.algorithms("conv", self.direction, self.handle.backend_name)
        member = algo_enum(self.direction, algo)
        return [registry.by_enum("conv", self.direction, self.handle.backend_name, member)]

    # -- one call through the public API -------------------------------------------------
    def call(self, algorithm, workspace) -> None:
        import tridnn
        fn = getattr(tridnn, CONV_API[self.direction], None)
        if fn is None:
            raise NotSupportedError(f"tridnn.{CONV_API[self.direction]} is not available in this "
                                    f"version of tridnn")
        d, a = self.descs, self.arrays
        if self.direction == "fwd":
            fn(self.handle, self.alpha, d["x"], a["x"], d["w"], a["w"], d["conv"], algorithm.enum,
               workspace, self.beta, d["y"], a["y"])
        elif self.direction == "bwd_data":
            fn(self.handle, self.alpha, d["w"], a["w"], d["y"], a["y"], d["conv"], algorithm.enum,
               workspace, self.beta, d["x"], a["x"])
        else:
            fn(self.handle, self.alpha, d["x"], a["x"], d["y"], a["y"], d["conv"], algorithm.enum,
               workspace, self.beta, d["w"], a["w"])

    def workspace_for(self, algorithm):
        size = algorithm.workspace_size(self.problem)
        return (self.handle.workspace(size) if size else None), size

    def reset_output(self) -> None:
        """Poison the output when beta == 0 (nothing may be read), else restore its prior values."""
        out = self.arrays[self.output]
        if self.beta == 0:
            poison_array(out)
        elif isinstance(out, np.ndarray):
            out[...] = self.host[self.output]
        else:
            device_array_copy(out, self.host[self.output])

    # -- checking -----------------------------------------------------------------------
    @property
    def reference(self) -> np.ndarray:
        """The float64 reference of the direction's output (before alpha and beta)."""
        if self._reference is None:
            from . import reference
            s, h = self.spec, self.host
            geometry = dict(stride=s.stride, pad_pre=s.pad, pad_post=s.pad_post, dilation=s.dilation,
                            groups=s.groups, mode=self.problem.mode.name.lower())
            if self.direction == "fwd":
                self._reference = reference.conv_forward(h["x"], h["w"], **geometry)
            elif self.direction == "bwd_data":
                self._reference = reference.conv_backward_data(h["y"], h["w"], h["x"].shape, **geometry)
            else:
                self._reference = reference.conv_backward_filter(h["x"], h["y"], h["w"].shape, **geometry)
        return self._reference

    def check(self) -> tuple[bool, str]:
        """(ok, text): exact against the rounded reference, else within the dtype's tolerance."""
        from . import testing
        got = to_host(self.arrays[self.output])
        if np.isnan(got).any():
            bad = int(np.isnan(got).sum())
            return False, f"{bad} of {got.size} output elements not written (NaN)"
        prior = self.host[self.output]
        want = testing.expected(self.reference, self.dtype, self.alpha, self.beta, prior)
        if np.array_equal(got, np.asarray(want, np.float64)):
            return True, "exact"
        exact64 = self.alpha * self.reference + (self.beta * prior if self.beta else 0.0)
        err = float(np.abs(got - exact64).max()) / max(1.0, float(np.abs(exact64).max()))
        try:
            testing.assert_close(got, exact64, self.dtype)
        except AssertionError as exc:
            return False, f"MISMATCH: {exc}"
        return True, f"within tolerance (max normalized error {err:.2g})"

    # -- run, check and time -------------------------------------------------------------
    def run(self, algorithm, repeat: int = 5, check: bool = True) -> ConvRun:
        name = algorithm.name
        reason = algorithm.not_applicable(self.problem)
        if reason is not None:
            return ConvRun(name, "not supported", reason)
        try:
            workspace, size = self.workspace_for(algorithm)
            self.reset_output()
            self.call(algorithm, workspace)
            self.handle.backend.synchronize()
            ok, text = self.check() if check else (True, "not checked")
            times = time_calls(self.handle, lambda: self.call(algorithm, workspace), repeat)
        except NotSupportedError as exc:
            return ConvRun(name, "not supported", str(exc))
        except Exception as exc:  # noqa: BLE001 - a reproducer reports a failing algorithm, it does not die
            return ConvRun(name, "error", describe_error(exc))
        return ConvRun(name, "ok" if ok else "mismatch", text, statistics.median(times) * 1e3,
                       [t * 1e3 for t in times], size)


def describe_error(exc: BaseException) -> str:
    """'BadParamError: message' for tridnn's errors; other exceptions also say where they came from."""
    from .errors import TridnnError
    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, TridnnError):
        import traceback
        frames = traceback.extract_tb(exc.__traceback__)
        inside = [f for f in frames if "/tridnn/" in f.filename.replace("\\", "/")]
        if inside:
            f = inside[-1]
            text += f" (at {f.filename.rsplit('/', 1)[-1]}:{f.lineno})"
    return text


def device_array_copy(arr, values) -> None:
    """arr[...] = values for a torch tensor, through float64 (float32 would round float64 data)."""
    import torch
    arr.copy_(torch.from_numpy(np.ascontiguousarray(values, np.float64)).to(arr.device))


def _fill(shape, dtype, rng) -> np.ndarray:
    """benchdnn-style small integers (exact in every dtype's sums), as float64."""
    from .testing import fill
    return np.asarray(fill(shape, dtype, rng), np.float64)


def time_calls(handle, fn, repeat: int, warmup: int = 1) -> list[float]:
    """Seconds per call, each call synchronized; ``warmup`` untimed calls first."""
    backend = handle.backend
    for _ in range(warmup):
        fn()
    backend.synchronize()
    times = []
    for _ in range(max(1, repeat)):
        start = backend.now()
        fn()
        backend.synchronize()
        times.append(backend.now() - start)
    return times



def conv_command(spec: ConvSpec, direction="fwd", dtype="float32", layout="NCHW", algo="auto",
                 mode="cross_correlation", math_type="DEFAULT", alpha=1.0, beta=0.0,
                 device="cpu", filter_layout=None, backend=None) -> str:
    """The ``tridnn run conv ...`` line that re-runs this problem."""
    parts = ["tridnn", "run", "conv", *spec.flags(), "--dtype", DataType.of(dtype).numpy.name, "--layout", layout,
             "--direction", direction, "--algo", getattr(algo, "name", str(algo))]
    mode_name = getattr(mode, "name", str(mode)).lower()
    if mode_name != "cross_correlation":
        parts += ["--mode", mode_name]
    math_name = getattr(math_type, "name", str(math_type)).upper()
    if math_name != "DEFAULT":
        parts += ["--math-type", math_name]
    if float(alpha) != 1.0:
        parts += ["--alpha", repr(float(alpha))]
    if float(beta) != 0.0:
        parts += ["--beta", repr(float(beta))]
    if filter_layout is not None and filter_layout != ("NHWC" if layout == "NHWC" else "NCHW"):
        parts += ["--filter-layout", filter_layout]
    if device != "cpu":
        parts += ["--device", str(device)]
    if backend == "triton" and device == "cpu":  # the Triton kernels through the interpreter
        parts += ["--backend", "triton"]
    return " ".join(parts)


# -- reproducers for logged API calls ----------------------------------------------------------
def reproducer_for_call(name: str, args: dict):
    """(the ``tridnn run`` line, notes) that re-runs a logged API call, or None when the
    call is not a problem tridnn can re-run (descriptor set-up, tensor ops, ...)."""
    if name in ("conv", "conv_backward_data", "conv_backward_filter"):
        return _functional_conv_reproducer(name, args)
    if "convolution" in name:
        return _conv_call_reproducer(name, args)
    try:
        from .reproduce_layers import layer_reproducer
    except ImportError:
        return None
    return layer_reproducer(name, args)


def _direction_of(name: str):
    if "backward_data" in name:
        return "bwd_data"
    if "backward_filter" in name:
        return "bwd_filter"
    return "fwd" if "forward" in name else None


def _algo_name(direction, algo, fallback="auto") -> str:
    if algo is None:
        return fallback
    if isinstance(algo, str) and algo.lower() in ("auto", "find", "heuristic"):
        return algo.lower()
    return algo_enum(direction, algo).name


def _conv_call_reproducer(name, args):
    direction = _direction_of(name)
    x_desc = args.get("x_desc", args.get("dx_desc"))
    w_desc = args.get("w_desc", args.get("dw_desc"))
    conv_desc = args.get("conv_desc")
    if direction is None or x_desc is None or w_desc is None or conv_desc is None:
        return None
    spec = ConvSpec.from_descriptors(x_desc, w_desc, conv_desc)
    notes = []
    layout = x_desc.format
    if layout == "strided":
        notes.append(f"x has strides {x_desc.strides}; the reproducer uses tridnn.testing's strided view")
    y_desc = args.get("y_desc", args.get("dy_desc"))
    if y_desc is not None and y_desc.format != layout:
        notes.append(f"y is {y_desc.format} while x is {layout}; the reproducer uses {layout} for both")
    if name.startswith("find_"):
        algo = "find"
    else:
        algo = _algo_name(direction, args.get("algo"))
    alpha = args.get("alpha", args.get("alpha1", 1.0))
    beta = args.get("beta", 0.0)
    if name == "convolution_bias_activation_forward":
        notes.append("re-runs the convolution only (alpha1 * conv(x, w)); z, bias and the "
                     "activation are not part of the reproducer")
        beta = 0.0
    handle = args.get("handle")
    command = conv_command(spec, direction, x_desc.dtype, layout, algo, conv_desc.mode,
                           conv_desc.math_type, alpha, beta, getattr(handle, "device", "cpu"),
                           w_desc.format.name, getattr(handle, "backend_name", None))
    return command, notes


def _functional_conv_reproducer(name, args):
    from .api.functional import padding_pairs
    from .arrays import shape_strides_dtype
    from .descriptors import FilterDescriptor, TensorDescriptor
    from .descriptors.convolution import per_dim
    direction = {"conv": "fwd", "conv_backward_data": "bwd_data",
                 "conv_backward_filter": "bwd_filter"}[name]
    if direction == "bwd_data":
        image, x_shape = args["dy"], tuple(args["x_shape"])
        w_shape, w = shape_strides_dtype(args["w"])[0], args["w"]
    else:
        image = args["x"]
        x_shape = tuple(shape_strides_dtype(image)[0])
        w = args.get("w")
        w_shape = tuple(args["w_shape"]) if direction == "bwd_filter" else shape_strides_dtype(w)[0]
    nd = len(x_shape) - 2
    stride = per_dim("stride", args.get("stride", 1), nd, 1)
    dilation = per_dim("dilation", args.get("dilation", 1), nd, 1)
    pre, post = padding_pairs(args.get("padding", 0), nd, x_shape[2:], tuple(w_shape[2:]), stride, dilation)
    spec = ConvSpec(x_shape[0], x_shape[1], w_shape[0], tuple(x_shape[2:]), tuple(w_shape[2:]), stride,
                    pre, post, dilation, args.get("groups", 1))
    image_desc = TensorDescriptor.like(image)
    if w is not None:
        filter_layout = FilterDescriptor.like(w).format.name
    else:
        fmt = args.get("filter_format")
        filter_layout = str(getattr(fmt, "name", fmt)).upper()
    device = str(getattr(image, "device", "cpu"))
    algo = _algo_name(direction, args.get("algo", "auto"))
    math_type = args.get("math_type") or "DEFAULT"
    command = conv_command(spec, direction, image_desc.dtype, image_desc.format, algo,
                           args.get("mode", "cross_correlation"), math_type, 1.0, 0.0,
                           "cpu" if device == "cpu" else device,
                           filter_layout if filter_layout in ("NCHW", "NHWC") else None)
    return command, []
