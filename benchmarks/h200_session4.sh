#!/bin/bash
# Session 4's GPU round, one nvidia-h200-x2 call (about 8 minutes):
#   GPU 0: MobileNetV2 depthwise (the new 3x3 kernels, every direction), then get's choice
#          on the strided / small-image ResNet-50 layers the TMA work targets, then the GPU
#          tests of the depthwise kernels;
#   GPU 1: the strict-float32 config sweep, the per-config phases / small-image benchmark,
#          the batch norm, pooling and LRN rows (old and new kernels side by side), then the
#          GPU tests of those layers.
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session4.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 250 python3 benchmarks/bench_gpu_depthwise.py --out "$OUT/g0/dw" --batch 64 --algos DIRECT,ALGO_0,ALGO_1 \
        --budget-s 220 > "$OUT/g0/dw.log" 2>&1; echo "dw rc=$?"
    timeout 170 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/conv" --sections rn50-fwd,rn50-bwd_data,rn50-bwd_filter \
        --algos get --layers res3_3x3s2,res4_3x3s2,res5_3x3s2,res4_3x3,res5_3x3,res5_1x1a,res5_1x1c --budget-s 140 \
        > "$OUT/g0/conv.log" 2>&1; echo "conv rc=$?"
    TRIDNN_GPU_TESTS=1 timeout 60 python3 -m pytest -q -x -p no:cacheprovider --gpu tests/test_cuda_depthwise.py \
        > "$OUT/g0/tests.log" 2>&1; echo "dw tests rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 120 python3 benchmarks/sweep_fp32_fma.py --out "$OUT/g1/fp32" --budget-s 100 > "$OUT/g1/fp32.log" 2>&1
    echo "fp32 rc=$?"
    timeout 170 python3 benchmarks/bench_conv_phases.py --out "$OUT/g1/phases" --budget-s 150 > "$OUT/g1/phases.log" 2>&1
    echo "phases rc=$?"
    for only in batchnorm pool lrn; do
        timeout 80 python3 benchmarks/bench_gpu_layers.py --only $only --out "$OUT/g1/$only.json" --budget-s 60 \
            > "$OUT/g1/$only.log" 2>&1; echo "$only rc=$?"
    done
    TRIDNN_GPU_TESTS=1 timeout 60 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_cuda_bn_l2.py \
        tests/test_cuda_lrn_fast.py tests/test_pooling_nchw.py > "$OUT/g1/tests.log" 2>&1; echo "layer tests rc=$?"
}
gpu0 & gpu1 &
wait
tail -n 14 "$OUT/g0/dw.log"; grep -hE "^\| (rn50|section)" "$OUT/g0/conv.log"; grep -hE "^rn50" "$OUT/g0/conv.log" | cut -c1-120
tail -n 2 "$OUT/g0/tests.log" "$OUT/g1/tests.log"
tail -n 9 "$OUT/g1/fp32.log"; tail -n 30 "$OUT/g1/phases.log" | cut -c1-160
for only in batchnorm pool lrn; do sed -n '/ s. copy /,$p' "$OUT/g1/$only.log" | cut -c1-110; done
tar czf "$OUT/all.tgz" -C "$OUT" g0 g1
