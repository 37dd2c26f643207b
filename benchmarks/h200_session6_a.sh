#!/bin/bash
# Session 6's first GPU round, one nvidia-h200-x2 call (about 7 minutes), on the code that
# session 5 left (the suites it did not rerun):
#   GPU 0: ResNet-50 bf16 NHWC batch 256 forward and backward data (get's choice);
#   GPU 1: batch 256 backward filter, then float32 forward (tf32 / strict FMA / DEFAULT
#          3xTF32), the fused conv + bias + relu + residual, and host overhead;
#   then GPU 0: eager (no CUDA graph) training step, tridnn vs torch, and host time per call.
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session6_a.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 300 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/b256" --batch 256 --sections rn50-fwd,rn50-bwd_data \
        --algos get --budget-s 270 > "$OUT/g0/b256.log" 2>&1; echo "b256 fwd/dgrad rc=$?"
    timeout 100 python3 examples/ddp_train.py --device cuda --model resnet50 --dtype bfloat16 --channels-last \
        --batch-size 64 --compare torch --steps 5 --rounds 3 --warmup 3 --json "$OUT/g0/eager.json" \
        > "$OUT/g0/eager.log" 2>&1; echo "eager rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 200 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/b256" --batch 256 --sections rn50-bwd_filter \
        --algos get --budget-s 180 > "$OUT/g1/b256.log" 2>&1; echo "b256 wgrad rc=$?"
    timeout 190 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/fp32" \
        --sections overhead,fused,fp32-tf32,fp32-strict,fp32-default --algos get --budget-s 175 \
        > "$OUT/g1/fp32.log" 2>&1; echo "fp32/fused rc=$?"
    timeout 60 python3 benchmarks/profile_gpu_host_overhead.py --calls 1000 --out "$OUT/g1/host.json" \
        > "$OUT/g1/host.log" 2>&1; echo "host rc=$?"
}
gpu0 & gpu1 &
wait
grep -hE "^\| (rn50|fp32|fused|section)|skipped|host overhead" "$OUT"/g*/b256.log "$OUT/g1/fp32.log"
grep -hE "^(rn50|fp32|fused)" "$OUT"/g*/b256.log "$OUT/g1/fp32.log" | awk '$NF ~ /}/ || 1' | cut -c1-100
echo "=== eager"; tail -4 "$OUT/g0/eager.log" | cut -c1-200
echo "=== host"; tail -25 "$OUT/g1/host.log" | cut -c1-140
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
