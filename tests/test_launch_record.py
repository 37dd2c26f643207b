"""Launch records made by dry runs (cuda/launch_record.py, TritonConvAlgorithm.replay): the API's
fast path replays a Triton algorithm's launches on the third call with the same addresses.

On the CPU the interpreter has no compiled launcher to bind, so a stand-in binds each launch
as the interpreted launch of the same arguments: every Triton algorithm runs through the
public API with new values written into the same tensors each call, the replayed calls
against float64, and the dry run itself must launch nothing. The refusals (torch operations,
tuner misses, pre-bound launches, descriptors of memory the caller does not own) are checked
one by one."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.api import conv_fast_path  # noqa: E402
from tridnn.cuda import common, launch_record  # noqa: E402

from problems import call_api as _call  # noqa: E402

# the algorithms whose every path here is launches only (FFT and ALGO_3 fill and copy
# through torch, so they are refused; IMPLICIT_PRECOMP_GEMM pads few channels with torch)
MUST_RECORD = {"fwd": {"IMPLICIT_GEMM", "DIRECT", "GEMM", "WINOGRAD", "WINOGRAD_NONFUSED"},
               "bwd_data": {"ALGO_0", "ALGO_1", "WINOGRAD", "WINOGRAD_NONFUSED"},
               "bwd_filter": {"ALGO_0", "ALGO_1", "WINOGRAD_NONFUSED"}}


@pytest.fixture
def interpreted_binds(monkeypatch):
    """Bind a dry run's launches as interpreted launches of the same arguments."""
    monkeypatch.setattr(common, "_record_bound", lambda kernel, grid, args, consts, options, device, full:
                        (lambda: kernel[grid](*args, **consts, **options)))


def _layer(groups, layout):
    c, k = (4, 6) if groups == 1 else (4, 4)
    fmt = tridnn.TensorFormat[layout]
    make = tridnn.TensorDescriptor.nhwc if layout == "NHWC" else tridnn.TensorDescriptor.nchw
    xd = make(2, c, 5, 5, "float32")
    wd = tridnn.FilterDescriptor((k, c // groups, 3, 3), "float32", fmt)
    cd = tridnn.ConvolutionDescriptor(padding=1, groups=groups)
    return xd, wd, cd, xd.with_dims(cd.output_dims(xd, wd))


def _workspace(h, direction, descs, algo):
    xd, wd, cd, yd = descs
    if direction == "fwd":
        return h.workspace(tridnn.get_convolution_forward_workspace_size(h, xd, wd, cd, yd, algo))
    if direction == "bwd_data":
        return h.workspace(tridnn.get_convolution_backward_data_workspace_size(h, wd, yd, cd, xd, algo))
    return h.workspace(tridnn.get_convolution_backward_filter_workspace_size(h, xd, yd, cd, wd, algo))


def _reference(direction, x, w, y, groups, alpha, beta):
    """alpha * op + beta * old output, in float64 (beta = 0: the old output is not read)."""
    F = torch.nn.functional
    x64, w64, y64 = x.double(), w.double(), y.double()
    if direction == "fwd":
        op, old = F.conv2d(x64, w64, padding=1, groups=groups), y64
    elif direction == "bwd_data":
        op, old = torch.nn.grad.conv2d_input(x.shape, w64, y64, padding=1, groups=groups), x64
    else:
        op, old = torch.nn.grad.conv2d_weight(x64, w.shape, y64, padding=1, groups=groups), w64
    return alpha * op + (beta * old if beta else 0)


# depthwise: the algorithms with a depthwise path of their own (the rest run the grouped
# problem one group at a time through their dense path, checked above, at 2-3x the time)
DEPTHWISE = {"fwd": {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "DIRECT"}, "bwd_data": {"ALGO_0", "ALGO_1"},
             "bwd_filter": {"ALGO_0", "ALGO_1"}}


@pytest.mark.parametrize("layout, beta", [("NCHW", 0.0), ("NHWC", 0.5)])
@pytest.mark.parametrize("groups", [1, 4], ids=["dense", "depthwise"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_replays_follow_new_data_for_every_algorithm(direction, groups, layout, beta, rng, interpreted_binds):
    """Five calls per applicable Triton algorithm (depthwise: DEPTHWISE's), new values in the
    same tensors each call (beta = 0: a NaN-poisoned output): the first three run the
    algorithm (the third also dry runs it), the last two replay its record; every result
    against float64."""
    descs = _layer(groups, layout)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    out = {"fwd": 2, "bwd_data": 0, "bwd_filter": 1}[direction]
    recorded, checked = set(), 0
    must = MUST_RECORD[direction] if groups == 1 else DEPTHWISE[direction]
    for algo in registry.algorithms("conv", direction, "triton"):
        if groups > 1 and algo.name not in must:
            continue
        h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
        x, w, y = (torch.empty(d.dims).contiguous(memory_format=fmt) for d in (descs[0], descs[1].as_tensor(), descs[3]))
        try:
            ws = _workspace(h, direction, descs, algo.name)
        except tridnn.NotSupportedError:
            continue
        runs = []
        real_run = algo.run
        algo.run = lambda *a, **k: runs.append(1) or real_run(*a, **k)  # (an instance attribute)
        try:
            for call in range(5):
                tensors = [x, w, y]
                for t in tensors:
                    t.copy_(torch.from_numpy(rng.standard_normal(t.shape)).float())
                if beta == 0:
                    tensors[out].fill_(float("nan"))
                want = _reference(direction, x, w, y, groups, 1.5, beta)
                _call(h, direction, descs, algo.name, x, w, y, ws, 1.5, beta)
                got = tensors[out].double()
                assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (algo.name, call, (got - want).abs().max())
        finally:
            del algo.run
        entry = conv_fast_path.lookup(h, direction, *descs, algo.name)
        replay = next(iter(entry.replays.values()))
        if callable(replay):
            recorded.add(algo.name)
            assert len(runs) == 3 + 1, (algo.name, "three calls ran, then one dry run; two replays")
        else:
            assert replay is conv_fast_path._NEVER and len(runs) == 5 + 1, algo.name
        checked += 1
    assert checked >= len(must)
    assert must <= recorded, must - recorded


def test_a_dry_run_launches_nothing(rng, interpreted_binds):
    """A record made while the output holds NaN leaves it NaN; replaying it writes the result."""
    descs = _layer(4, "NHWC")
    algo = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.ALGO_0)
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    x, w, y = (torch.from_numpy(rng.standard_normal(d.dims)).float().contiguous(memory_format=torch.channels_last)
               for d in (descs[0], descs[1].as_tensor(), descs[3]))
    ws = _workspace(h, "bwd_filter", descs, "ALGO_0")
    _call(h, "bwd_filter", descs, "ALGO_0", x, w, y, ws, 1.0, 0.0)  # tunes and compiles
    w.fill_(float("nan"))
    problem = conv_fast_path.lookup(h, "bwd_filter", *descs, "ALGO_0").problem
    buffers = h.backend.carve(h.backend.workspace_bytes(ws), algo.buffers(problem))
    replay = algo.replay(problem, dict(x=x, w=w, y=y), buffers, 1.0, 0.0)
    assert replay is not None, launch_record.last_refusal
    assert torch.isnan(w).all(), "the dry run wrote the output"
    replay()
    want = _reference("bwd_filter", x, w, y, 4, 1.0, 0.0)
    assert torch.allclose(w.double(), want, rtol=1e-4, atol=1e-4)


def test_refusals():
    """What a record cannot repeat makes it None, with the reason."""
    a = torch.zeros(8)
    assert launch_record.record(lambda: a.zero_(), [a]) is None
    assert "aten.zero_" in launch_record.last_refusal
    assert launch_record.record(lambda: torch.empty(4), [a]) is None
    assert "aten.empty" in launch_record.last_refusal
    assert launch_record.record(lambda: None, [a]) is None and launch_record.last_refusal == "no launch"
    tuner = common.Tuner()
    picked = lambda: tuner.pick("a key", [dict(BLOCK=1)], lambda c, out: None, a, a.device)
    assert launch_record.record(picked, [a]) is None and "no tuned config" in launch_record.last_refusal
    picked()  # a real pick (the first candidate off the GPU); then a dry run may use it
    views = launch_record.record(lambda: a[2:].view(2, 3), [a])
    assert views is None and launch_record.last_refusal == "no launch", "views are allowed"
    bound = common.Bound()
    assert launch_record.record(bound, [a]) is None and "bound elsewhere" in launch_record.last_refusal
    assert launch_record.record(lambda: 1 / 0, [a]) is None, "the call already ran: no error from its record"
    assert "ZeroDivisionError" in launch_record.last_refusal
    assert launch_record.active() is None, "the recorder is gone after a dry run"


def test_recorder_checks_the_memory_of_each_argument():
    """A tensor outside the caller's memory is kept alive by the record; a TMA descriptor of
    such memory (it holds a bare address) refuses the record; the caller's own are neither."""
    owned, ws, other = torch.zeros(16), torch.zeros(64, dtype=torch.uint8), torch.zeros(4)
    rec = launch_record.Recorder([owned, ws[32:]])
    rec.add(lambda: None, (owned[3:], ws[40:].view(torch.float32), 7, 1.5))
    assert rec.keep == []
    rec.add(lambda: None, (other,))
    assert len(rec.keep) == 1 and rec.keep[0] is other

    class Descriptor:
        block_shape = [4]

        def __init__(self, base):
            self.base = base
    rec.add(lambda: None, (Descriptor(owned[4:]),))
    with pytest.raises(launch_record.Refused, match="TMA descriptor"):
        rec.add(lambda: None, (Descriptor(ws[:8]),))  # the workspace's first half is not the caller's
    with pytest.raises(launch_record.Refused, match="no compiled launcher"):
        rec.add(None, (owned,))
    assert len(rec.launches) == 3


def test_the_jit_launch_hook_refuses_only_during_a_dry_run():
    """JIT launches (not through the compiled launchers) raise on the recording thread only."""
    launch_record.record(lambda: None, [])  # installs the hook
    from triton import knobs
    assert launch_record._refuse_jit_launch in knobs.runtime.launch_enter_hook.calls
    launch_record._refuse_jit_launch({})  # no dry run: nothing happens
    launch_record._local.recorder = launch_record.Recorder([])
    try:
        with pytest.raises(launch_record.Refused, match="JIT"):
            launch_record._refuse_jit_launch({})
    finally:
        launch_record._local.recorder = None


def test_zero_fill_is_a_launch(rng):
    """ALGO_0's partials start from zero through zero_fill, which a record can repeat."""
    t = torch.from_numpy(rng.standard_normal(3000)).float()
    common.zero_fill(t)
    assert (t == 0).all()
    common.zero_fill(t[:0])
    with pytest.raises(ValueError, match="contiguous"):
        common.zero_fill(t[::2])
    np.testing.assert_array_equal(t.numpy(), 0)


# GPU cases: (dtype, layout, N, C, K, groups, H=W); bf16 channels-last reaches the TMA and
# Gluon paths on Hopper, float32 NCHW the pointer kernels, the depthwise case its own kernels
GPU_CASES = {"bf16-nhwc": ("bfloat16", "NHWC", 4, 64, 64, 1, 14), "fp32-nchw": ("float32", "NCHW", 2, 8, 16, 1, 9),
             "bf16-nhwc-depthwise": ("bfloat16", "NHWC", 8, 96, 96, 96, 14)}
GPU_RECORDED: dict = {}  # (case, direction, algorithm) -> recorded? (printed by the last test)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(GPU_CASES))
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_gpu_replays_follow_new_data(direction, case, rng):
    """Every applicable algorithm, five calls with new values in the same tensors (the last
    two replay where the dry run recorded), alpha = 1.5 and beta = 0.5, against float64."""
    dtype, layout, n, c, k, groups, hw = GPU_CASES[case]
    make = tridnn.TensorDescriptor.nhwc if layout == "NHWC" else tridnn.TensorDescriptor.nchw
    xd = make(n, c, hw, hw, dtype)
    wd = tridnn.FilterDescriptor((k, c // groups, 3, 3), dtype, tridnn.TensorFormat[layout])
    cd = tridnn.ConvolutionDescriptor(padding=1, groups=groups)
    descs = (xd, wd, cd, xd.with_dims(cd.output_dims(xd, wd)))
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    tdtype = getattr(torch, dtype)
    out = {"fwd": 2, "bwd_data": 0, "bwd_filter": 1}[direction]
    for algo in registry.algorithms("conv", direction, "triton"):
        h = tridnn.Handle(device="cuda", find_cache=None)
        try:
            ws = _workspace(h, direction, descs, algo.name)
        except tridnn.NotSupportedError:
            continue
        tensors = [torch.empty(d.dims, dtype=tdtype, device="cuda").contiguous(memory_format=fmt)
                   for d in (descs[0], descs[1].as_tensor(), descs[3])]
        for call in range(5):
            for t in tensors:
                t.copy_(torch.from_numpy(rng.standard_normal(t.shape)).to(tdtype))
            want = _reference(direction, *tensors, groups, 1.5, 0.5)
            _call(h, direction, descs, algo.name, *tensors, ws, 1.5, 0.5)
            err = (tensors[out].double() - want).abs().max().item()
            assert err <= 2e-2 * want.abs().max().item(), (algo.name, call, err)
        entry = conv_fast_path.lookup(h, direction, *descs, algo.name)
        replay = next(iter(entry.replays.values()))
        GPU_RECORDED[(case, direction, algo.name)] = callable(replay) or launch_record.last_refusal
    if groups > 1 and direction == "bwd_filter":  # the depthwise filter gradient's paths replay
        assert GPU_RECORDED[(case, direction, "ALGO_1")] is True, GPU_RECORDED[(case, direction, "ALGO_1")]
        assert GPU_RECORDED[(case, direction, "ALGO_0")] is True, GPU_RECORDED[(case, direction, "ALGO_0")]
    print("\n".join(f"{key}: {'replays' if v is True else v}" for key, v in GPU_RECORDED.items()
                    if key[:2] == (case, direction)))


def test_bound_launches_call_the_raw_launch_where_the_launcher_only_passes_arguments_on():
    """A kernel without scratch buffers or descriptor arguments: a Bound calls the launcher's
    C launch itself (Triton 3.6's CudaLauncher.__call__ would only add the two empty scratch
    arguments); any other launcher keeps its __call__."""
    def launch(*args):
        return args

    def inner(*args):
        return args

    class Launcher:
        launch_cooperative_grid, launch_pdl, global_scratch_size, profile_scratch_size = 0, 0, 0, 0

    plain = Launcher()
    plain.launch = launch
    assert common._raw_launch(plain) is launch
    wrapped = Launcher()
    wrapped.launch = inner  # descriptor arguments: Triton's wrapper expands them
    scratch = Launcher()
    scratch.launch, scratch.global_scratch_size = launch, 128
    assert common._raw_launch(wrapped) is None and common._raw_launch(scratch) is None
    assert common._raw_launch(object()) is None
