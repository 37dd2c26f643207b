"""Backward data FFT, FFT_TILING, WINOGRAD and WINOGRAD_NONFUSED: a forward transform method run on dy.

With stride 1, dx[i] = sum_r dy[i + p - r d] w[r] (per dim, r the tap, d the dilation, p
the padding before): a forward correlation of dy padded by d (R - 1) - p before and
d (R - 1) - q after (q: the padding after), with the filter turned 180 degrees and its two
channel axes swapped within each group (w'[g Cg + c, k] = w[g Kg + k, c]). So cuDNN's
transform families need no new kernels for backward data: each algorithm here builds that
forward problem (``forward_problem``: dy as x, dx as y, the other convolution mode, which
turns the filter) and hands it to the forward algorithm of its family, which checks its
own applicability (Winograd: 3x3, dilation 1), sizes its workspace and runs unchanged.

The swapped filter is a view for one group (w transposed) and for depthwise (the same
tensor); other grouped filters are copied once a call into the workspace (``w_swapped``,
K x Cg x taps elements).
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

from ..algorithms.problem import ConvProblem
from ..descriptors import FilterDescriptor
from ..types import ConvBwdDataAlgo, ConvMode
from ..workspace import Buffer
from .common import TritonConvAlgorithm
from .conv_fft import FftForward
from .conv_fft_tiling import FftTilingForward
from .conv_winograd import WinogradForward
from .conv_winograd_nonfused import WinogradNonfusedForward

OTHER_MODE = {ConvMode.CROSS_CORRELATION: ConvMode.CONVOLUTION, ConvMode.CONVOLUTION: ConvMode.CROSS_CORRELATION}


def why_not_as_forward(problem) -> str | None:
    """Why dx cannot be a forward convolution of dy: a stride, or padding wider than the
    dilated filter (its forward problem would need negative padding)."""
    if any(s != 1 for s in problem.stride):
        return (f"backward data as a forward convolution of dy needs stride 1, got stride {problem.stride} "
                f"(ALGO_0 and ALGO_1 take strides)")
    for axis, (k, d, p, q) in enumerate(zip(problem.kernel, problem.dilation, problem.pad_pre, problem.pad_post)):
        span = d * (k - 1)
        if p > span or q > span:
            return (f"padding ({p} before, {q} after) exceeds the dilated filter's reach {span} along spatial "
                    f"dim {axis}: dx would be a forward convolution with negative padding")
    return None


@lru_cache(maxsize=256)
def forward_problem(problem: ConvProblem) -> ConvProblem:
    """The forward convolution of dy that gives dx (see the module docstring)."""
    span = tuple(d * (k - 1) for k, d in zip(problem.kernel, problem.dilation))
    conv = dataclasses.replace(problem.conv, padding=tuple(s - p for s, p in zip(span, problem.pad_pre)),
                               pad_post=tuple(s - q for s, q in zip(span, problem.pad_post)),
                               mode=OTHER_MODE[problem.mode])
    kg = problem.k // problem.groups
    w = FilterDescriptor((problem.c, kg, *problem.kernel), dtype=problem.w.dtype, format=problem.w.format)
    return ConvProblem("fwd", problem.y, w, problem.x, conv)


def _needs_copy(problem) -> bool:
    """A grouped filter whose swapped form no single view gives (groups > 1, not depthwise)."""
    return problem.groups > 1 and not (problem.w.c == 1 and problem.k == problem.groups)


def swapped_filter(problem, w, workspace):
    """w [K, Cg, *taps] as the forward problem's filter [C, Kg, *taps]."""
    if problem.groups == 1:
        return w.transpose(0, 1)
    if not _needs_copy(problem):
        return w   # depthwise: [C, 1, *taps] either way
    g, kg, cg = problem.groups, problem.k // problem.groups, problem.w.c
    out = workspace["w_swapped"].view(g, cg, kg, *problem.kernel)
    out.copy_(w.unflatten(0, (g, kg)).transpose(1, 2))
    return out.flatten(0, 1)


class _BackwardDataAsForward(TritonConvAlgorithm):
    direction = "bwd_data"
    exact = False
    forward = None   # the forward algorithm of the family

    def not_applicable(self, problem):
        reason = super().not_applicable(problem) or why_not_as_forward(problem)
        if reason is not None:
            return reason
        reason = self.forward.not_applicable(forward_problem(problem))
        return None if reason is None else f"as a forward convolution of dy: {reason}"

    def buffers(self, problem):
        own = [Buffer("w_swapped", problem.w.dims, problem.dtype.numpy)] if _needs_copy(problem) else []
        return self.forward.buffers(forward_problem(problem)) + own

    def estimate(self, problem):
        return self.forward.estimate(forward_problem(problem))

    def run(self, problem, tensors, workspace, alpha, beta, epilogue=None):
        dx, w, dy = tensors["x"], tensors["w"], tensors["y"]
        forward = {"x": dy, "w": swapped_filter(problem, w, workspace), "y": dx}
        self.forward.run(forward_problem(problem), forward, workspace, alpha, beta)


class FftBackwardData(_BackwardDataAsForward):
    """dx by FFT (torch.fft for the transforms, conv_fft's Triton contraction)."""
    enum = ConvBwdDataAlgo.FFT
    forward = FftForward()


class FftTilingBackwardData(_BackwardDataAsForward):
    """dx by overlap-save FFT tiles (conv_fft_tiling)."""
    enum = ConvBwdDataAlgo.FFT_TILING
    forward = FftTilingForward()


class WinogradBackwardData(_BackwardDataAsForward):
    """dx by the fused F(2x2, 3x3) kernel (conv_winograd)."""
    enum = ConvBwdDataAlgo.WINOGRAD
    forward = WinogradForward()


class WinogradNonfusedBackwardData(_BackwardDataAsForward):
    """dx by the staged Winograd (conv_winograd_nonfused: F(4x4, 3x3) for float32-accurate math)."""
    enum = ConvBwdDataAlgo.WINOGRAD_NONFUSED
    forward = WinogradNonfusedForward()
