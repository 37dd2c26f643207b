"""Per-channel sums over an NHWC tensor streamed by TMA, in Gluon (Hopper only).

Why: the plain Triton reductions over N*H*W in NHWC (tensor_ops' reduce over H*W, the
statistics pass of batchnorm.py, group norm) stop at 2.1-2.5 TB/s on the H200 where a copy
reaches 3.8. An SM needs ~40-64 KB of loads outstanding to cover DRAM latency at its share
of the bandwidth (~25 B/ns); tl.load tiles keep far less in flight, and every element
costs address and predicate instructions. A TMA load moves a whole [BLOCK_P, BLOCK_C] box
(16-32 KB) into shared memory with one instruction from one thread, so a ring of STAGES
boxes keeps 64-192 KB in flight at almost no instruction cost; the warps then only read
shared memory (one 16-byte load a thread per row slice) and add.

The data: x [N, C, H, W] channels-last is viewed as [SEGS, L, CC] (TMA descriptor, box
[1, BLOCK_P, BLOCK_C]): SEGS = N and L = H*W for sums per image (reduce over H*W, global
average pooling), SEGS = 1 and L = N*H*W for batch-norm statistics. A row must be a
multiple of 16 bytes for TMA, so G consecutive pixels form one row of CC = G*C columns
(column j is channel j % C; C = 3 bf16: G = 8, 24 columns); the finish folds them.

The walk: a segment's rows are cut into boxes of BLOCK_P rows, B = cdiv(L, BLOCK_P) a
segment; a unit is (segment, column block, split) and covers PER consecutive boxes of
that segment (the last split fewer). The persistent programs take units pid, pid + grid,
...; rows past the segment's end come back from TMA as zeros (so plain sums need no mask;
shifted squares mask the last box of a segment). Per unit a program writes its partial
sums part[seg, split, q, column] (q = 0: sum of x - shift, q = 1: sum of (x - shift)^2),
float32; ``_finish_kernel`` (plain Triton) adds them in float64 in a fixed order (tiles of
splits, then a fixed tree): deterministic, no atomics. shift[column] = x's first row (the
first G pixels), as batchnorm.py's _stats_kernel does, so |mean| >> std keeps its digits.
For batch norm the finish also writes a = scale / sqrt(var + eps), b = bias - mean * a.

The apply pass (``stream_apply_kernel``, y = act(a[c] * x + b[c])) streams x in the same
way and writes y through two shared-memory output slots by TMA store. It walks the
statistics pass's units; with REVERSE each program starts from its last box, so it first
reads what the statistics pass read last, which the 50 MB L2 may still hold (x itself is
102.8 MB for 64x256x56x56 bf16, so at most about half of the second read can hit).

Two ways to keep the ring full (WARP_SPEC):
- 0: one partition; before reading box i it issues the load of box i + STAGES - 1 into the
  slot box i - 1 used (a thread barrier first: every warp is done with it);
- 1: gl.warp_specialize: a 1-warp loader partition issues loads as slots free up (empty
  barriers), the default partition only waits, reads and adds.

Where it runs (Hopper GPUs, ROUTE_CONFIG; TRIDNN_GLUON_STREAM=0 turns it off): tensor_ops'
reduce_tensor ADD/AVG over H, W of dense channels-last tensors (global and adaptive-to-1x1
average pooling through it; ``sum_hw_into``, the finish blends alpha/beta) and batchnorm.py's
training forward (``bn_partials`` feed its own finalize; ``bn_apply`` for NORM / relu without
z or blending). tests/test_gluon_stream_routing.py checks the routing.

Gluon kernels do not run under the Triton interpreter: the tests compile every config
for sm_90 offline (``compile_sm90``) and check the host arithmetic and the finish kernel
on the CPU against a NumPy mirror of the walk; results against float64 need a Hopper GPU.
"""
from __future__ import annotations

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from .common import cdiv
from .gluon_common import compile_sm90 as _compile_sm90, desc_sig, descriptor as _descriptor
from .gluon_common import sm_count as _sm_count
from .gluon_common import ring_barriers

# --------------------------------------------------------------------------------------
# Device code: the streaming reduction
# --------------------------------------------------------------------------------------


@gluon.jit
def _unit(u, SPLITS, CBN, PER, B):
    """Unit u -> (segment, column block, split, first box, boxes)."""
    seg = u // (CBN * SPLITS)
    r = u % (CBN * SPLITS)
    cb = r // SPLITS
    sp = r % SPLITS
    j0 = sp * PER
    return seg, cb, sp, j0, gl.minimum(PER, B - j0)


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _column_sums(acc):
    """Sum over the rows (gl.reduce with a Gluon combine: gl.sum's combine is a plain Triton
    function, which the offline compile cannot call when TRITON_INTERPRET is set)."""
    return gl.reduce(acc, 0, _add)


@gluon.jit
def _issue(x_desc, bufs, ready, q, seg, row0, col0, STAGES: gl.constexpr):
    """TMA load number q of this program (box at [seg, row0, col0]) into ring slot q % STAGES."""
    s = q % STAGES
    bar = ready.index(s)
    mbarrier.expect(bar, x_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(x_desc, [seg, row0, col0], bar, bufs.index(s))


@gluon.jit
def _accumulate(tile, acc, acc2, shift, limit, BLOCK_P: gl.constexpr, R: gl.constexpr, layout: gl.constexpr,
                SQUARES: gl.constexpr, MASKED: gl.constexpr):
    """Add a [BLOCK_P, BLOCK_C] shared-memory box into the [R, BLOCK_C] float32 accumulators,
    R rows at a time (one 16-byte load a thread). SQUARES: acc += x - shift, acc2 += (x - shift)^2,
    rows >= limit masked when MASKED (TMA's zero fill would add -shift there); else acc += x."""
    for r0 in gl.static_range(0, BLOCK_P, R):
        v = tile.slice(r0, R, dim=0).load(layout).to(gl.float32)
        if SQUARES:
            d = v - gl.expand_dims(shift, 0)
            if MASKED:
                rows = r0 + gl.arange(0, R, layout=gl.SliceLayout(1, layout))
                d = gl.where(gl.expand_dims(rows < limit, 1), d, 0.0)
            acc = acc + d
            acc2 = acc2 + d * d
        else:
            acc = acc + v
    return acc, acc2


@gluon.jit
def _issue_next(x_desc, bufs, ready, lq, lu, lseg, lrow, lcol, lnb, nprog, SPLITS, CBN, PER, B, UNITS,
                BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr):
    """Single partition: issue the next load (if any) and advance (lq, lu, lseg, lrow, lcol, lnb):
    load number, unit, its segment, the next box's first row and column, boxes left in the unit."""
    if lu < UNITS:
        _issue(x_desc, bufs, ready, lq, lseg, lrow, lcol, STAGES)
        lq += 1
        lrow += BLOCK_P
        lnb -= 1
        if lnb == 0:
            lu += nprog
            lseg, lcb, lsp, lj0, lnb = _unit(lu, SPLITS, CBN, PER, B)
            lrow = lj0 * BLOCK_P
            lcol = lcb * BLOCK_C
    return lq, lu, lseg, lrow, lcol, lnb


@gluon.jit
def _consume_unit(x_desc, x_ptr, part_ptr, bufs, ready, empty, it, u, nprog, lq, lu, lseg, lrow, lcol, lnb,
                  L, CC, B, PER, SPLITS, CBN, UNITS, BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr,
                  STAGES: gl.constexpr, R: gl.constexpr, layout: gl.constexpr, SQUARES: gl.constexpr,
                  WARP_SPEC: gl.constexpr):
    """Reduce unit u (ring position ``it`` onwards) and store its partial sums. Without
    WARP_SPEC this partition also issues the loads, STAGES - 1 boxes ahead (the state of
    ``_issue_next``, returned advanced)."""
    seg, cb, sp, j0, nb = _unit(u, SPLITS, CBN, PER, B)
    cols = cb * BLOCK_C + gl.arange(0, BLOCK_C, layout=gl.SliceLayout(0, layout))
    cmask = cols < CC
    if SQUARES:
        shift = gl.load(x_ptr + cols, mask=cmask, other=0.0).to(gl.float32)
    else:
        shift = gl.zeros([BLOCK_C], gl.float32, gl.SliceLayout(0, layout))
    acc = gl.zeros([R, BLOCK_C], gl.float32, layout)
    acc2 = gl.zeros([R, BLOCK_C], gl.float32, layout)
    for k in range(nb):
        if not WARP_SPEC:
            # every warp is done with the slot box it-1 used: refill it with load it+STAGES-1
            gl.thread_barrier()
            lq, lu, lseg, lrow, lcol, lnb = _issue_next(x_desc, bufs, ready, lq, lu, lseg, lrow, lcol, lnb, nprog,
                                                       SPLITS, CBN, PER, B, UNITS, BLOCK_P, BLOCK_C, STAGES)
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        tile = bufs.index(s).reshape([BLOCK_P, BLOCK_C])
        row0 = (j0 + k) * BLOCK_P
        if SQUARES:
            if row0 + BLOCK_P > L:  # the segment's last box: mask the zero-filled rows
                acc, acc2 = _accumulate(tile, acc, acc2, shift, L - row0, BLOCK_P, R, layout, SQUARES, True)
            else:
                acc, acc2 = _accumulate(tile, acc, acc2, shift, L - row0, BLOCK_P, R, layout, SQUARES, False)
        else:
            acc, acc2 = _accumulate(tile, acc, acc2, shift, L - row0, BLOCK_P, R, layout, SQUARES, False)
        if WARP_SPEC:
            gl.thread_barrier()  # every warp has read the slot
            mbarrier.arrive(empty.index(s))
        it += 1
    NACC: gl.constexpr = 2 if SQUARES else 1
    base = part_ptr + ((seg * SPLITS + sp) * NACC) * CC
    gl.store(base + cols, _column_sums(acc), mask=cmask)
    if SQUARES:
        gl.store(base + CC + cols, _column_sums(acc2), mask=cmask)
    return it, lq, lu, lseg, lrow, lcol, lnb


@gluon.jit
def _consumer(x_desc, x_ptr, part_ptr, bufs, ready, empty, L, CC, B, PER, SPLITS, CBN, UNITS,
              BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr, VEC: gl.constexpr,
              TPC: gl.constexpr, WARPS: gl.constexpr, SQUARES: gl.constexpr, WARP_SPEC: gl.constexpr):
    """The reading partition (WARPS warps): units pid, pid + grid, ...; without WARP_SPEC it
    first issues STAGES - 1 loads, then one more before each box it reads."""
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // TPC, TPC], [WARPS, 1], [1, 0])
    R: gl.constexpr = (32 // TPC) * WARPS
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    # the next load: number lq, unit lu (decoded once a unit: segment, column, row, boxes left)
    lq = 0
    lu = pid
    lseg, lcb, lsp, lj0, lnb = _unit(lu, SPLITS, CBN, PER, B)
    lrow = lj0 * BLOCK_P
    lcol = lcb * BLOCK_C
    if not WARP_SPEC:
        for _ in gl.static_range(STAGES - 1):
            lq, lu, lseg, lrow, lcol, lnb = _issue_next(x_desc, bufs, ready, lq, lu, lseg, lrow, lcol, lnb, nprog,
                                                       SPLITS, CBN, PER, B, UNITS, BLOCK_P, BLOCK_C, STAGES)
    it = 0
    for u in range(pid, UNITS, nprog):
        it, lq, lu, lseg, lrow, lcol, lnb = _consume_unit(
            x_desc, x_ptr, part_ptr, bufs, ready, empty, it, u, nprog, lq, lu, lseg, lrow, lcol, lnb,
            L, CC, B, PER, SPLITS, CBN, UNITS, BLOCK_P, BLOCK_C, STAGES, R, layout, SQUARES, WARP_SPEC)


@gluon.jit
def _loader(x_desc, bufs, ready, empty, B, PER, SPLITS, CBN, UNITS,
            BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr):
    """Producer (one warp, WARP_SPEC): per box wait for a free slot and TMA the box into it.
    Empty barriers start in phase 0, so the first lap's waits (parity 1) pass."""
    it = 0
    for u in range(gl.program_id(0), UNITS, gl.num_programs(0)):
        seg, cb, sp, j0, nb = _unit(u, SPLITS, CBN, PER, B)
        for k in range(nb):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            _issue(x_desc, bufs, ready, it, seg, (j0 + k) * BLOCK_P, cb * BLOCK_C, STAGES)
            it += 1


_RUNTIME_INTS = ["L", "CC", "B", "PER", "SPLITS", "CBN", "UNITS"]


@gluon.jit(do_not_specialize=_RUNTIME_INTS)
def stream_sums_kernel(
    # x viewed as [SEGS, L, CC] (TMA descriptor, box [1, BLOCK_P, BLOCK_C]) and its first row
    # (the shifts); partial sums [SEGS, SPLITS, 1 or 2, CC] float32
    x_desc, x_ptr, part_ptr,
    # rows a segment, columns, boxes a segment, boxes a unit, splits a segment, column blocks, units
    L, CC, B, PER, SPLITS, CBN, UNITS,
    BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr,
    VEC: gl.constexpr, TPC: gl.constexpr,       # register layout: VEC columns a thread, TPC threads along columns
    SQUARES: gl.constexpr, WARP_SPEC: gl.constexpr, LOADER_REGS: gl.constexpr, num_warps: gl.constexpr,
):
    """Partial per-column sums (SQUARES: and shifted sums of squares) of this program's units."""
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    ready, empty = ring_barriers(STAGES)
    fence_async_shared()
    if WARP_SPEC:
        gl.warp_specialize([
            (_consumer, (x_desc, x_ptr, part_ptr, bufs, ready, empty, L, CC, B, PER, SPLITS, CBN, UNITS,
                         BLOCK_P, BLOCK_C, STAGES, VEC, TPC, num_warps, SQUARES, WARP_SPEC)),
            (_loader, (x_desc, bufs, ready, empty, B, PER, SPLITS, CBN, UNITS, BLOCK_P, BLOCK_C, STAGES)),
        ], [1], [LOADER_REGS])
    else:
        _consumer(x_desc, x_ptr, part_ptr, bufs, ready, empty, L, CC, B, PER, SPLITS, CBN, UNITS,
                  BLOCK_P, BLOCK_C, STAGES, VEC, TPC, num_warps, SQUARES, WARP_SPEC)


# --------------------------------------------------------------------------------------
# The finish (plain Triton: also runs under the interpreter)
# --------------------------------------------------------------------------------------

@triton.jit
def _finish_kernel(part_ptr, x_ptr, out_ptr, out2_ptr, C, CC, G, SPLITS, rows,
                   scale_ptr, bias_ptr, coef_ptr, eps: tl.float64, alpha: tl.float64, beta: tl.float64,
                   SQUARES: tl.constexpr, COEF: tl.constexpr, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr,
                   MEAN: tl.constexpr = False, HAS_BETA: tl.constexpr = False):
    """Per (segment, channel): add the splits' partials in split order, in float64, and fold the
    G columns of each channel. Sums: out[seg, c] = sum of x. SQUARES: out = mean, out2 = biased
    variance (each column: mean_j = shift_j + S1/rows, M2_j = S2 - S1^2/rows; columns combined
    exactly: M2 = sum M2_j + rows * sum (mean_j - mean)^2); COEF (batch norm, one segment):
    coef[0, c] = scale / sqrt(var + eps), coef[1, c] = bias - mean * coef[0, c] (float32).
    Sums are blended as cuDNN's reductions do: out = alpha * sum (MEAN: / (rows * G), the
    pixels a segment) + beta * out (read only with HAS_BETA), in float64."""
    seg = tl.program_id(0)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < C
    NACC: tl.constexpr = 2 if SQUARES else 1
    total = tl.zeros([BLOCK], tl.float64)
    mean = tl.zeros([BLOCK], tl.float64)
    m2 = tl.zeros([BLOCK], tl.float64)
    for gi in range(G):
        col = gi * C + c
        # [BLOCK_S splits, BLOCK channels] tiles: the loads of a tile are all in flight at once
        s1 = tl.zeros([BLOCK], tl.float64)
        s2 = tl.zeros([BLOCK], tl.float64)
        for sp0 in range(0, SPLITS, BLOCK_S):
            sp = sp0 + tl.arange(0, BLOCK_S)
            tm = (sp < SPLITS)[:, None] & m[None, :]
            offs = ((seg * SPLITS + sp) * NACC * CC)[:, None] + col[None, :]
            s1 += tl.sum(tl.load(part_ptr + offs, mask=tm, other=0.0).to(tl.float64), axis=0)
            if SQUARES:
                s2 += tl.sum(tl.load(part_ptr + offs + CC, mask=tm, other=0.0).to(tl.float64), axis=0)
        if SQUARES:
            shift = tl.load(x_ptr + col, mask=m, other=0.0).to(tl.float64)
            mj = shift + s1 / rows
            # Chan's update: (mean, m2) of gi columns so far with column gi (equal counts)
            delta = mj - mean
            mean += delta / (gi + 1)
            m2 += (s2 - s1 * s1 / rows) + delta * delta * rows * gi / (gi + 1)
        else:
            total += s1
    if SQUARES:
        tl.store(out_ptr + seg * C + c, mean.to(out_ptr.dtype.element_ty), mask=m)
        var = tl.maximum(m2, 0.0) / (rows * G)
        tl.store(out2_ptr + seg * C + c, var.to(out2_ptr.dtype.element_ty), mask=m)
        if COEF:
            a = tl.load(scale_ptr + c, mask=m, other=0.0).to(tl.float64) / tl.sqrt(var + eps)
            b = tl.load(bias_ptr + c, mask=m, other=0.0).to(tl.float64) - mean * a
            tl.store(coef_ptr + c, a.to(tl.float32), mask=m)
            tl.store(coef_ptr + C + c, b.to(tl.float32), mask=m)
    else:
        if MEAN:
            total = total / (rows * G)
        total = total * alpha
        if HAS_BETA:
            total += beta * tl.load(out_ptr + seg * C + c, mask=m, other=0.0).to(tl.float64)
        tl.store(out_ptr + seg * C + c, total.to(out_ptr.dtype.element_ty), mask=m)


FINISH_BLOCK = 32     # channels a finish program (tests)


def finish_tile(splits: int):
    """(splits a finish step, channels a finish program): all splits in one [<= 256, ...] tile of
    ~4096 elements, so the finish is one round of loads (131 splits for batch statistics of
    64x256x56x56: [256, 16], 16 programs; 2 splits an image for sums per image: [2, 128])."""
    bs = min(256, triton.next_power_of_2(max(1, splits)))
    return bs, max(16, min(128, 4096 // bs))


# --------------------------------------------------------------------------------------
# Device code: the batch-norm apply pass, y = act(a[c] * x + b[c]), TMA in and TMA out
# --------------------------------------------------------------------------------------

@gluon.jit
def _walk(pid, nprog, ordinal, my_units, REVERSE: gl.constexpr):
    """This program's ordinal-th unit (REVERSE: from its last unit back)."""
    k = my_units - 1 - ordinal if REVERSE else ordinal
    return pid + k * nprog


@gluon.jit
def _box_of(j0, nb, k, REVERSE: gl.constexpr):
    return j0 + (nb - 1 - k if REVERSE else k)


@gluon.jit
def _unit_start(pid, nprog, o, my_units, SPLITS, CBN, PER, B, BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr,
                REVERSE: gl.constexpr):
    """The o-th unit of this program's walk: (segment, first box's row, column, boxes)."""
    seg, cb, sp, j0, nb = _unit(_walk(pid, nprog, o, my_units, REVERSE), SPLITS, CBN, PER, B)
    return seg, _box_of(j0, nb, 0, REVERSE) * BLOCK_P, cb * BLOCK_C, nb


@gluon.jit
def _apply_issue_next(x_desc, bufs, ready, lq, lo, lseg, lrow, lcol, lnb, pid, nprog, my_units, SPLITS, CBN, PER, B,
                      BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr, REVERSE: gl.constexpr):
    """Single partition: issue the next load of the walk (if any) and advance its state (load
    number, unit ordinal, segment, row, column, boxes left in the unit)."""
    if lo < my_units:
        _issue(x_desc, bufs, ready, lq, lseg, lrow, lcol, STAGES)
        lq += 1
        lrow += -BLOCK_P if REVERSE else BLOCK_P
        lnb -= 1
        if lnb == 0:
            lo += 1
            lseg, lrow, lcol, lnb = _unit_start(pid, nprog, lo, my_units, SPLITS, CBN, PER, B, BLOCK_P, BLOCK_C,
                                                REVERSE)
    return lq, lo, lseg, lrow, lcol, lnb


@gluon.jit
def _apply_consumer(x_desc, y_desc, coef_ptr, bufs, ready, empty, obufs, C, CC, B, PER, SPLITS, CBN, UNITS,
                    BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr, OSTAGES: gl.constexpr,
                    VEC: gl.constexpr, TPC: gl.constexpr, WARPS: gl.constexpr, RELU: gl.constexpr,
                    REVERSE: gl.constexpr, WARP_SPEC: gl.constexpr):
    """Per box: wait for x, y = act(a * x + b) R rows at a time into an output slot, TMA-store
    it (the store drains while the next boxes compute; a slot is rewritten once the store
    OSTAGES boxes back has read it). Without WARP_SPEC this partition also issues the loads,
    STAGES - 1 ahead, in the same order (the state of ``_apply_issue_next``)."""
    layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // TPC, TPC], [WARPS, 1], [1, 0])
    R: gl.constexpr = (32 // TPC) * WARPS
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    my_units = (UNITS - pid + nprog - 1) // nprog
    lq = 0
    lo = 0
    lseg, lrow, lcol, lnb = _unit_start(pid, nprog, 0, my_units, SPLITS, CBN, PER, B, BLOCK_P, BLOCK_C, REVERSE)
    if not WARP_SPEC:
        for _ in gl.static_range(STAGES - 1):
            lq, lo, lseg, lrow, lcol, lnb = _apply_issue_next(x_desc, bufs, ready, lq, lo, lseg, lrow, lcol, lnb, pid,
                                                              nprog, my_units, SPLITS, CBN, PER, B, BLOCK_P, BLOCK_C,
                                                              STAGES, REVERSE)
    it = 0
    for o in range(my_units):
        seg, cb, sp, j0, nb = _unit(_walk(pid, nprog, o, my_units, REVERSE), SPLITS, CBN, PER, B)
        cols = cb * BLOCK_C + gl.arange(0, BLOCK_C, layout=gl.SliceLayout(0, layout))
        ch = cols % C
        a = gl.expand_dims(gl.load(coef_ptr + ch), 0)
        b = gl.expand_dims(gl.load(coef_ptr + C + ch), 0)
        for k in range(nb):
            if not WARP_SPEC:
                gl.thread_barrier()  # every warp is done with the x slot box it-1 used
                lq, lo, lseg, lrow, lcol, lnb = _apply_issue_next(x_desc, bufs, ready, lq, lo, lseg, lrow, lcol, lnb,
                                                                  pid, nprog, my_units, SPLITS, CBN, PER, B, BLOCK_P,
                                                                  BLOCK_C, STAGES, REVERSE)
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            tile = bufs.index(s).reshape([BLOCK_P, BLOCK_C])
            oslot = obufs.index(it % OSTAGES)
            out = oslot.reshape([BLOCK_P, BLOCK_C])
            tma.store_wait(pendings=OSTAGES - 1)  # the store that last used this slot has read it
            gl.thread_barrier()
            for r0 in gl.static_range(0, BLOCK_P, R):
                v = tile.slice(r0, R, dim=0).load(layout).to(gl.float32) * a + b
                if RELU:  # a NaN stays NaN, as on the CPU (PTX max alone would give 0)
                    v = gl.maximum(v, 0.0, propagate_nan=tl.PropagateNan.ALL)
                out.slice(r0, R, dim=0).store(v.to(y_desc.dtype))
            fence_async_shared()
            gl.thread_barrier()  # every warp has read the x slot and written the output slot
            if WARP_SPEC:
                mbarrier.arrive(empty.index(s))
            tma.async_copy_shared_to_global(y_desc, [seg, _box_of(j0, nb, k, REVERSE) * BLOCK_P, cb * BLOCK_C],
                                            oslot)
            it += 1
    tma.store_wait(pendings=0)


@gluon.jit
def _apply_loader(x_desc, bufs, ready, empty, B, PER, SPLITS, CBN, UNITS,
                  BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr, REVERSE: gl.constexpr):
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    my_units = (UNITS - pid + nprog - 1) // nprog
    it = 0
    for o in range(my_units):
        seg, cb, sp, j0, nb = _unit(_walk(pid, nprog, o, my_units, REVERSE), SPLITS, CBN, PER, B)
        for k in range(nb):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            _issue(x_desc, bufs, ready, it, seg, _box_of(j0, nb, k, REVERSE) * BLOCK_P, cb * BLOCK_C, STAGES)
            it += 1


@gluon.jit(do_not_specialize=["C"] + _RUNTIME_INTS[1:])
def stream_apply_kernel(
    # x and y viewed as [SEGS, L, CC] (TMA descriptors, box [1, BLOCK_P, BLOCK_C]); coef [2, C]
    # float32 (a, then b)
    x_desc, y_desc, coef_ptr,
    C, CC, B, PER, SPLITS, CBN, UNITS,
    BLOCK_P: gl.constexpr, BLOCK_C: gl.constexpr, STAGES: gl.constexpr, OSTAGES: gl.constexpr,
    VEC: gl.constexpr, TPC: gl.constexpr, RELU: gl.constexpr, REVERSE: gl.constexpr,
    WARP_SPEC: gl.constexpr, LOADER_REGS: gl.constexpr, num_warps: gl.constexpr,
):
    """y = act(a[c] * x + b[c]) over the same units as the statistics (REVERSE: every program
    walks its boxes from the last, so it first reads what the statistics pass read last,
    which the L2 may still hold)."""
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape, x_desc.layout)
    obufs = gl.allocate_shared_memory(y_desc.dtype, [OSTAGES] + y_desc.block_type.shape, y_desc.layout)
    ready, empty = ring_barriers(STAGES)
    fence_async_shared()
    if WARP_SPEC:
        gl.warp_specialize([
            (_apply_consumer, (x_desc, y_desc, coef_ptr, bufs, ready, empty, obufs, C, CC, B, PER, SPLITS, CBN,
                               UNITS, BLOCK_P, BLOCK_C, STAGES, OSTAGES, VEC, TPC, num_warps, RELU, REVERSE,
                               WARP_SPEC)),
            (_apply_loader, (x_desc, bufs, ready, empty, B, PER, SPLITS, CBN, UNITS, BLOCK_P, BLOCK_C, STAGES,
                             REVERSE)),
        ], [1], [LOADER_REGS])
    else:
        _apply_consumer(x_desc, y_desc, coef_ptr, bufs, ready, empty, obufs, C, CC, B, PER, SPLITS, CBN, UNITS,
                        BLOCK_P, BLOCK_C, STAGES, OSTAGES, VEC, TPC, num_warps, RELU, REVERSE, WARP_SPEC)

# --------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------


def config(bp, bc, stages, warps, warp_spec=False, per_sm=1):
    """A box of BLOCK_P rows x BLOCK_C columns, a ring of STAGES boxes, num_warps reading warps,
    warp_spec: a separate 1-warp loader partition; per_sm programs an SM."""
    return dict(BLOCK_P=bp, BLOCK_C=bc, STAGES=stages, num_warps=warps, WARP_SPEC=bool(warp_spec), PER_SM=per_sm)


def name(cfg) -> str:
    return (f"{cfg['BLOCK_P']}x{cfg['BLOCK_C']} s{cfg['STAGES']} w{cfg['num_warps']}"
            + (" ws" if cfg["WARP_SPEC"] else "") + (f" p{cfg['PER_SM']}" if cfg["PER_SM"] > 1 else ""))


# Box bytes (bf16) x ring depth = bytes a program keeps in flight (an SM needs ~40-64 KB):
# 64x256 = 32 KB, 128x128 = 32 KB, 128x256 = 64 KB, 32x256 = 16 KB.
CONFIGS = [
    config(64, 256, 4, 8), config(64, 256, 6, 8), config(64, 256, 4, 8, warp_spec=True),
    config(64, 256, 6, 8, warp_spec=True), config(128, 256, 3, 8), config(128, 256, 3, 8, warp_spec=True),
    config(32, 256, 6, 4, per_sm=2), config(32, 256, 4, 4, warp_spec=True, per_sm=2),
    config(128, 128, 4, 8), config(128, 128, 6, 4, warp_spec=True), config(64, 256, 3, 4, per_sm=2),
]


def max_regs(cfg) -> int:
    """The register cap that lets PER_SM programs fit the SM's 64K registers (a loader partition
    takes a 4-warp group's worth); 0 = no cap."""
    threads = (cfg["num_warps"] + (4 if cfg["WARP_SPEC"] else 0)) * 32 * cfg["PER_SM"]
    cap = min(255, (65536 // threads) // 8 * 8)
    return 0 if cap >= 255 and not cfg["WARP_SPEC"] else cap


def box_bytes(cfg, itemsize=2) -> int:
    return cfg["BLOCK_P"] * cfg["BLOCK_C"] * itemsize


def shared_bytes(cfg, itemsize=2) -> int:
    """The ring (barriers aside)."""
    return cfg["STAGES"] * box_bytes(cfg, itemsize)


def group(c: int, itemsize: int) -> int:
    """Pixels a TMA row: the fewest G with G*C*itemsize a multiple of 16 bytes."""
    g = 1
    while (g * c * itemsize) % 16:
        g *= 2
    return g


def _layout(block, dtype):
    """Unswizzled: the warps read whole 16-byte runs along a row, conflict-free without a swizzle."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=dtype.primitive_bitwidth, rank=len(block))


def _dense_nhwc(x) -> bool:
    n, c, h, w = x.shape
    return x.stride(1) == 1 and x.stride(3) == c and x.stride(2) == w * c and (n == 1 or x.stride(0) == h * w * c)


def why_not(x, per_image: bool) -> str | None:
    """None when the kernel can reduce x (dense NHWC, 16/32-bit float, rows of G pixels fit)."""
    import torch
    if x.dim() != 4 or not _dense_nhwc(x):
        return "x must be a dense channels-last [N, C, H, W] tensor"
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        return "bfloat16/float16/float32 only"
    if x.data_ptr() % 16:
        return "x must be 16-byte aligned"
    n, c, h, w = x.shape
    g = group(c, x.element_size())
    seg_len = h * w if per_image else n * h * w
    if seg_len % g:
        return f"{seg_len} pixels a segment is not a multiple of {g} (pixels a 16-byte row)"
    return None


def choose_splits(segs, cbn, boxes, programs):
    """Splits a segment minimizing the slowest program's work: rounds x (boxes a unit + 1), the
    1 for a unit's ending (cross-warp sums, the partials' store and their read in the finish)."""
    best = None
    for s in range(1, boxes + 1):
        per = cdiv(boxes, s)
        s = cdiv(boxes, per)  # no empty splits
        cost = cdiv(segs * cbn * s, programs) * (per + 1)
        if best is None or cost < best[0]:
            best = (cost, s, per)
    return best[1], best[2]


_plans: dict = {}


def plan(shape, itemsize, per_image, cfg, sms=132):
    """The launch geometry of x [N, C, H, W] (pure arithmetic: tests check it on the CPU),
    cached: choose_splits walks every split count (~1 ms of Python for batch statistics of
    64x256x56x56), and the routed layers repeat their shapes."""
    key = (tuple(shape), itemsize, bool(per_image), tuple(sorted(cfg.items())), sms)
    p = _plans.get(key)
    if p is None:
        if len(_plans) > 1024:
            _plans.clear()
        p = _plans[key] = _plan(shape, itemsize, per_image, cfg, sms)
    return dict(p)


def _plan(shape, itemsize, per_image, cfg, sms):
    n, c, h, w = shape
    g = group(c, itemsize)
    segs, seg_len = (n, h * w) if per_image else (1, n * h * w)
    rows = seg_len // g
    cc = g * c
    vec = 16 // itemsize
    bc = max(vec, min(cfg["BLOCK_C"] * 2 // itemsize, triton.next_power_of_2(cc)))  # box bytes as configured
    bp = min(256, cfg["BLOCK_P"] * cfg["BLOCK_C"] * 2 // itemsize // bc)
    tpc = min(32, bc // vec)
    rr = (32 // tpc) * cfg["num_warps"]
    bp = max(bp, rr)
    cbn = cdiv(cc, bc)
    boxes = cdiv(rows, bp)
    programs = sms * cfg["PER_SM"]
    splits, per = choose_splits(segs, cbn, boxes, programs)
    units = segs * cbn * splits
    return dict(G=g, SEGS=segs, L=rows, CC=cc, BLOCK_P=bp, BLOCK_C=bc, VEC=vec, TPC=tpc, R=rr, CBN=cbn, B=boxes,
                SPLITS=splits, PER=per, UNITS=units, grid=min(units, programs))


def descriptor(x, shape, strides, block):
    """gluon_common.descriptor in this module's unswizzled layout."""
    return _descriptor(x, shape, strides, block, _layout)


def prepare(x, per_image=False, squares=False, cfg=None, sms=None, out=None, out2=None, scale=None, bias=None,
            eps=1e-5, alpha=1.0, beta=0.0, mean=False):
    """Descriptors, buffers and launch arguments for ``launch``. per_image: sums over H*W per
    image (out [N, C], x's dtype unless given); else over N*H*W (out [1, C]; squares: out =
    mean, out2 = biased variance, float32; with scale and bias also coef [2, C] float32, the
    batch-norm multiplier and offset). Sums only: out = alpha * sum (mean: the average) +
    beta * out (beta 0: out is not read). Returns a dict (for CUDA-graph timing)."""
    import torch
    reason = why_not(x, per_image)
    if reason:
        raise ValueError(reason)
    cfg = dict(cfg or CONFIGS[0])
    if sms is None:
        sms = _sm_count(x.device)
    n, c, h, w = x.shape
    p = plan(x.shape, x.element_size(), per_image, cfg, sms)
    segs, rows, cc = p["SEGS"], p["L"], p["CC"]
    x_desc = descriptor(x, (segs, rows, cc), (rows * cc, cc, 1), (1, p["BLOCK_P"], p["BLOCK_C"]))
    nacc = 2 if squares else 1
    part = torch.empty((segs, p["SPLITS"], nacc, cc), device=x.device, dtype=torch.float32)
    if out is None:
        out = torch.empty((segs, c), device=x.device, dtype=torch.float32 if squares else x.dtype)
    if squares and out2 is None:
        out2 = torch.empty((segs, c), device=x.device, dtype=torch.float32)
    coef_mode = squares and scale is not None
    coef = torch.empty((2, c), device=x.device, dtype=torch.float32) if coef_mode else None
    args = (x_desc, x, part, rows, cc, p["B"], p["PER"], p["SPLITS"], p["CBN"], p["UNITS"])
    meta = dict(BLOCK_P=p["BLOCK_P"], BLOCK_C=p["BLOCK_C"], STAGES=cfg["STAGES"], VEC=p["VEC"], TPC=p["TPC"],
                SQUARES=bool(squares), WARP_SPEC=cfg["WARP_SPEC"], LOADER_REGS=40, num_warps=cfg["num_warps"])
    if max_regs(cfg):
        meta["maxnreg"] = max_regs(cfg)
    fin_args = (part, x, out, out2 if squares else out, c, cc, p["G"], p["SPLITS"], rows,
                scale if coef_mode else out, bias if coef_mode else out, coef if coef_mode else out, float(eps),
                float(alpha), float(beta))
    fin_s, fin_c = finish_tile(p["SPLITS"])
    fin_meta = dict(SQUARES=bool(squares), COEF=bool(coef_mode), BLOCK=fin_c, BLOCK_S=fin_s,
                    MEAN=bool(mean) and not squares, HAS_BETA=float(beta) != 0.0 and not squares)
    return dict(plan=p, cfg=cfg, grid=(p["grid"],), args=args, meta=meta, part=part, out=out, out2=out2, coef=coef,
                fin_grid=(segs, cdiv(c, fin_c)), fin_args=fin_args, fin_meta=fin_meta)


def launch(pp, finish=True):
    """Run a ``prepare`` result: the streaming kernel, then (finish) the finish kernel."""
    stream_sums_kernel[pp["grid"]](*pp["args"], **pp["meta"])
    if finish:
        _finish_kernel[pp["fin_grid"]](*pp["fin_args"], **pp["fin_meta"])
    return pp["out"], pp["out2"]


def sum_hw(x, cfg=None, sms=None):
    """[N, C] sums over H*W of a dense NHWC x (GPU, Hopper)."""
    return launch(prepare(x, per_image=True, cfg=cfg, sms=sms))[0]


def batch_stats(x, cfg=None, sms=None):
    """(mean [C], biased variance [C]) over N*H*W of a dense NHWC x, float32 (GPU, Hopper)."""
    mean, var = launch(prepare(x, squares=True, cfg=cfg, sms=sms))
    return mean[0], var[0]


# -- routing: what tensor_ops.reduce_tensor (and pooling through it) and batchnorm.py hand
# to these kernels on Hopper GPUs (the callers check the device and their switches) --------

# 128x128 s6 w4 ws: the best config of the H200 sweep of 17:52 UTC (64x256x56x56 bf16) for
# sums per image with their finish (3.67 TB/s; the Triton reduction 2.49) and for batch norm
# in the "L2" order (2.31; batchnorm.py 2.14)
ROUTE_CONFIG = config(128, 128, 6, 4, warp_spec=True)
_INT32 = 2 ** 31


def sum_hw_why_not(a, c) -> str | None:
    """None when c [N, C, 1, 1] = sums (or means) over H*W of a [N, C, H, W] can run here:
    a dense channels-last (``why_not``), c of a's dtype viewable as a dense [N, C]."""
    if a.dim() != 4 or c.dim() != 4:
        return "4-D tensors only"
    n, ch, h, w = a.shape
    if tuple(c.shape) != (n, ch, 1, 1) or h * w <= 1:
        return "c must be [N, C, 1, 1] of a [N, C, H, W] with H*W > 1"
    if c.dtype != a.dtype or c.device != a.device:
        return "c must have a's dtype and device"
    if (n > 1 and c.stride(0) != ch) or (ch > 1 and c.stride(1) != 1):
        return "c must be a dense [N, C]"
    if a.numel() >= _INT32:
        return "2^31 elements or more"
    return why_not(a, per_image=True)


def sum_hw_into(a, c, alpha=1.0, beta=0.0, mean=False, cfg=None):
    """c = alpha * (sum or mean over H*W of a) + beta * c for ``sum_hw_why_not``'s cases: the
    streaming kernel, then the finish (float64 adds, the blend, one rounding to c's dtype)."""
    n, ch = a.shape[:2]
    out = c.as_strided((n, ch), (ch, 1))
    launch(prepare(a, per_image=True, cfg=cfg or ROUTE_CONFIG, out=out, alpha=alpha, beta=beta, mean=mean))


def bn_stats_why_not(x) -> str | None:
    """None when batchnorm.py can take its partial sums from ``bn_partials``: dense
    channels-last bfloat16/float16 with C * 2 bytes a multiple of 16 (one pixel a TMA row,
    so the partials have batchnorm's [splits, 2, C] layout and its shift, x's first pixel)."""
    import torch
    if x.dtype not in (torch.bfloat16, torch.float16):
        return "bfloat16/float16 only"
    reason = why_not(x, per_image=False)
    if reason:
        return reason
    if group(x.shape[1], x.element_size()) != 1:
        return "C * 2 bytes must be a multiple of 16"
    if x.numel() >= _INT32:
        return "2^31 elements or more"
    return None


def bn_partials(x, cfg=None):
    """The statistics kernel alone over N*H*W: returns the ``prepare`` dict; its "part" is
    [1, SPLITS, 2, C] float32 (sum of x - shift, sum of (x - shift)^2 per split, shift = x's
    first pixel), for batchnorm.py's own finalize."""
    pp = prepare(x, squares=True, cfg=cfg or ROUTE_CONFIG)
    launch(pp, finish=False)
    return pp


def bn_apply_why_not(x, y) -> str | None:
    """None when ``bn_apply`` can write y (dense channels-last like x, 16-byte aligned)."""
    if y.shape != x.shape or y.dtype != x.dtype or y.device != x.device or not _dense_nhwc(y) or y.data_ptr() % 16:
        return "y must be a dense channels-last tensor like x, 16-byte aligned"
    return None


def bn_apply(x, y, coef, pp, relu=False):
    """y = act(coef[c] * x + coef[C + c]) (coef: 2 * C float32) over the units of ``bn_partials``'s
    plan, each program from its last box (the "L2" order)."""
    launch_apply(prepare_apply(x, y, coef, pp["plan"], pp["cfg"], relu=relu, reverse=True))
    return y


# -- the apply pass ------------------------------------------------------------------------

SHARED_LIMIT = 227 * 1024


def apply_rings(cfg, box: int):
    """(input ring depth, output slots) of the apply pass for a box of ``box`` bytes: up to the
    config's STAGES and two output slots within the shared memory of PER_SM programs; None
    when not even two input slots and one output slot fit."""
    budget = SHARED_LIMIT // cfg["PER_SM"] - 1024
    for ostages in (2, 1):
        stages = min(cfg["STAGES"], budget // box - ostages)
        if stages >= 2:
            return stages, ostages
    return None


def prepare_apply(x, y, coef, stats_plan, cfg, relu=False, reverse=False):
    """Launch arguments of y = act(coef[0] * x + coef[1]) over the units of ``stats_plan``
    (a one-segment plan from ``prepare``; reverse: each program walks its boxes backwards)."""
    p = stats_plan
    rings = apply_rings(cfg, p["BLOCK_P"] * p["BLOCK_C"] * x.element_size())
    if rings is None:
        raise ValueError(f"{name(cfg)}: no room for the apply pass's rings")
    if y.shape != x.shape or y.dtype != x.dtype or not _dense_nhwc(y) or y.data_ptr() % 16:
        raise ValueError("y must be a dense channels-last tensor like x, 16-byte aligned")
    segs, rows, cc = p["SEGS"], p["L"], p["CC"]
    block = (1, p["BLOCK_P"], p["BLOCK_C"])
    x_desc = descriptor(x, (segs, rows, cc), (rows * cc, cc, 1), block)
    y_desc = descriptor(y, (segs, rows, cc), (rows * cc, cc, 1), block)
    args = (x_desc, y_desc, coef, x.shape[1], cc, p["B"], p["PER"], p["SPLITS"], p["CBN"], p["UNITS"])
    meta = dict(BLOCK_P=p["BLOCK_P"], BLOCK_C=p["BLOCK_C"], STAGES=rings[0], OSTAGES=rings[1], VEC=p["VEC"],
                TPC=p["TPC"], RELU=bool(relu), REVERSE=bool(reverse), WARP_SPEC=cfg["WARP_SPEC"], LOADER_REGS=40,
                num_warps=cfg["num_warps"])
    if max_regs(cfg):
        meta["maxnreg"] = max_regs(cfg)
    return dict(grid=(p["grid"],), args=args, meta=meta, y=y)


def launch_apply(pa):
    stream_apply_kernel[pa["grid"]](*pa["args"], **pa["meta"])
    return pa["y"]


def prepare_batch_norm(x, scale, bias, eps=1e-5, cfg=None, y=None, relu=False, reverse=True, sms=None):
    """Batch-norm training forward as three launches: statistics (stream), finish (mean,
    variance, coefficients), apply (stream; reverse: L2 order). Returns (stats, apply) dicts."""
    import torch
    ps = prepare(x, squares=True, cfg=cfg, sms=sms, scale=scale, bias=bias, eps=eps)
    if y is None:
        y = torch.empty_like(x, memory_format=torch.channels_last)
    pa = prepare_apply(x, y, ps["coef"], ps["plan"], ps["cfg"], relu=relu, reverse=reverse)
    return ps, pa


def launch_batch_norm(ps, pa):
    launch(ps)
    launch_apply(pa)
    return pa["y"], ps["out"][0], ps["out2"][0]


def batch_norm_train(x, scale, bias, eps=1e-5, cfg=None, relu=False, reverse=True, sms=None):
    """(y, mean, biased variance) of batch normalization with batch statistics (GPU, Hopper)."""
    return launch_batch_norm(*prepare_batch_norm(x, scale, bias, eps, cfg, relu=relu, reverse=reverse, sms=sms))


# --------------------------------------------------------------------------------------
# Offline compile (no GPU needed)
# --------------------------------------------------------------------------------------

_ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4}


def _compile(fn, sig, consts, cfg, pointers):
    return _compile_sm90(fn, sig, consts, cfg["num_warps"], maxnreg=max_regs(cfg) or None, pointers=pointers)


def compile_sm90(cfg, squares=False, dtype="bf16", channels=256):
    """Compile the statistics kernel for sm_90 without a GPU (x 64 x channels x 56 x 56 in
    bf16/fp16/fp32; squares: batch statistics, else sums per image); returns the
    CompiledKernel (asm: ptx, cubin)."""
    p = plan((64, channels, 56, 56), _ITEMSIZE[dtype], not squares, cfg)
    sig = {"x_desc": desc_sig(dtype, [1, p["BLOCK_P"], p["BLOCK_C"]], _layout), "x_ptr": f"*{dtype}",
           "part_ptr": "*fp32"}
    sig.update({a: "i32" for a in _RUNTIME_INTS})
    consts = dict(BLOCK_P=p["BLOCK_P"], BLOCK_C=p["BLOCK_C"], STAGES=cfg["STAGES"], VEC=p["VEC"], TPC=p["TPC"],
                  SQUARES=bool(squares), WARP_SPEC=cfg["WARP_SPEC"], LOADER_REGS=40, num_warps=cfg["num_warps"])
    return _compile(stream_sums_kernel, sig, consts, cfg, ("x_ptr", "part_ptr"))


def compile_apply_sm90(cfg, dtype="bf16", channels=256, relu=False, reverse=True):
    """Compile the apply kernel for sm_90 (None when its rings do not fit the config)."""
    p = plan((64, channels, 56, 56), _ITEMSIZE[dtype], False, cfg)
    rings = apply_rings(cfg, p["BLOCK_P"] * p["BLOCK_C"] * _ITEMSIZE[dtype])
    if rings is None:
        return None
    block = [1, p["BLOCK_P"], p["BLOCK_C"]]
    sig = {"x_desc": desc_sig(dtype, block, _layout), "y_desc": desc_sig(dtype, block, _layout), "coef_ptr": "*fp32"}
    sig.update({a: "i32" for a in ["C"] + _RUNTIME_INTS[1:]})
    consts = dict(BLOCK_P=p["BLOCK_P"], BLOCK_C=p["BLOCK_C"], STAGES=rings[0], OSTAGES=rings[1], VEC=p["VEC"],
                  TPC=p["TPC"], RELU=bool(relu), REVERSE=bool(reverse), WARP_SPEC=cfg["WARP_SPEC"], LOADER_REGS=40,
                  num_warps=cfg["num_warps"])
    return _compile(stream_apply_kernel, sig, consts, cfg, ("coef_ptr",))


__all__ = ["stream_sums_kernel", "stream_apply_kernel", "CONFIGS", "config", "name", "plan", "prepare", "launch",
           "sum_hw", "batch_stats", "prepare_apply", "launch_apply", "prepare_batch_norm", "launch_batch_norm",
           "batch_norm_train", "compile_sm90", "compile_apply_sm90", "why_not", "group", "shared_bytes", "box_bytes",
           "apply_rings", "ROUTE_CONFIG", "sum_hw_why_not", "sum_hw_into", "bn_stats_why_not", "bn_partials",
           "bn_apply_why_not", "bn_apply"]
