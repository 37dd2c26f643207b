"""API-call logging, after cuDNN's CUDNN_LOGLEVEL_DBG / CUDNN_LOGDEST_DBG.

``TRIDNN_LOGLEVEL`` turns it on: unset, empty, ``0`` or ``off`` log nothing;
``error`` logs only calls that raise; any other value (``1``, ``info``, ``api``, ...)
logs every public API call. ``TRIDNN_LOGDEST`` is ``stderr`` (the default),
``stdout`` or a file path (appended to). Each call is logged with its arguments and,
where the call is a problem tridnn can re-run, as the ``tridnn run ...`` line that
reproduces it; then one line says how it ended and how long it took.

``log_api_calls(namespace)`` wraps the API functions of a module namespace in place
(``tridnn/__init__.py`` applies it to the package's exports). Only the outermost
call is logged, so an API function that calls another one logs once. When logging is
off a wrapped call costs one attribute test. Logging never changes a call's result:
a failure to format an argument is logged as such.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import itertools
import os
import sys
import threading
import time

OFF, ERRORS, CALLS = 0, 1, 2
_LEVEL_NAMES = {"": OFF, "0": OFF, "off": OFF, "none": OFF, "false": OFF, "no": OFF,
                "error": ERRORS, "errors": ERRORS}


def parse_level(text) -> int:
    """OFF for unset/''/0/off, ERRORS for 'error', CALLS for anything else."""
    if text is None:
        return OFF
    return _LEVEL_NAMES.get(str(text).strip().lower(), CALLS)


class _State:
    """The current level and destination; ``configure`` changes them for the whole process."""

    def __init__(self):
        self.level = OFF
        self.dest = "stderr"
        self.file = None
        self.lock = threading.Lock()


_state = _State()
_local = threading.local()
_calls = itertools.count(1)


def configure(level=None, dest=None) -> None:
    """Set the level and destination, given as TRIDNN_LOGLEVEL / TRIDNN_LOGDEST take them
    ("info", "error", "0"; "stderr", "stdout", a path); None re-reads the variable."""
    new_level = parse_level(os.environ.get("TRIDNN_LOGLEVEL") if level is None else level)
    new_dest = (os.environ.get("TRIDNN_LOGDEST") or "stderr") if dest is None else str(dest)
    with _state.lock:
        if _state.file is not None and (new_dest != _state.dest or new_level == OFF):
            _state.file.close()
            _state.file = None
        _state.level, _state.dest = new_level, new_dest


def level() -> int:
    return _state.level


def _write(text: str) -> None:
    with _state.lock:
        dest = _state.dest
        if dest.lower() == "stdout":
            stream = sys.stdout
        elif dest.lower() == "stderr":
            stream = sys.stderr
        else:
            if _state.file is None:
                try:
                    _state.file = open(dest, "a", encoding="utf-8")
                except OSError as exc:  # never fail the call because the log cannot be opened
                    _state.dest = "stderr"
                    sys.stderr.write(f"tridnn: cannot open TRIDNN_LOGDEST {dest!r} ({exc}); "
                                     f"logging to stderr\n")
                    stream = sys.stderr
                    stream.write(text)
                    return
            stream = _state.file
        stream.write(text)
        stream.flush()


# -- the decorator ------------------------------------------------------------------------------
def logged(fn):
    """Wrap an API function so that its calls are logged when logging is on."""
    if getattr(fn, "__tridnn_logged__", False):
        return fn
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        signature = None
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _state.level == OFF or getattr(_local, "active", False):
            return fn(*args, **kwargs)
        _local.active = True
        try:
            number = next(_calls)
            block = None
            if _state.level >= CALLS:
                block = _call_block(number, name, signature, args, kwargs)
                _write(block)
            start = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                ms = (time.perf_counter() - start) * 1e3
                if block is None:
                    _write(_call_block(number, name, signature, args, kwargs))
                _write(f"E! #{number} {name}() raised {type(exc).__name__} after {ms:.3f} ms: "
                       f"{_one_line(exc)}\n")
                raise
            if _state.level >= CALLS:
                ms = (time.perf_counter() - start) * 1e3
                _write(f"i! #{number} {name}() returned {_short(result)} in {ms:.3f} ms\n")
            return result
        finally:
            _local.active = False

    wrapper.__tridnn_logged__ = True
    return wrapper


def log_api_calls(namespace: dict, module_prefix: str = "tridnn.") -> list[str]:
    """Wrap, in place, every function in ``namespace`` that is defined in an API module
    (``tridnn.api.*``, ``tridnn.functional``); returns the names wrapped."""
    wrapped = []
    for key, value in list(namespace.items()):
        module = getattr(value, "__module__", "") or ""
        if key.startswith("_") or not inspect.isfunction(value):
            continue
        if not (module.startswith(module_prefix + "api") or module == module_prefix + "functional"):
            continue
        namespace[key] = logged(value)
        wrapped.append(key)
    return wrapped


# -- formatting ---------------------------------------------------------------------------------
def _call_block(number, name, signature, args, kwargs) -> str:
    from . import __version__
    lines = [f"I! tridnn {__version__} #{number} {name}() called (pid {os.getpid()}, thread "
             f"{threading.get_ident()}, {time.strftime('%Y-%m-%dT%H:%M:%S')}):"]
    bound = None
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            lines.append(f"i!     (arguments do not match the signature: {exc})")
    if bound is not None:
        bound.apply_defaults()
        items = list(bound.arguments.items())
    else:
        items = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    for key, value in items:
        lines.append(f"i!     {key}: {_describe(value)}")
    if bound is not None:
        try:
            from .reproduce import reproducer_for_call
            repro = reproducer_for_call(name, dict(bound.arguments))
        except Exception as exc:  # noqa: BLE001 - logging must never break the call
            repro = None
            lines.append(f"i!     (no reproducer: {type(exc).__name__}: {exc})")
        if repro is not None:
            command, notes = repro
            lines.append(f"i! reproduce: {command}")
            lines.extend(f"i!     note: {n}" for n in notes)
    return "\n".join(lines) + "\n"


def _describe(value) -> str:
    try:
        return _describe_unsafe(value)
    except Exception as exc:  # noqa: BLE001
        return f"<{type(value).__name__}: cannot be described ({type(exc).__name__})>"


def _describe_unsafe(value) -> str:
    import numpy as np
    if isinstance(value, np.ndarray):
        item = value.itemsize
        strides = tuple(s // item for s in value.strides) if item else value.strides
        return (f"ndarray(shape={value.shape}, dtype={value.dtype}, strides={strides} elements, "
                f"data=0x{value.ctypes.data:x})")
    module = type(value).__module__ or ""
    if module.startswith("torch") and hasattr(value, "stride") and hasattr(value, "device"):
        return (f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, stride={tuple(value.stride())}, "
                f"device={value.device}, data=0x{value.data_ptr():x})")
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name} ({value.value})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # descriptors
        fields = ", ".join(f"{f.name}={_field(getattr(value, f.name))}" for f in dataclasses.fields(value))
        text = f"{type(value).__name__}({fields})"
        fmt = getattr(value, "format", None)
        if isinstance(fmt, str):  # tensor descriptors: the layout their strides spell
            text += f" [{fmt}]"
        return _clip(text, 600)
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"{type(value).__name__} of {len(value)}: " + _clip(repr(value))
    return _clip(str(value) if hasattr(value, "dims") else repr(value))


def _field(value) -> str:
    return value.name if isinstance(value, enum.Enum) else repr(value)


def _clip(text: str, limit: int = 300) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _one_line(exc) -> str:
    return _clip(str(exc), 500)


def _short(result) -> str:
    if result is None:
        return "None"
    if isinstance(result, list):
        return f"a list of {len(result)}"
    import numpy as np
    if isinstance(result, np.ndarray) or hasattr(result, "stride"):
        return _describe(result)
    return _clip(repr(result), 120)


configure()
