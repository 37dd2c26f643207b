"""DIRECT forward convolution: tap-by-tap multiply-accumulate, no GEMM.

For each kernel tap and each input channel of a group, the shifted input plane is
multiplied by that tap's weights and added into the output. The work is
taps x (channels per group) passes over the output, so it pays only where channels
per group are few (depthwise, small groups), where GEMM methods degenerate into
tiny, badly shaped matrix products.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.base import Algorithm
from ..types import ConvFwdAlgo
from ..workspace import Buffer
from .common import split_groups, store, tap_views, taps

MAX_CHANNELS_PER_GROUP = 16


class DirectForward(Algorithm):
    direction = "fwd"
    enum = ConvFwdAlgo.DIRECT
    exact = True

    def not_applicable(self, problem):
        if problem.w.c > MAX_CHANNELS_PER_GROUP:
            return (f"DIRECT is for depthwise and small-group convolutions (<= "
                    f"{MAX_CHANNELS_PER_GROUP} input channels per group); this one has {problem.w.c}")
        return None

    def buffers(self, problem):
        # The accumulator, in channels-last order so the per-channel weights broadcast
        # along the contiguous axis: (N, *out, G, Kg).
        g = problem.groups
        return [Buffer("acc", (problem.n, *problem.out_spatial, g, problem.k // g), problem.accumulator),
                Buffer("prod", (problem.n, *problem.out_spatial, g, problem.k // g), problem.accumulator)]

    def estimate(self, problem):
        # memory-bound: ~3 passes over the output per (tap, channel) at ~5 GB/s
        out_bytes = problem.n * problem.k * np.prod(problem.out_spatial) * 4
        return np.prod(problem.kernel) * problem.w.c * 3 * out_bytes / 5e9

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        x, w, y = tensors["x"], tensors["w"], tensors["y"]
        g, nd = problem.groups, problem.nd
        acc, prod = workspace["acc"], workspace["prod"]
        acc[...] = 0
        # x as (N, *sp, G, Cg), w as (Cg, *k, G, Kg): channels last for broadcasting
        xg = np.moveaxis(split_groups(x, g), (1, 2), (-2, -1))
        wg = np.moveaxis(split_groups(w, g, axis=0), (0, 1, 2), (-2, -1, 0)).astype(problem.accumulator)
        xg_spatial_first = np.moveaxis(xg, (-2, -1), (1, 2))  # (N, G, Cg, *sp) for tap_views
        for tap in taps(problem):
            hit = tap_views(problem, xg_spatial_first, tap)
            if hit is None:
                continue
            out_sl, x_tap = hit
            x_tap = np.moveaxis(x_tap, (1, 2), (-2, -1))  # (N, *box, G, Cg)
            target = acc[(slice(None),) + out_sl]
            box = prod[(slice(None),) + out_sl]
            for ci in range(problem.w.c):
                # (N, *box, G, 1) * (G, Kg) -> (N, *box, G, Kg)
                np.multiply(x_tap[..., ci:ci + 1], wg[(ci,) + tap], out=box, casting="unsafe")
                target += box
        store(y, np.moveaxis(acc.reshape(problem.n, *problem.out_spatial, problem.k), -1, 1), alpha, beta,
              epilogue)
