"""The Triton convolutions against the float64 reference, through the public API.

In CI they run on the CPU through Triton's interpreter (Handle(device="cpu",
backend="triton")) on tiny shapes; with --gpu (TRIDNN_GPU_TESTS=1) the tests marked
gpu run the same algorithms at real sizes on a CUDA device. Integer fills make every
GEMM-type method exact; outputs are poisoned with NaN so unwritten elements fail.
"""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import tridnn  # noqa: E402
from tridnn import reference, testing  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.algorithms.problem import ConvProblem  # noqa: E402
from tridnn.errors import BadParamError, NotSupportedError  # noqa: E402

DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
ALGOS = {d: registry.algorithms("conv", d, "triton") for d in DIRECTIONS}
OUT = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}
API = {"fwd": tridnn.convolution_forward}
for _name, _d in (("convolution_backward_data", "bwd_data"), ("convolution_backward_filter", "bwd_filter")):
    if hasattr(tridnn, _name):
        API[_d] = getattr(tridnn, _name)


def conv(p, mode=tridnn.ConvMode.CROSS_CORRELATION, math=tridnn.MathType.DEFAULT, pad_post=None):
    return tridnn.ConvolutionDescriptor(padding=p["pad"], pad_post=pad_post, stride=p["stride"],
                                        dilation=p["dilation"], groups=p["groups"], mode=mode,
                                        nd=len(p["spatial"]), math_type=math)


def P(C, K, spatial, kernel, stride=1, pad=0, dilation=1, groups=1):
    nd = len(spatial)
    t = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd
    return dict(name=f"c{C}k{K}s{'x'.join(map(str, spatial))}f{'x'.join(map(str, t(kernel)))}"
                     f"st{t(stride)[0]}p{t(pad)[0]}d{t(dilation)[0]}g{groups}",
                C=C, K=K, spatial=tuple(spatial), kernel=t(kernel), stride=t(stride), pad=t(pad),
                dilation=t(dilation), groups=groups)


# Tiny problems that still cross every boundary: channel tails, strides, dilation,
# padding larger than the kernel, groups, depthwise, 1-D and 3-D, the flattened
# (C < 16) reduction and the channel-blocked one (C >= 16).
PROBLEMS = [
    P(8, 8, (5, 6), 3, 1, 1),
    P(3, 5, (7, 7), 3, 2, 1),               # first-layer style: flattened taps x channels
    P(20, 17, (4, 5), 3, 1, 1),             # channel tails past a 16-wide block
    P(4, 6, (7, 7), 3, 2, 2, 2),            # stride and dilation
    P(16, 8, (4, 4), 1, 1, 3),              # padding larger than the kernel
    P(8, 8, (6, 6), 3, 1, 1, 1, 8),         # depthwise
    P(8, 16, (5, 5), 3, 2, 1, 1, 4),        # grouped, channel multiplier 4
    P(32, 16, (3, 3), 3, 1, 1, 1, 2),       # grouped, 16 channels per group
    P(6, 4, (9,), 3, 2, 1),                 # 1-D
    P(4, 4, (3, 4, 4), 3, 1, 1),            # 3-D
]


def _handle(device, math=tridnn.MathType.DEFAULT):
    if device == "cpu":
        return tridnn.Handle(device="cpu", backend="triton", find_cache=None, math_type=math)
    return tridnn.Handle(device=device, find_cache=None, math_type=math)


def nhwc_problem(direction, p, n=2, dtype=tridnn.DataType.FLOAT, math=tridnn.MathType.DEFAULT, pad_post=None):
    """The ConvProblem of P-dict ``p`` with packed NHWC images (no data): for tests of
    applicability, workspace layouts and tile arithmetic."""
    cd = conv(p, math=math, pad_post=pad_post)
    x = tridnn.TensorDescriptor.nhwc(n, p["C"], *p["spatial"], dtype=dtype)
    w = tridnn.FilterDescriptor((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype=dtype)
    return ConvProblem(direction, x, w, x.with_dims(cd.output_dims(x, w)), cd)


def run_case(direction, algo, p, dtype, layout, rng, n=2, alpha=1.0, beta=0.0, device="cpu",
             mode=tridnn.ConvMode.CROSS_CORRELATION, as_torch=False, math=tridnn.MathType.DEFAULT,
             pad_post=None):
    """Runs one algorithm through the public API; returns a skip reason or None."""
    cd = conv(p, mode, math, pad_post)
    x_vals = testing.fill((n, p["C"], *p["spatial"]), dtype, rng)
    w_vals = testing.fill((p["K"], p["C"] // p["groups"], *p["kernel"]), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, layout, rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, layout, w_vals)
    y_dims = cd.output_dims(x_desc, w_desc)
    y_desc, y = testing.make_tensor(y_dims, dtype, layout, rng)
    y_vals = testing.fill(y_dims, dtype, rng)
    if direction != "fwd":
        y[...] = y_vals
    problem = ConvProblem(direction, x_desc, w_desc, y_desc, cd)
    reason = algo.not_applicable(problem)
    if reason is not None:
        return reason
    arrays = {"x": x, "w": w, "y": y}
    out = arrays[OUT[direction]]
    if beta == 0:
        testing.poison(out)
        prior = None
    else:
        prior = testing.fill(out.shape, dtype, rng)
        out[...] = prior
    before = {k: v.copy() for k, v in arrays.items() if k != OUT[direction]}
    handle = _handle(device, math)
    need = algo.workspace_size(problem)
    if device != "cpu" or as_torch:
        dev = "cpu" if device == "cpu" else device
        arrays = {k: _to_torch(v, dev) for k, v in arrays.items()}
        ws = torch.full((need,), 0xFF, dtype=torch.uint8, device=dev) if need else None
    else:
        ws = np.full(need, 0xFF, np.uint8) if need else None  # poisoned: every float in it reads NaN
    if direction == "fwd":
        API[direction](handle, alpha, x_desc, arrays["x"], w_desc, arrays["w"], cd, algo.enum, ws, beta,
                       y_desc, arrays["y"])
    elif direction == "bwd_data":
        API[direction](handle, alpha, w_desc, arrays["w"], y_desc, arrays["y"], cd, algo.enum, ws, beta,
                       x_desc, arrays["x"])
    else:
        API[direction](handle, alpha, x_desc, arrays["x"], y_desc, arrays["y"], cd, algo.enum, ws, beta,
                       w_desc, arrays["w"])
    got = arrays[OUT[direction]]
    if isinstance(got, torch.Tensor):
        got = _to_numpy(got, dtype)
    m = "convolution" if mode == tridnn.ConvMode.CONVOLUTION else "cross_correlation"
    args = (p["stride"], p["pad"], pad_post, p["dilation"], p["groups"], m)
    if direction == "fwd":
        ref = reference.conv_forward(x_vals, w_vals, *args)
    elif direction == "bwd_data":
        ref = reference.conv_backward_data(y_vals, w_vals, x_vals.shape, *args)
    else:
        ref = reference.conv_backward_filter(x_vals, y_vals, w_vals.shape, *args)
    exact = algo.exact and not (direction == "bwd_filter" and dtype in ("float16", "bfloat16"))
    testing.check_result(got, ref, dtype, exact, alpha, beta, prior, name=f"{algo.name} {direction}")
    if not (device != "cpu" or as_torch):
        for k, v in before.items():
            assert np.array_equal(arrays[k], v, equal_nan=True), f"input {k} was modified"
    return None


def _to_torch(arr, device):
    """A torch tensor with the same logical shape, strides and values as the NumPy view."""
    from tridnn.cuda.backend import to_tensor
    host = to_tensor(arr, torch.device("cpu"))
    if device == "cpu":
        return host
    out = torch.empty_strided(host.shape, host.stride(), dtype=host.dtype, device=device)
    out.copy_(host)
    return out


def _to_numpy(t, dtype):
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(testing.DataType.of(dtype).numpy)
    return t.numpy()


def skip_unless(reason):
    if reason is not None:
        pytest.skip(f"not applicable: {reason}")


def _ids(p):
    return p["name"]


def _algo_params(direction):
    return pytest.mark.parametrize("algo", ALGOS[direction], ids=lambda a: a.name)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_every_direction_has_triton_algorithms(direction):
    if direction not in API:
        pytest.skip(f"the {direction} API is not there yet")
    assert ALGOS[direction], f"no Triton {direction} convolution is registered"


# -- every algorithm x direction x problem, float32 NHWC (the interpreter is slow: tiny) --
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("p", PROBLEMS, ids=_ids)
def test_float32_nhwc(direction, p, rng):
    if direction not in API:
        pytest.skip(f"the {direction} API is not there yet")
    ran = 0
    for algo in ALGOS[direction]:
        if run_case(direction, algo, p, "float32", "NHWC", rng) is None:
            ran += 1
    if ran == 0:
        pytest.skip("no Triton algorithm applies")


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_bfloat16_under_the_interpreter(direction, rng):
    """bfloat16 through every algorithm on the CPU. Triton 3.6's interpreter multiplies
    bfloat16's uint16 bit patterns in tl.dot (results ~1e10, silently) unless layer_utils
    widens them: this fails without that patch."""
    if direction not in API:
        pytest.skip(f"the {direction} API is not there yet")
    p = P(6, 8, (5, 5), 3, 1, 1)
    ran = [algo.name for algo in ALGOS[direction]
           if run_case(direction, algo, p, "bfloat16", "NHWC", rng, alpha=2.0, beta=0.5, as_torch=True) is None]
    assert "IMPLICIT_GEMM" in ran or "ALGO_1" in ran, ran


@pytest.mark.parametrize("src", ["float32", "float64", "float16", "int32"])
def test_bfloat16_casts_round_to_nearest_even(src):
    """A kernel's cast to bfloat16 rounds to nearest even, as the GPU's cvt.rn does, and
    casts between bfloat16 and other types convert values: under the interpreter only with
    layer_utils' patch (Triton 3.6's interpreter dropped the low 16 bits, storing 131.5 as
    131 where a GPU stores 132, and took float64 and integer values for bfloat16 bit
    patterns: 3.0 became 2.8e-40). Ties, values just past them, overflow, subnormals,
    signed zeros; back to ``src`` from bfloat16."""
    import torch
    import triton
    import triton.language as tl
    from tridnn.cuda import layer_utils  # noqa: F401  (the interpreter patches)

    @triton.jit
    def cast_both_ways(x_ptr, y_ptr, z_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        y = tl.load(x_ptr + offs).to(tl.bfloat16)
        tl.store(y_ptr + offs, y)
        tl.store(z_ptr + offs, y.to(z_ptr.dtype.element_ty))

    values = [130.5, 131.5, 257.0, 259.0, 1.00390625, 1.01171875, -130.5, 129.75, -0.0, 0.0, 3.0, -7.0,
              3.39e38, -3.4e38, 1e-40, 65504.0]
    dt = getattr(torch, src)
    if src == "float16":
        values = [v for v in values if abs(v) <= 65504 and (v == 0 or abs(v) > 1e-4)]
    elif src == "int32":
        values = [float(int(v)) for v in values if abs(v) < 2 ** 31]
    x = torch.tensor(values, dtype=torch.float64).to(dt)
    n = triton.next_power_of_2(len(values))
    x = torch.cat([x, torch.zeros(n - len(values), dtype=dt)])
    device = "cuda" if os.environ.get("TRIDNN_GPU_TESTS") == "1" else "cpu"
    x = x.to(device)
    y, z = torch.empty(n, dtype=torch.bfloat16, device=device), torch.empty(n, dtype=dt, device=device)
    cast_both_ways[(1,)](x, y, z, N=n)
    want = x.double().to(torch.bfloat16)
    assert torch.equal(y.cpu().view(torch.int16), want.cpu().view(torch.int16)), (y.tolist(), want.tolist())
    assert torch.equal(z.cpu(), want.to(dt).cpu()), (z.tolist(), want.to(dt).tolist())


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", ["NCHW", "strided"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_layouts_dtypes_alpha_beta(direction, layout, dtype, rng):
    if direction not in API:
        pytest.skip(f"the {direction} API is not there yet")
    p = P(6, 8, (5, 5), 3, 1, 1, 1, 2)
    for algo in ALGOS[direction]:
        run_case(direction, algo, p, dtype, layout, rng, alpha=2.0, beta=0.5, as_torch=True)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_convolution_mode_flips_the_filter(direction, rng):
    if direction not in API:
        pytest.skip(f"the {direction} API is not there yet")
    p = P(4, 4, (5, 4), (3, 2), 1, (1, 0))
    for algo in ALGOS[direction]:
        run_case(direction, algo, p, "float32", "NHWC", rng, mode=tridnn.ConvMode.CONVOLUTION)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_asymmetric_padding(direction, rng):
    if direction not in API:
        pytest.skip(f"the {direction} API is not there yet")
    p = P(4, 4, (5, 6), 3, 1, (0, 1))
    for algo in ALGOS[direction]:
        run_case(direction, algo, p, "float32", "NCHW", rng, pad_post=(2, 0))


def test_math_types_and_torch_tensors(rng):
    p = P(16, 16, (4, 4), 3, 1, 1)
    for algo in ALGOS["fwd"]:
        for math in (tridnn.MathType.TENSOR_OP, tridnn.MathType.FMA):
            run_case("fwd", algo, p, "float32", "NHWC", rng, as_torch=True, math=math)


# -- the fused epilogue ------------------------------------------------------------------
ACTS = ["RELU", "CLIPPED_RELU", "SIGMOID", "TANH", "ELU", "SWISH", "GELU", None]


def _act_ref(v, name, coef, swish_beta):
    import math
    if name is None:
        return v
    if name == "RELU":
        return np.maximum(v, 0)
    if name == "CLIPPED_RELU":
        return np.minimum(np.maximum(v, 0), coef)
    if name == "SIGMOID":
        return 1 / (1 + np.exp(-v))
    if name == "TANH":
        return np.tanh(v)
    if name == "ELU":
        return np.where(v > 0, v, coef * np.expm1(np.minimum(v, 0)))
    if name == "SWISH":
        return v / (1 + np.exp(-swish_beta * v))
    if name == "GELU":
        return 0.5 * v * (1 + np.vectorize(math.erf)(v / np.sqrt(2)))
    raise AssertionError(name)


@pytest.mark.parametrize("act", ACTS)
def test_fused_epilogue(act, rng):
    from tridnn.api.convolution import execute
    from tridnn.cuda.epilogue import EpilogueSpec
    from tridnn.descriptors.activation import ActivationMode
    p = P(8, 16, (4, 4), 3, 1, 1)
    cd = conv(p)
    handle = _handle("cpu")
    x_vals = testing.fill((2, 8, 4, 4), "float32", rng)
    w_vals = testing.fill((16, 8, 3, 3), "float32", rng)
    x_desc, x = testing.make_tensor(x_vals.shape, "float32", "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, "float32", "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), "float32", "NHWC", rng)
    z_desc, z = testing.make_tensor(y_desc.dims, "float32", "NCHW", rng, testing.fill(y_desc.dims, "float32", rng))
    bias = rng.standard_normal(16).astype(np.float32)
    prior = testing.fill(y_desc.dims, "float32", rng)
    coef, swish_beta = 1.5, 0.75
    spec = EpilogueSpec(activation=None if act is None else ActivationMode[act], coef=coef,
                        swish_beta=swish_beta, bias=torch.from_numpy(bias).reshape(1, 16, 1, 1),
                        z=_to_torch(z, "cpu"), alpha2=0.5)
    for algo in ALGOS["fwd"]:
        problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
        if algo.not_applicable(problem):
            continue
        y[...] = prior
        views = {k: handle.backend.view(v, d, k, k == "y") for k, v, d in
                 (("x", x, x_desc), ("w", w, w_desc.as_tensor()), ("y", y, y_desc))}
        ws = handle.workspace(algo.workspace_size(problem))
        execute(handle, problem, algo, views, ws, 2.0, 0.25, epilogue=spec)
        v = (2.0 * reference.conv_forward(x_vals, w_vals, 1, 1) + 0.25 * prior.astype(np.float64)
             + 0.5 * np.asarray(z, np.float64) + bias.astype(np.float64)[None, :, None, None])
        want = _act_ref(v, act, coef, swish_beta)
        # transform methods (exact False) err in proportion to the pre-activation values:
        # float32's pointwise tolerance against their largest magnitude
        atol = 2e-5 * (1.0 if algo.exact else np.abs(v).max())
        np.testing.assert_allclose(np.asarray(y, np.float64), want, rtol=2e-5, atol=atol,
                                   err_msg=f"{algo.name} act={act}")


NAN_CASES = [("SIGMOID", False), ("TANH", False), ("ELU", False), ("SWISH", False), ("GELU", False),
             ("RELU", True), ("CLIPPED_RELU", True), ("RELU", False), ("CLIPPED_RELU", False)]
# on a GPU, the cases a min / max or a where decides (each case compiles every exact algorithm)
GPU_NAN_CASES = [("ELU", False), ("RELU", True), ("CLIPPED_RELU", True), ("CLIPPED_RELU", False)]
NAN_PARAMS = ([("cpu", "float32", act, prop) for act, prop in NAN_CASES]
              + [pytest.param("cuda", dtype, act, prop, marks=pytest.mark.gpu)
                 for dtype in ("float32", "float16") for act, prop in GPU_NAN_CASES])


@pytest.mark.parametrize("device,dtype,act,propagate", NAN_PARAMS)
def test_fused_epilogue_keeps_nan(act, propagate, device, dtype, rng):
    """A NaN in x reaches every output whose window holds it, through activations that map
    NaN to NaN and through RELU / CLIPPED_RELU under PROPAGATE_NAN (the NumPy backend's
    answers); without it those two give no NaN. The epilogue's ELU took exp(tl.minimum(v,
    0)), which is exp(0) for a NaN on the GPU (PTX min), as the activation layer's ELU did
    (GPU fuzz, session 24; conftest's interpreter follows that rule), and its RELU /
    CLIPPED_RELU ignored the NaN option. On a GPU every exact forward algorithm runs (the
    Gluon kernels too, in float16); the transform methods spread a NaN over their tiles."""
    from tridnn.api.convolution import execute
    from tridnn.cuda.epilogue import EpilogueSpec
    from tridnn.descriptors.activation import ActivationMode
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    cd = conv(P(4, 4, (5, 5), 3, 1, 1))
    handle = _handle(device)
    x_vals = testing.fill((1, 4, 5, 5), dtype, rng)
    x_vals[0, 1, 2, 0] = np.nan
    w_vals = testing.fill((4, 4, 3, 3), dtype, rng)
    x_desc, x = testing.make_tensor(x_vals.shape, dtype, "NHWC", rng, x_vals)
    w_desc, w = testing.make_filter(w_vals.shape, dtype, "NHWC", w_vals)
    y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), dtype, "NHWC", rng)
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    want = np.isnan(reference.conv_forward(x_vals.astype(np.float64), w_vals.astype(np.float64), 1, 1))
    assert want.sum() == 4 * 3 * 2  # the NaN's 3 x 2 neighbourhood (at the left edge), every channel
    if act in ("RELU", "CLIPPED_RELU") and not propagate:
        want[...] = False
    spec = EpilogueSpec(activation=ActivationMode[act], coef=1.0, swish_beta=1.0, bias=None, z=None, alpha2=0.0,
                        propagate_nan=propagate)
    algos = [a for a in ALGOS["fwd"] if a.exact and not a.not_applicable(problem)]
    if device == "cpu":
        algos = [a for a in algos if a.name == "IMPLICIT_GEMM"]
    assert algos
    for algo in algos:
        arrays = {"x": x, "w": w, "y": y}
        if device == "cuda":
            arrays = {k: _to_torch(v, device) for k, v in arrays.items()}
        views = {k: handle.backend.view(arrays[k], d, k, k == "y") for k, d in
                 (("x", x_desc), ("w", w_desc.as_tensor()), ("y", y_desc))}
        execute(handle, problem, algo, views, handle.workspace(algo.workspace_size(problem)), 1.0, 0.0,
                epilogue=spec)
        got = arrays["y"]
        if isinstance(got, torch.Tensor):
            got = _to_numpy(got, dtype)
        np.testing.assert_array_equal(np.isnan(np.asarray(got, np.float64)), want, err_msg=f"{act} {algo.name}")


@pytest.mark.parametrize("target", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("nan_opt", [0, 1], ids=["NOT_PROPAGATE_NAN", "PROPAGATE_NAN"])
def test_fused_relu_nan_option_through_the_api(nan_opt, target, rng):
    """convolution_bias_activation_forward hands the activation descriptor's NaN option to
    the Triton epilogue (``target``: the interpreter or a GPU): the same NaN pattern as the
    NumPy backend's."""
    if target == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x_vals = testing.fill((1, 4, 5, 5), "float32", rng)
    x_vals[0, 3, 0, 4] = np.nan
    w_vals = testing.fill((4, 4, 3, 3), "float32", rng)
    cd = conv(P(4, 4, (5, 5), 3, 1, 1))
    act = tridnn.ActivationDescriptor(tridnn.ActivationMode.RELU, nan_opt=nan_opt)
    got = {}
    for device in ("numpy", target):
        handle = tridnn.Handle(find_cache=None) if device == "numpy" else _handle(device)
        x_desc, x = testing.make_tensor(x_vals.shape, "float32", "NHWC", rng, x_vals)
        w_desc, w = testing.make_filter(w_vals.shape, "float32", "NHWC", w_vals)
        y_desc, y = testing.make_tensor(cd.output_dims(x_desc, w_desc), "float32", "NHWC", rng)
        b_desc = tridnn.TensorDescriptor.packed((1, 4, 1, 1), "float32")
        bias = np.zeros((1, 4, 1, 1), np.float32)
        if device != "numpy":  # (the same memory layouts, as torch tensors)
            x, w, y, bias = (_to_torch(a, device) for a in (x, w, y, bias))
        ws = handle.workspace(tridnn.get_convolution_forward_workspace_size(handle, x_desc, w_desc, cd, y_desc,
                                                                            "IMPLICIT_GEMM"))
        tridnn.convolution_bias_activation_forward(handle, 1.0, x_desc, x, w_desc, w, cd, "IMPLICIT_GEMM", ws,
                                                   0.0, y_desc, y, b_desc, bias, act, y_desc, y)
        got[device] = np.isnan(np.asarray(_to_numpy(y, "float32") if device != "numpy" else y, np.float64))
    assert got["numpy"].any() == bool(nan_opt)
    np.testing.assert_array_equal(got[target], got["numpy"])


def test_epilogue_without_spec_is_not_supported(rng):
    from tridnn.api.convolution import execute
    p = P(4, 4, (4, 4), 3, 1, 1)
    cd = conv(p)
    handle = _handle("cpu")
    x_desc, x = testing.make_tensor((1, 4, 4, 4), "float32", "NHWC", rng, testing.fill((1, 4, 4, 4), "float32", rng))
    w_desc, w = testing.make_filter((4, 4, 3, 3), "float32", "NHWC", testing.fill((4, 4, 3, 3), "float32", rng))
    y_desc, y = testing.make_tensor((1, 4, 4, 4), "float32", "NHWC", rng)
    algo = ALGOS["fwd"][0]
    problem = ConvProblem("fwd", x_desc, w_desc, y_desc, cd)
    views = {k: handle.backend.view(v, d, k) for k, v, d in
             (("x", x, x_desc), ("w", w, w_desc.as_tensor()), ("y", y, y_desc))}
    with pytest.raises(NotSupportedError, match="spec"):
        execute(handle, problem, algo, views, handle.workspace(algo.workspace_size(problem)), 1.0, 0.0,
                epilogue=lambda acc, index: acc)


# -- errors --------------------------------------------------------------------------------
def test_float64_is_not_supported_with_a_reason(rng):
    p = P(4, 4, (4, 4), 3, 1, 1)
    x_desc = tridnn.TensorDescriptor.nhwc(1, 4, 4, 4, "float64")
    w_desc = tridnn.FilterDescriptor((4, 4, 3, 3), "float64")
    cd = conv(p)
    y_desc = x_desc.with_dims(cd.output_dims(x_desc, w_desc))
    handle = _handle("cpu")
    x, w, y = (torch.zeros(d.dims, dtype=torch.float64) for d in (x_desc, w_desc.as_tensor(), y_desc))
    x = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    y = y.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    with pytest.raises(NotSupportedError, match="float64"):
        tridnn.convolution_forward(handle, 1.0, x_desc, x, w_desc, w, cd, "IMPLICIT_GEMM", None, 0.0, y_desc, y)


def test_bad_arrays_raise_before_writing(rng):
    p = P(4, 4, (4, 4), 3, 1, 1)
    cd = conv(p)
    handle = _handle("cpu")
    x_desc = tridnn.TensorDescriptor.nchw(1, 4, 4, 4)
    w_desc = tridnn.FilterDescriptor((4, 4, 3, 3))
    y_desc = tridnn.TensorDescriptor.nchw(1, 4, 4, 4)
    x, w = torch.ones(1, 4, 4, 4), torch.ones(4, 4, 3, 3)
    y = torch.full((1, 4, 4, 4), 7.0)
    call = lambda **kw: tridnn.convolution_forward(handle, 1.0, x_desc, kw.get("x", x), w_desc, kw.get("w", w), cd,
                                                   "IMPLICIT_GEMM", None, 0.0, y_desc, kw.get("y", y))
    with pytest.raises(BadParamError, match="dtype"):
        call(x=torch.ones(1, 4, 4, 4, dtype=torch.float16))
    with pytest.raises(BadParamError, match="does not match its descriptor"):
        call(x=torch.ones(1, 4, 4, 5))
    with pytest.raises(BadParamError, match="does not match its descriptor"):
        call(y=torch.ones(1, 4, 4, 4).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2))
    with pytest.raises(BadParamError, match="overlaps"):
        call(y=x)
    with pytest.raises(BadParamError, match="torch tensor"):
        call(x=[1, 2, 3])
    if torch.cuda.is_available():
        with pytest.raises(BadParamError, match="device"):
            call(x=x.cuda())
    assert torch.equal(y, torch.full((1, 4, 4, 4), 7.0)), "y was modified before the error"


# -- full size on a GPU ------------------------------------------------------------------
GPU_PROBLEMS = [
    P(64, 64, (28, 28), 3, 1, 1), P(3, 64, (32, 32), 7, 2, 3), P(256, 256, (14, 14), 1, 2, 0),
    P(256, 128, (7, 7), 3, 1, 1), P(144, 144, (28, 28), 3, 2, 1, 1, 144), P(96, 96, (17, 17), 5, 2, 1, 1, 2),
    P(64, 64, (20, 20), 3, 1, 2, 2), P(64, 64, (100,), 11, 1, 5), P(16, 32, (4, 14, 14), 3, 1, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("p", GPU_PROBLEMS, ids=_ids)
def test_gpu_full_size(direction, dtype, p, rng):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if direction not in API:
        pytest.skip(f"the {direction} API is not there yet")
    ran = 0
    for algo in ALGOS[direction]:
        for layout in (("NHWC", "NCHW") if dtype != "bfloat16" else ("NHWC",)):
            if run_case(direction, algo, p, dtype, layout, rng, n=2, device="cuda", beta=0.5) is None:
                ran += 1
    if ran == 0:
        pytest.skip("no Triton algorithm applies")
