"""Launch records made by a dry run: a Triton algorithm's ``run`` once more with every kernel
launch kept instead of queued, so that a repeat of the call can queue those launches again
straight away (``Replay``), past the algorithm's dispatch, plans, tuner and argument handling.

What ``run`` does per call on the host (tens to a hundred microseconds of Python for a
few microseconds of launches) depends only on the problem, the tuner's choices and the
tensors' addresses, shapes and strides, which is what the API's fast path keys a replay
by. A dry run is only sound if ``run`` queues nothing but launches, so everything else
refuses the record (``Refused``; the call then keeps running ``run``):

- a torch operation other than a view (a fill, a copy, an allocation, cuFFT): a
  ``TorchDispatchMode`` sees every one;
- a launch through Triton's JIT rather than ``common.launch``/``gluon_common.launch``'s
  compiled launchers: a Triton launch hook raises on the recording thread;
- a launch already bound elsewhere (``common.Bound``): its arguments are bare addresses,
  so what they point at cannot be checked;
- a tuner miss: it would time launches that never run;
- a TMA descriptor of memory outside the caller's tensors and workspace: a descriptor
  holds only an address, so nothing would keep that memory alive for the record.

A plain tensor argument outside the caller's memory (a placeholder, a cached table) is
kept alive by the record itself."""
from __future__ import annotations

import threading

_local = threading.local()


class Refused(Exception):
    """The dry run did something a launch record cannot repeat."""


def active():
    """The recorder of the current thread's dry run, or None (launches run)."""
    return getattr(_local, "recorder", None)


class Recorder:
    """The launches of one dry run and the tensors they need kept alive."""

    def __init__(self, owned):
        from .backend import TritonBackend
        # the byte ranges [first, one past the last) the caller's views can touch
        self.owned = [TritonBackend.span(t) for t in owned if t is not None]
        self.launches = []
        self.keep = []

    def _is_owned(self, address) -> bool:
        return any(lo <= address < hi for lo, hi in self.owned)

    def add(self, bound, args) -> None:
        """Keep bound (a callable that queues the launch again; None: it cannot be bound),
        after checking its arguments' memory."""
        import torch
        if bound is None:
            raise Refused("a launch with no compiled launcher to bind (first compile, or the interpreter)")
        for a in args:
            if isinstance(a, torch.Tensor):
                if not self._is_owned(a.data_ptr()):
                    self.keep.append(a)
            elif hasattr(a, "block_shape"):  # a TMA descriptor
                if not self._is_owned(a.base.data_ptr()):
                    raise Refused("a TMA descriptor of memory outside the caller's tensors and workspace")
        self.launches.append(bound)


class Replay:
    """The launches of a dry run, queued again on PyTorch's current stream when called with
    the call's tensors (the fast path's views; the addresses are bound already)."""
    __slots__ = ("launches", "keep")

    def __init__(self, launches, keep):
        self.launches, self.keep = tuple(launches), tuple(keep)

    def __call__(self, tensors=None) -> None:
        for queue in self.launches:
            queue()


last_refusal = None  # why the latest dry run made no record (diagnostics: bench_gpu_host_time.py)


def record(run, owned):
    """Call ``run()`` with launches recorded instead of queued. ``owned``: the caller's tensors
    and workspace buffers (the memory the record's key pins). Returns a Replay, or None when
    the run did anything else (``last_refusal`` says what)."""
    global last_refusal
    if active() is not None or not _guard_jit_launches():
        return None
    from torch.utils._python_dispatch import TorchDispatchMode

    class ViewsOnly(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.is_view or func in _METADATA:
                return func(*args, **(kwargs or {}))
            raise Refused(f"torch operation {func}")

    recorder = _local.recorder = Recorder(owned)
    try:
        with ViewsOnly():
            run()
    except Refused as exc:
        last_refusal = str(exc)
        return None
    except Exception as exc:  # the call itself already ran: a failed record only costs speed
        last_refusal = f"the dry run raised {type(exc).__name__}: {exc}"
        return None
    finally:
        _local.recorder = None
    if not recorder.launches:
        last_refusal = "no launch"
        return None
    return Replay(recorder.launches, recorder.keep)


def _metadata_ops():
    import torch
    aten = torch.ops.aten
    return {aten.is_contiguous.default, aten.is_contiguous.memory_format, aten.sym_size.int,
            aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default, aten.dim.default}


_METADATA: set = set()
_jit_guard = []  # [True] once the Triton hook is installed, [False] where it cannot be


def _refuse_jit_launch(metadata) -> None:
    if active() is not None:
        raise Refused("a launch through Triton's JIT")


def _guard_jit_launches() -> bool:
    """Install the Triton launch hook that refuses JIT launches during a dry run (once);
    False where this Triton has no such hook (then nothing is recorded)."""
    if not _jit_guard:
        _METADATA.update(_metadata_ops())
        try:
            from triton import knobs
            knobs.runtime.launch_enter_hook.add(_refuse_jit_launch)
            _jit_guard.append(True)
        except (ImportError, AttributeError):
            _jit_guard.append(False)
    return _jit_guard[0]
