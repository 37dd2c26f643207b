"""The layers around convolution under cuDNN's names: activation, pooling, softmax,
batch normalization, LRN, dropout and the tensor operations.

Descriptors follow the convention of _descriptors.py (created empty, filled by Set*
calls that build the frozen tridnn descriptor); data buffers may be flat arrays read
through their descriptors, as C pointers are.
"""
from __future__ import annotations

from ..api import activation as activation_api
from ..api import dropout as dropout_api
from ..api import lrn as lrn_api
from ..api import normalization as bn_api
from ..api import pooling as pooling_api
from ..api import softmax as softmax_api
from ..api import tensor_ops as tensor_api
from ..descriptors import TensorDescriptor
from ..descriptors.activation import ActivationDescriptor
from ..descriptors.dropout import DropoutDescriptor, dropout_get_reserve_space_size, dropout_get_states_size
from ..descriptors.lrn import LRNDescriptor
from ..descriptors.normalization import derive_bn_tensor_descriptor
from ..descriptors.pooling import PoolingDescriptor
from ..descriptors.tensor_ops import OpTensorDescriptor, ReduceTensorDescriptor
from ..errors import BadParamError, check_positive_int
from ._buffers import pointer
from ._convolution import workspace_slice
from ._descriptors import _Descriptor, _expect, _ints, _nb_dims, cudnnTensorStruct, unwrap
from ._library import check_handle


def _tensor(desc, name):
    return unwrap(desc, name, TensorDescriptor)


def _data(array, desc, name):
    return pointer(array, desc, name)


# -- activation --------------------------------------------------------------------------------
class cudnnActivationStruct(_Descriptor):
    kind = "activation"
    setter = "cudnnSetActivationDescriptor"

    def __init__(self):
        super().__init__()
        self._fields = None


def cudnnCreateActivationDescriptor() -> cudnnActivationStruct:
    return cudnnActivationStruct()


def cudnnDestroyActivationDescriptor(activationDesc) -> None:
    _expect(activationDesc, cudnnActivationStruct, "activationDesc")._destroy()


def cudnnSetActivationDescriptor(activationDesc, mode, reluNanOpt, coef) -> None:
    """``coef``: the clipping ceiling (CLIPPED_RELU), alpha (ELU), ... (see tridnn's modes)."""
    d = _expect(activationDesc, cudnnActivationStruct, "activationDesc")
    beta = d._frozen.swish_beta if d._frozen is not None else 1.0
    d._set(ActivationDescriptor(mode, reluNanOpt, coef, beta))


def cudnnSetActivationDescriptorSwishBeta(activationDesc, swish_beta) -> None:
    d = _expect(activationDesc, cudnnActivationStruct, "activationDesc")
    old = d.desc
    d._set(ActivationDescriptor(old.mode, old.nan_opt, old.coef, swish_beta))


def cudnnGetActivationDescriptor(activationDesc):
    """-> (mode, reluNanOpt, coef)."""
    d = unwrap(activationDesc, "activationDesc", ActivationDescriptor)
    return d.mode, d.nan_opt, d.coef


def cudnnGetActivationDescriptorSwishBeta(activationDesc) -> float:
    return unwrap(activationDesc, "activationDesc", ActivationDescriptor).swish_beta


def cudnnActivationForward(handle, activationDesc, alpha, xDesc, x, beta, yDesc, y) -> None:
    xd, yd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc")
    activation_api.activation_forward(check_handle(handle), unwrap(activationDesc, "activationDesc",
                                                                   ActivationDescriptor),
                                      alpha, xd, _data(x, xd, "x"), beta, yd, _data(y, yd, "y"))


def cudnnActivationBackward(handle, activationDesc, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta, dxDesc,
                            dx) -> None:
    yd, dyd, xd, dxd = (_tensor(d, n) for d, n in ((yDesc, "yDesc"), (dyDesc, "dyDesc"),
                                                     (xDesc, "xDesc"), (dxDesc, "dxDesc")))
    activation_api.activation_backward(
        check_handle(handle), unwrap(activationDesc, "activationDesc", ActivationDescriptor), alpha,
        yd, _data(y, yd, "y"), dyd, _data(dy, dyd, "dy"), xd, _data(x, xd, "x"), beta, dxd,
        _data(dx, dxd, "dx"))


# -- pooling -------------------------------------------------------------------------------------
class cudnnPoolingStruct(_Descriptor):
    kind = "pooling"
    setter = "cudnnSetPooling2dDescriptor or cudnnSetPoolingNdDescriptor"


def cudnnCreatePoolingDescriptor() -> cudnnPoolingStruct:
    return cudnnPoolingStruct()


def cudnnDestroyPoolingDescriptor(poolingDesc) -> None:
    _expect(poolingDesc, cudnnPoolingStruct, "poolingDesc")._destroy()


def cudnnSetPooling2dDescriptor(poolingDesc, mode, maxpoolingNanOpt, windowHeight, windowWidth,
                                verticalPadding, horizontalPadding, verticalStride,
                                horizontalStride) -> None:
    _expect(poolingDesc, cudnnPoolingStruct, "poolingDesc")._set(PoolingDescriptor(
        mode, (windowHeight, windowWidth), (verticalPadding, horizontalPadding),
        (verticalStride, horizontalStride), maxpoolingNanOpt, nd=2))


def cudnnSetPoolingNdDescriptor(poolingDesc, mode, maxpoolingNanOpt, nbDims, windowDimA, paddingA,
                                strideA) -> None:
    nb = _nb_dims(nbDims, 1, 3)
    _expect(poolingDesc, cudnnPoolingStruct, "poolingDesc")._set(PoolingDescriptor(
        mode, _ints("windowDimA", windowDimA, nb), _ints("paddingA", paddingA, nb),
        _ints("strideA", strideA, nb), maxpoolingNanOpt, nd=nb))


def cudnnGetPooling2dDescriptor(poolingDesc):
    """-> (mode, maxpoolingNanOpt, windowHeight, windowWidth, verticalPadding,
    horizontalPadding, verticalStride, horizontalStride)."""
    p = unwrap(poolingDesc, "poolingDesc", PoolingDescriptor)
    if p.nd != 2:
        raise BadParamError(f"cudnnGetPooling2dDescriptor needs a 2-d pooling descriptor, this one has "
                            f"{p.nd} dims; use cudnnGetPoolingNdDescriptor")
    return (p.mode, p.nan_opt, *p.window, *p.padding, *p.stride)


def cudnnGetPoolingNdDescriptor(poolingDesc, nbDimsRequested):
    """-> (mode, maxpoolingNanOpt, nbDims, windowDimA, paddingA, strideA)."""
    p = unwrap(poolingDesc, "poolingDesc", PoolingDescriptor)
    req = check_positive_int("nbDimsRequested", nbDimsRequested)
    return (p.mode, p.nan_opt, p.nd, list(p.window[:req]), list(p.padding[:req]), list(p.stride[:req]))


def cudnnGetPooling2dForwardOutputDim(poolingDesc, inputTensorDesc):
    """-> (n, c, h, w)."""
    x = _tensor(inputTensorDesc, "inputTensorDesc")
    if x.ndim != 4:
        raise BadParamError(f"cudnnGetPooling2dForwardOutputDim needs a 4-d input, got dims {x.dims}")
    return tuple(pooling_api.get_pooling_forward_output_dim(
        unwrap(poolingDesc, "poolingDesc", PoolingDescriptor), x))


def cudnnGetPoolingNdForwardOutputDim(poolingDesc, inputTensorDesc, nbDims):
    x = _tensor(inputTensorDesc, "inputTensorDesc")
    if check_positive_int("nbDims", nbDims) != x.ndim:
        raise BadParamError(f"nbDims={nbDims} must equal the input's rank {x.ndim}")
    return tuple(pooling_api.get_pooling_forward_output_dim(
        unwrap(poolingDesc, "poolingDesc", PoolingDescriptor), x))


def cudnnPoolingForward(handle, poolingDesc, alpha, xDesc, x, beta, yDesc, y) -> None:
    xd, yd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc")
    pooling_api.pooling_forward(check_handle(handle), unwrap(poolingDesc, "poolingDesc", PoolingDescriptor),
                                alpha, xd, _data(x, xd, "x"), beta, yd, _data(y, yd, "y"))


def cudnnPoolingBackward(handle, poolingDesc, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta, dxDesc,
                         dx) -> None:
    yd, dyd, xd, dxd = (_tensor(d, n) for d, n in ((yDesc, "yDesc"), (dyDesc, "dyDesc"),
                                                     (xDesc, "xDesc"), (dxDesc, "dxDesc")))
    pooling_api.pooling_backward(
        check_handle(handle), unwrap(poolingDesc, "poolingDesc", PoolingDescriptor), alpha,
        yd, _data(y, yd, "y"), dyd, _data(dy, dyd, "dy"), xd, _data(x, xd, "x"), beta, dxd,
        _data(dx, dxd, "dx"))


# -- softmax -------------------------------------------------------------------------------------
def cudnnSoftmaxForward(handle, algorithm, mode, alpha, xDesc, x, beta, yDesc, y) -> None:
    xd, yd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc")
    softmax_api.softmax_forward(check_handle(handle), algorithm, mode, alpha, xd, _data(x, xd, "x"),
                                beta, yd, _data(y, yd, "y"))


def cudnnSoftmaxBackward(handle, algorithm, mode, alpha, yDesc, y, dyDesc, dy, beta, dxDesc, dx) -> None:
    yd, dyd, dxd = _tensor(yDesc, "yDesc"), _tensor(dyDesc, "dyDesc"), _tensor(dxDesc, "dxDesc")
    softmax_api.softmax_backward(check_handle(handle), algorithm, mode, alpha, yd, _data(y, yd, "y"),
                                 dyd, _data(dy, dyd, "dy"), beta, dxd, _data(dx, dxd, "dx"))


# -- batch normalization ------------------------------------------------------------------------
def cudnnDeriveBNTensorDescriptor(derivedBnDesc, xDesc, mode) -> None:
    """Fills ``derivedBnDesc`` with the scale/bias/mean/variance shape for x and mode."""
    _expect(derivedBnDesc, cudnnTensorStruct, "derivedBnDesc")._set(
        derive_bn_tensor_descriptor(_tensor(xDesc, "xDesc"), mode))


def _opt_tensor(desc, name):
    return None if desc is None else _tensor(desc, name)


def _opt_act(desc):
    return None if desc is None else unwrap(desc, "activationDesc", ActivationDescriptor)


def _reserve(handle, buffer, size_in_bytes):
    return workspace_slice(handle, buffer, size_in_bytes)


def cudnnBatchNormalizationForwardTraining(handle, mode, alpha, beta, xDesc, x, yDesc, y,
                                           bnScaleBiasMeanVarDesc, bnScale, bnBias,
                                           exponentialAverageFactor, resultRunningMean,
                                           resultRunningVariance, epsilon, resultSaveMean,
                                           resultSaveInvVariance) -> None:
    xd, yd, bd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc"), _tensor(bnScaleBiasMeanVarDesc,
                                                                           "bnScaleBiasMeanVarDesc")
    bn_api.batch_norm_forward_training(
        check_handle(handle), mode, alpha, beta, xd, _data(x, xd, "x"), yd, _data(y, yd, "y"), bd,
        _data(bnScale, bd, "bnScale"), _data(bnBias, bd, "bnBias"), exponentialAverageFactor,
        _data(resultRunningMean, bd, "resultRunningMean"),
        _data(resultRunningVariance, bd, "resultRunningVariance"), epsilon,
        _data(resultSaveMean, bd, "resultSaveMean"), _data(resultSaveInvVariance, bd, "resultSaveInvVariance"))


def cudnnBatchNormalizationForwardTrainingEx(handle, mode, bnOps, alpha, beta, xDesc, xData, zDesc, zData,
                                             yDesc, yData, bnScaleBiasMeanVarDesc, bnScale, bnBias,
                                             exponentialAverageFactor, resultRunningMean,
                                             resultRunningVariance, epsilon, resultSaveMean,
                                             resultSaveInvVariance, activationDesc, workspace,
                                             workSpaceSizeInBytes, reserveSpace,
                                             reserveSpaceSizeInBytes) -> None:
    handle = check_handle(handle)
    xd, yd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc")
    zd, bd = _opt_tensor(zDesc, "zDesc"), _tensor(bnScaleBiasMeanVarDesc, "bnScaleBiasMeanVarDesc")
    bn_api.batch_norm_forward_training_ex(
        handle, mode, bnOps, alpha, beta, xd, _data(xData, xd, "x"), zd,
        None if zd is None else _data(zData, zd, "z"), yd, _data(yData, yd, "y"), bd,
        _data(bnScale, bd, "bnScale"), _data(bnBias, bd, "bnBias"), exponentialAverageFactor,
        _data(resultRunningMean, bd, "resultRunningMean"),
        _data(resultRunningVariance, bd, "resultRunningVariance"), epsilon,
        _data(resultSaveMean, bd, "resultSaveMean"), _data(resultSaveInvVariance, bd, "resultSaveInvVariance"),
        _opt_act(activationDesc), workspace_slice(handle, workspace, workSpaceSizeInBytes),
        _reserve(handle, reserveSpace, reserveSpaceSizeInBytes))


def cudnnBatchNormalizationForwardInference(handle, mode, alpha, beta, xDesc, x, yDesc, y,
                                            bnScaleBiasMeanVarDesc, bnScale, bnBias, estimatedMean,
                                            estimatedVariance, epsilon) -> None:
    xd, yd, bd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc"), _tensor(bnScaleBiasMeanVarDesc,
                                                                           "bnScaleBiasMeanVarDesc")
    bn_api.batch_norm_forward_inference(
        check_handle(handle), mode, alpha, beta, xd, _data(x, xd, "x"), yd, _data(y, yd, "y"), bd,
        _data(bnScale, bd, "bnScale"), _data(bnBias, bd, "bnBias"),
        _data(estimatedMean, bd, "estimatedMean"), _data(estimatedVariance, bd, "estimatedVariance"),
        epsilon)


def cudnnBatchNormalizationBackward(handle, mode, alphaDataDiff, betaDataDiff, alphaParamDiff,
                                    betaParamDiff, xDesc, x, dyDesc, dy, dxDesc, dx, dBnScaleBiasDesc,
                                    bnScale, resultBnScaleDiff, resultBnBiasDiff, epsilon, savedMean,
                                    savedInvVariance) -> None:
    xd, dyd, dxd = _tensor(xDesc, "xDesc"), _tensor(dyDesc, "dyDesc"), _tensor(dxDesc, "dxDesc")
    bd = _tensor(dBnScaleBiasDesc, "dBnScaleBiasDesc")
    bn_api.batch_norm_backward(
        check_handle(handle), mode, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
        xd, _data(x, xd, "x"), dyd, _data(dy, dyd, "dy"), dxd, _data(dx, dxd, "dx"), bd,
        _data(bnScale, bd, "bnScale"), _data(resultBnScaleDiff, bd, "resultBnScaleDiff"),
        _data(resultBnBiasDiff, bd, "resultBnBiasDiff"), epsilon, _data(savedMean, bd, "savedMean"),
        _data(savedInvVariance, bd, "savedInvVariance"))


def cudnnBatchNormalizationBackwardEx(handle, mode, bnOps, alphaDataDiff, betaDataDiff, alphaParamDiff,
                                      betaParamDiff, xDesc, xData, yDesc, yData, dyDesc, dyData, dzDesc,
                                      dzData, dxDesc, dxData, dBnScaleBiasDesc, bnScaleData, bnBiasData,
                                      dBnScaleData, dBnBiasData, epsilon, savedMean, savedInvVariance,
                                      activationDesc, workSpace, workSpaceSizeInBytes, reserveSpace,
                                      reserveSpaceSizeInBytes) -> None:
    handle = check_handle(handle)
    xd, dyd, dxd = _tensor(xDesc, "xDesc"), _tensor(dyDesc, "dyDesc"), _tensor(dxDesc, "dxDesc")
    yd, dzd = _opt_tensor(yDesc, "yDesc"), _opt_tensor(dzDesc, "dzDesc")
    bd = _tensor(dBnScaleBiasDesc, "dBnScaleBiasDesc")
    bn_api.batch_norm_backward_ex(
        handle, mode, bnOps, alphaDataDiff, betaDataDiff, alphaParamDiff, betaParamDiff,
        xd, _data(xData, xd, "x"), yd, None if yd is None else _data(yData, yd, "y"),
        dyd, _data(dyData, dyd, "dy"), dzd, None if dzd is None else _data(dzData, dzd, "dz"),
        dxd, _data(dxData, dxd, "dx"), bd, _data(bnScaleData, bd, "bnScale"),
        _data(bnBiasData, bd, "bnBias"), _data(dBnScaleData, bd, "dBnScale"),
        _data(dBnBiasData, bd, "dBnBias"), epsilon, _data(savedMean, bd, "savedMean"),
        _data(savedInvVariance, bd, "savedInvVariance"), _opt_act(activationDesc),
        workspace_slice(handle, workSpace, workSpaceSizeInBytes),
        _reserve(handle, reserveSpace, reserveSpaceSizeInBytes))


def cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, bnOps, xDesc, zDesc, yDesc,
                                                             bnScaleBiasMeanVarDesc, activationDesc) -> int:
    return bn_api.get_batch_norm_forward_training_ex_workspace_size(
        check_handle(handle), mode, bnOps, _tensor(xDesc, "xDesc"), _opt_tensor(zDesc, "zDesc"),
        _tensor(yDesc, "yDesc"), _tensor(bnScaleBiasMeanVarDesc, "bnScaleBiasMeanVarDesc"),
        _opt_act(activationDesc))


def cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, bnOps, xDesc, yDesc, dyDesc, dzDesc,
                                                      dxDesc, dBnScaleBiasDesc, activationDesc) -> int:
    return bn_api.get_batch_norm_backward_ex_workspace_size(
        check_handle(handle), mode, bnOps, _tensor(xDesc, "xDesc"), _opt_tensor(yDesc, "yDesc"),
        _tensor(dyDesc, "dyDesc"), _opt_tensor(dzDesc, "dzDesc"), _tensor(dxDesc, "dxDesc"),
        _tensor(dBnScaleBiasDesc, "dBnScaleBiasDesc"), _opt_act(activationDesc))


def cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, bnOps, activationDesc, xDesc) -> int:
    return bn_api.get_batch_norm_training_ex_reserve_space_size(
        check_handle(handle), mode, bnOps, _opt_act(activationDesc), _tensor(xDesc, "xDesc"))


# -- LRN -------------------------------------------------------------------------------------------
class cudnnLRNStruct(_Descriptor):
    """Created with cuDNN's defaults (n=5, alpha=1e-4, beta=0.75, k=2), usable before a Set."""
    kind = "LRN"
    setter = "cudnnSetLRNDescriptor"

    def __init__(self):
        super().__init__()
        self._frozen = LRNDescriptor()


def cudnnCreateLRNDescriptor() -> cudnnLRNStruct:
    return cudnnLRNStruct()


def cudnnDestroyLRNDescriptor(lrnDesc) -> None:
    _expect(lrnDesc, cudnnLRNStruct, "lrnDesc")._destroy()


def cudnnSetLRNDescriptor(normDesc, lrnN, lrnAlpha, lrnBeta, lrnK) -> None:
    _expect(normDesc, cudnnLRNStruct, "normDesc")._set(LRNDescriptor(lrnN, lrnAlpha, lrnBeta, lrnK))


def cudnnGetLRNDescriptor(normDesc):
    """-> (lrnN, lrnAlpha, lrnBeta, lrnK)."""
    d = unwrap(normDesc, "normDesc", LRNDescriptor)
    return d.n, d.alpha, d.beta, d.k


def cudnnLRNCrossChannelForward(handle, normDesc, lrnMode, alpha, xDesc, x, beta, yDesc, y) -> None:
    xd, yd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc")
    lrn_api.lrn_cross_channel_forward(check_handle(handle), unwrap(normDesc, "normDesc", LRNDescriptor),
                                      lrnMode, alpha, xd, _data(x, xd, "x"), beta, yd, _data(y, yd, "y"))


def cudnnLRNCrossChannelBackward(handle, normDesc, lrnMode, alpha, yDesc, y, dyDesc, dy, xDesc, x, beta,
                                 dxDesc, dx) -> None:
    yd, dyd, xd, dxd = (_tensor(d, n) for d, n in ((yDesc, "yDesc"), (dyDesc, "dyDesc"),
                                                     (xDesc, "xDesc"), (dxDesc, "dxDesc")))
    lrn_api.lrn_cross_channel_backward(
        check_handle(handle), unwrap(normDesc, "normDesc", LRNDescriptor), lrnMode, alpha,
        yd, _data(y, yd, "y"), dyd, _data(dy, dyd, "dy"), xd, _data(x, xd, "x"), beta, dxd,
        _data(dx, dxd, "dx"))


# -- dropout -----------------------------------------------------------------------------------------
class cudnnDropoutStruct(_Descriptor):
    kind = "dropout"
    setter = "cudnnSetDropoutDescriptor"


def cudnnCreateDropoutDescriptor() -> cudnnDropoutStruct:
    return cudnnDropoutStruct()


def cudnnDestroyDropoutDescriptor(dropoutDesc) -> None:
    _expect(dropoutDesc, cudnnDropoutStruct, "dropoutDesc")._destroy()


def cudnnDropoutGetStatesSize(handle) -> int:
    return dropout_get_states_size(check_handle(handle))


def cudnnDropoutGetReserveSpaceSize(xDesc) -> int:
    return dropout_get_reserve_space_size(_tensor(xDesc, "xDesc"))


def _states(states, stateSizeInBytes):
    size = check_positive_int("stateSizeInBytes", stateSizeInBytes, minimum=0)
    if states is not None and getattr(states, "nbytes", 0) < size:
        raise BadParamError(f"stateSizeInBytes={size} is larger than the states buffer "
                            f"({getattr(states, 'nbytes', 0)} bytes)")
    return states


def cudnnSetDropoutDescriptor(dropoutDesc, handle, dropout, states, stateSizeInBytes, seed) -> None:
    """Initializes ``states`` (a uint8 array of cudnnDropoutGetStatesSize bytes) from ``seed``."""
    check_handle(handle)
    _expect(dropoutDesc, cudnnDropoutStruct, "dropoutDesc")._set(
        DropoutDescriptor(dropout, seed, _states(states, stateSizeInBytes)))


def cudnnRestoreDropoutDescriptor(dropoutDesc, handle, dropout, states, stateSizeInBytes, seed) -> None:
    """Takes ``states`` as they are (a descriptor set up earlier with them continues)."""
    check_handle(handle)
    _expect(dropoutDesc, cudnnDropoutStruct, "dropoutDesc")._set(
        DropoutDescriptor.restore(dropout, _states(states, stateSizeInBytes), seed))


def cudnnGetDropoutDescriptor(dropoutDesc, handle):
    """-> (dropout, states, seed)."""
    check_handle(handle)
    d = unwrap(dropoutDesc, "dropoutDesc", DropoutDescriptor)
    return d.probability, d.states, d.seed


def cudnnDropoutForward(handle, dropoutDesc, xdesc, x, ydesc, y, reserveSpace,
                        reserveSpaceSizeInBytes) -> None:
    handle = check_handle(handle)
    xd, yd = _tensor(xdesc, "xdesc"), _tensor(ydesc, "ydesc")
    dropout_api.dropout_forward(handle, unwrap(dropoutDesc, "dropoutDesc", DropoutDescriptor), xd,
                                _data(x, xd, "x"), yd, _data(y, yd, "y"),
                                _reserve(handle, reserveSpace, reserveSpaceSizeInBytes))


def cudnnDropoutBackward(handle, dropoutDesc, dydesc, dy, dxdesc, dx, reserveSpace,
                         reserveSpaceSizeInBytes) -> None:
    handle = check_handle(handle)
    dyd, dxd = _tensor(dydesc, "dydesc"), _tensor(dxdesc, "dxdesc")
    dropout_api.dropout_backward(handle, unwrap(dropoutDesc, "dropoutDesc", DropoutDescriptor), dyd,
                                 _data(dy, dyd, "dy"), dxd, _data(dx, dxd, "dx"),
                                 _reserve(handle, reserveSpace, reserveSpaceSizeInBytes))


# -- tensor operations ------------------------------------------------------------------------------
class cudnnOpTensorStruct(_Descriptor):
    kind = "op-tensor"
    setter = "cudnnSetOpTensorDescriptor"


class cudnnReduceTensorStruct(_Descriptor):
    kind = "reduce-tensor"
    setter = "cudnnSetReduceTensorDescriptor"


def cudnnCreateOpTensorDescriptor() -> cudnnOpTensorStruct:
    return cudnnOpTensorStruct()


def cudnnDestroyOpTensorDescriptor(opTensorDesc) -> None:
    _expect(opTensorDesc, cudnnOpTensorStruct, "opTensorDesc")._destroy()


def cudnnSetOpTensorDescriptor(opTensorDesc, opTensorOp, opTensorCompType, opTensorNanOpt) -> None:
    _expect(opTensorDesc, cudnnOpTensorStruct, "opTensorDesc")._set(
        OpTensorDescriptor(opTensorOp, opTensorCompType, opTensorNanOpt))


def cudnnGetOpTensorDescriptor(opTensorDesc):
    """-> (opTensorOp, opTensorCompType, opTensorNanOpt)."""
    d = unwrap(opTensorDesc, "opTensorDesc", OpTensorDescriptor)
    return d.op, d.comp_type, d.nan_opt


def cudnnCreateReduceTensorDescriptor() -> cudnnReduceTensorStruct:
    return cudnnReduceTensorStruct()


def cudnnDestroyReduceTensorDescriptor(reduceTensorDesc) -> None:
    _expect(reduceTensorDesc, cudnnReduceTensorStruct, "reduceTensorDesc")._destroy()


def cudnnSetReduceTensorDescriptor(reduceTensorDesc, reduceTensorOp, reduceTensorCompType,
                                   reduceTensorNanOpt, reduceTensorIndices,
                                   reduceTensorIndicesType) -> None:
    _expect(reduceTensorDesc, cudnnReduceTensorStruct, "reduceTensorDesc")._set(ReduceTensorDescriptor(
        reduceTensorOp, reduceTensorCompType, reduceTensorNanOpt, reduceTensorIndices,
        reduceTensorIndicesType))


def cudnnGetReduceTensorDescriptor(reduceTensorDesc):
    """-> (reduceTensorOp, reduceTensorCompType, reduceTensorNanOpt, reduceTensorIndices,
    reduceTensorIndicesType)."""
    d = unwrap(reduceTensorDesc, "reduceTensorDesc", ReduceTensorDescriptor)
    return d.op, d.comp_type, d.nan_opt, d.indices, d.indices_type


def cudnnAddTensor(handle, alpha, aDesc, A, beta, cDesc, C) -> None:
    """C = alpha * A + beta * C, A broadcast over C's dims where A has 1."""
    ad, cd = _tensor(aDesc, "aDesc"), _tensor(cDesc, "cDesc")
    tensor_api.add_tensor(check_handle(handle), alpha, ad, _data(A, ad, "A"), beta, cd, _data(C, cd, "C"))


def cudnnOpTensor(handle, opTensorDesc, alpha1, aDesc, A, alpha2, bDesc, B, beta, cDesc, C) -> None:
    ad, bd, cd = _tensor(aDesc, "aDesc"), _tensor(bDesc, "bDesc"), _tensor(cDesc, "cDesc")
    tensor_api.op_tensor(check_handle(handle), unwrap(opTensorDesc, "opTensorDesc", OpTensorDescriptor),
                         alpha1, ad, _data(A, ad, "A"), alpha2, bd, _data(B, bd, "B"), beta, cd,
                         _data(C, cd, "C"))


def cudnnGetReductionIndicesSize(handle, reduceTensorDesc, aDesc, cDesc) -> int:
    return tensor_api.get_reduction_indices_size(
        check_handle(handle), unwrap(reduceTensorDesc, "reduceTensorDesc", ReduceTensorDescriptor),
        _tensor(aDesc, "aDesc"), _tensor(cDesc, "cDesc"))


def cudnnGetReductionWorkspaceSize(handle, reduceTensorDesc, aDesc, cDesc) -> int:
    return tensor_api.get_reduction_workspace_size(
        check_handle(handle), unwrap(reduceTensorDesc, "reduceTensorDesc", ReduceTensorDescriptor),
        _tensor(aDesc, "aDesc"), _tensor(cDesc, "cDesc"))


def cudnnReduceTensor(handle, reduceTensorDesc, indices, indicesSizeInBytes, workspace,
                      workspaceSizeInBytes, alpha, aDesc, A, beta, cDesc, C) -> None:
    """C = alpha * reduce(A) + beta * C over the dims where C is 1; indices (uint32) for
    MIN/MAX/AMAX with CUDNN_REDUCE_TENSOR_FLATTENED_INDICES."""
    handle = check_handle(handle)
    ad, cd = _tensor(aDesc, "aDesc"), _tensor(cDesc, "cDesc")
    tensor_api.reduce_tensor(handle, unwrap(reduceTensorDesc, "reduceTensorDesc", ReduceTensorDescriptor),
                             workspace_slice(handle, indices, indicesSizeInBytes),
                             workspace_slice(handle, workspace, workspaceSizeInBytes)
                             if workspaceSizeInBytes else handle.backend.workspace_bytes(None),
                             alpha, ad, _data(A, ad, "A"), beta, cd, _data(C, cd, "C"))


def cudnnTransformTensor(handle, alpha, xDesc, x, beta, yDesc, y) -> None:
    """y = alpha * x + beta * y between any two layouts of the same dims."""
    xd, yd = _tensor(xDesc, "xDesc"), _tensor(yDesc, "yDesc")
    tensor_api.transform_tensor(check_handle(handle), alpha, xd, _data(x, xd, "x"), beta, yd,
                                _data(y, yd, "y"))


def cudnnSetTensor(handle, yDesc, y, valuePtr) -> None:
    """Every element of y = value (``valuePtr`` is the value itself)."""
    yd = _tensor(yDesc, "yDesc")
    tensor_api.set_tensor(check_handle(handle), yd, _data(y, yd, "y"), valuePtr)


def cudnnScaleTensor(handle, yDesc, y, alpha) -> None:
    yd = _tensor(yDesc, "yDesc")
    tensor_api.scale_tensor(check_handle(handle), yd, _data(y, yd, "y"), alpha)


__all__ = [name for name in dir() if name.startswith("cudnn")]
