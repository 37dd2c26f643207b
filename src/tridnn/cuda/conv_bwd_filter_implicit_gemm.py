"""Backward filter in Triton: implicit GEMM with split-K over the pixels.

dw[k, c, t] = sum over n and output pixels o of dy[n, k, o] * x[n, c, o*s - p + t*d].
Per kernel tap t (and group) this is a GEMM: rows = output channels, columns = input
channels, and a long reduction over N x output pixels (e.g. 64 x 56 x 56 = 200k),
while the result is small. So the reduction is split into slices (split-K), each
program owning one (row tile, column tile, tap, slice); the A tile is dy gathered
channel-contiguous and transposed, the B tile x gathered at the tap's offset.

Slices are combined in one of two ways:
- ALGO_1 (deterministic): each slice writes a float32 partial to the workspace and
  ``wgrad_finish`` sums them in a fixed order, then blends alpha/beta into dw.
- ALGO_0 (non-deterministic): slices ``atomic_add`` into one float32 accumulator in
  the workspace (less memory, order of additions varies), then the same finish.
With few input channels per group (conv1's C = 3, below 16) one tile per tap would be
almost all padding, so the columns become (tap, input channel) pairs flattened, as in
the forward kernel's FLAT mode. CONVOLUTION mode writes each tap to its flipped
position. Depthwise problems (one
input channel per group) take conv_depthwise_backward's column-sum kernel into the
same partials and the same finish.

ALGO_1's tuner also times conv_wgrad_tma's configs after its own (the first config stays
the reference every other is checked against): on the TMA path, boxes fitted to small
images with whole tiles written straight into dw where they fill waves (SCHED); for at
most 4 input channels (conv1), the window-row GEMM over a padded copy of x (ROWS). On a
Hopper GPU the Gluon warp-specialized kernel's picks (gluon_wgrad.picks, GLUON) come last,
for 2-D 16-bit dense channels-last problems; their split partials live in the same "part"
workspace buffer (the schedule is restricted to fit it, see gluon_wgrad.schedule).
"""
from __future__ import annotations

import os

import numpy as np
import triton
import triton.language as tl

from ..types import ConvBwdFilterAlgo, MathType
from . import conv_depthwise_backward as depthwise
from . import conv_s2d, conv_tma, conv_wgrad_tma, launch_record
from ..workspace import Buffer
from .common import (TritonConvAlgorithm, Tuner, cdiv, launch, problem_key, reduction_slices, sm_count, split_rows,
                     wide, zero_fill)
from .conv_implicit_gemm import FLAT_BELOW, TC_RATE, gemm_estimate
from .geometry import geometry, input_precision, needs_int64, strides5

try:  # Gluon (Triton >= 3.5): the warp-specialized kernel, offered as extra tuner candidates
    from . import gluon_common, gluon_wgrad
    from .gluon_conv import _hopper
except ImportError:  # pragma: no cover - a Triton without Gluon
    gluon_wgrad = None

MAX_PARTIAL_BYTES = 256 << 20
DEPTHWISE_MAX_SLICES = 4096
# Dense problems take at most DENSE_SLICES slices of partials, but one whose filter gradient
# is a single output tile or a few (res2_1x1a: 64 x 64) then runs 64 programs on 132 SMs:
# float32 DEFAULT ran it in 183 us against cuDNN's 112 (H100, session 19), 103 MB at 0.56 TB/s.
# Where a slice is at most WIDE_SLICE_BYTES, the pointer kernel may take up to WIDE_SLICES (two
# waves of 148 SMs); the TMA and Gluon paths keep DENSE_SLICES (their split schedules were
# measured with it).
DENSE_SLICES = 64
WIDE_SLICES = 296
WIDE_SLICE_BYTES = 64 << 10


def dense_slice_cap(one_slice_bytes: int) -> int:
    """Most split-K slices of a dense (non-depthwise) filter gradient, by the bytes of one."""
    return WIDE_SLICES if one_slice_bytes <= WIDE_SLICE_BYTES else DENSE_SLICES


@triton.jit(do_not_specialize=['P', 'ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW', 'pix_per_split'])
def conv_wgrad_kernel(
        x_ptr, dy_ptr, part_ptr,
        P, Cg, Kg, ID, IH, IW, OD, OH, OW, KD, KH, KW,
        SD, SH, SW, PD, PH, PW, DD, DH, DW,
        xs_n, xs_c, xs_d, xs_h, xs_w,
        dys_n, dys_k, dys_d, dys_h, dys_w,
        pix_per_split,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        FLAT: tl.constexpr, ATOMIC: tl.constexpr, PREC: tl.constexpr, INT64: tl.constexpr):
    pid = tl.program_id(0)
    tg = tl.program_id(1)          # tap * groups + group; FLAT: the group
    split = tl.program_id(2)
    T = KD * KH * KW
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
        dys_n, dys_k, dys_d, dys_h, dys_w = wide((dys_n, dys_k, dys_d, dys_h, dys_w))
    if FLAT:
        # columns are (tap, input channel) pairs flattened: few channels fill a tile
        G = tl.num_programs(1)
        g = tg
        tap = 0
        NCOL = T * Cg
    else:
        G = tl.num_programs(1) // T
        g = tg % G
        tap = tg // G
        NCOL = Cg
    num_n = tl.cdiv(NCOL, BLOCK_N)
    pid_m = pid // num_n
    pid_n = pid % num_n

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)   # output channels within the group
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)   # input channels (FLAT: (tap, channel)) in the group
    mask_m = offs_m < Kg
    mask_n = offs_n < NCOL
    k_col = (g * Kg + offs_m) * dys_k
    if FLAT:
        tap_n = offs_n // Cg
        dd_n = (tap_n // (KW * KH)) * DD
        dh_n = ((tap_n // KW) % KH) * DH
        dw_n = (tap_n % KW) * DW
        c_col = (g * Cg + offs_n % Cg) * xs_c + dd_n * xs_d + dh_n * xs_h + dw_n * xs_w
    else:
        dd_n = (tap // (KW * KH)) * DD
        dh_n = ((tap // KW) % KH) * DH
        dw_n = (tap % KW) * DW
        c_col = (g * Cg + offs_n) * xs_c

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    start = split * pix_per_split
    end = tl.minimum(start + pix_per_split, P)
    for p0 in range(start, end, BLOCK_K):
        offs_p = p0 + tl.arange(0, BLOCK_K)
        mask_p = offs_p < end
        nn, od, oh, ow = split_rows(offs_p, OD, OH, OW)
        id0 = od * SD - PD
        ih0 = oh * SH - PH
        iw0 = ow * SW - PW
        dy_row = nn * dys_n + od * dys_d + oh * dys_h + ow * dys_w
        if FLAT:
            idd = id0[:, None] + dd_n[None, :]
            ih = ih0[:, None] + dh_n[None, :]
            iw = iw0[:, None] + dw_n[None, :]
            ok = (mask_p[:, None] & mask_n[None, :] & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH)
                  & (iw >= 0) & (iw < IW))
            x_row = nn * xs_n + id0 * xs_d + ih0 * xs_h + iw0 * xs_w
        else:
            idd = id0 + dd_n
            ih = ih0 + dh_n
            iw = iw0 + dw_n
            ok1 = mask_p & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
            ok = ok1[:, None] & mask_n[None, :]
            x_row = nn * xs_n + idd * xs_d + ih * xs_h + iw * xs_w
        a = tl.load(dy_ptr + k_col[:, None] + dy_row[None, :], mask=mask_m[:, None] & mask_p[None, :], other=0.0)
        b = tl.load(x_ptr + x_row[:, None] + c_col[None, :], mask=ok, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)

    # partial layout [slices, K, T, Cg] (float32); a FLAT column r = tap * Cg + c is already T x Cg
    K = Kg * G
    slot = 0 if ATOMIC else split
    if FLAT:
        rows = (slot * K + g * Kg + offs_m).to(tl.int64) * NCOL
    else:
        rows = ((slot * K + g * Kg + offs_m).to(tl.int64) * T + tap) * Cg
    ptrs = part_ptr + rows[:, None] + offs_n[None, :]
    mask = mask_m[:, None] & mask_n[None, :]
    if ATOMIC:
        tl.atomic_add(ptrs, acc, mask=mask)
    else:
        tl.store(ptrs, acc, mask=mask)


@triton.jit
def wgrad_finish(part_ptr, dw_ptr, K, T, Cg, PC, SLICES, KD, KH, KW,
                 ws_k, ws_c, ws_d, ws_h, ws_w, alpha, beta,
                 BLOCK: tl.constexpr,  # filter entries a program
                 SB: tl.constexpr,     # slices summed a step (a [SB, BLOCK] tile)
                 FLIP: tl.constexpr, BETA_ZERO: tl.constexpr):
    """dw = alpha * (sum of the slices) + beta * dw, at dw's strides. The partials are
    [SLICES, K, T, PC] with PC >= Cg (PC > Cg: channels padded for TMA). The sum's order
    is fixed by (SLICES, SB): deterministic."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = K * T * Cg
    mask = offs < total
    c = offs % Cg
    tap = (offs // Cg) % T
    k = offs // (Cg * T)
    src = (k * T + tap) * PC + c
    rows = tl.arange(0, SB)
    acc = tl.zeros((SB, BLOCK), dtype=tl.float32)
    for s0 in range(0, SLICES, SB):
        s = s0 + rows
        ok = (s < SLICES)[:, None] & mask[None, :]
        acc += tl.load(part_ptr + s[:, None] * (K * T * PC) + src[None, :], mask=ok, other=0.0)
    total_acc = tl.sum(acc, axis=0)
    tw = tap % KW
    th = (tap // KW) % KH
    td = tap // (KW * KH)
    if FLIP:
        td = KD - 1 - td
        th = KH - 1 - th
        tw = KW - 1 - tw
    ptrs = dw_ptr + k * ws_k + c * ws_c + td * ws_d + th * ws_h + tw * ws_w
    v = total_acc * alpha
    if not BETA_ZERO:
        v += beta * tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(ptrs, v.to(dw_ptr.dtype.element_ty), mask=mask)


def finish(problem, part, dw, slices, alpha, beta, part_channels=None) -> None:
    """``wgrad_finish`` over float32 partials [slices, K, taps, part_channels or Cg]."""
    geo = geometry(problem)
    total = geo.k * geo.taps * geo.cg
    block, sb = finish_tile(total, slices, dw.device)
    launch(wgrad_finish, (cdiv(total, block),), (
        part, dw, geo.k, geo.taps, geo.cg, part_channels or geo.cg, slices, *geo.ker, *strides5(dw, problem.nd),
        float(alpha), float(beta)), dict(BLOCK=block, SB=sb, FLIP=problem.mode == 0, BETA_ZERO=beta == 0), {})


FINISH_TILE = 2048  # partials a program loads a step (16 a thread at 4 warps)


def finish_tile(total: int, slices: int, device) -> tuple:
    """(BLOCK, SB) for wgrad_finish. A large filter takes 1024 entries a program, one slice a
    step. A small one with many slices (depthwise: K x 9 entries; res2_1x1a's 64 x 64 over
    264 slices) had only total / 1024 programs, each summing every slice in turn: ~2-20 us
    at a few SMs' bandwidth for what the whole GPU reads in ~1 us. There, narrower blocks
    make at least two programs an SM, and each step sums SB slices at once."""
    if device.type != "cuda":
        return 64, min(4, triton.next_power_of_2(max(1, slices)))
    block = 1024
    programs = 2 * sm_count(device)
    while block > 32 and cdiv(total, block) < programs:
        block //= 2
    if block == 1024:
        return block, 1
    return block, min(FINISH_TILE // block, triton.next_power_of_2(max(1, slices)))


def _cfg(bm, bn, bk, warps, stages):
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)


# 16-bit tiles with no register spills (sm_90, offline, 2026-12-05): every tile before them
# spills (local stores: 128x128x64 at 8 warps 12; at 4 warps 128x64x64 305, 64x128x64 53,
# 64x64x64 26, 128x128x32 270), these none (atomics and INT64 included; FLAT 2-17). This path
# is the backward filter of NCHW and other layouts TMA does not take, and ALGO_0's. Not timed.
GPU_CONFIGS_16_NO_SPILL = [_cfg(128, 64, 64, 8, 3), _cfg(64, 128, 64, 8, 3)]
GPU_CONFIGS_16 = [_cfg(128, 128, 64, 8, 3), _cfg(128, 64, 64, 4, 4), _cfg(64, 128, 64, 4, 4),
                  _cfg(64, 64, 64, 4, 4), _cfg(128, 128, 32, 4, 4)] + GPU_CONFIGS_16_NO_SPILL
# float32 tiles that keep every live value in registers: compiled for sm_90 offline
# (2026-12-05), three of the four tiles before them spill under tf32x3 (33-64 local stores:
# 128x128x32 at 8 warps, 64x128x32 and 128x64x32 at 4) and two under IEEE FMA (41-122), while
# these 8-warp tiles spill under none (atomics and FLAT included; INT64 too, except IEEE at
# 128x64x16: 7 stores). Not timed on a GPU yet: the tuner keeps the fastest.
GPU_CONFIGS_32_NO_SPILL = [_cfg(64, 64, 32, 8, 3), _cfg(128, 64, 16, 8, 3), _cfg(64, 128, 16, 8, 3)]
GPU_CONFIGS_32 = [_cfg(128, 128, 32, 8, 3), _cfg(64, 128, 32, 4, 4), _cfg(128, 64, 32, 4, 4),
                  _cfg(64, 64, 32, 4, 4)] + GPU_CONFIGS_32_NO_SPILL
INTERPRETER_CONFIG = _cfg(16, 16, 16, 1, 1)


def flat_columns(geo) -> bool:
    """Few input channels per group (conv1's C = 3): flatten (tap, channel) into the columns."""
    return geo.cg < FLAT_BELOW and geo.taps > 1


def slices_for(geo, cfg, sms, cap) -> int:
    if flat_columns(geo):
        tiles = cdiv(geo.kg, cfg["BLOCK_M"]) * cdiv(geo.taps * geo.cg, cfg["BLOCK_N"]) * geo.groups
    else:
        tiles = cdiv(geo.kg, cfg["BLOCK_M"]) * cdiv(geo.cg, cfg["BLOCK_N"]) * geo.taps * geo.groups
    return reduction_slices(tiles, geo.out_pixels, 4 * cfg["BLOCK_K"], sms, cap)


def _aligned(t) -> bool:
    """TMA: a 16-byte aligned base (the strides: channels a multiple of 8, gluon_wgrad.why_not)."""
    return t.data_ptr() % 16 == 0


def gluon_why_not(problem, x, dy, dw) -> str | None:
    """None when gluon_wgrad computes this backward-filter problem with these tensors: 2-D,
    groups 1, float16/bfloat16 x and dy (not FMA math) with float32 sums, channels multiples
    of 8, x and dy dense channels-last and 16-byte aligned, a stride the image size is a
    multiple of (x's stride-phase view), dw of any float dtype and strides (its finish and
    whole tiles write through them)."""
    import torch
    if gluon_wgrad is None:
        return "a Triton without Gluon"
    if problem.nd != 2 or problem.groups != 1:
        return "2-D problems with groups 1 only"
    if problem.dtype.itemsize != 2 or problem.math_type == MathType.FMA or problem.accumulator != np.float32:
        return "16-bit data with tensor-op math and float32 sums"
    if dw.dtype not in (torch.float16, torch.bfloat16, torch.float32) or not (x.numel() and dy.numel()
                                                                               and dw.numel()):
        return "a float dw and no empty tensors"
    if not (_aligned(x) and _aligned(dy)):
        return "x and dy 16-byte aligned"
    geo = geometry(problem)
    return gluon_wgrad.why_not(x, dy, geo.ker[1:], geo.pad[1:], geo.dil[1:], geo.stride[1:])


def gluon_candidates(problem, x, dy, dw, device) -> list:
    """Gluon configs to time after the TMA path's (none off Hopper or under the interpreter)."""
    if gluon_wgrad is None or not _hopper(device) or gluon_why_not(problem, x, dy, dw) is not None:
        return []
    geo = geometry(problem)
    flat = gluon_wgrad.flat_ok(geo.ker[1:], geo.pad[1:], geo.stride[1:])
    return gluon_wgrad.picks(geo.k, geo.c, geo.out[2], geo.taps, flat=flat, n=geo.n)


# Launch records, as gluon_conv's: a repeated call (the same problem object and config,
# x, dy, dw and the partials at the same addresses with the same strides, alpha, beta)
# queues the launches its first call bound (common.Bound: addresses and encoded tensor
# maps, no tensor held) instead of checking, scheduling and building descriptors again
# (369 us a call on the H200's host before, session 10). TRIDNN_GLUON_RECORDS=0: off.
RECORD_LAUNCHES = os.environ.get("TRIDNN_GLUON_RECORDS", "1") != "0"
_RECORDS: dict = {}


def _record_key(problem, x, dy, dw, part, alpha, beta, cfg, sms):
    if not RECORD_LAUNCHES:
        return None
    return (id(problem), id(cfg), x.data_ptr(), dy.data_ptr(), dw.data_ptr(), part.data_ptr(), part.numel(),
            x.shape, x.stride(), dy.stride(), dw.stride(), x.dtype, dw.dtype, x.device.index, float(alpha),
            float(beta), sms)


def gluon_record(problem, x, dy, dw, part, alpha, beta, cfg):
    """The bound launches a plain call (every SM) with these very tensors recorded, or None."""
    return gluon_common.recorded(_RECORDS, _record_key(problem, x, dy, dw, part, alpha, beta, cfg, None),
                                 problem, cfg)


def launch_gluon(problem, x, dy, dw, part, alpha, beta, cfg, sms=None) -> bool:
    """dw = alpha * wgrad(x, dy) + beta * dw by gluon_wgrad with a GLUON config, its split
    partials in ``part`` (the schedule fits it); False (nothing launched) when the tensors do
    not qualify (the tuner's pick is shared by every layout of a problem: the caller then
    runs its reference config)."""
    if not (x.is_cuda and dy.is_cuda and dw.is_cuda and part.is_cuda):
        return False  # (Gluon does not run under the interpreter)
    key = _record_key(problem, x, dy, dw, part, alpha, beta, cfg, sms)
    launches = gluon_common.recorded(_RECORDS, key, problem, cfg)
    if launches is not None:
        for bound_launch in launches:
            bound_launch()
        return True
    if gluon_why_not(problem, x, dy, dw) is not None:
        return False
    geo = geometry(problem)
    ws = part.reshape(-1)
    plan = gluon_wgrad.prepare(x, dy, geo.ker[1:], geo.pad[1:], geo.dil[1:], cfg, alpha, beta, dw, sms=sms,
                               ws=ws, max_partials=ws.numel(), stride=geo.stride[1:], flip=problem.mode == 0)
    gluon_wgrad.launch(plan)
    bound = gluon_wgrad.bound(plan) if key is not None else None
    if bound is not None:
        gluon_common.keep_record(_RECORDS, key, problem, cfg, bound)
    return True


def _try_gluon(problem, x, dy, dw, part, alpha, beta, cfg) -> bool:
    """launch_gluon through gluon_common.guarded_launch: a host-side failure warns and
    returns False (the caller runs its reference config)."""
    return gluon_common.guarded_launch(f"backward-filter config {gluon_wgrad.name(cfg)}", launch_gluon,
                                       problem, x, dy, dw, part, alpha, beta, cfg)


def tma_key(problem, plan):
    """The tuner's key of the TMA path."""
    return (problem_key(problem), "wgrad-tma", conv_tma.plan_kind(plan))


def tma_candidates(plan, problem, x, x_tma, dy, dw, part, sms, rows=(), device=None) -> list:
    """The TMA path's tuner list: conv_tma's configs first (the first is the tuner's
    reference), then conv_wgrad_tma's, the window-row ones (``rows``), then on Hopper the
    Gluon kernel's (not on a zero-padded copy of x). device: dw's (tests: another)."""
    device = device or dw.device
    out = (conv_tma.wgrad_candidates(plan, device, x_tma.element_size())
           + conv_wgrad_tma.candidates(plan, device, part.numel(), sms, x_tma.element_size()) + list(rows))
    if x_tma is x:
        out = out + gluon_candidates(problem, x, dy, dw, device)
    return out


class _WgradBase(TritonConvAlgorithm):
    direction = "bwd_filter"
    atomic = False

    def _tma(self, problem) -> bool:
        """Whether the TMA paths (conv_tma, conv_wgrad_tma, Gluon) are tried. Not for ALGO_0's
        atomics, and not for float32 outside tf32 (FMA or DEFAULT math): the TMA tiles, sized
        for tensor cores, ran IEEE float32 dots at 4-5 TFLOP/s (res2-4_3x3, batch 64, H100:
        2.9-3.7 ms against 0.49-0.65 ms for the pointer kernel under ALGO_0), and tf32x3 at
        0.75-0.96x the pointer kernel's speed (1x1 layers, H200, 2026-12-05: res3_1x1c 282 us
        against ALGO_0's 213, res4_ds 588 / 429, res4_1x1r 283 / 240, res5_1x1c 232 / 241)."""
        return not self.atomic and float32_efficiency(problem) == 1.0

    def _padded_channels(self, problem):
        """The channel count of x's zero-padded copy for TMA (few-channel layers on the TMA
        path); None when x is read as it is."""
        return conv_tma.padded_channels(problem) if self._tma(problem) else None

    def _part_channels(self, problem):
        """Channels of the partials: padded ones when x gets a padded copy for TMA."""
        return self._padded_channels(problem) or geometry(problem).cg

    def _slice_bytes(self, problem) -> int:
        """Bytes of one slice of float32 partials."""
        geo = geometry(problem)
        return geo.k * geo.taps * self._part_channels(problem) * 4

    def _cap(self, problem):
        """Slices of float32 partials the workspace holds. Depthwise partials are small
        (K x taps floats a slice) and its column-sum kernel needs hundreds of slices to fill
        the GPU (dw32_112: one 32-channel block), so it may take one a row of output."""
        geo = geometry(problem)
        one = self._slice_bytes(problem)
        if depthwise.routes_here(problem):
            most = min(DEPTHWISE_MAX_SLICES, geo.n * geo.out[0] * geo.out[1])
        else:
            most = dense_slice_cap(one)
        return 1 if self.atomic else max(1, min(most, MAX_PARTIAL_BYTES // max(one, 1)))

    def _through_blocks(self, problem) -> bool:
        """A stride-2 first layer through conv_s2d's blocks: ALGO_1 only (ALGO_0's atomic
        kernel on the block problem measured 570 us at conv1 bf16 batch 64 on the H200,
        against 269 for ALGO_1 without the blocks and cuDNN's 293; session 11)."""
        return not self.atomic and conv_s2d.why_not(problem) is None

    def buffers(self, problem):
        if self._through_blocks(problem):  # a stride-2 first layer: the blocks + the block problem's own
            return conv_s2d.buffers(problem) + self.buffers(conv_s2d.inner_problem(problem))
        geo = geometry(problem)
        bufs = [Buffer("part", (self._cap(problem), geo.k, geo.taps, self._part_channels(problem)), np.float32)]
        pad = self._padded_channels(problem)
        if pad:
            n, (_, h, w) = geo.n, geo.inp
            bufs.append(Buffer("x_pad", (n, h, w, pad), problem.dtype.numpy))
        # conv1: the window-row copy of x, for conv_wgrad_tma's rows kernel (beside the TMA
        # path's configs, or the pointer kernel's: ALGO_0, float32 under DEFAULT or TENSOR_OP
        # math), and on the pointer path partials for its slices (ALGO_0 keeps one slice)
        if conv_wgrad_tma.rows_applicable(problem) and (pad or conv_wgrad_tma.rows_configs(problem)):
            bufs.append(Buffer("x_rows", conv_wgrad_tma.rows_shape(problem), problem.dtype.numpy))
            if not pad:
                bufs.append(Buffer("rows_part", (conv_wgrad_tma.ROWS_MAX_SLICES, geo.k, conv_wgrad_tma.ROW_COLS),
                                   np.float32))
        return bufs

    def estimate(self, problem):
        if self._through_blocks(problem):  # the block problem as this algorithm runs it
            return conv_s2d.estimate(problem, self.estimate(conv_s2d.inner_problem(problem)))
        if depthwise.routes_here(problem):
            moved = (problem.x.size + problem.y.size) * problem.dtype.itemsize
            time = max(moved / 2.5e12, problem.flops / 30e12) + 6e-6
            return time * (DEPTHWISE_ATOMIC_COST if self.atomic else 1.0)
        if not self.atomic and problem.dtype.itemsize == 2 and conv_wgrad_tma.rows_applicable(problem):
            # conv_wgrad_tma's rows kernel (window rows as 64-byte runs, one GEMM over all
            # pixels): conv1 bf16 batch 64 measured 272.5 us on the H200 (2026-11-30 11:40 UTC,
            # sweep_wgrad.py; ALGO_0 700, cuDNN 294): ~120 TFLOP/s of its 8 x 32 padded columns
            geo = geometry(problem)
            padded = problem.flops * (conv_wgrad_tma.ROW_SLOTS * 32) / (geo.taps * geo.c)
            moved = (problem.x.size + problem.y.size) * problem.dtype.itemsize
            return padded / 120e12 + moved / 2.5e12 + 6e-6
        pad = self._padded_channels(problem)
        if pad:
            # TMA on channels zero-padded to ``pad``: conv1 (C = 3 -> 16) measured 1364 us on
            # the H200, ~59 TFLOP/s of padded work, where ALGO_0's atomic kernel took 702 us
            geo = geometry(problem)
            copy = problem.x.size * (1 + pad / geo.c) * problem.dtype.itemsize
            return problem.flops * pad / geo.c / 55e12 + copy / 3e12 + 6e-6
        efficiency = 0.8 if self.atomic else 0.85
        if geometry(problem).cg < FLAT_BELOW and input_precision(problem) == "tf32x3":
            # few channels (conv1): the flattened (tap, channel) gather bounds the kernel, not
            # the three tf32 products: float32 DEFAULT ALGO_0 measured 2187 us at batch 64 (H100,
            # session 17), 2013 at the tf32 rate, where tf32x3's rate and TF32X3_EFFICIENCY
            # said 20146 and get ranked it behind ALGO_1's 2616
            return gemm_estimate(problem, efficiency=efficiency, rate=TC_RATE[4])
        return gemm_estimate(problem, efficiency=efficiency * float32_efficiency(problem))

    def _launch(self, problem, x, dy, dw, part, alpha, beta, cfg):
        geo = geometry(problem)
        nd = problem.nd
        slices = cfg["slices"]
        if depthwise.routes_here(problem):
            if self.atomic:
                zero_fill(part)
            slices = depthwise.backward_filter_partials(problem, x, dy, part, slices, self.atomic)
            self._finish(problem, part, dw, 1 if self.atomic else slices, alpha, beta)
            return
        per = cdiv(cdiv(geo.out_pixels, slices), cfg["BLOCK_K"]) * cfg["BLOCK_K"]
        slices = cdiv(geo.out_pixels, per)
        if self.atomic:
            zero_fill(part)
        flat = flat_columns(geo)
        cols = geo.taps * geo.cg if flat else geo.cg
        grid = (cdiv(geo.kg, cfg["BLOCK_M"]) * cdiv(cols, cfg["BLOCK_N"]),
                geo.groups if flat else geo.taps * geo.groups, slices)
        launch(conv_wgrad_kernel, grid, (
            x, dy, part, geo.out_pixels, geo.cg, geo.kg, *geo.inp, *geo.out, *geo.ker, *geo.stride,
            *geo.pad, *geo.dil, *strides5(x, nd), *strides5(dy, nd), per),
            dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], FLAT=flat,
                 ATOMIC=self.atomic, PREC=input_precision(problem), INT64=needs_int64(x, dy)),
            dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
        self._finish(problem, part, dw, 1 if self.atomic else slices, alpha, beta)

    @staticmethod
    def _finish(problem, part, dw, slices, alpha, beta, part_channels=None):
        finish(problem, part, dw, slices, alpha, beta, part_channels)

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, dw, dy = tensors["x"], tensors["w"], tensors["y"]
        if "s2d_x" in workspace:  # a stride-2 first layer: the 3x3 block problem's filter gradient
            conv_s2d.run(self, problem, x, dw, dy, alpha, beta, workspace)
            return
        part = workspace["part"]
        geo = geometry(problem)
        cap = part.shape[0]
        x_tma = x
        if "x_pad" in workspace:  # few input channels: TMA reads a zero-padded channels-last copy
            x_tma = workspace["x_pad"].permute(0, 3, 1, 2)
        plan = conv_tma.backward_filter_plan(problem, x_tma, dy, dw) if self._tma(problem) else None
        if plan is not None and not depthwise.routes_here(problem):
            # the TMA and Gluon split schedules size themselves from the buffer and were tuned
            # with at most DENSE_SLICES; the wider cap (dense_slice_cap) is the pointer kernel's
            part = part[:DENSE_SLICES]
            cap = part.shape[0]
        sms = sm_count(dw.device)
        # few input channels (conv1): conv_wgrad_tma's window-row kernel, an extra candidate
        # after whichever path's own configs come first
        rows_part = workspace["rows_part"] if "rows_part" in workspace else part
        rows = (lambda: conv_wgrad_tma.rows_candidates(problem, dw.device, rows_part.numel(), sms)
                if "x_rows" in workspace else [])
        if plan is not None:  # channels-last, stride 1 or 1x1: dy and x tiles by TMA boxes

            def run_tma(c, out, a=1.0, b=0.0):
                if c.get("GLUON"):
                    if _try_gluon(problem, x, dy, out, part, a, b, c):
                        return
                    c = conv_tma.wgrad_candidates(plan, dw.device, x_tma.element_size())[0]
                if c.get("ROWS"):
                    conv_wgrad_tma.launch_rows(problem, x, dy, out, workspace["x_rows"], rows_part, c, a, b)
                    return
                if x_tma is not x:  # (inside: the tuner times each config with the copy it needs)
                    conv_tma.pad_into(x, x_tma)
                if c.get("SCHED"):  # conv_wgrad_tma: fitted boxes, whole tiles where they fill waves
                    conv_wgrad_tma.launch_sched(plan, problem, x_tma, dy, out, part, c, a, b)
                    return
                slices = conv_tma.launch_wgrad_partials(plan, problem, x_tma, dy, part, c,
                                                        conv_tma.slices_for(plan, c, sms, cap), out, a, b)
                if slices:  # else one slice wrote dw directly
                    self._finish(problem, part, out, slices, a, b, plan.c_out)
            # conv_tma's configs first (the first is the tuner's reference), then conv_wgrad_tma's,
            # Gluon's last
            cfg = self.tuner.pick(tma_key(problem, plan),
                                  lambda: tma_candidates(plan, problem, x, x_tma, dy, dw, part, sms, rows()),
                                  run_tma, dw, dw.device)
            run_tma(cfg, dw, alpha, beta)
            return
        if depthwise.routes_here(problem):
            cands = [dict(slices=depthwise.filter_slices(problem, dw.device, 65535 if self.atomic else cap))]
        elif dw.device.type != "cuda":
            cands = [dict(INTERPRETER_CONFIG, slices=3 if not self.atomic else 2)]
        else:
            base = GPU_CONFIGS_32 if problem.dtype.itemsize == 4 else GPU_CONFIGS_16
            most = dense_slice_cap(self._slice_bytes(problem)) if self.atomic else cap
            cands = [dict(c, slices=slices_for(geo, c, sms, most)) for c in base] + rows()

        def run_pointers(c, out, a=1.0, b=0.0):
            if c.get("ROWS"):
                conv_wgrad_tma.launch_rows(problem, x, dy, out, workspace["x_rows"], rows_part, c, a, b)
            else:
                self._launch(problem, x, dy, out, part, a, b, c)
        cfg = self.tuner.pick((problem_key(problem), "wgrad", self.atomic), cands, run_pointers, dw, dw.device)
        run_pointers(cfg, dw, alpha, beta)

    def replay(self, problem, tensors, workspace, alpha, beta):
        """The Gluon launch record of a call that ran on Hopper (its bound launches, queued
        again); a dry run's record (TritonConvAlgorithm.replay) for every other path."""
        launches = self._gluon_record(problem, tensors, workspace, alpha, beta)
        if launches is None:
            return super().replay(problem, tensors, workspace, alpha, beta)
        return launch_record.Replay(launches, ())

    def _gluon_record(self, problem, tensors, workspace, alpha, beta):
        if self.atomic or "s2d_x" in workspace or "x_pad" in workspace or depthwise.routes_here(problem):
            return None
        x, dw, dy = tensors["x"], tensors["w"], tensors["y"]
        plan = conv_tma.backward_filter_plan(problem, x, dy, dw) if self._tma(problem) else None
        cfg = self.tuner.chosen(tma_key(problem, plan)) if plan is not None else None
        if not cfg or not cfg.get("GLUON"):
            return None
        return gluon_record(problem, x, dy, dw, workspace["part"][:DENSE_SLICES], alpha, beta, cfg)


# ALGO_0's depthwise filter gradient against ALGO_1's: every program of a channel block adds
# into the same K x 9 accumulator, and that cost more than ALGO_1's per-slot partials and
# their (narrow-block) finish on all ten MobileNetV2 layers, 1.04-1.6x (bf16, batch 64, H100,
# 2026-12-06, bench_gpu_conv --algos all: dw960_7 20.4 against 13.6 us, dw32_112 87.3 / 54.6)
DEPTHWISE_ATOMIC_COST = 1.3
# IEEE float32 backward filter (FMA math) runs at ~0.75 of gemm_estimate's FMA rate: ALGO_0's
# pointer kernel measured 486-650 us on res2-4_3x3 at batch 64 (H100, session 15), 23-30
# TFLOP/s; ALGO_3's matmuls res4_3x3 830 us against 636 estimated
STRICT_FLOAT32_EFFICIENCY = 0.75
# float32 under DEFAULT math (tf32x3: three tf32 products a multiply) ran no faster than the
# FMA kernel: ALGO_0 / ALGO_1 res3_3x3 639 / 504 us and res5_3x3 534 / 669 us at batch 64
# (H100, 2026-12-05, step fft_bench), ~25-30 TFLOP/s where gemm_estimate's 100 TFLOP/s said
# 179-190 us, so get picked ALGO_1 over WINOGRAD_NONFUSED (292 / 207 us) there
TF32X3_EFFICIENCY = 0.3


def float32_efficiency(problem) -> float:
    """The factor on gemm_estimate's rate that float32 backward-filter GEMMs (ALGO_0/1, ALGO_3)
    measured: STRICT_FLOAT32_EFFICIENCY under FMA math, TF32X3_EFFICIENCY under DEFAULT."""
    if strict_float32(problem):
        return STRICT_FLOAT32_EFFICIENCY
    if problem.dtype.itemsize == 4 and input_precision(problem) == "tf32x3":
        return TF32X3_EFFICIENCY
    return 1.0


def strict_float32(problem) -> bool:
    """float32 data under FMA math: IEEE float32 products on CUDA cores."""
    return problem.dtype.itemsize == 4 and input_precision(problem) == "ieee"


class ImplicitGemmBackwardFilter(_WgradBase):
    """ALGO_1: split-K with a fixed-order reduction: deterministic. Channels-last problems
    with stride 1 (or a 1x1 filter) compute the partials with conv_tma's kernel."""
    enum = ConvBwdFilterAlgo.ALGO_1
    deterministic = True
    # slices change the order of long sums that cancel (a conv before batch norm): on the
    # H200 a correct config differed by > 5e-4 there; miscompiles were off by 1e-3 to 1e-2
    tuner = Tuner(tolerance=3e-3)


class AtomicBackwardFilter(_WgradBase):
    """ALGO_0: split-K slices added with float32 atomics: less workspace, not deterministic."""
    enum = ConvBwdFilterAlgo.ALGO_0
    deterministic = False
    atomic = True
    tuner = Tuner(tolerance=3e-3)  # atomics: the order of additions changes run to run
