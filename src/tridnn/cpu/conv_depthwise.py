"""Depthwise convolution over padded, stride-split planes, as NumPy passes.

A depthwise layer makes a few multiply-adds per output (9 for 3x3) with a different
filter per channel. A GEMM fits it only as one (1 x taps) @ (taps x positions) product
per channel over an im2col, which the planar order below makes in cache; banded
(Toeplitz) GEMMs that avoid the im2col cost 3-7x the flops at a fraction of BLAS's peak
and lost (docs/performance.md, "Depthwise on the CPU (2026-11-30, session 2)").
Otherwise NumPy pays one pass over the output per product and per sum. This module makes
those passes as cheap as NumPy allows:

- a block's input is copied once, zero-padded and split into its stride phases (for
  stride 2 the four row/column parities), so every tap reads a plain shifted window of
  one phase: no strided reads and no edge cases;
- planar order (NCHW data) keeps each phase flat, rows padded to the phase's width and
  planes one after another, so a tap's window over a run of planes is one contiguous
  slice; the windows are copied side by side (an im2col of the block, in cache) and one
  BLAS product per channel, (1 x taps) @ (taps x positions), makes every multiply-add in
  a single pass (the outputs that land in padding columns and rows are dropped);
- channels-last order (NHWC data) reads a tap's window contiguously over a whole
  (width x channels) row, against the tap's weights replicated along the row;
- blocks (images x channels x rows) are sized so that the input block and the
  accumulator stay in L2; channels-last writes its last sum straight into y when nothing
  needs blending.

The backward passes reuse the plan: the filter gradient packs x the same way and makes
one dot-product pass per tap; backward data splits dx by stride phase, each phase being a
stride-1 correlation of dy with the taps that reach it (TransposedPlan).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..workspace import Buffer
from .common import WORKERS, channels_last, parallel_map, prod, store, writes_through

BLOCK_ELEMENTS = 128 << 10  # accumulator elements per block (measured flat from 64K to 512K)
FILTER_BLOCK_ELEMENTS = 512 << 10  # filter gradient: dy elements per block (dot products stream)
MIN_PLANAR_ROW = 16         # channel-first data goes planar from this output row length
MIN_EINSUM_CHANNELS = 384   # channels-last, stride 1: one einsum per block from this many channels
# Threads working on blocks (at most common.WORKERS). One: on the 2-core machines, two
# threads made every layer slower (the passes are bound by the cache, which the cores
# share, and a second thread competes with BLAS's own threads and with other processes):
# 59 vs 74 ms over the NCHW suite, 36 vs 54 ms NHWC (2026-11-30, load ~3).
THREADS = 1


@dataclass(frozen=True)
class Geometry:
    """Where each tap of a depthwise convolution reads, once the input is split into phases.

    Along a dim with stride s, padded input index o * s + t * d (output o, tap t, dilation
    d) lies in phase (t * d) % s at position o + (t * d) // s: each tap is a shift by
    ``(t * d) // s`` inside one phase. Phases are ``extent`` = ceil(read extent / s) long."""
    in_spatial: tuple
    out_spatial: tuple
    kernel: tuple
    stride: tuple
    dilation: tuple
    pad_pre: tuple

    @classmethod
    def of(cls, problem) -> "Geometry":
        return cls(problem.in_spatial, problem.out_spatial, problem.kernel, problem.stride,
                   problem.dilation, problem.pad_pre)

    @property
    def nd(self) -> int:
        return len(self.kernel)

    @cached_property
    def extent(self) -> tuple:
        """Positions per phase along each dim (the padded extent the outputs read, / stride)."""
        return tuple(-(-((o - 1) * s + d * (k - 1) + 1) // s)
                     for o, s, d, k in zip(self.out_spatial, self.stride, self.dilation, self.kernel))

    @cached_property
    def reach(self) -> tuple:
        """The largest shift of any tap along each dim."""
        return tuple(d * (k - 1) // s for k, s, d in zip(self.kernel, self.stride, self.dilation))

    @property
    def phases(self) -> int:
        return prod(self.stride)

    @cached_property
    def taps(self) -> list:
        """(flat phase index, shift per dim) of every tap, in the filter's row-major order."""
        out = []
        for tap in np.ndindex(*self.kernel):
            offsets = [t * d for t, d in zip(tap, self.dilation)]
            phase = int(np.ravel_multi_index(tuple(e % s for e, s in zip(offsets, self.stride)), self.stride))
            out.append((phase, tuple(e // s for e, s in zip(offsets, self.stride))))
        return out

    # -- planar order: flat phases ---------------------------------------------------
    @cached_property
    def steps(self) -> tuple:
        """Element stride of each dim in a flat phase (rows padded to the phase width)."""
        return tuple(prod(self.extent[i + 1:]) for i in range(self.nd))

    def slot(self, rows: int) -> int:
        """Elements of one plane's flat phase holding ``rows`` output rows (and the rows of
        input they read). Planes follow each other, so a tap's shifted window over a run
        of planes is one contiguous slice; the outputs it computes in the padding columns
        and rows are dropped."""
        return (rows + self.reach[0]) * self.steps[0]

    @property
    def tail(self) -> int:
        """Elements after the last plane that the last plane's dropped outputs read."""
        return max(self.flat_offsets())

    def flat_offsets(self) -> list:
        return [sum(h * st for h, st in zip(shift, self.steps)) for _, shift in self.taps]

    # -- the copy of a block of input rows into its phases ------------------------------
    def phase_copies(self, r0: int, rows: int):
        """For each phase: (phase index, per-dim (lo, hi) that input fills in a block holding
        output rows [r0, r0 + rows), per-dim input slices), or (phase, None, None) when the
        phase's part of the block is all padding."""
        lead = (r0, rows + self.reach[0])
        for phase, parity in enumerate(np.ndindex(*self.stride)):
            fills, sources = [], []
            for axis, (a, s, p, size) in enumerate(zip(parity, self.stride, self.pad_pre, self.in_spatial)):
                q0, count = lead if axis == 0 else (0, self.extent[axis])
                # positions q whose input index q * s + a - p lies in [0, size)
                first = max(q0, -((a - p) // s))
                last = min(q0 + count, (size - 1 + p - a) // s + 1)
                if last <= first:
                    break
                fills.append((first - q0, last - q0))
                sources.append(slice(first * s + a - p, (last - 1) * s + a - p + 1, s))
            else:
                yield phase, fills, sources
                continue
            yield phase, None, None


def fill_phase(dst: np.ndarray, fills, src: np.ndarray | None, lead: int) -> None:
    """dst (``lead`` leading axes, then one axis per spatial dim) = src placed at ``fills``,
    zero elsewhere; only the borders around the copied box are zeroed."""
    if fills is None:
        dst[...] = 0
        return
    head = (slice(None),) * lead
    for axis, (lo, hi) in enumerate(fills):
        before = head + (slice(None),) * axis
        if lo:
            dst[before + (slice(0, lo),)] = 0
        if hi < dst.shape[lead + axis]:
            dst[before + (slice(hi, None),)] = 0
    dst[head + tuple(slice(lo, hi) for lo, hi in fills)] = src


def multiply_add(pairs, acc: np.ndarray, tmp: np.ndarray, final) -> None:
    """Sum of x_view * weights over ``pairs``: the first product into acc, then one product
    into tmp and one add per pair. The last add is ``final`` = (acc part, tmp part, out),
    so it can write straight into y."""
    last = len(pairs) - 1
    for i, (x_view, weights) in enumerate(pairs):
        if i == 0:
            np.multiply(x_view, weights, out=acc)
            if last == 0 and final[2] is not final[0]:
                np.copyto(final[2], final[0])
        elif i < last:
            np.multiply(x_view, weights, out=tmp)
            np.add(acc, tmp, out=acc)
        else:
            np.multiply(x_view, weights, out=tmp)
            np.add(final[0], final[1], out=final[2])


def window_sum(x: np.ndarray, weights: np.ndarray, dilation, out: np.ndarray) -> None:
    """out[n, *o, c] = sum over taps t of x[n, *(o + t * dilation), c] * weights[*t, c]
    (stride 1, channels last), as one einsum over a read-only window view of x."""
    nd = len(dilation)
    st = x.strides
    spatial = st[1:1 + nd]
    windows = np.lib.stride_tricks.as_strided(
        x, (out.shape[0], *out.shape[1:1 + nd], *weights.shape[:nd], x.shape[-1]),
        (st[0], *spatial, *(s * d for s, d in zip(spatial, dilation)), st[-1]), writeable=False)
    letters, taps = "abcdefghi"[:nd], "pqr"[:nd]
    np.einsum(f"n{letters}{taps}c,{taps}c->n{letters}c", windows, weights, out=out)


def threads() -> int:
    """Threads the plans use (and size their per-thread buffers for): THREADS, at most the
    pool's WORKERS."""
    return max(1, min(THREADS, WORKERS))


def each_block(fn, blocks) -> None:
    """fn(worker, block) for every block; with several threads each takes the next block as
    it finishes one (a static split leaves the wall time to the thread that lost its core
    to another process, the common case on a shared 2-core machine)."""
    if threads() == 1:
        for block in blocks:
            fn(0, block)
        return
    pending = iter(blocks)
    lock = threading.Lock()

    def drain(worker, _):
        while True:
            with lock:
                block = next(pending, None)
            if block is None:
                return
            fn(worker, block)

    parallel_map(drain, range(min(threads(), len(blocks))))


def buffer(workspace, name: str, shape) -> np.ndarray:
    """The leading part of workspace buffer ``name`` viewed as a contiguous ``shape`` (the
    backward-data phases share buffers sized for the largest of them)."""
    return workspace[name].reshape(-1)[:prod(shape)].reshape(shape)


class DepthwisePlan:
    """One depthwise correlation y[n, c] = sum over taps of w[c, tap] * x[n, c] shifted,
    blocked and oriented for NumPy (any rank, stride, dilation and padding, given by a
    Geometry; the caller flips the filter for CONVOLUTION mode). ``run`` computes y,
    ``run_filter`` the filter gradient sum over n, o of dy[n, c, o] * x[n, c, o * s + t * d]."""

    def __init__(self, geometry: Geometry, n: int, c: int, acc_dtype, planar: bool,
                 block_elements: int | None = None):
        self.geometry = geometry
        self.n, self.c = n, c
        self.acc_dtype = acc_dtype
        self.planar = planar
        self.blocks = self._block_shape(BLOCK_ELEMENTS if block_elements is None else block_elements)

    @classmethod
    def of(cls, problem, planar: bool | None = None) -> "DepthwisePlan":
        """The plan of a problem's forward correlation."""
        geometry = Geometry.of(problem)
        if planar is None:
            planar = cls.prefers_planar(geometry, channels_last(problem.x))
        return cls(geometry, problem.n, problem.c, problem.accumulator, planar)

    @classmethod
    def of_filter(cls, problem, planar: bool | None = None) -> "DepthwisePlan":
        """The plan of a problem's filter gradient: planar exactly for channel-first data
        (the dot products have no per-row cost that would favour transposing small planes),
        in larger blocks."""
        planar = not channels_last(problem.x) if planar is None else planar
        return cls(Geometry.of(problem), problem.n, problem.c, problem.accumulator, planar,
                   FILTER_BLOCK_ELEMENTS)

    @staticmethod
    def prefers_planar(geometry: Geometry, data_channels_last: bool) -> bool:
        """Planar for channel-first data with output rows of MIN_PLANAR_ROW or more;
        channels-last otherwise. On smaller planes the planar BLAS products are too short and
        the channels-last passes (a whole row times the channels per loop) win even with
        the transposing copies in and out (measured 1.1-1.7x on 14x14 and 7x7 planes)."""
        return not data_channels_last and geometry.out_spatial[-1] >= MIN_PLANAR_ROW

    @property
    def einsum(self) -> bool:
        """Channels-last stride-1 blocks with many channels run as one einsum over the tap
        window: its inner loop multiplies and adds over the channels in one pass, which
        beats the product + sum passes from MIN_EINSUM_CHANNELS channels (measured 10-20%)
        when it writes a contiguous output (into a transposed NCHW y it is 1.5-2x slower)."""
        return not self.planar and self.geometry.phases == 1 and self.c >= MIN_EINSUM_CHANNELS

    # -- sizes -------------------------------------------------------------------------
    def _block_shape(self, budget: int):
        """(images, channels, rows) per block: whole planes and then more channels and
        images while the accumulator stays under ``budget`` elements; else fewer rows."""
        g = self.geometry
        out0 = g.out_spatial[0]
        row = g.steps[0] if self.planar else prod(g.out_spatial[1:]) * self.c
        rows = max(1, min(out0, budget // max(row, 1)))
        if not self.planar:
            images = max(1, min(self.n, budget // max(row * out0, 1))) if rows == out0 else 1
            return images, self.c, rows
        if rows < out0:
            return 1, 1, rows
        plane = g.slot(out0)
        channels = max(1, min(self.c, budget // plane))
        images = max(1, min(self.n, budget // (plane * channels))) if channels == self.c else 1
        return images, channels, rows

    def _phase_stride(self) -> int:
        """Planar: elements between the phases of a block (its planes, then the tail)."""
        images, channels, rows = self.blocks
        return images * channels * self.geometry.slot(rows) + self.geometry.tail

    def _channels_last_box(self) -> tuple:
        """Channels-last: the shape of one image's phase in a block (rows, ..., C)."""
        g = self.geometry
        return (self.blocks[2] + g.reach[0], *g.extent[1:], self.c)

    def input_size(self) -> int:
        if self.planar:
            return self.geometry.phases * self._phase_stride()
        return self.blocks[0] * self.geometry.phases * prod(self._channels_last_box())

    def acc_size(self) -> int:
        g, (images, channels, rows) = self.geometry, self.blocks
        if self.planar:
            return images * channels * g.slot(rows)
        return images * rows * prod(g.out_spatial[1:]) * self.c

    def weights_shape(self) -> tuple:
        g, taps = self.geometry, len(self.geometry.taps)
        if self.planar:
            return (self.c, 1, taps)  # one row vector per channel, the left operand of matmul
        # channels-last: replicated along the innermost output dim (the rows of a block for 1-D)
        return (taps, g.out_spatial[-1] if g.nd > 1 else self.blocks[2], self.c)

    def buffers(self) -> list:
        acc, taps = self.acc_dtype, len(self.geometry.taps)
        second = (Buffer("dw_cols", (threads(), taps * self.acc_size()), acc) if self.planar
                  else Buffer("dw_prod", (threads(), self.acc_size()), acc))
        return [Buffer("dw_weights", self.weights_shape(), acc),
                Buffer("dw_input", (threads(), self.input_size()), acc),
                Buffer("dw_acc", (threads(), self.acc_size()), acc), second]

    def filter_buffers(self) -> list:
        acc, taps = self.acc_dtype, len(self.geometry.taps)
        images, channels, _ = self.blocks
        return [Buffer("dw_input", (threads(), self.input_size()), acc),
                Buffer("dw_dy", (threads(), self.acc_size()), acc),
                Buffer("dw_partial", (threads(), images * channels), acc),
                Buffer("dw_total", (threads(), taps, self.c), acc)]

    def block_list(self) -> list:
        images, channels, rows = self.blocks
        out0 = self.geometry.out_spatial[0]
        return [(n0, min(self.n, n0 + images) - n0, c0, min(self.c, c0 + channels) - c0,
                 r0, min(out0, r0 + rows) - r0)
                for n0 in range(0, self.n, images) for c0 in range(0, self.c, channels)
                for r0 in range(0, out0, rows)]

    def passes(self) -> tuple[int, int]:
        """(elements one tap pass covers, blocks), for cost models."""
        g = self.geometry
        per_image = self.c * (g.slot(g.out_spatial[0]) if self.planar else prod(g.out_spatial))
        return self.n * per_image, len(self.block_list())

    def estimate(self, rate: float, call_seconds: float, products: bool = True) -> float:
        """Seconds: per tap a product and a sum pass (``products``), or one dot-product pass
        (the filter gradient), at ``rate`` elements/s, plus NumPy's per-call overhead."""
        g = self.geometry
        elements, blocks = self.passes()
        taps = len(g.taps)
        passes = 2 * taps - 1 if products else taps
        calls = blocks * (passes + g.phases * (1 + 2 * g.nd))
        io = self.n * self.c * (prod(g.in_spatial) + prod(g.out_spatial))
        return (passes * elements + 2 * io) / rate + calls * call_seconds

    # -- the input of a block, packed into its phases ----------------------------------
    def _pack(self, worker, block, x, workspace):
        """x's part for ``block``, zero-padded and split into phases: planar
        (phases, run of planes + tail) or channels-last (images, phases, rows, ..., C)."""
        g = self.geometry
        n0, nb, c0, cb, r0, rb = block
        rows_in = rb + g.reach[0]
        if self.planar:
            run = nb * cb * g.slot(rb)
            xb = workspace["dw_input"][worker].reshape(-1)[:self.input_size()].reshape(g.phases, -1)
            for phase, fills, sources in g.phase_copies(r0, rb):
                xb[phase, run:run + g.tail] = 0  # what the last plane's dropped outputs read
                planes = xb[phase, :run].reshape(nb, cb, rows_in, *g.extent[1:])
                src = None if fills is None else x[(slice(n0, n0 + nb), slice(c0, c0 + cb)) + tuple(sources)]
                fill_phase(planes, fills, src, 2)
            return xb
        full = self._channels_last_box()
        xb = workspace["dw_input"][worker].reshape(-1)[:nb * g.phases * prod(full)].reshape(nb, g.phases, *full)
        x_last = np.moveaxis(x[n0:n0 + nb], 1, -1)  # (nb, *in, C)
        for phase, fills, sources in g.phase_copies(r0, rb):
            src = None if fills is None else x_last[(slice(None),) + tuple(sources)]
            fill_phase(xb[:, phase, :rows_in], fills, src, 1)
        return xb

    def _windows(self, xb, block):
        """Each tap's view of a packed block: planar (nb, cb, slot) runs, or channels-last
        (nb, rb, *out[1:], C) boxes."""
        g = self.geometry
        _, nb, _, cb, _, rb = block
        if self.planar:
            slot = g.slot(rb)
            run = nb * cb * slot
            return [xb[phase, off:off + run].reshape(nb, cb, slot)
                    for (phase, _), off in zip(g.taps, g.flat_offsets())]
        return [xb[(slice(None), phase) + tuple(slice(h, h + o) for h, o in zip(shift, (rb, *g.out_spatial[1:])))]
                for phase, shift in g.taps]

    def _valid(self, flat: np.ndarray, block) -> np.ndarray:
        """Planar: the outputs of a (nb, cb, slot) block that lie inside the output box."""
        g = self.geometry
        _, nb, _, cb, _, rb = block
        length = rb * g.steps[0]
        box = (Ellipsis,) + tuple(slice(0, o) for o in g.out_spatial[1:])
        return flat[..., :length].reshape(nb, cb, rb, *g.extent[1:])[box]

    # -- forward -------------------------------------------------------------------------
    def run(self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace, alpha, beta, epilogue=None):
        """y = alpha * correlate(x, w) + beta * y; x (N, C, *in), w (C, 1, *kernel) or
        (C, *kernel), y (N, C, *out), all logical views of any strides and float dtype."""
        g = self.geometry
        w_taps = w.reshape(self.c, len(g.taps)).T  # (taps, C)
        weights = buffer(workspace, "dw_weights", self.weights_shape())
        if self.planar:
            weights[:, 0, :] = w_taps.T
        else:
            weights[...] = w_taps[:, None, :]
        direct = writes_through(y, self.acc_dtype, alpha, beta, epilogue)
        each_block(lambda worker, b: self._forward_block(worker, b, x, weights, y, workspace, direct, alpha,
                                                         beta, epilogue), self.block_list())

    def _forward_block(self, worker, block, x, weights, y, workspace, direct, alpha, beta, epilogue):
        n0, nb, c0, cb, r0, rb = block
        xb = self._pack(worker, block, x, workspace)
        windows = self._windows(xb, block)
        index = (slice(n0, n0 + nb), slice(c0, c0 + cb), slice(r0, r0 + rb))
        if self.planar:
            result = self._planar_products(worker, block, windows, weights[c0:c0 + cb], workspace)
            if direct:
                y[index] = result
            else:
                store(y[index], result, alpha, beta, epilogue, index)
            return
        g = self.geometry
        shape = (nb, rb, *g.out_spatial[1:], self.c)
        acc = workspace["dw_acc"][worker, :prod(shape)].reshape(shape)
        target = np.moveaxis(y[index], 1, -1) if direct else acc
        if self.einsum and (not direct or channels_last(y)):  # (einsum's output loop must be contiguous)
            window_sum(xb[:, 0, :rb + g.reach[0]], weights[:, 0].reshape(*g.kernel, self.c), g.dilation, target)
        else:
            tmp = workspace["dw_prod"][worker, :prod(shape)].reshape(shape)
            taps_weights = weights if g.nd > 1 else weights[:, :rb]
            multiply_add(list(zip(windows, taps_weights)), acc, tmp, (acc, tmp, target))
        if not direct:
            store(y[index], np.moveaxis(acc, -1, 1), alpha, beta, epilogue, index)

    def _planar_products(self, worker, block, windows, weights, workspace) -> np.ndarray:
        """The outputs of a planar block: the tap windows copied side by side (an im2col of
        the block, in cache: each copy is one contiguous run per plane), then per channel
        one BLAS product (1 x taps) @ (taps x images * slot) that makes all the multiply-adds
        in a single pass. Measured 1.8x faster than a product and a sum pass per tap."""
        _, nb, _, cb, _, rb = block
        taps, slot = len(windows), self.geometry.slot(rb)
        cols = workspace["dw_cols"][worker, :cb * taps * nb * slot].reshape(cb, taps, nb, slot)
        for t, window in enumerate(windows):
            cols[:, t] = window.transpose(1, 0, 2)
        acc = workspace["dw_acc"][worker, :cb * nb * slot].reshape(cb, 1, nb * slot)
        np.matmul(weights, cols.reshape(cb, taps, nb * slot), out=acc)
        return self._valid(acc.reshape(cb, nb, slot).transpose(1, 0, 2), block)

    # -- filter gradient -------------------------------------------------------------------
    def run_filter(self, x: np.ndarray, dy: np.ndarray, dw: np.ndarray, workspace, alpha, beta):
        """dw = alpha * (sum over images and outputs of dy * x's tap window) + beta * dw; dw is
        (C, 1, *kernel) or (C, *kernel). Each tap is one dot-product pass per block."""
        totals = workspace["dw_total"]
        totals[...] = 0
        each_block(lambda worker, b: self._filter_block(worker, b, x, dy, workspace), self.block_list())
        total = totals.sum(axis=0) if totals.shape[0] > 1 else totals[0]
        store(dw.reshape(self.c, len(self.geometry.taps)), total.T, alpha, beta)

    def _filter_block(self, worker, block, x, dy, workspace):
        g = self.geometry
        n0, nb, c0, cb, r0, rb = block
        xb = self._pack(worker, block, x, workspace)
        windows = self._windows(xb, block)
        total = workspace["dw_total"][worker]
        index = (slice(n0, n0 + nb), slice(c0, c0 + cb), slice(r0, r0 + rb))
        if self.planar:
            # dy laid out like the planar outputs, zero where the dropped outputs are
            flat = workspace["dw_dy"][worker, :nb * cb * g.slot(rb)].reshape(nb, cb, g.slot(rb))
            length = rb * g.steps[0]
            box = [(0, o) for o in (rb, *g.out_spatial[1:])]
            fill_phase(flat[..., :length].reshape(nb, cb, rb, *g.extent[1:]), box, dy[index], 2)
            partial = workspace["dw_partial"][worker, :nb * cb].reshape(nb, cb, 1, 1)
            column = flat[..., :length, None]  # the rows below the outputs hold only zeros
            for t, window in enumerate(windows):  # one dot product per plane (matmul: BLAS's dot)
                np.matmul(window[..., None, :length], column, out=partial)
                total[t, c0:c0 + cb] += partial[..., 0, 0].sum(axis=0) if nb > 1 else partial[0, :, 0, 0]
        else:
            dy_last = np.moveaxis(dy[index], 1, -1)  # (nb, rb, *out[1:], C)
            letters = "abdefghij"[:g.nd + 1]  # (nb, rb, *out[1:]); c is the channel
            for t, window in enumerate(windows):
                total[t] += np.einsum(f"{letters}c,{letters}c->c", window, dy_last)


# -- backward data: the transposed correlation, one stride phase of dx at a time ------------
def transposed_taps(in_size: int, k: int, s: int, d: int, p: int, phase: int):
    """Along one dim: dx[phase + s * m] = sum over taps r with (phase + p - r * d) % s == 0 of
    w[r] * dy[m + (phase + p - r * d) // s]. Returns (positions m, the taps r sorted by
    their dy offset, the first offset, the step between offsets), or None when the phase
    has no position or no tap."""
    positions = -(-(in_size - phase) // s) if in_size > phase else 0
    taps = [r for r in range(k - 1, -1, -1) if (phase + p - r * d) % s == 0]  # offsets ascending
    if positions == 0 or not taps:
        return None
    first = (phase + p - taps[0] * d) // s
    step = (taps[0] - taps[1]) * d // s if len(taps) > 1 else 1
    return positions, taps, first, step


class TransposedPlan:
    """Backward data of a depthwise convolution as depthwise correlations of dy: dx's
    positions are split by their residue modulo the stride (one phase per residue
    combination), and each phase is a stride-1 correlation of dy with the taps that reach
    it, reversed, written straight into dx's strided view. With stride 1 this is the
    forward correlation of dy with the flipped filter."""

    def __init__(self, problem):
        self.c, self.nd, self.acc_dtype = problem.c, problem.nd, problem.accumulator
        self.parts = []  # (dx slices, plan or None, taps per dim)
        for parity in np.ndindex(*problem.stride):
            dims = [transposed_taps(i, k, s, d, p, a) for i, k, s, d, p, a in
                    zip(problem.in_spatial, problem.kernel, problem.stride, problem.dilation,
                        problem.pad_pre, parity)]
            view = tuple(slice(a, None, s) for a, s in zip(parity, problem.stride))
            if any(dim is None for dim in dims):
                self.parts.append((view, None, None))
                continue
            geometry = Geometry(in_spatial=problem.out_spatial, out_spatial=tuple(d[0] for d in dims),
                                kernel=tuple(len(d[1]) for d in dims), stride=(1,) * self.nd,
                                dilation=tuple(d[3] for d in dims), pad_pre=tuple(-d[2] for d in dims))
            planar = DepthwisePlan.prefers_planar(geometry, channels_last(problem.y))
            plan = DepthwisePlan(geometry, problem.n, problem.c, problem.accumulator, planar)
            self.parts.append((view, plan, [d[1] for d in dims]))

    def buffers(self) -> list:
        """Each buffer as large as the largest phase needs (phases run one after another)."""
        sizes = {}
        for _, plan, _ in self.parts:
            for buf in [] if plan is None else plan.buffers():
                per_worker = prod(buf.shape) if buf.name == "dw_weights" else prod(buf.shape[1:])
                sizes[buf.name] = max(sizes.get(buf.name, 0), per_worker)
        return [Buffer(name, (size,) if name == "dw_weights" else (threads(), size), self.acc_dtype)
                for name, size in sizes.items()]

    def estimate(self, rate: float, call_seconds: float) -> float:
        return sum(plan.estimate(rate, call_seconds) for _, plan, _ in self.parts if plan is not None)

    def run(self, w: np.ndarray, dy: np.ndarray, dx: np.ndarray, workspace, alpha, beta):
        """dx = alpha * (transposed correlation of dy with w) + beta * dx."""
        w = w.reshape(self.c, *w.shape[-self.nd:])
        for view, plan, taps in self.parts:
            part = dx[(slice(None), slice(None)) + view]
            if plan is None:  # no tap reaches these positions: the gradient there is 0
                part[...] = 0 if beta == 0 else beta * part.astype(self.acc_dtype)
                continue
            sub = w[np.ix_(range(self.c), *taps)]
            plan.run(dy, sub, part, workspace, alpha, beta)
