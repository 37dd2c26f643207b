"""Pieces shared by the Triton layer kernels: tensor geometry, dtypes and the alpha/beta store.

The launchers take torch tensors as logical strided views (dims N, C, *spatial in
logical order, any strides). Two geometries cover every layer:

- pointwise ops see the tensors as at most four coalesced dims, ordered by the
  output's memory order, with one stride per dim and tensor; densely packed tensors
  of one layout collapse to a single flat dim, the fast path;
- layers that reduce or slide along channels or space (pooling, softmax, the
  normalizations, LRN) see an (N, C, S) view where S merges the spatial dims, with
  each tensor's own three strides, so NCHW, NHWC and strided views share a kernel.

Offsets are int32 unless a tensor reaches 2**31 elements, then int64 (constexpr BIG).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..errors import BadParamError

INT32_LIMIT = 2**31 - 1
MAX_POINTWISE_DIMS = 4


def _let_interpreter_loop_over_runtime_bounds() -> None:
    """Triton 3.6's interpreter holds a scalar argument as a one-element array and turns
    it into a Python int with int(array), which NumPy >= 2.4 refuses; so
    ``for i in range(0, n, BLOCK)`` over a runtime ``n`` fails there (compiled kernels
    are unaffected). Wrap its tensor patch so __index__ reads the one element."""
    from triton.runtime import interpreter
    original = interpreter._patch_lang_tensor
    if getattr(original, "_tridnn_scalar_index", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._tridnn_scalar_index = True
    interpreter._patch_lang_tensor = patched


def _let_interpreter_dot_bfloat16() -> None:
    """Triton 3.6's interpreter holds bfloat16 as its uint16 bit patterns and its tl.dot
    multiplies those integers (a 3x3 convolution of unit normals came out ~1e10). Widen
    bfloat16 operands to float32 first, which is exact (the upper 16 bits of a float32)."""
    import numpy as np
    from triton.runtime import interpreter
    builder = interpreter.InterpreterBuilder
    original = builder.create_dot
    if getattr(original, "_tridnn_bfloat16", False):
        return

    def widened(handle):
        if handle.dtype.scalar != tl.bfloat16:
            return handle
        data = (handle.data.astype(np.uint32) << 16).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widened(a), widened(b), d, input_precision, max_num_imprecise_acc)

    create_dot._tridnn_bfloat16 = True
    builder.create_dot = create_dot


def bfloat16_bits(f32):
    """float32 array -> bfloat16 bit patterns (uint16), rounded to nearest even as the GPU's
    cvt.rn.bf16.f32 does: overflow goes to infinity, a NaN stays a (quiet) NaN."""
    import numpy as np
    f32 = np.ascontiguousarray(f32, dtype=np.float32)
    bits = f32.view(np.uint32)
    with np.errstate(over="ignore"):
        rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), ((bits >> 16) | np.uint32(0x0040)).astype(np.uint16), rounded)


def _let_interpreter_round_bfloat16() -> None:
    """Triton 3.6's interpreter casts float32 -> bfloat16 by dropping the low 16 bits (round
    toward zero), where a GPU rounds to nearest even, so every bfloat16 store in CI was up to
    one unit in the last place off what the GPU writes (found in session 30 by an exact
    comparison: 131.5 stored as 131, the GPU's 132). And float64 or integers to bfloat16,
    or bfloat16 to integers, took values for uint16 bit patterns or the reverse (3.0 became
    2.8e-40; float16 already goes through float32 in Triton's front end). Every cast to or
    from bfloat16 goes through float32 here: widening is exact, narrowing rounds to nearest
    even (bfloat16_bits). A float64 source is rounded to float32 first (a double rounding
    the GPU's direct cvt does not make; it matters only where a float64 lies within
    float32's rounding of a bfloat16 tie)."""
    import numpy as np
    from triton.runtime import interpreter
    builder = interpreter.InterpreterBuilder
    original = builder.cast_impl
    if getattr(original, "_tridnn_bfloat16", False):
        return

    def cast_impl(self, src, dst_type):
        s, d = src.dtype.scalar, dst_type.scalar
        if (s == tl.bfloat16) == (d == tl.bfloat16):
            return original(self, src, dst_type)
        if s == tl.bfloat16:  # widen exactly, then NumPy's cast to the destination
            f32 = (src.data.astype(np.uint32) << 16).view(np.float32)
            with np.errstate(over="ignore", invalid="ignore"):  # (overflow gives inf, as on the GPU)
                return interpreter.TensorHandle(f32.astype(interpreter._get_np_dtype(d)), d)
        return interpreter.TensorHandle(bfloat16_bits(src.data.astype(np.float32)), d)

    cast_impl._tridnn_bfloat16 = True
    builder.cast_impl = cast_impl  # (the create_* casts are lambdas calling self.cast_impl: they follow)


if os.environ.get("TRITON_INTERPRET") == "1":
    _let_interpreter_loop_over_runtime_bounds()
    _let_interpreter_dot_bfloat16()
    _let_interpreter_round_bfloat16()


# -- dtypes and scalars ---------------------------------------------------------------
def compute_dtype(*tensors):
    """The dtype kernels compute in: float64 for float64 tensors, float32 otherwise
    (half types are upcast, so statistics and sums are float32)."""
    return tl.float64 if any(t.dtype == torch.float64 for t in tensors) else tl.float32


def check_dtypes(**tensors) -> None:
    """All tensors share one floating dtype; the message names them otherwise."""
    named = [(k, t) for k, t in tensors.items() if t is not None]
    allowed = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    for name, t in named:
        if t.dtype not in allowed:
            raise BadParamError(f"{name} has dtype {t.dtype}; valid: float32, float64, float16, bfloat16")
    first_name, first = named[0]
    for name, t in named[1:]:
        if t.dtype != first.dtype:
            raise BadParamError(f"dtype mismatch: {first_name} is {first.dtype}, {name} is {t.dtype}")


def check_same_shape(**tensors) -> None:
    named = [(k, t) for k, t in tensors.items() if t is not None]
    first_name, first = named[0]
    for name, t in named[1:]:
        if tuple(t.shape) != tuple(first.shape):
            raise BadParamError(f"shape mismatch: {first_name} has dims {tuple(first.shape)}, "
                                f"{name} has {tuple(t.shape)}")


def blend_args(alpha, beta):
    """(alpha, beta, HAS_BETA): beta == 0 means the output is never read."""
    alpha, beta = float(alpha), float(beta)
    return alpha, beta, beta != 0.0


def span(t: torch.Tensor) -> int:
    """Elements of memory a view reaches: its largest offset + 1."""
    if t.numel() == 0:
        return 0
    return 1 + sum((d - 1) * abs(s) for d, s in zip(t.shape, t.stride()))


def needs_int64(*tensors) -> bool:
    return any(span(t) > INT32_LIMIT or t.numel() > INT32_LIMIT for t in tensors if t is not None)


# -- pointwise geometry ----------------------------------------------------------------
def coalesce(shape, strides_list):
    """Merge dims that are contiguous in every tensor, ordered by the first tensor's
    memory order (outermost first). Size-1 dims are dropped. Returns (dims, strides_list)."""
    axes = [a for a, d in enumerate(shape) if d != 1]
    axes.sort(key=lambda a: -abs(strides_list[0][a]))
    dims = [shape[a] for a in axes]
    strides = [[s[a] for a in axes] for s in strides_list]
    merged_dims, merged = [], [[] for _ in strides_list]
    for i, d in enumerate(dims):
        if merged_dims and all(m[-1] == st[i] * d for m, st in zip(merged, strides)):
            merged_dims[-1] *= d
            for m, st in zip(merged, strides):
                m[-1] = st[i]
            continue
        merged_dims.append(d)
        for m, st in zip(merged, strides):
            m.append(st[i])
    if not merged_dims:
        merged_dims = [1]
        merged = [[1] for _ in strides_list]
    return merged_dims, merged


def single_launch_geometry(*tensors):
    """(dims4, strides4 per tensor, flat) of same-shape tensors that one pointwise launch
    covers (at most four coalesced dims), else None; ``pointwise_chunks`` explains."""
    dims, strides = coalesce(tuple(tensors[0].shape), [t.stride() for t in tensors])
    if len(dims) > MAX_POINTWISE_DIMS:
        return None
    pad = MAX_POINTWISE_DIMS - len(dims)
    flat = len(dims) == 1 and all(s[-1] == 1 for s in strides)
    return [1] * pad + dims, [[0] * pad + s for s in strides], flat


def pointwise_chunks(*tensors):
    """Split same-shape tensors into launches of at most four coalesced dims.

    Yields (views, dims4, strides4 per tensor, flat) where ``flat`` is True when every
    tensor is one dense run of memory in the same order (offsets == linear index).
    More than four non-mergeable dims (rare strided views) loop over the outer ones."""
    geometry = single_launch_geometry(*tensors)
    if geometry is not None:
        yield (tensors, *geometry)
        return
    shape = tuple(tensors[0].shape)
    dims, strides = coalesce(shape, [t.stride() for t in tensors])
    outer = len(dims) - MAX_POINTWISE_DIMS
    outer_dims, inner_dims = dims[:outer], dims[outer:]
    index = [0] * outer
    total = 1
    for d in outer_dims:
        total *= d
    for _ in range(total):
        views = []
        for t, st in zip(tensors, strides):
            offset = sum(i * s for i, s in zip(index, st[:outer]))
            views.append(t.as_strided(inner_dims, st[outer:], t.storage_offset() + offset))
        yield views, inner_dims, [s[outer:] for s in strides], False
        for k in reversed(range(outer)):
            index[k] += 1
            if index[k] < outer_dims[k]:
                break
            index[k] = 0


@triton.jit
def unravel4(i, D1, D2, D3):
    """Split a linear index over dims (D0, D1, D2, D3) into its four coordinates."""
    i3 = i % D3
    i = i // D3
    i2 = i % D2
    i = i // D2
    i1 = i % D1
    i0 = i // D1
    return i0, i1, i2, i3


@triton.jit
def first_index(BLOCK: tl.constexpr, BIG: tl.constexpr):
    """This program's first linear index, int64 when tensors pass 2**31 elements."""
    pid = tl.program_id(0)
    if BIG:
        pid = pid.to(tl.int64)
    return pid * BLOCK


@triton.jit
def blend_store(ptr, offsets, mask, value, alpha, beta, HAS_BETA: tl.constexpr):
    """ptr[offsets] = alpha * value + beta * ptr[offsets]; with HAS_BETA off, never reads."""
    out = value * alpha
    if HAS_BETA:
        old = tl.load(ptr + offsets, mask=mask, other=0.0).to(value.dtype)
        out += old * beta
    tl.store(ptr + offsets, out.to(ptr.dtype.element_ty), mask=mask)


# -- (N, C, S) geometry ---------------------------------------------------------------
def ncs_strides(t: torch.Tensor):
    """(sN, sC, sS) when the spatial dims of ``t`` merge into one strided dim, else None."""
    shape, strides = tuple(t.shape), t.stride()
    s_stride = 1
    dims = [(d, s) for d, s in zip(shape[2:], strides[2:]) if d != 1]
    if dims:
        s_stride = dims[-1][1]
        for (d_outer, s_outer), (d_inner, s_inner) in zip(dims, dims[1:]):
            if s_outer != s_inner * d_inner:
                return None
    c_stride = strides[1] if len(shape) > 1 else 1
    return strides[0], c_stride, s_stride


def channels_last(t: torch.Tensor) -> bool:
    """True when channels are the innermost (smallest-stride) axis of an N-C-spatial tensor."""
    if t.dim() < 3:
        return False
    s = ncs_strides(t)
    if s is None:
        return False
    spatial = 1
    for d in t.shape[2:]:
        spatial *= d
    return s[1] < s[2] or spatial == 1


def ncs_dims(t: torch.Tensor):
    """(N, C, S): batch, channels and the product of the spatial dims."""
    n = t.shape[0]
    c = t.shape[1] if t.dim() > 1 else 1
    s = 1
    for d in t.shape[2:]:
        s *= d
    return n, c, s


class NCSStaging:
    """Gives each tensor an (N, C, S)-mergeable form.

    A view whose spatial dims do not merge (rare: e.g. every other row of a larger
    array) is staged through a packed copy in the layout of the first tensor; outputs
    staged that way are copied back by ``finish``. Blending stays in the kernels, so a
    staged output is copied in first when the kernel reads it (beta != 0)."""

    def __init__(self):
        self._writeback = []

    def input(self, t, like=None, force: bool = False):
        """``t`` itself when mergeable, else a packed copy (``force``: a contiguous copy
        unless ``t`` is already contiguous)."""
        if t is None or (not force and ncs_strides(t) is not None) or (force and t.is_contiguous()):
            return t
        return _packed_copy(t, t if force or like is None else like)

    def output(self, t, like=None, read: bool = False, force: bool = False):
        """Like ``input`` for an output; ``read``: the kernel blends with its old values."""
        if t is None or (not force and ncs_strides(t) is not None) or (force and t.is_contiguous()):
            return t
        like = t if force or like is None else like
        tmp = _packed_copy(t, like) if read else _packed_empty(t, like)
        self._writeback.append((t, tmp))
        return tmp

    def finish(self):
        for dst, tmp in self._writeback:
            dst.copy_(tmp)
        self._writeback.clear()


def _packed_empty(t, like):
    if like is not t and ncs_strides(like) is not None and channels_last(like) and t.dim() >= 3:
        perm = (0, *range(2, t.dim()), 1)
        base = torch.empty([t.shape[a] for a in perm], dtype=t.dtype, device=t.device)
        inverse = [perm.index(a) for a in range(t.dim())]
        return base.permute(inverse)
    return torch.empty(t.shape, dtype=t.dtype, device=t.device)


def _packed_copy(t, like):
    out = _packed_empty(t, like)
    out.copy_(t)
    return out
