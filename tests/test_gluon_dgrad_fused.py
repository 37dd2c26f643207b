"""Strided backward data in one Gluon launch over all phases (tridnn.cuda.gluon_dgrad_fused).

CPU: the host tables (phase order, filter columns, k-steps, tile counts) against
dgrad_phases exactly; where the fused launch applies; a float64 emulation of the kernel's
tile walk (the loader's taps and dy boxes, the consumers' ring positions, the 5-D store
into dx's phase view with TMA's clipping) driven by the same host tables the kernel gets,
against torch's conv2d_input gradient; offline sm_90 compiles of every config the fused
launch may run (no spills, setmaxnreg split, HGMMA count per k-step, one 5-D TMA store per
consumer). GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_dgrad_fused.py``): each
config forced through ALGO_1 with the fused launch switched on, against float64, in ONE
Gluon launch.
"""
import re

import pytest

torch = pytest.importorskip("torch")
gc = pytest.importorskip("tridnn.cuda.gluon_conv", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.cuda import gluon_dgrad_fused as gf  # noqa: E402
from tridnn.cuda.dgrad_phases import phases  # noqa: E402
from tridnn.cuda.filter_turn import turned_filter  # noqa: E402

import gluon_helpers  # noqa: E402
from gluon_helpers import force_one_config, need_hopper  # noqa: E402
from test_cuda_conv import P, run_case  # noqa: E402

ALGO_1 = registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)
# every config backward data may be offered at stride > 1 (gluon_conv.picks, not flat)
OFFERED = list({gc.name(c): c for c in gc.PICKS_NARROW + gc.PICKS_LARGE + gc.PICKS_MEDIUM
                + gc.PICKS_SMALL + gc.PICKS_INNER + gc.PICKS_INNER_SMALL}.values())
OFFERED_TF32 = [gc.TF32_OF[gc.name(c)] for c in OFFERED]
CASES = [  # (kernel, stride, pad, (H, W) of dx): H, W multiples of the stride
    ((3, 3), (2, 2), (1, 1), (8, 8)), ((3, 3), (2, 2), (1, 1), (10, 6)), ((3, 3), (2, 2), (0, 0), (8, 10)),
    ((5, 3), (2, 2), (2, 1), (10, 8)), ((3, 3), (3, 3), (1, 1), (9, 12)), ((2, 2), (2, 2), (0, 0), (8, 6)),
    ((4, 4), (2, 2), (1, 1), (8, 8)), ((3, 2), (2, 1), (1, 0), (6, 7)),
    ((1, 1), (2, 2), (0, 0), (8, 6)), ((3, 1), (2, 2), (1, 0), (6, 8)),  # phases without taps
]
MODES = [tridnn.ConvMode.CROSS_CORRELATION, tridnn.ConvMode.CONVOLUTION]


# -- CPU: the host tables ------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel,stride,pad,hw", CASES)
def test_phase_table_is_dgrad_phases_longest_first(kernel, stride, pad, hw, mode):
    conv = mode == tridnn.ConvMode.CONVOLUTION
    k_in, bk = 192, 64
    rows, order = gf.phase_table(kernel, stride, pad, conv, k_in, bk)
    parts, want_order = phases(kernel, stride, pad, conv)
    assert order == want_order
    by_offset = {p.offset: p for p in parts}
    assert sorted((r[0], r[1]) for r in rows) == sorted(by_offset), "every phase once"
    for r in rows:
        p = by_offset[(r[0], r[1])]
        assert r == (*p.offset, *p.taps, *p.padding, p.column * k_in, p.taps[0] * p.taps[1] * (k_in // bk))
    taps = [r[2] * r[3] for r in rows]
    assert taps == sorted(taps, reverse=True), "the long phases first"
    ties = [(r[2] * r[3], r[0], r[1]) for r in rows]
    assert ties == sorted(ties, key=lambda v: (-v[0], v[1], v[2])), "ties in (a, b) order"
    assert sum(r[7] for r in rows) == kernel[0] * kernel[1] * (k_in // bk)


@pytest.mark.parametrize("cfg", OFFERED[:4], ids=gc.name)
def test_plan_tile_counts(cfg):
    n, c, h, w = 5, 256, 28, 14
    p = gf.plan((n, c, h, w), 128, (3, 3), (2, 2), (1, 1), False, cfg, sms=132)
    tiles_h, tiles_w = -(-(h // 2) // cfg["BH"]), -(-(w // 2) // cfg["BW"])
    per_phase = -(-n // cfg["NB"]) * tiles_h * tiles_w * -(-c // cfg["BLOCK_N"])
    assert (p["TILES_H"], p["TILES_W"], p["N_BLOCKS"]) == (tiles_h, tiles_w, -(-c // cfg["BLOCK_N"]))
    assert (p["SLOTS"], p["TILES_PER_PHASE"], p["NUM_TILES"]) == (4, per_phase, 4 * per_phase)
    assert p["grid"] == (min(4 * per_phase, 132 * cfg["PER_SM"]),)
    assert [r[7] for r in p["rows"]] == [8, 4, 4, 2]  # 4, 2, 2, 1 taps of 128/64 channel blocks


@pytest.mark.parametrize("programs", [1, 3, 7, 132])
@pytest.mark.parametrize("zeros", [0, 90], ids=["taps", "with_tapless"])
def test_schedule_deals_every_tile_once_longest_first(programs, zeros):
    """Every tile once, each program's longest first, and the longest-processing-time bound
    on the tiles' weights (k-steps + STORE_COST): tiles without taps (k-steps 0, a store
    each) spread over the programs instead of piling onto one."""
    k_steps = [8] * 30 + [4] * 60 + [2] * 30 + [0] * zeros
    sched = gf.schedule(k_steps, programs)
    offsets, tiles = sched[:programs + 1], sched[programs + 1:]
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] == len(k_steps)
    assert sorted(tiles) == list(range(len(k_steps)))
    weight = [k + gf.STORE_COST for k in k_steps]
    loads = []
    for p in range(programs):
        mine = [k_steps[t] for t in tiles[offsets[p]:offsets[p + 1]]]
        assert mine == sorted(mine, reverse=True), "each program's tiles longest first"
        loads.append(sum(weight[t] for t in tiles[offsets[p]:offsets[p + 1]]))
    # longest-processing-time bound: no program past the mean by more than one tile
    assert max(loads) <= sum(weight) / programs + max(weight)


def test_schedule_evens_res5_3x3s2():
    """res5_3x3s2 (dx 64x512x14x14, dy 512 channels), 16x1x8x128 on 132 SMs: 112 tiles of
    each phase (32, 16, 16 and 8 k-steps); round-robin over the concatenated list leaves a
    program 72 k-steps, the deal 64 (32 + 16 + 16) against a mean of 61.1."""
    cfg = gc.PICKS_SMALL[0]
    p = gf.plan((64, 512, 14, 14), 512, (3, 3), (2, 2), (1, 1), False, cfg, sms=132)
    assert p["TILES_PER_PHASE"] == 112 and p["grid"] == (132,)
    k_steps = [r[7] for r in p["rows"] for _ in range(112)]
    assert k_steps[0] == 32 and k_steps[-1] == 8
    offsets, tiles = p["schedule"][:133], p["schedule"][133:]
    loads = [sum(k_steps[t] for t in tiles[offsets[i]:offsets[i + 1]]) for i in range(132)]
    assert max(loads) == 64 and sum(loads) == sum(k_steps)
    assert max(sum(k_steps[t::132]) for t in range(132)) == 72  # (round-robin, for comparison)


def test_why_not():
    cfg = dict(gc.PICKS_LARGE[0])  # BLOCK_N 128
    dx = torch.zeros(2, 256, 8, 6).to(memory_format=torch.channels_last)
    assert gf.why_not(dx, (2, 2), cfg) is None
    assert gf.why_not(dx, (3, 3), cfg) is not None  # 8 not a multiple of 3
    assert gf.why_not(torch.zeros(2, 256, 9, 6).to(memory_format=torch.channels_last), (2, 2), cfg) is not None
    assert gf.why_not(torch.zeros(2, 192, 8, 6).to(memory_format=torch.channels_last), (2, 2), cfg) is not None
    sparse = torch.zeros(2, 512, 8, 6).to(memory_format=torch.channels_last)[:, ::2]  # pixels 512 apart
    assert gf.why_not(sparse, (2, 2), cfg) is not None
    assert gf.why_not(sparse, (2, 1), cfg) is None  # (no column phases: any pixel stride)
    assert gf.why_not(torch.zeros(2, 128, 8, 6).to(memory_format=torch.channels_last), (2, 2), cfg) is None


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_prepare_launch_arguments(beta):
    """What the kernel gets: the constexprs are its last parameters and meta names each of
    them (gluon_conv.launch's direct path appends them in signature order); args[6] is a
    tensor (launch keys its cache by args[6].dtype); the phase table and the schedule are
    plan's; dx's phase view [N, H/2, 2, W/2, 2*C] with box [NB, BH, 1, BW, BLOCK_N]."""
    cfg = gc.PICKS_MEDIUM[0]
    dy = torch.zeros(2, 128, 5, 4, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(128, 256, 3, 3).to(torch.bfloat16)
    dx = torch.zeros(2, 256, 10, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    grid, args, meta = gf.prepare(dy, w, dx, (3, 3), (2, 2), (1, 1), False, cfg, alpha=2.0, beta=beta, sms=132)
    kernel = gf.gluon_dgrad_fused_kernel
    params = kernel.params
    flags = [p.is_constexpr for p in params]
    first = flags.index(True)
    assert all(flags[first:]) and not any(flags[:first])
    tail = gc.constexpr_tail(meta, kernel)
    assert len(args) == first and len(args) + len(tail) == len(params)
    assert meta["HAS_BETA"] is (beta != 0) and meta["maxnreg"] == gc._regs(cfg)[0]
    p = gf.plan(tuple(dx.shape), 128, (3, 3), (2, 2), (1, 1), False, cfg, sms=132)
    named = dict(zip(kernel.arg_names, args))
    assert isinstance(args[6], torch.Tensor) and args[6].dtype == torch.int32
    assert named["table_ptr"].tolist() == [v for r in p["rows"] for v in r]
    assert named["sched_ptr"].tolist() == p["schedule"] and grid == p["grid"]
    assert (named["K_IN"], named["C_OUT"], named["SLOTS"], named["TILES_PER_PHASE"]) == (128, 256, 4,
                                                                                       p["TILES_PER_PHASE"])
    assert (named["alpha"], named["beta"]) == (2.0, beta)
    d = named["dx_desc"]
    assert list(d.shape) == [2, 5, 2, 4, 512] and list(d.block_shape) == [cfg["NB"], cfg["BH"], 1, cfg["BW"],
                                                                           cfg["BLOCK_N"]]
    assert list(d.strides) == [10 * 8 * 256, 2 * 8 * 256, 8 * 256, 2 * 256, 1]
    with pytest.raises(ValueError, match="BLOCK_N"):
        gf.prepare(dy, w[:, :192], torch.zeros(2, 192, 10, 8, dtype=torch.bfloat16).to(
            memory_format=torch.channels_last), (3, 3), (2, 2), (1, 1), False, cfg, sms=132)


@pytest.mark.parametrize("images_inner", [False, True])
def test_descriptor_boxes_reproduce_the_gradient(images_inner):
    """The kernel's walk over the tiles its schedule deals to the programs
    (gluon_helpers.emulate_gluon_dgrad_fused: each tile once, the table row of its phase,
    the loader's taps and channel blocks, the consumer's old-dx read and store), every box
    read and written through the descriptors ``prepare`` builds
    in the loader's and the consumer's coordinate order (images_inner: dy [rows, columns,
    images, channels], dx [rows, row phase, columns, images, column phase * C + channels];
    zero outside, stores clipped, as TMA does), gives alpha * conv2d_input + beta * dx in
    float64."""
    cfg = gc.config(2, 2, 2, 64, 3, 4, images_inner=images_inner)
    n, k_in, c, (h, w_), stride, pad = 3, 128, 128, (10, 6), (2, 2), (1, 1)
    dy = torch.randint(-3, 4, (n, k_in, h // 2, w_ // 2)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    wt = torch.randint(-3, 4, (k_in, c, 3, 3)).to(torch.bfloat16)
    dx0 = torch.randint(-3, 4, (n, c, h, w_)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    dx = dx0.clone()
    grid, args, meta = gf.prepare(dy, wt, dx, (3, 3), stride, pad, False, cfg, alpha=2.0, beta=0.5, sms=4)
    assert meta["IMAGES_INNER"] == images_inner
    gluon_helpers.emulate_gluon_dgrad_fused(args, meta, grid)
    want = 2.0 * torch.nn.grad.conv2d_input((n, c, h, w_), wt.double(), dy.double(), stride=stride,
                                            padding=pad) + 0.5 * dx0.double()
    torch.testing.assert_close(dx.double(), want.to(torch.bfloat16).double())


def test_on_unless_switched_off():
    assert gf.FUSED_PHASES is (__import__("os").environ.get("TRIDNN_GLUON_FUSED_PHASES", "1") != "0")


# -- CPU: a float64 emulation of the kernel's tile walk --------------------------------------
def _box(t, origin, box):
    """TMA's box load: t[origin : origin + box] with zeros outside t (negative origins too)."""
    out = torch.zeros(box, dtype=t.dtype)
    src, dst = [], []
    for o, b, size in zip(origin, box, t.shape):
        lo, hi = max(o, 0), min(o + b, size)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - o, hi - o))
    out[tuple(dst)] = t[tuple(src)]
    return out


def _emulate(dy, m, dx, p, cfg, k_in, alpha, beta, consumers):
    """The kernel on the CPU in float64, following the plan p (the host tables it gets):
    per program, the loader's tiles (slot, taps walked incrementally, ring positions) and
    each consumer partition's ring positions (the k-steps of the other partition's tiles
    skipped), then per tile the reduction and the 5-D store through dx's phase view."""
    table = torch.tensor(p["rows"], dtype=torch.int32)
    n, c, h, w = dx.shape
    sh, sw = p["stride"]
    dy_nhwc = dy.permute(0, 2, 3, 1)
    view = torch.as_strided(dx, (n, h // sh, sh, w // sw, sw * c),
                            (dx.stride(0), sh * dx.stride(2), dx.stride(2), sw * dx.stride(3), 1))
    written = torch.zeros(view.shape, dtype=torch.int64)
    nprog, bk, bn = p["grid"][0], cfg["BLOCK_K"], cfg["BLOCK_N"]
    bm = cfg["NB"] * cfg["BH"] * cfg["BW"]

    def slot(t):
        q = min(t // p["TILES_PER_PHASE"], p["SLOTS"] - 1)
        return q, t - q * p["TILES_PER_PHASE"]

    sched = p["schedule"]
    assert len(sched) == nprog + 1 + p["NUM_TILES"]
    for pid in range(nprog):
        mine = sched[nprog + 1 + sched[pid]:nprog + 1 + sched[pid + 1]]  # this program's tiles
        # loader: (ring position, dy box origin, filter column) of every k-step, by tile
        steps, it = {}, 0
        for t in mine:
            q, r = slot(t)
            _, _, _, tw_n, pad_h, pad_w, wcol, k_steps = (int(v) for v in table[q])
            n0, i0, j0, c0_out = gluon_helpers.tile_origin(r, p["TILES_H"], p["TILES_W"], p["N_BLOCKS"], cfg)
            ih, iw0 = i0 - pad_h, j0 - pad_w
            iw, c0, kw, steps[t] = iw0, 0, 0, []
            for kk in range(k_steps):
                steps[t].append((it, (n0, ih, iw, c0), wcol + kk * bk))
                it += 1
                c0 += bk
                if c0 == k_in:
                    c0, kw, iw = 0, kw + 1, iw + 1
                if kw == tw_n:
                    kw, iw, ih = 0, iw0, ih + 1
        # consumers: the ring positions they wait on must be the loader's
        my_tiles = len(mine)

        def k_steps_of(j):
            return int(table[slot(mine[j])[0], 7]) if j < my_tiles else 0
        for part in range(consumers):
            it = k_steps_of(0) if part == 1 else 0
            for j in range(part, my_tiles, consumers):
                t = mine[j]
                q, r = slot(t)
                assert [s[0] for s in steps[t]] == list(range(it, it + int(table[q, 7]))), "ring positions"
                it += int(table[q, 7])
                n0, i0, j0, c0 = gluon_helpers.tile_origin(r, p["TILES_H"], p["TILES_W"], p["N_BLOCKS"], cfg)
                acc = torch.zeros(bm, bn, dtype=torch.float64)
                for _, origin, col in steps[t]:
                    a = _box(dy_nhwc, origin, (cfg["NB"], cfg["BH"], cfg["BW"], bk)).reshape(bm, bk)
                    b = _box(m, (c0, col), (bn, bk))
                    acc += a @ b.T
                origin = (n0, i0, int(table[q, 0]), j0, int(table[q, 1]) * c + c0)
                box = (cfg["NB"], cfg["BH"], 1, cfg["BW"], bn)
                old = _box(view, origin, box).reshape(bm, bn)
                out = (alpha * acc + beta * old if beta != 0 else alpha * acc).reshape(box)
                sl = tuple(slice(o, min(o + b, s)) for o, b, s in zip(origin, box, view.shape))
                view[sl] = out[tuple(slice(0, s.stop - s.start) for s in sl)]
                written[sl] += 1
                if consumers > 1:
                    it += k_steps_of(j + 1)
    return written


EMU_CFG = dict(NB=1, BH=2, BW=4, BLOCK_N=4, BLOCK_K=4, PER_SM=1)


@pytest.mark.parametrize("consumers", [1, 2])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel,stride,pad,hw", CASES)
def test_emulated_tile_walk_is_the_gradient(kernel, stride, pad, hw, mode, consumers):
    """float64 emulation of the kernel driven by gf.plan's tables (a wrong row, order or
    tile count fails it) against torch's conv2d_input; every dx element written once;
    alpha 2, beta 0.5 over a NaN-free old dx, and alpha 1, beta 0 over NaN."""
    conv = mode == tridnn.ConvMode.CONVOLUTION
    k_in, c, n, (kh, kw) = 8, 8, 2, kernel
    cd = tridnn.ConvolutionDescriptor(padding=pad, stride=stride, mode=mode)
    xd = tridnn.TensorDescriptor.packed((n, c) + hw, "float16", tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((k_in, c, kh, kw), "float16", tridnn.TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    g = torch.Generator().manual_seed(7)
    w = torch.randn(k_in, c, kh, kw, dtype=torch.float64, generator=g)
    dy = torch.randn(*yd.dims, dtype=torch.float64, generator=g).contiguous(memory_format=torch.channels_last)
    want = torch.nn.grad.conv2d_input(xd.dims, w.flip((2, 3)) if conv else w, dy, stride=stride, padding=pad)
    p = dict(gf.plan(xd.dims, k_in, kernel, stride, pad, conv, EMU_CFG, sms=3), stride=stride)
    m = turned_filter(w, order=p["order"])
    for alpha, beta in ((1.0, 0.0), (2.0, 0.5)):
        dx = torch.full(want.shape, float("nan"), dtype=torch.float64).contiguous(memory_format=torch.channels_last)
        assert gf.why_not(dx, stride, EMU_CFG) is None
        old = None
        if beta != 0:
            old = torch.randn(*want.shape, dtype=torch.float64, generator=g)
            dx.copy_(old)
        written = _emulate(dy, m, dx, p, EMU_CFG, k_in, alpha, beta, consumers)
        assert int(written.min()) == 1 and int(written.max()) == 1, "every dx element once"
        expect = alpha * want + (beta * old if beta != 0 else 0)
        torch.testing.assert_close(dx, expect, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("field", [slice(0, 2), slice(4, 6), slice(6, 7), slice(2, 4)],
                         ids=["offset", "padding", "column", "taps"])
def test_emulation_catches_a_wrong_table(field):
    """The emulation follows the table: rows 1 and 2 (both 2-tap phases of 3x3 stride 2, no
    padding) with one field swapped, or row 1's taps transposed, give a wrong gradient."""
    kernel, stride, pad, hw = (3, 3), (2, 2), (0, 0), (8, 8)
    k_in, c, n = 8, 8, 1
    g = torch.Generator().manual_seed(3)
    w = torch.randn(k_in, c, 3, 3, dtype=torch.float64, generator=g)
    dy = torch.randn(n, k_in, 3, 3, dtype=torch.float64, generator=g).contiguous(memory_format=torch.channels_last)
    want = torch.nn.grad.conv2d_input((n, c) + hw, w, dy, stride=stride, padding=pad)
    p = dict(gf.plan((n, c) + hw, k_in, kernel, stride, pad, False, EMU_CFG, sms=3), stride=stride)
    rows = [list(r) for r in p["rows"]]
    if field == slice(2, 4):
        rows[1][2:4] = rows[1][2:4][::-1]
    else:
        rows[1][field], rows[2][field] = rows[2][field], rows[1][field]
    assert rows != [list(r) for r in p["rows"]]
    dx = torch.zeros(want.shape, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    _emulate(dy, turned_filter(w, order=p["order"]), dx, dict(p, rows=[tuple(r) for r in rows]), EMU_CFG, k_in,
             1.0, 0.0, 1)
    assert not torch.allclose(dx, want)
    dx.zero_()
    _emulate(dy, turned_filter(w, order=p["order"]), dx, p, EMU_CFG, k_in, 1.0, 0.0, 1)
    torch.testing.assert_close(dx, want, rtol=1e-12, atol=1e-12)


# -- CPU: offline sm_90 compiles ------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled():
    calls = [("tridnn.cuda.gluon_dgrad_fused", "compile_sm90", c, dict(has_beta=hb))
             for c in OFFERED + OFFERED_TF32 for hb in (False, True)]
    facts = gluon_helpers.compile_in_child(calls)
    return {(gc.name(c), kw["has_beta"]): f for (_, _, c, kw), f in zip(calls, facts)}


@pytest.mark.parametrize("has_beta", [False, True])
@pytest.mark.parametrize("cfg", OFFERED + OFFERED_TF32, ids=gc.name)
def test_compiles_for_sm90(cfg, has_beta, compiled):
    facts = compiled[(gc.name(cfg), has_beta)]
    sass = facts["sass"]
    assert not re.search(r"\b(STL|LDL)\b", sass), "register spills"
    assert facts["shared"] >= gc.shared_bytes(cfg)
    assert facts["shared"] * cfg["PER_SM"] <= 228 * 1024
    bm = cfg["NB"] * cfg["BH"] * cfg["BW"]
    wg = cfg["num_warps"] // 4
    consumers = 2 if cfg["PINGPONG"] else 1
    k_mma, pattern = (8, r"HGMMA\.64x(\d+)x8\.F32\.TF32") if cfg.get("TF32") else (16, r"HGMMA\.64x(\d+)x16\.F32\.BF16")
    hgmma = re.findall(pattern, sass)
    assert len(hgmma) == (cfg["BLOCK_K"] // k_mma) * (bm // 64 // wg) * consumers, len(hgmma)
    assert all(int(v) == cfg["BLOCK_N"] for v in hgmma)
    cap, loader, _ = gc._regs(cfg)
    regs = [int(r, 16) for r in re.findall(r"USETMAXREG\.\w+\.CTAPOOL (?:UP\d, )?(0x[0-9a-f]+)", sass)]
    if cap < 256:
        assert min(regs) <= 40 and max(regs) > cap, (regs, cap)
    # dy's 4-D box and the filter's 2-D one (loader); dx's 5-D box stored (and with beta read)
    assert sass.count("UTMALDG.4D") == 1 and "UTMALDG.2D" in sass
    assert sass.count("UTMASTG.5D") == consumers
    assert sass.count("UTMALDG.5D") == (consumers if has_beta else 0)
    assert "UTMASTG.4D" not in sass


# -- GPU: forced through ALGO_1 with the fused launch on --------------------------------------
GPU_CASES = [  # dx channels a multiple of 256: every config's BLOCK_N divides them
    P(256, 128, (14, 14), 3, 2, 1),          # 3x3 stride 2 (res3/4/5_3x3s2's form)
    P(256, 64, (10, 8), (5, 3), 2, (2, 1)),  # 5x3 filter, unequal padding
    P(256, 64, (12, 9), 3, 3, 1),            # stride 3
    P(256, 64, (8, 6), 2, 2, 0),             # 2x2 stride 2: one tap a phase
    P(256, 64, (6, 16), 4, 2, 1),            # 4x4: four taps every phase
    P(256, 64, (13, 11), 3, 2, 1),           # odd sizes: not fused, a launch per phase
    P(256, 128, (12, 10), 1, 2, 0),          # 1x1 stride 2: three phases without taps (zeros)
    P(256, 64, (11, 9), 1, 2, 0),            # the same, odd sizes: one launch, three zero fills
]


@pytest.fixture
def forced(monkeypatch):
    state = force_one_config(monkeypatch)
    monkeypatch.setattr(gf, "FUSED_PHASES", True)
    return state


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", OFFERED, ids=gc.name)
@pytest.mark.parametrize("p", GPU_CASES, ids=lambda p: p["name"])
def test_gpu_fused_backward_data_against_float64(p, cfg, rng, forced):
    """NaN-poisoned float16 dx; bfloat16 CONVOLUTION mode with alpha 2, beta 0.5; float16
    again (the direct launcher): one Gluon launch where the fused kernel applies, else one a
    phase."""
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    s = p["stride"]
    fused = all(v % st == 0 for v, st in zip(p["spatial"], s)) and p["C"] % cfg["BLOCK_N"] == 0
    tapped = sum(1 for ph in phases(p["kernel"], s, p["pad"], False)[0] if ph.taps[0] * ph.taps[1])
    plain = ("float16", tridnn.ConvMode.CROSS_CORRELATION, 1.0, 0.0)
    for dtype, mode, alpha, beta in (plain, ("bfloat16", tridnn.ConvMode.CONVOLUTION, 2.0, 0.5), plain):
        before = forced.launches
        assert run_case("bwd_data", ALGO_1, p, dtype, "NHWC", rng, n=3, device="cuda", mode=mode,
                        alpha=alpha, beta=beta) is None
        assert forced.launches == before + (1 if fused else tapped), "one Gluon launch for all phases"


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", OFFERED + OFFERED_TF32, ids=gc.name)
def test_gpu_direct_launch_against_float64(cfg):
    """gf.prepare + launch without the tuner: every config on all SMs and on 3 programs (many
    tiles each: the ring wraps across tiles of different phases, ping-pong consumers
    alternate), beta 0 into NaN and beta 0.5, 3x3 stride 2, 5x3 stride (2, 1) and 1x1 stride 2
    (three phases of store-only tiles)."""
    need_hopper()
    dtype = torch.float32 if cfg.get("TF32") else torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(0)
    for (kh, kw), stride, pad, (h, w) in (((3, 3), (2, 2), (1, 1), (14, 10)), ((5, 3), (2, 1), (2, 1), (10, 7)),
                                          ((1, 1), (2, 2), (0, 0), (14, 10))):
        n, c, k = 3, 256, 128
        oh, ow = (h + 2 * pad[0] - kh) // stride[0] + 1, (w + 2 * pad[1] - kw) // stride[1] + 1
        dy = torch.randn(n, k, oh, ow, device="cuda", generator=g).to(dtype).contiguous(
            memory_format=torch.channels_last)
        wt = (torch.randn(k, c, kh, kw, device="cuda", generator=g) / (k * kh * kw) ** 0.5).to(dtype)
        want = torch.nn.grad.conv2d_input((n, c, h, w), wt.double(), dy.double(), stride=stride, padding=pad)
        prior = torch.randn(n, c, h, w, device="cuda", generator=g).to(dtype).contiguous(
            memory_format=torch.channels_last)
        for sms in (None, 3):
            for alpha, beta in ((1.0, 0.0), (2.0, 0.5)):
                dx = prior.clone() if beta else torch.full_like(prior, float("nan"))
                gf.launch(*gf.prepare(dy, wt, dx, (kh, kw), stride, pad, False, cfg, alpha=alpha, beta=beta,
                                      sms=sms))
                torch.cuda.synchronize()
                expect = alpha * want + beta * prior.double()
                err = ((dx.double() - expect).abs().max() / expect.abs().max()).item()
                assert err < 2e-2, (gc.name(cfg), sms, beta, err)
