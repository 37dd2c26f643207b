#!/bin/bash
# Session 3's last GPU checks, one nvidia-h200-x2 call (about 6 minutes):
#   GPU 0: the layer benchmark with this session's alternatives (gelu fast erf, NHWC dropout
#          designs, split reductions), the full-size GPU tests of those layers, then the host
#          time per call after the launch-recipe and layer-path changes
#   GPU 1: the large-tensor checks that failed or did not fit (depthwise FFT after the grid
#          fix, backward data ALGO_0 with the harness freeing cached memory), then the GPU soak
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_final.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT"
status() { echo "$*" | tee -a "$OUT/status.txt"; }
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 150 python3 benchmarks/bench_gpu_layers.py --out "$OUT/bench_gpu_layers.json" --budget-s 130 \
      > "$OUT/layers.log" 2>&1; status "layers bench rc=$?"
  TRIDNN_GPU_TESTS=1 timeout 170 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_cuda_layers.py \
      tests/test_gelu_fast.py -k "dropout or reduce or adaptive or gelu or activation" > "$OUT/layer_tests.log" 2>&1
  status "layer tests rc=$?"
  timeout 60 python3 benchmarks/profile_gpu_host_overhead.py --out "$OUT" --calls 1000 > "$OUT/host.log" 2>&1
  status "host rc=$?"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 200 python3 benchmarks/gpu_large_tensors.py --out "$OUT" --time-budget-s 180 \
      --only "depthwise FFT,bwd_data depthwise ALGO_0,bwd_data batch ALGO_0" > "$OUT/large.log" 2>&1
  status "large rc=$?"
  TRIDNN_TUNE=first timeout 170 python3 benchmarks/soak.py --device cuda --calls 100000 --warmup 5000 \
      --json "$OUT/soak_gpu.json" > "$OUT/soak.log" 2>&1; status "soak rc=$?"
) &
wait
echo "=== layers"; grep -E "SLOWER|geomean" "$OUT/layers.log" | cut -c1-150 | tail -30
echo "=== layer tests"; tail -2 "$OUT/layer_tests.log" | cut -c1-200
echo "=== host"; tail -18 "$OUT/host.log" | cut -c1-100
echo "=== large"; grep -E "pass|FAIL|skip" "$OUT/large.log" | tail -5 | cut -c1-160
echo "=== soak"; tail -25 "$OUT/soak.log" | cut -c1-160
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
