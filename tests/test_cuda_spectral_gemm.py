"""spectral_gemm.contract (the FFT methods' per-frequency complex GEMM) under Triton's
interpreter against complex128 matmuls: odd sizes, several groups, either operand
conjugated, transposed and strided views, the int64 path; and the GPU launch shapes
compiled for sm_90 without register spills.
"""
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tridnn.cuda import layer_utils, spectral_gemm  # noqa: E402,F401  (layer_utils: the interpreter's loops)


def _complex(t):
    """A float32 [..., 2] pair tensor as complex128 (NumPy)."""
    a = t.double().numpy()
    return a[..., 0] + 1j * a[..., 1]


def _reference(a, b, conj_a, conj_b):
    ca, cb = _complex(a), _complex(b)
    if conj_a:
        ca = ca.conj()
    if conj_b:
        cb = cb.conj()
    return ca @ cb


@pytest.mark.parametrize("conj_a,conj_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("shape", [(3, 1, 17, 19, 21), (2, 3, 5, 33, 7), (1, 2, 40, 3, 18)],
                         ids=lambda s: "x".join(map(str, s)))
def test_contract_matches_complex_matmul(shape, conj_a, conj_b):
    """c[f, g] = op(a[f, g]) @ op(b[f, g]) for shapes (F, G, M, R, N) that fill no tile."""
    f, g, m, r, n = shape
    gen = torch.Generator().manual_seed(sum(shape))
    a = torch.randn(f, g, m, r, 2, generator=gen)
    b = torch.randn(f, g, r, n, 2, generator=gen)
    c = torch.full((f, g, m, n, 2), float("nan"))
    spectral_gemm.contract(a, b, c, "ieee", conj_a, conj_b)
    np.testing.assert_allclose(_complex(c), _reference(a, b, conj_a, conj_b), rtol=0, atol=2e-5 * r)


def test_contract_of_transposed_frequency_major_views():
    """The layouts the FFT methods hand it: a frequency-major buffer [F, images, G * Cg, 2] split
    by group (batch strides of both frequency and group) and a filter spectrum [F, G * Kg, Cg, 2]
    read transposed; the output written into a larger buffer's strided view."""
    gen = torch.Generator().manual_seed(7)
    F, I, G, Cg, Kg = 6, 9, 2, 5, 3
    X = torch.randn(F, I, G * Cg, 2, generator=gen)
    W = torch.randn(F, G * Kg, Cg, 2, generator=gen)
    Y = torch.full((F, I, G * Kg + 4, 2), float("nan"))
    a = X.view(F, I, G, Cg, 2).transpose(1, 2)                     # [F, G, I, Cg]
    b = W.view(F, G, Kg, Cg, 2).transpose(2, 3)                    # [F, G, Cg, Kg]
    c = Y[:, :, :G * Kg].view(F, I, G, Kg, 2).transpose(1, 2)      # [F, G, I, Kg]
    spectral_gemm.contract(a, b, c, "ieee", conj_b=True)
    np.testing.assert_allclose(_complex(c), _reference(a, b, False, True), rtol=0, atol=1e-4)
    assert torch.isnan(Y[:, :, G * Kg:]).all()  # nothing written past the view


def test_int64_offsets_give_the_same_result(monkeypatch):
    """The INT64 path (operands spanning past int32 offsets), forced on small tensors."""
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(2, 1, 18, 20, 2, generator=gen)
    b = torch.randn(2, 1, 20, 17, 2, generator=gen)
    c32 = torch.full((2, 1, 18, 17, 2), float("nan"))
    spectral_gemm.contract(a, b, c32, "ieee", conj_a=True)
    seen = []
    monkeypatch.setattr(spectral_gemm, "needs_int64", lambda *t: seen.append(True) or True)
    c64 = torch.full_like(c32, float("nan"))
    spectral_gemm.contract(a, b, c64, "ieee", conj_a=True)
    assert seen and torch.equal(c32, c64)


def test_flops_count_tl_dot_padding():
    """Each matrix side rounds up to 16: a depthwise frequency (1x1x1) costs 16^3 complex
    multiply-adds, a 64 x 128 x 128 one its own size."""
    assert spectral_gemm.flops(1, 1, 1, 1, 1) == 8.0 * 16 ** 3
    assert spectral_gemm.flops(64, 128, 128, 1, 10) == 8.0 * 64 * 128 * 128 * 10


def test_tiles_shrink_to_small_matrices():
    assert spectral_gemm.tiles("ieee", 1000, 1000, True) == spectral_gemm.GPU_TILES["ieee"]
    assert spectral_gemm.tiles("ieee", 20, 3, True)[:2] == (32, 16)
    assert spectral_gemm.tiles("tf32", 64, 100, False) == (16, 16, 16, 1)


@pytest.mark.parametrize("prec,conj_a,conj_b", [("ieee", False, True), ("ieee", True, False),
                                                ("tf32x3", True, False), ("tf32", False, True)])
def test_gpu_tiles_compile_for_sm90_without_spills(prec, conj_a, conj_b):
    """GPU_TILES keep every live value in registers: no local-memory loads or stores in the
    sm_90 SASS (IEEE 64 x 64 x 32 over 4 warps spilled 979 values)."""
    from gluon_helpers import compile_in_child
    bm, bn, br, warps = spectral_gemm.GPU_TILES[prec]
    pointers = dict.fromkeys(("a_ptr", "b_ptr", "c_ptr"), "*fp32")
    consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_R=br, CONJ_A=conj_a, CONJ_B=conj_b, PREC=prec, INT64=False)
    spec = ["tridnn.cuda.spectral_gemm", "spectral_gemm_kernel", pointers, consts, warps]
    facts, = compile_in_child([("gluon_helpers", "compile_triton_sm90", spec, {})])
    assert "STG" in facts["sass"]
    spills = len(re.findall(r"\b(STL|LDL)\b", facts["sass"]))
    assert spills == 0, (spills, facts["regs"])


def test_small_tiles_give_every_warp_its_own_rows():
    """The shrunk tiles of small products (16 to 64 rows or columns), in every precision,
    compile for sm_90 without spills and without warps repeating each other's MMA tile:
    four warps on a 16 x 16 tile did (benchmarks/audit_mma_layouts.py over the GPU fuzz's
    Triton cache, session 24)."""
    import sys
    from pathlib import Path

    from gluon_helpers import compile_in_child
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import audit_mma_layouts as audit
    specs = []
    for prec in ("ieee", "tf32x3", "tf32"):
        for m, n in ((5, 7), (5, 20), (12, 300), (30, 9), (200, 3)):
            bm, bn, br, warps = spectral_gemm.tiles(prec, m, n, True)
            pointers = dict.fromkeys(("a_ptr", "b_ptr", "c_ptr"), "*fp32")
            consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_R=br, CONJ_A=False, CONJ_B=True, PREC=prec, INT64=False)
            specs.append(["tridnn.cuda.spectral_gemm", "spectral_gemm_kernel", pointers, consts, warps])
    assert spectral_gemm.tiles("tf32", 5, 7, True)[3] == 1
    facts = compile_in_child([("gluon_helpers", "compile_triton_sm90", spec, {}) for spec in specs])
    for spec, f in zip(specs, facts):
        label = (spec[3]["PREC"], spec[3]["BLOCK_M"], spec[3]["BLOCK_N"], spec[4])
        assert not re.findall(r"\b(STL|LDL)\b", f["sass"]), label
        _, warps, dots = audit.audit(f["ttgir"])
        assert warps == spec[4] and all(d[-1] == 1 for d in dots), (label, dots)
        assert bool(dots) == (spec[3]["PREC"] != "ieee"), "tf32 products run on the tensor cores"


@pytest.mark.parametrize("math,dtype,want", [
    ("TENSOR_OP", "FLOAT", "tf32x3"), ("TENSOR_OP_ALLOW_CONVERSION", "FLOAT", "tf32x3"), ("DEFAULT", "FLOAT", "tf32x3"),
    ("FMA", "FLOAT", "ieee"), ("TENSOR_OP", "HALF", "ieee")])
def test_fft_methods_never_contract_in_plain_tf32(math, dtype, want):
    """On the H100, tf32 spectral products erred 3e-4 to 9e-4 relative (fuzz, 2026-12-05):
    the FFT methods keep float32's tolerance under every math type."""
    import tridnn
    from tridnn.cuda import conv_fft
    from test_cuda_conv import P, nhwc_problem
    for direction in ("fwd", "bwd_data", "bwd_filter"):
        problem = nhwc_problem(direction, P(8, 8, (9, 9), 3, 1, 1), dtype=getattr(tridnn.DataType, dtype),
                               math=getattr(tridnn.MathType, math))
        assert conv_fft.spectral_precision(problem) == want
        assert conv_fft.fft_estimate(problem) > 0  # every precision it returns has a rate


def test_fft_contraction_takes_the_spectral_precision(monkeypatch, rng):
    """FFT forward and backward filter under TENSOR_OP hand tf32x3 to the spectral GEMM."""
    import tridnn
    from tridnn.algorithms import registry
    from test_cuda_conv import P, run_case
    seen = []
    real = spectral_gemm.contract
    monkeypatch.setattr(spectral_gemm, "contract", lambda *a, **k: (seen.append(a[3]), real(*a, **k))[1])
    p = P(4, 4, (6, 5), 3, 1, 1)
    for direction, enum in (("fwd", tridnn.ConvFwdAlgo.FFT), ("bwd_filter", tridnn.ConvBwdFilterAlgo.FFT)):
        algo = registry.by_enum("conv", direction, "triton", enum)
        assert run_case(direction, algo, p, "float32", "NHWC", rng, math=tridnn.MathType.TENSOR_OP) is None
    assert seen and set(seen) == {"tf32x3"}, seen
