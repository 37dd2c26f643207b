"""Depthwise convolution as multiply-add passes over padded, stride-split planes.

A depthwise layer makes a few multiply-adds per output (9 for 3x3) with a different
filter per channel, so no GEMM fits it without multiplying the work: banded (Toeplitz)
GEMMs measured 3-7x the flops at a fraction of BLAS's peak and lost (docs/performance.md,
"Depthwise on the CPU (2026-11-30, session 2)"). NumPy then pays one pass over the output
per product and per sum; this module makes those passes as cheap as NumPy allows:

- a block's input is copied once, zero-padded and split into its stride phases (for
  stride 2 the four row/column parities), so every tap reads a plain shifted window of
  one phase: no strided reads and no edge cases;
- planar order (one channel's plane after another; NCHW data) keeps each phase flat with
  its rows padded to the phase's width, so a tap is one contiguous shifted slice of the
  flat plane and a block of planes is one 2-D NumPy call with a scalar weight per plane
  (outputs in the padding columns are computed and dropped);
- channels-last order (NHWC data) reads a tap's window contiguously over a whole
  (width x channels) row, against the tap's weights replicated along the row;
- blocks (images x channels x rows) are sized so that the input block, the accumulator
  and the product stay in L2, and the last sum goes straight into y when nothing needs
  blending.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..workspace import Buffer
from .common import WORKERS, channels_last, parallel_map, prod, store, writes_through

BLOCK_ELEMENTS = 128 << 10  # accumulator elements per block (measured flat from 64K to 512K)
MAX_SCALAR_SLOT = 1024      # planar: planes smaller than this get their weights replicated
MIN_PLANAR_ROW = 32         # strided channel-first data goes planar from this output row length
MIN_EINSUM_CHANNELS = 384   # channels-last, stride 1: one einsum per block from this many channels


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


class DepthwisePlan:
    """One depthwise correlation y[n, c] = sum over taps of w[c, tap] * x[n, c] shifted,
    blocked and oriented for NumPy. Works for any rank, stride, dilation and padding; the
    caller flips the filter for CONVOLUTION mode."""

    def __init__(self, problem, planar: bool | None = None):
        self.geometry = Geometry.of(problem)
        self.n, self.c = problem.n, problem.c
        self.acc_dtype = problem.accumulator
        self.planar = self.prefers_planar(problem) if planar is None else planar
        self.blocks = self._block_shape()

    @staticmethod
    def prefers_planar(problem) -> bool:
        """Planar passes for channel-first data, except small strided planes; channels-last
        passes for channels-last data. Each orientation then copies its input without a
        transpose; the exception measured faster with the transposing copies (its phases
        are short rows, which the planar copy pays per row)."""
        if channels_last(problem.x):
            return False
        return all(s == 1 for s in problem.stride) or problem.out_spatial[-1] >= MIN_PLANAR_ROW

    @property
    def einsum(self) -> bool:
        """Channels-last stride-1 blocks with many channels run as one einsum over the tap
        window: its inner loop multiplies and adds over the channels in one pass, which
        beats the product + sum passes from MIN_EINSUM_CHANNELS channels (measured 10-20%)."""
        return not self.planar and self.geometry.phases == 1 and self.c >= MIN_EINSUM_CHANNELS

    @property
    def replicated(self) -> bool:
        """Planar blocks of small planes multiply by weights replicated over each plane, so a
        tap is one NumPy loop over the whole run of planes instead of one short loop per plane."""
        return self.planar and self.geometry.slot(self.geometry.out_spatial[0]) < MAX_SCALAR_SLOT

    # -- sizes -------------------------------------------------------------------------
    def _block_shape(self):
        """(images, channels, rows) per block: whole planes and then more channels and
        images while the accumulator stays under BLOCK_ELEMENTS; else fewer rows."""
        g = self.geometry
        out0 = g.out_spatial[0]
        row = g.steps[0] if self.planar else prod(g.out_spatial[1:]) * self.c
        rows = max(1, min(out0, BLOCK_ELEMENTS // max(row, 1)))
        if not self.planar:
            images = max(1, min(self.n, BLOCK_ELEMENTS // max(row * out0, 1))) if rows == out0 else 1
            return images, self.c, rows
        if rows < out0:
            return 1, 1, rows
        plane = g.slot(out0)
        channels = max(1, min(self.c, BLOCK_ELEMENTS // plane))
        images = max(1, min(self.n, BLOCK_ELEMENTS // (plane * channels))) if channels == self.c else 1
        return images, channels, rows

    def _phase_stride(self) -> int:
        """Planar: elements between the phases of a block (its planes, then the tail)."""
        images, channels, rows = self.blocks
        return images * channels * self.geometry.slot(rows) + self.geometry.tail

    def _input_block(self) -> int:
        g, (images, channels, rows) = self.geometry, self.blocks
        if self.planar:
            return g.phases * self._phase_stride()
        return images * g.phases * (rows + g.reach[0]) * prod(g.extent[1:]) * self.c

    def _acc_block(self) -> int:
        g, (images, channels, rows) = self.geometry, self.blocks
        if self.planar:
            return images * channels * g.slot(rows)
        return images * rows * prod(g.out_spatial[1:]) * self.c

    def buffers(self) -> list:
        g, acc = self.geometry, self.acc_dtype
        taps = len(g.taps)
        if self.replicated:
            weights = Buffer("dw_weights", (taps, self.c, g.slot(self.blocks[2])), acc)
        elif self.planar:
            weights = Buffer("dw_weights", (taps, self.c), acc)
        else:  # replicated along the innermost output dim (the rows of a block for 1-D)
            inner = g.out_spatial[-1] if g.nd > 1 else self.blocks[2]
            weights = Buffer("dw_weights", (taps, inner, self.c), acc)
        return [weights,
                Buffer("dw_input", (WORKERS, self._input_block()), acc),
                Buffer("dw_acc", (WORKERS, self._acc_block()), acc),
                Buffer("dw_prod", (WORKERS, self._acc_block()), acc)]

    def block_list(self) -> list:
        images, channels, rows = self.blocks
        out0 = self.geometry.out_spatial[0]
        return [(n0, min(self.n, n0 + images) - n0, c0, min(self.c, c0 + channels) - c0,
                 r0, min(out0, r0 + rows) - r0)
                for n0 in range(0, self.n, images) for c0 in range(0, self.c, channels)
                for r0 in range(0, out0, rows)]

    def passes(self) -> tuple[int, int]:
        """(elements the tap passes write, NumPy calls), for cost models."""
        g = self.geometry
        taps = len(g.taps)
        per_image = self.c * (g.slot(g.out_spatial[0]) if self.planar else prod(g.out_spatial))
        calls_per_block = 2 * taps + g.phases * (1 + 2 * g.nd)
        return (2 * taps - 1) * self.n * per_image, calls_per_block * len(self.block_list())

    # -- run -----------------------------------------------------------------------------
    def run(self, x: np.ndarray, w: np.ndarray, y: np.ndarray, workspace, alpha, beta, epilogue=None):
        """y = alpha * correlate(x, w) + beta * y; x (N, C, *in), w (C, 1, *kernel) or
        (C, *kernel), y (N, C, *out), all logical views of any strides and float dtype."""
        g = self.geometry
        taps = len(g.taps)
        w_taps = w.reshape(self.c, taps).T  # (taps, C)
        weights = workspace["dw_weights"]
        if self.replicated:
            weights[...] = w_taps[:, :, None]
        elif self.planar:
            weights[...] = w_taps
        else:
            weights[...] = w_taps[:, None, :]
        direct = writes_through(y, self.acc_dtype, alpha, beta, epilogue)
        block = self._planar_block if self.planar else self._channels_last_block
        parallel_map(lambda worker, b: block(worker, b, x, weights, y, workspace, direct, alpha, beta, epilogue),
                     self.block_list())

    def _planar_block(self, worker, block, x, weights, y, workspace, direct, alpha, beta, epilogue):
        g = self.geometry
        n0, nb, c0, cb, r0, rb = block
        slot, stride = g.slot(rb), self._phase_stride()
        run = nb * cb * slot
        rows_in = rb + g.reach[0]
        xb = workspace["dw_input"][worker].reshape(g.phases, stride)
        for phase, fills, sources in g.phase_copies(r0, rb):
            xb[phase, run:run + g.tail] = 0  # what the last plane's dropped outputs read
            planes = xb[phase, :run].reshape(nb, cb, rows_in, *g.extent[1:])
            src = None if fills is None else x[(slice(n0, n0 + nb), slice(c0, c0 + cb)) + tuple(sources)]
            fill_phase(planes, fills, src, 2)
        acc = workspace["dw_acc"][worker, :run].reshape(nb, cb, slot)
        tmp = workspace["dw_prod"][worker, :run].reshape(nb, cb, slot)
        if self.replicated:
            taps_weights = weights[:, c0:c0 + cb, :slot]
        else:
            taps_weights = weights[:, c0:c0 + cb, None]
        pairs = [(xb[phase, off:off + run].reshape(nb, cb, slot), taps_weights[t])
                 for t, ((phase, _), off) in enumerate(zip(g.taps, g.flat_offsets()))]
        valid = (Ellipsis,) + tuple(slice(0, o) for o in g.out_spatial[1:])
        length = rb * g.steps[0]
        acc_out = acc[..., :length].reshape(nb, cb, rb, *g.extent[1:])[valid]
        tmp_out = tmp[..., :length].reshape(nb, cb, rb, *g.extent[1:])[valid]
        index = (slice(n0, n0 + nb), slice(c0, c0 + cb), slice(r0, r0 + rb))
        target = y[index] if direct else acc_out
        multiply_add(pairs, acc, tmp, (acc_out, tmp_out, target))
        if not direct:
            store(y[index], acc_out, alpha, beta, epilogue, index)

    def _channels_last_block(self, worker, block, x, weights, y, workspace, direct, alpha, beta, epilogue):
        g = self.geometry
        n0, nb, _, _, r0, rb = block
        rows_in = rb + g.reach[0]
        full = (self.blocks[2] + g.reach[0], *g.extent[1:], self.c)
        xb = workspace["dw_input"][worker, :nb * g.phases * prod(full)].reshape(nb, g.phases, *full)
        x_last = np.moveaxis(x[n0:n0 + nb], 1, -1)  # (nb, *in, C)
        for phase, fills, sources in g.phase_copies(r0, rb):
            src = None if fills is None else x_last[(slice(None),) + tuple(sources)]
            fill_phase(xb[:, phase, :rows_in], fills, src, 1)
        out_box = (nb, rb, *g.out_spatial[1:], self.c)
        size = prod(out_box)
        acc = workspace["dw_acc"][worker, :size].reshape(out_box)
        tmp = workspace["dw_prod"][worker, :size].reshape(out_box)
        rows_weights = slice(None) if g.nd > 1 else slice(0, rb)
        pairs = []
        for t, (phase, shift) in enumerate(g.taps):
            window = tuple(slice(h, h + o) for h, o in zip(shift, (rb, *g.out_spatial[1:])))
            pairs.append((xb[(slice(None), phase) + window], weights[t, rows_weights]))
        index = (slice(n0, n0 + nb), slice(None), slice(r0, r0 + rb))
        target = np.moveaxis(y[index], 1, -1) if direct else acc
        if self.einsum:
            taps_last = weights[:, 0].reshape(*g.kernel, self.c)
            window_sum(xb[:, 0, :rows_in], taps_last, g.dilation, target)
        else:
            multiply_add(pairs, acc, tmp, (acc, tmp, target))
        if not direct:
            store(y[index], np.moveaxis(acc, -1, 1), alpha, beta, epilogue, index)
