#!/bin/bash
# ResNet-50 bf16 NHWC batch 64, get's choice per layer against cuDNN, one nvidia-h200-x2
# call (about 4 minutes): forward and backward data on GPU 0, backward filter on GPU 1.
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_conv_get.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/fwd" "$OUT/wgrad"
(CUDA_VISIBLE_DEVICES=0 timeout 215 python3 benchmarks/bench_gpu_conv.py --out "$OUT/fwd" \
    --sections rn50-fwd,rn50-bwd_data --algos get --budget-s 190 > "$OUT/fwd/conv.log" 2>&1; echo "fwd rc=$?") &
(CUDA_VISIBLE_DEVICES=1 timeout 215 python3 benchmarks/bench_gpu_conv.py --out "$OUT/wgrad" \
    --sections rn50-bwd_filter --algos get --budget-s 190 > "$OUT/wgrad/conv.log" 2>&1; echo "wgrad rc=$?") &
wait
grep -hE "geomean|^\| rn50|skipped" "$OUT/fwd/conv.log" "$OUT/wgrad/conv.log" | cut -c1-200
grep -hE "^rn50" "$OUT/fwd/conv.log" "$OUT/wgrad/conv.log" | cut -c1-110
