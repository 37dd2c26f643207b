"""Does bench_gpu_layers' NHWC global average pooling reach gluon_stream, and how fast is it?

Session 8 (2026-11-30): bench_gpu_layers measured NHWC adaptive average pooling at 2.64 TB/s
where sweep_gluon_stream's sum over H*W ran 3.64. This prints, for the bench's tensors
(64x256x56x56 bfloat16 channels-last), whether each routing rule takes the Gluon path, and
the CUDA-graph time of: the public call, gluon_stream.sum_hw_into alone, and the public call
with GLUON_STREAM off; the same for batch-norm training forward.

    PYTHONPATH=src python benchmarks/diag_gluon_route.py
"""
import torch

from tridnn.cuda import batchnorm, gluon_stream, pooling, tensor_ops
from tridnn.cuda.common import gpu_time_ms


def main():
    x = torch.randn(64, 256, 56, 56, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    ay = torch.empty((64, 256, 1, 1), device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    nbytes = x.numel() * 2 + ay.numel() * 2
    print("gluon_device_ok", tensor_ops.gluon_device_ok(x.device), "GLUON_STREAM", tensor_ops.GLUON_STREAM)
    print("sum_hw_why_not", gluon_stream.sum_hw_why_not(x, ay), "gluon_route", tensor_ops.gluon_route(x, ay, tensor_ops.RED_AVG))
    print("bn_stats_why_not", gluon_stream.bn_stats_why_not(x))
    calls = {"public adaptive avg": lambda: pooling.adaptive_pooling_forward(x, ay, 1, 1.0, 0.0),
             "sum_hw_into alone": lambda: gluon_stream.sum_hw_into(x, ay, 1.0, 0.0, mean=True),
             "reduce_tensor AVG": lambda: tensor_ops.reduce_tensor(x, ay, None, None, tensor_ops.RED_AVG, 1.0, 0.0, False)}
    want = x.double().mean((2, 3), keepdim=True)
    for name, fn in calls.items():
        ms = gpu_time_ms(fn)
        err = ((ay.double() - want).abs().max() / want.abs().max()).item()
        print(f"{name:24s} {ms * 1e3:7.1f} us {nbytes / ms / 1e9:5.2f} TB/s err {err:.1e}")
    tensor_ops.GLUON_STREAM = False
    ms = gpu_time_ms(calls["public adaptive avg"])
    print(f"{'public, GLUON_STREAM off':24s} {ms * 1e3:7.1f} us {nbytes / ms / 1e9:5.2f} TB/s")
    tensor_ops.GLUON_STREAM = True
    for on in (True, False):
        batchnorm.GLUON_STREAM = on
        print("bn gluon_stats_route", on, batchnorm.gluon_stats_route(x, 1))


if __name__ == "__main__":
    main()
