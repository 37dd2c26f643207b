#!/bin/bash
# Training throughput after the eager-dispatch and CUDA-graph work, plus this session's layer
# kernels (one nvidia-h200-x2 call, about 9.5 minutes; each step has its own time limit):
#
#   GPU 0: host time per call (profile_gpu_host_overhead.py); one eager training step
#          profiled (TRIDNN_TUNE=first: host time is the question); ResNet-50 bf16
#          channels-last batch 64 on one GPU, tridnn vs torch, both as CUDA graphs
#   GPU 1: the layer benchmark (bench_gpu_layers.py) and the full-size GPU tests of the
#          layers changed this session (dropout, reduce/pooling, layer/RMS norm, gelu, BN)
#   both : the same model under DDP on 2 GPUs with --cuda-graph (torchrun)
#
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_training.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT"
status() { echo "$*" | tee -a "$OUT/status.txt"; }
COMMON="--device cuda --model resnet50 --dtype bfloat16 --channels-last --batch-size 64 --compare torch --steps 10 --rounds 3"
(
  export CUDA_VISIBLE_DEVICES=0
  timeout 60 python3 benchmarks/profile_gpu_host_overhead.py --out "$OUT" --calls 1000 > "$OUT/host.log" 2>&1
  status "host rc=$?"
  TRIDNN_TUNE=first timeout 80 python3 benchmarks/profile_gpu_train_step.py --warmup 2 --steps 5 \
      > "$OUT/profile.log" 2>&1; status "profile rc=$?"
  timeout 210 python3 examples/ddp_train.py $COMMON --cuda-graph --warmup 3 --json "$OUT/graph_1gpu.json" \
      > "$OUT/graph_1gpu.log" 2>&1; status "graph 1 GPU rc=$?"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  timeout 130 python3 benchmarks/bench_gpu_layers.py --out "$OUT/bench_gpu_layers.json" --budget-s 110 \
      > "$OUT/layers.log" 2>&1; status "layers bench rc=$?"
  TRIDNN_GPU_TESTS=1 timeout 200 python3 -m pytest -q -p no:cacheprovider --gpu tests/test_cuda_layers.py \
      -k "dropout or reduce or pool or layer_and_rms or norm or gelu or batch_norm" > "$OUT/layer_tests.log" 2>&1
  status "layer tests rc=$?"
) &
wait
timeout 200 torchrun --standalone --nproc_per_node=2 examples/ddp_train.py $COMMON --cuda-graph --warmup 11 \
    --json "$OUT/graph_2gpu.json" > "$OUT/graph_2gpu.log" 2>&1; status "graph 2 GPUs rc=$?"
echo "=== host"; tail -20 "$OUT/host.log" | cut -c1-120
echo "=== eager step"; grep -E "per step|GPU kernel time" "$OUT/profile.log"
echo "=== graph 1 GPU"; tail -6 "$OUT/graph_1gpu.log" | cut -c1-200
echo "=== graph 2 GPUs"; tail -6 "$OUT/graph_2gpu.log" | cut -c1-200
echo "=== layer tests"; tail -2 "$OUT/layer_tests.log" | cut -c1-200
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
