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
from ..handle import check_handle
from ..types import ConvMode, algo_enum
from . import conv_fast_path


def _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc) -> ConvProblem:
    check_handle(handle)
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
        if name != out_name and (np.may_share_memory(arr, out) if isinstance(arr, np.ndarray)
                                 else getattr(backend, "shares_memory", lambda a, b: False)(arr, out)):
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
    if problem.mode == ConvMode.CONVOLUTION and not getattr(algorithm, "handles_flip", False):
        # (algorithms with handles_flip read and write the flipped filter themselves)
        views = dict(views, w=backend.flip_spatial(views["w"], problem.nd))
    buffers = backend.carve(backend.workspace_bytes(workspace), algorithm.buffers(problem))
    if epilogue is None:
        algorithm.run(problem, views, buffers, alpha, beta)
    else:
        algorithm.run(problem, views, buffers, alpha, beta, epilogue=epilogue)


def _size(arr) -> int:
    return int(np.prod(arr.shape))


def run(handle, direction, alpha, x_desc, x, w_desc, w, conv_desc, algo, workspace, beta, y_desc, y):
    """Validate everything, then run one direction; returns the output array.

    A repeat of an already-validated call (same descriptor objects and algorithm)
    re-checks only the arrays, scalars and workspace (conv_fast_path.py)."""
    entry = conv_fast_path.lookup(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo)
    if entry is not None:
        return conv_fast_path.call(handle, entry, alpha, beta, x, w, y, workspace)
    arrays = {"x": x, "w": w, "y": y}
    problem = _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc)
    alpha = check_finite_scalar("alpha", alpha)
    beta = check_finite_scalar("beta", beta)
    views = _views(handle, problem, arrays)
    algorithm = _algorithm(handle, problem, algo)
    _check_workspace(handle, problem, algorithm, workspace)
    execute(handle, problem, algorithm, views, workspace, alpha, beta)
    conv_fast_path.remember(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo, problem, algorithm)
    return arrays[OUTPUT_OF[direction]]


def workspace_size(handle, direction, x_desc, w_desc, conv_desc, y_desc, algo) -> int:
    problem = _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc)
    return _algorithm(handle, problem, algo).workspace_size(problem)


def _check_requested(requested):
    """The requested record count, checked before any timing is spent."""
    if requested is not None and (isinstance(requested, bool) or not isinstance(requested, int)
                                  or requested < 1):
        raise BadParamError(f"requested algorithm count must be an integer >= 1, got {requested!r}")
    return requested


def get_algorithms(handle, direction, x_desc, w_desc, conv_desc, y_desc, requested=None):
    """Perf records of one direction ranked by the heuristic (the get_*_algorithm calls)."""
    problem = _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc)
    return selection.get(handle, problem)[:_check_requested(requested)]


def find_algorithms(handle, direction, x_desc, w_desc, conv_desc, y_desc, requested=None,
                    time_budget_s=None, arrays=None, workspace=None):
    """Measured perf records of one direction (the find_*_algorithm calls); with ``arrays``
    (x, w, y by role) times on the caller's buffers and overwrites the output, as the Ex calls."""
    problem = _problem(handle, direction, x_desc, w_desc, conv_desc, y_desc)
    requested = _check_requested(requested)
    views = None if arrays is None else _views(handle, problem, arrays)
    return selection.find(handle, problem, views, workspace, time_budget_s=time_budget_s)[:requested]


# -- forward -------------------------------------------------------------------------
def convolution_forward(handle, alpha, x_desc, x, w_desc, w, conv_desc, algo, workspace, beta,
                        y_desc, y):
    """cudnnConvolutionForward: y = alpha * conv(x, w) + beta * y, in place; returns y."""
    return run(handle, "fwd", alpha, x_desc, x, w_desc, w, conv_desc, algo, workspace, beta, y_desc, y)


def get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv_desc, y_desc, algo) -> int:
    return workspace_size(handle, "fwd", x_desc, w_desc, conv_desc, y_desc, algo)


def get_convolution_forward_algorithm(handle, x_desc, w_desc, conv_desc, y_desc, requested=None):
    """cudnnGetConvolutionForwardAlgorithm_v7: perf records ranked by the heuristic; runs nothing."""
    return get_algorithms(handle, "fwd", x_desc, w_desc, conv_desc, y_desc, requested)


def find_convolution_forward_algorithm(handle, x_desc, w_desc, conv_desc, y_desc, requested=None,
                                       time_budget_s=None):
    """cudnnFindConvolutionForwardAlgorithm: times every usable algorithm on scratch buffers."""
    return find_algorithms(handle, "fwd", x_desc, w_desc, conv_desc, y_desc, requested, time_budget_s)


def find_convolution_forward_algorithm_ex(handle, x_desc, x, w_desc, w, conv_desc, y_desc, y,
                                          requested=None, workspace=None, time_budget_s=None):
    """cudnnFindConvolutionForwardAlgorithmEx: times on the caller's buffers (y is overwritten)."""
    return find_algorithms(handle, "fwd", x_desc, w_desc, conv_desc, y_desc, requested, time_budget_s,
                           {"x": x, "w": w, "y": y}, workspace)


# -- backward data (also the transposed convolution) -----------------------------------
def convolution_backward_data(handle, alpha, w_desc, w, dy_desc, dy, conv_desc, algo, workspace, beta,
                              dx_desc, dx):
    """cudnnConvolutionBackwardData: dx = alpha * conv^T(dy, w) + beta * dx, in place; returns dx.

    Also the transposed convolution: pass dx dims from
    ``descriptors.convolution.transposed_input_dims`` (with any output padding)."""
    return run(handle, "bwd_data", alpha, dx_desc, dx, w_desc, w, conv_desc, algo, workspace, beta,
               dy_desc, dy)


def get_convolution_backward_data_workspace_size(handle, w_desc, dy_desc, conv_desc, dx_desc, algo) -> int:
    return workspace_size(handle, "bwd_data", dx_desc, w_desc, conv_desc, dy_desc, algo)


def get_convolution_backward_data_algorithm(handle, w_desc, dy_desc, conv_desc, dx_desc, requested=None):
    """cudnnGetConvolutionBackwardDataAlgorithm_v7: ranked by the heuristic; runs nothing."""
    return get_algorithms(handle, "bwd_data", dx_desc, w_desc, conv_desc, dy_desc, requested)


def find_convolution_backward_data_algorithm(handle, w_desc, dy_desc, conv_desc, dx_desc, requested=None,
                                             time_budget_s=None):
    """cudnnFindConvolutionBackwardDataAlgorithm: times every usable algorithm on scratch buffers."""
    return find_algorithms(handle, "bwd_data", dx_desc, w_desc, conv_desc, dy_desc, requested,
                           time_budget_s)


def find_convolution_backward_data_algorithm_ex(handle, w_desc, w, dy_desc, dy, conv_desc, dx_desc, dx,
                                                requested=None, workspace=None, time_budget_s=None):
    """cudnnFindConvolutionBackwardDataAlgorithmEx: times on the caller's buffers (dx is overwritten)."""
    return find_algorithms(handle, "bwd_data", dx_desc, w_desc, conv_desc, dy_desc, requested,
                           time_budget_s, {"x": dx, "w": w, "y": dy}, workspace)


# -- backward filter -------------------------------------------------------------------
def convolution_backward_filter(handle, alpha, x_desc, x, dy_desc, dy, conv_desc, algo, workspace, beta,
                                dw_desc, dw):
    """cudnnConvolutionBackwardFilter: dw = alpha * sum_n x (*) dy + beta * dw, in place; returns dw."""
    return run(handle, "bwd_filter", alpha, x_desc, x, dw_desc, dw, conv_desc, algo, workspace, beta,
               dy_desc, dy)


def get_convolution_backward_filter_workspace_size(handle, x_desc, dy_desc, conv_desc, dw_desc, algo) -> int:
    return workspace_size(handle, "bwd_filter", x_desc, dw_desc, conv_desc, dy_desc, algo)


def get_convolution_backward_filter_algorithm(handle, x_desc, dy_desc, conv_desc, dw_desc, requested=None):
    """cudnnGetConvolutionBackwardFilterAlgorithm_v7: ranked by the heuristic; runs nothing."""
    return get_algorithms(handle, "bwd_filter", x_desc, dw_desc, conv_desc, dy_desc, requested)


def find_convolution_backward_filter_algorithm(handle, x_desc, dy_desc, conv_desc, dw_desc, requested=None,
                                               time_budget_s=None):
    """cudnnFindConvolutionBackwardFilterAlgorithm: times every usable algorithm on scratch buffers."""
    return find_algorithms(handle, "bwd_filter", x_desc, dw_desc, conv_desc, dy_desc, requested,
                           time_budget_s)


def find_convolution_backward_filter_algorithm_ex(handle, x_desc, x, dy_desc, dy, conv_desc, dw_desc, dw,
                                                  requested=None, workspace=None, time_budget_s=None):
    """cudnnFindConvolutionBackwardFilterAlgorithmEx: times on the caller's buffers (dw is overwritten)."""
    return find_algorithms(handle, "bwd_filter", x_desc, dw_desc, conv_desc, dy_desc, requested,
                           time_budget_s, {"x": x, "w": dw, "y": dy}, workspace)


# -- backward bias -----------------------------------------------------------------------
def _bias_dims(out_desc) -> tuple:
    return (1, out_desc.c) + (1,) * (out_desc.ndim - 2)


def convolution_backward_bias(handle, alpha, dy_desc, dy, beta, db_desc, db):
    """cudnnConvolutionBackwardBias: db = alpha * (dy summed over all but channels) + beta * db."""
    check_handle(handle)
    alpha = check_finite_scalar("alpha", alpha)
    beta = check_finite_scalar("beta", beta)
    if dy_desc.ndim < 3:
        raise BadParamError(f"dy needs 3 to 5 dims (N, K, *spatial), got dims {dy_desc.dims}")
    want = _bias_dims(dy_desc)
    if tuple(db_desc.dims) != want:
        raise BadParamError(f"db descriptor dims {db_desc.dims} do not match dy dims {dy_desc.dims}; "
                            f"valid: {want}")
    if db_desc.dtype != dy_desc.dtype:
        raise BadParamError(f"dtype mismatch: dy is {dy_desc.dtype.name}, db is {db_desc.dtype.name}")
    backend = handle.backend
    dy_view = backend.view(dy, dy_desc, "dy")
    db_view = backend.view(db, db_desc, "db", writable=True)
    if isinstance(db_view, np.ndarray) and np.may_share_memory(db_view, dy_view):
        raise BadParamError("output db overlaps input dy; pass separate buffers")
    kernel = getattr(backend, "conv_backward_bias", None)
    if kernel is None:
        if handle.backend_name != "numpy":
            raise NotSupportedError(f"convolution_backward_bias has no {handle.backend_name} "
                                    f"implementation")
        from ..cpu.conv_bwd_bias import backward_bias as kernel
    kernel(dy_view, db_view, alpha, beta)
    return db


# -- fused convolution + bias + activation ------------------------------------------------
def convolution_bias_activation_forward(handle, alpha1, x_desc, x, w_desc, w, conv_desc, algo, workspace,
                                        alpha2, z_desc, z, bias_desc, bias, activation_desc, y_desc, y):
    """cudnnConvolutionBiasActivationForward: y = act(alpha1 * conv(x, w) + alpha2 * z + bias).

    The sum and the activation run in the forward algorithm's epilogue, on its
    accumulator before the one rounding to y: no separate pass over y. z may be y
    itself (an in-place residual); with alpha2 == 0, z is not read and may be None.
    cuDNN allows RELU and IDENTITY here; tridnn also CLIPPED_RELU, SIGMOID, TANH, ELU,
    SWISH and GELU."""
    from ..cpu.epilogue import FUSED_MODES, bias_activation
    from ..descriptors.activation import ActivationDescriptor
    problem = _problem(handle, "fwd", x_desc, w_desc, conv_desc, y_desc)
    alpha1 = check_finite_scalar("alpha1", alpha1)
    alpha2 = check_finite_scalar("alpha2", alpha2)
    if not isinstance(activation_desc, ActivationDescriptor):
        raise BadParamError(f"activation_desc must be an ActivationDescriptor, got "
                            f"{type(activation_desc).__name__}")
    if activation_desc.mode not in FUSED_MODES:
        raise NotSupportedError(f"activation {activation_desc.mode.name} cannot be fused; valid: "
                                + ", ".join(m.name for m in FUSED_MODES))
    if tuple(bias_desc.dims) != _bias_dims(y_desc):
        raise BadParamError(f"bias descriptor dims {bias_desc.dims} do not match y dims {y_desc.dims}; "
                            f"valid: {_bias_dims(y_desc)}")
    use_z = alpha2 != 0.0
    if use_z:
        if z is None or z_desc is None:
            raise BadParamError("alpha2 is nonzero, so z and z_desc are required")
        if tuple(z_desc.dims) != tuple(y_desc.dims) or z_desc.dtype != y_desc.dtype:
            raise BadParamError(f"z descriptor (dims {z_desc.dims}, {z_desc.dtype.name}) must match y "
                                f"(dims {y_desc.dims}, {y_desc.dtype.name})")
    views = _views(handle, problem, {"x": x, "w": w, "y": y})
    backend = handle.backend
    bias_view = backend.view(bias, bias_desc, "bias")
    z_view = backend.view(z, z_desc, "z") if use_z else None
    _check_fused_aliasing(views["y"], z_view, bias_view)
    algorithm = _algorithm(handle, problem, algo)
    _check_workspace(handle, problem, algorithm, workspace)
    epilogue = bias_activation(activation_desc, bias_view, z_view, alpha2)
    if handle.backend_name == "triton":  # the Triton kernels fuse the declarative form
        from ..cuda.epilogue import EpilogueSpec
        epilogue.spec = EpilogueSpec(activation=activation_desc.mode, coef=activation_desc.coef,
                                     swish_beta=activation_desc.swish_beta, bias=bias_view, z=z_view,
                                     alpha2=alpha2 if z_view is not None else 0.0,
                                     propagate_nan=bool(activation_desc.propagate_nan))
    execute(handle, problem, algorithm, views, workspace, alpha1, 0.0, epilogue=epilogue)
    return y


def _check_fused_aliasing(y, z, bias) -> None:
    """z may be y itself (each output block reads its own z first), not a partial overlap."""
    if not isinstance(y, np.ndarray):
        return
    if np.may_share_memory(bias, y):
        raise BadParamError("output y overlaps input bias; pass separate buffers")
    if z is not None and np.may_share_memory(z, y):
        same = (z.shape == y.shape and z.strides == y.strides
                and z.__array_interface__["data"][0] == y.__array_interface__["data"][0])
        if not same:
            raise BadParamError("z partially overlaps y; pass z equal to y (in place) or a separate buffer")
