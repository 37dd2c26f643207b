"""The one explicit table of algorithms, with stable ids.

Rows are append-only: an id, once given, always names the same algorithm, so find
results cached on disk keep their meaning across versions. Classes are named by
"module:Class" and imported on first use, so the NumPy backend never imports torch
or triton and a missing optional dependency only hides the rows that need it.
"""
from __future__ import annotations

import importlib
import threading

from ..errors import NotSupportedError

# id, backend, op, direction, class
TABLE = [
    # -- NumPy forward convolution --------------------------------------------------
    (0, "numpy", "conv", "fwd", "tridnn.cpu.conv_implicit_gemm:ImplicitGemmForward"),
    (1, "numpy", "conv", "fwd", "tridnn.cpu.conv_precomp_gemm:PrecompGemmForward"),
    (2, "numpy", "conv", "fwd", "tridnn.cpu.conv_gemm:GemmForward"),
    (3, "numpy", "conv", "fwd", "tridnn.cpu.conv_direct:DirectForward"),
    (4, "numpy", "conv", "fwd", "tridnn.cpu.conv_fft:FftForward"),
    (5, "numpy", "conv", "fwd", "tridnn.cpu.conv_fft_tiling:FftTilingForward"),
    (6, "numpy", "conv", "fwd", "tridnn.cpu.conv_winograd:WinogradForward"),
    (7, "numpy", "conv", "fwd", "tridnn.cpu.conv_winograd_nonfused:WinogradNonfusedForward"),
    # -- NumPy backward data and backward filter ------------------------------------
    (8, "numpy", "conv", "bwd_data", "tridnn.cpu.conv_bwd_data_gemm:Col2imGemmBackwardData"),
    (9, "numpy", "conv", "bwd_data", "tridnn.cpu.conv_bwd_data_implicit:ImplicitGemmBackwardData"),
    (10, "numpy", "conv", "bwd_data", "tridnn.cpu.conv_bwd_data_fft:FftBackwardData"),
    (11, "numpy", "conv", "bwd_data", "tridnn.cpu.conv_bwd_data_fft:FftTilingBackwardData"),
    (12, "numpy", "conv", "bwd_data", "tridnn.cpu.conv_bwd_data_winograd:WinogradBackwardData"),
    (13, "numpy", "conv", "bwd_data", "tridnn.cpu.conv_bwd_data_winograd:WinogradNonfusedBackwardData"),
    (14, "numpy", "conv", "bwd_filter", "tridnn.cpu.conv_bwd_filter_gemm:Im2colGemmBackwardFilter"),
    (15, "numpy", "conv", "bwd_filter", "tridnn.cpu.conv_bwd_filter_implicit:ImplicitGemmBackwardFilter"),
    (16, "numpy", "conv", "bwd_filter", "tridnn.cpu.conv_bwd_filter_fft:FftBackwardFilter"),
    (17, "numpy", "conv", "bwd_filter", "tridnn.cpu.conv_bwd_filter_implicit:PaddedGemmBackwardFilter"),
    (18, "numpy", "conv", "bwd_filter", "tridnn.cpu.conv_bwd_filter_winograd:WinogradNonfusedBackwardFilter"),
    (19, "numpy", "conv", "bwd_filter", "tridnn.cpu.conv_bwd_filter_fft:FftTilingBackwardFilter"),
    # ids 100-149: Triton convolution (all directions)
    (100, "triton", "conv", "fwd", "tridnn.cuda.conv_implicit_gemm:ImplicitGemmForward"),
    (101, "triton", "conv", "fwd", "tridnn.cuda.conv_precomp_gemm:PrecompGemmForward"),
    (103, "triton", "conv", "fwd", "tridnn.cuda.conv_direct:DirectForward"),
    (104, "triton", "conv", "fwd", "tridnn.cuda.conv_gemm:GemmForward"),
    (105, "triton", "conv", "fwd", "tridnn.cuda.conv_fft:FftForward"),
    (106, "triton", "conv", "fwd", "tridnn.cuda.conv_winograd:WinogradForward"),
    (107, "triton", "conv", "fwd", "tridnn.cuda.conv_winograd_nonfused:WinogradNonfusedForward"),
    (108, "triton", "conv", "fwd", "tridnn.cuda.conv_fft_tiling:FftTilingForward"),
    (120, "triton", "conv", "bwd_data", "tridnn.cuda.conv_bwd_data_gemm:Col2imGemmBackwardData"),
    (121, "triton", "conv", "bwd_data", "tridnn.cuda.conv_bwd_data_implicit_gemm:ImplicitGemmBackwardData"),
    (122, "triton", "conv", "bwd_data", "tridnn.cuda.conv_bwd_data_as_forward:FftBackwardData"),
    (123, "triton", "conv", "bwd_data", "tridnn.cuda.conv_bwd_data_as_forward:WinogradBackwardData"),
    (124, "triton", "conv", "bwd_data", "tridnn.cuda.conv_bwd_data_as_forward:WinogradNonfusedBackwardData"),
    (125, "triton", "conv", "bwd_data", "tridnn.cuda.conv_bwd_data_as_forward:FftTilingBackwardData"),
    (130, "triton", "conv", "bwd_filter", "tridnn.cuda.conv_bwd_filter_implicit_gemm:AtomicBackwardFilter"),
    (131, "triton", "conv", "bwd_filter", "tridnn.cuda.conv_bwd_filter_implicit_gemm:ImplicitGemmBackwardFilter"),
    (132, "triton", "conv", "bwd_filter", "tridnn.cuda.conv_bwd_filter_fft:FftBackwardFilter"),
    (133, "triton", "conv", "bwd_filter", "tridnn.cuda.conv_bwd_filter_winograd:WinogradNonfusedBackwardFilter"),
    (134, "triton", "conv", "bwd_filter", "tridnn.cuda.conv_bwd_filter_fft:FftTilingBackwardFilter"),
    (135, "triton", "conv", "bwd_filter", "tridnn.cuda.conv_bwd_filter_gemm:GemmBackwardFilter"),
]

_lock = threading.Lock()
_instances: dict[int, object] = {}
_import_errors: dict[int, str] = {}


def _load(row):
    ident, backend, op, direction, path = row
    module_name, class_name = path.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    algo = cls()
    if (algo.backend, algo.op, algo.direction) != (backend, op, direction):
        raise RuntimeError(f"registry row {ident} says {backend}/{op}/{direction}, class {path} "
                           f"says {algo.backend}/{algo.op}/{algo.direction}")
    algo.id = ident
    return algo


def _resolve(row):
    ident = row[0]
    if ident not in _instances and ident not in _import_errors:
        with _lock:
            if ident not in _instances and ident not in _import_errors:
                try:
                    _instances[ident] = _load(row)
                except ImportError as exc:  # optional dependency missing (torch, triton)
                    _import_errors[ident] = f"{row[4]} cannot be imported: {exc}"
    return _instances.get(ident)


def algorithms(op: str, direction: str, backend: str) -> list:
    """Every algorithm registered for op/direction/backend, in table order."""
    rows = [r for r in TABLE if r[1] == backend and r[2] == op and r[3] == direction]
    return [a for a in (_resolve(r) for r in rows) if a is not None]


def by_id(ident: int):
    for row in TABLE:
        if row[0] == ident:
            return _resolve(row)
    return None


def by_enum(op: str, direction: str, backend: str, enum_member):
    """The algorithm implementing ``enum_member``; NotSupportedError if none is registered."""
    for algo in algorithms(op, direction, backend):
        if algo.enum == enum_member:
            return algo
    raise NotSupportedError(f"{enum_member.name} has no {backend} implementation for {op} "
                            f"{direction}" + _missing_note(backend))


def _missing_note(backend: str) -> str:
    notes = [msg for ident, msg in _import_errors.items()
             if any(r[0] == ident and r[1] == backend for r in TABLE)]
    return f" ({notes[0]})" if notes else ""


def check_table() -> None:
    """Ids unique and increasing; used by the tests."""
    ids = [r[0] for r in TABLE]
    if len(set(ids)) != len(ids) or ids != sorted(ids):
        raise RuntimeError(f"registry ids must be unique and increasing: {ids}")
