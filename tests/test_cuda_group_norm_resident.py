"""Group norm's resident design (norms.GROUP_NORM_RESIDENT: a program holds its whole
group, or GPP adjacent channels-last groups, in registers, so x and dy are read once)
against float64: y, mean, 1/std, dx, dscale, dbias; channel counts a group that are no
power of two (masked channels) and positions that are none (masked positions), NCHW,
NHWC and strided views, alpha/beta into poisoned or blended outputs, statistics saved or
recomputed, and the host's choice: groups over GN_RESIDENT_BYTES fall back to the fused
and split designs. Tiny shapes under the interpreter (no bfloat16 there: the narrow
hold of _widen is checked by the GPU sweep)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import group_norm_coop, norms  # noqa: E402
from tridnn.reference import normalization as ref_norm  # noqa: E402
from test_cuda_layers import DEVICE, DTYPES, _Recorder, check, f64, make, poisoned  # noqa: E402

EPS = 1e-5


@pytest.fixture(autouse=True)
def _coop_off(monkeypatch):
    """These tests choose among norms.py's designs; the cooperative channels-last design
    (test_cuda_group_norm_coop.py) would take their NHWC cases first."""
    monkeypatch.setattr(group_norm_coop, "GROUP_NORM_COOP", "never")


def _spy(monkeypatch):
    """Records which group-norm kernels run."""
    calls = []
    for name, tag in (("_gn_resident_forward_kernel", "resident fwd"), ("_gn_resident_backward_kernel", "resident bwd"),
                      ("_group_norm_forward_kernel", "fused fwd"), ("_group_norm_backward_kernel", "fused bwd"),
                      ("_gn_stats_kernel", "split stats")):
        monkeypatch.setattr(norms, name, _Recorder(getattr(norms, name), tag, calls))
    return calls


def _run(shape, groups, layout, dt, rng, alpha=1.0, beta=0.0, saved=True, bias=True):
    """Forward then backward through the public entry points, each against float64."""
    C = shape[1]
    pt = torch.float64 if dt == torch.float64 else torch.float32  # parameters and statistics
    x = make(shape, layout, dt, rng=rng, scale=2.0)
    x.add_(3.0)  # a mean far from 0: the variance's two passes matter
    scale = torch.as_tensor(rng.standard_normal(C), dtype=pt, device=DEVICE)
    b = torch.as_tensor(rng.standard_normal(C), dtype=pt, device=DEVICE) if bias else None
    y = make(shape, layout, dt, rng=rng) if beta else poisoned(shape, layout, dt)
    old_y = f64(y)
    mean = torch.full((shape[0], groups), float("nan"), dtype=pt, device=DEVICE)
    inv = torch.full((shape[0], groups), float("nan"), dtype=pt, device=DEVICE)
    norms.group_norm_forward(x, y, scale, b, mean, inv, groups, EPS, alpha, beta)
    b_ref = f64(b) if bias else np.zeros(C)
    y_ref, mean_ref, inv_ref = ref_norm.group_norm(f64(x), f64(scale), b_ref, groups, EPS)
    check(y, alpha * y_ref + (beta * old_y if beta else 0.0), dt, "y", scale=2.0 * max(1.0, abs(alpha)))
    check(mean, mean_ref, pt, "mean")
    check(inv, inv_ref, pt, "inv_std")
    dy = make(shape, layout, dt, rng=rng)
    dx = make(shape, layout, dt, rng=rng) if beta else poisoned(shape, layout, dt)
    old_dx = f64(dx)
    dscale = torch.full((C,), float("nan"), dtype=pt, device=DEVICE)
    dbias = torch.full((C,), float("nan"), dtype=pt, device=DEVICE)
    stats = (mean, inv) if saved else (None, None)
    norms.group_norm_backward(x, dy, dx, scale, dscale, dbias, *stats, groups, alpha, beta, epsilon=EPS)
    dx_ref, ds_ref, db_ref = ref_norm.group_norm_backward(f64(x), f64(dy), f64(scale), groups, EPS)
    check(dx, alpha * dx_ref + (beta * old_dx if beta else 0.0), dt, "dx", scale=3.0 * max(1.0, abs(alpha)))
    check(dscale, ds_ref, dt, "dscale")
    check(dbias, db_ref, dt, "dbias")


# (shape, groups): 4 channels a group over 35 positions (masked positions); 3 channels a
# group (masked channels); 6 groups of 1 channel with adjacent channels-last groups paired
# (3 pairs); one position (8 channels a group)
CASES = [((2, 8, 5, 7), 2), ((2, 6, 3, 4), 2), ((1, 6, 4, 4), 6), ((2, 16, 1, 1), 2)]


@pytest.mark.parametrize("shape,groups", CASES, ids=["cg4", "cg3", "cg1", "s1"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "strided"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_resident(shape, groups, layout, dtype, rng, monkeypatch):
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "always")
    calls = _spy(monkeypatch)
    _run(shape, groups, layout, DTYPES[dtype], rng)
    assert calls == ["resident fwd", "resident bwd"]


@pytest.mark.parametrize("saved", [True, False], ids=["saved", "recomputed"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_resident_blend_and_recomputed_statistics(saved, layout, rng, monkeypatch):
    """alpha = 2, beta = 0.5 into outputs holding values; no bias; the backward either
    takes the saved statistics or recomputes them from the held x."""
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "always")
    monkeypatch.setattr(norms, "GN_RESIDENT_GPP", 4)  # 4 groups of 2 channels a program (NHWC)
    calls = _spy(monkeypatch)
    _run((2, 8, 3, 5), 4, layout, torch.float32, rng, alpha=2.0, beta=0.5, saved=saved, bias=False)
    assert calls == ["resident fwd", "resident bwd"]


def test_resident_float64(rng, monkeypatch):
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "always")
    calls = _spy(monkeypatch)
    _run((2, 6, 3, 5), 3, "NHWC", torch.float64, rng, saved=False)
    assert calls == ["resident fwd", "resident bwd"]


def test_default_choice_and_fallback(rng, monkeypatch):
    """The default takes the resident design for NCHW, and for NHWC forward only (the
    H200's measurements in norms.py); a group whose held tile is over GN_RESIDENT_BYTES
    goes to the fused / split designs (same results)."""
    calls = _spy(monkeypatch)
    shape, groups = (2, 8, 5, 7), 2  # a held tile: 4 channels x 64 positions
    _run(shape, groups, "NCHW", torch.float32, rng)
    _run(shape, groups, "NHWC", torch.float32, rng)
    assert calls == ["resident fwd", "resident bwd", "resident fwd", "split stats"]
    calls.clear()
    monkeypatch.setattr(norms, "GN_RESIDENT_BYTES", {"forward": 4 * 64 * 4, "backward": 4 * 64 * 4})
    _run(shape, groups, "NCHW", torch.float32, rng)  # forward fits, backward (x and dy) does not
    assert calls == ["resident fwd", "fused bwd"]
    calls.clear()
    monkeypatch.setattr(norms, "GN_RESIDENT_BYTES", {"forward": 4 * 64 * 4 - 1, "backward": 0})
    _run(shape, groups, "NCHW", torch.float32, rng)
    assert calls == ["split stats", "fused bwd"]


@pytest.mark.parametrize("design", ["always", "never"], ids=["split", "fused"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_old_designs_with_resident_off(design, layout, rng, monkeypatch):
    """GROUP_NORM_RESIDENT "never" returns to the fused and split designs (the tests of
    test_cuda_layers that pick them by GROUP_NORM_SPLIT now see the resident design for NCHW)."""
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "never")
    monkeypatch.setattr(norms, "GROUP_NORM_SPLIT", design)
    monkeypatch.setattr(norms, "SPLITS_PER_SAMPLE", 3)
    monkeypatch.setattr(norms, "GN_TILE", 16)
    calls = _spy(monkeypatch)
    for saved in (True, False):
        _run((2, 8, 5, 7), 4, layout, torch.float32, rng, alpha=2.0, beta=0.5, saved=saved)
    assert "resident fwd" not in calls and "resident bwd" not in calls
    assert ("split stats" in calls) == (design == "always")


def test_bad_switch(rng, monkeypatch):
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "sometimes")
    x = make((1, 2, 2, 2), "NCHW", rng=rng)
    with pytest.raises(ValueError, match="GROUP_NORM_RESIDENT"):
        norms.group_norm_forward(x, x.clone(), torch.ones(2), torch.zeros(2), None, None, 1, EPS)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_resident_int64_offsets(layout, rng, monkeypatch):
    """The BIG path (64-bit offsets, taken for tensors past 2**31 elements) on a tiny
    problem: needs_int64 answers True."""
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "always")
    monkeypatch.setattr(norms, "needs_int64", lambda *tensors: True)
    calls = _spy(monkeypatch)
    _run((2, 6, 3, 5), 3, layout, torch.float32, rng, alpha=1.5, beta=-0.5, saved=False)
    assert calls == ["resident fwd", "resident bwd"]


def test_resident_channels_last_stride_as_argument(rng, monkeypatch):
    """GN_RESIDENT_PIX off: the channels-last pixel stride stays a kernel argument; and
    tensors of different pixel strides (NHWC x, channel-padded dy and dx) never compile one in."""
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "always")
    monkeypatch.setattr(norms, "GN_RESIDENT_PIX", False)
    calls = _spy(monkeypatch)
    _run((2, 6, 3, 5), 3, "NHWC", torch.float32, rng, alpha=2.0, beta=0.5)
    assert calls == ["resident fwd", "resident bwd"]
    monkeypatch.setattr(norms, "GN_RESIDENT_PIX", True)
    x = make((2, 6, 3, 5), "NHWC", rng=rng)
    padded = make((2, 6, 3, 5), "strided", rng=rng)
    plan = norms._resident_plan(x, 2, 3, "backward")
    assert norms._pixel_stride(plan, x, x) == 6 and norms._pixel_stride(plan, x, padded) == 0


@pytest.mark.parametrize("sums", ["joint", "separate"])
def test_parameter_gradient_sums(sums, rng, monkeypatch):
    """dscale and dbias from the per-sample partials: one joint launch or one per gradient;
    also each alone (the other None)."""
    monkeypatch.setattr(norms, "PARAM_SUMS", sums)
    shape, groups = (3, 8, 5, 7), 2
    _run(shape, groups, "NCHW", torch.float32, rng)
    x, dy = make(shape, "NCHW", rng=rng), make(shape, "NCHW", rng=rng)
    scale = torch.as_tensor(rng.standard_normal(8), dtype=torch.float32, device=DEVICE)
    _, ds_ref, db_ref = ref_norm.group_norm_backward(f64(x), f64(dy), f64(scale), groups, EPS)
    for want_ds in (True, False):
        out = torch.full((8,), float("nan"), device=DEVICE)
        dx = poisoned(shape, "NCHW")
        norms.group_norm_backward(x, dy, dx, scale, out if want_ds else None, None if want_ds else out, None, None,
                                  groups, epsilon=EPS)
        check(out, ds_ref if want_ds else db_ref, torch.float32, "dscale" if want_ds else "dbias")


@pytest.mark.parametrize("x_layout", ["NCHW", "NHWC"])
def test_resident_mixed_layouts(x_layout, rng, monkeypatch):
    """x in one layout, y / dy / dx in others (each tensor's own strides; the tile follows x)."""
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "always")
    calls = _spy(monkeypatch)
    shape, groups = (2, 6, 3, 5), 3
    other = "NHWC" if x_layout == "NCHW" else "NCHW"
    x = make(shape, x_layout, rng=rng, scale=2.0)
    scale = torch.as_tensor(rng.standard_normal(6), dtype=torch.float32, device=DEVICE)
    bias = torch.as_tensor(rng.standard_normal(6), dtype=torch.float32, device=DEVICE)
    y = poisoned(shape, other)
    mean = torch.full((2, groups), float("nan"), device=DEVICE)
    inv = torch.full((2, groups), float("nan"), device=DEVICE)
    norms.group_norm_forward(x, y, scale, bias, mean, inv, groups, EPS)
    y_ref, mean_ref, inv_ref = ref_norm.group_norm(f64(x), f64(scale), f64(bias), groups, EPS)
    check(y, y_ref, torch.float32, "y", scale=2.0)
    check(inv, inv_ref, torch.float32, "inv_std")
    dy, dx = make(shape, "strided", rng=rng), poisoned(shape, other)
    dscale = torch.full((6,), float("nan"), device=DEVICE)
    norms.group_norm_backward(x, dy, dx, scale, dscale, None, mean, inv, groups, epsilon=EPS)
    dx_ref, ds_ref, _ = ref_norm.group_norm_backward(f64(x), f64(dy), f64(scale), groups, EPS)
    check(dx, dx_ref, torch.float32, "dx", scale=3.0)
    check(dscale, ds_ref, torch.float32, "dscale")
    assert calls == ["resident fwd", "resident bwd"]


def test_resident_plan_warps_and_in_place(rng, monkeypatch):
    """Warps from GN_RESIDENT_DATA_REGS (a power of two, 4 to 32; per direction or one
    value); y may be x itself (a program holds its group before it writes)."""
    x = make((2, 256, 56, 56), "NCHW", torch.bfloat16, values=np.zeros((2, 256, 56, 56)))
    monkeypatch.setattr(norms, "_narrow", lambda xv: xv.dtype == torch.bfloat16)  # as on a GPU
    assert norms._resident_plan(x, 8, 32, "forward")["num_warps"] == 8
    monkeypatch.setattr(norms, "GN_RESIDENT_DATA_REGS", 48)
    assert norms._resident_plan(x, 8, 32, "backward")["num_warps"] in (16, 32)
    monkeypatch.setattr(norms, "GROUP_NORM_RESIDENT", "always")
    shape, groups = (2, 8, 5, 7), 2
    x = make(shape, "NCHW", rng=rng, scale=2.0)
    scale = torch.as_tensor(rng.standard_normal(8), dtype=torch.float32, device=DEVICE)
    y_ref, _, _ = ref_norm.group_norm(f64(x), f64(scale), np.zeros(8), groups, EPS)
    old = f64(x)
    norms.group_norm_forward(x, x, scale, None, None, None, groups, EPS, 1.0, 0.5)
    check(x, y_ref + 0.5 * old, torch.float32, "y in place", scale=2.0)
