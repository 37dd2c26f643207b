"""Strided backward data as stride-1 forward convolutions, one per output phase.

Why: a stride-s convolution's backward data (a transposed convolution) touches dx row h
from the taps kh with kh = h + p (mod s) only. Split dx into its s*s phases (rows a, a+s, ...;
columns b, b+s, ...): each phase is a plain stride-1 forward convolution of dy by a
sub-filter of those taps, turned (K and C swapped, taps in decreasing order), written
through a strided view of dx. gluon_conv runs each one with its stride-1 kernel.

Per dimension (dilation 1): for phase a, the taps are kh_t = kh_max - t*s (t = 0, 1, ...)
with kh_max the largest tap of kh = a + p (mod s), and
    dx[s*i + a] = sum_t dy[i - P + t] * w[kh_t],   P = (kh_max - a - p) / s
(an exact division; P may be negative: dy is then read from row -P on). The turned filter
holds the phases' sub-filters one after another (filter_turn's ``order`` table), so each
phase's matrix is a column block of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Phase:
    offset: tuple   # (a, b): this phase's dx rows a, a+sh, ... and columns b, b+sw, ...
    taps: tuple     # (th, tw): its sub-filter's taps per dimension
    padding: tuple  # (P_h, P_w): its forward convolution's top/left padding of dy (may be negative)
    column: int     # its sub-filter's first tap slot in the turned filter


def axis_taps(size: int, stride: int, pad: int) -> list:
    """[(kh_t for t = 0, 1, ... (decreasing), P)] for each phase a = 0 .. stride-1 along one axis
    of a filter of ``size`` taps (effective cross-correlation taps, dilation 1)."""
    out = []
    for a in range(stride):
        taps = list(range((a + pad) % stride, size, stride))[::-1]
        out.append((taps, (taps[0] - a - pad) // stride if taps else 0))
    return out


def phases(kernel, stride, padding, convolution: bool) -> tuple:
    """((Phase, ...) in (a, b) order, order): ``order`` maps each tap kh * KW + kw of the filter
    to its slot in the turned filter (filter_turn.turned_filter). convolution: the problem's
    CONVOLUTION mode, whose forward reverses the filter (its effective taps are KH-1-kh).
    Cached: each strided backward-data call asks again."""
    return _phases(tuple(kernel), tuple(stride), tuple(padding), bool(convolution))


@lru_cache(maxsize=256)
def _phases(kernel, stride, padding, convolution):
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    rows, cols = axis_taps(kh, sh, ph), axis_taps(kw, sw, pw)
    out, order, slot = [], [None] * (kh * kw), 0
    for a, (h_taps, p_h) in enumerate(rows):
        for b, (w_taps, p_w) in enumerate(cols):
            out.append(Phase((a, b), (len(h_taps), len(w_taps)), (p_h, p_w), slot))
            for th in h_taps:
                for tw in w_taps:
                    src_h, src_w = (kh - 1 - th, kw - 1 - tw) if convolution else (th, tw)
                    order[src_h * kw + src_w] = slot
                    slot += 1
    return tuple(out), tuple(order)
