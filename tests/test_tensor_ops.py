"""Tensor ops against the float64 reference: add_tensor broadcasting, every op_tensor op,
every reduction (with indices), transform between layouts and dtypes, set, scale;
alpha/beta; workspace/indices sizes; errors before any write."""
import numpy as np
import pytest

import tridnn
from tridnn import OpTensorDescriptor, OpTensorOp, ReduceTensorDescriptor, ReduceTensorOp
from tridnn.errors import BadParamError, NotSupportedError
from tridnn.reference import tensor_ops as ref

from layer_cases import DTYPES, LAYOUTS, check, handle, normal, output, tensor

DIMS = (2, 3, 4, 5)


@pytest.mark.parametrize("bias_dims", [(1, 3, 1, 1), (2, 3, 4, 5), (1, 1, 1, 1), (2, 1, 4, 1), (1, 3, 4, 5)])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 0.0), (2.0, -1.0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_tensor(bias_dims, alpha, beta, dtype, rng):
    h = handle()
    a_desc, a = tensor(bias_dims, dtype, "NCHW", rng)
    c_desc, c, prior = output(DIMS, dtype, "NHWC", rng, beta)
    tridnn.add_tensor(h, alpha, a_desc, a, beta, c_desc, c)
    check(c, np.broadcast_to(a.astype(np.float64), DIMS), dtype, alpha, beta, prior, exact=dtype != "bfloat16")


@pytest.mark.parametrize("op", list(OpTensorOp), ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_dims", [DIMS, (1, 3, 1, 1)], ids=["full", "bias"])
def test_op_tensor(op, dtype, b_dims, rng):
    h = handle()
    desc = OpTensorDescriptor(op)
    a_desc, a = tensor(DIMS, dtype, "NHWC", rng, lo=0 if op == OpTensorOp.SQRT else -3)
    b_desc, b = tensor(b_dims, dtype, "NCHW", rng)
    for alpha1, alpha2, beta in ((1.0, 1.0, 0.0), (2.0, -0.5, 0.5)):
        c_desc, c, prior = output(DIMS, dtype, "strided", rng, beta)
        tridnn.op_tensor(h, desc, alpha1, a_desc, a, alpha2, b_desc, b, beta, c_desc, c)
        want = ref.op_tensor(int(op), a, np.broadcast_to(b, DIMS), alpha1, alpha2)
        check(c, want, dtype, 1.0, beta, prior, name=op.name)


@pytest.mark.parametrize("nan_opt", [0, 1])
def test_op_tensor_nan(nan_opt):
    h = handle()
    a = np.array([[[1.0, np.nan, np.nan]]], np.float32)
    b = np.array([[[np.nan, 2.0, np.nan]]], np.float32)
    d = tridnn.TensorDescriptor.like(a)
    for op in (OpTensorOp.MIN, OpTensorOp.MAX):
        c = np.zeros_like(a)
        tridnn.op_tensor(h, OpTensorDescriptor(op, nan_opt=nan_opt), 1, d, a, 1, d, b, 0, d, c)
        want = ref.op_tensor(int(op), a, b, 1, 1, bool(nan_opt))
        np.testing.assert_array_equal(c, want.astype(np.float32))
        assert np.isnan(c[0, 0, 0]) == bool(nan_opt)


def test_op_tensor_in_place(rng):
    h = handle()
    a_desc, a = normal(DIMS, "float32", "NCHW", rng)
    b_desc, b = normal((1, 3, 1, 1), "float32", "NCHW", rng)
    want = a.astype(np.float64) * b
    tridnn.op_tensor(h, OpTensorDescriptor("mul"), 1, a_desc, a, 1, b_desc, b, 0, a_desc, a)
    check(a, want, "float32")


REDUCE_CASES = [(1, 3, 1, 1), (2, 1, 4, 5), (1, 1, 1, 1), (2, 3, 1, 5), (2, 3, 4, 5)]


@pytest.mark.parametrize("op", list(ReduceTensorOp), ids=lambda o: o.name)
@pytest.mark.parametrize("c_dims", REDUCE_CASES, ids=lambda d: "x".join(map(str, d)))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reduce_tensor(op, c_dims, layout, rng):
    run_reduce(op, c_dims, "float32", layout, rng)


@pytest.mark.parametrize("op", list(ReduceTensorOp), ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_tensor_dtypes(op, dtype, rng):
    run_reduce(op, (1, 3, 1, 1), dtype, "NHWC", rng, alpha=0.5, beta=2.0)


def run_reduce(op, c_dims, dtype, layout, rng, alpha=1.0, beta=0.0):
    h = handle()
    small = op in (ReduceTensorOp.MUL, ReduceTensorOp.MUL_NO_ZEROS)
    a_desc, a = tensor(DIMS, dtype, layout, rng, lo=-1 if small else -3, hi=1 if small else 3,
                       density=0.9 if op == ReduceTensorOp.MUL_NO_ZEROS else 0.8)
    if small:  # products of +-1 and 1.25: at most 1.25**40 ~ 7.5e3, inside float16's range
        a[...] = np.where(rng.random(DIMS) < 0.5, a, np.float32(1.25)).astype(a.dtype)
    with_idx = op.has_indices
    desc = ReduceTensorDescriptor(op, indices=int(with_idx))
    c_desc, c, prior = output(c_dims, dtype, "NCHW", rng, beta)
    ws = np.empty(tridnn.get_reduction_workspace_size(h, desc, a_desc, c_desc), np.uint8)
    idx_size = tridnn.get_reduction_indices_size(h, desc, a_desc, c_desc)
    assert idx_size == (4 * int(np.prod(c_dims)) if with_idx else 0)
    idx = np.full(max(idx_size, 1), 255, np.uint8) if with_idx else None
    tridnn.reduce_tensor(h, desc, idx, ws, alpha, a_desc, a, beta, c_desc, c)
    values, indices = ref.reduce_tensor(int(op), a, c_dims)
    check(c, values, dtype, alpha, beta, prior, name=op.name, slack=20.0 if small else None)
    if with_idx:
        np.testing.assert_array_equal(idx.view(np.uint32).reshape(c_dims), indices)


@pytest.mark.parametrize("nan_opt", [0, 1])
def test_reduce_nan_indices(nan_opt):
    h = handle()
    a = np.array([[3.0, np.nan, 5.0, 1.0], [np.nan, np.nan, np.nan, np.nan]], np.float32)
    d = tridnn.TensorDescriptor.like(a)
    cd = tridnn.TensorDescriptor((2, 1))
    desc = ReduceTensorDescriptor("max", nan_opt=nan_opt, indices="flattened_indices")
    c = np.zeros((2, 1), np.float32)
    idx = np.zeros((2, 1), np.uint32)
    ws = np.empty(tridnn.get_reduction_workspace_size(h, desc, d, cd), np.uint8)
    tridnn.reduce_tensor(h, desc, idx, ws, 1, d, a, 0, cd, c)
    if nan_opt:
        assert np.isnan(c[0, 0]) and idx[0, 0] == 1
    else:
        assert c[0, 0] == 5 and idx[0, 0] == 2
    assert np.isnan(c[1, 0]) and idx[1, 0] == 0


@pytest.mark.parametrize("src,dst", [("NCHW", "NHWC"), ("NHWC", "NCHW"), ("strided", "NCHW"), ("NCHW", "strided")])
@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("float64", "float16"), ("bfloat16", "float32")])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (-2.0, 0.5)])
def test_transform_tensor(src, dst, dtypes, alpha, beta, rng):
    h = handle()
    x_desc, x = tensor(DIMS, dtypes[0], src, rng)
    y_desc, y, prior = output(DIMS, dtypes[1], dst, rng, beta)
    tridnn.transform_tensor(h, alpha, x_desc, x, beta, y_desc, y)
    check(y, x.astype(np.float64), dtypes[1], alpha, beta, prior, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_set_and_scale(dtype, layout, rng):
    h = handle()
    y_desc, y = tensor(DIMS, dtype, layout, rng)
    before = y.astype(np.float64)
    tridnn.scale_tensor(h, y_desc, y, -1.5)
    check(y, before * -1.5, dtype, exact=True)
    tridnn.set_tensor(h, y_desc, y, 0.25)
    assert (y.astype(np.float64) == 0.25).all()


def test_errors_leave_outputs_untouched(rng):
    h = handle()
    c_desc, c = tensor(DIMS, "float32", "NCHW", rng)
    c0 = c.copy()
    a_desc, a = tensor((1, 2, 1, 1), "float32", "NCHW", rng)
    with pytest.raises(BadParamError, match="dim 1 is 2, valid: 3 or 1"):
        tridnn.add_tensor(h, 1, a_desc, a, 1, c_desc, c)
    with pytest.raises(BadParamError, match="same rank"):
        tridnn.add_tensor(h, 1, tridnn.TensorDescriptor((3, 1, 1)), np.ones((3, 1, 1), np.float32), 1, c_desc, c)
    with pytest.raises(BadParamError, match="dtype"):
        tridnn.add_tensor(h, 1, tridnn.TensorDescriptor((1, 3, 1, 1), "float64"), np.ones((1, 3, 1, 1)), 1, c_desc, c)
    with pytest.raises(BadParamError, match="op-tensor op"):
        OpTensorDescriptor(9)
    with pytest.raises(BadParamError, match="reduce-tensor op"):
        ReduceTensorDescriptor("median")
    with pytest.raises(NotSupportedError, match="MIN, MAX and AMAX"):
        ReduceTensorDescriptor("add", indices=1)
    with pytest.raises(NotSupportedError, match="INDICES_32BIT"):
        ReduceTensorDescriptor("max", indices=1, indices_type=1)
    desc = ReduceTensorDescriptor("max", indices=1)
    big_desc, big = tensor((2, 3, 4, 5), "float32", "NCHW", rng)
    small_desc = tridnn.TensorDescriptor((1, 3, 1, 1))
    small = np.full((1, 3, 1, 1), 7.0, np.float32)
    need = tridnn.get_reduction_workspace_size(h, desc, big_desc, small_desc)
    with pytest.raises(BadParamError, match="workspace of"):
        tridnn.reduce_tensor(h, desc, np.zeros(3, np.uint32), np.empty(need - 1, np.uint8), 1, big_desc, big, 0,
                             small_desc, small)
    with pytest.raises(BadParamError, match="indices of 8 bytes"):
        tridnn.reduce_tensor(h, desc, np.zeros(2, np.uint32), np.empty(need, np.uint8), 1, big_desc, big, 0,
                             small_desc, small)
    with pytest.raises(BadParamError, match="do not broadcast"):
        tridnn.get_reduction_workspace_size(h, desc, small_desc, big_desc)
    with pytest.raises(BadParamError, match="dims"):
        tridnn.transform_tensor(h, 1, big_desc, big, 0, tridnn.TensorDescriptor((2, 3, 5, 4)), c.reshape(2, 3, 5, 4))
    with pytest.raises(BadParamError, match="value"):
        tridnn.set_tensor(h, c_desc, c, float("nan"))
    assert np.array_equal(c, c0) and (small == 7).all()
