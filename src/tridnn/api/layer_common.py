"""What every layer API call does before it computes: check the handle and scalars,
turn arrays into checked views, refuse overlapping outputs, and pick the backend
module (tridnn.cpu.<layer> for NumPy, tridnn.cuda.<layer> otherwise)."""
from __future__ import annotations

import importlib

import numpy as np

from ..errors import BadParamError, check_finite_scalar
from ..handle import check_handle


def backend_module(handle, layer: str):
    """The module whose same-named functions run this layer on the handle's backend."""
    check_handle(handle)
    package = "cpu" if handle.backend_name == "numpy" else "cuda"
    return importlib.import_module(f"tridnn.{package}.{layer}")


def scalars(**values) -> list[float]:
    return [check_finite_scalar(name, v) for name, v in values.items()]


def same_dims(a_desc, b_desc, a_name: str, b_name: str, dtype: bool = True) -> None:
    if a_desc.dims != b_desc.dims:
        raise BadParamError(f"{b_name} descriptor dims {b_desc.dims} must equal {a_name}'s {a_desc.dims}")
    if dtype and a_desc.dtype != b_desc.dtype:
        raise BadParamError(f"dtype mismatch: {a_name} is {a_desc.dtype.name}, {b_name} is {b_desc.dtype.name}")


def views(handle, inputs, outputs, in_place_ok: bool = False) -> list:
    """Checked logical views: ``inputs`` and ``outputs`` are lists of (array, desc, name);
    None arrays stay None. Outputs may not overlap inputs (or each other), except an
    exact alias of an input when ``in_place_ok`` (elementwise ops computed in place)."""
    backend = check_handle(handle).backend
    ins = [None if a is None else backend.view(a, d, n, writable=False) for a, d, n in inputs]
    outs = [None if a is None else backend.view(a, d, n, writable=True) for a, d, n in outputs]
    named_in = [(v, n) for v, (_, _, n) in zip(ins, inputs) if v is not None]
    named_out = [(v, n) for v, (_, _, n) in zip(outs, outputs) if v is not None]
    _check_spans(backend.span, named_in, named_out, in_place_ok)
    return ins + outs


def _check_spans(span, named_in, named_out, in_place_ok) -> None:
    """The overlap rule of ``views`` from the backend's byte extents (``span``): sorted by
    first byte, each extent is compared only with those that start before it ends (no
    overlap: one comparison each), and a pair counts when an output is in it."""
    items = [(*span(v), False, k, v, n) for k, (v, n) in enumerate(named_in)]
    items += [(*span(v), True, k, v, n) for k, (v, n) in enumerate(named_out)]
    items = sorted((it for it in items if it[0] < it[1]), key=lambda it: it[0])
    for i, (lo, hi, is_out, k, v, name) in enumerate(items):
        for lo2, hi2, is_out2, k2, v2, name2 in items[i + 1:]:
            if lo2 >= hi:
                break
            if not (is_out or is_out2):
                continue  # inputs may share memory
            if in_place_ok and _same_view(v, v2):
                continue
            # name the output first (the earlier output when both are)
            if is_out and (not is_out2 or k < k2):
                raise BadParamError(f"output {name} overlaps {name2}; pass separate buffers")
            raise BadParamError(f"output {name2} overlaps {name}; pass separate buffers")


def _same_view(a, b) -> bool:
    """Exactly the same elements in the same order (an in-place call)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return (a.shape == b.shape and a.strides == b.strides
                and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])
    try:
        return (tuple(a.shape) == tuple(b.shape) and tuple(a.stride()) == tuple(b.stride())
                and a.data_ptr() == b.data_ptr())
    except AttributeError:
        return False


def is_empty(*arrays) -> bool:
    return any(a is not None and 0 in tuple(a.shape) for a in arrays)
