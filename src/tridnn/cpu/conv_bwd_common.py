"""Pieces shared by the NumPy backward convolutions.

All backward methods work in one grouped, channels-first layout: an image tensor
(N, C, *sp) is seen as (N, G, Cg, *sp) and a filter (K, Cg, *k) as (G, Kg, Cg, *k),
so one broadcasting ``matmul`` does every group at once. This module holds that
layout, the per-tap geometry, batch blocking, and the transform plans (FFT sizes and
tiles, Winograd matrices; the FFT methods' cost model) that several methods share.
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from .common import prod, tap_box
from .conv_winograd import POINTS, exact_inverse

BLAS_FLOPS = 100e9   # conservative NumPy matmul rate here, for estimates only
MEM_BW = 5e9         # conservative bytes/s of a NumPy elementwise pass, for estimates only


# -- sizes -------------------------------------------------------------------------------
def batch_block(n: int, bytes_per_image: int, budget: int = 32 << 20) -> int:
    """Images per block, so that a block's temporaries stay near ``budget`` bytes."""
    return max(1, min(n, budget // max(bytes_per_image, 1)))


def blocks(n: int, block: int):
    """(first image, count) of each batch block."""
    for n0 in range(0, n, block):
        yield n0, min(n, n0 + block) - n0


def shaped(buffer: np.ndarray, shape) -> np.ndarray:
    """The leading part of a flat workspace buffer viewed as a contiguous ``shape``."""
    return buffer.reshape(-1)[:prod(shape)].reshape(shape)


def dilated_extent(problem) -> tuple[int, ...]:
    """Span of the dilated kernel per dim: dilation * (k - 1) + 1."""
    return tuple(d * (k - 1) + 1 for k, d in zip(problem.kernel, problem.dilation))


def upsampled_extent(problem) -> tuple[int, ...]:
    """Span of dy with stride - 1 zeros between its elements: (out - 1) * stride + 1."""
    return tuple((o - 1) * s + 1 for o, s in zip(problem.out_spatial, problem.stride))


# -- layout ------------------------------------------------------------------------------
def grouped(a: np.ndarray, groups: int) -> np.ndarray:
    """(N, C, *sp) as (N, G, C/G, *sp); a view."""
    return a.reshape(a.shape[0], groups, a.shape[1] // groups, *a.shape[2:])


def grouped_filter(w: np.ndarray, groups: int) -> np.ndarray:
    """(K, Cg, *k) as (G, K/G, Cg, *k); a view."""
    return w.reshape(groups, w.shape[0] // groups, *w.shape[1:])


def contract(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = a @ b over the last axis of a; a product with a single term (depthwise,
    one channel per group) is a broadcast multiply rather than a one-deep GEMM."""
    if a.shape[-1] == 1:
        return np.multiply(a, b, out=out)
    return np.matmul(a, b, out=out)


# -- taps --------------------------------------------------------------------------------
def tap_boxes(problem):
    """(flat tap index, tap, output slices, input slices) of every tap that reads at
    least one in-bounds input; input index = output index * stride + tap * dilation - pad."""
    for flat, tap in enumerate(np.ndindex(*problem.kernel)):
        out_sl, in_sl = [], []
        for t, i, o, s, d, p in zip(tap, problem.in_spatial, problem.out_spatial, problem.stride,
                                    problem.dilation, problem.pad_pre):
            box = tap_box(t, i, o, s, d, p)
            if box is None:
                break
            lo, hi, first = box
            out_sl.append(slice(lo, hi))
            in_sl.append(slice(first, first + (hi - lo - 1) * s + 1, s))
        else:
            yield flat, tap, tuple(out_sl), tuple(in_sl)


def covers_output(problem, out_sl) -> bool:
    return all(s.start == 0 and s.stop == o for s, o in zip(out_sl, problem.out_spatial))


# -- FFT plans ---------------------------------------------------------------------------
def fast_size(n: int) -> int:
    """The smallest 2^a 3^b 5^c 7^d >= n: sizes pocketfft transforms quickly."""
    best = None
    p7 = 1
    while p7 < 2 * n:
        p5 = p7
        while p5 < 2 * n:
            p3 = p5
            while p3 < 2 * n:
                p2 = p3
                while p2 < n:
                    p2 *= 2
                if best is None or p2 < best:
                    best = p2
                p3 *= 3
            p5 *= 5
        p7 *= 7
    return best


def spectrum_shape(fft_size) -> tuple[int, ...]:
    """Shape of rfftn's output for a real transform of ``fft_size``."""
    return tuple(fft_size[:-1]) + (fft_size[-1] // 2 + 1,)


def tile_counts(extent, tile) -> tuple[int, ...]:
    return tuple(-(-e // t) for e, t in zip(extent, tile))


def tile_pieces(tile, fft_size):
    """Overlap-add pieces: for each combination of tile-sized chunks of an FFT block,
    (tile offset per dim, source slices per dim, length per dim)."""
    per_dim = []
    for t, f in zip(tile, fft_size):
        per_dim.append([(j, slice(j * t, min(f, (j + 1) * t))) for j in range(-(-f // t))])
    for combo in itertools.product(*per_dim):
        yield tuple(j for j, _ in combo), tuple(s for _, s in combo)


# -- Winograd ----------------------------------------------------------------------------
def winograd_matrices(m: int, r: int, dtype=np.float64):
    """(A^T, G, B^T) of Winograd's minimal filtering F(m, r) for correlation,
    y = A^T [(G g) * (B^T d)], built by the modified Toom-Cook construction.

    With alpha = m + r - 1 interpolation points (alpha - 1 finite ones and infinity),
    the polynomial product c = g(x) h(x) is c = V^-1 [(G g) * (H h)], V the Vandermonde
    matrix of the points; correlation is that product's transpose in h, so
    A^T = H^T and B^T = V^-T. Exact fractions keep the matrices exact before rounding."""
    alpha = m + r - 1
    pts = [Fraction(p) for p in POINTS[:alpha - 1]]

    def evaluation(cols):
        rows = [[p ** j for j in range(cols)] for p in pts]
        rows.append([Fraction(int(j == cols - 1)) for j in range(cols)])  # the point at infinity
        return rows

    g_eval = evaluation(r)
    h_eval = evaluation(m)
    vander = evaluation(alpha)
    v_inv = exact_inverse(vander)
    a_t = [[h_eval[j][i] for j in range(alpha)] for i in range(m)]
    b_t = [[v_inv[j][i] for j in range(alpha)] for i in range(alpha)]
    as_array = lambda rows: np.array([[float(v) for v in row] for row in rows], dtype)
    return as_array(a_t), as_array(g_eval), as_array(b_t)


def transform_2d(left: np.ndarray, tiles: np.ndarray, out=None, scratch=None) -> np.ndarray:
    """left @ tile @ left^T for every tile in the last two axes; ``scratch`` (a flat
    workspace buffer) holds the half-transformed tiles when given."""
    shape = tiles.shape[:-2] + (left.shape[0], tiles.shape[-1])
    half = None if scratch is None else shaped(scratch, shape)
    half = np.matmul(left, tiles, out=half)
    return np.matmul(half, left.T, out=out)


def winograd_3x3_applies(problem) -> str | None:
    if problem.nd != 2:
        return f"Winograd is implemented for 2D convolutions; this one has {problem.nd} spatial dims"
    if problem.kernel != (3, 3):
        return f"Winograd here needs a 3x3 filter, got {problem.kernel}"
    if problem.stride != (1, 1):
        return f"Winograd needs stride 1, got {problem.stride}"
    if problem.dilation != (1, 1):
        return f"Winograd needs dilation 1, got {problem.dilation}"
    return None


class SpectralPlan:
    """Tiles and FFT sizes of a backward convolution done with real FFTs.

    Both backward directions see dy upsampled by the stride (stride - 1 zeros between
    elements, extent ``up``) and the filter dilated (extent ``span``). dy is cut into
    tiles of ``tile`` elements per dim and every tile is transformed at ``fft`` =
    tile + span - 1, so the linear convolution (or correlation) of a tile fits without
    wrap-around. One tile covering all of dy is the plain FFT method; small tiles are
    FFT_TILING (overlap-add for data, a sum of windowed correlations for the filter).
    """

    def __init__(self, problem, tiled: bool, tile_fft: int = 16):
        self.span = dilated_extent(problem)
        self.up = upsampled_extent(problem)
        fft = []
        for u, e in zip(self.up, self.span):
            whole = fast_size(u + e - 1)
            fft.append(min(fast_size(max(tile_fft, 2 * e - 1)), whole) if tiled else whole)
        self.fft = tuple(fft)
        self.tile = tuple(f - e + 1 for f, e in zip(self.fft, self.span))
        self.count = tile_counts(self.up, self.tile)
        self.tiles = prod(self.count)
        self.spectrum = spectrum_shape(self.fft)
        self.freqs = prod(self.spectrum)

    @property
    def axes(self):
        return tuple(range(-len(self.fft), 0))

    def dy_tiles(self, up_buffer: np.ndarray, tiles_buffer: np.ndarray, dy: np.ndarray, stride) -> np.ndarray:
        """dy (b, K, *out), upsampled by the stride and cut into tiles, each zero-padded
        to the FFT size: a (b, *count, K, *fft) array ready for a real FFT."""
        b, k = dy.shape[:2]
        nd = len(self.tile)
        up = shaped(up_buffer, (b, k) + tuple(c * t for c, t in zip(self.count, self.tile)))
        up[...] = 0
        up[(slice(None), slice(None)) + tuple(slice(0, u, s) for u, s in zip(self.up, stride))] = dy
        split = up.reshape((b, k) + tuple(v for ct in zip(self.count, self.tile) for v in ct))
        counts = tuple(2 + 2 * i for i in range(nd))
        within = tuple(3 + 2 * i for i in range(nd))
        tiles = shaped(tiles_buffer, (b, *self.count, k, *self.fft))
        if self.tile != self.fft:
            tiles[...] = 0
        tiles[(Ellipsis,) + tuple(slice(0, t) for t in self.tile)] = split.transpose((0,) + counts + (1,) + within)
        return tiles

    def dy_tiles_size(self, k: int) -> tuple[int, int]:
        """Elements per image of the two buffers ``dy_tiles`` uses."""
        return k * prod(c * t for c, t in zip(self.count, self.tile)), k * self.tiles * prod(self.fft)

    def frequency_major(self, spec: np.ndarray, groups: int, out: np.ndarray) -> np.ndarray:
        """(b, *count, C, *spectrum) -> (freqs, G, b*tiles, C/G) packed into ``out``."""
        rows = spec.shape[0] * self.tiles
        c = spec.shape[1 + len(self.count)]
        view = spec.reshape(rows, groups, c // groups, self.freqs)
        dst = shaped(out, (self.freqs, groups, rows, c // groups))
        dst[...] = view.transpose(3, 1, 0, 2)
        return dst


def complex_accumulator(problem) -> np.dtype:
    """The spectra's dtype: complex128 for a float64 accumulator, else complex64."""
    return np.dtype(np.complex128) if problem.accumulator == np.float64 else np.dtype(np.complex64)


def spectral_estimate(problem, plan: SpectralPlan) -> float:
    """Predicted seconds of either backward direction done with FFTs under ``plan``:
    both transform dy and one of x/dx per tile, and run one GEMM per frequency."""
    g, cg, kg = problem.groups, problem.w.c, problem.k // problem.groups
    fft_flops = 5 * problem.n * plan.tiles * (problem.k + problem.c) * prod(plan.fft) * \
        max(1.0, np.log2(max(prod(plan.fft), 2)))
    gemm_flops = 8 * plan.freqs * g * problem.n * plan.tiles * kg * cg
    traffic = 8 * problem.n * plan.tiles * plan.freqs * (problem.k + problem.c) * 4
    # NumPy FFTs of many small planes and the complex transposes run far below BLAS rates
    return (fft_flops + gemm_flops) / (0.01 * BLAS_FLOPS) + 4 * traffic / MEM_BW
