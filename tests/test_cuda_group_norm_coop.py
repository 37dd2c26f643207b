"""Group norm's cooperative channels-last design (cuda/group_norm_coop.py: a sample's
pixels cut into slices held by programs that meet at a per-sample barrier) against
float64: y, mean, 1/std, dx, dscale, dbias; channels a group and groups that are no power
of two (masked channels), slices with a short last one, many slices a sample, alpha/beta
into poisoned or blended outputs, float64, 64-bit offsets, and the host's choice (NCHW
and backward without saved statistics go to norms.py's designs, as do samples that need
more slices than the GPU has SMs).

On the CPU the interpreter runs the kernels as two launches (PHASE 1 partials, PHASE 2
combine and write); the one-launch form with the barrier (PHASE 0) runs in the GPU tests
at the end, which also check it bit for bit against the two-launch form."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import group_norm_coop, norms, tensor_ops  # noqa: E402
from tridnn.reference import normalization as ref_norm  # noqa: E402
from test_cuda_group_norm_resident import _run  # noqa: E402
from test_cuda_layers import DEVICE, DTYPES, _Recorder, check, f64, make  # noqa: E402

EPS = 1e-5


@pytest.fixture(autouse=True)
def _coop_on(monkeypatch):
    """The design under test, whatever the module's default."""
    monkeypatch.setattr(group_norm_coop, "GROUP_NORM_COOP", "channels_last")


def _spy(monkeypatch):
    """Records which group-norm kernels run (and, for the cooperative ones, the slices a sample)."""
    calls = []
    for module, name, tag in ((group_norm_coop, "_gn_coop_forward_kernel", "coop fwd"),
                              (group_norm_coop, "_gn_coop_backward_kernel", "coop bwd"),
                              (norms, "_gn_resident_forward_kernel", "resident fwd"),
                              (norms, "_gn_resident_backward_kernel", "resident bwd"),
                              (norms, "_gn_stats_kernel", "split stats")):
        monkeypatch.setattr(module, name, _Recorder(getattr(module, name), tag, calls))
    return calls


def _once(calls):
    """The designs that ran: repeats in a row counted once (the two launches of a kernel
    under the interpreter, the split design's two statistics passes)."""
    return [c for i, c in enumerate(calls) if i == 0 or calls[i - 1] != c]


# (shape, groups): 4 channels a group over 35 positions; 3 channels a group (masked
# channels); 6 groups of 1 channel (masked groups: 6 of 8); one position; 4 groups of 3
CASES = [((2, 8, 5, 7), 2), ((2, 6, 3, 4), 2), ((1, 6, 4, 4), 6), ((2, 16, 1, 1), 2), ((2, 12, 5, 5), 4)]


@pytest.mark.parametrize("shape,groups", CASES, ids=["cg4", "cg3", "cg1", "s1", "g4cg3"])
@pytest.mark.parametrize("slices", ["one", "many"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_coop(shape, groups, slices, dtype, rng, monkeypatch):
    """Channels-last views; "many": a held budget of a few pixels, so a sample takes up to
    35 slices, the last one short."""
    if slices == "many":
        monkeypatch.setattr(group_norm_coop, "COOP_BYTES", {"forward": 64, "backward": 128})
    calls = _spy(monkeypatch)
    _run(shape, groups, "NHWC", DTYPES[dtype], rng, alpha=1.5 if slices == "many" else 1.0,
         beta=0.5 if slices == "many" else 0.0)
    assert _once(calls) == ["coop fwd", "coop bwd"]
    x = make(shape, "NHWC", rng=rng)
    splits = group_norm_coop.plan(x, groups, shape[1] // groups, "forward", False)["SPLITS"]
    S = shape[2] * shape[3]
    assert splits == 1 if slices == "one" or S == 1 else splits > 1


def test_slices_per_sample(rng, monkeypatch):
    """plan: the held budget over a pixel's padded channels, a power of two of pixels a slice."""
    x = make((2, 8, 5, 7), "NHWC", rng=rng)  # 35 positions, 8 channels (2 groups of 4)
    tile = group_norm_coop.plan(x, 2, 4, "forward", False)
    assert (tile["SPLITS"], tile["BLOCK_S"]) == (1, 64)
    monkeypatch.setattr(group_norm_coop, "COOP_BYTES", {"forward": 8 * 4 * 4, "backward": 8 * 4 * 4})  # 4 pixels
    tile = group_norm_coop.plan(x, 2, 4, "forward", False)
    assert (tile["SPLITS"], tile["BLOCK_S"], tile["BLOCK_SPLITS"]) == (9, 4, 16)
    tile = group_norm_coop.plan(x, 2, 4, "backward", False)  # x and dy: 2 pixels a slice
    assert (tile["SPLITS"], tile["BLOCK_S"]) == (18, 2)
    assert group_norm_coop.plan(x, 2, 4, "forward", True)["BLOCK_S"] == 8  # bfloat16 held narrow


@pytest.mark.parametrize("layout", ["NHWC", "strided"])
def test_coop_blend_float64_and_strides(layout, rng, monkeypatch):
    """float64 (statistics and partials in float64), and the channel-padded strided view."""
    monkeypatch.setattr(group_norm_coop, "COOP_BYTES", {"forward": 256, "backward": 512})
    calls = _spy(monkeypatch)
    _run((2, 6, 3, 5), 3, layout, torch.float64, rng, alpha=2.0, beta=-0.5)
    _run((2, 6, 3, 5), 3, layout, torch.float32, rng, alpha=2.0, beta=-0.5, bias=False)
    assert _once(calls) == ["coop fwd", "coop bwd"] * 2


def test_coop_int64_offsets(rng, monkeypatch):
    """The BIG path (64-bit offsets, taken for tensors past 2**31 elements) on a tiny problem."""
    monkeypatch.setattr(norms, "needs_int64", lambda *tensors: True)
    monkeypatch.setattr(group_norm_coop, "COOP_BYTES", {"forward": 96, "backward": 192})
    calls = _spy(monkeypatch)
    _run((2, 6, 3, 5), 3, "NHWC", torch.float32, rng, alpha=1.5, beta=-0.5)
    assert _once(calls) == ["coop fwd", "coop bwd"]


def test_host_choice(rng, monkeypatch):
    """NCHW goes to the resident design; a backward without saved statistics to the split
    design; samples needing more slices than SMs, or a pixel over the budget, or the switch
    off, to norms.py's designs. Every route against float64."""
    calls = _spy(monkeypatch)
    shape, groups = (2, 8, 5, 7), 2
    _run(shape, groups, "NCHW", torch.float32, rng)
    assert calls == ["resident fwd", "resident bwd"]
    calls.clear()
    _run(shape, groups, "NHWC", torch.float32, rng, saved=False)
    assert _once(calls) == ["coop fwd", "split stats"]
    calls.clear()
    monkeypatch.setattr(group_norm_coop, "COOP_BYTES", {"forward": 32, "backward": 32})  # one pixel: 35 slices
    monkeypatch.setattr(group_norm_coop, "_sms", lambda t: 34)
    _run(shape, groups, "NHWC", torch.float32, rng)
    assert "coop fwd" not in calls and "coop bwd" not in calls
    calls.clear()
    monkeypatch.setattr(group_norm_coop, "_sms", lambda t: 35)  # fits forward; backward's pixel is 64 bytes
    _run(shape, groups, "NHWC", torch.float32, rng)
    assert _once(calls) == ["coop fwd", "split stats"]
    calls.clear()
    monkeypatch.setattr(group_norm_coop, "GROUP_NORM_COOP", {"forward": "never", "backward": "channels_last"})
    monkeypatch.setattr(group_norm_coop, "COOP_BYTES", 65536)
    _run(shape, groups, "NHWC", torch.float32, rng)
    assert _once(calls) == ["resident fwd", "coop bwd"]


def test_bad_switch(rng, monkeypatch):
    monkeypatch.setattr(group_norm_coop, "GROUP_NORM_COOP", "sometimes")
    x = make((1, 2, 2, 2), "NHWC", rng=rng)
    with pytest.raises(ValueError, match="GROUP_NORM_COOP.*'sometimes'"):
        norms.group_norm_forward(x, x.clone(), torch.ones(2), torch.zeros(2), None, None, 1, EPS)


def test_inputs_untouched_and_in_place(rng, monkeypatch):
    """x, scale, bias, dy stay as given; y may be x itself (a program holds its slice
    before it writes)."""
    monkeypatch.setattr(group_norm_coop, "COOP_BYTES", {"forward": 64, "backward": 128})
    shape, groups = (2, 8, 3, 5), 4
    x = make(shape, "NHWC", rng=rng, scale=2.0)
    scale = torch.as_tensor(rng.standard_normal(8), dtype=torch.float32, device=DEVICE)
    bias = torch.as_tensor(rng.standard_normal(8), dtype=torch.float32, device=DEVICE)
    before = [t.clone() for t in (x, scale, bias)]
    y = torch.empty_like(x)
    mean, inv = torch.empty(2, groups, device=DEVICE), torch.empty(2, groups, device=DEVICE)
    norms.group_norm_forward(x, y, scale, bias, mean, inv, groups, EPS)
    dy = make(shape, "NHWC", rng=rng)
    dy_before = dy.clone()
    norms.group_norm_backward(x, dy, torch.empty_like(x), scale, torch.empty(8, device=DEVICE),
                              torch.empty(8, device=DEVICE), mean, inv, groups, epsilon=EPS)
    for t, b in zip((x, scale, bias, dy), before + [dy_before]):
        assert torch.equal(t, b)
    y_ref, _, _ = ref_norm.group_norm(f64(x), f64(scale), f64(bias), groups, EPS)
    old = f64(x)
    norms.group_norm_forward(x, x, scale, bias, None, None, groups, EPS, 1.0, 0.5)
    check(x, y_ref + 0.5 * old, torch.float32, "y in place", scale=2.0)


# -- the one-launch form on the GPU ---------------------------------------------------------------
def _full_size(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (64, 256, 56, 56)
    x = (torch.randn(shape, device="cuda", generator=g) * 2 + 3).to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    dy = torch.randn(shape, device="cuda", generator=g).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w = torch.randn(256, device="cuda", generator=g)
    b = torch.randn(256, device="cuda", generator=g)
    return x, dy, w, b


def _both(x, dy, w, b, groups=32):
    y, dx = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    mean = torch.full((x.shape[0], groups), float("nan"), device="cuda")
    inv = torch.full_like(mean, float("nan"))
    ds, db = torch.full_like(w, float("nan")), torch.full_like(w, float("nan"))
    norms.group_norm_forward(x, y, w, b, mean, inv, groups, EPS, 1.0, 0.0)
    norms.group_norm_backward(x, dy, dx, w, ds, db, mean, inv, groups, 1.0, 0.0, epsilon=EPS)
    return y, mean, inv, dx, ds, db


@pytest.mark.gpu
def test_gpu_barrier_full_size(monkeypatch):
    """64x256x56x56 bf16 channels-last, 32 groups, with the barrier: against float64 torch,
    bit for bit against the two-launch form, the counters zero after every call, and a
    CUDA graph replay."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    calls = _spy(monkeypatch)
    x, dy, w, b = _full_size(0)
    got = _both(x, dy, w, b)
    assert calls == ["coop fwd", "coop bwd"]
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    ref = torch.nn.functional.group_norm(xd, 32, wd, bd, EPS)
    ref.backward(dy.double())
    y, mean, inv, dx, ds, db = got
    assert (y.double() - ref.detach()).abs().max().item() < 0.06
    xg = xd.detach().reshape(64, 32, -1)  # (channels-last: a view cannot regroup it)
    assert (mean.double() - xg.mean(-1)).abs().max().item() < 1e-4
    assert ((inv.double() - 1 / (xg.var(-1, unbiased=False) + EPS).sqrt()).abs() / inv.double()).max().item() < 1e-4
    for got_grad, want in ((dx, xd.grad), (ds, wd.grad), (db, bd.grad)):
        assert (got_grad.double() - want).abs().max().item() < 0.03 * max(1.0, want.abs().max().item())
    counters = tensor_ops.zeroed_counters(x.device, 1)
    assert int(counters.abs().sum()) == 0
    monkeypatch.setattr(group_norm_coop, "COOP_BARRIER", False)
    two = _both(x, dy, w, b)
    for a, c in zip(got, two):
        assert torch.equal(a, c)
    monkeypatch.setattr(group_norm_coop, "COOP_BARRIER", True)
    again = _both(x, dy, w, b)  # counters reused
    for a, c in zip(got, again):
        assert torch.equal(a, c)
    y = torch.empty_like(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        norms.group_norm_forward(x, y, w, b, None, None, 32, EPS)  # warm the stream's counters
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            norms.group_norm_forward(x, y, w, b, None, None, 32, EPS)
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, got[0])
    assert int(tensor_ops.zeroed_counters(x.device, 1).abs().sum()) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("shape,groups", [((3, 96, 17, 19), 6), ((2, 2048, 7, 7), 32), ((1, 32, 300, 300), 8)],
                         ids=["odd", "wide", "many-slices"])
def test_gpu_barrier_shapes(shape, groups, rng):
    """Other sizes on the GPU with the barrier: masked pixels, 64 channels a group, a
    sample of 90000 pixels in many slices (float32)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    for dt in (torch.float32, torch.bfloat16):
        _run(shape, groups, "NHWC", dt, rng, alpha=1.5, beta=0.5)


def test_barrier_kernels_compile_for_sm90():
    """The one-launch form (PHASE 0) of both kernels at the benchmark's tile (56x56x256
    bf16, 32 groups, held narrow, 8 warps) compiles for sm_90 offline without spills; the
    barrier's arrival is an atomic and, with a backoff, its wait loop sleeps."""
    from gluon_helpers import compile_triton_without_local_memory
    module = "tridnn.cuda.group_norm_coop"
    f32 = "*fp32"
    common = dict(PHASE=0, TICKETS=True, HAS_BETA=False, BIG=False, COMPUTE="tl.float32", NARROW=True, EXACT=True,
                  BLOCK_G=32, BLOCK_CG=8)
    fwd_types = {"x_ptr": "*bf16", "y_ptr": "*bf16", "scale_ptr": f32, "bias_ptr": f32, "mean_ptr": f32,
                 "inv_ptr": f32, "part_ptr": f32, "sync_ptr": "*i32", "eps": "fp64", "alpha": "fp64", "beta": "fp64"}
    bwd_types = {"x_ptr": "*bf16", "dy_ptr": "*bf16", "dx_ptr": "*bf16", "scale_ptr": f32, "mean_ptr": f32,
                 "inv_ptr": f32, "part_ptr": f32, "gpart_ptr": f32, "sample_ptr": f32, "sync_ptr": "*i32",
                 "alpha": "fp64", "beta": "fp64"}
    specs = []
    for backoff in (0, 200):
        fwd = dict(common, BACKOFF_NS=backoff, HAS_BIAS=True, SAVE=True, BLOCK_S=128, BLOCK_SPLITS=32, xsc=1, ysc=1)
        bwd = dict(common, BACKOFF_NS=backoff, BLOCK_S=64, BLOCK_SPLITS=64, BLOCK_CW=16, xsc=1, gsc=1, dsc=1)
        specs.append([module, "_gn_coop_forward_kernel", fwd_types, fwd, 8, None,
                      [a for a in fwd_types if a.endswith("_ptr")] + ["xsn", "xss", "ysn", "yss"]])
        specs.append([module, "_gn_coop_backward_kernel", bwd_types, bwd, 8, None,
                      [a for a in bwd_types if a.endswith("_ptr")] + ["xsn", "xss", "gsn", "gss", "dsn", "dss"]])
    facts = compile_triton_without_local_memory(specs)
    for spec, f in zip(specs, facts):
        assert "ATOM" in f["sass"] or "RED" in f["sass"], spec[1]
        assert ("NANOSLEEP" in f["sass"]) == (spec[3]["BACKOFF_NS"] > 0), spec[1]
