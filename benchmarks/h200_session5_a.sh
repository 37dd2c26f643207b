#!/bin/bash
# Session 5's first check round, one nvidia-h200-x2 call (about 5 minutes):
#   GPU 0: the persistent TMA conv kernel against the existing configs and cuDNN
#          (sweep_conv_persistent.py); host time per call with the tensor-map cache off and on
#   GPU 1: the backward-filter candidates for small images and conv1 (sweep_wgrad.py);
#          conv1 forward with every algorithm (the padded-row GEMM); the float32 DEFAULT
#          (3xTF32) forward against cuDNN with tf32 off; GPU tests of the TMA kernels
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session5_a.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 170 python3 benchmarks/sweep_conv_persistent.py --out "$OUT/g0" --budget-s 140 \
        > "$OUT/g0/persistent.log" 2>&1; echo "persistent rc=$?"
    for cache in 0 1; do
        TRIDNN_CACHE_TMA_MAPS=$cache timeout 60 python3 benchmarks/profile_gpu_host_overhead.py --calls 1000 \
            > "$OUT/g0/host_cache$cache.log" 2>&1; echo "host cache=$cache rc=$?"
    done
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 110 python3 benchmarks/sweep_wgrad.py --out "$OUT/g1" --budget-s 90 > "$OUT/g1/wgrad.log" 2>&1
    echo "wgrad rc=$?"
    timeout 60 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/conv1" --sections rn50-fwd --layers conv1 \
        --budget-s 50 > "$OUT/g1/conv1.log" 2>&1; echo "conv1 rc=$?"
    timeout 100 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/fp32d" --sections fp32-default --algos get \
        --budget-s 85 > "$OUT/g1/fp32d.log" 2>&1; echo "fp32 default rc=$?"
    TRIDNN_GPU_TESTS=1 timeout 60 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_cuda_conv_tma.py \
        tests/test_cuda_wgrad_tma.py tests/test_tma_map_cache.py > "$OUT/g1/tests.log" 2>&1; echo "tests rc=$?"
}
gpu0 & gpu1 &
wait
echo "=== persistent"; sed -n '/^| *layer/,$p' "$OUT/g0/persistent.log" | cut -c1-150 | head -30
tail -5 "$OUT/g0/persistent.log" | cut -c1-150
for c in 0 1; do echo "=== host cache=$c"; grep -E "^ *(run-empty|conv-fwd|functional|torch-op|F.conv2d)" "$OUT/g0/host_cache$c.log"; done
echo "=== wgrad"; tail -25 "$OUT/g1/wgrad.log" | cut -c1-150
echo "=== conv1"; grep -E "^rn50" "$OUT/g1/conv1.log" | cut -c1-250
echo "=== fp32 default"; grep -E "^\| (fp32|section)|^fp32" "$OUT/g1/fp32d.log" | cut -c1-110
echo "=== tests"; tail -4 "$OUT/g1/tests.log"
tar czf /tmp/all.tgz -C "$OUT" g0 g1 && rm -rf "${OUT:?}"/g0 "${OUT:?}"/g1 && mv /tmp/all.tgz "$OUT/all.tgz"
