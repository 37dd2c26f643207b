"""float32 (tf32) variants of the Gluon forward kernels (gluon_conv, gluon_conv_strided).

Offered only for float32 problems under TENSOR_OP math (input_precision "tf32"): tridnn's
DEFAULT float32 is 3xTF32 (float32-accurate) and FMA is strict IEEE, so plain tf32 there
would be a silent precision loss.

CPU: the TF32 configs derive from the 16-bit picks (BLOCK_K 32, stages that fit the
float32 output tile), the candidate lists (offered for TENSOR_OP float32 in every path:
forward at stride 1 and s, backward data at stride 1 and through the phases; not for
DEFAULT, FMA, mixed dtypes, or with TF32_OFFERED off), the launchers' refusals, prepare's
arguments, and every config's sm_90 compile (SASS: HGMMA ... F32.TF32 and their count per
k-step, no register spills, the setmaxnreg split, TMA) plain, with beta and with the fused
epilogue.
GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_tf32.py``): each config launched
directly against float64 (random data: tf32 tolerance) and forced through the public API
under TENSOR_OP math (integer data: exact), and a TF32 pick under DEFAULT math falling
back to conv_tma.
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
from tridnn.cuda.epilogue import EpilogueSpec  # noqa: E402
from tridnn.descriptors.activation import ActivationMode  # noqa: E402
from tridnn.testing import seed_for  # noqa: E402

from gluon_helpers import compile_in_child, force_one_config, need_hopper  # noqa: E402
from test_cuda_conv import P, run_case  # noqa: E402

M = tridnn.MathType
TENSOR_OPS = [M.TENSOR_OP, M.TENSOR_OP_ALLOW_CONVERSION]
CUDA = types.SimpleNamespace(type="cuda", index=0)
ALGO = {"fwd": registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM),
        "bwd_data": registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)}
HALF_PICKS = list({gc.name(c): c for c in gc.PICKS_NARROW + gc.PICKS_LARGE + gc.PICKS_MEDIUM + gc.PICKS_SMALL
                   + gc.PICKS_FLAT}.values())
TORCH_DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def _problem(direction, c, k, hw, kernel, stride=1, pad=0, n=4, dtype="float32", math=M.TENSOR_OP,
             dtypes=None):
    """A 2-D NHWC ConvProblem and CPU tensors (x, w, y); dtypes: the tensors' own torch
    dtypes (x, w, y) where they should differ from the descriptors'."""
    cd = tridnn.ConvolutionDescriptor(padding=(pad, pad), stride=(stride, stride), math_type=math)
    xd = tridnn.TensorDescriptor.packed((n, c, hw, hw), dtype, tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((k, c, kernel, kernel), dtype, tridnn.TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    dts = dtypes or (TORCH_DT[dtype],) * 3
    t = [torch.empty(d.dims, dtype=dt).contiguous(memory_format=torch.channels_last) for d, dt in zip((xd, wd, yd), dts)]
    return ConvProblem(direction, xd, wd, yd, cd), *t


@pytest.fixture(autouse=True)
def offered(monkeypatch):
    """The offer switched on whatever TRIDNN_GLUON_TF32 says (it is on by default;
    test_switched_off_by_the_module_flag turns it off)."""
    monkeypatch.setattr(gc, "TF32_OFFERED", True)


@pytest.fixture
def hopper(monkeypatch):
    """Build the GPU lists on the host: a stand-in Hopper with 132 SMs."""
    monkeypatch.setattr(gc, "_hopper", lambda device: device.type == "cuda")
    # the images-inner configs in the lists, at every stride
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_OFFERED", True)
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_STRIDED", True)
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)


def _candidates(direction, problem, x, w, y):
    if direction == "fwd":
        return gc.forward_candidates(problem, x, w, y, None, CUDA)
    return gc.backward_data_candidates(problem, y, w, x, CUDA)


# -- CPU: the configs ---------------------------------------------------------------------
@pytest.mark.parametrize("cfg", HALF_PICKS, ids=gc.name)
def test_tf32_config_derives_from_the_16_bit_pick(cfg):
    """Same tile, warps, programs an SM and ping-pong; BLOCK_K 32 (128 bytes a row, as 64
    bf16 values); the most stages, up to the 16-bit config's, that fit PER_SM programs an
    SM next to the float32 output tile(s)."""
    t = gc.TF32_OF[gc.name(cfg)]
    for key in ("NB", "BH", "BW", "BLOCK_N", "num_warps", "PER_SM", "PINGPONG"):
        assert t[key] == cfg[key], key
    assert t["TF32"] is True and t["BLOCK_K"] == 32 and "TF32" not in cfg
    assert t["BLOCK_K"] * 4 == cfg["BLOCK_K"] * 2  # the same bytes a ring slot
    assert 2 <= t["STAGES"] <= cfg["STAGES"]
    per_program = 228 * 1024 // t["PER_SM"] - 1024  # (1 KB of each program's share is the driver's)
    assert gc.shared_bytes(t) + 1024 <= min(per_program, 227 * 1024)
    assert gc.shared_bytes(t) == 4 * (t["STAGES"] * (t["NB"] * t["BH"] * t["BW"] + t["BLOCK_N"]) * 32
                                      + (2 if t["PINGPONG"] else 1) * t["NB"] * t["BH"] * t["BW"] * t["BLOCK_N"])
    if t["STAGES"] < cfg["STAGES"]:  # cut only as far as needed
        assert gc.shared_bytes(dict(t, STAGES=t["STAGES"] + 1)) + 1024 > min(per_program, 227 * 1024)
    assert gc.name(t) != gc.name(cfg) and gc.name(t).endswith(" tf32")


def test_strided_tf32_configs_are_the_same_variants():
    assert [gs.name(c) for c in gs.TF32_CONFIGS] == [gc.name(gc.TF32_OF[gs.name(c)]) for c in gs.CONFIGS]
    assert {gs.name(c) for c in gs.TF32_CONFIGS} <= {gc.name(c) for c in gc.TF32_CONFIGS}
    for ow, k in ((28, 128), (14, 256), (7, 512), (28, 64)):
        want = gc.with_tf32_extra(gs.picks(ow, k), True)   # the 16-bit picks, then TF32_EXTRA's they lack
        want = [gc.TF32_OF[gs.name(c)] for c in want if c["BLOCK_N"] <= max(64, k)]
        assert [gs.name(c) for c in gs.picks(ow, k, tf32=True)] == [gc.name(c) for c in want]


def test_tf32_extra_is_offered_at_every_width_for_float32_only():
    """TF32_EXTRA's config (the tf32 sweep's best at stride 2) follows every image-box pick
    list for float32, once; the 16-bit lists stay as they were."""
    extra = gc.name(gc.TF32_OF[gc.name(gc.TF32_EXTRA[0])])
    for ow in (56, 28, 14, 7):
        for tf32_names in ([gc.name(c) for c in gs.picks(ow, 256, tf32=True)],
                           [gc.name(c) for c in gc.picks(ow, 256, False, tf32=True)]):
            assert tf32_names.count(extra) == 1, (ow, tf32_names)
        assert [gc.name(c) for c in gs.picks(ow, 256)] == [gc.name(c) for c in (
            gc.PICKS_LARGE if ow >= 28 else gc.PICKS_MEDIUM if ow >= 14 else gc.PICKS_SMALL)]
    assert extra not in [gc.name(c) for c in gc.picks(14, 256, True, tf32=True)]   # flat GEMM view: its own list


# -- CPU: the candidate lists -------------------------------------------------------------
@pytest.mark.parametrize("c,hw,kernel,pad,want", [
    (64, 56, 3, 1, gc.PICKS_NARROW),     # res2_3x3
    (128, 28, 3, 1, gc.PICKS_LARGE),     # res3_3x3
    (256, 14, 3, 1, gc.PICKS_MEDIUM),    # res4_3x3
    (512, 7, 3, 1, gc.PICKS_SMALL),      # res5_3x3
    (256, 14, 1, 0, gc.PICKS_FLAT),      # 1x1: the flat GEMM view
    (128, 28, 1, 0, gc.PICKS_FLAT[:2]),  # 1x1 into 128 channels: no 256-wide tile
])
@pytest.mark.parametrize("math", TENSOR_OPS, ids=lambda m: m.name)
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_offered_for_tensor_op_float32(direction, math, c, hw, kernel, pad, want, hopper):
    problem, x, w, y = _problem(direction, c, c, hw, kernel, pad=pad, n=64, math=math)
    got = _candidates(direction, problem, x, w, y)
    # batch 64: the images-inner tile of 64 images at two pixels where a map is >= 14 wide
    inner = [] if kernel == 1 or c <= 64 or hw < 14 else gc.PICKS_INNER
    want32 = (want if kernel == 1 or c <= 64 else gc.with_tf32_extra(want, True)) + inner
    want = want + inner
    assert [gc.name(g) for g in got] == [gc.name(gc.TF32_OF[gc.name(g)]) for g in want32]
    assert all(g["GLUON"] and g["TF32"] and g["BLOCK_K"] == 32 for g in got)
    # the same layer in float16 under the same math: the 16-bit picks (the math type does
    # not matter for half data)
    problem, x, w, y = _problem(direction, c, c, hw, kernel, pad=pad, n=64, math=math, dtype="float16")
    assert [gc.name(g) for g in _candidates(direction, problem, x, w, y)] == [gc.name(g) for g in want]


@pytest.mark.parametrize("c,k,hw,kernel,pad,out_w", [
    (128, 128, 56, 3, 1, 28),   # res3_3x3s2
    (256, 256, 28, 3, 1, 14),   # res4_3x3s2
    (512, 512, 14, 3, 1, 7),    # res5_3x3s2
    (512, 1024, 28, 1, 0, 14),  # res4_ds (1x1 stride 2: three phases of backward data without taps)
])
def test_offered_at_stride_2_for_tensor_op_float32(c, k, hw, kernel, pad, out_w, hopper):
    """Forward: gluon_conv_strided's TF32 picks (with images-inner ones where 64 images
    fill their tiles); backward data: the phase kernels'."""
    problem, x, w, y = _problem("fwd", c, k, hw, kernel, stride=2, pad=pad, n=64)
    got = gc.forward_candidates(problem, x, w, y, None, CUDA)
    assert got and [gc.name(g) for g in got] == [gs.name(g) for g in gs.picks(out_w, k, tf32=True, n=64)]
    assert any(g.get("IMAGES_INNER") for g in got) == (out_w >= 14)
    assert all(g["GLUON"] and g["TF32"] for g in got)
    problem, x, w, y = _problem("bwd_data", c, k, hw, kernel, stride=2, pad=pad, n=64)
    got = gc.backward_data_candidates(problem, y, w, x, CUDA)
    want = gc.picks(out_w, c, False, tf32=True, n=64)
    assert [gc.name(g) for g in got] == [gc.name(g) for g in want]
    assert all(g["TF32"] for g in got)


@pytest.mark.parametrize("why,kwargs", [
    ("DEFAULT math (3xTF32, float32-accurate)", dict(math=M.DEFAULT)),
    ("x float32, w bfloat16", dict(dtypes=(torch.float32, torch.bfloat16, torch.float32))),
    ("y float16", dict(dtypes=(torch.float32, torch.float32, torch.float16))),
    ("x bfloat16, the rest float32", dict(dtypes=(torch.bfloat16, torch.float32, torch.float32))),
])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_not_offered_elsewhere(direction, stride, why, kwargs, hopper):
    problem, x, w, y = _problem(direction, 128, 128, 28, 3, stride=stride, pad=1, n=8, **kwargs)
    assert _candidates(direction, problem, x, w, y) == [], why
    reason = (gc.forward_why_not(problem, x, w, y) if direction == "fwd"
              else gc.backward_data_why_not(problem, y, w, x))
    assert reason and ("TENSOR_OP" in reason or "math" not in kwargs), reason


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_fma_math_gets_no_tf32_config(direction, stride, hopper, monkeypatch):
    """FMA math (strict float32) is offered the FMA configs (test_gluon_fma), never a TF32
    one; with those switched off, nothing."""
    problem, x, w, y = _problem(direction, 128, 128, 28, 3, stride=stride, pad=1, n=8, math=M.FMA)
    got = _candidates(direction, problem, x, w, y)
    assert got and all(c["FMA"] and not c.get("TF32") for c in got)
    monkeypatch.setattr(gc, "FMA_OFFERED", False)
    assert _candidates(direction, problem, x, w, y) == []
    reason = (gc.forward_why_not(problem, x, w, y) if direction == "fwd"
              else gc.backward_data_why_not(problem, y, w, x))
    assert "FMA" in reason


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_switched_off_by_the_module_flag(direction, hopper, monkeypatch):
    problem, x, w, y = _problem(direction, 128, 128, 28, 3, pad=1, n=8)
    assert _candidates(direction, problem, x, w, y)
    monkeypatch.setattr(gc, "TF32_OFFERED", False)
    assert _candidates(direction, problem, x, w, y) == []
    half = _problem(direction, 128, 128, 28, 3, pad=1, n=8, dtype="bfloat16")
    assert _candidates(direction, *half), "the 16-bit picks stay"


def test_fused_epilogue_offered_with_float32_z(hopper):
    problem, x, w, y = _problem("fwd", 128, 128, 28, 3, pad=1)
    want = [gc.name(gc.TF32_OF[gc.name(c)]) for c in gc.with_tf32_extra(gc.PICKS_LARGE, True)]
    spec = EpilogueSpec(activation=ActivationMode.RELU, bias=torch.zeros(128), z=torch.empty_like(y), alpha2=0.5)
    assert [gc.name(c) for c in gc.forward_candidates(problem, x, w, y, spec, CUDA)] == want
    spec = EpilogueSpec(activation=ActivationMode.RELU, z=torch.empty_like(y).half())  # z of another dtype
    assert gc.forward_candidates(problem, x, w, y, spec, CUDA) == []


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_tf32_configs_come_after_conv_tmas(direction, hopper):
    """The tuner's reference stays conv_tma's first config (tf32 there too) and
    cross-checks the Gluon TF32 configs, which come last."""
    problem, x, w, y = _problem(direction, 256, 256, 14, 3, pad=1, n=64)
    if direction == "fwd":
        plan = conv_tma.plan_forward(problem, x, w, y)
        cands = fwd.tma_forward_candidates(plan, problem, x, w, y, None, device=CUDA)
    else:
        plan = conv_tma.plan_backward_data(problem, y, w, x)
        cands = bwd.tma_candidates(plan, problem, y, w, x, device=CUDA)
    base = conv_tma.candidates(plan, CUDA, problem)
    assert cands[:len(base)] == base and not any(c.get("GLUON") for c in base)
    want = gc.with_tf32_extra(gc.PICKS_MEDIUM, True) + gc.PICKS_INNER  # (64 images at two pixels: n = 64)
    assert [gc.name(c) for c in cands[len(base):]] == [gc.name(gc.TF32_OF[gc.name(c)]) for c in want]


def test_tuner_keys_separate_the_math_types():
    """A pick tuned under TENSOR_OP is never reused for the same layer under DEFAULT or FMA:
    the tuner's key (problem_key) names the math type."""
    keys = {m: common.problem_key(_problem("fwd", 128, 128, 28, 3, pad=1, math=m)[0])
            for m in (M.DEFAULT, M.TENSOR_OP, M.TENSOR_OP_ALLOW_CONVERSION, M.FMA)}
    assert len(set(keys.values())) == 4, keys


# -- CPU: the launchers refuse what the config or the math does not allow -------------------
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_launchers_refuse_mismatched_configs(direction, stride, monkeypatch):
    """launch_forward / launch_backward_data return False (nothing launched; the caller runs
    conv_tma's reference config) for a TF32 config on 16-bit data, a 16-bit config on float32
    data, and a TF32 config on float32 data under DEFAULT or FMA math."""
    def no_launch(*a, **k):
        raise AssertionError("launched")
    monkeypatch.setattr(gc, "launch", no_launch)
    monkeypatch.setattr(gc, "prepare", no_launch)
    t32 = dict(gc.TF32_OF[gc.name(gc.PICKS_LARGE[0])], GLUON=True)
    b16 = dict(gc.PICKS_LARGE[0], GLUON=True)
    cases = [(t32, dict(dtype="bfloat16")), (b16, {}), (t32, dict(math=M.DEFAULT)), (t32, dict(math=M.FMA))]
    for cfg, kw in cases:
        problem, x, w, y = _problem(direction, 128, 128, 28, 3, stride=stride, pad=1, n=2, **kw)
        if direction == "fwd":
            assert gc.launch_forward(problem, x, w, y, 1.0, 0.0, cfg) is False, kw
        else:
            assert gc.launch_backward_data(problem, y, w, x, 1.0, 0.0, cfg) is False, kw


def test_prepare_float32_arguments():
    """prepare's descriptors for a TF32 config: float32 boxes of 32 channels (a 128-byte
    row, 128-byte swizzle as bf16's 64), K_STEPS over 32-channel blocks, float32 y."""
    x = torch.zeros(2, 128, 14, 14).to(memory_format=torch.channels_last)  # 4 blocks of 32 channels
    w = torch.zeros(128, 128, 3, 3)
    cfg = gc.TF32_OF[gc.name(gc.PICKS_MEDIUM[0])]
    grid, args, meta, y = gc.prepare(x, w, cfg=cfg, sms=132)
    a = dict(zip(gc.gluon_conv_fwd_kernel.arg_names, args))
    assert y.dtype == torch.float32 and tuple(y.shape) == (2, 128, 14, 14)
    assert a["K_STEPS"] == 9 * 4 and meta["BLOCK_K"] == 32 and meta["STAGES"] == cfg["STAGES"]
    xd = a["x_desc"]
    assert list(xd.block_shape) == [cfg["NB"], cfg["BH"], cfg["BW"], 32]
    assert xd.layout.swizzle_byte_width == 128 and xd.layout.element_bitwidth == 32
    assert list(a["w_desc"].block_shape) == [cfg["BLOCK_N"], 32]
    assert a["y_desc"].base.dtype == torch.float32
    # 16-bit data with a TF32 config, float32 with a 16-bit one, mixed dtypes: refused
    with pytest.raises(ValueError, match="float32"):
        gc.prepare(x.bfloat16(), w.bfloat16(), cfg=cfg, sms=132)
    with pytest.raises(ValueError, match="bfloat16/float16"):
        gc.prepare(x, w, cfg=gc.PICKS_MEDIUM[0], sms=132)
    with pytest.raises(ValueError, match="one dtype"):
        gc.prepare(x, w, cfg=cfg, sms=132, y=torch.zeros(2, 128, 14, 14, dtype=torch.bfloat16).to(
            memory_format=torch.channels_last))
    # channels not a multiple of 64 (the kernel's rule for every dtype)
    with pytest.raises(ValueError, match="channels"):
        gc.prepare(x[:, :96], w[:, :96], cfg=cfg, sms=132)


def test_strided_prepare_float32_arguments():
    x = torch.zeros(2, 128, 28, 28).to(memory_format=torch.channels_last)
    w = torch.zeros(256, 128, 3, 3)
    cfg = gs.TF32_CONFIGS[0]
    grid, args, meta, y = gs.prepare(x, w, (2, 2), (1, 1), cfg=cfg, sms=132)
    a = dict(zip(gs.gluon_conv_strided_kernel.arg_names, args))
    assert y.dtype == torch.float32 and tuple(y.shape) == (2, 256, 14, 14)
    assert a["K_STEPS"] == 9 * 4 and list(a["x_desc"].block_shape) == [cfg["NB"], cfg["BH"], 1, cfg["BW"], 32]
    assert a["x_desc"].layout.swizzle_byte_width == 128 and a["x_desc"].layout.element_bitwidth == 32
    assert (a["SWC"], a["CB0"]) == (256, 128)  # the phase walk counts channels, not bytes
    assert len(args) == gs.gluon_conv_strided_kernel.arg_names.index("NB")
    with pytest.raises(ValueError, match="bfloat16/float16"):
        gs.prepare(x, w, (2, 2), cfg=gs.CONFIGS[0], sms=132)


# -- CPU: offline sm_90 compiles -------------------------------------------------------------
VARIANTS = {  # compile_sm90 keyword arguments -> tiles each consumer reads per output tile
    "plain": ({}, 0),
    "beta": (dict(has_beta=True), 1),
    "relu+bias+z": (dict(act=1, has_bias=True, has_z=True), 1),
}
COMPILES = ([("gc", c, v) for c in gc.TF32_CONFIGS for v in VARIANTS]
            + [("gs", c, v) for c in gs.TF32_CONFIGS for v in VARIANTS])


@pytest.fixture(scope="module")
def sm90():
    """{(module, config name, variant): (shared bytes, registers, SASS)} of every TF32
    config's sm_90 compile, in a child process (gluon_helpers.compile_in_child)."""
    modules = {"gc": "tridnn.cuda.gluon_conv", "gs": "tridnn.cuda.gluon_conv_strided"}
    facts = compile_in_child([(modules[m], "compile_sm90", c, VARIANTS[v][0]) for m, c, v in COMPILES])
    return {(m, gc.name(c), v): (f["shared"], f["regs"], f["sass"]) for (m, c, v), f in zip(COMPILES, facts)}


@pytest.mark.parametrize("mod,cfg,variant", COMPILES, ids=lambda v: v if isinstance(v, str) else gc.name(v))
def test_compiles_for_sm90_as_tf32(mod, cfg, variant, sm90):
    """float32 operands from shared memory as tf32: HGMMA.64xBLOCK_Nx8.F32.TF32, four a
    64-row slice per 32-channel k-step (no 16-bit MMA); registers within the cap with no
    spills; the loader's registers handed to the consumers (setmaxnreg) where the cap binds;
    the float32 ring and output tile(s) within one SM's shared memory; the TMA loads (x
    box, filter box, the old y / z tiles) and the TMA store."""
    shared, regs, code = sm90[(mod, gc.name(cfg), variant)]
    assert shared >= gc.shared_bytes(cfg) and shared * cfg["PER_SM"] <= 228 * 1024
    bm = cfg["NB"] * cfg["BH"] * cfg["BW"]
    wg = cfg["num_warps"] // 4
    per_step = (cfg["BLOCK_K"] // 8) * (bm // 64 // wg) * (2 if cfg["PINGPONG"] else 1)
    hgmma = re.findall(r"HGMMA\.64x(\d+)x8\.F32\.TF32", code)
    assert len(hgmma) == per_step and all(int(n) == cfg["BLOCK_N"] for n in hgmma), (len(hgmma), per_step)
    assert len(re.findall(r"\bHGMMA\.", code)) == per_step, "no other MMA"
    cap, loader, second = gc._regs(cfg)
    assert regs <= cap and cap == gc.constexprs(cfg)[1]
    moves = [int(r, 16) for r in re.findall(r"USETMAXREG\.\w+\.CTAPOOL (?:UP\d, )?(0x[0-9a-f]+)", code)]
    if cap < 256:
        assert min(moves) <= 40 and max(moves) > cap, (moves, cap)
    assert not re.search(r"\b(STL|LDL)\b", code), "register spills"
    consumers = 2 if cfg["PINGPONG"] else 1
    box = "UTMALDG.5D" if mod == "gs" else "UTMALDG.4D"
    assert box in code and "UTMALDG.2D" in code and "UTMASTG.4D" in code
    tiles_read = code.count("UTMALDG.4D") - (0 if mod == "gs" else 1)  # (the stride-1 loader's x box is 4-D)
    if VARIANTS[variant][1] == 0:
        assert tiles_read == 0
    else:  # each consumer's old-y or z tile (the 64x256 ping-pong tile's copy comes out twice
        # per consumer in its SASS)
        assert tiles_read >= consumers, tiles_read


# -- GPU: each TF32 config against float64 ---------------------------------------------------
# tf32 keeps 10 of float32's 23 mantissa bits and wgmma reads the operands unrounded
# (truncated): a float64 simulation of truncated products gives a max error of 7.5e-4 to
# 7.9e-4 of max |result| at K = 576-4608 (randn data, weights / sqrt(K)); 5e-3 leaves 6x.
TF32_TOL = 5e-3

GPU_CASES = [  # (N, C, K, H, W, KH, KW, pad, dil): stride 1
    (2, 64, 64, 56, 56, 3, 3, 1, 1),
    (3, 128, 128, 28, 28, 3, 3, 1, 1),
    (4, 256, 256, 14, 14, 3, 3, 1, 1),
    (5, 512, 512, 7, 7, 3, 3, 1, 1),     # K = 4608
    (1, 64, 200, 13, 21, 3, 3, 1, 1),    # ragged, K not a multiple of BLOCK_N
    (2, 128, 64, 17, 9, 5, 3, 2, 1),     # 5x3, padding 2
    (2, 64, 128, 20, 20, 3, 3, 2, 2),    # dilation 2
    (1, 256, 136, 1, 1000, 1, 1, 0, 1),  # a GEMM: one row of 1000 pixels (flat boxes)
]
STRIDED_GPU_CASES = [  # (N, C, K, H, W, KH, KW, pad, stride)
    (2, 128, 128, 56, 56, 3, 3, 1, 2),
    (2, 512, 512, 14, 14, 3, 3, 1, 2),
    (3, 192, 136, 14, 14, 1, 1, 0, 2),
    (1, 64, 64, 18, 12, 3, 3, 1, 3),
]
_REFS = {}


def _data(case, strided=False):
    """float32 inputs and their float64 convolution, made once per case."""
    if (case, strided) not in _REFS:
        n, c, k, h, w_, kh, kw, pad, d = case
        g = torch.Generator().manual_seed(seed_for(case) % 2**31)
        x = torch.randn(n, c, h, w_, generator=g)
        w = torch.randn(k, c, kh, kw, generator=g) / np.sqrt(c * kh * kw)
        if strided:
            ref = torch.nn.functional.conv2d(x.double(), w.double(), stride=d, padding=pad)
        else:
            ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=pad, dilation=d)
        _REFS[case, strided] = (x, w, ref)
    return _REFS[case, strided]


def _rel(got, want) -> float:
    return ((got.double().cpu() - want).abs().max() / want.abs().max()).item()


def _direct(strided, xd, wd, case, cfg, **kw):
    n, c, k, h, w_, kh, kw_, pad, d = case
    if strided:
        return gs.conv2d(xd, wd, (d, d), (pad, pad), cfg=cfg, **kw)
    return gc.conv2d(xd, wd, (pad, pad), (d, d), cfg=cfg, **kw)


def _check_direct(case, cfg, strided):
    x, w, ref = _data(case, strided)
    xd, wd = x.cuda().to(memory_format=torch.channels_last), w.cuda()
    for alpha, sms in ((1.0, None), (0.5, 3)):  # all SMs; 3 programs walking many tiles
        y = _direct(strided, xd, wd, case, cfg, alpha=alpha, sms=sms)
        torch.cuda.synchronize()
        assert y.dtype == torch.float32 and torch.isfinite(y).all()
        assert _rel(y, alpha * ref) < TF32_TOL, (gc.name(cfg), alpha, sms)
    g = torch.Generator().manual_seed(7)
    old, z = torch.randn(ref.shape, generator=g), torch.randn(ref.shape, generator=g)
    bias = torch.randn(ref.shape[1], generator=g)
    y = old.cuda().to(memory_format=torch.channels_last)
    _direct(strided, xd, wd, case, cfg, alpha=0.5, sms=3, y=y, beta=0.75)
    torch.cuda.synchronize()
    assert _rel(y, 0.5 * ref + 0.75 * old.double()) < TF32_TOL, (gc.name(cfg), "beta")
    zd = z.cuda().to(memory_format=torch.channels_last)
    want = torch.relu(0.5 * ref + 0.25 * z.double() + bias.double()[None, :, None, None])
    for sms in (3, None):
        y = _direct(strided, xd, wd, case, cfg, alpha=0.5, sms=sms, epilogue=(bias.cuda(), zd, 0.25, 1, 0.0, 1.0))
        torch.cuda.synchronize()
        assert _rel(y, want) < TF32_TOL, (gc.name(cfg), "relu+bias+z", sms)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gc.TF32_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_against_float64(case, cfg):
    need_hopper()
    _check_direct(case, cfg, strided=False)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gs.TF32_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("case", STRIDED_GPU_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_strided_against_float64(case, cfg):
    need_hopper()
    _check_direct(case, cfg, strided=True)


# -- GPU: every TF32 config forced through the public API (TENSOR_OP math) ---------------------
API_CASES = [  # channel counts that both directions take
    P(64, 64, (7, 7), 3, 1, 1),
    P(64, 128, (14, 14), 3, 1, 1),
    P(128, 64, (9, 11), (5, 3), 1, (2, 1)),
    P(64, 64, (10, 12), 3, 1, 2, 2),
    P(64, 192, (6, 5), 1),                   # 1x1: the flat GEMM view
    P(64, 64, (6, 7), 1, 1, 1),              # 1x1 with padding
]
STRIDED_API_CASES = [  # forward (H and W multiples of the stride: the phase view)
    P(64, 128, (14, 14), 3, 2, 1),
    P(128, 64, (12, 10), 1, 2, 0),            # 1x1 stride 2
    P(64, 72, (18, 9), 3, 3, 1),              # stride 3; 72 output channels
    P(64, 64, (8, 10), (5, 3), 2, (2, 1)),    # 5x3, unequal padding
]
STRIDED_DGRAD_API_CASES = [  # backward data through the phases (dy's channels a multiple of 64)
    P(64, 128, (14, 14), 3, 2, 1),
    P(128, 64, (13, 11), 3, 2, 1),            # odd sizes: phases of unequal extents
    P(72, 64, (12, 9), 3, 3, 1),              # stride 3; 72 input channels
    P(64, 64, (9, 10), (5, 3), 2, (2, 1)),
]


@pytest.fixture
def forced(monkeypatch):
    return force_one_config(monkeypatch)


def _api(direction, p, rng, forced, launches, **kw):
    """run_case under TENSOR_OP math (integer data: tf32 products and float32 sums are exact,
    so the result must equal the float64 reference exactly), NaN-poisoned output or alpha 2,
    beta 0.5; ``launches`` Gluon launches."""
    before = forced.launches
    assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=3, device="cuda", math=M.TENSOR_OP,
                    **kw) is None
    assert forced.launches == before + launches, "the Gluon kernel ran"


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gc.TF32_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("p", API_CASES, ids=lambda p: p["name"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_forced_tf32_config_against_float64(direction, p, cfg, rng, forced):
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    _api(direction, p, rng, forced, 1)
    _api(direction, p, rng, forced, 1, mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5)
    _api(direction, p, rng, forced, 1)  # again: through the compiled kernel's launcher


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gs.TF32_CONFIGS, ids=gc.name)
@pytest.mark.parametrize("p", STRIDED_API_CASES, ids=lambda p: p["name"])
def test_gpu_forced_strided_tf32_config_against_float64(p, cfg, rng, forced):
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    _api("fwd", p, rng, forced, 1)
    _api("fwd", p, rng, forced, 1, mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [c for c in gc.TF32_CONFIGS if not (c["NB"] == 1 and c["BH"] == 1)], ids=gc.name)
@pytest.mark.parametrize("p", STRIDED_DGRAD_API_CASES, ids=lambda p: p["name"])
def test_gpu_forced_strided_backward_data_tf32_against_float64(p, cfg, rng, forced, monkeypatch):
    """A launch a phase (the one-launch fused path, on by default since this test was
    written, has its own tests: test_gluon_dgrad_fused)."""
    need_hopper()
    from tridnn.cuda import gluon_dgrad_fused
    monkeypatch.setattr(gluon_dgrad_fused, "FUSED_PHASES", False)
    forced.cfg = dict(cfg, GLUON=True)
    s = p["stride"]
    _api("bwd_data", p, rng, forced, s[0] * s[1])
    _api("bwd_data", p, rng, forced, s[0] * s[1], mode=tridnn.ConvMode.CONVOLUTION, alpha=2.0, beta=0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("math", [M.DEFAULT, M.FMA], ids=lambda m: m.name)
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_tf32_pick_under_default_math_runs_conv_tma(direction, math, rng, forced):
    """A TF32 config met by a DEFAULT or FMA problem (the tuner never offers it there)
    launches nothing in Gluon: conv_tma's reference config runs, float32-accurate."""
    need_hopper()
    forced.cfg = dict(gc.TF32_CONFIGS[3], GLUON=True)
    p = P(64, 64, (9, 10), 3, 1, 1)
    assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=3, device="cuda", math=math) is None
    assert forced.launches == 0


@pytest.mark.gpu
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_tuner_with_tf32_candidates(direction, rng, monkeypatch):
    """The real tuner over conv_tma's and the TF32 candidates (TENSOR_OP float32):
    whichever wins matches float64, and no candidate disagreed with the reference."""
    need_hopper()
    import warnings
    monkeypatch.setattr(type(ALGO[direction]), "tuner", common.Tuner())
    p = P(128, 128, (28, 28), 3, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=8, device="cuda",
                        math=M.TENSOR_OP) is None
    best = list(type(ALGO[direction]).tuner._best.values())
    assert best, "the tuner picked a config"
    print(direction, "picked", best)


@pytest.mark.gpu
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_tf32_configs_agree_with_conv_tmas_reference(direction, stride):
    """The tuner keeps a candidate only where it agrees with conv_tma's first config within
    common.agrees' float32 tolerance (relative L2 5e-5), on random data here: both kernels
    read float32 operands as tf32 the same way (wgmma from shared memory, no rounding; the
    sm_90 PTX of a Triton tl.dot in tf32 over TMA loads has no cvt.rna.tf32), so only the
    float32 summation order may differ. Each offered TF32 config is launched and compared."""
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
    assert gluon and all(c["TF32"] for c in gluon) and not cands[0].get("GLUON")
    ref = torch.empty_like(out_like)
    run(cands[0], ref)
    for cfg in gluon:
        out = torch.full_like(out_like, float("nan"))
        assert launch_gluon(cfg, out), gc.name(cfg)
        torch.cuda.synchronize()
        assert common.agrees(out, ref), (gc.name(cfg), ((out - ref).norm() / ref.norm()).item())
