"""Choosing an algorithm: ``get`` ranks by the cost model, ``find`` by measurement.

Both return cuDNN-style perf records for every registered algorithm of the problem's
direction on the handle's backend: the usable ones first (ranked), then those that
do not apply, with status NOT_SUPPORTED and the reason.
"""
from __future__ import annotations

import statistics
import warnings

import numpy as np

from .. import __version__
from ..errors import AllocFailedError, NotSupportedError, Status, TridnnError
from ..types import Determinism
from . import registry
from .base import PerfResult
from .find_cache import CacheEntry


def candidates(handle, problem, workspace_limit=None):
    """(algorithm, reason) for every registered algorithm; reason None when it can run."""
    limit = handle.workspace_limit if workspace_limit is None else workspace_limit
    out = []
    for algo in registry.algorithms("conv", problem.direction, handle.backend_name):
        reason = algo.not_applicable(problem)
        if reason is None and handle.deterministic and not algo.deterministic:
            reason = "not deterministic, and the handle asks for deterministic algorithms only"
        if reason is None and algo.workspace_size(problem) > limit:
            reason = (f"needs {algo.workspace_size(problem)} bytes of workspace, over the limit of "
                      f"{limit} bytes")
        out.append((algo, reason))
    return out


def _record(algo, problem, status, time_ms, reason=None, measured=False) -> PerfResult:
    return PerfResult(algo=algo.enum, status=status, time_ms=time_ms,
                      memory=algo.workspace_size(problem) if status == Status.SUCCESS else 0,
                      determinism=Determinism(int(algo.deterministic)),
                      math_type=problem.math_type, reason=reason, measured=measured,
                      algorithm=algo)


def get(handle, problem, workspace_limit=None) -> list[PerfResult]:
    """Rank by ``estimate``; runs no kernel. time_ms is the estimate (measured=False)."""
    usable, unusable = [], []
    for algo, reason in candidates(handle, problem, workspace_limit):
        if reason is None:
            usable.append(_record(algo, problem, Status.SUCCESS, algo.estimate(problem) * 1e3))
        else:
            unusable.append(_record(algo, problem, Status.NOT_SUPPORTED, -1.0, reason))
    usable.sort(key=lambda r: r.time_ms)
    return usable + unusable


def cache_key(handle, problem) -> str:
    return f"{problem.key()}|{handle.backend_name}|{handle.device_name}|tridnn-{__version__}"


def find(handle, problem, tensors=None, workspace=None, workspace_limit=None,
         time_budget_s=None, runner=None) -> list[PerfResult]:
    """Time every usable algorithm, fastest first, and remember the winner.

    ``tensors`` are the caller's arrays (their output is overwritten, as in cuDNN's
    FindEx); without them, random inputs are made. Each algorithm gets a warm-up run
    and then repeats until its share of the time budget is spent (3 runs at least,
    at most 10); its time is the median.
    """
    from ..api.convolution import execute  # the same path a real call takes
    backend = handle.backend
    budget = handle.find_time_budget_s if time_budget_s is None else time_budget_s
    limit = handle.workspace_limit if workspace_limit is None else workspace_limit
    if workspace is not None:
        limit = min(limit, backend.workspace_bytes(workspace).nbytes)
    pairs = candidates(handle, problem, limit)
    if tensors is None:
        rng = np.random.default_rng(0)
        tensors = {name: backend.random(getattr(problem, name).as_tensor()
                                        if name == "w" else getattr(problem, name), rng)
                   for name in ("x", "w", "y")}
    usable = [a for a, r in pairs if r is None]
    share = budget / max(len(usable), 1)
    results, failed = [], []
    for algo, reason in pairs:
        if reason is not None:
            failed.append(_record(algo, problem, Status.NOT_SUPPORTED, -1.0, reason))
            continue
        try:
            ws = workspace if workspace is not None else handle.workspace(algo.workspace_size(problem))
            times = _time(lambda: execute(handle, problem, algo, tensors, ws, 1.0, 0.0), backend, share)
            results.append(_record(algo, problem, Status.SUCCESS, statistics.median(times) * 1e3,
                                   measured=True))
        except AllocFailedError as exc:
            failed.append(_record(algo, problem, Status.ALLOC_FAILED, -1.0, str(exc)))
        except (TridnnError, MemoryError) as exc:
            failed.append(_record(algo, problem, getattr(exc, "status", Status.EXECUTION_FAILED),
                                  -1.0, str(exc)))
    results.sort(key=lambda r: r.time_ms)
    if results:
        best = results[0]
        handle.find_cache.put(cache_key(handle, problem), CacheEntry(
            best.algorithm.id, best.algorithm.name, best.time_ms, best.memory))
    return results + failed


def _time(fn, backend, budget_s: float, min_runs: int = 3, max_runs: int = 10) -> list[float]:
    if hasattr(backend, "time"):  # device timing (CUDA events, cold L2) where the backend has it
        return backend.time(fn, budget_s, min_runs=min_runs, max_runs=max_runs)
    fn()  # warm-up: first-touch of pages, kernel compilation
    backend.synchronize()
    times = []
    spent = 0.0
    while len(times) < min_runs or (spent < budget_s and len(times) < max_runs):
        start = backend.now()
        fn()
        backend.synchronize()
        elapsed = backend.now() - start
        times.append(elapsed)
        spent += elapsed
    return times


def choose(handle, problem, how: str = "auto"):
    """The algorithm the functional API runs: a cached find result, else the best ``get``.

    how: "auto" (cache, then heuristics), "find" (cache, then benchmark), "heuristic"."""
    if how in ("auto", "find"):
        entry = handle.find_cache.get(cache_key(handle, problem))
        if entry is not None:
            algo = _cached_algorithm(handle, problem, entry)
            if algo is not None and algo.not_applicable(problem) is None and \
                    algo.workspace_size(problem) <= handle.workspace_limit and \
                    (algo.deterministic or not handle.deterministic):
                return algo
    ranked = find(handle, problem) if how == "find" else get(handle, problem)
    for record in ranked:
        if record.status == Status.SUCCESS:
            return record.algorithm
    reasons = "; ".join(f"{r.algorithm.name}: {r.reason}" for r in ranked)
    raise NotSupportedError(f"no algorithm can run {problem.describe()}: {reasons}")


def _cached_algorithm(handle, problem, entry):
    """The algorithm a cache entry names, or None (with a warning) when the entry cannot
    be trusted: an unknown id, or an id whose algorithm is of another op, direction or
    backend, or is named differently (a damaged or foreign cache)."""
    try:
        algo = registry.by_id(int(entry.algo_id))
    except (TypeError, ValueError):
        algo = None
    if algo is None or (algo.op, algo.direction, algo.backend) != ("conv", problem.direction,
                                                                   handle.backend_name) \
            or algo.name != entry.algo_name:
        found = "no algorithm" if algo is None else repr(algo)
        warnings.warn(f"tridnn find cache entry for {problem.describe()} names algorithm id "
                      f"{entry.algo_id!r} ({entry.algo_name!r}), but that id is {found}; the "
                      f"entry is ignored", RuntimeWarning, stacklevel=3)
        return None
    return algo
