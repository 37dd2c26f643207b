"""get's first choice (Triton backend, estimates only) on the benchmark suites, and where it
changes when some algorithms are left out: what a new algorithm's estimate takes over.

Runs no kernel and needs no GPU (``get`` ranks by ``Algorithm.estimate``).

    python benchmarks/get_picks.py --without 122,123,124,132,133
"""
import argparse
import os
import sys

import tridnn
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench"))
import shapes  # noqa: E402

PRECISIONS = [("bfloat16", tridnn.DataType.BFLOAT16, tridnn.MathType.DEFAULT),
              ("float32 FMA", tridnn.DataType.FLOAT, tridnn.MathType.FMA),
              ("float32 TENSOR_OP", tridnn.DataType.FLOAT, tridnn.MathType.TENSOR_OP),
              ("float32 DEFAULT", tridnn.DataType.FLOAT, tridnn.MathType.DEFAULT)]


def ranked(problem, without=frozenset()):
    """(estimate s, name) of the applicable Triton algorithms, best first."""
    out = [(a.estimate(problem), a.name) for a in registry.algorithms("conv", problem.direction, "triton")
           if a.id not in without and a.not_applicable(problem) is None]
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="resnet50,mobilenetv2_dw,dilated")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--without", default="", help="comma-separated registry ids to leave out for the comparison")
    args = ap.parse_args()
    without = frozenset(int(i) for i in args.without.split(",") if i)
    changed = 0
    for suite in args.suites.split(","):
        for p in shapes.SUITES[suite]:
            for label, dtype, math in PRECISIONS:
                cd = tridnn.ConvolutionDescriptor(padding=p["pad"], stride=p["stride"], dilation=p["dilation"],
                                                  groups=p["groups"], math_type=math)
                x = tridnn.TensorDescriptor.nhwc(args.batch, p["C"], *p["spatial"], dtype=dtype)
                w = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype=dtype,
                                            format=tridnn.TensorFormat.NHWC)
                y = x.with_dims(cd.output_dims(x, w))
                for direction in ("fwd", "bwd_data", "bwd_filter"):
                    problem = ConvProblem(direction, x, w, y, cd)
                    now, before = ranked(problem), ranked(problem, without)
                    if not now:
                        continue
                    moved = without and before and now[0][1] != before[0][1]
                    changed += bool(moved)
                    if moved or not without:
                        was = f"  (was {before[0][1]} {before[0][0] * 1e6:.0f} us)" if moved else ""
                        print(f"{suite:15} {p['name']:12} {label:18} {direction:10} {now[0][1]:18} "
                              f"{now[0][0] * 1e6:8.0f} us{was}")
    if without:
        print(f"{changed} picks change")


if __name__ == "__main__":
    main()
