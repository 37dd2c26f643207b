#!/bin/bash
# Session 4's closing GPU round, one nvidia-h200-x2 call (about 8 minutes):
#   GPU 0: ResNet-50 forward and backward data with get's choice (the headline geomeans),
#          strict float32 forward (the FMA config lists), the LRN and pooling rows with the
#          new defaults, the GPU tests of the LRN, NCHW pooling and depthwise kernels;
#   GPU 1: MobileNetV2 depthwise (the tuned depthwise kernels), then ResNet-50 backward
#          filter with get's choice.
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session4_final.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 220 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/rn50" --sections rn50-fwd,rn50-bwd_data \
        --algos get --budget-s 195 > "$OUT/g0/rn50.log" 2>&1; echo "rn50 fwd/dgrad rc=$?"
    timeout 120 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/fp32" --sections fp32-strict \
        --algos get --budget-s 100 > "$OUT/g0/fp32.log" 2>&1; echo "fp32 rc=$?"
    timeout 50 python3 benchmarks/bench_gpu_layers.py --only lrn5 --out "$OUT/g0/lrn.json" --budget-s 35 \
        > "$OUT/g0/lrn.log" 2>&1; echo "lrn rc=$?"
    timeout 50 python3 benchmarks/bench_gpu_layers.py --only pool3x3s2 --out "$OUT/g0/pool.json" --budget-s 35 \
        > "$OUT/g0/pool.log" 2>&1; echo "pool rc=$?"
    TRIDNN_GPU_TESTS=1 timeout 90 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_cuda_lrn_fast.py \
        tests/test_pooling_nchw.py tests/test_cuda_depthwise.py > "$OUT/g0/tests.log" 2>&1; echo "tests rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 300 python3 benchmarks/bench_gpu_depthwise.py --out "$OUT/g1/dw" --batch 64 --algos DIRECT,ALGO_0,ALGO_1 \
        --budget-s 260 > "$OUT/g1/dw.log" 2>&1; echo "dw rc=$?"
    timeout 200 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/wgrad" --sections rn50-bwd_filter \
        --algos get --budget-s 175 > "$OUT/g1/wgrad.log" 2>&1; echo "rn50 wgrad rc=$?"
}
gpu0 & gpu1 &
wait
grep -hE "^\| (rn50|fp32|section)|skipped" "$OUT/g0/rn50.log" "$OUT/g1/wgrad.log" "$OUT/g0/fp32.log"
grep -hE "geomean ratio" "$OUT/g1/dw.log"
grep -hE "^(rn50|fp32)" "$OUT/g0/rn50.log" "$OUT/g1/wgrad.log" "$OUT/g0/fp32.log" | cut -c1-100
tail -n 3 "$OUT/g0/tests.log"
for f in lrn pool; do sed -n '/ s. copy /,$p' "$OUT/g0/$f.log" | grep -v "\[" | cut -c1-100; done
tar czf "$OUT/all.tgz" -C "$OUT" g0 g1
