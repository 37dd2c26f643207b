"""tridnn layers under torch DistributedDataParallel: 2 processes (gloo on the CPU, NCCL on
2 GPUs with --gpu) train a converted ResNet-style net for a few steps, and the parameters
match single-process training on the same global batch.

The honest single-process equivalent of plain DDP: DDP computes batch-norm statistics per
rank (each rank normalizes its own shard), averages the gradients, and broadcasts rank 0's
buffers before every forward. So the reference runs the global batch shard by shard (each
shard its own BN statistics, "ghost batch norm"), with loss = the mean of the shards'
losses, and keeps rank 0's running statistics. Parameters and rank 0's buffers must then
agree to rounding. (SyncBatchNorm would make the statistics global; tridnn.torch.convert
leaves nn.SyncBatchNorm as it is.) The same training with PyTorch's own layers must land
on the same parameters too, within float32 tolerance.

Before training, every rank runs tridnn's ``find`` for the net's convolutions at the same
moment into one shared sqlite find cache (the ranks' concurrent writers), and training
reads the winners from it.
"""
import contextlib
import gc
import os
import re
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available in this torch build", allow_module_level=True)
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402

import tridnn.torch as tt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORLD = 2
PER_RANK = 3          # images per rank per step (odd, so shard boundaries are visible)
STEPS = 3
IMAGE = 10
CLASSES = 5
CASES = ("nchw", "channels_last")


# -- the net: a small ResNet (stem, one residual block, a strided stage, global pooling) ---------
class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + x)


def tiny_resnet():
    torch.manual_seed(1234)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, 1, 1, bias=False), nn.BatchNorm2d(6), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1), Block(6),
        nn.Conv2d(6, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 1, bias=True), nn.ReLU(),  # a 1x1 conv, and a bias not cancelled by a BN
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, CLASSES))


def make(case, layers, device, dtype):
    model = tiny_resnet()
    if layers == "tridnn":
        tt.convert(model)
    model = model.to(device=device, dtype=dtype)
    return model.to(memory_format=torch.channels_last) if case == "channels_last" else model


def global_batch(step, case, device, dtype):
    """The step's global batch: the same on every rank; rank r trains on rows r*PER_RANK..."""
    gen = torch.Generator().manual_seed(100 + step)
    x = torch.randn(WORLD * PER_RANK, 3, IMAGE, IMAGE, generator=gen, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (WORLD * PER_RANK,), generator=gen)
    fmt = torch.channels_last if case == "channels_last" else torch.contiguous_format
    return x.to(device=device, dtype=dtype).contiguous(memory_format=fmt), y.to(device)


def shard(t, r):
    return t[r * PER_RANK:(r + 1) * PER_RANK]


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def buffers(model):
    return {k: v.detach().clone() for k, v in model.named_buffers()}


def train_ddp(case, rank, device, dtype, compiled=False):
    model = make(case, "tridnn", device, dtype)
    assert type(model[0]) is tt.nn.Conv2d and type(model[1]) is tt.nn.BatchNorm2d
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    # torch.compile of the DDP model: dynamo traces tridnn's ops through their fake kernels
    run = torch.compile(ddp, backend="aot_eager", dynamic=False) if compiled else ddp
    opt = sgd(ddp.parameters())
    for step in range(STEPS):
        x, y = global_batch(step, case, device, dtype)
        loss = nn.functional.cross_entropy(run(shard(x, rank)), shard(y, rank))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.state_dict()


def train_single_process(case, layers, device, dtype):
    """What DDP computes, in one process: per-shard BN statistics, the mean of the shards'
    losses, rank 0's running statistics (DDP broadcasts them before every forward)."""
    model = make(case, layers, device, dtype)
    opt = sgd(model.parameters())
    per_rank_buffers = []
    for step in range(STEPS):
        x, y = global_batch(step, case, device, dtype)
        start = buffers(model)
        opt.zero_grad()
        per_rank_buffers = []
        for r in range(WORLD):
            model.load_state_dict(start, strict=False)
            loss = nn.functional.cross_entropy(model(shard(x, r)), shard(y, r)) / WORLD
            loss.backward()
            per_rank_buffers.append(buffers(model))
        model.load_state_dict(per_rank_buffers[0], strict=False)
        opt.step()
    return model.state_dict(), per_rank_buffers


def concurrent_find(case, device, dtype, cache_dir):
    """Every rank benchmarks the net's forward convolutions into the shared cache at once."""
    from tridnn import Handle
    from tridnn.api import functional as F
    handle = Handle(str(device) if device.type == "cuda" else "cpu",
                    find_cache=Path(cache_dir) / "find-cache.sqlite3", find_time_budget_s=0.02)
    model = make(case, "tridnn", device, dtype)
    x = global_batch(0, case, device, dtype)[0][:PER_RANK]
    count = 0
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Conv2d):
                F.conv(x, m.weight, None, list(m.stride), list(m.padding), 1, 1, algo="find", handle=handle)
                count += 1
            if isinstance(m, (nn.Conv2d, nn.MaxPool2d, nn.ReLU, nn.BatchNorm2d, Block)):
                x = m(x)
    return count


def worker(rank, init_file, out_dir, cache_dir, device_kind, dtype_name, set_device=True):
    os.environ["TRIDNN_CACHE_DIR"] = cache_dir  # before any default handle exists
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    if device_kind == "cuda":  # every process takes the same launch configs (no timing race)
        os.environ["TRIDNN_TUNE"] = "first"
    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    if device_kind == "cuda":
        device = torch.device("cuda", rank)
        if set_device:  # without it, cuda:0 stays current in every rank: tridnn's ops must still
            torch.cuda.set_device(device)  # run on the rank's own GPU and stream
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device_kind == "cuda" else "gloo", init_method=f"file://{init_file}",
                            rank=rank, world_size=WORLD)
    try:
        results = {"finds": 0}
        # the functional API launches on the current GPU (only tridnn.torch's ops guard the
        # device), so the direct find calls make the rank's GPU current themselves
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            for case in CASES:
                results["finds"] += concurrent_find(case, device, dtype, cache_dir)
        dist.barrier()  # every rank's find is in the cache before anyone trains
        for case in CASES:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                results[case] = {"ddp": train_ddp(case, rank, device, dtype)}
            results[case]["warnings"] = [str(w.message) for w in caught]
            if rank == 0:  # the references run in rank 0's process: the same cached algorithms
                results[case]["single"] = train_single_process(case, "tridnn", device, dtype)
                results[case]["torch"] = train_single_process(case, "torch", device, dtype)
        results["compiled"] = {"ddp": train_ddp("nchw", rank, device, dtype, compiled=True)}
        from torch._dynamo.utils import counters
        results["compiled"]["graph_breaks"] = list(counters["graph_break"])
        results["compiled"]["calls_captured"] = counters["stats"]["calls_captured"]
        results = _to_cpu(results)
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        gc.collect()  # no DDP wrapper may outlive the process group (gloo aborts at exit otherwise)
        dist.destroy_process_group()


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def run_ddp(tmp_path, device_kind, dtype_name, set_device=True):
    cache_dir = tmp_path / "shared-cache"
    cache_dir.mkdir()
    mp.spawn(worker, args=(str(tmp_path / "rendezvous"), str(tmp_path), str(cache_dir), device_kind, dtype_name,
                           set_device), nprocs=WORLD, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)], cache_dir


def check(results, case, rtol, atol, torch_rtol, trained=None):
    """``case``'s DDP results against the single-process references of ``trained`` (the
    same case unless given)."""
    trained = trained or case
    ranks = [res[case]["ddp"] for res in results]
    single, per_rank_buffers = results[0][trained]["single"]
    torch_state, _ = results[0][trained]["torch"]
    params = [k for k, v in single.items() if v.is_floating_point() and "running" not in k]
    assert len(params) == 16
    for name in params:
        want = single[name]
        # the replicas stay identical: every rank applies the same all-reduced gradient
        assert torch.equal(ranks[0][name], ranks[1][name]), f"{case}: replicas differ in {name}"
        torch.testing.assert_close(ranks[0][name], want, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{case} {name}, DDP vs single process: {m}")
        assert not torch.equal(want, tiny_resnet().state_dict()[name].to(want.dtype)), \
            f"{case}: {name} did not train"
        torch.testing.assert_close(ranks[0][name], torch_state[name], rtol=torch_rtol, atol=torch_rtol,
                                   msg=lambda m: f"{case} {name}, tridnn DDP vs torch layers: {m}")
    for res in results:  # gradients in their parameters' strides: DDP's buckets take them as they are
        assert not [w for w in res[case].get("warnings", ()) if "strides" in w], res[case]["warnings"]
    for r, rank_state in enumerate(ranks):  # each rank's running statistics: its own shard's update
        for name, want in per_rank_buffers[r].items():
            torch.testing.assert_close(rank_state[name], want, rtol=rtol, atol=atol,
                                       msg=lambda m: f"{case} rank {r} buffer {name}: {m}")


def check_cache(cache_dir, results):
    files = sorted(p.name for p in cache_dir.iterdir())
    assert not [f for f in files if "corrupt" in f], files
    con = sqlite3.connect(cache_dir / "find-cache.sqlite3")
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        (rows,) = con.execute("SELECT COUNT(*) FROM find_results").fetchone()
    finally:
        con.close()
    # both ranks wrote the same keys (one device name): one row per distinct problem
    problems = len(CASES) * sum(isinstance(m, nn.Conv2d) for m in tiny_resnet())
    assert results[0]["finds"] == results[1]["finds"] == problems
    assert rows == problems


@pytest.mark.parametrize("kernel", [1, 3])
def test_filter_gradient_has_the_filter_strides(kernel):
    """A channels_last filter's gradient comes back in the filter's own strides (after
    autograd), size-1 axes included, which DDP's gradient buckets compare exactly."""
    conv = tt.nn.Conv2d(4, 6, kernel, bias=False).to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 5, 5).contiguous(memory_format=torch.channels_last)
    want = nn.functional.conv2d(x, conv.weight)
    y = conv(x)
    torch.testing.assert_close(y, want)
    y.square().sum().backward()
    assert conv.weight.grad.stride() == conv.weight.stride()
    xr, wr = x.detach().requires_grad_(), conv.weight.detach().requires_grad_()
    nn.functional.conv2d(xr, wr).square().sum().backward()
    torch.testing.assert_close(conv.weight.grad, wr.grad)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp-cpu")
    return run_ddp(tmp, "cpu", "float32")


@pytest.mark.parametrize("case", CASES)
def test_gloo_ddp_matches_single_process_training(cpu_run, case):
    results, _ = cpu_run
    check(results, case, rtol=2e-5, atol=1e-6, torch_rtol=2e-4)


def test_gloo_ddp_under_torch_compile(cpu_run):
    results, _ = cpu_run
    # A break inside tridnn names one of its ops (tridnn::...) or a file in the tridnn
    # package directory; a bare "tridnn" substring would also match unrelated paths such
    # as a virtual environment called "tridnn-ci-venv".
    in_tridnn = re.compile(r"tridnn::|[/\\]tridnn[/\\]")
    for res in results:  # dynamo breaks only at DDP's own bookkeeping, never at a tridnn op
        assert res["compiled"]["calls_captured"] > 0
        assert not [b for b in res["compiled"]["graph_breaks"] if in_tridnn.search(b)], \
            res["compiled"]["graph_breaks"]
    check(results, "compiled", rtol=2e-5, atol=1e-6, torch_rtol=2e-4, trained="nchw")


def test_gloo_ranks_share_the_find_cache(cpu_run):
    results, cache_dir = cpu_run
    check_cache(cache_dir, results)


def test_example_script_under_torchrun(tmp_path):
    """examples/ddp_train.py on 2 CPU ranks: find into one cache, train, report images/s."""
    env = {**os.environ, "TRIDNN_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}",
           str(ROOT / "examples" / "ddp_train.py"), "--device", "cpu", "--model", "tiny",
           "--batch-size", "4", "--image-size", "16", "--steps", "1", "--rounds", "1", "--warmup", "1",
           "--find", "--find-budget", "0.01", "--compare", "torch", "--json", str(tmp_path / "out.json")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "[rank 0/2] tridnn" in out and "[rank 1/2] tridnn" in out, out
    assert "tridnn / torch throughput" in out, out
    import json
    report = json.loads((tmp_path / "out.json").read_text())
    for layers in ("tridnn", "torch"):
        r = report["results"][layers]
        assert len(r["images_per_s_per_rank"]) == WORLD and r["images_per_s_total"] > 0
        assert r["replica_spread"] == 0.0
    # identical initial weights and data: both variants reach the same loss. (Batch 4: at
    # batch 2 the last blocks' batch norms see 2 values a channel (1x1 maps), which amplifies
    # rounding: which algorithms find picks moved rank 0's loss by 1.06e-4 and rank 1's by 2%.)
    assert report["results"]["tridnn"]["final_loss"] == pytest.approx(
        report["results"]["torch"]["final_loss"], rel=1e-4)
    con = sqlite3.connect(tmp_path / "cache" / "find-cache.sqlite3")
    try:
        (rows,) = con.execute("SELECT COUNT(*) FROM find_results").fetchone()
    finally:
        con.close()
    assert rows >= 3 * 8, "find should have stored the forward, backward-data and backward-filter winners"


def _load_example():
    import importlib.util
    spec = importlib.util.spec_from_file_location("ddp_train", ROOT / "examples" / "ddp_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_example_find_covers_every_convolution_training_runs(monkeypatch, channels_last):
    """After the example's --find, every convolution of a training step (forward, backward
    data, backward filter; a 1x1 map in layer4 included) finds its algorithm in the cache."""
    from tridnn.algorithms import find_cache
    from tridnn.api import functional as F
    ddp_train = _load_example()
    model = ddp_train.build_model("tiny", "tridnn", torch.float32, channels_last, torch.device("cpu"), 10, 0)
    x = torch.randn(2, 3, 32, 32)
    x = x.contiguous(memory_format=torch.channels_last) if channels_last else x
    problems = ddp_train.find_conv_algorithms(model, x, 0.001)
    assert problems == 11
    looked_up = {True: [], False: []}
    get = find_cache.FindCache.get

    def counting_get(self, key):
        entry = get(self, key)
        looked_up[entry is not None].append(key)
        return entry

    monkeypatch.setattr(find_cache.FindCache, "get", counting_get)
    F.clear_plan_cache()  # plans made during find would skip the lookup
    model(x).sum().backward()
    assert not looked_up[False], looked_up[False]
    assert len(looked_up[True]) == 32  # 11 forward + 10 backward data (not the stem) + 11 filter


@pytest.mark.gpu
@pytest.mark.parametrize("set_device", [True, False], ids=["set_device", "no_set_device"])
def test_nccl_ddp_on_two_gpus_matches_single_process_training(tmp_path, set_device):
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"needs {WORLD} GPUs, found {torch.cuda.device_count()}")
    if not dist.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    # float32 (strict: tf32 off on both sides); TRIDNN_TUNE=first gives every process the
    # same launch configs, so DDP and the single-process run differ only in how the
    # all-reduce orders the gradient sums
    results, cache_dir = run_ddp(tmp_path, "cuda", "float32", set_device)
    for case in CASES:
        check(results, case, rtol=1e-4, atol=1e-5, torch_rtol=1e-3)
    check(results, "compiled", rtol=1e-4, atol=1e-5, torch_rtol=1e-3, trained="nchw")
    check_cache(cache_dir, results)
