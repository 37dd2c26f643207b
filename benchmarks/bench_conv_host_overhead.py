"""Host (Python) overhead of convolution_forward per call, on the CPU, kernels stubbed out.

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/bench_conv_host_overhead.py [--calls 2000]

Measures what the API and the launch preparation cost per call for a ResNet-50 layer
(bf16 NHWC 64x64x56x56, 3x3), with the kernel launches replaced by no-ops so only the
host work is timed:

  full   every call validated from scratch (the fast-path table cleared before each call)
  fast   repeated calls with the same descriptor objects (api/conv_fast_path.py)
  bwd    convolution_backward_data (ALGO_1) and convolution_backward_filter (ALGO_1,
         ALGO_0) repeated with the same descriptors, every kernel launch stubbed
  dw     the same for a depthwise layer (dw384_14): DIRECT forward, ALGO_1 backward data,
         ALGO_1 and ALGO_0 backward filter
         (fast, bwd and dw: from the third call on, the fast path replays the dry run's
         launch record, as on a GPU; the stubbed launches record no-ops)
  gluon  gluon_conv.launch_forward / launch_backward_data alone (dgrad s2: the fused
         phases): preparing every call, or answered by its launch record
  api gluon fwd / dgrad  convolution_forward / _backward_data down the Hopper path (the
         fast path replaying the Gluon launch record)

for the triton backend (IMPLICIT_GEMM; ``launch`` stubbed) and, for the validation share
alone, the numpy backend (algorithm.run stubbed). It also times the per-launch key of
``cuda.common.launch``: the full specialization key over every argument versus the
precomputed static key (alignment checks only). Candidates are interleaved over
--rounds rounds and the median is reported, as the CPU is shared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tridnn  # noqa: E402


def per_call_us(fn, calls, before=None) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        if before is not None:
            before()
        fn()
    return (time.perf_counter() - start) / calls * 1e6


HANDLES: list = []  # the "full" cases' handles: clear_table forgets their validated calls


def clear_table():
    for h in HANDLES:
        h.conv_calls = None


def bf16_layer(hw=56, stride=1):
    """A ResNet-style bf16 NHWC 3x3 layer, 64 -> 64 channels, batch 64: the descriptors
    (x, w, conv, y) and zero channels-last CPU tensors of their shapes."""
    xd = tridnn.TensorDescriptor.nhwc(64, 64, hw, hw, "bfloat16")
    wd = tridnn.FilterDescriptor((64, 64, 3, 3), "bfloat16", tridnn.TensorFormat.NHWC)
    cd = tridnn.ConvolutionDescriptor(padding=1, stride=stride)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    x, w, y = (torch.zeros(d.dims, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
               for d in (xd, wd.as_tensor(), yd))
    return xd, wd, cd, yd, x, w, y


def stub_every_launch():
    """Every tridnn.cuda module's ``launch`` (common.launch, imported by name) a no-op:
    host work only, whichever kernels a path launches. In a dry run (launch_record) the
    stub keeps a no-op launch, so repeated calls replay as they would on a GPU."""
    import importlib
    import pkgutil

    import tridnn.cuda as cuda
    from tridnn.cuda import common, launch_record

    def stub(*args, **kwargs):
        recorder = launch_record.active()
        if recorder is not None:
            recorder.add(lambda: None, ())
    real = common.launch
    for info in pkgutil.iter_modules(cuda.__path__):
        try:
            module = importlib.import_module(f"tridnn.cuda.{info.name}")
        except ImportError:  # (a Triton without Gluon)
            continue
        if getattr(module, "launch", None) is real:
            module.launch = stub
    common.launch = stub


def triton_case():
    stub_every_launch()  # host work only (this layer takes conv_tma's path)
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    HANDLES.append(h)
    xd, wd, cd, yd, x, w, y = bf16_layer()
    return lambda: tridnn.convolution_forward(h, 1.0, xd, x, wd, w, cd, "IMPLICIT_GEMM", None, 0.0, yd, y)


def triton_backward_case(direction, algo):
    """convolution_backward_data / _filter on the forward case's layer, same descriptors every
    call (the fast path), the algorithm's workspace, every launch stubbed."""
    stub_every_launch()
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    xd, wd, cd, yd, x, w, y = bf16_layer()
    if direction == "bwd_data":
        size = tridnn.get_convolution_backward_data_workspace_size(h, wd, yd, cd, xd, algo)
        ws = torch.empty(size, dtype=torch.uint8) if size else None
        return lambda: tridnn.convolution_backward_data(h, 1.0, wd, w, yd, y, cd, algo, ws, 0.0, xd, x)
    size = tridnn.get_convolution_backward_filter_workspace_size(h, xd, yd, cd, wd, algo)
    ws = torch.empty(size, dtype=torch.uint8) if size else None
    return lambda: tridnn.convolution_backward_filter(h, 1.0, xd, x, yd, y, cd, algo, ws, 0.0, wd, w)


def depthwise_case(direction, algo):
    """A MobileNetV2 depthwise layer (dw384_14: bf16 NHWC 64x384x14x14, 3x3, groups 384)
    through the fast path, same descriptors every call, every launch stubbed."""
    stub_every_launch()
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    xd = tridnn.TensorDescriptor.nhwc(64, 384, 14, 14, "bfloat16")
    wd = tridnn.FilterDescriptor((384, 1, 3, 3), "bfloat16", tridnn.TensorFormat.NHWC)
    cd = tridnn.ConvolutionDescriptor(padding=1, groups=384)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    x, w, y = (torch.zeros(d.dims, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
               for d in (xd, wd.as_tensor(), yd))
    size = {"fwd": lambda: tridnn.get_convolution_forward_workspace_size(h, xd, wd, cd, yd, algo),
            "bwd_data": lambda: tridnn.get_convolution_backward_data_workspace_size(h, wd, yd, cd, xd, algo),
            "bwd_filter": lambda: tridnn.get_convolution_backward_filter_workspace_size(h, xd, yd, cd, wd, algo)}
    ws = torch.empty(size[direction](), dtype=torch.uint8)
    if direction == "fwd":
        return lambda: tridnn.convolution_forward(h, 1.0, xd, x, wd, w, cd, algo, ws, 0.0, yd, y)
    if direction == "bwd_data":
        return lambda: tridnn.convolution_backward_data(h, 1.0, wd, w, yd, y, cd, algo, ws, 0.0, xd, x)
    return lambda: tridnn.convolution_backward_filter(h, 1.0, xd, x, yd, y, cd, algo, ws, 0.0, wd, w)


def numpy_case():
    from tridnn.algorithms import registry
    from tridnn.types import ConvFwdAlgo
    algo = registry.by_enum("conv", "fwd", "numpy", ConvFwdAlgo.IMPLICIT_GEMM)
    algo.run = lambda *args, **kwargs: None  # validation only
    h = tridnn.Handle(find_cache=None)
    HANDLES.append(h)
    xd = tridnn.TensorDescriptor.nhwc(64, 64, 56, 56, "float32")
    wd = tridnn.FilterDescriptor((64, 64, 3, 3), "float32", tridnn.TensorFormat.NHWC)
    cd = tridnn.ConvolutionDescriptor(padding=1)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    x = np.zeros(xd.span, np.float32)
    w = np.zeros(wd.as_tensor().span, np.float32)
    y = np.zeros(yd.span, np.float32)
    as_view = lambda a, d: np.lib.stride_tricks.as_strided(a, d.dims, [s * 4 for s in d.strides])
    xv, wv, yv = as_view(x, xd), as_view(w, wd.as_tensor()), as_view(y, yd)
    ws = h.workspace(tridnn.get_convolution_forward_workspace_size(h, xd, wd, cd, yd, "IMPLICIT_GEMM"))
    return lambda: tridnn.convolution_forward(h, 1.0, xd, xv, wd, wv, cd, "IMPLICIT_GEMM", ws, 0.0, yd, yv)


def gluon_case(direction, stride=1):
    """gluon_conv.launch_forward / launch_backward_data (the Hopper paths of IMPLICIT_GEMM and
    ALGO_1; stride 2: the fused phases) on CPU tensors with the launches stubbed (and the
    turned filter: one fixed tensor, its kernel's host cost is common.launch's): (preparing
    every call, the records cleared before each; a repeated call answered by its launch
    record). On the CPU each prepare builds new descriptors (the GPU's are cached per
    address), so the first figure is above the GPU host's share."""
    from tridnn.algorithms.problem import ConvProblem
    from tridnn.cuda import filter_turn
    from tridnn.cuda import gluon_conv as gc
    gc.launch = lambda *args, **kwargs: None  # host work only
    turned = torch.zeros(64, 9 * 64, dtype=torch.bfloat16)
    filter_turn.turned_filter = lambda w, flip=True, order=None, out=None: turned
    filter_turn.bound_turn = lambda *args, **kwargs: None  # (on the GPU a record replays the turn bound)
    xd, wd, cd, yd, x, w, y = bf16_layer(stride=stride)
    problem = ConvProblem(direction, xd, wd, yd, cd)
    cfg = dict(gc.PICKS_NARROW[0], GLUON=True)
    if direction == "fwd":
        fn = lambda: gc.launch_forward(problem, x, w, y, 1.0, 0.0, cfg)
    else:
        fn = lambda: gc.launch_backward_data(problem, y, w, x, 1.0, 0.0, cfg)
    assert fn()
    return fn, gc._RECORDS.clear


def gluon_api_case(direction="fwd"):
    """tridnn.convolution_forward (or _backward_data) down the Hopper path (a stand-in Hopper
    on the CPU: the Gluon config the tuner's only candidate, its launch and the filter's turn
    stubbed): the API's fast path, which from the second repeat on replays the algorithm's
    Gluon launch record (Algorithm.replay). Its own problem (64x64x28x28), as the tuner's
    pick is kept per problem across handles."""
    from tridnn.cuda import conv_bwd_data_implicit_gemm, conv_implicit_gemm, conv_tma, filter_turn
    from tridnn.cuda import gluon_conv as gc
    gc.launch = lambda *args, **kwargs: None  # host work only
    gc._hopper = lambda device: True
    conv_tma.sm_count = lambda device: 132
    conv_tma.hardware_ok = lambda t: True
    turned = torch.zeros(64, 9 * 64, dtype=torch.bfloat16)
    filter_turn.turned_filter = lambda w, flip=True, order=None, out=None: turned
    filter_turn.bound_turn = lambda *args, **kwargs: None
    cfg = dict(gc.PICKS_MEDIUM[0], GLUON=True)
    conv_implicit_gemm.tma_forward_candidates = lambda *args, **kwargs: [cfg]
    conv_bwd_data_implicit_gemm.tma_candidates = lambda *args, **kwargs: [cfg]
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    xd, wd, cd, yd, x, w, y = bf16_layer(hw=28)
    if direction == "fwd":
        fn = lambda: tridnn.convolution_forward(h, 1.0, xd, x, wd, w, cd, "IMPLICIT_GEMM", None, 0.0, yd, y)
    else:
        fn = lambda: tridnn.convolution_backward_data(h, 1.0, wd, w, yd, y, cd, "ALGO_1", None, 0.0, xd, x)
    gc._RECORDS.clear()
    for _ in range(3):  # the full path, the first repeat (which keeps the replay), a replay
        fn()
    assert len(gc._RECORDS) == 1, "the Gluon launch record was not made"
    return fn


def launch_key_case():
    from tridnn.cuda.common import _spec_key
    t = torch.zeros(16)
    args = (t,) * 8 + tuple(range(50)) + (1.0, 0.0, 1.0, 0.0, 1.0, 3)
    consts = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=1, FLAT=False, PRECOMP=False,
                  FLIP=False, PREC="ieee", ACT=-1, HAS_BIAS=False, HAS_Z=False, BETA_ZERO=True, INT64=False)
    options = dict(num_warps=8, num_stages=3)
    static = (tuple(range(50)), tuple(consts.items()), tuple(options.items()))
    full = lambda: (None, _spec_key(args), tuple(consts.items()), tuple(options.items()))
    fast = lambda: (None, static, tuple(a.data_ptr() % 16 == 0 for a in args[:8]))
    return full, fast


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    tri, npy = triton_case(), numpy_case()
    key_full, key_fast = launch_key_case()
    for fn in (tri, npy):
        fn()
    results = {k: [] for k in ("triton full", "triton fast", "numpy full", "numpy fast",
                               "launch key full", "launch key static")}
    for _ in range(args.rounds):
        results["triton full"].append(per_call_us(tri, args.calls, clear_table))
        results["triton fast"].append(per_call_us(tri, args.calls))
        results["numpy full"].append(per_call_us(npy, args.calls, clear_table))
        results["numpy fast"].append(per_call_us(npy, args.calls))
        results["launch key full"].append(per_call_us(key_full, args.calls * 5))
        results["launch key static"].append(per_call_us(key_fast, args.calls * 5))
    backward = {"triton fast bwd_data ALGO_1": triton_backward_case("bwd_data", "ALGO_1"),
                "triton fast bwd_filter ALGO_1": triton_backward_case("bwd_filter", "ALGO_1"),
                "triton fast bwd_filter ALGO_0": triton_backward_case("bwd_filter", "ALGO_0")}
    backward.update({f"triton fast dw {d} {a}": depthwise_case(d, a) for d, a in (
        ("fwd", "DIRECT"), ("bwd_data", "ALGO_1"), ("bwd_filter", "ALGO_1"), ("bwd_filter", "ALGO_0"))})
    for name, fn in backward.items():
        fn()
        results[name] = [per_call_us(fn, args.calls) for _ in range(args.rounds)]
    # the Gluon rows last: their stand-in Hopper (patched module functions) stays patched
    gluon = {"gluon fwd": gluon_case("fwd"), "gluon dgrad": gluon_case("bwd_data"),
             "gluon dgrad s2": gluon_case("bwd_data", stride=2)}
    api_gluon = {"api gluon fwd": gluon_api_case("fwd"), "api gluon dgrad": gluon_api_case("bwd_data")}
    results.update({f"{name} {how}": [] for name in gluon for how in ("prepare", "record")})
    results.update({name: [] for name in api_gluon})
    for _ in range(args.rounds):
        for name, (fn, clear_records) in gluon.items():
            results[f"{name} prepare"].append(per_call_us(fn, args.calls, clear_records))
            results[f"{name} record"].append(per_call_us(fn, args.calls))
        for name, fn in api_gluon.items():
            results[name].append(per_call_us(fn, args.calls))
    clear_cost = statistics.median(per_call_us(clear_table, args.calls) for _ in range(args.rounds))
    print(f"{'case':<30} {'us/call (median of rounds)':>28}")
    for name, vals in results.items():
        med = statistics.median(vals) - (clear_cost if name.endswith("full") and "key" not in name else 0.0)
        print(f"{name:<30} {med:>28.1f}")


if __name__ == "__main__":
    main()
