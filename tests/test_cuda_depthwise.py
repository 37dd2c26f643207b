"""The depthwise Triton paths against the float64 reference, through the public API.

conv_direct's dw3_rows_kernel (forward; backward data of stride-1 layers on dy with the
flipped filter) and conv_depthwise_backward's dw3_wgrad_kernel (the 3x3 filter gradient,
every tap in one pass), on tiny shapes under the interpreter: both layouts and strided
views, channel counts and H/W that are not multiples of the blocks (interpreter blocks
are 4 wide), paddings 0/1/2, stride 2, dilation 2, channel multiplier 2, alpha/beta and
NaN-poisoned outputs (run_case poisons the output when beta == 0). Every launch config
the tuners may pick (the GPU candidate lists: prefetching row kernels, the per-tap kernel
as a forward candidate, FLAT and multi-slice filter kernels) is run once on its own.

With TRIDNN_GPU_TESTS=1 (and --gpu) the same tests run on the CUDA device, as in
test_cuda_layers.py; otherwise on the CPU through the interpreter.
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
from tridnn.types import TensorFormat  # noqa: E402

import test_cuda_conv as T  # noqa: E402  (run_case: one algorithm through the public API vs the reference)
from tridnn.cuda import conv_depthwise_backward as D  # noqa: E402
from tridnn.cuda import conv_direct  # noqa: E402
from tridnn.cuda.common import Tuner  # noqa: E402

ON_GPU = os.environ.get("TRIDNN_GPU_TESTS") == "1"
DEVICE = "cuda" if ON_GPU else "cpu"
GPU = torch.device("cuda")  # the GPU candidate lists, also run under the interpreter

DIRECT = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.DIRECT)
DATA = registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)
FILTER = [registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo[a]) for a in ("ALGO_0", "ALGO_1")]


def _problem(p, n=2):
    cd = T.conv(p)
    x_desc = tridnn.TensorDescriptor.packed((n, p["C"], *p["spatial"]), "float32", TensorFormat.NCHW)
    w_desc = tridnn.FilterDescriptor((p["K"], 1, *p["kernel"]))
    return ConvProblem.forward(x_desc, w_desc, cd)


# 3x3 stride 1: the row kernel's cases (C = 5, 6: channel tails; H/W odd; pads 0, 1, 2)
ROWS = [T.P(5, 5, (7, 5), 3, 1, 1, 1, 5), T.P(6, 6, (5, 9), 3, 1, 0, 1, 6), T.P(5, 5, (6, 7), 3, 1, 2, 1, 5),
        T.P(4, 8, (5, 6), 3, 1, 1, 1, 4)]     # multiplier 2 (forward only; backward data keeps the tap kernel)
# the filter kernel also takes stride 2 and dilation 2
WGRAD = ROWS + [T.P(6, 6, (7, 8), 3, 2, 1, 1, 6), T.P(5, 5, (9, 7), 3, 1, 2, 2, 5), T.P(3, 6, (7, 7), 3, 2, 1, 1, 3)]


@pytest.mark.parametrize("p", ROWS, ids=T._ids)
@pytest.mark.parametrize("layout,dtype", [("NHWC", "float32"), ("NCHW", "float16"), ("strided", "float32")])
def test_rows_forward(p, layout, dtype, rng):
    assert conv_direct.rows3_applies(_problem(p))
    assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=2, as_torch=True, device=DEVICE) is None
    assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None


@pytest.mark.parametrize("p", ROWS, ids=T._ids)
@pytest.mark.parametrize("layout,dtype", [("NHWC", "float32"), ("NCHW", "float16"), ("strided", "float32")])
def test_rows_backward_data(p, layout, dtype, rng):
    assert D.rows3_backward_applies(_problem(p)) == (p["K"] == p["C"])
    assert T.run_case("bwd_data", DATA, p, dtype, layout, rng, as_torch=True, device=DEVICE) is None
    assert T.run_case("bwd_data", DATA, p, dtype, layout, rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None


@pytest.mark.parametrize("p", WGRAD, ids=T._ids)
@pytest.mark.parametrize("algo", FILTER, ids=lambda a: a.name)
def test_wgrad3(p, algo, rng):
    assert D.wgrad3_applies(_problem(p))
    assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng, device=DEVICE) is None
    assert T.run_case("bwd_filter", algo, p, "float16", "NCHW", rng, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None


def test_wgrad3_many_slices(rng, monkeypatch):
    """More slices than the interpreter's default 3: every slice's partial is summed once."""
    monkeypatch.setattr(D, "filter_slices", lambda problem, device, cap: min(cap, 7))
    p = T.P(5, 5, (6, 5), 3, 1, 1, 1, 5)
    for algo in FILTER:
        assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng, n=3, device=DEVICE) is None


def test_rows_forward_epilogue(rng):
    """Bias, residual z, activation and alpha/beta fused into the row kernel's stores."""
    _epilogue_case(rng, 6)


def _epilogue_case(rng, c, stride=1, spatial=(5, 7)):
    """DIRECT forward of a 3x3 depthwise layer (c channels, batch 2, padding 1) with bias,
    residual z, ReLU, alpha 2 and beta 0.5 against float64 (test_cuda_depthwise_strip too)."""
    from tridnn.api.convolution import execute
    from tridnn.cuda.epilogue import EpilogueSpec
    from tridnn.descriptors.activation import ActivationMode
    p = T.P(c, c, spatial, 3, stride, 1, 1, c)
    cd = T.conv(p)
    handle = T._handle(DEVICE)
    x_vals = testing.fill((2, c) + tuple(spatial), "float32", rng)
    w_vals = testing.fill((c, 1, 3, 3), "float32", rng)
    x_desc, x = testing.make_tensor(x_vals.shape, "float32", "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, "float32", "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), "float32", "NHWC", rng)
    z_vals = testing.fill(y_desc.dims, "float32", rng)
    z_desc, z = testing.make_tensor(y_desc.dims, "float32", "NCHW", rng, z_vals)
    bias = rng.standard_normal(c).astype(np.float32)
    prior = testing.fill(y_desc.dims, "float32", rng)
    y[...] = prior
    spec = EpilogueSpec(activation=ActivationMode.RELU, coef=0.0,
                        bias=torch.from_numpy(bias).reshape(1, c, 1, 1).to(DEVICE), z=T._to_torch(z, DEVICE), alpha2=0.5)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    tensors = {k: T._to_torch(v, DEVICE) for k, v in (("x", x), ("w", w), ("y", y))}
    views = {k: handle.backend.view(tensors[k], d, k, k == "y") for k, d in
             (("x", x_desc), ("w", w_desc.as_tensor()), ("y", y_desc))}
    execute(handle, problem, DIRECT, views, handle.workspace(DIRECT.workspace_size(problem)), 2.0, 0.25,
            epilogue=spec)
    v = (2.0 * reference.conv_forward(x_vals, w_vals, stride, 1, None, 1, c) + 0.25 * prior.astype(np.float64)
         + 0.5 * z_vals.astype(np.float64) + bias.astype(np.float64)[None, :, None, None])
    got = T._to_numpy(tensors["y"], "float32").astype(np.float64)
    np.testing.assert_allclose(got, np.maximum(v, 0), rtol=2e-5, atol=2e-5)


# -- every GPU candidate on its own (under the interpreter too: tiles wider than the tiny
# shapes mask their tails, and C = 5 leaves 11+ masked channels in every block)

def _one_candidate(monkeypatch, name, cfg):
    monkeypatch.setattr(name[0], name[1], lambda *args: [cfg])


FWD_CANDIDATES = conv_direct.fwd_dw3_candidates(GPU, 128)


@pytest.mark.parametrize("cfg", FWD_CANDIDATES, ids=str)
def test_forward_candidate(cfg, rng, monkeypatch):
    """Each forward candidate (row kernel with and without prefetch, the per-tap kernel)."""
    _one_candidate(monkeypatch, (conv_direct, "fwd_dw3_candidates"), cfg)
    monkeypatch.setattr(conv_direct.DirectForward, "tuner", Tuner())
    p = T.P(5, 5, (9, 6), 3, 1, 1, 1, 5)
    assert T.run_case("fwd", DIRECT, p, "float32", "NHWC", rng, n=2, as_torch=True, device=DEVICE) is None
    p = T.P(6, 6, (5, 7), 3, 1, 2, 1, 6)  # pad 2: rows before and after the image
    assert T.run_case("fwd", DIRECT, p, "float16", "strided", rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None


@pytest.mark.parametrize("cfg", D.rows3_data_candidates(GPU, 128), ids=str)
def test_backward_data_candidate(cfg, rng, monkeypatch):
    _one_candidate(monkeypatch, (D, "rows3_data_candidates"), cfg)
    monkeypatch.setattr(D, "_data_tuner", Tuner())
    p = T.P(5, 5, (9, 6), 3, 1, 1, 1, 5)
    assert T.run_case("bwd_data", DATA, p, "float32", "NHWC", rng, n=2, as_torch=True, device=DEVICE) is None
    p = T.P(6, 6, (5, 7), 3, 1, 0, 1, 6)
    assert T.run_case("bwd_data", DATA, p, "float16", "NCHW", rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      device=DEVICE) is None


def _wgrad_candidates(atomic):
    """The H200's list for a 64-channel layer; on the tiny test problems their slice
    counts (up to 16 x 132 / programs) clip to one slice per output row."""
    problem = _problem(T.P(64, 64, (8, 8), 3, 1, 1, 1, 64))
    import unittest.mock as um
    with um.patch.object(D, "sm_count", lambda device: 132):
        cands = D.wgrad3_candidates(problem, GPU, 64, atomic, 65535 if atomic else 64)
    assert len({c["slices"] for c in cands}) > 1
    return cands


@pytest.mark.parametrize("atomic", [False, True], ids=["ALGO_1", "ALGO_0"])
def test_wgrad3_candidates(atomic, rng, monkeypatch):
    """Each filter-gradient candidate (row or FLAT tiles, 4 to 16 programs per SM: many
    slices of the tiny problem) with stride 1 and stride 2, against the reference; then
    the tuner's own launch (partials summed over the slices) for each, on the GPU list."""
    algo = FILTER[1] if not atomic else FILTER[0]
    for cfg in _wgrad_candidates(atomic):
        _one_candidate(monkeypatch, (D, "wgrad3_candidates"), cfg)
        monkeypatch.setattr(D, "_wgrad_tuner", Tuner(tolerance=3e-3))
        for p in (T.P(5, 5, (7, 6), 3, 1, 1, 1, 5), T.P(6, 6, (9, 7), 3, 2, 1, 1, 6)):
            assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng, n=2, device=DEVICE) is None, cfg


# -- strided backward data: one (row phase, column phase) of dx per program
PHASE = [T.P(5, 5, (7, 8), 3, 2, 1, 1, 5), T.P(6, 6, (9, 7), 3, 2, 0, 1, 6), T.P(5, 5, (8, 9), 3, 2, 2, 1, 5),
         T.P(4, 4, (10, 7), 3, 3, 1, 1, 4), T.P(5, 5, (11, 9), 3, 2, 2, 2, 5), T.P(3, 6, (7, 9), 3, 2, 1, 1, 3),
         T.P(4, 4, (9, 8), (5, 3), (2, 3), (2, 1), 1, 4), T.P(4, 4, (13,), 3, 2, 1, 1, 4)]


@pytest.mark.parametrize("p", PHASE, ids=T._ids)
@pytest.mark.parametrize("layout,dtype", [("NHWC", "float32"), ("NCHW", "float16"), ("strided", "float32")])
def test_phase_backward_data(p, layout, dtype, rng):
    """Stride 2 and 3 (pads 0-2, dilation 2, multiplier 2, a 5x3 filter with unequal
    strides, 1-D): every dx phase, including phases without taps (dx = 0, blended)."""
    assert D.phase_backward_applies(_problem(p))
    assert T.run_case("bwd_data", DATA, p, dtype, layout, rng, as_torch=True, device=DEVICE) is None
    assert T.run_case("bwd_data", DATA, p, dtype, layout, rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None


@pytest.mark.parametrize("cfg", D.phase_configs(GPU, 128), ids=str)
def test_phase_backward_data_candidate(cfg, rng, monkeypatch):
    _one_candidate(monkeypatch, (D, "phase_configs"), cfg)
    monkeypatch.setattr(D, "_data_tuner", Tuner())
    p = T.P(5, 5, (9, 8), 3, 2, 1, 1, 5)
    assert T.run_case("bwd_data", DATA, p, "float32", "NHWC", rng, n=3, as_torch=True, device=DEVICE) is None


# -- forward of the other depthwise layers: the runtime tap loop or the unrolled taps
TAPS2D = [T.P(5, 5, (7, 8), 3, 2, 1, 1, 5), T.P(5, 5, (9, 7), 3, 1, 2, 2, 5), T.P(3, 6, (7, 9), 3, 2, 1, 1, 3),
          T.P(4, 4, (9, 8), (5, 3), (2, 3), (2, 1), 1, 4), T.P(4, 4, (13,), 3, 2, 1, 1, 4)]


@pytest.mark.parametrize("cfg", conv_direct.depthwise_taps_candidates(GPU, 128), ids=str)
def test_forward_taps_candidate(cfg, rng, monkeypatch):
    """Stride 2, dilation 2, multiplier 2, a 5x3 filter with unequal strides, 1-D."""
    _one_candidate(monkeypatch, (conv_direct, "depthwise_taps_candidates"), cfg)
    monkeypatch.setattr(conv_direct.DirectForward, "tuner", Tuner())
    for i, p in enumerate(TAPS2D):
        assert conv_direct.taps2d_applies(_problem(p)) and not conv_direct.rows3_applies(_problem(p))
        layout, dtype = (("NHWC", "float32"), ("strided", "float16"), ("NCHW", "float32"))[i % 3]
        assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=2, as_torch=True, device=DEVICE) is None, p
        assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                          mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None, p


def test_wgrad3_tuning_launch(rng):
    """The tuner's launch of every candidate (its partials summed over its slices) gives
    the same column sums as the first candidate's, ALGO_0 and ALGO_1, under the interpreter."""
    from tridnn.cuda.common import agrees
    p = T.P(6, 6, (7, 9), 3, 1, 1, 1, 6)
    problem = _problem(p, n=2)
    x = torch.as_tensor(rng.standard_normal((2, 6, 7, 9)), dtype=torch.float32).contiguous(
        memory_format=torch.channels_last)
    dy = torch.as_tensor(rng.standard_normal((2, 6, 7, 9)), dtype=torch.float32).contiguous(
        memory_format=torch.channels_last)
    import unittest.mock as um
    for atomic in (False, True):
        with um.patch.object(D, "sm_count", lambda device: 132):
            cands = D.wgrad3_candidates(_problem(T.P(64, 64, (8, 8), 3, 1, 1, 1, 64)), GPU, 64, atomic,
                                        65535 if atomic else 64)
        sums = []
        for cfg in cands:
            part = torch.zeros(64 if not atomic else 1, 6, 9, 1)
            used = D._launch_wgrad3(problem, x, dy, part, cfg["slices"], atomic, cfg)
            sums.append(part.reshape(-1)[:(1 if atomic else used) * 54].view(-1, 54).sum(0))
        ref = torch.einsum("nkhw,nkhwt->kt", dy.double(), torch.stack(
            [torch.nn.functional.pad(x.double(), (1, 1, 1, 1))[:, :, a:a + 7, b:b + 9] for a in range(3)
             for b in range(3)], dim=-1)).reshape(-1)
        for cfg, got in zip(cands, sums):
            assert torch.allclose(got.double(), ref, rtol=1e-5, atol=1e-5), cfg
            assert agrees(got, sums[0]), cfg


def test_depthwise_filter_partials_may_take_a_slice_a_row():
    """ALGO_1's workspace holds up to one slice of partials per output row for depthwise
    problems (its column sums need hundreds of slices to fill a GPU), bounded by
    DEPTHWISE_MAX_SLICES; a dense problem keeps the 64-slice cap unless a slice is at most
    WIDE_SLICE_BYTES (then WIDE_SLICES: one output tile still fills the GPU)."""
    from tridnn.cuda import conv_bwd_filter_implicit_gemm as W
    algo = FILTER[1]
    dw = ConvProblem("bwd_filter", *_descs(T.P(8, 8, (40, 12), 3, 1, 1, 1, 8), n=4))
    assert algo._cap(dw) == 4 * 40 and algo.buffers(dw)[0].shape[0] == 4 * 40
    big = ConvProblem("bwd_filter", *_descs(T.P(8, 8, (40, 12), 3, 1, 1, 1, 8), n=200))
    assert algo._cap(big) == W.DEPTHWISE_MAX_SLICES
    dense = ConvProblem("bwd_filter", *_descs(T.P(8, 8, (40, 12), 3, 1, 1, 1, 1), n=4))
    assert algo._cap(dense) == W.WIDE_SLICES  # 8 x 9 x 8 floats a slice: a tiny gradient takes two waves of slices
    wide = ConvProblem("bwd_filter", *_descs(T.P(128, 128, (12, 12), 3, 1, 1, 1, 1), n=4))
    assert algo._cap(wide) == 64  # 576 KB a slice
    assert FILTER[0]._cap(dw) == 1  # ALGO_0 adds atomically into one slice


def _descs(p, n):
    cd = T.conv(p)
    x_desc = tridnn.TensorDescriptor.packed((n, p["C"], *p["spatial"]), "float32", TensorFormat.NCHW)
    w_desc = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]))
    return x_desc, w_desc, x_desc.with_dims(cd.output_dims(x_desc, w_desc)), cd


# -- conv_depthwise_tma: the TMA row walkers (the interpreter emulates TMA). Channels
# of 8 or 12 (float32: 32 / 48-byte pixels; float16 8: 16 bytes) keep the strides
# 16-byte aligned; 12 leaves a half-masked channel block; H and W are not multiples of
# the 3-row strips and 4-column boxes (edge strips); run_case poisons outputs with NaN.
from tridnn.cuda import conv_depthwise_tma as DT  # noqa: E402

TMA_CFG, PAIRS_CFG = DT.fwd_configs(torch.device("cpu"), 8)
TMA_FWD = [T.P(8, 8, (7, 6), 3, 1, 1, 1, 8), T.P(12, 12, (5, 9), 3, 1, 0, 1, 12), T.P(8, 8, (6, 7), 3, 1, 2, 1, 8),
           T.P(8, 8, (8, 10), 3, 2, 1, 1, 8), T.P(12, 12, (6, 14), 3, 2, 1, 1, 12), T.P(8, 8, (5, 7), 3, 1, 1, 1, 8)]


def _count_calls(monkeypatch, name):
    calls = []
    real = getattr(DT, name)
    monkeypatch.setattr(DT, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def _kernels(monkeypatch):
    """The kernels conv_depthwise_tma launches, by name."""
    names = []
    real = DT.launch
    monkeypatch.setattr(DT, "launch", lambda kernel, *a: names.append(kernel.fn.__name__) or real(kernel, *a))
    return names


def test_tma_pairs_kernel(rng, monkeypatch):
    """PAIRS configs take the pair-view kernel where it applies (stride 1, column padding 1,
    even W), else the three-box kernel; both against the reference, with padded pixels."""
    names = _kernels(monkeypatch)
    monkeypatch.setattr(conv_direct, "fwd_dw3_candidates", lambda *a: [dict(PAIRS_CFG)])
    monkeypatch.setattr(conv_direct.DirectForward, "tuner", Tuner())
    for p, want in ((T.P(8, 8, (7, 6), 3, 1, 1, 1, 8), "dw3_tma_pairs_kernel"),
                    (T.P(8, 8, (5, 10), 3, 1, 1, 1, 8), "dw3_tma_pairs_kernel"),
                    (T.P(8, 8, (5, 7), 3, 1, 1, 1, 8), "dw3_tma_fwd_kernel"),
                    (T.P(8, 8, (5, 8), 3, 1, 0, 1, 8), "dw3_tma_fwd_kernel")):
        names.clear()
        assert T.run_case("fwd", DIRECT, p, "float32", "NHWC", rng, n=2, as_torch=True, device=DEVICE) is None
        assert names == [want], (p, names)
    x = torch.as_tensor(rng.standard_normal((2, 6, 10, 8)), dtype=torch.float32)  # pixels padded to 10 columns
    xv = x[:, :, :8].permute(0, 3, 1, 2)  # (N, C, H, W) view, W stride 8 channels, row stride 80
    w = torch.as_tensor(rng.standard_normal((8, 1, 3, 3)), dtype=torch.float32)
    y = torch.full((2, 8, 6, 8), float("nan")).contiguous(memory_format=torch.channels_last)
    names.clear()
    cfg = dict(PAIRS_CFG, BW=8)
    assert DT.fwd_layout_ok(xv, y, 2, (1, 1), (1, 1))
    DT.launch_fwd(xv, w, y, 2, (1, 1), (1, 1), 1.0, 0.0, None, cfg, False)
    assert names == ["dw3_tma_pairs_kernel"]
    ref = torch.nn.functional.conv2d(xv.double(), w.double(), padding=1, groups=8)
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5)


# float16 with 12 channels (24-byte pixels) is not TMA-aligned: left out (the strided
# layout's fallback is tested instead)
TMA_FWD_CASES = [(p, d) for p in TMA_FWD for d in ("float32", "float16") if d == "float32" or p["C"] == 8]
TMA_BWD = [T.P(8, 8, (7, 6), 3, 1, 1, 1, 8), T.P(12, 12, (5, 9), 3, 1, 0, 1, 12), T.P(8, 8, (6, 7), 3, 1, 2, 1, 8)]
TMA_BWD_CASES = [(p, d) for p in TMA_BWD for d in ("float32", "float16") if d == "float32" or p["C"] == 8]


@pytest.mark.parametrize("p,dtype", TMA_FWD_CASES, ids=lambda v: v if isinstance(v, str) else v["name"])
def test_tma_forward(p, dtype, rng, monkeypatch):
    """The forward row walker (stride 1: pads 0-2; stride 2: the phase view) as the only
    candidate, NHWC against the float64 reference; with alpha/beta and CONVOLUTION mode
    (flipped filter); the strided layout (no TMA) takes the fallback."""
    stride2 = p["stride"][0] == 2
    monkeypatch.setattr(conv_direct, "dw2d_candidates" if stride2 else "fwd_dw3_candidates",
                        lambda *a: [dict(TMA_CFG)])
    monkeypatch.setattr(conv_direct.DirectForward, "tuner", Tuner())
    calls = _count_calls(monkeypatch, "launch_fwd")
    assert DT.s2_applies(_problem(p)) == stride2
    assert T.run_case("fwd", DIRECT, p, dtype, "NHWC", rng, n=2, as_torch=True, device=DEVICE) is None
    assert T.run_case("fwd", DIRECT, p, dtype, "NHWC", rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None
    assert len(calls) == 2
    assert T.run_case("fwd", DIRECT, p, dtype, "strided", rng, n=1, as_torch=True, device=DEVICE) is None
    assert len(calls) == 2  # the fallback ran instead


@pytest.mark.parametrize("cfg", DT.fwd_configs(GPU, 1024) + DT.fwd_configs(GPU, 1024, stride=2), ids=str)
def test_tma_forward_gpu_config(cfg, rng, monkeypatch):
    """Each GPU config of the row walkers, float16 (boxes wider than the tiny images and
    their 8 channels: TMA zero-fills); in float32 a 64-channel box (256 bytes) exceeds
    box_ok and the pointer kernel stands in."""
    calls = _count_calls(monkeypatch, "launch_fwd")
    monkeypatch.setattr(conv_direct.DirectForward, "tuner", Tuner())
    for p in (T.P(8, 8, (9, 6), 3, 1, 1, 1, 8), T.P(8, 8, (6, 10), 3, 2, 1, 1, 8)):
        monkeypatch.setattr(conv_direct, "dw2d_candidates" if p["stride"][0] == 2 else "fwd_dw3_candidates",
                            lambda *a: [dict(cfg)])
        assert T.run_case("fwd", DIRECT, p, "float16", "NHWC", rng, n=2, as_torch=True, device=DEVICE) is None
        calls_f16 = len(calls)
        assert T.run_case("fwd", DIRECT, p, "float32", "NHWC", rng, n=1, as_torch=True, device=DEVICE) is None
        assert len(calls) - calls_f16 == (1 if cfg["BC"] * 4 <= 128 else 0)
    assert len(calls) == (4 if cfg["BC"] * 4 <= 128 else 2)


def test_tma_forward_epilogue(rng, monkeypatch):
    """Bias, residual z, activation and alpha/beta fused into the walker's stores."""
    monkeypatch.setattr(conv_direct, "fwd_dw3_candidates", lambda *a: [dict(TMA_CFG)])
    monkeypatch.setattr(conv_direct.DirectForward, "tuner", Tuner())
    calls = _count_calls(monkeypatch, "launch_fwd")
    _epilogue_case(rng, 8)
    assert len(calls) == 1


@pytest.mark.parametrize("p,dtype", TMA_BWD_CASES, ids=lambda v: v if isinstance(v, str) else v["name"])
def test_tma_backward_data(p, dtype, rng, monkeypatch):
    """Stride-1 backward data: the forward walkers (three boxes; pairs where dx's padding
    2 - pad is 1 and W even) on dy with the flipped filter."""
    names = _kernels(monkeypatch)
    for cfg in (TMA_CFG, PAIRS_CFG):
        monkeypatch.setattr(D, "rows3_data_candidates", lambda *a: [dict(cfg)])
        monkeypatch.setattr(D, "_data_tuner", Tuner())
        names.clear()
        assert T.run_case("bwd_data", DATA, p, dtype, "NHWC", rng, n=2, as_torch=True, device=DEVICE) is None
        assert T.run_case("bwd_data", DATA, p, dtype, "NHWC", rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                          mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None
        pairs = cfg.get("PAIRS") and p["pad"][1] == 1 and p["spatial"][1] % 2 == 0
        assert names == ["dw3_tma_pairs_kernel" if pairs else "dw3_tma_fwd_kernel"] * 2, names


@pytest.mark.parametrize("p", TMA_BWD, ids=T._ids)
@pytest.mark.parametrize("algo", FILTER, ids=lambda a: a.name)
def test_tma_wgrad(p, algo, rng, monkeypatch):
    """The filter-gradient walker: slots of (image, row strip, column strip) summed by the
    finish (ALGO_1), or added atomically (ALGO_0); float32 and float16, alpha/beta."""
    problem = _problem(p)
    assert DT.wgrad_applies(problem)
    calls = _count_calls(monkeypatch, "launch_wgrad")
    names = _kernels(monkeypatch)
    for cfg in DT.wgrad_configs(torch.device("cpu"), 8):  # one x row an iteration, three (ROWS3), pairs
        monkeypatch.setattr(D, "wgrad3_candidates", lambda *a: [dict(cfg, slices=1)])
        monkeypatch.setattr(D, "_wgrad_tuner", Tuner(tolerance=3e-3))
        calls.clear()
        names.clear()
        assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng, n=2, device=DEVICE) is None
        pairs = cfg.get("PAIRS") and p["pad"][1] == 1 and p["spatial"][1] % 2 == 0
        assert names[0] == ("dw3_tma_wgrad_pairs_kernel" if pairs else "dw3_tma_wgrad_kernel")
        if p["C"] == 8:
            assert T.run_case("bwd_filter", algo, p, "float16", "NHWC", rng, alpha=2.0, beta=0.5, as_torch=True,
                              mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None
        assert len(calls) == (2 if p["C"] == 8 else 1)


@pytest.mark.parametrize("hw", [(7, 9), (6, 10)], ids=["odd_w", "even_w"])
def test_tma_wgrad_gpu_configs_and_cap(hw, rng, monkeypatch):
    """Every GPU config's launch (slots up to the partial buffer's cap, strips made taller
    when they would not fit) gives the float64 column sums; PAIRS configs take the pair
    kernel where W is even (else the three-box ROWS3 walk)."""
    h, w = hw
    names = _kernels(monkeypatch)
    p = T.P(8, 8, (h, w), 3, 1, 1, 1, 8)
    problem = _problem(p, n=2)
    x = torch.as_tensor(rng.standard_normal((2, 8, h, w)), dtype=torch.float32).contiguous(
        memory_format=torch.channels_last)
    dy = torch.as_tensor(rng.standard_normal((2, 8, h, w)), dtype=torch.float32).contiguous(
        memory_format=torch.channels_last)
    ref = torch.einsum("nkhw,nkhwt->kt", dy.double(), torch.stack(
        [torch.nn.functional.pad(x.double(), (1, 1, 1, 1))[:, :, a:a + h, b:b + w] for a in range(3)
         for b in range(3)], dim=-1)).reshape(-1)
    small = dict(BW=4, BC=8, BH=2, STAGES=2, num_warps=1)
    rows3 = dict(small, BH=4, ROWS3=True)
    pairs = dict(rows3, PAIRS=True)
    for cfg, cap in [(c, 64) for c in DT.wgrad_configs(GPU, 1024)] + [(small, 64), (small, 12), (small, 5),
                                                                      (rows3, 64), (rows3, 7), (pairs, 7)]:
        fit = DT.wgrad_slots(problem, cfg, cap)
        if fit is None:
            assert cap < 2 * 3 and cfg is small  # images x column strips
            continue
        assert fit[3] <= cap
        for atomic in (False, True):
            part = torch.full((cap, 8, 9, 1), float("nan")) if not atomic else torch.zeros(1, 8, 9, 1)
            names.clear()
            used = DT.launch_wgrad(problem, x, dy, part, atomic, cfg, cap)
            got = part.reshape(-1)[:used * 72].view(used, 72).sum(0)
            assert torch.allclose(got.double(), ref, rtol=1e-5, atol=1e-5), (cfg, cap, atomic)
            want = "dw3_tma_wgrad_pairs_kernel" if cfg.get("PAIRS") and w % 2 == 0 else "dw3_tma_wgrad_kernel"
            assert names == [want]
