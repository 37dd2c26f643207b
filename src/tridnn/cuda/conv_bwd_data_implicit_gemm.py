"""Backward data (ALGO_1) in Triton: implicit GEMM over the transposed problem.

dx[n, c, i] = sum over k and taps t of dy[n, k, o] * w[k, c, t], where o * stride
= i + pad - t * dilation. With stride s, the dx pixels split into s^nd phases
(i = r + s * j for r in [0, s)); within one phase, exactly the taps with
t * dilation = r + pad (mod s) contribute, with o = j + (r + pad - t * dilation) / s.
So each program takes one phase, finds that phase's taps (an arithmetic progression
per dim: first tap t0, step s / gcd(s, dilation)), and runs a dense GEMM: rows = dx
pixels of the phase, columns = input channels of a group, reduction over (valid tap,
output channel). No multiply is spent on a tap that misses, and no atomics are
needed: each dx element is written once (deterministic), blended with alpha/beta.

Depthwise problems (one input channel per group) run conv_depthwise_backward's
direct kernel instead: a GEMM tile would be almost all padding.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from ..types import ConvBwdDataAlgo
from ..workspace import Buffer
from . import conv_depthwise_backward as depthwise
from . import conv_s2d, conv_tma
from .common import TritonConvAlgorithm, Tuner, cdiv, grouped_tile, launch, problem_key, split_rows, wide
from .conv_implicit_gemm import gemm_estimate
from .epilogue import store_tile
from .geometry import geometry, input_precision, needs_int64, strides5
from .memo import IdentityMemo

try:  # Gluon (Triton >= 3.5): the warp-specialized kernel, offered as extra tuner candidates
    from . import gluon_common, gluon_conv
except ImportError:  # pragma: no cover - a Triton without Gluon
    gluon_conv = None


NONE = tl.constexpr(1 << 30)


@triton.jit
def _first_tap(r, pad, dil, s, step):
    """Smallest t in [0, step) with (r + pad - t * dil) divisible by s; NONE if none."""
    t0 = step * 0 + NONE
    for t in range(0, step):
        hit = ((r + pad - t * dil) % s == 0) & (t0 == NONE)
        t0 = tl.where(hit, t, t0)
    return t0


@triton.jit(do_not_specialize=['ID', 'IH', 'IW', 'OD', 'OH', 'OW', 'KD', 'KH', 'KW', 'N', 'SD', 'SH', 'SW', 'PD', 'PH', 'PW', 'DD', 'DH', 'DW', 'STEP_D', 'STEP_H', 'STEP_W'])
def conv_bwd_data_kernel(
        dy_ptr, w_ptr, dx_ptr,
        Cg, Kg, ID, IH, IW, OD, OH, OW, KD, KH, KW, N,
        SD, SH, SW, PD, PH, PW, DD, DH, DW, STEP_D, STEP_H, STEP_W,
        dys_n, dys_k, dys_d, dys_h, dys_w,
        ws_k, ws_c, ws_d, ws_h, ws_w,
        xs_n, xs_c, xs_d, xs_h, xs_w,
        alpha, beta,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
        FLIP: tl.constexpr, PREC: tl.constexpr, BETA_ZERO: tl.constexpr, INT64: tl.constexpr):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    phase = tl.program_id(2)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        dys_n, dys_k, dys_d, dys_h, dys_w = wide((dys_n, dys_k, dys_d, dys_h, dys_w))
        ws_k, ws_c, ws_d, ws_h, ws_w = wide((ws_k, ws_c, ws_d, ws_h, ws_w))
        xs_n, xs_c, xs_d, xs_h, xs_w = wide((xs_n, xs_c, xs_d, xs_h, xs_w))
    rw = phase % SW
    rh = (phase // SW) % SH
    rd = phase // (SW * SH)
    # this phase's dx pixels: i = r + s * j
    JD = (ID - rd + SD - 1) // SD
    JH = (IH - rh + SH - 1) // SH
    JW = (IW - rw + SW - 1) // SW
    M = N * JD * JH * JW
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(Cg, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(N * tl.cdiv(ID, SD) * tl.cdiv(IH, SH) * tl.cdiv(IW, SW), BLOCK_M),
                                num_n, GROUP_M)
    if pid_m < num_m:
        # this phase's taps, per dim: t = t0 + step * a, a < count
        td0 = _first_tap(rd, PD, DD, SD, STEP_D)
        th0 = _first_tap(rh, PH, DH, SH, STEP_H)
        tw0 = _first_tap(rw, PW, DW, SW, STEP_W)
        cnt_d = tl.where(td0 < KD, (KD - td0 + STEP_D - 1) // STEP_D, 0)
        cnt_h = tl.where(th0 < KH, (KH - th0 + STEP_H - 1) // STEP_H, 0)
        cnt_w = tl.where(tw0 < KW, (KW - tw0 + STEP_W - 1) // STEP_W, 0)
        n_taps = cnt_d * cnt_h * cnt_w

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        mask_m = offs_m < M
        mask_n = offs_n < Cg
        nn, jd, jh, jw = split_rows(offs_m, JD, JH, JW)
        dy_row = nn * dys_n + (g * Kg) * dys_k
        w_col = (g * Kg) * ws_k + offs_n * ws_c

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        n_kblk = tl.cdiv(Kg, BLOCK_K)
        for it in range(0, n_taps * n_kblk):
            tap = it // n_kblk
            k = (it % n_kblk) * BLOCK_K + offs_k
            a_w = tap % cnt_w
            a_h = (tap // cnt_w) % cnt_h
            a_d = tap // (cnt_w * cnt_h)
            td = td0 + a_d * STEP_D
            th = th0 + a_h * STEP_H
            tw = tw0 + a_w * STEP_W
            od = jd + (rd + PD - td * DD) // SD
            oh = jh + (rh + PH - th * DH) // SH
            ow = jw + (rw + PW - tw * DW) // SW
            ok = mask_m & (od >= 0) & (od < OD) & (oh >= 0) & (oh < OH) & (ow >= 0) & (ow < OW)
            mask_k = k < Kg
            a = tl.load(dy_ptr + (dy_row + od * dys_d + oh * dys_h + ow * dys_w)[:, None] + k[None, :] * dys_k,
                        mask=ok[:, None] & mask_k[None, :], other=0.0)
            if FLIP:
                td = KD - 1 - td
                th = KH - 1 - th
                tw = KW - 1 - tw
            b = tl.load(w_ptr + (td * ws_d + th * ws_h + tw * ws_w) + w_col[None, :] + k[:, None] * ws_k,
                        mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PREC)

        row_x = nn * xs_n + (rd + SD * jd) * xs_d + (rh + SH * jh) * xs_h + (rw + SW * jw) * xs_w
        store_tile(acc, row_x, row_x, g * Cg + offs_n, mask_m, mask_n, dx_ptr, xs_c, dx_ptr, 0, dx_ptr, 0,
                   alpha, beta, 0.0, 0.0, 1.0, -1, False, False, BETA_ZERO)


def _cfg(bm, bn, bk, warps, stages):
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)


GPU_CONFIGS_16 = [_cfg(128, 128, 64, 8, 3), _cfg(128, 128, 64, 4, 4), _cfg(128, 64, 64, 4, 4),
                  _cfg(64, 128, 64, 4, 4), _cfg(256, 128, 64, 8, 3), _cfg(64, 64, 64, 4, 4)]
# float32 tiles with no register spills (sm_90, offline, 2026-12-05): of the four before
# them, three spill under tf32x3 (36-70 local stores) and all four under IEEE FMA (7-35);
# these 8-warp tiles spill under no precision. Not timed on a GPU yet: the tuner keeps the fastest.
GPU_CONFIGS_32_NO_SPILL = [_cfg(128, 64, 16, 8, 3), _cfg(64, 128, 16, 8, 3)]
GPU_CONFIGS_32 = [_cfg(128, 128, 32, 8, 3), _cfg(128, 64, 32, 4, 4), _cfg(64, 128, 32, 4, 4),
                  _cfg(64, 64, 32, 4, 4)] + GPU_CONFIGS_32_NO_SPILL


def launch_bwd_data(problem, dy, w, dx, alpha, beta, cfg):
    grid, scalars, consts, options, static = _recipes.get(
        (problem, cfg), (dy.stride(), w.stride(), dx.stride(), beta == 0),
        lambda: _recipe(problem, dy, w, dx, beta, cfg))
    launch(conv_bwd_data_kernel, grid, (dy, w, dx) + scalars + (float(alpha), float(beta)), consts, options, static)


_recipes = IdentityMemo()


def _recipe(problem, dy, w, dx, beta, cfg):
    """Grid, scalar arguments and constexprs, built once per problem, strides and config."""
    geo = geometry(problem)
    nd = problem.nd
    steps = tuple(s // math.gcd(s, d) for s, d in zip(geo.stride, geo.dil))
    phases = geo.stride[0] * geo.stride[1] * geo.stride[2]
    rows_max = geo.n * math.prod(cdiv(i, s) for i, s in zip(geo.inp, geo.stride))
    grid = (cdiv(rows_max, cfg["BLOCK_M"]) * cdiv(geo.cg, cfg["BLOCK_N"]), geo.groups, phases)
    scalars = (geo.cg, geo.kg, *geo.inp, *geo.out, *geo.ker, geo.n, *geo.stride, *geo.pad, *geo.dil,
               *steps, *strides5(dy, nd), *strides5(w, nd), *strides5(dx, nd))
    consts = dict(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=8,
                  FLIP=problem.mode == 0, PREC=input_precision(problem), BETA_ZERO=beta == 0,
                  INT64=needs_int64(dy, dx))
    options = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    static = ((scalars, tuple(consts.items()), tuple(options.items()), (dy.dtype, w.dtype, dx.dtype)), 3)
    return grid, scalars, consts, options, static


def tma_candidates(plan, problem, dy, w, dx, device=None) -> list:
    """The TMA path's tuner list: conv_tma's configs (reference first), then on Hopper the
    Gluon kernel's (GLUON) at stride 1. device: dx's (tests: another)."""
    device = device or dx.device
    out = conv_tma.candidates(plan, device, problem)
    if gluon_conv is not None:
        out = out + gluon_conv.backward_data_candidates(problem, dy, w, dx, device)
    return out


def launch_tma(plan, problem, dy, w, dx, alpha, beta, cfg):
    """A TMA candidate's launch: GLUON configs by gluon_conv (conv_tma's first config where
    these tensors do not qualify or its host side fails), the rest by conv_tma.launch_conv
    (the filter read K-major)."""
    if cfg.get("GLUON"):
        if gluon_common.guarded_launch(f"backward-data config {gluon_conv.name(cfg)}",
                                       gluon_conv.launch_backward_data, problem, dy, w, dx, alpha, beta, cfg):
            return
        cfg = conv_tma.candidates(plan, dx.device, problem)[0]
    conv_tma.launch_conv(plan, problem, dy, w, dx, alpha, beta, cfg, kmajor=True)


def tma_key(problem, plan):
    """The tuner's key of the TMA path."""
    return (problem_key(problem), "bwd-data-tma", conv_tma.plan_kind(plan))


class ImplicitGemmBackwardData(TritonConvAlgorithm):
    direction = "bwd_data"
    enum = ConvBwdDataAlgo.ALGO_1
    tuner = Tuner()

    def estimate(self, problem):
        if conv_s2d.why_not(problem) is None:
            return conv_s2d.estimate(problem)
        if depthwise.routes_here(problem):
            moved = (problem.x.size + problem.y.size) * problem.dtype.itemsize
            return max(moved / 2.5e12, problem.flops / 30e12) + 4e-6
        return gemm_estimate(problem, efficiency=0.9)

    def buffers(self, problem):
        """None, except for few input channels (C = 3): a zero-padded copy of the filter
        that the TMA kernel can read (see conv_tma.padded_channels). (The Gluon candidates'
        turned filter is a temporary: gluon_conv.launch_backward_data.) Stride-2 first
        layers: the blocks of conv_s2d instead."""
        if conv_s2d.why_not(problem) is None:
            return conv_s2d.buffers(problem)
        pad = conv_tma.padded_channels(problem)
        if not pad:
            return []
        geo = geometry(problem)
        return [Buffer("w_pad", (geo.k, geo.ker[1], geo.ker[2], pad), problem.dtype.numpy)]

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        dx, w, dy = tensors["x"], tensors["w"], tensors["y"]
        if "s2d_x" in workspace:  # a stride-2 first layer: the 3x3 block problem's backward data
            conv_s2d.run(self, problem, dx, w, dy, alpha, beta, workspace)
            return
        if depthwise.routes_here(problem):  # no GEMM worth the name: the direct kernel
            depthwise.backward_data(problem, dy, w, dx, alpha, beta)
            return
        if "w_pad" in workspace:  # few input channels: TMA reads a zero-padded copy of the filter
            wp = workspace["w_pad"].permute(0, 3, 1, 2)
            plan = conv_tma.backward_data_plan(problem, dy, wp, dx)
            if plan is not None:
                w = conv_tma.pad_into(w, wp)
        else:
            plan = conv_tma.backward_data_plan(problem, dy, w, dx)
        if plan is not None:  # channels-last: forward convolutions of dy by TMA boxes
            # on Hopper, at stride 1, the Gluon kernel's configs after conv_tma's
            cfg = self.tuner.pick(tma_key(problem, plan), lambda: tma_candidates(plan, problem, dy, w, dx),
                                  lambda c, out: launch_tma(plan, problem, dy, w, out, 1.0, 0.0, c),
                                  dx, dx.device)
            launch_tma(plan, problem, dy, w, dx, alpha, beta, cfg)
            return
        if dx.device.type != "cuda":
            cands = [_cfg(16, 16, 16, 1, 1)]
        else:
            cands = GPU_CONFIGS_32 if problem.dtype.itemsize == 4 else GPU_CONFIGS_16
        cfg = self.tuner.pick((problem_key(problem), "bwd-data"), cands,
                              lambda c, out: launch_bwd_data(problem, dy, w, out, 1.0, 0.0, c), dx, dx.device)
        launch_bwd_data(problem, dy, w, dx, alpha, beta, cfg)

    def replay(self, problem, tensors, workspace, alpha, beta):
        """The Gluon launch record of a call that ran on Hopper (the filter turned again each
        call, then the kept launch); a dry run's record (TritonConvAlgorithm.replay) for
        every other path."""
        kept = self._gluon_record(problem, tensors, workspace, alpha, beta)
        if kept is None:
            return super().replay(problem, tensors, workspace, alpha, beta)
        return lambda tensors: kept(tensors["w"])

    def _gluon_record(self, problem, tensors, workspace, alpha, beta):
        if "s2d_x" in workspace or "w_pad" in workspace or depthwise.routes_here(problem):
            return None
        dx, w, dy = tensors["x"], tensors["w"], tensors["y"]
        plan = conv_tma.backward_data_plan(problem, dy, w, dx)
        cfg = self.tuner.chosen(tma_key(problem, plan)) if plan is not None else None
        if gluon_conv is None or not cfg or not cfg.get("GLUON"):
            return None
        return gluon_conv.backward_data_record(problem, dy, w, dx, alpha, beta, cfg)
