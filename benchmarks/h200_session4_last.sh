#!/bin/bash
# Session 4's last GPU round, one nvidia-h200-x2 call (about 6 minutes):
#   GPU 0: host time per call (profile_gpu_host_overhead.py, after the activation and batch
#          norm recipes); one eager training step profiled; ResNet-50 bf16 channels-last
#          batch 64 training on one GPU, tridnn vs torch, both as CUDA graphs
#   GPU 1: the whole layer benchmark with this session's defaults (LRN one-read, NCHW max
#          pooling rows, NCHW bias planes)
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session4_last.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT"
COMMON="--device cuda --model resnet50 --dtype bfloat16 --channels-last --batch-size 64 --compare torch --steps 10 --rounds 3"
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 60 python3 benchmarks/profile_gpu_host_overhead.py --out "$OUT" --calls 1000 > "$OUT/host.log" 2>&1
  echo "host rc=$?"
  TRIDNN_TUNE=first timeout 80 python3 benchmarks/profile_gpu_train_step.py --warmup 2 --steps 5 \
      > "$OUT/profile.log" 2>&1; echo "profile rc=$?"
  timeout 210 python3 examples/ddp_train.py $COMMON --cuda-graph --warmup 3 --json "$OUT/graph_1gpu.json" \
      > "$OUT/graph_1gpu.log" 2>&1; echo "graph 1 GPU rc=$?"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 150 python3 benchmarks/bench_gpu_layers.py --out "$OUT/bench_gpu_layers.json" --budget-s 130 \
      > "$OUT/layers.log" 2>&1; echo "layers bench rc=$?"
) &
wait
echo "=== host"; grep -E "^ *(conv-fwd|functional|torch-op|F.conv2d|act-|bn-|stream|run-empty)" "$OUT/host.log" | cut -c1-110
echo "=== eager step"; grep -E "per step|GPU kernel time" "$OUT/profile.log"
echo "=== graph 1 GPU"; tail -4 "$OUT/graph_1gpu.log" | cut -c1-200
echo "=== layers"; sed -n '/ s. copy /,$p' "$OUT/layers.log" | grep -v "\[" | cut -c1-100
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
