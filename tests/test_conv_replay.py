"""The API fast path's replays (api/conv_fast_path.py, Algorithm.replay): a repeated call
with the same descriptors, addresses, alpha and beta launches the algorithm's launch
record directly, past its dispatch, plan, tuner and record lookups.

CPU: through the public API with a stand-in Hopper and the Gluon launches stubbed, which
calls run the algorithm and which replay, and that the per-call checks still come first.
GPU (``TRIDNN_GPU_TESTS=1 pytest --gpu tests/test_conv_replay.py``): forward, backward data
and backward filter replayed with new values written into the same tensors each call,
against float64.
"""
import pytest

torch = pytest.importorskip("torch")
gc = pytest.importorskip("tridnn.cuda.gluon_conv", reason="Triton without Gluon")

import tridnn  # noqa: E402
from tridnn.algorithms import registry  # noqa: E402
from tridnn.api import conv_fast_path  # noqa: E402
from tridnn.cuda import common, conv_tma, filter_turn, gluon_wgrad  # noqa: E402
from tridnn.cuda import conv_bwd_data_implicit_gemm as bwd  # noqa: E402
from tridnn.cuda import conv_bwd_filter_implicit_gemm as bwf  # noqa: E402
from tridnn.cuda import conv_implicit_gemm as fwd  # noqa: E402

from gluon_helpers import need_hopper  # noqa: E402
from problems import call_api  # noqa: E402

ALGO_NAME = {"fwd": "IMPLICIT_GEMM", "bwd_data": "ALGO_1", "bwd_filter": "ALGO_1"}
ALGO = {d: registry.by_enum("conv", d, "triton", tridnn.ConvFwdAlgo[a] if d == "fwd" else
                            (tridnn.ConvBwdDataAlgo if d == "bwd_data" else tridnn.ConvBwdFilterAlgo)[a])
        for d, a in ALGO_NAME.items()}


def _layer(c, hw, n, device):
    """Descriptors of a bf16 NHWC 3x3 layer, c -> c channels, and NaN-filled tensors (x, w, y)."""
    xd = tridnn.TensorDescriptor.nhwc(n, c, hw, hw, "bfloat16")
    wd = tridnn.FilterDescriptor((c, c, 3, 3), "bfloat16", tridnn.TensorFormat.NHWC)
    cd = tridnn.ConvolutionDescriptor(padding=1)
    yd = xd.with_dims(cd.output_dims(xd, wd))
    t = [torch.full(d.dims, float("nan"), dtype=torch.bfloat16, device=device)
         .contiguous(memory_format=torch.channels_last) for d in (xd, wd.as_tensor(), yd)]
    return (xd, wd, cd, yd), t


def _call(h, direction, descs, x, w, y, alpha, beta, ws=None):
    call_api(h, direction, descs, ALGO_NAME[direction], x, w, y, ws, alpha, beta)


def _count_runs(monkeypatch, direction) -> list:
    runs = []
    cls = type(ALGO[direction])
    real_run = cls.run
    monkeypatch.setattr(cls, "run", lambda self, *a, **k: runs.append(1) or real_run(self, *a, **k))
    return runs


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
def test_repeats_replay_the_record_past_the_dispatch(direction, monkeypatch):
    """The first two repeats of a call run the algorithm, which launches from its record, and
    the second leaves that record with the fast path; later repeats with the same addresses,
    alpha and beta launch it without running the algorithm. A new output tensor or a new
    alpha runs the algorithm twice again; a bad array is still rejected before any launch."""
    launched = []
    monkeypatch.setattr(gc, "_hopper", lambda device: True)  # a stand-in Hopper on the CPU
    monkeypatch.setattr(conv_tma, "sm_count", lambda device: 132)
    monkeypatch.setattr(conv_tma, "hardware_ok", lambda t: True)
    monkeypatch.setattr(gc, "launch", lambda grid, args, meta, y=None, kernel=None: launched.append(args))
    monkeypatch.setattr(gc, "_RECORDS", {})
    monkeypatch.setattr(filter_turn, "turned_filter", lambda w, flip=True, order=None, out=None:
                        torch.empty(64, 9 * 64, dtype=torch.bfloat16) if out is None else out)
    monkeypatch.setattr(filter_turn, "bound_turn", lambda *a, **k: None)
    cfg = dict(gc.PICKS_MEDIUM[0], GLUON=True)
    monkeypatch.setattr(fwd, "tma_forward_candidates", lambda *a, **k: [cfg])
    monkeypatch.setattr(bwd, "tma_candidates", lambda *a, **k: [cfg])
    monkeypatch.setattr(type(ALGO[direction]), "tuner", common.Tuner())
    runs = _count_runs(monkeypatch, direction)
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    descs, (x, w, y) = _layer(64, 8, 4, "cpu")
    out = "y" if direction == "fwd" else "x"
    fresh = lambda: torch.empty_like(y if direction == "fwd" else x)
    other = {out: fresh()}
    alpha2 = dict(alpha=2.0)
    steps = [({}, 1), ({}, 1), ({}, 1), ({}, 0), ({}, 0), (other, 1), (other, 1), (other, 0),
             (alpha2, 1), (alpha2, 1), (alpha2, 0)]
    for step, (kwargs, ran) in enumerate(steps):
        args = dict(x=x, w=w, y=y, alpha=1.0, beta=0.0)
        args.update(kwargs)
        before = len(runs)
        _call(h, direction, descs, **args)
        assert len(runs) - before == ran, step
    assert len(launched) == len(steps)
    assert all(launched[i] is launched[0] for i in range(5)), "the replays launch the record's arguments"
    assert launched[5] is not launched[0] and launched[7] is launched[6] is launched[5]
    entry = conv_fast_path.lookup(h, direction, *descs, ALGO_NAME[direction])
    assert len(entry.replays) == 3 and all(entry.replays.values())
    with pytest.raises(tridnn.BadParamError, match="dtype"):
        _call(h, direction, descs, **dict(dict(x=x, w=w, y=y, alpha=1.0, beta=0.0), **{out: fresh().half()}))
    assert len(launched) == len(steps), "nothing launched for a bad array"


def test_no_replay_where_the_algorithm_keeps_no_record(monkeypatch):
    """Under the interpreter (conv_tma's kernel, no Gluon record; a dry run finds no compiled
    launcher to bind) the fast path asks once per address set, keeps the answer "never" and
    runs the algorithm every call."""
    from tridnn.cuda import launch_record
    runs = _count_runs(monkeypatch, "fwd")
    h = tridnn.Handle(device="cpu", backend="triton", find_cache=None)
    descs, (x, w, y) = _layer(8, 5, 2, "cpu")
    x.normal_(), w.normal_()
    for _ in range(4):
        _call(h, "fwd", descs, x, w, y, 1.0, 0.0)
    entry = conv_fast_path.lookup(h, "fwd", *descs, "IMPLICIT_GEMM")
    assert len(runs) == 4 + 1, "every call ran, and the one dry run"
    assert list(entry.replays.values()) == [conv_fast_path._NEVER]
    assert "no compiled launcher" in launch_record.last_refusal
    want = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
    assert torch.allclose(y.double(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_filter"])
def test_gpu_replays_follow_new_data_in_place(direction, rng, monkeypatch):
    """Six calls through the public API with new values written into the same tensors: the
    first three run the algorithm (a Gluon config forced; the later ones answer from its
    launch record), the rest replay that record; alpha = 2, beta = 0.5 on a kept output,
    every result against float64."""
    need_hopper()
    if direction == "bwd_filter":
        cfg = dict(gluon_wgrad.WGRAD_PICKS_MEDIUM[0], GLUON=True)
        monkeypatch.setattr(bwf, "tma_candidates", lambda *a, **k: [cfg])
        monkeypatch.setattr(bwf, "_RECORDS", {})
    else:
        cfg = dict(gc.PICKS_MEDIUM[0], GLUON=True)
        monkeypatch.setattr(fwd, "tma_forward_candidates", lambda *a, **k: [cfg])
        monkeypatch.setattr(bwd, "tma_candidates", lambda *a, **k: [cfg])
        monkeypatch.setattr(gc, "_RECORDS", {})
    monkeypatch.setattr(type(ALGO[direction]), "tuner", common.Tuner())
    runs = _count_runs(monkeypatch, direction)
    h = tridnn.Handle(device="cuda")
    descs, (x, w, y) = _layer(128, 16, 8, "cuda")
    xd, wd, cd, yd = descs
    size = {"fwd": tridnn.get_convolution_forward_workspace_size,
            "bwd_data": tridnn.get_convolution_backward_data_workspace_size,
            "bwd_filter": tridnn.get_convolution_backward_filter_workspace_size}[direction]
    order = (xd, wd, cd, yd) if direction == "fwd" else (wd, yd, cd, xd) if direction == "bwd_data" \
        else (xd, yd, cd, wd)
    ws = h.workspace(size(h, *order, ALGO_NAME[direction]))
    for call in range(6):
        for t in (x, w, y):
            t.copy_(torch.from_numpy(rng.standard_normal(t.shape)).to(t.dtype))
        xd64, wd64, yd64 = x.double(), w.double(), y.double()
        _call(h, direction, descs, x, w, y, 2.0, 0.5, ws)
        if direction == "fwd":
            got, want = y, 2.0 * torch.nn.functional.conv2d(xd64, wd64, padding=1) + 0.5 * yd64
        elif direction == "bwd_data":
            got, want = x, 2.0 * torch.nn.grad.conv2d_input(x.shape, wd64, yd64, padding=1) + 0.5 * xd64
        else:
            got, want = w, 2.0 * torch.nn.grad.conv2d_weight(xd64, w.shape, yd64, padding=1) + 0.5 * wd64
        err = (got.double() - want).abs().max().item()
        assert err < 1e-2 * want.abs().max().item(), (call, err)
    assert len(runs) == 3, "three runs; the later calls replayed the record"
    entry = conv_fast_path.lookup(h, direction, *descs, ALGO_NAME[direction])
    assert callable(next(iter(entry.replays.values())))
