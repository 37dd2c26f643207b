"""Depthwise 3x3 stride-1 backward filter as a warp-specialized Gluon walker (Hopper; tuner
candidates of the depthwise filter gradient, conv_depthwise_backward.wgrad3_candidates).

Why: the Triton walkers for the depthwise filter gradient (dw3_wgrad_kernel, the row
walker of conv_depthwise_wgrad, conv_depthwise_tma's) ran 1.2-1.7x cuDNN's main kernel on
MobileNetV2 (session 9's profile: dw32_112 82 us, 1.25 TB/s; latency bound, one or two
rows in flight a program). Session 13's forward walker (conv_depthwise_gluon) reached 2.8
TB/s with one loader warp keeping a ring of TMA loads in flight; this is the same walk for
dw[c, kh, kw] = sum over n, o, q of dy[n, o, q, c] * x[n, o - pad_h + kh, q - pad_w + kw, c].

How: a work unit is NB images x RUN dy rows x BWI columns x BC channels (conv_depthwise_gluon's
units). Ring slot i of a unit holds x row o0 - pad_h + i as its three column-shifted windows
and, from the third slot on, dy row o0 + i - 2: then the slots i - 2, i - 1, i hold the three
x rows that dy row o0 + i - 2 meets, and the consumer frees slot i - 2 once that row is done
(each x row crosses memory once). The nine float32 accumulators [NB, 1, BWI, BC] live in
registers across all of a program's units: the grid is a multiple of the channel blocks, so
a program's units share one channel block (the channel block varies fastest in the unit
index). At the end each program reduces them over images and columns and writes its slot of
the partials part [slots, K, 9] (ATOMIC: adds into slot 0); the caller's ordered finish sums
the slots (deterministic for ALGO_1). TMA zero-fills padding and everything past the
tensors, so the loop has no masks.

Status: correct on the GPU (its tests); faster than the other kernels on narrow layers
(32 channels), so offered there by default (see MODE).

Gluon does not run under the Triton interpreter: CI compiles the kernel for sm_90 offline
(tests/test_conv_depthwise_gluon_wgrad.py); ``--gpu`` runs it against float64 on a GPU.
"""
from __future__ import annotations

import os

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import conv_depthwise_gluon, gluon_common
from .conv_depthwise_gluon import _nhwc, _plain_layout, _unit, work_units
from .gluon_common import compile_sm90 as _compile_sm90, sm_count

# When the tuner gets its configs (TRIDNN_GLUON_DW_WGRAD; never with TRIDNN_GLUON_DW=0):
# unset, only on layers of fewer than conv_depthwise_backward.WALKER_MIN_CHANNELS channels,
# where the row walker is not offered. On the H200 (2026-12-05, sweep_depthwise_wgrad.py,
# bf16 batch 64) it ran dw32_112 in 92.8 us against 121.8 for the tuner's pick without it
# (cuDNN 66.5), but lost to the row walker on every wider stride-1 layer (dw144_56 90.3 /
# 78.2, dw192_28 48.2 / 34.5, dw384_14 30.4 / 20.9, dw576_14 30.5 / 22.6; dw960_7 a tie).
# "1": every stride-1 layer; "0": never.
MODE = os.environ.get("TRIDNN_GLUON_DW_WGRAD", "auto") if conv_depthwise_gluon.OFFERED else "0"
OFFERED = MODE != "0"
EVERYWHERE = MODE == "1"

__all__ = ["dw3_gluon_wgrad_kernel", "configs", "config", "why_not", "plan_slots", "prepare", "launch", "compile_sm90",
           "OFFERED", "EVERYWHERE"]


# --------------------------------------------------------------------------------------
# Device code
# --------------------------------------------------------------------------------------

@gluon.jit
def _loader(x_desc, dy_desc, bufs, ready, empty, NUM_UNITS, STRIPS, C_BLOCKS, RUNS, PAD_H, PAD_W,
            BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, STAGES: gl.constexpr, NB: gl.constexpr):
    """Producer (one warp): slot i of a unit gets x row o0 - PAD_H + i's three windows
    (tiles 4s, 4s + 1, 4s + 2) and, for i >= 2, dy row o0 + i - 2 (tile 4s + 3)."""
    it = 0
    for u in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        n, o0, q0, c0 = _unit(u, STRIPS, C_BLOCKS, RUNS, BWI, BC, RUN, NB)
        for i in range(RUN + 2):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            if i >= 2:
                mbarrier.expect(ready.index(s), 3 * x_desc.block_type.nbytes + dy_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(dy_desc, [n, o0 + i - 2, q0, c0], ready.index(s),
                                                bufs.index(s * 4 + 3))
            else:
                mbarrier.expect(ready.index(s), 3 * x_desc.block_type.nbytes)
            for kw in gl.static_range(3):
                tma.async_copy_global_to_shared(x_desc, [n, o0 - PAD_H + i, q0 - PAD_W + kw, c0], ready.index(s),
                                                bufs.index(s * 4 + kw))
            it += 1


@gluon.jit
def _wait(ready, it, STAGES: gl.constexpr):
    """Wait for ring slot it % STAGES to land; returns the slot."""
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    return s


@gluon.jit
def _row(a0, a1, a2, g, bufs, s, layout: gl.constexpr):
    """a_kw += g * x window kw of the x row in slot s (one filter row's three taps)."""
    a0 = a0 + g * bufs.index(s * 4).load(layout).to(gl.float32)
    a1 = a1 + g * bufs.index(s * 4 + 1).load(layout).to(gl.float32)
    a2 = a2 + g * bufs.index(s * 4 + 2).load(layout).to(gl.float32)
    return a0, a1, a2


@gluon.jit
def _store_tap(part_ptr, acc, base, chans, ok, tap: gl.constexpr, ATOMIC: gl.constexpr):
    """part[slot, chans, tap] = (ATOMIC: +=) the sum of acc over images and columns."""
    v = gl.sum(gl.sum(gl.sum(acc, axis=2), axis=1), axis=0)
    ptrs = part_ptr + base + chans * 9 + tap
    if ATOMIC:
        gl.atomic_add(ptrs, v, mask=ok)
    else:
        gl.store(ptrs, v, mask=ok)


@gluon.jit
def _consumer(part_ptr, bufs, ready, empty, C, NUM_UNITS, STRIPS, C_BLOCKS, RUNS,
              BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, STAGES: gl.constexpr, NB: gl.constexpr,
              WARPS: gl.constexpr, ATOMIC: gl.constexpr):
    """The consumer warps: nine float32 accumulators over all of the program's units."""
    # 8 channels (16 bytes of 16-bit data) a thread; threads along channels, columns, then images
    TC: gl.constexpr = BC // 8
    TW: gl.constexpr = min(32 // TC, BWI)
    WN: gl.constexpr = min(WARPS, max(1, NB // (32 // TC // TW)))
    layout: gl.constexpr = gl.BlockedLayout([1, 1, 1, 8], [32 // TC // TW, 1, TW, TC], [WN, 1, WARPS // WN, 1],
                                            [3, 2, 1, 0])
    a00 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a01 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a02 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a10 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a11 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a12 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a20 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a21 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    a22 = gl.zeros([NB, 1, BWI, BC], gl.float32, layout)
    it = 0
    for u in range(gl.program_id(0), NUM_UNITS, gl.num_programs(0)):
        # -- the unit's first two x rows (no dy row yet)
        s0 = _wait(ready, it, STAGES)
        s1 = _wait(ready, it + 1, STAGES)
        it += 2
        for t in range(RUN):
            # -- dy row o0 + t against x rows in slots s0, s1, s2 (filter rows 0, 1, 2)
            s2 = _wait(ready, it, STAGES)
            g = bufs.index(s2 * 4 + 3).load(layout).to(gl.float32)
            a00, a01, a02 = _row(a00, a01, a02, g, bufs, s0, layout)
            a10, a11, a12 = _row(a10, a11, a12, g, bufs, s1, layout)
            a20, a21, a22 = _row(a20, a21, a22, g, bufs, s2, layout)
            gl.thread_barrier()  # every warp has read slot s0's x row for the last time
            mbarrier.arrive(empty.index(s0))
            s0 = s1
            s1 = s2
            it += 1
        gl.thread_barrier()
        mbarrier.arrive(empty.index(s0))
        mbarrier.arrive(empty.index(s1))
    # -- the program's sums into its slot of the partials
    c0 = (gl.program_id(0) % C_BLOCKS) * BC
    chan_l: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, layout)))
    chans = c0 + gl.arange(0, BC, layout=chan_l)
    ok = chans < C
    slot = 0 if ATOMIC else gl.program_id(0) // C_BLOCKS
    base = slot.to(gl.int64) * C * 9
    _store_tap(part_ptr, a00, base, chans, ok, 0, ATOMIC)
    _store_tap(part_ptr, a01, base, chans, ok, 1, ATOMIC)
    _store_tap(part_ptr, a02, base, chans, ok, 2, ATOMIC)
    _store_tap(part_ptr, a10, base, chans, ok, 3, ATOMIC)
    _store_tap(part_ptr, a11, base, chans, ok, 4, ATOMIC)
    _store_tap(part_ptr, a12, base, chans, ok, 5, ATOMIC)
    _store_tap(part_ptr, a20, base, chans, ok, 6, ATOMIC)
    _store_tap(part_ptr, a21, base, chans, ok, 7, ATOMIC)
    _store_tap(part_ptr, a22, base, chans, ok, 8, ATOMIC)


@gluon.jit(do_not_specialize=["C", "NUM_UNITS", "STRIPS", "C_BLOCKS", "RUNS", "PAD_H", "PAD_W"])
def dw3_gluon_wgrad_kernel(
    # x [N, H, W, C] and dy [N, OH, OW, C] by TMA, box [NB, 1, BWI, BC]; float32 partials [slots, C, 9]
    x_desc, dy_desc, part_ptr,
    C,
    # work units: ceil(N / NB) x STRIPS column strips x C_BLOCKS x RUNS row runs; padding
    NUM_UNITS, STRIPS, C_BLOCKS, RUNS, PAD_H, PAD_W,
    BWI: gl.constexpr, BC: gl.constexpr, RUN: gl.constexpr, STAGES: gl.constexpr, NB: gl.constexpr,
    num_warps: gl.constexpr, ATOMIC: gl.constexpr = False,
):
    """part[program's slot, c, 3 kh + kw] = its units' sum of dy * x at tap (kh, kw); the grid
    must be a multiple of C_BLOCKS (a program keeps one channel block)."""
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES * 4] + x_desc.block_type.shape, x_desc.layout)
    ready, empty = gluon_common.ring_barriers(STAGES)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (part_ptr, bufs, ready, empty, C, NUM_UNITS, STRIPS, C_BLOCKS, RUNS,
                     BWI, BC, RUN, STAGES, NB, num_warps, ATOMIC)),
        (_loader, (x_desc, dy_desc, bufs, ready, empty, NUM_UNITS, STRIPS, C_BLOCKS, RUNS, PAD_H, PAD_W,
                   BWI, BC, RUN, STAGES, NB)),
    ], [1], [40])


# --------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------

RING_BYTES = 96 * 1024  # a program's ring: two programs an SM
PER_SM = 2
MAX_REGS = 128
MIN_STAGES = 4  # three slots held (the x rows of the dy row in hand) and one loading


def config(bwi, nb, bc, run, itemsize=2):
    """A unit of nb images x run dy rows x bwi columns x bc channels, with as many ring
    stages (up to 8) as fit RING_BYTES (a stage: 4 tiles of nb x bwi x bc)."""
    stage = 4 * nb * bwi * bc * itemsize
    return dict(BWI=bwi, NB=nb, BC=bc, RUN=run, STAGES=max(MIN_STAGES, min(8, RING_BYTES // stage)), num_warps=4,
                KIND="gluon")


def configs(out_h, out_w, c, itemsize=2) -> list:
    """Two candidates a layer (long and short row runs): 8 values a consumer thread in each
    of the nine accumulators (72 registers; 16 spilled in the forward's tests), so 16
    pixels of 64 channels or 32 of 32 (float32, or at most 32 channels); wide images take
    them from one image row, narrow ones (< 14 columns) from 2-4 images."""
    bc = 32 if c <= 32 or itemsize == 4 else 64
    pixels = 1024 // bc
    bwi = min(pixels, 16 if out_w >= 14 else 8)
    nb = pixels // bwi
    return [config(bwi, nb, bc, run, itemsize) for run in sorted({min(out_h, 28), min(out_h, 8)}, reverse=True)]


def why_not(x, dy, stride, padding, dilation) -> str | None:
    """None when the kernel can compute the filter gradient of a 2-D depthwise 3x3
    convolution (one output channel a group) here: stride 1, dilation 1; float16, bfloat16
    or float32; x and dy channels-last with 16-byte aligned strides (TMA); a Hopper GPU."""
    import torch
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32) or x.dtype != dy.dtype:
        return "float16, bfloat16 or float32, x and dy alike"
    if tuple(stride) != (1, 1) or tuple(dilation) != (1, 1):
        return f"stride 1 and dilation 1 only, not stride {tuple(stride)}, dilation {tuple(dilation)}"
    if x.dim() != 4 or dy.dim() != 4 or dy.shape[1] != x.shape[1]:
        return "2-D depthwise with one output channel a group only"
    for name, t in (("x", x), ("dy", dy)):
        v = _nhwc(t)
        if v is None or t.data_ptr() % 16 or any(s * t.element_size() % 16 for s in v[1][:3]):
            return f"{name} must be channels-last with 16-byte aligned strides (TMA)"
    if x.device.type != "cuda" or torch.cuda.get_device_capability(x.device)[0] != 9:
        return "a Hopper GPU (TMA, warp specialization)"
    return None


def plan_slots(n, oh, ow, c, cfg, cap, sms) -> int:
    """Programs a channel block (= partial slots): PER_SM programs an SM in all, at most
    ``cap`` (the partial buffer's slots) and at most one a unit."""
    units, _, c_blocks, _ = work_units(n, oh, ow, c, cfg)
    return max(1, min(cap, (sms * PER_SM) // c_blocks, units // c_blocks))


def prepare(x, dy, part, padding, cfg, cap, atomic=False, sms=None):
    """(grid, args, meta, slots) of a launch into part [slots, C, 9] (see launch)."""
    from .gluon_common import descriptor
    (n, h, wd, c), xs = _nhwc(x)
    (_, oh, ow, _), ds = _nhwc(dy)
    block = [cfg["NB"], 1, cfg["BWI"], cfg["BC"]]
    x_desc = descriptor(x, (n, h, wd, c), xs, block, make_layout=_plain_layout)
    dy_desc = descriptor(dy, (n, oh, ow, c), ds, block, make_layout=_plain_layout)
    units, strips, c_blocks, runs = work_units(n, oh, ow, c, cfg)
    slots = plan_slots(n, oh, ow, c, cfg, cap, sms or sm_count(x.device))
    args = (x_desc, dy_desc, part, c, units, strips, c_blocks, runs, padding[0], padding[1])
    meta = dict(BWI=cfg["BWI"], BC=cfg["BC"], RUN=cfg["RUN"], STAGES=cfg["STAGES"], NB=cfg["NB"],
                num_warps=cfg["num_warps"], ATOMIC=bool(atomic))
    return (slots * c_blocks,), args, meta, slots


def launch(x, dy, part, padding, cfg, cap, atomic=False, sms=None) -> int:
    """part [slots, C, 9] (float32) = the programs' partial sums of the filter gradient
    (atomic: added into slot 0, zeroed by the caller); returns the slots written (GPU only;
    see why_not)."""
    grid, args, meta, slots = prepare(x, dy, part, padding, cfg, cap, atomic, sms)
    gluon_common.launch(dw3_gluon_wgrad_kernel, grid, args, dict(meta, maxnreg=MAX_REGS), (x.dtype, part.dtype))
    return 1 if atomic else slots


def compile_sm90(cfg, dtype="bf16", atomic=False):
    """The kernel for a config compiled for sm_90 without a GPU (CompiledKernel)."""
    block = [cfg["NB"], 1, cfg["BWI"], cfg["BC"]]
    desc = gluon_common.desc_sig(dtype, block, _plain_layout)
    types = {"x_desc": desc, "dy_desc": desc, "part_ptr": "*fp32"}
    consts = dict(BWI=cfg["BWI"], BC=cfg["BC"], RUN=cfg["RUN"], STAGES=cfg["STAGES"], NB=cfg["NB"],
                  num_warps=cfg["num_warps"], ATOMIC=atomic)
    return _compile_sm90(dw3_gluon_wgrad_kernel, types, consts, cfg["num_warps"], maxnreg=MAX_REGS,
                         pointers=("part_ptr",))
