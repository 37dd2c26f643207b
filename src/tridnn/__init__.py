"""tridnn: cuDNN's programming model in Python; NumPy on the CPU, Triton on GPUs."""
__version__ = "0.1.0"

from .errors import (AllocFailedError, ArchMismatchError, BadParamError, ExecutionFailedError,  # noqa: E402
                     InternalError, NotInitializedError, NotSupportedError, Status, TridnnError)
from .types import (ConvBwdDataAlgo, ConvBwdFilterAlgo, ConvFwdAlgo, ConvMode, DataType,  # noqa: E402
                    Determinism, MathType, TensorFormat)
from .descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor  # noqa: E402
from .handle import Handle  # noqa: E402
from .api.convolution import (convolution_forward, find_convolution_forward_algorithm,  # noqa: E402
                              find_convolution_forward_algorithm_ex,
                              get_convolution_forward_algorithm,
                              get_convolution_forward_workspace_size)
from .api.convolution import (convolution_backward_bias, convolution_backward_data,  # noqa: E402
                              convolution_backward_filter, convolution_bias_activation_forward,
                              find_convolution_backward_data_algorithm,
                              find_convolution_backward_data_algorithm_ex,
                              find_convolution_backward_filter_algorithm,
                              find_convolution_backward_filter_algorithm_ex,
                              get_convolution_backward_data_algorithm,
                              get_convolution_backward_data_workspace_size,
                              get_convolution_backward_filter_algorithm,
                              get_convolution_backward_filter_workspace_size)
from .api.functional import conv, conv_backward_data, conv_backward_filter, conv_transpose  # noqa: E402
# the functional layers; their backward helpers live in tridnn.functional only (the names
# activation_backward / softmax_backward here are the descriptor API's)
from .api.functional import (adaptive_avg_pool, adaptive_max_pool, avg_pool, batch_norm, elu, gelu,  # noqa: E402,E501
                             hard_swish, leaky_relu, log_softmax, max_pool, relu, relu6, sigmoid,
                             silu, softmax, softplus, swish, tanh)
from . import functional  # noqa: E402,F401
from .descriptors import (AdaptivePoolingMode, BatchNormMode, BatchNormOps, BN_MIN_EPSILON,  # noqa: E402
                          DropoutDescriptor, IndicesType, LRNDescriptor, LRNMode, OpTensorDescriptor,
                          OpTensorOp, PoolingDescriptor, PoolingMode, ReduceTensorDescriptor,
                          ReduceTensorIndices, ReduceTensorOp, SoftmaxAlgorithm, SoftmaxMode,
                          derive_bn_tensor_descriptor, dropout_get_reserve_space_size,
                          dropout_get_states_size)
from .api.pooling import (adaptive_pooling_backward, adaptive_pooling_forward,  # noqa: E402
                          get_pooling_forward_output_dim, pooling_backward, pooling_forward)
from .api.activation import activation_backward, activation_forward  # noqa: E402
from .descriptors.activation import ActivationDescriptor, ActivationMode, NanPropagation  # noqa: E402
from .api.softmax import softmax_backward, softmax_forward  # noqa: E402
from .api.normalization import (batch_norm_backward, batch_norm_backward_ex,  # noqa: E402
                                batch_norm_forward_inference, batch_norm_forward_inference_ex,
                                batch_norm_forward_training, batch_norm_forward_training_ex,
                                get_batch_norm_backward_ex_workspace_size,
                                get_batch_norm_forward_training_ex_workspace_size,
                                get_batch_norm_training_ex_reserve_space_size)
from .api.tensor_ops import (add_tensor, get_reduction_indices_size,  # noqa: E402
                             get_reduction_workspace_size, op_tensor, reduce_tensor, scale_tensor,
                             set_tensor, transform_tensor)

from .api.dropout import dropout_backward, dropout_forward  # noqa: E402
from .api.lrn import lrn_cross_channel_backward, lrn_cross_channel_forward  # noqa: E402

from .api.normalization import (group_norm_backward, group_norm_descriptors,  # noqa: E402
                                group_norm_forward, layer_norm_backward, layer_norm_descriptors,
                                layer_norm_forward, rms_norm_backward, rms_norm_descriptors,
                                rms_norm_forward)

# Keep this block last (add exports above it): wraps every API function exported above for
# TRIDNN_LOGLEVEL call logging; tests/test_logging.py checks that none is missed.
from .logging import log_api_calls as _log_api_calls  # noqa: E402
_log_api_calls(globals())
_log_api_calls(vars(functional))
