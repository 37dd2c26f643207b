"""FFT forward convolution: whole-plane spectra, one complex GEMM per frequency.

Cross-correlation is a product in the frequency domain:
``corr(x, w)[o] = IFFT(FFT(x) * conj(FFT(w)))[o]``. The padded input plane is
transformed once (``np.fft.rfftn``) at a fast size L >= the padded size, so the
circular wrap-around never reaches a valid output; the filter is zero-padded to the
same L (dilation by placing its taps ``dilation`` apart). The sum over input
channels then is, for every frequency, a small complex matrix product
``Y[f] (n, Kg) = X[f] (n, Cg) @ conj(W[f]) (Cg, Kg)``, done as one batched matmul on
frequency-major buffers (the FFTs write straight into that layout). Strides take
every ``stride``-th output of the full stride-1 result.

Rounding happens in the transforms, so results are close, not exact (about 1e-6
relative in float32). The method pays when kernels are large; for 3x3 and 1x1 the
GEMM and Winograd methods are faster.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import BANDWIDTH, GEMM_RATE, batch_block, pad_into, prod, split_groups, store

MAX_PLANE = 1 << 20  # points per channel plane; larger planes go to FFT_TILING
BLOCK_BYTES = 64 << 20


def fast_size(n: int, even: bool = False) -> int:
    """The smallest 2^a 3^b 5^c >= n (even when asked: rfft's last axis likes it).

    Walks the O(log(n)^2) pairs 3^b 5^c and completes each with the smallest power of
    two, so huge extents (hostile descriptors) cost microseconds, not a linear scan."""
    best = None
    p5 = 1
    while True:
        p35 = p5
        while True:
            m = p35
            while m < n or (even and m % 2):
                m *= 2
            best = m if best is None else min(best, m)
            if p35 >= n:
                break
            p35 *= 3
        if p5 >= n:
            break
        p5 *= 5
    return best


def complex_dtype(real) -> np.dtype:
    return np.result_type(real, np.complex64)


def padded_extent(problem) -> tuple[int, ...]:
    return tuple(i + a + b for i, a, b in zip(problem.in_spatial, problem.pad_pre, problem.pad_post))


def dilated_kernel(problem) -> tuple[int, ...]:
    return tuple(d * (k - 1) + 1 for k, d in zip(problem.kernel, problem.dilation))


def half_spectrum(sizes) -> tuple[int, ...]:
    """rfftn's output shape for real input of shape ``sizes``."""
    return tuple(sizes[:-1]) + (sizes[-1] // 2 + 1,)


def filter_spectrum(problem, w, wpad: np.ndarray, wf: np.ndarray, sizes) -> None:
    """wf (freq-major, (*F, G, Cg, Kg)) = conj(rfftn(w dilated and zero-padded to sizes)).

    wpad is real scratch of shape (G, Kg, Cg, *sizes)."""
    g, nd = problem.groups, problem.nd
    wpad[...] = 0
    taps_at = tuple(slice(0, d * (k - 1) + 1, d) for k, d in zip(problem.kernel, problem.dilation))
    wpad[(Ellipsis,) + taps_at] = split_groups(w, g, axis=0)
    np.fft.rfftn(wpad, axes=tuple(range(3, 3 + nd)), out=filter_view(wf, nd))
    np.conjugate(wf, out=wf)


def spectrum_view(buf: np.ndarray, nd: int) -> np.ndarray:
    """A freq-major image spectrum (*F, G, n, C) seen as (n, G, C, *F), the FFT's shape."""
    return np.moveaxis(buf, (nd + 1, nd, nd + 2), (0, 1, 2))


def filter_view(buf: np.ndarray, nd: int) -> np.ndarray:
    """A freq-major filter spectrum (*F, G, Cg, Kg) seen as (G, Kg, Cg, *F)."""
    return np.moveaxis(buf, (nd, nd + 2, nd + 1), (0, 1, 2))


class FftForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.FFT
    exact = False

    def not_applicable(self, problem):
        if prod(problem.kernel) == 1:
            return "a 1x1 filter is a plain GEMM over channels; FFT would only add transforms"
        plane = prod(self._sizes(problem))
        if plane > MAX_PLANE:
            return (f"the padded plane needs a {plane}-point FFT per channel, over the "
                    f"{MAX_PLANE}-point limit of whole-plane FFT; use FFT_TILING")
        return None

    def _sizes(self, problem):
        ext = padded_extent(problem)
        return tuple(fast_size(e, even=(d == len(ext) - 1)) for d, e in enumerate(ext))

    def _block(self, problem):
        sizes = self._sizes(problem)
        cplx = complex_dtype(problem.accumulator).itemsize
        per_image = (problem.c + problem.k) * (prod(sizes) * problem.accumulator.itemsize
                                               + prod(half_spectrum(sizes)) * cplx)
        return batch_block(problem, per_image, BLOCK_BYTES)

    def buffers(self, problem):
        sizes, g, b = self._sizes(problem), problem.groups, self._block(problem)
        spec = half_spectrum(sizes)
        cg, kg = problem.w.c, problem.k // g
        real, cplx = problem.accumulator, complex_dtype(problem.accumulator)
        return [Buffer("xpad", (b, problem.c, *sizes), real),
                Buffer("xf", (*spec, g, b, cg), cplx),
                Buffer("wpad", (g, kg, cg, *sizes), real),
                Buffer("wf", (*spec, g, cg, kg), cplx),
                Buffer("yf", (*spec, g, b, kg), cplx),
                Buffer("yfull", (b, problem.k, *sizes), real)]

    def estimate(self, problem):
        sizes = self._sizes(problem)
        points = prod(sizes)
        transforms = problem.n * (problem.c + problem.k) + problem.k * problem.w.c  # x, y and w planes
        fft_flops = 2.5 * points * np.log2(max(points, 2)) * transforms
        gemm_flops = 8 * prod(half_spectrum(sizes)) * problem.n * problem.k * problem.w.c
        bytes_moved = 6 * points * problem.n * (problem.c + problem.k) * 4
        return fft_flops / 3e9 + gemm_flops / (GEMM_RATE / 3) + bytes_moved / BANDWIDTH

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        nd, g, block = problem.nd, problem.groups, self._block(problem)
        sizes, spatial = self._sizes(problem), tuple(range(3, 3 + problem.nd))
        filter_spectrum(problem, w, workspace["wpad"], workspace["wf"], sizes)
        post = tuple(l - i - p for l, i, p in zip(sizes, problem.in_spatial, problem.pad_pre))
        # outputs o*stride of the full stride-1 correlation, for o < out
        pick = tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(problem.out_spatial, problem.stride))
        for n0 in range(0, problem.n, block):
            b = min(problem.n, n0 + block) - n0
            xpad = workspace["xpad"][:b]
            pad_into(xpad, x[n0:n0 + b], problem.pad_pre, post)
            xf = workspace["xf"][..., :b, :]
            np.fft.rfftn(split_groups(xpad, g), axes=spatial, out=spectrum_view(xf, nd))
            yf = workspace["yf"][..., :b, :]
            np.matmul(xf, workspace["wf"], out=yf)
            yfull = workspace["yfull"][:b]
            np.fft.irfftn(spectrum_view(yf, nd), s=sizes, axes=spatial, out=split_groups(yfull, g))
            store(y[n0:n0 + b], yfull[(Ellipsis,) + pick], alpha, beta, epilogue, (slice(n0, n0 + b),))
