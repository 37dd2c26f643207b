"""The Triton backend's array handling, workspace carving and the lazy-import contract."""
import subprocess
import sys

import numpy as np
import pytest

import tridnn
from tridnn.errors import BadParamError
from tridnn.workspace import Buffer, layout_size


def test_numpy_path_never_imports_torch_or_triton():
    code = ("import sys, numpy as np, tridnn\n"
            "x_desc = tridnn.TensorDescriptor.nchw(1, 2, 5, 5)\n"
            "w_desc = tridnn.FilterDescriptor((3, 2, 3, 3))\n"
            "conv = tridnn.ConvolutionDescriptor(padding=1)\n"
            "y_desc = x_desc.with_dims(conv.output_dims(x_desc, w_desc))\n"
            "h = tridnn.Handle(find_cache=None)\n"
            "y = np.empty(y_desc.dims, np.float32)\n"
            "ws = np.empty(tridnn.get_convolution_forward_workspace_size(h, x_desc, w_desc, conv, y_desc,\n"
            "    'IMPLICIT_GEMM'), np.uint8)\n"
            "tridnn.convolution_forward(h, 1.0, x_desc, np.ones((1, 2, 5, 5), np.float32), w_desc,\n"
            "    np.ones((3, 2, 3, 3), np.float32), conv, 'IMPLICIT_GEMM', ws, 0.0, y_desc, y)\n"
            "assert y[0, 0, 2, 2] == 18.0, y\n"
            "bad = [m for m in ('torch', 'triton') if m in sys.modules]\n"
            "assert not bad, bad\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture
def backend():
    return tridnn.Handle(device="cpu", backend="triton", find_cache=None).backend


def test_handle_picks_the_triton_backend(backend):
    assert backend.name == "triton"
    assert "interpreter" in backend.device_name


def test_view_accepts_logical_and_raw_buffers_zero_copy(backend):
    desc = tridnn.TensorDescriptor.nhwc(2, 3, 4, 5, "float16")
    raw = torch.arange(2 * 4 * 5 * 3, dtype=torch.float16).reshape(2, 4, 5, 3)
    view = backend.view(raw, desc, "x")
    assert view.shape == (2, 3, 4, 5) and view.data_ptr() == raw.data_ptr()
    assert view[1, 2, 3, 4] == raw[1, 3, 4, 2]
    logical = raw.permute(0, 3, 1, 2)
    assert backend.view(logical, desc, "x").data_ptr() == raw.data_ptr()
    arr = np.zeros((2, 4, 5, 3), np.float16)
    v = backend.view(arr, desc, "x", writable=True)
    v[0, 1, 0, 0] = 7
    assert arr[0, 0, 0, 1] == 7, "a NumPy array must be taken zero copy"


def test_view_rejects_mismatches_with_both_sides_named(backend):
    desc = tridnn.TensorDescriptor.nchw(1, 2, 3, 3)
    with pytest.raises(BadParamError, match="dtype"):
        backend.view(torch.zeros(1, 2, 3, 3, dtype=torch.float16), desc, "x")
    with pytest.raises(BadParamError, match=r"shape \(1, 2, 3, 4\).*dims \(1, 2, 3, 3\)"):
        backend.view(torch.zeros(1, 2, 3, 4), desc, "x")
    with pytest.raises(BadParamError, match="torch tensor"):
        backend.view("not an array", desc, "x")
    ro = np.zeros((1, 2, 3, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(BadParamError, match="read-only"):
        backend.view(ro, desc, "y", writable=True)


def test_bfloat16_numpy_arrays_are_taken_zero_copy(backend):
    import ml_dtypes
    desc = tridnn.TensorDescriptor.nchw(1, 1, 2, 2, "bfloat16")
    arr = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(1, 1, 2, 2)
    view = backend.view(arr, desc, "x")
    assert view.dtype == torch.bfloat16 and view.float().flatten().tolist() == [0, 1, 2, 3]


def test_carve_lays_out_buffers_as_layout_size_counts(backend):
    bufs = [Buffer("a", (3, 5), np.float32), Buffer("b", (7,), np.int64), Buffer("c", (2, 2), np.float16)]
    need = layout_size(bufs)
    ws = backend.workspace_bytes(backend.allocate_workspace(need))
    views = backend.carve(ws, bufs)
    assert views["a"].shape == (3, 5) and views["a"].dtype == torch.float32
    assert views["b"].dtype == torch.int64 and views["c"].dtype == torch.float16
    ptrs = sorted((v.data_ptr(), v.data_ptr() + v.numel() * v.element_size()) for v in views.values())
    for (_, end), (start, _) in zip(ptrs, ptrs[1:]):
        assert end <= start, "buffers overlap"
    assert all(p % 64 == 0 for p, _ in ptrs)
    assert ptrs[-1][1] <= ws.data_ptr() + ws.numel()
    with pytest.raises(BadParamError, match="smaller"):
        backend.carve(ws[: need - 65], bufs)


def test_workspace_must_be_contiguous(backend):
    with pytest.raises(BadParamError, match="contiguous"):
        backend.workspace_bytes(torch.zeros(8, 8, dtype=torch.uint8)[:, ::2])
    assert backend.workspace_bytes(None).numel() == 0


def test_random_and_empty_follow_the_descriptor(backend, rng):
    desc = tridnn.TensorDescriptor.nhwc(2, 3, 4, 4, "float16")
    t = backend.random(desc, rng)
    assert tuple(t.shape) == desc.dims and tuple(t.stride()) == desc.strides and t.dtype == torch.float16
    assert float(t.float().std()) > 0.5


def test_time_returns_positive_durations(backend):
    times = backend.time(lambda: sum(range(1000)), 0.01)
    assert len(times) >= 3 and all(t > 0 for t in times)


def test_unknown_cuda_device_is_a_clear_error():
    if torch.cuda.is_available():
        with pytest.raises(BadParamError, match="does not exist"):
            tridnn.Handle(device=f"cuda:{torch.cuda.device_count()}", find_cache=None)
    else:
        with pytest.raises(tridnn.TridnnError, match="no CUDA GPU"):
            tridnn.Handle(device="cuda", find_cache=None)
