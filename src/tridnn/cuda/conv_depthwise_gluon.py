"""Depthwise 3x3 forward, stride 1 or 2, as a warp-specialized Gluon row walker (Hopper; tuner
candidates of DIRECT forward and of ALGO_1's stride-1 depthwise backward data, the same walk
over dy with the filter turned 180 degrees: FLIP).

Why: the Triton walkers (conv_direct's rows, conv_depthwise_strip, conv_depthwise_tma) stay
latency bound at 1.2-2.0 TB/s on MobileNetV2's layers: each program has one or two rows
of x in flight, and issuing those loads costs instructions the math needs. Here one loader
warp only issues TMA copies, keeping STAGES input rows of every program in flight, while
the consumer warps only compute. H200 probe (2026-12-01, bf16, batch 64, against cuDNN):
dw32_112 37.0 us (0.78, 2.78 TB/s), dw144_56 44.2 (0.80), dw192_28 16.2 (0.82), dw384_14
10.4 (0.88), dw576_14 15.1 (1.01), dw960_7 7.4 (0.89); outputs bit-identical to cuDNN's.

How: a work unit is NB images x RUN output rows x BWI output columns x BC channels. The
loader streams the unit's RUN + 2 input rows; each row arrives as three column-shifted
boxes [NB, 1, BWI, BC] (the windows of filter columns 0, 1, 2; TMA zero-fills padding
and everything past the image, negative coordinates included), so every window is a whole
shared-memory tile (Gluon slices shared memory only at tile-aligned offsets). The consumer
converts each window to float32 once and adds it, times the filter row's three weights
(alpha folded in), into three rolling row accumulators; the finished output row (three
input rows in) is stored with masked 16-byte stores (beta != 0: blended with the old y).
A ring slot is freed after a thread barrier (mbarrier.arrive is one thread's).

Stride 2 reads x as pixel pairs, [N, H, W/2, 2C] (x_view): input columns 2q - 1, 2q, 2q + 1
are then the boxes at pair q - 1's odd half, pair q's even and odd halves, each still a
dense box. The unit streams 2 RUN + 1 input rows; one accumulator carries filter row 0 from
the row that finishes output row o to output row o + 1.

Gluon does not run under the Triton interpreter: CI compiles the kernel for sm_90 offline
(tests/test_conv_depthwise_gluon.py); ``--gpu`` runs it against float64 on an H200.
"""
from __future__ import annotations

import os

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import gluon_common
from .gluon_common import compile_sm90 as _compile_sm90, sm_count

OFFERED = os.environ.get("TRIDNN_GLUON_DW", "1") != "0"  # TRIDNN_GLUON_DW=0: not offered to the tuner


# --------------------------------------------------------------------------------------
# Device code
# --------------------------------------------------------------------------------------

@gluon.jit
def _unit(u, STRIPS, C_BLOCKS, RUNS, BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, NB: gl.constexpr):
    """Work unit u -> (first image, first output row, first output column, first channel);
    the channel block varies fastest, so units running at once share x's rows in L2."""
    cb = u % C_BLOCKS
    r = u // C_BLOCKS
    j = r % STRIPS
    r = r // STRIPS
    run = r % RUNS
    n = r // RUNS
    return n * NB, run * RUN, j * BWI, cb * BC


@gluon.jit
def _loader(x_desc, x_bufs, ready, empty, NUM_UNITS, STRIPS, C_BLOCKS, RUNS, PAD_H, COL0, COL1, COL2, CH0, CH1, CH2,
            BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, STAGES: gl.constexpr, NB: gl.constexpr,
            STRIDE: gl.constexpr):
    """Producer (one warp): per input row of a unit, wait for a free slot, then TMA the
    row's three tap windows into it (slot s holds windows 4s, 4s+1, 4s+2). Tap kw's window
    starts at column q0 + COLkw, channel c0 + CHkw of x's view (see prepare)."""
    it = 0
    for u in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        n, o0, q0, c0 = _unit(u, STRIPS, C_BLOCKS, RUNS, BWI, BC, RUN, NB)
        row0 = o0 * STRIDE - PAD_H
        for i in range((RUN - 1) * STRIDE + 3):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), 3 * x_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(x_desc, [n, row0 + i, q0 + COL0, c0 + CH0], ready.index(s),
                                            x_bufs.index(s * 4))
            tma.async_copy_global_to_shared(x_desc, [n, row0 + i, q0 + COL1, c0 + CH1], ready.index(s),
                                            x_bufs.index(s * 4 + 1))
            tma.async_copy_global_to_shared(x_desc, [n, row0 + i, q0 + COL2, c0 + CH2], ready.index(s),
                                            x_bufs.index(s * 4 + 2))
            it += 1


@gluon.jit
def _take(x_bufs, ready, empty, it, STAGES: gl.constexpr, layout: gl.constexpr):
    """The next ring slot's three windows as float32 (the slot is freed), and it + 1."""
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    xa = x_bufs.index(s * 4).load(layout).to(gl.float32)
    xb = x_bufs.index(s * 4 + 1).load(layout).to(gl.float32)
    xc = x_bufs.index(s * 4 + 2).load(layout).to(gl.float32)
    gl.thread_barrier()  # every warp has read the slot
    mbarrier.arrive(empty.index(s))
    return xa, xb, xc, it + 1


@gluon.jit
def _store_row(y_ptr, offs, keep, o, OH, ys_h, done, beta, HAS_BETA: gl.constexpr):
    """Output row o (if inside y): done (+ beta * the old row), 16-byte stores."""
    m = keep & (o < OH)
    ptrs = y_ptr + offs + o.to(gl.int64) * ys_h
    if HAS_BETA:
        done = done + beta * gl.load(ptrs, mask=m, other=0.0).to(gl.float32)
    gl.store(ptrs, done.to(y_ptr.dtype.element_ty), mask=m)


@gluon.jit
def _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, kh: gl.constexpr, kw: gl.constexpr, FLIP: gl.constexpr):
    """alpha * w[chans, 0, kh, kw] (turned 180 degrees with FLIP) as float32 [1, 1, 1, BC]."""
    if FLIP:
        v = gl.load(w_ptr + chans * ws_k + (2 - kh) * ws_h + (2 - kw) * ws_w, mask=ok, other=0.0)
    else:
        v = gl.load(w_ptr + chans * ws_k + kh * ws_h + kw * ws_w, mask=ok, other=0.0)
    return gl.expand_dims(gl.expand_dims(gl.expand_dims(v.to(gl.float32) * alpha, 0), 0), 0)


@gluon.jit
def _consumer(y_ptr, w_ptr, x_bufs, ready, empty, alpha, beta, N, C, OH, OW, ys_n, ys_h, ys_w, ws_k, ws_h, ws_w,
              NUM_UNITS, STRIPS, C_BLOCKS, RUNS,
              BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, STAGES: gl.constexpr, NB: gl.constexpr,
              WARPS: gl.constexpr, FLIP: gl.constexpr, HAS_BETA: gl.constexpr, STRIDE: gl.constexpr):
    """The consumer warps: per unit, three rolling float32 row accumulators over its input rows."""
    # 8 channels (16 bytes of 16-bit data) a thread; threads along channels, columns, then images
    TC: gl.constexpr = BC // 8
    TW: gl.constexpr = min(32 // TC, BWI)
    WN: gl.constexpr = min(WARPS, max(1, NB // (32 // TC // TW)))
    layout: gl.constexpr = gl.BlockedLayout([1, 1, 1, 8], [32 // TC // TW, 1, TW, TC], [WN, 1, WARPS // WN, 1],
                                            [3, 2, 1, 0])
    chan_l: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(0, layout)))
    col_l: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(0, gl.SliceLayout(3, layout)))
    img_l: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, gl.SliceLayout(3, layout)))
    it = 0
    for u in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        # -- the unit's filter (alpha folded in) and output addresses
        n, o0, q0, c0 = _unit(u, STRIPS, C_BLOCKS, RUNS, BWI, BC, RUN, NB)
        chans = c0 + gl.arange(0, BC, layout=chan_l)
        ok = chans < C
        w00 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 0, 0, FLIP)
        w01 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 0, 1, FLIP)
        w02 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 0, 2, FLIP)
        w10 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 1, 0, FLIP)
        w11 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 1, 1, FLIP)
        w12 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 1, 2, FLIP)
        w20 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 2, 0, FLIP)
        w21 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 2, 1, FLIP)
        w22 = _weight(w_ptr, chans, ok, ws_k, ws_h, ws_w, alpha, 2, 2, FLIP)
        imgs = n + gl.arange(0, NB, layout=img_l)
        cols = q0 + gl.arange(0, BWI, layout=col_l)
        imgs4 = gl.expand_dims(gl.expand_dims(gl.expand_dims(imgs, 1), 2), 3)
        cols4 = gl.expand_dims(gl.expand_dims(gl.expand_dims(cols, 0), 0), 3)
        chans4 = gl.expand_dims(gl.expand_dims(gl.expand_dims(chans, 0), 0), 0)
        keep = (imgs4 < N) & (cols4 < OW) & (chans4 < C)
        offs = imgs4.to(gl.int64) * ys_n + cols4.to(gl.int64) * ys_w + chans4
        if STRIDE == 1:
            # -- walk the input rows r = o0 - 1 + i: row r finishes output row r - 1
            acc_a = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)  # output row r - 1 (two filter rows in)
            acc_b = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)  # output row r (one)
            for i in range(RUN + 2):
                xa, xb, xc, it = _take(x_bufs, ready, empty, it, STAGES, layout)
                done = acc_a + xa * w20 + xb * w21 + xc * w22
                acc_a = acc_b + xa * w10 + xb * w11 + xc * w12
                acc_b = xa * w00 + xb * w01 + xc * w02
                # output row o0 + i - 2 is finished from the third input row on
                _store_row(y_ptr, offs, keep & (i >= 2), o0 + i - 2, OH, ys_h, done, beta, HAS_BETA)
        else:
            # -- stride 2: output row o takes input rows 2o - PAD_H + 0, 1, 2; the last is
            # the first of output row o + 1, so a row after the first finishes every other one
            xa, xb, xc, it = _take(x_bufs, ready, empty, it, STAGES, layout)
            acc = xa * w00 + xb * w01 + xc * w02
            for t in range(RUN):
                xa, xb, xc, it = _take(x_bufs, ready, empty, it, STAGES, layout)
                acc = acc + xa * w10 + xb * w11 + xc * w12
                xa, xb, xc, it = _take(x_bufs, ready, empty, it, STAGES, layout)
                done = acc + xa * w20 + xb * w21 + xc * w22
                acc = xa * w00 + xb * w01 + xc * w02
                _store_row(y_ptr, offs, keep, o0 + t, OH, ys_h, done, beta, HAS_BETA)


# C and y's strides stay specialized: when they are multiples of 16 (MobileNetV2's are) a
# thread's 8 channels are one 16-byte store; unspecialized, the H200 ran eight 2-byte stores
# a thread and the kernel 3x slower (dw32_112 113 us against 37).
@gluon.jit(do_not_specialize=["N", "OH", "OW", "NUM_UNITS", "STRIPS", "C_BLOCKS", "RUNS", "PAD_H",
                              "COL0", "COL1", "COL2", "CH0", "CH1", "CH2"])
def dw3_gluon_fwd_kernel(
    # x [N, H, W, C] (stride 2: the pair view [N, H, W/2, 2C]) by TMA, box [NB, 1, BWI, BC];
    # y and the filter [C, 1, 3, 3] by pointer
    x_desc, y_ptr, w_ptr,
    alpha, beta,
    # sizes; y's strides (image, row, column; channels contiguous); the filter's (channel, row, column)
    N, C, OH, OW, ys_n, ys_h, ys_w, ws_k, ws_h, ws_w,
    # work units: ceil(N / NB) x STRIPS column strips x C_BLOCKS x RUNS row runs; padding
    NUM_UNITS, STRIPS, C_BLOCKS, RUNS, PAD_H,
    # where tap kw's window starts in x's view, relative to the unit's column and channel
    COL0, COL1, COL2, CH0, CH1, CH2,
    BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, STAGES: gl.constexpr, NB: gl.constexpr,
    num_warps: gl.constexpr, FLIP: gl.constexpr = False, HAS_BETA: gl.constexpr = False, STRIDE: gl.constexpr = 1,
):
    """y = alpha * depthwise_conv3x3(x, w) (+ beta * y), persistent and warp-specialized."""
    # a slot's three windows take 4 tiles of the ring (shared memory shapes are powers of 2)
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES * 4] + x_desc.block_type.shape, x_desc.layout)
    ready, empty = gluon_common.ring_barriers(STAGES)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (y_ptr, w_ptr, x_bufs, ready, empty, alpha, beta, N, C, OH, OW, ys_n, ys_h, ys_w,
                     ws_k, ws_h, ws_w, NUM_UNITS, STRIPS, C_BLOCKS, RUNS,
                     BWI, BC, RUN, STAGES, NB, num_warps, FLIP, HAS_BETA, STRIDE)),
        (_loader, (x_desc, x_bufs, ready, empty, NUM_UNITS, STRIPS, C_BLOCKS, RUNS, PAD_H,
                   COL0, COL1, COL2, CH0, CH1, CH2, BWI, BC, RUN, STAGES, NB, STRIDE)),
    ], [1], [40])


# --------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------

RING_BYTES = 96 * 1024  # a program's ring: two programs an SM (128 registers a consumer thread)
PER_SM = 2
MAX_REGS = 128


def config(bwi, nb, bc, run, itemsize=2):
    """A unit of nb images x run rows x bwi columns x bc channels, with as many ring stages
    (up to 8) as fit RING_BYTES (a stage: 4 tiles of nb x bwi x bc)."""
    stage = 4 * nb * bwi * bc * itemsize
    return dict(BWI=bwi, NB=nb, BC=bc, RUN=run, STAGES=max(2, min(8, RING_BYTES // stage)), num_warps=4,
                KIND="gluon")


def configs(out_h, out_w, c, itemsize=2) -> list:
    """Two candidates per layer shape, from the H200 probe's best: 32 or 64 columns a unit on
    wide images, 16 (2 images) at 14 to 28, 8 (2-4 images) below; BC 32 when the channels are
    that few (or float32), else 64. Every unit is at most 16 values a consumer thread: 128
    registers hold them with the nine weights of its 8 channels (sm_90: no spills; 32 values
    spilled 50 registers, and beta != 0 adds a few spills at 16; float32 at most 8 of
    them wide-image units, whose beta variant spilled 58 at 16)."""
    bc = 32 if c <= 32 or itemsize == 4 else 64
    run = min(out_h, 28)
    if out_w >= 56:
        shapes = [(32, 1), (64, 1)] if bc == 32 and itemsize == 2 else [(32, 1), (16, 2)]
    elif out_w >= 14:
        shapes = [(32, 1), (16, 2)] if out_w >= 28 else [(16, 2), (8, 4)]
    else:
        shapes = [(8, 4), (8, 2)]
    return [config(bwi, nb, bc, run, itemsize) for bwi, nb in shapes]


def _nhwc(t):
    """([N, H, W, C], strides) of a channels-last NCHW-indexed 4-D tensor, or None."""
    if t.dim() != 4 or (t.stride(1) != 1 and t.shape[1] > 1):
        return None
    n, c, h, w = t.shape
    return (n, h, w, c), (t.stride(0), t.stride(2), t.stride(3), 1)


def why_not(x, w, y, stride, dilation) -> str | None:
    """None when the kernel can compute y = conv(x, w) here: 2-D depthwise 3x3 (one output
    channel a group), stride 1 or 2 (2: even width and packed pixels, for the pair view),
    dilation 1; float16, bfloat16 or float32; x channels-last with 16-byte aligned strides
    (TMA), y channels-last; a Hopper GPU."""
    import torch
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32) or not (x.dtype == w.dtype == y.dtype):
        return "float16, bfloat16 or float32, all tensors alike"
    stride = tuple(stride)
    if stride not in ((1, 1), (2, 2)) or tuple(dilation) != (1, 1):
        return f"stride 1 or 2 (both ways) and dilation 1 only, not stride {stride}, dilation {tuple(dilation)}"
    if x.dim() != 4 or tuple(w.shape[1:]) != (1, 3, 3) or w.shape[0] != x.shape[1] or y.shape[1] != x.shape[1]:
        return "depthwise 3x3 with one output channel a group only"
    v = _nhwc(x)
    if v is None or x.data_ptr() % 16 or any(s * x.element_size() % 16 for s in v[1][:3]):
        return "x must be channels-last with 16-byte aligned strides (TMA)"
    if stride == (2, 2) and (x.shape[3] % 2 or v[1][2] != x.shape[1]):
        return (f"stride 2 reads x as pixel pairs: it needs an even width (not {x.shape[3]}) and "
                f"packed pixels (column stride {v[1][2]}, channels {x.shape[1]})")
    if _nhwc(y) is None:
        return "y must be channels-last"
    if x.device.type != "cuda" or torch.cuda.get_device_capability(x.device)[0] != 9:
        return "a Hopper GPU (TMA, warp specialization)"
    return None


def x_view(shape, strides, pad_w, stride):
    """(view shape, view strides, COL, CH) of x = [N, H, W, C] for the kernel: where tap kw's
    window starts (column COL[kw], channel CH[kw] of the view, relative to a unit's first
    output column and channel). Stride 1: x itself, column q - pad_w + kw. Stride 2: the pair
    view [N, H, W/2, 2C] (pixels 2p and 2p + 1 side by side), so input column
    2q - pad_w + kw is pair q + (kw - pad_w) // 2, half (kw - pad_w) % 2; each window is
    then a dense box, as in conv_depthwise_tma's phase view."""
    n, h, wd, c = shape
    if stride == 1:
        return shape, strides, [kw - pad_w for kw in range(3)], [0, 0, 0]
    view = (n, h, wd // 2, 2 * c), (strides[0], strides[1], 2 * strides[2], 1)
    return (*view, [(kw - pad_w) // 2 for kw in range(3)], [(kw - pad_w) % 2 * c for kw in range(3)])


def prepare(x, w, y, padding, cfg, alpha=1.0, beta=0.0, flip=False, sms=None, stride=1):
    """(grid, args, meta) of y = alpha * conv(x, w) + beta * y for a config (see configs)."""
    from .gluon_common import descriptor
    (n, h, wd, c), xs = _nhwc(x)
    (_, oh, ow, _), ys = _nhwc(y)
    view, view_strides, col, ch = x_view((n, h, wd, c), xs, padding[1], stride)
    bwi, nb, bc, run = cfg["BWI"], cfg["NB"], cfg["BC"], cfg["RUN"]
    x_desc = descriptor(x, view, view_strides, [nb, 1, bwi, bc], make_layout=_plain_layout)
    strips, c_blocks, runs = triton.cdiv(ow, bwi), triton.cdiv(c, bc), triton.cdiv(oh, run)
    units = triton.cdiv(n, nb) * strips * c_blocks * runs
    grid = (max(1, min(units, (sms or sm_count(x.device)) * PER_SM)),)
    args = (x_desc, y, w, float(alpha), float(beta), n, c, oh, ow, ys[0], ys[1], ys[2],
            w.stride(0), w.stride(2), w.stride(3), units, strips, c_blocks, runs, padding[0], *col, *ch)
    meta = dict(BWI=bwi, BC=bc, RUN=run, STAGES=cfg["STAGES"], NB=nb, num_warps=cfg["num_warps"],
                FLIP=bool(flip), HAS_BETA=beta != 0, STRIDE=stride)
    return grid, args, meta


def _plain_layout(block, dtype):
    """Unswizzled TMA boxes: a thread reads 16-byte runs of channels, whole pixels a warp."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=dtype.primitive_bitwidth, rank=len(block))


def launch(grid, args, meta):
    """Through gluon_common.launch (after the first launch: the compiled kernel's launcher);
    the compile depends on the data dtype and the constexprs."""
    gluon_common.launch(dw3_gluon_fwd_kernel, grid, args, dict(meta, maxnreg=MAX_REGS),
                        (args[1].dtype, args[2].dtype))


def conv(x, w, y, padding, cfg, alpha=1.0, beta=0.0, flip=False, sms=None, stride=1):
    """y = alpha * depthwise conv3x3(x, w) + beta * y at stride 1 or 2 (GPU only; see why_not)."""
    launch(*prepare(x, w, y, padding, cfg, alpha, beta, flip, sms, stride))
    return y


def compile_sm90(cfg, dtype="bf16", has_beta=False, stride=1):
    """The kernel for a config compiled for sm_90 without a GPU (CompiledKernel)."""
    gdt = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32}[dtype]
    block = [cfg["NB"], 1, cfg["BWI"], cfg["BC"]]
    desc = f"tensordesc<{dtype}[{', '.join(map(str, block))}],{_plain_layout(block, gdt)!r}>"
    types = {"x_desc": desc, "y_ptr": "*" + dtype, "w_ptr": "*" + dtype, "alpha": "fp32", "beta": "fp32"}
    consts = dict(BWI=cfg["BWI"], BC=cfg["BC"], RUN=cfg["RUN"], STAGES=cfg["STAGES"], NB=cfg["NB"],
                  num_warps=cfg["num_warps"], FLIP=False, HAS_BETA=has_beta, STRIDE=stride)
    return _compile_sm90(dw3_gluon_fwd_kernel, types, consts, cfg["num_warps"], maxnreg=MAX_REGS,
                         pointers=("y_ptr", "w_ptr", "C", "ys_n", "ys_h", "ys_w"))  # (as a layer with C % 16 == 0)


__all__ = ["dw3_gluon_fwd_kernel", "configs", "config", "why_not", "prepare", "launch", "conv", "compile_sm90",
           "OFFERED"]
