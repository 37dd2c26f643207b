"""Mutable descriptor objects and their Create/Set/Get/Destroy calls.

cuDNN's descriptors are created empty and filled by Set* calls; tridnn's are frozen
and validated at construction. Each object here holds the frozen descriptor the
latest Set* call built (a failed Set* leaves the previous one), so every check
happens when the C program would get its status back. Using a descriptor that was
never set raises BadParamError; using a destroyed one raises NotInitializedError.
"""
from __future__ import annotations

from ..descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor
from ..errors import BadParamError, NotInitializedError, check_positive_int
from ..types import ConvMode, DataType, MathType, TensorFormat


class _Descriptor:
    kind = "descriptor"
    setter = "cudnnSet*"

    def __init__(self):
        self._alive = True
        self._frozen = None

    @property
    def desc(self):
        """The frozen tridnn descriptor the Set* calls built."""
        if not self._alive:
            raise NotInitializedError(f"this {self.kind} descriptor was destroyed")
        if self._frozen is None:
            raise BadParamError(f"this {self.kind} descriptor was created but never set; "
                                f"call {self.setter} first")
        return self._frozen

    def _set(self, frozen):
        if not self._alive:
            raise NotInitializedError(f"this {self.kind} descriptor was destroyed")
        self._frozen = frozen

    def _destroy(self):
        if not self._alive:
            raise NotInitializedError(f"this {self.kind} descriptor was already destroyed")
        self._alive = False
        self._frozen = None

    def __repr__(self):
        state = "destroyed" if not self._alive else (repr(self._frozen) if self._frozen else "unset")
        return f"<{type(self).__name__} {state}>"


class cudnnTensorStruct(_Descriptor):
    kind = "tensor"
    setter = "cudnnSetTensor4dDescriptor or cudnnSetTensorNdDescriptor"


class cudnnFilterStruct(_Descriptor):
    kind = "filter"
    setter = "cudnnSetFilter4dDescriptor or cudnnSetFilterNdDescriptor"


class cudnnConvolutionStruct(_Descriptor):
    """Group count and math type may be set before or after the geometry, as in cuDNN."""
    kind = "convolution"
    setter = "cudnnSetConvolution2dDescriptor or cudnnSetConvolutionNdDescriptor"

    def __init__(self):
        super().__init__()
        self._geometry = None  # dict(padding, stride, dilation, mode, compute_type, nd)
        self._groups = 1
        self._math = MathType.DEFAULT

    def _rebuild(self, geometry=None, groups=None, math=None):
        geometry = self._geometry if geometry is None else geometry
        groups = self._groups if groups is None else groups
        math = self._math if math is None else math
        if not self._alive:
            raise NotInitializedError("this convolution descriptor was destroyed")
        if geometry is not None:
            self._set(ConvolutionDescriptor(groups=groups, math_type=math, **geometry))
        self._geometry, self._groups, self._math = geometry, groups, math


def unwrap(value, name: str, expected):
    """The frozen descriptor behind a cuDNN-style object (frozen ones pass through)."""
    if isinstance(value, _Descriptor):
        frozen = value.desc
    else:
        frozen = value
    if not isinstance(frozen, expected):
        raise BadParamError(f"{name} must be a {expected.__name__} (from cudnnCreate*Descriptor "
                            f"and a Set* call), got {type(value).__name__}")
    return frozen


def _ints(name, values, count):
    values = list(values)[:count] if count is not None else list(values)
    if count is not None and len(values) < count:
        raise BadParamError(f"{name} has {len(values)} entries, fewer than nbDims={count}")
    return tuple(values)


def _nb_dims(nb_dims, low, high):
    nb = check_positive_int("nbDims", nb_dims)
    if not low <= nb <= high:
        raise BadParamError(f"nbDims={nb} is out of range; valid: {low} to {high}")
    return nb


def _format(fmt) -> TensorFormat:
    try:
        fmt = TensorFormat(fmt)
    except ValueError:
        raise BadParamError(f"unknown tensor format {fmt!r}; valid: CUDNN_TENSOR_NCHW (0), "
                            f"CUDNN_TENSOR_NHWC (1)") from None
    if fmt not in (TensorFormat.NCHW, TensorFormat.NHWC):
        raise BadParamError(f"tensor format {fmt.name} is not supported; valid: CUDNN_TENSOR_NCHW, "
                            f"CUDNN_TENSOR_NHWC")
    return fmt


# -- tensors ----------------------------------------------------------------------------
def cudnnCreateTensorDescriptor() -> cudnnTensorStruct:
    return cudnnTensorStruct()


def cudnnDestroyTensorDescriptor(tensorDesc) -> None:
    _expect(tensorDesc, cudnnTensorStruct, "tensorDesc")._destroy()


def cudnnSetTensor4dDescriptor(tensorDesc, format, dataType, n, c, h, w) -> None:
    _expect(tensorDesc, cudnnTensorStruct, "tensorDesc")._set(
        TensorDescriptor.packed((n, c, h, w), DataType.of(dataType), _format(format)))


def cudnnSetTensor4dDescriptorEx(tensorDesc, dataType, n, c, h, w, nStride, cStride, hStride,
                                 wStride) -> None:
    _expect(tensorDesc, cudnnTensorStruct, "tensorDesc")._set(
        TensorDescriptor((n, c, h, w), DataType.of(dataType), (nStride, cStride, hStride, wStride)))


def cudnnSetTensorNdDescriptor(tensorDesc, dataType, nbDims, dimA, strideA) -> None:
    nb = _nb_dims(nbDims, 1, 8)
    _expect(tensorDesc, cudnnTensorStruct, "tensorDesc")._set(
        TensorDescriptor(_ints("dimA", dimA, nb), DataType.of(dataType), _ints("strideA", strideA, nb)))


def cudnnSetTensorNdDescriptorEx(tensorDesc, format, dataType, nbDims, dimA) -> None:
    nb = _nb_dims(nbDims, 3, 8)
    _expect(tensorDesc, cudnnTensorStruct, "tensorDesc")._set(
        TensorDescriptor.packed(_ints("dimA", dimA, nb), DataType.of(dataType), _format(format)))


def cudnnGetTensor4dDescriptor(tensorDesc):
    """-> (dataType, n, c, h, w, nStride, cStride, hStride, wStride)."""
    d = unwrap(tensorDesc, "tensorDesc", TensorDescriptor)
    if d.ndim != 4:
        raise BadParamError(f"cudnnGetTensor4dDescriptor needs a 4-d descriptor, this one has "
                            f"{d.ndim} dims {d.dims}; use cudnnGetTensorNdDescriptor")
    return (d.dtype, *d.dims, *d.strides)


def cudnnGetTensorNdDescriptor(tensorDesc, nbDimsRequested):
    """-> (dataType, nbDims, dimA, strideA); the lists hold min(nbDims, nbDimsRequested) entries."""
    d = unwrap(tensorDesc, "tensorDesc", TensorDescriptor)
    req = check_positive_int("nbDimsRequested", nbDimsRequested)
    return d.dtype, d.ndim, list(d.dims[:req]), list(d.strides[:req])


def cudnnGetTensorSizeInBytes(tensorDesc) -> int:
    return unwrap(tensorDesc, "tensorDesc", TensorDescriptor).nbytes


# -- filters ----------------------------------------------------------------------------
def cudnnCreateFilterDescriptor() -> cudnnFilterStruct:
    return cudnnFilterStruct()


def cudnnDestroyFilterDescriptor(filterDesc) -> None:
    _expect(filterDesc, cudnnFilterStruct, "filterDesc")._destroy()


def cudnnSetFilter4dDescriptor(filterDesc, dataType, format, k, c, h, w) -> None:
    _expect(filterDesc, cudnnFilterStruct, "filterDesc")._set(
        FilterDescriptor((k, c, h, w), DataType.of(dataType), _format(format)))


def cudnnSetFilterNdDescriptor(filterDesc, dataType, format, nbDims, filterDimA) -> None:
    nb = _nb_dims(nbDims, 3, 5)
    _expect(filterDesc, cudnnFilterStruct, "filterDesc")._set(
        FilterDescriptor(_ints("filterDimA", filterDimA, nb), DataType.of(dataType), _format(format)))


def cudnnGetFilter4dDescriptor(filterDesc):
    """-> (dataType, format, k, c, h, w)."""
    d = unwrap(filterDesc, "filterDesc", FilterDescriptor)
    if d.ndim != 4:
        raise BadParamError(f"cudnnGetFilter4dDescriptor needs a 4-d filter, this one has dims "
                            f"{d.dims}; use cudnnGetFilterNdDescriptor")
    return (d.dtype, d.format, *d.dims)


def cudnnGetFilterNdDescriptor(filterDesc, nbDimsRequested):
    """-> (dataType, format, nbDims, filterDimA)."""
    d = unwrap(filterDesc, "filterDesc", FilterDescriptor)
    req = check_positive_int("nbDimsRequested", nbDimsRequested)
    return d.dtype, d.format, d.ndim, list(d.dims[:req])


def cudnnGetFilterSizeInBytes(filterDesc) -> int:
    return unwrap(filterDesc, "filterDesc", FilterDescriptor).as_tensor().nbytes


# -- convolutions -----------------------------------------------------------------------
def cudnnCreateConvolutionDescriptor() -> cudnnConvolutionStruct:
    return cudnnConvolutionStruct()


def cudnnDestroyConvolutionDescriptor(convDesc) -> None:
    _expect(convDesc, cudnnConvolutionStruct, "convDesc")._destroy()


def _mode(mode) -> ConvMode:
    try:
        return ConvMode(mode)
    except ValueError:
        raise BadParamError(f"unknown convolution mode {mode!r}; valid: CUDNN_CONVOLUTION (0), "
                            f"CUDNN_CROSS_CORRELATION (1)") from None


def cudnnSetConvolution2dDescriptor(convDesc, pad_h, pad_w, u, v, dilation_h, dilation_w, mode,
                                    computeType) -> None:
    _expect(convDesc, cudnnConvolutionStruct, "convDesc")._rebuild(geometry=dict(
        padding=(pad_h, pad_w), stride=(u, v), dilation=(dilation_h, dilation_w), mode=_mode(mode),
        compute_type=DataType.of(computeType), nd=2))


def cudnnSetConvolutionNdDescriptor(convDesc, arrayLength, padA, filterStrideA, dilationA, mode,
                                    computeType) -> None:
    nd = _nb_dims(arrayLength, 1, 3)
    _expect(convDesc, cudnnConvolutionStruct, "convDesc")._rebuild(geometry=dict(
        padding=_ints("padA", padA, nd), stride=_ints("filterStrideA", filterStrideA, nd),
        dilation=_ints("dilationA", dilationA, nd), mode=_mode(mode),
        compute_type=DataType.of(computeType), nd=nd))


def cudnnSetConvolutionGroupCount(convDesc, groupCount) -> None:
    _expect(convDesc, cudnnConvolutionStruct, "convDesc")._rebuild(
        groups=check_positive_int("groupCount", groupCount))


def cudnnSetConvolutionMathType(convDesc, mathType) -> None:
    try:
        math = MathType(mathType)
    except ValueError:
        raise BadParamError(f"unknown math type {mathType!r}; valid: "
                            + ", ".join(f"CUDNN_{m.name}_MATH ({m.value})" for m in MathType)) from None
    _expect(convDesc, cudnnConvolutionStruct, "convDesc")._rebuild(math=math)


def cudnnGetConvolutionGroupCount(convDesc) -> int:
    return _expect(convDesc, cudnnConvolutionStruct, "convDesc")._groups


def cudnnGetConvolutionMathType(convDesc) -> MathType:
    return _expect(convDesc, cudnnConvolutionStruct, "convDesc")._math


def _compute(conv: ConvolutionDescriptor) -> DataType:
    return conv.compute_type if conv.compute_type is not None else DataType.FLOAT


def cudnnGetConvolution2dDescriptor(convDesc):
    """-> (pad_h, pad_w, u, v, dilation_h, dilation_w, mode, computeType)."""
    c = unwrap(convDesc, "convDesc", ConvolutionDescriptor)
    if c.nd != 2:
        raise BadParamError(f"cudnnGetConvolution2dDescriptor needs a 2-d convolution, this one "
                            f"has {c.nd} spatial dims; use cudnnGetConvolutionNdDescriptor")
    return (*c.padding, *c.stride, *c.dilation, c.mode, _compute(c))


def cudnnGetConvolutionNdDescriptor(convDesc, arrayLengthRequested):
    """-> (arrayLength, padA, strideA, dilationA, mode, computeType)."""
    c = unwrap(convDesc, "convDesc", ConvolutionDescriptor)
    req = check_positive_int("arrayLengthRequested", arrayLengthRequested)
    return (c.nd, list(c.padding[:req]), list(c.stride[:req]), list(c.dilation[:req]), c.mode,
            _compute(c))


def cudnnGetConvolution2dForwardOutputDim(convDesc, inputTensorDesc, filterDesc):
    """-> (n, c, h, w) of the forward output."""
    x = unwrap(inputTensorDesc, "inputTensorDesc", TensorDescriptor)
    if x.ndim != 4:
        raise BadParamError(f"cudnnGetConvolution2dForwardOutputDim needs 4-d tensors, the input "
                            f"has dims {x.dims}; use cudnnGetConvolutionNdForwardOutputDim")
    return tuple(unwrap(convDesc, "convDesc", ConvolutionDescriptor).output_dims(
        x, unwrap(filterDesc, "filterDesc", FilterDescriptor)))


def cudnnGetConvolutionNdForwardOutputDim(convDesc, inputTensorDesc, filterDesc, nbDims):
    """-> the nbDims output dims (nbDims must be the input's rank)."""
    x = unwrap(inputTensorDesc, "inputTensorDesc", TensorDescriptor)
    nb = check_positive_int("nbDims", nbDims)
    if nb != x.ndim:
        raise BadParamError(f"nbDims={nb} must equal the input's rank {x.ndim} (dims {x.dims})")
    return tuple(unwrap(convDesc, "convDesc", ConvolutionDescriptor).output_dims(
        x, unwrap(filterDesc, "filterDesc", FilterDescriptor)))


def _expect(obj, cls, name):
    if not isinstance(obj, cls):
        raise BadParamError(f"{name} must come from cudnnCreate{cls.kind.capitalize()}Descriptor(), "
                            f"got {type(obj).__name__}")
    if not obj._alive:
        raise NotInitializedError(f"{name}: this {cls.kind} descriptor was destroyed")
    return obj
