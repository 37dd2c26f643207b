"""The Gluon TMA streaming reduction (tridnn.cuda.gluon_stream).

Gluon kernels do not run under the Triton interpreter, so:
- CPU: every config compiles for sm_90 offline and its SASS has what the kernel is for
  (3-D TMA loads, 16-byte shared-memory reads, no local-memory spills, fits the SM); the
  launch plan covers every box exactly once; a NumPy mirror of the kernel's walk (units,
  boxes, TMA zero fill, shifts, the masked last box) feeds the real finish kernel in the
  interpreter, against float64;
- GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_stream.py``): results against
  float64 sums, means and variances of the same data.
"""
import json
import os
import re

import numpy as np
import pytest
import torch

from gluon_helpers import compile_in_child, need_hopper

gs = pytest.importorskip("tridnn.cuda.gluon_stream", reason="Triton without Gluon")
from tridnn.cuda.layer_utils import _let_interpreter_loop_over_runtime_bounds  # noqa: E402

if os.environ.get("TRITON_INTERPRET") == "1":
    _let_interpreter_loop_over_runtime_bounds()  # the finish kernel loops over runtime bounds


OTHER_DTYPES = [("fp16", 64), ("fp32", 256), ("bf16", 3), ("bf16", 200), ("bf16", 2048), ("fp32", 3)]
_MOD = "tridnn.cuda.gluon_stream"


def _stats_kwargs(squares, dtype="bf16", channels=256):
    return dict(squares=squares, dtype=dtype, channels=channels)


@pytest.fixture(scope="module")
def sm90():
    """{(function, config name, keyword arguments as JSON): facts (shared, regs, sass, blocks)}
    of every variant's sm_90 compile, in one child process (gluon_helpers.compile_in_child)."""
    calls = ([(_MOD, "compile_sm90", c, _stats_kwargs(sq)) for c in gs.CONFIGS for sq in (False, True)]
             + [(_MOD, "compile_sm90", gs.CONFIGS[0], _stats_kwargs(sq, d, ch))
                for d, ch in OTHER_DTYPES for sq in (False, True)]
             + [(_MOD, "compile_apply_sm90", c, dict(relu=True, reverse=r)) for c in gs.CONFIGS for r in (False, True)])
    facts = compile_in_child(calls)
    return {_key(fn, c, kw): f for (_, fn, c, kw), f in zip(calls, facts)}


def _key(function, cfg, kwargs):
    return function, gs.name(cfg), json.dumps(kwargs, sort_keys=True)


# -- CPU: offline sm_90 compile ---------------------------------------------------------
@pytest.mark.parametrize("squares", [False, True], ids=["sum", "squares"])
@pytest.mark.parametrize("cfg", gs.CONFIGS, ids=gs.name)
def test_compiles_for_sm90(cfg, squares, sm90):
    k = sm90[_key("compile_sm90", cfg, _stats_kwargs(squares))]
    assert k["shared"] >= gs.shared_bytes(cfg), "the ring lives in shared memory"
    assert (k["shared"] + 1024) * cfg["PER_SM"] <= 228 * 1024, "PER_SM programs fit one H200 SM"
    warps = cfg["num_warps"] + (4 if cfg["WARP_SPEC"] else 0)
    regs = k["regs"]
    assert regs * warps * 32 * cfg["PER_SM"] <= 65536, (regs, "registers for PER_SM programs")
    sass = k["sass"]
    assert "UTMALDG.3D" in sass
    assert "STL" not in sass and "LDL" not in sass, "no local-memory spills"
    # each box is read in 16-byte pieces: BLOCK_P*BLOCK_C*2 / (16 * threads) LDS.128 a box,
    # once per accumulate path (squares: the masked last box has its own copy)
    threads = cfg["num_warps"] * 32
    per_box = cfg["BLOCK_P"] * cfg["BLOCK_C"] * 2 // (16 * threads)
    lds = len(re.findall(r"LDS\.128", sass))
    assert lds == per_box * (2 if squares else 1), (lds, per_box)
    # one TMA load a box: the whole box in one message (no swizzle, <= 256 x 256)
    assert k["blocks"][0] == [1, cfg["BLOCK_P"], cfg["BLOCK_C"]]


@pytest.mark.parametrize("dtype,channels", OTHER_DTYPES)
def test_compiles_other_dtypes_and_widths(dtype, channels, sm90):
    cfg = gs.CONFIGS[0]
    for squares in (False, True):
        k = sm90[_key("compile_sm90", cfg, _stats_kwargs(squares, dtype, channels))]
        sass = k["sass"]
        assert "UTMALDG.3D" in sass and "LDS.128" in sass and "STL" not in sass
        itemsize = 4 if dtype == "fp32" else 2
        p = gs.plan((64, channels, 56, 56), itemsize, not squares, cfg)
        assert gs.box_bytes(dict(cfg, BLOCK_P=p["BLOCK_P"], BLOCK_C=p["BLOCK_C"]), itemsize) <= 64 * 1024
        assert k["shared"] * cfg["PER_SM"] <= 227 * 1024


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("cfg", gs.CONFIGS, ids=gs.name)
def test_apply_compiles_for_sm90(cfg, reverse, sm90):
    k = sm90[_key("compile_apply_sm90", cfg, dict(relu=True, reverse=reverse))]
    rings = gs.apply_rings(cfg, gs.box_bytes(cfg))
    assert rings is not None and k is not None, "every config has room for the apply pass"
    assert k["shared"] >= (rings[0] + rings[1]) * gs.box_bytes(cfg)
    assert (k["shared"] + 1024) * cfg["PER_SM"] <= 228 * 1024
    sass = k["sass"]
    assert "UTMALDG.3D" in sass and "UTMASTG.3D" in sass and "STL" not in sass
    per_box = cfg["BLOCK_P"] * cfg["BLOCK_C"] * 2 // (16 * cfg["num_warps"] * 32)
    assert len(re.findall(r"LDS\.128", sass)) == per_box and len(re.findall(r"STS\.128", sass)) == per_box


def test_apply_walk_covers_every_box_once():
    """The apply pass's order (units from a program's last, boxes from a unit's last) is a
    permutation of the statistics pass's boxes, program by program."""
    for cfg in gs.CONFIGS:
        for shape in SHAPES:
            p = gs.plan(shape, 2, False, cfg, sms=7)
            units = _units(p)
            for pid in range(p["grid"]):
                mine = list(range(pid, p["UNITS"], p["grid"]))
                fwd = [(units[u][0], units[u][1], units[u][3] + k) for u in mine for k in range(units[u][4])]
                my_units = (p["UNITS"] - pid + p["grid"] - 1) // p["grid"]
                rev = []
                for o in range(my_units):
                    u = pid + (my_units - 1 - o) * p["grid"]
                    seg, cb, sp, j0, nb = units[u]
                    rev += [(seg, cb, j0 + nb - 1 - k) for k in range(nb)]
                assert rev == fwd[::-1]


def test_configs_fit_shared_memory():
    for cfg in gs.CONFIGS:
        assert (gs.shared_bytes(cfg) + 9 * 1024) * cfg["PER_SM"] <= 228 * 1024, gs.name(cfg)


# -- CPU: host arithmetic -------------------------------------------------------------------
SHAPES = [(64, 256, 56, 56), (3, 3, 5, 8), (2, 200, 7, 9), (5, 64, 3, 3), (1, 2048, 4, 5), (2, 256, 33, 31)]


def _units(p):
    """(segment, column block, first box, boxes) of every unit, in unit order."""
    out = []
    for u in range(p["UNITS"]):
        seg, r = divmod(u, p["CBN"] * p["SPLITS"])
        cb, sp = divmod(r, p["SPLITS"])
        j0 = sp * p["PER"]
        out.append((seg, cb, sp, j0, min(p["PER"], p["B"] - j0)))
    return out


@pytest.mark.parametrize("cfg", gs.CONFIGS, ids=gs.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("per_image", [True, False], ids=["per_image", "all"])
def test_plan_covers_every_box_once(shape, cfg, per_image):
    for itemsize in (2, 4):
        n, c, h, w = shape
        if (h * w if per_image else n * h * w) % gs.group(c, itemsize):
            continue
        p = gs.plan(shape, itemsize, per_image, cfg, sms=132)
        assert p["CC"] * itemsize % 16 == 0 and p["CC"] == p["G"] * c
        assert p["L"] * p["G"] == (h * w if per_image else n * h * w)
        assert p["BLOCK_P"] % p["R"] == 0 and p["BLOCK_P"] <= 256 and p["BLOCK_C"] <= 256
        # the box keeps the configured bytes unless the columns or the 256-row limit cut it
        box = p["BLOCK_P"] * p["BLOCK_C"] * itemsize
        assert box <= max(gs.box_bytes(cfg), p["R"] * p["BLOCK_C"] * itemsize)
        assert box == gs.box_bytes(cfg) or p["BLOCK_C"] >= p["CC"] or p["BLOCK_P"] in (256, p["R"])
        seen = np.zeros((p["SEGS"], p["CBN"], p["B"]), dtype=int)
        for seg, cb, sp, j0, nb in _units(p):
            assert nb >= 1 and sp < p["SPLITS"]
            seen[seg, cb, j0:j0 + nb] += 1
        assert (seen == 1).all()
        assert p["CBN"] * p["BLOCK_C"] >= p["CC"] and p["B"] * p["BLOCK_P"] >= p["L"]
        assert p["grid"] <= 132 * cfg["PER_SM"]


def test_choose_splits_balances():
    # batch statistics of 64x256x56x56 in 64-row boxes: 3136 boxes over 132 programs, 24 each
    s, per = gs.choose_splits(1, 1, 3136, 132)
    assert per == 24 and s == 131
    # sums per image, 49 boxes an image, 64 images: 2 splits (one round of 128 units)
    s, per = gs.choose_splits(64, 1, 49, 132)
    assert (s, per) == (2, 25)


def test_finish_tile():
    assert gs.finish_tile(131) == (256, 16)
    assert gs.finish_tile(2) == (2, 128)
    assert gs.finish_tile(1000) == (256, 16)  # more splits than a tile: the finish loops


def test_why_not():
    x = torch.zeros(2, 3, 4, 5, dtype=torch.float16).to(memory_format=torch.channels_last)
    assert gs.why_not(x, per_image=True) is not None  # 20 pixels, 8 pixels a 16-byte row
    assert gs.why_not(x, per_image=False) is None      # 40 pixels
    assert gs.why_not(x.contiguous(), per_image=False) is not None  # NCHW
    assert gs.why_not(x.double().to(memory_format=torch.channels_last), per_image=False) is not None


def _mirror_partials(x_nhwc, p, squares):
    """The kernel's walk in NumPy (float64): per unit, its boxes of the [SEGS, L, CC] view,
    rows past the segment zero-filled as TMA does, shifted by the first row, the masked last
    box; returns part [SEGS, SPLITS, NACC, CC] as the kernel stores it (float32)."""
    segs, rows, cc = p["SEGS"], p["L"], p["CC"]
    view = x_nhwc.reshape(segs, rows, cc).astype(np.float64)
    shift = view[0, 0] if squares else np.zeros(cc)
    bp, bc = p["BLOCK_P"], p["BLOCK_C"]
    nacc = 2 if squares else 1
    part = np.full((segs, p["SPLITS"], nacc, cc), np.nan)
    for seg, cb, sp, j0, nb in _units(p):
        c0, c1 = cb * bc, min(cc, cb * bc + bc)
        acc = np.zeros(c1 - c0)
        acc2 = np.zeros(c1 - c0)
        for j in range(j0, j0 + nb):
            box = np.zeros((bp, c1 - c0))
            r1 = min(rows, j * bp + bp)
            box[:r1 - j * bp] = view[seg, j * bp:r1, c0:c1]  # the rest: TMA's zero fill
            if squares:
                d = box - shift[c0:c1]
                d[r1 - j * bp:] = 0.0  # the masked last box
                acc += d.sum(0)
                acc2 += (d * d).sum(0)
            else:
                acc += box.sum(0)
        part[seg, sp, 0, c0:c1] = acc
        if squares:
            part[seg, sp, 1, c0:c1] = acc2
    assert not np.isnan(part).any(), "every (split, column) written"
    return torch.from_numpy(part.astype(np.float32))


@pytest.mark.parametrize("shape", [(3, 3, 5, 8), (2, 200, 7, 9), (4, 64, 5, 7), (1, 2048, 3, 4), (2, 40, 9, 9)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cfg", [gs.CONFIGS[0], gs.CONFIGS[6], gs.CONFIGS[8]], ids=gs.name)
def test_mirror_and_finish_against_float64(shape, cfg):
    """Host plan + the real finish kernel (interpreter) on the mirror's partials, for sums per
    image and for mean/variance with |mean| >> std, against float64."""
    from tridnn.cuda.gluon_stream import _finish_kernel, FINISH_BLOCK
    import triton
    if os.environ.get("TRITON_INTERPRET") == "1":
        dev = "cpu"
    elif torch.cuda.is_available():
        dev = "cuda"  # a GPU run (TRIDNN_GPU_TESTS=1): the compiled finish kernel
    else:
        pytest.skip("needs the interpreter or a GPU")
    n, c, h, w = shape
    g = torch.Generator().manual_seed(c * 7 + h)
    x = (300.0 + torch.randn(n, c, h, w, generator=g) * 0.5 + torch.arange(c).view(1, c, 1, 1)).to(torch.float16)
    x = x.to(memory_format=torch.channels_last)
    xn = x.permute(0, 2, 3, 1).contiguous().double().numpy()
    flat = x.permute(0, 2, 3, 1).reshape(-1).float()  # the finish reads the shifts (first row) here
    for per_image, squares in ((True, False), (False, True), (False, False)):
        if gs.why_not(x, per_image):
            continue
        p = gs.plan(x.shape, 2, per_image, cfg, sms=5)  # 5 programs: many units each
        part = _mirror_partials(xn, p, squares).to(dev)
        out = torch.empty((p["SEGS"], c), dtype=torch.float64, device=dev)
        out2 = torch.empty((p["SEGS"], c), dtype=torch.float64, device=dev)
        scale = torch.linspace(0.5, 2.0, c, device=dev)
        bias = torch.linspace(-1.0, 1.0, c, device=dev)
        coef = torch.full((2, c), float("nan"), device=dev)
        _finish_kernel[(p["SEGS"], triton.cdiv(c, FINISH_BLOCK))](
            part, flat.to(dev), out, out2, c, p["CC"], p["G"], p["SPLITS"], p["L"], scale, bias, coef, 1e-5, 1.0, 0.0,
            SQUARES=squares, COEF=squares, BLOCK=FINISH_BLOCK, BLOCK_S=4)  # 4: several split tiles
        out, out2, coef, scale, bias = out.cpu(), out2.cpu(), coef.cpu(), scale.cpu(), bias.cpu()
        ref = xn.reshape(p["SEGS"], -1, c)
        if squares:
            np.testing.assert_allclose(out.numpy()[0], ref[0].mean(0), rtol=1e-6)
            var = ref[0].var(0)
            # float32 partials of (x - shift): error relative to the spread, not the mean
            np.testing.assert_allclose(out2.numpy()[0], var, rtol=1e-3, atol=1e-3 * var.max())
            a = scale.double().numpy() / np.sqrt(var + 1e-5)
            np.testing.assert_allclose(coef[0].numpy(), a, rtol=2e-3)
            np.testing.assert_allclose(coef[1].numpy(), bias.double().numpy() - ref[0].mean(0) * a,
                                       rtol=2e-3, atol=2e-3 * np.abs(ref[0].mean(0) * a).max())
        else:
            np.testing.assert_allclose(out.numpy(), ref.sum(1), rtol=1e-6)


# -- GPU: against float64 ---------------------------------------------------------------
GPU_SHAPES = [  # (N, C, H, W): P not a multiple of the box, narrow and wide channels
    (2, 3, 13, 16), (3, 64, 17, 19), (2, 200, 9, 11), (4, 256, 56, 56), (2, 2048, 7, 7), (1, 256, 1, 8),
]


# Every config in bfloat16 on every shape; float16 and float32 (other boxes: 128 float32
# columns, the C = 3 rows of 4 or 8 pixels) with one single-partition and one
# warp-specialized config, so a --gpu run stays within a few minutes of compiles.
GPU_RUNS = ([(i, torch.bfloat16) for i in range(len(gs.CONFIGS))]
            + [(i, dt) for i in (0, 2) for dt in (torch.float16, torch.float32)])


@pytest.mark.gpu
@pytest.mark.parametrize("run", GPU_RUNS, ids=lambda r: f"{gs.name(gs.CONFIGS[r[0]])}-{r[1]}")
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gpu_against_float64(shape, run):
    need_hopper()
    cfg, dtype = gs.CONFIGS[run[0]], run[1]
    n, c, h, w = shape
    g = torch.Generator().manual_seed(n * 1000 + c)
    # |mean| >> std, with the spread representable in the dtype (bf16 steps 0.5 at 100-115)
    # and float16 sums of 3136 pixels below 65504: 100-115 (bf16, fp32) or 8-12 (fp16) + 0.5 randn
    ch = (torch.arange(c) % 16).view(1, c, 1, 1).float()
    offset = 8.0 + 0.25 * ch if dtype == torch.float16 else 100.0 + ch
    x = (offset + 0.5 * torch.randn(n, c, h, w, generator=g)).to(dtype)
    xd = x.cuda().to(memory_format=torch.channels_last)
    x64 = x.double()
    ran = 0
    for sms in (None, 3):  # all SMs; 3 programs (many units each, the ring wraps across units)
        if gs.why_not(xd, per_image=True) is None:
            got = gs.sum_hw(xd, cfg=cfg, sms=sms).double().cpu()
            want = x64.sum((2, 3))
            # output rounding (bf16 2^-9, fp16 2^-12); fp32: ~200 float32 adds an accumulator
            tol = 1e-2 if dtype == torch.bfloat16 else 2e-3 if dtype == torch.float16 else 5e-5
            assert ((got - want).abs() / want.abs()).max() < tol, (shape, dtype, sms)
            ran += 1
        if gs.why_not(xd, per_image=False) is None:
            mean, var = gs.batch_stats(xd, cfg=cfg, sms=sms)
            torch.cuda.synchronize()
            wm, wv = x64.mean((0, 2, 3)), x64.var((0, 2, 3), unbiased=False)
            assert (mean.double().cpu() - wm).abs().max() < 1e-5 * wm.abs().max()
            # the spread (0.5^2 = 0.25 before rounding) keeps its digits despite the mean
            assert ((var.double().cpu() - wv).abs() / wv).max() < 1e-3, (shape, dtype, sms)
            ran += 1
    assert ran > 0, "every GPU shape runs at least one variant"


@pytest.mark.gpu
@pytest.mark.parametrize("run", [r for r in GPU_RUNS if r[1] != torch.float16],
                         ids=lambda r: f"{gs.name(gs.CONFIGS[r[0]])}-{r[1]}")
@pytest.mark.parametrize("shape", [(2, 64, 17, 19), (4, 256, 28, 28), (2, 200, 9, 11), (1, 2048, 7, 8)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gpu_batch_norm_against_float64(shape, run):
    need_hopper()
    cfg, dtype = gs.CONFIGS[run[0]], run[1]
    n, c, h, w = shape
    g = torch.Generator().manual_seed(c + h)
    x = (50.0 + 2.0 * torch.randn(n, c, h, w, generator=g)).to(dtype)
    scale, bias = torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g)
    x64 = x.double()
    mean, var = x64.mean((0, 2, 3)), x64.var((0, 2, 3), unbiased=False)
    for relu in (False, True):
        want = (x64 - mean.view(1, c, 1, 1)) / torch.sqrt(var.view(1, c, 1, 1) + 1e-5) * scale.double().view(
            1, c, 1, 1) + bias.double().view(1, c, 1, 1)
        if relu:
            want = want.clamp_min(0)
        for reverse, sms in ((False, None), (True, None), (True, 3)):
            xd = x.cuda().to(memory_format=torch.channels_last)
            y, m, v = gs.batch_norm_train(xd, scale.cuda(), bias.cuda(), 1e-5, cfg=cfg, relu=relu, reverse=reverse,
                                          sms=sms)
            torch.cuda.synchronize()
            assert (m.double().cpu() - mean).abs().max() < 1e-5 * mean.abs().max()
            assert ((v.double().cpu() - var).abs() / var).max() < 1e-3
            err = (y.double().cpu() - want).abs().max().item()
            tol = 3e-2 if dtype == torch.bfloat16 else 1e-4  # bf16 output rounding of values ~3
            assert err < tol, (relu, reverse, sms, err)
            assert torch.isfinite(y).all()
