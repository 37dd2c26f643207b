"""activation.GELU_ERF = "fast": gelu_cdf's error bound, proved by a dense float64 sweep
over float32 inputs, and the kernels (Triton interpreter on the CPU) against it.

The bound is on |got - gelu(x)| / max(1, |gelu(x)|) (and likewise for the derivative
Phi(x) + x phi(x)), the per-element form of the float32 tolerance (2e-5) the layer tests
use against the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
scipy_special = pytest.importorskip("scipy.special")

from tridnn.cuda import activation  # noqa: E402

import os  # noqa: E402

# under TRIDNN_GPU_TESTS=1 (no interpreter) the kernels run on the GPU, else on the CPU
DEVICE = "cuda" if os.environ.get("TRIDNN_GPU_TESTS") == "1" and torch.cuda.is_available() else "cpu"

GELU = activation.GELU
EX2_REL = 2.0 ** -22    # ex2.approx.ftz.f32: PTX documents 2^-22.5 (we take the looser 2^-22)
RSQRT_REL = 2.0 ** -22  # rsqrt.approx.ftz.f32: PTX documents 2^-22.9
DIV_REL = 2.0 ** -22    # div.full.f32: 2 ulp


def sweep_inputs():
    """float32 values: every 2^-20 step over [-12, 12] (24 million; past |x| = 6 the
    logit is the linear continuation), log-spaced magnitudes over the whole float32 range
    both signs, and signed zeros."""
    mags = np.logspace(-45, np.log10(3.4e38), 400_001)
    yield from (np.arange(lo, lo + 1.0, 2.0 ** -20) for lo in np.arange(-12.0, 12.0))
    yield np.concatenate([mags, -mags, [0.0, -0.0]])


def exact(x):
    phi = scipy_special.ndtr(x)
    return x * phi, phi + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def formula(x, dt):
    """gelu_cdf evaluated in dt: (gelu, its derivative, Phi, 2**(-x P))."""
    x = x.astype(dt)
    u = np.minimum(x * x, dt(36.0))
    p = dt(activation.GELU_CDF_NEG_P[-1])
    for c in activation.GELU_CDF_NEG_P[-2::-1]:
        p = p * u + dt(c)
    e = np.exp2(x * p)
    phi = dt(1) / (dt(1) + e)
    pdf = np.exp(dt(-0.5) * x * x) * dt(0.3989422804014327)
    return x * phi, phi + x * pdf, phi, e


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_gelu_cdf_error_bound_dense_sweep():
    """The formula in float64 is within 1e-7 of gelu and its derivative; evaluated in
    float32, plus the worst case of the approximate ex2 and reciprocal (rsqrt squared or
    division), within 1.5e-6 (13x inside the float32 tolerance of 2e-5)."""
    worst64, worst32 = [0.0, 0.0], [0.0, 0.0]
    with np.errstate(all="ignore"):
        for chunk in sweep_inputs():
            x = chunk.astype(np.float32).astype(np.float64)
            y, d = exact(x)
            scale_y, scale_d = np.maximum(1, np.abs(y)), np.maximum(1, np.abs(d))
            ya, da, _, _ = formula(x, np.float64)
            worst64[0] = max(worst64[0], float((np.abs(ya - y) / scale_y).max()))
            worst64[1] = max(worst64[1], float((np.abs(da - d) / scale_d).max()))
            yf, df, phi, e = (t.astype(np.float64) for t in formula(x, np.float32))
            assert np.isfinite(yf).all() and np.isfinite(df).all()
            # the approximate units: 2**a off by EX2_REL moves Phi by Phi (1 - Phi) EX2_REL
            # at most (that is, e / (1 + e)^2 EX2_REL), the reciprocal by Phi 2 RSQRT_REL
            slack = phi * (e / (1 + e)) * EX2_REL + phi * max(2 * RSQRT_REL, DIV_REL)
            worst32[0] = max(worst32[0], float(((np.abs(yf - y) + np.abs(x) * slack) / scale_y).max()))
            worst32[1] = max(worst32[1], float(((np.abs(df - d) + slack) / scale_d).max()))
    print(f"float64 formula {worst64}, float32 + approximate units {worst32}")
    assert worst64[0] < 1e-7 and worst64[1] < 1e-7, worst64
    assert worst32[0] < 1.5e-6 and worst32[1] < 1.5e-6, worst32


def test_gelu_cdf_tails_are_exact_limits():
    """Past the fit: gelu(x) -> x and -> 0 (exactly 0 once 2**(-x P) overflows), and
    the infinities give what erf's formula gives (inf, NaN for -inf * 0)."""
    with np.errstate(all="ignore"):
        y, d, phi, _ = formula(np.array([8.0, 30.0, 1e30, -14.0, -30.0, -1e30, np.inf, -np.inf, np.nan]),
                               np.float32)
    assert y[0] == np.float32(8.0) and y[1] == 30.0 and y[2] == np.float32(1e30)
    assert -1e-20 < y[3] <= 0.0 and y[4] == 0.0 and y[5] == 0.0 and phi[5] == 0.0
    assert d[0] == 1.0 and d[4] == 0.0
    assert y[6] == np.inf and np.isnan(y[7]) and np.isnan(y[8])


def _kernel_pair(x, variant, monkeypatch):
    monkeypatch.setattr(activation, "GELU_ERF", variant)
    y = torch.full_like(x, float("nan"))
    activation.activation_forward(x, y, mode=GELU, propagate_nan=False, alpha=1.0, beta=0.0)
    dy = torch.ones_like(x)
    dx = torch.full_like(x, float("nan"))
    activation.activation_backward(y, dy, x, dx, mode=GELU, alpha=1.0, beta=0.0)
    return y, dx


@pytest.mark.parametrize("variant", ["fast", "fast_div"])
def test_gelu_fast_kernels_against_float64(variant, monkeypatch):
    """Both fast variants, forward and backward (dy = 1: the derivative itself), over a
    grid of float32 inputs and the tails: within 1.5e-6 per element of float64 gelu,
    so the kernel computes the swept formula (a wrong coefficient fails)."""
    grid = np.concatenate([np.linspace(-9, 9, 6001), [-40.0, -1e6, 40.0, 1e6, 0.0]])
    x = torch.tensor(grid, dtype=torch.float32, device=DEVICE)
    y, dx = _kernel_pair(x, variant, monkeypatch)
    xs = x.double().cpu().numpy()
    y_ref, d_ref = exact(xs)
    err_y = np.abs(y.double().cpu().numpy() - y_ref) / np.maximum(1, np.abs(y_ref))
    err_d = np.abs(dx.double().cpu().numpy() - d_ref) / np.maximum(1, np.abs(d_ref))
    assert err_y.max() < 1.5e-6 and err_d.max() < 1.5e-6, (err_y.max(), err_d.max())
    # and not erf: the exact kernel differs somewhere on this grid
    monkeypatch.setattr(activation, "GELU_ERF", "exact")
    y_exact = torch.full_like(x, float("nan"))
    activation.activation_forward(x, y_exact, mode=GELU, propagate_nan=False, alpha=1.0, beta=0.0)
    assert not torch.equal(y, y_exact)


def test_gelu_fast_specials_match_exact(monkeypatch):
    """inf, -inf, NaN: the fast kernels put NaN where the erf kernels do, and the same
    values elsewhere."""
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), 20.0, -20.0], device=DEVICE)
    fast = _kernel_pair(x, "fast", monkeypatch)
    ref = _kernel_pair(x, "exact", monkeypatch)
    for got, want in zip(fast, ref):
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        ok = ~torch.isnan(want)
        assert torch.allclose(got[ok], want[ok], rtol=1e-6, atol=1e-30)


def test_gelu_fast_float64_keeps_erf(monkeypatch):
    """float64 tensors take erf whatever GELU_ERF says: float64 accuracy (1e-12)."""
    x = torch.linspace(-7, 7, 301, dtype=torch.float64, device=DEVICE)
    y, dx = _kernel_pair(x, "fast", monkeypatch)
    y_ref, d_ref = exact(x.cpu().numpy())
    assert np.abs(y.cpu().numpy() - y_ref).max() < 1e-12 and np.abs(dx.cpu().numpy() - d_ref).max() < 1e-12


def test_gelu_erf_switch_rejects_unknown(monkeypatch):
    monkeypatch.setattr(activation, "GELU_ERF", "approx")
    x = torch.ones(4, device=DEVICE)
    with pytest.raises(ValueError, match="GELU_ERF"):
        activation.activation_forward(x, torch.empty_like(x), mode=GELU, propagate_nan=False, alpha=1.0, beta=0.0)
