#!/bin/bash
# Session 6's second GPU round, one nvidia-h200-x2 call (about 7 minutes): the helpers'
# first sweeps and the ResNet-50 forward / backward data suites with the fitted boxes.
#   GPU 0: sweep_conv_streamk (stream-K), sweep_group_norm, then ResNet-50 forward (get);
#   GPU 1: sweep_depthwise_wgrad, sweep_pooling, then ResNet-50 backward data (get).
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session6_b.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 120 python3 benchmarks/sweep_conv_streamk.py --out "$OUT/g0" --budget-s 90 > "$OUT/g0/streamk.log" 2>&1
    echo "streamk rc=$?"
    timeout 100 python3 benchmarks/sweep_group_norm.py --out "$OUT/g0" > "$OUT/g0/gn.log" 2>&1; echo "gn rc=$?"
    timeout 180 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/fwd" --sections rn50-fwd --algos get \
        --budget-s 160 > "$OUT/g0/fwd.log" 2>&1; echo "fwd rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 110 python3 benchmarks/sweep_depthwise_wgrad.py --out "$OUT/g1" --budget-s 80 > "$OUT/g1/dww.log" 2>&1
    echo "dw wgrad rc=$?"
    timeout 110 python3 benchmarks/sweep_pooling.py --out "$OUT/g1" > "$OUT/g1/pool.log" 2>&1; echo "pool rc=$?"
    timeout 180 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/dgrad" --sections rn50-bwd_data --algos get \
        --budget-s 160 > "$OUT/g1/dgrad.log" 2>&1; echo "dgrad rc=$?"
}
gpu0 & gpu1 &
wait
echo "=== streamk"; tail -32 "$OUT/g0/streamk.log" | cut -c1-150
echo "=== gn"; tail -22 "$OUT/g0/gn.log" | cut -c1-150
echo "=== dw wgrad"; tail -14 "$OUT/g1/dww.log" | cut -c1-150
echo "=== pool"; tail -40 "$OUT/g1/pool.log" | cut -c1-150
grep -hE "^\| (rn50|section)|skipped" "$OUT/g0/fwd.log" "$OUT/g1/dgrad.log"
grep -hE "^rn50" "$OUT/g0/fwd.log" "$OUT/g1/dgrad.log" | cut -c1-100
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
