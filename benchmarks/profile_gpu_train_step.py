"""Where a training step of the converted ResNet-50 spends its time on the GPU.

    PYTHONPATH=src python3 benchmarks/profile_gpu_train_step.py [--batch 64] [--layers tridnn|torch]

Builds the model as examples/ddp_train.py does (bfloat16, channels-last), runs warm-up
steps (compilation, tuning), times plain steps (wall time per step, with a sync), then
profiles two steps with torch.profiler and prints the top kernels by GPU time and the top
operators by host time: a step whose GPU time is far below its wall time is host-bound.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from ddp_train import build_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", default="tridnn", choices=("tridnn", "torch"))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=22)
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    model = build_model("resnet50", args.layers, torch.bfloat16, True, dev, 1000, 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch, 3, 224, 224, device=dev, dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (args.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x).float(), target)
        loss.backward()
        opt.step()

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    print(f"warm-up: {time.perf_counter() - t0:.1f} s for {args.warmup} steps", flush=True)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / args.steps
    print(f"{args.layers}: {wall * 1e3:.1f} ms per step, {args.batch / wall:.0f} images/s", flush=True)

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    gpu_total = sum(e.self_device_time_total for e in events) / 2 / 1e3
    print(f"GPU kernel time per step: {gpu_total:.1f} ms (wall {wall * 1e3:.1f} ms)")
    print(events.table(sort_by="self_cuda_time_total", row_limit=args.top, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60))

    # Python-level host time of one step: which of tridnn's functions the wall time is in
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    step()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top + 10)
    print("=== cProfile of one step (own time)\n" + s.getvalue())


if __name__ == "__main__":
    main()
