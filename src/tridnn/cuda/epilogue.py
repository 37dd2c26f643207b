"""The fused convolution epilogue on the GPU: alpha/beta, residual, bias, activation.

Every Triton convolution ends its tile with ``store_tile``:

    v = alpha * acc + beta * y            (y not read when beta == 0)
    v = v + alpha2 * z                    (z: a residual with y's dims, any strides)
    v = v + bias[k]                       (bias: K values, one per output channel)
    y = act(v)                            (rounded once to y's dtype)

which is ``convolution_bias_activation_forward`` with no extra pass over y.

The API hands algorithms an ``epilogue`` object. The NumPy algorithms call it as
``epilogue(acc, index)``; the Triton algorithms read its declarative form instead,
``epilogue.spec`` (an ``EpilogueSpec``), and fuse it into the kernel. An epilogue
without a ``spec`` cannot be fused on the GPU and raises NotSupportedError.
"""
from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from ..descriptors.activation import ActivationMode
from ..errors import BadParamError, NotSupportedError
from .backend import TritonBackend

NO_ACTIVATION = -1
NAN_KEEPING = 200  # ACT = 200 + mode: RELU / CLIPPED_RELU that keep a NaN (PROPAGATE_NAN)


@dataclass(frozen=True)
class EpilogueSpec:
    """What the kernel fuses after the convolution.

    activation: an ActivationMode (or None / IDENTITY for none); coef: the clip ceiling
    (CLIPPED_RELU), alpha (ELU), slope (LEAKY_RELU) or beta (SOFTPLUS); swish_beta for
    SWISH. bias: a tensor of K values (any shape with K elements, e.g. (1, K, 1, 1)),
    or None. z: a tensor with y's logical dims (any strides), or None; alpha2 scales it.
    propagate_nan: the activation descriptor's NaN option; it changes RELU and
    CLIPPED_RELU only (the other activations give NaN for NaN anyway).
    """
    activation: object = None
    coef: float = 0.0
    swish_beta: float = 1.0
    bias: object = None
    z: object = None
    alpha2: float = 1.0
    propagate_nan: bool = False

    @property
    def act_code(self) -> int:
        """The kernels' ACT: the mode's number, NO_ACTIVATION, or NAN_KEEPING + the mode
        for RELU and CLIPPED_RELU under propagate_nan."""
        if self.activation is None:
            return NO_ACTIVATION
        mode = ActivationMode(self.activation)
        if mode == ActivationMode.IDENTITY:
            return NO_ACTIVATION
        if self.propagate_nan and mode in (ActivationMode.RELU, ActivationMode.CLIPPED_RELU):
            return NAN_KEEPING + int(mode)
        return int(mode)


def spec_of(epilogue) -> EpilogueSpec | None:
    """The declarative spec of an API epilogue; None when there is no epilogue."""
    if epilogue is None:
        return None
    if isinstance(epilogue, EpilogueSpec):
        return epilogue
    spec = getattr(epilogue, "spec", None)
    if spec is None:
        raise NotSupportedError("the Triton convolutions fuse an epilogue only from its declarative "
                                "form (an object with .spec, a tridnn.cuda.epilogue.EpilogueSpec); "
                                f"got {type(epilogue).__name__} without one")
    if not isinstance(spec, EpilogueSpec):
        spec = EpilogueSpec(**{k: getattr(spec, k) for k in EpilogueSpec.__dataclass_fields__
                               if hasattr(spec, k)})
    return spec


def launch_args(spec: EpilogueSpec | None, y, nd: int):
    """(bias, bias_stride, z, z strides (n, k, d, h, w), alpha2, coef, swish_beta, ACT,
    HAS_BIAS, HAS_Z) for the kernels; dummies point at y when a part is absent."""
    if spec is None:
        return (y, 0, y, (0, 0, 0, 0, 0), 0.0, 0.0, 1.0, NO_ACTIVATION, False, False)
    bias, z = spec.bias, spec.z
    # as the API checks NumPy arrays: z may be y itself (each tile reads its z before
    # writing y), any other overlap with y would read values already overwritten
    if bias is not None and TritonBackend.shares_memory(bias, y):
        raise BadParamError("output y overlaps input bias; pass separate buffers")
    if z is not None and TritonBackend.shares_memory(z, y):
        in_place = (z.data_ptr() == y.data_ptr() and tuple(z.stride()) == tuple(y.stride())
                    and tuple(z.shape) == tuple(y.shape))
        if not in_place:
            raise BadParamError("z partially overlaps y; pass z equal to y (in place) or a separate buffer")
    if bias is not None:
        flat = bias.reshape(-1)
        if flat.numel() != y.shape[1]:
            raise NotSupportedError(f"bias has {flat.numel()} values; the output has {y.shape[1]} channels")
        bias_arg, bias_stride = flat, flat.stride(0)
    else:
        bias_arg, bias_stride = y, 0
    if z is not None:
        if tuple(z.shape) != tuple(y.shape):
            raise NotSupportedError(f"residual z has shape {tuple(z.shape)}; y has {tuple(y.shape)}")
        from .geometry import strides5
        z_arg, z_strides = z, strides5(z, nd)
    else:
        z_arg, z_strides = y, (0, 0, 0, 0, 0)
    return (bias_arg, bias_stride, z_arg, z_strides, float(spec.alpha2), float(spec.coef),
            float(spec.swish_beta), spec.act_code, bias is not None, z is not None)


@triton.jit
def _sigmoid(v):
    return 1.0 / (1.0 + tl.exp(-v))


@triton.jit
def activate(v, ACT: tl.constexpr, coef, swish_beta):
    """act(v) in float32 for the ActivationMode numbered ACT (-1: none; 201 / 203: RELU /
    CLIPPED_RELU keeping a NaN, EpilogueSpec.act_code)."""
    if ACT == 0:      # SIGMOID
        v = _sigmoid(v)
    elif ACT == 1:    # RELU
        v = tl.where(v > 0, v, 0.0)
    elif ACT == 2:    # TANH = 2 sigmoid(2v) - 1
        v = 2.0 * _sigmoid(2.0 * v) - 1.0
    elif ACT == 3:    # CLIPPED_RELU
        v = tl.minimum(tl.where(v > 0, v, 0.0), coef)
    elif ACT == 201:  # RELU, PROPAGATE_NAN
        v = tl.where((v > 0) | (v != v), v, 0.0)
    elif ACT == 203:  # CLIPPED_RELU, PROPAGATE_NAN
        v = tl.where(v != v, v, tl.minimum(tl.where(v > 0, v, 0.0), coef))
    elif ACT == 4:    # ELU
        # (a where, not tl.minimum(v, 0): PTX min gives 0 for a NaN, so ELU(NaN) was 0)
        v = tl.where(v > 0, v, coef * (tl.exp(tl.where(v > 0, 0.0, v)) - 1.0))
    elif ACT == 6:    # SWISH
        v = v * _sigmoid(swish_beta * v)
    elif ACT == 100:  # LEAKY_RELU
        v = tl.where(v > 0, v, coef * v)
    elif ACT == 101:  # GELU (erf)
        v = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    elif ACT == 102:  # GELU_TANH
        u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
        v = 0.5 * v * (1.0 + (2.0 * _sigmoid(2.0 * u) - 1.0))
    elif ACT == 103:  # SOFTPLUS: log(1 + exp(coef v)) / coef, stable
        u = coef * v
        v = (tl.maximum(u, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(u)))) / coef
    elif ACT == 104:  # HARD_SWISH
        v = v * tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0) / 6.0
    return v


@triton.jit
def store_tile(acc, row_y, row_z, col, mask_row, mask_col,
               y_ptr, ys_k, z_ptr, zs_k, bias_ptr, bias_stride,
               alpha, beta, alpha2, coef, swish_beta,
               ACT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_Z: tl.constexpr,
               BETA_ZERO: tl.constexpr):
    """Blend, fuse and store a [rows, cols] float32 tile; rows are output pixels (their
    offsets row_y in y and row_z in z), cols output channels. The channel offsets take
    row_y's integer type (int64 on a kernel's INT64 path: col * ys_k can pass 2^31 too)."""
    col = col.to(row_y.dtype)
    mask = mask_row[:, None] & mask_col[None, :]
    y_ptrs = y_ptr + row_y[:, None] + col[None, :] * ys_k
    v = acc * alpha
    if not BETA_ZERO:
        v += beta * tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + row_z[:, None] + col[None, :] * zs_k, mask=mask, other=0.0)
        v += alpha2 * z.to(tl.float32)
    if HAS_BIAS:
        b = tl.load(bias_ptr + col * bias_stride, mask=mask_col, other=0.0)
        v += b.to(tl.float32)[None, :]
    if ACT >= 0:
        v = activate(v, ACT, coef, swish_beta)
    tl.store(y_ptrs, v.to(y_ptr.dtype.element_ty), mask=mask)
