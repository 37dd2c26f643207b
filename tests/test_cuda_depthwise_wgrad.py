"""conv_depthwise_wgrad's row walker (depthwise 3x3 backward filter) against the float64 reference.

Under the interpreter (tiny shapes; interpreter tiles are 4-8 wide, so H, W and C cross
tile tails): the kernel's partial slots summed in float64 against
reference.conv_backward_filter for stride 1 and 2, paddings 0/1/2, odd sizes, NHWC, NCHW
and a strided view, float32 and float16, slots capped (taller strips, image groups),
ATOMIC and the 64-bit index path; then through the public API (ALGO_0 and ALGO_1, the
walker as the tuner's only candidate: alpha/beta, a NaN-poisoned dw); every GPU config
of the candidate list once; determinism (bitwise equal reruns).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.types import TensorFormat  # noqa: E402

import test_cuda_conv as T  # noqa: E402  (run_case: one algorithm through the public API vs the reference)
from tridnn.cuda import conv_depthwise_backward as D  # noqa: E402
from tridnn.cuda import conv_depthwise_wgrad as W  # noqa: E402
from tridnn.cuda.common import Tuner  # noqa: E402

CPU = torch.device("cpu")
GPU = torch.device("cuda")  # the GPU candidate list, also run under the interpreter
FILTER = [registry.by_enum("conv", "bwd_filter", "triton", tridnn.ConvBwdFilterAlgo[a]) for a in ("ALGO_0", "ALGO_1")]

# (C, (H, W), stride, pad): tails in every direction, pads 0-2, stride 2 with odd and even sizes
CASES = [(5, (7, 6), 1, 1), (6, (9, 7), 2, 1), (3, (5, 9), 1, 2), (6, (8, 7), 2, 0), (5, (6, 5), 1, 0),
         (4, (10, 11), 2, 2)]


@pytest.fixture(scope="module", autouse=True)
def _interpreter():
    tridnn.Handle(device="cpu", backend="triton")  # patches the interpreter (layer_utils)


def _problem(c, hw, stride, pad, n=2, dilation=1, k=None):
    p = T.P(c, k or c, hw, 3, stride, pad, dilation, c)
    x_desc = tridnn.TensorDescriptor.packed((n, c, *hw), "float32", TensorFormat.NCHW)
    w_desc = tridnn.FilterDescriptor((k or c, 1, 3, 3))
    return ConvProblem.forward(x_desc, w_desc, T.conv(p))


def _operands(rng, c, hw, stride, pad, n, dtype, layout):
    oh, ow = ((s + 2 * pad - 3) // stride + 1 for s in hw)
    x = rng.standard_normal((n, c, *hw))
    dy = rng.standard_normal((n, c, oh, ow))
    if dtype == torch.float16:  # the reference sees the rounded values
        x, dy = x.astype(np.float16).astype(np.float64), dy.astype(np.float16).astype(np.float64)
    ref = reference.conv_backward_filter(x, dy, (c, 1, 3, 3), stride, pad, None, 1, c)
    return in_layout(x, dtype, layout), in_layout(dy, dtype, layout), ref


def in_layout(a, dtype, layout):
    """A torch copy of the NCHW array ``a``: NCHW, NHWC, or "strided" (every other channel of
    a channels-last tensor twice as wide)."""
    t = torch.as_tensor(a, dtype=dtype)
    if layout == "NHWC":
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "strided":
        wide = torch.zeros((a.shape[0], 2 * a.shape[1], *a.shape[2:]), dtype=dtype)
        wide = wide.contiguous(memory_format=torch.channels_last)
        wide[:, ::2] = t
        return wide[:, ::2]
    return t.contiguous()


def _partials(problem, x, dy, cfg, cap=65535, atomic=False):
    """The walker's slots [slots, K, 9] (NaN-poisoned before, ATOMIC: zeroed), summed in float64."""
    c = problem.k
    fit = W.plan(problem, cfg, 65535 if atomic else cap, cfg.get("SMS", 4))
    part = torch.zeros((1, c, 9)) if atomic else torch.full((fit[-1], c, 9), float("nan"))
    used = W.launch_rows(problem, x, dy, part, atomic, cfg, cap)
    assert used == (1 if atomic else fit[-1]) and used <= cap
    return part[:used].double().sum(0).reshape(c, 1, 3, 3).numpy(), part


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("layout,dtype", [("NHWC", torch.float32), ("NCHW", torch.float16),
                                          ("strided", torch.float32)], ids=["nhwc32", "nchw16", "strided32"])
def test_walker_vs_reference(case, layout, dtype, rng):
    c, hw, stride, pad = case
    problem = _problem(c, hw, stride, pad)
    assert W.applies(problem)
    x, dy, ref = _operands(rng, c, hw, stride, pad, 2, dtype, layout)
    tol = 1e-5 if dtype == torch.float32 else 2e-3  # float16 operands: float32 accumulation of exact products
    for cfg in W.configs(CPU, c):
        got, _ = _partials(problem, x, dy, cfg)
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max(), err_msg=str(cfg))


@pytest.mark.parametrize("case", CASES[:2], ids=str)
def test_caps_atomic_int64(case, rng, monkeypatch):
    """Slots capped at 2 and 3 (taller strips, then image groups), ATOMIC into one slot,
    and the 64-bit offsets (forced: the tensors would not fit a test)."""
    c, hw, stride, pad = case
    problem = _problem(c, hw, stride, pad, n=3)
    x, dy, ref = _operands(rng, c, hw, stride, pad, 3, torch.float32, "NHWC")
    cfg = W.configs(CPU, c)[0]
    for cap in (2, 3):
        got, _ = _partials(problem, x, dy, cfg, cap=cap)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    got, _ = _partials(problem, x, dy, cfg, atomic=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    monkeypatch.setattr(W, "needs_int64", lambda *t: True)
    got, _ = _partials(problem, x, dy, cfg)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_plan_and_applies():
    """plan() keeps the slots within the cap (None when not even one slice per column strip
    fits), its equal slices cover the N x OH rows, and the programs fill PER_SM x SMs at
    most; applies() declines what the walker cannot do."""
    problem = _problem(8, (40, 12), 1, 1, n=4)
    cfg = dict(BW=8, BC=8, num_warps=4, PER_SM=4)
    for cap, sms in ((2, 132), (5, 132), (16, 132), (65535, 132), (65535, 3), (65535, 1)):
        bw, rps, slices, n_cols, slots = W.plan(problem, cfg, cap, sms)
        assert slots <= cap and slots == slices * n_cols and n_cols * bw >= 12 and (n_cols - 1) * bw < 12
        assert slices * rps >= 4 * 40 and (slices - 1) * rps < 4 * 40
        assert slots <= max(n_cols, 4 * sms)
    assert W.plan(problem, cfg, 1, 132) is None  # 2 column strips cannot share one slot
    assert not W.applies(_problem(8, (9, 9), 1, 2, dilation=2))
    assert not W.applies(_problem(8, (9, 9), 3, 1))
    assert not W.applies(_problem(4, (9, 9), 1, 1, k=8))  # multiplier 2


def _gpu_configs(stride):
    return W.candidates(_problem(64, (8, 8), stride, 1, n=2), GPU, 4096, 132)


def check_public_api(algo, rng, monkeypatch, module, launcher, configs):
    """Each of ``configs`` as the only candidate of the depthwise filter tuner, through the
    public API: dw poisoned (beta 0) and alpha/beta blended, float32 NHWC and float16 NCHW,
    stride 1 and 2, an asymmetric padding; ``module.launcher`` really ran each time."""
    calls = []
    real = getattr(module, launcher)
    monkeypatch.setattr(module, launcher, lambda *a: calls.append(a) or real(*a))
    for cfg in configs:
        monkeypatch.setattr(D, "wgrad3_candidates", lambda *a: [dict(cfg, slices=1)])
        monkeypatch.setattr(D, "_wgrad_tuner", Tuner(tolerance=3e-3))
        for p in (T.P(5, 5, (7, 6), 3, 1, 1, 1, 5), T.P(6, 6, (9, 7), 3, 2, 1, 1, 6)):
            assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng, n=2, as_torch=True) is None
            assert T.run_case("bwd_filter", algo, p, "float16", "NCHW", rng, n=2, alpha=2.0, beta=0.5,
                              as_torch=True) is None
        p = T.P(6, 6, (8, 7), 3, 2, 1, 1, 6)
        assert T.run_case("bwd_filter", algo, p, "float32", "NHWC", rng, n=1, as_torch=True, pad_post=0) is None
    assert len(calls) == len(configs) * 5


@pytest.mark.parametrize("algo", FILTER, ids=lambda a: a.name)
def test_public_api(algo, rng, monkeypatch):
    """The walker as the only candidate of the depthwise filter tuner (check_public_api)."""
    check_public_api(algo, rng, monkeypatch, W, "launch_rows", W.configs(CPU, 8))


def test_gpu_configs_and_determinism(rng):
    """Each GPU config of the candidate lists (AHEAD 1/2, unrolled loops, 4 and 8 elements a
    thread, 1-2 waves) on a tiny problem of its stride (tiles mostly masked), against the
    reference; a rerun of the first is bitwise equal (fixed slots, fixed order)."""
    for stride, (c, hw) in ((1, (5, (6, 7))), (2, (6, (7, 6)))):
        cfgs = _gpu_configs(stride)
        assert len(cfgs) >= 4 and all(cf["KIND"] == "rows" for cf in cfgs)
        problem = _problem(c, hw, stride, 1)
        x, dy, ref = _operands(rng, c, hw, stride, 1, 2, torch.float32, "NHWC")
        for i, cfg in enumerate(cfgs):
            got, part = _partials(problem, x, dy, cfg)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max(), err_msg=str(cfg))
            if i == 0:
                _, again = _partials(problem, x, dy, cfg)
                assert torch.equal(part, again)


def test_candidates_follow_the_existing_first():
    """On the GPU list the walker's configs come after the existing kernels' (the first
    stays the tuner's reference); they appear only where the walker applies."""
    import unittest.mock as um
    with um.patch.object(D, "sm_count", lambda device: 132):
        problem = _problem(64, (8, 8), 1, 1)
        cands = D.wgrad3_candidates(problem, GPU, 64, False, 4096)
        kinds = [c.get("KIND") for c in cands]
        assert kinds[0] is None and "rows" in kinds and kinds.index("rows") > 0
        rest = kinds[kinds.index("rows"):]  # the walker's, then (a small map) the pixel tiles'
        assert rest == sorted(rest, key=("rows", "tiles").index)
        dil = _problem(64, (9, 9), 1, 2, dilation=2)
        assert "rows" not in [c.get("KIND") for c in D.wgrad3_candidates(dil, GPU, 64, False, 4096)]


def test_walker_offered_where_it_measured_faster():
    """The GPU list offers the walker for stride 1 with at least 64 channels only (the
    H200's sweep in D.walker_pays): not for stride 2, not for 32 channels; the walker
    itself applies to all three."""
    import unittest.mock as um
    with um.patch.object(D, "sm_count", lambda device: 132):
        for c, stride, offered in ((64, 1, True), (144, 1, True), (144, 2, False), (32, 1, False)):
            problem = _problem(c, (12, 12), stride, 1)
            assert W.applies(problem)
            kinds = [cf.get("KIND") for cf in D.wgrad3_candidates(problem, GPU, 64, False, 4096)]
            assert ("rows" in kinds) == offered, (c, stride)


def test_prefetch_shares_cover_the_row_segment():
    """The L2 prefetch (GPU only: inline PTX) splits a row segment of packed NHWC pixels
    [lo, hi) x K channels between the channel-block programs: the shares are 16-byte
    multiples, disjoint, in order and cover exactly the segment (nothing outside the tensor)."""
    import triton
    import triton.language as tl

    @triton.jit
    def shares(out_ptr, lo, hi, K, ESZ: tl.constexpr):
        off, nbytes = W._share(lo, hi, K, ESZ)
        tl.store(out_ptr + 2 * tl.program_id(0), off)
        tl.store(out_ptr + 2 * tl.program_id(0) + 1, nbytes)

    for lo, hi, k, esz, blocks in ((0, 7, 144, 2, 9), (3, 20, 32, 2, 1), (0, 1, 960, 2, 15), (5, 5, 64, 2, 2),
                                   (0, 9, 8, 4, 3), (1, 4, 16, 2, 7)):
        out = torch.zeros(2 * blocks, dtype=torch.int64)
        shares[(blocks,)](out, lo, hi, k, ESZ=esz)
        pos = 0
        for b in range(blocks):
            off, nbytes = int(out[2 * b]) * esz, int(out[2 * b + 1])
            assert nbytes % 16 == 0 and nbytes >= 0
            if nbytes:
                assert off == pos, (lo, hi, k, b)
                pos += nbytes
        assert pos == max(hi - lo, 0) * k * esz


def test_gpu_list_prefetches():
    """The GPU list offers configs with and without the L2 prefetch (PF), for both strides;
    off the GPU the prefetch never runs (prefetch_ok)."""
    for stride in (1, 2):
        pfs = {c["PF"] for c in W.configs(GPU, 144, stride)}
        assert 0 in pfs and max(pfs) > 0
    x = torch.zeros((1, 16, 4, 4)).contiguous(memory_format=torch.channels_last)
    assert not W.prefetch_ok(x, x, 16, 2)


def test_resident_programs(monkeypatch):
    """The GPU launch plans one wave from the compiled kernel's registers: 256 a warp at a
    time of 64 K, at most 64 warps and 32 programs; no count (an exception) keeps the config's estimate."""
    class Compiled:
        def __init__(self, regs):
            self.n_regs = regs

        def _init_handles(self):
            pass

    class Kernel:
        regs = 190

        def warmup(self, *args, grid, **kwargs):
            if self.regs is None:
                raise RuntimeError("no binary")
            return Compiled(self.regs)
    kernel = Kernel()
    monkeypatch.setattr(W, "dw3_wgrad_rows_kernel", kernel)
    monkeypatch.setattr(W, "_REGS", {})
    x = torch.zeros(4)
    for regs, warps, want in ((190, 2, 5), (168, 2, 6), (128, 4, 4), (104, 4, 4), (255, 4, 2), (32, 1, 32),
                              (40, 8, 6)):
        kernel.regs = regs
        assert W.resident((x, x), dict(S=1, R=regs), warps, CPU) == want, (regs, warps)
    kernel.regs = None
    assert W.resident((x, x), dict(S=2), 2, CPU) is None


@pytest.mark.parametrize("c, hw, stride", [(32, 112, 1), (384, 14, 1), (960, 7, 1), (576, 14, 2)])
def test_get_ranks_the_deterministic_filter_gradient_first(c, hw, stride):
    """MobileNetV2's depthwise filter gradients, bf16 NHWC batch 64, on an H100 (2026-12-06,
    bench_gpu_conv --algos all): ALGO_1 (per-slot partials, then the finish) beat ALGO_0
    (atomic adds) on all ten layers, 1.04-1.6x; get, which runs nothing, ranks ALGO_1 first."""
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    xd = tridnn.TensorDescriptor.nhwc(64, c, hw * stride, hw * stride, "bfloat16")
    wd = tridnn.FilterDescriptor((c, 1, 3, 3), "bfloat16", tridnn.TensorFormat.NHWC)
    cd = tridnn.ConvolutionDescriptor(padding=1, stride=stride, groups=c)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    names = [r.algo.name for r in tridnn.get_convolution_backward_filter_algorithm(h, xd, yd, cd, wd)]
    assert names.index("ALGO_1") < names.index("ALGO_0"), names
    assert names[0] == "ALGO_1", names
