"""ConvProblem: everything an algorithm needs to know about one convolution, no data.

The descriptors are validated once, here; algorithms read plain tuples. The three
directions share one problem shape: x is the input image, w the filter and y the
output image, and ``direction`` says which of them is written (y forward, x for
backward data, w for backward filter).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor
from ..errors import BadParamError
from ..types import DIRECTIONS, ConvMode, DataType, MathType

OUTPUT_OF = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}


@dataclass(frozen=True)
class ConvProblem:
    direction: str
    x: TensorDescriptor
    w: FilterDescriptor
    y: TensorDescriptor
    conv: ConvolutionDescriptor

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise BadParamError(f"unknown direction {self.direction!r}; valid: {DIRECTIONS}")
        for name, value, kind in (("x", self.x, TensorDescriptor), ("w", self.w, FilterDescriptor),
                                  ("y", self.y, TensorDescriptor), ("conv", self.conv, ConvolutionDescriptor)):
            if not isinstance(value, kind):
                raise BadParamError(f"the {name} descriptor must be a {kind.__name__}, got {value!r} "
                                    f"of type {type(value).__name__}")
        if self.direction == "bwd_data" and self.y.dims != self.conv.output_dims(self.x, self.w):
            # name the output the caller got wrong (dx), not dy
            raise BadParamError(f"dx descriptor dims {self.x.dims} do not match dy: with filter "
                                f"{self.w.dims} they give a forward output of "
                                f"{self.conv.output_dims(self.x, self.w)}, but dy has dims {self.y.dims}")
        if self.direction == "bwd_filter" and self.y.dims != self.conv.output_dims(self.x, self.w):
            raise BadParamError(f"dw descriptor dims {self.w.dims} do not match dy: with x "
                                f"{self.x.dims} they give a forward output of "
                                f"{self.conv.output_dims(self.x, self.w)}, but dy has dims {self.y.dims}")
        self.conv.check_output(self.x, self.w, self.y)

    @classmethod
    def forward(cls, x, w, conv, y=None) -> "ConvProblem":
        """y defaults to a packed tensor in x's format."""
        y = y if y is not None else x.with_dims(conv.output_dims(x, w))
        return cls("fwd", x, w, y, conv)

    # -- plain numbers for algorithms ----------------------------------------------
    @property
    def output(self) -> str:
        return OUTPUT_OF[self.direction]

    @property
    def nd(self) -> int:
        return self.conv.nd

    @property
    def n(self) -> int:
        return self.x.n

    @property
    def c(self) -> int:
        return self.x.c

    @property
    def k(self) -> int:
        return self.w.k

    @property
    def groups(self) -> int:
        return self.conv.groups

    @property
    def in_spatial(self) -> tuple[int, ...]:
        return self.x.spatial

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return self.y.spatial

    @property
    def kernel(self) -> tuple[int, ...]:
        return self.w.kernel

    @property
    def stride(self) -> tuple[int, ...]:
        return self.conv.stride

    @property
    def dilation(self) -> tuple[int, ...]:
        return self.conv.dilation

    @property
    def pad_pre(self) -> tuple[int, ...]:
        return self.conv.padding

    @property
    def pad_post(self) -> tuple[int, ...]:
        return self.conv.pad_post

    @property
    def mode(self) -> ConvMode:
        return self.conv.mode

    @property
    def dtype(self) -> DataType:
        return self.x.dtype

    @property
    def accumulator(self):
        """NumPy dtype of the accumulation: float64 for double data, else float32."""
        return self.conv.accumulator(self.x.dtype).numpy

    @property
    def math_type(self) -> MathType:
        return self.conv.math_type

    @property
    def depthwise(self) -> bool:
        return self.groups == self.c and self.w.c == 1

    @property
    def flops(self) -> float:
        """2 x multiply-adds; the same for all three directions."""
        out = 1
        for d in self.out_spatial:
            out *= d
        taps = 1
        for d in self.kernel:
            taps *= d
        return 2.0 * self.n * self.k * out * self.w.c * taps

    def key(self) -> str:
        """A stable text key of everything that can change an algorithm's choice or result."""
        c = self.conv
        return (f"conv/{self.direction}/{self.dtype.name}/x{self.x.dims}:{self.x.strides}"
                f"/w{self.w.dims}:{self.w.format.name}/y{self.y.dims}:{self.y.strides}"
                f"/p{c.padding}-{c.pad_post}/s{c.stride}/d{c.dilation}/g{c.groups}"
                f"/{c.mode.name}/{c.math_type.name}/{self.accumulator.name}").replace(" ", "")

    def describe(self) -> str:
        """A short human label: sizes in benchdnn style."""
        sp = "x".join(map(str, self.in_spatial))
        ks = "x".join(map(str, self.kernel))
        return (f"{self.direction} n{self.n} c{self.c} {sp} k{self.k} f{ks} s{self.stride} "
                f"p{self.pad_pre}/{self.pad_post} d{self.dilation} g{self.groups} "
                f"{self.dtype.name} {self.x.format}")
