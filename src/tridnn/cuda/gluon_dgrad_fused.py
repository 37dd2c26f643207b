"""Strided backward data in ONE persistent Gluon launch over all output phases (Hopper only).

Why: gluon_conv's strided backward data (dgrad_phases) launches its stride-1 kernel once per
phase of dx (four launches for a 3x3 stride-2 layer). Each phase reduces over 1-4 taps only
(K of 128-512 per tap), so the four short persistent launches each pay a prologue, an
epilogue drain and a last-wave tail: on the H200 res3/4/5_3x3s2 ran at 1.15-1.19x cuDNN's
time against a ~27 us memory floor (2026-11-30). Here one launch walks the tiles of every
phase, dealt to the persistent programs by their length.

How: the tile list is the phases' tile lists one after another, in ``phase_table``'s order
(decreasing tap count). Every phase has the same extent [H/sh, W/sw] (H and W are multiples
of the stride here), so tile t is phase slot t // TILES_PER_PHASE and tile t % TILES_PER_PHASE
of it (gluon_conv's _tile_coords). A small int32 table [slots, 8] gives each slot's
(a, b, taps th and tw, dy padding P_h and P_w, first filter column, k-steps); loader and
consumers read it per tile (a few cached scalar loads) and so count the same ring positions.
Tiles differ in length (4, 2, 2 and 1 taps for 3x3 stride 2; none for the phases a filter
narrower than the stride never reaches, as 1x1 stride 2's three: those tiles are stores of
alpha * 0 + beta * dx), so the programs do not take every grid-th tile: ``schedule`` deals
them longest first to the least loaded program (an int32 list of offsets and tile indices
the kernel reads), each tile weighing its k-steps plus one for its store, which evens the
programs' work (res5_3x3s2, 16x1x8x128: at most 64 k-steps against a mean of 61; 72 dealt
round-robin).
The loader walks th*tw taps x K/BLOCK_K channel blocks of dy (gluon_conv's 4-D box, shifted
by the tap minus the padding; TMA zero-fills the rows and columns outside dy) and the
phase's column block of the phase-ordered turned filter (filter_turn, dgrad_phases). The
epilogue stores (and with beta != 0 first loads) the tile through ONE 5-D TMA descriptor of
dx's phase view [N, H/sh, sh, W/sw, sw*C] (gluon_conv_strided.phase_view) with box
[NB, BH, 1, BW, BLOCK_N] at [n0, i0, a, j0, b*C + c0]. A box must not reach past a column
phase's C channels into the next one's (TMA clips at sw*C only): C is a multiple of BLOCK_N.
An images-inner config (gluon_conv's PICKS_INNER*, session 29; offered where NB divides
the batch, unless gluon_common.IMAGES_INNER_STRIDED is switched off) views dy as
[OH, OW, N, K] and dx as [H/sh, sh, W/sw, N, sw*C]: NB images at one or two pixels a tile.

Elsewhere (H or W not a multiple of the stride, pixels not dense within a row, C not a
multiple of BLOCK_N) gluon_conv keeps its launch per phase. The kernel's shared memory and
register split are gluon_conv's (shared_state, constexprs); its consumer is this module's
own (the per-tile k-step count and the 5-D store), so gluon_conv's kernels are unchanged.

FUSED_PHASES (on; TRIDNN_GLUON_FUSED_PHASES=0 switches it off) routes
gluon_conv.launch_backward_data here: on the H200 (session 9; 88 GPU tests against float64)
res3/4/5_3x3s2's backward data went from 1.16-1.19 of cuDNN's time (a launch a phase) to
0.84-0.86 in the batch-64 suite (sweep: 0.83/0.87/0.82, 35.8/29.2/27.4 us).
"""
from __future__ import annotations

import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from .common import cdiv, int32_table
from .gluon_common import compile_sm90 as _compile_sm90, descriptor
from .gluon_common import desc_sig as _desc_sig, phase_view_order, pixel_order
from .gluon_conv import _pixel_load, _tile_coords, acc_layout_of, constexprs, drain, mainloop, shared_state, sig_dtype
from .gluon_conv_strided import phase_view, phase_view_why_not

FUSED_PHASES = os.environ.get("TRIDNN_GLUON_FUSED_PHASES", "1") != "0"

ROW = 8  # int32 values a table row: A, B, TH, TW, PH, PW, WCOL, KSTEPS
A_, B_, TH_, TW_, PH_, PW_, WCOL_, KSTEPS_ = range(ROW)


# --------------------------------------------------------------------------------------
# Device code
# --------------------------------------------------------------------------------------

@gluon.jit
def _slot_tile(t, TILES_PER_PHASE, SLOTS):
    """Tile t of the concatenated list -> (its phase slot, clamped into the table; its tile
    within the phase)."""
    q = gl.minimum(t // TILES_PER_PHASE, SLOTS - 1)
    return q, t - q * TILES_PER_PHASE


@gluon.jit
def _loader_phases(dy_desc, w_desc, a_bufs, b_bufs, ready, empty, table_ptr, sched_ptr,
                   # channels of dy (the reduction's), phases
                   K_IN, SLOTS,
                   # tile list
                   TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
                   NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr,
                   BLOCK_K: gl.constexpr, STAGES: gl.constexpr, IMAGES_INNER: gl.constexpr):
    """Producer (one warp): per tile, its phase's row of the table; per k-step, wait for a
    free slot, then TMA the shifted dy box and the filter box into it (gluon_conv._loader's
    incremental tap walk with the phase's taps, padding and filter columns)."""
    nbytes: gl.constexpr = dy_desc.block_type.nbytes + w_desc.block_type.nbytes
    pid = gl.program_id(0)
    tiles_ptr = sched_ptr + gl.num_programs(0) + 1  # (after the offsets)
    it = 0
    for i in range(gl.load(sched_ptr + pid), gl.load(sched_ptr + pid + 1)):
        t = gl.load(tiles_ptr + i)
        q, r = _slot_tile(t, TILES_PER_PHASE, SLOTS)
        row = table_ptr + q * 8
        tw_n = gl.load(row + 3)
        pad_h = gl.load(row + 4)
        pad_w = gl.load(row + 5)
        wcol = gl.load(row + 6)
        k_steps = gl.load(row + 7)
        n0, i0, j0, c0_out = _tile_coords(r, TILES_H, TILES_W, N_BLOCKS, NB, BH, BW, BLOCK_N)
        ih = i0 - pad_h
        iw0 = j0 - pad_w
        iw = iw0
        c0 = 0
        kw = 0
        for kk in range(k_steps):
            s = it % STAGES
            phase = (it // STAGES) & 1
            mbarrier.wait(empty.index(s), phase ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            _pixel_load(dy_desc, n0, ih, iw, c0, bar, a_bufs.index(s), IMAGES_INNER)
            tma.async_copy_global_to_shared(w_desc, [c0_out, wcol + kk * BLOCK_K], bar, b_bufs.index(s))
            it += 1
            c0 += BLOCK_K
            next_tap = c0 == K_IN
            c0 = gl.where(next_tap, 0, c0)
            kw = gl.where(next_tap, kw + 1, kw)
            iw = gl.where(next_tap, iw + 1, iw)
            next_row = kw == tw_n
            kw = gl.where(next_row, 0, kw)
            iw = gl.where(next_row, iw0, iw)
            ih = gl.where(next_row, ih + 1, ih)


@gluon.jit
def _k_steps_of(j, my_tiles, tiles_ptr, table_ptr, TILES_PER_PHASE, SLOTS):
    """The k-steps of this program's tile j (0 past its list's end)."""
    t = gl.load(tiles_ptr + gl.minimum(j, my_tiles - 1))
    q, _ = _slot_tile(t, TILES_PER_PHASE, SLOTS)
    return gl.where(j < my_tiles, gl.load(table_ptr + q * 8 + 7), 0)


@gluon.jit
def _consumer_phases(dx_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta, table_ptr,
                     sched_ptr, C_OUT, SLOTS,
                     TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
                     NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr,
                     BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                     PARTITION: gl.constexpr, CONSUMERS: gl.constexpr, WARPS: gl.constexpr,
                     HAS_BETA: gl.constexpr, FMA: gl.constexpr, IMAGES_INNER: gl.constexpr):
    """A consumer partition: gluon_conv._consumer's main loop and beta blend (no fused
    epilogue: backward data has none) with the tile's k-step count from the table (the ring
    position ``it`` advances by every tile of this program, the other partition's too) and
    the store through dx's 5-D phase view at [n0, i0, a, j0, b*C + c0] (IMAGES_INNER:
    [i0, a, j0, n0, b*C + c0])."""
    BLOCK_M: gl.constexpr = NB * BH * BW
    MMA_K: gl.constexpr = 256 // a_bufs.dtype.primitive_bitwidth
    acc_layout: gl.constexpr = acc_layout_of(BLOCK_N, MMA_K, WARPS, FMA)
    c_smem = c_bufs.index(PARTITION)
    c_tile = c_smem.reshape([BLOCK_M, BLOCK_N])
    pid = gl.program_id(0)
    first = gl.load(sched_ptr + pid)
    my_tiles = gl.load(sched_ptr + pid + 1) - first
    tiles_ptr = sched_ptr + gl.num_programs(0) + 1 + first  # this program's tiles
    it = 0
    if PARTITION == 1:  # tile 0 is the other partition's
        it = _k_steps_of(0, my_tiles, tiles_ptr, table_ptr, TILES_PER_PHASE, SLOTS)
    for j in range(PARTITION, my_tiles, CONSUMERS):
        t = gl.load(tiles_ptr + j)
        q, r = _slot_tile(t, TILES_PER_PHASE, SLOTS)
        row = table_ptr + q * 8
        k_steps = gl.load(row + 7)
        pa = gl.load(row + 0)
        pb = gl.load(row + 1)
        n0, i0, j0, c0 = _tile_coords(r, TILES_H, TILES_W, N_BLOCKS, NB, BH, BW, BLOCK_N)
        if IMAGES_INNER:
            coords = [i0, pa, j0, n0, pb * C_OUT + c0]
        else:
            coords = [n0, i0, pa, j0, pb * C_OUT + c0]
        t_local = j // CONSUMERS  # this partition's tile count
        if HAS_BETA:  # the old dx tile comes while the main loop runs
            tma.store_wait(pendings=0)
            gl.thread_barrier()
            mbarrier.expect(ybar.index(PARTITION), dx_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(dx_desc, coords, ybar.index(PARTITION), c_smem)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        if CONSUMERS > 1:
            # tile j-1 was the other consumer's ((j-1)//2)-th
            mbarrier.wait(turns.index(1 - PARTITION), ((j - 1) // 2) & 1, pred=j > 0)
        acc, it = mainloop(a_bufs, b_bufs, ready, empty, acc, it, k_steps, BLOCK_M, BLOCK_K, STAGES, FMA)
        if CONSUMERS > 1:
            mbarrier.arrive(turns.index(PARTITION))
        # (drain frees the tile's last slot; none for a phase without taps: its tile is alpha * 0 + beta * dx)
        acc = drain(acc, empty, it, k_steps, STAGES, FMA)
        acc = acc * alpha
        if HAS_BETA:
            mbarrier.wait(ybar.index(PARTITION), t_local & 1)
            acc = acc + beta * c_tile.load(acc_layout).to(gl.float32)
            gl.thread_barrier()
        else:
            # this partition's previous store must have read c_smem before it is overwritten
            tma.store_wait(pendings=0)
            gl.thread_barrier()
        c_tile.store(acc.to(dx_desc.dtype))
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(dx_desc, coords, c_smem)
        if CONSUMERS > 1:  # the other partition's next tile: its k-steps pass this one by
            it += _k_steps_of(j + 1, my_tiles, tiles_ptr, table_ptr, TILES_PER_PHASE, SLOTS)
    tma.store_wait(pendings=0)


_RUNTIME_INTS = ["K_IN", "C_OUT", "SLOTS", "TILES_PER_PHASE", "TILES_H", "TILES_W", "N_BLOCKS"]


@gluon.jit(do_not_specialize=_RUNTIME_INTS + ["table_ptr", "sched_ptr"])
def gluon_dgrad_fused_kernel(
    # TMA descriptors: dy [N, OH, OW, K] box [NB, BH, BW, BLOCK_K]; the phase-ordered turned
    # filter [C, KH*KW*K] box [BLOCK_N, BLOCK_K]; dx's phase view [N, H/sh, sh, W/sw, sw*C]
    # box [NB, BH, 1, BW, BLOCK_N] (IMAGES_INNER: dy and dx with the images next to the
    # channels, gluon_common's pixel_order and phase_view_order)
    dy_desc, w_desc, dx_desc,
    alpha, beta,
    # dy's channels (the reduction's); the phase table (int32 [SLOTS, 8]: phase_table's rows,
    # in tile-list order); the schedule (int32: grid + 1 offsets, then each program's tiles);
    # dx's channels; phases
    K_IN, table_ptr, sched_ptr, C_OUT, SLOTS,
    # tile list (SLOTS * TILES_PER_PHASE tiles); a phase's: ceil(N/NB) * TILES_H * TILES_W * N_BLOCKS
    TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
    NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr, PINGPONG: gl.constexpr, LOADER_REGS: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr, HAS_BETA: gl.constexpr = False,
    FMA: gl.constexpr = False, IMAGES_INNER: gl.constexpr = False,
):
    """dx = alpha * conv_transpose(dy, w, stride) (+ beta * dx) over all phases of dx,
    persistent and warp-specialized (see the module docstring); FMA: float32 products on
    the CUDA cores (gluon_conv.fma_config)."""
    CONSUMERS: gl.constexpr = 2 if PINGPONG else 1
    a_bufs, b_bufs, c_bufs, ready, empty, turns, ybar = shared_state(dy_desc, w_desc, dx_desc, STAGES, CONSUMERS)

    if PINGPONG:
        gl.warp_specialize([
            (_consumer_phases, (dx_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta, table_ptr,
                                sched_ptr, C_OUT, SLOTS, TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
                                NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 0, CONSUMERS, num_warps, HAS_BETA, FMA,
                                IMAGES_INNER)),
            (_loader_phases, (dy_desc, w_desc, a_bufs, b_bufs, ready, empty, table_ptr, sched_ptr,
                              K_IN, SLOTS, TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
                              NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, IMAGES_INNER)),
            (_consumer_phases, (dx_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta, table_ptr,
                                sched_ptr, C_OUT, SLOTS, TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
                                NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 1, CONSUMERS, num_warps, HAS_BETA, FMA,
                                IMAGES_INNER)),
        ], [1, num_warps], [LOADER_REGS, CONSUMER_REGS])
    else:
        gl.warp_specialize([
            (_consumer_phases, (dx_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta, table_ptr,
                                sched_ptr, C_OUT, SLOTS, TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
                                NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 0, CONSUMERS, num_warps, HAS_BETA, FMA,
                                IMAGES_INNER)),
            (_loader_phases, (dy_desc, w_desc, a_bufs, b_bufs, ready, empty, table_ptr, sched_ptr,
                              K_IN, SLOTS, TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS,
                              NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, IMAGES_INNER)),
        ], [1], [LOADER_REGS])


# --------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------

def phase_table(kernel, stride, padding, convolution: bool, k_in: int, block_k: int) -> tuple:
    """(rows, order): one row (a, b, th, tw, P_h, P_w, first filter column, k-steps) per phase
    of dgrad_phases.phases, the phases with the most taps first (ties in (a, b) order): the
    tile list's order, so the short tiles fill the last wave; ``order``: filter_turn's tap
    table of the turned filter whose column blocks the rows name (k_in: dy's channels)."""
    from .dgrad_phases import phases
    parts, order = phases(kernel, stride, padding, convolution)
    parts = sorted(parts, key=lambda p: -p.taps[0] * p.taps[1])  # (sorted is stable)
    rows = [(p.offset[0], p.offset[1], p.taps[0], p.taps[1], p.padding[0], p.padding[1], p.column * k_in,
             p.taps[0] * p.taps[1] * (k_in // block_k)) for p in parts]
    return rows, order


def why_not(dx, stride, cfg) -> str | None:
    """None when the fused launch can write dx (gluon_conv.backward_data_why_not holds):
    H and W multiples of the stride, dx's pixels dense within a row (its 5-D phase view),
    dx's channels a multiple of the config's BLOCK_N (a box stays in its column phase)."""
    reason = phase_view_why_not(dx, tuple(stride))
    if reason:
        return "dx: " + reason
    if dx.shape[1] % cfg["BLOCK_N"]:
        return "dx's channels a multiple of BLOCK_N (a box must not cross into the next column phase)"
    return None


STORE_COST = 1  # a tile's store (a 32 KB box) in k-steps (a k-step's loads: 32 KB)


def schedule(k_steps, programs) -> list:
    """The tiles (their k-steps, longest first) dealt to ``programs`` persistent programs,
    each to the least loaded so far (longest processing time first; ties to the lower
    program; a tile weighs its k-steps plus STORE_COST, so tiles without taps spread too):
    [programs + 1 offsets] + each program's tile indices in order (descending k-steps).
    The round-robin deal of one phase's launch left a program with up to 72 k-steps where
    the mean is 61 (res5_3x3s2, 16x1x8x128): this one, 64."""
    import heapq
    heap = [(0, p) for p in range(programs)]
    lists = [[] for _ in range(programs)]
    for t in sorted(range(len(k_steps)), key=lambda t: -k_steps[t]):  # (stable: tile order within a phase)
        load, p = heapq.heappop(heap)
        lists[p].append(t)
        heapq.heappush(heap, (load + k_steps[t] + STORE_COST, p))
    offsets = [0]
    for tiles in lists:
        offsets.append(offsets[-1] + len(tiles))
    return offsets + [t for tiles in lists for t in tiles]


_PLANS: dict = {}


def plan(dx_shape, k_in, kernel, stride, padding, convolution, cfg, sms=132) -> dict:
    """The launch's host values, without tensors: the table rows, the filter order, the
    tile list (SLOTS, NUM_TILES, TILES_PER_PHASE, TILES_H, TILES_W, N_BLOCKS), the grid and
    the schedule (cached: the LPT deal costs milliseconds)."""
    key = (tuple(dx_shape), k_in, tuple(kernel), tuple(stride), tuple(padding), bool(convolution),
           tuple(sorted((k, v) for k, v in cfg.items() if not isinstance(v, (dict, list)))), sms)
    p = _PLANS.get(key)
    if p is None:
        if len(_PLANS) > 256:
            _PLANS.clear()
        p = _PLANS[key] = _plan(dx_shape, k_in, kernel, stride, padding, convolution, cfg, sms)
    return p


def _plan(dx_shape, k_in, kernel, stride, padding, convolution, cfg, sms):
    n, c, h, w = dx_shape
    rows, order = phase_table(kernel, stride, padding, convolution, k_in, cfg["BLOCK_K"])
    tiles_h, tiles_w = cdiv(h // stride[0], cfg["BH"]), cdiv(w // stride[1], cfg["BW"])
    n_blocks = cdiv(c, cfg["BLOCK_N"])
    per_phase = cdiv(n, cfg["NB"]) * tiles_h * tiles_w * n_blocks
    num_tiles = len(rows) * per_phase
    grid = (max(1, min(num_tiles, sms * cfg.get("PER_SM", 1))),)
    sched = schedule([row[KSTEPS_] for row in rows for _ in range(per_phase)], grid[0])
    return dict(rows=rows, order=order, SLOTS=len(rows), NUM_TILES=num_tiles, TILES_PER_PHASE=per_phase,
                TILES_H=tiles_h, TILES_W=tiles_w, N_BLOCKS=n_blocks, grid=grid, schedule=sched)


def kernel_constexprs(cfg, has_beta) -> tuple:
    """(this kernel's constexprs, maxnreg): gluon_conv's for the config, without the fused
    epilogue's (backward data has none)."""
    consts, cap = constexprs(cfg, has_beta)
    names = gluon_dgrad_fused_kernel.arg_names
    return {k: v for k, v in consts.items() if k in names}, cap


def prepare(dy, w, dx, kernel, stride, padding, convolution, cfg, alpha=1.0, beta=0.0, sms=None, m=None):
    """(grid, args, meta) of dx = alpha * conv_transpose(dy, w) + beta * dx in one launch
    (w [K, C, KH, KW]: turned here by filter_turn into the phase-ordered [C, KH*KW*K]; m:
    that turned filter when the caller has it, plan's ``order``). The descriptors keep
    addresses only: the caller holds m (and dy, dx) until the launch is queued, or for as
    long as it replays the launch; one made here lives only until this returns."""
    from .filter_turn import turned_filter
    from .gluon_common import sm_count
    from .gluon_conv import _nhwc, check_dtypes
    stride = tuple(stride)
    reason = why_not(dx, stride, cfg)
    if reason:
        raise ValueError(reason)
    k_in = dy.shape[1]
    if k_in % cfg["BLOCK_K"]:
        raise ValueError(f"dy's channels ({k_in}) must be a multiple of BLOCK_K ({cfg['BLOCK_K']})")
    p = plan(tuple(dx.shape), k_in, tuple(kernel), stride, tuple(padding), convolution, cfg,
             sm_count(dx.device) if sms is None else sms)
    if m is None:
        m = turned_filter(w, order=p["order"])
    check_dtypes(cfg, dy, m, dx)
    NB, BH, BW, BN, BK = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    dyshape, dys, dy_box = (pixel_order(cfg, d) for d in (*_nhwc(dy), [NB, BH, BW, BK]))
    dy_desc = descriptor(dy, dyshape, dys, dy_box)
    w_desc = descriptor(m, m.shape, m.stride(), [BN, BK])
    xshape, xs, x_box = (phase_view_order(cfg, d) for d in (*phase_view(dx, stride), [NB, BH, 1, BW, BN]))
    dx_desc = descriptor(dx, xshape, xs, list(x_box))
    args = (dy_desc, w_desc, dx_desc, float(alpha), float(beta), k_in, int32_table(p["rows"], dx.device),
            int32_table(p["schedule"], dx.device), dx.shape[1], p["SLOTS"], p["TILES_PER_PHASE"], p["TILES_H"],
            p["TILES_W"], p["N_BLOCKS"])
    consts, cap = kernel_constexprs(cfg, beta != 0)
    return p["grid"], args, dict(consts, maxnreg=cap)


def launch(grid, args, meta):
    """The kernel through gluon_conv.launch (its direct launcher after the first call; tests
    count Gluon launches there)."""
    from . import gluon_conv
    gluon_conv.launch(grid, args, meta, kernel=gluon_dgrad_fused_kernel)


def compile_sm90(cfg, has_beta=False):
    """Compile the kernel for sm_90 without a GPU; returns the CompiledKernel (bfloat16 data,
    float32 for a TF32 config)."""
    NB, BH, BW, BN, BK = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    dt = sig_dtype(cfg)
    types_ = {"dy_desc": _desc_sig(dt, list(pixel_order(cfg, [NB, BH, BW, BK]))), "w_desc": _desc_sig(dt, [BN, BK]),
              "dx_desc": _desc_sig(dt, list(phase_view_order(cfg, [NB, BH, 1, BW, BN]))), "table_ptr": "*i32",
              "sched_ptr": "*i32",
              "alpha": "fp32", "beta": "fp32"}
    consts, cap = kernel_constexprs(cfg, has_beta)
    return _compile_sm90(gluon_dgrad_fused_kernel, types_, consts, cfg["num_warps"], maxnreg=cap)


__all__ = ["gluon_dgrad_fused_kernel", "FUSED_PHASES", "phase_table", "why_not", "schedule", "plan", "prepare", "launch",
           "compile_sm90"]
