"""tridnn.cudnn: cuDNN's C names. The first test is the canonical forward-convolution
walkthrough, transliterated line by line from C; the rest pin the conventions."""
import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.cudnn import *  # noqa: F403 - the point is that C code ports with these names
from tridnn.algorithms import registry
from tridnn.errors import BadParamError, NotInitializedError, NotSupportedError


def exact(algo):
    """Direct and GEMM methods are exact on integer fills; transform methods get a tolerance."""
    return getattr(registry.by_enum("conv", "fwd", "numpy", algo), "exact", False)


def test_forward_convolution_walkthrough(rng):
    # cudnnHandle_t cudnn; cudnnCreate(&cudnn);
    cudnn = cudnnCreate()

    # cudnnTensorDescriptor_t input_descriptor; cudnnCreateTensorDescriptor(&input_descriptor);
    input_descriptor = cudnnCreateTensorDescriptor()
    # cudnnSetTensor4dDescriptor(input_descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
    #                            /*batch_size=*/2, /*channels=*/3, /*image_height=*/9, /*image_width=*/8);
    cudnnSetTensor4dDescriptor(input_descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 9, 8)

    # cudnnFilterDescriptor_t kernel_descriptor; cudnnCreateFilterDescriptor(&kernel_descriptor);
    kernel_descriptor = cudnnCreateFilterDescriptor()
    # cudnnSetFilter4dDescriptor(kernel_descriptor, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
    #                            /*out_channels=*/4, /*in_channels=*/3, /*kernel_height=*/3, /*kernel_width=*/3);
    cudnnSetFilter4dDescriptor(kernel_descriptor, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 3, 3, 3)

    # cudnnConvolutionDescriptor_t convolution_descriptor;
    # cudnnCreateConvolutionDescriptor(&convolution_descriptor);
    convolution_descriptor = cudnnCreateConvolutionDescriptor()
    # cudnnSetConvolution2dDescriptor(convolution_descriptor, /*pad_height=*/1, /*pad_width=*/2,
    #     /*vertical_stride=*/2, /*horizontal_stride=*/1, /*dilation_height=*/1, /*dilation_width=*/2,
    #     /*mode=*/CUDNN_CROSS_CORRELATION, /*computeType=*/CUDNN_DATA_FLOAT);
    cudnnSetConvolution2dDescriptor(convolution_descriptor, 1, 2, 2, 1, 1, 2,
                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)

    # int batch_size{0}, channels{0}, height{0}, width{0};
    # cudnnGetConvolution2dForwardOutputDim(convolution_descriptor, input_descriptor,
    #                                       kernel_descriptor, &batch_size, &channels, &height, &width);
    batch_size, channels, height, width = cudnnGetConvolution2dForwardOutputDim(
        convolution_descriptor, input_descriptor, kernel_descriptor)
    assert (batch_size, channels, height, width) == (2, 4, 5, 8)

    # cudnnTensorDescriptor_t output_descriptor; cudnnCreateTensorDescriptor(&output_descriptor);
    output_descriptor = cudnnCreateTensorDescriptor()
    # cudnnSetTensor4dDescriptor(output_descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
    #                            batch_size, channels, height, width);
    cudnnSetTensor4dDescriptor(output_descriptor, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                               batch_size, channels, height, width)

    # cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT]; int returned;
    # cudnnGetConvolutionForwardAlgorithm_v7(cudnn, input_descriptor, kernel_descriptor,
    #     convolution_descriptor, output_descriptor, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf);
    perf = cudnnGetConvolutionForwardAlgorithm_v7(cudnn, input_descriptor, kernel_descriptor,
                                                  convolution_descriptor, output_descriptor,
                                                  CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
    returned = len(perf)
    assert 1 <= returned <= CUDNN_CONVOLUTION_FWD_ALGO_COUNT
    # cudnnConvolutionFwdAlgo_t convolution_algorithm = perf[0].algo;
    assert perf[0].status == CUDNN_STATUS_SUCCESS
    convolution_algorithm = perf[0].algo

    # size_t workspace_bytes = 0;
    # cudnnGetConvolutionForwardWorkspaceSize(cudnn, input_descriptor, kernel_descriptor,
    #     convolution_descriptor, output_descriptor, convolution_algorithm, &workspace_bytes);
    workspace_bytes = cudnnGetConvolutionForwardWorkspaceSize(
        cudnn, input_descriptor, kernel_descriptor, convolution_descriptor, output_descriptor,
        convolution_algorithm)
    assert workspace_bytes == perf[0].memory

    # void* d_workspace{nullptr}; cudaMalloc(&d_workspace, workspace_bytes);
    d_workspace = np.empty(workspace_bytes, np.uint8)
    # int image_bytes = batch_size * channels * height * width * sizeof(float);
    # float* d_input; cudaMalloc(&d_input, ...); cudaMemcpy(d_input, image.ptr<float>(0), ...);
    image = testing.fill((2, 3, 9, 8), "float32", rng)
    d_input = image.copy()
    # float h_kernel[4][3][3][3] = ...; float* d_kernel; cudaMalloc(...); cudaMemcpy(...);
    h_kernel = testing.fill((4, 3, 3, 3), "float32", rng)
    d_kernel = h_kernel.copy()
    # float* d_output; cudaMalloc(&d_output, image_bytes); cudaMemset(d_output, 0, image_bytes);
    d_output = np.zeros(batch_size * channels * height * width, np.float32)  # a raw buffer
    prior = testing.fill((2, 4, 5, 8), "float32", rng)
    d_output[...] = prior.reshape(-1)

    # const float alpha = 2.0f, beta = 0.5f;
    alpha, beta = 2.0, 0.5
    # cudnnConvolutionForward(cudnn, &alpha, input_descriptor, d_input, kernel_descriptor, d_kernel,
    #     convolution_descriptor, convolution_algorithm, d_workspace, workspace_bytes, &beta,
    #     output_descriptor, d_output);
    cudnnConvolutionForward(cudnn, alpha, input_descriptor, d_input.reshape(-1), kernel_descriptor,
                            d_kernel.reshape(-1), convolution_descriptor, convolution_algorithm,
                            d_workspace, workspace_bytes, beta, output_descriptor, d_output)

    # float* h_output = new float[image_bytes]; cudaMemcpy(h_output, d_output, ...);
    h_output = d_output.reshape(batch_size, channels, height, width)
    ref = reference.conv_forward(image, h_kernel, (2, 1), (1, 2), None, (1, 2))
    testing.check_result(h_output, ref, "float32", exact(convolution_algorithm), alpha=alpha, beta=beta, prior=prior)

    # delete[] h_output; cudaFree(d_kernel); cudaFree(d_input); cudaFree(d_output); cudaFree(d_workspace);
    # cudnnDestroyTensorDescriptor(input_descriptor); cudnnDestroyTensorDescriptor(output_descriptor);
    # cudnnDestroyFilterDescriptor(kernel_descriptor);
    # cudnnDestroyConvolutionDescriptor(convolution_descriptor); cudnnDestroy(cudnn);
    cudnnDestroyTensorDescriptor(input_descriptor)
    cudnnDestroyTensorDescriptor(output_descriptor)
    cudnnDestroyFilterDescriptor(kernel_descriptor)
    cudnnDestroyConvolutionDescriptor(convolution_descriptor)
    cudnnDestroy(cudnn)

    # and everything destroyed is unusable
    with pytest.raises(NotInitializedError):
        cudnnGetTensor4dDescriptor(input_descriptor)
    with pytest.raises(NotInitializedError):
        cudnnGetConvolutionForwardWorkspaceSize(cudnn, input_descriptor, kernel_descriptor,
                                                convolution_descriptor, output_descriptor, 0)


@pytest.fixture
def cudnn():
    h = cudnnCreate(find_cache=None, find_time_budget_s=0.05)
    yield h
    if h._alive:
        cudnnDestroy(h)


def conv_setup(n=1, c=4, hw=(6, 5), k=6, kernel=(3, 3), groups=2, fmt=None, dtype=None):
    fmt = CUDNN_TENSOR_NCHW if fmt is None else fmt
    dtype = CUDNN_DATA_FLOAT if dtype is None else dtype
    x = cudnnCreateTensorDescriptor()
    cudnnSetTensor4dDescriptor(x, fmt, dtype, n, c, *hw)
    w = cudnnCreateFilterDescriptor()
    cudnnSetFilter4dDescriptor(w, dtype, fmt, k, c // groups, *kernel)
    conv = cudnnCreateConvolutionDescriptor()
    cudnnSetConvolutionGroupCount(conv, groups)  # before the geometry, as cuDNN allows
    cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT)
    y = cudnnCreateTensorDescriptor()
    cudnnSetTensor4dDescriptor(y, fmt, dtype, *cudnnGetConvolution2dForwardOutputDim(conv, x, w))
    return x, w, conv, y


def test_nhwc_grouped_convolution_mode_and_find(cudnn, rng):
    x_d, w_d, conv, y_d = conv_setup(fmt=CUDNN_TENSOR_NHWC)
    assert cudnnGetConvolutionGroupCount(conv) == 2
    x = testing.fill((1, 6, 5, 4), "float32", rng)       # raw NHWC buffers, as C pointers are
    w = testing.fill((6, 3, 3, 2), "float32", rng)       # KRSC
    y = np.full((1, 6, 5, 6), np.nan, np.float32)
    records = cudnnFindConvolutionForwardAlgorithm(cudnn, x_d, w_d, conv, y_d, 8)
    ok = [r for r in records if r.status == CUDNN_STATUS_SUCCESS]
    assert ok and all(r.time >= 0 for r in ok)
    assert [r.time for r in ok] == sorted(r.time for r in ok)
    assert all(r.reason for r in records if r.status != CUDNN_STATUS_SUCCESS)
    algo = ok[0].algo
    size = cudnnGetConvolutionForwardWorkspaceSize(cudnn, x_d, w_d, conv, y_d, algo)
    cudnnConvolutionForward(cudnn, 1.0, x_d, x, w_d, w, conv, algo, np.empty(size, np.uint8), size,
                            0.0, y_d, y)
    ref = reference.conv_forward(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), 1, 1, None, 1, 2,
                                 "convolution")
    testing.check_result(y.transpose(0, 3, 1, 2), ref, "float32", exact(algo))


def test_find_ex_uses_the_callers_buffers_and_workspace(cudnn, rng):
    x_d, w_d, conv, y_d = conv_setup(groups=1)
    x = testing.fill((1, 4, 6, 5), "float32", rng)
    w = testing.fill((6, 4, 3, 3), "float32", rng)
    y = np.full((1, 6, 6, 5), np.nan, np.float32)
    perf = cudnnGetConvolutionForwardAlgorithm_v7(cudnn, x_d, w_d, conv, y_d, 8)
    limit = min(r.memory for r in perf if r.status == CUDNN_STATUS_SUCCESS)
    workspace = np.empty(limit + 1000, np.uint8)
    records = cudnnFindConvolutionForwardAlgorithmEx(cudnn, x_d, x, w_d, w, conv, y_d, y, 3,
                                                     workspace, limit)
    assert 1 <= len(records) <= 3 and records[0].status == CUDNN_STATUS_SUCCESS
    for r in records:
        if r.status == CUDNN_STATUS_SUCCESS:
            assert r.memory <= limit  # only what fits in workSpaceSizeInBytes may run
        else:
            assert "workspace" in r.reason or r.reason
    testing.check_result(y, reference.conv_forward(x, w, 1, 1, None, 1, 1, "convolution"), "float32",
                         exact(records[0].algo))


def test_nd_descriptors_round_trip_and_3d_forward(cudnn, rng):
    x_d = cudnnCreateTensorDescriptor()
    cudnnSetTensorNdDescriptor(x_d, CUDNN_DATA_DOUBLE, 5, [2, 3, 4, 5, 6], [360, 120, 30, 6, 1])
    assert cudnnGetTensorNdDescriptor(x_d, 5) == (CUDNN_DATA_DOUBLE, 5, [2, 3, 4, 5, 6],
                                                  [360, 120, 30, 6, 1])
    assert cudnnGetTensorSizeInBytes(x_d) == 720 * 8
    w_d = cudnnCreateFilterDescriptor()
    cudnnSetFilterNdDescriptor(w_d, CUDNN_DATA_DOUBLE, CUDNN_TENSOR_NCHW, 5, [2, 3, 2, 3, 3])
    assert cudnnGetFilterNdDescriptor(w_d, 5) == (CUDNN_DATA_DOUBLE, CUDNN_TENSOR_NCHW, 5, [2, 3, 2, 3, 3])
    conv = cudnnCreateConvolutionDescriptor()
    cudnnSetConvolutionNdDescriptor(conv, 3, [0, 1, 1], [1, 2, 1], [1, 1, 2], CUDNN_CROSS_CORRELATION,
                                    CUDNN_DATA_DOUBLE)
    cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH)
    assert cudnnGetConvolutionMathType(conv) == CUDNN_FMA_MATH
    assert cudnnGetConvolutionNdDescriptor(conv, 3) == (3, [0, 1, 1], [1, 2, 1], [1, 1, 2],
                                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE)
    dims = cudnnGetConvolutionNdForwardOutputDim(conv, x_d, w_d, 5)
    assert dims == (2, 2, 3, 3, 4)
    y_d = cudnnCreateTensorDescriptor()
    cudnnSetTensorNdDescriptorEx(y_d, CUDNN_TENSOR_NCHW, CUDNN_DATA_DOUBLE, 5, dims)
    x = rng.standard_normal((2, 3, 4, 5, 6))
    w = rng.standard_normal((2, 3, 2, 3, 3))
    y = np.full(dims, np.nan)
    algo = cudnnGetConvolutionForwardAlgorithm_v7(cudnn, x_d, w_d, conv, y_d, 1)[0].algo
    size = cudnnGetConvolutionForwardWorkspaceSize(cudnn, x_d, w_d, conv, y_d, algo)
    cudnnConvolutionForward(cudnn, 1.0, x_d, x, w_d, w, conv, algo, np.empty(size, np.uint8), size,
                            0.0, y_d, y)
    testing.assert_close(y, reference.conv_forward(x, w, (1, 2, 1), (0, 1, 1), None, (1, 1, 2)),
                         "float64")


def test_4d_getters_and_ex_setter():
    t = cudnnCreateTensorDescriptor()
    cudnnSetTensor4dDescriptorEx(t, CUDNN_DATA_HALF, 2, 3, 4, 5, 100, 1, 25, 5)
    assert cudnnGetTensor4dDescriptor(t) == (CUDNN_DATA_HALF, 2, 3, 4, 5, 100, 1, 25, 5)
    cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, 2, 3, 4, 5)
    assert cudnnGetTensor4dDescriptor(t) == (CUDNN_DATA_BFLOAT16, 2, 3, 4, 5, 60, 1, 15, 3)
    f = cudnnCreateFilterDescriptor()
    cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 8, 3, 5, 5)
    assert cudnnGetFilter4dDescriptor(f) == (CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 8, 3, 5, 5)
    assert cudnnGetFilterSizeInBytes(f) == 8 * 3 * 25 * 4
    c = cudnnCreateConvolutionDescriptor()
    cudnnSetConvolution2dDescriptor(c, 0, 1, 2, 3, 1, 2, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT)
    assert cudnnGetConvolution2dDescriptor(c) == (0, 1, 2, 3, 1, 2, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT)


def test_constants_have_cudnn_values():
    assert (CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC) == (0, 1)
    assert (CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE, CUDNN_DATA_HALF, CUDNN_DATA_BFLOAT16) == (0, 1, 2, 9)
    assert (CUDNN_CONVOLUTION, CUDNN_CROSS_CORRELATION) == (0, 1)
    assert (CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_FMA_MATH) == (0, 1, 3)
    assert [CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
            CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
            CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
            CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED] == list(range(8))
    assert (CUDNN_STATUS_SUCCESS, CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_NOT_SUPPORTED) == (0, 3, 9)
    assert cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM) == "CUDNN_STATUS_BAD_PARAM"
    assert cudnnGetErrorString(12345) == "CUDNN_STATUS_UNKNOWN"
    assert cudnnGetVersion() == CUDNN_VERSION >= 90000


# -- errors: each raises the status's exception, before any output is touched ----------------
def test_set_calls_validate_and_keep_the_old_value():
    t = cudnnCreateTensorDescriptor()
    with pytest.raises(BadParamError, match="never set"):
        cudnnGetTensor4dDescriptor(t)
    cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 3, 4)
    with pytest.raises(BadParamError, match="dims"):
        cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 0, 3, 4)
    assert cudnnGetTensor4dDescriptor(t)[1:5] == (1, 2, 3, 4)
    with pytest.raises(BadParamError, match="unsupported data type"):
        cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_INT8, 1, 2, 3, 4)
    with pytest.raises(BadParamError, match="format"):
        cudnnSetTensor4dDescriptor(t, 7, CUDNN_DATA_FLOAT, 1, 2, 3, 4)
    with pytest.raises(BadParamError, match="fewer than nbDims"):
        cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, [1, 2, 3], [6, 3, 1, 1])
    c = cudnnCreateConvolutionDescriptor()
    for bad in [(-1, 0, 1, 1, 1, 1), (0, 0, 0, 1, 1, 1), (0, 0, 1, 1, 1, 0)]:
        with pytest.raises(BadParamError):
            cudnnSetConvolution2dDescriptor(c, *bad, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)
    with pytest.raises(BadParamError, match="mode"):
        cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 1, 5, CUDNN_DATA_FLOAT)
    with pytest.raises(BadParamError, match="groupCount"):
        cudnnSetConvolutionGroupCount(c, 0)
    with pytest.raises(BadParamError, match="math type"):
        cudnnSetConvolutionMathType(c, 9)
    with pytest.raises(BadParamError, match="never set"):
        cudnnGetConvolution2dDescriptor(c)


def test_execution_errors_leave_y_untouched(cudnn, rng):
    x_d, w_d, conv, y_d = conv_setup(groups=1)
    x = testing.fill((1, 4, 6, 5), "float32", rng)
    w = testing.fill((6, 4, 3, 3), "float32", rng)
    y = testing.fill((1, 6, 6, 5), "float32", rng)
    before = y.copy()
    perf = cudnnGetConvolutionForwardAlgorithm_v7(cudnn, x_d, w_d, conv, y_d, 8)
    needy = [r for r in perf if r.status == CUDNN_STATUS_SUCCESS and r.memory > 0]
    if needy:
        with pytest.raises(BadParamError, match="workspace"):
            cudnnConvolutionForward(cudnn, 1.0, x_d, x, w_d, w, conv, needy[0].algo, None, 0, 0.0, y_d, y)
    with pytest.raises(BadParamError, match="larger than the workSpace"):
        cudnnConvolutionForward(cudnn, 1.0, x_d, x, w_d, w, conv, 0, np.empty(4, np.uint8), 64, 0.0, y_d, y)
    with pytest.raises(BadParamError, match="does not match its descriptor"):
        cudnnConvolutionForward(cudnn, 1.0, x_d, x[..., :4], w_d, w, conv, 0, None, 0, 0.0, y_d, y)
    with pytest.raises(BadParamError, match="unknown fwd convolution algorithm"):
        cudnnConvolutionForward(cudnn, 1.0, x_d, x, w_d, w, conv, 42, None, 0, 0.0, y_d, y)
    with pytest.raises(BadParamError, match="alpha"):
        cudnnConvolutionForward(cudnn, float("nan"), x_d, x, w_d, w, conv, 0, None, 0, 0.0, y_d, y)
    bad_y = cudnnCreateTensorDescriptor()
    cudnnSetTensor4dDescriptor(bad_y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 6, 5, 5)
    with pytest.raises(BadParamError, match="output dims"):
        cudnnConvolutionForward(cudnn, 1.0, x_d, x, w_d, w, conv, 0, None, 0, 0.0, bad_y, y[:, :, :5])
    with pytest.raises(BadParamError, match="never set"):
        cudnnConvolutionForward(cudnn, 1.0, cudnnCreateTensorDescriptor(), x, w_d, w, conv, 0, None, 0,
                                0.0, y_d, y)
    with pytest.raises(BadParamError, match="requestedAlgoCount"):
        cudnnGetConvolutionForwardAlgorithm_v7(cudnn, x_d, w_d, conv, y_d, 0)
    with pytest.raises(BadParamError, match="4-d"):
        cudnnGetConvolution2dForwardOutputDim(conv, _nd_tensor(), w_d)
    np.testing.assert_array_equal(y, before)


def _nd_tensor():
    t = cudnnCreateTensorDescriptor()
    cudnnSetTensorNdDescriptorEx(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 3, [1, 4, 6])
    return t


def test_not_supported_carries_the_status(cudnn):
    x_d, w_d, conv, y_d = conv_setup(groups=1, kernel=(5, 5), hw=(9, 9))
    cudnnSetConvolution2dDescriptor(conv, 0, 0, 2, 2, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)
    cudnnSetTensor4dDescriptor(y_d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                               *cudnnGetConvolution2dForwardOutputDim(conv, x_d, w_d))
    with pytest.raises(NotSupportedError) as info:  # Winograd: 3x3 stride 1 only
        cudnnGetConvolutionForwardWorkspaceSize(cudnn, x_d, w_d, conv, y_d,
                                                CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD)
    assert info.value.status == CUDNN_STATUS_NOT_SUPPORTED


def test_destroyed_objects_raise(cudnn):
    t = cudnnCreateTensorDescriptor()
    cudnnDestroyTensorDescriptor(t)
    with pytest.raises(NotInitializedError):
        cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1)
    with pytest.raises(NotInitializedError):
        cudnnDestroyTensorDescriptor(t)
    c = cudnnCreateConvolutionDescriptor()
    cudnnDestroyConvolutionDescriptor(c)
    with pytest.raises(NotInitializedError):
        cudnnSetConvolutionGroupCount(c, 2)
    cudnnDestroy(cudnn)
    with pytest.raises(NotInitializedError):
        cudnnGetConvolutionForwardAlgorithmMaxCount(cudnn)
    with pytest.raises(NotInitializedError):
        cudnnDestroy(cudnn)
    with pytest.raises(BadParamError, match="cudnnCreateTensorDescriptor"):
        cudnnSetTensor4dDescriptor(object(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1)


def test_frozen_tridnn_descriptors_are_accepted(cudnn, rng):
    x_d = tridnn.TensorDescriptor.nchw(1, 2, 5, 5)
    w_d = tridnn.FilterDescriptor((3, 2, 3, 3))
    conv = tridnn.ConvolutionDescriptor(padding=1)
    y_d = tridnn.TensorDescriptor.nchw(*cudnnGetConvolution2dForwardOutputDim(conv, x_d, w_d))
    x = testing.fill((1, 2, 5, 5), "float32", rng)
    w = testing.fill((3, 2, 3, 3), "float32", rng)
    y = np.full((1, 3, 5, 5), np.nan, np.float32)
    algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
    size = cudnnGetConvolutionForwardWorkspaceSize(cudnn, x_d, w_d, conv, y_d, algo)
    cudnnConvolutionForward(cudnn, 1.0, x_d, x, w_d, w, conv, algo, np.empty(size, np.uint8), size,
                            0.0, y_d, y)
    testing.check_result(y, reference.conv_forward(x, w, 1, 1), "float32", exact=True)
