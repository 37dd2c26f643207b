"""The Gluon convolution (tridnn.cuda.gluon_conv) as tuner candidates of IMPLICIT_GEMM
forward and ALGO_1 backward data.

CPU: which problems get Gluon configs (the lists are built on the host with a stand-in
Hopper device), that they come after conv_tma's reference config, the host-side filter
transforms (CONVOLUTION mode's reversed taps; backward data as a forward convolution of dy
by the turned filter) against float64 convolutions, the fallback when a Gluon pick meets
tensors it cannot take, and the sm_90 compile of every offered config with and without
the beta blend and the fused epilogue (bias, activation, residual). Lists and transforms
for convolution_bias_activation_forward's epilogue too (piecewise-linear activations).
GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_gluon_integration.py``): each offered
config forced through the public API against the float64 reference: alpha/beta, both
modes, odd shapes, outputs poisoned with NaN, convolution_bias_activation_forward.
"""
import collections
import re
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gc = pytest.importorskip("tridnn.cuda.gluon_conv", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import common, conv_tma, gluon_common  # noqa: E402
from tridnn.cuda import conv_bwd_data_implicit_gemm as bwd  # noqa: E402
from tridnn.cuda import conv_implicit_gemm as fwd  # noqa: E402
from tridnn.cuda.epilogue import EpilogueSpec  # noqa: E402
from tridnn.descriptors.activation import ActivationMode  # noqa: E402

import gluon_helpers  # noqa: E402
from gluon_helpers import force_one_config, need_hopper  # noqa: E402
from test_cuda_conv import P, run_case  # noqa: E402

ALGO = {"fwd": registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM),
        "bwd_data": registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)}
CUDA = types.SimpleNamespace(type="cuda", index=0)
ALL_PICKS = list({gc.name(c): c for c in gc.PICKS_NARROW + gc.PICKS_LARGE + gc.PICKS_MEDIUM + gc.PICKS_SMALL
                  + gc.PICKS_FLAT + gc.PICKS_INNER + gc.PICKS_INNER_SMALL}.values())


def _problem(direction, c, k, hw, kernel, stride=1, pad=0, n=4, dtype="float16", layout="NHWC", groups=1,
             dilation=1, mode=tridnn.ConvMode.CROSS_CORRELATION, nd=2):
    """A ConvProblem and CPU tensors (x, w, y) of its shapes in ``layout``."""
    cd = tridnn.ConvolutionDescriptor(padding=(pad,) * nd, stride=(stride,) * nd, dilation=(dilation,) * nd,
                                      groups=groups, mode=mode, nd=nd)
    fmt = tridnn.TensorFormat.NHWC if layout == "NHWC" else tridnn.TensorFormat.NCHW
    xd = tridnn.TensorDescriptor.packed((n, c) + (hw,) * nd, dtype, fmt)
    wd = tridnn.FilterDescriptor((k, c // groups) + (kernel,) * nd, dtype, fmt)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
    mf = (torch.channels_last if nd == 2 else torch.channels_last_3d) if layout == "NHWC" else torch.contiguous_format
    t = [torch.empty(d.dims, dtype=tdt).contiguous(memory_format=mf) for d in (xd, wd, yd)]
    return ConvProblem(direction, xd, wd, yd, cd), *t


@pytest.fixture
def hopper(monkeypatch):
    """Build the GPU lists on the host: a stand-in Hopper with 132 SMs."""
    monkeypatch.setattr(gc, "_hopper", lambda device: device.type == "cuda")
    # the images-inner configs in the lists, at every stride (test_images_inner_can_be_withdrawn
    # and test_strided_images_inner_can_be_withdrawn: switched off)
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_OFFERED", True)
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_STRIDED", True)
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)


# -- CPU: the candidate lists ------------------------------------------------------------
@pytest.mark.parametrize("c,hw,kernel,pad,n,want", [
    (64, 56, 3, 1, 64, gc.PICKS_NARROW),                     # res2_3x3
    (128, 28, 3, 1, 64, gc.PICKS_LARGE + gc.PICKS_INNER),    # res3_3x3 (and 64 images at two pixels)
    (256, 14, 3, 1, 64, gc.PICKS_MEDIUM + gc.PICKS_INNER),   # res4_3x3
    (512, 7, 3, 1, 64, gc.PICKS_SMALL),                      # res5_3x3 (128 images a tile do not fit 64)
    (512, 7, 3, 1, 256, gc.PICKS_SMALL + gc.PICKS_INNER_SMALL),  # res5_3x3 at batch 256
    (256, 14, 3, 1, 48, gc.PICKS_MEDIUM),                    # a batch 64 does not divide
    (256, 14, 1, 0, 64, gc.PICKS_FLAT),                      # 1x1: one row of pixels, a GEMM
    (128, 28, 1, 0, 64, gc.PICKS_FLAT[:2]),                  # 1x1 into 128 channels: no 256-wide tile
])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_offered_where_the_kernel_applies(direction, c, hw, kernel, pad, n, want, hopper):
    problem, x, w, y = _problem(direction, c, c, hw, kernel, pad=pad, n=n)
    if direction == "fwd":
        got = gc.forward_candidates(problem, x, w, y, None, CUDA)
    else:
        got = gc.backward_data_candidates(problem, y, w, x, CUDA)
    assert [gc.name(g) for g in got] == [gc.name(g) for g in want]
    assert all(g["GLUON"] for g in got) and 1 <= len(got) <= 5
    assert all(g["BLOCK_N"] <= max(64, c) and c % g["BLOCK_K"] == 0 for g in got)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_images_inner_can_be_withdrawn(direction, hopper, monkeypatch):
    """TRIDNN_IMAGES_INNER=0 (IMAGES_INNER_OFFERED False) withdraws the images-inner configs:
    res5_3x3 (and the forward of res5_3x3s2) at batch 256 then gets PICKS_SMALL alone."""
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_OFFERED", False)
    problem, x, w, y = _problem(direction, 512, 512, 7, 3, pad=1, n=256)
    got = (gc.forward_candidates(problem, x, w, y, None, CUDA) if direction == "fwd"
           else gc.backward_data_candidates(problem, y, w, x, CUDA))
    assert [gc.name(g) for g in got] == [gc.name(g) for g in gc.PICKS_SMALL]
    if direction == "fwd":  # the strided forward's too (res5_3x3s2)
        problem, x, w, y = _problem(direction, 512, 512, 14, 3, stride=2, pad=1, n=256)
        got = gc.forward_candidates(problem, x, w, y, None, CUDA)
        assert [gc.name(g) for g in got] == [gc.name(g) for g in gc.PICKS_SMALL]


def test_strided_images_inner_switch():
    import os
    assert gluon_common.IMAGES_INNER_STRIDED is (os.environ.get("TRIDNN_IMAGES_INNER_STRIDED", "1") != "0")


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_strided_images_inner_can_be_withdrawn(direction, hopper, monkeypatch):
    """TRIDNN_IMAGES_INNER_STRIDED=0 withdraws the strided images-inner configs (on by
    default since session 30): res4_3x3s2 at batch 64 then gets the image-box picks alone,
    in both directions; stride 1 keeps its images-inner picks."""
    monkeypatch.setattr(gluon_common, "IMAGES_INNER_STRIDED", False)
    for stride, hw, want in ((2, 28, gc.PICKS_MEDIUM), (1, 14, gc.PICKS_MEDIUM + gc.PICKS_INNER)):
        problem, x, w, y = _problem(direction, 256, 256, hw, 3, stride=stride, pad=1, n=64)
        got = (gc.forward_candidates(problem, x, w, y, None, CUDA) if direction == "fwd"
               else gc.backward_data_candidates(problem, y, w, x, CUDA))
        assert [gc.name(g) for g in got] == [gc.name(g) for g in want], stride


@pytest.mark.parametrize("images_inner", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
def test_forward_through_descriptors(stride, images_inner, monkeypatch):
    """launch_forward (gluon_conv's kernel at stride 1; at stride 2 gluon_conv_strided's, on
    x's phase view; the filter matrix either makes), the launch emulated through its
    descriptors (gluon_helpers.emulate_launch), images inner or not: alpha * conv + beta * y
    in float64; a repeated call replays the kept arguments to the same result."""
    monkeypatch.setattr(gc, "launch", gluon_helpers.emulate_launch)
    problem, x, w, y = _problem("fwd", 128, 64, 10, 3, stride=stride, pad=1, n=3, dtype="bfloat16")
    gluon_helpers.small_integers(5, x, w, y)
    y0 = y.clone()
    cfg = dict(gc.config(2, 2, 2, 64, 3, 4, images_inner=images_inner), GLUON=True)
    want = (2.0 * torch.nn.functional.conv2d(x.double(), w.double(), stride=stride, padding=1) + 0.5 * y0.double())
    for _ in range(2):
        y.copy_(y0)
        assert gc.launch_forward(problem, x, w, y, 2.0, 0.5, cfg, sms=4)
        torch.testing.assert_close(y.double(), want.to(torch.bfloat16).double())


@pytest.mark.parametrize("images_inner", [False, True])
@pytest.mark.parametrize("stride,hw,fused,launches", [
    (1, 9, True, 1),    # gluon_conv's kernel on the turned filter
    (2, 10, True, 1),   # gluon_dgrad_fused: all phases in one launch
    (2, 13, True, 4),   # odd sizes: a launch a phase, into strided views of dx
    (2, 14, False, 4),  # the fused launch switched off
], ids=["stride1", "fused", "phases-odd", "phases-even"])
def test_backward_data_through_descriptors(stride, hw, fused, launches, images_inner, monkeypatch):
    """launch_backward_data (the turned filter; at stride 2 the phase table, or the phases'
    strided views of dx), each launch emulated through its descriptors, images inner or not:
    alpha * conv2d_input + beta * dx in float64."""
    from tridnn.cuda import gluon_dgrad_fused
    monkeypatch.setattr(gluon_dgrad_fused, "FUSED_PHASES", fused)
    kernels = []

    def emulate(grid, args, meta, y=None, kernel=None):
        kernels.append(kernel or gc.gluon_conv_fwd_kernel)
        assert meta["IMAGES_INNER"] == images_inner
        return gluon_helpers.emulate_launch(grid, args, meta, y, kernel)
    monkeypatch.setattr(gc, "launch", emulate)
    problem, dx, w, dy = _problem("bwd_data", 128, 128, hw, 3, stride=stride, pad=1, n=3, dtype="bfloat16")
    gluon_helpers.small_integers(5, dx, w, dy)
    dx0 = dx.clone()
    cfg = dict(gc.config(2, 2, 2, 64, 3, 4, images_inner=images_inner), GLUON=True)
    assert gc.launch_backward_data(problem, dy, w, dx, 2.0, 0.5, cfg, sms=4)
    one = gluon_dgrad_fused.gluon_dgrad_fused_kernel if stride > 1 else gc.gluon_conv_fwd_kernel
    assert len(kernels) == launches
    assert all(k is (one if launches == 1 else gc.gluon_conv_fwd_kernel) for k in kernels)
    want = 2.0 * torch.nn.grad.conv2d_input(dx.shape, w.double(), dy.double(), stride=stride, padding=1)
    torch.testing.assert_close(dx.double(), (want + 0.5 * dx0.double()).to(torch.bfloat16).double())


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_a_failing_gluon_launch_warns_and_falls_back(direction, monkeypatch):
    """A Gluon candidate whose host side fails (a compile or descriptor error) warns and
    runs conv_tma's first config in its place, so the tuner and the call go on; CUDA
    errors, out of resources and a dry run's refusal propagate."""
    from tridnn.cuda.launch_record import Refused
    ran = []
    monkeypatch.setattr(conv_tma, "launch_conv", lambda plan, problem, *a, **k: ran.append(a[-1]))
    monkeypatch.setattr(conv_tma, "candidates", lambda plan, device, problem: [dict(REFERENCE=True)])
    cfg = dict(gc.PICKS_SMALL[0], GLUON=True)
    device = types.SimpleNamespace(device=CUDA)

    def call():
        if direction == "fwd":
            fwd.launch_tma_forward(None, None, None, None, device, 1.0, 0.0, cfg)
        else:
            bwd.launch_tma(None, None, None, None, device, 1.0, 0.0, cfg)
    name = "launch_forward" if direction == "fwd" else "launch_backward_data"

    def failing(exc):
        def launch(*a, **k):
            raise exc
        return launch
    monkeypatch.setattr(gc, name, failing(ValueError("bad descriptor")))
    with pytest.warns(RuntimeWarning, match="bad descriptor"):
        call()
    assert ran == [dict(REFERENCE=True)]

    class OutOfResources(Exception):
        pass
    for exc in (OutOfResources("shared memory"), RuntimeError("CUDA error: an illegal memory access"),
                Refused("a launch bound elsewhere")):
        monkeypatch.setattr(gc, name, failing(exc))
        with pytest.raises(type(exc)):
            call()
    monkeypatch.setattr(gc, name, lambda *a, **k: True)
    call()
    assert len(ran) == 1  # (the Gluon launch ran: no fallback)


@pytest.mark.parametrize("c,hw,dilation,want", [
    (512, 64, 2, gc.PICKS_DILATED),   # DeepLab's aspp_d2 (and d4)
    (512, 33, 12, gc.PICKS_DILATED),  # aspp_d12
    (128, 64, 2, gc.PICKS_LARGE),     # 128 channels: no 256-wide tile, as undilated
    (512, 14, 2, gc.PICKS_MEDIUM),    # narrower maps: as undilated
    (512, 56, 1, gc.PICKS_LARGE),     # undilated 512-channel maps keep PICKS_LARGE
])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_dilated_wide_layers_get_their_picks(direction, c, hw, dilation, want, hopper):
    """Dilated 3x3 layers of more than 128 output channels on maps >= 28 wide are offered
    PICKS_DILATED (256-wide tiles among them); every other problem keeps its list."""
    problem, x, w, y = _problem(direction, c, c, hw, 3, pad=dilation, n=16, dilation=dilation)
    if direction == "fwd":
        got = gc.forward_candidates(problem, x, w, y, None, CUDA)
    else:
        got = gc.backward_data_candidates(problem, y, w, x, CUDA)
    assert [gc.name(g) for g in got] == [gc.name(g) for g in want if g["BLOCK_N"] <= max(64, c)]


@pytest.mark.parametrize("why,kwargs", [
    ("stride 2 over an odd size", dict(stride=2, hw=15)),  # (even sizes: gluon_conv_strided's, below)
    ("float32 under DEFAULT math (3xTF32; TENSOR_OP's: test_gluon_tf32)", dict(dtype="float32")),
    ("NCHW tensors", dict(layout="NCHW")),
    ("groups", dict(groups=2)),
    ("32 channels", dict(c=32, k=64)),
    ("output channels not of 8", dict(k=68)),
    ("3-D", dict(nd=3, hw=6)),
])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_not_offered_elsewhere(direction, why, kwargs, hopper):
    args = dict(c=64, k=64, hw=14, kernel=3, pad=1)
    args.update(kwargs)
    if direction == "bwd_data" and why == "32 channels":  # backward data reduces over K: make K 32
        args.update(c=64, k=32)
    if direction == "bwd_data" and why == "output channels not of 8":
        args.update(c=68, k=64)
    if direction == "bwd_data" and why.startswith("stride 2"):  # (odd sizes are fine there: phases)
        args.update(dilation=2)  # the phase split needs dilation 1
    problem, x, w, y = _problem(direction, args.pop("c"), args.pop("k"), args.pop("hw"), args.pop("kernel"),
                                **args)
    if direction == "fwd":
        assert gc.forward_candidates(problem, x, w, y, None, CUDA) == [], why
    else:
        assert gc.backward_data_candidates(problem, y, w, x, CUDA) == [], why


@pytest.mark.parametrize("c,k,hw,kernel,pad,out_w,n,fwd_want", [
    (128, 128, 56, 3, 1, 28, 64, gc.PICKS_LARGE + gc.PICKS_INNER),    # res3_3x3s2
    (256, 256, 28, 3, 1, 14, 64, gc.PICKS_MEDIUM + gc.PICKS_INNER),   # res4_3x3s2
    (512, 512, 14, 3, 1, 7, 64, gc.PICKS_SMALL),                      # res5_3x3s2 (128 images do not fit 64)
    (512, 512, 14, 3, 1, 7, 256, gc.PICKS_SMALL + gc.PICKS_INNER_SMALL),  # ... at batch 256
    (512, 1024, 28, 1, 0, 14, 64, gc.PICKS_MEDIUM + gc.PICKS_INNER),  # res4_ds (1x1 stride 2)
    (256, 256, 28, 3, 1, 14, 48, gc.PICKS_MEDIUM),                    # a batch 64 does not divide
])
def test_strided_forward_offered(c, k, hw, kernel, pad, out_w, n, fwd_want, hopper):
    """Stride 2 forward: gluon_conv_strided's picks (the stride-2 sweep's configs, and the
    images-inner ones where their images divide the batch); backward data at stride 2: the
    phase kernels' picks by the phases' width and the batch (for the 1x1 filter too: its
    three phases without taps are store-only tiles)."""
    gs = pytest.importorskip("tridnn.cuda.gluon_conv_strided")
    problem, x, w, y = _problem("fwd", c, k, hw, kernel, stride=2, pad=pad, n=n)
    got = gc.forward_candidates(problem, x, w, y, None, CUDA)
    assert [gc.name(g) for g in got] == [gc.name(g) for g in fwd_want]
    assert [gc.name(g) for g in got] == [gs.name(g) for g in gs.picks(out_w, k, n=n)]
    assert all(g["GLUON"] for g in got)
    problem, x, w, y = _problem("bwd_data", c, k, hw, kernel, stride=2, pad=pad, n=n)
    got = gc.backward_data_candidates(problem, y, w, x, CUDA)
    want = gc.picks(out_w, c, False, n=n)
    assert [gc.name(g) for g in got] == [gc.name(g) for g in want]
    inner = [gc.name(g) for g in got if g.get("IMAGES_INNER")]  # (dx's phases are as wide as y)
    assert inner == [gc.name(g) for g in fwd_want if g.get("IMAGES_INNER")]


def test_repeated_forward_launches_the_recorded_arguments(hopper, monkeypatch):
    """launch_forward keeps what it prepared per problem object, tensor addresses and
    strides, alpha, beta and config: a repeated call launches the same arguments without
    preparing again; any change prepares anew; CONVOLUTION mode's flipped filter (a copy
    each call) is never kept; the kept arguments hold no output tensor."""
    launched, prepared = [], []
    monkeypatch.setattr(gc, "launch", lambda grid, args, meta, y=None, kernel=None: launched.append(args))
    real_prepare = gc.prepare
    monkeypatch.setattr(gc, "prepare", lambda *a, **k: prepared.append(1) or real_prepare(*a, **k))
    monkeypatch.setattr(gc, "_RECORDS", {})
    cfg = dict(gc.PICKS_MEDIUM[0], GLUON=True)
    problem, x, w, y = _problem("fwd", 64, 64, 14, 3, pad=1)
    steps = [(problem, y, 1.0, 1), (problem, y, 1.0, 0), (problem, y, 2.0, 1), (problem, y, 2.0, 0),
             (problem, torch.empty_like(y), 2.0, 1)]
    for prob, out, alpha, fresh in steps:
        before = len(prepared)
        assert gc.launch_forward(prob, x, w, out, alpha, 0.0, cfg)
        assert len(prepared) - before == fresh, (alpha, fresh)
    assert launched[1] is launched[0] and launched[3] is launched[2] and launched[2] is not launched[0]
    assert not any(isinstance(a, torch.Tensor) and a.data_ptr() in (x.data_ptr(), w.data_ptr(), y.data_ptr())
                   for a in launched[0]), "a kept record holds none of the caller's tensors"
    twin = _problem("fwd", 64, 64, 14, 3, pad=1)[0]  # an equal problem, another object
    assert gc.launch_forward(twin, x, w, y, 1.0, 0.0, cfg) and len(prepared) == 4
    flipped = _problem("fwd", 64, 64, 14, 3, pad=1, mode=tridnn.ConvMode.CONVOLUTION)[0]
    for _ in range(2):
        assert gc.launch_forward(flipped, x, w, y, 1.0, 0.0, cfg)
    assert len(prepared) == 6


@pytest.mark.parametrize("stride", [1, 2])
def test_repeated_backward_data_turns_the_filter_into_its_records_buffer(stride, hopper, monkeypatch):
    """launch_backward_data turns the filter every call (w may have changed): the first call
    into a new tensor, which its record keeps (the descriptors name it), the repeats into
    that kept tensor, launching the kept arguments without preparing again; another output
    tensor is another record. Stride 2: the fused launch over all phases."""
    from tridnn.cuda import filter_turn
    from tridnn.cuda import gluon_dgrad_fused as gf
    launched, prepared, turned = [], [], []
    monkeypatch.setattr(gc, "launch", lambda grid, args, meta, y=None, kernel=None: launched.append(args))
    for module in (gc, gf):
        real = module.prepare
        monkeypatch.setattr(module, "prepare", lambda *a, _real=real, **k: prepared.append(1) or _real(*a, **k))
    monkeypatch.setattr(gc, "_RECORDS", {})
    monkeypatch.setattr(gf, "FUSED_PHASES", True)
    problem, x, w, y = _problem("bwd_data", 128, 128, 16, 3, pad=1, stride=stride)
    c, k = 128, 128

    def turn(w, flip=True, order=None, out=None):
        turned.append(out)
        return torch.empty(c, 9 * k, dtype=torch.float16) if out is None else out
    monkeypatch.setattr(filter_turn, "turned_filter", turn)
    cfg = dict(gc.PICKS_MEDIUM[0], GLUON=True)
    for call in range(3):
        assert gc.launch_backward_data(problem, y, w, x, 1.0, 0.0, cfg)
    assert (len(prepared), len(turned), len(launched)) == (1, 3, 3)
    (rec,) = gc._RECORDS.values()
    assert turned[0] is None and turned[1] is turned[2] is rec[2].m, "the repeats turn into the kept buffer"
    assert launched[2] is launched[1] is launched[0]
    other = torch.empty_like(x)
    assert gc.launch_backward_data(problem, y, w, other, 1.0, 0.0, cfg)
    assert (len(prepared), len(gc._RECORDS)) == (2, 2) and launched[3] is not launched[0]


def test_not_offered_with_an_epilogue_off_hopper_or_under_the_interpreter(hopper, monkeypatch):
    problem, x, w, y = _problem("fwd", 128, 128, 28, 3, pad=1)
    assert gc.forward_candidates(problem, x, w, y, None, CUDA)
    sigmoid = EpilogueSpec(activation=ActivationMode.SIGMOID)
    assert gc.forward_candidates(problem, x, w, y, sigmoid, CUDA) == []  # left to conv_tma
    assert gc.forward_candidates(problem, x, w, y, None, torch.device("cpu")) == []
    monkeypatch.setattr(gc, "_hopper", lambda device: False)  # e.g. a Blackwell GPU: no wgmma
    assert gc.forward_candidates(problem, x, w, y, None, CUDA) == []


def test_fused_epilogues_offered(hopper):
    """convolution_bias_activation_forward's epilogue runs in the kernel for the piecewise-
    linear activations, a bias of K values and a channels-last residual of y's dtype."""
    M = ActivationMode
    problem, x, w, y = _problem("fwd", 128, 128, 28, 3, pad=1)
    bias, z = torch.zeros(128), torch.empty_like(y)
    want = [gc.name(c) for c in gc.PICKS_LARGE]
    for spec in (EpilogueSpec(activation=M.RELU, bias=bias),
                 EpilogueSpec(activation=M.CLIPPED_RELU, coef=6.0, bias=bias.half(), z=z, alpha2=0.5),
                 EpilogueSpec(activation=M.LEAKY_RELU, coef=0.1, z=y),
                 EpilogueSpec(activation=M.IDENTITY, bias=bias.reshape(1, 128, 1, 1))):
        assert [gc.name(c) for c in gc.forward_candidates(problem, x, w, y, spec, CUDA)] == want, spec
    for spec in (EpilogueSpec(activation=M.TANH, bias=bias),           # smooth: spills, conv_tma's
                 EpilogueSpec(activation=M.RELU, z=z.float()),         # z of another dtype
                 EpilogueSpec(activation=M.RELU, z=z.contiguous()),    # z NCHW
                 EpilogueSpec(activation=M.RELU, bias=torch.zeros(64)),  # bias of the wrong size
                 EpilogueSpec(activation=M.RELU, bias=np.zeros(128, np.float32))):  # not a tensor
        assert gc.forward_candidates(problem, x, w, y, spec, CUDA) == [], spec


def test_fused_args():
    """The kernel's bias is K contiguous values: a strided one is copied."""
    bias = torch.arange(256.0)[::2]
    b, z, alpha2, act, coef, swish = gc.fused_args(EpilogueSpec(activation=ActivationMode.RELU, bias=bias,
                                                                alpha2=0.5, coef=2.0))
    assert b.is_contiguous() and torch.equal(b, bias) and z is None
    assert (alpha2, act, coef) == (0.5, int(ActivationMode.RELU), 2.0)
    assert gc.fused_args(None) is None


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gluon_configs_come_after_conv_tmas(direction, hopper):
    """The tuner cross-checks every candidate against the first: conv_tma's stays first and
    Gluon's come last, so they win only where faster and agreeing."""
    problem, x, w, y = _problem(direction, 256, 256, 14, 3, pad=1, n=64)
    if direction == "fwd":
        plan = conv_tma.plan_forward(problem, x, w, y)
        cands = fwd.tma_forward_candidates(plan, problem, x, w, y, None, device=CUDA)
        base = conv_tma.candidates(plan, CUDA, problem)
    else:
        plan = conv_tma.plan_backward_data(problem, y, w, x)
        cands = bwd.tma_candidates(plan, problem, y, w, x, device=CUDA)
        base = conv_tma.candidates(plan, CUDA, problem)
    gl = [i for i, c in enumerate(cands) if c.get("GLUON")]
    assert gl == list(range(len(base), len(cands))) and len(gl) == len(gc.PICKS_MEDIUM + gc.PICKS_INNER)
    assert cands[:len(base)] == base
    # under the interpreter (CPU tensors): no Gluon config
    cpu = (fwd.tma_forward_candidates(plan, problem, x, w, y, None) if direction == "fwd"
           else bwd.tma_candidates(plan, problem, y, w, x))
    assert not any(c.get("GLUON") for c in cpu)


def test_picks_are_swept_configs():
    """Every offered config is one the sweep times (benchmarks/sweep_gluon_conv.py)."""
    names = {gc.name(c) for c in gc.CONFIGS}
    assert all(gc.name(c) in names for c in ALL_PICKS)


# -- CPU: the host-side filter transforms against float64 ---------------------------------
@pytest.mark.parametrize("mode", [tridnn.ConvMode.CROSS_CORRELATION, tridnn.ConvMode.CONVOLUTION])
def test_forward_matrix(mode):
    """The matrix the loader walks (tap-major, channel-minor rows): a view of a KRSC filter in
    cross-correlation mode, a reversed copy in CONVOLUTION mode; convolving with it as a
    cross-correlation gives the mode's result."""
    problem, x, w, y = _problem("fwd", 8, 4, 6, 3, pad=1, mode=mode)
    wv = torch.randn(4, 8, 3, 3, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    m = gc._forward_matrix(problem, wv)
    assert (m.data_ptr() == wv.data_ptr()) == (mode == tridnn.ConvMode.CROSS_CORRELATION)
    taps = m.view(4, 3, 3, 8).permute(0, 3, 1, 2)
    xv = torch.randn(2, 8, 6, 6, dtype=torch.float64)
    want = torch.nn.functional.conv2d(xv, wv.flip((2, 3)) if mode == tridnn.ConvMode.CONVOLUTION else wv,
                                      padding=1)
    torch.testing.assert_close(torch.nn.functional.conv2d(xv, taps, padding=1), want, rtol=1e-12, atol=1e-12)
    # a KCRS filter is copied (its taps are not channel-minor)
    assert gc._forward_matrix(problem, wv.contiguous()).data_ptr() != wv.data_ptr()
    torch.testing.assert_close(gc._forward_matrix(problem, wv.contiguous()), m)


def _crop_conv(dy, taps, pad, dil, out_hw):
    """conv2d with per-side paddings that may be negative (crop), output cropped to out_hw."""
    ph, pw = pad
    dy = torch.nn.functional.pad(dy, (max(pw, 0), max(pw, 0) + 64, max(ph, 0), max(ph, 0) + 64))
    dy = dy[:, :, max(-ph, 0):, max(-pw, 0):]
    out = torch.nn.functional.conv2d(dy, taps, dilation=dil)
    return out[:, :, :out_hw[0], :out_hw[1]]


@pytest.mark.parametrize("kernel,pad,dil", [((3, 3), (1, 1), (1, 1)), ((5, 3), (2, 0), (1, 2)),
                                            ((1, 1), (0, 0), (1, 1)), ((3, 3), (3, 1), (1, 1)),
                                            ((1, 1), (1, 0), (1, 1))])
@pytest.mark.parametrize("mode", [tridnn.ConvMode.CROSS_CORRELATION, tridnn.ConvMode.CONVOLUTION])
def test_backward_data_is_a_forward_convolution_of_dy(kernel, pad, dil, mode):
    """dx = conv(dy, turned filter) with padding (KH-1)*dh - ph (negative: dy read from row
    -padding on), against torch's float64 gradient of the mode's forward convolution."""
    k, c, (kh, kw) = 4, 8, kernel
    cd = tridnn.ConvolutionDescriptor(padding=pad, dilation=dil, mode=mode)
    xd = tridnn.TensorDescriptor.packed((2, c, 9, 10), "float16", tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((k, c, kh, kw), "float16", tridnn.TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    problem = ConvProblem("bwd_data", xd, wd, yd, cd)
    w = torch.randn(k, c, kh, kw, dtype=torch.float64)
    dy = torch.randn(*yd.dims, dtype=torch.float64)
    wf = w.flip((2, 3)) if mode == tridnn.ConvMode.CONVOLUTION else w
    want = torch.nn.grad.conv2d_input(xd.dims, wf, dy, padding=pad, dilation=dil)
    m = gc.turned_filter(problem, w)
    assert m.shape == (c, kh * kw * k)
    taps = m.view(c, kh, kw, k).permute(0, 3, 1, 2)
    bpad = ((kh - 1) * dil[0] - pad[0], (kw - 1) * dil[1] - pad[1])
    got = _crop_conv(dy, taps, bpad, dil, xd.dims[2:])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel,stride,pad,hw", [
    ((3, 3), (2, 2), (1, 1), (8, 8)), ((3, 3), (2, 2), (1, 1), (9, 7)), ((3, 3), (2, 2), (0, 0), (9, 10)),
    ((5, 3), (2, 2), (2, 1), (11, 8)), ((3, 3), (3, 3), (1, 1), (10, 9)), ((2, 2), (2, 2), (0, 0), (8, 6)),
    ((4, 4), (2, 2), (1, 1), (8, 8)), ((3, 2), (2, 1), (1, 0), (7, 6)),
])
@pytest.mark.parametrize("mode", [tridnn.ConvMode.CROSS_CORRELATION, tridnn.ConvMode.CONVOLUTION])
def test_strided_backward_data_is_one_convolution_per_phase(kernel, stride, pad, hw, mode):
    """Stride s backward data as gluon_conv runs it: per phase (a, b), dx[:, :, a::sh, b::sw] =
    conv(dy, the phase's column block of the phase-ordered turned filter, padding P), against
    torch's float64 gradient of the mode's forward convolution; every dx element once."""
    from tridnn.cuda.dgrad_phases import phases
    from tridnn.cuda.filter_turn import turned_filter
    k, c, (kh, kw) = 4, 8, kernel
    cd = tridnn.ConvolutionDescriptor(padding=pad, stride=stride, mode=mode)
    xd = tridnn.TensorDescriptor.packed((2, c) + hw, "float16", tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((k, c, kh, kw), "float16", tridnn.TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    w = torch.randn(k, c, kh, kw, dtype=torch.float64)
    dy = torch.randn(*yd.dims, dtype=torch.float64)
    wf = w.flip((2, 3)) if mode == tridnn.ConvMode.CONVOLUTION else w
    want = torch.nn.grad.conv2d_input(xd.dims, wf, dy, stride=stride, padding=pad)
    parts, order = phases(kernel, stride, pad, convolution=mode == tridnn.ConvMode.CONVOLUTION)
    assert len(parts) == stride[0] * stride[1] and sum(p.taps[0] * p.taps[1] for p in parts) == kh * kw
    m = turned_filter(w, order=order)
    got = torch.full(want.shape, float("nan"), dtype=torch.float64)
    for part in parts:
        (a, b), (th, tw) = part.offset, part.taps
        taps = m[:, part.column * k:(part.column + th * tw) * k].reshape(c, th, tw, k).permute(0, 3, 1, 2)
        view = got[:, :, a::stride[0], b::stride[1]]
        view.copy_(_crop_conv(dy, taps, part.padding, (1, 1), view.shape[2:]))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# -- CPU: a Gluon pick meeting tensors it cannot take runs conv_tma's reference ------------
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_a_gluon_pick_falls_back_to_the_reference_config(direction, rng, monkeypatch):
    """The tuner's pick is shared by every layout of a problem: a GLUON config launched on
    tensors the kernel cannot take (here float32 under the interpreter) runs conv_tma's
    first config instead, with the caller's alpha and beta."""
    ran = collections.Counter()
    real = conv_tma.launch_conv

    def counted(plan, *a, **k):
        ran["conv_tma"] += not isinstance(plan, tuple)  # (a tuple of phase plans recurses per plan)
        return real(plan, *a, **k)
    monkeypatch.setattr(conv_tma, "launch_conv", counted)
    monkeypatch.setattr(type(ALGO[direction]), "tuner", common.Tuner())
    pick = [dict(gc.PICKS_LARGE[0], GLUON=True)]
    if direction == "fwd":
        monkeypatch.setattr(fwd, "tma_forward_candidates", lambda *a, **k: pick)
    else:
        monkeypatch.setattr(bwd, "tma_candidates", lambda *a, **k: pick)
    p = P(16, 16, (5, 7), 3, 1, 1)
    assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng) is None
    assert run_case(direction, ALGO[direction], p, "float16", "NHWC", rng, alpha=2.0, beta=0.5) is None
    assert ran["conv_tma"] == 2


# -- CPU: offline sm_90 compiles of every offered variant -----------------------------------
VARIANTS = {  # compile_sm90 keyword arguments -> extra tiles each consumer reads per output tile
    "plain": ({}, 0),
    "beta": (dict(has_beta=True), 1),
    "relu+bias+z": (dict(act=1, has_bias=True, has_z=True), 1),
    "clipped+bias16": (dict(act=3, has_bias=True, bias_dtype="bf16"), 0),
}


@pytest.fixture(scope="module")
def compiled():
    """Facts of every offered config's sm_90 SASS in every offered variant (compiled in a
    child process: see test_gluon_conv.compile_in_child)."""
    from test_gluon_conv import compile_in_child, variant_key
    out = compile_in_child([(gc.name(c), kw) for c in ALL_PICKS for kw, _ in VARIANTS.values()])
    return {(name, v): out[variant_key(name, kw)] for name in (gc.name(c) for c in ALL_PICKS)
            for v, (kw, _) in VARIANTS.items()}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("cfg", ALL_PICKS, ids=gc.name)
def test_offered_configs_compile_for_sm90(cfg, variant, compiled):
    """beta != 0 adds one TMA load of the old output tile per consumer partition, a residual
    z another; bias and the activation are register work: no spills (no local memory),
    still within one SM's shared memory. (beta and z together are not offered: spills.)"""
    facts = compiled[(gc.name(cfg), variant)]
    sass = facts["sass"]
    assert facts["shared"] >= gc.shared_bytes(cfg)
    assert facts["shared"] * cfg["PER_SM"] <= 228 * 1024
    consumers = 2 if cfg["PINGPONG"] else 1
    # the loader's x box, plus each consumer's old output tile or residual tile
    assert sass.count("UTMALDG.4D") == 1 + consumers * VARIANTS[variant][1], sass.count("UTMALDG.4D")
    assert "UTMASTG.4D" in sass
    assert not re.search(r"\b(STL|LDL)\b", sass), "register spills"


# -- GPU: every offered config through the public API --------------------------------------
GPU_CASES = [  # (channel counts that both directions take: multiples of 64)
    P(64, 64, (7, 7), 3, 1, 1),             # 7x7 images: boxes past the edge, many images a box
    P(64, 128, (14, 14), 3, 1, 1),          # 14x14
    P(128, 64, (9, 11), (5, 3), 1, (2, 1)),  # 5x3 filter, unequal padding
    P(64, 64, (10, 12), 3, 1, 2, 2),        # dilation 2
    P(64, 192, (6, 5), 1),                  # 1x1: the flat GEMM view; 192 = 1.5 column tiles of 128
    P(128, 128, (5, 6), 3, 1, 0),           # no padding
    P(64, 64, (6, 7), 1, 1, 1),             # 1x1 with padding (box views; backward data: padding -1)
]


@pytest.fixture
def forced(monkeypatch):
    """Runs the config put in ``state.cfg`` as the only candidate; counts Gluon launches."""
    return force_one_config(monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", ALL_PICKS, ids=gc.name)
@pytest.mark.parametrize("p", GPU_CASES, ids=lambda p: p["name"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_forced_config_against_float64(direction, p, cfg, rng, forced):
    """float16 into a NaN-poisoned output (every element written), bfloat16 blended with
    alpha = 2, beta = 0.5 (the HAS_BETA variant) in CONVOLUTION mode; batches of 3. The
    float16 case again: that launch goes straight through the compiled kernel's launcher."""
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    plain = ("float16", tridnn.ConvMode.CROSS_CORRELATION, 1.0, 0.0)
    for dtype, mode, alpha, beta in (plain, ("bfloat16", tridnn.ConvMode.CONVOLUTION, 2.0, 0.5), plain):
        before = forced.launches
        assert run_case(direction, ALGO[direction], p, dtype, "NHWC", rng, n=3, device="cuda", mode=mode,
                        alpha=alpha, beta=beta) is None
        assert forced.launches == before + 1, "the Gluon kernel ran"


STRIDED_GPU_CASES = [
    P(64, 128, (14, 14), 3, 2, 1),          # 3x3 stride 2 (res3/4/5_3x3s2's form)
    P(128, 64, (12, 10), 1, 2, 0),          # 1x1 stride 2 (the downsamples)
    P(64, 64, (16, 12), 3, 2, 1, 2),        # dilation 2
    P(64, 72, (18, 9), 3, 3, 1),            # stride 3; 72 output channels: a partial column tile
    P(64, 64, (8, 10), (5, 3), 2, (2, 1)),  # 5x3 filter, unequal padding
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", pytest.importorskip("tridnn.cuda.gluon_conv_strided").CONFIGS, ids=gc.name)
@pytest.mark.parametrize("p", STRIDED_GPU_CASES, ids=lambda p: p["name"])
def test_gpu_forced_strided_config_against_float64(p, cfg, rng, forced):
    """IMPLICIT_GEMM forward at stride > 1 with each gluon_conv_strided config forced, as
    test_gpu_forced_config_against_float64 (NaN-poisoned float16; bfloat16 CONVOLUTION
    mode with alpha 2, beta 0.5; float16 again through the direct launcher)."""
    need_hopper()
    forced.cfg = dict(cfg, GLUON=True)
    plain = ("float16", tridnn.ConvMode.CROSS_CORRELATION, 1.0, 0.0)
    for dtype, mode, alpha, beta in (plain, ("bfloat16", tridnn.ConvMode.CONVOLUTION, 2.0, 0.5), plain):
        before = forced.launches
        assert run_case("fwd", ALGO["fwd"], p, dtype, "NHWC", rng, n=3, device="cuda", mode=mode,
                        alpha=alpha, beta=beta) is None
        assert forced.launches == before + 1, "the Gluon kernel ran"


STRIDED_DGRAD_GPU_CASES = [
    P(64, 128, (14, 14), 3, 2, 1),          # 3x3 stride 2 (res3/4/5_3x3s2's form)
    P(128, 64, (13, 11), 3, 2, 1),          # odd sizes: phases of unequal extents
    P(64, 64, (9, 10), (5, 3), 2, (2, 1)),  # 5x3 filter, unequal padding
    P(72, 64, (12, 9), 3, 3, 1),            # stride 3; 72 input channels: a partial column tile
    P(64, 64, (8, 6), 2, 2, 0),             # 2x2 stride 2: one tap a phase
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [c for c in ALL_PICKS if not (c["NB"] == 1 and c["BH"] == 1)],
                         ids=gc.name)  # (the flat configs: stride 1 only)
@pytest.mark.parametrize("p", STRIDED_DGRAD_GPU_CASES, ids=lambda p: p["name"])
def test_gpu_forced_strided_backward_data_against_float64(p, cfg, rng, forced, monkeypatch):
    """ALGO_1 backward data at stride > 1 with each Gluon config forced (the flat ones serve
    1x1 stride-1 problems only): one launch per phase of dx (NaN-poisoned float16; bfloat16
    CONVOLUTION mode, alpha 2, beta 0.5), against the float64 reference."""
    need_hopper()
    from tridnn.cuda import gluon_dgrad_fused
    monkeypatch.setattr(gluon_dgrad_fused, "FUSED_PHASES", False)  # a launch a phase (the fused path: its own tests)
    forced.cfg = dict(cfg, GLUON=True)
    s = p["stride"]
    plain = ("float16", tridnn.ConvMode.CROSS_CORRELATION, 1.0, 0.0)
    for dtype, mode, alpha, beta in (plain, ("bfloat16", tridnn.ConvMode.CONVOLUTION, 2.0, 0.5)):
        before = forced.launches
        assert run_case("bwd_data", ALGO["bwd_data"], p, dtype, "NHWC", rng, n=3, device="cuda", mode=mode,
                        alpha=alpha, beta=beta) is None
        assert forced.launches == before + s[0] * s[1], "one Gluon launch a phase"


@pytest.mark.gpu
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_asymmetric_padding(direction, rng, forced):
    """pad_post != pad: the output's extent is the output tensor's."""
    need_hopper()
    forced.cfg = dict(gc.PICKS_SMALL[0], GLUON=True)
    p = P(64, 64, (7, 8), 3, 1, 1)
    assert run_case(direction, ALGO[direction], p, "float16", "NHWC", rng, n=3, device="cuda",
                    pad_post=(0, 2)) is None
    assert forced.launches == 1


@pytest.mark.gpu
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_gpu_tuner_with_gluon_candidates(direction, rng, monkeypatch):
    """The real tuner over conv_tma's and Gluon's candidates: whichever wins, the
    result matches float64 (and no candidate disagreed with the reference)."""
    need_hopper()
    import warnings
    monkeypatch.setattr(type(ALGO[direction]), "tuner", common.Tuner())
    p = P(128, 128, (28, 28), 3, 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert run_case(direction, ALGO[direction], p, "bfloat16", "NHWC", rng, n=8, device="cuda") is None
        assert run_case(direction, ALGO[direction], p, "bfloat16", "NHWC", rng, n=8, device="cuda", alpha=2.0,
                        beta=0.5) is None
    best = list(type(ALGO[direction]).tuner._best.values())
    assert best, "the tuner picked a config"
    print(direction, "picked", best)



@pytest.mark.parametrize("which", ["stride 1", "strided"])
def test_fast_launch_passes_the_constexprs_in_signature_order(which):
    """launch's direct path appends the constexpr values after the runtime arguments: the
    kernel's constexpr parameters must be exactly its last ones, and prepare's meta must
    name each of them (gluon_conv's kernel, and gluon_conv_strided's, which launches
    through gluon_conv.launch)."""
    x = torch.zeros(1, 64, 6, 6, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.zeros(64, 64, 3, 3, dtype=torch.bfloat16)
    if which == "stride 1":
        kernel, prepare, cfg = gc.gluon_conv_fwd_kernel, gc.prepare, gc.PICKS_SMALL[0]
    else:
        gs = pytest.importorskip("tridnn.cuda.gluon_conv_strided")
        kernel, prepare, cfg = gs.gluon_conv_strided_kernel, gs.prepare, gs.CONFIGS[0]
    params = kernel.params
    flags = [p.is_constexpr for p in params]
    first = flags.index(True)
    assert all(flags[first:]) and not any(flags[:first])
    grid, args, meta, _ = prepare(x, w, cfg=cfg, sms=132, beta=0.5)
    tail = gc.constexpr_tail(meta, kernel)
    assert len(args) == first and len(args) + len(tail) == len(params)
    assert tail == tuple(meta[p.name] for p in params[first:]) and meta["HAS_BETA"] is True
    with pytest.raises(ValueError, match="filter matrix"):  # a w_mat of the wrong shape
        prepare(x, w, cfg=cfg, sms=132, w_mat=torch.zeros(64, 64, dtype=torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [gc.PICKS_LARGE[0], gc.PICKS_MEDIUM[1], gc.PICKS_NARROW[0], gc.PICKS_SMALL[1],
                                 gc.PICKS_FLAT[0]], ids=gc.name)
@pytest.mark.parametrize("case", ["relu_bias_z", "clipped_bias", "clipped_z_in_place", "identity_bias"])
def test_gpu_conv_bias_activation(cfg, case, forced):
    """convolution_bias_activation_forward with the Gluon config forced: y = act(alpha1 *
    conv + alpha2 * z + bias) against float64, y poisoned with NaN unless z is y."""
    need_hopper()
    import torch.nn.functional as F
    from tridnn.descriptors.activation import ActivationDescriptor
    M = ActivationMode
    mode, coef, use_z, in_place = {"relu_bias_z": (M.RELU, 0.0, True, False),
                                   "clipped_bias": (M.CLIPPED_RELU, 0.75, False, False),
                                   # (the API fuses no leaky relu)
                                   "clipped_z_in_place": (M.CLIPPED_RELU, 2.0, True, True),
                                   "identity_bias": (M.IDENTITY, 0.0, False, False)}[case]
    forced.cfg = dict(cfg, GLUON=True)
    g = torch.Generator().manual_seed(11)
    handle = tridnn.Handle(device="cuda", find_cache=None)
    algo = tridnn.ConvFwdAlgo.IMPLICIT_GEMM
    cl = torch.channels_last
    for p, n in ((P(64, 128, (9, 10), 3, 1, 1), 3), (P(128, 64, (6, 7), 1), 2)):
        c, k = p["C"], p["K"]
        cd = tridnn.ConvolutionDescriptor(padding=p["pad"], stride=p["stride"], dilation=p["dilation"])
        xd = tridnn.TensorDescriptor.packed((n, c, *p["spatial"]), "bfloat16", tridnn.TensorFormat.NHWC)
        wd = tridnn.FilterDescriptor((k, c, *p["kernel"]), "bfloat16", tridnn.TensorFormat.NHWC)
        yd = xd.with_dims(cd.output_dims(xd, wd))
        bd = tridnn.TensorDescriptor.packed((1, k, 1, 1), "bfloat16")
        x = torch.randn(xd.dims, generator=g).bfloat16()
        w = (torch.randn(wd.dims, generator=g) / (c * p["kernel"][0] * p["kernel"][1]) ** 0.5).bfloat16()
        z = torch.randn(yd.dims, generator=g).bfloat16()
        bias = torch.randn(1, k, 1, 1, generator=g).bfloat16()
        alpha1, alpha2 = 1.5, (0.5 if use_z else 0.0)
        v = alpha1 * F.conv2d(x.double(), w.double(), padding=p["pad"]) + bias.double()
        if use_z:
            v = v + alpha2 * z.double()
        want = {M.RELU: v.clamp_min(0), M.CLIPPED_RELU: v.clamp(0, coef), M.IDENTITY: v}[mode]
        xg, wg, bg = (t.cuda().contiguous(memory_format=cl) for t in (x, w, bias))
        zg = z.cuda().contiguous(memory_format=cl)
        y = zg if in_place else torch.full(yd.dims, float("nan"), dtype=torch.bfloat16, device="cuda").contiguous(
            memory_format=cl)
        size = tridnn.get_convolution_forward_workspace_size(handle, xd, wd, cd, yd, algo)
        ws = torch.empty(size, dtype=torch.uint8, device="cuda") if size else None
        before = forced.launches
        tridnn.convolution_bias_activation_forward(handle, alpha1, xd, xg, wd, wg, cd, algo, ws, alpha2, yd,
                                                   y if in_place else zg, bd, bg,
                                                   ActivationDescriptor(mode, coef=coef), yd, y)
        torch.cuda.synchronize()
        assert forced.launches == before + 1, "the Gluon kernel ran"
        got = y.double().cpu()
        assert torch.isfinite(got).all()
        err = ((got - want).abs().max() / want.abs().max()).item()
        assert err < 1e-2, (case, gc.name(cfg), p["name"], err)


def test_checked_epilogue_refuses_bad_z_and_bias():
    """prepare's epilogue checks (both Gluon forward kernels): z must be y's shape and
    channels-last, bias K contiguous values; the error names what is wrong."""
    y = torch.empty(2, 16, 4, 4).contiguous(memory_format=torch.channels_last)
    ok = torch.empty(16)
    assert gc.checked_epilogue(None, y, 16) == (None, None, 1.0, -1, 0.0, 1.0)
    assert gc.checked_epilogue((ok, y, 0.5, 1, 0.0, 1.0), y, 16)[:2] == (ok, y)
    for z, bias, match in ((torch.empty(2, 16, 4, 5).contiguous(memory_format=torch.channels_last), None, "z must"),
                           (torch.empty(2, 16, 4, 4), None, "z must"),  # NCHW
                           (None, torch.empty(32)[::2], "bias must"),
                           (None, torch.empty(8), "bias must")):
        with pytest.raises(ValueError, match=match):
            gc.checked_epilogue((bias, z, 1.0, 1, 0.0, 1.0), y, 16)


@pytest.mark.gpu
@pytest.mark.parametrize("direction,stride", [("fwd", 1), ("fwd", 2), ("bwd_data", 1), ("bwd_data", 2)])
def test_gpu_launch_records_follow_new_data_in_place(direction, stride, rng, monkeypatch):
    """Four calls with new values written into the same tensors: the first prepares, the
    second replays the record's arguments and binds them, the third and fourth launch the
    bound launch (common.Bound); every result matches float64, alpha = 2 and beta = 0.5
    on a kept output. The record holds no tensor."""
    need_hopper()
    monkeypatch.setattr(gc, "_RECORDS", {})
    prepared = []
    for module_name in ("gluon_conv", "gluon_conv_strided", "gluon_dgrad_fused"):
        module = __import__(f"tridnn.cuda.{module_name}", fromlist=["prepare"])
        monkeypatch.setattr(module, "prepare",
                            lambda *a, _real=module.prepare, **k: prepared.append(1) or _real(*a, **k))
    problem, x, w, y = (t.cuda() if isinstance(t, torch.Tensor) else t
                        for t in _problem(direction, 128, 128, 16, 3, pad=1, stride=stride, n=8, dtype="bfloat16"))
    cfg = dict(gc.PICKS_MEDIUM[0], GLUON=True)
    for call in range(4):
        for t in (x, w, y):
            t.copy_(torch.from_numpy(rng.standard_normal(t.shape)).to(t.dtype))
        xd, wd, yd = x.double(), w.double(), y.double()
        if direction == "fwd":
            assert gc.launch_forward(problem, x, w, y, 2.0, 0.5, cfg)
            got, want = y, 2.0 * torch.nn.functional.conv2d(xd, wd, padding=1, stride=stride) + 0.5 * yd
        else:
            assert gc.launch_backward_data(problem, y, w, x, 2.0, 0.5, cfg)
            got = x
            want = 2.0 * torch.nn.grad.conv2d_input(x.shape, wd, yd, padding=1, stride=stride) + 0.5 * xd
        err = (got.double() - want).abs().max().item()
        assert err < 1e-2 * want.abs().max().item(), (call, err)
    assert len(prepared) == 1, "one prepare; the later calls replayed the record"
    (rec,) = gc._RECORDS.values()
    kept = rec[2] if direction == "fwd" else rec[2].launch
    assert kept.bound is not None, "the replays bound the launch"
    assert not any(isinstance(v, torch.Tensor) for v in kept.bound.values)
    if direction == "bwd_data":
        assert rec[2].bound is not None, "the replays bound the filter's turn"
