"""Where the host time of one tridnn call goes on the GPU, layer by layer of the stack.

    PYTHONPATH=src python3 benchmarks/profile_gpu_host_overhead.py [--calls 2000] [--out DIR]

A tiny problem (bf16 NHWC 1x64x8x8, 3x3, so each kernel takes a few microseconds and the
GPU idles) is called repeatedly; the host cost per call is the wall time over --calls
calls, with one synchronize at the end. Rows, from the bottom of the stack up:

  stream        torch.cuda.current_stream().cuda_stream (every launch asks for it)
  tma-encode    one TMA descriptor encoded by Triton's driver (cuTensorMapEncodeTiled)
  jit-empty     an empty Triton kernel through kernel[grid](...)
  run-empty     the same kernel through its CompiledKernel launcher (what common.launch does)
  conv-fwd      tridnn.convolution_forward, IMPLICIT_GEMM, same descriptors each call
  functional    tridnn.functional.conv (plan cache by array signature)
  torch-op      torch.ops.tridnn.conv_forward (custom op dispatch + functional)
  F.conv2d      PyTorch's own conv2d (cuDNN) for scale
  act-*         a relu on a 2x8x4x4 tensor: the custom op's Python function called
                directly, tridnn.functional.activation, the op without and with autograd,
                the eager caller (tridnn.torch.ops.fast, what the nn layers use), torch.relu
  bn-*          the same for a training-mode batch norm
  layer *       what a training step calls (examples/ddp_train.py: the model in bfloat16,
                channels_last): tridnn.torch.nn BatchNorm2d, Conv2d(64, 64, 3) and ReLU,
                each forward + backward, and a ResNet-50 bottleneck block (64 channels,
                width 16) forward + backward; torch's own layers beside each

then a cProfile of conv-fwd and of torch-op (top functions by own time), so the next change
can aim at what actually costs. Results go to stdout and, with --out, host_overhead.json.
"""
from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import os
import pstats
import time

import torch
import triton

import tridnn
import tridnn.functional as TF
import tridnn.torch as tt
import tridnn.torch.ops as tops  # registers torch.ops.tridnn


@triton.jit
def empty_kernel(ptr, n):
    pass


def per_call_us(fn, calls: int) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def profile_top(fn, calls: int, top: int, sort="tottime") -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats(sort).print_stats(top)
    return s.getvalue()


def layer_rows(rows, dev, calls, profile=()):
    """The nn layers of a bfloat16 channels_last training step, forward + backward."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_torch_host_overhead import Bottleneck
    bf, cl = torch.bfloat16, torch.channels_last
    x = torch.randn(2, 64, 8, 8, device=dev, dtype=bf).contiguous(memory_format=cl).requires_grad_(True)
    g = torch.randn(2, 64, 8, 8, device=dev, dtype=bf).contiguous(memory_format=cl)

    def both(module):
        theirs = module.to(device=dev, dtype=bf).to(memory_format=cl)
        ours = tt.convert(copy.deepcopy(theirs))
        return ours, theirs

    pairs = {"bn": both(torch.nn.BatchNorm2d(64)), "conv": both(torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)),
             "relu": both(torch.nn.ReLU()), "block": both(Bottleneck(64, 16))}
    for name, (ours, theirs) in pairs.items():
        rows[f"layer {name} fwd+bwd"] = per_call_us(lambda: ours(x).backward(g), calls // 4)
        rows[f"layer {name} fwd+bwd, torch"] = per_call_us(lambda: theirs(x).backward(g), calls // 4)
        if name in profile:
            print(f"=== cProfile layer {name} fwd+bwd (cumulative)\n"
                  + profile_top(lambda: ours(x).backward(g), calls // 4, 40, "cumulative"))
            print(f"=== cProfile layer {name} fwd+bwd (tottime)\n"
                  + profile_top(lambda: ours(x).backward(g), calls // 4, 25))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--top", type=int, default=28)
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile-layers", default="",
                    help="comma-separated nn-layer rows to cProfile (bn, conv, relu, block)")
    ap.add_argument("--layers-only", action="store_true", help="only the nn-layer rows")
    args = ap.parse_args()
    dev = torch.device("cuda")
    if args.layers_only:
        rows = {}
        layer_rows(rows, dev, args.calls, [p for p in args.profile_layers.split(",") if p])
        for name, us in rows.items():
            print(f"  {name:32s} {us:8.1f}")
        return
    cl = torch.channels_last
    n, c, k, hw = 1, 64, 64, 8
    x = torch.randn(n, c, hw, hw, device=dev, dtype=torch.bfloat16).contiguous(memory_format=cl)
    w = torch.randn(k, c, 3, 3, device=dev, dtype=torch.bfloat16).contiguous(memory_format=cl)
    y = torch.empty(n, k, hw, hw, device=dev, dtype=torch.bfloat16).contiguous(memory_format=cl)

    h = tridnn.Handle(device="cuda", find_cache=None)
    xd = tridnn.TensorDescriptor.nhwc(n, c, hw, hw, "bfloat16")
    wd = tridnn.FilterDescriptor((k, c, 3, 3), "bfloat16", tridnn.TensorFormat.NHWC)
    cd = tridnn.ConvolutionDescriptor(padding=1)
    yd = xd.with_dims(cd.output_dims(xd, wd))

    rows = {}
    rows["stream"] = per_call_us(lambda: torch.cuda.current_stream(dev).cuda_stream, args.calls)
    try:
        fill = triton.runtime.driver.active.utils.fill_tma_descriptor
        ptr = x.data_ptr()
        # (ptr, swizzle, elem_size, elem_type (host enum: bf16 = 9), block, shape, strides, padding)
        rows["tma-encode"] = per_call_us(
            lambda: fill(ptr, 128, 2, 9, [64, 64], [n * hw * hw, c], [c, 1], 0), args.calls)
    except Exception as exc:  # the driver's signature is internal: report, do not stop
        print("tma-encode not measured:", type(exc).__name__, exc)
    rows["jit-empty"] = per_call_us(lambda: empty_kernel[(1,)](y, 1), args.calls)
    compiled = empty_kernel[(1,)](y, 1)
    stream = torch.cuda.current_stream(dev).cuda_stream
    rows["run-empty"] = per_call_us(lambda: compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata,
                                                         None, None, None, y, 1), args.calls)

    def conv_fwd():
        tridnn.convolution_forward(h, 1.0, xd, x, wd, w, cd, "IMPLICIT_GEMM", None, 0.0, yd, y)

    rows["conv-fwd"] = per_call_us(conv_fwd, args.calls)
    rows["functional"] = per_call_us(lambda: TF.conv(x, w, None, 1, 1), args.calls)
    op = torch.ops.tridnn.conv_forward
    rows["torch-op"] = per_call_us(lambda: op(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1), args.calls)
    rows["F.conv2d"] = per_call_us(lambda: torch.nn.functional.conv2d(x, w, None, 1, 1), args.calls)
    a = torch.randn(2, 8, 4, 4, device=dev)
    ag = a.clone().requires_grad_(True)
    act = torch.ops.tridnn.activation
    rows["act-fn (op body, no dispatch)"] = per_call_us(lambda: tops.activation._init_fn(a, "relu", 0.0, 1.0),
                                                        args.calls)
    rows["act-functional"] = per_call_us(lambda: TF.activation(a, "relu"), args.calls)
    rows["act-op"] = per_call_us(lambda: act(a, "relu", 0.0, 1.0), args.calls)
    rows["act-op autograd"] = per_call_us(lambda: act(ag, "relu", 0.0, 1.0), args.calls)
    rows["act-fast autograd (ops.fast)"] = per_call_us(lambda: tops.fast.activation(ag, "relu", 0.0, 1.0),
                                                       args.calls)
    rows["act-torch.relu"] = per_call_us(lambda: torch.relu(ag), args.calls)
    bn = torch.ops.tridnn.batch_norm_training
    gamma, beta_ = torch.ones(8, device=dev, requires_grad=True), torch.zeros(8, device=dev, requires_grad=True)
    rmean, rvar = torch.zeros(8, device=dev), torch.ones(8, device=dev)
    bn_call = lambda: bn(ag, gamma, beta_, rmean, rvar, 0.1, 1e-5)  # noqa: E731
    rows["bn-op autograd"] = per_call_us(bn_call, args.calls)
    rows["bn-fast autograd (ops.fast)"] = per_call_us(
        lambda: tops.fast.batch_norm_training(ag, gamma, beta_, rmean, rvar, 0.1, 1e-5), args.calls)
    rows["bn-torch"] = per_call_us(lambda: torch.nn.functional.batch_norm(ag, rmean, rvar, gamma, beta_, True),
                                   args.calls)

    layer_rows(rows, dev, args.calls, [p for p in args.profile_layers.split(",") if p])

    # GPU time of the conv kernel itself, so a row is not mistaken for host time
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(200):
        conv_fwd()
    end.record()
    torch.cuda.synchronize()
    rows["conv-fwd GPU-bound time (us)"] = start.elapsed_time(end) / 200 * 1e3

    prof_conv = profile_top(conv_fwd, args.calls // 4, args.top)
    prof_op = profile_top(lambda: op(x, w, None, [1, 1], [1, 1], [1, 1], [1, 1], 1), args.calls // 4, args.top)
    prof_act = profile_top(lambda: act(ag, "relu", 0.0, 1.0), args.calls // 4, args.top, "cumulative")
    print("=== cProfile act-op autograd (cumulative)\n" + prof_act)
    bn_fast = lambda: tops.fast.batch_norm_training(ag, gamma, beta_, rmean, rvar, 0.1, 1e-5)  # noqa: E731
    print("=== cProfile bn-fast autograd (cumulative)\n" + profile_top(bn_fast, args.calls // 4, args.top, "cumulative"))
    print("=== cProfile conv-fwd\n" + prof_conv)
    print("=== cProfile torch-op\n" + prof_op)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "host_overhead.json"), "w") as f:
            json.dump({"rows_us": rows, "torch": torch.__version__, "triton": triton.__version__,
                       "device": torch.cuda.get_device_name()}, f, indent=1)
    print("host time per call (us), tiny problem, GPU idle:")
    for name, us in rows.items():
        print(f"  {name:32s} {us:8.1f}")


if __name__ == "__main__":
    main()
