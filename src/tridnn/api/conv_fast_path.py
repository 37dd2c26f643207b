"""A fast path for convolution calls that repeat an already-validated problem.

A training loop calls ``convolution_forward`` with the same descriptors and algorithm
thousands of times. Building and checking the ConvProblem, resolving the algorithm,
checking that it applies and sizing its workspace cost ~100 microseconds of Python per
call, more than many GPU convolutions take. The first call takes the full path
(``api.convolution.run``) and, once everything has been validated and run, leaves an
entry here, keyed by the identity of the descriptors (frozen, so a descriptor object
always means the same thing), the direction, the algorithm and the handle's
determinism flag. A later call with the same objects re-checks only what can change
between calls, with the same checks and errors as the full path:

- the handle is alive; alpha and beta are finite reals;
- each array matches its descriptor (type, device, dtype, shape, strides; a writable
  output), through the backend's own ``view``; the output overlaps no input;
- the workspace is large enough.

A Triton algorithm (``Algorithm.replay``) is then asked, on the second call with a set of
addresses (x, w, y, the workspace, alpha, beta), for a callable that repeats that call's
launches (a launch record); a later call with the same addresses runs it directly, past
the algorithm's dispatch, plan, tuner and record lookups. The checks above still run
first, so a replay only ever sees arrays of the validated shapes, strides, dtype and
device.

Anything else (a different descriptor object, algorithm or determinism setting) misses
the cache and takes the full path.
"""
from __future__ import annotations

import threading

import numpy as np

from ..algorithms.base import Algorithm
from ..errors import BadParamError, check_finite_scalar
from ..types import ConvMode

MAX_ENTRIES = 1024  # per handle; the table is dropped when full (a rebuild costs one slow call each)
MAX_REPLAYS = 16  # address sets per entry; dropped when full (a training loop reuses a few)
_SEEN = object()  # an address set called once: the next call asks for a replay
_NEVER = object()  # an address set the algorithm has no replay for

_lock = threading.Lock()


class Entry:
    """A validated call: its problem, algorithm and the descriptors it was validated for
    (kept, so their ids cannot be reused while the entry lives). What the repeat calls
    need (workspace need, buffers, the operands' checks) is built on the first repeat,
    so a caller that never repeats pays only for the table insert."""
    __slots__ = ("descs", "problem", "algorithm", "ready", "need", "buffers", "direct", "operands", "out",
                 "out_index", "metas", "quick", "replays")

    def __init__(self, descs, problem, algorithm):
        self.descs = descs
        self.problem = problem
        self.algorithm = algorithm
        self.ready = False

    def prepare(self, backend) -> "Entry":
        from .convolution import _ARG_NAMES
        problem, algorithm = self.problem, self.algorithm
        self.buffers = algorithm.buffers(problem)
        self.need = algorithm.workspace_size(problem)
        out = problem.w.as_tensor() if problem.output == "w" else getattr(problem, problem.output)
        # calls that api.convolution.execute would run without special handling
        self.direct = (out.size > 0 and problem.n > 0
                       and (problem.mode != ConvMode.CONVOLUTION or getattr(algorithm, "handles_flip", False)))
        names = _ARG_NAMES[problem.direction]
        self.out = problem.output
        # (key, tensor descriptor, argument name, writable), as api.convolution._views checks them
        self.operands = tuple((k, problem.w.as_tensor() if k == "w" else getattr(problem, k), names[k],
                               k == self.out) for k in ("x", "w", "y"))
        self.out_index = ("x", "w", "y").index(self.out)
        # the backend's precomputed form of each operand's check (view_meta), and its one
        # call checking all three operands and the output's overlaps (quick_check)
        self.metas = self.quick = None
        if getattr(backend, "quick_check", None) is not None:
            self.metas = tuple(backend.view_meta(desc) for _, desc, _, _ in self.operands)
            self.quick = backend.quick_check(self.metas, self.out_index)
        # (x, w, y, workspace addresses, alpha, beta) -> _SEEN, algorithm.replay's answer or _NEVER
        self.replays = {} if self.direct and type(algorithm).replay is not Algorithm.replay else None
        self.ready = True
        return self


def _key(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo):
    return (direction, id(x_desc), id(w_desc), id(conv_desc), id(y_desc), algo, handle.deterministic)


def lookup(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo) -> Entry | None:
    table = getattr(handle, "conv_calls", None)  # (a Handle's; anything else takes the full path)
    if type(table) is not dict:
        return None
    try:
        entry = table.get(_key(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo))
    except TypeError:  # an unhashable algo argument: the full path names the error
        return None
    if entry is None:
        return None
    d = entry.descs
    if d[0] is x_desc and d[1] is w_desc and d[2] is conv_desc and d[3] is y_desc:
        return entry
    return None


def remember(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo, problem, algorithm) -> None:
    """Record a call that passed the full validation (in the handle's ``conv_calls``: the
    table lives and dies with its handle)."""
    try:
        key = _key(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo)
        hash(key)
    except TypeError:
        return
    entry = Entry((x_desc, w_desc, conv_desc, y_desc), problem, algorithm)
    with _lock:
        table = handle.conv_calls
        if table is None or len(table) >= MAX_ENTRIES:
            table = handle.conv_calls = {}
        table[key] = entry


_api = None


def _convolution():
    global _api
    if _api is None:
        from . import convolution
        _api = convolution
    return _api


def call(handle, entry: Entry, alpha, beta, x, w, y, workspace):
    """Re-check what can change between calls, then run: the same checks, errors and
    order as api.convolution.run for a problem it has already validated. Returns the
    caller's output array."""
    if not handle._alive:
        handle.check()  # raises
    if not entry.ready:
        entry.prepare(handle.backend)
    if type(alpha) is not float or alpha - alpha != 0.0:  # (x - x is 0.0 exactly for finite floats)
        alpha = check_finite_scalar("alpha", alpha)
    if type(beta) is not float or beta - beta != 0.0:
        beta = check_finite_scalar("beta", beta)
    problem, algorithm = entry.problem, entry.algorithm
    backend = handle.backend
    # the common case in one call: three tensors as validated before, the output apart
    arrays = {"x": x, "w": w, "y": y}
    addresses = entry.quick(x, w, y) if entry.quick is not None else None
    views = arrays if addresses is not None else _checked_views(backend, entry, arrays)  # (raises on bad arrays)
    replays = entry.replays
    ws_bytes, ws_address = None, 0
    if entry.need or workspace is not None:
        if replays is not None:  # (a replay needs only its size and address, not its byte view)
            ws_nbytes, ws_address = backend.workspace_extent(workspace)
        else:
            ws_bytes = backend.workspace_bytes(workspace)
            ws_nbytes = ws_bytes.nbytes
        if ws_nbytes < entry.need:
            _convolution()._check_workspace(handle, problem, algorithm, workspace)  # raises, naming the sizes
    output = (x, w, y)[entry.out_index]
    if not entry.direct:
        _convolution().execute(handle, problem, algorithm, views, workspace, alpha, beta)
        return output
    if replays is not None:
        if addresses is None:
            addresses = (views["x"].data_ptr(), views["w"].data_ptr(), views["y"].data_ptr())
        addresses = (*addresses, ws_address, alpha, beta)
        replay = replays.get(addresses)
        if replay is not None and replay is not _SEEN and replay is not _NEVER:
            replay(views)
            return output
    if entry.buffers and ws_bytes is None:
        ws_bytes = backend.workspace_bytes(workspace)
    buffers = backend.carve(ws_bytes, entry.buffers) if entry.buffers else {}
    algorithm.run(problem, views, buffers, alpha, beta)
    if replays is not None and replay is not _NEVER:
        if replay is None and len(replays) >= MAX_REPLAYS:
            replays.clear()
        # an address set's first call only notes it (a caller that never repeats one pays
        # nothing more); its second asks the algorithm for a replay
        replays[addresses] = _SEEN if replay is None else (
            algorithm.replay(problem, views, buffers, alpha, beta) or _NEVER)
    return output


def _checked_views(backend, entry: Entry, arrays: dict) -> dict:
    """api.convolution._views with the tensor descriptors built once: each array checked
    against its descriptor, and the output against overlap with each input (same errors).

    Where ``entry.quick`` (the backend's quick_check) did not answer, an array that matches
    exactly still skips the general check (``quick_view``); everything else goes through
    ``backend.view``, and a tensor it accepts as it is teaches the quick checks its strides."""
    metas = entry.metas
    quick = backend.quick_view if metas is not None else None
    views = {}
    for i, (key, desc, name, writable) in enumerate(entry.operands):
        array = arrays[key]
        view = quick(array, metas[i]) if quick is not None else None
        if view is None:
            view = backend.view(array, desc, name, writable)
            if metas is not None:
                backend.learn_view(metas[i], array, view)
        views[key] = view
    out = views[entry.out]
    shares = getattr(backend, "shares_memory", None)
    for i, (key, desc, name, writable) in enumerate(entry.operands):
        if writable:
            continue
        arr = views[key]
        if isinstance(arr, np.ndarray):
            overlap = np.may_share_memory(arr, out)
        elif metas is not None:
            overlap = backend.overlaps(arr, metas[i], out, metas[entry.out_index])
        else:
            overlap = shares is not None and shares(arr, out)
        if overlap:
            out_name = entry.operands[entry.out_index][2]
            raise BadParamError(f"output {out_name} overlaps input {name}; pass separate buffers")
    return views
