"""Does Triton's Hopper warp specialization pay on the GEMMs that ResNet-50's 3x3 layers are?

    python3 benchmarks/probe_triton_gemm_ws.py        (one H200; ~30 s)

A plain TMA GEMM (C = A @ B.T, bf16, fp32 accumulation) at the implicit-GEMM sizes of
res2-res4 3x3 at batch 64 (M pixels x N output channels x K = 9 x input channels), each
config with and without ``tl.range(..., warp_specialize=True)``, one program per tile and
persistent, against cuBLAS (torch.matmul). CUDA-graph medians; every result checked
against cuBLAS first. This is the ceiling a Triton conv of the same tile shape can hope
for: conv_tma adds the tap/box addressing on top of exactly this loop."""
import torch, triton, triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

@triton.jit
def mm(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr):
    pid = tl.program_id(0)
    nn = tl.cdiv(N, BN)
    m0 = (pid // nn) * BM
    n0 = (pid % nn) * BN
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=WS):
        a = a_desc.load([m0, k])
        b = b_desc.load([n0, k])
        acc = tl.dot(a, b.T, acc)
    c_desc.store([m0, n0], acc.to(tl.bfloat16))

@triton.jit
def mm_persistent(a_desc, b_desc, c_desc, M, N, K, NUM_SMS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                  BK: tl.constexpr, WS: tl.constexpr):
    nn = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * nn
    for t in tl.range(tl.program_id(0), tiles, NUM_SMS, flatten=True, warp_specialize=WS):
        m0 = (t // nn) * BM
        n0 = (t % nn) * BN
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, K, BK):
            a = a_desc.load([m0, k])
            b = b_desc.load([n0, k])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([m0, n0], acc.to(tl.bfloat16))

def run():
    dev = "cuda"
    rows = []
    for M, N, K in ((200704, 64, 576), (50176, 128, 1152), (12544, 256, 2304), (50176, 256, 256)):
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        ref = a @ b.T
        t_ref = triton.testing.do_bench_cudagraph(lambda: a @ b.T)
        flop = 2 * M * N * K
        rows.append((M, N, K, "cublas", "", t_ref * 1e3, flop / t_ref / 1e9, 0.0))
        for BM, BN, BK, warps, stages in ((128, 128, 64, 4, 4), (128, 64, 64, 4, 4), (128, 256, 64, 8, 3)):
            if BN > max(64, N):
                continue
            for kind in ("plain", "persistent"):
                for ws in (False, True):
                    c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
                    ad = TensorDescriptor.from_tensor(a, [BM, BK]); bd = TensorDescriptor.from_tensor(b, [BN, BK])
                    cd = TensorDescriptor.from_tensor(c, [BM, BN])
                    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
                    try:
                        if kind == "plain":
                            f = lambda: mm[(tiles,)](ad, bd, cd, M, N, K, BM=BM, BN=BN, BK=BK, WS=ws, num_warps=warps, num_stages=stages)
                        else:
                            f = lambda: mm_persistent[(min(132, tiles),)](ad, bd, cd, M, N, K, NUM_SMS=min(132, tiles), BM=BM, BN=BN, BK=BK, WS=ws, num_warps=warps, num_stages=stages)
                        f(); torch.cuda.synchronize()
                        err = ((c.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                        t = triton.testing.do_bench_cudagraph(f)
                        rows.append((M, N, K, f"{kind} {BM}x{BN}x{BK} w{warps} s{stages}", "WS" if ws else "", t * 1e3, flop / t / 1e9, err))
                    except Exception as e:
                        rows.append((M, N, K, f"{kind} {BM}x{BN}x{BK} w{warps} s{stages}", ("WS" if ws else "") + " FAIL " + type(e).__name__ + str(e)[:80], 0, 0, 0))
                    print(rows[-1], flush=True)
    print("\n M N K | variant | ws | us | TFLOP/s | err")
    for r in rows:
        print(f"{r[0]} {r[1]} {r[2]} | {r[3]} | {r[4]} | {r[5]:.1f} | {r[6]:.0f} | {r[7]:.1e}")

if __name__ == "__main__":
    run()
