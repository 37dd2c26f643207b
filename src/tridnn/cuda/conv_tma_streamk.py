"""Stream-K for conv_tma's implicit GEMMs whose output tiles under-fill the GPU.

A layer with few output tiles (ResNet-50's res4/res5 1x1 layers at batch 64: 100 to 200
tiles of 128 x 128 for 132 SMs) runs one or two ragged waves: each SM's time is whole
tiles' reduction loops, and a fraction of the SMs idles in the last wave. Stream-K
splits the (tile, k-iteration) space instead: with ``ipt`` iterations (tap, channel
block) per tile, the remaining tiles' ``tiles * ipt`` iterations are cut into
NUM_PROGRAMS contiguous ranges of equal length (one persistent program per SM, or two).
A program walks its range tile by tile: for each tile it touches it computes the
tile's part [lo, hi) of the range once, runs conv_tma's own k loop (conv_tile_range:
the same tight, software-pipelined loop as conv_tma_kernel, no tile or range
bookkeeping inside), then stores the tile with the usual epilogue if it covered it
whole (alpha/beta, bias, activation, residual z, as conv_tma's), else a float32
partial piece. DP_TILES > 0 (the hybrid): the first whole waves of tiles run
data-parallel first, one tile per program as in conv_tma's persistent kernel, and only
the rest is streamed.

Session 6's first kernel flattened the tile loop and the k loop into one loop so the
loads of the next tile would stay in flight across a tile end; in sm_90 SASS that loop
spent ~356 instructions a 64-deep k-step on bookkeeping (158 in conv_tma_kernel), was
issue-bound, and ran at half conv_tma's rate on the H200 (2026-11-30 14:31 UTC). It is
gone: the loop per tile costs a pipeline drain and refill at each of a program's 2-3
tile ends instead, which two programs an SM (SK=2) can hide.

Fixup: partials to the workspace, then ``streamk_finish_kernel``. Chosen over an
in-kernel fixup (the owner of a split tile spin-waits on flags for the others'
partials) because:
- flags in a caller's workspace hold garbage on entry (cuDNN's workspace contract), so
  they would need a memset launch per call anyway (an epoch value passed as an argument
  is frozen into a CUDA graph, and flags outside the workspace break concurrent
  streams); the finish launch costs about what the memset would;
- no co-residency assumption (a spin-wait deadlocks if a program it waits on is not
  resident: MPS, other kernels on the GPU) and no ordering of programs, so it runs
  under the interpreter, whose programs run one after another;
- the bytes fit the H200's 50 MB L2: at most two partial pieces per program (2 x 132 x
  64 KB = 17 MB for 128 x 128 tiles, 35 MB for 128 x 256), and only the split tiles'
  pieces are written, then read once by the finish pass while still in L2.
Determinism: piece (program p, slot) holds p's part of a tile, slot 0 for the first
tile of p's range and 1 for its last; the finish kernel sums a tile's pieces in
program order, so a config gives bitwise-reproducible results.

Off by default (OFFERED = False) until an H200 sweep of this kernel
(benchmarks/sweep_conv_streamk.py) shows it faster. With OFFERED (``candidates``):
single plans of 16-bit data with tensor-core math (forward, and backward data at
stride 1), for each config whose tile count is under MAX_WAVES = 4 waves of programs
with the last wave less than FILL_BELOW = 90% full (worth_it: the time lost is the
empty part of the last wave), each tile has at least MIN_ITERS iterations to split, and
the layer has at least MIN_FLOPS of work (below that the second launch costs more than
the ragged wave). Under two waves the configs stream all tiles (DP 0) or one wave's
worth (DP 1); from two waves on, all but the last one to two waves run data-parallel
(dp_options). The 7x7 and 14x14 layers' other loss, boxes of 8x8 or 8x16 pixels
holding 49 or 98 real ones (77%), is not stream-K's to fix. The partial buffer
(``workspace_buffers``) is declared only for such problems. ``FORCE`` (tests): a config
to put first for every single plan, so the interpreter, which takes the first
candidate, runs this path.
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ..workspace import Buffer
from . import conv_tma
from .common import cdiv, launch, sm_count
from .conv_tma import conv_tile_range, tile_origin, tile_pixels
from .epilogue import launch_args, store_tile
from .geometry import geometry, input_precision, needs_int64
from .memo import IdentityMemo

FORCE = None        # tests: a config (with SK) offered first for every single plan
# Not offered by default: session 6's kernel ran at half conv_tma's rate on the H200
# (res4_1x1r 23-30 us against 14.3, res5_3x3 43-80 against 44.4; 2026-11-30 14:31 UTC), and
# this one is not measured yet. The switch after an H200 sweep: OFFERED = True puts the
# configs after conv_tma's where worth_it (the tuner keeps them only where faster).
OFFERED = False
MIN_ITERS = 8       # a tile's (tap, channel block) iterations below which nothing is split
MIN_FLOPS = 1e9     # layers below this (a few us) are not worth a second launch
FILL_BELOW = 0.9    # offered when the tiles' last wave is less full than this
MAX_WAVES = 4       # ... and there are fewer waves than this (beyond, the tail matters less)
WORKSPACE_SMS = 132  # the workspace is sized before the device is known: an H200's SMs


@triton.jit
def epilogue_tile(acc, n, oh0, ow0, k0, N, OH, OW, C_OUT, y_ptr, bias_ptr, z_ptr,
                  y_off, ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
                  alpha, beta, alpha2, coef, swish_beta,
                  BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr, NB: tl.constexpr,
                  ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
                  INT64: tl.constexpr):
    """store_tile of a finished tile at its pixels (clipped at the image edge and at N)."""
    pn, oh, ow, mask_m = tile_pixels(n, oh0, ow0, N, OH, OW, BH, BW, NB, INT64)
    cols = k0 + tl.arange(0, BLOCK_N)
    row_y = y_off + pn * ys_n + oh * ys_h + ow * ys_w
    row_z = pn * zs_n + oh * zs_h + ow * zs_w
    store_tile(acc, row_y, row_z, cols, mask_m, cols < C_OUT, y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
               alpha, beta, alpha2, coef, swish_beta, ACT, HAS_BIAS, HAS_Z, BETA_ZERO)


@triton.jit
def range_start(p, SK_ITERS, NUM_PROGRAMS: tl.constexpr):
    """First stream-K iteration of program p: floor(p * SK_ITERS / NUM_PROGRAMS) (the
    host keeps NUM_PROGRAMS * SK_ITERS under 2^31)."""
    return (p * SK_ITERS) // NUM_PROGRAMS


@triton.jit
def range_owner(g, SK_ITERS, NUM_PROGRAMS: tl.constexpr):
    """The program whose range holds stream-K iteration g: the largest p with
    range_start(p) <= g, i.e. ceil((g + 1) * NUM_PROGRAMS / SK_ITERS) - 1."""
    return ((g + 1) * NUM_PROGRAMS - 1) // SK_ITERS


@triton.jit
def conv_tma_streamk_kernel(
        # epilogue pointers: output, bias (K values), residual z; float32 partial pieces
        # [NUM_PROGRAMS, 2, BLOCK_M * BLOCK_N] (slot 0: the range's first tile, 1: its last)
        y_ptr, bias_ptr, z_ptr, part_ptr,
        # TMA descriptors: input phase view box [NB, BH, 1, BW, BLOCK_K]; filter [rows, taps, cols]
        x_desc, w_desc,
        # output geometry and the taps, as conv_tma_kernel
        N, OH, OW, C_RED, C_OUT, NTW, T, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W, SH, SW, OFF_H, OFF_W,
        W_TAP0, W_STEP_H, W_STEP_W,
        # element offset and strides of y and z (n, channel, h, w), and of bias
        y_off, ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
        # epilogue scalars
        alpha, beta, alpha2, coef, swish_beta,
        # tiles run data-parallel before the stream-K part (whole waves)
        DP_TILES,
        BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, W_KMAJOR: tl.constexpr, PREC: tl.constexpr,
        ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr, BETA_ZERO: tl.constexpr,
        INT64: tl.constexpr, NB: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    """conv_tma_kernel's tiles, DP_TILES of them one per program in turn, the rest's
    (tile, iteration) space in NUM_PROGRAMS equal contiguous ranges. A tile covered whole
    by one program is stored with the epilogue; a piece of a split tile goes to part for
    streamk_finish_kernel. All tile and range arithmetic is per tile, outside
    conv_tile_range's k loop."""
    BLOCK_M: tl.constexpr = NB * BH * BW
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(N, NB) * tl.cdiv(OH, BH) * tl.cdiv(OW, BW) * tl.cdiv(C_OUT, BLOCK_N)
    ipt = T * (C_RED // BLOCK_K)

    # -- data-parallel part: whole tiles, one per program per wave
    for tile in range(pid, DP_TILES, NUM_PROGRAMS):
        n, oh0, ow0, k0 = tile_origin(tile, N, OH, OW, C_OUT, BH, BW, BLOCK_N, GROUP_M, NB)
        acc = conv_tile_range(x_desc, w_desc, n, oh0, ow0, k0, C_RED, NTW, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W,
                              SH, SW, OFF_H, OFF_W, W_TAP0, W_STEP_H, W_STEP_W, 0, ipt, BLOCK_M, BLOCK_N, BLOCK_K,
                              W_KMAJOR, PREC)
        epilogue_tile(acc, n, oh0, ow0, k0, N, OH, OW, C_OUT, y_ptr, bias_ptr, z_ptr, y_off, ys_n, ys_k, ys_h, ys_w,
                      zs_n, zs_k, zs_h, zs_w, bias_stride, alpha, beta, alpha2, coef, swish_beta,
                      BH, BW, BLOCK_N, NB, ACT, HAS_BIAS, HAS_Z, BETA_ZERO, INT64)

    # -- stream-K part: this program's range [start, end) of the remaining tiles' iterations,
    # tile by tile: the tile's own stretch [lo, hi) of it, then the tight k loop
    sk_iters = (num_tiles - DP_TILES) * ipt
    start = range_start(pid, sk_iters, NUM_PROGRAMS)
    end = range_start(pid + 1, sk_iters, NUM_PROGRAMS)
    first = start // ipt
    for t in range(first, tl.cdiv(end, ipt)):
        lo = tl.maximum(start - t * ipt, 0)
        hi = tl.minimum(end - t * ipt, ipt)
        n, oh0, ow0, k0 = tile_origin(DP_TILES + t, N, OH, OW, C_OUT, BH, BW, BLOCK_N, GROUP_M, NB)
        acc = conv_tile_range(x_desc, w_desc, n, oh0, ow0, k0, C_RED, NTW, ROW0_H, ROWSTEP_H, ROW0_W, ROWSTEP_W,
                              SH, SW, OFF_H, OFF_W, W_TAP0, W_STEP_H, W_STEP_W, lo, hi, BLOCK_M, BLOCK_N, BLOCK_K,
                              W_KMAJOR, PREC)
        if (lo == 0) & (hi == ipt):  # the whole tile: finished here
            epilogue_tile(acc, n, oh0, ow0, k0, N, OH, OW, C_OUT, y_ptr, bias_ptr, z_ptr, y_off, ys_n, ys_k, ys_h,
                          ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride, alpha, beta, alpha2, coef, swish_beta,
                          BH, BW, BLOCK_N, NB, ACT, HAS_BIAS, HAS_Z, BETA_ZERO, INT64)
        else:  # a piece: slot 0 if it is the range's first tile, else 1 (its last)
            slot = tl.where(t == first, 0, 1)
            offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            tl.store(part_ptr + (pid * 2 + slot) * (BLOCK_M * BLOCK_N) + offs, acc)


@triton.jit
def streamk_finish_kernel(
        y_ptr, bias_ptr, z_ptr, part_ptr,
        N, OH, OW, C_RED, C_OUT, T,
        y_off, ys_n, ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride,
        alpha, beta, alpha2, coef, swish_beta,
        DP_TILES,
        BH: tl.constexpr, BW: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr,
        BETA_ZERO: tl.constexpr, INT64: tl.constexpr, NB: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
        FINISH_N: tl.constexpr):
    """One program per (stream-K tile, FINISH_N-column slice): a tile split over programs
    p_lo..p_hi is the sum of their pieces in that order (deterministic; programs with
    an empty range add nothing), then the epilogue; a tile that one program covered whole was stored by it (nothing to do).
    Column slices keep the float32 sum and the epilogue's operands in registers."""
    BLOCK_M: tl.constexpr = NB * BH * BW
    t = tl.program_id(0)
    j = tl.program_id(1)
    num_tiles = tl.cdiv(N, NB) * tl.cdiv(OH, BH) * tl.cdiv(OW, BW) * tl.cdiv(C_OUT, BLOCK_N)
    ipt = T * (C_RED // BLOCK_K)
    sk_iters = (num_tiles - DP_TILES) * ipt
    p_lo = range_owner(t * ipt, sk_iters, NUM_PROGRAMS)
    p_hi = range_owner(t * ipt + ipt - 1, sk_iters, NUM_PROGRAMS)
    if p_lo < p_hi:
        offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + (j * FINISH_N + tl.arange(0, FINISH_N))[None, :]
        acc = tl.zeros((BLOCK_M, FINISH_N), dtype=tl.float32)
        for p in range(p_lo, p_hi + 1):
            p_start = range_start(p, sk_iters, NUM_PROGRAMS)
            slot = tl.where(p_start // ipt == t, 0, 1)
            # an empty range (more programs than streamed iterations) left no piece
            nonempty = range_start(p + 1, sk_iters, NUM_PROGRAMS) > p_start
            acc += tl.load(part_ptr + (p * 2 + slot) * (BLOCK_M * BLOCK_N) + offs, mask=nonempty, other=0.0)
        n, oh0, ow0, k0 = tile_origin(DP_TILES + t, N, OH, OW, C_OUT, BH, BW, BLOCK_N, GROUP_M, NB)
        epilogue_tile(acc, n, oh0, ow0, k0 + j * FINISH_N, N, OH, OW, C_OUT, y_ptr, bias_ptr, z_ptr, y_off, ys_n,
                      ys_k, ys_h, ys_w, zs_n, zs_k, zs_h, zs_w, bias_stride, alpha, beta, alpha2, coef, swish_beta,
                      BH, BW, FINISH_N, NB, ACT, HAS_BIAS, HAS_Z, BETA_ZERO, INT64)


# -- configs and where they are offered ------------------------------------------------
def _sk(cfg, per_sm=1, **extra):
    """A stream-K config: conv_tma's box and block sizes, SK programs per SM, DP waves."""
    return dict(cfg, SK=per_sm, DP=0, **extra)


_cfg = conv_tma._cfg
# sm_90 bf16 (registers, shared memory, spills; plain epilogue / bias + relu + z), the
# hot k loop in both kernels' tile loops 148-199 instructions a 64-deep k-step, 3-4
# CTA barriers (conv_tma_kernel 128 x 128 8 warps: 158, 4):
#   1 x 128 x 128 w8s3: 118 / 254 regs, 98 KB, no spills: two fit an SM (plain epilogue)
#   1 x 128 x 128 w4s4: 215 / 255 regs (+672 B spilled with bias + z), 131 KB
#   1 x  64 x 128 w4s4: 118 / 254 regs, 98 KB: two per SM
#   1 x 128 x 256 w8s3: 195 / 255 regs (+680 B spilled with bias + z), 147 KB
#   8 x 16 x 128 w8s3: 138 / 255 regs, 82 KB: two per SM
#   8 x 8 x 128 w4s4: 142 / 254 regs, 90 KB: two per SM
#   2 x 8 x 8 x 128 w4s4: 246 / 255 regs (+976 B spilled with bias + z), 115 KB
# Two programs an SM (SK=2) also hide one program's tile ends (pipeline drain and
# refill, the piece store) behind the other's k loop; a config whose registers do not
# let two co-reside (the fused epilogue's 254) still computes right, in two rounds.
SK_FLAT = [_sk(_cfg(1, 128, 128, 64, 8, 3)), _sk(_cfg(1, 128, 128, 64, 8, 3), 2),
           _sk(_cfg(1, 128, 128, 64, 4, 4)), _sk(_cfg(1, 64, 128, 64, 4, 4), 2),
           # 128 x 256: 1x1 layers with many output channels (res5_1x1c, 2048: 200 tiles
           # instead of 400 at batch 64, 1.5 waves)
           _sk(_cfg(1, 128, 256, 64, 8, 3))]
SK_TILE = [_sk(_cfg(8, 16, 128, 64, 8, 3), 2), _sk(_cfg(8, 8, 128, 64, 4, 4), 2)]
# 7x7 outputs: two images a box (98 of 128 rows real, whatever the split)
SK_SMALL = [_sk(dict(_cfg(8, 8, 128, 64, 4, 4), NB=2))]
# Timed by the sweep, not offered: two images x 8x8 x 256 at 8 warps (64 tiles for 512
# channels at batch 64: half a wave data-parallel) gave wrong results in the one-loop
# kernel of session 6 on the H200 (max relative error 6.6e-2 forward, 3.4e-1 backward
# data on res5_3x3, 14:31 UTC, Triton 3.6); the tuner's cross-check would reject it.
SK_TRIAL = [_sk(dict(_cfg(8, 8, 256, 64, 8, 3), NB=2))]
INTERPRETER_SK_FLAT = _sk(conv_tma.INTERPRETER_FLAT)
INTERPRETER_SK_TILE = _sk(conv_tma.INTERPRETER_TILE)


def _single(plan):
    """The one plan of ``plan`` (a 1-tuple of backward data), or None."""
    if isinstance(plan, tuple):
        return plan[0] if len(plan) == 1 else None
    return plan


def _tiles(n, oh, ow, c_out, cfg) -> int:
    return cdiv(n, cfg.get("NB", 1)) * cdiv(oh, cfg["BH"]) * cdiv(ow, cfg["BW"]) * cdiv(c_out, cfg["BLOCK_N"])


def worth_it(tiles, iters, programs) -> bool:
    """Stream-K pays where the tiles under-fill their last wave: fewer than MAX_WAVES
    waves of programs, the last one under FILL_BELOW full, and tiles long enough to split."""
    if tiles == 0 or iters < MIN_ITERS or tiles >= MAX_WAVES * programs:
        return False
    waves = cdiv(tiles, programs)
    return tiles / (waves * programs) < FILL_BELOW


def dp_options(tiles, programs) -> list:
    """DP waves to offer: within one wave all tiles streamed (0); between one and two
    waves also the hybrid with one whole wave data-parallel (1); beyond, the hybrid that
    streams the last one to two waves' worth (waves - 2), so every program still gets
    a tile or more of streamed work and few tiles are cut into tiny pieces."""
    waves = cdiv(tiles, programs)
    return [0] if waves <= 1 else [0, 1] if waves == 2 else [waves - 2]


def _shape(plan):
    return plan.n, plan.oh, plan.ow, plan.c_out


def _iters(plan, cfg, itemsize) -> int:
    return plan.taps.taps * (plan.c_red // conv_tma._block_k(plan, cfg, itemsize))


def candidates(plan, device, problem, part) -> list:
    """Stream-K configs for a plan (appended after conv_tma's by the callers) where
    worth_it, with the DP waves of dp_options; none without a partial buffer ``part``."""
    single = _single(plan)
    if not OFFERED or single is None or part is None or single.fill != (1, 1) or single.out_offset != 0 \
            or single.c_out <= 16:
        return []
    if device.type != "cuda" or problem is None:
        return []
    if problem.dtype.itemsize != 2 or conv_tma.strict_float32(problem) or problem.flops < MIN_FLOPS:
        return []
    flat = single.n == 1 and single.oh == 1
    base = SK_FLAT if flat else SK_TILE
    if not flat and single.oh * single.ow <= conv_tma.SMALL_OUTPUT and single.n > 1:
        base = base + SK_SMALL
    sms = sm_count(device)
    out = []
    for cfg in base:
        if cfg["BLOCK_N"] > max(64, triton.next_power_of_2(single.c_out)):
            continue
        programs = min(sms * cfg["SK"], part.numel() // (2 * _piece(cfg)))
        tiles = _tiles(*_shape(single), cfg)
        if not worth_it(tiles, _iters(single, cfg, 2), programs):
            continue
        out += [dict(cfg, DP=dp) for dp in dp_options(tiles, programs)]
    return out


def forced(plan):
    """FORCE's config for a single plan (flat or tile boxes filled in), or None."""
    single = _single(plan)
    if FORCE is None or single is None or single.fill != (1, 1) or single.out_offset != 0:
        return None
    return forced_cfg(single.n == 1 and single.oh == 1)


def forced_cfg(flat):
    return dict(INTERPRETER_SK_FLAT if flat else INTERPRETER_SK_TILE, **FORCE)


def interpreter_config(plan):
    """The interpreter's stream-K config for a single plan (flat or tile boxes)."""
    single = _single(plan)
    return dict(INTERPRETER_SK_FLAT if single.n == 1 and single.oh == 1 else INTERPRETER_SK_TILE)


def _piece(cfg) -> int:
    return cfg.get("NB", 1) * cfg["BH"] * cfg["BW"] * cfg["BLOCK_N"]


def _problem_shape(problem, direction):
    """(flat, n, oh, ow, c_red, c_out, taps) of the plan the problem would get, from the
    descriptors alone (the workspace is sized before tensors exist), or None where the
    TMA path or stream-K cannot apply."""
    geo = geometry(problem)
    if problem.nd != 2 or problem.groups != 1:
        return None
    (r, s), (ph, pw), (sh, sw) = geo.ker[1:], geo.pad[1:], geo.stride[1:]
    one = (r, s, ph, pw) == (1, 1, 0, 0)
    item = problem.dtype.itemsize
    if direction == "fwd":
        if problem.x.strides[1] != 1 or conv_tma.block_k_for(geo.c, item) is None:
            return None
        h, w = geo.inp[1:]
        if (sh, sw) != (1, 1) and not one and (h % sh or w % sw):
            return None
        flat = one and (sh, sw) == (1, 1)
        return flat, geo.n, geo.out[1], geo.out[2], geo.c, geo.k, r * s
    if (sh, sw) != (1, 1) or problem.y.strides[1] != 1 or conv_tma.block_k_for(geo.k, item) is None:
        return None
    return one, geo.n, geo.inp[1], geo.inp[2], geo.k, geo.c, r * s


def workspace_buffers(problem, direction) -> list:
    """The partial-piece buffer where stream-K would be offered for the problem on an
    H200-sized GPU (WORKSPACE_SMS), else none: 16-bit data, tensor-core math, a
    channels-last layout the TMA path takes, enough work, an under-filled last wave for
    one of the configs. Two pieces (tiles of float32) per program of the largest
    offered config."""
    shape = _problem_shape(problem, direction)
    if shape is None:
        return []
    flat, n, oh, ow, c_red, c_out, taps = shape
    if FORCE is not None:  # tests: the interpreter's small tiles, a few programs
        return [Buffer("sk_part", (2 * max(8, FORCE.get("PROGRAMS", 8)) * _piece(forced_cfg(flat)),), np.float32)]
    if not OFFERED or problem.dtype.itemsize != 2 or conv_tma.strict_float32(problem) or problem.flops < MIN_FLOPS:
        return []
    if c_out <= 16:
        return []
    if flat:
        n, oh, ow = 1, 1, n * oh * ow
    base = SK_FLAT if flat else SK_TILE + (SK_SMALL if oh * ow <= conv_tma.SMALL_OUTPUT and n > 1 else [])
    iters = taps * (c_red // min(64, conv_tma.block_k_for(c_red, 2)))
    sizes = [WORKSPACE_SMS * c["SK"] * _piece(c) for c in base
             if c["BLOCK_N"] <= max(64, triton.next_power_of_2(c_out))
             and worth_it(_tiles(n, oh, ow, c_out, c), iters, WORKSPACE_SMS * c["SK"])]
    return [Buffer("sk_part", (2 * max(sizes),), np.float32)] if sizes else []


# -- launches ------------------------------------------------------------------------
class _Recipe:
    """The fixed parts of a stream-K launch for one (plan, config, problem) and epilogue
    kind: views, programs, DP tiles, constexprs and integer arguments; also the static
    key of common.launch."""
    __slots__ = ("x_view", "w_view", "programs", "finish_grid", "dp_tiles", "consts", "fconsts", "options",
                 "middle", "fmiddle")

    def __init__(self, plan, problem, inp, w, out, z, part, cfg, kmajor, act, has_bias, has_z, beta_zero):
        bk = conv_tma._block_k(plan, cfg, inp.element_size())
        bh, bw, bn, nb = cfg["BH"], cfg["BW"], cfg["BLOCK_N"], cfg.get("NB", 1)
        self.x_view = (inp.dtype, tuple(plan.in_shape), tuple(plan.in_strides), (nb, bh, 1, bw, bk))
        ks, ts = conv_tma._filter_view(w)
        r, s = w.shape[2], w.shape[3]
        self.w_view = (w.dtype, (w.shape[0], r * s, w.shape[1]), (ks, ts, 1), (bk, 1, bn) if kmajor else (bn, 1, bk))
        tiles = _tiles(*_shape(plan), cfg)
        ipt = plan.taps.taps * (plan.c_red // bk)
        programs = cfg.get("PROGRAMS") or sm_count(out.device) * cfg["SK"]
        programs = max(1, min(programs, part.numel() // (2 * _piece(cfg))))
        dp_tiles = min(cfg.get("DP", 0) * programs, tiles)
        programs = max(1, min(programs, max((tiles - dp_tiles) * ipt, dp_tiles)))  # no empty ranges
        assert (programs + 1) * max(tiles * ipt, 1) < 2 ** 31, "range_start's product must fit in int32"
        self.programs, self.dp_tiles = programs, dp_tiles
        finish_n = min(bn, 64) if out.device.type == "cuda" else bn
        self.finish_grid = (tiles - dp_tiles, bn // finish_n) if split_tiles(tiles - dp_tiles, ipt, programs) else None
        common = dict(BH=bh, BW=bw, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, ACT=act, HAS_BIAS=has_bias, HAS_Z=has_z,
                      BETA_ZERO=beta_zero, INT64=needs_int64(out, z), NB=nb, NUM_PROGRAMS=programs)
        self.consts = dict(common, W_KMAJOR=kmajor, PREC=input_precision(problem))
        self.fconsts = dict(common, FINISH_N=finish_n)
        self.options = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        tail = (plan.out_offset, *plan.out_strides, *plan.z_strides)
        self.middle = (plan.n, plan.oh, plan.ow, plan.c_red, plan.c_out, *plan.taps.args, *plan.taps.filter_args,
                       *tail)
        self.fmiddle = (plan.n, plan.oh, plan.ow, plan.c_red, plan.c_out, plan.taps.taps, *tail)


def split_tiles(tiles, ipt, programs) -> int:
    """How many of ``tiles`` stream-K tiles of ``ipt`` iterations more than one of
    ``programs`` ranges covers (range_owner on the host)."""
    total = tiles * ipt
    owner = lambda g: ((g + 1) * programs - 1) // total
    return sum(owner(t * ipt) != owner(t * ipt + ipt - 1) for t in range(tiles))


_recipes = IdentityMemo()


def launch_streamk(plan, problem, inp, w, out, alpha, beta, cfg, part, kmajor=False, spec=None, finish=True):
    """out = epilogue(conv(inp, w)) by stream-K: conv_tma_streamk_kernel, then
    streamk_finish_kernel for the split tiles. ``part``: a float32 buffer of at least
    2 * programs * tile elements (the workspace's sk_part); ``plan``: a single plan (or
    a 1-tuple, backward data at stride 1) without FILL."""
    plan = _single(plan)
    assert plan is not None and plan.fill == (1, 1) and plan.out_offset == 0, "stream-K takes single plans"
    bias, bias_stride, z, _, alpha2, coef, swish_beta, act, has_bias, has_z = launch_args(spec, out, 2)
    beta_zero = beta == 0
    extra = (kmajor, act, has_bias, has_z, beta_zero, bias_stride, inp.dtype, w.dtype, out.dtype, bias.dtype,
             z.dtype, part.numel())
    recipe = _recipes.get((plan, cfg, problem), extra, lambda: _Recipe(
        plan, problem, inp, w, out, z if has_z else None, part, cfg, kmajor, act, has_bias, has_z, beta_zero))
    scalars = (bias_stride, float(alpha), float(beta), alpha2, coef, swish_beta, recipe.dp_tiles)
    args = (out, bias, z, part, conv_tma.descriptor_of(inp, recipe.x_view), conv_tma.descriptor_of(w, recipe.w_view),
            *recipe.middle, *scalars)
    launch(conv_tma_streamk_kernel, (recipe.programs,), args, recipe.consts, recipe.options, (recipe, 4))
    if recipe.finish_grid is not None and finish:  # finish=False: the sweep times the main kernel alone
        launch(streamk_finish_kernel, recipe.finish_grid, (out, bias, z, part, *recipe.fmiddle, *scalars),
               recipe.fconsts, dict(num_warps=4 if out.device.type == "cuda" else 1), (recipe, 4))


def launch_any(plan, problem, inp, w, out, alpha, beta, cfg, part, kmajor=False, spec=None):
    """A tuner candidate's launch: stream-K configs (SK) here, the rest by conv_tma."""
    if cfg.get("SK"):
        launch_streamk(plan, problem, inp, w, out, alpha, beta, cfg, part, kmajor=kmajor, spec=spec)
    else:
        conv_tma.launch_conv(plan, problem, inp, w, out, alpha, beta, cfg, kmajor=kmajor, spec=spec)


def with_streamk(base, plan, device, problem, part) -> list:
    """conv_tma's candidates ``base`` followed by the stream-K ones (FORCE: its config
    first, so the interpreter runs it)."""
    f = forced(plan) if part is not None else None
    if f is not None:
        return [f] + list(base)
    return list(base) + candidates(plan, device, problem, part)
