"""Stream-K for conv_tma's GEMMs (tridnn.cuda.conv_tma_streamk) under the interpreter.

``conv_tma_streamk.FORCE`` puts a stream-K config first, so the interpreter (which takes
the first candidate) runs it through the public API; PROGRAMS fixes the program count
so the tests choose the splits: a tile split over 2 or 3-4 programs, tiles owned whole,
a program covering several tiles, and the data-parallel + stream-K hybrid (DP = 1).
Every case is checked against the float64 reference and asserts that the stream-K
kernels ran; the last tests check where the GPU offers stream-K and the workspace
IMPLICIT_GEMM declares for it.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import common, conv_tma  # noqa: E402
from tridnn.cuda import conv_tma_streamk as streamk  # noqa: E402

from test_cuda_conv import P, _handle, _to_torch, conv, run_case  # noqa: E402

ALGO = {"fwd": registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.IMPLICIT_GEMM),
        "bwd_data": registry.by_enum("conv", "bwd_data", "triton", tridnn.ConvBwdDataAlgo.ALGO_1)}

FLAT = P(48, 32, (5, 5), 1)          # 1x1: flat GEMM, 3 iterations a tile (C = 48, BLOCK_K 16)
BOXES = P(16, 16, (5, 7), 3, 1, 1)   # 3x3 boxes with edge tiles: 9 iterations a tile


def _tiles_iters(p, n, direction):
    """(tiles, iterations per tile) of the interpreter configs for problem p, batch n."""
    c_red, c_out = (p["C"], p["K"]) if direction == "fwd" else (p["K"], p["C"])
    taps = int(np.prod(p["kernel"]))
    h, w = p["spatial"] if direction == "bwd_data" else [i - k + 1 + 2 * ((k - 1) // 2)
                                                        for i, k in zip(p["spatial"], p["kernel"])]
    if taps == 1:
        cfg = conv_tma.INTERPRETER_FLAT
        tiles = -(-(n * h * w) // cfg["BW"]) * -(-c_out // cfg["BLOCK_N"])
    else:
        cfg = conv_tma.INTERPRETER_TILE
        tiles = n * -(-h // cfg["BH"]) * -(-w // cfg["BW"]) * -(-c_out // cfg["BLOCK_N"])
    return tiles, taps * (c_red // 16)


@pytest.fixture
def sk(monkeypatch):
    """Forces stream-K with fresh tuners; yields a setter for the config and the list
    of recorded launches (kernel name, grid, constexprs)."""
    launches = []
    real = streamk.launch

    def recorded(kernel, grid, args, consts, options, static=None):
        launches.append((kernel.fn.__name__ if hasattr(kernel, "fn") else kernel.__name__, grid, dict(consts)))
        return real(kernel, grid, args, consts, options, static)
    monkeypatch.setattr(streamk, "launch", recorded)

    def use(**cfg):
        use.kernel = "conv_tma_streamk_kernel"
        monkeypatch.setattr(streamk, "FORCE", dict(cfg))
        for algo in ALGO.values():
            monkeypatch.setattr(type(algo), "tuner", common.Tuner())
        launches.clear()
    use(PROGRAMS=4)
    use.launches = launches
    return use


def _ran(sk, programs, finish=True):
    """The stream-K kernel ran with ``programs`` programs, the finish pass iff ``finish``."""
    names = [name for name, _, _ in sk.launches]
    assert sk.kernel in names, sk.launches
    assert all(g == (programs,) for name, g, _ in sk.launches if name == sk.kernel), sk.launches
    assert ("streamk_finish_kernel" in names) == finish, sk.launches


# programs, DP waves; with BOXES at batch 2 (6 tiles x 9 iterations = 54):
#   4: ranges of 13-14, a tile whole in a program and tiles split over 2 programs;
#   16: ranges of 3-4, every tile split over 3-4 programs (some whole ranges inside one tile);
#   2: 27 = 3 whole tiles each (no split: no finish pass);
#   4 + DP 1: 4 tiles data-parallel, 2 tiles' 18 iterations streamed over 4 programs
SPLITS = [(4, 0), (16, 0), (2, 0), (4, 1)]


@pytest.mark.parametrize("programs,dp", SPLITS)
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_streamk_boxes_match_the_reference(direction, programs, dp, rng, sk):
    """3x3 tile plans (forward, and backward data at stride 1): float32 into a poisoned
    output, float16 with alpha/beta blending a nonzero prior output."""
    sk(PROGRAMS=programs, DP=dp)
    assert run_case(direction, ALGO[direction], BOXES, "float32", "NHWC", rng) is None
    _ran(sk, programs, finish=programs != 2)
    sk(PROGRAMS=programs, DP=dp)
    assert run_case(direction, ALGO[direction], BOXES, "float16", "NHWC", rng, alpha=2.0, beta=0.5) is None
    _ran(sk, programs, finish=programs != 2)


@pytest.mark.parametrize("programs,dp", [(5, 0), (7, 0), (5, 1), (7, 1)])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_streamk_flat_gemm_matches_the_reference(direction, programs, dp, rng, sk):
    """1x1 flat plans (a plain GEMM over the pixels), 2-6 iterations per tile: programs
    covering several tiles, split tiles; a partial last row tile (50 pixels). (7, DP 1):
    the one or few streamed tiles have fewer iterations than there are programs, so
    some ranges are empty."""
    tiles, ipt = _tiles_iters(FLAT, 2, direction)
    assert (tiles - dp * programs) * ipt % programs  # the ranges do not all fall on tile boundaries
    for dtype, alpha, beta in (("float32", 1.0, 0.0), ("float16", 0.5, 1.0)):
        sk(PROGRAMS=programs, DP=dp)
        assert run_case(direction, ALGO[direction], FLAT, dtype, "NHWC", rng, alpha=alpha, beta=beta) is None
        _ran(sk, programs)


def test_streamk_all_tiles_data_parallel(rng, sk):
    """DP = 1 with more programs than tiles: every tile data-parallel, one program each
    (the grid shrinks to the tiles), no stream-K part and no finish pass."""
    tiles, _ = _tiles_iters(FLAT, 2, "fwd")
    sk(PROGRAMS=16, DP=1)
    assert run_case("fwd", ALGO["fwd"], FLAT, "float32", "NHWC", rng) is None
    _ran(sk, tiles, finish=False)


def test_split_tiles_counts_tiles_over_several_ranges():
    assert streamk.split_tiles(6, 9, 2) == 0      # 27 = 3 whole tiles a program
    assert streamk.split_tiles(6, 9, 4) == 2      # ranges start at 0, 13, 27, 40: inside tiles 1 and 4
    assert streamk.split_tiles(6, 9, 16) == 6
    assert streamk.split_tiles(100, 72, 132) == 100


def test_streamk_other_geometries(rng, sk):
    """Dilation 2 with two column tiles, the stride-2 phase view, the strided 1x1 view
    (forward), and backward data of the dilated 3x3; CONVOLUTION mode reverses the
    taps."""
    for p in (P(16, 32, (6, 9), 3, 1, 2, 2), P(16, 16, (6, 8), 3, 2, 1), P(32, 16, (7, 5), 1, 2)):
        sk(PROGRAMS=5)
        assert run_case("fwd", ALGO["fwd"], p, "float32", "NHWC", rng,
                        mode=tridnn.ConvMode.CONVOLUTION) is None
        _ran(sk, 5)
    sk(PROGRAMS=5)  # backward data of the dilated 3x3: the transposed taps, flipped filter
    assert run_case("bwd_data", ALGO["bwd_data"], P(16, 32, (6, 9), 3, 1, 2, 2), "float32", "NHWC", rng,
                    mode=tridnn.ConvMode.CONVOLUTION) is None
    _ran(sk, 5)


def _fused(p, rng, residual, dtype="float32", n=3):
    """conv + bias + relu (+ 0.5 z) with alpha 2 through execute; returns (y, reference)."""
    from tridnn.api.convolution import execute
    from tridnn.cuda.epilogue import EpilogueSpec
    from tridnn.descriptors.activation import ActivationMode
    c, k = p["C"], p["K"]
    cd = conv(p)
    x_vals = testing.fill((n, c, *p["spatial"]), dtype, rng)
    w_vals = testing.fill((k, c, *p["kernel"]), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), dtype, "NHWC", rng)
    z_vals = testing.fill(y_desc.dims, dtype, rng)
    z_desc, z = testing.make_tensor(y_desc.dims, dtype, "NHWC", rng, z_vals)
    bias = rng.standard_normal(k).astype(np.float32)
    handle = _handle("cpu")
    spec = EpilogueSpec(activation=ActivationMode.RELU, bias=torch.from_numpy(bias),
                        z=_to_torch(z, "cpu") if residual else None, alpha2=0.5)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    views = {key: handle.backend.view(v, d, key, key == "y") for key, v, d in
             (("x", x, x_desc), ("w", w, w_desc.as_tensor()), ("y", y, y_desc))}
    testing.poison(y)
    algo = ALGO["fwd"]
    execute(handle, problem, algo, views, handle.workspace(algo.workspace_size(problem)), 2.0, 0.0, epilogue=spec)
    v = 2.0 * reference.conv_forward(x_vals, w_vals, p["stride"], p["pad"]) + bias.astype(np.float64)[None, :, None,
                                                                                                        None]
    if residual:
        v = v + 0.5 * z_vals.astype(np.float64)
    return np.asarray(y, np.float64).copy(), np.maximum(v, 0.0)


@pytest.mark.parametrize("p", [FLAT, BOXES], ids=["flat", "boxes"])
@pytest.mark.parametrize("residual", [False, True])
def test_streamk_fused_epilogue(p, residual, rng, sk):
    """Bias + relu (+ residual z) in both the whole-tile epilogue and the finish pass
    (7 programs: 60 or 162 iterations, ranges ending inside tiles)."""
    sk(PROGRAMS=7)
    got, ref = _fused(p, rng, residual)
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)
    _ran(sk, 7)


def test_streamk_is_deterministic(rng, sk):
    """A config gives bitwise-equal results run after run (the finish pass sums a tile's
    pieces in program order), and the split changes the float32 sum only by rounding."""
    outs = []
    for programs in (16, 16, 7):
        sk(PROGRAMS=programs)
        outs.append(_fused(BOXES, np.random.default_rng(5), True)[0])
        _ran(sk, programs)
    assert np.array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[2], outs[0], rtol=1e-5, atol=1e-5)


# -- where the GPU offers stream-K, and the workspace ---------------------------------
def _layer(name):
    from tridnn import shapes
    return next(p for p in shapes.RESNET50 if p["name"] == name)


def _problem(p, direction, dtype="bfloat16", n=64, math=tridnn.MathType.DEFAULT):
    cd = tridnn.ConvolutionDescriptor(padding=p["pad"], stride=p["stride"], dilation=p["dilation"], math_type=math)
    xd = tridnn.TensorDescriptor.packed((n, p["C"], *p["spatial"]), dtype, tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((p["K"], p["C"], *p["kernel"]), dtype, tridnn.TensorFormat.NHWC)
    return ConvProblem(direction, xd, wd, xd.with_dims(cd.output_dims(xd, wd)), cd)


def test_not_offered_by_default():
    """Measured slower than conv_tma's kernels on the H200 (14:31 UTC): no workspace and
    no configs unless OFFERED is set."""
    assert streamk.OFFERED is False
    for direction in ("fwd", "bwd_data"):
        assert ALGO[direction].workspace_size(_problem(_layer("res5_3x3"), direction)) == 0
    assert ALGO["fwd"].workspace_size(_problem(_layer("res4_1x1r"), "fwd")) == 0


def test_workspace_only_where_streamk_is_offered(monkeypatch):
    """With OFFERED, bfloat16 batch 64: two pieces of the largest offered tile per
    program of 132. 128 x 256 float32 pieces for res4_1x1r (98 tiles of 128 x 256, 196 of
    128 x 128), res5_1x1r, res5_1x1c (200 tiles of 128 x 256 where 128 x 128 makes 400: 3
    waves). None for res5_3x3 (without the 2-image x 256-column config, which gave wrong
    results on the H200, its tiles fill 97% of a wave), res5_ds (256 of its biggest
    tiles: 97% of two waves), res4_3x3 backward data (256 tiles of 8 x 16 x 128),
    float32, a tiny layer, NCHW and stride-2 backward data."""
    monkeypatch.setattr(streamk, "OFFERED", True)
    piece = 2 * 132 * 128 * 256 * 4
    for name in ("res4_1x1r", "res5_1x1r", "res5_1x1c"):
        size = ALGO["fwd"].workspace_size(_problem(_layer(name), "fwd"))
        assert piece <= size <= piece + 256, (name, size)
    for direction in ("fwd", "bwd_data"):
        assert ALGO[direction].workspace_size(_problem(_layer("res5_3x3"), direction)) == 0
    assert ALGO["fwd"].workspace_size(_problem(_layer("res5_ds"), "fwd")) == 0
    assert ALGO["bwd_data"].workspace_size(_problem(_layer("res4_3x3"), "bwd_data")) == 0
    assert ALGO["fwd"].workspace_size(_problem(_layer("res4_1x1r"), "fwd", "float32")) == 0
    assert ALGO["fwd"].workspace_size(_problem(_layer("res4_1x1r"), "fwd", n=2)) == 0  # 0.2 GFLOP
    assert ALGO["bwd_data"].workspace_size(_problem(_layer("res5_3x3s2"), "bwd_data")) == 0
    cd = tridnn.ConvolutionDescriptor()
    xd = tridnn.TensorDescriptor.packed((64, 1024, 14, 14), "bfloat16", tridnn.TensorFormat.NCHW)
    wd = tridnn.FilterDescriptor((256, 1024, 1, 1), "bfloat16", tridnn.TensorFormat.NCHW)
    nchw = ConvProblem("fwd", xd, wd, xd.with_dims(cd.output_dims(xd, wd)), cd)
    assert ALGO["fwd"].workspace_size(nchw) == 0


def test_gpu_offers_streamk_after_the_others(monkeypatch):
    """On a 132-SM GPU with OFFERED: res4_1x1r's flat plan gets stream-K configs after
    conv_tma's (whose first stays first), with a DP = 1 twin where tiles outnumber
    programs; res4_ds (1024 tiles of 8 x 16 x 128: 8 waves) and a missing partial buffer
    get none."""
    monkeypatch.setattr(streamk, "sm_count", lambda device: 132)
    monkeypatch.setattr(streamk, "OFFERED", True)
    cuda = torch.device("cuda")
    problem = _problem(_layer("res4_1x1r"), "fwd")
    x = torch.empty(64, 1024, 14, 14, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.empty(256, 1024, 1, 1, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    y = torch.empty(64, 256, 14, 14, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    plan = conv_tma.plan_forward(problem, x, w, y)
    assert conv_tma.plan_kind(plan) == "flat"
    part = torch.empty(streamk.workspace_buffers(problem, "fwd")[0].shape, dtype=torch.float32)
    base = [dict(conv_tma.FLAT_CONFIGS[0]), dict(conv_tma.FLAT_CONFIGS[1])]
    cands = streamk.with_streamk(base, plan, cuda, problem, part)
    assert cands[:2] == base
    extra = cands[2:]
    assert extra and all(c["SK"] for c in extra)
    assert any(c["DP"] == 1 for c in extra) and any(c["DP"] == 0 for c in extra)
    assert streamk.with_streamk(base, plan, cuda, problem, None) == base
    problem_c = _problem(_layer("res4_ds"), "fwd")
    x = torch.empty(64, 512, 28, 28, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.empty(1024, 512, 1, 1, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    y = torch.empty(64, 1024, 14, 14, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    assert streamk.candidates(conv_tma.plan_forward(problem_c, x, w, y), cuda, problem_c, part) == []


def test_worth_it_rule():
    """Under four waves, last wave under 90% full, at least MIN_ITERS iterations."""
    assert streamk.worth_it(100, 72, 132)       # one wave, 76% full
    assert streamk.worth_it(196, 16, 132)       # 1.5 waves, 74%
    assert streamk.worth_it(400, 8, 132)        # 3.03 waves: 4 waves for 3 of work
    assert not streamk.worth_it(128, 72, 132)   # 97% full
    assert not streamk.worth_it(264, 72, 132)   # two full waves
    assert not streamk.worth_it(600, 8, 132)    # 4.5 waves
    assert not streamk.worth_it(100, 4, 132)    # too short to split


def test_dp_options():
    assert streamk.dp_options(100, 132) == [0]
    assert streamk.dp_options(196, 132) == [0, 1]
    assert streamk.dp_options(400, 132) == [2]   # 264 tiles data-parallel, 136 streamed
