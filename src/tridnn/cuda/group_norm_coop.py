"""Channels-last group norm with each sample spread over cooperating programs (issue 5).

Why: in a channels-last tensor a group is CG channels of every pixel: 16-byte pieces 512
bytes apart for 8 bf16 channels of 256. The per-group designs in norms.py fetch those
pieces (or two groups' 32 bytes) and reach 2.1 TB/s forward and 1.6 backward on an H100,
where a copy runs at 3.1. Here a sample's [positions, channels] block (56 x 56 x 256 bf16:
1.6 MB) is cut into slices of whole pixels, one contiguous run of memory a program, held
in registers, so x (and dy) is read from DRAM once, in whole lines. The programs of a
sample publish per-group partials, meet at a per-sample barrier (an arrival counter in
global memory), combine every slice's partials in slice order (deterministic), and
finish their slice from registers.

- Forward: each slice's per-group mean and sum of squared deviations (two passes over the
  registers), combined as Chan et al.'s parallel variance: exact like the two-pass
  reference, not E[x^2] - E[x]^2.
- Backward (saved statistics): each slice's per-group sum(dy w) and sum(dy w x_hat), and
  per-channel sum(dy x_hat) and sum(dy) for dscale and dbias, which the programs of a
  sample sum over its slices after the barrier (one row a sample, as the other designs
  leave for norms._param_sums).

The barrier needs all of a sample's programs resident at once. Programs take tickets in
the order they start (an atomic counter), and ticket t works on sample t // SPLITS, so a
waiting program's siblings have started or are the next to start; a sample has at most
as many programs as the GPU has SMs, and every SM can hold one. The counters are zero
before and after every launch (the last program to take a ticket or leave a barrier zeroes
them), so a CUDA graph replays the kernel as is.

The interpreter runs one program at a time, so a barrier would never open: there (and
with COOP_BARRIER off) the same kernel runs as two launches: PHASE 1 writes the partials,
PHASE 2 reads x again, combines and writes the output. Tests run that form on the CPU and
the one-launch form (PHASE 0) on the GPU.

Measured (session 35, H100, 64x256x56x56 bf16, every sweep row, docs/performance.md):
forward 92.1 us (91.3 at 32 KB, 4 warps) against the resident design's 95.6, backward
294.1 against the split design's 182.1; the two-launch backward takes 260.4, so the
backward kernel itself is slow, not only its barrier. Off by default: 4% on the forward
does not pay for a barrier that hangs when fewer programs fit on the GPU than a sample
has slices (an MPS share of the SMs, for one).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .common import cdiv, wide
from .layer_utils import channels_last, compute_dtype, ncs_dims, ncs_strides
from .norms import _add_pair, _channel_coefficients, _resident_store, _widen, _workspace_dtype
from .tensor_ops import zeroed_counters

# GROUP_NORM_COOP per direction (or one value): "channels_last" (this design for
# channels-last views that fit, see plan) or "never" (norms.py's designs). Off by default
# (see the module docstring): benchmarks/sweep_group_norm.py --only NHWC times it, and the
# gpu tests of tests/test_cuda_group_norm_coop.py check it (step gn_coop of
# benchmarks/gpu_images_inner_check.sh).
GROUP_NORM_COOP = {"forward": "never", "backward": "never"}
# a program: held bytes (x, or x and dy: bfloat16 held as loaded), warps, registers a thread
# at most (ptxas maxnreg; None: ptxas's choice). sm_90 (offline compile, 56x56x256 bf16):
# 64 KB in 8 warps takes 127-128 registers at maxnreg 128, no spills: two programs an SM
COOP_BYTES = {"forward": 65536, "backward": 65536}
COOP_WARPS = {"forward": 8, "backward": 8}
COOP_MAXNREG = 128
COOP_BARRIER = True  # False: two launches on the GPU too (the interpreter's form)
COOP_TICKETS = True  # False: program ids as the order (in-order dispatch assumed; for timing the tickets)
# nanoseconds a waiting program sleeps between polls of its barrier (PTX nanosleep; 0: polls
# back to back). Untimed: the sweep's backoff rows decide (polls queue at the counter's L2
# slice ahead of the arrivals they wait for)
COOP_BACKOFF_NS = 0


@triton.jit
def _ticket(sync_ptr, total, PHASE: tl.constexpr, TICKETS: tl.constexpr):
    """This program's place in start order (PHASE 0 with TICKETS: a ticket, the last holder
    zeroes the counter for the next launch; else the program id)."""
    if PHASE == 0 and TICKETS:
        t = tl.atomic_add(sync_ptr, 1, sem="relaxed", scope="gpu")
        if t == total - 1:
            tl.atomic_xchg(sync_ptr, 0, sem="relaxed", scope="gpu")
    else:
        t = tl.program_id(0)
    return t


@triton.jit
def _pause(ns: tl.constexpr):
    """Sleep about ns nanoseconds (PTX nanosleep; GPU only, never under the interpreter)."""
    tl.inline_asm_elementwise("nanosleep.u32 $1; mov.u32 $0, 0;", "=r,r", [tl.full([], ns, tl.int32)],
                              dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _sample_barrier(sync_ptr, n, N, SPLITS, BACKOFF_NS: tl.constexpr):
    """Wait until the SPLITS programs of sample n have stored their partials. Counters:
    arrivals at sync_ptr[1 + n], departures at sync_ptr[1 + N + n]; the last to leave zeroes
    both (every program has left the wait by then)."""
    tl.debug_barrier()  # every thread's partial stores come before the release below
    arrived = sync_ptr + 1 + n
    seen = tl.atomic_add(arrived, 1, sem="acq_rel", scope="gpu") + 1
    while seen < SPLITS:
        if BACKOFF_NS > 0:
            _pause(BACKOFF_NS)
        seen = tl.atomic_add(arrived, 0, sem="acquire", scope="gpu")
    left = tl.atomic_add(sync_ptr + 1 + N + n, 1, sem="relaxed", scope="gpu")
    if left == SPLITS - 1:
        tl.atomic_xchg(arrived, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(sync_ptr + 1 + N + n, 0, sem="relaxed", scope="gpu")
    tl.debug_barrier()  # the loads of the partials come after the acquire above


@triton.jit
def _slice_tile(n, blk, S, G, CG, sn, ss, sc, BIG: tl.constexpr, EXACT: tl.constexpr, BLOCK_S: tl.constexpr,
                BLOCK_G: tl.constexpr, BLOCK_CG: tl.constexpr):
    """Offsets [BLOCK_S, BLOCK_G * BLOCK_CG] of slice blk of sample n (positions, then the
    groups' channels side by side: a row is one pixel's channels, so a warp's loads are
    whole lines), its mask, and the channels [BLOCK_G, BLOCK_CG] with their mask (EXACT:
    CG == BLOCK_CG and G == BLOCK_G, so channel = column and loads stay vectorized)."""
    s = blk * BLOCK_S + tl.arange(0, BLOCK_S)
    col = tl.arange(0, BLOCK_G * BLOCK_CG)
    g = tl.arange(0, BLOCK_G)[:, None]
    k = tl.arange(0, BLOCK_CG)[None, :]
    if EXACT:
        c_row = col
        c_row_mask = col < BLOCK_G * BLOCK_CG
        c = g * BLOCK_CG + k
        c_mask = (g < BLOCK_G) & (k < BLOCK_CG)
    else:
        c_row = (col // BLOCK_CG) * CG + col % BLOCK_CG
        c_row_mask = (col // BLOCK_CG < G) & (col % BLOCK_CG < CG)
        c = g * CG + k
        c_mask = (g < G) & (k < CG)
    mask = (s < S)[:, None] & c_row_mask[None, :]
    if BIG:  # every offset term in int64 (common.wide): one alone can pass 2^31
        n = n.to(tl.int64)
        sn, ss, sc = wide((sn, ss, sc))
    offsets = n * sn + s[:, None] * ss + c_row[None, :] * sc
    return offsets, mask, c, c_mask


@triton.jit
def _by_group(t, BLOCK_S: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_CG: tl.constexpr):
    """[BLOCK_S, BLOCK_G * BLOCK_CG] -> [BLOCK_S, BLOCK_G, BLOCK_CG] (a register view)."""
    return tl.reshape(t, [BLOCK_S, BLOCK_G, BLOCK_CG])


@triton.jit
def _group_sum(t):
    """[BLOCK_S, BLOCK_G, BLOCK_CG] -> [BLOCK_G]: over positions and a group's channels."""
    return tl.sum(tl.sum(t, axis=2), axis=0)


@triton.jit
def _slice_counts(j, S, CG, COMPUTE: tl.constexpr, BLOCK_S: tl.constexpr):
    """Values per group in slices j (positions in the slice times channels a group)."""
    return (tl.minimum(S - j * BLOCK_S, BLOCK_S) * CG).to(COMPUTE)


@triton.jit
def _gn_coop_forward_kernel(x_ptr, y_ptr, scale_ptr, bias_ptr, mean_ptr, inv_ptr,  # tensors
                            part_ptr, sync_ptr,  # workspace: partials [N, SPLITS, 2, BLOCK_G]; counters
                            N, G, CG, S, SPLITS,  # samples, groups, channels a group, positions, slices a sample
                            xsn, xss, xsc, ysn, yss, ysc,  # (N, S, C) strides
                            eps: tl.float64, alpha: tl.float64, beta: tl.float64,
                            PHASE: tl.constexpr, TICKETS: tl.constexpr, BACKOFF_NS: tl.constexpr,
                            HAS_BIAS: tl.constexpr, SAVE: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr,
                            COMPUTE: tl.constexpr, NARROW: tl.constexpr, EXACT: tl.constexpr, BLOCK_S: tl.constexpr,
                            BLOCK_G: tl.constexpr, BLOCK_CG: tl.constexpr, BLOCK_SPLITS: tl.constexpr):
    """One slice of BLOCK_S pixels of one sample a program: partial statistics, the
    sample's barrier, the combined statistics, y = alpha (x a + b) + beta y."""
    eps, alpha, beta = tl.full([], eps, COMPUTE), tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program (its ticket) to (sample, slice) and load the slice: the one read of x
    t = _ticket(sync_ptr, N * SPLITS, PHASE, TICKETS)
    n = t // SPLITS
    blk = t % SPLITS
    offsets, mask, c, c_mask = _slice_tile(n, blk, S, G, CG, xsn, xss, xsc, BIG, EXACT, BLOCK_S, BLOCK_G, BLOCK_CG)
    x = _by_group(tl.load(x_ptr + offsets, mask=mask, other=0.0), BLOCK_S, BLOCK_G, BLOCK_CG)
    mask = _by_group(mask, BLOCK_S, BLOCK_G, BLOCK_CG)
    g = tl.arange(0, BLOCK_G)
    parts = part_ptr + n.to(tl.int64) * SPLITS * 2 * BLOCK_G
    # this slice's per-group mean and sum of squared deviations, from the registers
    if PHASE != 2:
        mean_i = _group_sum(_widen(x, COMPUTE, 0)) / _slice_counts(blk, S, CG, COMPUTE, BLOCK_S)
        d = tl.where(mask, _widen(x, COMPUTE, 1 if NARROW else 0) - mean_i[None, :, None], 0.0)
        tl.store(parts + blk * 2 * BLOCK_G + g, mean_i)
        tl.store(parts + blk * 2 * BLOCK_G + BLOCK_G + g, _group_sum(d * d))
    if PHASE == 1:
        return
    if PHASE == 0:
        _sample_barrier(sync_ptr, n, N, SPLITS, BACKOFF_NS)
    # combine every slice's partials in slice order: mean, then M2 (Chan et al.)
    j = tl.arange(0, BLOCK_SPLITS)
    j_mask = (j < SPLITS)[:, None] & (g < BLOCK_G)[None, :]
    p_off = j[:, None] * 2 * BLOCK_G + g[None, :]
    means = tl.load(parts + p_off, mask=j_mask, other=0.0, cache_modifier=".cg")
    m2s = tl.load(parts + p_off + BLOCK_G, mask=j_mask, other=0.0, cache_modifier=".cg")
    counts = _slice_counts(j, S, CG, COMPUTE, BLOCK_S)[:, None]
    total = (S * CG).to(COMPUTE)
    mean = tl.sum(tl.where(j_mask, means * counts, 0.0), axis=0) / total
    dm = tl.where(j_mask, means - mean[None, :], 0.0)
    m2 = tl.sum(m2s + counts * dm * dm, axis=0)
    inv = 1.0 / tl.sqrt(tl.maximum(m2 / total, 0.0) + eps)
    g_mask = g < G
    if SAVE:
        if blk == 0:
            tl.store(mean_ptr + n * G + g, mean.to(mean_ptr.dtype.element_ty), mask=g_mask)
            tl.store(inv_ptr + n * G + g, inv.to(inv_ptr.dtype.element_ty), mask=g_mask)
    # y = alpha (x a + b) + beta y with per-channel a, b (alpha folded into them)
    a, b = _channel_coefficients(scale_ptr, bias_ptr, c, c_mask, mean, inv, alpha, HAS_BIAS, COMPUTE)
    y = _widen(x, COMPUTE, 2 if NARROW else 0) * a[None, :, :] + b[None, :, :]
    y_offsets, y_mask, _, _ = _slice_tile(n, blk, S, G, CG, ysn, yss, ysc, BIG, EXACT, BLOCK_S, BLOCK_G,
                                          BLOCK_CG)
    _resident_store(y_ptr + y_offsets, 0, y_mask, tl.reshape(y, [BLOCK_S, BLOCK_G * BLOCK_CG]), beta, HAS_BETA)


@triton.jit
def _gn_coop_backward_kernel(x_ptr, dy_ptr, dx_ptr, scale_ptr, mean_ptr, inv_ptr,  # tensors
                             part_ptr, gpart_ptr, sample_ptr, sync_ptr,  # workspace (see below); counters
                             N, G, CG, S, C, SPLITS,  # samples, groups, channels a group, positions, channels, slices
                             xsn, xss, xsc, gsn, gss, gsc, dsn, dss, dsc,  # (N, S, C) strides
                             alpha: tl.float64, beta: tl.float64,
                             PHASE: tl.constexpr, TICKETS: tl.constexpr, BACKOFF_NS: tl.constexpr,
                             HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr, NARROW: tl.constexpr,
                             EXACT: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_CG: tl.constexpr,
                             BLOCK_SPLITS: tl.constexpr, BLOCK_CW: tl.constexpr):
    """dx for one slice of one sample, x and dy held in registers (each read once), from
    the saved mean and 1/std. Per-channel sum(dy x_hat) and sum(dy) of the slice into
    part[n * SPLITS + slice, 2, C]; per-group sum(dy w) and sum(dy w x_hat) into
    gpart[n, slice, 2, BLOCK_G]. After the sample's barrier, each program combines the
    latter for its dx, and sums BLOCK_CW of the sample's 2C partial columns over the slices
    into sample[n, 2, C] (so dscale and dbias sum N rows, not N * SPLITS)."""
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to (sample, slice); both loads before any arithmetic
    t = _ticket(sync_ptr, N * SPLITS, PHASE, TICKETS)
    n = t // SPLITS
    blk = t % SPLITS
    offsets, mask, c, c_mask = _slice_tile(n, blk, S, G, CG, xsn, xss, xsc, BIG, EXACT, BLOCK_S, BLOCK_G, BLOCK_CG)
    g_offsets, _, _, _ = _slice_tile(n, blk, S, G, CG, gsn, gss, gsc, BIG, EXACT, BLOCK_S, BLOCK_G, BLOCK_CG)
    x = _by_group(tl.load(x_ptr + offsets, mask=mask, other=0.0), BLOCK_S, BLOCK_G, BLOCK_CG)
    dy = _by_group(tl.load(dy_ptr + g_offsets, mask=mask, other=0.0), BLOCK_S, BLOCK_G, BLOCK_CG)
    g = tl.arange(0, BLOCK_G)
    g_mask = g < G
    mean = tl.load(mean_ptr + n * G + g, mask=g_mask, other=0.0).to(COMPUTE)
    inv = tl.load(inv_ptr + n * G + g, mask=g_mask, other=0.0).to(COMPUTE)
    w = tl.load(scale_ptr + c, mask=c_mask, other=0.0).to(COMPUTE)
    gparts = gpart_ptr + n.to(tl.int64) * SPLITS * 2 * BLOCK_G
    if PHASE != 2:
        # per channel: sum(dy) and sum(dy x_hat) over the slice (padding has dy = 0)
        dyf = _widen(dy, COMPUTE, 0)
        xhat = (_widen(x, COMPUTE, 0) - mean[None, :, None]) * inv[None, :, None]
        ch_dy, ch_dyx = tl.reduce((dyf, dyf * xhat), 0, _add_pair)  # [BLOCK_G, BLOCK_CG]
        row = (n * SPLITS + blk).to(tl.int64) * 2 * C
        tl.store(part_ptr + row + c, ch_dyx, mask=c_mask)
        tl.store(part_ptr + row + C + c, ch_dy, mask=c_mask)
        sum_g, sum_gx = tl.reduce((ch_dy * w, ch_dyx * w), 1, _add_pair)  # [BLOCK_G]
        tl.store(gparts + blk * 2 * BLOCK_G + g, sum_g)
        tl.store(gparts + blk * 2 * BLOCK_G + BLOCK_G + g, sum_gx)
    if PHASE == 1:
        return
    if PHASE == 0:
        _sample_barrier(sync_ptr, n, N, SPLITS, BACKOFF_NS)
    # this program's share of the sample's parameter-gradient columns, slices summed in order
    j = tl.arange(0, BLOCK_SPLITS)
    col = blk * BLOCK_CW + tl.arange(0, BLOCK_CW)
    c_ok = col < 2 * C
    rows = (n * SPLITS + j).to(tl.int64) * 2 * C
    cols = tl.load(part_ptr + rows[:, None] + col[None, :], mask=(j < SPLITS)[:, None] & c_ok[None, :], other=0.0,
                   cache_modifier=".cg")
    tl.store(sample_ptr + n.to(tl.int64) * 2 * C + col, tl.sum(cols, axis=0), mask=c_ok)
    # the sample's mean(dy w) and mean(dy w x_hat), slices summed in order
    j_mask = (j < SPLITS)[:, None] & (g < BLOCK_G)[None, :]
    p_off = j[:, None] * 2 * BLOCK_G + g[None, :]
    total = (S * CG).to(COMPUTE)
    mean_g = tl.sum(tl.load(gparts + p_off, mask=j_mask, other=0.0, cache_modifier=".cg"), axis=0) / total
    mean_gx = tl.sum(tl.load(gparts + p_off + BLOCK_G, mask=j_mask, other=0.0, cache_modifier=".cg"),
                     axis=0) / total
    # dx = alpha inv (dy w - mean(dy w) - x_hat mean(dy w x_hat)) = p dy + q (x - mean) + r
    p = (alpha * inv)[:, None] * w
    q = -alpha * inv * inv * mean_gx
    r = -alpha * inv * mean_g
    xc = _widen(x, COMPUTE, 1 if NARROW else 0) - mean[None, :, None]
    dx = _widen(dy, COMPUTE, 1 if NARROW else 0) * p[None, :, :] + (xc * q[None, :, None] + r[None, :, None])
    d_offsets, d_mask, _, _ = _slice_tile(n, blk, S, G, CG, dsn, dss, dsc, BIG, EXACT, BLOCK_S, BLOCK_G,
                                          BLOCK_CG)
    _resident_store(dx_ptr + d_offsets, 0, d_mask, tl.reshape(dx, [BLOCK_S, BLOCK_G * BLOCK_CG]), beta, HAS_BETA)


# -- host --------------------------------------------------------------------------------------
def _rule(direction):
    rule = GROUP_NORM_COOP if isinstance(GROUP_NORM_COOP, str) else GROUP_NORM_COOP[direction]
    if rule not in ("channels_last", "never"):
        raise ValueError(f"group_norm_coop.GROUP_NORM_COOP must be 'channels_last' or 'never', got {rule!r}")
    return rule


def _sms(t):
    return torch.cuda.get_device_properties(t.device).multi_processor_count if t.device.type == "cuda" else 132


def plan(xv, G, CG, direction, narrow):
    """The tile of this design for an (N, C, S) view (a dict of constexprs, num_warps and
    SPLITS), or None: switched off, not channels-last, a pixel's channels over the held
    bytes, or more slices a sample than the GPU has SMs (the barrier's bound)."""
    if _rule(direction) == "never" or not channels_last(xv):
        return None
    _, _, S = ncs_dims(xv)
    block_g, block_cg = triton.next_power_of_2(G), triton.next_power_of_2(CG)
    tensors = 2 if direction == "backward" else 1
    held = 2 if narrow else max(4, xv.element_size())
    pixel = tensors * block_g * block_cg * held
    budget = COOP_BYTES if isinstance(COOP_BYTES, int) else COOP_BYTES[direction]
    if pixel > budget:
        return None
    block_s = min(triton.next_power_of_2(S), 1 << ((budget // pixel).bit_length() - 1))
    splits = cdiv(S, block_s)
    if splits > _sms(xv):
        return None
    warps = COOP_WARPS if isinstance(COOP_WARPS, int) else COOP_WARPS[direction]
    extra = {"maxnreg": int(COOP_MAXNREG)} if COOP_MAXNREG and xv.device.type == "cuda" else {}
    return dict(**extra, SPLITS=splits, EXACT=block_cg == CG and block_g == G, BLOCK_S=block_s, BLOCK_G=block_g,
                BLOCK_CG=block_cg, BLOCK_SPLITS=triton.next_power_of_2(splits), num_warps=warps)


def _phases():
    """(PHASE, ...) launches: one with the barrier on a GPU, two under the interpreter."""
    if COOP_BARRIER and os.environ.get("TRITON_INTERPRET") != "1":
        return (0,)
    return (1, 2)


def _barrier():
    """The barrier's constexprs: tickets or program ids, the pause between polls."""
    return dict(TICKETS=bool(COOP_TICKETS), BACKOFF_NS=int(COOP_BACKOFF_NS))


def _sync(xv, N):
    """The ticket and barrier counters (zero; every launch leaves them zero)."""
    return zeroed_counters(xv.device, 1 + 2 * N)


def forward(xv, yv, scale, bias, mean_f, inv_f, G, CG, eps, alpha, beta, has_beta, big, narrow, tile):
    """y (and the saved mean and 1/std when mean_f is given) through the cooperative kernel."""
    N, C, S = ncs_dims(xv)
    tile = dict(tile)
    splits = tile.pop("SPLITS")
    part = torch.empty(N * splits * 2 * tile["BLOCK_G"], dtype=_workspace_dtype(xv), device=xv.device)
    sync = _sync(xv, N)
    save = mean_f is not None
    xs, ys = ncs_strides(xv), ncs_strides(yv)
    for phase in _phases():
        _gn_coop_forward_kernel[(N * splits,)](
            xv, yv, scale, bias if bias is not None else scale, mean_f if save else part, inv_f if save else part,
            part, sync, N, G, CG, S, splits, xs[0], xs[2], xs[1], ys[0], ys[2], ys[1], float(eps), alpha, beta,
            PHASE=phase, **_barrier(), HAS_BIAS=bias is not None, SAVE=save, HAS_BETA=has_beta, BIG=big,
            COMPUTE=compute_dtype(xv), NARROW=narrow, **tile)


def backward(xv, gv, dv, scale, mean_f, inv_f, sample, G, CG, alpha, beta, has_beta, big, narrow, tile):
    """dx through the cooperative kernel, from saved statistics; the partial
    parameter-gradient rows [N, 2, C] (sum(dy x_hat), sum(dy)) into sample, as norms.py's
    other designs leave them for _param_sums."""
    N, C, S = ncs_dims(xv)
    tile = dict(tile)
    splits = tile.pop("SPLITS")
    part = torch.empty(N * splits * 2 * C, dtype=_workspace_dtype(xv), device=xv.device)
    gpart = torch.empty(N * splits * 2 * tile["BLOCK_G"], dtype=_workspace_dtype(xv), device=xv.device)
    sync = _sync(xv, N)
    xs, gs, ds = ncs_strides(xv), ncs_strides(gv), ncs_strides(dv)
    for phase in _phases():
        _gn_coop_backward_kernel[(N * splits,)](
            xv, gv, dv, scale, mean_f, inv_f, part, gpart, sample, sync, N, G, CG, S, C, splits,
            xs[0], xs[2], xs[1], gs[0], gs[2], gs[1], ds[0], ds[2], ds[1], alpha, beta,
            PHASE=phase, **_barrier(), HAS_BETA=has_beta, BIG=big, COMPUTE=compute_dtype(xv), NARROW=narrow,
            BLOCK_CW=triton.next_power_of_2(cdiv(2 * C, splits)), **tile)
