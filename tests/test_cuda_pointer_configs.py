"""The pointer kernels' spill-free launch configs (the *_NO_SPILL lists) compile for sm_90
with no local-memory traffic: registers hold every live value. Offline (no GPU), in a child
process without the interpreter (tests/gluon_helpers.compile_triton_without_local_memory). Why: compiled the
same way, most of the older tiles of these kernels spill (tens to hundreds of local stores),
which costs a memory-bound round trip per spilled value."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import conv_bwd_data_implicit_gemm as dg  # noqa: E402
from tridnn.cuda import conv_gemm  # noqa: E402
from tridnn.cuda import conv_implicit_gemm as fw  # noqa: E402
from tridnn.cuda import conv_bwd_filter_implicit_gemm as wg  # noqa: E402

from gluon_helpers import compile_triton_without_local_memory  # noqa: E402

EPILOGUE_SCALARS = {a: "fp32" for a in ("alpha", "beta", "alpha2", "coef", "swish_beta")}


def _spec(module, kernel, types, cfg, **consts):
    """compile_triton_sm90's spec of tridnn.cuda.``module``.``kernel`` at the tile ``cfg``."""
    tile = {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
    return [f"tridnn.cuda.{module}", kernel, types, dict(tile, **consts), cfg["num_warps"], cfg["num_stages"]]


def test_backward_filter_no_spill_configs():
    """Backward filter's pointer kernel: float32 (wg.GPU_CONFIGS_32_NO_SPILL) under every
    float32 precision, and under tf32x3 with ALGO_0's atomics and conv1's FLAT columns too;
    bf16 and float16 (wg.GPU_CONFIGS_16_NO_SPILL) with and without atomics."""
    cases = [(c, "fp32", prec, atomic, flat) for c in wg.GPU_CONFIGS_32_NO_SPILL for prec, atomic, flat in
             [("tf32x3", False, False), ("tf32", False, False), ("ieee", False, False), ("tf32x3", True, True)]]
    cases += [(c, dt, "ieee", atomic, False) for c in wg.GPU_CONFIGS_16_NO_SPILL for dt in ("bf16", "fp16")
              for atomic in (False, True)]
    specs = [_spec("conv_bwd_filter_implicit_gemm", "conv_wgrad_kernel",
                   {"x_ptr": "*" + dt, "dy_ptr": "*" + dt, "part_ptr": "*fp32"}, c,
                   FLAT=flat, ATOMIC=atomic, PREC=prec, INT64=False) for c, dt, prec, atomic, flat in cases]
    compile_triton_without_local_memory(specs)


def test_backward_data_no_spill_configs():
    """Backward data's pointer kernel: float32 (dg.GPU_CONFIGS_32_NO_SPILL) under every
    float32 precision."""
    specs = [_spec("conv_bwd_data_implicit_gemm", "conv_bwd_data_kernel",
                   {"dy_ptr": "*fp32", "w_ptr": "*fp32", "dx_ptr": "*fp32", "alpha": "fp32", "beta": "fp32"}, c,
                   GROUP_M=8, FLIP=False, PREC=prec, BETA_ZERO=True, INT64=False)
             for c in dg.GPU_CONFIGS_32_NO_SPILL for prec in ("tf32x3", "tf32", "ieee")]
    compile_triton_without_local_memory(specs)


def test_gemm_forward_no_spill_configs():
    """GEMM forward's matmul over the im2col columns (conv_gemm.gemm_kernel): its 16-bit
    tiles (conv_gemm.GEMM_CONFIGS_16_NO_SPILL), bf16 and float16, plain and with the fused
    epilogue's bias, residual and relu."""
    ptrs = ("col_ptr", "w_ptr", "y_ptr", "bias_ptr", "z_ptr")
    specs = [_spec("conv_gemm", "gemm_kernel", {**{p: "*" + dt for p in ptrs}, **EPILOGUE_SCALARS}, c,
                   GROUP_M=8, FLIP=False, PREC="ieee", ACT=act, HAS_BIAS=fused, HAS_Z=fused, BETA_ZERO=True,
                   INT64=False)
             for c in conv_gemm.GEMM_CONFIGS_16_NO_SPILL for dt in ("bf16", "fp16")
             for act, fused in ((-1, False), (1, True))]
    compile_triton_without_local_memory(specs)


def test_forward_flat_no_spill_configs():
    """The implicit-GEMM forward's FLAT tiles (few channels per group: the flattened (tap,
    channel) loop): 16-bit (fw.FLAT_CONFIGS_16_NO_SPILL) in bf16, plain and with the fused
    bias, residual and relu; float32 (fw.FLAT_CONFIGS_32_NO_SPILL) under every precision,
    tf32x3 fused too."""
    ptrs = ("x_ptr", "w_ptr", "y_ptr", "bias_ptr", "z_ptr")
    cases = [(c, "bf16", "ieee", fused) for c in fw.FLAT_CONFIGS_16_NO_SPILL for fused in (False, True)]
    cases += [(c, "fp32", prec, fused) for c in fw.FLAT_CONFIGS_32_NO_SPILL
              for prec, fused in (("tf32x3", False), ("tf32", False), ("ieee", False), ("tf32x3", True))]
    specs = [_spec("conv_implicit_gemm", "conv_fwd_kernel",
                   {**{p: "*" + dt for p in ptrs}, "part_ptr": "*fp32", "rows_ptr": "*i64", "taps_ptr": "*i64",
                    **EPILOGUE_SCALARS}, c,
                   GROUP_M=8, SPLIT_K=1, FLAT=True, PRECOMP=False, FLIP=False, PREC=prec, ACT=1 if fused else -1,
                   HAS_BIAS=fused, HAS_Z=fused, BETA_ZERO=True, INT64=False) for c, dt, prec, fused in cases]
    compile_triton_without_local_memory(specs)
