"""conv_s2d: stride-2 first layers (few input channels) as a stride-1 convolution of 4x4
pixel blocks, inside IMPLICIT_PRECOMP_GEMM forward, ALGO_1 backward data and (behind its
switch) backward filter. Through the public
API against the float64 reference (poisoned outputs, alpha/beta, CONVOLUTION mode, both layouts, odd filters and
paddings), under the interpreter on the CPU and, with TRIDNN_GPU_TESTS=1 --gpu, at
ResNet-50's conv1 size on the GPU; which problems take the path; the block filter
against a direct construction."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_s2d  # noqa: E402

from test_cuda_conv import P, conv, run_case  # noqa: E402

ALGO = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_PRECOMP_GEMM)
BWD = registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)
WGRAD = {a: registry.by_enum("conv", "bwd_filter", "triton", a) for a in (tridnn.ConvBwdFilterAlgo.ALGO_0,
                                                                      tridnn.ConvBwdFilterAlgo.ALGO_1)}
ALGOS = {"fwd": ALGO, "bwd_data": BWD, "bwd_filter": WGRAD[tridnn.ConvBwdFilterAlgo.ALGO_1]}
GPU = os.environ.get("TRIDNN_GPU_TESTS") == "1"
DEVICE = "cuda" if GPU else "cpu"


def _problem(p, n=2, dtype="float32", direction="fwd"):
    cd = conv(p, tridnn.ConvMode.CROSS_CORRELATION, tridnn.MathType.DEFAULT, None)
    xd = tridnn.TensorDescriptor.packed((n, p["C"], *p["spatial"]), dtype, tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, tridnn.TensorFormat.NHWC)
    return ConvProblem(direction, xd, wd, xd.with_dims(cd.output_dims(xd, wd)), cd)


@pytest.fixture
def wgrad_on(monkeypatch):
    """Backward filter through the blocks (on by default; TRIDNN_S2D_WGRAD=0 turns it off)."""
    monkeypatch.setattr(conv_s2d, "WGRAD", True)


@pytest.fixture
def counted(monkeypatch):
    """Counts runs of the block path."""
    calls = []
    real = conv_s2d.run
    monkeypatch.setattr(conv_s2d, "run", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("p,why", [
    (P(3, 64, (224, 224), 7, 2, 3), None),                       # ResNet-50's conv1
    (P(4, 8, (8, 12), 3, 2, 1), None),
    (P(3, 8, (16, 16), 7, 1, 3), "stride 2"),
    (P(5, 8, (16, 16), 7, 2, 3), "at most 4 input channels"),
    (P(3, 8, (18, 16), 7, 2, 3), "multiples of 4"),
    (P(3, 8, (16, 16), 7, 2, 2), "output half"),                 # 7 outputs of 16 rows
    (P(3, 8, (16, 16), 3, 2, 1, dilation=2), "dilation 1"),
    (P(4, 8, (16, 16), 3, 2, 1, groups=2), "groups 1"),
])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_which_problems_take_the_block_path(p, why, direction):
    reason = conv_s2d.why_not(_problem(p, direction=direction))
    assert (reason is None) if why is None else (why in reason), reason
    names = [b.name for b in ALGOS[direction].buffers(_problem(p, direction=direction))]
    if why is None:
        assert names[:3] == ["s2d_x", "s2d_w", "s2d_y"]
        assert direction == "bwd_filter" or len(names) == 3  # (backward filter: the block problem's own too)
    else:
        assert "s2d_x" not in names


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_conv1_blocks_and_estimate(direction):
    """ResNet-50's conv1: 3x3 block taps padded by 1, 64 block channels, 256 block outputs;
    get's estimates rank the block path (IMPLICIT_PRECOMP_GEMM forward, ALGO_1 backward data)
    first; IMPLICIT_GEMM forward stays workspace-free (cuDNN's contract)."""
    problem = _problem(P(3, 64, (224, 224), 7, 2, 3), n=64, dtype="bfloat16", direction=direction)
    ALGO = ALGOS[direction]
    assert conv_s2d.blocks(problem) == conv_s2d.Blocks(56, 56, 3, 3, 1, 1)
    inner = conv_s2d.inner_problem(problem)
    assert inner.x.dims == (64, 64, 56, 56) and inner.w.dims == (256, 64, 3, 3) and inner.y.dims == (64, 256, 56, 56)
    assert inner.direction == direction
    assert inner is conv_s2d.inner_problem(problem)  # memoized per problem object
    others = [a.estimate(problem) for a in registry.algorithms("conv", direction, "triton")
              if a is not ALGO and a.not_applicable(problem) is None]
    assert len(others) >= 1 and ALGO.estimate(problem) < min(others)
    implicit = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM)
    assert implicit.workspace_size(_problem(P(3, 64, (224, 224), 7, 2, 3), n=64, dtype="bfloat16")) == 0


@pytest.mark.parametrize("kernel,pad,spatial", [(7, 3, (16, 16)), (3, 1, (8, 12)), (1, 0, (8, 8)), (5, 2, (8, 8)),
                                                (4, 1, (12, 8))])
@pytest.mark.parametrize("c", [1, 3, 4])
def test_block_filter_is_the_filter_regrouped(kernel, pad, spatial, c):
    """Convolving the blocks of x by the block filter (torch on float64) and moving the
    blocks out gives the convolution: the regrouping itself, independent of the block
    convolution's kernels."""
    p = P(c, 5, spatial, kernel, 2, pad)
    problem = _problem(p)
    b = conv_s2d.blocks(problem)
    g = torch.Generator().manual_seed(kernel * 10 + c)
    x = torch.randn(2, c, *spatial, generator=g, dtype=torch.float64).to(DEVICE)
    w = torch.randn(5, c, kernel, kernel, generator=g, dtype=torch.float64).to(DEVICE)
    xb, wb, yb = (torch.zeros(shape, dtype=torch.float64, device=DEVICE) for shape in
                  ((2, b.h4, b.w4, conv_s2d.CP), (20, b.th, b.tw, conv_s2d.CP), (2, b.h4, b.w4, 20)))
    m = xb.shape[0] * b.h4 * b.w4
    conv_s2d.launch(conv_s2d.x_and_blocks_kernel, (conv_s2d.cdiv(m, 16),), (x, xb, m, b.h4, b.w4, c, *x.stride()),
                    dict(TO_X=False, CP=conv_s2d.CP, BLOCK_M=16, INT64=False), dict(num_warps=4))
    rows = 20 * b.th * b.tw
    conv_s2d.launch(conv_s2d.filter_to_blocks_kernel, (conv_s2d.cdiv(rows, 16),),
                    (w, wb, rows, 5, c, kernel, kernel, pad, pad, b.th, b.tw, b.p_h, b.p_w, *w.stride()),
                    dict(FLIP=False, CP=conv_s2d.CP, BLOCK_R=16), dict(num_warps=4))
    inner = torch.nn.functional.conv2d(xb.permute(0, 3, 1, 2), wb.permute(0, 3, 1, 2), padding=(b.p_h, b.p_w))
    yb.copy_(inner.permute(0, 2, 3, 1))
    want = torch.nn.functional.conv2d(x, w, stride=2, padding=pad)
    y = torch.full_like(want, float("nan"))
    mo = 2 * want.shape[2] * want.shape[3]
    no_epilogue = (y, 0, 0, 0, 0, y, 0, 0.0, 0.0, 1.0)  # (z, its strides, bias, its stride, alpha2, coef, swish)
    conv_s2d.launch(conv_s2d.blocks_and_y_kernel, (conv_s2d.cdiv(mo, 16), 1),
                    (yb, y, mo, *want.shape[2:], 5, *y.stride(), *no_epilogue),
                    dict(TO_Y=True, ACT=-1, HAS_BIAS=False, HAS_Z=False, BLOCK_M=16, BLOCK_K=8, INT64=False),
                    dict(num_warps=4))
    # (the move out sums in float32, as every epilogue: a wrong index would be off by O(1))
    assert torch.allclose(y, want, rtol=1e-6, atol=1e-6 * want.abs().max().item())


CASES = [P(3, 8, (16, 16), 7, 2, 3), P(3, 8, (8, 12), 3, 2, 1), P(2, 4, (8, 8), 1, 2, 0), P(4, 16, (8, 8), 5, 2, 2),
         P(1, 8, (12, 8), 4, 2, 1)]


@pytest.mark.parametrize("p", CASES, ids=lambda p: p["name"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_block_path_against_float64(p, dtype, layout, direction, rng, counted):
    """Through convolution_forward / _backward_data (poisoned output), on the CPU under the
    interpreter."""
    assert run_case(direction, ALGOS[direction], p, dtype, layout, rng, device=DEVICE, as_torch=True) is None
    assert counted, "the block path ran"


@pytest.mark.parametrize("mode", [tridnn.ConvMode.CROSS_CORRELATION, tridnn.ConvMode.CONVOLUTION])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_alpha_beta_and_convolution_mode(mode, direction, rng, counted):
    """beta != 0: the output gathered into the blocks and blended by the block convolution."""
    assert run_case(direction, ALGOS[direction], P(3, 8, (16, 16), 7, 2, 3), "float32", "NHWC", rng, device=DEVICE,
                    as_torch=True, alpha=2.0, beta=0.5, mode=mode) is None
    assert counted


FUSED = [("RELU", 0.0, False), ("CLIPPED_RELU", 1.5, True), ("SIGMOID", 0.0, False), ("GELU", 0.0, True),
         ("IDENTITY", 0.0, False)]


@pytest.mark.parametrize("act,coef,z_is_y", FUSED, ids=[a for a, _, _ in FUSED])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fused_epilogue_as_the_blocks_move_out(act, coef, z_is_y, dtype, rng, counted):
    """convolution_bias_activation_forward with IMPLICIT_PRECOMP_GEMM on a first layer: act(alpha1 *
    conv + alpha2 * z + bias) applied as the blocks move out to y (z = y in place for some),
    against float64 (the block convolution rounds once to the data type before the epilogue).
    NumPy arrays through the interpreter's handle (the GPU run covers the epilogue's kernel
    in test_gpu_resnet50_conv1's neighbours: this one is CPU-only)."""
    if GPU:
        pytest.skip("NumPy arrays on the CPU interpreter's handle")
    from tridnn import testing
    from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode
    from tridnn import reference
    p = P(3, 8, (16, 12), 7, 2, 3)
    cd = conv(p, tridnn.ConvMode.CROSS_CORRELATION, tridnn.MathType.DEFAULT, None)
    x_vals = testing.fill((2, 3, 16, 12), dtype, rng)
    w_vals = testing.fill((8, 3, 7, 7), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), dtype, "NHWC", rng)
    z_vals = testing.fill(y_desc.dims, dtype, rng)
    if z_is_y:
        z_desc, z = y_desc, y
        y[...] = z_vals
    else:
        z_desc, z = testing.make_tensor(y_desc.dims, dtype, "NCHW", rng, z_vals)
        testing.poison(y)
    bias_vals = testing.fill((1, 8, 1, 1), dtype, rng)
    b_desc, bias = testing.make_tensor((1, 8, 1, 1), dtype, "NCHW", rng, bias_vals)
    act_desc = ActivationDescriptor(ActivationMode[act], coef=coef, swish_beta=0.75)
    want = reference.fused.conv_bias_activation_forward(x_vals, w_vals, z_vals, bias_vals, act_desc.mode, coef,
                                                         0.75, alpha1=2.0, alpha2=0.5, stride=2, pad_pre=3)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    ws = np.empty(ALGO.workspace_size(problem), np.uint8)
    tridnn.convolution_bias_activation_forward(handle, 2.0, x_desc, x, w_desc, w, cd, ALGO.enum, ws, 0.5, z_desc, z,
                                               b_desc, bias, act_desc, y_desc, y)
    testing.assert_all_written(y, act)
    tol = 3e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=tol, atol=tol * np.abs(want).max(),
                               err_msg=f"{act} {dtype}")
    assert counted, "the block path ran"


def test_kernels_compile_for_sm90_without_spills():
    """Every kernel of the block path, both directions of the moves and the fused epilogue
    (relu, gelu with bias and z), compiles for sm_90 offline with no local-memory spills
    (a child process without the interpreter: tests/gluon_helpers.compile_in_child)."""
    from gluon_helpers import compile_in_child
    calls = [("tridnn.cuda.conv_s2d", "compile_sm90", name, kw) for name, kw in [
        ("x_and_blocks", {}), ("x_and_blocks", {"to": False}), ("filter_to_blocks", {}), ("blocks_and_y", {}),
        ("blocks_and_y", {"to": False}), ("blocks_and_y", {"act": 1, "has_bias": True, "has_z": True}),
        ("blocks_and_y", {"act": 101, "has_bias": True, "has_z": True, "dtype": "fp32"}), ("blocks_to_filter", {})]]
    for (_, _, name, kw), facts in zip(calls, compile_in_child(calls)):
        assert facts is not None and facts["regs"] > 0, (name, kw)
        assert "STL" not in facts["sass"], f"{name} {kw} spills to local memory"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_gpu_resnet50_conv1(dtype, direction, rng, counted, wgrad_on):
    """ResNet-50's conv1 at batch 4 on the GPU (bfloat16, and float32 under TENSOR_OP
    math: tf32), against float64; the inner 3x3 problem takes the algorithm's TMA path
    (backward filter with its switch on)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    math = tridnn.MathType.TENSOR_OP if dtype == "float32" else tridnn.MathType.DEFAULT
    for alpha, beta in ((1.0, 0.0), (0.5, 2.0)):
        assert run_case(direction, ALGOS[direction], P(3, 64, (224, 224), 7, 2, 3), dtype, "NHWC", rng, n=4,
                        device="cuda", math=math, alpha=alpha, beta=beta) is None
    assert len(counted) == 2


@pytest.mark.parametrize("p", CASES, ids=lambda p: p["name"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_backward_filter_through_the_blocks(p, dtype, rng, counted, wgrad_on):
    """Backward filter: the block problem's filter gradient folded
    into dw (four copies of each tap summed), ALGO_1, NHWC and NCHW, against float64."""
    for layout in ("NHWC", "NCHW"):
        assert run_case("bwd_filter", ALGOS["bwd_filter"], p, dtype, layout, rng, device=DEVICE, as_torch=True) is None
    assert len(counted) == 2


def test_backward_filter_rounds_once(rng, counted, wgrad_on):
    """float16: each dw element is its float32 sum (the block filter's gradient is kept in
    float32, four copies added, one rounding), so it is within half an ulp of float16 (plus
    the float32 sums' error) of the float64 weight gradient; a 16-bit block gradient (two
    roundings) was off by up to ~2 half-ulps."""
    import torch
    problem = _problem(P(3, 16, (32, 32), 7, 2, 3), n=2, dtype="float16", direction="bwd_filter")
    xd, wd, yd, cd = problem.x, problem.w, problem.y, problem.conv
    cl = torch.channels_last
    x = torch.from_numpy(rng.standard_normal(xd.dims)).half().contiguous(memory_format=cl)
    dy = torch.from_numpy(rng.standard_normal(yd.dims)).half().contiguous(memory_format=cl)
    dw = torch.full(wd.dims, float("nan"), dtype=torch.float16).contiguous(memory_format=cl)
    algo = ALGOS["bwd_filter"]
    ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8)
    handle = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    tridnn.convolution_backward_filter(handle, 1.0, xd, x, yd, dy, cd, algo.enum, ws, 0.0, wd, dw)
    assert counted
    want = torch.nn.grad.conv2d_weight(x.double(), (16, 3, 7, 7), dy.double(), stride=2, padding=3)
    half_ulp = 2.0 ** -11 * want.abs()
    excess = (dw.double() - want).abs() - half_ulp
    assert excess.max().item() <= 1e-5 * want.abs().max().item(), excess.max().item()


@pytest.mark.parametrize("mode", [tridnn.ConvMode.CROSS_CORRELATION, tridnn.ConvMode.CONVOLUTION])
def test_backward_filter_alpha_beta_and_mode(mode, rng, counted, wgrad_on):
    assert run_case("bwd_filter", ALGOS["bwd_filter"], P(3, 8, (16, 16), 7, 2, 3), "float32", "NHWC", rng,
                    device=DEVICE, as_torch=True, alpha=2.0, beta=0.5, mode=mode) is None
    assert counted


def test_backward_filter_workspace_holds_the_block_problems_own(wgrad_on):
    """The blocks plus the block problem's own buffers (ALGO_1's partials)."""
    problem = _problem(P(3, 64, (224, 224), 7, 2, 3), n=64, dtype="bfloat16", direction="bwd_filter")
    algo = ALGOS["bwd_filter"]
    names = [b.name for b in algo.buffers(problem)]
    assert names[:3] == ["s2d_x", "s2d_w", "s2d_y"] and "part" in names
    assert algo.estimate(problem) < 270e-6  # below ALGO_1's measured 270 us without the blocks


def test_backward_filter_atomic_keeps_its_own_path(rng, counted, wgrad_on):
    """ALGO_0 (atomics) does not take the blocks: on the block problem it was 2x slower."""
    p = P(3, 8, (16, 16), 7, 2, 3)
    problem = _problem(p, n=2, dtype="float32", direction="bwd_filter")
    assert "s2d_x" not in [b.name for b in WGRAD[tridnn.ConvBwdFilterAlgo.ALGO_0].buffers(problem)]
    assert run_case("bwd_filter", WGRAD[tridnn.ConvBwdFilterAlgo.ALGO_0], p, "float32", "NHWC", rng,
                    device=DEVICE, as_torch=True) is None
    assert not counted


def test_backward_filter_blocks_switch(monkeypatch):
    """On by default (conv_s2d.WGRAD, measured faster on the H200); TRIDNN_S2D_WGRAD=0 turns
    it off, and ALGO_1 then declares only its own buffers."""
    problem = _problem(P(3, 64, (224, 224), 7, 2, 3), n=64, dtype="bfloat16", direction="bwd_filter")
    assert conv_s2d.WGRAD == (os.environ.get("TRIDNN_S2D_WGRAD", "1") == "1")
    monkeypatch.setattr(conv_s2d, "WGRAD", False)
    assert "TRIDNN_S2D_WGRAD=0" in conv_s2d.why_not(problem)
    assert "s2d_x" not in [b.name for b in ALGOS["bwd_filter"].buffers(problem)]
