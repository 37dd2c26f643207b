"""The ``tridnn`` command: info, demo, bench, find, cache and run (reproducers).

Each subcommand is a ``cmd_*`` function taking the parsed arguments and returning the
exit status: 0 success, 1 a result that failed its check, 2 bad input (the message
names the bad value). ``main(argv)`` is what the console script calls; tests call it
with a list.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shlex
import sys

from . import __version__
from .errors import BadParamError, TridnnError

EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2


# -- small helpers shared by the subcommands -----------------------------------------------
def human_bytes(n) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def per_dim(text: str, name: str) -> tuple:
    """'1' or '1,2,3' as a tuple of ints."""
    try:
        return tuple(int(v) for v in str(text).split(","))
    except ValueError:
        raise BadParamError(f"--{name} must be an integer or a comma-separated list of "
                            f"integers, got {text!r}") from None


def make_handle(args):
    from .handle import Handle
    kwargs = {}
    if getattr(args, "time_budget", None) is not None:
        kwargs["find_time_budget_s"] = args.time_budget
    return Handle(device=args.device, backend=getattr(args, "backend", None), **kwargs)


def progress(iterable, enabled: bool, **kwargs):
    """A tqdm bar on stderr when tqdm is installed and enabled, else the iterable itself."""
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kwargs)


def _version(module_name):
    try:
        module = __import__(module_name)
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return None
    return getattr(module, "__version__", "unknown")


# -- tridnn info ------------------------------------------------------------------------------
def cmd_info(args) -> int:
    import numpy as np
    from .algorithms import registry
    from .algorithms.find_cache import FindCache, default_path
    out = sys.stdout
    print(f"tridnn {__version__}", file=out)
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}", file=out)
    print(f"numpy {np.__version__}", file=out)
    versions = {name: _version(name) for name in ("ml_dtypes", "torch", "triton")}
    for name, version in versions.items():
        print(f"{name} {version or 'not installed'}", file=out)
    print("\nbackends and devices:", file=out)
    print(f"  numpy   cpu: {cpu_name()} ({os.cpu_count()} logical cores)", file=out)
    for line in cuda_lines(versions["torch"] is not None, versions["triton"] is not None):
        print("  " + line, file=out)
    print("\nregistered convolution algorithms:", file=out)
    for backend in ("numpy", "triton"):
        counts = []
        for direction in ("fwd", "bwd_data", "bwd_filter"):
            names = [a.name for a in registry.algorithms("conv", direction, backend)]
            counts.append(f"{direction} {len(names)}")
        print(f"  {backend:7s} " + ", ".join(counts), file=out)
    path = default_path()
    cache = FindCache(path)
    print(f"\nfind cache: {path}", file=out)
    print(f"  {len(cache.entries())} entries, {human_bytes(cache_file_bytes(path))} on disk", file=out)
    return EXIT_OK


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cuda_lines(have_torch: bool, have_triton: bool) -> list[str]:
    """One line per CUDA device (with torch's cuDNN version), or why there are none."""
    if not have_torch:
        return ["triton  cuda: not available (torch is not installed; pip install 'tridnn[gpu]')"]
    import torch
    if not torch.cuda.is_available():
        return [f"triton  cuda: no CUDA device visible to torch {torch.__version__}"]
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    lines = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        lines.append(f"triton  cuda:{i}: {p.name}, {p.total_memory / 2**30:.0f} GiB, compute "
                     f"capability {p.major}.{p.minor}"
                     + ("" if have_triton else " (triton not installed)"))
    lines.append(f"        CUDA {torch.version.cuda}, cuDNN {cudnn or 'not available'} (torch's, "
                 f"for comparisons)")
    return lines


def cache_file_bytes(path) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        p = f"{path}{suffix}"
        if os.path.exists(p):
            total += os.path.getsize(p)
    return total


# -- tridnn cache ------------------------------------------------------------------------------
def cmd_cache(args) -> int:
    from .algorithms.find_cache import FindCache, default_path
    path = default_path()
    cache = FindCache(path)
    if args.clear:
        before = len(cache.entries())
        cache.clear()
        print(f"cleared {before} entries from {path}")
        return EXIT_OK
    entries = cache.entries()
    print(f"find cache: {path}")
    print(f"entries: {len(entries)}")
    print(f"size: {human_bytes(cache_file_bytes(path))}")
    if args.list and entries:
        from .bench import format_table
        rows = [(algo_name, f"{time_ms:.3f}", human_bytes(memory), key)
                for key, _, algo_name, time_ms, memory, _ in entries]
        print(format_table(("algo", "ms", "workspace", "problem key"), rows))
    return EXIT_OK


# -- tridnn run ---------------------------------------------------------------------------------
def conv_spec_from_args(args):
    """A ConvSpec from a benchdnn problem string or from the size flags (not both)."""
    from .reproduce import ConvSpec
    size_flags = ("n", "c", "d", "h", "w", "k", "t", "r", "s")
    given = [f for f in size_flags if getattr(args, f) is not None]
    if args.problem:
        if given:
            raise BadParamError(f"give sizes either as a problem string or as flags, not both "
                                f"(got {args.problem!r} and --{', --'.join(given)})")
        return ConvSpec.parse(args.problem)
    for name in ("c", "k"):
        if getattr(args, name) is None:
            raise BadParamError(f"--{name} is required (or give a problem string such as "
                                f"mb8ic64ih56oc64kh3ph1)")
    spatial_names = ("d", "h", "w") if args.d is not None else ("h", "w") if args.h is not None else ("w",)
    if all(getattr(args, a) is None for a in spatial_names):
        raise BadParamError("give the input size: --h and --w (2D), --d --h --w (3D) or --w (1D)")
    spatial = _fill_missing([getattr(args, a) for a in spatial_names])
    kernel_names = {1: ("s",), 2: ("r", "s"), 3: ("t", "r", "s")}[len(spatial)]
    extra = [f"--{f}" for f in ("t", "r", "s") if f not in kernel_names and getattr(args, f) is not None]
    if extra:
        raise BadParamError(f"{' '.join(extra)} do not apply to a {len(spatial)}D convolution; its "
                            f"kernel flags are --{', --'.join(kernel_names)}")
    if all(getattr(args, a) is None for a in kernel_names):
        raise BadParamError(f"give the kernel size: --{' and --'.join(kernel_names)}")
    kernel = _fill_missing([getattr(args, a) for a in kernel_names])
    nd = len(spatial)

    def geometry(name, value):
        values = per_dim(value, name)
        if len(values) == 1:
            return values * nd
        if len(values) != nd:
            raise BadParamError(f"--{name} {value} has {len(values)} entries; the convolution has "
                                f"{nd} spatial dims")
        return values
    pad = geometry("pad", args.pad)
    pad_post = geometry("pad-post", args.pad_post) if args.pad_post is not None else pad
    return ConvSpec(args.n if args.n is not None else 1, args.c, args.k, spatial, kernel,
                    geometry("stride", args.stride), pad, pad_post,
                    geometry("dilation", args.dilation), args.groups)


def _fill_missing(values):
    """Missing sizes copy their neighbour (W = H, as benchdnn does)."""
    known = [v for v in values if v is not None]
    out, last = [], known[0]
    for v in values:
        last = v if v is not None else last
        out.append(last)
    return tuple(out)


def cmd_run(args) -> int:
    if args.op == "conv":
        return run_conv(args)
    from .reproduce_layers import run_layer  # pooling, softmax, batch norm, activation
    return run_layer(args)


def run_conv(args) -> int:
    from .bench import format_table
    from .reproduce import ConvCase, conv_command
    spec = conv_spec_from_args(args)
    handle = make_handle(args)
    case = ConvCase(handle, spec, args.direction, args.dtype, args.layout, args.mode,
                    args.math_type, args.alpha, args.beta, seed=args.seed,
                    filter_layout=args.filter_layout)
    problem = case.problem
    print(f"problem  {spec.to_string()}  ({args.direction}, {problem.dtype.numpy.name}, "
          f"{args.layout}, {handle.device}/{handle.backend_name}; {problem.describe()})")
    algorithms = case.algorithms(args.algo)
    results = [case.run(a, repeat=args.repeat, check=not args.no_check) for a in algorithms]
    rows = []
    for r in results:
        tflops = problem.flops / (r.time_ms * 1e-3) / 1e12 if r.status in ("ok", "mismatch") else None
        rows.append((r.algo, r.status, r.check if len(r.check) < 70 else r.check[:67] + "...",
                     "-" if tflops is None else f"{r.time_ms:.3f}",
                     "-" if tflops is None else f"{tflops:.3g}", "-" if tflops is None else human_bytes(r.workspace)))
    print(format_table(("algo", "status", "check", "ms", "TFLOP/s", "workspace"), rows))
    for r in results:
        if r.status == "mismatch" or (r.status != "ok" and len(algorithms) == 1):
            print(f"{r.algo}: {r.status}: {r.check}", file=sys.stderr)
    chosen = args.algo if str(args.algo).lower() in ("all",) else results[0].algo
    print("reproduce: " + conv_command(spec, args.direction, problem.dtype, args.layout,
                                       chosen, args.mode, args.math_type, args.alpha, args.beta,
                                       handle.device, args.filter_layout, handle.backend_name))
    if any(r.status == "mismatch" for r in results):
        return EXIT_MISMATCH
    if len(algorithms) == 1 and results[0].status != "ok":
        return EXIT_ERROR
    return EXIT_OK


# -- tridnn bench -------------------------------------------------------------------------------
def bench_specs(args):
    """(ConvSpec list, label) from --suite/--layers, or one problem string."""
    from . import shapes
    from .reproduce import ConvSpec
    if args.problem:
        specs = [ConvSpec.parse(p) for p in args.problem]
        if args.batch is not None:
            specs = [dataclasses.replace(s, n=args.batch) for s in specs]
        return specs, "problem"
    if args.suite not in shapes.SUITES:
        raise BadParamError(f"unknown suite {args.suite!r}; valid: {', '.join(shapes.SUITES)}")
    layers = shapes.SUITES[args.suite]
    if args.layers:
        wanted = [name.strip() for name in args.layers.split(",") if name.strip()]
        names = {p["name"] for p in layers}
        unknown = [name for name in wanted if name not in names]
        if unknown:
            raise BadParamError(f"unknown layers {unknown} in suite {args.suite}; valid: "
                                f"{', '.join(p['name'] for p in layers)}")
        layers = [p for p in layers if p["name"] in wanted]
    batch = args.batch if args.batch is not None else (1 if args.device == "cpu" else 64)
    return [ConvSpec.from_shape(p, batch) for p in layers], args.suite


def directions_arg(text: str) -> list[str]:
    from .reproduce import DIRECTIONS
    wanted = ["fwd", "bwd_data", "bwd_filter"] if text == "all" else [d.strip() for d in text.split(",")]
    bad = [d for d in wanted if d not in DIRECTIONS]
    if bad:
        raise BadParamError(f"unknown direction {bad[0]!r}; valid: {', '.join(DIRECTIONS)} or all")
    return wanted


def cmd_bench(args) -> int:
    from . import bench, shapes
    specs, label = bench_specs(args)
    if args.compare not in ("torch", "none"):
        raise BadParamError(f"--compare {args.compare!r}: valid: torch, none")
    handle = make_handle(args)
    config = bench.BenchConfig(suite=label, device=handle.device, backend=handle.backend_name,
                               dtype=args.dtype, layout=args.layout,
                               directions=directions_arg(args.direction), algo=args.algo,
                               compare=args.compare, repeat=args.repeat, check=not args.no_check,
                               batch=specs[0].n if specs else 0,
                               command="tridnn " + " ".join(shlex.quote(a) for a in args.argv))
    weights = {p["name"]: p["repeat"] for p in shapes.SUITES.get(label, [])}
    rows = bench.run_bench(handle, specs, config, progress=not args.no_progress, weights=weights)
    print(bench.format_rows(rows, config))
    summary = bench.summarize(rows)
    print(bench.format_summary(summary, config))
    if args.json:
        bench.write_json(args.json, rows, summary, config)
        print(f"wrote {args.json}")
    if args.plot:
        bench.plot(args.plot, rows, summary, config, handle)
        print(f"wrote {args.plot}")
    return EXIT_MISMATCH if any(r.status == "mismatch" for r in rows) else EXIT_OK


# -- tridnn find --------------------------------------------------------------------------------
def cmd_find(args) -> int:
    from .algorithms import selection
    from .algorithms.problem import ConvProblem
    from .bench import format_table
    from .reproduce import ConvSpec
    if args.model:
        from .bench import model_conv_specs
        specs = model_conv_specs(args.model, per_dim(args.input_shape, "input-shape"))
    else:
        specs, _ = bench_specs(args)
    handle = make_handle(args)
    directions = directions_arg(args.direction)
    rows = []
    items = [(s, d) for s in specs for d in directions]
    bar = progress(items, not args.no_progress, desc="find", unit="problem")
    for spec, direction in bar:
        x, w, conv, y = ConvSpec.descriptors(spec, args.dtype, args.layout)
        problem = ConvProblem(direction, x, w, y, conv)
        records = selection.find(handle, problem)
        best = next((r for r in records if r.status.name == "SUCCESS"), None)
        label = spec.name or spec.to_string()
        if best is None:
            rows.append((label, direction, "none", "-", "-"))
        else:
            rows.append((label, direction, best.algo.name, f"{best.time_ms:.3f}", human_bytes(best.memory)))
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(f"{label} {direction}: {rows[-1][2]}")
    print(format_table(("layer", "direction", "winner", "ms", "workspace"), rows))
    print(f"find cache: {handle.find_cache.path} ({len(handle.find_cache.entries())} entries)")
    return EXIT_OK


# -- tridnn demo --------------------------------------------------------------------------------
def cmd_demo(args) -> int:
    from .demo import DemoConfig, run_demo
    config = DemoConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                        momentum=args.momentum, seed=args.seed, device=args.device,
                        algo=args.algo, train_fraction=args.train_fraction,
                        progress=not args.no_progress)
    result = run_demo(config)
    return EXIT_OK if result.test_accuracy > 0 else EXIT_ERROR


# -- argument parsing -----------------------------------------------------------------------------
def _add_problem_options(p, direction_default="fwd"):
    p.add_argument("--device", default="cpu", help="cpu (NumPy, default), cuda or cuda:N (Triton)")
    p.add_argument("--backend", default=None, choices=("numpy", "triton"),
                   help="override the device's backend (triton on the CPU runs the interpreter)")
    p.add_argument("--dtype", default="float32", help="float32 (default), float64, float16, bfloat16")
    p.add_argument("--layout", default="NCHW", help="NCHW (default), NHWC or strided")
    p.add_argument("--direction", default=direction_default,
                   help="fwd, bwd_data, bwd_filter, a comma list, or all")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tridnn", allow_abbrev=False,
        description="tridnn: cuDNN's programming model in Python (NumPy on the CPU, Triton on GPUs).")
    parser.add_argument("--version", action="version", version=f"tridnn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.required = True

    p = sub.add_parser("info", help="version, backends, devices and the find cache", allow_abbrev=False)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", allow_abbrev=False,
                       help="train a small CNN on scikit-learn's 8x8 digits with tridnn primitives")
    p.add_argument("--epochs", type=int, default=None, help="passes over the training set")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None, help="SGD learning rate")
    p.add_argument("--momentum", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    p.add_argument("--algo", default="find", help="how conv algorithms are chosen: find (default), "
                   "auto (find cache, then heuristic) or heuristic")
    p.add_argument("--train-fraction", type=float, default=1.0,
                   help="use this fraction of the training set (for quick runs)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench", allow_abbrev=False,
                       help="benchmark convolution suites or one problem (optionally against torch)")
    p.add_argument("problem", nargs="*", help="benchdnn problem strings (instead of --suite)")
    p.add_argument("--suite", default="resnet50",
                   help="resnet50 (default), mobilenetv2_dw, dilated, conv1d, conv3d, regression")
    p.add_argument("--layers", default=None, help="comma-separated layer names of the suite")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 1 on the CPU, 64 on GPUs)")
    _add_problem_options(p)
    p.add_argument("--algo", default="find",
                   help="find (default: time find's choice), auto, heuristic, all, or an enum name")
    p.add_argument("--compare", default="none", help="torch: also time torch (oneDNN / cuDNN); none")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per candidate (median reported)")
    p.add_argument("--time-budget", type=float, default=1.0, help="seconds find may spend per problem")
    p.add_argument("--no-check", action="store_true", help="skip the check against the float64 reference")
    p.add_argument("--json", nargs="?", const="tridnn-bench.json", default=None, metavar="PATH",
                   help="write rows and summary as JSON (default path: tridnn-bench.json)")
    p.add_argument("--plot", nargs="?", const="tridnn-bench.png", default=None, metavar="PATH",
                   help="write a PNG: per-layer ratio bars and a roofline view (needs matplotlib; "
                        "default path: tridnn-bench.png)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("find", allow_abbrev=False,
                       help="fill the find cache for a suite or a torch model's conv layers")
    p.add_argument("problem", nargs="*", help="benchdnn problem strings (instead of --suite)")
    p.add_argument("--suite", default="resnet50")
    p.add_argument("--layers", default=None)
    p.add_argument("--model", default=None, metavar="MODULE:ATTR",
                   help="a torch.nn.Module (or a function returning one), e.g. torchvision.models:resnet18")
    p.add_argument("--input-shape", default="1,3,224,224", help="the model's input shape (N,C,H,W)")
    p.add_argument("--batch", type=int, default=None)
    _add_problem_options(p, direction_default="all")
    p.add_argument("--time-budget", type=float, default=2.0, help="seconds find may spend per problem")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_find)

    p = sub.add_parser("cache", help="show or clear the find cache", allow_abbrev=False)
    p.add_argument("--clear", action="store_true", help="delete every entry")
    p.add_argument("--list", action="store_true", help="list the entries")
    p.set_defaults(func=cmd_cache)

    p = sub.add_parser("run", allow_abbrev=False,
                       help="run one problem from flags, check it against the float64 reference, time it")
    ops = p.add_subparsers(dest="op", metavar="op")
    ops.required = True
    c = ops.add_parser("conv", allow_abbrev=False, help="a convolution (sizes as flags or a benchdnn string)")
    c.add_argument("problem", nargs="?", help="benchdnn problem string, e.g. mb8ic64ih56oc64kh3ph1")
    for name, what in (("n", "batch"), ("c", "input channels"), ("d", "input depth (3D)"),
                       ("h", "input height (2D, 3D)"), ("w", "input width"), ("k", "output channels"),
                       ("t", "kernel depth"), ("r", "kernel height"), ("s", "kernel width")):
        c.add_argument(f"--{name}", type=int, default=None, help=what)
    c.add_argument("--pad", default="0", help="padding before the data: one value or one per dim")
    c.add_argument("--pad-post", default=None, help="padding after the data (default: --pad)")
    c.add_argument("--stride", default="1")
    c.add_argument("--dilation", default="1", help="1 = dense")
    c.add_argument("--groups", type=int, default=1)
    c.add_argument("--mode", default="cross_correlation", help="cross_correlation or convolution")
    c.add_argument("--math-type", default="DEFAULT")
    c.add_argument("--filter-layout", default=None,
                   help="NCHW (KCRS) or NHWC (KRSC); default: NHWC exactly when --layout is")
    _add_problem_options(c)
    c.add_argument("--algo", default="auto",
                   help="auto (find cache, then heuristic), heuristic, find, all, or an enum name/number")
    c.add_argument("--alpha", type=float, default=1.0)
    c.add_argument("--beta", type=float, default=0.0)
    c.add_argument("--repeat", type=int, default=5, help="timed runs (median reported)")
    c.add_argument("--seed", type=int, default=0, help="seed of the input fill")
    c.add_argument("--no-check", action="store_true")
    c.set_defaults(func=cmd_run)
    try:
        from .reproduce_layers import add_layer_parsers
    except ImportError:
        pass
    else:
        add_layer_parsers(ops, _add_problem_options)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except TridnnError as exc:
        print(f"tridnn {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
