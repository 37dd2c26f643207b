"""FMA variants of the Gluon convolution kernels (gluon_conv, gluon_conv_strided,
gluon_dgrad_fused): float32 data under FMA math, IEEE products on the CUDA cores.

Offered only for float32 problems under FMA math (input_precision "ieee"): TENSOR_OP gets
the TF32 configs (test_gluon_tf32), DEFAULT stays with conv_tma's 3xTF32.

CPU: the configs (128-pixel boxes, 8 consumer warps, BLOCK_K 32), the candidate lists
(forward at stride 1 and s, backward data at stride 1 and through the phases; not under
DEFAULT or TENSOR_OP math, nor with FMA_OFFERED off), the launchers' refusals of a config
of another math, prepare's arguments, and every config's sm_90 compile (SASS: FFMA and
LDS.128 counts per k-step, no MMA, no spills) plain, with beta and with the fused
epilogue, and the one-launch strided backward data.
GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_fma.py``): each config launched
directly against float64 (random data: float32 tolerance), forced through the public API
under FMA math (integer data: exact), and the configs against conv_tma's reference.
"""
import re
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gc = pytest.importorskip("tridnn.cuda.gluon_conv", reason="Triton without Gluon")
gs = pytest.importorskip("tridnn.cuda.gluon_conv_strided", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import common, conv_tma, gluon_common  # noqa: E402
from tridnn.cuda import conv_bwd_data_implicit_gemm as bwd  # noqa: E402
from tridnn.cuda import conv_implicit_gemm as fwd  # noqa: E402
from tridnn.testing import seed_for  # noqa: E402

from gluon_helpers import compile_in_child, force_one_config, need_hopper  # noqa: E402
from test_cuda_conv import P, run_case  # noqa: E402

M = tridnn.MathType
CUDA = types.SimpleNamespace(type="cuda", index=0)
ALGO = {"fwd": registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM),
        "bwd_data": registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)}
TORCH_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _problem(direction, c, k, hw, kernel, stride=1, pad=0, n=4, dtype="float32", math=M.FMA):
    """A 2-D NHWC ConvProblem and CPU tensors (x, w, y)."""
    cd = tridnn.ConvolutionDescriptor(padding=(pad, pad), stride=(stride, stride), math_type=math)
    xd = tridnn.TensorDescriptor.packed((n, c, hw, hw), dtype, tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((k, c, kernel, kernel), dtype, tridnn.TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    t = [torch.empty(d.dims, dtype=TORCH_DT[dtype]).contiguous(memory_format=torch.channels_last)
         for d in (xd, wd, yd)]
    return ConvProblem(direction, xd, wd, yd, cd), *t


@pytest.fixture(autouse=True)
def offered(monkeypatch):
    """The offers switched on whatever TRIDNN_GLUON_FMA / TRIDNN_GLUON_TF32 say."""
    monkeypatch.setattr(gc, "FMA_OFFERED", True)
    monkeypatch.setattr(gc, "TF32_OFFERED", True)


@pytest.fixture
def hopper(monkeypatch):
    """Build the GPU lists on the host: a stand-in Hopper with 132 SMs."""
    monkeypatch.setattr(gc, "_hopper", lambda device: device.type == "cuda")
    # the images-inner configs in the lists (test_images_inner_can_be_withdrawn: switched off)
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_OFFERED", True)
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)


def _candidates(direction, problem, x, w, y):
    if direction == "fwd":
        return gc.forward_candidates(problem, x, w, y, None, CUDA)
    return gc.backward_data_candidates(problem, y, w, x, CUDA)


# -- CPU: the configs ---------------------------------------------------------------------
@pytest.mark.parametrize("cfg", gc.FMA_CONFIGS, ids=gc.name)
def test_fma_config_shape(cfg):
    """128 output pixels by 64 or 128 channels, one 8-warp consumer (each thread an 8 x 8 or
    8 x 4 block of accumulators), BLOCK_K 32 (128-byte rows), one program an SM; the ring
    and the float32 output tile within the SM's shared memory."""
    assert cfg["FMA"] is True and not cfg.get("TF32") and gc.float32_data(cfg)
    assert cfg["NB"] * cfg["BH"] * cfg["BW"] == 128 and cfg["BLOCK_N"] in (64, 128)
    assert cfg["num_warps"] == 8 and cfg["BLOCK_K"] == 32 and cfg["PER_SM"] == 1 and not cfg["PINGPONG"]
    assert gc.shared_bytes(cfg) == 4 * (cfg["STAGES"] * (128 + cfg["BLOCK_N"]) * 32 + 128 * cfg["BLOCK_N"])
    assert gc.shared_bytes(cfg) + 2048 <= 227 * 1024
    assert gc.name(cfg).endswith(" fma") and gc.constexprs(cfg)[0]["FMA"] is True
    assert gc.constexprs(dict(cfg, FMA=False, TF32=True))[0]["FMA"] is False


def test_fma_configs_are_every_pick_once():
    names = [gc.name(c) for c in gc.FMA_CONFIGS]
    assert len(names) == len(set(names))
    picked = {gc.name(c) for ow in (112, 56, 28, 20, 14, 9, 7, 3) for k in (8, 64, 65, 2048)
              for flat in (False, True) for c in gc.fma_picks(ow, k, flat)}
    assert picked == set(names)
    assert [gc.name(c) for c in gs.FMA_CONFIGS] == [n for c, n in zip(gc.FMA_CONFIGS, names)
                                                      if not (c["NB"] == 1 and c["BH"] == 1)]


@pytest.mark.parametrize("out_w,k,flat,boxes,bn", [
    (56, 64, False, [(2, 8, 8), (16, 1, 8)], 64),        # res2_3x3
    (28, 128, False, [(1, 4, 32), (16, 1, 8)], 128),     # res3_3x3
    (60, 128, False, [(1, 4, 32), (16, 1, 8)], 128),
    (14, 256, False, [(4, 2, 16), (16, 1, 8)], 128),     # res4_3x3
    (7, 512, False, [(16, 1, 8), (2, 8, 8)], 128),       # res5_3x3
    (56, 256, True, [(1, 1, 128)], 128),                 # res2_1x1c: the flat GEMM view
    (14, 8, True, [(1, 1, 128)], 64),
])
def test_fma_picks(out_w, k, flat, boxes, bn):
    got = gc.fma_picks(out_w, k, flat)
    assert [(c["NB"], c["BH"], c["BW"]) for c in got] == boxes
    assert all(c["BLOCK_N"] == bn and c["FMA"] for c in got)


# -- CPU: the candidate lists -------------------------------------------------------------
@pytest.mark.parametrize("c,hw,kernel,pad", [(64, 56, 3, 1), (128, 28, 3, 1), (256, 14, 3, 1), (512, 7, 3, 1),
                                             (256, 14, 1, 0), (64, 28, 1, 1)])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_offered_for_fma_float32(direction, c, hw, kernel, pad, hopper):
    problem, x, w, y = _problem(direction, c, c, hw, kernel, pad=pad, n=64)
    got = _candidates(direction, problem, x, w, y)
    flat = kernel == 1 and pad == 0
    assert [gc.name(g) for g in got] == [gc.name(g) for g in gc.fma_picks(hw, c, flat)]
    assert all(g["GLUON"] and g["FMA"] and not g.get("TF32") for g in got)
    # float16 under FMA math: the 16-bit picks (the math type does not matter for half data)
    problem, x, w, y = _problem(direction, c, c, hw, kernel, pad=pad, n=64, dtype="float16")
    assert [gc.name(g) for g in _candidates(direction, problem, x, w, y)] == [
        gc.name(g) for g in gc.picks(hw, c, flat, n=64)]


@pytest.mark.parametrize("c,k,hw,kernel,pad,out_w", [
    (128, 128, 56, 3, 1, 28), (256, 256, 28, 3, 1, 14), (512, 512, 14, 3, 1, 7), (512, 1024, 28, 1, 0, 14)])
def test_offered_at_stride_2_for_fma(c, k, hw, kernel, pad, out_w, hopper):
    problem, x, w, y = _problem("fwd", c, k, hw, kernel, stride=2, pad=pad, n=64)
    got = gc.forward_candidates(problem, x, w, y, None, CUDA)
    assert [gc.name(g) for g in got] == [gc.name(g) for g in gc.fma_picks(out_w, k, False)]
    assert all(g["GLUON"] and g["FMA"] for g in got)
    problem, x, w, y = _problem("bwd_data", c, k, hw, kernel, stride=2, pad=pad, n=64)
    got = gc.backward_data_candidates(problem, y, w, x, CUDA)
    assert [gc.name(g) for g in got] == [gc.name(g) for g in gc.fma_picks(out_w, c, False)]


@pytest.mark.parametrize("math", [M.DEFAULT, M.TENSOR_OP, M.TENSOR_OP_ALLOW_CONVERSION], ids=lambda m: m.name)
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_not_offered_under_other_math(direction, stride, math, hopper):
    """DEFAULT: nothing (3xTF32 stays with conv_tma); TENSOR_OP: the TF32 configs only."""
    problem, x, w, y = _problem(direction, 128, 128, 28, 3, stride=stride, pad=1, n=8, math=math)
    got = _candidates(direction, problem, x, w, y)
    assert not any(g.get("FMA") for g in got)
    assert bool(got) == (math != M.DEFAULT) and all(g["TF32"] for g in got)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_switched_off_by_the_module_flag(direction, hopper, monkeypatch):
    problem, x, w, y = _problem(direction, 128, 128, 28, 3, pad=1, n=8)
    assert _candidates(direction, problem, x, w, y)
    monkeypatch.setattr(gc, "FMA_OFFERED", False)
    assert _candidates(direction, problem, x, w, y) == []
    assert "FMA_OFFERED" in (gc.forward_why_not(problem, x, w, y) if direction == "fwd"
                             else gc.backward_data_why_not(problem, y, w, x))


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_fma_configs_come_after_conv_tmas(direction, hopper):
    """The tuner's reference stays conv_tma's first config (its Triton FMA dot) and
    cross-checks the Gluon FMA configs, which come last."""
    problem, x, w, y = _problem(direction, 256, 256, 14, 3, pad=1, n=64)
    if direction == "fwd":
        plan = conv_tma.plan_forward(problem, x, w, y)
        cands = fwd.tma_forward_candidates(plan, problem, x, w, y, None, device=CUDA)
    else:
        plan = conv_tma.plan_backward_data(problem, y, w, x)
        cands = bwd.tma_candidates(plan, problem, y, w, x, device=CUDA)
    base = conv_tma.candidates(plan, CUDA, problem)
    assert cands[:len(base)] == base and not any(c.get("GLUON") for c in base)
    assert [gc.name(c) for c in cands[len(base):]] == [gc.name(c) for c in gc.fma_picks(14, 256, False)]


# -- CPU: the launchers refuse what the config or the math does not allow -------------------
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_launchers_refuse_configs_of_another_math(direction, stride, monkeypatch):
    """launch_forward / launch_backward_data return False (nothing launched; the caller runs
    conv_tma's reference config) for an FMA config under TENSOR_OP or DEFAULT math or on
    16-bit data, and for a TF32 or 16-bit config under FMA math."""
    def no_launch(*a, **k):
        raise AssertionError("launched")
    monkeypatch.setattr(gc, "launch", no_launch)
    monkeypatch.setattr(gc, "prepare", no_launch)
    fma = dict(gc.FMA_CONFIGS[0], GLUON=True)
    t32 = dict(gc.TF32_OF[gc.name(gc.PICKS_LARGE[0])], GLUON=True)
    b16 = dict(gc.PICKS_LARGE[0], GLUON=True)
    cases = [(fma, dict(math=M.TENSOR_OP)), (fma, dict(math=M.DEFAULT)), (fma, dict(dtype="bfloat16")),
             (t32, {}), (b16, {})]
    for cfg, kw in cases:
        problem, x, w, y = _problem(direction, 128, 128, 28, 3, stride=stride, pad=1, n=2, **kw)
        if direction == "fwd":
            assert gc.launch_forward(problem, x, w, y, 1.0, 0.0, cfg) is False, (gc.name(cfg), kw)
        else:
            assert gc.launch_backward_data(problem, y, w, x, 1.0, 0.0, cfg) is False, (gc.name(cfg), kw)


def test_prepare_fma_arguments():
    x = torch.zeros(2, 128, 14, 14).to(memory_format=torch.channels_last)
    w = torch.zeros(128, 128, 3, 3)
    cfg = gc.fma_picks(14, 128, False)[0]
    grid, args, meta, y = gc.prepare(x, w, cfg=cfg, sms=132)
    a = dict(zip(gc.gluon_conv_fwd_kernel.arg_names, args))
    assert y.dtype == torch.float32 and meta["FMA"] is True and meta["BLOCK_K"] == 32
    assert a["K_STEPS"] == 9 * 4 and list(a["x_desc"].block_shape) == [cfg["NB"], cfg["BH"], cfg["BW"], 32]
    assert a["x_desc"].layout.swizzle_byte_width == 128  # a warp's 8 rows in distinct banks
    with pytest.raises(ValueError, match="float32"):
        gc.prepare(x.bfloat16(), w.bfloat16(), cfg=cfg, sms=132)


# -- CPU: offline sm_90 compiles -------------------------------------------------------------
VARIANTS = {"plain": {}, "beta": dict(has_beta=True), "relu+bias+z": dict(act=1, has_bias=True, has_z=True)}
COMPILES = ([("gc", c, v) for c in gc.FMA_CONFIGS for v in VARIANTS]
            + [("gs", c, v) for c in gs.FMA_CONFIGS for v in ("plain", "beta")]
            + [("fused", c, v) for c in gs.FMA_CONFIGS for v in ("plain", "beta")])
MODULES = {"gc": "tridnn.cuda.gluon_conv", "gs": "tridnn.cuda.gluon_conv_strided",
           "fused": "tridnn.cuda.gluon_dgrad_fused"}


@pytest.fixture(scope="module")
def sm90():
    calls = [(MODULES[m], "compile_sm90", c, dict(VARIANTS[v])) for m, c, v in COMPILES]
    facts = compile_in_child(calls)
    return {(m, gc.name(c), v): f for (m, c, v), f in zip(COMPILES, facts)}


@pytest.mark.parametrize("mod,cfg,variant", COMPILES, ids=lambda v: v if isinstance(v, str) else gc.name(v))
def test_compiles_for_sm90_as_fma(mod, cfg, variant, sm90):
    """The main loop on the CUDA cores: per 32-channel k-step each thread runs
    BLOCK_M * BLOCK_N * 32 / 256 FFMA and loads its 8 rows of x and BLOCK_N / 16 filter rows
    as 16-byte vectors (LDS.128, 8 per row); no MMA of any kind; registers within the cap,
    no spills; the TMA loads and store."""
    f = sm90[(mod, gc.name(cfg), variant)]
    code, regs = f["sass"], f["regs"]
    ffma = len(re.findall(r"\bFFMA\b", code))
    per_step = 128 * cfg["BLOCK_N"] * 32 // 256
    assert per_step <= ffma <= per_step + 128, (ffma, per_step)  # (the epilogue's few besides)
    lds = len(re.findall(r"\bLDS\.128\b", code))
    want_lds = (128 // 16 + cfg["BLOCK_N"] // 16) * (32 // 4)
    assert want_lds <= lds <= want_lds + 4, (lds, want_lds)
    assert not re.search(r"\b(HGMMA|HMMA|IMMA)\b", code), "no MMA"
    assert not re.search(r"\b(STL|LDL)\b", code), "register spills"
    cap = gc.constexprs(cfg)[1]
    assert regs <= cap
    assert "UTMALDG" in code and "UTMASTG" in code
    assert f["shared"] >= gc.shared_bytes(cfg)


# -- GPU: each FMA config against float64 ----------------------------------------------------
# float32 products and sums in k order: the error grows like sqrt(K) * 2^-24 of the terms'
# size; 2e-5 of max |result| leaves a wide margin at K <= 4608 (the TF32 configs need 5e-3).
FMA_TOL = 2e-5

GPU_CASES = [  # (N, C, K, H, W, KH, KW, pad, dil): stride 1
    (2, 64, 64, 56, 56, 3, 3, 1, 1),
    (3, 128, 128, 28, 28, 3, 3, 1, 1),
    (5, 512, 512, 7, 7, 3, 3, 1, 1),     # K = 4608
    (1, 64, 200, 13, 21, 3, 3, 1, 1),    # ragged, K not a multiple of BLOCK_N
    (2, 128, 64, 17, 9, 5, 3, 2, 1),     # 5x3, padding 2
    (2, 64, 128, 20, 20, 3, 3, 2, 2),    # dilation 2
    (1, 256, 136, 1, 1000, 1, 1, 0, 1),  # a GEMM: one row of 1000 pixels (flat boxes)
]
STRIDED_GPU_CASES = [  # (N, C, K, H, W, KH, KW, pad, stride)
    (2, 128, 128, 56, 56, 3, 3, 1, 2),
    (3, 192, 136, 14, 14, 1, 1, 0, 2),
    (1, 64, 64, 18, 12, 3, 3, 1, 3),
]
_REFS = {}


def _data(case, strided=False):
    if (case, strided) not in _REFS:
        n, c, k, h, w_, kh, kw, pad, d = case
        g = torch.Generator().manual_seed(seed_for(case) % 2**31)
        x = torch.randn(n, c, h, w_, generator=g)
        w = torch.randn(k, c, kh, kw, generator=g) / np.sqrt(c * kh * kw)
        kwargs = dict(stride=d, padding=pad) if strided else dict(padding=pad, dilation=d)
        _REFS[case, strided] = (x, w, torch.nn.functional.conv2d(x.double(), w.double(), **kwargs))
    return _REFS[case, strided]


def _rel(got, want) -> float:
    return ((got.double().cpu() - want).abs().max() / want.abs().max()).item()


def _check_direct(case, cfg, strided):
    x, w, ref = _data(case, strided)
    n, c, k, h, w_, kh, kw_, pad, d = case
    xd, wd = x.cuda().to(memory_format=torch.channels_last), w.cuda()

    def run(**kw):
        if strided:
            return gs.conv2d(xd, wd, (d, d), (pad, pad), cfg=cfg, **kw)
        return gc.conv2d(xd, wd, (pad, pad), (d, d), cfg=cfg, **kw)
    for alpha, sms in ((1.0, None), (0.5, 3)):  # all SMs; 3 programs walking many tiles
        y = run(alpha=alpha, sms=sms)
        torch.cuda.synchronize()
        assert y.dtype == torch.float32 and torch.isfinite(y).all()
        assert _rel(y, alpha * ref) < FMA_TOL, (gc.name(cfg), alpha, sms)
    g = torch.Generator().manual_seed(7)
    old, z = torch.randn(ref.shape, generator=g), torch.randn(ref.shape, generator=g)
    bias = torch.randn(ref.shape[1], generator=g)
    y = old.cuda().to(memory_format=torch.channels_last)
    run(alpha=0.5, sms=3, y=y, beta=0.75)
    torch.cuda.synchronize()
    assert _rel(y, 0.5 * ref + 0.75 * old.double()) < FMA_TOL, (gc.name(cfg), "beta")
    zd = z.cuda().to(memory_format=torch.channels_last)
    want = torch.relu(0.5 * ref + 0.25 * z.double() + bias.double()[None, :, None, None])
    y = run(alpha=0.5, sms=3, epilogue=(bias.cuda(), zd, 0.25, 1, 0.0, 1.0))
    torch.cuda.synchronize()
    assert _rel(y, want) < FMA_TOL, (gc.name(cfg), "relu+bias+z")


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gc.FMA_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_against_float64(case, cfg):
    need_hopper()
    _check_direct(case, cfg, strided=False)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gs.FMA_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("case", STRIDED_GPU_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_strided_against_float64(case, cfg):
    need_hopper()
    _check_direct(case, cfg, strided=True)


# -- GPU: every FMA config forced through the public API (FMA math) -------------------------
API_CASES = [
    P(64, 64, (7, 7), 3, 1, 1),
    P(64, 128, (14, 14), 3, 1, 1),
    P(128, 64, (9, 11), (5, 3), 1, (2, 1)),
    P(64, 192, (6, 5), 1),                   # 1x1: the flat GEMM view
]
STRIDED_API_CASES = [
    P(64, 128, (14, 14), 3, 2, 1),
    P(128, 64, (12, 10), 1, 2, 0),           # 1x1 stride 2
    P(64, 72, (18, 9), 3, 3, 1),             # stride 3; 72 output channels
]
STRIDED_DGRAD_API_CASES = [  # backward data (dx's channels a multiple of 128: the one-launch path too)
    P(128, 64, (14, 14), 3, 2, 1),
    P(128, 128, (13, 11), 3, 2, 1),          # odd sizes: phases of unequal extents
]


@pytest.fixture
def forced(monkeypatch):
    return force_one_config(monkeypatch)


def _api(direction, p, rng, forced, launches, **kw):
    """run_case under FMA math (integer data: float32 products and sums are exact, so the
    result must equal the float64 reference exactly); ``launches`` Gluon launches."""
    before = forced.launches
    assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=3, device="cuda", math=M.FMA,
                    **kw) is None
    assert forced.launches == before + launches, "the Gluon kernel ran"


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gc.FMA_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("p", API_CASES, ids=lambda p: p["name"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_forced_fma_config_against_float64(direction, p, cfg, rng, forced):
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    _api(direction, p, rng, forced, 1)
    _api(direction, p, rng, forced, 1, mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5)
    _api(direction, p, rng, forced, 1)  # again: through the launch record


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gs.FMA_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("p", STRIDED_API_CASES, ids=lambda p: p["name"])
def test_gpu_forced_strided_fma_config_against_float64(p, cfg, rng, forced):
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    _api("fwd", p, rng, forced, 1)
    _api("fwd", p, rng, forced, 1, mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False], ids=["one-launch", "a-launch-a-phase"])
@pytest.mark.parametrize("cfg", gs.FMA_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("p", STRIDED_DGRAD_API_CASES, ids=lambda p: p["name"])
def test_gpu_forced_strided_backward_data_fma_against_float64(p, cfg, fused, rng, forced, monkeypatch):
    need_hopper()
    from tridnn.cuda import gluon_dgrad_fused
    monkeypatch.setattr(gluon_dgrad_fused, "FUSED_PHASES", fused)
    forced.cfg = dict(cfg, GLUON=True)
    s = p["stride"]
    one = fused and all(size % st == 0 for size, st in zip(p["spatial"], s))  # (gluon_dgrad_fused.why_not)
    launches = 1 if one else s[0] * s[1]
    _api("bwd_data", p, rng, forced, launches)
    _api("bwd_data", p, rng, forced, launches, mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_fma_configs_agree_with_conv_tmas_reference(direction, stride):
    """Every offered FMA config launched on random data agrees with conv_tma's first config
    (its Triton FMA dot) within common.agrees' float32 tolerance: the tuner keeps them."""
    need_hopper()
    problem, x, w, y = _problem(direction, 128, 128, 28, 3, stride=stride, pad=1, n=8)
    g = torch.Generator().manual_seed(5)
    x, w, y = (torch.randn(t.shape, generator=g).cuda().contiguous(memory_format=torch.channels_last)
               for t in (x, w, y))
    if direction == "fwd":
        plan = conv_tma.plan_forward(problem, x, w, y)
        cands = fwd.tma_forward_candidates(plan, problem, x, w, y, None)
        run = lambda cfg, out: fwd.launch_tma_forward(plan, problem, x, w, out, 1.0, 0.0, cfg)  # noqa: E731
        launch_gluon = lambda cfg, out: gc.launch_forward(problem, x, w, out, 1.0, 0.0, cfg)  # noqa: E731
        out_like = y
    else:
        plan = conv_tma.plan_backward_data(problem, y, w, x)
        cands = bwd.tma_candidates(plan, problem, y, w, x)
        run = lambda cfg, out: bwd.launch_tma(plan, problem, y, w, out, 1.0, 0.0, cfg)  # noqa: E731
        launch_gluon = lambda cfg, out: gc.launch_backward_data(problem, y, w, out, 1.0, 0.0, cfg)  # noqa: E731
        out_like = x
    gluon = [c for c in cands if c.get("GLUON")]
    assert gluon and all(c["FMA"] for c in gluon) and not cands[0].get("GLUON")
    ref = torch.empty_like(out_like)
    run(cands[0], ref)
    for cfg in gluon:
        out = torch.full_like(out_like, float("nan"))
        assert launch_gluon(cfg, out), gc.name(cfg)
        torch.cuda.synchronize()
        assert common.agrees(out, ref), (gc.name(cfg), ((out - ref).norm() / ref.norm()).item())
