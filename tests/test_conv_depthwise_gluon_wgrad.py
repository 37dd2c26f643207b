"""conv_depthwise_gluon_wgrad: the warp-specialized Gluon walker for the depthwise 3x3 stride-1
filter gradient.

CPU: the configs (8 values a consumer thread in each of nine accumulators, rings of at
least four slots), the slot plan (a multiple of the channel blocks, within the partial
buffer), where the tuner offers it and the refusals, every launch's arguments against the
kernel signature, and the sm_90 compiles (no spills, TMA loads, registers under the cap).
GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu``): direct launches against float64 (ragged channels,
widths, image blocks, padding 0-2, a few programs looping over many units, the atomic
variant, bfloat16 and float32), and each config forced through the public API (ALGO_0 and
ALGO_1, both modes, alpha/beta).
"""
import re
import types

import pytest

torch = pytest.importorskip("torch")
dww = pytest.importorskip("tridnn.cuda.conv_depthwise_gluon_wgrad", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.cuda import conv_depthwise_backward as bwd  # noqa: E402
from tridnn.testing import seed_for  # noqa: E402

from gluon_helpers import compile_in_child, need_hopper  # noqa: E402
from test_cuda_conv import P, nhwc_problem, run_case  # noqa: E402

MOBILENET = [(112, 112, 32), (56, 56, 144), (28, 28, 192), (14, 14, 384), (14, 14, 576), (7, 7, 960)]


# -- CPU: configs, plans and where they are offered ------------------------------------------
@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("oh,ow,c", MOBILENET + [(5, 3, 8), (200, 300, 24)])
def test_configs(oh, ow, c, itemsize):
    got = dww.configs(oh, ow, c, itemsize)
    assert 1 <= len(got) <= 2 and all(g["KIND"] == "gluon" for g in got)
    for g in got:
        assert g["NB"] * g["BWI"] * g["BC"] // (g["num_warps"] * 32) == 8, g
        assert g["BC"] * itemsize <= 128 and g["BC"] % 8 == 0
        ring = g["STAGES"] * 4 * g["NB"] * g["BWI"] * g["BC"] * itemsize
        assert dww.MIN_STAGES <= g["STAGES"] <= 8 and ring <= dww.RING_BYTES
        assert dww.PER_SM * (ring + 2048) <= 228 * 1024
        assert g["RUN"] <= min(oh, 28)


@pytest.mark.parametrize("cap", [1, 7, 64, 4096])
@pytest.mark.parametrize("n,oh,ow,c", [(64, 112, 112, 32), (64, 7, 7, 960), (1, 3, 5, 200), (2, 56, 56, 144)])
def test_slot_plan(n, oh, ow, c, cap):
    cfg = dww.configs(oh, ow, c)[0]
    slots = dww.plan_slots(n, oh, ow, c, cfg, cap, sms=132)
    units, _, c_blocks, _ = dww.work_units(n, oh, ow, c, cfg)
    assert 1 <= slots <= cap
    assert slots * c_blocks <= max(c_blocks, 132 * dww.PER_SM) and slots <= max(1, units // c_blocks)


def test_offered_only_for_stride_1_depthwise_on_hopper(monkeypatch):
    cuda = types.SimpleNamespace(type="cuda", index=0)
    monkeypatch.setattr(dww, "OFFERED", True)  # (TRIDNN_GLUON_DW_WGRAD=1)
    monkeypatch.setattr(dww, "EVERYWHERE", True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(bwd, "sm_count", lambda *a: 132)
    problem = nhwc_problem("bwd_filter", P(144, 144, (56, 56), 3, 1, 1, groups=144), n=64,
                           dtype=tridnn.DataType.BFLOAT16)
    got = bwd.gluon_wgrad_candidates(problem, cuda, 64)
    assert [dict(g, slices=None) for g in got] == [dict(c, slices=None) for c in dww.configs(56, 56, 144, 2)]
    assert all(1 <= g["slices"] <= 64 for g in got)
    for other in (P(144, 144, (56, 56), 3, 2, 1, groups=144), P(144, 144, (56, 56), 3, 1, 2, 2, groups=144),
                  P(72, 144, (56, 56), 3, 1, 1, groups=72), P(144, 144, (56, 56), 5, 1, 2, groups=144)):
        assert bwd.gluon_wgrad_candidates(nhwc_problem("bwd_filter", other, dtype=tridnn.DataType.BFLOAT16),
                                          cuda, 64) == []
    assert bwd.gluon_wgrad_candidates(problem, types.SimpleNamespace(type="cpu", index=None), 64) == []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (10, 0))
    assert bwd.gluon_wgrad_candidates(problem, cuda, 64) == []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(dww, "OFFERED", False)
    assert bwd.gluon_wgrad_candidates(problem, cuda, 64) == []


def test_offered_by_default_below_the_row_walkers_channels(monkeypatch):
    """By default (TRIDNN_GLUON_DW_WGRAD unset) the tuner gets the walker on narrow layers
    (32 channels: dw32_112, where it measured fastest), not from WALKER_MIN_CHANNELS up
    (where the row walker won); "1" everywhere, "0" (or TRIDNN_GLUON_DW=0) never."""
    import os
    env = os.environ.get("TRIDNN_GLUON_DW_WGRAD", "auto")
    assert dww.MODE == (env if os.environ.get("TRIDNN_GLUON_DW") != "0" else "0")
    assert dww.OFFERED == (dww.MODE != "0") and dww.EVERYWHERE == (dww.MODE == "1")
    cuda = types.SimpleNamespace(type="cuda", index=0)
    monkeypatch.setattr(dww, "OFFERED", True)
    monkeypatch.setattr(dww, "EVERYWHERE", False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(bwd, "sm_count", lambda *a: 132)

    def offered(c):
        problem = nhwc_problem("bwd_filter", P(c, c, (28, 28), 3, 1, 1, groups=c), n=8, dtype=tridnn.DataType.BFLOAT16)
        return bwd.gluon_wgrad_candidates(problem, cuda, 64)
    assert offered(32) and offered(bwd.WALKER_MIN_CHANNELS - 16)
    assert offered(bwd.WALKER_MIN_CHANNELS) == [] and offered(144) == []
    monkeypatch.setattr(dww, "EVERYWHERE", True)
    assert offered(144)


@pytest.mark.parametrize("why,change", [
    ("float16, bfloat16 or float32", dict(dtype=torch.float64)),
    ("stride 1", dict(stride=(2, 2))),
    ("dilation 1", dict(dilation=(2, 2))),
    ("x must be channels-last", dict(x_nchw=True)),
    ("dy must be channels-last", dict(dy_nchw=True)),
    ("Hopper", {}),  # CPU tensors
])
def test_why_not(why, change):
    dt = change.get("dtype", torch.bfloat16)
    x = torch.zeros(2, 32, 8, 8, dtype=dt)
    dy = torch.zeros(2, 32, 8, 8, dtype=dt)
    if not change.get("x_nchw"):
        x = x.to(memory_format=torch.channels_last)
    if not change.get("dy_nchw"):
        dy = dy.to(memory_format=torch.channels_last)
    reason = dww.why_not(x, dy, change.get("stride", (1, 1)), (1, 1), change.get("dilation", (1, 1)))
    assert reason and why in reason, reason


@pytest.mark.parametrize("atomic", [False, True])
def test_launch_arguments_fill_the_signature(atomic):
    from tridnn.cuda import gluon_common
    x = torch.zeros(2, 32, 9, 10).bfloat16().to(memory_format=torch.channels_last)
    dy = torch.zeros_like(x)
    part = torch.empty(64 * 32 * 9)
    cfg = dww.configs(9, 10, 32)[0]
    grid, args, meta, slots = dww.prepare(x, dy, part, (1, 1), cfg, cap=64, atomic=atomic, sms=4)
    tail = gluon_common.constexpr_tail(dww.dw3_gluon_wgrad_kernel, meta)
    assert len(args) + len(tail) == len(dww.dw3_gluon_wgrad_kernel.arg_names)
    assert grid[0] == slots * dww.work_units(2, 9, 10, 32, cfg)[2] and meta["ATOMIC"] == atomic


# -- CPU: offline sm_90 compiles ---------------------------------------------------------------
COMPILES = [(cfg, dt, atomic) for dt, isz in (("bf16", 2), ("fp32", 4))
            for cfg in {tuple(sorted(c.items())): c for oh, ow, c_ in MOBILENET
                        for c in dww.configs(oh, ow, c_, isz)}.values()
            for atomic in (False, True)]


@pytest.fixture(scope="module")
def sm90():
    return compile_in_child([("tridnn.cuda.conv_depthwise_gluon_wgrad", "compile_sm90", cfg,
                              dict(dtype=dt, atomic=a)) for cfg, dt, a in COMPILES])


@pytest.mark.parametrize("i", range(len(COMPILES)))
def test_compiles_for_sm90(i, sm90):
    cfg, dt, atomic = COMPILES[i]
    f = sm90[i]
    code = f["sass"]
    assert f["regs"] <= dww.MAX_REGS
    assert not re.findall(r"\b(STL|LDL)\b", code), (cfg, dt, "spills")
    assert code.count("UTMALDG.4D") >= 4, "x's three windows and dy's row by TMA"
    assert "HGMMA" not in code and "LDS" in code
    assert ("RED.E.ADD.F32" in code or "ATOMG" in code or "RED." in code) == atomic
    assert f["shared"] >= cfg["STAGES"] * 4 * cfg["NB"] * cfg["BWI"] * cfg["BC"] * (4 if dt == "fp32" else 2)


# -- GPU: against float64 ----------------------------------------------------------------------
CASES = [  # (N, C, H, W, pad)
    (2, 32, 112, 112, 1), (3, 144, 20, 28, 1), (5, 40, 14, 14, 1), (3, 72, 7, 7, 1), (1, 200, 9, 13, 1),
    (2, 64, 16, 16, 0), (2, 48, 11, 6, 2), (4, 960, 7, 7, 1),
]


def _ref(x, dy, pad):
    """dw [C, 9] of the cross-correlation in float64."""
    w = torch.nn.grad.conv2d_weight(x.double(), (x.shape[1], 1, 3, 3), dy.double(), padding=pad, groups=x.shape[1])
    return w.reshape(x.shape[1], 9)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_against_float64(case, dtype):
    need_hopper()
    n, c, h, wd, pad = case
    g = torch.Generator().manual_seed(seed_for(case) % 2**31)
    oh, ow = h + 2 * pad - 2, wd + 2 * pad - 2
    x = torch.randn(n, c, h, wd, generator=g).to(dtype).cuda().contiguous(memory_format=torch.channels_last)
    dy = torch.randn(n, c, oh, ow, generator=g).to(dtype).cuda().contiguous(memory_format=torch.channels_last)
    want = _ref(x, dy, pad)
    cfgs = dww.configs(oh, ow, c, x.element_size()) + [dww.config(8, 4, 32, 3, x.element_size())]
    for cfg in cfgs:
        for atomic, cap, sms in ((False, 64, None), (True, 1, None), (False, 5, 3)):
            part = torch.full((cap, c, 9), float("nan"), device="cuda")
            if atomic:
                part.zero_()
            slots = dww.launch(x, dy, part, (pad, pad), cfg, cap, atomic, sms=sms)
            torch.cuda.synchronize()
            got = part[:slots].double().sum(0)
            err = ((got - want).abs().max() / want.abs().max()).item()
            assert err < 1e-5, (cfg, atomic, cap, sms, err)


@pytest.mark.gpu
@pytest.mark.parametrize("p", [P(32, 32, (15, 20), 3, 1, 1, groups=32), P(144, 144, (14, 9), 3, 1, 1, groups=144),
                               P(24, 24, (7, 7), 3, 1, 0, groups=24)], ids=lambda p: p["name"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("enum", [tridnn.ConvBwdFilterAlgo.ALGO_0, tridnn.ConvBwdFilterAlgo.ALGO_1],
                         ids=["ALGO_0", "ALGO_1"])
def test_gpu_forced_through_the_api(p, dtype, enum, rng, monkeypatch):
    """Each config as the depthwise filter gradient's only candidate: both modes, alpha/beta;
    the Gluon walker ran."""
    need_hopper()
    from tridnn.cuda import common
    launches = []
    real = dww.launch
    monkeypatch.setattr(dww, "launch", lambda *a, **k: (launches.append(1), real(*a, **k))[1])
    algo = registry.by_enum("conv", "bwd_filter", "triton", enum)
    isz = 4 if dtype == "float32" else 2
    oh, ow = (s + 2 * p["pad"][0] - 2 for s in p["spatial"])
    for i in range(len(dww.configs(oh, ow, p["C"], isz))):
        monkeypatch.setattr(bwd, "_wgrad_tuner", common.Tuner(tolerance=3e-3))
        monkeypatch.setattr(bwd, "wgrad3_candidates",
                            lambda problem, device, slices, atomic, cap, _i=i: [bwd.gluon_wgrad_candidates(
                                problem, device, cap)[_i]])
        before = len(launches)
        assert run_case("bwd_filter", algo, p, dtype, "NHWC", rng, n=3, device="cuda") is None
        assert run_case("bwd_filter", algo, p, dtype, "NHWC", rng, n=3, device="cuda",
                        mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5) is None
        assert len(launches) == before + 2, i
