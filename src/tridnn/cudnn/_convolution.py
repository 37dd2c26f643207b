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
from ..types import ConvBwdDataAlgo, ConvBwdFilterAlgo, ConvFwdAlgo, Determinism, MathType
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


def find_workspace(handle, ws):
    """The workspace a Find*Ex call times within: the caller's slice, or an empty buffer
    when it gave 0 bytes (None would let find use the handle's own workspace limit)."""
    return ws if ws is not None else handle.backend.workspace_bytes(None)


def requested_count(value) -> int:
    return check_positive_int("requestedAlgoCount", value)


# -- forward ------------------------------------------------------------------------------
def cudnnGetConvolutionForwardAlgorithmMaxCount(handle) -> int:
    check_handle(handle)
    return len(ConvFwdAlgo)


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
        workspace=find_workspace(handle, ws)))


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


# -- backward data -----------------------------------------------------------------------------
def cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle) -> int:
    check_handle(handle)
    return len(ConvBwdDataAlgo)


def _bwd_data_descs(wDesc, dyDesc, convDesc, dxDesc):
    dx, w, c, dy = descriptors(dxDesc, wDesc, convDesc, dyDesc, "dxDesc", "wDesc", "dyDesc")
    return w, dy, c, dx


def cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, filterDesc, diffDesc, convDesc, gradDesc,
                                                requestedAlgoCount) -> list:
    w, dy, c, dx = _bwd_data_descs(filterDesc, diffDesc, convDesc, gradDesc)
    return perf_records(api.get_convolution_backward_data_algorithm(
        check_handle(handle), w, dy, c, dx, requested_count(requestedAlgoCount)))


def cudnnFindConvolutionBackwardDataAlgorithm(handle, wDesc, dyDesc, convDesc, dxDesc,
                                              requestedAlgoCount) -> list:
    w, dy, c, dx = _bwd_data_descs(wDesc, dyDesc, convDesc, dxDesc)
    return perf_records(api.find_convolution_backward_data_algorithm(
        check_handle(handle), w, dy, c, dx, requested_count(requestedAlgoCount)))


def cudnnFindConvolutionBackwardDataAlgorithmEx(handle, wDesc, w, dyDesc, dy, convDesc, dxDesc, dx,
                                                requestedAlgoCount, workSpace, workSpaceSizeInBytes) -> list:
    handle = check_handle(handle)
    wd, dyd, c, dxd = _bwd_data_descs(wDesc, dyDesc, convDesc, dxDesc)
    ws = workspace_slice(handle, workSpace, workSpaceSizeInBytes)
    w, dy, dx = pointer(w, wd, "w"), pointer(dy, dyd, "dy"), pointer(dx, dxd, "dx")
    return perf_records(api.find_convolution_backward_data_algorithm_ex(
        handle, wd, w, dyd, dy, c, dxd, dx, requested_count(requestedAlgoCount),
        workspace=find_workspace(handle, ws)))


def cudnnGetConvolutionBackwardDataWorkspaceSize(handle, wDesc, dyDesc, convDesc, dxDesc, algo) -> int:
    w, dy, c, dx = _bwd_data_descs(wDesc, dyDesc, convDesc, dxDesc)
    return api.get_convolution_backward_data_workspace_size(check_handle(handle), w, dy, c, dx, algo)


def cudnnConvolutionBackwardData(handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace,
                                 workSpaceSizeInBytes, beta, dxDesc, dx) -> None:
    """dx = alpha * conv^T(dy, w) + beta * dx, written into dx."""
    handle = check_handle(handle)
    wd, dyd, c, dxd = _bwd_data_descs(wDesc, dyDesc, convDesc, dxDesc)
    ws = workspace_slice(handle, workSpace, workSpaceSizeInBytes)
    w, dy, dx = pointer(w, wd, "w"), pointer(dy, dyd, "dy"), pointer(dx, dxd, "dx")
    api.convolution_backward_data(handle, alpha, wd, w, dyd, dy, c, algo, ws, beta, dxd, dx)


# -- backward filter ---------------------------------------------------------------------------
def cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle) -> int:
    check_handle(handle)
    return len(ConvBwdFilterAlgo)


def _bwd_filter_descs(xDesc, dyDesc, convDesc, dwDesc):
    x, dw, c, dy = descriptors(xDesc, dwDesc, convDesc, dyDesc, "xDesc", "dwDesc", "dyDesc")
    return x, dy, c, dw


def cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, srcDesc, diffDesc, convDesc, gradDesc,
                                                  requestedAlgoCount) -> list:
    x, dy, c, dw = _bwd_filter_descs(srcDesc, diffDesc, convDesc, gradDesc)
    return perf_records(api.get_convolution_backward_filter_algorithm(
        check_handle(handle), x, dy, c, dw, requested_count(requestedAlgoCount)))


def cudnnFindConvolutionBackwardFilterAlgorithm(handle, xDesc, dyDesc, convDesc, dwDesc,
                                                requestedAlgoCount) -> list:
    x, dy, c, dw = _bwd_filter_descs(xDesc, dyDesc, convDesc, dwDesc)
    return perf_records(api.find_convolution_backward_filter_algorithm(
        check_handle(handle), x, dy, c, dw, requested_count(requestedAlgoCount)))


def cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, xDesc, x, dyDesc, y, convDesc, dwDesc, dw,
                                                  requestedAlgoCount, workSpace,
                                                  workSpaceSizeInBytes) -> list:
    """(cuDNN names the dy buffer ``y`` here.)"""
    handle = check_handle(handle)
    xd, dyd, c, dwd = _bwd_filter_descs(xDesc, dyDesc, convDesc, dwDesc)
    ws = workspace_slice(handle, workSpace, workSpaceSizeInBytes)
    x, dy, dw = pointer(x, xd, "x"), pointer(y, dyd, "dy"), pointer(dw, dwd, "dw")
    return perf_records(api.find_convolution_backward_filter_algorithm_ex(
        handle, xd, x, dyd, dy, c, dwd, dw, requested_count(requestedAlgoCount),
        workspace=find_workspace(handle, ws)))


def cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, xDesc, dyDesc, convDesc, gradDesc, algo) -> int:
    x, dy, c, dw = _bwd_filter_descs(xDesc, dyDesc, convDesc, gradDesc)
    return api.get_convolution_backward_filter_workspace_size(check_handle(handle), x, dy, c, dw, algo)


def cudnnConvolutionBackwardFilter(handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace,
                                   workSpaceSizeInBytes, beta, dwDesc, dw) -> None:
    """dw = alpha * (x correlated with dy, summed over the batch) + beta * dw, written into dw."""
    handle = check_handle(handle)
    xd, dyd, c, dwd = _bwd_filter_descs(xDesc, dyDesc, convDesc, dwDesc)
    ws = workspace_slice(handle, workSpace, workSpaceSizeInBytes)
    x, dy, dw = pointer(x, xd, "x"), pointer(dy, dyd, "dy"), pointer(dw, dwd, "dw")
    api.convolution_backward_filter(handle, alpha, xd, x, dyd, dy, c, algo, ws, beta, dwd, dw)


# -- bias ----------------------------------------------------------------------------------------
def cudnnConvolutionBackwardBias(handle, alpha, dyDesc, dy, beta, dbDesc, db) -> None:
    """db = alpha * (dy summed over all dims but channels) + beta * db."""
    handle = check_handle(handle)
    dyd = unwrap(dyDesc, "dyDesc", TensorDescriptor)
    dbd = unwrap(dbDesc, "dbDesc", TensorDescriptor)
    api.convolution_backward_bias(handle, alpha, dyd, pointer(dy, dyd, "dy"), beta, dbd,
                                  pointer(db, dbd, "db"))


def cudnnConvolutionBiasActivationForward(handle, alpha1, xDesc, x, wDesc, w, convDesc, algo,
                                          workSpace, workSpaceSizeInBytes, alpha2, zDesc, z, biasDesc,
                                          bias, activationDesc, yDesc, y) -> None:
    """y = act(alpha1 * conv(x, w) + alpha2 * z + bias), fused; z may be y itself."""
    from ..descriptors.activation import ActivationDescriptor
    handle = check_handle(handle)
    xd, wd, c, yd = descriptors(xDesc, wDesc, convDesc, yDesc)
    zd = unwrap(zDesc, "zDesc", TensorDescriptor) if zDesc is not None else None
    bd = unwrap(biasDesc, "biasDesc", TensorDescriptor)
    act = unwrap(activationDesc, "activationDesc", ActivationDescriptor)
    ws = workspace_slice(handle, workSpace, workSpaceSizeInBytes)
    x, w, y = pointer(x, xd, "x"), pointer(w, wd, "w"), pointer(y, yd, "y")
    z = y if z is not None and z is y else (pointer(z, zd, "z") if zd is not None else z)
    api.convolution_bias_activation_forward(handle, alpha1, xd, x, wd, w, c, algo, ws, alpha2, zd, z,
                                            bd, pointer(bias, bd, "bias"), act, yd, y)


__all__ = [name for name in dir() if name.startswith("cudnn")]
