"""Every forward algorithm against the float64 reference.

Integer fills make direct and GEMM methods exact; transform methods get the
documented tolerance. Outputs are poisoned with NaN first, so an element that is
not written fails the check, and beta == 0 must not read them.
"""
import numpy as np
import pytest

import tridnn
from tridnn import reference, testing
from tridnn.algorithms import registry
from tridnn.algorithms.problem import ConvProblem

from problems import REGRESSION, suite_problems

FWD = registry.algorithms("conv", "fwd", "numpy")
DTYPES = ["float32", "float64", "float16", "bfloat16"]


def run_case(algo, p, dtype, layout, rng, n=2, alpha=1.0, beta=0.0, mode=tridnn.ConvMode.CROSS_CORRELATION,
             pad_post=None):
    nd = len(p["spatial"])
    conv = tridnn.ConvolutionDescriptor(padding=p["pad"], pad_post=pad_post, stride=p["stride"],
                                        dilation=p["dilation"], groups=p["groups"], mode=mode, nd=nd)
    x_vals = testing.fill((n, p["C"], *p["spatial"]), dtype, rng)
    w_vals = testing.fill((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, layout, rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, layout, w_vals)
    y_dims = conv.output_dims(x_desc, w_desc)
    y_desc, y = testing.make_tensor(y_dims, dtype, layout, rng)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
    reason = algo.not_applicable(problem)
    if reason is not None:
        return reason
    if beta == 0:
        testing.poison(y)
        prior = None
    else:
        prior = testing.fill(y_dims, dtype, rng)
        y[...] = prior
    handle = tridnn.Handle(find_cache=None)
    ws = np.empty(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, conv, y_desc,
                                                                algo.enum), np.uint8)
    x_before = x.copy()
    tridnn.convolution_forward(handle, alpha, x_desc, x, w_desc, w, conv, algo.enum, ws, beta, y_desc, y)
    mode_name = "convolution" if mode == tridnn.ConvMode.CONVOLUTION else "cross_correlation"
    ref = reference.conv_forward(x_vals, w_vals, p["stride"], p["pad"], pad_post, p["dilation"],
                                 p["groups"], mode_name)
    testing.check_result(y, ref, dtype, algo.exact, alpha, beta, prior, name=f"{algo.name} y")
    assert np.array_equal(x, x_before, equal_nan=True), "input x was modified"
    return None


def skip_unless_applies(reason):
    """A problem the algorithm declares not applicable is reported as a skip, never a pass."""
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")


def _ids(p):
    return p["name"]


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
@pytest.mark.parametrize("p", REGRESSION, ids=_ids)
@pytest.mark.parametrize("dtype", DTYPES)
def test_regression_suite_every_dtype(algo, p, dtype, rng):
    layout = "NHWC" if dtype in ("float16", "bfloat16") else "NCHW"
    skip_unless_applies(run_case(algo, p, dtype, layout, rng))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
@pytest.mark.parametrize("layout", testing.LAYOUTS)
@pytest.mark.parametrize("p", REGRESSION + suite_problems(), ids=_ids)
def test_suites_every_layout(algo, layout, p, rng):
    skip_unless_applies(run_case(algo, p, "float32", layout, rng))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.0), (0.5, 1.0), (-1.0, 2.0)])
def test_alpha_beta(algo, alpha, beta, rng):
    p = dict(REGRESSION[3])  # tails_17_20
    skip_unless_applies(run_case(algo, p, "float32", "NHWC", rng, alpha=alpha, beta=beta))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_convolution_mode_flips_filter(algo, rng):
    from tridnn.shapes import conv
    p = conv("flip", 4, 6, (7, 9), 3, 1, 1)
    skip_unless_applies(run_case(algo, p, "float64", "NCHW", rng, mode=tridnn.ConvMode.CONVOLUTION))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_asymmetric_padding(algo, rng):
    from tridnn.shapes import conv
    p = conv("asym", 3, 5, (8, 7), 3, 1, (0, 2))
    skip_unless_applies(run_case(algo, p, "float32", "NCHW", rng, pad_post=(2, 1)))


@pytest.mark.parametrize("algo", FWD, ids=lambda a: a.name)
def test_empty_batch(algo, rng):
    from tridnn.shapes import conv
    p = conv("empty", 4, 4, (5, 5), 3, 1, 1)
    skip_unless_applies(run_case(algo, p, "float32", "NCHW", rng, n=0))


def test_every_algorithm_applies_somewhere(rng):
    """No registered algorithm is a stub that applies to nothing."""
    from tridnn.shapes import conv
    applied = {a.name: 0 for a in FWD}
    for p in REGRESSION + suite_problems() + [conv("w3", 8, 8, (12, 12), 3, 1, 1)]:
        for algo in FWD:
            if run_case(algo, p, "float32", "NCHW", rng) is None:
                applied[algo.name] += 1
    assert all(count > 0 for count in applied.values()), applied


def test_all_eight_forward_algorithms_registered():
    assert sorted(a.enum for a in FWD) == sorted(tridnn.ConvFwdAlgo)
    registry.check_table()


# -- transform methods on planes large enough for their big tiles ----------------------
def _by_enum(member):
    return next(a for a in FWD if a.enum == member)


LARGE_PLANES = [
    # 3x3 stride 1: Winograd F(4x4) (and F(6x6) under TENSOR_OP), several tiles, odd edges
    ("w3_26x30", dict(C=5, K=7, spatial=(26, 30), kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                      dilation=(1, 1), groups=1)),
    # grouped 3x3 with asymmetric padding handled by pad_post below
    ("w3_g2_25", dict(C=6, K=4, spatial=(25, 27), kernel=(3, 3), stride=(1, 1), pad=(0, 2),
                      dilation=(1, 1), groups=2)),
    # FFT tiling: several tiles per dim, stride and dilation
    ("k5_s2_d2", dict(C=3, K=5, spatial=(40, 37), kernel=(5, 5), stride=(2, 2), pad=(3, 1),
                      dilation=(2, 2), groups=1)),
]
TRANSFORM_ALGOS = [tridnn.ConvFwdAlgo.FFT, tridnn.ConvFwdAlgo.FFT_TILING, tridnn.ConvFwdAlgo.WINOGRAD,
                   tridnn.ConvFwdAlgo.WINOGRAD_NONFUSED]


@pytest.mark.parametrize("member", TRANSFORM_ALGOS, ids=lambda m: m.name)
@pytest.mark.parametrize("name,p", LARGE_PLANES, ids=[n for n, _ in LARGE_PLANES])
@pytest.mark.parametrize("dtype", DTYPES)
def test_transform_methods_large_planes_every_dtype(member, name, p, dtype, rng):
    """Winograd and FFT within the float16/bfloat16/float32/float64 tolerances on multi-tile planes."""
    layout = "NHWC" if dtype == "bfloat16" else "NCHW"
    skip_unless_applies(run_case(_by_enum(member), dict(p, name=name), dtype, layout, rng,
                                 pad_post=(2, 0), alpha=1.5, beta=0.5 if dtype != "float64" else 0.0))


def test_fft_tiling_uses_several_tiles():
    algo = _by_enum(tridnn.ConvFwdAlgo.FFT_TILING)
    x = tridnn.TensorDescriptor.nchw(1, 3, 40, 37)
    w = tridnn.FilterDescriptor((5, 3, 5, 5))
    problem = ConvProblem.forward(x, w, tridnn.ConvolutionDescriptor(padding=1, nd=2))
    sizes, valid, counts, _ = algo._tiling(problem)
    assert all(c > 1 for c in counts) and max(sizes) <= 16, (sizes, counts)
    small = ConvProblem.forward(tridnn.TensorDescriptor.nchw(1, 3, 6, 6), w,
                                tridnn.ConvolutionDescriptor(padding=1, nd=2))
    assert "one" in algo.not_applicable(small)


def test_winograd_nonfused_f6x6_under_tensor_op_math(rng):
    """TENSOR_OP math lets WINOGRAD_NONFUSED use F(6x6,3x3); it must still meet float32 tolerance."""
    algo = _by_enum(tridnn.ConvFwdAlgo.WINOGRAD_NONFUSED)
    x_vals = testing.fill((2, 8, 30, 28), "float32", rng)
    w_vals = testing.fill((6, 8, 3, 3), "float32", rng)
    conv = tridnn.ConvolutionDescriptor(padding=1, nd=2, math_type=tridnn.MathType.TENSOR_OP)
    x_desc, x = testing.make_tensor(x_vals.shape, "float32", "NCHW", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, "float32", "NCHW", w_vals)
    y_desc, y = testing.make_tensor(conv.output_dims(x_desc, w_desc), "float32", "NCHW", rng)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, conv)
    assert algo.tile(problem) == 6
    assert algo.tile(ConvProblem.forward(x_desc, w_desc, tridnn.ConvolutionDescriptor(padding=1, nd=2))) == 4
    testing.poison(y)
    handle = tridnn.Handle(find_cache=None)
    ws = np.empty(algo.workspace_size(problem), np.uint8)
    tridnn.convolution_forward(handle, 1.0, x_desc, x, w_desc, w, conv, algo.enum, ws, 0.0, y_desc, y)
    testing.check_result(y, reference.conv_forward(x_vals, w_vals, 1, 1), "float32", False)


@pytest.mark.parametrize("member", [tridnn.ConvFwdAlgo.WINOGRAD, tridnn.ConvFwdAlgo.WINOGRAD_NONFUSED],
                         ids=lambda m: m.name)
def test_winograd_says_why_not(member):
    algo = _by_enum(member)
    x = tridnn.TensorDescriptor.nchw(1, 4, 12, 12)
    cases = [(tridnn.FilterDescriptor((4, 4, 5, 5)), tridnn.ConvolutionDescriptor(padding=2, nd=2), "3x3"),
             (tridnn.FilterDescriptor((4, 4, 3, 3)), tridnn.ConvolutionDescriptor(padding=1, stride=2, nd=2),
              "stride"),
             (tridnn.FilterDescriptor((4, 4, 3, 3)), tridnn.ConvolutionDescriptor(padding=2, dilation=2, nd=2),
              "dilation")]
    for w, conv, word in cases:
        reason = algo.not_applicable(ConvProblem.forward(x, w, conv))
        assert reason is not None and word in reason, reason
    x3 = tridnn.TensorDescriptor.ncdhw(1, 4, 6, 6, 6)
    w3 = tridnn.FilterDescriptor((4, 4, 3, 3, 3))
    assert "2D" in algo.not_applicable(ConvProblem.forward(x3, w3, tridnn.ConvolutionDescriptor(padding=1, nd=3)))


def test_gather_offsets_point_padding_at_the_zero_row():
    from tridnn.cpu.conv_precomp_gemm import gather_offsets
    x = tridnn.TensorDescriptor.nchw(1, 1, 3, 4)
    w = tridnn.FilterDescriptor((1, 1, 3, 3))
    problem = ConvProblem.forward(x, w, tridnn.ConvolutionDescriptor(padding=1, nd=2))
    offsets = gather_offsets(problem)
    assert offsets.shape == (12, 9)
    assert offsets[0, 0] == 12            # output (0, 0), tap (0, 0) reads padding: the sentinel
    assert offsets[0, 4] == 0             # centre tap of output (0, 0) reads x[0, 0]
    assert offsets[5, 8] == 2 * 4 + 2     # output (1, 1), tap (2, 2) reads x[2, 2]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("planar", [True, False], ids=["planar", "channels-last"])
@pytest.mark.parametrize("stride,dilation,dtype,channels", [(1, 1, "float32", 32), (2, 1, "bfloat16", 32),
                                                            (1, 2, "float16", 64), (2, 2, "float32", 64),
                                                            (3, 1, "float64", 8)])
def test_direct_depthwise_many_blocks(layout, planar, stride, dilation, dtype, channels, rng, monkeypatch):
    """DIRECT's depthwise plan, each orientation forced, with blocks small enough that
    rows are split into several blocks (and channels and images into several for small
    planes), spread over its threads; with the einsum threshold lowered to 64, 64 channels
    take the one-einsum-per-block path in channels-last order at stride 1. Asymmetric
    padding, alpha and beta."""
    from tridnn.cpu import conv_depthwise
    monkeypatch.setattr(conv_depthwise, "MIN_EINSUM_CHANNELS", 64)
    monkeypatch.setattr(conv_depthwise, "BLOCK_ELEMENTS", 1500)
    monkeypatch.setattr(conv_depthwise, "THREADS", 2)  # blocks taken by two threads
    monkeypatch.setattr(conv_depthwise.DepthwisePlan, "prefers_planar", staticmethod(lambda *args: planar))
    algo = _by_enum(tridnn.ConvFwdAlgo.DIRECT)
    c = channels
    p = dict(name="dw_96", C=c, K=c, spatial=(46, 40), kernel=(3, 3), stride=(stride, stride),
             pad=(1, 0), dilation=(dilation, dilation), groups=c)
    x = tridnn.TensorDescriptor.packed((2, c, 46, 40), dtype, tridnn.TensorFormat[layout])
    w = tridnn.FilterDescriptor((c, 1, 3, 3), dtype)
    problem = ConvProblem.forward(x, w, tridnn.ConvolutionDescriptor(padding=(1, 0), pad_post=(0, 2),
                                                                     stride=stride, dilation=dilation,
                                                                     groups=c, nd=2))
    plan = algo.depthwise_plan(problem)
    assert plan.planar == planar
    assert len(plan.block_list()) >= 3, plan.blocks
    skip_unless_applies(run_case(algo, p, dtype, layout, rng, pad_post=(0, 2), alpha=2.0, beta=-1.0))
    skip_unless_applies(run_case(algo, p, dtype, layout, rng, pad_post=(0, 2)))  # written straight into y


@pytest.mark.parametrize("planar", [True, False], ids=["planar", "channels-last"])
@pytest.mark.parametrize("spatial,kernel,stride,dilation,pad", [
    ((37,), (5,), (2,), (1,), (2,)),
    ((19,), (3,), (1,), (3,), (4,)),
    ((7, 9, 8), (3, 2, 3), (1, 2, 1), (1, 1, 2), (1, 0, 2)),
    ((6, 11, 5), (2, 3, 1), (2, 1, 3), (2, 1, 1), (0, 1, 0)),
], ids=["1d-s2", "1d-d3", "3d-s121", "3d-s213"])
def test_direct_depthwise_1d_3d(planar, spatial, kernel, stride, dilation, pad, rng, monkeypatch):
    """The phase-split plan in one and three dims, small blocks, both orientations."""
    from tridnn.cpu import conv_depthwise
    monkeypatch.setattr(conv_depthwise, "BLOCK_ELEMENTS", 500)
    monkeypatch.setattr(conv_depthwise.DepthwisePlan, "prefers_planar", staticmethod(lambda *args: planar))
    p = dict(name="dw_nd", C=6, K=6, spatial=spatial, kernel=kernel, stride=stride, pad=pad,
             dilation=dilation, groups=6)
    algo = _by_enum(tridnn.ConvFwdAlgo.DIRECT)
    for layout in ("NCHW", "NHWC"):
        skip_unless_applies(run_case(algo, p, "float32", layout, rng, n=3, alpha=1.0, beta=0.0))
        skip_unless_applies(run_case(algo, p, "float64", layout, rng, n=2, alpha=0.5, beta=2.0))


def test_direct_depthwise_geometry_phases():
    """Stride 2 splits a 3-tap dim into two phases: taps 0 and 2 read phase 0 at shifts 0
    and 1, tap 1 reads phase 1 at shift 0; phases hold ceil(read extent / 2) positions."""
    from tridnn.cpu.conv_depthwise import Geometry
    g = Geometry(in_spatial=(9,), out_spatial=(5,), kernel=(3,), stride=(2,), dilation=(1,), pad_pre=(1,))
    assert g.extent == (6,) and g.reach == (1,) and g.phases == 2
    assert g.taps == [(0, (0,)), (1, (0,)), (0, (1,))]
    copies = {phase: (fills, sources) for phase, fills, sources in g.phase_copies(0, 5)}
    # phase 0 holds padded 0, 2, ..., 10: input -1 (pad), 1, 3, 5, 7, then 9 (past x, zero)
    assert copies[0] == ([(1, 5)], [slice(1, 8, 2)])
    assert copies[1] == ([(0, 5)], [slice(0, 9, 2)])


@pytest.mark.parametrize("member", [tridnn.ConvFwdAlgo.WINOGRAD, tridnn.ConvFwdAlgo.WINOGRAD_NONFUSED],
                         ids=lambda m: m.name)
@pytest.mark.parametrize("layout", testing.LAYOUTS)
@pytest.mark.parametrize("groups", [1, 2])
def test_winograd_tiles_cover_output_exactly(member, layout, groups, rng):
    """16x12 outputs are whole 4x4 tiles: the output transform then scatters straight into y."""
    algo = _by_enum(member)
    p = dict(name="w3_16x12", C=4, K=6, spatial=(16, 12), kernel=(3, 3), stride=(1, 1), pad=(1, 1),
             dilation=(1, 1), groups=groups)
    x = tridnn.TensorDescriptor.packed((2, 4, 16, 12), "float32", tridnn.TensorFormat.NCHW)
    problem = ConvProblem.forward(x, tridnn.FilterDescriptor((6, 4 // groups, 3, 3)),
                                  tridnn.ConvolutionDescriptor(padding=1, groups=groups, nd=2))
    assert algo.tile(problem) == 4
    skip_unless_applies(run_case(algo, p, "float32", layout, rng))
