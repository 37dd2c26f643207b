"""Tensor and filter descriptors: shape, dtype and memory layout, no storage.

A descriptor's dims are always logical: (N, C, *spatial) for tensors and
(K, C/groups, *kernel) for filters. The layout lives in the strides (in elements), so
NCHW, NHWC and any strided view are one concept, as in cuDNN's Nd descriptors.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadParamError, check_positive_int
from ..types import DataType, TensorFormat

MAX_DIMS = 8


def packed_strides(dims, fmt: TensorFormat = TensorFormat.NCHW) -> tuple[int, ...]:
    """Strides of a densely packed tensor in NCHW-like or NHWC-like order."""
    dims = tuple(int(d) for d in dims)
    order = _physical_order(len(dims), fmt)
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= max(dims[axis], 1)
    return tuple(strides)


def _physical_order(ndim: int, fmt: TensorFormat) -> tuple[int, ...]:
    """Logical axes from outermost to innermost in memory."""
    fmt = TensorFormat(fmt)
    if fmt == TensorFormat.NCHW or ndim < 3:
        return tuple(range(ndim))
    if fmt == TensorFormat.NHWC:
        return (0, *range(2, ndim), 1)
    raise BadParamError(f"tensor format {fmt.name} is not supported; valid: NCHW, NHWC")


@dataclass(frozen=True)
class TensorDescriptor:
    """Logical dims, dtype and element strides of an N-d tensor (cudnnTensorDescriptor_t).

    The batch dim may be 0 (an empty batch); every other dim must be >= 1.
    """
    dims: tuple[int, ...]
    dtype: DataType = DataType.FLOAT
    strides: tuple[int, ...] | None = None

    def __post_init__(self):
        dims = _as_int_tuple("dims", self.dims)
        if not 1 <= len(dims) <= MAX_DIMS:
            raise BadParamError(f"a tensor needs 1 to {MAX_DIMS} dims, got {len(dims)}: {dims}")
        for axis, d in enumerate(dims):
            check_positive_int(f"dims[{axis}] of {dims}", d, minimum=0 if axis == 0 else 1)
        strides = packed_strides(dims) if self.strides is None else _as_int_tuple("strides", self.strides)
        if len(strides) != len(dims):
            raise BadParamError(f"strides {strides} must have one entry per dim of {dims}")
        for axis, s in enumerate(strides):
            check_positive_int(f"strides[{axis}] of {strides}", s)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "dtype", DataType.of(self.dtype))

    # -- constructors -------------------------------------------------------------
    @classmethod
    def packed(cls, dims, dtype=DataType.FLOAT, fmt=TensorFormat.NCHW) -> "TensorDescriptor":
        """A dense tensor with logical dims in NCHW (NCW, NCDHW) or NHWC (NWC, NDHWC) order."""
        dims = _as_int_tuple("dims", dims)
        return cls(dims, dtype, packed_strides(dims, fmt))

    @classmethod
    def nchw(cls, n, c, h, w, dtype=DataType.FLOAT) -> "TensorDescriptor":
        return cls.packed((n, c, h, w), dtype, TensorFormat.NCHW)

    @classmethod
    def nhwc(cls, n, c, h, w, dtype=DataType.FLOAT) -> "TensorDescriptor":
        """Logical dims are still N, C, H, W; only the memory order is N, H, W, C."""
        return cls.packed((n, c, h, w), dtype, TensorFormat.NHWC)

    @classmethod
    def ncdhw(cls, n, c, d, h, w, dtype=DataType.FLOAT) -> "TensorDescriptor":
        return cls.packed((n, c, d, h, w), dtype, TensorFormat.NCHW)

    @classmethod
    def ndhwc(cls, n, c, d, h, w, dtype=DataType.FLOAT) -> "TensorDescriptor":
        return cls.packed((n, c, d, h, w), dtype, TensorFormat.NHWC)

    @classmethod
    def like(cls, array) -> "TensorDescriptor":
        """The descriptor of an existing array (NumPy or torch), strides included."""
        from ..arrays import shape_strides_dtype
        dims, strides, dtype = shape_strides_dtype(array)
        strides = tuple(s if s > 0 else 1 for s in strides)  # size-1 dims may report 0
        return cls(dims, dtype, strides)

    # -- derived ------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def n(self) -> int:
        return self.dims[0]

    @property
    def c(self) -> int:
        return self.dims[1]

    @property
    def spatial(self) -> tuple[int, ...]:
        return self.dims[2:]

    @property
    def size(self) -> int:
        """Number of logical elements."""
        total = 1
        for d in self.dims:
            total *= d
        return total

    @property
    def span(self) -> int:
        """Elements of memory the tensor reaches (largest offset + 1); 0 when empty."""
        if self.size == 0:
            return 0
        return 1 + sum((d - 1) * s for d, s in zip(self.dims, self.strides))

    @property
    def nbytes(self) -> int:
        return self.span * self.dtype.itemsize

    @property
    def format(self) -> str:
        """'NCHW' or 'NHWC' when densely packed in that order, else 'strided'."""
        for fmt in (TensorFormat.NCHW, TensorFormat.NHWC):
            if _strides_equal(self.dims, self.strides, packed_strides(self.dims, fmt)):
                return fmt.name
        return "strided"

    @property
    def physical_dims(self) -> tuple[int, ...]:
        """Dims in memory order (outermost first), e.g. (N, H, W, C) for NHWC."""
        return tuple(self.dims[a] for a in self.memory_order)

    @property
    def memory_order(self) -> tuple[int, ...]:
        """Logical axes sorted from largest to smallest stride (stable)."""
        return tuple(sorted(range(self.ndim), key=lambda a: (-self.strides[a], a)))

    def with_dims(self, dims, fmt: str | None = None) -> "TensorDescriptor":
        """A packed descriptor of other dims in this one's format (NHWC stays NHWC)."""
        fmt = fmt or self.format
        return TensorDescriptor.packed(dims, self.dtype,
                                       TensorFormat.NHWC if fmt == "NHWC" else TensorFormat.NCHW)

    def __str__(self) -> str:
        return (f"TensorDescriptor(dims={self.dims}, dtype={self.dtype.name}, "
                f"strides={self.strides}, format={self.format})")


@dataclass(frozen=True)
class FilterDescriptor:
    """Filter dims (K, C/groups, *kernel), dtype and format (cudnnFilterDescriptor_t).

    format NCHW is cuDNN's KCRS (KCS, KCTRS) and NHWC is KRSC (KSC, KTRSC).
    """
    dims: tuple[int, ...]
    dtype: DataType = DataType.FLOAT
    format: TensorFormat = TensorFormat.NCHW

    def __post_init__(self):
        dims = _as_int_tuple("filter dims", self.dims)
        if not 3 <= len(dims) <= 5:
            raise BadParamError(f"a filter needs 3 to 5 dims (K, C, *kernel), got {len(dims)}: {dims}")
        for axis, d in enumerate(dims):
            check_positive_int(f"filter dims[{axis}] of {dims}", d)
        fmt = self.format
        if isinstance(fmt, str):
            fmt = {"KCRS": "NCHW", "KRSC": "NHWC"}.get(fmt.upper(), fmt.upper())
            if fmt not in TensorFormat.__members__:
                raise BadParamError(f"unknown filter format {self.format!r}; valid: NCHW (KCRS), NHWC (KRSC)")
            fmt = TensorFormat[fmt]
        fmt = TensorFormat(fmt)
        _physical_order(len(dims), fmt)  # rejects unsupported formats
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "format", fmt)
        object.__setattr__(self, "dtype", DataType.of(self.dtype))

    @property
    def k(self) -> int:
        return self.dims[0]

    @property
    def c(self) -> int:
        """Input channels per group."""
        return self.dims[1]

    @property
    def kernel(self) -> tuple[int, ...]:
        return self.dims[2:]

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def strides(self) -> tuple[int, ...]:
        return packed_strides(self.dims, self.format)

    def as_tensor(self) -> TensorDescriptor:
        """The filter seen as a tensor descriptor with its layout's strides."""
        return TensorDescriptor(self.dims, self.dtype, self.strides)

    @classmethod
    def like(cls, array, fmt=TensorFormat.NCHW) -> "FilterDescriptor":
        from ..arrays import shape_strides_dtype
        dims, strides, dtype = shape_strides_dtype(array)
        if fmt == TensorFormat.NCHW and len(dims) >= 3 and tuple(strides) == packed_strides(dims, TensorFormat.NHWC) \
                and tuple(strides) != packed_strides(dims, TensorFormat.NCHW):
            fmt = TensorFormat.NHWC
        return cls(dims, dtype, fmt)


def _as_int_tuple(name, value) -> tuple:
    try:
        items = tuple(value)
    except TypeError:
        raise BadParamError(f"{name} must be a sequence of integers, got {value!r}") from None
    return items


def _strides_equal(dims, a, b) -> bool:
    """Strides agree on every axis whose size is above 1 (size-1 axes never move)."""
    return all(d <= 1 or x == y for d, x, y in zip(dims, a, b))
