"""The Gluon backward-filter kernel (tridnn.cuda.gluon_wgrad) as tuner candidates of ALGO_1's
TMA path (tridnn.cuda.conv_bwd_filter_implicit_gemm).

CPU: which problems get Gluon configs (lists built on the host with a stand-in Hopper
device), that they come after the TMA path's own configs (conv_tma's reference first), the
workspace arithmetic (the split partials fit the algorithm's "part" buffer: the schedule is
restricted to it), CONVOLUTION mode's reversed taps (dw addressed from its last tap), and the
fallback to the reference config when a Gluon pick meets tensors it cannot take.
GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu -m gpu tests/test_gluon_wgrad_integration.py``): each
offered config forced through the public API against the float64 reference: alpha/beta,
both modes, odd shapes; the real tuner over every candidate.
"""
import collections
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gw = pytest.importorskip("tridnn.cuda.gluon_wgrad", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import common, conv_tma, conv_wgrad_tma, gluon_common  # noqa: E402
from tridnn.cuda import conv_bwd_filter_implicit_gemm as bwf  # noqa: E402

from gluon_helpers import need_hopper  # noqa: E402
from test_cuda_conv import P, run_case  # noqa: E402

ALGO = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.ALGO_1)
CUDA = types.SimpleNamespace(type="cuda", index=0)
ALL_PICKS = list({gw.name(c): c for c in gw.WGRAD_PICKS_NARROW + gw.WGRAD_PICKS_LARGE + gw.WGRAD_PICKS_MEDIUM
                  + gw.WGRAD_PICKS_SMALL + gw.WGRAD_PICKS_FLAT + gw.WGRAD_PICKS_FLAT_NARROW}.values())


def _problem(c, k, hw, kernel, stride=1, pad=0, n=4, dtype="float16", layout="NHWC", groups=1, dilation=1,
             mode=tridnn.ConvMode.CROSS_CORRELATION, nd=2, math=tridnn.MathType.DEFAULT):
    """A backward-filter ConvProblem and CPU tensors (x, dw, dy) of its shapes in ``layout``."""
    cd = tridnn.ConvolutionDescriptor(padding=(pad,) * nd, stride=(stride,) * nd, dilation=(dilation,) * nd,
                                      groups=groups, mode=mode, nd=nd, math_type=math)
    fmt = tridnn.TensorFormat.NHWC if layout == "NHWC" else tridnn.TensorFormat.NCHW
    xd = tridnn.TensorDescriptor.packed((n, c) + (hw,) * nd, dtype, fmt)
    wd = tridnn.FilterDescriptor((k, c // groups) + ((kernel,) * nd if isinstance(kernel, int) else kernel),
                                 dtype, fmt)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    mf = (torch.channels_last if nd == 2 else torch.channels_last_3d) if layout == "NHWC" else torch.contiguous_format
    t = [torch.empty(d.dims, dtype=tdt).contiguous(memory_format=mf) for d in (xd, wd, yd)]
    return ConvProblem("bwd_filter", xd, wd, yd, cd), *t


@pytest.fixture
def hopper(monkeypatch):
    """Build the GPU lists on the host: a stand-in Hopper with 132 SMs."""
    monkeypatch.setattr(bwf, "_hopper", lambda device: device.type == "cuda")
    # the images-inner configs in the lists (test_images_inner_can_be_withdrawn: switched off)
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_OFFERED", True)
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)
    monkeypatch.setattr(conv_wgrad_tma, "sm_count", lambda device: 132, raising=False)


def _names(cfgs):
    return [gw.name(c) for c in cfgs]


def _narrower(cfgs, n=128):
    """The configs no wider than n channels."""
    return [cfg for cfg in cfgs if cfg["BLOCK_N"] <= n]


def _batch(cfgs, n):
    """The configs whose boxes the batch fills: images-inner ones only where NB divides n."""
    return [cfg for cfg in cfgs if not (cfg["IMAGES_INNER"] and n % cfg["NB"])]


# -- CPU: the candidate lists ------------------------------------------------------------
@pytest.mark.parametrize("c,k,hw,kernel,stride,pad,n,want", [
    (64, 64, 56, 3, 1, 1, 64, gw.WGRAD_PICKS_NARROW),       # res2_3x3
    (128, 128, 28, 3, 1, 1, 64, gw.WGRAD_PICKS_LARGE),      # res3_3x3
    (256, 256, 14, 3, 1, 1, 64, gw.WGRAD_PICKS_MEDIUM),     # res4_3x3
    (512, 512, 7, 3, 1, 1, 64, _batch(gw.WGRAD_PICKS_SMALL, 64)),  # res5_3x3: no 128-image box
    (512, 512, 7, 3, 1, 1, 256, gw.WGRAD_PICKS_SMALL),      # res5_3x3 at batch 256: every box full
    (256, 64, 56, 1, 1, 0, 64, gw.WGRAD_PICKS_FLAT_NARROW[:2]),  # 1x1 into 64 channels: one row, 64-row tiles
    (128, 128, 14, 3, 1, 1, 64, _narrower(gw.WGRAD_PICKS_MEDIUM)),  # 128 channels: no 256-wide tile
    (512, 1024, 14, 1, 2, 0, 64, _batch(gw.WGRAD_PICKS_SMALL, 64)),  # 1x1 stride 2 (downsample): 7x7 outputs
    (72, 200, 12, (5, 3), 1, 2, 64, _narrower(gw.WGRAD_PICKS_MEDIUM)),  # odd channels, 5x3: 12x14 outputs
    (72, 200, 12, (5, 3), 1, 2, 3, _batch(_narrower(gw.WGRAD_PICKS_MEDIUM), 3)),  # batch 3: no images-inner box
])
def test_offered_where_the_kernel_applies(c, k, hw, kernel, stride, pad, n, want, hopper):
    problem, x, w, y = _problem(c, k, hw, kernel, stride=stride, pad=pad, n=n)
    got = bwf.gluon_candidates(problem, x, y, w, CUDA)
    assert _names(got) == _names(want)
    assert all(g["GLUON"] for g in got) and 1 <= len(got) <= 5
    assert all(g["BLOCK_M"] <= max(64, k) * 2 and g["BLOCK_N"] <= max(64, c) * 2 for g in got)


@pytest.mark.parametrize("why,kwargs", [
    ("float32", dict(dtype="float32")),
    ("NCHW tensors", dict(layout="NCHW")),
    ("groups", dict(groups=2)),
    ("channels not of 8", dict(c=36)),
    ("output channels not of 8", dict(k=68)),
    ("3-D", dict(nd=3, hw=6)),
    ("odd image at stride 2", dict(stride=2, hw=15, kernel=1, pad=0)),
    ("FMA math", dict(math=tridnn.MathType.FMA)),
])
def test_not_offered_elsewhere(why, kwargs, hopper):
    args = dict(c=64, k=64, hw=14, kernel=3, pad=1)
    args.update(kwargs)
    problem, x, w, y = _problem(args.pop("c"), args.pop("k"), args.pop("hw"), args.pop("kernel"), **args)
    assert bwf.gluon_why_not(problem, x, y, w) is not None, why
    assert bwf.gluon_candidates(problem, x, y, w, CUDA) == [], why


def test_not_offered_off_hopper_or_under_the_interpreter(hopper, monkeypatch):
    problem, x, w, y = _problem(128, 128, 28, 3, pad=1)
    assert bwf.gluon_candidates(problem, x, y, w, CUDA)
    assert bwf.gluon_candidates(problem, x, y, w, torch.device("cpu")) == []
    monkeypatch.setattr(bwf, "_hopper", lambda device: False)  # e.g. a Blackwell GPU: no wgmma
    assert bwf.gluon_candidates(problem, x, y, w, CUDA) == []


def test_one_by_one_layers_get_the_flat_picks(hopper):
    """1x1 stride-1 problems without padding are offered the one-row (FLAT) configs, which
    fill every box; 1x1 at stride 2 and 3x3 keep the image boxes."""
    problem, x, w, y = _problem(256, 1024, 14, 1, n=8)
    assert _names(bwf.gluon_candidates(problem, x, y, w, CUDA)) == _names(gw.WGRAD_PICKS_FLAT)
    problem, x, w, y = _problem(64, 256, 56, 1, n=2)
    assert _names(bwf.gluon_candidates(problem, x, y, w, CUDA)) == _names(gw.WGRAD_PICKS_FLAT_NARROW)
    problem, x, w, y = _problem(256, 512, 14, 1, stride=2, n=8)
    assert not any(c["FLAT"] for c in bwf.gluon_candidates(problem, x, y, w, CUDA))
    problem, x, w, y = _problem(256, 256, 14, 3, pad=1, n=8)
    assert not any(c["FLAT"] for c in bwf.gluon_candidates(problem, x, y, w, CUDA))


def test_images_inner_can_be_withdrawn(hopper, monkeypatch):
    """TRIDNN_IMAGES_INNER=0 (IMAGES_INNER_OFFERED False) withdraws the images-inner configs:
    res5_3x3 at batch 256 then gets the image-box picks alone."""
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_OFFERED", False)
    problem, x, w, y = _problem(512, 512, 7, 3, pad=1, n=256)
    want = [c for c in gw.WGRAD_PICKS_SMALL if not c["IMAGES_INNER"]]
    assert _names(bwf.gluon_candidates(problem, x, y, w, CUDA)) == _names(want) and want


def test_dw_in_any_layout_and_float_dtype(hopper):
    """dw is written through its strides (whole tiles and the finish): KCRS or float32 dw
    still get the picks; x and dy must be channels-last."""
    problem, x, w, y = _problem(128, 128, 28, 3, pad=1, n=64)
    want = _names(gw.WGRAD_PICKS_LARGE)
    assert _names(bwf.gluon_candidates(problem, x, y, w.contiguous(), CUDA)) == want
    assert _names(bwf.gluon_candidates(problem, x, y, w.float(), CUDA)) == want
    assert bwf.gluon_candidates(problem, x, y.contiguous(), w, CUDA) == []
    assert bwf.gluon_candidates(problem, x.contiguous(), y, w, CUDA) == []


def test_gluon_configs_come_after_the_tma_paths(hopper):
    """The tuner cross-checks every candidate against the first: conv_tma's reference stays
    first, conv_wgrad_tma's follow, Gluon's come last (they win only where faster and
    agreeing); none under the interpreter (CPU tensors) nor on a zero-padded copy of x."""
    problem, x, w, y = _problem(256, 256, 14, 3, pad=1, n=64)
    plan = conv_tma.plan_backward_filter(problem, x, y, w)
    assert plan is not None
    part = torch.empty(1 << 20, dtype=torch.float32)
    base = (conv_tma.wgrad_candidates(plan, CUDA, 2) + conv_wgrad_tma.candidates(plan, CUDA, part.numel(), 132, 2))
    cands = bwf.tma_candidates(plan, problem, x, x, y, w, part, 132, device=CUDA)
    gl = [i for i, c in enumerate(cands) if c.get("GLUON")]
    assert gl == list(range(len(base), len(cands))) and len(gl) == len(gw.WGRAD_PICKS_MEDIUM)
    assert cands[:len(base)] == base and not any(c.get("GLUON") for c in base)
    rows = [dict(ROWS=True)]
    cands = bwf.tma_candidates(plan, problem, x, x, y, w, part, 132, rows, device=CUDA)
    assert cands[len(base)] == rows[0] and all(c.get("GLUON") for c in cands[len(base) + 1:])
    # a zero-padded copy of x (few channels): no Gluon config
    assert not any(c.get("GLUON") for c in bwf.tma_candidates(plan, problem, x, x.clone(), y, w, part, 132, device=CUDA))
    # CPU tensors (the interpreter)
    cpu = bwf.tma_candidates(plan, problem, x, x, y, w, part, 132)
    assert not any(c.get("GLUON") for c in cpu)


def test_picks_are_swept_configs():
    """Every offered config is one the sweep times (gluon_wgrad.CONFIGS, benchmarks/sweep_gluon_wgrad.py)
    and is compiled by test_gluon_wgrad's sm_90 tests."""
    names = set(_names(gw.CONFIGS))
    assert all(gw.name(c) in names for c in ALL_PICKS)


# -- CPU: workspace arithmetic ---------------------------------------------------------------
RESNET = [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7)]


def _part_floats(problem):
    (part,) = [b for b in ALGO.buffers(problem) if b.name == "part"]
    return int(np.prod(part.shape))


@pytest.mark.parametrize("c,k,hw", RESNET, ids=lambda v: str(v))
def test_resnet_partials_fit_the_part_buffer(c, k, hw, hopper):
    """At batch 64 the algorithm's "part" buffer holds every offered config's model schedule
    (so the restriction to it changes nothing there and no temporary is allocated), and the
    restricted schedule's partials never exceed it."""
    problem, x, w, y = _problem(c, k, hw, 3, pad=1, n=64)
    have = _part_floats(problem)
    for cfg in bwf.gluon_candidates(problem, x, y, w, CUDA):
        tiles, boxes = gw.num_tiles(cfg, k, c, 9), gw.num_boxes(cfg, 64, hw, hw)
        programs = 132 * cfg["PER_SM"]
        free = gw.schedule(cfg, tiles, boxes, programs)
        fit = gw.schedule(cfg, tiles, boxes, programs, max_partials=have)
        assert fit == free, gw.name(cfg)
        assert gw.partial_floats(cfg, tiles, boxes, fit[0], fit[1]) <= have


def test_schedule_restricted_to_a_small_workspace():
    """max_partials skips schedules whose split partials would overflow the buffer; all
    tiles whole needs none and always remains."""
    cfg = gw.WGRAD_PICKS_LARGE[0]
    tiles, boxes = gw.num_tiles(cfg, 128, 128, 9), gw.num_boxes(cfg, 64, 28, 28)
    free = gw.schedule(cfg, tiles, boxes, 132)
    assert gw.partial_floats(cfg, tiles, boxes, free[0], free[1]) > 0
    for cap in (0, 128 * 128, 5 * 128 * 128 * 9, gw.partial_floats(cfg, tiles, boxes, free[0], free[1]) - 1):
        d, sp, per = gw.schedule(cfg, tiles, boxes, 132, max_partials=cap)
        assert gw.partial_floats(cfg, tiles, boxes, d, sp) <= cap
        assert 0 <= d <= tiles and sp == (1 if d == tiles else -(-boxes // per))
    assert gw.schedule(cfg, tiles, boxes, 132, max_partials=0) == (tiles, 1, boxes)
    # a fixed split that does not fit: all tiles whole
    assert gw.schedule(cfg, tiles, boxes, 132, splits=7, direct=0, max_partials=10) == (tiles, 1, boxes)


def test_partial_floats_is_prepares_workspace():
    """partial_floats is the float32 size prepare needs: with ws of exactly that size (and
    max_partials) prepare uses ws itself; one float less and the schedule changes to fit."""
    x = torch.zeros(8, 128, 28, 28, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.zeros(8, 128, 28, 28, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    cfg = gw.WGRAD_PICKS_LARGE[1]
    tiles, boxes = gw.num_tiles(cfg, 128, 128, 9), gw.num_boxes(cfg, 8, 28, 28)
    d, sp, per = gw.schedule(cfg, tiles, boxes, 132)
    need = gw.partial_floats(cfg, tiles, boxes, d, sp)
    assert need == sp * (tiles - d) * 128 * 128 > 0
    ws = torch.empty(need, dtype=torch.float32)
    plan = gw.prepare(x, dy, (3, 3), cfg=cfg, sms=132, ws=ws, max_partials=ws.numel())
    assert plan.ws.data_ptr() == ws.data_ptr() and (plan.direct, plan.splits) == (d, sp)
    small = torch.empty(need - 1, dtype=torch.float32)
    plan = gw.prepare(x, dy, (3, 3), cfg=cfg, sms=132, ws=small, max_partials=small.numel())
    assert (plan.direct, plan.splits) != (d, sp)
    assert plan.ws.data_ptr() == small.data_ptr() or plan.direct == tiles


@pytest.mark.parametrize("layout", ["KRSC", "KCRS"])
@pytest.mark.parametrize("flip", [False, True])
def test_dw_addressing(flip, layout):
    """The kernels address tap (kh, kw) of row k, channel c at base + k*s0 + c*s1 + kh*s2 +
    kw*s3: with flip (CONVOLUTION mode) that must be dw[k, c, KH-1-kh, KW-1-kw], else
    dw[k, c, kh, kw] (checked for every element against the element's own address)."""
    k, c, kh, kw = 16, 8, 5, 3
    dw = torch.zeros(k, c, kh, kw, dtype=torch.float32)
    if layout == "KRSC":
        dw = dw.contiguous(memory_format=torch.channels_last)
    x = torch.zeros(2, c, 9, 9, dtype=torch.float16).to(memory_format=torch.channels_last)
    dy = torch.zeros(2, k, 9, 9, dtype=torch.float16).to(memory_format=torch.channels_last)
    cfg = gw.WGRAD_PICKS_NARROW[0]
    plan = gw.prepare(x, dy, (kh, kw), (2, 1), cfg=cfg, dw=dw, sms=4, flip=flip, splits=2, direct=0)
    base, s0, s1, s2, s3 = plan.args[2], *plan.args[3:7]
    fbase, f0, f1, f2, f3 = plan.finish_args[1], *plan.finish_args[11:15]
    assert (fbase.data_ptr(), f0, f1, f2, f3) == (base.data_ptr(), s0, s1, s2, s3)
    item = dw.element_size()
    for ki, ci, hi, wi in np.ndindex(k, c, kh, kw):
        addr = base.data_ptr() + item * (ki * s0 + ci * s1 + hi * s2 + wi * s3)
        th, tw = (kh - 1 - hi, kw - 1 - wi) if flip else (hi, wi)
        assert addr == dw[ki, ci, th, tw].data_ptr()
    assert plan.dw is dw


@pytest.mark.parametrize("c,layout,dtype,kernel,flip,want", [
    (128, "KRSC", torch.bfloat16, (3, 3), False, True),
    (128, "KRSC", torch.float32, (3, 3), True, True),     # flip: negated tap strides, still multiples of 8
    (128, "KRSC", torch.bfloat16, (1, 1), False, True),
    (72, "KRSC", torch.bfloat16, (3, 3), False, False),   # C not a multiple of BLOCK_N: masked columns
    (128, "KCRS", torch.bfloat16, (3, 3), False, False),  # channels 9 elements apart
    (128, "KCRS", torch.float32, (1, 1), False, True),    # 1x1: the same memory as KRSC
    (128, "rows 129 apart", torch.float32, (1, 1), False, False),  # a row's pairs would straddle 8 bytes
])
def test_dw_vec_only_where_every_pair_is_aligned(c, layout, dtype, kernel, flip, want):
    """prepare turns DW_VEC on (whole tiles store dw two channels at a time) only for a dw
    whose channels are contiguous, whose other strides are multiples of 8 and whose channels
    fill every tile column; anything else keeps the one-element path."""
    k = 128
    kh, kw = kernel
    dw = torch.zeros(k, c, kh, kw, dtype=dtype)
    if layout == "KRSC":
        dw = dw.contiguous(memory_format=torch.channels_last)
    elif layout == "rows 129 apart":
        dw = torch.zeros(k, c + 1, kh, kw, dtype=dtype)[:, :c]
    x = torch.zeros(2, c, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.zeros(2, k, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    pad = (kh // 2, kw // 2)
    cfg = gw.WGRAD_PICKS_SMALL[0]  # 128 x 128
    plan = gw.prepare(x, dy, kernel, pad, cfg=cfg, dw=dw, sms=4, flip=flip)
    assert plan.meta["DW_VEC"] is want
    assert gw.dw_vec_ok(tuple(plan.args[3:7]), c, kernel, cfg) is want


@pytest.mark.parametrize("why,kwargs,want", [
    ("a KRSC bfloat16 dw, beta 0, 128 x 128 s3", dict(), True),
    ("two programs an SM, 64 x 64 tiles", dict(cfg=gw.WGRAD_PICKS_NARROW[0], c=64, k=64), True),
    ("beta != 0: dw must be read", dict(beta=0.5), False),
    ("a float32 tile does not fit beside the ring", dict(dtype=torch.float32), False),
    ("128 x 256 s4: no room for the tile", dict(cfg=gw.WGRAD_PICKS_SMALL[2], c=256), False),
    ("two taps a tile", dict(cfg=gw.WGRAD_PICKS_NARROW[1], c=64, k=64), False),
    ("flip: tap strides negated", dict(flip=True), False),
    ("KCRS dw", dict(layout="KCRS"), False),
    ("C not a multiple of BLOCK_N", dict(c=72), False),
])
def test_tma_dw_where_the_tile_fits(why, kwargs, want, monkeypatch):
    """With TMA_STORE on, prepare routes whole tiles through shared memory and a TMA store
    (TMA_DW) only for a bfloat16 KRSC-packed dw with beta 0, one tap a tile and room for the
    tile beside the ring; the descriptor views dw as [K, KH*KW*C]. Off
    (TRIDNN_WGRAD_TMA_STORE=0), no plan has TMA_DW."""
    monkeypatch.setattr(gw, "TMA_STORE", True)
    a = dict(cfg=gw.WGRAD_PICKS_SMALL[0], c=128, k=128, dtype=torch.bfloat16, beta=0.0, flip=False, layout="KRSC")
    a.update(kwargs)
    c, k, kh, kw = a["c"], a["k"], 3, 3
    dw = torch.zeros(k, c, kh, kw, dtype=a["dtype"])
    if a["layout"] == "KRSC":
        dw = dw.contiguous(memory_format=torch.channels_last)
    x = torch.zeros(2, c, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.zeros(2, k, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    plan = gw.prepare(x, dy, (kh, kw), cfg=a["cfg"], dw=dw, beta=a["beta"], sms=4, flip=a["flip"])
    assert plan.meta["TMA_DW"] is want, why
    desc = plan.args[gw.gluon_wgrad_kernel.arg_names.index("dw_desc")]
    if want:
        assert list(desc.shape) == [k, kh * kw * c] and list(desc.strides) == [kh * kw * c, 1]
        assert list(desc.block_shape) == [a["cfg"]["BLOCK_M"], a["cfg"]["BLOCK_N"]]
        monkeypatch.setattr(gw, "TMA_STORE", False)
        assert gw.prepare(x, dy, (kh, kw), cfg=a["cfg"], dw=dw, sms=4).meta["TMA_DW"] is False


# -- CPU: a Gluon pick meeting tensors it cannot take runs the reference config -----------
def test_a_gluon_pick_falls_back_to_the_reference_config(rng, monkeypatch):
    """The tuner's pick is shared by every layout of a problem: a GLUON config launched on
    tensors the kernel cannot take (here CPU tensors under the interpreter, float32 (tf32) and
    float16 with alpha and beta) runs the TMA path's first config instead."""
    ran = collections.Counter()
    real_partials, real_gluon = conv_tma.launch_wgrad_partials, bwf.launch_gluon

    def partials(*a, **k):
        ran["conv_tma"] += 1
        return real_partials(*a, **k)

    def gluon(*a, **k):
        ok = real_gluon(*a, **k)
        ran["gluon_refused"] += not ok
        return ok
    monkeypatch.setattr(conv_tma, "launch_wgrad_partials", partials)
    monkeypatch.setattr(bwf, "launch_gluon", gluon)
    monkeypatch.setattr(type(ALGO), "tuner", common.Tuner(tolerance=3e-3))
    monkeypatch.setattr(bwf, "tma_candidates", lambda *a, **k: [dict(gw.WGRAD_PICKS_SMALL[0], GLUON=True)])
    p = P(16, 16, (5, 7), 3, 1, 1)
    assert run_case("bwd_filter", ALGO, p, "float32", "NHWC", rng, math=tridnn.MathType.TENSOR_OP) is None
    assert run_case("bwd_filter", ALGO, p, "float16", "NHWC", rng, alpha=2.0, beta=0.5) is None
    assert ran["gluon_refused"] == 2 and ran["conv_tma"] == 2


def test_a_failing_gluon_launch_warns_and_falls_back(monkeypatch):
    """A host-side failure of the experimental Gluon launch (compile, descriptor) warns and
    reports nothing launched (the caller runs its reference); out of resources (the tuner
    skips that config), CUDA errors and a launch record's refusal propagate."""
    def failing(exc):
        def launch(*a, **k):
            raise exc
        return launch
    cfg = dict(gw.WGRAD_PICKS_SMALL[0], GLUON=True)
    monkeypatch.setattr(bwf, "launch_gluon", failing(ValueError("bad descriptor")))
    with pytest.warns(RuntimeWarning, match="bad descriptor"):
        assert bwf._try_gluon(None, None, None, None, None, 1.0, 0.0, cfg) is False

    class OutOfResources(Exception):
        pass
    # and a dry run's refusal (a record's bound launch inside a launch-record dry run): the
    # dry run must see it, or it records the reference config in the tuned one's place
    # (session 25: a batch-256 suite warned "Refused: a launch bound elsewhere")
    from tridnn.cuda.launch_record import Refused
    for exc in (OutOfResources("shared memory"), RuntimeError("CUDA error: an illegal memory access"),
                Refused("a launch bound elsewhere")):
        monkeypatch.setattr(bwf, "launch_gluon", failing(exc))
        with pytest.raises(type(exc)):
            bwf._try_gluon(None, None, None, None, None, 1.0, 0.0, cfg)
    monkeypatch.setattr(bwf, "launch_gluon", lambda *a, **k: True)
    assert bwf._try_gluon(None, None, None, None, None, 1.0, 0.0, cfg) is True


# -- GPU: every offered config through the public API --------------------------------------
GPU_CASES = [
    P(64, 64, (7, 7), 3, 1, 1),              # 7x7 images: boxes past the edge, many images a box
    P(128, 64, (14, 14), 3, 1, 1),           # 14x14
    P(64, 128, (9, 11), (5, 3), 1, (2, 1)),  # 5x3 filter, unequal padding, ragged image
    P(128, 128, (6, 5), 3, 1, 0),            # no padding
    P(80, 200, (10, 12), 3, 1, 2, 2),        # dilation 2; channels not multiples of 64
    P(64, 192, (6, 5), 1),                   # 1x1 (the flat configs: one row of pixels)
    P(256, 256, (7, 7), 1),                  # 1x1 on 7x7 maps
    P(64, 128, (14, 14), 1, 2),              # 1x1 stride 2 (x's stride-phase view)
]


@pytest.fixture
def forced(monkeypatch):
    """Runs the config put in ``state.cfg`` as the only candidate (a one-config list is taken
    without timing); counts Gluon launches."""
    state = types.SimpleNamespace(cfg=None, launches=0)
    real = gw.launch

    def counted(*a, **k):
        out = real(*a, **k)
        state.launches += 1  # (after the launch: a failing one falls back with a warning)
        return out
    monkeypatch.setattr(gw, "launch", counted)
    monkeypatch.setattr(type(ALGO), "tuner", common.Tuner(tolerance=3e-3))
    monkeypatch.setattr(bwf, "tma_candidates", lambda *a, **k: [state.cfg])
    return state


def _flat_problem(p) -> bool:
    return gw.flat_ok(p["kernel"], p["pad"], p["stride"])


@pytest.mark.gpu
@pytest.mark.parametrize("p,cfg", [pytest.param(p, cfg, id=f"{p['name']}-{gw.name(cfg)}")
                                   for cfg in ALL_PICKS for p in GPU_CASES if _flat_problem(p) or not cfg["FLAT"]])
def test_gpu_forced_config_against_float64(p, cfg, rng, forced):
    """float16 into a NaN-poisoned dw (every element written), bfloat16 blended with alpha = 2,
    beta = 0.5 in CONVOLUTION mode (reversed taps); batches of 3."""
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    for dtype, mode, alpha, beta in (("float16", tridnn.ConvMode.CROSS_CORRELATION, 1.0, 0.0),
                                     ("bfloat16", tridnn.ConvMode.CONVOLUTION, 2.0, 0.5)):
        before = forced.launches
        assert run_case("bwd_filter", ALGO, p, dtype, "NHWC", rng, n=3, device="cuda", mode=mode,
                        alpha=alpha, beta=beta) is None
        assert forced.launches == before + 1, "the Gluon kernel ran"


@pytest.mark.gpu
def test_gpu_odd_image_at_stride_2_falls_back(rng, forced):
    """A 1x1 stride-2 problem on a 7x7 image has no stride-phase view: conv_tma's reference
    runs and the result is still right."""
    need_hopper()
    forced.cfg = dict(gw.WGRAD_PICKS_SMALL[0], GLUON=True)
    assert run_case("bwd_filter", ALGO, P(64, 128, (7, 7), 1, 2), "float16", "NHWC", rng, n=3,
                    device="cuda") is None
    assert forced.launches == 0


@pytest.mark.gpu
@pytest.mark.parametrize("c,hw", [(64, 56), (128, 28), (256, 14), (512, 7)])
def test_gpu_tuner_with_gluon_candidates(c, hw, rng, monkeypatch):
    """The real tuner over the TMA path's and Gluon's candidates: whichever wins, the result
    matches float64 (and no candidate disagreed with the reference)."""
    need_hopper()
    import warnings
    monkeypatch.setattr(type(ALGO), "tuner", common.Tuner(tolerance=3e-3))
    p = P(c, c, (hw, hw), 3, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert run_case("bwd_filter", ALGO, p, "bfloat16", "NHWC", rng, n=8, device="cuda") is None
        assert run_case("bwd_filter", ALGO, p, "bfloat16", "NHWC", rng, n=8, device="cuda", alpha=2.0,
                        beta=0.5) is None
    best = list(type(ALGO).tuner._best.values())
    assert best, "the tuner picked a config"
    print(c, hw, "picked", best)


@pytest.mark.gpu
@pytest.mark.parametrize("flip", [False, True])
def test_gpu_repeated_calls_replay_the_launch_record(flip, rng, monkeypatch):
    """launch_gluon keeps its first call's launches bound (addresses, tensor maps) per
    problem object, tensor addresses and strides, alpha, beta and config: a repeated call
    prepares nothing and still computes from the tensors' current contents (new values
    written in place); a new alpha prepares again; the record holds no tensor. Split tiles
    (a finish launch) and CONVOLUTION mode's reversed taps (dw's base offset) included."""
    need_hopper()
    monkeypatch.setattr(bwf, "_RECORDS", {})
    prepared = []
    real_prepare = gw.prepare
    monkeypatch.setattr(gw, "prepare", lambda *a, **k: prepared.append(1) or real_prepare(*a, **k))
    mode = tridnn.ConvMode.CONVOLUTION if flip else tridnn.ConvMode.CROSS_CORRELATION
    problem, x, dw, dy = (t.cuda() if isinstance(t, torch.Tensor) else t
                          for t in _problem(128, 128, 14, 3, pad=1, n=8, dtype="bfloat16", mode=mode))
    part = torch.empty(_part_floats(problem) + 4096, device="cuda", dtype=torch.float32)
    cfg = dict(gw.WGRAD_PICKS_MEDIUM[0], GLUON=True, SPLITS=4)  # (split tiles: the finish kernel runs)

    def want(alpha, old):
        got = torch.nn.grad.conv2d_weight(x.double(), dw.shape, dy.double(), padding=1)
        return alpha * (got.flip((2, 3)) if flip else got) + 0.5 * old

    for step, (alpha, fresh) in enumerate([(1.0, 1), (1.0, 0), (1.0, 0), (2.0, 1), (2.0, 0)]):
        x.copy_(torch.from_numpy(rng.standard_normal(x.shape)).to(x.dtype))  # new values, same addresses
        dy.copy_(torch.from_numpy(rng.standard_normal(dy.shape)).to(dy.dtype))
        dw.copy_(torch.from_numpy(rng.standard_normal(dw.shape)).to(dw.dtype))
        old = dw.double()
        before = len(prepared)
        assert bwf.launch_gluon(problem, x, dy, dw, part, alpha, 0.5, cfg)
        assert len(prepared) - before == fresh, step
        err = (dw.double() - want(alpha, old)).abs().max().item()
        assert err < 1e-2 * want(alpha, old).abs().max().item(), (step, err)
    (kept,) = [v for k, v in bwf._RECORDS.items() if k[-3] == 2.0]
    assert len(kept[2]) == 2, "the split tiles' finish launch is part of the record"
    assert not any(isinstance(v, torch.Tensor) for b in kept[2] for v in b.values), "no tensor held"
