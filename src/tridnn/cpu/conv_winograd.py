"""WINOGRAD forward convolution: F(2x2,3x3) or F(4x4,3x3), transforms fused per block.

Minimal filtering computes an m x m output tile from an (m+2) x (m+2) input tile with
``Y = A^T [ (G g G^T) . (B^T d B) ] A``: (m+2)^2 multiplies per tile and channel pair
instead of 9 m^2 (2.25x fewer for m = 2, 4x for m = 4). Here the input transform,
the channel GEMMs (one per transform point) and the output transform run block by
block over rows of tiles, so each block's transformed data stays in cache; only the
transformed filter, the padded input and the output accumulator span the whole
problem. F(2x2) is picked for small planes (less tile waste at the edges), F(4x4)
otherwise. 2D 3x3, stride 1, dilation 1 only.

The transform matrices come from Toom-Cook interpolation (``matrices``); the tile
helpers below are shared with WINOGRAD_NONFUSED (conv_winograd_nonfused.py).
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import BANDWIDTH, MATMUL_CALL, as_matrix, channels_last, gemm_rate, pad_into, prod, store, writes_through

# Interpolation points, in the order that keeps the transforms' error lowest.
POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2), 3, -3)


@lru_cache(maxsize=None)
def matrices(m: int, r: int = 3):
    """(AT (m x n), G (n x r), BT (n x n)) in float64 for F(m, r), n = m + r - 1.

    Correlation y[i] = sum_k d[i + k] g[k] is the transpose of Toom-Cook's linear
    convolution: with V the evaluation matrix at the n - 1 finite points plus
    infinity, y = V[:, :m]^T ((V[:, :r] g) . (V^-T d)). Row j of V^-T is scaled by
    f_j = prod_{l != j} (p_j - p_l) and row j of G by 1 / f_j, which keeps B^T's
    entries small integers (as in Lavin and Gray's matrices)."""
    n = m + r - 1
    pts = [Fraction(p) for p in POINTS[:n - 1]]
    vand = [[p ** e for e in range(n)] for p in pts] + [[Fraction(int(e == n - 1)) for e in range(n)]]
    scale = [_prod(p - q for q in pts if q != p) for p in pts] + [Fraction(1)]
    inv_t = exact_inverse(vand)  # V^-1; B^T = diag(f) V^-T
    bt = [[scale[j] * inv_t[i][j] for i in range(n)] for j in range(n)]
    # at infinity a polynomial evaluates to its leading coefficient
    g = [[pts[j] ** k / scale[j] for k in range(r)] for j in range(n - 1)] + \
        [[Fraction(int(k == r - 1)) for k in range(r)]]
    at = [[pts[j] ** i for j in range(n - 1)] + [Fraction(int(i == m - 1))] for i in range(m)]
    as_array = lambda rows: np.array([[float(v) for v in row] for row in rows])
    return as_array(at), as_array(g), as_array(bt)


def _prod(values):
    out = Fraction(1)
    for v in values:
        out *= v
    return out


def exact_inverse(a):
    """Exact Gauss-Jordan inverse of a small rational matrix (rows of Fractions)."""
    n = len(a)
    rows = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        inv = 1 / rows[col][col]
        rows[col] = [v * inv for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                f = rows[r][col]
                rows[r] = [v - f * w for v, w in zip(rows[r], rows[col])]
    return [row[n:] for row in rows]


def transform_pair(mat: np.ndarray, data: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """out[a, b, ...] = sum_ij mat[a, i] mat[b, j] data[i, j, ...], as two GEMMs.

    data is (i, j, rest) contiguous; scratch holds the half-transformed (a, j, rest)."""
    p, q = mat.shape
    rest = data.shape[2:]
    half = scratch[: p * data.size // q].reshape(p, q, -1)
    np.matmul(mat, data.reshape(q, -1), out=half.reshape(p, -1))  # along i
    np.matmul(mat, half, out=out.reshape(p, p, -1))               # along j
    return out.reshape(p, p, *rest)


def filter_transform(w: np.ndarray, m: int, out: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """U[pt, k, c] = (G w[k, c] G^T) flattened over the (m+2)^2 points pt, into out (n*n, K, Cg).

    One GEMM: U = (G kron G) (n*n x 9) @ w.reshape(K*Cg, 9)^T, which lands point-major
    without any transposing copy. The point GEMMs then read U[pt] transposed (BLAS
    takes either order), so the filter is never reshuffled."""
    _, gm, _ = matrices(m)
    k, cg = w.shape[:2]
    kron = np.kron(gm, gm).astype(out.dtype)
    taps = as_matrix(w, (k * cg, 9), out.dtype)
    if taps is None:  # KRSC or flipped filter, or a half dtype: one packing copy
        taps = scratch[: k * cg * 9].reshape(k * cg, 9)
        taps[...] = w.reshape(k * cg, 9)
    np.matmul(kron, taps.T, out=out.reshape(kron.shape[0], k * cg))
    return out


def filter_scratch_size(problem, m: int) -> int:
    """Elements of scratch ``filter_transform`` may need: the filter packed as (K*Cg, 9)."""
    return 9 * problem.k * problem.w.c


def transformed_filter(problem, w, m, workspace) -> np.ndarray:
    """U point-major, as (n*n, G, Kg, Cg)."""
    g, n = problem.groups, m + 2
    u = filter_transform(w, m, workspace["u"], workspace["wscratch"])
    return u.reshape(n * n, g, problem.k // g, problem.w.c)


def winograd_not_applicable(problem, name: str) -> str | None:
    if problem.nd != 2:
        return f"{name} is implemented for 2D convolutions; this one is {problem.nd}D"
    if problem.kernel != (3, 3):
        return f"{name} needs a 3x3 filter; this one is {problem.kernel}"
    if problem.stride != (1, 1):
        return f"{name} needs stride 1; this one has stride {problem.stride}"
    if problem.dilation != (1, 1):
        return f"{name} needs dilation 1; this one has dilation {problem.dilation}"
    return None


def tile_grid(problem, m: int):
    """Tiles per spatial dim and the padded input extent they cover (tiles*m + 2)."""
    tiles = tuple(-(-o // m) for o in problem.out_spatial)
    return tiles, tuple(t * m + 2 for t in tiles)


# The tile helpers work in one of two orientations, picked from x's layout so that
# neither the packing nor the final store transposes: channels-first (NCHW) keeps a
# GEMM row per channel, ``M[pt] (Kg, P) = U[pt] (Kg, Cg) @ V[pt] (Cg, P)``;
# channels-last (NHWC) a GEMM row per tile, ``M[pt] (P, Kg) = V[pt] (P, Cg) @ U[pt]^T``.
# P runs over (images, tile rows, tile columns) in both.

def padded_view(flat: np.ndarray, b: int, c: int, extent, first: bool) -> np.ndarray:
    """The padded input of b images: (b, C, Hp, Wp) if ``first`` else (b, Hp, Wp, C)."""
    shape = (b, c, *extent) if first else (b, *extent, c)
    return flat[: prod(shape)].reshape(shape)


def pack_input(problem, x: np.ndarray, xpad: np.ndarray, first: bool) -> None:
    """xpad = x zero-padded, in the accumulator dtype, in the orientation's layout."""
    logical = xpad if first else np.moveaxis(xpad, -1, 1)
    extent = logical.shape[2:]
    post = tuple(e - i - p for e, i, p in zip(extent, problem.in_spatial, problem.pad_pre))
    pad_into(logical, x, problem.pad_pre, post)


def gather_tiles(xpad: np.ndarray, m: int, rows: slice, groups: int, out: np.ndarray,
                 first: bool) -> np.ndarray:
    """Every (n x n) input tile of the tile rows ``rows`` into out, point axes first:
    (n, n, G, Cg, P) if ``first`` else (n, n, G, P, Cg)."""
    n = m + 2
    logical = xpad if first else np.moveaxis(xpad, -1, 1)  # (b, C, Hp, Wp)
    b, c, hp, wp = logical.shape
    tw, nrows, cg = (wp - 2) // m, rows.stop - rows.start, c // groups
    sb, sc, sh, sw = logical.strides
    tiles = np.lib.stride_tricks.as_strided(
        logical[:, :, rows.start * m:], (b, groups, cg, nrows, tw, n, n),
        (sb, cg * sc, sc, m * sh, m * sw, sh, sw), writeable=False)
    if first:
        out.reshape(n, n, groups, cg, b, nrows, tw)[...] = tiles.transpose(5, 6, 1, 2, 0, 3, 4)
    else:
        out.reshape(n, n, groups, b, nrows, tw, cg)[...] = tiles.transpose(5, 6, 1, 0, 3, 4, 2)
    return out


def multiply_points(v: np.ndarray, u: np.ndarray, out: np.ndarray, first: bool) -> np.ndarray:
    """One GEMM per transform point and group. u is point-major (n*n, G, Kg, Cg);
    v and out are (n*n, G, Cg, P) and (n*n, G, Kg, P) if ``first``, else (.., P, Cg) and (.., P, Kg)."""
    if first:
        return np.matmul(u, v, out=out)
    return np.matmul(v, u.swapaxes(-1, -2), out=out)


def acc_view(flat: np.ndarray, b: int, g: int, kg: int, extent, first: bool) -> np.ndarray:
    """The tile-aligned output accumulator: (b, G, Kg, Ho', Wo') or (b, Ho', Wo', G, Kg)."""
    shape = (b, g, kg, *extent) if first else (b, *extent, g, kg)
    return flat[: prod(shape)].reshape(shape)


def scatter_tiles(y_tiles: np.ndarray, m: int, rows: slice, acc: np.ndarray, first: bool) -> None:
    """Output tiles (m, m, G, Kg, P) or (m, m, G, P, Kg) into their rows of the accumulator."""
    nrows = rows.stop - rows.start
    if first:
        b, g, kg, _, wo = acc.shape
        tw = wo // m
        target = acc[:, :, :, rows.start * m: rows.stop * m].reshape((b, g, kg, nrows, m, tw, m), copy=False)
        target[...] = y_tiles.reshape(m, m, g, kg, b, nrows, tw).transpose(4, 2, 3, 5, 0, 6, 1)
    else:
        b, _, wo, g, kg = acc.shape
        tw = wo // m
        target = acc[:, rows.start * m: rows.stop * m].reshape((b, nrows, m, tw, m, g, kg), copy=False)
        target[...] = y_tiles.reshape(m, m, g, b, nrows, tw, kg).transpose(3, 4, 0, 5, 1, 2, 6)


def output_as_acc(problem, y: np.ndarray, m: int, alpha, beta, epilogue, first: bool):
    """y itself as the tile accumulator, when the tiles cover it exactly and nothing is
    left to blend (alpha 1, beta 0, no epilogue, accumulator dtype): the output transform
    then scatters straight into y and the final copy is skipped. None otherwise."""
    if any(o % m for o in problem.out_spatial) or not writes_through(y, problem.accumulator, alpha, beta,
                                                                         epilogue):
        return None
    g = problem.groups
    b, k, ho, wo = y.shape
    view = y if first else np.moveaxis(y, 1, -1)
    shape = (b, g, k // g, ho, wo) if first else (b, ho, wo, g, k // g)
    return view.reshape(shape)  # splits one axis only: always a view


def store_tiles(problem, acc: np.ndarray, y: np.ndarray, alpha, beta, epilogue, index,
                first: bool) -> None:
    """The valid (Ho, Wo) corner of the tile accumulator, blended into y."""
    ho, wo = problem.out_spatial
    if first:
        b, g, kg, ho_pad, wo_pad = acc.shape
        result = acc.reshape(b, g * kg, ho_pad, wo_pad)[:, :, :ho, :wo]
    else:
        b, ho_pad, wo_pad, g, kg = acc.shape
        result = np.moveaxis(acc.reshape(b, ho_pad, wo_pad, g * kg)[:, :ho, :wo], -1, 1)
    store(y, result, alpha, beta, epilogue, index)


def winograd_stages(problem, m, xpad, rows, u, workspace, acc, first):
    """Input transform, point GEMMs and output transform of the tile rows ``rows``."""
    n, g = m + 2, problem.groups
    cg, kg = problem.w.c, problem.k // g
    at, _, bt = (a.astype(problem.accumulator) for a in matrices(m))
    b = xpad.shape[0]
    tw = tile_grid(problem, m)[0][1]
    p = b * (rows.stop - rows.start) * tw
    in_shape = (n, n, g, cg, p) if first else (n, n, g, p, cg)
    out_shape = (g, kg, p) if first else (g, p, kg)
    d = gather_tiles(xpad, m, rows, g, workspace["d"][: prod(in_shape)].reshape(in_shape), first)
    v = transform_pair(bt, d, workspace["v"][: d.size].reshape(d.shape), workspace["half"])
    prod_ = multiply_points(v.reshape(n * n, *in_shape[2:]), u,
                            workspace["m"][: n * n * g * p * kg].reshape(n * n, *out_shape), first)
    y_tiles = transform_pair(at, prod_.reshape(n, n, *out_shape),
                             workspace["v"][: m * m * g * p * kg].reshape(m, m, *out_shape),
                             workspace["half"])
    scatter_tiles(y_tiles, m, rows, acc, first)


def winograd_estimate(problem, m: int, block_rate: float, rows: int, blocks: int) -> float:
    """GEMM flops at (m+2)^2 / (9 m^2) of direct's, plus the transforms' memory passes and
    one BLAS call per transform point, group and block (``rows`` GEMM rows each)."""
    n = m + 2
    tiles, _ = tile_grid(problem, m)
    points = problem.n * prod(tiles)
    gemm = 2.0 * n * n * points * problem.k * problem.w.c
    rate = gemm_rate(rows, problem.k // problem.groups, problem.w.c)
    moved = 4 * n * n * points * (problem.c + problem.k) * problem.accumulator.itemsize
    calls = n * n * problem.groups * blocks
    return gemm / rate + moved / block_rate + calls * MATMUL_CALL


class WinogradForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.WINOGRAD
    exact = False
    ROWS_BYTES = 4 << 20  # transformed data of one block of tile rows (about the L3 share)
    MIN_GEMM_ROWS = 128   # tiles per block at least (rows of each point GEMM)

    def not_applicable(self, problem):
        return winograd_not_applicable(problem, "WINOGRAD")

    @staticmethod
    def tile(problem) -> int:
        """F(4x4,3x3) unless F(2x2) needs no more multiplies (tiny planes, where 4x4 tiles
        would be mostly padding); F(2x2) is also the more accurate of the two."""
        def multiplies(m):
            return (m + 2) ** 2 * prod(tile_grid(problem, m)[0])
        return 4 if multiplies(4) < multiplies(2) else 2

    def _rows(self, problem, m):
        """Tile rows per block: all images of the batch, a few rows of tiles: as many as fit
        ROWS_BYTES, but at least enough for MIN_GEMM_ROWS tiles, since every block streams
        the whole transformed filter through the point GEMMs (and short GEMMs run slowly)."""
        tiles, _ = tile_grid(problem, m)
        n = m + 2
        per_row = n * n * problem.n * tiles[1] * (problem.c + problem.k) * problem.accumulator.itemsize
        rows = max(self.ROWS_BYTES // max(per_row, 1), -(-self.MIN_GEMM_ROWS // max(problem.n * tiles[1], 1)))
        return max(1, min(tiles[0], rows))

    def buffers(self, problem):
        m = self.tile(problem)
        n, g, acc = m + 2, problem.groups, problem.accumulator
        tiles, extent = tile_grid(problem, m)
        p = problem.n * self._rows(problem, m) * tiles[1]
        cg, kg = problem.w.c, problem.k // g
        return [Buffer("xpad", (problem.n * prod(extent) * problem.c,), acc),
                Buffer("u", (n * n, problem.k, cg), acc),
                Buffer("wscratch", (filter_scratch_size(problem, m),), acc),
                Buffer("d", (n * n * g * p * cg,), acc),
                Buffer("half", (n * n * g * p * max(cg, kg),), acc),
                Buffer("v", (n * n * g * p * max(cg, kg),), acc),
                Buffer("m", (n * n * g * p * kg,), acc),
                Buffer("acc", (problem.n * prod(tiles) * m * m * problem.k,), acc)]

    def estimate(self, problem):
        m = self.tile(problem)
        tiles, _ = tile_grid(problem, m)
        rows = self._rows(problem, m)
        return winograd_estimate(problem, m, 3 * BANDWIDTH, problem.n * rows * tiles[1], -(-tiles[0] // rows))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        m, g, first = self.tile(problem), problem.groups, not channels_last(x)
        tiles, extent = tile_grid(problem, m)
        u = transformed_filter(problem, w, m, workspace)
        xpad = padded_view(workspace["xpad"], problem.n, problem.c, extent, first)
        acc = acc_view(workspace["acc"], problem.n, g, problem.k // g, tuple(t * m for t in tiles), first)
        target = output_as_acc(problem, y, m, alpha, beta, epilogue, first)
        pack_input(problem, x, xpad, first)
        step = self._rows(problem, m)
        for r0 in range(0, tiles[0], step):
            winograd_stages(problem, m, xpad, slice(r0, min(tiles[0], r0 + step)), u, workspace,
                            acc if target is None else target, first)
        if target is None:
            store_tiles(problem, acc, y, alpha, beta, epilogue, (), first)
