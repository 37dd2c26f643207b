"""Who is closer to the exact answer, tridnn or cuDNN? Checks chosen ResNet-50 layers at
full size against a float64 reference.

bench_gpu_conv.py compares tridnn with cuDNN, so a relative error of 2e-3 between the
two in bfloat16 (about one rounding of every output element) does not say which one is
off. This script runs get's algorithm and cuDNN on the same bfloat16 inputs and compares
both with the float64 convolution of those inputs (computed on the GPU in float64).

    PYTHONPATH=src python3 benchmarks/check_gpu_conv_accuracy.py [--layers res5_ds:fwd,...]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_gpu_conv as B  # noqa: E402

import tridnn  # noqa: E402
from tridnn import shapes  # noqa: E402
from tridnn.algorithms import registry, selection  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

DEFAULT = "res5_ds:fwd,res2_1x1r:bwd_filter,res4_ds:fwd,res5_1x1a:fwd,res3_3x3:fwd,res2_1x1c:bwd_filter"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default=DEFAULT, help="comma-separated layer:direction")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    handle = tridnn.Handle("cuda", find_cache=None)
    by_name = {p["name"]: p for p in shapes.RESNET50}
    print(f"{'layer':12s} {'direction':10s} {'algorithm':22s} {'tridnn vs f64':>14s} {'cuDNN vs f64':>13s} "
          f"{'tridnn vs cuDNN':>15s}")
    for item in args.layers.split(","):
        name, direction = item.split(":")
        p = by_name[name]
        cd, xd, wd, yd, x, w, dy = B.make(p, args.batch, "bfloat16", tridnn.MathType.DEFAULT, dev)
        cudnn = B.torch_conv(direction, p, x, w, dy)()
        exact = B.torch_conv(direction, p, x.double(), w.double(), dy.double())()
        problem = ConvProblem(direction, xd, wd, yd, cd)
        ranked = [r for r in selection.get(handle, problem) if r.status == tridnn.Status.SUCCESS]
        algo = registry.by_enum("conv", direction, "triton", ranked[0].algo)
        out = torch.full_like(cudnn, float("nan"))
        ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device=dev)
        B.tridnn_call(handle, direction, algo, cd, xd, wd, yd, x, w, dy, out, ws)()
        torch.cuda.synchronize()
        print(f"{name:12s} {direction:10s} {algo.name:22s} {B.rel_err(out, exact):14.2e} "
              f"{B.rel_err(cudnn, exact):13.2e} {B.rel_err(out, cudnn):15.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
