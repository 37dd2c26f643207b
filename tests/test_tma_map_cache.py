"""common.TensorMapLauncher: launches of kernels with TMA descriptor arguments reuse the
encoded tensor maps instead of re-encoding them every call. The CPU has no CUDA
launcher, so these tests build Triton's own descriptor-expanding wrapper
(triton.backends.nvidia.driver.wrap_handle_tensordesc) around a recording launcher and
check that the cached path hands the raw launcher exactly the arguments Triton's path
would, encodes each (descriptor, position) once, and re-encodes when the descriptor
object changes."""
import types

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
nvidia = pytest.importorskip("triton.backends.nvidia.driver")
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from tridnn.cuda import common  # noqa: E402


class _Encoder:
    """Stands in for the CUDA driver's cuTensorMapEncodeTiled: returns a token naming
    what it encoded, and counts calls."""

    def __init__(self):
        self.calls = 0
        self.utils = types.SimpleNamespace(fill_tma_descriptor=self.fill)

    def fill(self, ptr, swizzle, elem_size, elem_type, block, shape, strides, padding):
        self.calls += 1
        return ("map", ptr, swizzle, tuple(block), tuple(shape), tuple(strides))


@pytest.fixture
def encoder():
    enc = _Encoder()
    before = triton.runtime.driver._active
    triton.runtime.driver.set_active(enc)
    yield enc
    triton.runtime.driver._active = before


class _Address:
    def __init__(self, ptr):
        self.ptr, self.dtype = ptr, torch.bfloat16

    def data_ptr(self):
        return self.ptr


def _desc(ptr, shape=(4, 64), block=(4, 64)):
    return TensorDescriptor(_Address(ptr), list(shape), [shape[1], 1], list(block))


def _launcher(recorded):
    """A CudaLauncher-shaped object whose launch is Triton's own tensordesc wrapper."""
    signature = {"y_ptr": "*bf16", "x_desc": "tensordesc<bf16[4, 64]>", "n": "i32",
                 "w_desc": "tensordesc<bf16[4, 64]>", "BLOCK": "constexpr"}
    meta = [dict(swizzle=3, elem_size=2, elem_type=10, block_size=[4, 64], fp4_padded=False)] * 2
    raw = lambda *args: recorded.append(args)
    return types.SimpleNamespace(launch=nvidia.wrap_handle_tensordesc(raw, signature, meta), global_scratch_size=0,
                                 profile_scratch_size=0, num_ctas=1, launch_cooperative_grid=False,
                                 launch_pdl=False)


def test_cached_maps_give_the_launcher_what_triton_gives_it(encoder):
    recorded = []
    launcher = _launcher(recorded)
    fast = common.TensorMapLauncher.of(launcher)
    assert fast is not None and fast.positions == [1, 3]
    compiled = types.SimpleNamespace(function=7, packed_metadata=("meta",))
    x, w = _desc(4096), _desc(8192)
    values = (object(), x, 5, w, 64)
    # Triton's path, as CudaLauncher.__call__ calls it
    launcher.launch(2, 1, 1, 99, 7, False, False, None, None, ("meta",), None, None, None, *values)
    want = recorded.pop()
    for _ in range(3):
        fast.launch((2, 1, 1), 99, compiled, values)
        assert recorded.pop() == want
    assert encoder.calls == 2 + 2  # Triton's launch encoded two maps; the cached path two, once


def test_a_new_descriptor_object_is_encoded_again(encoder):
    recorded = []
    fast = common.TensorMapLauncher.of(_launcher(recorded))
    compiled = types.SimpleNamespace(function=7, packed_metadata=None)
    w = _desc(8192)
    fast.launch((1, 1, 1), 0, compiled, (None, _desc(4096), 1, w, 64))
    fast.launch((1, 1, 1), 0, compiled, (None, _desc(12288), 1, w, 64))
    assert encoder.calls == 3
    first_map = recorded[-1][13 + 1]
    assert first_map[1] == 12288  # the map of the new address, not the cached one


def test_descriptors_over_real_tensors_are_not_cached(encoder):
    """A descriptor whose base is a tensor would keep that tensor's memory alive in the
    cache: it is encoded every launch instead."""
    recorded = []
    fast = common.TensorMapLauncher.of(_launcher(recorded))
    compiled = types.SimpleNamespace(function=7, packed_metadata=None)
    t = torch.zeros(4, 64, dtype=torch.bfloat16)
    d, w = TensorDescriptor(t, [4, 64], [64, 1], [4, 64]), _desc(8192)
    for _ in range(2):
        fast.launch((1, 1, 1), 0, compiled, (None, d, 1, w, 64))
    assert encoder.calls == 2 + 1
    assert not any(isinstance(v[0], TensorDescriptor) and isinstance(v[0].base, torch.Tensor)
                   for v in fast.maps.values())


def test_launchers_of_another_shape_are_left_to_triton():
    plain = types.SimpleNamespace(launch=lambda *a: None, global_scratch_size=0, profile_scratch_size=0, num_ctas=1)
    assert common.TensorMapLauncher.of(plain) is None
    recorded = []
    scratch = _launcher(recorded)
    scratch.global_scratch_size = 128  # needs a scratch buffer per launch: Triton's path
    assert common.TensorMapLauncher.of(scratch) is None


def test_a_bound_launch_gives_the_launcher_what_triton_gives_it(encoder, monkeypatch):
    """common.Bound (a launch record's payload) hands the raw launcher Triton's own
    arguments with the current stream, tensors as their addresses (it holds no tensor),
    on every call; without tensor maps, the compiled kernel's run with the same values."""
    recorded = []
    launcher = _launcher(recorded)
    fast = common.TensorMapLauncher.of(launcher)
    compiled = types.SimpleNamespace(function=7, packed_metadata=("meta",), run=lambda *a: recorded.append(a))
    y = torch.zeros(8)
    x, w = _desc(4096), _desc(8192)
    values = (y, x, 5, w, 64)
    launcher.launch(2, 1, 1, 99, 7, False, False, None, None, ("meta",), None, None, None, y.data_ptr(),
                    *values[1:])
    want = recorded.pop()
    streams = iter([99, 99])
    monkeypatch.setattr(common, "_raw_stream", lambda index: next(streams))
    bound = common.Bound.of(compiled, fast, (2,), values, 0)
    assert not any(isinstance(v, torch.Tensor) for v in bound.values)
    for _ in range(2):
        bound()
        assert recorded.pop() == want
    plain = common.Bound.of(compiled, None, (2, 3), (y, 5, 64), 0)
    monkeypatch.setattr(common, "_raw_stream", lambda index: 42)
    plain()
    assert recorded.pop() == (2, 3, 1, 42, 7, ("meta",), None, None, None, y.data_ptr(), 5, 64)
    assert common.Bound.of(compiled, None, (2,), values, 0) is None, "a descriptor with no encoder: no bound launch"
