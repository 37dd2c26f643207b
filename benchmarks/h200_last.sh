#!/bin/bash
# The checks still open after h200_final.sh, one nvidia-h200-x2 call (about 5.5 minutes):
#   GPU 0: the GPU soak (100,000 calls, bf16 cycle, kernels compiled on the first cycle)
#   GPU 1: backward data ALGO_0 on both large tensors (the tuner no longer copies its 72 GiB
#          column buffer; expandable segments so earlier checks' cached blocks can be
#          returned), then the layer benchmark with this session's settings as defaults and
#          the GPU tests of gelu, dropout and the reductions
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_last.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT"
status() { echo "$*" | tee -a "$OUT/status.txt"; }
(
  export CUDA_VISIBLE_DEVICES=0
  TRIDNN_TUNE=first timeout 320 python3 benchmarks/soak.py --device cuda --calls 100000 --warmup 5000 \
      --json "$OUT/soak_gpu.json" > "$OUT/soak.log" 2>&1; status "soak rc=$?"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 python3 benchmarks/gpu_large_tensors.py \
      --out "$OUT" --time-budget-s 100 --only "bwd_data depthwise ALGO_0,bwd_data batch ALGO_0" \
      > "$OUT/large.log" 2>&1; status "large rc=$?"
  timeout 120 python3 benchmarks/bench_gpu_layers.py --out "$OUT/bench_gpu_layers.json" --budget-s 100 \
      > "$OUT/layers.log" 2>&1; status "layers bench rc=$?"
  TRIDNN_GPU_TESTS=1 timeout 110 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_gelu_fast.py \
      tests/test_cuda_layers.py -k "gelu or dropout or reduce or adaptive" > "$OUT/layer_tests.log" 2>&1
  status "layer tests rc=$?"
) &
wait
echo "=== soak"; tail -22 "$OUT/soak.log" | cut -c1-160
echo "=== large"; grep -E "pass|FAIL|skip" "$OUT/large.log" | tail -3 | cut -c1-160
echo "=== layers"; grep -E "SLOWER|geomean" "$OUT/layers.log" | cut -c1-150 | tail -25
echo "=== layer tests"; tail -2 "$OUT/layer_tests.log" | cut -c1-200
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
