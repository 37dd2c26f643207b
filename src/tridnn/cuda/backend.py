"""The Triton backend: torch tensors as arrays, kernels on PyTorch's current stream.

``TritonBackend("cuda:N")`` runs on a GPU; ``TritonBackend("cpu")`` runs the same
kernels on torch CPU tensors through Triton's interpreter (TRITON_INTERPRET=1 must
be set before triton is imported). Arrays are taken zero copy: torch tensors as is,
NumPy arrays on the CPU through ``torch.from_numpy``, and any other DLPack or
``__cuda_array_interface__`` array (CuPy, JAX) through ``torch.from_dlpack``.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
import torch

from .. import workspace as ws_layout
from ..errors import BadParamError, RuntimePrerequisiteMissingError
from ..types import DataType
from .memo import IdentityMemo

TORCH_DTYPE = {
    DataType.FLOAT: torch.float32,
    DataType.DOUBLE: torch.float64,
    DataType.HALF: torch.float16,
    DataType.BFLOAT16: torch.bfloat16,
}
_NUMPY_TO_TORCH = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                   np.dtype(np.float16): torch.float16, np.dtype(np.uint8): torch.uint8,
                   np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
                   DataType.BFLOAT16.numpy: torch.bfloat16}


def torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a DataType or a NumPy dtype."""
    if isinstance(dtype, DataType):
        return TORCH_DTYPE[dtype]
    return _NUMPY_TO_TORCH[np.dtype(dtype)]


def to_tensor(array, device: torch.device, name: str = "array") -> torch.Tensor:
    """``array`` as a torch tensor on ``device``, zero copy; BadParamError otherwise."""
    if isinstance(array, torch.Tensor):
        tensor = array
    elif isinstance(array, np.ndarray):
        if array.dtype == DataType.BFLOAT16.numpy:  # no bfloat16 in NumPy's DLPack
            tensor = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        else:
            try:
                with warnings.catch_warnings():  # read-only inputs are fine: kernels never write them
                    warnings.simplefilter("ignore", UserWarning)
                    tensor = torch.from_numpy(array)
            except (TypeError, ValueError) as exc:
                raise BadParamError(f"{name}: cannot take a NumPy array of dtype {array.dtype} ({exc})") from None
    elif hasattr(array, "__dlpack__") or hasattr(array, "__cuda_array_interface__"):
        try:
            tensor = torch.from_dlpack(array) if hasattr(array, "__dlpack__") else torch.as_tensor(array)
        except (TypeError, RuntimeError, BufferError, ValueError) as exc:
            raise BadParamError(f"{name}: cannot take a {type(array).__name__} zero copy through "
                                f"DLPack ({exc}); pass a torch tensor") from None
    else:
        raise BadParamError(f"{name} must be a torch tensor or a DLPack / __cuda_array_interface__ "
                            f"array, got {type(array).__name__}")
    if tensor.device != device:
        raise BadParamError(f"{name} is on device {tensor.device}, but the handle's device is {device}; "
                            f"move it with .to({str(device)!r}) or use a handle on {tensor.device}")
    return tensor


def as_view(array, desc, name: str, device: torch.device, writable: bool = False) -> torch.Tensor:
    """The logical strided torch view of ``array`` described by ``desc``, as arrays.as_view."""
    if (type(array) is torch.Tensor and array.dtype == TORCH_DTYPE[desc.dtype] and array.device == device
            and array.shape == desc.dims and array.stride() == desc.strides):
        return array  # the common case, checked in one line (the general checks follow)
    if writable and isinstance(array, np.ndarray) and not array.flags.writeable:
        raise BadParamError(f"{name} is an output but the array is read-only")
    tensor = to_tensor(array, device, name)
    want = TORCH_DTYPE[desc.dtype]
    if tensor.dtype != want:
        raise BadParamError(f"{name} has dtype {tensor.dtype}, its descriptor says {desc.dtype.name} ({want})")
    dims, strides = tuple(desc.dims), tuple(desc.strides)
    shape, got = tuple(tensor.shape), tuple(tensor.stride())
    if shape == dims and all(d <= 1 or a == b for d, a, b in zip(dims, got, strides)):
        return tensor
    physical = tuple(desc.physical_dims) if hasattr(desc, "physical_dims") else None
    if physical is not None and shape == physical and tensor.is_contiguous() and desc.span == desc.size:
        return tensor.as_strided(dims, strides)
    raise BadParamError(f"{name} does not match its descriptor: array shape {shape} strides {got}, "
                        f"descriptor dims {dims} strides {strides}"
                        + (f" (or a C-contiguous buffer of shape {physical})" if physical else ""))



_carve_plans = IdentityMemo()


def _carve_plan(buffers, base: int) -> tuple:
    """(bytes needed, (name, start, end, torch dtype, shape) per buffer) of a buffer list in
    a workspace starting at address ``base`` (only base % ALIGN matters): each view's
    absolute address aligned, as workspace.carve does for NumPy."""
    parts, offset = [], 0
    for buf in buffers:
        start = ws_layout._align(base + offset) - base
        parts.append((buf.name, start, start + buf.nbytes, torch_dtype(buf.dtype), tuple(buf.shape)))
        offset = start + buf.nbytes
    return ws_layout.layout_size(buffers), tuple(parts)

class TritonBackend:
    name = "triton"

    def __init__(self, device: str = "cuda"):
        self.device = torch.device(device)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimePrerequisiteMissingError(
                    f"device {device!r} asked for, but torch sees no CUDA GPU; use "
                    f"Handle(device='cpu', backend='triton') to run the kernels in Triton's interpreter")
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
            if self.device.index >= torch.cuda.device_count():
                raise BadParamError(f"device {device!r} does not exist; this machine has "
                                    f"{torch.cuda.device_count()} GPU(s)")
            self.device_name = torch.cuda.get_device_name(self.device)
            self.l2_bytes = getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 64 << 20)
        else:
            import os
            if os.environ.get("TRITON_INTERPRET") != "1":
                raise RuntimePrerequisiteMissingError(
                    "the triton backend on the CPU runs through Triton's interpreter: set "
                    "TRITON_INTERPRET=1 in the environment before importing triton")
            from . import layer_utils  # noqa: F401  (makes the interpreter loop over runtime bounds)
            self.device_name = "cpu (triton interpreter)"
            self.l2_bytes = 0
        self.interpreted = self.device.type != "cuda"
        self._flush = None

    # -- arrays ------------------------------------------------------------------
    def view(self, array, desc, name: str, writable: bool = False) -> torch.Tensor:
        return as_view(array, desc, name, self.device, writable)

    def view_meta(self, desc):
        """What ``quick_view`` checks for ``desc``: (dtype, dims, the accepted stride tuples,
        byte extent). The strides start as the descriptor's; ``learn_view`` adds others."""
        extent = 0
        if desc.size:
            extent = 1 + sum((d - 1) * s for d, s in zip(desc.dims, desc.strides))
        dtype = TORCH_DTYPE[desc.dtype]
        return dtype, torch.Size(desc.dims), {tuple(desc.strides)}, extent * dtype.itemsize

    def quick_view(self, array, meta):
        """``array`` when it is a torch tensor on this device matching ``meta`` exactly
        (dtype, shape, one of its stride tuples); None to take the general check (``view``)."""
        if (type(array) is torch.Tensor and array.dtype is meta[0] and array.shape == meta[1]
                and array.stride() in meta[2] and array.device == self.device):
            return array
        return None

    def quick_check(self, metas, out_index):
        """A function of (x, w, y) that answers the common repeated call in one go: when all
        three are torch tensors on this device matching their ``view_meta`` exactly and the
        output overlaps neither input, their addresses; otherwise None (the general checks
        then run and raise the errors). Straight-line code: each test is a ~0.1-0.4 us
        attribute read on a torch tensor, and a loop over the operands cost as much again."""
        (dtype_x, dims_x, strides_x, bytes_x), (dtype_w, dims_w, strides_w, bytes_w), \
            (dtype_y, dims_y, strides_y, bytes_y) = metas
        extents = (bytes_x, bytes_w, bytes_y)
        out_bytes = extents[out_index]
        first, second = (i for i in range(3) if i != out_index)
        first_bytes, second_bytes = extents[first], extents[second]
        Tensor, device = torch.Tensor, self.device

        def check(x, w, y):
            if (type(x) is not Tensor or type(w) is not Tensor or type(y) is not Tensor
                    or x.dtype is not dtype_x or w.dtype is not dtype_w or y.dtype is not dtype_y
                    or x.shape != dims_x or w.shape != dims_w or y.shape != dims_y
                    or x.stride() not in strides_x or w.stride() not in strides_w or y.stride() not in strides_y
                    or x.device != device or w.device != device or y.device != device):
                return None
            addresses = (x.data_ptr(), w.data_ptr(), y.data_ptr())
            if out_bytes:
                out, a, b = addresses[out_index], addresses[first], addresses[second]
                if ((first_bytes and a < out + out_bytes and out < a + first_bytes)
                        or (second_bytes and b < out + out_bytes and out < b + second_bytes)):
                    return None  # (the general check names the overlap)
            return addresses
        return check

    def learn_view(self, meta, array, view) -> None:
        """After ``view`` accepted a torch tensor as it is (``view is array``), accept its
        strides in ``quick_view`` too: they differ from the descriptor's only where a
        dimension is 1 (a [K, 1, 3, 3] channels-last filter), where any stride means the
        same memory. At most 8 stride tuples a descriptor."""
        if (view is array and type(array) is torch.Tensor and array.dtype is meta[0] and array.shape == meta[1]
                and array.device == self.device and len(meta[2]) < 8):
            meta[2].add(array.stride())

    def overlaps(self, a, meta_a, b, meta_b) -> bool:
        """shares_memory for two views whose byte extents are precomputed (view_meta)."""
        if not meta_a[3] or not meta_b[3]:
            return False
        a0, b0 = a.data_ptr(), b.data_ptr()
        return a0 < b0 + meta_b[3] and b0 < a0 + meta_a[3]

    def empty(self, desc) -> torch.Tensor:
        return torch.empty_strided(desc.dims, desc.strides, dtype=TORCH_DTYPE[desc.dtype], device=self.device)

    def random(self, desc, rng: np.random.Generator) -> torch.Tensor:
        out = self.empty(desc)
        gen = torch.Generator(device=self.device).manual_seed(int(rng.integers(1 << 62)))
        out.copy_(torch.randn(desc.dims, generator=gen, device=self.device, dtype=torch.float32))
        return out

    @staticmethod
    def span(t) -> tuple:
        """(first byte, one past the last byte) a view can touch; (0, 0) when empty."""
        if t.numel() == 0:
            return (0, 0)
        lo = t.data_ptr()
        extent = 1
        for d, s in zip(t.shape, t.stride()):
            extent += (d - 1) * s
        return lo, lo + extent * t.element_size()

    @staticmethod
    def shares_memory(a, b) -> bool:
        """Whether two views' byte ranges intersect (a cheap, conservative overlap test)."""
        (a0, a1), (b0, b1) = TritonBackend.span(a), TritonBackend.span(b)
        return a0 < b1 and b0 < a1

    # -- workspace ----------------------------------------------------------------
    def workspace_extent(self, ws) -> tuple:
        """(bytes, address) of a workspace, with ``workspace_bytes``' checks, without making
        its byte view in the common case (a contiguous torch tensor on this device)."""
        if type(ws) is torch.Tensor and ws.device == self.device and ws.is_contiguous():
            return ws.numel() * ws.element_size(), ws.data_ptr()
        ws_bytes = self.workspace_bytes(ws)
        return ws_bytes.numel(), ws_bytes.data_ptr()

    def workspace_bytes(self, ws) -> torch.Tensor:
        if ws is None:
            return torch.empty(0, dtype=torch.uint8, device=self.device)
        tensor = to_tensor(ws, self.device, "workspace")
        if not tensor.is_contiguous():
            raise BadParamError("workspace must be a contiguous array")
        return tensor.reshape(-1).view(torch.uint8)

    def allocate_workspace(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def carve(self, ws_bytes: torch.Tensor, buffers) -> dict:
        """Named views into the workspace, laid out exactly as workspace.layout_size counts
        (the offsets computed once per buffer list and base alignment: _carve_plan)."""
        if not buffers:
            return {}
        base = ws_bytes.data_ptr()
        need, parts = _carve_plans.get((buffers,), base % ws_layout.ALIGN, lambda: _carve_plan(buffers, base))
        if ws_bytes.numel() < need:
            raise BadParamError(f"workspace of {ws_bytes.numel()} bytes is smaller than the {need} bytes required")
        return {name: ws_bytes[start:end].view(dtype).view(shape) for name, start, end, dtype, shape in parts}

    # -- convolution pieces outside the algorithm table ------------------------------
    def conv_backward_bias(self, dy, db, alpha: float, beta: float) -> None:
        """db = alpha * (dy summed over all axes but channels) + beta * db (conv_bwd_bias.py)."""
        if self.shares_memory(dy, db):
            raise BadParamError("output db overlaps input dy; pass separate buffers")
        from .conv_bwd_bias import backward_bias
        backward_bias(dy, db, alpha, beta)

    @staticmethod
    def flip_spatial(array, nd: int):
        """A copy with the spatial axes reversed (torch has no negative strides). The Triton
        convolutions flip taps inside their kernels instead (``handles_flip``)."""
        return torch.flip(array, dims=tuple(range(2, 2 + nd)))

    # -- time -----------------------------------------------------------------------
    def synchronize(self) -> None:
        if not self.interpreted:
            torch.cuda.synchronize(self.device)

    def now(self) -> float:
        return time.perf_counter()

    def time(self, fn, budget_s: float, min_runs: int = 3, max_runs: int = 20) -> list[float]:
        """Seconds per call of ``fn``: a warm-up call (compiles and autotunes), then timed calls
        with CUDA events, each after a write over a buffer twice the L2 so every run starts
        with a cold cache (as a layer's inputs usually are), until ``budget_s`` is spent."""
        fn()
        self.synchronize()
        if self.interpreted:
            out = []
            while len(out) < min_runs:
                start = time.perf_counter()
                fn()
                out.append(time.perf_counter() - start)
            return out
        if self._flush is None:
            self._flush = torch.empty(2 * max(self.l2_bytes, 1 << 20), dtype=torch.uint8, device=self.device)
        stream = torch.cuda.current_stream(self.device)
        times, spent = [], 0.0
        while len(times) < min_runs or (spent < budget_s and len(times) < max_runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._flush.zero_()
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            elapsed = start.elapsed_time(end) * 1e-3
            times.append(elapsed)
            spent += elapsed + 20e-6
        return times
