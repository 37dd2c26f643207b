"""Data-parallel training of a ResNet whose layers compute with tridnn (torch DDP).

The model is written with torch.nn (torchvision's ResNet layout), converted in place
with ``tridnn.torch.convert`` (convolutions, batch norms, ReLUs and poolings become
tridnn custom ops), wrapped in DistributedDataParallel and trained with SGD on
synthetic images; every rank prints its images/s and rank 0 the total.

    # 2 CPU processes (gloo), a small ResNet:
    torchrun --standalone --nproc_per_node=2 examples/ddp_train.py --device cpu --model tiny
    # 2 GPUs (NCCL), ResNet-50 in bfloat16 channels_last, tridnn's layers vs PyTorch's own:
    torchrun --standalone --nproc_per_node=2 examples/ddp_train.py --device cuda \\
        --model resnet50 --dtype bfloat16 --channels-last --batch-size 64 --compare torch

Without torchrun the script trains in one process without DDP. Each rank uses
``cuda:<LOCAL_RANK>`` and makes it the current device (tridnn's Triton kernels launch
on the current device and stream, as the rest of PyTorch does); tridnn's default
handle is per thread and device, so every rank keeps its own handle, workspace and
plans. ``--find`` benchmarks tridnn's convolution algorithms for every layer before
training (each rank on its own device; all ranks write the shared sqlite find cache
at once, which its WAL journal and busy timeout make safe); training then reads the
winners from the cache (``algo="auto"``).

``--cuda-graph`` (GPU) captures a whole training step (forward, backward with DDP's
all-reduce, SGD) once after the warm-up and replays it: the host then launches one graph
per step instead of some 500 kernels, which removes the per-call Python cost of both
variants' layers from the measurement (both are graphed alike). The model, DDP and the
warm-up run on a side stream, as CUDA-graph capture requires.

Both variants start from the same weights and data; with ``--compare torch`` they are
timed in alternating rounds so machine noise hits both alike, and the report gives
the median round. Everything but the layers (the Linear head, the loss, SGD, DDP's
all-reduce) is PyTorch's in both variants.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as TF
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import tridnn.torch as tt
from tridnn.api import functional as F
from tridnn.handle import default_handle
from tridnn.types import TensorFormat

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


# -- the model: torchvision's ResNet, written out with torch.nn ----------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        width = planes
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, block, blocks, width=64, num_classes=1000):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = [self._stage(block, width * 2 ** i, n, 1 if i == 0 else 2) for i, n in enumerate(blocks)]
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(self.inplanes, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(self, block, planes, n, stride):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, n)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


MODELS = {
    "tiny": lambda classes: ResNet(BasicBlock, [1, 1, 1, 1], width=8, num_classes=classes),
    "resnet18": lambda classes: ResNet(BasicBlock, [2, 2, 2, 2], num_classes=classes),
    "resnet34": lambda classes: ResNet(BasicBlock, [3, 4, 6, 3], num_classes=classes),
    "resnet50": lambda classes: ResNet(Bottleneck, [3, 4, 6, 3], num_classes=classes),
}


def build_model(name, layers, dtype, channels_last, device, num_classes, seed):
    """The same initial weights on every rank and for both variants (DDP would broadcast
    rank 0's weights anyway; the seed makes the two variants comparable)."""
    torch.manual_seed(seed)
    model = MODELS[name](num_classes)
    if layers == "tridnn":
        tt.convert(model)
    model = model.to(device=device, dtype=dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


# -- distributed setup ------------------------------------------------------------------------------
def setup_distributed(device_kind):
    """(rank, world size, device); initializes the process group when run by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        if not torch.cuda.is_available():
            sys.exit("--device cuda: torch sees no CUDA GPU")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # tridnn's Triton launches use the current device
    else:
        device = torch.device("cpu")
    if "WORLD_SIZE" in os.environ:
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off (see docs/performance.md)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                device_id=device if device.type == "cuda" else None)
    return rank, world, device


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def stream_context(stream):
    """Run on ``stream`` (CUDA-graph mode's side stream), or as is when it is None."""
    if stream is None:
        return contextlib.nullcontext()
    stream.wait_stream(torch.cuda.current_stream(stream.device))
    return torch.cuda.stream(stream)


# -- tridnn's find before training --------------------------------------------------------------------
def find_conv_algorithms(model, sample, budget_s):
    """Benchmark tridnn's algorithms for every convolution the model runs (forward, backward
    data, backward filter, with the layouts training uses) and store the winners in the find
    cache, where training's ``algo="auto"`` picks them up. Returns the number of problems."""
    calls = []

    def record(module, inputs, output):
        calls.append((module, inputs[0].detach(), output.detach()))

    hooks = [m.register_forward_hook(record) for m in model.modules() if isinstance(m, tt.nn.Conv2d)]
    was_training = model.training
    model.eval()  # the same convolutions, without touching the running statistics
    try:
        with torch.no_grad():
            model(sample)
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    device = str(sample.device) if sample.device.type == "cuda" else "cpu"
    handle = default_handle(device)
    saved_budget, handle.find_time_budget_s = handle.find_time_budget_s, budget_s
    seen = set()
    try:
        for m, x, y in calls:
            nd = x.dim() - 2
            stride, dilation = list(m.stride), list(m.dilation)
            pre, post = F.padding_pairs(m.padding, nd, tuple(x.shape[2:]), tuple(m.weight.shape[2:]),
                                        tuple(stride), tuple(dilation))
            padding = tuple(zip(pre, post))
            key = (tuple(x.shape), x.stride(), tuple(m.weight.shape), m.weight.stride(), tuple(stride),
                   padding, tuple(dilation), m.groups)
            if key in seen:
                continue
            seen.add(key)
            # the incoming gradient has the layout tridnn's ops give their outputs (a 1x1 map,
            # both NCHW and NHWC, is NCHW), so the backward problems match training's exactly
            nhwc = F.output_format(tuple(y.shape), y.stride()) == TensorFormat.NHWC
            dy = torch.zeros(y.shape, dtype=y.dtype, device=y.device).contiguous(
                memory_format=torch.channels_last if nhwc else torch.contiguous_format)
            w = m.weight.detach()
            F.conv(x, w, None, stride, padding, dilation, m.groups, algo="find")
            if x.data_ptr() != sample.data_ptr():  # the images themselves need no gradient
                F.conv_backward_data(dy, w, list(x.shape), stride, padding, dilation, m.groups, algo="find")
            F.conv_backward_filter(x, dy, list(w.shape), stride, padding, dilation, m.groups, algo="find",
                                   filter_format="NCHW")
    finally:
        handle.find_time_budget_s = saved_budget
    return len(seen)


# -- training and timing ----------------------------------------------------------------------------
class Variant:
    """One model (tridnn's layers or PyTorch's) with its DDP wrapper, optimizer and data."""

    def __init__(self, layers, args, rank, world, device):
        self.layers = layers
        self.device = device
        dtype = DTYPES[args.dtype]
        # CUDA-graph capture needs the model, DDP and the warm-up on a side stream
        self.stream = torch.cuda.Stream(device) if args.cuda_graph else None
        with stream_context(self.stream):
            model = build_model(args.model, layers, dtype, args.channels_last, device, args.num_classes,
                                args.seed)
            self.module = model
            if dist.is_initialized():
                self.model = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
            else:
                self.model = model
        self.graph = None
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        gen = torch.Generator().manual_seed(args.seed * 1000 + rank)  # each rank its own shard
        fmt = torch.channels_last if args.channels_last else torch.contiguous_format
        self.batches = []
        for _ in range(args.distinct_batches):
            x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
            y = torch.randint(0, args.num_classes, (args.batch_size,), generator=gen)
            self.batches.append((x.to(device=device, dtype=dtype).contiguous(memory_format=fmt),
                                 y.to(device)))
        self.step_count = 0
        self.losses = []

    def step(self):
        x, y = self.batches[self.step_count % len(self.batches)]
        self.step_count += 1
        if self.graph is not None:
            self.static_x.copy_(x)
            self.static_y.copy_(y)
            self.graph.replay()
            return self.static_loss
        with stream_context(self.stream):
            loss = self._eager_step(x, y)
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
        return loss

    def _eager_step(self, x, y):
        loss = TF.cross_entropy(self.model(x).float(), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss

    def capture(self):
        """Record one training step as a CUDA graph (after the warm-up: every kernel
        compiled and tuned, DDP's buckets built, SGD's momentum allocated). Gradients
        live in the graph's memory pool and are overwritten by each replay."""
        synchronize(self.device)
        x, y = self.batches[0]
        self.static_x, self.static_y = x.clone(), y.clone()
        self.graph = torch.cuda.CUDAGraph()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph, stream=self.stream):
            loss = TF.cross_entropy(self.model(self.static_x).float(), self.static_y)
            loss.backward()
            self.optimizer.step()
        self.static_loss = loss
        synchronize(self.device)

    def timed_steps(self, n):
        """Seconds for ``n`` training steps, from an idle device to an idle device."""
        synchronize(self.device)
        start = time.perf_counter()
        for _ in range(n):
            loss = self.step()
        synchronize(self.device)
        elapsed = time.perf_counter() - start
        self.losses.append(float(loss.detach()))
        return elapsed

    def replica_spread(self):
        """Largest difference of any parameter between ranks (0 when DDP kept them in sync)."""
        if not dist.is_initialized():
            return 0.0
        flat = torch.cat([p.detach().reshape(-1).double() for p in self.module.parameters()])
        hi, lo = flat.clone(), flat.clone()
        dist.all_reduce(hi, dist.ReduceOp.MAX)
        dist.all_reduce(lo, dist.ReduceOp.MIN)
        return float((hi - lo).abs().max())


def gather_floats(values, device):
    """Every rank's list of floats, on every rank."""
    if not dist.is_initialized():
        return [list(values)]
    t = torch.tensor(values, dtype=torch.float64, device=device)
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--model", choices=sorted(MODELS), default="tiny")
    p.add_argument("--layers", choices=("tridnn", "torch"), default="tridnn",
                   help="whose layers compute (default: tridnn)")
    p.add_argument("--compare", choices=("torch",), default=None,
                   help="also time the same model with PyTorch's own layers, in alternating rounds")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                   help="parameters, activations and gradients (pure low-precision training for "
                        "bfloat16/float16; the loss is computed in float32)")
    p.add_argument("--channels-last", action="store_true", help="NHWC activations and filters")
    p.add_argument("--batch-size", type=int, default=None, help="images per rank per step "
                   "(default: 8 on the CPU, 64 on a GPU)")
    p.add_argument("--image-size", type=int, default=None, help="default: 32 on the CPU, 224 on a GPU")
    p.add_argument("--num-classes", type=int, default=None, help="default: 10 on the CPU, 1000 on a GPU")
    p.add_argument("--steps", type=int, default=5, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per variant (median reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation, autotuning)")
    p.add_argument("--distinct-batches", type=int, default=2, help="synthetic batches cycled per rank")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--find", action="store_true",
                   help="benchmark tridnn's convolution algorithms per layer first (find cache)")
    p.add_argument("--find-budget", type=float, default=0.25, help="seconds per problem and direction")
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture one training step as a CUDA graph after the warm-up and replay it "
                        "(GPU only; both variants alike)")
    p.add_argument("--json", default=None, help="write the results (rank 0) to this file")
    args = p.parse_args(argv)
    gpu = args.device == "cuda"
    args.batch_size = args.batch_size or (64 if gpu else 8)
    args.image_size = args.image_size or (224 if gpu else 32)
    args.num_classes = args.num_classes or (1000 if gpu else 10)
    if min(args.batch_size, args.image_size, args.num_classes, args.steps, args.rounds,
           args.distinct_batches) < 1 or args.warmup < 0:
        p.error("sizes, --steps, --rounds and --distinct-batches must be >= 1, --warmup >= 0")
    if args.cuda_graph and not gpu:
        p.error("--cuda-graph needs --device cuda")
    if args.cuda_graph and args.warmup < 3:
        p.error("--cuda-graph needs --warmup >= 3 (DDP builds its buckets in the first steps; "
                "every kernel must be compiled and tuned before capture)")
    return args


def main(argv=None):
    args = parse_args(argv)
    rank, world, device = setup_distributed(args.device)
    try:
        return train_and_report(args, rank, world, device)
    finally:
        if dist.is_initialized():
            gc.collect()  # DDP wrappers hold the process group: drop them before it goes
            dist.destroy_process_group()


def train_and_report(args, rank, world, device):
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # PyTorch's layers get cuDNN's own find
    names = [args.layers] + ([args.compare] if args.compare and args.compare != args.layers else [])
    variants = [Variant(name, args, rank, world, device) for name in names]

    for v in variants:
        if v.layers == "tridnn":
            layers = len(tt.converted_layers(v.module))
            if args.find:
                start = time.perf_counter()
                problems = find_conv_algorithms(v.module, v.batches[0][0], args.find_budget)
                if rank == 0:
                    print(f"find: {problems} convolution problems x 3 directions in "
                          f"{time.perf_counter() - start:.1f} s (rank 0)", flush=True)
            if rank == 0:
                print(f"tridnn computes {layers} layers of {args.model}", flush=True)
        # PyTorch's CUDA-graph notes: DDP needs at least 11 eager steps before a full capture
        warmup = max(args.warmup, 11) if args.cuda_graph and dist.is_initialized() else args.warmup
        for _ in range(warmup):
            v.step()
        synchronize(device)
        if args.cuda_graph:
            v.capture()

    times = {v.layers: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:  # alternating rounds: noise hits every variant alike
            times[v.layers].append(v.timed_steps(args.steps))

    results = {}
    images = args.steps * args.batch_size
    for v in variants:
        seconds = gather_floats(times[v.layers], device)  # [rank][round]
        per_rank = [[images / t for t in rank_times] for rank_times in seconds]
        # a round ends for the job when its slowest rank ends
        round_total = [world * images / max(s[i] for s in seconds) for i in range(args.rounds)]
        spread = v.replica_spread()
        results[v.layers] = {
            "images_per_s_per_rank": [statistics.median(r) for r in per_rank],
            "images_per_s_total": statistics.median(round_total),
            "rounds_total": round_total,
            "final_loss": v.losses[-1],
            "replica_spread": spread,
        }
        print(f"[rank {rank}/{world}] {v.layers:6s} {statistics.median(per_rank[rank]):10.1f} images/s "
              f"(loss {v.losses[-1]:.4f})", flush=True)

    if dist.is_initialized():
        dist.barrier()
    if rank == 0:
        print(f"\n{args.model} {args.dtype}{' channels_last' if args.channels_last else ''}"
              f"{', CUDA graph' if args.cuda_graph else ''}, "
              f"{world} rank(s) x batch {args.batch_size}, {args.image_size}x{args.image_size} images, "
              f"{args.rounds} rounds x {args.steps} steps on {device.type}")
        for name, r in results.items():
            print(f"  {name:6s} total {r['images_per_s_total']:10.1f} images/s   per rank "
                  + ", ".join(f"{x:.1f}" for x in r["images_per_s_per_rank"])
                  + f"   replicas differ by at most {r['replica_spread']:.3g}")
        if "tridnn" in results and "torch" in results:
            ratio = results["tridnn"]["images_per_s_total"] / results["torch"]["images_per_s_total"]
            print(f"  tridnn / torch throughput: {ratio:.3f}")
        if args.json:
            env = {"torch": torch.__version__, "world_size": world, "device": device.type,
                   "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "env": env, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
