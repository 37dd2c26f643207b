"""conv_tma's warp-specialized loops (WARP_SPEC configs) through the public API.

On the GPU Triton splits the loop into a producer warpgroup (TMA loads) and two consumer
warpgroups (MMAs); under the interpreter the flag is a no-op, so these tests check what
the WARP_SPEC configs change in the computation itself: the tap-major filter view,
WARP_SPEC 2's transposed product (channels x pixels), the persistent kernel's
unflattened tile loop and pointer epilogue, against the float64 reference with odd
shapes, both directions; where the GPU lists offer them (flat plans only, after every
other config); and that a spatial box is refused unless a benchmark marks it WS_UNSAFE
(Triton 3.6 releases its buffer before the MMA reads it). The interpreter has no such
race, so the spatial cases here (WS_UNSAFE) check the math that benchmarks/sweep_conv_ws.py
times on the GPU."""
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn.cuda import common, conv_tma  # noqa: E402

from test_cuda_conv import P, run_case  # noqa: E402
from test_cuda_conv_tma import ALGO, _resnet_problem, force_config  # noqa: E402


@pytest.fixture
def forced_ws(monkeypatch):
    """Forces one WARP_SPEC config (state.cfg holds WARP_SPEC and PERSISTENT) on every
    conv_tma launch of fwd / bwd_data; records the launches' kernel, constexprs and
    filter descriptor box."""
    launches = []
    state = types.SimpleNamespace(cfg={}, launches=launches)

    def record(kernel, grid, args, consts):
        w_desc = args[4] if kernel is conv_tma.conv_tma_persistent_kernel or kernel is conv_tma.conv_tma_kernel \
            else None
        launches.append((kernel, dict(consts), tuple(w_desc.block_shape) if w_desc is not None else None,
                         tuple(w_desc.strides) if w_desc is not None else None))
    return force_config(monkeypatch, state, record)


def _ws_runs(state, mode, persistent):
    """The recorded launches, all of the expected kernel with WARP_SPEC = mode, reading
    the filter tap-major (box (1, rows, cols)); the persistent kernel stores through
    pointers (no TMA store)."""
    kernel = conv_tma.conv_tma_persistent_kernel if persistent else conv_tma.conv_tma_kernel
    runs = [(consts, box) for k, consts, box, _ in state.launches if k is kernel]
    assert runs and len(runs) == len(state.launches), state.launches
    for consts, box in runs:
        assert consts["WARP_SPEC"] == mode
        assert box[0] == 1 and min(box[1:]) > 1, box
        if persistent:
            assert consts["TMA_STORE"] is False
    return runs


TILE_CASES = [
    P(16, 16, (5, 7), 3, 1, 1),           # 3x3 boxes with edge tiles
    P(16, 32, (6, 9), 3, 1, 2, 2),        # dilation 2, two column tiles
    P(16, 16, (6, 8), 3, 2, 1),           # forward: the stride-2 phase view
    P(16, 16, (4, 6), (3, 1), 1, (1, 0)),  # non-square filter
]
FLAT_CASES = [
    P(16, 32, (5, 5), 1),                 # 1x1: the flat GEMM, a partial last row tile
    P(32, 16, (7, 5), 1, 2),              # forward: the strided 1x1 view
]


def _cases(cases):
    return [(p, d) for p in cases for d in ("fwd", "bwd_data") if d == "fwd" or p["stride"] == (1, 1)]


@pytest.mark.parametrize("p,direction", _cases(TILE_CASES + FLAT_CASES),
                         ids=lambda v: v if isinstance(v, str) else v["name"])
@pytest.mark.parametrize("persistent", [0, 1])
def test_transposed_product_matches_the_reference(p, direction, persistent, rng, forced_ws):
    """WARP_SPEC 2 (channels x pixels, filter tap-major), one tile per program or the
    persistent kernel's loop of tiles over 2 programs; float32 into NaN-poisoned outputs
    (every element written once), batches of 1 and 3."""
    forced_ws.cfg = dict(WARP_SPEC=2, PERSISTENT=persistent, WS_UNSAFE=True)
    for n in (1, 3):
        assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=n) is None
    _ws_runs(forced_ws, 2, persistent)


@pytest.mark.parametrize("p,direction", _cases(TILE_CASES), ids=lambda v: v if isinstance(v, str) else v["name"])
@pytest.mark.parametrize("mode", [1, 2])
def test_one_row_boxes_on_tile_plans(p, direction, mode, rng, forced_ws):
    """The race-free box shape (1 x BW, one image) on spatial plans: rows cut at the image
    edge, both WARP_SPEC modes, no WS_UNSAFE needed."""
    forced_ws.cfg = dict(WARP_SPEC=mode, BH=1, BW=8)
    for n in (1, 3):
        assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=n) is None
    _ws_runs(forced_ws, mode, False)


def test_spatial_boxes_are_refused_without_ws_unsafe(rng, forced_ws):
    """A WARP_SPEC config on a box of several rows (or images) would race on the GPU: the
    launch refuses it unless WS_UNSAFE says the caller knows (the sweep)."""
    for extra in (dict(), dict(NB=2, BH=1)):
        forced_ws.cfg = dict(WARP_SPEC=2, **extra)
        with pytest.raises(ValueError, match="races"):
            run_case("fwd", ALGO["fwd"], P(16, 16, (5, 7), 3, 1, 1), "float32", "NHWC", rng, n=3)
    assert not conv_tma.ws_safe(dict(conv_tma.INTERPRETER_TILE, WARP_SPEC=2))
    assert conv_tma.ws_safe(dict(conv_tma.INTERPRETER_FLAT, WARP_SPEC=1))
    assert all(conv_tma.ws_safe(c) for c in conv_tma.WS_FLAT + conv_tma.PERSISTENT_WS_FLAT)
    assert not any(conv_tma.ws_safe(c) for c in conv_tma.WS_SPATIAL_PROBE)


@pytest.mark.parametrize("p,direction", _cases(FLAT_CASES), ids=lambda v: v if isinstance(v, str) else v["name"])
@pytest.mark.parametrize("persistent", [0, 1])
def test_pixel_split_loop_matches_the_reference(p, direction, persistent, rng, forced_ws):
    """WARP_SPEC 1 (pixels x channels, the GPU splits the pixels) on 1 x BW boxes: the flat
    GEMM, and the strided 1x1 view (a tile plan: one-row boxes)."""
    forced_ws.cfg = dict(WARP_SPEC=1, PERSISTENT=persistent, BH=1, BW=16)
    for n in (1, 3):
        assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=n) is None
    _ws_runs(forced_ws, 1, persistent)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("mode", [tridnn.ConvMode.CONVOLUTION, tridnn.ConvMode.CROSS_CORRELATION])
@pytest.mark.parametrize("persistent", [0, 1])
def test_ws_blends_in_both_modes(direction, mode, persistent, rng, forced_ws):
    """beta != 0 (the epilogue reads the output), float16, the filter flipped or not."""
    forced_ws.cfg = dict(WARP_SPEC=2, PERSISTENT=persistent, WS_UNSAFE=True)
    for p in (P(16, 16, (5, 6), 3, 1, 1), P(16, 32, (5, 5), 1)):
        assert run_case(direction, ALGO[direction], p, "float16", "NHWC", rng, n=3, mode=mode, alpha=2.0,
                        beta=0.5) is None
    _ws_runs(forced_ws, 2, persistent)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_ws_boxes_of_two_images(direction, rng, forced_ws):
    """NB = 2 with the transposed product: the last tile's second image is past N."""
    forced_ws.cfg = dict(WARP_SPEC=2, NB=2, WS_UNSAFE=True)
    for p in (P(16, 16, (5, 7), 3, 1, 1), P(16, 32, (6, 9), 3, 1, 2, 2)):
        for n in (1, 3):
            assert run_case(direction, ALGO[direction], p, "float32", "NHWC", rng, n=n) is None
    assert all(c["NB"] == 2 for c, _ in _ws_runs(forced_ws, 2, False))


def test_tap_major_view_reads_the_same_filter(rng):
    """The recipe's tap-major view of the filter (WARP_SPEC 2) holds the same elements
    as the default [rows, taps, cols] view at every (row, tap, col)."""
    problem, x, w, y = _resnet_problem("fwd", 32, 6, 3, 1, 1, n=2)
    w = torch.randn(w.shape).contiguous(memory_format=torch.channels_last)
    plan = conv_tma.plan_forward(problem, x, w, y)
    cfg = dict(conv_tma.INTERPRETER_TILE)
    views = {}
    for mode in (0, 2):
        r = conv_tma._Recipe(plan, problem, x, w, y, None, dict(cfg, WARP_SPEC=mode, WS_UNSAFE=True), False, -1,
                             False, False, True)
        _, shape, strides, block = r.w_view
        views[mode] = torch.as_strided(w, shape, strides)
        assert block == ((1, block[1], block[2]) if mode == 2 else (block[0], 1, block[2]))
        assert r.consts.get("WARP_SPEC", 0) == mode
    assert torch.equal(views[0].permute(1, 0, 2), views[2])


def _gpu_cands(direction, c, hw, kernel, stride, pad):
    problem, x, w, y = _resnet_problem(direction, c, hw, kernel, stride, pad)
    plan = (conv_tma.plan_forward(problem, x, w, y) if direction == "fwd"
            else conv_tma.plan_backward_data(problem, y, w, x))
    return plan, conv_tma.candidates(plan, types.SimpleNamespace(type="cuda"), problem)


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("layer", [(64, 56, 3, 1, 1), (128, 28, 3, 1, 1), (256, 14, 3, 1, 1), (512, 7, 3, 1, 1),
                                   (64, 56, 1, 1, 0), (256, 56, 1, 1, 0), (128, 28, 1, 1, 0), (1024, 14, 1, 1, 0)],
                         ids=str)
def test_gpu_lists_offer_ws_configs_last(direction, layer, monkeypatch):
    """On an H200 the warp-specialized configs follow every other config (the first stays
    the conservative reference, and the list without them is what it was), only on flat
    plans (1x1 stride 1; not the 3x3 layers' spatial boxes), in both kernels, all with
    4 warps, one-row boxes, >= 128 rows for WARP_SPEC 1 and >= 128 columns for WARP_SPEC 2,
    64-column tiles only for outputs of <= 64 channels (when offered: WS_OFFERED)."""
    monkeypatch.setattr(conv_tma, "WS_OFFERED", True)
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)
    plan, cands = _gpu_cands(direction, *layer)
    ws = [i for i, cfg in enumerate(cands) if cfg.get("WARP_SPEC")]
    assert ws == list(range(len(cands) - len(ws), len(cands)))
    assert not cands[0].get("WARP_SPEC")
    monkeypatch.setattr(conv_tma, "ws_configs", lambda plan, problem, out_cap: [])
    assert conv_tma.candidates(plan, types.SimpleNamespace(type="cuda"), _resnet_problem(direction, *layer)[0]) \
        == cands[:len(cands) - len(ws)]
    plan = plan[0] if isinstance(plan, tuple) else plan  # stride-1 backward data: one phase
    flat = plan.n == 1 and plan.oh == 1
    assert bool(ws) == flat == (layer[2] == 1)
    for cfg in (cands[i] for i in ws):
        assert conv_tma.ws_safe(cfg) and not cfg.get("WS_UNSAFE")
        assert cfg["num_warps"] == 4 and cfg["BLOCK_N"] <= max(64, plan.c_out)
        assert (cfg["BLOCK_N"] == 64) <= (plan.c_out <= 64)
        assert (cfg["BW"] if cfg["WARP_SPEC"] == 1 else cfg["BLOCK_N"]) >= 128
    if ws:
        assert any(cands[i].get("PERSISTENT") for i in ws) and not all(cands[i].get("PERSISTENT") for i in ws)


def test_no_ws_configs_where_they_do_not_apply(monkeypatch):
    """Not for spatial plans (3x3), strided backward data (one launch per phase, FILL),
    float32 data (strict FMA or tf32), nor the interpreter (when offered: WS_OFFERED)."""
    monkeypatch.setattr(conv_tma, "WS_OFFERED", True)
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)
    for direction, layer in (("bwd_data", (256, 28, 1, 2, 0)), ("bwd_data", (128, 28, 3, 2, 1)),
                             ("fwd", (128, 28, 3, 1, 1)), ("fwd", (256, 28, 1, 2, 0))):
        _, cands = _gpu_cands(direction, *layer)
        assert not any(c.get("WARP_SPEC") for c in cands), layer
    problem, x, w, y = _resnet_problem("fwd", 128, 28, 1, 1, 0)
    plan = conv_tma.plan_forward(problem, x, w, y)
    assert any(c.get("WARP_SPEC") for c in conv_tma.candidates(plan, types.SimpleNamespace(type="cuda"), problem))
    assert not any(c.get("WARP_SPEC") for c in conv_tma.candidates(plan, torch.device("cpu"), problem))
    from tridnn.algorithms.problem import ConvProblem
    xd = tridnn.TensorDescriptor.packed((8, 128, 28, 28), "float32", tridnn.TensorFormat.NHWC)
    wd = tridnn.FilterDescriptor((128, 128, 1, 1), "float32", tridnn.TensorFormat.NHWC)
    cd = tridnn.ConvolutionDescriptor(padding=0)
    p32 = ConvProblem("fwd", xd, wd, xd, cd)
    t = [torch.empty(d.dims).contiguous(memory_format=torch.channels_last) for d in (xd, wd, xd)]
    plan32 = conv_tma.plan_forward(p32, *t)
    assert not any(c.get("WARP_SPEC") for c in conv_tma.candidates(plan32, types.SimpleNamespace(type="cuda"), p32))


# -- backward filter: wgrad_boxes' warp-specialized loop ---------------------------------
@pytest.fixture
def forced_wgrad(monkeypatch):
    """Forces one backward-filter config (state.cfg) and records wgrad_tma_kernel's
    constexprs."""
    launches = []
    real_launch = conv_tma.launch
    state = types.SimpleNamespace(cfg={}, launches=launches)

    def recorded(kernel, grid, args, consts, options, static=None):
        launches.append((kernel, dict(consts)))
        return real_launch(kernel, grid, args, consts, options, static)
    monkeypatch.setattr(type(ALGO["bwd_filter"]), "tuner", common.Tuner())
    monkeypatch.setattr(conv_tma, "wgrad_candidates", lambda plan, device, itemsize=2: [dict(state.cfg)])
    monkeypatch.setattr(conv_tma, "launch", recorded)
    return state


@pytest.mark.parametrize("p", [P(16, 32, (5, 5), 1), P(32, 16, (7, 5), 1, 2), P(16, 16, (5, 7), 3, 1, 1)],
                         ids=lambda p: p["name"])
@pytest.mark.parametrize("slices", [1, 3])
def test_wgrad_ws_loop_matches_the_reference(p, slices, rng, forced_wgrad, monkeypatch):
    """WARP_SPEC on 1 x BW boxes: the flat GEMM, the strided 1x1 view and a 3x3 plan (one
    row per box); one slice (dw written directly, DIRECT) or partials summed by
    wgrad_finish; float32 sums and float16 blended with alpha / beta."""
    monkeypatch.setattr(conv_tma, "slices_for", lambda plan, cfg, sms, cap: slices)
    forced_wgrad.cfg = dict(BH=1, BW=8, BLOCK_M=16, BLOCK_N=16, num_warps=1, num_stages=1, WARP_SPEC=True)
    for n in (1, 3):
        assert run_case("bwd_filter", ALGO["bwd_filter"], p, "float32", "NHWC", rng, n=n) is None
    assert run_case("bwd_filter", ALGO["bwd_filter"], p, "float16", "NHWC", rng, n=3, alpha=2.0, beta=0.5) is None
    runs = [c for k, c in forced_wgrad.launches if k is conv_tma.wgrad_tma_kernel]
    assert runs and all(c["WARP_SPEC"] is True for c in runs)
    assert any(c["DIRECT"] for c in runs) == (slices == 1)


def test_wgrad_ws_refuses_spatial_boxes(rng, forced_wgrad):
    forced_wgrad.cfg = dict(BH=2, BW=8, BLOCK_M=16, BLOCK_N=16, num_warps=1, num_stages=1, WARP_SPEC=True)
    with pytest.raises(ValueError, match="races"):
        run_case("bwd_filter", ALGO["bwd_filter"], P(16, 16, (5, 7), 3, 1, 1), "float32", "NHWC", rng, n=3)


@pytest.mark.parametrize("layer", [(64, 56, 1, 1, 0), (256, 56, 1, 1, 0), (1024, 14, 1, 1, 0), (128, 28, 3, 1, 1),
                                   (512, 7, 3, 1, 1)], ids=str)
def test_gpu_wgrad_lists_offer_ws_configs_last(layer, monkeypatch):
    """On an H200 the flat backward-filter plans of 16-bit data with >= 128 output-gradient
    channels get WGRAD_WS_FLAT after the other configs (each with its WAVES variants),
    fitted to the channels; spatial plans and float32 get none (when offered: WS_OFFERED)."""
    monkeypatch.setattr(conv_tma, "WS_OFFERED", True)
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    cuda = types.SimpleNamespace(type="cuda")
    problem, x, w, y = _resnet_problem("bwd_filter", *layer)
    plan = conv_tma.plan_backward_filter(problem, x, y, w)
    cands = conv_tma.wgrad_candidates(plan, cuda, 2)
    ws = [i for i, c in enumerate(cands) if c.get("WARP_SPEC")]
    assert ws == list(range(len(cands) - len(ws), len(cands)))
    flat = plan.n == 1 and plan.oh == 1
    assert flat == (layer[2] == 1)
    assert bool(ws) == (flat and plan.c_red >= 128)  # the consumers split BLOCK_M >= 128
    for c in (cands[i] for i in ws):
        assert conv_tma.ws_safe(c) and c["num_warps"] == 4 and c["BLOCK_M"] <= max(64, plan.c_red)
        assert (c["BLOCK_N"] == 64) <= (plan.c_out <= 64)
    assert not any(c.get("WARP_SPEC") for c in conv_tma.wgrad_candidates(plan, cuda, 4))
    monkeypatch.setattr(conv_tma, "WGRAD_WS_FLAT", [])
    assert conv_tma.wgrad_candidates(plan, cuda, 2) == cands[:len(cands) - len(ws)]


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_ws_configs_not_offered_by_default(direction, monkeypatch):
    """Off unless TRIDNN_CONV_WS=1: a WARP_SPEC config hung the H200 when replayed
    (2026-11-30, res2_1x1r forward), so no default list may contain one."""
    assert conv_tma.WS_OFFERED is False
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)
    cuda = types.SimpleNamespace(type="cuda")
    layer = (256, 56, 1, 1, 0)  # a flat plan: where they would be offered
    if direction == "bwd_filter":
        problem, x, w, y = _resnet_problem("bwd_filter", *layer)
        cands = conv_tma.wgrad_candidates(conv_tma.plan_backward_filter(problem, x, y, w), cuda, 2)
    else:
        _, cands = _gpu_cands(direction, *layer)
    assert cands and not any(c.get("WARP_SPEC") for c in cands)
