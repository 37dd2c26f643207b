"""conv_depthwise_wgrad_tiles (depthwise 3x3 backward filter, pixel tiles reused across a
slice of images) against the float64 reference.

Under the interpreter (tiny shapes; tiles of 4-8 pixels and channels, so the flattened
maps and the channels cross tile tails): the kernel's partial slots summed in float64
against reference.conv_backward_filter for strides 1-3, paddings 0-2, dilation 2, a
channel multiplier of 2, NHWC, NCHW and a strided view, float32 and float16; slots capped
(image slices, then pixel slices), ATOMIC and the 64-bit index path; the GPU configs
once each; through the public API (ALGO_0 and ALGO_1, the tiles as the tuner's only
candidate: alpha/beta, a NaN-poisoned dw); where the tuner's list offers them.
"""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.types import TensorFormat  # noqa: E402

from test_cuda_depthwise_wgrad import check_public_api, in_layout  # noqa: E402
from tridnn.cuda import conv_depthwise_backward as D  # noqa: E402
from tridnn.cuda import conv_depthwise_wgrad_tiles as TL  # noqa: E402
from gluon_helpers import compile_triton_without_local_memory  # noqa: E402

CPU = torch.device("cpu")
GPU = torch.device("cuda")  # the GPU candidate list, also run under the interpreter
FILTER = [registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo[a]) for a in ("ALGO_0", "ALGO_1")]

# (C, multiplier, (H, W), stride, pad, dilation): tails everywhere, strides 1-3, pads 0-2
CASES = [(5, 1, (7, 6), 1, 1, 1), (6, 1, (9, 7), 2, 1, 1), (3, 1, (5, 9), 1, 2, 1), (4, 1, (10, 11), 2, 2, 1),
         (5, 1, (6, 5), 1, 0, 1), (3, 2, (8, 7), 1, 1, 1), (4, 1, (11, 9), 1, 2, 2), (5, 1, (10, 8), 3, 1, 1)]


@pytest.fixture(scope="module", autouse=True)
def _interpreter():
    tridnn.Handle(device="cpu", backend="triton")  # patches the interpreter (layer_utils)


def _problem(c, mult, hw, stride, pad, dilation=1, n=2):
    k = c * mult
    x_desc = tridnn.TensorDescriptor.packed((n, c, *hw), "float32", TensorFormat.NCHW)
    w_desc = tridnn.FilterDescriptor((k, 1, 3, 3))
    conv = tridnn.ConvolutionDescriptor(padding=pad, stride=stride, dilation=dilation, groups=c)
    return ConvProblem.forward(x_desc, w_desc, conv)


def _operands(rng, problem, c, mult, hw, stride, pad, dilation, dtype, layout):
    n = problem.n
    oh, ow = ((s + 2 * pad - 2 * dilation - 1) // stride + 1 for s in hw)
    x = rng.standard_normal((n, c, *hw))
    dy = rng.standard_normal((n, c * mult, oh, ow))
    if dtype == torch.float16:  # the reference sees the rounded values
        x, dy = x.astype(np.float16).astype(np.float64), dy.astype(np.float16).astype(np.float64)
    ref = reference.conv_backward_filter(x, dy, (c * mult, 1, 3, 3), stride, pad, None, dilation, c)

    return in_layout(x, dtype, layout), in_layout(dy, dtype, layout), ref


def _partials(problem, x, dy, cfg, cap=65535, atomic=False, sms=4):
    """The kernel's slots [slots, K, 9] (NaN-poisoned before; ATOMIC: zeroed), summed in float64."""
    k = problem.k
    _, img, _, pix = TL.plan(problem, cfg, 65535 if atomic else cap, sms)
    part = torch.zeros((1, k, 9)) if atomic else torch.full((img * pix, k, 9), float("nan"))
    used = TL.launch_tiles(problem, x, dy, part, atomic, cfg, cap, sms)
    assert used == (1 if atomic else img * pix) and used <= cap
    return part[:used].double().sum(0).reshape(k, 1, 3, 3).numpy(), part


def _check(got, ref, tol, msg=""):
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max(), err_msg=str(msg))


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("layout,dtype", [("NHWC", torch.float32), ("NCHW", torch.float16),
                                          ("strided", torch.float32)], ids=["nhwc32", "nchw16", "strided32"])
def test_tiles_vs_reference(case, layout, dtype, rng):
    c, mult, hw, stride, pad, dil = case
    problem = _problem(c, mult, hw, stride, pad, dil)
    assert TL.applies(problem)
    x, dy, ref = _operands(rng, problem, c, mult, hw, stride, pad, dil, dtype, layout)
    tol = 1e-5 if dtype == torch.float32 else 2e-3  # float16 operands: float32 accumulation of exact products
    for cfg in TL.configs(CPU, c * mult):
        got, _ = _partials(problem, x, dy, cfg)
        _check(got, ref, tol, cfg)


@pytest.mark.parametrize("case", CASES[:2], ids=str)
def test_caps_atomic_int64(case, rng, monkeypatch):
    """Three images: slots capped at 1, 2 and 3 (image slices of 2-3 images, a pixel slice
    each), many SMs (pixel slices too), ATOMIC into one slot, and the 64-bit offsets
    (forced: the tensors would not fit a test)."""
    c, mult, hw, stride, pad, dil = case
    problem = _problem(c, mult, hw, stride, pad, dil, n=3)
    x, dy, ref = _operands(rng, problem, c, mult, hw, stride, pad, dil, torch.float32, "NHWC")
    cfg = TL.configs(CPU, c)[0]
    for cap, sms in ((1, 4), (2, 4), (3, 4), (65535, 64)):
        got, _ = _partials(problem, x, dy, cfg, cap=cap, sms=sms)
        _check(got, ref, 1e-5, (cap, sms))
    got, _ = _partials(problem, x, dy, cfg, atomic=True)
    _check(got, ref, 1e-5, "atomic")
    monkeypatch.setattr(TL, "needs_int64", lambda *t: True)
    got, _ = _partials(problem, x, dy, cfg)
    _check(got, ref, 1e-5, "int64")


def test_plan_covers_images_and_pixels():
    """plan(): image slices x pixel slices cover the N images and the OH x OW pixels
    exactly (equal slices, whole tiles), stay within the cap, and make no more programs
    than wanted (PER_SM x SMs, or one a channel block); applies() declines what the
    kernel cannot do."""
    problem = _problem(8, 1, (40, 12), 1, 1, n=5)
    pixels = 40 * 12
    for tp, bc, per_sm in ((8, 4, 2), (64, 16, 8), (32, 8, 4)):
        cfg = dict(TP=tp, BC=bc, PER_SM=per_sm)
        blocks = -(-8 // bc)
        for cap, sms in ((1, 132), (2, 132), (7, 132), (65535, 132), (65535, 1), (65535, 3)):
            ips, img, pps, pix = TL.plan(problem, cfg, cap, sms)
            assert img * pix <= cap
            assert img * ips >= 5 and (img - 1) * ips < 5
            assert pps % tp == 0 and pix * pps >= pixels and (pix - 1) * pps < pixels
            assert blocks * img * pix <= max(blocks, per_sm * sms)
    x_desc = tridnn.TensorDescriptor.packed((1, 8, 9, 9), "float32", TensorFormat.NCHW)
    five = ConvProblem.forward(x_desc, tridnn.FilterDescriptor((8, 1, 5, 5)),
                               tridnn.ConvolutionDescriptor(padding=2, groups=8))
    grouped = ConvProblem.forward(x_desc, tridnn.FilterDescriptor((8, 2, 3, 3)),
                                  tridnn.ConvolutionDescriptor(padding=1, groups=4))
    assert not TL.applies(five) and not TL.applies(grouped)


def test_gpu_configs_and_determinism(rng):
    """Each GPU config once, on a tiny problem (tiles mostly masked), against the reference;
    a rerun of the first is bitwise equal (fixed slots, fixed order)."""
    cfgs = TL.candidates(_problem(64, 1, (8, 8), 1, 1), GPU, 4096, 132)
    assert len(cfgs) == len(TL.GPU_CONFIGS) and all(cf["KIND"] == "tiles" for cf in cfgs)
    c, hw = 5, (6, 7)
    problem = _problem(c, 1, hw, 2, 1)
    x, dy, ref = _operands(rng, problem, c, 1, hw, 2, 1, 1, torch.float32, "NHWC")
    for i, cfg in enumerate(cfgs):
        got, part = _partials(problem, x, dy, cfg, sms=132)
        _check(got, ref, 1e-5, cfg)
        if i == 0:
            _, again = _partials(problem, x, dy, cfg, sms=132)
            assert torch.equal(part, again)


@pytest.mark.parametrize("algo", FILTER, ids=lambda a: a.name)
def test_public_api(algo, rng, monkeypatch):
    """The tiles as the only candidate of the depthwise filter tuner (the walker's
    check_public_api: poisoned and blended dw, two layouts and dtypes, strides 1 and 2)."""
    check_public_api(algo, rng, monkeypatch, TL, "launch_tiles", TL.configs(CPU, 8))


def test_offered_on_small_maps_only(monkeypatch):
    """The GPU list offers the tiles (last) for output maps of at most TILES_MAX_PIXELS
    pixels, at strides 1 and 2, and not on a bigger map; 0 turns them off."""
    monkeypatch.setattr(D, "sm_count", lambda device: 132)
    for hw, stride, offered in (((14, 14), 1, True), ((14, 14), 2, True), ((28, 28), 1, True),
                                ((56, 56), 1, False), ((56, 56), 2, True)):
        kinds = [cf.get("KIND") for cf in D.wgrad3_candidates(_problem(96, 1, hw, stride, 1), GPU, 64, False, 4096)]
        assert ("tiles" in kinds) == offered, (hw, stride)
        if offered:
            assert kinds[-1] == "tiles" and kinds[0] is None
    monkeypatch.setattr(D, "TILES_MAX_PIXELS", 0)
    kinds = [cf.get("KIND") for cf in D.wgrad3_candidates(_problem(96, 1, (7, 7), 1, 1), GPU, 64, False, 4096)]
    assert "tiles" not in kinds


def test_gpu_configs_compile_vectorized_without_spills():
    """Every GPU config compiled for sm_90 offline (bf16, packed NHWC as Triton specializes
    it: channel stride and multiplier 1, sizes, strides and pointers multiples of 16;
    ATOMIC for the first too): no local memory (spills), and the tiles load 8 or 16 bytes
    at a time, never one element (a lost vectorization would multiply the loads by 4-8)."""
    multiples = ["x_ptr", "dy_ptr", "part_ptr", "K", "xs_n", "xs_h", "xs_w", "dys_n", "dys_h", "dys_w"]
    cases = [(cfg, False) for cfg in TL.GPU_CONFIGS] + [(TL.GPU_CONFIGS[0], True)]
    specs = [["tridnn.cuda.conv_depthwise_wgrad_tiles", "dw3_wgrad_tiles_kernel",
              {"x_ptr": "*bf16", "dy_ptr": "*bf16", "part_ptr": "*fp32"},
              dict(TP=tp, BC=bc, ATOMIC=atomic, INT64=False, Kg=1, xs_c=1, dys_k=1), warps, None, multiples]
             for (tp, bc, warps, _), atomic in cases]
    for spec, facts in zip(specs, compile_triton_without_local_memory(specs)):
        loads = re.findall(r"\bLDG\.E(?:\.(\w+))?", facts["sass"])
        assert loads and set(loads) <= {"64", "128"}, (spec[3], spec[4], sorted(set(loads)))
