"""Property-based tests of the Gluon convolutions' host side: on drawn problems (kernel sizes
1-4 per axis, strides 1-3, asymmetric paddings, dilation, odd maps, both modes, any batch)
and drawn tile configs (small synthetic tiles that make many edge tiles, and the real
picks), ``gluon_conv.launch_forward`` and ``launch_backward_data`` run with the kernel
launch replaced by gluon_helpers.emulate_launch: each launch emulated in float64 through
the descriptors ``prepare`` built (tile order, the loaders' tap walks, the phase views and
phase table, the epilogue's alpha and beta). The result must equal the float64 convolution
rounded once: the data are small integers, so every sum is exact and the comparison is
exact equality. beta = 0 outputs start as NaN (every element must be written).

What this covers that the GPU tests at fixed shapes do not: the geometry each path
derives on the host (output sizes, backward padding, the stride phases and their filter
columns, the images-inner views, the flat view of 1x1 problems, the tile counts) over
thousands of shapes in the long profile (TRIDNN_FUZZ=long). What it does not: the
kernels' own code (the emulation stands in for it; the GPU tests run the kernels)."""
import pytest
from hypothesis import given, strategies as st

torch = pytest.importorskip("torch")
gc = pytest.importorskip("tridnn.cuda.gluon_conv", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import gluon_conv_strided, gluon_dgrad_fused  # noqa: E402

import gluon_helpers  # noqa: E402
from fuzz_support import Stats, fuzz_settings  # noqa: E402

STATS = Stats("test_fuzz_gluon_conv")
# (BLOCK_K 64: the picks' only one; CONFIGS' sweep-only k128 needs channels a multiple of 128)
REAL_CONFIGS = list({gc.name(c): c for c in gc.CONFIGS + gluon_conv_strided.CONFIGS
                     if not gc.float32_data(c) and c["BLOCK_K"] == 64}.values())


def teardown_module():
    STATS.dump()


@st.composite
def configs(draw):
    """A 16-bit tile config: small synthetic tiles (many edge and partial tiles on these
    maps), images inner or not, or one of the real picks (boxes larger than the maps)."""
    if draw(st.integers(0, 4)) == 0:
        return dict(draw(st.sampled_from(REAL_CONFIGS)), GLUON=True)
    nb, bh, bw = (draw(st.sampled_from(v)) for v in ((1, 2, 4), (1, 2, 4), (1, 2, 4, 8)))
    bn = draw(st.sampled_from((16, 32, 64)))
    return dict(gc.config(nb, bh, bw, bn, 3, 4, images_inner=draw(st.booleans())), GLUON=True)


@st.composite
def problems(draw, direction):
    """(geometry dict) of a problem the Gluon path takes: channels per its why_not, maps
    that are multiples of the stride where the phase views need it."""
    sh, sw = draw(st.sampled_from(((1, 1), (1, 1), (2, 2), (2, 2), (1, 2), (2, 1), (3, 3), (2, 3))))
    strided = (sh, sw) != (1, 1)
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = (1, 1) if strided and direction == "bwd_data" else (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    ph, pw = draw(st.integers(0, dh * (kh - 1))), draw(st.integers(0, dw * (kw - 1)))
    # map sizes with at least one output pixel; multiples of the stride for the strided
    # forward's phase view (backward data at odd sizes launches a phase at a time)
    min_h, min_w = max(1, dh * (kh - 1) + 1 - 2 * ph), max(1, dw * (kw - 1) + 1 - 2 * pw)
    h, wd = draw(st.integers(min_h, min_h + 7)), draw(st.integers(min_w, min_w + 7))
    if direction == "fwd" or draw(st.booleans()):
        h, wd = -(-h // sh) * sh, -(-wd // sw) * sw
    if direction == "fwd":
        c, k = draw(st.sampled_from((64, 128))), draw(st.sampled_from((8, 24, 64, 72)))
    else:
        c, k = draw(st.sampled_from((8, 24, 64, 128, 64, 128))), draw(st.sampled_from((64, 128)))
    return dict(n=draw(st.integers(1, 4)), c=c, k=k, h=h, w=wd, kernel=(kh, kw), stride=(sh, sw),
                pad=(ph, pw), dil=(dh, dw), mode=draw(st.sampled_from(tridnn.ConvMode)),
                dtype=draw(st.sampled_from(("bfloat16", "float16"))))


def _build(direction, g, seed):
    """The ConvProblem and channels-last CPU tensors (x, w, y) of small integers."""
    cd = tridnn.ConvolutionDescriptor(padding=g["pad"], stride=g["stride"], dilation=g["dil"], mode=g["mode"])
    xd = tridnn.TensorDescriptor.packed((g["n"], g["c"], g["h"], g["w"]), g["dtype"], tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((g["k"], g["c"]) + g["kernel"], g["dtype"], tridnn.TensorFormat.NHWC)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    dt = getattr(torch, g["dtype"])
    # (empty's strides: .contiguous() keeps NCHW strides on 1x1 maps, which TMA refuses)
    x, w, y = (torch.empty(d.dims, dtype=dt, memory_format=torch.channels_last) for d in (xd, wd, yd))
    gluon_helpers.small_integers(seed, x, w, y)
    return ConvProblem(direction, xd, wd, yd, cd), x, w, y


def _emulated(monkeypatch):
    """Replace gluon_conv.launch by the emulation; returns the list of kernels launched."""
    kernels = []

    def emulate(grid, args, meta, y=None, kernel=None):
        kernels.append(kernel or gc.gluon_conv_fwd_kernel)
        return gluon_helpers.emulate_launch(grid, args, meta, y, kernel)
    monkeypatch.setattr(gc, "launch", emulate)
    return kernels


def _weight64(g, w):
    """The filter as torch's cross-correlation takes it, in float64 (CONVOLUTION mode: the
    taps reversed)."""
    return w.double().flip((2, 3)) if g["mode"] == tridnn.ConvMode.CONVOLUTION else w.double()


def _geometry(g):
    """torch's stride, padding and dilation keywords of the problem."""
    return dict(stride=g["stride"], padding=g["pad"], dilation=g["dil"])


def _calls(repeat, seed, inputs, out, out0, beta, reference, launch):
    """One call (two with ``repeat``, new values in ``inputs`` before the second): out
    reset to out0, ``launch()`` must launch, and out must equal 2 * reference() + beta * out0."""
    for call in range(2 if repeat else 1):
        if call:
            gluon_helpers.small_integers(seed + 7, *inputs)
        want = reference()
        out.copy_(out0)
        assert launch()
        _check(out, want, out0, 2.0, beta)


def _check(got, want, out0, alpha, beta):
    """got == (alpha * want + beta * out0) rounded once to got's dtype, exactly."""
    full = alpha * want + (beta * out0.double() if beta else 0)
    expected = full.to(got.dtype)
    assert not torch.isnan(got).any(), "an output element was never written"
    assert torch.equal(got, expected), f"max |diff| {(got.double() - expected.double()).abs().max().item()}"


@fuzz_settings(ci_examples=25)
@given(g=problems("fwd"), cfg=configs(), beta=st.sampled_from((0.0, 0.5)), seed=st.integers(0, 2 ** 16),
       repeat=st.booleans())
def test_forward_matches_float64(g, cfg, beta, seed, repeat):
    """launch_forward (gluon_conv at stride 1, gluon_conv_strided above) equals
    2 * conv + beta * y; a repeated call replays its launch record, which must read the
    tensors' new values."""
    with pytest.MonkeyPatch.context() as mp:
        kernels = _emulated(mp)
        problem, x, w, y = _build("fwd", g, seed)
        y0 = y.clone() if beta else torch.full_like(y, float("nan"))
        _calls(repeat, seed, (x, w), y, y0, beta,
               lambda: torch.nn.functional.conv2d(x.double(), _weight64(g, w), **_geometry(g)),
               lambda: gc.launch_forward(problem, x, w, y, 2.0, beta, cfg, sms=3))
        strided = g["stride"] != (1, 1)
        assert all(k is (gluon_conv_strided.gluon_conv_strided_kernel if strided else gc.gluon_conv_fwd_kernel)
                   for k in kernels)
    STATS.problem("fwd")
    STATS.ran("fwd", "strided" if strided else "stride1")


@fuzz_settings(ci_examples=25)
@given(g=problems("bwd_data"), cfg=configs(), beta=st.sampled_from((0.0, 0.5)), seed=st.integers(0, 2 ** 16),
       fused=st.booleans(), repeat=st.booleans())
def test_backward_data_matches_float64(g, cfg, beta, seed, fused, repeat):
    """launch_backward_data (stride 1; at stride > 1 the fused launch or a launch a phase)
    equals 2 * conv2d_input + beta * dx; a replayed record must turn the new filter."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gluon_dgrad_fused, "FUSED_PHASES", fused)
        kernels = _emulated(mp)
        problem, dx, w, dy = _build("bwd_data", g, seed)
        dx0 = dx.clone() if beta else torch.full_like(dx, float("nan"))
        _calls(repeat, seed, (dy, w), dx, dx0, beta,
               lambda: torch.nn.grad.conv2d_input(dx.shape, _weight64(g, w), dy.double(), **_geometry(g)),
               lambda: gc.launch_backward_data(problem, dy, w, dx, 2.0, beta, cfg, sms=3))
    one = (fused and g["stride"] != (1, 1) and gluon_dgrad_fused.why_not(dx, g["stride"], cfg) is None)
    path = "fused" if one else ("phases" if g["stride"] != (1, 1) else "stride1")
    if one:
        assert kernels == [gluon_dgrad_fused.gluon_dgrad_fused_kernel] * (2 if repeat else 1)
    else:
        assert all(k is gc.gluon_conv_fwd_kernel for k in kernels)
    STATS.problem("bwd_data")
    STATS.ran("bwd_data", path)


gw = pytest.importorskip("tridnn.cuda.gluon_wgrad")


@st.composite
def wgrad_configs(draw, flat_ok):
    """A backward-filter config: small synthetic tiles (several taps a tile, images inner or
    not, a flat row of pixels where the problem allows it) or one of the real ones."""
    if draw(st.integers(0, 4)) == 0:
        real = [c for c in gw.CONFIGS if flat_ok or not c.get("FLAT")]
        return dict(draw(st.sampled_from(real)), GLUON=True)
    flat = flat_ok and draw(st.booleans())
    taps = draw(st.sampled_from((1, 1, 2, 4)))
    bn = 64 if taps > 1 else draw(st.sampled_from((16, 32, 64)))
    nb, bh, bw = (1, 1, draw(st.sampled_from((8, 16)))) if flat else (
        draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2, 4))), draw(st.sampled_from((1, 2, 4, 8))))
    return dict(gw.config(nb, bh, bw, 64, bn, 3, 4, taps=taps, flat=flat,
                          images_inner=not flat and draw(st.booleans())), GLUON=True)


@st.composite
def wgrad_problems(draw):
    g = draw(problems("fwd"))
    g["c"], g["k"] = draw(st.sampled_from((8, 24, 64, 128))), draw(st.sampled_from((8, 64, 72, 128)))
    return g


@fuzz_settings(ci_examples=25)
@given(g=wgrad_problems(), data=st.data(), beta=st.sampled_from((0.0, 0.5)), seed=st.integers(0, 2 ** 16),
       dw_kind=st.sampled_from(("krsc", "nchw", "float32")), sms=st.integers(1, 6),
       partials=st.sampled_from((0, 1 << 12, 1 << 16, 1 << 22)),
       forced=st.sampled_from((None, None, (0, 2), (0, 3), (1, 2), (0, 7))))
def test_backward_filter_matches_float64(g, data, beta, seed, dw_kind, sms, partials, forced):
    """gluon_wgrad.prepare as conv_bwd_filter_implicit_gemm.launch_gluon calls it (the
    workspace bounds the schedule; CONVOLUTION mode flips the taps), launched through
    gluon_helpers.emulate_gluon_wgrad: alpha * dw + beta * dw_old, exactly. Few SMs (sms)
    put many units on a program; ``forced`` fixes (DIRECT, SPLITS) where the cost model would
    keep these small problems' tiles whole (the workspace may still refuse the split)."""
    problem, x, w, dy = _build("bwd_filter", g, seed)
    cfg = data.draw(wgrad_configs(gw.flat_ok(g["kernel"], g["pad"], g["stride"])))
    dt = torch.float32 if dw_kind == "float32" else x.dtype
    fmt = torch.contiguous_format if dw_kind == "nchw" else torch.channels_last
    dw = torch.empty(w.shape, dtype=dt, memory_format=fmt)
    dw0 = torch.randint(-3, 4, w.shape, generator=torch.Generator().manual_seed(seed + 1)).to(dt) if beta \
        else torch.full(w.shape, float("nan"), dtype=dt)
    dw.copy_(dw0)
    assert gw.why_not(x, dy, g["kernel"], g["pad"], g["dil"], g["stride"]) is None
    ws = torch.full((max(partials, 1),), float("nan"))
    direct, splits = forced or (None, None)
    plan = gw.prepare(x, dy, g["kernel"], g["pad"], g["dil"], cfg, 2.0, beta, dw, sms=sms, ws=ws,
                      max_partials=partials, direct=direct, splits=splits, stride=g["stride"], flip=g["mode"] == tridnn.ConvMode.CONVOLUTION)
    assert plan.ws is ws or plan.splits == 1 or partials < plan.ws.numel()
    gluon_helpers.emulate_gluon_wgrad(plan)
    want = torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), stride=g["stride"], padding=g["pad"],
                                       dilation=g["dil"])
    if g["mode"] == tridnn.ConvMode.CONVOLUTION:
        want = want.flip((2, 3))
    _check(dw, want, dw0, 2.0, beta)
    STATS.problem("bwd_filter")
    STATS.ran("bwd_filter", ("split" if plan.direct < plan.units else "whole")
              + ("-tma" if plan.meta["TMA_DW"] else "-vec" if plan.meta["DW_VEC"] else ""))


@fuzz_settings(ci_examples=20)
@given(g=problems("fwd"), cfg=configs(), seed=st.integers(0, 2 ** 16),
       act=st.sampled_from((None, "RELU", "CLIPPED_RELU", "LEAKY_RELU")), propagate_nan=st.booleans(),
       coef=st.sampled_from((0.25, 0.5, 4.0)), bias=st.sampled_from((None, "float32", "same", "4d")),
       residual=st.sampled_from((None, 1.0, -0.5)), beta=st.sampled_from((0.0, 0.5)))
def test_fused_epilogue_matches_float64(g, cfg, seed, act, propagate_nan, coef, bias, residual, beta):
    """convolution_bias_activation_forward's Gluon path (launch_forward with an EpilogueSpec):
    act(alpha * conv + beta * y + alpha2 * z + bias) for the activations gluon_conv fuses,
    bias as K float32 values, in y's dtype, or shaped (1, K, 1, 1), z a separate tensor;
    equal to the float64 composition (reference.activation), exactly."""
    from tridnn.cuda.epilogue import EpilogueSpec
    from tridnn.descriptors.activation import ActivationMode
    from tridnn.reference.activation import activation_forward
    if residual is not None:
        beta = 0.0  # (launch_forward leaves old y plus z to conv_tma: the wide tiles' epilogue spills)
    with pytest.MonkeyPatch.context() as mp:
        _emulated(mp)
        problem, x, w, y = _build("fwd", g, seed)
        k = g["k"]
        gen = torch.Generator().manual_seed(seed + 3)
        b = None if bias is None else torch.randint(-3, 4, (k,) if bias != "4d" else (1, k, 1, 1), generator=gen).to(
            torch.float32 if bias == "float32" else y.dtype)
        z = None
        if residual is not None:
            z = torch.empty_like(y)
            gluon_helpers.small_integers(seed + 5, z)
        mode = None if act is None else ActivationMode[act]
        spec = EpilogueSpec(activation=mode, coef=coef, bias=b, z=z, alpha2=residual or 1.0,
                            propagate_nan=propagate_nan)
        y0 = y.clone() if beta else torch.full_like(y, float("nan"))
        y.copy_(y0)
        assert gc.forward_why_not(problem, x, w, y, spec) is None
        assert gc.launch_forward(problem, x, w, y, 2.0, beta, cfg, spec=spec, sms=3)
        v = 2.0 * torch.nn.functional.conv2d(x.double(), _weight64(g, w), **_geometry(g))
        if beta:
            v += beta * y0.double()
        if z is not None:
            v += residual * z.double()
        if b is not None:
            v += b.double().reshape(1, k, 1, 1)
        if mode is not None:
            v = torch.from_numpy(activation_forward(v.numpy(), mode, coef))
        expected = v.to(y.dtype)
        assert torch.equal(y, expected), f"max |diff| {(y.double() - expected.double()).abs().max().item()}"
    STATS.problem("fused")
    STATS.ran("fused", f"{act}" + ("+bias" if b is not None else "") + ("+z" if z is not None else ""))


dg = pytest.importorskip("tridnn.cuda.conv_depthwise_gluon")


@st.composite
def dw_configs(draw, out_h, out_w, c, itemsize, data):
    """The walker's two configs for the shape, or a synthetic unit (images, run of rows,
    columns, channels)."""
    if draw(st.booleans()):
        return draw(st.sampled_from(dg.configs(out_h, out_w, c, itemsize, data)))
    return dg.config(draw(st.sampled_from((8, 16, 32))), draw(st.sampled_from((1, 2, 4))),
                     draw(st.sampled_from((8, 16, 32, 64))), draw(st.sampled_from((1, 2, 3, 5))), itemsize, data)


@fuzz_settings(ci_examples=25)
@given(data=st.data(), n=st.integers(1, 5), c=st.sampled_from((8, 16, 24, 40, 64, 72)),
       h=st.integers(1, 12), w_=st.integers(1, 12), walk=st.sampled_from(("stride1", "stride2", "data")),
       pad=st.tuples(st.integers(0, 2), st.integers(0, 2)), flip=st.booleans(), beta=st.sampled_from((0.0, 0.5)),
       dtype=st.sampled_from((torch.bfloat16, torch.float16, torch.float32)), sms=st.integers(1, 3),
       seed=st.integers(0, 2 ** 16))
def test_depthwise_walker_matches_float64(data, n, c, h, w_, walk, pad, flip, beta, dtype, sms, seed):
    """conv_depthwise_gluon's 3x3 walker (DIRECT forward at stride 1 and 2, and the
    stride-2 backward data's DATA walk, padding 1) through gluon_helpers.emulate_dw3_gluon:
    the host's views, windows and units and the kernel's row walks as written; equal to
    the float64 depthwise convolution (or its input gradient), exactly."""
    gen = torch.Generator().manual_seed(seed)
    ints = lambda *shape: torch.randint(-3, 4, shape, generator=gen).to(dtype)  # noqa: E731
    w = ints(c, 1, 3, 3)
    w_ref = w.double().flip((2, 3)) if flip else w.double()  # (flip: the filter turned, CONVOLUTION mode)
    if walk == "data":
        dx = torch.empty((n, c, h, w_), dtype=dtype, memory_format=torch.channels_last)
        dy = torch.empty((n, c, (h + 1) // 2, (w_ + 1) // 2), dtype=dtype, memory_format=torch.channels_last)
        dy.copy_(ints(*dy.shape))
        out = dx
        want = torch.nn.grad.conv2d_input(dx.shape, w_ref, dy.double(), stride=2, padding=1, groups=c)
    else:
        stride = 1 if walk == "stride1" else 2
        h, w_ = max(h, 3 - 2 * pad[0]), max(w_, 3 - 2 * pad[1])  # (at least one output pixel)
        w_ += (w_ % 2) if stride == 2 else 0  # (stride 2's pair view: an even width)
        x = torch.empty((n, c, h, w_), dtype=dtype, memory_format=torch.channels_last)
        x.copy_(ints(n, c, h, w_))
        out = torch.empty((n, c, (h + 2 * pad[0] - 3) // stride + 1, (w_ + 2 * pad[1] - 3) // stride + 1),
                          dtype=dtype, memory_format=torch.channels_last)
        want = torch.nn.functional.conv2d(x.double(), w_ref, stride=stride, padding=pad, groups=c)
    out0 = ints(*out.shape) if beta else torch.full(out.shape, float("nan"), dtype=dtype)
    out.copy_(out0)
    itemsize = out.element_size()
    if walk == "data":
        cfg = data.draw(dw_configs(dy.shape[2], dy.shape[3], c, itemsize, True))
        grid, args, meta = dg.prepare_data(dy, w, dx, cfg, 2.0, beta, flip, sms=sms)
    else:
        cfg = data.draw(dw_configs(out.shape[2], out.shape[3], c, itemsize, False))
        grid, args, meta = dg.prepare(x, w, out, pad, cfg, 2.0, beta, flip, sms=sms, stride=stride)
    gluon_helpers.emulate_dw3_gluon(grid, args, meta)
    _check(out, want, out0, 2.0, beta)
    STATS.problem("depthwise")
    STATS.ran("depthwise", walk)


dgw = pytest.importorskip("tridnn.cuda.conv_depthwise_gluon_wgrad")


@fuzz_settings(ci_examples=25)
@given(data=st.data(), n=st.integers(1, 5), c=st.sampled_from((8, 16, 24, 40, 64, 72)), h=st.integers(1, 12),
       w_=st.integers(1, 12), pad=st.tuples(st.integers(0, 2), st.integers(0, 2)), atomic=st.booleans(),
       dtype=st.sampled_from((torch.bfloat16, torch.float16, torch.float32)), sms=st.integers(1, 4),
       cap=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_depthwise_filter_gradient_walker_matches_float64(data, n, c, h, w_, pad, atomic, dtype, sms, cap, seed):
    """conv_depthwise_gluon_wgrad's stride-1 3x3 filter gradient through
    gluon_helpers.emulate_dw3_gluon_wgrad: the host's units, grid (programs a channel block,
    at most ``cap`` partial slots) and descriptors; the slots' sum (ALGO_0: the atomic slot)
    equals the float64 filter gradient, exactly."""
    h, w_ = max(h, 3 - 2 * pad[0]), max(w_, 3 - 2 * pad[1])
    x = torch.empty((n, c, h, w_), dtype=dtype, memory_format=torch.channels_last)
    dy = torch.empty((n, c, h + 2 * pad[0] - 2, w_ + 2 * pad[1] - 2), dtype=dtype, memory_format=torch.channels_last)
    gluon_helpers.small_integers(seed, x, dy)
    if data.draw(st.booleans()):
        cfg = data.draw(st.sampled_from(dgw.configs(dy.shape[2], dy.shape[3], c, x.element_size())))
    else:
        cfg = dgw.config(data.draw(st.sampled_from((8, 16, 32))), data.draw(st.sampled_from((1, 2, 4))),
                         data.draw(st.sampled_from((8, 16, 32, 64))), data.draw(st.sampled_from((1, 2, 3, 5))),
                         x.element_size())
    part = torch.full((cap, c, 9), float("nan"))
    if atomic:
        part[0] = 0.0  # (zeroed by the caller)
    grid, args, meta, slots = dgw.prepare(x, dy, part, pad, cfg, cap, atomic, sms=sms)
    assert grid[0] % args[6] == 0 and 1 <= slots <= cap  # (programs a channel block; args[6]: C_BLOCKS)
    gluon_helpers.emulate_dw3_gluon_wgrad(grid, args, meta)
    got = part[:1 if atomic else slots].double().sum(0)
    want = torch.nn.grad.conv2d_weight(x.double(), (c, 1, 3, 3), dy.double(), padding=pad, groups=c)
    assert torch.equal(got, want.reshape(c, 9)), f"max |diff| {(got - want.reshape(c, 9)).abs().max().item()}"
    STATS.problem("depthwise_wgrad")
    STATS.ran("depthwise_wgrad", "atomic" if atomic else "slots")
