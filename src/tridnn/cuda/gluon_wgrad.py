"""Backward-filter (wgrad) convolution in Gluon: warp-specialized, persistent, split over
pixels with a deterministic reduction (Hopper only, the sibling of gluon_conv.py). ALGO_1
backward filter (conv_bwd_filter_implicit_gemm) offers its ``picks`` (GLUON=True) last among
its tuner candidates on a Hopper GPU, for 2-D groups-1 16-bit dense channels-last problems;
the tuner times them with the others, each checked against ALGO_1's reference config.

dw[k, kh, kw, c] = sum over pixels (n, oh, ow) of dy[n, oh, ow, k] * x[n, oh*sh + kh*dh - ph,
ow*sw + kw*dw - pw, c] (channels-last bfloat16/float16 dy and x, float32 sums; a stride
needs the image size a multiple of it: x is read through its stride-phase view).
Per tap that is a GEMM with a huge reduction and a small output:
dw_tap[K, C] = dy[P, K]^T @ x_shift(tap)[P, C], P = N*OH*OW (200k pixels for res2 at batch
64) against a K x C output (128 x 128 per tap for res3). So:

- output tiles are (TAPS_N consecutive taps, BLOCK_M output channels, BLOCK_N input
  channels; with TAPS_N > 1 the taps' x boxes sit side by side in the slot, so the MMA's N
  is TAPS_N * BLOCK_N and the dy box is loaded once for all of them: 64-channel layers get
  N = 256 instead of 64-wide tiles that wgmma and L2 cannot feed);
- schedule (``schedule``, a cost model): the first DIRECT tiles (none, all, or whole waves
  of programs) reduce all pixel boxes and write dw themselves; the other tiles are split
  into SPLITS slices of PER pixel boxes. Persistent programs walk the units (whole tiles,
  then slices, slice-major: programs running at once reduce the same pixels, so their dy
  and x boxes meet in L2);
- per k-step (one pixel box of NB images x BH rows x BW columns = BLOCK_P pixels) the
  loader warp TMA-loads the dy box [NB, BH, BW, BLOCK_M] and the x box(es) shifted by the
  tap(s) [NB, BH, BW, BLOCK_N] (4-D descriptors over the NHWC tensors; out-of-bounds rows,
  columns and images load as zeros, which is the padding and the ragged edge). Images-inner
  configs (IMAGES_INNER) view the same memory with the images' dimension next to the
  channels, so a box is NB images at BH x BW pixels and fills on maps of any width;
- the consumer warpgroup(s) issue async wgmma with A = dy box^T: the [BLOCK_P, BLOCK_M]
  shared buffer viewed through ``.permute((1, 0))`` is an MN-major A operand (SASS:
  ``HGMMA ... gdesc[..].tnspA.tnspB``, wgmma's transposed modes for 16-bit types, no data
  movement), B = the x box(es) [BLOCK_P, TAPS_N * BLOCK_N] (MN-major as well);
- epilogue from registers (no shared memory for the tile): a whole tile writes alpha *
  tile + beta * dw into dw (any strides and float dtype; two channels an access where dw's
  layout allows, DW_VEC), a slice writes its float32 partial into the workspace [SPLITS, R,
  BLOCK_M, TAPS_N * BLOCK_N]; ``wgrad_finish_kernel`` (plain Triton) sums the slices in
  order (deterministic: the schedule is fixed by the config and the shape) and blends them
  into dw. TMA_DW (on by default, TRIDNN_WGRAD_TMA_STORE=0 off): a whole tile through shared
  memory and a TMA store where it fits beside the ring.

Gluon kernels do not run under the Triton interpreter: tests/test_gluon_wgrad.py compiles
every config offline for sm_90 (``compile_sm90``) and runs the finish kernel and the split
arithmetic (plain Python/Triton) on the CPU; tests/test_gluon_wgrad_integration.py checks
the candidate lists, the workspace fit and the fallbacks; with ``--gpu`` on a Hopper GPU
both check results against float64.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from . import common, gluon_common
from .common import cdiv
from .gluon_common import compile_sm90 as _compile_sm90, desc_sig, descriptor, max_regs


# --------------------------------------------------------------------------------------
# Device code
# --------------------------------------------------------------------------------------

@gluon.jit
def _unit_coords(u, DIRECT, R, N_KB, N_CB, BOXES, PER,
                 BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, TAPS_N: gl.constexpr):
    """Unit u -> (whole?, workspace slot, first tap t0, first output channel k0, first input
    channel c0, first and last pixel box). Units 0..DIRECT-1 are the first DIRECT tiles
    whole; unit DIRECT + q is slice q // R of split tile DIRECT + q % R (slice major:
    programs running at once reduce the same pixels). A tile is (TAPS_N taps t0.. in
    (kh, kw) order, output channel block, input channel block), the input channel block
    fastest."""
    whole = u < DIRECT
    q = gl.maximum(u - DIRECT, 0)
    split = q // R
    tile = gl.where(whole, u, DIRECT + q % R)
    cb = tile % N_CB
    r = tile // N_CB
    kb = r % N_KB
    tg = r // N_KB
    first = gl.where(whole, 0, split * PER)
    last = gl.where(whole, BOXES, gl.minimum(split * PER + PER, BOXES))
    return whole, q, tg * TAPS_N, kb * BLOCK_M, cb * BLOCK_N, first, last


@gluon.jit
def _tap_offsets(t, T, KW, C, PAD_H, PAD_W, DIL_H, DIL_W, SH, SW):
    """Where tap t (clamped to the last tap) reads x's stride-phase view [N, H/SH, SH, W/SW,
    SW*C], relative to a box's output pixel: (rows, phase row, columns, phase channel).
    Input row SH*oh + a (a = kh*DIL_H - PAD_H >= -PAD_H) is row oh + floor(a/SH) of phase a
    mod SH; the floor of a negative a is one division of a + SH*(PAD_H + 1) > 0."""
    t = gl.minimum(t, T - 1)
    kh = t // KW
    kw = t - kh * KW
    a_h = kh * DIL_H - PAD_H
    a_w = kw * DIL_W - PAD_W
    q_h = (a_h + SH * (PAD_H + 1)) // SH - (PAD_H + 1)
    q_w = (a_w + SW * (PAD_W + 1)) // SW - (PAD_W + 1)
    return q_h, a_h - q_h * SH, q_w, (a_w - q_w * SW) * C


@gluon.jit
def _loader(dy_desc, x_desc, a_bufs, b_bufs, ready, empty,
            # geometry: input channels, taps (KH*KW), filter width, padding, dilation, stride
            C, T, KW, PAD_H, PAD_W, DIL_H, DIL_W, SH, SW,
            # units and pixel boxes
            UNITS, DIRECT, R, N_KB, N_CB, TILES_H, TILES_W, BOXES, PER,
            NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_M: gl.constexpr,
            BLOCK_N: gl.constexpr, TAPS_N: gl.constexpr, STAGES: gl.constexpr, IMAGES_INNER: gl.constexpr):
    """Producer (one warp): per pixel box, wait for a free slot, TMA the dy box and the x box
    shifted by each of the tile's TAPS_N taps (side by side along the slot's channel
    dimension) into it. x is seen through its stride-phase view (``_tap_offsets``), so a box
    of output pixels maps to one box of the view (stride 1: phases of size 1). Taps past the
    last (the final tap group of a filter whose tap count TAPS_N does not divide) reload the
    last tap: the byte count stays fixed and their columns are never stored. Empty barriers
    start in phase 0: the first wait (parity 1) passes. IMAGES_INNER: the descriptors view
    dy as [OH, OW, N, K] and x as [H/SH, SH, W/SW, N, SW*C] (the images' dimension moved next
    to the channels), so the same box coordinates are passed in that order.

    One warp computes every coordinate, so the per-box work is kept to adds: the box walks
    (image block, tile row, tile column) as counters, and a one-tap tile's offsets are
    computed once a unit. (Session 25: with runtime divisions for both in the box loop,
    ~250 instructions a box, a program alone took ~0.87 us a 128-pixel k-step where a ring
    of plain boxes feeding the same MMAs took ~0.59; benchmarks/diag_wgmma_rate.py.)"""
    nbytes: gl.constexpr = dy_desc.block_type.nbytes + TAPS_N * x_desc.block_type.nbytes
    it = 0
    for u in range(gl.program_id(0), UNITS, gl.num_programs(0)):
        whole, q, t0, k0, c0, first, last = _unit_coords(u, DIRECT, R, N_KB, N_CB, BOXES, PER,
                                                         BLOCK_M, BLOCK_N, TAPS_N)
        # box b covers images (b // (TILES_H*TILES_W)) * NB.., rows and columns of one tile
        tw = first % TILES_W
        r = first // TILES_W
        th = r % TILES_H
        nb = r // TILES_H
        dh0, ph0, dw0, pc0 = _tap_offsets(t0, T, KW, C, PAD_H, PAD_W, DIL_H, DIL_W, SH, SW)
        for b in range(first, last):
            n = nb * NB
            oh = th * BH
            ow = tw * BW
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            if IMAGES_INNER:
                tma.async_copy_global_to_shared(dy_desc, [oh, ow, n, k0], bar, a_bufs.index(s))
            else:
                tma.async_copy_global_to_shared(dy_desc, [n, oh, ow, k0], bar, a_bufs.index(s))
            for j in gl.static_range(TAPS_N):
                dst = b_bufs.index(s)
                if TAPS_N > 1:
                    dst = dst.slice(j * BLOCK_N, BLOCK_N, dim=4)
                    dh, ph, dw_, pc = _tap_offsets(t0 + j, T, KW, C, PAD_H, PAD_W, DIL_H, DIL_W, SH, SW)
                else:
                    dh, ph, dw_, pc = dh0, ph0, dw0, pc0
                if IMAGES_INNER:
                    tma.async_copy_global_to_shared(x_desc, [oh + dh, ph, ow + dw_, n, pc + c0], bar, dst)
                else:
                    tma.async_copy_global_to_shared(x_desc, [n, oh + dh, ph, ow + dw_, pc + c0], bar, dst)
            it += 1
            # the next box: column, then row, then image block
            wrap_w = (tw == TILES_W - 1).to(gl.int32)
            tw = (tw + 1) * (1 - wrap_w)
            th += wrap_w
            wrap_h = (th == TILES_H).to(gl.int32)
            th = th * (1 - wrap_h)
            nb += wrap_h


@gluon.jit
def _consumer(dw_ptr, DW_K, DW_C, DW_H, DW_W, alpha, beta, ws_ptr, dw_desc, c_smem,
              a_bufs, b_bufs, ready, empty,
              K, C, T, KW,
              UNITS, DIRECT, R, N_KB, N_CB, BOXES, PER,
              NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, TAPS_N: gl.constexpr, STAGES: gl.constexpr, BETA_ZERO: gl.constexpr,
              WARPS: gl.constexpr, DW_VEC: gl.constexpr, TMA_DW: gl.constexpr):
    """Consumer (WARPS warps, WARPS/4 warpgroups sharing the BLOCK_M rows): per box, wait for
    the slot, async wgmma dy^T x with one MMA in flight (N = TAPS_N * BLOCK_N: the tile's
    filter columns side by side), free the slot of the MMA that retired. Epilogue from
    registers (no shared memory: a float32 128 x 128 tile would take 64 KB from the ring;
    the stores drain while the next unit's MMAs run): a whole tile blends alpha * tile +
    beta * dw into dw (masked to K x C), a slice stores its float32 partial into its
    workspace slot [BLOCK_M, TAPS_N * BLOCK_N].

    TMA_DW (host: tma_dw_ok; one tap a tile, beta 0, a KRSC dw, room in shared memory next
    to the ring): a whole tile goes through c_smem and one TMA store into dw's [K, KH*KW*C]
    view instead (rows past K clipped by TMA); the store drains while the next unit runs.
    Register stores cost ~3 us a 128 x 128 tile even in pairs (session 27: eight rows of
    16 bytes an instruction, 512 instructions a tile)."""
    BLOCK_P: gl.constexpr = NB * BH * BW
    TN: gl.constexpr = TAPS_N * BLOCK_N
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                         instr_shape=[16, TN, 16])
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    cols = gl.arange(0, TN, layout=gl.SliceLayout(0, acc_layout))
    it = 0
    for u in range(gl.program_id(0), UNITS, gl.num_programs(0)):
        whole, q, t0, k0, c0, first, last = _unit_coords(u, DIRECT, R, N_KB, N_CB, BOXES, PER,
                                                         BLOCK_M, BLOCK_N, TAPS_N)
        acc = gl.zeros([BLOCK_M, TN], gl.float32, acc_layout)
        for b in range(first, last):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            a = a_bufs.index(s).reshape([BLOCK_P, BLOCK_M]).permute((1, 0))  # dy^T: MN-major A
            bx = b_bufs.index(s).reshape([BLOCK_P, TN])
            acc = warpgroup_mma(a, bx, acc, is_async=True)
            acc, a, bx = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, bx))
            # MMA it-1 has retired: its slot may be refilled.
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=b > first)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=last > first)
        if whole:
            if TMA_DW:
                tma.store_wait(pendings=0)  # the previous tile's store has read c_smem
                gl.thread_barrier()
                c_smem.store((acc * alpha).to(dw_desc.dtype))
                fence_async_shared()
                gl.thread_barrier()
                tma.async_copy_shared_to_global(dw_desc, [k0, t0 * C + c0], c_smem)
            else:
                kr = k0 + rows
                cc = c0 + cols % BLOCK_N
                t = t0 + cols // BLOCK_N
                kh = t // KW
                kw = t - kh * KW
                if DW_VEC:
                    # dw's channels contiguous (DW_C = 1), its other strides multiples of 8 and every
                    # column of the tile inside dw (the host checks): each thread's two adjacent
                    # accumulator columns are one aligned pair in memory, so the stores (and beta's
                    # loads) go two elements at a time (STG.32 of bfloat16 pairs, STG.64 of float32
                    # ones) instead of one (session 27: the scalar stores of a 128 x 256 tile cost
                    # ~10 us a tile alone)
                    row_off = gl.multiple_of(kr.to(gl.int64) * DW_K, 8)
                    col_off = gl.max_contiguous(gl.multiple_of(cc + kh * DW_H + kw * DW_W, 2), 2)
                    ptrs = dw_ptr + row_off[:, None] + col_off[None, :]
                    mask = (kr < K)[:, None]  # (broadcast along the row: constant over each pair)
                else:
                    ptrs = (dw_ptr + (kr.to(gl.int64) * DW_K)[:, None]
                            + (cc * DW_C + kh * DW_H + kw * DW_W)[None, :])
                    mask = (kr < K)[:, None] & ((cc < C) & (t < T))[None, :]
                v = acc * alpha
                if not BETA_ZERO:
                    v += beta * gl.load(ptrs, mask=mask, other=0.0).to(gl.float32)
                gl.store(ptrs, v.to(dw_ptr.dtype.element_ty), mask=mask)
        else:
            part = ws_ptr + q.to(gl.int64) * (BLOCK_M * TN) + (rows * TN)[:, None] + cols[None, :]
            gl.store(part, acc)
    if TMA_DW:
        tma.store_wait(pendings=0)


# Integer arguments are not specialized: one compile per config serves every layer.
_RUNTIME_INTS = ["DW_K", "DW_C", "DW_H", "DW_W", "K", "C", "T", "KW", "PAD_H", "PAD_W", "DIL_H", "DIL_W", "SH", "SW",
                 "UNITS", "DIRECT", "R", "N_KB", "N_CB", "TILES_H", "TILES_W", "BOXES", "PER"]


@gluon.jit(do_not_specialize=_RUNTIME_INTS)
def gluon_wgrad_kernel(
    # TMA descriptors: dy [N, OH, OW, K] box [NB, BH, BW, BLOCK_M]; x's stride-phase view
    # [N, H/SH, SH, W/SW, SW*C] box [NB, BH, 1, BW, BLOCK_N] (IMAGES_INNER: dy [OH, OW, N, K]
    # box [BH, BW, NB, BLOCK_M], x [H/SH, SH, W/SW, N, SW*C] box [BH, 1, BW, NB, BLOCK_N])
    dy_desc, x_desc,
    # dw [K, C, KH, KW] at strides (k, c, kh, kw): whole tiles write alpha * tile + beta * dw
    dw_ptr, DW_K, DW_C, DW_H, DW_W, alpha, beta,
    # float32 partials of the split tiles [SPLITS, R, BLOCK_M, BLOCK_N]
    ws_ptr,
    # TMA_DW: dw viewed as [K, KH*KW*C] (KRSC), box [BLOCK_M, BLOCK_N]; else any descriptor (unused)
    dw_desc,
    # geometry: output and input channels, taps (KH*KW), filter width, padding, dilation, stride
    K, C, T, KW, PAD_H, PAD_W, DIL_H, DIL_W, SH, SW,
    # UNITS = DIRECT + R * SPLITS: the first DIRECT tiles (of ceil(T/TAPS_N) * N_KB * N_CB) whole, the
    # last R in SLICES of PER pixel boxes; BOXES = ceil(N/NB) * TILES_H * TILES_W
    UNITS, DIRECT, R, N_KB, N_CB, TILES_H, TILES_W, BOXES, PER,
    NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    TAPS_N: gl.constexpr, STAGES: gl.constexpr, BETA_ZERO: gl.constexpr, LOADER_REGS: gl.constexpr,
    num_warps: gl.constexpr, DW_VEC: gl.constexpr = False, TMA_DW: gl.constexpr = False,
    IMAGES_INNER: gl.constexpr = False,
):
    """Backward filter, persistent and warp-specialized (see the module docstring)."""
    # Shared memory: a ring of STAGES (dy box, TAPS_N x boxes side by side) slots and its
    # barriers. (With TAPS_N > 1 the slot's channel dimension holds whole 128-byte swizzle
    # columns per x box, so each box lands in its own columns and the slot reads as one
    # [pixels, TAPS_N * BLOCK_N] operand.)
    a_bufs = gl.allocate_shared_memory(dy_desc.dtype, [STAGES] + dy_desc.block_type.shape, dy_desc.layout)
    xb: gl.constexpr = x_desc.block_type.shape
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [xb[0], xb[1], xb[2], xb[3], TAPS_N * xb[4]], x_desc.dtype)
    b_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, xb[0], xb[1], xb[2], xb[3], TAPS_N * xb[4]],
                                       b_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if TMA_DW:  # a whole tile's way out (its dtype is dw's)
        c_smem = gl.allocate_shared_memory(dw_desc.dtype, dw_desc.block_type.shape, dw_desc.layout)
    else:
        c_smem = a_bufs  # (not used)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (dw_ptr, DW_K, DW_C, DW_H, DW_W, alpha, beta, ws_ptr, dw_desc, c_smem, a_bufs, b_bufs, ready,
                     empty, K, C, T, KW, UNITS, DIRECT, R, N_KB, N_CB, BOXES, PER,
                     NB, BH, BW, BLOCK_M, BLOCK_N, TAPS_N, STAGES, BETA_ZERO, num_warps, DW_VEC, TMA_DW)),
        (_loader, (dy_desc, x_desc, a_bufs, b_bufs, ready, empty,
                   C, T, KW, PAD_H, PAD_W, DIL_H, DIL_W, SH, SW,
                   UNITS, DIRECT, R, N_KB, N_CB, TILES_H, TILES_W, BOXES, PER,
                   NB, BH, BW, BLOCK_M, BLOCK_N, TAPS_N, STAGES, IMAGES_INNER)),
    ], [1], [LOADER_REGS])


@triton.jit(do_not_specialize=["DIRECT", "R", "SPLITS", "K", "C", "T", "KW", "N_KB", "N_CB"])
def wgrad_finish_kernel(
    ws_ptr,   # float32 partials [SPLITS, R, BLOCK_M, TAPS_N * BLOCK_N] of the split tiles
    dw_ptr,   # the filter gradient [K, C, KH, KW] at strides ws_k, ws_c, ws_h, ws_w
    DIRECT, R, SPLITS, K, C, T, KW, N_KB, N_CB,
    ws_k, ws_c, ws_h, ws_w,
    alpha, beta,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TAPS_N: tl.constexpr, BETA_ZERO: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """For split tile DIRECT + r: dw = alpha * (slice 0 + slice 1 + ..., in that order)
    + beta * dw, deterministic. One program per BLOCK elements of one tile."""
    TN: tl.constexpr = TAPS_N * BLOCK_N
    TILE: tl.constexpr = BLOCK_M * TN
    per_tile: tl.constexpr = TILE // BLOCK
    pid = tl.program_id(0)
    r = pid // per_tile
    e = (pid % per_tile) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, SPLITS):
        acc += tl.load(ws_ptr + (s * R + r).to(tl.int64) * TILE + e)
    # the tile's coordinates, as gluon_wgrad's _unit_coords
    tile = DIRECT + r
    cb = tile % N_CB
    t = tile // N_CB
    kb = t % N_KB
    tg = t // N_KB
    col = e % TN
    k = kb * BLOCK_M + e // TN
    c = cb * BLOCK_N + col % BLOCK_N
    tap = tg * TAPS_N + col // BLOCK_N
    kh = tap // KW
    kw = tap - kh * KW
    mask = (k < K) & (c < C) & (tap < T)
    ptrs = dw_ptr + k.to(tl.int64) * ws_k + c * ws_c + kh * ws_h + kw * ws_w
    v = acc * alpha
    if not BETA_ZERO:
        v += beta * tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs, v.to(dw_ptr.dtype.element_ty), mask=mask)


FINISH_BLOCK = 1024


# --------------------------------------------------------------------------------------
# Host side: configs and the split arithmetic (pure Python, CPU-testable)
# --------------------------------------------------------------------------------------

def config(nb, bh, bw, bm, bn, stages, warps, per_sm=1, taps=1, splits=None, flat=False, images_inner=False):
    """NB x BH x BW pixels a k-step, a BLOCK_M (output channels) x BLOCK_N (input channels)
    tile per filter tap, taps (TAPS_N, a power of 2) consecutive filter taps side by side in
    one tile (the dy box is loaded once for all of them; the MMA's N is TAPS_N * BLOCK_N),
    STAGES ring slots,
    num_warps consumer warps (num_warps/4 warpgroups sharing the BLOCK_M rows), per_sm
    programs an SM; splits: fixed pixel splits (None: ``schedule``); flat: for 1x1 stride-1
    problems only, x and dy viewed as one row of pixels (``flat_view``); images_inner: a box
    holds NB images at each of its BH x BW pixels (the descriptors put the images' dimension
    next to the channels), so maps of any width fill every box (a 7-wide map leaves 1/8 of an
    8-wide box's MACs on zeros) when N is a multiple of NB."""
    # the loader warp's registers (setmaxnreg): the per-tap offsets of several taps need more
    return dict(NB=nb, BH=bh, BW=bw, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, num_warps=warps, PER_SM=per_sm,
                TAPS_N=taps, SPLITS=splits, LOADER_REGS=40 if taps == 1 else 56, FLAT=flat,
                IMAGES_INNER=images_inner)


def name(cfg) -> str:
    return (f"{cfg['NB']}x{cfg['BH']}x{cfg['BW']} {cfg['BLOCK_M']}x"
            + (f"{cfg['TAPS_N']}*" if cfg.get("TAPS_N", 1) > 1 else "") + f"{cfg['BLOCK_N']} s{cfg['STAGES']} "
            f"w{cfg['num_warps']}" + (f" p{cfg['PER_SM']}" if cfg.get("PER_SM", 1) > 1 else "")
            + (f" S{cfg['SPLITS']}" if cfg.get("SPLITS") else "") + (" flat" if cfg.get("FLAT") else "")
            + (" images-inner" if cfg.get("IMAGES_INNER") else ""))


def box_shapes(cfg) -> tuple:
    """(dy box, x box) of a config, in the order of its descriptors' dimensions: [NB, BH,
    BW, BLOCK_M] and [NB, BH, 1, BW, BLOCK_N], or with IMAGES_INNER [BH, BW, NB, BLOCK_M]
    and [BH, 1, BW, NB, BLOCK_N]."""
    NB, BH, BW, BM, BN = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_M"], cfg["BLOCK_N"]
    return (list(gluon_common.pixel_order(cfg, [NB, BH, BW, BM])),
            list(gluon_common.phase_view_order(cfg, [NB, BH, 1, BW, BN])))


def block_p(cfg) -> int:
    return cfg["NB"] * cfg["BH"] * cfg["BW"]


def shared_bytes(cfg, itemsize=2) -> int:
    """Dynamic shared memory: the ring of (dy box, x box) slots (barriers aside; the output
    tile goes from registers to global memory)."""
    return itemsize * cfg["STAGES"] * block_p(cfg) * (cfg["BLOCK_M"] + cfg.get("TAPS_N", 1) * cfg["BLOCK_N"])


# Candidates for the H200 (227 KB of shared memory a program). A k-step of BLOCK_P pixels
# reads (BLOCK_M + BLOCK_N) * BLOCK_P * 2 bytes for BLOCK_M * BLOCK_N * BLOCK_P MACs, as in
# the forward kernel: 128 x 128 tiles need ~11 TB/s of L2 at full rate, 256 x 128 / 128 x 256
# (two warpgroups) ~8, 64 x 64 (res2: 64 channels each way) ~22 (L2-bound).
# Boxes follow the images: 56x56 8x16; 28x28 4x32 (7/8 useful) or 8x16; 14x14 4 images x
# 2 rows x 16 (7/8); 7x7 16 images x 1 row x 8 (7/8) or 2 images x 8x8 (0.77).
CONFIGS = [
    # 128 x 128, two warpgroups of 64 rows, 128-pixel boxes (3 x 64 KB ring)
    config(1, 8, 16, 128, 128, 3, 8), config(1, 4, 32, 128, 128, 3, 8), config(4, 2, 16, 128, 128, 3, 8),
    config(16, 1, 8, 128, 128, 3, 8), config(2, 8, 8, 128, 128, 3, 8),
    # 128 x 128, 64-pixel boxes and a deeper ring (56x56 in whole 8x8 boxes)
    config(1, 8, 8, 128, 128, 6, 8),
    # 128 x 128, one warpgroup (two 64-row wgmma per 16 pixels)
    config(1, 8, 16, 128, 128, 3, 4),
    # wider tiles (res4, res5): two warpgroups, 64-pixel boxes, 4 x 48 KB ring
    config(1, 8, 8, 256, 128, 4, 8), config(1, 8, 8, 128, 256, 4, 8), config(4, 1, 16, 256, 128, 4, 8),
    config(4, 1, 16, 128, 256, 4, 8), config(8, 1, 8, 256, 128, 4, 8), config(8, 1, 8, 128, 256, 4, 8),
    # 64 output channels (res2): 64 x 64 tiles, two programs an SM, or 256-pixel boxes
    config(1, 8, 16, 64, 64, 3, 4, per_sm=2), config(1, 8, 8, 64, 64, 6, 4, per_sm=2),
    config(1, 16, 16, 64, 64, 3, 4),
    # several taps a tile, side by side along N (res2: 64 x 4*64 instead of 64 x 64 tiles):
    # the dy box is loaded once for all of them and N = 256 keeps wgmma off the shared-memory
    # limit; 9 taps in groups of 4 compute 12 (3 wasted), groups of 2 compute 10
    config(1, 8, 8, 64, 64, 5, 4, taps=4), config(1, 8, 16, 64, 64, 4, 4, taps=2),
    config(1, 8, 8, 64, 64, 4, 4, per_sm=2, taps=2),
    # res3: 128 x 2*128 (N = 256, two warpgroups), a quarter less operand traffic per MAC
    # than 128 x 128 for 10/9 of the MACs
    config(1, 8, 8, 128, 128, 4, 8, taps=2), config(1, 4, 16, 128, 128, 4, 8, taps=2),
    # 1x1 stride-1 layers as one row of N*H*W pixels (FLAT, ``flat_ok``): every box full
    config(1, 1, 128, 128, 128, 3, 8, flat=True), config(1, 1, 64, 128, 256, 4, 8, flat=True),
    config(1, 1, 64, 256, 128, 4, 8, flat=True), config(1, 1, 128, 64, 64, 3, 4, per_sm=2, flat=True),
    config(1, 1, 256, 64, 64, 3, 4, flat=True), config(1, 1, 128, 128, 64, 4, 8, flat=True),
    # images innermost (session 28): a box of NB images at one pixel (or two side by side), full
    # on any map when N is a multiple of NB (ResNet-50's 7-, 14- and 28-wide maps leave 1/8 of
    # the image boxes above on zeros); 64-pixel boxes in a deeper ring for batch 64 on 7x7
    config(128, 1, 1, 128, 128, 3, 8, images_inner=True), config(64, 1, 1, 128, 128, 5, 8, images_inner=True),
    config(64, 1, 2, 128, 128, 3, 8, images_inner=True),
    # (session 29, for the sweep; not yet picked) 128 x 256 with a ring of 3, which leaves
    # room for the TMA store of dw (TMA_DW; the ring of 4 has none), image boxes and 64
    # images at one pixel (res5 at batch 64: 128 x 256 x 64 MACs a k-step, as 128 x 128 x 128)
    config(1, 8, 8, 128, 256, 3, 8), config(8, 1, 8, 128, 256, 3, 8),
    config(64, 1, 1, 128, 256, 3, 8, images_inner=True),
]


# Picks offered to tridnn's tuner (conv_bwd_filter_implicit_gemm: after the TMA path's own
# configs), by output width and channel counts, each with the cost model's schedule.
# Measured on the H200 (2026-11-30 17:50 UTC, benchmarks/sweep_gluon_wgrad.py, ResNet-50
# batch 64 bf16 NHWC, us; [cuDNN / tridnn ALGO_1 before]):
#   res2_3x3 (56x56, 64 -> 64):   1x8x16 64x64 s3 w4 p2 44.5, 1x8x8 64x2*64 s4 w4 p2 46.0,
#                                 1x8x16 64x2*64 s4 w4 49.1 [45.8 / 65.3]
#   res3_3x3 (28x28, 128):        1x4x32 31.6, 4x2x16 31.9, 16x1x8 32.3 (128x128 s3 w8) [37.2 / 38.4]
#   res4_3x3 (14x14, 256):        4x2x16 128x128 34.0-35.1, 16x1x8 128x128 34.4, 1x8x8 128x256 s4 34.6,
#                                 4x1x16 128x256 s4 34.7 [33.2 / 37.3]
#   res5_3x3 (7x7, 512):          16x1x8 128x128 s3 w8 39.9, 2x8x8 128x128 s3 w8 43.1,
#                                 8x1x8 128x256 s4 w8 45.3 [29.7 / 50.2]
WGRAD_PICKS_NARROW = [config(1, 8, 16, 64, 64, 3, 4, per_sm=2), config(1, 8, 8, 64, 64, 4, 4, per_sm=2, taps=2),
                      config(1, 8, 16, 64, 64, 4, 4, taps=2)]                  # K or C <= 64
WGRAD_PICKS_LARGE = [config(1, 4, 32, 128, 128, 3, 8), config(4, 2, 16, 128, 128, 3, 8),
                     config(16, 1, 8, 128, 128, 3, 8), config(1, 8, 16, 128, 128, 3, 8),
                     config(64, 1, 2, 128, 128, 3, 8, images_inner=True)]  # width >= 28
# (session 30, H100 sweep, batch 64, res4_3x3: 64x1x1 128x128 s5 images-inner 28.1 us against
# 32.4 for 16x1x8 and 35.2 for 1x8x8 128x256 s4, ALGO_1's pick 30.7, cuDNN 32.9: it takes the
# place of 1x8x8 128x256, whose 8x8 boxes cover a 14x14 map at 0.77)
WGRAD_PICKS_MEDIUM = [config(4, 2, 16, 128, 128, 3, 8), config(16, 1, 8, 128, 128, 3, 8),
                      config(4, 1, 16, 128, 256, 4, 8), config(64, 1, 2, 128, 128, 3, 8, images_inner=True),
                      config(64, 1, 1, 128, 128, 5, 8, images_inner=True)]  # 14 <= width < 28
WGRAD_PICKS_SMALL = [config(16, 1, 8, 128, 128, 3, 8), config(2, 8, 8, 128, 128, 3, 8),
                     config(8, 1, 8, 128, 256, 4, 8), config(128, 1, 1, 128, 128, 3, 8, images_inner=True),
                     config(64, 1, 1, 128, 128, 5, 8, images_inner=True)]  # width < 14
# 1x1 stride-1 layers (flat_ok): ResNet-50's widths are 7 * 2^k, so 8-, 16- and 32-wide boxes
# of an image row leave 1/8 of every k-step's MACs on zeros; a row of N*H*W pixels fills them
# (128 x 64 tiles: twice the tiles of 128 x 128 and half the split partials on the few-tile
# layers; H200 sweep 2026-12-01: res4_1x1c 17.2 us against 18.5 [cuDNN 16.2], res3_1x1c/r
# 24.4-24.7 against 29.0-29.1 for 128 x 128 flat [21.2])
WGRAD_PICKS_FLAT = [config(1, 1, 128, 128, 128, 3, 8, flat=True), config(1, 1, 64, 128, 256, 4, 8, flat=True),
                    config(1, 1, 64, 256, 128, 4, 8, flat=True), config(1, 1, 128, 128, 64, 4, 8, flat=True)]
WGRAD_PICKS_FLAT_NARROW = [config(1, 1, 128, 64, 64, 3, 4, per_sm=2, flat=True),
                           config(1, 1, 256, 64, 64, 3, 4, flat=True), config(1, 1, 128, 128, 64, 4, 8, flat=True)]


def flat_ok(kernel_size, padding, stride) -> bool:
    """A 1x1 filter at stride 1 without padding: dw = dy^T @ x over pixels, whatever the images'
    shape, so x and dy may be read as one row of N*H*W pixels."""
    return tuple(kernel_size) == (1, 1) and tuple(padding) == (0, 0) and tuple(stride) == (1, 1)


def flat_view(t):
    """[N, C, H, W] channels-last -> the same memory as [1, C, 1, N*H*W] channels-last."""
    n, c, h, w = t.shape
    return t.permute(0, 2, 3, 1).reshape(1, 1, n * h * w, c).permute(0, 3, 1, 2)


def picks(k: int, c: int, out_w: int, taps: int = 9, flat: bool = False, n: int | None = None) -> list:
    """The configs offered for dw [k, c, ...] of ``taps`` filter taps from outputs of width
    out_w, each marked GLUON=True for the launcher; no tile wider than the next power of 2
    of its channels, no more taps a tile than the filter has. flat: a 1x1 stride-1 problem
    (flat_ok), offered the one-row configs instead of image boxes. n: the batch; an
    images-inner config is offered only where its NB images divide it (else its boxes carry
    the empty images the other configs avoid), and only with gluon_common.IMAGES_INNER_OFFERED
    (TRIDNN_IMAGES_INNER=0 withdraws them)."""
    if flat:
        base = WGRAD_PICKS_FLAT_NARROW if k <= 64 or c <= 64 else WGRAD_PICKS_FLAT
    elif k <= 64 or c <= 64:
        base = WGRAD_PICKS_NARROW
    else:
        base = WGRAD_PICKS_LARGE if out_w >= 28 else WGRAD_PICKS_MEDIUM if out_w >= 14 else WGRAD_PICKS_SMALL
    cap_m, cap_n = max(64, triton.next_power_of_2(k)), max(64, triton.next_power_of_2(c))
    return [dict(cfg, GLUON=True) for cfg in base
            if cfg["BLOCK_M"] <= cap_m and cfg["BLOCK_N"] <= cap_n and cfg["TAPS_N"] <= taps
            and not (cfg["IMAGES_INNER"] and (n is None or n % cfg["NB"] or not gluon_common.IMAGES_INNER_OFFERED))]


def num_boxes(cfg, n, oh, ow) -> int:
    """Pixel boxes a tile reduces (a FLAT config's: of the one row of n * oh * ow pixels)."""
    if cfg.get("FLAT"):
        n, oh, ow = 1, 1, n * oh * ow
    return cdiv(n, cfg["NB"]) * cdiv(oh, cfg["BH"]) * cdiv(ow, cfg["BW"])


def num_tiles(cfg, k, c, taps) -> int:
    """Output tiles: (group of TAPS_N taps, output channel block, input channel block)."""
    return cdiv(taps, cfg.get("TAPS_N", 1)) * cdiv(k, cfg["BLOCK_M"]) * cdiv(c, cfg["BLOCK_N"])


def tile_n(cfg) -> int:
    """The MMA's N: the tile's taps side by side."""
    return cfg.get("TAPS_N", 1) * cfg["BLOCK_N"]


# Cost model for the schedule (microseconds): a k-step runs at SM_RATE MAC/s (~80% of 702
# TFLOP/s / 132 SMs, shared by PER_SM programs), a unit's epilogue and pipeline fill cost
# ~UNIT_US, and the split tiles' float32 partials are written once and read once by the finish
# kernel (mostly from L2: PARTIAL_BYTES_PER_US), after FINISH_US of launch gap.
SM_RATE = 0.8 * 702e12 / 2 / 132
UNIT_US = 1.5
PARTIAL_BYTES_PER_US = 5.0e6
FINISH_US = 3.0


def step_us(cfg) -> float:
    return block_p(cfg) * cfg["BLOCK_M"] * tile_n(cfg) / SM_RATE * 1e6 * cfg.get("PER_SM", 1)


def schedule_cost(cfg, tiles, boxes, programs, direct, splits) -> float:
    """Predicted microseconds of (DIRECT whole tiles, the rest in SPLITS slices). Units are
    dealt round-robin: the whole tiles first (DIRECT is 0, all tiles, or whole waves), then
    the slices."""
    rest = tiles - direct
    per = cdiv(boxes, splits)
    splits = cdiv(boxes, per) if rest else 0
    t = cdiv(direct, programs) * (boxes * step_us(cfg) + UNIT_US)
    if rest:
        t += cdiv(rest * splits, programs) * (per * step_us(cfg) + UNIT_US)
        t += FINISH_US + (2 * splits + 1) * rest * cfg["BLOCK_M"] * tile_n(cfg) * 4 / PARTIAL_BYTES_PER_US
    return t


def partial_floats(cfg, tiles, boxes, direct, splits) -> int:
    """float32 workspace elements of a schedule: one [BLOCK_M, TAPS_N * BLOCK_N] partial per
    slice of each split tile (none when every tile is whole)."""
    if direct >= tiles:
        return 0
    per = cdiv(boxes, max(1, splits))
    return cdiv(boxes, per) * (tiles - direct) * cfg["BLOCK_M"] * tile_n(cfg)


_SCHEDULES: dict = {}  # schedule's answers: its search costs milliseconds of host time a call


def schedule(cfg, tiles, boxes, programs, splits=None, direct=None, max_partials=None):
    """(DIRECT, SPLITS, PER): the first DIRECT tiles reduce all pixel boxes, the other
    tiles - DIRECT are split into SPLITS slices of PER boxes (every slice has a box: SPLITS =
    ceil(boxes / PER); SPLITS = 1 when no tile is split). Chosen by ``schedule_cost`` among
    DIRECT in {0, whole waves, all tiles} unless fixed. max_partials: the float32 workspace
    elements available (a caller's fixed buffer): schedules needing more are skipped (all
    tiles whole needs none, so one always remains). Cached: the search tries up to
    8 * programs splits for each DIRECT (4.3 ms a call on the H200's host, session 9)."""
    key = (tuple(sorted((k, v) for k, v in cfg.items() if isinstance(v, (int, float, str, bool)))), tiles, boxes,
           programs, splits, direct, max_partials)
    found = _SCHEDULES.get(key)
    if found is None:
        if len(_SCHEDULES) > 4096:
            _SCHEDULES.clear()
        found = _SCHEDULES[key] = _search(cfg, tiles, boxes, programs, splits, direct, max_partials)
    return found


def _search(cfg, tiles, boxes, programs, splits, direct, max_partials):
    if direct is None:
        directs = sorted({0, tiles} | {m * programs for m in range(1, tiles // programs + 1)})
    else:
        directs = [max(0, min(int(direct), tiles))]
    best = None
    for d in directs:
        if d == tiles:
            options = [1]
        elif splits is not None:
            options = [max(1, min(int(splits), boxes))]
        else:
            options = range(1, min(boxes, 8 * programs) + 1)
        for sp in options:
            if max_partials is not None and partial_floats(cfg, tiles, boxes, d, sp) > max_partials:
                continue
            cost = schedule_cost(cfg, tiles, boxes, programs, d, sp)
            if best is None or cost < best[0] - 1e-9:
                best = (cost, d, sp)
    if best is None:  # every fixed split overflows max_partials: all tiles whole
        return tiles, 1, boxes
    _, d, sp = best
    if d == tiles:
        return d, 1, boxes
    per = cdiv(boxes, sp)
    return d, cdiv(boxes, per), per


def why_not(x, dy, kernel_size, padding, dilation, stride=(1, 1)) -> str | None:
    """None when this kernel can compute the problem, else the reason."""
    import torch
    sh, sw = stride
    if sh < 1 or sw < 1 or x.shape[2] % sh or x.shape[3] % sw:
        return "the image size must be a multiple of the stride (x's stride-phase view)"
    if x.dtype not in (torch.bfloat16, torch.float16) or dy.dtype != x.dtype:
        return "bfloat16/float16 only"
    n, c, h, w = x.shape
    k = dy.shape[1]
    if dy.shape[0] != n:
        return "batch mismatch"
    oh = (h + 2 * padding[0] - dilation[0] * (kernel_size[0] - 1) - 1) // sh + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kernel_size[1] - 1) - 1) // sw + 1
    if tuple(dy.shape[2:]) != (oh, ow):
        return "dy has the wrong spatial size"
    if c % 8 or k % 8:
        return "channels must be multiples of 8 (TMA row alignment)"
    if not x.permute(0, 2, 3, 1).is_contiguous() or not dy.permute(0, 2, 3, 1).is_contiguous():
        return "x and dy must be channels-last (NHWC) and dense"
    return None


class Plan:
    """Everything one backward-filter call launches: the Gluon kernel's grid/args/meta, the
    finish kernel's (None when no tile is split), the workspace and dw."""

    def __init__(self, grid, args, meta, finish_grid, finish_args, finish_meta, ws, dw, direct, splits, per,
                 units, spec):
        self.grid, self.args, self.meta, self.spec = grid, args, meta, spec
        self.finish_grid, self.finish_args, self.finish_meta = finish_grid, finish_args, finish_meta
        self.ws, self.dw = ws, dw
        self.direct, self.splits, self.per, self.units = direct, splits, per, units


def prepare(x, dy, kernel_size, padding=(1, 1), dilation=(1, 1), cfg=None, alpha=1.0, beta=0.0, dw=None,
            sms=None, splits=None, direct=None, ws=None, stride=(1, 1), max_partials=None, flip=False):
    """Build descriptors, the workspace and launch arguments once (CUDA-graph timing launches
    ``launch(plan)``). x [N, C, H, W], dy [N, K, OH, OW], both channels-last; dw [K, C, KH, KW]
    of any float dtype and strides (default: x's dtype, channels-last). sms: pretend the GPU
    has that many SMs (tests: many units a program); splits / direct fix the schedule.
    ws: a float32 buffer used when large enough; max_partials: restrict the schedule to that
    many partial floats (pass ws.numel() to always use ws: tridnn's workspace). flip: write
    tap (kh, kw) at (KH-1-kh, KW-1-kw) (CONVOLUTION mode): dw is addressed from its last tap
    with negated tap strides."""
    import torch

    cfg = dict(cfg or CONFIGS[0])
    kh, kw = kernel_size
    padding, dilation, stride = tuple(padding), tuple(dilation), tuple(stride)
    reason = why_not(x, dy, (kh, kw), padding, dilation, stride)
    if reason:
        raise ValueError(reason)
    if cfg.get("FLAT"):
        if not flat_ok((kh, kw), padding, stride):
            raise ValueError("a flat config needs a 1x1 filter, stride 1 and no padding")
        if cfg.get("IMAGES_INNER"):
            raise ValueError("a flat config has one image row of pixels: images_inner does not apply")
        x, dy = flat_view(x), flat_view(dy)
    n, c, h, w = x.shape
    k, oh, ow = dy.shape[1], dy.shape[2], dy.shape[3]
    taps = kh * kw
    if dw is None:
        if beta != 0:
            raise ValueError("beta needs an existing dw")
        dw = torch.empty((k, c, kh, kw), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    if tuple(dw.shape) != (k, c, kh, kw):
        raise ValueError(f"dw must be {(k, c, kh, kw)}, got {tuple(dw.shape)}")
    NB, BH, BW, BM, BN = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_M"], cfg["BLOCK_N"]
    TAPS_N = cfg.get("TAPS_N", 1)
    if BM < 16 * cfg["num_warps"]:
        raise ValueError("BLOCK_M must give every consumer warp 16 rows")
    if TAPS_N > 1 and BN % 64:
        raise ValueError("TAPS_N > 1 needs BLOCK_N a multiple of 64 (whole swizzle columns a tap)")
    if sms is None:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    programs_max = sms * cfg.get("PER_SM", 1)
    tiles = num_tiles(cfg, k, c, taps)
    boxes = num_boxes(cfg, n, oh, ow)
    if splits is None:
        splits = cfg.get("SPLITS")
    d, splits, per = schedule(cfg, tiles, boxes, programs_max, splits, direct, max_partials)
    rest = tiles - d
    units = d + rest * splits
    sh, sw = stride
    x5 = x.permute(0, 2, 3, 1).reshape(n, h // sh, sh, w // sw, sw * c)  # the stride-phase view
    dy4 = dy.permute(0, 2, 3, 1)
    dy_box, x_box = box_shapes(cfg)
    if cfg.get("IMAGES_INNER"):  # the images' dimension next to the channels (TMA takes any order)
        dy4, x5 = dy4.permute(1, 2, 0, 3), x5.permute(1, 2, 3, 0, 4)
    dy_desc = descriptor(dy4, dy4.shape, dy4.stride(), dy_box)  # (cached per address on the GPU)
    x_desc = descriptor(x5, x5.shape, x5.stride(), x_box)
    need = splits * rest * BM * BN * TAPS_N
    if rest == 0:
        ws = gluon_common.placeholder(x.device, torch.float32)  # not touched
    elif ws is None or ws.numel() < need or ws.dtype != torch.float32:
        ws = torch.empty(need, device=x.device, dtype=torch.float32)
    dw_arg, dw_strides = dw, tuple(dw.stride())
    if flip:  # the base at tap (KH-1, KW-1), walking the taps backwards
        dw_arg = dw[:, :, kh - 1:, kw - 1:]
        dw_strides = (dw_strides[0], dw_strides[1], -dw_strides[2], -dw_strides[3])
    grid = (min(units, programs_max),)
    cap = max_regs(cfg["num_warps"], cfg.get("PER_SM", 1))
    n_kb, n_cb = cdiv(k, BM), cdiv(c, BN)
    dw_vec = dw_vec_ok(dw_strides, c, (kh, kw), cfg)
    tma_dw = dw_vec and tma_dw_ok(cfg, dw_arg, dw_strides, c, (kh, kw), beta)
    # the whole tiles' TMA store: dw as [K, KH*KW*C]; else a stand-in the kernel never reads
    dw_desc = descriptor(dw_arg, (k, taps * c), (dw_strides[0], 1), [BM, BN]) if tma_dw else dy_desc
    args = (dy_desc, x_desc, dw_arg, *dw_strides, float(alpha), float(beta), ws, dw_desc,
            k, c, taps, kw, padding[0], padding[1], dilation[0], dilation[1], sh, sw,
            units, d, max(rest, 1), n_kb, n_cb, cdiv(oh, BH), cdiv(ow, BW), boxes, per)
    meta = dict(NB=NB, BH=BH, BW=BW, BLOCK_M=BM, BLOCK_N=BN, TAPS_N=TAPS_N, STAGES=cfg["STAGES"],
                BETA_ZERO=beta == 0,
                LOADER_REGS=cfg.get("LOADER_REGS", 40), num_warps=cfg["num_warps"],
                DW_VEC=dw_vec, TMA_DW=tma_dw, IMAGES_INNER=bool(cfg.get("IMAGES_INNER")), maxnreg=cap)
    if rest == 0:
        fgrid = fargs = fmeta = None
    else:
        fgrid = (rest * (BM * BN * TAPS_N // FINISH_BLOCK),)
        fargs = (ws, dw_arg, d, rest, splits, k, c, taps, kw, n_kb, n_cb, *dw_strides, float(alpha), float(beta))
        fmeta = dict(BLOCK_M=BM, BLOCK_N=BN, TAPS_N=TAPS_N, BETA_ZERO=beta == 0, BLOCK=FINISH_BLOCK)
    # what the compiled kernel depends on besides meta: the data and dw dtypes and dw's and
    # ws's 16-byte alignment (the ints are not specialized; flip mode offsets dw's base)
    spec = (x.dtype, dw.dtype, dw_arg.data_ptr() % 16 == 0, ws.data_ptr() % 16 == 0)
    return Plan(grid, args, meta, fgrid, fargs, fmeta, ws, dw, d, splits, per, units, spec)


def dw_vec_ok(dw_strides, c, kernel_size, cfg) -> bool:
    """Whether whole tiles may store dw two channels at a time (the kernel's DW_VEC): channels
    contiguous, the output-channel and tap strides multiples of 8 elements (flip mode's
    negated tap strides too; the stride of a filter dimension of size 1 never counts) and every
    tile column inside dw (C a multiple of BLOCK_N, the taps of TAPS_N), so no column needs a
    mask."""
    sk, sc, sh, sw = dw_strides
    kh, kw = kernel_size
    strides = [sk] + [s for s, size in ((sh, kh), (sw, kw)) if size > 1]
    return (sc == 1 and all(abs(v) % 8 == 0 for v in strides) and c % cfg["BLOCK_N"] == 0
            and (kh * kw) % cfg.get("TAPS_N", 1) == 0)


# On by default since session 28 (H100: the GPU tests passed; diag_wgrad_l2.py, batch 64,
# us a k-step, TMA store against register pairs: 128 x 128 s3 0.620 / 0.674 on 12 programs,
# 0.875 / 0.953 on 132; 128 x 256 s3 0.589 / 0.641 and 0.803 / 0.907).
# TRIDNN_WGRAD_TMA_STORE=0 (or TMA_STORE = False) turns TMA_DW off.
TMA_STORE = os.environ.get("TRIDNN_WGRAD_TMA_STORE", "1") != "0"
SMEM_PROGRAM = 227 * 1024  # the shared memory one program may use on an H100/H200
SMEM_SM = 228 * 1024       # an SM's, shared by PER_SM programs


def tma_dw_ok(cfg, dw, dw_strides, c, kernel_size, beta) -> bool:
    """Whether whole tiles may leave through shared memory and one TMA store (TMA_DW), for a
    problem dw_vec_ok already accepted (C fills every column): one tap a tile, beta 0
    (nothing of dw to read), dw KRSC-packed within a row (its taps' channels side by side: a
    [K, KH*KW*C] matrix with 16-byte aligned rows), and the output tile fits in shared memory
    next to the ring."""
    if not TMA_STORE or cfg.get("TAPS_N", 1) != 1 or beta != 0:
        return False
    sk, sc, sh, sw = dw_strides
    kh, kw = kernel_size
    item = dw.element_size()
    packed = (kw == 1 or sw == c) and (kh == 1 or sh == kw * c)
    program = shared_bytes(cfg) + cfg["BLOCK_M"] * cfg["BLOCK_N"] * item + 1024  # (1 KB: the barriers)
    return (packed and (sk * item) % 16 == 0 and dw.data_ptr() % 16 == 0
            and program <= SMEM_PROGRAM and program * cfg.get("PER_SM", 1) <= SMEM_SM)


def launch(plan):
    """Queue the plan's kernels (after each variant's first launch, straight through its
    compiled launcher: gluon_common.launch, common.launch)."""
    gluon_common.launch(gluon_wgrad_kernel, plan.grid, plan.args, plan.meta, plan.spec)
    if plan.finish_grid is not None:
        common.launch(wgrad_finish_kernel, plan.finish_grid, plan.finish_args, plan.finish_meta, {})
    return plan.dw


def bound(plan):
    """The plan's launches as common.Bound objects (no tensor held: a launch record's
    payload), or None before ``launch`` compiled them or with the fast launch off."""
    main = gluon_common.bind(gluon_wgrad_kernel, plan.grid, plan.args, plan.meta, plan.spec)
    if main is None:
        return None
    if plan.finish_grid is None:
        return (main,)
    finish = common.bind(wgrad_finish_kernel, plan.finish_grid, plan.finish_args, plan.finish_meta, {})
    return None if finish is None else (main, finish)


def conv2d_wgrad(x, dy, kernel_size, padding=(1, 1), dilation=(1, 1), cfg=None, alpha=1.0, beta=0.0, dw=None,
                 sms=None, splits=None, direct=None, stride=(1, 1)):
    """dw = alpha * conv2d_weight(x, dy) + beta * dw for channels-last bf16/fp16 x and dy
    (GPU only; a stride needs the image size a multiple of it). Returns dw."""
    return launch(prepare(x, dy, kernel_size, padding, dilation, cfg, alpha, beta, dw, sms=sms, splits=splits,
                          direct=direct, stride=stride))


# --------------------------------------------------------------------------------------
# Offline compile (no GPU needed)
# --------------------------------------------------------------------------------------

def compile_sm90(cfg, out_dtype="bf16", beta_zero=True, dw_vec=False, tma_dw=False):
    """Compile the kernel for sm_90 without a GPU; returns the CompiledKernel (asm: ptx, cubin).
    out_dtype: dw's dtype, "bf16" or "fp32"; dw_vec: DW_VEC. dw and the workspace are 16-byte
    aligned, as a GPU launch on aligned tensors sees them; tma_dw: TMA_DW."""
    NB, BH, BW, BM, BN = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_M"], cfg["BLOCK_N"]
    dy_box, x_box = box_shapes(cfg)
    dy_sig = desc_sig("bf16", dy_box)
    types_ = {"dy_desc": dy_sig, "x_desc": desc_sig("bf16", x_box),
              "dw_ptr": "*" + out_dtype, "alpha": "fp32", "beta": "fp32", "ws_ptr": "*fp32",
              "dw_desc": desc_sig(out_dtype, [BM, BN]) if tma_dw else dy_sig}
    consts = dict(NB=NB, BH=BH, BW=BW, BLOCK_M=BM, BLOCK_N=BN, TAPS_N=cfg.get("TAPS_N", 1), STAGES=cfg["STAGES"],
                  BETA_ZERO=beta_zero,
                  LOADER_REGS=cfg.get("LOADER_REGS", 40), num_warps=cfg["num_warps"], DW_VEC=dw_vec, TMA_DW=tma_dw,
                  IMAGES_INNER=bool(cfg.get("IMAGES_INNER")))
    return _compile_sm90(gluon_wgrad_kernel, types_, consts, cfg["num_warps"],
                         maxnreg=max_regs(cfg["num_warps"], cfg.get("PER_SM", 1)),
                         pointers=("dw_ptr", "ws_ptr"))


def flops(n, c, k, oh, ow, kh, kw) -> float:
    return 2.0 * n * k * oh * ow * c * kh * kw


__all__ = ["gluon_wgrad_kernel", "wgrad_finish_kernel", "conv2d_wgrad", "prepare", "launch", "compile_sm90",
           "CONFIGS", "config", "name", "why_not", "schedule", "schedule_cost", "shared_bytes", "flops", "Plan",
           "num_boxes", "num_tiles", "picks", "partial_floats"]
