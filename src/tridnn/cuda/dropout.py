"""Dropout forward and backward in Triton with a counter-based RNG.

Element i (its logical row-major index) sits at stream position q = offset + i; it is
kept iff word q % 4 of Philox-4x32-10 with key = seed and counter = (q // 4 as lo, hi
words, 0, 0), read as int32 and folded with -v - 1 when negative, is >= ceil(p * 2**31)
(tridnn.cpu.dropout draws the same mask). The forward writes one byte per element
(1 = kept) to the reserve space, in logical order; the backward only reads it.

Three kernels, one mask:
- ``_dropout_flat_kernel``: every tensor one dense run in logical order (NCHW): a
  program takes BLOCK_G groups of 4 consecutive elements, one Philox call per group
  (FLAT_KERNEL "vec8": ``_dropout_vec8_kernel``, a thread holds 8 elements and their two
  calls, for 16-byte vectors);
- the tile kernels: the last logical dim W is a multiple of 4 but memory order differs
  (NHWC): a program takes one outer position (n, h, ...) and a tile of the
  innermost-in-memory dim (c) and W, with one Philox call per (c, 4 W values). Which
  kernel is NHWC_DRAW's choice: ``_dropout_split_kernel`` ("split") keeps the four
  words of a call as four [groups, c] tiles, each applied to the data of its W phase
  and stored as one 4-byte mask word, so nothing changes layout but that word;
  ``_dropout_join_kernel`` ("join") interleaves the words into one [W, c] tile (join,
  permute, reshape); ``_dropout_tile_kernel`` ("reload") stores the mask bytes along W
  and reads them back along c (a round trip through L1);
- ``_dropout_element_kernel``: anything else (an offset not a multiple of 4, W not a
  multiple of 4, more dims than merge): one Philox call per element, same mask.
The backward reuses the flat and tile kernels without the RNG."""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.language.random import philox

from ..errors import BadParamError
from .common import cdiv, wide
from .layer_utils import coalesce, compute_dtype, first_index, unravel4

BLOCK = 1024      # elements per program
TILE_W = 32       # W values per tile-kernel program (32 mask bytes: one sector)
# elements per tile-kernel program: 4096 (128 channels, 256-byte data runs, 8 warps)
# measured 1.84 TB/s forward and 3.58 backward on the H200 (NHWC bf16), against 1.72 and
# 2.87 with 1024 (32 channels, 64-byte runs)
TILE_ELEMENTS = 4096
# the NHWC tile kernel per direction (or one name for both): "split", "join" or "reload"
# (the module docstring says what each does; the benchmark times all three). The reload
# tile measured 1.84 TB/s forward (PyTorch 2.74; NCHW's flat kernel 3.17) and 3.58
# backward on the H200. Compiled for sm_90, split and join move the same vectors as
# reload (16-byte data runs) without its mask store/barrier/reload in the forward.
NHWC_DRAW = {"forward": "split", "backward": "reload"}
# the tile kernels' W: the last logical dim merged with the dims before it where every
# tensor steps over them as one run (NHWC: H and W, so a 56 x 56 plane is 784 groups of 4,
# tiled by 8 without the 14 = 8 + 6 ragged second tile of W = 56 alone, which left an
# eighth of the Philox lanes idle). The mask is the same (logical index = row + w either
# way); False keeps W alone (the benchmark times both).
MERGE_W = True
# the split kernel's warps: its elements per thread (32: 4 warps for 4096; compiled for
# sm_90, 80 registers and 40 SASS instructions per element; 16: 8 warps, 48 registers)
SPLIT_THREAD_ELEMENTS = 32
# the split forward's keep bits for the data: False uses the four folded words directly;
# Triton computes Philox in a one-value-per-thread layout and converts the four [groups, c]
# keep tiles to the data's 16-byte-vector layout through shared memory (sm_90: 32 LDS.U8
# a thread, 9 barriers, 80 registers). True reads them back out of the packed int32 word
# after a max over a joined pair (which Triton does not recompute in the data's layout),
# so one int32 tile is converted instead: 56 registers, 7 barriers, no byte loads, the
# same 40 instructions an element. The mask is the same word either way.
SPLIT_KEEP_FROM_WORD = True  # H200 06:2x UTC, NHWC fwd: 0.91 of torch's time (off: 0.95)
NUM_WARPS = 4
MASK62 = (1 << 62) - 1
# the dense (NCHW) kernel (issue 5), the same mask either way: "groups4" is
# _dropout_flat_kernel ([groups, 4] tiles: a thread holds 4 elements of a Philox call,
# 8-byte data vectors, int64 indices); "vec8" is _dropout_vec8_kernel ([BLOCK/8, 8]
# tiles: a thread holds the 8 elements of two consecutive Philox calls, so 16-byte bf16
# vectors and an 8-byte mask store, int32 indices below 2**31 elements). sm_90 compile
# of the bf16 forward: groups4 37 SASS instructions an element (28 registers, 2 x
# LDG.64 a thread); vec8's are in its docstring. VEC8_BLOCK: elements a program.
# H200 2026-11-30 11:40 UTC (sweep_layers_c1.py, NCHW 64x256x56x56 bf16 forward): groups4
# 3.18 TB/s, vec8 2048/4 warps 3.33, with LOAD_FIRST 3.71 (the mask bytes identical).
FLAT_KERNEL = "vec8"
VEC8_BLOCK = 2048
VEC8_WARPS = 4
# the forward's data loads before the Philox calls (vec8 and the NHWC split kernel; the
# other kernels load after). Compiled for sm_90 as written today, every kernel issues its
# first data load after the last Philox multiply (vec8: instruction 385 of 504, split: 860
# of 1144), so a program's load latency follows its ~250-650 instructions of arithmetic
# instead of overlapping them and only other programs keep the memory busy meanwhile.
# True: vec8 (2048 elements, 4 warps) issues both 16-byte loads first (instructions 17
# and 33 of 456, 504 before; 32 registers either way); the split kernel at 32 elements a
# thread still gets its loads sunk by ptxas (711 of 1144, 40 -> 48 registers), at 16 a
# thread (SPLIT_THREAD_ELEMENTS) they go early (184 of 696). The same mask and values.
LOAD_FIRST = True  # H200 11:40 UTC: vec8 3.33 -> 3.71 TB/s; NHWC split 2.99 -> 2.98 (no change)
# Dense channels-last forward (issue 5, session 6): "octets" runs _dropout_octets_kernel
# for src and dst both dense NHWC (4-D, C a multiple of 8, H * W a multiple of 4, offset
# a multiple of 4); None keeps the NHWC_DRAW tile kernel (split). Why the split kernel
# runs at 2.99 TB/s against vec8's 3.70 in NCHW: compiled for sm_90 it executes 37.5 SASS
# instructions an element (vec8: 28.5), and both kernels sit at ~2.6 warp instructions a
# cycle an SM (vec8 3.70 TB/s x 28.5 ~ split 2.99 x 37.5: issue bound). Its Philox rounds run
# on a [groups, channels] tile in Triton's default one-value-a-thread layout, so the keep
# bits cross to the data's 16-byte-vector layout and the mask words to the store's layout
# through shared memory (7 barriers, shuffles); its index math is general (three outer
# strides, int64 rows). The octets kernel gives each thread whole rows (one pixel group x 8
# channels: four 16-byte vectors, one per pixel of the group) and runs the 8 Philox calls
# of a row on 1-D [rows] tensors, whose layout is the data tile's row layout: no layout
# change at all, the 8 mask words stored straight from the registers. Lanes take 8 octets
# (128 bytes of a pixel) x 4 groups, so a warp's data access is 4 whole 128-byte lines and
# its mask store 8 runs of 16 bytes. Same mask bits (the word of (n, c, group) is
# (n * C + c) * H * W / 4 + group), the same values. sm_90, bf16, 4096 elements a program
# (4 warps): 32.5 SASS instructions an element (split 37.5), 56 registers, no shared memory,
# the four 16-byte loads issued at instructions 63-139 of 1040 (split: 807 of 1200).
# Measured on the H200 (2026-11-30 15:10 UTC, sweep_layers_b2.py, 64x256x56x56 bf16 NHWC
# forward, copy 3.75 TB/s): split 3.01 TB/s, octets 32 octets x 128 rows 2.99, 8 octets
# (64 channels) x 128 rows 3.21, 256 rows 3.16, loads after the draws 2.89.
NHWC_DENSE_KERNEL = "octets"
OCTETS_BLOCK_O = 8     # octets (8 channels) a program: 64 channels, 16 pixel groups at 128 rows
OCTETS_ROWS = 128      # rows (group x octet) a program: 4096 elements; warps = rows / 32 (max 8)
# the octets kernel's warps (None: one row a thread, rows / 32, at most 8). sm_90 bf16,
# 256 rows at 4 warps (two rows a thread): 30.9 instructions an element, 122 registers
OCTETS_WARPS = None
# the octets kernel's data loads: "first" (before the Philox rounds) or "after"
OCTETS_LOADS = "first"
# the octets kernel's keep bits for the data: False holds the 32 keep predicates of a row
# from the fold to the selects (sm_90: 30 P2R packing them, 56 registers, 32.5 instructions
# an element); True reads them back out of the 8 mask words (through an opaque move, so the
# compiler cannot fold them back into the predicates): 31.8 an element, 48 registers, but
# ptxas then issues the loads after the draws (598 of 1016). Needs the GPU (inline PTX).
OCTETS_KEEP_FROM_WORDS = False


@triton.jit
def _fold(r, threshold):
    """Keep bit of one 32-bit draw: bitcast to int32, fold negatives, compare."""
    v = r.to(tl.int32, bitcast=True)
    v = tl.where(v < 0, -v - 1, v)
    return v >= threshold


@triton.jit
def _fold2(r, threshold):
    """_fold's keep bit in two compares: for v < 0, -v - 1 >= t is v < -t (0 <= t <= 2**31)."""
    v = r.to(tl.int32, bitcast=True)
    return (v >= threshold) | (v < -threshold)


@triton.jit
def _draws(seed, block):
    """The four Philox words of each block counter (an int64 below 2**62)."""
    lo = (block & 0xFFFFFFFF).to(tl.uint32)
    hi = ((block >> 32) & 0xFFFFFFFF).to(tl.uint32)
    zero = tl.zeros(block.shape, tl.uint32)
    return philox(seed, lo, hi, zero, zero)


@triton.jit
def _keep4(seed, block, k, threshold):
    """[G, 4] keep bits: word k of each of the G blocks."""
    r0, r1, r2, r3 = _draws(seed, block)
    r = tl.where(k == 0, r0[:, None], tl.where(k == 1, r1[:, None], tl.where(k == 2, r2[:, None], r3[:, None])))
    return _fold(r, threshold)


@triton.jit
def _apply(src_ptr, dst_ptr, s_off, d_off, keep, in_range, scale, COMPUTE: tl.constexpr):
    src = tl.load(src_ptr + s_off, mask=in_range, other=0.0).to(COMPUTE)
    out = tl.where(keep, src * scale, 0.0)  # dropped elements are exactly zero, even for inf/NaN
    tl.store(dst_ptr + d_off, out.to(dst_ptr.dtype.element_ty), mask=in_range)


@triton.jit
def _dropout_flat_kernel(src_ptr, dst_ptr, mask_ptr, numel, seed, first_block, threshold, scale: tl.float64,
                         FORWARD: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_G: tl.constexpr):
    """Dense tensors in logical order: groups of 4 elements, one Philox block each
    (stream position offset + i with offset % 4 == 0, so group g is block
    first_block + g)."""
    scale = tl.full([], scale, COMPUTE)  # (a float64 argument: float64 data keeps 1 / (1 - p) unrounded)
    g = tl.program_id(0).to(tl.int64) * BLOCK_G + tl.arange(0, BLOCK_G)
    k = tl.arange(0, 4)[None, :]
    i = g[:, None] * 4 + k
    in_range = i < numel
    if FORWARD:
        keep = _keep4(seed, (first_block + g) & 0x3FFFFFFFFFFFFFFF, k, threshold)
        tl.store(mask_ptr + i, keep.to(tl.uint8), mask=in_range)
    else:
        keep = tl.load(mask_ptr + i, mask=in_range, other=0) != 0
    _apply(src_ptr, dst_ptr, i, i, keep, in_range, scale, COMPUTE)


@triton.jit
def _dropout_vec8_kernel(src_ptr, dst_ptr, mask_ptr, numel, seed, first_block, threshold, scale: tl.float64,
                         FORWARD: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                         BLOCK_V: tl.constexpr, LOAD_FIRST: tl.constexpr = False):
    """Dense tensors in logical order, [BLOCK_V, 8] tiles: row v is elements 8v..8v+7,
    Philox blocks first_block + 2v (its words 0-3 keep elements 8v..8v+3) and
    first_block + 2v + 1 (8v+4..8v+7), the mask of _dropout_flat_kernel. A row's 8
    elements are one thread's (the words' column is known per register, so the word
    selects fold away), loaded and stored as one 16-byte vector for 16-bit data.
    LOAD_FIRST: the data is loaded before the draws (its latency under their arithmetic)."""
    scale = tl.full([], scale, COMPUTE)  # (a float64 argument: float64 data keeps 1 / (1 - p) unrounded)
    # map the program to BLOCK_V rows of 8 elements
    v = first_index(BLOCK_V, BIG) + tl.arange(0, BLOCK_V)
    j = tl.arange(0, 8)[None, :]
    i = v[:, None] * 8 + j
    in_range = i < numel
    if LOAD_FIRST:
        src = tl.load(src_ptr + i, mask=in_range, other=0.0)
    # the keep bits: two Philox calls a row
    if FORWARD:
        block = first_block + 2 * v.to(tl.int64)
        a0, a1, a2, a3 = _draws(seed, block & 0x3FFFFFFFFFFFFFFF)
        b0, b1, b2, b3 = _draws(seed, (block + 1) & 0x3FFFFFFFFFFFFFFF)
        r = tl.where(j == 0, a0[:, None], tl.where(j == 1, a1[:, None], tl.where(j == 2, a2[:, None], tl.where(
            j == 3, a3[:, None], tl.where(j == 4, b0[:, None], tl.where(j == 5, b1[:, None], tl.where(
                j == 6, b2[:, None], b3[:, None])))))))
        keep = _fold2(r, threshold)
        tl.store(mask_ptr + i, keep.to(tl.uint8), mask=in_range)
    else:
        keep = tl.load(mask_ptr + i, mask=in_range, other=0) != 0
    # the data
    if LOAD_FIRST:  # dropped elements are exactly zero, even for inf/NaN
        out = tl.where(keep, src.to(COMPUTE) * scale, 0.0)
        tl.store(dst_ptr + i, out.to(dst_ptr.dtype.element_ty), mask=in_range)
    else:
        _apply(src_ptr, dst_ptr, i, i, keep, in_range, scale, COMPUTE)


@triton.jit
def _octet_row_words(seed, word, threshold):
    """The mask word (4 keep bytes, little-endian: byte k keeps pixel phase k) of the
    Philox call at counter word (int64), and its four keep bits."""
    r0, r1, r2, r3 = _draws(seed, word & 0x3FFFFFFFFFFFFFFF)
    k0 = _fold2(r0, threshold)
    k1 = _fold2(r1, threshold)
    k2 = _fold2(r2, threshold)
    k3 = _fold2(r3, threshold)
    bits = k0.to(tl.int32) | (k1.to(tl.int32) << 8) | (k2.to(tl.int32) << 16) | (k3.to(tl.int32) << 24)
    return bits, k0, k1, k2, k3


@triton.jit
def _opaque(v):
    """v through a register move the compiler cannot see through (so that bits read back
    out of a word are not folded back into the predicates the word was built from)."""
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [v], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _pick8(j, v0, v1, v2, v3, v4, v5, v6, v7):
    """[rows, 8] tile whose column j is v_j (a per-register choice: the selects fold away)."""
    return tl.where(j == 0, v0[:, None], tl.where(j == 1, v1[:, None], tl.where(j == 2, v2[:, None], tl.where(
        j == 3, v3[:, None], tl.where(j == 4, v4[:, None], tl.where(j == 5, v5[:, None], tl.where(
            j == 6, v6[:, None], v7[:, None])))))))


@triton.jit
def _octets_phase(src_ptr, dst_ptr, off, m, keep, scale, COMPUTE: tl.constexpr, x):
    out = tl.where(keep, x.to(COMPUTE) * scale, 0.0)  # dropped elements are exactly zero, even for inf/NaN
    tl.store(dst_ptr + off, out.to(dst_ptr.dtype.element_ty), mask=m)


@triton.jit
def _dropout_octets_kernel(src_ptr, dst_ptr, mask_ptr, C, HW4, groups, OCT, seed, first_block, threshold,
                           scale: tl.float64, COMPUTE: tl.constexpr, BIG: tl.constexpr,
                           BLOCK_O: tl.constexpr, BLOCK_Q: tl.constexpr, LOADS_FIRST: tl.constexpr,
                           KEEP_FROM_WORDS: tl.constexpr = False):
    """Forward of dense NHWC data (pixel p, channel c at p * C + c; C % 8 == 0, H * W %
    4 == 0). Row (q, o) is pixel group q (pixels 4q..4q+3, one image) x octet o (channels
    8o..8o+7): a thread holds one row, as four 16-byte vectors (pixel phase k: [rows, 8]
    tile k). Philox call (q, 8o + j) - counter first_block + (n * C + c) * HW4 + q % HW4,
    n = q // HW4: the NCHW mask's - keeps phase k of channel 8o + j by its word k; its
    keep bytes are one int32 mask word (the reserve 4-byte aligned). A program takes
    BLOCK_Q groups x BLOCK_O octets; within it lanes run over 8 octets, then 4 groups,
    then the rest (octets, then groups)."""
    scale = tl.full([], scale, COMPUTE)  # (a float64 argument: float64 data keeps 1 / (1 - p) unrounded)
    # map the program to (group block, octet block), octet blocks fastest
    pid = tl.program_id(0)
    if BIG:
        pid = pid.to(tl.int64)
    tiles_o = tl.cdiv(OCT, BLOCK_O)
    q_blk = pid // tiles_o
    o_blk = pid % tiles_o
    # the program's rows: lanes over O_LO octets x Q_LO groups, then the rest
    O_LO: tl.constexpr = 8 if BLOCK_O >= 8 else BLOCK_O
    Q_LO: tl.constexpr = (32 // O_LO) if BLOCK_Q >= 32 // O_LO else BLOCK_Q
    O_HI: tl.constexpr = BLOCK_O // O_LO
    rho = tl.arange(0, BLOCK_O * BLOCK_Q)
    o = o_blk * BLOCK_O + (rho // (O_LO * Q_LO)) % O_HI * O_LO + rho % O_LO
    q = q_blk * BLOCK_Q + (rho // (O_LO * Q_LO * O_HI)) * Q_LO + (rho // O_LO) % Q_LO
    row_ok = (q < groups) & (o < OCT)
    j = tl.arange(0, 8)[None, :]
    m = row_ok[:, None]
    # the data: phase k of row (q, o) at (4q + k) * C + 8o + j
    off = (q * 4 * C + o * 8)[:, None] + j
    if LOADS_FIRST:  # all four loads before any store (src and dst may be one tensor)
        x0 = tl.load(src_ptr + off, mask=m, other=0.0)
        x1 = tl.load(src_ptr + off + C, mask=m, other=0.0)
        x2 = tl.load(src_ptr + off + 2 * C, mask=m, other=0.0)
        x3 = tl.load(src_ptr + off + 3 * C, mask=m, other=0.0)
    # the mask word of (q, 8o + j): (n * C + 8o + j) * HW4 + q % HW4
    n = q // HW4
    w_row = (n * C + o * 8) * HW4 + (q - n * HW4)
    base = first_block + w_row.to(tl.int64)
    b0, k00, k01, k02, k03 = _octet_row_words(seed, base, threshold)
    b1, k10, k11, k12, k13 = _octet_row_words(seed, base + HW4, threshold)
    b2, k20, k21, k22, k23 = _octet_row_words(seed, base + 2 * HW4, threshold)
    b3, k30, k31, k32, k33 = _octet_row_words(seed, base + 3 * HW4, threshold)
    b4, k40, k41, k42, k43 = _octet_row_words(seed, base + 4 * HW4, threshold)
    b5, k50, k51, k52, k53 = _octet_row_words(seed, base + 5 * HW4, threshold)
    b6, k60, k61, k62, k63 = _octet_row_words(seed, base + 6 * HW4, threshold)
    b7, k70, k71, k72, k73 = _octet_row_words(seed, base + 7 * HW4, threshold)
    # the mask words (mask_ptr: the reserve seen as int32), one a call
    tl.store(mask_ptr + w_row, b0, mask=row_ok)
    tl.store(mask_ptr + w_row + HW4, b1, mask=row_ok)
    tl.store(mask_ptr + w_row + 2 * HW4, b2, mask=row_ok)
    tl.store(mask_ptr + w_row + 3 * HW4, b3, mask=row_ok)
    tl.store(mask_ptr + w_row + 4 * HW4, b4, mask=row_ok)
    tl.store(mask_ptr + w_row + 5 * HW4, b5, mask=row_ok)
    tl.store(mask_ptr + w_row + 6 * HW4, b6, mask=row_ok)
    tl.store(mask_ptr + w_row + 7 * HW4, b7, mask=row_ok)
    if not LOADS_FIRST:
        x0 = tl.load(src_ptr + off, mask=m, other=0.0)
        x1 = tl.load(src_ptr + off + C, mask=m, other=0.0)
        x2 = tl.load(src_ptr + off + 2 * C, mask=m, other=0.0)
        x3 = tl.load(src_ptr + off + 3 * C, mask=m, other=0.0)
    # the data, phase by phase: column j keeps by call j's word k
    if KEEP_FROM_WORDS:  # read back out of the 8 words (see OCTETS_KEEP_FROM_WORDS)
        b0, b1, b2, b3 = _opaque(b0), _opaque(b1), _opaque(b2), _opaque(b3)
        b4, b5, b6, b7 = _opaque(b4), _opaque(b5), _opaque(b6), _opaque(b7)
        k00, k10, k20, k30 = (b0 & 1) != 0, (b1 & 1) != 0, (b2 & 1) != 0, (b3 & 1) != 0
        k40, k50, k60, k70 = (b4 & 1) != 0, (b5 & 1) != 0, (b6 & 1) != 0, (b7 & 1) != 0
        k01, k11, k21, k31 = (b0 & 0x100) != 0, (b1 & 0x100) != 0, (b2 & 0x100) != 0, (b3 & 0x100) != 0
        k41, k51, k61, k71 = (b4 & 0x100) != 0, (b5 & 0x100) != 0, (b6 & 0x100) != 0, (b7 & 0x100) != 0
        k02, k12, k22, k32 = (b0 & 0x10000) != 0, (b1 & 0x10000) != 0, (b2 & 0x10000) != 0, (b3 & 0x10000) != 0
        k42, k52, k62, k72 = (b4 & 0x10000) != 0, (b5 & 0x10000) != 0, (b6 & 0x10000) != 0, (b7 & 0x10000) != 0
        k03, k13, k23, k33 = (b0 & 0x1000000) != 0, (b1 & 0x1000000) != 0, (b2 & 0x1000000) != 0, (b3 & 0x1000000) != 0
        k43, k53, k63, k73 = (b4 & 0x1000000) != 0, (b5 & 0x1000000) != 0, (b6 & 0x1000000) != 0, (b7 & 0x1000000) != 0
    _octets_phase(src_ptr, dst_ptr, off, m, _pick8(j, k00, k10, k20, k30, k40, k50, k60, k70), scale, COMPUTE, x0)
    _octets_phase(src_ptr, dst_ptr, off + C, m, _pick8(j, k01, k11, k21, k31, k41, k51, k61, k71), scale, COMPUTE,
                  x1)
    _octets_phase(src_ptr, dst_ptr, off + 2 * C, m, _pick8(j, k02, k12, k22, k32, k42, k52, k62, k72), scale,
                  COMPUTE, x2)
    _octets_phase(src_ptr, dst_ptr, off + 3 * C, m, _pick8(j, k03, k13, k23, k33, k43, k53, k63, k73), scale,
                  COMPUTE, x3)


@triton.jit
def _tile_position(I, W_UNITS, O1, O2, BIG: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_U: tl.constexpr):
    """This program's (outer position o0, o1, o2; inner values; block of W units): W
    blocks vary fastest, then inner blocks, then the outer position. A unit is one W
    value (the mask-reload kernel) or one group of 4 (the split and join kernels)."""
    pid = tl.program_id(0)
    tiles_u = tl.cdiv(W_UNITS, BLOCK_U)
    tiles_i = tl.cdiv(I, BLOCK_I)
    u_blk = pid % tiles_u
    rest = pid // tiles_u
    i_blk = rest % tiles_i
    o = rest // tiles_i
    if BIG:
        o = o.to(tl.int64)
    o2 = o % O2
    o = o // O2
    o1 = o % O1
    o0 = o // O1
    inner = i_blk * BLOCK_I + tl.arange(0, BLOCK_I)
    return o0, o1, o2, inner, u_blk


@triton.jit
def _dropout_tile_kernel(src_ptr, dst_ptr, mask_ptr, I, W4, O1, O2, seed, first_block, threshold, scale: tl.float64,
                         # strides: outer dims (O0, O1, O2), the inner dim and W, per tensor
                         so0, so1, so2, si, sw, do0, do1, do2, di, dw, lo0, lo1, lo2, li,
                         FORWARD: tl.constexpr, COMPUTE: tl.constexpr, BIG: tl.constexpr,
                         BLOCK_I: tl.constexpr, BLOCK_W: tl.constexpr):
    """One outer position x [BLOCK_I inner values, BLOCK_W values along W]: the data
    runs along the inner dim, the mask (logical order) along W. The forward draws the
    mask in the mask's layout (one Philox call per 4 W values), stores it, and reads it
    back in the data's layout, so no thread repeats a draw for the other layout."""
    scale = tl.full([], scale, COMPUTE)  # (a float64 argument: float64 data keeps 1 / (1 - p) unrounded)
    # map the program to (outer position, inner block, W block)
    W = W4 * 4  # so Triton sees that the mask's runs of 4 bytes are never cut by W
    o0, o1, o2, inner, w_blk = _tile_position(I, W, O1, O2, BIG, BLOCK_I, BLOCK_W)
    if BIG:  # every offset term in int64 (common.wide): inner * si or w * sw alone can pass 2^31
        si, sw, di, dw = wide((si, sw, di, dw))
    w = w_blk * BLOCK_W + tl.arange(0, BLOCK_W)
    in_range = (inner < I)[:, None] & (w < W)[None, :]
    # the mask: logical index of (inner, w) is l_row[inner] + w, l_row a multiple of 4
    l_row = tl.multiple_of((o0 * lo0 + o1 * lo1 + o2 * lo2) + inner.to(tl.int64) * li, 4)
    l_off = l_row[:, None] + w[None, :]
    if FORWARD:
        group = w_blk * (BLOCK_W // 4) + tl.arange(0, BLOCK_W // 4)
        r0, r1, r2, r3 = _draws(seed, (first_block + (l_row >> 2)[:, None] + group[None, :]) & 0x3FFFFFFFFFFFFFFF)
        words = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), [BLOCK_I, BLOCK_W])
        tl.store(mask_ptr + l_off, _fold(words, threshold).to(tl.uint8), mask=in_range)
        tl.debug_barrier()  # the reload below reads bytes other threads of the program wrote
    keep = tl.load(mask_ptr + l_off, mask=in_range, other=0) != 0
    # the data
    s_off = (o0 * so0 + o1 * so1 + o2 * so2) + inner[:, None] * si + w[None, :] * sw
    d_off = (o0 * do0 + o1 * do1 + o2 * do2) + inner[:, None] * di + w[None, :] * dw
    _apply(src_ptr, dst_ptr, s_off, d_off, keep, in_range, scale, COMPUTE)


@triton.jit
def _dropout_split_kernel(src_ptr, dst_ptr, mask_ptr, I, W4, O1, O2, seed, first_block, threshold, scale: tl.float64,
                          # strides: outer dims (O0, O1, O2), the inner dim and W, per tensor
                          so0, so1, so2, si, sw, do0, do1, do2, di, dw, lo0, lo1, lo2, li,
                          FORWARD: tl.constexpr, PACKED: tl.constexpr, COMPUTE: tl.constexpr,
                          BIG: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_G: tl.constexpr,
                          KEEP_FROM_WORD: tl.constexpr = False, LOAD_FIRST: tl.constexpr = False):
    """One outer position x [BLOCK_G groups of 4 W values, BLOCK_I inner values], all
    tiles [groups, inner] (inner fastest, as the data lies). Philox call (g, i) covers W
    positions 4g..4g+3 of inner value i: its word k keeps the element of W phase k,
    loaded as a tile of its own, and the four keep bits are the mask's 4 bytes of the
    group, stored as one int32 (PACKED: mask_ptr is the reserve seen as int32; else
    four byte stores). LOAD_FIRST: the four data tiles are loaded before the draws."""
    scale = tl.full([], scale, COMPUTE)  # (a float64 argument: float64 data keeps 1 / (1 - p) unrounded)
    # map the program to (outer position, inner block, group block)
    o0, o1, o2, inner, g_blk = _tile_position(I, W4, O1, O2, BIG, BLOCK_I, BLOCK_G)
    if BIG:  # every offset term in int64 (common.wide): inner * si or w * sw alone can pass 2^31
        si, sw, di, dw = wide((si, sw, di, dw))
    g = g_blk * BLOCK_G + tl.arange(0, BLOCK_G)
    in_range = (g < W4)[:, None] & (inner < I)[None, :]
    # mask word of (g, inner): the logical index of (inner, 4g) over 4 (l_row a multiple of 4)
    l_row = (o0 * lo0 + o1 * lo1 + o2 * lo2) + inner.to(tl.int64) * li
    group = (l_row >> 2)[None, :] + g[:, None]
    # the data of W phase 0; phase k is k W strides further
    s_off = (o0 * so0 + o1 * so1 + o2 * so2) + inner[None, :] * si + (g * 4)[:, None] * sw
    d_off = (o0 * do0 + o1 * do1 + o2 * do2) + inner[None, :] * di + (g * 4)[:, None] * dw
    if LOAD_FIRST:  # all four loads before any store (src and dst may be one tensor)
        x0 = tl.load(src_ptr + s_off, mask=in_range, other=0.0)
        x1 = tl.load(src_ptr + s_off + sw, mask=in_range, other=0.0)
        x2 = tl.load(src_ptr + s_off + 2 * sw, mask=in_range, other=0.0)
        x3 = tl.load(src_ptr + s_off + 3 * sw, mask=in_range, other=0.0)
    # the keep bits
    if FORWARD:
        r0, r1, r2, r3 = _draws(seed, (first_block + group) & 0x3FFFFFFFFFFFFFFF)
        k0 = _fold(r0, threshold)
        k1 = _fold(r1, threshold)
        k2 = _fold(r2, threshold)
        k3 = _fold(r3, threshold)
        if PACKED:  # little-endian: byte k of the word is W phase k
            bits = k0.to(tl.int32) | (k1.to(tl.int32) << 8) | (k2.to(tl.int32) << 16) | (k3.to(tl.int32) << 24)
            tl.store(mask_ptr + group, bits, mask=in_range)
            if KEEP_FROM_WORD:  # the data's keep bits from the word: see SPLIT_KEEP_FROM_WORD
                bits = tl.max(tl.join(bits, bits), axis=2)
                k0 = (bits & 0xFF) != 0
                k1 = ((bits >> 8) & 0xFF) != 0
                k2 = ((bits >> 16) & 0xFF) != 0
                k3 = ((bits >> 24) & 0xFF) != 0
        else:
            tl.store(mask_ptr + group * 4, k0.to(tl.uint8), mask=in_range)
            tl.store(mask_ptr + group * 4 + 1, k1.to(tl.uint8), mask=in_range)
            tl.store(mask_ptr + group * 4 + 2, k2.to(tl.uint8), mask=in_range)
            tl.store(mask_ptr + group * 4 + 3, k3.to(tl.uint8), mask=in_range)
    else:
        if PACKED:
            bits = tl.load(mask_ptr + group, mask=in_range, other=0)
            k0 = (bits & 0xFF) != 0
            k1 = ((bits >> 8) & 0xFF) != 0
            k2 = ((bits >> 16) & 0xFF) != 0
            k3 = ((bits >> 24) & 0xFF) != 0
        else:
            k0 = tl.load(mask_ptr + group * 4, mask=in_range, other=0) != 0
            k1 = tl.load(mask_ptr + group * 4 + 1, mask=in_range, other=0) != 0
            k2 = tl.load(mask_ptr + group * 4 + 2, mask=in_range, other=0) != 0
            k3 = tl.load(mask_ptr + group * 4 + 3, mask=in_range, other=0) != 0
    # all four loads before any store (src and dst may be one tensor), then the stores
    if not LOAD_FIRST:
        x0 = tl.load(src_ptr + s_off, mask=in_range, other=0.0)
        x1 = tl.load(src_ptr + s_off + sw, mask=in_range, other=0.0)
        x2 = tl.load(src_ptr + s_off + 2 * sw, mask=in_range, other=0.0)
        x3 = tl.load(src_ptr + s_off + 3 * sw, mask=in_range, other=0.0)
    x0, x1, x2, x3 = x0.to(COMPUTE), x1.to(COMPUTE), x2.to(COMPUTE), x3.to(COMPUTE)
    out_ty = dst_ptr.dtype.element_ty
    # dropped elements are exactly zero, even for inf/NaN
    tl.store(dst_ptr + d_off, tl.where(k0, x0 * scale, 0.0).to(out_ty), mask=in_range)
    tl.store(dst_ptr + d_off + dw, tl.where(k1, x1 * scale, 0.0).to(out_ty), mask=in_range)
    tl.store(dst_ptr + d_off + 2 * dw, tl.where(k2, x2 * scale, 0.0).to(out_ty), mask=in_range)
    tl.store(dst_ptr + d_off + 3 * dw, tl.where(k3, x3 * scale, 0.0).to(out_ty), mask=in_range)


@triton.jit
def _dropout_join_kernel(src_ptr, dst_ptr, mask_ptr, I, W4, O1, O2, seed, first_block, threshold, scale: tl.float64,
                         # strides: outer dims (O0, O1, O2), the inner dim and W, per tensor
                         so0, so1, so2, si, sw, do0, do1, do2, di, dw, lo0, lo1, lo2, li,
                         FORWARD: tl.constexpr, COMPUTE: tl.constexpr, BIG: tl.constexpr,
                         BLOCK_I: tl.constexpr, BLOCK_G: tl.constexpr):
    """One outer position x [4 * BLOCK_G W values, BLOCK_I inner values] (inner fastest,
    as the data lies): the Philox calls of a [BLOCK_G, BLOCK_I] tile, their four words
    interleaved along W on chip (join, permute, reshape), so the keep bits meet the data
    in its own layout; the mask bytes are stored from there."""
    scale = tl.full([], scale, COMPUTE)  # (a float64 argument: float64 data keeps 1 / (1 - p) unrounded)
    # map the program to (outer position, inner block, W block)
    o0, o1, o2, inner, g_blk = _tile_position(I, W4, O1, O2, BIG, BLOCK_I, BLOCK_G)
    if BIG:  # every offset term in int64 (common.wide): inner * si or w * sw alone can pass 2^31
        si, sw, di, dw = wide((si, sw, di, dw))
    w = g_blk * (4 * BLOCK_G) + tl.arange(0, 4 * BLOCK_G)
    in_range = (w < W4 * 4)[:, None] & (inner < I)[None, :]
    l_row = (o0 * lo0 + o1 * lo1 + o2 * lo2) + inner.to(tl.int64) * li  # a multiple of 4
    l_off = l_row[None, :] + w[:, None]
    if FORWARD:
        g = g_blk * BLOCK_G + tl.arange(0, BLOCK_G)
        r0, r1, r2, r3 = _draws(seed, (first_block + (l_row >> 2)[None, :] + g[:, None]) & 0x3FFFFFFFFFFFFFFF)
        # [G, I, 2, 2] with word 2a + b at [..., a, b]; then [G, 4, I] -> [4G, I]: row 4g + k
        words = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), [BLOCK_G, BLOCK_I, 4])
        words = tl.reshape(tl.permute(words, (0, 2, 1)), [4 * BLOCK_G, BLOCK_I])
        keep = _fold(words, threshold)
        tl.store(mask_ptr + l_off, keep.to(tl.uint8), mask=in_range)
    else:
        keep = tl.load(mask_ptr + l_off, mask=in_range, other=0) != 0
    s_off = (o0 * so0 + o1 * so1 + o2 * so2) + inner[None, :] * si + w[:, None] * sw
    d_off = (o0 * do0 + o1 * do1 + o2 * do2) + inner[None, :] * di + w[:, None] * dw
    _apply(src_ptr, dst_ptr, s_off, d_off, keep, in_range, scale, COMPUTE)


@triton.jit
def _dropout_element_kernel(src_ptr, dst_ptr, mask_ptr, numel, D1, D2, D3, ss0, ss1, ss2, ss3,
                            ds0, ds1, ds2, ds3, ls0, ls1, ls2, ls3, seed, offset, threshold, scale: tl.float64,
                            FORWARD: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr):
    """Any layout: programs walk the source in its memory order; each element's logical
    index (strides ls*) gives its stream position and its byte in the reserve."""
    scale = tl.full([], scale, COMPUTE)  # (a float64 argument: float64 data keeps 1 / (1 - p) unrounded)
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_range = i < numel
    i0, i1, i2, i3 = unravel4(i, D1, D2, D3)
    s_off = i0 * ss0 + i1 * ss1 + i2 * ss2 + i3 * ss3
    d_off = i0 * ds0 + i1 * ds1 + i2 * ds2 + i3 * ds3
    l_off = i0 * ls0 + i1 * ls1 + i2 * ls2 + i3 * ls3
    if FORWARD:
        q = offset + l_off
        r0, r1, r2, r3 = _draws(seed, (q >> 2) & 0x3FFFFFFFFFFFFFFF)
        word = q & 3
        r = tl.where(word == 0, r0, tl.where(word == 1, r1, tl.where(word == 2, r2, r3)))
        keep = _fold(r, threshold)
        tl.store(mask_ptr + l_off, keep.to(tl.uint8), mask=in_range)
    else:
        keep = tl.load(mask_ptr + l_off, mask=in_range, other=0) != 0
    _apply(src_ptr, dst_ptr, s_off, d_off, keep, in_range, scale, COMPUTE)


# -- launchers --------------------------------------------------------------------------------
def _as_signed64(value: int) -> int:
    value = int(value) % (1 << 64)
    return value - (1 << 64) if value >= (1 << 63) else value


def _logical_strides(shape):
    return [math.prod(shape[a + 1:]) for a in range(len(shape))]


def _tile_plan(src, dst):
    """(I, W, outer dims, strides) for the tile kernel, or None: W (the last logical dim,
    with MERGE_W the dims before it that run on with it) a multiple of 4 and not
    contiguous, another dim contiguous in src (the inner one), at most three outer dims
    after merging."""
    shape = tuple(src.shape)
    if len(shape) < 2 or shape[-1] % 4 or src.stride(-1) == 1:
        return None
    logical = _logical_strides(shape)
    rest = [a for a in range(len(shape) - 1) if shape[a] > 1]
    if not rest:
        return None
    inner = min(rest, key=lambda a: abs(src.stride(a)))
    if src.stride(inner) != 1:
        return None
    w_len, a = shape[-1], len(shape) - 2
    while MERGE_W and a >= 0 and a != inner and (
            shape[a] == 1 or all(t.stride(a) == w_len * t.stride(-1) for t in (src, dst))):
        w_len, a = w_len * shape[a], a - 1  # axis a and W are one run (logical stride w_len)
    outer = [b for b in rest if b != inner and b <= a]
    strides = [[t.stride(b) for b in outer] for t in (src, dst)] + [[logical[b] for b in outer]]
    dims, (so, do, lo) = coalesce(tuple(shape[a] for a in outer), strides) if outer else ([1], ([0], [0], [0]))
    if len(dims) > 3:
        return None
    pad = 3 - len(dims)
    dims, so, do, lo = [1] * pad + dims, [0] * pad + so, [0] * pad + do, [0] * pad + lo
    return dict(I=shape[inner], W=w_len, dims=dims, src=(*so, src.stride(inner), src.stride(-1)),
                dst=(*do, dst.stride(inner), dst.stride(-1)), logical=(*lo, logical[inner]))


def _needs_int64(*tensors):
    from .layer_utils import needs_int64
    return needs_int64(*tensors)


def _launch(src, dst, reserve, probability, seed, offset, forward):
    p = float(probability)
    if not 0.0 <= p < 1.0:
        raise BadParamError(f"dropout probability must be in [0, 1), got {probability}")
    if tuple(src.shape) != tuple(dst.shape):
        raise BadParamError(f"shape mismatch: {tuple(src.shape)} vs {tuple(dst.shape)}")
    numel = src.numel()
    if reserve.dtype != torch.uint8 or reserve.numel() < numel:
        raise BadParamError(f"reserve must be uint8 with at least {numel} bytes, got {reserve.dtype} "
                            f"with {reserve.numel()} elements")
    if numel == 0:
        return
    mask = reserve.reshape(-1)[:numel]
    if not mask.is_contiguous():
        raise BadParamError("reserve must be one contiguous run of bytes")
    offset = int(offset) % (1 << 64)
    rng = dict(seed=_as_signed64(seed), threshold=int(math.ceil(p * 2.0 ** 31)), scale=1.0 / (1.0 - p))
    common = dict(FORWARD=forward, COMPUTE=compute_dtype(src))
    grouped = offset % 4 == 0 or not forward  # the backward reads the mask: any offset
    first_block = offset // 4
    if FLAT_KERNEL not in ("groups4", "vec8"):
        raise ValueError(f"dropout.FLAT_KERNEL must be 'groups4' or 'vec8', got {FLAT_KERNEL!r}")
    if grouped and src.is_contiguous() and dst.is_contiguous() and FLAT_KERNEL == "vec8":
        block = int(VEC8_BLOCK)
        _dropout_vec8_kernel[(cdiv(numel, block),)](
            src, dst, mask, numel, rng["seed"], first_block, rng["threshold"], rng["scale"], **common,
            BIG=_needs_int64(src, dst, mask) or numel + block > 2 ** 31 - 1, BLOCK_V=block // 8,
            LOAD_FIRST=bool(LOAD_FIRST) and forward, num_warps=int(VEC8_WARPS))
        return
    if grouped and src.is_contiguous() and dst.is_contiguous():
        block_g = BLOCK // 4
        _dropout_flat_kernel[(cdiv(numel, BLOCK),)](
            src, dst, mask, numel, rng["seed"], first_block, rng["threshold"], rng["scale"], **common,
            BLOCK_G=block_g, num_warps=NUM_WARPS)
        return
    if NHWC_DENSE_KERNEL not in (None, "octets"):
        raise ValueError(f"dropout.NHWC_DENSE_KERNEL must be None or 'octets', got {NHWC_DENSE_KERNEL!r}")
    if NHWC_DENSE_KERNEL == "octets" and forward and offset % 4 == 0 and _octets_dense(src, dst, mask):
        _octets_launch(src, dst, mask, first_block, rng, common)
        return
    plan = _tile_plan(src, dst) if grouped else None
    if plan is not None:
        _tile_launch(src, dst, mask, plan, first_block, rng, common)
        return
    _element_launch(src, dst, mask, numel, offset, rng, common)


def _tile_launch(src, dst, mask, plan, first_block, rng, common):
    """The NHWC_DRAW tile kernel over (outer, inner blocks, W blocks)."""
    W4 = plan["W"] // 4
    block_g = min(triton.next_power_of_2(W4), TILE_W // 4)
    block_i = max(1, min(triton.next_power_of_2(plan["I"]), TILE_ELEMENTS // (4 * block_g)))
    grid = (math.prod(plan["dims"]) * cdiv(plan["I"], block_i) * cdiv(W4, block_g),)
    geometry = (plan["I"], W4, plan["dims"][1], plan["dims"][2], rng["seed"], first_block, rng["threshold"],
                rng["scale"], *plan["src"], *plan["dst"], *plan["logical"])
    big = _needs_int64(src, dst, mask)
    draw = NHWC_DRAW[("backward", "forward")[common["FORWARD"]]] if isinstance(NHWC_DRAW, dict) else NHWC_DRAW
    if draw == "split":
        packed = mask.data_ptr() % 4 == 0  # numel is a multiple of 4 (W is)
        _dropout_split_kernel[grid](
            src, dst, mask.view(torch.int32) if packed else mask, *geometry, **common, PACKED=packed, BIG=big,
            BLOCK_I=block_i, BLOCK_G=block_g, KEEP_FROM_WORD=bool(SPLIT_KEEP_FROM_WORD),
            LOAD_FIRST=bool(LOAD_FIRST) and common["FORWARD"],
            num_warps=max(1, min(8, 4 * block_g * block_i // (32 * SPLIT_THREAD_ELEMENTS))))
    elif draw == "join":
        _dropout_join_kernel[grid](
            src, dst, mask, *geometry, **common, BIG=big, BLOCK_I=block_i, BLOCK_G=block_g,
            num_warps=NUM_WARPS if 4 * block_g * block_i <= 1024 else 8)
    elif draw == "reload":
        _dropout_tile_kernel[grid](
            src, dst, mask, *geometry, **common, BIG=big, BLOCK_I=block_i, BLOCK_W=4 * block_g,
            num_warps=NUM_WARPS if 4 * block_g * block_i <= 1024 else 8)
    else:
        raise ValueError(f"dropout.NHWC_DRAW must name 'split', 'join' or 'reload', got {draw!r}")


def _octets_dense(src, dst, mask):
    """True when src and dst are both dense channels-last 4-D tensors of 16-bit floats
    with C % 8 == 0 and H * W % 4 == 0 and the mask 4-byte aligned (the octets kernel's
    case: a row of 8 channels is one 16-byte vector, float32 rows would span two threads,
    each drawing all 8 calls; byte stores of the words cost a layout change, 239 registers)."""
    if src.dim() != 4 or src.shape[1] % 8 or (src.shape[2] * src.shape[3]) % 4 or mask.data_ptr() % 4:
        return False
    if src.element_size() != 2 or dst.element_size() != 2:
        return False
    return all(t.is_contiguous(memory_format=torch.channels_last) for t in (src, dst))


def _octets_launch(src, dst, mask, first_block, rng, common):
    """_dropout_octets_kernel over (group blocks, octet blocks)."""
    N, C, H, W = src.shape
    hw4 = H * W // 4
    groups, octets = N * hw4, C // 8
    block_o = min(int(OCTETS_BLOCK_O), triton.next_power_of_2(octets))
    block_q = max(1, min(int(OCTETS_ROWS) // block_o, triton.next_power_of_2(groups)))
    tiles = cdiv(groups, block_q) * cdiv(octets, block_o)
    if OCTETS_LOADS not in ("first", "after"):
        raise ValueError(f"dropout.OCTETS_LOADS must be 'first' or 'after', got {OCTETS_LOADS!r}")
    big = _needs_int64(src, dst, mask) or src.numel() + 4 * block_q * C > 2 ** 31 - 1
    _dropout_octets_kernel[(tiles,)](
        src, dst, mask.view(torch.int32), C, hw4, groups, octets, rng["seed"], first_block,
        rng["threshold"], rng["scale"], COMPUTE=common["COMPUTE"], BIG=big,
        BLOCK_O=block_o, BLOCK_Q=block_q, LOADS_FIRST=OCTETS_LOADS == "first",
        KEEP_FROM_WORDS=bool(OCTETS_KEEP_FROM_WORDS) and src.is_cuda,
        num_warps=int(OCTETS_WARPS) if OCTETS_WARPS else max(1, min(8, block_o * block_q // 32)))


def _element_launch(src, dst, mask, numel, offset, rng, common):
    # index order: logical row-major, so coalesce in that order (not the tensors' memory order)
    logical = _logical_strides(tuple(src.shape))
    dims, (ss, ds, ls) = coalesce(tuple(src.shape), [src.stride(), dst.stride(), logical])
    staged = None
    if len(dims) > 4:
        src = src.contiguous()
        staged, dst = dst, torch.empty(dst.shape, dtype=dst.dtype, device=dst.device)
        dims, (ss, ds, ls) = coalesce(tuple(src.shape), [src.stride(), dst.stride(), logical])
    pad = 4 - len(dims)
    dims4, ss4, ds4, ls4 = [1] * pad + dims, [0] * pad + ss, [0] * pad + ds, [0] * pad + ls
    _dropout_element_kernel[(cdiv(numel, BLOCK),)](
        src, dst, mask, numel, dims4[1], dims4[2], dims4[3], *ss4, *ds4, *ls4, rng["seed"],
        _as_signed64(offset), rng["threshold"], rng["scale"], **common, BLOCK=BLOCK, num_warps=NUM_WARPS)
    if staged is not None:
        staged.copy_(dst)


def dropout_forward(x, y, reserve, probability, seed, offset=0) -> None:
    """y = x * mask / (1 - p); the mask (uint8, 1 = kept, logical order) goes to reserve."""
    _launch(x, y, reserve, probability, seed, offset, True)


def dropout_backward(dy, dx, reserve, probability) -> None:
    """dx = dy * mask / (1 - p) with the mask the forward left in reserve."""
    _launch(dy, dx, reserve, probability, 0, 0, False)
