#!/bin/bash
# Session 6's last GPU round, one nvidia-h200-x2 call (about 5 minutes), on the final
# defaults: GPU 0 the float32 ResNet-50 forward suites (tf32, strict FMA, DEFAULT 3xTF32);
# GPU 1 every layer (bench_gpu_layers), host time per call, and the eager training step.
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session6_d.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 260 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/fp32" --sections fp32-tf32,fp32-strict,fp32-default \
        --algos get --budget-s 230 > "$OUT/g0/fp32.log" 2>&1; echo "fp32 rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 140 python3 benchmarks/bench_gpu_layers.py --out "$OUT/g1/layers.json" --budget-s 110 \
        > "$OUT/g1/layers.log" 2>&1; echo "layers rc=$?"
    timeout 60 python3 benchmarks/profile_gpu_host_overhead.py --calls 1000 --out "$OUT/g1/host.json" \
        > "$OUT/g1/host.log" 2>&1; echo "host rc=$?"
    timeout 100 python3 examples/ddp_train.py --device cuda --model resnet50 --dtype bfloat16 --channels-last \
        --batch-size 64 --compare torch --steps 3 --rounds 2 --warmup 2 --json "$OUT/g1/eager.json" \
        > "$OUT/g1/eager.log" 2>&1; echo "eager rc=$?"
}
gpu0 & gpu1 &
wait
grep -hE "^\| (fp32|section)|skipped" "$OUT/g0/fp32.log"
grep -hE "^fp32" "$OUT/g0/fp32.log" | cut -c1-100
echo "=== layers"; sed -n '/ copy /,$p' "$OUT/g1/layers.log" | grep -v "\[" | cut -c1-110
echo "=== host"; grep -vE "^ +[0-9]|ncalls|^$|function calls|Ordered by" "$OUT/g1/host.log" | cut -c1-140 | head -40
echo "=== eager"; tail -4 "$OUT/g1/eager.log" | cut -c1-200
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
