"""Host (Python) time per eager call of tridnn.torch's layers, on the CPU, kernels stubbed.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE TRITON_INTERPRET=1 PYTHONPATH=src \
        .venv/bin/python benchmarks/bench_torch_host_overhead.py [--calls 1000] [--rounds 5] [--profile ROW]
        [--count] [--rows SUBSTRING ...]

A CUDA tensor takes tridnn.torch's Triton path; here CPU tensors are sent down that same
path (the calling thread's default "cpu" handle is replaced by
``Handle(device="cpu", backend="triton")``) and every kernel launch
(``tridnn.cuda.common.launch``, which ``jit_run`` and the convolutions call) is a no-op, so
what is timed is the host work: tridnn's Python, torch's autograd and tensor bookkeeping.
What this misses against a GPU: the launch itself (~5-10 us per kernel on the H200's
host, profile_gpu_host_overhead.py's run-empty row), the CUDA caching allocator (a little
dearer than the CPU one), and the current-device guard of ``_on_input_device``.

Rows (tiny tensors, so nothing but host work would show even with kernels):
  relu fwd / fwd+bwd       tridnn.torch.nn.ReLU on a 2x8x4x4 tensor that requires grad
  bn fwd / fwd+bwd         tridnn.torch.nn.BatchNorm2d (training, running stats)
  maxpool fwd+bwd          tridnn.torch.nn.MaxPool2d(3, 2, 1) on 2x8x8x8
  conv fwd / fwd+bwd       tridnn.torch.nn.Conv2d(16, 16, 3, padding=1) channels_last 2x16x8x8
  bf16 bn / conv / block   the real training case (examples/ddp_train.py: the whole model in
                           bfloat16, channels_last): BatchNorm2d with bfloat16 weight, bias and
                           running statistics; the Conv2d above in bfloat16; a ResNet-50
                           bottleneck block (1x1, 3x3, 1x1 convolutions with batch norm and
                           relu, identity shortcut, 2x16x8x8, width 4), forward + backward
  functional relu / conv   tridnn.functional.activation / conv (no torch layer, no autograd)
  functional bn / maxpool  tridnn.functional.batch_norm_training / batch_norm_backward /
                           pool_backward on the tensors of the rows above
  torch *                  PyTorch's own layer for scale
Rounds interleave the rows; each row's figure is the median over rounds (the CPU is shared).

``--count``: per call of each row, the kernel launches (calls of the stubbed launchers)
and the ATen operators torch's profiler records at the top level (its allocations,
empty/empty_strided/new_empty, and copies, copy_/to, counted apart); each is one
dispatcher round trip on a GPU host, a launch or an allocation each.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import time

if __name__ == "__main__":  # run as the script: the interpreter (stubbed launches); imported: left alone
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import tridnn  # noqa: E402
import tridnn.functional as TF  # noqa: E402
import tridnn.torch as tt  # noqa: E402
from tridnn import handle as handle_mod  # noqa: E402
from tridnn.cuda import common  # noqa: E402


LAUNCHES = [0]  # kernel launches through the stubs


def _no_launch(*args, **kwargs):
    LAUNCHES[0] += 1


class _NoKernel:
    """Stands for a @triton.jit kernel launched as ``kernel[grid](...)``: does nothing."""

    def __getitem__(self, grid):
        return _no_launch


def stub_launches():
    """Every Triton launch becomes a no-op (host work only); outputs stay uninitialized.
    ``common.launch`` covers jit_run and the convolutions; pooling launches its kernels
    as ``kernel[grid](...)`` (Triton's own binder: dearer on a GPU host than
    common.launch's cached launcher), so its kernels are swapped for stubs."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    from tridnn.cuda import pooling, tensor_ops
    common.launch = _no_launch
    for module in (pooling, tensor_ops):
        for name, value in list(vars(module).items()):
            if isinstance(value, (JITFunction, InterpretedFunction)) and name.endswith("_kernel"):
                setattr(module, name, _NoKernel())


def triton_default_handle():
    """The "cpu" default handle of this thread runs the Triton backend (the CUDA path)."""
    handle_mod.default_handle("cpu")  # creates the table
    handle_mod._default.handles["cpu"] = tridnn.Handle(device="cpu", backend="triton")


def per_call_us(fn, calls) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def cases():
    torch.manual_seed(0)
    cl = torch.channels_last
    rows = {}

    a = torch.randn(2, 8, 4, 4, requires_grad=True)
    ga = torch.randn(2, 8, 4, 4)
    relu_t = tt.nn.ReLU()
    relu_ref = torch.nn.ReLU()
    rows["relu fwd"] = lambda: relu_t(a)
    rows["relu fwd+bwd"] = lambda: relu_t(a).backward(ga)
    rows["torch relu fwd+bwd"] = lambda: relu_ref(a).backward(ga)

    bn_t = tt.convert(torch.nn.BatchNorm2d(8))
    bn_ref = torch.nn.BatchNorm2d(8)
    rows["bn fwd"] = lambda: bn_t(a)
    rows["bn fwd+bwd"] = lambda: bn_t(a).backward(ga)
    rows["torch bn fwd+bwd"] = lambda: bn_ref(a).backward(ga)

    p = torch.randn(2, 8, 8, 8, requires_grad=True)
    gp = torch.randn(2, 8, 4, 4)
    pool_t = tt.nn.MaxPool2d(3, 2, 1)
    pool_ref = torch.nn.MaxPool2d(3, 2, 1)
    rows["maxpool fwd+bwd"] = lambda: pool_t(p).backward(gp)
    rows["torch maxpool fwd+bwd"] = lambda: pool_ref(p).backward(gp)

    x = torch.randn(2, 16, 8, 8).contiguous(memory_format=cl).requires_grad_(True)
    gx = torch.randn(2, 16, 8, 8).contiguous(memory_format=cl)
    conv_ref = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False).to(memory_format=cl)
    conv_t = tt.convert(torch.nn.Conv2d(16, 16, 3, padding=1, bias=False).to(memory_format=cl))
    rows["conv fwd"] = lambda: conv_t(x)
    rows["conv fwd+bwd"] = lambda: conv_t(x).backward(gx)
    rows["torch conv fwd+bwd"] = lambda: conv_ref(x).backward(gx)

    # the real case: everything bfloat16 and channels_last, as examples/ddp_train.py builds it
    bf = torch.bfloat16
    ab = a.detach().to(bf).contiguous(memory_format=cl).requires_grad_(True)
    gab = ga.to(bf).contiguous(memory_format=cl)
    bnb_t = tt.convert(torch.nn.BatchNorm2d(8)).to(bf)
    bnb_ref = torch.nn.BatchNorm2d(8).to(bf)
    rows["bf16 bn fwd"] = lambda: bnb_t(ab)
    rows["bf16 bn fwd+bwd"] = lambda: bnb_t(ab).backward(gab)
    rows["torch bf16 bn fwd+bwd"] = lambda: bnb_ref(ab).backward(gab)
    xb = x.detach().to(bf).contiguous(memory_format=cl).requires_grad_(True)
    gxb = gx.to(bf).contiguous(memory_format=cl)
    convb_t = tt.convert(torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)).to(bf).to(memory_format=cl)
    convb_ref = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False).to(bf).to(memory_format=cl)
    rows["bf16 conv fwd"] = lambda: convb_t(xb)
    rows["bf16 conv fwd+bwd"] = lambda: convb_t(xb).backward(gxb)
    rows["torch bf16 conv fwd+bwd"] = lambda: convb_ref(xb).backward(gxb)
    block_t = tt.convert(Bottleneck(16, 4)).to(bf).to(memory_format=cl)
    block_ref = Bottleneck(16, 4).to(bf).to(memory_format=cl)
    rows["bf16 block fwd+bwd"] = lambda: block_t(xb).backward(gxb)
    rows["torch bf16 block fwd+bwd"] = lambda: block_ref(xb).backward(gxb)

    a0 = a.detach()
    x0, w0 = x.detach(), conv_t.weight.detach()
    rows["functional relu"] = lambda: TF.activation(a0, "relu")
    rows["functional conv"] = lambda: TF.conv(x0, w0, None, 1, 1)
    g0, b0 = bn_t.weight.detach(), bn_t.bias.detach()
    rm0, rv0 = torch.zeros(8), torch.ones(8)
    _, sm0, si0 = TF.batch_norm_training(a0, g0, b0, rm0, rv0)
    sm0, si0 = sm0.reshape(-1).clone(), si0.reshape(-1).clone()
    rows["functional bn train"] = lambda: TF.batch_norm_training(a0, g0, b0, rm0, rv0)
    rows["functional bn bwd"] = lambda: TF.batch_norm_backward(a0, ga, g0, sm0, si0)
    p0 = p.detach()
    y0 = TF.max_pool(p0, 3, 2, 1)
    rows["functional maxpool bwd"] = lambda: TF.pool_backward(y0, gp, p0, "max", 3, 2, 1)
    return rows


class Bottleneck(torch.nn.Module):
    """ResNet-50's bottleneck block with an identity shortcut (torchvision's layout)."""

    def __init__(self, channels, width):
        super().__init__()
        nn = torch.nn
        self.conv1, self.bn1 = nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, channels, 1, bias=False), nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + x)


def count(rows, calls):
    """Per call: stubbed launches, and the top-level ATen operators (allocations, copies)."""
    from torch.profiler import ProfilerActivity, profile
    alloc = {"aten::empty", "aten::empty_strided", "aten::new_empty", "aten::empty_like"}
    copies = {"aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone"}
    print(f"per call, mean of {calls} calls: launches, top-level ATen ops (allocations, copies)")
    for name, fn in rows.items():
        LAUNCHES[0] = 0
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                fn()
        launches = LAUNCHES[0] / calls
        events = [e for e in prof.events() if e.name.startswith("aten::") and not _under_aten(e)]
        n_alloc = sum(e.name in alloc for e in events) / calls
        n_copy = sum(e.name in copies for e in events) / calls
        print(f"  {name:26s} launches {launches:5.1f}  aten ops {len(events) / calls:6.1f}  "
              f"(allocations {n_alloc:4.1f}, copies {n_copy:4.1f})")


def _under_aten(event):
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", default=None, help="a row name: print its cProfile (by own time)")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--count", action="store_true", help="launches and ATen operators per call, no timing")
    ap.add_argument("--rows", nargs="*", default=None, help="only rows whose name contains one of these")
    args = ap.parse_args()
    torch.set_num_threads(1)
    stub_launches()
    triton_default_handle()
    rows = cases()
    if args.rows:
        rows = {k: v for k, v in rows.items() if any(r in k for r in args.rows)}
    for fn in rows.values():  # first calls: validation, plans, caches
        fn()
        fn()
    if args.count:
        count(rows, min(args.calls, 50))
        return
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.calls):
            rows[args.profile]()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
        return
    times = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            times[name].append(per_call_us(fn, args.calls))
    print(f"load average {os.getloadavg()[0]:.2f}; us per call, median of {args.rounds} rounds "
          f"of {args.calls} calls")
    for name, vals in times.items():
        print(f"  {name:24s} {statistics.median(vals):8.1f}")


if __name__ == "__main__":
    main()
