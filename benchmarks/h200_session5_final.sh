#!/bin/bash
# Session 5's closing GPU round on one H200 (about 9 minutes): ResNet-50 bf16 NHWC batch 64
# forward, backward data and backward filter with get's choice (what a user gets without
# find), CUDA-graph medians against cuDNN.
# Usage (device tool, kind nvidia-h200): bash benchmarks/h200_session5_final.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/conv"
for s in rn50-fwd:150 rn50-bwd_data:150 rn50-bwd_filter:190; do
    name=${s%%:*}; budget=${s##*:}
    timeout $((budget + 30)) python3 benchmarks/bench_gpu_conv.py --out "$OUT/conv/$name" --sections "$name" \
        --algos get --budget-s "$budget" > "$OUT/conv/$name.log" 2>&1; echo "$name rc=$?"
done
grep -hE "^\| (rn50|section)|skipped" "$OUT"/conv/*.log
grep -hE "^rn50" "$OUT"/conv/*.log | cut -c1-110
tar czf /tmp/all.tgz -C "$OUT" conv && rm -rf "${OUT:?}"/conv && mv /tmp/all.tgz "$OUT/all.tgz"
