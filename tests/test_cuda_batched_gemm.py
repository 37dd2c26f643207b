"""batched_gemm.bmm (the GEMM stage of the Winograd methods and of backward filter ALGO_3)
under Triton's interpreter: strided and transposed operands, both index widths.

The int64 path is taken when an operand spans more than int32 offsets (a reduction over
billions of pixels); here it is forced on small tensors so that its arithmetic is checked
against torch, and the switch itself is checked on a storage-less view as long as such a span.
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import batched_gemm, layer_utils  # noqa: E402,F401  (layer_utils: the interpreter's loops)
from tridnn.cuda.common import cdiv, launch  # noqa: E402
from tridnn.cuda.geometry import needs_int64  # noqa: E402

CFG = batched_gemm.configs(torch.device("cpu"), 4)[0]


def _operands(rng_seed=0):
    g = torch.Generator().manual_seed(rng_seed)
    a = torch.randn(3, 35, 37, generator=g)                       # [B, K, M] then transposed: strided rows
    b = torch.randn(3, 70, 19, generator=g)[:, ::2, :]            # every other row: sb_k = 2 rows
    return a.transpose(1, 2), b


def test_bmm_of_strided_and_transposed_views():
    a, b = _operands()
    c = torch.full((3, 37, 19), float("nan"))
    batched_gemm.bmm(a, b, c, "ieee", CFG)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("int64", [False, True])
def test_both_index_widths_agree_with_torch(int64):
    a, b = _operands(1)
    c = torch.full((3, 37, 19), float("nan"))
    grid = (cdiv(37, CFG["BLOCK_M"]) * cdiv(19, CFG["BLOCK_N"]), 3)
    launch(batched_gemm.bmm_kernel, grid, (a, b, c, 37, 19, 35, *a.stride(), *b.stride(), *c.stride()),
           dict(BLOCK_M=CFG["BLOCK_M"], BLOCK_N=CFG["BLOCK_N"], BLOCK_K=CFG["BLOCK_K"], GROUP_M=8, PREC="ieee",
                INT64=int64), dict(num_warps=1, num_stages=1))
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


def test_the_switch_sees_a_long_reduction():
    """A [1, 64, 2^26] operand read along k at a stride of 64 spans 2^32 elements (a meta
    tensor: shapes and strides without storage)."""
    long = torch.empty_strided((1, 64, 1 << 26), (0, 1, 64), device="meta")
    assert needs_int64(long)
    assert not needs_int64(torch.zeros(2, 64, 64))
