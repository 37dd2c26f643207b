"""Tensor ops in Triton: set, scale, transform (layout change), add, op_tensor, reduce.

Pointwise ops share one kernel shape: tensors broadcast to the output's shape (a
broadcast dim is a stride of 0), dims coalesced to at most four. A transform whose
input and output have different innermost dims (NCHW <-> NHWC) uses a tiled kernel
that reads and writes whole 2-D tiles, so both sides stay coalesced. Reductions view
the input as (kept, reduced) and reduce a block of rows per program. Switches (off by
default until timed on the GPU) select faster paths for an NCHW bias add (one bias value a
16-byte vector: BIAS_KERNEL) and for sums over rows contiguous along the row
(CONTIGUOUS_ROWS_KERNEL: "runs", whole rows streamed as one run a program, or "ahead", a
resident wave of programs each a run of rows loaded one row ahead); STRIDED_ROWS_BLOCK_K
sets NHWC's channel tile."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..errors import BadParamError
from .common import cdiv
from .layer_utils import (blend_args, blend_store, check_dtypes, coalesce, compute_dtype, first_index,
                          needs_int64, pointwise_chunks, unravel4)

# cudnnOpTensorOp_t and cudnnReduceTensorOp_t values
OP_ADD, OP_MUL, OP_MIN, OP_MAX, OP_SQRT, OP_NOT = 0, 1, 2, 3, 4, 5
RED_ADD, RED_MUL, RED_MIN, RED_MAX, RED_AMAX, RED_AVG, RED_NORM1, RED_NORM2, RED_MUL_NO_ZEROS = range(9)
INDEXED_REDUCTIONS = (RED_MIN, RED_MAX, RED_AMAX)

BLOCK = 1024  # measured on the H200: 1024 x 4 warps reaches copy speed, 4096 x 8 is 4% slower
NUM_WARPS = 4
# rows reduced along a strided axis (NHWC over H, W: 64 channels x this many positions per
# step): few programs (N*C / 64) each walk a long row, so each step must keep many bytes in
# flight; on the H200 (64x256x56x56 bf16) 128 measured 1.68 TB/s, 32 1.50
STRIDED_ROWS_BLOCK_R = 128
# contiguous rows of at least 1024 (NCHW over H, W): one row per program, this many
# positions a step (4096: a 56x56 plane in one masked step; measured 2.48 TB/s on the H200
# against PyTorch's 2.57; the benchmark times 2048 and 1024 too)
CONTIGUOUS_ROWS_BLOCK_R = 1024  # H200 05:39 UTC: 4096 1.01x torch's time, 2048 1.00, 1024 0.97
# Strided rows also split along the row when the row blocks alone give fewer programs
# than this many per SM: each program reduces one part of its rows to a partial in a
# workspace, and a second kernel combines the parts in a fixed order (deterministic, no
# atomics). NHWC 64x256x56x56 has 256 row blocks for 132 SMs; with the split it runs
# about 4 per SM. REDUCE_SPLIT forces the number of parts (None: chosen from the SMs;
# 1: never split).
SPLIT_PROGRAMS_PER_SM = 4  # H200 05:39 UTC, NHWC sum over H, W: no split 1.34x torch, 4/SM 1.13, 8/SM 1.16, 16/SM 1.17
REDUCE_SPLIT = None
# How the parts of a split row are combined: "kernel" (_combine_kernel, a second launch)
# or "last" (in _reduce_kernel: each program stores its partial and takes a ticket from a
# per-row-block counter; the program that takes the last ticket sums the partials in part
# order, so the result does not depend on which program finished last, and resets the
# counter). The counters are zeroed once per (device, stream) and left zeroed by every
# call, so reductions must not run concurrently on one stream (they cannot) - two
# streams get two buffers. The benchmark times both ([last combines]).
SPLIT_COMBINE = "kernel"
# software pipelining of the strided-rows loop (tl.range num_stages; None: a plain loop).
# sm_90, [64 channels x 128 positions] bf16: None loads 4 LDG.128 a thread a step; 2 and 3
# prefetch the next steps with cp.async (LDGSTS.128, 16 KiB of shared memory a stage), so
# more bytes are in flight per SM. The benchmark times 2 and 3 ([stages 2], [stages 3]).
STRIDED_ROWS_STAGES = 3  # H200 06:2x UTC, NHWC sum over H, W: none 1.15 of torch's time, 2 stages 0.94, 3 0.89
# NHWC reductions over H, W: channels a program (rows of one tile step along the
# contiguous kept dim). 64: [64 x 128] tiles of 128-byte position rows; C (256) makes a
# step one contiguous run of whole positions (8 KB at 16 positions) and leaves 64 row
# blocks to the split. The benchmark times 256 as [256 channels x 16/32].
STRIDED_ROWS_BLOCK_K = 64
# cudnnAddTensor with a broadcast operand that is constant over runs of S elements of a
# dense c (NCHW bias: S = H * W): "planes" loads one bias value per 16-byte vector of c
# (one division a vector, none per element); "generic" is _pointwise_kernel (four-dim
# index arithmetic per element). H200 (docs/performance.md, 64x256x56x56 bf16 NCHW):
# "planes" 3.87 TB/s, "generic" 3.02 (NHWC, generic: 3.85). The benchmark times
# "generic" as [generic] and "planes" with 2048-element blocks as [planes 2048].
BIAS_KERNEL = "planes"
BIAS_BLOCK = 1024  # elements a program (128 threads x one 16-byte vector for bf16)
# Rows back to back in memory (NCHW over H, W) for sums and products: "runs" has each
# program stream RUNS_ROWS whole rows as one contiguous run in 16-byte vectors (RUNS_BLOCK
# elements a step; each vector summed in registers and added to its row's slot), one
# block reduction a program; "rows" is _reduce_kernel (one 6 KB row a program, 4 steps,
# the last 64 of 1024 lanes used; 2.65 TB/s). MIN/MAX/AMAX stay on "rows" (indices,
# NaN rules). The benchmark times "runs" as [runs 4/8/16 rows].
# H200 2026-11-30 11:40 UTC (sweep_layers_c1.py, NCHW 64x256x56x56 bf16 sum over H*W):
# rows 2.64 TB/s, ahead 8/SM 2.60, ahead 12/SM 2.74, ahead 8/SM with 2048-element steps
# 2.78 (the same sums there): the last is the default.
CONTIGUOUS_ROWS_KERNEL = "ahead"
RUNS_ROWS = 8
RUNS_BLOCK = 2048
# "ahead" (issue 5; the same ops as "runs", rows of 1024 < R <= 8 * AHEAD_BLOCK_R
# along a contiguous axis, any row starts): _reduce_ahead_kernel, one resident wave of
# programs (AHEAD_PROGRAMS_PER_SM an SM) each a run of rows, a whole row loaded as a
# [steps, AHEAD_BLOCK_R] tile and the next row's load issued before this row is
# reduced. "rows" runs 16384 short programs for 64x256x56x56 (4 steps each, all loads
# issued at once, then a block reduction): the SM's programs start and finish together, so
# the memory pipe idles at every handover; the ahead programs keep a row each in flight
# throughout. The steps fold in "rows"' order (step 0 first, then the lanes), so with the
# same step size the sums are those of "rows" where the compiler keeps that lane layout
# (checked by the sweep).
AHEAD_PROGRAMS_PER_SM = 8
AHEAD_BLOCK_R = 2048  # elements a step of the ahead kernel (rows of R <= 8 steps)
# Issue 5, session 6. AHEAD_DEPTH: rows the ahead kernel keeps in flight a program (1: the
# next row; 2: the next two, twice the bytes in flight an SM: 8 programs x 2 rows of 6.3 KB
# for NCHW 64x256x56x56 bf16, where one row each is ~50 KB an SM, about what 3.3 TB/s
# needs at ~2 us loaded DRAM latency; sm_90 4 warps x [2, 2048]: 40 registers at depth 1,
# 56 at 2). AHEAD_WARPS: the ahead kernel's warps (None: 4 up to 4096-element rows, else 8).
AHEAD_DEPTH = 1
AHEAD_WARPS = None
# How the split picks its parts from SPLIT_PROGRAMS_PER_SM: "up" (parts = ceil(SMs x per
# SM / row blocks)) or "down" (floor: never more programs than SMs x per SM, so that the
# programs run as one wave when per SM is what fits). NHWC 64x256x56x56 bf16 (256 row
# blocks of 64 channels, sm_90 8 warps, 62 registers: 4 programs an SM, 528 slots): "up"
# takes 3 parts, 768 programs, 1.45 waves; "down" 2 parts, 512 programs, one wave. Measured
# (sweep_layers_c1, H200 11:40 UTC): one wave without the split (256 programs, ~2 an SM)
# 2.70 TB/s against the 1.45 waves' 2.51; "down" keeps one wave at ~4 an SM: predicted
# 2.8-3.0 TB/s for the NHWC sum over H, W and global average pooling. Measured (H200 15:15
# UTC, sweep_layers_b2): "down" 2.49 TB/s, "up" 2.49, no split 2.71 (sum) / 2.61 (average).
SPLIT_ROUND = "down"
RUNS_OPS = (RED_ADD, RED_MUL, RED_AVG, RED_NORM1, RED_NORM2, RED_MUL_NO_ZEROS)
_COUNTERS: dict = {}
SPLIT_OPS = (RED_ADD, RED_MUL, RED_AVG, RED_NORM1, RED_NORM2, RED_MUL_NO_ZEROS)  # partials combine exactly so
# Sums and averages over H, W of a dense channels-last 4-D tensor (bf16/fp16/fp32) on a Hopper
# GPU: gluon_stream's TMA streaming kernel and its finish (H200 17:52 UTC, 64x256x56x56 bf16:
# 3.67 TB/s against this module's 2.49), so global and adaptive-to-1x1 average pooling too.
# TRIDNN_GLUON_STREAM=0 (or GLUON_STREAM = False) keeps everything on the Triton kernels.
GLUON_STREAM = os.environ.get("TRIDNN_GLUON_STREAM", "1") != "0"
GLUON_STREAM_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # the dtypes routed


_HOPPER: dict = {}


def gluon_device_ok(device) -> bool:
    """Gluon's TMA kernels run on sm_90 only, never in the interpreter (tests patch this to
    check the routing on the CPU)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    ok = _HOPPER.get(device)
    if ok is None:
        ok = _HOPPER[device] = torch.cuda.get_device_capability(device)[0] == 9
    return ok


def gluon_route(a, c, op) -> bool:
    """Whether reduce_tensor hands c = reduce(a) to gluon_stream.sum_hw_into: ADD or AVG over
    exactly H and W of a dense channels-last [N, C, H, W] (gluon_stream.sum_hw_why_not)."""
    if (not GLUON_STREAM or int(op) not in (RED_ADD, RED_AVG) or a.dtype not in GLUON_STREAM_DTYPES
            or not gluon_device_ok(a.device)):
        return False
    from . import gluon_stream
    return gluon_stream.sum_hw_why_not(a, c) is None


@triton.jit
def _pointwise_kernel(a_ptr, b_ptr, c_ptr, numel, D1, D2, D3,
                      as0, as1, as2, as3, bs0, bs1, bs2, bs3, cs0, cs1, cs2, cs3,
                      alpha1: tl.float64, alpha2: tl.float64, beta: tl.float64, fill: tl.float64,
                      OP: tl.constexpr, HAS_B: tl.constexpr, HAS_BETA: tl.constexpr, PROPAGATE_NAN: tl.constexpr,
                      FLAT: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr, BLOCK: tl.constexpr):
    """c = op(alpha1 * a, alpha2 * b) + beta * c. OP -1 is set (c = fill), -2 is
    scale/transform (c = alpha1 * a + beta * c); 0..5 are cudnnOpTensorOp_t."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha1, alpha2, beta, fill = (tl.full([], alpha1, COMPUTE), tl.full([], alpha2, COMPUTE),
                                  tl.full([], beta, COMPUTE), tl.full([], fill, COMPUTE))
    i = first_index(BLOCK, BIG) + tl.arange(0, BLOCK)
    mask = i < numel
    if FLAT:
        a_off = i
        b_off = i
        c_off = i
    else:
        i0, i1, i2, i3 = unravel4(i, D1, D2, D3)
        a_off = i0 * as0 + i1 * as1 + i2 * as2 + i3 * as3
        b_off = i0 * bs0 + i1 * bs1 + i2 * bs2 + i3 * bs3
        c_off = i0 * cs0 + i1 * cs1 + i2 * cs2 + i3 * cs3
    if OP == -1:
        value = tl.zeros([BLOCK], COMPUTE) + fill
        tl.store(c_ptr + c_off, value.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        a = tl.load(a_ptr + a_off, mask=mask, other=0.0).to(COMPUTE)
        if OP == -2:
            value = a
        else:
            a = a * alpha1
            b = a
            if HAS_B:
                b = tl.load(b_ptr + b_off, mask=mask, other=0.0).to(COMPUTE) * alpha2
            if OP == 0:
                value = a + b
            elif OP == 1:
                value = a * b
            elif OP == 2 or OP == 3:
                value = tl.where(a < b, a, b) if OP == 2 else tl.where(a > b, a, b)
                if PROPAGATE_NAN:  # NaN wins (np.minimum)
                    value = tl.where((a != a) | (b != b), a + b, value)
                else:  # NaN loses unless both are NaN (np.fmin)
                    value = tl.where(a != a, b, tl.where(b != b, a, value))
            elif OP == 4:
                value = tl.sqrt(a)
            else:
                value = 1.0 - a
        scale = alpha1 if OP == -2 else 1.0
        blend_store(c_ptr, c_off, mask, value, scale, beta, HAS_BETA)


@triton.jit
def _transpose_tile_kernel(x_ptr, y_ptr, P, Q, D1, xs_p, xs_q, xs0, xs1, ys_p, ys_q, ys0, ys1,
                           alpha: tl.float64, beta: tl.float64, HAS_BETA: tl.constexpr, BIG: tl.constexpr,
                           COMPUTE: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr):
    """y = alpha * x + beta * y over a (rest, P, Q) geometry where x is contiguous along P
    and y along Q: each program moves one BLOCK_P x BLOCK_Q tile, read along P and
    written along Q (Triton swaps the tile's layout through shared memory)."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    pid_p = tl.program_id(0)
    pid_q = tl.program_id(1)
    rest = tl.program_id(2)
    if BIG:  # every offset term in int64: q * xs_q alone can pass 2^31 too
        rest = rest.to(tl.int64)
        pid_p = pid_p.to(tl.int64)
        pid_q = pid_q.to(tl.int64)
    r0 = rest // D1
    r1 = rest % D1
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    mask = (p[:, None] < P) & (q[None, :] < Q)
    x_off = r0 * xs0 + r1 * xs1 + p[:, None] * xs_p + q[None, :] * xs_q
    y_off = r0 * ys0 + r1 * ys1 + p[:, None] * ys_p + q[None, :] * ys_q
    x = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(COMPUTE)
    blend_store(y_ptr, y_off, mask, x, alpha, beta, HAS_BETA)


def _launch_pointwise(op, c, a=None, b=None, alpha1=1.0, alpha2=1.0, beta=0.0, fill=0.0, propagate_nan=False):
    if c.numel() == 0:
        return
    _, beta, has_beta = blend_args(1.0, beta)
    operands = [c] + [t.expand(c.shape) for t in (a, b) if t is not None]
    big = needs_int64(*operands)
    compute = compute_dtype(*operands)
    for views, dims4, strides4, flat in pointwise_chunks(*operands):
        cv, av, bv = views[0], views[1] if a is not None else views[0], views[-1] if b is not None else views[0]
        cs, as_, bs = strides4[0], strides4[1] if a is not None else strides4[0], \
            strides4[-1] if b is not None else strides4[0]
        numel = cv.numel()
        _pointwise_kernel[(cdiv(numel, BLOCK),)](
            av, bv, cv, numel, dims4[1], dims4[2], dims4[3], *as_, *bs, *cs,
            float(alpha1), float(alpha2), beta, float(fill),
            OP=op, HAS_B=b is not None, HAS_BETA=has_beta, PROPAGATE_NAN=bool(propagate_nan), FLAT=flat, BIG=big, COMPUTE=compute,
            BLOCK=BLOCK, num_warps=NUM_WARPS)


@triton.jit
def _bias_runs_kernel(a_ptr, c_ptr, numel, S, CB, sa,  # c: numel dense elements; a[((i // S) % CB) * sa]
                      alpha: tl.float64, beta: tl.float64,
                      HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                      BLOCK: tl.constexpr, VEC: tl.constexpr):
    """c = alpha * a + beta * c where a is constant over runs of S elements of c (a bias
    over N, C, H, W in NCHW: one value per H * W plane). S % VEC == 0, so each VEC-element
    vector of c lies in one run: one bias load and one division per vector."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to BLOCK // VEC vectors of VEC consecutive elements
    first = first_index(BLOCK, BIG) + tl.arange(0, BLOCK // VEC) * VEC
    offs = first[:, None] + tl.arange(0, VEC)[None, :]
    mask = offs < numel
    # the broadcast operand: one value a vector (L1-resident: a few distinct addresses)
    bias = tl.load(a_ptr + ((first // S) % CB) * sa, mask=first < numel, other=0.0).to(COMPUTE)
    value = tl.zeros([BLOCK // VEC, VEC], COMPUTE) + bias[:, None]
    blend_store(c_ptr, offs, mask, value, alpha, beta, HAS_BETA)


def _bias_runs(a, c):
    """(S, CB, sa, VEC) when c is dense and a (expanded to c) varies along one coalesced
    dim only, with runs of S elements that hold whole 16-byte vectors; else None."""
    if c.numel() == 0 or a.dtype != c.dtype:
        return None
    dims, (cs, as_) = coalesce(tuple(c.shape), [c.stride(), a.stride()])
    if len(dims) < 2 or cs[-1] != 1 or any(cs[i] != cs[i + 1] * dims[i + 1] for i in range(len(dims) - 1)):
        return None
    varying = [i for i, st in enumerate(as_) if st != 0]
    if len(varying) != 1 or varying[0] == len(dims) - 1:
        return None
    j = varying[0]
    S = 1
    for d in dims[j + 1:]:
        S *= d
    vec = max(1, 16 // c.element_size())
    if S % vec:
        return None
    return S, dims[j], as_[j], vec


def _check_broadcast(name, t, c):
    if t.dim() != c.dim() or any(d != 1 and d != e for d, e in zip(t.shape, c.shape)):
        raise BadParamError(f"{name} dims {tuple(t.shape)} cannot broadcast to the output dims "
                            f"{tuple(c.shape)}: each dim must equal the output's or be 1")


def set_tensor(y, value) -> None:
    """Every element of y = value (cudnnSetTensor)."""
    check_dtypes(y=y)
    _launch_pointwise(-1, y, fill=value)


def scale_tensor(y, alpha) -> None:
    """y = alpha * y (cudnnScaleTensor)."""
    check_dtypes(y=y)
    _launch_pointwise(-2, y, a=y, alpha1=alpha)


def transform_tensor(x, y, alpha=1.0, beta=0.0) -> None:
    """y = alpha * x + beta * y where x and y have the same dims and any layouts and
    dtypes (a dtype change rounds once, from the float32 or float64 value)."""
    check_dtypes(x=x)
    check_dtypes(y=y)
    if tuple(x.shape) != tuple(y.shape):
        raise BadParamError(f"transform_tensor: x dims {tuple(x.shape)} != y dims {tuple(y.shape)}")
    if y.numel() == 0:
        return
    tiled = _tile_geometry(x, y)
    if tiled is None:
        _launch_pointwise(-2, y, a=x, alpha1=alpha, beta=beta)
        return
    (P, Q, D0, D1), (xs_p, xs_q, xs0, xs1), (ys_p, ys_q, ys0, ys1) = tiled
    _, beta, has_beta = blend_args(alpha, beta)
    block_p, block_q = 64, 64
    grid = (cdiv(P, block_p), cdiv(Q, block_q), D0 * D1)
    _transpose_tile_kernel[grid](x, y, P, Q, D1, xs_p, xs_q, xs0, xs1, ys_p, ys_q, ys0, ys1,
                                 float(alpha), beta, HAS_BETA=has_beta, BIG=needs_int64(x, y),
                                 COMPUTE=compute_dtype(x, y), BLOCK_P=block_p, BLOCK_Q=block_q,
                                 num_warps=4)


def _tile_geometry(x, y):
    """For a layout change, the dims (P, Q, D0, D1) and strides where x is contiguous
    along P and y along Q, with at most two other dims; None when the plain pointwise
    kernel is as good (same innermost dim, or not four dims or fewer)."""
    dims, (ys, xs) = coalesce(tuple(y.shape), [y.stride(), x.stride()])
    if len(dims) < 2 or len(dims) > 4:
        return None
    q = len(dims) - 1
    if ys[q] != 1 or xs[q] == 1:
        return None
    p_candidates = [a for a in range(len(dims)) if xs[a] == 1]
    if not p_candidates:
        return None
    p = p_candidates[0]
    rest = [a for a in range(len(dims)) if a not in (p, q)]
    rest = [None] * (2 - len(rest)) + rest
    size = lambda a: 1 if a is None else dims[a]
    stride = lambda s, a: 0 if a is None else s[a]
    return ((dims[p], dims[q], size(rest[0]), size(rest[1])),
            (xs[p], xs[q], stride(xs, rest[0]), stride(xs, rest[1])),
            (ys[p], ys[q], stride(ys, rest[0]), stride(ys, rest[1])))


def add_tensor(a, c, alpha=1.0, beta=1.0) -> None:
    """c = alpha * a + beta * c, a broadcast to c's dims (cudnnAddTensor)."""
    check_dtypes(a=a, c=c)
    _check_broadcast("a", a, c)
    runs = _bias_runs(a.expand(c.shape), c) if BIAS_KERNEL == "planes" else None
    if runs is None:
        _launch_pointwise(-2, c, a=a, alpha1=alpha, beta=beta)
        return
    S, cb, sa, vec = runs
    _, beta, has_beta = blend_args(alpha, beta)
    numel = c.numel()
    _bias_runs_kernel[(cdiv(numel, BIAS_BLOCK),)](
        a, c, numel, S, cb, sa, float(alpha), beta, HAS_BETA=has_beta, BIG=needs_int64(a, c),
        COMPUTE=compute_dtype(a, c), BLOCK=BIAS_BLOCK, VEC=vec, num_warps=NUM_WARPS)


def op_tensor(a, b, c, op: int, alpha1=1.0, alpha2=1.0, beta=0.0, propagate_nan=False) -> None:
    """c = op(alpha1 * a, alpha2 * b) + beta * c (cudnnOpTensor); a and b broadcast to c.
    SQRT and NOT are unary: sqrt(alpha1 * a) and 1 - alpha1 * a. MIN/MAX let NaN win
    only with propagate_nan."""
    op = int(op)
    if op not in range(6):
        raise BadParamError(f"unknown op_tensor op {op}; valid: ADD 0, MUL 1, MIN 2, MAX 3, SQRT 4, NOT 5")
    unary = op in (OP_SQRT, OP_NOT)
    check_dtypes(a=a, c=c, b=None if unary else b)
    _check_broadcast("a", a, c)
    if not unary:
        _check_broadcast("b", b, c)
    _launch_pointwise(op, c, a=a, b=None if unary else b, alpha1=alpha1, alpha2=alpha2, beta=beta,
                      propagate_nan=propagate_nan)


# -- reduction -------------------------------------------------------------------------
@triton.jit
def _multiply(a, b):
    return a * b


@triton.jit
def _fold(acc, AXIS: tl.constexpr, OP: tl.constexpr):
    """acc folded along AXIS the way op OP combines values: MIN, MAX / AMAX, a product
    (MUL, MUL_NO_ZEROS) or a sum (the rest)."""
    if OP == 2:
        value = tl.min(acc, axis=AXIS)
    elif OP == 3 or OP == 4:
        value = tl.max(acc, axis=AXIS)
    elif OP == 1 or OP == 8:
        value = tl.reduce(acc, AXIS, _multiply)
    else:
        value = tl.sum(acc, axis=AXIS)
    return value


@triton.jit
def _map_value(a, OP: tl.constexpr):
    """What a "runs" op folds in place of each loaded value: NORM1's |a|, NORM2's a * a,
    MUL_NO_ZEROS's a with zeros as ones (the other ops fold a as it is)."""
    if OP == 6:
        a = tl.abs(a)
    elif OP == 7:
        a = a * a
    elif OP == 8:
        a = tl.where(a != 0.0, a, 1.0)
    return a


@triton.jit
def _finish(value, R, OP: tl.constexpr):
    """What follows the fold of a whole row of R values: AVG's division, NORM2's root."""
    if OP == 5:
        value = value / R
    if OP == 7:
        value = tl.sqrt(value)
    return value


@triton.jit
def _reduce_kernel(a_ptr, c_ptr, idx_ptr, part_ptr, count_ptr, K, K2, R, CHUNK, sa_k1, sa_k2, sa_r, sc_k,
                   alpha: tl.float64, beta: tl.float64,
                   OP: tl.constexpr, WITH_INDICES: tl.constexpr, HAS_BETA: tl.constexpr,
                   PROPAGATE_NAN: tl.constexpr, SPLIT: tl.constexpr, LAST_COMBINES: tl.constexpr,
                   BIG: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
                   STAGES: tl.constexpr = None):
    """Reduce each of BLOCK_K rows of length R (stride sa_r) to one value, looping over R.
    Row k starts at (k // K2) * sa_k1 + (k % K2) * sa_k2, so NHWC's (n, c) rows need no copy.
    SPLIT: program (i, j) takes positions [j * CHUNK, (j + 1) * CHUNK) of its rows and
    stores the raw partial (sum or product) at part_ptr[j * K + k] for _combine_kernel;
    LAST_COMBINES: the program of row block i that takes the last ticket of
    count_ptr[i] combines them here instead (SPLIT_COMBINE "last")."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    k = first_index(BLOCK_K, BIG) + tl.arange(0, BLOCK_K)
    k_mask = k < K
    a_row = (k // K2) * sa_k1 + (k % K2) * sa_k2
    if BIG:  # the position term r * sa_r alone can pass 2^31 too
        sa_r = tl.cast(sa_r, tl.int64)
    r_begin = tl.program_id(1) * CHUNK
    r_end = tl.minimum(R, r_begin + CHUNK)
    if OP == 1 or OP == 8:
        acc = tl.full([BLOCK_K, BLOCK_R], 1.0, COMPUTE)
    elif OP == 2:
        acc = tl.full([BLOCK_K, BLOCK_R], float("inf"), COMPUTE)
    elif OP == 3 or OP == 4:
        acc = tl.full([BLOCK_K, BLOCK_R], float("-inf"), COMPUTE)
    else:
        acc = tl.zeros([BLOCK_K, BLOCK_R], COMPUTE)
    arg = tl.zeros([BLOCK_K, BLOCK_R], tl.int32)
    nan_at = tl.full([BLOCK_K, BLOCK_R], 2147483647, tl.int32)  # first NaN's index per lane
    seen = tl.zeros([BLOCK_K, BLOCK_R], tl.int1)  # a non-NaN value was seen
    for r0 in tl.range(r_begin, r_end, BLOCK_R, num_stages=STAGES):
        r = r0 + tl.arange(0, BLOCK_R)
        mask = k_mask[:, None] & (r[None, :] < r_end)
        a = tl.load(a_ptr + a_row[:, None] + r[None, :] * sa_r, mask=mask, other=0.0).to(COMPUTE)
        if OP == 0 or OP == 5:
            acc += a
        elif OP == 1:
            acc *= tl.where(mask, a, 1.0)
        elif OP == 8:
            acc *= tl.where(mask & (a != 0.0), a, 1.0)
        elif OP == 6:
            acc += tl.abs(a)
        elif OP == 7:
            acc += a * a
        else:
            if OP == 4:
                a = tl.abs(a)
            if OP == 2:
                better = mask & (a < acc)
            else:
                better = mask & (a > acc)
            acc = tl.where(better, a, acc)
            arg = tl.where(better, r[None, :], arg)
            nan_at = tl.where(mask & (a != a) & (nan_at == 2147483647), r[None, :], nan_at)
            seen = seen | (mask & (a == a))
    value = _fold(acc, 1, OP)
    if SPLIT:
        tl.store(part_ptr + tl.program_id(1) * K + k, value, mask=k_mask)
        if LAST_COMBINES:
            parts = tl.num_programs(1)
            tl.debug_barrier()  # every thread's partial is stored before the release below
            ticket = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel", scope="gpu")
            if ticket == parts - 1:  # the other parts' partials are visible (acquire)
                total = _finish(_combine_parts(part_ptr, k, k_mask, K, parts, OP, COMPUTE), R, OP)
                blend_store(c_ptr, k * sc_k, k_mask, total, alpha, beta, HAS_BETA)
                tl.store(count_ptr + tl.program_id(0), 0)  # zeroed for the next call
    else:
        value = _finish(value, R, OP)
        if OP == 2 or OP == 3 or OP == 4:
            # first index among the lanes holding the extreme value
            hit = (acc == value[:, None]) & seen
            first = tl.min(tl.where(hit, arg, 2147483647), axis=1)
            first = tl.where(first == 2147483647, 0, first)
            first_nan = tl.min(nan_at, axis=1)
            any_seen = tl.max(seen.to(tl.int32), axis=1) > 0
            if PROPAGATE_NAN:  # any NaN wins, at its first position
                value = tl.where(first_nan < 2147483647, float("nan"), value)
                first = tl.where(first_nan < 2147483647, first_nan, first)
            else:  # NaN is skipped; a row of NaN only gives NaN
                value = tl.where(any_seen, value, float("nan"))
            if WITH_INDICES:
                tl.store(idx_ptr + k, first.to(idx_ptr.dtype.element_ty), mask=k_mask)
        blend_store(c_ptr, k * sc_k, k_mask, value, alpha, beta, HAS_BETA)


@triton.jit
def _reduce_runs_kernel(a_ptr, c_ptr, K, R, sc_k,  # K rows of R elements, row k at a_ptr + k * R
                        alpha: tl.float64, beta: tl.float64,
                        OP: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                        ROWS: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr):
    """Sum-like reductions (ADD, MUL, AVG, NORM1, NORM2, MUL_NO_ZEROS) of rows that lie
    back to back (NCHW over H, W). A program takes ROWS whole rows, one contiguous run,
    and streams it in steps of BLOCK elements as 16-byte vectors of VEC (R % VEC == 0: a
    vector never crosses a row). Each vector is reduced in its thread's registers and
    added to its row's slot by a one-hot select; every (thread, vector, slot) sum runs in
    a fixed order, then one block reduction a program: deterministic, no masked lanes
    but the run's last step."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to its rows and their run of memory
    row0 = first_index(ROWS, BIG)
    base = row0 * R
    run = tl.minimum(K - row0, ROWS) * R
    G: tl.constexpr = BLOCK // VEC
    slot = tl.arange(0, ROWS)
    if OP == 1 or OP == 8:
        acc = tl.full([G, ROWS], 1.0, COMPUTE)
    else:
        acc = tl.zeros([G, ROWS], COMPUTE)
    # loop over the run: load, reduce each vector, add it to its row's slot
    for s in range(0, run, BLOCK):
        first = s + tl.arange(0, G) * VEC  # each vector's offset within the run
        offs = first[:, None] + tl.arange(0, VEC)[None, :]
        mask = offs < run
        if OP == 1 or OP == 8:
            a = tl.load(a_ptr + base + offs, mask=mask, other=1.0).to(COMPUTE)
        else:
            a = tl.load(a_ptr + base + offs, mask=mask, other=0.0).to(COMPUTE)
        a = _map_value(a, OP)
        v = _fold(a, 1, OP)
        hit = (first // R)[:, None] == slot[None, :]
        if OP == 1 or OP == 8:
            acc *= tl.where(hit, v[:, None], 1.0)
        else:
            acc += tl.where(hit, v[:, None], 0.0)
    # one block reduction, then AVG's division, NORM2's root and the blend
    value = _finish(_fold(acc, 0, OP), R, OP)
    k = row0 + slot
    blend_store(c_ptr, k * sc_k, k < K, value, alpha, beta, HAS_BETA)


@triton.jit
def _reduce_ahead_kernel(a_ptr, c_ptr, K, K2, R, rows_per_program, sa_k1, sa_k2, sc_k,
                         alpha: tl.float64, beta: tl.float64,
                         OP: tl.constexpr, HAS_BETA: tl.constexpr, BIG: tl.constexpr, COMPUTE: tl.constexpr,
                         STEPS: tl.constexpr, BLOCK_R: tl.constexpr, DEPTH: tl.constexpr = 1):
    """Sum-like reductions (the "runs" ops) of rows contiguous along the row, R <= STEPS *
    BLOCK_R: a run of rows_per_program rows a program, each row one [STEPS, BLOCK_R] tile
    (position s * BLOCK_R + j), the next row's load issued before this one is folded.
    The fold takes the steps first, then the lanes: _reduce_kernel's order."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    # map the program to its run of rows
    first = tl.program_id(0) * rows_per_program
    last = tl.minimum(first + rows_per_program, K)
    if BIG:
        first = first.to(tl.int64)
    r = tl.arange(0, STEPS)[:, None] * BLOCK_R + tl.arange(0, BLOCK_R)[None, :]
    r_mask = r < R
    if OP == 1 or OP == 8:
        fill = 1.0
    else:
        fill = 0.0
    a_next = tl.load(a_ptr + (first // K2) * sa_k1 + (first % K2) * sa_k2 + r, mask=r_mask & (first < last),
                     other=fill)
    if DEPTH == 2:  # the row after it too (two rows in flight)
        second = first + 1
        a_next2 = tl.load(a_ptr + (second // K2) * sa_k1 + (second % K2) * sa_k2 + r,
                          mask=r_mask & (second < last), other=fill)
    for k in range(first, last):
        # this row from the registers; the load DEPTH rows on is issued before the fold
        a = a_next.to(COMPUTE)
        nxt = k + DEPTH
        if DEPTH == 2:
            a_next = a_next2
            a_next2 = tl.load(a_ptr + (nxt // K2) * sa_k1 + (nxt % K2) * sa_k2 + r, mask=r_mask & (nxt < last),
                              other=fill)
        else:
            a_next = tl.load(a_ptr + (nxt // K2) * sa_k1 + (nxt % K2) * sa_k2 + r, mask=r_mask & (nxt < last),
                             other=fill)
        a = _map_value(a, OP)
        value = _finish(_fold(_fold(a, 0, OP), 0, OP), R, OP)
        blend_store(c_ptr, k * sc_k, k < last, value, alpha, beta, HAS_BETA)


@triton.jit
def _combine_parts(part_ptr, k, k_mask, K, S, OP: tl.constexpr, COMPUTE: tl.constexpr):
    """Sum (product for MUL) of the S partials of rows k, in part order; read through L2
    (.cg), where the other programs' stores are."""
    if OP == 1 or OP == 8:
        total = tl.full(k.shape, 1.0, COMPUTE)
    else:
        total = tl.zeros(k.shape, COMPUTE)
    for j in range(0, S):
        if OP == 1 or OP == 8:
            total *= tl.load(part_ptr + j * K + k, mask=k_mask, other=1.0, cache_modifier=".cg")
        else:
            total += tl.load(part_ptr + j * K + k, mask=k_mask, other=0.0, cache_modifier=".cg")
    return total


@triton.jit
def _combine_kernel(part_ptr, c_ptr, K, S, R, sc_k, alpha: tl.float64, beta: tl.float64,
                    OP: tl.constexpr, HAS_BETA: tl.constexpr, COMPUTE: tl.constexpr,
                    BLOCK_K: tl.constexpr, BLOCK_S: tl.constexpr):
    """c[k] from the S partials part[j * K + k] of _reduce_kernel (SPLIT), in a fixed
    order: sum (product for MUL), then AVG's division and NORM2's root, then the blend."""
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta = tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE)
    k = tl.program_id(0) * BLOCK_K + tl.arange(0, BLOCK_K)
    k_mask = k < K
    if OP == 1 or OP == 8:
        acc = tl.full([BLOCK_S, BLOCK_K], 1.0, COMPUTE)
    else:
        acc = tl.zeros([BLOCK_S, BLOCK_K], COMPUTE)
    for j0 in range(0, S, BLOCK_S):
        j = j0 + tl.arange(0, BLOCK_S)
        mask = (j[:, None] < S) & k_mask[None, :]
        if OP == 1 or OP == 8:
            acc *= tl.load(part_ptr + j[:, None] * K + k[None, :], mask=mask, other=1.0)
        else:
            acc += tl.load(part_ptr + j[:, None] * K + k[None, :], mask=mask, other=0.0)
    value = _finish(_fold(acc, 0, OP), R, OP)
    blend_store(c_ptr, k * sc_k, k_mask, value, alpha, beta, HAS_BETA)


def zeroed_counters(device, n):
    """n int32 ticket counters, all zero, on the current stream: SPLIT_COMBINE "last" here,
    group_norm_coop's tickets and barriers (one buffer per device and stream; every call
    leaves them zero, so the users of one stream share it). A larger one replaces
    it when needed, but the old one is kept: a captured CUDA graph may still point at it.
    (Under capture on a stream that never ran a split reduction eagerly, the zeroing is
    captured too and replays with the graph.)"""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    bufs = _COUNTERS.setdefault((str(device), stream), [])
    if not bufs or bufs[-1].numel() < n:
        bufs.append(torch.zeros(max(n, 1024), dtype=torch.int32, device=device))
    return bufs[-1]


def _split_parts(a, op, K, R, block_k, block_r, strided) -> int:
    """How many parts each row is cut into (1: no split; see SPLIT_PROGRAMS_PER_SM)."""
    if not strided or op not in SPLIT_OPS:
        return 1
    max_parts = cdiv(R, block_r)
    if REDUCE_SPLIT is not None:
        return max(1, min(int(REDUCE_SPLIT), max_parts))
    from .common import sm_count
    if a.device.type != "cuda":
        return 1
    programs = cdiv(K, block_k)
    want = sm_count(a.device) * SPLIT_PROGRAMS_PER_SM
    if programs * 2 > want:
        return 1
    if SPLIT_ROUND not in ("up", "down"):
        raise ValueError(f"tensor_ops.SPLIT_ROUND must be 'up' or 'down', got {SPLIT_ROUND!r}")
    parts = cdiv(want, programs) if SPLIT_ROUND == "up" else want // programs
    return max(1, min(parts, max_parts))


def reduce_tensor(a, c, indices, workspace, op: int, alpha=1.0, beta=0.0, propagate_nan=False) -> None:
    """c = alpha * reduce_op(a over the dims where c has size 1) + beta * c.

    ``indices`` (int32 or uint32, c's shape, or None; MIN/MAX/AMAX) receives the
    row-major index of the first extreme element within the reduced dims (the first
    NaN when NaN propagates). ``workspace`` is not needed: sums stay in registers."""
    op = int(op)
    if op not in range(9):
        raise BadParamError(f"unknown reduce op {op}; valid: ADD 0, MUL 1, MIN 2, MAX 3, AMAX 4, "
                            f"AVG 5, NORM1 6, NORM2 7, MUL_NO_ZEROS 8")
    check_dtypes(a=a, c=c)
    if a.dim() != c.dim() or any(cd != 1 and cd != ad for ad, cd in zip(a.shape, c.shape)):
        raise BadParamError(f"reduce_tensor: c dims {tuple(c.shape)} must equal a's dims "
                            f"{tuple(a.shape)} or be 1 on each reduced dim")
    if indices is not None:
        if tuple(indices.shape) != tuple(c.shape) or indices.dtype not in (torch.int32, torch.uint32):
            raise BadParamError(f"indices must be int32 or uint32 with c's dims {tuple(c.shape)}, got "
                                f"{indices.dtype} {tuple(indices.shape)}")
        indices = indices.view(torch.int32)
        if op not in INDEXED_REDUCTIONS:
            indices = None  # as the NumPy backend: only MIN, MAX and AMAX write indices
    if c.numel() == 0:
        return
    if gluon_route(a, c, op):
        from . import gluon_stream
        gluon_stream.sum_hw_into(a, c, float(alpha), float(beta), mean=op == RED_AVG)
        return
    reduced = [ax for ax in range(a.dim()) if c.shape[ax] == 1 and a.shape[ax] != 1]
    kept = [ax for ax in range(a.dim()) if ax not in reduced]
    K, R = c.numel(), max(1, a.numel() // max(c.numel(), 1))
    geometry = _rows_geometry(a, kept, reduced)
    if geometry is None:  # dims that do not merge: a packed copy in (kept, reduced) order
        a2 = a.permute(*kept, *reduced).reshape(K, R)
        geometry = (K, 1, a2.stride(0), 0, a2.stride(1))
    else:
        a2 = a
    K2, sa_k1, sa_k2, sa_r = geometry[1:]
    c_kept = c.permute(*kept, *reduced)
    c1 = c_kept.reshape(K)
    staged = not _is_view_of(c1, c)
    if staged:
        c1 = c1.clone()
    idx1 = None
    if indices is not None:
        idx1 = torch.empty(K, dtype=torch.int32, device=c.device)
    _, beta, has_beta = blend_args(alpha, beta)
    vec = max(1, 16 // a.element_size())
    rows_back_to_back = sa_r == 1 and (sa_k2 == R or K2 == 1) and (sa_k1 == K2 * R or K == K2)
    if (CONTIGUOUS_ROWS_KERNEL == "runs" and op in RUNS_OPS and rows_back_to_back and R >= 1024
            and R % vec == 0 and a2 is a):
        _reduce_runs_kernel[(cdiv(K, RUNS_ROWS),)](
            a2, c1, K, R, c1.stride(0), float(alpha), beta, OP=op, HAS_BETA=has_beta,
            BIG=needs_int64(a2, c1), COMPUTE=compute_dtype(a), ROWS=RUNS_ROWS, BLOCK=RUNS_BLOCK, VEC=vec,
            num_warps=NUM_WARPS)
        if staged:
            c_kept.copy_(c1.view(c_kept.shape))
        return
    if CONTIGUOUS_ROWS_KERNEL not in ("rows", "runs", "ahead"):
        raise ValueError(f"tensor_ops.CONTIGUOUS_ROWS_KERNEL must be 'rows', 'runs' or 'ahead', "
                         f"got {CONTIGUOUS_ROWS_KERNEL!r}")
    steps = cdiv(R, AHEAD_BLOCK_R)
    if AHEAD_DEPTH not in (1, 2):
        raise ValueError(f"tensor_ops.AHEAD_DEPTH must be 1 or 2, got {AHEAD_DEPTH!r}")
    if (CONTIGUOUS_ROWS_KERNEL == "ahead" and op in RUNS_OPS and sa_r == 1 and R > 1024 and steps <= 8
            and not (sa_k2 == 1 and K2 > 1)):
        from .common import sm_count
        programs = max(1, min(K, sm_count(a.device) * int(AHEAD_PROGRAMS_PER_SM)))
        per = cdiv(K, programs)
        block_steps = triton.next_power_of_2(steps)
        _reduce_ahead_kernel[(cdiv(K, per),)](
            a2, c1, K, K2, R, per, sa_k1, sa_k2, c1.stride(0), float(alpha), beta, OP=op, HAS_BETA=has_beta,
            BIG=needs_int64(a2, c1), COMPUTE=compute_dtype(a), STEPS=block_steps, BLOCK_R=AHEAD_BLOCK_R,
            DEPTH=int(AHEAD_DEPTH),
            num_warps=int(AHEAD_WARPS) if AHEAD_WARPS else (4 if block_steps * AHEAD_BLOCK_R <= 4096 else 8))
        if staged:
            c_kept.copy_(c1.view(c_kept.shape))
        return
    strided = sa_r != 1 and sa_k2 == 1 and K2 > 1
    if strided:  # kept dim contiguous (NHWC over H, W): tile along it
        block_k = min(triton.next_power_of_2(K2), STRIDED_ROWS_BLOCK_K)
        block_r = min(triton.next_power_of_2(R), STRIDED_ROWS_BLOCK_R)
    else:
        block_k = 1 if R >= 1024 else 16
        block_r = min(triton.next_power_of_2(R), CONTIGUOUS_ROWS_BLOCK_R if block_k == 1 else 256)
    parts = _split_parts(a, op, K, R, block_k, block_r, strided)
    chunk = cdiv(cdiv(R, parts), block_r) * block_r  # whole steps per part
    parts = cdiv(R, chunk)
    compute = compute_dtype(a)
    part = c1  # not read unless split
    if SPLIT_COMBINE not in ("kernel", "last"):
        raise ValueError(f"tensor_ops.SPLIT_COMBINE must be 'kernel' or 'last', got {SPLIT_COMBINE!r}")
    last = parts > 1 and SPLIT_COMBINE == "last"
    counters = c1  # not touched unless last
    if parts > 1:
        part = torch.empty(parts * K, dtype=torch.float64 if compute == tl.float64 else torch.float32,
                           device=a.device)
    if last:
        counters = zeroed_counters(a.device, cdiv(K, block_k))
    _reduce_kernel[(cdiv(K, block_k), parts)](
        a2, c1, idx1 if idx1 is not None else c1, part, counters, K, K2, R, chunk, sa_k1, sa_k2, sa_r,
        c1.stride(0), float(alpha), beta, OP=op, WITH_INDICES=indices is not None, HAS_BETA=has_beta,
        PROPAGATE_NAN=bool(propagate_nan), SPLIT=parts > 1, LAST_COMBINES=last,
        BIG=needs_int64(a2, c1), COMPUTE=compute, BLOCK_K=block_k, BLOCK_R=block_r,
        STAGES=STRIDED_ROWS_STAGES if strided and indices is None else None,  # indices: 198 registers staged
        num_warps=8 if block_r >= 2048 or block_k * block_r >= 8192 else 4)
    if parts > 1 and not last:
        block_s = min(triton.next_power_of_2(parts), 16)
        _combine_kernel[(cdiv(K, 256),)](
            part, c1, K, parts, R, c1.stride(0), float(alpha), beta, OP=op, HAS_BETA=has_beta, COMPUTE=compute,
            BLOCK_K=256, BLOCK_S=block_s, num_warps=4)
    if staged:
        c_kept.copy_(c1.view(c_kept.shape))
    if indices is not None:
        indices.permute(*kept, *reduced).copy_(idx1.view(c_kept.shape))


def _merge_logical(dims, strides):
    """Adjacent logical dims merged where contiguous: [(size, stride)], size-1 dims dropped."""
    merged = []
    for d, st in zip(dims, strides):
        if d == 1:
            continue
        if merged and merged[-1][1] == st * d:
            merged[-1] = (merged[-1][0] * d, st)
        else:
            merged.append((d, st))
    return merged


def _rows_geometry(a, kept, reduced):
    """(K, K2, stride of k // K2, stride of k % K2, stride along the row) when the kept
    dims of ``a`` merge into at most two and the reduced ones into one; else None."""
    k_dims = _merge_logical([a.shape[i] for i in kept], [a.stride(i) for i in kept])
    r_dims = _merge_logical([a.shape[i] for i in reduced], [a.stride(i) for i in reduced])
    if len(k_dims) > 2 or len(r_dims) > 1:
        return None
    k_dims = [(1, 0)] * (2 - len(k_dims)) + k_dims
    r_stride = r_dims[0][1] if r_dims else 0
    return (k_dims[0][0] * k_dims[1][0], k_dims[1][0], k_dims[0][1], k_dims[1][1], r_stride)


def _is_view_of(view, base) -> bool:
    return view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
