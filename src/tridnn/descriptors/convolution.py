"""The convolution descriptor and all convolution shape math.

Padding is per spatial dim and may be asymmetric (``pad_pre`` before, ``pad_post``
after), which cuDNN's frontend allows and frameworks need for "same" padding.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadParamError, NotSupportedError, check_positive_int
from ..types import ConvMode, DataType, MathType
from .tensor import FilterDescriptor, TensorDescriptor


def per_dim(name: str, value, nd: int, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of nd ints, each checked against ``minimum``."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd
    if len(items) != nd:
        raise BadParamError(f"{name} {tuple(items)} has {len(items)} entries; the convolution "
                            f"has {nd} spatial dims")
    return tuple(check_positive_int(f"{name}[{i}] of {tuple(items)}", v, minimum)
                 for i, v in enumerate(items))


@dataclass(frozen=True)
class ConvolutionDescriptor:
    """Padding, stride, dilation, groups, mode and math of a convolution (cudnnConvolutionDescriptor_t).

    ``padding`` is an int or one entry per spatial dim; ``pad_post`` (default: the same
    as ``padding``) gives asymmetric trailing padding. ``compute_type`` None means the
    natural accumulator: float64 for double data, float32 otherwise.
    """
    padding: tuple[int, ...] | int = 0
    stride: tuple[int, ...] | int = 1
    dilation: tuple[int, ...] | int = 1
    groups: int = 1
    mode: ConvMode = ConvMode.CROSS_CORRELATION
    compute_type: DataType | None = None
    math_type: MathType = MathType.DEFAULT
    pad_post: tuple[int, ...] | int | None = None
    nd: int | None = None

    def __post_init__(self):
        nd = self.nd
        if nd is None:
            lengths = [len(v) for v in (self.padding, self.stride, self.dilation, self.pad_post)
                       if isinstance(v, (tuple, list))]
            nd = lengths[0] if lengths else 2
        nd = check_positive_int("spatial dims of the convolution", nd)
        if nd > 3:
            raise BadParamError(f"convolutions have 1 to 3 spatial dims, got {nd}")
        set_ = lambda k, v: object.__setattr__(self, k, v)
        set_("nd", nd)
        set_("padding", per_dim("padding", self.padding, nd, 0))
        set_("pad_post", self.padding if self.pad_post is None else per_dim("pad_post", self.pad_post, nd, 0))
        set_("stride", per_dim("stride", self.stride, nd, 1))
        set_("dilation", per_dim("dilation", self.dilation, nd, 1))
        set_("groups", check_positive_int("groups", self.groups))
        try:
            set_("mode", ConvMode(self.mode))
        except ValueError:
            raise BadParamError(f"unknown convolution mode {self.mode!r}; valid: CONVOLUTION (0), "
                                f"CROSS_CORRELATION (1)") from None
        try:
            set_("math_type", MathType(self.math_type))
        except ValueError:
            raise BadParamError(f"unknown math type {self.math_type!r}; valid: "
                                + ", ".join(m.name for m in MathType)) from None
        if self.compute_type is not None:
            set_("compute_type", DataType.of(self.compute_type))

    @property
    def pad_pre(self) -> tuple[int, ...]:
        return self.padding

    # -- shape math ---------------------------------------------------------------
    def output_dims(self, x: TensorDescriptor, w: FilterDescriptor) -> tuple[int, ...]:
        """(N, K, *out) of the forward convolution; raises BadParamError naming any bad dim."""
        self.check_operands(x, w)
        out = []
        for i, (size, k) in enumerate(zip(x.spatial, w.kernel)):
            o = output_size(size, k, self.padding[i], self.pad_post[i], self.stride[i], self.dilation[i])
            if o <= 0:
                raise BadParamError(
                    f"spatial dim {i} of the output would be {o}: input {size} + padding "
                    f"{self.padding[i]}+{self.pad_post[i]} is smaller than the dilated kernel "
                    f"{self.dilation[i] * (k - 1) + 1} (kernel {k}, dilation {self.dilation[i]})")
            out.append(o)
        return (x.n, w.k, *out)

    def check_operands(self, x: TensorDescriptor, w: FilterDescriptor) -> None:
        """Ranks, channels and groups of x and w agree with this descriptor."""
        if not 3 <= x.ndim <= 5:
            raise BadParamError(f"convolution tensors need 3 to 5 dims, got x dims {x.dims}")
        if x.ndim != w.ndim:
            raise BadParamError(f"rank mismatch: x has {x.ndim} dims {x.dims}, filter has "
                                f"{w.ndim} dims {w.dims}")
        if x.ndim != self.nd + 2:
            raise BadParamError(f"rank mismatch: the convolution descriptor has {self.nd} spatial "
                                f"dims, x has {x.ndim - 2} (dims {x.dims})")
        if x.c != self.groups * w.c:
            raise BadParamError(f"input channels C={x.c} must equal groups ({self.groups}) x filter "
                                f"channels ({w.c}) = {self.groups * w.c}")
        if w.k % self.groups:
            raise BadParamError(f"output channels K={w.k} must be divisible by groups={self.groups}")
        if x.dtype != w.dtype:
            raise BadParamError(f"dtype mismatch: x is {x.dtype.name}, filter is {w.dtype.name}")
        self.accumulator(x.dtype)

    def accumulator(self, dtype: DataType) -> DataType:
        """The compute type for data of ``dtype``; rejects combinations cuDNN rejects."""
        natural = DataType.DOUBLE if dtype == DataType.DOUBLE else DataType.FLOAT
        if self.compute_type is None or self.compute_type == natural:
            return natural
        if self.compute_type == DataType.HALF and dtype == DataType.HALF:
            raise NotSupportedError("compute type HALF (true half accumulation) is not supported; "
                                    "use FLOAT (pseudo-half: half data, float accumulation)")
        raise BadParamError(f"compute type {self.compute_type.name} does not fit {dtype.name} data; "
                            f"valid: {natural.name}")

    def check_output(self, x: TensorDescriptor, w: FilterDescriptor, y: TensorDescriptor) -> None:
        """y's dims equal the output dims of x (*) w and its dtype matches."""
        expected = self.output_dims(x, w)
        if y.dims != expected:
            raise BadParamError(f"y descriptor dims {y.dims} do not match the convolution's "
                                f"output dims {expected} (x {x.dims}, filter {w.dims}, padding "
                                f"{self.padding}+{self.pad_post}, stride {self.stride}, dilation "
                                f"{self.dilation})")
        if y.dtype != x.dtype:
            raise BadParamError(f"dtype mismatch: x is {x.dtype.name}, y is {y.dtype.name}")


def output_size(size: int, k: int, pad_pre: int, pad_post: int, stride: int, dilation: int) -> int:
    """cuDNN's output size: (in + pre + post - dilation*(k-1) - 1) // stride + 1."""
    return (size + pad_pre + pad_post - dilation * (k - 1) - 1) // stride + 1


def transposed_input_dims(dy: TensorDescriptor, w: FilterDescriptor, conv: ConvolutionDescriptor,
                          output_padding=0) -> tuple[int, ...]:
    """dx dims of a backward-data (transposed) convolution from dy: the smallest input
    whose forward output is dy, plus ``output_padding`` to pick among the others."""
    op = per_dim("output_padding", output_padding, conv.nd, 0)
    dims = []
    for i, (o, k) in enumerate(zip(dy.spatial, w.kernel)):
        if op[i] >= max(conv.stride[i], conv.dilation[i]):
            raise BadParamError(f"output_padding[{i}]={op[i]} must be smaller than stride "
                                f"({conv.stride[i]}) or dilation ({conv.dilation[i]})")
        size = (o - 1) * conv.stride[i] - conv.padding[i] - conv.pad_post[i] \
            + conv.dilation[i] * (k - 1) + 1 + op[i]
        if size <= 0:
            raise BadParamError(f"spatial dim {i} of the transposed output would be {size}")
        dims.append(size)
    return (dy.n, w.c * conv.groups, *dims)
