#!/bin/bash
# Session 5's last GPU round, one nvidia-h200-x2 call (about 8 minutes):
#   the backward-filter layers whose bf16 results differed most from cuDNN's in the 11:50
#   run, both against float64 (check_gpu_conv_accuracy.py); ResNet-50 bf16 channels-last
#   batch 64 training, tridnn vs torch, both as CUDA graphs, on 1 GPU and then on 2 (DDP).
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session5_last.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
COMMON="--device cuda --model resnet50 --dtype bfloat16 --channels-last --batch-size 64 --compare torch --steps 10 --rounds 3"
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 110 python3 benchmarks/check_gpu_conv_accuracy.py \
      --layers res4_3x3s2:bwd_filter,res5_3x3:bwd_filter,res4_3x3:bwd_filter,res5_3x3s2:bwd_filter,res2_3x3:bwd_filter \
      > "$OUT/accuracy.log" 2>&1; echo "accuracy rc=$?"
) &
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 230 python3 examples/ddp_train.py $COMMON --cuda-graph --warmup 3 --json "$OUT/graph_1gpu.json" \
      > "$OUT/graph_1gpu.log" 2>&1; echo "graph 1 GPU rc=$?"
) &
wait
timeout 200 torchrun --standalone --nproc_per_node=2 examples/ddp_train.py $COMMON --cuda-graph --warmup 11 \
    --json "$OUT/graph_2gpu.json" > "$OUT/graph_2gpu.log" 2>&1; echo "graph 2 GPUs rc=$?"
echo "=== accuracy"; tail -12 "$OUT/accuracy.log" | cut -c1-160
echo "=== graph 1 GPU"; tail -4 "$OUT/graph_1gpu.log" | cut -c1-200
echo "=== graph 2 GPUs"; tail -4 "$OUT/graph_2gpu.log" | cut -c1-200
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
