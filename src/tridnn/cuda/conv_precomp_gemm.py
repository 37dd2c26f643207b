"""IMPLICIT_PRECOMP_GEMM forward convolution in Triton: implicit GEMM with its gather
offsets precomputed into the workspace.

A small kernel first writes two tables: for every output pixel, the x offset where
its receptive field starts and its first input coordinates; for every kernel tap,
the x offset delta, the coordinate deltas and the filter offset (CONVOLUTION mode's
flip is folded in here). The GEMM kernel (conv_implicit_gemm.conv_fwd_kernel with
PRECOMP) then does no index arithmetic beyond adds and bounds checks. Because it has a
workspace anyway, this algorithm also splits the reduction (split-K) when the output
is too small to fill the GPU; the float32 partials live in the workspace and are
summed in a fixed order (deterministic).
"""
from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import TritonConvAlgorithm, Tuner, cdiv, launch, problem_key, split_rows
from . import conv_s2d, conv_tma
from .conv_implicit_gemm import candidates, gemm_estimate, launch_forward, max_split, run_tma_forward
from .epilogue import spec_of
from .geometry import geometry, strides5
from .memo import IdentityMemo

OFFSET = 1 << 20  # coordinates are stored biased by this, 21 bits each


@triton.jit
def precomp_tables_kernel(rows_ptr, taps_ptr, M, T, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW,
                          DD, DH, DW, xs_n, xs_d, xs_h, xs_w, ws_d, ws_h, ws_w,
                          FLIP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m_ok = offs < M
    nn, od, oh, ow = split_rows(offs, OD, OH, OW)
    id0 = od * SD - PD
    ih0 = oh * SH - PH
    iw0 = ow * SW - PW
    x_row = nn.to(tl.int64) * xs_n + id0.to(tl.int64) * xs_d + ih0.to(tl.int64) * xs_h + iw0.to(tl.int64) * xs_w
    packed = (((id0 + 1048576).to(tl.int64) << 42) | ((ih0 + 1048576).to(tl.int64) << 21)
              | (iw0 + 1048576).to(tl.int64))
    tl.store(rows_ptr + offs.to(tl.int64) * 2, x_row, mask=m_ok)
    tl.store(rows_ptr + offs.to(tl.int64) * 2 + 1, packed, mask=m_ok)

    t_ok = offs < T
    kw = offs % KW
    kh = (offs // KW) % KH
    kd = offs // (KW * KH)
    dd = kd * DD
    dh = kh * DH
    dw = kw * DW
    x_delta = dd.to(tl.int64) * xs_d + dh.to(tl.int64) * xs_h + dw.to(tl.int64) * xs_w
    tpack = (dd.to(tl.int64) << 42) | (dh.to(tl.int64) << 21) | dw.to(tl.int64)
    if FLIP:
        kd = KD - 1 - kd
        kh = KH - 1 - kh
        kw = KW - 1 - kw
    w_off = kd.to(tl.int64) * ws_d + kh.to(tl.int64) * ws_h + kw.to(tl.int64) * ws_w
    tl.store(taps_ptr + offs * 3, x_delta, mask=t_ok)
    tl.store(taps_ptr + offs * 3 + 1, tpack, mask=t_ok)
    tl.store(taps_ptr + offs * 3 + 2, w_off, mask=t_ok)


def _tables_recipe(problem, x, w, device):
    geo = geometry(problem)
    xs, ws = strides5(x, problem.nd), strides5(w, problem.nd)
    block = 256 if device.type == "cuda" else 64
    scalars = (geo.out_pixels, geo.taps, *geo.out, *geo.ker, *geo.stride, *geo.pad, *geo.dil,
               xs[0], *xs[2:], *ws[2:])
    consts = dict(FLIP=problem.mode == 0, BLOCK=block)
    return (cdiv(max(geo.out_pixels, geo.taps), block),), scalars, consts, ((scalars, tuple(consts.items())), 2)


_tables_recipes = IdentityMemo()


def _implicit_gemm():
    """IMPLICIT_GEMM forward, whose ``run`` computes conv_s2d's block problem."""
    from ..algorithms import registry
    return registry.by_enum("conv", "fwd", "triton", ConvFwdAlgo.IMPLICIT_GEMM)


class PrecompGemmForward(TritonConvAlgorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.IMPLICIT_PRECOMP_GEMM
    tuner = Tuner()

    def not_applicable(self, problem):
        reason = super().not_applicable(problem)
        if reason is None and max(problem.in_spatial) + max(problem.pad_pre) >= OFFSET:
            reason = f"spatial sizes must stay below {OFFSET} for the packed offset tables"
        return reason

    def _split_cap(self, problem):
        # the workspace is sized before the device is known; the GPU bound covers both
        return max(max_split(problem, geometry(problem)), 2)

    def buffers(self, problem):
        if conv_s2d.why_not(problem) is None:  # a stride-2 first layer: 4x4 pixel blocks
            return conv_s2d.buffers(problem)
        geo = geometry(problem)
        bufs = [Buffer("rows", (geo.out_pixels, 2), np.int64), Buffer("taps", (geo.taps, 3), np.int64)]
        pad = conv_tma.padded_channels(problem)
        if pad:  # few input channels (a first layer): channel-padded copies for the TMA kernel
            (_, h, w), (_, r, s) = geo.inp, geo.ker
            bufs += [Buffer("x_pad", (geo.n, h, w, pad), problem.dtype.numpy),
                     Buffer("w_pad", (geo.k, r, s, pad), problem.dtype.numpy)]
        split = self._split_cap(problem)
        if split > 1:
            bufs.append(Buffer("part", (split, geo.out_pixels, geo.k), np.float32))
        return bufs

    def estimate(self, problem):
        if conv_s2d.why_not(problem) is None:
            return conv_s2d.estimate(problem)
        geo = geometry(problem)
        pad = conv_tma.padded_channels(problem)
        if pad:  # tensor-core work on the padded channels, plus the copy of x
            # conv1 (C = 3 -> 16) bf16 batch 64 on the H200: 656 us (2026-11-30 11:40 UTC), about
            # 130 TFLOP/s of padded work: 22% of the dot rate (short 32-byte box rows)
            copy = problem.x.size * (1 + pad / geo.c) * problem.dtype.itemsize
            rate = 0.22 * (600e12 if problem.dtype.itemsize == 2 else 150e12)
            return problem.flops * pad / geo.c / rate + copy / 3e12 + 4e-6
        tiles = cdiv(geo.out_pixels, 128) * cdiv(geo.kg, 128) * geo.groups
        fill = min(1.0, tiles / 132) if max_split(problem, geo) == 1 else 1.0
        return gemm_estimate(problem, efficiency=0.95 * max(fill, 0.2)) + 2e-6

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        spec = spec_of(epilogue)
        if "s2d_x" in workspace:  # a stride-2 first layer: precompute its 4x4 pixel blocks, then
            # IMPLICIT_GEMM's own path on the stride-1 block problem (measured 0.28-0.38 of cuDNN)
            conv_s2d.run(_implicit_gemm(), problem, x, w, y, alpha, beta, workspace, spec)
            return
        # few input channels: precompute zero-padded channels-last copies of x and w that the
        # TMA kernel reads (when the GPU has TMA and the stride divides H and W; else the tables)
        xp, plan = workspace.get("x_pad"), None
        if xp is not None:
            xp, wp = xp.permute(0, 3, 1, 2), workspace["w_pad"].permute(0, 3, 1, 2)
            plan = conv_tma.forward_plan(problem, xp, wp, y, spec.z if spec is not None else None)
        if plan is not None:
            run_tma_forward(self.tuner, plan, problem, conv_tma.pad_into(x, xp), conv_tma.pad_into(w, wp), y,
                            alpha, beta, spec)
            return
        rows, taps, part = workspace["rows"], workspace["taps"], workspace.get("part")
        # the tables live in the caller's workspace, which may hold anything between calls
        grid, scalars, consts, static = _tables_recipes.get((problem,), (x.stride(), w.stride(), y.device.type),
                                                            lambda: _tables_recipe(problem, x, w, y.device))
        launch(precomp_tables_kernel, grid, (rows, taps) + scalars, consts, {}, static)
        cap = part.shape[0] if part is not None else 1
        cands = lambda: [c for c in candidates(problem, geometry(problem), y.device, allow_split=True)
                         if c["SPLIT_K"] <= cap]
        key = (problem_key(problem), spec is not None and spec.act_code, "fwd-precomp", cap)
        run = lambda c, out: launch_forward(problem, x, w, out, 1.0, 0.0, spec, c, part, rows, taps)
        cfg = self.tuner.pick(key, cands, run, y, y.device)
        launch_forward(problem, x, w, y, alpha, beta, spec, cfg, part, rows, taps)
