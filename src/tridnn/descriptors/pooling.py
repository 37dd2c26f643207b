"""The pooling descriptor (cudnnPoolingDescriptor_t) and all pooling shape math."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import BadParamError, check_positive_int
from .activation import NanPropagation
from .enum_parse import enum_member
from .tensor import TensorDescriptor


class PoolingMode(enum.IntEnum):
    """cudnnPoolingMode_t, with cuDNN's numbers."""
    MAX = 0
    AVERAGE_COUNT_INCLUDE_PADDING = 1
    AVERAGE_COUNT_EXCLUDE_PADDING = 2
    MAX_DETERMINISTIC = 3

    @property
    def is_max(self) -> bool:
        return self in (PoolingMode.MAX, PoolingMode.MAX_DETERMINISTIC)


class AdaptivePoolingMode(enum.IntEnum):
    """tridnn extension: output size given, windows derived (PyTorch's adaptive pooling)."""
    MAX = 0
    AVERAGE = 1


def pooling_mode(value) -> PoolingMode:
    return enum_member(PoolingMode, value, "pooling mode", "CUDNN_POOLING_")


def adaptive_pooling_mode(value) -> AdaptivePoolingMode:
    return enum_member(AdaptivePoolingMode, value, "adaptive pooling mode")


def nan_propagation(value) -> NanPropagation:
    return enum_member(NanPropagation, value, "NaN propagation", "CUDNN_")


def _per_dim(name, value, nd, minimum):
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd
    if len(items) != nd:
        raise BadParamError(f"pooling {name} {items} has {len(items)} entries; the window has {nd} dims")
    return tuple(check_positive_int(f"pooling {name}[{i}] of {items}", v, minimum)
                 for i, v in enumerate(items))


@dataclass(frozen=True)
class PoolingDescriptor:
    """Mode, window, symmetric padding and stride per spatial dim, NaN propagation.

    ``stride`` defaults to the window (non-overlapping windows). cuDNN requires every
    padding to be smaller than its window, so no window lies wholly in the padding."""
    mode: PoolingMode
    window: tuple[int, ...] | int
    padding: tuple[int, ...] | int = 0
    stride: tuple[int, ...] | int | None = None
    nan_opt: NanPropagation = NanPropagation.NOT_PROPAGATE_NAN
    nd: int | None = None

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)
        nd = self.nd
        if nd is None:
            lengths = [len(v) for v in (self.window, self.padding, self.stride) if isinstance(v, (tuple, list))]
            nd = lengths[0] if lengths else 2
        nd = check_positive_int("pooling spatial dims", nd)
        if nd > 3:
            raise BadParamError(f"pooling has 1 to 3 spatial dims, got {nd}")
        set_("nd", nd)
        set_("mode", pooling_mode(self.mode))
        set_("nan_opt", nan_propagation(self.nan_opt))
        set_("window", _per_dim("window", self.window, nd, 1))
        set_("padding", _per_dim("padding", self.padding, nd, 0))
        set_("stride", self.window if self.stride is None else _per_dim("stride", self.stride, nd, 1))
        for i, (p, w) in enumerate(zip(self.padding, self.window)):
            if p >= w:
                raise BadParamError(f"pooling padding[{i}]={p} must be smaller than window[{i}]={w}")

    @property
    def propagate_nan(self) -> bool:
        return self.nan_opt == NanPropagation.PROPAGATE_NAN

    def output_dims(self, x: TensorDescriptor) -> tuple[int, ...]:
        """cudnnGetPoolingNdForwardOutputDim: 1 + (in + 2*pad - window) // stride per dim."""
        if x.ndim != self.nd + 2:
            raise BadParamError(f"rank mismatch: the pooling descriptor has {self.nd} spatial dims, "
                                f"x has dims {x.dims}")
        out = []
        for i, (size, w, p, s) in enumerate(zip(x.spatial, self.window, self.padding, self.stride)):
            o = (size + 2 * p - w) // s + 1
            if o <= 0 or size + 2 * p < w:
                raise BadParamError(f"pooling output dim {i} would be {o if o <= 0 else 0}: input "
                                    f"{size} + 2*padding {p} is smaller than window {w}")
            out.append(o)
        return (x.n, x.c, *out)

    def check(self, x: TensorDescriptor, y: TensorDescriptor) -> None:
        """y has the output dims of x and the same dtype."""
        expected = self.output_dims(x)
        if y.dims != expected:
            raise BadParamError(f"y descriptor dims {y.dims} do not match the pooling output dims "
                                f"{expected} of x dims {x.dims}")
        if y.dtype != x.dtype:
            raise BadParamError(f"dtype mismatch: x is {x.dtype.name}, y is {y.dtype.name}")
