"""Activations forward and backward in Triton: one pointwise kernel per direction.

The mode is a constexpr, so each mode compiles to its own straight-line kernel; the
math is done in float32 (float64 for float64 tensors) and rounded once at the store.
Mode numbers are ActivationMode's values (kernels never import descriptors)."""
from __future__ import annotations

import triton
import triton.language as tl

from . import common
from .common import cdiv, jit_run
from .layer_utils import (blend_args, blend_store, check_dtypes, check_same_shape, compute_dtype,
                          first_index, needs_int64, pointwise_chunks, single_launch_geometry,
                          unravel4)

SIGMOID, RELU, TANH, CLIPPED_RELU, ELU, IDENTITY, SWISH = 0, 1, 2, 3, 4, 5, 6
LEAKY_RELU, GELU, GELU_TANH, SOFTPLUS, HARD_SWISH = 100, 101, 102, 103, 104

BLOCK = 1024  # measured on the H200: 1024 x 4 warps reaches copy speed, 4096 x 8 is 4% slower
NUM_WARPS = 4
# (BLOCK, num_warps) per mode where it differs from the above; the benchmark times gelu
# (erf: the per-element arithmetic, not the bytes, sets its speed). H200, 2026-11-30 05:39
# UTC, tridnn/torch time: 1024 x 4: 1.13 fwd, 1.06 bwd; 512 x 4: 1.25, 1.17; 2048 x 4:
# 1.05, 1.01; 2048 x 8: 1.13, 1.06; 4096 x 8: 1.06, 1.02. So gelu takes 2048 x 4.
TILES = {GELU: (2048, 4)}
SQRT_2_OVER_PI = 0.7978845608028654
INV_SQRT_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327
# gelu's normal CDF: "exact" (erff: 37.5 SASS instructions per element, forward, 2048 x 4,
# sm_90), "fast" (gelu_cdf: Phi(x) = 1 / (1 + 2**(-x P(x^2))), the reciprocal as rsqrt
# squared: 19.5) or "fast_div" (the same with a division: 22.5). Backward: 48.5, 30.5,
# 33.5. float64 tensors always take erf. The benchmark times all three ([fast erf] rows).
# gelu's Phi: "fast" (gelu_cdf, max error 7.2e-7 relative, see tests/test_gelu_fast.py) or
# "exact" (erf). H200 2026-11-30 ~06:20 UTC, bf16 64x256x56x56, tridnn / torch time
# (fwd / bwd): exact 1.05 / 1.01, fast 0.77 / 0.82. float64 always takes erf.
GELU_ERF = "fast"
_GELU_ERF_CODES = {"exact": 0, "fast": 1, "fast_div": 2}
# -P's coefficients (u^0 first), as written out in gelu_cdf; tests/test_gelu_fast.py proves
# the error bound on them
GELU_CDF_NEG_P = (-2.3022080015350004, -0.10483750737251248, 9.508729979622923e-05, 0.0001594984364994214,
                  -1.146398310776552e-05, 3.8562345362064265e-07, -5.22072127195905e-09)


@triton.jit
def sigmoid(x):
    """1 / (1 + exp(-x)), evaluated on exp(-|x|) so no exp overflows."""
    e = tl.exp(-tl.abs(x))
    return tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def tanh(x):
    """tanh from exp(-2|x|); a short series near zero keeps the relative error small."""
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    t = (1.0 - e) / (1.0 + e)
    x2 = x * x
    series = a * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))))
    t = tl.where(a < 0.05, series, t)
    return tl.where(x < 0, -t, t)


@triton.jit
def gelu_cdf(x, RSQRT: tl.constexpr):
    """The standard normal CDF in float32 as a logistic in base 2: Phi(x) = 1 / (1 +
    2**(-x P(u))), u = min(x^2, 36), P a degree-6 polynomial fitted (weighted minimax,
    Lawson) to log2(Phi / (1 - Phi)) / x on [0, 6]. Phi's logit is odd, so one fit serves
    both signs; past |x| = 6 the logit keeps growing linearly (Phi within 1e-9 of 0 or 1),
    and 2**(+big) = inf gives exactly 0. RSQRT: 1 / d as rsqrt(d)^2 (one MUFU.RSQ and a
    multiply; the division adds a range check). tests/test_gelu_fast.py sweeps float32
    inputs densely in float64: |gelu error| / max(1, |gelu|) <= 6.8e-8 for the formula,
    and with the float32 evaluation and the PTX bounds of ex2.approx and rsqrt.approx
    below 1e-6 (float32 tolerance: 2e-5); the same for the derivative."""
    u = tl.minimum(x * x, 36.0)
    p = -5.22072127195905e-09  # -P: the sign folded into the coefficients
    p = p * u + 3.8562345362064265e-07
    p = p * u + -1.146398310776552e-05
    p = p * u + 0.0001594984364994214
    p = p * u + 9.508729979622923e-05
    p = p * u + -0.10483750737251248
    p = p * u + -2.3022080015350004
    if RSQRT:
        r = tl.math.rsqrt(1.0 + tl.exp2(x * p))
        return r * r
    else:
        return 1.0 / (1.0 + tl.exp2(x * p))


@triton.jit
def activation_value(x, coef, swish_beta, MODE: tl.constexpr, PROPAGATE_NAN: tl.constexpr,
                     FAST_ERF: tl.constexpr = 0):
    """act(x) for one of the ActivationMode values."""
    if MODE == 5:  # IDENTITY
        y = x
    elif MODE == 1:  # RELU
        y = tl.where(x > 0, x, 0.0)
    elif MODE == 3:  # CLIPPED_RELU
        y = tl.where(x > 0, tl.where(x < coef, x, coef), 0.0)
    elif MODE == 100:  # LEAKY_RELU
        y = tl.where(x > 0, x, x * coef)
    elif MODE == 0:  # SIGMOID
        y = sigmoid(x)
    elif MODE == 2:  # TANH
        y = tanh(x)
    elif MODE == 4:  # ELU
        # exp of min(x, 0) as a where: tl.minimum(NaN, 0) is 0 on the GPU (PTX min returns
        # the other operand), which turned a NaN input into 0
        y = tl.where(x > 0, x, coef * (tl.exp(tl.where(x > 0, 0.0, x)) - 1.0))
    elif MODE == 6:  # SWISH
        y = x * sigmoid(swish_beta * x)
    elif MODE == 101:  # GELU (erf)
        if FAST_ERF > 0:  # 1: rsqrt, 2: division
            y = x * gelu_cdf(x, FAST_ERF == 1)
        else:
            y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif MODE == 102:  # GELU_TANH
        y = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif MODE == 103:  # SOFTPLUS: log(1 + exp(c x)) / c, stable form
        z = coef * x
        y = (tl.maximum(z, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(z)))) / coef
    else:  # HARD_SWISH
        y = x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0
    if MODE == 1 or MODE == 3 or MODE == 100:
        if PROPAGATE_NAN:
            y = tl.where(x != x, x, y)
    return y


@triton.jit
def activation_grad(x, y, dy, coef, swish_beta, MODE: tl.constexpr, FAST_ERF: tl.constexpr = 0):
    """dy * act'(x); sigmoid, tanh and elu use the saved output y."""
    if MODE == 5:
        dx = dy
    elif MODE == 1:
        dx = tl.where(x > 0, dy, 0.0)
    elif MODE == 3:
        dx = tl.where((x > 0) & (x < coef), dy, 0.0)
    elif MODE == 100:
        dx = tl.where(x > 0, dy, dy * coef)
    elif MODE == 0:
        dx = dy * y * (1.0 - y)
    elif MODE == 2:
        dx = dy * (1.0 - y * y)
    elif MODE == 4:
        dx = tl.where(x > 0, dy, dy * (y + coef))
    elif MODE == 6:
        s = sigmoid(swish_beta * x)
        dx = dy * (s + swish_beta * x * s * (1.0 - s))
    elif MODE == 101:
        if FAST_ERF > 0:
            cdf = gelu_cdf(x, FAST_ERF == 1)
        else:
            cdf = 0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))
        pdf = tl.exp(-0.5 * x * x) * 0.3989422804014327
        dx = dy * (cdf + x * pdf)
    elif MODE == 102:
        t = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
        d_inner = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
        dx = dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)
    elif MODE == 103:
        dx = dy * sigmoid(coef * x)
    else:
        dx = dy * tl.where(x < -3.0, 0.0, tl.where(x > 3.0, 1.0, (2.0 * x + 3.0) / 6.0))
    return dx


@triton.jit
def _activation_forward_kernel(x_ptr, y_ptr, numel, D1, D2, D3,
                               xs0, xs1, xs2, xs3, ys0, ys1, ys2, ys3,
                               alpha: tl.float64, beta: tl.float64, coef: tl.float64, swish_beta: tl.float64,
                               MODE: tl.constexpr, PROPAGATE_NAN: tl.constexpr,
                               HAS_BETA: tl.constexpr, FLAT: tl.constexpr, BIG: tl.constexpr,
                               COMPUTE: tl.constexpr, BLOCK: tl.constexpr, FAST_ERF: tl.constexpr):
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta, coef, swish_beta = (tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE),
                                     tl.full([], coef, COMPUTE), tl.full([], swish_beta, COMPUTE))
    i = first_index(BLOCK, BIG) + tl.arange(0, BLOCK)
    mask = i < numel
    if FLAT:
        x_off = i
        y_off = i
    else:
        i0, i1, i2, i3 = unravel4(i, D1, D2, D3)
        x_off = i0 * xs0 + i1 * xs1 + i2 * xs2 + i3 * xs3
        y_off = i0 * ys0 + i1 * ys1 + i2 * ys2 + i3 * ys3
    x = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(COMPUTE)
    y = activation_value(x, coef, swish_beta, MODE, PROPAGATE_NAN, FAST_ERF)
    blend_store(y_ptr, y_off, mask, y, alpha, beta, HAS_BETA)


@triton.jit
def _activation_backward_kernel(x_ptr, y_ptr, dy_ptr, dx_ptr, numel, D1, D2, D3,
                                xs0, xs1, xs2, xs3, ys0, ys1, ys2, ys3,
                                gs0, gs1, gs2, gs3, ds0, ds1, ds2, ds3,
                                alpha: tl.float64, beta: tl.float64, coef: tl.float64, swish_beta: tl.float64,
                                MODE: tl.constexpr, NEEDS_X: tl.constexpr, NEEDS_Y: tl.constexpr,
                                HAS_BETA: tl.constexpr, FLAT: tl.constexpr, BIG: tl.constexpr,
                                COMPUTE: tl.constexpr, BLOCK: tl.constexpr, FAST_ERF: tl.constexpr):
    # float64 scalar arguments (exact for float64 data), converted once to COMPUTE
    alpha, beta, coef, swish_beta = (tl.full([], alpha, COMPUTE), tl.full([], beta, COMPUTE),
                                     tl.full([], coef, COMPUTE), tl.full([], swish_beta, COMPUTE))
    i = first_index(BLOCK, BIG) + tl.arange(0, BLOCK)
    mask = i < numel
    if FLAT:
        x_off = i
        y_off = i
        g_off = i
        d_off = i
    else:
        i0, i1, i2, i3 = unravel4(i, D1, D2, D3)
        x_off = i0 * xs0 + i1 * xs1 + i2 * xs2 + i3 * xs3
        y_off = i0 * ys0 + i1 * ys1 + i2 * ys2 + i3 * ys3
        g_off = i0 * gs0 + i1 * gs1 + i2 * gs2 + i3 * gs3
        d_off = i0 * ds0 + i1 * ds1 + i2 * ds2 + i3 * ds3
    dy = tl.load(dy_ptr + g_off, mask=mask, other=0.0).to(COMPUTE)
    x = dy
    y = dy
    if NEEDS_X:
        x = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(COMPUTE)
    if NEEDS_Y:
        y = tl.load(y_ptr + y_off, mask=mask, other=0.0).to(COMPUTE)
    dx = activation_grad(x, y, dy, coef, swish_beta, MODE, FAST_ERF)
    blend_store(dx_ptr, d_off, mask, dx, alpha, beta, HAS_BETA)


_USES_Y = {SIGMOID, TANH, ELU}
_USES_X = {RELU, CLIPPED_RELU, LEAKY_RELU, ELU, SWISH, GELU, GELU_TANH, SOFTPLUS, HARD_SWISH}


def _launch_args(dims4, numel):
    return (numel, dims4[1], dims4[2], dims4[3])


def _fast_erf(mode, t) -> int:
    """The kernels' FAST_ERF: 0 (erf), 1 (gelu_cdf, rsqrt) or 2 (gelu_cdf, division);
    only gelu on tensors other than float64 takes gelu_cdf."""
    if GELU_ERF not in _GELU_ERF_CODES:
        raise ValueError(f"activation.GELU_ERF must be one of {sorted(_GELU_ERF_CODES)}, got {GELU_ERF!r}")
    return _GELU_ERF_CODES[GELU_ERF] if int(mode) == GELU and t.dtype.itemsize < 8 else 0


def _tile(mode):
    """(elements per program, warps) for this mode."""
    return TILES.get(int(mode), (BLOCK, NUM_WARPS))


def activation_forward(x, y, *, mode: int, coef: float = 0.0, swish_beta: float = 1.0,
                       propagate_nan: bool = False, alpha=1.0, beta=0.0) -> None:
    """y = alpha * act(x) + beta * y on same-shape tensors of one dtype, any strides."""
    run = forward_plan(x, y, mode=mode, coef=coef, swish_beta=swish_beta, propagate_nan=propagate_nan,
                       alpha=alpha, beta=beta)
    if run is not None:
        run(x, y)


def forward_plan(x, y, *, mode: int, coef: float = 0.0, swish_beta: float = 1.0,
                 propagate_nan: bool = False, alpha=1.0, beta=0.0):
    """Checks x and y and returns ``run(x, y)``, which launches the forward on them or on
    any tensors of the same shapes, strides, dtypes and device (the launch arguments
    depend on nothing else, so a caller may keep ``run`` per such signature); None when
    there is nothing to compute."""
    check_dtypes(x=x, y=y)
    check_same_shape(x=x, y=y)
    if x.numel() == 0:
        return None
    alpha, beta, has_beta = blend_args(alpha, beta)
    block, warps = _tile(mode)
    consts = dict(MODE=int(mode), PROPAGATE_NAN=bool(propagate_nan), HAS_BETA=has_beta, BIG=needs_int64(x, y),
                  COMPUTE=compute_dtype(x), BLOCK=block, FAST_ERF=_fast_erf(mode, x))
    scalars = (alpha, beta, float(coef), float(swish_beta))
    geometry = single_launch_geometry(x, y)
    if geometry is None:  # more than four unmergeable dims: one launch per outer index
        def run(x, y):
            for (xv, yv), dims4, (xs, ys), flat in pointwise_chunks(x, y):
                numel = xv.numel()
                jit_run(_activation_forward_kernel, (cdiv(numel, block),), xv, yv, *_launch_args(dims4, numel),
                        *xs, *ys, *scalars, FLAT=flat, **consts, num_warps=warps)
        return run
    dims4, (xs, ys), flat = geometry
    numel = x.numel()
    ints = (*_launch_args(dims4, numel), *xs, *ys)
    consts["FLAT"] = flat
    consts = {name: consts[name] for name in _FORWARD_CONSTS}  # the kernel's order
    options = {"num_warps": warps}
    static = ((ints, x.dtype, y.dtype, tuple(consts.items()), warps), 2)
    grid = (cdiv(numel, block),)
    tail = (*ints, *scalars)

    def run(x, y):
        common.launch(_activation_forward_kernel, grid, (x, y, *tail), consts, options, static)
    return run


_FORWARD_CONSTS = ("MODE", "PROPAGATE_NAN", "HAS_BETA", "FLAT", "BIG", "COMPUTE", "BLOCK", "FAST_ERF")
_BACKWARD_CONSTS = ("MODE", "NEEDS_X", "NEEDS_Y", "HAS_BETA", "FLAT", "BIG", "COMPUTE", "BLOCK", "FAST_ERF")


def activation_backward(y, dy, x, dx, *, mode: int, coef: float = 0.0, swish_beta: float = 1.0,
                        propagate_nan: bool = False, alpha=1.0, beta=0.0) -> None:
    """dx = alpha * dy * act'(x) + beta * dx. Only the tensors the mode needs are read
    (x, or the forward output y for sigmoid, tanh and elu); NaN propagation does not
    change the derivative."""
    run = backward_plan(y, dy, x, dx, mode=mode, coef=coef, swish_beta=swish_beta, alpha=alpha, beta=beta)
    if run is not None:
        run(y, dy, x, dx)


def backward_plan(y, dy, x, dx, *, mode: int, coef: float = 0.0, swish_beta: float = 1.0,
                  propagate_nan: bool = False, alpha=1.0, beta=0.0):
    """``run(y, dy, x, dx)`` for tensors of these signatures, as forward_plan; None when
    there is nothing to compute."""
    mode = int(mode)
    needs_x, needs_y = mode in _USES_X, mode in _USES_Y
    check_dtypes(dy=dy, dx=dx, x=x if needs_x else None, y=y if needs_y else None)
    check_same_shape(dy=dy, dx=dx, x=x if needs_x else None, y=y if needs_y else None)
    if dy.numel() == 0:
        return None
    alpha, beta, has_beta = blend_args(alpha, beta)
    xt = x if needs_x else dy
    yt = y if needs_y else dy
    block, warps = _tile(mode)
    consts = dict(MODE=mode, NEEDS_X=needs_x, NEEDS_Y=needs_y, HAS_BETA=has_beta, BIG=needs_int64(xt, yt, dy, dx),
                  COMPUTE=compute_dtype(dy), BLOCK=block, FAST_ERF=_fast_erf(mode, dy))
    scalars = (alpha, beta, float(coef), float(swish_beta))
    geometry = single_launch_geometry(dx, xt, yt, dy)
    if geometry is None:
        def run(y, dy, x, dx):
            xt = x if needs_x else dy
            yt = y if needs_y else dy
            for (dv, xv, yv, gv), dims4, (ds, xs, ys, gs), flat in pointwise_chunks(dx, xt, yt, dy):
                numel = dv.numel()
                jit_run(_activation_backward_kernel, (cdiv(numel, block),), xv, yv, gv, dv,
                        *_launch_args(dims4, numel), *xs, *ys, *gs, *ds, *scalars, FLAT=flat, **consts,
                        num_warps=warps)
        return run
    dims4, (ds, xs, ys, gs), flat = geometry
    numel = dy.numel()
    ints = (*_launch_args(dims4, numel), *xs, *ys, *gs, *ds)
    consts["FLAT"] = flat
    consts = {name: consts[name] for name in _BACKWARD_CONSTS}
    options = {"num_warps": warps}
    static = ((ints, xt.dtype, yt.dtype, dy.dtype, dx.dtype, tuple(consts.items()), warps), 4)
    grid = (cdiv(numel, block),)
    tail = (*ints, *scalars)

    def run(y, dy, x, dx):
        common.launch(_activation_backward_kernel, grid, (x if needs_x else dy, y if needs_y else dy, dy, dx, *tail),
                      consts, options, static)
    return run
