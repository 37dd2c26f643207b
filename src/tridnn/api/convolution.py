"""Convolution in cuDNN's calling model: descriptors, get/find, workspace size, run.

Every direction goes through ``_prepare`` (validate everything, touch nothing) and
``execute`` (the one place that runs an algorithm), so errors are raised before any
output is written, and ``find`` times exactly the path a real call takes.
"""
from __future__ import annotations

import numpy as np

from ..algorithms import registry, selection
from ..algorithms.problem import OUTPUT_OF, ConvProblem
from ..errors import BadParamError, NotSupportedError, check_finite_scalar
from ..types import ConvMode, algo_enum


def _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc) -> ConvProblem:
    handle.check()
    return ConvProblem(direction, x_desc, w_desc, y_desc, conv_desc)


def _views(handle, problem, arrays: dict) -> dict:
    """Logical views of the caller's arrays, checked against the descriptors."""
    backend = handle.backend
    out_name = problem.output
    views = {}
    for name in ("x", "w", "y"):
        desc = problem.w.as_tensor() if name == "w" else getattr(problem, name)
        views[name] = backend.view(arrays[name], desc, _ARG_NAMES[problem.direction][name],
                                   writable=name == out_name)
    out = views[out_name]
    for name, arr in views.items():
        if name != out_name and isinstance(arr, np.ndarray) and np.may_share_memory(arr, out):
            raise BadParamError(f"output {_ARG_NAMES[problem.direction][out_name]} overlaps input "
                                f"{_ARG_NAMES[problem.direction][name]}; pass separate buffers")
    return views


_ARG_NAMES = {"fwd": {"x": "x", "w": "w", "y": "y"},
              "bwd_data": {"x": "dx", "w": "w", "y": "dy"},
              "bwd_filter": {"x": "x", "w": "dw", "y": "dy"}}


def _algorithm(handle, problem, algo):
    member = algo_enum(problem.direction, algo)
    algorithm = registry.by_enum("conv", problem.direction, handle.backend_name, member)
    reason = algorithm.not_applicable(problem)
    if reason is not None:
        raise NotSupportedError(f"{member.name} does not apply to {problem.describe()}: {reason}")
    if handle.deterministic and not algorithm.deterministic:
        raise NotSupportedError(f"{member.name} is not deterministic and the handle was created "
                                f"with deterministic=True")
    return algorithm


def _check_workspace(handle, problem, algorithm, workspace):
    need = algorithm.workspace_size(problem)
    have = 0 if workspace is None else handle.backend.workspace_bytes(workspace).nbytes
    if have < need:
        raise BadParamError(f"workspace of {have} bytes is smaller than the {need} bytes "
                            f"{algorithm.name} needs for {problem.describe()}; ask "
                            f"get_convolution_*_workspace_size")


def execute(handle, problem, algorithm, views, workspace, alpha, beta, epilogue=None) -> None:
    """Run ``algorithm`` on already-validated views; the only place algorithms run."""
    backend = handle.backend
    out = views[problem.output]
    if _size(out) == 0:
        return
    if problem.n == 0:  # bwd_filter over an empty batch: the gradient sum is empty
        out[...] = 0 if beta == 0 else beta * out
        return
    if problem.mode == ConvMode.CONVOLUTION:
        views = dict(views, w=backend.flip_spatial(views["w"], problem.nd))
    buffers = backend.carve(backend.workspace_bytes(workspace), algorithm.buffers(problem))
    if epilogue is None:
        algorithm.run(problem, views, buffers, alpha, beta)
    else:
        algorithm.run(problem, views, buffers, alpha, beta, epilogue=epilogue)


def _size(arr) -> int:
    return int(np.prod(arr.shape))


def run(handle, direction, alpha, x_desc, x, w_desc, w, conv_desc, algo, workspace, beta, y_desc, y):
    """Validate everything, then run one direction; returns the output array."""
    problem = _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc)
    alpha = check_finite_scalar("alpha", alpha)
    beta = check_finite_scalar("beta", beta)
    views = _views(handle, problem, {"x": x, "w": w, "y": y})
    algorithm = _algorithm(handle, problem, algo)
    _check_workspace(handle, problem, algorithm, workspace)
    execute(handle, problem, algorithm, views, workspace, alpha, beta)
    return {"x": x, "w": w, "y": y}[OUTPUT_OF[direction]]


def workspace_size(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo) -> int:
    problem = _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc)
    return _algorithm(handle, problem, algo).workspace_size(problem)


def _truncate(records, requested):
    if requested is None:
        return records
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise BadParamError(f"requested algorithm count must be an integer >= 1, got {requested!r}")
    return records[:requested]


# -- forward -------------------------------------------------------------------------
def convolution_forward(handle, alpha, x_desc, x, w_desc, w, conv_desc, algo, workspace, beta,
                        y_desc, y):
    """cudnnConvolutionForward: y = alpha * conv(x, w) + beta * y, in place; returns y."""
    return run(handle, "fwd", alpha, x_desc, x, w_desc, w, conv_desc, algo, workspace, beta, y_desc, y)


def get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv_desc, y_desc, algo) -> int:
    return workspace_size(handle, "fwd", x_desc, w_desc, conv_desc, y_desc, algo)


def get_convolution_forward_algorithm(handle, x_desc, w_desc, conv_desc, y_desc, requested=None):
    """cudnnGetConvolutionForwardAlgorithm_v7: perf records ranked by the heuristic; runs nothing."""
    problem = _problem(handle, "fwd", x_desc, w_desc, conv_desc, y_desc)
    return _truncate(selection.get(handle, problem), requested)


def find_convolution_forward_algorithm(handle, x_desc, w_desc, conv_desc, y_desc, requested=None,
                                       time_budget_s=None):
    """cudnnFindConvolutionForwardAlgorithm: times every usable algorithm on scratch buffers."""
    problem = _problem(handle, "fwd", x_desc, w_desc, conv_desc, y_desc)
    return _truncate(selection.find(handle, problem, time_budget_s=time_budget_s), requested)


def find_convolution_forward_algorithm_ex(handle, x_desc, x, w_desc, w, conv_desc, y_desc, y,
                                          requested=None, workspace=None, time_budget_s=None):
    """cudnnFindConvolutionForwardAlgorithmEx: times on the caller's buffers (y is overwritten)."""
    problem = _problem(handle, "fwd", x_desc, w_desc, conv_desc, y_desc)
    views = _views(handle, problem, {"x": x, "w": w, "y": y})
    return _truncate(selection.find(handle, problem, views, workspace, time_budget_s=time_budget_s),
                     requested)
