"""Problem geometry as the Triton kernels see it: every convolution is 3-D.

1-D and 2-D problems get leading spatial dims of size 1 (stride 0), so one kernel
serves NCW, NCHW and NCDHW, in any layout: the kernels take element strides.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..types import DataType, MathType
from .memo import IdentityMemo

INT32_LIMIT = 2**31 - 1


def pad3(values, nd: int, fill: int):
    """Per-dim values as (d, h, w), with ``fill`` for the dims a 1-D/2-D problem lacks."""
    return (fill,) * (3 - nd) + tuple(int(v) for v in values)


def strides5(t, nd: int):
    """(n, c, d, h, w) element strides of an N-d tensor view."""
    s = tuple(t.stride())
    return (s[0], s[1]) + pad3(s[2:], nd, 0)


@dataclass(frozen=True)
class Geometry:
    n: int
    c: int
    k: int
    groups: int
    cg: int
    kg: int
    inp: tuple   # (D, H, W)
    out: tuple
    ker: tuple
    stride: tuple
    pad: tuple
    dil: tuple

    @property
    def taps(self) -> int:
        return self.ker[0] * self.ker[1] * self.ker[2]

    @property
    def out_pixels(self) -> int:
        return self.n * self.out[0] * self.out[1] * self.out[2]

    @property
    def in_pixels(self) -> int:
        return self.n * self.inp[0] * self.inp[1] * self.inp[2]


_geometries = IdentityMemo()


def geometry(problem) -> Geometry:
    """The problem's geometry, computed once per problem object."""
    return _geometries.get((problem,), None, lambda: _geometry(problem))


def _geometry(problem) -> Geometry:
    nd = problem.nd
    return Geometry(problem.n, problem.c, problem.k, problem.groups, problem.w.c,
                    problem.k // problem.groups,
                    pad3(problem.in_spatial, nd, 1), pad3(problem.out_spatial, nd, 1),
                    pad3(problem.kernel, nd, 1), pad3(problem.stride, nd, 1),
                    pad3(problem.pad_pre, nd, 0), pad3(problem.dilation, nd, 1))


_wide_views: dict = {}  # (shape, strides) -> whether the view needs int64 offsets


def needs_int64(*tensors) -> bool:
    """Whether any view reaches an element offset beyond int32 (kept per shape and strides:
    every launch asks, and the sum over the dimensions cost ~1-2 us a call)."""
    for t in tensors:
        if t is None:
            continue
        key = (t.shape, t.stride())
        wide = _wide_views.get(key)
        if wide is None:
            wide = t.numel() > 0 and sum((d - 1) * s for d, s in zip(t.shape, t.stride())) > INT32_LIMIT // 2
            if len(_wide_views) >= 4096:
                _wide_views.clear()
            _wide_views[key] = wide
        if wide:
            return True
    return False


def input_precision(problem) -> str:
    """tl.dot precision for float32 data. TENSOR_OP: tf32 (10-bit mantissa products, as
    cuDNN's TENSOR_OP math). FMA: strict IEEE products on CUDA cores (cuDNN's FMA math).
    DEFAULT: "tf32x3", each operand split into a tf32 high and low part and three tensor-core
    products summed, which keeps float32-level error (measured on the H200 within 2e-7 to
    5e-7 of cuDNN's FMA result, the same as the FMA kernel) at tensor-core speed (res2_1x1c
    144 us against FMA's 524 and cuDNN FMA's 403). cuDNN's own DEFAULT allows plain tf32 for
    float32 on Ampere and later; tridnn's DEFAULT stays float32-accurate instead."""
    if problem.dtype != DataType.FLOAT:
        return "ieee"  # half types: the MMA runs them natively; the argument is ignored
    if problem.math_type in (MathType.TENSOR_OP, MathType.TENSOR_OP_ALLOW_CONVERSION):
        return "tf32"
    if problem.math_type == MathType.FMA:
        return "ieee"
    return "tf32x3"


def unsupported_dtype(problem) -> str | None:
    if problem.dtype == DataType.DOUBLE:
        return "the Triton kernels compute float32, float16 and bfloat16; float64 runs on the numpy backend"
    return None
