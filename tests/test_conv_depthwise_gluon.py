"""conv_depthwise_gluon: the warp-specialized Gluon walker for depthwise 3x3 forward at stride 1
and 2 (and stride-1 backward data: the same walk over dy with the filter turned).

CPU: the configs (at most 16 values a consumer thread, rings that fit two programs an SM),
where the DIRECT tuner offers them (Hopper, channels-last, no fused epilogue; last in the
list) and the refusals, stride 2's pair view of x, and every config's sm_90 compile (no spills without beta, the TMA
loads, registers under the cap). GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu``): direct launches
against float64 (ragged channels, widths, image blocks, padding 0-2, alpha/beta, the
CONVOLUTION flip, bfloat16 and float32), and the configs forced through the public API
(forward by DIRECT, backward data by ALGO_1).
"""
import re
import types

import pytest

torch = pytest.importorskip("torch")
dwg = pytest.importorskip("tridnn.cuda.conv_depthwise_gluon", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_direct  # noqa: E402
from tridnn.testing import seed_for  # noqa: E402

from gluon_helpers import compile_in_child, need_hopper  # noqa: E402
from test_cuda_conv import P, run_case  # noqa: E402

MOBILENET = [(112, 112, 32), (56, 56, 144), (28, 28, 192), (14, 14, 384), (14, 14, 576), (7, 7, 960)]
DIRECT = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.DIRECT)


def _problem(c, hw, n=2, pad=1, stride=1, dtype="bfloat16", layout=tridnn.TensorFormat.NHWC):
    cd = tridnn.ConvolutionDescriptor(padding=(pad, pad), stride=(stride, stride), groups=c)
    xd = tridnn.TensorDescriptor.packed((n, c, hw, hw), dtype, layout)
    wd = tridnn.FilterDescriptor((c, 1, 3, 3), dtype, layout)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    return ConvProblem("fwd", xd, wd, yd, cd)


# -- CPU: configs and where they are offered --------------------------------------------------
@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("oh,ow,c", MOBILENET + [(5, 3, 8), (200, 300, 24)])
def test_configs(oh, ow, c, itemsize):
    got = dwg.configs(oh, ow, c, itemsize)
    assert len(got) == 2 and all(g["KIND"] == "gluon" for g in got)
    for g in got:
        per_thread = g["NB"] * g["BWI"] * g["BC"] // (g["num_warps"] * 32)
        assert per_thread <= 16, g
        assert g["BC"] * itemsize <= 128 and g["BC"] % 8 == 0
        ring = g["STAGES"] * 4 * g["NB"] * g["BWI"] * g["BC"] * itemsize
        assert 2 <= g["STAGES"] <= 8 and (ring <= dwg.RING_BYTES or g["STAGES"] == 2)
        assert dwg.PER_SM * (ring + 2048) <= 228 * 1024
        assert g["RUN"] == min(oh, 28)


def test_offered_last_and_only_with_a_shape():
    cuda = types.SimpleNamespace(type="cuda", index=0)
    plain = conv_direct.fwd_dw3_candidates(cuda, 144)
    assert not any(c["KIND"] == "gluon" for c in plain)
    with_gluon = conv_direct.fwd_dw3_candidates(cuda, 144, (56, 56, 2))
    assert with_gluon[:len(plain)] == plain, "the reference and the other kernels come first"
    assert with_gluon[len(plain):] == dwg.configs(56, 56, 144, 2)


def test_offered_last_for_stride_1_backward_data():
    from tridnn.cuda import conv_depthwise_backward as bwd
    cuda = types.SimpleNamespace(type="cuda", index=0)
    plain = bwd.rows3_data_candidates(cuda, 144)
    assert not any(c.get("KIND") == "gluon" for c in plain)
    assert bwd.rows3_data_candidates(cuda, 144, (56, 56, 2)) == plain + dwg.configs(56, 56, 144, 2)


def test_offered_last_at_stride_2():
    cuda = types.SimpleNamespace(type="cuda", index=0)
    problem = _problem(144, 56, stride=2)
    plain = conv_direct.dw2d_candidates(cuda, problem)
    assert not any(c.get("KIND") == "gluon" for c in plain)
    assert conv_direct.dw2d_candidates(cuda, problem, (28, 28, 2)) == plain + dwg.configs(28, 28, 144, 2)


@pytest.mark.parametrize("pad", [0, 1, 2, 3])
@pytest.mark.parametrize("stride", [1, 2])
def test_x_view_windows_are_the_taps(stride, pad):
    """Window kw of output column q, read from the view at (q + COL[kw], c + CH[kw]), is
    x's input column stride * q - pad + kw (zero where either falls outside)."""
    n, h, wd, c = 2, 3, 10, 5
    x = torch.arange(n * h * wd * c, dtype=torch.float64).reshape(n, h, wd, c) + 1
    shape, strides, col, ch = dwg.x_view(tuple(x.shape), x.stride(), pad, stride)
    view = torch.as_strided(x, shape, strides)
    ow = (wd + 2 * pad - 3) // stride + 1
    for kw in range(3):
        for q in range(ow):
            j = stride * q - pad + kw
            want = x[:, :, j, :] if 0 <= j < wd else torch.zeros(n, h, c, dtype=x.dtype)
            p = q + col[kw]
            got = view[:, :, p, ch[kw]:ch[kw] + c] if 0 <= p < shape[2] else torch.zeros(n, h, c, dtype=x.dtype)
            assert torch.equal(got, want), (kw, q)


def test_offered_last_for_stride_2_backward_data():
    from tridnn.cuda import conv_depthwise_backward as bwd
    from tridnn.cuda.geometry import geometry
    cuda = types.SimpleNamespace(type="cuda", index=0)
    geo = geometry(_problem(144, 56, stride=2))
    plain = bwd.phase_data_candidates(cuda, geo)
    assert plain == bwd.phase_configs(cuda, 144)
    assert bwd.phase_data_candidates(cuda, geo, 2) == plain + dwg.configs(28, 28, 144, 2, data=True)
    assert all(c["STAGES"] == 8 for c in dwg.configs(28, 28, 144, 2, data=True)), "two-tile slots: more stages"


@pytest.mark.parametrize("why,change", [
    ("stride-2 backward data", dict(stride=(1, 1))),
    ("padding 1", dict(padding=(0, 0))),
    ("dilation 1", dict(dilation=(2, 2))),
    ("not the stride-2 output", dict(dy_hw=(4, 5))),
    ("Hopper", {}),  # CPU tensors
])
def test_why_not_data(why, change):
    dx = torch.zeros(2, 32, 9, 10).bfloat16().to(memory_format=torch.channels_last)
    dy = torch.zeros(2, 32, *change.get("dy_hw", (5, 5))).bfloat16().to(memory_format=torch.channels_last)
    w = torch.zeros(32, 1, 3, 3).bfloat16()
    reason = dwg.why_not_data(dy, w, dx, change.get("stride", (2, 2)), change.get("padding", (1, 1)),
                              change.get("dilation", (1, 1)))
    assert reason and why in reason, reason


def test_backward_data_not_offered_off_hopper_or_switched_off(monkeypatch):
    from tridnn.cuda import conv_depthwise_backward as bwd
    problem = _problem(32, 10, stride=2)
    dx = torch.zeros(2, 32, 10, 10).bfloat16().to(memory_format=torch.channels_last)
    dy = torch.zeros(2, 32, 5, 5).bfloat16().to(memory_format=torch.channels_last)
    w = torch.zeros(32, 1, 3, 3).bfloat16()
    assert "Hopper" in bwd.gluon_data_why_not(problem, dy, w, dx)
    monkeypatch.setattr(dwg, "OFFERED", False)
    assert "not offered" in bwd.gluon_data_why_not(problem, dy, w, dx)


@pytest.mark.parametrize("kind", ["stride1", "stride2", "data"])
def test_launch_arguments_fill_the_signature(kind):
    """prepare / prepare_data give every runtime argument and every constexpr the GPU launch
    passes in signature order (gluon_common.constexpr_tail); a missing one (DATA) failed
    only on the H100."""
    from tridnn.cuda import gluon_common
    x = torch.zeros(2, 32, 8, 8).bfloat16().to(memory_format=torch.channels_last)
    w = torch.zeros(32, 1, 3, 3).bfloat16()
    cfg = dwg.configs(8, 8, 32)[0]
    if kind == "data":
        dx = torch.zeros(2, 32, 16, 15).bfloat16().to(memory_format=torch.channels_last)
        grid, args, meta = dwg.prepare_data(x, w, dx, cfg, sms=1)
    else:
        stride = 2 if kind == "stride2" else 1
        y = torch.zeros(2, 32, 8 // stride, 8 // stride).bfloat16().to(memory_format=torch.channels_last)
        grid, args, meta = dwg.prepare(x, w, y, (1, 1), cfg, sms=1, stride=stride)
    tail = gluon_common.constexpr_tail(dwg.dw3_gluon_fwd_kernel, meta)
    assert len(args) + len(tail) == len(dwg.dw3_gluon_fwd_kernel.arg_names)
    assert meta["DATA"] == (kind == "data") and meta["STRIDE"] == (1 if kind == "stride1" else 2)
    assert grid[0] >= 1


def test_not_offered_on_the_cpu_with_an_epilogue_or_switched_off(monkeypatch):
    problem = _problem(32, 8)
    x = torch.zeros(2, 32, 8, 8).bfloat16().to(memory_format=torch.channels_last)
    w = torch.zeros(32, 1, 3, 3).bfloat16()
    y = torch.zeros_like(x)
    assert conv_direct.gluon_dw3_shape(problem, x, w, y, None) is None  # CPU tensors
    assert "Hopper" in dwg.why_not(x, w, y, (1, 1), (1, 1))
    monkeypatch.setattr(dwg, "OFFERED", False)
    assert conv_direct.gluon_dw3_shape(problem, x, w, y, None) is None
    monkeypatch.setattr(dwg, "OFFERED", True)
    assert conv_direct.gluon_dw3_shape(problem, x, w, y, object()) is None  # a fused epilogue


@pytest.mark.parametrize("why,change", [
    ("float16, bfloat16 or float32", dict(dtype=torch.float64)),
    ("stride 1 or 2", dict(stride=(3, 3))),
    ("stride 1 or 2", dict(stride=(1, 2))),
    ("even width", dict(stride=(2, 2), width=9)),
    ("packed pixels", dict(stride=(2, 2), padded_pixels=True)),
    ("dilation 1", dict(dilation=(2, 2))),
    ("depthwise 3x3", dict(w=torch.zeros(32, 1, 5, 5).bfloat16())),
    ("channels-last", dict(x_nchw=True)),
])
def test_why_not(why, change):
    dt = change.get("dtype", torch.bfloat16)
    x = torch.zeros(2, 32, 8, change.get("width", 8), dtype=dt)
    if change.get("padded_pixels"):  # 40 channels stored a pixel, 32 used
        x = torch.zeros(2, 8, 8, 40, dtype=dt)[..., :32].permute(0, 3, 1, 2)
    elif not change.get("x_nchw"):
        x = x.to(memory_format=torch.channels_last)
    w = change.get("w", torch.zeros(32, 1, 3, 3, dtype=dt))
    y = torch.zeros(2, 32, 8, 8, dtype=dt).to(memory_format=torch.channels_last)
    reason = dwg.why_not(x, w, y, change.get("stride", (1, 1)), change.get("dilation", (1, 1)))
    assert reason and why in reason, reason


# -- CPU: offline sm_90 compiles ---------------------------------------------------------------
MOBILENET_S2 = [(56, 56, 96), (28, 28, 144), (14, 14, 192), (7, 7, 576)]  # output sizes at stride 2
COMPILES = [(cfg, dt, beta, stride, data) for dt, isz in (("bf16", 2), ("fp16", 2), ("fp32", 4))
            for stride, data, layers in ((1, False, MOBILENET), (2, False, MOBILENET_S2), (2, True, MOBILENET_S2))
            for cfg in {tuple(sorted(c.items())): c for oh, ow, c_ in layers
                        for c in dwg.configs(oh, ow, c_, isz, data)}.values()
            for beta in (False, True)]


@pytest.fixture(scope="module")
def sm90():
    facts = compile_in_child([("tridnn.cuda.conv_depthwise_gluon", "compile_sm90", cfg,
                               dict(dtype=dt, has_beta=b, stride=s, data=d)) for cfg, dt, b, s, d in COMPILES])
    return facts


@pytest.mark.parametrize("i", range(len(COMPILES)))
def test_compiles_for_sm90(i, sm90):
    cfg, dt, beta, stride, data = COMPILES[i]
    f = sm90[i]
    code = f["sass"]
    assert f["regs"] <= dwg.MAX_REGS
    spills = len(re.findall(r"\b(STL|LDL)\b", code))
    assert spills == 0 or (beta and spills <= 32), (cfg, dt, beta, stride, spills)
    assert code.count("UTMALDG.4D") == (2 if data else 3), "the row's windows by TMA"
    # channels a multiple of 16 (specialized): a thread's 8 outputs in 16-byte stores
    stores = re.findall(r"STG\.E(?:\.\w+)*", code)
    assert stores and set(stores) == {"STG.E.128"}, (dt, stores)
    assert "HGMMA" not in code and "LDS" in code
    slot = 2 if data else 4
    assert f["shared"] >= cfg["STAGES"] * slot * cfg["NB"] * cfg["BWI"] * cfg["BC"] * (4 if dt == "fp32" else 2)


# -- GPU: against float64 ----------------------------------------------------------------------
CASES = [  # (N, C, H, W, pad)
    (2, 32, 112, 112, 1), (3, 144, 20, 28, 1), (5, 40, 14, 14, 1), (3, 72, 7, 7, 1), (1, 200, 9, 13, 1),
    (2, 64, 16, 16, 0), (2, 48, 11, 6, 2),
]
S2_CASES = [  # (N, C, H, W, pad), stride 2: even widths
    (2, 96, 112, 112, 1), (3, 144, 20, 28, 1), (2, 40, 14, 14, 0), (1, 200, 9, 12, 1), (2, 48, 11, 6, 2),
    (3, 576, 14, 14, 1), (2, 24, 7, 2, 1),
]
DATA_CASES = [  # (N, C, H, W) of dx; stride 2, padding 1: odd and even sizes
    (2, 96, 112, 112), (3, 144, 21, 28), (2, 40, 13, 15), (1, 200, 9, 12), (3, 576, 14, 14), (2, 24, 7, 2),
    (2, 64, 1, 3),
]


def _ref(x, w, pad, flip, stride=1):
    wt = w.double().flip((2, 3)) if flip else w.double()
    return torch.nn.functional.conv2d(x.double(), wt, padding=pad, stride=stride, groups=x.shape[1])


def _ref_data(dy, w, hw, flip):
    """The stride-2, padding-1 backward data of dy in float64 (torch's transposed conv)."""
    wt = w.double().flip((2, 3)) if flip else w.double()
    h, wd = hw
    extra = (h + 2 - 3 - 2 * (dy.shape[2] - 1), wd + 2 - 3 - 2 * (dy.shape[3] - 1))
    return torch.nn.functional.conv_transpose2d(dy.double(), wt, stride=2, padding=1, output_padding=extra,
                                                groups=dy.shape[1])


def _channels_last(t):
    return t.cuda().contiguous(memory_format=torch.channels_last)


def _each_config_against_float64(cfgs, out_shape, dtype, g, run, reference):
    """Each config twice: alpha 1 over a NaN-poisoned output, then alpha 0.5 and beta 0.75
    with the filter turned on 3 programs (units looped); ``run(out, cfg, alpha, beta, flip,
    sms)`` against alpha * ``reference(flip)`` + beta * the old output, in float64."""
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # 16-bit outputs round to 8 or 11 bits
    for cfg in cfgs:
        for alpha, beta, flip, sms in ((1.0, 0.0, False, None), (0.5, 0.75, True, 3)):
            old = _channels_last(torch.randn(*out_shape, generator=g).to(dtype))
            out = old.clone()
            if beta == 0:
                out.fill_(float("nan"))
            run(out, cfg, alpha, beta, flip, sms)
            torch.cuda.synchronize()
            want = alpha * reference(flip) + beta * old.double()
            err = ((out.double() - want).abs().max() / want.abs().max()).item()
            assert err < tol, (cfg, alpha, beta, flip, err)


def _extra_config(dtype, data=False):
    """A 5-row, 4-image config beside the offered ones."""
    itemsize = 4 if dtype == torch.float32 else 2
    return dwg.config(8, 4, 32 if dtype == torch.float32 else 64, 5, itemsize, data=data)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("stride,case", [pytest.param(s, c, id=f"s{s}-" + "x".join(map(str, c)))
                                         for s, cases in ((1, CASES), (2, S2_CASES)) for c in cases])
def test_gpu_against_float64(stride, case, dtype):
    """Forward at stride 1 and 2 (the pair view): every offered config and a 5-row, 4-image one."""
    need_hopper()
    n, c, h, wd, pad = case
    g = torch.Generator().manual_seed(seed_for(case) % 2**31)
    x = _channels_last(torch.randn(n, c, h, wd, generator=g).to(dtype))
    w = (torch.randn(c, 1, 3, 3, generator=g) / 3).to(dtype).cuda()
    oh, ow = ((s + 2 * pad - 3) // stride + 1 for s in (h, wd))
    assert dwg.why_not(x, w, _channels_last(torch.empty(n, c, oh, ow, dtype=dtype)), (stride, stride), (1, 1)) is None
    _each_config_against_float64(
        dwg.configs(oh, ow, c, x.element_size()) + [_extra_config(dtype)], (n, c, oh, ow), dtype, g,
        lambda y, cfg, a, b, flip, sms: dwg.conv(x, w, y, (pad, pad), cfg, a, b, flip, sms=sms, stride=stride),
        lambda flip: _ref(x, w, pad, flip, stride))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("case", DATA_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_stride2_data_against_float64(case, dtype):
    """The DATA walk (stride-2 backward data): every offered config and a 5-row, 4-image one."""
    need_hopper()
    n, c, h, wd = case
    g = torch.Generator().manual_seed(seed_for(case) % 2**31)
    oh, ow = (h + 1) // 2, (wd + 1) // 2
    dy = _channels_last(torch.randn(n, c, oh, ow, generator=g).to(dtype))
    w = (torch.randn(c, 1, 3, 3, generator=g) / 3).to(dtype).cuda()
    assert dwg.why_not_data(dy, w, _channels_last(torch.empty(n, c, h, wd, dtype=dtype)), (2, 2), (1, 1),
                            (1, 1)) is None
    _each_config_against_float64(
        dwg.configs(oh, ow, c, dy.element_size(), data=True) + [_extra_config(dtype, data=True)], (n, c, h, wd),
        dtype, g, lambda dx, cfg, a, b, flip, sms: dwg.conv_data(dy, w, dx, cfg, a, b, flip, sms=sms),
        lambda flip: _ref_data(dy, w, (h, wd), flip))


@pytest.fixture
def launches(monkeypatch):
    """The walker's launches, counted (a forced config must run the walker, not a fallback)."""
    seen = []
    real = dwg.launch
    monkeypatch.setattr(dwg, "launch", lambda *a, **k: (seen.append(1), real(*a, **k)))
    return seen


def _each_forced(direction, algo, p, dtype, rng, cfgs, force, launches):
    """Each config as the only candidate (``force(cfg)`` installs it and a fresh tuner):
    integer data, exact against float64, cross-correlation and convolution with alpha/beta;
    the walker ran both times."""
    assert cfgs
    for cfg in cfgs:
        force(cfg)
        before = len(launches)
        assert run_case(direction, algo, p, dtype, "NHWC", rng, n=3, device="cuda") is None
        assert run_case(direction, algo, p, dtype, "NHWC", rng, n=3, device="cuda",
                        mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5) is None
        assert len(launches) == before + 2, cfg


STRIDE1 = [P(32, 32, (15, 20), 3, 1, 1, groups=32), P(144, 144, (14, 9), 3, 1, 1, groups=144),
           P(24, 24, (7, 7), 3, 1, 0, groups=24)]
STRIDE2 = [P(96, 96, (14, 20), 3, 2, 1, groups=96), P(144, 144, (9, 8), 3, 2, 1, groups=144),
           P(24, 24, (7, 6), 3, 2, 0, groups=24)]
STRIDE2_DATA = [P(96, 96, (14, 20), 3, 2, 1, groups=96), P(144, 144, (9, 7), 3, 2, 1, groups=144)]


@pytest.mark.gpu
@pytest.mark.parametrize("p", STRIDE1 + STRIDE2, ids=lambda p: p["name"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_gpu_forced_through_the_api(p, dtype, rng, monkeypatch, launches):
    """Forward through DIRECT at stride 1 (its 3x3 row list) and 2 (its strided list): each
    offered config forced."""
    need_hopper()
    from tridnn.cuda import common
    stride = p["stride"][0]
    candidates = "fwd_dw3_candidates" if stride == 1 else "dw2d_candidates"

    def force(cfg):
        monkeypatch.setattr(type(DIRECT), "tuner", common.Tuner())
        monkeypatch.setattr(conv_direct, candidates, lambda *a, **k: [cfg])
    oh, ow = ((s + 2 * p["pad"][0] - 3) // stride + 1 for s in p["spatial"])
    cfgs = dwg.configs(oh, ow, p["C"], 4 if dtype == "float32" else 2)
    _each_forced("fwd", DIRECT, p, dtype, rng, cfgs, force, launches)


@pytest.mark.gpu
@pytest.mark.parametrize("p", STRIDE1 + STRIDE2_DATA, ids=lambda p: p["name"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_gpu_backward_data_forced_through_the_api(p, dtype, rng, monkeypatch, launches):
    """Depthwise backward data (ALGO_1): at stride 1 the forward walk over dy with the filter
    turned (dx's size), at stride 2 the DATA walk (dy's size); each offered config forced."""
    need_hopper()
    from tridnn.cuda import common, conv_depthwise_backward as bwd
    isz = 4 if dtype == "float32" else 2
    if p["stride"][0] == 1:
        candidates, cfgs = "rows3_data_candidates", dwg.configs(*p["spatial"], p["C"], isz)
    else:
        candidates = "phase_data_candidates"
        cfgs = dwg.configs(*((s + 1) // 2 for s in p["spatial"]), p["C"], isz, data=True)

    def force(cfg):
        monkeypatch.setattr(bwd, "_data_tuner", common.Tuner())
        monkeypatch.setattr(bwd, candidates, lambda *a, **k: [cfg])
    algo = registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)
    _each_forced("bwd_data", algo, p, dtype, rng, cfgs, force, launches)
