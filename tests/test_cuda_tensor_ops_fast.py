"""The fast paths of tensor_ops (issue 5) against float64: the NCHW bias add that loads
one bias value a 16-byte vector (BIAS_KERNEL "planes"), the reduction of back-to-back rows
as contiguous runs (CONTIGUOUS_ROWS_KERNEL "runs") or a resident wave of programs each a
run of rows loaded one ahead ("ahead"), and NHWC tiles of 256 channels
(STRIDED_ROWS_BLOCK_K). Tiny shapes under the interpreter; the steps and rows a program
are shrunk so every kernel runs several programs with a ragged last one."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import pooling, tensor_ops  # noqa: E402
from test_cuda_layers import DEVICE, _Recorder, check, f64, make, poisoned  # noqa: E402


@pytest.fixture(autouse=True)
def triton_reductions(monkeypatch):
    """These tests are about the Triton reduction kernels: on a Hopper GPU, sums over H and
    W of channels-last data would go to gluon_stream instead (tested by
    test_gluon_stream_routing), so that route is off here."""
    monkeypatch.setattr(tensor_ops, "GLUON_STREAM", False)


REDUCE_REF = {0: lambda v, ax: v.sum(ax, keepdims=True), 1: lambda v, ax: v.prod(ax, keepdims=True),
              5: lambda v, ax: v.mean(ax, keepdims=True), 6: lambda v, ax: np.abs(v).sum(ax, keepdims=True),
              7: lambda v, ax: np.sqrt((v * v).sum(ax, keepdims=True)),
              8: lambda v, ax: np.where(v == 0, 1.0, v).prod(ax, keepdims=True)}
OP_IDS = {0: "ADD", 1: "MUL", 5: "AVG", 6: "NORM1", 7: "NORM2", 8: "MUL_NO_ZEROS"}


def _values(shape, op, rng):
    if op in (1, 8):  # products of ~1000 values stay finite near 1
        v = 1.0 + 0.01 * rng.standard_normal(shape)
        if op == 8:
            v[rng.random(shape) < 0.1] = 0.0
        return v
    return rng.standard_normal(shape)


# -- bias add --------------------------------------------------------------------------
@pytest.mark.parametrize("shape,bias_shape,dtype,fast", [
    ((2, 3, 4, 8), (1, 3, 1, 1), torch.float32, True),   # planes of 32, 4-element vectors
    ((2, 3, 4, 8), (1, 3, 1, 1), torch.float16, True),   # 8-element vectors
    ((3, 5, 2, 6), (1, 5, 1, 1), torch.float32, True),   # odd sizes: planes of 12, 90 programs' worth
    ((3, 5, 2, 6), (1, 5, 1, 1), torch.float16, False),  # 12 % 8: the generic kernel
    ((3, 5, 2, 6), (3, 1, 1, 1), torch.float32, True),   # a value per image: runs of C * H * W
    ((2, 3, 4, 8), (1, 1, 4, 8), torch.float32, False),  # varies along the innermost dim: generic
])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 0.0), (2.0, -1.5)])
def test_add_tensor_bias_planes(shape, bias_shape, dtype, fast, alpha, beta, rng, monkeypatch):
    calls = []
    monkeypatch.setattr(tensor_ops, "BIAS_KERNEL", "planes")
    monkeypatch.setattr(tensor_ops, "BIAS_BLOCK", 16)  # several programs, a ragged last one
    monkeypatch.setattr(tensor_ops, "_bias_runs_kernel", _Recorder(tensor_ops._bias_runs_kernel, "planes", calls))
    monkeypatch.setattr(tensor_ops, "_pointwise_kernel", _Recorder(tensor_ops._pointwise_kernel, "generic", calls))
    bias = make(bias_shape, "NCHW", dtype, rng=rng)
    c = poisoned(shape, "NCHW", dtype) if beta == 0.0 else make(shape, "NCHW", dtype, rng=rng)
    old = np.nan_to_num(f64(c))
    tensor_ops.add_tensor(bias.expand(shape), c, alpha, beta)
    check(c, alpha * np.broadcast_to(f64(bias), shape) + beta * old, dtype, "c")
    assert calls == ["planes" if fast else "generic"]


@pytest.mark.parametrize("layout", ["NHWC", "strided"])
def test_add_tensor_bias_planes_other_layouts_take_the_generic_kernel(layout, rng, monkeypatch):
    """NHWC (runs of one element) and non-dense c keep _pointwise_kernel, still right."""
    calls = []
    monkeypatch.setattr(tensor_ops, "BIAS_KERNEL", "planes")
    monkeypatch.setattr(tensor_ops, "_bias_runs_kernel", _Recorder(tensor_ops._bias_runs_kernel, "planes", calls))
    shape = (2, 3, 4, 8)
    bias = make((1, 3, 1, 1), "NCHW", rng=rng)
    c = make(shape, layout, rng=rng)
    old = f64(c)
    tensor_ops.add_tensor(bias.expand(shape), c, 2.0, 0.5)
    check(c, 2.0 * np.broadcast_to(f64(bias), shape) + 0.5 * old, torch.float32, "c")
    assert calls == []


# -- reductions of back-to-back rows ---------------------------------------------------
@pytest.mark.parametrize("op", list(OP_IDS), ids=OP_IDS.get)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.5)])
def test_reduce_runs(op, dtype, alpha, beta, rng, monkeypatch):
    """NCHW over H, W: 15 rows of 1056, 4 rows a program (the last takes 3), steps of 256
    elements (a step spans two rows), against float64 of the rounded inputs."""
    calls = []
    monkeypatch.setattr(tensor_ops, "CONTIGUOUS_ROWS_KERNEL", "runs")
    monkeypatch.setattr(tensor_ops, "RUNS_ROWS", 4)
    monkeypatch.setattr(tensor_ops, "RUNS_BLOCK", 256)
    monkeypatch.setattr(tensor_ops, "_reduce_runs_kernel", _Recorder(tensor_ops._reduce_runs_kernel, "runs", calls))
    monkeypatch.setattr(tensor_ops, "_reduce_kernel", _Recorder(tensor_ops._reduce_kernel, "rows", calls))
    shape = (3, 5, 32, 33)
    a = make(shape, "NCHW", dtype, values=_values(shape, op, rng))
    v = f64(a)
    c = poisoned((3, 5, 1, 1), "NCHW", dtype) if beta == 0.0 else make((3, 5, 1, 1), "NCHW", dtype, rng=rng)
    old = np.nan_to_num(f64(c))
    tensor_ops.reduce_tensor(a, c, None, None, op, alpha, beta, False)
    want = alpha * REDUCE_REF[op](v, (2, 3)) + beta * old
    check(c, want, dtype, "c", scale=10.0 if dtype == torch.float16 and op in (0, 6, 7) else 1.0)
    assert calls == ["runs"]
    first = f64(c)
    if beta == 0.0:  # deterministic: the same bits again
        tensor_ops.reduce_tensor(a, c, None, None, op, alpha, beta, False)
        np.testing.assert_array_equal(f64(c), first)


@pytest.mark.parametrize("case", ["whole tensor", "NHWC", "short rows", "indices", "nan"])
def test_reduce_runs_only_where_it_applies(case, rng, monkeypatch):
    """With "runs" on: a single row (the whole tensor) takes it; NHWC rows, rows under
    1024 and MIN/MAX with indices take _reduce_kernel; NaN propagates through a sum."""
    calls = []
    monkeypatch.setattr(tensor_ops, "CONTIGUOUS_ROWS_KERNEL", "runs")
    monkeypatch.setattr(tensor_ops, "RUNS_BLOCK", 256)
    monkeypatch.setattr(tensor_ops, "_reduce_runs_kernel", _Recorder(tensor_ops._reduce_runs_kernel, "runs", calls))
    monkeypatch.setattr(tensor_ops, "_reduce_kernel", _Recorder(tensor_ops._reduce_kernel, "rows", calls))
    shape, layout, op, c_shape = {
        "whole tensor": ((2, 3, 16, 24), "NCHW", 0, (1, 1, 1, 1)),
        "NHWC": ((2, 3, 32, 33), "NHWC", 0, (2, 3, 1, 1)),
        "short rows": ((2, 3, 8, 9), "NCHW", 5, (2, 3, 1, 1)),
        "indices": ((2, 3, 32, 33), "NCHW", 3, (2, 3, 1, 1)),
        "nan": ((2, 3, 32, 33), "NCHW", 0, (2, 3, 1, 1)),
    }[case]
    values = rng.standard_normal(shape)
    if case == "nan":
        values[1, 2, 5, 7] = np.nan
    a = make(shape, layout, values=values)
    c = poisoned(c_shape, "NCHW")
    idx = torch.full(c_shape, -1, dtype=torch.int32, device=DEVICE) if op == 3 else None
    tensor_ops.reduce_tensor(a, c, idx, None, op, 1.0, 0.0, False)
    axes = tuple(i for i in range(4) if c_shape[i] == 1)
    want = {0: values.sum(axes, keepdims=True), 5: values.mean(axes, keepdims=True),
            3: values.max(axes, keepdims=True)}[op]
    check(c, want, torch.float32, "c")
    if case == "nan":
        assert np.isnan(f64(c)).sum() == 1 and np.isnan(f64(c)[1, 2, 0, 0])
    if op == 3:
        want_idx = values.reshape(2, 3, -1).argmax(-1)
        np.testing.assert_array_equal(idx.reshape(2, 3).cpu().numpy(), want_idx)
    assert calls == (["runs"] if case in ("whole tensor", "nan") else ["rows"])


@pytest.mark.parametrize("layout,runs", [("NCHW", True), ("NHWC", False)])
def test_global_average_pool_through_runs(layout, runs, rng, monkeypatch):
    """Global average pooling (pooling._global_as_reduction -> reduce_tensor AVG)."""
    calls = []
    monkeypatch.setattr(tensor_ops, "CONTIGUOUS_ROWS_KERNEL", "runs")
    monkeypatch.setattr(tensor_ops, "RUNS_BLOCK", 512)
    monkeypatch.setattr(tensor_ops, "_reduce_runs_kernel", _Recorder(tensor_ops._reduce_runs_kernel, "runs", calls))
    x = make((2, 6, 32, 32), layout, rng=rng)
    y = poisoned((2, 6, 1, 1), layout)
    pooling.adaptive_pooling_forward(x, y, 1, 1.0, 0.0)
    check(y, f64(x).mean((2, 3), keepdims=True), torch.float32, "y")
    assert calls == (["runs"] if runs else [])


# -- rows loaded one ahead ---------------------------------------------------------------
@pytest.mark.parametrize("op", list(OP_IDS), ids=OP_IDS.get)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (2.0, 0.5)])
@pytest.mark.parametrize("view", ["packed", "channel slice"])
def test_reduce_ahead(op, dtype, alpha, beta, view, rng, monkeypatch):
    """NCHW over H, W with CONTIGUOUS_ROWS_KERNEL "ahead": 15 rows of 1056 in steps of 256
    (5 steps, a tile of 8, the last ragged), 4 "SMs" x 1 program: runs of 4 rows, the last
    of 3; rows packed or a channel slice of a wider tensor (rows not back to back). Against
    float64, and (interpreter) the same values as "rows" (the same fold order)."""
    calls = []
    monkeypatch.setattr(tensor_ops, "CONTIGUOUS_ROWS_BLOCK_R", 256)
    monkeypatch.setattr(tensor_ops, "AHEAD_BLOCK_R", 256)  # the same steps as "rows": the same fold order
    monkeypatch.setattr(tensor_ops, "AHEAD_PROGRAMS_PER_SM", 1)
    monkeypatch.setattr(tensor_ops, "_reduce_ahead_kernel", _Recorder(tensor_ops._reduce_ahead_kernel, "ahead", calls))
    monkeypatch.setattr(tensor_ops, "_reduce_kernel", _Recorder(tensor_ops._reduce_kernel, "rows", calls))
    shape = (3, 5, 32, 33)
    if view == "packed":
        a = make(shape, "NCHW", dtype, values=_values(shape, op, rng))
    else:
        a = make((3, 7, 32, 33), "NCHW", dtype, values=_values((3, 7, 32, 33), op, rng))[:, 1:6]
    v = f64(a)
    prior = make((3, 5, 1, 1), "NCHW", dtype, rng=rng)
    got = {}
    for kernel in ("ahead", "rows"):
        monkeypatch.setattr(tensor_ops, "CONTIGUOUS_ROWS_KERNEL", kernel)
        c = poisoned((3, 5, 1, 1), "NCHW", dtype) if beta == 0.0 else prior.clone()
        tensor_ops.reduce_tensor(a, c, None, None, op, alpha, beta, False)
        want = alpha * REDUCE_REF[op](v, (2, 3)) + beta * f64(prior)
        check(c, want, dtype, "c", scale=10.0 if dtype == torch.float16 and op in (0, 6, 7) else 1.0)
        got[kernel] = f64(c)
    assert calls == ["ahead", "rows"]
    if DEVICE == "cpu":  # the same fold order; on a GPU the lane layouts decide (the sweep reports it)
        np.testing.assert_array_equal(got["ahead"], got["rows"])


@pytest.mark.parametrize("case", ["NHWC", "short rows", "long rows", "indices", "nan"])
def test_reduce_ahead_only_where_it_applies(case, rng, monkeypatch):
    """With "ahead" on: NHWC rows, rows of 1024 or fewer, rows over 8 steps and MIN/MAX
    take _reduce_kernel; NaN propagates through an "ahead" sum."""
    calls = []
    monkeypatch.setattr(tensor_ops, "CONTIGUOUS_ROWS_KERNEL", "ahead")
    monkeypatch.setattr(tensor_ops, "_reduce_ahead_kernel", _Recorder(tensor_ops._reduce_ahead_kernel, "ahead", calls))
    monkeypatch.setattr(tensor_ops, "_reduce_kernel", _Recorder(tensor_ops._reduce_kernel, "rows", calls))
    if case == "long rows":
        monkeypatch.setattr(tensor_ops, "AHEAD_BLOCK_R", 128)  # 1056 = 9 steps
    shape, layout, op = {"NHWC": ((2, 3, 32, 33), "NHWC", 0), "short rows": ((2, 3, 32, 32), "NCHW", 5),
                         "long rows": ((2, 3, 32, 33), "NCHW", 0), "indices": ((2, 3, 32, 33), "NCHW", 3),
                         "nan": ((2, 3, 32, 33), "NCHW", 0)}[case]
    values = rng.standard_normal(shape)
    if case == "nan":
        values[1, 2, 5, 7] = np.nan
    a = make(shape, layout, values=values)
    c = poisoned((2, 3, 1, 1), "NCHW")
    tensor_ops.reduce_tensor(a, c, None, None, op, 1.0, 0.0, False)
    want = {0: values.sum((2, 3), keepdims=True), 5: values.mean((2, 3), keepdims=True),
            3: values.max((2, 3), keepdims=True)}[op]
    check(c, want, torch.float32, "c")
    if case == "nan":
        assert np.isnan(f64(c)).sum() == 1 and np.isnan(f64(c)[1, 2, 0, 0])
    assert calls == (["ahead"] if case == "nan" else ["rows"])


# -- NHWC tiles of 256 channels ----------------------------------------------------------
@pytest.mark.parametrize("op", list(OP_IDS), ids=OP_IDS.get)
@pytest.mark.parametrize("combine", ["kernel", "last"])
def test_reduce_nhwc_wide_channel_tiles(op, combine, rng, monkeypatch):
    """NHWC over H, W with 256-channel tiles (C = 160: one masked tile an image), 4
    positions a step, cut into 3 parts; alpha and beta."""
    monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_BLOCK_K", 256)
    monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_BLOCK_R", 4)
    monkeypatch.setattr(tensor_ops, "STRIDED_ROWS_STAGES", None)
    monkeypatch.setattr(tensor_ops, "REDUCE_SPLIT", 3)
    monkeypatch.setattr(tensor_ops, "SPLIT_COMBINE", combine)
    monkeypatch.setattr(tensor_ops, "_COUNTERS", {})
    shape = (2, 160, 3, 5)
    a = make(shape, "NHWC", values=_values(shape, op, rng))
    c = make((2, 160, 1, 1), "NCHW", rng=rng)
    old = f64(c)
    tensor_ops.reduce_tensor(a, c, None, None, op, 2.0, 0.5, False)
    check(c, 2.0 * REDUCE_REF[op](f64(a), (2, 3)) + 0.5 * old, torch.float32, "c")


# -- issue 5, session 6: two rows in flight, the split's rounding ---------------------------
@pytest.mark.parametrize("op", [0, 1, 5, 7], ids=[OP_IDS[o] for o in (0, 1, 5, 7)])
@pytest.mark.parametrize("per_sm", [1, 3], ids=["runs-of-4-and-3", "runs-of-2-and-1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_reduce_ahead_depth2(op, per_sm, dtype, rng, monkeypatch):
    """AHEAD_DEPTH 2 (the next two rows in flight) with alpha and beta on 15 rows of 1056
    (a channel slice: rows not back to back) in runs of 4 (last 3) or 2 (last 1), and with
    AHEAD_WARPS 2: against float64 and bit for bit the depth-1 sums (the same fold)."""
    calls = []
    monkeypatch.setattr(tensor_ops, "CONTIGUOUS_ROWS_KERNEL", "ahead")
    monkeypatch.setattr(tensor_ops, "AHEAD_BLOCK_R", 256)
    monkeypatch.setattr(tensor_ops, "AHEAD_PROGRAMS_PER_SM", per_sm)  # 4 "SMs" off the GPU
    monkeypatch.setattr(tensor_ops, "_reduce_ahead_kernel", _Recorder(tensor_ops._reduce_ahead_kernel, "ahead", calls))
    a = make((3, 7, 32, 33), "NCHW", dtype, values=_values((3, 7, 32, 33), op, rng))[:, 1:6]
    prior = make((3, 5, 1, 1), "NCHW", dtype, rng=rng)
    want = 2.0 * REDUCE_REF[op](f64(a), (2, 3)) + 0.5 * f64(prior)
    got = []
    for depth, warps in ((1, None), (2, None), (2, 2)):
        monkeypatch.setattr(tensor_ops, "AHEAD_DEPTH", depth)
        monkeypatch.setattr(tensor_ops, "AHEAD_WARPS", warps)
        c = prior.clone()
        tensor_ops.reduce_tensor(a, c, None, None, op, 2.0, 0.5, False)
        check(c, want, dtype, "c", scale=10.0 if dtype == torch.float16 and op in (0, 7) else 1.0)
        got.append(f64(c))
    assert calls == ["ahead"] * 3
    np.testing.assert_array_equal(got[1], got[0])
    if DEVICE == "cpu":  # the interpreter's fold does not depend on the warps
        np.testing.assert_array_equal(got[2], got[0])
    monkeypatch.setattr(tensor_ops, "AHEAD_DEPTH", 3)
    with pytest.raises(ValueError, match="AHEAD_DEPTH"):
        tensor_ops.reduce_tensor(a, prior.clone(), None, None, op, 1.0, 0.0, False)


def test_split_parts_rounding(monkeypatch):
    """SPLIT_ROUND: parts = ceil or floor of (SMs x SPLIT_PROGRAMS_PER_SM) / row blocks,
    at least 1, at most the steps of a row; no split when the row blocks fill half of it."""
    from types import SimpleNamespace
    from tridnn.cuda import common
    monkeypatch.setattr(common, "sm_count", lambda device: 132)
    monkeypatch.setattr(tensor_ops, "REDUCE_SPLIT", None)
    monkeypatch.setattr(tensor_ops, "SPLIT_PROGRAMS_PER_SM", 4)
    a = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    parts = lambda K, R: tensor_ops._split_parts(a, 0, K, R, 64, 128, True)  # noqa: E731
    expect = {"up": {16384: 3, 64 * 64: 9, 64 * 300: 1, 64 * 32: 2}, "down": {16384: 2, 64 * 64: 8, 64 * 300: 1,
                                                                                 64 * 32: 2}}
    for rounding, table in expect.items():
        monkeypatch.setattr(tensor_ops, "SPLIT_ROUND", rounding)
        for K, n in table.items():
            assert parts(K, 3136 if K != 64 * 32 else 200) == n, (rounding, K)  # R = 200: 2 steps at most
    assert tensor_ops._split_parts(a, 2, 16384, 3136, 64, 128, True) == 1  # MIN: no split
    monkeypatch.setattr(tensor_ops, "SPLIT_ROUND", "nearest")
    with pytest.raises(ValueError, match="SPLIT_ROUND"):
        parts(16384, 3136)

