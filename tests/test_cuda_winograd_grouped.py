"""The fused WINOGRAD forward on grouped half-precision problems, config by config.

Why: the GPU fuzz (`fuzz_gpu.py --seed 1 --repeats 3 --tuning alternate`, H100,
2026-12-06) found WINOGRAD's result wrong on three problems of one template: bfloat16,
NCHW, CONVOLUTION mode, FMA math, 8 -> 12 channels in 4 groups, 3x3 pad 1, 7x7 and 7x5
maps (max error 0.1-0.46, relative L2 0.07-0.16, against tolerances 0.03 / 0.008). On
the first call, so not the fast path. The interpreter gave the exact answer with every
tile config.

The GPU cases below launch each of the GPU tuner's configs directly and vary one factor at
a time (groups, mode, dtype, pipelining, warps). On the H100 (2026-12-06) only the 32x32
tile at 8 warps failed, and only for bfloat16 in CONVOLUTION mode, grouped or not: the
first column of each 2x2 output tile was wrong. Triton lays that config's MMAs out as
warpsPerCTA [8, 1] over 32 rows (each row computed by four warps), so the tuner no longer
offers it (conv_winograd.GPU_CONFIGS). The CPU cases run the same launches under the
interpreter (tiny: CI).
"""
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.cuda import conv_winograd  # noqa: E402

TORCH_DTYPE = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# the GPU tuner's configs, BLOCK_K 32 for half types, and one without software pipelining
GPU_CONFIGS = list(conv_winograd.GPU_CONFIGS) + [(32, 32, 4, 1)]


def launch_once(device, dtype, groups, mode, cfg, n=3, c=8, k=12, hw=(7, 7), seed=0, layout="NCHW",
                block_k=None, normal=False):
    """(y, the float64 reference) of one direct launch of the fused kernel with launch config
    cfg = (BLOCK_M, BLOCK_N, num_warps, num_stages), y NaN-poisoned first. Integer data
    (normal: Gaussian instead). Also benchmarks/diag_winograd_grouped.py's launch."""
    rng = np.random.default_rng(seed)
    conv = tridnn.ConvolutionDescriptor(padding=1, groups=groups, mode=tridnn.ConvMode[mode.upper()],
                                        math_type=tridnn.MathType.FMA)
    xd = tridnn.TensorDescriptor.nchw(n, c, *hw, dtype)
    wd = tridnn.FilterDescriptor((k, c // groups, 3, 3), dtype)
    yd = xd.with_dims(conv.output_dims(xd, wd))
    if normal:
        x, w = (rng.standard_normal(d.dims).astype(np.float32) for d in (xd, wd))
    else:
        x, w = testing.fill(xd.dims, dtype, rng), testing.fill(wd.dims, dtype, rng)
    want = reference.conv_forward(x, w, stride=(1, 1), pad_pre=(1, 1), pad_post=(1, 1), dilation=(1, 1),
                                  groups=groups, mode=mode)
    tdt = TORCH_DTYPE[dtype]
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format  # (the kernel takes any strides)
    tx = torch.from_numpy(np.asarray(x, np.float32)).to(device, tdt).contiguous(memory_format=fmt)
    tw = torch.from_numpy(np.asarray(w, np.float32)).to(device, tdt).contiguous(memory_format=fmt)
    ty = torch.full(yd.dims, float("nan"), dtype=tdt, device=device).contiguous(memory_format=fmt)
    bm, bn, warps, stages = cfg
    if block_k is None:
        block_k = 16 if dtype == "float32" else 32  # (as the GPU tuner)
    launch_cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=block_k, num_warps=warps, num_stages=stages)
    conv_winograd.WinogradForward()._launch(ConvProblem("fwd", xd, wd, yd, conv), tx, tw, ty, 1.0, 0.0, None,
                                            launch_cfg)
    return ty.detach().cpu().double().numpy(), want


def _max_error(device, dtype, groups, mode, cfg, **problem):
    """Max |y - reference rounded once to dtype| of one direct launch (integer data, so
    every Winograd transform and product is exact in each dtype, and the float32 sums too:
    the answer is the reference rounded once)."""
    got, want = launch_once(device, dtype, groups, mode, cfg, **problem)
    assert not np.isnan(got).any(), "an output element was not written"
    return float(np.abs(got - testing.expected(want, dtype)).max())


@pytest.mark.parametrize("groups,mode", [(4, "convolution"), (1, "convolution"), (4, "cross_correlation")])
def test_interpreter_exact(groups, mode):
    assert _max_error("cpu", "bfloat16", groups, mode, (16, 16, 1, 1)) == 0.0
    assert _max_error("cpu", "float16", groups, mode, (32, 32, 1, 1), hw=(7, 5)) == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", GPU_CONFIGS, ids=["x".join(map(str, c)) for c in GPU_CONFIGS])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("groups,mode", [(4, "convolution"), (1, "convolution"), (4, "cross_correlation"),
                                         (1, "cross_correlation")], ids=["g4-conv", "g1-conv", "g4-xcorr", "g1-xcorr"])
def test_gpu_exact(groups, mode, dtype, cfg):
    c, k = (8, 12) if groups == 4 else (2, 3)  # g1: one group's channels alone
    errors = [_max_error("cuda", dtype, groups, mode, cfg, c=c, k=k, hw=hw, seed=seed)
              for seed, hw in enumerate(((7, 7), (7, 5), (9, 11)))]
    # and many programs, a full BLOCK_K of channels and a tail of one (Cg 33)
    errors.append(_max_error("cuda", dtype, groups, mode, cfg, n=2, c=33 * groups, k=40, hw=(20, 19), seed=3))
    assert max(errors) == 0.0, errors


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("groups,mode", [(4, "convolution"), (4, "cross_correlation")], ids=["g4-conv", "g4-xcorr"])
def test_gpu_exact_channels_last(groups, mode, dtype):
    """The same problems channels-last (the GPU record tests' depthwise WINOGRAD case, NHWC and
    cross-correlation, passed on the H100), with the tuner's first GPU config."""
    errors = [_max_error("cuda", dtype, groups, mode, GPU_CONFIGS[0], hw=hw, layout="NHWC") for hw in ((7, 7), (7, 5))]
    assert max(errors) == 0.0, errors


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
