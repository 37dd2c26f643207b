"""Backward convolution on the CPU: tridnn's backward-data and backward-filter
algorithms against torch's CPU backward (torch.ops.aten.convolution_backward, with
output_mask selecting the one gradient), layer by layer, in one run.

Run with the OpenBLAS tuning variables unset, so NumPy's BLAS uses both cores fully:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_cpu_conv_backward.py \
        --suites resnet50 mobilenetv2_dw --batch 8 --json out.json

The machine is shared, so candidates are interleaved (torch, then each algorithm, in
turn, ``--repeats`` rounds) and each time is the median of its rounds; compare the
ratios of one run, not absolute times across runs. A ratio is tridnn's time over
torch's (below 1.0: tridnn is faster). "best" is the fastest applicable algorithm
(what ``find`` picks), "get" the heuristic's first choice. ``bench_layer`` and
``bench_suite`` are importable and return plain dicts.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

import tridnn
from tridnn import shapes
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem

from bench_cpu_conv import make_case as make_forward_case  # this folder is on sys.path when run as a script

DIRECTIONS = ("bwd_data", "bwd_filter")


def make_case(p: dict, batch: int, layout: str = "NCHW", seed: int = 0):
    """Descriptors and float32 arrays (x, w, dy) of one layer in ``layout``: the forward
    benchmark's case, with its output y as dy."""
    x_desc, w_desc, conv, dy_desc, arrays = make_forward_case(p, batch, layout, seed)
    arrays["dy"] = arrays.pop("y")
    return dict(x_desc=x_desc, w_desc=w_desc, conv=conv, dy_desc=dy_desc, arrays=arrays)


def torch_runner(p: dict, case: dict, direction: str, layout: str = "NCHW"):
    """A callable running torch's CPU backward for one gradient on the same data."""
    import torch
    a = case["arrays"]
    tensors = [torch.from_numpy(np.ascontiguousarray(a[k])) for k in ("dy", "x", "w")]
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(a["x"].ndim)
    if layout == "NHWC" and fmt is not None:
        tensors = [t.contiguous(memory_format=fmt) for t in tensors]
    dy, x, w = tensors
    nd = len(p["spatial"])
    mask = [direction == "bwd_data", direction == "bwd_filter", False]
    args = (list(p["stride"]), list(p["pad"]), list(p["dilation"]), False, [0] * nd, p["groups"], mask)

    def run():
        with torch.no_grad():
            torch.ops.aten.convolution_backward(dy, x, w, None, *args)
    return run


def tridnn_runner(handle, case: dict, direction: str, algo):
    c, a = case, case["arrays"]
    if direction == "bwd_data":
        size = tridnn.get_convolution_backward_data_workspace_size(handle, c["w_desc"], c["dy_desc"], c["conv"],
                                                                    c["x_desc"], algo)
        ws, dx = np.empty(size, np.uint8), np.empty_like(a["x"])

        def run():
            tridnn.convolution_backward_data(handle, 1.0, c["w_desc"], a["w"], c["dy_desc"], a["dy"], c["conv"],
                                             algo, ws, 0.0, c["x_desc"], dx)
    else:
        size = tridnn.get_convolution_backward_filter_workspace_size(handle, c["x_desc"], c["dy_desc"],
                                                                      c["conv"], c["w_desc"], algo)
        ws, dw = np.empty(size, np.uint8), np.empty_like(a["w"])

        def run():
            tridnn.convolution_backward_filter(handle, 1.0, c["x_desc"], a["x"], c["dy_desc"], a["dy"],
                                               c["conv"], algo, ws, 0.0, c["w_desc"], dw)
    return run


def interleaved_times(runners: dict, repeats: int, slow_factor: float = 8.0) -> dict:
    """Seconds of each runner per round, timed in turn round after round (one warm-up each).

    A runner slower than ``slow_factor`` x the fastest after the first round is dropped
    from later rounds (its one time is kept): it cannot win, and it would eat the budget."""
    times = {name: [] for name in runners}
    for fn in runners.values():
        fn()
    active = list(runners)
    for round_ in range(repeats):
        for name in active:
            start = time.perf_counter()
            runners[name]()
            times[name].append(time.perf_counter() - start)
        if round_ == 0:
            fastest = min(times[n][0] for n in active)
            active = [n for n in active if n == "torch" or times[n][0] <= slow_factor * fastest]
    return times


def bench_layer(p: dict, direction: str, batch: int = 8, layout: str = "NCHW", repeats: int = 5,
                algos=None, stat: str = "median") -> dict:
    """Times of torch and every applicable tridnn algorithm (or ``algos``) for one layer;
    ``stat`` ("median" or "min" of the rounds) is what the ratios use."""
    handle = tridnn.Handle(find_cache=None)
    case = make_case(p, batch, layout)
    problem = ConvProblem(direction, case["x_desc"], case["w_desc"], case["dy_desc"], case["conv"])
    candidates = [a for a in registry.algorithms("conv", direction, "numpy")
                  if a.not_applicable(problem) is None and (algos is None or a.name in algos)
                  and a.workspace_size(problem) <= handle.workspace_limit]
    ranked = tridnn.get_convolution_backward_data_algorithm if direction == "bwd_data" else \
        tridnn.get_convolution_backward_filter_algorithm
    if direction == "bwd_data":
        got = ranked(handle, case["w_desc"], case["dy_desc"], case["conv"], case["x_desc"], requested=1)
    else:
        got = ranked(handle, case["x_desc"], case["dy_desc"], case["conv"], case["w_desc"], requested=1)
    runners = {"torch": torch_runner(p, case, direction, layout)}
    for algo in candidates:
        runners[algo.name] = tridnn_runner(handle, case, direction, algo.enum)
    times = interleaved_times(runners, repeats)
    reduce = statistics.median if stat == "median" else min
    medians = {name: reduce(t) for name, t in times.items()}
    torch_s = medians.pop("torch")
    best = min(medians, key=medians.get)
    get_name = got[0].algo.name
    return dict(layer=p["name"], direction=direction, batch=batch, layout=layout, stat=stat,
                torch_ms=torch_s * 1e3,
                algos_ms={k: v * 1e3 for k, v in medians.items()}, best=best,
                best_ratio=medians[best] / torch_s, get=get_name,
                get_ratio=medians.get(get_name, float("nan")) / torch_s, gflop=problem.flops / 1e9)


def geomean(values) -> float:
    values = [v for v in values if v == v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def bench_suite(names, directions=DIRECTIONS, batch=8, layout="NCHW", repeats=5, algos=None,
                progress=True, stat="median") -> dict:
    rows = []
    for direction in directions:
        for name in names:
            for p in shapes.SUITES[name]:
                row = bench_layer(p, direction, batch, layout, repeats, algos, stat)
                row["suite"] = name
                rows.append(row)
                if progress:
                    print(f"{direction:10s} {name:15s} {p['name']:12s} torch {row['torch_ms']:8.2f} ms  "
                          f"best {row['best']:17s} {row['best_ratio']:5.2f}  get {row['get']:17s} "
                          f"{row['get_ratio']:5.2f}", file=sys.stderr, flush=True)
    summary = {}
    for direction in directions:
        mine = [r for r in rows if r["direction"] == direction]
        summary[direction] = dict(geomean_best=geomean(r["best_ratio"] for r in mine),
                                  geomean_get=geomean(r["get_ratio"] for r in mine), layers=len(mine))
        for name in names:
            sub = [r for r in mine if r["suite"] == name]
            summary[f"{direction}/{name}"] = dict(geomean_best=geomean(r["best_ratio"] for r in sub),
                                                  geomean_get=geomean(r["get_ratio"] for r in sub))
    return dict(rows=rows, summary=summary)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", nargs="+", default=["resnet50", "mobilenetv2_dw"],
                        choices=sorted(shapes.SUITES))
    parser.add_argument("--directions", nargs="+", default=list(DIRECTIONS), choices=DIRECTIONS)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--algos", nargs="+", default=None, help="only these algorithm names")
    parser.add_argument("--stat", default="median", choices=["median", "min"],
                        help="how the rounds of each candidate are reduced")
    parser.add_argument("--json", default=None, help="write rows and summary to this file")
    args = parser.parse_args(argv)
    import torch
    result = bench_suite(args.suites, args.directions, args.batch, args.layout, args.repeats, args.algos,
                         stat=args.stat)
    result["meta"] = dict(numpy=np.__version__, torch=torch.__version__, tridnn=tridnn.__version__,
                          torch_threads=torch.get_num_threads(), batch=args.batch, layout=args.layout, stat=args.stat,
                          date=time.strftime("%Y-%m-%d %H:%M:%S"))
    for key, s in result["summary"].items():
        print(f"{key:28s} geomean ratio best {s['geomean_best']:.3f}  get {s['geomean_get']:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
