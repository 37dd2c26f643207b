"""Dropout in NumPy with a counter-based RNG, so the mask is a pure function of
(seed, offset + logical element index): independent of layout, blocking and backend.

The generator is Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
1, 2, 3"), the one Triton's ``tl.philox`` runs, so the GPU backend draws the identical
mask. Stream position q = offset + i (mod 2**64) takes word q % 4 of the Philox block
with counter q // 4: one call yields four elements' draws, which keeps the GPU kernel
memory-bound.
"""
from __future__ import annotations

import numpy as np

from .layer_utils import acc_dtype

_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57   # Philox-4x32 multipliers
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85       # Weyl key increments
_MASK32 = np.uint64(0xFFFFFFFF)
_CHUNK = 1 << 20
_WORDS = 4  # draws per Philox block


def philox_words(seed: int, counters: np.ndarray):
    """Philox-4x32-10 of counter (lo, hi, 0, 0) with key (seed lo, seed hi): the four
    output words, each as uint64."""
    c0 = counters & _MASK32
    c1 = counters >> np.uint64(32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    a, b = np.uint64(_ROUND_A), np.uint64(_ROUND_B)
    for _ in range(10):
        prod_b = b * c2
        prod_a = a * c0
        c0 = (prod_b >> np.uint64(32)) ^ c1 ^ np.uint64(k0)
        c2 = (prod_a >> np.uint64(32)) ^ c3 ^ np.uint64(k1)
        c1 = prod_b & _MASK32
        c3 = prod_a & _MASK32
        k0 = (k0 + _KEY_A) & 0xFFFFFFFF
        k1 = (k1 + _KEY_B) & 0xFFFFFFFF
    return c0, c1, c2, c3


def philox_first_word(seed: int, counters: np.ndarray) -> np.ndarray:
    """Word 0 of Philox-4x32-10 (what Triton's ``tl.randint(seed, counter)`` returns)."""
    return philox_words(seed, counters)[0]


def keep_threshold(probability: float) -> int:
    """An element is kept when its 31-bit draw is >= ceil(p * 2**31)."""
    return int(np.ceil(float(probability) * 2.0 ** 31))


def stream_draws(seed: int, first: int, count: int) -> np.ndarray:
    """The uint32 draws (as uint64) of stream positions first, ..., first + count - 1
    (mod 2**64): position q is word q % 4 of the block with counter q // 4."""
    first %= 1 << 64
    block0 = first // _WORDS
    blocks = -(-(first % _WORDS + count) // _WORDS)
    counters = (np.arange(blocks, dtype=np.uint64) + np.uint64(block0)) & np.uint64((1 << 62) - 1)
    words = np.stack(philox_words(int(seed), counters), axis=1).reshape(-1)
    skip = first % _WORDS
    return words[skip:skip + count]


def dropout_mask(shape, probability: float, seed: int, offset: int) -> np.ndarray:
    """uint8 mask (1 = kept) in C order over the logical ``shape``."""
    total = int(np.prod(shape))
    mask = np.empty(total, np.uint8)
    threshold = np.uint64(keep_threshold(probability))
    top = np.uint64(1 << 31)
    for start in range(0, total, _CHUNK):
        stop = min(total, start + _CHUNK)
        r = stream_draws(int(seed), int(offset) + start, stop - start)
        # Triton's uint -> uniform: bitcast to int32, fold negatives with -v - 1
        v = np.where(r >= top, np.uint64(0xFFFFFFFF) - r, r)
        mask[start:stop] = v >= threshold
    return mask.reshape(shape)


def dropout_forward(x, y, reserve, probability, seed, offset):
    """y = x * mask / (1 - p); the mask goes to ``reserve`` (uint8, x's logical shape, C order)."""
    mask = dropout_mask(x.shape, probability, seed, offset)
    reserve[...] = mask
    _apply(x, y, mask, probability)


def dropout_backward(dy, dx, reserve, probability):
    """dx = dy * mask / (1 - p) with the mask the forward saved in ``reserve``."""
    _apply(dy, dx, reserve, probability)


def _apply(src, dst, mask, probability):
    dt = acc_dtype(dst.dtype)
    scale = dt.type(1.0 / (1.0 - float(probability)))
    value = src.astype(dt) * scale
    value[mask == 0] = 0  # dropped elements are exactly zero, even where src is inf or NaN
    dst[...] = value
