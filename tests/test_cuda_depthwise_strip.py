"""conv_depthwise_strip's prefetching row walker (depthwise 3x3 forward, stride 1 and 2)
against the float64 reference, through the public API (DIRECT), one launch config at a
time: the CPU config and every GPU candidate, under the interpreter on tiny shapes.

Cases: channel tails (C = 5, 6 in blocks of 4-128), H and W odd and smaller than the
tiles, paddings 0/1/2 (rows and columns outside the image on both sides), channel
multiplier 2, NHWC / NCHW / strided views, float32 and float16, alpha/beta and the
fused epilogue (bias, residual z, ReLU), NaN-poisoned outputs (run_case poisons y when
beta == 0). Each test checks that the strip kernel itself ran.

With TRIDNN_GPU_TESTS=1 the same tests run on the CUDA device (where the L2 prefetch is
the inline PTX); otherwise on the CPU through the interpreter (a masked load instead).
"""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402

import test_cuda_conv as T  # noqa: E402  (run_case: one algorithm through the public API vs the reference)
from test_cuda_depthwise import _epilogue_case  # noqa: E402  (the fused-epilogue case against float64)
from tridnn.cuda import conv_depthwise_strip as S  # noqa: E402
from tridnn.cuda import conv_direct  # noqa: E402
from tridnn.cuda.common import Tuner  # noqa: E402

ON_GPU = os.environ.get("TRIDNN_GPU_TESTS") == "1"
DEVICE = "cuda" if ON_GPU else "cpu"
GPU = torch.device("cuda")  # the GPU candidate lists, also run under the interpreter
DIRECT = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.DIRECT)

# (p, layout, dtype): stride 1 (the row walk) and stride 2 (the output-row walk)
S1 = [(T.P(5, 5, (7, 5), 3, 1, 1, 1, 5), "NHWC", "float32"),
      (T.P(6, 6, (5, 9), 3, 1, 0, 1, 6), "NCHW", "float16"),
      (T.P(5, 5, (6, 7), 3, 1, 2, 1, 5), "strided", "float32"),
      (T.P(4, 8, (5, 6), 3, 1, 1, 1, 4), "NHWC", "float16")]    # multiplier 2
S2 = [(T.P(5, 5, (7, 8), 3, 2, 1, 1, 5), "NHWC", "float32"),
      (T.P(6, 6, (9, 7), 3, 2, 0, 1, 6), "NCHW", "float16"),
      (T.P(5, 5, (8, 9), 3, 2, 2, 1, 5), "strided", "float32"),
      (T.P(3, 6, (7, 9), 3, 2, 1, 1, 3), "NHWC", "float16")]    # multiplier 2


def _problem(p, n=2):
    cd = T.conv(p)
    x_desc = tridnn.TensorDescriptor.packed((n, p["C"], *p["spatial"]), "float32", tridnn.TensorFormat.NCHW)
    w_desc = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]))
    return ConvProblem.forward(x_desc, w_desc, cd)


def _only(monkeypatch, cfg):
    """Every depthwise forward tuner offers just ``cfg``; returns the strip launches' log."""
    cfg = dict(cfg, KIND="strip")
    monkeypatch.setattr(conv_direct, "fwd_dw3_candidates", lambda *a: [cfg])
    monkeypatch.setattr(conv_direct, "dw2d_candidates", lambda *a: [cfg])
    monkeypatch.setattr(conv_direct.DirectForward, "tuner", Tuner())
    calls = []
    real = S.launch_strip
    monkeypatch.setattr(S, "launch_strip", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


CONFIGS = ([("cpu", 1, c) for c in S.configs(torch.device("cpu"), 128)]
           + [("gpu", 1, c) for c in S.configs(GPU, 128, 1)] + [("gpu", 2, c) for c in S.configs(GPU, 128, 2)])


def test_applies():
    assert S.applies(_problem(S1[0][0])) and S.applies(_problem(S2[0][0]))
    assert not S.applies(_problem(T.P(5, 5, (9, 7), 3, 1, 2, 2, 5)))           # dilation 2
    assert not S.applies(_problem(T.P(4, 4, (9, 8), (5, 3), (2, 3), (2, 1), 1, 4)))  # 5x3, unequal strides
    assert not S.applies(_problem(T.P(4, 8, (5, 6), 3, 1, 1, 1, 2)))           # two channels per group


@pytest.mark.parametrize("where,stride,cfg", CONFIGS, ids=str)
def test_strip_config(where, stride, cfg, rng, monkeypatch):
    """One launch config over the cases of its stride (the CPU config over both)."""
    calls = _only(monkeypatch, cfg)
    cases = (S1 + S2) if where == "cpu" else (S1 if stride == 1 else S2)
    for p, layout, dtype in cases:
        assert S.applies(_problem(p))
        assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=2, as_torch=True, device=DEVICE) is None, p
    p, layout, dtype = cases[-1]
    assert T.run_case("fwd", DIRECT, p, dtype, layout, rng, n=1, alpha=2.0, beta=0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION, device=DEVICE) is None, p
    assert len(calls) == len(cases) + 1


@pytest.mark.parametrize("stride", [1, 2])
def test_strip_epilogue(stride, rng, monkeypatch):
    """Bias, residual z, ReLU and alpha/beta fused into the strip kernel's stores."""
    calls = _only(monkeypatch, S.configs(torch.device("cpu"), 8)[0])
    _epilogue_case(rng, 6, stride, (7, 9))
    assert len(calls) == 1


def test_candidates_keep_the_existing_first():
    """The strip configs come after the existing ones (the tuner's reference stays first)."""
    s1 = conv_direct.fwd_dw3_candidates(GPU, 144)
    assert s1[0]["KIND"] == "rows" and [c for c in s1 if c["KIND"] == "strip"] == s1[-len(S.configs(GPU, 144)):]
    s2 = conv_direct.dw2d_candidates(GPU, _problem(T.P(144, 144, (8, 8), 3, 2, 1, 1, 144)))
    assert s2[0]["KIND"] == "taps" and s2[-1]["KIND"] == "strip"
    assert all(c["KIND"] != "strip" for c in conv_direct.dw2d_candidates(GPU, _problem(T.P(5, 5, (9, 7), 3, 1, 2, 2, 5))))
