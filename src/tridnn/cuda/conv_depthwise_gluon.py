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

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import gluon_common
from .common import cdiv
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
def _loader(x_desc, x_bufs, ready, empty, NUM_UNITS, STRIPS, C_BLOCKS, RUNS, ROW0, COL0, COL1, COL2, CH0, CH1, CH2,
            BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, STAGES: gl.constexpr, NB: gl.constexpr,
            ROW_STEP: gl.constexpr, ROWS: gl.constexpr, WINDOWS: gl.constexpr):
    """Producer (one warp): per input row of a unit (ROWS rows from row o0 * ROW_STEP +
    ROW0), wait for a free slot, then TMA the row's WINDOWS (2 or 3) windows into it.
    Window k starts at column q0 + COLk, channel c0 + CHk of x's view (see prepare)."""
    SLOT: gl.constexpr = 4 if WINDOWS == 3 else 2  # tiles a slot (shared memory shapes are powers of 2)
    it = 0
    for u in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        n, o0, q0, c0 = _unit(u, STRIPS, C_BLOCKS, RUNS, BWI, BC, RUN, NB)
        row0 = o0 * ROW_STEP + ROW0
        for i in range(ROWS):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), WINDOWS * x_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(x_desc, [n, row0 + i, q0 + COL0, c0 + CH0], ready.index(s),
                                            x_bufs.index(s * SLOT))
            tma.async_copy_global_to_shared(x_desc, [n, row0 + i, q0 + COL1, c0 + CH1], ready.index(s),
                                            x_bufs.index(s * SLOT + 1))
            if WINDOWS == 3:
                tma.async_copy_global_to_shared(x_desc, [n, row0 + i, q0 + COL2, c0 + CH2], ready.index(s),
                                                x_bufs.index(s * SLOT + 2))
            it += 1


@gluon.jit
def _take(x_bufs, ready, empty, it, STAGES: gl.constexpr, layout: gl.constexpr, WINDOWS: gl.constexpr = 3):
    """The next ring slot's windows as float32 (the slot is freed), and it + 1 (two
    windows: the third returned is the second again)."""
    SLOT: gl.constexpr = 4 if WINDOWS == 3 else 2
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    xa = x_bufs.index(s * SLOT).load(layout).to(gl.float32)
    xb = x_bufs.index(s * SLOT + 1).load(layout).to(gl.float32)
    xc = xb
    if WINDOWS == 3:
        xc = x_bufs.index(s * SLOT + 2).load(layout).to(gl.float32)
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
              WARPS: gl.constexpr, FLIP: gl.constexpr, HAS_BETA: gl.constexpr, STRIDE: gl.constexpr,
              DATA: gl.constexpr):
    """The consumer warps: per unit, rolling float32 row accumulators over its input rows
    (DATA: stride-2 backward data, x = dy, y = dx; the unit's columns are dx's column pairs)."""
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
        if DATA:  # the even columns of the unit's pairs (the odd ones: one column on)
            cols = 2 * (q0 + gl.arange(0, BWI, layout=col_l))
        else:
            cols = q0 + gl.arange(0, BWI, layout=col_l)
        imgs4 = gl.expand_dims(gl.expand_dims(gl.expand_dims(imgs, 1), 2), 3)
        cols4 = gl.expand_dims(gl.expand_dims(gl.expand_dims(cols, 0), 0), 3)
        chans4 = gl.expand_dims(gl.expand_dims(gl.expand_dims(chans, 0), 0), 0)
        keep = (imgs4 < N) & (cols4 < OW) & (chans4 < C)
        offs = imgs4.to(gl.int64) * ys_n + cols4.to(gl.int64) * ys_w + chans4
        if DATA:
            # -- stride-2 backward data, padding 1: dy row m (windows a = dy[m, p], b = dy[m,
            # p + 1]) gives dx row 2m by filter row 1 alone and dx row 2m - 1 by row 0, with
            # dy row m - 1 by row 2 (carried); in each, dx column 2p = a w1, 2p + 1 = b w0 + a w2
            keep_odd = (imgs4 < N) & (cols4 + 1 < OW) & (chans4 < C)
            xa, xb, _, it = _take(x_bufs, ready, empty, it, STAGES, layout, 2)  # dy row o0 - 1
            carry_e = xa * w21
            carry_o = xb * w20 + xa * w22
            for t in range(RUN):
                row = 2 * (o0 + t)
                xa, xb, _, it = _take(x_bufs, ready, empty, it, STAGES, layout, 2)
                _store_row(y_ptr, offs, keep & (row >= 1), row - 1, OH, ys_h, carry_e + xa * w01, beta, HAS_BETA)
                _store_row(y_ptr, offs + ys_w, keep_odd & (row >= 1), row - 1, OH, ys_h,
                           carry_o + xb * w00 + xa * w02, beta, HAS_BETA)
                _store_row(y_ptr, offs, keep, row, OH, ys_h, xa * w11, beta, HAS_BETA)
                _store_row(y_ptr, offs + ys_w, keep_odd, row, OH, ys_h, xb * w10 + xa * w12, beta, HAS_BETA)
                carry_e = xa * w21
                carry_o = xb * w20 + xa * w22
        elif STRIDE == 1:
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
    DATA: gl.constexpr = False,
):
    """y = alpha * depthwise_conv3x3(x, w) (+ beta * y), persistent and warp-specialized;
    DATA: dx = alpha * the stride-2 backward data of dy = x (+ beta * dx)."""
    # a unit's input rows, their windows a row, and a slot's tiles (a power of 2: shared
    # memory shapes are); DATA: dy rows o0 - 1 .. o0 + RUN - 1, windows at pairs p and p + 1
    ROWS: gl.constexpr = RUN + 1 if DATA else (RUN - 1) * STRIDE + 3
    ROW_STEP: gl.constexpr = 1 if DATA else STRIDE
    WINDOWS: gl.constexpr = 2 if DATA else 3
    SLOT: gl.constexpr = 2 if DATA else 4
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES * SLOT] + x_desc.block_type.shape, x_desc.layout)
    ready, empty = gluon_common.ring_barriers(STAGES)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (y_ptr, w_ptr, x_bufs, ready, empty, alpha, beta, N, C, OH, OW, ys_n, ys_h, ys_w,
                     ws_k, ws_h, ws_w, NUM_UNITS, STRIPS, C_BLOCKS, RUNS,
                     BWI, BC, RUN, STAGES, NB, num_warps, FLIP, HAS_BETA, STRIDE, DATA)),
        (_loader, (x_desc, x_bufs, ready, empty, NUM_UNITS, STRIPS, C_BLOCKS, RUNS, -PAD_H,
                   COL0, COL1, COL2, CH0, CH1, CH2, BWI, BC, RUN, STAGES, NB, ROW_STEP, ROWS, WINDOWS)),
    ], [1], [40])


# --------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------

RING_BYTES = 96 * 1024  # a program's ring: two programs an SM (128 registers a consumer thread)
PER_SM = 2
MAX_REGS = 128


def config(bwi, nb, bc, run, itemsize=2, data=False):
    """A unit of nb images x run rows x bwi columns x bc channels, with as many ring stages
    (up to 8) as fit RING_BYTES (a stage: 4 tiles of nb x bwi x bc; data: 2)."""
    stage = (2 if data else 4) * nb * bwi * bc * itemsize
    return dict(BWI=bwi, NB=nb, BC=bc, RUN=run, STAGES=max(2, min(8, RING_BYTES // stage)), num_warps=4,
                KIND="gluon")


def configs(out_h, out_w, c, itemsize=2, data=False) -> list:
    """Two candidates per layer shape, from the H200 probe's best: 32 or 64 columns a unit on
    wide images, 16 (2 images) at 14 to 28, 8 (2-4 images) below; BC 32 when the channels are
    that few (or float32), else 64. Every unit is at most 16 values a consumer thread: 128
    registers hold them with the nine weights of its 8 channels (sm_90: no spills; 32 values
    spilled 50 registers, and beta != 0 adds a few spills at 16; float32 at most 8 of
    them wide-image units, whose beta variant spilled 58 at 16). data: stride-2 backward
    data (out_h, out_w: dy's rows and columns; a unit's columns are dx's column pairs)."""
    bc = 32 if c <= 32 or itemsize == 4 else 64
    run = min(out_h, 28)
    if out_w >= 56:
        shapes = [(32, 1), (64, 1)] if bc == 32 and itemsize == 2 else [(32, 1), (16, 2)]
    elif out_w >= 14:
        shapes = [(32, 1), (16, 2)] if out_w >= 28 else [(16, 2), (8, 4)]
    else:
        shapes = [(8, 4), (8, 2)]
    return [config(bwi, nb, bc, run, itemsize, data) for bwi, nb in shapes]


def work_units(n, rows, cols, c, cfg) -> tuple:
    """(units, column strips, channel blocks, row runs) of a walk over n images x rows x
    cols x c channels in cfg's units (NB images, RUN rows, BWI columns, BC channels), in
    plain integers (a launch path: triton.cdiv costs ~2 us a call)."""
    strips, c_blocks, runs = cdiv(cols, cfg["BWI"]), cdiv(c, cfg["BC"]), cdiv(rows, cfg["RUN"])
    return cdiv(n, cfg["NB"]) * strips * c_blocks * runs, strips, c_blocks, runs


def _grid(units, device, sms):
    """The persistent grid: PER_SM programs an SM, at most one a unit."""
    return (max(1, min(units, (sms or sm_count(device)) * PER_SM)),)


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


def why_not_data(dy, w, dx, stride, padding, dilation) -> str | None:
    """None when the kernel's DATA walk can compute dx = the backward data of dy here:
    2-D depthwise 3x3 at stride 2, padding 1, dilation 1 (dy's rows and columns then
    ceil(dx's / 2)); the same dtypes, layouts and GPU as the forward (why_not)."""
    if tuple(stride) != (2, 2) or tuple(padding) != (1, 1) or tuple(dilation) != (1, 1):
        return (f"stride-2 backward data with padding 1 and dilation 1 only, not stride {tuple(stride)}, "
                f"padding {tuple(padding)}, dilation {tuple(dilation)}")
    if dy.dim() == 4 and dx.dim() == 4 and tuple(dy.shape[2:]) != tuple((s + 1) // 2 for s in dx.shape[2:]):
        return f"dy {tuple(dy.shape)} is not the stride-2 output of dx {tuple(dx.shape)}"
    return why_not(dy, w, dx, (1, 1), (1, 1))


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
    units, strips, c_blocks, runs = work_units(n, oh, ow, c, cfg)
    grid = _grid(units, x.device, sms)
    args = (x_desc, y, w, float(alpha), float(beta), n, c, oh, ow, ys[0], ys[1], ys[2],
            w.stride(0), w.stride(2), w.stride(3), units, strips, c_blocks, runs, padding[0], *col, *ch)
    meta = dict(BWI=bwi, BC=bc, RUN=run, STAGES=cfg["STAGES"], NB=nb, num_warps=cfg["num_warps"],
                FLIP=bool(flip), HAS_BETA=beta != 0, STRIDE=stride, DATA=False)
    return grid, args, meta


def prepare_data(dy, w, dx, cfg, alpha=1.0, beta=0.0, flip=False, sms=None):
    """(grid, args, meta) of dx = alpha * the stride-2, padding-1 backward data of dy + beta * dx
    (see why_not_data): units over dy's row steps 0 .. H // 2 and dx's column pairs."""
    from .gluon_common import descriptor
    (n, oh, ow, c), dys = _nhwc(dy)
    (_, h, wd, _), dxs = _nhwc(dx)
    bwi, nb, bc, run = cfg["BWI"], cfg["NB"], cfg["BC"], cfg["RUN"]
    dy_desc = descriptor(dy, (n, oh, ow, c), dys, [nb, 1, bwi, bc], make_layout=_plain_layout)
    units, strips, c_blocks, runs = work_units(n, h // 2 + 1, cdiv(wd, 2), c, cfg)
    grid = _grid(units, dy.device, sms)
    args = (dy_desc, dx, w, float(alpha), float(beta), n, c, h, wd, dxs[0], dxs[1], dxs[2],
            w.stride(0), w.stride(2), w.stride(3), units, strips, c_blocks, runs, 1, 0, 1, 0, 0, 0, 0)
    meta = dict(BWI=bwi, BC=bc, RUN=run, STAGES=cfg["STAGES"], NB=nb, num_warps=cfg["num_warps"],
                FLIP=bool(flip), HAS_BETA=beta != 0, STRIDE=2, DATA=True)
    return grid, args, meta


def conv_data(dy, w, dx, cfg, alpha=1.0, beta=0.0, flip=False, sms=None):
    """dx = alpha * the stride-2 backward data of dy (3x3 depthwise, padding 1) + beta * dx
    (GPU only; see why_not_data). flip: the filter is turned (CONVOLUTION mode)."""
    launch(*prepare_data(dy, w, dx, cfg, alpha, beta, flip, sms))
    return dx


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


def compile_sm90(cfg, dtype="bf16", has_beta=False, stride=1, data=False):
    """The kernel for a config compiled for sm_90 without a GPU (CompiledKernel)."""
    gdt = {"bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32}[dtype]
    block = [cfg["NB"], 1, cfg["BWI"], cfg["BC"]]
    desc = f"tensordesc<{dtype}[{', '.join(map(str, block))}],{_plain_layout(block, gdt)!r}>"
    types = {"x_desc": desc, "y_ptr": "*" + dtype, "w_ptr": "*" + dtype, "alpha": "fp32", "beta": "fp32"}
    consts = dict(BWI=cfg["BWI"], BC=cfg["BC"], RUN=cfg["RUN"], STAGES=cfg["STAGES"], NB=cfg["NB"],
                  num_warps=cfg["num_warps"], FLIP=False, HAS_BETA=has_beta, STRIDE=2 if data else stride, DATA=data)
    return _compile_sm90(dw3_gluon_fwd_kernel, types, consts, cfg["num_warps"], maxnreg=MAX_REGS,
                         pointers=("y_ptr", "w_ptr", "C", "ys_n", "ys_h", "ys_w"))  # (as a layer with C % 16 == 0)


__all__ = ["dw3_gluon_fwd_kernel", "configs", "config", "why_not", "why_not_data", "x_view", "prepare",
           "prepare_data", "launch", "conv", "conv_data", "compile_sm90", "OFFERED"]
