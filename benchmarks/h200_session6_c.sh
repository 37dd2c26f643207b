#!/bin/bash
# Session 6's third GPU round, one nvidia-h200-x2 call (about 8 minutes): the helpers'
# final sweeps, every conv_tma config on the 3x3 layers (fitted boxes), and the suites.
#   GPU 0: sweep_conv_persistent on the 3x3 forward layers, sweep_depthwise_wgrad,
#          sweep_group_norm, then ResNet-50 backward filter (get);
#   GPU 1: sweep_pooling, sweep_layers_b2, bench_gpu_layers (all layers, defaults), then
#          the MobileNetV2 depthwise suites (get).
# Usage (device tool, kind nvidia-h200-x2): bash benchmarks/h200_session6_c.sh
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$OUT/g0" "$OUT/g1"
gpu0() {
    export CUDA_VISIBLE_DEVICES=0
    timeout 110 python3 benchmarks/sweep_conv_persistent.py --out "$OUT/g0/pers" --budget-s 80 \
        --layers res3_3x3,res4_3x3,res5_3x3,res2_3x3 --directions fwd > "$OUT/g0/pers.log" 2>&1; echo "pers rc=$?"
    timeout 110 python3 benchmarks/sweep_depthwise_wgrad.py --out "$OUT/g0" --budget-s 80 > "$OUT/g0/dww.log" 2>&1
    echo "dw wgrad rc=$?"
    timeout 100 python3 benchmarks/sweep_group_norm.py --out "$OUT/g0" > "$OUT/g0/gn.log" 2>&1; echo "gn rc=$?"
    timeout 200 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g0/wgrad" --sections rn50-bwd_filter --algos get \
        --budget-s 175 > "$OUT/g0/wgrad.log" 2>&1; echo "wgrad rc=$?"
}
gpu1() {
    export CUDA_VISIBLE_DEVICES=1
    timeout 110 python3 benchmarks/sweep_pooling.py --out "$OUT/g1" > "$OUT/g1/pool.log" 2>&1; echo "pool rc=$?"
    timeout 100 python3 benchmarks/sweep_layers_b2.py --out "$OUT/g1" > "$OUT/g1/b2.log" 2>&1; echo "b2 rc=$?"
    timeout 140 python3 benchmarks/bench_gpu_layers.py --out "$OUT/g1/layers.json" --budget-s 110 \
        > "$OUT/g1/layers.log" 2>&1; echo "layers rc=$?"
    timeout 140 python3 benchmarks/bench_gpu_conv.py --out "$OUT/g1/dw" --sections dw-fwd,dw-bwd_data,dw-bwd_filter \
        --algos get --budget-s 110 > "$OUT/g1/dw.log" 2>&1; echo "dw rc=$?"
}
gpu0 & gpu1 &
wait
echo "=== pers"; grep -E "^  res|^\| res|^# res" "$OUT/g0/pers.log" | cut -c1-150 | tail -60
echo "=== dw wgrad"; grep -E "geomean|tuner" "$OUT/g0/dww.log" | cut -c1-120
echo "=== gn"; grep -E "TB/s" "$OUT/g0/gn.log" | cut -c1-120
echo "=== pool"; sed -n '/^copy /,$p' "$OUT/g1/pool.log" | cut -c1-140
echo "=== b2"; tail -25 "$OUT/g1/b2.log" | cut -c1-140
echo "=== layers"; sed -n '/ copy /,$p' "$OUT/g1/layers.log" | cut -c1-140 | tail -70
grep -hE "^\| (rn50|dw|section)|skipped" "$OUT/g0/wgrad.log" "$OUT/g1/dw.log"
grep -hE "^(rn50|dw)" "$OUT/g0/wgrad.log" "$OUT/g1/dw.log" | cut -c1-100
cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/all.tgz"
