#!/bin/bash
# Session 3's closing GPU measurements, one nvidia-h200-x2 call (about 5.5 minutes):
#   GPU 0: ResNet-50 forward and backward data, bf16 NHWC batch 64, get's choice per layer
#          against cuDNN (bench_gpu_conv.py --algos get)
#   GPU 1: ResNet-50 backward filter the same way, then the layer benchmark (the new
#          channels-last pooling kernels and their alternatives) and the pooling GPU tests
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_conv_pool.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/fwd" "$OUT/wgrad"
status() { echo "$*" | tee -a "$OUT/status.txt"; }
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 300 python3 benchmarks/bench_gpu_conv.py --out "$OUT/fwd" --sections rn50-fwd,rn50-bwd_data \
      --algos get --budget-s 270 > "$OUT/fwd/conv.log" 2>&1; status "conv fwd+dgrad rc=$?"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 150 python3 benchmarks/bench_gpu_conv.py --out "$OUT/wgrad" --sections rn50-bwd_filter \
      --algos get --budget-s 130 > "$OUT/wgrad/conv.log" 2>&1; status "conv wgrad rc=$?"
  timeout 90 python3 benchmarks/bench_gpu_layers.py --out "$OUT/bench_gpu_layers.json" --budget-s 75 \
      > "$OUT/layers.log" 2>&1; status "layers bench rc=$?"
  TRIDNN_GPU_TESTS=1 timeout 70 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_cuda_layers.py \
      tests/test_pooling_cl.py -k "pool" > "$OUT/pool_tests.log" 2>&1; status "pool tests rc=$?"
) &
wait
echo "=== conv"; grep -E "geomean|^\| rn50" "$OUT/fwd/conv.log" "$OUT/wgrad/conv.log" | cut -c1-160
echo "=== pooling"; grep -E "pool" "$OUT/layers.log" | grep -E "TB/s|SLOWER|<85" | tail -40 | cut -c1-150
echo "=== pool tests"; tail -2 "$OUT/pool_tests.log" | cut -c1-200
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
