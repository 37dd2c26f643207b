"""The strided Gluon forward convolution (tridnn.cuda.gluon_conv_strided).

CPU: every config compiles for sm_90 offline (in this process, first: tests/conftest.py
runs ``test_compiles_*`` of test_gluon_* modules before any interpreted kernel), and the
host side is checked exactly: the phase view, the loader's tap walk against NumPy's floor
divmod, a NumPy convolution through both against float64, the why_not reasons.
GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_conv_strided.py``): results
against a float64 convolution of the same bfloat16 inputs.
"""
import re

import numpy as np
import pytest
import torch

from tridnn.testing import seed_for

from gluon_helpers import compile_in_child, need_hopper

gs = pytest.importorskip("tridnn.cuda.gluon_conv_strided", reason="Triton without Gluon")


FUSED = dict(act=1, has_bias=True, has_z=True)  # what gluon_conv offers (not with beta: spills there too)


@pytest.fixture(scope="module")
def sm90():
    """{config name + variant: (shared bytes, registers, SASS)} of the sm_90 compiles, made in a
    child process (gluon_helpers.compile_in_child)."""
    variants = [(c, {}) for c in gs.CONFIGS] + [(gs.CONFIGS[0], FUSED)]
    facts = compile_in_child([("tridnn.cuda.gluon_conv_strided", "compile_sm90", c, kw) for c, kw in variants])
    return {gs.name(c) + repr(sorted(kw.items())): (f["shared"], f["regs"], f["sass"])
            for (c, kw), f in zip(variants, facts)}


# -- CPU: offline sm_90 compile ---------------------------------------------------------
@pytest.mark.parametrize("cfg", gs.CONFIGS, ids=gs.name)
def test_compiles_for_sm90(cfg, sm90):
    shared, regs, code = sm90[gs.name(cfg) + "[]"]
    assert shared >= gs.shared_bytes(cfg) and shared * cfg["PER_SM"] <= 228 * 1024
    bm = cfg["NB"] * cfg["BH"] * cfg["BW"]
    per_step = (cfg["BLOCK_K"] // 16) * (bm // 64 // (cfg["num_warps"] // 4)) * (2 if cfg["PINGPONG"] else 1)
    hgmma = re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16", code)
    assert len(hgmma) == per_step and all(int(n) == cfg["BLOCK_N"] for n in hgmma), (len(hgmma), per_step)
    cap = gs.constexprs(cfg)[1]  # maxnreg
    assert regs <= cap
    moves = [int(r, 16) for r in re.findall(r"USETMAXREG\.\w+\.CTAPOOL (?:UP\d, )?(0x[0-9a-f]+)", code)]
    if cap < 256:  # the loader gives registers back, the consumers take them
        assert min(moves) <= 40 and max(moves) > cap, (moves, cap)
    assert "UTMALDG.5D" in code and "UTMALDG.2D" in code and "UTMASTG.4D" in code
    assert not re.search(r"\b(STL|LDL)\b", code), "register spills"


def test_compiles_beta_and_fused_epilogue(sm90):
    cfg = gs.CONFIGS[0]
    shared, regs, code = sm90[gs.name(cfg) + repr(sorted(FUSED.items()))]
    assert "UTMALDG.5D" in code and regs <= gs.constexprs(cfg)[1]
    assert not re.search(r"\b(STL|LDL)\b", code), "register spills"


# -- CPU: host side ---------------------------------------------------------------------
def _x(n, c, h, w, dtype=torch.bfloat16):
    return torch.randn(n, c, h, w).to(dtype).to(memory_format=torch.channels_last)


def test_configs_are_gluon_convs_picks():
    from tridnn.cuda import gluon_conv as gc
    names = {gc.name(c) for c in gc.PICKS_LARGE + gc.PICKS_MEDIUM + gc.PICKS_SMALL + gc.PICKS_INNER
             + gc.PICKS_INNER_SMALL}
    assert {gs.name(c) for c in gs.CONFIGS} == names and len(gs.CONFIGS) == len(names)
    for ow, k in ((28, 128), (14, 256), (7, 512), (28, 512), (14, 1024), (7, 2048)):
        for n in (None, 64, 256, 48):
            want = [gc.name(c) for c in gc.picks(ow, k, False, n=n)]
            assert [gs.name(c) for c in gs.picks(ow, k, n=n)] == want


@pytest.mark.parametrize("images_inner", [False, True])
def test_descriptor_boxes_reproduce_the_convolution(images_inner):
    """The kernel's walk (gluon_helpers.emulate_gluon_conv_strided: tiles by _tile_coords,
    the loader's tap walk over the phase view from prepare's walk arguments, the epilogue's
    old-y and z tiles and its store), every box read and written through the descriptors
    ``prepare`` builds in the loader's and the epilogue's coordinate order
    (images_inner: [rows, row phase, columns, images, column phase * C + channels] for x,
    [rows, columns, images, channels] for y and z; zero outside, stores clipped, as TMA
    does), gives alpha * conv + beta * y + alpha2 * z in float64 at stride (2, 3)."""
    import gluon_helpers
    from tridnn.cuda import gluon_conv as gc
    n, c, k, h, w_, kh, kw, pad, stride = 3, 128, 64, 10, 9, 3, 3, (1, 2), (2, 3)
    cfg = gc.config(2, 2, 2, 64, 3, 4, images_inner=images_inner)
    x = torch.randint(-3, 4, (n, c, h, w_)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    wt = torch.randint(-3, 4, (k, c, kh, kw)).to(torch.bfloat16)
    oh, ow = gs.out_size(h, w_, kh, kw, pad, (1, 1), stride)
    y0 = torch.randint(-3, 4, (n, k, oh, ow)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    z = torch.randint(-3, 4, (n, k, oh, ow)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    y = y0.clone()
    grid, args, meta, out = gs.prepare(x, wt, stride, pad, (1, 1), cfg, y=y, alpha=2.0, beta=0.5, sms=4,
                                       epilogue=(None, z, 0.25, -1, 0.0, 1.0))
    assert out is y and meta["IMAGES_INNER"] == images_inner
    gluon_helpers.emulate_gluon_conv_strided(args, meta)
    want = (2.0 * torch.nn.functional.conv2d(x.double(), wt.double(), stride=stride, padding=pad)
            + 0.5 * y0.double() + 0.25 * z.double())
    torch.testing.assert_close(y.double(), want.to(torch.bfloat16).double())


@pytest.mark.parametrize("stride", [(2, 2), (3, 1), (1, 2)])
def test_phase_view_addresses(stride):
    """view[n, i, b, j, a*C + c] is x[n, c, sh*i + b, sw*j + a] (the memory TMA reads)."""
    x = torch.arange(2 * 64 * 6 * 4, dtype=torch.float32).view(2, 64, 6, 4).to(memory_format=torch.channels_last)
    shape, strides = gs.phase_view(x, stride)
    sh, sw = stride
    assert shape == (2, 6 // sh, sh, 4 // sw, sw * 64)
    assert strides == (6 * 4 * 64, sh * 4 * 64, 4 * 64, sw * 64, 1)
    v = torch.as_strided(x, shape, strides)
    for n, i, b, j, a, c in [(0, 0, 0, 0, 0, 0), (1, shape[1] - 1, sh - 1, shape[3] - 1, sw - 1, 63), (1, 1, 0, 0, 0, 5)]:
        assert v[n, i, b, j, a * 64 + c] == x[n, c, sh * i + b, sw * j + a]


@pytest.mark.parametrize("k,pad,dil,stride", [((3, 3), (1, 1), (1, 1), (2, 2)), ((1, 1), (0, 0), (1, 1), (2, 2)),
                                              ((5, 3), (2, 1), (1, 2), (2, 3)), ((3, 3), (0, 4), (3, 5), (2, 2)),
                                              ((7, 7), (3, 3), (1, 1), (2, 2)), ((3, 2), (1, 0), (2, 1), (1, 1))])
def test_tap_walk_matches_numpy_divmod(k, pad, dil, stride):
    c = 192
    kh, kw = np.meshgrid(np.arange(k[0]), np.arange(k[1]), indexing="ij")
    qh, qw = (kh * dil[0] - pad[0]).ravel(), (kw * dil[1] - pad[1]).ravel()
    want = np.stack([np.floor_divide(qh, stride[0]), np.mod(qh, stride[0]),
                     np.floor_divide(qw, stride[1]), np.mod(qw, stride[1]) * c], axis=1)
    got = np.array(gs.walk_taps(c, k[0], k[1], pad, dil, stride))
    np.testing.assert_array_equal(got, want)
    args = gs.walk_args(c, pad, dil, stride)
    assert 0 <= args[5] < stride[0] and 0 <= args[7] < stride[1] * c  # one wrap per step suffices


@pytest.mark.parametrize("case", [(2, 64, 16, 8, 10, 3, 3, 1, 2), (1, 128, 8, 6, 6, 1, 1, 0, 2),
                                  (1, 64, 8, 9, 6, 3, 3, 0, 3), (2, 64, 8, 8, 8, 5, 5, 2, 2)],
                         ids=lambda c: "x".join(map(str, c)))
def test_numpy_phase_view_convolution(case):
    """The convolution assembled as the kernel does (per tap, the output tile's box of the
    phase view at the walked origin, zero out of range, times the tap's filter) equals float64."""
    n, c, k, h, w_, kh, kw, pad, s = case
    x = torch.randn(n, c, h, w_, dtype=torch.float64).to(memory_format=torch.channels_last)
    w = torch.randn(k, c, kh, kw, dtype=torch.float64)
    ref = torch.nn.functional.conv2d(x, w, stride=s, padding=pad).numpy()
    oh, ow = gs.out_size(h, w_, kh, kw, (pad, pad), (1, 1), (s, s))
    assert (oh, ow) == ref.shape[2:]
    shape, strides = gs.phase_view(x, (s, s))
    v = torch.as_strided(x, shape, strides).numpy()
    got = np.zeros((n, oh, ow, k))
    for t, (ah, bh, aw, cb) in enumerate(gs.walk_taps(c, kh, kw, (pad, pad), (1, 1), (s, s))):
        box = np.zeros((n, oh, ow, c))
        for i in range(oh):
            for j in range(ow):
                if 0 <= i + ah < shape[1] and 0 <= j + aw < shape[3]:
                    box[:, i, j] = v[:, i + ah, bh, j + aw, cb:cb + c]
        got += box @ w[:, :, t // kw, t % kw].numpy().T
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), ref, rtol=1e-10, atol=1e-10)


def test_why_not():
    w = torch.zeros(64, 64, 3, 3, dtype=torch.bfloat16)
    assert gs.why_not(_x(1, 64, 8, 8), w, (1, 1), (1, 1), (2, 2)) is None
    assert gs.why_not(_x(1, 64, 8, 9), w, (1, 1), (1, 1), (2, 2)) is not None  # W odd
    assert gs.why_not(_x(1, 64, 9, 8), w, (1, 1), (1, 1), (2, 2)) is not None  # H odd
    assert gs.why_not(_x(1, 64, 9, 8), w, (1, 1), (1, 1), (3, 2)) is None      # 9 = 3 * 3
    assert gs.why_not(_x(1, 64, 8, 8).contiguous(), w, (1, 1), (1, 1), (2, 2)) is not None  # NCHW
    # float32 runs with the TF32 configs (gluon_conv.forward_why_not offers them only under
    # TENSOR_OP math: tests/test_gluon_tf32.py); mixed dtypes and float64 do not
    assert gs.why_not(_x(1, 64, 8, 8, torch.float32), w.float(), (1, 1), (1, 1), (2, 2)) is None
    assert gs.why_not(_x(1, 64, 8, 8, torch.float32), w, (1, 1), (1, 1), (2, 2)) is not None
    assert gs.why_not(_x(1, 64, 8, 8, torch.float64), w.double(), (1, 1), (1, 1), (2, 2)) is not None
    with pytest.raises(ValueError, match="float32"):
        gs.prepare(_x(1, 64, 8, 8), w, (2, 2), cfg=gs.TF32_CONFIGS[0], sms=132)
    with pytest.raises(ValueError, match="multiples of the stride"):
        gs.prepare(_x(1, 64, 7, 8), w, (2, 2), cfg=gs.CONFIGS[0], sms=132)


def test_prepare_arguments():
    x, w = _x(2, 128, 56, 56), torch.zeros(256, 128, 3, 3, dtype=torch.bfloat16)
    cfg = gs.CONFIGS[0]
    grid, args, meta, y = gs.prepare(x, w, (2, 2), (1, 1), cfg=cfg, sms=132)
    assert tuple(y.shape) == (2, 256, 28, 28)
    names = gs.gluon_conv_strided_kernel.arg_names
    a = dict(zip(names, args))
    assert (a["AH0"], a["BH0"], a["AW0"], a["CB0"], a["DAH"], a["DBH"], a["DAW"], a["DCB"], a["SH"], a["SWC"]) == (
        -1, 1, -1, 128, 0, 1, 0, 128, 2, 256)
    tiles = -(-2 // cfg["NB"]) * -(-28 // cfg["BH"]) * -(-28 // cfg["BW"]) * (256 // cfg["BLOCK_N"])
    assert a["NUM_TILES"] == tiles and a["K_STEPS"] == 9 * 2 and grid == (min(tiles, 132),)
    assert list(a["x_desc"].block_shape) == [cfg["NB"], cfg["BH"], 1, cfg["BW"], 64]
    assert list(a["x_desc"].shape) == [2, 28, 2, 28, 256]
    assert set(meta) >= {"NB", "STAGES", "PINGPONG", "maxnreg"} and len(args) == names.index("NB")


# -- GPU: against float64 ----------------------------------------------------------------
GPU_CASES = [  # (N, C, K, H, W, KH, KW, pad, stride)
    (2, 128, 128, 56, 56, 3, 3, 1, 2),   # res3_3x3s2
    (3, 256, 256, 28, 28, 3, 3, 1, 2),   # res4_3x3s2
    (2, 512, 512, 14, 14, 3, 3, 1, 2),   # res5_3x3s2
    (2, 256, 512, 56, 56, 1, 1, 0, 2),   # res3_ds
    (3, 192, 136, 14, 14, 1, 1, 0, 2),   # odd channel counts (3 x 64, 17 x 8), 1x1
    (1, 320, 200, 22, 18, 3, 3, 1, 2),   # 5 x 64 channels, ragged output
    (2, 64, 128, 16, 20, 3, 3, 0, 2),    # padding 0
    (1, 64, 64, 18, 12, 3, 3, 1, 3),     # stride 3
    (130, 128, 128, 14, 14, 3, 3, 1, 2),  # images-inner tiles: full ones of 64 and 128 images, and ragged
]

_REFERENCES = {}


def _problem(case):
    if case not in _REFERENCES:
        n, c, k, h, w_, kh, kw, pad, s = case
        g = torch.Generator().manual_seed(seed_for(case) % 2**31)
        x = torch.randn(n, c, h, w_, generator=g).to(torch.bfloat16)
        w = (torch.randn(k, c, kh, kw, generator=g) / np.sqrt(c * kh * kw)).to(torch.bfloat16)
        ref = torch.nn.functional.conv2d(x.double(), w.double(), stride=s, padding=pad)
        _REFERENCES[case] = (x, w, ref)
    return _REFERENCES[case]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gs.CONFIGS, ids=gs.name)
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_against_float64(case, cfg):
    need_hopper()
    n, c, k, h, w_, kh, kw, pad, s = case
    x, w, ref = _problem(case)
    xd = x.cuda().to(memory_format=torch.channels_last)
    # the full grid, and 3 programs walking many tiles each (ring wraps, ping-pong turns)
    for alpha, sms in ((1.0, None), (0.5, 3)):
        y = gs.conv2d(xd, w.cuda(), (s, s), (pad, pad), cfg=cfg, alpha=alpha, sms=sms)
        torch.cuda.synchronize()
        got, want = y.double().cpu(), alpha * ref
        assert got.shape == want.shape
        err = ((got - want).abs().max() / want.abs().max()).item()
        assert err < 1e-2, (gs.name(cfg), alpha, sms, err)
        assert torch.isfinite(got).all()
    # beta != 0 and the fused epilogue through gluon_conv's consumer
    g = torch.Generator().manual_seed(8)
    old, z = (torch.randn(ref.shape, generator=g).to(torch.bfloat16) for _ in range(2))
    bias = torch.randn(ref.shape[1], generator=g)
    y = old.cuda().to(memory_format=torch.channels_last)
    gs.conv2d(xd, w.cuda(), (s, s), (pad, pad), cfg=cfg, alpha=0.5, sms=3, y=y, beta=0.75)
    torch.cuda.synchronize()
    want = 0.5 * ref + 0.75 * old.double()
    assert ((y.double().cpu() - want).abs().max() / want.abs().max()).item() < 1e-2
    zd = z.cuda().to(memory_format=torch.channels_last)
    y = gs.conv2d(xd, w.cuda(), (s, s), (pad, pad), cfg=cfg, alpha=0.5, sms=3,
                  epilogue=(bias.cuda(), zd, 0.25, 1, 0.0, 1.0))
    torch.cuda.synchronize()
    want = torch.relu(0.5 * ref + 0.25 * z.double() + bias.double()[None, :, None, None])
    assert ((y.double().cpu() - want).abs().max() / want.abs().max()).item() < 1e-2
