"""Element offsets past 2^31 inside ONE image: every Triton convolution, through the public API;
then layer ops and every pooling design (tridnn.cuda directly).

The kernels take INT64 (geometry.needs_int64: a view's span passes 2^30) and must then form
whole offsets in int64, not only the image term: in a single channels-last image of
1 x 2 x 32800 x 32800, oh * ys_h alone passes 2^31. Such a tensor needs a GPU; here the
views have huge strides and few elements instead, so Triton's interpreter (which wraps
int32 products as the GPU does) runs them in seconds:

- one stride is BIG = 2^31 - 64, an int32 kernel argument: index 1 times it fits int32,
  index 2 times it (2^32 - 128) wraps to -128;
- each view starts OFFSET elements into a storage of 2^32 + OFFSET + a little (8 GiB of
  float16 address space, only the touched pages committed), so a wrapped offset still lands
  inside the allocation: a kernel that keeps a term in int32 reads or writes the wrong
  element (a silent wrong answer, caught against the float64 reference and by the NaN
  poison of the output), it does not crash the process.

Layouts: "rows", channels-last with rows BIG elements apart (the big image's oh * ys_h,
ih * xs_h; for 1-D and 3-D views the first spatial dim); "channels", channels-first with
channels BIG apart (c * xs_c, offs_n * ys_k).
The filter is small and packed. With --gpu (TRIDNN_GPU_TESTS=1) the same cases run on a
CUDA device (16 GiB of it for the two big views).
"""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

from test_cuda_layers import _Recorder  # noqa: E402

BIG = 2**31 - 64
OFFSET = 1 << 16
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
ALGOS = {d: registry.algorithms("conv", d, "triton") for d in DIRECTIONS}
LAYOUTS = ("rows", "channels")
# (C, K, groups, filter size, stride, padding); the images are 1 x C x 3 x 5
PROBLEMS = {"dense": (3, 3, 1, 3, 1, 1), "depthwise": (3, 3, 3, 3, 1, 1), "depthwise5s2": (3, 3, 3, 5, 2, 2)}
H, W = 3, 5
WIDE = ("FFT_TILING", "dense")  # this one's images are 16 wide: FFT_TILING needs a plane past one 16 x 16 tile


def _rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _strides(layout, c, *spatial):
    """(n, c, *spatial) element strides of a 1 x c x spatial view (1-D to 3-D) with one stride
    BIG: "rows" the first spatial dim's, the others and C packed under it (C innermost);
    "channels" the channels', the spatial dims packed (the last innermost)."""
    packed = (c, *spatial[:0:-1]) if layout == "rows" else spatial[::-1]  # innermost first
    inner, step = [], 1
    for d in packed:
        inner.append(step)
        step *= d
    if layout == "rows":
        strides = [0, 1, BIG, *inner[:0:-1]]
    else:
        strides = [0, BIG, *inner[::-1]]
    strides[0] = 1 + sum((d - 1) * s for d, s in zip((c, *spatial), strides[1:]))  # (N is 1)
    return tuple(strides)


def _huge_view(dims, layout, device):
    """A float16 view of dims with _strides(layout), OFFSET elements into its own storage."""
    strides = _strides(layout, *dims[1:])
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    try:
        store = torch.empty(OFFSET + span + 64, dtype=torch.float16, device=device)
    except (RuntimeError, MemoryError) as exc:  # no 8 GiB of address space (or of GPU memory)
        pytest.skip(f"cannot allocate the {span * 2 / 2**30:.0f} GiB storage of a huge view: {exc}")
    view = store.as_strided(dims, strides, OFFSET)
    return tridnn.TensorDescriptor(dims, "float16", strides), view


def _ints(shape, rng):
    return rng.integers(-2, 3, size=shape).astype(np.float16)


def _run(direction, algo, layout, problem, device, rng):
    """One algorithm on huge views; returns a skip reason, else checks against float64."""
    c, k, groups, f, st, pad = PROBLEMS[problem]
    width = 16 if (algo.name, problem) == WIDE else W
    cd = tridnn.ConvolutionDescriptor(padding=(pad, pad), stride=(st, st), dilation=(1, 1), groups=groups, nd=2)
    x_dims = (1, c, H, width)
    w_desc = tridnn.FilterDescriptor((k, c // groups, f, f), "float16")
    y_dims = (1, k, *((i + 2 * pad - f) // st + 1 for i in (H, width)))
    x_desc, x = _huge_view(x_dims, layout, device)
    y_desc, y = _huge_view(y_dims, layout, device)
    w = torch.empty(w_desc.dims, dtype=torch.float16, device=device)
    prob = ConvProblem(direction, x_desc, w_desc, y_desc, cd)
    reason = algo.not_applicable(prob)
    if reason is not None:
        return reason
    x_vals, w_vals, y_vals = _ints(x_dims, rng), _ints(w_desc.dims, rng), _ints(y_dims, rng)
    arrays = {"x": (x, x_vals), "w": (w, w_vals), "y": (y, y_vals)}
    out = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[direction]
    for name, (t, vals) in arrays.items():
        if name == out:
            t.fill_(float("nan"))
        else:
            t.copy_(torch.from_numpy(vals))
    need = algo.workspace_size(prob)
    ws = torch.full((need,), 0xFF, dtype=torch.uint8, device=device) if need else None
    handle = (tridnn.Handle(device="cpu", backend="triton", find_cache=None) if device == "cpu"
              else tridnn.Handle(device=device, find_cache=None))
    geometry = dict(stride=(st, st), pad_pre=(pad, pad), pad_post=(pad, pad), dilation=(1, 1), groups=groups)
    if direction == "fwd":
        tridnn.convolution_forward(handle, 1.0, x_desc, x, w_desc, w, cd, algo.enum, ws, 0.0, y_desc, y)
        ref = reference.conv_forward(x_vals, w_vals, **geometry)
    elif direction == "bwd_data":
        tridnn.convolution_backward_data(handle, 1.0, w_desc, w, y_desc, y, cd, algo.enum, ws, 0.0, x_desc, x)
        ref = reference.conv_backward_data(y_vals, w_vals, x_dims, **geometry)
    else:
        tridnn.convolution_backward_filter(handle, 1.0, x_desc, x, y_desc, y, cd, algo.enum, ws, 0.0, w_desc, w)
        ref = reference.conv_backward_filter(x_vals, y_vals, w_desc.dims, **geometry)
    got = arrays[out][0].detach().cpu().contiguous().numpy()
    exact = algo.exact and direction != "bwd_filter"  # (float16 weight gradients round their sums)
    testing.check_result(got, ref, "float16", exact, name=f"{algo.name} {direction} {layout} {problem}")
    return None


DEVICES = [pytest.param("cpu", id="interpreter"), pytest.param("cuda", id="gpu", marks=pytest.mark.gpu)]
CASES = [pytest.param(d, a, id=f"{d}-{a.name}") for d in DIRECTIONS for a in ALGOS[d]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("direction, algo", CASES)
def test_offsets_past_int32_in_one_image(direction, algo, layout, problem, device, rng, monkeypatch):
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest unless TRIDNN_GPU_TESTS=1)")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    monkeypatch.setenv("TRIDNN_TUNE", "first")  # (the tuner would time every config on an 8 GiB scratch copy)
    rss = _rss_bytes()
    reason = _run(direction, algo, layout, problem, device, rng)
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")
    # the storages (up to 8 GiB each) were never touched but for the view's elements (and the
    # pages of wrapped offsets): the process did not commit them
    assert _rss_bytes() - rss < 1 << 30


@pytest.mark.parametrize("device", DEVICES)
def test_rows_backward_filter_offsets_past_int32(device, rng, monkeypatch):
    """Backward filter ALGO_1's few-channel path (conv_wgrad_tma's window-row kernel), which
    the cases above do not reach (a BIG row stride leaves no TMA plan, and the pointer path's
    one interpreter config is the pointer kernel's): that config swapped for the window-row
    kernel's CPU config, on a channels-last x and dy whose row stride is BIG, so it runs INT64."""
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest unless TRIDNN_GPU_TESTS=1)")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from test_cuda_wgrad_tma import only_rows_recording
    algo = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.ALGO_1)
    # on a GPU the tuner then times every one of rows_candidates' configs: each must run INT64
    flags = only_rows_recording(monkeypatch, algo, "INT64")
    assert _run("bwd_filter", algo, "rows", "dense", device, rng) is None
    assert flags and all(flags), flags
    if device == "cpu":
        assert len(flags) == 1


# -- the layers: channels BIG apart (views the (N, C, S) kernels take as they are) ---------------
def _layer(op, device, rng):
    """(got, reference) of one layer op on 1 x 3 x 3 x 5 "channels" views (float16)."""
    from tridnn.cuda import batchnorm, conv_bwd_bias, lrn, norms, softmax
    from tridnn.reference import conv as ref_conv, lrn as ref_lrn, normalization as ref_norm, softmax as ref_softmax
    dims = (1, 3, H, W)
    views = [_huge_view(dims, "channels", device)[1] for _ in range(3)]
    a_vals, b_vals = _ints(dims, rng), _ints(dims, rng)
    a, b, out = views
    a.copy_(torch.from_numpy(a_vals))
    b.copy_(torch.from_numpy(b_vals))
    out.fill_(float("nan"))
    param = lambda v: torch.tensor(v, dtype=torch.float32, device=device)  # noqa: E731
    if op == "softmax_fwd":
        softmax.softmax_forward(a, out, algorithm=softmax.ACCURATE, mode=softmax.CHANNEL)
        ref = ref_softmax.softmax_forward(a_vals, softmax.ACCURATE, softmax.CHANNEL)
    elif op == "softmax_bwd":
        y_vals = ref_softmax.softmax_forward(a_vals, softmax.ACCURATE, softmax.CHANNEL).astype(np.float16)
        a.copy_(torch.from_numpy(y_vals))
        softmax.softmax_backward(a, b, out, algorithm=softmax.ACCURATE, mode=softmax.CHANNEL)
        ref = ref_softmax.softmax_backward(y_vals, b_vals, softmax.ACCURATE, softmax.CHANNEL)
    elif op == "lrn_fwd":
        lrn.lrn_cross_channel_forward(a, out, 3, 0.5, 0.75, 2.0)
        ref = ref_lrn.lrn_forward(a_vals, 3, 0.5, 0.75, 2.0)
    elif op == "group_norm_fwd":
        norms.group_norm_forward(a, out, param([1.5, 0.5, 1.0]), param([0.25, -0.5, 0.0]), None, None, 1, 1e-5)
        ref = ref_norm.group_norm(a_vals, [1.5, 0.5, 1.0], [0.25, -0.5, 0.0], 1, 1e-5)[0]
    elif op == "batch_norm_fwd":
        shape = (1, 3, 1, 1)
        batchnorm.batch_norm_forward_training(a, None, out, param([1.5, 0.5, 1.0]).reshape(shape),
                                              param([0.25, -0.5, 0.0]).reshape(shape), None, None, None, None,
                                              1, 1.0, 1e-5, 0)
        ref = ref_norm.batch_norm_train(a_vals, np.reshape([1.5, 0.5, 1.0], shape),
                                         np.reshape([0.25, -0.5, 0.0], shape), 1e-5)[0]
    else:  # conv_bias_bwd: db[k] = sum of dy over the image
        db = torch.full((1, 3, 1, 1), float("nan"), dtype=torch.float16, device=device)
        conv_bwd_bias.backward_bias(a, db, 1.0, 0.0)
        return db.cpu().numpy(), ref_conv.conv_backward_bias(a_vals)
    return out.detach().cpu().contiguous().numpy(), ref


LAYER_OPS = ("softmax_fwd", "softmax_bwd", "lrn_fwd", "group_norm_fwd", "batch_norm_fwd", "conv_bias_bwd")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # (masked lanes: 0 / 0)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", LAYER_OPS)
def test_layer_offsets_past_int32_in_one_image(op, device, rng):
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest unless TRIDNN_GPU_TESTS=1)")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    got, ref = _layer(op, device, rng)
    testing.assert_all_written(got, op)
    testing.assert_close(got, np.reshape(ref, got.shape), "float16", name=op)


# -- pooling: every design's kernels (pooling's module flags pick them) ----------------------------
# The channels-last designs take a view whose spatial dims merge into one (layer_utils.channels_last):
# their "rows" views have one spatial dim past 1, BIG apart (H: the "3x1" geometries; W: the 1-D
# ones). A BIG-strided dim has 3 entries (index 2 wraps), as in the convolution cases. Each case
# checks which kernels ran (a spy on each), so a design that silently fell back would fail. (Before
# the kernels widened their strides, 55 of the 75 cases failed under the interpreter; the
# channels-last row kernels passed then too: their tile ids were int64 whole; the fused max
# backward failed only through the interpreter's Python-int loop counters, a * gsh.)
# (dims, window, padding, stride); "adaptive": stride holds the output size
POOL_GEOMETRIES = {
    "3x3s2": ((1, 3, 5, 5), (3, 3), (1, 1), (2, 2)),  # 3 x 3 outputs: an output index 2 as well
    "2x2s1": ((1, 3, 5, 5), (2, 2), (0, 0), (1, 1)),  # no padding
    "3x1_3x3s12": ((1, 3, 3, 1), (3, 3), (1, 1), (1, 2)),  # 3 x 1 outputs
    "3x1_2x1s1": ((1, 3, 3, 1), (2, 1), (0, 0), (1, 1)),  # no padding
    "3x1_2x3s12": ((1, 3, 3, 1), (2, 3), (0, 1), (1, 2)),  # (the fused max backward: KH <= 2 SH)
    "1d": ((1, 3, 3), (3,), (1,), (1,)),
    "1d_s2": ((1, 3, 7), (3,), (1,), (2,)),  # ("channels" only: 7 entries BIG apart: a 24 GiB storage)
    "1d_2": ((1, 3, 3), (2,), (0,), (1,)),  # (the fused "shift" design: an input column under 2 outputs)
    "3d": ((1, 3, 3, 5, 5), (3, 3, 3), (1, 1, 1), (1, 2, 2)),  # a window along D
    "3d_hw": ((1, 3, 1, 5, 5), (1, 3, 3), (0, 1, 1), (1, 2, 2)),  # none along D
    "3d_hw_3x1": ((1, 3, 1, 3, 1), (1, 3, 3), (0, 1, 1), (1, 1, 2)),
    "global": ((1, 3, 5, 5), (5, 5), (0, 0), (1, 1)),
    "adaptive": ((1, 3, 5, 5), None, None, (3, 3)),
}
POOL_MODES = {"MAX": 0, "AVG_INCL": 1, "AVG_EXCL": 2}  # (adaptive: MAX 0, AVG_EXCL the average 1)
POOL_DESIGNS = {  # pooling module flags
    "default": {},
    "rows": {"NCHW_LANE_KERNELS": frozenset()},
    "gather": {"CL_KERNELS": False, "ROW_KERNELS": False},
    "fused_phases": {"CL_FUSED_MAX_BWD": "phases"},
    "fused_shift": {"CL_FUSED_MAX_BWD": "shift"},
    "global": {"GLOBAL_AVG_KERNEL": True},
}
POOL_KERNELS = {"gf": "_pool_forward_kernel", "gb": "_pool_backward_kernel",
                "rf": "_pool_rows_forward_kernel", "rb": "_pool_rows_backward_kernel",
                "lf": "_pool_nchw_lane_forward_kernel",
                "cf": "_pool_cl_forward_kernel", "cb": "_pool_cl_backward_kernel",
                "fs": "_pool_cl_max_backward_kernel", "fp": "_pool_cl_max_backward_phases_kernel",
                "ga": "_global_avg_kernel"}


def _pool_cases():
    """(design, layout, geometry, mode, direction, the kernels that must run) per case."""
    cases = []

    def add(design, layout, geo, modes, fwd, bwd_max, bwd_avg, directions=("fwd", "bwd")):
        for mode in modes:
            for direction in directions:
                kernels = fwd if direction == "fwd" else (bwd_max if mode == "MAX" else bwd_avg)
                cases.append(pytest.param(design, layout, geo, mode, direction, kernels.split(),
                                          id=f"{design}-{layout}-{geo}-{direction}-{mode}"))
    every = ("MAX", "AVG_INCL", "AVG_EXCL")
    some = ("MAX", "AVG_EXCL")
    # the defaults: channels-last row kernels; NCHW lane kernels (every backward gather: row kernels);
    # gather kernels where neither applies (a window along D, adaptive, unmerged channels-last)
    add("default", "rows", "3x1_3x3s12", every, "cf", "cf cb", "cb")
    add("default", "rows", "3x1_2x1s1", ("AVG_EXCL",), "cf", "cf cb", "cb")
    add("default", "rows", "1d", some, "cf", "cf cb", "cb")
    add("default", "rows", "3d_hw_3x1", ("MAX",), "cf", "cf cb", "cb")
    add("default", "channels", "3x3s2", every, "lf", "lf rb", "rb")
    add("default", "channels", "2x2s1", ("AVG_EXCL",), "lf", "lf rb", "rb")
    add("default", "channels", "1d_s2", some, "lf", "lf rb", "rb")
    add("default", "channels", "3d_hw", ("AVG_INCL",), "lf", "lf rb", "rb")
    add("default", "channels", "3d", some, "rf", "rf rb", "rb")
    add("default", "rows", "3d", some, "gf", "gf gb", "gb")
    add("default", "rows", "3x3s2", ("MAX",), "gf", "gf gb", "gb")
    add("default", "rows", "adaptive", some, "gf", "gf gb", "gb")
    add("default", "channels", "adaptive", some, "gf", "gf gb", "gb")
    # the other designs
    add("rows", "channels", "3x3s2", some, "rf", "rf rb", "rb")
    add("rows", "channels", "2x2s1", ("AVG_INCL",), "rf", "rf rb", "rb")
    add("gather", "rows", "3x1_3x3s12", some, "gf", "gf gb", "gb")
    add("gather", "rows", "2x2s1", ("AVG_INCL",), "gf", "gf gb", "gb")
    add("gather", "channels", "3x3s2", some, "gf", "gf gb", "gb")
    add("gather", "channels", "2x2s1", ("AVG_INCL",), "gf", "gf gb", "gb")
    for design, kernel in (("fused_phases", "fp"), ("fused_shift", "fs")):
        for geo in ("3x1_2x3s12", "1d_2"):
            add(design, "rows", geo, ("MAX",), "", kernel, "", directions=("bwd",))
    add("global", "channels", "global", ("AVG_INCL",), "ga", "", "", directions=("fwd",))
    return cases


def _distinct(shape, rng):
    """Distinct small integers (float16-exact): no ties, so every window has one first maximum."""
    size = int(np.prod(shape))
    return (rng.permutation(size) - size // 2).reshape(shape).astype(np.float16)


def _pool(design, layout, geo, mode, direction, device, rng, monkeypatch):
    """(got, reference, the kernels that ran) of one pooling case on huge views."""
    from tridnn.cuda import pooling
    from tridnn.reference import pooling as ref_pool
    for name, value in POOL_DESIGNS[design].items():
        monkeypatch.setattr(pooling, name, value)
    ran = []
    for short, name in POOL_KERNELS.items():
        monkeypatch.setattr(pooling, name, _Recorder(getattr(pooling, name), short, ran))
    dims, window, pad, stride = POOL_GEOMETRIES[geo]
    adaptive = window is None
    if adaptive:
        out = stride
    else:
        out = tuple((i + 2 * p - k) // s + 1 for i, k, p, s in zip(dims[2:], window, pad, stride))
    m = POOL_MODES[mode]
    amode = 0 if m == 0 else 1
    x = _huge_view(dims, layout, device)[1]
    x_vals = _distinct(dims, rng)
    x.copy_(torch.from_numpy(x_vals))
    y_dims = dims[:2] + out
    if direction == "fwd":
        y = _huge_view(y_dims, layout, device)[1]
        y.fill_(float("nan"))
        if adaptive:
            pooling.adaptive_pooling_forward(x, y, amode)
            ref = ref_pool.adaptive_pooling_forward(x_vals, out, amode)
        else:
            pooling.pooling_forward(x, y, m, window, pad, stride)
            ref = ref_pool.pooling_forward(x_vals, m, window, pad, stride)
        got = y
    else:
        dy = _huge_view(y_dims, layout, device)[1]
        dy_vals = _ints(y_dims, rng)
        dy.copy_(torch.from_numpy(dy_vals))
        dx = _huge_view(dims, layout, device)[1]
        dx.fill_(float("nan"))
        if adaptive:
            pooling.adaptive_pooling_backward(x, dy, dx, amode)
            ref = ref_pool.adaptive_pooling_backward(x_vals, dy_vals, amode)
        else:
            pooling.pooling_backward(None, dy, x, dx, m, window, pad, stride)
            ref = ref_pool.pooling_backward(x_vals, dy_vals, m, window, pad, stride)
        got = dx
    return got.detach().cpu().contiguous().numpy(), ref, set(ran)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("design, layout, geo, mode, direction, kernels", _pool_cases())
def test_pooling_offsets_past_int32_in_one_image(design, layout, geo, mode, direction, kernels, device, rng,
                                                 monkeypatch):
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 (set by conftest unless TRIDNN_GPU_TESTS=1)")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rss = _rss_bytes()
    got, ref, ran = _pool(design, layout, geo, mode, direction, device, rng, monkeypatch)
    name = f"{design} {layout} {geo} {direction} {mode}"
    assert ran == set(kernels), f"{name}: ran {sorted(ran)}, not {sorted(kernels)}"
    testing.assert_all_written(got, name)
    testing.assert_close(got, np.reshape(ref, got.shape), "float16", name=name)
    assert _rss_bytes() - rss < 1 << 30
