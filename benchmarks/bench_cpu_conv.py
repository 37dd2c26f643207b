"""Forward convolution on the CPU: every applicable tridnn algorithm and find's choice
against torch.nn.functional.conv2d (oneDNN), layer by layer, in one run.

Run with the OpenBLAS tuning variables unset, so NumPy's BLAS uses both cores fully:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_cpu_conv.py \
        --suites resnet50 mobilenetv2_dw --layouts NCHW NHWC --batch 8 --json out.json

The machine is shared, so candidates are interleaved (torch, then each algorithm, in
turn, ``--repeats`` rounds) and each time is the median of its rounds; compare the
ratios of one run rather than absolute times across runs. Ratios are tridnn's time
over torch's (below 1.0: tridnn is faster). The measuring code is importable:
``bench_layer`` and ``bench_suite`` return plain dicts.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

import tridnn
from tridnn import shapes
from tridnn.algorithms.problem import ConvProblem


def make_case(p: dict, batch: int, layout: str, seed: int = 0):
    """Descriptors and float32 arrays of one layer: x, w in ``layout`` and a y to write."""
    rng = np.random.default_rng(seed)
    fmt = tridnn.TensorFormat[layout]
    x_desc = tridnn.TensorDescriptor.packed((batch, p["C"], *p["spatial"]), "float32", fmt)
    w_desc = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]), "float32", fmt)
    conv = tridnn.ConvolutionDescriptor(padding=p["pad"], stride=p["stride"], dilation=p["dilation"],
                                        groups=p["groups"], nd=len(p["spatial"]))
    y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))
    arrays = {}
    for name, desc in (("x", x_desc), ("w", w_desc.as_tensor()), ("y", y_desc)):
        flat = np.empty(desc.span, np.float32)
        view = np.lib.stride_tricks.as_strided(flat, desc.dims, [s * 4 for s in desc.strides])
        view[...] = rng.standard_normal(desc.dims, dtype=np.float32)
        arrays[name] = view
    return x_desc, w_desc, conv, y_desc, arrays


def torch_runner(p: dict, arrays: dict, layout: str):
    """A no-argument callable running torch's conv2d (conv1d/3d by rank) on the same data."""
    import torch
    fmt = {3: None, 4: torch.channels_last, 5: torch.channels_last_3d}[arrays["x"].ndim]
    x = torch.from_numpy(np.ascontiguousarray(arrays["x"]))
    w = torch.from_numpy(np.ascontiguousarray(arrays["w"]))
    if layout == "NHWC" and fmt is not None:
        x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    fn = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d,
          5: torch.nn.functional.conv3d}[arrays["x"].ndim]
    kwargs = dict(stride=p["stride"], padding=p["pad"], dilation=p["dilation"], groups=p["groups"])

    def run():
        with torch.no_grad():
            fn(x, w, **kwargs)
    return run


def tridnn_runner(handle, case, algo):
    x_desc, w_desc, conv, y_desc, a = case
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc, algo),
                  np.uint8)

    def run():
        tridnn.convolution_forward(handle, 1.0, x_desc, a["x"], w_desc, a["w"], conv, algo, ws, 0.0,
                                   y_desc, a["y"])
    return run


def interleaved_medians(runners: dict, repeats: int, max_seconds: float = 20.0) -> dict:
    """Median seconds of each runner, timed in turn round after round (one warm-up each)."""
    for fn in runners.values():
        fn()
    times = {name: [] for name in runners}
    start = time.perf_counter()
    for r in range(repeats):
        for name, fn in runners.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
        if r >= 2 and time.perf_counter() - start > max_seconds:
            break
    return {name: statistics.median(ts) for name, ts in times.items()}


def bench_layer(p: dict, batch: int = 8, layout: str = "NCHW", repeats: int = 7, algos: str = "all",
                find_budget_s: float = 2.0, handle=None, slow_factor: float = 6.0) -> dict:
    """One layer: find's choice, every applicable algorithm (algos="all") and torch, in ms.

    Algorithms that find measured over ``slow_factor`` times its best are not re-timed
    (that would only make the run long); their find time is reported in ``find_only_ms``."""
    handle = handle or tridnn.Handle(find_cache=None)
    case = make_case(p, batch, layout)
    x_desc, w_desc, conv, y_desc, arrays = case
    problem = ConvProblem.forward(x_desc, w_desc, conv, y_desc)
    records = tridnn.find_convolution_forward_algorithm_ex(
        handle, x_desc, arrays["x"], w_desc, arrays["w"], conv, y_desc, arrays["y"],
        time_budget_s=find_budget_s)
    usable = [r for r in records if r.status == tridnn.Status.SUCCESS]
    choice = usable[0].algo
    fast = [r.algo for r in usable if r.time_ms <= slow_factor * usable[0].time_ms]
    chosen = fast if algos == "all" else [choice]
    find_only = {r.algo.name: r.time_ms for r in usable if algos == "all" and r.algo not in fast}
    runners = {"torch": torch_runner(p, arrays, layout)}
    runners.update({a.name: tridnn_runner(handle, case, a) for a in chosen})
    medians = interleaved_medians(runners, repeats)
    torch_ms = medians.pop("torch") * 1e3
    algo_ms = {name: t * 1e3 for name, t in medians.items()}
    return dict(layer=p["name"], layout=layout, batch=batch, gflop=problem.flops / 1e9,
                torch_ms=torch_ms, find_choice=choice.name, find_ms=algo_ms[choice.name],
                ratio=algo_ms[choice.name] / torch_ms, algos_ms=algo_ms, find_only_ms=find_only,
                not_supported={r.algo.name: r.reason for r in records if r.status != tridnn.Status.SUCCESS})


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def bench_suite(name: str, batch: int = 8, layouts=("NCHW", "NHWC"), repeats: int = 7, algos: str = "all",
                layers=None, out=sys.stdout) -> dict:
    """Every layer of a suite in each layout (layouts side by side per layer); geomeans."""
    handle = tridnn.Handle(find_cache=None)
    rows = []
    problems = [p for p in shapes.SUITES[name] if layers is None or p["name"] in layers]
    for p in problems:
        for layout in layouts:
            row = bench_layer(p, batch, layout, repeats, algos, handle=handle)
            rows.append(row)
            if out is not None:
                print(format_row(row), file=out, flush=True)
    summary = {layout: geomean(r["ratio"] for r in rows if r["layout"] == layout) for layout in layouts}
    if out is not None:
        for layout, g in summary.items():
            print(f"  {name} {layout}: geomean ratio (find's choice / torch) = {g:.3f}", file=out, flush=True)
    return dict(suite=name, batch=batch, rows=rows, geomean_ratio=summary)


def format_row(row: dict) -> str:
    others = " ".join(f"{k}={v:.2f}" for k, v in sorted(row["algos_ms"].items(), key=lambda kv: kv[1]))
    others += "".join(f" {k}~{v:.0f}(find)" for k, v in sorted(row["find_only_ms"].items(), key=lambda kv: kv[1]))
    gflops = row["gflop"] / (row["find_ms"] / 1e3)
    return (f"{row['layer']:<12} {row['layout']:<4} torch {row['torch_ms']:8.2f} ms  "
            f"find={row['find_choice']:<19} {row['find_ms']:8.2f} ms  ratio {row['ratio']:5.2f}  "
            f"({gflops:5.0f} GFLOP/s)  | {others}")


def environment() -> dict:
    import platform
    import torch
    return dict(date=time.strftime("%Y-%m-%d %H:%M:%S"), python=platform.python_version(),
                numpy=np.__version__, torch=torch.__version__, tridnn=tridnn.__version__,
                torch_threads=torch.get_num_threads(), machine=platform.machine(), cpus=os.cpu_count(),
                openblas_threads=os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                load_average=os.getloadavg()[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", nargs="+", default=["resnet50", "mobilenetv2_dw"], choices=sorted(shapes.SUITES))
    ap.add_argument("--layouts", nargs="+", default=["NCHW", "NHWC"], choices=["NCHW", "NHWC"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--algos", choices=["all", "find"], default="all",
                    help="time every applicable algorithm, or only find's choice, against torch")
    ap.add_argument("--layers", nargs="*", help="only these layer names")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--threads", type=int, help="threads for torch, OpenBLAS and tridnn's block workers "
                    "(default: each library's own default, 2 on these machines)")
    args = ap.parse_args(argv)
    if args.threads and os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        # OpenBLAS reads its thread count once, at import: start again with it set
        os.environ.update(OPENBLAS_NUM_THREADS=str(args.threads), TRIDNN_NUM_THREADS=str(args.threads))
        os.execv(sys.executable, [sys.executable] + sys.argv)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    env = environment()
    print(" ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    results = [bench_suite(s, args.batch, args.layouts, args.repeats, args.algos, args.layers)
               for s in args.suites]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(environment=env, suites=results), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
