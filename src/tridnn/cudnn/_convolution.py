"""Convolution calls under cuDNN's names: algorithm queries, workspace sizes, execution.

C out-parameters are return values; the get/find calls return the list of perf
records (cuDNN's returnedAlgoCount is its length). Data buffers are arrays written in
place: a logical view matching the descriptor, or a C-contiguous buffer in the
descriptor's memory order (what a C pointer is).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..api import convolution as api
from ..descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor
from ..errors import BadParamError, Status, check_positive_int
from ..types import Determinism, MathType
from ._buffers import pointer
from ._descriptors import unwrap
from ._library import check_handle


@dataclass
class cudnnConvolutionAlgoPerf_t:
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t, plus ``reason`` when the status
    is not SUCCESS. ``time`` is in milliseconds (-1 when not supported); for the
    Get* calls it is the heuristic's estimate, not a measurement."""
    algo: object
    status: Status
    time: float
    memory: int
    determinism: Determinism
    mathType: MathType
    reason: str | None = None


cudnnConvolutionFwdAlgoPerf_t = cudnnConvolutionAlgoPerf_t
cudnnConvolutionBwdDataAlgoPerf_t = cudnnConvolutionAlgoPerf_t
cudnnConvolutionBwdFilterAlgoPerf_t = cudnnConvolutionAlgoPerf_t


def perf_records(results) -> list:
    return [cudnnConvolutionAlgoPerf_t(r.algo, r.status, r.time_ms, r.memory, r.determinism,
                                       r.math_type, r.reason) for r in results]


def descriptors(xDesc, wDesc, convDesc, yDesc, x_name="xDesc", w_name="wDesc", y_name="yDesc"):
    return (unwrap(xDesc, x_name, TensorDescriptor), unwrap(wDesc, w_name, FilterDescriptor),
            unwrap(convDesc, "convDesc", ConvolutionDescriptor), unwrap(yDesc, y_name, TensorDescriptor))


def workspace_slice(handle, workSpace, workSpaceSizeInBytes):
    """The first ``workSpaceSizeInBytes`` bytes of the caller's buffer (None when 0)."""
    size = check_positive_int("workSpaceSizeInBytes", workSpaceSizeInBytes, minimum=0)
    if size == 0:
        return None
    if workSpace is None:
        raise BadParamError(f"workSpace is None but workSpaceSizeInBytes is {size}")
    raw = handle.backend.workspace_bytes(workSpace)
    if raw.nbytes < size:
        raise BadParamError(f"workSpaceSizeInBytes={size} is larger than the workSpace buffer "
                            f"({raw.nbytes} bytes)")
    return raw[:size]


def requested_count(value) -> int:
    return check_positive_int("requestedAlgoCount", value)


# -- forward ------------------------------------------------------------------------------
def cudnnGetConvolutionForwardAlgorithmMaxCount(handle) -> int:
    check_handle(handle)
    return 8


def cudnnGetConvolutionForwardAlgorithm_v7(handle, srcDesc, filterDesc, convDesc, destDesc,
                                           requestedAlgoCount) -> list:
    """Perf records ranked by the heuristic (no kernel runs); unusable ones last."""
    x, w, c, y = descriptors(srcDesc, filterDesc, convDesc, destDesc, "srcDesc", "filterDesc", "destDesc")
    return perf_records(api.get_convolution_forward_algorithm(
        check_handle(handle), x, w, c, y, requested_count(requestedAlgoCount)))


def cudnnFindConvolutionForwardAlgorithm(handle, xDesc, wDesc, convDesc, yDesc,
                                         requestedAlgoCount) -> list:
    """Times every usable algorithm on scratch buffers; fastest first."""
    x, w, c, y = descriptors(xDesc, wDesc, convDesc, yDesc)
    return perf_records(api.find_convolution_forward_algorithm(
        check_handle(handle), x, w, c, y, requested_count(requestedAlgoCount)))


def cudnnFindConvolutionForwardAlgorithmEx(handle, xDesc, x, wDesc, w, convDesc, yDesc, y,
                                           requestedAlgoCount, workSpace, workSpaceSizeInBytes) -> list:
    """Times on the caller's buffers (y is overwritten), within the given workspace."""
    handle = check_handle(handle)
    xd, wd, c, yd = descriptors(xDesc, wDesc, convDesc, yDesc)
    ws = workspace_slice(handle, workSpace, workSpaceSizeInBytes)
    x, w, y = pointer(x, xd, "x"), pointer(w, wd, "w"), pointer(y, yd, "y")
    return perf_records(api.find_convolution_forward_algorithm_ex(
        handle, xd, x, wd, w, c, yd, y, requested_count(requestedAlgoCount),
        workspace=ws if ws is not None else handle.backend.workspace_bytes(None)))


def cudnnGetConvolutionForwardWorkspaceSize(handle, xDesc, wDesc, convDesc, yDesc, algo) -> int:
    x, w, c, y = descriptors(xDesc, wDesc, convDesc, yDesc)
    return api.get_convolution_forward_workspace_size(check_handle(handle), x, w, c, y, algo)


def cudnnConvolutionForward(handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace,
                            workSpaceSizeInBytes, beta, yDesc, y) -> None:
    """y = alpha * conv(x, w) + beta * y, written into y."""
    handle = check_handle(handle)
    xd, wd, c, yd = descriptors(xDesc, wDesc, convDesc, yDesc)
    ws = workspace_slice(handle, workSpace, workSpaceSizeInBytes)
    x, w, y = pointer(x, xd, "x"), pointer(w, wd, "w"), pointer(y, yd, "y")
    api.convolution_forward(handle, alpha, xd, x, wd, w, c, algo, ws, beta, yd, y)
