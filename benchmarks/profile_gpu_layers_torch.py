"""Where an eager training step's time goes in tridnn.torch's layers: host or GPU.

    PYTHONPATH=src python3 benchmarks/profile_gpu_layers_torch.py     (one GPU; ~30 s)

tridnn.torch's BatchNorm2d and Conv2d against torch's own, bf16 channels_last, forward +
backward, on a tiny tensor (2x64x8x8: host time only) and a ResNet-50 res2 size
(64x64x56x56): wall time per iteration (20 iterations, synchronized at the end) and
torch.profiler's per-op table (self CPU and CUDA time). Where the wall time is far above
the CUDA total, the layer is host-bound."""
import copy
import time
import torch
import tridnn.torch as tt
dev = "cuda"
bf, cl = torch.bfloat16, torch.channels_last
for shape in ((2, 64, 8, 8), (64, 64, 56, 56)):
    x = torch.randn(*shape, device=dev, dtype=bf).contiguous(memory_format=cl).requires_grad_(True)
    g = torch.randn(*shape, device=dev, dtype=bf).contiguous(memory_format=cl)
    for name, mod in (("bn", torch.nn.BatchNorm2d(64)), ("conv", torch.nn.Conv2d(64, 64, 3, padding=1, bias=False))):
        theirs = mod.to(device=dev, dtype=bf).to(memory_format=cl)
        ours = tt.convert(copy.deepcopy(theirs))
        for label, m in (("tridnn", ours), ("torch", theirs)):
            for _ in range(3):
                m(x).backward(g)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                m(x).backward(g)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / 20 * 1e6
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    m(x).backward(g)
                torch.cuda.synchronize()
            print(f"===== {name} {label} {shape}: wall {wall:.1f} us/iter")
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=70))
