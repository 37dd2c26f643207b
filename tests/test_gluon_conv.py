"""The Gluon warp-specialized convolution (tridnn.cuda.gluon_conv).

Gluon kernels do not run under the Triton interpreter, so:
- CPU: every config compiles for sm_90 offline and its SASS has what the kernel is for
  (wgmma, setmaxnreg register reallocation, TMA loads and store);
- GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_conv.py``): results against a
  float64 convolution of the same bfloat16 inputs.
"""
import re

import numpy as np
import pytest
import torch

from tridnn.testing import seed_for

import gluon_helpers
from gluon_helpers import need_hopper

gc = pytest.importorskip("tridnn.cuda.gluon_conv", reason="Triton without Gluon")


def variant_key(name, kwargs) -> str:
    """'name' or 'name|k=v,...' for compile_sm90's keyword arguments."""
    return name + ("|" + ",".join(f"{k}={v}" for k, v in sorted(kwargs.items())) if kwargs else "")


def compile_in_child(variants) -> dict:
    """{variant_key: {shared, regs, sass, blocks}} of (config name, compile_sm90 keyword
    arguments) variants compiled for sm_90 (gluon_helpers.compile_in_child: in a child process)."""
    by_name = {gc.name(c): c for c in gc.CONFIGS}
    facts = gluon_helpers.compile_in_child([("tridnn.cuda.gluon_conv", "compile_sm90", by_name[name], kwargs)
                                            for name, kwargs in variants])
    return {variant_key(name, kwargs): f for (name, kwargs), f in zip(variants, facts)}


@pytest.fixture(scope="module")
def sm90():
    return compile_in_child([(gc.name(c), {}) for c in gc.CONFIGS])


# -- CPU: offline sm_90 compile ---------------------------------------------------------
@pytest.mark.parametrize("cfg", gc.CONFIGS, ids=gc.name)
def test_compiles_for_sm90(cfg, sm90):
    shared = sm90[gc.name(cfg)]["shared"]
    assert shared >= gc.shared_bytes(cfg), "the ring and output tile live in shared memory"
    assert shared * cfg["PER_SM"] <= 228 * 1024, "PER_SM programs fit one H200 SM"
    sass = sm90[gc.name(cfg)]["sass"]
    bm = cfg["NB"] * cfg["BH"] * cfg["BW"]
    wg = cfg["num_warps"] // 4
    # one 64-row wgmma per 16 channels of BLOCK_K, per 64-row slice of a warpgroup's rows
    # (the ping-pong kernel has the main loop twice: one copy per consumer partition)
    per_step = (cfg["BLOCK_K"] // 16) * (bm // 64 // wg) * (2 if cfg["PINGPONG"] else 1)
    hgmma = re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16", sass)
    assert len(hgmma) == per_step, (len(hgmma), per_step)
    assert all(int(n) == cfg["BLOCK_N"] for n in hgmma)
    # registers fit PER_SM programs; where the cap binds, the loader gives registers back and
    # the consumers take them (setmaxnreg)
    cap, loader, second = gc._regs(cfg)
    consumer_warps = cfg["num_warps"] * (2 if cfg["PINGPONG"] else 1)
    assert cap * (consumer_warps + 4) * 32 * cfg["PER_SM"] <= 65536
    regs = [int(r, 16) for r in re.findall(r"USETMAXREG\.\w+\.CTAPOOL (?:UP\d, )?(0x[0-9a-f]+)", sass)]
    if cap < 256:
        assert min(regs) <= 40 and max(regs) > cap, (regs, cap)
    assert "UTMALDG.4D" in sass and "UTMALDG.2D" in sass and "UTMASTG.4D" in sass


def test_configs_fit_shared_memory():
    for cfg in gc.CONFIGS:
        assert gc.shared_bytes(cfg) * cfg["PER_SM"] <= 227 * 1024, gc.name(cfg)


def test_why_not():
    x = torch.zeros(1, 64, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.zeros(64, 64, 3, 3, dtype=torch.bfloat16)
    assert gc.why_not(x, w, (1, 1), (1, 1)) is None
    assert gc.why_not(x.contiguous(), w, (1, 1), (1, 1)) is not None  # NCHW
    assert gc.why_not(x, w, (1, 1), (1, 1), stride=(2, 2)) is not None
    assert gc.why_not(x[:, :32], w[:, :32], (1, 1), (1, 1)) is not None  # 32 channels
    assert gc.why_not(x.float(), w.float(), (1, 1), (1, 1)) is None  # float32: the TF32 configs
    assert gc.why_not(x.float(), w, (1, 1), (1, 1)) is not None  # mixed
    k128 = next(cfg for cfg in gc.CONFIGS if cfg["BLOCK_K"] == 128)
    with pytest.raises(ValueError, match="BLOCK_K"):
        gc.prepare(x, w, cfg=k128, sms=132)  # 64 channels, 128 a k-step


def test_filter_matrix_order():
    w = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).view(2, 3, 2, 2)
    m = gc.filter_matrix(w)
    assert m.shape == (2, 12)
    for k in range(2):
        for kh in range(2):
            for kw in range(2):
                for c in range(3):
                    assert m[k, (kh * 2 + kw) * 3 + c] == w[k, c, kh, kw]


@pytest.mark.parametrize("images_inner", [False, True])
def test_descriptor_boxes_reproduce_the_convolution(images_inner):
    """The kernel's walk (gluon_helpers.emulate_gluon_conv: tiles by _tile_coords, the
    loader's k-steps over taps and channel blocks, the epilogue's old-y and z tiles and its
    store), every box read and written through the descriptors ``prepare`` builds in the
    order each layout's take them (images_inner: [rows, columns, images, channels]; zero
    outside, stores clipped, as TMA does), gives alpha * conv + beta * y + alpha2 * z in
    float64. So the permuted views and the coordinate order agree."""
    n, c, k, h, w, kh, kw, pad, dil = 3, 128, 64, 5, 6, 3, 3, 1, 2
    cfg = gc.config(2, 2, 2, 64, 3, 4, images_inner=images_inner)
    # small integers: exact in bfloat16 and in the float64 sums
    x = torch.randint(-3, 4, (n, c, h, w)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    wt = torch.randint(-3, 4, (k, c, kh, kw)).to(torch.bfloat16)
    oh, ow = h + 2 * pad - dil * (kh - 1), w + 2 * pad - dil * (kw - 1)
    y0 = torch.randint(-3, 4, (n, k, oh, ow)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    z = torch.randint(-3, 4, (n, k, oh, ow)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    y = y0.clone()
    grid, args, meta, out = gc.prepare(x, wt, (pad, pad), (dil, dil), cfg, y=y, alpha=2.0, beta=0.5, sms=4,
                                       epilogue=(None, z, 0.25, -1, 0.0, 1.0))
    assert out is y and meta.get("IMAGES_INNER", False) == images_inner
    gluon_helpers.emulate_gluon_conv(args, meta)
    want = (2.0 * torch.nn.functional.conv2d(x.double(), wt.double(), padding=pad, dilation=dil)
            + 0.5 * y0.double() + 0.25 * z.double())
    torch.testing.assert_close(y.double(), want.to(torch.bfloat16).double())


# -- GPU: against float64 ----------------------------------------------------------------
GPU_CASES = [  # (N, C, K, H, W, KH, KW, pad, dil)
    (2, 64, 64, 56, 56, 3, 3, 1, 1),
    (3, 128, 128, 28, 28, 3, 3, 1, 1),
    (4, 256, 256, 14, 14, 3, 3, 1, 1),
    (5, 512, 512, 7, 7, 3, 3, 1, 1),
    (1, 64, 200, 13, 21, 3, 3, 1, 1),   # ragged everything, K not a multiple of BLOCK_N
    (2, 128, 64, 17, 9, 5, 3, 2, 1),    # non-square filter, padding 2
    (2, 64, 128, 20, 20, 3, 3, 2, 2),   # dilation 2
    (2, 64, 64, 16, 16, 1, 1, 0, 1),    # 1x1
    (1, 256, 136, 1, 1000, 1, 1, 0, 1),  # a GEMM: one row of 1000 pixels (the flat-box configs)
    (130, 64, 128, 7, 7, 3, 3, 1, 1),   # images-inner tiles: full ones of 64 and 128 images, and ragged
    (64, 128, 64, 14, 14, 3, 3, 1, 1),
]


_REFERENCES = {}


def _problem(case):
    """bfloat16 inputs and their float64 convolution, made once per case."""
    if case not in _REFERENCES:
        n, c, k, h, w_, kh, kw, pad, dil = case
        g = torch.Generator().manual_seed(seed_for(case) % 2**31)
        x = torch.randn(n, c, h, w_, generator=g).to(torch.bfloat16)
        w = (torch.randn(k, c, kh, kw, generator=g) / np.sqrt(c * kh * kw)).to(torch.bfloat16)
        ref = torch.nn.functional.conv2d(x.double(), w.double(), padding=pad, dilation=dil)
        _REFERENCES[case] = (x, w, ref)
    return _REFERENCES[case]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gc.CONFIGS, ids=gc.name)
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_against_float64(case, cfg):
    need_hopper()
    n, c, k, h, w_, kh, kw, pad, dil = case
    if c % cfg["BLOCK_K"]:
        pytest.skip("channels not a multiple of this config's BLOCK_K")
    x, w, ref = _problem(case)
    xd = x.cuda().to(memory_format=torch.channels_last)
    # alpha; and a grid of 3 programs, so each one walks many tiles (the ring wraps across
    # tiles, ping-pong consumers alternate, the output buffer is reused after a store)
    for alpha, sms in ((1.0, None), (0.5, 3)):
        y = gc.conv2d(xd, w.cuda(), (pad, pad), (dil, dil), cfg=cfg, alpha=alpha, sms=sms)
        torch.cuda.synchronize()
        got = y.double().cpu()
        want = alpha * ref
        assert got.shape == want.shape
        err = ((got - want).abs().max() / want.abs().max()).item()
        # bfloat16 output rounding (2^-8) on top of float32 accumulation
        assert err < 1e-2, (gc.name(cfg), alpha, sms, err)
        # every output written (no NaN/garbage left from torch.empty in uncovered tiles)
        assert torch.isfinite(got).all()
    # beta != 0: the old output is read by TMA and blended, on 3 programs (each partition's
    # old-tile barrier goes through many phases) and on the full grid
    for alpha, beta, sms in ((0.5, 0.75, 3), (1.0, -1.0, None)):
        g = torch.Generator().manual_seed(7)
        old = torch.randn(ref.shape, generator=g).to(torch.bfloat16)
        y = old.cuda().to(memory_format=torch.channels_last)
        gc.conv2d(xd, w.cuda(), (pad, pad), (dil, dil), cfg=cfg, alpha=alpha, sms=sms, y=y, beta=beta)
        torch.cuda.synchronize()
        want = alpha * ref + beta * old.double()
        err = ((y.double().cpu() - want).abs().max() / want.abs().max()).item()
        assert err < 1e-2, (gc.name(cfg), alpha, beta, sms, err)
    # the fused epilogue: relu(alpha * conv + alpha2 * z + bias), z and bias by TMA and
    # pointer, 3 programs (the z barrier's phases) and the full grid
    g = torch.Generator().manual_seed(8)
    z = torch.randn(ref.shape, generator=g).to(torch.bfloat16)
    bias = torch.randn(ref.shape[1], generator=g)
    want = torch.relu(0.5 * ref + 0.25 * z.double() + bias.double()[None, :, None, None])
    for sms in (3, None):
        zd = z.cuda().to(memory_format=torch.channels_last)
        y = gc.conv2d(xd, w.cuda(), (pad, pad), (dil, dil), cfg=cfg, alpha=0.5, sms=sms,
                      epilogue=(bias.cuda(), zd, 0.25, 1, 0.0, 1.0))
        torch.cuda.synchronize()
        err = ((y.double().cpu() - want).abs().max() / want.abs().max()).item()
        assert err < 1e-2, (gc.name(cfg), "relu+bias+z", sms, err)
