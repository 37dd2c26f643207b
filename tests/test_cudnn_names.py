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


# -- backward convolution, bias, fused forward ----------------------------------------------------
def _tensor4d(dims, fmt=None, dtype=None):
    t = cudnnCreateTensorDescriptor()
    cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW if fmt is None else fmt,
                               CUDNN_DATA_FLOAT if dtype is None else dtype, *dims)
    return t


def test_backward_data_filter_and_bias(cudnn, rng):
    x_d, w_d, conv, y_d = conv_setup(groups=2)
    x = testing.fill((1, 4, 6, 5), "float32", rng)
    w = testing.fill((6, 2, 3, 3), "float32", rng)
    dy = testing.fill((1, 6, 6, 5), "float32", rng)
    geometry = dict(stride=1, pad_pre=1, pad_post=None, dilation=1, groups=2, mode="convolution")

    perf = cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn, w_d, y_d, conv, x_d, 6)
    assert perf[0].status == CUDNN_STATUS_SUCCESS and len(perf) <= 6
    algo = perf[0].algo
    size = cudnnGetConvolutionBackwardDataWorkspaceSize(cudnn, w_d, y_d, conv, x_d, algo)
    dx = np.full(x.size, np.nan, np.float32)  # a flat buffer, as a C pointer
    cudnnConvolutionBackwardData(cudnn, 1.0, w_d, w, y_d, dy, conv, algo, np.empty(size, np.uint8), size,
                                 0.0, x_d, dx)
    want = reference.conv_backward_data(dy, w, x.shape, **geometry)
    testing.assert_close(dx.reshape(x.shape), want, "float32", "dx")

    records = cudnnFindConvolutionBackwardFilterAlgorithm(cudnn, x_d, y_d, conv, w_d, 7)
    algo = next(r.algo for r in records if r.status == CUDNN_STATUS_SUCCESS)
    size = cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnn, x_d, y_d, conv, w_d, algo)
    dw = testing.fill(w.shape, "float32", rng)
    prior = dw.copy()
    cudnnConvolutionBackwardFilter(cudnn, 2.0, x_d, x, y_d, dy, conv, algo, np.empty(size, np.uint8), size,
                                   1.0, w_d, dw)
    want = 2.0 * reference.conv_backward_filter(x, dy, w.shape, **geometry) + prior
    testing.assert_close(dw, want, "float32", "dw")

    db_d = _tensor4d((1, 6, 1, 1))
    db = np.full((1, 6, 1, 1), np.nan, np.float32)
    cudnnConvolutionBackwardBias(cudnn, 1.0, y_d, dy, 0.0, db_d, db)
    np.testing.assert_allclose(db.reshape(-1), dy.sum(axis=(0, 2, 3)), rtol=1e-6)
    assert cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnn) == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
    assert cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnn) == \
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT


def test_find_ex_backward(cudnn, rng):
    x_d, w_d, conv, y_d = conv_setup(groups=1)
    w = testing.fill((6, 4, 3, 3), "float32", rng)
    dy = testing.fill((1, 6, 6, 5), "float32", rng)
    x = testing.fill((1, 4, 6, 5), "float32", rng)
    ws = np.empty(1 << 20, np.uint8)
    dx = np.full((1, 4, 6, 5), np.nan, np.float32)
    rec = cudnnFindConvolutionBackwardDataAlgorithmEx(cudnn, w_d, w, y_d, dy, conv, x_d, dx, 2, ws, ws.nbytes)
    assert rec[0].status == CUDNN_STATUS_SUCCESS
    testing.assert_close(dx, reference.conv_backward_data(dy, w, dx.shape, 1, 1, None, 1, 1, "convolution"),
                         "float32")
    dw = np.full(w.shape, np.nan, np.float32)
    rec = cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnn, x_d, x, y_d, dy, conv, w_d, dw, 2, ws,
                                                        ws.nbytes)
    assert rec[0].status == CUDNN_STATUS_SUCCESS
    testing.assert_close(dw, reference.conv_backward_filter(x, dy, w.shape, 1, 1, None, 1, 1, "convolution"),
                         "float32")


def test_convolution_bias_activation_forward_in_place_residual(cudnn, rng):
    x_d, w_d, conv, y_d = conv_setup(groups=1)
    cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)
    x = testing.fill((1, 4, 6, 5), "float32", rng)
    w = testing.fill((6, 4, 3, 3), "float32", rng)
    bias = testing.fill((1, 6, 1, 1), "float32", rng)
    y = testing.fill((1, 6, 6, 5), "float32", rng)
    z = y.copy()
    act = cudnnCreateActivationDescriptor()
    cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0)
    algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
    size = cudnnGetConvolutionForwardWorkspaceSize(cudnn, x_d, w_d, conv, y_d, algo)
    cudnnConvolutionBiasActivationForward(cudnn, 1.0, x_d, x, w_d, w, conv, algo, np.empty(size, np.uint8),
                                          size, 0.5, y_d, y, _tensor4d((1, 6, 1, 1)), bias, act, y_d, y)
    want = np.maximum(reference.conv_forward(x, w, 1, 1) + 0.5 * z + bias, 0)
    testing.check_result(y, want, "float32", exact=True)


# -- layers --------------------------------------------------------------------------------------
def test_pooling_names(cudnn, rng):
    torch = pytest.importorskip("torch")
    pool = cudnnCreatePoolingDescriptor()
    cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 3, 3, 1, 1, 2, 2)
    assert cudnnGetPooling2dDescriptor(pool) == (CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 3, 3, 1, 1, 2, 2)
    x_d = _tensor4d((2, 3, 7, 6), dtype=CUDNN_DATA_DOUBLE)
    dims = cudnnGetPooling2dForwardOutputDim(pool, x_d)
    assert dims == (2, 3, 4, 3)
    y_d = _tensor4d(dims, dtype=CUDNN_DATA_DOUBLE)
    x = rng.standard_normal((2, 3, 7, 6))
    y = np.full(dims, np.nan)
    cudnnPoolingForward(cudnn, pool, 1.0, x_d, x, 0.0, y_d, y)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.max_pool2d(tx, 3, 2, 1)
    np.testing.assert_array_equal(y, ty.detach().numpy())
    dy = rng.standard_normal(dims)
    ty.backward(torch.tensor(dy))
    dx = np.full(x.shape, np.nan)
    cudnnPoolingBackward(cudnn, pool, 1.0, y_d, y, y_d, dy, x_d, x, 0.0, x_d, dx)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-12)
    cudnnSetPoolingNdDescriptor(pool, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, CUDNN_PROPAGATE_NAN, 2,
                                [2, 2], [1, 0], [1, 2])
    assert cudnnGetPoolingNdForwardOutputDim(pool, x_d, 4) == (2, 3, 8, 3)
    with pytest.raises(BadParamError, match="padding"):
        cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 2, 0, 1, 1)
    cudnnDestroyPoolingDescriptor(pool)


def test_activation_and_softmax_names(cudnn, rng):
    act = cudnnCreateActivationDescriptor()
    cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_SWISH, CUDNN_NOT_PROPAGATE_NAN, 0.0)
    cudnnSetActivationDescriptorSwishBeta(act, 2.0)
    assert cudnnGetActivationDescriptorSwishBeta(act) == 2.0
    assert cudnnGetActivationDescriptor(act) == (CUDNN_ACTIVATION_SWISH, CUDNN_NOT_PROPAGATE_NAN, 0.0)
    d = _tensor4d((2, 3, 2, 2), dtype=CUDNN_DATA_DOUBLE)
    x = rng.standard_normal((2, 3, 2, 2))
    y = np.empty_like(x)
    cudnnActivationForward(cudnn, act, 1.0, d, x, 0.0, d, y)
    sig = 1 / (1 + np.exp(-2 * x))
    np.testing.assert_allclose(y, x * sig, rtol=1e-12)
    dy = rng.standard_normal(x.shape)
    dx = np.empty_like(x)
    cudnnActivationBackward(cudnn, act, 1.0, d, y, d, dy, d, x, 0.0, d, dx)
    np.testing.assert_allclose(dx, dy * (sig + 2 * x * sig * (1 - sig)), rtol=1e-10)
    cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_CLIPPED_RELU, CUDNN_NOT_PROPAGATE_NAN, 1.0)
    cudnnActivationForward(cudnn, act, 1.0, d, x, 0.0, d, x)  # in place, as cuDNN allows
    assert x.max() <= 1.0 and x.min() >= 0.0
    cudnnDestroyActivationDescriptor(act)

    s = rng.standard_normal((2, 3, 2, 2))
    out = np.empty_like(s)
    cudnnSoftmaxForward(cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, 1.0, d, s, 0.0, d, out)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-12)
    g = rng.standard_normal(s.shape)
    ds = np.empty_like(s)
    cudnnSoftmaxBackward(cudnn, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL, 1.0, d, out, d, g, 0.0,
                         d, ds)
    np.testing.assert_allclose(ds, out * (g - (g * out).sum(axis=1, keepdims=True)), rtol=1e-10, atol=1e-14)


def test_batch_norm_names(cudnn, rng):
    torch = pytest.importorskip("torch")
    x_d = _tensor4d((4, 3, 3, 2), dtype=CUDNN_DATA_DOUBLE)
    bn_d = cudnnCreateTensorDescriptor()
    cudnnDeriveBNTensorDescriptor(bn_d, x_d, CUDNN_BATCHNORM_SPATIAL)
    assert cudnnGetTensor4dDescriptor(bn_d)[:5] == (CUDNN_DATA_DOUBLE, 1, 3, 1, 1)
    x = rng.standard_normal((4, 3, 3, 2))
    scale, bias = rng.standard_normal(3), rng.standard_normal(3)  # flat (C,) buffers
    rm, rv = np.zeros(3), np.ones(3)
    save_mean, save_inv = np.empty(3), np.empty(3)
    y = np.empty_like(x)
    cudnnBatchNormalizationForwardTraining(cudnn, CUDNN_BATCHNORM_SPATIAL, 1.0, 0.0, x_d, x, x_d, y, bn_d,
                                           scale, bias, 0.1, rm, rv, CUDNN_BN_MIN_EPSILON, save_mean, save_inv)
    t_rm, t_rv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    tx = torch.tensor(x, requires_grad=True)
    ts, tb = torch.tensor(scale, requires_grad=True), torch.tensor(bias, requires_grad=True)
    ty = torch.nn.functional.batch_norm(tx, t_rm, t_rv, ts, tb, True, 0.1, 1e-5)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rv, t_rv.numpy(), rtol=1e-12)
    dy = rng.standard_normal(x.shape)
    ty.backward(torch.tensor(dy))
    dx, dscale, dbias = np.empty_like(x), np.empty(3), np.empty(3)
    cudnnBatchNormalizationBackward(cudnn, CUDNN_BATCHNORM_SPATIAL, 1.0, 0.0, 1.0, 0.0, x_d, x, x_d, dy, x_d,
                                    dx, bn_d, scale, dscale, dbias, CUDNN_BN_MIN_EPSILON, save_mean, save_inv)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dscale, ts.grad.numpy(), rtol=1e-9)
    np.testing.assert_allclose(dbias, tb.grad.numpy(), rtol=1e-9)
    inf = np.empty_like(x)
    cudnnBatchNormalizationForwardInference(cudnn, CUDNN_BATCHNORM_SPATIAL, 1.0, 0.0, x_d, x, x_d, inf, bn_d,
                                            scale, bias, rm, rv, CUDNN_BN_MIN_EPSILON)
    np.testing.assert_allclose(inf, torch.nn.functional.batch_norm(
        torch.tensor(x), t_rm, t_rv, torch.tensor(scale), torch.tensor(bias), False, 0.1, 1e-5).numpy(),
        rtol=1e-10, atol=1e-12)
    act = cudnnCreateActivationDescriptor()
    cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0)
    ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
    assert cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        cudnn, CUDNN_BATCHNORM_SPATIAL, ops, x_d, x_d, x_d, bn_d, act) >= 0
    reserve = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnn, CUDNN_BATCHNORM_SPATIAL, ops, act, x_d)
    z = rng.standard_normal(x.shape)
    y_ex = np.empty_like(x)
    cudnnBatchNormalizationForwardTrainingEx(
        cudnn, CUDNN_BATCHNORM_SPATIAL, ops, 1.0, 0.0, x_d, x, x_d, z, x_d, y_ex, bn_d, scale, bias, 0.0,
        None, None, CUDNN_BN_MIN_EPSILON, None, None, act, None, 0, np.empty(reserve, np.uint8), reserve)
    np.testing.assert_allclose(y_ex, np.maximum(ty.detach().numpy() + z, 0), rtol=1e-9, atol=1e-12)
    with pytest.raises(BadParamError, match="epsilon"):
        cudnnBatchNormalizationForwardInference(cudnn, CUDNN_BATCHNORM_SPATIAL, 1.0, 0.0, x_d, x, x_d, inf,
                                                bn_d, scale, bias, rm, rv, 1e-9)


def test_lrn_and_dropout_names(cudnn, rng):
    torch = pytest.importorskip("torch")
    lrn = cudnnCreateLRNDescriptor()
    assert cudnnGetLRNDescriptor(lrn) == (5, 1e-4, 0.75, 2.0)  # cuDNN's defaults
    cudnnSetLRNDescriptor(lrn, 3, 0.5, 0.75, 1.5)
    d = _tensor4d((2, 6, 3, 3), dtype=CUDNN_DATA_DOUBLE)
    x = rng.standard_normal((2, 6, 3, 3))
    y = np.empty_like(x)
    cudnnLRNCrossChannelForward(cudnn, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, 1.0, d, x, 0.0, d, y)
    want = torch.nn.functional.local_response_norm(torch.tensor(x), 3, 0.5, 0.75, 1.5).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-10)
    dx = np.empty_like(x)
    cudnnLRNCrossChannelBackward(cudnn, lrn, CUDNN_LRN_CROSS_CHANNEL_DIM1, 1.0, d, y, d, np.ones_like(x), d, x,
                                 0.0, d, dx)
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.local_response_norm(tx, 3, 0.5, 0.75, 1.5).sum().backward()
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-8, atol=1e-12)
    cudnnDestroyLRNDescriptor(lrn)

    drop = cudnnCreateDropoutDescriptor()
    states = np.empty(cudnnDropoutGetStatesSize(cudnn), np.uint8)
    cudnnSetDropoutDescriptor(drop, cudnn, 0.25, states, states.nbytes, 1234)
    p, got_states, seed = cudnnGetDropoutDescriptor(drop, cudnn)
    assert (p, seed) == (0.25, 1234) and got_states is states
    xd = _tensor4d((2, 3, 4, 5))
    xs = np.ones((2, 3, 4, 5), np.float32)
    size = cudnnDropoutGetReserveSpaceSize(xd)
    reserve = np.empty(size, np.uint8)
    out = np.empty_like(xs)
    cudnnDropoutForward(cudnn, drop, xd, xs, xd, out, reserve, size)
    assert set(np.unique(out).tolist()) <= {0.0, np.float32(1 / 0.75)}
    back = np.empty_like(xs)
    cudnnDropoutBackward(cudnn, drop, xd, np.ones_like(xs), xd, back, reserve, size)
    np.testing.assert_array_equal(back, out)  # the same mask
    again = cudnnCreateDropoutDescriptor()
    cudnnSetDropoutDescriptor(again, cudnn, 0.25, np.empty_like(states), states.nbytes, 1234)
    replay = np.empty_like(xs)
    cudnnDropoutForward(cudnn, again, xd, xs, xd, replay, np.empty(size, np.uint8), size)
    np.testing.assert_array_equal(replay, out)  # same seed, same mask
    with pytest.raises(BadParamError, match="reserve"):
        cudnnDropoutForward(cudnn, drop, xd, xs, xd, out, reserve, size - 1)


def test_tensor_op_names(cudnn, rng):
    c_d = _tensor4d((2, 3, 2, 2))
    b_d = _tensor4d((1, 3, 1, 1))
    c = testing.fill((2, 3, 2, 2), "float32", rng)
    b = testing.fill((1, 3, 1, 1), "float32", rng)
    c0 = c.copy()
    cudnnAddTensor(cudnn, 2.0, b_d, b, 1.0, c_d, c)
    np.testing.assert_array_equal(c, c0 + 2 * b)
    op = cudnnCreateOpTensorDescriptor()
    cudnnSetOpTensorDescriptor(op, CUDNN_OP_TENSOR_MUL, CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN)
    assert cudnnGetOpTensorDescriptor(op)[0] == CUDNN_OP_TENSOR_MUL
    out = np.full_like(c, np.nan)
    cudnnOpTensor(cudnn, op, 1.0, c_d, c0, 3.0, b_d, b, 0.0, c_d, out)
    np.testing.assert_array_equal(out, c0 * 3 * b)
    red = cudnnCreateReduceTensorDescriptor()
    cudnnSetReduceTensorDescriptor(red, CUDNN_REDUCE_TENSOR_MAX, CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN,
                                   CUDNN_REDUCE_TENSOR_FLATTENED_INDICES, CUDNN_32BIT_INDICES)
    r_d = _tensor4d((2, 1, 1, 1))
    isize = cudnnGetReductionIndicesSize(cudnn, red, c_d, r_d)
    wsize = cudnnGetReductionWorkspaceSize(cudnn, red, c_d, r_d)
    assert isize == 8
    indices = np.empty(isize, np.uint8)
    r = np.empty((2, 1, 1, 1), np.float32)
    cudnnReduceTensor(cudnn, red, indices, isize, np.empty(wsize, np.uint8), wsize, 1.0, c_d, c0, 0.0, r_d, r)
    np.testing.assert_array_equal(r.reshape(-1), c0.reshape(2, -1).max(axis=1))
    np.testing.assert_array_equal(indices.view(np.uint32), c0.reshape(2, -1).argmax(axis=1))
    nhwc = _tensor4d((2, 3, 2, 2), CUDNN_TENSOR_NHWC)
    flat = np.empty(c0.size, np.float32)
    cudnnTransformTensor(cudnn, 1.0, c_d, c0, 0.0, nhwc, flat)
    np.testing.assert_array_equal(flat.reshape(2, 2, 2, 3), c0.transpose(0, 2, 3, 1))
    cudnnSetTensor(cudnn, c_d, out, 7.0)
    cudnnScaleTensor(cudnn, c_d, out, 0.5)
    assert (out == 3.5).all()
    with pytest.raises(BadParamError, match="broadcast"):
        cudnnAddTensor(cudnn, 1.0, _tensor4d((1, 2, 1, 1)), np.ones((1, 2, 1, 1), np.float32), 1.0, c_d, c)
