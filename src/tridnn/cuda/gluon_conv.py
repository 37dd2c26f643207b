"""Warp-specialized implicit-GEMM convolution written in Gluon (Hopper only; tuner candidates).

Why: conv_tma.py's Triton kernels reach ~400-450 TFLOP/s on the H200 where cuDNN reaches
517-610; the gap is code generation Triton does not do on Hopper (a producer warp that only
issues TMA loads, consumer warpgroups that only issue async wgmma, the epilogue of one tile
overlapping the loads of the next). Gluon (triton.experimental.gluon, Triton 3.6) lets a
kernel spell those out: shared-memory rings, mbarriers, TMA copies, ``warpgroup_mma`` and
``gl.warp_specialize``.

The convolution (forward, channels-last, stride 1, any KH x KW, padding, dilation):
an output tile is a box of NB images x BH rows x BW columns (BLOCK_M = NB*BH*BW pixels)
times BLOCK_N output channels. Its reduction runs over (tap, channel block): for tap
(kh, kw) the input rows it needs are the box of x shifted by (kh*dh - ph, kw*dw - pw), which
one 4-D TMA load brings into shared memory, filling out-of-bounds elements (the padding)
with zero. The filter tile is a box of the filter viewed as [K, KH*KW*C].

Partitions (one program = one SM's worth of tiles, persistent over a strided tile list):
- loader (1 warp, few registers): for every k-step waits for a free ring slot, issues the
  x box and the filter box into it, the slot's "ready" barrier counts the bytes;
- default partition (num_warps warps = 1 or 2 consumer warpgroups sharing the BLOCK_M rows):
  waits for "ready", issues async wgmma with one MMA kept in flight, frees the slot of
  the previous MMA, and after the tile writes the output tile (the data's dtype) by TMA
  store (the store of tile i drains while tile i+1 computes).

In tridnn: IMPLICIT_GEMM forward (conv_implicit_gemm.run_tma_forward) and ALGO_1 backward
data at stride 1 (conv_bwd_data_implicit_gemm) append a few of these configs (``picks``:
GLUON=True) after conv_tma's candidates on a Hopper GPU, for 2-D, groups-1, stride-1,
16-bit channels-last problems with channels multiples of 64; the tuner times them with the
others and cross-checks each against conv_tma's reference config, so one is used only
where it is faster and agrees. Backward data runs this same kernel over dy with the filter
turned 180 degrees (K and C swapped; a temporary copy per call). beta != 0 takes the
HAS_BETA variant (the old output read by TMA and blended in float32). The fused epilogue
of convolution_bias_activation_forward runs here too (residual z by TMA, bias, the
piecewise-linear activations: FUSED_ACTS); other activations stay with conv_tma.

float32 (TF32 configs, tf32_config): under TENSOR_OP math only (geometry.input_precision
"tf32"; never DEFAULT, which tridnn keeps float32-accurate with 3xTF32, nor FMA), the same
kernels take float32 x, filter and y: wgmma reads the float32 operands from shared memory
as tf32 (HGMMA.64xNx8.F32.TF32), BLOCK_K is 32 (a 128-byte row, the bytes of 64 bf16
values), the accumulator and the output tile are float32, and the ring has as many stages
as fit beside that larger output tile. Offered by default (TF32_OFFERED; TRIDNN_GLUON_TF32=0
switches it off): on the H200 the fp32-tf32 suite went 1.232 -> 1.035 of cuDNN (session 9).

Gluon kernels do not run under the Triton interpreter. On the CPU, tests/test_gluon_conv.py
and tests/test_gluon_integration.py compile every config and every offered variant for
sm_90 offline (``compile_sm90``: any machine with Triton 3.6, in a process where the
interpreter has not run, which leaves triton.language patched) and check the candidate
lists, the filter transforms and the fallbacks; with ``--gpu`` on a Hopper GPU they check
results against float64 (direct launches, and every offered config forced through the API).
Host helpers shared with gluon_wgrad and gluon_stream live in gluon_common.py.
"""
from __future__ import annotations

import os

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

from .common import cdiv
from .epilogue import activate
from . import gluon_common
from .gluon_common import compile_sm90 as _compile_sm90, descriptor, max_regs, pixel_order
from .gluon_common import desc_sig as _desc_sig, placeholder, sm_count as _sm_count


# --------------------------------------------------------------------------------------
# Device code
# --------------------------------------------------------------------------------------

@gluon.jit
def _tile_coords(t, TILES_H, TILES_W, N_BLOCKS, NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr,
                 BLOCK_N: gl.constexpr):
    """Tile t -> (first image, first output row, first output column, first output channel).
    The channel block varies fastest, so programs running at once share their x boxes in L2."""
    nb_k = t % N_BLOCKS
    r = t // N_BLOCKS
    tw = r % TILES_W
    r = r // TILES_W
    th = r % TILES_H
    tn = r // TILES_H
    return tn * NB, th * BH, tw * BW, nb_k * BLOCK_N


@gluon.jit
def _pixel_load(desc, n0, oh0, ow0, c0, bar, dst, IMAGES_INNER: gl.constexpr):
    """TMA the pixel box of desc at (image n0, row oh0, column ow0, channel c0) into dst,
    the coordinates in the order of desc's dimensions (IMAGES_INNER: rows, columns, images,
    channels)."""
    if IMAGES_INNER:
        tma.async_copy_global_to_shared(desc, [oh0, ow0, n0, c0], bar, dst)
    else:
        tma.async_copy_global_to_shared(desc, [n0, oh0, ow0, c0], bar, dst)


@gluon.jit
def _pixel_store(desc, n0, oh0, ow0, c0, src, IMAGES_INNER: gl.constexpr):
    """TMA store of src into desc's pixel box at (n0, oh0, ow0, c0) (order as _pixel_load's)."""
    if IMAGES_INNER:
        tma.async_copy_shared_to_global(desc, [oh0, ow0, n0, c0], src)
    else:
        tma.async_copy_shared_to_global(desc, [n0, oh0, ow0, c0], src)


@gluon.jit
def _loader(x_desc, w_desc, a_bufs, b_bufs, ready, empty,
            # geometry: channels, filter width, padding, dilation
            C, KW, PAD_H, PAD_W, DIL_H, DIL_W,
            # tile list
            NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
            NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr,
            BLOCK_K: gl.constexpr, STAGES: gl.constexpr, IMAGES_INNER: gl.constexpr):
    """Producer (one warp): per k-step, wait for a free slot, then TMA the shifted x box and the
    filter box into it. Empty barriers start in phase 0, so the first wait (parity 1) passes."""
    nbytes: gl.constexpr = x_desc.block_type.nbytes + w_desc.block_type.nbytes
    it = 0
    for t in range(gl.program_id(0), NUM_TILES, gl.num_programs(0)):
        n0, oh0, ow0, k0 = _tile_coords(t, TILES_H, TILES_W, N_BLOCKS, NB, BH, BW, BLOCK_N)
        # Walk (kh, kw, c0) incrementally: no divisions on the issue path. The filter column
        # of step kk is tap*C + c0 = kk*BLOCK_K.
        ih = oh0 - PAD_H
        iw0 = ow0 - PAD_W
        iw = iw0
        c0 = 0
        kw = 0
        for kk in range(K_STEPS):
            s = it % STAGES
            phase = (it // STAGES) & 1
            mbarrier.wait(empty.index(s), phase ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, nbytes)
            _pixel_load(x_desc, n0, ih, iw, c0, bar, a_bufs.index(s), IMAGES_INNER)
            tma.async_copy_global_to_shared(w_desc, [k0, kk * BLOCK_K], bar, b_bufs.index(s))
            it += 1
            c0 += BLOCK_K
            next_tap = c0 == C
            c0 = gl.where(next_tap, 0, c0)
            kw = gl.where(next_tap, kw + 1, kw)
            iw = gl.where(next_tap, iw + DIL_W, iw)
            next_row = kw == KW
            kw = gl.where(next_row, 0, kw)
            iw = gl.where(next_row, iw0, iw)
            ih = gl.where(next_row, ih + DIL_H, ih)


@gluon.constexpr_function
def acc_layout_of(BLOCK_N, MMA_K, WARPS, FMA):
    """The accumulator's register layout: wgmma's (WARPS warps share the rows), or for FMA
    a blocked layout of 8 x 4 threads a warp and WARPS/4 x 4 warps, so a 128 x 128 tile
    gives each of 8 warps' threads an 8 x 8 block (rows 16 apart, columns 16 apart)."""
    if FMA:
        return gl.BlockedLayout([1, 1], [8, 4], [WARPS // 4, 4], [1, 0])
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BLOCK_N, MMA_K])


FMA_K = gl.constexpr(16)  # k values a thread holds per dot_fma (Gluon's least)


@gluon.jit
def mainloop(a_bufs, b_bufs, ready, empty, acc, it, k_steps,
             BLOCK_M: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr, FMA: gl.constexpr):
    """acc + the products of the tile's k_steps ring slots from ring position it; returns
    (acc, it after them). wgmma: async, one MMA kept in flight, a slot freed once the MMA
    that read it retired (the caller ends the tile with ``drain``).

    FMA (float32 under FMA math: IEEE products on the CUDA cores): per FMA_K values of k
    each thread loads its 8 rows of x and 8 filter rows as 16-byte vectors (LDS.128; the
    128-byte swizzle puts a warp's 8 consecutive rows in distinct banks) and dot_fma
    chains them into its accumulators: 16 FFMA per LDS.128 in the sm_90 SASS. All warps
    of the partition must have read a slot before it is freed (mbarrier.arrive is one
    thread's): a thread barrier per k-step."""
    if FMA:
        layout: gl.constexpr = acc.type.layout
        for kk in range(k_steps):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            a_s = a_bufs.index(s).reshape([BLOCK_M, BLOCK_K])
            b_s = b_bufs.index(s)
            for k0 in gl.static_range(0, BLOCK_K, FMA_K):
                a = a_s.slice(k0, FMA_K, dim=1).load(gl.DotOperandLayout(0, layout, 0))
                b = b_s.slice(k0, FMA_K, dim=1).permute((1, 0)).load(gl.DotOperandLayout(1, layout, 0))
                acc = gl.dot_fma(a, b, acc)
            gl.thread_barrier()
            mbarrier.arrive(empty.index(s))
            it += 1
    else:
        for kk in range(k_steps):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            a = a_bufs.index(s).reshape([BLOCK_M, BLOCK_K])
            b = b_bufs.index(s).permute((1, 0))
            acc = warpgroup_mma(a, b, acc, is_async=True)  # (float32 operands: tf32, the default precision)
            acc, a, b = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, b))
            # MMA it-1 has retired: its slot may be refilled.
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
            it += 1
    return acc, it


@gluon.jit
def drain(acc, empty, it, k_steps, STAGES: gl.constexpr, FMA: gl.constexpr):
    """After ``mainloop``: wait for the last MMA and free its slot (none for a tile without
    k-steps); FMA has nothing in flight."""
    if not FMA:
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k_steps > 0)
    return acc


@gluon.jit
def _consumer(y_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta,
              z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
              NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
              NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr,
              BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
              PARTITION: gl.constexpr, CONSUMERS: gl.constexpr, WARPS: gl.constexpr, HAS_BETA: gl.constexpr,
              ACT: gl.constexpr, HAS_BIAS: gl.constexpr, HAS_Z: gl.constexpr, FMA: gl.constexpr,
              IMAGES_INNER: gl.constexpr):
    """A consumer partition (WARPS warps): of this program's tiles it takes every CONSUMERS-th,
    starting at PARTITION. Per k-step: wait for the slot, async wgmma, keep one MMA in flight,
    free the slot of the MMA that retired. Epilogue: output tile (y's dtype) -> shared -> TMA store,
    drained while the next tile computes.

    With CONSUMERS = 2 (ping-pong) the loader fills the ring tile after tile, so the two
    consumers' main loops take turns on the tensor cores and each one's epilogue overlaps
    the other's main loop. A consumer starts tile j only after the other one has seen all
    of tile j-1 arrive ("turns" barriers): a ring slot's "ready" barrier then has at most
    one phase pending, so waiting on its parity cannot match a phase two laps old.

    HAS_BETA: y = alpha * acc + beta * y. The old y tile comes by TMA into this partition's
    output buffer while the main loop runs (issued once the previous store has read the
    buffer), and is blended in float32 before the store overwrites it. The fused epilogue
    (epilogue.store_tile's order): + alpha2 * z (HAS_Z: z's tile by TMA through the same
    buffer, after the old y when both), + bias[k] (HAS_BIAS), then the activation ACT.
    FMA: the main loop on the CUDA cores (``mainloop``)."""
    BLOCK_M: gl.constexpr = NB * BH * BW
    # wgmma's k: 32 bytes of the operands (16 bf16/fp16 values; 8 float32 ones, run as tf32)
    MMA_K: gl.constexpr = 256 // a_bufs.dtype.primitive_bitwidth
    acc_layout: gl.constexpr = acc_layout_of(BLOCK_N, MMA_K, WARPS, FMA)
    LOADS: gl.constexpr = (1 if HAS_BETA else 0) + (1 if HAS_Z else 0)  # tiles read per output tile
    c_smem = c_bufs.index(PARTITION)
    c_tile = c_smem.reshape([BLOCK_M, BLOCK_N])
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    my_tiles = (NUM_TILES - pid + nprog - 1) // nprog
    for j in range(PARTITION, my_tiles, CONSUMERS):
        n0, oh0, ow0, k0 = _tile_coords(pid + j * nprog, TILES_H, TILES_W, N_BLOCKS, NB, BH, BW, BLOCK_N)
        it = j * K_STEPS  # ring position of this tile's first k-step (the loader's order)
        t_local = j // CONSUMERS  # this partition's tile count
        if LOADS > 0:  # the first tile to read (old y, else z) comes while the main loop runs
            tma.store_wait(pendings=0)
            gl.thread_barrier()
            mbarrier.expect(ybar.index(PARTITION), y_desc.block_type.nbytes)
            if HAS_BETA:
                _pixel_load(y_desc, n0, oh0, ow0, k0, ybar.index(PARTITION), c_smem, IMAGES_INNER)
            else:
                _pixel_load(z_desc, n0, oh0, ow0, k0, ybar.index(PARTITION), c_smem, IMAGES_INNER)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        if CONSUMERS > 1:
            # tile j-1 was the other consumer's ((j-1)//2)-th
            mbarrier.wait(turns.index(1 - PARTITION), ((j - 1) // 2) & 1, pred=j > 0)
        acc, it = mainloop(a_bufs, b_bufs, ready, empty, acc, it, K_STEPS, BLOCK_M, BLOCK_K, STAGES, FMA)
        if CONSUMERS > 1:
            mbarrier.arrive(turns.index(PARTITION))
        acc = drain(acc, empty, it, K_STEPS, STAGES, FMA)
        acc = acc * alpha  # (one multiply a register: one compile serves every alpha)
        if HAS_BETA:
            # the old tile (this partition's (t_local * LOADS)-th load) replaces the buffer's
            # previous contents; every thread reads its part before any overwrites it
            mbarrier.wait(ybar.index(PARTITION), (t_local * LOADS) & 1)
            acc = acc + beta * c_tile.load(acc_layout).to(gl.float32)
            gl.thread_barrier()
            if HAS_Z:  # then z through the same buffer
                fence_async_shared()
                mbarrier.expect(ybar.index(PARTITION), z_desc.block_type.nbytes)
                _pixel_load(z_desc, n0, oh0, ow0, k0, ybar.index(PARTITION), c_smem, IMAGES_INNER)
        if HAS_Z:
            mbarrier.wait(ybar.index(PARTITION), (t_local * LOADS + LOADS - 1) & 1)
            acc = acc + alpha2 * c_tile.load(acc_layout).to(gl.float32)
            gl.thread_barrier()
        if LOADS == 0:
            # This partition's previous store must have read c_smem before it is overwritten.
            tma.store_wait(pendings=0)
            gl.thread_barrier()
        if HAS_BIAS:
            cols = k0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
            b = gl.load(bias_ptr + cols, mask=cols < C_OUT, other=0.0)
            acc = acc + gl.expand_dims(b.to(gl.float32), 0)
        if ACT >= 0:
            acc = activate(acc, ACT, coef, swish_beta)  # epilogue.py's (Gluon calls @triton.jit helpers)
        c_tile.store(acc.to(y_desc.dtype))
        fence_async_shared()
        gl.thread_barrier()
        _pixel_store(y_desc, n0, oh0, ow0, k0, c_smem, IMAGES_INNER)
    tma.store_wait(pendings=0)


@gluon.jit
def shared_state(x_desc, w_desc, y_desc, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """The forward kernels' shared memory (this module's and gluon_conv_strided's): a ring of
    STAGES (x box, filter box) slots with their ready/empty barriers, an output tile per
    consumer, the ping-pong turns and the old-y-tile-arrived barriers; initialized and fenced."""
    a_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    b_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    c_bufs = gl.allocate_shared_memory(y_desc.dtype, [CONSUMERS] + y_desc.block_type.shape, y_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ybar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # old y tile arrived
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
        mbarrier.init(ybar.index(i), count=1)
    fence_async_shared()
    return a_bufs, b_bufs, c_bufs, ready, empty, turns, ybar


# Integer arguments are not specialized (value 1, multiples of 16): one compile per config
# serves every layer; they only feed the tile and tap bookkeeping.
_RUNTIME_INTS = ["C_OUT", "C", "KW", "PAD_H", "PAD_W", "DIL_H", "DIL_W", "NUM_TILES", "TILES_H", "TILES_W", "N_BLOCKS",
                 "K_STEPS"]


@gluon.jit(do_not_specialize=_RUNTIME_INTS + ["bias_ptr"])
def gluon_conv_fwd_kernel(
    # TMA descriptors: x [N, H, W, C] box [NB, BH, BW, BLOCK_K]; filter [K, KH*KW*C] box
    # [BLOCK_N, BLOCK_K]; y [N, OH, OW, K] box [NB, BH, BW, BLOCK_N] (IMAGES_INNER: x, y and
    # z viewed as [H, W, N, C], boxes [BH, BW, NB, .])
    x_desc, w_desc, y_desc,
    alpha, beta,
    # fused epilogue: residual z (a descriptor like y's; y's own when absent), bias (C_OUT
    # contiguous values; any pointer when absent), their scalars
    z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
    # geometry
    C, KW, PAD_H, PAD_W, DIL_H, DIL_W,
    # tile list: NUM_TILES = ceil(N/NB) * TILES_H * TILES_W * N_BLOCKS; K_STEPS = KH*KW*C/BLOCK_K
    NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
    NB: gl.constexpr, BH: gl.constexpr, BW: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr, PINGPONG: gl.constexpr, LOADER_REGS: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, num_warps: gl.constexpr, HAS_BETA: gl.constexpr = False,
    ACT: gl.constexpr = -1, HAS_BIAS: gl.constexpr = False, HAS_Z: gl.constexpr = False, FMA: gl.constexpr = False,
    IMAGES_INNER: gl.constexpr = False,
):
    """Forward convolution, persistent and warp-specialized (see the module docstring).
    PINGPONG: a second consumer partition of num_warps warps takes every other tile.
    HAS_BETA: y = alpha * conv + beta * y (the old y read by TMA); else y = alpha * conv.
    Then + alpha2 * z (HAS_Z), + bias (HAS_BIAS), activation ACT (-1: none). FMA: float32
    products on the CUDA cores (fma_config)."""
    CONSUMERS: gl.constexpr = 2 if PINGPONG else 1
    a_bufs, b_bufs, c_bufs, ready, empty, turns, ybar = shared_state(x_desc, w_desc, y_desc, STAGES, CONSUMERS)

    if PINGPONG:
        gl.warp_specialize([
            (_consumer, (y_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta,
                         z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
                         NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                         NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 0, CONSUMERS, num_warps, HAS_BETA,
                         ACT, HAS_BIAS, HAS_Z, FMA, IMAGES_INNER)),
            (_loader, (x_desc, w_desc, a_bufs, b_bufs, ready, empty,
                       C, KW, PAD_H, PAD_W, DIL_H, DIL_W,
                       NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                       NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, IMAGES_INNER)),
            (_consumer, (y_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta,
                         z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
                         NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                         NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 1, CONSUMERS, num_warps, HAS_BETA,
                         ACT, HAS_BIAS, HAS_Z, FMA, IMAGES_INNER)),
        ], [1, num_warps], [LOADER_REGS, CONSUMER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (y_desc, a_bufs, b_bufs, ready, empty, turns, c_bufs, ybar, alpha, beta,
                         z_desc, bias_ptr, alpha2, coef, swish_beta, C_OUT,
                         NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                         NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, 0, CONSUMERS, num_warps, HAS_BETA,
                         ACT, HAS_BIAS, HAS_Z, FMA, IMAGES_INNER)),
            (_loader, (x_desc, w_desc, a_bufs, b_bufs, ready, empty,
                       C, KW, PAD_H, PAD_W, DIL_H, DIL_W,
                       NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS,
                       NB, BH, BW, BLOCK_N, BLOCK_K, STAGES, IMAGES_INNER)),
        ], [1], [LOADER_REGS])


# --------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------

def config(nb, bh, bw, bn, stages, warps, bk=64, per_sm=1, pingpong=False, images_inner=False):
    """One tile shape: NB x BH x BW output pixels times BLOCK_N channels, a ring of STAGES slots,
    num_warps consumer warps (4: one warpgroup, 8: two sharing the rows), per_sm programs
    resident on an SM (registers are capped to allow it; the grid is per_sm x SMs); pingpong:
    two consumer partitions of num_warps warps taking alternate tiles; images_inner: x, y and
    z are viewed with the images' dimension next to the channels, so a tile is NB images at
    BH x BW pixels and fills on maps of any width when NB divides the batch (stride 1 only)."""
    return dict(NB=nb, BH=bh, BW=bw, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, num_warps=warps, PER_SM=per_sm,
                PINGPONG=pingpong, **({"IMAGES_INNER": True} if images_inner else {}))


def name(cfg) -> str:
    return (f"{cfg['NB']}x{cfg['BH']}x{cfg['BW']}x{cfg['BLOCK_N']} s{cfg['STAGES']} w{cfg['num_warps']}"
            + (f" k{cfg['BLOCK_K']}" if cfg["BLOCK_K"] != 64 else "")
            + (f" p{cfg['PER_SM']}" if cfg.get("PER_SM", 1) > 1 else "") + (" pp" if cfg.get("PINGPONG") else "")
            + (" images-inner" if cfg.get("IMAGES_INNER") else "")
            + (" tf32" if cfg.get("TF32") else "") + (" fma" if cfg.get("FMA") else ""))


def shared_bytes(cfg, itemsize=None) -> int:
    """Dynamic shared memory of a config: the ring plus an output tile per consumer (barriers
    aside); itemsize: the data's (default 4 for a float32 config, else 2)."""
    itemsize = itemsize or (4 if float32_data(cfg) else 2)
    bm = cfg["NB"] * cfg["BH"] * cfg["BW"]
    consumers = 2 if cfg.get("PINGPONG") else 1
    return itemsize * (cfg["STAGES"] * (bm + cfg["BLOCK_N"]) * cfg["BLOCK_K"] + consumers * bm * cfg["BLOCK_N"])


# Candidates for the H200 (227 KB of shared memory a program). Per k-step a tile reads
# (BLOCK_M + BLOCK_N) * BLOCK_K * 2 bytes from L2 for BLOCK_M * BLOCK_N * BLOCK_K MACs, so
# 128 x 128 tiles need ~11 TB/s of L2 at the tensor cores' 700 TFLOP/s: the 256 x 128 and
# 128 x 256 tiles (two consumer warpgroups) need ~8. Box shapes follow the layers' images:
# 56x56: 8x16, 2x8x8; 28x28: 4x32 (7/8 of the box useful); 14x14: 8x8 (0.77) or 4 images x
# 2 rows x 16 (0.875); 7x7: 2 images x 8x8 (0.77) or 16 images x 1 row x 8 (0.875).
CONFIGS = [
    # cooperative: num_warps/4 warpgroups share the tile's rows
    config(1, 8, 16, 128, 4, 8), config(1, 8, 16, 256, 3, 8), config(1, 16, 16, 128, 3, 8),
    config(1, 4, 32, 128, 4, 8), config(2, 8, 8, 128, 4, 8), config(2, 8, 8, 256, 3, 8),
    config(2, 4, 32, 128, 3, 8), config(4, 8, 8, 128, 3, 8), config(1, 8, 16, 128, 3, 8, bk=128),
    # 64 output channels (res2): small tiles two programs an SM, or 256 pixels
    config(1, 8, 16, 64, 4, 4, per_sm=2), config(2, 8, 8, 64, 4, 4, per_sm=2), config(4, 8, 8, 64, 4, 8),
    config(1, 8, 16, 128, 4, 4),
    # ping-pong: two one-warpgroup consumers on alternate tiles (epilogue hidden)
    config(1, 8, 16, 128, 4, 4, pingpong=True), config(2, 8, 8, 128, 4, 4, pingpong=True),
    config(1, 4, 32, 128, 4, 4, pingpong=True), config(1, 8, 8, 256, 4, 4, pingpong=True),
    config(2, 8, 8, 64, 4, 4, pingpong=True),
    # many images, few rows: 14x14 and 7x7 with one column in eight wasted instead of 23%
    config(4, 2, 16, 128, 4, 8), config(16, 1, 8, 128, 4, 8), config(4, 2, 16, 128, 4, 4, pingpong=True),
    config(16, 1, 8, 128, 4, 4, pingpong=True),
    # flat boxes (one image row of pixels): 1x1 convolutions over x viewed as [1, 1, M, C],
    # i.e. plain GEMMs, for comparison with cuBLAS
    config(1, 1, 128, 128, 4, 8), config(1, 1, 256, 128, 3, 8), config(1, 1, 128, 256, 3, 8),
    config(1, 1, 128, 128, 4, 4, pingpong=True), config(1, 1, 64, 256, 4, 4, pingpong=True),
    # images innermost (PICKS_INNER*): 128 images at one pixel, 64 images at two
    config(128, 1, 1, 128, 4, 4, pingpong=True, images_inner=True),
    config(64, 1, 2, 128, 4, 4, pingpong=True, images_inner=True),
    # (session 32, H100: flat 64 x 128 tiles, for the wave quantization of the 1x1 layers on 14- and
    # 7-wide maps, lost to the flat configs above on all four layers, by 5-44%, and were removed)
]


def _regs(cfg):
    """(maxnreg, loader registers, registers of the second consumer partition)."""
    cap = max_regs(cfg["num_warps"], cfg.get("PER_SM", 1), cfg.get("PINGPONG", False))
    loader = cfg.get("LOADER_REGS", 40)
    # the second consumer takes an equal share of what the loader leaves (multiple of 8)
    second = min(256, ((cap * 3 - loader) // 2) // 8 * 8) if cfg.get("PINGPONG") else 0
    return cap, loader, second


def filter_matrix(w):
    """Filter [K, C, KH, KW] (any memory format) -> contiguous [K, KH*KW*C]: row k holds tap-major,
    channel-minor weights, the order the loader walks."""
    k, c, kh, kw = w.shape
    return w.permute(0, 2, 3, 1).contiguous().view(k, kh * kw * c)


def why_not(x, w, padding, dilation, stride=(1, 1), cfg=None) -> str | None:
    """None when this kernel can compute the problem, else the reason."""
    import torch
    if tuple(stride) != (1, 1):
        return "stride must be 1"
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32) or w.dtype != x.dtype:
        return "bfloat16/float16 (or float32 with a TF32 or FMA config) only"
    n, c, h, wd = x.shape
    if c % 64:
        return "channels must be a multiple of 64"
    if not _channels_last_ok(x):
        return "x must be channels-last with 16-byte aligned strides"
    k = w.shape[0]
    if k % 8:
        return "output channels must be a multiple of 8 (TMA row alignment)"
    if w.shape[1] != c:
        return "groups are not supported"
    return None


def _channels_last_ok(t) -> bool:
    """A 4-D NCHW-indexed view TMA can read or write as [N, H, W, C]: channels contiguous,
    the other strides and the base 16-byte aligned."""
    if t.dim() != 4 or (t.stride(1) != 1 and t.shape[1] > 1) or t.data_ptr() % 16:
        return False
    return all(s * t.element_size() % 16 == 0 for s in (t.stride(0), t.stride(2), t.stride(3)))


def _dense(t) -> bool:
    """All pixels at one stride of C elements: [N, H, W, C] is a flat [N*H*W, C] matrix."""
    n, c, h, w = t.shape
    return t.stride(3) == c and (h == 1 or t.stride(2) == w * c) and (n == 1 or t.stride(0) == h * w * c)


def out_size(h, wd, kh, kw, padding, dilation):
    oh = h + 2 * padding[0] - dilation[0] * (kh - 1)
    ow = wd + 2 * padding[1] - dilation[1] * (kw - 1)
    return oh, ow


def _nhwc(t):
    """([N, H, W, C], strides) of a channels-last NCHW-indexed view."""
    n, c, h, w = t.shape
    return (n, h, w, c), (t.stride(0), t.stride(2), t.stride(3), 1)


def flat_ok(x, y, kh, kw, padding) -> bool:
    """A 1x1 filter without padding over dense x and y: the convolution is the plain GEMM of
    [N*H*W, C] by [C, K]; x and y are then viewed as one image row of N*H*W pixels."""
    return (kh, kw) == (1, 1) and tuple(padding) == (0, 0) and _dense(x) and _dense(y)


def prepare(x, w, padding=(1, 1), dilation=(1, 1), cfg=None, y=None, alpha=1.0, w_mat=None, sms=None,
            beta=0.0, kernel=None, epilogue=None):
    """Build descriptors and launch arguments (for CUDA-graph timing, the launch is
    ``launch(*prepare(...))``). Returns (grid, args, meta, y).

    x: [N, C, H, W] channels-last; w: the filter [K, C, KH, KW] (read through ``w_mat``, its
    [K, KH*KW*C] matrix, when given: any 2-D view with unit column stride, e.g. a KRSC
    filter's own memory); padding: the top/left padding (the output's size is y's when y is
    given, so bottom/right padding may differ); beta != 0 reads y (y = alpha*conv + beta*y).
    kernel: (KH, KW) when w is None. A flat config (one row, one image a box) over a 1x1
    problem views the pixels as one row (flat_ok). epilogue: a fused_args tuple (bias, z,
    alpha2, act, coef, swish_beta) or None."""
    import torch

    cfg = dict(cfg or CONFIGS[0])
    kh, kw = kernel if w is None else w.shape[2:]
    n, c, h, wd = x.shape
    k = w_mat.shape[0] if w_mat is not None else w.shape[0]
    if w is not None:
        reason = why_not(x, w, tuple(padding), tuple(dilation))
        if reason:
            raise ValueError(reason)
    if y is None:
        oh, ow = out_size(h, wd, kh, kw, padding, dilation)
        y = torch.empty((n, k, oh, ow), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    elif not _channels_last_ok(y):
        raise ValueError("y must be channels-last with 16-byte aligned strides")
    if w_mat is None:
        w_mat = filter_matrix(w)
    check_dtypes(cfg, x, w_mat, y)
    NB, BH, BW, BN, BK = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    if c % BK:
        raise ValueError(f"channels ({c}) must be a multiple of the config's BLOCK_K ({BK})")
    if tuple(w_mat.shape) != (k, kh * kw * c) or w_mat.stride(1) != 1:
        raise ValueError("the filter matrix must be [K, KH*KW*C] with unit column stride")
    (xn, xh, xw, _), xs = _nhwc(x)
    (_, oh, ow, _), ys = _nhwc(y)
    bias, z, alpha2, act, coef, swish_beta = checked_epilogue(epilogue, y, k)
    zs = _nhwc(z)[1] if z is not None else None
    if (NB == 1 and BH == 1 and not cfg.get("IMAGES_INNER") and flat_ok(x, y, kh, kw, padding)
            and (z is None or _dense(z))):
        m = n * h * wd
        xshape, xs, yshape, ys = (1, 1, m, c), (m * c, m * c, c, 1), (1, 1, m, k), (m * k, m * k, k, 1)
        zs = ys
        n, oh, ow = 1, 1, m
    else:
        xshape, yshape = (xn, xh, xw, c), (n, oh, ow, k)
    # (images inner: [H, W, N, C], the same memory with the images next to the channels)
    xshape, xs, yshape, ys, zs, x_box, y_box = (pixel_order(cfg, d) for d in (
        xshape, xs, yshape, ys, zs, [NB, BH, BW, BK], [NB, BH, BW, BN]))
    x_desc = descriptor(x, xshape, xs, x_box)
    w_desc = descriptor(w_mat, w_mat.shape, w_mat.stride(), [BN, BK])
    y_desc = descriptor(y, yshape, ys, y_box)
    z_desc = y_desc if z is None else descriptor(z, yshape, zs, y_box)
    bias_arg = placeholder(y.device, y.dtype) if bias is None else bias  # (never read when absent)
    grid, tiles = tile_grid(cfg, n, oh, ow, k, kh * kw * (c // BK), x.device, sms)
    args = (x_desc, w_desc, y_desc, float(alpha), float(beta), z_desc, bias_arg, float(alpha2), float(coef),
            float(swish_beta), k, c, kw, padding[0], padding[1], dilation[0], dilation[1], *tiles)
    consts, cap = constexprs(cfg, beta != 0, act, bias is not None, z is not None)
    return grid, args, dict(consts, maxnreg=cap), y


def check_dtypes(cfg, x, w_mat, y):
    """prepare's element-type checks: x, the filter matrix and y of one dtype, the config's
    (TF32 for float32, a 16-bit one for bfloat16/float16)."""
    if not (x.dtype == w_mat.dtype == y.dtype):
        raise ValueError("x, the filter and y must have one dtype")
    if not config_fits(cfg, x):
        raise ValueError(f"config {name(cfg)} is for {'float32' if float32_data(cfg) else 'bfloat16/float16'} data, "
                         f"not {x.dtype}")


def checked_epilogue(epilogue, y, k) -> tuple:
    """(bias, z, alpha2, act, coef, swish_beta) of a fused_args tuple (None: no epilogue),
    z and bias checked against the output y of k channels."""
    bias, z, alpha2, act, coef, swish_beta = epilogue or (None, None, 1.0, -1, 0.0, 1.0)
    if z is not None and (not _channels_last_ok(z) or tuple(z.shape) != tuple(y.shape)):
        raise ValueError("z must have y's shape, channels-last with 16-byte aligned strides")
    if bias is not None and (bias.numel() != k or bias.stride(-1) != 1 or bias.dim() != 1):
        raise ValueError("bias must be K contiguous values")
    return bias, z, alpha2, act, coef, swish_beta


def tile_grid(cfg, n, oh, ow, k, k_steps, device, sms=None) -> tuple:
    """(grid, (NUM_TILES, TILES_H, TILES_W, N_BLOCKS, K_STEPS)): the persistent grid (PER_SM
    programs an SM, no more than the tiles) over the output's tile list."""
    tiles_h, tiles_w, n_blocks = cdiv(oh, cfg["BH"]), cdiv(ow, cfg["BW"]), cdiv(k, cfg["BLOCK_N"])
    num_tiles = cdiv(n, cfg["NB"]) * tiles_h * tiles_w * n_blocks
    if sms is None:
        sms = _sm_count(device)
    grid = (max(1, min(num_tiles, sms * cfg.get("PER_SM", 1))),)
    return grid, (num_tiles, tiles_h, tiles_w, n_blocks, k_steps)


def constexprs(cfg, has_beta=False, act=-1, has_bias=False, has_z=False) -> tuple:
    """(the kernel's constexprs, the register cap maxnreg) of a config and epilogue variant."""
    cap, loader_regs, consumer_regs = _regs(cfg)
    consts = dict(NB=cfg["NB"], BH=cfg["BH"], BW=cfg["BW"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                  STAGES=cfg["STAGES"], PINGPONG=bool(cfg.get("PINGPONG")), LOADER_REGS=loader_regs,
                  CONSUMER_REGS=consumer_regs, num_warps=cfg["num_warps"], HAS_BETA=bool(has_beta), ACT=int(act),
                  HAS_BIAS=bool(has_bias), HAS_Z=bool(has_z), FMA=bool(cfg.get("FMA")),
                  IMAGES_INNER=bool(cfg.get("IMAGES_INNER")))
    return consts, cap


def constexpr_tail(meta, kernel=None) -> tuple:
    """The kernel's constexpr values in signature order (they follow the runtime arguments)."""
    return gluon_common.constexpr_tail(kernel or gluon_conv_fwd_kernel, meta)


def launch(grid, args, meta, y=None, kernel=None):
    """kernel[grid](*args, **meta) (kernel: gluon_conv_fwd_kernel, or gluon_conv_strided's,
    which takes the same descriptors, epilogue and constexprs) through gluon_common.launch:
    after the first launch of a (kernel, device, dtype, constexprs), straight through the
    compiled kernel's launcher. The compiled kernel depends only on the data dtype, the
    bias pointer's dtype (args[6]) and the constexprs (the ints are not specialized,
    descriptors are typed by their box and layout)."""
    kernel = kernel or gluon_conv_fwd_kernel
    gluon_common.launch(kernel, grid, args, meta, _spec(args))
    return y


def _spec(args) -> tuple:
    return args[0].base.dtype, args[6].dtype


def conv2d(x, w, padding=(1, 1), dilation=(1, 1), cfg=None, alpha=1.0, sms=None, y=None, beta=0.0, epilogue=None):
    """y = act(alpha * conv2d(x, w) + beta * y + alpha2 * z + bias) for channels-last bf16/fp16 x
    (float32 x with a TF32 config: tf32 products; GPU only; epilogue: prepare's (bias, z, alpha2, act, coef, swish_beta)). sms: pretend
    the GPU has that many SMs (tests: many tiles a program)."""
    grid, args, meta, y = prepare(x, w, padding, dilation, cfg, y=y, alpha=alpha, sms=sms, beta=beta,
                                  epilogue=epilogue)
    return launch(grid, args, meta, y)


# --------------------------------------------------------------------------------------
# tridnn's algorithms: tuner candidates for IMPLICIT_GEMM forward and ALGO_1 backward data
# --------------------------------------------------------------------------------------

# Per problem at most four configs (each costs a compile and a timing on the tuner's first
# call), chosen from the H200 sweep of 2026-11-30 (ResNet-50 batch 64, bfloat16,
# CUDA-graph medians; cuDNN in brackets):
#   res2_3x3 (56x56, K 64):   4x8x8x64 s4 w8 37.2 us, 2x8x8x64 s4 w4 p2 38.7 [41.1]
#   res3_3x3 (28x28, K 128):  16x1x8x128 s4 w4 pp 28.4, 4x2x16x128 pp 28.5, 2x4x32x128 s3 w8 28.5 [29.6]
#   res4_3x3 (14x14, K 256):  4x2x16x128 pp 27.4, 2x8x8x256 s3 w8 27.5, 1x8x16x256 s3 w8 27.6 [27.7]
#   res5_3x3 (7x7, K 512):    16x1x8x128 pp 26.6, 16x1x8x128 w8 27.1, 2x8x8x128 pp 28.1 [28.3]
#   1x1 as a GEMM (flat rows): 1x1x128x128 pp / w8 37.6 (M 50176, N 128, K 1152) [cuBLAS 36.4];
#                              1x1x128x256 s3 w8 32.5 (M 12544, N 256, K 2304) [26.4]
PICKS_NARROW = [config(4, 8, 8, 64, 4, 8), config(2, 8, 8, 64, 4, 4, per_sm=2),
                config(1, 8, 16, 64, 4, 4, per_sm=2)]                      # 64 output channels or fewer
PICKS_LARGE = [config(16, 1, 8, 128, 4, 4, pingpong=True), config(4, 2, 16, 128, 4, 4, pingpong=True),
               config(2, 4, 32, 128, 3, 8), config(1, 4, 32, 128, 4, 4, pingpong=True)]  # output width >= 28
PICKS_MEDIUM = [config(4, 2, 16, 128, 4, 4, pingpong=True), config(2, 8, 8, 256, 3, 8),
                config(16, 1, 8, 128, 4, 4, pingpong=True), config(1, 8, 16, 256, 3, 8)]  # 14 <= width < 28
PICKS_SMALL = [config(16, 1, 8, 128, 4, 4, pingpong=True), config(16, 1, 8, 128, 4, 8),
               config(2, 8, 8, 128, 4, 4, pingpong=True)]                   # width < 14
# Images innermost (session 28; TRIDNN_IMAGES_INNER=0 withdraws them,
# gluon_common.IMAGES_INNER_OFFERED): ResNet-50's 7-, 14- and 28-wide
# maps leave 1/8 of the 8-, 16- and 32-wide boxes above on zeros. NB images at one pixel
# (maps under 14 wide) or at two side by side fill every tile where NB divides the batch;
# offered beside the lists above at stride 1 (``picks``' n).
PICKS_INNER_SMALL = [config(128, 1, 1, 128, 4, 4, pingpong=True, images_inner=True)]
PICKS_INNER = [config(64, 1, 2, 128, 4, 4, pingpong=True, images_inner=True)]
# Dilated 3x3 layers with more than 128 output channels on maps >= 28 wide (DeepLab's ASPP:
# 512 channels, 64x64 and 33x33 maps, batch 16). H100 sweep 2026-12-06 (session 27,
# sweep_gluon_conv.py --layers aspp_d2,aspp_d4,aspp_d12; tridnn time / cuDNN's, forward and
# backward data): 2x8x8x256 s3 w8 0.91 / 0.89 (d2), 0.72 / 0.94 (d12); 1x8x16x256 s3 w8
# 0.89 / 0.92 (d2), 0.92 / 0.95 (d4); PICKS_LARGE's best 0.98 / 0.89 (d2), 0.95 / 0.99 (d4),
# 0.73 / 1.00 (d12), so its two 128-wide configs that did best stay.
# (Not for ResNet's wide layers at these widths: res3_ds's backward data keeps PICKS_LARGE.)
PICKS_DILATED = [config(2, 8, 8, 256, 3, 8), config(1, 8, 16, 256, 3, 8),
                 config(16, 1, 8, 128, 4, 4, pingpong=True), config(2, 4, 32, 128, 3, 8)]
# 1x1, no padding: a GEMM. The 64-pixel tile (its 7x7 and 14x14 layers' M = N*H*W = 3136 or
# 12544 splits into 49 or 196 of them: fuller waves than 128-pixel tiles there; correct and
# 33.7 us against 32.5-32.9 on the 12544-row GEMM in the session-7 sweep; not yet timed by
# the tuner on the 7x7 layers, where the 128-row tiles leave 1.2-1.35x of cuDNN).
PICKS_FLAT = [config(1, 1, 128, 128, 4, 4, pingpong=True), config(1, 1, 128, 128, 4, 8),
              config(1, 1, 128, 256, 3, 8), config(1, 1, 64, 256, 4, 4, pingpong=True)]


# float32 (tf32) only, at every output width: 16 images x 1 row x 8 columns, 128 channels, a
# 4-deep ring and two consumer warpgroups (no ping-pong). H200 sweep 2026-12-01 (tf32 against
# cuDNN tf32, ResNet-50 batch 64, stride 2): the best config on all six stride-2 layers
# (res3_3x3s2 1.01, res4_3x3s2 1.08, res5_3x3s2 1.04, res3/4/5_ds 1.19 / 1.13 / 0.98), where
# the 28- and 14-wide picks' best were 1.17-1.32: its float32 ring keeps 4 slots where the
# ping-pong configs' two output tiles leave room for 3.
TF32_EXTRA = [config(16, 1, 8, 128, 4, 8)]


def with_tf32_extra(base: list, tf32: bool) -> list:
    """``base`` plus TF32_EXTRA's configs it lacks, for float32 (tf32) problems."""
    if not tf32:
        return base
    have = {name(c) for c in base}
    return base + [c for c in TF32_EXTRA if name(c) not in have]


def inner_picks(out_w: int, n: int | None) -> list:
    """The images-inner configs for an output of width out_w at batch n: PICKS_INNER (two
    pixels) from 14 wide, else PICKS_INNER_SMALL, those whose NB images divide n; none for n
    None or without gluon_common.IMAGES_INNER_OFFERED."""
    if n is None or not gluon_common.IMAGES_INNER_OFFERED:
        return []
    return [c for c in (PICKS_INNER if out_w >= 14 else PICKS_INNER_SMALL) if n % c["NB"] == 0]


def picks(out_w: int, k_out: int, flat: bool, tf32: bool = False, fma: bool = False, dilated: bool = False,
          n: int | None = None) -> list:
    """The configs offered for an output of width out_w with k_out channels (flat: a 1x1
    problem viewed as one row of pixels; dilated: a filter with dilation > 1), each marked
    GLUON=True for the launchers; tf32: their float32 variants (tf32_config), with
    TF32_EXTRA's beside image-box picks; fma: fma_picks' (float32 under FMA math). n: the
    batch; inner_picks' images-inner configs are added for it (None: none)."""
    if fma:
        return [dict(c, GLUON=True) for c in fma_picks(out_w, k_out, flat)]
    if flat:
        base = PICKS_FLAT
    elif k_out <= 64:
        base = PICKS_NARROW
    elif dilated and k_out > 128 and out_w >= 28:
        base = with_tf32_extra(PICKS_DILATED, tf32)
    else:
        base = with_tf32_extra(PICKS_LARGE if out_w >= 28 else PICKS_MEDIUM if out_w >= 14 else PICKS_SMALL, tf32)
        base = base + inner_picks(out_w, n)
    cap = max(64, triton.next_power_of_2(k_out))
    return [dict(TF32_OF[name(c)] if tf32 else c, GLUON=True) for c in base if c["BLOCK_N"] <= cap]


# float32 data under TENSOR_OP math (tridnn's input_precision "tf32", cuDNN's tf32): the same
# kernels on float32 tensors; wgmma reads float32 operands from shared memory as tf32
# (HGMMA.64xNx8.F32.TF32: 8 values of k an instruction) and accumulates in float32; the
# output tile is float32. Never for DEFAULT math (tridnn's DEFAULT keeps float32 accuracy
# with three tf32 products: plain tf32 there would lose precision silently) nor FMA.
# Offered to the tuner beside conv_tma's tf32 configs: on the H200 (session 9, 418 GPU tests
# against float64) the fp32-tf32 ResNet-50 suite went 1.232 -> 1.035 of cuDNN's time.
# TRIDNN_GLUON_TF32=0 (or TF32_OFFERED = False) leaves float32 problems to conv_tma.
TF32_OFFERED = os.environ.get("TRIDNN_GLUON_TF32", "1") != "0"
SMEM_PER_SM = 228 * 1024   # an H200 SM's shared memory; a program may use 227 KB of it
SMEM_RESERVED = 1024       # the driver's share per program


def tf32_config(cfg) -> dict:
    """The float32 (tf32) variant of a 16-bit config: the same tile and warps, BLOCK_K 32
    (a 128-byte row: the same bytes a ring slot, and the same MMA time a k-step, as 64
    bf16 values), its stages cut to what fits next to the float32 output tile(s) in shared
    memory (PER_SM programs an SM, 1 KB left for the barriers)."""
    c = dict(cfg, BLOCK_K=32, TF32=True)
    limit = min(SMEM_PER_SM // c.get("PER_SM", 1), 227 * 1024 + SMEM_RESERVED) - SMEM_RESERVED - 1024
    while c["STAGES"] > 2 and shared_bytes(c) > limit:
        c["STAGES"] -= 1
    assert shared_bytes(c) <= limit, name(c)
    return c


# float32 under FMA math (tridnn's input_precision "ieee", cuDNN's FMA math): the same
# kernels with ``mainloop``'s CUDA-core main loop (FMA=True), IEEE float32 products summed
# in k order. One 8-warp consumer and 128 output pixels a tile: every thread holds an 8 x 8
# block of a 128 x 128 tile (64 accumulators, 167 registers under the 168 cap of 8
# consumer warps beside the loader), so two programs an SM or ping-pong consumers do not
# fit. Per k-step of 32 (a 32 KB ring slot) a warp runs 2048 FFMA against 128 LDS.128:
# the loads cost a twentieth of the issue slots. Offered by default (FMA_OFFERED;
# TRIDNN_GLUON_FMA=0 leaves FMA math to conv_tma's Triton FMA configs, which ran at
# 10-13 TFLOP/s: a quarter of the 51 TFLOP/s FMA peak).
FMA_OFFERED = os.environ.get("TRIDNN_GLUON_FMA", "1") != "0"


def fma_config(nb, bh, bw, bn=128, stages=3):
    """A float32 FMA config: NB x BH x BW = 128 output pixels times bn (64 or 128) channels,
    8 consumer warps, BLOCK_K 32 (a 128-byte row)."""
    assert nb * bh * bw == 128 and bn in (64, 128)
    return dict(config(nb, bh, bw, bn, stages, 8, bk=32), FMA=True)


def fma_picks(out_w: int, k_out: int, flat: bool) -> list:
    """FMA configs for an output of width out_w with k_out channels (flat: a 1x1 GEMM): the
    128-pixel boxes that waste least of ResNet-50's images (56 wide: 2 images x 8 x 8 or 16 x
    1 x 8, none wasted; 28: 4 x 32, 7/8 useful; 14: 4 images x 2 rows x 16; 7: 16 x 1 x 8),
    BLOCK_N 64 for 64 channels or fewer. H200 sweep 2026-12-01 (float32, cuDNN with tf32
    off): res2_3x3 2x8x8 / 16x1x8 363 us against 423 for 8x16 and 4x32 boxes (cuDNN 418);
    the 28- to 7-wide 3x3 layers ~430 us with every box (~34 TFLOP/s: box waste times
    the last wave's fill); res2_1x1c flat 170 us (cuDNN 381), res4_1x1c flat 152 (214)."""
    bn = 64 if k_out <= 64 else 128
    if flat:
        boxes = [(1, 1, 128)]
    elif out_w % 8 == 0 and out_w >= 56:
        boxes = [(2, 8, 8), (16, 1, 8)]
    elif out_w >= 28:
        boxes = [(1, 4, 32), (16, 1, 8)]
    elif out_w >= 14:
        boxes = [(4, 2, 16), (16, 1, 8)]
    else:
        boxes = [(16, 1, 8), (2, 8, 8)]
    return [fma_config(*box, bn=bn) for box in boxes]


FMA_CONFIGS = list({name(c): c for ow in (56, 28, 14, 7) for k in (64, 128) for flat in (False, True)
                    for c in fma_picks(ow, k, flat)}.values())  # every offered FMA config, once


def float32_data(cfg) -> bool:
    """Whether a config runs float32 data (TF32 or FMA) rather than bfloat16/float16."""
    return bool(cfg.get("TF32") or cfg.get("FMA"))


TF32_OF = {name(c): tf32_config(c) for c in PICKS_NARROW + PICKS_LARGE + PICKS_MEDIUM + PICKS_SMALL + PICKS_FLAT
           + PICKS_DILATED + TF32_EXTRA + PICKS_INNER + PICKS_INNER_SMALL}
TF32_CONFIGS = list({name(c): c for c in TF32_OF.values()}.values())  # every offered float32 config, once


def _hopper(device) -> bool:
    """warpgroup_mma and these TMA ops are sm_90 only (tests patch this to build lists)."""
    import torch
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9


def _half(*tensors) -> bool:
    import torch
    return all(t.dtype in (torch.bfloat16, torch.float16) and t.dtype == tensors[0].dtype for t in tensors)


def dtype_why_not(problem, *tensors) -> str | None:
    """None when the tensors are all bfloat16 or all float16, or all float32 under TENSOR_OP
    math (input_precision "tf32") with TF32_OFFERED or under FMA math ("ieee") with
    FMA_OFFERED; else the reason."""
    import torch
    if _half(*tensors):
        return None
    if not all(t.dtype == torch.float32 for t in tensors):
        return "bfloat16/float16, or float32 under TENSOR_OP or FMA math, all tensors alike"
    from .geometry import input_precision
    precision = input_precision(problem)
    if precision == "tf32":
        return None if TF32_OFFERED else "float32 (tf32) is switched off (TF32_OFFERED)"
    if precision == "ieee":
        return None if FMA_OFFERED else "float32 under FMA math is switched off (FMA_OFFERED)"
    return "float32 under TENSOR_OP (tf32) or FMA math only: DEFAULT runs 3xTF32 elsewhere"



def config_fits(cfg, t, problem=None) -> bool:
    """A float32 config for float32 data, a 16-bit one for bfloat16/float16; with a problem,
    also its math: TF32 configs under TENSOR_OP (input_precision "tf32"), FMA ones under
    FMA ("ieee"), so a tuner pick never runs another math's products."""
    import torch
    if float32_data(cfg) != (t.dtype == torch.float32):
        return False
    if problem is None or t.dtype != torch.float32:
        return True
    return _float32_kind(problem, t) == (bool(cfg.get("TF32")), bool(cfg.get("FMA")))


def _geo2(problem):
    from .geometry import geometry
    geo = geometry(problem)
    return geo, geo.ker[1:], geo.pad[1:], geo.dil[1:], geo.stride[1:]


def forward_why_not(problem, x, w, y, spec=None) -> str | None:
    """None when the tridnn forward problem can run here: 2-D, groups 1, 16-bit data (or
    float32 under TENSOR_OP math: dtype_why_not), input channels a multiple of 64, output channels of 8, x and y channels-last with 16-byte
    aligned strides, a fused epilogue this kernel takes (epilogue_why_not); the filter may
    be in any layout. Stride s > 1: gluon_conv_strided's kernel (H and W multiples of s,
    x's pixels dense within a row: its phase view)."""
    if problem.nd != 2 or problem.groups != 1:
        return "2-D problems with groups 1 only"
    geo, _, pad, dil, stride = _geo2(problem)
    if tuple(stride) != (1, 1):  # (the rest of gluon_conv_strided.why_not is checked below)
        from .gluon_conv_strided import phase_view_why_not
        reason = phase_view_why_not(x, stride)
        if reason:
            return reason
    reason = dtype_why_not(problem, x, w, y)
    if reason:
        return reason
    if spec is not None:
        reason = epilogue_why_not(spec, y)
        if reason:
            return reason
    if geo.c % 64 or geo.k % 8:
        return "input channels a multiple of 64, output channels of 8"
    if not (_channels_last_ok(x) and _channels_last_ok(y)):
        return "x and y channels-last with 16-byte aligned strides"
    if not (x.numel() and w.numel() and y.numel()):
        return "empty tensors (a TMA descriptor needs every dimension positive)"
    return None


# Activations fused here (epilogue.ActivationMode numbers; -1: none): the piecewise-linear
# ones. The others (sigmoid, tanh, elu, swish, gelu, softplus, hard swish) compile too but
# spill registers in the wider tiles' epilogues (sm_90 SASS): conv_tma keeps them.
FUSED_ACTS = (-1, 1, 3, 100, 201, 203)  # none, RELU, CLIPPED_RELU, LEAKY_RELU, the first two keeping NaN


def epilogue_why_not(spec, y) -> str | None:
    """None when the fused epilogue ``spec`` (epilogue.EpilogueSpec) runs in this kernel:
    an activation of FUSED_ACTS, a bias of K values (float16, bfloat16 or float32), a
    residual z of y's shape and dtype, channels-last with 16-byte aligned strides."""
    import torch
    if not all(t is None or isinstance(t, torch.Tensor) for t in (spec.bias, spec.z)):
        return "bias and z as torch tensors"
    if spec.act_code not in FUSED_ACTS:
        return f"activation {spec.activation} is left to conv_tma"
    if spec.bias is not None and (spec.bias.numel() != y.shape[1] or spec.bias.dtype not in (
            torch.float16, torch.bfloat16, torch.float32) or spec.bias.device != y.device):
        return "bias: K float16/bfloat16/float32 values on y's device"
    z = spec.z
    if z is not None and (tuple(z.shape) != tuple(y.shape) or z.dtype != y.dtype or not _channels_last_ok(z)
                          or z.device != y.device):
        return "z: y's shape and dtype, channels-last with 16-byte aligned strides"
    return None


def fused_args(spec):
    """prepare's epilogue tuple (bias, z, alpha2, act, coef, swish_beta) of a spec (None: none)."""
    if spec is None:
        return None
    bias = None
    if spec.bias is not None:
        bias = spec.bias.reshape(-1)
        if bias.stride(0) != 1:
            bias = bias.contiguous()
    return (bias, spec.z, float(spec.alpha2), spec.act_code, float(spec.coef), float(spec.swish_beta))


def forward_candidates(problem, x, w, y, spec, device) -> list:
    """Gluon configs to time after conv_tma's for a forward problem (none off Hopper;
    for float32 the TF32 variants under TENSOR_OP math, the FMA configs under FMA math)."""
    if not _hopper(device) or forward_why_not(problem, x, w, y, spec) is not None:
        return []
    _, (kh, kw), pad, dil, stride = _geo2(problem)
    tf32, fma = _float32_kind(problem, x)
    n = gluon_common.inner_batch(x.shape[0], stride)
    if tuple(stride) != (1, 1):
        from . import gluon_conv_strided
        strided = gluon_conv_strided.picks(y.shape[3], y.shape[1], tf32, fma, n=n)
        return [dict(c, GLUON=True) for c in strided]
    z = spec.z if spec is not None else None
    return picks(y.shape[3], y.shape[1], flat_ok(x, y, kh, kw, pad) and (z is None or _dense(z)), tf32, fma,
                 dilated=max(dil) > 1, n=n)


def _float32_kind(problem, t) -> tuple:
    """(tf32, fma): which float32 configs a problem on t's dtype takes: TF32 under TENSOR_OP
    math, FMA under FMA math (neither for 16-bit data, nor under DEFAULT math: 3xTF32)."""
    import torch
    if t.dtype != torch.float32:
        return False, False
    from .geometry import input_precision
    precision = input_precision(problem)
    return precision == "tf32", precision == "ieee"


def _krsc_matrix(w):
    """The [K, KH*KW*C] matrix of a filter [K, C, KH, KW] whose memory is KRSC with dense taps
    (a view of it), else None."""
    import torch
    k, c, kh, kw = w.shape
    if (c > 1 and w.stride(1) != 1) or (kw > 1 and w.stride(3) != c) or (kh > 1 and w.stride(2) != kw * c):
        return None
    if w.data_ptr() % 16 or (k > 1 and w.stride(0) * w.element_size() % 16):
        return None
    return torch.as_strided(w, (k, kh * kw * c), (w.stride(0), 1))


def _forward_matrix(problem, w):
    """The filter matrix the loader walks: a view of a KRSC filter in cross-correlation mode,
    else a copy (CONVOLUTION mode reverses the taps)."""
    import torch
    flip = problem.mode == 0
    m = None if flip else _krsc_matrix(w)
    if m is None:
        k, c, kh, kw = w.shape
        t = torch.empty((k, kh, kw, c), dtype=w.dtype, device=w.device)
        src = w.permute(0, 2, 3, 1)
        t.copy_(src.flip((1, 2)) if flip else src)
        m = t.view(k, kh * kw * c)
    return m


# Launch records. A repeated call (the same problem object, tensors at the same addresses
# with the same strides, alpha, beta and config; no fused epilogue) launches what the
# first call prepared: the checks, the filter matrix, the descriptors and the argument
# tuple cost ~100 us of host time a call on the H200's host (session 9), several times the
# kernel of a small ResNet layer. Forward: only when the filter matrix is a view of w
# (KRSC filter, cross-correlation; a copied matrix is a new temporary each call).
# Backward data: the filter is turned every call (w may have changed), into the record's
# own turned-filter buffer, which its descriptors name (launch_backward_data; session 9
# matched a new temporary's address instead, which missed whenever another allocation
# took the freed block between calls). From its first replay on, a record launches as a
# common.Bound (arguments resolved to addresses and encoded tensor maps: one C call). A
# record holds no caller tensor (descriptors keep addresses; an absent bias is
# gluon_common.placeholder), only a backward-data record's turned filter (C*KH*KW*K
# elements, as large as the filter). On this project's CPU launch_forward costs 30 us a
# call preparing, 2 answered by its record (benchmarks/bench_conv_host_overhead.py); on
# the H200's host the whole forward call went 153 -> 24 us (sessions 9-10).
# TRIDNN_GLUON_RECORDS=0: prepare every call.
RECORD_LAUNCHES = os.environ.get("TRIDNN_GLUON_RECORDS", "1") != "0"
_RECORDS: dict = {}


def _record_key(problem, x, w, y, alpha, beta, cfg, sms) -> tuple | None:
    """The launch record key of a call (x, w, y: the call's three tensors in any roles), or
    None with the records off."""
    if not RECORD_LAUNCHES:
        return None
    return (id(problem), id(cfg), x.data_ptr(), w.data_ptr(), y.data_ptr(), x.shape, x.stride(), w.stride(),
            y.shape, y.stride(), x.dtype, x.device.index, float(alpha), float(beta), sms)


def _record(key, problem, cfg):
    return gluon_common.recorded(_RECORDS, key, problem, cfg)


def _keep(key, problem, cfg, payload):
    gluon_common.keep_record(_RECORDS, key, problem, cfg, payload)


def forward_record(problem, x, w, y, alpha, beta, cfg):
    """The record a plain forward call (no epilogue, every SM) keeps for these very tensors:
    a callable that repeats its launch, or None."""
    return _record(_record_key(problem, x, w, y, alpha, beta, cfg, None), problem, cfg)


def backward_data_record(problem, dy, w, dx, alpha, beta, cfg):
    """The same for backward data: a callable of the filter w (turned again every call)."""
    return _record(_record_key(problem, dy, w, dx, alpha, beta, cfg, None), problem, cfg)


class _Kept:
    """A record's launch: its prepared arguments, and from its first replay on (the kernel
    is compiled by then) the launch bound (common.Bound: one C call, no argument handling;
    none under the interpreter, where ``launch`` runs the kept arguments)."""
    __slots__ = ("grid", "args", "meta", "kernel", "bound")

    def __init__(self, grid, args, meta, kernel):
        self.grid, self.args, self.meta, self.kernel, self.bound = grid, args, meta, kernel, None

    def __call__(self):
        if self.bound is not None:
            self.bound()
            return
        launch(self.grid, self.args, self.meta, kernel=self.kernel)
        self.bound = gluon_common.bind(self.kernel, self.grid, self.args, self.meta, _spec(self.args))


class _KeptTurn:
    """A backward-data record: how the filter is turned, the record's own turned filter m
    (its descriptors name it), the turn's launch bound once compiled (its key fixes w's
    address and strides) with the order table it reads, and the convolution's _Kept."""
    __slots__ = ("how", "m", "bound", "launch")

    def __init__(self, how, m, launch):
        self.how, self.m, self.bound, self.launch = how, m, None, launch

    def __call__(self, w):
        """Turn w into m, then launch the convolution."""
        if self.bound is not None:
            self.bound[0]()
        else:
            from . import filter_turn
            filter_turn.turned_filter(w, out=self.m, **self.how)
            self.bound = filter_turn.bound_turn(w, self.m, **self.how)
        self.launch()


def launch_forward(problem, x, w, y, alpha, beta, cfg, spec=None, sms=None) -> bool:
    """y = alpha * conv(x, w) + beta * y through this kernel with a GLUON config; False
    (nothing launched) when the tensors do not qualify (the tuner's choice is shared by
    every layout of a problem: the caller then runs its reference config)."""
    key = _record_key(problem, x, w, y, alpha, beta, cfg, sms) if spec is None else None
    kept = _record(key, problem, cfg)
    if kept is not None:
        kept()
        return True
    if forward_why_not(problem, x, w, y, spec) is not None or not config_fits(cfg, x, problem):
        return False
    if beta != 0 and spec is not None and spec.z is not None:
        return False  # old y and z both read: the wide tiles' epilogue spills (sm_90 SASS)
    if spec is not None:
        from .epilogue import launch_args
        launch_args(spec, y, 2)  # the API's overlap checks (z may be y itself), as conv_tma's launches
    _, (kh, kw), pad, dil, stride = _geo2(problem)
    w_mat = _forward_matrix(problem, w)
    if tuple(stride) != (1, 1):
        from . import gluon_conv_strided as strided
        kernel = strided.gluon_conv_strided_kernel
        grid, args, meta, _ = strided.prepare(x, w, stride, pad, dil, cfg, y=y, alpha=alpha, sms=sms, beta=beta,
                                              epilogue=fused_args(spec), w_mat=w_mat)
    else:
        kernel = gluon_conv_fwd_kernel
        grid, args, meta, _ = prepare(x, None, pad, dil, cfg, y=y, alpha=alpha, w_mat=w_mat, sms=sms, beta=beta,
                                      kernel=(kh, kw), epilogue=fused_args(spec))
    if w_mat.data_ptr() == w.data_ptr():
        _keep(key, problem, cfg, _Kept(grid, args, meta, kernel))
    launch(grid, args, meta, kernel=kernel)
    return True


# Backward data at stride 1 is the forward convolution of dy by the filter turned 180
# degrees with K and C swapped: dx[i] = sum over taps t of dy[i + p - t*d] w[t] =
# sum over t' = T-1-t of dy[i - ((T-1)*d - p) + t'*d] w[T-1-t'], i.e. padding (T-1)*d - p.
# The turned filter [C, KH*KW*K] is a temporary copy made each call by filter_turn's kernel
# (C*KH*KW*K elements: 4.7 MB for ResNet-50's largest 3x3; torch's strided copy of the
# permuted view cost about as much as the convolution there).

# Stride s > 1 (dilation 1): one such convolution per output phase of dx, through a strided
# view of dx (dgrad_phases), from one turned filter whose column blocks are the phases'
# sub-filters; a phase no tap reaches (a filter narrower than the stride, as the 1x1
# stride-2 downsamples) is alpha * 0 + beta * dx.
# gluon_dgrad_fused runs them all in one persistent launch where dx's phase view allows it
# (FUSED_PHASES; TRIDNN_GLUON_FUSED_PHASES=0 keeps the launch a phase): on the H200
# res3/4/5_3x3s2 went 1.16-1.19 -> 0.84-0.86 of cuDNN's time (session 9).

def backward_data_why_not(problem, dy, w, dx) -> str | None:
    if problem.nd != 2 or problem.groups != 1:
        return "2-D problems with groups 1 only"
    geo, (kh, kw), _, dil, stride = _geo2(problem)
    if tuple(stride) != (1, 1) and tuple(dil) != (1, 1):
        return "stride > 1 needs dilation 1 (the phase split)"
    reason = dtype_why_not(problem, dy, w, dx)
    if reason:
        return reason
    if geo.k % 64 or geo.c % 8:
        return "output channels (dy's) a multiple of 64, input channels of 8"
    if not (_channels_last_ok(dy) and _channels_last_ok(dx)):
        return "dy and dx channels-last with 16-byte aligned strides"
    if not (dy.numel() and w.numel() and dx.numel()):
        return "empty tensors (a TMA descriptor needs every dimension positive)"
    return None


def backward_data_candidates(problem, dy, w, dx, device) -> list:
    """Gluon configs to time after conv_tma's for a backward-data problem (none off Hopper;
    for float32 the TF32 variants under TENSOR_OP math, the FMA configs under FMA math)."""
    if not _hopper(device) or backward_data_why_not(problem, dy, w, dx) is not None:
        return []
    _, (kh, kw), pad, dil, stride = _geo2(problem)
    tf32, fma = _float32_kind(problem, dy)
    n = gluon_common.inner_batch(dy.shape[0], stride)
    if tuple(stride) != (1, 1):  # the phases' outputs are strided views: no flat GEMM view
        return picks(cdiv(dx.shape[3], stride[1]), dx.shape[1], False, tf32, fma, n=n)
    bpad = ((kh - 1) * dil[0] - pad[0], (kw - 1) * dil[1] - pad[1])
    return picks(dx.shape[3], dx.shape[1], flat_ok(dy, dx, kh, kw, bpad), tf32, fma, dilated=max(dil) > 1, n=n)


def turned_filter(problem, w):
    """The [C, KH*KW*K] matrix m[c, (kh, kw, k)] = w[k, c, KH-1-kh, KW-1-kw] (cross-correlation;
    CONVOLUTION mode's forward already reverses the taps, so there they keep their order),
    made by filter_turn's copy kernel."""
    from .filter_turn import turned_filter as turn
    return turn(w, flip=problem.mode != 0)


def launch_backward_data(problem, dy, w, dx, alpha, beta, cfg, sms=None) -> bool:
    """dx = alpha * conv_transpose(dy, w) + beta * dx with a GLUON config; False (nothing
    launched) where the tensors do not qualify.

    The turned filter m is made every call (w may have changed). A repeated call (see the
    launch records above) turns w into the record's own m (its descriptors name that
    address) and launches the kept arguments. A first call's m is held here until the
    launch is queued (a descriptor keeps the address only), then by its record."""
    from .filter_turn import turned_filter as turn
    key = _record_key(problem, dy, w, dx, alpha, beta, cfg, sms)
    kept = _record(key, problem, cfg)
    if kept is not None:
        kept(w)
        return True
    if backward_data_why_not(problem, dy, w, dx) is not None or not config_fits(cfg, dy, problem):
        return False
    _, (kh, kw), pad, dil, stride = _geo2(problem)
    if tuple(stride) != (1, 1):
        from . import gluon_dgrad_fused as fused
        if not (fused.FUSED_PHASES and fused.why_not(dx, stride, cfg) is None):
            _launch_phases(problem, dy, w, dx, alpha, beta, cfg, sms, (kh, kw), pad, stride)
            return True
        from .dgrad_phases import phases  # all phases in one launch
        how = dict(order=phases((kh, kw), stride, pad, convolution=problem.mode == 0)[1])
        m = turn(w, **how)
        kernel = fused.gluon_dgrad_fused_kernel
        grid, args, meta = fused.prepare(dy, w, dx, (kh, kw), stride, pad, problem.mode == 0, cfg, alpha=alpha,
                                         beta=beta, sms=sms, m=m)
    else:
        how = dict(flip=problem.mode != 0)  # (CONVOLUTION mode's forward already reverses the taps)
        m = turn(w, **how)
        kernel = gluon_conv_fwd_kernel
        bpad = ((kh - 1) * dil[0] - pad[0], (kw - 1) * dil[1] - pad[1])
        grid, args, meta, _ = prepare(dy, None, bpad, dil, cfg, y=dx, alpha=alpha, w_mat=m, sms=sms, beta=beta,
                                      kernel=(kh, kw))
    _keep(key, problem, cfg, _KeptTurn(how, m, _Kept(grid, args, meta, kernel)))
    launch(grid, args, meta, kernel=kernel)
    return True


def _launch_phases(problem, dy, w, dx, alpha, beta, cfg, sms, kernel, pad, stride):
    """Strided backward data: each phase of dx (dgrad_phases) as a stride-1 convolution of dy
    by its column block of the phase-ordered turned filter, into its strided view of dx."""
    from .dgrad_phases import phases
    from .filter_turn import turned_filter as turn
    parts, order = phases(kernel, stride, pad, convolution=problem.mode == 0)
    m = turn(w, order=order)
    k = w.shape[0]
    for part in parts:
        (a, b), (th, tw) = part.offset, part.taps
        view = dx[:, :, a::stride[0], b::stride[1]]
        if not view.numel():  # (an image smaller than the stride: no pixel of this phase)
            continue
        if th * tw == 0:  # no tap reaches this phase (a filter narrower than the stride)
            if beta != 0:
                view.mul_(beta)
            else:
                view.zero_()
            continue
        w_mat = m[:, part.column * k:(part.column + th * tw) * k]
        grid, args, meta, _ = prepare(dy, None, part.padding, (1, 1), cfg, y=view, alpha=alpha, w_mat=w_mat,
                                      sms=sms, beta=beta, kernel=(th, tw))
        launch(grid, args, meta)


# --------------------------------------------------------------------------------------
# Offline compile (no GPU needed)
# --------------------------------------------------------------------------------------

def compile_sm90(cfg, has_beta=False, act=-1, has_bias=False, has_z=False, bias_dtype="fp32"):
    """Compile the kernel for sm_90 without a GPU; returns the CompiledKernel (asm: ptx, cubin).
    has_beta: the variant that blends the old output (beta != 0); act, has_bias, has_z:
    the fused epilogue's (bias_dtype: the bias pointer's element type). The data are
    bfloat16, or float32 for a TF32 config."""
    NB, BH, BW, BN, BK = cfg["NB"], cfg["BH"], cfg["BW"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    dt = sig_dtype(cfg)
    y_sig = _desc_sig(dt, list(pixel_order(cfg, [NB, BH, BW, BN])))
    types_ = {
        "x_desc": _desc_sig(dt, list(pixel_order(cfg, [NB, BH, BW, BK]))), "w_desc": _desc_sig(dt, [BN, BK]),
        "y_desc": y_sig, "z_desc": y_sig, "bias_ptr": "*" + bias_dtype,
        "alpha": "fp32", "beta": "fp32", "alpha2": "fp32", "coef": "fp32", "swish_beta": "fp32",
    }
    consts, cap = constexprs(cfg, has_beta, act, has_bias, has_z)
    return _compile_sm90(gluon_conv_fwd_kernel, types_, consts, cfg["num_warps"], maxnreg=cap)


def flops(n, c, k, oh, ow, kh, kw) -> float:
    return 2.0 * n * k * oh * ow * c * kh * kw


__all__ = ["gluon_conv_fwd_kernel", "conv2d", "prepare", "launch", "compile_sm90", "CONFIGS", "config", "name",
           "why_not", "filter_matrix", "shared_bytes", "flops", "tf32_config", "TF32_CONFIGS", "TF32_OFFERED"]


def sig_dtype(cfg) -> str:
    """The element type of a config's descriptors in offline compiles (bfloat16 stands for
    both 16-bit types)."""
    return "fp32" if float32_data(cfg) else "bf16"
