"""conv_wgrad_tma: ALGO_1's backward filter with fitted boxes and whole-or-split tiles.

Each test makes ALGO_1's TMA branch run only the given conv_wgrad_tma configs (the
tuner takes the first on the CPU), runs the problem through the public API under
Triton's interpreter and checks dw against the float64 reference (run_case), including
alpha/beta blending and the tap flip of CONVOLUTION mode.
"""
import collections

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.cuda import common, conv_tma, conv_wgrad_tma  # noqa: E402
from tridnn.cuda import conv_bwd_filter_implicit_gemm as wg  # noqa: E402

from test_cuda_conv import P, run_case  # noqa: E402

ALGO_1 = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.ALGO_1)
MODES = (tridnn.ConvMode.CONVOLUTION, tridnn.ConvMode.CROSS_CORRELATION)
# float32 reaches the TMA kernels under tf32 (TENSOR_OP) math only: FMA and DEFAULT (tf32x3)
# take the pointer kernel (_WgradBase._tma)
TF32 = tridnn.MathType.TENSOR_OP

PROBLEMS = [
    P(16, 16, (5, 7), 3, 1, 1),        # stride 1, edge boxes
    P(16, 16, (6, 8), 3, 2, 1),        # stride 2: the phase view
    P(16, 32, (6, 9), 3, 1, 2, 2),     # dilation 2, two input-channel blocks
    P(32, 16, (7, 5), 1, 2),           # strided 1x1 view, two output-channel blocks
    P(16, 32, (5, 5), 1),              # 1x1 stride 1: one flat row of pixels
    P(5, 16, (5, 6), 3, 1, 1),         # C = 5: x padded to 16 channels in the workspace
]


@pytest.fixture
def only(monkeypatch):
    """only(configs): ALGO_1's TMA branch offers just these conv_wgrad_tma configs;
    returns a counter of sched launches and of finish launches."""
    monkeypatch.setattr(type(ALGO_1), "tuner", common.Tuner())
    calls = collections.Counter()
    real_launch, real_kernel = conv_wgrad_tma.launch_sched, conv_wgrad_tma.launch

    def counted_launch(*a, **k):
        calls["sched"] += 1
        return real_launch(*a, **k)

    def counted_kernel(kernel, *a, **k):
        calls[kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)] += 1
        return real_kernel(kernel, *a, **k)
    monkeypatch.setattr(conv_wgrad_tma, "launch_sched", counted_launch)
    monkeypatch.setattr(conv_wgrad_tma, "launch", counted_kernel)

    def install(configs):
        monkeypatch.setattr(conv_tma, "wgrad_candidates", lambda plan, device, itemsize=2: [])
        monkeypatch.setattr(conv_wgrad_tma, "candidates",
                            lambda plan, device, room, sms, itemsize=2: [dict(c) for c in configs])
        return calls
    return install


def cfg(nb, bh, bw, direct, slices):
    return dict(SCHED=True, NB=nb, BH=bh, BW=bw, BLOCK_M=16, BLOCK_N=16, num_warps=1, num_stages=1, DIRECT=direct,
                SLICES=slices)


# (DIRECT, SLICES): every tile whole; every tile split in 3; the first tile whole, the rest in 2
SCHEDULES = [(10 ** 6, 1), (0, 3), (1, 2)]


@pytest.mark.parametrize("p", PROBLEMS, ids=lambda p: p["name"])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=["whole", "split", "mixed"])
def test_sched_kernel_matches_the_reference(p, schedule, rng, only):
    """float32 (exact inputs) and float16 with alpha/beta, both modes; batches of 1 and 3."""
    flat = p["kernel"] == (1, 1) and p["stride"] == (1, 1)
    box = (1, 1, 16) if flat else (1, 2, 8)
    calls = only([cfg(*box, *schedule)])
    for mode in MODES:
        for n in (1, 3):
            assert run_case("bwd_filter", ALGO_1, p, "float32", "NHWC", rng, n=n, mode=mode, math=TF32) is None
        assert run_case("bwd_filter", ALGO_1, p, "float16", "NHWC", rng, n=3, mode=mode, alpha=2.0,
                        beta=0.5) is None
    assert calls["sched"] >= 6
    split = schedule[1] > 1
    assert (calls["wgrad_tiles_finish"] > 0) == split, dict(calls)


@pytest.mark.parametrize("box", [(2, 1, 8), (4, 1, 8), (2, 2, 8), (4, 2, 2), (16, 1, 1), (2, 4, 2)])
def test_boxes_of_several_images_and_rows(box, rng, only):
    """NB images x BH rows x BW columns, 8 wide or narrow (2 x 2, one pixel of 16
    images): odd batches leave the last box partly past N, rows and columns past the
    image (zero fill on both sides); small images at stride 1 and 2, mixed schedule,
    float16 blended."""
    calls = only([cfg(*box, 3, 2)])
    for p in (P(16, 16, (3, 3), 3, 1, 1), P(16, 16, (5, 7), 3, 1, 1), P(16, 16, (6, 6), 3, 2, 1)):
        for n in (3, 5):
            assert run_case("bwd_filter", ALGO_1, p, "float32", "NHWC", rng, n=n, math=TF32) is None
        for mode in MODES:
            assert run_case("bwd_filter", ALGO_1, p, "float16", "NHWC", rng, n=3, mode=mode, alpha=-1.5,
                            beta=0.25) is None
    assert calls["sched"] >= 12 and calls["wgrad_tiles_finish"] > 0


def test_interpreter_candidates_run_as_offered(rng, monkeypatch):
    """conv_wgrad_tma.candidates' own CPU list (boxes from box_for, every schedule)."""
    monkeypatch.setattr(type(ALGO_1), "tuner", common.Tuner())
    monkeypatch.setattr(conv_tma, "wgrad_candidates", lambda plan, device, itemsize=2: [])
    every = conv_wgrad_tma.candidates
    offered = []

    def each(plan, device, room, sms, itemsize=2):
        cands = every(plan, device, room, sms, itemsize)
        offered.append(cands)
        return [cands[len(offered) % len(cands)]]
    monkeypatch.setattr(conv_wgrad_tma, "candidates", each)
    for _ in range(3):
        for p in (P(16, 16, (5, 7), 3, 1, 1), P(16, 16, (6, 8), 3, 2, 1)):
            assert run_case("bwd_filter", ALGO_1, p, "float32", "NHWC", rng, n=3, math=TF32) is None
            monkeypatch.setattr(type(ALGO_1), "tuner", common.Tuner())
    assert offered and all(c["SCHED"] for cands in offered for c in cands)
    assert len({(c["DIRECT"], c["SLICES"]) for c in offered[0]}) >= 2


def _plan(n, oh, ow, k, c, taps=9):
    counts = (3, 3) if taps == 9 else (1, 1)
    tm = conv_tma.TapMap(counts, (-1, -1), (1, 1), (1, 1), (0, 0), (1, 1), counts[1])
    return conv_tma.Plan((n, oh, 1, ow, c), (0, 0, 0, 0, 1), n, oh, ow, (0, 0, 0), (0, 0, 0, 0), tm, k, c)


def test_boxes_fit_small_images():
    """7x7: 16 images x 1 row x 8 columns (87.5% real rows, an 8x8 box 77%); 14x14: 16
    columns, 2 rows, 4 images; a flat plan: one row of pixels."""
    assert conv_tma.box_for(_plan(64, 7, 7, 512, 512), 128) == (16, 1, 8)
    assert conv_tma.box_for(_plan(64, 14, 14, 256, 256), 128) == (4, 2, 16)
    assert conv_tma.box_for(_plan(64, 7, 7, 512, 512), 64) == (8, 1, 8)
    assert conv_tma.box_for(_plan(1, 1, 3136, 512, 2048, 1), 128) == (1, 1, 128)
    assert conv_tma.box_for(_plan(1, 5, 7, 16, 16), 16) == (1, 2, 8)  # never more images than the batch
    # any width: exact covers where the sides allow
    assert conv_tma.box_for(_plan(64, 14, 14, 256, 256), 128, 1) == (32, 2, 2)
    assert conv_tma.box_for(_plan(64, 28, 28, 128, 128), 128, 1) == (8, 4, 4)
    assert conv_tma.box_for(_plan(64, 7, 7, 512, 512), 64, 1) == (64, 1, 1)
    assert conv_tma.box_for(_plan(64, 7, 7, 512, 512), 128, 1) == (16, 1, 8)  # 128 images: past the batch


def test_schedules_fill_waves():
    """res5_3x3 (144 tiles of 128 x 128 on 132 SMs, 28 boxes): 132 whole tiles plus 12
    split 11 ways is offered, as are one slice and a plain split; res4_3x3 (36 tiles):
    splits of 3, 7 and 11 (1-3 waves); the workspace bounds the partial tiles."""
    res5 = conv_wgrad_tma.schedules(144, 28, 132, 10 ** 6)
    assert (144, 1) in res5 and (132, 10) in res5 and (0, 2) in res5
    res4 = conv_wgrad_tma.schedules(36, 112, 132, 10 ** 6)
    assert res4 == [(0, 3), (0, 7), (0, 12)] or res4 == [(0, 3), (0, 7), (0, 11)]
    assert all(d + (144 - d) * s <= 144 + 144 * 3 for d, s in res5)
    tight = conv_wgrad_tma.schedules(36, 112, 132, 36 * 4)
    assert max(s for _, s in tight) <= 4


def test_gpu_candidates_for_small_images_and_16_bit_data():
    """On a GPU, tile and flat plans get SCHED configs with fitted boxes (64 x 64 tiles
    where a side has 64 channels); float32 data none."""
    cuda = type("D", (), {"type": "cuda"})()
    small = conv_wgrad_tma.candidates(_plan(64, 7, 7, 512, 512), cuda, 64 * 512 * 9 * 512, 132)
    assert small and all(c["SCHED"] and (c["NB"], c["BH"], c["BW"]) in ((16, 1, 8), (8, 1, 8), (64, 1, 1))
                         for c in small)
    assert any(c["DIRECT"] == 132 for c in small)
    flat = conv_wgrad_tma.candidates(_plan(1, 1, 3136, 512, 2048, 1), cuda, 8 * 512 * 2048, 132)
    assert flat and all(c["BH"] == 1 and c["NB"] == 1 for c in flat)
    res2 = conv_wgrad_tma.candidates(_plan(64, 56, 56, 64, 64), cuda, 10 ** 8, 132)  # 64 channels: 64 x 64 tiles
    assert res2 and all(c["BLOCK_M"] == c["BLOCK_N"] == 64 and c["NB"] * c["BH"] * c["BW"] in (64, 128) for c in res2)
    assert {(c["NB"], c["BH"], c["BW"]) for c in res2} <= {(2, 8, 8), (1, 8, 8)}  # 56 = 7 x 8: exact
    assert (0, 14) in {(c["DIRECT"], c["SLICES"]) for c in res2}  # 9 tiles x 14 slices: one wave
    assert conv_wgrad_tma.candidates(_plan(64, 7, 7, 512, 512), cuda, 10 ** 9, 132, itemsize=4) == []
    assert wg.conv_wgrad_tma is conv_wgrad_tma


# -- few input channels: wgrad_rows_kernel over the window-row copy of x ----------------
ROWS_PROBLEMS = [
    P(3, 16, (10, 12), 7, 2, 3),   # conv1's shape: 7x7 stride 2, C = 3
    P(1, 16, (6, 7), 5, 1, 2),     # C = 1, stride 1
    P(4, 24, (8, 6), 3, 2, 1),     # C = 4 (a full padded pixel), K = 24: a partial output-channel block
    P(3, 16, (5, 9), (2, 8), (1, 3), (0, 4)),  # 8-wide filter: the window's last column is real
]


@pytest.mark.parametrize("p", ROWS_PROBLEMS, ids=lambda p: p["name"])
def test_rows_kernel_matches_the_reference(p, rng, monkeypatch):
    """The few-channel path alone (the tuner's list holds only its config): float32
    exact inputs at batches 1 and 3 (slices with a short tail), float16 in both modes
    with alpha/beta into a filled dw."""
    monkeypatch.setattr(type(ALGO_1), "tuner", common.Tuner())
    monkeypatch.setattr(conv_tma, "wgrad_candidates", lambda plan, device, itemsize=2: [])
    monkeypatch.setattr(conv_wgrad_tma, "candidates", lambda plan, device, room, sms, itemsize=2: [])
    calls = collections.Counter()
    real = conv_wgrad_tma.launch_rows

    def counted(*a, **k):
        calls["rows"] += 1
        return real(*a, **k)
    monkeypatch.setattr(conv_wgrad_tma, "launch_rows", counted)
    for n in (1, 3):
        assert run_case("bwd_filter", ALGO_1, p, "float32", "NHWC", rng, n=n, math=TF32) is None
    for mode in MODES:
        assert run_case("bwd_filter", ALGO_1, p, "float16", "NHWC", rng, n=3, mode=mode, alpha=2.0, beta=0.5) is None
    assert calls["rows"] == 4


ALGO_0 = registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo.ALGO_0)


def only_rows_recording(monkeypatch, algo, constexpr):
    """``algo``'s pointer path offers only the window-row kernel (the interpreter's one config
    swapped for its CPU config, the GPU's pointer configs dropped), with a fresh tuner;
    returns the list that collects ``constexpr`` of every window-row launch."""
    monkeypatch.setattr(type(algo), "tuner", common.Tuner())
    monkeypatch.setattr(wg, "INTERPRETER_CONFIG", dict(ROWS=True, BLOCK_P=16, BLOCK_M=16, num_warps=1,
                                                       num_stages=1, SLICES=3))
    monkeypatch.setattr(wg, "GPU_CONFIGS_16", [])
    monkeypatch.setattr(wg, "GPU_CONFIGS_32", [])
    seen = []
    real = conv_wgrad_tma.launch

    def launch(kernel, grid, args, constexprs, options):
        if kernel is conv_wgrad_tma.wgrad_rows_kernel:
            seen.append(constexprs[constexpr])
        return real(kernel, grid, args, constexprs, options)
    monkeypatch.setattr(conv_wgrad_tma, "launch", launch)
    return seen


# (C = 1 with groups 1 is the depthwise path's: ALGO_0 sends it to the depthwise kernels)
ROWS_POINTER_PROBLEMS = [p for p in ROWS_PROBLEMS if p["C"] > 1]


@pytest.mark.parametrize("p", ROWS_POINTER_PROBLEMS, ids=lambda p: p["name"])
@pytest.mark.parametrize("math, prec", [(tridnn.MathType.DEFAULT, "tf32x3"), (TF32, "tf32")], ids=["DEFAULT", "TF32"])
def test_rows_kernel_in_algo0_for_float32(p, math, prec, rng, monkeypatch):
    """float32 on tensor cores: ALGO_0 (the pointer path) holds the window-row copy and its
    partials in its workspace and offers the rows kernel beside the pointer kernel; here its
    one config (the interpreter's list holds only it), with the math type's precision,
    against float64, alpha/beta into a filled dw, both modes."""
    precs = only_rows_recording(monkeypatch, ALGO_0, "PREC")
    for mode in MODES:
        assert run_case("bwd_filter", ALGO_0, p, "float32", "NHWC", rng, n=3, mode=mode, math=math,
                        alpha=1.5, beta=-0.5) is None
    assert precs == [prec, prec]


def test_rows_float32_configs_compile_for_sm90_without_spills():
    """The float32 rows configs offered on a GPU (tf32x3 and tf32) compile for sm_90 with no
    local-memory traffic and within the 227 KB of shared memory (64-pixel tiles spilled
    92-224 stores under tf32x3: not offered)."""
    from gluon_helpers import compile_triton_without_local_memory
    types = {"part_ptr": "*fp32", "xp_ptr": "*fp32", "dy_ptr": "*fp32"}
    specs = [["tridnn.cuda.conv_wgrad_tma", "wgrad_rows_kernel", types,
              dict(XS_OW=8, BLOCK_M=bm, BLOCK_P=bp, PREC=prec, INT64=False), warps, stages]
             for prec, tiles in conv_wgrad_tma.ROWS_CONFIGS_FLOAT32.items() for bp, bm, warps, stages in tiles]
    for spec, f in zip(specs, compile_triton_without_local_memory(specs)):
        assert "STG" in f["sass"], spec[3]
        assert f["shared"] <= 227 * 1024, (spec[3], f["shared"])


def test_rows_copy_holds_every_window():
    """The padded copy's extent: conv1 (224, 7x7, stride 2, pad 3) -> 230 rows and 232
    columns (a multiple of 4), 4 channels; the path takes C <= 4 and filters up to 8 x 8."""
    from tridnn.algorithms.problem import ConvProblem
    cd = tridnn.ConvolutionDescriptor(padding=(3, 3), stride=(2, 2), dilation=(1, 1), nd=2)
    fmt = tridnn.TensorFormat.NHWC
    xd = tridnn.TensorDescriptor.packed((64, 3, 224, 224), "bfloat16", fmt)
    wd = tridnn.FilterDescriptor((64, 3, 7, 7), "bfloat16", fmt)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    problem = ConvProblem("bwd_filter", xd, wd, yd, cd)
    assert conv_wgrad_tma.rows_applicable(problem)
    assert conv_wgrad_tma.rows_shape(problem) == (64, 230, 232, 4)
    cuda = type("D", (), {"type": "cuda"})()
    cands = conv_wgrad_tma.rows_candidates(problem, cuda, 64 * 64 * 49 * 16, 132)
    assert cands and all(c["ROWS"] and c["SLICES"] * 64 * 256 <= 64 * 64 * 49 * 16 for c in cands)
    xf = tridnn.TensorDescriptor.packed((64, 3, 224, 224), "float32", fmt)
    wf = tridnn.FilterDescriptor((64, 3, 7, 7), "float32", fmt)
    yf = xf.with_dims(cd.output_dims(xf, wf))
    for math, prec in ((tridnn.MathType.DEFAULT, "tf32x3"), (TF32, "tf32")):  # float32 on tensor cores
        cdm = tridnn.ConvolutionDescriptor(padding=(3, 3), stride=(2, 2), dilation=(1, 1), nd=2, math_type=math)
        f32 = ConvProblem("bwd_filter", xf, wf, yf, cdm)
        tiles = [(c["BLOCK_P"], c["BLOCK_M"], c["num_warps"], c["num_stages"])
                 for c in conv_wgrad_tma.rows_candidates(f32, cuda, 10 ** 9, 132)]
        assert tiles and set(tiles) == set(conv_wgrad_tma.ROWS_CONFIGS_FLOAT32[prec]), (math, tiles)
    strict = tridnn.ConvolutionDescriptor(padding=(3, 3), stride=(2, 2), dilation=(1, 1), nd=2,
                                          math_type=tridnn.MathType.FMA)
    single = ConvProblem("bwd_filter", xf, wf, yf, strict)  # IEEE float32: not on this path
    assert conv_wgrad_tma.rows_applicable(single) and conv_wgrad_tma.rows_candidates(single, cuda, 10 ** 9, 132) == []
    wide = tridnn.FilterDescriptor((64, 16, 7, 7), "bfloat16", fmt)
    xw = tridnn.TensorDescriptor.packed((64, 16, 224, 224), "bfloat16", fmt)
    assert not conv_wgrad_tma.rows_applicable(ConvProblem("bwd_filter", xw, wide, yd, cd))


def test_time_model_prefers_filled_waves_and_keeps_every_shape():
    """predict_us: on res5_3x3 (144 tiles of 128 x 128, 132 SMs) 132 whole tiles plus 12
    split ones beat one slice for all (two rounds) and an even split in two (three rounds
    of half tiles plus partials); the model reproduces the measured 58 us of one slice
    with 2-image 8x8 boxes. The tuner's list (keep) holds the best of each box shape (on
    res5_3x3 at batch 256, which has more configs than the list keeps)."""
    res5 = _plan(64, 7, 7, 512, 512)
    base = dict(SCHED=True, NB=16, BH=1, BW=8, BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)
    whole = conv_wgrad_tma.predict_us(res5, dict(base, DIRECT=144, SLICES=1), 132)
    mixed = conv_wgrad_tma.predict_us(res5, dict(base, DIRECT=132, SLICES=10), 132)
    even = conv_wgrad_tma.predict_us(res5, dict(base, DIRECT=0, SLICES=2), 132)
    assert mixed < 0.75 * whole and mixed < even
    measured = conv_wgrad_tma.predict_us(res5, dict(base, NB=2, BH=8, BW=8, DIRECT=144, SLICES=1), 132)
    assert abs(measured - 58.0) < 3.0
    cuda = type("D", (), {"type": "cuda"})()
    big = _plan(256, 7, 7, 512, 512)
    every = conv_wgrad_tma.candidates(big, cuda, 10 ** 9, 132, keep=None)
    kept = conv_wgrad_tma.candidates(big, cuda, 10 ** 9, 132)
    assert len(every) > len(kept) >= conv_wgrad_tma.KEEP and all(c in every for c in kept)
    assert {(c["NB"], c["BH"], c["BW"]) for c in kept} == {(c["NB"], c["BH"], c["BW"]) for c in every}
    costs = [conv_wgrad_tma.predict_us(big, c, 132) for c in kept]
    assert costs == sorted(costs) and costs[0] == min(conv_wgrad_tma.predict_us(big, c, 132) for c in every)


def test_no_tile_config_offers_the_rejected_combination():
    """8 warps with 4 stages at 128 x 128 on 64-pixel boxes gave results the tuner's
    cross-check rejected on the H200 (Triton 3.6, 2026-11-30 11:50 UTC: four sched configs
    and conv_tma's own 8x8 one on the res3-res5 3x3 layers): no list offers it."""
    from tridnn.cuda import conv_tma, conv_wgrad_tma
    rejected = lambda warps, stages, bm, bn: warps == 8 and stages == 4 and bm * bn >= 128 * 128
    assert not any(rejected(w, s, bm, bn) for _, bm, bn, w, s in conv_wgrad_tma.TILES + conv_wgrad_tma.NARROW_TILES)
    # 64-pixel boxes at 128 x 128 were rejected with 3 stages too, at 8 warps (14:05 UTC)
    # and at 4 (session 8, 20:2x UTC)
    assert not any(px == 64 and bm * bn >= 128 * 128
                   for px, bm, bn, w, _ in conv_wgrad_tma.TILES + conv_wgrad_tma.NARROW_TILES)
    assert not any(rejected(c["num_warps"], c["num_stages"], c["BLOCK_M"], c["BLOCK_N"])
                   for c in conv_tma.WGRAD_TILE + conv_tma.WGRAD_SMALL)
    assert not any(c["num_warps"] == 8 for c in conv_tma.PHASE_EXTRA)


def test_small_forward_configs_leave_out_the_rejected_box():
    """Two 8x8 images x 128 columns at 8 warps / 3 stages disagreed with the reference
    config on res5_ds forward in two H200 runs (Triton 3.6): SMALL_CONFIGS does not offer it."""
    from tridnn.cuda import conv_tma
    shapes = {(c.get("NB", 1), c["BLOCK_N"], c["num_warps"], c["num_stages"]) for c in conv_tma.SMALL_CONFIGS}
    assert (2, 128, 8, 3) not in shapes and (2, 128, 4, 4) in shapes


def test_wide_slices_for_the_pointer_kernel_only(rng, monkeypatch):
    """A one-tile filter gradient (16 x 16, 1x1) gets a workspace of WIDE_SLICES partial
    slices, and the pointer kernel plans with them on a long reduction (res2_1x1a: 264 on
    132 SMs, not 64); the TMA branch (tf32) is handed only DENSE_SLICES (its split
    schedules were measured with 64), and its result still matches float64."""
    from test_cuda_conv import nhwc_problem
    p = P(16, 16, (6, 8), 1, 1, 0)
    assert ALGO_1.buffers(nhwc_problem("bwd_filter", p, n=3, math=TF32))[0].shape[0] == wg.WIDE_SLICES
    big = nhwc_problem("bwd_filter", P(64, 64, (56, 56), 1, 1, 0), n=64)
    cap = ALGO_1.buffers(big)[0].shape[0]
    assert cap == wg.WIDE_SLICES and wg.slices_for(wg.geometry(big), wg.GPU_CONFIGS_32[3], 132, cap) == 264
    wide = nhwc_problem("bwd_filter", P(256, 256, (14, 14), 3, 1, 1), n=64)
    assert ALGO_1.buffers(wide)[0].shape[0] == wg.DENSE_SLICES == 64  # 2.4 MB a slice
    handed = []
    real = wg.tma_candidates
    monkeypatch.setattr(wg, "tma_candidates", lambda *a, **k: handed.append(a[6].shape[0]) or real(*a, **k))
    monkeypatch.setattr(type(ALGO_1), "tuner", common.Tuner())
    assert run_case("bwd_filter", ALGO_1, p, "float32", "NHWC", rng, n=3, math=TF32) is None
    assert handed == [wg.DENSE_SLICES]
