#!/bin/bash
# Session 4's fourth GPU round, one nvidia-h200-x2 call (about 7 minutes):
#   GPU 0: tridnn and cuDNN against float64 on the layers whose bf16 results differed by
#          ~one rounding an element; ResNet-50 backward filter at batch 256 (get's choice);
#          the tensor-op rows (NCHW bias add, H*W reductions, global average pooling) old
#          and new;
#   GPU 1: ResNet-50 forward and backward data at batch 256 (get's choice), then the GPU
#          tests of the new tensor-op kernels.
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session4_b256.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 110 python3 benchmarks/check_gpu_conv_accuracy.py > "$OUT/g0/accuracy.log" 2>&1; echo "accuracy rc=$?"
    timeout 200 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/b256" --batch 256 --sections rn50-bwd_filter \
        --algos get --budget-s 180 > "$OUT/g0/b256.log" 2>&1; echo "b256 wgrad rc=$?"
    for only in "add_tensor bias" "reduce sum HW" "adaptive avgpool 1x1"; do
        timeout 50 python3 benchmarks/bench_gpu_layers.py --only "$only" --out "$OUT/g0/${only// /_}.json" \
            --budget-s 40 > "$OUT/g0/${only// /_}.log" 2>&1; echo "$only rc=$?"
    done
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 330 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/b256" --batch 256 --sections rn50-fwd,rn50-bwd_data \
        --algos get --budget-s 300 > "$OUT/g1/b256.log" 2>&1; echo "b256 fwd/dgrad rc=$?"
    TRIDNN_GPU_TESTS=1 timeout 60 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_cuda_tensor_ops_fast.py \
        > "$OUT/g1/tests.log" 2>&1; echo "tensor ops tests rc=$?"
}
gpu0 & gpu1 &
wait
cat "$OUT/g0/accuracy.log" | tail -n 8
grep -hE "^\| (rn50|section)|skipped" "$OUT/g1/b256.log" "$OUT/g0/b256.log"
grep -hE "^rn50" "$OUT/g1/b256.log" "$OUT/g0/b256.log" | cut -c1-90
tail -n 2 "$OUT/g1/tests.log"
for f in add_tensor_bias reduce_sum_HW adaptive_avgpool_1x1; do sed -n '/ s. copy /,$p' "$OUT/g0/$f.log" | cut -c1-100; done
tar czf "$OUT/all.tgz" -C "$OUT" g0 g1
