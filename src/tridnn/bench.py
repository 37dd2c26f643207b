"""The runner behind ``tridnn bench``: time convolutions (find's choice, one algorithm, or
all of them) against PyTorch on the same data, and report a table, JSON and a plot.

Candidates are interleaved: each repetition times tridnn once and then torch once, so
a load change on a shared machine hits both and the ratio stays meaningful. Every
result is first checked against the float64 reference (``--no-check`` skips it).
Ratios are tridnn's time over torch's (below 1 means tridnn is faster).
"""
from __future__ import annotations

import datetime
import json
import math
import platform
import statistics
from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import BadParamError, NotSupportedError
from .reproduce import ConvCase, ConvSpec, describe_error, time_calls


@dataclass
class BenchConfig:
    suite: str = "resnet50"
    device: str = "cpu"
    backend: str = "numpy"
    dtype: str = "float32"
    layout: str = "NCHW"
    directions: list = field(default_factory=lambda: ["fwd"])
    algo: str = "find"
    compare: str = "none"
    repeat: int = 5
    check: bool = True
    batch: int = 1
    command: str = ""


@dataclass
class BenchRow:
    layer: str
    problem: str              # benchdnn string
    direction: str
    algo: str
    status: str               # ok | mismatch | not supported | error
    check: str = ""
    ms: float = float("nan")
    tflops: float = float("nan")
    gbps: float = float("nan")    # minimum traffic (read inputs, write output once) per second
    intensity: float = float("nan")  # FLOP per byte of minimum traffic
    workspace: int = 0
    torch_ms: float = float("nan")
    torch_note: str = ""
    ratio: float = float("nan")   # ms / torch_ms
    count: int = 1            # how often the layer occurs in the network
    best: bool = False        # the fastest ok row of its layer and direction


# -- running ---------------------------------------------------------------------------------
def run_bench(handle, specs, config: BenchConfig, progress: bool = True, weights=None) -> list[BenchRow]:
    from .cli import progress as bar_of
    weights = weights or {}
    items = [(s, d) for s in specs for d in config.directions]
    rows: list[BenchRow] = []
    bar = bar_of(items, progress, desc="bench", unit="problem")
    for spec, direction in bar:
        label = spec.name or spec.to_string()
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(f"{label} {direction}")
        rows.extend(bench_problem(handle, spec, direction, config, weights.get(spec.name, 1)))
    _mark_best(rows)
    return rows


def bench_problem(handle, spec: ConvSpec, direction: str, config: BenchConfig, count: int = 1):
    label = spec.name or spec.to_string()
    base = dict(layer=label, problem=spec.to_string(), direction=direction, count=count)
    try:
        case = ConvCase(handle, spec, direction, config.dtype, config.layout)
        algorithms = case.algorithms(config.algo)
    except Exception as exc:  # noqa: BLE001 - reported in the table, the other problems still run
        return [BenchRow(algo=config.algo, status="error", check=describe_error(exc), **base)]
    torch_fn, torch_note = torch_runner(case) if config.compare == "torch" else (None, "")
    problem = case.problem
    nbytes = sum(d.nbytes for d in (problem.x, problem.w.as_tensor(), problem.y))
    rows = []
    for algorithm in algorithms:
        row = BenchRow(algo=algorithm.name, status="ok", torch_note=torch_note, **base)
        rows.append(row)
        reason = algorithm.not_applicable(problem)
        if reason is not None:
            row.status, row.check = "not supported", reason
            continue
        try:
            workspace, row.workspace = case.workspace_for(algorithm)
            case.reset_output()
            case.call(algorithm, workspace)
            handle.backend.synchronize()
            ok, row.check = case.check() if config.check else (True, "not checked")
            row.status = "ok" if ok else "mismatch"
            ours, theirs = interleaved(handle, lambda: case.call(algorithm, workspace), torch_fn,
                                       config.repeat)
        except NotSupportedError as exc:
            row.status, row.check = "not supported", str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - one failing algorithm must not end the benchmark
            row.status, row.check = "error", describe_error(exc)
            continue
        row.ms = statistics.median(ours) * 1e3
        row.tflops = problem.flops / (row.ms * 1e-3) / 1e12
        row.gbps = nbytes / (row.ms * 1e-3) / 1e9
        row.intensity = problem.flops / nbytes if nbytes else float("nan")
        if theirs:
            row.torch_ms = statistics.median(theirs) * 1e3
            row.ratio = row.ms / row.torch_ms
    return rows


def interleaved(handle, ours, theirs, repeat: int):
    """Per-call seconds of ``ours`` and ``theirs``, alternating, after one warm-up each."""
    ours()
    if theirs is not None:
        theirs()
    handle.backend.synchronize()
    a, b = [], []
    for _ in range(max(1, repeat)):
        a += time_calls(handle, ours, 1, warmup=0)
        if theirs is not None:
            b += time_calls(handle, theirs, 1, warmup=0)
    return a, b


def _mark_best(rows) -> None:
    best = {}
    for row in rows:
        if row.status == "ok" and not math.isnan(row.ms):
            key = (row.layer, row.direction)
            if key not in best or row.ms < best[key].ms:
                best[key] = row
    for row in best.values():
        row.best = True


# -- torch on the same data -------------------------------------------------------------------
def as_torch(array):
    """A torch tensor sharing ``array``'s memory (NumPy, bfloat16 included) or the tensor itself."""
    import torch
    if not isinstance(array, np.ndarray):
        return array
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def torch_runner(case):
    """(callable, note): the same convolution in torch on the same arrays, or (None, why not)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    spec = case.spec
    if spec.pad != spec.pad_post:
        return None, "torch has no asymmetric padding"
    if case.problem.mode.name == "CONVOLUTION":
        return None, "torch computes cross-correlation only"
    x, w, y = (as_torch(case.arrays[n]) for n in ("x", "w", "y"))
    stride, pad, dil, g = list(spec.stride), list(spec.pad), list(spec.dilation), spec.groups
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
            3: torch.nn.functional.conv3d}[spec.nd]
    mask = {"bwd_data": [True, False, False], "bwd_filter": [False, True, False]}.get(case.direction)

    def run():
        with torch.no_grad():
            if mask is None:
                return conv(x, w, None, stride, pad, dil, g)
            return torch.ops.aten.convolution_backward(y, x, w, None, stride, pad, dil, False,
                                                       [0] * spec.nd, g, mask)
    try:
        run()
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        return None, f"torch cannot run it: {str(exc).splitlines()[0]}"
    return run, ""


# -- a torch model's convolutions ------------------------------------------------------------------
def model_conv_specs(path: str, input_shape) -> list[ConvSpec]:
    """The distinct Conv1d/2d/3d problems of a torch model ("module:attr"), found by running it once."""
    import importlib
    import torch
    if ":" not in path:
        raise BadParamError(f"--model must be 'module:attr' (e.g. torchvision.models:resnet18), got {path!r}")
    module_name, attr = path.split(":", 1)
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise BadParamError(f"cannot load {path!r}: {exc}") from None
    model = obj if isinstance(obj, torch.nn.Module) else obj()
    if not isinstance(model, torch.nn.Module):
        raise BadParamError(f"{path} gave a {type(model).__name__}, not a torch.nn.Module")
    specs, hooks = {}, []
    conv_types = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)

    def record(name):
        def hook(module, inputs, output):
            x = inputs[0]
            nd = x.dim() - 2
            kernel = tuple(module.kernel_size)
            dilation = tuple(module.dilation)
            pre, post = _torch_padding(module.padding, kernel, dilation, nd)
            spatial = tuple(x.shape[2:])
            if module.padding_mode != "zeros":  # padded explicitly, then a pad-0 convolution
                spatial = tuple(s + a + b for s, a, b in zip(spatial, pre, post))
                pre = post = (0,) * nd
            spec = ConvSpec(int(x.shape[0]), int(x.shape[1]), module.out_channels, spatial, kernel,
                            tuple(module.stride), pre, post, dilation, module.groups, name)
            key = ConvSpec(**{**asdict(spec), "name": ""})
            specs.setdefault(key, spec)
        return hook
    for name, module in model.named_modules():
        if isinstance(module, conv_types):
            hooks.append(module.register_forward_hook(record(name)))
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(tuple(input_shape)))
    finally:
        for h in hooks:
            h.remove()
    if not specs:
        raise BadParamError(f"{path} has no Conv1d/Conv2d/Conv3d layers that ran on an input of "
                            f"shape {tuple(input_shape)}")
    return list(specs.values())


def _torch_padding(padding, kernel, dilation, nd):
    if padding == "valid":
        return (0,) * nd, (0,) * nd
    if padding == "same":  # torch puts the odd extra element after the data
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    pad = tuple(padding)
    return pad, pad


# -- reporting -------------------------------------------------------------------------------------
def format_table(headers, rows) -> str:
    """A plain-text table; columns whose cells all look numeric are right-aligned."""
    rows = [tuple("" if c is None else str(c) for c in row) for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_numeric(r[i]) for r in rows) for i in range(len(headers))]
    def line(cells):
        return "  ".join(c.rjust(w) if num else c.ljust(w)
                         for c, w, num in zip(cells, widths, numeric)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _numeric(text: str) -> bool:
    if text in ("-", ""):
        return True
    try:
        float(text.split()[0])
        return True
    except ValueError:
        return False


def _f(value, fmt) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def format_rows(rows, config: BenchConfig) -> str:
    from .cli import human_bytes
    compare = config.compare == "torch"
    headers = ["layer", "dir", "algo", "status", "ms", "TFLOP/s", "GB/s", "workspace"]
    if compare:
        headers += ["torch ms", "ratio"]
    table = []
    for r in rows:
        cells = [r.layer + (" x%d" % r.count if r.count > 1 else ""), r.direction,
                 r.algo + ("*" if r.best and config.algo == "all" else ""), r.status,
                 _f(r.ms, ".3f"), _f(r.tflops, ".3g"), _f(r.gbps, ".3g"), human_bytes(r.workspace)]
        if compare:
            cells += [_f(r.torch_ms, ".3f"), _f(r.ratio, ".2f")]
        table.append(cells)
    text = format_table(headers, table)
    notes = sorted({f"{r.layer} {r.direction}: {r.status}: {r.check}" for r in rows
                    if r.status in ("mismatch", "error")})
    torch_notes = sorted({f"torch: {r.torch_note}" for r in rows if r.torch_note})
    if config.algo == "all":
        notes.insert(0, "* fastest algorithm of the layer")
    return "\n".join([text] + notes + torch_notes)


def geomean(values) -> float:
    values = [v for v in values if v is not None and not math.isnan(v) and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize(rows) -> dict:
    best = [r for r in rows if r.best]
    compared = [r for r in best if not math.isnan(r.ratio)]
    total = sum(r.ms * r.count for r in best)
    torch_total = sum(r.torch_ms * r.count for r in compared)
    ours_compared = sum(r.ms * r.count for r in compared)
    return dict(
        problems=len({(r.layer, r.direction) for r in rows}),
        ok=len(best),
        mismatches=sum(r.status == "mismatch" for r in rows),
        errors=sum(r.status == "error" for r in rows),
        geomean_ms=geomean(r.ms for r in best),
        geomean_tflops=geomean(r.tflops for r in best),
        geomean_gbps=geomean(r.gbps for r in best),
        geomean_ratio=geomean(r.ratio for r in compared),
        compared=len(compared),
        total_ms=total,
        torch_total_ms=torch_total if compared else float("nan"),
        total_ratio=ours_compared / torch_total if compared and torch_total else float("nan"),
    )


def format_summary(s: dict, config: BenchConfig) -> str:
    lines = [f"{s['ok']} of {s['problems']} problems ran ({config.dtype}, {config.layout}, batch "
             f"{config.batch}, {config.device}/{config.backend}, algo {config.algo}); geomean "
             f"{_f(s['geomean_ms'], '.3f')} ms, {_f(s['geomean_tflops'], '.3g')} TFLOP/s, "
             f"{_f(s['geomean_gbps'], '.3g')} GB/s"]
    if s["compared"]:
        lines.append(f"vs torch over {s['compared']} problems: geomean ratio {s['geomean_ratio']:.2f} "
                     f"(tridnn time / torch time; below 1 is faster); network total (layers x "
                     f"repeats) {s['total_ms']:.2f} ms vs {s['torch_total_ms']:.2f} ms, ratio "
                     f"{s['total_ratio']:.2f}")
    if s["mismatches"] or s["errors"]:
        lines.append(f"{s['mismatches']} mismatches, {s['errors']} errors")
    return "\n".join(lines)


def environment(config: BenchConfig) -> dict:
    from . import __version__
    from .cli import _version, cpu_name
    env = dict(date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
               tridnn=__version__, numpy=np.__version__, torch=_version("torch"),
               triton=_version("triton"), python=platform.python_version(), cpu=cpu_name())
    if config.device.startswith("cuda"):
        import torch
        env["gpu"] = torch.cuda.get_device_name(torch.device(config.device))
    return env


def write_json(path, rows, summary, config: BenchConfig) -> None:
    def clean(value):
        return None if isinstance(value, float) and math.isnan(value) else value
    doc = dict(config=asdict(config), environment=environment(config),
               summary={k: clean(v) for k, v in summary.items()},
               rows=[{k: clean(v) for k, v in asdict(r).items()} for r in rows])
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)


# -- plot -------------------------------------------------------------------------------------------
def measure_ceilings(handle, dtype: str) -> dict:
    """Quickly measured peak compute (a large GEMM) and bandwidth (a large copy) of the device."""
    from .types import DataType
    backend = handle.backend
    if handle.backend_name == "numpy":
        a = np.ones((1024, 1024), np.float32)
        gemm = lambda: a @ a
        src = np.ones(1 << 24, np.float32)
        dst = np.empty_like(src)
        copy = lambda: np.copyto(dst, src)
        flop, moved = 2 * 1024 ** 3, 2 * src.nbytes
    else:
        import torch
        tdtype = getattr(torch, DataType.of(dtype).numpy.name)
        a = torch.ones((8192, 8192), dtype=tdtype, device=handle.device)
        gemm = lambda: a @ a
        src = torch.ones(1 << 28, dtype=torch.float32, device=handle.device)
        dst = torch.empty_like(src)
        copy = lambda: dst.copy_(src)
        flop, moved = 2 * 8192 ** 3, 2 * src.numel() * 4
    t_gemm = min(time_calls(handle, gemm, 5))  # best of 5: a ceiling, not a typical time
    t_copy = min(time_calls(handle, copy, 5))
    backend.synchronize()
    return dict(tflops=flop / t_gemm / 1e12, gbps=moved / t_copy / 1e9)


def plot(path, rows, summary, config: BenchConfig, handle, ceilings=None) -> None:
    """Left: per-layer ratio to torch's time (or TFLOP/s without torch); right: roofline."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BadParamError("--plot needs matplotlib: pip install 'tridnn[plot]'") from None
    best = [r for r in rows if r.best]
    if not best:
        raise BadParamError("nothing ran successfully, so there is nothing to plot")
    ceilings = ceilings or measure_ceilings(handle, config.dtype)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, max(4.5, 0.28 * len(best) + 1.5)),
                                      gridspec_kw=dict(width_ratios=[1.1, 1]))
    labels = [f"{r.layer} {r.direction}" if len(config.directions) > 1 else r.layer for r in best]
    ypos = np.arange(len(best))[::-1]
    compared = config.compare == "torch" and any(not math.isnan(r.ratio) for r in best)
    if compared:
        ratios = [r.ratio if not math.isnan(r.ratio) else 0 for r in best]
        colors = ["tab:green" if v and v <= 1 else "tab:red" for v in ratios]
        left.barh(ypos, ratios, color=colors)
        for y, v in zip(ypos, ratios):
            if v:
                left.text(v, y, f" {v:.2f}", va="center", fontsize=7)
        left.axvline(1.0, color="black", lw=1)
        left.set_xscale("log")
        left.set_xlabel("tridnn time / torch time (log; below 1 = tridnn faster)")
        left.set_title(f"per layer vs torch (geomean {summary['geomean_ratio']:.2f})")
    else:
        left.barh(ypos, [r.tflops for r in best], color="tab:blue")
        left.set_xlabel("TFLOP/s")
        left.set_title(f"per layer (geomean {summary['geomean_tflops']:.3g} TFLOP/s)")
    left.set_yticks(ypos)
    left.set_yticklabels(labels, fontsize=8)
    # roofline: achieved TFLOP/s against arithmetic intensity over minimum traffic
    xs = np.array([r.intensity for r in best])
    lo, hi = max(xs.min() / 3, 1e-2), xs.max() * 3
    grid = np.geomspace(lo, hi, 200)
    roof = np.minimum(ceilings["tflops"], ceilings["gbps"] * 1e9 * grid / 1e12)
    right.loglog(grid, roof, color="gray", lw=2,
                 label=f"measured ceilings: {ceilings['tflops']:.3g} TFLOP/s, {ceilings['gbps']:.3g} GB/s")
    right.scatter(xs, [r.tflops for r in best], color="tab:blue", label="tridnn", zorder=3)
    if compared:
        pts = [(r.intensity, r.tflops * r.ratio) for r in best if not math.isnan(r.ratio)]
        right.scatter(*zip(*pts), facecolors="none", edgecolors="tab:orange", label="torch", zorder=3)
    right.set_xlabel("FLOP per byte of minimum traffic")
    right.set_ylabel("TFLOP/s")
    right.set_title("roofline view")
    right.legend(fontsize=8, loc="lower right")
    right.grid(True, which="both", alpha=0.3)
    device = environment(config).get("gpu") or environment(config)["cpu"]
    fig.suptitle(f"tridnn bench {config.suite}: {config.dtype} {config.layout} batch {config.batch}, "
                 f"algo {config.algo}, {'/'.join(config.directions)}  ({device}, "
                 f"{datetime.date.today()})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
