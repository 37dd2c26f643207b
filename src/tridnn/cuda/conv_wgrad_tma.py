"""Backward filter by TMA boxes, scheduled for small images: box shapes that fit the image
and whole output tiles where the GPU has room for them.

conv_tma.wgrad_tma_kernel splits every output tile (BLOCK_M output channels x BLOCK_N
input channels x one tap) into the same number of pixel slices, each written as float32
partials that wgrad_finish sums. On ResNet-50's 14x14 and 7x7 layers this loses in
three places, which this module's kernel addresses:

- Box waste. An 8x8 box holds 49 of 64 real pixels on a 7x7 image and 196 of 256 on
  14x14 (77%). Boxes need not be square: NB images x BH rows x BW columns with BW the
  next power of two above the width and BH a row or two (7x7: 16 images x 1 x 8;
  14x14: 4 images x 2 x 16) keep 87.5% of the MMA rows real.
- Wave quantization. res5_3x3 has 144 tiles of 128 x 128 for 132 SMs: one slice each
  runs two rounds of whole tiles (the second 9% full), two slices three rounds of half
  tiles. Here the first DIRECT tiles (whole waves of them) reduce all pixels and blend
  into dw themselves; only the R = tiles - DIRECT rest is split into SLICES pixel slices
  (e.g. 12 tiles x 11 slices = one more wave of short programs: 1.09 rounds instead of 2).
- Partials. Only the split tiles write float32 partials ([SLICES, R, BLOCK_M, BLOCK_N],
  tile-local), and ``wgrad_tiles_finish`` sums just those, slice by slice in order
  (deterministic, as ALGO_1 promises: the split is fixed per config).

The pixel loop is conv_tma's (one dy box and one x box per step, dy^T x on the tensor
cores). Applicability is conv_tma.plan_backward_filter's; ``candidates`` gives launch
configs that ALGO_1's tuner times next to conv_tma.wgrad_candidates (marked SCHED).

A second kernel, ``wgrad_rows_kernel``, serves layers with at most 4 input channels
(conv1): see the section "few input channels" below.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .common import cdiv, launch, wide
from .conv_tma import Plan, blend_tile, box_for, descriptor, tap_origin, wgrad_boxes
from .geometry import geometry, input_precision, needs_int64, strides5


# the schedule and the geometry scalars only steer index math: one compile serves every
# layer and schedule of a config (Triton would otherwise specialize each on % 16 and == 1)
@triton.jit(do_not_specialize=["N", "OH", "OW", "NTW", "T", "ROW0_H", "ROWSTEP_H", "ROW0_W", "ROWSTEP_W",
                               "DIRECT", "SLICES", "PER", "KH", "KW", "C_DW"])
def wgrad_sched_kernel(
        part_ptr,  # float32 partials of the split tiles [SLICES, R, BLOCK_M, BLOCK_N]
        dw_ptr,    # the filter gradient, written by the DIRECT tiles at strides ws_*
        # TMA descriptors: dy box [NB, BH, 1, BW, BLOCK_M], x phase view box [NB, BH, 1, BW, BLOCK_N]
        dy_desc, x_desc,
        # pixels (N, OH, OW), dy's K and x's C channels, the taps (conv_tma.TapMap.args)
        N, OH, OW, K, C, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W,
        # schedule: the first DIRECT tiles whole, the rest in SLICES slices of PER pixel boxes
        DIRECT, SLICES, PER,
        # dw's strides (k, c, h, w), filter size, dw's real channels (C may be padded), blend
        ws_k, ws_c, ws_h, ws_w, KH, KW, C_DW, alpha, beta,
        BH: tl.constexpr, BW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        PREC: tl.constexpr, NB: tl.constexpr, FLIP: tl.constexpr, BETA_ZERO: tl.constexpr):
    """dw[k, tap, c] = sum over pixels of dy[p, k] * x[p + tap, c] for one output tile
    (a whole one, blended into dw) or one pixel slice of a split tile (a float32 partial)."""
    # -- map the program to (tile, pixel boxes): tiles are (tap, k block, c block)
    pid = tl.program_id(0)
    tiles_h = tl.cdiv(OH, BH)
    tiles_w = tl.cdiv(OW, BW)
    boxes = tl.cdiv(N, NB) * tiles_h * tiles_w
    whole = pid < DIRECT
    q = tl.maximum(pid - DIRECT, 0)  # a split tile's program: slice q % SLICES of tile q // SLICES
    tile = tl.where(whole, pid, DIRECT + q // SLICES)
    first = tl.where(whole, 0, (q % SLICES) * PER)
    last = tl.where(whole, boxes, tl.minimum(first + PER, boxes))
    num_m = tl.cdiv(K, BLOCK_M)
    num_n = tl.cdiv(C, BLOCK_N)
    tap = tile // (num_m * num_n)
    k0 = ((tile // num_n) % num_m) * BLOCK_M
    c0 = (tile % num_n) * BLOCK_N
    _, _, ah, bh, aw, bw = tap_origin(tap, NTW, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W)

    # -- reduction over the pixel boxes (dy past the image or past N loads as zeros)
    acc = wgrad_boxes(dy_desc, x_desc, first, last, tiles_h, tiles_w, k0, c0, ah, bh, aw, bw, C,
                      BH, BW, BLOCK_M, BLOCK_N, PREC, NB)

    # -- store: a whole tile blends into dw (tap flipped in CONVOLUTION mode), a slice
    #    writes its partial
    i = tl.arange(0, BLOCK_M)
    j = tl.arange(0, BLOCK_N)
    if whole:
        blend_tile(acc, dw_ptr, k0 + i, c0 + j, tap, K, C_DW, ws_k, ws_c, ws_h, ws_w, KH, KW, alpha, beta,
                   FLIP, BETA_ZERO)
    else:
        slot = (q % SLICES) * (T * num_m * num_n - DIRECT) + (tile - DIRECT)
        offs = slot.to(tl.int64) * (BLOCK_M * BLOCK_N) + (i * BLOCK_N)[:, None] + j[None, :]
        tl.store(part_ptr + offs, acc)


@triton.jit(do_not_specialize=["K", "C", "C_DW", "DIRECT", "R", "SLICES", "KH", "KW"])
def wgrad_tiles_finish(part_ptr, dw_ptr, K, C, C_DW, DIRECT, R, SLICES, ws_k, ws_c, ws_h, ws_w, KH, KW,
                       alpha, beta, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
                       FLIP: tl.constexpr, BETA_ZERO: tl.constexpr):
    """The split tiles of wgrad_sched_kernel: dw = alpha * (slice 0 + slice 1 + ..., in
    that order) + beta * dw. One program per ROWS rows of one split tile."""
    pid = tl.program_id(0)
    per_tile = BLOCK_M // ROWS
    r = pid // per_tile
    i = (pid % per_tile) * ROWS + tl.arange(0, ROWS)
    j = tl.arange(0, BLOCK_N)
    offs = r.to(tl.int64) * (BLOCK_M * BLOCK_N) + (i * BLOCK_N)[:, None] + j[None, :]
    acc = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for s in range(0, SLICES):
        acc += tl.load(part_ptr + s * (R * BLOCK_M * BLOCK_N) + offs)
    tile = DIRECT + r
    num_m = tl.cdiv(K, BLOCK_M)
    num_n = tl.cdiv(C, BLOCK_N)
    tap = tile // (num_m * num_n)
    k0 = ((tile // num_n) % num_m) * BLOCK_M
    c0 = (tile % num_n) * BLOCK_N
    blend_tile(acc, dw_ptr, k0 + i, c0 + j, tap, K, C_DW, ws_k, ws_c, ws_h, ws_w, KH, KW, alpha, beta,
               FLIP, BETA_ZERO)


# -- launch configs --------------------------------------------------------------------
# (pixels per box, BLOCK_M, BLOCK_N, warps, stages): 128 x 128 tiles at 8 warps as the
# measured best of conv_tma's lists, and a 64 x 128 tile at 4 warps (more tiles for
# layers with few channels). 8 warps with 4 stages only at 64-pixel boxes (128-pixel
# boxes at 8 warps and 4 stages miscompiled in conv_tma_kernel, docs/performance.md).
# sm_90 (Triton 3.6): 113-136 registers, 80-164 KB shared memory.
# Not 8 warps with 4 stages at 128 x 128: on the H200 (2026-11-30 11:50 UTC, Triton 3.6)
# every such config with 64-pixel boxes on the tile plans (res3/res4/res5 3x3) gave
# results the tuner's cross-check rejected, as the same combination did in conv_tma.
# Nor 8 warps at 128 x 128 with 64-pixel boxes and 3 stages: rejected on every 3x3 and
# 14x14 1x1 layer it was timed on at batch 64 and 256 (2026-11-30 14:05 UTC); and not at 4
# warps either: (64 pixels, 128 x 128, 4 warps, 3 stages, 2 images x 2 x 16 box, 7 slices)
# disagreed with the reference on 8x256x14x14 3x3 (test_gluon_wgrad_integration's tuner test,
# H200, 2026-11-30 20:2x UTC). 64-pixel boxes keep the 64 x 128 tile.
TILES = [(128, 128, 128, 8, 3), (128, 64, 128, 4, 3)]
# 64 x 64 tiles for layers with 64 channels on a side (res2_3x3), where the 128-wide ones
# are half padding: 96 or 64 KB of shared memory, so two or three programs an SM.
NARROW_TILES = [(128, 64, 64, 4, 3), (64, 64, 64, 4, 4)]


def boxes_of(plan: Plan, nb: int, bh: int, bw: int) -> int:
    return cdiv(plan.n, nb) * cdiv(plan.oh, bh) * cdiv(plan.ow, bw)


def tiles_of(plan: Plan, bm: int, bn: int) -> int:
    return cdiv(plan.c_red, bm) * cdiv(plan.c_out, bn) * plan.taps.taps


def schedules(tiles: int, boxes: int, sms: int, room: int) -> list:
    """(DIRECT, SLICES) pairs to try: all tiles whole (one slice), and for 1-3 waves of
    programs either every tile split or whole waves of whole tiles plus the rest split.
    ``room``: partial tiles the workspace holds; a slice keeps at least two boxes."""
    out = []
    full = tiles // sms * sms
    for direct in sorted({0, full}):
        rest = tiles - direct
        for waves in (1, 2, 3):
            slices = min(max(1, waves * sms // max(rest, 1)), max(1, boxes // 2), room // max(rest, 1))
            if rest == 0 or slices <= 1:
                pair = (tiles, 1)
            else:
                per = cdiv(boxes, slices)
                pair = (direct, cdiv(boxes, per))
            if pair not in out:
                out.append(pair)
    return out


# A rough time model, only to choose which configs the tuner times (it measures them):
# one SM runs a 128 x 128 tile at 4.6 TFLOP/s of MMA work, box padding included (res5_3x3's
# one-slice config on the H200: 58 us for two rounds of 28 us); narrower tiles feed the
# tensor cores less well. Programs sharing an SM share its rate; the float32 partials are
# written and read back at 3 TB/s, plus a launch gap for the finish pass.
SM_FLOPS = 4.6e12
TILE_EFFICIENCY = {(128, 128): 1.0, (64, 128): 0.85, (64, 64): 0.7}
PARTIAL_BYTES_PER_S = 3e12
FINISH_GAP_US = 3.0
KEEP = 8   # configs the tuner times per plan (the model's fastest)


def programs_per_sm(cfg) -> int:
    """Co-resident programs an SM holds: 227 KB of shared memory (the pipeline's stages of
    both boxes) and 64 K registers (about 128 a thread)."""
    pixels = cfg["NB"] * cfg["BH"] * cfg["BW"]
    smem = cfg["num_stages"] * pixels * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * 2
    regs = cfg["num_warps"] * 32 * 128
    return max(1, min(227 * 1024 // smem, 65536 // regs))


def predict_us(plan: Plan, cfg, sms: int) -> float:
    """The model's microseconds for one SCHED config: the whole tiles' rounds, then the
    split tiles' rounds, then the finish over their partials."""
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    pixels = cfg["NB"] * cfg["BH"] * cfg["BW"]
    tiles, boxes = tiles_of(plan, bm, bn), boxes_of(plan, cfg["NB"], cfg["BH"], cfg["BW"])
    direct = min(cfg["DIRECT"], tiles)
    rest, slices = tiles - direct, cfg["SLICES"]
    per = cdiv(boxes, slices)
    box_us = 2 * pixels * bm * bn / (SM_FLOPS * TILE_EFFICIENCY.get((min(bm, bn), max(bm, bn)), 0.7)) * 1e6
    k = programs_per_sm(cfg)
    slots = k * sms
    t = cdiv(direct, slots) * k * boxes * box_us
    if rest:
        t += cdiv(rest * slices, slots) * k * per * box_us
        t += 2 * rest * slices * bm * bn * 4 / PARTIAL_BYTES_PER_S * 1e6 + FINISH_GAP_US
    return t


def candidates(plan: Plan, device, room_floats: int, sms: int, itemsize: int = 2, keep: int | None = KEEP) -> list:
    """ALGO_1's extra configs for this plan (SCHED marks them for the caller's dispatch):
    boxes fitted to the image (ResNet-50's 28x28, 14x14 and 7x7 layers lose 12-23% of an
    8x8 box) and the wave-filling schedules, for every image size (whether tiles x slices
    fill the GPU's program slots does not depend on the image). ``room_floats``: the
    float32 partials the workspace holds. On a GPU 16-bit data only (the tiles are sized
    for it; float32 keeps conv_tma's lists, FMA ones included), and the ``keep`` fastest
    by predict_us (None: all, for benchmarks that check the model)."""
    flat = plan.n == 1 and plan.oh == 1
    if device.type == "cuda" and (itemsize != 2 or min(plan.c_red, plan.c_out) < 64):
        return []  # (fewer than 64 channels: a padded first layer, which has wgrad_rows_kernel)
    if device.type != "cuda":
        nb, bh, bw = (1, 1, 16) if flat else box_for(plan, 16)
        cfg = dict(SCHED=True, NB=nb, BH=bh, BW=bw, BLOCK_M=16, BLOCK_N=16, num_warps=1, num_stages=1)
        tiles, boxes = tiles_of(plan, 16, 16), boxes_of(plan, nb, bh, bw)
        return [dict(cfg, DIRECT=d, SLICES=s) for d, s in schedules(tiles, boxes, sms, room_floats // 256)]
    out = []
    narrow = min(plan.c_red, plan.c_out) <= 64
    for pixels, bm, bn, warps, stages in TILES + (NARROW_TILES if narrow else []):
        if bm > max(64, plan.c_red) or bn > max(64, plan.c_out):
            continue
        # the best box of rows at least 8 wide, and the best of any width when it covers
        # fewer pixels (narrow boxes: more, shorter runs of pixels a TMA load)
        wide, any_width = box_for(plan, pixels), box_for(plan, pixels, 1)
        for nb, bh, bw in [wide] + ([any_width] if boxes_of(plan, *any_width) * pixels < boxes_of(plan, *wide) * pixels
                                   else []):
            tiles, boxes = tiles_of(plan, bm, bn), boxes_of(plan, nb, bh, bw)
            for direct, slices in schedules(tiles, boxes, sms, room_floats // (bm * bn)):
                out.append(dict(SCHED=True, NB=nb, BH=bh, BW=bw, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps,
                                num_stages=stages, DIRECT=direct, SLICES=slices))
    if keep is not None:
        out = fastest(out, lambda c: predict_us(plan, c, sms), keep)
    return out


def fastest(configs, cost, keep):
    """The ``keep`` configs of least cost, plus the least-cost one of every box shape and
    of every tile shape (the model's ranking of boxes and tiles is the least certain part),
    cheapest first."""
    ranked = sorted(configs, key=cost)
    chosen = []
    for group in (lambda c: (c["NB"], c["BH"], c["BW"]), lambda c: (c["BLOCK_M"], c["BLOCK_N"], c["num_stages"])):
        seen = set()
        for c in ranked:
            if group(c) not in seen:
                seen.add(group(c))
                if c not in chosen:
                    chosen.append(c)
    for c in ranked:
        if len(chosen) >= keep:
            break
        if c not in chosen:
            chosen.append(c)
    return sorted(chosen, key=cost)


def launch_sched(plan: Plan, problem, x, dy, dw, part, cfg, alpha=1.0, beta=0.0):
    """dw = alpha * dw(x, dy) + beta * dw by wgrad_sched_kernel, then, when some tiles are
    split, wgrad_tiles_finish over them. ``part``: float32 workspace (any shape) holding
    cfg's partials."""
    bh, bw, bm, bn, nb = cfg["BH"], cfg["BW"], cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["NB"]
    tiles = tiles_of(plan, bm, bn)
    boxes = boxes_of(plan, nb, bh, bw)
    direct, slices = min(cfg["DIRECT"], tiles), cfg["SLICES"]
    rest = tiles - direct
    if rest == 0:
        slices = 1
    per = cdiv(boxes, slices)
    slices = cdiv(boxes, per)
    if rest and slices == 1:  # one slice: every tile is whole
        direct, rest = tiles, 0
    assert rest * slices * bm * bn <= part.numel(), "partials exceed the workspace"
    x_desc = descriptor(x, plan.in_shape, plan.in_strides, (nb, bh, 1, bw, bn))
    ds = plan.out_strides
    dy_desc = descriptor(dy, (plan.n, plan.oh, 1, plan.ow, plan.c_red), (ds[0], ds[1], ds[1], ds[2], 1),
                         (nb, bh, 1, bw, bm))
    ws = strides5(dw, 2)
    blend = (ws[0], ws[1], ws[3], ws[4], dw.shape[2], dw.shape[3], dw.shape[1])
    flip, beta_zero = problem.mode == 0, beta == 0
    consts = dict(BH=bh, BW=bw, BLOCK_M=bm, BLOCK_N=bn, PREC=input_precision(problem), NB=nb, FLIP=flip,
                  BETA_ZERO=beta_zero)
    options = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    args = (part, dw, dy_desc, x_desc, plan.n, plan.oh, plan.ow, plan.c_red, plan.c_out, *plan.taps.args,
            direct, slices, per, *blend, float(alpha), float(beta))
    static = ((plan, direct, slices, per, tuple(consts.items()), tuple(options.items()), x.dtype, dy.dtype,
               dw.dtype, blend), 2)
    launch(wgrad_sched_kernel, (direct + rest * slices,), args, consts, options, static)
    if rest:
        rows = min(bm, 16 if dw.device.type == "cuda" else bm)
        fin = (part, dw, plan.c_red, plan.c_out, dw.shape[1], direct, rest, slices, *blend[:6], float(alpha),
               float(beta))
        fconsts = dict(BLOCK_M=bm, BLOCK_N=bn, ROWS=rows, FLIP=flip, BETA_ZERO=beta_zero)
        launch(wgrad_tiles_finish, (rest * (bm // rows),), fin, fconsts, dict(num_warps=4),
               (("finish", plan, direct, rest, slices, tuple(fconsts.items()), dw.dtype, blend), 2))


# -- few input channels (conv1: C = 3, 7x7, stride 2) ----------------------------------
# The TMA path pads conv1's x to 16 channels and runs 49 taps of a 64 x 16 GEMM (the
# tile's columns mostly padding); ALGO_0's pointer kernel gathers every (tap, channel)
# element with its own bounds checks. Here x is copied once into a zero-bordered
# [N, Hp, Wp, 4] array, in which the filter window of output pixel (oh, ow) on filter
# row kh is ONE contiguous run: columns ow*SW ... ow*SW + 7 of padded row oh*SH + kh,
# 8 columns x 4 channels = 32 elements (64 aligned bytes). So the B tile of BLOCK_P
# pixels is [BLOCK_P, 8 rows x 32] = 256 columns (kh, kw, c) loaded without masks in
# 16-byte vectors, and dw is one [K, 256] GEMM over all pixels (147 of 256 columns real
# for 7x7 x 3; the rest are dropped by the finish).
ROW_SLOTS = 8    # filter rows (and columns) a window holds
ROW_CH = 4       # channels a padded pixel holds
ROW_COLS = ROW_SLOTS * ROW_SLOTS * ROW_CH
ROWS_MAX_SLICES = 2 * 132  # two waves of an H100's / H200's SMs: the most slices rows_candidates asks for there


def rows_applicable(problem) -> bool:
    """2-D, groups 1, at most 4 input channels, filter at most 8 x 8 at dilation 1,
    channels-last x and dy (a network's first layer)."""
    if problem.nd != 2 or problem.groups != 1:
        return False
    geo = geometry(problem)
    (r, s), dil = geo.ker[1:], geo.dil[1:]
    if geo.c > ROW_CH or r > ROW_SLOTS or s > ROW_SLOTS or tuple(dil) != (1, 1):
        return False
    return problem.x.strides[1] == 1 and problem.y.strides[1] == 1


def rows_shape(problem):
    """The padded copy [N, Hp, Wp, 4]: every window row (8 slots) of every output pixel
    inside; Wp a multiple of 4 so a padded row is a multiple of 16 elements."""
    geo = geometry(problem)
    (oh, ow), (sh, sw) = geo.out[1:], geo.stride[1:]
    hp = (oh - 1) * sh + ROW_SLOTS
    wp = -(-((ow - 1) * sw + ROW_SLOTS) // 4) * 4
    return geo.n, hp, wp, ROW_CH


@triton.jit
def pad_rows_kernel(x_ptr, xp_ptr, TOTAL, C, H, W, HP, WP, PH, PW, xs_n, xs_c, xs_h, xs_w,
                    BLOCK: tl.constexpr, CH: tl.constexpr):
    """xp[n, i, j, c] = x[n, c, i - PH, j - PW] (zero outside x and for c >= C): every
    element of the padded copy written once."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    c = offs % CH
    j = (offs // CH) % WP
    i = (offs // (CH * WP)) % HP
    n = offs // (CH * WP * HP)
    h = i - PH
    w = j - PW
    ok = (offs < TOTAL) & (c < C) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
    v = tl.load(x_ptr + n * xs_n + c * xs_c + h * xs_h + w * xs_w, mask=ok, other=0.0)
    tl.store(xp_ptr + offs, v, mask=offs < TOTAL)


@triton.jit(do_not_specialize=["M", "OH", "OW", "KH", "PER"])
def wgrad_rows_kernel(
        part_ptr,   # float32 partials [SLICES, K, 256]
        xp_ptr,     # the padded copy [N, HP, WP, 4] (pad_rows_kernel)
        dy_ptr,     # dy, channels-last
        M, OH, OW, K, KH,   # output pixels N*OH*OW, dy's channels, filter rows (window rows read)
        xs_n, xs_oh, xs_h,   # the copy's image stride, output-row step (SH rows), row stride: multiples of 16
        dys_n, dys_h, dys_w,
        PER,            # pixels per slice (a multiple of BLOCK_P)
        XS_OW: tl.constexpr,   # the copy's step from one output column to the next: SW * 4
        BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr, PREC: tl.constexpr,
        INT64: tl.constexpr):   # a view past 2^30 elements: every offset term in int64
    """part[s, k, (kh, kw, c)] = sum over slice s's output pixels p of dy[p, k] *
    xp[window row kh of p, column kw, channel c]: one [BLOCK_M, 256] accumulator, one dy
    tile and one window tile per BLOCK_P pixels."""
    COLS: tl.constexpr = 256
    # -- map the program to (output-channel block, pixel slice)
    k0 = tl.program_id(0) * BLOCK_M
    s = tl.program_id(1)
    rk = k0 + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, COLS)
    col_off = (cols // 32) * xs_h + cols % 32   # window row kh = col // 32; (kw, c) run within it
    col_ok = cols // 32 < KH                    # rows past the filter: not read (zeros)
    first = s * PER
    last = tl.minimum(first + PER, M)
    if INT64:  # every offset term in int64: one image's oh * dys_h alone can pass 2^31 (common.wide)
        dys_n, dys_h, dys_w, xs_n, xs_oh = wide((dys_n, dys_h, dys_w, xs_n, xs_oh))

    # -- reduction over the slice's pixels
    acc = tl.zeros((BLOCK_M, COLS), dtype=tl.float32)
    for p0 in range(first, last, BLOCK_P):
        p = p0 + tl.arange(0, BLOCK_P)
        pm = p < last
        ow = p % OW
        t = p // OW
        oh = t % OH
        n = t // OH
        dy_row = n * dys_n + oh * dys_h + ow * dys_w
        a = tl.load(dy_ptr + dy_row[:, None] + rk[None, :], mask=pm[:, None] & (rk < K)[None, :], other=0.0)
        x_row = n * xs_n + oh * xs_oh + ow * XS_OW
        b = tl.load(xp_ptr + x_row[:, None] + col_off[None, :], mask=pm[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a.T, b, acc, input_precision=PREC)

    # -- store the partial
    offs = (s * K + rk).to(tl.int64)[:, None] * COLS + cols[None, :]
    tl.store(part_ptr + offs, acc, mask=(rk < K)[:, None])


@triton.jit(do_not_specialize=["K", "C", "KH", "KW", "SLICES"])
def rows_finish(part_ptr, dw_ptr, K, C, KH, KW, SLICES, ws_k, ws_c, ws_h, ws_w, alpha, beta,
                BLOCK: tl.constexpr, FLIP: tl.constexpr, BETA_ZERO: tl.constexpr):
    """dw = alpha * (slice 0 + slice 1 + ..., in order) + beta * dw for wgrad_rows_kernel's
    partials; column (kh, kw, c) = (col // 32, col % 32 // 4, col % 4), kept where it is a
    real filter tap and channel (tap flipped in CONVOLUTION mode)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < K * 256
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, SLICES):
        acc += tl.load(part_ptr + s * (K * 256) + offs, mask=inside, other=0.0)
    k = offs // 256
    col = offs % 256
    kh = col // 32
    kw = (col % 32) // 4
    c = col % 4
    ok = inside & (kh < KH) & (kw < KW) & (c < C)
    if FLIP:
        kh = KH - 1 - kh
        kw = KW - 1 - kw
    ptrs = dw_ptr + k * ws_k + c * ws_c + kh * ws_h + kw * ws_w
    v = acc * alpha
    if not BETA_ZERO:
        v += beta * tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    tl.store(ptrs, v.to(dw_ptr.dtype.element_ty), mask=ok)


# (BLOCK_P, BLOCK_M, warps, stages): 40 KB (64 pixels) or 80 KB (128) of shared memory a
# stage; 64 pixels at 2 stages leaves room for two programs an SM. 8 warps: the 64 x 256
# accumulator is 64 registers a thread (4 warps compiled to 250 registers). Pipelined
# loads are cp.async, which bypass L1, so every window row comes from L2 (about 12 reads
# of each x element: ~0.4 GB on conv1); one stage loads through L1 instead (LDG.128), where
# the windows of neighbouring pixels overlap (stride 2: 6 of 8 columns), at the cost of
# exposed load latency (two programs an SM hide some).
ROWS_CONFIGS = [(64, 64, 8, 3), (64, 64, 8, 2), (128, 64, 8, 2), (64, 64, 8, 1), (128, 64, 8, 1)]
# float32 (twice the bytes a tile; tf32x3 splits both operands into two tf32 halves): the
# configs that compiled for sm_90 without local-memory spills (offline, 2026-12-05; 64-pixel
# tiles spilled 92-224 stores under tf32x3). tf32x3: 16 or 32 pixels, 64-74 KB of shared
# memory. Not timed on a GPU yet: they join ALGO_0's pointer configs in the tuner's list,
# which keeps the fastest that agrees with the reference config.
ROWS_CONFIGS_FLOAT32 = {"tf32x3": [(16, 64, 8, 2), (16, 64, 8, 3), (32, 64, 8, 1), (16, 32, 8, 3)],
                        "tf32": [(32, 64, 8, 2), (16, 64, 8, 2), (32, 64, 8, 1)]}


def rows_configs(problem) -> list:
    """(BLOCK_P, BLOCK_M, warps, stages) the GPU may run the few-channel path with: 16-bit
    data, or float32 on tensor cores (tf32, tf32x3); none for IEEE float32 (FMA math)."""
    if problem.dtype.itemsize == 2:
        return ROWS_CONFIGS
    if problem.dtype.itemsize == 4:
        return ROWS_CONFIGS_FLOAT32.get(input_precision(problem), [])
    return []


def rows_candidates(problem, device, room_floats: int, sms: int) -> list:
    """Configs of the few-channel path (ROWS marks them): one or two waves of slices
    (on a GPU, rows_configs' tiles)."""
    if not rows_applicable(problem):
        return []
    geo = geometry(problem)
    if device.type != "cuda":
        return [dict(ROWS=True, BLOCK_P=16, BLOCK_M=16, num_warps=1, num_stages=1, SLICES=3)]
    out = []
    for bp, bm, warps, stages in rows_configs(problem):
        blocks = cdiv(geo.k, bm)
        for waves in (1, 2):
            slices = max(1, min(waves * sms // blocks, room_floats // (geo.k * 256)))
            out.append(dict(ROWS=True, BLOCK_P=bp, BLOCK_M=bm, num_warps=warps, num_stages=stages, SLICES=slices))
    return out


def launch_rows(problem, x, dy, dw, xp, part, cfg, alpha=1.0, beta=0.0):
    """dw = alpha * dw(x, dy) + beta * dw through the padded copy ``xp`` (rows_shape):
    pad_rows_kernel, wgrad_rows_kernel into ``part``'s first SLICES x K x 256 floats,
    rows_finish."""
    geo = geometry(problem)
    (h, w), (oh, ow), (sh, sw), (ph, pw) = geo.inp[1:], geo.out[1:], geo.stride[1:], geo.pad[1:]
    n, hp, wp, ch = xp.shape
    cuda = dw.device.type == "cuda"
    xs = strides5(x, 2)
    block = 1024 if cuda else 256
    launch(pad_rows_kernel, (cdiv(xp.numel(), block),), (x, xp, xp.numel(), geo.c, h, w, hp, wp, ph, pw, xs[0],
           xs[1], xs[3], xs[4]), dict(BLOCK=block, CH=ch), dict(num_warps=4))
    m = n * oh * ow
    bp, bm = cfg["BLOCK_P"], cfg["BLOCK_M"]
    per = cdiv(cdiv(m, cfg["SLICES"]), bp) * bp
    slices = cdiv(m, per)
    assert slices * geo.k * 256 <= part.numel(), "partials exceed the workspace"
    ds = strides5(dy, 2)
    launch(wgrad_rows_kernel, (cdiv(geo.k, bm), slices), (
        part, xp, dy, m, oh, ow, geo.k, geo.ker[1], hp * wp * ch, sh * wp * ch, wp * ch, ds[0], ds[3], ds[4], per),
        dict(XS_OW=sw * ch, BLOCK_M=bm, BLOCK_P=bp, PREC=input_precision(problem), INT64=needs_int64(xp, dy)),
        dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
    ws = strides5(dw, 2)
    launch(rows_finish, (cdiv(geo.k * 256, block),), (
        part, dw, geo.k, geo.c, *geo.ker[1:], slices, ws[0], ws[1], ws[3], ws[4], float(alpha), float(beta)),
        dict(BLOCK=block, FLIP=problem.mode == 0, BETA_ZERO=beta == 0), dict(num_warps=4))
