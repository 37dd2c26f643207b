"""Triton backward bias and the fused conv + bias + activation, through the public API.

Run on the CPU through Triton's interpreter (Handle(device="cpu", backend="triton"))
on tiny shapes, against the float64 references; outputs are NaN-poisoned so an
unwritten element fails, and beta == 0 must not read them.
"""
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.descriptors.activation import ActivationDescriptor, ActivationMode  # noqa: E402
from tridnn.errors import BadParamError, NotSupportedError  # noqa: E402

import test_cuda_conv as T  # noqa: E402  (run_case: one algorithm through the public API vs the reference)


def _handle():
    return tridnn.Handle(device="cpu", backend="triton", find_cache=None)


def _np(t):
    t = t.detach().cpu()
    return t.float().numpy().astype(np.float64) if t.dtype == torch.bfloat16 else t.numpy().astype(np.float64)


# -- backward bias -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout,dims", [("NCHW", (3, 5, 4, 6)), ("NHWC", (3, 5, 4, 6)), ("strided", (3, 5, 4, 6)),
                                         ("NHWC", (2, 20, 7)), ("NCHW", (2, 3, 2, 3, 4))],
                         ids=["nchw", "nhwc", "strided", "1d", "3d"])
def test_backward_bias_matches_reference(dtype, layout, dims, rng):
    dy_desc, dy = testing.make_tensor(dims, dtype, layout, rng, testing.fill(dims, dtype, rng))
    db_dims = (1, dims[1]) + (1,) * (len(dims) - 2)
    db_desc, db = testing.make_tensor(db_dims, dtype, "NCHW", rng)
    want = np.asarray(dy, np.float64).sum(axis=(0,) + tuple(range(2, len(dims)))).reshape(db_dims)
    handle = _handle()
    testing.poison(db)  # beta == 0: db must not be read
    tridnn.convolution_backward_bias(handle, 1.0, dy_desc, dy, 0.0, db_desc, db)
    testing.check_result(db, want, dtype, True, name="db")
    prior = testing.fill(db_dims, dtype, rng)
    db[...] = prior
    tridnn.convolution_backward_bias(handle, 2.0, dy_desc, dy, -0.5, db_desc, db)
    testing.check_result(db, want, dtype, True, 2.0, -0.5, prior, name="db alpha/beta")


def test_backward_bias_long_rows_split_into_slices(rng):
    """More rows than one slice: the partials are summed across slices."""
    dims = (4, 3, 16, 17)
    dy_desc, dy = testing.make_tensor(dims, "float32", "NHWC", rng, testing.fill(dims, "float32", rng))
    db_desc = tridnn.TensorDescriptor.nchw(1, 3, 1, 1)
    db = torch.full((1, 3, 1, 1), float("nan"))
    tridnn.convolution_backward_bias(_handle(), 1.0, dy_desc, dy, 0.0, db_desc, db)
    want = np.asarray(dy, np.float64).sum(axis=(0, 2, 3))
    assert np.array_equal(_np(db).reshape(-1), want)


def test_backward_bias_errors_leave_db_untouched():
    handle = _handle()
    dy_desc = tridnn.TensorDescriptor.nchw(2, 4, 3, 3)
    db_desc = tridnn.TensorDescriptor.nchw(1, 4, 1, 1)
    dy = torch.ones(2, 4, 3, 3)
    db = torch.full((1, 4, 1, 1), 7.0)
    with pytest.raises(BadParamError, match="dtype"):
        tridnn.convolution_backward_bias(handle, 1.0, dy_desc, dy.half(), 0.0, db_desc, db)
    with pytest.raises(BadParamError, match="overlaps"):
        tridnn.convolution_backward_bias(handle, 1.0, dy_desc, dy, 0.0,
                                         tridnn.TensorDescriptor((1, 4, 1, 1), "float32", (36, 9, 3, 1)),
                                         dy[:1, :, :1, :1])
    with pytest.raises(BadParamError, match="db descriptor dims"):
        tridnn.convolution_backward_bias(handle, 1.0, dy_desc, dy, 0.0, tridnn.TensorDescriptor.nchw(1, 3, 1, 1),
                                         db)
    assert torch.equal(db, torch.full((1, 4, 1, 1), 7.0))


# -- the fused convolution + bias + activation ------------------------------------------------
FUSED = [("RELU", 0.0), ("CLIPPED_RELU", 1.5), ("SIGMOID", 0.0), ("TANH", 0.0), ("ELU", 0.7),
         ("SWISH", 0.0), ("GELU", 0.0), ("IDENTITY", 0.0)]


@pytest.mark.parametrize("act,coef", FUSED, ids=[a for a, _ in FUSED])
def test_fused_forward_through_the_api(act, coef, rng):
    """act(alpha1 * conv + alpha2 * z + bias) on the Triton backend equals reference.fused for
    every forward algorithm that applies."""
    from tridnn.algorithms import registry
    from tridnn.algorithms.problem import ConvProblem
    dtype = "float32"
    cd = tridnn.ConvolutionDescriptor(padding=1)
    x_vals = testing.fill((2, 6, 4, 5), dtype, rng)
    w_vals = testing.fill((8, 6, 3, 3), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), dtype, "NHWC", rng)
    z_vals = testing.fill(y_desc.dims, dtype, rng)
    z_desc, z = testing.make_tensor(y_desc.dims, dtype, "NCHW", rng, z_vals)
    b_desc, bias = testing.make_tensor((1, 8, 1, 1), dtype, "NCHW", rng, testing.fill((1, 8, 1, 1), dtype, rng))
    act_desc = ActivationDescriptor(ActivationMode[act], coef=coef, swish_beta=0.75)
    want = reference.fused.conv_bias_activation_forward(x_vals, w_vals, z_vals, bias, act_desc.mode, coef, 0.75,
                                                         alpha1=2.0, alpha2=0.5, stride=1, pad_pre=1)
    scale = np.abs(2.0 * reference.conv_forward(x_vals, w_vals, 1, 1) + 0.5 * z_vals).max()
    handle = _handle()
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    ran = []
    for algo in registry.algorithms("conv", "fwd", "triton"):
        if algo.not_applicable(problem) is not None:
            continue
        ws = np.empty(algo.workspace_size(problem), np.uint8)
        testing.poison(y)
        tridnn.convolution_bias_activation_forward(handle, 2.0, x_desc, x, w_desc, w, cd, algo.enum, ws, 0.5,
                                                   z_desc, z, b_desc, bias, act_desc, y_desc, y)
        testing.assert_all_written(y, algo.name)
        # transform methods (exact False) err in proportion to the pre-activation values
        # (up to ~100 here): float32's pointwise tolerance against their largest magnitude
        atol = 3e-5 if algo.exact else 2e-5 * scale
        np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=3e-5, atol=atol,
                                   err_msg=f"{algo.name} {act}")
        ran.append(algo.name)
    assert "IMPLICIT_GEMM" in ran, ran


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_fused_forward_in_place_residual_and_no_z(dtype, rng):
    """z may be y itself; alpha2 == 0 means z is not read (None)."""
    cd = tridnn.ConvolutionDescriptor(padding=1, stride=2)
    x_vals = testing.fill((1, 4, 6, 6), dtype, rng)
    w_vals = testing.fill((5, 4, 3, 3), dtype, rng)
    x = torch.from_numpy(x_vals)
    w = torch.from_numpy(w_vals)
    x_desc = tridnn.TensorDescriptor.nchw(1, 4, 6, 6, dtype)
    w_desc = tridnn.FilterDescriptor((5, 4, 3, 3), dtype)
    y_desc = x_desc.with_dims(cd.output_dims(x_desc, w_desc))
    b_desc = tridnn.TensorDescriptor.nchw(1, 5, 1, 1, dtype)
    bias = torch.from_numpy(testing.fill((1, 5, 1, 1), dtype, rng))
    relu = ActivationDescriptor("relu")
    handle = _handle()
    z_vals = testing.fill(y_desc.dims, dtype, rng)
    y = torch.from_numpy(z_vals.copy())
    tridnn.convolution_bias_activation_forward(handle, 1.0, x_desc, x, w_desc, w, cd, "IMPLICIT_GEMM", None, 1.0,
                                               y_desc, y, b_desc, bias, relu, y_desc, y)
    want = reference.fused.conv_bias_activation_forward(x_vals, w_vals, z_vals, bias.numpy(), relu.mode,
                                                         alpha2=1.0, stride=2, pad_pre=1)
    testing.check_result(y.numpy(), want, dtype, True, name="in-place residual")
    y = torch.full(y_desc.dims, float("nan"), dtype=y.dtype)
    tridnn.convolution_bias_activation_forward(handle, 1.0, x_desc, x, w_desc, w, cd, "IMPLICIT_GEMM", None, 0.0,
                                               None, None, b_desc, bias, relu, y_desc, y)
    want = reference.fused.conv_bias_activation_forward(x_vals, w_vals, None, bias.numpy(), relu.mode,
                                                         stride=2, pad_pre=1)
    testing.check_result(y.numpy(), want, dtype, True, name="no residual")


def test_fused_forward_bad_activation_is_not_supported():
    handle = _handle()
    cd = tridnn.ConvolutionDescriptor(padding=1)
    x_desc = tridnn.TensorDescriptor.nchw(1, 2, 3, 3)
    w_desc = tridnn.FilterDescriptor((2, 2, 3, 3))
    b_desc = tridnn.TensorDescriptor.nchw(1, 2, 1, 1)
    y = torch.full((1, 2, 3, 3), 7.0)
    with pytest.raises(NotSupportedError, match="cannot be fused"):
        tridnn.convolution_bias_activation_forward(handle, 1.0, x_desc, torch.ones(1, 2, 3, 3), w_desc,
                                                   torch.ones(2, 2, 3, 3), cd, "IMPLICIT_GEMM", None, 0.0, None,
                                                   None, b_desc, torch.ones(1, 2, 1, 1),
                                                   ActivationDescriptor("softplus"), x_desc, y)
    assert torch.equal(y, torch.full((1, 2, 3, 3), 7.0))


# -- the transform and staged algorithms, and the depthwise backward kernels ---------------------
NEW_FWD = ["GEMM", "FFT", "WINOGRAD", "WINOGRAD_NONFUSED"]


@pytest.mark.parametrize("name", NEW_FWD)
def test_new_forward_algorithms_convolution_mode_alpha_beta(name, rng):
    """CONVOLUTION mode (flipped filter), alpha/beta and a strided layout, 3x3 stride 1."""
    from tridnn.algorithms import registry
    algo = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo[name])
    p = T.P(5, 7, (5, 6), 3, 1, 1)
    assert T.run_case("fwd", algo, p, "float32", "strided", rng, alpha=1.5, beta=-0.5, as_torch=True,
                      mode=tridnn.ConvMode.CONVOLUTION) is None
    assert T.run_case("fwd", algo, p, "float16", "NHWC", rng, pad_post=(0, 2)) is None


def test_winograd_says_why_not(rng):
    from tridnn.algorithms import registry
    from tridnn.algorithms.problem import ConvProblem
    x_desc = tridnn.TensorDescriptor.nhwc(1, 4, 8, 8)
    w_desc = tridnn.FilterDescriptor((4, 4, 5, 5))
    cd = tridnn.ConvolutionDescriptor(padding=2)
    problem = ConvProblem.forward(x_desc, w_desc, cd)
    for name in ("WINOGRAD", "WINOGRAD_NONFUSED"):
        reason = registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo[name]).not_applicable(problem)
        assert reason and "3x3" in reason, reason
    strided = ConvProblem.forward(x_desc, tridnn.FilterDescriptor((4, 4, 3, 3)),
                                  tridnn.ConvolutionDescriptor(padding=1, stride=2))
    assert "stride" in registry.by_enum("conv", "fwd", "triton", tridnn.ConvFwdAlgo.WINOGRAD).not_applicable(strided)


def test_properties_are_truthful():
    """Transform methods round differently (exact False); atomics are non-deterministic."""
    from tridnn.algorithms import registry
    by = {(a.direction, a.name): a for d in ("fwd", "bwd_data", "bwd_filter")
          for a in registry.algorithms("conv", d, "triton")}
    for name in ("FFT", "WINOGRAD", "WINOGRAD_NONFUSED"):
        assert by[("fwd", name)].exact is False
    assert by[("fwd", "GEMM")].exact and by[("bwd_data", "ALGO_0")].deterministic
    assert not by[("bwd_filter", "ALGO_0")].deterministic and by[("bwd_filter", "ALGO_1")].deterministic
    assert {a.id for a in by.values()} >= {104, 105, 106, 107, 120}


DEPTHWISE = [dict(p=(8, 8, (6, 6), 3, 1, 1, 1, 8)), dict(p=(5, 10, (7, 6), 3, 2, 1, 1, 5)),
             dict(p=(6, 6, (9,), 5, 1, 4, 2, 6)), dict(p=(4, 4, (3, 4, 4), 3, 1, 1, 1, 4))]


@pytest.mark.parametrize("direction,algo_name", [("bwd_data", "ALGO_1"), ("bwd_filter", "ALGO_0"),
                                                 ("bwd_filter", "ALGO_1")])
@pytest.mark.parametrize("case", DEPTHWISE, ids=["2d", "mult2-stride2", "1d-dilated", "3d"])
def test_depthwise_backward(direction, algo_name, case, rng):
    from tridnn.algorithms import registry
    from tridnn.cuda import conv_depthwise_backward
    p = T.P(*case["p"])
    enum = (tridnn.ConvBwdDataAlgo if direction == "bwd_data" else tridnn.ConvBwdFilterAlgo)[algo_name]
    algo = registry.by_enum("conv", direction, "triton", enum)
    assert T.run_case(direction, algo, p, "float32", "NHWC", rng) is None
    assert T.run_case(direction, algo, p, "float16", "NCHW", rng, alpha=2.0, beta=0.5,
                      mode=tridnn.ConvMode.CONVOLUTION) is None
    from tridnn.algorithms.problem import ConvProblem
    cd = T.conv(p)
    x_desc = tridnn.TensorDescriptor.nchw(2, p["C"], *p["spatial"]) if len(p["spatial"]) == 2 else \
        tridnn.TensorDescriptor.packed((2, p["C"], *p["spatial"]), "float32")
    w_desc = tridnn.FilterDescriptor((p["K"], 1, *p["kernel"]))
    assert conv_depthwise_backward.routes_here(ConvProblem.forward(x_desc, w_desc, cd))


# -- real sizes on a GPU (pytest --gpu) -----------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_backward_bias_and_fused(dtype, rng):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tridnn.algorithms import registry
    from tridnn.algorithms.problem import ConvProblem
    h = tridnn.Handle(device="cuda", find_cache=None)
    tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    cl = torch.channels_last
    dy_desc = tridnn.TensorDescriptor.nhwc(8, 256, 28, 28, dtype)
    db_desc = tridnn.TensorDescriptor.nchw(1, 256, 1, 1, dtype)
    dy = torch.from_numpy(testing.fill(dy_desc.dims, "float32", rng)).to("cuda", tdt).contiguous(memory_format=cl)
    db = torch.full((1, 256, 1, 1), float("nan"), device="cuda", dtype=tdt)
    tridnn.convolution_backward_bias(h, 1.0, dy_desc, dy, 0.0, db_desc, db)
    want = dy.double().sum(dim=(0, 2, 3)).reshape(1, 256, 1, 1)
    testing.check_result(_np(db), want.cpu().numpy(), dtype, True, name="db")

    cd = tridnn.ConvolutionDescriptor(padding=1)
    x_desc = tridnn.TensorDescriptor.nhwc(4, 64, 28, 28, dtype)
    w_desc = tridnn.FilterDescriptor((96, 64, 3, 3), dtype, tridnn.TensorFormat.NHWC)
    y_desc = x_desc.with_dims(cd.output_dims(x_desc, w_desc))
    xv, wv = testing.fill(x_desc.dims, "float32", rng), testing.fill(w_desc.dims, "float32", rng)
    zv, bv = testing.fill(y_desc.dims, "float32", rng), testing.fill((1, 96, 1, 1), "float32", rng)
    dev = lambda a: torch.from_numpy(a).to("cuda", tdt).contiguous(memory_format=cl)
    x, w, z, bias = dev(xv), dev(wv), dev(zv), torch.from_numpy(bv).to("cuda", tdt)
    b_desc = tridnn.TensorDescriptor.nchw(1, 96, 1, 1, dtype)
    relu = ActivationDescriptor("relu")
    want = reference.fused.conv_bias_activation_forward(xv, wv, zv, bv, relu.mode, alpha2=0.5, pad_pre=1)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    for algo in registry.algorithms("conv", "fwd", "triton"):
        if algo.not_applicable(problem) is not None:
            continue
        y = torch.full(y_desc.dims, float("nan"), device="cuda", dtype=tdt).contiguous(memory_format=cl)
        ws = torch.empty(algo.workspace_size(problem), dtype=torch.uint8, device="cuda")
        tridnn.convolution_bias_activation_forward(h, 1.0, x_desc, x, w_desc, w, cd, algo.enum, ws, 0.5, y_desc, z,
                                                   b_desc, bias, relu, y_desc, y)
        got = _np(y)
        testing.assert_all_written(got, algo.name)
        if algo.exact and dtype == "float32":
            np.testing.assert_array_equal(got, want, err_msg=algo.name)
        else:
            rel = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
            assert rel < {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype], (algo.name, rel)


def test_fused_forward_rejects_overlapping_bias_or_partial_z():
    """The NumPy path's aliasing rules hold for torch tensors on the Triton backend too."""
    handle = _handle()
    cd = tridnn.ConvolutionDescriptor(padding=1)
    x_desc = tridnn.TensorDescriptor.nchw(1, 2, 3, 3)
    w_desc = tridnn.FilterDescriptor((2, 2, 3, 3))
    b_desc = tridnn.TensorDescriptor.nchw(1, 2, 1, 1)
    x, w = torch.ones(1, 2, 3, 3), torch.ones(2, 2, 3, 3)
    relu = ActivationDescriptor("relu")
    buf = torch.full((40,), 7.0)
    y = buf[:18].view(1, 2, 3, 3)
    with pytest.raises(BadParamError, match="bias"):
        tridnn.convolution_bias_activation_forward(handle, 1.0, x_desc, x, w_desc, w, cd, "IMPLICIT_GEMM", None, 0.0,
                                                   None, None, b_desc, buf[4:6].view(1, 2, 1, 1), relu, x_desc, y)
    with pytest.raises(BadParamError, match="partially overlaps"):
        tridnn.convolution_bias_activation_forward(handle, 1.0, x_desc, x, w_desc, w, cd, "IMPLICIT_GEMM", None, 1.0,
                                                   x_desc, buf[9:27].view(1, 2, 3, 3), b_desc, torch.zeros(1, 2, 1, 1),
                                                   relu, x_desc, y)
    assert torch.equal(buf, torch.full((40,), 7.0)), "y was written before the error"


# -- float32 math types --------------------------------------------------------------------
def test_float32_math_types_pick_the_dot_precision():
    """DEFAULT float32 runs three tf32 products (float32-level error on tensor cores),
    TENSOR_OP plain tf32, FMA strict IEEE on CUDA cores; half types ignore the choice."""
    from tridnn.cuda.geometry import input_precision
    want = {tridnn.MathType.DEFAULT: "tf32x3", tridnn.MathType.TENSOR_OP: "tf32",
            tridnn.MathType.TENSOR_OP_ALLOW_CONVERSION: "tf32", tridnn.MathType.FMA: "ieee"}
    dt = {"float32": tridnn.DataType.FLOAT, "float16": tridnn.DataType.HALF, "bfloat16": tridnn.DataType.BFLOAT16}
    for dtype in ("float32", "float16", "bfloat16"):
        for math_type, prec in want.items():
            got = input_precision(_problem_of(T.P(4, 4, (5, 5), 3, 1, 1), dt[dtype], math_type))
            assert got == (prec if dtype == "float32" else "ieee"), (dtype, math_type, got)


@pytest.mark.parametrize("math_type", [tridnn.MathType.DEFAULT, tridnn.MathType.FMA, tridnn.MathType.TENSOR_OP])
def test_float32_math_types_reach_the_kernel_and_match_the_reference(math_type, rng, monkeypatch):
    """The precision arrives as the kernels' PREC constant, and every forward algorithm
    stays within float32 tolerance of the float64 reference (the interpreter computes
    float32 products whatever PREC says, so this checks the plumbing and the index math).
    The FFT methods' spectral GEMM never runs plain tf32 (conv_fft.spectral_precision)."""
    from tridnn.cuda import common, spectral_gemm
    seen = []
    real = common.launch

    def spy(kernel, grid, args, consts, *rest, **kw):
        if "PREC" in consts:
            spectral = kernel is spectral_gemm.spectral_gemm_kernel
            seen.append(consts["PREC"] if not spectral or consts["PREC"] != "tf32x3" else "spectral tf32x3")
        return real(kernel, grid, args, consts, *rest, **kw)
    monkeypatch.setattr(common, "launch", spy)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("tridnn.cuda.") and getattr(mod, "launch", None) is real:
            monkeypatch.setattr(mod, "launch", spy)
    p = T.P(16, 16, (4, 5), 3, 1, 1)
    for algo in T.ALGOS["fwd"]:
        T.run_case("fwd", algo, p, "float32", "NHWC", rng, as_torch=True, math=math_type)
    want = {tridnn.MathType.DEFAULT: {"tf32x3", "spectral tf32x3"}, tridnn.MathType.FMA: {"ieee"},
            tridnn.MathType.TENSOR_OP: {"tf32", "spectral tf32x3"}}
    assert seen and set(seen) == want[math_type], seen
    assert math_type == tridnn.MathType.FMA or "spectral tf32x3" in seen, "FFT's spectral GEMM ran"


# -- GEMM (im2col) forward -----------------------------------------------------------------
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", [
    T.P(3, 8, (5, 75), 7, 2, 3),            # first-layer style: R = 147 padded to 160, three pixel runs a row
    T.P(4, 6, (3, 40), (3, 5), (1, 2), (1, 2), (2, 1), 2),  # groups, dilation, non-square filter
    T.P(2, 4, (3, 4, 35), 3, 1, 1),         # 3-D: depth taps from the row index
], ids=["conv1-like", "grouped-dilated", "3d"])
def test_gemm_forward_rows_of_several_pixel_runs(case, layout, rng):
    """im2col splits each output row into runs of BLOCK_M pixels (16 under the
    interpreter) and pads col's rows to R_PAD; both edges checked against float64."""
    from tridnn.cuda import conv_gemm
    algo = next(a for a in T.ALGOS["fwd"] if a.enum == tridnn.ConvFwdAlgo.GEMM)
    for dtype in ("float32", "float16"):
        assert T.run_case("fwd", algo, case, dtype, layout, rng) is None
    assert conv_gemm.padded_row(conv_gemm.geometry(_problem_of(case))) % conv_gemm.ROW_ALIGN == 0


def _problem_of(p, dtype=tridnn.DataType.FLOAT, math_type=tridnn.MathType.DEFAULT):
    """The forward ConvProblem of a T.P case, batch 2, NHWC."""
    from tridnn.algorithms.problem import ConvProblem
    x = tridnn.TensorDescriptor.packed((2, p["C"], *p["spatial"]), dtype, tridnn.TensorFormat.NHWC)
    w = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, tridnn.TensorFormat.NHWC)
    cd = T.conv(p, math=math_type)
    y = tridnn.TensorDescriptor.packed(cd.output_dims(x, w), dtype, tridnn.TensorFormat.NHWC)
    return ConvProblem("fwd", x, w, y, cd)


# -- the backward filter's finish pass ---------------------------------------------------------
def test_wgrad_finish_tiles_spread_small_filters(monkeypatch):
    """A large filter keeps 1024 entries a program and one slice a step; a small one with many
    slices (a depthwise K x 9, res2_1x1a's 64 x 64 over 264 slices) gets narrow blocks, at
    least two programs an SM, and a [SB, BLOCK] tile of slices a step."""
    from tridnn.cuda import conv_bwd_filter_implicit_gemm as wg
    monkeypatch.setattr(wg, "sm_count", lambda device: 132)
    gpu = torch.device("cuda")
    assert wg.finish_tile(512 * 512 * 9, 64, gpu) == (1024, 1)
    block, sb = wg.finish_tile(384 * 9, 200, gpu)
    assert block == 32 and sb == wg.FINISH_TILE // 32
    block, sb = wg.finish_tile(64 * 64, 264, gpu)
    assert wg.cdiv(64 * 64, block) >= 2 * 132 or block == 32
    assert block * sb <= wg.FINISH_TILE and sb > 1
    assert wg.finish_tile(384 * 9, 3, gpu)[1] == 4, "no more slice rows than the slices need"


@pytest.mark.parametrize("slices", [1, 7])
@pytest.mark.parametrize("mode", [tridnn.ConvMode.CONVOLUTION, tridnn.ConvMode.CROSS_CORRELATION])
def test_wgrad_finish_sums_every_slice(slices, mode, rng):
    """wgrad_finish over [slices, K, T, PC] partials (PC > Cg: padded channels), slices not a
    multiple of its step: alpha * sum + beta * dw, taps reversed in CONVOLUTION mode."""
    from tridnn.algorithms.problem import ConvProblem
    from tridnn.cuda import conv_bwd_filter_implicit_gemm as wg
    xd = tridnn.TensorDescriptor.nchw(2, 5, 6, 6, "float32")
    wd = tridnn.FilterDescriptor((3, 5, 3, 3), "float32")
    cd = tridnn.ConvolutionDescriptor(padding=1, mode=mode)
    problem = ConvProblem("bwd_filter", xd, wd, xd.with_dims(cd.output_dims(xd, wd)), cd)
    part = torch.from_numpy(rng.standard_normal((slices, 3, 9, 8))).float()
    dw = torch.from_numpy(rng.standard_normal((3, 5, 3, 3))).float()
    old = dw.clone()
    wg.finish(problem, part, dw, slices, 2.0, 0.5, part_channels=8)
    sums = part.double().sum(0)[..., :5].reshape(3, 3, 3, 5).permute(0, 3, 1, 2)  # [K, C, KH, KW]
    if mode == tridnn.ConvMode.CONVOLUTION:
        sums = sums.flip(2, 3)
    np.testing.assert_allclose(dw.numpy(), (2.0 * sums + 0.5 * old.double()).numpy(), rtol=1e-5, atol=1e-5)
