"""The issue-5 variants of the row norms and of dropout against float64 (and, for
dropout, against the NumPy backend's mask bit for bit), with each switch both ways:
norms.ROW_FORWARD "ahead" (a run of rows a program, the next row loaded ahead; scale and
bias held or reloaded), the backward's BACKWARD_AHEAD_STATS / BACKWARD_PAIR_SUM and
PARAM_SUMS "joint"; dropout.FLAT_KERNEL "vec8" (8 elements, two Philox calls, a thread).
Tiny shapes under the interpreter; programs are shrunk so every kernel runs several
with a ragged last one."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cpu import dropout as cpu_dropout  # noqa: E402
from tridnn.cuda import dropout, norms  # noqa: E402
from tridnn.reference import normalization as ref_norm  # noqa: E402
from test_cuda_layers import DEVICE, DTYPES, _Recorder, check, f64, make, poisoned  # noqa: E402

R, K = 7, 1100  # one tile a row (1024 < K <= MAX_TILE), so the row kernels' single-tile paths


def _rows(dt, rng):
    x = make((R, K), "NCHW", dt, rng=rng, scale=2.0)
    x.add_(3.0)  # a mean far from 0: the two-pass variance matters
    scale = torch.as_tensor(rng.standard_normal(K), dtype=torch.float32, device=DEVICE)
    bias = torch.as_tensor(rng.standard_normal(K), dtype=torch.float32, device=DEVICE)
    return x, scale, bias


# -- layer / RMS norm forward: "ahead" --------------------------------------------------------
@pytest.mark.parametrize("hold", [False, True], ids=["reload-params", "hold-params"])
@pytest.mark.parametrize("per_sm", [1, 4], ids=["runs-of-4-and-3", "one-row-each"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_row_forward_ahead(hold, per_sm, dtype, rng, monkeypatch):
    """Layer norm (blended) and RMS norm through _row_norm_ahead_kernel: against float64,
    and (interpreter) the same values as the "rows" kernel (the same two-pass statistics)."""
    calls = []
    monkeypatch.setattr(norms, "AHEAD_PROGRAMS_PER_SM", per_sm)  # 2 "SMs" off the GPU: 2 or 7 programs
    monkeypatch.setattr(norms, "AHEAD_HOLD_PARAMS", hold)
    monkeypatch.setattr(norms, "_row_norm_ahead_kernel", _Recorder(norms._row_norm_ahead_kernel, "ahead", calls))
    monkeypatch.setattr(norms, "_row_norm_rows_kernel", _Recorder(norms._row_norm_rows_kernel, "rows", calls))
    dt = DTYPES[dtype]
    x, scale, bias = _rows(dt, rng)
    prior = make((R, K), "NCHW", dt, rng=rng)
    got = {}
    for design in ("ahead", "rows"):
        monkeypatch.setattr(norms, "ROW_FORWARD", design)
        y = prior.clone()
        mean = torch.full((R,), float("nan"), device=DEVICE)
        inv = torch.full((R,), float("nan"), device=DEVICE)
        norms.layer_norm_forward(x, y, scale, bias, mean, inv, 1, 1e-5, 1.5, 0.5)
        y_ref, mean_ref, inv_ref = ref_norm.layer_norm(f64(x), f64(scale), f64(bias), 1, 1e-5)
        check(y, 1.5 * y_ref + 0.5 * f64(prior), dt, "y", scale=2.0)
        check(mean, mean_ref, torch.float32, "mean")
        check(inv, inv_ref, torch.float32, "inv_std")
        y_rms = poisoned((R, K), "NCHW", dt)
        inv_rms = torch.full((R,), float("nan"), device=DEVICE)
        norms.rms_norm_forward(x, y_rms, scale, inv_rms, 1, 1e-5, 1.0, 0.0)
        y_ref, inv_ref = ref_norm.rms_norm(f64(x), f64(scale), 1, 1e-5)
        check(y_rms, y_ref, dt, "rms y", scale=2.0)
        check(inv_rms, inv_ref, torch.float32, "inv_rms")
        got[design] = [f64(t) for t in (y, mean, inv, y_rms, inv_rms)]
    assert calls == ["ahead", "ahead", "rows", "rows"]
    if DEVICE == "cpu":  # the same formulas; on a GPU the reduction layouts decide (the sweep reports it)
        for a, b in zip(got["ahead"], got["rows"]):
            np.testing.assert_array_equal(a, b)


def test_row_forward_ahead_without_saved_statistics_and_one_row(rng, monkeypatch):
    """No mean/inv outputs (SAVE off), no bias; a single row keeps the "rows" path's
    one-row kernel (R > 1 is needed for a run)."""
    calls = []
    monkeypatch.setattr(norms, "ROW_FORWARD", "ahead")
    monkeypatch.setattr(norms, "_row_norm_ahead_kernel", _Recorder(norms._row_norm_ahead_kernel, "ahead", calls))
    x, scale, _ = _rows(torch.float32, rng)
    y = poisoned((R, K), "NCHW")
    norms.layer_norm_forward(x, y, scale, None, None, None, 1, 1e-5, 1.0, 0.0)
    y_ref, _, _ = ref_norm.layer_norm(f64(x), f64(scale), np.zeros(K), 1, 1e-5)
    check(y, y_ref, torch.float32, "y", scale=2.0)
    assert calls == ["ahead"]
    y1 = poisoned((1, K), "NCHW")
    norms.layer_norm_forward(x[:1], y1, scale, None, None, None, 1, 1e-5, 1.0, 0.0)
    check(y1, y_ref[:1], torch.float32, "y (one row)", scale=2.0)
    assert calls == ["ahead"]


def test_row_forward_rejects_an_unknown_design(rng, monkeypatch):
    monkeypatch.setattr(norms, "ROW_FORWARD", "fast")
    x, scale, bias = _rows(torch.float32, rng)
    with pytest.raises(ValueError, match="ROW_FORWARD"):
        norms.layer_norm_forward(x, torch.empty_like(x), scale, bias, None, None, 1, 1e-5, 1.0, 0.0)


# -- layer / RMS norm backward: ahead statistics, pair sum, joint parameter sums -----------------
@pytest.mark.parametrize("ahead,pair,sums", [(True, True, "joint"), (True, False, "separate"),
                                             (False, True, "joint"), (False, False, "separate")])
@pytest.mark.parametrize("saved", [True, False], ids=["saved-stats", "recomputed"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_row_backward_variants(ahead, pair, sums, saved, dtype, rng, monkeypatch):
    """dx (blended), dscale and dbias of layer norm and dx, dscale of RMS norm against
    float64, 4 programs over 7 rows (runs of 2, the last of 1)."""
    monkeypatch.setattr(norms, "BACKWARD_AHEAD_STATS", ahead)
    monkeypatch.setattr(norms, "BACKWARD_PAIR_SUM", pair)
    monkeypatch.setattr(norms, "PARAM_SUMS", sums)
    dt = DTYPES[dtype]
    x, scale, bias = _rows(dt, rng)
    mean = torch.empty(R, device=DEVICE, dtype=torch.float64 if dt == torch.float64 else torch.float32)
    inv = torch.empty_like(mean)
    norms.layer_norm_forward(x, torch.empty_like(x), scale, bias, mean, inv, 1, 1e-5, 1.0, 0.0)
    dy = make((R, K), "NCHW", dt, rng=rng)
    prior = make((R, K), "NCHW", dt, rng=rng)
    dx = prior.clone()
    dscale = torch.full((K,), float("nan"), device=DEVICE)
    dbias = torch.full((K,), float("nan"), device=DEVICE)
    norms.layer_norm_backward(x, dy, dx, scale, dscale, dbias, mean if saved else None, inv if saved else None, 1,
                              0.5, 2.0)
    dx_ref, ds_ref, db_ref = ref_norm.layer_norm_backward(f64(x), f64(dy), f64(scale), 1, 1e-5)
    check(dx, 0.5 * dx_ref + 2.0 * f64(prior), dt, "dx", scale=3.0)
    low = dt if dt != torch.float64 else torch.float32
    check(dscale, ds_ref, low, "dscale", scale=2.0)
    check(dbias, db_ref, low, "dbias")
    inv_rms = torch.empty_like(mean)
    norms.rms_norm_forward(x, torch.empty_like(x), scale, inv_rms, 1, 1e-5, 1.0, 0.0)
    dx = poisoned((R, K), "NCHW", dt)
    dscale = torch.full((K,), float("nan"), device=DEVICE)
    norms.rms_norm_backward(x, dy, dx, scale, dscale, inv_rms if saved else None, 1, 1.0, 0.0, epsilon=1e-5)
    dx_ref, ds_ref = ref_norm.rms_norm_backward(f64(x), f64(dy), f64(scale), 1, 1e-5)
    check(dx, dx_ref, dt, "rms dx", scale=3.0)
    check(dscale, ds_ref, low, "rms dscale", scale=2.0)


@pytest.mark.parametrize("which", ["both", "dscale only", "dbias only"])
def test_param_sums_joint_one_gradient_or_both(which, rng, monkeypatch):
    """PARAM_SUMS "joint" with one of the parameter gradients not asked for: the other is
    still right and nothing is written for the missing one."""
    monkeypatch.setattr(norms, "PARAM_SUMS", "joint")
    x, scale, _ = _rows(torch.float32, rng)
    dy = make((R, K), "NCHW", rng=rng)
    dscale = torch.full((K,), float("nan"), device=DEVICE) if which != "dbias only" else None
    dbias = torch.full((K,), float("nan"), device=DEVICE) if which != "dscale only" else None
    norms.layer_norm_backward(x, dy, torch.empty_like(x), scale, dscale, dbias, None, None, 1, 1.0, 0.0)
    _, ds_ref, db_ref = ref_norm.layer_norm_backward(f64(x), f64(dy), f64(scale), 1, 1e-5)
    if dscale is not None:
        check(dscale, ds_ref, torch.float32, "dscale", scale=2.0)
    if dbias is not None:
        check(dbias, db_ref, torch.float32, "dbias")


@pytest.mark.parametrize("rows,k", [(150, 100), (3, 70), (64, 64)])
def test_param_sums_kernel_adds_every_partial_row(rows, k, rng):
    """_param_sums over more partial rows than a tile (150 > 64: three row steps, the last
    ragged) and columns that do not fill the last tile, into strided outputs."""
    part = torch.as_tensor(rng.standard_normal((rows, 2, k)), dtype=torch.float32, device=DEVICE)
    ds_buf = torch.full((2 * k,), float("nan"), device=DEVICE)
    db_buf = torch.full((3 * k,), float("nan"), device=DEVICE)
    ds, db = ds_buf[::2], db_buf[::3]
    norms._param_sums(part.reshape(-1), rows, k, ds, db)
    p = f64(part)
    check(ds, p[:, 0].sum(0), torch.float32, "dscale")
    check(db, p[:, 1].sum(0), torch.float32, "dbias")
    assert torch.isnan(ds_buf[1::2]).all() and torch.isnan(db_buf[1::3]).all() and torch.isnan(db_buf[2::3]).all()


# -- dropout: vec8 -----------------------------------------------------------------------------
VEC8_CASES = [((3, 5, 4, 6), 0), ((2, 5, 3, 8), 2**40 + 4), ((2, 3, 4, 6), 2**64 - 8), ((1, 3, 5, 7), 20)]


@pytest.mark.parametrize("shape,offset", VEC8_CASES, ids=["ragged", "odd-first-block", "wraps", "odd-numel"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@pytest.mark.parametrize("load_first", [False, True], ids=["load-after", "load-first"])
def test_dropout_vec8_draws_the_same_mask(shape, offset, dtype, load_first, rng, monkeypatch):
    """FLAT_KERNEL "vec8" (programs of 32 elements, a ragged last one), data loaded after
    or before the draws (LOAD_FIRST): the mask bit for bit as the NumPy backend and the
    groups4 kernel; y and dx against float64."""
    calls = []
    monkeypatch.setattr(dropout, "VEC8_BLOCK", 32)
    monkeypatch.setattr(dropout, "LOAD_FIRST", load_first)
    for name in ("_dropout_flat_kernel", "_dropout_vec8_kernel", "_dropout_element_kernel"):
        monkeypatch.setattr(dropout, name, _Recorder(getattr(dropout, name), name, calls))
    dt = DTYPES[dtype]
    x = make(shape, "NCHW", dt, rng=rng)
    seed = 2**40 + 12345
    masks = {}
    for kernel in ("groups4", "vec8"):
        monkeypatch.setattr(dropout, "FLAT_KERNEL", kernel)
        y = poisoned(shape, "NCHW", dt)
        reserve = torch.full(shape, 9, dtype=torch.uint8, device=DEVICE)
        dropout.dropout_forward(x, y, reserve, 0.3, seed, offset)
        mask = reserve.cpu().numpy()
        np.testing.assert_array_equal(mask, cpu_dropout.dropout_mask(shape, 0.3, seed, offset))
        check(y, np.where(mask == 1, f64(x) / 0.7, 0.0), dt, "y")
        dy = make(shape, "NCHW", dt, rng=rng)
        dx = poisoned(shape, "NCHW", dt)
        dropout.dropout_backward(dy, dx, reserve, 0.3)
        check(dx, np.where(mask == 1, f64(dy) / 0.7, 0.0), dt, "dx")
        masks[kernel] = mask
    assert calls == ["_dropout_flat_kernel"] * 2 + ["_dropout_vec8_kernel"] * 2
    np.testing.assert_array_equal(masks["vec8"], masks["groups4"])


@pytest.mark.parametrize("p", [0.0, 0.5, 0.9, 1.0 - 2.0**-40])
def test_dropout_vec8_keep_test_at_the_thresholds(p, rng, monkeypatch):
    """The two-compare keep test (v >= t or v < -t) is _fold's (-v - 1 >= t for v < 0) for
    every threshold, 0 (keep all) and 2**31 (keep none) included; also NaN/inf are zeroed
    where dropped."""
    monkeypatch.setattr(dropout, "FLAT_KERNEL", "vec8")
    monkeypatch.setattr(dropout, "VEC8_BLOCK", 64)
    shape = (4, 100)
    values = rng.standard_normal(shape)
    values[0, :4] = [np.nan, np.inf, -np.inf, np.nan]
    x = make(shape, "NCHW", values=values)
    y = poisoned(shape, "NCHW")
    reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x, y, reserve, p, 77, 8)
    mask = cpu_dropout.dropout_mask(shape, p, 77, 8)
    np.testing.assert_array_equal(reserve.cpu().numpy(), mask)
    want = np.where(mask == 1, values / (1.0 - p), 0.0)
    got = f64(y)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    fin = np.isfinite(want)
    check(got[fin], want[fin], torch.float32, "y")
    if p == 0.0:
        assert mask.all()
    if p > 0.99:
        assert not mask.any()


def test_dropout_vec8_leaves_other_layouts_to_their_kernels(rng, monkeypatch):
    """vec8 replaces only the dense kernel: NHWC keeps the tile kernel, an offset not a
    multiple of 4 the per-element kernel."""
    calls = []
    monkeypatch.setattr(dropout, "FLAT_KERNEL", "vec8")
    for name in ("_dropout_vec8_kernel", "_dropout_split_kernel", "_dropout_element_kernel"):
        monkeypatch.setattr(dropout, name, _Recorder(getattr(dropout, name), name, calls))
    monkeypatch.setattr(dropout, "NHWC_DRAW", "split")
    shape = (2, 3, 2, 8)
    for layout, offset in (("NHWC", 16), ("NCHW", 5)):
        x = make(shape, layout, rng=rng)
        reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
        dropout.dropout_forward(x, poisoned(shape, layout), reserve, 0.5, 3, offset)
        np.testing.assert_array_equal(reserve.cpu().numpy(), cpu_dropout.dropout_mask(shape, 0.5, 3, offset))
    assert calls == ["_dropout_split_kernel", "_dropout_element_kernel"]
    monkeypatch.setattr(dropout, "FLAT_KERNEL", "vec4")
    with pytest.raises(ValueError, match="FLAT_KERNEL"):
        dropout.dropout_forward(x, poisoned(shape, "NCHW"), reserve, 0.5, 3, 0)


@pytest.mark.parametrize("layout", ["NHWC", "strided"])
@pytest.mark.parametrize("thread_elements", [32, 1])
def test_dropout_split_load_first(layout, thread_elements, rng, monkeypatch):
    """The NHWC split kernel with LOAD_FIRST (the four data tiles loaded before the draws):
    the NCHW mask bit for bit, y and dx against float64, in place too (x is y)."""
    calls = []
    monkeypatch.setattr(dropout, "NHWC_DRAW", "split")
    monkeypatch.setattr(dropout, "LOAD_FIRST", True)
    monkeypatch.setattr(dropout, "SPLIT_THREAD_ELEMENTS", thread_elements)
    monkeypatch.setattr(dropout, "TILE_W", 8)
    monkeypatch.setattr(dropout, "TILE_ELEMENTS", 32)
    monkeypatch.setattr(dropout, "_dropout_split_kernel", _Recorder(dropout._dropout_split_kernel, "split", calls))
    shape, seed, offset = (2, 5, 3, 20), 2**33 + 7, 2**40 + 12
    x = make(shape, layout, rng=rng)
    want_mask = cpu_dropout.dropout_mask(shape, 0.4, seed, offset)
    y = poisoned(shape, layout)
    reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x, y, reserve, 0.4, seed, offset)
    np.testing.assert_array_equal(reserve.cpu().numpy(), want_mask)
    check(y, np.where(want_mask == 1, f64(x) / 0.6, 0.0), torch.float32, "y")
    inplace = x.clone()
    dropout.dropout_forward(inplace, inplace, reserve, 0.4, seed, offset)
    check(inplace, np.where(want_mask == 1, f64(x) / 0.6, 0.0), torch.float32, "y in place")
    dy = make(shape, layout, rng=rng)
    dx = poisoned(shape, layout)
    dropout.dropout_backward(dy, dx, reserve, 0.4)
    check(dx, np.where(want_mask == 1, f64(dy) / 0.6, 0.0), torch.float32, "dx")
    assert calls[:2] == ["split", "split"]


# -- dropout: the dense NHWC octets kernel -----------------------------------------------------
OCTET_CASES = [((2, 24, 3, 4), 0), ((3, 16, 2, 6), 2**40 + 4), ((1, 8, 4, 5), 2**64 - 8)]


@pytest.mark.parametrize("shape,offset", OCTET_CASES, ids=["ragged-octets", "odd-first-block", "wraps"])
@pytest.mark.parametrize("aligned,warps", [(True, None), (False, None), (True, 1)],
                         ids=["int32-words", "unaligned-reserve", "int32-words-1-warp"])
def test_dropout_octets_draws_the_same_mask(shape, offset, aligned, warps, rng, monkeypatch):
    """NHWC_DENSE_KERNEL "octets" on dense NHWC float16 (programs of 2 octets x 4 groups:
    ragged octet and group blocks): the mask bit for bit as the NumPy backend and the
    split kernel, y against float64, in place too (x is y); a reserve whose start is not
    4-byte aligned leaves octets to the other kernels; dx through the backward."""
    calls = []
    monkeypatch.setattr(dropout, "OCTETS_BLOCK_O", 2)
    monkeypatch.setattr(dropout, "OCTETS_ROWS", 8)
    monkeypatch.setattr(dropout, "OCTETS_WARPS", warps)
    for name in ("_dropout_octets_kernel", "_dropout_split_kernel"):
        monkeypatch.setattr(dropout, name, _Recorder(getattr(dropout, name), name, calls))
    monkeypatch.setattr(dropout, "NHWC_DRAW", {"forward": "split", "backward": "reload"})
    dt = torch.float16
    x = make(shape, "NHWC", dt, rng=rng)
    seed = 2**40 + 12345
    numel = x.numel()
    want = cpu_dropout.dropout_mask(shape, 0.3, seed, offset)
    masks, passes = {}, []
    for kernel in (None, "octets"):  # None: split (W % 4 == 0) or the per-element kernel
        monkeypatch.setattr(dropout, "NHWC_DENSE_KERNEL", kernel)
        buf = torch.full((numel + 4,), 9, dtype=torch.uint8, device=DEVICE)
        reserve = buf[:numel] if aligned else buf[1:numel + 1]
        y = poisoned(shape, "NHWC", dt)
        dropout.dropout_forward(x, y, reserve, 0.3, seed, offset)
        mask = reserve.cpu().numpy().reshape(shape)
        np.testing.assert_array_equal(mask, want)
        check(y, np.where(mask == 1, f64(x) / 0.7, 0.0), dt, "y")
        inplace = x.clone()
        dropout.dropout_forward(inplace, inplace, reserve, 0.3, seed, offset)
        check(inplace, np.where(mask == 1, f64(x) / 0.7, 0.0), dt, "y in place")
        dy = make(shape, "NHWC", dt, rng=rng)
        dx = poisoned(shape, "NHWC", dt)
        dropout.dropout_backward(dy, dx, reserve, 0.3)
        check(dx, np.where(mask == 1, f64(dy) / 0.7, 0.0), dt, "dx")
        masks[kernel] = mask
        passes.append(calls[:])
        calls.clear()
    octets = ["_dropout_octets_kernel"] * 2 if aligned else []  # an unaligned reserve: the other kernels
    assert "_dropout_octets_kernel" not in passes[0]
    assert [k for k in passes[1] if k == "_dropout_octets_kernel"] == octets
    np.testing.assert_array_equal(masks["octets"], masks[None])


@pytest.mark.parametrize("p", [0.0, 0.9, 1.0 - 2.0**-40])
def test_dropout_octets_keep_test_at_the_thresholds(p, rng, monkeypatch):
    """The octets kernel's keep test at the extreme thresholds (0: keep all; 2**31: keep
    none), NaN and inf zeroed where dropped and kept as they are (scaled) elsewhere."""
    monkeypatch.setattr(dropout, "NHWC_DENSE_KERNEL", "octets")
    monkeypatch.setattr(dropout, "_dropout_split_kernel", None)  # must not be reached
    shape = (2, 8, 2, 2)
    values = rng.standard_normal(shape)
    values[0, :4, 0, 0] = [np.nan, np.inf, -np.inf, np.nan]
    x = make(shape, "NHWC", torch.float16, values=values)
    y = poisoned(shape, "NHWC", torch.float16)
    reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x, y, reserve, p, 77, 8)
    mask = cpu_dropout.dropout_mask(shape, p, 77, 8)
    np.testing.assert_array_equal(reserve.cpu().numpy(), mask)
    want = np.where(mask == 1, f64(x) / (1.0 - p), 0.0)
    got = f64(y)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    fin = np.isfinite(want)
    check(got[fin], want[fin], torch.float16, "y")
    if p == 0.0:
        assert mask.all()
    if p > 0.99:
        assert not mask.any()


def test_dropout_octets_leaves_other_cases_to_their_kernels(rng, monkeypatch):
    """Only dense NHWC 16-bit data with C % 8 == 0, H * W % 4 == 0 and an offset that is
    a multiple of 4 takes the octets kernel (forward only); the rest keeps its kernel and
    the same mask."""
    calls = []
    monkeypatch.setattr(dropout, "NHWC_DENSE_KERNEL", "octets")
    monkeypatch.setattr(dropout, "NHWC_DRAW", {"forward": "split", "backward": "reload"})
    for name in ("_dropout_octets_kernel", "_dropout_split_kernel", "_dropout_element_kernel",
                 "_dropout_vec8_kernel", "_dropout_tile_kernel"):
        monkeypatch.setattr(dropout, name, _Recorder(getattr(dropout, name), name, calls))
    cases = [((2, 8, 2, 4), "NHWC", torch.float16, 0, "_dropout_octets_kernel"),
             ((2, 8, 2, 4), "NHWC", torch.float32, 0, "_dropout_split_kernel"),      # float32
             ((2, 12, 2, 4), "NHWC", torch.float16, 0, "_dropout_split_kernel"),     # C % 8
             ((2, 8, 2, 4), "strided", torch.float16, 0, "_dropout_split_kernel"),   # not dense
             ((2, 8, 2, 4), "NCHW", torch.float16, 0, "_dropout_vec8_kernel"),
             ((2, 8, 2, 4), "NHWC", torch.float16, 6, "_dropout_element_kernel")]   # offset % 4
    for shape, layout, dt, offset, kernel in cases:
        calls.clear()
        x = make(shape, layout, dt, rng=rng)
        reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
        y = poisoned(shape, layout, dt)
        dropout.dropout_forward(x, y, reserve, 0.5, 3, offset)
        mask = cpu_dropout.dropout_mask(shape, 0.5, 3, offset)
        np.testing.assert_array_equal(reserve.cpu().numpy(), mask)
        check(y, np.where(mask == 1, f64(x) * 2.0, 0.0), dt, "y")
        dropout.dropout_backward(x, y, reserve, 0.5)
        assert calls[0] == kernel and "_dropout_octets_kernel" not in calls[1:], (shape, layout, dt, offset, calls)
    monkeypatch.setattr(dropout, "NHWC_DENSE_KERNEL", "cl")
    with pytest.raises(ValueError, match="NHWC_DENSE_KERNEL"):
        dropout.dropout_forward(x, y, reserve, 0.5, 3, 0)


def test_dropout_octets_keep_from_words(rng, monkeypatch):
    """OCTETS_KEEP_FROM_WORDS (keep bits read back out of the mask words through inline
    PTX: GPU only; off the GPU the switch is ignored): the NumPy mask and y, dx against
    float64, programs of 2 octets x 4 groups."""
    monkeypatch.setattr(dropout, "NHWC_DENSE_KERNEL", "octets")
    monkeypatch.setattr(dropout, "OCTETS_KEEP_FROM_WORDS", True)
    monkeypatch.setattr(dropout, "OCTETS_BLOCK_O", 2)
    monkeypatch.setattr(dropout, "OCTETS_ROWS", 8)
    shape, seed, offset = (2, 24, 3, 4), 99, 2**40 + 4
    x = make(shape, "NHWC", torch.float16, rng=rng)
    y = poisoned(shape, "NHWC", torch.float16)
    reserve = torch.empty(shape, dtype=torch.uint8, device=DEVICE)
    dropout.dropout_forward(x, y, reserve, 0.25, seed, offset)
    mask = cpu_dropout.dropout_mask(shape, 0.25, seed, offset)
    np.testing.assert_array_equal(reserve.cpu().numpy(), mask)
    check(y, np.where(mask == 1, f64(x) / 0.75, 0.0), torch.float16, "y")
