"""Average pooling backward on channels-last tensors: tridnn's kernels against float64 references.

    PYTHONPATH=src python3 benchmarks/diag_avg_pool_backward.py

Why: on the H200 (session 11) test_gpu_pooling_channels_last_rows failed on the 64x256x56x56
bf16 case: tridnn's dx was the reference's shifted by one column. The reference there is
torch's float64 avg_pool2d backward of a channels-last tensor on the GPU. This script computes
dx four ways for 3x3 / stride 2 / padding 1 (both count modes) and prints the largest
differences: tridnn with the channels-last row kernels (CL_KERNELS) and without, torch on the
GPU in channels-last and in contiguous float64, torch on the CPU, and a NumPy loop over the
windows (the definition).
"""
from __future__ import annotations

import numpy as np
import torch

from tridnn.cuda import pooling


def numpy_avg_backward(dy, shape, include):
    """dx of a 3x3 / 2 / pad 1 average pool, straight from the definition (float64)."""
    n, c, h, w = shape
    dx = np.zeros(shape)
    oh, ow = dy.shape[2], dy.shape[3]
    for i in range(oh):
        for j in range(ow):
            r0, c0 = 2 * i - 1, 2 * j - 1
            rows = [r for r in range(r0, r0 + 3) if 0 <= r < h]
            cols = [q for q in range(c0, c0 + 3) if 0 <= q < w]
            count = 9 if include else len(rows) * len(cols)
            for r in rows:
                for q in cols:
                    dx[:, :, r, q] += dy[:, :, i, j] / count
    return dx


def tridnn_dx(x, dy, mode, cl_kernels):
    pooling.CL_KERNELS = cl_kernels
    y = torch.full(dy.shape, float("nan"), device="cuda", dtype=x.dtype).contiguous(memory_format=torch.channels_last)
    dx = torch.full(x.shape, float("nan"), device="cuda", dtype=x.dtype).contiguous(memory_format=torch.channels_last)
    pooling.pooling_forward(x, y, mode, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
    pooling.pooling_backward(y, dy, x, dx, mode, (3, 3), (1, 1), (2, 2), False, 1.0, 0.0)
    return dx.double()


def torch_dx(x, dy, include, device, channels_last):
    xr = x.double().to(device)
    xr = xr.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    xr.requires_grad_()
    torch.nn.functional.avg_pool2d(xr, 3, 2, 1, count_include_pad=include).backward(dy.double().to(device))
    return xr.grad.double().cuda()


def main():
    g = torch.Generator(device="cuda").manual_seed(1)
    for shape, dtype in [((64, 256, 56, 56), torch.bfloat16), ((2, 256, 56, 56), torch.float32),
                         ((2, 8, 56, 56), torch.float32), ((3, 37, 29, 31), torch.bfloat16)]:
        x = torch.randint(-4, 5, shape, device="cuda", generator=g).to(dtype).contiguous(
            memory_format=torch.channels_last)
        oh, ow = (shape[2] - 1) // 2 + 1, (shape[3] - 1) // 2 + 1
        dy = torch.randn((shape[0], shape[1], oh, ow), device="cuda", generator=g).to(dtype).contiguous(
            memory_format=torch.channels_last)
        small = shape[0] * shape[1] <= 512
        for mode, include in ((1, True), (2, False)):
            ways = {"tridnn CL": tridnn_dx(x, dy, mode, True), "tridnn rows": tridnn_dx(x, dy, mode, False),
                    "torch cuda CL": torch_dx(x, dy, include, "cuda", True),
                    "torch cuda NCHW": torch_dx(x, dy, include, "cuda", False),
                    "torch cpu CL": torch_dx(x, dy, include, "cpu", True)}
            if small:
                ways["numpy"] = torch.from_numpy(numpy_avg_backward(dy.double().cpu().numpy(), shape, include)).cuda()
            base = ways["torch cuda NCHW"]
            print(f"{shape} {str(dtype)[6:]} mode {mode}: max |dx - torch cuda NCHW| " + ", ".join(
                f"{k} {(v - base).abs().max().item():.2e}" for k, v in ways.items()), flush=True)
            print("    row 0, cols 0-3: " + "; ".join(
                f"{k} {[round(t, 4) for t in v[0, 0, 0, :4].tolist()]}" for k, v in ways.items()), flush=True)
    pooling.CL_KERNELS = True


if __name__ == "__main__":
    main()
