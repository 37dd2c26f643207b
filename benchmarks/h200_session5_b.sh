#!/bin/bash
# Session 5's second check round, one nvidia-h200-x2 call (about 6 minutes):
#   GPU 0: the depthwise TMA row-streaming kernels (sweep_depthwise_tma.py), the layer
#          variants behind switches (sweep_layers_c1.py: layer norm, dropout, reductions;
#          sweep_pooling.py)
#   GPU 1: the backward-filter candidates again (sweep_wgrad.py), conv1 forward with every
#          algorithm (the new im2col), host time per call and the eager training step
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session5_b.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 150 python3 benchmarks/sweep_depthwise_tma.py --out "$OUT/g0" --budget-s 110 \
        > "$OUT/g0/dw.log" 2>&1; echo "depthwise rc=$?"
    timeout 130 python3 benchmarks/sweep_layers_c1.py --out "$OUT/g0" > "$OUT/g0/c1.log" 2>&1; echo "c1 rc=$?"
    timeout 110 python3 benchmarks/sweep_pooling.py --out "$OUT/g0" > "$OUT/g0/pool.log" 2>&1; echo "pool rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 150 python3 benchmarks/sweep_wgrad.py --out "$OUT/g1" --budget-s 120 > "$OUT/g1/wgrad.log" 2>&1
    echo "wgrad rc=$?"
    timeout 60 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/conv1" --sections rn50-fwd --layers conv1 \
        --budget-s 50 > "$OUT/g1/conv1.log" 2>&1; echo "conv1 rc=$?"
    timeout 60 python3 benchmarks/profile_gpu_host_overhead.py --calls 1000 > "$OUT/g1/host.log" 2>&1
    echo "host rc=$?"
    TRIDNN_TUNE=first timeout 90 python3 benchmarks/profile_gpu_train_step.py --warmup 2 --steps 5 \
        > "$OUT/g1/profile.log" 2>&1; echo "profile rc=$?"
}
gpu0 & gpu1 &
wait
echo "=== depthwise"; tail -22 "$OUT/g0/dw.log" | cut -c1-160
echo "=== c1"; tail -40 "$OUT/g0/c1.log" | cut -c1-140
echo "=== pooling"; tail -40 "$OUT/g0/pool.log" | cut -c1-140
echo "=== wgrad"; sed -n '/^| layer/,$p' "$OUT/g1/wgrad.log" | cut -c1-170
echo "=== conv1"; grep -E "^rn50" "$OUT/g1/conv1.log" | cut -c1-250
echo "=== host"; grep -E "^ *(run-empty|conv-fwd|functional|torch-op|F.conv2d|act-|bn-)" "$OUT/g1/host.log"
echo "=== eager"; grep -E "per step|GPU kernel time" "$OUT/g1/profile.log"
tar czf /tmp/all.tgz -C "$OUT" g0 g1 && rm -rf "${OUT:?}"/g0 "${OUT:?}"/g1 && mv /tmp/all.tgz "$OUT/all.tgz"
