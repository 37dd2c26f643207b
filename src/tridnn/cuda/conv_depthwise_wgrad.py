"""Depthwise 3x3 backward filter as a streaming row walk, loads issued ahead of the FMAs.

dw[c, a, b] = sum over (n, o, q) of dy[n, o, q, c] * x[n, o * S - PH + a, q * S - PW + b, c]
is a reduction that should run at memory speed: each byte of x and dy read once from
DRAM, nine float32 FMAs per dy element. The older kernels (conv_depthwise_backward's
``dw3_wgrad_kernel``: nine masked x loads per dy tile; conv_depthwise_tma's walkers: six
1 KB boxes through shared memory per x row) ran at 0.9-1.4 TB/s on the H200: few
bytes in flight per SM, and per element more load, mask and address instructions than
FMAs.

``dw3_wgrad_rows_kernel``: a program owns (channel block of BC, column strip of BW
output columns, a slice of the N x OH output rows, images one after another) and walks
down the rows with a [BW, BC] tile (channels contiguous: 16-byte vector loads along C in
NHWC). The slices are equal and there are as many programs as fit on the GPU at once
(counted from the compiled kernel's registers): one wave, no tail. Per step it loads
only the new rows, each once (plus two column-shifted reloads of the x row, L1 hits),
and keeps what the next steps need in registers:

- stride 1: one x row i (three column shifts) and the dy row i + PH a step. x row i
  meets dy rows i + PH - a at filter row a: the two older dy rows ride along, converted
  to float32, so dy crosses L1 once and x three times (shifts), not nine.
- stride 2: dy row o and x rows 2o - PH + 1, 2o - PH + 2 a step; x row 2o - PH (filter
  row 0) is the previous step's last row, carried.

The next step's rows (AHEAD: the next two steps') are loaded (raw, in the data type:
half the registers of float32) before this step's FMAs, so they are in flight while the
FMAs run, and (PF) rows further on are bulk-prefetched into L2 without registers;
column offsets and masks are loop invariant (a row step adds a scalar). Nine float32
[BW, BC] accumulators are summed over the tile's pixels once, at the end, into the
program's partial slot [slot, K, 9] (conv_bwd_filter_implicit_gemm's ``wgrad_finish``
adds the slots in a fixed order: deterministic; ATOMIC (ALGO_0) adds into slot 0).

Any strides (a channel stride of 1 gets Triton's specialization: vector loads); one
filter per channel (multiplier 1), 3x3, stride 1 or 2 in both directions, no dilation.
"""
from __future__ import annotations

import os

import triton
import triton.language as tl

from .common import cdiv, launch, next_pow2, sm_count, wide
from .conv_depthwise_tma import _wsum9, _zeros9
from .geometry import geometry, needs_int64, strides5
from .memo import IdentityMemo


# -- kernel ------------------------------------------------------------------------
@triton.jit
def _tile(ptr, row, row_ok, cols, cols_ok, chan, mask_k):
    """A raw [BW, BC] tile: the pixels at scalar offset ``row`` plus ``cols`` (masked by
    the scalar ``row_ok`` and ``cols_ok``), channels at ``chan``."""
    return tl.load(ptr + row + cols[:, None] + chan[None, :], mask=(cols_ok & row_ok)[:, None] & mask_k[None, :],
                   other=0.0)


@triton.jit
def _xrow(x_ptr, row, row_ok, c0, c1, c2, k0, k1, k2, chan, mask_k):
    """One x row at the three column shifts of the filter (raw tiles)."""
    return (_tile(x_ptr, row, row_ok, c0, k0, chan, mask_k), _tile(x_ptr, row, row_ok, c1, k1, chan, mask_k),
            _tile(x_ptr, row, row_ok, c2, k2, chan, mask_k))


@triton.jit
def _prefetch_l2(ptr, nbytes, ok):
    """Thread 0 of the program asks the TMA unit to bring ``nbytes`` (a multiple of 16,
    16-byte aligned) at ``ptr`` into L2 when ``ok``: no registers held, no wait."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p, q; .reg .u32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
        "setp.ne.and.u32 q, $3, 0, p; @q cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r,r", [ptr, nbytes, (ok & (nbytes > 0)).to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _share(lo, hi, K, ESZ: tl.constexpr):
    """This channel block's share of the pixels [lo, hi) x all K channels of one row (a
    contiguous run in packed NHWC): (element offset from pixel lo, bytes); the channel
    blocks' programs split the run in 16-byte units."""
    units = (tl.maximum(hi - lo, 0) * K * ESZ) // 16
    share = tl.cdiv(units, tl.num_programs(0))
    first = tl.program_id(0) * share
    return first * (16 // ESZ), tl.maximum(tl.minimum(share, units - first), 0) * 16


@triton.jit
def _step1(x_ptr, dy_ptr, xb, db, j, i_end, IH, PH, o_end, xs_h, dys_h, c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x,
           chan_d, mask_k):
    """Stride 1, step j's raw tiles: x row j at the three shifts, dy row j + PH (filter row
    0); rows past the strip's last step or the image are masked off (no traffic)."""
    r0, r1, r2 = _xrow(x_ptr, xb + j * xs_h, (j >= 0) & (j < IH) & (j < i_end), c0, c1, c2, k0, k1, k2, chan_x,
                       mask_k)
    rd = _tile(dy_ptr, db + (j + PH) * dys_h, j + PH < o_end, cd, mask_q, chan_d, mask_k)
    return r0, r1, r2, rd


@triton.jit
def _step2(x_ptr, dy_ptr, xb, db, p, IH, PH, o_end, xs_h, dys_h, c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x,
           chan_d, mask_k):
    """Stride 2, step p's raw tiles: x rows 2p - PH + 1, 2p - PH + 2 (filter rows 1, 2) at
    the three shifts, dy row p; nothing past the strip's rows."""
    live = p < o_end
    i = p * 2 - PH
    m0, m1, m2 = _xrow(x_ptr, xb + (i + 1) * xs_h, live & (i + 1 >= 0) & (i + 1 < IH), c0, c1, c2, k0, k1, k2,
                       chan_x, mask_k)
    b0, b1, b2 = _xrow(x_ptr, xb + (i + 2) * xs_h, live & (i + 2 >= 0) & (i + 2 < IH), c0, c1, c2, k0, k1, k2,
                       chan_x, mask_k)
    rd = _tile(dy_ptr, db + p * dys_h, live, cd, mask_q, chan_d, mask_k)
    return m0, m1, m2, b0, b1, b2, rd


@triton.jit
def _fma9(a00, a01, a02, a10, a11, a12, a20, a21, a22, g0, g1, g2, x00, x01, x02, x10, x11, x12, x20, x21, x22):
    """A step's nine FMAs, a[r][b] += g_r * x[r][b] (filter row r, column shift b): stride 1
    passes three dy rows and one x row three times, stride 2 one dy row and three x rows."""
    return (a00 + g0 * x00, a01 + g0 * x01, a02 + g0 * x02, a10 + g1 * x10, a11 + g1 * x11, a12 + g1 * x12,
            a20 + g2 * x20, a21 + g2 * x21, a22 + g2 * x22)


@triton.jit(do_not_specialize=['N', 'IH', 'IW', 'OH', 'OW', 'PH', 'PW', 'RPS'])
def dw3_wgrad_rows_kernel(
        x_ptr, dy_ptr, part_ptr,
        # sizes: images, channels, H x W of x and dy, padding
        N, K, IH, IW, OH, OW, PH, PW,
        # dy rows per slice (of the N x OH rows, images one after another)
        RPS,
        # element strides (n, c, h, w) of x and dy
        xs_n, xs_c, xs_h, xs_w, dys_n, dys_k, dys_h, dys_w,
        S: tl.constexpr, BW: tl.constexpr, BC: tl.constexpr, AHEAD: tl.constexpr, UNROLL: tl.constexpr,
        PF: tl.constexpr, ATOMIC: tl.constexpr, INT64: tl.constexpr):
    """part[slot, k, 3a + b] = sum over the program's dy pixels (n, o, q) of
    dy[n, o, q, k] * x[n, o * S - PH + a, q * S - PW + b, k]; slot = slice x column strips +
    column strip, a slice = RPS consecutive rows n * OH + o (ATOMIC: added into slot 0).
    AHEAD: steps loaded ahead of the one computed (1 or 2); UNROLL: the row loop's unroll
    factor (the carried tiles then rotate by renaming instead of moves). PF > 0 (packed
    NHWC only, GPU only): each step also asks for the rows PF steps on to be brought into
    L2 (bulk prefetch of the strip's row segments, split between the channel blocks), so
    the register loads wait on L2, not DRAM."""
    # -- map the program to a channel block, a column strip and a slice of rows
    offs_k = tl.program_id(0) * BC + tl.arange(0, BC)
    mask_k = offs_k < K
    col_blk = tl.program_id(1)
    unit = tl.program_id(2)
    row0 = unit * RPS
    row1 = tl.minimum(row0 + RPS, N * OH)
    if INT64:  # every offset term in int64, not only the image's (common.wide)
        xs_n, xs_c, xs_h, xs_w = wide((xs_n, xs_c, xs_h, xs_w))
        dys_n, dys_k, dys_h, dys_w = wide((dys_n, dys_k, dys_h, dys_w))

    # -- loop-invariant column offsets and masks: dy columns q, x columns q * S - PW + b
    q = col_blk * BW + tl.arange(0, BW)
    mask_q = q < OW
    iw = q * S - PW
    c0 = iw * xs_w
    c1 = c0 + xs_w
    c2 = c1 + xs_w
    k0 = mask_q & (iw >= 0) & (iw < IW)
    k1 = mask_q & (iw + 1 >= 0) & (iw + 1 < IW)
    k2 = mask_q & (iw + 2 >= 0) & (iw + 2 < IW)
    cd = q * dys_w
    chan_x = offs_k * xs_c
    chan_d = offs_k * dys_k
    if PF > 0:
        # -- the strip's row segments (x columns it reads, dy columns it owns), all channels
        ESZ: tl.constexpr = x_ptr.dtype.element_ty.primitive_bitwidth // 8
        q_lo = col_blk * BW
        q_hi = tl.minimum(q_lo + BW, OW)
        x_lo = tl.maximum(q_lo * S - PW, 0)
        x_off, x_bytes = _share(x_lo, tl.minimum((q_hi - 1) * S - PW + 3, IW), K, ESZ)
        x_off += x_lo * xs_w
        d_off, d_bytes = _share(q_lo, q_hi, K, ESZ)
        d_off += q_lo * dys_w

    a00, a01, a02, a10, a11, a12, a20, a21, a22 = _zeros9(BW, BC)
    # -- the slice's rows image by image: rows o0 .. o_end of image n (a walk restarts
    # at each image: its first rows load the rows above the strip, masked at the edge)
    for n in range(row0 // OH, (row1 - 1) // OH + 1):
        o0 = tl.maximum(row0 - n * OH, 0)
        o_end = tl.minimum(row1 - n * OH, OH)
        xb = n * xs_n
        db = n * dys_n
        if S == 1:
            # -- x rows i = o - PH + a of the strip's dy rows o; a step: x row i (three
            # shifts) and dy row i + PH (filter row 0); dy rows i + PH - 1, i + PH - 2
            # (filter rows 1, 2) are the previous steps', carried in float32
            i0 = o0 - PH
            i_end = o_end - PH + 2
            r0, r1, r2, rd = _step1(x_ptr, dy_ptr, xb, db, i0, i_end, IH, PH, o_end, xs_h, dys_h, c0, c1, c2,
                                    k0, k1, k2, cd, mask_q, chan_x, chan_d, mask_k)
            if AHEAD == 2:
                n0r, n1r, n2r, ndr = _step1(x_ptr, dy_ptr, xb, db, i0 + 1, i_end, IH, PH, o_end, xs_h, dys_h,
                                            c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x, chan_d, mask_k)
            g1 = tl.zeros((BW, BC), dtype=tl.float32)
            g2 = tl.zeros((BW, BC), dtype=tl.float32)
            for i in tl.range(i0, i_end, loop_unroll_factor=UNROLL):
                x0 = r0.to(tl.float32)
                x1 = r1.to(tl.float32)
                x2 = r2.to(tl.float32)
                g0 = rd.to(tl.float32)
                # the rows AHEAD steps on, in flight during this step's FMAs
                if AHEAD == 2:
                    r0, r1, r2, rd = n0r, n1r, n2r, ndr
                    n0r, n1r, n2r, ndr = _step1(x_ptr, dy_ptr, xb, db, i + 2, i_end, IH, PH, o_end, xs_h, dys_h,
                                                c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x, chan_d, mask_k)
                else:
                    r0, r1, r2, rd = _step1(x_ptr, dy_ptr, xb, db, i + 1, i_end, IH, PH, o_end, xs_h, dys_h,
                                            c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x, chan_d, mask_k)
                if PF > 0:  # step i + PF's rows into L2
                    f = i + PF
                    _prefetch_l2(x_ptr + xb + f * xs_h + x_off, x_bytes, (f < i_end) & (f >= 0) & (f < IH))
                    _prefetch_l2(dy_ptr + db + (f + PH) * dys_h + d_off, d_bytes, f + PH < o_end)
                a00, a01, a02, a10, a11, a12, a20, a21, a22 = _fma9(a00, a01, a02, a10, a11, a12, a20, a21, a22,
                                                                    g0, g1, g2, x0, x1, x2, x0, x1, x2, x0, x1, x2)
                g2 = g1
                g1 = g0
        else:
            # -- stride 2: dy row o meets x rows 2o - PH + a; a step loads dy row o and x rows
            # 2o - PH + 1, 2o - PH + 2; the last is the next step's filter row 0 (carried)
            i0 = o0 * 2 - PH
            y0, y1, y2 = _xrow(x_ptr, xb + i0 * xs_h, (i0 >= 0) & (i0 < IH), c0, c1, c2, k0, k1, k2, chan_x, mask_k)
            t0 = y0.to(tl.float32)
            t1 = y1.to(tl.float32)
            t2 = y2.to(tl.float32)
            m0, m1, m2, b0, b1, b2, rd = _step2(x_ptr, dy_ptr, xb, db, o0, IH, PH, o_end, xs_h, dys_h, c0, c1, c2,
                                                k0, k1, k2, cd, mask_q, chan_x, chan_d, mask_k)
            if AHEAD == 2:
                nm0, nm1, nm2, nb0, nb1, nb2, nd = _step2(x_ptr, dy_ptr, xb, db, o0 + 1, IH, PH, o_end, xs_h, dys_h,
                                                          c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x, chan_d, mask_k)
            for o in tl.range(o0, o_end, loop_unroll_factor=UNROLL):
                g = rd.to(tl.float32)
                u0 = m0.to(tl.float32)
                u1 = m1.to(tl.float32)
                u2 = m2.to(tl.float32)
                v0 = b0.to(tl.float32)
                v1 = b1.to(tl.float32)
                v2 = b2.to(tl.float32)
                # the rows AHEAD steps on, in flight during this step's FMAs
                if AHEAD == 2:
                    m0, m1, m2, b0, b1, b2, rd = nm0, nm1, nm2, nb0, nb1, nb2, nd
                    nm0, nm1, nm2, nb0, nb1, nb2, nd = _step2(x_ptr, dy_ptr, xb, db, o + 2, IH, PH, o_end, xs_h,
                                                              dys_h, c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x,
                                                              chan_d, mask_k)
                else:
                    m0, m1, m2, b0, b1, b2, rd = _step2(x_ptr, dy_ptr, xb, db, o + 1, IH, PH, o_end, xs_h, dys_h,
                                                        c0, c1, c2, k0, k1, k2, cd, mask_q, chan_x, chan_d, mask_k)
                if PF > 0:  # step o + PF's rows into L2
                    f = o + PF
                    fi = f * 2 - PH
                    _prefetch_l2(x_ptr + xb + (fi + 1) * xs_h + x_off, x_bytes,
                                 (f < o_end) & (fi + 1 >= 0) & (fi + 1 < IH))
                    _prefetch_l2(x_ptr + xb + (fi + 2) * xs_h + x_off, x_bytes,
                                 (f < o_end) & (fi + 2 >= 0) & (fi + 2 < IH))
                    _prefetch_l2(dy_ptr + db + f * dys_h + d_off, d_bytes, f < o_end)
                a00, a01, a02, a10, a11, a12, a20, a21, a22 = _fma9(a00, a01, a02, a10, a11, a12, a20, a21, a22,
                                                                    g, g, g, t0, t1, t2, u0, u1, u2, v0, v1, v2)
                t0 = v0
                t1 = v1
                t2 = v2

    # -- the nine accumulators summed over the tile's pixels into this program's slot
    slot = 0
    if not ATOMIC:
        slot = unit * tl.num_programs(1) + col_blk
    _wsum9(part_ptr, a00, a01, a02, a10, a11, a12, a20, a21, a22, slot, K, offs_k, mask_k, ATOMIC)


# -- host side ---------------------------------------------------------------------
def applies(problem) -> bool:
    """2-D (or 1-row) depthwise 3x3, multiplier 1, equal strides 1 or 2, no dilation."""
    geo = geometry(problem)
    return (geo.cg == 1 and geo.k == geo.c and geo.ker == (1, 3, 3) and geo.inp[0] == 1 and geo.out[0] == 1
            and geo.stride[0] == 1 and geo.stride[1] == geo.stride[2] and geo.stride[1] in (1, 2)
            and geo.dil == (1, 1, 1) and problem.nd <= 2)


def plan(problem, cfg, cap, sms, per_sm=None):
    """(BW, rows per slice, slices, column strips, slots) for cfg: the N x OH dy rows cut
    into equal slices so that channel blocks x column strips x slices fill ``per_sm``
    (default cfg["PER_SM"]) x SMs programs (one wave of equal programs: no tail), capped
    by the partial buffer's ``cap`` slots; None if not even one slice per column strip fits."""
    geo = geometry(problem)
    rows, ow = geo.n * geo.out[1], geo.out[2]
    bw = min(cfg["BW"], next_pow2(ow))
    n_cols = cdiv(ow, bw)
    if n_cols > cap:
        return None
    per_slice = cdiv(geo.k, cfg["BC"]) * n_cols
    slices = max(1, min(rows, (per_sm or cfg["PER_SM"]) * sms // per_slice, cap // n_cols))
    rps = cdiv(rows, slices)
    slices = cdiv(rows, rps)
    return bw, rps, slices, n_cols, slices * n_cols


# (BC, elements a thread, warps, programs per SM (the estimate the tuner's candidate
# list and the interpreter plan with; the GPU launch counts the compiled kernel's), WAVES,
# AHEAD, UNROLL, PF). sm_90 bf16 (compile probe, no spills): registers, and SASS
# instructions a step per dy element (9 of them FFMA; stride 1: 4 bf16 -> float32
# conversions, stride 2: 7). Registers bound the elements resident per SM: 8 a thread
# in 2-warp programs keeps 2560 (5 programs at <= 192 registers), 4 a thread in 4-warp
# programs 2048 (4 at <= 128), with more per-step overhead an element; the L2 prefetch
# (PF) costs ~3.5 instructions a step per element.
GPU_CONFIGS = {
    1: ((32, 4, 4, 4, 1, 2, 3, 0),    # 158 regs, 23.5 / element
        (32, 8, 2, 5, 1, 1, 3, 4),    # 190, 23.8
        (32, 8, 2, 4, 1, 1, 3, 0),    # 215, 20.0
        (32, 8, 2, 5, 2, 1, 3, 4),    # two waves
        (32, 8, 2, 5, 1, 2, 1, 4),    # 181, 29.4 (two steps of loads in flight)
        (64, 8, 2, 5, 1, 1, 3, 4),    # 190
        (16, 8, 2, 5, 1, 1, 3, 4),    # 189
        (32, 4, 4, 4, 1, 1, 3, 4)),   # 104, 29.9
    2: ((32, 4, 4, 4, 1, 2, 1, 0),    # 124, 41
        (32, 8, 2, 5, 1, 1, 1, 2),    # 168, 35.6
        (32, 8, 2, 5, 1, 1, 1, 0),    # 168
        (64, 8, 2, 5, 1, 1, 1, 2),    # 168
        (16, 8, 2, 5, 1, 1, 1, 2),    # 168
        (32, 4, 4, 4, 1, 1, 1, 2)),   # 123, 47.5
}


def configs(device, k, stride=1):
    """Launch configs: BW = elements a thread x 32 x warps / BC (BW is cut to the
    output width at launch). Under the interpreter, two tiny ones (PF is GPU only)."""
    if device.type != "cuda":
        return [dict(KIND="rows", BW=4, BC=4, num_warps=1, PER_SM=4, WAVES=1, AHEAD=1, UNROLL=1, PF=0),
                dict(KIND="rows", BW=8, BC=8, num_warps=1, PER_SM=2, WAVES=1, AHEAD=2, UNROLL=2, PF=0)]
    out = []
    for bc, ept, warps, per_sm, waves, ahead, unroll, pf in GPU_CONFIGS[stride]:
        if bc <= max(16, next_pow2(k)):
            out.append(dict(KIND="rows", BW=max(1, ept * 32 * warps // bc), BC=bc, num_warps=warps, PER_SM=per_sm,
                            WAVES=waves, AHEAD=ahead, UNROLL=unroll, PF=pf))
    return out


def candidates(problem, device, cap, sms=None):
    """configs() whose slots fit ``cap``, each with its slot count ("slices") and the SM
    count it was planned for ("SMS", which the launch plans with again)."""
    if not applies(problem):
        return []
    if sms is None:
        sms = sm_count(device) if device.type == "cuda" else 4
    out = []
    for cfg in configs(device, problem.k, geometry(problem).stride[1]):
        fit = plan(problem, cfg, cap, sms)
        if fit is not None:
            out.append(dict(cfg, slices=fit[-1], SMS=sms))
    return out


def prefetch_ok(x, dy, k, nd) -> bool:
    """The L2 prefetch's case (PF): on the GPU, x and dy packed NHWC pixels (channel stride
    1, pixel stride C: a row segment is one contiguous run), 16-byte aligned rows; not
    with TRIDNN_DW_WGRAD_PF=0 in the environment (its configs then run without it)."""
    if x.device.type != "cuda" or os.environ.get("TRIDNN_DW_WGRAD_PF") == "0":
        return False  # (inline PTX: not under the interpreter)
    for t in (x, dy):
        s = strides5(t, nd)
        if s[1] != 1 or s[4] != k or (k * t.element_size()) % 16 or t.data_ptr() % 16 \
                or (s[0] * t.element_size()) % 16 or (s[3] * t.element_size()) % 16:
            return False
    return True


_REGS: dict = {}  # (device, dtypes, constexprs, warps) -> registers a thread of the compiled kernel


def resident(args, consts, warps, device):
    """Programs of the compiled kernel that fit on one SM at once (its registers, 256 a
    warp at a time, of 64 K; at most 64 warps and 32 programs), or None if the count is
    unavailable."""
    key = (device.index, args[0].dtype, args[1].dtype, tuple(consts.items()), warps)
    regs = _REGS.get(key)
    if regs is None:
        try:
            compiled = dw3_wgrad_rows_kernel.warmup(*args, grid=(1,), **consts, num_warps=warps)
            compiled._init_handles()
            regs = int(compiled.n_regs)
        except Exception:  # an older Triton without the fields: keep the config's estimate
            regs = 0
        _REGS[key] = regs
    if not regs:
        return None
    per_warp = cdiv(regs * 32, 256) * 256
    return max(1, min(65536 // (per_warp * warps), 64 // warps, 32))


_launches = IdentityMemo()


def launch_rows(problem, x, dy, part, atomic, cfg, cap):
    """dw3_wgrad_rows_kernel into part [slots, K, 9, 1] (ATOMIC: added into slot 0,
    zeroed by the caller); returns the slots used. On the GPU the programs are planned
    for the compiled kernel's real residency (registers) x cfg["WAVES"], not the config's
    estimate: a grid one program past a wave would run a second, almost empty one. The
    plan is kept per problem, config and layout (everything it reads but the addresses'
    contents): it cost ~45 us of host time a call on an H100's host (session 20)."""
    layout = (atomic, cap, x.stride(), dy.stride(), x.dtype, dy.dtype, x.device, x.data_ptr() % 16,
              dy.data_ptr() % 16, os.environ.get("TRIDNN_DW_WGRAD_PF"))
    grid, tail, consts, options, slots = _launches.get((problem, cfg), layout,
                                                       lambda: _rows_launch(problem, x, dy, part, atomic, cfg, cap))
    launch(dw3_wgrad_rows_kernel, grid, (x, dy, part, *tail), consts, options)
    return slots


def _rows_launch(problem, x, dy, part, atomic, cfg, cap):
    """launch_rows' plan: (grid, the arguments after the three tensors, constexprs, options,
    slots used)."""
    geo = geometry(problem)
    nd = problem.nd
    cap = 65535 if atomic else cap
    sms = cfg.get("SMS") or (sm_count(x.device) if x.device.type == "cuda" else 4)
    xs, ds = strides5(x, nd), strides5(dy, nd)
    pf = cfg.get("PF", 0) if prefetch_ok(x, dy, geo.k, nd) else 0
    consts = dict(S=geo.stride[1], BW=plan(problem, cfg, cap, sms)[0], BC=cfg["BC"], AHEAD=cfg.get("AHEAD", 1),
                  UNROLL=cfg.get("UNROLL", 1), PF=pf, ATOMIC=atomic, INT64=needs_int64(x, dy))

    def tail(rps):
        return (geo.n, geo.k, geo.inp[1], geo.inp[2], geo.out[1], geo.out[2], geo.pad[1], geo.pad[2],
                rps, xs[0], xs[1], xs[3], xs[4], ds[0], ds[1], ds[3], ds[4])
    per_sm = None
    if x.device.type == "cuda":
        fit = resident((x, dy, part, *tail(1)), consts, cfg["num_warps"], x.device)
        per_sm = fit * cfg.get("WAVES", 1) if fit else None
    _, rps, slices, n_cols, slots = plan(problem, cfg, cap, sms, per_sm)
    return ((cdiv(geo.k, cfg["BC"]), n_cols, slices), tail(rps), consts, dict(num_warps=cfg["num_warps"]),
            1 if atomic else slots)
