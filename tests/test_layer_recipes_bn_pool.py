"""Batch norm training/backward recipes and pool_backward's kept descriptor
(api/layer_recipes.py, api/functional.py): a repeat call is bit-identical to the full
path, follows every signature and parameter change, and still refuses running
statistics that alias an input or each other."""
import gc

import pytest
import torch

import tridnn
import tridnn.functional as TF
from tridnn.api import functional as api_functional
from tridnn.api import layer_recipes as recipes
from tridnn.errors import BadParamError


@pytest.fixture
def h():
    handle = tridnn.Handle(device="cpu", backend="triton")
    yield handle
    api_functional.clear_plan_cache(handle)


def _ref_train(x, w, b, rm, rv, momentum, eps, per_activation=False):
    """float64 batch norm training (PyTorch's), with the running statistics it leaves."""
    x64 = x.double()
    shape = (1, -1) + (1,) * (x.dim() - 2)
    if per_activation:
        flat = x64.reshape(x.shape[0], -1)
        mean, var = flat.mean(0), flat.var(0, unbiased=False)
        n = x.shape[0]
        y = (flat - mean) / torch.sqrt(var + eps)
        y = (y * (w.double() if w is not None else 1) + (b.double() if b is not None else 0)).reshape(x.shape)
    else:
        axes = [0] + list(range(2, x.dim()))
        mean, var = x64.mean(axes), x64.var(axes, unbiased=False)
        n = x.numel() // x.shape[1]
        y = (x64 - mean.reshape(shape)) / torch.sqrt(var.reshape(shape) + eps)
        if w is not None:
            y = y * w.double().reshape(shape)
        if b is not None:
            y = y + b.double().reshape(shape)
    new_rm = (1 - momentum) * rm.double() + momentum * mean
    new_rv = (1 - momentum) * rv.double() + momentum * var * n / (n - 1)
    return y, mean, new_rm, new_rv


def _close(got, want, dtype):
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol)


def _train_twice(h, x, w, b, momentum=0.1, eps=1e-5, mode="spatial"):
    """Two calls on equal inputs (the first takes the full path, the second the recipe)."""
    outs = []
    for _ in range(2):
        rm, rv = torch.zeros_like(w) + 0.5, torch.ones_like(w) * 2
        y, mean, inv = TF.batch_norm_training(x, w, b, rm, rv, momentum, eps, mode, handle=h)
        outs.append((y, mean, inv, rm, rv))
    return outs


def test_training_recipe_is_bit_identical_to_the_full_path(h):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, 6)
    w, b = torch.randn(4), torch.randn(4)
    first, second = _train_twice(h, x, w, b)
    for a, c in zip(first, second):
        assert a.shape == c.shape and a.stride() == c.stride() and a.dtype == c.dtype
        assert torch.equal(a, c)
    y, mean, rm, rv = _ref_train(x, w, b, torch.full((4,), 0.5), torch.full((4,), 2.0), 0.1, 1e-5)
    _close(first[0], y, x.dtype)
    _close(first[1].reshape(-1), mean, x.dtype)
    _close(first[3], rm, x.dtype)
    _close(first[4], rv, x.dtype)


def test_training_repeats_follow_strides_dtype_and_parameters(h):
    torch.manual_seed(1)
    base = torch.randn(2, 3, 4, 5)
    cl = base.contiguous(memory_format=torch.channels_last)
    cases = [(base, 0.1, 1e-5, "spatial", True), (cl, 0.1, 1e-5, "spatial", True),
             (base.double(), 0.1, 1e-5, "spatial", True), (base, 0.3, 1e-5, "spatial", True),
             (base, 0.1, 1e-2, "spatial", True), (base, 0.1, 1e-5, "per_activation", True),
             (base, 0.1, 1e-5, "spatial", False), (base.transpose(2, 3), 0.1, 1e-5, "spatial", True),
             (base, 1, 1e-5, "spatial", True)]
    for _ in range(2):  # the second round hits the recipes the first round left
        for x, momentum, eps, mode, affine in cases:
            per_act = mode == "per_activation"
            c = x[0].numel() if per_act else x.shape[1]
            dt = x.dtype
            w = torch.linspace(0.5, 1.5, c, dtype=dt) if affine else None
            b = torch.linspace(-1, 1, c, dtype=dt) if affine else None
            rm, rv = torch.full((c,), 0.5, dtype=dt), torch.full((c,), 2.0, dtype=dt)
            y, mean, inv = TF.batch_norm_training(x, w, b, rm, rv, momentum, eps, mode, handle=h)
            ry, rmean, rrm, rrv = _ref_train(x, w, b, torch.full((c,), 0.5), torch.full((c,), 2.0),
                                             momentum, eps, per_act)
            assert y.dtype == dt and y.shape == x.shape
            _close(y, ry, dt)
            _close(mean.reshape(-1), rmean, dt)
            _close(rm, rrm, dt)
            _close(rv, rrv, dt)


def test_training_new_data_at_a_reused_address(h):
    for seed in range(4):
        torch.manual_seed(seed)
        x = torch.randn(2, 8, 3, 3)
        w, b = torch.randn(8), torch.randn(8)
        rm, rv = torch.randn(8), torch.rand(8) + 0.5
        rm0, rv0 = rm.clone(), rv.clone()
        y, _, _ = TF.batch_norm_training(x, w, b, rm, rv, 0.1, 1e-5, handle=h)
        ry, _, rrm, rrv = _ref_train(x, w, b, rm0, rv0, 0.1, 1e-5)
        _close(y, ry, x.dtype)
        _close(rm, rrm, x.dtype)
        _close(rv, rrv, x.dtype)
        del x, w, b, rm, rv, y
        gc.collect()


def test_running_stats_that_alias_are_refused_on_a_repeat(h):
    torch.manual_seed(2)
    x = torch.randn(2, 4, 3, 3)
    w, b = torch.randn(4), torch.randn(4)
    TF.batch_norm_training(x, w, b, torch.zeros(4), torch.ones(4), handle=h)
    TF.batch_norm_training(x, w, b, torch.zeros(4), torch.ones(4), handle=h)  # recipe kept
    x_flat_alias = x.reshape(-1)[:4]  # a (4,) float32 packed vector inside x
    both = torch.zeros(4)
    buf = torch.zeros(8)
    cases = [(x_flat_alias, torch.ones(4)), (torch.zeros(4), x.reshape(-1)[4:8]), (both, both),
             (w, torch.ones(4)), (torch.zeros(4), b), (buf[:4], buf[:4])]
    for rm, rv in cases:
        keep = [t.clone() for t in (x, w, b, rm, rv)]
        with pytest.raises(BadParamError, match="overlaps"):
            TF.batch_norm_training(x, w, b, rm, rv, handle=h)
        for t, k in zip((x, w, b, rm, rv), keep):
            assert torch.equal(t, k)  # caller data untouched


def test_refused_parameters_stay_refused(h):
    x = torch.randn(2, 4, 3, 3)
    w, b = torch.randn(4), torch.randn(4)
    for _ in range(2):
        TF.batch_norm_training(x, w, b, torch.zeros(4), torch.ones(4), 0.1, 1e-5, handle=h)
        with pytest.raises(BadParamError):
            TF.batch_norm_training(x, w, b, torch.zeros(4), torch.ones(4), 1.5, 1e-5, handle=h)
        with pytest.raises(BadParamError):
            TF.batch_norm_training(x, w, b, torch.zeros(4), torch.ones(4), 0.1, 1e-9, handle=h)
        with pytest.raises(BadParamError):
            TF.batch_norm_training(x, w, b, torch.zeros(4), None, handle=h)
        with pytest.raises(BadParamError):
            TF.batch_norm_training(x, torch.randn(5), b, handle=h)
        with pytest.raises(BadParamError):
            TF.batch_norm_backward(x, torch.randn(2, 4, 3, 4), w, torch.zeros(4), torch.ones(4), handle=h)


def test_backward_recipe_is_bit_identical_and_correct(h):
    torch.manual_seed(3)
    base = torch.randn(3, 4, 5, 2)
    for x in (base, base.contiguous(memory_format=torch.channels_last), base.double()):
        dt = x.dtype
        w = torch.linspace(0.5, 1.5, 4, dtype=dt)
        dy = torch.randn(x.shape, dtype=dt)
        _, mean, inv = TF.batch_norm_training(x, w, None, handle=h)
        mean, inv = mean.reshape(-1).clone(), inv.reshape(-1).clone()
        first = TF.batch_norm_backward(x, dy, w, mean, inv, handle=h)
        second = TF.batch_norm_backward(x, dy, w, mean, inv, handle=h)
        for a, c in zip(first, second):
            assert a.shape == c.shape and a.stride() == c.stride() and torch.equal(a, c)
        x64 = x.detach().double().clone().requires_grad_(True)
        w64 = w.double().requires_grad_(True)
        b64 = torch.zeros(4, dtype=torch.float64, requires_grad=True)
        torch.nn.functional.batch_norm(x64, None, None, w64, b64, training=True, eps=1e-5).backward(dy.double())
        _close(first[0], x64.grad, dt)
        _close(first[1], w64.grad, dt)
        _close(first[2], b64.grad, dt)
        first_none = TF.batch_norm_backward(x, dy, None, mean, inv, handle=h)
        second_none = TF.batch_norm_backward(x, dy, None, mean, inv, handle=h)
        for a, c in zip(first_none, second_none):
            assert torch.equal(a, c)
        _close(first_none[1], w64.grad, dt)  # dweight does not depend on the weight
        _close(first_none[0], x64.grad / w.double().reshape(1, -1, 1, 1), dt)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_backward_repeats_follow_parameters(h, kind):
    torch.manual_seed(4)
    x = torch.randn(2, 3, 7, 7)
    cases = [(3, 2, 1), (2, 2, 0), (3, 1, 1), ([3, 2], [2, 1], [1, 0])]
    for _ in range(2):
        for k, s, p in cases:
            fwd = TF.max_pool if kind == "max" else TF.avg_pool
            y = fwd(x, k, s, p, handle=h)
            dy = torch.randn(y.shape)
            dx = TF.pool_backward(y, dy, x, kind, k, s, p, handle=h)
            x64 = x.detach().double().clone().requires_grad_(True)
            ref = torch.nn.functional.max_pool2d if kind == "max" else torch.nn.functional.avg_pool2d
            ref(x64, k, s, p).backward(dy.double())
            _close(dx, x64.grad, x.dtype)


def test_pool_backward_refuses_a_float_window_after_an_int_one(h):
    x = torch.randn(1, 2, 6, 6)
    y = TF.max_pool(x, 2, 2, handle=h)
    dy = torch.randn(y.shape)
    TF.pool_backward(y, dy, x, "max", 2, 2, handle=h)
    fresh = tridnn.Handle(device="cpu", backend="triton")
    outcomes = []
    for handle in (h, fresh):  # h has the int window's descriptor; fresh has none
        try:
            outcomes.append(TF.pool_backward(y, dy, x, "max", 2.0, 2, handle=handle))
        except Exception as e:  # noqa: BLE001 - both routes must fail alike
            outcomes.append((type(e), str(e)))
    if isinstance(outcomes[1], tuple):
        assert outcomes[0] == outcomes[1]
    else:
        assert torch.equal(outcomes[0], outcomes[1])


def test_recipes_keep_launch_plans_and_follow_the_l2_switch(h, monkeypatch):
    from tridnn.cuda import batchnorm
    torch.manual_seed(5)
    x = torch.randn(2, 4, 3, 5)
    w, b = torch.randn(4), torch.randn(4)
    dy = torch.randn(x.shape)
    first, second = _train_twice(h, x, w, b)
    kept = [r for r in api_functional._plan_table(h).values() if type(r).__name__ == "BatchNormTraining"]
    assert kept and all(r.plan is not None for r in kept)
    mean, inv = first[1].reshape(-1).clone(), first[2].reshape(-1).clone()
    grads = [TF.batch_norm_backward(x, dy, w, mean, inv, handle=h) for _ in range(2)]
    kept = [r for r in api_functional._plan_table(h).values() if type(r).__name__ == "BatchNormBackward"]
    assert kept and all(r.plan is not None for r in kept)
    # the switch flipped after the plans were made: the launcher decides afresh, same results
    monkeypatch.setattr(batchnorm, "L2_REUSE", True)
    third = _train_twice(h, x, w, b)[1]
    for a, c in zip(second, third):
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-6)
    again = TF.batch_norm_backward(x, dy, w, mean, inv, handle=h)
    for a, c in zip(grads[1], again):
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-6)
    for a, c in zip(grads[0], grads[1]):
        assert torch.equal(a, c)


@pytest.mark.parametrize("kind", ["max", "avg", "avg_exclude_pad"])
def test_pool_recipes_are_bit_identical_and_follow_signatures(h, kind):
    torch.manual_seed(6)
    base = torch.randn(2, 3, 7, 6)
    inputs = [base, base.contiguous(memory_format=torch.channels_last), base.double(), base.transpose(2, 3)]
    geometries = [(3, 2, 1), (2, 2, 0), ([3, 2], [1, 2], [1, 0])]
    for x in inputs:
        for k, s, p in geometries:
            runs = []
            for _ in range(2):  # full path, then the recipe
                if kind == "max":
                    y = TF.max_pool(x, k, s, p, handle=h)
                else:
                    y = TF.avg_pool(x, k, s, p, count_include_pad=kind == "avg", handle=h)
                dy = torch.sin(torch.arange(y.numel(), dtype=x.dtype)).reshape(y.shape)
                dx = TF.pool_backward(y, dy, x, kind, k, s, p, handle=h)
                runs.append((y, dx))
            for a, c in zip(*runs):
                assert a.shape == c.shape and a.stride() == c.stride() and torch.equal(a, c)
            x64 = x.detach().double().clone().requires_grad_(True)
            if kind == "max":
                want = torch.nn.functional.max_pool2d(x64, k, s, p)
            else:
                want = torch.nn.functional.avg_pool2d(x64, k, s, p, count_include_pad=kind == "avg")
            want.backward(dy.double())
            _close(runs[0][0], want.detach(), x.dtype)
            _close(runs[0][1], x64.grad, x.dtype)


def test_pool_recipe_refuses_what_the_full_path_refuses(h):
    x = torch.randn(1, 2, 6, 6)
    for _ in range(2):
        y = TF.max_pool(x, 3, 2, 1, handle=h)
        dy = torch.randn(y.shape)
        TF.pool_backward(y, dy, x, "max", 3, 2, 1, handle=h)
        with pytest.raises(BadParamError):
            TF.pool_backward(y, torch.randn(1, 2, 4, 4), x, "max", 3, 2, 1, handle=h)  # dy of another shape
        with pytest.raises(BadParamError):
            TF.max_pool(x, 3, 2, 3, handle=h)  # padding not smaller than the window


# -- parameters in another dtype than the statistics (a bfloat16 model's batch norm) ----------------
def _exact(a, b):
    assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype
    assert torch.equal(a, b)


@pytest.mark.parametrize("x_dtype,p_dtype", [(torch.float32, torch.float16), (torch.float64, torch.float32),
                                             (torch.float32, torch.float64)])
def test_mixed_dtype_parameters_keep_recipes_bit_identical_to_the_full_path(h, x_dtype, p_dtype):
    """weight, bias and running statistics in another dtype than the kernels' statistics
    (float16 stands for bfloat16, which the interpreter lacks): the full path converts
    them; the recipe hands exactly widened read-only parameters to the kernels as they
    are and repeats every other conversion (and the running statistics' copy back). Over
    repeats with new data and parameters changed in place, every output, the running
    statistics and the backward's outputs equal a fresh handle's full path bit for bit."""
    g = torch.Generator().manual_seed(11)
    cl = torch.channels_last
    w, b = torch.randn(4, generator=g).to(p_dtype), torch.randn(4, generator=g).to(p_dtype)
    rm0, rv0 = torch.randn(4, generator=g).to(p_dtype), (torch.rand(4, generator=g) + 0.5).to(p_dtype)
    ours, theirs = (rm0.clone(), rv0.clone()), (rm0.clone(), rv0.clone())
    for step in range(4):
        x = torch.randn(3, 4, 5, 3, generator=g, dtype=x_dtype).contiguous(memory_format=cl)
        dy = torch.randn(x.shape, generator=g, dtype=x_dtype)
        fresh = tridnn.Handle(device="cpu", backend="triton")
        got = TF.batch_norm_training(x, w, b, *ours, 0.1, 1e-5, handle=h)
        want = TF.batch_norm_training(x, w, b, *theirs, 0.1, 1e-5, handle=fresh)
        for a, c in zip((*got, *ours), (*want, *theirs)):
            _exact(a, c)
        api_functional.clear_plan_cache(fresh)
        dgot = TF.batch_norm_backward(x, dy, w, got[1], got[2], 1e-5, handle=h)
        dwant = TF.batch_norm_backward(x, dy, w, want[1], want[2], 1e-5, handle=fresh)
        for a, c in zip(dgot, dwant):
            _exact(a, c)
        api_functional.clear_plan_cache(fresh)
        if step == 0:  # and against float64, with the parameters as the kernels read them
            ry, rmean, rrm, rrv = _ref_train(x, w.double(), b.double(), rm0.double(), rv0.double(), 0.1, 1e-5)
            tol = 2e-3 if p_dtype == torch.float16 else 1e-5
            for a, c in ((got[0], ry), (got[1].reshape(-1), rmean), (ours[0], rrm), (ours[1], rrv)):
                torch.testing.assert_close(a.double(), c, rtol=tol, atol=tol)
        w.mul_(1.5)  # an optimizer step: the parameters change in place
        b.sub_(0.25)
    table = api_functional._plan_table(h)
    train = [r for r in table.values() if isinstance(r, recipes.BatchNormTraining)]
    bwd = [r for r in table.values() if isinstance(r, recipes.BatchNormBackward)]
    assert len(train) == 1 and len(bwd) == 1  # kept, and taken by the repeats
    widened = p_dtype.itemsize < x_dtype.itemsize
    assert (train[0].to[0] is None) == widened and train[0].to[2] == (torch.float64 if x_dtype == torch.float64
                                                                       else torch.float32)
    assert (bwd[0].to[0] is None) == widened


def test_mixed_dtype_recipe_does_not_answer_other_dtypes(h):
    """One shape, parameters of three dtypes in turn: each gets its own key and result."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 3, 4, 4, generator=g)
    base = torch.randn(3, generator=g)
    for _ in range(2):
        for dt in (torch.float16, torch.float32, torch.float64):
            w, b = (base * 2).to(dt), base.to(dt)
            rm, rv = torch.zeros(3, dtype=dt), torch.ones(3, dtype=dt)
            y, mean, _ = TF.batch_norm_training(x, w, b, rm, rv, 0.1, 1e-5, handle=h)
            ry, rmean, rrm, rrv = _ref_train(x, w.double(), b.double(), torch.zeros(3), torch.ones(3), 0.1, 1e-5)
            tol = 2e-3 if dt == torch.float16 else 2e-5
            for a, c in ((y, ry), (rm, rrm), (rv, rrv)):
                torch.testing.assert_close(a.double(), c, rtol=tol, atol=tol)
            assert rm.dtype == dt and y.dtype == x.dtype


# -- saved statistics packed for the backward (tridnn.torch's eager route) ------------------------------
def test_packed_statistics_are_read_in_place_and_match_separate_ones(h):
    """_packed_stats=True: the saved statistics are views of one marked buffer that the
    backward's recipe takes as its statistics (no copies); results equal the unpacked
    call's bit for bit. Statistics in an unmarked buffer of the same layout are copied
    as before, and its tail (the caller's data) is left alone."""
    from tridnn.cuda import batchnorm
    g = torch.Generator().manual_seed(13)
    x = torch.randn(2, 3, 4, 4, generator=g).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(3, generator=g), torch.randn(3, generator=g)
    dy = torch.randn(x.shape, generator=g)
    for _ in range(3):  # full path, then recipes
        rm_a, rv_a, rm_b, rv_b = torch.zeros(3), torch.ones(3), torch.zeros(3), torch.ones(3)
        packed = TF.batch_norm_training(x, w, b, rm_a, rv_a, 0.1, 1e-5, handle=h, _packed_stats=True)
        plain = TF.batch_norm_training(x, w, b, rm_b, rv_b, 0.1, 1e-5, handle=h)
        for a, c in zip((*packed, rm_a, rv_a), (*plain, rm_b, rv_b)):
            _exact(a, c)
        base = packed[1]._base
        assert base is not None and packed[2]._base is base and base.numel() == 15
        assert batchnorm._packed_stat(packed[1], packed[2], 3, torch.float32) is base
        assert batchnorm._packed_stat(plain[1], plain[2], 3, torch.float32) is None
        # a caller's buffer with the same layout, no mark: copied, its tail untouched
        own = torch.full((15,), 7.0)
        own[:3], own[3:6] = plain[1].reshape(-1), plain[2].reshape(-1)
        m_own, i_own = own[:3].view(1, 3, 1, 1), own[3:6].view(1, 3, 1, 1)
        assert batchnorm._packed_stat(m_own, i_own, 3, torch.float32) is None
        got = TF.batch_norm_backward(x, dy, w, packed[1], packed[2], 1e-5, handle=h)
        want = TF.batch_norm_backward(x, dy, w, plain[1], plain[2], 1e-5, handle=h)
        theirs = TF.batch_norm_backward(x, dy, w, m_own, i_own, 1e-5, handle=h)
        for a, c, d in zip(got, want, theirs):
            _exact(a, c)
            _exact(d, c)
        assert torch.equal(own[6:], torch.full((9,), 7.0))
        assert torch.equal(base[:6], torch.cat([plain[1].reshape(-1), plain[2].reshape(-1)]))


def test_packed_statistics_backward_copies_nothing(h, monkeypatch):
    """The host work of a repeated backward on packed statistics (kernel launches
    stubbed out for the count, as the interpreter's own copies would show): no copy."""
    from torch.profiler import ProfilerActivity, profile
    from tridnn.cuda import common
    g = torch.Generator().manual_seed(14)
    x = torch.randn(2, 3, 4, 4, generator=g)
    w = torch.randn(3, generator=g)
    dy = torch.randn(x.shape, generator=g)
    for packed in (True, False):
        _, mean, inv = TF.batch_norm_training(x, w, None, None, None, 0.1, 1e-5, handle=h, _packed_stats=packed)
        TF.batch_norm_backward(x, dy, w, mean, inv, 1e-5, handle=h)  # the full path, then the recipe
        with monkeypatch.context() as m:
            m.setattr(common, "launch", lambda *args, **kwargs: None)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                TF.batch_norm_backward(x, dy, w, mean, inv, 1e-5, handle=h)
        copies = [e.name for e in prof.events() if e.name == "aten::copy_"]
        assert len(copies) == (0 if packed else 2)


def test_converted_running_statistics_that_require_grad_are_updated_like_the_full_path(h):
    """The recipe copies both converted running statistics back in one op, except when
    one requires grad (then through detach, as the full path): same values either way."""
    g = torch.Generator().manual_seed(15)
    x = torch.randn(2, 3, 4, 4, generator=g)
    for requires_grad in (False, True, False):
        ours = [torch.rand(3, generator=g).double() for _ in range(2)]
        theirs = [t.clone() for t in ours]
        for t in ours:
            t.requires_grad_(requires_grad)
        for _ in range(2):
            TF.batch_norm_training(x, None, None, *ours, 0.1, 1e-5, handle=h)
            fresh = tridnn.Handle(device="cpu", backend="triton")
            TF.batch_norm_training(x, None, None, *theirs, 0.1, 1e-5, handle=fresh)
            for a, c in zip(ours, theirs):
                assert torch.equal(a.detach(), c)
    recipe = [r for r in api_functional._plan_table(h).values() if isinstance(r, recipes.BatchNormTraining)]
    assert len(recipe) == 1 and recipe[0].copy_both is not None
