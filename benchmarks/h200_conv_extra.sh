#!/bin/bash
# The GPU convolution suites beyond ResNet-50 bf16, one nvidia-h200-x2 call (about 4
# minutes): MobileNetV2 depthwise bf16 NHWC (every algorithm, forward and both backward
# directions) on GPU 0; float32 forward with tf32 and strict (get's choice) and the fused
# conv + bias + relu + residual on GPU 1.
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_conv_extra.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/dw" "$OUT/fp32"
(CUDA_VISIBLE_DEVICES=0 timeout 230 python3 benchmarks/bench_gpu_conv.py --out "$OUT/dw" \
    --sections dw-fwd,dw-bwd_data,dw-bwd_filter --algos all --budget-s 200 > "$OUT/dw/conv.log" 2>&1; echo "dw rc=$?") &
(CUDA_VISIBLE_DEVICES=1 timeout 230 python3 benchmarks/bench_gpu_conv.py --out "$OUT/fp32" \
    --sections fp32-tf32,fp32-strict,fused --algos get --budget-s 200 > "$OUT/fp32/conv.log" 2>&1; echo "fp32 rc=$?") &
wait
grep -hE "geomean|^\| (dw|fp32|fused)|skipped" "$OUT/dw/conv.log" "$OUT/fp32/conv.log" | cut -c1-200
grep -hE "^(dw|fp32|fused)" "$OUT/dw/conv.log" "$OUT/fp32/conv.log" | cut -c1-150
