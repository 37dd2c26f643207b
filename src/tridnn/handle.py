"""Handle: the library context (cudnnHandle_t).

A handle fixes the device and backend, default math type, whether only deterministic
algorithms may run, the workspace limit for ``find`` and the functional API, and the
find cache. One handle may be shared by many threads: each thread gets its own
workspace arena (so concurrent calls never share temporaries), the find cache is
locked, and everything else is fixed at construction. One handle per thread is still
the cheapest pattern (an arena per handle and thread is kept until destroy()).
"""
from __future__ import annotations

import threading

from .algorithms.find_cache import FindCache, default_path
from .errors import (AllocFailedError, BadParamError, NotInitializedError,
                     RuntimePrerequisiteMissingError, TridnnError)
from .types import MathType

DEFAULT_WORKSPACE_LIMIT = 1 << 30  # 1 GiB, like frameworks' default cuDNN workspace cap
_UNSET = object()


class Handle:
    """``Handle(device="cpu")`` runs NumPy; ``Handle(device="cuda")`` runs Triton kernels on a
    GPU; ``Handle(device="cpu", backend="triton")`` runs the same Triton kernels on the CPU
    through Triton's interpreter (set TRITON_INTERPRET=1 before importing triton)."""

    def __init__(self, device: str = "cpu", backend: str | None = None, *,
                 workspace_limit: int = DEFAULT_WORKSPACE_LIMIT, math_type=MathType.DEFAULT,
                 deterministic: bool = False, find_cache=_UNSET, find_time_budget_s: float = 2.0):
        device = str(device)
        if device != "cpu" and not device.startswith("cuda"):
            raise BadParamError(f"unknown device {device!r}; valid: 'cpu', 'cuda', 'cuda:N'")
        if backend is None:
            backend = "numpy" if device == "cpu" else "triton"
        if backend not in ("numpy", "triton"):
            raise BadParamError(f"unknown backend {backend!r}; valid: 'numpy', 'triton'")
        if backend == "numpy" and device != "cpu":
            raise BadParamError(f"the numpy backend runs on the CPU only, not on {device!r}")
        if isinstance(workspace_limit, bool) or not isinstance(workspace_limit, int) or workspace_limit < 0:
            raise BadParamError(f"workspace_limit must be a byte count >= 0, got {workspace_limit!r}")
        try:
            self.math_type = MathType(math_type)
        except ValueError:
            raise BadParamError(f"unknown math type {math_type!r}; valid: "
                                + ", ".join(m.name for m in MathType)) from None
        self.device = device
        self.backend_name = backend
        self.workspace_limit = workspace_limit
        self.deterministic = bool(deterministic)
        self.find_time_budget_s = float(find_time_budget_s)
        self.backend = _make_backend(device, backend)
        path = default_path() if find_cache is _UNSET else find_cache
        self.find_cache = FindCache(None if path in (None, False) else path)
        self._arenas = threading.local()  # each thread's own workspace arena
        self._owner = threading.get_ident()
        self.conv_calls = None  # validated convolution calls (api/conv_fast_path.py)
        self._alive = True

    # -- lifetime -----------------------------------------------------------------
    def destroy(self) -> None:
        """cudnnDestroy: frees the arena; using the handle afterwards raises NotInitializedError."""
        self._arenas = threading.local()  # drops every thread's arena
        self.conv_calls = None
        self._alive = False

    def check(self) -> "Handle":
        if not self._alive:
            raise NotInitializedError("this handle was destroyed; create a new Handle()")
        return self

    def __enter__(self) -> "Handle":
        return self.check()

    def __exit__(self, *exc) -> None:
        self.destroy()

    # -- workspace arena (for calls that do not pass their own) -----------------------
    def workspace(self, nbytes: int):
        """A reusable workspace of at least ``nbytes``; grows, never beyond the limit."""
        self.check()
        if nbytes > self.workspace_limit:
            raise BadParamError(f"workspace of {nbytes} bytes exceeds the handle's limit of "
                                f"{self.workspace_limit} bytes")
        arenas = self._arenas
        arena = getattr(arenas, "buffer", None)
        if arena is None or arena.nbytes < nbytes:
            arenas.buffer = arena = None  # free the old arena before allocating the larger one
            try:
                arena = self.backend.allocate_workspace(max(nbytes, 1))
            except TridnnError:
                raise
            except (MemoryError, ValueError) as exc:
                raise AllocFailedError(f"cannot allocate a workspace of {nbytes} bytes: "
                                       f"{exc}") from None
            arenas.buffer = arena
        return arena

    @property
    def arena_bytes(self) -> int:
        """Size of the calling thread's workspace arena (0 before its first use)."""
        arena = getattr(self._arenas, "buffer", None)
        return 0 if arena is None else int(arena.nbytes)

    @property
    def device_name(self) -> str:
        return self.backend.device_name

    def __repr__(self) -> str:
        state = "" if self._alive else ", destroyed"
        return f"Handle(device={self.device!r}, backend={self.backend_name!r}{state})"


def check_handle(handle) -> Handle:
    """``handle`` itself when it is a live Handle; BadParamError for anything else (None,
    a device string, another library's handle), NotInitializedError once destroyed."""
    if not isinstance(handle, Handle):
        raise BadParamError(f"handle must be a tridnn.Handle, got {handle!r} of type "
                            f"{type(handle).__name__}; create one with tridnn.Handle()")
    return handle.check()


def _make_backend(device: str, backend: str):
    if backend == "numpy":
        from .cpu.backend import NumpyBackend
        return NumpyBackend()
    try:
        from .cuda.backend import TritonBackend
    except ImportError as exc:
        raise RuntimePrerequisiteMissingError(
            f"the triton backend needs torch and triton ({exc}); install them with "
            f"pip install 'tridnn[gpu]'") from None
    return TritonBackend(device)


_default = threading.local()


def default_handle(device: str = "cpu") -> Handle:
    """One handle per thread and device for the functional API."""
    handles = getattr(_default, "handles", None)
    if handles is None:
        handles = _default.handles = {}
    if device not in handles or not handles[device]._alive:
        handles[device] = Handle(device)
    return handles[device]
