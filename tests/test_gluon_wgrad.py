"""The Gluon warp-specialized backward-filter convolution (tridnn.cuda.gluon_wgrad).

Gluon kernels do not run under the Triton interpreter, so:
- CPU: every config compiles for sm_90 offline and its SASS has what the kernel is for
  (transposed-A wgmma, setmaxnreg, 4-D TMA loads, no spills); the schedule arithmetic
  (whole tiles, split tiles, slices) partitions the work exactly; the unit walk, mirrored in
  NumPy, reproduces the float64 weight gradient; the finish kernel (plain Triton, run by the
  interpreter) sums the slices in order into dw;
- GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_wgrad.py``): results against a
  float64 weight gradient of the same bfloat16 inputs.
"""
import collections
import os
import re

import numpy as np
import pytest
import torch

from tridnn.testing import seed_for

from gluon_helpers import compile_in_child, need_hopper, tma_box

gw = pytest.importorskip("tridnn.cuda.gluon_wgrad", reason="Triton without Gluon")


# -- CPU: offline sm_90 compile ---------------------------------------------------------
DW_VARIANTS = [("fp32", True), ("bf16", False)]
# (config, out_dtype, beta_zero): compiled with DW_VEC on (the whole-tile stores in pairs)
DW_VEC_VARIANTS = [(gw.CONFIGS[0], "bf16", True), (gw.CONFIGS[0], "fp32", False), (gw.CONFIGS[8], "bf16", True)]
# configs compiled with TMA_DW (a bfloat16 dw tile through shared memory): two programs an SM too
TMA_DW_CONFIGS = [gw.CONFIGS[0], gw.WGRAD_PICKS_NARROW[0], gw.config(128, 1, 1, 128, 128, 3, 8, images_inner=True),
                  gw.config(64, 1, 1, 128, 256, 3, 8, images_inner=True)]  # (128 x 256: room with a ring of 3)


@pytest.fixture(scope="module")
def sm90():
    """{(config name, out_dtype, beta_zero, dw_vec): facts (shared, regs, sass)} of the sm_90
    compiles (every config, the first one's dw variants and the DW_VEC variants), in one child
    process (gluon_helpers.compile_in_child). The DW_VEC variants compile both ways."""
    variants = ([(c, {}) for c in gw.CONFIGS]
                + [(gw.CONFIGS[0], dict(out_dtype=o, beta_zero=b)) for o, b in DW_VARIANTS]
                + [(c, dict(out_dtype=o, beta_zero=b, dw_vec=v)) for c, o, b in DW_VEC_VARIANTS for v in (True, False)]
                + [(c, dict(out_dtype="bf16", beta_zero=True, dw_vec=True, tma_dw=True)) for c in TMA_DW_CONFIGS])
    facts = compile_in_child([("tridnn.cuda.gluon_wgrad", "compile_sm90", c, kw) for c, kw in variants])
    return {(gw.name(c), kw.get("out_dtype"), kw.get("beta_zero"), kw.get("dw_vec", False))
            + (("tma",) if kw.get("tma_dw") else ()): f for (c, kw), f in zip(variants, facts)}


@pytest.mark.parametrize("cfg", gw.CONFIGS, ids=gw.name)
def test_compiles_for_sm90(cfg, sm90):
    k = sm90[(gw.name(cfg), None, None, False)]
    assert k["shared"] >= gw.shared_bytes(cfg), "the ring lives in shared memory"
    assert k["shared"] * cfg["PER_SM"] <= 228 * 1024, "PER_SM programs fit one H200 SM"
    sass = k["sass"]
    wg = cfg["num_warps"] // 4
    # per k-step: one 64-row wgmma per 16 pixels, per 64-row slice of a warpgroup's rows
    per_step = (gw.block_p(cfg) // 16) * (cfg["BLOCK_M"] // 64 // wg)
    hgmma = re.findall(r"HGMMA\.64x(\d+)x16\.F32\.BF16 \S+, gdesc\[\w+\]\.(\S+),", sass)
    assert len(hgmma) == per_step, (len(hgmma), per_step)
    assert all(int(n) == cfg["TAPS_N"] * cfg["BLOCK_N"] for n, _ in hgmma), "N: the tile's taps side by side"
    # A is dy^T (a permuted shared buffer): the MN-major ("transposed") A mode, B too
    assert all(mode == "tnspA.tnspB" for _, mode in hgmma), hgmma
    cap = gw.max_regs(cfg["num_warps"], cfg["PER_SM"])
    assert cap * (cfg["num_warps"] + 4) * 32 * cfg["PER_SM"] <= 65536
    regs = [int(r, 16) for r in re.findall(r"USETMAXREG\.\w+\.CTAPOOL (?:UP\d, )?(0x[0-9a-f]+)", sass)]
    if cap < 256:
        assert min(regs) <= 40 and max(regs) > cap, (regs, cap)
    # a k-step's TMA loads, one message per 64 channels: the dy box (4-D) and TAPS_N x boxes
    # (5-D: x's stride-phase view)
    assert len(re.findall(r"UTMALDG\.4D", sass)) == cfg["BLOCK_M"] // 64
    assert len(re.findall(r"UTMALDG\.5D", sass)) == cfg["TAPS_N"] * cfg["BLOCK_N"] // 64
    assert not re.search(r"\b(STL|LDL)\b", sass), "register spills"


@pytest.mark.parametrize("out_dtype,beta_zero", DW_VARIANTS)
def test_compiles_dw_variants(out_dtype, beta_zero, sm90):
    """A float32 dw, and the blend with beta (loads dw in the whole-tile epilogue)."""
    sass = sm90[(gw.name(gw.CONFIGS[0]), out_dtype, beta_zero, False)]["sass"]
    assert "HGMMA.64x128x16.F32.BF16" in sass
    assert bool(re.search(r"\bLDG\.E", sass)) == (not beta_zero), "dw is read only when beta != 0"


def _global_accesses(sass) -> collections.Counter:
    return collections.Counter(re.findall(r"\b((?:STG|LDG)\.E(?:\.U16|\.64|\.128)?)\b", sass))


@pytest.mark.parametrize("cfg,out_dtype,beta_zero", DW_VEC_VARIANTS,
                         ids=lambda v: gw.name(v) if isinstance(v, dict) else str(v))
def test_dw_vec_stores_pairs(cfg, out_dtype, beta_zero, sm90):
    """DW_VEC: a whole tile's dw stores (and beta's loads) move each thread's two adjacent
    accumulator columns in one access, where the general path moves one element an access;
    the workspace partials (float32 pairs) are the same either way. Per thread: a BLOCK_M x N
    float32 accumulator over num_warps warps is M*N/(32*warps) values."""
    per_thread = cfg["BLOCK_M"] * gw.tile_n(cfg) // (32 * cfg["num_warps"])
    vec = _global_accesses(sm90[(gw.name(cfg), out_dtype, beta_zero, True)]["sass"])
    pair = "STG.E" if out_dtype == "bf16" else "STG.E.64"  # a bfloat16 pair is 32 bits
    partials = per_thread // 2  # STG.E.64 of the workspace path
    assert vec["STG.E.U16"] == 0 and vec["LDG.E.U16"] == 0
    assert vec[pair] == per_thread // 2 + (partials if pair == "STG.E.64" else 0), vec
    assert vec["STG.E.64"] >= partials
    if not beta_zero:
        assert vec["LDG.E.64" if out_dtype == "fp32" else "LDG.E"] == per_thread // 2, vec
    plain = _global_accesses(sm90[(gw.name(cfg), out_dtype, beta_zero, False)]["sass"])  # the general path
    assert plain["STG.E.U16" if out_dtype == "bf16" else "STG.E"] == per_thread, plain
    assert plain["STG.E.64"] == partials, plain


@pytest.mark.parametrize("cfg", TMA_DW_CONFIGS, ids=gw.name)
def test_tma_dw_stores_through_shared_memory(cfg, sm90):
    """TMA_DW: a whole tile goes registers -> shared memory (stmatrix) -> one 2-D TMA store;
    no register store to dw remains (the workspace partials' STG.E.64 stay); the tile's
    buffer fits beside the ring, PER_SM programs an SM; no spills."""
    k = sm90[(gw.name(cfg), "bf16", True, True, "tma")]
    sass = k["sass"]
    per_thread = cfg["BLOCK_M"] * gw.tile_n(cfg) // (32 * cfg["num_warps"])
    assert len(re.findall(r"\bUTMASTG\.2D\b", sass)) == 1
    assert re.search(r"\bSTSM\.", sass), "the tile enters shared memory by stmatrix"
    stores = collections.Counter(re.findall(r"\b(STG\.E(?:\.U16|\.64|\.128)?)\b", sass))
    assert stores == collections.Counter({"STG.E.64": per_thread // 2}), stores
    tile = cfg["BLOCK_M"] * cfg["BLOCK_N"] * 2
    assert k["shared"] >= gw.shared_bytes(cfg) + tile
    assert k["shared"] <= gw.SMEM_PROGRAM and k["shared"] * cfg["PER_SM"] <= gw.SMEM_SM
    assert not re.search(r"\b(STL|LDL)\b", sass), "register spills"


def test_configs_fit_shared_memory():
    for cfg in gw.CONFIGS:
        assert gw.shared_bytes(cfg) * cfg["PER_SM"] <= 227 * 1024, gw.name(cfg)
        assert cfg["BLOCK_M"] >= 16 * cfg["num_warps"] and cfg["BLOCK_M"] % 64 == 0
        assert (cfg["BLOCK_M"] * gw.tile_n(cfg)) % gw.FINISH_BLOCK == 0
        assert cfg["TAPS_N"] in (1, 2, 4) and (cfg["TAPS_N"] == 1 or cfg["BLOCK_N"] % 64 == 0)


# -- CPU: the schedule ----------------------------------------------------------------------
def _slices(tiles, boxes, direct, splits, per):
    """{tile: sorted list of (first, last) pixel-box ranges} of a schedule, from the
    kernel's unit -> (tile, boxes) map (_unit_coords)."""
    rest = tiles - direct
    units = direct + rest * splits
    got = {}
    for u in range(units):
        if u < direct:
            t, first, last = u, 0, boxes
        else:
            q = u - direct
            t, first, last = direct + q % rest, (q // rest) * per, min((q // rest) * per + per, boxes)
        got.setdefault(t, []).append((first, last))
    return got


@pytest.mark.parametrize("tiles,boxes,programs", [
    (9, 512, 132), (144, 28, 132), (36, 112, 132), (72, 56, 132), (9, 1568, 264), (1, 1, 3), (300, 5, 7),
    (132, 40, 132), (270, 40, 132),
])
def test_schedule_partitions_the_work(tiles, boxes, programs):
    cfg = gw.CONFIGS[0]
    direct, splits, per = gw.schedule(cfg, tiles, boxes, programs)
    assert 0 <= direct <= tiles
    assert direct in (0, tiles) or direct % programs == 0, "whole tiles come in whole waves"
    assert (splits == 1) == (direct == tiles)
    if direct < tiles:
        assert (splits - 1) * per < boxes <= splits * per, "every slice has a box"
    got = _slices(tiles, boxes, direct, splits, per)
    assert sorted(got) == list(range(tiles))
    for t, ranges in got.items():
        ranges.sort()
        assert ranges[0][0] == 0 and ranges[-1][1] == boxes
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "slices tile the boxes"
        assert all(last > first for first, last in ranges)
    # the choice is the model's best among the options it enumerates
    best = gw.schedule_cost(cfg, tiles, boxes, programs, direct, splits)
    for d in {0, tiles} | {m * programs for m in range(1, tiles // programs + 1)}:
        for s in ([1] if d == tiles else range(1, min(boxes, 8 * programs) + 1)):
            assert best <= gw.schedule_cost(cfg, tiles, boxes, programs, d, s) + 1e-9


def test_schedule_fixed_and_modelled():
    cfg = gw.CONFIGS[0]
    assert gw.schedule(cfg, 10, 100, 132, splits=7, direct=0) == (0, 7, 15)
    assert gw.schedule(cfg, 10, 100, 132, splits=30, direct=0) == (0, 25, 4)  # 100 boxes = 25 x 4
    assert gw.schedule(cfg, 10, 100, 132, splits=1, direct=10) == (10, 1, 100)
    assert gw.schedule(cfg, 10, 3, 132, splits=50, direct=0) == (0, 3, 1)
    # 144 tiles on 132 SMs (res5 at 128 x 128): one wave whole, the 12 left split
    d, s, per = gw.schedule(cfg, 144, 28, 132)
    assert d == 132 and s > 1
    # few tiles and many boxes (res3): everything split, about a wave of slices or more
    d, s, per = gw.schedule(cfg, 9, 512, 132)
    assert d == 0 and 9 * s >= 0.9 * 132


# -- CPU: the unit walk in NumPy against float64 -------------------------------------------
def _walk(x, dy, kh, kw, pad, dil, cfg, direct, splits, per, stride=1):
    """The kernel's work in NumPy (float64): per unit the loader's boxes (zero outside the
    tensors, as TMA fills them; taps past the last reload the last), dy_box^T @ [x boxes of
    the tile's taps side by side], then whole tiles into dw and slices into the workspace,
    and the finish sum. x [N, H, W, C], dy [N, OH, OW, K] (NHWC)."""
    n, h, w, c = x.shape
    _, oh, ow, k = dy.shape
    NB, BH, BW, BM, BN, TAPS = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["TAPS_N"]
    T = kh * kw
    th, tw = -(-oh // BH), -(-ow // BW)
    boxes = -(-n // NB) * th * tw
    n_kb, n_cb = -(-k // BM), -(-c // BN)
    tiles = -(-T // TAPS) * n_kb * n_cb
    assert tiles == gw.num_tiles(cfg, k, c, T)
    rest = tiles - direct
    dw = np.zeros((k, kh, kw, c))
    ws = np.zeros((max(rest, 1) * splits, BM, TAPS * BN))

    def box(t, n0, r0, c0, ch0, nch):  # a 4-D TMA box of t (zero fill outside)
        out = np.zeros((NB, BH, BW, nch))
        for i in range(NB):
            for j in range(BH):
                for m in range(BW):
                    a, b, d = n0 + i, r0 + j, c0 + m
                    if 0 <= a < t.shape[0] and 0 <= b < t.shape[1] and 0 <= d < t.shape[2]:
                        v = t[a, b, d, ch0:ch0 + nch]
                        out[i, j, m, :v.shape[0]] = v
        return out.reshape(-1, nch)

    x5 = x.reshape(n, h // stride, stride, w // stride, stride * c)  # the stride-phase view

    def box5(n0, r0, ph, c0, ch0, nch):  # a 5-D TMA box [NB, BH, 1, BW, nch] of x5 (zero fill)
        out = np.zeros((NB, BH, BW, nch))
        for i in range(NB):
            for j in range(BH):
                for m in range(BW):
                    a, b, d = n0 + i, r0 + j, c0 + m
                    if 0 <= a < n and 0 <= b < x5.shape[1] and 0 <= d < x5.shape[3] and 0 <= ch0 < x5.shape[4]:
                        v = x5[a, b, ph, d, ch0:ch0 + nch]  # may run into the next phase's channels
                        out[i, j, m, :v.shape[0]] = v
        return out.reshape(-1, nch)

    def floor_div(a, s):  # the loader's floor division of a possibly negative offset
        return -((s - 1 - a) // s) if a < 0 else a // s

    def coords(tile):
        cb, r = tile % n_cb, tile // n_cb
        return cb, r % n_kb, (r // n_kb) * TAPS  # c block, k block, first tap

    def store(acc, tile):  # the whole-tile epilogue / the finish kernel: masked to K x C x T
        cb, kb, t0 = coords(tile)
        for col in range(TAPS * BN):
            t, cc = t0 + col // BN, cb * BN + col % BN
            if t < T and cc < c:
                kk = min(BM, k - kb * BM)
                dw[kb * BM:kb * BM + kk, t // kw, t % kw, cc] = acc[:kk, col]

    for u in range(direct + rest * splits):
        whole = u < direct
        q = max(u - direct, 0)
        split = q // max(rest, 1)
        tile = u if whole else direct + q % rest
        cb, kb, t0 = coords(tile)
        first = 0 if whole else split * per
        last = boxes if whole else min(split * per + per, boxes)
        acc = np.zeros((BM, TAPS * BN))
        for b in range(first, last):
            bw_, rr = b % tw, b // tw
            oh0, n0 = (rr % th) * BH, (rr // th) * NB
            a = box(dy, n0, oh0, bw_ * BW, kb * BM, BM)
            xs = []
            for j in range(TAPS):
                t = min(t0 + j, T - 1)
                fh, fw = t // kw, t % kw
                a_h, a_w = fh * dil - pad, fw * dil - pad
                q_h, q_w = floor_div(a_h, stride), floor_div(a_w, stride)
                xs.append(box5(n0, oh0 + q_h, a_h - q_h * stride, bw_ * BW + q_w,
                               (a_w - q_w * stride) * c + cb * BN, BN))
            acc += a.T @ np.concatenate(xs, axis=1)
        if whole:
            store(acc, tile)
        else:
            ws[q] = acc
    for r in range(rest):  # finish: slices in order
        store(sum(ws[s * rest + r] for s in range(splits)), direct + r)
    return dw


@pytest.mark.parametrize("case", [
    # (N, C, K, H, W, KH, KW, pad, dil, cfg index, forced (direct, splits) or None, programs)
    (2, 6, 5, 7, 7, 3, 3, 1, 1, 0, None, 3),
    (3, 5, 7, 5, 6, 5, 3, 2, 1, 2, (0, 3), 4),
    (2, 4, 6, 6, 9, 3, 3, 0, 2, 3, (4, 2), 4),
    (5, 3, 4, 3, 3, 1, 1, 0, 1, 4, (0, 2), 2),
    # several taps a tile (the TAPS_N configs): 9 taps in groups of 4 and 2, 15 in groups of 4
    (2, 6, 5, 7, 7, 3, 3, 1, 1, 16, None, 3),
    (2, 5, 6, 6, 5, 3, 3, 1, 1, 17, (1, 2), 2),
    (2, 3, 4, 8, 7, 5, 3, 2, 1, 16, (0, 3), 4),
    # stride 2 (tuple: stride last)
    (2, 5, 6, 8, 10, 3, 3, 1, 1, 0, None, 3, 2),
    (3, 4, 5, 6, 6, 1, 1, 0, 1, 17, (0, 2), 2, 2),
    (2, 6, 4, 10, 6, 5, 3, 2, 2, 2, (1, 2), 3, 2),    # dilation 2, padding 2: offsets down to -2
], ids=str)
def test_unit_walk_matches_float64(case, rng):
    """The index arithmetic (boxes, tap offsets, padding by zero fill, whole/split units, the
    workspace slots, the finish order) reproduces the weight gradient. Small boxes stand in
    for the configs' (same walk, tiny shapes)."""
    n, c, k, h, w, kh, kw, pad, dil, ci, forced, programs, stride = case + (1,) * (13 - len(case))
    cfg = dict(gw.CONFIGS[ci])
    cfg.update(NB=min(cfg["NB"], 2), BH=min(cfg["BH"], 2), BW=min(cfg["BW"], 4), BLOCK_M=4, BLOCK_N=4)
    assert ci < 16 or cfg["TAPS_N"] > 1
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    x = rng.standard_normal((n, h, w, c))
    dy = rng.standard_normal((n, oh, ow, k))
    tiles = gw.num_tiles(cfg, k, c, kh * kw)
    boxes = gw.num_boxes(cfg, n, oh, ow)
    if forced:
        direct, splits, per = gw.schedule(cfg, tiles, boxes, programs, splits=forced[1], direct=forced[0])
    else:
        direct, splits, per = gw.schedule(cfg, tiles, boxes, programs)
    got = _walk(x, dy, kh, kw, pad, dil, cfg, direct, splits, per, stride)
    want = torch.nn.grad.conv2d_weight(torch.from_numpy(x).permute(0, 3, 1, 2), (k, c, kh, kw),
                                       torch.from_numpy(dy).permute(0, 3, 1, 2), padding=pad, dilation=dil,
                                       stride=stride)
    np.testing.assert_allclose(got, want.permute(0, 2, 3, 1).numpy(), rtol=1e-10, atol=1e-10)


# -- CPU: the finish kernel (Triton interpreter) ---------------------------------------------
@pytest.mark.parametrize("beta,taps", [(0.0, 1), (0.75, 1), (0.5, 4)])
def test_finish_kernel_sums_slices_in_order(beta, taps, rng):
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("CPU test (interpreter)")
    import importlib
    import triton
    importlib.import_module("tridnn.cuda.layer_utils")  # lets the interpreter loop to a runtime bound
    BM = BN = 64
    k, c, kh, kw = 100, 70, 2, 3             # ragged: 2 x 2 channel blocks, 6 taps
    T = kh * kw
    n_kb, n_cb = triton.cdiv(k, BM), triton.cdiv(c, BN)
    tiles = triton.cdiv(T, taps) * n_kb * n_cb   # 24 (taps 1) or 8 (taps 4: 8 tap slots, 2 unused)
    direct, splits = tiles // 3, 3
    rest = tiles - direct
    TN = taps * BN
    ws = rng.standard_normal((splits, rest, BM, TN)).astype(np.float32)
    dw0 = rng.standard_normal((k, c, kh, kw)).astype(np.float32)
    dw = torch.from_numpy(dw0.copy())
    alpha = 1.5
    gw.wgrad_finish_kernel[(rest * (BM * TN // 1024),)](
        torch.from_numpy(ws), dw, direct, rest, splits, k, c, T, kw, n_kb, n_cb, *dw.stride(), alpha, beta,
        BLOCK_M=BM, BLOCK_N=BN, TAPS_N=taps, BETA_ZERO=beta == 0, BLOCK=1024)
    want = dw0.astype(np.float64).copy()
    for r in range(rest):
        tile = direct + r
        cb, t = tile % n_cb, tile // n_cb
        kb, t0 = t % n_kb, (t // n_kb) * taps
        s = ws[:, r].astype(np.float64).sum(axis=0)
        for col in range(TN):
            tap, cc = t0 + col // BN, cb * BN + col % BN
            if tap < T and cc < c:
                kk = min(BM, k - kb * BM)
                blk = want[kb * BM:kb * BM + kk, cc, tap // kw, tap % kw]
                want[kb * BM:kb * BM + kk, cc, tap // kw, tap % kw] = alpha * s[:kk, col] + beta * blk
    np.testing.assert_allclose(dw.numpy(), want, rtol=1e-5, atol=1e-5)
    # the whole tiles' part of dw is untouched
    assert direct == 0 or np.array_equal(dw.numpy()[:BM, :BN, 0, 0], dw0[:BM, :BN, 0, 0])


def test_flat_view_is_one_row_of_pixels():
    """flat_view reads the same memory as [1, C, 1, N*H*W] channels-last, pixel p = (n, h, w)
    in order, so a 1x1 weight gradient over it equals the one over the images."""
    x = torch.randn(3, 8, 5, 7).to(memory_format=torch.channels_last)
    dy = torch.randn(3, 16, 5, 7).to(memory_format=torch.channels_last)
    fx, fdy = gw.flat_view(x), gw.flat_view(dy)
    assert fx.shape == (1, 8, 1, 105) and fx.data_ptr() == x.data_ptr()
    assert fx.permute(0, 2, 3, 1).is_contiguous()
    assert torch.equal(fx[0, :, 0, :], x.permute(1, 0, 2, 3).reshape(8, -1))
    want = torch.nn.grad.conv2d_weight(x.double(), (16, 8, 1, 1), dy.double())
    got = torch.nn.grad.conv2d_weight(fx.double(), (16, 8, 1, 1), fdy.double())
    torch.testing.assert_close(got, want)
    assert gw.flat_ok((1, 1), (0, 0), (1, 1))
    assert not gw.flat_ok((1, 1), (0, 0), (2, 2)) and not gw.flat_ok((3, 3), (1, 1), (1, 1))
    assert not gw.flat_ok((1, 1), (1, 1), (1, 1))


def test_flat_walk_matches_float64(rng):
    """A flat config's walk over the one-row view (boxes of BW pixels across image ends, the
    last one ragged) reproduces the 1x1 weight gradient."""
    cfg = dict(next(c for c in gw.CONFIGS if c["FLAT"]), BW=8, BLOCK_M=4, BLOCK_N=4)
    n, c, k, h, w = 3, 6, 5, 5, 7
    x = rng.standard_normal((n, h, w, c))
    dy = rng.standard_normal((n, h, w, k))
    fx, fdy = x.reshape(1, 1, n * h * w, c), dy.reshape(1, 1, n * h * w, k)
    tiles, boxes = gw.num_tiles(cfg, k, c, 1), gw.num_boxes(cfg, 1, 1, n * h * w)
    assert boxes == -(-n * h * w // 8)
    for forced in (None, (0, 3)):
        kw = {} if forced is None else dict(direct=forced[0], splits=forced[1])
        direct, splits, per = gw.schedule(cfg, tiles, boxes, 3, **kw)
        got = _walk(fx, fdy, 1, 1, 0, 1, cfg, direct, splits, per)
        want = np.einsum("nhwk,nhwc->kc", dy, x)
        np.testing.assert_allclose(got[:, 0, 0, :], want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("images_inner", [False, True])
def test_descriptor_boxes_reproduce_the_gradient(images_inner, stride):
    """The loader's box coordinates, in the order each layout's descriptors take them
    (images_inner: [oh, ow, n, k] and [oh + dh, phase, ow + dw, n, c]), read through the
    descriptors ``prepare`` builds (zero outside, as TMA fills): summed over every box and
    tap, dy box^T @ x box is the float64 weight gradient. So the permuted views and the
    coordinate order agree (pixel order inside a box is the same for dy and x)."""
    n, c, k, h, w, kh, kw, pad = 3, 8, 64, 6, 10, 3, 3, 1
    cfg = gw.config(2, 2, 2, 64, 8, 3, 4, images_inner=images_inner)
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    # small integers: exact in bfloat16 (the kernel's input type) and in the float64 sums
    x = torch.randint(-4, 5, (n, c, h, w)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.randint(-4, 5, (n, k, oh, ow)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    plan = gw.prepare(x, dy, (kh, kw), (pad, pad), cfg=cfg, sms=4, stride=(stride, stride))
    dy_desc, x_desc = plan.args[0], plan.args[1]
    assert plan.meta["IMAGES_INNER"] == images_inner
    got = torch.zeros(kh * kw, k, c, dtype=torch.float64)
    for n0 in range(0, n, 2):
        for oh0 in range(0, oh, 2):
            for ow0 in range(0, ow, 2):
                coords = [oh0, ow0, n0, 0] if images_inner else [n0, oh0, ow0, 0]
                a = tma_box(dy_desc, coords).reshape(-1, k).double()
                for t in range(kh * kw):
                    a_h, a_w = t // kw - pad, t % kw - pad
                    q_h, q_w = a_h // stride, a_w // stride  # (Python's floor, as _tap_offsets')
                    ph, pc = a_h - q_h * stride, (a_w - q_w * stride) * c
                    xc = ([oh0 + q_h, ph, ow0 + q_w, n0, pc] if images_inner
                          else [n0, oh0 + q_h, ph, ow0 + q_w, pc])
                    got[t] += a.T @ tma_box(x_desc, xc).reshape(-1, c).double()
    want = torch.nn.grad.conv2d_weight(x.double(), (k, c, kh, kw), dy.double(), padding=pad, stride=stride)
    torch.testing.assert_close(got.reshape(kh, kw, k, c).permute(2, 3, 0, 1), want)


def test_images_inner_refuses_flat_configs():
    x = torch.zeros(2, 64, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    flat = dict(next(c for c in gw.CONFIGS if c["FLAT"]), IMAGES_INNER=True)
    with pytest.raises(ValueError, match="images_inner"):
        gw.prepare(x, x, (1, 1), (0, 0), cfg=flat, sms=4)


def test_flat_config_refuses_other_problems():
    x = torch.zeros(2, 64, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.zeros(2, 64, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    flat = next(c for c in gw.CONFIGS if c["FLAT"])
    with pytest.raises(ValueError, match="1x1"):
        gw.prepare(x, dy, (3, 3), (1, 1), cfg=flat, sms=4)


def test_why_not():
    x = torch.zeros(2, 64, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.zeros(2, 32, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    assert gw.why_not(x, dy, (3, 3), (1, 1), (1, 1)) is None
    assert gw.why_not(x.contiguous(), dy, (3, 3), (1, 1), (1, 1)) is not None  # NCHW x
    assert gw.why_not(x, dy, (3, 3), (1, 1), (1, 1), stride=(2, 2)) is not None  # dy would be 4x4
    dy4 = torch.zeros(2, 32, 4, 4, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    assert gw.why_not(x, dy4, (3, 3), (1, 1), (1, 1), stride=(2, 2)) is None
    x9 = torch.zeros(2, 64, 9, 9, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy5 = torch.zeros(2, 32, 5, 5, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    assert gw.why_not(x9, dy5, (3, 3), (1, 1), (1, 1), stride=(2, 2)) is not None  # odd image
    assert gw.why_not(x, dy, (3, 3), (0, 0), (1, 1)) is not None  # dy would be 6x6
    assert gw.why_not(x.float(), dy.float(), (3, 3), (1, 1), (1, 1)) is not None


# -- GPU: against float64 ----------------------------------------------------------------
GPU_CASES = [  # (N, C, K, H, W, KH, KW, pad, dil[, stride])
    (2, 64, 64, 56, 56, 3, 3, 1, 1),
    (3, 128, 128, 28, 28, 3, 3, 1, 1),
    (4, 256, 256, 14, 14, 3, 3, 1, 1),
    (5, 128, 64, 7, 7, 3, 3, 1, 1),     # 7x7 maps, K < BLOCK_M
    (2, 64, 128, 13, 11, 5, 3, 2, 1),   # 5x3 filter, padding 2, ragged image
    (3, 128, 64, 9, 10, 3, 3, 0, 1),    # padding 0
    (2, 64, 200, 12, 12, 3, 3, 2, 2),   # dilation 2, K not a multiple of BLOCK_M
    (2, 72, 64, 16, 16, 1, 1, 0, 1),    # 1x1, C not a multiple of BLOCK_N
    (3, 256, 128, 7, 7, 1, 1, 0, 1),    # 1x1 on 7x7 maps: 147 pixels a row (flat configs)
    (2, 64, 256, 14, 14, 1, 1, 0, 1),
    (2, 64, 128, 14, 14, 3, 3, 1, 1, 2),   # stride 2 (x through its stride-phase view)
    (3, 128, 64, 16, 10, 3, 3, 1, 1, 2),
    (2, 72, 128, 8, 8, 1, 1, 0, 1, 2),     # 1x1 stride 2 (downsample), C not a multiple of 64
    (130, 64, 128, 7, 7, 3, 3, 1, 1),      # images-inner boxes: two full boxes of 64 images and a ragged one
    (64, 128, 64, 14, 14, 3, 3, 1, 1, 2),  # images-inner boxes at stride 2
]

_REFERENCES = {}


def _problem(case):
    """bfloat16 x and dy and their float64 weight gradient, made once per case."""
    if case not in _REFERENCES:
        n, c, k, h, w_, kh, kw, pad, dil, st = case + (1,) * (10 - len(case))
        oh = (h + 2 * pad - dil * (kh - 1) - 1) // st + 1
        ow = (w_ + 2 * pad - dil * (kw - 1) - 1) // st + 1
        g = torch.Generator().manual_seed(seed_for(case) % 2**31)
        x = torch.randn(n, c, h, w_, generator=g).to(torch.bfloat16)
        dy = torch.randn(n, k, oh, ow, generator=g).to(torch.bfloat16)
        ref = torch.nn.grad.conv2d_weight(x.double(), (k, c, kh, kw), dy.double(), padding=pad, dilation=dil,
                                          stride=st)
        _REFERENCES[case] = (x, dy, ref)
    return _REFERENCES[case]


def _flat_case(case) -> bool:
    n, c, k, h, w_, kh, kw, pad, dil, st = case + (1,) * (10 - len(case))
    return gw.flat_ok((kh, kw), (pad, pad), (st, st))


# every config on every case it applies to (the flat ones on 1x1 stride-1 cases only)
GPU_PAIRS = [pytest.param(case, cfg, id=f"{'x'.join(map(str, case))}-{gw.name(cfg)}")
             for cfg in gw.CONFIGS for case in GPU_CASES if _flat_case(case) or not cfg["FLAT"]]


@pytest.mark.gpu
@pytest.mark.parametrize("case,cfg", GPU_PAIRS)
def test_gpu_against_float64(case, cfg):
    need_hopper()
    n, c, k, h, w_, kh, kw, pad, dil, st = case + (1,) * (10 - len(case))
    x, dy, ref = _problem(case)
    xd = x.cuda().to(memory_format=torch.channels_last)
    dyd = dy.cuda().to(memory_format=torch.channels_last)
    scale = ref.abs().max()
    # schedules: the model's; all tiles split in 3 slices; whole + split tiles on a grid of
    # 3 programs (many units a program: the ring wraps across units); alpha and beta into a
    # float32 NCHW dw (the strided blend)
    dw0 = torch.randn(k, c, kh, kw, dtype=torch.float32, generator=torch.Generator().manual_seed(1))
    runs = [
        dict(alpha=1.0, beta=0.0, dw=None, sms=None, splits=None, direct=None),
        dict(alpha=1.0, beta=0.0, dw=None, sms=None, splits=3, direct=0),
        dict(alpha=0.5, beta=0.0, dw=None, sms=3, splits=2, direct=3),
        dict(alpha=2.0, beta=0.5, dw=dw0.clone().cuda(), sms=3, splits=None, direct=None),
        dict(alpha=2.0, beta=0.5, dw=dw0.clone().cuda(), sms=None, splits=4, direct=0),
        # a float32 KRSC dw: whole tiles blend and store channel pairs (DW_VEC) where C allows
        dict(alpha=2.0, beta=0.5, dw=dw0.clone().cuda().contiguous(memory_format=torch.channels_last), sms=None,
             splits=None, direct=None),
    ]
    for run in runs:
        got = gw.conv2d_wgrad(xd, dyd, (kh, kw), (pad, pad), (dil, dil), cfg=cfg, alpha=run["alpha"],
                              beta=run["beta"], dw=run["dw"], sms=run["sms"], splits=run["splits"],
                              direct=run["direct"], stride=(st, st))
        torch.cuda.synchronize()
        got = got.double().cpu()
        want = run["alpha"] * ref + run["beta"] * dw0.double()
        assert got.shape == want.shape
        err = ((got - want).abs().max() / (abs(run["alpha"]) * scale)).item()
        # bfloat16 dw rounding (2^-8) on top of float32 sums
        tol = 1e-2 if run["dw"] is None else 1e-4
        assert err < tol, (gw.name(cfg), run, err)
        assert torch.isfinite(got).all()


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", TMA_DW_CONFIGS, ids=gw.name)
@pytest.mark.parametrize("case", [GPU_CASES[1], GPU_CASES[2], GPU_CASES[3], GPU_CASES[8]],
                         ids=lambda case: "x".join(map(str, case)))
def test_gpu_tma_dw_against_float64(case, cfg, monkeypatch):
    """TMA_DW (on by default since this passed on a GPU, session 28): whole tiles through shared
    memory and a TMA store into a bfloat16 KRSC dw, on grids of 132 and 3 programs (whole
    and split tiles, many units a program), against float64."""
    need_hopper()
    monkeypatch.setattr(gw, "TMA_STORE", True)
    n, c, k, h, w_, kh, kw, pad, dil, st = case + (1,) * (10 - len(case))
    assert c % cfg["BLOCK_N"] == 0  # (every case here: C fills the tile's columns)
    x, dy, ref = _problem(case)
    xd = x.cuda().to(memory_format=torch.channels_last)
    dyd = dy.cuda().to(memory_format=torch.channels_last)
    for sms, splits, direct in ((None, None, None), (3, 2, 3)):
        # dw poisoned with NaN: every element must be written (TMA clips the rows past K)
        dw = torch.full((k, c, kh, kw), float("nan"), dtype=torch.bfloat16, device="cuda").contiguous(
            memory_format=torch.channels_last)
        plan = gw.prepare(xd, dyd, (kh, kw), (pad, pad), (dil, dil), cfg, alpha=0.5, dw=dw, sms=sms,
                          splits=splits, direct=direct, stride=(st, st))
        assert plan.meta["TMA_DW"]
        got = gw.launch(plan)
        torch.cuda.synchronize()
        assert torch.isfinite(got).all(), (gw.name(cfg), sms)
        err = ((got.double().cpu() - 0.5 * ref).abs().max() / (0.5 * ref.abs().max())).item()
        assert err < 1e-2, (gw.name(cfg), sms, err)


@pytest.mark.gpu
def test_gpu_deterministic():
    """The same call twice gives bit-identical dw (fixed split, in-order finish)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper GPU")
    x, dy, _ = _problem(GPU_CASES[1])
    xd = x.cuda().to(memory_format=torch.channels_last)
    dyd = dy.cuda().to(memory_format=torch.channels_last)
    dw32 = torch.empty(128, 128, 3, 3, device="cuda")
    a = gw.conv2d_wgrad(xd, dyd, (3, 3), (1, 1), (1, 1), dw=dw32.clone(), splits=7, direct=0).clone()
    b = gw.conv2d_wgrad(xd, dyd, (3, 3), (1, 1), (1, 1), dw=dw32.clone(), splits=7, direct=0)
    assert torch.equal(a, b)
