"""Zero-copy interop: NumPy, torch (bf16 and channels_last included) and any DLPack
producer go in and out of tridnn without copies."""
import numpy as np
import pytest

import tridnn
from tridnn import arrays, reference, testing
from tridnn.errors import BadParamError

torch = pytest.importorskip("torch")


def address(a):
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data_ptr()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_torch_cpu_tensor_to_numpy_is_zero_copy(dtype):
    t = torch.arange(24, dtype=getattr(torch, dtype)).reshape(2, 3, 4)
    a = arrays.to_numpy(t)
    assert address(a) == address(t)
    assert a.dtype == tridnn.DataType.of(dtype).numpy
    np.testing.assert_array_equal(a.astype(np.float64), np.arange(24).reshape(2, 3, 4))
    a[0, 0, 0] = 7  # writes land in the tensor
    assert float(t[0, 0, 0]) == 7


def test_requires_grad_tensor_is_zero_copy():
    t = torch.ones(2, 3, requires_grad=True)
    assert address(arrays.to_numpy(t)) == address(t)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_channels_last_tensor_is_described_as_nhwc_and_viewed_in_place(dtype):
    t = torch.randn(2, 3, 4, 5).to(getattr(torch, dtype)).to(memory_format=torch.channels_last)
    desc = tridnn.TensorDescriptor.like(t)
    assert desc.format == "NHWC" and desc.dims == (2, 3, 4, 5)
    view = tridnn.Handle(find_cache=None).backend.view(t, desc, "x")
    assert address(view) == address(t)
    assert view.shape == (2, 3, 4, 5)
    np.testing.assert_array_equal(view.astype(np.float32), t.float().numpy())


def test_channels_last_3d_is_ndhwc():
    t = torch.randn(1, 2, 3, 4, 5).to(memory_format=torch.channels_last_3d)
    assert tridnn.TensorDescriptor.like(t).format == "NHWC"


def test_numpy_results_export_to_torch_without_copy(rng):
    x = testing.fill((1, 2, 5, 5), "float32", rng)
    w = testing.fill((3, 2, 3, 3), "float32", rng)
    y = tridnn.conv(x, w)
    t = torch.from_dlpack(y)
    assert t.data_ptr() == address(y)
    torch.testing.assert_close(t, torch.from_numpy(reference.conv_forward(x, w).astype(np.float32)))


class Producer:
    """A minimal DLPack producer that is neither NumPy nor torch."""

    def __init__(self, array):
        self._array = array

    @property
    def shape(self):
        return self._array.shape

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_any_dlpack_producer_is_zero_copy(rng):
    base = testing.fill((1, 2, 5, 5), "float32", rng)
    a = arrays.to_numpy(Producer(base))
    assert address(a) == address(base)
    w = testing.fill((3, 2, 3, 3), "float32", rng)
    y = tridnn.conv(Producer(base), w)
    testing.assert_close(y, reference.conv_forward(base, w), "float32")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("channels_last", [False, True])
def test_descriptor_api_writes_torch_outputs_in_place(dtype, channels_last, rng):
    tdt = getattr(torch, dtype)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    xv = testing.fill((2, 3, 6, 5), "float32", rng)
    wv = testing.fill((4, 3, 3, 3), "float32", rng)
    x = torch.tensor(xv).to(tdt).to(memory_format=fmt)
    w = torch.tensor(wv).to(tdt)
    y = torch.full((2, 4, 6, 5), float("nan"), dtype=tdt).to(memory_format=fmt)
    ptr = y.data_ptr()
    x_desc, w_desc, y_desc = (tridnn.TensorDescriptor.like(x), tridnn.FilterDescriptor.like(w),
                              tridnn.TensorDescriptor.like(y))
    conv = tridnn.ConvolutionDescriptor(padding=1)
    handle = tridnn.Handle(find_cache=None)
    algo = tridnn.ConvFwdAlgo.IMPLICIT_GEMM
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc,
                                                                algo), np.uint8)
    tridnn.convolution_forward(handle, 1.0, x_desc, x, w_desc, w, conv, algo, ws, 0.0, y_desc, y)
    assert y.data_ptr() == ptr
    want = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    torch.testing.assert_close(y.double(), want.to(tdt).double(), rtol=0, atol=0)


def test_functional_torch_outputs_are_plain_tensors(rng):
    x = torch.tensor(testing.fill((1, 2, 5, 5), "float32", rng))
    w = torch.tensor(testing.fill((3, 2, 3, 3), "float32", rng))
    y = tridnn.conv(x, w, padding=1)
    assert isinstance(y, torch.Tensor) and y.device.type == "cpu"
    y += 1  # writable, owns its memory through NumPy
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1) + 1)


def test_tensors_on_another_device_are_refused():
    t = torch.empty(1, 2, 3, 3, device="meta")
    with pytest.raises(BadParamError, match="device"):
        arrays.to_numpy(t, "x")


def test_cupy_and_jax_when_installed(rng):
    jnp = None
    try:
        import jax.numpy as jnp  # noqa: F811
    except ImportError:
        pytest.skip("neither CuPy on a GPU nor JAX is installed here")
    x = jnp.asarray(testing.fill((1, 2, 5, 5), "float32", rng))
    a = arrays.to_numpy(x)
    np.testing.assert_array_equal(a, np.asarray(x))


@pytest.mark.gpu
def test_gpu_arrays_from_cupy_jax_and_torch_are_zero_copy(rng):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    handle = tridnn.Handle(device="cuda", find_cache=None)
    x = testing.fill((1, 2, 5, 5), "float32", rng)
    w = testing.fill((3, 2, 3, 3), "float32", rng)
    want = reference.conv_forward(x, w, 1, 1)
    tx, tw = torch.tensor(x, device="cuda"), torch.tensor(w, device="cuda")
    y = tridnn.conv(tx, tw, padding=1, handle=handle)
    assert y.is_cuda
    testing.assert_close(y.cpu().numpy(), want, "float32")
    desc = tridnn.TensorDescriptor.like(tx)
    assert handle.backend.view(tx, desc, "x").data_ptr() == tx.data_ptr()
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        cx = cupy.asarray(x)
        view = handle.backend.view(cx, desc, "x")
        assert view.data_ptr() == cx.data.ptr
        testing.assert_close(tridnn.conv(cx, cupy.asarray(w), padding=1, handle=handle).cpu().numpy(),
                             want, "float32")
